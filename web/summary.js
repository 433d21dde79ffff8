// Per-head summaries of a run that the views need before drawing: the largest probability (and
// where), the largest |score|, and max-pooled thumbnails of long inputs. The worker computes them
// beside the engine, so the page's main thread never loops over 72 × 512 × 512 values at once.

/** Side of a thumbnail at most: an input longer than this comes pooled. */
export const THUMB = 64;

/**
 * How a T-position head is pooled into a thumbnail: bins of `w` consecutive positions (the last
 * may hold fewer), `side` of them along each axis (at most THUMB). Every bin of a thumbnail is
 * the same `w` positions whatever T is, so a generation's thumbnails grow a row at a time
 * (web/generation.js) as long as `w` stays.
 */
export function thumbBins(T) {
  const w = Math.max(1, Math.ceil(T / THUMB));
  return { w, side: Math.ceil(T / w) };
}

/** Max-pools a T × T head to R × R (R ≥ T: unchanged; {@link pooledFrame} in its own frame),
 *  with the head's maximum and its cell (the model view pools a head to its cell's pixels with it). */
export function pooled(values, mask, T, R) {
  let max = 0, arg = 0;
  for (let i = 0, n = R >= T ? values.length : T * T; i < n; i++) if (values[i] > max) { max = values[i]; arg = i; }
  return R >= T ? { values, mask, n: T, max, arg } : { ...pooledFrame(values, mask, T, R, T), max, arg };
}

/**
 * Max-pools a generation's s × s thumbnail (s ≤ F) to its cell's R pixels (R < s) in the frame of
 * an F × F one: cell (r, c) goes to pixel (⌊r·R/F⌋, ⌊c·R/F⌋), which no later step moves, so a
 * step that adds rows changes only the pixel rows they fall in. Pixel rows [p0, n) of the image,
 * n = ⌈s·R/F⌉ its side: {values, mask (or null), n, rows: n − p0}, row-major, n to a row.
 */
export function pooledFrame(values, mask, s, R, F, p0 = 0) {
  const n = Math.ceil((s * R) / F), rows = Math.max(0, n - p0);
  const out = new Float32Array(rows * n), outMask = mask ? new Uint8Array(rows * n) : null;
  const col = new Int32Array(s);
  for (let c = 0; c < s; c++) col[c] = Math.floor((c * R) / F);
  for (let r = Math.ceil((p0 * F) / R); r < s; r++) {
    const at = (Math.floor((r * R) / F) - p0) * n, row = r * s;
    for (let c = 0; c < s; c++) {
      const v = values[row + c], i = at + col[c];
      if (v > out[i]) out[i] = v;
      if (outMask !== null && mask[row + c] === 1) outMask[i] = 1;
    }
  }
  return { values: out, mask: outMask, n, rows };
}

/**
 * Max-pools a sentence pair's part of a T × T head (`part` {q0, q1, k0, k1}: result.js partOf, its
 * queries q0..q1 over its keys k0..k1) to at most R pixels a side, in bins of `w` positions along
 * both axes (w = ⌈max(nq, nk) / R⌉, so a cell stays square): `{values, mask (or null), rows, cols,
 * w, max, arg}`, row-major, `cols` to a row; `max` the part's largest value and `arg` (q·T + k) where.
 * The values are probabilities: a cell `mask` hides holds 0.
 */
export function pooledPart(values, mask, T, part, R) {
  const nq = part.q1 - part.q0, nk = part.k1 - part.k0, w = Math.max(1, Math.ceil(Math.max(nq, nk) / R));
  const rows = Math.ceil(nq / w), cols = Math.ceil(nk / w);
  const out = new Float32Array(rows * cols), outMask = mask ? new Uint8Array(rows * cols) : null;
  let max = 0, arg = part.q0 * T + part.k0;
  for (let q = 0; q < nq; q++) {
    const at = (part.q0 + q) * T + part.k0, r = Math.floor(q / w) * cols;
    // the row's cells from the first its mask leaves to the last: the others are masked, so hold
    // 0 and change no bin (a causal row's keys past its query are read no more)
    let lo = at, hi = at + nk;
    if (mask !== null) {
      const m = mask.subarray(at, hi), first = m.indexOf(1);
      if (first >= 0) [lo, hi] = [at + first, at + m.lastIndexOf(1) + 1];
    }
    // a bin's w keys of the row at a time: its largest and the first cell that holds it, so the
    // part's largest is the first in row order, as a cell at a time finds it
    for (let c = Math.floor((lo - at) / w), k0 = at + c * w; k0 < hi; c++, k0 += w) {
      const k1 = Math.min(hi, k0 + w), i = r + c;
      let top = -Infinity;
      for (let j = Math.max(k0, lo); j < k1; j++) { const v = values[j]; top = v > top ? v : top; }
      if (top > out[i]) out[i] = top;
      if (top > max) { // a new largest (rarely): the bin's first cell that holds it
        max = top;
        for (arg = k0; values[arg] !== top; arg++);
      }
      if (outMask !== null && outMask[i] === 0) for (let j = Math.max(k0, lo); j < k1; j++) if (mask[j] === 1) { outMask[i] = 1; break; }
    }
  }
  return { values: out, mask: outMask, rows, cols, w, max, arg };
}

