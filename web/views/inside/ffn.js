// Inside the encoder, panel "ffn": Linear(D → I) → act → Linear(I → D) (or a gated one's
// act(W_gate·x) ⊙ W_up·x), the activation's curve with the focused token's real pre-activations
// (engine: preActivation, the gate's) plotted at what W₂ reads (engine: intermediate), and the
// share of units the activation nearly zeroes; a gated one's (SwiGLU) gate, up projection and
// their product for the focused token's strongest units, in a table.

import { fit } from '../../canvas.js';
import { part, focusToken, tokenPicker, begin, scrollRegion } from './draw.js';

// erf, Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): enough to draw the curve
function erf(x) {
  const s = Math.sign(x), a = Math.abs(x), t = 1 / (1 + 0.3275911 * a);
  const y = 1 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-a * a);
  return s * y;
}

const ACTS = {
  gelu: { name: 'GELU (exact)', formula: 'GELU(x) = x·Φ(x) = x·½(1 + erf(x/√2))', f: (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)) },
  gelu_tanh: { name: 'GELU (tanh approximation)', formula: 'GELU(x) ≈ ½x(1 + tanh(√(2/π)(x + 0.044715x³)))', f: (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3))) },
  relu: { name: 'ReLU', formula: 'ReLU(x) = max(0, x)', f: (x) => Math.max(0, x) },
  silu: { name: 'SiLU (swish)', formula: 'SiLU(x) = x·σ(x) = x / (1 + e^(−x))', f: (x) => x / (1 + Math.exp(-x)) },
};

/** The "nearly zeroed" threshold: |act(z)| below 1% of the token's largest |act(z)|. */
export const NEAR_ZERO = 0.01;

