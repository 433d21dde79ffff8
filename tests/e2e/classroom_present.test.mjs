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
    const rows = await page.evaluate(() => +document.querySelector('#translation-view .tr-head .heat').dataset.nq);
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
  // Space plays from the step shown, and stops
  await page.keyboard.press(' ');
  assert.equal((await state(page)).playing, true, 'Space plays');
  assert.equal(await stepShown(page), 5, 'from the step shown');
  await page.waitForFunction(() => window.attnscope.store.get().step >= 5, null, { timeout: 5000 });
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
  assert.equal(started.layer, 3, 'from the layer shown');
  await page.waitForFunction(() => window.attnscope.store.get().layer >= 4, null, { timeout: 5000 });
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

/** Clicks `selector` in the translation view where it is on screen (scrolled to the top when it is there) and
 *  waits for `done`; returns the page's scrollY just before the click and after it, and whether the view kept the focus. */
async function clickInPlace(page, selector, done) {
  await page.evaluate((sel) => {
    scrollTo(0, 0);
    const r = document.querySelector(sel).getBoundingClientRect();
    if (r.bottom > innerHeight) scrollBy(0, r.bottom - innerHeight + 20); // so the click itself does not scroll
  }, `#translation-view ${selector}`);
  const before = await page.evaluate(() => scrollY);
  await page.click(`#translation-view ${selector}`);
  await page.waitForFunction(done, null, { timeout: 10000 });
  return { before, after: await page.evaluate(() => scrollY), focused: await page.evaluate(() => document.getElementById('translation-view').contains(document.activeElement)) };
}

test('the dates model at 1280 and 1920, normal and presenter: an attention tab, an output token or play moves the focus to the view without scrolling the page', async () => {
  const pressed = (attn) => `() => document.querySelector('#translation-view .tr-attn[data-attn="${attn}"]')?.getAttribute('aria-pressed') === 'true'`;
  const clicks = [
    ['.tr-attn[data-attn="decoder"]', pressed('decoder')],
    ['.tr-attn[data-attn="encoder"]', pressed('encoder')],
    ['.tr-attn[data-attn="cross"]', pressed('cross')],
    ['.tr-token:nth-of-type(3)', '() => window.attnscope.store.get().step === 2'],
    ['button[aria-label^="play"]', '() => window.attnscope.store.get().playing'],
    ['button[aria-label="stop"]', '() => !window.attnscope.store.get().playing'],
  ];
  for (const size of [SIZES.laptop, SIZES.projector]) {
    for (const presenter of [false, true]) {
      const p = await open(`${DATES}${presenter ? '&present=1' : ''}`, size);
      const { page } = p;
      await translated(page);
      for (const [selector, done] of clicks) {
        const got = await clickInPlace(page, selector, done);
        assert.equal(got.after, got.before, `${size.width}${presenter ? ', presenter' : ''}: a click on ${selector} keeps the page at scrollY ${got.before} (got ${got.after})`);
        assert.equal(got.focused, true, `${size.width}: after ${selector} the keyboard is in the translation view`);
      }
      await page.evaluate(() => scrollTo(0, 0));
      assert.equal(await page.isVisible('#top'), true);
      await page.screenshot({ path: path.join(ARTIFACTS, `present-clicked-${size.width}-${presenter ? 'presenter' : 'normal'}.png`) });
      clean(p.problems);
      await page.close();
    }
  }
});

test('presenter mode: Space plays from the step shown after a mouse click on a button, and presses a button only the keyboard focused', async () => {
  const p = await open(`${DATES}&present=1&st=3`, SIZES.laptop);
  const { page } = p;
  await translated(page);
  const T = await page.evaluate(() => window.attnscope.result.output_ids.length - 1);
  await page.click('#translation-view button[aria-label="next step"]');
  assert.equal(await stepShown(page), 5, 'the click steps');
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute('aria-label')), 'next step', 'the clicked button keeps the focus');
  await page.keyboard.press(' ');
  assert.equal((await state(page)).playing, true, 'Space after the click plays, not presses "step →" again');
  assert.equal(await stepShown(page), 5, 'from the step shown');
  await page.waitForFunction(() => window.attnscope.store.get().step >= 5, null, { timeout: 5000 });
  await page.keyboard.press(' ');
  const stopped = await state(page);
  assert.equal(stopped.playing, false, 'Space again stops');
  // a button the keyboard focused (Tab) keeps its Space
  await page.focus('#translation-view .tr-slider');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute('aria-label')), 'next step');
  await page.keyboard.press(' ');
  assert.equal(await stepShown(page), stopped.step + 2, 'Space on the Tab-focused "step →" presses it');
  assert.equal((await state(page)).playing, false, 'and does not play');
  // at the last step, Space plays from the first
  await page.locator('#translation-view .tr-slider').fill(String(T));
  assert.equal(await stepShown(page), T);
  await page.click('#translation-h');
  await page.keyboard.press(' ');
  assert.equal((await state(page)).playing, true);
  assert.equal(await stepShown(page), 1, 'at the last step, play starts from the first');
  await page.keyboard.press(' ');
  clean(p.problems);
  await page.close();
});

