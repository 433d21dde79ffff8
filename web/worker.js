// The engine's thread: owns the wasm module, the loaded checkpoints and their sessions, so the
// page never stalls on the math. Shared by every view and <attn-scope> element of a page.
//
// In:  {id, type: 'load', key, name, backend, base?, files?, refresh?} (a base URL ending in .gguf,
//      or files with one *.gguf: a GGUF file, the Llama family's one file)
//      {id, type: 'run' | 'check', key, texts, pair, mask, focus?: {item, layer, head, steps?: {win}}}
//      (a long run's result brings its focused head, as `long-head` would, and with `steps` the
//      steps view's window of its scores (`win`: its zoom window, if for this run's length): no
//      second message for it)
//      {id, type: 'generate', key, gen, prompt, options} (a decoder-only model writes after `prompt`
//      one token a step, on the CPU engine; each pass posted as {type: 'generated', gen, step}, its
//      attention's records transferred, the next computed meanwhile and posted once the page
//      answers {type: 'generated-ack', gen};
//      then the answer {steps, stopped};
//      {type: 'stop-generating', gen} ends it early)
//      {id, type: 'stats'} (→ wasmBytes, wasmBuild, threads, sessions, checkpoints, marks)  {type: 'drop', key}  {type: 'cancel', key}
//      {type: 'lose-device'} (only with ?testhooks=1: destroys every WebGPU device, as a crash would;
//      ?testhooks=lose-at-probe destroys them when `auto` first runs WebGPU)
//      {id, type: 'crash', site} (only with ?testhooks=1: a panic in the wasm module, as a bug
//      would, at a `CrashSite` of src/wasm.rs: 'call', 'future' or 'pool')
//      (a long generation's passes are runs: its 'run-progress' as a run's)
// Out: {id, ok: true, ...} | {id, ok: false, error}
//      {type: 'progress', key, file, loaded, total}
//      {type: 'run-progress', id, cells: {buffer, at}} as run `id` begins, where the wasm memory is
//      shared (the threaded build): its progress cells (src/wasm.rs `Session.progressCells`),
//      which the page reads (the layer the pass is on, the heads of each layer it has ended) and
//      where it asks the run to stop; {type: 'run-progress', id, heads:
//      [done, of]} as a long run's summary begins each layer's heads
//      {type: 'crashed', panic} once the wasm module has trapped (a Rust panic): the page
//      replaces this worker (web/engine.js), which answers nothing more. A panic on one of the
//      threaded build's threads goes to the page's BroadcastChannel `?crash=` instead.
import { headsSummary, engineSummary } from './summary.js';
import { maxAbsDiff as maxDiff, stepsPart } from './result.js';
import { loadBuild } from './wasm-build.js';

const FILES = ['config.json', 'model.safetensors', 'tokenizer.json'];
const WEIGHTS = 'model.safetensors'; // moved into wasm memory as a WeightsFile, the others kept as bytes
const AT_WEIGHTS = FILES.indexOf(WEIGHTS); // its place in a checkpoint's files
/** A folder's optional files: an instruct model's chat template, in tokenizer_config.json
 *  (before transformers 5) or chat_template.jinja (as transformers 5 saves it); a 404 means none. */
const CHAT_FILES = ['tokenizer_config.json', 'chat_template.jinja'];
/** Whether a file (a name or a URL) is a GGUF file: one file for config, tokenizer and weights. */
const isGguf = (name) => /\.gguf$/i.test(name.split(/[?#]/)[0]);

/**
 * Why a URL that names one file other than a .gguf cannot be loaded as a folder, in words that
 * say what to do; null for a folder's URL (or a .gguf file's). PyTorch's pickles (.bin, .pt,
 * .pth, .ckpt) are never read: reading one can run code, and safetensors holds the same numbers.
 */
function notAFolder(url) {
  const file = decodeURIComponent(new URL(url).pathname.split('/').pop() ?? '');
  const folder = url.slice(0, url.lastIndexOf('/') + 1);
  if (/\.(bin|pt|pth|ckpt)$/i.test(file)) {
    return `${file} is PyTorch's pickle format, which attnscope does not load (reading a pickle can run code). Save the model as safetensors, in Python: AutoModel.from_pretrained(folder).save_pretrained(folder) (transformers writes model.safetensors), then give the folder's URL (${folder}) or a GGUF file`;
  }
  if (/\.(safetensors|json)$/i.test(file)) {
    return `${file} is one file of a checkpoint: give its folder's URL (${folder}), which holds config.json, model.safetensors and tokenizer.json`;
  }
  if (/\.(h5|msgpack|onnx)$/i.test(file)) {
    return `${file} is a ${/h5$/i.test(file) ? 'TensorFlow' : /msgpack$/i.test(file) ? 'Flax' : 'ONNX'} file, which attnscope does not load: give the URL of a folder with config.json, model.safetensors and tokenizer.json, or of a GGUF file`;
  }
  return null;
}
/** Whether a file goes into wasm memory as a WeightsFile (safetensors weights, a GGUF file). */
const isWeights = (file) => file === WEIGHTS || isGguf(file);
/** A file's size limit (`fileLimits()`): a GGUF file's is the weights', a chat file's the config's. */
const limitOf = (file) => (isWeights(file) ? limits[WEIGHTS] : CHAT_FILES.includes(file) ? limits['config.json'] : limits[file]);
const CACHE = 'attnscope-models-v1';
const PROBE = 'The engine is timed on this short sentence first.';

// ---------- the wasm core: three builds, the fastest the browser can run ----------
// `make web` builds them (Makefile, "web"):
// * pkg-threads: rayon's threads on Web Workers sharing the memory, with relaxed SIMD; it needs
//   SharedArrayBuffer, so only where the page is cross-origin isolated (COOP + COEP headers);
// * pkg-relaxed: one thread, relaxed SIMD (the matmul's multiply-adds fused where the CPU has FMA);
// * pkg: one thread, plain SIMD128, for browsers without relaxed SIMD.
// The relaxed-SIMD probe is wasm-feature-detect's module (one i8x16.relaxed_swizzle). The page's
// `?wasm=threads|relaxed-simd|simd128` asks for one build (a build the browser cannot run falls
// back as above).
// the page's parameters (web/engine.js), from this module's own URL: where the page is on another
// origin, the worker's location is a blob that imports this module
const PARAMS = new URL(import.meta.url).searchParams;
const RELAXED_SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 15, 1, 13, 0, 65, 1, 253, 15, 65, 2, 253, 15, 253, 128, 2, 11]);
const BUILDS = ['threads', 'relaxed-simd', 'simd128'];
const THREADS = Math.min(navigator.hardwareConcurrency || 1, 8);
function chooseBuild(asked) {
  const relaxed = WebAssembly.validate(RELAXED_SIMD_PROBE);
  const can = { threads: relaxed && self.crossOriginIsolated === true && THREADS > 1, 'relaxed-simd': relaxed, simd128: true };
  return BUILDS.slice(Math.max(0, BUILDS.indexOf(asked))).find((b) => can[b]);
}
let WASM_BUILD = chooseBuild(PARAMS.get('wasm')); // the build loaded, once it is (wasm-build.js)
/**
 * The Worker class for the threaded build's pool. wasm-bindgen-rayon 1.3's helper (its
 * `no-bundler` one) sends each thread the build's module to import (`mainJS`) and calls that
 * module's init with positional arguments, which wasm-bindgen deprecates with a console warning
 * on every thread; the threads import web/threads-init.js instead: the build's exports, with an
 * init that takes one object.
 */
const poolThread = (Base) => class PoolThread extends Base {
  postMessage(data, ...rest) {
    const init = data?.type === 'wasm_bindgen_worker_init' && data.mainJS;
    return super.postMessage(init ? { ...data, mainJS: new URL('./threads-init.js', import.meta.url).href } : data, ...rest);
  }
};
let loadSession, loadGgufSession, fileLimits, writesText, checkGgufHeader, scalingExperiment, analyseGiven, WeightsFile, lastPanic, crashForTests; // bound once the build has loaded
// The module compiled and instantiated: enough to check and download a checkpoint's files,
// which a first load does while the threads start.
const wasmCore = loadBuild(WASM_BUILD).then(async ({ m, wasm, build }) => {
  WASM_BUILD = build;
  performance.mark('attnscope: wasm instantiated'); // the first view's milestones (tests/e2e/first_view.mjs)
  ({ loadSession, loadGgufSession, fileLimits, writesText, checkGgufHeader, scalingExperiment, analyseGiven, WeightsFile, lastPanic, crashForTests } = m);
  const channel = PARAMS.get('crash');
  if (channel) m.reportCrashesOn(channel);
  return { m, wasm };
});
// ... and its threads started (the threaded build): enough to build a session and run it.
const wasmReady = wasmCore.then(async ({ m, wasm }) => {
  if (WASM_BUILD === 'threads') {
    self.Worker = poolThread(self.Worker);
    await m.initThreadPool(THREADS);
  }
  performance.mark('attnscope: threads started');
  return wasm;
});
let limits = null;

const checkpoints = new Map(); // key → {name, bytes: [config, weights, tokenizer], chat?: [tokenizer_config, chat_template] (each bytes or null), gguf?: its file name (config and tokenizer null)}
const sessions = new Map();    // key → {backend, session, engine: 'cpu' | 'gpu', status}
const aborts = new Map();      // key → AbortController of a download under way

// ---------- test hooks: WebGPU devices the tests may destroy ----------
const devices = [];
const HOOKS = PARAMS.get('testhooks');
// `?testhooks=lose-at-probe`: as `1`, and `auto`'s probe destroys the devices before WebGPU's turn
const LOSE_AT_PROBE = HOOKS === 'lose-at-probe';
if ((HOOKS === '1' || LOSE_AT_PROBE) && self.navigator.gpu) {
  const requestAdapter = GPU.prototype.requestAdapter;
  GPU.prototype.requestAdapter = async function (...args) {
    const adapter = await requestAdapter.apply(this, args);
    if (adapter) {
      const requestDevice = adapter.requestDevice;
      adapter.requestDevice = async (...a) => { const d = await requestDevice.apply(adapter, a); devices.push(d); return d; };
    }
    return adapter;
  };
}

// ---------- downloading, once per origin, within the limits ----------
async function openCache() {
  try { return self.caches ? await caches.open(CACHE) : null; } catch { return null; }
}

const mb = (n) => `${(n / 1048576).toFixed(1)} MB`;

/** Watches a safetensors stream: once its header is in, the file's exact size is known, so a
 *  body longer (or a Content-Length other) than the header says is stopped at once. */
function safetensorsSize(head, file, url) {
  if (head.length < 8) return null;
  const n = Number(new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true));
  if (n > limits.safetensorsHeader) throw new Error(`${file}: the header claims ${n} bytes, over the limit of ${limits.safetensorsHeader}: ${url}`);
  if (head.length < 8 + n) return null;
  let header;
  try { header = JSON.parse(new TextDecoder().decode(head.subarray(8, 8 + n))); } catch { throw new Error(`${file}: the header is not JSON: is this a safetensors file?`); }
  let end = 0;
  for (const [k, t] of Object.entries(header)) if (k !== '__metadata__') end = Math.max(end, Number(t?.data_offsets?.[1] ?? 0));
  return 8 + n + end;
}

