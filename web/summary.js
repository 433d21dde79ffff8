// Per-head summaries of a run that the views need before drawing: the largest probability (and
// where), the largest |score|, and max-pooled thumbnails of long inputs. The worker computes them
// beside the engine, so the page's main thread never loops over 72 × 512 × 512 values at once.

/** Side of a pooled thumbnail: inputs longer than this come pooled. */
export const THUMB = 64;

/** Max-pools a T × T head to R × R (R ≥ T: unchanged), with the head's maximum and its cell. */
export function pooled(values, mask, T, R) {
  let max = 0, arg = 0;
  if (R >= T) {
    for (let i = 0; i < values.length; i++) if (values[i] > max) { max = values[i]; arg = i; }
    return { values, mask, n: T, max, arg };
  }
  const col = new Int32Array(T);
  for (let k = 0; k < T; k++) col[k] = Math.floor((k * R) / T);
  const out = new Float32Array(R * R);
  const outMask = mask ? new Uint8Array(R * R) : null;
  for (let q = 0; q < T; q++) {
    const r = Math.floor((q * R) / T) * R, row = q * T;
    for (let k = 0; k < T; k++) {
      const v = values[row + k], i = r + col[k];
      if (v > out[i]) out[i] = v;
      if (v > max) { max = v; arg = row + k; }
      if (outMask !== null && mask[row + k] === 1) outMask[i] = 1;
    }
  }
  return { values: out, mask: outMask, n: R, max, arg };
}


/**
 * Everything of `raw` (the wasm run: attention and scores `(B, L, H, T, T)`, mask `(B, T, T)`):
 * `{R, thumbs (B·L·H·R·R) | null, thumbMask (B·R·R) | null, probMax, probArg, scoreMax (B·L·H)}`.
 */
export function summarise(attention, scores, mask, [B, L, H, T]) {
  const heads = B * L * H, n = T * T;
  const probMax = new Float32Array(heads), probArg = new Int32Array(heads), scoreMax = new Float32Array(heads);
  const R = T > THUMB ? THUMB : 0;
  const thumbs = R ? new Float32Array(heads * R * R) : null;
  const thumbMask = R ? new Uint8Array(B * R * R) : null;
  for (let i = 0; i < heads; i++) {
    const b = Math.floor(i / (L * H));
    const m = mask.subarray(b * n, (b + 1) * n);
    const p = attention.subarray(i * n, (i + 1) * n);
    if (R) {
      const t = pooled(p, i % (L * H) === 0 ? m : null, T, R); // the mask pooled once an item
      thumbs.set(t.values, i * R * R);
      if (i % (L * H) === 0) thumbMask.set(t.mask, b * R * R);
      probMax[i] = t.max; probArg[i] = t.arg;
    } else {
      let max = 0, arg = 0;
      for (let j = 0; j < n; j++) if (p[j] > max) { max = p[j]; arg = j; }
      probMax[i] = max; probArg[i] = arg;
    }
    if (scores) {
      const s = scores.subarray(i * n, (i + 1) * n);
      let smax = 0;
      for (let j = 0; j < n; j++) { const v = s[j]; if (v > smax) smax = v; else if (-v > smax) smax = -v; }
      scoreMax[i] = smax;
    }
  }
  return { R, thumbs, thumbMask, probMax, probArg, scoreMax };
}
