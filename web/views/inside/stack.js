// Inside the encoder, panel 7: the stack and its output. How much each layer turns each token's
// hidden state (the engine's cosine to the layer before, src/analysis/stack.rs, an L × T
// heatmap), then what comes out: a classification head's logits and probabilities with its
// labels, or the sentence embedding (mean-pooled, L2-normalised) and, for a batch, the cosine
// between every two sentences.

import { fit } from '../../canvas.js';
import { metricScale, scale, css } from '../../colour.js';
import * as legend from '../legend.js';
import { el, heatmap, hoverTip, num } from './plot.js';
import { normName } from '../../architecture.js';

/** softmax of logits (max-subtracted): the only number this panel computes itself from logits. */
export function softmax(logits) {
  const m = Math.max(...logits);
  const e = logits.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
}

function build(target) {
  target.replaceChildren();
  target.classList.add('inside-panel', 'stack-panel');
  const parts = {
    intro: el('p', 'inside-intro'), formula: el('p', 'inside-formula'),
    simCap: el('p', 'inside-caption'), sim: el('canvas'), simLeg: el('div', 'legend'), simNote: el('p', 'inside-note'),
    outH: el('h3', 'inside-h3'), outIntro: el('p', 'inside-intro'), outFormula: el('p', 'inside-formula'),
    strip: el('canvas'), first: el('p', 'inside-values'), table: el('table', 'inside-table'),
    pairCap: el('p', 'inside-caption'), pairs: el('canvas'), pairLeg: el('div', 'legend'),
  };
  for (const c of [parts.sim, parts.strip, parts.pairs]) c.setAttribute('role', 'img');
  target.append(...Object.values(parts));
  target._parts = parts;
  hoverTip(target, parts.sim, (cell) => {
    const v = target._view;
    if (!cell || !v) return null;
    return `${v.tokens[cell.c]}, layer ${cell.r}: its output vs its input, cos ${num(v.sim[cell.r * v.T + cell.c], 4)}`;
  });
  hoverTip(target, parts.pairs, (cell) => {
    const v = target._view;
    if (!cell || !v?.pairs) return null;
    return `sentence ${cell.r + 1} · sentence ${cell.c + 1}: cos ${num(v.pairs[cell.r * v.B + cell.c], 4)}`;
  });
}

