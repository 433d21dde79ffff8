// Inside the encoder, panel "residual": the loaded model's order of residual connections and
// norms (LayerNorm or RMSNorm; post-norm as BERT, or pre-norm as GPT-2 and Llama), and each
// token's hidden-state norm at the layer's input, after its attention sub-layer and at its output.

import { fit } from '../../canvas.js';
import { part, rowNorms, begin, focusToken, tokenPicker, scrollRegion } from './draw.js';
import { normName } from '../../architecture.js';

const COLOURS = ['#9ca3af', '#2563eb', '#b45309'];

/** `run`: the result contract; `opts`: {item, layer, width, fontPx, modelInfo}. */
export function render(target, run, opts) {
  const trace = run.traceOf(opts.item);
  const key = [run.id, opts.item, opts.layer, opts.width, trace?.layer, opts.sel?.[0]].join('|');
  const intro = begin(target, key);
  if (!intro) return;
  if (!trace || trace.layer !== opts.layer) { intro.textContent = `Layer ${opts.layer}'s values are not in this run yet.`; return; }
  const { layer, item } = opts;
  const info = opts.modelInfo, arch = info?.architecture;
  const post = (arch?.norm_order ?? 'post') === 'post', N = normName(arch);
  const tokens = run.results[item].labels, rows = run.results[item].length;
  const D = trace.get('input').width;
  // what the norm does to a token's vector: LayerNorm centres it, RMSNorm only rescales it
  const does = arch?.norm === 'rms'
    ? `RMSNorm divides every token's vector by its root mean square over its D = ${D} dimensions (then a learned γ; no mean taken away, no shift)`
    : `LayerNorm rescales every token's vector to mean 0 and variance 1 over its D = ${D} dimensions (then a learned γ, β)`;
  const final = arch?.kind === 'decoder'
    ? ` Only after the last layer does a final ${N} norm it: what the model returns (and the LM head reads) is ${N}(out of layer ${(info?.layers ?? 1) - 1}).`
    : '';
  intro.textContent = post
    ? `This model is post-norm (as BERT): each sub-layer's output is added to its input (the residual connection), then normalised: h = ${N}₁(x + MultiHeadAttention(x)), out = ${N}₂(h + FFN(h)). ${does}, so the norms after each ${N} are similar whatever went in.`
    : `This model is pre-norm: each sub-layer sees a normalised copy and its output is added to the unnormalised stream: h = x + MultiHeadAttention(${N}₁(x)), out = h + FFN(${N}₂(h)). ${does}, but nothing renormalises the stream inside the stack, so the norms can grow layer by layer.${final}`;
  // the order, as boxes
  const flow = part(target, 'inside-flow');
  const last = arch?.kind === 'decoder' && layer === (info?.layers ?? 0) - 1;
  const steps = post
    ? ['x', 'MultiHeadAttention', '+ x', `${N}₁`, 'h', 'FFN', '+ h', `${N}₂`, 'out']
    : ['x', `${N}₁`, 'MultiHeadAttention', '+ x', 'h', `${N}₂`, 'FFN', '+ h', 'out', ...(last ? [`${N} (final)`, 'h_L'] : [])];
  flow.replaceChildren(...steps.flatMap((s, i) => {
    const b = document.createElement('span');
    b.className = `flow-box${s.startsWith('+') ? ' flow-add' : s.startsWith(N) ? ' flow-ln' : s.length <= 3 ? ' flow-value' : ''}`;
    b.textContent = s;
    if (i === 0) return [b];
    const a = document.createElement('span');
    a.className = 'flow-arrow';
    a.textContent = '→';
    return [a, b];
  }));
  flow.setAttribute('aria-label', `layer order: ${steps.join(' → ')}`);
  // grouped bars: ‖x‖, ‖h‖, ‖out‖ per token
  const series = [
    ['input', `‖x‖ (layer ${layer} input)`],
    ['attentionOutput', post ? `‖h‖ = ‖${N}₁(x + MHA(x))‖` : `‖h‖ = ‖x + MHA(${N}₁(x))‖`],
    ['output', post ? `‖out‖ = ‖${N}₂(h + FFN(h))‖` : `‖out‖ = ‖h + FFN(${N}₂(h))‖`],
  ].map(([name, label]) => ({ name, label, norms: rowNorms(trace.get(name).values, D, rows) }));
  const keyBox = part(target, 'inside-keys');
  keyBox.replaceChildren(...series.map((s, i) => {
    const k = document.createElement('span');
    k.className = 'inside-key';
    const sw = document.createElement('i');
    sw.style.background = COLOURS[i];
    k.append(sw, ` ${s.label}`);
    return k;
  }));
  const canvas = part(target, 'inside-bars', 'canvas');
  canvas.setAttribute('role', 'img');
  const width = Math.max(280, opts.width || 900);
  const h = 220, padL = 40, padB = 64, top = 10;
  const plotW = width - padL - 8;
  const groupW = plotW / rows, barW = Math.max(1, Math.min(14, (groupW - 3) / 3));
  const ctx = fit(canvas, width, h, 0);
  ctx.clearRect(0, 0, width, h);
  const max = Math.max(...series.flatMap((s) => [...s.norms])) || 1;
  const y = (v) => top + (h - top - padB) * (1 - v / max);
  ctx.strokeStyle = '#e5e7eb';
  ctx.fillStyle = '#6b7280';
  ctx.font = '10px system-ui, sans-serif';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    ctx.beginPath(); ctx.moveTo(padL, y(v)); ctx.lineTo(width - 8, y(v)); ctx.stroke();
    ctx.fillText(v.toFixed(v >= 10 ? 0 : 1), padL - 4, y(v));
  }
  for (let t = 0; t < rows; t++) {
    const x0 = padL + t * groupW + (groupW - 3 * barW) / 2;
    series.forEach((s, i) => {
      ctx.fillStyle = COLOURS[i];
      ctx.fillRect(x0 + i * barW, y(s.norms[t]), Math.max(1, barW - (barW > 3 ? 1 : 0)), y(0) - y(s.norms[t]));
    });
  }
  if (groupW >= 9) {
    ctx.fillStyle = '#374151';
    ctx.font = `${Math.min(11, opts.fontPx ?? 11)}px system-ui, sans-serif`;
    for (let t = 0; t < rows; t++) {
      ctx.save();
      ctx.translate(padL + (t + 0.5) * groupW, y(0) + 4);
      ctx.rotate(-Math.PI / 3);
      ctx.textAlign = 'right';
      ctx.fillText(tokens[t], 0, 0, padB);
      ctx.restore();
    }
  }
  canvas._describe = (x) => {
    const t = Math.floor((x - padL) / groupW);
    if (t < 0 || t >= rows) return null;
    return `${tokens[t]} (token ${t}): ${series.map((s) => `${s.label.split(' ')[0]} ${s.norms[t].toFixed(3)}`).join(', ')}`;
  };
  const mean = (a) => a.reduce((x, v) => x + v, 0) / a.length;
  canvas.setAttribute('aria-label', `L2 norm of each of ${rows} tokens' hidden state in layer ${layer}: mean ${series.map((s) => `${s.name} ${mean(s.norms).toFixed(2)}`).join(', ')}`);
  rmsBesideLayerNorm(target, run, trace, opts, tokens, rows, D, arch);
  target.dataset.drawn = String(run.id);
}