/** One file of a checkpoint, from Cache Storage or the network: its bytes, or for cached weights
 *  the Blob that Cache Storage gives (read into wasm memory by `intoWasm`, chunk by chunk, so
 *  their bytes are never whole in JavaScript). A downloaded file is stored in Cache Storage
 *  while the model is built from it (writing 90 MB there takes longer than reading them); a lock
 *  per URL, held until it is stored, makes a second document (an iframe) wait for the first
 *  download and then read it from the cache. */
async function fetchFile(url, file, onBytes, signal, refresh) {
  const limit = limitOf(file);
  /** `{value, stored}`: the file, and a promise that settles once Cache Storage holds it. */
  const work = async () => {
    const cache = await openCache();
    if (cache && !refresh) {
      const hit = await cache.match(url);
      if (hit) {
        if (isWeights(file)) {
          const blob = await hit.blob();
          if (blob.size > limit) throw new Error(`${file}: the cached file is ${mb(blob.size)}, over the page's limit of ${mb(limit)}: ${url}`);
          if (isGguf(file)) await checkGguf(file, new Uint8Array(await blob.slice(0, Math.min(blob.size, limits.ggufHeader)).arrayBuffer()), blob.size);
          onBytes(blob.size, blob.size);
          return { value: blob };
        }
        const bytes = new Uint8Array(await hit.arrayBuffer());
        onBytes(bytes.length, bytes.length);
        return { value: bytes };
      }
    }
    let resp;
    try {
      resp = await fetch(url, { signal, cache: refresh ? 'reload' : 'default' });
    } catch (e) {
      if (signal.aborted) throw new Error('cancelled');
      // a file of another site the browser would not hand over: its server allows no other site
      const other = new URL(url).origin !== self.location.origin;
      const why = other ? `: the browser reads a file of another site only where its server allows it (Access-Control-Allow-Origin; and Cross-Origin-Resource-Policy: cross-origin where this page is cross-origin isolated), or ${new URL(url).host} is offline. Serve the model with those headers, or embed the page as an iframe` : '';
      throw new Error(`${file}: the request to ${url} failed (${e.message || e})${why}`);
    }
    // the Hub's reason for a 401/403/404 (RepoNotFound, GatedRepo, EntryNotFound), where its
    // CORS headers let the page read it
    if (!resp.ok) throw Object.assign(new Error(`${file}: HTTP ${resp.status}${resp.statusText ? ' ' + resp.statusText : ''} from ${url}`), { status: resp.status, code: resp.headers.get('x-error-code'), file, url });
    // an error or login page served as the file (a wrong base URL, a single-page app's fallback)
    // is named as one, not read as a safetensors header or JSON: by its type, or by its first bytes
    const htmlPage = () => Object.assign(new Error(`${file}: the server answered with an HTML page, not ${file}: ${url} (is the base URL a checkpoint folder?)`), { html: true, file, url });
    if (/^text\/html/i.test(resp.headers.get('content-type') ?? '')) throw htmlPage();
    const total = Number(resp.headers.get('content-length')) || 0;
    if (total > limit) throw new Error(`${file}: the server announces ${mb(total)}, over the page's limit of ${mb(limit)}: ${url}`);
    const chunks = [];
    let loaded = 0;
    let expected = null; // model.safetensors: the size its header gives
    let head = new Uint8Array(0);
    let headChecked = false; // a GGUF file's (checkGguf): asked at 64 KiB, then at each doubling until it is whole
    let headAsk = 1 << 16;
    const reader = resp.body.getReader();
    try {
      for (;;) {
        let step;
        try { step = await reader.read(); } catch (e) {
          throw new Error(signal.aborted ? 'cancelled' : `${file}: the download broke off after ${loaded} bytes (${e.message || e})`);
        }
        if (step.done) break;
        // an HTML page under another content type: its first bytes say so
        if (!loaded && /^\s*<(!doctype|html|head|body|\?xml|!--)/i.test(new TextDecoder().decode(step.value.subarray(0, 64)))) throw htmlPage();
        chunks.push(step.value);
        loaded += step.value.length;
        if (loaded > limit) throw new Error(`${file}: over the page's limit of ${mb(limit)}; stopped: ${url}`);
        if (file === 'model.safetensors' && expected === null && head.length < limits.safetensorsHeader + 8) {
          head = concat([head, step.value]);
          expected = safetensorsSize(head, file, url);
          if (expected !== null && total && total !== expected) throw new Error(`${file}: the server announces ${total} bytes, the header describes ${expected}`);
        }
        if (expected !== null && loaded > expected) throw new Error(`${file}: the body is longer than the ${expected} bytes its header describes; stopped`);
        // a GGUF file's header, checked as its first bytes come: a refused file stops now
        if (isGguf(file) && !headChecked && loaded >= Math.min(total || Infinity, headAsk)) {
          headChecked = await checkGguf(file, concat(chunks, loaded).subarray(0, Math.min(loaded, limits.ggufHeader)), total || limit);
          headAsk = Math.min(2 * loaded, limits.ggufHeader);
        }
        onBytes(loaded, total || expected || 0);
      }
    } catch (e) {
      reader.cancel().catch(() => {});
      throw e;
    }
    if (total && loaded !== total) throw new Error(`${file}: got ${loaded} bytes, the server announced ${total}`);
    const bytes = concat(chunks, loaded);
    if (isGguf(file) && !headChecked) await checkGguf(file, bytes.subarray(0, limits.ggufHeader), loaded);
    const stored = cache?.put(url, new Response(bytes)).catch(() => {});
    return { value: bytes, stored };
  };
  if (!self.navigator.locks) return (await work()).value;
  return new Promise((resolve, reject) => {
    navigator.locks.request(`attnscope:${url}`, async () => {
      const got = await work();
      resolve(got.value);
      await got.stored;
    }).catch(reject);
  });
}

