// The head view: one head's attention, large, with labels on both axes (queries are rows, keys
// columns): a run's T × T head, or any n_q × n_k one (a translation's cross-attention, decoder
// steps over source tokens: result.js runOfMatrices gives it as a run with `nk` keys). Zoom
// (buttons, + − 0 keys, ctrl+wheel) and pan (drag) keep a square head of any length up to 512
// readable. The heatmap is a pixel buffer drawn once per input; hover and the keyboard cursor
// redraw only the overlay canvas above it. Clicking a query token (a row label; shift-click adds
// or removes one, Enter on the keyboard cursor's row) keeps only the selected rows at full colour
// and shows their mean as a 1 × T strip under the columns; a view given `onRow` (a translation's
// steps) focuses that row instead. A sentence pair's part (one sentence's queries over one
// sentence's keys: bertviz's filter) and a rectangular head are shown whole, without zoom.

import { scale, pixels, MASKED, inkOn } from '../colour.js';
import { fit, bitmap, dpr, hatchPattern, axesCaption, placeTip } from '../canvas.js';
import { pooledPart } from '../summary.js';
import { square, region, labelled, cellAt, rowAt, colAt, maskedBy, drawMatrix, drawCrosshair } from '../matrix.js';
import { noteTip, specialNotes, tokenTip } from '../glossary.js';
import * as legend from './legend.js';
import { pick, combine, topKeys } from '../select.js';
import { layerNumber } from '../result.js';
import { partWords } from '../store.js';

const MIN_N = 4;
/** Cells a side past which the heatmap max-pools the cells on screen to its device pixels. */
const POOL_CELLS = 2048;

