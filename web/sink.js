// The sink switch: a run's attention with its first key hidden (the attention sink most heads of
// a decoder pour their spare attention into) and each query row renormalised over the keys left,
// so what a head reads besides the sink shows. A view for reading, not the model's attention: the
// page labels it wherever it is on, and `window.attnscope.result` keeps the model's numbers.

import { maskedMaxes, thumbOf } from './summary.js';
import { heldHeads } from './result.js';

const runs = new WeakMap();

/**
 * A head's T × T probabilities with column 0 set to 0 and each row divided by what is left (its
 * sum over keys 1…T−1); a row with nothing left (the first query under the causal mask reads
 * only the first key) is all 0. Written into `out` when given (every value of it).
 */
export function renormalised(values, T, out = new Float32Array(T * T)) {
  for (let q = 0; q < T; q++) {
    const row = q * T;
    let rest = 0;
    for (let k = 1; k < T; k++) rest += values[row + k];
    out[row] = 0;
    if (rest > 0) for (let k = 1; k < T; k++) out[row + k] = values[row + k] / rest;
    else out.fill(0, row + 1, row + T);
  }
  return out;
}

/**
 * `run` (the result contract, or words.js `wordsOf`'s) with every head and the rollout
 * {@link renormalised}: the same interface, `head(b, l, h)` computed once a view asks, `probMax`
 * over the unmasked cells, `thumb` → null (the views pool the heads themselves), `results[b]`'s
 * `attention` likewise, and `sinkHidden: true`. A long text's run (`run.long`) has its heads one
 * at a time: `head` gives null for a head not here yet (as the run's), and the thumbnails
 * and maxima are the worker's of every head with the sink hidden (`run.sinkSummary`). Cached per
 * run.
 */
export function withoutSink(run) {
  if (runs.has(run)) return runs.get(run);
  const { B, L, H, T } = run;
  let head;
  if (run.long) {
    // by the head's own array: a head the run lets go takes its renormalised one with it
    const made = new WeakMap();
    head = (b, l, h) => {
      const v = run.head(b, l, h);
      if (!v) return null;
      if (!made.has(v)) made.set(v, renormalised(v, T));
      return made.get(v);
    };
  } else {
    const heads = new Array(B * L * H);
    head = (b, l, h) => (heads[(b * L + l) * H + h] ??= renormalised(run.head(b, l, h), T));
  }
  const rollouts = new Map();
  const results = run.results.map((item, b) => {
    const { attention: _, ...rest } = Object.getOwnPropertyDescriptors(item); // (a long run's is not configurable)
    const r = Object.defineProperties({}, rest);
    // (a long run's: the heads the page holds, null for the others and a layer with none)
    const attention = () => heldHeads(b, [B, L, H, T], run.hasHead, head);
    Object.defineProperty(r, 'attention', run.long ? { enumerable: true, get: attention } : {
      enumerable: true, configurable: true,
      get() { const v = attention(); Object.defineProperty(r, 'attention', { value: v, enumerable: true }); return v; },
    });
    return r;
  });
  const sink = run.sinkSummary;
  const out = {
    ...run,
    id: `${run.id}s`, results, head, sinkHidden: true,
    thumb: run.long ? (b, l, h) => thumbOf(sink, [B, L, H], b, l, h) : () => null,
    probMax: run.long ? (b, l, h) => sink.probMax[(b * L + l) * H + h] : maskedMaxes(head, run.maskOf, B, L, H),
    rolloutOf(b) {
      const r = run.rolloutOf?.(b);
      if (!r) return null;
      if (!rollouts.has(b)) rollouts.set(b, renormalised(r, T));
      return rollouts.get(b);
    },
  };
  runs.set(run, out);
  return out;
}
