// A colour legend: what the colours mean, the scale's ends, and the masked-cell swatch.

import { fit, hatchPattern } from '../canvas.js';
import { css, STEPS } from '../colour.js';

const fmt = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2));

/** What a legend's canvases and texts show, so a render that changes nothing redraws nothing
 *  (a keystroke re-renders every legend: its bar of STEPS rectangles cost 1–1.5 ms a keystroke). */
const shown = new WeakMap(); // target → {texts, table, bar, swatch}

/** `sc`: a scale from colour.js; `masked`: show the masked swatch. */
export function render(target, sc, { masked = true } = {}) {
  if (!target.firstChild) {
    target.classList.add('legend');
    // one picture with its words (a plain div may not carry a name: aria-label needs a role)
    target.setAttribute('role', 'img');
    target.innerHTML = '<span class="legend-label"></span><span class="legend-min"></span><canvas class="legend-bar" aria-hidden="true"></canvas><span class="legend-max"></span><span class="legend-masked"><canvas aria-hidden="true"></canvas> masked</span>';
    // a canvas whose context the browser dropped comes back blank: draw it again then
    for (const c of target.querySelectorAll('canvas')) c.addEventListener('contextrestored', () => shown.delete(target));
  }
  const was = shown.get(target) ?? {};
  const texts = [sc.label, fmt(sc.min), fmt(sc.max), masked].join('|');
  if (was.texts !== texts) {
    target.querySelector('.legend-label').textContent = sc.label;
    target.querySelector('.legend-min').textContent = fmt(sc.min);
    target.querySelector('.legend-max').textContent = fmt(sc.max);
    target.querySelector('.legend-masked').hidden = !masked;
    target.setAttribute('aria-label', `colour scale: ${sc.label}, ${fmt(sc.min)} to ${fmt(sc.max)}${masked ? '; hatched grey cells are masked' : ''}`);
  }
  // a canvas is drawn again when its colours or its size in device pixels changed (resizing clears it)
  const barCanvas = target.querySelector('.legend-bar');
  const bar = fit(barCanvas, 140, 12);
  const barKey = `${barCanvas.width}x${barCanvas.height}`;
  if (was.table !== sc.table || was.bar !== barKey) {
    for (let i = 0; i < STEPS; i++) { bar.fillStyle = css(sc.table[i]); bar.fillRect((i / STEPS) * 140, 0, 140 / STEPS + 0.5, 12); }
  }
  const swCanvas = target.querySelector('.legend-masked canvas');
  const m = fit(swCanvas, 12, 12);
  const swKey = `${swCanvas.width}x${swCanvas.height}`;
  if (was.swatch !== swKey) {
    m.fillStyle = hatchPattern(m);
    m.fillRect(0, 0, 12, 12);
  }
  shown.set(target, { texts, table: sc.table, bar: barKey, swatch: swKey });
}
