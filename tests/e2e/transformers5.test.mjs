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
const BATCHES = ['v5_llama', 'v5_llama_linear', 'v5_llama_llama3', 'v5_llama_yarn', 'v5_qwen2', 'v5_qwen3', 'v5_mistral', 'v5_gemma3', 'v5_gemma3_softcap', 'v5_gpt2', 'v5_bert', 'v5_roberta', 'v5_distilbert',
  // QK-norm left out (noqknorm=1, the ablation): HF with every q_norm and k_norm an identity
  'v5_qwen3_noqknorm', 'v5_gemma3_noqknorm'];
const GENERATIONS = ['v5_llama_generate', 'v5_llama_yarn_generate', 'v5_qwen3_generate', 'v5_gemma3_generate', 'v5_gemma3_softcap_generate'];
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
      const url = `${server.url}#model=${encodeURIComponent(folderUrl(m.model))}&batch=1&${texts}&m=${m.mask}&e=${engine}${m.no_qk_norm ? '&noqknorm=1' : ''}`;
      const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
      assert.equal(await ready(page), null);
      await page.waitForFunction(([n, b]) => window.attnscope.info?.name === `e2e-${n}` && window.attnscope.store.get().run?.B === b, [m.model, B], { timeout: 120000 });
      const run = await page.evaluate(() => {
        const r = window.attnscope.store.get().run;
        return { T: r.T, mask: r.mask_kind, backend: r.backend, noQkNorm: r.noQkNorm, items: r.results.map((x) => ({ ids: x.token_ids, attention: x.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))), next: x.next_tokens ?? null })) };
      });
      if (engine === 'gpu') assert.match(run.backend, /WebGPU|gpu/i, `${caseName}: ran on ${run.backend}`);
      assert.equal(run.T, T);
      assert.equal(run.mask, m.mask);
      assert.equal(run.noQkNorm, Boolean(m.no_qk_norm), `${caseName} ${engine}: the ablation as asked`);
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
      // a soft-capped model's next-token panel says so, with its cap
      const cap = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/models', m.model, 'config.json'), 'utf8')).final_logit_softcapping;
      if (probs) assert.equal(/soft-capped to/.test(await page.textContent('#next-caption')), Boolean(cap), `${caseName}: the caption and the cap ${cap}`);
      if (cap) assert.match(await page.textContent('#next-caption'), new RegExp(`soft-capped to ${cap}·tanh\\(z/${cap}\\)`));
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

test('v5-gemma3 in the page: each sliding layer masks the keys outside its window and says why, the grid marks local and global layers, the window, QK-norm and rotary panels draw the model\'s own', async () => {
  const m = meta('v5_gemma3');
  const text = m.texts[0];
  const url = `${server.url}#model=${encodeURIComponent(folderUrl(m.model))}&s=${encodeURIComponent(text)}&e=cpu&l=2&h=1&q=12&inside=window,qknorm,rope`;
  const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
  assert.equal(await ready(page), null);
  await page.waitForFunction(() => document.querySelector('#inside-window')?.dataset.drawn && document.querySelector('#inside-qknorm')?.dataset.drawn, null, { timeout: 120000 });
  const got = await page.evaluate(() => {
    const r = window.attnscope.store.get().run, T = r.T;
    // layer 2 (sliding, a window of 5) against layer 5 (global), query 12
    const row = (l) => Array.from(r.maskOf(0, l).subarray(12 * T, 13 * T));
    return {
      T, reach: r.reach, sliding: row(2), global: row(5), pass: Array.from(r.maskOf(0).subarray(12 * T, 13 * T)),
      probs: Array.from(r.head(0, 2, 1).subarray(12 * T, 13 * T)),
      why: r.maskWhy(0, 2, 12, 3), whyNot: r.maskWhy(0, 2, 12, 9), whyGlobal: r.maskWhy(0, 5, 12, 3),
      labels: [...document.querySelectorAll('#model-view .rowlabel')].map((e) => e.className),
      note: document.querySelector('#model-view .grid-reach')?.textContent ?? '',
      window: document.querySelector('#inside-window')._window,
      qk: document.querySelector('#inside-qknorm')._qknorm,
      rope: document.querySelector('#inside-rope .inside-intro')?.textContent ?? '',
    };
  });
  assert.deepEqual(got.reach.map((r) => r.attention), ['sliding', 'sliding', 'sliding', 'sliding', 'sliding', 'global']);
  // the pass's mask is causal; layer 2's cuts keys 12 − 5 = 7 and before; layer 5's is the pass's
  for (let k = 0; k < got.T; k++) {
    assert.equal(got.global[k], got.pass[k], `layer 5, key ${k}`);
    assert.equal(got.sliding[k], k <= 12 && k > 7 ? 1 : 0, `layer 2, key ${k}`);
    if (!got.sliding[k]) assert.ok(got.probs[k] === 0, `layer 2 attends to masked key ${k}: ${got.probs[k]}`);
  }
  assert.equal(got.why, "outside layer 2's 5-token window");
  assert.equal(got.whyNot, null);
  assert.equal(got.whyGlobal, null);
  assert.deepEqual(got.labels.map((c) => c.replace('rowlabel', '').trim()), ['local', 'local', 'local', 'local', 'local', 'global']);
  assert.match(got.note, /sliding window of 5 tokens.*L5/);
  // the window panel: layer l reaches 4 keys back itself; through the stack, 4 more a layer until the global one
  assert.equal(got.window.q, 12);
  assert.deepEqual(got.window.back.map((b) => b.through), [8, 4, 0, 0, 0, 0]);
  assert.deepEqual(got.window.masked, [8, 8, 8, 8, 8, 0]);
  // QK-norm: every scale read back, the normed scores within a narrower range than the raw ones would be
  assert.equal(got.qk.ablated, false);
  assert.ok(got.qk.gq.every(Number.isFinite) && got.qk.gk.every(Number.isFinite));
  assert.ok(got.qk.normed[1] - got.qk.normed[0] > 0);
  assert.ok(got.qk.engine, 'the engine\'s scores are in the run');
  assert.match(got.rope, /θ = 10,000 in its sliding layers \(0, 1, 2, 3, 4\), and θ = 1,000,000 in its global layers \(5\)/);
  // the head view's tooltip on a key outside the window says why it is masked
  const box = await page.locator('#head-view canvas.overlay').boundingBox();
  {
    const cell = await page.evaluate(() => { const g = document.querySelector('#head-view')._view.g; return { x: g.x0 + (3 + 0.5) * g.cell - g.k0 * g.cell, y: g.y0 + (12 + 0.5) * g.cell - g.q0 * g.cell }; });
    await page.mouse.move(box.x + cell.x, box.y + cell.y);
    await page.waitForFunction(() => !document.querySelector('#head-view .tooltip')?.hidden, null, { timeout: 10000 });
    assert.match(await page.textContent('#head-view .tooltip'), /masked: outside layer 2's 5-token window/);
  }
  clean(problems);
  await page.close();
});
