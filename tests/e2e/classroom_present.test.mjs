// Issue 29, in front of a class: presenter mode (the focused view above the fold at 1280 × 800
// and 1920 × 1080, the sentence whole, no sideways scroll at 390), a presentation clicker's keys,
// keys acting on the view that has the focus (the page scrolls otherwise), and nothing jumping
// when "check" answers or a row is selected. Geometry is read with getBoundingClientRect.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, launch, openPage, ready, ARTIFACTS } from './harness.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launch({ webgpu: false }); });
after(async () => { await browser?.close(); server?.stop(); });

const DATE = 'Sunday, September 9, 2018';
const DATES = `#model=models/dates/&e=cpu&s=${encodeURIComponent(DATE)}`;
const SIZES = { phone: { width: 390, height: 844, scale: 2 }, laptop: { width: 1280, height: 800 }, projector: { width: 1920, height: 1080 } };
const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);

async function open(hash, size) {
  const p = await openPage(browser, server.url + hash, size);
  assert.equal(await ready(p.page), null, 'the model loads');
  return p;
}
/** Waits until the encoder's views have drawn the current run (scope.js `rendered`), of `text` when given. */
const encoderDrawn = (page, text = null) => page.waitForFunction((t) => {
  const s = window.attnscope.store.get();
  return s.run && (t === null || s.run.results[0].text === t) && s.rendered.split(':')[0] === String(s.run.id) && document.querySelector('#head-view .heat')?.dataset.t === String(s.run.T);
}, text, { timeout: 60000 });
/** Waits until the translation view shows `output`. */
const translated = (page, output = '2018-09-09') => page.waitForFunction((o) => window.attnscope.result?.output_text === o && document.querySelector('#translation-view .tr-head .stage'), output, { timeout: 120000 });
const state = (page) => page.evaluate(() => { const s = window.attnscope.store.get(); return { layer: s.layer, head: s.head, step: s.step, playing: s.playing }; });
const stepShown = async (page) => +(await page.textContent('#translation-view .tr-step h3')).match(/^Step (\d+) of/)[1];

/** The page's geometry: what scrolls sideways, the header, the sentence box and the focused view's heatmap (CSS px). */
function geometry(heat) {
  const box = (el) => { const r = el.getBoundingClientRect(); return { top: r.top, bottom: r.bottom, left: r.left, right: r.right, width: r.width, height: r.height }; };
  const sentence = document.getElementById('sentence');
  const h = document.querySelector(heat);
  return {
    scrollWidth: document.documentElement.scrollWidth, innerWidth, innerHeight,
    sentence: { ...box(sentence), hiddenX: sentence.scrollWidth - sentence.clientWidth, hiddenY: sentence.scrollHeight - sentence.clientHeight },
    heat: h && box(h), cell: h && +(h.dataset.cell ?? 0),
  };
}

/** Boxes of the visible parts a presenter sees above the fold, none overlapping another. */
function overlaps(selectors) {
  const boxes = selectors.flatMap((s) => [...document.querySelectorAll(s)]).filter((e) => e.offsetParent || e.getClientRects().length)
    .map((e) => ({ name: e.id || e.className, r: e.getBoundingClientRect() })).filter((b) => b.r.width > 0 && b.r.height > 0);
  const out = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i].r, b = boxes[j].r;
    const x = Math.min(a.right, b.right) - Math.max(a.left, b.left), y = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (x > 1 && y > 1) out.push(`${boxes[i].name} × ${boxes[j].name}`);
  }
  return out;
}
const ENCODER_PARTS = ['#top > *', '#inputs > *', '#views .panel-head > *', '#model-view .grid', '#head-view .view-tools > *', '#head-view .stage', '#head-view .legend', '#lines-view canvas'];
const DATES_PARTS = ['#top > *', '#inputs > *', '#translation-view .tr-output', '#translation-view .tr-side > * > *', '#translation-view .tr-head .stage', '#translation-view .tr-lines canvas'];

