// Value-weighted attention in the page (issue 52; Kobayashi et al. 2020): the "weigh by ‖value‖"
// switch weighs every attention view by each key's ‖W_O^h v_j‖ (the engine's, src/analysis/
// value_weighted.rs), each row rescaled to sum to 1 and labelled as a view. The page's value
// sizes and its exported attention equal HF's (tools/make_fixtures.py --only value-weighted) on
// the CPU engine and on WebGPU: all-MiniLM, a tiny GPT-2, and a tiny Llama whose query heads share value heads;
// and a translation's three attentions (a tiny Marian); the <attn-scope value-weighted> element's too.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { site, ready, golden, servedFixtures, ROOT, ARTIFACTS } from './harness.mjs';

const fixtures = servedFixtures('vw', ['tiny-gpt2', 'tiny-llama', 'tiny-marian']);
const app = site({ fixtures });

const enc = encodeURIComponent;
const clean = ({ problems }) => assert.deepEqual(problems, [], 'no console errors or uncaught exceptions');

for (const [fixture, model] of [['vw_minilm', ''], ['vw_gpt2', `${fixtures.path('tiny-gpt2')}/`], ['vw_llama', `${fixtures.path('tiny-llama')}/`]]) {
  test(`${fixture}: "weigh by ‖value‖" gives HF's value sizes and value-weighted attention (rows renormalised) on the CPU engine and on WebGPU, labelled as a view, in the link and the export`, async () => {
    const meta = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden', `${fixture}.json`), 'utf8'));
    const norms = golden(fixture, 'value_norms'); // (B, L, H, T)
    const weighted = golden(fixture, 'value_weighted'); // (B, L, H, T, T)
    const [, L, H, TT] = norms.shape;
    const text = meta.texts[0];
    for (const engine of ['cpu', 'gpu']) {
      // the CPU engine's page opens with the switch on (a link's vw=1); WebGPU's is switched on
      const p = await app.open(`#${model ? `model=${enc(model)}&` : ''}e=${engine}&s=${enc(text)}${engine === 'cpu' ? '&vw=1' : ''}&l=1&h=1`, { width: 1280, height: 1000 });
      const { page } = p;
      assert.equal(await ready(page), null);
      if (engine === 'gpu') {
        await page.waitForFunction((t) => window.attnscope.result?.text === t, text, { timeout: 120000 });
        await page.click('#byvalue');
      }
      await page.waitForFunction(() => window.attnscope.store.get().run?.valueNormsOf(0, 0, 0) && !document.getElementById('value-note').hidden && /‖W_O·v‖/.test(document.getElementById('value-note').textContent), null, { timeout: 120000 });
      const got = await page.evaluate(() => {
        const s = window.attnscope.store.get(), r = s.run;
        const all = [];
        for (let l = 0; l < r.L; l++) for (let h = 0; h < r.H; h++) all.push(Array.from(r.valueNormsOf(0, l, h)));
        return { T: r.T, backend: r.backend, norms: all, ids: window.attnscope.result.token_ids };
      });
      // item 0 of the fixture's padded batch: its own tokens, then padding
      const n = got.T;
      assert.deepEqual(got.ids, meta.token_ids[0].slice(0, n));
      assert.equal(new Set(meta.token_ids[0].slice(n)).size, n < TT ? 1 : 0, 'the rest is padding');
      if (engine === 'gpu') assert.match(got.backend, /WebGPU|gpu/i, `ran on ${got.backend}`);
      // each key's ‖W_O^h v_j‖, within 1e-4 of the head's largest
      let worst = 0;
      for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
        const want = norms.data.subarray(((l * H + h) * TT), ((l * H + h) * TT) + n);
        const top = Math.max(...want);
        for (let k = 0; k < n; k++) worst = Math.max(worst, Math.abs(got.norms[l * H + h][k] - want[k]) / top);
      }
      assert.ok(worst <= 1e-4, `${engine}: value sizes differ from HF's by ${worst} of a head's largest`);
      // the head view's JSON export: HF's value-weighted attention, each row renormalised
      const [d] = await Promise.all([page.waitForEvent('download'), page.click('.exports[data-view=head] .export[data-format=json]')]);
      const exported = JSON.parse(readFileSync(await d.path(), 'utf8'));
      assert.match(exported.value_weighted, /rows renormalised/);
      let rows = 0;
      for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) for (let q = 0; q < n; q++) {
        const at = ((l * H + h) * TT + q) * TT;
        const want = Array.from(weighted.data.subarray(at, at + n));
        const sum = want.reduce((a, b) => a + b, 0);
        const row = exported.attention[l][h][q];
        rows = Math.max(rows, ...want.map((w, k) => Math.abs(row[k] - w / sum)));
      }
      assert.ok(rows <= 1e-4, `${engine}: the exported value-weighted rows differ from HF's by ${rows}`);
      console.log(`${fixture} ${engine} (${got.backend}): value sizes ${worst.toExponential(1)} of a head's largest, exported rows ${rows.toExponential(1)}`);
      // labelled as a view; the result keeps the model's attention; the link keeps the switch
      assert.ok(await page.isVisible('#byvalue-note'));
      assert.ok(await page.isChecked('#byvalue'));
      const plain = await page.evaluate((q) => Array.from(window.attnscope.result.attention[1][1][q]), n - 1);
      const hf = golden(fixture, 'attention'), at = ((1 * H + 1) * TT + n - 1) * TT;
      plain.forEach((v, k) => assert.ok(Math.abs(v - hf.data[at + k]) <= 1e-4, `the result's L1 H1 row ${n - 1} is the model's attention at key ${k}`));
      await page.waitForFunction(() => /vw=1/.test(location.hash));
      if (engine === 'cpu' && !model) await page.locator('#model-h').screenshot({ path: path.join(ARTIFACTS, 'values-switch.png') }).catch(() => {});
      // off: the views are the weights again
      await page.click('#byvalue');
      await page.waitForFunction(() => document.getElementById('value-note').hidden && !/vw=1/.test(location.hash));
      clean(p);
      await page.close();
    }
  });
}