/**
 * Folds rows [q0, q1) of a head (row q at `values[q·stride ..]`, over its first `keys` keys, or
 * up to its diagonal when `causal`: a causal mask's zeros change no maximum) into a thumbnail
 * (`out`, side × side, bins of `w` positions as {@link thumbBins} gives them) and into `best`
 * ({max, q, k}: the first largest in row order). With `causal`, `outMask` (or null) gets 1 where
 * a bin has a cell the causal mask leaves. The engine pools a long text's heads the same way
 * (src/analysis/thumbnail.rs).
 */
export function foldRows(values, stride, q0, q1, keys, { w, side }, out, outMask, best, causal = false) {
  for (let q = q0; q < q1; q++) {
    const at = q * stride, r = Math.floor(q / w) * side, n = causal ? Math.min(q + 1, keys) : keys;
    for (let c = 0, k = 0; k < n; c++) {
      const end = Math.min(k + w, n);
      let m = out[r + c];
      for (; k < end; k++) {
        const v = values[at + k];
        if (v > m) m = v;
        if (v > best.max) { best.max = v; best.q = q; best.k = k; }
      }
      out[r + c] = m;
    }
    if (outMask !== null && causal) outMask.fill(1, r, r + Math.floor((n - 1) / w) + 1);
  }
}

/** Item `b`'s T × T of `mask` `(B, T, T)` (1: attended) pooled into its side × side of
 *  `thumbMask` `(B, side, side)` (bins as {@link thumbBins} gives them): 1 where a bin has an
 *  attended cell. */
function poolMask(mask, b, T, { w, side }, thumbMask) {
  const out = thumbMask.subarray(b * side * side, (b + 1) * side * side);
  mask = mask.subarray(b * T * T, (b + 1) * T * T);
  for (let q = 0; q < T; q++) {
    const at = q * T, r = Math.floor(q / w) * side;
    // a bin of keys at a time: the first attended cell in it marks it
    for (let c = 0, k0 = 0; k0 < T; c++, k0 += w) {
      const end = Math.min(k0 + w, T);
      for (let k = k0; k < end; k++) if (mask[at + k] === 1) { out[r + c] = 1; break; }
    }
  }
}

/**
 * Every head of a run of `shape` `(B, L, H, T)`, `head(b, l, h)` its T·T probabilities and
 * `scoresOf(b, l, h)` its scores (null: none), under `mask` `(B, T, T)`:
 * `{R, thumbs (B·L·H·R·R) | null, thumbMask (B·R·R) | null, probMax, probArg, scoreMax (B·L·H)}`,
 * R the thumbnails' side ({@link thumbBins}) past THUMB positions, else 0 (no thumbnails).
 */
export function summarise(head, scoresOf, mask, shape) {
  const [B, L, H] = shape, fold = headsSummary(mask, shape);
  for (let b = 0, i = 0; b < B; b++) {
    for (let l = 0; l < L; l++) for (let h = 0; h < H; h++, i++) fold.add(i, head(b, l, h), scoresOf ? scoresOf(b, l, h) : null);
  }
  return fold.done();
}

/**
 * The summary of {@link summarise} as the engine folds it with a run it holds whole (src/wasm.rs
 * `heads_summary`: the same values, computed on its threads), `mask` `(B, T, T)` pooled here
 * for its thumbnails.
 */