test('presenter mode at 1280 × 800 and 1920 × 1080: the head view\'s heatmap fills the screen above the fold, the sentence whole, nothing overlapping', async () => {
  const normal = await open('#e=cpu', SIZES.laptop);
  await encoderDrawn(normal.page);
  const before = await normal.page.evaluate(geometry, '#head-view .heat');
  await normal.page.close();
  for (const size of [SIZES.laptop, SIZES.projector]) {
    const p = await open('#e=cpu&present=1', size);
    const { page } = p;
    await encoderDrawn(page);
    const g = await page.evaluate(geometry, '#head-view .heat');
    const legend = await page.evaluate(() => document.querySelector('#head-view .legend').getBoundingClientRect().bottom);
    assert.ok(g.heat.bottom <= size.height && legend <= size.height, `${size.width}: the heatmap (bottom ${g.heat.bottom}) and its legend (${legend}) end above the fold (${size.height})`);
    assert.ok(g.heat.height >= 0.6 * size.height, `${size.width}: the heatmap fills the screen's height (${g.heat.height} px of ${size.height})`);
    if (size === SIZES.laptop) assert.ok(g.heat.width > before.heat.width, `larger than without presenter mode (${g.heat.width} vs ${before.heat.width} px)`);
    assert.ok(g.cell >= 18, `${size.width}: a row (${g.cell.toFixed(1)} px) is as tall as its 18 px label`);
    assert.ok(g.sentence.hiddenX <= 1 && g.sentence.hiddenY <= 1, `${size.width}: the sentence is shown whole (${g.sentence.hiddenX} px hidden across, ${g.sentence.hiddenY} down)`);
    assert.ok(g.scrollWidth <= size.width, `${size.width}: no sideways scroll (${g.scrollWidth})`);
    assert.deepEqual(await page.evaluate(overlaps, ENCODER_PARTS), [], 'nothing overlaps');
    // controls a presenter does not use are gone; the clicker's keys are said
    for (const id of ['check', 'share', 'mask', 'batch-mode', 'compare-mode']) assert.equal(await page.isVisible(`#${id}`), false, `#${id} collapses`);
    assert.match(await page.textContent('#presenter-keys'), /^PgDn\/→ next layer · PgUp\/← back · Space plays$/);
    await page.screenshot({ path: path.join(ARTIFACTS, `present-default-${size.width}-presenter.png`) });
    // a long sentence wraps: all of it stays in view
    const LONG = 'The animal didn\'t cross the street because it was too tired, and the teacher asked the class which word "it" refers to.';
    await page.fill('#sentence', LONG);
    await encoderDrawn(page, LONG);
    const long = await page.evaluate(geometry, '#head-view .heat');
    assert.ok(long.sentence.hiddenX <= 1 && long.sentence.hiddenY <= 1 && long.sentence.height > g.sentence.height, `${size.width}: a long sentence wraps, whole (${long.sentence.height} px tall)`);
    assert.ok(long.heat.bottom <= size.height, `${size.width}: the heatmap still ends above the fold (${long.heat.bottom})`);
    clean(p.problems);
    await page.close();
  }
});

