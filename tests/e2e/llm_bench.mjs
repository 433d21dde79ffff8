// SmolLM2-135M-Instruct (Q4_1 GGUF, the page's built-in model that writes) generating in the page,
// in headless Chromium, on the threaded wasm build (cross-origin isolated: ?wasm=threads) with
// its views updating as each token comes: a 64-token prompt then 64 greedy tokens with the
// Generate button (twice: the page's first generation and a second), then a 256-token prompt and
// 64 tokens. Prints tokens/s (from Generate to the 64th token on the page, and from the first
// token to the last), the prompt's pass (the engine's ms and the wall's), each step's ms (median,
// p90: the engine's and the wall's) and where a step's wall time goes, then the worker's wasm
// memory (its byteLength: it never shrinks, so it is the peak so far) after loading, after the
// 64 + 64 run and after the 256 + 64 run, and the JS heaps. The page generates on the CPU engine
// whichever engine it runs the sentence on (web/worker.js `generate`); ENGINES=cpu,gpu also runs
// the sentence's pass on WebGPU (SwiftShader here) to show it. Where a step's time goes: each
// generation is timed part by part (the engine's step, the rest of the worker's, the page's
// handling, the views), and once more with no views (the same `generate` message straight to the
// worker); PROFILE=1 adds a CPU profile of each thread; WASM=relaxed-simd runs the one-thread build.
// Last, typing at the end of a 40-token prompt: each keystroke to the views drawn again (the CPU
// engine reuses the last pass for the tokens the two texts begin with); then a 1,024-token
// prompt (a long text's run: each layer's queries and keys kept) and the wasm memory after it.
// Then its peer in the same browser: llama.cpp in wasm (@wllama/wllama, wllama_peer.mjs) on the
// same GGUF, the 64-token prompt and 64 greedy tokens on 2 threads, twice, beside the page's
// figures (the issue's bars: the page ≥ 1.5× wllama's decode speed with its views, ≥ 2× without).
//   make setup && make web && node tests/e2e/llm_bench.mjs      (ENGINES=cpu,gpu PROFILE=1 WASM=… NUMERICS=fast)
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, ready, ROOT } from './harness.mjs';
import { runWllama, describeRun } from './wllama_peer.mjs';
import { workerTargets, selfTimes } from './profile.mjs';

const GGUF = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf'; // index.html's built-in choice
if (!existsSync(path.join(ROOT, GGUF))) {
  console.log(`${GGUF}: missing; \`make setup\` fetches it (scripts/setup.sh, step 4b)`);
  process.exit(0);
}
const FILE_BYTES = statSync(path.join(ROOT, GGUF)).size;
// bench/llm.py's (and `attnscope bench`'s) text, cut after a whole word: SmolLM2's tokenizer
// makes 64 and 256 tokens of these (checked against the page's prompt_ids below)
const TEXT = 'Attention lets every token look at every other token and decide how much of it to take. ';
const promptOf = (words) => TEXT.repeat(80).split(' ').slice(0, words).join(' ');
const PROMPTS = [{ tokens: 64, text: promptOf(61) }, { tokens: 256, text: promptOf(242) }];
const NEW = 64;
const POLL_MS = 50; // how often the bench looks for the end of a generation (the figures are the page's own times)
const ENGINES = (process.env.ENGINES ?? 'cpu').split(',');
// NUMERICS=fast: the page's fast numerics (8-bit activations, as wllama's llama.cpp rounds them)
const FAST = process.env.NUMERICS === 'fast';
const MiB = (n) => (n / 1048576).toFixed(1);

// In the page before its scripts: each `generated` step's arrival from the worker and the end
// of its handling (web/engine.js `receive` answers `generated-ack` at its end), the per-view
// render measures (web/canvas.js `measure`) and the main thread's long tasks.
function instrumentPage() {
  const b = window.__bench = { steps: [], measures: [], longtasks: [] };
  const now = () => performance.timeOrigin + performance.now();
  const Base = window.Worker;
  window.Worker = class extends Base {
    constructor(...a) { super(...a); b.worker ??= this; } // the engine's (web/engine.js), the page's first
    set onmessage(f) {
      super.onmessage = (e) => {
        if (b.bareId && e.data?.id === b.bareId) b.bareDone = e.data;
        if (e.data?.type !== 'generated') return f(e);
        const arrive = now();
        try { return f(e); } finally { b.steps.push({ outputs: b.steps.length + 1, arrive, handled: now() }); }
      };
    }
    get onmessage() { return super.onmessage; }
  };
  new PerformanceObserver((l) => { for (const e of l.getEntries()) if (e.name.startsWith('attnscope:')) b.measures.push({ name: e.name.slice(10), t: performance.timeOrigin + e.startTime, ms: e.duration }); })
    .observe({ type: 'measure' });
  new PerformanceObserver((l) => { for (const e of l.getEntries()) b.longtasks.push({ t: performance.timeOrigin + e.startTime, ms: e.duration }); })
    .observe({ type: 'longtask' });
}

