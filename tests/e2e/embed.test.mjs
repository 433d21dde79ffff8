// Embedding and exporting, end to end: examples/blog.html with two <attn-scope> elements and an
// iframe of the embed mode, served from a copy of dist/ under a sub-path by a plain static
// server; and every export of the page (SVG, PNG, JSON, CSV), parsed and checked.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, existsSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startServer, launch, openPage, cli, attnscope, ready, maxDiff, ARTIFACTS, ROOT, freePort } from './harness.mjs';

let browser, site, app;
before(async () => {
  assert.ok(existsSync(path.join(ROOT, 'dist/attn-scope.js')), 'dist/ is built (make dist)');
  // a blog beside a copy of dist/, published as /sub/attnscope/
  const dir = mkdtempSync(path.join(tmpdir(), 'attnscope-site-'));
  mkdirSync(path.join(dir, 'sub'));
  cpSync(path.join(ROOT, 'dist'), path.join(dir, 'sub/attnscope'), { recursive: true });
  copyFileSync(path.join(ROOT, 'examples/blog.html'), path.join(dir, 'sub/blog.html'));
  const port = freePort();
  const proc = spawn('python3', ['-m', 'http.server', String(port), '--bind', '127.0.0.1', '--directory', dir], { stdio: 'ignore' });
  const url = `http://127.0.0.1:${port}/`;
  for (let i = 0; i < 100; i++) {
    try { if ((await fetch(url + 'sub/blog.html')).ok) break; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  // the copy (100 MB with the model) is removed with the server
  site = { url, stop: () => { proc.kill(); rmSync(dir, { recursive: true, force: true }); } };
  app = await startServer();
  browser = await launch();
});
after(async () => { await browser?.close(); site?.stop(); app?.stop(); });

function clean({ problems, requests }, origin) {
  assert.deepEqual(problems, [], 'no uncaught error or console error');
  assert.deepEqual(requests.filter((u) => !u.startsWith(origin) && !u.startsWith('blob:') && !u.startsWith('data:')), [], 'no request leaves the origin');
}

test('the blog page: two elements and an iframe render the CLI\'s numbers, the model is fetched once', async () => {
  const p = await openPage(browser, null, { width: 390, height: 844, scale: 2 });
  const { page, requests } = p;
  await page.goto(site.url + 'sub/blog.html');
  await page.waitForFunction(() => document.querySelector('#coref').result, null, { timeout: 120000 });
  // the model grid is below the fold on a phone: it renders only once scrolled into view
  const below = await page.evaluate(() => document.querySelector('#grid').getBoundingClientRect().top - innerHeight);
  assert.ok(below > 100, `the grid starts below the fold (${below} px)`);
  assert.equal(await page.evaluate(() => document.querySelector('#grid').result), null, 'not rendered before it is seen');
  await page.locator('#grid').scrollIntoViewIfNeeded();
  await page.waitForFunction(() => document.querySelector('#grid').result, null, { timeout: 120000 });
  await page.locator('#frame').scrollIntoViewIfNeeded();
  const frame = page.frames().find((f) => f.url().includes('embed=steps'));
  assert.ok(frame, 'the iframe loaded');
  await frame.waitForFunction(() => window.attnscope?.result, null, { timeout: 120000 });
  const got = await page.evaluate(() => ['coref', 'grid'].map((id) => {
    const r = document.getElementById(id).result;
    return { tokens: r.tokens, attention: r.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))) };
  }));
  const coref = cli(['--', "The animal didn't cross the street because it was too tired."]).results[0];
  const arrow = cli(['--', 'time flies like an arrow']).results[0];
  assert.deepEqual(got[0].tokens, coref.tokens);
  assert.deepEqual(got[1].tokens, arrow.tokens);
  assert.ok(maxDiff(got[0].attention, coref.attention) <= 1e-4);
  assert.ok(maxDiff(got[1].attention, arrow.attention) <= 1e-4);
  const causal = cli(['--mask', 'causal', '--', 'time flies like an arrow']).results[0];
  const inFrame = await frame.evaluate(() => window.attnscope.result.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))));
  assert.ok(maxDiff(inFrame, causal.attention) <= 1e-4, 'the iframe shows the causal run');
  // the embed mode shows its view and no chrome; the steps view is empty (0 px high) until its
  // four panels are drawn, one a task after the result lands
  await frame.waitForFunction(() => document.querySelectorAll('#steps-view figure canvas[data-n]').length === 4);
  assert.equal(await frame.isVisible('#steps-view'), true);
  assert.equal(await frame.isVisible('#inputs'), false);
  assert.equal(await frame.isVisible('#model-panel'), false);
  // what each element shows: its canvases are drawn inside the shadow root
  assert.ok(await page.evaluate(() => document.querySelector('#coref').shadowRoot.querySelector('.heat').width > 0));
  assert.equal(await page.evaluate(() => document.querySelector('#grid').shadowRoot.querySelectorAll('.grid .cell').length), 72);
  const weights = requests.filter((u) => u.endsWith('model.safetensors') && !u.includes('/models/dates/'));
  assert.equal(weights.length, 1, `the model is fetched once (${weights.length} requests)`);
  // the translation model below them: the element under the sub-path, the CLI's numbers
  await page.locator('#dates').scrollIntoViewIfNeeded();
  await page.waitForFunction(() => document.querySelector('#dates').result, null, { timeout: 120000 });
  const dates = await page.evaluate(() => {
    const el = document.querySelector('#dates'), r = el.result;
    return { r: { output_ids: r.output_ids, output_text: r.output_text, cross_attention: r.cross_attention }, step: el.shadowRoot.querySelector('.tr-step h3').textContent, head: el.shadowRoot.querySelector('.tr-head figcaption').textContent, rows: el.shadowRoot.querySelector('.tr-head canvas.heat').dataset.nq };
  });
  const want = attnscope(['translate', '--model', path.join(ROOT, 'models/dates'), '--', 'Sunday, September 9, 2018']).results[0];
  assert.equal(dates.r.output_text, '2018-09-09');
  assert.deepEqual(dates.r.output_ids, want.output_ids);
  assert.ok(maxDiff(dates.r.cross_attention, want.cross_attention) <= 1e-4);
  assert.match(dates.step, /^Step 7 of 11: the decoder reads “0” .* writes “9”/);
  assert.match(dates.head, /^Layer 1, head 2/, 'the model\'s own head');
  assert.equal(dates.rows, '11');
  // what the caption says: writing the month's digit, the focused head reads the month's name
  const row = want.cross_attention[1][2][6];
  assert.equal(want.source_tokens[row.indexOf(Math.max(...row))], 'september');
  assert.equal(requests.filter((u) => u.endsWith('/sub/attnscope/models/dates/model.safetensors')).length, 1, 'the dates model from under the sub-path');
  clean(p, site.url);
  await page.screenshot({ path: path.join(ARTIFACTS, 'blog-390.png'), fullPage: true });
  await page.close();
  for (const width of [1280, 1920]) {
    const q = await openPage(browser, null, { width, height: 1000, scale: 2 });
    await q.page.goto(site.url + 'sub/blog.html');
    for (const id of ['#coref', '#grid', '#frame']) await q.page.locator(id).scrollIntoViewIfNeeded();
    await q.page.waitForFunction(() => document.querySelector('#coref').result && document.querySelector('#grid').result, null, { timeout: 120000 });
    const f = q.page.frames().find((x) => x.url().includes('embed=steps'));
    await f.waitForFunction(() => window.attnscope?.result, null, { timeout: 120000 });
    await q.page.evaluate(() => window.scrollTo(0, 0));
    await q.page.screenshot({ path: path.join(ARTIFACTS, `blog-${width}.png`), fullPage: true });
    clean(q, site.url);
    await q.page.close();
  }
});

