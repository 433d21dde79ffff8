// Inside the encoder, panels 4, 7 and 8 (why √d_k, the stack and its output, cross-attention):
// each opened from the hash, drawn, its numbers equal to the CLI's, and a screenshot in
// test-artifacts/inside-<id>.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, launch, openPage, ready, maxDiff, ARTIFACTS, ROOT, MODEL_DIR, attnscope } from './harness.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launch({ webgpu: false }); });
after(async () => { await browser?.close(); server?.stop(); });

const cli = (args, model = MODEL_DIR) => attnscope(['attention', '--model', model, ...args]);

const TEXT = 'the cat sat on the mat and looked at the door';

async function open(hash) {
  const p = await openPage(browser, server.url + hash, { width: 1280, height: 900 });
  assert.equal(await ready(p.page), null);
  return p;
}

/** Waits until panel `id` is drawn from the page's current run. */
async function drawn(page, id) {
  await page.waitForFunction((id) => {
    const s = window.attnscope.store.get(), el = document.getElementById(`inside-${id}`);
    return s.run && el.dataset.drawn === String(s.run.id);
  }, id, { timeout: 120000 });
}

const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);
const maxAbs = (a, b) => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0);

test('why √d_k: the ablation switch reruns everything unscaled; the entropies with and without equal the CLI; the variance experiment', async () => {
  const { page, problems } = await open(`#e=cpu&s=${encodeURIComponent(TEXT)}&inside=scale`);
  await drawn(page, 'scale');
  await page.waitForFunction(() => document.getElementById('inside-scale')._numbers && window.attnscope.store.get().scaling);
  await drawn(page, 'scale');
  const withS = cli(['--head-metrics', '--', TEXT]).results[0].head_metrics.entropy.flat();
  const without = cli(['--head-metrics', '--no-scale', '--', TEXT]).results[0].head_metrics.entropy.flat();
  let shown = await page.evaluate(() => document.getElementById('inside-scale')._numbers);
  assert.ok(maxAbs(shown.with, withS) < 1e-4, `entropy with ÷√d_k: ${maxAbs(shown.with, withS)}`);
  assert.ok(maxAbs(shown.without, without) < 1e-4, `entropy without: ${maxAbs(shown.without, without)}`);
  assert.equal(await page.isHidden('#inside-scale .inside-banner'), true);
  assert.equal(await page.isHidden('#noscale-note'), true);
  // the experiment: Var(q·k) ≈ d_k, scaled ≈ 1, d_k = 1 … 512
  const sc = await page.evaluate(() => window.attnscope.store.get().scaling);
  assert.deepEqual(sc.map((p) => p.d_k), [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]);
  for (const p of sc) assert.ok(Math.abs(p.scaled - 1) < 0.2 && Math.abs(p.raw / p.d_k - 1) < 0.2, JSON.stringify(p));
  assert.match(await page.getAttribute('#inside-scale > figure > canvas', 'aria-label') ?? '', /variance/);
  // the switch: the whole page now shows the unscaled attention, equal to the CLI's --no-scale
  await page.check('#inside-scale input[type=checkbox]');
  await page.waitForFunction(() => window.attnscope.store.get().run?.scale === 'none' && location.hash.includes('noscale=1'));
  await drawn(page, 'scale');
  const want = cli(['--no-scale', '--', TEXT]).results[0];
  const got = await page.evaluate(() => window.attnscope.result.attention);
  assert.ok(maxDiff(got, want.attention) < 1e-4, `unscaled attention: ${maxDiff(got, want.attention)}`);
  shown = await page.evaluate(() => document.getElementById('inside-scale')._numbers);
  assert.ok(maxAbs(shown.with, withS) < 1e-4 && maxAbs(shown.without, without) < 1e-4, 'the same two grids under the ablation');
  assert.equal(await page.isVisible('#inside-scale .inside-banner'), true);
  assert.equal(await page.isVisible('#noscale-note'), true);
  assert.match(await page.textContent('#noscale-note'), /not divided by √dk/);
  await page.locator('#inside-scale').screenshot({ path: path.join(ARTIFACTS, 'inside-scale.png') });
  await page.uncheck('#inside-scale input[type=checkbox]');
  await page.waitForFunction(() => window.attnscope.store.get().run?.scale === 'sqrt_dk');
  assert.ok(maxDiff(await page.evaluate(() => window.attnscope.result.attention), cli(['--', TEXT]).results[0].attention) < 1e-4);
  clean(problems);
  await page.close();
});

