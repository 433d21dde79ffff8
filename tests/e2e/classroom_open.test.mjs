// Issue 29, "Opening a model", "Reading a translation" and the cross-attention panel: a model
// opens on its own first worked example (from the model choice at the top, the "Built in" choice
// below or a link) unless a link gives the sentence; an output that is no date says so; control
// characters and whitespace are shown visibly; a translation's rows are labelled by what each
// step writes, with what it reads beside it; steps count from 1 wherever a person reads them and
// positions (from 0) are named as positions; BERT's cross-attention panel says what a
// cross-attention masks, in a section of its own. Screenshots in test-artifacts/classroom-open-*.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { cpSync, rmSync, readFileSync } from 'node:fs';
import { startServer, launch, openPage, ready, hoverTranslationCell, ARTIFACTS, ROOT } from './harness.mjs';

// the fixtures are served from assets/models/ (git-ignored), under names of this file's own
const FIXTURES = ['tiny-gpt2', 'tiny-marian'];
const served = (name) => path.join(ROOT, 'assets/models', `e2e-open-${name}`);

let server, browser;
before(async () => {
  for (const name of FIXTURES) cpSync(path.join(ROOT, 'tests/fixtures/models', name), served(name), { recursive: true });
  server = await startServer();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  server?.stop();
  for (const name of FIXTURES) rmSync(served(name), { recursive: true, force: true });
});

const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);
const DEFAULT_SENTENCE = 'The animal didn\'t cross the street because it was too tired.';
const DATES_FIRST = 'the 9th of May 2018'; // web/examples.js TRANSLATION_EXAMPLES[0], at step 6 (0-based)
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

async function open(hash, size = { width: 1280, height: 800 }) {
  const p = await openPage(browser, `${server.url}${hash}`, size);
  assert.equal(await ready(p.page), null);
  return p;
}
const translated = (page, source) => page.waitForFunction((s) => window.attnscope.result?.source === s && window.attnscope.result.output_text, source, { timeout: 120000 });
const encoded = (page, text) => page.waitForFunction((t) => window.attnscope.info?.name === 'all-MiniLM-L6-v2' && window.attnscope.result?.text === t, text, { timeout: 120000 });

