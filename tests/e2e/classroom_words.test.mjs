// Issue 29, "Words on the page", "Layout and contrast" and "What must hold" (axe), end to end:
// every heatmap names its axes, special tokens and the summary choices explain themselves on
// hover and focus, "On this page:" finds the sections below the fold, the heads table's text
// meets WCAG AA, the inside-the-layer panels export as SVG and PNG, and axe-core finds no
// serious or critical violation on the page, the translation view, presenter mode and the
// element. Screenshots in test-artifacts/words-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { readFileSync, existsSync } from 'node:fs';
import { startServer, launch, openPage, ready, ARTIFACTS, ROOT } from './harness.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launch({ webgpu: false }); });
after(async () => { await browser?.close(); server?.stop(); });

const DATES = 'model=models/dates/';

async function open(hash, size = {}) {
  const p = await openPage(browser, `${server.url}#e=cpu&${hash}`, { width: 1280, height: 800, ...size });
  assert.equal(await ready(p.page), null, 'the model loads');
  return p;
}

const clean = ({ problems }) => assert.deepEqual(problems, [], 'no console errors or uncaught exceptions');

/** Waits until the head view and the step-by-step panels have drawn the current run. */
const drawn = (page) => page.waitForFunction(() => {
  const heat = document.querySelector('#head-view canvas.heat'), steps = document.querySelectorAll('#steps-view figure canvas');
  return heat?.getAttribute('aria-label') && steps.length === 4 && [...steps].every((c) => c.dataset.n);
}, null, { timeout: 60000 });

/** Moves the mouse over cell (q, k) of a matrix canvas whose dataset holds its geometry (x0, y0, cell, q0, k0). */
async function hoverCell(page, selector, q, k) {
  const pt = await page.evaluate(([sel, q, k]) => {
    const c = document.querySelector(sel);
    c.scrollIntoView({ block: 'center' });
    const d = c.dataset, r = c.getBoundingClientRect();
    return { x: r.left + +d.x0 + (k - +d.k0 + 0.5) * +d.cell, y: r.top + +d.y0 + (q - +d.q0 + 0.5) * +d.cell };
  }, [selector, q, k]);
  await page.mouse.move(pt.x, pt.y);
}

