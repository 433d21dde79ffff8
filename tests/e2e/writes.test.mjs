// What writes the next token in the page (issue 52; the direct logit attribution, src/analysis/
// logit_attribution.rs): the panel splits the predicted token's logit into the embedding's, each
// head's, each feed-forward's and the constants' writes, equal to HF's (tools/make_fixtures.py
// --only logit-attribution) on the CPU engine and on WebGPU; the focused head's write read onto
// the vocabulary gives HF's tokens; and on SmolLM2 the knock-out checks the claim: knocking out the
// head that writes most toward " Paris" drops its probability, to the CLI's figure.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { readFileSync, existsSync } from 'node:fs';
import { site, ready, servedFixtures, ROOT, ARTIFACTS, attnscope } from './harness.mjs';

const SMOLLM2 = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';
const fixtures = servedFixtures('la', ['tiny-gpt2', 'tiny-llama', 'v5-gemma3']);
const app = site({ fixtures });

const enc = encodeURIComponent;
const clean = ({ problems }) => assert.deepEqual(problems, [], 'no console errors or uncaught exceptions');

async function open(hash, opts = {}) {
  const p = await app.open(`#${hash}`, { width: 1280, height: 1000, ...opts });
  const err = await ready(p.page);
  assert.equal(err, null, `the model did not load: ${err}`);
  return p;
}

/** Waits until the panel has drawn the attribution of `text`, and the focused head's read-out. */
const writesDrawn = (page, text, { knocked = '' } = {}) => page.waitForFunction(([t, off]) => {
  const a = window.attnscope, s = a.store.get(), r = s.run;
  if (a.result?.text !== t || !a.result.logit_attribution || (r.head_mask ?? []).map(([l, h]) => `${l}:${h}`).join(',') !== off) return false;
  if (off && !r.baselineAttribution(0)) return false;
  const read = s.readOut, line = document.querySelector('#writes-view .writes-line')?.textContent ?? '';
  // with heads knocked out, the panel drawn for this run: its line on them shown (the line above
  // it reads the same before the new run is drawn)
  const knock = document.querySelector('#writes-view .writes-knock');
  if (off && (knock.hidden || !knock.textContent.includes(`${off.split(',').map((x) => `L${x.replace(':', ' H')}`).join(', ')} knocked out`))) return false;
  return /That logit is the sum/.test(line) && (off || read?.key === `${r.id}|0|${s.layer}|${s.head}`);
}, [text, knocked], { timeout: 180000 });

/** The panel's attribution, the focused head and its read-out, as the page holds them. */
const readPanel = (page) => page.evaluate(() => {
  const s = window.attnscope.store.get(), r = s.run;
  return { a: r.attributionOf(0), plain: r.baselineAttribution(0), backend: r.backend, layer: s.layer, head: s.head, read: s.readOut,
    ranked: [...document.querySelectorAll('#writes-view .writes-pick')].map((b) => b.textContent),
    knock: document.querySelector('#writes-view .writes-knock').hidden ? '' : document.querySelector('#writes-view .writes-knock').textContent,
    next: document.getElementById('next-line').textContent };
});

/** The largest difference of two attributions' parts, the logit and the target's probability. */
function partsDiff(got, want) {
  let worst = Math.max(Math.abs(got.embedding - want.embedding), Math.abs(got.other - want.other), Math.abs(got.logit - want.logit) / Math.max(1, Math.abs(want.logit)));
  want.heads.forEach((row, l) => {
    row.forEach((v, h) => { worst = Math.max(worst, Math.abs(got.heads[l][h] - v)); });
    worst = Math.max(worst, Math.abs(got.mlps[l] - want.mlps[l]));
  });
  return worst;
}

