// One store for the page or an <attn-scope> element: the intent (what the URL or the attributes
// say), the model and its source, the latest result, hover and selection. One `update(patch)`;
// subscribers learn which keys changed and decide what to do (run, write the hash, render).

import { ATTENTION_KINDS } from './result.js';

/**
 * The store. `update(patch)` applies at once (`get()` sees it); its subscribers hear of it in
 * the order the updates were made: an update a subscriber makes while they hear of an earlier
 * one waits until every subscriber has heard of that one. So no subscriber is entered again
 * while it runs, and none hears of a later update before an earlier one. Each is called with the
 * newest state and the keys that its update changed.
 */
export function createStore(initial) {
  let state = { ...initial };
  const subs = new Set();
  const waiting = []; // the changed keys of updates not yet told, oldest first
  let telling = false;
  return {
    get: () => state,
    update(patch) {
      const changed = new Set();
      for (const [k, v] of Object.entries(patch)) if (state[k] !== v) changed.add(k);
      if (!changed.size) return;
      state = { ...state, ...patch };
      waiting.push(changed);
      if (telling) return;
      telling = true;
      try {
        while (waiting.length) {
          const keys = waiting.shift();
          for (const f of subs) f(state, keys);
        }
      } finally {
        telling = false;
        waiting.length = 0; // a subscriber threw: the updates after it are applied, their telling dropped
      }
    },
    subscribe(f) { subs.add(f); return () => subs.delete(f); },
  };
}

/** The intent: what a link or an element's attributes fully describe. */
export const INTENT_DEFAULTS = {
  sentences: ['The animal didn\'t cross the street because it was too tired.'],
  pair: '', mask: 'padding', batch: false, layer: 3, head: 1, item: 0, // L3H1: "it" → "animal"
  step: null, // a translation's (or a generation's) focused step (0-based; null: the last)
  // a decoder-only model: how many tokens it writes after the sentence (0: none yet; a link's
  // `gen=N` writes them on load), and whether the sentence goes in as a chat's user message
  gen: 0, chat: false,
  attn: 'cross', // which of a translation's attentions its views show (ATTENTIONS)
  // how the CPU engine multiplies by 4-bit matrices: 'exact' (f32) or 'fast' (8-bit activations)
  numerics: 'exact',
  engine: 'auto', view: 'both', scale: 'absolute', model: '', presenter: false, embed: '',
  // a checkpoint on the Hugging Face Hub by its id (`hf`), from the Hub or a mirror (`hub`)
  hf: '', hub: '',
  // a GGUF file of the Hub model (`hf`) rather than its folder's safetensors: its path in the repository
  file: '',
  // attention computed elsewhere (web/given.js), shown in place of a model's: its file's URL
  data: '',
  // reading the heads: colour the grid by a metric, the heads table and the rollout panel open,
  // knocked-out heads ("layer:head", sorted), a second sentence to compare with
  metric: '', table: false, rollout: false, off: [], compare: false,
  writes: false, // the panel "what writes the next token" open (a decoder with an LM head)
  flow: false, // the panel of information-flow routes open (the same models)
  exercise: '', // a "predict, then check" exercise under way (web/exercises.js), or none
  guess: 0.5, // its answer on the slider, where it asks for a fraction
  checked: null, // the answer checked (its verdict shown), or null
  // inside the encoder: the open panels (INSIDE ids), the √d_k ablation and (a model with
  // rotary positions) the ablation that leaves the rotation out
  inside: [], noScale: false, noRope: false, noQkNorm: false,
  noSink: false, // the sink switch: the attention views with the first key hidden, rows renormalised (web/sink.js)
  byValue: false, // the value switch: the attention views weighed by each key's ‖W_O^h v_j‖, rows renormalised (web/values.js)
  compareText: 'The trophy didn\'t fit in the suitcase because it was too small.',
  // the selected query tokens (sorted indices; dropped when the tokens change) and whether the
  // views merge WordPiece pieces into words (web/words.js)
  sel: [], words: false,
  // a sentence pair's part the head and line views show (bertviz's filter): PARTS
  part: 'all',
};
/** The head metrics (src/analysis/heads.rs), with what the page calls them. */
export const METRICS = {
  entropy: 'entropy (nats)', to_cls: 'attention to [CLS]', to_sep: 'attention to [SEP]', to_self: 'attention to itself',
  to_prev: 'attention to the previous token', to_next: 'attention to the next token', distance: 'mean distance (tokens)',
  to_first: 'attention to the first token (the sink)', sink: 'the most-attended key\'s share',
};
/** The short names of the head metrics, for table headers. */
const SHORT = { entropy: 'entropy', to_cls: '→[CLS]', to_sep: '→[SEP]', to_self: '→self', to_prev: '→prev', to_next: '→next', distance: 'distance', to_first: '→first', sink: 'top key' };
/**
 * The heads' roles (src/analysis/roles.rs), scored on a text that repeats a sequence of tokens,
 * as the page names them: `role:NAME` for the run's role NAME (a role's `sink` is not the
 * metric `sink`).
 */
