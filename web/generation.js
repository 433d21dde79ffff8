// Generating with a decoder-only model (the Llama family, GPT-2): whether a model can, the
// generation as it streams in (src/wasm.rs `Generating.step()`), and the run the attention views
// draw from it, cut at the focused step, in the shape of a forward pass's (result.js `fromWorker`).

import { fromWorker, squareMask, recordsOf } from './result.js';
import { THUMB, thumbBins, foldRows } from './summary.js';
import { watchRun } from './progress.js';

/** Whether a model writes text: decoder-only, with an LM head (decided by its architecture). */
export const canGenerate = (info) => info?.architecture?.kind === 'decoder' && Boolean(info.lm_head);

/** The focused step of a generation with `outputs` tokens (`step` null: the last). */
export const stepOf = (step, outputs) => Math.max(0, Math.min(outputs - 1, step ?? outputs - 1));

/**
 * "heads 0–2 share key/value head 0, …" for grouped-query attention (`architecture.heads`
 * `{query, key_value}`), or '' when every query head has its own key/value head.
 */
export function kvGroups(arch) {
  const q = arch?.heads?.query, kv = arch?.heads?.key_value;
  if (!q || !kv || kv >= q) return '';
  const per = q / kv;
  const groups = Array.from({ length: kv }, (_, g) => `${g * per}–${(g + 1) * per - 1}`);
  const shown = kv <= 4 ? groups.map((r, g) => `heads ${r} share key/value head ${g}`).join(', ')
    : `heads ${groups[0]} share key/value head 0, heads ${groups[1]} head 1, … (${per} query heads a key/value head)`;
  return `Grouped-query attention: ${q} query heads, ${kv} key/value heads: ${shown}.`;
}

/** A pass's attention (`step.records`, one a layer), each layer's `(H, nq, nk)`; any other shape is an error. */
function attentionOf(step, nq, nk) {
  const layers = recordsOf(step.records, 'decoder', 'self', 'attention');
  const bad = layers.find((r) => r.shape.length !== 3 || r.shape[1] !== nq || r.shape[2] !== nk || r.values.length !== r.shape[0] * nq * nk);
  if (!layers.length || bad) throw new Error(`a pass's attention of ${bad ? `shape ${JSON.stringify(bad.shape)}` : 'no layers'}, where the generation expects (H, ${nq}, ${nk})`);
  return layers;
}

/**
 * A generation as the worker streams it (web/worker.js `generate`: src/wasm.rs
 * `Generating.step()` a pass at a time), so far, in the fields `attnscope generate` prints:
 * model, model_type, backend, prompt, prompt_ids, output_ids, output_text, tokens (every
 * position fed, as the vocabulary holds them), texts (each as the engine reads it: src/model/tokenizer.rs
 * `text_of`), steps [{top_k}], step_ms, head_mask ([layer, head] knocked out), n (N, the
 * positions fed) and attention (L, H, N, N).
 * Each pass's attention is written once into a buffer of (L, H, S, S), S the most positions the
 * generation can feed (the prompt's P and `maxNew − 1`): a step costs its own row, the views read
 * the heads they draw in place (`head`), and the (L, H, N, N) copy is made only when `attention`
 * is read. The summary of every head (its largest probability, its thumbnail) is kept as the
 * rows come, a row a step (`summary`), so the views never walk all L·H·N·N values while it streams.
 * A long generation (`long`: src/wasm.rs `Generating.long`, its attention more than a generation
 * keeps) holds no attention and has no `attention`: each pass is a run of a long text (`run`,
 * the newest), whose heads the engine computes when a view asks.
 */
export class GenerationResult {
  #data = null; #S; #heads; #compact = null; #last = null;
  /** A long generation's (src/wasm.rs `Generating.long`): the run of its newest pass, as the
   *  engine ran it (a long text's: the heads come from the engine when looked at). */
  #run = null;
  /** The summary of the rows fed so far (`#fold`): {bins, thumbs (L·H, THUMB × THUMB: a head's
   *  thumbnail, its rows THUMB apart), thumbMask (THUMB × THUMB), best: [L·H] of {max, q, k}}. */
  #kept = null;

