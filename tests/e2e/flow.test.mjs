// Information-flow routes in the page (issue 52; Ferrando & Voita 2024, src/analysis/flow.rs):
// every edge's importance equals the same computation from hooks on HF's modules (tools/
// make_fixtures.py --only flow) on the CPU engine and on WebGPU, the routes the panel draws are
// HF's at the fixture's threshold, and on SmolLM2 the CLI's; the threshold slider and the
// position choose the routes, and a click on a head's edge focuses the head.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { readFileSync, existsSync } from 'node:fs';
import { site, ready, golden, servedFixtures, ROOT, ARTIFACTS, attnscope } from './harness.mjs';

const SMOLLM2 = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';
const fixtures = servedFixtures('flow', ['tiny-gpt2', 'tiny-llama', 'v5-gemma3']);
const app = site({ fixtures });

const enc = encodeURIComponent;
const clean = ({ problems }) => assert.deepEqual(problems, [], 'no console errors or uncaught exceptions');
const key = (e) => `${e.layer}:${e.head}:${e.from}:${e.to}`;

async function open(hash, opts = {}) {
  const p = await app.open(`#${hash}`, { width: 1280, height: 1000, ...opts });
  const err = await ready(p.page);
  assert.equal(err, null, `the model did not load: ${err}`);
  return p;
}

/** Waits until the panel has drawn the routes of `text`; the page's importances and its routes. */
async function drawn(page, text, { to = null, tau = 0.04 } = {}) {
  await page.waitForFunction((t) => window.attnscope.result?.text === t && window.attnscope.store.get().run?.flowOf(0) && document.getElementById('flow-view').dataset.edges, text, { timeout: 180000 });
  return page.evaluate(async ([to, tau]) => {
    const { routesOf } = await import('/web/views/flow.js');
    const r = window.attnscope.store.get().run, f = r.flowOf(0), n = r.results[0].length;
    return {
      heads: Array.from(f.heads), residual: Array.from(f.residual), backend: r.backend, L: r.L, H: r.H, T: r.T,
      routes: routesOf(f, r, to ?? n - 1, tau), drawn: Number(document.getElementById('flow-view').dataset.edges),
      line: document.querySelector('#flow-view .flow-line').textContent,
    };
  }, [to, tau]);
}

for (const [fixture, model] of [['flow_gpt2', fixtures.path('tiny-gpt2')], ['flow_llama', fixtures.path('tiny-llama')], ['flow_gemma3', fixtures.path('v5-gemma3')]]) {
  test(`${fixture}: the page's information-flow importances equal HF's on the CPU engine and on WebGPU, and its routes are HF's`, async () => {
    const meta = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden', `${fixture}.json`), 'utf8'));
    const heads = golden(fixture, 'flow_heads'), residual = golden(fixture, 'flow_residual');
    for (const engine of ['cpu', 'gpu']) {
      const p = await open(`model=${enc(`${model}/`)}&e=${engine}&s=${enc(meta.texts[0])}&flow=1`);
      const { page } = p;
      const got = await drawn(page, meta.texts[0]);
      if (engine === 'gpu') assert.match(got.backend, /WebGPU|gpu/i, `ran on ${got.backend}`);
      let worst = 0;
      got.heads.forEach((v, i) => { worst = Math.max(worst, Math.abs(v - heads.data[i])); });
      got.residual.forEach((v, i) => { worst = Math.max(worst, Math.abs(v - residual.data[i])); });
      assert.equal(got.heads.length, heads.data.length);
      assert.ok(worst <= 1e-4, `${engine}: an importance differs from HF's by ${worst}`);
      assert.deepEqual(got.routes.map(key), meta.edges.map(key), 'the routes to the last position');
      assert.equal(got.drawn, meta.edges.length, 'the panel draws them');
      console.log(`${fixture} ${engine} (${got.backend}): importances max |Δ| against HF ${worst.toExponential(1)}; ${got.drawn} edges at ${meta.threshold}`);
      clean(p);
      await page.close();
    }
  });
}