test('the stack: cosines to the previous layer from the CLI\'s hidden states, the sentence embedding, a batch\'s similarities, tiny-bert\'s logits', async () => {
  const texts = [TEXT, 'a dog slept on the rug'];
  const { page, problems } = await open(`#e=cpu&${texts.map((t) => `s=${encodeURIComponent(t)}`).join('&')}&inside=stack`);
  await drawn(page, 'stack');
  const want = cli(['--hidden-states', '--sentence-embedding', '--', ...texts]).results;
  const hs = want[0].hidden_states, L = hs.length - 1, T = hs[0].length;
  const cos = (a, b) => { let d = 0, x = 0, y = 0; for (let i = 0; i < a.length; i++) { d += a[i] * b[i]; x += a[i] * a[i]; y += b[i] * b[i]; } return d / Math.sqrt(x * y); };
  const sims = [];
  for (let l = 1; l <= L; l++) for (let t = 0; t < T; t++) sims.push(cos(hs[l][t], hs[l - 1][t]));
  const got = await page.evaluate(() => Array.from(window.attnscope.store.get().run.layerSimilarityOf(0).values).slice(0, window.attnscope.store.get().run.L * window.attnscope.result.tokens.length));
  // the page's run is padded to the longer text; item 0 is the longer, so T matches
  assert.equal(got.length, sims.length);
  assert.ok(maxAbs(got, sims) < 1e-4, `cosines: ${maxAbs(got, sims)}`);
  const out = await page.evaluate(() => document.getElementById('inside-stack')._output);
  assert.ok(maxAbs(out.embedding, want[0].sentence_embedding) < 1e-4, 'sentence embedding');
  const e = want.map((w) => w.sentence_embedding);
  const pairs = [0, 1].flatMap((i) => [0, 1].map((j) => e[i].reduce((s, v, d) => s + v * e[j][d], 0)));
  assert.ok(maxAbs(out.pairs, pairs) < 1e-4, `sentence similarities: ${out.pairs} vs ${pairs}`);
  assert.match(await page.textContent('#inside-stack'), /First values: /);
  await page.locator('#inside-stack').screenshot({ path: path.join(ARTIFACTS, 'inside-stack.png') });
  // a classification checkpoint: its logits (the CLI's) and their softmax with its labels
  const tiny = path.join(ROOT, 'tests/fixtures/models/tiny-bert');
  await page.evaluate(() => window.attnscope.store.update({ batch: false }));
  await page.setInputFiles('#files', ['config.json', 'model.safetensors', 'tokenizer.json'].map((f) => path.join(tiny, f)));
  await page.waitForFunction(() => window.attnscope.info?.layers === 2 && window.attnscope.store.get().run?.L === 2);
  await drawn(page, 'stack');
  const tw = cli(['--', TEXT], tiny).results[0];
  const tout = await page.evaluate(() => document.getElementById('inside-stack')._output);
  assert.ok(maxAbs(tout.logits, tw.logits) < 1e-4, `logits ${tout.logits} vs ${tw.logits}`);
  const ex = tw.logits.map((z) => Math.exp(z - Math.max(...tw.logits))), sum = ex.reduce((a, b) => a + b);
  assert.ok(maxAbs(tout.probs, ex.map((v) => v / sum)) < 1e-5);
  const table = await page.textContent('#inside-stack table');
  for (const name of ['negative', 'neutral', 'positive']) assert.match(table, new RegExp(name));
  await page.locator('#inside-stack').screenshot({ path: path.join(ARTIFACTS, 'inside-stack-tiny-bert.png') });
  clean(problems);
  await page.close();
});

test('cross-attention: asks for a pair and fills one; the rectangular attention equals the CLI\'s --cross-attention', async () => {
  const { page, problems } = await open(`#e=cpu&s=${encodeURIComponent(TEXT)}&inside=cross&l=2&h=4`);
  await drawn(page, 'cross');
  assert.match(await page.textContent('#inside-cross'), /needs a second sentence/);
  await page.click('#inside-cross .inside-empty button');
  await page.waitForFunction(() => document.getElementById('inside-cross')._shown && window.attnscope.store.get().pair);
  await drawn(page, 'cross');
  const pair = await page.evaluate(() => window.attnscope.store.get().pair);
  const want = cli(['--cross-attention', '2', '--pair', pair, '--', TEXT]).results[0].cross_attention;
  const shown = await page.evaluate(() => document.getElementById('inside-cross')._shown);
  assert.equal(shown.layer, 2);
  assert.equal(shown.head, 4);
  assert.deepEqual(shown.queries, want.queries);
  assert.deepEqual(shown.keys, want.keys);
  assert.ok(maxAbs(shown.attention, want.attention.flat(2)) < 1e-4, `cross-attention: ${maxAbs(shown.attention, want.attention.flat(2))}`);
  assert.equal(await page.locator('#inside-cross .inside-small canvas').count(), 12);
  assert.match(await page.textContent('#inside-cross'), /no trained cross-attention/);
  await page.locator('#inside-cross').screenshot({ path: path.join(ARTIFACTS, 'inside-cross.png') });
  clean(problems);
  await page.close();
});
