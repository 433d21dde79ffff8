// attnscope's page: inputs, the model grid, the focused head, the masking steps, and the
// window.attnscope API for tests. The math runs in web/worker.js (Rust → wasm); user text is
// only ever drawn on canvases or set as textContent, never parsed as HTML.

const $ = (id) => document.getElementById(id);
const DEFAULT_MODEL = 'assets/models/all-MiniLM-L6-v2/';
const MAX_BATCH = 4;
const DEBOUNCE_MS = 15;

// ---------- state, and the URL hash that reproduces it ----------
const state = {
  sentences: ['time flies like an arrow'], pair: '', mask: 'padding', batch: false,
  layer: 0, head: 0, item: 0, engine: 'auto', view: 'both',
};
const VIEWS = ['both', 'heatmap', 'lines'];

function readHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  if (h.has('s')) state.sentences = h.getAll('s').slice(0, MAX_BATCH);
  if (h.has('p')) state.pair = h.get('p');
  if (['padding', 'causal', 'none'].includes(h.get('m'))) state.mask = h.get('m');
  state.batch = h.get('batch') === '1' || state.sentences.length > 1;
  for (const k of ['layer', 'head', 'item']) if (h.has(k[0])) state[k] = Math.max(0, parseInt(h.get(k[0]), 10) || 0);
  if (['auto', 'cpu'].includes(h.get('e'))) state.engine = h.get('e');
  if (VIEWS.includes(h.get('v'))) state.view = h.get('v');
}

function writeHash() {
  const h = new URLSearchParams();
  for (const s of state.sentences) h.append('s', s);
  if (state.pair) h.set('p', state.pair);
  h.set('m', state.mask);
  if (state.batch) h.set('batch', '1');
  h.set('l', state.layer); h.set('h', state.head);
  if (state.item) h.set('i', state.item);
  if (state.engine !== 'auto') h.set('e', state.engine);
  if (state.view !== 'both') h.set('v', state.view);
  history.replaceState(null, '', '#' + h.toString());
}

function syncInputs() {
  $('sentence').value = state.sentences[0] || '';
  $('batch').value = state.sentences.join('\n');
  $('pair').value = state.pair;
  $('mask').value = state.mask;
  $('batch-mode').checked = state.batch;
  $('batch').hidden = !state.batch;
  $('sentence').disabled = state.batch;
  $('engine').value = state.engine;
  $('view').value = state.view;
  applyView();
}

function applyView() {
  $('head-canvas').closest('.stack').hidden = state.view === 'lines';
  $('lines').hidden = state.view === 'heatmap';
}

// ---------- the worker ----------
const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
let nextId = 1;
const pending = new Map();
function call(msg, transfer = []) {
  return new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    worker.postMessage({ ...msg, id }, transfer);
  });
}
worker.onmessage = (e) => {
  const m = e.data;
  if (m.type === 'progress') { showProgress(m.loaded, m.total, m.file); return; }
  const p = pending.get(m.id);
  if (!p) return;
  pending.delete(m.id);
  if (m.ok) p.resolve(m); else p.reject(new Error(m.error));
};
worker.onerror = (e) => { e.preventDefault(); showError(`The engine stopped: ${e.message || 'unknown error'}`); };

// ---------- messages ----------
function showError(text) { const el = $('error'); el.textContent = text; el.hidden = !text; }
function showNote(text) { const el = $('note'); el.textContent = text || ''; el.hidden = !text; }
function showProgress(loaded, total, file) {
  $('progress-wrap').hidden = false;
  $('progress').max = total || 1;
  $('progress').value = loaded;
  const mb = (n) => (n / 1048576).toFixed(1);
  $('progress-text').textContent = `${file}: ${mb(loaded)} of ${total ? mb(total) : '?'} MB`;
}