test('every heatmap names its axes, special tokens explain themselves, "On this page:" finds the steps', async () => {
  const p = await open('');
  const { page } = p;
  await drawn(page);
  // the head view: a caption, its canvas's text alternative, and the corner of the canvas itself
  assert.equal(await page.textContent('#head-view .axes'), 'queries ↓ · keys →');
  assert.match(await page.getAttribute('#head-view .axes', 'title'), /Each row is where one query looks/);
  assert.match(await page.getAttribute('#head-view canvas.heat', 'aria-label'), /queries are rows, keys columns/);
  const cornerInk = await page.evaluate(() => {
    const c = document.querySelector('#head-view canvas.heat'), d = c.dataset, r = c.width / c.clientWidth;
    const x0 = +d.x0, y0 = +d.y0;
    const px = c.getContext('2d').getImageData(Math.round((x0 - 56) * r), Math.round((y0 - 30) * r), Math.round(52 * r), Math.round(26 * r)).data;
    let n = 0;
    for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 0 && px[i] < 200) n++;
    return n;
  });
  assert.ok(cornerInk > 50, `the canvas's corner names its axes ("keys →", "queries ↓"): ${cornerInk} inked pixels`);
  // the model view is an ARIA grid of rows whose active cell follows the focused head
  const grid = await page.evaluate(() => {
    const g = document.querySelector('#model-view .grid'), a = document.getElementById(g.getAttribute('aria-activedescendant'));
    return { rows: g.querySelectorAll(':scope > [role=row]').length, active: a && [a.dataset.layer, a.dataset.head, a.getAttribute('aria-selected')] };
  });
  assert.deepEqual(grid, { rows: 7, active: ['3', '1', 'true'] });
  // the steps: one caption for the four panels, and each panel's text alternative
  assert.equal(await page.textContent('#steps-view .axes'), 'queries ↓ · keys →');
  for (const label of await page.$$eval('#steps-view figure canvas', (cs) => cs.map((c) => c.getAttribute('aria-label')))) {
    assert.match(label, /queries are rows, keys columns/);
  }
  // [CLS] and [SEP] explain themselves: on a cell, on a row label, by the keyboard, in the steps
  const tokens = await page.evaluate(() => window.attnscope.result.tokens);
  assert.equal(tokens[0], '[CLS]');
  await hoverCell(page, '#head-view canvas.heat', 0, 1);
  await page.waitForSelector('#head-view .tooltip:not([hidden])');
  assert.match(await page.textContent('#head-view .tooltip .tip-note'), /^\[CLS\]: a token the tokenizer adds at the start; its final vector stands for the whole sentence/);
  const T = tokens.length;
  const label = await page.evaluate((q) => {
    const c = document.querySelector('#head-view canvas.heat'), d = c.dataset, r = c.getBoundingClientRect();
    return { x: r.left + +d.x0 / 2, y: r.top + +d.y0 + (q + 0.5) * +d.cell };
  }, T - 1);
  await page.mouse.move(label.x, label.y);
  await page.waitForFunction(() => /click to keep only its row/.test(document.querySelector('#head-view .tooltip').textContent));
  assert.match(await page.textContent('#head-view .tooltip .tip-note'), /^\[SEP\]: a token the tokenizer adds at the end of each sentence/);
  await page.mouse.move(5, 5);
  await page.focus('#head-view canvas.overlay');
  await page.keyboard.press('ArrowRight');
  assert.match(await page.textContent('#head-view .readout'), /\[CLS\] → the: .*\n\[CLS\]: a token the tokenizer adds at the start/);
  await hoverCell(page, '#steps-view figure[data-step=probs] canvas', 2, T - 1);
  await page.waitForSelector('#steps-view .tooltip:not([hidden])');
  assert.match(await page.textContent('#steps-view .tooltip .tip-note'), /^\[SEP\]:/);
  // a plain word has no note
  await hoverCell(page, '#head-view canvas.heat', 2, 3);
  await page.waitForFunction(() => !/\[/.test(document.querySelector('#head-view .tooltip').textContent));
  assert.equal(await page.$('#head-view .tooltip .tip-note'), null);
  // the summary choices say what they do (a select's title is its accessible description)
  assert.match(await page.getAttribute('#metric', 'title'), /^Colour the model view by one number a head.*Now: each head's own attention pattern/);
  assert.match(await page.getAttribute('#scale', 'title'), /"0–1 for every head" uses one scale/);
  assert.equal(await page.evaluate(() => document.getElementById('metric').closest('label').title), await page.getAttribute('#metric', 'title'));
  assert.ok(await page.$$eval('#metric option', (os) => os.every((o) => o.title.length > 20)), 'every "heads by" choice says what it shows');
  await page.selectOption('#metric', 'entropy');
  await page.waitForFunction(() => /metric=entropy/.test(location.hash));
  assert.match(await page.getAttribute('#metric', 'title'), /Now: how spread out each head's attention is/);
  assert.match(await page.getAttribute('#table-details summary', 'title'), /\[CLS\]: .*\n\[SEP\]: /);
  // "On this page:" in the first screen, and its "Step by step" scrolls there, keeping the view
  await page.evaluate(() => scrollTo(0, 0));
  const nav = await page.evaluate(() => {
    const a = [...document.querySelectorAll('#page-nav a')].filter((x) => x.offsetParent);
    return { links: a.map((x) => x.textContent), bottom: document.getElementById('page-nav').getBoundingClientRect().bottom, steps: document.getElementById('steps').getBoundingClientRect().top };
  });
  assert.deepEqual(nav.links, ['Model view', 'Head view', 'Step by step', 'Inside the encoder', 'Cross-attention', 'Reading the heads']);
  assert.ok(nav.bottom < 200, `the links are near the top (${nav.bottom} px)`);
  assert.ok(nav.steps > 400, `the steps start low on the first screen (${nav.steps} px)`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'words-1280.png') });
  const hash = await page.evaluate(() => location.hash);
  await page.click('#page-nav a[href="#steps"]');
  await page.waitForFunction(() => Math.abs(document.getElementById('steps').getBoundingClientRect().top) < 40, null, { timeout: 5000 });
  assert.equal(await page.evaluate(() => location.hash), hash, 'the link keeps the view in the hash');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'steps-h', 'the keyboard moves there too');
  clean(p);
  await page.close();
  // hidden in an embed
  const e = await open('embed=head');
  await e.page.waitForFunction(() => document.querySelector('#head-view canvas.heat')?.getAttribute('aria-label'), null, { timeout: 60000 });
  assert.equal(await e.page.isVisible('#page-nav'), false, 'an embed has no "On this page:"');
  clean(e);
  await e.page.close();
});

