// Inside the layer, panel "rope" (a model with rotary positions): how RoPE turns the focused
// head's query and key by their positions, with the engine's numbers. Each pair of dimensions
// (i, i + d/2) of a head at position p turns by p·θᵢ, θᵢ = θ^(−2i/d) (rescaled by the config's
// rope_type: linear, llama3, yarn; the engine's own θᵢ, the focused layer's
// `architecture.layers[l].rotary.inv_freq`, are the ones drawn): the first pairs spin fast, the last barely move (a bar chart of the angles at the
// focused token; two dials with its real query pair before and after, engine: q, qRope). A score
// then depends only on how far apart the two tokens are: the focused query against the key it
// attends to most, moved to every distance (computed here from the engine's q and k with the
// model's θᵢ and YaRN's attention_scaling; at their real distance it is the engine's score). The
// switch reruns the model with the rotation left out (the ablation).

import { fit } from '../../canvas.js';
import { part, focusToken, tokenPicker, begin, figure } from './draw.js';
import { num } from './plot.js';
import { scoresIn } from '../../result.js';

const TURNED = '#d94801', PROJECTED = '#6b7280', LINE = '#2166ac';

/**
 * The score of query `q` at position p + Δ against key `k` at position p (each a head's d
 * values, as projected: before the rotation), divided by √d, for Δ = 0 … `n − 1`: with HF's
 * rotate-half pairs (a = i, b = i + d/2) turned by their positions at the frequencies
 * `invFreq` (θᵢ) and multiplied by `scale` (YaRN's attention_scaling, else 1),
 * s·R(p+Δ)q · s·R(p)k = s² Σᵢ (q_a k_a + q_b k_b) cos(Δθᵢ) + (q_a k_b − q_b k_a) sin(Δθᵢ).
 */
export function scoreByDistance(q, k, invFreq, n, scale = 1) {
  const d = q.length, half = d / 2, out = new Float64Array(n);
  for (let i = 0; i < half; i++) {
    const w = invFreq[i], c = q[i] * k[i] + q[i + half] * k[i + half], s = q[i] * k[i + half] - q[i + half] * k[i];
    for (let delta = 0; delta < n; delta++) out[delta] += c * Math.cos(delta * w) + s * Math.sin(delta * w);
  }
  return out.map((v) => (scale * scale * v) / Math.sqrt(d));
}

/** What the config's rope_type does to the frequencies, in words (`rope`: a layer's rotary). */
export function scalingWords(rope) {
  switch (rope.rope_type) {
    case 'linear': return ` This model stretches its context by ${rope.factor} (rope_type linear): every θᵢ is divided by ${rope.factor}, so positions ${rope.factor} apart look as neighbours did in training.`;
    case 'llama3': return ` This model stretches its context Llama 3's way (rope_type llama3): the slow pairs, whose wavelength 2π/θᵢ exceeds ${num(rope.original_max_position_embeddings / rope.low_freq_factor, 0)} positions, are divided by ${rope.factor}; the fast ones, under ${num(rope.original_max_position_embeddings / rope.high_freq_factor, 0)}, are kept; those between are blended.`;
    case 'yarn': return ` This model stretches its context by ${rope.factor} with YaRN (rope_type yarn): the slow pairs are divided by ${rope.factor}, the fast ones kept, those between blended, and every turned query and key is multiplied by ${num(rope.attention_scaling, 4)}, which sharpens the scores by ${num(rope.attention_scaling ** 2, 4)}.`;
    default: return '';
  }
}

/** Where a model's layers turn by different bases (Gemma 3's sliding and global layers): each
 *  base and its layers, and which layer `layer` is; '' where every layer has one base. */