test('SmolLM2: the routes to " Paris" are the CLI\'s; the slider and the position choose them, a click on a head\'s edge focuses it; drawn at phone, laptop and projector sizes', async () => {
  assert.ok(existsSync(path.join(ROOT, SMOLLM2)), `${SMOLLM2} is missing: scripts/setup.sh fetches it`);
  const text = 'The capital of France is';
  const cli = attnscope(['attention', '--model', path.join(ROOT, SMOLLM2), '--flow', '--', text]).results[0].flow;
  for (const [engine, width, height] of [['cpu', 1280, 800], ['gpu', 1920, 1080], ['cpu', 390, 844]]) {
    const p = await open(`model=${enc(SMOLLM2)}&e=${engine}&s=${enc(text)}&flow=1`, { width, height });
    const { page } = p;
    const got = await drawn(page, text);
    assert.deepEqual(got.routes.map(key), cli.edges.map(key), `${engine}: the CLI's routes`);
    let worst = 0;
    got.routes.forEach((e, i) => { worst = Math.max(worst, Math.abs(e.importance - cli.edges[i].importance)); });
    assert.ok(worst <= 1e-4, `${engine}: an edge's importance differs from the CLI's by ${worst}`);
    assert.equal(got.drawn, cli.edges.length);
    assert.match(got.line, /lead to the prediction after “ is” \(position 4\).*L23 H4: “ France” → “ is”/);
    console.log(`SmolLM2 ${engine} (${got.backend}): ${got.drawn} edges, importances max |Δ| against the CLI ${worst.toExponential(1)}`);
    await page.locator('#flow-details').screenshot({ path: path.join(ARTIFACTS, `flow-${width}.png`) }).catch(() => {});
    if (width !== 1280) { clean(p); await page.close(); continue; }
    // a higher threshold keeps fewer edges; routes to another position
    await page.locator('#flow-view .flow-threshold').fill('0.2');
    await page.waitForFunction((n) => Number(document.getElementById('flow-view').dataset.edges) < n, got.drawn);
    const fewer = await drawn(page, text, { tau: 0.2 });
    assert.equal(fewer.drawn, fewer.routes.length);
    await page.locator('#flow-view .flow-threshold').fill('0.04');
    await page.selectOption('#flow-view .flow-to', '3');
    await page.waitForFunction(() => /after “ France” \(position 3\)/.test(document.querySelector('#flow-view .flow-line').textContent));
    const to3 = await drawn(page, text, { to: 3 });
    assert.equal(to3.drawn, to3.routes.length);
    assert.ok(to3.routes.every((e) => e.to <= 3 && e.from <= 3));
    // a click on L23 H4's edge France → is (the routes to the last position again) focuses it
    await page.selectOption('#flow-view .flow-to', '4');
    await page.waitForFunction(() => /position 4/.test(document.querySelector('#flow-view .flow-line').textContent));
    const pt = await page.evaluate(() => {
      const el = document.getElementById('flow-view'), v = el._view, e = v.edges.find((x) => x.layer === 23 && x.head === 4);
      const [x0, y0] = v.at(e.from, e.layer), [x1, y1] = v.at(e.to, e.layer + 1);
      const c = el.querySelector('canvas');
      c.scrollIntoView({ block: 'center' });
      const r = c.getBoundingClientRect();
      return { x: r.left + (x0 + x1) / 2, y: r.top + (y0 + y1) / 2 };
    });
    await page.mouse.move(pt.x, pt.y);
    await page.waitForFunction(() => /L23 H4: “ France” → “ is”/.test(document.querySelector('#flow-view .flow-hover').textContent));
    await page.mouse.click(pt.x, pt.y);
    await page.waitForFunction(() => { const s = window.attnscope.store.get(); return s.layer === 23 && s.head === 4; });
    // (app.js writes the hash 120 ms after the last change: wait for it)
    await page.waitForFunction(() => /flow=1/.test(location.hash), null, { timeout: 5000 });
    clean(p);
    await page.close();
  }
});