test('the rollout and the translation view name their axes; a translation\'s special tokens explain themselves', async () => {
  const r = await open('rollout=1');
  await r.page.waitForFunction(() => document.querySelector('#rollout-view [data-map=rollout] canvas')?.getAttribute('aria-label'), null, { timeout: 60000 });
  assert.equal(await r.page.textContent('#rollout-view .axes'), 'queries ↓ · keys →');
  assert.match(await r.page.getAttribute('#rollout-view [data-map=rollout] canvas', 'aria-label'), /queries are rows, keys columns/);
  clean(r);
  await r.page.close();
  const p = await open(`${DATES}&s=${encodeURIComponent('9 May 2018')}&a=cross`);
  const { page } = p;
  await page.waitForSelector('.tr-head .axes');
  assert.equal(await page.textContent('.tr-head .axes'), 'decoder steps (queries) ↓ · source tokens (keys) →');
  assert.match(await page.getAttribute('.tr-head canvas.heat', 'aria-label'), /rows: decoder steps \(queries\), columns: source tokens \(keys\)/);
  // the source's last token is </s>: its column explains it
  const cols = await page.evaluate(() => window.attnscope.result.source_tokens);
  assert.equal(cols.at(-1), '</s>');
  const pt = await page.evaluate((k) => {
    const v = document.querySelector('.tr-head .tr-canvas');
    v.scrollIntoView({ block: 'center' });
    const g = v._view.g, rc = v.querySelector('.overlay').getBoundingClientRect();
    return { x: rc.left + g.x0 + (k + 0.5) * g.cell, y: rc.top + g.y0 + 0.5 * g.cell };
  }, cols.length - 1);
  await page.mouse.move(pt.x, pt.y);
  await page.waitForSelector('.tr-head .tooltip:not([hidden])');
  assert.match(await page.textContent('.tr-head .tooltip .tip-note'), /<\/s>: the end token/);
  // "On this page:" lists a translation model's own sections
  assert.deepEqual(await page.evaluate(() => [...document.querySelectorAll('#page-nav a')].filter((x) => x.offsetParent).map((x) => x.textContent)), ['Translation', 'Inside the decoder']);
  assert.equal(await page.evaluate(() => getComputedStyle(document.querySelector('#page-nav li.dec'), '::before').content), 'none', 'no separator before the first link');
  // the decoder's cross-attention panel names its axes
  await page.evaluate(() => { const d = document.querySelector('details[data-panel=dec-cross]'); d.open = true; d.scrollIntoView(); });
  await page.waitForFunction(() => document.querySelectorAll('#inside-dec-cross figure').length === 6, null, { timeout: 60000 });
  assert.match(await page.textContent('#inside-dec-cross'), /softmax over the source: \d+ steps \(queries ↓\) × \d+ source tokens \(keys →\)/);
  clean(p);
  await page.close();
});

