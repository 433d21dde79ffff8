// The page's side of the engine: one worker per page, shared by the page and every
// <attn-scope> element on it. A checkpoint is loaded once per key (its base URL, or the files
// it came from); loading it again with another engine reuses the bytes the worker kept.

import { fromWorker, fromTranslation } from './result.js';

/** The default checkpoint: beside the scripts, as `make serve` and `dist/` lay it out. */
export const DEFAULT_MODEL = new URL('../assets/models/all-MiniLM-L6-v2/', import.meta.url).href;

/** Makes the engine's worker where no worker.js lies beside this module (a bundle: the notebook
 *  widget, python/js/widget.js): null here, worker.js then. */
let makeWorker = null;
export function useWorker(make) { makeWorker = make; }

/** A run as the worker posts it (`result`), as the views take it (result.js `fromWorker`), a
 *  long run's focused head in it (computed after its pass). */
function runFrom(result) {
  const r = fromWorker(result);
  const f = result.focusHead;
  if (f && r.long) r.addHead(f.item, f.layer, f.head, f);
  return r;
}

class Engine {
  constructor() {
    this.nextId = 1;
    this.pending = new Map();
    this.loads = new Map(); // `${key} ${backend}` → Promise of {info, engine, status}
    this.progress = new Map(); // key → Set of callbacks
    this.restarts = new Set(); // callbacks of `onRestart`
    this.engineChoices = new Set(); // callbacks of `onEngineChosen`
    this.generations = new Map(); // a generation's id → its `onStep`
    this.start();
  }

  start() {
    const url = new URL('./worker.js', import.meta.url);
    const params = new URLSearchParams(location.search);
    if (['1', 'lose-at-probe'].includes(params.get('testhooks'))) url.searchParams.set('testhooks', params.get('testhooks')); // worker.js
    if (params.get('wasm')) url.searchParams.set('wasm', params.get('wasm')); // one of the wasm builds (worker.js)
    // a panic on one of the threaded build's threads comes here: the worker waiting for that
    // thread's work cannot say so itself (src/wasm.rs `record_panics`)
    const channel = `attnscope-crash-${Date.now()}-${Math.random().toString(36).slice(2)}`;
    url.searchParams.set('crash', channel);
    this.crashes = new BroadcastChannel(channel);
    this.crashes.onmessage = (e) => this.crashed(e.data);
    // an element on another origin's page (a blog that pasted the share dialog's snippet): a
    // worker's script must be the page's own, so a module of the page's (a blob) imports ours,
    // by CORS; worker.js reads its parameters from its own URL (import.meta.url) either way
    const script = url.origin === location.origin ? url : URL.createObjectURL(new Blob([`import ${JSON.stringify(url.href)};`], { type: 'text/javascript' }));
    this.worker = makeWorker ? makeWorker() : new Worker(script, { type: 'module' });
    this.worker.onmessage = (e) => this.receive(e.data);
    // an error the worker did not handle (it could not start, say): the calls under way fail
    this.worker.onerror = (e) => {
      e.preventDefault();
      this.failPending(new Error(`the engine stopped: ${e.message || 'unknown error'}`));
    };
  }

  failPending(err) {
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }

  /**
   * The worker's wasm module trapped (a Rust panic, `panic` its message, from the worker or the
   * crash channel), so its state can't be trusted: every call under way fails with the message,
   * a fresh worker starts, and what was loaded is forgotten; the `onRestart` callbacks load their
   * checkpoints again (web/scope.js).
   */
  crashed(panic) {
    this.worker.terminate();
    this.crashes.close();
    const err = new Error(`the engine crashed (${String(panic).replace(/\s+/g, ' ').trim()}); a fresh engine has started`);
    this.failPending(err);
    this.loads.clear();
    this.start();
    for (const f of this.restarts) f(err);
  }

  /** Calls `f(error)` after each restart of the engine. */
  onRestart(f) { this.restarts.add(f); }

  /** Calls `f({key, engine, status})` when `auto` has timed the engines of checkpoint `key`
   *  after its first view, and runs it on `engine` ('cpu' or 'gpu') from then on (worker.js). */
  onEngineChosen(f) { this.engineChoices.add(f); }

