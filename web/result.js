// The result contract on the JS side: what the worker hands over (the RunInfo of src/report.rs
// plus flat typed arrays) turned into `results` items with the CLI's field names and shapes.
// Nested arrays are views into the flat buffers (no copies), built on first access.

import { thumbOf } from './summary.js';

function lazy(obj, key, make) {
  Object.defineProperty(obj, key, {
    enumerable: true, configurable: true,
    get() { const v = make(); Object.defineProperty(obj, key, { value: v, enumerable: true }); return v; },
  });
}

/** A record's values, checked to be `(H, T, T)`: item b's of layer l, refused by name if not. */
function headValues(r, b, l, H, T) {
  if (r.shape.length !== 3 || r.shape[0] !== H || r.shape[1] !== T || r.shape[2] !== T || r.values.length !== H * T * T) {
    throw new Error(`item ${b}'s ${r.name} of layer ${l} has shape [${r.shape}] (${r.values.length} values), where the run's heads are (${H}, ${T}, ${T})`);
  }
  return r.values;
}

/**
 * A long run's head from the engine (src/wasm.rs `Session.longHead`: `{attention}`, T·T, and
 * `score_max`), item b's head (l, h), checked: `{probs, scoreMax, pooled, scores}`, `scoreMax`
 * its largest |score| over every cell: what the steps view's scale reads, which the pass could
 * not fold (it computes no score its mask hides). `pooled`, where the page asked for it: the
 * head's part max-pooled for the head view as summary.js `pooledPart` gives it (or null).
 * `scores`: the windows of its scores the page holds ({@link scoresPart}), the one that came
 * with it where the page asked for one.
 */
export function longHead({ attention, score_max: scoreMax, pooled = null, scores = null }, b, l, h, T) {
  if (!(attention instanceof Float32Array) || attention.length !== T * T) {
    throw new Error(`item ${b}'s head ${l}:${h} came with attention of ${attention?.length ?? 'no'} values, where the run's heads are ${T} × ${T}`);
  }
  if (!(scoreMax >= 0)) throw new Error(`item ${b}'s head ${l}:${h} came with a largest |score| of ${scoreMax}`);
  if (pooled && !(pooled.values instanceof Float32Array && pooled.mask instanceof Uint8Array && pooled.values.length === pooled.rows * pooled.cols && pooled.mask.length === pooled.values.length)) {
    throw new Error(`item ${b}'s head ${l}:${h} came pooled to ${pooled.rows} × ${pooled.cols} bins with ${pooled.values?.length} values and ${pooled.mask?.length} mask cells`);
  }
  return { probs: attention, scoreMax, pooled, scores: scores ? [scoresPart(scores, b, l, h, T)] : [] };
}

/**
 * A window of a long run's head's scores from the engine (src/wasm.rs `Session.longScores`,
 * `{part: {q0, q1, k0, k1}, values}`), checked: the part within the run's T × T, `values` its
 * (q1 − q0)·(k1 − k0) scores.
 */
export function scoresPart({ part, values }, b, l, h, T) {
  const { q0, q1, k0, k1 } = part ?? {};
  if (!(q0 >= 0 && q0 <= q1 && q1 <= T && k0 >= 0 && k0 <= k1 && k1 <= T) || !(values instanceof Float32Array) || values.length !== (q1 - q0) * (k1 - k0)) {
    throw new Error(`item ${b}'s head ${l}:${h} came with scores of ${values?.length ?? 'no'} values for queries ${q0}–${q1} and keys ${k0}–${k1}, where the run's heads are ${T} × ${T}`);
  }
  return { part: { q0, q1, k0, k1 }, values };
}

/**
 * `part` `{q0, q1, k0, k1}` of a head's scores from the windows of them held (`[{part, values}]`,
 * {@link scoresPart}): the first window that covers it, its values where it is that window, else
 * copied out of it; null where none covers it.
 */
export function heldScores(windows, part) {
  const at = windows.find(({ part: w }) => w.q0 <= part.q0 && part.q1 <= w.q1 && w.k0 <= part.k0 && part.k1 <= w.k1);
  if (!at) return null;
  const w = at.part;
  if (part.q0 === w.q0 && part.q1 === w.q1 && part.k0 === w.k0 && part.k1 === w.k1) return at.values;
  return windowOfPart(at.values, w.k1 - w.k0, { q0: part.q0 - w.q0, q1: part.q1 - w.q0, k0: part.k0 - w.k0, k1: part.k1 - w.k0 });
}

/** The most tokens a side the steps view shows: four panels stay legible (and light to draw). */
export const STEPS_ROWS = 64;

/**
 * The part of a head the steps view shows over `T` tokens for the head view's zoom window `win`
 * (`{q0, k0, n}`; null: the whole head): at most STEPS_ROWS tokens a side, within the head (as
 * matrix.js `square` clamps a window), `{q0, q1, k0, k1}`. The worker reads it too: a long run's
 * first head comes with the steps view's window of its scores.
 */
export function stepsPart(T, win) {
  const n = Math.max(1, Math.min(T, win?.n ?? T, STEPS_ROWS));
  const q0 = Math.max(0, Math.min(T - n, win?.q0 ?? 0)), k0 = Math.max(0, Math.min(T - n, win?.k0 ?? 0));
  return { q0, q1: q0 + n, k0, k1: k0 + n };
}