test('the heads table\'s text meets WCAG AA on every cell, and so does every scale\'s ink', async () => {
  const sizes = [[1280, 800, 1, 'words-heads-1280.png'], [390, 844, 2, 'words-heads-390.png']];
  for (const [width, height, scale, shot] of sizes) {
    const p = await open('table=1&metric=to_sep', { width, height, scale });
    const { page } = p;
    await page.waitForFunction(() => document.querySelectorAll('#heads-view tbody tr').length === 72, null, { timeout: 60000 });
    const worst = await page.evaluate(async () => {
      const { contrastRatio } = await import('/web/colour.js');
      const rgb = (s) => s.match(/\d+/g).slice(0, 3).map(Number);
      let min = Infinity, at = '';
      for (const td of document.querySelectorAll('#heads-view td[data-metric]')) {
        const cs = getComputedStyle(td);
        const c = contrastRatio(rgb(cs.color), rgb(cs.backgroundColor));
        if (c < min) { min = c; at = `${td.dataset.metric} ${td.textContent}: ${cs.color} on ${cs.backgroundColor}`; }
      }
      return { min, at };
    });
    assert.ok(worst.min >= 4.5, `every cell's text contrasts at least 4.5 : 1 (worst ${worst.min.toFixed(2)}, ${worst.at})`);
    await page.locator('#heads-view').scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(ARTIFACTS, shot) });
    clean(p);
    await page.close();
  }
  // the one helper every coloured cell's text uses: AA on every step of every scale
  const p = await open('');
  const scales = await p.page.evaluate(async () => {
    const { scale, metricScale, inkOn, contrastRatio } = await import('/web/colour.js');
    const hex = (h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16));
    return Object.fromEntries(Object.entries({ probability: scale('probability'), score: scale('score'), metric: metricScale(0, 1, 'm') })
      .map(([name, sc]) => [name, Math.min(...sc.table.map((c) => contrastRatio(c, hex(inkOn(c)))))]));
  });
  for (const [name, min] of Object.entries(scales)) assert.ok(min >= 4.5, `${name}: the ink contrasts ${min.toFixed(2)} : 1 at worst`);
  clean(p);
  await p.page.close();
});

/** A download's name and bytes. */
async function download(page, click) {
  const [d] = await Promise.all([page.waitForEvent('download'), click()]);
  const file = path.join(ARTIFACTS, d.suggestedFilename());
  await d.saveAs(file);
  return { name: d.suggestedFilename(), bytes: readFileSync(file) };
}

/** What an exported panel's SVG holds: its size, pictures and texts. */
const parseSVG = (page, text) => page.evaluate((t) => {
  const doc = new DOMParser().parseFromString(t, 'image/svg+xml');
  if (doc.querySelector('parsererror')) return { error: doc.querySelector('parsererror').textContent };
  const svg = doc.documentElement;
  return {
    w: +svg.getAttribute('width'), h: +svg.getAttribute('height'),
    images: [...doc.querySelectorAll('image')].map((i) => i.getAttribute('href').slice(0, 22)),
    text: [...doc.querySelectorAll('text')].map((x) => x.textContent).join(' '),
  };
}, text);

