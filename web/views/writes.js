// What writes the next token (the direct logit attribution, src/analysis/logit_attribution.rs):
// the logit of the token the model predicts after the text's last token, split into what each
// part wrote to the residual stream (the embedding, every head, every feed-forward, the
// constants), each read through the final norm frozen at the real stream onto the token's row of
// the LM head. Drawn as one row a layer: each head's bar and the feed-forward's, up toward the
// token, down against it; the heads ranked; the focused head's write read onto every token (the
// tokens it raises and lowers most, from the engine: `opts.readOut`); and, with heads knocked
// out, what the knock-out did to the token.

import { fit } from '../canvas.js';
import { inlineText } from '../result.js';

const TOWARD = '#2166ac', AGAINST = '#b2182b'; // the score scale's blue and red (colour.js)
/** How many heads the ranking lists. */
const RANKED = 8;

const signed = (v, digits = 2) => `${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(digits)}`;
const quoted = (text) => `“${inlineText(text)}”`;
const headName = (l, h) => `L${l} H${h}`;

function build(target) {
  target.classList.add('writes-view');
  target.innerHTML = `
    <p class="writes-line"></p>
    <p class="writes-knock" hidden></p>
    <div class="writes-body">
      <figure class="writes-chart">
        <canvas role="img"></canvas>
        <figcaption class="muted">Each layer's heads and feed-forward (MLP): <span class="swatch toward"></span> toward the token, <span class="swatch against"></span> against it. <span class="writes-scale"></span> Click a head to focus it, Alt-click to knock it out.</figcaption>
      </figure>
      <div class="writes-side">
        <h4>The heads that write it most</h4>
        <ol class="writes-rank"></ol>
        <div class="writes-head" aria-live="polite"></div>
      </div>
    </div>`;
  const canvas = target.querySelector('canvas');
  canvas.addEventListener('click', (e) => {
    const v = target._view;
    const hit = v && cellAt(v.layout, e.offsetX, e.offsetY);
    if (!hit || hit.mlp) return;
    if (e.altKey) v.opts.onKnock?.(hit.layer, hit.head);
    else v.opts.onFocus?.(hit.layer, hit.head);
  });
  canvas.addEventListener('mousemove', (e) => {
    const v = target._view;
    const hit = v && cellAt(v.layout, e.offsetX, e.offsetY);
    canvas.title = !hit ? '' : hit.mlp ? `layer ${hit.layer}'s feed-forward: ${signed(v.a.mlps[hit.layer], 3)}`
      : `${headName(hit.layer, hit.head)}: ${signed(v.a.heads[hit.layer][hit.head], 3)}${v.off.has(`${hit.layer}:${hit.head}`) ? ' (knocked out)' : ''}`;
  });
}

/** Where each layer's row and each bar stand on the canvas. */
function layoutOf(L, H, width, fontPx) {
  const label = Math.max(34, fontPx * 3), gap = 10;
  // a few heads get wider bars (Gemma 3 270M's 4), many stay readable side by side
  const col = Math.max(8, Math.min(H <= 8 ? 44 : 30, Math.floor((width - label - gap) / (H + 1.5))));
  const rowH = Math.max(16, Math.min(30, fontPx + 10));
  const top = fontPx + 8;
  return { L, H, label, gap, col, rowH, top, mlpX: label + H * col + gap, width: label + H * col + gap + col * 1.5 + 4, height: top + L * rowH + 4 };
}

function cellAt(g, x, y) {
  const layer = Math.floor((y - g.top) / g.rowH);
  if (layer < 0 || layer >= g.L) return null;
  if (x >= g.mlpX && x < g.mlpX + g.col * 1.5) return { layer, mlp: true };
  const head = Math.floor((x - g.label) / g.col);
  return x >= g.label && head >= 0 && head < g.H ? { layer, head } : null;
}