test('an element re-renders when an attribute changes, and reports errors readably', async () => {
  const p = await openPage(browser, null, { width: 1280, height: 900 });
  const { page } = p;
  await page.goto(site.url + 'sub/blog.html');
  await page.waitForFunction(() => document.querySelector('#coref').result, null, { timeout: 120000 });
  const events = await page.evaluate(() => new Promise((resolve) => {
    const el = document.querySelector('#coref');
    el.addEventListener('attnscope-render', (e) => {
      if (e.detail.tokens.length === 5) resolve({ tokens: e.detail.tokens, same: e.detail === el.result });
    });
    el.setAttribute('sentence', 'a cat sat');
  }));
  assert.deepEqual(events.tokens, ['[CLS]', 'a', 'cat', 'sat', '[SEP]']);
  assert.equal(events.same, true, 'the event carries the element\'s result');
  await page.evaluate(() => document.querySelector('#coref').setAttribute('model', 'attnscope/assets/models/missing/'));
  await page.waitForFunction(() => /HTTP 404/.test(document.querySelector('#coref').shadowRoot.querySelector('.message').textContent));
  assert.ok(await page.evaluate(() => !document.querySelector('#coref').shadowRoot.querySelector('.message').hidden));
  p.problems.length = 0; // the 404 itself is the point of this test
  await page.close();
});