/** `run`: the result contract; `opts`: {item, layer, modelInfo, fontPx, width}. */
export function render(target, run, opts) {
  if (!target._parts) build(target);
  const p = target._parts, info = opts.modelInfo ?? {}, item = opts.item, fontPx = opts.fontPx ?? 11;
  const L = run.L, T = run.T, D = info.hidden ?? run.hiddenStatesOf(item)?.D;
  const width = Math.max(300, opts.width ?? 900);
  const tokens = run.results[item].labels;
  p.intro.textContent = `Each of the ${L} layers reads every token's hidden state (${D} numbers) and writes a new one through attention, a residual, ${normName(info.architecture)}, the feed-forward network and another residual (${info.architecture?.norm_order === 'pre' ? 'pre-norm' : 'post-norm'}). How far does each layer move each token? Row l compares what layer l (0-based, as everywhere on this page) writes with what it read, for each of the ${T} tokens; a cosine near 1 means the layer left the token's direction nearly alone.`;
  p.formula.textContent = `cos(out_l[t], in_l[t]) = out_l[t] · in_l[t] / (‖out_l[t]‖ ‖in_l[t]‖), in_l = hidden_states[l], out_l = hidden_states[l+1]; hidden states (L+1, T, D) = (${L + 1}, ${T}, ${D}) → cosines (L, T) = (${L}, ${T})`;
  const ls = run.layerSimilarityOf?.(item);
  if (ls) {
    p.sim.hidden = false;
    const lo = Math.min(0.5, Math.floor(Math.min(...ls.values) * 10) / 10); // the range the cosines use
    const sc = metricScale(lo, 1, 'cosine to the previous layer');
    legend.render(p.simLeg, sc, { masked: false });
    p.simCap.textContent = `cosine of each token's hidden state after each layer to the one before it (${L} layers × ${T} tokens)`;
    p.sim._g = heatmap(p.sim, {
      values: ls.values, rows: L, cols: T, sc, width: Math.min(width, 80 + T * 64), fontPx,
      cellH: Math.max(18, fontPx * 2),
      rowLabels: Array.from({ length: L }, (_, l) => `layer ${l}`), colLabels: tokens,
      text: (r, c) => ls.values[r * T + c].toFixed(2), outline: { r: opts.layer },
    });
    p.sim.setAttribute('aria-label', `cosine of each token's hidden state to the previous layer's, ${L} layers × ${T} tokens, from ${Math.min(...ls.values).toFixed(3)} to ${Math.max(...ls.values).toFixed(3)}`);
    let min = 0;
    for (let i = 1; i < ls.values.length; i++) if (ls.values[i] < ls.values[min]) min = i;
    const lm = Array.from({ length: L }, (_, l) => ls.values.slice(l * T, (l + 1) * T).reduce((a, b) => a + b, 0) / T);
    const most = lm.indexOf(Math.min(...lm));
    p.simNote.textContent = `The largest turn: "${tokens[min % T]}" in layer ${Math.floor(min / T)} (cos ${num(ls.values[min])}). Layer ${most} moves the tokens most on average (mean cos ${num(lm[most])}); the focused layer ${opts.layer} is outlined.`;
    target._view = { tokens, T, sim: ls.values, B: run.B };
  } else {
    p.sim.hidden = true;
    p.simCap.textContent = 'The hidden states are on their way from the engine…';
    p.simNote.textContent = '';
    target._view = null;
  }
  renderOutput(target, p, run, opts, { width, fontPx, D });
  target.dataset.drawn = String(run.id);
}

