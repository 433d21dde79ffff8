// Information-flow routes (Ferrando & Voita 2024; src/analysis/flow.rs): the nodes are each
// position's residual stream entering each layer, the edges what a head carries from a key's
// stream into a query's (and the residual's way up), each weighed by its importance: its
// proximity to the sum it is part of, max(0, ‖y‖₁ − ‖y − c‖₁), as a share of the node's. The
// engine gives every edge's importance (`run.flowOf`); the routes to a position are the edges of
// at least the threshold followed down from its output, drawn over the tokens.

import { fit } from '../canvas.js';
import { visibleText, inlineText } from '../result.js';

const HEAD = '#2166ac', RESIDUAL = '#9ca3af', FOCUS = '#f16913';

/**
 * The routes to position `to`'s output (src/analysis/flow.rs `Flow::routes`, the same order):
 * `[{layer, head (null: the residual), from, to, importance}]`, every edge of at least
 * `threshold` on a way down from (L, to). `flow`: `{heads: L·H·T·T, residual: L·T}` of one item.
 */
export function routesOf(flow, { L, H, T }, to, threshold) {
  let reached = new Set([to]);
  const edges = [];
  for (let l = L - 1; l >= 0; l--) {
    const below = new Set();
    for (const i of [...reached].sort((a, b) => a - b)) {
      for (let h = 0; h < H; h++) {
        const row = ((l * H + h) * T + i) * T;
        for (let j = 0; j < T; j++) {
          const importance = flow.heads[row + j];
          if (importance >= threshold && importance > 0) { edges.push({ layer: l, head: h, from: j, to: i, importance }); below.add(j); }
        }
      }
      const importance = flow.residual[l * T + i];
      if (importance >= threshold && importance > 0) { edges.push({ layer: l, head: null, from: i, to: i, importance }); below.add(i); }
    }
    reached = below;
  }
  return edges;
}

function build(target) {
  target.classList.add('flow-view');
  target.innerHTML = `
    <div class="flow-controls">
      <label>routes to <select class="flow-to"></select></label>
      <label>threshold <input class="flow-threshold" type="range" min="0.01" max="0.3" step="0.01" value="0.04"> <output class="flow-tau">0.04</output></label>
    </div>
    <p class="flow-line"></p>
    <div class="flow-scroll"><canvas role="img"></canvas></div>
    <p class="flow-hover muted" aria-live="polite">Hover an edge for what it carries; click a head's edge to focus the head.</p>
    <p class="muted">Each node is a token's residual stream entering a layer (bottom: the embeddings; top: the stack's output). An edge is what a head carries from a key's stream into a query's (<span class="swatch flow-head"></span>), or the residual's way up (<span class="swatch flow-residual"></span>), as thick as its importance: its proximity to the sum it is part of, max(0, ‖y‖₁ − ‖y − c‖₁), as a share of the node's (Ferrando &amp; Voita 2024).</p>`;
  target._tau = 0.04;
  target._to = null;
  target.querySelector('.flow-threshold').addEventListener('input', (e) => {
    target._tau = Number(e.target.value);
    target.querySelector('.flow-tau').textContent = target._tau.toFixed(2);
    if (target._view) draw(target);
  });
  target.querySelector('.flow-to').addEventListener('change', (e) => {
    target._to = Number(e.target.value);
    if (target._view) draw(target);
  });
  const canvas = target.querySelector('canvas');
  canvas.addEventListener('mousemove', (e) => {
    const v = target._view, hit = v && edgeAt(v, e.offsetX, e.offsetY);
    target.querySelector('.flow-hover').textContent = hit ? describe(hit, v.tokens) : 'Hover an edge for what it carries; click a head\'s edge to focus the head.';
  });
  canvas.addEventListener('click', (e) => {
    const v = target._view, hit = v && edgeAt(v, e.offsetX, e.offsetY);
    if (hit && hit.head !== null) v.opts.onFocus?.(hit.layer, hit.head);
  });
}

const describe = (e, tokens) => `${e.head === null ? `layer ${e.layer}'s residual` : `L${e.layer} H${e.head}`}: “${inlineText(tokens[e.from])}” → “${inlineText(tokens[e.to])}”, importance ${e.importance.toFixed(3)}`;

/** The edge nearest (x, y), within 5 pixels of its line. */
function edgeAt(v, x, y) {
  let best = null, bestD = 5;
  for (const e of v.edges) {
    const [x0, y0] = v.at(e.from, e.layer), [x1, y1] = v.at(e.to, e.layer + 1);
    const dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy || 1;
    const u = Math.max(0, Math.min(1, ((x - x0) * dx + (y - y0) * dy) / len2));
    const d = Math.hypot(x - (x0 + u * dx), y - (y0 + u * dy));
    if (d < bestD) { bestD = d; best = e; }
  }
  return best;
}

