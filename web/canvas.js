// Canvas helpers shared by the views: HiDPI backing stores, a heatmap drawn from a pixel buffer
// (never one fillRect a cell), token labels that appear only when they are legible, hatching.

import { MASKED_CSS } from './colour.js';

/** The device pixel ratio views draw at (at least 1). */
export const dpr = () => Math.max(1, window.devicePixelRatio || 1);

/**
 * Sizes `canvas` to `w × h` CSS pixels with a backing store of `w·dpr × h·dpr` (at least `minPx`
 * device pixels on each side, so a 512-row matrix keeps every row) and returns its context,
 * scaled so drawing code works in CSS pixels.
 */
export function fit(canvas, w, h, minPx = 0) {
  const ratio = Math.max(dpr(), minPx / Math.max(1, Math.min(w, h)));
  const bw = Math.round(w * ratio), bh = Math.round(h * ratio);
  if (canvas.width !== bw || canvas.height !== bh) { canvas.width = bw; canvas.height = bh; }
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.imageSmoothingEnabled = false;
  return ctx;
}

/** An ImageData as something drawImage can scale (one pixel a cell). `reuse`: the canvas an
 *  earlier call gave for a picture no longer shown, written over when its size fits (a new
 *  canvas and its context cost more than the pixels: a view redrawn at every keystroke passes
 *  its last one). */
export function bitmap(image, reuse = null) {
  const c = reuse && reuse.width === image.width && reuse.height === image.height ? reuse : new OffscreenCanvas(image.width, image.height);
  c.getContext('2d').putImageData(image, 0, 0);
  return c;
}

let hatchFill = null;
/** A diagonal grey hatch: masked cells, distinct from small weights at any size (one pattern,
 *  made once: a pattern belongs to no canvas). */
export function hatchPattern(ctx) {
  if (!hatchFill) {
    const hatch = new OffscreenCanvas(6, 6);
    const h = hatch.getContext('2d');
    h.fillStyle = '#e5e7eb';
    h.fillRect(0, 0, 6, 6);
    h.strokeStyle = MASKED_CSS;
    h.lineWidth = 1.5;
    h.beginPath();
    h.moveTo(-1, 7); h.lineTo(7, -1);
    h.moveTo(-1, 1); h.lineTo(1, -1);
    h.moveTo(5, 7); h.lineTo(7, 5);
    h.stroke();
    hatchFill = ctx.createPattern(hatch, 'repeat');
  }
  return hatchFill;
}

/**
 * The geometry of a matrix drawn with labels: `x0, y0` the top-left of the cells, `cell` the
 * size of one cell in CSS pixels, the visible window `[q0, q0+n) × [k0, k0+n)`.
 */
export function matrixGeometry({ width, height, T, win, labels, fontPx }) {
  const n = Math.max(1, Math.min(T, win?.n ?? T));
  const q0 = Math.max(0, Math.min(T - n, win?.q0 ?? 0));
  const k0 = Math.max(0, Math.min(T - n, win?.k0 ?? 0));
  const room = Math.min(width, height);
  let pad = labels ? Math.min(Math.round(room * 0.28), Math.round(fontPx * 7)) : 0;
  let cell = (room - pad - 2) / n;
  const showLabels = labels && cell >= Math.min(fontPx, 9);
  if (!showLabels) { pad = labels ? 14 : 0; cell = (room - pad - 2) / n; }
  return { T, n, q0, k0, cell, x0: pad, y0: pad, size: cell * n, showLabels, fontPx: Math.min(fontPx, Math.max(7, Math.floor(cell - 1))) };
}

/** The cell under a point (CSS pixels relative to the canvas), or null. */
export function cellAt(g, x, y) {
  const k = Math.floor((x - g.x0) / g.cell) + g.k0;
  const q = Math.floor((y - g.y0) / g.cell) + g.q0;
  if (x < g.x0 || y < g.y0 || q < g.q0 || k < g.k0 || q >= g.q0 + g.n || k >= g.k0 + g.n) return null;
  return { q, k };
}

/**
 * Draws a T × T matrix: `img` (one pixel a cell) through the window of `g`, masked cells hatched
 * when large enough, `cellText(q, k)` (e.g. "−∞") where it fits, and the token labels.
 */
export function drawMatrix(ctx, g, { img, imgOrigin = { q: 0, k: 0 }, tokens, mask = null, cellText = null }) {
  ctx.clearRect(0, 0, ctx.canvas.width, ctx.canvas.height);
  // `img` holds the matrix from `imgOrigin` on (the whole matrix, or just a window of it)
  ctx.drawImage(img, g.k0 - imgOrigin.k, g.q0 - imgOrigin.q, g.n, g.n, g.x0, g.y0, g.size, g.size);
  if (mask && g.cell >= 5) {
    ctx.fillStyle = hatchPattern(ctx);
    ctx.beginPath();
    for (let q = g.q0; q < g.q0 + g.n; q++) {
      for (let k = g.k0; k < g.k0 + g.n; k++) {
        if (!mask[q * g.T + k]) ctx.rect(g.x0 + (k - g.k0) * g.cell, g.y0 + (q - g.q0) * g.cell, g.cell, g.cell);
      }
    }
    ctx.fill();
  }
  if (cellText && g.cell >= 16) {
    ctx.font = `${Math.min(14, Math.floor(g.cell * 0.42))}px system-ui, sans-serif`;
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    for (let q = g.q0; q < g.q0 + g.n; q++) {
      for (let k = g.k0; k < g.k0 + g.n; k++) {
        const t = cellText(q, k);
        if (!t) continue;
        ctx.fillStyle = '#111827';
        ctx.fillText(t, g.x0 + (k - g.k0 + 0.5) * g.cell, g.y0 + (q - g.q0 + 0.5) * g.cell);
      }
    }
  }
  drawLabels(ctx, g, tokens);
}

