// Issue 29, "Ready for a class": a phone's touch (a tap shows a cell's value, the focused head
// knocks out by a button, controls a finger's size), compare mode's two panes each its own
// sentence, the share dialog's snippets pasted into a page on another site, and embeds that show
// their view alone (a failed element its error alone). Screenshots in test-artifacts/share-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startServer, launch, openPage, ready, ARTIFACTS, freePort } from './harness.mjs';

const DATES = 'Sunday, September 9, 2018';
const PHONE = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, hasTouch: true, isMobile: true };
const SIZES = [[390, 844, 2], [1280, 800, 1], [1920, 1080, 1]];

let browser, app, blog;
before(async () => {
  app = await startServer();
  // "another site": a plain static server on its own port, pages written under a path of their own
  const dir = mkdtempSync(path.join(tmpdir(), 'attnscope-blog-'));
  const port = freePort();
  const proc = spawn('python3', ['-m', 'http.server', String(port), '--bind', '127.0.0.1', '--directory', dir], { stdio: 'ignore' });
  const url = `http://127.0.0.1:${port}/`;
  for (let i = 0; i < 100; i++) {
    try { if ((await fetch(url)).ok) break; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  blog = {
    url,
    /** Writes a page at `rel` (under the blog's root) holding `body`; resolves to its URL. */
    page(rel, body) {
      mkdirSync(path.join(dir, path.dirname(rel)), { recursive: true });
      writeFileSync(path.join(dir, rel), `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>A teacher's blog</title><link rel="icon" href="data:,"></head><body style="font: 17px Georgia, serif; max-width: 760px; margin: 0 auto; padding: 16px"><h1>What does "it" look at?</h1>\n${body}\n</body></html>`);
      return url + rel;
    },
    /** Writes `text` at `rel` as it is (a script, say); resolves to its URL. */
    file(rel, text) {
      mkdirSync(path.join(dir, path.dirname(rel)), { recursive: true });
      writeFileSync(path.join(dir, rel), text);
      return url + rel;
    },
    stop: () => { proc.kill(); rmSync(dir, { recursive: true, force: true }); },
  };
  browser = await launch({ webgpu: false });
});
after(async () => { await browser?.close(); blog?.stop(); app?.stop(); });

const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);

/** A page like openPage's (console errors and failed responses recorded), with `options` for newPage. */
async function openWith(url, options) {
  const page = await browser.newPage(options);
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
  page.on('response', (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()} ${r.url()}`); });
  if (url) await page.goto(url);
  return { page, problems };
}

/** The centre of cell (q, k) of a head view in viewport px: a run's or a translation's (head.js for both). */
function cellPoint(page, root, q, k) {
  return page.evaluate(([root, q, k]) => {
    const v = document.querySelector(root);
    v.scrollIntoView({ block: 'center' });
    const r = v.querySelector('.overlay').getBoundingClientRect(), g = v._view.g; // both lay their cells from (x0, y0)
    return { x: r.left + g.x0 + (k + 0.5) * g.cell, y: r.top + g.y0 + (q + 0.5) * g.cell };
  }, [root, q, k]);
}

/** Every visible control smaller than 32 × 32 CSS px: `[what, width, height]`. */
function smallControls(page) {
  return page.evaluate(() => {
    const out = [];
    const visit = (root) => {
      for (const el of root.querySelectorAll('button, select, label.inline, input[type=range], summary')) {
        const r = el.getBoundingClientRect();
        if (!el.checkVisibility() || r.width === 0) continue;
        if (r.width < 32 || r.height < 32) out.push([`${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}${el.className ? `.${String(el.className).replace(/ /g, '.')}` : ''} "${el.textContent.trim().slice(0, 24)}"`, Math.round(r.width), Math.round(r.height)]);
      }
    };
    visit(document);
    return out;
  });
}

/** A tooltip wholly on a phone's screen, its text not cut off. */
async function tipReadable(page, selector) {
  const t = await page.evaluate((sel) => {
    const tip = document.querySelector(sel), r = tip.getBoundingClientRect();
    return { left: r.left, right: r.right, bottom: r.bottom, cut: tip.scrollWidth > tip.clientWidth, inner: innerWidth, innerH: innerHeight };
  }, selector);
  assert.ok(t.left >= 0 && t.right <= t.inner && t.bottom <= t.innerH, `the tooltip on the screen (${t.left}…${t.right} of ${t.inner}, bottom ${t.bottom})`);
  assert.equal(t.cut, false, 'the tooltip\'s text is not cut off');
}

test('touch: a tap shows a cell\'s value (head and translation views), a button knocks the focused head out, controls are 32 px', async () => {
  const { page, problems } = await openWith(`${app.url}#e=cpu`, PHONE);
  assert.equal(await ready(page), null);
  assert.equal(await page.evaluate(() => matchMedia('(pointer: coarse)').matches), true, 'a phone\'s pointer is coarse');
  await page.waitForFunction(() => document.querySelector('#head-view')._view);
  // the encoder's head view: "it" → "animal", tapped
  const [q, k] = await page.evaluate(() => ['it', 'animal'].map((t) => window.attnscope.result.tokens.indexOf(t)));
  const it = await cellPoint(page, '#head-view', q, k);
  await page.touchscreen.tap(it.x, it.y);
  await page.waitForFunction(() => !document.querySelector('#head-view .tooltip').hidden, null, { timeout: 5000 });
  const want = await page.evaluate(([q, k]) => window.attnscope.result.attention[3][1][q][k].toFixed(4), [q, k]);
  const tip = await page.textContent('#head-view .tooltip');
  assert.match(tip, /^it → animal: /, tip);
  assert.ok(tip.includes(want), `the tapped cell's value ${want}: ${tip}`);
  await tipReadable(page, '#head-view .tooltip');
  const touchAction = () => page.evaluate(() => ['#head-view .overlay', '.tr-head .overlay'].map((sel) => document.querySelector(sel) && getComputedStyle(document.querySelector(sel)).touchAction));
  assert.notEqual((await touchAction())[0], 'none', 'a finger scrolls the page over the heatmap (it pans one zoomed in)');
  await page.screenshot({ path: path.join(ARTIFACTS, 'share-tap-head-390.png') });

  // knocking the focused head out: a button, by touch and by the keyboard
  const toggle = page.locator('#knock-toggle');
  await toggle.scrollIntoViewIfNeeded();
  assert.equal(await toggle.textContent(), 'knock out L3 H1');
  assert.equal(await toggle.getAttribute('aria-pressed'), 'false');
  await toggle.tap();
  await page.waitForFunction(() => /Knocked out: L3 H1\. Sentence embedding, cosine/.test(document.getElementById('knock-line').textContent), null, { timeout: 60000 });
  assert.deepEqual(await page.evaluate(() => window.attnscope.store.get().off), ['3:1']);
  assert.equal(await toggle.getAttribute('aria-pressed'), 'true');
  assert.ok(await page.evaluate(() => document.querySelector('#model-view .cell[data-layer="3"][data-head="1"]').classList.contains('off')), 'the grid marks it');
  await toggle.focus();
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => window.attnscope.store.get().off.length === 0);
  assert.equal(await toggle.getAttribute('aria-pressed'), 'false');

  // every control a finger's size (the page's top, the head view's tools, the exports)
  assert.deepEqual(await smallControls(page), [], 'controls under 32 px on a phone');

  // a tapped value's bubble goes with its run: another text's (or model's) views show none of it
  const tapped = async () => {
    const at = await cellPoint(page, '#head-view', q, k);
    await page.touchscreen.tap(at.x, at.y);
    await page.waitForFunction(() => !document.querySelector('#head-view .tooltip').hidden, null, { timeout: 5000 });
  };
  await tapped();
  await page.fill('#sentence', 'The animal didn\'t cross the road because it was too wide.');
  await page.waitForFunction(() => /road/.test(window.attnscope.result?.text));
  await page.waitForFunction(() => document.querySelector('#head-view')._view.tokens.includes('road'));
  assert.equal(await page.isHidden('#head-view .tooltip'), true, 'the bubble of the text before is gone');
  await tapped();
  await page.selectOption('#model-pick', 'models/dates/');
  await page.waitForFunction(() => window.attnscope.result?.output_text, null, { timeout: 60000 });
  const bubbles = await page.evaluate(() => [...document.querySelectorAll('.tooltip')].filter((t) => t.checkVisibility()).map((t) => t.textContent));
  assert.deepEqual(bubbles, [], 'no bubble of the model before');

  // the dates model's translation view: a tap on a cell of another step's row shows its value
  await page.goto('about:blank');
  await page.goto(`${app.url}#e=cpu&model=models/dates/&s=${encodeURIComponent(DATES)}&st=6&l=1&h=2`);
  assert.equal(await ready(page), null);
  await page.waitForFunction(() => document.querySelector('.tr-head .tr-canvas')?._view);
  const step = await page.evaluate(() => window.attnscope.store.get().step);
  const cell = await cellPoint(page, '.tr-head .tr-canvas', 2, 5);
  await page.touchscreen.tap(cell.x, cell.y);
  await page.waitForFunction(() => !document.querySelector('.tr-head .tooltip')?.hidden, null, { timeout: 5000 });
  const value = await page.evaluate(() => window.attnscope.result.cross_attention[1][2][2][5].toFixed(3));
  const text = await page.textContent('.tr-head .tooltip');
  assert.match(text, /^step 3 \(writes “.*”, reads “.*”\) → source “.*” at position 5: /, text);
  assert.ok(text.includes(value), `the tapped cell's value ${value}: ${text}`);
  await tipReadable(page, '.tr-head .tooltip');
  assert.notEqual((await touchAction())[1], 'none', 'a finger scrolls the page over the translation\'s heatmap');
  assert.equal(await page.evaluate(() => window.attnscope.store.get().step), step, 'a tap on a cell reads it; the row\'s label focuses a step');
  await page.screenshot({ path: path.join(ARTIFACTS, 'share-tap-translation-390.png') });
  // the output tokens, the step control, the attention's buttons and the exports: 32 px
  assert.deepEqual(await smallControls(page), [], 'controls under 32 px on a phone (translation)');
  clean(problems);
  await page.close();
});

