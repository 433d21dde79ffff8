// Token selection: the query rows a reader picked (sorted indices), and their rows of a head
// summed and renormalised into one distribution over the keys.

/** Click `q`: only it; with `add` (shift-click): `q` joins the selection, or leaves it. Sorted. */
export function pick(sel, q, add) {
  if (!add) return [q];
  return sel.includes(q) ? sel.filter((x) => x !== q) : [...sel, q].sort((a, b) => a - b);
}

/** The selection within T tokens (the same array when nothing falls outside). */
export function clampSel(sel, T) {
  return sel.every((q) => q < T) ? sel : sel.filter((q) => q < T);
}

/**
 * The selected rows of a T × `nk` head (`values` row-major, `mask` 1 = allowed, or null; a square
 * head's nk is T), summed and divided by their number: `{rows, combined: Float32Array (nk), mask:
 * Uint8Array (nk) | null}`, a key allowed when any selected row may attend to it. Null without a
 * row inside T.
 */
export function combine(values, mask, T, sel, nk = T) {
  const rows = clampSel(sel, T);
  if (!rows.length) return null;
  const sum = new Float64Array(nk);
  const allowed = mask ? new Uint8Array(nk) : null;
  for (const q of rows) {
    for (let k = 0; k < nk; k++) {
      sum[k] += values[q * nk + k];
      if (allowed && mask[q * nk + k]) allowed[k] = 1;
    }
  }
  const combined = new Float32Array(nk);
  for (let k = 0; k < nk; k++) combined[k] = sum[k] / rows.length;
  return { rows, combined, mask: allowed };
}

/** The `n` largest keys of a combined row: `[{k, p}]`, strongest first. */
export function topKeys(combined, n = 3, mask = null) {
  const ks = [];
  for (let k = 0; k < combined.length; k++) if (!mask || mask[k]) ks.push(k);
  return ks.sort((a, b) => combined[b] - combined[a]).slice(0, n).map((k) => ({ k, p: combined[k] }));
}