test('presenter mode on the dates model: the focused head beside the step, every step above the fold at 1280 × 800 and 1920 × 1080', async () => {
  for (const size of [SIZES.laptop, SIZES.projector]) {
    const p = await open(`${DATES}&present=1`, size);
    const { page } = p;
    await translated(page);
    const g = await page.evaluate(geometry, '#translation-view .tr-head .stage');
    const rows = await page.evaluate(() => +document.querySelector('#translation-view .rect-heat').dataset.rows);
    const T = await page.evaluate(() => window.attnscope.result.output_ids.length - 1);
    assert.equal(rows, T, 'every step is a row of the heatmap');
    assert.ok(g.heat.top < size.height * 0.5, `${size.width}: the heatmap starts in the screen's upper half (y = ${g.heat.top})`);
    assert.ok(g.heat.bottom <= size.height, `${size.width}: all ${T} steps are above the fold (bottom ${g.heat.bottom} of ${size.height})`);
    assert.ok(g.heat.height >= 0.45 * size.height, `${size.width}: the heatmap takes the screen (${g.heat.height} px)`);
    assert.ok(g.sentence.hiddenX <= 1 && g.sentence.hiddenY <= 1, `${size.width}: the source is shown whole`);
    assert.ok(g.scrollWidth <= size.width, `${size.width}: no sideways scroll (${g.scrollWidth})`);
    assert.deepEqual(await page.evaluate(overlaps, DATES_PARTS), [], 'nothing overlaps');
    assert.match(await page.textContent('#presenter-keys'), /^PgDn\/→ next step · PgUp\/← back · Space plays$/);
    await page.screenshot({ path: path.join(ARTIFACTS, `present-dates-${size.width}-presenter.png`) });
    clean(p.problems);
    await page.close();
  }
});

test('at 390 px (2× pixels) no page scrolls sideways, normal or presenter, default model or dates model; screenshots at every size', async () => {
  for (const [model, hash] of [['default', '#e=cpu'], ['dates', DATES]]) {
    for (const presenter of [false, true]) {
      for (const [name, size] of Object.entries(SIZES)) {
        if (name !== 'phone' && presenter) continue; // the wide presenter shots are the tests above's
        const p = await open(`${hash}${presenter ? '&present=1' : ''}`, size);
        const { page } = p;
        if (model === 'dates') await translated(page);
        else await encoderDrawn(page);
        const g = await page.evaluate(geometry, model === 'dates' ? '#translation-view .tr-head .stage' : '#head-view .heat');
        assert.ok(g.scrollWidth <= g.innerWidth, `${model}, ${name}${presenter ? ', presenter' : ''}: scrollWidth ${g.scrollWidth} ≤ ${g.innerWidth}`);
        assert.ok(g.heat.right <= g.innerWidth, `${model}, ${name}: the heatmap fits across (right ${g.heat.right})`);
        await page.screenshot({ path: path.join(ARTIFACTS, `present-${model}-${size.width}-${presenter ? 'presenter' : 'normal'}.png`), fullPage: name === 'phone' });
        clean(p.problems);
        await page.close();
      }
    }
  }
});

test('a presentation clicker: PageDown/PageUp and → ← step the decoding, Space plays and stops it, wherever the focus is', async () => {
  const p = await open(`${DATES}&present=1&st=3`, SIZES.laptop);
  const { page } = p;
  await translated(page);
  assert.equal(await stepShown(page), 4);
  const scrollY = await page.evaluate(() => scrollY);
  await page.keyboard.press('PageDown');
  assert.equal(await stepShown(page), 5, 'PageDown: the next step');
  assert.equal(await page.evaluate(() => scrollY), scrollY, 'the page does not scroll');
  await page.keyboard.press('ArrowRight');
  assert.equal(await stepShown(page), 6, '→: the next step');
  await page.keyboard.press('PageUp');
  await page.keyboard.press('ArrowLeft');
  assert.equal(await stepShown(page), 4, 'PageUp, ←: back two steps');
  const { layer, head } = await state(page);
  // after a click on the text around the view (no control focused), the keys still present
  await page.click('#translation-h');
  await page.keyboard.press('PageDown');
  assert.equal(await stepShown(page), 5);
  assert.deepEqual(await state(page).then((s) => [s.layer, s.head]), [layer, head], 'the focused head stays');
  // Space plays from the first step, and stops
  await page.keyboard.press(' ');
  assert.equal((await state(page)).playing, true, 'Space plays');
  assert.equal(await stepShown(page), 1, 'from the first step');
  await page.waitForFunction(() => window.attnscope.store.get().step >= 2, null, { timeout: 5000 });
  await page.keyboard.press(' ');
  const stopped = await state(page);
  assert.equal(stopped.playing, false, 'Space again stops');
  await page.waitForTimeout(900);
  assert.equal((await state(page)).step, stopped.step, 'stopped: the step stays');
  // presenter mode turned on with the mouse: the box lets the focus go, so Space plays, not unticks it
  await page.uncheck('#presenter');
  await page.check('#presenter');
  await page.keyboard.press(' ');
  assert.equal(await page.isChecked('#presenter'), true, 'Space leaves presenter mode on');
  assert.equal((await state(page)).playing, true, 'and plays');
  await page.keyboard.press(' ');
  // typing in the sentence box keeps its keys
  await page.focus('#sentence');
  await page.keyboard.press('End');
  await page.keyboard.press('ArrowLeft');
  await page.keyboard.press(' ');
  assert.equal(await page.inputValue('#sentence'), `${DATE.slice(0, -1)} 8`, 'in the sentence box, ← and Space edit the text');
  assert.equal((await state(page)).playing, false);
  clean(p.problems);
  await page.close();
});