  receive(m) {
    if (m.type === 'crashed') { this.crashed(m.panic); return; }
    if (m.type === 'progress') { for (const f of this.progress.get(m.key) ?? []) f(m); return; }
    if (m.type === 'run-progress') { this.pending.get(m.id)?.onProgress?.(m); return; }
    if (m.type === 'engine') { for (const f of this.engineChoices) f(m); return; }
    if (m.type === 'generated') {
      this.worker.postMessage({ type: 'generated-ack', gen: m.gen }); // the next step, while the page takes this one
      // a long generation's step brings its run, as `run` gives one
      const onStep = this.generations.get(m.gen);
      onStep?.(m.run ? { ...m, run: runFrom(m.run) } : m);
      return;
    }
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.ok) p.resolve(m); else p.reject(new Error(m.error));
  }

  /** Posts `msg` to the worker; resolves to its answer. `onProgress(m)` gets the call's
   *  `run-progress` messages (worker.js). */
  call(msg, transfer = [], onProgress = null) {
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      this.pending.set(id, { resolve, reject, onProgress });
      this.worker.postMessage({ ...msg, id }, transfer);
    });
  }

  /**
   * Loads a checkpoint: `source` is `{key, name, base}` (a folder's URL) or `{key, name, files}`
   * (three ArrayBuffers, transferred). Concurrent and repeated loads of one key and backend share
   * one request; `refresh` downloads again.
   */
  load(source, backend, onProgress = null, { refresh = false, exclusive = false } = {}) {
    const id = `${source.key} ${backend}`;
    if (onProgress) {
      if (!this.progress.has(source.key)) this.progress.set(source.key, new Set());
      this.progress.get(source.key).add(onProgress);
    }
    // the worker keeps one session a checkpoint: another backend replaces it
    for (const other of [...this.loads.keys()]) if (other.startsWith(`${source.key} `) && other !== id) this.loads.delete(other);
    // files the worker already has (their buffers went to it: an element keeps its source) are
    // not sent again: the worker reuses its copy of the key's
    const files = source.files && !Object.values(source.files).some((b) => b.detached) ? source.files : null;
    if (!this.loads.has(id) || refresh || files) {
      const transfer = files ? Object.values(files) : [];
      const p = this.call({ type: 'load', backend, refresh, exclusive, ...source, files }, transfer).finally(() => {
        if (onProgress) this.progress.get(source.key)?.delete(onProgress);
      });
      p.catch(() => this.loads.get(id) === p && this.loads.delete(id));
      this.loads.set(id, p);
    }
    return this.loads.get(id);
  }

  /**
   * Runs texts on a loaded checkpoint; resolves to the result contract (see result.js).
   * `options`: {headMask: 'L:H,…', scale: 'sqrt_dk' | 'none', headMetrics, rollout, sentenceEmbedding,
   * hiddenStates, layerTrace: layer, crossAttention: layer} (src/wasm.rs `RunOptions`).
   * `focus` (`{item, layer, head}`, optional): the head a long text's run brings with it (each
   * clamped to the run's; the others come by `longHead`).
   * `onProgress(m)`: how far the run has gone, as the worker tells it (web/progress.js reads it).
   */
  async run(key, { texts, pair, mask, options, focus }, onProgress = null) {
    const m = await this.call({ type: 'run', key, texts, pair, mask, options, focus }, [], onProgress);
    const r = runFrom(m.result);
    r.status = m.status ?? null; // the engine line, when this run changed it (WebGPU lost)
    return r;
  }

  /**
   * Translates `sources` with an encoder–decoder checkpoint, greedily or teacher-forcing
   * `targets` (one per source); resolves to what `attnscope translate` prints (`{model,
   * model_type, backend, results: [{source, …, output_ids, output_text, encoder_attention,
   * decoder_attention, cross_attention, steps?}], elapsed_ms, step_ms}`), each item's
   * attentions read from the records src/wasm.rs sends (result.js `fromTranslation`).
   * `options`: {maxNewTokens, topK, padded}.
   */
  async translate(key, { sources, targets = null, options = {} }) {
    const m = await this.call({ type: 'translate', key, sources, targets, options });
    const r = fromTranslation(m.result);
    r.status = m.status ?? null;
    return r;
  }

  /**
   * Writes after `prompt` with a decoder-only checkpoint, greedily, on the CPU engine, one token
   * a step (src/wasm.rs `Session.generate`; `options`: {maxNewTokens, topK, chat, headMask}). `onStep({step})`
   * gets each pass as it comes (src/wasm.rs `Generating.step()`: what it wrote, `{id, token, text,
   * top_k, step_ms, done, output_text}`, and its attention as records, one a layer, `(H, n_q, n_k)`; the prompt's
   * first, with the prompt's fields): web/generation.js `GenerationResult` keeps them. A long
   * generation (src/wasm.rs `Generating.long`) runs each pass as a run of a long text, with
   * `runOptions` (src/wasm.rs `RunOptions`: what the views ask of a run) and bringing the head
   * `focus` names: `onStep({step, run})`, `step` without records, `run` as `run` gives it. Returns
   * `{done: Promise of {steps, stopped, baseline}, stop()}` (`baseline`: with heads knocked out,
   * what the model writes with every head, `{output_ids, output_text}`). `onProgress(m)`: a long
   * generation's passes' progress, as `run`'s.
   */
  generate(key, { prompt, options = {}, runOptions = {}, focus = null }, onStep, onProgress = null) {
    const gen = this.nextId++;
    this.generations.set(gen, onStep);
    const done = this.call({ type: 'generate', key, gen, prompt, options, runOptions, focus }, [], onProgress).finally(() => this.generations.delete(gen));
    return { done, stop: () => this.worker.postMessage({ type: 'stop-generating', gen }) };
  }

  /** A translation of `sources` on the CPU engine and on the session's (WebGPU): `{maxAbsDiff,
   *  sameIds, other}` over the three attentions. */
  async checkTranslation(key, { sources }) {
    return (await this.call({ type: 'check-translation', key, sources })).result;
  }

  /**
   * Decoder layer `layer` inside, for source `item` of `sources` and their `outputs` (each the
   * decoder start token first: a translation's `output_ids`): src/report.rs `DecoderTraceItem`,
   * every value by name (`word`, `position`, `input`, `self_sum`, …, `cross_q`, `cross_k`,
   * `cross_v`, `cross_scores`, …, `output`), from the CPU engine.
   */
  async decoderTrace(key, { sources, outputs, layer, item }) {
    return (await this.call({ type: 'decoder-trace', key, sources, outputs, layer, item })).result;
  }

  /** Writes to the residual stream through the frozen final norm (`writes`: a Float32Array of
   *  N·D, a run's `headWritesOf`) read onto the vocabulary: `[N]` of `{promotes, suppresses}`,
   *  each `k` of `{id, token, value}` (src/wasm.rs `Session.readOut`). */
  async readOut(key, { writes, k }) {
    return (await this.call({ type: 'read-out', key, writes, k })).result;
  }

  /** Head `head` of layer `layer` over item `item` of a long run (`info.long_run`), computed from
   *  its kept queries and keys: `{attention}`, T·T, and `score_max`, its largest |score| (src/wasm.rs
   *  `Session.longHead`; result.js `addHead` takes it). `into`: the probabilities of a head the page
   *  let go (result.js `addHead` returns them), moved to the engine and written over when of T·T.
   *  `pool`: `{part: {q0, q1, k0, k1}, px}`, the part the head view draws pooled to its pixels
   *  (views/head.js `poolWanted`), pooled as the head's rows are made: `pooled` (`{part, px, w,
   *  rows, cols, max, arg, values, mask}`, as summary.js `pooledPart` gives it). `scores`: a part
   *  `{q0, q1, k0, k1}` of its scores wanted with it (the steps view's window): `scores`, as
   *  {@link longScores} gives it. */
  async longHead(key, { run, item, layer, head, into = null, pool = null, scores = null }) {
    const transfer = into ? [into.buffer] : [];
    return (await this.call({ type: 'long-head', key, run, item, layer, head, into, pool, scores }, transfer)).result;
  }

  /** A window of a long run's head's scores, `part` `{q0, q1, k0, k1}`: `{part, values}`, `values`
   *  (q1 − q0)·(k1 − k0) (src/wasm.rs `Session.longScores`; result.js `addScores` takes it). */
  async longScores(key, { run, item, layer, head, part }) {
    return (await this.call({ type: 'long-scores', key, run, item, layer, head, part })).result;
  }

  /** The head metrics (B, metric, L, H) of the same input under the other score scale than `options.scale`. */
  async otherScale(key, { texts, pair, mask, options }) {
    return (await this.call({ type: 'other-scale', key, texts, pair, mask, options })).result;
  }

  /** The √d_k experiment, computed by the engine: `[{d_k, raw, scaled}]` (src/analysis/scaling.rs). */
  async scaling(samples = 2000) { return (await this.call({ type: 'scaling', samples })).result; }

  /** The heads' summaries and rollout of attention computed elsewhere (web/given.js): `probs`
   *  (L, H, T, T) flat, `cls` and `sep` its sentence markers' positions → `{headMetrics: (metric,
   *  L, H), rollout: (T, T), metrics: names}` (src/analysis/mod.rs `of_given`). */
  async analyseGiven({ probs, layers, heads, tokens, cls, sep }) {
    return (await this.call({ type: 'analyse-given', probs, layers, heads, tokens, cls, sep })).result;
  }

  /** How alike the first n positions are, learned and sinusoidal: `{learned, sinusoidal: Float32Array n·n, n, dim}` (src/analysis/positions.rs). */
  async positions(key, n) { return (await this.call({ type: 'positions', key, n })).result; }

  /** The worker's wasm memory and what it holds: `{wasmBytes, sessions, checkpoints}`. */
  async stats() { return this.call({ type: 'stats' }); }

  /** Test hook (`?testhooks=1`): destroys the worker's WebGPU devices, as a GPU crash would. */
  loseDevice() { this.worker.postMessage({ type: 'lose-device' }); }

  /** Test hook (`?testhooks=1`): a panic in the worker's wasm module, as a bug would, at `site`:
   * 'call', 'future' (polled after the call) or 'pool' (on the threaded build's threads); rejects
   * with the crash. */
  crash(site = 'call') { return this.call({ type: 'crash', site }); }

  async check(key, { texts, pair, mask }) {
    return (await this.call({ type: 'check', key, texts, pair, mask })).result;
  }

  cancel(key) { this.worker.postMessage({ type: 'cancel', key }); }

  /** Forgets a checkpoint the page no longer shows (its memory returns to the worker). */
  drop(key) {
    for (const id of [...this.loads.keys()]) if (id.startsWith(`${key} `)) this.loads.delete(id);
    this.worker.postMessage({ type: 'drop', key });
  }
}

let shared = null;
/** The page's one engine. */
export function engine() {
  if (!shared) shared = new Engine();
  return shared;
}