test('compare mode, two lengths: each pane its own sentence, no padding, nothing overlapping', async () => {
  const short = 'The cat sat.', long = 'The big dog slept there all day long.';
  // the longer sentence first and second: each pane is measured as it is shown, beside the other
  for (const [[first, second], [width, height, scale]] of [[long, short], [short, long]].flatMap((pair) => SIZES.map((size) => [pair, size]))) {
    const { page, problems } = await openWith(`${app.url}#e=cpu&s=${encodeURIComponent(first)}&cmp=${encodeURIComponent(second)}`, { viewport: { width, height }, deviceScaleFactor: scale });
    assert.equal(await ready(page), null);
    await page.waitForFunction(() => document.querySelector('#head-view-b .heat')?.dataset.t && document.querySelector('#head-view .heat')?.dataset.t);
    const got = await page.evaluate(() => {
      const r = window.attnscope.store.get().run;
      const pane = (id) => {
        const v = document.getElementById(id), heat = v.querySelector('.heat'), box = v.getBoundingClientRect(), c = heat.getBoundingClientRect();
        return { t: +heat.dataset.t, tokens: v._view.tokens, box: [box.left, box.top, box.right, box.bottom], canvas: [c.left, c.top, c.right, c.bottom] };
      };
      return { lengths: r.results.map((x) => x.length), T: r.T, a: pane('head-view'), b: pane('head-view-b'), scroll: document.documentElement.scrollWidth, inner: innerWidth };
    });
    // the first sentence's steps too: its own tokens
    await page.waitForFunction((n) => [...document.querySelectorAll('#steps-view figure canvas')].every((c) => c.dataset.n === String(n)), got.lengths[0]);
    assert.notEqual(got.lengths[0], got.lengths[1]);
    assert.equal(got.a.t, got.lengths[0], `${width}: the first pane is the first sentence's ${got.lengths[0]} tokens (the batch is padded to ${got.T})`);
    assert.equal(got.b.t, got.lengths[1], `${width}: the second pane is the second sentence's ${got.lengths[1]} tokens`);
    for (const p of [got.a, got.b]) {
      assert.ok(!p.tokens.includes('[PAD]'), `${width}: no [PAD] in ${p.tokens.join(' ')}`);
      assert.ok(p.canvas[2] <= p.box[2] + 0.5 && p.canvas[0] >= p.box[0] - 0.5, `${width}: the heatmap within its pane (${p.canvas} in ${p.box})`);
    }
    const overlap = (x, y) => x[0] < y[2] - 0.5 && y[0] < x[2] - 0.5 && x[1] < y[3] - 0.5 && y[1] < x[3] - 0.5;
    assert.ok(!overlap(got.a.box, got.b.box), `${width}: the panes do not overlap (${got.a.box} / ${got.b.box})`);
    assert.ok(got.scroll <= got.inner, `${width}: no sideways scroll (${got.scroll} > ${got.inner})`);
    await page.locator('#head-panel').scrollIntoViewIfNeeded();
    if (first === short) await page.screenshot({ path: path.join(ARTIFACTS, `share-compare-${width}.png`) });
    clean(problems);
    await page.close();
  }
});

