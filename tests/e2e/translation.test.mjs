// An encoder–decoder model in the page (tests/fixtures/models/tiny-marian, loaded from a URL):
// the page translates instead of running the encoder alone, window.attnscope.result carries the
// fields of `attnscope translate` and equals it on the CPU engine and on WebGPU, the pair box
// teacher-forces a target, a step can be focused, and the encoder's views give way to the
// translation view. Screenshots at phone, laptop and projector widths in test-artifacts/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { cpSync, rmSync, readFileSync } from 'node:fs';
import { startServer, launch, openPage, ready, maxDiff, hoverTranslationCell, ARTIFACTS, ROOT, attnscope } from './harness.mjs';

const NAME = 'tiny-marian';
const fixture = path.join(ROOT, 'tests/fixtures/models', NAME);
const served = path.join(ROOT, 'assets/models', `e2e-${NAME}`);
const SOURCE = 'time flies like an arrow';

let server, browser;
before(async () => {
  cpSync(fixture, served, { recursive: true });
  server = await startServer();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  server?.stop();
  rmSync(served, { recursive: true, force: true });
});

/** `attnscope translate` on the fixture. */
const cli = (args) => attnscope(['translate', '--model', fixture, '--top-k', '5', ...args]).results[0];

/** The [rows, cols] of the translation view's head and line canvases, and its grid's [layers, heads]. */
const shapes = (page) => page.evaluate(() => {
  const of = (sel, a, b) => { const c = document.querySelector(sel); return c ? [Number(c.dataset[a]), Number(c.dataset[b])] : null; };
  const grid = document.querySelector('.tr-grid .grid');
  return { head: of('.tr-head canvas.heat', 'nq', 'nk'), lines: of('.tr-lines canvas.lines', 'rows', 'cols'), grid: grid && [grid.querySelectorAll('.rowlabel').length, grid.querySelectorAll('.collabel').length] };
});


const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);

async function open(hash, size = {}) {
  const url = `${server.url}#model=${encodeURIComponent(`${server.url}assets/models/e2e-${NAME}/`)}&s=${encodeURIComponent(SOURCE)}&${hash}`;
  const p = await openPage(browser, url, { width: 1280, height: 900, ...size });
  assert.equal(await ready(p.page), null);
  await p.page.waitForFunction(() => window.attnscope.result?.source === 'time flies like an arrow', null, { timeout: 120000 });
  return p;
}

test('the page translates: window.attnscope.result equals attnscope translate on the CPU engine and on WebGPU', async () => {
  const want = cli(['--', SOURCE]);
  for (const engine of ['cpu', 'gpu']) {
    const { page, problems } = await open(`e=${engine}`);
    const got = await page.evaluate(() => window.attnscope.result);
    assert.equal(got.model_type, 'marian');
    for (const k of ['source_ids', 'source_tokens', 'source_offsets', 'output_ids', 'output_tokens', 'output_text']) {
      assert.deepEqual(got[k], want[k], `${engine}: ${k}`);
    }
    for (const k of ['encoder_attention', 'decoder_attention', 'cross_attention']) {
      const d = maxDiff(got[k], want[k]);
      assert.ok(d <= 1e-4, `${engine} (${got.backend}): ${k} differs from the CLI's by ${d}`);
    }
    assert.deepEqual(got.steps.map((s) => s.top_k.map((p) => p.id)), want.steps.map((s) => s.top_k.map((p) => p.id)));
    if (engine === 'gpu') assert.match(got.backend, /WebGPU|gpu/i, `ran on ${got.backend}`);
    // the translation view in place of the encoder's
    assert.ok(await page.isVisible('#translation'));
    assert.ok(!(await page.isVisible('#views')) && !(await page.isVisible('#steps')));
    assert.equal(await page.locator('.tr-token').count(), want.output_ids.length - 1);
    // the cross-attention first: its rows are the steps, its columns the source's tokens, in the
    // head view and the line view; the grid has every decoder layer and head
    const T = want.output_ids.length - 1, S = want.source_ids.length;
    assert.deepEqual(await shapes(page), { head: [T, S], lines: [T, S], grid: [want.cross_attention.length, want.cross_attention[0].length] });
    // the decoder's self-attention: T × T, its upper triangle masked (the hover says so)
    await page.click('.tr-attn[data-attn=decoder]');
    assert.deepEqual((await shapes(page)).head, [T, T]);
    assert.match(await hoverTranslationCell(page, 0, T - 1), /masked \(−∞ before softmax, so 0\)/);
    assert.match(await hoverTranslationCell(page, T - 1, 0), /^step \d+ \(writes “.*”, reads “.*”\) → “.*” at position 0: \d\.\d{3}$/);
    assert.equal(await page.inputValue('#pair'), '');
    assert.match(await page.textContent('#pair-label'), /Target/);
    clean(problems);
    await page.close();
  }
});