test('the inside-the-layer panels export as SVG and PNG, as drawn', async () => {
  const p = await open('inside=qkv&l=2&h=3');
  const { page } = p;
  await page.waitForFunction(() => document.getElementById('inside-qkv').dataset.drawn === String(window.attnscope.store.get().run?.id), null, { timeout: 60000 });
  const want = await page.evaluate(() => ({
    canvases: [...document.querySelectorAll('#inside-qkv canvas')].filter((c) => c.getBoundingClientRect().width > 0).length,
    w: Math.ceil(document.getElementById('inside-qkv').getBoundingClientRect().width),
    h: Math.ceil(document.getElementById('inside-qkv').getBoundingClientRect().height),
  }));
  const svg = await download(page, () => page.click('.panel-exports[data-panel=qkv] .export[data-format=svg]'));
  assert.equal(svg.name, 'attnscope-inside-qkv-L2H3.svg');
  const got = await parseSVG(page, svg.bytes.toString());
  assert.equal(got.error, undefined, `the SVG parses: ${got.error}`);
  assert.deepEqual([got.w, got.h], [want.w, want.h], 'the panel\'s size');
  assert.equal(got.images.length, want.canvases, 'every canvas as a picture');
  assert.ok(got.images.every((x) => x === 'data:image/png;base64,'), 'PNG pictures inside');
  for (const words of ['Q = x·W_Q', 'K = x·W_K', 'V = x·W_V', 'Q split into heads', 'Layer 2 projects each token']) assert.ok(got.text.includes(words), `the text "${words}"`);
  const png = await download(page, () => page.click('.panel-exports[data-panel=qkv] .export[data-format=png]'));
  assert.equal(png.name, 'attnscope-inside-qkv-L2H3.png');
  assert.equal(png.bytes.subarray(1, 4).toString(), 'PNG');
  assert.deepEqual([png.bytes.readUInt32BE(16), png.bytes.readUInt32BE(20)], [2 * want.w, 2 * want.h], 'the PNG is the SVG at 2×');
  // the PNG is not blank: the pictures were drawn into it
  const inked = await page.evaluate(async (b64) => {
    const img = new Image();
    img.src = `data:image/png;base64,${b64}`;
    await img.decode();
    const c = new OffscreenCanvas(img.width, img.height), ctx = c.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, img.width, img.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - d[i + 2]) > 40) n++; // red or blue cells
    return n / (d.length / 4);
  }, png.bytes.toString('base64'));
  assert.ok(inked > 0.05, `the PNG shows the coloured matrices (${(inked * 100).toFixed(1)} % coloured pixels)`);
  clean(p);
  await page.close();
  // a decoder panel, in the translation view
  const d = await open(`${DATES}&s=${encodeURIComponent('9 May 2018')}&inside=dec-cross`);
  await d.page.waitForFunction(() => document.querySelectorAll('#inside-dec-cross figure canvas').length === 6, null, { timeout: 60000 });
  const dsvg = await download(d.page, () => d.page.click('.panel-exports[data-panel=dec-cross] .export[data-format=svg]'));
  const dgot = await parseSVG(d.page, dsvg.bytes.toString());
  assert.equal(dgot.images.length, 6, 'the six matrices');
  assert.ok(dgot.text.includes('softmax over the source'), 'their captions');
  clean(d);
  await d.page.close();
});

test('screenshots: the head view with its axes at 1280 × 800 and 390 × 844', async () => {
  for (const [width, height, scale] of [[1280, 800, 1], [390, 844, 2]]) {
    const p = await open('', { width, height, scale });
    await drawn(p.page);
    await p.page.locator('#head-panel').scrollIntoViewIfNeeded();
    await hoverCell(p.page, '#head-view canvas.heat', 0, 2);
    await p.page.waitForSelector('#head-view .tooltip:not([hidden])');
    await p.page.screenshot({ path: path.join(ARTIFACTS, `words-head-${width}.png`) });
    const scroll = await p.page.evaluate(() => document.documentElement.scrollWidth - innerWidth);
    assert.ok(scroll <= 0, `no sideways scroll (${scroll} px)`);
    clean(p);
    await p.page.close();
  }
});

// ---------- axe-core: no serious or critical violation ----------
const AXE = readFileSync(path.join(ROOT, 'tests/e2e/node_modules/axe-core/axe.min.js'), 'utf8');

/** axe-core's serious and critical violations on `page` (shadow roots included), one line each. */
async function axeViolations(page) {
  await page.evaluate(AXE); // through the debugger: the page's Content Security Policy does not apply
  const found = await page.evaluate(async () => (await window.axe.run(document, { resultTypes: ['violations'] })).violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.help}: ${v.nodes.slice(0, 4).map((n) => n.target.join(' ')).join(' | ')}${v.nodes.length > 4 ? ` … ${v.nodes.length} in all` : ''}`));
  return found;
}

test('axe-core finds no serious or critical violation: the page, the translation view, presenter mode, the element', async () => {
  const pages = [
    ['the default page', ''],
    ['the translation view', DATES],
    ['presenter mode', 'present=1'],
  ];
  const report = [];
  for (const [name, hash] of pages) {
    const p = await open(hash);
    await p.page.waitForFunction(() => window.attnscope.renders > 0 || document.querySelector('.tr-head canvas'), null, { timeout: 60000 });
    await p.page.waitForTimeout(500);
    for (const v of await axeViolations(p.page)) report.push(`${name}: ${v}`);
    await p.page.close();
  }
  // the element, in a page of its own on the app's origin
  const p = await openPage(browser, null, { width: 1280, height: 800 });
  await p.page.route('**/axe-element.html', (r) => r.fulfill({
    contentType: 'text/html',
    body: `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>an element</title><script type="module" src="/attn-scope.js"></script></head>
<body><main><h1>A post</h1><attn-scope id="coref" sentence="The animal didn't cross the street because it was too tired." view="head" layer="3" head="1" editable></attn-scope>
<attn-scope id="dates" model="/models/dates/" sentence="Sunday, September 9, 2018" step="6"></attn-scope></main></body></html>`,
  }));
  await p.page.goto(`${server.url}axe-element.html`);
  for (const id of ['coref', 'dates']) await p.page.locator(`#${id}`).scrollIntoViewIfNeeded(); // each renders once seen
  await p.page.waitForFunction(() => document.querySelector('#coref').result && document.querySelector('#dates').result, null, { timeout: 120000 });
  await p.page.waitForTimeout(500);
  for (const v of await axeViolations(p.page)) report.push(`the element: ${v}`);
  await p.page.close();
  assert.deepEqual(report, [], `axe-core's serious and critical violations:\n${report.join('\n')}`);
});

