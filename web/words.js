// Words, not word pieces: a run whose tokens are words. Pieces join by the tokenizer's own word
// boundaries (`word_ids`: `play ##ing` → `playing`, `Ġfl ies` → ` flies`), or, for a run without
// them, WordPiece continuations (`##…`) join the token before them. Attention *to* a word is the sum over its pieces
// (columns), attention *from* a word the mean over its pieces (rows), so every row still sums to 1.
// Each item of a padded batch merges its own pieces; T is the longest item's word count and the
// shorter items' extra rows and columns are masked. Heads are merged lazily, once each.

import { maskedMaxes } from './summary.js';

const SPECIAL = /^\[[A-Z]+\]$/; // [CLS], [SEP], [PAD], [UNK], [MASK]: never merged into

/**
 * The words of one item (a result: `tokens`, and `labels` and `word_ids` where the run has them):
 * `{labels: string[], of: Int32Array (T, piece → word), pieces: number[][] (word → its piece
 * indices)}`. A piece joins the one before it when both belong to the same word (`word_ids`, the
 * tokenizer's; `null` for a special token, which never joins), else when it is a `##`
 * continuation.
 */
export function groupsOf(item) {
  const tokens = item.tokens, shown = item.labels ?? tokens, ids = item.word_ids;
  const labels = [], pieces = [], of = new Int32Array(tokens.length);
  tokens.forEach((t, i) => {
    const joins = i > 0 && (ids
      ? i < ids.length && ids[i] != null && ids[i] === ids[i - 1]
      : t.length > 2 && t.startsWith('##') && !SPECIAL.test(tokens[i - 1]));
    const text = shown[i].replace(/^##/, ''); // a WordPiece continuation joins without its marks
    if (joins) { labels[labels.length - 1] += text; pieces[pieces.length - 1].push(i); }
    else { labels.push(shown[i]); pieces.push([i]); }
    of[i] = labels.length - 1;
  });
  return { labels: labels.map((l) => (l.trim() ? l.trim() : l)), of, pieces };
}

/**
 * A T × T piece matrix (rows sum to 1) as a W × W word matrix: columns summed over a word's pieces,
 * rows averaged. `g`: groupsOf(tokens); words past `g.labels.length` stay 0.
 */
export function mergeMatrix(values, T, g, W) {
  const out = new Float32Array(W * W);
  const { of, pieces } = g;
  for (let q = 0; q < T; q++) {
    const r = of[q] * W, row = q * T;
    for (let k = 0; k < T; k++) out[r + of[k]] += values[row + k];
  }
  for (let w = 0; w < pieces.length; w++) {
    const n = pieces[w].length;
    if (n > 1) for (let j = w * W, e = j + W; j < e; j++) out[j] /= n;
  }
  return out;
}

/** A piece mask (T·T, 1 = allowed) as a word mask: a word cell is allowed when any piece pair is. */
export function mergeMask(mask, T, g, W) {
  const out = new Uint8Array(W * W);
  const { of } = g;
  for (let q = 0; q < T; q++) {
    const r = of[q] * W, row = q * T;
    for (let k = 0; k < T; k++) if (mask[row + k]) out[r + of[k]] = 1;
  }
  return out;
}

function lazy(obj, key, make) {
  Object.defineProperty(obj, key, {
    enumerable: true, configurable: true,
    get() { const v = make(); Object.defineProperty(obj, key, { value: v, enumerable: true }); return v; },
  });
}

const runs = new WeakMap();

/**
 * `run`: the result contract (result.js `fromWorker`). Returns a run with the same interface at
 * word level (the same heads and ids when no item has a `##` piece): `head(b, l, h)` and `maskOf(b)` W·W, `T` = W,
 * `results[b]` = `{text, tokens: words, pieces: number[][], length, truncated, attention, mask}`,
 * `probMax`, `thumb` → null (views pool themselves), `scoresOf` → null (the steps view keeps the
 * piece run), `rolloutOf(b)` merged like a head, and `words(b)` = the item's groupsOf.
 * Cached per run.
 */
export function wordsOf(run) {
  if (runs.has(run)) return runs.get(run);
  const T = run.T;
  const groups = run.results.map((r) => groupsOf(r));
  const W = Math.max(...groups.map((g) => g.labels.length));
  let out = run;
  if (groups.some((g) => g.labels.length < T)) {
    const { B, L, H } = run;
    const heads = new Array(B * L * H);
    const masks = new Array(B);
    const rollouts = new Map();
    const head = (b, l, h) => {
      const i = (b * L + l) * H + h;
      return (heads[i] ??= mergeMatrix(run.head(b, l, h), T, groups[b], W));
    };
    const maskOf = (b) => (masks[b] ??= mergeMask(run.maskOf(b), T, groups[b], W));
    const rows = (m) => Array.from({ length: W }, (_, q) => m.subarray(q * W, (q + 1) * W));
    const results = run.results.map((item, b) => {
      const g = groups[b];
      const labels = g.labels.concat(Array(W - g.labels.length).fill('[PAD]'));
      const real = item.length ?? T; // the item's pieces before its padding
      const r = { text: item.text, pair: item.pair, tokens: labels, labels, pieces: g.pieces, length: real >= T ? g.labels.length : g.of[real - 1] + 1, truncated: item.truncated };
      if (Number.isInteger(item.sentence_b_start)) r.sentence_b_start = g.of[item.sentence_b_start]; // the word its first piece is in
      lazy(r, 'attention', () => Array.from({ length: L }, (_, l) => Array.from({ length: H }, (_, h) => rows(head(b, l, h)))));
      lazy(r, 'mask', () => rows(maskOf(b)).map((row) => Array.from(row)));
      return r;
    });
    out = {
      ...run,
      id: `${run.id}w`, T: W, shape: [B, L, H, W, W], results, head, maskOf, words: (b) => groups[b], pieceRun: run,
      scoresOf: () => null,
      scoresIn: () => null,
      scoreMax: () => 0,
      thumb: () => null,
      probMax: maskedMaxes(head, maskOf, B, L, H),
      rolloutOf(b) {
        const piece = run.rolloutOf?.(b);
        if (!piece) return null;
        if (!rollouts.has(b)) rollouts.set(b, mergeMatrix(piece, T, groups[b], W));
        return rollouts.get(b);
      },
    };
  } else {
    out = { ...run, words: (b) => groups[b], pieceRun: run };
    // the same heads, tokens and ids: the views' caches stay valid
  }
  runs.set(run, out);
  return out;
}

/**
 * A selection of query rows (sorted indices) carried across "words": to words, each piece's word;
 * back to pieces, every piece of each word. `b`: the item whose tokens the indices refer to.
 */
export function carrySel(run, b, sel, toWords) {
  const g = wordsOf(run).words(b);
  const out = toWords ? sel.filter((q) => q < g.of.length).map((q) => g.of[q]) : sel.flatMap((w) => g.pieces[w] ?? []);
  return [...new Set(out)].sort((x, y) => x - y);
}