function drawChart(canvas, a, { layer, head, off, fontPx, width }) {
  const L = a.heads.length, H = a.heads[0]?.length ?? 0;
  const g = layoutOf(L, H, Math.min(width, 640), fontPx);
  const ctx = fit(canvas, g.width, g.height);
  canvas.parentElement.style.width = `${Math.max(g.width + 2, Math.min(width, 360))}px`; // its caption no narrower than a line's worth
  ctx.clearRect(0, 0, g.width, g.height);
  // two scales: a late feed-forward often writes several times the largest head
  let headMax = 1e-6, mlpMax = 1e-6;
  for (let l = 0; l < L; l++) {
    mlpMax = Math.max(mlpMax, Math.abs(a.mlps[l]));
    for (const v of a.heads[l]) headMax = Math.max(headMax, Math.abs(v));
  }
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  ctx.textBaseline = 'middle';
  ctx.fillStyle = '#374151';
  ctx.textAlign = 'center';
  for (let h = 0; h < H; h++) if (H <= 16 || h % 4 === 0) ctx.fillText(`H${h}`, g.label + (h + 0.5) * g.col, g.top / 2);
  ctx.fillText('MLP', g.mlpX + 0.75 * g.col, g.top / 2);
  const bar = (x, w, y, v, max) => {
    const half = g.rowH / 2 - 2, len = Math.max(v === 0 ? 0 : 1, Math.round((Math.abs(v) / max) * half));
    ctx.fillStyle = v >= 0 ? TOWARD : AGAINST;
    ctx.fillRect(x, v >= 0 ? y + g.rowH / 2 - len : y + g.rowH / 2, w, len);
  };
  for (let l = 0; l < L; l++) {
    const y = g.top + l * g.rowH;
    if (l % 2) { ctx.fillStyle = '#f6f7f9'; ctx.fillRect(0, y, g.width, g.rowH); }
    ctx.fillStyle = '#d1d5db';
    ctx.fillRect(g.label, y + g.rowH / 2, g.mlpX + 1.5 * g.col - g.label, 1); // the zero line
    ctx.fillStyle = l === layer ? '#111' : '#374151';
    ctx.textAlign = 'right';
    ctx.fillText(`L${l}`, g.label - 6, y + g.rowH / 2);
    for (let h = 0; h < H; h++) {
      const x = g.label + h * g.col;
      if (off.has(`${l}:${h}`)) {
        ctx.fillStyle = '#9ca3af';
        ctx.textAlign = 'center';
        ctx.fillText('×', x + g.col / 2, y + g.rowH / 2);
      } else bar(x + 2, g.col - 4, y, a.heads[l][h], headMax);
    }
    bar(g.mlpX + 2, 1.5 * g.col - 4, y, a.mlps[l], mlpMax);
  }
  if (layer < L && head < H) { // the focused head
    ctx.strokeStyle = '#111';
    ctx.lineWidth = 2;
    ctx.strokeRect(g.label + head * g.col + 1, g.top + layer * g.rowH + 1, g.col - 2, g.rowH - 2);
  }
  return { ...g, headMax, mlpMax };
}

/** Every head by how much it wrote, largest |part| first: `[{layer, head, value}]`. */
export function rankHeads(a) {
  const all = [];
  a.heads.forEach((row, l) => row.forEach((value, h) => all.push({ layer: l, head: h, value })));
  return all.sort((x, y) => Math.abs(y.value) - Math.abs(x.value));
}

/**
 * `run`: the result contract with `attributionOf` (a run asked for `logitAttribution`); `opts`:
 * {item, layer, head, off (Set of "layer:head"), fontPx, width (px; else the target's), modelInfo, onFocus(layer, head),
 * onKnock(layer, head), readOut: {key, promotes, suppresses} | {key, error} | null (the focused
 * head's write read onto every token, `readOutKey` its key)}.
 */
