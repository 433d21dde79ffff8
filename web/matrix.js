// Any n_q × n_k attention on a canvas: its cells from a picture (one pixel a cell), masked cells
// hatched, a value written in each cell where it fits, the row and column labels, a crosshair
// on an overlay and the cell, row or column under a point. Square heatmaps (the head view, the
// steps, rollout, the inside panels: a token window of a T × T matrix) and rectangular ones (a
// translation's attentions: decoder steps × source tokens) are drawn by the same code; only the
// layout that places them differs:
//
//   square(…)   a window of a T × T matrix in a square, its labels shown once they are legible;
//   region(…)   rows [q0, q1) over columns [k0, k1) (a sentence pair's part) in the same room;
//   labelled(…) every cell of an n_q × n_k matrix, in the room its measured labels leave.
//
// A layout `g`: {nq, nk (the rows and columns shown), q0, k0 (the first of each), x0, y0 (the
// cells' top-left, CSS pixels), cell (a cell's side), showLabels, fontPx, axisNames (the axes
// named in the corner where there is room)}; a square or region one also {n (the longer side),
// size (= n · cell), fixed (a region: no zoom)} and a square one {T} (n = nq = nk), a labelled
// one {w, h} (the canvas it needs).

import { hatchPattern } from './canvas.js';

/** The colour of the focused row's label and outline. */
export const FOCUS = '#b45309';

/**
 * The window `[q0, q0+n) × [k0, k0+n)` of a T × T matrix in `width × height` CSS pixels, with
 * room for the token labels (`labels`) that shows them only where a cell is large enough.
 */
export function square({ width, height, T, win, labels, fontPx }) {
  const n = Math.max(1, Math.min(T, win?.n ?? T));
  const q0 = Math.max(0, Math.min(T - n, win?.q0 ?? 0));
  const k0 = Math.max(0, Math.min(T - n, win?.k0 ?? 0));
  return { T, ...region({ width, height, part: { q0, q1: q0 + n, k0, k1: k0 + n }, labels, fontPx }), fixed: false };
}

/**
 * Rows `[q0, q1)` over columns `[k0, k1)` of a matrix (a sentence pair's part: one sentence's
 * queries over one sentence's keys) in the square `width × height` CSS pixels leave, its cells
 * square, its labels shown only where a cell is large enough. `n`: the longer side, `size` its
 * length; `fixed`: a window that does not zoom or pan.
 */
export function region({ width, height, part: { q0, q1, k0, k1 }, labels, fontPx }) {
  const nq = Math.max(1, q1 - q0), nk = Math.max(1, k1 - k0), n = Math.max(nq, nk);
  const room = Math.min(width, height);
  let pad = labels ? Math.min(Math.round(room * 0.28), Math.round(fontPx * 7)) : 0;
  let cell = (room - pad - 2) / n;
  const showLabels = labels && cell >= Math.min(fontPx, 9);
  if (!showLabels) { pad = labels ? 14 : 0; cell = (room - pad - 2) / n; }
  return {
    n, nq, nk, q0, k0, cell, x0: pad, y0: pad, size: cell * n, showLabels, axisNames: true, fixed: true,
    fontPx: Math.min(fontPx, Math.max(7, Math.floor(cell - 1))),
  };
}

/**
 * Every cell of an n_q × n_k matrix with its `rows` and `cols` labels (measured with `ctx`) in
 * `width × maxHeight` CSS pixels, cells of at most `maxCell`.
 */
export function labelled(ctx, { rows, cols }, { width, maxHeight = Infinity, maxCell = 34, fontPx = 12 }) {
  const nq = rows.length, nk = cols.length;
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  const widest = (labels) => Math.max(12, ...labels.map((t) => ctx.measureText(t).width));
  const x0 = Math.ceil(Math.min(widest(rows), width * 0.3)) + 8;
  const y0 = Math.ceil(Math.min(widest(cols), 120)) + 8;
  const cell = Math.max(4, Math.min(maxCell, (width - x0 - 4) / Math.max(1, nk), (maxHeight - y0 - 4) / Math.max(1, nq)));
  return {
    nq, nk, q0: 0, k0: 0, x0, y0, cell, w: x0 + cell * nk + 4, h: y0 + cell * nq + 4, showLabels: true, axisNames: false,
    fontPx: Math.min(fontPx, Math.max(7, Math.floor(cell * 0.8))),
  };
}

/** The shown row at height `y` (CSS pixels in the canvas), left of the cells or in them, or null. */
export function rowAt(g, y) {
  const q = Math.floor((y - g.y0) / g.cell) + g.q0;
  return y >= g.y0 && q < g.q0 + g.nq ? q : null;
}

/** The shown column at `x` (CSS pixels in the canvas), above the cells or in them, or null. */
export function colAt(g, x) {
  const k = Math.floor((x - g.x0) / g.cell) + g.k0;
  return x >= g.x0 && k < g.k0 + g.nk ? k : null;
}

/** The cell under a point (CSS pixels in the canvas), or null. */
export function cellAt(g, x, y) {
  const q = rowAt(g, y), k = colAt(g, x);
  return q === null || k === null ? null : { q, k };
}

/** A T × T mask (1: may attend) as the `masked(q, k)` drawMatrix takes; null for none. */
export const maskedBy = (mask, T) => mask && ((q, k) => !mask[q * T + k]);

/**
 * Draws the matrix `g` lays out. `img`: its picture, one pixel a cell (or `imgOrigin.per` ×
 * `per` cells, max-pooled), holding the matrix from `imgOrigin` on (all of it, or the window
 * shown); `masked(q, k)`: the cells hatched, where they are 5 px or more; `after`: the rows
 * after it under a white veil (a decoding's steps not yet written); `cellText`: {minCell,
 * fontPx, text(q, k) → string | null, ink(q, k) → colour}, a value written in each cell from
 * `minCell` px on; `rows`, `cols`: the labels; `focusRow`: a row's label in bold and the row
 * outlined.
 */
