// Inside the layer, panel "qknorm" (a model with QK-norm: Qwen3, Gemma 3): each query and key
// head through an RMSNorm of its own before the rotation. The focused head's queries and its
// key/value head's keys before and after their norm (from the engine's layer trace: q, k as
// projected, qNormed and kNormed), the learned scale each dimension is multiplied by (read back
// from those values: q̂ᵢ·rms(q)/qᵢ), and the range of the scores the norm keeps them to, against
// the raw projections'. A switch leaves QK-norm out of every layer (the ablation, rerun).

import { fit } from '../../canvas.js';
import { heatmap, figure, part, begin, robustMax, legendFor, rowNorms, fmt } from './draw.js';

const Q = '#d94801', K = '#2166ac';

/** The RMS of `x` as an RMSNorm takes it: √(mean(x²) + eps). */
const rms = (x, eps) => Math.sqrt(x.reduce((s, v) => s + v * v, 0) / x.length + eps);

/**
 * The scale a norm multiplied each of `d` dimensions by, read back from rows before (`raw`) and
 * after (`normed`) it: for dimension i, normedᵢ·rms(raw)/rawᵢ at the row where |rawᵢ| is largest
 * (the best-conditioned). `rows` rows of `d` each.
 */
export function learnedScale(raw, normed, rows, d, eps) {
  const out = new Float32Array(d), best = new Float32Array(d);
  for (let t = 0; t < rows; t++) {
    const x = raw.subarray(t * d, (t + 1) * d), r = rms(x, eps);
    for (let i = 0; i < d; i++) {
      if (Math.abs(x[i]) > best[i]) { best[i] = Math.abs(x[i]); out[i] = (normed[t * d + i] * r) / x[i]; }
    }
  }
  return out;
}

/** The smallest and largest of `s`·a_q·b_k over the causal pairs k ≤ q < rows of two (rows, d) matrices. */
export function scoreRange(a, b, rows, d, s) {
  let lo = Infinity, hi = -Infinity;
  for (let q = 0; q < rows; q++) {
    for (let k = 0; k <= q; k++) {
      let dot = 0;
      for (let i = 0; i < d; i++) dot += a[q * d + i] * b[k * d + i];
      lo = Math.min(lo, dot * s); hi = Math.max(hi, dot * s);
    }
  }
  return [lo, hi];
}

