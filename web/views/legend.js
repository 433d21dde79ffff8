// A colour legend: what the colours mean, the scale's ends, and the masked-cell swatch.

import { fit, hatchPattern } from '../canvas.js';
import { css, STEPS } from '../colour.js';

const fmt = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2));

/** `sc`: a scale from colour.js; `masked`: show the masked swatch. */
export function render(target, sc, { masked = true } = {}) {
  if (!target.firstChild) {
    target.classList.add('legend');
    target.innerHTML = '<span class="legend-label"></span><span class="legend-min"></span><canvas class="legend-bar" aria-hidden="true"></canvas><span class="legend-max"></span><span class="legend-masked"><canvas aria-hidden="true"></canvas> masked</span>';
  }
  target.querySelector('.legend-label').textContent = sc.label;
  target.querySelector('.legend-min').textContent = fmt(sc.min);
  target.querySelector('.legend-max').textContent = fmt(sc.max);
  const bar = fit(target.querySelector('.legend-bar'), 140, 12);
  for (let i = 0; i < STEPS; i++) { bar.fillStyle = css(sc.table[i]); bar.fillRect((i / STEPS) * 140, 0, 140 / STEPS + 0.5, 12); }
  const sw = target.querySelector('.legend-masked');
  sw.hidden = !masked;
  const m = fit(sw.querySelector('canvas'), 12, 12);
  m.fillStyle = hatchPattern(m);
  m.fillRect(0, 0, 12, 12);
  target.setAttribute('aria-label', `colour scale: ${sc.label}, ${fmt(sc.min)} to ${fmt(sc.max)}${masked ? '; hatched grey cells are masked' : ''}`);
}
