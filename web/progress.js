// How far a run has gone, as the page shows it while the engine works: the layer its pass is on
// and, for a long text, the layer whose heads its summary is computing; and a stop. The worker
// tells the summary's layers in messages; the pass's it cannot (it is busy with the pass), so
// where the wasm memory is shared (the threaded build) the page reads them itself from the
// session's progress cells (src/wasm.rs `Session.progressCells`: the layers begun, the layers, a
// stop request), every POLL_MS, and asks for a stop by writing the third.

const POLL_MS = 100;
/** The page says where a run is at most this often, and first this long after the run began:
 *  each change the box draws costs the page a frame, on the cores the engine's threads use (a
 *  software compositor's ~0.7 s over a 10-s run of SmolLM2 at 1,024 tokens, when it told every
 *  layer), and a keystroke's run (tens of milliseconds) shows no box that flickers off again. */
const TELL_MS = 500;

/**
 * Watches one run: `message(m)` takes its `run-progress` messages (web/engine.js `run`), and
 * `onChange(p)` hears of each change, `p`: {phase: 'pass' | 'heads', done, of, canStop} (`done`
 * of `of` layers begun; `canStop`: a stop can be asked), or null before anything is known and
 * once `done()` is called. `stop()` asks the run to stop before its next layer; it then fails
 * with "stopped as asked".
 */
export function watchRun(onChange) {
  let cells = null, heads = null, timer = 0, told = null, toldAt = performance.now();
  const tell = () => {
    const now = performance.now();
    if (now - toldAt < TELL_MS) return;
    toldAt = now;
    const [begun, layers] = cells ? [Atomics.load(cells, 0), Atomics.load(cells, 1)] : [0, 0];
    const p = heads ? { phase: 'heads', done: heads[0], of: heads[1], canStop: Boolean(cells) }
      : begun > 0 ? { phase: 'pass', done: begun, of: layers, canStop: true } : null;
    const key = p && `${p.phase} ${p.done} ${p.of}`;
    if (key === told) return;
    told = key;
    onChange(p);
  };
  return {
    message(m) {
      if (m.cells) {
        cells = new Int32Array(m.cells.buffer, m.cells.at, 3);
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
 * `#run-status`: its text, a bar, a stop button). Drawn straight from the watcher, not through
 * the store: a change of layer touches this box alone, so the page lays out and paints nothing
 * else while the engine's threads work.
 */
export function render(target, p) {
  target.hidden = !p;
  if (!p) return;
  target.dataset.phase = p.phase;
  target.querySelector('.run-text').textContent = `Computing ${progressLine(p)}…`;
  Object.assign(target.querySelector('progress'), { max: p.of, value: p.done });
  target.querySelector('.stop-run').hidden = !p.canStop;
}
