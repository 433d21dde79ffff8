// Inside the encoder, panel 4: why scores are divided by √d_k. The ablation switch (the whole
// forward pass reruns with undivided scores), every head's mean row entropy with and without the
// division side by side (two L × H grids, the engine's head metrics under both scales), and the
// experiment behind the rule: Var(q·k) against d_k, with and without ÷√d_k (src/analysis/scaling.rs).

import { fit } from '../../canvas.js';
import { metricScale } from '../../colour.js';
import * as legend from '../legend.js';
import { el, heatmap, hoverTip, num } from './plot.js';

const RAW = '#2166ac', SCALED = '#d94801';

function build(target) {
  target.replaceChildren();
  target.classList.add('inside-panel', 'scale-panel');
  const banner = el('p', 'inside-banner');
  banner.hidden = true;
  const intro = el('p', 'inside-intro');
  const formula = el('p', 'inside-formula');
  const label = el('label', 'inside-switch');
  const box = el('input');
  box.type = 'checkbox';
  box.addEventListener('change', () => target._opts?.onNoScale?.(box.checked));
  label.append(box, el('span', '', ' leave out ÷√d_k in every layer (the ablation: reruns the whole forward pass; every view on the page then shows it)'));
  const grids = el('div', 'inside-row');
  for (const which of ['with', 'without']) {
    const fig = el('figure', 'inside-fig');
    fig.dataset.which = which;
    const cap = el('figcaption');
    const c = el('canvas');
    c.setAttribute('role', 'img');
    fig.append(cap, c);
    grids.append(fig);
    hoverTip(target, c, (cell) => {
      const n = target._numbers;
      if (!cell || !n?.[which]) return null;
      const i = cell.r * n.H + cell.c;
      return `layer ${cell.r}, head ${cell.c}: mean row entropy ${num(n.with[i])} nats with ÷√d_k, ${num(n.without[i])} without`;
    });
    c.addEventListener('click', (e) => {
      const g = c._g, b = c.getBoundingClientRect();
      const col = Math.floor((e.clientX - b.left - g.x0) / g.cw), row = Math.floor((e.clientY - b.top - g.y0) / g.ch);
      if (row >= 0 && col >= 0 && row < g.rows && col < g.cols) target._opts?.onFocus?.(row, col);
    });
  }
  const leg = el('div', 'legend');
  const means = el('p', 'inside-note');
  const varFig = el('figure', 'inside-fig');
  const varCap = el('figcaption');
  const varCanvas = el('canvas');
  varCanvas.setAttribute('role', 'img');
  varFig.append(varCap, varCanvas);
  const varNote = el('p', 'inside-note');
  target.append(banner, intro, formula, label, grids, leg, means, varFig, varNote);
  Object.assign(target._parts = {}, { banner, intro, formula, box, grids, leg, means, varCap, varCanvas, varNote });
}

