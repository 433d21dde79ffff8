// Colour scales, one per meaning, colour-blind safe (ColorBrewer), as 256-step lookup tables so
// a pixel, an SVG rect and a legend show exactly the same colour for the same value.
//
//   probability: sequential "Blues", white (0) → dark blue (1)
//   score:       diverging "RdBu" reversed, red (−max) → white (0) → blue (+max)
//   metric:      sequential "Oranges", a head metric from its lowest to its highest value
//   difference:  the score scale's RdBu, for ΔA between two sentences (−max → 0 → +max)
//   masked:      a neutral grey (and hatched wherever a cell is large enough)

const BLUES = ['#f7fbff', '#deebf7', '#c6dbef', '#9ecae1', '#6baed6', '#4292c6', '#2171b5', '#08519c', '#08306b'];
const ORANGES = ['#fff5eb', '#fee6ce', '#fdd0a2', '#fdae6b', '#fd8d3c', '#f16913', '#d94801', '#a63603', '#7f2704'];
const RDBU = ['#b2182b', '#d6604d', '#f4a582', '#fddbc7', '#f7f7f7', '#d1e5f0', '#92c5de', '#4393c3', '#2166ac'];
export const STEPS = 256;
export const MASKED = [176, 180, 188]; // #b0b4bc
export const MASKED_CSS = '#b0b4bc';

const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));

function lut(stops) {
  const c = stops.map(rgb);
  const out = new Array(STEPS);
  for (let i = 0; i < STEPS; i++) {
    const x = (i / (STEPS - 1)) * (c.length - 1);
    const j = Math.min(c.length - 2, Math.floor(x));
    const f = x - j;
    out[i] = c[j].map((v, ch) => Math.round(v + (c[j + 1][ch] - v) * f));
  }
  return out;
}

function packed(table) { // little-endian RGBA words for Uint32Array pixel writes
  return Uint32Array.from(table, ([r, g, b]) => (255 << 24) | (b << 16) | (g << 8) | r);
}

/** A head metric's scale: `lo` → `hi` in "Oranges", labelled `label`. */
export function metricScale(lo, hi, label) {
  const top = STEPS - 1;
  const span = hi > lo ? hi - lo : 1;
  const mul = top / span, add = 0.5 - lo * mul;
  const index = (v) => Math.max(0, Math.min(top, Math.floor(v * mul + add)));
  return { kind: 'metric', max: hi, min: lo, table: METRIC.rgb, words: METRIC.words, index, mul, add, label };
}

/** A scale maps a value to one of STEPS colours. `kind`: 'probability' | 'score' | 'difference'. */
export function scale(kind, { max = 1 } = {}) {
  if (kind === 'difference') return { ...scale('score', { max }), kind, label: 'ΔA: second sentence − first' };
  const table = kind === 'score' ? DIVERGING : SEQUENTIAL;
  const m = max > 0 ? max : 1;
  const top = STEPS - 1;
  const mul = kind === 'score' ? top / (2 * m) : top / m;
  const add = kind === 'score' ? top / 2 + 0.5 : 0.5;
  const index = (v) => Math.max(0, Math.min(top, Math.floor(v * mul + add)));
  return {
    kind, max: m, table: table.rgb, words: table.words, index, mul, add,
    min: kind === 'score' ? -m : 0,
    label: kind === 'score' ? 'score QKᵀ/√d_k' : (max === 1 ? 'attention probability' : 'attention probability (scaled to this head\'s max)'),
  };
}

export const css = ([r, g, b]) => `rgb(${r},${g},${b})`;

/** WCAG 2 relative luminance of an [r, g, b] colour (0 black … 1 white). */
export function luminance(rgb) {
  const [r, g, b] = rgb.map((v) => { const c = v / 255; return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/** WCAG 2 contrast ratio of two [r, g, b] colours (1 … 21). */
export function contrastRatio(a, b) {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

/** The text colour for a cell of colour `rgb`: black or white, whichever contrasts more (at
 *  least 4.58 : 1 on any background, WCAG AA for small text). */
export function inkOn(rgb) {
  return contrastRatio(rgb, [0, 0, 0]) >= contrastRatio(rgb, [255, 255, 255]) ? '#000000' : '#ffffff';
}
export const hex = ([r, g, b]) => '#' + [r, g, b].map((v) => v.toString(16).padStart(2, '0')).join('');

const SEQ = lut(BLUES);
const DIV = lut(RDBU);
const SEQUENTIAL = { rgb: SEQ, words: packed(SEQ) };
const DIVERGING = { rgb: DIV, words: packed(DIV) };
const MET = lut(ORANGES);
const METRIC = { rgb: MET, words: packed(MET) };
const MASKED_WORD = packed([MASKED])[0];

/** Nearest step of `table` to an [r, g, b] colour: how tests read a colour back. */
export function stepOf(kind, [r, g, b]) {
  const table = ({ score: DIVERGING, difference: DIVERGING, metric: METRIC }[kind] ?? SEQUENTIAL).rgb;
  let best = 0, bestD = Infinity;
  table.forEach(([tr, tg, tb], i) => {
    const d = (tr - r) ** 2 + (tg - g) ** 2 + (tb - b) ** 2;
    if (d < bestD) { bestD = d; best = i; }
  });
  return best;
}

/**
 * An n × cols matrix (square unless `cols` is given) as RGBA pixels (one pixel a cell), masked
 * cells grey. `values`: Float32Array (n·cols, row-major); `mask`: Uint8Array (1 = allowed) or null.
 */
export function pixels(values, n, sc, mask = null, cols = n) {
  const out = new Uint32Array(n * cols);
  const { words, mul, add } = sc, top = STEPS - 1;
  // sc.index, inlined: this loop runs over 262,144 cells at 512 tokens
  for (let i = 0; i < out.length; i++) {
    if (mask !== null && mask[i] === 0) { out[i] = MASKED_WORD; continue; }
    let j = Math.floor(values[i] * mul + add);
    j = j < 0 ? 0 : j > top ? top : j;
    out[i] = words[j];
  }
  return new ImageData(new Uint8ClampedArray(out.buffer), cols, n);
}

/** A scale for a 0/1 matrix (a mask): `off` at 0, `on` at 1, through the same pixels() loop. */
export function twoColour(on, off) {
  const words = new Uint32Array(STEPS).fill(packed([off])[0]);
  words[STEPS - 1] = packed([on])[0];
  return { kind: 'mask', max: 1, words, mul: STEPS - 1, add: 0.5 };
}
