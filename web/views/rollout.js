// Attention rollout (Abnar & Zuidema 2020), from the engine (src/analysis/rollout.rs): how much
// each token's final state draws on each input token through the whole stack, residual path
// included, next to the plain head-averaged attention of the last layer. Both as heatmaps over
// the real tokens, and as bars for one query token ([CLS] by default).

import { scale, pixels } from '../colour.js';
import { fit, bitmap, axesCaption } from '../canvas.js';
import { square, drawMatrix } from '../matrix.js';

const BAR = { rollout: '#08519c', last: '#f16913' }; // as .swatch.rollout / .swatch.last in views.css

function build(target) {
  target.classList.add('rollout-view');
  target.innerHTML = `
    <p class="axes"></p>
    <div class="rollout-maps">
      <figure data-map="rollout"><figcaption><b>rollout</b> R = Â<sub>L</sub>···Â<sub>1</sub>, Â = ½·mean<sub>h</sub>(A) + ½·I <span class="shape muted"></span></figcaption><canvas role="img"></canvas></figure>
      <figure data-map="last"><figcaption><b>last layer</b>, mean over heads <span class="shape muted"></span></figcaption><canvas role="img"></canvas></figure>
    </div>
    <div class="rollout-bars">
      <label>query token <select class="rollout-query"></select></label>
      <span class="bar-key"><span class="swatch rollout"></span> rollout <span class="swatch last"></span> last layer</span>
    </div>
    <canvas class="bars" role="img"></canvas>
    <p class="rollout-note muted"></p>`;
  axesCaption(target.querySelector('.axes'));
  target._q = 0;
  target.querySelector('.rollout-query').addEventListener('change', (e) => {
    target._q = +e.target.value;
    draw(target);
  });
}

/** The last layer's attention averaged over heads, n × n (the real tokens). */
function lastLayerMean(run, item, n) {
  const T = run.T, out = new Float32Array(n * n);
  for (let h = 0; h < run.H; h++) {
    const a = run.head(item, run.L - 1, h);
    for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) out[q * n + k] += a[q * T + k] / run.H;
  }
  return out;
}

/** The top-left n × n of a T × T matrix. */
function real(m, T, n) {
  const out = new Float32Array(n * n);
  for (let q = 0; q < n; q++) out.set(m.subarray(q * T, q * T + n), q * n);
  return out;
}

function heat(canvas, values, n, tokens, size, fontPx, what) {
  let max = 0;
  for (const v of values) max = Math.max(max, v);
  const sc = scale('probability', { max });
  const g = square({ width: size, height: size, T: n, win: null, labels: true, fontPx });
  const ctx = fit(canvas, size, size, n + 1);
  drawMatrix(ctx, g, { img: bitmap(pixels(values, n, sc)), rows: tokens, cols: tokens });
  canvas.setAttribute('aria-label', `${what}: ${n} × ${n} over the real tokens (queries are rows, keys columns), scaled to its largest value ${max.toFixed(3)}`);
}

