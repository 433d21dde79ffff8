// Attention computed elsewhere (docs/given.md): the `attnscope.given/1` records — JSON, or a
// safetensors file with the JSON in its metadata, as python/attnscope writes them — and the
// CLI's own `attnscope attention` and `attnscope generate` output, read and checked, then made
// into the run the views draw (the result contract of web/result.js) with a model's description
// (`modelInfo`) built from the records: its kind, layers, query and key/value heads.

import { fromWorker, squareMask, withRecords } from './result.js';
import { summarise } from './summary.js';

export const FORMAT = 'attnscope.given/1';

const KINDS = ['encoder', 'decoder', 'encoder-decoder'];

/** The largest probability taken: 1, and bfloat16's rounding above it. */
const MAX_P = 1.01;

/** What summary.js `summarise` gives. */
const SUMMARY_FIELDS = ['R', 'thumbs', 'thumbMask', 'probMax', 'probArg', 'scoreMax'];

/** A tokenizer's special token, as it writes them: [CLS], <s>, </s>, <|endoftext|>, <pad>… */
const SPECIAL = /^(\[[A-Za-z_]+\]|<\/?[A-Za-z_]+>|<\|[^|]+\|>)$/;

/** The model's name where the records name none. */
export const UNNAMED = 'given attention';

/** An error about given attention: names the source and the field at fault. */
function bad(source, msg) {
  return new Error(`${source}: ${msg}`);
}

const isInt = (n) => Number.isInteger(n) && n >= 0;

/**
 * Given attention from `input` (an ArrayBuffer or a byte view: a safetensors file or JSON text;
 * a string of JSON; or the parsed object), checked: `{meta, records}`, each record the
 * metadata's (stack, kind, layer, query_heads, kv_heads, n_q, n_k) with its `values`, a
 * Float32Array `(H, n_q, n_k)`, named as the engine's records are (`name` "attention",
 * `shape`: result.js withRecords). `source` names the input in errors (a file name or URL).
 */
export function readGiven(input, source = 'the given attention') {
  if (input instanceof ArrayBuffer || ArrayBuffer.isView(input)) {
    const bytes = input instanceof ArrayBuffer ? new Uint8Array(input) : new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
    // a safetensors file: its header's length (a little-endian u64 the file holds), then the
    // header's JSON; else JSON text (after a byte-order mark and white space)
    if (bytes.length >= 9 && bytes[8] === 0x7b) {
      const n = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
      if (n <= BigInt(bytes.length - 8)) return fromSafetensors(bytes, Number(n), source);
    }
    let text = new TextDecoder().decode(bytes);
    if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    if (text.trimStart().startsWith('{')) return readGiven(text, source);
    const start = [...bytes.subarray(0, 8)].map((b) => b.toString(16).padStart(2, '0')).join(' ');
    throw bad(source, `${bytes.length} bytes, neither JSON nor a safetensors file (it starts ${start || 'empty'})`);
  }
  if (typeof input === 'string') {
    let parsed;
    try { parsed = JSON.parse(input); } catch (e) { throw bad(source, `not JSON (${e.message})`); }
    return readGiven(parsed, source);
  }
  if (!isObject(input)) throw bad(source, 'expected the records of docs/given.md (an object, JSON text or a safetensors file)');
  if (input.format === undefined && Array.isArray(input.results)) return fromCliAttention(input, source);
  if (input.format === undefined && Array.isArray(input.output_ids) && Array.isArray(input.attention)) return fromCliGenerate(input, source);
  return checked(input, null, source);
}

const isObject = (x) => x !== null && typeof x === 'object' && !Array.isArray(x);

/** The binary form: tensor `records.{i}` (F32, `[H, n_q, n_k]`; or BF16, or U16: p as
 *  round(p · 65535)) a record, the metadata as JSON under `__metadata__.attnscope`. */