function renderOutput(target, p, run, opts, { width, fontPx, D }) {
  const item = opts.item, logits = run.results[item].logits;
  p.outH.textContent = 'The output';
  p.table.replaceChildren();
  if (logits && logits.length) {
    const labels = opts.modelInfo?.labels ?? [];
    const probs = softmax(logits);
    p.outIntro.textContent = `This checkpoint has a classification head: the last layer's [CLS] state goes through the pooler (dense + tanh) and a linear classifier to ${logits.length} logits; softmax turns them into probabilities (logits from the engine, softmax here).`;
    p.outFormula.textContent = `logits = W_c · tanh(W_p · h_L[CLS] + b_p) + b_c: (${D}) → (${logits.length});  p_i = e^(logit_i) / Σ_j e^(logit_j)`;
    const head = p.table.createTHead().insertRow();
    for (const t of ['label', 'logit', 'probability', '']) { const th = el('th', '', t); th.scope = 'col'; head.append(th); }
    const body = p.table.createTBody();
    const best = probs.indexOf(Math.max(...probs));
    logits.forEach((z, i) => {
      const tr = body.insertRow();
      if (i === best) tr.className = 'best';
      tr.append(el('td', '', labels[i] ?? `LABEL_${i}`), el('td', 'num', num(z, 4)), el('td', 'num', probs[i].toFixed(4)));
      const bar = el('td');
      const b = el('span', 'inside-bar');
      b.style.width = `${Math.round(probs[i] * 160)}px`;
      bar.append(b);
      tr.append(bar);
    });
    p.table.hidden = false;
    target._output = { logits: Array.from(logits), probs };
    for (const k of ['strip', 'pairs']) p[k].hidden = true;
    p.first.textContent = '';
    p.pairCap.textContent = '';
    p.pairLeg.hidden = true;
    return;
  }
  p.table.hidden = true;
  const e = run.embedding(item);
  if (!e) {
    p.outIntro.textContent = 'No sentence embedding in this run.';
    p.outFormula.textContent = '';
    for (const k of ['strip', 'pairs']) p[k].hidden = true;
    p.first.textContent = '';
    return;
  }
  p.outIntro.textContent = `This checkpoint (a sentence-embedding model, no classification head) outputs one vector a sentence: the last layer's hidden states averaged over the real tokens (padding excluded), then scaled to length 1. Two sentences are compared by the cosine of their vectors, here their dot product.`;
  p.outFormula.textContent = `e = normalize((1/n) Σ_t h_L[t]): (${run.results[item].length}, ${D}) → (${D}), ‖e‖ = 1`;
  const max = Math.max(...Array.from(e, Math.abs));
  const sc = scale('score', { max });
  const stripW = Math.min(width, 900);
  p.strip.hidden = false;
  const ctx = fit(p.strip, stripW, 34, D + 1);
  ctx.clearRect(0, 0, stripW, 34);
  const cw = stripW / D;
  for (let i = 0; i < D; i++) { ctx.fillStyle = css(sc.table[sc.index(e[i])]); ctx.fillRect(i * cw, 0, cw + 0.3, 22); }
  ctx.fillStyle = '#374151';
  ctx.font = '10px system-ui, sans-serif';
  ctx.textBaseline = 'top';
  ctx.textAlign = 'left';
  ctx.fillText('dim 0', 0, 23);
  ctx.textAlign = 'right';
  ctx.fillText(`dim ${D - 1}`, stripW, 23);
  p.strip.setAttribute('aria-label', `the sentence embedding, 1 × ${D}, values from ${num(Math.min(...e))} to ${num(Math.max(...e))} (red negative, blue positive)`);
  p.first.textContent = `1 × ${D}, red < 0 < blue (±${max.toFixed(3)}). First values: ${Array.from(e.subarray(0, 8), (v) => num(v, 4)).join(', ')}, …`;
  target._output = { embedding: Array.from(e) };
  // a batch: every two sentences' cosine
  const B = run.B;
  if (B > 1) {
    const pairs = new Float32Array(B * B);
    const es = Array.from({ length: B }, (_, b) => run.embedding(b));
    for (let i = 0; i < B; i++) for (let j = 0; j < B; j++) { let s = 0; for (let d = 0; d < D; d++) s += es[i][d] * es[j][d]; pairs[i * B + j] = s; }
    const psc = metricScale(Math.min(0, ...pairs), 1, 'cosine between sentences');
    p.pairCap.textContent = `Cosine similarity between the ${B} sentences' embeddings (${B} × ${B}; e_i · e_j, each of length 1)`;
    p.pairs.hidden = false;
    p.pairLeg.hidden = false;
    legend.render(p.pairLeg, psc, { masked: false });
    const names = run.results.map((r, b) => `${b + 1}: ${r.text.length > 24 ? r.text.slice(0, 23) + '…' : r.text}`);
    p.pairs._g = heatmap(p.pairs, {
      values: pairs, rows: B, cols: B, sc: psc, width: Math.min(width, 200 + B * 70), fontPx, maxCellW: 70, cellH: 30,
      rowLabels: names, colLabels: run.results.map((_, b) => `${b + 1}`), top: fontPx + 10,
      text: (r, c) => pairs[r * B + c].toFixed(3), outline: { r: item, c: item },
    });
    p.pairs.setAttribute('aria-label', `cosine similarity between every two of the ${B} sentences: ${names.map((n, i) => `${n}: ${Array.from(pairs.subarray(i * B, (i + 1) * B), (v) => v.toFixed(2)).join(', ')}`).join('; ')}`);
    target._view = { ...(target._view ?? {}), pairs, B };
    target._output.pairs = Array.from(pairs);
  } else {
    p.pairs.hidden = true;
    p.pairLeg.hidden = true;
    p.pairCap.textContent = 'Batch mode (several sentences) adds the cosine similarity between every two sentences here.';
  }
}
