// Rectangular attention views: an attention of n_q queries over n_k keys, as an encoder–decoder
// has three of them (the encoder's S × S, the decoder's T × T under the no-peek mask, and the
// cross-attention's T × S: decoder rows, source columns). Each view draws one `matrix`:
//
//   {values: [n_q][n_k] numbers, rows: n_q labels, cols: n_k labels, masked(q, k) → bool}
//
// `grid` draws every layer and head of one attention (click a head to focus it), `head` one head
// large, with its labels, hover (a tooltip and a crosshair) and a focused row outlined. The
// matrices themselves are drawn by matrix.js, as the square heatmaps are; the line view is
// views/lines.js's, the same for square and rectangular attention. Every label is drawn as text
// on a canvas or set as textContent, never parsed as markup.

import { scale, pixels, inkOn } from '../colour.js';
import { fit, bitmap, axesCaption, placeTip } from '../canvas.js';
import { labelled, cellAt, rowAt, drawMatrix, drawCrosshair, FOCUS } from '../matrix.js';
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

/**
 * Every layer and head of one attention, each a thumbnail (n_q × n_k, the same aspect); the
 * focused head outlined, a click (or Enter on the focused canvas) focuses one. `opts`:
 * {matrices: [L][H] of matrix, layer, head, width, fontPx, onFocus(layer, head), label, number(l):
 * the model's number of layer l (given attention of some layers only)}.
 */
export function grid(target, { matrices, layer, head: h0, width = 480, fontPx = 11, onFocus, label = '', number = (l) => l }) {
  if (!target.querySelector('canvas.rect-grid')) {
    target.classList.add('rect-grid-view');
    target.innerHTML = '<canvas class="rect-grid" role="img" tabindex="0"></canvas><div class="tooltip" role="tooltip" hidden></div>';
    const c = target.querySelector('canvas'), tip = target.querySelector('.tooltip');
    const at = (e) => {
      const v = target._view, r = c.getBoundingClientRect();
      const x = e.clientX - r.left - v.x0, y = e.clientY - r.top - v.y0;
      const h = Math.floor(x / (v.tw + v.gap)), l = Math.floor(y / (v.th + v.gap));
      return h >= 0 && l >= 0 && h < v.H && l < v.L && x - h * (v.tw + v.gap) < v.tw && y - l * (v.th + v.gap) < v.th ? { l, h, x: e.clientX, y: e.clientY } : null;
    };
    c.addEventListener('click', (e) => { const p = at(e); if (p) target._view.onFocus?.(p.l, p.h); });
    c.addEventListener('mousemove', (e) => {
      const p = at(e);
      c.style.cursor = p ? 'pointer' : '';
      tip.hidden = !p;
      if (!p) return;
      tip.textContent = `layer ${target._view.number(p.l)}, head ${p.h} (click to focus it)`;
      placeTip(tip, p.x, p.y);
    });
    c.addEventListener('mouseleave', () => { tip.hidden = true; });
    c.addEventListener('keydown', (e) => {
      const v = target._view, d = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] }[e.key];
      if (!d) return;
      e.preventDefault();
      e.stopPropagation(); // the arrows move the head here, not the step
      v.onFocus?.(Math.max(0, Math.min(v.L - 1, v.layer + d[0])), Math.max(0, Math.min(v.H - 1, v.head + d[1])));
    });
  }
  const L = matrices.length, H = matrices[0]?.length ?? 0;
  const nq = matrices[0]?.[0]?.values.length ?? 1, nk = matrices[0]?.[0]?.values[0]?.length ?? 1;
  const x0 = Math.round(fontPx * 2.4), y0 = Math.round(fontPx * 1.6), gap = 6;
  const tw = Math.max(24, Math.min(150, (width - x0 - gap * H) / Math.max(1, H)));
  const th = Math.max(12, Math.min(tw * 1.6, tw * (nq / Math.max(1, nk))));
  const w = x0 + H * (tw + gap), hgt = y0 + L * (th + gap);
  const c = target.querySelector('canvas');
  const ctx = fit(c, w, hgt);
  ctx.clearRect(0, 0, w, hgt);
  ctx.imageSmoothingEnabled = false;
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  ctx.fillStyle = '#374151';
  ctx.textBaseline = 'middle';
  ctx.textAlign = 'center';
  for (let h = 0; h < H; h++) ctx.fillText(`H${h}`, x0 + h * (tw + gap) + tw / 2, y0 / 2);
  for (let l = 0; l < L; l++) {
    ctx.textAlign = 'left';
    ctx.fillStyle = '#374151';
    ctx.fillText(`L${number(l)}`, 2, y0 + l * (th + gap) + th / 2);
    for (let h = 0; h < H; h++) {
      const x = x0 + h * (tw + gap), y = y0 + l * (th + gap);
      ctx.drawImage(bitmapOf(matrices[l][h]), x, y, tw, th);
      if (l === layer && h === h0) {
        ctx.strokeStyle = FOCUS;
        ctx.lineWidth = 2.5;
        ctx.strokeRect(x - 2, y - 2, tw + 4, th + 4);
      }
    }
  }
  c.setAttribute('aria-label', `${label}: ${L} layers × ${H} heads; layer ${number(layer)}, head ${h0} focused (arrow keys move it)`);
  c.dataset.layers = String(L);
  c.dataset.heads = String(H);
  target._view = { x0, y0, gap, tw, th, L, H, layer, head: h0, onFocus, number };
}