function draw(target) {
  const { run, opts, R, A, n, tokens } = target._view;
  const q = Math.min(target._q, n - 1);
  target.dataset.query = q;
  const width = Math.max(260, Math.min(target.clientWidth || 600, 900));
  const rowH = Math.max(14, (opts.fontPx ?? 12) + 6);
  const h = n * rowH + 24;
  const ctx = fit(target.querySelector('.bars'), width, h);
  ctx.clearRect(0, 0, width, h);
  const labelW = Math.min(140, width * 0.25), barW = width - labelW - 60;
  let max = 0;
  for (let k = 0; k < n; k++) max = Math.max(max, R[q * n + k], A[q * n + k]);
  ctx.font = `${opts.fontPx ?? 12}px system-ui, sans-serif`;
  ctx.textBaseline = 'middle';
  for (let k = 0; k < n; k++) {
    const y = 12 + k * rowH;
    ctx.fillStyle = '#374151';
    ctx.textAlign = 'right';
    ctx.fillText(tokens[k], labelW - 6, y + rowH / 2, labelW - 8);
    const r = R[q * n + k], a = A[q * n + k];
    ctx.fillStyle = BAR.rollout;
    ctx.fillRect(labelW, y + 1, (r / max) * barW, rowH / 2 - 1);
    ctx.fillStyle = BAR.last;
    ctx.fillRect(labelW, y + rowH / 2, (a / max) * barW, rowH / 2 - 1);
    ctx.fillStyle = '#111';
    ctx.textAlign = 'left';
    ctx.font = `${Math.max(9, (opts.fontPx ?? 12) - 2)}px system-ui, sans-serif`;
    ctx.fillText(r.toFixed(3), labelW + (r / max) * barW + 4, y + rowH / 4);
    ctx.font = `${opts.fontPx ?? 12}px system-ui, sans-serif`;
  }
  const top = [...Array(n).keys()].sort((x, y) => R[q * n + y] - R[q * n + x]).slice(0, 3);
  target.querySelector('.bars').setAttribute('aria-label', `rollout from ${tokens[q]}: ${top.map((k) => `${tokens[k]} ${R[q * n + k].toFixed(3)}`).join(', ')}`);
  target.querySelector('.rollout-query').value = String(q);
}

/** `run`: the result contract with rollout; `opts`: {item, fontPx, panelPx}. */
export function render(target, run, opts) {
  if (!target.querySelector('.rollout-maps')) build(target);
  const R0 = run.rolloutOf(opts.item);
  const note = target.querySelector('.rollout-note');
  target.querySelector('.rollout-maps').hidden = run.long;
  if (run.long) {
    target._drawn = null;
    note.textContent = `The rollout multiplies every layer's ${run.T} × ${run.T} attention: for a text this long the page leaves it out (it runs up to a few hundred tokens). The grid, the head views and the table read every head.`;
    return;
  }
  target.querySelector('.rollout-maps').hidden = Boolean(run.layerNumbers);
  if (run.layerNumbers) { // given attention of some layers only
    target._drawn = null;
    note.textContent = `The rollout multiplies every layer's attention, from the first: the attention given holds layers ${run.layerNumbers.join(', ')} only.`;
    return;
  }
  if (!R0) { note.textContent = 'Computing the rollout…'; return; }
  const key = [run.id, opts.item, opts.fontPx, target.clientWidth].join('|');
  if (target._drawn === key) return;
  target._drawn = key;
  const n = run.results[opts.item].length;
  const tokens = run.results[opts.item].labels.slice(0, n);
  const R = real(R0, run.T, n), A = lastLayerMean(run, opts.item, n);
  target._view = { run, opts, R, A, n, tokens };
  const sel = target.querySelector('.rollout-query');
  if (sel.options.length !== n || [...sel.options].some((o, i) => o.textContent !== `${i}: ${tokens[i]}`)) {
    sel.replaceChildren(...tokens.map((t, i) => { const o = document.createElement('option'); o.value = i; o.textContent = `${i}: ${t}`; return o; }));
  }
  const size = Math.max(200, Math.min(opts.panelPx ?? 360, 480));
  heat(target.querySelector('[data-map=rollout] canvas'), R, n, tokens, size, opts.fontPx ?? 12, 'attention rollout');
  heat(target.querySelector('[data-map=last] canvas'), A, n, tokens, size, opts.fontPx ?? 12, `layer ${run.L - 1} attention, mean over ${run.H} heads`);
  for (const s of target.querySelectorAll('.shape')) s.textContent = `(${n}, ${n})`;
  note.textContent = `Rollout counts the residual path (the ½·I) and multiplies the layers' mixing, so it shows where the final states' information came from; the last layer alone often parks on [CLS] and [SEP]. Each map is scaled to its own largest value.`;
  draw(target);
}
