// Exports of what a view shows: SVG (cells as rects with their exact colours, token labels as
// text, the legend), PNG (the SVG at 2× pixels), JSON ({tokens, attention: [L][H][T][T]}) and
// the focused head as CSV. Everything is built from the result contract, not from the screen,
// except the inside-the-layer panels (`panelSVG`): their canvases as pictures, their text as text.

import { scale, hex, MASKED, STEPS } from './colour.js';
import { matricesOf, translationLayer, ATTENTION_KINDS, scoresIn } from './result.js';
import { windowOf } from './canvas.js';

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
const FONT = 'font-family="system-ui, sans-serif"';
const HATCH = `<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#e5e7eb"/><line x1="0" y1="0" x2="0" y2="6" stroke="${hex(MASKED)}" stroke-width="2"/></pattern></defs>`;

/** One T × T matrix (`values` and `mask` flat, row-major) as rects at (x, y), `cell` units a
 *  cell, with labels when `tokens`: the square case of `rectMatrix`. */
function matrix(values, T, sc, mask, { x, y, cell, tokens = null, cols = tokens, fontPx = 11 }) {
  const m = {
    values: Array.from({ length: T }, (_, q) => values.subarray(q * T, (q + 1) * T)),
    rows: tokens ?? [], cols: cols ?? [],
    masked: mask ? (q, k) => !mask[q * T + k] : null,
  };
  return rectMatrix(m, sc, { x, y, cell, labels: Boolean(tokens), fontPx });
}

function legendSVG(sc, x, y, w = 200) {
  const stops = [];
  for (let i = 0; i < STEPS; i += 4) stops.push(`<rect x="${x + (i / STEPS) * w}" y="${y}" width="${(4 / STEPS) * w + 0.3}" height="10" fill="${hex(sc.table[i])}"/>`);
  const fmt = (v) => (Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2));
  return `<g class="legend">${stops.join('')}<text x="${x}" y="${y + 24}" font-size="11" ${FONT}>${fmt(sc.min)}</text><text x="${x + w}" y="${y + 24}" font-size="11" text-anchor="end" ${FONT}>${fmt(sc.max)}</text><text x="${x + w + 10}" y="${y + 9}" font-size="11" ${FONT}>${esc(sc.label)}</text><rect x="${x + w + 10}" y="${y + 14}" width="10" height="10" fill="url(#hatch)"/><text x="${x + w + 24}" y="${y + 23}" font-size="11" ${FONT}>masked</text></g>`;
}

const svg = (w, h, body, title) => `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}"><title>${esc(title)}</title>${HATCH}<rect width="${w}" height="${h}" fill="#ffffff"/>${body}</svg>`;

/** The focused head (`view` 'head'), the model grid ('model'), the lines ('lines') or the steps
 *  ('steps': the whole head's, or `part` `{q0, q1, k0, k1}` of it, a square: a long run's, the
 *  window the steps view shows). */
