// The engine's thread: owns the wasm module, the loaded checkpoints and their sessions, so the
// page never stalls on the math. Shared by every view and <attn-scope> element of a page.
//
// In:  {id, type: 'load', key, name, backend, base?, files?, refresh?}
//      {id, type: 'run' | 'check', key, backend, texts, pair, mask}
//      {type: 'drop', key}  {type: 'cancel', key}
// Out: {id, ok: true, ...} | {id, ok: false, error, details?}
//      {type: 'progress', key, file, loaded, total}
import init, { loadSession } from './pkg/attnscope.js';

const FILES = ['config.json', 'model.safetensors', 'tokenizer.json'];
const CACHE = 'attnscope-models-v1';
const PROBE = 'The engine is timed on this short sentence first.';
const wasmReady = init();

const checkpoints = new Map(); // key → {name, bytes: [config, weights, tokenizer]}
const sessions = new Map();    // key → {backend, session, engine: 'cpu' | 'gpu', status}
const aborts = new Map();      // key → AbortController of a download under way

// ---------- downloading, once per origin ----------
async function openCache() {
  try { return self.caches ? await caches.open(CACHE) : null; } catch { return null; }
}

/** One file of a checkpoint, from Cache Storage or the network; a lock per URL makes a second
 *  document (an iframe) wait for the first download and then read it from the cache. */
async function fetchFile(url, file, onBytes, signal, refresh) {
  const work = async () => {
    const cache = await openCache();
    if (cache && !refresh) {
      const hit = await cache.match(url);
      if (hit) {
        const bytes = new Uint8Array(await hit.arrayBuffer());
        onBytes(bytes.length, bytes.length);
        return bytes;
      }
    }
    let resp;
    try {
      resp = await fetch(url, { signal, cache: refresh ? 'reload' : 'default' });
    } catch (e) {
      if (signal.aborted) throw new Error('cancelled');
      throw new Error(`${file}: the request to ${url} failed (${e.message || e})`);
    }
    if (!resp.ok) throw new Error(`${file}: HTTP ${resp.status}${resp.statusText ? ' ' + resp.statusText : ''} from ${url}`);
    const total = Number(resp.headers.get('content-length')) || 0;
    const chunks = [];
    let loaded = 0;
    const reader = resp.body.getReader();
    for (;;) {
      let step;
      try { step = await reader.read(); } catch (e) {
        throw new Error(signal.aborted ? 'cancelled' : `${file}: the download broke off after ${loaded} bytes (${e.message || e})`);
      }
      if (step.done) break;
      chunks.push(step.value);
      loaded += step.value.length;
      onBytes(loaded, total);
    }
    if (total && loaded !== total) throw new Error(`${file}: got ${loaded} bytes, the server announced ${total}`);
    const bytes = new Uint8Array(loaded);
    let at = 0;
    for (const c of chunks) { bytes.set(c, at); at += c.length; }
    if (cache) await cache.put(url, new Response(bytes)).catch(() => {});
    return bytes;
  };
  return self.navigator.locks ? navigator.locks.request(`attnscope:${url}`, work) : work();
}

async function download(key, base, refresh) {
  const root = base.endsWith('/') ? base : base + '/';
  const ctl = new AbortController();
  aborts.set(key, ctl);
  try {
    const out = [];
    for (const f of FILES) {
      out.push(await fetchFile(root + f, f, (loaded, total) => self.postMessage({ type: 'progress', key, file: f, loaded, total }), ctl.signal, refresh));
    }
    return out;
  } finally {
    aborts.delete(key);
  }
}

// ---------- engines ----------
const now = () => performance.now();

/** For `auto` with a GPU: time both engines on a short sentence, keep the faster. */
async function probe(session) {
  const run = async (engine) => { const t = now(); await session.run([PROBE], undefined, 'padding', engine); return now() - t; };
  const cpu = Math.min(await run('cpu'), await run('cpu'));
  let gpu = await run('gpu'); // includes compiling the pipelines
  if (gpu > cpu) gpu = Math.min(gpu, await run('gpu'));
  return { cpu, gpu };
}

