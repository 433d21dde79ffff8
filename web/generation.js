// Generating with a decoder-only model (the Llama family, GPT-2): whether a model can, and the
// run the attention views draw from a generation (src/wasm.rs `Generating.result()`), cut at the
// focused step, in the shape of a forward pass's (result.js `fromWorker`).

import { fromWorker } from './result.js';
import { summarise } from './summary.js';

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

// GPT-2's byte-level alphabet (bytes_to_unicode): each byte as a printable character
const BYTE_OF = (() => {
  const m = new Map();
  const printable = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  let extra = 0;
  for (let b = 0; b < 256; b++) m.set(String.fromCharCode(printable(b) ? b : 256 + extra++), b);
  return m;
})();

/** A byte-level BPE token's text (`Ġflies` → ` flies`); a token of another alphabet, or whose
 *  bytes are not whole UTF-8, as it is. */
export function tokenText(token) {
  const chars = [...token];
  if (!chars.every((c) => BYTE_OF.has(c))) return token;
  const text = new TextDecoder('utf-8', { fatal: false }).decode(new Uint8Array(chars.map((c) => BYTE_OF.get(c))));
  return text.includes('\ufffd') ? token : text;
}

/**
 * The run the views draw for a generation (`result`: `Generating.result()`) at step `step`
 * (null: the last): the prompt and what was written before the step, `n = P + step` positions,
 * its attention `(1, L, H, n, n)` cut from the generation's `(L, H, N, N)`, under the causal
 * mask, with each written position's likeliest next tokens (the prompt's but its last have none:
 * generating computes them only where it writes). `generated: {P, step, outputs}` marks it.
 */
export function generationRun(result, step, layers) {
  const P = result.prompt_ids.length, outputs = result.output_ids.length, N = result.n;
  const t = stepOf(step, outputs), n = P + t;
  const H = result.attention.length / (layers * N * N);
  const attention = new Float32Array(layers * H * n * n);
  for (let lh = 0; lh < layers * H; lh++) {
    for (let q = 0; q < n; q++) attention.set(result.attention.subarray((lh * N + q) * N, (lh * N + q) * N + n), (lh * n + q) * n);
  }
  const mask = new Float32Array(n * n);
  for (let q = 0; q < n; q++) mask.fill(1, q * n, q * n + q + 1);
  const tokens = result.tokens.slice(0, n);
  const item = {
    text: result.prompt, tokens, token_ids: [...result.prompt_ids, ...result.output_ids].slice(0, n),
    token_texts: tokens.map(tokenText), offsets: tokens.map(() => [0, 0]), word_ids: tokens.map((_, i) => i), length: n, truncated: false,
  };
  const shape = [1, layers, H, n, n];
  const info = {
    model: result.model, model_type: result.model_type, backend: result.backend, fallback: null, mask: 'causal', mask_ablation: false,
    elapsed_ms: result.step_ms.reduce((a, b) => a + b, 0), shape, items: [item], head_mask: [], scale: 'sqrt_dk', head_metrics: [],
  };
  const nextTokens = [tokens.map((_, q) => (q >= P - 1 ? result.steps[q - P + 1]?.top_k ?? [] : []))];
  const run = fromWorker({ info, attention, mask, nextTokens, summary: summarise(attention, null, mask, [1, layers, H, n]) });
  run.generated = { P, step: t, outputs };
  return run;
}

/**
 * Connects generating to a store (the page's): `start(maxNew, chat)` writes after the sentence
 * with the loaded model, one step at a time in the worker, each step's text and attention put
 * in the store as it comes (`generation`: {id, running, result, stopped, error}; `run`: the
 * attention views' run at the last step, or at the focused `step` once done); `stop()` ends it
 * early. A generation goes when the sentence or the model changes, or another run replaces its
 * views (a head knocked out, another mask); a link's `gen=N` writes N tokens once the model and
 * the sentence's run are in. Returns {start, stop}.
 */
export function connectGeneration(store, eng) {
  let current = null, ids = 0, autoFor = '';
  const layersOf = (s) => s.modelInfo.layers;

  function start(maxNew, chat, { keepStep = false } = {}) {
    const s = store.get();
    current?.handle.stop();
    const id = ++ids;
    store.update({ generation: { id, running: true, result: null, stopped: false, error: null }, gen: maxNew, chat, ...(keepStep ? {} : { step: null }) });
    const handle = eng.generate(s.modelKey, { prompt: s.sentences[0] ?? '', options: { maxNewTokens: maxNew, topK: 5, chat } }, ({ result }) => {
      if (current?.id !== id) return;
      store.update({ generation: { ...store.get().generation, result }, run: generationRun(result, null, layersOf(store.get())), translation: null });
    });
    current = { id, handle };
    handle.done.then(({ stopped }) => {
      if (current?.id !== id) return;
      current = null;
      const now = store.get(), g = now.generation;
      store.update({ generation: { ...g, running: false, stopped }, ...(g.result ? { run: generationRun(g.result, now.step, layersOf(now)) } : {}) });
    }, (err) => {
      if (current?.id !== id) return;
      current = null;
      store.update({ generation: { ...store.get().generation, running: false, error: `Could not generate: ${String(err.message || err)}` } });
    });
  }

  store.subscribe((s, changed) => {
    const stale = changed.has('sentences') || changed.has('modelVersion') || (changed.has('run') && s.run && !s.run.generated);
    if (s.generation && stale) {
      current?.handle.stop();
      current = null;
      store.update({ generation: null, gen: 0, step: null });
      return;
    }
    const g = s.generation;
    if (changed.has('step') && g?.result && !g.running) store.update({ run: generationRun(g.result, s.step, layersOf(s)) });
    // a link's gen=N: once, when the model's first run of the sentence is in
    const key = `${s.modelVersion}`;
    if (s.gen && !g && autoFor !== key && canGenerate(s.modelInfo) && s.run && !s.run.generated && !s.busy) {
      autoFor = key;
      start(s.gen, s.chat && Boolean(s.modelInfo.chat_template), { keepStep: true });
    }
  });

  return { start, stop: () => current?.handle.stop() };
}