// In the engine's worker once it is up: when `generate` and each `generated-ack` arrive, and when
// each step is posted with the engine's own ms for it (src/wasm.rs `Generating.step` step_ms).
function instrumentWorker() {
  const b = self.__bench = { in: [], posts: [] };
  const now = () => performance.timeOrigin + performance.now();
  const post = self.postMessage.bind(self);
  self.postMessage = (m, ...rest) => {
    if (m?.type === 'generated') b.posts.push({ t: now(), outputs: b.posts.length + 1, stepMs: m.step.step_ms, prompt: m.step.prompt_ids?.length ?? b.posts[0]?.prompt, backend: m.step.backend ?? b.posts[0]?.backend });
    return post(m, ...rest);
  };
  const on = self.onmessage;
  self.onmessage = (e) => {
    if (e.data?.type === 'generate' || e.data?.type === 'generated-ack') b.in.push({ t: now(), type: e.data.type });
    return on(e);
  };
}

const sorted = (v) => [...v].sort((a, b) => a - b);
const median = (v) => sorted(v)[v.length >> 1];
const p90 = (v) => sorted(v)[Math.min(v.length - 1, Math.floor(v.length * 0.9))];
const sum = (v) => v.reduce((a, b) => a + b, 0);

/** The JS heaps in use: the page's (CDP Performance.getMetrics) and the engine worker's
 *  (Runtime.getHeapUsage; typed arrays' and wasm memory's backing stores are outside it). */
async function heaps(page, workers) {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  const m = Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((x) => [x.name, x.value]));
  await cdp.detach();
  const engine = workers.targets.find((t) => t.engine);
  const w = engine ? await workers.send(engine, 'Runtime.getHeapUsage') : null;
  return { page: m.JSHeapUsedSize, worker: w?.usedSize ?? null };
}

/**
 * `NEW` tokens after the sentence in the box: with the Generate button (the page's path: each step
 * drawn as it comes), or `bare`: the same `generate` message posted to the engine's worker under
 * an id the page does not know, so the page only answers each step (web/engine.js `receive`
 * acks it) and draws nothing. Waits for the last token (and, with the views, their last render);
 * the generation's figures from the page's and the worker's records.
 */