export function toSVG(run, view, { item, layer, head, scale: per, part = null }) {
  const T = run.T;
  const tokens = run.results[item].labels;
  const mask = run.maskOf(item, layer);
  const probScale = (l, h) => scale('probability', { max: per === 'head' ? run.probMax(item, l, h) : 1 });
  const title = `attnscope: ${run.model}, layer ${layer}, head ${head}: ${run.results[item].text}`;
  const longest = Math.max(...tokens.map((t) => t.length));
  const pad = Math.min(160, 16 + longest * 7);
  if (view === 'head' || view === 'both') {
    const cell = Math.max(4, Math.min(28, Math.floor(720 / T)));
    const sc = probScale(layer, head);
    const w = pad + T * cell + 20, h = pad + T * cell + 60;
    const body = `<text x="8" y="16" font-size="13" ${FONT}>${esc(`layer ${layer}, head ${head} (queries are rows, keys columns)`)}</text>`
      + matrix(run.head(item, layer, head), T, sc, mask, { x: pad, y: pad, cell, tokens, fontPx: Math.min(12, Math.max(6, cell - 2)) })
      + legendSVG(sc, pad, pad + T * cell + 16);
    return svg(w, h, body, title);
  }
  if (view === 'model' && run.long) {
    // a long text's heads are not all held: each head's thumbnail, max-pooled by the worker
    const R = run.thumb(item, 0, 0).n;
    return gridSVG(run.L, run.H, R, R, (l, h2, at) => { const t = run.thumb(item, l, h2); return matrix(t.values, R, probScale(l, h2), t.mask, at); }, `attnscope: ${run.model}, every layer and head, each max-pooled to ${R} × ${R}: ${run.results[item].text}`);
  }
  if (view === 'model') {
    return gridSVG(run.L, run.H, T, T, (l, h2, at) => matrix(run.head(item, l, h2), T, probScale(l, h2), run.maskOf(item, l), at), `attnscope: ${run.model}, every layer and head: ${run.results[item].text}`);
  }
  if (view === 'lines') {
    const v = run.head(item, layer, head);
    return linesSVG({ values: Array.from({ length: T }, (_, q) => v.subarray(q * T, (q + 1) * T)), rows: tokens, cols: tokens }, pad, title);
  }
  // steps: n × n, the whole head's or the part asked for
  const p = part ?? { q0: 0, q1: T, k0: 0, k1: T }, n = p.q1 - p.q0;
  const s = scoresIn(run, item, layer, head, p);
  if (!s) throw new Error(`head ${layer}:${head}'s scores for queries ${p.q0}–${p.q1 - 1} are not here yet: export once the steps view has drawn them`);
  const cut = (m) => windowOf(m, T, { q0: p.q0, k0: p.k0, n });
  const cells = cut(mask), labels = { tokens: tokens.slice(p.q0, p.q1), cols: tokens.slice(p.k0, p.k1) };
  const cell = Math.max(3, Math.min(20, Math.floor(300 / n)));
  const sSc = scale('score', { max: run.scoreMax(item, layer, head) });
  const side = pad + n * cell + 24;
  const maskVals = Float32Array.from(cells, (a) => (a ? 0 : 1));
  const panels = [
    ['QKᵀ / √d_k', matrix(s, n, sSc, null, { x: pad, y: pad + 20, cell, ...labels })],
    ['mask (1 = masked)', matrix(maskVals, n, scale('probability'), null, { x: side + pad, y: pad + 20, cell, ...labels })],
    ['masked_fill(−∞)', matrix(s, n, sSc, cells, { x: 2 * side + pad, y: pad + 20, cell, ...labels })],
    ['softmax', matrix(cut(run.head(item, layer, head)), n, probScale(layer, head), cells, { x: 3 * side + pad, y: pad + 20, cell, ...labels })],
  ].map(([t, m], i) => `<text x="${i * side + pad}" y="16" font-size="13" ${FONT}>${esc(t)}</text>${m}`);
  const h = pad + 20 + n * cell + 70;
  return svg(4 * side, h, panels.join('') + legendSVG(sSc, pad, h - 50) + legendSVG(probScale(layer, head), 3 * side + pad - 200, h - 50), title);
}

/** One n_q × n_k matrix (`{values, rows, cols, masked}`, result.js `matricesOf`) as rects at (x, y). */
function rectMatrix(m, sc, { x, y, cell, labels = true, fontPx = 11 }) {
  const out = [];
  m.values.forEach((row, q) => row.forEach((p, k) => {
    const fill = m.masked?.(q, k) ? 'url(#hatch)' : hex(sc.table[sc.index(p)]);
    out.push(`<rect x="${x + k * cell}" y="${y + q * cell}" width="${cell}" height="${cell}" fill="${fill}" data-q="${q}" data-k="${k}"/>`);
  }));
  if (labels) {
    m.rows.forEach((t, q) => out.push(`<text class="qlabel" x="${x - 4}" y="${y + (q + 0.5) * cell}" text-anchor="end" dominant-baseline="middle" font-size="${fontPx}" ${FONT}>${esc(t)}</text>`));
    m.cols.forEach((t, k) => out.push(`<text class="klabel" transform="translate(${x + (k + 0.5) * cell} ${y - 4}) rotate(-90)" dominant-baseline="middle" font-size="${fontPx}" ${FONT}>${esc(t)}</text>`));
  }
  return out.join('');
}