for (const [fixture, model] of [['la_gpt2', fixtures.path('tiny-gpt2')], ['la_llama', fixtures.path('tiny-llama')], ['la_gemma3', fixtures.path('v5-gemma3')]]) {
  test(`${fixture}: the page's "what writes the next token" equals HF's split of the logit on the CPU engine and on WebGPU, and the focused head's write raises and lowers HF's tokens`, async () => {
    const meta = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden', `${fixture}.json`), 'utf8'));
    const want = meta.attributions[0]; // the last position's likeliest token
    const text = meta.texts[0];
    for (const engine of ['cpu', 'gpu']) {
      const p = await open(`model=${enc(`${model}/`)}&e=${engine}&s=${enc(text)}&writes=1`);
      const { page } = p;
      await writesDrawn(page, text);
      assert.deepEqual(await page.evaluate(() => window.attnscope.result.token_ids), meta.token_ids);
      // the top head by its part: the ranking's first; a click focuses it and reads its write
      await page.click('#writes-view .writes-pick >> nth=0');
      await page.waitForFunction(() => { const s = window.attnscope.store.get(); return s.readOut?.key === `${s.run.id}|0|${s.layer}|${s.head}` && !s.readOut.error; }, null, { timeout: 60000 });
      const got = await readPanel(page);
      if (engine === 'gpu') assert.match(got.backend, /WebGPU|gpu/i, `ran on ${got.backend}`);
      assert.equal(got.a.position, want.position);
      assert.equal(got.a.target.id, want.target);
      const worst = partsDiff(got.a, want);
      assert.ok(worst <= 1e-4, `${engine}: a part differs from HF's by ${worst}`);
      const p0 = Math.abs(got.a.probability - want.probability);
      assert.ok(p0 <= 1e-4, `${engine}: p = ${got.a.probability} against HF's ${want.probability}`);
      // HF's largest head is the one focused, and its write raises and lowers HF's tokens
      const flat = want.heads.flatMap((row, l) => row.map((v, h) => ({ l, h, v }))).sort((x, y) => Math.abs(y.v) - Math.abs(x.v));
      assert.deepEqual([got.layer, got.head], [flat[0].l, flat[0].h], 'the ranking\'s first is HF\'s largest head');
      const k = Math.min(meta.k, got.read.promotes.length);
      assert.deepEqual(got.read.promotes.slice(0, k).map((x) => x.id), want.promotes[got.layer][got.head].slice(0, k), 'the tokens its write raises most');
      assert.deepEqual(got.read.suppresses.slice(0, k).map((x) => x.id), want.suppresses[got.layer][got.head].slice(0, k), 'the tokens its write lowers most');
      console.log(`${fixture} ${engine} (${got.backend}): parts max |Δ| against HF ${worst.toExponential(1)}, p ${p0.toExponential(1)}; top head L${got.layer} H${got.head}`);
      clean(p);
      await page.close();
    }
  });
}

