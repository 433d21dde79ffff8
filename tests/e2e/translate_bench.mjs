// A checkpoint of opus-mt-en-de's shape (random weights: tools/make_opus_shape.py) translated in
// headless Chromium through the wasm API (web/pkg-relaxed, one thread; and WebGPU, SwiftShader
// here): ms to encode a 24-token source and decode 24 tokens with every attention kept, and ms
// of the decoder's steps 1 (with the encoder), 16 and 64 of a 64-step decoding; medians of 5.
//   python3 tools/make_opus_shape.py && node tests/e2e/translate_bench.mjs
import { existsSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, ROOT } from './harness.mjs';

const NAME = 'opus-mt-en-de-shape-random';
const SOURCE = 'the cat sat on the mat and time flies by us'; // 24 tokens with </s>, as bench.rs's
if (!existsSync(path.join(ROOT, 'assets/models', NAME, 'model.safetensors'))) {
  console.log(`${NAME}: missing; run python3 tools/make_opus_shape.py`);
  process.exit(0);
}
const server = await startServer();
const browser = await launch();
try {
  const { page, problems } = await openPage(browser, `${server.url}web/pkg-relaxed/attnscope.js`);
  const rows = await page.evaluate(async ({ name, source }) => {
    const m = await import('/web/pkg-relaxed/attnscope.js');
    await m.default();
    const base = `/assets/models/${name}/`;
    const [c, w, t] = await Promise.all(['config.json', 'model.safetensors', 'tokenizer.json']
      .map((f) => fetch(base + f).then((r) => r.arrayBuffer())));
    const weights = m.WeightsFile.fromBytes('model.safetensors', new Uint8Array(w));
    const session = await m.loadSession(name, new Uint8Array(c), weights, new Uint8Array(t), 'auto');
    const median = (v) => v.sort((a, b) => a - b)[v.length >> 1];
    const out = [];
    for (const engine of session.gpu() ? ['cpu', 'gpu'] : ['cpu']) {
      const run = async (n) => {
        const t0 = performance.now();
        const r = await session.translate([source], null, engine, { maxNewTokens: n });
        if (r.results[0].source_ids.length !== 24 || r.results[0].output_ids.length !== n + 1) throw new Error('unexpected lengths');
        return [performance.now() - t0, r.step_ms, r.backend];
      };
      await run(24);
      const whole = [], steps = [];
      let backend;
      for (let i = 0; i < 5; i++) whole.push((await run(24))[0]);
      for (let i = 0; i < 5; i++) { const [, s, b] = await run(64); steps.push(s); backend = b; }
      out.push({ backend, whole: median(whole), step1: median(steps.map((s) => s[0])), step16: median(steps.map((s) => s[15])), step64: median(steps.map((s) => s[63])) });
    }
    return out;
  }, { name: NAME, source: SOURCE });
  for (const r of rows) {
    console.log(`${r.backend}: encode 24 + decode 24: ${r.whole.toFixed(1)} ms; step 1 ${r.step1.toFixed(1)}, step 16 ${r.step16.toFixed(1)}, step 64 ${r.step64.toFixed(1)} ms`);
  }
  if (problems.length) console.log(problems.join('\n'));
} finally {
  await browser.close();
  server.stop();
}