/** A GGUF file's header from its first bytes `head` (of a file of `len`), checked by the engine
 *  before the rest is read in: an error naming the file and what is wrong with it; false while
 *  the header runs past `head` and more of the file could hold it, true once checked whole. */
async function checkGguf(file, head, len) {
  await wasmReady;
  return checkGgufHeader(file, head, len);
}

/** Cached weights (a Blob of Cache Storage) read into a WeightsFile in wasm memory chunk by
 *  chunk as Cache Storage hands them over, so the file is never whole in JavaScript and then
 *  copied in (the model's matrices are then read in place: `WeightsFile` in src/model/weights.rs). */
async function readWeights(blob, file) {
  const weights = new WeightsFile(file, blob.size);
  try {
    const reader = blob.stream().getReader();
    let at = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      weights.write(at, value); // an error past the end
      at += value.length;
    }
    if (at !== blob.size) throw new Error(`${file}: the cache gave ${at} bytes of ${blob.size}`);
    return weights;
  } catch (e) {
    weights.free();
    throw e;
  }
}

function concat(chunks, n = chunks.reduce((a, c) => a + c.length, 0)) {
  const out = new Uint8Array(n);
  let at = 0;
  for (const c of chunks) { out.set(c, at); at += c.length; }
  return out;
}

/** A checkpoint's three files, read side by side (from the cache, or downloaded); the first to
 *  fail stops the others, and its error (the first in FILES' order) is the download's. All but
 *  config.json: it is small, and its answer says whether the model is there at all (a missing
 *  model's weights may 404 before its config does). A cancel stops all three. */
async function download(key, base, refresh, hub) {
  const root = base.endsWith('/') ? base : base + '/';
  const cancel = new AbortController(), failed = new AbortController();
  cancel.signal.addEventListener('abort', () => failed.abort());
  aborts.set(key, cancel);
  const reads = FILES.map((f) =>
    fetchFile(root + f, f, (loaded, total) => self.postMessage({ type: 'progress', key, file: f, loaded, total }), f === 'config.json' ? cancel.signal : failed.signal, refresh)
      .catch((e) => { failed.abort(); throw e; }));
  // the chat files, where the folder may have them (the engine reads config.json as a model
  // that writes text): any failure of one's own (a 404) means none; other folders are not
  // asked, so no 404 is logged
  const family = reads[0].then(async (config) => { await wasmReady; return writesText(config); }).catch(() => false);
  const chat = Promise.all(CHAT_FILES.map((f) => family.then((yes) => (yes ? fetchFile(root + f, f, () => {}, failed.signal, refresh) : null)).catch(() => null)));
  const got = await Promise.allSettled(reads).finally(() => aborts.delete(key));
  const errors = got.filter((r) => r.status === 'rejected').map((r) => r.reason);
  if (errors.length) {
    const e = cancel.signal.aborted ? new Error('cancelled') : errors.find((x) => x.message !== 'cancelled') ?? errors[0];
    throw hub && e.message !== 'cancelled' ? await hubError(hub, root, e) : e;
  }
  return { bytes: got.map((r) => r.value), chat: await chat };
}

/** A GGUF file by its URL, from the cache or downloaded: `{bytes: [null, weights, null], gguf}`
 *  (`gguf`: its file name, as errors name it). */
async function downloadGguf(key, url, refresh, hub) {
  const cancel = new AbortController();
  aborts.set(key, cancel);
  const file = decodeURIComponent(new URL(url).pathname.split('/').pop());
  try {
    const weights = await fetchFile(url, file, (loaded, total) => self.postMessage({ type: 'progress', key, file, loaded, total }), cancel.signal, refresh);
    return { bytes: [null, weights, null], gguf: file };
  } catch (e) {
    if (cancel.signal.aborted) throw new Error('cancelled');
    if (hub && e.status === 404) throw new Error(`${hub} has no ${file} on the Hub (HTTP 404 for ${url})`);
    throw hub ? await hubError(hub, url, e) : e;
  } finally {
    aborts.delete(key);
  }
}

/**
 * What a failed download of Hub model `id` means to a person: no such model, a gated or private
 * one, no model.safetensors (sharded, or PyTorch's weights only), no tokenizer.json, each naming
 * the id and the URL (every message starts with the id, or "no model <id>": scope.js shows it
 * as it is). Without a token the Hub answers 401 to a missing model as to a gated one, and says
 * which in X-Error-Code, when the browser may read it. One more plain GET, of the small
 * model.safetensors.index.json, tells a sharded checkpoint apart; pytorch_model.bin, which may be
 * gigabytes, is never asked for.
 */
async function hubError(id, root, e) {
  const at = e.url ? ` (HTTP ${e.status} for ${e.url})` : '';
  if (e.code === 'RepoNotFound' || (e.status === 404 && e.file === 'config.json' && e.code !== 'EntryNotFound')) {
    return new Error(`no model ${id} on the Hub${at}${e.status === 404 ? '' : ', or it is private: check the id'}`);
  }
  if (e.status === 401 || e.status === 403) {
    const what = e.code === 'GatedRepo' ? 'gated' : 'gated or private';
    const typo = e.status === 401 && !e.code ? ' (or there is no such model: the Hub answers 401 to both)' : '';
    return new Error(`${id} is ${what} on the Hub${at}${typo}: it needs its licence accepted on the Hub and an access token, which this page cannot send. Download its config.json, model.safetensors and tokenizer.json there and load them as files`);
  }
  if (e.status === 404 && e.file === WEIGHTS) {
    let sharded = false;
    try {
      const r = await fetch(root + 'model.safetensors.index.json');
      sharded = r.ok && !/^text\/html/i.test(r.headers.get('content-type') ?? '');
      r.body?.cancel().catch(() => {});
    } catch { /* not known */ }
    return new Error(sharded
      ? `${id} is sharded on the Hub${at}: its weights are in shards listed by model.safetensors.index.json, which attnscope does not read; save the model as one model.safetensors`
      : `${id} has no model.safetensors on the Hub${at}: perhaps only pytorch_model.bin, which attnscope does not read; convert it (save_pretrained(…, safe_serialization=True))`);
  }
  if (e.status === 404 && e.file === 'tokenizer.json') {
    return new Error(`${id} has no tokenizer.json on the Hub${at}: perhaps only a slow tokenizer's files (vocab.txt, or vocab.json and merges.txt), which attnscope does not read; save it with a fast tokenizer`);
  }
  if (e.status === 404) return new Error(`${id} has no ${e.file} on the Hub${at}`);
  if (e.html) return new Error(`${id} on the Hub: the server answered with an HTML page, not ${e.file}: ${e.url}`);
  return new Error(`${id} on the Hub: ${e.message}`);
}

/** The worker's performance marks, `[name, ms since the epoch]` (the worker's clock starts at its own
 *  `timeOrigin`: the page subtracts its own to place them on its timeline). */
const marks = () => performance.getEntriesByType('mark').map((m) => [m.name, m.startTime + performance.timeOrigin]);

// ---------- engines ----------
const now = () => performance.now();

