// The line view: queries on the left, keys on the right, a line per weight (opacity = weight).
// It shows the head view's token window; long windows are thinned to their strongest lines,
// and hovering a token (here or in the head view) shows only that token's lines.

import { fit } from '../canvas.js';

const MAX_ROWS = 64;     // more rows than this: the view follows the head view's zoom window
const MAX_LINES = 1500;  // the strongest lines of a long window

function build(target) {
  target.classList.add('lines-view');
  target.innerHTML = '<canvas class="lines" role="img"></canvas><p class="lines-note muted"></p>';
  const c = target.querySelector('canvas');
  c.addEventListener('mousemove', (e) => {
    const v = target._view;
    const r = c.getBoundingClientRect();
    const i = Math.floor((e.clientY - r.top - v.top) / v.step);
    const q = i >= 0 && i < v.n ? v.q0 + i : -1;
    if (q !== v.hoverRow) { v.hoverRow = q; v.opts.onHover?.(q >= 0 ? { q, k: null } : null); }
  });
  c.addEventListener('mouseleave', () => { target._view.hoverRow = -1; target._view.opts.onHover?.(null); });
}

/**
 * `opts`: {item, layer, head, win: {q0, k0, n} | null, hover: {q} | null, height, fontPx, onHover}.
 */
export function render(target, run, opts) {
  if (!target.querySelector('canvas')) build(target);
  const T = run.T;
  const values = run.head(opts.item, opts.layer, opts.head);
  const tokens = run.results[opts.item].tokens;
  let q0 = opts.win?.q0 ?? 0, k0 = opts.win?.k0 ?? 0, n = opts.win?.n ?? T;
  if (n > MAX_ROWS) { n = MAX_ROWS; }
  q0 = Math.min(q0, T - n); k0 = Math.min(k0, T - n);
  const width = Math.max(200, Math.min(target.clientWidth || 320, 420));
  const height = Math.max(160, opts.height ?? 480);
  const top = 6;
  const step = (height - 2 * top) / n;
  const font = Math.min(opts.fontPx ?? 12, Math.max(0, step - 2));
  const labelW = Math.min(110, width * 0.3);
  const ctx = fit(target.querySelector('canvas'), width, height);
  ctx.clearRect(0, 0, width, height);
  const xl = labelW, xr = width - labelW;
  const hoverQ = opts.hover?.q ?? null;
  const only = hoverQ !== null && hoverQ >= q0 && hoverQ < q0 + n ? hoverQ : null;
  // the lines to draw: every weight ≥ 1% of a short window, the strongest of a long one
  const cand = [];
  const floor = n <= 24 ? 0.01 : 0.05;
  for (let i = 0; i < n; i++) {
    const q = q0 + i;
    if (only !== null && q !== only) continue;
    for (let j = 0; j < n; j++) {
      const w = values[q * T + k0 + j];
      if (w >= (only !== null ? 0.005 : floor)) cand.push([w, i, j]);
    }
  }
  let drawn = cand;
  if (cand.length > MAX_LINES) drawn = cand.sort((a, b) => b[0] - a[0]).slice(0, MAX_LINES);
  ctx.lineWidth = Math.max(1, Math.min(3, step / 6));
  for (const [w, i, j] of drawn) {
    ctx.strokeStyle = `rgba(8, 81, 156, ${Math.min(1, 0.08 + w).toFixed(3)})`;
    ctx.beginPath();
    ctx.moveTo(xl, top + (i + 0.5) * step);
    ctx.lineTo(xr, top + (j + 0.5) * step);
    ctx.stroke();
  }
  if (font >= 7) {
    ctx.font = `${font}px system-ui, sans-serif`;
    ctx.textBaseline = 'middle';
    for (let i = 0; i < n; i++) {
      ctx.fillStyle = only === q0 + i ? '#b45309' : '#1f2937';
      ctx.textAlign = 'right'; ctx.fillText(tokens[q0 + i], xl - 6, top + (i + 0.5) * step, labelW - 8);
      ctx.fillStyle = '#1f2937';
      ctx.textAlign = 'left'; ctx.fillText(tokens[k0 + i], xr + 6, top + (i + 0.5) * step, labelW - 8);
    }
  }
  const notes = [];
  if (n < T) notes.push(`tokens ${q0}–${q0 + n - 1} of ${T} (zoom or drag the head view to move)`);
  if (drawn.length < cand.length) notes.push(`the ${MAX_LINES} strongest lines`);
  notes.push(only !== null ? `lines of "${tokens[only]}"` : `weights ≥ ${floor}`);
  target.querySelector('.lines-note').textContent = notes.join(' · ');
  target.querySelector('canvas').setAttribute('aria-label', `line view of layer ${opts.layer}, head ${opts.head}: queries on the left, keys on the right`);
  target._view = { opts, q0, n, step, top, hoverRow: target._view?.hoverRow ?? -1 };
}