/** `run`: the result contract; `opts`: {item, layer, head, width, fontPx, modelInfo, noQkNorm, onNoQkNorm}. */
export function render(target, run, opts) {
  const trace = run.traceOf(opts.item);
  const key = [run.id, opts.item, opts.layer, opts.head, opts.width, trace?.layer].join('|');
  const intro = begin(target, key);
  if (!intro) return;
  target.classList.add('qknorm-panel');
  const arch = opts.modelInfo?.architecture, layerInfo = arch?.layers?.[opts.layer];
  if (!layerInfo?.qk_norm) { intro.textContent = 'This layer uses its queries and keys as projected: no QK-norm.'; return; }
  if (!trace || trace.layer !== opts.layer || !trace.names.includes('qNormed')) { intro.textContent = `Layer ${opts.layer}'s normed queries and keys are not in this run yet.`; return; }
  const { layer, head: h, item } = opts;
  const tokens = run.results[item].labels, rows = run.results[item].length, T = run.T;
  const H = run.H, kv = arch.heads?.key_value ?? H, g = Math.floor(h / (H / kv)), d = arch.head_dim;
  const eps = arch.norm_eps ?? 1e-6;
  const s = layerInfo.score_scale ?? 1 / Math.sqrt(d);
  const q = trace.get('q'), k = trace.get('k'), qn = trace.get('qNormed').values, kn = trace.get('kNormed').values;
  // (rows, d) of one head: the projection's columns, and the normed values' (heads, T, d) block
  const cut = (m, head) => { const o = new Float32Array(rows * d); for (let t = 0; t < rows; t++) o.set(m.values.subarray(t * m.width + head * d, t * m.width + (head + 1) * d), t * d); return o; };
  const block = (a, head) => a.slice(head * T * d, head * T * d + rows * d);
  const qRaw = cut(q, h), kRaw = cut(k, g), qHat = block(qn, h), kHat = block(kn, g);
  const ablated = Boolean(run.noQkNorm);

  // the switch and what it says
  const sw = part(target, 'inside-switch', 'label');
  if (!sw.firstChild) {
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.addEventListener('change', () => target._opts?.onNoQkNorm?.(box.checked));
    const words = document.createElement('span');
    words.textContent = ' leave out QK-norm in every layer (the ablation: reruns the whole forward pass; every view on the page then shows it)';
    sw.append(box, words);
  }
  target._opts = opts;
  sw.querySelector('input').checked = Boolean(opts.noQkNorm);
  const banner = part(target, 'inside-banner', 'p');
  banner.hidden = !ablated;
  banner.textContent = 'Ablation on: no layer norms its queries and keys. The model was trained with the norm: every view on this page shows this attention, not the model\'s.';
  const gemma = arch.norm === 'rms' && layerInfo.norms === 'both';
  intro.textContent = `QK-norm: before the rotation, each query head and each key head of layer ${layer} goes through an RMSNorm of its own, q̂ = q / rms(q) ⊙ ${gemma ? '(1 + γ)' : 'γ'}, rms(q) = √(mean(q²) + ε), with a learned scale per dimension shared by every head of the layer (one for the queries, one for the keys). Whatever size the projections grow to, every q̂ and k̂ has the same length up to that scale, so a score q̂·k̂ × ${fmt(s)}${layerInfo.score_scale ? ' (query_pre_attn_scalar^−½)' : ' (1/√d)'} stays within a range the training set, and no logit runs away into a one-hot softmax. Query head ${h} reads key/value head ${g}${kv < H ? ` (shared by ${H / kv} query heads)` : ''}; d = ${d}.`;

  // 1 · q and k before and after their norm, each row's length beside it
  const width = Math.max(280, Math.min(1100, opts.width || 900));
  const figW = width >= 760 ? Math.floor((width - 24) / 2) : width - 4;
  const maps = [
    ['q-raw', `q, head ${h} (as projected)`, qRaw, 'q'],
    ['q-hat', `q̂, head ${h} (after its norm)`, qHat, 'q̂'],
    ['k-raw', `k, key/value head ${g} (as projected)`, kRaw, 'k'],
    ['k-hat', `k̂, key/value head ${g} (after its norm)`, kHat, 'k̂'],
  ];
  for (const [row, pair] of [[part(target, 'inside-row inside-qk-q'), maps.slice(0, 2)], [part(target, 'inside-row inside-qk-k'), maps.slice(2)]]) {
    const max = Math.max(...pair.map(([, , v]) => robustMax(v)));
    for (const [id, title, values, what] of pair) {
      const f = figure(row, id, { legendBox: true });
      const norms = rowNorms(values, d, rows);
      const drawn = heatmap(f.canvas, { values, rows, W: d, tokens, max, width: figW, fontPx: opts.fontPx, norms, what, maxRowPx: 16 });
      const [lo, hi] = [Math.min(...norms), Math.max(...norms)];
      f.set(title, `(${rows}, ${d})`, `‖row‖₂ from ${fmt(lo)} to ${fmt(hi)}${hi > 0 ? ` (×${fmt(hi / Math.max(lo, 1e-9))})` : ''}`);
      legendFor(f.legend, { ...drawn.sc, label: `${what} value (±99th pct of the pair)` });
      f.canvas.setAttribute('aria-label', `${title}: ${rows} tokens × ${d}, row lengths ${fmt(lo)} to ${fmt(hi)}`);
    }
  }

  // 2 · the learned scale of each dimension
  const gq = learnedScale(qRaw, qHat, rows, d, eps), gk = learnedScale(kRaw, kHat, rows, d, eps);
  const sf = figure(part(target, 'inside-row qk-scales'), 'qk-scale');
  sf.set('The learned scale of each dimension', `q̂ᵢ·rms(q)/qᵢ: queries (orange) and keys (blue), i = 0 … ${d - 1}`,
    ablated ? 'The ablation is on: the engine normed nothing, so every scale reads 1.' : `Read back from the values above (each dimension at the token where |qᵢ| is largest). Queries from ${fmt(Math.min(...gq))} to ${fmt(Math.max(...gq))}, keys from ${fmt(Math.min(...gk))} to ${fmt(Math.max(...gk))}.`);
  drawScales(sf.canvas, { gq, gk, width: Math.min(width, 900), fontPx: opts.fontPx });
  sf.canvas.setAttribute('aria-label', `the learned scale of each of ${d} dimensions, queries and keys`);

  // 3 · the range of the scores, with and without the norm
  const [nLo, nHi] = scoreRange(qHat, kHat, rows, d, s), [rLo, rHi] = scoreRange(qRaw, kRaw, rows, d, s);
  const engine = run.scoresOf(item, layer, h);
  let eLo = Infinity, eHi = -Infinity;
  if (engine) for (let a = 0; a < rows; a++) for (let b = 0; b <= a; b++) { eLo = Math.min(eLo, engine[a * T + b]); eHi = Math.max(eHi, engine[a * T + b]); }
  const range = part(target, 'inside-note qk-range', 'p');
  range.textContent = `Head ${h}'s scores over this text (every query against every key it may read, before the rotation, × ${fmt(s)}): with QK-norm q̂·k̂ spans ${fmt(nLo)} … ${fmt(nHi)}; from the raw projections q·k it would span ${fmt(rLo)} … ${fmt(rHi)}.${engine ? ` The engine's scores, turned by their positions, span ${fmt(eLo)} … ${fmt(eHi)}.` : ''}`;
  // what the panel drew, for the tests
  target._qknorm = { h, g, d, normed: [nLo, nHi], raw: [rLo, rHi], engine: engine ? [eLo, eHi] : null, gq: Array.from(gq), gk: Array.from(gk), ablated };
  target.dataset.drawn = String(run.id);
}

