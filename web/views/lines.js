// The line view of any attention of n_q queries over n_k keys: the queries on the left, the keys
// on the right, a line per weight (opacity = weight), each side centred on its own length. One
// view for a run's square heads (`render`: the head view's token window, or a sentence pair's
// part) and a translation's three attentions (`draw`: its decoder steps over the source, over
// the steps so far, or the source over itself; views/translation.js). Long windows are thinned
// to their strongest lines; hovering a token (here or in the head view) shows only that token's
// lines. Clicking a query token (shift-click adds or removes one) selects it: only the selected
// tokens' lines. Labels are drawn as text on the canvas, never parsed as markup.

import { fit } from '../canvas.js';
import { FOCUS } from '../matrix.js';
import { pick } from '../select.js';
import { layerNumber } from '../result.js';
import { partWords } from '../store.js';

const MAX_ROWS = 64;     // more rows than this: the view follows the head view's zoom window
const MAX_LINES = 1500;  // the strongest lines of a long window

/** The smallest weight `m`'s view draws a line for: 1% where it has up to 24 rows and
 *  columns, 5% where it has more. */
export const floorOf = ({ rows, cols }) => (Math.max(rows.length, cols.length) <= 24 ? 0.01 : 0.05);

function build(target) {
  target.classList.add('lines-view');
  target.innerHTML = '<p class="lines-axes muted" hidden></p><canvas class="lines" role="img"></canvas><p class="lines-note muted" hidden></p>';
  const c = target.querySelector('canvas');
  // the query row under the pointer, and whether it is on the queries' labels
  const rowAt = (e) => {
    const v = target._view, r = c.getBoundingClientRect();
    const i = Math.floor((e.clientY - r.top - v.yq0) / v.step);
    return { i: i >= 0 && i < v.nq ? i : -1, onLabel: e.clientX - r.left <= v.xl + 8 };
  };
  c.addEventListener('mousemove', (e) => {
    const v = target._view, { i, onLabel } = rowAt(e);
    c.style.cursor = i >= 0 && onLabel && v.opts.onSelect ? 'pointer' : '';
    if (i !== v.hoverRow) { v.hoverRow = i; v.opts.onHover?.(i >= 0 ? i : null); }
  });
  c.addEventListener('click', (e) => { // a query token (the left column) selects its row
    const { i, onLabel } = rowAt(e);
    if (i >= 0 && onLabel) target._view.opts.onSelect?.(i, e.shiftKey);
  });
  c.addEventListener('mouseleave', () => { target._view.hoverRow = -1; target._view.opts.onHover?.(null); });
}

/**
 * Draws one attention `m` = `{values: n_q rows of n_k weights, rows: n_q labels, cols: n_k
 * labels, masked(q, k)?}` (rows and columns counted from 0 within `m`). `opts`: {width, height
 * (the canvas's; none: from the rows), fontPx, hoverRow (its lines alone, in colour), sel (a Set
 * of rows: their lines alone, their labels marked), selectedElsewhere (rows are selected, none
 * of them among these: no lines, every label faint), focusRow (its lines in colour, its label
 * bold), after (the rows after it faint: steps not yet written), axes (a line above: which side
 * is which), notes (a line below), label (the canvas's name), onHover(row | null),
 * onSelect(row, shift)}.
 */