function fromSafetensors(bytes, n, source) {
  let header;
  try { header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n))); } catch (e) { throw bad(source, `the safetensors header is not JSON (${e.message})`); }
  const text = header?.__metadata__?.attnscope;
  if (typeof text !== 'string') throw bad(source, 'a safetensors file without attnscope\'s records (__metadata__.attnscope: docs/given.md)');
  let meta;
  try { meta = JSON.parse(text); } catch (e) { throw bad(source, `__metadata__.attnscope is not JSON (${e.message})`); }
  if (!isObject(meta)) throw bad(source, '__metadata__.attnscope: expected an object, the records\' metadata');
  const body = bytes.subarray(8 + n);
  const tensor = (i) => {
    const key = `records.${i}`, t = header[key];
    if (!t) throw bad(source, `records[${i}] names buffer ${i}, but the file has no tensor ${key}`);
    if (!['F32', 'BF16', 'U16'].includes(t.dtype)) throw bad(source, `${key} is ${t.dtype}; given attention is F32 (or BF16, or U16: p · 65535)`);
    const [a, b] = t.data_offsets ?? [];
    if (!isInt(a) || !isInt(b) || a > b || b > body.length) throw bad(source, `${key}: data_offsets ${JSON.stringify(t.data_offsets)} outside the ${body.length} bytes of data`);
    const size = t.dtype === 'F32' ? 4 : 2;
    if ((b - a) % size) throw bad(source, `${key}: ${b - a} bytes is not a whole number of ${t.dtype}`);
    const at = body.byteOffset + a;
    if (t.dtype === 'BF16') return { values: fromBF16(body.subarray(a, b)), shape: t.shape, key, precision: 'bfloat16' };
    if (t.dtype === 'U16') return { values: fromU16(body.subarray(a, b)), shape: t.shape, key, precision: 'uint16' };
    // aligned in the file (its data starts 8-byte aligned): a view; else a copy
    const values = at % 4 === 0 ? new Float32Array(body.buffer, at, (b - a) / 4) : new Float32Array(body.slice(a, b).buffer);
    return { values, shape: t.shape, key, precision: 'float32' };
  };
  return checked(meta, tensor, source);
}

/** Little-endian BF16 bytes (float32's upper halves) as a Float32Array, each value exactly. */
function fromBF16(bytes) {
  const n = bytes.length >> 1, out = new Float32Array(n), bits = new Uint32Array(out.buffer);
  for (let i = 0, j = 0; i < n; i++, j += 2) bits[i] = (bytes[j] | (bytes[j + 1] << 8)) << 16;
  return out;
}

/** What a caption adds to "given" for a precision: bfloat16's 3 significant digits are said;
 *  uint16's rounding (within 7.6e-6) is below what any view shows. */
export const precisionNote = (precision) => (precision === 'bfloat16' ? ' (bfloat16)' : '');

/** Little-endian U16 bytes (p held as round(p · 65535)) as a Float32Array: each q / 65535. */
function fromU16(bytes) {
  const n = bytes.length >> 1, out = new Float32Array(n);
  for (let i = 0, j = 0; i < n; i++, j += 2) out[i] = (bytes[j] | (bytes[j + 1] << 8)) / 65535;
  return out;
}

/**
 * The metadata checked against docs/given.md, with each record's values (inline `values`, or
 * the tensor `tensor(buffer)` of the binary form).
 */
