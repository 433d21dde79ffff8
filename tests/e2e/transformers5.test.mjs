// Checkpoints as transformers 5 saves them (tests/fixtures/models/v5-*: `rope_parameters` and no
// top-level `rope_theta`, a Llama for each rope_type, Qwen2's `layer_types`, a chat template in
// chat_template.jinja that writes its own BOS) load by URL in the page, run on the CPU engine and
// on WebGPU and equal HF transformers' golden numbers: a padded batch's ids, attention and
// next-token probabilities, and `chat=1&gen=8` writing HF's tokens after the prompt HF's
// apply_chat_template(…, tokenize=True) gives (one BOS).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { cpSync, rmSync, readFileSync } from 'node:fs';
import { startServer, launch, openPage, ready, golden, ROOT } from './harness.mjs';

const TOL = 1e-4;
const BATCHES = ['v5_llama', 'v5_llama_linear', 'v5_llama_llama3', 'v5_llama_yarn', 'v5_qwen2', 'v5_qwen3', 'v5_mistral', 'v5_gemma3', 'v5_gpt2', 'v5_bert', 'v5_roberta', 'v5_distilbert'];
const GENERATIONS = ['v5_llama_generate', 'v5_llama_yarn_generate', 'v5_qwen3_generate', 'v5_gemma3_generate'];
const meta = (name) => JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden', `${name}.json`), 'utf8'));
const FOLDERS = [...new Set([...BATCHES, ...GENERATIONS].map((c) => meta(c).model))];
const served = (name) => path.join(ROOT, 'assets/models', `e2e-${name}`);

let server, browser;
before(async () => {
  for (const name of FOLDERS) cpSync(path.join(ROOT, 'tests/fixtures/models', name), served(name), { recursive: true });
  server = await startServer();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  server?.stop();
  for (const name of FOLDERS) rmSync(served(name), { recursive: true, force: true });
});

const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);
const folderUrl = (name) => `${server.url}assets/models/e2e-${name}/`;

for (const caseName of BATCHES) {
  test(`${caseName}: the page's padded batch equals HF transformers on the CPU engine and on WebGPU`, async () => {
    const m = meta(caseName);
    const { shape: [B, L, H, T], data } = golden(caseName, 'attention');
    const probs = m.model_type === 'bert' || m.model_type === 'roberta' || m.model_type === 'distilbert' ? null : golden(caseName, 'next_token_probs');
    for (const engine of ['cpu', 'gpu']) {
      const texts = m.texts.map((t) => `s=${encodeURIComponent(t)}`).join('&');
      const url = `${server.url}#model=${encodeURIComponent(folderUrl(m.model))}&batch=1&${texts}&m=${m.mask}&e=${engine}`;
      const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
      assert.equal(await ready(page), null);
      await page.waitForFunction(([n, b]) => window.attnscope.info?.name === `e2e-${n}` && window.attnscope.store.get().run?.B === b, [m.model, B], { timeout: 120000 });
      const run = await page.evaluate(() => {
        const r = window.attnscope.store.get().run;
        return { T: r.T, mask: r.mask_kind, backend: r.backend, items: r.results.map((x) => ({ ids: x.token_ids, attention: x.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))), next: x.next_tokens ?? null })) };
      });
      if (engine === 'gpu') assert.match(run.backend, /WebGPU|gpu/i, `${caseName}: ran on ${run.backend}`);
      assert.equal(run.T, T);
      assert.equal(run.mask, m.mask);
      let worst = 0, worstP = 0;
      run.items.forEach((item, b) => {
        const n = item.ids.length;
        assert.deepEqual(item.ids, m.token_ids[b].slice(0, n), `${caseName} ${engine}: item ${b}'s ids`);
        for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) {
          worst = Math.max(worst, Math.abs(item.attention[l][h][q][k] - data[(((b * L + l) * H + h) * T + q) * T + k]));
        }
        if (probs) {
          const V = probs.shape[2];
          for (let q = 0; q < n; q++) for (const p of item.next[q]) worstP = Math.max(worstP, Math.abs(p.p - probs.data[(b * T + q) * V + p.id]));
        }
      });
      console.log(`# ${caseName} ${engine}: attention max |Δ| ${worst.toExponential(2)}, next tokens ${worstP.toExponential(2)}`);
      assert.ok(worst <= TOL, `${caseName} ${engine}: attention max |Δ| ${worst} against HF`);
      assert.ok(worstP <= TOL, `${caseName} ${engine}: next-token probabilities max |Δ| ${worstP} against HF`);
      clean(problems);
      await page.close();
    }
  });
}

for (const caseName of GENERATIONS) {
  test(`${caseName}: chat=1&gen=8 wraps the prompt in chat_template.jinja with one BOS and writes HF's tokens, on the CPU engine and on WebGPU`, async () => {
    const m = meta(caseName);
    const user = m.chat[0].content;
    for (const engine of ['cpu', 'gpu']) {
      const url = `${server.url}#model=${encodeURIComponent(folderUrl(m.model))}&s=${encodeURIComponent(user)}&e=${engine}&chat=1&gen=${m.max_new_tokens}`;
      const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
      assert.equal(await ready(page), null);
      await page.waitForFunction((n) => window.attnscope.result?.output_ids?.length === n && !window.attnscope.result.running, m.output_ids.length, { timeout: 120000 });
      const got = await page.evaluate(() => {
        const r = window.attnscope.result;
        return { prompt_ids: r.prompt_ids, output_ids: r.output_ids, steps: r.steps.map((s) => s.top_k.map((p) => p.id)), backend: r.backend, chat: window.attnscope.info.chat_template };
      });
      assert.equal(got.chat, true, 'the folder\'s chat_template.jinja is read');
      assert.equal(got.backend.startsWith('gpu'), engine === 'gpu', `${engine}: generated on ${got.backend}`);
      assert.deepEqual(got.prompt_ids, m.prompt_ids, `${caseName} ${engine}: the chat prompt's ids (one BOS)`);
      assert.deepEqual(got.output_ids, m.output_ids, `${caseName} ${engine}: the greedy ids`);
      assert.deepEqual(got.steps, m.step_top5_ids);
      assert.match(await page.textContent('#generate-caption'), /as a chat/);
      clean(problems);
      await page.close();
    }
  });
}