/** `run`: the result contract; `opts`: the focused {item, layer, head}, {modelInfo, fontPx, width, noScale, onNoScale, onFocus, scaling}. */
export function render(target, run, opts) {
  if (!target._parts) build(target);
  target._opts = opts;
  const p = target._parts, info = opts.modelInfo ?? {};
  const dk = info.head_dim ?? opts.headDim, L = run.L, H = run.H, item = opts.item;
  const ablated = run.scale === 'none';
  p.box.checked = Boolean(opts.noScale);
  p.banner.hidden = !ablated;
  p.banner.textContent = `Ablation on: no layer divides its scores by √d_k = √${dk} ≈ ${Math.sqrt(dk).toFixed(2)}. Every view on this page (model, head, step-by-step, heads) now shows this unscaled attention.`;
  p.intro.textContent = `A score is a dot product of a query and a key of d_k = ${dk} numbers. With entries of variance about 1, q·k has variance about d_k, so scores spread over ±√d_k and softmax pushes each row towards one token (low entropy, tiny gradients). Dividing by √d_k brings the variance back to 1.`;
  p.formula.textContent = `Attention(Q, K, V) = softmax(QKᵀ / √d_k) · V, Q, K: (${run.T}, ${dk}) per head, ${L} layers × ${H} heads; a row's entropy = −Σ_k p_k ln p_k (0 = one-hot, ln ${run.T} = ${Math.log(run.T).toFixed(2)} = uniform over ${run.T} tokens).`;

  // the entropies: the run's scale and the worker's other-scale metrics
  const here = run.metric(item, 'entropy'), other = run.otherMetric(item, 'entropy');
  const withS = ablated ? other : here, without = ablated ? here : other;
  target._numbers = withS && without ? { with: Array.from(withS), without: Array.from(without), L, H } : null;
  const hi = Math.max(1e-6, ...(withS ?? []), ...(without ?? []));
  const sc = metricScale(0, hi, 'mean row entropy (nats)');
  legend.render(p.leg, sc, { masked: false });
  const width = Math.max(300, opts.width ?? 900);
  const gridW = Math.min(560, width >= 700 ? (width - 24) / 2 : width);
  for (const fig of p.grids.querySelectorAll('figure')) {
    const which = fig.dataset.which, values = which === 'with' ? withS : without;
    const c = fig.querySelector('canvas');
    fig.querySelector('figcaption').textContent = which === 'with'
      ? `with ÷√d_k (as trained)${ablated ? '' : ': what the page shows'} · ${L} layers × ${H} heads`
      : `without ÷√d_k (ablated)${ablated ? ': what the page shows' : ''} · ${L} layers × ${H} heads`;
    if (!values) { c.hidden = true; continue; }
    c.hidden = false;
    c._g = heatmap(c, {
      values, rows: L, cols: H, sc, width: gridW, cellH: Math.max(16, Math.min(26, (opts.fontPx ?? 12) * 2)), fontPx: opts.fontPx ?? 11,
      rowLabels: Array.from({ length: L }, (_, l) => `layer ${l}`), colLabels: Array.from({ length: H }, (_, h) => `h${h}`),
      text: (r, col) => values[r * H + col].toFixed(2), outline: { r: opts.layer, c: opts.head },
    });
    const mean = values.reduce((a, b) => a + b, 0) / values.length;
    c.setAttribute('aria-label', `mean row entropy of every head ${which} the division by √d_k, ${L} layers × ${H} heads, mean ${mean.toFixed(2)} nats; focused layer ${opts.layer}, head ${opts.head}: ${values[opts.layer * H + opts.head].toFixed(3)}`);
  }
  if (target._numbers) {
    const m = (a) => a.reduce((x, y) => x + y, 0) / a.length;
    const i = opts.layer * H + opts.head;
    p.means.textContent = `Mean over all ${L * H} heads: ${num(m(withS))} nats with ÷√d_k, ${num(m(without))} without. Layer ${opts.layer}, head ${opts.head} (outlined; click a cell to focus another): ${num(withS[i])} → ${num(without[i])}. Lower entropy = rows closer to one-hot: the saturation the division prevents.`;
  } else p.means.textContent = 'The head entropies under the other scale are on their way from the engine…';

  drawVariance(p, opts.scaling, dk, opts.fontPx ?? 11, Math.min(width, 34 * (opts.fontPx ?? 11) + 240));
  // drawn once both halves and the experiment are in (the other scale comes in a pass of its own)
  if (target._numbers && opts.scaling) target.dataset.drawn = String(run.id);
  else delete target.dataset.drawn;
}