async function generate(page, worker, { bare = false } = {}) {
  await worker.evaluate(() => { self.__bench.in = []; self.__bench.posts = []; });
  await page.fill('#gen-max', String(NEW));
  const start = await page.evaluate(({ bare, NEW, FAST }) => {
    const b = Object.assign(window.__bench, { steps: [], measures: [], longtasks: [], renders: [], bareDone: null });
    const t = performance.timeOrigin + performance.now();
    // each time the views are given a newer step of the generation (web/generation.js draws at most once a frame)
    b.unsubscribe?.();
    b.unsubscribe = window.attnscope.store.subscribe((s, changed) => { if (changed.has('run') && s.run?.generated) b.renders.push(performance.timeOrigin + performance.now()); });
    if (!bare) { document.getElementById('gen-go').click(); return t; }
    const s = window.attnscope.store.get();
    b.bareId = 1e9 + Math.floor(Math.random() * 1e6);
    b.worker.postMessage({ id: b.bareId, type: 'generate', key: s.modelKey, gen: b.bareId, prompt: s.sentences[0], options: { maxNewTokens: NEW, topK: 5, chat: false, ...(FAST ? { numerics: 'fast' } : {}) } });
    return t;
  }, { bare, NEW, FAST });
  if (bare) {
    await page.waitForFunction(() => window.__bench.bareDone, null, { timeout: 600000, polling: POLL_MS });
    const done = await page.evaluate(() => window.__bench.bareDone);
    if (!done.ok) throw new Error(`generate: ${done.error}`);
  } else {
    // the store's generation, not `attnscope.result` (whose `generate` carries the whole
    // (L, H, N, N)), polled every POLL_MS: Playwright's default, each animation frame, would
    // make the page draw 60 frames a second that no reader's page draws
    await page.waitForFunction(() => { const g = window.attnscope.store.get().generation; return g?.result?.output_ids && !g.running; }, null, { timeout: 600000, polling: POLL_MS });
    // the views of the last step drawn (scope.js `render` ends with the store's `rendered`)
    await page.waitForFunction(() => { const s = window.attnscope.store.get(); return s.run?.generated && s.rendered?.startsWith(`${s.run.id}:`); }, null, { timeout: 60000, polling: POLL_MS });
  }
  const end = await page.evaluate(() => performance.timeOrigin + performance.now());
  const p = await page.evaluate(() => { const { worker, unsubscribe, ...rest } = window.__bench; return rest; });
  const w = await worker.evaluate(() => self.__bench);
  const k = w.posts.length, stepMs = w.posts.map((x) => x.stepMs);
  const acks = w.in.filter((x) => x.type === 'generated-ack').map((x) => x.t);
  const got = w.in.find((x) => x.type === 'generate').t;
  // step i (0: the prompt's pass) in the worker: from what started it to its post (a step starts
  // as the one before is posted, and is posted once the page has answered that one: worker.js)
  const workerMs = w.posts.map((x, i) => x.t - (i ? w.posts[i - 1].t : got));
  const shown = p.steps.map((x) => x.handled);
  const wall = shown.slice(1).map((t, i) => t - shown[i]);
  const perView = {};
  for (const m of p.measures) perView[m.name] = (perView[m.name] ?? 0) + m.ms;
  const decode = stepMs.slice(1);
  return {
    views: !bare, prompt: w.posts[0].prompt, outputs: k, backend: w.posts[0].backend,
    prefillEngine: stepMs[0], prefillWall: shown[0] - start,
    tokensPerS: k / ((shown[k - 1] - start) / 1e3), decodePerS: (k - 1) / ((shown[k - 1] - shown[0]) / 1e3),
    engineDecodePerS: (k - 1) / (sum(decode) / 1e3),
    stepEngine: [median(decode), p90(decode)], stepWall: [median(wall), p90(wall)],
    // a decode step's wall time, part by part (medians over steps 1..k-1)
    split: {
      engine: median(decode),
      workerRest: median(workerMs.slice(1).map((ms, i) => ms - decode[i])), // the step's JS objects, and waiting for the page's answer
      toPage: median(p.steps.slice(1).map((x, i) => x.arrive - w.posts[i + 1].t)), // postMessage + waiting for the main thread
      pageHandling: median(p.steps.slice(1).map((x) => x.handled - x.arrive)), // the step's row into the generation's buffer
      ackToWorker: median(acks.slice(0, k - 1).map((t, i) => t - p.steps[i].handled)),
    },
    perViewMsPerStep: Object.fromEntries(Object.entries(perView).map(([n, ms]) => [n, ms / k])),
    longtasks: { count: p.longtasks.length, ms: sum(p.longtasks.map((x) => x.ms)) },
    untilRendered: end - shown[k - 1],
    // how often the views drew a newer step while the tokens came (the last, after them, aside)
    redraws: { count: p.renders.length, medianGap: p.renders.length > 2 ? median(p.renders.slice(1).map((t, i) => t - p.renders[i])) : null },
  };
}

// Typing at the end of a 40-token prompt: KEYS keystrokes alternating "…take" and "…takes", from
// the keydown to the end of the render pass that draws the new run (every visible view), with
// the engine's pass and how many positions it took from the last pass (web/result.js `reused`).
const TYPED = { tokens: 40, text: promptOf(37) };
const KEYS = 16;
async function keystrokes(page) {
  await page.fill('#sentence', TYPED.text);
  await page.waitForFunction((t) => { const s = window.attnscope.store.get(); return window.attnscope.result?.text === t && !s.generation && !s.busy && s.run && s.rendered?.startsWith(`${s.run.id}:`); }, TYPED.text, { timeout: 600000 });
  const tokens = await page.evaluate(() => window.attnscope.result.token_ids.length);
  await page.evaluate(() => { window.__keyAt = 0; document.getElementById('sentence').addEventListener('keydown', () => { window.__keyAt = performance.now(); }, true); });
  await page.focus('#sentence');
  await page.keyboard.press('End');
  const ms = [], pass = [], reused = [];
  for (let i = 0; i < KEYS; i++) {
    const renders = await page.evaluate(() => window.attnscope.renders);
    await page.keyboard.press(i % 2 ? 'Backspace' : 's');
    await page.waitForFunction((r) => window.attnscope.renders > r && !window.attnscope.store.get().busy, renders, { timeout: 60000 });
    const [m, p, u] = await page.evaluate(() => [window.attnscope.lastRenderAt - window.__keyAt, window.attnscope.result.elapsedMs, window.attnscope.result.reused]);
    ms.push(m); pass.push(p); reused.push(u);
    await page.waitForTimeout(150);
  }
  const sorted = (a) => [...a].sort((x, y) => x - y);
  return { tokens, median: sorted(ms)[KEYS >> 1], worst: Math.max(...ms), passMedian: sorted(pass)[KEYS >> 1], reused };
}

