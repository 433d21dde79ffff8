// llama.cpp in wasm (@wllama/wllama, installed from npm into tests/e2e/node_modules: no CDN)
// generating in headless Chromium, the peer llm_bench.mjs prints beside attnscope's page: the same
// GGUF, the same prompt text as it is (a raw completion, no chat template), greedy, EOS ignored so
// that every run makes all its tokens, on wllama's multi-thread build on the CPU (no WebGPU layers).
//   node tests/e2e/wllama_peer.mjs [TEXT]      (the peer alone: TEXT + 64 tokens on 2 threads)
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, launch, openPage, SMOLLM2_GGUF } from './harness.mjs';

// wllama's bundle (one self-contained ES module that starts its worker from a blob: URL) and its
// wasm (one build: its threads are pthreads where the page is cross-origin isolated)
const FILES = { 'index.js': 'text/javascript', 'wasm/wllama.wasm': 'application/wasm' };
const TIMEOUT_MS = 10 * 60 * 1000; // a guard against a hang, not a measure of speed

/**
 * Loads `gguf` (a path under the repository, fetched from `server` as a Blob) in wllama on
 * `threads` threads in a new page of `browser`, then runs `runs` greedy completions of `prompt`,
 * `newTokens` tokens each, the prompt computed again each time (no prompt cache). Resolves to
 * {version, multithread, threads, loadMs, runs: [{promptTokens, cached, generated, finish,
 * prefillMs, prefillEngineMs, decodePerS, tokensPerS, engineDecodePerS, text}]}: prefillMs from
 * the request to the first token's chunk; decodePerS from the first token to the last (the last
 * chunk), tokensPerS from the request to the last; engineDecodePerS from llama.cpp's own timings
 * (its predicted_ms spans the steps after the first token). Rejects when wllama fails.
 */
export async function runWllama(browser, server, { gguf, prompt, newTokens, threads, runs = 2 }) {
  // here, not at the module's top: without `npm ci` this rejects, and the bench goes on
  const esm = path.dirname(fileURLToPath(import.meta.resolve('@wllama/wllama')));
  const { page } = await openPage(browser, null);
  // wllama's files and a blank page, on the app server's origin: served from node_modules by the
  // route (the app server serves the app alone), the page with COOP and COEP as the app's, so that
  // it is cross-origin isolated and wllama can share its memory with its threads
  await page.route(`${server.url}wllama/**`, (route) => {
    const rel = new URL(route.request().url()).pathname.slice('/wllama/'.length);
    if (rel === 'peer.html') {
      return route.fulfill({
        contentType: 'text/html',
        headers: { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' },
        body: '<!doctype html><title>wllama peer</title>',
      });
    }
    if (!FILES[rel]) return route.fulfill({ status: 404 });
    return route.fulfill({ contentType: FILES[rel], body: readFileSync(path.join(esm, rel)) });
  });
  let timedOut = false;
  const timer = setTimeout(() => { timedOut = true; page.close().catch(() => {}); }, TIMEOUT_MS);
  try {
    await page.goto(`${server.url}wllama/peer.html`);
    if (!(await page.evaluate(() => crossOriginIsolated))) throw new Error('the peer page is not cross-origin isolated: wllama would run on one thread');
    return await page.evaluate(async ({ url, prompt, newTokens, threads, runs }) => {
      const { Wllama, LoggerWithoutDebug } = await import('/wllama/index.js');
      // llama.cpp's own log off: each line is a message from wllama's worker to the page
      const wllama = new Wllama({ default: '/wllama/wasm/wllama.wasm' }, { suppressNativeLog: true, logger: LoggerWithoutDebug });
      wllama.setCompat(null); // its fallback for browsers without JSPI or memory64 is a CDN's: none here
      const model = await (await fetch(url)).blob();
      const t0 = performance.now();
      await wllama.loadModel([model], { n_threads: threads, n_gpu_layers: 0, n_ctx: 1024 });
      const out = { version: Wllama.getLibllamaVersion(), multithread: wllama.isMultithread(), threads: wllama.getNumThreads(), loadMs: performance.now() - t0, runs: [] };
      for (let r = 0; r < runs; r++) {
        const chunks = [];
        const start = performance.now();
        await wllama.createCompletion({
          prompt, max_tokens: newTokens, temperature: 0, top_k: 1, ignore_eos: true, cache_prompt: false,
          stream: true, onData: (c) => chunks.push({ t: performance.now(), c }),
        });
        const last = chunks.at(-1), t = last.c.timings;
        const n = t.predicted_n;
        out.runs.push({
          promptTokens: t.prompt_n, cached: t.cache_n, generated: n, finish: last.c.choices[0].finish_reason,
          prefillMs: chunks[0].t - start, prefillEngineMs: t.prompt_ms,
          decodePerS: (n - 1) / ((last.t - chunks[0].t) / 1e3), tokensPerS: n / ((last.t - start) / 1e3),
          engineDecodePerS: (n - 1) / (t.predicted_ms / 1e3),
          text: chunks.map((x) => x.c.choices[0].text).join(''),
        });
      }
      return out;
    }, { url: `${server.url}${gguf}`, prompt, newTokens, threads, runs });
  } catch (e) {
    throw timedOut ? new Error(`wllama: no answer in ${TIMEOUT_MS / 60000} minutes`) : e;
  } finally {
    clearTimeout(timer);
    if (!page.isClosed()) await page.close();
  }
}

/** One line for a run of runWllama. */
export const describeRun = (r, i) => `run ${i + 1}: prompt ${r.promptTokens} tokens (${r.cached} from cache), prefill ${r.prefillMs.toFixed(1)} ms (engine ${r.prefillEngineMs.toFixed(1)}), ${r.generated} tokens (${r.finish === 'length' ? 'all asked' : `stopped: ${r.finish}`}); tokens/s 1st → last ${r.decodePerS.toFixed(1)}, request → last ${r.tokensPerS.toFixed(1)}, engine ${r.engineDecodePerS.toFixed(1)}`;

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const prompt = process.argv[2] ?? 'Attention lets every token look at every other token and decide how much of it to take.';
  const server = await startServer();
  const browser = await launch();
  try {
    const w = await runWllama(browser, server, { gguf: SMOLLM2_GGUF, prompt, newTokens: 64, threads: 2 });
    console.log(`wllama ${w.version}: multithread ${w.multithread}, ${w.threads} threads, model loaded in ${w.loadMs.toFixed(0)} ms`);
    w.runs.forEach((r, i) => console.log(`  ${describeRun(r, i)}`));
    console.log(`  text: ${JSON.stringify(w.runs[0].text)}`);
  } finally {
    await browser.close();
    server.stop();
  }
}
