// Every family in the page, as a person loading their own checkpoint meets it: RoBERTa,
// DistilBERT and GPT-2 (tests/fixtures/models/tiny-*) load from a URL, run on the CPU engine and
// on WebGPU, equal the CLI and HF transformers' golden numbers (a padded batch of each, GPT-2's
// next tokens too), and each panel either draws or says in one line why it does not apply. GPT-2 opens under its own causal mask and shows its next
// tokens. Screenshots of GPT-2's page at phone, laptop and projector widths in test-artifacts/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { cpSync, rmSync, readFileSync } from 'node:fs';
import { startServer, launch, openPage, ready, maxDiff, golden, ARTIFACTS, ROOT, attnscope } from './harness.mjs';

// the app server serves checkpoints from assets/models/ (git-ignored): the fixtures go there for the run
const FAMILIES = ['tiny-roberta', 'tiny-distilbert', 'tiny-gpt2'];
const dir = (name) => path.join(ROOT, 'tests/fixtures/models', name);
const served = (name) => path.join(ROOT, 'assets/models', `e2e-${name}`);

let server, browser;
before(async () => {
  for (const name of FAMILIES) cpSync(dir(name), served(name), { recursive: true });
  server = await startServer();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  server?.stop();
  for (const name of FAMILIES) rmSync(served(name), { recursive: true, force: true });
});

const TEXT = 'time flies like an arrow';

const cli = (name, args) => attnscope(['attention', '--model', dir(name), ...args]);

const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);

async function open(name, hash, size = {}) {
  const url = `${server.url}#model=${encodeURIComponent(`${server.url}assets/models/e2e-${name}/`)}&s=${encodeURIComponent(TEXT)}&${hash}`;
  const p = await openPage(browser, url, { width: 1280, height: 900, ...size });
  assert.equal(await ready(p.page), null);
  await p.page.waitForFunction((n) => window.attnscope.info?.name === `e2e-${n}` && window.attnscope.result?.text === 'time flies like an arrow', name, { timeout: 120000 });
  return p;
}

for (const [name, type] of [['tiny-roberta', 'roberta'], ['tiny-distilbert', 'distilbert'], ['tiny-gpt2', 'gpt2']]) {
  test(`${type}: the page's attention equals the CLI's on the CPU engine and on WebGPU; every panel draws or says why not`, async () => {
    const want = cli(name, ['--top-k', '5', '--', TEXT].filter((a) => type === 'gpt2' || (a !== '--top-k' && a !== '5'))).results[0];
    for (const engine of ['cpu', 'gpu']) {
      const { page, problems } = await open(name, `e=${engine}&inside=embeddings,residual,cross`);
      const got = await page.evaluate(() => {
        const r = window.attnscope.result;
        return { model_type: r.model_type, mask: r.mask_kind, tokens: r.tokens, attention: r.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))), next: r.next_tokens ?? null, backend: r.backend };
      });
      assert.equal(got.model_type, type);
      assert.deepEqual(got.tokens, want.tokens);
      const d = maxDiff(got.attention, want.attention);
      assert.ok(d <= 1e-4, `${type} ${engine} (${got.backend}): attention differs from the CLI's by ${d}`);
      if (engine === 'gpu') assert.match(got.backend, /WebGPU|gpu/i, `${type}: ran on ${got.backend}`);
      // the page names the family's special tokens, never BERT's when it has others
      const info = await page.evaluate(() => window.attnscope.info);
      assert.equal(info.model_type, type);
      if (type === 'gpt2') {
        assert.equal(got.mask, 'causal', `GPT-2 opens under its own mask (${engine})`);
        assert.equal(await page.inputValue('#mask'), 'causal');
        assert.match(await page.textContent('#mask option[value=causal]'), /the model's own/);
        assert.ok(await page.isDisabled('#pair'), 'GPT-2 takes no pair');
        // the next tokens: the CLI's at every position
        for (let q = 0; q < want.next_tokens.length; q++) {
          assert.deepEqual(got.next[q].map((p) => p.id), want.next_tokens[q].map((p) => p.id), `position ${q}`);
          for (let i = 0; i < 5; i++) assert.ok(Math.abs(got.next[q][i].p - want.next_tokens[q][i].p) <= 1e-4);
        }
        await page.waitForSelector('#next-view:not([hidden])');
        const line = await page.textContent('#next-line');
        assert.match(line, /After “time flies like an arrow”, the model expects:/);
        assert.equal(await page.locator('#next-list li').count(), 5);
        // the focused row moves the panel: the row of "like" asks what follows "time flies like"
        const like = got.tokens.findIndex((t) => /like/.test(t));
        await page.evaluate((q) => window.attnscope.store.update({ sel: [q] }), like);
        await page.waitForFunction(() => /After “time flies like”/.test(document.getElementById('next-line').textContent));
        assert.match(await page.textContent('#next-line'), /goes on with “ an”/);
        // any other mask is an ablation, and the page says so
        await page.selectOption('#mask', 'none');
        await page.waitForFunction(() => window.attnscope.result?.mask_kind === 'none');
        assert.match(await page.textContent('#model-note'), /Ablation: e2e-tiny-gpt2 was trained with the causal mask/);
        assert.equal(await page.evaluate(() => window.attnscope.result.mask_ablation), true);
      } else {
        assert.ok(await page.isHidden('#next-view'), 'an encoder has no next token');
      }
      // the panels: the embeddings say what this family adds, the cross panel why it does or not apply
      await page.waitForFunction(() => /token/.test(document.getElementById('inside-embeddings').textContent));
      const emb = await page.textContent('#inside-embeddings');
      if (type === 'gpt2') assert.match(emb, /e2e-tiny-gpt2 has no token types, and no LayerNorm here: it is pre-norm/);
      if (type === 'distilbert') assert.match(emb, /distilbert has no token types/);
      if (type === 'roberta') assert.match(emb, /Positions count from 2, not 0/);
      if (type !== 'roberta') assert.doesNotMatch(emb, /\+ token-type embedding/, 'no third table drawn');
      if (type === 'gpt2') {
        assert.match(await page.textContent('#inside-residual'), /a final LayerNorm norm/);
        assert.match(await page.textContent('#inside-cross'), /does not apply/);
      }
      // word pieces read as text: no byte-level Ġ in what the views write
      const labels = await page.evaluate(() => window.attnscope.store.get().run.results[0].labels);
      assert.ok(labels.every((l) => !/Ġ/.test(l)), labels.join('|'));
      clean(problems);
      await page.close();
    }
  });
}