/** For `auto` with a GPU: time both engines on a short sentence, keep the faster (a translation
 *  model: its translation of it, a few steps). A WebGPU pass that throws, or that the CPU had to
 *  answer, is `{cpu, failed}`: why WebGPU is not used. */
async function probe(session) {
  const translates = !!session.info().decoder;
  const run = async (engine) => {
    const t = now();
    const fallback = translates
      ? (await session.translate([PROBE], undefined, engine, { maxNewTokens: 8 })).fallback
      : (await session.run([PROBE], undefined, 'padding', engine)).info.fallback;
    return { ms: now() - t, fallback };
  };
  const cpu = Math.min((await run('cpu')).ms, (await run('cpu')).ms);
  if (LOSE_AT_PROBE) for (const d of devices) d.destroy();
  try {
    let gpu = await run('gpu'); // includes compiling the pipelines
    if (!gpu.fallback && gpu.ms > cpu) {
      const again = await run('gpu');
      gpu = { ms: Math.min(gpu.ms, again.ms), fallback: again.fallback };
    }
    return gpu.fallback ? { cpu, failed: gpu.fallback } : { cpu, gpu: gpu.ms };
  } catch (e) {
    return { cpu, failed: String(e?.message || e) };
  }
}

const ms = (x) => (x >= 1000 ? `${(x / 1000).toFixed(1)} s` : `${x.toFixed(x < 10 ? 1 : 0)} ms`);

/** The engine line when WebGPU was asked for and could not start (`err`, wgpu's words, go under
 *  "details"): the CPU engine runs the model instead, and the line says why in plain words. */
function noGpuStatus(err) {
  const why = !self.isSecureContext ? 'WebGPU needs a secure page (https, or http on localhost)'
    : !self.navigator.gpu ? 'This browser offers no WebGPU'
      : /no GPU adapter/.test(err?.message) ? 'This browser offers no usable GPU (WebGPU found no adapter)' // src/engine/gpu/device.rs
        : 'WebGPU could not start on this GPU';
  return { line: `${why}, so the CPU engine runs the model.`, details: String(err?.message || err) };
}

/** A session of checkpoint `cp` on `backend` ('cpu', 'gpu' or 'auto'): `{backend, session,
 *  engine: 'cpu' | 'gpu', status}`. `gpu` where WebGPU cannot start gives a CPU session (its
 *  `backend` 'cpu'), whose status says so. */
/** Whether WebGPU offers an adapter here (asked once: a browser without one answers at once). */
let adapterFound = null;
const hasAdapter = () => (adapterFound ??= Promise.resolve(self.navigator.gpu?.requestAdapter()).then(Boolean, () => false));

async function makeSession(cp, backend) {
  if (backend === 'auto' && await hasAdapter()) {
    // the first view from the CPU engine at once; WebGPU is set up and the engines are timed
    // after it (`timeEngines`)
    return { ...(await makeSession(cp, 'cpu')), backend, untimed: cp, status: { line: 'auto: the CPU engine while WebGPU is timed', details: 'WebGPU is set up and timed against the CPU once the first view is drawn' } };
  }
  await intoWasm(cp);
  const [config, weights, tokenizer] = cp.bytes;
  // the checkpoint's own errors throw here
  const setUp = cp.gguf ? loadGgufSession(cp.name, weights, backend) : loadSession(cp.name, config, weights, tokenizer, backend, ...CHAT_FILES.map((_, i) => cp.chat?.[i] ?? undefined));
  let session;
  try {
    session = await setUp; // ... and WebGPU's here: `gpu` asked for it, and it could not start
  } catch (e) {
    if (backend !== 'gpu' || isTrap(e)) throw e;
    return { ...(await makeSession(cp, 'cpu')), status: noGpuStatus(e) };
  }
  const gpu = session.gpu();
  const why = session.unavailable();
  if (backend === 'cpu') return { backend, session, engine: 'cpu', status: { line: 'CPU engine (chosen)' } };
  if (!gpu) {
    return { backend, session, engine: 'cpu', status: { line: 'CPU engine: WebGPU is not available in this browser', details: why || '' } };
  }
  return { backend, session, engine: 'gpu', status: { line: `WebGPU (chosen): ${gpu.replace(/^gpu: /, '')}` } }; // 'gpu' ('auto' where WebGPU is: above)
}

/** `auto`'s choice for a session on WebGPU (its CPU engine timed too): `{engine, status}`, the faster. */
async function chooseEngine(session) {
  const adapter = session.gpu().replace(/^gpu: /, '');
  const t = await probe(session);
  performance.mark('attnscope: engines timed');
  if (t.failed) return { engine: 'cpu', status: { line: `auto: CPU engine, ${ms(t.cpu)} a pass; WebGPU failed on a test pass`, details: `WebGPU (${adapter}): ${t.failed}` } };
  const details = `timed on ${session.info().decoder ? 'translating ' : ''}a ${PROBE.split(' ').length}-word sentence: WebGPU (${adapter}) ${ms(t.gpu)}, CPU ${ms(t.cpu)} a pass`;
  return t.gpu < t.cpu
    ? { engine: 'gpu', status: { line: `auto: WebGPU, ${ms(t.gpu)} a pass vs ${ms(t.cpu)} on the CPU`, details } }
    : { engine: 'cpu', status: { line: `auto: CPU engine, ${ms(t.cpu)} a pass; WebGPU here took ${ms(t.gpu)}`, details } };
}

/** How long `auto` waits for the page's first run of a new session before it times the engines anyway. */
const FIRST_VIEW_WAIT_MS = 1500;

/**
 * `auto` where WebGPU is there: session `s` of `key` answers on the CPU engine until both engines
 * are timed, which starts once its first run is answered (compiling WebGPU's pipelines takes
 * seconds on a software rasteriser, and the first view would wait for it); then the faster engine
 * runs, and the page is told (`{type: 'engine', key, engine, status}`, web/engine.js
 * onEngineChosen). Runs during the timing go on, on the CPU (the GPU engine takes concurrent
 * passes: src/engine/gpu/forward.rs holds no lock across an await).
 */
function timeEngines(key, s) {
  const cp = s.untimed;
  delete s.untimed;
  const firstView = new Promise((resolve) => { s.answered = resolve; setTimeout(resolve, FIRST_VIEW_WAIT_MS); });
  firstView.then(() => inTurn(key, async () => {
    delete s.answered;
    if (sessions.get(key) !== s) return; // replaced or dropped meanwhile
    let choice, gpu = null;
    try {
      gpu = await makeSession(cp, 'gpu'); // a CPU session, saying why, where WebGPU cannot start
      choice = gpu.engine === 'gpu' ? await chooseEngine(gpu.session) : { engine: 'cpu', status: gpu.status };
    } catch (e) {
      if (isTrap(e)) throw e;
      choice = { engine: 'cpu', status: { line: 'auto: CPU engine; timing the engines failed', details: String(e?.message || e) } };
    }
    const current = sessions.get(key) === s;
    if (current && choice.engine === 'gpu') {
      // the CPU session goes once the runs it may have started are done (a CPU pass finishes
      // in the microtasks after its call)
      const cpu = s.session;
      setTimeout(() => cpu.free());
      Object.assign(s, choice, { session: gpu.session });
    } else {
      gpu?.session.free();
      if (current) Object.assign(s, choice);
    }
    if (current) self.postMessage({ type: 'engine', key, ...choice });
  })).catch((e) => { if (isTrap(e)) crash(e); });
}

function drop(key) {
  const s = sessions.get(key);
  if (s) { s.session.free(); sessions.delete(key); }
  forget(key);
}

// ---------- a checkpoint's files: [config, weights, tokenizer] ----------
// The weights are a WeightsFile in wasm memory, which the checkpoint's sessions share. Until its
// first session is made (`intoWasm`), and while the checkpoint is parked (`park`), they stay in
// JavaScript: bytes, or the Blob of a cached file.

/** Moves a checkpoint's weights into wasm memory, where its sessions read them in place. `load`
 *  calls it only once the sessions the checkpoint replaces are freed, so that the file's large
 *  block is placed while wasm memory holds no other model (placed beside one, it can leave a
 *  hole that the next model's file does not fit, and wasm memory never shrinks). */
