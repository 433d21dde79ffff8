// SmolLM2-135M-Instruct (Q4_1 GGUF) writing on WebGPU in headless Chromium (SwiftShader, a
// software GPU: its times say where a step goes, not how fast a real GPU is): a 64-token prompt,
// then 16 greedy tokens, twice (the first records the passes); for each pass of the second, the
// engine's own phases (src/engine/gpu/generate.rs: writing its inputs, its dispatches and the
// copy read back, the copy out), and how many dispatches the prefill and a step replay. Then,
// on paper, what a step reads: the weights stay packed ggml blocks (src/engine/gpu/quant.rs),
// every matrix read once a step, and each layer's cache of keys and values over all N rows
// (the step's pass attends over every row of the cache under a mask: generate.rs).
//   make setup && make web && node tests/e2e/gpu_step_bench.mjs
import { statSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, smollm2Page, fetched, SMOLLM2_GGUF, ROOT } from './harness.mjs';

if (!fetched(SMOLLM2_GGUF)) process.exit(0);
const TEXT = 'Attention lets every token look at every other token and decide how much of it to take. ';
const PROMPT = TEXT.repeat(8).split(' ').slice(0, 61).join(' '); // 64 tokens (llm_bench.mjs's)
const NEW = 16;
const server = await startServer();
const browser = await launch({ webgpu: true });
try {
  const page = await smollm2Page(browser, server, 'gpu step bench', { backend: 'gpu' });
  const r = await page.evaluate(async ({ prompt, NEW }) => {
    const { session } = window.smollm2;
    const gpu = session.gpu();
    if (!gpu) return { none: session.unavailable() ?? 'no GPU' };
    const info = session.info();
    const once = async () => {
      const g = session.generate(prompt, 'gpu', { maxNewTokens: NEW, topK: 5 });
      const steps = [];
      try {
        for (let s = await g.step(); s; s = await g.step()) {
          steps.push({ ms: s.step_ms, gpu: s.gpu, n: s.records[0].n_k });
          if (s.done) break;
        }
      } finally { g.free(); }
      return steps;
    };
    await once(); // records the passes
    return { gpu, info, steps: await once() };
  }, { prompt: PROMPT, NEW });
  if (r.none) { console.log(`no WebGPU here: ${r.none}`); process.exit(0); }
  const med = (xs) => { const s = xs.slice().sort((a, b) => a - b); return s[s.length >> 1]; };
  const [prefill, ...steps] = r.steps;
  const P = prefill.n, N = P + NEW - 1;
  console.log(`SmolLM2-135M-Instruct Q4_1 on ${r.gpu}: a ${P}-token prompt, then ${steps.length} greedy tokens (the second run; the first recorded the passes)`);
  console.log('| pass | ms (the engine\'s) | writing its inputs | its dispatches and the copy read back | copying out | dispatches |');
  console.log('|---|---:|---:|---:|---:|---:|');
  const row = (name, xs) => console.log(`| ${name} | ${med(xs.map((x) => x.ms)).toFixed(1)} | ${med(xs.map((x) => x.gpu.upload_ms)).toFixed(2)} | ${med(xs.map((x) => x.gpu.compute_ms)).toFixed(1)} | ${med(xs.map((x) => x.gpu.readback_ms)).toFixed(2)} | ${xs[0].gpu.dispatches} |`);
  row('prefill', [prefill]);
  row(`a step (median of ${steps.length})`, steps);
  // on paper: the weights' bytes (the file's tensors, packed), and the cache read each step
  const fileMB = statSync(path.join(ROOT, SMOLLM2_GGUF)).size / 1e6;
  const a = r.info.architecture, layers = r.info.layers;
  const cacheMB = (N * layers * 2 * a.heads.key_value * a.head_dim * 4) / 1e6;
  const bytes = fileMB + cacheMB, d = steps[0].gpu.dispatches;
  console.log(`\nOn paper (arithmetic, not a measurement): a step reads every weight matrix once, packed as in the file (at most its ${fileMB.toFixed(1)} MB, the token embeddings read whole as the tied LM head), and the cache of keys and values over all ${N} rows of ${layers} layers (${cacheMB.toFixed(1)} MB): ~${bytes.toFixed(0)} MB a token, ${(bytes / 300).toFixed(2)} ms at 300 GB/s; its ${d} dispatches at 5–10 µs each would take ${(d * 0.005).toFixed(1)}–${(d * 0.01).toFixed(1)} ms.`);
} finally {
  await browser.close();
  server.stop();
}
