// The model view: every layer × head as a small heatmap (rows = layers). Click or arrow keys
// focus a head. Large inputs are pooled (max) to the thumbnail's pixels and drawn a few heads a
// frame, so no task blocks the page.

import { scale, pixels } from '../colour.js';
import { dpr, measure } from '../canvas.js';
import { pooled } from '../summary.js';

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
    if (c) target._opts.onFocus?.(+c.dataset.layer, +c.dataset.head);
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
 * `run`: the result contract; `opts`: {item, layer, head, scale: 'absolute' | 'head', onFocus(layer,
 * head), onMove(dLayer, dHead)}.
 */
export function render(target, run, opts) {
  target._opts = opts;
  const { L, H, T } = run;
  if (target._shape !== `${L}x${H}`) build(target, L, H, opts);
  const canvases = [...target.querySelectorAll('canvas')];
  for (const c of canvases) c.classList.toggle('focused', +c.dataset.layer === opts.layer && +c.dataset.head === opts.head);
  const key = [run.id, opts.item, opts.scale].join('|');
  if (target._drawn === key) return;
  target._drawn = key;
  const token = (target._token = {});
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
      c.getContext('2d').putImageData(img, 0, 0);
      c.setAttribute('aria-label', `layer ${l}, head ${h}: strongest ${tokens[Math.floor(arg / T)]} → ${tokens[arg % T]} (${max.toFixed(2)})`);
    }
    measure('attnscope:model:chunk', start);
    if (i < canvases.length) requestAnimationFrame(step);
    else target.dataset.drawn = key;
  };
  step();
}
