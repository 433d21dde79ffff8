// Keystroke → updated heatmaps, on the CPU engine in headless Chromium, with the default model
// and a 12-token sentence. Prints the median and worst of N keystrokes.
import { startServer, launch, openPage } from './harness.mjs';

const N = Number(process.env.N || 20);
const server = await startServer();
const browser = await launch();
try {
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
} finally {
  await browser.close();
  server.stop();
}