/** How many of the focused token's dimensions the RMSNorm table lists. */
export const NORM_DIMS = 6;

/**
 * An RMSNorm model (Llama): what its first norm does to the focused token's vector x (the layer's
 * input), beside what a LayerNorm would: the mean μ, the RMS √(mean x² + ε) and σ, and for the
 * dimensions of x largest in size, x/RMS, (x − μ)/σ, the engine's RMSNorm(x) (`attnNorm`, what
 * Q, K and V read) and the learned scale γ it applied (RMSNorm(x) ÷ x/RMS). `target._rms`.
 */
function rmsBesideLayerNorm(target, run, trace, opts, tokens, rows, D, arch) {
  const box = part(target, 'inside-rms');
  scrollRegion(box, 'RMSNorm beside LayerNorm, dimension by dimension (a table: scrolls sideways)');
  const shown = arch?.norm === 'rms' && trace.names.includes('attnNorm');
  box.hidden = !shown;
  if (!shown) { target._rms = null; return; }
  const tok = focusToken(target, opts, rows);
  tokenPicker(box, target, tokens.slice(0, rows), tok, Number.isInteger(opts.sel?.[0]), () => { target._key = null; render(target, run, opts); });
  const x = trace.get('input').values.subarray(tok * D, (tok + 1) * D), y = trace.get('attnNorm').values.subarray(tok * D, (tok + 1) * D);
  const eps = arch.norm_eps ?? 1e-5;
  let sum = 0, sq = 0;
  for (const v of x) { sum += v; sq += v * v; }
  const mu = sum / D, rms = Math.sqrt(sq / D + eps);
  let varc = 0;
  for (const v of x) varc += (v - mu) ** 2;
  const sigma = Math.sqrt(varc / D + eps);
  const dims = Array.from({ length: D }, (_, j) => j).sort((a, b) => Math.abs(x[b]) - Math.abs(x[a])).slice(0, NORM_DIMS);
  const list = dims.map((j) => ({ dim: j, x: x[j], byRms: x[j] / rms, byLayerNorm: (x[j] - mu) / sigma, engine: y[j], gamma: y[j] / (x[j] / rms) }));
  const f = (v) => v.toFixed(4);
  const caption = part(box, 'inside-caption', 'p');
  caption.textContent = `RMSNorm beside LayerNorm, on token ${tok} (${tokens[tok]})'s input to layer ${opts.layer}: its ${D} values have mean μ = ${f(mu)}, RMS = √(mean x² + ε) = ${f(rms)} (ε = ${eps}) and σ = ${f(sigma)}. RMSNorm divides by the RMS and scales each dimension by its learned γ; it takes no mean away and adds no β, one statistic where LayerNorm takes two. With μ this ${Math.abs(mu) < 0.1 * rms ? 'small beside the RMS the two would nearly agree' : 'far from 0 the two differ'}. The ${NORM_DIMS} dimensions largest in size, with the engine's RMSNorm(x), what Q, K and V read:`;
  const table = part(box, 'inside-table', 'table');
  const tr = (cells, tag) => { const r = document.createElement('tr'); for (const c of cells) { const e = document.createElement(tag); e.textContent = c; r.append(e); } return r; };
  const thead = document.createElement('thead');
  thead.append(tr(['dim', 'x', 'x / RMS', 'LayerNorm: (x − μ) / σ', 'γ (learned)', 'engine: RMSNorm(x) = γ · x / RMS'], 'th'));
  const tbody = document.createElement('tbody');
  tbody.append(...list.map((r) => tr([String(r.dim), f(r.x), f(r.byRms), f(r.byLayerNorm), f(r.gamma), f(r.engine)], 'td')));
  table.replaceChildren(thead, tbody);
  target._rms = { token: tok, mu, rms, sigma, rows: list };
}