/**
 * Item b's head (l, h)'s scores in `part` `{q0, q1, k0, k1}`, (q1 − q0)·(k1 − k0) row-major, of
 * any run the views draw: a run's that keeps every score, or the windows a long run holds
 * (`scoresIn`); null where the run has none there (a long run's window not asked for yet: the
 * view asks, `opts.onScores`), or keeps no scores.
 */
export function scoresIn(run, b, l, h, part) {
  if (run.scoresIn) return run.scoresIn(b, l, h, part);
  const s = run.scoresOf?.(b, l, h);
  return s ? windowOfPart(s, run.T, part) : null;
}

/** `part` `{q0, q1, k0, k1}` of a `T`-wide row-major matrix `m`, copied out (row by row). */
function windowOfPart(m, T, { q0, q1, k0, k1 }) {
  const n = k1 - k0, out = new Float32Array((q1 - q0) * n);
  for (let q = q0; q < q1; q++) out.set(m.subarray(q * T + k0, q * T + k1), (q - q0) * n);
  return out;
}

/**
 * Item b's heads of a run of `shape` `(B, L, H, T)` nested as a run's `attention` is, `[L][H]`
 * of T rows: those `has(b, l, h)` says are here, from `get(b, l, h)` (T·T), null for the others,
 * and a layer with none null (a long run's holds the heads the page asked for).
 */
export function heldHeads(b, [, L, H, T], has, get) {
  const rows = (m) => Array.from({ length: T }, (_, q) => m.subarray(q * T, (q + 1) * T));
  return Array.from({ length: L }, (_, l) => {
    const heads = Array.from({ length: H }, (_, h) => (has(b, l, h) ? rows(get(b, l, h)) : null));
    return heads.some(Boolean) ? heads : null;
  });
}

/**
 * A run's heads read from its records (src/wasm.rs `run_records`, or given attention's:
 * docs/given.md): `records[b]` item b's, one a layer, `{name, shape, values}`, its attention
 * (`name` "attention", `(H, T, T)`) and its scores where the run kept them (`scores`), each in
 * layer order. Returns `{head(b, l, h), scoresOf(b, l, h)}`, each head's T·T values as a view into
 * its record's (`scoresOf` null where the run kept no scores). A record of another shape, or an
 * item without every layer, is refused by name.
 */
export function runHeads(records, [B, L, H, T]) {
  const n = T * T;
  const layersOf = (name) => records.map((item, b) => {
    const layers = item.filter((r) => r.name === name).map((r, l) => headValues(r, b, l, H, T));
    if (layers.length && layers.length !== L) throw new Error(`item ${b} has ${name} of ${layers.length} layers, where the run has ${L}`);
    return layers;
  });
  if (records.length !== B) throw new Error(`the run has records of ${records.length} items, where it ran ${B}`);
  const attention = layersOf('attention'), scores = layersOf('scores');
  const part = (layers, b, l, h) => layers[b][l].subarray(h * n, (h + 1) * n);
  return {
    head: (b, l, h) => part(attention, b, l, h),
    scoresOf: scores.every((s) => s.length) ? (b, l, h) => part(scores, b, l, h) : null,
  };
}

/**
 * `raw`: `{info: RunInfo, records, mask, logits?, headMetrics?, rollout?,
 * sentenceEmbedding?, baselineEmbedding?, nextTokens?, baselineNext?}` from the worker, `records`
 * as {@link runHeads} reads them; or, in place of `records`, `head(b, l, h)` giving each head's
 * T·T values on demand (a generation's: web/generation.js).
 * A long text's run (`info.attention` "queries_keys") has no records: its heads come one at a
 * time (`addHead`), and `head`/`scoresOf` give null for a head not here yet.
 * Returns `{model, backend, fallback, mask_kind, elapsed_ms, shape, T, results, head(b, l, h),
 * scoresOf(b, l, h), maskOf(b, l?), maskWhy(b, l, q, k), reach}`; each `results[b]` is the CLI's item for text b.
 */
let runs = 0;

/** How many bytes of a long run's heads the page holds, the last asked for kept first (one at
 *  least): SmolLM2-135M's at 1,024 tokens are 4 MB each (their probabilities). */
const LONG_HEAD_BYTES = 80 * 2 ** 20;

/** How many windows of scores the page holds with a long run's head (the steps view's, a cell
 *  the rotary panel reads): the last asked for. */
const LONG_SCORE_WINDOWS = 4;

