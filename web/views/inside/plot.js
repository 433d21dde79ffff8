// Small drawing helpers shared by the "Inside the encoder" panels scale, stack and cross:
// rectangular heatmaps (one pixel a cell, scaled up), labelled grids, a tooltip, text nodes.

import { fit } from '../../canvas.js';
import { STEPS, inkOn } from '../../colour.js';

/** An element with a class and text (textContent only). */
export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** A rows × cols matrix as a bitmap, one pixel a cell, coloured by scale `sc`. */
export function rectImage(values, rows, cols, sc) {
  const out = new Uint32Array(rows * cols);
  const { words, mul, add } = sc, top = STEPS - 1;
  for (let i = 0; i < out.length; i++) {
    let j = Math.floor(values[i] * mul + add);
    j = j < 0 ? 0 : j > top ? top : j;
    out[i] = words[j];
  }
  const c = new OffscreenCanvas(cols, rows);
  c.getContext('2d').putImageData(new ImageData(new Uint8ClampedArray(out.buffer), cols, rows), 0, 0);
  return c;
}

/**
 * Draws a labelled heatmap on `canvas` (sized here, HiDPI): `values` rows × cols, `rowLabels`
 * down the left, `colLabels` along the top (rotated), `text(r, c)` in the cells when they fit,
 * `outline` {r, c} (a cell, or r / c alone for a row or column), the rows after `after` dimmed. Returns the geometry
 * {x0, y0, cw, ch, rows, cols} for hit-testing with `cellOf`.
 */
export function heatmap(canvas, { values, rows, cols, sc, rowLabels, colLabels, width, cellH, fontPx = 11, text = null, outline = null, after = null, maxCellW = 64, left, top, outlineColour = '#1d4ed8' }) {
  const ctx0 = canvas.getContext('2d');
  ctx0.font = `${fontPx}px system-ui, sans-serif`;
  const measureAll = (ls) => Math.max(0, ...(ls ?? []).map((s) => ctx0.measureText(String(s)).width));
  const x0 = left ?? Math.ceil(Math.min(140, measureAll(rowLabels) + 8));
  const y0 = top ?? Math.ceil(Math.min(110, measureAll(colLabels) + 8));
  const cw = Math.max(2, Math.min(maxCellW, (width - x0 - 2) / cols));
  const ch = cellH ?? cw;
  const w = Math.ceil(x0 + cw * cols + 2), h = Math.ceil(y0 + ch * rows + 2);
  const ctx = fit(canvas, w, h, Math.max(rows, cols) + 1);
  ctx.clearRect(0, 0, w, h);
  ctx.drawImage(rectImage(values, rows, cols, sc), 0, 0, cols, rows, x0, y0, cw * cols, ch * rows);
  // rows after `after` dimmed (a decoding's steps not yet written)
  if (after !== null && after + 1 < rows) {
    ctx.fillStyle = 'rgba(255, 255, 255, 0.72)';
    ctx.fillRect(x0, y0 + (after + 1) * ch, cw * cols, (rows - after - 1) * ch);
  }
  ctx.fillStyle = '#374151';
  ctx.textBaseline = 'middle';
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  if (rowLabels && ch >= 8) {
    ctx.textAlign = 'right';
    rowLabels.forEach((s, r) => ctx.fillText(String(s), x0 - 4, y0 + (r + 0.5) * ch, x0 - 6));
  }
  if (colLabels && cw >= 8) {
    ctx.textAlign = 'left';
    colLabels.forEach((s, c) => {
      ctx.save();
      ctx.translate(x0 + (c + 0.5) * cw, y0 - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(String(s), 0, 0, y0 - 6);
      ctx.restore();
    });
  }
  if (text) {
    const px = Math.min(fontPx, Math.floor(ch * 0.45));
    if (px >= 8) {
      ctx.font = `${px}px system-ui, sans-serif`;
      ctx.textAlign = 'center';
      for (let r = 0; r < rows; r++) {
        for (let c = 0; c < cols; c++) {
          const t = text(r, c);
          if (!t || ctx.measureText(t).width > cw - 2) continue;
          // black on a light cell, white on a dark one (whichever contrasts more)
          ctx.fillStyle = after !== null && r > after ? '#6b7280' : inkOn(sc.table[sc.index(values[r * cols + c])]);
          ctx.fillText(t, x0 + (c + 0.5) * cw, y0 + (r + 0.5) * ch);
        }
      }
    }
  }
  if (outline) {
    ctx.strokeStyle = outlineColour;
    ctx.lineWidth = 2;
    const { r, c } = outline;
    if (r !== undefined && c !== undefined) ctx.strokeRect(x0 + c * cw, y0 + r * ch, cw, ch);
    else if (r !== undefined) ctx.strokeRect(x0, y0 + r * ch, cw * cols, ch);
    else if (c !== undefined) ctx.strokeRect(x0 + c * cw, y0, cw, ch * rows);
  }
  return { x0, y0, cw, ch, rows, cols };
}

/** The cell {r, c} of a heatmap geometry under a mouse event, or null. */
export function cellOf(g, canvas, e) {
  const b = canvas.getBoundingClientRect();
  const c = Math.floor((e.clientX - b.left - g.x0) / g.cw), r = Math.floor((e.clientY - b.top - g.y0) / g.ch);
  return r >= 0 && c >= 0 && r < g.rows && c < g.cols ? { r, c } : null;
}

/** A tooltip inside `target` that shows `describe(cell)` for the heatmap on `canvas`. */
export function hoverTip(target, canvas, describe) {
  let tip = target.querySelector(':scope > .tooltip');
  if (!tip) { tip = el('div', 'tooltip'); tip.setAttribute('role', 'tooltip'); tip.hidden = true; target.append(tip); }
  canvas.addEventListener('mousemove', (e) => {
    const t = canvas._g && describe(cellOf(canvas._g, canvas, e), e);
    if (!t) { tip.hidden = true; return; }
    tip.textContent = t;
    tip.style.left = `${e.clientX + 12}px`;
    tip.style.top = `${e.clientY + 12}px`;
    tip.hidden = false;
  });
  canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
}

/** `v` with `n` decimals (a minus sign, not a hyphen). */
export const num = (v, n = 3) => (v < 0 && Math.abs(v).toFixed(n) !== (0).toFixed(n) ? '−' : '') + Math.abs(v).toFixed(n);
