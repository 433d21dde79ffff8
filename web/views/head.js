// The head view: one head's T × T attention, large, with token labels on both axes (queries are
// rows, keys columns). Zoom (buttons, + − 0 keys, ctrl+wheel) and pan (drag) keep any length up
// to 512 readable. The heatmap is a pixel buffer drawn once per input; hover and the keyboard
// cursor redraw only the overlay canvas above it.

import { scale, pixels } from '../colour.js';
import { fit, bitmap, matrixGeometry, cellAt, drawMatrix, drawCrosshair } from '../canvas.js';
import * as legend from './legend.js';

const MIN_N = 4;

function build(target) {
  target.classList.add('head-view');
  target.innerHTML = `
    <div class="view-tools">
      <span class="focus-label"></span>
      <span class="zoom">
        <button type="button" class="zoom-out" aria-label="zoom out">−</button>
        <button type="button" class="zoom-in" aria-label="zoom in">+</button>
        <button type="button" class="zoom-fit">fit</button>
        <span class="zoom-label muted"></span>
      </span>
    </div>
    <div class="stage">
      <canvas class="heat" role="img"></canvas>
      <canvas class="overlay" tabindex="0" aria-label="focused head; arrow keys move a cursor over the cells, + and − zoom, 0 fits"></canvas>
    </div>
    <div class="legend"></div>
    <div class="tooltip" role="tooltip" hidden></div>
    <div class="readout sr-only" aria-live="polite"></div>`;
  const overlay = target.querySelector('.overlay');
  const v = () => target._view; // the latest {run, opts, g, tokens, values, mask}
  const local = (e) => { const r = overlay.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
  // The window asked for and not yet drawn: clicks faster than a render compound on it, not on the stale one.
  const want = () => target._want ?? v().g;
  const zoomTo = (n, centre) => {
    const { run, opts } = v();
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
  let drag = null;
  overlay.addEventListener('pointerdown', (e) => {
    if (v().g.n >= v().run.T) return;
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
    hover(target, cellAt(g, ...local(e)), e.clientX, e.clientY);
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
      const next = { q: Math.max(0, Math.min(run.T - 1, c.q + mv[0])), k: Math.max(0, Math.min(run.T - 1, c.k + mv[1])) };
      v().cursor = next;
      if (next.q < g.q0 || next.q >= g.q0 + g.n || next.k < g.k0 || next.k >= g.k0 + g.n) zoomTo(g.n, next);
      hover(target, next);
      target.querySelector('.readout').textContent = describe(v(), next);
    } else if (e.key === '+' || e.key === '=') { e.preventDefault(); zoomTo(want().n / 2, v().cursor); }
    else if (e.key === '-') { e.preventDefault(); zoomTo(want().n * 2, v().cursor); }
    else if (e.key === '0') { e.preventDefault(); zoomTo(Infinity); }
  });
}

const fmtP = (p) => p.toFixed(4);

/** "query → key: p", and what the mask did to the cell. */
export function describe({ tokens, values, mask, run }, { q, k }) {
  const p = values[q * run.T + k];
  return mask && !mask[q * run.T + k]
    ? `${tokens[q]} → ${tokens[k]}: ${fmtP(p)} (masked: −∞ before softmax)`
    : `${tokens[q]} → ${tokens[k]}: ${fmtP(p)}`;
}

function hover(target, cell, clientX, clientY) {
  const v = target._view;
  v.hoverCell = cell;
  drawCrosshair(v.overlayCtx, v.g, cell ?? v.cursor);
  const tip = target.querySelector('.tooltip');
  if (cell && clientX !== undefined) {
    tip.textContent = describe(v, cell);
    tip.style.left = `${clientX + 12}px`;
    tip.style.top = `${clientY + 12}px`;
    tip.hidden = false;
  } else {
    tip.hidden = true;
  }
  v.opts.onHover?.(cell);
}

/**
 * `run`: the result contract. `opts`: {item, layer, head, scale: 'absolute' | 'head', win:
 * {q0, k0, n} | null, fontPx, maxHeight, onZoom(win), onHover(cell)}.
 */
export function render(target, run, opts) {
  if (!target.querySelector('.stage')) build(target);
  target._want = null; // what was asked for is drawn now
  const { item, layer, head } = opts;
  const T = run.T;
  const values = run.head(item, layer, head);
  const mask = run.maskOf(item);
  const tokens = run.results[item].tokens;
  const sc = scale('probability', { max: opts.scale === 'head' ? run.probMax(item, layer, head) : 1 });
  const imgKey = [run.id, item, layer, head, opts.scale].join('|');
  const prev = target._view;
  const img = prev?.imgKey === imgKey ? prev.img : bitmap(pixels(values, T, sc, mask));
  const width = Math.max(120, target.clientWidth || 480);
  const size = Math.floor(Math.min(width, opts.maxHeight ?? width));
  const g = matrixGeometry({ width: size, height: size, T, win: opts.win, labels: true, fontPx: opts.fontPx ?? 12 });
  const heat = target.querySelector('.heat');
  const overlay = target.querySelector('.overlay');
  const drawKey = [imgKey, size, g.q0, g.k0, g.n, g.fontPx, g.showLabels].join('|');
  const minPx = Math.ceil((g.n * size) / g.size) + 1; // at least one device pixel per row
  if (prev?.drawKey !== drawKey) {
    const ctx = fit(heat, size, size, minPx);
    drawMatrix(ctx, g, { img, tokens, mask });
    Object.assign(heat.dataset, { x0: g.x0, y0: g.y0, cell: g.cell, q0: g.q0, k0: g.k0, n: g.n, t: T, labels: g.showLabels });
    heat.setAttribute('aria-label', `layer ${layer}, head ${head}: ${T} × ${T} attention heatmap (queries are rows, keys columns)`);
    legend.render(target.querySelector('.legend'), sc, { masked: true });
  }
  const overlayCtx = fit(overlay, size, size); // outlines only: the screen's pixels are enough
  target.querySelector('.stage').style.height = `${size}px`;
  target.querySelector('.focus-label').textContent = `layer ${layer}, head ${head}` + (run.B > 1 ? `, sentence ${item + 1}` : '');
  target.querySelector('.zoom-label').textContent = g.n < T ? `tokens ${g.q0}–${g.q0 + g.n - 1} × ${g.k0}–${g.k0 + g.n - 1} of ${T}` : (g.showLabels ? '' : `${T} tokens: zoom in to read the labels`);
  const cursor = prev && prev.run.T === T ? prev.cursor : null;
  target._view = { run, opts, g, img, imgKey, drawKey, tokens, values, mask, overlayCtx, cursor, hoverCell: prev?.hoverCell ?? null };
  drawCrosshair(overlayCtx, g, target._view.hoverCell ?? cursor);
}