// A 1,024-token prompt, a long text's run (each layer's queries and keys kept, web/result.js
// `long`): from the text set to every view drawn with the focused layer's heads, the engine's
// pass, and the wasm memory after it.
const LONG = { tokens: 1024, text: promptOf(975) };
async function longPrompt(page) {
  const t0 = performance.now();
  await page.fill('#sentence', LONG.text);
  await page.waitForFunction((t) => { const s = window.attnscope.store.get(); return window.attnscope.result?.text === t && s.run?.long && s.run.hasHead(0, Math.min(s.layer, s.run.L - 1), Math.min(s.head, s.run.H - 1)) && s.rendered?.startsWith(`${s.run.id}:`); }, LONG.text, { timeout: 900000, polling: 250 });
  const ms = performance.now() - t0;
  return { ms, ...(await page.evaluate(async () => ({ tokens: window.attnscope.result.token_ids.length, pass: window.attnscope.result.elapsedMs, wasm: (await window.attnscope.stats()).wasmBytes }))) };
}

const server = await startServer();
const browser = await launch({ extraArgs: ['--enable-precise-memory-info'] });
const WASM = process.env.WASM ?? 'threads';
const rows = [], memory = [], profiles = [], typing = [], longs = [];
let env, wllama;
try {
  for (const engine of ENGINES) {
    const [short, long] = PROMPTS;
    const url = `${server.url}?wasm=${WASM}#model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent(short.text)}&e=${engine}${FAST ? '&num=fast' : ''}`;
    const { page, problems } = await openPage(browser, null);
    await page.addInitScript(instrumentPage);
    const workerUp = new Promise((resolve) => page.on('worker', (w) => { if (/\/web\/worker\.js/.test(w.url())) resolve(w); }));
    await page.goto(url);
    const loadErr = await ready(page);
    if (loadErr) throw new Error(`the page did not load SmolLM2: ${JSON.stringify(loadErr)}`);
    await page.waitForFunction((t) => window.attnscope.result?.text === t && window.attnscope.store.get().rendered, short.text, { timeout: 600000 });
    const worker = await workerUp;
    await worker.evaluate(instrumentWorker);
    const workers = await workerTargets(browser);
    env = await page.evaluate(async () => ({ stats: await window.attnscope.stats(), cores: navigator.hardwareConcurrency, isolated: crossOriginIsolated, backend: window.attnscope.result.backend, tokens: window.attnscope.result.token_ids.length }));
    if (env.tokens !== short.tokens) console.log(`note: the short prompt is ${env.tokens} tokens, not ${short.tokens}`);
    console.log(`e=${engine}: wasm build ${env.stats.wasmBuild}, ${env.stats.threads} threads (navigator.hardwareConcurrency ${env.cores}, crossOriginIsolated ${env.isolated}); the sentence's pass on ${env.backend}`);
    const mem = { engine, loaded: env.stats.wasmBytes, heapLoaded: await heaps(page, workers) };
    for (const run of ['1st', '2nd']) {
      // PROFILE=1: a CPU profile of the page and of each worker thread during the first Generate
      const profiling = process.env.PROFILE && run === '1st';
      let pageCdp;
      if (profiling) {
        pageCdp = await page.context().newCDPSession(page);
        for (const s of [pageCdp]) { await s.send('Profiler.enable'); await s.send('Profiler.setSamplingInterval', { interval: 500 }); await s.send('Profiler.start'); }
        for (const t of workers.targets) { await workers.send(t, 'Profiler.enable'); await workers.send(t, 'Profiler.setSamplingInterval', { interval: 500 }); await workers.send(t, 'Profiler.start'); }
      }
      rows.push({ engine, run, ...(await generate(page, worker)) });
      if (profiling) {
        profiles.push({ thread: 'page (main thread)', top: selfTimes((await pageCdp.send('Profiler.stop')).profile) });
        await pageCdp.detach();
        for (const [i, t] of workers.targets.entries()) profiles.push({ thread: t.engine ? 'engine worker (web/worker.js)' : `worker ${i} (a pool thread)`, top: selfTimes((await workers.send(t, 'Profiler.stop')).profile) });
      }
      if (run === '1st') mem.after64 = (await page.evaluate(() => window.attnscope.stats())).wasmBytes;
    }
    rows.push({ engine, run: 'no views', ...(await generate(page, worker, { bare: true })) });
    mem.heap64 = await heaps(page, workers);
    await page.fill('#sentence', long.text);
    await page.waitForFunction((t) => { const s = window.attnscope.store.get(); return window.attnscope.result?.text === t && !s.generation && s.run && s.rendered?.startsWith(`${s.run.id}:`); }, long.text, { timeout: 600000 });
    mem.pass256 = (await page.evaluate(() => window.attnscope.stats())).wasmBytes;
    rows.push({ engine, run: '1st', ...(await generate(page, worker)) });
    mem.after256 = (await page.evaluate(() => window.attnscope.stats())).wasmBytes;
    mem.heap256 = await heaps(page, workers);
    rows.push({ engine, run: 'no views', ...(await generate(page, worker, { bare: true })) });
    memory.push(mem);
    typing.push({ engine, ...(await keystrokes(page)) });
    longs.push({ engine, ...(await longPrompt(page)) });
    await workers.detach();
    const left = problems.filter((x) => !/favicon/.test(x));
    if (left.length) console.log(left.join('\n'));
    await page.close();
  }
  // after the page has closed, so that nothing else runs in the browser beside it
  try {
    wllama = await runWllama(browser, server, { gguf: GGUF, prompt: PROMPTS[0].text, newTokens: NEW, threads: 2 });
  } catch (e) {
    wllama = { error: e.message };
  }
} finally {
  await browser.close();
  server.stop();
}

