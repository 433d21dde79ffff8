// The engine's thread: owns the wasm module and the loaded model, so typing never stutters.
// Messages in:  {id, type: 'load', name, backend, base?|files?} | {id, type: 'run'|'check', texts, pair, mask}
// Messages out: {id, ok, ...} | {type: 'progress', loaded, total, file}
import init, { loadSession } from './pkg/attnscope.js';

const FILES = ['config.json', 'model.safetensors', 'tokenizer.json'];
let session = null;
const wasmReady = init();

async function fetchWithProgress(url, onBytes) {
  const resp = await fetch(url);
  if (!resp.ok) throw new Error(`${url}: HTTP ${resp.status}`);
  const total = Number(resp.headers.get('content-length')) || 0;
  if (!resp.body) {
    const buf = new Uint8Array(await resp.arrayBuffer());
    onBytes(buf.length, total);
    return buf;
  }
  const reader = resp.body.getReader();
  const chunks = [];
  let loaded = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    loaded += value.length;
    onBytes(value.length, total);
  }
  const out = new Uint8Array(loaded);
  let at = 0;
  for (const c of chunks) { out.set(c, at); at += c.length; }
  return out;
}

async function fetchModel(base) {
  const root = base.endsWith('/') ? base : base + '/';
  // sizes first, so the progress bar knows the total
  const sizes = await Promise.all(FILES.map(async (f) => {
    try {
      const r = await fetch(root + f, { method: 'HEAD' });
      return Number(r.headers.get('content-length')) || 0;
    } catch { return 0; }
  }));
  const total = sizes.reduce((a, b) => a + b, 0);
  let loaded = 0;
  const bufs = [];
  for (const f of FILES) {
    bufs.push(await fetchWithProgress(root + f, (n) => {
      loaded += n;
      self.postMessage({ type: 'progress', loaded, total, file: f });
    }));
  }
  return bufs;
}

self.onmessage = async (e) => {
  const msg = e.data;
  try {
    await wasmReady;
    if (msg.type === 'load') {
      const [config, weights, tokenizer] = msg.files
        ? FILES.map((f) => new Uint8Array(msg.files[f]))
        : await fetchModel(msg.base);
      const next = await loadSession(msg.name, config, weights, tokenizer, msg.backend);
      if (session) session.free();
      session = next;
      self.postMessage({ id: msg.id, ok: true, info: session.info(), backend: session.backend(), unavailable: session.unavailable() ?? null });
    } else if (!session) {
      throw new Error('no model is loaded');
    } else if (msg.type === 'run') {
      const r = await session.run(msg.texts, msg.pair || undefined, msg.mask);
      const transfer = [r.attention.buffer, r.mask.buffer];
      if (r.scores) transfer.push(r.scores.buffer);
      self.postMessage({ id: msg.id, ok: true, result: r }, transfer);
    } else if (msg.type === 'check') {
      const r = await session.check(msg.texts, msg.pair || undefined, msg.mask);
      self.postMessage({ id: msg.id, ok: true, result: r });
    }
  } catch (err) {
    self.postMessage({ id: msg.id, ok: false, error: String((err && err.message) || err) });
  }
};
