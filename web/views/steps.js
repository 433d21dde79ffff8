// Scaled dot-product attention, step by step, for the focused head: QKᵀ/√d_k → the mask →
// masked_fill(−∞) → softmax (→ ·V), each with token labels, its shape and a value scale.
// The panels show the head view's token window.

import { scale, pixels, twoColour } from '../colour.js';
import { fit, bitmap, inTasks, windowOf, axesCaption } from '../canvas.js';
import { square, cellAt, maskedBy, drawMatrix } from '../matrix.js';
import { noteTip } from '../glossary.js';
import { scoresIn, stepsPart, STEPS_ROWS } from '../result.js';
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
  target.innerHTML = `<p class="axes"></p><div class="panels">${PANELS.map((p) => `
    <figure class="step" data-step="${p.id}">
      <figcaption><b>${p.title}</b> <span class="shape"></span></figcaption>
      <canvas role="img"></canvas>
    </figure>`).join('')}</div>
    <div class="step-legends"><div class="legend legend-scores"></div><div class="legend-mask"><span class="swatch allowed"></span> may attend <span class="swatch blocked"></span> masked</div><div class="legend legend-probs"></div></div>
    <p class="step-window muted"></p>
    <p class="step-out"></p>
    <div class="tooltip" role="tooltip" hidden></div>`;
  axesCaption(target.querySelector('.axes'));
  for (const fig of target.querySelectorAll('figure')) {
    const c = fig.querySelector('canvas');
    c.addEventListener('mousemove', (e) => {
      const v = target._view;
      const r = c.getBoundingClientRect();
      const cell = cellAt(v.g, e.clientX - r.left, e.clientY - r.top);
      const tip = target.querySelector('.tooltip');
      if (!cell) { tip.hidden = true; return; }
      tip.textContent = v.describe(fig.dataset.step, cell);
      noteTip(tip, v.tokens[cell.q], v.tokens[cell.k]);
      tip.style.left = `${e.clientX + 12}px`;
      tip.style.top = `${e.clientY + 12}px`;
      tip.hidden = false;
    });
    c.addEventListener('mouseleave', () => { target.querySelector('.tooltip').hidden = true; });
  }
}

/** `opts`: {item, layer, head, scale, win, panelPx, fontPx, headDim, onScores(part)}: a long
 *  run's scores come a window at a time (result.js `scoresIn`), and `onScores` asks for the
 *  window the panels show when the run does not hold it yet (they are drawn when it comes). */