async function intoWasm(cp) {
  if (cp.freed) throw letGo();
  const w = cp.bytes[AT_WEIGHTS];
  if (w instanceof WeightsFile) return;
  const name = cp.gguf ?? WEIGHTS;
  // a GGUF file's header first (a file picked or dropped comes here unchecked): a refused one is
  // never copied in
  if (cp.gguf) await checkGguf(name, w instanceof Blob ? new Uint8Array(await w.slice(0, Math.min(w.size, limits.ggufHeader)).arrayBuffer()) : w.subarray(0, limits.ggufHeader), w.size ?? w.length);
  const file = w instanceof Blob ? await readWeights(w, name) : WeightsFile.fromBytes(name, w);
  if (cp.freed) { file.free(); throw letGo(); }
  cp.bytes[AT_WEIGHTS] = file;
}

/** Lets a checkpoint's files go. */
function forget(key) {
  release(checkpoints.get(key));
  checkpoints.delete(key);
}

/** Frees a checkpoint's wasm memory, once (a session of it keeps the matrices it shares). */
function release(cp) {
  if (!cp || cp.freed) return;
  cp.freed = true;
  if (cp.bytes[AT_WEIGHTS] instanceof WeightsFile) cp.bytes[AT_WEIGHTS].free();
}

/** Moves the weights of a checkpoint whose sessions were freed for another load out of wasm
 *  memory (a copy into JavaScript), so that wasm memory holds one model while the other loads;
 *  `makeSession` moves them back if the other fails. */
function park(cp) {
  if (!cp || cp.freed || !(cp.bytes[AT_WEIGHTS] instanceof WeightsFile)) return;
  const file = cp.bytes[AT_WEIGHTS];
  cp.bytes[AT_WEIGHTS] = file.bytes();
  file.free();
}

/** Throws when one of a checkpoint's files (bytes, a Blob or a WeightsFile; a GGUF checkpoint
 *  has the weights' alone) is over its limit. */
function checkSizes(files, gguf = null) {
  const names = gguf ? [null, gguf, null] : FILES;
  const size = (f) => (f instanceof Blob ? f.size : f.length);
  const over = names.findIndex((f, i) => f && size(files[i]) > limitOf(f));
  if (over >= 0) throw new Error(`${names[over]}: the file is ${size(files[over])} bytes, over the limit of ${limitOf(names[over])}`);
}

/** A checkpoint's files as the page handed them over (ArrayBuffers by name: the three files,
 *  tokenizer_config.json and chat_template.jinja where chosen too, or one *.gguf):
 *  `{bytes, chat?, gguf?}`. */
function fromFiles(files) {
  const gguf = Object.keys(files).find(isGguf);
  if (gguf) {
    const bytes = [null, new Uint8Array(files[gguf]), null];
    checkSizes(bytes, gguf);
    return { bytes, gguf };
  }
  const bytes = FILES.map((f) => new Uint8Array(files[f]));
  checkSizes(bytes);
  const chat = CHAT_FILES.map((f) => (files[f] ? new Uint8Array(files[f]) : null));
  return { bytes, chat };
}

const letGo = () => new Error('the model was let go while it loaded');

/** Loads a checkpoint. The sessions it replaces (the same key's, and with `exclusive` every
 *  other) are freed first and their weights parked in JavaScript, so wasm memory holds one model
 *  at a time; when the new one fails to load, they are rebuilt from the files kept here. */
async function load(msg) {
  const known = checkpoints.get(msg.key);
  const current = sessions.get(msg.key);
  const reuse = known && !msg.refresh && !msg.files;
  if (reuse && current && current.backend === msg.backend) return current;
  const wrong = !reuse && !msg.files && msg.base && notAFolder(msg.base);
  if (wrong) throw new Error(wrong);
  const files = reuse ? null : msg.files ? fromFiles(msg.files)
    : isGguf(msg.base) ? await downloadGguf(msg.key, msg.base, msg.refresh, msg.hub) : await download(msg.key, msg.base, msg.refresh, msg.hub);
  const cp = reuse ? known : { name: msg.name, ...files };
  performance.mark('attnscope: files read');
  try {
    checkSizes(cp.bytes, cp.gguf);
    await wasmReady;
  } catch (e) {
    if (cp !== known) release(cp);
    throw e;
  }
  const replaced = [...sessions.entries()].filter(([k]) => k === msg.key || msg.exclusive);
  for (const [k, s] of replaced) { s.session.free(); sessions.delete(k); }
  for (const [k] of replaced) if (checkpoints.get(k) !== cp) park(checkpoints.get(k));
  try {
    const next = await makeSession(cp, msg.backend);
    performance.mark(`attnscope: session built (${next.engine})`);
    if (cp.freed) { next.session.free(); throw letGo(); }
    for (const [k] of replaced) if (k !== msg.key) forget(k);
    if (checkpoints.get(msg.key) !== cp) forget(msg.key);
    checkpoints.set(msg.key, cp);
    keep(msg.key, next);
    return next;
  } catch (e) {
    for (const [k, s] of replaced) {
      try { keep(k, await makeSession(checkpoints.get(k), s.backend)); } catch { forget(k); }
    }
    if (cp !== known) release(cp);
    throw e;
  }
}

/** Keeps session `s` as checkpoint `key`'s; `auto`'s engines are timed after its first view. */
function keep(key, s) {
  sessions.set(key, s);
  if (s.untimed) timeEngines(key, s);
}

// ---------- one load or drop of a key at a time ----------
const turns = new Map(); // key → its last load or drop, settled
/** Runs `f` once every load and drop of `key` sent before it has ended, so that two never
 *  interleave (each reads and replaces the key's checkpoint and session across awaits). */
function inTurn(key, f) {
  const run = (turns.get(key) ?? Promise.resolve()).then(() => f());
  const settled = run.catch(() => {});
  turns.set(key, settled);
  settled.then(() => { if (turns.get(key) === settled) turns.delete(key); });
  return run;
}

function sessionFor(key) {
  const s = sessions.get(key);
  if (!s) throw new Error('no model is loaded');
  return s;
}

/**
 * A run with `msg.options` (src/wasm.rs `RunOptions`); when heads are knocked out, also what the
 * model gives without them: the sentence embedding (`baselineEmbedding`), the likeliest next
 * tokens (`baselineNext`) and what writes the next token (`baselineAttribution`), when the run
 * asks for them. The knocked-out run attributes the same tokens as the plain one: the drop the
 * knock-out causes in the token the model chose.
 */
async function run(s, msg) {
  const options = msg.options ?? {};
  const embedding = Boolean(options.sentenceEmbedding), next = options.topK, writes = options.logitAttribution;
  let known = null;
  if (options.headMask && (embedding || next || writes)) {
    // (a long text's plain run keeps no heads for later: the page shows the knocked-out run's)
    const plain = { scale: options.scale, ...(options.noRope ? { noRope: true } : {}), ...(options.noQkNorm ? { noQkNorm: true } : {}), ...(options.numerics ? { numerics: options.numerics } : {}), ...(options.ids ? { ids: options.ids } : {}), ...(embedding ? { sentenceEmbedding: true } : {}), ...(next ? { topK: next } : {}), ...(writes ? { logitAttribution: writes } : {}), noHeadsLater: true };
    known = recall(s, msg, plain);
    if ((embedding && !known?.sentenceEmbedding) || (next && known?.nextTokens?.topK !== next) || (writes && known?.logitAttribution?.targets !== targetsKey(writes))) {
      const p = await runOn(s, msg, plain);
      remember(s, msg, plain, p);
      known = recall(s, msg, plain);
    }
  }
  // the plain run's targets (its likeliest tokens, where none was named), when it has them
  const plainTargets = known?.logitAttribution?.items?.map((a) => a.target.id);
  const asked = writes && plainTargets ? { ...options, logitAttribution: { targets: plainTargets } } : options;
  const r = await runOn(s, msg, asked);
  remember(s, msg, options, r);
  if (known) {
    if (embedding) r.baselineEmbedding = known.sentenceEmbedding.slice();
    if (next) r.baselineNext = known.nextTokens.items;
    if (writes && known.logitAttribution) r.baselineAttribution = known.logitAttribution.items;
  }
  return r;
}