test('the head view\'s arrow keys show the cursor\'s cell in the tooltip a hover shows, beside the cell, through a zoom; Tab away hides it', async () => {
  const p = await open('#e=cpu&l=1&h=1', SIZES.laptop);
  const { page } = p;
  await encoderDrawn(page);
  await page.locator('#head-view .stage').scrollIntoViewIfNeeded();
  await page.focus('#head-view .overlay');
  /** The tooltip (its line, its box) and the cursor's cell's box on screen. */
  const shown = () => page.evaluate(() => {
    const v = document.getElementById('head-view'), tip = v.querySelector('.tooltip'), g = v._view.g, c = v._view.cursor;
    const o = v.querySelector('.overlay').getBoundingClientRect(), t = tip.getBoundingClientRect();
    const x = o.left + g.x0 + (c.k - g.k0) * g.cell, y = o.top + g.y0 + (c.q - g.q0) * g.cell;
    return { hidden: tip.hidden, line: tip.firstChild?.textContent, heard: v.querySelector('.readout').textContent.split('\n')[0], n: g.n,
      tip: { left: t.left, top: t.top, right: t.right, bottom: t.bottom }, cell: { left: x, top: y, right: x + g.cell, bottom: y + g.cell } };
  });
  const beside = ({ tip, cell }) => {
    const dx = Math.max(tip.left - cell.right, cell.left - tip.right, 0), dy = Math.max(tip.top - cell.bottom, cell.top - tip.bottom, 0);
    return dx > 0 && dy > 0 && Math.hypot(dx, dy) < 24; // off the cell and its crosshair's lines, at its corner
  };
  for (const key of ['ArrowRight', 'ArrowDown', 'ArrowDown']) await page.keyboard.press(key);
  let got = await shown();
  assert.equal(got.hidden, false, 'the keys show the tooltip');
  assert.match(got.line, / → .+: \d\.\d{4}/);
  assert.equal(got.line, got.heard, 'the same line the screen reader hears');
  assert.ok(beside(got), `the tooltip ${JSON.stringify(got.tip)} at the cell ${JSON.stringify(got.cell)}`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'present-head-keyboard-tip.png') });
  await page.keyboard.press('ArrowRight');
  const next = await shown();
  assert.notEqual(next.line, got.line, 'it follows the cursor');
  assert.ok(beside(next));
  // zoomed in, the tooltip moves with the cell
  await page.keyboard.press('+');
  await page.waitForFunction((n) => +document.querySelector('#head-view .heat').dataset.n < n, got.n, { timeout: 10000 });
  got = await shown();
  assert.equal(got.hidden, false, 'shown after the zoom');
  assert.equal(got.line, next.line);
  assert.ok(beside(got), `beside the zoomed cell ${JSON.stringify(got.cell)}`);
  await page.keyboard.press('Tab');
  assert.equal((await shown()).hidden, true, 'the focus gone, the tooltip goes');
  clean(p.problems);
  await page.close();
});

/** The share of each side of `selector`'s box (left, right, top, bottom) with the focus ring's colour
 *  (--focus, #f59e0b) within 6 px of it, read from a screenshot of the viewport (1 CSS px a pixel). */
async function ringSides(page, selector) {
  await page.evaluate((sel) => document.querySelector(sel).scrollIntoView({ block: 'center' }), selector);
  const box = await page.locator(selector).boundingBox();
  const png = await page.screenshot();
  return page.evaluate(async ([b64, b]) => {
    const img = new Image();
    img.src = `data:image/png;base64,${b64}`;
    await img.decode();
    const c = document.createElement('canvas');
    [c.width, c.height] = [img.width, img.height];
    const ctx = c.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    const ring = (x, y) => { const i = 4 * (y * c.width + x); return Math.abs(d[i] - 245) < 24 && Math.abs(d[i + 1] - 158) < 24 && d[i + 2] < 60; };
    const [l, t, r, btm] = [b.x, b.y, b.x + b.width, b.y + b.height].map(Math.round);
    const side = (along, across) => { // the share of points along a side with a ring pixel across it
      let hit = 0;
      for (const a of along) if (across(a).some(([x, y]) => ring(x, y))) hit++;
      return hit / along.length;
    };
    const range = (a, b) => Array.from({ length: b - a }, (_, i) => a + i);
    const band = (e) => range(e - 6, e + 7);
    return {
      left: side(range(t + 8, btm - 8), (y) => band(l).map((x) => [x, y])),
      right: side(range(t + 8, btm - 8), (y) => band(r - 1).map((x) => [x, y])),
      top: side(range(l + 8, r - 8), (x) => band(t).map((y) => [x, y])),
      bottom: side(range(l + 8, r - 8), (x) => band(btm - 1).map((y) => [x, y])),
    };
  }, [png.toString('base64'), box]);
}

test('the translation view\'s heatmap, focused with Tab, shows its focus ring on all four sides', async () => {
  for (const [size, presenter] of [[SIZES.laptop, false], [SIZES.projector, true]]) {
    const p = await open(`${DATES}${presenter ? '&present=1' : ''}`, size);
    const { page } = p;
    await translated(page);
    const heat = '#translation-view .tr-head .overlay';
    await page.focus('#translation-view .tr-attn');
    let found = false;
    for (let i = 0; i < 30 && !found; i++) {
      await page.keyboard.press('Tab');
      found = await page.evaluate((sel) => document.activeElement === document.querySelector(sel), heat);
    }
    assert.equal(found, true, 'Tab reaches the heatmap');
    assert.equal(await page.evaluate(() => document.activeElement.matches(':focus-visible')), true);
    const sides = await ringSides(page, heat);
    for (const [name, share] of Object.entries(sides)) assert.ok(share > 0.95, `${size.width}: the ring shows along the ${name} side (${(100 * share).toFixed(0)} %)`);
    await page.screenshot({ path: path.join(ARTIFACTS, `present-dates-heat-focus-${size.width}-${presenter ? 'presenter' : 'normal'}.png`) });
    clean(p.problems);
    await page.close();
  }
});
