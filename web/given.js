// Attention computed elsewhere (docs/given.md): the `attnscope.given/1` records — JSON, or a
// safetensors file with the JSON in its metadata, as python/attnscope writes them — and the
// CLI's own `attnscope attention` and `attnscope generate` output, read and checked, then made
// into the run the views draw (the result contract of web/result.js) with a model's description
// (`modelInfo`) built from the records: its kind, layers, query and key/value heads.

import { fromWorker } from './result.js';
import { summarise } from './summary.js';

export const FORMAT = 'attnscope.given/1';

const KINDS = ['encoder', 'decoder', 'encoder-decoder'];

/** The largest probability taken: 1, and bfloat16's rounding above it. */
const MAX_P = 1.01;

/** An error about given attention: names the source and the field at fault. */
function bad(source, msg) {
  return new Error(`${source}: ${msg}`);
}

const isInt = (n) => Number.isInteger(n) && n >= 0;

/**
 * Given attention from `input` (an ArrayBuffer or a byte view: a safetensors file or JSON text;
 * a string of JSON; or the parsed object), checked: `{meta, records}`, each record the
 * metadata's (stack, kind, layer, query_heads, kv_heads, n_q, n_k) with its `values`, a
 * Float32Array `(H, n_q, n_k)`. `source` names the input in errors (a file name or URL).
 */
export function readGiven(input, source = 'the given attention') {
  if (input instanceof ArrayBuffer || ArrayBuffer.isView(input)) {
    const bytes = input instanceof ArrayBuffer ? new Uint8Array(input) : new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
    // a safetensors file starts with its header's length, a little-endian u64; JSON with `{` or space
    const first = bytes.find((b) => b !== 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09);
    if (first === 0x7b) return readGiven(new TextDecoder().decode(bytes), source);
    return fromSafetensors(bytes, source);
  }
  if (typeof input === 'string') {
    let parsed;
    try { parsed = JSON.parse(input); } catch (e) { throw bad(source, `not JSON (${e.message}) nor a safetensors file`); }
    return readGiven(parsed, source);
  }
  if (!input || typeof input !== 'object') throw bad(source, 'expected the records of docs/given.md (an object, JSON text or a safetensors file)');
  if (input.format === undefined && Array.isArray(input.results)) return fromCliAttention(input, source);
  if (input.format === undefined && Array.isArray(input.attention) && Array.isArray(input.tokens)) return fromCliGenerate(input, source);
  return checked(input, null, source);
}

/** The binary form: tensor `records.{i}` (F32, `[H, n_q, n_k]`) a record, the metadata as JSON
 *  under `__metadata__.attnscope`. */