/**
 * One of a translation's attentions (`attn`: 'cross' | 'decoder' | 'encoder') as SVG: the focused
 * head (`view` 'head'), every layer and head ('model') or the lines ('lines'), item `item`;
 * `byValue`: weighed by its keys' value sizes, as the view draws it then.
 */
export function translationSVG(tr, view, { item, attn, layer, head, byValue = false }) {
  const r = tr.results[item];
  const matrices = matricesOf(r, attn, byValue);
  const m = matrices[layer][head];
  const nq = m.rows.length, nk = m.cols.length;
  const sc = scale('probability');
  const n = translationLayer(r, attn, layer); // the model's number of the layer
  const title = `attnscope: ${tr.model}, ${ATTENTION_KINDS[attn].name}${byValue ? ' weighed by ‖value‖, rows renormalised (a view)' : ''}, layer ${n}, head ${head}: ${r.source}${r.given ? '' : ` → ${r.output_text}`}`;
  const longest = Math.max(...m.rows.map((t) => t.length), ...m.cols.map((t) => t.length));
  const pad = Math.min(160, 16 + longest * 7);
  if (view === 'head') {
    const cell = Math.max(4, Math.min(28, Math.floor(720 / Math.max(nq, nk))));
    const w = pad + nk * cell + 20, h = pad + nq * cell + 60;
    const axes = attn === 'encoder' ? 'queries are rows, keys columns' : `rows: the steps, each ${r.given ? 'by what it reads' : 'writes ← reads'}; columns: the keys`;
    const body = `<text x="8" y="16" font-size="13" ${FONT}>${esc(`${ATTENTION_KINDS[attn].name}, layer ${n}, head ${head} (${axes})`)}</text>`
      + rectMatrix(m, sc, { x: pad, y: pad, cell, fontPx: Math.min(12, Math.max(6, cell - 2)) })
      + legendSVG(sc, pad, pad + nq * cell + 16);
    return svg(Math.max(w, pad + 320), h, body, title);
  }
  if (view === 'model') {
    return gridSVG(matrices.length, matrices[0].length, nq, nk, (l, h2, at) => rectMatrix(matrices[l][h2], sc, { ...at, labels: false }), `attnscope: ${tr.model}, every layer and head of the ${ATTENTION_KINDS[attn].name}: ${r.source}`);
  }
  return linesSVG(m, pad, title);
}

/** Every layer and head, L × H thumbnails of n_q × n_k (the longer side 96 units):
 *  `cellsSVG(l, h, {x, y, cell})` draws one; the probability legend below. */
function gridSVG(L, H, nq, nk, cellsSVG, title) {
  const side = 96, gap = 8, cell = side / Math.max(nq, nk), x0 = 40, y0 = 28;
  const tw = cell * nk, th = cell * nq;
  const parts = [];
  for (let l = 0; l < L; l++) {
    parts.push(`<text x="4" y="${y0 + l * (th + gap) + th / 2}" font-size="12" dominant-baseline="middle" ${FONT}>L${l}</text>`);
    for (let h = 0; h < H; h++) {
      parts.push(`<g class="head" data-layer="${l}" data-head="${h}">${cellsSVG(l, h, { x: x0 + h * (tw + gap), y: y0 + l * (th + gap), cell })}</g>`);
    }
  }
  for (let h = 0; h < H; h++) parts.push(`<text x="${x0 + h * (tw + gap) + tw / 2}" y="18" font-size="12" text-anchor="middle" ${FONT}>${h}</text>`);
  parts.push(legendSVG(scale('probability'), x0, y0 + L * (th + gap) + 8));
  return svg(Math.max(x0 + H * (tw + gap) + 20, x0 + 320), y0 + L * (th + gap) + 50, parts.join(''), title);
}

/** The line view of a matrix (`{values, rows, cols, masked}`): the queries left, the keys right,
 *  each side centred on its own length, a line per weight ≥ 1%; `pad` the labels' room. */