function build(target) {
  target.classList.add('head-view');
  target.innerHTML = `
    <div class="view-tools">
      <span class="focus-label"></span>
      <span class="axes"></span>
      <span class="part-label muted"></span>
      <span class="zoom">
        <button type="button" class="zoom-out" aria-label="zoom out">−</button>
        <button type="button" class="zoom-in" aria-label="zoom in">+</button>
        <button type="button" class="zoom-fit">fit</button>
        <span class="zoom-label muted"></span>
      </span>
    </div>
    <div class="stage">
      <canvas class="heat" role="img"></canvas>
      <canvas class="overlay" tabindex="0"></canvas>
    </div>
    <canvas class="sel-strip" role="img" aria-label="the selected query rows' mean (nothing selected)" hidden></canvas>
    <div class="sel-tools" hidden><span class="sel-label"></span> <button type="button" class="sel-clear" title="show every row again (Esc)">clear selection</button></div>
    <div class="legend"></div>
    <div class="tooltip" role="tooltip" hidden></div>
    <div class="readout sr-only" aria-live="polite"></div>`;
  axesCaption(target.querySelector('.axes'));
  const overlay = target.querySelector('.overlay');
  const v = () => target._view; // the latest {run, opts, g, tokens, values, mask}
  const local = (e) => { const r = overlay.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
  // The window asked for and not yet drawn: clicks faster than a render compound on it, not on the stale one.
  const want = () => target._want ?? v().g;
  const zoomTo = (n, centre) => {
    const { run, opts } = v();
    if (v().g.fixed) return; // a sentence pair's part: its region, whole
    const g = want();
    const T = run.T;
    n = Math.max(Math.min(MIN_N, T), Math.min(T, Math.round(n)));
    const c = centre ?? { q: g.q0 + g.n / 2, k: g.k0 + g.n / 2 };
    const clamp = (x) => Math.max(0, Math.min(T - n, Math.round(x - n / 2)));
    const win = n >= T ? null : { q0: clamp(c.q), k0: clamp(c.k), n };
    target._want = win ?? { q0: 0, k0: 0, n: T };
    opts.onZoom?.(win);
  };
  target.querySelector('.zoom-in').onclick = () => zoomTo(want().n / 2, v().cursor);
  target.querySelector('.zoom-out').onclick = () => zoomTo(want().n * 2, v().cursor);
  target.querySelector('.zoom-fit').onclick = () => zoomTo(Infinity);
  // selecting query rows: the latest selection asked for, until the next render draws it
  const select = (q, add) => {
    const next = q === null ? [] : pick(target._sel ?? v().opts.sel ?? [], q, add);
    target._sel = next;
    v().opts.onSelect?.(next);
  };
  target.querySelector('.sel-clear').onclick = () => select(null);
  /** A row picked (its label clicked, Enter on the cursor's): focused where the view is given
   *  `onRow`, else selected. */
  const rowPicked = (q, add) => (v().opts.onRow ? v().opts.onRow(q) : select(q, add));
  /** The query row whose label is under a point (CSS pixels), or null. */
  const labelRow = (g, x, y) => (x >= 0 && x < g.x0 ? rowAt(g, y) : null);
  /** The key column whose label (above the cells) is under a point (CSS pixels), or null. */
  const labelCol = (g, x, y) => (y >= 0 && y < g.y0 ? colAt(g, x) : null);
  // a pointer's tooltip takes over from the keyboard cursor's (cursorTip), before it shows
  for (const type of ['pointerdown', 'pointermove']) overlay.addEventListener(type, () => { v().keyTip = false; });
  let down = null;
  overlay.addEventListener('pointerdown', (e) => { down = { x: e.clientX, y: e.clientY, touch: e.pointerType === 'touch' }; });
  overlay.addEventListener('click', (e) => {
    const moved = down && Math.hypot(e.clientX - down.x, e.clientY - down.y) > 4; // a drag, not a click
    const [x, y] = local(e), q = labelRow(v().g, x, y), k = labelCol(v().g, x, y);
    if (moved) return;
    const cell = cellAt(v().g, x, y);
    if (q !== null) rowPicked(q, e.shiftKey);
    else if (k !== null) colTip(target, k, e.clientX, e.clientY); // a tap on a column label: what it is
    else if (cell && v().opts.onRow && !down?.touch) v().opts.onRow(cell.q); // a click in a row focuses it
    else hover(target, cell, e.clientX, e.clientY); // a tap (a phone has no hover): the cell's value
  });
  const strip = target.querySelector('.sel-strip');
  strip.addEventListener('mousemove', (e) => {
    const { g, strip: st, tokens } = v();
    const tip = target.querySelector('.tooltip');
    const k = colAt(g, e.clientX - strip.getBoundingClientRect().left);
    if (!st || k === null) { tip.hidden = true; return; }
    tip.textContent = `${st.name} → ${v().cols[k]}: ${fmtP(st.combined[k])}${st.mask && !st.mask[k] ? ' (masked)' : ''}`;
    noteTip(tip, v().cols[k]);
    placeTip(tip, e.clientX, e.clientY);
  });
  strip.addEventListener('mouseleave', () => { target.querySelector('.tooltip').hidden = true; });
  let drag = null;
  overlay.addEventListener('pointerdown', (e) => {
    if (v().g.fixed || v().g.n >= v().run.T) return;
    drag = { x: e.clientX, y: e.clientY, q0: v().g.q0, k0: v().g.k0 };
    overlay.setPointerCapture(e.pointerId);
  });
  overlay.addEventListener('pointerup', () => { drag = null; });
  overlay.addEventListener('pointermove', (e) => {
    const { g, run, opts } = v();
    if (drag) {
      const dk = Math.round((drag.x - e.clientX) / g.cell), dq = Math.round((drag.y - e.clientY) / g.cell);
      const clamp = (x) => Math.max(0, Math.min(run.T - g.n, x));
      const next = { q0: clamp(drag.q0 + dq), k0: clamp(drag.k0 + dk), n: g.n };
      if (next.q0 !== g.q0 || next.k0 !== g.k0) opts.onZoom?.(next);
      return;
    }
    const [x, y] = local(e);
    const q = labelRow(g, x, y);
    overlay.style.cursor = q !== null ? 'pointer' : '';
    const k = labelCol(g, x, y);
    if (q !== null) labelTip(target, q, e.clientX, e.clientY);
    else if (k !== null) colTip(target, k, e.clientX, e.clientY);
    else hover(target, cellAt(g, x, y), e.clientX, e.clientY);
  });
  overlay.addEventListener('mouseleave', () => hover(target, null));
  overlay.addEventListener('wheel', (e) => {
    if (!e.ctrlKey) return;
    e.preventDefault();
    const { g } = v();
    zoomTo(want().n * (e.deltaY > 0 ? 1.5 : 1 / 1.5), cellAt(g, ...local(e)) ?? undefined);
  }, { passive: false });
  overlay.addEventListener('keydown', (e) => {
    const { run, g } = v();
    const mv = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] }[e.key];
    if (mv) {
      e.preventDefault();
      const c = v().cursor ?? { q: g.q0, k: g.k0 };
      // over every token (the window follows), or over what is shown whole
      const [qs, ks] = g.fixed ? [[g.q0, g.q0 + g.nq - 1], [g.k0, g.k0 + g.nk - 1]] : [[0, run.T - 1], [0, run.T - 1]];
      const next = { q: Math.max(qs[0], Math.min(qs[1], c.q + mv[0])), k: Math.max(ks[0], Math.min(ks[1], c.k + mv[1])) };
      v().cursor = next;
      if (!inside(g, next)) zoomTo(g.n, next);
      hover(target, next);
      cursorTip(target);
      target.querySelector('.readout').textContent = [describe(v(), next), specialNotes(v().tokens[next.q], v().cols[next.k])].filter(Boolean).join('\n');
    } else if (e.key === '+' || e.key === '=') { e.preventDefault(); zoomTo(want().n / 2, v().cursor); }
    else if (e.key === '-') { e.preventDefault(); zoomTo(want().n * 2, v().cursor); }
    else if (e.key === '0') { e.preventDefault(); zoomTo(Infinity); }
    else if (e.key === 'Enter' && v().cursor) { e.preventDefault(); rowPicked(v().cursor.q, e.shiftKey); }
    else if (e.key === 'Escape' && (v().opts.sel ?? []).length) { e.preventDefault(); select(null); }
  });
  overlay.addEventListener('blur', () => { if (v().keyTip) { v().keyTip = false; hover(target, null); } });
}