test('a target in the pair box is teacher-forced; a step is focused by its token and by the arrows', async () => {
  const want = cli(['--target', '2018-05-09', '--', SOURCE]);
  const { page, problems } = await open('e=cpu');
  await page.fill('#pair', '2018-05-09');
  await page.waitForFunction(() => window.attnscope.result?.target === '2018-05-09', null, { timeout: 60000 });
  const got = await page.evaluate(() => window.attnscope.result);
  assert.deepEqual(got.output_ids, want.output_ids);
  assert.ok(maxDiff(got.cross_attention, want.cross_attention) <= 1e-4);
  assert.match(await page.textContent('.tr-output'), /Target \(teacher-forced\)/);
  await page.locator('.tr-token').first().click();
  assert.match(await page.textContent('.tr-step h3'), /^Step 1 of /);
  await page.click('button[aria-label="next step"]');
  assert.match(await page.textContent('.tr-step h3'), /^Step 2 of /);
  assert.equal(await page.locator('.tr-token[aria-pressed=true]').count(), 1);
  clean(problems);
  await page.close();
});

test('screenshots of the translation view at phone, laptop and projector widths', async () => {
  for (const [w, h] of [[390, 844], [1280, 800], [1920, 1080]]) {
    const { page, problems } = await open('e=cpu', { width: w, height: h });
    // the page never scrolls sideways
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 1, `${w} px: the page is ${overflow} px wider than the window`);
    await page.locator('#translation').screenshot({ path: path.join(ARTIFACTS, `translation-${w}.png`) });
    clean(problems);
    await page.close();
  }
});

test('the dates model trained here: the built-in choice and a link open it on its most readable head; the output equals the CLI', async () => {
  const dir = path.join(ROOT, 'models/dates');
  const run = (args) => attnscope(['translate', '--model', dir, '--top-k', '5', ...args]).results[0];
  const focus = JSON.parse(readFileSync(path.join(dir, 'config.json'), 'utf8')).attnscope_focus;
  // a link
  const source = 'the 9th of May 2018';
  const want = run(['--', source]);
  assert.equal(want.output_text, '2018-05-09');
  for (const engine of ['cpu', 'gpu']) {
    const { page, problems } = await openPage(browser, `${server.url}#model=models/dates/&e=${engine}&s=${encodeURIComponent(source)}`, { width: 1280, height: 900 });
    assert.equal(await ready(page), null);
    await page.waitForFunction((s) => window.attnscope.result?.source === s, source, { timeout: 120000 });
    const got = await page.evaluate(() => window.attnscope.result);
    assert.deepEqual(got.output_ids, want.output_ids);
    assert.equal(got.output_text, '2018-05-09');
    for (const k of ['encoder_attention', 'decoder_attention', 'cross_attention']) assert.ok(maxDiff(got[k], want[k]) <= 1e-4, `${engine}: ${k}`);
    const s = await page.evaluate(() => ({ layer: window.attnscope.store.get().layer, head: window.attnscope.store.get().head }));
    assert.deepEqual(s, { layer: focus.layer, head: focus.head ?? 0 }, 'the page opens on the head the training named');
    assert.equal(await page.inputValue('#model-builtin'), 'models/dates/');
    if (engine === 'cpu') {
      for (const [w, h] of [[390, 844], [1280, 800], [1920, 1080]]) {
        await page.setViewportSize({ width: w, height: h });
        await page.locator('#translation').screenshot({ path: path.join(ARTIFACTS, `dates-${w}.png`) });
      }
    }
    clean(problems);
    await page.close();
  }
  // the built-in choice, from the default model: the dates model opens on its own first worked example
  const { page, problems } = await openPage(browser, `${server.url}#e=cpu&s=${encodeURIComponent('Sunday, 9 Sept 2018')}`, { width: 1280, height: 900 });
  assert.equal(await ready(page), null);
  await page.selectOption('#model-builtin', 'models/dates/');
  await page.waitForFunction(() => window.attnscope.result?.source === 'the 9th of May 2018' && window.attnscope.result.output_text === '2018-05-09', null, { timeout: 120000 });
  await page.waitForFunction(() => /model=models(%2F|\/)dates/.test(location.hash), null, { timeout: 10000 });
  const s2 = await page.evaluate(() => ({ layer: window.attnscope.store.get().layer, head: window.attnscope.store.get().head }));
  assert.deepEqual(s2, { layer: focus.layer, head: focus.head ?? 0 }, 'a model chosen in the page opens on its head too');
  clean(problems);
  await page.close();
});