test('a presentation clicker on an encoder: PageDown/PageUp and → ← step through the layers, Space plays the layers', async () => {
  const p = await open('#e=cpu&present=1&l=2&h=4', SIZES.laptop);
  const { page } = p;
  await encoderDrawn(page);
  await page.keyboard.press('PageDown');
  assert.deepEqual(await state(page).then((s) => [s.layer, s.head]), [3, 4], 'PageDown: the next layer, the same head');
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowRight');
  assert.deepEqual(await state(page).then((s) => [s.layer, s.head]), [5, 4], '→: the next layers, up to the last');
  await page.keyboard.press('PageUp');
  await page.keyboard.press('ArrowLeft');
  assert.deepEqual(await state(page).then((s) => [s.layer, s.head]), [3, 4], 'PageUp, ←: back');
  await page.waitForFunction(() => /layer 3, head 4/.test(document.querySelector('#head-view .focus-label').textContent));
  await page.keyboard.press(' ');
  const started = await state(page);
  assert.equal(started.playing, true, 'Space plays the layers');
  assert.equal(started.layer, 0, 'from the first');
  await page.waitForFunction(() => window.attnscope.store.get().layer >= 1, null, { timeout: 5000 });
  await page.keyboard.press(' ');
  assert.equal((await state(page)).playing, false, 'Space stops');
  clean(p.problems);
  await page.close();
});