// ---------- the API tests and power users read ----------
let resolveReady, rejectReady;
const api = {
  ready: new Promise((res, rej) => { resolveReady = res; rejectReady = rej; }),
  result: null, renders: 0, lastRenderAt: 0, info: null, error: null,
};
api.ready.catch(() => {});
window.attnscope = api;

// ---------- loading a model ----------
let info = null;
let noteFromLoad = '';
async function loadModel(source, name) {
  showError('');
  $('model-name').textContent = `loading ${name}…`;
  try {
    // the worker lives in web/: resolve a relative base against the page, not the worker
    const src = source.base ? { base: new URL(source.base, location.href).href } : source;
    const msg = { type: 'load', name, backend: state.engine, ...src };
    const transfer = source.files ? Object.values(source.files) : [];
    const r = await call(msg, transfer);
    info = r.info;
    api.info = info;
    $('model-name').textContent = `${info.name} · ${info.layers} layers × ${info.heads} heads · hidden ${info.hidden}`;
    $('progress-wrap').hidden = true;
    noteFromLoad = r.unavailable ? `WebGPU is not available here, so the CPU engine runs (${r.unavailable}).` : '';
    showNote(noteFromLoad);
    $('backend').textContent = r.backend;
    state.layer = Math.min(state.layer, info.layers - 1);
    state.head = Math.min(state.head, info.heads - 1);
    buildGrid();
    await run();
    resolveReady(info);
  } catch (err) {
    $('model-name').textContent = 'no model loaded';
    $('progress-wrap').hidden = true;
    api.error = String(err.message || err);
    showError(`Could not load the model: ${err.message || err}`);
    rejectReady(err);
  }
}

// ---------- running ----------
let running = false, again = false, debounce = 0;
function schedule() {
  clearTimeout(debounce);
  debounce = setTimeout(run, DEBOUNCE_MS);
}

function texts() {
  return (state.batch ? state.sentences : state.sentences.slice(0, 1)).filter((s) => s.trim()).slice(0, MAX_BATCH);
}

async function run() {
  if (!info) return;
  if (running) { again = true; return; }
  const t = texts();
  if (!t.length) { showError('Type a sentence: there is nothing to attend to.'); return; }
  running = true;
  try {
    const r = await call({ type: 'run', texts: t, pair: state.pair, mask: state.mask });
    showError('');
    const res = r.result;
    current = { ...res, texts: t };
    state.item = Math.min(state.item, t.length - 1);
    const cut = res.truncated.map((c, i) => (c ? i + 1 : 0)).filter(Boolean);
    const notes = [noteFromLoad];
    if (res.fallback) notes.push(`The CPU engine answered: ${res.fallback}`);
    if (cut.length) notes.push(`Sentence ${cut.join(', ')} was longer than the model's ${info.maxLength} tokens and was truncated.`);
    showNote(notes.filter(Boolean).join(' '));
    render();
  } catch (err) {
    showError(String(err.message || err));
  } finally {
    running = false;
    if (again) { again = false; run(); }
  }
}

let current = null; // {tokens, attention, scores, mask, shape: [B, L, H, T, T], ...}

function dims() { const [B, L, H, T] = current.shape; return { B, L, H, T }; }
function att(b, l, h) { // a (T, T) view of one head
  const { L, H, T } = dims();
  const off = (((b * L + l) * H + h) * T) * T;
  return current.attention.subarray(off, off + T * T);
}
function sc(b, l, h) {
  const { L, H, T } = dims();
  const off = (((b * L + l) * H + h) * T) * T;
  return current.scores.subarray(off, off + T * T);
}
function maskOf(b) { const { T } = dims(); return current.mask.subarray(b * T * T, (b + 1) * T * T); }