export function fromWorker(raw) {
  const { info, mask, logits, summary, headMetrics, headRoles, valueNorms, rollout, sentenceEmbedding, baselineEmbedding, hiddenStates, layerTrace, crossAttention } = raw;
  const [B, L, H, T] = info.shape;
  // a long run kept each layer's queries and keys, not its probabilities: the page asks the
  // engine for the focused head when a view needs it (scope.js `longHead`), and holds a few
  const long = info.attention === 'queries_keys', longHeads = new Map();
  const headOf = (b, l, h) => longHeads.get(`${b}:${l}:${h}`);
  const kept = raw.records ? runHeads(raw.records, info.shape) : null;
  const head = raw.head ?? (long ? (b, l, h) => headOf(b, l, h)?.probs ?? null : kept.head);
  // a run with no scores (a generation's, given attention): null; a long run holds windows of
  // its heads' scores, not their T² (`scoresIn`)
  const scoresOf = long ? () => null : kept?.scoresOf ?? (() => null);
  const hasHead = (b, l, h) => !long || longHeads.has(`${b}:${l}:${h}`);
  // each layer's reach (`info.reach`: {attention: 'global' | 'sliding', window}), its mask the
  // pass's with the keys outside its window taken out: a sliding layer's own, made once
  const reach = info.reach ?? [], windowed = new Map();
  const windowOf = (l) => (reach[l]?.attention === 'sliding' ? reach[l].window : 0);
  const passMask = (b) => mask.subarray(b * T * T, (b + 1) * T * T);
  const maskOf = (b, l) => {
    const w = l === undefined ? 0 : windowOf(l);
    if (!w || w >= T) return passMask(b);
    const key = `${b}:${w}`;
    if (!windowed.has(key)) {
      const m = passMask(b).slice();
      for (let q = w; q < T; q++) m.fill(0, q * T, q * T + q - w + 1);
      windowed.set(key, m);
    }
    return windowed.get(key);
  };
  /** Why the cell (q, k) of item b's layer l is masked, in words ('masked' by the pass's mask, or
   *  "outside layer 3's 512-token window"); null where it is not. */
  const maskWhy = (b, l, q, k) => {
    if (!passMask(b)[q * T + k]) return 'masked';
    const w = l === undefined ? 0 : windowOf(l);
    return w && q - k >= w ? `outside layer ${l}'s ${w}-token window` : null;
  };
  const rows = (m) => Array.from({ length: T }, (_, q) => m.subarray(q * T, (q + 1) * T));
  const nested = (get, b) => Array.from({ length: L }, (_, l) => Array.from({ length: H }, (_, h) => rows(get(b, l, h))));
  const labels = logits ? logits.length / B : 0;
  const M = info.head_metrics.length;
  // (B, metric, L, H) → one metric of item b as (L, H) rows
  const metricOf = (b, m) => headMetrics.subarray(((b * M + m) * L) * H, ((b * M + m + 1) * L) * H);
  const metricGrid = (b, m) => Array.from({ length: L }, (_, l) => Array.from(metricOf(b, m).subarray(l * H, (l + 1) * H)));
  // (B, role, L, H) → one role of item b as (L·H) flat, null where its text does not repeat
  const roleNames = info.head_roles ?? [], repeats = info.repeats ?? [], R = roleNames.length;
  const roleOf = (b, r) => (headRoles && repeats[b] ? headRoles.subarray(((b * R + r) * L) * H, ((b * R + r + 1) * L) * H) : null);
  const rolloutOf = (b) => rollout.subarray(b * T * T, (b + 1) * T * T);
  const D = sentenceEmbedding ? sentenceEmbedding.length / B : 0;
  const embeddingOf = (e, b) => e.subarray(b * D, (b + 1) * D);
  const results = info.items.map((item, b) => {
    const r = { ...item, labels: labelsOf(item) };
    if (long) {
      // the heads the page has asked for; null for the others, and for a layer with none here
      Object.defineProperty(r, 'attention', { enumerable: true, get: () => heldHeads(b, info.shape, hasHead, head) });
      r.scores = null; // windows of them only: `scoresIn`
    } else {
      lazy(r, 'attention', () => nested(head, b));
      lazy(r, 'scores', () => (kept?.scoresOf ? nested(scoresOf, b) : null));
    }
    lazy(r, 'mask', () => rows(maskOf(b)).map((row) => Array.from(row)));
    if (logits) r.logits = Array.from(logits.subarray(b * labels, (b + 1) * labels));
    if (raw.nextTokens) r.next_tokens = raw.nextTokens[b];
    if (raw.logitAttribution) r.logit_attribution = raw.logitAttribution[b];
    if (headMetrics) lazy(r, 'head_metrics', () => Object.fromEntries(info.head_metrics.map((name, m) => [name, metricGrid(b, m)])));
    if (roleOf(b, 0)) lazy(r, 'head_roles', () => Object.fromEntries(roleNames.map((name, k) => [name, Array.from({ length: L }, (_, l) => Array.from(roleOf(b, k).subarray(l * H, (l + 1) * H)))])));
    if (rollout) lazy(r, 'rollout', () => rows(rolloutOf(b)));
    if (sentenceEmbedding) lazy(r, 'sentence_embedding', () => Array.from(embeddingOf(sentenceEmbedding, b)));
    return r;
  });
  return {
    id: ++runs, model: info.model, model_type: info.model_type, backend: info.backend, fallback: info.fallback ?? null, mask_kind: info.mask, mask_ablation: info.mask_ablation,
    elapsed_ms: info.elapsed_ms, reused: info.reused ?? 0, shape: info.shape, B, L, H, T, results, head, scoresOf,
    /** Item b's mask, (T·T) flat: the pass's, or layer l's own (a sliding layer's window cut from it). */
    maskOf,
    maskWhy,
    /** Each layer's reach: `{attention: 'global' | 'sliding', window?}` (none: every layer global). */
    reach,
    /** A long text's run: its heads come one at a time (`hasHead`, `addHead`); `longRun` names it to the engine. */
    long, longRun: info.long_run ?? null,
    /** Whether item b's head (l, h) is here (always, but in a long run). */
    hasHead,
    /** A long run's head (l, h) of item b from the engine ({@link longHead}); the heads asked
     *  for last are kept, up to `LONG_HEAD_BYTES`. Returns the probabilities of the heads it let
     *  go, `[Float32Array]` (the engine may write a later head into them: engine.js `longHead`). */
    addHead(b, l, h, values) {
      const key = `${b}:${l}:${h}`;
      longHeads.delete(key);
      longHeads.set(key, longHead(values, b, l, h, T));
      const bytes = () => [...longHeads.values()].reduce((n, x) => n + x.probs.byteLength, 0);
      const gone = [];
      while (longHeads.size > 1 && bytes() > LONG_HEAD_BYTES) {
        const first = longHeads.keys().next().value;
        gone.push(longHeads.get(first));
        longHeads.delete(first);
      }
      return gone.map(({ probs }) => probs);
    },
    /** A window of a long run's head's scores from the engine ({@link scoresPart}), held with
     *  the head (the last few asked for); false where the head is not here (the window is
     *  dropped). */
    addScores(b, l, h, scores) {
      const held = headOf(b, l, h);
      if (!held) return false;
      held.scores = [scoresPart(scores, b, l, h, T), ...held.scores.slice(0, LONG_SCORE_WINDOWS - 1)];
      return true;
    },
    /** Item b's head (l, h)'s scores in `part` (module `scoresIn`): a long run's from a window
     *  it holds that covers it, else null. */
    scoresIn: (b, l, h, part) => {
      if (!long) return kept?.scoresOf ? windowOfPart(kept.scoresOf(b, l, h), T, part) : null;
      const held = headOf(b, l, h);
      return held ? heldScores(held.scores, part) : null;
    },
    head_mask: info.head_mask, metricNames: info.head_metrics,
    /** The heads' roles the run scored (src/analysis/roles.rs), and where item b's text repeats:
     *  `{start, len, period}`, or null (a text that does not begin with two repeats has no roles). */
    roleNames, repeatOf: (b) => repeats[b] ?? null,
    /** One head metric of item b, or one role as `role:NAME` (store.js ROLES), (L·H) flat (null
     *  when the run has none). */
    metric: (b, name) => {
      const role = name.startsWith('role:') ? roleNames.indexOf(name.slice(5)) : -1;
      if (role >= 0) return roleOf(b, role);
      return headMetrics && info.head_metrics.includes(name) ? metricOf(b, info.head_metrics.indexOf(name)) : null;
    },
    /** Each key's value size ‖W_O^h v_j‖ of item b's head (l, h), T flat (null when the run has none). */
    valueNormsOf: (b, l, h) => (valueNorms ? valueNorms.subarray((((b * L + l) * H + h) * T), (((b * L + l) * H + h) + 1) * T) : null),
    /** What writes item b's next token (the CLI's `logit_attribution`, without the tokens each
     *  head promotes: `headWritesOf` and engine.js `readOut` give those), and the same tokens'
     *  with no head knocked out (null when the run has none). */
    attributionOf: (b) => raw.logitAttribution?.[b] ?? null,
    baselineAttribution: (b) => raw.baselineAttribution?.[b] ?? null,
    /** Item b's head (l, h) write through the frozen final norm, D flat (null when the run has none). */
    headWritesOf: (b, l, h) => {
      const w = raw.headWrites;
      if (!w) return null;
      const D = w.length / (B * L * H), at = ((b * L + l) * H + h) * D;
      return w.subarray(at, at + D);
    },
    /** Every edge's importance of item b's information-flow routes (src/analysis/flow.rs):
     *  `{heads: L·H·T·T, residual: L·T}` flat (null when the run has none). */
    flowOf: (b) => {
      const f = raw.flow;
      if (!f) return null;
      const nh = L * H * T * T, nr = L * T;
      return { heads: f.heads.subarray(b * nh, (b + 1) * nh), residual: f.residual.subarray(b * nr, (b + 1) * nr) };
    },
    /** Attention rollout of item b, (T·T) flat (null when the run has none). */
    rolloutOf: rollout ? rolloutOf : () => null,
    /** The sentence embedding of item b, and the same without the knocked-out heads. */
    embedding: (b) => (sentenceEmbedding ? embeddingOf(sentenceEmbedding, b) : null),
    baseline: (b) => (baselineEmbedding ? embeddingOf(baselineEmbedding, b) : null),
    /** Item b's likeliest next tokens without the knocked-out heads, `[T][K]` as `next_tokens` (null when none were knocked out). */
    baselineNext: (b) => raw.baselineNext?.[b] ?? null,
    scale: info.scale,
    /** Whether the run left the rotary positions out (the ablation). */
    noRope: Boolean(info.no_rope),
    /** Whether the run left QK-norm out (the ablation). */
    noQkNorm: Boolean(info.no_qk_norm),
    /** How the CPU engine multiplied by 4-bit matrices: 'exact' or 'fast' (8-bit activations). */
    numerics: info.numerics ?? 'exact',
    /** One head metric of item b under the other score scale (÷√d_k or not), (L·H) flat, or null. */
    /** The head metrics under the other score scale, (B, metric, L, H), once the √d_k panel has asked for them. */
    otherScaleMetrics: null,
    otherMetric(b, name) {
      const m = this.otherScaleMetrics, i = info.head_metrics.indexOf(name);
      return m && i >= 0 ? m.subarray(((b * M + i) * L) * H, ((b * M + i + 1) * L) * H) : null;
    },
    /** Every layer's hidden states of item b: `(L+1)·T·D` flat, `D` (null when the run has none). */
    hiddenStatesOf: (b) => {
      if (!hiddenStates) return null;
      const n = hiddenStates.length / B;
      return { values: hiddenStates.subarray(b * n, (b + 1) * n), D: n / ((L + 1) * T) };
    },
    /** Each token's cosine to its state one layer before, item b: `{values: L·T flat, L, T}` (null when the run has none). */
    layerSimilarityOf: (b) => (raw.layerSimilarity ? { values: raw.layerSimilarity.subarray(b * L * T, (b + 1) * L * T), L, T } : null),
    /**
     * One layer's values for item b (null when the run has none): `{layer, dims: {name: width},
     * get(name) → T·width flat}` for input, q, k, v, context, attentionOutput, intermediate,
     * output, and (layer 0) embeddings.word, position, tokenType, sum, normed.
     */
    traceOf: (b) => {
      if (!layerTrace) return null;
      const of = (a) => { const n = a.length / B; return { values: a.subarray(b * n, (b + 1) * n), width: n / T }; };
      const fields = { ...Object.fromEntries(Object.entries(layerTrace).filter(([, v]) => ArrayBuffer.isView(v))), ...Object.fromEntries(Object.entries(layerTrace.embeddings ?? {}).map(([k, v]) => [`embeddings.${k}`, v])) };
      return { layer: layerTrace.layer, names: Object.keys(fields), get: (name) => of(fields[name]) };
    },
    /** Cross-attention to item b's text from the pair: `{layer, queries, keys, attention: H·n_q·n_k}` or null. */
    crossOf: (b) => crossAttention?.[b] ?? null,
    /** The largest probability of a head (from the worker's summary), and the largest |score|
     *  (a long run's from its head, once here: 0 before). */
    probMax: (b, l, h) => summary.probMax[(b * L + l) * H + h],
    scoreMax: (b, l, h) => (long ? headOf(b, l, h)?.scoreMax ?? 0 : summary.scoreMax[(b * L + l) * H + h]),
    /** A long run's head as the engine pooled it for the head view (engine.js `longHead`'s
     *  `pool`): `{part, px, w, rows, cols, max, arg, values, mask, probs}`, `probs` the head it
     *  pooled; null where it was not asked for, or the head is not here. */
    pooledOf: (b, l, h) => { const x = long ? headOf(b, l, h) : null; return x?.pooled ? { ...x.pooled, probs: x.probs } : null; },
    /** A long input's head, max-pooled to R × R by the worker (null for short inputs). */
    thumb: (b, l, h) => thumbOf(summary, info.shape, b, l, h),
    /** A long text's heads with the first key hidden (web/sink.js), summarised by the worker
     *  beside the model's, `summarise`'s fields (null for other runs: their views summarise
     *  the heads they make). */
    sinkSummary: summary?.sink ?? null,
  };
}

