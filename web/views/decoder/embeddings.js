// Inside the decoder, panel 1: what the decoder reads at each step, with the model's numbers.
// Step t reads the output token t (the decoder start token at step 0: the output shifted right)
// as its embedding row times the embedding scale (√d_model for Marian) plus the sinusoidal
// position t, Marian's non-interleaved one (sines in the first half of the dimensions, cosines
// in the second). `data`: src/report.rs `DecoderTraceItem`.

import { scale } from '../../colour.js';
import { el, heatmap, hoverTip, num } from '../inside/plot.js';
import { shownToken as shown, stepLabel } from '../../result.js';

const norm = (v) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));

function build(target) {
  target.replaceChildren();
  target.classList.add('inside-panel', 'decoder-panel');
  const p = {
    intro: el('p', 'inside-intro'), formula: el('p', 'inside-formula'), stripsCap: el('p', 'inside-caption'), strips: el('canvas'),
    norms: el('p', 'inside-note'), peCap: el('p', 'inside-caption'), pe: el('canvas'), peNote: el('p', 'inside-note'),
  };
  p.strips.setAttribute('role', 'img');
  p.pe.setAttribute('role', 'img');
  target.append(...Object.values(p));
  target._p = p;
  hoverTip(target, p.strips, (cell) => cell && target._v && `${target._v.rows[cell.r]}, dimension ${cell.c}: ${num(target._v.strips[cell.r * target._v.D + cell.c], 4)}`);
  hoverTip(target, p.pe, (cell) => cell && target._v && `position ${cell.r}, dimension ${cell.c} (${cell.c < target._v.D / 2 ? 'sin' : 'cos'}): ${num(target._v.pe[cell.r * target._v.D + cell.c], 4)}`);
}

/** `opts`: {step, written: the token each step writes, `[T]` (a row is labelled `writes ← reads`, as the translation view's), width, fontPx}. */
export function render(target, data, { step = 0, written, width = 900, fontPx = 11 }) {
  if (!target._p) build(target);
  const p = target._p;
  const T = data.word.length, D = data.word[0].length, t = Math.max(0, Math.min(T - 1, step));
  const tok = shown(data.target_tokens[t]);
  const word = Array.from(data.word[t]), pos = Array.from(data.position[t]);
  const sum = word.map((x, j) => x + pos[j]);
  const k = data.embed_scale;
  p.intro.textContent = `The decoder reads the output shifted right: the step at position p reads the token the step before it wrote (position 0 reads the decoder start token, “${shown(data.target_tokens[0])}”: Marian reuses its pad token). Like the encoder, it adds a position to each token's embedding; unlike BERT's learned table, Marian's positions are fixed sinusoids, and the embedding row is first multiplied by √d_model.`;
  p.formula.textContent = `x_${t} = E[“${tok}”] · √d_model + PE(${t}) = E[“${tok}”] · ${num(k, 4)} + PE(${t})   (d_model = ${D}, √${D} = ${num(Math.sqrt(D), 4)})`;
  p.stripsCap.textContent = `Step ${t + 1}'s input, at position ${t}: every one of its ${D} dimensions (hover for the numbers)`;
  const strips = Float32Array.from([...word, ...pos, ...sum]);
  const max = Math.max(1e-6, ...strips.map(Math.abs));
  const rows = [`E[“${tok}”] · ${num(k, 2)}`, `PE(${t})`, 'sum: the decoder\'s input'];
  p.strips._g = heatmap(p.strips, { values: strips, rows: 3, cols: D, sc: scale('score', { max }), rowLabels: rows, width: Math.min(width, 1100), cellH: 22, fontPx, top: 4 });
  p.strips.setAttribute('aria-label', `step ${t + 1}'s scaled token embedding, position encoding and their sum, ${D} dimensions each`);
  p.norms.textContent = `Lengths: ‖E[“${tok}”]‖ = ${num(norm(word) / k)} before the scale, ${num(norm(word))} after; ‖PE(${t})‖ = ${num(norm(pos))} (every position's is √(d_model / 2) = ${num(Math.sqrt(D / 2))}). The √d_model factor brings the token's row to the size of its position's, so neither drowns the other in the sum.`;
  p.peCap.textContent = `The positions the decoder read, PE(0…${T - 1}) × ${D} dimensions, a row a step (writes ← reads): sines in dimensions 0–${D / 2 - 1}, cosines in ${D / 2}–${D - 1}`;
  const pe = Float32Array.from(data.position.flatMap((r) => Array.from(r)));
  p.pe._g = heatmap(p.pe, { values: pe, rows: T, cols: D, sc: scale('score', { max: 1 }), rowLabels: data.target_tokens.map((x, i) => stepLabel(written[i], x)), width: Math.min(width, 1100), cellH: Math.max(10, Math.min(20, 240 / T)), fontPx, top: 4, outline: { r: t } });
  p.pe.setAttribute('aria-label', `the sinusoidal positions 0 to ${T - 1}, ${D} dimensions: sines in the first half, cosines in the second`);
  p.peNote.textContent = `PE(p, j) = sin(p / 10000^(j / ${D / 2})) for j < ${D / 2}, cos(p / 10000^((j − ${D / 2}) / ${D / 2})) after: Marian's layout (HF's MarianSinusoidalPositionalEmbedding). The original paper's (and the notes') interleave the same waves, sin in even dimensions and cos in odd: a permutation of the columns. Left columns change fast with the position, right ones slowly; the model never learned them.`;
  target._v = { rows, strips, pe, D };
}