function draw(target) {
  const v = target._view, { run, opts, flow, n, tokens } = v;
  const to = Math.min(target._to ?? n - 1, n - 1), tau = target._tau;
  const L = run.L, fontPx = opts.fontPx ?? 12;
  const edges = routesOf(flow, { L, H: run.H, T: run.T }, to, tau).filter((e) => e.from < n && e.to < n);
  const left = 40, bottom = fontPx + 12, top = fontPx + 10;
  const width = Math.max(target.querySelector('.flow-scroll').clientWidth || 600, 320);
  const col = Math.max(34, Math.min(96, (width - left - 8) / n));
  const rowH = Math.max(10, Math.min(22, Math.floor(560 / (L + 1))));
  const w = Math.ceil(left + n * col + 8), h = top + L * rowH + bottom + 8;
  const ctx = fit(target.querySelector('canvas'), w, h);
  ctx.clearRect(0, 0, w, h);
  const at = (i, level) => [left + (i + 0.5) * col, top + (L - level) * rowH];
  Object.assign(v, { edges, at });
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  ctx.textBaseline = 'middle';
  ctx.fillStyle = '#374151';
  ctx.textAlign = 'right';
  for (let level = 0; level < L; level += Math.max(1, Math.ceil(L / 10))) ctx.fillText(level === 0 ? 'emb' : `L${level}`, left - 6, at(0, level)[1]);
  ctx.fillText('out', left - 6, at(0, L)[1]);
  ctx.textAlign = 'center';
  for (let i = 0; i < n; i++) {
    ctx.fillStyle = i === to ? '#111' : '#374151';
    ctx.font = `${i === to ? 'bold ' : ''}${fontPx}px system-ui, sans-serif`;
    ctx.fillText(visibleText(tokens[i]).trim() || '␣', at(i, 0)[0], h - bottom / 2 - 2, col - 4);
  }
  // faint nodes, then the edges, thickest last
  ctx.fillStyle = '#e5e7eb';
  for (let level = 0; level <= L; level++) for (let i = 0; i < n; i++) { const [x, y] = at(i, level); ctx.fillRect(x - 1, y - 1, 2, 2); }
  const focused = (e) => e.head === opts.head && e.layer === opts.layer;
  for (const e of [...edges].sort((a, b) => a.importance - b.importance)) {
    const [x0, y0] = at(e.from, e.layer), [x1, y1] = at(e.to, e.layer + 1);
    ctx.strokeStyle = e.head === null ? RESIDUAL : focused(e) ? FOCUS : HEAD;
    ctx.globalAlpha = 0.35 + 0.65 * Math.min(1, e.importance * 2);
    ctx.lineWidth = 1 + 7 * e.importance;
    ctx.beginPath();
    ctx.moveTo(x0, y0);
    ctx.lineTo(x1, y1);
    ctx.stroke();
  }
  ctx.globalAlpha = 1;
  const [xo, yo] = at(to, L);
  ctx.fillStyle = '#111';
  ctx.beginPath();
  ctx.arc(xo, yo, 4, 0, 2 * Math.PI);
  ctx.fill();
  const heads = edges.filter((e) => e.head !== null).sort((a, b) => b.importance - a.importance);
  const line = `${edges.length} edges of importance ≥ ${tau.toFixed(2)} lead to the prediction after “${inlineText(tokens[to])}” (position ${to}): ${heads.length} through heads, ${edges.length - heads.length} along the residual.`
    + (heads.length ? ` The heads' strongest: ${heads.slice(0, 3).map((e) => describe(e, tokens)).join('; ')}.` : ' No head carries that much: lower the threshold.');
  target.querySelector('.flow-line').textContent = line;
  target.querySelector('canvas').setAttribute('aria-label', line);
  target.dataset.edges = String(edges.length);
}

/**
 * `run`: the result contract with `flowOf` (a run asked for `flow`); `opts`: {item, layer, head,
 * fontPx, modelInfo, onFocus(layer, head)}.
 */
export function render(target, run, opts) {
  if (!target.querySelector('.flow-line')) build(target);
  const line = target.querySelector('.flow-line'), parts = [target.querySelector('.flow-controls'), target.querySelector('.flow-scroll')];
  const say = (text) => { line.textContent = text; for (const p of parts) p.hidden = true; target._view = null; target.dataset.edges = ''; };
  const info = opts.modelInfo;
  if (info && !info.logit_attribution) {
    return say('The routes read a decoder whose layers add to the residual stream directly, with one norm before the LM head (GPT-2, SmolLM2 and the Llama family): this model is not one.');
  }
  if (run.long) return say(`A text this long (${run.T} tokens) keeps no layer's writes: the routes are for shorter texts.`);
  const flow = run.flowOf?.(opts.item);
  if (!flow) return say('Computing the routes…');
  for (const p of parts) p.hidden = false;
  const item = run.results[opts.item], n = item.length, tokens = item.labels.slice(0, n);
  const sel = target.querySelector('.flow-to');
  if (sel.options.length !== n || [...sel.options].some((o, i) => o.textContent !== `${i}: ${tokens[i]}`)) {
    sel.replaceChildren(...tokens.map((t, i) => Object.assign(document.createElement('option'), { value: i, textContent: `${i}: ${t}` })));
    target._to = null;
  }
  sel.value = String(Math.min(target._to ?? n - 1, n - 1));
  target._view = { run, opts, flow, n, tokens };
  draw(target);
}