/**
 * What the views write for each of an item's `tokens` (padding included): its text from the
 * engine (`token_texts`: `Ġflies` → ` flies`, `×©` → `ש`, `▁the` → ` the`, a part of a
 * character as its bytes, marked: `ĠðŁ` → ` ‹F0 9F›`), as a reader can see it; the token as the
 * vocabulary holds it where that is what a person reads: a special token (`[CLS]`, `<s>`), a
 * WordPiece continuation (`##ing`), and a token that is its text as the tokenizer normalised it
 * (an uncased BERT's `cafe` for `café`).
 */
export function labelsOf(item) {
  const texts = item.token_texts ?? [];
  const folded = (t) => t.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase();
  return item.tokens.map((t, i) => {
    const text = texts[i];
    if (text === undefined || t === text || t.startsWith('##') || SPECIAL.test(t) || folded(t) === folded(text)) return t;
    return visibleText(text);
  });
}

/** A special token's form: `[CLS]`, `<s>`, `<|endoftext|>`; not SentencePiece's byte pieces (`<0xF0>`). */
const SPECIAL = /^(\[[A-Za-z]+\]|<(?!0x[0-9A-Fa-f]{2}>)[^<>\s]+>)$/;

/** Control characters a reader sees by a sign: Unicode's Control Pictures (␀ … ␟, ␡), a newline ⏎ and a tab ⇥. */
const CONTROL_SIGNS = { '\n': '⏎', '\t': '⇥' };
const signOf = (c) => {
  const code = c.charCodeAt(0);
  return CONTROL_SIGNS[c] ?? (code < 0x20 ? String.fromCharCode(0x2400 + code) : code === 0x7f ? '␡' : `U+${code.toString(16).toUpperCase().padStart(4, '0')}`);
};