  /** From the prompt's pass (`first`: what `step()` returned first), `maxNew` tokens at most,
   *  `off` the heads knocked out while writing ("layer:head"). */
  constructor(first, maxNew, off = []) {
    const P = first.prompt_ids.length;
    Object.assign(this, {
      model: first.model, model_type: first.model_type, backend: first.backend, prompt: first.prompt,
      head_mask: off.map((k) => k.split(':').map(Number)),
      prompt_ids: first.prompt_ids, output_ids: [], output_text: '', tokens: [...first.prompt_tokens], texts: [...first.prompt_texts], steps: [], step_ms: [], n: P,
    });
    this.#S = P + Math.max(1, maxNew) - 1;
    if (first.run) {
      // a long generation: no attention here, each pass's run in its place
      this.long = true;
      this.#run = runOf(first, P);
      this.backend = this.#run.backend; // the page's engine, which ran the pass
      this.#heads = this.#run.L * this.#run.H;
      this.#written(first);
      return;
    }
    const layers = attentionOf(first, P, P);
    this.#heads = layers.length * layers[0].shape[0]; // L·H
    this.#data = new Float32Array(this.#heads * this.#S * this.#S);
    this.#rows(layers, 0);
    // (L, H, N, N), as the CLI prints it: copied out of the buffer when read
    Object.defineProperty(this, 'attention', { enumerable: true, get: () => this.cut(this.n) });
    this.#kept = this.#fold(P);
    this.#written(first);
  }

