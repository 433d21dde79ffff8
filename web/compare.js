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

const alones = new WeakMap(); // run → {b: its item b alone}

/**
 * Item `b` of a padded run on its own, for a pane sized to its sentence (compare mode with two
 * lengths): a run-like view of its real length n (no padding rows or columns) that the head,
 * model and steps views draw; every item index reads item `b`. Each head's attention (and
 * scores) is cropped (n·n) once, when first drawn.
 */
export function alone(run, b) {
  if (!alones.has(run)) alones.set(run, {});
  const kept = alones.get(run);
  if (!kept[b]) kept[b] = cropped(run, b);
  return kept[b];
}

function cropped(run, b) {
  const n = run.results[b].length, T = run.T;
  const crop = (m) => {
    const out = new m.constructor(n * n);
    for (let q = 0; q < n; q++) out.set(m.subarray(q * T, q * T + n), q * n);
    return out;
  };
  /** `get(b, l, h)` (T·T) of item b, cropped to n·n once a head. */
  const cropping = (get) => {
    const kept = new Map();
    return (_, l, h) => {
      const k = l * run.H + h;
      if (!kept.has(k)) kept.set(k, crop(get(b, l, h)));
      return kept.get(k);
    };
  };
  const head = cropping(run.head), scoresOf = run.scoresOf && cropping(run.scoresOf);
  const maxAbs = (a) => a.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
  const masks = new Map(); // each layer's, cropped once (a sliding layer's own)
  const maskOf = (_, l) => { const m = run.maskOf(b, l); if (!masks.has(m)) masks.set(m, crop(m)); return masks.get(m); };
  const item = run.results[b];
  const own = { text: item.text, length: n, tokens: item.tokens.slice(0, n), labels: item.labels.slice(0, n) };
  return {
    id: `${run.id}:${b}`, B: run.B, L: run.L, H: run.H, T: n, scale: run.scale,
    results: run.results.map((r, i) => (i === b ? own : r)),
    head, scoresOf, maskOf, reach: run.reach,
    probMax: (_, l, h) => maxAbs(head(0, l, h)),
    scoreMax: (_, l, h) => maxAbs(scoresOf(0, l, h)),
    thumb: () => null, // the model view pools the cropped heads itself
    metric: (_, name) => run.metric(b, name),
  };
}