const f1 = (x) => x.toFixed(1);
console.log(`\nSmolLM2-135M-Instruct Q4_1 (${MiB(FILE_BYTES)} MiB) in the page, wasm build ${env.stats.wasmBuild} on ${env.stats.threads} threads, ${NEW} greedy tokens a run; ms`);
console.log('("no views": the same generation posted to the engine\'s worker, the page only acknowledging each step)');
console.log('| e= | prompt | run | generated on | tokens/s (Generate → 64th) | tokens/s (1st → 64th) | engine tokens/s | prefill engine / wall | step engine med / p90 | step wall med / p90 |');
console.log('|---|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.engine} | ${r.prompt} | ${r.run} | ${r.backend} | ${f1(r.tokensPerS)} | ${f1(r.decodePerS)} | ${f1(r.engineDecodePerS)} | ${f1(r.prefillEngine)} / ${f1(r.prefillWall)} | ${f1(r.stepEngine[0])} / ${f1(r.stepEngine[1])} | ${f1(r.stepWall[0])} / ${f1(r.stepWall[1])} |${r.outputs !== NEW ? ` (${r.outputs} tokens: EOS)` : ''}`);
}
console.log('\nA decode step\'s wall time, part by part (medians, ms): engine step | rest of the worker\'s step (JS objects, and waiting for the page\'s answer to the step before) | post → page handler | page handling (the row into the buffer) | ack → read by the worker (after the next step, which runs meanwhile); then the views\' ms a step (drawn at most once a frame, beside the engine\'s steps), how many times they drew a newer step and the median gap; main-thread long tasks');
for (const r of rows) {
  const s = r.split;
  console.log(`  e=${r.engine} P=${r.prompt} ${r.run}: ${f1(s.engine)} | ${f1(s.workerRest)} | ${f1(s.toPage)} | ${f1(s.pageHandling)} | ${f1(s.ackToWorker)}${r.views ? `; views ${Object.entries(r.perViewMsPerStep).map(([n, ms]) => `${n} ${f1(ms)}`).join(', ')}; redrawn ${r.redraws.count} times, every ${r.redraws.medianGap == null ? '–' : f1(r.redraws.medianGap)} ms; ${r.longtasks.count} long tasks, ${f1(r.longtasks.ms)} ms; last render ${f1(r.untilRendered)} ms after the 64th token` : ''}`);
}
if (profiles.length) {
  console.log('\nCPU profile of the first 64 + 64 Generate, self ms by function, each thread');
  for (const p of profiles) console.log(`  ${p.thread}:\n${p.top.map(([n, ms]) => `    ${ms.toFixed(0).padStart(6)}  ${n}`).join('\n')}`);
}
console.log('\nWasm memory (MiB; the worker\'s wasm memory byteLength, never shrinks: the peak so far) and JS heaps in use (MiB)');
console.log('| e= | after loading (64-token prompt shown) | after 64 + 64 | 256-token prompt shown | after 256 + 64 | peak × file size | JS heap page / worker after loading | after 256 + 64 |');
console.log('|---|---|---|---|---|---|---|---|');
for (const m of memory) {
  const h = (x) => `${MiB(x.page)} / ${x.worker == null ? 'n/a' : MiB(x.worker)}`;
  console.log(`| ${m.engine} | ${MiB(m.loaded)} | ${MiB(m.after64)} | ${MiB(m.pass256)} | ${MiB(m.after256)} | ${(m.after256 / FILE_BYTES).toFixed(2)} | ${h(m.heapLoaded)} | ${h(m.heap256)} |`);
}
console.log(`\nTyping at the end of a ${TYPED.tokens}-token prompt, ${KEYS} keystrokes ("…take" ↔ "…takes"): keydown → every visible view drawn again (ms), and the engine's pass`);
for (const t of typing) console.log(`  e=${t.engine} (${t.tokens} tokens): median ${f1(t.median)} ms, worst ${f1(t.worst)} ms; the pass median ${f1(t.passMedian)} ms; positions taken from the last pass: ${t.reused.join(' ')}`);
console.log(`\nA long prompt (each layer's queries and keys kept, the heads computed again a layer at a time): the text set → every view drawn with the focused layer's heads, the engine's pass, and the wasm memory after it (goal ≤ 512 MiB)`);
for (const l of longs) console.log(`  e=${l.engine} (${l.tokens} tokens): ${f1(l.ms / 1000)} s to every view, the pass ${f1(l.pass / 1000)} s; wasm memory ${MiB(l.wasm)} MiB`);

