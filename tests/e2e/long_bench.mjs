// SmolLM2-135M-Instruct (Q4_1 GGUF) over a 1,025-token text in the page, in headless Chromium on
// the threaded wasm build (cross-origin isolated: ?wasm=threads), the CPU engine: the time from
// the text set to every view drawn (a long text's run: each layer's queries and keys kept, every
// head folded into its thumbnail by the pass, the focused layer's heads computed again), then the
// same with two words typed at its end (the pass reuses the last: the new rows alone), three
// times, each time a text that begins with another word (nothing shared with the last); the
// pass's own time and the positions it reused beside it, and the worker's wasm memory after (its
// byteLength: the peak so far). Then KEYS keystrokes at its end ("." and Backspace in turn), each
// timed inside the page from its keydown to the render that drew every view of its run, with the
// pass and each view's own ms (web/scope.js `measure`); PROFILE=1 adds the main thread's functions
// by their own time a keystroke (CDP Profiler). Issue 51's goals for 1,024 tokens: 3 s to every
// view, 150 ms a keystroke at the end.
//   make setup && make web && node tests/e2e/long_bench.mjs      (WASM=relaxed-simd: one thread; KEYS=24;
//   NUMERICS=fast: the 8-bit activations of the page's "fast" numerics)
import { existsSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, ready, ROOT, PARAGRAPH } from './harness.mjs';
import { measureViews } from './profile.mjs';

const GGUF = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';
if (!existsSync(path.join(ROOT, GGUF))) {
  console.log(`${GGUF}: missing; \`make setup\` fetches it`);
  process.exit(0);
}
const WASM = process.env.WASM || 'threads';
const KEYS = Number(process.env.KEYS || 24);
const NUMERICS = process.env.NUMERICS === 'fast' ? 'fast' : 'exact';
const TEXT = `${PARAGRAPH.repeat(14)}${PARAGRAPH.split('. ')[0]}.`;
const server = await startServer();
const browser = await launch();
try {
  const url = `${server.url}?wasm=${WASM}#model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent('The committee met.')}&e=cpu${NUMERICS === 'fast' ? '&num=fast' : ''}`;
  console.log(`numerics: ${NUMERICS}`);
  const { page } = await openPage(browser, url, { width: 1280, height: 900 });
  await measureViews(page);
  await page.reload();
  await ready(page);
  const MiB = (b) => (b / 2 ** 20).toFixed(1);
  for (const first of ['First', 'Second', 'Third']) {
    for (const text of [`${first}: ${TEXT}`, `${first}: ${TEXT} Again.`]) {
      const t0 = performance.now();
      await page.fill('#sentence', text);
      await page.waitForFunction((t) => {
        const s = window.attnscope.store.get();
        return window.attnscope.result?.text === t && s.run?.long && s.run.hasHead(0, Math.min(s.layer, s.run.L - 1), Math.min(s.head, s.run.H - 1)) && s.rendered?.startsWith(`${s.run.id}:`);
      }, text, { timeout: 900000, polling: 100 });
      const ms = performance.now() - t0;
      const r = await page.evaluate(async () => { const run = window.attnscope.store.get().run; return { T: run.T, pass: run.elapsed_ms, reused: run.reused, wasm: (await window.attnscope.stats()).wasmBytes }; });
      console.log(`${r.T} tokens: ${(ms / 1000).toFixed(2)} s to every view, the pass ${(r.pass / 1000).toFixed(2)} s (${r.reused} positions reused), wasm memory ${MiB(r.wasm)} MiB`);
    }
  }
  await keystrokes(page);
} finally {
  await browser.close();
  server.stop();
}

/** KEYS keystrokes at the end of the text, each to every view drawn again (see the top). */
async function keystrokes(page) {
  const drawn = (r) => { // a newer render, which drew every view of the run with its focused head
    const s = window.attnscope.store.get();
    return window.attnscope.renders > r && !s.busy && s.run.hasHead(0, Math.min(s.layer, s.run.L - 1), Math.min(s.head, s.run.H - 1)) && s.rendered?.startsWith(`${s.run.id}:`);
  };
  await page.evaluate(() => { window.__keyAt = 0; document.getElementById('sentence').addEventListener('keydown', () => { window.__keyAt = performance.now(); }, true); });
  await page.focus('#sentence');
  await page.keyboard.press('End');
  const cdp = process.env.PROFILE ? await page.context().newCDPSession(page) : null;
  if (cdp) for (const [m, a] of [['Profiler.enable'], ['Profiler.setSamplingInterval', { interval: 200 }], ['Profiler.start']]) await cdp.send(m, a);
  const ms = [], pass = [], views = {};
  for (let i = 0; i < KEYS; i++) {
    const renders = await page.evaluate(() => { window.__measures.length = 0; return window.attnscope.renders; });
    await page.keyboard.press(i % 2 ? 'Backspace' : '.');
    await page.waitForFunction(drawn, renders, { timeout: 60000, polling: 'raf' });
    await page.waitForTimeout(300); // the views' last measures, and a pause as a typist's
    const k = await page.evaluate(() => ({ ms: window.attnscope.lastRenderAt - window.__keyAt, pass: window.attnscope.result.elapsedMs, views: window.__measures.filter((x) => x.t >= window.__keyAt) }));
    ms.push(k.ms);
    pass.push(k.pass);
    for (const v of k.views) (views[v.name] ??= []).push(v.ms);
  }
  const sorted = (a) => [...a].sort((x, y) => x - y), at = (a, q) => sorted(a)[Math.min(a.length - 1, Math.floor(a.length * q))];
  const T = await page.evaluate(() => window.attnscope.result.token_ids.length);
  console.log(`\n${KEYS} keystrokes at the end of ${T} tokens (goal 150 ms): keydown → every view drawn median ${at(ms, 0.5).toFixed(1)} ms, p90 ${at(ms, 0.9).toFixed(1)} ms; the pass median ${at(pass, 0.5).toFixed(1)} ms`);
  console.log(`  each view's own ms a keystroke (its renders' sum, averaged): ${Object.entries(views).map(([n, v]) => `${n} ${(v.reduce((a, b) => a + b, 0) / KEYS).toFixed(1)}`).join(', ')}`);
  if (cdp) {
    const { profile } = await cdp.send('Profiler.stop');
    const own = new Map(), nodes = new Map(profile.nodes.map((n) => [n.id, n]));
    profile.samples.forEach((id, i) => {
      const f = nodes.get(id).callFrame, name = `${f.functionName || '(anonymous)'} ${f.url.split('/').pop()}:${f.lineNumber + 1}`;
      own.set(name, (own.get(name) ?? 0) + profile.timeDeltas[i] / 1000);
    });
    console.log('  the main thread, ms a keystroke by function (its own time):');
    for (const [name, t] of [...own].filter(([n]) => !/^\((idle|program)\)/.test(n)).sort((a, b) => b[1] - a[1]).slice(0, 15)) console.log(`    ${(t / KEYS).toFixed(2)} ${name}`);
  }
}