  /** A step after the prompt's pass: it fed position `n` (the last token written), one row over `n + 1` keys. */
  add(step) {
    const q = this.n, S = this.#S;
    if (q >= S) throw new Error(`a step after the ${S} positions the generation can feed`);
    if (this.long) {
      this.#run = runOf(step, q + 1);
      this.tokens.push(this.#last.token);
      this.texts.push(this.#last.text);
      this.n = q + 1;
      this.#written(step);
      return;
    }
    const layers = attentionOf(step, 1, q + 1);
    if (layers.length * layers[0].shape[0] !== this.#heads) throw new Error(`a step over ${layers.length} layers of ${layers[0].shape[0]} heads, where the generation's prompt had ${this.#heads} heads`);
    this.#rows(layers, q);
    this.tokens.push(this.#last.token);
    this.texts.push(this.#last.text);
    this.n = q + 1;
    // the new row into the summary, or all of them again once the thumbnails' bins widen
    if (thumbBins(this.n).w === this.#kept.bins.w) this.#fold(this.n, this.#kept, q);
    else this.#kept = this.#fold(this.n);
    this.#written(step);
  }

  /** Each layer's rows `(H, n_q, n_k)` into the buffer, at positions `from`…`from + n_q − 1`. */
  #rows(layers, from) {
    const S = this.#S;
    layers.forEach((r, l) => {
      const [H, nq, nk] = r.shape;
      for (let h = 0; h < H; h++) {
        for (let q = 0; q < nq; q++) this.#data.set(r.values.subarray((h * nq + q) * nk, (h * nq + q + 1) * nk), ((l * H + h) * S + from + q) * S);
      }
    });
  }

  #written(step) {
    this.output_ids.push(step.id);
    this.steps.push({ text: step.text, top_k: step.top_k });
    this.step_ms.push(step.step_ms);
    this.output_text = step.output_text;
    this.#last = { token: step.token, text: step.text };
  }

  /** How many heads: L·H. */
  get heads() { return this.#heads; }

  /** A long generation's run of its newest pass (over its `n` positions); null otherwise. */
  get run() { return this.#run; }

  /** Head `lh` (of L·H) over the first `n` positions: a copy, (n, n). */
  head(lh, n) {
    const S = this.#S, out = new Float32Array(n * n);
    for (let q = 0; q < n; q++) out.set(this.#data.subarray((lh * S + q) * S, (lh * S + q) * S + n), q * n);
    return out;
  }

  /**
   * Rows [from, n) of every head into `into` (the summary of the first `from` positions, or a new
   * one when null): each head's largest probability and its cell, and its thumbnail over the
   * first n positions in bins of summary.js `thumbBins(n)`, its rows THUMB apart (so it grows in
   * place). Returns the summary.
   */
  #fold(n, into = null, from = 0) {
    const heads = this.#heads, S = this.#S, cells = THUMB * THUMB;
    const kept = into ?? {
      bins: thumbBins(n), thumbs: new Float32Array(heads * cells), thumbMask: new Uint8Array(cells),
      best: Array.from({ length: heads }, () => ({ max: 0, q: 0, k: 0 })),
    };
    const laid = { w: kept.bins.w, side: THUMB };
    for (let lh = 0; lh < heads; lh++) {
      foldRows(this.#data.subarray(lh * S * S, (lh + 1) * S * S), S, from, n, n, laid,
        kept.thumbs.subarray(lh * cells, (lh + 1) * cells), lh === 0 ? kept.thumbMask : null, kept.best[lh], true);
    }
    return kept;
  }

  /**
   * What the views need of every head over the first `n` positions (summary.js `summarise`'s
   * fields): each head's largest probability and its cell (`q·n + k`), and past THUMB positions
   * its thumbnail (`R` its side) in summary.js `thumbBins(n)`. Over every position fed so far it
   * is the summary kept as the rows came; over fewer (a step of a finished generation), made
   * from their rows.
   */
  summary(n) {
    const kept = n === this.n ? this.#kept : this.#fold(n);
    const heads = this.#heads, R = n > THUMB ? thumbBins(n).side : 0;
    const compact = (from, to) => { for (let r = 0; r < R; r++) to.set(from.subarray(r * THUMB, r * THUMB + R), r * R); return to; };
    const thumbs = R ? new Float32Array(heads * R * R) : null;
    for (let lh = 0; R && lh < heads; lh++) compact(kept.thumbs.subarray(lh * THUMB * THUMB), thumbs.subarray(lh * R * R));
    return {
      R, thumbs, thumbMask: R ? compact(kept.thumbMask, new Uint8Array(R * R)) : null,
      probMax: Float32Array.from(kept.best, (b) => b.max), probArg: Int32Array.from(kept.best, (b) => b.q * n + b.k),
      scoreMax: new Float32Array(heads),
    };
  }

  /** The attention over the first `n` positions, (L·H, n, n) (the last copy is kept). */
  cut(n) {
    if (this.#compact?.n === n) return this.#compact.values;
    const S = this.#S, out = new Float32Array(this.#heads * n * n);
    for (let lh = 0; lh < this.#heads; lh++) {
      for (let q = 0; q < n; q++) out.set(this.#data.subarray((lh * S + q) * S, (lh * S + q) * S + n), (lh * n + q) * n);
    }
    this.#compact = { n, values: out };
    return out;
  }
}

/** A long generation's pass (`step.run`) over its `n` positions; any other is an error. */
function runOf(step, n) {
  const r = step.run;
  if (!r || r.T !== n) throw new Error(`a long generation's pass ${r ? `over ${r.T} positions` : 'without its run'}, where it expects ${n}`);
  return r;
}

/**
 * The run the views draw for a generation (`result`: a {@link GenerationResult}) at step `step`
 * (null: the last): the prompt and what was written before the step, `n = P + step` positions,
 * its attention `(1, L, H, n, n)` read from the generation's (each head copied out once a view
 * asks for it; the summary as `result.summary` keeps it), under the causal mask, with each
 * written position's likeliest next tokens (the prompt's but its last have none: generating
 * computes them only where it writes). `generated: {P, step, outputs, source: result, w: its
 * thumbnails' bin width}` marks it (a view that drew an earlier step of the same source over the
 * same bins may draw only the rows added since). `reach`: each layer's (the architecture's
 * `layers`), the sliding layers' masks cut from the causal one by their windows.
 */
export function generationRun(result, step, layers, reach = []) {
  const P = result.prompt_ids.length, outputs = result.output_ids.length;
  const t = stepOf(step, outputs), n = P + t;
  if (result.long) {
    // a long generation's newest pass is a run of its own, which every view draws; an earlier
    // step's is a pass over its positions (`connectGeneration` runs it): none here
    if (t !== outputs - 1) return null;
    const run = result.run;
    run.generated = { P, step: t, outputs, source: result, w: thumbBins(n).w, full: true, long: true };
    return run;
  }
  const H = result.heads / layers;
  const mask = squareMask(n, true);
  const tokens = result.tokens.slice(0, n);
  const item = {
    text: result.prompt, tokens, token_ids: [...result.prompt_ids, ...result.output_ids].slice(0, n),
    token_texts: result.texts.slice(0, n), offsets: tokens.map(() => [0, 0]), word_ids: tokens.map((_, i) => i), length: n, truncated: false,
  };
  const shape = [1, layers, H, n, n];
  const info = {
    model: result.model, model_type: result.model_type, backend: result.backend, fallback: null, mask: 'causal', mask_ablation: false,
    elapsed_ms: result.step_ms.reduce((a, b) => a + b, 0), shape, reach, items: [item], head_mask: result.head_mask, scale: 'sqrt_dk', head_metrics: [],
  };
  const nextTokens = [tokens.map((_, q) => (q >= P - 1 ? result.steps[q - P + 1]?.top_k ?? [] : []))];
  const heads = new Map(); // l·H + h → its (n, n) copy, made once a view reads it
  const head = (b, l, h) => heads.get(l * H + h) ?? heads.set(l * H + h, result.head(l * H + h, n)).get(l * H + h);
  const run = fromWorker({ info, head, mask, nextTokens, summary: result.summary(n) });
  run.generated = { P, step: t, outputs, source: result, w: thumbBins(n).w };
  return run;
}

/** The share of the page's time the attention views may take while a generation streams. */
const VIEWS_SHARE = 1 / 6;

/**
 * The least time between two showings of the text written while tokens stream: 20 a second, as
 * streaming chat pages throttle theirs. Each showing lays out, paints and commits a frame of the
 * page, ~5 ms of a core here, on the cores the engine's threads decode on: SmolLM2's step on 2
 * threads with every view took a median 23.8 ms with each token shown, 21.0 at 20 showings a
 * second (~15 with no view; docs/speed.md, "2026-12-07 (late)"). The first token is shown as it
 * comes, the last when the generation ends.
 */
const TEXT_MS = 50;

/**
 * Connects generating to a store (the page's): `start(maxNew, chat)` writes after the sentence
 * with the loaded model, one step at a time in the worker, each step's text and attention put
 * in the store as it comes (`generation`: {id, running, result, stopped, error}, the text at
 * most every TEXT_MS while it streams; `run`: the attention views' run at the newest step, or
 * at the focused `step` once done);
 * `stop()` ends it early. While tokens stream, the attention views take a newer step at most
 * once a frame, and only once the page has been free long enough since their last update that
 * it took at most VIEWS_SHARE of the page's time (its frame's style, layout, paint and commit
 * included): they never hold the engine back, whose threads share the machine's cores with the
 * page. Heads knocked out (the store's `off`) are knocked out while writing, and knocking one
 * out (or back in) writes again; a generation goes when the sentence or the model changes, or
 * another run replaces its views (another mask, the scale); a link's `gen=N` writes N tokens
 * once the model and the sentence's run are in. A long generation (src/wasm.rs `Generating.long`)
 * runs each pass as a run of the page's, asking what `optionsOf(state)` asks of a run, its
 * progress told to `onRunProgress(p)` (web/progress.js); its stop ends the pass under way
 * between two layers. Returns {start, stop}.
 */
export function connectGeneration(store, eng, optionsOf = () => ({}), onRunProgress = null) {
  // `from`: the sentence's run the latest generation wrote after (another one replaces it)
  let current = null, ids = 0, autoFor = '', from = null;
  const layersOf = (s) => s.modelInfo.layers;
  const reachOf = (s) => (s.modelInfo.architecture?.layers ?? []).map(({ attention, window }) => ({ attention, window }));
  const focusOf = (s) => ({ item: 0, layer: s.layer, head: s.head });
  /** Drops a generation's pending redraw of the views and showing of its text. */
  const halt = (g) => { cancelAnimationFrame(g.frame); clearTimeout(g.timer); clearTimeout(g.text); };

  /**
   * The views' run of generation `g` (the store's, done) at step `step`: a long generation's
   * earlier step is a pass over its positions, run here (the CPU engine reuses the pass before
   * it: a step back computes its last row, a step on the rows since), the views drawing the run
   * they have until it comes.
   */
  let passAsked = '';
  function showStep(g, step) {
    const s = store.get(), result = g.result;
    const run = generationRun(result, step, layersOf(s), reachOf(s));
    if (run || !result.long) { store.update({ run }); return; }
    const P = result.prompt_ids.length, outputs = result.output_ids.length, t = stepOf(step, outputs);
    const asked = `${g.id}:${t}`;
    if (passAsked === asked) return;
    passAsked = asked;
    const ids = [...result.prompt_ids, ...result.output_ids].slice(0, P + t);
    const options = { ...optionsOf(s), headMask: g.off.join(','), ids };
    eng.run(s.modelKey, { texts: [result.prompt], pair: '', mask: 'causal', options, focus: focusOf(s) }).then((r) => {
      const now = store.get();
      if (now.generation?.result !== result || stepOf(now.step, outputs) !== t) return;
      r.generated = { P, step: t, outputs, source: result, w: thumbBins(P + t).w, full: true, long: true };
      store.update({ run: r });
    }, (err) => {
      if (store.get().generation?.result === result) store.update({ runError: { line: `the pass over the generation's step ${t + 1}: ${String(err.message || err)}` } });
    }).finally(() => { if (passAsked === asked) passAsked = ''; });
  }

  function start(maxNew, chat, { keepStep = false } = {}) {
    const s = store.get();
    current?.handle.stop();
    if (current) halt(current);
    const id = ++ids;
    from = s.run?.generated ? from : s.run;
    // the heads knocked out write too: every pass, the prompt's and each step's
    const off = [...s.off];
    store.update({ generation: { id, running: true, result: null, stopped: false, error: null, off, baseline: null }, gen: maxNew, genMax: maxNew, chat, ...(keepStep ? {} : { step: null }) });
    let result = null;
    // (a long generation runs each pass as the page's runs: what the views ask of one, and the head shown)
    const asked = { prompt: s.sentences[0] ?? '', options: { maxNewTokens: maxNew, topK: 5, chat, headMask: off.join(','), ...(s.numerics === 'fast' ? { numerics: 'fast' } : {}) }, runOptions: optionsOf(s), focus: focusOf(s) };
    // a long generation's prompt pass: how far it has gone (a run's box), a stop between two layers
    const watch = watchRun((p) => onRunProgress?.(p));
    const handle = eng.generate(s.modelKey, asked, ({ step, run }) => {
      if (current?.id !== id) return;
      if (run) step.run = run;
      if (result) result.add(step); else result = new GenerationResult(step, maxNew, off);
      watch.done(); // the prompt's pass told: each step after it is a row's, and the text streams
      // the text as written: now, or TEXT_MS after it was last shown (the tokens since with it)
      const wait = g.textAt + TEXT_MS - performance.now();
      if (wait <= 0) showText(); else g.text ||= setTimeout(showText, wait);
      if (!current.frame && !current.timer) current.frame = requestAnimationFrame(draw);
    }, (m) => watch.message(m));
    const g = { id, handle: { ...handle, stop: () => { handle.stop(); watch.stop(); } }, frame: 0, timer: 0, ready: 0, measuring: false, text: 0, textAt: -Infinity };
    function showText() {
      clearTimeout(g.text);
      g.text = 0;
      g.textAt = performance.now();
      if (current === g) store.update({ generation: { ...store.get().generation, result } });
    }
    handle.done.finally(() => watch.done()).catch(() => {});
    current = g;
    // the attention views at the newest step, once a frame at most, not before `ready`
    function draw() {
      g.frame = 0;
      if (current !== g || g.measuring) return; // a step after this draw's frame asks again
      const wait = g.ready - performance.now();
      if (wait > 0) { g.timer = setTimeout(() => { g.timer = 0; g.frame = requestAnimationFrame(draw); }, wait); return; }
      const t0 = performance.now();
      store.update({ run: generationRun(result, null, layersOf(store.get()), reachOf(store.get())), translation: null });
      // what the draw cost the page, its frame's style, layout, paint and commit included: they
      // run after this callback, in the same task, and a task posted now runs after them
      g.measuring = true;
      setTimeout(() => {
        const now = performance.now();
        g.measuring = false;
        g.ready = now + ((1 - VIEWS_SHARE) / VIEWS_SHARE) * (now - t0);
      }, 0);
    }
    handle.done.then(({ stopped, baseline }) => {
      if (current !== g) return;
      current = null;
      halt(g);
      const now = store.get();
      store.update({ generation: { ...now.generation, result, running: false, stopped, baseline: baseline ?? null } });
      if (result) showStep(store.get().generation, now.step);
    }, (err) => {
      if (current !== g) return;
      current = null;
      halt(g);
      store.update({ generation: { ...store.get().generation, result, running: false, error: `Could not generate: ${String(err.message || err)}` } });
    });
  }

  store.subscribe((s, changed) => {
    // another run in place of the one written after (not that run itself, whose arrival a
    // generation started on it may hear of after it started)
    const replaced = changed.has('run') && s.run && !s.run.generated && s.run !== from;
    const stale = changed.has('sentences') || changed.has('modelVersion') || replaced;
    // a head knocked out (or back in) under a generation: the model writes again with them out
    if (s.generation && replaced && !changed.has('sentences') && !changed.has('modelVersion') && s.gen
      && s.generation.off.join(',') !== s.off.join(',') && canGenerate(s.modelInfo)) {
      start(s.gen, s.chat && Boolean(s.modelInfo.chat_template));
      return;
    }
    if (s.generation && stale) {
      current?.handle.stop();
      if (current) halt(current);
      current = null;
      store.update({ generation: null, gen: 0, step: null });
      return;
    }
    const g = s.generation;
    if (changed.has('step') && g?.result && !g.running) showStep(g, s.step);
    // a link's gen=N: once, when the model's first run of the sentence is in
    const key = `${s.modelVersion}`;
    if (s.gen && !g && autoFor !== key && canGenerate(s.modelInfo) && s.run && !s.run.generated && !s.busy) {
      autoFor = key;
      start(s.gen, s.chat && Boolean(s.modelInfo.chat_template), { keepStep: true });
    }
  });

  return { start, stop: () => current?.handle.stop() };
}