/** `run`: the result contract; `opts`: {item, layer, sel, width, fontPx, modelInfo}. */
export function render(target, run, opts) {
  const trace = run.traceOf(opts.item);
  const rows = run.results[opts.item].length;
  const tok = focusToken(target, opts, rows);
  const key = [run.id, opts.item, opts.layer, opts.width, trace?.layer, tok, opts.sel?.[0]].join('|');
  const intro = begin(target, key);
  if (!intro) return;
  if (!trace || trace.layer !== opts.layer || !trace.names.includes('preActivation')) { intro.textContent = `Layer ${opts.layer}'s feed-forward values are not in this run yet.`; return; }
  const { layer, item } = opts;
  const tokens = run.results[item].labels;
  const ff = opts.modelInfo?.architecture?.feed_forward ?? { type: 'plain', activation: 'gelu' };
  const gated = ff.type === 'gated', b = opts.modelInfo?.architecture?.biases?.feed_forward ?? true;
  const pre = trace.get('preActivation'), post = trace.get('intermediate');
  const I = pre.width, D = trace.get('output').width;
  const act = ACTS[ff.activation] ?? ACTS.gelu;
  const z = gated ? 'z = W_gate·x' : `z = W₁·x${b ? ' + b₁' : ''}`, y = gated ? 'act(z) ⊙ W_up·x' : 'act(z)';
  intro.textContent = gated
    ? `Each token goes through the same gated network on its own: FFN(x) = W_down·(act(W_gate·x) ⊙ W_up·x), two projections D → I side by side, the gate through ${act.name} times the other unit by unit, then Linear(I → D): (T, ${D}) → 2 × (T, ${I}) → (T, ${I}) → (T, ${D}). ${act.formula}. The dots are one token's ${I} units: ${z} (the gate, before the activation) against ${y} (what W_down reads), both from the engine: the up projection scales each unit, so the dots leave the curve, but a unit whose gate act(z) is near 0 stays shut whatever W_up·x is.`
    : `Each token goes through the same two-layer network on its own: FFN(x) = W₂·act(W₁·x${b ? ' + b₁' : ''})${b ? ' + b₂' : ''}, Linear(D → I) → ${act.name} → Linear(I → D), (T, ${D}) → (T, ${I}) → (T, ${D}). ${act.formula}. The dots are one token's ${I} units: ${z} (before the activation) against act(z) (after it), both from the engine.`;
  tokenPicker(target, target, tokens.slice(0, rows), tok, Number.isInteger(opts.sel?.[0]), () => render(target, run, opts));
  const xs = pre.values.subarray(tok * I, (tok + 1) * I), ys = post.values.subarray(tok * I, (tok + 1) * I);
  let lo = -4, hi = 4, yMax = 0;
  for (let j = 0; j < I; j++) { lo = Math.min(lo, xs[j]); hi = Math.max(hi, xs[j]); yMax = Math.max(yMax, Math.abs(ys[j])); }
  const near = ys.reduce((n, v) => n + (Math.abs(v) < NEAR_ZERO * yMax ? 1 : 0), 0);
  const negative = xs.reduce((n, v) => n + (v < 0 ? 1 : 0), 0);
  const canvas = part(target, 'inside-plot', 'canvas');
  canvas.setAttribute('role', 'img');
  const width = Math.max(280, Math.min(900, opts.width || 900)), h = Math.round(Math.min(360, width * 0.5));
  const padL = 40, padB = 28, top = 10, padR = 10;
  const ctx = fit(canvas, width, h, 0);
  ctx.clearRect(0, 0, width, h);
  const yLo = Math.min(-0.5, act.f(lo), gated ? -yMax : -0.2), yHi = Math.max(act.f(hi), yMax, 1);
  const X = (v) => padL + ((v - lo) / (hi - lo)) * (width - padL - padR);
  const Y = (v) => top + (1 - (v - yLo) / (yHi - yLo)) * (h - top - padB);
  // axes and grid
  ctx.strokeStyle = '#e5e7eb';
  ctx.fillStyle = '#6b7280';
  ctx.font = '10px system-ui, sans-serif';
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  const stepX = niceStep(hi - lo), stepY = niceStep(yHi - yLo);
  for (let v = Math.ceil(lo / stepX) * stepX; v <= hi; v += stepX) { ctx.beginPath(); ctx.moveTo(X(v), top); ctx.lineTo(X(v), h - padB); ctx.stroke(); ctx.fillText(fmtTick(v), X(v), h - padB + 4); }
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let v = Math.ceil(yLo / stepY) * stepY; v <= yHi; v += stepY) { ctx.beginPath(); ctx.moveTo(padL, Y(v)); ctx.lineTo(width - padR, Y(v)); ctx.stroke(); ctx.fillText(fmtTick(v), padL - 4, Y(v)); }
  ctx.strokeStyle = '#9ca3af';
  ctx.beginPath(); ctx.moveTo(X(0), top); ctx.lineTo(X(0), h - padB); ctx.moveTo(padL, Y(0)); ctx.lineTo(width - padR, Y(0)); ctx.stroke();
  // the near-zero band
  ctx.fillStyle = 'rgba(245, 158, 11, 0.15)';
  ctx.fillRect(padL, Y(NEAR_ZERO * yMax), width - padL - padR, Math.max(1, Y(-NEAR_ZERO * yMax) - Y(NEAR_ZERO * yMax)));
  // the curve
  ctx.strokeStyle = '#111827';
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  for (let i = 0; i <= 300; i++) { const v = lo + ((hi - lo) * i) / 300; i ? ctx.lineTo(X(v), Y(act.f(v))) : ctx.moveTo(X(v), Y(act.f(v))); }
  ctx.stroke();
  // the token's units
  ctx.fillStyle = 'rgba(37, 99, 235, 0.45)';
  for (let j = 0; j < I; j++) { ctx.beginPath(); ctx.arc(X(xs[j]), Y(ys[j]), 2, 0, 2 * Math.PI); ctx.fill(); }
  ctx.fillStyle = '#374151';
  ctx.font = '11px system-ui, sans-serif';
  ctx.textAlign = 'left';
  ctx.textBaseline = 'top';
  ctx.fillText(`${y}, ${ff.activation}`, padL + 4, top + 2);
  ctx.textAlign = 'right';
  ctx.textBaseline = 'bottom';
  ctx.fillText(z, width - padR, h - padB - 2);
  canvas._describe = (x, y) => {
    let best = -1, bd = 36;
    for (let j = 0; j < I; j++) { const d = (X(xs[j]) - x) ** 2 + (Y(ys[j]) - y) ** 2; if (d < bd) { bd = d; best = j; } }
    return best < 0 ? null : `unit ${best}: z = ${xs[best].toFixed(4)}, ${y} = ${ys[best].toFixed(4)}`;
  };
  canvas.setAttribute('aria-label', `${act.name} curve with the ${I} pre-activations of token ${tok} (${tokens[tok]}) in layer ${layer}; ${near} of ${I} nearly zero`);
  const stats = part(target, 'inside-stats', 'p');
  stats.textContent = `Token ${tok} (${tokens[tok]}): ${negative} of ${I} units (${((100 * negative) / I).toFixed(1)}%) have z < 0; the activation nearly zeroes ${near} of ${I} (${((100 * near) / I).toFixed(1)}%), i.e. |${y}| < ${NEAR_ZERO} × the token's largest |${y}| (${yMax.toFixed(3)}), the shaded band. Those units add almost nothing through W₂: the layer uses a sparse subset of its ${I} units for each token.`;
  swiglu(target, trace, tok, I, act, gated && trace.names.includes('up'));
  target.dataset.drawn = String(run.id);
  target.dataset.token = String(tok);
  target.dataset.nearZero = String(near);
}