function checked(meta, tensor, source) {
  if (meta.format !== FORMAT) throw bad(source, `format ${JSON.stringify(meta.format)}: this page reads ${FORMAT}`);
  const kind = meta.architecture?.kind;
  if (!KINDS.includes(kind)) throw bad(source, `architecture.kind ${JSON.stringify(kind)}: one of ${KINDS.join(', ')}`);
  if (!['causal', 'none'].includes(meta.mask ?? 'none')) throw bad(source, `mask ${JSON.stringify(meta.mask)}: "causal" or "none"`);
  if (!Array.isArray(meta.records) || !meta.records.length) throw bad(source, 'records: none, nothing to show');
  const strings = (field) => {
    const t = meta[field];
    if (!Array.isArray(t) || !t.every((x) => typeof x === 'string')) throw bad(source, `${field}: expected a list of strings, one a position`);
    return t;
  };
  const has = (stack, k) => meta.records.some((r) => r?.stack === stack && (!k || r.kind === k));
  const tokens = kind === 'encoder-decoder' ? null : strings('tokens');
  const sb = meta.sentence_b_start;
  if (sb !== undefined && sb !== null && (!isInt(sb) || (tokens && sb >= tokens.length))) {
    throw bad(source, `sentence_b_start ${JSON.stringify(sb)}: the position where a sentence pair's second sentence starts, one of the ${tokens?.length ?? 'encoder\'s'} tokens`);
  }
  // an encoder–decoder's lists: those of the stacks its records hold (a cross-attention's keys are the encoder's)
  const encoderTokens = kind === 'encoder-decoder' && (has('encoder') || has('decoder', 'cross')) ? strings('encoder_tokens') : null;
  const decoderTokens = kind === 'encoder-decoder' && has('decoder') ? strings('decoder_tokens') : null;
  const order = { 'encoder self': 0, 'decoder self': 1, 'decoder cross': 2 };
  const buffers = new Set();
  let precision = 'float32'; // else the binary form's coarsest: bfloat16's, uint16's (float32 here, each exactly what the file held)
  let last = null;
  const records = meta.records.map((r, i) => {
    const at = `records[${i}]`;
    if (!isObject(r)) throw bad(source, `${at}: expected an object (stack, kind, layer, query_heads, kv_heads, n_q, n_k)`);
    if (!['encoder', 'decoder'].includes(r.stack)) throw bad(source, `${at}.stack ${JSON.stringify(r.stack)}: "encoder" or "decoder"`);
    if (!['self', 'cross'].includes(r.kind)) throw bad(source, `${at}.kind ${JSON.stringify(r.kind)}: "self" or "cross"`);
    if (kind !== 'encoder-decoder' && (r.stack !== kind || r.kind !== 'self')) throw bad(source, `${at}: ${r.stack} ${r.kind}-attention in the records of ${kind === 'encoder' ? 'an' : 'a'} ${kind}: its own self-attention only`);
    if (r.kind === 'cross' && r.stack !== 'decoder') throw bad(source, `${at}: a cross-attention is the decoder's`);
    const place = order[`${r.stack} ${r.kind}`];
    if (last !== null && (place < last.place || (place === last.place && r.layer <= last.layer))) {
      throw bad(source, `${at} (${r.stack} ${r.kind}, layer ${r.layer}) after ${last.what}: records go by stack (the encoder's, the decoder's, its cross-attention), each by layer`);
    }
    for (const f of ['layer', 'query_heads', 'kv_heads', 'n_q', 'n_k']) if (!isInt(r[f])) throw bad(source, `${at}.${f} ${JSON.stringify(r[f])}: a whole number`);
    last = { place, layer: r.layer, what: `${at} (${r.stack} ${r.kind}, layer ${r.layer})` };
    const { query_heads: H, kv_heads: K, n_q, n_k } = r;
    if (!H || !K || !n_q || !n_k) throw bad(source, `${at}: ${H} heads over ${K} key/value heads, ${n_q} × ${n_k}: none may be 0`);
    if (H % K) throw bad(source, `${at}: ${H} query heads do not split into groups over ${K} key/value heads`);
    if (r.kind === 'self' && n_q !== n_k) throw bad(source, `${at}: self-attention over ${n_q} queries and ${n_k} keys; it is square`);
    // the positions before the values: a record's sizes are checked against the tokens before
    // anything is made of that size
    const positions = r.stack === 'encoder' ? (tokens ?? encoderTokens) : (tokens ?? decoderTokens);
    if (positions.length !== n_q) throw bad(source, `${at}: ${n_q} queries, but ${tokens ? 'tokens' : `${r.stack}_tokens`} has ${positions.length}`);
    if (r.kind === 'cross' && n_k !== encoderTokens.length) throw bad(source, `${at}: ${n_k} keys, but encoder_tokens has ${encoderTokens.length}`);
    const want = H * n_q * n_k;
    let values;
    if (tensor) {
      if (!isInt(r.buffer)) throw bad(source, `${at}.buffer ${JSON.stringify(r.buffer)}: the binary form's records name their tensor`);
      if (buffers.has(r.buffer)) throw bad(source, `${at}.buffer ${r.buffer}: another record's`);
      buffers.add(r.buffer);
      const t = tensor(r.buffer);
      if (JSON.stringify(t.shape) !== JSON.stringify([H, n_q, n_k])) throw bad(source, `${t.key}: shape ${JSON.stringify(t.shape)}, but ${at} says [${H}, ${n_q}, ${n_k}]`);
      if (t.values.length !== want) throw bad(source, `${t.key}: ${t.values.length} values, expected ${H} × ${n_q} × ${n_k} = ${want}`);
      values = t.values;
      if (t.precision === 'bfloat16' || (t.precision === 'uint16' && precision === 'float32')) precision = t.precision;
    } else {
      const v = r.values;
      const rows = Array.isArray(v) && v.length === H && v.every((head) => Array.isArray(head) && head.length === n_q && head.every((row) => Array.isArray(row) && row.length === n_k));
      if (!rows) throw bad(source, `${at}.values: expected (${H}, ${n_q}, ${n_k}) nested lists, as query_heads, n_q and n_k say`);
      values = new Float32Array(want);
      for (let h = 0; h < H; h++) {
        for (let q = 0; q < n_q; q++) {
          const row = v[h][q];
          for (let k = 0; k < n_k; k++) {
            if (typeof row[k] !== 'number') throw bad(source, `${at}.values: ${JSON.stringify(row[k])} at head ${h}, query ${q}, key ${k}: a number`);
            values[(h * n_q + q) * n_k + k] = row[k];
          }
        }
      }
    }
    const causal = meta.mask === 'causal' && r.kind === 'self' && r.stack === 'decoder';
    for (let h = 0, j = 0; h < H; h++) {
      for (let q = 0; q < n_q; q++) {
        for (let k = 0; k < n_k; k++, j++) {
          const x = values[j];
          if (!(x >= 0 && x <= MAX_P) || (causal && k > q && x !== 0)) { // NaN fails both
            throw bad(source, `${at}: ${x} at head ${h}, query ${q}, key ${k}; ${causal && x >= 0 && x <= MAX_P ? 'the mask is causal: a query attends to no later key' : 'attention probabilities are in [0, 1]'}`);
          }
        }
      }
    }
    return { stack: r.stack, kind: r.kind, layer: r.layer, name: 'attention', shape: [H, n_q, n_k], query_heads: H, kv_heads: K, n_q, n_k, values };
  });
  return { meta, records, kind, tokens, encoderTokens, decoderTokens, precision };
}