export function engineSummary({ side, thumbs, probMax, probArg, scoreMax }, mask, [B, , , T]) {
  const R = side, bins = thumbBins(T);
  const thumbMask = R ? new Uint8Array(B * R * R) : null;
  for (let b = 0; R && b < B; b++) poolMask(mask, b, T, bins, thumbMask);
  // (q·T + k < 2³¹: the same bits read as signed)
  return { R, thumbs: R ? thumbs : null, thumbMask, probMax, probArg: new Int32Array(probArg.buffer, probArg.byteOffset, probArg.length), scoreMax };
}

/**
 * The summary of {@link summarise} built a head at a time: `add(i, probs, scores | null)` for
 * heads i = (b·L + l)·H + h in that order, or `folded(i, …)` for heads the engine folded, then
 * `done()` gives it (a long run's heads come from the engine folded, with their first key
 * hidden beside them: web/worker.js `longSummary`). `pooled`: another summary's `thumbMask` over
 * the same mask, which this one shares (filled by the other's heads before this one's).
 */
export function headsSummary(mask, [B, L, H, T], pooled = null) {
  const heads = B * L * H, n = T * T;
  const probMax = new Float32Array(heads), probArg = new Int32Array(heads), scoreMax = new Float32Array(heads);
  const bins = thumbBins(T), R = T > THUMB ? bins.side : 0;
  const thumbs = R ? new Float32Array(heads * R * R) : null;
  const thumbMask = R ? pooled ?? new Uint8Array(B * R * R) : null;
  /** The mask pooled once an item, with its first head (by the summary that owns it). */
  const maskFor = (i) => {
    if (i % (L * H) === 0 && !pooled) poolMask(mask, Math.floor(i / (L * H)), T, bins, thumbMask);
  };
  return {
    add(i, p, s) {
      if (R) {
        const best = { max: 0, q: 0, k: 0 };
        foldRows(p, T, 0, T, T, bins, thumbs.subarray(i * R * R, (i + 1) * R * R), null, best);
        maskFor(i);
        probMax[i] = best.max; probArg[i] = best.q * T + best.k;
      } else {
        let max = 0, arg = 0;
        for (let j = 0; j < n; j++) if (p[j] > max) { max = p[j]; arg = j; }
        probMax[i] = max; probArg[i] = arg;
      }
      if (s) {
        let smax = 0;
        for (let j = 0; j < n; j++) { const v = s[j]; if (v > smax) smax = v; else if (-v > smax) smax = -v; }
        scoreMax[i] = smax;
      }
    },
    /**
     * Heads i, i + 1, … as the engine folded them (src/wasm.rs `Session.summaryHeads`),
     * `max.length` of them: their thumbnails side by side (each R × R, pooled as
     * {@link foldRows} pools), largest probabilities and where (q·T + k) (the thumbnails left
     * out where the run has none: T ≤ THUMB). Their largest |score| stays 0: a long run's comes
     * with its head (result.js `longHead`).
     */
    folded(i, thumb, max, arg) {
      if (R) {
        thumbs.set(thumb, i * R * R);
        for (let j = i; j < i + max.length; j++) maskFor(j);
      }
      probMax.set(max, i); probArg.set(arg, i);
    },
    done: () => ({ R, thumbs, thumbMask, probMax, probArg, scoreMax }),
    thumbMask,
  };
}

/** Head (b, l, h) of a summary of {@link summarise}'s as a thumbnail: `{values, mask, n, max, arg}`
 *  (null when the summary has none: a short input's views pool the heads themselves). */
export function thumbOf(summary, [, L, H], b, l, h) {
  if (!summary?.R) return null;
  const { R } = summary, i = (b * L + l) * H + h;
  return { values: summary.thumbs.subarray(i * R * R, (i + 1) * R * R), mask: summary.thumbMask.subarray(b * R * R, (b + 1) * R * R), n: R, max: summary.probMax[i], arg: summary.probArg[i] };
}

/**
 * `probMax(b, l, h)` for a run whose heads are made on demand (words.js, sink.js): the largest
 * value of head `head(b, l, h)` over item b's unmasked cells (`maskOf(b)`), computed once each.
 */
export function maskedMaxes(head, maskOf, B, L, H) {
  const maxes = new Float32Array(B * L * H).fill(-1);
  return (b, l, h) => {
    const i = (b * L + l) * H + h;
    if (maxes[i] < 0) {
      const v = head(b, l, h), m = maskOf(b);
      let max = 0;
      for (let j = 0; j < v.length; j++) if (m[j] && v[j] > max) max = v[j];
      maxes[i] = max;
    }
    return maxes[i];
  };
}
