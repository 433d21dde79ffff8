// Canvas helpers shared by the views: HiDPI backing stores, pictures drawn from a pixel buffer
// (never one fillRect a cell), the hatching of masked cells, tooltips and render tasks. An
// attention matrix itself is drawn by matrix.js.

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
 * Names the axes of an attention heatmap in `el` (a caption beside it): `rows` down, `cols`
 * across, with what a row and a column mean on hover.
 */
export function axesCaption(el, { rows = 'queries', cols = 'keys' } = {}) {
  el.textContent = `${rows} ↓ · ${cols} →`;
  el.title = `Rows (↓): ${rows}. Each row is where one query looks: its weights sum to 1. Columns (→): ${cols}, what is looked at.`;
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