const fmtP = (p) => p.toFixed(4);

/** What the keys do on a head that zooms. */
const ZOOM_KEYS = 'focused head; arrow keys move a cursor over the cells, + and − zoom, 0 fits, Enter selects the cursor\'s row (shift+Enter adds it), Escape clears the selection';

/** Whether cell {q, k} is among those layout `g` shows. */
const inside = (g, { q, k }) => q >= g.q0 && q < g.q0 + g.nq && k >= g.k0 && k < g.k0 + g.nk;

/** "query → key: p", and what the mask did to the cell (or what the view's `describe` says). */
function describe({ tokens, cols, nk, values, mask, run, diff, opts }, { q, k }) {
  if (opts.describe) return opts.describe(q, k);
  const p = values[q * nk + k];
  if (diff) return `${tokens[q]} → ${cols[k]}: ΔA ${p >= 0 ? '+' : ''}${fmtP(p)} (second sentence − first)`;
  if (!mask || mask[q * nk + k]) return `${tokens[q]} → ${cols[k]}: ${fmtP(p)}`;
  // a sliding layer's key outside its window says so; any other masked key, by the pass's mask
  const why = run.maskWhy?.(opts.item, opts.layer, q, k);
  return `${tokens[q]} → ${cols[k]}: ${fmtP(p)} (${why && why !== 'masked' ? `masked: ${why}` : 'masked: −∞ before softmax'})`;
}

/** A cell's tooltip notes: what its query and key tokens are (a special token, a word piece). */
function cellTip(tip, v, q, k) {
  if (v.cols === v.tokens) tokenTip(tip, v.tokens, v.pieces, q, k);
  else noteTip(tip, v.tokens[q], v.cols[k]);
}

