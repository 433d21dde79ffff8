// Inside the decoder, panel 3: one decoder layer's order, with the focused step's numbers.
// Marian is post-LN: each sublayer's output is added to its input and the sum normalised,
// y₁ = LN(y + SelfAttn(y)), y₂ = LN(y₁ + CrossAttn(y₁, memory)), y₃ = LN(y₂ + FFN(y₂)).
// `data`: src/report.rs `DecoderTraceItem`.

import { scale } from '../../colour.js';
import { el, heatmap, hoverTip, num } from '../inside/plot.js';
import { shownToken as shown } from '../../result.js';

const stats = (v) => {
  const n = v.length, mean = v.reduce((a, x) => a + x, 0) / n;
  return { mean, std: Math.sqrt(v.reduce((a, x) => a + (x - mean) ** 2, 0) / n), norm: Math.sqrt(v.reduce((a, x) => a + x * x, 0)) };
};

/** Each value in the layer's order: its name in the trace, its short label, what it is. */
const STEPS = [
  ['input', 'y', 'y: the layer\'s input'],
  ['self_output', 'SelfAttn(y)', 'SelfAttn(y), under the no-peek mask'],
  ['self_sum', 'y + SelfAttn', 'y + SelfAttn(y): the residual'],
  ['self_normed', 'y₁ = LN(…)', 'y₁ = LayerNorm(y + SelfAttn(y))'],
  ['cross_output', 'CrossAttn(y₁)', 'CrossAttn(q = y₁, k = v = memory)'],
  ['cross_sum', 'y₁ + CrossAttn', 'y₁ + CrossAttn(…)'],
  ['cross_normed', 'y₂ = LN(…)', 'y₂ = LayerNorm(y₁ + CrossAttn(…))'],
  ['ffn_output', 'FFN(y₂)', 'FFN(y₂) = W₂ act(W₁ y₂)'],
  ['ffn_sum', 'y₂ + FFN', 'y₂ + FFN(y₂)'],
  ['output', 'y₃ = LN(…)', 'y₃ = LayerNorm(y₂ + FFN(y₂)): the output'],
];

function build(target) {
  target.replaceChildren();
  target.classList.add('inside-panel', 'decoder-panel');
  const p = { intro: el('p', 'inside-intro'), formula: el('p', 'inside-formula'), cap: el('p', 'inside-caption'), strips: el('canvas'), table: el('table', 'inside-table'), note: el('p', 'inside-note') };
  p.strips.setAttribute('role', 'img');
  target.append(...Object.values(p));
  target._p = p;
  hoverTip(target, p.strips, (cell) => cell && target._v && `${STEPS[cell.r][2]}, dimension ${cell.c}: ${num(target._v.values[cell.r * target._v.D + cell.c], 4)}`);
}

/** `opts`: {step, width, fontPx}. */
export function render(target, data, { step = 0, width = 900, fontPx = 11 }) {
  if (!target._p) build(target);
  const p = target._p;
  const T = data.input.length, D = data.input[0].length, t = Math.max(0, Math.min(T - 1, step));
  p.intro.textContent = `Decoder layer ${data.layer} has three sublayers where the encoder's have two: its self-attention over the steps so far, the cross-attention over the source, and the feed-forward. Around each, a residual connection and a LayerNorm, in Marian's post-LN order (the original Transformer's; GPT-2 is pre-LN: y + Sublayer(LN(y))).`;
  p.formula.textContent = 'y₁ = LN(y + SelfAttn(y)) · y₂ = LN(y₁ + CrossAttn(y₁, memory)) · y₃ = LN(y₂ + FFN(y₂))';
  p.cap.textContent = `Step ${t + 1}, reading “${shown(data.target_tokens[t])}”: each value on its way through the layer, ${D} dimensions a row (each row coloured to its own largest |value|; hover for the numbers)`;
  const rows = STEPS.map(([k]) => Array.from(data[k][t]));
  // each row to its own scale: a LayerNorm's output and a sum differ by orders of magnitude
  const values = Float32Array.from(rows.flatMap((r) => { const m = Math.max(1e-6, ...r.map(Math.abs)); return r.map((x) => x / m); }));
  p.strips._g = heatmap(p.strips, { values, rows: rows.length, cols: D, sc: scale('score', { max: 1 }), rowLabels: STEPS.map(([, l]) => l), width: Math.min(width, 1100), cellH: 18, fontPx, top: 4 });
  p.strips.setAttribute('aria-label', `the focused step's values through decoder layer ${data.layer}, in order`);
  target._v = { values: Float32Array.from(rows.flat()), D };
  p.table.replaceChildren();
  const head = el('tr');
  for (const h of ['value', 'mean', 'std', '‖·‖']) head.append(el('th', '', h));
  p.table.append(head);
  rows.forEach((r, i) => {
    const s = stats(r), tr = el('tr');
    tr.append(el('td', '', STEPS[i][2]), el('td', 'num', num(s.mean)), el('td', 'num', num(s.std)), el('td', 'num', num(s.norm, 2)));
    p.table.append(tr);
  });
  p.note.textContent = 'Each LayerNorm re-centres its sum to mean 0 and unit spread, then applies its learned scale γ and shift β: its output\'s size is γ\'s, whatever the sublayer added. In post-LN the residual path itself runs through every LayerNorm; in pre-LN (GPT-2) it goes around them, and one LayerNorm at the top of the stack (ln_f) normalises the sum.';
}
