// Inside the encoder, panel "context": the focused head's weights · V = its context (T, d_v),
// which is its slice of the layer's concatenated context.

import { fit, bitmap } from '../../canvas.js';
import { square, drawMatrix, cellAt } from '../../matrix.js';
import { scale, pixels } from '../../colour.js';
import { heatmap, figure, part, robustMax, legendFor, columns, begin } from './draw.js';

/** `run`: the result contract; `opts`: {item, layer, head, width, fontPx, modelInfo}. */
export function render(target, run, opts) {
  const trace = run.traceOf(opts.item);
  const key = [run.id, opts.item, opts.layer, opts.head, opts.width, trace?.layer].join('|');
  const intro = begin(target, key);
  if (!intro) return;
  if (!trace || trace.layer !== opts.layer) { intro.textContent = `Layer ${opts.layer}'s values are not in this run yet.`; return; }
  const { head: h, layer, item } = opts;
  const tokens = run.results[item].labels, rows = run.results[item].length, T = run.T;
  const mi = opts.modelInfo ?? {};
  const D = trace.get('v').width, H = mi.heads ?? run.H, dk = mi.head_dim ?? D / H;
  const scaled = run.scale !== 'none';
  intro.textContent = `Head ${h} of layer ${layer}: head_${h} = softmax(Q_h K_hᵀ${scaled ? '/√d_k' : ''})·V_h. Its attention weights (T, T) = (${rows}, ${rows}) mix the rows of its values V_h (T, d_v) = (${rows}, ${dk}): each token's context is the weighted average of the value vectors it attends to, (T, T)·(T, d_v) → (T, d_v). It is columns ${h * dk}–${(h + 1) * dk - 1} of the layer's concatenated context (T, H·d_v) = (${rows}, ${H * dk}).${scaled ? '' : ' (This run leaves the scores undivided by √d_k.)'}`;
  const width = Math.max(280, opts.width || 900);
  const row = part(target, 'inside-row inside-eq');
  // the weights: this head's attention over the real tokens
  const p = run.head(item, layer, h);
  const w = new Float32Array(rows * rows);
  for (let q = 0; q < rows; q++) w.set(p.subarray(q * T, q * T + rows), q * rows);
  const size = Math.max(200, Math.min(360, Math.floor(width * 0.36)));
  const wf = figure(row, 'weights', { legendBox: true });
  const g = square({ width: size, height: size, T: rows, win: null, labels: true, fontPx: opts.fontPx ?? 11 });
  const psc = scale('probability', { max: 1 });
  const ctx = fit(wf.canvas, size, size, rows + 1);
  drawMatrix(ctx, g, { img: bitmap(pixels(w, rows, psc)), rows: tokens, cols: tokens });
  wf.canvas._describe = (x, y) => { const c = cellAt(g, x, y); return c ? `${tokens[c.q]} → ${tokens[c.k]}: ${w[c.q * rows + c.k].toFixed(4)}` : null; };
  wf.set(`softmax(QKᵀ${scaled ? '/√d_k' : ''})`, `(${rows}, ${rows})`, 'queries ↓ · keys →');
  legendFor(wf.legend, psc);
  wf.canvas.setAttribute('aria-label', `head ${h} attention weights of layer ${layer}, ${rows} × ${rows} (queries are rows, keys columns)`);
  const op1 = part(row, 'inside-op', 'span');
  op1.textContent = '·';
  const rest = Math.max(160, Math.min(340, Math.floor((width - size - 100) / 2)));
  const V = trace.get('v'), C = trace.get('context');
  const vh = columns(V.values, D, rows, h * dk, dk), ch = columns(C.values, C.width, rows, h * dk, dk);
  const max = Math.max(robustMax(vh), robustMax(ch));
  const vf = figure(row, 'vh');
  const vs = heatmap(vf.canvas, { values: vh, rows, W: dk, tokens, max, width: rest, fontPx: opts.fontPx, what: `V_${h}`, height: g.size, top: g.y0, maxRowPx: 30 });
  vf.set(`V_${h} = V[:, ${h * dk}:${(h + 1) * dk}]`, `(${rows}, ${dk})`);
  vf.canvas.setAttribute('aria-label', `head ${h}'s values: ${rows} tokens × ${dk}`);
  row.append(vf.fig);
  const op2 = part(row, 'inside-op inside-op2', 'span');
  op2.textContent = '=';
  row.append(op2);
  const cf = figure(row, 'ch', { legendBox: true });
  heatmap(cf.canvas, { values: ch, rows, W: dk, tokens, max, width: rest, fontPx: opts.fontPx, what: `head_${h}`, height: g.size, top: g.y0, maxRowPx: 30 });
  cf.set(`head_${h} = context[:, ${h * dk}:${(h + 1) * dk}]`, `(${rows}, ${dk})`, 'from the engine\'s concatenated context (not recomputed here)');
  legendFor(cf.legend, { ...vs.sc, label: 'V and context value (±99th pct)' });
  cf.canvas.setAttribute('aria-label', `head ${h}'s context: ${rows} tokens × ${dk}, the slice of the layer's context`);
  row.append(cf.fig);
  target.dataset.drawn = String(run.id);
}
