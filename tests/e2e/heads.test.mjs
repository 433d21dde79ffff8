// Reading the heads (issue 9), end to end: the grid coloured by a head metric, the heads table,
// attention rollout, head knock-out and compare mode, each against the CLI's numbers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, launch, openPage, cli, ready, maxDiff, gridCells, ARTIFACTS } from './harness.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launch({ webgpu: false }); });
after(async () => { await browser?.close(); server?.stop(); });

const SENTENCE = 'The animal didn\'t cross the street because it was too tired.';
const BIG = 'The trophy didn\'t fit in the suitcase because it was too big.';
const SMALL = 'The trophy didn\'t fit in the suitcase because it was too small.';
const enc = encodeURIComponent;

async function open(hash, opts = {}) {
  const p = await openPage(browser, server.url + hash, { width: 1280, height: 1000, ...opts });
  const err = await ready(p.page);
  assert.equal(err, null, `the model did not load: ${err}`);
  return p;
}

function assertClean({ problems }) {
  assert.deepEqual(problems, [], 'no console errors or uncaught exceptions');
}

/** Waits until the model grid has drawn the current run (its `data-drawn` starts with the run id) with `what` in its key. */
const gridDrawn = (page, what = '') => page.waitForFunction((w) => {
  const d = document.getElementById('model-view').dataset.drawn ?? '';
  return d.split('|')[0] === String(window.attnscope.store.get().run?.id) && d.includes(w);
}, what, { timeout: 60000 });

/** The colour step (metric scale) of the centre pixel of every grid head, `[L][H]`. */
const gridSteps = async (page) => page.evaluate(async (cells) => {
  const { stepOf } = await import('/web/colour.js');
  const out = [];
  for (const c of cells) (out[c.layer] ??= [])[c.head] = stepOf('metric', c.top);
  return out;
}, await page.evaluate(gridCells, '#model-view'));

test('the grid is coloured by a head metric, and the heads table lists and sorts the CLI\'s numbers', async () => {
  const p = await open(`#e=cpu&s=${enc(SENTENCE)}&metric=to_prev`);
  const { page } = p;
  await gridDrawn(page, 'previous token');
  const want = cli(['--head-metrics', '--', SENTENCE]).results[0].head_metrics;
  assert.deepEqual(Object.keys(want), ['entropy', 'to_cls', 'to_sep', 'to_self', 'to_prev', 'to_next', 'distance', 'to_first', 'sink']);
  // the page's numbers are the CLI's
  const got = await page.evaluate(() => window.attnscope.result.head_metrics);
  for (const m of Object.keys(want)) assert.ok(maxDiff([[got[m]]], [[want[m]]]) <= 1e-4, `${m} equals the CLI's`);
  // each head's colour is the metric's colour step, from the lowest head to the highest
  const check = async (metric) => {
    const v = want[metric].flat();
    const lo = Math.min(...v), hi = Math.max(...v);
    const steps = await gridSteps(page);
    let worst = 0;
    want[metric].forEach((row, l) => row.forEach((x, h) => {
      worst = Math.max(worst, Math.abs(steps[l][h] - Math.floor(((x - lo) / (hi - lo)) * 255 + 0.5)));
    }));
    assert.ok(worst <= 2, `${metric}: every head's colour follows its value (worst step error ${worst})`);
  };
  await check('to_prev');
  assert.match(await page.textContent('#model-view .grid-legend'), /attention to the previous token/);
  await page.selectOption('#metric', 'entropy');
  await page.waitForFunction(() => /metric=entropy/.test(location.hash));
  await gridDrawn(page, 'entropy');
  await check('entropy');
  await page.screenshot({ path: path.join(ARTIFACTS, 'heads-metric.png') });
  // the table: 72 rows, sorted by a click, the CLI's values in every cell
  await page.click('#table-details summary');
  await page.waitForFunction(() => document.querySelectorAll('#heads-view tbody tr').length === 72);
  await page.click('#heads-view th button[data-sort=to_prev]');
  await page.waitForFunction(() => document.querySelector('#heads-view th[aria-sort=descending] button')?.dataset.sort === 'to_prev');
  const table = await page.evaluate(() => [...document.querySelectorAll('#heads-view tbody tr')].map((tr) => ({
    l: +tr.dataset.layer, h: +tr.dataset.head,
    v: Object.fromEntries([...tr.querySelectorAll('td[data-metric]')].map((td) => [td.dataset.metric, +td.textContent])),
  })));
  const prev = want.to_prev.flat();
  const best = prev.indexOf(Math.max(...prev));
  assert.deepEqual([table[0].l, table[0].h], [Math.floor(best / 12), best % 12], 'the strongest previous-token head comes first');
  for (let i = 1; i < table.length; i++) assert.ok(table[i - 1].v.to_prev >= table[i].v.to_prev, 'sorted, highest first');
  for (const row of table) for (const m of Object.keys(want)) assert.ok(Math.abs(row.v[m] - want[m][row.l][row.h]) <= 6e-4, `L${row.l}H${row.h} ${m}`);
  // a row focuses its head
  await page.click(`#heads-view tbody tr[data-layer="${table[0].l}"][data-head="${table[0].h}"] td`);
  await page.waitForFunction(([l, h]) => window.attnscope.store.get().layer === l && window.attnscope.store.get().head === h, [table[0].l, table[0].h]);
  await page.waitForFunction(() => /table=1/.test(location.hash)); // the link follows 120 ms after the last change, as the other link checks wait for
  await page.locator('#table-details').screenshot({ path: path.join(ARTIFACTS, 'heads-table.png') });
  assertClean(p);
  await page.close();
});