export function render(target, run, opts) {
  if (!target.querySelector('.writes-line')) build(target);
  const line = target.querySelector('.writes-line'), body = target.querySelector('.writes-body'), knock = target.querySelector('.writes-knock');
  const info = opts.modelInfo;
  const say = (text) => { line.textContent = text; body.hidden = true; knock.hidden = true; target._view = null; };
  if (info && !info.logit_attribution) {
    return say(info.lm_head
      ? 'What writes the next token splits its logit into what each layer wrote to the residual stream, read through the final norm and the LM head. This model\'s logits are soft-capped (f·tanh(z/f)): no write has a share of them.'
      : 'What writes the next token reads a model that predicts one (an LM head): this model has none.');
  }
  if (run.long) return say(`A text this long (${run.T} tokens) keeps no layer's writes: what writes the next token is for texts up to a few thousand tokens' worth of states. The grid and the table read every head.`);
  const b = opts.item, a = run.attributionOf?.(b);
  if (!a) return say('Computing what writes the next token…');
  const item = run.results[b], L = a.heads.length, H = a.heads[0]?.length ?? 0;
  const layer = Math.min(opts.layer, L - 1), head = Math.min(opts.head, H - 1);
  const heads = a.heads.flat().reduce((x, y) => x + y, 0), mlps = a.mlps.reduce((x, y) => x + y, 0);
  const before = item.labels.slice(0, a.position + 1).join('').trim();
  const t = quoted(a.target.text);
  line.textContent = `After ${quoted(before.length > 60 ? `…${before.slice(-60)}` : before)}, the model gives ${t} p = ${a.probability.toFixed(3)} (logit ${a.logit.toFixed(2)}). `
    + `That logit is the sum of what each part wrote to the residual stream, each read through the final norm (frozen at this position) onto ${t}'s row of the LM head: `
    + `embedding ${signed(a.embedding)} + heads ${signed(heads)} + MLPs ${signed(mlps)} + constants ${signed(a.other)} = ${(a.embedding + heads + mlps + a.other).toFixed(2)}.`;
  body.hidden = false;
  // with heads knocked out: the same token with every head, and now
  const plain = run.baselineAttribution?.(b), knocked = run.head_mask ?? [];
  knock.hidden = !(plain && knocked.length);
  if (plain && knocked.length) {
    knock.textContent = `With ${knocked.map(([l, h]) => headName(l, h)).join(', ')} knocked out: p(${t}) ${plain.probability.toFixed(3)} → ${a.probability.toFixed(3)}, logit ${plain.logit.toFixed(2)} → ${a.logit.toFixed(2)}. `
      + (knocked.length === 1 ? `Its direct write was ${signed(plain.heads[knocked[0][0]][knocked[0][1]])}; the rest of the change is what later layers read from it.` : '');
  }
  const canvas = target.querySelector('canvas');
  // the panel's own width: the chart's figure sizes to its content, so it cannot give one
  const layout = drawChart(canvas, a, { layer, head, off: opts.off, fontPx: opts.fontPx ?? 12, width: opts.width || target.clientWidth || 520 });
  target.querySelector('.writes-scale').textContent = `The heads' bars to the largest head's |part| (${layout.headMax.toFixed(2)}), the MLPs' to the largest MLP's (${layout.mlpMax.toFixed(2)}).`;
  const ranked = rankHeads(a);
  canvas.setAttribute('aria-label', `What writes ${t}, layer by layer: the heads that write most are ${ranked.slice(0, 3).map((x) => `${headName(x.layer, x.head)} ${signed(x.value)}`).join(', ')}; the feed-forwards sum to ${signed(mlps)}`);
  target._view = { layout, a, off: opts.off, opts };
  const rank = target.querySelector('.writes-rank');
  rank.replaceChildren(...ranked.slice(0, RANKED).map((x) => {
    const li = document.createElement('li'), button = document.createElement('button');
    button.type = 'button';
    button.className = `writes-pick ${x.value >= 0 ? 'toward' : 'against'}`;
    button.textContent = `${headName(x.layer, x.head)} ${signed(x.value)}`;
    button.setAttribute('aria-pressed', String(x.layer === layer && x.head === head));
    button.addEventListener('click', () => opts.onFocus?.(x.layer, x.head));
    li.append(button);
    return li;
  }));
  // the focused head: its part, its rank, and its write read onto every token
  const focus = target.querySelector('.writes-head'), value = a.heads[layer][head];
  const place = ranked.findIndex((x) => x.layer === layer && x.head === head) + 1;
  const out = opts.off.has(`${layer}:${head}`);
  const p = document.createElement('p');
  const was = plain?.heads[layer]?.[head];
  p.textContent = out ? `${headName(layer, head)} is knocked out: its context is zero, so it writes nothing${was === undefined ? '' : `; with every head it wrote ${signed(was, 3)} ${was >= 0 ? 'toward' : 'against'} ${t}`}.`
    : `${headName(layer, head)} writes ${signed(value, 3)} ${value >= 0 ? 'toward' : 'against'} ${t} (${place} of ${L * H} heads by size).`;
  const kids = [p];
  const read = opts.readOut;
  if (!out && read?.key === readOutKey(run, b, layer, head)) {
    if (read.error) kids.push(Object.assign(document.createElement('p'), { className: 'error', textContent: `Could not read its write onto the vocabulary: ${read.error}` }));
    else {
      for (const [what, list] of [['raises most', read.promotes], ['lowers most', read.suppresses]]) {
        const q = document.createElement('p');
        q.className = 'writes-tokens';
        q.textContent = `Its write ${what}: ${list.map((x) => `${quoted(x.text)} ${signed(x.value)}`).join(', ')}.`;
        kids.push(q);
      }
    }
  } else if (!out) kids.push(Object.assign(document.createElement('p'), { className: 'muted', textContent: 'Reading its write onto every token…' }));
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'writes-knock-button';
  button.textContent = out ? `put ${headName(layer, head)} back` : `knock out ${headName(layer, head)}: does p fall?`;
  button.addEventListener('click', () => opts.onKnock?.(layer, head));
  kids.push(button);
  focus.replaceChildren(...kids);
}

/** Which head's read-out the view shows: item b's head (layer, head) of this run. */
export function readOutKey(run, b, layer, head) {
  return `${run.id}|${b}|${layer}|${head}`;
}
