// In headless Chromium with the default model: the first heatmap after opening the page (model
// in the browser's cache), peak wasm memory at 512 tokens, keystroke → updated heatmaps (CPU
// engine, a 12-token sentence: the median and worst of N keystrokes), the √d_k ablation and the
// inside-the-encoder panels.
import { statSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, MODEL_DIR } from './harness.mjs';

const N = Number(process.env.N || 20);
const server = await startServer();
const browser = await launch();
try {
  // First heatmap: from navigation to the end of the first render pass (performance.now() is
  // measured from the navigation's start), the model revalidated from the HTTP cache (the
  // server answers 304); one page in the context first, to fill the cache. Median of 5.
  {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    const first = [];
    for (let i = 0; i < 6; i++) {
      const page = await context.newPage();
      await page.goto(server.url + '#e=cpu');
      await page.waitForFunction(() => window.attnscope?.renders > 0, null, { timeout: 120000 });
      if (i > 0) first.push(await page.evaluate(() => window.attnscope.lastRenderAt));
      if (i === 5) {
        // peak wasm memory (a wasm memory only grows) after a 512-token run
        await page.fill('#sentence', 'word '.repeat(600));
        await page.waitForFunction(() => window.attnscope.result?.tokens.length === 512 && window.attnscope.renders > 1, null, { timeout: 120000 });
        const { wasmBytes } = await page.evaluate(() => window.attnscope.stats());
        const i = await page.evaluate(() => window.attnscope.info);
        const weights = statSync(path.join(MODEL_DIR, 'model.safetensors')).size;
        const T = 512, probs = 4 * i.layers * i.heads * T * T; // every probability, and as many scores
        const mb = (b) => (b / 2 ** 20).toFixed(1);
        console.log(`peak wasm memory after a 512-token run: ${mb(wasmBytes)} MiB (model.safetensors ${mb(weights)} MiB; the probabilities kept ${mb(probs)} MiB, the scores as much)`);
      }
      await page.close();
    }
    first.sort((a, b) => a - b);
    console.log(`first heatmap after opening the page (model cached), ${first.length} loads: median ${first[first.length >> 1].toFixed(0)} ms, worst ${first[first.length - 1].toFixed(0)} ms`);
    await context.close();
  }

  const { page } = await openPage(browser, server.url + '#e=cpu&s=the%20cat%20sat%20on%20the%20mat%20and%20looked%20at%20door');
  await page.waitForFunction(() => window.attnscope && window.attnscope.result, null, { timeout: 120000 });
  await page.evaluate(() => {
    window.__keyAt = 0;
    document.getElementById('sentence').addEventListener('keydown', () => { window.__keyAt = performance.now(); }, true);
  });
  await page.focus('#sentence');
  await page.keyboard.press('End');
  const times = [];
  const forward = [];
  let tokens = 0;
  for (let i = 0; i < N; i++) {
    const renders = await page.evaluate(() => window.attnscope.renders);
    // alternate between "…door" and "…doors": 12 tokens either way
    await page.keyboard.press(i % 2 ? 'Backspace' : 's');
    await page.waitForFunction((r) => window.attnscope.renders > r, renders);
    const [ms, n, f] = await page.evaluate(() => [window.attnscope.lastRenderAt - window.__keyAt, window.attnscope.result.tokens.length, window.attnscope.result.elapsedMs]);
    times.push(ms);
    forward.push(f);
    tokens = n;
    await page.waitForTimeout(50);
  }
  times.sort((a, b) => a - b);
  forward.sort((a, b) => a - b);
  const backend = await page.evaluate(() => window.attnscope.result.backend);
  console.log(`keystroke → heatmaps, ${tokens} tokens, backend ${backend}, ${N} keystrokes: median ${times[N >> 1].toFixed(1)} ms, worst ${times[N - 1].toFixed(1)} ms (forward pass in wasm: median ${forward[N >> 1].toFixed(1)} ms)`);

  // Inside the encoder: toggling the √d_k ablation, and opening each panel (a fresh run each time,
  // so the engine computes what the panel needs), from the action to the end of the render pass
  // that draws it. Median of R repetitions.
  const R = Number(process.env.R || 5);
  const median = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
  const settle = () => page.waitForFunction(() => { const s = window.attnscope.store.get(); return !s.busy && s.run && s.rendered.startsWith(s.run.id + ':'); });
  const sentences = ['the cat sat on the mat and looked at door', 'the cat sat on the mat and looked at doors'];
  await page.evaluate(() => window.attnscope.store.update({ sentences: ['the cat sat on the mat and looked at door'] }));
  await settle();
  /** ms from `act` (run in the page) until a render pass ends with a run for which `done(state)` holds. */
  const timed = (act, done) => page.evaluate(([act, done]) => new Promise((resolve) => {
    const store = window.attnscope.store, ok = new Function('s', `return (${done})(s)`);
    const t0 = performance.now();
    const off = store.subscribe((s, changed) => {
      if (changed.has('rendered') && ok(s)) { off?.(); clearInterval(poll); resolve(performance.now() - t0); }
    });
    const poll = setInterval(() => { const s = store.get(); if (ok(s) && !s.busy && s.rendered.startsWith(s.run.id + ':')) { clearInterval(poll); resolve(performance.now() - t0); } }, 1000);
    new Function('store', act)(store);
  }), [act, done]);
  const toggles = { on: [], off: [] };
  for (let i = 0; i < R; i++) {
    toggles.on.push(await timed('store.update({ noScale: true })', "(s) => s.run?.scale === 'none'"));
    await settle();
    toggles.off.push(await timed('store.update({ noScale: false })', "(s) => s.run?.scale === 'sqrt_dk'"));
    await settle();
  }
  console.log(`√d_k ablation on → page redrawn, ${tokens} tokens, panels closed, ${R} times: median ${median(toggles.on).toFixed(1)} ms; off: median ${median(toggles.off).toFixed(1)} ms`);
  const panels = await page.evaluate(() => [...document.querySelectorAll('#inside details[data-panel]')].map((d) => d.dataset.panel));
  for (const id of panels) {
    const times = [];
    for (let i = 0; i < R; i++) {
      // a fresh run without the panel's data (same 12 tokens), then open it by its summary
      await page.evaluate((t) => window.attnscope.store.update({ sentences: [t] }), sentences[i % 2]);
      await settle();
      await page.evaluate((id) => {
        window.__clickAt = 0;
        document.querySelector(`#inside details[data-panel="${id}"] > summary`).addEventListener('click', () => { window.__clickAt = performance.now(); }, { capture: true, once: true });
        const el = document.getElementById(`inside-${id}`);
        window.__drawnAt = 0;
        window.__obs?.disconnect();
        window.__obs = new MutationObserver(() => { window.__drawnAt = performance.now(); });
        window.__obs.observe(el, { attributes: true, attributeFilter: ['data-drawn'] });
        delete el.dataset.drawn;
      }, id);
      await page.click(`#inside details[data-panel="${id}"] > summary`);
      await page.waitForFunction((id) => {
        const s = window.attnscope.store.get(), el = document.getElementById(`inside-${id}`);
        return s.inside.includes(id) && !s.busy && s.run && el.dataset.drawn === String(s.run.id) && s.rendered.startsWith(s.run.id + ':') && (id !== 'scale' || s.scaling);
      }, id, { timeout: 60000 });
      times.push(await page.evaluate(() => window.__drawnAt - window.__clickAt));
      await page.click(`#inside details[data-panel="${id}"] > summary`); // close it again
      await settle();
    }
    console.log(`open inside panel ${id.padEnd(10)} → drawn, ${tokens} tokens, ${R} times: median ${median(times).toFixed(1)} ms, worst ${Math.max(...times).toFixed(1)} ms`);
  }
} finally {
  await browser.close();
  server.stop();
}
