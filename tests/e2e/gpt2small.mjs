// A checkpoint of GPT-2 small's shape (124 M parameters, random weights: tools/make_gpt2_small.py)
// in the page, F32 and F16: the time to load it (download from the local server, parse, pack),
// the pass over a 64-token input on the CPU engine and on WebGPU (SwiftShader here), its next
// tokens, and the wasm memory at the end (a wasm memory only grows: its peak).
//   python3 tools/make_gpt2_small.py && node tests/e2e/gpt2small.mjs
import { existsSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, ready, ROOT } from './harness.mjs';

const mb = (n) => (n / 1048576).toFixed(0);
// 64 tokens of the tiny-gpt2 byte-level vocabulary the checkpoints carry
const TEXT = 'the quick brown fox jumps over the lazy dog and time flies like an arrow '.repeat(3).split(' ').slice(0, 35).join(' ');

const server = await startServer();
const browser = await launch();
try {
  for (const name of ['gpt2-small-random', 'gpt2-small-random-f16']) {
    if (!existsSync(path.join(ROOT, 'assets/models', name, 'model.safetensors'))) {
      console.log(`${name}: missing; run python3 tools/make_gpt2_small.py`);
      continue;
    }
    for (const engine of ['cpu', 'gpu']) {
      const { page, problems } = await openPage(browser, `${server.url}#model=${encodeURIComponent(`${server.url}assets/models/${name}/`)}&e=${engine}&s=${encodeURIComponent('time flies')}`);
      const t0 = Date.now();
      const err = await ready(page);
      if (err) throw new Error(`${name}: ${err}`);
      await page.waitForFunction((n) => window.attnscope.info?.name === n && window.attnscope.result, name, { timeout: 600000 });
      const load = Date.now() - t0;
      // the 64-token input, then three more passes over it (the mask switched between the model's
      // own and padding alone, which cost the same): the median pass
      const tokens = await page.evaluate(async (text) => {
        const s = window.attnscope.store;
        s.update({ sentences: [text] });
        for (let i = 0; i < 6000; i++) {
          await new Promise((r) => setTimeout(r, 50));
          const r = window.attnscope.result;
          if (r && r.text === text && !s.get().busy) return r.length;
        }
        return -1;
      }, TEXT);
      const passes = [];
      for (let i = 0; i < 3; i++) {
        passes.push(await page.evaluate(async () => {
          const s = window.attnscope.store, before = window.attnscope.result;
          s.update({ mask: before.mask_kind === 'causal' ? 'padding' : 'causal' });
          for (;;) {
            await new Promise((r) => setTimeout(r, 20));
            const r = window.attnscope.result;
            if (r.mask_kind !== before.mask_kind && !s.get().busy) return r.elapsed_ms;
          }
        }));
      }
      passes.sort((a, b) => a - b);
      const { wasmBytes } = await page.evaluate(() => window.attnscope.stats());
      const r = await page.evaluate(() => ({ backend: window.attnscope.result.backend, next: window.attnscope.result.next_tokens?.length ?? 0, L: window.attnscope.result.attention.length }));
      console.log(`${name} · ${engine} (${r.backend}): loaded and first pass in ${(load / 1000).toFixed(1)} s; ${tokens} tokens: a pass ${passes[1].toFixed(0)} ms (median of 3; ${r.L} layers, next tokens at ${r.next} positions); wasm memory ${mb(wasmBytes)} MiB`);
      if (problems.length) console.log(`  problems: ${problems.join(' | ')}`);
      await page.close();
    }
  }
} finally {
  await browser.close();
  server.stop();
}
