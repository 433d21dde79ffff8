// Inside the decoder, panel 2: the cross-attention, the real thing. The focused decoder layer's
// queries come from the decoder (its state after the self-attention, y₁), its keys and values
// from the encoder's output (the same S rows for every step and layer), split into heads, scored
// QKᵀ/√d_k, softmaxed over the source (only its padding masked), and the heads' contexts
// concatenated and projected by W_o. Every number is the engine's (src/report.rs
// `DecoderTraceItem`), the probabilities the translation's own.

import { scale } from '../../colour.js';
import { el, heatmap, hoverTip, num } from '../inside/plot.js';
import { shownToken as shown, stepLabel } from '../../result.js';

const flat = (rows, c0 = 0, c1 = rows[0]?.length ?? 0) => Float32Array.from(rows.flatMap((r) => Array.from(r).slice(c0, c1)));
const absMax = (v) => Math.max(1e-6, ...Array.from(v, Math.abs));

function build(target) {
  target.replaceChildren();
  target.classList.add('inside-panel', 'decoder-panel');
  const p = { intro: el('p', 'inside-intro'), shapes: el('p', 'inside-formula'), grid: el('div', 'dec-cross-grid'), concat: el('p', 'inside-note') };
  target.append(...Object.values(p));
  target._p = p;
}

/**
 * `data`: the decoder trace of one source; `probs`: the translation's cross-attention of the
 * focused layer and head, `[T][S]`; `written`: the token each step writes, `[T]` (a step's row
 * is labelled `writes ← reads`, as the translation view's); `opts`: {head, step, width, fontPx}.
 */
export function render(target, data, { probs, written, head = 0, step = 0, width = 900, fontPx = 11 }) {
  if (!target._p) build(target);
  const p = target._p;
  const T = data.cross_q.length, S = data.cross_k.length, D = data.cross_q[0].length;
  const H = data.heads, dk = data.head_dim, h = Math.min(head, H - 1), t = Math.max(0, Math.min(T - 1, step));
  const c0 = h * dk, c1 = c0 + dk;
  const rowsT = data.target_tokens.map((x, i) => stepLabel(written[i], x)), rowsS = data.source_tokens.map(shown);
  // in a tooltip: a decoder step (from 1), its position (from 0) and the token it reads; a source token and its position
  const q_ = (r) => `step ${r + 1} (position ${r}, reads “${shown(data.target_tokens[r])}”)`, s_ = (c) => `“${rowsS[c]}” at position ${c}`;
  const dims = Array.from({ length: dk }, (_, j) => String(c0 + j));
  p.intro.textContent = `Decoder layer ${data.layer}, after its self-attention: the decoder's ${T} positions ask, the encoder's output answers. Queries come from the decoder, keys and values from the encoder: the matrix is ${T} × ${S}, steps × source tokens, and only the source's padding is masked (no no-peek: the whole source is known from the start).`;
  p.shapes.textContent = `Q = y₁ W_q: (${T} × ${D}) from the decoder · K = memory W_k, V = memory W_v: (${S} × ${D}) from the encoder · view as ${H} heads of d_k = ${dk}, transpose: Q (${H} × ${T} × ${dk}), K and V (${H} × ${S} × ${dk}) · head ${h}: softmax(Q Kᵀ / √${dk}) V → (${T} × ${dk})`;
  p.grid.replaceChildren();
  const panel = (title, values, rows, cols, sc, { rowLabels, colLabels, text, outline, after = null, describe, cellW = 34 }) => {
    const f = el('figure', 'dec-cross-fig');
    f.append(el('figcaption', 'inside-caption', title));
    const c = el('canvas');
    c.setAttribute('role', 'img');
    c.setAttribute('aria-label', title);
    f.append(c);
    p.grid.append(f);
    c._g = heatmap(c, { values, rows, cols, sc, rowLabels, colLabels, width: Math.min(width < 700 ? width - 10 : width / 2 - 20, 60 + cols * cellW), cellH: Math.max(12, Math.min(24, 300 / rows)), fontPx, text, outline, after });
    hoverTip(target, c, (cell) => cell && describe(cell.r, cell.c));
    return c;
  };
  const q = flat(data.cross_q, c0, c1), k = flat(data.cross_k, c0, c1), v = flat(data.cross_v, c0, c1);
  const scores = flat(data.cross_scores[h]), a = flat(probs), ctx = flat(data.cross_context, c0, c1);
  const vsc = (x) => scale('score', { max: absMax(x) });
  panel(`Q, head ${h}: ${T} × ${dk}, from the decoder`, q, T, dk, vsc(q), { rowLabels: rowsT, outline: { r: t }, after: t, cellW: 12, describe: (r, c) => `Q, ${q_(r)}, dimension ${c} of head ${h} (${c0 + c} of ${D}): ${num(q[r * dk + c], 4)}` });
  panel(`K, head ${h}: ${S} × ${dk}, from the encoder`, k, S, dk, vsc(k), { rowLabels: rowsS, cellW: 12, describe: (r, c) => `K, ${s_(r)}, dimension ${c} of head ${h}: ${num(k[r * dk + c], 4)}` });
  panel(`Scores Q Kᵀ / √${dk}: ${T} steps (queries ↓) × ${S} source tokens (keys →)`, scores, T, S, vsc(scores), { rowLabels: rowsT, colLabels: rowsS, outline: { r: t }, after: t, text: (r, c) => num(scores[r * S + c], 1), describe: (r, c) => `q of ${q_(r)} · k of ${s_(c)}, ÷ √${dk}: ${num(scores[r * S + c], 4)}` });
  panel(`softmax over the source: ${T} steps (queries ↓) × ${S} source tokens (keys →), each row sums to 1`, a, T, S, scale('probability'), { rowLabels: rowsT, colLabels: rowsS, outline: { r: t }, after: t, text: (r, c) => (a[r * S + c] >= 0.005 ? a[r * S + c].toFixed(2).replace(/^0/, '') : ''), describe: (r, c) => `${q_(r)} → ${s_(c)}: ${num(a[r * S + c], 4)}` });
  panel(`V, head ${h}: ${S} × ${dk}, from the encoder`, v, S, dk, vsc(v), { rowLabels: rowsS, cellW: 12, describe: (r, c) => `V, ${s_(r)}, dimension ${c} of head ${h}: ${num(v[r * dk + c], 4)}` });
  panel(`context = softmax · V: ${T} × ${dk}`, ctx, T, dk, vsc(ctx), { rowLabels: rowsT, outline: { r: t }, after: t, cellW: 12, describe: (r, c) => `context, ${q_(r)}, dimension ${c} of head ${h}: ${num(ctx[r * dk + c], 4)}` });
  const row = Array.from(probs[t]);
  const best = row.map((x, i) => [x, i]).sort((x, y) => y[0] - x[0]).slice(0, 2).filter(([x], j) => j === 0 || x >= 0.005);
  p.concat.textContent = `Step ${t + 1} (position ${t}, reading “${shown(data.target_tokens[t])}”): head ${h} puts ${best.map(([x, i]) => `${num(x, 2)} on ${s_(i)}`).join(' and ')}; its context row is that mix of V's rows. The ${H} heads' contexts, side by side, are (${T} × ${D}) again; W_o projects them, and y₁ + that output goes through LayerNorm (panel 3).`;
}