export function bases(arch, layer) {
  const by = new Map();
  (arch?.layers ?? []).forEach((l, i) => { if (l.rotary) by.set(l.rotary.theta, [...(by.get(l.rotary.theta) ?? []), i]); });
  if (by.size < 2) return '';
  const kind = (ls) => (ls.every((i) => arch.layers[i].attention === 'sliding') ? 'sliding' : ls.every((i) => arch.layers[i].attention === 'global') ? 'global' : '');
  const list = [...by].map(([theta, ls]) => `θ = ${theta.toLocaleString('en')} in its ${kind(ls) ? `${kind(ls)} ` : ''}layers (${ls.join(', ')})`);
  return `${by.size === 2 ? " This model turns by two bases: " : ` This model turns by ${by.size} bases: `}${list.join(', and ')}; a global layer's larger base turns slower, so it tells apart positions further away. Layer ${layer} uses θ = ${arch.layers[layer].rotary.theta.toLocaleString('en')}.`;
}

/** `run`: the result contract; `opts`: {item, layer, head, sel, width, fontPx, modelInfo, noRope, onNoRope}. */
export function render(target, run, opts) {
  const trace = run.traceOf(opts.item);
  const rows = run.results[opts.item].length;
  target._token ??= rows - 1; // the last token: the one that has turned the most
  const p = focusToken(target, opts, rows);
  const top = strongest(run, opts, p, rows);
  const key = [run.id, opts.item, opts.layer, opts.head, opts.width, trace?.layer, p, opts.sel?.[0], top.engine === null].join('|');
  const intro = begin(target, key);
  if (!intro) return;
  target.classList.add('rope-panel');
  const arch = opts.modelInfo?.architecture, rope = arch?.layers?.[opts.layer]?.rotary;
  if (arch?.positions?.type !== 'rotary' || !rope) { intro.textContent = 'This model adds its positions to the embeddings: no rotation inside attention.'; return; }
  if (!trace || trace.layer !== opts.layer || !trace.names.includes('qRope')) { intro.textContent = `Layer ${opts.layer}'s rotated queries and keys are not in this run yet.`; return; }
  const { layer, head: h, item } = opts;
  const tokens = run.results[item].labels;
  const d = rope.head_dim, half = d / 2, theta = rope.theta, inv = rope.inv_freq, scale = rope.attention_scaling ?? 1;
  const H = run.H, kv = arch.heads?.key_value ?? H, g = Math.floor(h / (H / kv));
  const q = trace.get('q'), k = trace.get('k'), qr = trace.get('qRope').values;
  const qOf = (t) => q.values.subarray(t * q.width + h * d, t * q.width + (h + 1) * d);
  const kOf = (t) => k.values.subarray(t * k.width + g * d, t * k.width + (g + 1) * d);
  const qTurned = (t) => qr.subarray((h * rows + t) * d, (h * rows + t + 1) * d); // (H, T, d)
  const ablated = run.noRope;

  // the switch and what it says
  const sw = part(target, 'inside-switch', 'label');
  if (!sw.firstChild) {
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.addEventListener('change', () => target._opts?.onNoRope?.(box.checked));
    const words = document.createElement('span');
    words.textContent = ' leave out the rotation in every layer (the ablation: reruns the whole forward pass; every view on the page then shows it)';
    sw.append(box, words);
  }
  target._opts = opts;
  sw.querySelector('input').checked = Boolean(opts.noRope);
  const banner = part(target, 'inside-banner', 'p');
  banner.hidden = !ablated;
  banner.textContent = 'Ablation on: no layer turns its queries and keys. A score no longer knows how far apart two tokens are (only the causal mask still says which come first); every view on this page shows this attention, not the model\'s.';
  intro.textContent = `Rotary positions (RoPE, θ = ${theta}, head size d = ${d}): nothing is added to the embeddings. Instead, inside every layer, each query and key head is cut into ${half} pairs of dimensions (i, i + ${half}), and the pair at position p is turned by the angle p·θᵢ, θᵢ = ${theta}^(−2i/${d}).${scalingWords(rope)} Pair 0 turns ${num(inv[0], 4)} radian a position; pair ${half - 1} turns ${num(inv[half - 1], 6)}. Turning both by their own positions leaves a dot product that depends only on their distance: R(m)q · R(n)k = q · R(n − m)k. Query head ${h} reads key/value head ${g}${kv < H ? ` (shared by ${H / kv} query heads)` : ''}.${bases(arch, layer)}`;
  tokenPicker(target, target, tokens.slice(0, rows), p, Number.isInteger(opts.sel?.[0]), () => render(target, run, opts));

  // 1 · the angles at position p, every pair; the fastest and slowest pair of the real query
  const width = Math.max(280, Math.min(1100, opts.width || 900));
  const row = part(target, 'inside-row');
  const figW = width >= 760 ? Math.floor((width - 16) / 2) : width - 4;
  const angles = figure(row, 'angles');
  angles.set(`The angle each pair turns at position ${p} (“${tokens[p]}”)`, `p·θᵢ for i = 0 … ${half - 1}, radians, log scale`,
    `${ablated ? 'With the ablation on, the engine turns nothing: these are the angles the model was trained with. ' : ''}A full turn is 2π ≈ 6.28: the first pairs wrap around many times within a sentence, the last ones tell positions thousands of tokens apart.`);
  drawAngles(angles.canvas, { p, inv, width: figW, fontPx: opts.fontPx });
  const dials = figure(row, 'dials');
  const before = qOf(p), after = qTurned(p);
  const pairOf = (x, i) => [x[i], x[i + half]];
  const shown = [0, half - 1].map((i) => ({ i, angle: p * inv[i], before: pairOf(before, i), after: pairOf(after, i) }));
  dials.set(`Query head ${h} at “${tokens[p]}”: its fastest and slowest pair`, '(q_i, q_i+d/2) before (grey) and after (orange) the engine turned it',
    ablated ? 'The ablation is on: the engine left the query as projected, so both arrows are one.' : `Pair 0 turned ${num(shown[0].angle, 2)} rad, pair ${half - 1} ${num(shown[1].angle, 5)} rad: ${scale === 1 ? 'the arrows keep their length' : `each arrow is ${num(scale, 4)} times as long (YaRN's attention_scaling)`}.`);
  drawDials(dials.canvas, { shown, width: figW, fontPx: opts.fontPx });

  // 2 · the score against distance: the focused query and the key it attends to most, and the
  // engine's score for the pair (a long run's asked for where the page does not hold it yet)
  const { j, engine } = top;
  if (engine === null) opts.onScores?.(top.cell);
  const n = Math.max(64, 2 * rows);
  const curve = scoreByDistance(qOf(p), kOf(j), inv, n, scale);
  const plain = curve[0] / (scale * scale); // Δ = 0 and no scaling: no turn at all, q·k/√d
  const dot = engine === null ? 'on its way from the engine' : num(engine);
  const dist = figure(part(target, 'inside-row inside-distance'), 'distance');
  dist.set(`Query “${tokens[p]}” (position ${p}) against key “${tokens[j]}” (position ${j}), moved apart`, `score q·k/√d at distance Δ = 0 … ${n - 1}`,
    ablated
      ? `The ablation is on: the engine's score at their real distance (the dot, ${dot}) is the unturned q·k/√d = ${num(plain)} (dashed), whatever the distance.`
      : `The same two vectors, turned as if they stood Δ positions apart: only the distance matters. At their real distance Δ = ${p - j} the curve is the engine's score (the dot: ${dot}, curve ${num(curve[p - j])}). Without the rotation the score would be ${num(plain)} at every distance (dashed).`);
  drawDistance(dist.canvas, { curve, plain, at: p - j, engine, width: Math.min(width, 900), fontPx: opts.fontPx });
  dist.canvas.setAttribute('aria-label', `the score of query ${p} against key ${j} at distances 0 to ${n - 1}; ${dot} at their real distance ${p - j}`);
  // what the panel drew, for the tests
  target._rope = { p, j, curve: Array.from(curve), plain, engine, ablated, shown, scale };
  target.dataset.drawn = String(run.id);
}

/** Bars of p·θᵢ (log scale) for every pair (`inv`: the θᵢ), with a line at one full turn (2π). */
function drawAngles(canvas, { p, inv, width, fontPx = 11 }) {
  const half = inv.length;
  const hgt = Math.round(Math.min(220, width * 0.55)), padL = 44, padB = 26, top = 8, padR = 8;
  const ctx = fit(canvas, width, hgt, 0);
  ctx.clearRect(0, 0, width, hgt);
  const lo = -6, hi = Math.max(1, Math.ceil(Math.log10(Math.max(1, p) + 1e-9)) + 1);
  const X = (i) => padL + (i / half) * (width - padL - padR), Y = (v) => top + (1 - (Math.log10(Math.max(v, 10 ** lo)) - lo) / (hi - lo)) * (hgt - top - padB);
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  ctx.fillStyle = '#6b7280';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let e = lo; e <= hi; e += 2) { ctx.fillText(`1e${e}`, padL - 4, Y(10 ** e)); ctx.fillRect(padL, Y(10 ** e), width - padL - padR, 0.5); }
  const bw = Math.max(1, (width - padL - padR) / half - 1);
  for (let i = 0; i < half; i++) {
    const a = p * inv[i];
    ctx.fillStyle = a >= 2 * Math.PI ? TURNED : '#fdae6b';
    ctx.fillRect(X(i), Y(a), bw, Math.max(0, Y(10 ** lo) - Y(a)));
  }
  ctx.strokeStyle = '#111827';
  ctx.setLineDash([4, 3]);
  ctx.beginPath(); ctx.moveTo(padL, Y(2 * Math.PI)); ctx.lineTo(width - padR, Y(2 * Math.PI)); ctx.stroke();
  ctx.setLineDash([]);
  ctx.fillStyle = '#111827';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'bottom';
  ctx.fillText('one full turn (2π)', width - padR - 4, Y(2 * Math.PI) - 2);
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  ctx.fillText(`pair i (0 … ${half - 1})`, padL + (width - padL - padR) / 2, hgt - padB + 8);
  canvas.setAttribute('aria-label', `the angle p·θᵢ at position ${p} for each of ${half} pairs, from ${num(p * inv[0], 2)} radians for pair 0 down to ${num(p * inv[half - 1], 6)}`);
  canvas._describe = (x) => {
    const i = Math.floor(((x - padL) / (width - padL - padR)) * half);
    return i >= 0 && i < half ? `pair ${i} (dims ${i}, ${i + half}): θ = ${inv[i].toExponential(3)} rad a position, ${num(p * inv[i], 4)} rad at position ${p}` : null;
  };
}

/** Two dials: a pair of the query before (grey) and after (orange) its turn. */
function drawDials(canvas, { shown, width, fontPx = 11 }) {
  const hgt = Math.round(Math.min(220, width * 0.55));
  const ctx = fit(canvas, width, hgt, 0);
  ctx.clearRect(0, 0, width, hgt);
  const r = Math.min(width / 4 - 12, hgt / 2 - 26);
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  shown.forEach(({ i, angle, before, after }, n) => {
    const cx = width * (n ? 0.75 : 0.25), cy = hgt / 2 - 6;
    const len = Math.max(1e-9, Math.hypot(...before), Math.hypot(...after));
    ctx.strokeStyle = '#d1d5db';
    ctx.beginPath(); ctx.arc(cx, cy, r, 0, 2 * Math.PI); ctx.stroke();
    for (const [v, colour, w] of [[before, PROJECTED, 2], [after, TURNED, 3]]) {
      ctx.strokeStyle = colour;
      ctx.lineWidth = w;
      ctx.beginPath(); ctx.moveTo(cx, cy); ctx.lineTo(cx + (v[0] / len) * r, cy - (v[1] / len) * r); ctx.stroke();
    }
    ctx.lineWidth = 1;
    ctx.fillStyle = '#111827';
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    ctx.fillText(`pair ${i}: turned ${num(angle, angle < 0.01 ? 5 : 2)} rad`, cx, cy + r + 6);
  });
  // what the dials show, for a screen reader (a canvas with role img needs its words)
  const arrow = ([x, y]) => `(${num(x, 3)}, ${num(y, 3)})`;
  canvas.setAttribute('aria-label', `two dials: ${shown.map(({ i, angle, before, after }) => `pair ${i} turned ${num(angle, angle < 0.01 ? 5 : 2)} radians, from ${arrow(before)} to ${arrow(after)}`).join('; ')}`);
}

/** Where query `p` of the focused head attends most among its keys (the item's first `rows`):
 *  `{j, cell, engine}`, `cell` the pair as a part of the head, `engine` the engine's score for
 *  it (null: a long run's window not held yet, result.js `scoresIn`). */
function strongest(run, { item, layer, head }, p, rows) {
  const probs = run.head(item, layer, head).subarray(p * run.T, p * run.T + rows);
  let j = 0;
  for (let t = 0; t <= p; t++) if (probs[t] > probs[j]) j = t;
  const cell = { q0: p, q1: p + 1, k0: j, k1: j + 1 };
  return { j, cell, engine: scoresIn(run, item, layer, head, cell)?.[0] ?? null };
}

/** The score against distance, the engine's score as a dot at the real distance (none while
 *  it is on its way), the unturned score dashed. */
function drawDistance(canvas, { curve, plain, at, engine, width, fontPx = 11 }) {
  const hgt = Math.round(Math.min(240, width * 0.4)), padL = 44, padB = 26, top = 10, padR = 10;
  const ctx = fit(canvas, width, hgt, 0);
  ctx.clearRect(0, 0, width, hgt);
  let lo = Math.min(plain, engine ?? plain), hi = Math.max(plain, engine ?? plain);
  for (const v of curve) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  const pad = (hi - lo) * 0.08 || 1;
  lo -= pad; hi += pad;
  const X = (t) => padL + (t / (curve.length - 1)) * (width - padL - padR), Y = (v) => top + (1 - (v - lo) / (hi - lo)) * (hgt - top - padB);
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  ctx.fillStyle = '#6b7280';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (const v of [lo + pad, (lo + hi) / 2, hi - pad]) ctx.fillText(num(v, 2), padL - 4, Y(v));
  ctx.strokeStyle = '#9ca3af';
  ctx.setLineDash([5, 4]);
  ctx.beginPath(); ctx.moveTo(padL, Y(plain)); ctx.lineTo(width - padR, Y(plain)); ctx.stroke();
  ctx.setLineDash([]);
  ctx.strokeStyle = LINE;
  ctx.lineWidth = 2;
  ctx.beginPath();
  curve.forEach((v, t) => (t ? ctx.lineTo(X(t), Y(v)) : ctx.moveTo(X(t), Y(v))));
  ctx.stroke();
  ctx.lineWidth = 1;
  ctx.fillStyle = TURNED;
  if (engine !== null) { ctx.beginPath(); ctx.arc(X(at), Y(engine), 5, 0, 2 * Math.PI); ctx.fill(); }
  ctx.fillStyle = '#111827';
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  ctx.fillText('distance Δ between query and key (positions)', padL + (width - padL - padR) / 2, hgt - padB + 8);
  canvas._describe = (x) => {
    const t = Math.round(((x - padL) / (width - padL - padR)) * (curve.length - 1));
    return t >= 0 && t < curve.length ? `Δ = ${t}: score ${num(curve[t])}${t === at && engine !== null ? ` (the engine's, at their real distance: ${num(engine)})` : ''}` : null;
  };
}
