// A sentence pair's parts (bertviz's filter, from its `sentence_b_start`): sentence A's or B's
// queries over A's or B's keys in the head and line views; in <attn-scope> with its `controls`
// (the layer, the head and the part chosen above the view) on the CLI's JSON of a pair, and in
// the page on the model's own run of a pair. The part shown is the cells of the attention the
// run holds: a hovered cell's value is the CLI's.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, launch, openPage, cli, ARTIFACTS } from './harness.mjs';

let browser, server;
before(async () => { server = await startServer(); browser = await launch({ webgpu: false }); });
after(async () => { await browser?.close(); server?.stop(); });

const A = 'The tokenizer sat on the mat.', B = 'it was very comfortable.';

/** What a head view (`root`: its element, or the element's shadow root) shows: its layout, and the
 *  tooltip over the centre of its first cell shown. */
async function headView(page, scope) {
  const at = await page.evaluate((scope) => {
    const root = scope ? document.querySelector(scope).shadowRoot : document;
    const heat = root.querySelector('.head-view canvas.heat'), d = heat.dataset, r = heat.getBoundingClientRect();
    return { d: { ...d }, x: r.left + Number(d.x0) + Number(d.cell) / 2, y: r.top + Number(d.y0) + Number(d.cell) / 2 };
  }, scope);
  await page.mouse.move(at.x, at.y);
  const tip = await page.evaluate((scope) => {
    const root = scope ? document.querySelector(scope).shadowRoot : document;
    const t = root.querySelector('.head-view .tooltip');
    return t.hidden ? null : t.firstChild?.textContent ?? t.textContent;
  }, scope);
  const n = (k) => Number(at.d[k]);
  return { q0: n('q0'), nq: n('nq'), k0: n('k0'), nk: n('nk'), tip };
}

test('<attn-scope controls> on the CLI\'s JSON of a pair: the layer and the head chosen above the view, then sentence A\'s queries over sentence B\'s keys, and B\'s over A\'s in the lines', async () => {
  const out = cli(['--pair', B, '--', A]);
  const r = out.results[0], sb = r.sentence_b_start, T = r.tokens.length;
  assert.equal(r.tokens[sb - 1], '[SEP]');
  const { page, problems } = await openPage(browser, null, { width: 900, height: 900 });
  await page.route('**/favicon.ico', (x) => x.fulfill({ status: 204 }));
  await page.goto(`${server.url}web/views.css`);
  const make = (view, id, attrs = { controls: '' }) => page.evaluate(async ({ out, view, id, attrs }) => {
    await import('/web/attn-scope.js');
    const el = document.createElement('attn-scope');
    el.id = id;
    el.setAttribute('view', view);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    el.style.cssText = 'display:block;width:640px;height:700px';
    el.data = out;
    document.body.prepend(el);
    for (let i = 0; i < 300 && !el.result; i++) await new Promise((res) => setTimeout(res, 100));
    return el.result?.sentence_b_start ?? null;
  }, { out, view, id, attrs });
  assert.equal(await make('head', 'h'), sb, 'the result carries where B starts');
  const controls = () => page.evaluate(() => {
    const root = document.getElementById('h').shadowRoot;
    return {
      shown: !root.querySelector('.controls').hidden, part: !root.querySelector('.controls .part').hidden,
      layers: [...root.querySelectorAll('.controls .layer option')].map((o) => o.textContent),
      heads: [...root.querySelectorAll('.controls .head option')].map((o) => o.textContent),
      caption: root.querySelector('.caption').textContent,
    };
  });
  const c = await controls();
  assert.deepEqual([c.shown, c.part], [true, true]);
  assert.deepEqual(c.layers, ['0', '1', '2', '3', '4', '5']);
  assert.equal(c.heads.length, 12);
  // the layer and the head, chosen
  await page.locator('#h .controls .layer').selectOption('4');
  await page.locator('#h .controls .head').selectOption('7');
  await page.waitForFunction(() => /layer 4, head 7/.test(document.getElementById('h').shadowRoot.querySelector('.caption').textContent));
  const whole = await headView(page, '#h');
  assert.deepEqual([whole.q0, whole.nq, whole.k0, whole.nk], [0, T, 0, T]);
  assert.equal(whole.tip, `${r.tokens[0]} → ${r.tokens[0]}: ${r.attention[4][7][0][0].toFixed(4)}`);
  // sentence A's queries over sentence B's keys: that block of the head, its cells the CLI's
  await page.locator('#h .controls .part select').selectOption('ab');
  await page.waitForFunction(() => document.getElementById('h').shadowRoot.querySelector('.head-view canvas.heat').dataset.k0 !== '0');
  const ab = await headView(page, '#h');
  assert.deepEqual([ab.q0, ab.nq, ab.k0, ab.nk], [0, sb, sb, T - sb]);
  assert.equal(ab.tip, `${r.tokens[0]} → ${r.tokens[sb]}: ${r.attention[4][7][0][sb].toFixed(4)}`);
  assert.equal(await page.evaluate(() => document.getElementById('h').shadowRoot.querySelector('.head-view .zoom').hidden), true, 'a part is shown whole: no zoom');
  assert.match(await page.evaluate(() => document.getElementById('h').shadowRoot.querySelector('.part-label').textContent), new RegExp(`^sentence A → sentence B: queries 0–${sb - 1} × keys ${sb}–${T - 1} of ${T}$`));
  await page.locator('#h').screenshot({ path: path.join(ARTIFACTS, 'pair-part-ab.png') });
  // the lines view, attributes only: B's queries over A's keys
  await make('lines', 'l', { part: 'ba', layer: '4', head: '7' });
  const note = await page.evaluate(() => document.getElementById('l').shadowRoot.querySelector('.lines-note').textContent);
  assert.match(note, new RegExp(`^sentence B → sentence A: queries ${sb}–${T - 1} × keys 0–${sb - 1}`));
  assert.equal(await page.evaluate(() => document.getElementById('l').shadowRoot.querySelector('.controls').hidden), true, 'no controls without the attribute');
  // a text alone: the layer and the head, no parts
  const alone = cli(['--', A]);
  await page.evaluate(async (alone) => { const el = document.getElementById('h'); el.data = alone; for (let i = 0; i < 100 && el.result?.tokens.length !== alone.results[0].tokens.length; i++) await new Promise((res) => setTimeout(res, 100)); }, alone);
  const c2 = await controls();
  assert.deepEqual([c2.shown, c2.part], [true, false]);
  const full = await headView(page, '#h');
  assert.deepEqual([full.nq, full.nk], [alone.results[0].tokens.length, alone.results[0].tokens.length], 'a text alone shows every token, whatever part was chosen');
  assert.deepEqual(problems, []);
});