/**
 * Names the axes of an attention heatmap in `el` (a caption beside it): `rows` down, `cols`
 * across, with what a row and a column mean on hover.
 */
export function axesCaption(el, { rows = 'queries', cols = 'keys' } = {}) {
  el.textContent = `${rows} ↓ · ${cols} →`;
  el.title = `Rows (↓): ${rows}. Each row is where one query looks: its weights sum to 1. Columns (→): ${cols}, what is looked at.`;
}

/** Token labels: queries down the left, keys along the top (rotated), and the axes' names in the
 *  corner between them where there is room; or an axis hint when the labels are too small. */
export function drawLabels(ctx, g, tokens) {
  ctx.fillStyle = '#374151';
  ctx.textBaseline = 'middle';
  if (!g.showLabels) {
    if (g.x0 > 0) {
      ctx.font = '10px system-ui, sans-serif';
      ctx.textAlign = 'left';
      ctx.fillText(`keys ${g.k0}–${g.k0 + g.n - 1} →`, g.x0, g.y0 / 2);
      ctx.save();
      ctx.translate(g.x0 / 2, g.y0);
      ctx.rotate(Math.PI / 2);
      ctx.fillText(`queries ${g.q0}–${g.q0 + g.n - 1} →`, 0, 0);
      ctx.restore();
    }
    return;
  }
  if (g.x0 >= 56 && g.y0 >= 36) {
    ctx.font = 'italic 11px system-ui, sans-serif';
    ctx.textAlign = 'right';
    ctx.fillText('keys →', g.x0 - 4, g.y0 - 20);
    ctx.fillText('queries ↓', g.x0 - 4, g.y0 - 7);
  }
  ctx.font = `${g.fontPx}px system-ui, sans-serif`;
  ctx.textAlign = 'right';
  for (let i = 0; i < g.n; i++) ctx.fillText(tokens[g.q0 + i], g.x0 - 4, g.y0 + (i + 0.5) * g.cell, g.x0 - 6);
  ctx.textAlign = 'left';
  for (let i = 0; i < g.n; i++) {
    ctx.save();
    ctx.translate(g.x0 + (i + 0.5) * g.cell, g.y0 - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(tokens[g.k0 + i], 0, 0, g.y0 - 6);
    ctx.restore();
  }
}

/** Outlines the hovered row and column of `g` (the overlay canvas; nothing else is redrawn). */
export function drawCrosshair(ctx, g, cell, colour = '#f59e0b') {
  ctx.clearRect(0, 0, ctx.canvas.width, ctx.canvas.height);
  if (!cell) return;
  const { q, k } = cell;
  if (q < g.q0 || q >= g.q0 + g.n || k < g.k0 || k >= g.k0 + g.n) return;
  ctx.strokeStyle = colour;
  ctx.lineWidth = 2;
  ctx.strokeRect(g.x0, g.y0 + (q - g.q0) * g.cell, g.size, g.cell);
  ctx.strokeRect(g.x0 + (k - g.k0) * g.cell, g.y0, g.cell, g.size);
}

/**
 * Shows a tooltip (position: fixed) beside a point in viewport pixels, on the side with more room
 * and no wider than that room: on a phone a tap near an edge would put it off screen. It reads no
 * layout (a hover handler forcing one would cost a layout of the page at every move).
 */
export function placeTip(tip, x, y, gap = 12) {
  const leftward = x > innerWidth / 2, upward = y > innerHeight / 2;
  const room = (leftward ? x : innerWidth - x) - gap - 4;
  Object.assign(tip.style, {
    left: leftward ? 'auto' : `${x + gap}px`, right: leftward ? `${innerWidth - x + gap}px` : 'auto',
    top: upward ? 'auto' : `${y + gap}px`, bottom: upward ? `${innerHeight - y + gap}px` : 'auto',
    maxWidth: `${Math.round(Math.min(room, Math.max(innerWidth * 0.6, 240)))}px`,
  });
  tip.hidden = false;
}

/** How long a render pass, or `inTasks`, works in one task before it lets the page in (half a frame). */
export const SLICE_MS = 8;

/**
 * Runs `steps` in tasks of at most about SLICE_MS (a newer call for the same `owner` cancels the
 * rest), so no single task blocks the page; each task is measured as `name` for the benchmark.
 */
export function inTasks(owner, steps, name) {
  const token = (owner._tasks = {});
  let i = 0;
  const next = () => {
    if (owner._tasks !== token) return;
    const t0 = performance.now();
    do steps[i++](); while (i < steps.length && performance.now() - t0 < SLICE_MS);
    measure(name, t0);
    if (i < steps.length) setTimeout(next, 0);
  };
  next();
}

/** A User Timing measure of the last `name` only (a long session must not pile them up). */
export function measure(name, start) {
  performance.clearMeasures(name);
  performance.measure(name, { start });
}

/** The n × n window of a T × T matrix from (q0, k0), as a new array. */
export function windowOf(values, T, { q0, k0, n }) {
  const out = new values.constructor(n * n);
  for (let q = 0; q < n; q++) out.set(values.subarray((q0 + q) * T + k0, (q0 + q) * T + k0 + n), q * n);
  return out;
}