function linesSVG(m, pad, title) {
  const nq = m.rows.length, nk = m.cols.length;
  const step = 22, n = Math.max(nq, nk), w = 2 * pad + 260, h = n * step + 40;
  const yq = (q) => 20 + ((n - nq) / 2 + q + 0.5) * step, yk = (k) => 20 + ((n - nk) / 2 + k + 0.5) * step;
  const parts = [];
  m.values.forEach((row, q) => row.forEach((p, k) => {
    if (p >= 0.01 && !m.masked?.(q, k)) parts.push(`<line x1="${pad}" y1="${yq(q)}" x2="${pad + 260}" y2="${yk(k)}" stroke="#08519c" stroke-opacity="${Math.min(1, 0.08 + p).toFixed(3)}" stroke-width="2"/>`);
  }));
  m.rows.forEach((t, q) => parts.push(`<text class="qlabel" x="${pad - 6}" y="${yq(q)}" text-anchor="end" dominant-baseline="middle" font-size="12" ${FONT}>${esc(t)}</text>`));
  m.cols.forEach((t, k) => parts.push(`<text class="klabel" x="${pad + 266}" y="${yk(k)}" dominant-baseline="middle" font-size="12" ${FONT}>${esc(t)}</text>`));
  return svg(w, h, parts.join(''), title);
}

/** A translation item as JSON: its tokens and its three attentions, every layer and head. */
export function translationJSON(tr, item) {
  const r = tr.results[item];
  const keep = ['source', 'source_tokens', 'target', 'output_ids', 'output_tokens', 'output_text', 'decoder_tokens', 'layer_numbers', 'encoder_attention', 'decoder_attention', 'cross_attention', 'value_norms', 'value_weighted'];
  // the attentions' rows are views into the records' Float32Arrays: written as lists
  return JSON.stringify({ model: tr.model, model_type: tr.model_type, ...Object.fromEntries(keep.filter((k) => r[k] !== undefined).map((k) => [k, r[k]])) }, (k, v) => (ArrayBuffer.isView(v) ? Array.from(v) : v));
}

/** Exports a translation's `view` ('head' | 'model' | 'lines', or 'all' for JSON) as `format`. */
export async function exportTranslation(tr, view, format, opts) {
  if (format === 'json') return download(`attnscope-${tr.model}-translation.json`, translationJSON(tr, opts.item), 'application/json');
  const base = `attnscope-${opts.attn}-${view}-L${opts.layer}H${opts.head}`;
  const text = translationSVG(tr, view, opts);
  if (format === 'svg') return download(`${base}.svg`, text, 'image/svg+xml');
  return download(`${base}.png`, await toPNG(text), 'image/png');
}

/** The SVG rasterised at 2× its size. */
export async function toPNG(svgText) {
  const url = URL.createObjectURL(new Blob([svgText], { type: 'image/svg+xml' }));
  try {
    const img = new Image();
    img.src = url;
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.naturalWidth * 2;
    c.height = img.naturalHeight * 2;
    const ctx = c.getContext('2d');
    ctx.scale(2, 2);
    ctx.drawImage(img, 0, 0);
    return await new Promise((res) => c.toBlob(res, 'image/png'));
  } finally {
    URL.revokeObjectURL(url);
  }
}

/** `{tokens, attention: [L][H][T][T]}` of one item (with the sink switch on, `sink_hidden: true`:
 *  the first key hidden and each row renormalised, web/sink.js, not the model's attention; with
 *  the value switch on, `value_weighted`, web/values.js). A
 *  long text's run gives the heads the page holds, null for the others, and says so. */
export function toJSON(run, item) {
  const r = run.results[item];
  const held = run.long ? { heads_held: 'the heads the page holds (the rest are null, and a layer with none): `attnscope attention --heads L:H` gives any head' } : {};
  return JSON.stringify({ tokens: r.tokens, ...(run.sinkHidden ? { sink_hidden: true } : {}), ...(run.valueWeighted ? { value_weighted: 'each weight times its key\'s ‖W_O^h v_j‖, rows renormalised' } : {}), ...held, attention: r.attention.map((l) => l && l.map((h) => h && h.map((row) => Array.from(row)))) });
}