function publish() {
  const { L, H, T } = dims();
  const b = state.item;
  const nested = (flatFor) => Array.from({ length: L }, (_, l) => Array.from({ length: H }, (_, h) => {
    const m = flatFor(b, l, h);
    return Array.from({ length: T }, (_, q) => m.subarray(q * T, (q + 1) * T));
  }));
  api.result = {
    tokens: current.tokens[b],
    attention: nested(att),
    scores: nested(sc),
    mask: Array.from({ length: T }, (_, q) => Array.from(maskOf(b).subarray(q * T, (q + 1) * T))),
    backend: current.backend,
    elapsedMs: current.elapsedMs,
    batch: current.tokens.map((tokens, i) => ({ text: current.texts[i], tokens })),
    item: b,
  };
}

// ---------- drawing ----------
function blue(x) { // 0 → white, 1 → deep blue
  const t = Math.max(0, Math.min(1, x));
  return [Math.round(255 - 225 * t), Math.round(255 - 175 * t), Math.round(255 - 75 * t)];
}
function diverging(x) { // -1 → red, 0 → white, 1 → blue
  const t = Math.max(-1, Math.min(1, x));
  return t >= 0 ? blue(t) : [Math.round(255 - 20 * -t), Math.round(255 - 200 * -t), Math.round(255 - 200 * -t)];
}

function drawMatrix(canvas, T, value, { colour = blue, masked = null } = {}) {
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(T, T);
  for (let i = 0; i < T * T; i++) {
    const isMasked = masked && masked(i);
    const [r, g, b] = isMasked ? [150, 150, 150] : colour(value(i));
    img.data[4 * i] = r; img.data[4 * i + 1] = g; img.data[4 * i + 2] = b; img.data[4 * i + 3] = 255;
  }
  const tmp = new OffscreenCanvas(T, T);
  tmp.getContext('2d').putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.drawImage(tmp, 0, 0, canvas.width, canvas.height);
}

function buildGrid() {
  const grid = $('model-view');
  grid.replaceChildren();
  grid.style.gridTemplateColumns = `28px repeat(${info.heads}, 52px)`;
  for (let l = 0; l < info.layers; l++) {
    const label = document.createElement('span');
    label.className = 'rowlabel';
    label.textContent = `L${l}`;
    grid.append(label);
    for (let h = 0; h < info.heads; h++) {
      const c = document.createElement('canvas');
      c.width = 48; c.height = 48;
      c.dataset.layer = l; c.dataset.head = h;
      c.title = `layer ${l}, head ${h}`;
      c.addEventListener('click', () => focusHead(l, h));
      grid.append(c);
    }
  }
  $('grid-caption').textContent = `${info.layers} layers × ${info.heads} heads (rows = layers)`;
}

function focusHead(l, h) {
  state.layer = Math.max(0, Math.min(info.layers - 1, l));
  state.head = Math.max(0, Math.min(info.heads - 1, h));
  writeHash();
  if (current) render();
}

function renderGrid() {
  const { T } = dims();
  for (const c of $('model-view').querySelectorAll('canvas')) {
    const l = +c.dataset.layer, h = +c.dataset.head;
    if (c.width !== T) { c.width = T; c.height = T; }
    const m = att(state.item, l, h);
    drawMatrix(c, T, (i) => m[i]);
    c.classList.toggle('focused', l === state.layer && h === state.head);
  }
}

const LABEL = 92;
let hover = null; // {q, k}
function headGeometry() {
  const { T } = dims();
  const canvas = $('head-canvas');
  const cell = Math.max(2, Math.min(36, Math.floor((canvas.width - LABEL - 4) / T)));
  return { T, cell, x0: LABEL, y0: LABEL };
}