test('the step control: the slider, the ← → keys and play walk the steps, and a link restores the step', async () => {
  const { page, problems } = await openPage(browser, `${server.url}#model=models/dates/&e=cpu&st=2&s=${encodeURIComponent('the 9th of May 2018')}`, { width: 1280, height: 900 });
  assert.equal(await ready(page), null);
  await page.waitForFunction(() => window.attnscope.result?.output_text === '2018-05-09', null, { timeout: 120000 });
  const step = () => page.textContent('.tr-step h3');
  assert.match(await step(), /^Step 3 of 11/, 'the link\'s step');
  await page.locator('.tr-slider').fill('6');
  assert.match(await step(), /^Step 6 of 11/);
  await page.focus('#translation-view');
  await page.keyboard.press('ArrowRight');
  assert.match(await step(), /^Step 7 of 11/);
  await page.keyboard.press('ArrowLeft');
  await page.keyboard.press('ArrowLeft');
  assert.match(await step(), /^Step 5 of 11/, 'the keyboard stays in the view across steps');
  await page.waitForFunction(() => /[#&]st=4(&|$)/.test(location.hash), null, { timeout: 5000 });
  await page.click('button[aria-label^="play"]');
  assert.match(await step(), /^Step 5 of 11/, 'play goes on from the step shown');
  await page.waitForFunction(() => document.querySelector('.tr-step h3')?.textContent.startsWith('Step 11 of 11'), null, { timeout: 20000 });
  await page.waitForFunction(() => document.querySelector('.tr-nav button[aria-pressed]')?.getAttribute('aria-pressed') === 'false', null, { timeout: 5000 });
  clean(problems);
  await page.close();
});

test('<attn-scope model="models/dates/"> shows the translation view, on the head its attributes name or the model’s own, and reports the result', async () => {
  const { page, problems } = await openPage(browser, `${server.url}index.html#e=cpu`, { width: 1000, height: 900 });
  assert.equal(await ready(page), null);
  const got = await page.evaluate(async () => {
    await import('/attn-scope.js');
    const make = (attrs) => {
      const el = document.createElement('attn-scope');
      for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
      document.body.prepend(el);
      return new Promise((res) => el.addEventListener('attnscope-render', (e) => res([el, e.detail]), { once: true }));
    };
    const [a, ra] = await make({ model: 'models/dates/', sentence: 'Sunday, 9 Sept 2018', engine: 'cpu', step: '5' });
    const [b, rb] = await make({ model: 'models/dates/', sentence: 'the 9th of May 2018', engine: 'cpu', layer: '0', head: '3', pair: '2018-05-09' });
    const caption = (el) => el.shadowRoot.querySelector('.tr-head figcaption').textContent;
    const [c, rc] = await make({ model: 'models/dates/', sentence: '9 May 2018', engine: 'cpu', attention: 'encoder', view: 'model' });
    const panes = (el) => [...el.shadowRoot.querySelectorAll('.tr-pane')].map((f) => f.classList[1]);
    // a batch's masks, and inside the decoder
    const [d] = await make({ model: 'models/dates/', batch: '9 May 2018 => 2018-05-09 | Wednesday, the 9th of May, 2018 => 2018-05', item: '1', engine: 'cpu', view: 'masks', attention: 'decoder' });
    const [e] = await make({ model: 'models/dates/', sentence: 'the 9th of May 2018', engine: 'cpu', view: 'inside', step: '3' });
    const wait = (f) => new Promise((res) => { const t = setInterval(() => { if (f()) { clearInterval(t); res(); } }, 50); });
    await wait(() => e.shadowRoot.querySelectorAll('.dec-inside canvas').length >= 9);
    const masks = d.shadowRoot.querySelectorAll('.tr-mask');
    const aStep = a.shadowRoot.querySelector('.tr-step h3').textContent;
    // play: a's steps from the one its attribute names (5) to the last (10), one after another
    const steps = [];
    a.shadowRoot.querySelector('.tr-nav button:last-child').click();
    for (let i = 0; i < 300 && (a.store.get().playing || !steps.length); i++) {
      const h = a.shadowRoot.querySelector('.tr-step h3').textContent.match(/^Step (\d+)/)[1];
      if (steps.at(-1) !== h) steps.push(h);
      await new Promise((r) => setTimeout(r, 50));
    }
    return {
      played: { steps, label: a.shadowRoot.querySelector('.tr-nav button:last-child').textContent },
      a: { text: ra.output_text, step: aStep, caption: caption(a), panes: panes(a) },
      b: { text: rb.output_text, target: rb.target, caption: caption(b), select: b.shadowRoot.querySelector('select[aria-label=layer]').value },
      c: { text: rc.output_text, panes: panes(c), grid: [c.shadowRoot.querySelectorAll('.tr-grid .grid .rowlabel').length, c.shadowRoot.querySelectorAll('.tr-grid .grid .collabel').length], pressed: c.shadowRoot.querySelector('.tr-attn[aria-pressed=true]').dataset.attn },
      d: { masks: masks.length, combined: masks[3]?.querySelector('caption').textContent, applied: d.shadowRoot.querySelector('.tr-applied figcaption')?.textContent, panes: panes(d), result: d.result.source },
      e: { formula: e.shadowRoot.querySelector('.dec-inside .inside-formula')?.textContent, figs: e.shadowRoot.querySelectorAll('.dec-inside .dec-cross-fig').length, rows: e.shadowRoot.querySelectorAll('.dec-inside tr').length, panes: panes(e) },
    };
  });
  assert.equal(got.a.text, '2018-09-09');
  assert.deepEqual(got.played.steps, ['6', '7', '8', '9', '10', '11'], 'play: each step in turn, to the last');
  assert.equal(got.played.label, '▶ play', 'stopped at the last');
  assert.match(got.a.step, /^Step 6 of 11/);
  assert.match(got.a.caption, /^Layer 1, head 2/, 'the model\'s own head');
  assert.deepEqual(got.a.panes, ['tr-head', 'tr-lines'], 'the head and its lines without a view attribute');
  assert.equal(got.b.target, '2018-05-09');
  assert.match(got.b.caption, /^Layer 0, head 3/, 'the attributes\' head');
  assert.equal(got.b.select, '0');
  assert.equal(got.c.text, '2018-05-09');
  assert.deepEqual(got.c.panes, ['tr-grid'], 'view="model": every layer and head');
  assert.equal(got.c.pressed, 'encoder', 'attention="encoder"');
  assert.deepEqual(got.c.grid, [2, 4]);
  assert.equal(got.d.masks, 4, 'view="masks": the batch\'s four masks');
  assert.match(got.d.combined, /source 2: tgt_mask = \(tgt != pad\) & no-peek/, 'item="1": the second source');
  assert.match(got.d.applied, /decoder self-attention of source 2 over the padded batch/);
  assert.equal(got.d.result, 'Wednesday, the 9th of May, 2018');
  assert.deepEqual(got.d.panes, ['tr-applied'], 'the masks alone (and their applied head)');
  assert.match(got.e.formula, /x_3 = E\[“1”\] · √d_model/);
  assert.equal(got.e.figs, 6);
  assert.equal(got.e.rows, 11);
  assert.deepEqual(got.e.panes, [], 'view="inside": the decoder\'s panels, no attention views');
  clean(problems);
  await page.close();
});

/** `attnscope translate` on the dates model. */
const dates = (args) => attnscope(['translate', '--model', path.join(ROOT, 'models/dates'), ...args]).results;

async function openDates(hash, size = { width: 1280, height: 900 }) {
  const p = await openPage(browser, `${server.url}#model=models/dates/&e=cpu&${hash}`, size);
  assert.equal(await ready(p.page), null);
  await p.page.waitForFunction(() => window.attnscope.result?.output_text, null, { timeout: 120000 });
  return p;
}

test('the three attentions: a link restores the attention, view, layer, head and step; hover, the grid, the line view and the exports', async () => {
  const source = 'Sunday, 9 Sept 2018';
  const [want] = dates(['--', source]);
  const T = want.output_ids.length - 1, S = want.source_ids.length;
  const { page, problems } = await openDates(`s=${encodeURIComponent(source)}&a=decoder&l=0&h=3&st=4&v=heatmap`);
  const s = await page.evaluate(() => { const x = window.attnscope.store.get(); return { attn: x.attn, layer: x.layer, head: x.head, step: x.step, view: x.view }; });
  assert.deepEqual(s, { attn: 'decoder', layer: 0, head: 3, step: 4, view: 'heatmap' }, 'the link\'s view');
  assert.match(await page.textContent('.tr-head figcaption'), /^Layer 0, head 3/);
  assert.deepEqual(await shapes(page), { head: [T, T], lines: null, grid: [2, 4] }, 'v=heatmap: no line view');
  assert.match(await page.textContent('.tr-step h3'), /^Step 5 of /);
  // hover reads the engine's number, and a masked cell says it is masked
  const v = want.decoder_attention[0][3];
  assert.equal(await hoverTranslationCell(page, 4, 2), `step 5 (writes “${want.output_tokens[5]}”, reads “${want.output_tokens[4]}”) → “${want.output_tokens[2]}” at position 2: ${v[4][2].toFixed(3)}`);
  assert.match(await hoverTranslationCell(page, 1, 3), /masked/);
  // a click on the grid focuses a head; the link follows
  await page.evaluate(() => document.querySelector('.tr-grid .grid').scrollIntoView({ block: 'center' }));
  await page.click('.tr-grid .cell[data-layer="1"][data-head="2"]');
  await page.waitForFunction(() => /[#&]l=1&h=2(&|$)/.test(location.hash), null, { timeout: 5000 });
  // the cross-attention with its line view: decoder steps left, source tokens right
  await page.selectOption('.tr-show', 'both');
  await page.click('.tr-attn[data-attn=cross]');
  await page.waitForFunction(() => /[#&]l=1&h=2/.test(location.hash) && !/[#&]a=/.test(location.hash), null, { timeout: 5000 });
  assert.deepEqual(await shapes(page), { head: [T, S], lines: [T, S], grid: [2, 4] });
  // the grid draws each T × S head whole (views/grid.js, as a run's): every cell names its
  // strongest weight, the CLI's, and where it is; the focused head is the one clicked
  await page.waitForFunction(() => document.querySelector('.tr-grid .grid')?.getAttribute('aria-label')?.startsWith('every layer and head of the cross-attention'));
  const cells = await page.evaluate(() => [...document.querySelectorAll('.tr-grid .cell')].map((c) => ({ l: +c.dataset.layer, h: +c.dataset.head, label: c.getAttribute('aria-label'), focused: c.classList.contains('focused') })));
  assert.equal(cells.length, 8);
  for (const c of cells) {
    const head = want.cross_attention[c.l][c.h], max = Math.max(...head.flat());
    const at = head.flat().indexOf(max), q = Math.floor(at / S), k = at % S;
    const src = want.source_tokens[k].replace(/▁/g, ' ').trim() || want.source_tokens[k];
    assert.ok(c.label.startsWith(`layer ${c.l}, head ${c.h}: strongest `) && c.label.endsWith(` → ${src} (${max.toFixed(2)})`), `layer ${c.l}, head ${c.h}: ${c.label} (the CLI's strongest: step ${q + 1} → ${src}, ${max.toFixed(2)})`);
    assert.equal(c.focused, c.l === 1 && c.h === 2, `layer ${c.l}, head ${c.h} focused`);
  }
  assert.equal(await hoverTranslationCell(page, 0, 1), `step 1 (writes “${want.output_tokens[1]}”, reads “${want.output_tokens[0]}”) → source “${want.source_tokens[1].replace(/▁/g, ' ').trim() || want.source_tokens[1]}” at position 1: ${want.cross_attention[1][2][0][1].toFixed(3)}`);
  // exports: the head as SVG (one rect a cell), the item as JSON (the numbers), PNG at 2×
  const download = async (sel) => {
    const [d] = await Promise.all([page.waitForEvent('download'), page.click(sel)]);
    return { name: d.suggestedFilename(), bytes: readFileSync(await d.path()) };
  };
  const svg = await download('.export[data-view=head][data-format=svg]');
  assert.equal(svg.name, 'attnscope-cross-head-L1H2.svg');
  assert.equal((svg.bytes.toString().match(/<rect [^>]*data-q=/g) ?? []).length, T * S);
  const json = JSON.parse((await download('.export[data-view=all][data-format=json]')).bytes.toString());
  assert.deepEqual(json.output_ids, want.output_ids);
  for (const k of ['encoder_attention', 'decoder_attention', 'cross_attention']) assert.ok(maxDiff(json[k], want[k]) <= 1e-4, k);
  await page.click('.tr-attn[data-attn=decoder]');
  const dsvg = (await download('.export[data-view=head][data-format=svg]')).bytes.toString();
  assert.equal((dsvg.match(/fill="url\(#hatch\)" data-q=/g) ?? []).length, (T * (T - 1)) / 2, 'the no-peek triangle is hatched in the export');
  const grid = (await download('.export[data-view=model][data-format=svg]')).bytes.toString();
  assert.equal((grid.match(/<g class="head"/g) ?? []).length, 8);
  const png = (await download('.export[data-view=head][data-format=png]')).bytes;
  assert.equal(png.subarray(1, 4).toString(), 'PNG');
  const lines = (await download('.export[data-view=lines][data-format=svg]')).bytes.toString();
  assert.equal((lines.match(/class="qlabel"/g) ?? []).length, T);
  clean(problems);
  await page.close();
});

test('a padded batch: the seeds\' masks drawn (source padding, no-peek, target padding and their &) and applied, each source equal to the CLI', async () => {
  const pairs = [['9 May 2018', '2018-05-09'], ['Wednesday, the 9th of May, 2018', '2018-05']];
  const want = dates([...pairs.flatMap(([, t]) => ['--target', t]), '--', ...pairs.map(([s]) => s)]);
  const lines = pairs.map(([s, t]) => `${s} => ${t}`);
  const { page, problems } = await openDates(`batch=1&${lines.map((l) => `s=${encodeURIComponent(l)}`).join('&')}`);
  await page.waitForSelector('.tr-masks');
  const tr = await page.evaluate(() => { const t = window.attnscope.store.get().translation; return { results: t.results, padded: t.padded }; });
  tr.results.forEach((r, b) => {
    assert.equal(r.target, pairs[b][1]);
    assert.deepEqual(r.output_ids, want[b].output_ids);
    for (const k of ['encoder_attention', 'decoder_attention', 'cross_attention']) assert.ok(maxDiff(r[k], want[b][k]) <= 1e-4, `source ${b + 1}: ${k}`);
  });
  const p = tr.padded, S = p.source_valid[0].length, T = p.target_valid[0].length;
  assert.ok(p.source_valid[0].includes(false) && p.target_valid[1].includes(false), 'the short source and the short target are padded');
  assert.equal(p.target_padding_masked, true);
  // applied: a masked key gets exactly 0, and a real cell is the item's own number
  for (let b = 0; b < 2; b++) {
    const tb = want[b].output_ids.length - 1, sb = want[b].source_ids.length;
    for (let q = 0; q < tb; q++) {
      for (let k = sb; k < S; k++) assert.equal(p.cross_attention[b][1][2][q][k], 0, `cross ${b} ${q} ${k}: a pad key`);
      for (let k = 0; k < T; k++) if (k > q || !p.target_valid[b][k]) assert.equal(p.decoder_attention[b][1][2][q][k], 0, `decoder ${b} ${q} ${k}`);
    }
    assert.ok(maxDiff(p.cross_attention[b][1][2].slice(0, tb).map((r) => r.slice(0, sb)), want[b].cross_attention[1][2]) <= 1e-4);
  }
  // drawn: four masks, their 1s and 0s as the seeds build them
  const masks = async () => page.evaluate(() => [...document.querySelectorAll('.tr-mask')].map((t) => ({
    caption: t.querySelector('caption').textContent,
    rows: [...t.querySelectorAll('tr')].slice(1).map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent).join('')),
  })));
  let m = await masks();
  assert.equal(m.length, 4);
  assert.match(m[0].caption, /src_mask = \(src != pad\)/);
  assert.deepEqual(m[0].rows, p.source_valid.map((r) => r.map((v) => (v ? '1' : '0')).join('')));
  assert.deepEqual(m[1].rows, p.target_valid.map((r) => r.map((v) => (v ? '1' : '0')).join('')));
  assert.deepEqual(m[2].rows, Array.from({ length: T }, (_, q) => Array.from({ length: T }, (_, k) => (k <= q ? '1' : '0')).join('')));
  // the second source's combined mask: no-peek & its target's padding
  await page.selectOption('#item', '1');
  await page.waitForFunction(() => /source 2/.test(document.querySelectorAll('.tr-mask caption')[3]?.textContent ?? ''));
  m = await masks();
  assert.match(m[3].caption, /tgt_mask = \(tgt != pad\) & no-peek/);
  assert.deepEqual(m[3].rows, Array.from({ length: T }, (_, q) => Array.from({ length: T }, (_, k) => (k <= q && p.target_valid[1][k] ? '1' : '0')).join('')));
  // applied, as drawn: the decoder's self-attention of source 2 over the padded frame
  await page.click('.tr-attn[data-attn=decoder]');
  const applied = '.tr-applied .tr-canvas';
  const tb = want[1].output_ids.length - 1;
  assert.match(await hoverTranslationCell(page, T - 1, T - 1, applied), /: 0\.000 \(masked: −∞ before softmax\)$/);
  assert.match(await hoverTranslationCell(page, tb - 1, 0, applied), new RegExp(`: ${want[1].decoder_attention[1][2][tb - 1][0].toFixed(3)}$`));
  // greedy decoding: no target padding mask, and the view says why
  await page.fill('#batch', pairs.map(([s]) => s).join('\n'));
  await page.waitForFunction(() => window.attnscope.store.get().translation?.padded?.target_padding_masked === false, null, { timeout: 60000 });
  assert.match(await page.textContent('.tr-masks'), /no-peek alone/);
  // a batch of which only some lines name a target is refused, readably
  await page.fill('#batch', `${lines[0]}\n${pairs[1][0]}`);
  await page.waitForFunction(() => /Give every source a target/.test(document.querySelector('#input-status')?.textContent ?? ''), null, { timeout: 10000 });
  await page.screenshot({ path: path.join(ARTIFACTS, 'dates-batch-masks-1280.png'), fullPage: true });
  // the worked examples are the translation model's own: a wrong target, teacher-forced
  assert.ok(await page.locator('#example option[value=dates-forced]').count(), 'the dates examples are offered');
  assert.equal(await page.locator('#example option[value=it]').count(), 0, 'not BERT\'s');
  await page.selectOption('#example', 'dates-forced');
  await page.waitForFunction(() => window.attnscope.result?.target === '2018-05-10' && /^Step 9 of /.test(document.querySelector('.tr-step h3')?.textContent ?? ''), null, { timeout: 60000 });
  assert.match(await page.textContent('.tr-step h3'), /the target's next token is “1” \(the model predicts “0”\)/);
  clean(problems);
  await page.close();
});

test('inside the decoder: its input (√d_model, Marian\'s sinusoids), the real cross-attention and the post-LN order, from the engine; BERT\'s cross panel links to it', async () => {
  const source = 'the 9th of May 2018';
  const [want] = dates(['--', source]);
  const { page, problems } = await openDates(`s=${encodeURIComponent(source)}&st=3&inside=dec-embeddings,dec-cross,dec-layer`);
  await page.waitForFunction(() => document.querySelectorAll('#inside-decoder .decoder-panel canvas').length >= 9, null, { timeout: 60000 });
  const got = await page.evaluate(() => {
    const d = window.attnscope.store.get().decoderTrace.data;
    return { d, formula: document.querySelector('#inside-dec-embeddings .inside-formula').textContent, figs: document.querySelectorAll('#inside-dec-cross figure').length, caption: document.querySelector('#inside-decoder-caption').textContent, rows: document.querySelectorAll('#inside-dec-layer tr').length };
  });
  const { d } = got;
  assert.equal(d.embed_scale, 8);
  assert.match(got.formula, /x_3 = E\[“1”\] · √d_model \+ PE\(3\) = E\[“1”\] · 8\.0000 \+ PE\(3\)/);
  assert.match(got.caption, /decoder layer 1, head 2, step 4 of 11/);
  assert.equal(got.figs, 6, 'Q, K, scores, softmax, V, context');
  assert.equal(got.rows, 11, 'ten values in the layer\'s order, and the header');
  // Marian's sinusoids, not interleaved: sin in the first half, cos in the second
  const D = d.position[0].length;
  for (const t of [0, 3, 7]) for (const j of [0, 5, D / 2, D / 2 + 5]) {
    const i = j < D / 2 ? j : j - D / 2, angle = t / 10000 ** (i / (D / 2));
    assert.ok(Math.abs(d.position[t][j] - (j < D / 2 ? Math.sin(angle) : Math.cos(angle))) < 1e-5, `PE(${t}, ${j})`);
  }
  // the scores' softmax over the source is the translation's cross-attention, for every head
  for (let h = 0; h < d.heads; h++) {
    const probs = d.cross_scores[h].map((row) => { const m = Math.max(...row), e = row.map((x) => Math.exp(x - m)), z = e.reduce((a, x) => a + x); return e.map((x) => x / z); });
    assert.ok(maxDiff(probs, want.cross_attention[1][h]) <= 1e-4, `head ${h}`);
  }
  // each sublayer's sum is its input plus its output
  for (const [sum, a, b] of [['self_sum', 'input', 'self_output'], ['cross_sum', 'self_normed', 'cross_output'], ['ffn_sum', 'cross_normed', 'ffn_output']]) {
    assert.ok(maxDiff(d[sum], d[a].map((r, t) => Array.from(r, (x, j) => x + d[b][t][j]))) <= 1e-4, sum);
  }
  clean(problems);
  await page.close();
  // BERT's cross-attention panel keeps its warning, and links to the real one
  const bert = await openPage(browser, `${server.url}#e=cpu&p=${encodeURIComponent('It was very comfortable.')}&inside=cross`, { width: 1280, height: 900 });
  assert.equal(await ready(bert.page), null);
  await bert.page.waitForSelector('#inside-cross a.real-cross');
  assert.match(await bert.page.textContent('#inside-cross .inside-caveat'), /all-MiniLM-L6-v2 \(bert\) is an encoder only: it has no trained cross-attention/);
  await bert.page.click('#inside-cross a.real-cross');
  await bert.page.waitForFunction(() => window.attnscope.result?.output_text === '2018-05-09', null, { timeout: 120000 });
  await bert.page.waitForFunction(() => document.querySelectorAll('#inside-dec-cross figure').length === 6, null, { timeout: 60000 });
  assert.ok(await bert.page.isVisible('#inside-dec-cross'));
  await bert.page.waitForFunction(() => Math.abs(document.getElementById('inside-decoder').getBoundingClientRect().top) < 50, null, { timeout: 5000 });
  clean(bert.problems);
  await bert.page.close();
});

test('"check" on the dates model: CPU vs WebGPU, and the engine vs HF\'s generate on four dates (web/reference/dates.json)', async () => {
  const { page, problems } = await openPage(browser, `${server.url}#model=models/dates/&e=gpu&s=${encodeURIComponent('the 9th of May 2018')}`, { width: 1280, height: 900 });
  assert.equal(await ready(page), null);
  await page.waitForFunction(() => window.attnscope.result?.output_text === '2018-05-09', null, { timeout: 120000 });
  await page.click('#check');
  await page.waitForFunction(() => /PyTorch|failed/.test(document.getElementById('check-result').textContent), null, { timeout: 120000 });
  const text = await page.textContent('#check-result');
  const gpu = text.match(/CPU vs WebGPU: max \|Δ\| = ([\d.e+-]+)/);
  assert.ok(gpu && Number(gpu[1]) <= 1e-4, text);
  const hf = text.match(/vs PyTorch \(HF transformers [\d.]+, torch [\d.]+\) on 4 dates: the same output ids for 4 of 4, three attentions max \|Δ\| = ([\d.e+-]+)/);
  assert.ok(hf && Number(hf[1]) <= 1e-4, text);
  clean(problems);
  await page.close();
});

test('ticking "batch" on the dates model: a second date, not an encoder\'s sentence; the target box is off and ignored (each line names its own)', async () => {
  const { page, problems } = await openDates(`s=${encodeURIComponent('9 May 2018')}&p=2018-05-10`);
  await page.waitForFunction(() => window.attnscope.result?.target === '2018-05-10', null, { timeout: 60000 });
  await page.check('#batch-mode');
  await page.waitForFunction(() => window.attnscope.store.get().translation?.results.length === 2, null, { timeout: 60000 });
  assert.deepEqual(await page.evaluate(() => window.attnscope.store.get().translation.results.map((r) => [r.source, r.target ?? null, r.output_text])),
    [['9 May 2018', null, '2018-05-09'], ['Wednesday, May 9, 2018', null, '2018-05-09']]);
  assert.equal(await page.isDisabled('#pair'), true);
  assert.equal(await page.isDisabled('#compare-mode'), true);
  clean(problems);
  await page.close();
});

test('a word the model does not know is named: the tokenizer reads it as <unk>', async () => {
  const { page, problems } = await openDates(`s=${encodeURIComponent('the 9th of Mai 2018')}`);
  assert.deepEqual(await page.evaluate(() => window.attnscope.result.source_tokens), ['the', '9', 'th', 'of', '<unk>', '2', '0', '1', '8', '</s>']);
  assert.match(await page.textContent('.tr-unk'), /^“Mai” is not in the model's vocabulary: the tokenizer reads it as <unk>/);
  clean(problems);
  await page.close();
});
