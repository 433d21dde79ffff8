// The line view: queries on the left, keys on the right, a line per weight (opacity = weight).
// It shows the head view's token window; long windows are thinned to their strongest lines,
// and hovering a token (here or in the head view) shows only that token's lines. Clicking a
// query token (shift-click adds or removes one) selects it: only the selected tokens' lines. A
// sentence pair's part draws one sentence's queries and one's keys (bertviz's filter).

import { fit } from '../canvas.js';
import { pick } from '../select.js';
import { layerNumber } from '../result.js';
import { partWords } from '../store.js';

const MAX_ROWS = 64;     // more rows than this: the view follows the head view's zoom window
const MAX_LINES = 1500;  // the strongest lines of a long window

function build(target) {
  target.classList.add('lines-view');
  target.innerHTML = '<p class="lines-axes muted">queries (left) → keys (right)</p><canvas class="lines" role="img"></canvas><p class="lines-note muted"></p>';
  const c = target.querySelector('canvas');
  c.addEventListener('mousemove', (e) => {
    const v = target._view;
    const r = c.getBoundingClientRect();
    const i = Math.floor((e.clientY - r.top - v.top) / v.step);
    const q = i >= 0 && i < v.n ? v.q0 + i : -1;
    c.style.cursor = q >= 0 && e.clientX - r.left <= v.xl + 8 ? 'pointer' : '';
    if (q !== v.hoverRow) { v.hoverRow = q; v.opts.onHover?.(q >= 0 ? { q, k: null } : null); }
  });
  c.addEventListener('click', (e) => { // a query token (the left column) selects its row
    const v = target._view;
    const r = c.getBoundingClientRect();
    const i = Math.floor((e.clientY - r.top - v.top) / v.step);
    if (i < 0 || i >= v.n || e.clientX - r.left > v.xl + 8) return;
    target._sel = pick(target._sel ?? v.opts.sel ?? [], v.q0 + i, e.shiftKey);
    v.opts.onSelect?.(target._sel);
  });
  c.addEventListener('mouseleave', () => { target._view.hoverRow = -1; target._view.opts.onHover?.(null); });
}

/**
 * `opts`: {item, layer, head, win: {q0, k0, n} | null, part: a sentence pair's part (result.js
 * partOf) | null, hover: {q} | null, sel: number[] (selected
 * query rows, sorted), height, fontPx, onHover(cell), onSelect(sel)}.
 */
export function render(target, run, opts) {
  if (!target.querySelector('canvas')) build(target);
  target._sel = null; // what was asked for is drawn now
  const T = run.T;
  const values = run.head(opts.item, opts.layer, opts.head);
  const tokens = run.results[opts.item].labels;
  // the queries [q0, q0 + nq) on the left, the keys [k0, k0 + nk) on the right: the head view's
  // window, or a sentence pair's part
  const part = opts.part ?? null;
  let q0, k0, nq, nk;
  if (part) {
    [q0, k0, nq, nk] = [part.q0, part.k0, Math.min(MAX_ROWS, part.q1 - part.q0), Math.min(MAX_ROWS, part.k1 - part.k0)];
  } else {
    const n = Math.min(MAX_ROWS, opts.win?.n ?? T);
    [q0, k0, nq, nk] = [Math.min(opts.win?.q0 ?? 0, T - n), Math.min(opts.win?.k0 ?? 0, T - n), n, n];
  }
  const width = Math.max(200, Math.min(target.clientWidth || 320, 420));
  const height = Math.max(160, opts.height ?? 480);
  const top = 6;
  const step = (height - 2 * top) / nq, stepK = (height - 2 * top) / nk;
  const font = Math.min(opts.fontPx ?? 12, Math.max(0, Math.min(step, stepK) - 2));
  const labelW = Math.min(110, width * 0.3);
  const ctx = fit(target.querySelector('canvas'), width, height);
  ctx.clearRect(0, 0, width, height);
  const xl = labelW, xr = width - labelW;
  const hoverQ = opts.hover?.q ?? null;
  const only = hoverQ !== null && hoverQ >= q0 && hoverQ < q0 + nq ? hoverQ : null;
  const sel = new Set((opts.sel ?? []).filter((q) => q < T)); // hovering a token shows its lines; else the selection's
  const picked = only !== null ? new Set([only]) : sel.size ? sel : null;
  // the lines to draw: every weight ≥ 1% of a short window, the strongest of a long one
  const cand = [];
  const floor = Math.max(nq, nk) <= 24 ? 0.01 : 0.05;
  for (let i = 0; i < nq; i++) {
    const q = q0 + i;
    if (picked && !picked.has(q)) continue;
    for (let j = 0; j < nk; j++) {
      const w = values[q * T + k0 + j];
      if (w >= (picked ? 0.005 : floor)) cand.push([w, i, j]);
    }
  }
  let drawn = cand;
  if (cand.length > MAX_LINES) drawn = cand.sort((a, b) => b[0] - a[0]).slice(0, MAX_LINES);
  ctx.lineWidth = Math.max(1, Math.min(3, step / 6));
  for (const [w, i, j] of drawn) {
    ctx.strokeStyle = `rgba(8, 81, 156, ${Math.min(1, 0.08 + w).toFixed(3)})`;
    ctx.beginPath();
    ctx.moveTo(xl, top + (i + 0.5) * step);
    ctx.lineTo(xr, top + (j + 0.5) * stepK);
    ctx.stroke();
  }
  if (font >= 7) {
    ctx.font = `${font}px system-ui, sans-serif`;
    ctx.textBaseline = 'middle';
    for (let i = 0; i < nq; i++) {
      const q = q0 + i, chosen = sel.has(q);
      if (chosen) { ctx.fillStyle = '#fde68a'; ctx.fillRect(0, top + i * step, xl - 2, step); }
      ctx.font = `${chosen ? '600 ' : ''}${font}px system-ui, sans-serif`;
      ctx.fillStyle = only === q ? '#b45309' : sel.size && !chosen ? '#8b919c' : '#1f2937';
      ctx.textAlign = 'right'; ctx.fillText(tokens[q], xl - 6, top + (i + 0.5) * step, labelW - 8);
    }
    ctx.font = `${font}px system-ui, sans-serif`;
    ctx.fillStyle = '#1f2937';
    ctx.textAlign = 'left';
    for (let j = 0; j < nk; j++) ctx.fillText(tokens[k0 + j], xr + 6, top + (j + 0.5) * stepK, labelW - 8);
  }
  const notes = [];
  if (part) notes.push(`${partWords(part, { q0, nq, k0, nk })}${nq < part.q1 - part.q0 || nk < part.k1 - part.k0 ? ` (the first ${MAX_ROWS} of each)` : ''}`);
  else if (nq < T) notes.push(`tokens ${q0}–${q0 + nq - 1} of ${T} (zoom or drag the head view to move)`);
  if (drawn.length < cand.length) notes.push(`the ${MAX_LINES} strongest lines`);
  const selIn = [...sel].filter((q) => q >= q0 && q < q0 + nq);
  notes.push(only !== null ? `lines of "${tokens[only]}"` : sel.size ? `lines of the selected ${selIn.map((q) => `"${tokens[q]}"`).join(', ') || 'tokens (outside this window)'} (Esc clears)` : `weights ≥ ${floor}`);
  target.querySelector('.lines-note').textContent = notes.join(' · ');
  target.querySelector('canvas').setAttribute('aria-label', `line view of layer ${layerNumber(run, opts.layer)}, head ${opts.head}: queries on the left, keys on the right`);
  target._view = { opts, q0, n: nq, step, top, xl, hoverRow: target._view?.hoverRow ?? -1 };
}