/**
 * A long run's summary (`info.attention` "queries_keys": the engine kept each layer's queries
 * and keys, not its L·H·T² probabilities): every head's thumbnail and largest probability as
 * the engine folded them (src/wasm.rs `Session.summaryHeads`): the CPU engine's pass folded
 * each as it computed it, so every head comes in one call; after a WebGPU pass, each head is
 * computed again from the queries and keys and folded, as many at a time as there are threads,
 * on them. No head is copied here. The same heads with the first key hidden (web/sink.js) fold
 * into `sink`, the summary the sink switch shows (its mask pooled with the model's), so it needs
 * no second sweep. Each layer begun is told to the page (`report(done, of)`); a stop the page
 * asked (src/wasm.rs `Session.progressCells`) ends it between two calls.
 */
function longSummary(s, r, report) {
  const [B, L, H] = r.info.shape, heads = B * L * H;
  const own = headsSummary(r.mask, r.info.shape), sink = headsSummary(r.mask, r.info.shape, own.thumbMask);
  for (let i = 0; i < heads;) {
    if (s.session.stopAsked()) throw new Error(`stopped as asked, after the heads of ${Math.floor(i / H)} of ${B * L} layers`);
    report(Math.floor(i / H), B * L);
    const some = s.session.summaryHeads(r.info.long_run, Math.floor(i / (L * H)), Math.floor(i / H) % L, i % H);
    own.folded(i, some.own.thumbs, some.own.probMax, some.own.probArg);
    sink.folded(i, some.sink.thumbs, some.sink.probMax, some.sink.probArg);
    i += some.heads;
  }
  return { ...own.done(), sink: sink.done() };
}

/** Tells the page (`{type: 'run-progress', id, cells}`) where session `s`'s run about to begin
 *  reports its layers and reads a stop: in memory the page shares (the threaded build's), which
 *  the page reads while this worker is busy with the run. Elsewhere nothing is told. */
async function tellProgressCells(s, id) {
  const { wasm } = await wasmCore;
  if (typeof SharedArrayBuffer === 'undefined' || !(wasm.memory.buffer instanceof SharedArrayBuffer)) return;
  const at = s.session.progressCells(); // (first: it may grow the memory, whose buffer is sent)
  self.postMessage({ type: 'run-progress', id, cells: { buffer: wasm.memory.buffer, at } });
}

/**
 * Run `r` as the page takes it: its summary (`summary`: every head's, as the engine folded
 * them with a run it holds whole, or a long run's, its layers told to `report(done, of)`)
 * and, for a long run, the head `focus` names (`focusHead`: the page would ask for it at once).
 * Returns the buffers to transfer with it, not copy.
 */
function summed(s, r, focus, report) {
  r.summary = r.summary ? engineSummary(r.summary, r.mask, r.info.shape) : longSummary(s, r, report);
  // a long run's focused head, computed now that the pass is over (the page would ask at once)
  if (r.info.long_run != null && focus) r.focusHead = focusedHead(s, r, focus);
  const transfer = [r.mask.buffer, r.summary.probMax.buffer, r.summary.probArg.buffer, r.summary.scoreMax.buffer];
  // each item's records' values (its attention and scores, a layer each) transferred, not copied
  if (r.records) transfer.push(...r.records.flat().map((rec) => rec.values.buffer));
  if (r.summary.thumbs) transfer.push(r.summary.thumbs.buffer, r.summary.thumbMask.buffer);
  const sink = r.summary.sink; // a long run's, with the first key hidden
  if (sink) transfer.push(sink.probMax.buffer, sink.probArg.buffer, sink.scoreMax.buffer, sink.thumbs.buffer);
  if (sink && sink.thumbMask !== r.summary.thumbMask) transfer.push(sink.thumbMask.buffer);
  if (r.focusHead) transfer.push(r.focusHead.attention.buffer, ...(r.focusHead.scores ? [r.focusHead.scores.values.buffer] : []));
  for (const k of ['logits', 'headMetrics', 'headRoles', 'valueNorms', 'rollout', 'sentenceEmbedding', 'baselineEmbedding', 'hiddenStates', 'layerSimilarity', 'headWrites']) if (r[k]) transfer.push(r[k].buffer);
  const arrays = (o) => Object.values(o ?? {}).flatMap((v) => (ArrayBuffer.isView(v) ? [v.buffer] : v && typeof v === 'object' ? arrays(v) : []));
  transfer.push(...arrays(r.layerTrace), ...arrays(r.flow), ...(r.crossAttention ?? []).map((c) => c.attention.buffer));
  return transfer;
}

/** The most bytes of buffers a session keeps ready for its next run's records. */
const SPARE_BYTES = 64 << 20;
/** How long after a run's result the buffers for the next are made: not while the page draws
 *  that result (the views of a keystroke's run take ~6–10 ms), on the cores it draws on. */
const SPARE_AFTER_MS = 40;
/** How many tokens longer the next run's text may be for its records to fit the buffers made
 *  ready after this one's (a keystroke adds one, a word a few). */
const SPARE_TOKENS = 4;

/**
 * Buffers for session `s`'s next run's records (src/wasm.rs `Session.setSpareBuffers`), made
 * while the worker waits for it: one for each of the last run's (`lengths`, over `T` tokens),
 * with room for SPARE_TOKENS more tokens, each written to once, so that the run copies its
 * records into memory the browser has already given the worker. Nothing when they would be
 * over SPARE_BYTES (a run that large takes far longer than its copies).
 */
function spareBuffers(s, lengths, T) {
  if (![...sessions.values()].includes(s)) return; // dropped meanwhile
  const room = ((T + SPARE_TOKENS) / Math.max(T, 1)) ** 2;
  const sizes = lengths.map((n) => Math.ceil(n * room));
  if (sizes.reduce((a, n) => a + 4 * n, 0) > SPARE_BYTES) { s.session.setSpareBuffers([]); return; }
  s.session.setSpareBuffers(sizes.map((n) => new Float32Array(n).fill(0)));
}

/** Long run `r`'s head `focus` (`{item, layer, head, steps?: {win}}`, each clamped to the run's)
 *  as the page's `long-head` gives it, with where it is: `{item, layer, head, attention,
 *  score_max}`, and `scores`, the steps view's window of them where the page shows that view
 *  (`steps.win`: its zoom window, taken where it is for this run's length). */
function focusedHead(s, r, focus) {
  const [B, L, H, T] = r.info.shape;
  const item = Math.min(focus.item, B - 1), layer = Math.min(focus.layer, L - 1), head = Math.min(focus.head, H - 1);
  const part = focus.steps ? stepsPart(T, focus.steps.win?.T === T ? focus.steps.win : null) : undefined;
  return { item, layer, head, ...s.session.longHead(r.info.long_run, item, layer, head, undefined, undefined, part) };
}

/** The head metrics under the other score scale than `options.scale`: entropy with and without ÷√d_k. */
async function otherScale(s, msg, options) {
  const other = { headMask: options.headMask, scale: options.scale === 'none' ? 'sqrt_dk' : 'none', ...(options.noRope ? { noRope: true } : {}), ...(options.noQkNorm ? { noQkNorm: true } : {}), ...(options.numerics ? { numerics: options.numerics } : {}), headMetrics: true, noHeadsLater: true };
  const known = recall(s, msg, other)?.headMetrics;
  if (known) return known.slice();
  const r = await runOn(s, msg, other);
  remember(s, msg, other, r);
  return r.headMetrics.slice(); // the remembered copy stays here
}