function hover(target, cell, clientX, clientY) {
  const v = target._view;
  v.hoverCell = cell;
  drawCrosshair(v.overlayCtx, v.g, cell ?? v.cursor);
  const tip = target.querySelector('.tooltip');
  if (cell && clientX !== undefined) {
    tip.textContent = describe(v, cell);
    cellTip(tip, v, cell.q, cell.k);
    placeTip(tip, clientX, clientY);
  } else {
    tip.hidden = true;
  }
  v.opts.onHover?.(cell);
}

/**
 * The keyboard cursor's cell in the tooltip a hover shows, beside the cell: its value seen as
 * well as heard (the live readout). Hidden while the cell is outside the window: the render that
 * moves the window to it shows it.
 */
function cursorTip(target) {
  const v = target._view, g = v.g, { q, k } = v.cursor, tip = target.querySelector('.tooltip');
  v.keyTip = true;
  if (!inside(g, v.cursor)) { tip.hidden = true; return; }
  const r = target.querySelector('.overlay').getBoundingClientRect();
  tip.textContent = describe(v, v.cursor);
  cellTip(tip, v, q, k);
  // from the cell's centre, past its corner on the side with room: off the crosshair's lines
  placeTip(tip, r.left + g.x0 + (k - g.k0 + 0.5) * g.cell, r.top + g.y0 + (q - g.q0 + 0.5) * g.cell, g.cell / 2 + 6);
}

/** Over a row label: what a click does. */
function labelTip(target, q, clientX, clientY) {
  const v = target._view;
  v.hoverCell = null;
  drawCrosshair(v.overlayCtx, v.g, v.cursor);
  const tip = target.querySelector('.tooltip');
  const on = (v.opts.sel ?? []).includes(q);
  tip.textContent = v.opts.onRow ? `${v.tokens[q]}: click to focus its row`
    : v.opts.onSelect ? `${v.tokens[q]}: click to keep only its row, shift-click to ${on ? 'remove it from' : 'add it to'} the selection`
      : `${v.tokens[q]}: the query at position ${q} (its row)`;
  tokenTip(tip, v.tokens, v.pieces, q);
  placeTip(tip, clientX, clientY);
  v.opts.onHover?.(null);
}

/** Over a column label: the key it is, and what a special token is. */
function colTip(target, k, clientX, clientY) {
  const v = target._view;
  v.hoverCell = null;
  drawCrosshair(v.overlayCtx, v.g, v.cursor);
  const tip = target.querySelector('.tooltip');
  tip.textContent = `${v.cols[k]}: the key at position ${k} (its column)`;
  if (v.cols === v.tokens) tokenTip(tip, v.tokens, v.pieces, k);
  else noteTip(tip, v.cols[k]);
  placeTip(tip, clientX, clientY);
  v.opts.onHover?.(null);
}

/** The selected tokens in a few words: "it", "it + was", "it + was + … (5 rows)". */
function selName(tokens, rows) {
  const names = rows.slice(0, 3).map((q) => tokens[q]);
  return rows.length > 3 ? `${names.join(' + ')} + … (${rows.length} rows)` : names.join(' + ');
}

/** The rows outside `sel` faded (the selected ones stay at full colour), their labels marked. */
function dimRows(ctx, g, sel, tokens) {
  const on = new Set(sel);
  ctx.fillStyle = 'rgba(255, 255, 255, 0.78)';
  for (let i = 0; i < g.nq;) { // one rect a run of unselected rows: no seams between them
    if (on.has(g.q0 + i)) { i++; continue; }
    let j = i;
    while (j < g.nq && !on.has(g.q0 + j)) j++;
    ctx.fillRect(g.x0, g.y0 + i * g.cell, g.nk * g.cell, (j - i) * g.cell);
    i = j;
  }
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  ctx.font = `600 ${g.fontPx}px system-ui, sans-serif`;
  for (const q of sel) {
    if (q < g.q0 || q >= g.q0 + g.nq) continue;
    const y = g.y0 + (q - g.q0) * g.cell;
    ctx.clearRect(0, y, g.x0 - 1, g.cell);
    ctx.fillStyle = '#fde68a';
    ctx.fillRect(0, y, g.x0 - 1, Math.max(g.cell, 1));
    if (g.showLabels) {
      ctx.fillStyle = '#111827';
      ctx.fillText(tokens[q], g.x0 - 4, y + g.cell / 2, g.x0 - 6);
    }
  }
}

