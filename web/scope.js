// What the page and every <attn-scope> element share: loading a checkpoint, running the engine
// whenever the input changes (at once when it is idle, the latest input when it frees up), and
// rendering the views that are shown, each in its own task so none blocks the page.

import { engine, DEFAULT_MODEL } from './engine.js';
import { MAX_BATCH } from './store.js';
import { measure } from './canvas.js';
import * as grid from './views/grid.js';
import * as head from './views/head.js';
import * as lines from './views/lines.js';
import * as steps from './views/steps.js';

export const VIEWS = { model: grid, head, lines, steps };

/** The texts a state asks to run: the sentence, or up to MAX_BATCH non-blank lines. */
export function textsOf(s) {
  const t = s.batch ? s.sentences.filter((x) => x.trim()).slice(0, MAX_BATCH) : s.sentences.slice(0, 1).filter((x) => x.trim());
  return t;
}

/** A model source for a state: `{key, name, base}` of its URL, or the default. */
export function urlSource(url) {
  const base = url ? new URL(url, location.href).href : DEFAULT_MODEL;
  const name = url ? base.replace(/\/+$/, '').split('/').pop() || base : 'all-MiniLM-L6-v2';
  return { key: base, name, base };
}

const nextTask = () => new Promise((r) => setTimeout(r, 0));

/**
 * Connects a store to the engine and to view containers.
 * `targets`: {model?, head?, lines?, steps?} elements; `layout(state)` → per-view options
 * (sizes, fonts). Returns {loadModel(source, opts), check()}.
 */
export function connect(store, { targets, layout, dropOld = true }) {
  const eng = engine();
  let loads = 0;
  let running = false, again = false;

  async function run() {
    const s = store.get();
    if (!s.modelKey) return;
    if (running) { again = true; return; }
    const texts = textsOf(s);
    if (!texts.length) { store.update({ run: null, busy: false, runError: { line: 'Type a sentence: there is nothing to attend to yet.' } }); return; }
    running = true;
    store.update({ busy: true });
    try {
      const r = await eng.run(s.modelKey, { texts, pair: s.pair, mask: s.mask });
      const latest = store.get();
      store.update({ run: r, item: Math.min(latest.item, r.B - 1), runError: null, busy: again, ...(r.status ? { engineStatus: r.status } : {}) });
    } catch (err) {
      store.update({ busy: again, runError: { line: String(err.message || err) } });
    } finally {
      running = false;
      if (again) { again = false; run(); }
    }
  }

  /** Loads `source` ({key, name, base} or {key, name, files}) with the state's engine. */
  async function loadModel(source, { refresh = false } = {}) {
    const s = store.get();
    store.update({ loading: { key: source.key, name: source.name, loaded: 0, total: 0, file: '' }, modelError: null });
    try {
      const r = await eng.load(source, s.engine, (p) => store.update({ loading: { key: source.key, name: source.name, file: p.file, loaded: p.loaded, total: p.total } }), { refresh, exclusive: dropOld });
      const old = store.get().modelKey;
      if (dropOld && old && old !== source.key) eng.drop(old);
      const info = r.info;
      const latest = store.get();
      store.update({
        loading: null, modelInfo: info, modelKey: source.key, modelSource: { key: source.key, name: source.name, base: source.base }, engineStatus: r.status,
        layer: Math.min(latest.layer, info.layers - 1), head: Math.min(latest.head, info.heads - 1),
        modelVersion: ++loads,
      });
      return true;
    } catch (err) {
      const msg = String(err.message || err);
      store.update({ loading: null, modelError: { line: msg === 'cancelled' ? 'Loading was cancelled.' : `Could not load ${source.name}: ${msg}` } });
      return false;
    }
  }

  // ---------- rendering: the views that are shown, each in its own task ----------
  let renderToken = 0;
  async function render(changed) {
    const s = store.get();
    const token = ++renderToken;
    const r = s.run;
    for (const el of Object.values(targets)) el?.classList.toggle('empty', !r);
    if (!r) return;
    const opts = layout(s);
    const base = { item: Math.min(s.item, r.B - 1), layer: Math.min(s.layer, r.L - 1), head: Math.min(s.head, r.H - 1), scale: s.scale, win: s.win?.T === r.T ? s.win : null };
    const onlyHover = changed && [...changed].every((k) => k === 'hover');
    const order = onlyHover ? ['lines'] : ['head', 'lines', 'model', 'steps'];
    for (const name of order) {
      const el = targets[name];
      if (!el || el.hidden || !opts[name]) continue;
      if (!onlyHover) { // each view in a task of its own, apart from the one that brought the result
        await nextTask();
        if (token !== renderToken) return;
      }
      const t0 = performance.now();
      VIEWS[name].render(el, r, {
        ...base, ...opts[name], hover: s.hover, headDim: s.modelInfo?.head_dim,
        onFocus: (layer, headIdx) => store.update({ layer, head: headIdx }),
        onMove: (dl, dh) => {
          const now = store.get();
          store.update({ layer: Math.max(0, Math.min(r.L - 1, now.layer + dl)), head: Math.max(0, Math.min(r.H - 1, now.head + dh)) });
        },
        onZoom: (win) => store.update({ win: win ? { ...win, T: r.T } : null }),
        onHover: (cell) => store.update({ hover: cell }),
      });
      measure(`attnscope:${name}`, t0); // per-view cost, for the benchmark and DevTools
    }
    store.update({ rendered: r.id + ':' + token });
  }

  const RENDER_KEYS = ['run', 'item', 'layer', 'head', 'scale', 'win', 'hover', 'view', 'presenter', 'size', 'embed'];
  const RUN_KEYS = ['sentences', 'pair', 'mask', 'batch', 'modelVersion'];
  store.subscribe((s, changed) => {
    if (RUN_KEYS.some((k) => changed.has(k))) run();
    if (RENDER_KEYS.some((k) => changed.has(k))) render(changed);
  });

  return { loadModel, run, render, cancel: () => store.get().loading && eng.cancel(store.get().loading.key) };
}