test('attention rollout equals the CLI\'s, with bars for a chosen query token', async () => {
  const p = await open(`#e=cpu&s=${enc(SENTENCE)}&rollout=1`);
  const { page } = p;
  await page.waitForFunction(() => window.attnscope.result.rollout && document.querySelector('#rollout-view').dataset.query === '0', null, { timeout: 60000 });
  const want = cli(['--rollout', '--', SENTENCE]).results[0].rollout;
  const got = await page.evaluate(() => window.attnscope.result.rollout.map((r) => Array.from(r)));
  assert.ok(maxDiff([[got]], [[want]]) <= 1e-4, 'the rollout equals the CLI\'s');
  for (const row of want) assert.ok(Math.abs(row.reduce((a, b) => a + b, 0) - 1) < 1e-4, 'rows sum to 1');
  const label = await page.getAttribute('#rollout-view .bars', 'aria-label');
  assert.match(label, /^rollout from \[CLS\]: /);
  // the bars of query 3 ("animal" → …): its three largest rollout weights, in the CLI's order
  await page.selectOption('#rollout-view .rollout-query', '3');
  await page.waitForFunction(() => document.querySelector('#rollout-view').dataset.query === '3');
  const tokens = await page.evaluate(() => window.attnscope.result.tokens);
  const top = want[3].map((v, k) => [v, k]).sort((a, b) => b[0] - a[0]).slice(0, 3).map(([v, k]) => `${tokens[k]} ${v.toFixed(3)}`);
  assert.equal(await page.getAttribute('#rollout-view .bars', 'aria-label'), `rollout from ${tokens[3]}: ${top.join(', ')}`);
  await page.locator('#rollout-details').screenshot({ path: path.join(ARTIFACTS, 'heads-rollout.png') });
  assertClean(p);
  await page.close();
});

test('alt-click knocks a head out: the CLI\'s --head-mask numbers, marked, in the link, with the sentence embedding\'s cosine', async () => {
  const p = await open(`#e=cpu&s=${enc(SENTENCE)}`);
  const { page } = p;
  await gridDrawn(page);
  await page.click('#model-view .grid .cell[data-layer="0"][data-head="1"]', { modifiers: ['Alt'] });
  await page.waitForFunction(() => /off=0%3A1|off=0:1/.test(location.hash));
  await page.waitForFunction(() => window.attnscope.store.get().run?.head_mask?.length === 1, null, { timeout: 60000 });
  const knocked = cli(['--head-mask', '0:1', '--sentence-embedding', '--', SENTENCE]);
  const plain = cli(['--sentence-embedding', '--', SENTENCE]);
  assert.deepEqual(knocked.head_mask, [[0, 1]]);
  const got = await page.evaluate(() => window.attnscope.result.attention.map((l) => l.map((h) => h.map((r) => Array.from(r)))));
  assert.ok(maxDiff(got, knocked.results[0].attention) <= 1e-4, 'the page runs the knocked-out forward pass');
  assert.ok(maxDiff(got, plain.results[0].attention) > 1e-3, 'which differs from the plain one');
  const gotEmb = await page.evaluate(() => window.attnscope.result.sentence_embedding);
  assert.ok(maxDiff([[[gotEmb]]], [[[knocked.results[0].sentence_embedding]]]) <= 1e-4, 'the sentence embedding equals the CLI\'s');
  const a = knocked.results[0].sentence_embedding, b = plain.results[0].sentence_embedding;
  const cos = a.reduce((s, x, i) => s + x * b[i], 0) / Math.sqrt(a.reduce((s, x) => s + x * x, 0) * b.reduce((s, x) => s + x * x, 0));
  await page.waitForFunction(() => /cosine with vs without them/.test(document.getElementById('knock-line').textContent));
  const line = await page.textContent('#knock-line');
  assert.match(line, /Knocked out: L0 H1\./);
  assert.equal(+line.match(/cosine with vs without them: (\d\.\d+)/)[1], +cos.toFixed(4), line);
  await gridDrawn(page, '0:1');
  const knockedCell = (await page.evaluate(gridCells, '#model-view')).find((c) => c.layer === 0 && c.head === 1);
  assert.deepEqual(knockedCell.classes, ['cell', 'off']);
  assert.match(knockedCell.label, /knocked out/);
  assert.ok(knockedCell.frame.includes('c0392b'), `the knocked-out head is framed in red (${knockedCell.frame})`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'heads-knockout.png') });
  // the link brings the knocked-out head back; alt-click again puts it back in
  const link = await page.evaluate(() => location.href);
  await page.close();
  const again = await openPage(browser, link, { width: 1280, height: 1000 });
  await ready(again.page);
  await again.page.waitForFunction(() => window.attnscope.store.get().run?.head_mask?.length === 1, null, { timeout: 60000 });
  const restored = await again.page.evaluate(() => window.attnscope.result.attention.map((l) => l.map((h) => h.map((r) => Array.from(r)))));
  assert.ok(maxDiff(restored, knocked.results[0].attention) <= 1e-4, 'the link restores the knock-out');
  await gridDrawn(again.page, '0:1');
  await again.page.click('#model-view .grid .cell[data-layer="0"][data-head="1"]', { modifiers: ['Alt'] });
  await again.page.waitForFunction(() => window.attnscope.store.get().run?.head_mask?.length === 0, null, { timeout: 60000 });
  await again.page.waitForFunction(() => !/off=/.test(location.hash)); // the link follows a moment later
  assertClean(p);
  assertClean(again);
  await again.page.close();
});

