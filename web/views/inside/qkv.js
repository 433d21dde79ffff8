// Inside the encoder, panel "qkv": the focused layer's Q, K and V (T, D); the split into heads
// (T, D) → view (T, H, d_k) → transpose (H, T, d_k) with the focused head on top; the heads'
// outputs concatenated back (context, (T, H·d_v)) and the output projection W_o (with the
// residual and LayerNorm of a post-LN layer: what the engine reports as attentionOutput).

import { fit, bitmap } from '../../canvas.js';
import { pixels } from '../../colour.js';
import { heatmap, figure, part, robustMax, legendFor, columns, begin } from './draw.js';
import { normName } from '../../architecture.js';

/** `run`: the result contract; `opts`: {item, layer, head, width, fontPx, modelInfo}. */
export function render(target, run, opts) {
  const trace = run.traceOf(opts.item);
  const key = [run.id, opts.item, opts.layer, opts.head, opts.width, trace?.layer].join('|');
  const intro = begin(target, key);
  if (!intro) return;
  if (!trace || trace.layer !== opts.layer) { intro.textContent = `Layer ${opts.layer}'s values are not in this run yet.`; return; }
  const { head: h, layer } = opts;
  const tokens = run.results[opts.item].labels, rows = run.results[opts.item].length;
  const mi = opts.modelInfo ?? {};
  const D = trace.get('q').width, H = mi.heads ?? run.H, dk = mi.head_dim ?? D / H;
  const arch = mi.architecture, postLN = (arch?.norm_order ?? 'post') === 'post', N = normName(arch);
  // each projection's heads: K and V have fewer under grouped-query attention, each shared by a group of query heads
  const headsOf = (name) => (name === 'q' ? H : trace.get(name).width / dk);
  const focusOf = (name) => Math.floor(h / (H / headsOf(name)));
  const kv = headsOf('k'), grouped = kv !== H;
  intro.textContent = `Layer ${layer} projects each token's vector x three ways: Q = x·W_Q, K = x·W_K, V = x·W_V${grouped ? `, Q (T, ${D}) = (${rows}, ${D}), K and V (T, ${kv}·d_k) = (${rows}, ${kv * dk})` : `, each (T, D) = (${rows}, ${D})`}${postLN ? '' : ` (from ${N}₁(x): this model is pre-norm)`}. ${grouped
    ? `Q's ${D} columns are ${H} query heads of d_k = ${dk}; K's and V's are ${kv} key/value heads, each shared by ${H / kv} query heads (grouped-query attention): reshaping (T, heads·d_k) → view (T, heads, d_k) → transpose (heads, T, d_k) gives every head its own (T, d_k) slice. Query head ${h} (outlined) reads key/value head ${focusOf('k')}.`
    : `The D = ${D} columns are ${H} heads of d_k = ${dk}: reshaping (T, D) → view (T, H, d_k) → transpose (H, T, d_k) gives every head its own (T, d_k) slice, and each head attends independently. Head ${h} is outlined.`}`;
  const width = Math.max(280, opts.width || 900);
  const figW = width >= 900 ? Math.floor((width - 24) / 3) : width - 4;
  const row1 = part(target, 'inside-row');
  let sc = null;
  const max = Math.max(...['q', 'k', 'v'].map((n) => robustMax(trace.get(n).values.subarray(0, rows * trace.get(n).width))));
  for (const [name, W] of [['q', 'W_Q'], ['k', 'W_K'], ['v', 'W_V']]) {
    const f = figure(row1, name);
    const { values, width: cols } = trace.get(name);
    sc = heatmap(f.canvas, { values, rows, W: cols, tokens, max, width: figW, fontPx: opts.fontPx, band: dk, focus: focusOf(name), what: name.toUpperCase(), maxRowPx: 14 }).sc;
    f.set(`${name.toUpperCase()} = x·${W}`, `(T, ${cols === D ? 'D' : 'heads·d_k'}) = (${rows}, ${cols})`);
    f.canvas.setAttribute('aria-label', `${name.toUpperCase()} of layer ${layer}: ${rows} tokens × ${cols} columns in ${headsOf(name)} bands of ${dk}, head ${focusOf(name)} outlined`);
  }
  legendFor(part(target, 'legend legend-qkv'), { ...sc, label: 'Q, K, V value (±99th pct |value|)' });
  // the split: (H, T, d_k), a stack of heads with the focused one on top
  const row2 = part(target, 'inside-row inside-split');
  const stackW = width >= 900 ? figW : width - 4;
  for (const name of ['q', 'k', 'v']) {
    const f = figure(row2, `split-${name}`);
    const { values, width: cols } = trace.get(name);
    const heads = headsOf(name), focus = focusOf(name);
    drawStack(f.canvas, { values, rows, D: cols, H: heads, dk, focus, width: stackW, sc, tokens, name });
    f.set(`${name.toUpperCase()} split into heads`, `view (${rows}, ${heads}, ${dk}) → transpose (${heads}, ${rows}, ${dk})`);
    f.canvas.setAttribute('aria-label', `${name.toUpperCase()} as ${heads} heads of (${rows}, ${dk}), head ${focus} in front`);
  }
  // after attention: concat (T, H·d_v), then W_o
  const after = part(target, 'inside-after', 'p');
  after.textContent = `Each head computes softmax(Q_h K_hᵀ/√d_k)·V_h, a (T, d_v) = (${rows}, ${dk}) context (panel 3). The ${H} contexts are concatenated back, transpose (H, T, d_v) → (T, H, d_v) → view (T, H·d_v) = (${rows}, ${H * dk}), then W_o projects them to (T, D) = (${rows}, ${D}).`;
  const row3 = part(target, 'inside-row inside-concat');
  const ctx = trace.get('context'), ao = trace.get('attentionOutput');
  const cf = figure(row3, 'context', { legendBox: true });
  const cmax = robustMax(ctx.values.subarray(0, rows * ctx.width));
  const csc = heatmap(cf.canvas, { values: ctx.values, rows, W: ctx.width, tokens, max: cmax, width: width >= 900 ? Math.floor((width - 12) / 2) : width - 4, fontPx: opts.fontPx, band: dk, focus: h, what: 'context', maxRowPx: 14 }).sc;
  cf.set('concat(head₀ … head' + (H - 1) + ')', `(T, H·d_v) = (${rows}, ${ctx.width})`, run.head_mask?.length ? 'a knocked-out head\'s slice is zero' : '');
  legendFor(cf.legend, { ...csc, label: 'context (±99th pct)' });
  cf.canvas.setAttribute('aria-label', `the heads' contexts concatenated: ${rows} × ${ctx.width}, head ${h}'s slice outlined`);
  const of = figure(row3, 'attentionOutput', { legendBox: true });
  const omax = robustMax(ao.values.subarray(0, rows * ao.width));
  const osc = heatmap(of.canvas, { values: ao.values, rows, W: ao.width, tokens, max: omax, width: width >= 900 ? Math.floor((width - 12) / 2) : width - 4, fontPx: opts.fontPx, what: 'attention output', maxRowPx: 14 }).sc;
  of.set(postLN ? `${N}₁(x + context·W_o)` : 'x + context·W_o', `(T, D) = (${rows}, ${ao.width})`,
    postLN ? `Post-norm: the engine reports W_o·context after the residual and the ${N} (what HF's BertAttention returns), not W_o·context alone.`
      : 'Pre-norm: the residual stream after attention, x + W_o·context (no norm here).');
  legendFor(of.legend, { ...osc, label: 'attention output (±99th pct)' });
  of.canvas.setAttribute('aria-label', `the attention sub-layer's output of layer ${layer}: ${rows} × ${ao.width}`);
  target.dataset.drawn = String(run.id);
}

