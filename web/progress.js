// How far a run has gone, as the page shows it while the engine works: the layer its pass is on
// and, for a long text, the layer whose heads its summary is computing; and a stop. The worker
// tells the summary's layers in messages; the pass's it cannot (it is busy with the pass), so
// where the wasm memory is shared (the threaded build) the page reads them itself from the
// session's progress cells (src/wasm.rs `Session.progressCells`: the layers begun, the layers, a
// stop request, then the layers whose heads a long pass has folded whole, their thumbnails'
// side, the heads a layer and where the thumbnails lie), every POLL_MS, and asks for a stop by
// writing the third. A long text's pass on the CPU engine folds each head's thumbnail as it
// computes it, so the box draws each layer's heads as the pass ends the layer: the text's first
// attention on screen while the later layers compute. A WebGPU pass tells each layer as the GPU
// begins it and folds no heads; its summary computes each head again from the queries and keys,
// and the box draws each layer as the summary ends it.

import { scale, pixels } from './colour.js';
import { dpr, bitmap } from './canvas.js';
import { pooledFrame } from './summary.js';

const POLL_MS = 100;
/** The page says where a run is at most this often, and first this long after the run began:
 *  each change the box draws costs the page a frame, on the cores the engine's threads use (a
 *  software compositor's ~0.7 s over a 10-s run of SmolLM2 at 1,024 tokens, when it told every
 *  layer), and a keystroke's run (tens of milliseconds) shows no box that flickers off again. */
const TELL_MS = 500;

/** The progress cells (`u32` each, src/engine/progress.rs `PassProgress`): the layers begun, the
 *  layers, a stop request, the layers folded, their thumbnails' side, the heads a layer, and the
 *  thumbnails' byte address. */
const CELLS = 7;

/** The heads of the layers a long pass has folded so far, from `cells` in `buffer`:
 *  {layers, of, heads, side, values (Float32Array over the shared memory, `(layers, heads, side,
 *  side)`: read at once, the next pass writes over them)}, or null. */
function foldedOf(cells, buffer, of) {
  const layers = Atomics.load(cells, 3); // (written last, after the thumbnails)
  if (layers === 0) return null;
  const side = cells[4], heads = cells[5], at = cells[6] >>> 0, n = layers * heads * side * side;
  if (side === 0 || heads === 0 || at === 0 || at + 4 * n > buffer.byteLength) return null;
  return { layers, of, heads, side, values: new Float32Array(buffer, at, n) };
}

/**
 * Watches one run: `message(m)` takes its `run-progress` messages (web/engine.js `run`), and
 * `onChange(p)` hears of each change, `p`: {phase: 'pass' | 'heads', done, of, canStop, folded}
 * (`done` of `of` layers begun; `canStop`: a stop can be asked; `folded`: the heads of each
 * layer the pass has ended, as `foldedOf` reads them, or null), or null before anything is known
 * and once `done()` is called. `stop()` asks the run to stop before its next layer; it then fails
 * with "stopped as asked".
 */
export function watchRun(onChange) {
  let cells = null, buffer = null, heads = null, timer = 0, told = null, toldAt = performance.now();
  const tell = () => {
    const now = performance.now();
    if (now - toldAt < TELL_MS) return;
    toldAt = now;
    const [begun, layers] = cells ? [Atomics.load(cells, 0), Atomics.load(cells, 1)] : [0, 0];
    const folded = cells ? foldedOf(cells, buffer, layers) : null;
    const p = heads ? { phase: 'heads', done: heads[0], of: heads[1], canStop: Boolean(cells), folded }
      : begun > 0 ? { phase: 'pass', done: begun, of: layers, canStop: true, folded } : null;
    const key = p && `${p.phase} ${p.done} ${p.of} ${p.folded?.layers ?? 0}`;
    if (key === told) return;
    told = key;
    onChange(p);
  };
  return {
    message(m) {
      if (m.cells) {
        cells = new Int32Array(m.cells.buffer, m.cells.at, CELLS);
        buffer = m.cells.buffer;
        clearInterval(timer);
        timer = setInterval(tell, POLL_MS);
      }
      if (m.heads) heads = m.heads;
      tell();
    },
    stop() { if (cells) Atomics.store(cells, 2, 1); },
    done() {
      clearInterval(timer);
      cells = null;
      if (told !== null) { told = null; onChange(null); }
    },
  };
}