// Issue 50, "What must hold": SmolLM2-135M-Instruct (the page's built-in model that writes, index.html's
// choice) writing a chat answer. The generation view with every panel a class would open (the
// heads table, the rollout, every "Inside the decoder" panel this model has: RoPE and the KV
// cache among them, each following the focused step), and presenter mode, each at a laptop's
// size and a phone's.
const SMOLLM2 = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';
const PROMPT = 'Explain attention in one sentence.';
const LLAMA_PANELS = ['embeddings', 'qkv', 'rope', 'cache', 'context', 'scale', 'residual', 'ffn', 'stack'];

test('axe-core finds no serious or critical violation with SmolLM2 writing: the generation view with every panel open, and presenter mode, at 1280 × 800 and 390 × 844', async () => {
  assert.ok(existsSync(path.join(ROOT, SMOLLM2)), `${SMOLLM2} is missing: scripts/setup.sh fetches it`);
  const model = `model=${encodeURIComponent(SMOLLM2)}&s=${encodeURIComponent(PROMPT)}&chat=1`;
  const report = [];
  for (const [width, height] of [[1280, 800], [390, 844]]) {
    // the page: Generate clicked, as a teacher would
    const p = await open(`${model}&table=1&rollout=1&inside=${LLAMA_PANELS.join(',')}`, { width, height });
    await p.page.waitForFunction((t) => window.attnscope.result?.text === t && window.attnscope.store.get().rendered, PROMPT, { timeout: 120000 });
    await p.page.fill('#gen-max', '16');
    await p.page.click('#gen-go');
    await p.page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 16 && !window.attnscope.result.running, null, { timeout: 120000 });
    // every open panel drawn for the generation's last step (the rope and cache panels among them)
    await p.page.waitForFunction(() => {
      const open = [...document.querySelectorAll('#inside details[open]:not([hidden]) > .view')];
      return open.length >= 9 && open.every((v) => v.dataset.drawn) && document.querySelectorAll('#heads-view tbody tr').length > 0
        && /step 16 of 16/.test(document.querySelector('#inside-cache').textContent);
    }, null, { timeout: 120000 });
    await p.page.waitForTimeout(500);
    clean(p); // (before axe-core, whose inline styles the page's Content Security Policy refuses, with a console error)
    for (const v of await axeViolations(p.page)) report.push(`the generation view, ${width} × ${height}: ${v}`);
    await p.page.close();
    // presenter mode with a generation (a link's gen=16)
    const q = await open(`${model}&gen=16&present=1`, { width, height });
    await q.page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 16 && !window.attnscope.result.running, null, { timeout: 120000 });
    await q.page.waitForFunction(() => document.querySelector('#head-view canvas.heat')?.getAttribute('aria-label'), null, { timeout: 60000 });
    await q.page.waitForTimeout(500);
    clean(q);
    for (const v of await axeViolations(q.page)) report.push(`presenter mode, ${width} × ${height}: ${v}`);
    await q.page.close();
  }
  assert.deepEqual(report, [], `axe-core's serious and critical violations:\n${report.join('\n')}`);
});