/** The (H, T, d_k) stack: H cards offset diagonally, head `focus` drawn last (in front), outlined. */
function drawStack(canvas, { values, rows, D, H, dk, focus, width, sc, tokens, name }) {
  const cardW = Math.max(40, Math.min(width * 0.45, dk * 4));
  const cardH = Math.max(30, Math.min(150, rows * 6));
  const dx = Math.min(14, (width - cardW - 10) / Math.max(1, H)), dy = Math.min(6, 60 / H);
  const h = Math.ceil(cardH + dy * (H - 1) + 40);
  const ctx = fit(canvas, width, h, 0);
  ctx.clearRect(0, 0, width, h);
  const order = [...Array(H).keys()].filter((i) => i !== focus).reverse().concat([focus]);
  const pos = (i) => ({ x: 4 + (i === focus ? 0 : (i + 1)) * dx, y: 18 + (H - 1 - (i === focus ? -1 : i)) * dy - dy });
  for (const i of order) {
    const slice = columns(values, D, rows, i * dk, dk);
    const { x, y } = pos(i);
    ctx.drawImage(bitmap(pixels(slice, rows, sc, null, dk)), x, y, cardW, cardH);
    ctx.strokeStyle = i === focus ? '#f59e0b' : 'rgba(17,24,39,0.5)';
    ctx.lineWidth = i === focus ? 2.5 : 1;
    ctx.strokeRect(x, y, cardW, cardH);
  }
  ctx.fillStyle = '#b45309';
  ctx.font = '11px system-ui, sans-serif';
  ctx.textBaseline = 'alphabetic';
  ctx.textAlign = 'left';
  const f = pos(focus);
  ctx.fillText(`head ${focus}: ${name.toUpperCase()}[:, ${focus * dk}:${(focus + 1) * dk}]`, f.x, 12);
  ctx.fillStyle = '#6b7280';
  ctx.fillText(`head ${focus} in front, the other ${H - 1} behind it: (${H}, T, ${dk})`, f.x, f.y + cardH + 14);
  canvas._describe = (x, y) => {
    if (x < f.x || y < f.y || x >= f.x + cardW || y >= f.y + cardH) return null;
    const t = Math.floor(((y - f.y) / cardH) * rows), j = Math.floor(((x - f.x) / cardW) * dk);
    return `${tokens[t]} (token ${t}), head ${focus} dim ${j}: ${values[t * D + focus * dk + j].toFixed(4)}`;
  };
}