/** What a run's progress says in a few words: "layer 12 of 30", "the heads of layer 3 of 30". */
export function progressLine(p) {
  return p.phase === 'pass' ? `layer ${p.done} of ${p.of}` : `the heads of layer ${p.done + 1} of ${p.of}`;
}

/**
 * The box that shows a run's progress `p` (or nothing: null), over the page (index.html
 * `#run-status`: the heads of the layers the pass has ended, its text, a bar, a stop button).
 * Drawn straight from the watcher, not through the store: a change of layer touches this box
 * alone, so the page lays out and paints nothing else while the engine's threads work.
 */
export function render(target, p, { scale: by = 'absolute' } = {}) {
  target.hidden = !p;
  const figure = target.querySelector('.run-layers');
  figure.hidden = !p?.folded;
  if (!p) {
    delete figure.querySelector('canvas').dataset.key; // the next run's drawn afresh
    return;
  }
  target.dataset.phase = p.phase;
  target.querySelector('.run-text').textContent = `Computing ${progressLine(p)}…`;
  Object.assign(target.querySelector('progress'), { max: p.of, value: p.done });
  target.querySelector('.stop-run').hidden = !p.canStop;
  if (p.folded) drawFolded(figure, p.folded, by);
}

/** The largest and smallest side of a head's square in the box, in CSS pixels. */
const CELL_MAX = 16, CELL_MIN = 3;

/** A layer's slot before the pass has ended it. */
const SLOT = '#e5e7eb';

/**
 * The heads of the layers folded so far (`f`: foldedOf's), a column a layer from the left (as the
 * bar fills) and a square a head from the top, each its thumbnail max-pooled to the square's
 * device pixels and coloured as the grid pools and colours it on the page's scale (`by`:
 * 'absolute', white 0 to dark 1, or 'head', to each head's largest); the layers not yet ended are
 * grey slots. Only the layers not drawn yet are drawn.
 */
function drawFolded(figure, f, by) {
  const canvas = figure.querySelector('canvas'), r = dpr(), gap = 1;
  const cell = Math.max(CELL_MIN, Math.min(CELL_MAX, Math.floor(Math.min((innerWidth - 48) / f.of - gap, (innerHeight * 0.25) / f.heads - gap))));
  const key = `${f.of}x${f.heads}x${f.side}x${cell}x${r}x${by}`;
  const at = (i) => Math.round(i * (cell + gap) * r), px = Math.round(cell * r);
  const ctx = canvas.getContext('2d');
  if (canvas.dataset.key !== key || f.layers < +canvas.dataset.layers) {
    const w = f.of * (cell + gap) - gap, h = f.heads * (cell + gap) - gap;
    Object.assign(canvas, { width: Math.round(w * r), height: Math.round(h * r) });
    Object.assign(canvas.style, { width: `${w}px`, height: `${h}px` });
    Object.assign(canvas.dataset, { key, layers: 0 });
    ctx.fillStyle = SLOT;
    for (let l = 0; l < f.of; l++) for (let h = 0; h < f.heads; h++) ctx.fillRect(at(l), at(h), px, px);
  }
  ctx.imageSmoothingEnabled = false; // (after a resize, which resets it)
  const absolute = scale('probability'), n = f.side * f.side;
  for (let l = +canvas.dataset.layers; l < f.layers; l++) {
    for (let h = 0; h < f.heads; h++) {
      const from = (l * f.heads + h) * n, values = f.values.subarray(from, from + n);
      // (a thumbnail's largest bin is its head's largest probability)
      const sc = by === 'head' ? scale('probability', { max: values.reduce((m, v) => (v > m ? v : m), 0) }) : absolute;
      // (as the grid draws a thumbnail wider than its cell: web/views/grid.js)
      const p = px < f.side ? pooledFrame(values, null, f.side, px, f.side) : { values, n: f.side };
      const image = pixels(p.values, p.n, sc);
      if (p.n === px) ctx.putImageData(image, at(l), at(h));
      else ctx.drawImage(bitmap(image), at(l), at(h), px, px);
    }
  }
  canvas.dataset.layers = f.layers;
  figure.querySelector('figcaption').textContent = `The heads of ${f.layers === 1 ? 'layer 1' : `layers 1–${f.layers}`} of ${f.of}, as each layer is done: a column a layer, a square a head`;
}