test('the page on a pair: where B starts is the CLI\'s, the part chosen is in the link, the heatmap and lines show it, words mode keeps it', async () => {
  const { page, problems } = await openPage(browser, null, { width: 1400, height: 1000 });
  await page.goto(`${server.url}#s=${encodeURIComponent(A)}&p=${encodeURIComponent(B)}&e=cpu&l=2&h=5`);
  await page.waitForFunction((t) => window.attnscope?.result?.pair === t && window.attnscope.store.get().rendered, B, { timeout: 90000 });
  const want = cli(['--pair', B, '--', A]).results[0], sb = want.sentence_b_start, T = want.tokens.length;
  assert.equal(await page.evaluate(() => window.attnscope.result.sentence_b_start), sb);
  assert.equal(await page.evaluate(() => document.getElementById('part-wrap').hidden), false);
  await page.selectOption('#part', 'ba');
  await page.waitForFunction(() => location.hash.includes('part=ba') && document.querySelector('#head-view canvas.heat').dataset.q0 !== '0');
  const ba = await headView(page, null);
  assert.deepEqual([ba.q0, ba.nq, ba.k0, ba.nk], [sb, T - sb, 0, sb]);
  assert.equal(ba.tip, `${want.tokens[sb]} → ${want.tokens[0]}: ${want.attention[2][5][sb][0].toFixed(4)}`);
  assert.match(await page.evaluate(() => document.querySelector('#lines-view .lines-note').textContent), new RegExp(`^sentence B → sentence A: queries ${sb}–${T - 1} × keys 0–${sb - 1}`));
  await page.screenshot({ path: path.join(ARTIFACTS, 'pair-part-page.png') });
  // the pieces merged into words: B starts at the word of its first piece (one piece fewer before it)
  assert.ok(want.tokens.slice(0, sb).some((t) => t.startsWith('##')), `${want.tokens}: a word of two pieces in A`);
  await page.check('#words');
  await page.waitForFunction((T) => Number(document.querySelector('#head-view canvas.heat').dataset.t) < T, T);
  const words = await headView(page, null);
  assert.equal(words.q0, sb - 1);
  assert.match(words.tip, /^it → \[CLS\]: /);
  // a text alone: no parts offered, every token shown
  await page.fill('#pair', '');
  await page.waitForFunction(() => !window.attnscope.result?.pair && window.attnscope.store.get().rendered);
  assert.equal(await page.evaluate(() => document.getElementById('part-wrap').hidden), true);
  assert.equal(await page.evaluate(() => document.querySelector('#head-view canvas.heat').dataset.q0), '0');
  assert.deepEqual(problems, []);
});

