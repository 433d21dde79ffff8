// The value switch (Kobayashi et al. 2020, "Attention is not only a weight"): a run's attention
// with each weight times the size of what its head writes from that key, ‖W_O^h v_j‖ (the
// engine's `valueNorms`, src/analysis/value_weighted.rs), each query row rescaled to sum to 1, so
// what each key counts for shows where the weight alone misleads (a heavy weight on a small
// value: the first token's sink). A view for reading, not the model's attention: the page labels
// it wherever it is on, and `window.attnscope.result` keeps the model's numbers.

import { maskedMaxes } from './summary.js';

const runs = new WeakMap();

/**
 * A head's T × T probabilities with each key's column times its value's size (`norms`, T) and
 * each row divided by its new sum; a row with nothing left is all 0. Written into `out` when
 * given (every value of it).
 */
export function weighed(values, norms, T, out = new Float32Array(T * T)) {
  for (let q = 0; q < T; q++) {
    const row = q * T;
    let sum = 0;
    for (let k = 0; k < T; k++) sum += values[row + k] * norms[k];
    if (sum > 0) for (let k = 0; k < T; k++) out[row + k] = (values[row + k] * norms[k]) / sum;
    else out.fill(0, row, row + T);
  }
  return out;
}

/**
 * `run` (the result contract) with every head {@link weighed} by its keys' value sizes: the same
 * interface, `head(b, l, h)` computed once a view asks, `probMax` over the unmasked cells, `thumb`
 * → null (the views pool the heads themselves), `results[b]`'s `attention` likewise, and
 * `valueWeighted: true`. The run itself where it has no value sizes, or is a long text's (its
 * heads one at a time, its thumbnails the worker's). Cached per run.
 */
export function byValue(run) {
  if (!run?.valueNormsOf?.(0, 0, 0) || run.long) return run;
  if (runs.has(run)) return runs.get(run);
  const { B, L, H, T } = run;
  const rows = (m) => Array.from({ length: T }, (_, q) => m.subarray(q * T, (q + 1) * T));
  const heads = new Array(B * L * H);
  const head = (b, l, h) => (heads[(b * L + l) * H + h] ??= weighed(run.head(b, l, h), run.valueNormsOf(b, l, h), T));
  const results = run.results.map((item, b) => {
    const { attention: _, ...rest } = Object.getOwnPropertyDescriptors(item);
    const r = Object.defineProperties({}, rest);
    Object.defineProperty(r, 'attention', {
      enumerable: true, configurable: true,
      get() {
        const v = Array.from({ length: L }, (_, l) => Array.from({ length: H }, (_, h) => rows(head(b, l, h))));
        Object.defineProperty(r, 'attention', { value: v, enumerable: true });
        return v;
      },
    });
    return r;
  });
  const out = { ...run, id: `${run.id}v`, results, head, valueWeighted: true, thumb: () => null, probMax: maskedMaxes(head, run.maskOf, B, L, H) };
  runs.set(run, out);
  return out;
}