/** The focused head as CSV: a header of keys, one row a query. */
export function toCSV(run, { item, layer, head }) {
  const tokens = run.results[item].labels;
  const q = (s) => `"${String(s).replace(/"/g, '""')}"`;
  const v = run.head(item, layer, head);
  const T = run.T;
  const lines = [['query \\ key', ...tokens].map(q).join(',')];
  for (let i = 0; i < T; i++) lines.push([q(tokens[i]), ...Array.from(v.subarray(i * T, (i + 1) * T), (x) => x.toPrecision(7))].join(','));
  return lines.join('\n') + '\n';
}

export function download(name, data, type) {
  const blob = data instanceof Blob ? data : new Blob([data], { type });
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

/** Exports `view` of `run` as `format` ('svg' | 'png' | 'json' | 'csv') and downloads it. */
export async function exportView(run, view, format, opts) {
  const base = `attnscope-${view}-L${opts.layer}H${opts.head}`;
  if (format === 'json') return download(`attnscope-${run.model}.json`, toJSON(run, opts.item), 'application/json');
  if (format === 'csv') return download(`${base}.csv`, toCSV(run, opts), 'text/csv');
  const text = toSVG(run, view, opts);
  if (format === 'svg') return download(`${base}.svg`, text, 'image/svg+xml');
  return download(`${base}.png`, await toPNG(text), 'image/png');
}

/**
 * A panel of the page (an inside-the-layer panel) as SVG, as it is laid out on screen: each
 * canvas an embedded PNG picture at its place and size, each line of its text (captions,
 * legends, notes) as SVG text with its size, weight and colour. Controls, tooltips and hidden
 * parts are left out.
 */
export function panelSVG(panel, title) {
  const box = panel.getBoundingClientRect();
  const parts = [];
  for (const c of panel.querySelectorAll('canvas')) {
    const r = c.getBoundingClientRect();
    if (!r.width || !r.height || c.closest('.tooltip') || getComputedStyle(c).visibility === 'hidden') continue;
    parts.push(`<image x="${r.left - box.left}" y="${r.top - box.top}" width="${r.width}" height="${r.height}" preserveAspectRatio="none" href="${c.toDataURL('image/png')}"/>`);
  }
  // the text a line at a time, where the page wrapped it: the words of a line share its middle
  const range = document.createRange();
  const walker = document.createTreeWalker(panel, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!node.data.trim() || el.closest('button, select, .tooltip, .sr-only')) continue;
    const cs = getComputedStyle(el);
    if (cs.visibility === 'hidden') continue;
    const font = `font-size="${parseFloat(cs.fontSize)}" font-weight="${cs.fontWeight}"${cs.fontStyle === 'italic' ? ' font-style="italic"' : ''} fill="${cs.color}" ${FONT}`;
    let line = null;
    const flush = () => { if (line) parts.push(`<text x="${line.x}" y="${line.y}" dominant-baseline="central" ${font}>${esc(line.text)}</text>`); };
    for (const m of node.data.matchAll(/\S+/g)) {
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const r = range.getBoundingClientRect();
      if (!r.width) continue; // not laid out (hidden)
      const mid = r.top - box.top + r.height / 2;
      if (line && Math.abs(mid - line.y) < r.height / 2) line.text += ` ${m[0]}`;
      else { flush(); line = { x: r.left - box.left, y: mid, text: m[0] }; }
    }
    flush();
  }
  return svg(Math.ceil(box.width), Math.ceil(box.height), parts.join(''), title);
}

/** Exports a panel of the page (`panelSVG`) as 'svg' or 'png' (the SVG at 2×), as `name`.svg/.png. */
export async function exportPanel(panel, format, { name, title }) {
  const text = panelSVG(panel, title);
  if (format === 'svg') return download(`${name}.svg`, text, 'image/svg+xml');
  return download(`${name}.png`, await toPNG(text), 'image/png');
}