/**
 * The selected rows' mean as a 1 × n strip under the heatmap's columns (same x0, cell and
 * window), masked keys hatched, values written when a cell is wide enough.
 */
function drawStrip(canvas, g, st, sc, size, tokens, cols) {
  const h = Math.round(Math.max(18, Math.min(30, g.cell)));
  const ctx = fit(canvas, size, h + 2);
  ctx.clearRect(0, 0, size, h + 2);
  const img = new ImageData(g.nk, 1);
  for (let j = 0; j < g.nk; j++) {
    const k = g.k0 + j;
    const rgb = st.mask && !st.mask[k] ? MASKED : sc.table[sc.index(st.combined[k])];
    img.data.set([...rgb, 255], 4 * j);
  }
  ctx.drawImage(bitmap(img), 0, 0, g.nk, 1, g.x0, 1, g.nk * g.cell, h);
  if (st.mask && g.cell >= 5) {
    ctx.fillStyle = hatchPattern(ctx);
    for (let j = 0; j < g.nk; j++) if (!st.mask[g.k0 + j]) ctx.fillRect(g.x0 + j * g.cell, 1, g.cell, h);
  }
  ctx.strokeStyle = '#9ca3af';
  ctx.lineWidth = 1;
  ctx.strokeRect(g.x0 - 0.5, 0.5, g.nk * g.cell + 1, h + 1);
  ctx.textBaseline = 'middle';
  if (g.cell >= 28) {
    ctx.font = '10px system-ui, sans-serif';
    ctx.textAlign = 'center';
    for (let j = 0; j < g.nk; j++) {
      const p = st.combined[g.k0 + j];
      if (st.mask && !st.mask[g.k0 + j]) continue;
      ctx.fillStyle = inkOn(sc.table[sc.index(p)]);
      ctx.fillText(p.toFixed(2).replace(/^0/, ''), g.x0 + (j + 0.5) * g.cell, 1 + h / 2);
    }
  }
  if (g.x0 >= 30) {
    ctx.font = `600 ${Math.min(g.fontPx, 12)}px system-ui, sans-serif`;
    ctx.textAlign = 'right';
    ctx.fillStyle = '#111827';
    ctx.fillText(st.rows.length > 1 ? `mean of ${st.rows.length}` : tokens[st.rows[0]], g.x0 - 4, 1 + h / 2, g.x0 - 6);
  }
  const top = topKeys(st.combined, 3, st.mask).map(({ k, p }) => `${cols[k]} ${p.toFixed(2)}`).join(', ');
  canvas.setAttribute('aria-label', `selected ${st.name}${st.rows.length > 1 ? ` (mean of ${st.rows.length} rows)` : ''}: strongest keys ${top}`);
}

/** Each weight written in its cell where it fits (a masked one is exactly 0 and left blank); the
 *  rows after `after` (steps not yet written) in grey. `values`: n_q × n_k, row-major; `sc`: the
 *  colour scale the cells are drawn on (each weight's ink legible on its colour). */
function weightsIn(g, values, nk, sc, masked, after) {
  const at = (q, k) => values[q * nk + k];
  return {
    minCell: 22, fontPx: Math.min(g.fontPx, Math.floor(g.cell * 0.38)),
    text: (q, k) => {
      const p = at(q, k);
      return masked?.(q, k) || p < 0.005 ? null : p >= 0.995 ? '1' : p.toFixed(2).slice(1);
    },
    ink: (q, k) => (after !== null && q > after ? '#6b7280' : inkOn(sc.table[sc.index(at(q, k))])),
  };
}