/** The query and key scales of each dimension as two rows of bars around 0. */
function drawScales(canvas, { gq, gk, width, fontPx = 11 }) {
  const d = gq.length, hgt = 150, padL = 40, padR = 8, top = 8, mid = 20;
  const ctx = fit(canvas, width, hgt, 0);
  ctx.clearRect(0, 0, width, hgt);
  const max = Math.max(1e-6, ...gq.map(Math.abs), ...gk.map(Math.abs));
  const band = (hgt - top - mid) / 2, bw = Math.max(1, (width - padL - padR) / d);
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  ctx.textBaseline = 'middle';
  ctx.textAlign = 'right';
  [[gq, Q, top, 'q'], [gk, K, top + band + mid, 'k']].forEach(([g, colour, y0, name]) => {
    const zero = y0 + band / 2;
    ctx.fillStyle = '#e5e7eb';
    ctx.fillRect(padL, zero, width - padL - padR, 1);
    ctx.fillStyle = colour;
    for (let i = 0; i < d; i++) {
      const hgtBar = (g[i] / max) * (band / 2);
      ctx.fillRect(padL + i * bw, Math.min(zero, zero - hgtBar), Math.max(1, bw - (bw > 3 ? 1 : 0)), Math.max(1, Math.abs(hgtBar)));
    }
    ctx.fillStyle = '#374151';
    ctx.fillText(name, padL - 6, zero);
  });
  ctx.textAlign = 'left';
  ctx.fillStyle = '#6b7280';
  ctx.fillText(`±${fmt(max)}`, 2, top + 4);
  canvas._describe = (x, y) => {
    const i = Math.floor((x - padL) / bw);
    if (i < 0 || i >= d) return null;
    const which = y < top + band + mid / 2 ? ['query', gq] : ['key', gk];
    return `${which[0]} dimension ${i}: × ${which[1][i].toFixed(4)}`;
  };
}