console.log(`\nThe same ${PROMPTS[0].tokens}-token prompt + ${NEW} greedy tokens in llama.cpp in wasm (@wllama/wllama), the same GGUF, 2 threads, CPU`);
if (wllama.error) {
  console.log(`  wllama did not run: ${wllama.error}`);
} else {
  console.log(`  wllama ${wllama.version}: multithread ${wllama.multithread}, ${wllama.threads} threads, model loaded in ${wllama.loadMs.toFixed(0)} ms`);
  wllama.runs.forEach((r, i) => console.log(`  ${describeRun(r, i)}`));
  // the page's warm rows (its 2nd Generate, and the run with no views; the first of each name is
  // the 64-token prompt's) against wllama's warm run
  const peer = wllama.runs.at(-1);
  const side = [['attnscope, views', rows.find((r) => r.engine === ENGINES[0] && r.run === '2nd'), 1.5], ['attnscope, no views', rows.find((r) => r.engine === ENGINES[0] && r.run === 'no views'), 2]];
  console.log(`\n| ${PROMPTS[0].tokens} + ${NEW} tokens, warm run | prefill wall ms | tokens/s (start → 64th) | tokens/s (1st → 64th) | engine tokens/s | × wllama (1st → 64th) | bar |`);
  console.log('|---|---|---|---|---|---|---|');
  for (const [name, r, bar] of side) {
    const x = r.decodePerS / peer.decodePerS;
    console.log(`| ${name} | ${f1(r.prefillWall)} | ${f1(r.tokensPerS)} | ${f1(r.decodePerS)} | ${f1(r.engineDecodePerS)} | ${x.toFixed(2)} | ≥ ${bar}×: ${x >= bar ? 'met' : 'not met'} |`);
  }
  console.log(`| wllama (llama.cpp ${wllama.version}) | ${f1(peer.prefillMs)} | ${f1(peer.tokensPerS)} | ${f1(peer.decodePerS)} | ${f1(peer.engineDecodePerS)} | 1 | |`);
}
console.log(JSON.stringify({ rows, memory, profiles, typing, longs, wllama }));