/**
 * Text as a reader can see it, wherever a token or a bit of text is written on the page:
 * control characters as signs (a newline ⏎, a tab ⇥, the others their Control Pictures ␀ … ␟ and
 * ␡; C1 controls by their code, `U+0085`), and a text of whitespace alone as ␣, one per character
 * (a space inside a text stays a space).
 */
export function visibleText(text) {
  const signed = text.replace(/[\u0000-\u001f\u007f-\u009f]/g, signOf);
  return signed.trim() ? signed : signed.replace(/\s/g, '␣');
}

/** Right-to-left letters (Hebrew, Arabic, Syriac, Thaana, N'Ko and their presentation forms). */
const RTL = /[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]/;

/** A token's text within a line of prose (a list of tokens, a sentence naming one): as
 *  {@link visibleText}, isolated (U+2068 … U+2069) where it holds right-to-left letters, so that
 *  an Arabic token keeps its place in the list and the numbers after it stay after it. */
export function inlineText(text) {
  const shown = visibleText(text);
  return RTL.test(shown) ? `\u2068${shown}\u2069` : shown;
}

/** The engine a result's `backend` names, as the page writes it: `WebGPU` or `the CPU engine`. */
export function engineOf(backend) {
  return backend?.startsWith('gpu') ? 'WebGPU' : 'the CPU engine';
}