/** `attnscope attention`'s JSON: its first result's tokens and `attention [L][H][T][T]`, cut to
 *  its real tokens (`length`: a padded batch's others are padding), under its mask. */
function fromCliAttention(out, source) {
  const r = out.results[0];
  if (!isObject(r) || !Array.isArray(r.attention) || !Array.isArray(r.tokens)) throw bad(source, 'results[0]: no tokens and attention [L][H][T][T], as `attnscope attention` prints them');
  const n = isInt(r.length) && r.length > 0 && r.length <= r.tokens.length ? r.length : r.tokens.length;
  const cut = n === r.tokens.length ? r.attention : r.attention.map((heads) => heads?.map?.((rows) => rows?.slice?.(0, n).map((row) => row?.slice?.(0, n))));
  return cliRecords({ model: out.model, tokens: r.tokens.slice(0, n), texts: r.token_texts?.slice?.(0, n), attention: cut, causal: out.mask === 'causal', sentenceB: r.sentence_b_start }, source);
}

/** `attnscope generate`'s JSON: every position fed, `attention [L][H][N][N]`, causal. */
function fromCliGenerate(out, source) {
  return cliRecords({ model: out.model, tokens: out.tokens, texts: out.texts, attention: out.attention, causal: true }, source);
}

function cliRecords({ model, tokens, texts, attention, causal, sentenceB }, source) {
  const stack = causal ? 'decoder' : 'encoder';
  const heads = (x) => (Array.isArray(x) ? x.length : 0), rows = (x) => (Array.isArray(x?.[0]) ? x[0].length : 0);
  const meta = {
    format: FORMAT, architecture: { kind: causal ? 'decoder' : 'encoder' }, mask: causal ? 'causal' : 'none', model, tokens,
    ...(sentenceB === undefined ? {} : { sentence_b_start: sentenceB }), // a pair's (the CLI's --pair)
    records: attention.map((a, layer) => ({ stack, kind: 'self', layer, query_heads: heads(a), kv_heads: heads(a), n_q: rows(a), n_k: rows(a), values: a })),
  };
  const g = checked(meta, null, source);
  if (Array.isArray(texts) && texts.length === tokens.length && texts.every((t) => typeof t === 'string')) g.texts = texts;
  return g;
}

/**
 * What the views draw for given attention (`g` from {@link readGiven}): `{modelInfo, run,
 * translation, focus: {layer, head}}`, with `modelInfo` describing what the records say (kind,
 * layers, query and key/value heads) and no more: the views that need a model (the steps inside a
 * layer, knocking heads out, the next tokens) have none to ask. An encoder's or a decoder's
 * records make a `run` (result.js's contract); an encoder–decoder's a `translation` (what the
 * translation view draws, views/translation.js), or a `run` where the records hold one stack's
 * self-attention alone.
 */
