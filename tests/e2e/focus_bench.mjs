// A head focus on a long text in the page: SmolLM2-135M-Instruct (Q4_1 GGUF) over N copies of
// long_bench.mjs's paragraph (N=53: 3,833 tokens; N=113: 8,153, near its 8,192 positions), in
// headless Chromium on the threaded wasm build, the CPU engine. After the first view, 12 heads
// focused in turn across the layers (each a layer switch too but the second: a long run's page
// holds the focused head alone, src/wasm.rs `Session.longHead`), each timed inside the page from
// the store's update to the last view it drew, with the time the head came from the engine and
// the heatmap's own ms (web/views/head.js); the medians, then PROFILE=1 adds the page's and each
// worker thread's functions by their own time over the 12 (CDP Profiler). Issue 51's goals at
// 8,192 tokens: the first view ≤ 10 s (the first layer's heads, drawn as the pass ends it), a
// layer switch ≤ 1 s, a head focus ≤ 0.3 s.
//   make setup && make web && N=113 node tests/e2e/focus_bench.mjs      (PROFILE=1; NUMERICS=fast: the
//   page's fast numerics, 8-bit activations)
import { existsSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, ready, ROOT, PARAGRAPH } from './harness.mjs';
import { measureViews, workerTargets, selfTimes } from './profile.mjs';

const GGUF = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';
if (!existsSync(path.join(ROOT, GGUF))) {
  console.log(`${GGUF}: missing; \`make setup\` fetches it`);
  process.exit(0);
}
const N = Number(process.env.N || 53);
const FAST = process.env.NUMERICS === 'fast';
const TEXT = `${PARAGRAPH.repeat(N)}${PARAGRAPH.split('. ')[0]}.`;
// (layer, head) in turn; the page opens on 3:1
const FOCUS = [[3, 2], [3, 5], [10, 5], [20, 0], [20, 4], [29, 8], [29, 1], [15, 3], [15, 7], [5, 0], [25, 6], [8, 8]];
const server = await startServer();
const browser = await launch();
try {
  const url = `${server.url}?wasm=threads#model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent('The committee met.')}&e=cpu${FAST ? '&num=fast' : ''}`;
  console.log(`numerics: ${FAST ? 'fast' : 'exact'}`);
  const { page } = await openPage(browser, url, { width: 1280, height: 900 });
  await measureViews(page);
  await page.reload();
  await ready(page);
  const t0 = performance.now();
  await page.fill('#sentence', TEXT);
  // the first attention on screen: the box over the page draws each layer's heads as the pass
  // ends the layer (web/progress.js)
  const firstLayer = await page.waitForFunction(() => {
    const c = document.querySelector('#run-status .run-layers canvas');
    return !c.closest('figure').hidden && +c.dataset.layers >= 1 && document.querySelector('#run-status .run-text').textContent;
  }, null, { timeout: 900000, polling: 50 }).then((h) => h.jsonValue());
  console.log(`the first layer's heads drawn in ${((performance.now() - t0) / 1000).toFixed(1)} s ("${firstLayer}")`);
  await page.waitForFunction((t) => {
    const s = window.attnscope.store.get();
    return window.attnscope.result?.text === t && s.run?.long && s.run.hasHead(0, Math.min(s.layer, s.run.L - 1), Math.min(s.head, s.run.H - 1)) && s.rendered?.startsWith(`${s.run.id}:`);
  }, TEXT, { timeout: 900000, polling: 100 });
  const first = await page.evaluate(async () => { const run = window.attnscope.store.get().run; return { T: run.T, pass: run.elapsed_ms, wasm: (await window.attnscope.stats()).wasmBytes }; });
  console.log(`${first.T} tokens: ${((performance.now() - t0) / 1000).toFixed(1)} s to every view (the pass ${(first.pass / 1000).toFixed(1)} s), wasm memory ${(first.wasm / 2 ** 20).toFixed(0)} MiB`);
  await page.waitForTimeout(1000);
  const profiling = process.env.PROFILE ? await startProfiles(browser, page) : null;
  const toViews = [], came = [], heat = [];
  for (const [layer, head] of FOCUS) {
    await page.evaluate(({ layer, head }) => {
      const store = window.attnscope.store, run = store.get().run;
      window.__measures.length = 0;
      window.__at = performance.now();
      window.__came = 0;
      if (!run.__timed) { // when the engine's head is added to the run (web/scope.js `longHead`)
        const add = run.addHead;
        run.addHead = (...a) => { window.__came = performance.now(); return add.apply(run, a); };
        run.__timed = true;
      }
      store.update({ layer, head });
    }, { layer, head });
    await page.waitForFunction(() => {
      const s = window.attnscope.store.get();
      return window.__came > 0 && s.run.hasHead(0, s.layer, s.head) && window.__measures.some((x) => x.name === 'head' && x.t >= window.__came);
    }, null, { timeout: 60000, polling: 'raf' });
    await page.waitForTimeout(400); // the views' last measures
    const k = await page.evaluate(() => ({ views: window.__measures.filter((x) => x.t >= window.__at), at: window.__at, came: window.__came - window.__at, pooledBy: document.querySelector('#head-view .heat')?.dataset.pooledBy ?? 'none' }));
    const ms = Math.max(...k.views.map((x) => x.t + x.ms)) - k.at, own = {};
    for (const x of k.views) own[x.name] = (own[x.name] ?? 0) + x.ms;
    toViews.push(ms);
    came.push(k.came);
    heat.push(own.head);
    console.log(`layer ${layer}, head ${head}: ${ms.toFixed(0)} ms to every view; the head came at ${k.came.toFixed(0)} ms, pooled by the ${k.pooledBy}; each view's ms: ${Object.entries(own).map(([n, v]) => `${n} ${v.toFixed(0)}`).join(', ')}`);
  }
  const median = (v) => [...v].sort((a, b) => a - b)[v.length >> 1].toFixed(0);
  console.log(`\n${first.T} tokens, ${FOCUS.length} heads focused: median ${median(toViews)} ms to every view (${Math.min(...toViews).toFixed(0)}–${Math.max(...toViews).toFixed(0)}), the head from the engine at ${median(came)} ms, the heatmap ${median(heat)} ms (goals at 8,192 tokens: 300 ms a head focus, 1 s a layer switch)`);
  if (profiling) await profiling.report();
} finally {
  await browser.close();
  server.stop();
}

/** CPU profiles of the page and of each worker thread (the engine's and its pool's), started now:
 *  `report()` stops them and prints each one's functions by their own time. */
async function startProfiles(browser, page) {
  const start = async (send) => { await send('Profiler.enable'); await send('Profiler.setSamplingInterval', { interval: 500 }); await send('Profiler.start'); };
  const pageCdp = await page.context().newCDPSession(page);
  await start((m, a) => pageCdp.send(m, a));
  const workers = await workerTargets(browser);
  for (const t of workers.targets) await start((m, a) => workers.send(t, m, a));
  const top = ({ profile }) => selfTimes(profile, 10).map(([n, ms]) => `  ${ms.toFixed(0).padStart(6)} ms  ${n}`).join('\n');
  return {
    async report() {
      console.log(`\nthe page's main thread, by own time over the ${FOCUS.length} focuses:\n${top(await pageCdp.send('Profiler.stop'))}`);
      for (const t of workers.targets) console.log(`${t.engine ? 'the engine worker (web/worker.js)' : 'a pool thread'}:\n${top(await workers.send(t, 'Profiler.stop'))}`);
      await workers.detach();
    },
  };
}