/** A download's bytes. */
async function download(page, click) {
  const [d] = await Promise.all([page.waitForEvent('download'), click()]);
  const file = path.join(ARTIFACTS, d.suggestedFilename());
  await d.saveAs(file);
  return { name: d.suggestedFilename(), file, bytes: readFileSync(file) };
}

test('exports: SVG cells map back to the values, PNG at 2×, JSON equals the result, CSV', async () => {
  const p = await openPage(browser, app.url + '#e=cpu&s=time%20flies%20like%20an%20arrow&m=causal&l=1&h=2', { width: 1280, height: 900 });
  const { page } = p;
  assert.equal(await ready(page), null);
  const T = await page.evaluate(() => window.attnscope.result.tokens.length);
  const svg = await download(page, () => page.click('#head-panel .export[data-format=svg]'));
  const check = await page.evaluate(async ([text, T]) => {
    const { stepOf, scale } = await import('/web/colour.js');
    const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
    if (doc.querySelector('parsererror')) return { error: doc.querySelector('parsererror').textContent };
    const rects = [...doc.querySelectorAll('rect[data-q]')];
    const att = window.attnscope.result.attention[1][2];
    const sc = scale('probability');
    let worst = 0, masked = 0;
    for (const r of rects) {
      const q = +r.dataset.q, k = +r.dataset.k, fill = r.getAttribute('fill');
      if (fill.startsWith('url(')) { masked++; continue; }
      const rgb = [1, 3, 5].map((i) => parseInt(fill.slice(i, i + 2), 16));
      worst = Math.max(worst, Math.abs(stepOf('probability', rgb) - sc.index(att[q][k])));
    }
    return { cells: rects.length, worst, masked, labels: [...doc.querySelectorAll('text.qlabel')].map((t) => t.textContent), w: +doc.documentElement.getAttribute('width'), h: +doc.documentElement.getAttribute('height') };
  }, [svg.bytes.toString(), T]);
  assert.equal(check.error, undefined, `the SVG parses: ${check.error}`);
  assert.equal(check.cells, T * T, 'T × T cells');
  assert.ok(check.worst <= 1, `every colour maps back to its value within one step (worst ${check.worst})`);
  assert.equal(check.masked, (T * (T - 1)) / 2, 'the causal mask\'s cells are hatched');
  assert.deepEqual(check.labels, await page.evaluate(() => window.attnscope.result.tokens));
  const png = await download(page, () => page.click('#head-panel .export[data-format=png]'));
  assert.equal(png.bytes.subarray(1, 4).toString(), 'PNG');
  assert.deepEqual([png.bytes.readUInt32BE(16), png.bytes.readUInt32BE(20)], [2 * check.w, 2 * check.h], 'the PNG is the SVG at 2× pixels');
  const json = JSON.parse((await download(page, () => page.click('#head-panel .export[data-format=json]'))).bytes.toString());
  const want = await page.evaluate(() => ({ tokens: window.attnscope.result.tokens, attention: window.attnscope.result.attention.map((l) => l.map((h) => h.map((r) => Array.from(r)))) }));
  assert.deepEqual(json, want, 'the JSON equals the result');
  const csv = (await download(page, () => page.click('#head-panel .export[data-format=csv]'))).bytes.toString().trim().split('\n');
  assert.equal(csv.length, T + 1);
  assert.equal(csv[0], ['query \\ key', ...want.tokens].map((t) => `"${t}"`).join(','));
  assert.ok(Math.abs(Number(csv[3].split(',')[2]) - want.attention[1][2][2][1]) < 1e-6);
  // the model view and the steps export as SVG too; every export is looked at as a picture
  for (const [panel, name] of [['#model-panel', 'model'], ['#steps', 'steps'], ['#head-panel', 'head']]) {
    const d = await download(page, () => page.click(`${panel} .export[data-format=svg]`));
    const ok = await page.evaluate((t) => !new DOMParser().parseFromString(t, 'image/svg+xml').querySelector('parsererror'), d.bytes.toString());
    assert.ok(ok, `${name} SVG parses`);
    const view = await browser.newPage({ viewport: { width: 1200, height: 900 }, deviceScaleFactor: 2 });
    await view.setContent(`<body style="margin:0">${d.bytes.toString()}</body>`);
    await view.screenshot({ path: path.join(ARTIFACTS, `export-${name}.png`), fullPage: true });
    await view.close();
  }
  writeFileSync(path.join(ARTIFACTS, 'export-head.csv'), csv.join('\n'));
  assert.deepEqual(p.problems, []);
  await page.close();
});