/** The room a head over `T` positions is drawn in: the target's `width`, the type's `fontPx`, and
 *  the square's side (`size`), as render lays it out (`opts` as render's). */
function sideOf(target, T, opts) {
  const width = Math.max(120, target.clientWidth || 480);
  const fontPx = opts.fontPx ?? 12;
  let size = Math.floor(Math.min(width, opts.maxHeight ?? width));
  if (opts.cellsLike > T) { // beside a longer sentence: its cells' size, so this matrix is smaller
    const like = square({ width: size, height: size, T: opts.cellsLike, win: null, labels: true, fontPx });
    size = Math.ceil(like.x0 + 2 + like.cell * T);
  }
  return { width, fontPx, size };
}

/** What a square layout `g` (matrix.js `square`) shows pooled: past POOL_CELLS cells a side, on
 *  fewer device pixels than cells, its cells max-pooled to the matrix's device pixels (summary.js
 *  pooledPart, as the grid pools a head: a long text's 4,000² cells are neither coloured every
 *  one nor kept one in n by the canvas's scaling), `{part: {q0, q1, k0, k1}, px}`; else null. */
function poolOf(g) {
  const px = Math.floor(Math.min(g.nq, g.nk) * g.cell * dpr());
  if (!(Math.max(g.nq, g.nk) > POOL_CELLS && px < Math.max(g.nq, g.nk))) return null;
  return { part: { q0: g.q0, q1: g.q0 + g.nq, k0: g.k0, k1: g.k0 + g.nk }, px };
}

const samePart = (a, b) => a.q0 === b.q0 && a.q1 === b.q1 && a.k0 === b.k0 && a.k1 === b.k1;

/**
 * The part of a head over `T` positions that render would draw in `target` max-pooled, and to
 * how many pixels (`{part, px}`, engine.js `longHead`'s `pool`), or null where it would colour
 * each cell (a short text, zoomed in to few cells, a head shown whole, a sentence pair's part, a
 * difference): a long run's head is then pooled by the engine as its rows are made. `opts` as
 * render's.
 */
export function poolWanted(target, T, opts) {
  if (opts.whole || opts.part || opts.compare?.same) return null;
  const { size, fontPx } = sideOf(target, T, opts);
  return poolOf(square({ width: size, height: size, T, win: opts.win, labels: true, fontPx }));
}

/**
 * `run`: the result contract (its heads T × T, or T × `run.nk` with `results[item].keyLabels`
 * for the columns). `opts`: {item, layer, head, scale: 'absolute' | 'head', win: {q0, k0, n} |
 * null, part: a sentence pair's part (result.js partOf) | null, fontPx, maxHeight, cellsLike (a
 * longer matrix's T beside it: cells of its size), sel: number[] (selected query rows, sorted),
 * onZoom(win), onHover(cell | null), onSelect(sel)}; and for a head shown whole (`whole`, and any
 * rectangular one: every cell, its labels measured, no zoom): maxCell (px), weights (each weight
 * written in its cell where it fits), focusRow (its label in bold, the row outlined), after (the
 * rows after it veiled: a decoding's steps not yet written), label and axes: {rows, cols} (what
 * the matrix and its axes are, for the caption and the canvas's name), describe(q, k) (a cell's
 * tooltip), onRow(q) (a click in a row or on its label: focuses it, instead of selecting).
 */