test('keys act on the view that has the focus, which shows it; elsewhere the arrows scroll the page', async () => {
  const p = await open('#e=cpu&l=1&h=1', SIZES.laptop);
  const { page } = p;
  await encoderDrawn(page);
  // the arrows on the page's body scroll it and leave the layer and head alone
  await page.click('#steps > p.muted');
  await page.evaluate(() => scrollTo(0, 0));
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowDown');
  assert.deepEqual(await state(page).then((s) => [s.layer, s.head]), [1, 1], 'no view has the focus: the layer and head stay');
  await page.waitForFunction(() => scrollY > 0, null, { timeout: 3000 });
  // the model grid, focused: the arrows move its head; it says so, and shows the focus
  await page.evaluate(() => scrollTo(0, 0));
  await page.focus('#sentence');
  let focused = '';
  for (let i = 0; i < 40 && focused !== 'grid'; i++) {
    await page.keyboard.press('Tab');
    focused = await page.evaluate(() => document.activeElement?.className ?? '');
  }
  assert.equal(focused, 'grid');
  const grid = await page.evaluate(() => ({ tab: document.activeElement.tabIndex, label: document.activeElement.getAttribute('aria-label'), outline: getComputedStyle(document.activeElement).outlineStyle }));
  assert.equal(grid.tab, 0);
  assert.match(grid.label, /arrow keys move the focused head/);
  assert.notEqual(grid.outline, 'none', 'the focused grid shows its focus');
  await page.keyboard.press('ArrowRight');
  assert.deepEqual(await state(page).then((s) => [s.layer, s.head]), [1, 2], 'the grid focused: → moves the head');
  clean(p.problems);
  await page.close();

  // the dates model: → after a click on the view's own text steps; after a click on text outside it, nothing moves
  const d = await open(`${DATES}&st=3`, SIZES.laptop);
  await translated(d.page);
  const before = await state(d.page);
  await d.page.click('#translation-view .tr-line');
  await d.page.keyboard.press('ArrowRight');
  assert.equal(await stepShown(d.page), 5, 'a click on the view\'s text focuses the view: → is the next step');
  assert.deepEqual(await state(d.page).then((s) => [s.layer, s.head]), [before.layer, before.head], 'not the next head');
  const view = await d.page.evaluate(() => { const v = document.getElementById('translation-view'); return { active: document.activeElement === v, tab: v.tabIndex, label: v.getAttribute('aria-label') }; });
  assert.deepEqual([view.active, view.tab], [true, 0]);
  assert.match(view.label, /← and → step through the decoding/);
  await d.page.click('#translation > p.muted');
  await d.page.keyboard.press('ArrowRight');
  assert.equal(await stepShown(d.page), 5, 'a click outside the view: → is no step');
  assert.deepEqual(await state(d.page).then((s) => [s.layer, s.head]), [before.layer, before.head], 'and no head');
  // Tab reaches the view, whose focus ring shows
  await d.page.focus('#sentence');
  focused = '';
  for (let i = 0; i < 60 && focused !== 'translation-view'; i++) {
    await d.page.keyboard.press('Tab');
    focused = await d.page.evaluate(() => document.activeElement?.id ?? '');
  }
  assert.equal(focused, 'translation-view', 'the translation view is reachable with Tab');
  assert.notEqual(await d.page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle), 'none', 'and shows its focus');
  clean(d.problems);
  await d.page.close();
});

test('nothing jumps: "check" answering keeps the header\'s height, selecting a row keeps the heatmap in place', async () => {
  for (const size of [SIZES.laptop, SIZES.phone]) {
    const p = await open('#e=cpu', size);
    const { page } = p;
    await encoderDrawn(page);
    const box = (sel) => page.evaluate((s) => { const r = document.querySelector(s).getBoundingClientRect(); return { top: r.top + scrollY, left: r.left, width: r.width, height: r.height }; }, sel);
    const header = await box('#top'), heat = await box('#head-view .heat');
    await page.click('#check');
    await page.waitForFunction(() => /PyTorch|failed/.test(document.getElementById('check-result').textContent), null, { timeout: 120000 });
    const text = await page.textContent('#check-result');
    assert.equal(await page.getAttribute('#check-result', 'title'), text, 'the whole result is in its title');
    assert.deepEqual(await box('#top'), header, `${size.width}: the header keeps its box after "check" (${text})`);
    assert.deepEqual(await box('#head-view .heat'), heat, `${size.width}: the heatmap stays where it was`);
    // select a row by its label: the heatmap does not move
    await page.locator('#head-view .stage').scrollIntoViewIfNeeded(); // a phone's is below the fold
    const g = await page.evaluate(() => ({ ...document.querySelector('#head-view .heat').dataset }));
    const overlay = await page.locator('#head-view .overlay').boundingBox();
    await page.mouse.click(overlay.x + +g.x0 / 2, overlay.y + +g.y0 + 2.5 * +g.cell);
    await page.waitForFunction(() => !document.querySelector('#head-view .sel-strip').hidden);
    await page.waitForFunction(() => window.attnscope.store.get().sel.length === 1);
    assert.deepEqual(await box('#head-view .heat'), heat, `${size.width}: selecting a row keeps the heatmap in place`);
    assert.equal(await page.isVisible('#head-view .sel-clear'), true, 'the selection\'s tools show');
    await page.screenshot({ path: path.join(ARTIFACTS, `present-selected-${size.width}.png`) });
    clean(p.problems);
    await page.close();
  }
});
