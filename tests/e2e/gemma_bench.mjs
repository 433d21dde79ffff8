// Gemma 3 270M (Q4_K_M GGUF, the page's built-in model with sliding-window layers) in the page,
// in headless Chromium on the threaded wasm build (cross-origin isolated: ?wasm=threads): a
// 64-token prompt then 64 greedy tokens (gen=64: the page's own step times), then a 2,048-token
// prompt with the sliding-window panel open (a long text's run: each layer's queries and keys
// kept, the focused layer's heads computed again), its window checked where the views read it
// (layer 0 hides every key 512 or more positions back; the last layer, global, none). Prints
// tokens/s, the prompt's pass, the time to every view, and the worker's wasm memory after each
// (its byteLength: it never shrinks, so it is the peak so far; goal under 1 GiB).
//   make setup && make web && node tests/e2e/gemma_bench.mjs      (WASM=relaxed-simd: one thread)
import { existsSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, ready, ROOT } from './harness.mjs';

const GGUF = 'assets/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf'; // index.html's built-in choice
if (!existsSync(path.join(ROOT, GGUF))) {
  console.log(`${GGUF}: missing; \`make setup\` fetches it (scripts/setup.sh, step 4c)`);
  process.exit(0);
}
const TEXT = 'Attention lets every token look at every other token and decide how much of it to take. ';
const NEW = 64;
const MiB = (n) => (n / 1048576).toFixed(1);
const WASM = process.env.WASM ?? 'threads';

/** The first `tokens` tokens' worth of TEXT repeated: whole words, checked against the page's ids below. */
const promptOf = (words) => TEXT.repeat(200).split(' ').slice(0, words).join(' ');

const server = await startServer();
const browser = await launch();
try {
  // 1. a 64-token prompt and 64 greedy tokens
  const short = promptOf(62);
  const { page, problems } = await openPage(browser, `${server.url}?wasm=${WASM}#model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent(short)}&e=cpu&gen=${NEW}`, { width: 1280, height: 900 });
  const t0 = performance.now();
  const err = await ready(page);
  if (err) throw new Error(`the page did not load Gemma 3: ${JSON.stringify(err)}`);
  const loaded = (await page.evaluate(() => window.attnscope.stats())).wasmBytes;
  await page.waitForFunction((n) => window.attnscope.result?.output_ids?.length === n && !window.attnscope.result.running, NEW, { timeout: 900000, polling: 250 });
  const gen = await page.evaluate(async () => ({ prompt: window.attnscope.result.prompt_ids.length, ms: window.attnscope.result.step_ms, stats: await window.attnscope.stats() }));
  const steps = gen.ms.slice(1), tokS = steps.length / (steps.reduce((a, b) => a + b, 0) / 1000);
  console.log(`Gemma 3 270M Q4_K_M in the page, wasm build ${gen.stats.wasmBuild} on ${gen.stats.threads} threads (load and the first generation: ${((performance.now() - t0) / 1000).toFixed(1)} s)`);
  console.log(`  a ${gen.prompt}-token prompt then ${NEW} greedy tokens: the prompt's pass ${gen.ms[0].toFixed(0)} ms, decoding ${tokS.toFixed(1)} tokens/s (the engine's step times)`);
  console.log(`  wasm memory: ${MiB(loaded)} MiB loaded, ${MiB(gen.stats.wasmBytes)} MiB after the generation`);
  await page.close();

  // 2. a 2,048-token prompt, the window panel open
  const long = promptOf(1935);
  const p2 = await openPage(browser, `${server.url}?wasm=${WASM}#model=${encodeURIComponent(GGUF)}&s=hello&e=cpu&l=0&inside=window`, { width: 1280, height: 900 });
  if (await ready(p2.page)) throw new Error('the page did not load Gemma 3');
  const t1 = performance.now();
  await p2.page.fill('#sentence', long);
  await p2.page.waitForFunction((t) => { const s = window.attnscope.store.get(); return window.attnscope.result?.text === t && s.run?.hasHead(0, 0, Math.min(s.head, s.run.H - 1)) && s.rendered?.startsWith(`${s.run.id}:`) && document.querySelector('#inside-window')?.dataset.drawn === String(s.run.id); }, long, { timeout: 1800000, polling: 500 });
  const ms = performance.now() - t1;
  const got = await p2.page.evaluate(async () => {
    const r = window.attnscope.store.get().run, T = r.T, q = T - 1;
    const row = (l) => r.maskOf(0, l).subarray(q * T, (q + 1) * T);
    const first = (m) => m.findIndex((v) => v === 1);
    return { T, long: r.long, pass: window.attnscope.result.elapsedMs ?? window.attnscope.result.elapsed_ms, wasm: (await window.attnscope.stats()).wasmBytes, sliding: first(row(0)), global: first(row(r.L - 1)), panel: document.querySelector('#inside-window')._window };
  });
  const ok = got.sliding === got.T - 512 && got.global === 0;
  console.log(`  a ${got.T}-token prompt (a long text's run: ${got.long}): ${(ms / 1000).toFixed(1)} s to every view with the window panel, the pass ${(got.pass / 1000).toFixed(1)} s; wasm memory ${MiB(got.wasm)} MiB (goal under 1,024)`);
  console.log(`  the window where the views read it: the last token's first key in layer 0 (sliding) ${got.sliding}, in layer 17 (global) ${got.global}: ${ok ? 'as the model attends' : 'WRONG'}; the panel follows token ${got.panel?.q}`);
  console.log(JSON.stringify({ prompt: gen.prompt, prefillMs: gen.ms[0], decodeTokensPerS: tokS, wasmLoaded: loaded, wasmAfterGeneration: gen.stats.wasmBytes, long: { tokens: got.T, ms, passMs: got.pass, wasm: got.wasm, windowOk: ok } }));
  if (problems.length || p2.problems.length) console.log('problems:', [...problems, ...p2.problems]);
  await p2.page.close();
} finally {
  await browser.close();
  server.stop();
}