test('SmolLM2: "The capital of France is" → " Paris"; the panel equals the CLI, and knocking out the head that writes most toward it drops p to the CLI\'s figure, shown in the panel and the next-token list', async () => {
  assert.ok(existsSync(path.join(ROOT, SMOLLM2)), `${SMOLLM2} is missing: scripts/setup.sh fetches it`);
  const text = 'The capital of France is';
  const cli = (args) => attnscope(['attention', '--model', path.join(ROOT, SMOLLM2), '--logit-attribution', ...args, '--', text]).results[0].logit_attribution;
  const want = cli(['--top-k', '6']);
  assert.equal(want.target.text, ' Paris');
  // the head that writes most toward " Paris", and the CLI's run without it
  const top = want.heads.flatMap((row, l) => row.map((v, h) => ({ l, h, v }))).sort((x, y) => Math.abs(y.v) - Math.abs(x.v))[0];
  const knocked = cli(['--head-mask', `${top.l}:${top.h}`, '--target', String(want.target.id)]);
  assert.ok(knocked.probability < want.probability - 0.3, `knocking out L${top.l} H${top.h} drops p(" Paris") from ${want.probability} to ${knocked.probability}`);
  for (const [engine, width, height] of [['cpu', 1280, 800], ['gpu', 1920, 1080], ['cpu', 390, 844]]) {
    const p = await open(`model=${enc(SMOLLM2)}&e=${engine}&s=${enc(text)}&writes=1`, { width, height });
    const { page } = p;
    await writesDrawn(page, text);
    await page.click('#writes-view .writes-pick >> nth=0');
    await writesDrawn(page, text);
    const got = await readPanel(page);
    const worst = partsDiff(got.a, want);
    // 30 layers of a Q4_1 model: the CLI's CPU engine and the page's within 1e-4 of each part
    assert.ok(worst <= 1e-4, `${engine} (${got.backend}): a part differs from the CLI's by ${worst}`);
    assert.deepEqual([got.layer, got.head], [top.l, top.h]);
    assert.match(got.ranked[0], new RegExp(`^L${top.l} H${top.h} \\+`));
    assert.deepEqual(got.read.promotes.map((x) => x.id), want.promotes[top.l][top.h].map((x) => x.id), 'the tokens its write raises most, as the CLI\'s');
    assert.match(await page.textContent('#writes-view .writes-head'), new RegExp(`Its write raises most: “ France” \\+`));
    // the knock-out: the same token, now without the head
    await page.click('#writes-view .writes-knock-button');
    await writesDrawn(page, text, { knocked: `${top.l}:${top.h}` });
    const out = await readPanel(page);
    assert.equal(out.a.target.id, want.target.id, 'the knocked-out run attributes the same token');
    assert.equal(out.a.heads[top.l][top.h], 0);
    assert.ok(Math.abs(out.a.probability - knocked.probability) <= 1e-4, `${engine}: p without L${top.l} H${top.h} ${out.a.probability}, the CLI's ${knocked.probability}`);
    assert.ok(Math.abs(out.plain.probability - want.probability) <= 1e-4, `${engine}: p with every head ${out.plain.probability}, the CLI's ${want.probability}`);
    assert.match(out.knock, new RegExp(`With L${top.l} H${top.h} knocked out: p\\(“ Paris”\\) ${want.probability.toFixed(3)} → ${knocked.probability.toFixed(3)}`));
    assert.match(out.next, new RegExp(`with L${top.l} H${top.h} knocked out the model expects`));
    console.log(`SmolLM2 ${engine} (${got.backend}): parts max |Δ| against the CLI ${worst.toExponential(1)}; L${top.l} H${top.h} writes ${top.v.toFixed(2)}, knocked out p ${want.probability.toFixed(3)} → ${out.a.probability.toFixed(3)} (CLI ${knocked.probability.toFixed(3)})`);
    await page.locator('#writes-details').screenshot({ path: path.join(ARTIFACTS, `writes-${width}.png`) }).catch(() => {});
    // back in: the panel's line is gone and the link forgets the head
    await page.click('#writes-view .writes-knock-button');
    await writesDrawn(page, text);
    assert.ok(/writes=1/.test(await page.evaluate(() => location.hash)));
    clean(p);
    await page.close();
  }
});

test('during a generation the panel follows the focused step: what writes the token the model wrote there, over the positions fed to it', async () => {
  const p = await open(`model=${enc(`${fixtures.path('tiny-llama')}/`)}&e=cpu&s=${enc('time flies like an arrow')}&gen=6&st=2&writes=1`);
  const { page } = p;
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 6 && !window.attnscope.result.running, null, { timeout: 60000 });
  const { P, written } = await page.evaluate(() => ({ P: window.attnscope.result.prompt_ids.length, written: window.attnscope.result.output_ids }));
  for (const step of [2, 4]) {
    if (step !== 2) await page.click(`#generate-view .gen-token[data-step="${step}"]`);
    // the pass over the step's positions brings the attribution at its last: the token written next
    await page.waitForFunction((T) => { const r = window.attnscope.store.get().run; return r?.generated?.full && r.T === T && r.attributionOf(0); }, P + step, { timeout: 60000 });
    const a = await page.evaluate(() => window.attnscope.store.get().run.attributionOf(0));
    assert.equal(a.position, P + step - 1, `step ${step}: the last position fed`);
    assert.equal(a.target.id, written[step], `step ${step}: the token the model wrote there`);
    const sum = a.embedding + a.heads.flat().reduce((x, y) => x + y, 0) + a.mlps.reduce((x, y) => x + y, 0) + a.other;
    assert.ok(Math.abs(sum - a.logit) <= 1e-4 * Math.max(1, Math.abs(a.logit)), `step ${step}: the parts sum to the logit (${sum} vs ${a.logit})`);
    await page.waitForFunction((t) => document.querySelector('#writes-view .writes-line')?.textContent.includes(`p = ${t}`), a.probability.toFixed(3), { timeout: 30000 });
  }
  clean(p);
  await page.close();
});
