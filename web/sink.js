// The sink switch: a run's attention with its first key hidden (the attention sink most heads of
// a decoder pour their spare attention into) and each query row renormalised over the keys left,
// so what a head reads besides the sink shows. A view for reading, not the model's attention: the
// page labels it wherever it is on, and `window.attnscope.result` keeps the model's numbers.

import { maskedMaxes } from './summary.js';

const runs = new WeakMap();

/**
 * A head's T × T probabilities with column 0 set to 0 and each row divided by what is left (its
 * sum over keys 1…T−1); a row with nothing left (the first query under the causal mask reads
 * only the first key) is all 0.
 */
export function renormalised(values, T) {
  const out = new Float32Array(T * T);
  for (let q = 0; q < T; q++) {
    const row = q * T;
    let rest = 0;
    for (let k = 1; k < T; k++) rest += values[row + k];
    if (rest > 0) for (let k = 1; k < T; k++) out[row + k] = values[row + k] / rest;
  }
  return out;
}

/**
 * `run` (the result contract, or words.js `wordsOf`'s) with every head and the rollout
 * {@link renormalised}: the same interface, `head(b, l, h)` computed once a view asks, `probMax`
 * over the unmasked cells, `thumb` → null (the views pool the heads themselves), `results[b]`'s
 * `attention` likewise, and `sinkHidden: true`. Cached per run.
 */
export function withoutSink(run) {
  if (runs.has(run)) return runs.get(run);
  const { B, L, H, T } = run;
  const heads = new Array(B * L * H), rollouts = new Map();
  const head = (b, l, h) => (heads[(b * L + l) * H + h] ??= renormalised(run.head(b, l, h), T));
  const rows = (m) => Array.from({ length: T }, (_, q) => m.subarray(q * T, (q + 1) * T));
  const results = run.results.map((item, b) => {
    const r = Object.defineProperties({}, Object.getOwnPropertyDescriptors(item));
    Object.defineProperty(r, 'attention', {
      enumerable: true, configurable: true,
      get() { const v = Array.from({ length: L }, (_, l) => Array.from({ length: H }, (_, h) => rows(head(b, l, h)))); Object.defineProperty(r, 'attention', { value: v, enumerable: true }); return v; },
    });
    return r;
  });
  const out = {
    ...run,
    id: `${run.id}s`, results, head, sinkHidden: true,
    thumb: () => null,
    probMax: maskedMaxes(head, run.maskOf, B, L, H),
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