export function drawMatrix(ctx, g, { img, imgOrigin = { q: 0, k: 0 }, masked = null, after = null, cellText = null, rows, cols, focusRow = -1 }) {
  const w = g.nk * g.cell, h = g.nq * g.cell, per = imgOrigin.per ?? 1;
  ctx.clearRect(0, 0, ctx.canvas.width, ctx.canvas.height);
  if (img) ctx.drawImage(img, (g.k0 - imgOrigin.k) / per, (g.q0 - imgOrigin.q) / per, g.nk / per, g.nq / per, g.x0, g.y0, w, h);
  else { ctx.fillStyle = '#f3f4f6'; ctx.fillRect(g.x0, g.y0, w, h); } // values on their way (a long run's scores)
  if (masked && g.cell >= 5) {
    ctx.fillStyle = hatchPattern(ctx);
    ctx.beginPath();
    for (let q = g.q0; q < g.q0 + g.nq; q++) {
      for (let k = g.k0; k < g.k0 + g.nk; k++) {
        if (masked(q, k)) ctx.rect(g.x0 + (k - g.k0) * g.cell, g.y0 + (q - g.q0) * g.cell, g.cell, g.cell);
      }
    }
    ctx.fill();
  }
  if (after !== null && after + 1 < g.q0 + g.nq) {
    const from = Math.max(g.q0, after + 1);
    ctx.fillStyle = 'rgba(255, 255, 255, 0.72)';
    ctx.fillRect(g.x0, g.y0 + (from - g.q0) * g.cell, w, (g.q0 + g.nq - from) * g.cell);
  }
  if (cellText && g.cell >= cellText.minCell) {
    ctx.font = `${cellText.fontPx}px system-ui, sans-serif`;
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    for (let q = g.q0; q < g.q0 + g.nq; q++) {
      for (let k = g.k0; k < g.k0 + g.nk; k++) {
        const t = cellText.text(q, k);
        if (!t) continue;
        ctx.fillStyle = cellText.ink(q, k);
        ctx.fillText(t, g.x0 + (k - g.k0 + 0.5) * g.cell, g.y0 + (q - g.q0 + 0.5) * g.cell);
      }
    }
  }
  drawLabels(ctx, g, rows, cols, focusRow);
  if (focusRow >= g.q0 && focusRow < g.q0 + g.nq) {
    ctx.strokeStyle = FOCUS;
    ctx.lineWidth = 2;
    ctx.strokeRect(g.x0 - 1, g.y0 + (focusRow - g.q0) * g.cell, w + 2, g.cell);
  }
}

/** The labels: rows down the left, columns along the top (rotated), and the axes' names in the
 *  corner between them where there is room; or an axis hint when the labels are too small. */
function drawLabels(ctx, g, rows, cols, focusRow) {
  ctx.fillStyle = '#374151';
  ctx.textBaseline = 'middle';
  if (!g.showLabels) {
    if (g.x0 > 0) {
      ctx.font = '10px system-ui, sans-serif';
      ctx.textAlign = 'left';
      ctx.fillText(`keys ${g.k0}–${g.k0 + g.nk - 1} →`, g.x0, g.y0 / 2);
      ctx.save();
      ctx.translate(g.x0 / 2, g.y0);
      ctx.rotate(Math.PI / 2);
      ctx.fillText(`queries ${g.q0}–${g.q0 + g.nq - 1} →`, 0, 0);
      ctx.restore();
    }
    return;
  }
  if (g.axisNames && g.x0 >= 56 && g.y0 >= 36) {
    ctx.font = 'italic 11px system-ui, sans-serif';
    ctx.textAlign = 'right';
    ctx.fillText('keys →', g.x0 - 4, g.y0 - 20);
    ctx.fillText('queries ↓', g.x0 - 4, g.y0 - 7);
  }
  ctx.textAlign = 'right';
  for (let i = 0; i < g.nq; i++) {
    const q = g.q0 + i;
    ctx.font = `${q === focusRow ? '600 ' : ''}${g.fontPx}px system-ui, sans-serif`;
    ctx.fillStyle = q === focusRow ? FOCUS : '#374151';
    ctx.fillText(rows[q], g.x0 - 4, g.y0 + (i + 0.5) * g.cell, g.x0 - 6);
  }
  ctx.font = `${g.fontPx}px system-ui, sans-serif`;
  ctx.fillStyle = '#374151';
  ctx.textAlign = 'left';
  for (let i = 0; i < g.nk; i++) {
    ctx.save();
    ctx.translate(g.x0 + (i + 0.5) * g.cell, g.y0 - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(cols[g.k0 + i], 0, 0, g.y0 - 6);
    ctx.restore();
  }
}

/** Outlines the hovered row and column of `g` on its overlay canvas (nothing else is redrawn). */
export function drawCrosshair(ctx, g, cell, colour = '#f59e0b') {
  ctx.clearRect(0, 0, ctx.canvas.width, ctx.canvas.height);
  if (!cell) return;
  const { q, k } = cell;
  if (q < g.q0 || q >= g.q0 + g.nq || k < g.k0 || k >= g.k0 + g.nk) return;
  ctx.strokeStyle = colour;
  ctx.lineWidth = 2;
  ctx.strokeRect(g.x0, g.y0 + (q - g.q0) * g.cell, g.nk * g.cell, g.cell);
  ctx.strokeRect(g.x0 + (k - g.k0) * g.cell, g.y0, g.cell, g.nq * g.cell);
}