/** Var(q·k) and Var(q·k/√d_k) against d_k on log–log axes, the model's d_k marked. */
function drawVariance(p, points, dk, fontPx, width) {
  p.varCap.textContent = 'The experiment behind the rule: q, k with independent standard-normal entries, Var(q·k) over 2000 random pairs at each d_k (computed by the engine, src/analysis/scaling.rs)';
  const c = p.varCanvas;
  if (!points?.length) { c.hidden = true; p.varNote.textContent = 'The experiment is running in the engine…'; return; }
  c.hidden = false;
  // margins grow with the type (presenter mode): tick labels, the axis titles and the line labels
  const w = width, h = Math.max(260, 22 * fontPx), m = { l: 4.5 * fontPx + 8, r: 13.5 * fontPx, t: fontPx + 10, b: 3.2 * fontPx + 6 };
  const ctx = fit(c, w, h);
  ctx.clearRect(0, 0, w, h);
  const xs = points.map((q) => q.d_k), ys = points.flatMap((q) => [q.raw, q.scaled]);
  const lx0 = Math.log2(Math.min(...xs)), lx1 = Math.log2(Math.max(...xs));
  const ly0 = Math.floor(Math.log10(Math.min(...ys)) - 0.2), ly1 = Math.ceil(Math.log10(Math.max(...ys)));
  const X = (d) => m.l + ((Math.log2(d) - lx0) / Math.max(1e-9, lx1 - lx0)) * (w - m.l - m.r);
  const Y = (v) => h - m.b - ((Math.log10(v) - ly0) / Math.max(1e-9, ly1 - ly0)) * (h - m.t - m.b);
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  ctx.strokeStyle = '#e5e7eb';
  ctx.fillStyle = '#374151';
  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let e = ly0; e <= ly1; e++) {
    ctx.beginPath(); ctx.moveTo(m.l, Y(10 ** e)); ctx.lineTo(w - m.r, Y(10 ** e)); ctx.stroke();
    ctx.fillText(e >= 0 ? String(10 ** e) : (10 ** e).toFixed(-e), m.l - 6, Y(10 ** e));
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (const d of xs) ctx.fillText(String(d), X(d), h - m.b + 6);
  ctx.fillText('d_k (log scale)', (m.l + w - m.r) / 2, h - m.b + 6 + fontPx + 4);
  ctx.save();
  ctx.translate(12, (m.t + h - m.b) / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.fillText('variance (log scale)', 0, 0);
  ctx.restore();
  // the model's own d_k
  ctx.strokeStyle = '#6b7280';
  ctx.setLineDash([4, 3]);
  ctx.beginPath(); ctx.moveTo(X(dk), m.t); ctx.lineTo(X(dk), h - m.b); ctx.stroke();
  ctx.setLineDash([]);
  ctx.textAlign = 'left';
  ctx.fillText(`this model: d_k = ${dk}`, Math.min(X(dk) + 4, w - m.r - 9 * fontPx), 2); // above the plot
  for (const [key, colour] of [['raw', RAW], ['scaled', SCALED]]) {
    ctx.strokeStyle = colour;
    ctx.fillStyle = colour;
    ctx.lineWidth = 2;
    ctx.beginPath();
    points.forEach((q, i) => (i ? ctx.lineTo(X(q.d_k), Y(q[key])) : ctx.moveTo(X(q.d_k), Y(q[key]))));
    ctx.stroke();
    for (const q of points) { ctx.beginPath(); ctx.arc(X(q.d_k), Y(q[key]), 3, 0, Math.PI * 2); ctx.fill(); }
  }
  ctx.textBaseline = 'middle';
  ctx.fillStyle = RAW;
  ctx.fillText('Var(q·k) ≈ d_k', w - m.r + 8, Y(points.at(-1).raw));
  ctx.fillStyle = SCALED;
  ctx.fillText('Var(q·k / √d_k) ≈ 1', w - m.r + 8, Y(points.at(-1).scaled));
  const near = points.reduce((a, b) => (Math.abs(Math.log2(b.d_k / dk)) < Math.abs(Math.log2(a.d_k / dk)) ? b : a));
  p.varNote.textContent = `At d_k = ${near.d_k}: Var(q·k) = ${near.raw.toFixed(2)}, Var(q·k/√${near.d_k}) = ${near.scaled.toFixed(3)}. Without the division a typical score is ${Math.sqrt(near.raw).toFixed(1)} instead of 1: e^score then differs by orders of magnitude between keys.`;
  c.setAttribute('aria-label', `variance of q·k against d_k from ${xs[0]} to ${xs.at(-1)} on log axes: without the division it grows with d_k (${points.map((q) => q.raw.toFixed(1)).join(', ')}); divided by √d_k it stays near 1 (${points.map((q) => q.scaled.toFixed(2)).join(', ')}); this model's d_k = ${dk} is marked`);
}