/** A (T, T) mask: 1 where a query may attend, every key, or (causal) the keys up to its own. */
export function squareMask(T, causal) {
  const mask = new Float32Array(T * T);
  for (let q = 0; q < T; q++) mask.fill(1, q * T, causal ? q * T + q + 1 : (q + 1) * T);
  return mask;
}

/** Layer `l` of a run as its model numbers it: given attention of some layers only
 *  (include_layers) keeps their own numbers; every other run's layers are 0, 1, 2, … */
export const layerNumber = (run, l) => run?.layerNumbers?.[l] ?? l;

/**
 * The rows and columns of item `b`'s attention a sentence pair's `part` (store.js PARTS: `ab`,
 * sentence A's queries over sentence B's keys) shows: `{name, q0, q1, k0, k1}`, sentence B from
 * the item's `sentence_b_start` to its last real token. null for every token: `all`, an item
 * with no second sentence, or a part with no tokens.
 */
export function partOf(run, b, part) {
  const item = run?.results?.[b], sb = item?.sentence_b_start;
  if (!part || part === 'all' || !Number.isInteger(sb)) return null;
  const n = item.length ?? run.T, b0 = Math.min(sb, n);
  const [q0, q1] = part[0] === 'a' ? [0, b0] : [b0, n], [k0, k1] = part[1] === 'a' ? [0, b0] : [b0, n];
  return q1 > q0 && k1 > k0 ? { name: part, q0, q1, k0, k1 } : null;
}

/** `window.attnscope.result`: item `b` with the run's fields beside it. */
export function published(run, b) {
  const item = run.results[b];
  const out = {
    model: run.model, backend: run.backend, fallback: run.fallback, elapsed_ms: run.elapsed_ms, elapsedMs: run.elapsed_ms,
    model_type: run.model_type, mask_kind: run.mask_kind, ...(run.mask_ablation ? { mask_ablation: true } : {}),
    ...(run.head_mask?.length ? { head_mask: run.head_mask } : {}), // as the CLI's, [layer, head] knocked out
    ...(run.numerics === 'fast' ? { numerics: 'fast' } : {}), // as the CLI's: absent for the exact numerics
    reused: run.reused, // the first positions the CPU engine took from its last pass (typing at the end)
    // given attention's: float32, or bfloat16 or uint16 as a file stored it; the model's numbers of its layers
    ...(run.given ? { precision: run.precision, layers: Array.from({ length: run.L }, (_, l) => layerNumber(run, l)) } : {}),
    item: b, batch: run.results.map((r) => ({ text: r.text, tokens: r.tokens })),
  };
  for (const k of Object.keys(item)) if (k !== 'labels') Object.defineProperty(out, k, { enumerable: true, get: () => item[k] });
  return out;
}

/**
 * `out` (published()'s) of a generation's run with the generation's fields beside it, as
 * `attnscope generate` prints them (`generation`: the store's, web/generation.js): the run's
 * own fields (`tokens`, `attention`: up to the focused step, as the views draw it) stay; the
 * whole generation's are copied as properties (so that `attention` stays a getter: read, it
 * copies (L, H, N, N) out), with `output_tokens`, the focused `step`, `running` and `generate`
 * (the whole result). Any other run's `out` is returned as it is.
 */
export function withGeneration(out, run, generation) {
  const g = generation?.result;
  if (!run.generated || !g) return out;
  for (const [k, d] of Object.entries(Object.getOwnPropertyDescriptors(g))) if (d.enumerable && !(k in out)) Object.defineProperty(out, k, d);
  return Object.assign(out, { output_tokens: g.output_ids.map((id, i) => g.steps[i].top_k.find((p) => p.id === id)?.token ?? null), step: run.generated.step, running: generation.running, generate: g });
}

/** `window.attnscope.result` for an encoder–decoder model: item `b` of a translation (the
 *  fields of `attnscope translate`'s items) with the translation's fields beside it. */
