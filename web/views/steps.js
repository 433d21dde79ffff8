// Scaled dot-product attention, step by step, for the focused head: QKᵀ/√d_k → the mask →
// masked_fill(−∞) → softmax (→ ·V), each with token labels, its shape and a value scale.
// The panels show the head view's token window.

import { scale, pixels, twoColour } from '../colour.js';
import { fit, bitmap, matrixGeometry, cellAt, drawMatrix, inTasks } from '../canvas.js';
import * as legend from './legend.js';

const ALLOWED = [214, 226, 248], BLOCKED = [55, 65, 81];

const PANELS = [
  { id: 'scores', title: 'QKᵀ / √d_k', what: 'scores' },
  { id: 'mask', title: 'mask', what: 'mask' },
  { id: 'filled', title: 'masked_fill(mask = 0, −∞)', what: 'filled' },
  { id: 'probs', title: 'softmax → weights', what: 'probs' },
];

function build(target) {
  target.classList.add('steps-view');
  target.innerHTML = `<div class="panels">${PANELS.map((p) => `
    <figure class="step" data-step="${p.id}">
      <figcaption><b>${p.title}</b> <span class="shape"></span></figcaption>
      <canvas role="img"></canvas>
    </figure>`).join('')}</div>
    <div class="step-legends"><div class="legend legend-scores"></div><div class="legend-mask"><span class="swatch allowed"></span> may attend <span class="swatch blocked"></span> masked</div><div class="legend legend-probs"></div></div>
    <p class="step-out"></p>
    <div class="tooltip" role="tooltip" hidden></div>`;
  for (const fig of target.querySelectorAll('figure')) {
    const c = fig.querySelector('canvas');
    c.addEventListener('mousemove', (e) => {
      const v = target._view;
      const r = c.getBoundingClientRect();
      const cell = cellAt(v.g, e.clientX - r.left, e.clientY - r.top);
      const tip = target.querySelector('.tooltip');
      if (!cell) { tip.hidden = true; return; }
      tip.textContent = v.describe(fig.dataset.step, cell);
      tip.style.left = `${e.clientX + 12}px`;
      tip.style.top = `${e.clientY + 12}px`;
      tip.hidden = false;
    });
    c.addEventListener('mouseleave', () => { target.querySelector('.tooltip').hidden = true; });
  }
}

/** `opts`: {item, layer, head, scale, win, panelPx, fontPx, headDim}. */
export function render(target, run, opts) {
  if (!target.querySelector('.panels')) build(target);
  const { item, layer, head } = opts;
  const T = run.T;
  const s = run.scoresOf(item, layer, head);
  const m = run.maskOf(item);
  const p = run.head(item, layer, head);
  const tokens = run.results[item].tokens;
  const key = [run.id, item, layer, head, opts.scale].join('|');
  const prev = target._view;
  const fresh = prev?.key !== key;
  const imgs = fresh ? {} : prev.imgs;
  const size = Math.max(150, Math.min(opts.panelPx ?? 260, 520));
  const g = matrixGeometry({ width: size, height: size, T, win: opts.win, labels: true, fontPx: opts.fontPx ?? 11 });
  const minPx = Math.ceil((g.n * size) / g.size) + 1;
  const dk = opts.headDim;
  const shapes = { scores: `(${T}, ${dk})·(${dk}, ${T}) → (${T}, ${T})`, mask: `(${T}, ${T})`, filled: `(${T}, ${T})`, probs: `(${T}, ${T})` };
  let sScale = prev?.sScale, pScale = prev?.pScale;
  const ranges = () => { // the colour scales: ± the largest |score|, and 0–1 (or this head's max)
    if (!fresh) return;
    let smax = 0, pmax = 0;
    for (let i = 0; i < s.length; i++) {
      const v = s[i];
      if (v > smax) smax = v; else if (-v > smax) smax = -v;
      if (p[i] > pmax) pmax = p[i];
    }
    sScale = scale('score', { max: smax });
    pScale = scale('probability', { max: opts.scale === 'head' ? pmax : 1 });
    target._view.sScale = sScale;
    target._view.pScale = pScale;
    legend.render(target.querySelector('.legend-scores'), sScale, { masked: false });
    legend.render(target.querySelector('.legend-probs'), pScale, { masked: true });
  };
  const make = {
    scores: () => bitmap(pixels(s, T, sScale)),
    mask: () => bitmap(pixels(m, T, twoColour(ALLOWED, BLOCKED))),
    filled: () => bitmap(pixels(s, T, sScale, m)),
    probs: () => bitmap(pixels(p, T, pScale, m)),
  };
  const draw = (fig) => {
    const id = fig.dataset.step;
    imgs[id] ??= make[id]();
    const ctx = fit(fig.querySelector('canvas'), size, size, minPx);
    drawMatrix(ctx, g, {
      img: imgs[id], tokens,
      mask: id === 'filled' || id === 'probs' ? m : null,
      cellText: id === 'filled' ? (q, k) => (m[q * T + k] ? null : '−∞') : null,
    });
    Object.assign(fig.querySelector('canvas').dataset, { x0: g.x0, y0: g.y0, cell: g.cell, q0: g.q0, k0: g.k0, n: g.n, labels: g.showLabels });
    fig.querySelector('.shape').textContent = shapes[id];
    fig.querySelector('canvas').setAttribute('aria-label', `${PANELS.find((x) => x.id === id).title} for layer ${layer}, head ${head}, ${T} × ${T}`);
  };
  target.querySelector('.step-out').textContent = `then weights · V: (${T}, ${T})·(${T}, ${dk}) → (${T}, ${dk}), this head's context, concatenated with the other heads' before the output projection.`;
  const fmt = (v) => v.toFixed(4);
  target._view = {
    key, imgs, g, sScale, pScale,
    describe(step, { q, k }) {
      const i = q * T + k, pair = `${tokens[q]} → ${tokens[k]}`;
      if (step === 'scores') return `${pair}: score ${fmt(s[i])}`;
      if (step === 'mask') return `${pair}: ${m[i] ? 'may attend' : 'masked'}`;
      if (step === 'filled') return `${pair}: ${m[i] ? fmt(s[i]) : '−∞'}`;
      return `${pair}: ${fmt(p[i])}${m[i] ? '' : ' (masked: −∞ before softmax)'}`;
    },
  };
  // the ranges, then one panel a task: four 512 × 512 panels in one would block the page
  inTasks(target, [ranges, ...[...target.querySelectorAll('figure')].map((fig) => () => draw(fig))], 'attnscope:steps:task');
}