test('share: wide boxes with copy buttons; the element pasted into another site renders the same step, attention, layer and head; the iframe fits', async () => {
  const hash = `#e=cpu&model=models/dates/&s=${encodeURIComponent(DATES)}&st=6&a=decoder&l=1&h=3&v=heatmap`;
  let element, iframe, want;
  for (const [width, height, scale] of SIZES) {
    const { page, problems } = await openWith(app.url + hash, { viewport: { width, height }, deviceScaleFactor: scale });
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: app.url.replace(/\/$/, '') });
    assert.equal(await ready(page), null);
    await page.waitForFunction(() => window.attnscope.result?.output_text === '2018-09-09');
    want = await page.evaluate(() => ({ step: document.querySelector('.tr-step h3').textContent, head: document.querySelector('.tr-head figcaption').textContent, output: window.attnscope.result.output_text }));
    await page.click('#share');
    await page.waitForFunction(() => /px/.test(document.getElementById('share-iframe-note').textContent), null, { timeout: 60000 });
    const boxes = await page.evaluate(() => ['share-link', 'share-iframe', 'share-element'].map((id) => document.getElementById(id).getBoundingClientRect().width));
    const dialog = await page.evaluate(() => document.getElementById('share-dialog').getBoundingClientRect().width);
    for (const w of boxes) assert.ok(w >= Math.min(600, dialog - 80), `${width}: a box ${w} px wide in a dialog of ${dialog}`);
    assert.equal(await page.locator('#share-dialog button.copy').count(), 3);
    await page.click('#share-dialog .copy[data-copy="share-element"]');
    await page.waitForFunction(() => document.querySelector('#share-dialog .copy[data-copy="share-element"]').parentElement.querySelector('.copy-status').textContent === 'copied');
    element = await page.inputValue('#share-element');
    iframe = await page.inputValue('#share-iframe');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), element, 'the clipboard holds the snippet');
    await page.screenshot({ path: path.join(ARTIFACTS, `share-dialog-${width}.png`) });
    clean(problems);
    await page.close();
  }
  // the snippet: the model by its absolute URL, every setting of the view
  const attrs = Object.fromEntries([...element.matchAll(/ ([a-z]+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
  assert.equal(attrs.model, `${app.url}models/dates/`);
  assert.deepEqual([attrs.sentence, attrs.step, attrs.attention, attrs.layer, attrs.head, attrs.view], [DATES, '6', 'decoder', '1', '3', 'head']);
  assert.match(iframe, /^<iframe src="[^"]*embed=head[^"]*" width="640" height="\d+"/);

  // pasted into a blog on another origin, under a path of its own
  const { page, problems } = await openWith(blog.page('posts/attention/index.html', `<p>The decoder at its 7th step:</p>\n${element}\n<p>The same, as an iframe:</p>\n${iframe}`), { viewport: { width: 1280, height: 800 } });
  await page.waitForFunction(() => document.querySelector('attn-scope').result, null, { timeout: 120000 });
  const shown = await page.evaluate(() => {
    const root = document.querySelector('attn-scope').shadowRoot;
    return { step: root.querySelector('.tr-step h3').textContent, head: root.querySelector('.tr-head figcaption').textContent, output: document.querySelector('attn-scope').result.output_text, attention: root.querySelector('.tr-attn[aria-pressed="true"]').dataset.attn };
  });
  assert.deepEqual(shown, { ...want, attention: 'decoder' }, 'the element shows what the page showed');
  assert.match(shown.step, /^Step 7 of 11/);
  // the iframe: tall enough for its view, the focused row included
  await page.locator('iframe').scrollIntoViewIfNeeded();
  const frame = page.frames().find((f) => f.url().includes('embed=head'));
  await frame.waitForFunction(() => window.attnscope?.result && document.querySelector('.tr-head canvas.heat'), null, { timeout: 120000 });
  const fits = await frame.evaluate(() => {
    const heat = document.querySelector('.tr-head canvas.heat').getBoundingClientRect();
    return { bottom: heat.bottom, content: document.documentElement.scrollHeight, inner: innerHeight, wide: document.documentElement.scrollWidth, innerW: innerWidth, viewWidth: document.getElementById('translation-view').clientWidth };
  });
  assert.ok(fits.content <= fits.inner && fits.bottom <= fits.inner, `nothing cut off: content ${fits.content} px, heatmap to ${fits.bottom} px, in ${fits.inner} (the view ${fits.viewWidth} px wide)`);
  assert.ok(fits.wide <= fits.innerW, `no sideways scroll in the iframe (${fits.wide} > ${fits.innerW})`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'share-pasted-1280.png'), fullPage: true });
  clean(problems);
  await page.close();
});

