// The model view: every layer × head as a small heatmap (rows = layers). Click or arrow keys
// focus a head; alt-click knocks it out (or back in). Large inputs are pooled (max) to the
// thumbnail's pixels and drawn a few heads a frame, so no task blocks the page. Coloured by a
// head metric (or, comparing two sentences, by max |ΔA|), each head is one flat colour with its value.

import { scale, pixels, metricScale, css } from '../colour.js';
import { dpr, measure } from '../canvas.js';
import { pooled } from '../summary.js';
import { METRICS } from '../store.js';
import * as legend from './legend.js';

const fmt = (v) => (Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2));

const BUDGET_MS = 5;

function build(target, L, H, opts) {
  target.replaceChildren();
  target.classList.add('grid-view');
  const grid = document.createElement('div');
  grid.className = 'grid';
  grid.tabIndex = 0;
  grid.setAttribute('role', 'grid');
  grid.setAttribute('aria-label', `${L} layers × ${H} heads; arrow keys move the focused head`);
  grid.style.gridTemplateColumns = `2.2em repeat(${H}, minmax(0, 1fr))`;
  const corner = document.createElement('span');
  grid.append(corner);
  for (let h = 0; h < H; h++) {
    const s = document.createElement('span');
    s.className = 'collabel';
    s.textContent = h;
    grid.append(s);
  }
  for (let l = 0; l < L; l++) {
    const label = document.createElement('span');
    label.className = 'rowlabel';
    label.textContent = `L${l}`;
    grid.append(label);
    for (let h = 0; h < H; h++) {
      const c = document.createElement('canvas');
      c.dataset.layer = l;
      c.dataset.head = h;
      c.setAttribute('role', 'img');
      c.setAttribute('aria-label', `layer ${l}, head ${h}`);
      grid.append(c);
    }
  }
  grid.addEventListener('click', (e) => {
    const c = e.target.closest('canvas');
    if (!c) return;
    if (e.altKey) target._opts.onKnock?.(+c.dataset.layer, +c.dataset.head);
    else target._opts.onFocus?.(+c.dataset.layer, +c.dataset.head);
  });
  grid.addEventListener('keydown', (e) => {
    const mv = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] }[e.key];
    if (!mv) return;
    e.preventDefault();
    target._opts.onMove?.(mv[0], mv[1]); // relative: a second key before the next render still counts
  });
  target.append(grid);
  target._shape = `${L}x${H}`;
}

/**
 * What colours the heads instead of their attention: `{values(l, h), sc, what}` for a metric
 * (when the run has it) or for max |ΔA| (comparing two sentences of the same length), else null.
 */
function colouring(run, opts) {
  if (opts.compare?.same) {
    const { maxAbs, maxAll } = opts.compare;
    return { values: maxAbs, sc: metricScale(0, maxAll, 'max |ΔA| of the head (second sentence − first)'), what: 'max |ΔA|' };
  }
  const flat = opts.metric ? run.metric(opts.item, opts.metric) : null;
  if (!flat) return null;
  let lo = Infinity, hi = -Infinity;
  for (const v of flat) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  return { values: (l, h) => flat[l * run.H + h], sc: metricScale(lo, hi, METRICS[opts.metric]), what: METRICS[opts.metric] };
}

/** A knocked-out head: a red cross over its cell (`w` × `h` pixels). */
function cross(ctx, w, h) {
  ctx.strokeStyle = '#c0392b';
  ctx.lineWidth = Math.max(1.5, w / 14);
  ctx.beginPath();
  ctx.moveTo(w * 0.15, h * 0.15); ctx.lineTo(w * 0.85, h * 0.85);
  ctx.moveTo(w * 0.85, h * 0.15); ctx.lineTo(w * 0.15, h * 0.85);
  ctx.stroke();
}

