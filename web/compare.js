// Compare mode: two sentences run as one batch (item 0 and item 1). When they tokenise to the
// same length, ΔA = A(second) − A(first) is defined cell by cell: the grid is coloured by each
// head's max |ΔA| and the head view shows ΔA. When they do not, there is no cell-by-cell ΔA and
// the page shows the two side by side.

/**
 * `run`: a result with two items. Returns null when it has fewer, else `{same, lengths, delta(l, h),
 * maxAbs(l, h), maxAll}`: `same` when both have the same real length (no padding), `delta` a
 * Float32Array (T·T) and `maxAbs` its largest |value| (both only when `same`).
 */
const memo = new WeakMap();

export function compareOf(run) {
  if (!memo.has(run)) memo.set(run, compute(run));
  return memo.get(run);
}

function compute(run) {
  if (run.B < 2) return null;
  const lengths = [0, 1].map((b) => run.results[b].length);
  const same = lengths[0] === lengths[1] && lengths[0] === run.T;
  if (!same) return { same, lengths };
  const cache = new Map();
  const delta = (l, h) => {
    const k = l * run.H + h;
    if (!cache.has(k)) {
      const a = run.head(0, l, h), b = run.head(1, l, h);
      const d = new Float32Array(a.length);
      let max = 0;
      for (let i = 0; i < a.length; i++) { d[i] = b[i] - a[i]; max = Math.max(max, Math.abs(d[i])); }
      cache.set(k, { d, max });
    }
    return cache.get(k);
  };
  let maxAll = 0;
  for (let l = 0; l < run.L; l++) for (let h = 0; h < run.H; h++) maxAll = Math.max(maxAll, delta(l, h).max);
  return { same, lengths, delta: (l, h) => delta(l, h).d, maxAbs: (l, h) => delta(l, h).max, maxAll };
}

/** Cosine similarity of two vectors (0 when either is zero). */
export function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return na && nb ? dot / Math.sqrt(na * nb) : 0;
}