export function render(target, run, opts) {
  if (!target.querySelector('.stage')) build(target);
  target._want = null; // what was asked for is drawn now
  target._sel = null;
  const { item, layer, head } = opts;
  const sel = (opts.sel ?? []).filter((q) => q < run.T);
  const T = run.T, nk = run.nk ?? T;
  // a rectangular head (n_q × n_k), or one asked for whole: every cell, no zoom
  const whole = Boolean(opts.whole) || nk !== T;
  // comparing two sentences of one length: ΔA = second − first, on a diverging scale
  const diff = opts.compare?.same ? opts.compare : null;
  const values = diff ? diff.delta(layer, head) : run.head(item, layer, head);
  const mask = run.maskOf(item, layer);
  const tokens = run.results[item].labels, cols = run.results[item].keyLabels ?? tokens;
  const probs = scale('probability', { max: opts.scale === 'head' ? run.probMax(item, layer, head) : 1 });
  // the value switch's view (web/values.js) says so in its legend
  const sc = diff ? scale('difference', { max: diff.maxAbs(layer, head) || 1e-6 })
    : run.valueWeighted ? { ...probs, label: `value-weighted attention, rows renormalised${probs.max === 1 ? '' : ' (scaled to this head\'s max)'}` } : probs;
  const prev = target._view;
  const { width, fontPx, size } = sideOf(target, T, opts);
  const heat = target.querySelector('.heat');
  const overlay = target.querySelector('.overlay');
  // shown whole: in the room its measured labels leave, larger type asking for larger cells
  // (presenter mode); a sentence pair's part (one sentence's queries over one's keys), whole;
  // else the window
  const part = opts.part ?? null;
  const g = whole ? wholeLayout(heat.getContext('2d'), tokens, cols, { width: opts.width ?? width, maxHeight: opts.maxHeight, maxCell: Math.max(opts.maxCell ?? 34, fontPx * 3), fontPx })
    : part ? region({ width: size, height: size, part, labels: true, fontPx })
      : square({ width: size, height: size, T, win: opts.win, labels: true, fontPx });
  const focusRow = opts.focusRow ?? -1, after = opts.after ?? null;
  // a part's block as tall as its rows need (a square's room is `size` both ways)
  const [w, height] = whole ? [g.w, g.h] : [size, g.fixed ? Math.min(size, Math.ceil(g.y0 + g.nq * g.cell + 2)) : size];
  // the cells on screen: each coloured (one device pixel a row at least: minPx), or, past
  // POOL_CELLS of them a side, max-pooled to the matrix's device pixels (poolOf)
  const pool = !whole && !part && !diff ? poolOf(g) : null;
  const minPx = pool ? 0 : Math.ceil((g.n * height) / g.size) + 1;
  const imgKey = [run.id, item, layer, head, opts.scale, Boolean(diff), ...(pool ? [g.q0, g.k0, g.nq, g.nk, pool.px] : [])].join('|');
  let img = prev?.imgKey === imgKey ? prev.img : null, imgOrigin = pool ? prev?.imgOrigin : undefined;
  if (!img && pool) {
    // a long run's head as the engine pooled it while making its rows, where the page asked
    // for this part at these pixels (scope.js `longHead`, poolWanted) and the view draws that
    // head itself (not a head derived from it: words, the sink hidden, value-weighted)
    const made = run.pooledOf?.(item, layer, head);
    const byEngine = made && made.probs === values && made.px === pool.px && samePart(made.part, pool.part);
    const p = byEngine ? made : pooledPart(values, mask, T, pool.part, pool.px);
    heat.dataset.pooledBy = byEngine ? 'engine' : 'page';
    img = bitmap(pixels(p.values, p.rows, sc, p.mask, p.cols), prev?.img);
    imgOrigin = { q: g.q0, k: g.k0, per: p.w };
  } else if (!img) {
    img = bitmap(pixels(values, T, sc, mask, nk), prev?.img);
    delete heat.dataset.pooledBy;
  }
  const drawKey = [imgKey, size, g.q0, g.k0, g.nq, g.nk, g.cell, g.fontPx, g.showLabels, sel.join(','), focusRow, after, Boolean(opts.weights)].join('|');
  const masked = maskedBy(mask, nk);
  const named = opts.label ? `${opts.label} (rows: ${opts.axes?.rows ?? 'queries'}, columns: ${opts.axes?.cols ?? 'keys'})`
    : `layer ${layerNumber(run, layer)}, head ${head}: ${T} × ${nk} attention heatmap (queries are rows, keys columns)`;
  overlay.setAttribute('aria-label', g.fixed ? `${named}; hover or tap a cell for its weight, arrow keys move a cursor over the cells${opts.onRow ? ', a click on a row or Enter on the cursor\'s focuses it' : ''}` : ZOOM_KEYS);
  if (prev?.drawKey !== drawKey) {
    const ctx = fit(heat, w, height, minPx);
    const cellText = opts.weights ? weightsIn(g, values, nk, sc, masked, after) : null;
    drawMatrix(ctx, g, { img, imgOrigin, masked, after, cellText, rows: tokens, cols, focusRow });
    if (sel.length) dimRows(ctx, g, sel, tokens);
    Object.assign(heat.dataset, { x0: g.x0, y0: g.y0, cell: g.cell, q0: g.q0, k0: g.k0, n: g.n, nq: g.nq, nk: g.nk, t: T, labels: g.showLabels });
    heat.setAttribute('aria-label', `${named}${sel.length ? `; selected rows: ${sel.map((q) => tokens[q]).join(', ')}` : ''}`);
    legend.render(target.querySelector('.legend'), sc, { masked: true });
  }
  const overlayCtx = fit(overlay, w, height); // outlines only: the screen's pixels are enough
  const stage = target.querySelector('.stage');
  stage.style.height = `${height}px`;
  stage.style.width = whole ? `${w}px` : '';
  axesCaption(target.querySelector('.axes'), opts.axes);
  overlay.classList.toggle('pannable', !g.fixed && g.n < T); // zoomed in: a drag pans (a finger's too), else the page scrolls
  target.querySelector('.focus-label').textContent = opts.label ? '' : `layer ${layerNumber(run, layer)}, head ${head}` + (run.B > 1 ? `, sentence ${item + 1}` : '');
  target.querySelector('.zoom').hidden = g.fixed;
  target.querySelector('.zoom-label').textContent = g.n < T ? `tokens ${g.q0}–${g.q0 + g.n - 1} × ${g.k0}–${g.k0 + g.n - 1} of ${T}` : (g.showLabels ? '' : `${T} tokens: zoom in to read the labels`);
  target.querySelector('.part-label').textContent = part && !whole ? `${partWords(part, g)} of ${T}` : '';
  // the selected rows, summed and renormalised: a strip under the columns
  const comb = sel.length ? combine(values, mask, T, sel, nk) : null;
  const st = comb && { ...comb, name: selName(tokens, comb.rows) };
  const strip = target.querySelector('.sel-strip');
  strip.hidden = !st;
  if (st && (prev?.drawKey !== drawKey || strip.dataset.key !== drawKey)) drawStrip(strip, g, st, sc, w, tokens, cols);
  strip.dataset.key = st ? drawKey : '';
  target.querySelector('.sel-tools').hidden = !st;
  target.querySelector('.sel-label').textContent = st ? `selected: ${st.name}` : '';
  const cursor = prev && prev.run.T === T && prev.nk === nk ? prev.cursor : null;
  target._view = { run, opts, g, img, imgKey, imgOrigin, drawKey, tokens, cols, nk, pieces: run.results[item].tokens, values, mask, diff: Boolean(diff), strip: st, overlayCtx, cursor, hoverCell: prev?.hoverCell ?? null };
  drawCrosshair(overlayCtx, g, target._view.hoverCell ?? cursor);
  // the keys' tooltip follows a zoom, a new head or layer; a new input drops the cursor and it.
  // A pointer's (a tap's bubble, a hover's) told of a cell of the run before: another model's or
  // text's run drops it
  if (prev?.keyTip && cursor) cursorTip(target);
  else if (prev?.keyTip || (prev && prev.run !== run)) {
    target.querySelector('.tooltip').hidden = true;
    target._view.hoverCell = null;
  }
}

/** Every cell of an n_q × n_k head with its labels (matrix.js `labelled`), as a fixed region
 *  (no zoom or pan). */
function wholeLayout(ctx, rows, cols, room) {
  const g = labelled(ctx, { rows, cols }, room);
  return { ...g, n: Math.max(g.nq, g.nk), size: Math.max(g.nq, g.nk) * g.cell, fixed: true };
}