/** Every head as one flat colour of `by.sc` with its value printed on it. */
function drawColoured(canvases, by, off) {
  const side = Math.max(16, Math.round((canvases[0].clientWidth || 48) * dpr()));
  for (const c of canvases) {
    const l = +c.dataset.layer, h = +c.dataset.head, v = by.values(l, h), isOff = off.has(`${l}:${h}`);
    if (c.width !== side) { c.width = side; c.height = side; }
    const ctx = c.getContext('2d');
    const rgb = by.sc.table[by.sc.index(v)];
    ctx.fillStyle = css(rgb);
    ctx.fillRect(0, 0, side, side);
    ctx.fillStyle = rgb[0] * 0.3 + rgb[1] * 0.59 + rgb[2] * 0.11 > 140 ? '#111' : '#fff';
    ctx.font = `${Math.round(side / 3.6)}px system-ui, sans-serif`;
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    ctx.fillText(fmt(v), side / 2, side / 2);
    if (isOff) cross(ctx, side, side);
    c.setAttribute('aria-label', `layer ${l}, head ${h}: ${by.what} ${fmt(v)}${isOff ? ' (knocked out)' : ''}`);
  }
}

/**
 * `run`: the result contract; `opts`: {item, layer, head, scale: 'absolute' | 'head', metric: a
 * METRICS name or '', off: Set of "layer:head" knocked out, compare: compareOf(run) or null,
 * onFocus(layer, head), onMove(dLayer, dHead), onKnock(layer, head)}.
 */
export function render(target, run, opts) {
  target._opts = opts;
  const { L, H, T } = run;
  const off = opts.off ?? new Set();
  if (target._shape !== `${L}x${H}`) build(target, L, H, opts);
  const canvases = [...target.querySelectorAll('.grid canvas')];
  for (const c of canvases) {
    c.classList.toggle('focused', +c.dataset.layer === opts.layer && +c.dataset.head === opts.head);
    c.classList.toggle('off', off.has(`${c.dataset.layer}:${c.dataset.head}`));
  }
  const by = colouring(run, opts);
  const key = [run.id, opts.item, opts.scale, by ? by.what : '', [...off].join(',')].join('|');
  if (target._drawn === key) return;
  target._drawn = key;
  // the colour key, only while the heads are coloured by a value
  let keyEl = target.querySelector('.grid-legend');
  if (by && !keyEl) {
    keyEl = document.createElement('div');
    keyEl.className = 'grid-legend';
    target.append(keyEl);
  }
  if (by) legend.render(keyEl, by.sc, { masked: false });
  else keyEl?.remove();
  target.querySelector('.grid').setAttribute('aria-label', `${L} layers × ${H} heads${by ? `, coloured by ${by.what}` : ''}; arrow keys move the focused head, alt-click knocks a head out`);
  const token = (target._token = {});
  if (by) {
    drawColoured(canvases, by, off);
    target.dataset.drawn = key;
    return;
  }
  const side = canvases[0].clientWidth || 48;
  const R = Math.max(16, Math.ceil(side * dpr()));
  const mask = run.maskOf(opts.item);
  const tokens = run.results[opts.item].tokens;
  let i = 0;
  const step = () => {
    if (target._token !== token) return; // a newer render took over
    const start = performance.now();
    while (i < canvases.length && performance.now() - start < BUDGET_MS) {
      const c = canvases[i++];
      const l = +c.dataset.layer, h = +c.dataset.head;
      // long inputs come pooled from the worker; short ones are pooled here (cheaply)
      const p = run.thumb(opts.item, l, h) ?? pooled(run.head(opts.item, l, h), mask, T, R);
      const { max, arg } = p;
      const img = pixels(p.values, p.n, scale('probability', { max: opts.scale === 'head' ? max : 1 }), p.mask);
      if (c.width !== p.n) { c.width = p.n; c.height = p.n; }
      const ctx = c.getContext('2d');
      ctx.putImageData(img, 0, 0);
      const isOff = off.has(`${l}:${h}`);
      if (isOff) cross(ctx, p.n, p.n);
      c.setAttribute('aria-label', `layer ${l}, head ${h}: strongest ${tokens[Math.floor(arg / T)]} → ${tokens[arg % T]} (${max.toFixed(2)})${isOff ? ' (knocked out)' : ''}`);
    }
    measure('attnscope:model:chunk', start);
    if (i < canvases.length) requestAnimationFrame(step);
    else target.dataset.drawn = key;
  };
  step();
}