export function publishedTranslation(tr, b) {
  const out = {
    model: tr.model, model_type: tr.model_type, backend: tr.backend, fallback: tr.fallback, elapsed_ms: tr.elapsed_ms,
    step_ms: tr.step_ms, item: b, batch: tr.results.map((r) => ({ source: r.source })),
    ...(tr.given ? { precision: tr.precision } : {}), // given attention's: float32, or bfloat16 or uint16 as a file stored it
  };
  return Object.assign(out, tr.results[b]);
}

/** The largest |a − b| over two nested arrays (of arrays or typed arrays) of `want`'s shape; a
 *  value `got` lacks counts as Infinity. */
export function maxAbsDiff(want, got) {
  if (typeof want === 'number') return Math.abs(want - (got ?? Infinity));
  let max = 0;
  for (let i = 0; i < want.length; i++) max = Math.max(max, maxAbsDiff(want[i], got?.[i]));
  return max;
}

/** A token as a reader sees it: SentencePiece's ▁ as the space it stands for, control characters and whitespace visible (visibleText). */
export const shownToken = (t) => visibleText(t.replace(/▁/g, ' ').trim() || t);

/** A decoder step's row label: the token it writes, then the one it reads (`5 ← 0`); the one it
 *  reads alone where what it writes is not known (given attention). */
export const stepLabel = (writes, reads) => (writes === null ? shownToken(reads) : `${shownToken(writes)} ← ${shownToken(reads)}`);

/**
 * A translation item's decoder steps: `{T, inputs, written}`, what each of its T steps reads and
 * writes. Given attention (web/given.js) carries the tokens the decoder read (`decoder_tokens`)
 * and not what it wrote, which is the model's: `written` null.
 */
export function decoderSteps(r) {
  if (r.given) return { T: r.decoder_tokens.length, inputs: r.decoder_tokens, written: null };
  const T = r.output_ids.length - 1;
  return { T, inputs: r.output_tokens.slice(0, T), written: r.output_tokens.slice(1) };
}

/** The records of one attention (`stack` "encoder" | "decoder", `kind` "self" | "cross") named
 *  `name` ("attention", "value_norms"), one a layer, in the order they came. */
export const recordsOf = (records, stack, kind, name) => records.filter((r) => r.stack === stack && r.kind === kind && r.name === name);

/** Which records each of an encoder–decoder's attentions is (the ids of ATTENTION_KINDS). */
const RECORDS_OF = { encoder: ['encoder', 'self'], decoder: ['decoder', 'self'], cross: ['decoder', 'cross'] };

/**
 * A translation's item read from its records (src/wasm.rs `Session.translate`'s, or given
 * attention's: docs/given.md), one a layer: `{stack, kind, layer, name, shape, values}`, an
 * attention's `values` `(H, n_q, n_k)` (`name` "attention"), a key's value sizes `(H, n_k)`
 * (`name` "value_norms"). Gives `item` the CLI's fields as views into the records' values (no
 * copies), built on first access: `encoder_attention` `[L][H][S][S]`, `decoder_attention`
 * `[L][H][T][T]`, `cross_attention` `[L][H][T][S]` (null where the records hold none), and with
 * value sizes `value_norms` (`{encoder, decoder, cross}`, each `[L][H][n_k]`) and
 * `value_weighted` (each weight times its key's size, `[L][H][n_q][n_k]`, as `translate
 * --value-weighted` prints them). The records stay on the item, not enumerated.
 */
export function withRecords(item, records) {
  Object.defineProperty(item, 'records', { value: records, enumerable: false, configurable: true });
  const of = (id, name) => recordsOf(records, ...RECORDS_OF[id], name);
  // (H, n_q, n_k) → [H][n_q] rows; (H, n_k) → [H] rows
  const heads = (r) => {
    const [H, ...rest] = r.shape, n = rest.reduce((a, b) => a * b, 1);
    return Array.from({ length: H }, (_, h) => {
      const head = r.values.subarray(h * n, (h + 1) * n);
      if (rest.length === 1) return head;
      const [nq, nk] = rest;
      return Array.from({ length: nq }, (_, q) => head.subarray(q * nk, (q + 1) * nk));
    });
  };
  const layers = (id, name) => { const rs = of(id, name); return rs.length ? rs.map(heads) : null; };
  for (const id of Object.keys(RECORDS_OF)) lazy(item, `${id}_attention`, () => layers(id, 'attention'));
  if (records.some((r) => r.name === 'value_norms')) {
    const byAttention = (make) => Object.fromEntries(Object.keys(RECORDS_OF).map((id) => [id, make(id)]));
    lazy(item, 'value_norms', () => byAttention((id) => layers(id, 'value_norms')));
    lazy(item, 'value_weighted', () => byAttention((id) => item[`${id}_attention`].map((hs, l) => hs.map((rows, h) => {
      const sizes = item.value_norms[id][l][h];
      return rows.map((row) => row.map((p, k) => p * sizes[k]));
    }))));
  }
  return item;
}

/** A translation from the worker (src/wasm.rs `Session.translate`): each item's attentions
 *  read from its records ({@link withRecords}). */
export function fromTranslation(raw) {
  for (const item of raw.results) withRecords(item, item.records);
  return raw;
}