function fromSafetensors(bytes, source) {
  if (bytes.length < 8) throw bad(source, `${bytes.length} bytes: not a safetensors file (its first 8 bytes give its header's length)`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = Number(view.getBigUint64(0, true));
  if (n > bytes.length - 8) throw bad(source, `a safetensors header of ${n} bytes in a file of ${bytes.length}`);
  let header;
  try { header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n))); } catch (e) { throw bad(source, `the safetensors header is not JSON (${e.message})`); }
  const text = header?.__metadata__?.attnscope;
  if (typeof text !== 'string') throw bad(source, 'a safetensors file without attnscope\'s records (__metadata__.attnscope: docs/given.md)');
  let meta;
  try { meta = JSON.parse(text); } catch (e) { throw bad(source, `__metadata__.attnscope is not JSON (${e.message})`); }
  const body = bytes.subarray(8 + n);
  const tensor = (i) => {
    const key = `records.${i}`, t = header[key];
    if (!t) throw bad(source, `records[${i}] names buffer ${i}, but the file has no tensor ${key}`);
    if (t.dtype !== 'F32') throw bad(source, `${key} is ${t.dtype}; given attention is F32`);
    const [a, b] = t.data_offsets ?? [];
    if (!isInt(a) || !isInt(b) || a > b || b > body.length) throw bad(source, `${key}: data_offsets ${JSON.stringify(t.data_offsets)} outside the ${body.length} bytes of data`);
    if ((b - a) % 4) throw bad(source, `${key}: ${b - a} bytes is not a whole number of F32`);
    const at = body.byteOffset + a;
    // aligned in the file (its data starts 8-byte aligned): a view; else a copy
    const values = at % 4 === 0 ? new Float32Array(body.buffer, at, (b - a) / 4) : new Float32Array(body.slice(a, b).buffer);
    return { values, shape: t.shape, key };
  };
  return checked(meta, tensor, source);
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
  const tokens = kind === 'encoder-decoder' ? null : strings('tokens');
  const encoderTokens = kind === 'encoder-decoder' ? strings('encoder_tokens') : null;
  const decoderTokens = kind === 'encoder-decoder' ? strings('decoder_tokens') : null;
  const records = meta.records.map((r, i) => {
    const at = `records[${i}]`;
    if (!['encoder', 'decoder'].includes(r.stack)) throw bad(source, `${at}.stack ${JSON.stringify(r.stack)}: "encoder" or "decoder"`);
    if (!['self', 'cross'].includes(r.kind)) throw bad(source, `${at}.kind ${JSON.stringify(r.kind)}: "self" or "cross"`);
    for (const f of ['layer', 'query_heads', 'kv_heads', 'n_q', 'n_k']) if (!isInt(r[f])) throw bad(source, `${at}.${f} ${JSON.stringify(r[f])}: a whole number`);
    const { query_heads: H, kv_heads: K, n_q, n_k } = r;
    if (!H || !K || !n_q || !n_k) throw bad(source, `${at}: ${H} heads over ${K} key/value heads, ${n_q} × ${n_k}: none may be 0`);
    if (H % K) throw bad(source, `${at}: ${H} query heads do not split into groups over ${K} key/value heads`);
    if (r.kind === 'cross' && (kind !== 'encoder-decoder' || r.stack !== 'decoder')) throw bad(source, `${at}: a cross-attention is an encoder–decoder's decoder's`);
    if (r.kind === 'self' && n_q !== n_k) throw bad(source, `${at}: self-attention over ${n_q} queries and ${n_k} keys; it is square`);
    const want = H * n_q * n_k;
    let values;
    if (tensor) {
      if (r.buffer === undefined) throw bad(source, `${at}: no buffer (the binary form's records name their tensor)`);
      const t = tensor(r.buffer);
      if (JSON.stringify(t.shape) !== JSON.stringify([H, n_q, n_k])) throw bad(source, `${t.key}: shape ${JSON.stringify(t.shape)}, but ${at} says [${H}, ${n_q}, ${n_k}]`);
      values = t.values;
    } else {
      if (!Array.isArray(r.values)) throw bad(source, `${at}.values: expected (${H}, ${n_q}, ${n_k}) nested lists`);
      values = new Float32Array(want);
      r.values.forEach((head, h) => head?.forEach?.((row, q) => { if (h < H && q < n_q && row?.length === n_k) values.set(row, (h * n_q + q) * n_k); }));
      const shape = [r.values.length, r.values[0]?.length, r.values[0]?.[0]?.length];
      const rows = r.values.every((head) => head?.length === n_q && head.every((row) => row?.length === n_k));
      if (r.values.length !== H || !rows) throw bad(source, `${at}.values: shape [${shape}], expected [${H}, ${n_q}, ${n_k}]`);
    }
    if (values.length !== want) throw bad(source, `${at}: ${values.length} values, expected ${H} × ${n_q} × ${n_k} = ${want}`);
    for (let j = 0; j < want; j++) {
      const v = values[j];
      if (!(v >= 0 && v <= MAX_P)) { // NaN fails both
        const h = Math.floor(j / (n_q * n_k)), q = Math.floor(j / n_k) % n_q, k = j % n_k;
        throw bad(source, `${at}: ${v} at head ${h}, query ${q}, key ${k}; attention probabilities are in [0, 1]`);
      }
    }
    const positions = r.stack === 'encoder' ? (tokens ?? encoderTokens) : (tokens ?? decoderTokens);
    if (positions.length !== n_q) throw bad(source, `${at}: ${n_q} queries, but ${tokens ? 'tokens' : `${r.stack}_tokens`} has ${positions.length}`);
    if (r.kind === 'cross' && n_k !== encoderTokens.length) throw bad(source, `${at}: ${n_k} keys, but encoder_tokens has ${encoderTokens.length}`);
    return { stack: r.stack, kind: r.kind, layer: r.layer, query_heads: H, kv_heads: K, n_q, n_k, values };
  });
  return { meta, records, kind, tokens, encoderTokens, decoderTokens };
}

/** `attnscope attention`'s JSON: its first result's tokens and `attention [L][H][T][T]`. */
function fromCliAttention(out, source) {
  const r = out.results[0];
  if (!r || !Array.isArray(r.attention)) throw bad(source, 'results[0].attention: missing ([L][H][T][T], as `attnscope attention` prints it)');
  const causal = out.mask === 'causal';
  return cliRecords({ model: out.model, tokens: r.tokens, attention: r.attention, causal }, source);
}