test('an element whose host allows no other site: its own text says why and what to do; a model on such a host: the error says so; the share dialog warns where this server would block it', async () => {
  const [element] = await (async () => {
    const { page } = await openWith(`${app.url}#e=cpu&model=models/dates/&s=${encodeURIComponent(DATES)}`, { viewport: { width: 1280, height: 800 } });
    assert.equal(await ready(page), null);
    await page.click('#share');
    await page.waitForFunction(() => document.getElementById('share-element').value.includes('</attn-scope>'));
    // this server sends the headers: no warning
    await page.waitForTimeout(300);
    assert.equal(await page.isHidden('#share-element-warning'), true);
    const out = [await page.inputValue('#share-element')];
    await page.close();
    return out;
  })();
  // 1. the script from a server that sends no Access-Control-Allow-Origin (the blog's plain
  // server), on a page of another site (this app's origin): the element's own text
  const script = blog.file('lib/attn-scope.js', 'customElements.define("attn-scope", class extends HTMLElement { constructor() { super(); this.attachShadow({ mode: "open" }); } });');
  const blocked = element.replace(/src="[^"]*attn-scope\.js"/, `src="${script}"`);
  const a = await openWith(null, { viewport: { width: 1280, height: 800 } });
  const post = `${app.url}a-post-on-another-site.html`;
  await a.page.route(post, (r) => r.fulfill({ contentType: 'text/html', body: `<!doctype html><html lang="en"><head><link rel="icon" href="data:,"></head><body><p>The decoder:</p>\n${blocked}</body></html>` }));
  await a.page.goto(post);
  await a.page.waitForTimeout(1500);
  const fallback = await a.page.evaluate(() => { const e = document.querySelector('attn-scope'); return { text: e.textContent, visible: e.checkVisibility() && e.getBoundingClientRect().height > 0, upgraded: Boolean(e.shadowRoot) }; });
  assert.equal(fallback.upgraded, false, 'the script was refused: no element');
  assert.ok(fallback.visible, 'its text shows');
  assert.match(fallback.text, /attn-scope\.js\. If this stays, that server does not allow other sites to load it \(it must send Access-Control-Allow-Origin: \*\).*the iframe snippet works anywhere/);
  await a.page.screenshot({ path: path.join(ARTIFACTS, 'share-element-blocked-1280.png') });
  await a.page.close();
  // 2. the script from this server, the model from the blog's (which sends no such header): the element's error says why
  // (a page of this app's origin, the model on the blog's server, which sends no such header)
  const modelHost = element.replace(/model="[^"]*"/, `model="${blog.url}models/dates/"`);
  const b = await openWith(null, { viewport: { width: 1280, height: 800 } });
  await b.page.route(post, (r) => r.fulfill({ contentType: 'text/html', body: `<!doctype html><html lang="en"><head><link rel="icon" href="data:,"></head><body><p>The decoder:</p>\n${modelHost}</body></html>` }));
  await b.page.goto(post);
  await b.page.waitForFunction(() => !document.querySelector('attn-scope')?.shadowRoot?.querySelector('.message')?.hidden, null, { timeout: 60000 });
  const message = await b.page.evaluate(() => document.querySelector('attn-scope').shadowRoot.querySelector('.message').textContent);
  assert.match(message, /only where its server allows it \(Access-Control-Allow-Origin.*embed the page as an iframe/, message);
  await b.page.close();
  // 3. the share dialog, where this server sent no Access-Control-Allow-Origin: a warning beside the element's snippet
  const c = await openWith(null, { viewport: { width: 1280, height: 800 } });
  await c.page.route('**/attn-scope.js', (r) => (r.request().method() === 'HEAD' ? r.fulfill({ status: 200, contentType: 'text/javascript', body: '' }) : r.continue()));
  await c.page.goto(`${app.url}#e=cpu&model=models/dates/&s=${encodeURIComponent(DATES)}`);
  assert.equal(await ready(c.page), null);
  await c.page.click('#share');
  await c.page.waitForFunction(() => !document.getElementById('share-element-warning').hidden, null, { timeout: 10000 });
  assert.match(await c.page.textContent('#share-element-warning'), /This server sends no Access-Control-Allow-Origin: \* for \/attn-scope\.js: pasted into another site, the element will only show a note saying so\..*iframe/);
  await c.page.close();
});

test('embeds show their view alone; a failed element shows its error alone, small', async () => {
  for (const embed of ['head', 'model', 'lines', 'steps']) {
    const { page, problems } = await openWith(`${app.url}#e=cpu&embed=${embed}`, { viewport: { width: 1280, height: 800 } });
    assert.equal(await ready(page), null);
    const text = await page.evaluate(() => document.body.innerText);
    for (const section of ['Inside the encoder', 'Reading the heads', 'Alt-click']) assert.ok(!text.includes(section), `embed=${embed} shows "${section}"`);
    assert.equal(await page.isVisible('#inside'), false);
    assert.equal(await page.isVisible('#reading'), false);
    clean(problems);
    await page.close();
  }
  const missing = `${app.url}models/missing/`;
  const { page, problems } = await openWith(blog.page('posts/broken.html', `<script type="module" src="${app.url}attn-scope.js"></script>\n<attn-scope model="${missing}" sentence="The animal didn't cross the street."></attn-scope>\n<p>After the element.</p>`), { viewport: { width: 1280, height: 800 } });
  await page.waitForFunction(() => /404/.test(document.querySelector('attn-scope').shadowRoot.querySelector('.message').textContent), null, { timeout: 60000 });
  const got = await page.evaluate(() => {
    const el = document.querySelector('attn-scope');
    return { height: el.getBoundingClientRect().height, text: el.shadowRoot.querySelector('.frame').innerText.trim(), message: el.shadowRoot.querySelector('.message').textContent };
  });
  assert.ok(got.height < 150, `a failed element is small (${got.height} px)`);
  assert.equal(got.text, got.message, 'its text is the error alone');
  assert.ok(got.message.includes(missing) || /missing\/config\.json/.test(got.message), `the error names the URL: ${got.message}`);
  assert.doesNotMatch(got.text, /Type a sentence/);
  await page.screenshot({ path: path.join(ARTIFACTS, 'share-failed-element-1280.png') });
  assert.deepEqual(problems.filter((x) => !/missing\/|favicon|404/.test(x)), [], 'nothing fails but the missing model');
  await page.close();
  // an iframe embed (the share dialog's other snippet) whose model fails: its error alone, too
  const iframe = await openWith(`${app.url}#e=cpu&embed=head&model=${encodeURIComponent(missing)}`, { viewport: { width: 640, height: 560 } });
  assert.match(await ready(iframe.page), /404/);
  const shown = await iframe.page.evaluate(() => ({ text: document.body.innerText.trim(), error: document.getElementById('error').textContent }));
  assert.equal(shown.text, shown.error, 'the embed shows its error alone');
  assert.ok(shown.error.includes(missing), `the error names the URL: ${shown.error}`);
  await iframe.page.close();
});