export function draw(target, m, opts) {
  if (!target.querySelector('canvas.lines')) build(target);
  const { values, rows, cols, masked } = m;
  const nq = rows.length, nk = cols.length, n = Math.max(nq, nk, 1);
  const { fontPx = 12, focusRow = -1, after = null } = opts;
  const width = Math.max(200, opts.width ?? 360);
  const top = 6;
  const step = opts.height ? (Math.max(160, opts.height) - 2 * top) / n : Math.max(8, Math.min(Math.max(26, fontPx + 8), 640 / n));
  const height = opts.height ? Math.max(160, opts.height) : top * 2 + step * n;
  // each side centred on its own length
  const yq0 = top + (n - nq) * step / 2, yk0 = top + (n - nk) * step / 2;
  const yq = (i) => yq0 + (i + 0.5) * step, yk = (j) => yk0 + (j + 0.5) * step;
  const font = Math.min(fontPx, Math.max(0, step - 2));
  const labelW = Math.min(110, width * 0.3), xl = labelW, xr = width - labelW;
  const ctx = fit(target.querySelector('canvas'), width, height);
  ctx.clearRect(0, 0, width, height);
  const hover = opts.hoverRow ?? null;
  const only = hover !== null && hover >= 0 && hover < nq ? hover : null;
  const sel = opts.sel ?? new Set(), selecting = sel.size > 0 || Boolean(opts.selectedElsewhere);
  const picked = only !== null ? new Set([only]) : selecting ? sel : null;
  // the lines to draw: every weight ≥ 1% of a short window, the strongest of a long one
  const floor = floorOf(m);
  const cand = [];
  for (let i = 0; i < nq; i++) {
    if (picked && !picked.has(i)) continue;
    for (let j = 0; j < nk; j++) {
      const w = values[i][j];
      if (w >= (picked ? 0.005 : floor) && !masked?.(i, j)) cand.push([w, i, j]);
    }
  }
  const drawn = cand.length > MAX_LINES ? cand.sort((a, b) => b[0] - a[0]).slice(0, MAX_LINES) : cand;
  ctx.lineWidth = Math.max(1, Math.min(3, step / 6));
  for (const [w, i, j] of drawn) {
    const lit = i === only || (only === null && i === focusRow);
    const later = after !== null && i > after && only === null; // a step not yet written: faint
    ctx.strokeStyle = lit ? `rgba(217, 119, 6, ${Math.min(1, 0.15 + w).toFixed(3)})` : `rgba(8, 81, 156, ${(Math.min(1, 0.08 + w) * (later ? 0.2 : 1)).toFixed(3)})`;
    ctx.beginPath();
    ctx.moveTo(xl, yq(i));
    ctx.lineTo(xr, yk(j));
    ctx.stroke();
  }
  if (font >= 7) {
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    rows.forEach((t, i) => {
      const chosen = sel.has(i);
      if (chosen) { ctx.fillStyle = '#fde68a'; ctx.fillRect(0, yq0 + i * step, xl - 2, step); }
      ctx.font = `${chosen || i === focusRow || i === only ? '600 ' : ''}${font}px system-ui, sans-serif`;
      ctx.fillStyle = i === only || i === focusRow ? FOCUS : (selecting && !chosen) || (after !== null && i > after) ? '#8b919c' : '#1f2937';
      ctx.fillText(t, xl - 6, yq(i), labelW - 8);
    });
    ctx.font = `${font}px system-ui, sans-serif`;
    ctx.fillStyle = '#1f2937';
    ctx.textAlign = 'left';
    cols.forEach((t, j) => ctx.fillText(t, xr + 6, yk(j), labelW - 8));
  }
  const text = (sel, t) => { const p = target.querySelector(sel); p.hidden = !t; p.textContent = t ?? ''; };
  text('.lines-axes', opts.axes);
  const notes = [...(opts.notes ?? [])];
  if (drawn.length < cand.length) notes.push(`the ${MAX_LINES} strongest lines`);
  text('.lines-note', notes.join(' · '));
  const c = target.querySelector('canvas');
  c.setAttribute('aria-label', opts.label ?? 'line view: queries on the left, keys on the right');
  c.dataset.rows = String(nq);
  c.dataset.cols = String(nk);
  target._view = { opts, nq, step, yq0, xl, hoverRow: target._view?.hoverRow ?? -1 };
}

/**
 * A run's head as lines: `opts`: {item, layer, head, win: {q0, k0, n} | null, part: a sentence
 * pair's part (result.js partOf) | null, hover: {q} | null, sel: number[] (selected query rows,
 * sorted), height, fontPx, onHover(cell), onSelect(sel)}.
 */
export function render(target, run, opts) {
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
  const m = {
    values: Array.from({ length: nq }, (_, i) => values.subarray((q0 + i) * T + k0, (q0 + i) * T + k0 + nk)),
    rows: tokens.slice(q0, q0 + nq), cols: tokens.slice(k0, k0 + nk),
  };
  const selAll = (opts.sel ?? []).filter((q) => q < T), selIn = selAll.filter((q) => q >= q0 && q < q0 + nq);
  const hoverQ = opts.hover?.q ?? null, only = hoverQ !== null && hoverQ >= q0 && hoverQ < q0 + nq ? hoverQ : null;
  const notes = [];
  if (part) notes.push(`${partWords(part, { q0, nq, k0, nk })}${nq < part.q1 - part.q0 || nk < part.k1 - part.k0 ? ` (the first ${MAX_ROWS} of each)` : ''}`);
  else if (nq < T) notes.push(`tokens ${q0}–${q0 + nq - 1} of ${T} (zoom or drag the head view to move)`);
  notes.push(only !== null ? `lines of "${tokens[only]}"` : selAll.length ? `lines of the selected ${selIn.map((q) => `"${tokens[q]}"`).join(', ') || 'tokens (outside this window)'} (Esc clears)` : `weights ≥ ${floorOf(m)}`);
  draw(target, m, {
    width: Math.min(target.clientWidth || 320, 420), height: opts.height ?? 480, fontPx: opts.fontPx ?? 12,
    hoverRow: only === null ? null : only - q0,
    sel: new Set(selIn.map((q) => q - q0)), selectedElsewhere: selAll.length > 0 && !selIn.length,
    axes: 'queries (left) → keys (right)', notes,
    label: `line view of layer ${layerNumber(run, opts.layer)}, head ${opts.head}: queries on the left, keys on the right`,
    onHover: (i) => opts.onHover?.(i === null ? null : { q: q0 + i, k: null }),
    onSelect: (i, shift) => {
      target._sel = pick(target._sel ?? opts.sel ?? [], q0 + i, shift);
      opts.onSelect?.(target._sel);
    },
  });
}