test('knocking out heads in a batch shows how the similarity between sentences moves', async () => {
  const texts = ['A man is playing a guitar.', 'Someone plays an instrument.'];
  const p = await open(`#e=cpu&${texts.map((t) => `s=${enc(t)}`).join('&')}&off=${enc('1:2,3:4')}`);
  const { page } = p;
  await page.waitForFunction(() => /Similarity between sentences/.test(document.getElementById('knock-line').textContent), null, { timeout: 60000 });
  const knocked = cli(['--head-mask', '1:2,3:4', '--sentence-embedding', '--', ...texts]).results.map((r) => r.sentence_embedding);
  const plain = cli(['--sentence-embedding', '--', ...texts]).results.map((r) => r.sentence_embedding);
  const cos = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0) / Math.sqrt(a.reduce((s, x) => s + x * x, 0) * b.reduce((s, x) => s + x * x, 0));
  const line = await page.textContent('#knock-line');
  assert.ok(line.includes(`1↔2: ${cos(plain[0], plain[1]).toFixed(4)} → ${cos(knocked[0], knocked[1]).toFixed(4)}`), line);
  assertClean(p);
  await page.close();
});

test('compare mode: a minimal pair colours the grid by max |ΔA| and shows ΔA; different lengths go side by side', async () => {
  const p = await open(`#e=cpu&s=${enc(BIG)}&cmp=${enc(SMALL)}&l=4&h=3`);
  const { page } = p;
  await page.waitForFunction(() => /Both sentences are \d+ tokens/.test(document.getElementById('compare-status').textContent), null, { timeout: 60000 });
  await gridDrawn(page, 'ΔA');
  const [a, b] = cli(['--', BIG, SMALL]).results;
  assert.equal(a.tokens.length, b.tokens.length);
  const labels = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#model-view .grid .cell')].map((c) => [`${c.dataset.layer}:${c.dataset.head}`, c.getAttribute('aria-label')])));
  for (let l = 0; l < 6; l++) for (let h = 0; h < 12; h++) {
    let max = 0;
    a.attention[l][h].forEach((row, q) => row.forEach((x, k) => { max = Math.max(max, Math.abs(b.attention[l][h][q][k] - x)); }));
    const shown = +labels[`${l}:${h}`].match(/max \|ΔA\| ([0-9.]+)/)[1];
    assert.ok(Math.abs(shown - max) <= 0.006, `L${l}H${h}: max |ΔA| ${shown} vs ${max}`);
  }
  assert.match(await page.textContent('#head-view .legend'), /ΔA: second sentence − first/);
  // a cell of the head view reads as ΔA (the keyboard cursor's readout)
  await page.focus('#head-view .overlay');
  await page.keyboard.press('ArrowDown');
  const readout = await page.textContent('#head-view .readout');
  const d = b.attention[4][3][1][0] - a.attention[4][3][1][0];
  assert.ok(readout.includes(`ΔA ${d >= 0 ? '+' : ''}${d.toFixed(4)}`), readout);
  await page.screenshot({ path: path.join(ARTIFACTS, 'heads-compare.png') });
  // different lengths: no ΔA, the two head views side by side
  await page.fill('#compare-text', 'The big dog slept there.');
  await page.waitForFunction(() => /no cell-by-cell ΔA/.test(document.getElementById('compare-status').textContent), null, { timeout: 60000 });
  // each pane its own sentence's length, not the padded batch's (issue 29)
  await page.waitForFunction(() => document.querySelector('#head-view-b .heat')?.dataset.t === String(window.attnscope.store.get().run.results[1].length));
  assert.equal(await page.isVisible('#head-view-b'), true);
  assert.equal(await page.isVisible('#lines-view'), false);
  assert.match(await page.textContent('#head-view-b .focus-label'), /sentence 2/);
  await page.screenshot({ path: path.join(ARTIFACTS, 'heads-compare-side.png') });
  assertClean(p);
  await page.close();
});