// ---------- what recent runs gave, so a knock-out or the √d_k panel need not rerun them ----------
// The sentence embedding, head metrics (a few hundred floats each) and likeliest next tokens of
// the last few runs of a session, by what decides them: the input, the heads knocked out, the
// score scale and the rotation.
const RECENT = 8;
const recentKey = (msg, o) => JSON.stringify([msg.texts, msg.pair || '', msg.mask, o.headMask || '', o.scale || 'sqrt_dk', Boolean(o.noRope), Boolean(o.noQkNorm), o.numerics ?? 'exact', o.ids ?? null]);
/** Which tokens an attribution was asked of (`logitAttribution.targets`; none: the likeliest). */
const targetsKey = (a) => JSON.stringify(a?.targets ?? []);

function remember(s, msg, options, r) {
  const memo = (s.memo ??= new Map());
  const key = recentKey(msg, options);
  const had = memo.get(key) ?? {};
  memo.delete(key);
  memo.set(key, {
    sentenceEmbedding: r.sentenceEmbedding?.slice() ?? had.sentenceEmbedding, // copies: r's arrays go to the page
    headMetrics: r.headMetrics?.slice() ?? had.headMetrics,
    // plain objects, cloned when posted: the page's copy is its own
    nextTokens: r.nextTokens ? { topK: options.topK, items: r.nextTokens } : had.nextTokens,
    logitAttribution: r.logitAttribution ? { targets: targetsKey(options.logitAttribution), items: r.logitAttribution } : had.logitAttribution,
  });
  if (memo.size > RECENT) memo.delete(memo.keys().next().value);
}

function recall(s, msg, options) {
  return s.memo?.get(recentKey(msg, options));
}

/** One forward pass; when WebGPU fails (the device was lost), the CPU engine answers from then on. */
async function runOn(s, msg, options) {
  try {
    const r = await s.session.run(msg.texts, msg.pair || undefined, msg.mask, s.engine, options);
    if (s.engine === 'gpu' && r.info.fallback) lostGpu(s, r.info.fallback);
    return r;
  } catch (err) {
    if (s.engine !== 'gpu' || !/GPU|device|WebGPU|read-back/i.test(String(err.message || err))) throw err;
    lostGpu(s, String(err.message || err));
    const r = await s.session.run(msg.texts, msg.pair || undefined, msg.mask, 'cpu', options);
    r.info.fallback = `WebGPU stopped (${String(err.message || err)}); the CPU engine answered and runs from now on`;
    return r;
  }
}

// ---------- generating: a decoder-only model writes one token a step ----------
const stopped = new Set(); // the ids of generations the page stopped
const acks = new Map(); // a generation's id → what goes on once the page has taken its last step
/** Waits until the page has received generation `gen`'s last step (or stops it): messages never
 *  pile up, and a stop is read between two steps. */
const taken = (gen) => new Promise((r) => acks.set(gen, r));
function ack(gen) { acks.get(gen)?.(); acks.delete(gen); }

/**
 * Writes after `msg.prompt` with session `s` on the CPU engine (src/wasm.rs `Generating`),
 * posting each pass as it comes, `{type: 'generated', gen, step}` (`step`: what `step()` wrote,
 * its attention's records (one a layer, `(H, n_q, n_k)`) transferred: the page keeps the generation), the next
 * computed meanwhile and posted once the page has received it (`{type: 'generated-ack', gen}`); resolves to `{steps, stopped, baseline}`:
 * how many steps ran, whether the page stopped it, and with heads knocked out (`headMask`) what
 * the model writes with every head under the same options, `{output_ids, output_text}` (null
 * otherwise, or when stopped).
 */
async function generate(s, msg) {
  const options = msg.options ?? {};
  const g = s.session.generate(msg.prompt, s.engine, options);
  try {
    let steps = 0;
    // the page's answer to the step posted last: the next step runs while the page takes it
    // (waiting for it first left the engine idle while the page was busy drawing), and is
    // posted once the page has it, so no more than one step is ever waiting in the page
    let answered = null;
    const passes = g.long ? longPasses(s, g, msg, options) : shortPasses(g);
    for (;;) {
      if (stopped.has(msg.gen)) break;
      let pass, done;
      try {
        ({ value: pass, done } = await passes.next());
      } catch (err) {
        if (stopped.has(msg.gen)) break; // a long pass the page stopped between two layers
        throw err;
      }
      if (done) break;
      await answered;
      if (stopped.has(msg.gen)) break; // a step the page no longer wants
      steps++;
      answered = taken(msg.gen);
      self.postMessage({ type: 'generated', gen: msg.gen, ...pass.message }, pass.transfer);
      if (pass.message.step.done) break;
    }
    const baseline = options.headMask && !stopped.has(msg.gen) ? await plainGeneration(s, msg, options) : null;
    return { steps, stopped: stopped.has(msg.gen), baseline };
  } finally {
    stopped.delete(msg.gen);
    acks.delete(msg.gen);
    g.free();
  }
}

/** A generation's passes, each `{message: {step}, transfer}`: `Generating.step()`'s, its
 *  attention's records transferred (the page keeps the generation's). */
async function* shortPasses(g) {
  for (let step = await g.step(); step; step = await g.step()) {
    yield { message: { step }, transfer: step.records.map((r) => r.values.buffer) };
    if (step.done) return;
  }
}

/**
 * A long generation's passes (src/wasm.rs `Generating.long`: its L·H·N² attention is more than
 * a generation keeps), each `{message: {step, run}, transfer}`: a run of the prompt's ids and
 * what was written so far as a long text's (each layer's queries and keys kept, the heads
 * computed when looked at), with what the page's views ask for (`msg.runOptions`) and the head
 * it shows (`msg.focus`) as its runs have. The CPU engine reuses the run before it: only the
 * new position's rows are computed. Its likeliest next tokens go to `Generating.accept`, which
 * writes the first. With `views` false (what the model writes with every head, beside a
 * knock-out's), its runs keep no heads for the page and are not summarised.
 */
async function* longPasses(s, g, msg, options, { views = true } = {}) {
  const ids = [...g.promptIds], prompt = g.prompt;
  // how far each pass has gone, read by the page as a run's are, where a stop is asked too
  await tellProgressCells(s, msg.id);
  const runOptions = { ...(views ? msg.runOptions : { noHeadsLater: true }), ...(options.numerics ? { numerics: options.numerics } : {}), headMask: options.headMask ?? '', topK: options.topK ?? 5, ids };
  for (;;) {
    const start = performance.now();
    const r = await runOn(s, { texts: [prompt], pair: '', mask: 'causal' }, runOptions);
    const top = r.nextTokens?.[0]?.[ids.length - 1];
    if (!top?.length) throw new Error(`the run over ${ids.length} positions gave no likeliest next tokens`);
    const transfer = views ? summed(s, r, msg.focus, () => {}) : [];
    const step = g.accept(top, performance.now() - start);
    yield { message: { step, run: r }, transfer };
    if (step.done) return;
    ids.push(step.id);
  }
}

/** What the model writes after `msg.prompt` with every head (`options` without the knock-out),
 *  `{output_ids, output_text}`, the last one remembered; nothing is posted on the way. */
async function plainGeneration(s, msg, options) {
  const plain = { ...options, headMask: '' };
  const key = JSON.stringify([msg.prompt, plain, s.engine]);
  if (s.plainGeneration?.key === key) return s.plainGeneration.value;
  const g = s.session.generate(msg.prompt, s.engine, plain);
  try {
    const value = { output_ids: [], output_text: '' };
    // a long one's runs keep no heads for the page (they would take the place of the run it shows)
    const passes = g.long ? longPasses(s, g, msg, plain, { views: false }) : shortPasses(g);
    for await (const { message: { step } } of passes) {
      value.output_ids.push(step.id);
      value.output_text = step.output_text;
    }
    s.plainGeneration = { key, value };
    return value;
  } finally {
    g.free();
  }
}

function lostGpu(s, why) {
  s.engine = 'cpu';
  s.status = { line: 'CPU engine: WebGPU stopped working', details: why };
}