test('a model opens on its own first worked example: from the model choice at the top, from "Built in" below, and from a link without a sentence; a link\'s sentence is kept', async () => {
  const { page, problems } = await open('#e=cpu');
  // the model choice is at the top of the page, in the inputs row, and names the running model
  const pick = await page.locator('#model-pick').boundingBox();
  assert.ok(pick && pick.y + pick.height <= 200, `the model choice is near the top (${JSON.stringify(pick)})`);
  assert.equal(await page.inputValue('#model-pick'), '');
  await page.screenshot({ path: path.join(ARTIFACTS, 'classroom-open-top-1280.png') });
  // the dates model, chosen at the top (from compare mode): its own date, alone, not BERT's sentences full of <unk>
  await page.check('#compare-mode');
  await page.waitForFunction(() => window.attnscope.store.get().run?.B === 2, null, { timeout: 60000 });
  await page.selectOption('#model-pick', 'models/dates/');
  await translated(page, DATES_FIRST);
  assert.equal(await page.evaluate(() => window.attnscope.store.get().translation.results.length), 1, 'one source: compare mode is an encoder\'s');
  const r = await page.evaluate(() => window.attnscope.result);
  assert.equal(r.output_text, '2018-05-09');
  assert.ok(!r.source_tokens.includes('<unk>'), r.source_tokens.join(' '));
  assert.equal(await page.inputValue('#sentence'), DATES_FIRST, 'the sentence box shows it');
  assert.match(await page.textContent('.tr-step h3'), /^Step 7 of 11/, 'on the example\'s step');
  assert.equal(await page.inputValue('#model-builtin'), 'models/dates/', 'the choice below follows');
  await page.waitForFunction(() => /model=models(%2F|\/)dates/.test(location.hash) && /[#&]st=6(&|$)/.test(location.hash), null, { timeout: 5000 });
  // back to the default model, from "Built in" below: an encoder's sentence again, not the date
  await page.selectOption('#model-builtin', '');
  await encoded(page, DEFAULT_SENTENCE);
  assert.equal(await page.inputValue('#model-pick'), '', 'the choice at the top follows');
  assert.equal(await page.inputValue('#sentence'), DEFAULT_SENTENCE);
  assert.deepEqual(await page.evaluate(() => { const s = window.attnscope.store.get(); return [s.layer, s.head, s.step]; }), [3, 1, null], 'the example\'s head ("it" → "animal")');
  // a link on the open page that names the model and no sentence: the model's own example
  await page.evaluate(() => { location.hash = '#model=models/dates/&e=cpu'; });
  await translated(page, DATES_FIRST);
  clean(problems);
  await page.close();

  // a link that opens the dates model without a sentence: its example; with one: that sentence
  for (const [width, height, scale] of [[390, 844, 2], [1280, 800, 1], [1920, 1080, 1]]) {
    const linked = await open('#model=models/dates/&e=cpu', { width, height, scale });
    await translated(linked.page, DATES_FIRST);
    assert.equal(await linked.page.inputValue('#model-pick'), 'models/dates/');
    const overflow = await linked.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 1, `${width} px: the page is ${overflow} px wider than the window`);
    await linked.page.screenshot({ path: path.join(ARTIFACTS, `classroom-open-dates-top-${width}.png`) });
    clean(linked.problems);
    await linked.page.close();
  }
  const given = await open(`#model=models/dates/&e=cpu&s=${encodeURIComponent('9 May 2018')}&st=2`);
  await translated(given.page, '9 May 2018');
  assert.match(await given.page.textContent('.tr-step h3'), /^Step 3 of /, 'the link\'s step too');
  clean(given.problems);
  await given.page.close();

  // another checkpoint loaded below is named in the choice at the top
  const gpt2 = await open(`#e=cpu&s=${encodeURIComponent('time flies like an arrow')}`);
  await gpt2.page.fill('#model-url', `${server.url}assets/models/e2e-open-tiny-gpt2/`);
  await gpt2.page.click('#load-url');
  await gpt2.page.waitForFunction(() => window.attnscope.info?.name === 'e2e-open-tiny-gpt2' && window.attnscope.result?.text === 'time flies like an arrow', null, { timeout: 120000 });
  assert.match(await gpt2.page.$eval('#model-pick', (s) => s.selectedOptions[0].textContent), /^e2e-open-tiny-gpt2 \(loaded below\)$/, 'an encoder after an encoder keeps the sentence, and the choice names the model');
  clean(gpt2.problems);
  await gpt2.page.close();
});

test('a date the model was not trained on is shown as it is, with a line saying it is not a valid date; only for the dates model', async () => {
  const { page, problems } = await open(`#model=models/dates/&e=cpu&s=${encodeURIComponent('12/25/2020')}`);
  await translated(page, '12/25/2020');
  const out = await page.evaluate(() => window.attnscope.result.output_text);
  assert.equal(out, '2020-25-12', 'the model reads numbers day first');
  assert.match(await page.textContent('.tr-text'), /“2020-25-12”/, 'shown as it is');
  assert.match(await page.textContent('.tr-invalid'), /^“2020-25-12” is not a valid date: there is no month 25 \(months run 01–12\)/);
  await page.locator('#translation').screenshot({ path: path.join(ARTIFACTS, 'classroom-open-invalid-date-1280.png') });
  // a valid date has no such line; a day past its month's end has one
  await page.fill('#sentence', '9 May 2018');
  await translated(page, '9 May 2018');
  assert.equal(await page.locator('.tr-invalid').count(), 0);
  await page.fill('#sentence', '31/04/2018');
  await translated(page, '31/04/2018');
  if ((await page.evaluate(() => window.attnscope.result.output_text)) === '2018-04-31') {
    assert.match(await page.textContent('.tr-invalid'), /April 2018 has 30 days, so there is no day 31/);
  }
  clean(problems);
  await page.close();
  // a random Marian's output is no date either, but it is not a dates model: no line
  const marian = await open(`#model=${encodeURIComponent(`${server.url}assets/models/e2e-open-tiny-marian/`)}&e=cpu&s=${encodeURIComponent('time flies like an arrow')}`);
  await translated(marian.page, 'time flies like an arrow');
  assert.equal(await marian.page.locator('.tr-invalid').count(), 0);
  clean(marian.problems);
  await marian.page.close();
});

test('GPT-2: its next tokens and its token labels show control characters and whitespace visibly, never raw', async () => {
  const text = 'time flies\nlike an\tarrow';
  const { page, problems } = await open(`#model=${encodeURIComponent(`${server.url}assets/models/e2e-open-tiny-gpt2/`)}&e=cpu&s=${encodeURIComponent(text)}`);
  await page.waitForFunction((t) => window.attnscope.result?.text === t && window.attnscope.result.next_tokens, text, { timeout: 120000 });
  const labels = await page.evaluate(() => window.attnscope.store.get().run.results[0].labels);
  assert.ok(labels.includes('⏎') && labels.includes('⇥'), `the newline and the tab as signs: ${labels.join('|')}`);
  assert.ok(labels.every((l) => !CONTROL.test(l)), 'no raw control character in the token labels');
  // every position's next tokens, as the list writes them
  const n = labels.length;
  let signs = 0;
  for (let q = 0; q < n; q++) {
    await page.evaluate((i) => window.attnscope.store.update({ sel: [i] }), q);
    await page.waitForFunction((i) => document.getElementById('next-caption').textContent.includes(`(position ${i})`), q);
    const got = await page.evaluate((i) => ({
      list: [...document.querySelectorAll('#next-list .next-label')].map((x) => x.textContent),
      line: document.getElementById('next-line').textContent,
      texts: window.attnscope.result.next_tokens[i].map((p) => p.text),
    }), q);
    for (const t of [...got.list, got.line]) assert.ok(!CONTROL.test(t), `position ${q}: a raw control character in ${JSON.stringify(t)}`);
    got.texts.forEach((t, i) => {
      if (CONTROL.test(t) || (t && !t.trim())) { signs++; assert.match(got.list[i], /^“[^”]*[␀-␡⏎⇥␣]/, `position ${q}: ${JSON.stringify(t)} shown as ${got.list[i]}`); }
    });
  }
  assert.ok(signs > 0, 'the fixture predicts some control or whitespace tokens, so the list was tested on them');
  assert.match(await page.textContent('#next-caption'), /after token \d+ of \d+ \(position \d+\)/);
  await page.locator('#head-panel').screenshot({ path: path.join(ARTIFACTS, 'classroom-open-gpt2-next-1280.png') });
  clean(problems);
  await page.close();
});

test('a random Marian\'s output text leaves out the special tokens the decoder reads and writes', async () => {
  const { page, problems } = await open(`#model=${encodeURIComponent(`${server.url}assets/models/e2e-open-tiny-marian/`)}&e=cpu&s=${encodeURIComponent('time flies like an arrow')}`);
  await translated(page, 'time flies like an arrow');
  const r = await page.evaluate(() => window.attnscope.result);
  const shown = await page.textContent('.tr-text');
  for (const special of ['<pad>', '</s>', '<unk>']) {
    assert.ok(!r.output_text.includes(special), `output_text ${JSON.stringify(r.output_text)} has ${special} (the engine's output_text, src/)`);
    assert.ok(!shown.includes(special), `the page shows ${JSON.stringify(shown)}`);
  }
  assert.ok(!CONTROL.test(shown));
  clean(problems);
  await page.close();
});

/** The text of every `text.qlabel` (the row labels) in an exported SVG. */
const qlabels = (svg) => [...svg.matchAll(/<text class="qlabel"[^>]*>([^<]*)<\/text>/g)].map((m) => m[1].replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&#39;/g, '\'').replace(/&amp;/g, '&'));


test('reading a translation: each row is labelled by the token its step writes, with the one it reads beside it (head view, lines, tooltips, exports, the batch\'s masks)', async () => {
  const { page, problems } = await open(`#model=models/dates/&e=cpu&s=${encodeURIComponent(DATES_FIRST)}&st=6`);
  await translated(page, DATES_FIRST);
  const r = await page.evaluate(() => window.attnscope.result);
  const T = r.output_ids.length - 1;
  const show = (t) => t.replace(/▁/g, ' ').trim() || t;
  const rows = Array.from({ length: T }, (_, t) => `${show(r.output_tokens[t + 1])} ← ${show(r.output_tokens[t])}`);
  assert.equal(rows[6], '5 ← 0', 'step 7 writes the month\'s second digit, "5", reading the "0" before it');
  const download = async (sel) => {
    const [d] = await Promise.all([page.waitForEvent('download'), page.click(sel)]);
    return readFileSync(await d.path()).toString();
  };
  for (const attn of ['cross', 'decoder']) {
    await page.click(`.tr-attn[data-attn=${attn}]`);
    assert.match(await page.textContent('.tr-head figcaption'), /rows: writes ← reads/);
    assert.match(await hoverTranslationCell(page, 6, 1), /^step 7 \(writes “5”, reads “0”\) → (source )?“.*” at position 1: \d\.\d{3}/);
    assert.deepEqual(qlabels(await download('.export[data-view=head][data-format=svg]')), rows, `${attn}: the head's rows, exported`);
    assert.deepEqual(qlabels(await download('.export[data-view=lines][data-format=svg]')), rows, `${attn}: the lines' rows, exported`);
  }
  await page.click('.tr-attn[data-attn=cross]');
  await page.locator('#translation').screenshot({ path: path.join(ARTIFACTS, 'classroom-open-rows-1280.png') });
  for (const [w, h] of [[390, 844], [1920, 1080]]) {
    await page.setViewportSize({ width: w, height: h });
    await page.waitForTimeout(300);
    await page.locator('#translation').screenshot({ path: path.join(ARTIFACTS, `classroom-open-rows-${w}.png`) });
  }
  clean(problems);
  await page.close();

  // a batch: the combined mask's rows and the applied view's are the steps too
  const lines = ['9 May 2018 => 2018-05-09', 'Wednesday, the 9th of May, 2018 => 2018-05'];
  const batch = await open(`#model=models/dates/&e=cpu&batch=1&${lines.map((l) => `s=${encodeURIComponent(l)}`).join('&')}`);
  await batch.page.waitForSelector('.tr-masks');
  const m = await batch.page.evaluate(() => [...document.querySelectorAll('.tr-mask')].map((t) => ({
    corner: t.querySelector('th.corner').textContent,
    rows: [...t.querySelectorAll('tr')].slice(1).map((tr) => tr.querySelector('th').textContent),
  })));
  const tr0 = await batch.page.evaluate(() => window.attnscope.result);
  assert.equal(m[2].corner, 'step ╲ position');
  assert.deepEqual(m[2].rows, m[2].rows.map((_, q) => String(q + 1)), 'the no-peek mask\'s steps count from 1');
  assert.equal(m[3].corner, 'writes ← reads ╲ reads');
  assert.equal(m[3].rows[0], `${show(tr0.output_tokens[1])} ← ${show(tr0.output_tokens[0])}`);
  await batch.page.click('.tr-attn[data-attn=decoder]');
  assert.match(await hoverTranslationCell(batch.page, 1, 0, '.tr-applied .tr-canvas'), /^step 2 \(writes ← reads: .+ ← .+\) → “.*” at position 0: \d\.\d{3}/);
  clean(batch.problems);
  await batch.page.close();
});

test('steps count from 1 wherever a person reads them, and positions (from 0) are named as positions', async () => {
  const { page, problems } = await open(`#model=models/dates/&e=cpu&s=${encodeURIComponent(DATES_FIRST)}&st=6&inside=dec-cross`);
  await translated(page, DATES_FIRST);
  await page.waitForFunction(() => document.querySelectorAll('#inside-dec-cross figure').length === 6, null, { timeout: 60000 });
  const text = await page.evaluate(() => ({
    heading: document.querySelector('.tr-step h3').textContent,
    caption: document.querySelector('.tr-head figcaption').textContent,
    token: document.querySelector('.tr-token[aria-pressed=true]').title,
    slider: document.querySelector('.tr-slider').value,
    inside: document.getElementById('inside-decoder-caption').textContent,
    reads: document.querySelector('.tr-reads').textContent,
  }));
  assert.match(text.heading, /^Step 7 of 11/);
  assert.match(text.caption, /step 7 outlined/);
  assert.match(text.token, /^step 7: /);
  assert.equal(text.slider, '7');
  assert.match(text.inside, /step 7 of 11/);
  assert.match(text.reads, /“[^”]+” \(position \d+\) \d+%/, 'the source tokens by their positions');
  // the decoder's line: no "step t sees steps 0…t"
  await page.click('.tr-attn[data-attn=decoder]');
  const line = await page.textContent('.tr-line');
  assert.doesNotMatch(line, /steps 0…t/);
  assert.match(line, /step t \(counted from 1\) reads only positions 0…t − 1/);
  // inside the decoder: a hovered query names its step and its position
  const tip = await page.evaluate(() => {
    const c = document.querySelectorAll('#inside-dec-cross canvas')[3];
    c.scrollIntoView({ block: 'center' });
    const g = c._g, r = c.getBoundingClientRect();
    return { x: r.left + g.x0 + 0.5 * g.cw, y: r.top + g.y0 + 6.5 * g.ch };
  });
  await page.mouse.move(tip.x, tip.y);
  await page.waitForFunction(() => !document.querySelector('#inside-dec-cross > .tooltip')?.hidden, null, { timeout: 5000 });
  const tipText = await page.textContent('#inside-dec-cross > .tooltip');
  assert.match(tipText, /^step 7 \(position 6, reads “0”\) → “.+” at position 0: /);
  // the link keeps its 0-based st=, and old links open the same step
  // (app.js writes the hash 120 ms after the last change: wait for it)
  await page.waitForFunction(() => /[#&]st=6(&|$)/.test(location.hash), null, { timeout: 5000 });
  clean(problems);
  await page.close();
});

test('the cross-attention panel: its own section, not "Inside the encoder"; it says the source\'s padding is what a cross-attention masks, as the dates batch view shows', async () => {
  const { page, problems } = await open(`#e=cpu&p=${encodeURIComponent('It was very comfortable.')}&inside=cross`);
  await page.waitForSelector('#inside-cross a.real-cross');
  assert.equal(await page.evaluate(() => document.getElementById('inside-cross').closest('#inside')), null, 'not inside the encoder\'s section');
  assert.equal(await page.evaluate(() => document.getElementById('inside-cross').closest('section').id), 'cross-section');
  assert.ok(await page.evaluate(() => document.querySelector('#cross-section details[data-panel=cross]').open), 'inside=cross still opens it');
  assert.match(await page.textContent('#cross-h'), /Cross-attention/);
  const intro = await page.textContent('#inside-cross .inside-intro');
  assert.doesNotMatch(intro, /nothing is masked/);
  assert.match(intro, /Its mask is the source's padding/);
  assert.equal(await page.getAttribute('#inside-cross a.real-cross', 'href'), '#model=models/dates/&s=the%209th%20of%20May%202018&inside=dec-cross');
  await page.locator('#cross-section').screenshot({ path: path.join(ARTIFACTS, 'classroom-open-cross-1280.png') });
  // the dates batch view says the same: the source padding masks the cross-attention's keys
  await page.click('#inside-cross a.real-cross');
  await translated(page, DATES_FIRST);
  assert.ok(await page.isHidden('#cross-section'), 'the panel is an encoder page\'s: a translation model has the real one');
  clean(problems);
  await page.close();
});

// ---------- a failed link, the explanation, the worked example, the labels (issue 29, review of the page) ----------

/** Whether the select `sel` is as wide as its chosen label needs (a select of that one label, same font, laid out alone). */
const selectFits = (page, sel) => page.$eval(sel, (s) => {
  const probe = document.createElement('select');
  probe.append(new Option(s.selectedOptions[0].textContent));
  const cs = getComputedStyle(s);
  Object.assign(probe.style, { position: 'absolute', left: '-9999px', font: cs.font, padding: cs.padding, border: cs.border, width: 'auto', maxWidth: 'none' });
  document.body.append(probe);
  const need = probe.getBoundingClientRect().width;
  probe.remove();
  return { label: s.selectedOptions[0].textContent, width: s.getBoundingClientRect().width, need };
});
const MODEL_PANELS = ['#page-nav', '#translation', '#inside-decoder', '#views', '#steps', '#inside', '#cross-section', '#reading'];
const notFound = (problems) => problems.filter((x) => !/favicon|404|Failed to load resource/.test(x));

test('a mistyped model link: its error right under the inputs, above the fold, and the default model opened under it (not an empty page); the Model choice names the model shown; picking a model recovers; a PyTorch .bin link says how to convert it', async () => {
  for (const [width, height, scale] of [[390, 844, 2], [1920, 1080, 1], [1280, 800, 1]]) {
    const { page, problems } = await openPage(browser, `${server.url}#model=models/datse/&e=cpu`, { width, height, scale });
    assert.match(await ready(page), /datse/);
    // the default model runs under the error, which stays, saying so
    await page.waitForFunction(() => window.attnscope.info?.name === 'all-MiniLM-L6-v2' && window.attnscope.result, null, { timeout: 120000 });
    await page.waitForFunction(() => !document.getElementById('link-error').hidden);
    const error = await page.textContent('#link-error');
    assert.match(error, /models\/datse\/.*\(showing all-MiniLM-L6-v2 instead/, error);
    assert.equal(await page.evaluate(() => document.body.classList.contains('no-model')), false);
    const err = await page.locator('#link-error').boundingBox();
    assert.ok(err.y + err.height <= height, `${width} px: the error ends at y = ${err.y + err.height}, the window is ${height} px tall`);
    assert.ok(await page.isVisible('#views'), `${width} px: the default model's views are shown`);
    assert.equal(await page.$eval('#model-pick', (s) => s.selectedOptions[0].textContent.trim()), 'all-MiniLM-L6-v2 (encoder)');
    assert.equal(await page.inputValue('#model-url'), 'models/datse/', 'the mistyped URL is kept to correct');
    await page.screenshot({ path: path.join(ARTIFACTS, `classroom-open-failed-${width}.png`) });
    if (width !== 1280) { await page.close(); continue; }
    // the choice at the top recovers: the dates model, on its own example, the error gone
    await page.selectOption('#model-pick', 'models/dates/');
    await translated(page, DATES_FIRST);
    assert.ok(await page.isVisible('#translation') && await page.isHidden('#error') && await page.isHidden('#link-error'));
    assert.equal(await page.inputValue('#model-pick'), 'models/dates/');
    assert.deepEqual(notFound(problems), []);
    await page.close();
  }
  // a link to PyTorch's weights file: not read as a folder, and the error says how to convert it
  const { page, problems } = await openPage(browser, `${server.url}#model=${encodeURIComponent('models/dates/pytorch_model.bin')}&e=cpu`, { width: 1280, height: 800 });
  const bin = await ready(page);
  assert.match(bin, /pytorch_model\.bin is PyTorch's pickle format, which attnscope does not load .*save_pretrained.*models\/dates\//, bin);
  await page.waitForFunction(() => window.attnscope.info?.name === 'all-MiniLM-L6-v2' && window.attnscope.result, null, { timeout: 120000 });
  assert.deepEqual(notFound(problems), []);
  await page.close();
});

test('the dates model at 1280 × 800: the focused head starts above the fold, the encoder–decoder explanation one click away', async () => {
  const { page, problems } = await open('#model=models/dates/&e=cpu');
  await translated(page, DATES_FIRST);
  const top = await page.$eval('#translation-view .tr-head', (x) => x.getBoundingClientRect().top);
  assert.ok(top < 480, `the focused head starts at y = ${top}`);
  assert.equal(await page.$eval('#translation-explain', (d) => d.open), false, 'the explanation is closed');
  await page.screenshot({ path: path.join(ARTIFACTS, 'classroom-open-dates-fold-1280.png') });
  await page.click('#translation-explain summary');
  assert.match(await page.textContent('#translation-explain p'), /the decoder writes the output one\s+token at a time/);
  assert.ok(await page.isVisible('#translation-explain p'));
  await page.screenshot({ path: path.join(ARTIFACTS, 'classroom-open-dates-explained-1280.png') });
  clean(problems);
  await page.close();
});

test('"Worked example" shows the example on screen, and "choose…" once the text is the user\'s own', async () => {
  const { page, problems } = await open('#e=cpu');
  assert.equal(await page.inputValue('#example'), 'it', 'the default model opens on its first example');
  await page.fill('#sentence', 'The animal didn\'t cross the street because it was too wide.');
  await page.waitForFunction(() => window.attnscope.result?.text.endsWith('wide.'), null, { timeout: 60000 });
  assert.equal(await page.inputValue('#example'), '', 'edited: the user\'s own text');
  await page.selectOption('#example', 'pair');
  await page.waitForFunction(() => window.attnscope.store.get().pair === 'It was very comfortable.');
  assert.equal(await page.inputValue('#example'), 'pair');
  await page.selectOption('#model-pick', 'models/dates/');
  await translated(page, DATES_FIRST);
  assert.equal(await page.inputValue('#example'), 'dates-ordinal', 'the dates model opens on its first example');
  await page.fill('#sentence', '10 May 2018');
  await translated(page, '10 May 2018');
  assert.equal(await page.inputValue('#example'), '');
  clean(problems);
  await page.close();
});

test('the Model choice shows its whole label (presenter mode at 390, 1280 and 1920), and the sentence box grows into a wide screen\'s free room', async () => {
  for (const [width, height, scale] of [[390, 844, 2], [1280, 800, 1], [1920, 1080, 1]]) {
    for (const model of ['', 'models/dates/']) {
      const { page, problems } = await open(`#e=cpu&present=1${model ? `&model=${model}` : ''}`, { width, height, scale });
      if (model) await translated(page, DATES_FIRST);
      const fit = await selectFits(page, '#model-pick');
      assert.ok(fit.width >= fit.need - 0.5, `${width} px, presenter: "${fit.label}" needs ${fit.need} px, the select is ${fit.width}`);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 1, `${width} px: the page is ${overflow} px wider than the window`);
      await page.locator('#inputs').screenshot({ path: path.join(ARTIFACTS, `classroom-open-pick-presenter-${width}${model ? '-dates' : ''}.png`) });
      clean(problems);
      await page.close();
    }
  }
  const { page, problems } = await open('#e=cpu', { width: 1920, height: 1080 });
  const box = await page.$eval('#sentence', (t) => ({ client: t.clientWidth, scroll: t.scrollWidth }));
  assert.ok(box.scroll <= box.client, `1920 px: the sentence needs ${box.scroll} px, its box is ${box.client} px`);
  assert.ok((await selectFits(page, '#model-pick')).width >= (await selectFits(page, '#model-pick')).need - 0.5);
  await page.locator('#inputs').screenshot({ path: path.join(ARTIFACTS, 'classroom-open-inputs-1920.png') });
  clean(problems);
  await page.close();
});

test('the lines view names its sides; a column label of the head view says what its token is, on hover and on a tap', async () => {
  const { page, problems } = await open('#e=cpu');
  assert.equal(await page.textContent('#lines-view .lines-axes'), 'queries (left) → keys (right)');
  assert.ok(await page.isVisible('#lines-view .lines-axes'));
  // the last column, [SEP]: a point on its label, above the cells
  const at = await page.$eval('#head-view canvas.heat', (c) => {
    const d = c.dataset, r = c.getBoundingClientRect(), k = +d.t - 1;
    return { x: r.left + +d.x0 + (k - +d.k0 + 0.5) * +d.cell, y: r.top + +d.y0 / 2, k };
  });
  assert.equal(await page.evaluate((k) => window.attnscope.store.get().run.results[0].labels[k], at.k), '[SEP]');
  await page.mouse.move(at.x, at.y);
  await page.waitForFunction(() => !document.querySelector('#head-view .tooltip').hidden);
  const tip = await page.textContent('#head-view .tooltip');
  assert.match(tip, /^\[SEP\]: the key at position \d+ \(its column\)/);
  assert.match(tip, /\[SEP\]: a token the tokenizer adds at the end of each sentence/);
  await page.locator('#head-panel').screenshot({ path: path.join(ARTIFACTS, 'classroom-open-column-tip-1280.png') });
  // a tap (a phone has no hover): the click alone shows it
  await page.mouse.move(at.x, at.y + 200);
  await page.$eval('#head-view .overlay', (o, p) => o.dispatchEvent(new MouseEvent('click', { clientX: p.x, clientY: p.y, bubbles: true })), at);
  assert.match(await page.textContent('#head-view .tooltip'), /^\[SEP\]: the key at position/);
  assert.equal(await page.$eval('#head-view .tooltip', (t) => t.hidden), false);
  clean(problems);
  await page.close();
});

test('inside the decoder, rows are labelled as in the other views: writes ← reads', async () => {
  const { page, problems } = await openPage(browser, null, { width: 1280, height: 800 });
  // the labels a canvas draws, as it draws them
  await page.addInitScript(() => {
    const fill = CanvasRenderingContext2D.prototype.fillText;
    CanvasRenderingContext2D.prototype.fillText = function (text, ...rest) { (this.canvas.drawn ??= []).push(String(text)); return fill.call(this, text, ...rest); };
  });
  await page.goto(`${server.url}#model=models/dates/&e=cpu&s=${encodeURIComponent(DATES_FIRST)}&st=6&inside=dec-embeddings,dec-cross`);
  await translated(page, DATES_FIRST);
  await page.waitForFunction(() => document.querySelectorAll('#inside-dec-embeddings canvas').length === 2 && document.querySelectorAll('#inside-dec-cross figure').length === 6, null, { timeout: 60000 });
  const r = await page.evaluate(() => window.attnscope.result);
  const show = (t) => t.replace(/▁/g, ' ').trim() || t;
  const rows = r.output_tokens.slice(0, -1).map((reads, t) => `${show(r.output_tokens[t + 1])} ← ${show(reads)}`);
  const drawn = await page.evaluate(() => ({
    positions: document.querySelectorAll('#inside-dec-embeddings canvas')[1].drawn ?? [],
    scores: document.querySelectorAll('#inside-dec-cross canvas')[2].drawn ?? [],
  }));
  for (const [panel, texts] of Object.entries(drawn)) {
    for (const row of rows) assert.ok(texts.includes(row), `${panel}: the row "${row}" (drawn: ${texts.slice(0, 14).join(' | ')})`);
    assert.ok(!texts.some((x) => /^\d+: /.test(x)), `${panel}: no "position: token" label`);
  }
  assert.ok(rows.includes('5 ← 0'));
  await page.locator('#inside-dec-embeddings').screenshot({ path: path.join(ARTIFACTS, 'classroom-open-dec-positions-1280.png') });
  clean(problems);
  await page.close();
});