function renderHead() {
  const { T, cell, x0, y0 } = headGeometry();
  const canvas = $('head-canvas');
  const ctx = canvas.getContext('2d');
  const m = att(state.item, state.layer, state.head);
  const tokens = current.tokens[state.item];
  let max = 0;
  for (const v of m) max = Math.max(max, v);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  for (let q = 0; q < T; q++) {
    for (let k = 0; k < T; k++) {
      const [r, g, b] = blue(max > 0 ? m[q * T + k] / max : 0);
      ctx.fillStyle = `rgb(${r},${g},${b})`;
      ctx.fillRect(x0 + k * cell, y0 + q * cell, cell, cell);
    }
  }
  if (hover) { // highlight the hovered row and column
    ctx.strokeStyle = '#f59e0b'; ctx.lineWidth = 2;
    ctx.strokeRect(x0, y0 + hover.q * cell, T * cell, cell);
    ctx.strokeRect(x0 + hover.k * cell, y0, cell, T * cell);
  }
  ctx.fillStyle = '#1d2330';
  ctx.font = `${Math.min(13, Math.max(8, cell - 2))}px system-ui`;
  ctx.textBaseline = 'middle';
  if (cell >= 7) {
    ctx.textAlign = 'right';
    tokens.forEach((t, q) => ctx.fillText(t, x0 - 4, y0 + q * cell + cell / 2, LABEL - 6));
    ctx.save();
    ctx.textAlign = 'left';
    tokens.forEach((t, k) => {
      ctx.save();
      ctx.translate(x0 + k * cell + cell / 2, y0 - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(t, 0, 0, LABEL - 6);
      ctx.restore();
    });
    ctx.restore();
  }
  ctx.fillStyle = '#6b7280'; ctx.textAlign = 'left'; ctx.font = '11px system-ui';
  ctx.fillText('keys →', x0, 10);
  ctx.save(); ctx.translate(10, y0); ctx.rotate(Math.PI / 2); ctx.fillText('queries →', 0, 0); ctx.restore();
  $('legend-max').textContent = max.toFixed(3);
  const lg = $('legend-canvas').getContext('2d');
  for (let x = 0; x < 200; x++) { const [r, g, b] = blue(x / 199); lg.fillStyle = `rgb(${r},${g},${b})`; lg.fillRect(x, 0, 1, 12); }
  $('focus-label').textContent = `layer ${state.layer}, head ${state.head}` + (current.tokens.length > 1 ? `, sentence ${state.item + 1}` : '');
}

let lineHover = -1;
function renderLines() {
  const { T } = dims();
  const canvas = $('lines');
  const ctx = canvas.getContext('2d');
  const m = att(state.item, state.layer, state.head);
  const tokens = current.tokens[state.item];
  const step = Math.min(24, (canvas.height - 10) / T);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const xl = 100, xr = canvas.width - 100;
  for (let q = 0; q < T; q++) {
    if (lineHover >= 0 && lineHover !== q) continue;
    for (let k = 0; k < T; k++) {
      const w = m[q * T + k];
      if (w < 0.01) continue;
      ctx.strokeStyle = `rgba(36, 86, 198, ${Math.min(1, w)})`;
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(xl, 8 + q * step + step / 2);
      ctx.lineTo(xr, 8 + k * step + step / 2);
      ctx.stroke();
    }
  }
  ctx.fillStyle = '#1d2330'; ctx.font = `${Math.min(13, step - 2)}px system-ui`; ctx.textBaseline = 'middle';
  tokens.forEach((t, i) => {
    ctx.textAlign = 'right'; ctx.fillText(t, xl - 6, 8 + i * step + step / 2, 92);
    ctx.textAlign = 'left'; ctx.fillText(t, xr + 6, 8 + i * step + step / 2, 92);
  });
}

function renderSteps() {
  const { T } = dims();
  const b = state.item;
  const s = sc(b, state.layer, state.head);
  const mk = maskOf(b);
  const p = att(b, state.layer, state.head);
  let smax = 0;
  for (let i = 0; i < T * T; i++) smax = Math.max(smax, Math.abs(s[i]));
  const norm = (i) => (smax > 0 ? s[i] / smax : 0);
  drawMatrix($('scores-before'), T, norm, { colour: diverging });
  // allowed cells light, masked cells dark: the (T, T) pattern that masked_fill applies
  drawMatrix($('mask-canvas'), T, (i) => (mk[i] ? 0 : 1), { colour: (x) => (x > 0.5 ? [40, 40, 40] : [214, 226, 248]) });
  drawMatrix($('scores-after'), T, norm, { colour: diverging, masked: (i) => !mk[i] });
  const after = $('scores-after');
  const cell = after.width / T;
  if (cell >= 14) { // write −∞ into masked cells when they are big enough to read
    const ctx = after.getContext('2d');
    ctx.fillStyle = '#fff'; ctx.font = `${Math.floor(cell * 0.45)}px system-ui`; ctx.textAlign = 'center'; ctx.textBaseline = 'middle';
    for (let i = 0; i < T * T; i++) if (!mk[i]) ctx.fillText('−∞', (i % T + 0.5) * cell, (Math.floor(i / T) + 0.5) * cell);
  }
  let pmax = 0;
  for (const v of p) pmax = Math.max(pmax, v);
  drawMatrix($('probs-after'), T, (i) => (pmax > 0 ? p[i] / pmax : 0));
  const dk = info.headDim;
  $('shape-scores').textContent = `(${T}, ${dk})·(${dk}, ${T}) → (${T}, ${T})`;
  $('shape-mask').textContent = `(${T}, ${T})`;
  $('shape-out').textContent = `(${T}, ${T})·(${T}, ${dk}) → (${T}, ${dk})`;
  $('steps-caption').textContent = `layer ${state.layer}, head ${state.head}, mask: ${state.mask}`;
}

function renderItems() {
  const sel = $('item');
  const n = current.tokens.length;
  $('item-wrap').hidden = n < 2;
  if (sel.options.length !== n) {
    sel.replaceChildren(...current.texts.map((t, i) => {
      const o = document.createElement('option');
      o.value = i; o.textContent = `${i + 1}: ${t.slice(0, 40)}`;
      return o;
    }));
  }
  sel.value = state.item;
}

function render() {
  if (!current) return;
  renderItems();
  renderGrid();
  renderHead();
  renderLines();
  renderSteps();
  $('backend').textContent = `${current.backend} · ${current.elapsedMs.toFixed(1)} ms`;
  publish();
  api.renders += 1;
  api.lastRenderAt = performance.now();
  writeHash();
}

// ---------- interaction ----------
$('sentence').addEventListener('input', (e) => { state.sentences[0] = e.target.value; if (!state.batch) state.sentences = [e.target.value]; schedule(); });
$('pair').addEventListener('input', (e) => { state.pair = e.target.value; schedule(); });
$('mask').addEventListener('change', (e) => { state.mask = e.target.value; run(); });
$('batch-mode').addEventListener('change', (e) => {
  state.batch = e.target.checked;
  state.sentences = state.batch ? $('batch').value.split('\n').filter((s) => s.trim()).slice(0, MAX_BATCH) : [$('sentence').value];
  state.item = 0;
  syncInputs();
  run();
});
$('batch').addEventListener('input', (e) => {
  const lines = e.target.value.split('\n').filter((s) => s.trim());
  if (lines.length > MAX_BATCH) showNote(`Batch mode takes up to ${MAX_BATCH} sentences; the rest are ignored.`);
  state.sentences = lines.slice(0, MAX_BATCH);
  schedule();
});
$('item').addEventListener('change', (e) => { state.item = +e.target.value; render(); });
$('view').addEventListener('change', (e) => { state.view = e.target.value; applyView(); writeHash(); });
$('engine').addEventListener('change', (e) => { state.engine = e.target.value; writeHash(); loadModel({ base: DEFAULT_MODEL }, 'all-MiniLM-L6-v2'); });

$('head-canvas').addEventListener('mousemove', (e) => {
  if (!current) return;
  const { T, cell, x0, y0 } = headGeometry();
  const r = e.target.getBoundingClientRect();
  const x = (e.clientX - r.left) * (e.target.width / r.width), y = (e.clientY - r.top) * (e.target.height / r.height);
  const k = Math.floor((x - x0) / cell), q = Math.floor((y - y0) / cell);
  const tip = $('tooltip');
  if (q < 0 || k < 0 || q >= T || k >= T) { hover = null; tip.hidden = true; renderHead(); return; }
  hover = { q, k };
  const tokens = current.tokens[state.item];
  const p = att(state.item, state.layer, state.head)[q * T + k];
  tip.textContent = `${tokens[q]} → ${tokens[k]}: ${p.toFixed(4)}`;
  tip.style.left = `${e.clientX + 12}px`; tip.style.top = `${e.clientY + 12}px`;
  tip.hidden = false;
  renderHead();
});
$('head-canvas').addEventListener('mouseleave', () => { hover = null; $('tooltip').hidden = true; if (current) renderHead(); });
$('lines').addEventListener('mousemove', (e) => {
  if (!current) return;
  const { T } = dims();
  const r = e.target.getBoundingClientRect();
  const y = (e.clientY - r.top) * (e.target.height / r.height);
  const step = Math.min(24, (e.target.height - 10) / T);
  const i = Math.floor((y - 8) / step);
  const next = i >= 0 && i < T ? i : -1;
  if (next !== lineHover) { lineHover = next; renderLines(); }
});
$('lines').addEventListener('mouseleave', () => { lineHover = -1; if (current) renderLines(); });

document.addEventListener('keydown', (e) => {
  if (!info || ['INPUT', 'TEXTAREA', 'SELECT'].includes(document.activeElement?.tagName)) return;
  const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
  const mv = moves[e.key];
  if (!mv) return;
  e.preventDefault();
  focusHead(state.layer + mv[0], state.head + mv[1]);
});

$('check').addEventListener('click', async () => {
  $('check-result').textContent = 'checking…';
  try {
    const r = await call({ type: 'check', texts: texts(), pair: state.pair, mask: state.mask });
    const res = r.result;
    $('check-result').textContent = `CPU vs ${res.other}: max |Δ| = ${res.maxAbsDiff.toExponential(2)} (CPU ${res.cpuMs.toFixed(1)} ms, ${res.otherMs.toFixed(1)} ms)`;
  } catch (err) {
    $('check-result').textContent = '';
    showError(String(err.message || err));
  }
});

// three local files, picked or dropped
async function loadFiles(fileList) {
  const files = {};
  for (const f of fileList) files[f.name] = f;
  const need = ['config.json', 'model.safetensors', 'tokenizer.json'];
  const missing = need.filter((n) => !files[n]);
  if (missing.length) { showError(`Missing ${missing.join(', ')}: a checkpoint needs config.json, model.safetensors and tokenizer.json.`); return; }
  const bufs = {};
  for (const n of need) bufs[n] = await files[n].arrayBuffer();
  await loadModel({ files: bufs }, 'local files');
}
$('files').addEventListener('change', (e) => loadFiles(e.target.files));
document.addEventListener('dragover', (e) => { e.preventDefault(); document.body.classList.add('dragging'); });
document.addEventListener('dragleave', () => document.body.classList.remove('dragging'));
document.addEventListener('drop', (e) => { e.preventDefault(); document.body.classList.remove('dragging'); loadFiles(e.dataTransfer.files); });
$('load-url').addEventListener('click', () => {
  const url = $('model-url').value.trim();
  if (!url) { showError('Give the base URL of a folder with config.json, model.safetensors and tokenizer.json.'); return; }
  loadModel({ base: url }, url);
});
window.addEventListener('hashchange', () => { readHash(); syncInputs(); if (info) { state.layer = Math.min(state.layer, info.layers - 1); state.head = Math.min(state.head, info.heads - 1); run(); } });

// ---------- start ----------
readHash();
syncInputs();
const params = new URLSearchParams(location.search);
loadModel({ base: params.get('model') || DEFAULT_MODEL }, params.get('model') || 'all-MiniLM-L6-v2');