/** How many of the focused token's units the gated network's table lists. */
export const GATE_UNITS = 8;

/**
 * A gated network (SwiGLU): the focused token's units with the largest |act(gate) · up|, the gate
 * z, act(z), the up projection and their product, each from the engine (`preActivation`, `up`,
 * `intermediate`, what W_down reads) but act(z) and the product, computed here from them
 * (`target._swiglu`: the rows and the largest |product − engine|).
 */
function swiglu(target, trace, tok, I, act, shown) {
  const box = part(target, 'inside-swiglu');
  scrollRegion(box, 'the gated network, unit by unit (a table: scrolls sideways)');
  box.hidden = !shown;
  if (!shown) { target._swiglu = null; return; }
  const at = (name) => trace.get(name).values.subarray(tok * I, (tok + 1) * I);
  const gate = at('preActivation'), up = at('up'), out = at('intermediate');
  const units = Array.from({ length: I }, (_, j) => j).sort((a, b) => Math.abs(out[b]) - Math.abs(out[a])).slice(0, GATE_UNITS);
  const rows = units.map((j) => ({ unit: j, gate: gate[j], act: act.f(gate[j]), up: up[j], product: act.f(gate[j]) * up[j], engine: out[j] }));
  const worst = rows.reduce((m, r) => Math.max(m, Math.abs(r.product - r.engine)), 0);
  const caption = part(box, 'inside-caption', 'p');
  caption.textContent = `The gate and the up projection of token ${tok}, unit by unit: its ${GATE_UNITS} units with the largest output, of ${I}. act(z) is ${act.name} of the gate; times the up projection it is what W_down reads (the engine's value in the last column, equal to the product within ${worst.toExponential(1)}). A unit whose act(z) is near 0 (z near 0, or for SiLU well below it) is shut however large its up projection; the up projection's sign decides whether an open unit adds or subtracts.`;
  const table = part(box, 'inside-table', 'table');
  const head = ['unit', 'gate z = W_gate·x', `act(z) = ${act.name.split(' ')[0]}(z)`, 'up = W_up·x', 'act(z) × up', 'engine (W_down reads)'];
  const tr = (cells, tag) => { const r = document.createElement('tr'); for (const [i, c] of cells.entries()) { const e = document.createElement(tag); e.textContent = c; if (i && tag === 'td') e.className = 'num'; r.append(e); } return r; };
  const f = (v) => v.toFixed(4);
  const thead = document.createElement('thead');
  thead.append(tr(head, 'th'));
  const tbody = document.createElement('tbody');
  tbody.append(...rows.map((r) => tr([String(r.unit), f(r.gate), f(r.act), f(r.up), f(r.product), f(r.engine)], 'td')));
  table.replaceChildren(thead, tbody);
  target._swiglu = { token: tok, rows, worst };
}

function niceStep(span) {
  const raw = span / 6, p = 10 ** Math.floor(Math.log10(raw)), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}
const fmtTick = (v) => (Math.abs(v) < 1e-9 ? '0' : Math.abs(v) >= 1 ? String(Math.round(v * 10) / 10) : v.toFixed(2));