export function render(target, run, opts) {
  if (!target.querySelector('.panels')) build(target);
  const { item, layer, head } = opts;
  const T = run.T;
  const m = run.maskOf(item, layer);
  const p = run.head(item, layer, head);
  const tokens = run.results[item].labels;

  const size = Math.max(150, Math.min(opts.panelPx ?? 260, 520));
  // the head view's window, at most STEPS_ROWS tokens (result.js `stepsPart`)
  const part = stepsPart(T, opts.win);
  const g = square({ width: size, height: size, T, win: { q0: part.q0, k0: part.k0, n: part.q1 - part.q0 }, labels: true, fontPx: opts.fontPx ?? 11 });
  const minPx = Math.ceil((g.n * size) / g.size) + 1;
  const key = [run.id, item, layer, head, opts.scale, g.q0, g.k0, g.n].join('|');
  const prev = target._view;
  const imgs = prev?.key === key ? prev.imgs : {};
  const spare = prev?.key === key ? {} : prev?.imgs ?? {}; // the last run's pictures, written over
  const dk = opts.headDim;
  const shapes = { scores: `(${T}, ${dk})·(${dk}, ${T}) → (${T}, ${T})`, mask: `(${T}, ${T})`, filled: `(${T}, ${T})`, probs: `(${T}, ${T})` };
  // the colour scales: ± the largest |score|, and 0–1 (or this head's max)
  const sScale = scale('score', { max: run.scoreMax(item, layer, head) });
  const pScale = scale('probability', { max: opts.scale === 'head' ? run.probMax(item, layer, head) : 1 });
  legend.render(target.querySelector('.legend-scores'), sScale, { masked: false });
  legend.render(target.querySelector('.legend-probs'), pScale, { masked: true });
  // each panel's picture holds just the window it shows (64 × 64 at most, not 512 × 512)
  const w = { q0: g.q0, k0: g.k0, n: g.n };
  const sw = scoresIn(run, item, layer, head, part), mw = windowOf(m, T, w), pw = windowOf(p, T, w);
  if (!sw) opts.onScores?.(part);
  const make = {
    // not here yet (a long run's window, asked for): drawn blank, and again when it comes
    scores: () => sw && bitmap(pixels(sw, g.n, sScale), spare.scores),
    mask: () => bitmap(pixels(mw, g.n, twoColour(ALLOWED, BLOCKED)), spare.mask),
    filled: () => sw && bitmap(pixels(sw, g.n, sScale, mw), spare.filled),
    probs: () => bitmap(pixels(pw, g.n, pScale, mw), spare.probs),
  };
  const draw = (fig) => {
    const id = fig.dataset.step;
    imgs[id] ??= make[id]();
    const ctx = fit(fig.querySelector('canvas'), size, size, minPx);
    drawMatrix(ctx, g, {
      img: imgs[id], imgOrigin: { q: g.q0, k: g.k0 }, rows: tokens, cols: tokens,
      masked: id === 'filled' || id === 'probs' ? maskedBy(m, T) : null,
      cellText: id === 'filled' ? { minCell: 16, fontPx: Math.min(14, Math.floor(g.cell * 0.42)), text: (q, k) => (m[q * T + k] ? null : '−∞'), ink: () => '#111827' } : null,
    });
    Object.assign(fig.querySelector('canvas').dataset, { x0: g.x0, y0: g.y0, cell: g.cell, q0: g.q0, k0: g.k0, n: g.n, labels: g.showLabels, pending: imgs[id] ? '' : '1' });
    fig.querySelector('.shape').textContent = shapes[id];
    if (!imgs[id]) { // a long run's window of scores on its way: said in the panel (its caption keeps its width)
      ctx.fillStyle = '#6b7280';
      ctx.font = `${opts.fontPx ?? 11}px system-ui, sans-serif`;
      ctx.textAlign = 'center';
      ctx.textBaseline = 'middle';
      ctx.fillText('computing the scores…', g.x0 + g.size / 2, g.y0 + g.size / 2);
    }
    // under the √d_k ablation the scores are QKᵀ itself
    const title = id === 'scores' && run.scale === 'none' ? 'QKᵀ (ablation: not ÷ √d_k)' : PANELS.find((x) => x.id === id).title;
    fig.querySelector('figcaption b').textContent = title;
    fig.querySelector('canvas').setAttribute('aria-label', `${title} for layer ${layer}, head ${head}, ${T} × ${T} (queries are rows, keys columns)`);
  };
  target.querySelector('.step-window').textContent = g.n < T ? `tokens ${g.q0}–${g.q0 + g.n - 1} × ${g.k0}–${g.k0 + g.n - 1} of ${T}: zoom or drag the head view to move the window` : '';
  target.querySelector('.step-out').textContent = `then weights · V: (${T}, ${T})·(${T}, ${dk}) → (${T}, ${dk}), this head's context, concatenated with the other heads' before the output projection.`;
  const fmt = (v) => v.toFixed(4);
  target._view = {
    key, imgs, g, tokens,
    describe(step, { q, k }) {
      const i = q * T + k, pair = `${tokens[q]} → ${tokens[k]}`;
      const score = sw ? fmt(sw[(q - g.q0) * g.n + (k - g.k0)]) : 'computing…';
      if (step === 'scores') return `${pair}: score ${score}`;
      if (step === 'mask') return `${pair}: ${m[i] ? 'may attend' : 'masked'}`;
      if (step === 'filled') return `${pair}: ${m[i] ? score : '−∞'}`;
      return `${pair}: ${fmt(p[i])}${m[i] ? '' : ' (masked: −∞ before softmax)'}`;
    },
  };
  // one panel a task: four 512 × 512 panels in one would block the page
  inTasks(target, [...target.querySelectorAll('figure')].map((fig) => () => draw(fig)), 'attnscope:steps:task');
}