export function fromGiven(g, source = 'the given attention') {
  if (g.kind !== 'encoder-decoder') return { ...givenRun(g, source), translation: null };
  const of = (stack, kind) => g.records.filter((r) => r.stack === stack && r.kind === kind);
  const enc = of('encoder', 'self'), dec = of('decoder', 'self'), cross = of('decoder', 'cross');
  // one stack's self-attention alone: that stack's run, as an encoder's or a decoder's
  if (!cross.length && !(enc.length && dec.length)) {
    const stack = enc.length ? 'encoder' : 'decoder';
    const meta = { ...g.meta, mask: stack === 'decoder' ? g.meta.mask : 'none' };
    const one = { ...g, meta, kind: stack, records: stack === 'encoder' ? enc : dec, tokens: stack === 'encoder' ? g.encoderTokens : g.decoderTokens };
    return { ...givenRun(one, source), translation: null };
  }
  return givenTranslation(g, { enc, dec, cross }, source);
}

/** An encoder–decoder's given attention as the translation view's `translation`: one item, its
 *  source the encoder's tokens, its steps the decoder's (what each reads: what a step writes is the
 *  model's, which given attention does not carry), its attentions those the records hold. */
function givenTranslation(g, { enc, dec, cross }, source) {
  const alike = (records, what) => records.forEach((r, i) => {
    const [a] = records;
    if (r.query_heads !== a.query_heads || r.kv_heads !== a.kv_heads || r.n_q !== a.n_q || r.n_k !== a.n_k) {
      throw bad(source, `the ${what}'s layer ${r.layer}: ${r.query_heads} heads over ${r.kv_heads}, ${r.n_q} × ${r.n_k}; its layer ${a.layer} has ${a.query_heads} over ${a.kv_heads}, ${a.n_q} × ${a.n_k}: a stack's layers are alike`);
    }
  });
  alike(enc, 'encoder self-attention');
  alike(dec, 'decoder self-attention');
  alike(cross, 'cross-attention');
  const numbers = (records) => records.map((r) => r.layer).join(', ');
  if (dec.length && cross.length && (numbers(dec) !== numbers(cross) || dec[0].query_heads !== cross[0].query_heads)) {
    throw bad(source, `decoder self-attention of layers ${numbers(dec)} × ${dec[0].query_heads} heads beside cross-attention of layers ${numbers(cross)} × ${cross[0].query_heads}: both are the decoder's layers`);
  }
  const src = g.encoderTokens, steps = g.decoderTokens;
  const model = modelName(g.meta);
  // its attentions read from the records as the engine's translation's are (result.js withRecords)
  const item = withRecords({
    given: true, source: textOf(src), source_tokens: src, decoder_tokens: steps, causal: g.meta.mask === 'causal',
    layer_numbers: { encoder: ownNumbers(enc), decoder: ownNumbers(dec.length ? dec : cross) },
  }, [...enc, ...dec, ...cross]);
  const translation = {
    id: `given:${++givenTranslations}`, given: true, model, model_type: 'given', backend: 'given', fallback: null,
    elapsed_ms: 0, precision: g.precision ?? 'float32', results: [item],
  };
  const decoder = dec[0] ?? cross[0];
  const modelInfo = {
    name: model, given: true, layers: enc.length, heads: enc[0]?.query_heads ?? 0, hidden: null, head_dim: null, max_length: src.length,
    decoder: { layers: dec.length || cross.length, heads: decoder.query_heads },
    architecture: {
      kind: 'encoder-decoder', positions: null, norm: null, norm_order: null, norm_eps: null, feed_forward: null,
      heads: { query: decoder.query_heads, key_value: decoder.kv_heads }, head_dim: null, biases: null, lm_head: 'none', token_types: false, layers: [],
    },
  };
  return { modelInfo, run: null, translation, focus: focusOf(g.meta, dec.length ? dec : cross) };
}

let givenTranslations = 0;

/** The model's numbers of a stack's records where they are not 0, 1, 2, … (a file of some layers
 *  only: include_layers), else null. */
const ownNumbers = (records) => (records.every((r, l) => r.layer === l) ? null : records.map((r) => r.layer));

/** The model's name the records give, or UNNAMED. */
const modelName = (meta) => (typeof meta.model === 'string' && meta.model ? meta.model : UNNAMED);

/** Where the file's view opens (`meta.view`): its layer among a stack's `records` (by the model's
 *  number) and its first head, where they exist. */
function focusOf(meta, records) {
  const view = meta.view ?? {}, H = records[0].query_heads;
  const at = records.findIndex((r) => r.layer === view.layer);
  return { layer: at >= 0 ? at : 0, head: Array.isArray(view.heads) && isInt(view.heads[0]) && view.heads[0] < H ? view.heads[0] : 0 };
}