test('<attn-scope view="heads"> and view="rollout">: the table and the rollout alone, the CLI\'s numbers, on the model and on the CLI\'s JSON given', async () => {
  const { page, problems } = await openPage(browser, null, { width: 1000, height: 900 });
  await page.route('**/favicon.ico', (r) => r.fulfill({ status: 204 }));
  await page.goto(`${server.url}web/views.css`);
  const out = cli(['--head-metrics', '--rollout', '--', SENTENCE]), want = out.results[0];
  /** An element of `view` on the model (or `data` given), once its result and its view are in. */
  const make = (id, view, data) => page.evaluate(async ({ id, view, data, sentence, model }) => {
    await import('/web/attn-scope.js');
    const el = document.createElement('attn-scope');
    el.id = id;
    for (const [k, v] of Object.entries({ sentence, model, view, engine: 'cpu' })) el.setAttribute(k, v);
    el.style.cssText = 'display:block;width:900px';
    if (data) el.data = data;
    document.body.prepend(el); // in view: an element starts when it scrolls into view
    const root = el.shadowRoot;
    const done = () => (view === 'heads' ? el.result?.head_metrics && root.querySelectorAll('.heads-view tbody tr').length === 72
      : el.result?.rollout && root.querySelector('.rollout-view .bars')?.getAttribute('aria-label'));
    for (let i = 0; i < 900 && !done(); i++) await new Promise((r) => setTimeout(r, 100));
    return {
      done: Boolean(done()), metrics: el.result?.head_metrics ?? null, rollout: el.result?.rollout?.map((r) => Array.from(r)) ?? null,
      table: [...root.querySelectorAll('.heads-view tbody tr')].map((tr) => ({ l: +tr.dataset.layer, h: +tr.dataset.head, v: Object.fromEntries([...tr.querySelectorAll('td[data-metric]')].map((td) => [td.dataset.metric, +td.textContent])) })),
      bars: root.querySelector('.rollout-view .bars')?.getAttribute('aria-label') ?? null, message: root.querySelector('.message').hidden ? '' : root.querySelector('.message').textContent,
    };
  }, { id, view, data, sentence: SENTENCE, model: `${server.url}assets/models/all-MiniLM-L6-v2/` });
  const tokens = want.tokens;
  const checkTable = (got, what) => {
    assert.ok(got.done, `${what}: the table drawn (${got.message})`);
    for (const m of Object.keys(want.head_metrics)) assert.ok(maxDiff([[got.metrics[m]]], [[want.head_metrics[m]]]) <= 1e-4, `${what}: ${m} equals the CLI's`);
    assert.equal(got.table.length, 72);
    for (const row of got.table) for (const m of Object.keys(want.head_metrics)) assert.ok(Math.abs(row.v[m] - want.head_metrics[m][row.l][row.h]) <= 6e-4, `${what}: L${row.l}H${row.h} ${m}`);
  };
  const checkRollout = (got, what) => {
    assert.ok(got.done, `${what}: the rollout drawn (${got.message})`);
    assert.ok(maxDiff([[got.rollout]], [[want.rollout]]) <= 1e-4, `${what}: the rollout equals the CLI's`);
    const top = want.rollout[0].map((v, k) => [v, k]).sort((a, b) => b[0] - a[0]).slice(0, 3).map(([v, k]) => `${tokens[k]} ${v.toFixed(3)}`);
    assert.equal(got.bars, `rollout from ${tokens[0]}: ${top.join(', ')}`);
  };
  checkTable(await make('heads', 'heads'), 'the model');
  checkRollout(await make('rollout', 'rollout'), 'the model');
  // attention given (the CLI's JSON, its attention alone): the engine's summaries of it
  const given = { ...out, results: out.results.map(({ head_metrics: _m, rollout: _r, ...rest }) => rest) };
  checkTable(await make('given-heads', 'heads', given), 'given');
  checkRollout(await make('given-rollout', 'rollout', given), 'given');
  await page.locator('#heads').screenshot({ path: path.join(ARTIFACTS, 'element-heads.png') });
  await page.locator('#rollout').screenshot({ path: path.join(ARTIFACTS, 'element-rollout.png') });
  assert.deepEqual(problems, []);
  await page.close();
});