export const ROLES = {
  'role:previous_token': 'previous-token role',
  'role:sink': 'sink role',
  'role:induction': 'induction role',
  'role:duplicate_token': 'duplicate-token role',
};
const ROLE_SHORT = { 'role:previous_token': 'prev. role', 'role:sink': 'sink role', 'role:induction': 'induction', 'role:duplicate_token': 'duplicate' };
/** The words "Find the heads" draws a repeated text from: common and short, each one token of
 *  all-MiniLM's and of SmolLM2's, with a space before it and without (the text's first word). */
export const ROLE_WORDS = ['river', 'green', 'table', 'music', 'horse', 'paper', 'cloud', 'stone', 'happy', 'window', 'yellow', 'market',
  'summer', 'doctor', 'apple', 'bridge', 'chair', 'dog', 'fish', 'glass', 'king', 'moon', 'night', 'ocean', 'rain', 'road', 'salt',
  'ship', 'snow', 'tree', 'wall', 'water', 'winter', 'wood'];
/** A text of `n` words drawn at random (`random`: [0, 1)), twice: the text the heads' roles read. */
export function repeatedText(n = 12, random = Math.random) {
  const pool = [...ROLE_WORDS], words = [];
  while (words.length < n && pool.length) words.push(pool.splice(Math.floor(random() * pool.length), 1)[0]);
  return `${words.join(' ')} ${words.join(' ')}`;
}

/**
 * What the page calls head metric `name` for a model (`info`: its ModelInfo): `to_cls` and
 * `to_sep` are named by the special tokens its tokenizer adds (`<s>`, `</s>` for RoBERTa), and
 * say so where it adds none (GPT-2: always 0). `short` for a table header.
 */
export function metricLabel(name, info, short = false) {
  if (ROLES[name]) return short ? ROLE_SHORT[name] : ROLES[name];
  if (name !== 'to_cls' && name !== 'to_sep') return short ? SHORT[name] : METRICS[name];
  const specials = info?.specials ?? ['[CLS]', '[SEP]'];
  const mark = name === 'to_cls' ? specials[0] : specials[specials.length - 1];
  if (!mark) return short ? '→(no special)' : `attention to ${name === 'to_cls' ? 'a first' : 'a last'} special token (this tokenizer adds none: 0)`;
  return short ? `→${mark}` : `attention to ${mark}`;
}

/**
 * The head metrics that can say something of a model's text under `mask` (a run's `mask_kind`):
 * not the attention to a first or last special token its tokenizer does not add (GPT-2 adds none,
 * a Llama or Gemma its BOS alone), nor to the next token under the causal mask (always 0).
 */
export function metricsFor(info, mask) {
  const specials = info?.specials ?? ['[CLS]', '[SEP]'];
  return Object.keys(METRICS).filter((m) => !(m === 'to_cls' && specials.length < 1) && !(m === 'to_sep' && specials.length < 2) && !(m === 'to_next' && mask === 'causal'));
}

/** The Hub the page loads `hf=` models from, unless `hub=` names a mirror. */
export const DEFAULT_HUB = 'https://huggingface.co';

/** Whether `id` is a Hub model id: `name` or `owner/name`, of letters, digits, `-`, `_` and `.`. */
export function isHubId(id) {
  return /^[A-Za-z0-9][A-Za-z0-9._-]*(\/[A-Za-z0-9][A-Za-z0-9._-]*)?$/.test(id) && !id.includes('..') && id.length <= 96;
}

/** The first sentence of compare mode, when the sentence box holds no minimal pair of its own. */
export const COMPARE_FIRST = 'The trophy didn\'t fit in the suitcase because it was too big.';
export const MASKS = ['padding', 'causal', 'none'];
export const ENGINES = ['auto', 'cpu', 'gpu'];
export const HEAD_VIEWS = ['both', 'heatmap', 'lines'];
/** A sentence pair's parts (bertviz's filter): every token, or queries of one sentence over the
 *  keys of one (a: the first, b: the second, from `sentence_b_start`). */
export const PARTS = { all: 'all', aa: 'sentence A → sentence A', bb: 'sentence B → sentence B', ab: 'sentence A → sentence B', ba: 'sentence B → sentence A' };
/** A sentence pair's part (result.js partOf) in words, the rows and columns a view shows of it
 *  (all of them unless it says): "sentence A → sentence B: queries 0–9 × keys 10–15". */
export function partWords(part, { q0 = part.q0, nq = part.q1 - part.q0, k0 = part.k0, nk = part.k1 - part.k0 } = {}) {
  return `${PARTS[part.name]}: queries ${q0}–${q0 + nq - 1} × keys ${k0}–${k0 + nk - 1}`;
}
export const EMBEDS = ['model', 'head', 'lines', 'steps'];
/** An encoder–decoder's three attentions: the cross-attention, the decoder's and the encoder's self-attention. */
export const ATTENTIONS = Object.keys(ATTENTION_KINDS);
export const MAX_BATCH = 4;

/** The "inside the encoder" panels, in the order a layer computes them, and the cross-attention panel after them (a section of its own). */
export const INSIDE = ['embeddings', 'qkv', 'context', 'scale', 'residual', 'ffn', 'stack', 'cross', 'rope', 'cache', 'window', 'qknorm'];
/** Inside a translation model's decoder: its panels (web/views/decoder/), open or not. */
export const DECODER_INSIDE = ['dec-embeddings', 'dec-cross', 'dec-layer'];