/** `attnscope generate`'s JSON: every position fed, `attention [L][H][N][N]`, causal. */
function fromCliGenerate(out, source) {
  return cliRecords({ model: out.model, tokens: out.tokens, attention: out.attention, causal: true }, source);
}

function cliRecords({ model, tokens, attention, causal }, source) {
  const stack = causal ? 'decoder' : 'encoder';
  const meta = {
    format: FORMAT, architecture: { kind: causal ? 'decoder' : 'encoder' }, mask: causal ? 'causal' : 'none', model, tokens,
    records: attention.map((heads, layer) => ({ stack, kind: 'self', layer, query_heads: heads.length, kv_heads: heads.length, n_q: heads[0]?.length ?? 0, n_k: heads[0]?.length ?? 0, values: heads })),
  };
  return checked(meta, null, source);
}

/**
 * The run the views draw for given attention of an encoder or a decoder (`g` from
 * {@link readGiven}): `{modelInfo, run, focus: {layer, head}}`. The records of the stack become
 * the run's layers in their order; `modelInfo` describes what the records say (kind, layers,
 * query and key/value heads) and no more: the views that need a model (the steps inside a layer,
 * knocking heads out, the next tokens) have none to ask.
 */
export function givenRun(g, source = 'the given attention') {
  if (g.kind === 'encoder-decoder') throw bad(source, 'an encoder–decoder\'s given attention: this page shows given attention of an encoder or a decoder for now');
  const records = g.records.filter((r) => r.kind === 'self');
  const { query_heads: H, kv_heads: K, n_q: T } = records[0];
  records.forEach((r, i) => {
    // the views number a stack's layers 0..L-1 (a file of some layers only: python/attnscope's include_layers)
    if (r.layer !== i) throw bad(source, `records[${i}] is layer ${r.layer}: this element draws a stack's layers 0, 1, 2, … in order (leave include_layers out)`);
    if (r.query_heads !== H || r.kv_heads !== K || r.n_q !== T) throw bad(source, `records[${i}]: ${r.query_heads} heads over ${r.kv_heads}, ${r.n_q} positions; records[0] has ${H} over ${K}, ${T}: a stack's layers are alike`);
  });
  const L = records.length, n = T * T;
  const attention = new Float32Array(L * H * n);
  records.forEach((r, l) => attention.set(r.values, l * H * n));
  const causal = g.meta.mask === 'causal';
  const mask = new Float32Array(n);
  for (let q = 0; q < T; q++) mask.fill(1, q * T, causal ? q * T + q + 1 : (q + 1) * T);
  const shape = [1, L, H, T, T];
  const tokens = g.tokens;
  const model = typeof g.meta.model === 'string' && g.meta.model ? g.meta.model : 'given attention';
  const item = {
    // byte-level BPE's and SentencePiece's pieces carry their spaces; WordPiece's do not
    text: tokens.join(tokens.some((t) => /^\s/.test(t)) ? '' : ' '), tokens, token_ids: tokens.map(() => null), token_texts: tokens,
    offsets: tokens.map(() => [0, 0]), word_ids: tokens.map((_, i) => i), length: T, truncated: false,
  };
  const info = {
    model, model_type: 'given', backend: 'given', fallback: null, mask: causal ? 'causal' : 'none', mask_ablation: false,
    elapsed_ms: 0, reused: 0, attention: 'probabilities', shape, items: [item], head_mask: [], scale: 'sqrt_dk', head_metrics: [],
  };
  const run = fromWorker({ info, attention, scores: null, mask, summary: summarise(attention, null, mask, shape) });
  run.given = true;
  const kind = g.kind;
  const modelInfo = {
    name: model, given: true, layers: L, heads: H, hidden: null, head_dim: null, max_length: T, stack: kind,
    architecture: {
      kind, positions: null, norm: null, norm_order: null, norm_eps: null, feed_forward: null,
      heads: { query: H, key_value: K }, head_dim: null, biases: null, lm_head: 'none', token_types: false, sliding_window: null,
    },
  };
  const view = g.meta.view ?? {};
  const at = records.findIndex((r) => r.layer === view.layer);
  const focus = { layer: at >= 0 ? at : 0, head: Array.isArray(view.heads) && isInt(view.heads[0]) && view.heads[0] < H ? view.heads[0] : 0 };
  return { modelInfo, run, focus };
}