test('vw_marian: a translation\'s "weigh by ‖value‖" gives HF\'s value sizes of the encoder\'s, the decoder\'s and the cross-attention, its views weighed and labelled, its export too', async () => {
  const meta = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden/vw_marian.json'), 'utf8'));
  const item = meta.items[0];
  for (const engine of ['cpu', 'gpu']) {
    const p = await app.open(`#model=${enc(`${fixtures.path('tiny-marian')}/`)}&e=${engine}&s=${enc(item.source)}&l=1&h=2`, { width: 1280, height: 1000 });
    const { page } = p;
    assert.equal(await ready(page), null);
    await page.waitForFunction(() => window.attnscope.store.get().translation?.results[0], null, { timeout: 120000 });
    await page.click('#translation-view .tr-byvalue');
    await page.waitForFunction(() => window.attnscope.store.get().translation?.results[0].value_norms && /Weighed by ‖value‖/.test(document.querySelector('#translation-view .tr-value-note')?.textContent ?? ''), null, { timeout: 120000 });
    const got = await page.evaluate(async () => {
      const { matricesOf } = await import('/web/result.js');
      const r = window.attnscope.store.get().translation.results[0];
      return { ids: r.output_ids, norms: r.value_norms, drawn: Object.fromEntries(['encoder', 'decoder', 'cross'].map((k) => [k, matricesOf(r, k, true).map((l) => l.map((m) => m.values))])) };
    });
    // the page writes up to 64 tokens, HF's fixture 8 (its last EOS, forced at that length): the
    // steps they share read the same inputs, and a step's rows see no later one
    const shared = item.output_ids.length - 1;
    assert.deepEqual(got.ids.slice(0, shared), item.output_ids.slice(0, shared), `${engine}: HF's greedy output`);
    let worst = 0, rows = 0;
    for (const kind of ['encoder', 'decoder', 'cross']) {
      const norms = golden('vw_marian', `value_norms_${kind}_0`), weighted = golden('vw_marian', `value_weighted_${kind}_0`);
      const [L, H, nk] = norms.shape, nq = weighted.shape[2];
      for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
        const want = norms.data.subarray((l * H + h) * nk, (l * H + h + 1) * nk), top = Math.max(...want);
        want.forEach((w, k) => { worst = Math.max(worst, Math.abs(got.norms[kind][l][h][k] - w) / top); });
        for (let q = 0; q < nq; q++) {
          const at = ((l * H + h) * nq + q) * nk, row = Array.from(weighted.data.subarray(at, at + nk)), sum = row.reduce((a, b) => a + b, 0);
          row.forEach((w, k) => { rows = Math.max(rows, Math.abs(got.drawn[kind][l][h][q][k] - w / sum)); });
        }
      }
    }
    assert.ok(worst <= 1e-4, `${engine}: value sizes differ from HF's by ${worst} of a head's largest`);
    assert.ok(rows <= 1e-4, `${engine}: the weighed rows differ from HF's by ${rows}`);
    console.log(`vw_marian ${engine}: value sizes ${worst.toExponential(1)} of a head's largest, weighed rows ${rows.toExponential(1)}`);
    // the head view's SVG export says what it shows
    const [d] = await Promise.all([page.waitForEvent('download'), page.click('#translation-view .export[data-view=head][data-format=svg]')]);
    assert.match(readFileSync(await d.path(), 'utf8'), /weighed by ‖value‖, rows renormalised/);
    assert.ok(await page.isChecked('#translation-view .tr-byvalue'));
    await page.waitForFunction(() => /vw=1/.test(location.hash));
    if (engine === 'cpu') await page.locator('#translation').screenshot({ path: path.join(ARTIFACTS, 'values-translation.png') }).catch(() => {});
    clean(p);
    await page.close();
  }
});