for (const [caseName, name] of [['roberta_batch', 'tiny-roberta'], ['distilbert_batch', 'tiny-distilbert'], ['gpt2_batch', 'tiny-gpt2']]) {
  test(`${caseName}: the page's padded batch equals HF transformers on the CPU engine and on WebGPU`, async () => {
    const meta = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden', `${caseName}.json`), 'utf8'));
    const { shape: [B, L, H, T], data } = golden(caseName, 'attention');
    const probs = meta.model_type === 'gpt2' ? golden(caseName, 'next_token_probs') : null;
    for (const engine of ['cpu', 'gpu']) {
      const texts = meta.texts.map((t) => `s=${encodeURIComponent(t)}`).join('&');
      const url = `${server.url}#model=${encodeURIComponent(`${server.url}assets/models/e2e-${name}/`)}&batch=1&${texts}&m=${meta.mask}&e=${engine}`;
      const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
      assert.equal(await ready(page), null);
      await page.waitForFunction((n) => window.attnscope.info?.name === `e2e-${n}` && window.attnscope.store.get().run?.B === 3 - (n === 'tiny-distilbert'), name, { timeout: 120000 });
      const run = await page.evaluate(() => {
        const r = window.attnscope.store.get().run;
        return { T: r.T, mask: r.mask_kind, items: r.results.map((x) => ({ tokens: x.tokens, attention: x.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))), next: x.next_tokens ?? null })) };
      });
      assert.equal(run.T, T);
      assert.equal(run.mask, meta.mask);
      let worst = 0, worstP = 0;
      run.items.forEach((item, b) => {
        assert.deepEqual(item.tokens, meta.tokens[b], `${caseName} ${engine}: item ${b}'s tokens`);
        for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) for (let q = 0; q < T; q++) for (let k = 0; k < T; k++) {
          worst = Math.max(worst, Math.abs(item.attention[l][h][q][k] - data[(((b * L + l) * H + h) * T + q) * T + k]));
        }
        if (probs) {
          const V = probs.shape[2];
          for (let q = 0; q < T; q++) for (const p of item.next[q]) worstP = Math.max(worstP, Math.abs(p.p - probs.data[(b * T + q) * V + p.id]));
        }
      });
      assert.ok(worst <= 1e-4, `${caseName} ${engine}: attention max |Δ| ${worst} against HF`);
      assert.ok(worstP <= 1e-4, `${caseName} ${engine}: next-token probabilities max |Δ| ${worstP} against HF`);
      clean(problems);
      await page.close();
    }
  });
}

test('GPT-2 at phone, laptop and projector widths: screenshots', async () => {
  for (const [w, h] of [[390, 844], [1280, 900], [1920, 1080]]) {
    const { page, problems } = await open('tiny-gpt2', 'e=cpu', { width: w, height: h, scale: 2 });
    await page.waitForSelector('#next-view:not([hidden])');
    await page.screenshot({ path: path.join(ARTIFACTS, `gpt2-${w}.png`), fullPage: false });
    await page.locator('#head-panel').screenshot({ path: path.join(ARTIFACTS, `gpt2-head-${w}.png`) });
    clean(problems);
    await page.close();
  }
});