const ms = (x) => (x >= 1000 ? `${(x / 1000).toFixed(1)} s` : `${x.toFixed(x < 10 ? 1 : 0)} ms`);

async function makeSession({ name, bytes: [config, weights, tokenizer] }, backend) {
  const session = await loadSession(name, config, weights, tokenizer, backend);
  const gpu = session.gpu();
  const why = session.unavailable();
  if (backend === 'cpu') return { backend, session, engine: 'cpu', status: { line: 'CPU engine (chosen)' } };
  if (!gpu) {
    return { backend, session, engine: 'cpu', status: { line: 'CPU engine: WebGPU is not available in this browser', details: why || '' } };
  }
  if (backend === 'gpu') return { backend, session, engine: 'gpu', status: { line: `WebGPU (chosen): ${gpu.replace(/^gpu: /, '')}` } };
  const t = await probe(session);
  const adapter = gpu.replace(/^gpu: /, '');
  const details = `timed on a ${PROBE.split(' ').length}-word sentence: WebGPU (${adapter}) ${ms(t.gpu)}, CPU ${ms(t.cpu)} a pass`;
  return t.gpu < t.cpu
    ? { backend, session, engine: 'gpu', status: { line: `auto: WebGPU, ${ms(t.gpu)} a pass vs ${ms(t.cpu)} on the CPU`, details } }
    : { backend, session, engine: 'cpu', status: { line: `auto: CPU engine, ${ms(t.cpu)} a pass; WebGPU here took ${ms(t.gpu)}`, details } };
}

function drop(key) {
  const s = sessions.get(key);
  if (s) { s.session.free(); sessions.delete(key); }
  checkpoints.delete(key);
}

async function load(msg) {
  const known = checkpoints.get(msg.key);
  const current = sessions.get(msg.key);
  const reuse = known && !msg.refresh && !msg.files;
  if (reuse && current && current.backend === msg.backend) return current;
  const cp = reuse ? known : { name: msg.name, bytes: msg.files ? FILES.map((f) => new Uint8Array(msg.files[f])) : await download(msg.key, msg.base, msg.refresh) };
  const next = await makeSession(cp, msg.backend); // a bad checkpoint throws here: the old one stays
  if (current) current.session.free();
  checkpoints.set(msg.key, cp);
  sessions.set(msg.key, next);
  return next;
}

function sessionFor(key) {
  const s = sessions.get(key);
  if (!s) throw new Error('no model is loaded');
  return s;
}

self.onmessage = async (e) => {
  const msg = e.data;
  if (msg.type === 'drop') { drop(msg.key); return; }
  if (msg.type === 'cancel') { aborts.get(msg.key)?.abort(); return; }
  try {
    await wasmReady;
    if (msg.type === 'load') {
      const s = await load(msg);
      self.postMessage({ id: msg.id, ok: true, info: s.session.info(), engine: s.engine, status: s.status });
    } else if (msg.type === 'run') {
      const s = sessionFor(msg.key);
      const r = await s.session.run(msg.texts, msg.pair || undefined, msg.mask, s.engine);
      const transfer = [r.attention.buffer, r.mask.buffer];
      if (r.scores) transfer.push(r.scores.buffer);
      if (r.logits) transfer.push(r.logits.buffer);
      self.postMessage({ id: msg.id, ok: true, result: r }, transfer);
    } else if (msg.type === 'check') {
      const r = await sessionFor(msg.key).session.check(msg.texts, msg.pair || undefined, msg.mask);
      self.postMessage({ id: msg.id, ok: true, result: r });
    }
  } catch (err) {
    self.postMessage({ id: msg.id, ok: false, error: String((err && err.message) || err) });
  }
};