// ---------- a trap in the wasm module ----------
// A Rust panic aborts the wasm call with a `WebAssembly.RuntimeError` and leaves the module's
// state untrustworthy (borrows held, the stack pointer where it stopped), so nothing more runs
// here: the page is told once, with the panic's message (or the trap's), and starts a fresh
// worker (web/engine.js `crashed`, which words it).
let crashed = null;
function crash(err) {
  if (!crashed) {
    try { crashed = lastPanic?.() ?? null; } catch { /* the module may not answer any more */ }
    crashed ??= String((err && err.message) || err);
    self.postMessage({ type: 'crashed', panic: crashed });
  }
  return crashed;
}
const isTrap = (err) => err instanceof WebAssembly.RuntimeError;
// traps outside a message's own calls (in a future the engine polls later)
self.addEventListener('error', (e) => { if (isTrap(e.error)) { e.preventDefault(); crash(e.error); } });
self.addEventListener('unhandledrejection', (e) => { if (isTrap(e.reason)) { e.preventDefault(); crash(e.reason); } });

self.onmessage = async (e) => {
  const msg = e.data;
  if (crashed) { if (msg.id) self.postMessage({ id: msg.id, ok: false, error: crashed }); return; }
  if (msg.type === 'drop') { inTurn(msg.key, () => drop(msg.key)).catch(() => {}); return; }
  if (msg.type === 'cancel') { aborts.get(msg.key)?.abort(); return; }
  if (msg.type === 'stop-generating') { stopped.add(msg.gen); ack(msg.gen); return; }
  if (msg.type === 'generated-ack') { ack(msg.gen); return; }
  if (msg.type === 'lose-device') { for (const d of devices) d.destroy(); return; }
  if (msg.type === 'wasm-module') return; // the notebook's bundle takes it (python/js/wasm-given.js)
  try {
    const { wasm } = await wasmCore;
    limits ??= fileLimits();
    if (msg.type !== 'load') await wasmReady; // a load downloads first, then waits (`load`)
    if (msg.type === 'load') {
      const s = await inTurn(msg.key, () => load(msg));
      self.postMessage({ id: msg.id, ok: true, info: s.session.info(), engine: s.engine, status: s.status });
    } else if (msg.type === 'run') {
      const s = sessionFor(msg.key);
      const before = s.status;
      await tellProgressCells(s, msg.id);
      const r = await run(s, msg);
      const report = (done, of) => self.postMessage({ type: 'run-progress', id: msg.id, heads: [done, of] });
      const transfer = summed(s, r, msg.focus, report);
      const lengths = (r.records ?? []).flat().map((rec) => rec.values.length);
      self.postMessage({ id: msg.id, ok: true, result: r, status: s.status !== before ? s.status : undefined }, transfer);
      s.answered?.();
      setTimeout(() => spareBuffers(s, lengths, r.info.shape[3]), SPARE_AFTER_MS);
    } else if (msg.type === 'translate') { // an encoder–decoder model: src/wasm.rs Session.translate
      const s = sessionFor(msg.key);
      let r;
      try {
        r = await s.session.translate(msg.sources, msg.targets ?? undefined, s.engine, msg.options ?? {});
      } catch (err) {
        if (s.engine !== 'gpu' || !/GPU|device|WebGPU|read-back/i.test(String(err.message || err))) throw err;
        lostGpu(s, String(err.message || err));
        r = await s.session.translate(msg.sources, msg.targets ?? undefined, 'cpu', msg.options ?? {});
        r.fallback = `WebGPU stopped (${String(err.message || err)}); the CPU engine answered and runs from now on`;
      }
      // each item's records' values are transferred, not copied
      self.postMessage({ id: msg.id, ok: true, result: r, status: s.status }, r.results.flatMap((item) => item.records.map((rec) => rec.values.buffer)));
      s.answered?.();
    } else if (msg.type === 'generate') { // a decoder-only model writes: src/wasm.rs Session.generate
      self.postMessage({ id: msg.id, ok: true, ...(await generate(sessionFor(msg.key), msg)) });
    } else if (msg.type === 'read-out') { // writes read onto the vocabulary: src/wasm.rs Session.readOut
      self.postMessage({ id: msg.id, ok: true, result: sessionFor(msg.key).session.readOut(msg.writes, msg.k) });
    } else if (msg.type === 'long-head') { // a long run's head, one at a time: src/wasm.rs Session.longHead
      // (into the array of a head the page let go, where it gave it back; pooled for the head
      // view as its rows are made, where it asked: `msg.pool`; with a window of its scores, the
      // steps view's, where it asked: `msg.scores`)
      const h = sessionFor(msg.key).session.longHead(msg.run, msg.item, msg.layer, msg.head, msg.into ?? undefined, msg.pool ?? undefined, msg.scores ?? undefined);
      const pooled = h.pooled ? [h.pooled.values.buffer, h.pooled.mask.buffer] : [];
      self.postMessage({ id: msg.id, ok: true, result: h }, [h.attention.buffer, ...pooled, ...(h.scores ? [h.scores.values.buffer] : [])]);
    } else if (msg.type === 'long-scores') { // a window of a long run's head's scores: src/wasm.rs Session.longScores
      const w = sessionFor(msg.key).session.longScores(msg.run, msg.item, msg.layer, msg.head, msg.part);
      self.postMessage({ id: msg.id, ok: true, result: w }, [w.values.buffer]);
    } else if (msg.type === 'decoder-trace') { // inside the decoder: src/wasm.rs Session.decoderTrace (the CPU engine)
      const r = sessionFor(msg.key).session.decoderTrace(msg.sources, msg.outputs, msg.layer, msg.item);
      self.postMessage({ id: msg.id, ok: true, result: r });
    } else if (msg.type === 'check-translation') { // a translation on the CPU and on the session's engine
      const s = sessionFor(msg.key);
      const a = await s.session.translate(msg.sources, undefined, 'cpu', {});
      const b = await s.session.translate(msg.sources, undefined, s.engine, {});
      // the same records, one a layer of each attention, on each engine
      const maxAbsDiff = Math.max(...a.results.flatMap((r, i) => r.records.map((rec, j) => maxDiff(rec.values, b.results[i].records[j]?.values))));
      const sameIds = a.results.every((r, i) => r.output_ids.join() === b.results[i].output_ids.join());
      self.postMessage({ id: msg.id, ok: true, result: { maxAbsDiff, sameIds, other: b.backend } });
    } else if (msg.type === 'check') {
      const r = await sessionFor(msg.key).session.check(msg.texts, msg.pair || undefined, msg.mask);
      self.postMessage({ id: msg.id, ok: true, result: r });
    } else if (msg.type === 'other-scale') { // what the √d_k panel adds to the run on screen
      const m = await otherScale(sessionFor(msg.key), msg, msg.options ?? {});
      self.postMessage({ id: msg.id, ok: true, result: m }, [m.buffer]);
    } else if (msg.type === 'scaling') {
      self.postMessage({ id: msg.id, ok: true, result: scalingExperiment(msg.samples) });
    } else if (msg.type === 'analyse-given') { // the heads' summaries and rollout of attention computed elsewhere
      const r = analyseGiven(msg.probs, msg.layers, msg.heads, msg.tokens, Uint32Array.from(msg.cls), Uint32Array.from(msg.sep));
      self.postMessage({ id: msg.id, ok: true, result: r }, [r.headMetrics.buffer, r.rollout.buffer]);
    } else if (msg.type === 'positions') {
      const r = sessionFor(msg.key).session.positionSimilarity(msg.n);
      self.postMessage({ id: msg.id, ok: true, result: r }, [r.learned.buffer, r.sinusoidal.buffer]);
    } else if (msg.type === 'crash' && HOOKS === '1') {
      crashForTests(msg.site); // a trap in a future: `crash` tells the page; on a thread: the channel
    } else if (msg.type === 'stats') {
      self.postMessage({ id: msg.id, ok: true, wasmBytes: wasm.memory.buffer.byteLength, wasmBuild: WASM_BUILD, threads: WASM_BUILD === 'threads' ? THREADS : 1, sessions: sessions.size, checkpoints: checkpoints.size, marks: marks() });
    }
  } catch (err) {
    self.postMessage({ id: msg.id, ok: false, error: isTrap(err) ? crash(err) : String((err && err.message) || err) });
  }
};
