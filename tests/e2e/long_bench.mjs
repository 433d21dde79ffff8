// SmolLM2-135M-Instruct (Q4_1 GGUF) over a 1,025-token text in the page, in headless Chromium on
// the threaded wasm build (cross-origin isolated: ?wasm=threads), the CPU engine: the time from
// the text set to every view drawn (a long text's run: each layer's queries and keys kept, every
// head folded into its thumbnail by the pass, the focused layer's heads computed again), then the
// same with two words typed at its end (the pass reuses the last: the new rows alone), three
// times, each time a text that begins with another word (nothing shared with the last); the
// pass's own time and the positions it reused beside it, and the worker's wasm memory after (its
// byteLength: the peak so far). Issue 51's goals for 1,024 tokens: 3 s to every view, 150 ms a
// keystroke at the end.
//   make setup && make web && node tests/e2e/long_bench.mjs      (WASM=relaxed-simd: one thread)
import { existsSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, ready, ROOT } from './harness.mjs';

const GGUF = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';
if (!existsSync(path.join(ROOT, GGUF))) {
  console.log(`${GGUF}: missing; \`make setup\` fetches it`);
  process.exit(0);
}
const WASM = process.env.WASM || 'threads';
const PARAGRAPH = 'The committee met on a wet Tuesday morning to decide where the new library would stand. '
  + 'Some wanted it near the river, where the old mill had been; others argued for the square, because '
  + 'children walk there after school and the buses stop at its corner. After two hours nobody had '
  + 'changed their mind, so the chair suggested a walk to both places before lunch. ';
const TEXT = `${PARAGRAPH.repeat(14)}${PARAGRAPH.split('. ')[0]}.`;
const server = await startServer();
const browser = await launch();
try {
  const url = `${server.url}?wasm=${WASM}#model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent('The committee met.')}&e=cpu`;
  const { page } = await openPage(browser, url, { width: 1280, height: 900 });
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
} finally {
  await browser.close();
  server.stop();
}
