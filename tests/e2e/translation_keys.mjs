// A keystroke on the dates model (models/dates) → the output and every visible view of the
// translation updated, in headless Chromium on the CPU engine: from the keydown to the end of
// the translation view's render, the median and worst of N keystrokes (alternating "…2018" and
// "…201", 9 or 8 source tokens). INSIDE=1 opens the three inside-the-decoder panels too and
// waits for them as well (one more engine call, a teacher-forced pass, and their drawing).
//   node tests/e2e/translation_keys.mjs        INSIDE=1 node tests/e2e/translation_keys.mjs
import { startServer, launch, openPage, ready } from './harness.mjs';

const N = Number(process.env.N || 40);
const INSIDE = process.env.INSIDE === '1';
const server = await startServer();
const browser = await launch();
try {
  const { page } = await openPage(browser, `${server.url}#model=models/dates/&e=cpu&s=${encodeURIComponent('Sunday, 9 Sept 2018')}${INSIDE ? '&inside=dec-embeddings,dec-cross,dec-layer' : ''}`, { width: 1280, height: 900 });
  if (await ready(page)) throw new Error('the page did not load');
  await page.waitForFunction(() => window.attnscope.result?.output_text === '2018-09-09', null, { timeout: 120000 });
  await page.evaluate(() => {
    window.__keyAt = 0;
    document.getElementById('sentence').addEventListener('keydown', () => { window.__keyAt = performance.now(); }, true);
  });
  await page.evaluate((inside) => { window.INSIDE_ = inside; }, INSIDE);
  await page.focus('#sentence');
  await page.keyboard.press('End');
  const times = [], engine = [];
  for (let i = 0; i < N; i++) {
    const renders = await page.evaluate(() => [window.attnscope.renders, window.attnscope.insideRenders]);
    await page.keyboard.press(i % 2 ? '8' : 'Backspace');
    await page.waitForFunction(([r, ir]) => window.attnscope.renders > r && (!INSIDE_ || window.attnscope.insideRenders > ir), renders);
    const [ms, e] = await page.evaluate(() => [Math.max(window.attnscope.lastRenderAt, INSIDE_ ? window.attnscope.insideAt : 0) - window.__keyAt, window.attnscope.result.elapsed_ms]);
    times.push(ms);
    engine.push(e);
  }
  const median = (v) => [...v].sort((a, b) => a - b)[v.length >> 1];
  const info = await page.evaluate(async () => ({ build: (await window.attnscope.stats()).wasmBuild, backend: window.attnscope.result.backend }));
  console.log(`dates model, ${info.backend} (${info.build} build), ${N} keystrokes: keystroke → translation and its views drawn${INSIDE ? ' (and the three inside-the-decoder panels)' : ''}: median ${median(times).toFixed(1)} ms, worst ${Math.max(...times).toFixed(1)} ms; the translation alone: median ${median(engine).toFixed(1)} ms`);
} finally {
  await browser.close();
  server.stop();
}
