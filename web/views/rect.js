// Rectangular attention views: an attention of n_q queries over n_k keys, as an encoder–decoder
// has three of them (the encoder's S × S, the decoder's T × T under the no-peek mask, and the
// cross-attention's T × S: decoder rows, source columns). Each view draws one `matrix`:
//
//   {values: [n_q][n_k] numbers, rows: n_q labels, cols: n_k labels, masked(q, k) → bool}
//
// `head` draws one head large, with its labels, hover (a tooltip and a crosshair) and a focused
// row outlined. The matrices themselves are drawn by matrix.js, as the square heatmaps are; every
// layer and head is views/grid.js's model view and the line view views/lines.js's, the same for
// square and rectangular attention. Every label is drawn as text on a canvas or set as
// textContent, never parsed as markup.

import { scale, pixels, inkOn } from '../colour.js';
import { fit, bitmap, axesCaption, placeTip } from '../canvas.js';
import { labelled, cellAt, rowAt, drawMatrix, drawCrosshair } from '../matrix.js';
import { noteTip } from '../glossary.js';

const PROB = scale('probability');
const HOVER = '#f59e0b';

/** A matrix as a bitmap, one pixel a cell; masked cells grey. */
function bitmapOf({ values, masked }) {
  const nq = Math.max(1, values.length), nk = Math.max(1, values[0]?.length ?? 0);
  const flat = new Float32Array(nq * nk), allowed = masked ? new Uint8Array(nq * nk) : null;
  values.forEach((row, q) => {
    flat.set(row, q * nk);
    if (allowed) for (let k = 0; k < row.length; k++) allowed[q * nk + k] = masked(q, k) ? 0 : 1;
  });
  return bitmap(pixels(flat, nq, PROB, allowed, nk));
}

/** Each weight written in its cell where it fits (the masked ones are exactly 0); the rows
 *  after `after` (steps not yet written) in grey. */
function weightsIn(g, m, after) {
  return {
    minCell: 22, fontPx: Math.min(g.fontPx, Math.floor(g.cell * 0.38)),
    text: (q, k) => {
      const p = m.values[q][k];
      return m.masked?.(q, k) || p < 0.005 ? null : p >= 0.995 ? '1' : p.toFixed(2).slice(1);
    },
    ink: (q, k) => (after !== null && q > after ? '#6b7280' : inkOn(PROB.table[PROB.index(m.values[q][k])])),
  };
}

/**
 * One head of one attention, large. `opts`: {matrix, width, maxHeight, maxCell (px), fontPx, focusRow, after
 * (rows after it dimmed: a decoding's steps not yet written), label (what the
 * matrix is, for the canvas's aria-label), axes: {rows, cols} (what they are, named above the
 * matrix), describe(q, k) → the tooltip's text, onRow(q) (a click on a row), onHover(q | null)}.
 */
export function head(target, { matrix, width = 480, maxHeight = Infinity, maxCell = 34, fontPx = 12, focusRow = -1, after = null, label = '', axes = {}, describe, onRow, onHover }) {
  if (!target.querySelector('canvas.rect-heat')) {
    target.classList.add('rect-head');
    target.innerHTML = '<p class="axes"></p><div class="stage"><canvas class="rect-heat" role="img"></canvas><canvas class="overlay" tabindex="0"></canvas></div><div class="tooltip" role="tooltip" hidden></div>';
    const overlay = target.querySelector('.overlay'), tip = target.querySelector('.tooltip');
    const local = (e) => { const r = overlay.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
    const show = (cell, e) => {
      const v = target._view;
      drawCrosshair(overlay.getContext('2d'), v.g, cell, HOVER);
      if (!cell) { tip.hidden = true; v.onHover?.(null); return; }
      tip.textContent = v.describe(cell.q, cell.k);
      noteTip(tip, v.rows[cell.q], v.cols[cell.k]);
      placeTip(tip, e.clientX, e.clientY, 14);
      v.onHover?.(cell.q);
    };
    overlay.addEventListener('mousemove', (e) => { const [x, y] = local(e); show(cellAt(target._view.g, x, y), e); });
    overlay.addEventListener('mouseleave', () => show(null));
    // a phone has no hover: a tap on a cell shows its weight, a tap on a row's label focuses the row
    let touch = false;
    overlay.addEventListener('pointerdown', (e) => { touch = e.pointerType === 'touch'; });
    overlay.addEventListener('click', (e) => {
      const [x, y] = local(e), g = target._view.g;
      const cell = cellAt(g, x, y);
      if (touch && cell) { show(cell, e); return; }
      const q = rowAt(g, y);
      if (q !== null && x < g.x0 + g.nk * g.cell) target._view.onRow?.(q);
    });
  }
  const heat = target.querySelector('.rect-heat'), overlay = target.querySelector('.overlay');
  const probe = heat.getContext('2d');
  // larger type asks for larger cells (presenter mode)
  const g = labelled(probe, matrix, { width, maxHeight, maxCell: Math.max(maxCell, fontPx * 3), fontPx });
  const ctx = fit(heat, g.w, g.h);
  const stage = target.querySelector('.stage');
  stage.style.width = `${g.w}px`;
  stage.style.height = `${g.h}px`;
  drawMatrix(ctx, g, { img: bitmapOf(matrix), masked: matrix.masked, after, cellText: weightsIn(g, matrix, after), rows: matrix.rows, cols: matrix.cols, focusRow });
  fit(overlay, g.w, g.h).clearRect(0, 0, g.w, g.h);
  target.querySelector('.tooltip').hidden = true;
  axesCaption(target.querySelector('.axes'), axes);
  const named = `${label} (rows: ${axes.rows ?? 'queries'}, columns: ${axes.cols ?? 'keys'})`;
  heat.setAttribute('aria-label', named);
  overlay.setAttribute('aria-label', `${named}; hover or tap a cell for its weight, click a row (or tap its label) to focus it`);
  heat.dataset.rows = String(g.nq);
  heat.dataset.cols = String(g.nk);
  target._view = { g, rows: matrix.rows, cols: matrix.cols, describe: describe ?? ((q, k) => `${matrix.rows[q]} → ${matrix.cols[k]}: ${matrix.values[q][k].toFixed(3)}`), onRow, onHover };
}