/** The text tokens spell: byte-level BPE's and SentencePiece's pieces carry their spaces; WordPiece's do not. */
const textOf = (tokens) => tokens.join(tokens.some((t) => /^\s/.test(t)) ? '' : ' ');

/** An encoder's or a decoder's given attention as a run (result.js's contract). */
function givenRun(g, source) {
  const records = g.records; // an encoder's or a decoder's: self-attention only (checked)
  const { query_heads: H, kv_heads: K, n_q: T } = records[0];
  // a file of some layers only (python/attnscope's include_layers; checked() keeps them in order):
  // the views show their own numbers
  records.forEach((r, i) => {
    if (r.query_heads !== H || r.kv_heads !== K || r.n_q !== T) throw bad(source, `records[${i}]: ${r.query_heads} heads over ${r.kv_heads}, ${r.n_q} positions; records[0] has ${H} over ${K}, ${T}: a stack's layers are alike`);
  });
  const L = records.length, n = T * T;
  const attention = new Float32Array(L * H * n);
  records.forEach((r, l) => attention.set(r.values, l * H * n));
  const causal = g.meta.mask === 'causal';
  const mask = squareMask(T, causal);
  const shape = [1, L, H, T, T];
  const tokens = g.tokens;
  const model = modelName(g.meta);
  const item = {
    text: textOf(tokens), tokens, token_ids: tokens.map(() => null), token_texts: g.texts ?? tokens,
    offsets: tokens.map(() => [0, 0]), word_ids: tokens.map((_, i) => i), length: T, truncated: false,
    // a sentence pair's second sentence (bertviz's sentence_b_start): the head and line views' parts
    ...(isInt(g.meta.sentence_b_start) ? { sentence_b_start: g.meta.sentence_b_start } : {}),
  };
  const info = {
    model, model_type: 'given', backend: 'given', fallback: null, mask: causal ? 'causal' : 'none', mask_ablation: false,
    elapsed_ms: 0, reused: 0, attention: 'probabilities', shape, items: [item], head_mask: [], scale: 'sqrt_dk', head_metrics: [],
  };
  // the heads' summary (their thumbnails, their largest values) made when a view first reads it:
  // the model view does, the head view need not (a long input's first view comes sooner)
  let made = null;
  const summary = Object.defineProperties({}, Object.fromEntries(SUMMARY_FIELDS.map((k) => [k, {
    enumerable: true, get: () => (made ??= summarise((b, l, h) => records[l].values.subarray(h * n, (h + 1) * n), null, mask, shape))[k],
  }])));
  // the sentence markers the heads' summaries name ([CLS] and [SEP] for BERT): the special-looking
  // tokens at the first and the last position, as a tokenizer adds them
  const specials = [...new Set([tokens[0], tokens[T - 1]].filter((t) => SPECIAL.test(t)))];
  const at = (t) => (t === undefined ? [] : tokens.flatMap((x, i) => (x === t ? [i] : [])));
  const layerNumbers = ownNumbers(records);
  /** The run, with the heads' summaries and rollout once the engine has computed them (`analyses`
   *  from web/engine.js `analyseGiven`; rollout only of every layer). */
  const make = (analyses = null) => {
    const run = fromWorker({
      info: analyses ? { ...info, head_metrics: analyses.metrics } : info, records: [records], mask, summary,
      headMetrics: analyses?.headMetrics, rollout: layerNumbers ? null : analyses?.rollout,
    });
    run.given = true;
    // the model's numbers of the layers given, where they are not 0, 1, 2, … (result.js layerNumber)
    run.layerNumbers = layerNumbers;
    run.precision = g.precision ?? 'float32';
    // what the engine needs for them, and the run they make (scope.js `givenAnalyses`)
    run.analysis = analyses ? null : {
      ask: { probs: attention, layers: L, heads: H, tokens: T, cls: at(specials[0]), sep: at(specials[specials.length - 1]) },
      with: make,
    };
    return run;
  };
  const run = make();
  const kind = g.kind;
  const modelInfo = {
    name: model, given: true, layers: L, heads: H, hidden: null, head_dim: null, max_length: T, stack: kind, specials,
    architecture: {
      kind, positions: null, norm: null, norm_order: null, norm_eps: null, feed_forward: null,
      heads: { query: H, key_value: K }, head_dim: null, biases: null, lm_head: 'none', token_types: false, layers: [],
    },
  };
  return { modelInfo, run, focus: focusOf(g.meta, records) };
}