/** An encoder–decoder's three attentions (the ids of store.js's ATTENTIONS): each one's name and what it is, in one line. */
export const ATTENTION_KINDS = {
  cross: { name: 'cross-attention', line: 'Encoder–decoder attention: each output step\'s query (from the decoder) over the source\'s keys and values (from the encoder\'s output); rows: writes ← reads.' },
  decoder: { name: 'decoder self-attention', line: 'The decoder reads what it has written so far: under the no-peek mask, step t (counted from 1) reads only positions 0…t − 1, the start token and what steps 1…t − 1 wrote (the hatched triangle is −∞ before softmax, so 0). Rows: writes ← reads; columns: the token read at each position.' },
  encoder: { name: 'encoder self-attention', line: 'The encoder reads the whole source at once, every token over every token (padding masked).' },
};

/** The attentions a translation item holds (the ids of ATTENTION_KINDS): given attention may hold some only. */
export const attentionsOf = (r) => Object.keys(ATTENTION_KINDS).filter((id) => r[`${id}_attention`]);

/** The model's number of layer `l` of attention `attn` of a translation item: its own where given attention holds some layers only. */
export const translationLayer = (r, attn, l) => r.layer_numbers?.[attn === 'encoder' ? 'encoder' : 'decoder']?.[l] ?? l;

/**
 * The matrices of attention `attn` ('cross' | 'decoder' | 'encoder') of translation item `r`:
 * `[L][H]` of `{values: [n_q][n_k], rows, cols, masked(q, k)}` ({@link runOfMatrices} gives them to the views); a
 * decoder step's row is labelled by what it writes and what it reads (stepLabel). `byValue`:
 * weighed by each key's value size (the item's `value_norms`, from `valueWeighted`), rows rescaled.
 */
export function matricesOf(r, attn, byValue = false) {
  const { inputs, written } = decoderSteps(r);
  const src = r.source_tokens.map(shownToken);
  // a step's row: what it writes, with what it reads beside it
  const steps = inputs.map((reads, t) => stepLabel(written?.[t] ?? null, reads));
  const [values, rows, cols, masked] = {
    cross: [r.cross_attention, steps, src, null],
    decoder: [r.decoder_attention, steps, inputs.map(shownToken), r.given && !r.causal ? null : (q, k) => k > q],
    encoder: [r.encoder_attention, src, src, null],
  }[attn];
  // the value switch: each key's column times its ‖W_O·v‖, each row rescaled to sum to 1
  const norms = byValue ? r.value_norms?.[attn] : null;
  return values.map((heads, l) => heads.map((v, h) => ({ values: norms ? weighRows(v, norms[l][h]) : v, rows, cols, masked })));
}

let matrixRuns = 0;

/**
 * `[L][H]` matrices of n_q × n_k (what {@link matricesOf} gives: `{values: [n_q][n_k], rows, cols,
 * masked(q, k)}`, alike in every head) as the run contract's heads, for the views that draw any
 * n_q × n_k attention (views/grid.js, views/head.js): `{id, B: 1, L, H, T: n_q, nk: n_k, head(0,
 * l, h) → n_q·n_k, maskOf(0, l) → n_q·n_k (1 = a key the query may read), results: [{labels: the
 * rows', keyLabels: the columns'}], layerNumbers, valueWeighted, …}`, each head's values copied
 * flat once it is read. `number(l)`: the model's number of layer l; `valueWeighted`: the
 * matrices are weighed by each key's value size (the views' legends say so).
 */
export function runOfMatrices(matrices, number = (l) => l, { valueWeighted = false } = {}) {
  const L = matrices.length, H = matrices[0]?.length ?? 0, m0 = matrices[0]?.[0];
  const nq = m0?.rows.length ?? 0, nk = m0?.cols.length ?? 0;
  const heads = new Map();
  const head = (_, l, h) => {
    const key = l * H + h;
    if (!heads.has(key)) {
      const flat = new Float32Array(nq * nk);
      matrices[l][h].values.forEach((row, q) => flat.set(row.length > nk ? row.slice(0, nk) : row, q * nk));
      heads.set(key, flat);
    }
    return heads.get(key);
  };
  const mask = Uint8Array.from({ length: nq * nk }, (_, i) => (m0?.masked?.(Math.floor(i / nk), i % nk) ? 0 : 1));
  const numbers = Array.from({ length: L }, (_, l) => number(l));
  return {
    id: `matrices:${++matrixRuns}`, B: 1, L, H, T: nq, nk, head, maskOf: () => mask,
    results: [{ labels: m0?.rows ?? [], keyLabels: m0?.cols ?? [] }],
    layerNumbers: numbers.every((n, l) => n === l) ? null : numbers, valueWeighted,
    reach: [], thumb: () => null, hasHead: () => true, metric: () => null,
  };
}

/** Rows of attention with each key's weight times its value's size `norms[k]`, each row divided
 *  by its new sum (all 0 where nothing is left): web/values.js `weighed`, for nested rows. */
function weighRows(rows, norms) {
  return rows.map((row) => {
    let sum = 0;
    const out = Array.from(row, (p, k) => { const x = p * norms[k]; sum += x; return x; });
    return sum > 0 ? out.map((x) => x / sum) : out.map(() => 0);
  });
}