test('<attn-scope value-weighted>: an encoder\'s head view and a translation\'s cross-attention weighed by ‖value‖ as HF\'s, the caption saying so; the attribute removed, the weights again', async () => {
  const mini = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden/vw_minilm.json'), 'utf8'));
  const marian = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden/vw_marian.json'), 'utf8')).items[0];
  const p = await app.open('#e=cpu', { width: 1024, height: 900 });
  const { page } = p;
  assert.equal(await ready(page), null);
  await page.evaluate(async ([text, source, tiny]) => {
    await import('/web/attn-scope.js');
    const make = (id, attrs) => {
      const el = document.createElement('attn-scope');
      el.id = id;
      for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
      el.style.cssText = 'display:block;width:720px';
      return el;
    };
    document.body.prepend(
      make('enc', { sentence: text, view: 'head', layer: '1', head: '1', engine: 'cpu', 'value-weighted': '' }),
      make('tr', { model: `/${tiny}/`, sentence: source, attention: 'cross', layer: '1', head: '2', engine: 'cpu', 'value-weighted': '' }));
  }, [mini.texts[0], marian.source, fixtures.path('tiny-marian')]);
  const caption = (id) => page.evaluate((i) => document.getElementById(i).shadowRoot.querySelector('.caption').textContent, id);
  // the encoder: its head view's rows are HF's value-weighted attention, renormalised
  await page.waitForFunction(() => /weighed by ‖value‖, rows renormalised/.test(document.getElementById('enc').shadowRoot.querySelector('.caption').textContent), null, { timeout: 120000 });
  const enc = await page.evaluate(async () => {
    const { shownOf } = await import('/web/scope.js');
    const r = shownOf(document.getElementById('enc').store.get());
    return { T: r.T, weighed: r.valueWeighted, rows: Array.from(r.head(0, 1, 1)) };
  });
  assert.equal(enc.weighed, true);
  const weighted = golden('vw_minilm', 'value_weighted'), [, , H, TT] = golden('vw_minilm', 'value_norms').shape;
  let worst = 0;
  for (let q = 0; q < enc.T; q++) {
    const at = ((1 * H + 1) * TT + q) * TT, want = Array.from(weighted.data.subarray(at, at + enc.T)), sum = want.reduce((a, b) => a + b, 0);
    want.forEach((w, k) => { worst = Math.max(worst, Math.abs(enc.rows[q * enc.T + k] - w / sum)); });
  }
  assert.ok(worst <= 1e-4, `the element's weighed L1 H1 differs from HF's by ${worst}`);
  // the translation: its cross-attention weighed, the view's note and the caption say so
  await page.waitForFunction(() => {
    const root = document.getElementById('tr').shadowRoot;
    return /Weighed by ‖value‖/.test(root.querySelector('.tr-value-note')?.textContent ?? '') && /weighed by ‖value‖/.test(root.querySelector('.caption').textContent);
  }, null, { timeout: 120000 });
  const cross = await page.evaluate(async () => {
    const { matricesOf } = await import('/web/result.js');
    const r = document.getElementById('tr').store.get().translation.results[0];
    return matricesOf(r, 'cross', true)[1][2].values;
  });
  const want = golden('vw_marian', 'value_weighted_cross_0'), [, Hc, nq, nk] = want.shape;
  let rows = 0;
  for (let q = 0; q < nq; q++) {
    const at = ((1 * Hc + 2) * nq + q) * nk, row = Array.from(want.data.subarray(at, at + nk)), sum = row.reduce((a, b) => a + b, 0);
    row.forEach((w, k) => { rows = Math.max(rows, Math.abs(cross[q][k] - w / sum)); });
  }
  assert.ok(rows <= 1e-4, `the element's weighed cross-attention differs from HF's by ${rows}`);
  console.log(`<attn-scope value-weighted>: encoder L1 H1 ${worst.toExponential(1)}, cross L1 H2 ${rows.toExponential(1)} from HF's`);
  await page.locator('#enc').screenshot({ path: path.join(ARTIFACTS, 'values-element.png') }).catch(() => {});
  // the attribute removed: the model's weights, and the caption no longer says weighed
  await page.evaluate(() => document.getElementById('enc').removeAttribute('value-weighted'));
  await page.waitForFunction(() => !/weighed/.test(document.getElementById('enc').shadowRoot.querySelector('.caption').textContent));
  assert.equal(await page.evaluate(async () => { const { shownOf } = await import('/web/scope.js'); return shownOf(document.getElementById('enc').store.get()).valueWeighted ?? false; }), false);
  assert.doesNotMatch(await caption('enc'), /weighed/);
  clean(p);
  await page.close();
});