test('the model view of a pair (bertviz\'s model_view filter): every head\'s thumbnail is the part chosen above it, its strongest cell the CLI\'s', async () => {
  const out = cli(['--pair', B, '--', A]);
  const r = out.results[0], sb = r.sentence_b_start, T = r.tokens.length;
  const { page, problems } = await openPage(browser, null, { width: 1000, height: 900 });
  await page.route('**/favicon.ico', (x) => x.fulfill({ status: 204 }));
  await page.goto(`${server.url}web/views.css`);
  await page.evaluate(async (out) => {
    await import('/web/attn-scope.js');
    const el = document.createElement('attn-scope');
    el.id = 'm';
    el.setAttribute('view', 'model');
    el.setAttribute('controls', '');
    el.style.cssText = 'display:block;width:900px';
    el.data = out;
    document.body.prepend(el);
    for (let i = 0; i < 300 && !el.result; i++) await new Promise((res) => setTimeout(res, 100));
  }, out);
  /** Each cell's text alternative, `[L][H]`, once the grid has drawn with `part` in its key. */
  const cells = (part) => page.evaluate(async (part) => {
    const root = document.getElementById('m').shadowRoot, view = root.querySelector('.grid-view');
    for (let i = 0; i < 300 && !(view?.dataset.drawn ?? '').endsWith(`|${part}`); i++) await new Promise((res) => setTimeout(res, 100));
    const out = [];
    for (const c of root.querySelectorAll('.grid .cell')) (out[c.dataset.layer] ??= [])[c.dataset.head] = c.getAttribute('aria-label');
    return { out, note: root.querySelector('.grid-part')?.textContent ?? null, selects: [...root.querySelectorAll('.controls label')].filter((l) => !l.hidden).map((l) => l.firstChild.textContent.trim()) };
  }, part);
  /** What a cell should say: the strongest cell of the part (the first of the largest in row order). */
  const strongest = (a, [q0, q1, k0, k1]) => {
    let best = [-1, 0, 0];
    for (let q = q0; q < q1; q++) for (let k = k0; k < k1; k++) if (a[q][k] > best[0]) best = [a[q][k], q, k];
    return `strongest ${r.tokens[best[1]]} → ${r.tokens[best[2]]} (${best[0].toFixed(2)})`;
  };
  const all = await cells('');
  assert.deepEqual(all.selects, ['Attention'], 'above the model view: the part alone (the grid chooses the head)');
  assert.equal(all.note, null);
  assert.match(all.out[0][0], new RegExp(`^layer 0, head 0: ${strongest(r.attention[0][0], [0, T, 0, T]).replace(/[()[\]]/g, '\\$&')}$`));
  for (const [part, box] of [['ab', [0, sb, sb, T]], ['ba', [sb, T, 0, sb]]]) {
    await page.locator('#m .controls .part select').selectOption(part);
    const got = await cells(part);
    assert.equal(got.note, `${part === 'ab' ? 'sentence A → sentence B' : 'sentence B → sentence A'}: queries ${box[0]}–${box[1] - 1} × keys ${box[2]}–${box[3] - 1}, in every head`);
    let differs = 0;
    r.attention.forEach((layer, l) => layer.forEach((a, h) => {
      const want = `layer ${l}, head ${h}: ${strongest(a, box)}`;
      assert.equal(got.out[l][h], want);
      if (want !== `layer ${l}, head ${h}: ${strongest(a, [0, T, 0, T])}`) differs++;
    }));
    assert.ok(differs > 36, `${part}: most heads' strongest cell lies outside the part (${differs} of 72 differ): the grid drew the part`);
  }
  await page.locator('#m').screenshot({ path: path.join(ARTIFACTS, 'pair-part-model.png') });
  assert.deepEqual(problems, []);
});
