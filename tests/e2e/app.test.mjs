// The page, end to end, in headless Chromium: typing, tokens, values equal to the CLI's, drawn
// heatmaps, hover, masks, links, engines, models, and one test for each problem issue 7 listed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { startServer, launch, openPage, cli, ready, maxDiff, INK, gridCells, ARTIFACTS, ROOT } from './harness.mjs';
import { runHeads, longHead, scoresPart, scoresIn, heldScores, stepsPart } from '../../web/result.js';
import { pooledPart } from '../../web/summary.js';

let server, browser, noGpu;
before(async () => { server = await startServer(); browser = await launch(); noGpu = await launch({ webgpu: false }); });
after(async () => { await browser?.close(); await noGpu?.close(); server?.stop(); });

async function open(hash = '', opts = {}, b = browser) {
  const p = await openPage(b, server.url + hash, opts);
  const err = await ready(p.page);
  assert.equal(err, null, `the model did not load: ${err}`);
  return p;
}
const resultFor = (page, tokensJoined) => page.waitForFunction((t) => window.attnscope.result && window.attnscope.result.tokens.join(' ') === t, tokensJoined, { timeout: 60000 });
/**
 * Waits until every view has drawn the page's first result: `ready` only means the result is in
 * the store; the views draw it in later tasks (scope.js `render`), the grid a few canvases a frame
 * and the step panels one a task (a step canvas has a `data-n` once drawn).
 */
const allDrawn = (page) => page.waitForFunction(() => {
  const s = window.attnscope.store.get(), id = String(s.run?.id);
  return s.rendered.split(':')[0] === id && document.getElementById('model-view').dataset.drawn?.split('|')[0] === id
    && [...document.querySelectorAll('#steps-view figure canvas')].every((c) => c.dataset.n);
}, null, { timeout: 60000 });
/** Waits until the model grid has drawn the current result (its `data-drawn` is `runId|item|scale`). */
const gridDrawn = (page) => page.waitForFunction(() => document.getElementById('model-view').dataset.drawn?.split('|')[0] === String(window.attnscope.store.get().run?.id), null, { timeout: 60000 });
const nested = (page, l, h) => page.evaluate(([l, h]) => window.attnscope.result.attention[l][h].map((r) => Array.from(r)), [l, h]);

function assertClean({ problems, requests }) {
  assert.deepEqual(problems, [], 'no uncaught error or console error');
  const foreign = requests.filter((u) => !u.startsWith(server.url) && !u.startsWith('blob:') && !u.startsWith('data:'));
  assert.deepEqual(foreign, [], 'the page makes no request off the app server');
}

/** The head view's geometry (CSS pixels) and where a cell's centre is on the screen. */
async function headCell(page, q, k) {
  const box = await page.locator('#head-view .overlay').boundingBox();
  const g = await page.evaluate(() => ({ ...document.querySelector('#head-view .heat').dataset }));
  const x0 = +g.x0, y0 = +g.y0, cell = +g.cell;
  return { g, x: box.x + x0 + (k - +g.k0 + 0.5) * cell, y: box.y + y0 + (q - +g.q0 + 0.5) * cell };
}

test('index.html preloads exactly the modules web/app.js imports, so they load at once, not level by level', () => {
  const seen = new Set();
  const walk = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const src = readFileSync(path.join(ROOT, file), 'utf8');
    for (const m of src.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+['"](\.[^'"]+)['"]|^\s*import\s+['"](\.[^'"]+)['"]/gm)) {
      walk(path.posix.normalize(path.posix.join(path.posix.dirname(file), m[1] || m[2])));
    }
  };
  walk('web/app.js');
  seen.delete('web/app.js');
  const preloaded = [...readFileSync(path.join(ROOT, 'index.html'), 'utf8').matchAll(/<link rel="modulepreload" href="([^"]+)">/g)].map((m) => m[1]);
  assert.ok(seen.size > 20, `the import walk found ${seen.size} modules`);
  assert.deepEqual([...preloaded].sort(), [...seen].sort());
});

test('typing a sentence shows the tokenizer\'s tokens and the CLI\'s attention (WebGPU)', async () => {
  const p = await open('#e=gpu');
  const { page } = p;
  const text = 'The quick brown fox jumps over the lazy dog';
  await page.fill('#sentence', '');
  await page.type('#sentence', text, { delay: 5 });
  const want = cli(['--', text]).results[0];
  await resultFor(page, want.tokens.join(' '));
  const got = await page.evaluate(() => ({
    tokens: window.attnscope.result.tokens,
    attention: window.attnscope.result.attention.map((l) => l.map((h) => h.map((r) => Array.from(r)))),
    backend: window.attnscope.result.backend,
    elapsedMs: window.attnscope.result.elapsedMs,
    fields: Object.keys(window.attnscope.result),
  }));
  assert.deepEqual(got.tokens, want.tokens);
  for (const k of ['text', 'tokens', 'token_ids', 'truncated', 'attention', 'mask', 'backend', 'elapsed_ms']) assert.ok(got.fields.includes(k), `result has ${k}`);
  const d = maxDiff(got.attention, want.attention);
  console.log(`page (${got.backend}) vs CLI: max |Δ| = ${d.toExponential(2)}, forward ${got.elapsedMs.toFixed(1)} ms`);
  assert.ok(d <= 1e-4, `attention differs from the CLI by ${d}`);
  assert.match(got.backend, /^gpu: .*\(WebGPU\)$/, 'engine=gpu runs on WebGPU');
  assert.match(await page.textContent('#backend'), /^WebGPU: /);
  await page.locator('#model-panel').screenshot({ path: path.join(ARTIFACTS, 'model-view.png') });
  await page.locator('#head-panel').screenshot({ path: path.join(ARTIFACTS, 'head-view.png') });
  await page.screenshot({ path: path.join(ARTIFACTS, 'app.png'), fullPage: true });
  assertClean(p);
  await page.close();
});

test('heatmaps are drawn, hover shows the value, arrows move the focus, the grid shows its focus', async () => {
  const p = await open('#e=cpu&s=time%20flies%20like%20an%20arrow&l=1&h=2');
  const { page } = p;
  await page.waitForFunction(() => document.querySelector('#model-view[data-drawn]'));
  const inked = {
    head: await page.evaluate((ink) => eval(ink)(document.querySelector('#head-view .heat')), INK),
    grid: (await page.evaluate(gridCells, '#model-view')).map((c) => c.ink),
  };
  assert.ok(inked.head > 0.05, `head view is blank (${inked.head})`);
  assert.equal(inked.grid.length, 72);
  assert.ok(inked.grid.every((x) => x > 0.05), 'every grid heatmap is drawn');
  const framed = (await page.evaluate(gridCells, '#model-view')).filter((c) => c.frame.includes('1d4ed8'));
  assert.deepEqual(framed.map((c) => [c.layer, c.head, c.classes.join(' ')]), [[1, 2, 'cell focused']], 'only the focused head is framed in blue');
  const c = await headCell(page, 2, 4);
  await page.mouse.move(c.x, c.y);
  await page.waitForSelector('#head-view .tooltip:not([hidden])');
  const want = await page.evaluate(() => window.attnscope.result.attention[1][2][2][4]);
  assert.equal(await page.textContent('#head-view .tooltip'), `flies → an: ${want.toFixed(4)}`);
  assert.match(await page.textContent('#head-view .focus-label'), /layer 1, head 2/);
  await page.mouse.move(2, 2);
  // keyboard: Tab reaches the grid, whose focus ring is visible; arrows move the focused head
  await page.focus('#example');
  let focused = '';
  for (let i = 0; i < 40 && focused !== 'grid'; i++) {
    await page.keyboard.press('Tab');
    focused = await page.evaluate(() => document.activeElement?.className ?? '');
  }
  assert.equal(focused, 'grid', 'the model grid is reachable with Tab');
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(outline, 'none', 'the focused grid shows a focus outline');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowRight');
  await page.waitForFunction(() => /l=2&h=3/.test(location.hash));
  assert.match(await page.textContent('#head-view .focus-label'), /layer 2, head 3/);
  const reframed = (await page.evaluate(gridCells, '#model-view')).filter((c) => c.frame.includes('1d4ed8'));
  assert.deepEqual(reframed.map((c) => [c.layer, c.head]), [[2, 3]], 'the blue frame follows the focus');
  // text alternatives: every canvas has a label; the keyboard cursor is announced. The step panels
  // draw (and label) one a task after the head view: wait for all four at the new focus
  await page.waitForFunction(() => {
    const c = [...document.querySelectorAll('#steps-view figure canvas')];
    return c.length === 4 && c.every((x) => / for layer 2, head 3, /.test(x.getAttribute('aria-label') ?? ''));
  });
  const unlabelled = await page.evaluate(() => [...document.querySelectorAll('#views canvas, #steps canvas')].filter((c) => !c.getAttribute('aria-label') && c.getAttribute('aria-hidden') !== 'true').length);
  assert.equal(unlabelled, 0, 'every canvas has a text alternative');
  await page.focus('#head-view .overlay');
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowDown');
  assert.match(await page.textContent('#head-view .readout'), /^time → time: 0\.\d{4}$/);
  assertClean(p);
  await page.close();
});

test('the causal mask empties the upper triangle; none lets padding leak; masked cells are hatched', async () => {
  const p = await open('#e=cpu&s=time%20flies%20like%20an%20arrow');
  const { page } = p;
  await page.selectOption('#mask', 'causal');
  await page.waitForFunction(() => location.hash.includes('m=causal') && window.attnscope.result.attention[0][0][0][1] === 0);
  const upper = await page.evaluate(() => {
    let max = 0;
    for (const l of window.attnscope.result.attention) for (const h of l)
      h.forEach((row, q) => row.forEach((v, k) => { if (k > q) max = Math.max(max, v); }));
    return max;
  });
  assert.equal(upper, 0, 'the causal mask leaves the upper triangle exactly 0');
  // a masked cell (0 → 6) and an allowed near-zero cell look different: hatched grey vs white
  // T is 7 under either mask, so wait for the render pass of the causal run itself (the views draw
  // a task or more after the result lands) and for the masked_fill panel to have been drawn
  await page.waitForFunction(() => {
    const s = window.attnscope.store.get();
    return s.rendered.split(':')[0] === String(s.run.id) && document.querySelector('#head-view .heat').dataset.n === '7'
      && document.querySelector('#steps-view [data-step=filled] canvas').dataset.n === '7';
  });
  const px = await page.evaluate(() => {
    const c = document.querySelector('#head-view .heat');
    const d = c.dataset, r = c.width / parseFloat(c.style.width);
    const at = (q, k) => Array.from(c.getContext('2d').getImageData(Math.round((+d.x0 + (k + 0.5) * +d.cell) * r), Math.round((+d.y0 + (q + 0.5) * +d.cell) * r), 1, 1).data);
    return { masked: at(0, 6) };
  });
  assert.ok(px.masked[0] < 240 && Math.abs(px.masked[0] - px.masked[2]) < 30, `a masked cell is grey, not a weight colour (${px.masked})`);
  // −∞ in the masked_fill panel's tooltip, at any size
  const box = await page.locator('#steps-view [data-step=filled] canvas').boundingBox();
  const sg = await page.evaluate(() => ({ ...document.querySelector('#steps-view [data-step=filled] canvas').dataset }));
  await page.mouse.move(box.x + +sg.x0 + 6.5 * +sg.cell, box.y + +sg.y0 + 0.5 * +sg.cell);
  await page.waitForSelector('#steps-view .tooltip:not([hidden])');
  // its line, then what the special tokens are (issue 29)
  assert.equal(await page.evaluate(() => document.querySelector('#steps-view .tooltip').firstChild.textContent), '[CLS] → [SEP]: −∞');
  assert.match(await page.textContent('#steps-view .tooltip .tip-note'), /^\[CLS\]: .*\n\[SEP\]: /);
  assert.equal(sg.labels, 'true', 'the step panels carry token labels');
  assert.equal(await page.locator('#steps-view .legend').count(), 2, 'the step panels have value scales');
  // batch mode: the short sentence is padded; with "none" its [PAD] keys get weight
  await page.check('#batch-mode');
  await page.fill('#batch', 'time flies like an arrow\nhi');
  await page.selectOption('#mask', 'none');
  await page.waitForFunction(() => document.querySelectorAll('#item option').length === 2);
  await page.selectOption('#item', '1');
  await page.waitForFunction(() => window.attnscope.result.item === 1 && window.attnscope.result.tokens.includes('[PAD]') && window.attnscope.result.attention[0][0][1][5] > 0);
  assert.deepEqual(await page.evaluate(() => window.attnscope.result.tokens), ['[CLS]', 'hi', '[SEP]', '[PAD]', '[PAD]', '[PAD]', '[PAD]']);
  await page.selectOption('#mask', 'padding');
  await page.waitForFunction(() => window.attnscope.result.attention[0][0][1][5] === 0);
  await page.locator('#steps').screenshot({ path: path.join(ARTIFACTS, 'mask-steps.png') });
  assertClean(p);
  await page.close();
});

test('ticking "batch" keeps the typed sentence and shows [PAD] from the built-in example', async () => {
  const p = await open('#e=cpu');
  const { page } = p;
  await page.fill('#sentence', 'my own words here');
  await resultFor(page, '[CLS] my own words here [SEP]');
  await page.check('#batch-mode');
  await page.waitForFunction(() => window.attnscope.result.batch.length === 3);
  const batch = await page.evaluate(() => window.attnscope.result.batch);
  assert.equal(batch[0].text, 'my own words here', 'the typed sentence is the batch\'s first line');
  assert.ok(batch.some((b) => b.tokens.includes('[PAD]')), 'the batch pads its shorter sentences');
  assert.match(await page.inputValue('#batch'), /^my own words here\n/);
  await page.uncheck('#batch-mode');
  await resultFor(page, '[CLS] my own words here [SEP]');
  assert.equal(await page.inputValue('#sentence'), 'my own words here');
  assertClean(p);
  await page.close();
});

test('a link restores the sentence, pair, mask, layer, head, view and model URL', async () => {
  const model = `${server.url}assets/models/all-MiniLM-L6-v2/`;
  const p = await open(`#s=the%20cat%20sat&p=it%20purred&m=causal&l=4&h=7&v=lines&e=cpu&model=${encodeURIComponent(model)}`);
  const { page } = p;
  assert.equal(await page.inputValue('#view'), 'lines');
  // the line view (and its canvas) is drawn a task after the result lands
  await page.waitForFunction(() => document.querySelector('#lines-view canvas')?.getAttribute('aria-label')?.startsWith('line view of layer 4, head 7:'));
  assert.equal(await page.isVisible('#head-view'), false);
  assert.equal(await page.isVisible('#lines-view canvas'), true);
  assert.equal(await page.inputValue('#sentence'), 'the cat sat');
  assert.equal(await page.inputValue('#pair'), 'it purred');
  assert.equal(await page.inputValue('#mask'), 'causal');
  assert.equal(await page.inputValue('#model-url'), model);
  const want = cli(['--mask', 'causal', '--pair', 'it purred', '--', 'the cat sat']).results[0];
  await resultFor(page, want.tokens.join(' '));
  const got = await nested(page, 4, 7);
  assert.ok(maxDiff([[got]], [[want.attention[4][7]]]) <= 1e-4);
  assertClean(p);
  await page.close();
});

test('without WebGPU: one short engine line, and "check" compares with PyTorch\'s numbers', async () => {
  const p = await open('', {}, noGpu);
  const { page } = p;
  assert.equal(await page.evaluate(() => window.attnscope.result.backend), 'cpu');
  const line = await page.textContent('#engine-status');
  assert.match(line, /^CPU engine: WebGPU is not available in this browser$/);
  const body = await page.evaluate(() => document.body.innerText);
  assert.equal(body.split('WebGPU is not available').length - 1, 1, 'said once');
  assert.equal(await page.isVisible('#engine-why'), false, 'the driver diagnostics wait behind "details"');
  await page.click('#check');
  await page.waitForFunction(() => /PyTorch/.test(document.getElementById('check-result').textContent), null, { timeout: 60000 });
  const text = await page.textContent('#check-result');
  const m = text.match(/vs PyTorch \(HF transformers [\d.]+, torch [\d.]+\) on 5 worked examples: max \|Δ\| = ([\d.e+-]+)/);
  assert.ok(m, `check reports the gap to PyTorch: ${text}`);
  assert.ok(Number(m[1]) <= 1e-4, `the CPU engine is within 1e-4 of PyTorch (${m[1]})`);
  // the header's one line begins with the verdict and its number, and shows them whole
  const verdict = text.match(/^✓ max \|Δ\| ([\d.]+e[+-]\d+) · /);
  assert.ok(verdict && Number(verdict[1]) === Number(Number(m[1]).toExponential(1)), `the verdict first: ${text}`);
  const shown = await page.evaluate((n) => {
    const el = document.getElementById('check-result'), range = document.createRange();
    range.setStart(el.firstChild, 0);
    range.setEnd(el.firstChild, n);
    return range.getBoundingClientRect().right <= el.getBoundingClientRect().right;
  }, verdict[0].length - 3);
  assert.ok(shown, 'the verdict is not cut off');
  assert.doesNotMatch(text, /CPU vs/, 'no CPU-vs-CPU comparison');
  assertClean(p);
  await page.close();
});

test('three wasm builds: threads where the page is cross-origin isolated, else relaxed SIMD, else SIMD128; each equals the CLI', async () => {
  const cores = os.availableParallelism(); // what the browser reports as hardwareConcurrency
  const threaded = cores > 1 ? ['threads', Math.min(cores, 8)] : ['relaxed-simd', 1]; // one core: no threads
  for (const [query, build, threads] of [['', ...threaded], ['?wasm=relaxed-simd', 'relaxed-simd', 1], ['?wasm=simd128', 'simd128', 1]]) {
    const p = await open(`${query}#e=cpu`, {}, noGpu);
    const { page } = p;
    assert.equal(await page.evaluate(() => crossOriginIsolated), true, 'scripts/serve.py isolates the page (COOP + COEP)');
    const stats = await page.evaluate(() => window.attnscope.stats());
    assert.equal(stats.wasmBuild, build, `the worker runs the ${build} build`);
    assert.equal(stats.threads, threads, 'on as many threads as cores (up to 8)');
    const got = await page.evaluate(() => ({
      text: window.attnscope.result.text,
      attention: window.attnscope.result.attention.map((l) => l.map((h) => h.map((r) => Array.from(r)))),
    }));
    const want = cli(['--backend', 'cpu', '--', got.text]).results[0];
    const d = maxDiff(got.attention, want.attention);
    console.log(`${build} build vs CLI: max |Δ| = ${d.toExponential(2)}`);
    assert.ok(d <= 1e-4, `the ${build} build differs from the CLI by ${d}`);
    assertClean(p);
    await page.close();
  }
});

test('a run\'s records: each head is a view into its layer\'s record; a record of another shape, a missing layer or item is refused by name; a long run\'s head is checked', () => {
  const [B, L, H, T] = [2, 3, 2, 4], n = T * T;
  const value = (b, l, h, j, name) => (name === 'attention' ? 1 : -1) * (((b * L + l) * H + h) * n + j);
  const record = (b, l, name, shape = [H, T, T]) => ({ stack: 'decoder', kind: 'self', layer: l, name, shape, values: Float32Array.from({ length: shape.reduce((x, y) => x * y, 1) }, (_, i) => value(b, l, Math.floor(i / n), i % n, name)) });
  const item = (b, names = ['attention', 'scores']) => Array.from({ length: L }, (_, l) => names.map((name) => record(b, l, name))).flat();
  const shape = [B, L, H, T, T];
  const { head, scoresOf } = runHeads([item(0), item(1)], shape);
  for (let b = 0; b < B; b++) {
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) {
        assert.deepEqual(Array.from(head(b, l, h)), Array.from({ length: n }, (_, j) => value(b, l, h, j, 'attention')), `item ${b}, layer ${l}, head ${h}`);
        assert.deepEqual(Array.from(scoresOf(b, l, h)), Array.from({ length: n }, (_, j) => value(b, l, h, j, 'scores')), `scores of item ${b}, layer ${l}, head ${h}`);
      }
    }
  }
  assert.equal(runHeads([item(0, ['attention']), item(1, ['attention'])], shape).scoresOf, null, 'a run without scores has none');
  const wrong = item(1);
  wrong[2] = record(1, 1, 'attention', [H, T, T - 1]);
  assert.throws(() => runHeads([item(0), wrong], shape), { message: "item 1's attention of layer 1 has shape [2,4,3] (24 values), where the run's heads are (2, 4, 4)" });
  assert.throws(() => runHeads([item(0), item(1).slice(0, 4)], shape), { message: 'item 1 has attention of 2 layers, where the run has 3' });
  assert.throws(() => runHeads([item(0)], shape), { message: 'the run has records of 1 items, where it ran 2' });
  // a long run's head, asked for alone: its values, its largest |score| as the engine gives it
  // (long.test.mjs checks the engine's against the CLI's scores), and a window of its scores
  // (queries 1–2 over keys 0–1); without its largest |score|, or with a window out of shape, refused
  const one = (name) => Float32Array.from({ length: n }, (_, j) => value(1, 2, 1, j, name));
  const most = Math.max(...Array.from(one('scores'), Math.abs));
  const win = { part: { q0: 1, q1: 3, k0: 0, k1: 2 }, values: Float32Array.from([4, 5, 8, 9], (j) => value(1, 2, 1, j, 'scores')) };
  const got = longHead({ attention: one('attention'), score_max: most, scores: win }, 1, 2, 1, T);
  assert.equal(got.probs[3], value(1, 2, 1, 3, 'attention'));
  assert.equal(got.scoreMax, most);
  assert.deepEqual(got.scores, [win]);
  assert.deepEqual(longHead({ attention: one('attention'), score_max: most }, 1, 2, 1, T).scores, []);
  assert.throws(() => longHead({ attention: one('attention') }, 1, 2, 1, T), { message: "item 1's head 2:1 came with a largest |score| of undefined" });
  assert.throws(() => longHead({ attention: one('attention').subarray(1), score_max: most }, 1, 2, 1, T), { message: "item 1's head 2:1 came with attention of 15 values, where the run's heads are 4 × 4" });
  assert.throws(() => longHead({ attention: one('attention'), score_max: most, scores: { ...win, values: win.values.subarray(1) } }, 1, 2, 1, T), { message: "item 1's head 2:1 came with scores of 3 values for queries 1–3 and keys 0–2, where the run's heads are 4 × 4" });
  assert.throws(() => scoresPart({ part: { q0: 2, q1: 5, k0: 0, k1: 1 }, values: new Float32Array(3) }, 1, 2, 1, T), { message: "item 1's head 2:1 came with scores of 3 values for queries 2–5 and keys 0–1, where the run's heads are 4 × 4" });
  // any part of the scores: of a run that keeps them all, or of the windows a long run holds
  // (the part a window is, the part within one, none where no window covers it)
  const part = (q0, q1, k0, k1) => ({ q0, q1, k0, k1 });
  const cells = (p) => { const out = []; for (let q = p.q0; q < p.q1; q++) for (let k = p.k0; k < p.k1; k++) out.push(value(1, 2, 1, q * T + k, 'scores')); return out; };
  const kept = { T, scoresOf };
  for (const p of [part(0, 4, 0, 4), part(1, 3, 2, 4), part(3, 4, 0, 1)]) assert.deepEqual(Array.from(scoresIn(kept, 1, 2, 1, p)), cells(p), JSON.stringify(p));
  assert.equal(scoresIn({ T, scoresOf: () => null }, 1, 2, 1, part(0, 1, 0, 1)), null);
  const windows = [win, { part: part(0, 4, 1, 4), values: Float32Array.from(cells(part(0, 4, 1, 4))) }];
  assert.equal(heldScores(windows, win.part), win.values, 'the window itself');
  for (const p of [part(2, 3, 1, 2), part(1, 2, 0, 1), part(0, 4, 3, 4), part(1, 4, 2, 3)]) assert.deepEqual(Array.from(heldScores(windows, p)), cells(p), JSON.stringify(p));
  assert.equal(heldScores(windows, part(0, 1, 0, 1)), null, 'no window covers (0, 0)');
  assert.equal(heldScores(windows, part(0, 3, 0, 2)), null, 'nor queries 0–2 over keys 0–1');
  // the steps view's part: at most 64 tokens a side of the zoom window, within the head
  assert.deepEqual(stepsPart(1000, null), part(0, 64, 0, 64));
  assert.deepEqual(stepsPart(10, null), part(0, 10, 0, 10));
  assert.deepEqual(stepsPart(1000, { q0: 980, k0: 10, n: 200 }), part(936, 1000, 10, 74));
  assert.deepEqual(stepsPart(1000, { q0: 5, k0: 7, n: 20 }), part(5, 25, 7, 27));
});

test('a part of a head max-pooled a bin of a row at a time equals it pooled a cell at a time, its largest the first in row order', () => {
  // the cell-by-cell pooling pooledPart did before (and the grid's thumbnails' definition)
  const cellByCell = (values, mask, T, part, R) => {
    const nq = part.q1 - part.q0, nk = part.k1 - part.k0, w = Math.max(1, Math.ceil(Math.max(nq, nk) / R));
    const rows = Math.ceil(nq / w), cols = Math.ceil(nk / w);
    const out = new Float32Array(rows * cols), outMask = mask ? new Uint8Array(rows * cols) : null;
    let max = 0, arg = part.q0 * T + part.k0;
    for (let q = 0; q < nq; q++) {
      for (let k = 0; k < nk; k++) {
        const at = (part.q0 + q) * T + part.k0 + k, v = values[at], i = Math.floor(q / w) * cols + Math.floor(k / w);
        if (v > out[i]) out[i] = v;
        if (v > max) { max = v; arg = at; }
        if (outMask && mask[at] === 1) outMask[i] = 1;
      }
    }
    return { values: Array.from(out), mask: outMask && Array.from(outMask), rows, cols, w, max, arg };
  };
  let seed = 7;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  let pooledCells = 0;
  // masks: causal, cells at random, a sliding band of 5 keys with its first 3 rows attending to
  // none (each of the part's rows then begins and ends its cells mid-bin)
  const masks = {
    causal: (q, k) => k <= q,
    random: () => rand() >= 0.3,
    band: (q, k) => q >= 3 && k <= q && q - k < 5,
  };
  for (const [T, part, R, kind] of [[50, { q0: 0, q1: 50, k0: 0, k1: 50 }, 7, 'causal'], [61, { q0: 3, q1: 40, k0: 10, k1: 61 }, 9, 'random'], [40, { q0: 0, q1: 40, k0: 0, k1: 40 }, 64, 'causal'], [33, { q0: 5, q1: 6, k0: 0, k1: 33 }, 4, 'random'], [45, { q0: 0, q1: 45, k0: 0, k1: 45 }, 6, 'band'], [45, { q0: 1, q1: 30, k0: 2, k1: 41 }, 4, 'band']]) {
    // values in steps of 1/8, so that bins and rows tie on their largest
    const values = Float32Array.from({ length: T * T }, () => Math.floor(rand() * 8) / 8);
    const mask = Uint8Array.from({ length: T * T }, (_, i) => (masks[kind](Math.floor(i / T), i % T) ? 1 : 0));
    // under a mask the values are probabilities: 0 where it hides a cell, but in a row it hides
    // whole (whatever the engine wrote there is pooled)
    const hidesRow = (q) => mask.subarray(q * T, (q + 1) * T).every((x) => x === 0);
    const probs = values.map((v, i) => (mask[i] === 1 || hidesRow(Math.floor(i / T)) ? v : 0));
    for (const [m, v] of [[mask, probs], [null, values]]) {
      const got = pooledPart(v, m, T, part, R), want = cellByCell(v, m, T, part, R);
      assert.deepEqual({ ...got, values: Array.from(got.values), mask: got.mask && Array.from(got.mask) }, want, `T ${T}, part ${JSON.stringify(part)}, R ${R}`);
      pooledCells += want.values.length;
    }
  }
  assert.ok(pooledCells > 100, 'parts pooled into bins of several cells');
});

test('a head past 2,048 tokens is max-pooled to the heatmap\'s pixels: one strong cell shows where it is, in a canvas of the screen\'s size; zoomed in, each cell again', async () => {
  const p = await open('#e=cpu', { width: 1280, height: 900 });
  const got = await p.page.evaluate(async () => {
    const { render } = await import('/web/views/head.js');
    // a causal head of 3,000 positions, faint everywhere but one cell
    const T = 3000, values = new Float32Array(T * T), mask = new Uint8Array(T * T);
    for (let q = 0; q < T; q++) for (let k = 0; k <= q; k++) { mask[q * T + k] = 1; values[q * T + k] = 0.002; }
    const [Q, K] = [2000, 1234];
    values[Q * T + K] = 1;
    const labels = Array.from({ length: T }, (_, i) => `t${i}`);
    const run = { id: 'pooled', T, B: 1, head: () => values, maskOf: () => mask, results: [{ labels, tokens: labels }], probMax: () => 1 };
    const target = document.createElement('div');
    target.style.width = '480px';
    document.body.append(target);
    // a cell's darkest device pixel and its place, where the layout puts cell (q, k)
    const at = (q, k) => {
      const c = target.querySelector('.heat'), d = c.dataset, r = c.width / parseFloat(c.style.width);
      const x = Math.floor((+d.x0 + (k - +d.k0 + 0.5) * +d.cell) * r), y = Math.floor((+d.y0 + (q - +d.q0 + 0.5) * +d.cell) * r);
      const px = c.getContext('2d').getImageData(Math.max(0, x - 1), Math.max(0, y - 1), 3, 3).data;
      let dark = 255;
      for (let i = 0; i < px.length; i += 4) dark = Math.min(dark, px[i]);
      return dark;
    };
    const shot = () => {
      const c = target.querySelector('.heat');
      return { backing: [c.width, c.height], css: [parseFloat(c.style.width), parseFloat(c.style.height)], cell: +c.dataset.cell, n: +c.dataset.n, strong: at(Q, K), faint: at(2600, 300), above: at(300, 2600) };
    };
    const out = {};
    render(target, run, { item: 0, layer: 0, head: 0, scale: 'one' });
    out.fit = shot();
    // a window still wider than the screen's pixels, from another origin: pooled in its own frame
    render(target, run, { item: 0, layer: 0, head: 0, scale: 'one', win: { q0: 700, k0: 30, n: 2600 } });
    out.window = shot();
    render(target, run, { item: 0, layer: 0, head: 0, scale: 'one', win: { q0: Q - 10, k0: K - 12, n: 32 } });
    out.zoomed = { ...shot(), left: at(Q, K - 1), below: at(Q + 1, K) };
    target.remove();
    return { ...out, dpr: devicePixelRatio };
  });
  await p.page.close();
  for (const name of ['fit', 'window']) {
    const v = got[name];
    assert.ok(v.cell * got.dpr < 1, `${name}: cells under a device pixel (${v.cell} px)`);
    assert.ok(v.backing[0] <= Math.ceil(v.css[0] * got.dpr) && v.backing[1] <= Math.ceil(v.css[1] * got.dpr), `${name}: the canvas is its own size, not a pixel a row (${v.backing} for ${v.css} CSS px)`);
    assert.ok(v.strong < 60, `${name}: the one strong cell shows where it is (red ${v.strong})`);
    assert.ok(v.faint > 200, `${name}: a faint region stays faint (red ${v.faint})`);
  }
  assert.equal(got.window.n, 2600);
  assert.ok(got.zoomed.cell >= 7, `zoomed in: ${got.zoomed.cell} px cells`);
  assert.ok(got.zoomed.strong < 60 && got.zoomed.left > 200 && got.zoomed.below > 200, `zoomed in, the strong cell alone is dark (${got.zoomed.strong}; left ${got.zoomed.left}, below ${got.zoomed.below})`);
  assert.ok(got.fit.above !== got.fit.faint, 'the masked triangle is drawn apart from the faint cells');
});

test('run option scores: false returns the probabilities alone, the same as with the scores', async () => {
  const p = await open('#e=cpu', {}, noGpu);
  const got = await p.page.evaluate(async () => {
    // the wasm core as the worker runs it (the SIMD128 build), on the page's default model
    const src = `self.onmessage = async ({ data: [pkg, base] }) => {
      try {
        const m = await import(pkg);
        await m.default();
        const get = async (f) => new Uint8Array(await (await fetch(new URL(f, base + '/'))).arrayBuffer());
        const s = await m.loadSession('t', await get('config.json'), m.WeightsFile.fromBytes('model.safetensors', await get('model.safetensors')), await get('tokenizer.json'), 'cpu');
        const text = ['the scores are kept unless asked not to'];
        const [kept, alone] = [await s.run(text, undefined, 'padding', 'cpu', {}), await s.run(text, undefined, 'padding', 'cpu', { scores: false })];
        // each item's records, one a layer: its attention, then (kept) its scores
        const named = (r, name) => r.records[0].filter((x) => x.name === name);
        const count = (recs) => recs.reduce((n, x) => n + x.values.length, 0);
        const [a, b] = [named(kept, 'attention'), named(alone, 'attention')];
        const same = a.length === b.length && a.every((x, l) => x.layer === b[l].layer && x.values.length === b[l].values.length && x.values.every((v, i) => v === b[l].values[i]));
        self.postMessage({ scoresKept: count(named(kept, 'scores')), scoresAlone: named(alone, 'scores').length === 0, size: count(b), same });
      } catch (e) { self.postMessage({ error: String(e.stack || e) }); }
    };`;
    const w = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })), { type: 'module' });
    const base = new URL(window.attnscope.store.get().modelSource.base, location.href).href.replace(/\/$/, '');
    const pkg = new URL('web/pkg/attnscope.js', location.href).href;
    const out = await new Promise((r) => { w.onmessage = (e) => r(e.data); w.postMessage([pkg, base]); });
    w.terminate();
    return out;
  });
  assert.equal(got.error, undefined, got.error);
  assert.ok(got.size > 0);
  assert.equal(got.scoresKept, got.size, 'by default every score comes back, one per probability');
  assert.equal(got.scoresAlone, true, 'with scores: false there are none');
  assert.equal(got.same, true, 'and the probabilities are the same bits');
  await p.page.close();
});

test('a run\'s summary, folded by the engine on its threads, is summary.js `summarise` over its records, bit for bit: thumbnails past 64 tokens, a batch\'s padding, no scores', async () => {
  const p = await open('#e=cpu', {}, noGpu);
  const got = await p.page.evaluate(async () => {
    // the wasm core as the worker runs it: the threaded build (the page is cross-origin
    // isolated), then the SIMD128 one
    const src = `self.onmessage = async ({ data: [origin, base] }) => {
      try {
        const { summarise, engineSummary } = await import(origin + '/web/summary.js');
        const { runHeads } = await import(origin + '/web/result.js');
        const out = [];
        for (const [pkg, threads] of [['pkg-threads', 2], ['pkg', 1]]) {
          const m = await import(origin + '/web/' + pkg + '/attnscope.js');
          await m.default();
          if (threads > 1) await m.initThreadPool(threads);
          const get = async (f) => new Uint8Array(await (await fetch(new URL(f, base + '/'))).arrayBuffer());
          const s = await m.loadSession('t', await get('config.json'), m.WeightsFile.fromBytes('model.safetensors', await get('model.safetensors')), await get('tokenizer.json'), 'cpu');
          const long = 'the summary of every head is folded where the probabilities are, '.repeat(7);
          for (const [texts, options] of [[['a short one'], {}], [[long], {}], [[long, 'and a shorter one beside it'], {}], [[long], { scores: false }]]) {
            const r = await s.run(texts, undefined, 'padding', 'cpu', options);
            const heads = runHeads(r.records, r.info.shape);
            const want = summarise(heads.head, heads.scoresOf, r.mask, r.info.shape);
            const engine = engineSummary(r.summary, r.mask, r.info.shape);
            const same = (a, b) => (a === null ? b === null : b !== null && a.length === b.length && a.every((v, i) => Object.is(v, b[i])));
            const fields = ['thumbs', 'thumbMask', 'probMax', 'probArg', 'scoreMax'];
            out.push({ pkg, T: r.info.shape[3], B: r.info.shape[0], R: engine.R, wantR: want.R, differ: fields.filter((k) => !same(want[k], engine[k])), largest: Math.max(...engine.scoreMax), argType: engine.probArg.constructor.name });
          }
          s.free();
        }
        self.postMessage(out);
      } catch (e) { self.postMessage({ error: String(e.stack || e) }); }
    };`;
    const w = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })), { type: 'module' });
    const base = new URL(window.attnscope.store.get().modelSource.base, location.href).href.replace(/\/$/, '');
    const out = await new Promise((r) => { w.onmessage = (e) => r(e.data); w.postMessage([location.origin, base]); });
    w.terminate();
    return out;
  });
  assert.equal(got.error, undefined, got.error);
  assert.equal(got.length, 8);
  for (const g of got) {
    assert.deepEqual(g.differ, [], `${g.pkg}, ${g.B} × ${g.T} tokens: ${g.differ.join(', ')} differ`);
    assert.equal(g.R, g.wantR);
    assert.equal(g.argType, 'Int32Array');
  }
  // the cases: no thumbnails at a few tokens, thumbnails past 64 (alone and in a batch), and
  // without scores every largest |score| 0
  assert.deepEqual(got.map((g) => [g.B, g.T > 64, g.R > 0]).slice(0, 4), [[1, false, false], [1, true, true], [2, true, true], [1, true, true]]);
  assert.ok(got[1].largest > 0 && got[3].largest === 0);
  await p.page.close();
});

test('auto shows the first view on the CPU at once, then keeps the faster engine and says why in one line; a long run greys the stale views', async () => {
  const p = await open('');
  const { page } = p;
  // the first view did not wait for WebGPU's timing (its pipelines compile for seconds here)
  const first = await page.evaluate(() => ({ line: window.attnscope.engine.line, backend: window.attnscope.result.backend }));
  assert.deepEqual(first, { line: 'auto: the CPU engine while WebGPU is timed', backend: 'cpu' });
  await page.waitForFunction(() => /^auto: (CPU engine|WebGPU), /.test(window.attnscope.engine.line), null, { timeout: 120000 });
  const s = await page.evaluate(() => window.attnscope.engine);
  assert.match(s.line, /^auto: (CPU engine|WebGPU), [\d.]+ m?s a pass/);
  assert.ok(!s.line.includes('\n'));
  const [cpuMs, gpuMs] = [s.details.match(/CPU ([\d.]+) (m?s)/), s.details.match(/WebGPU \(.*\) ([\d.]+) (m?s)/)].map((m) => Number(m[1]) * (m[2] === 's' ? 1000 : 1));
  // WebGPU chosen: the view is run again on it at once
  if (gpuMs < cpuMs) await page.waitForFunction(() => window.attnscope.result.backend !== 'cpu', null, { timeout: 60000 });
  const chose = (await page.evaluate(() => window.attnscope.result.backend)) === 'cpu' ? 'cpu' : 'gpu';
  assert.equal(chose, cpuMs <= gpuMs ? 'cpu' : 'gpu', `auto kept the faster engine (CPU ${cpuMs} ms, WebGPU ${gpuMs} ms)`);
  // a quick run (the first, and a few words typed) shows no "computing…" once it is done
  const noteShown = () => page.evaluate(() => getComputedStyle(document.getElementById('busy')).visibility === 'visible');
  assert.equal(await noteShown(), false, '"computing…" is hidden after the first run');
  await page.fill('#sentence', 'a short one');
  await resultFor(page, '[CLS] a short one [SEP]');
  assert.equal(await noteShown(), false, '"computing…" is hidden after a quick run');
  await page.evaluate(() => {
    window.__busy = false;
    window.__note = false;
    new MutationObserver(() => {
      if (!document.body.classList.contains('busy')) return;
      window.__busy = true;
      window.__note ||= getComputedStyle(document.getElementById('busy')).visibility === 'visible';
    }).observe(document.body, { attributes: true });
  });
  // 400 tokens: a run far longer than the veil's delay (BUSY_DELAY_MS), which a keystroke's is not
  await page.fill('#sentence', 'a new sentence to run '.repeat(80).trim());
  await page.waitForFunction(() => { const s = window.attnscope.store.get(); return s.run?.T > 300 && !s.busy && s.rendered.startsWith(s.run.id + ':'); }, null, { timeout: 60000 });
  assert.equal(await page.evaluate(() => window.__busy), true, 'the page was marked busy while the run was under way');
  assert.equal(await page.evaluate(() => window.__note), true, '"computing…" was shown while the run was under way');
  assert.equal(await page.evaluate(() => document.body.classList.contains('busy')), false);
  assert.equal(await noteShown(), false, '"computing…" is hidden once the run is done');
  assertClean(p);
  await page.close();
});

test('a corrupt model file is an error next to the model controls, not a blank page', async () => {
  const p = await openPage(browser);
  const { page } = p;
  await page.route('**/model.safetensors', (route) => route.fulfill({ status: 200, contentType: 'application/octet-stream', body: Buffer.from('this is not a safetensors file') }));
  await page.goto(server.url + '#e=cpu');
  await page.waitForSelector('#error:not([hidden])', { timeout: 60000 });
  assert.match(await page.textContent('#error'), /model\.safetensors/);
  assert.match(await page.textContent('#model-name'), /no model loaded: see "Model and engine" below/);
  await page.screenshot({ path: path.join(ARTIFACTS, 'corrupt-model.png') });
  assertClean(p);
  await page.close();
});

test('512 tokens: every row drawn, no long task over 50 ms, readable zoom, thinned lines', async () => {
  const p = await open('#e=cpu&l=0&h=0');
  const { page } = p;
  await page.evaluate(() => {
    window.__long = [];
    new PerformanceObserver((l) => window.__long.push(...l.getEntries().map((e) => e.duration))).observe({ type: 'longtask' });
  });
  await page.fill('#sentence', 'word '.repeat(600));
  await page.waitForFunction(() => window.attnscope.result.tokens.length === 512, null, { timeout: 120000 });
  await page.waitForFunction(() => document.querySelector('#model-view').dataset.drawn?.split('|')[0] === String(window.attnscope.store.get().run.id) && document.querySelector('#head-view .heat').dataset.t === '512', null, { timeout: 60000 });
  // arrow keys at 512 tokens: the next head, drawn without blocking
  await page.locator('#model-view .grid').focus();
  await page.keyboard.press('ArrowRight');
  await page.waitForFunction(() => /head 1/.test(document.querySelector('#head-view .focus-label').textContent));
  await page.keyboard.press('ArrowDown');
  // the line view draws a task after the head view
  await page.waitForFunction(() => /layer 1, head 1/.test(document.querySelector('#head-view .focus-label').textContent) && /^line view of layer 1, head 1:/.test(document.querySelector('#lines-view canvas').getAttribute('aria-label')));
  await page.waitForTimeout(300);
  const long = await page.evaluate(() => window.__long);
  assert.deepEqual(long.filter((d) => d > 50), [], `no main-thread task over 50 ms (long tasks: ${long.map((d) => d.toFixed(0)).join(', ')})`);
  assert.match(await page.textContent('#input-status'), /truncated/);
  // every one of the 512 rows has ink in the head view (one backing pixel a row at least)
  const rows = await page.evaluate(() => {
    const c = document.querySelector('#head-view .heat');
    const d = c.dataset, r = c.width / parseFloat(c.style.width);
    const x = Math.round((+d.x0 + 0.5 * +d.cell) * r); // the [CLS] key column: every row attends to it
    const img = c.getContext('2d').getImageData(x, 0, 1, c.height).data;
    let drawn = 0;
    for (let q = 0; q < 512; q++) {
      const y = Math.floor((+d.y0 + (q + 0.5) * +d.cell) * r);
      if (img[4 * y + 3] > 0) drawn++;
    }
    return { drawn, px: (+d.cell) * r };
  });
  assert.equal(rows.drawn, 512, 'every row is drawn');
  assert.ok(rows.px >= 1, `a row has at least one device pixel (${rows.px})`);
  const inkLines = await page.evaluate((ink) => eval(ink)(document.querySelector('#lines-view canvas')), INK);
  assert.ok(inkLines < 0.5, `the line view is thinned, not a solid block (${inkLines})`);
  // zoom: labels become legible
  for (let i = 0; i < 4; i++) await page.click('#head-view .zoom-in');
  await page.waitForFunction(() => +document.querySelector('#head-view .heat').dataset.n === 32); // 512 → 256 → 128 → 64 → 32, drawn in a later task
  const z = await page.evaluate(() => ({ ...document.querySelector('#head-view .heat').dataset }));
  assert.equal(z.labels, 'true', 'zoomed in, the token labels are drawn');
  assert.ok(+z.n <= 64 && +z.cell >= 7, `zoomed to a readable window (${z.n} tokens, ${z.cell} px cells)`);
  // the line view follows the window; a token selected outside it: none of the window's rows
  // chosen (every query label faint, no lines), and the note says why
  const DARK = `(c) => { const d = c.getContext('2d').getImageData(0, 0, c.width / 2, c.height).data; let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 200 && d[i] < 60 && d[i + 1] < 70) n++; return n; }`;
  const darkQueries = () => page.evaluate((f) => eval(f)(document.querySelector('#lines-view canvas')), DARK);
  await page.waitForFunction(() => /^tokens \d+–\d+ of 512/.test(document.querySelector('#lines-view .lines-note').textContent));
  assert.ok(await darkQueries() > 100, 'the window\'s query labels in full ink');
  await page.evaluate((q) => window.attnscope.store.update({ sel: [q] }), +z.q0 + +z.n < 512 ? 511 : 0);
  await page.waitForFunction(() => /lines of the selected tokens \(outside this window\)/.test(document.querySelector('#lines-view .lines-note').textContent));
  assert.equal(await darkQueries(), 0, 'a selection outside the window: every query label faint');
  await page.evaluate(() => window.attnscope.store.update({ sel: [] }));
  await page.waitForFunction(() => /weights ≥/.test(document.querySelector('#lines-view .lines-note').textContent));
  assert.ok(await darkQueries() > 100, 'the selection cleared, the query labels in full ink again');
  // hover redraws only the overlay
  const hoverMs = await page.evaluate(() => {
    const o = document.querySelector('#head-view .overlay');
    const r = o.getBoundingClientRect();
    const times = [];
    for (let i = 0; i < 20; i++) {
      const t = performance.now();
      o.dispatchEvent(new MouseEvent('pointermove', { clientX: r.left + r.width * (0.4 + i / 100), clientY: r.top + r.height * 0.6, bubbles: true }));
      times.push(performance.now() - t);
    }
    return times.sort((a, b) => a - b)[10];
  });
  assert.ok(hoverMs <= 4, `hover handling takes ${hoverMs.toFixed(2)} ms (≤ 4)`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'long-512.png') });
  assertClean(p);
  await page.close();
});

test('sharp on HiDPI, fits a phone, the head view beside the grid on a laptop, large type for presenting', async () => {
  const phone = await open('#e=cpu', { width: 390, height: 844, scale: 2 });
  let page = phone.page;
  await allDrawn(page);
  const fitPhone = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    head: document.querySelector('#head-view .heat').getBoundingClientRect().right,
    ratio: document.querySelector('#head-view .heat').width / parseFloat(document.querySelector('#head-view .heat').style.width),
  }));
  assert.ok(fitPhone.scroll <= 390, `no horizontal scrolling on a phone (${fitPhone.scroll} px wide)`);
  assert.ok(fitPhone.head <= 390, `the head view fits (${fitPhone.head})`);
  assert.ok(fitPhone.ratio >= 2, `the backing store follows devicePixelRatio (${fitPhone.ratio})`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'app-390.png'), fullPage: true });
  assertClean(phone);
  await page.close();
  const laptop = await open('#e=cpu', { width: 1280, height: 800, scale: 2 });
  page = laptop.page;
  await allDrawn(page);
  const boxes = await page.evaluate(() => {
    const b = (s) => document.querySelector(s).getBoundingClientRect();
    return { grid: b('#model-view'), head: b('#head-view .heat') };
  });
  assert.ok(boxes.head.bottom <= 800, `the head view is above the fold (bottom ${boxes.head.bottom})`);
  assert.ok(boxes.head.left > boxes.grid.right - 1 && Math.abs(boxes.head.top - boxes.grid.top) < 80, 'the head view is beside the grid');
  await page.screenshot({ path: path.join(ARTIFACTS, 'app-1280.png') });
  await page.check('#presenter');
  await page.waitForFunction(() => location.hash.includes('present=1'));
  assert.equal(await page.evaluate(() => getComputedStyle(document.body).fontSize), '20px');
  assertClean(laptop);
  await page.close();
  const projector = await open('#e=cpu&present=1', { width: 1920, height: 1080, scale: 2 });
  await projector.page.screenshot({ path: path.join(ARTIFACTS, 'app-1920-presenter.png') });
  assertClean(projector);
  await projector.page.close();
});

test('clearing the sentence empties the views; worked examples; share', async () => {
  const p = await open('#e=cpu');
  const { page } = p;
  await page.fill('#sentence', '');
  await page.waitForFunction(() => document.querySelector('#head-view').classList.contains('empty'));
  assert.equal(await page.evaluate(() => window.attnscope.result), null, 'no stale result');
  assert.match(await page.textContent('#input-status'), /Type a sentence/);
  await page.selectOption('#example', 'pair');
  await resultFor(page, '[CLS] the cat sat on the mat . [SEP] it was very comfortable . [SEP]');
  assert.equal(await page.inputValue('#pair'), 'It was very comfortable.');
  await page.selectOption('#example', 'batch');
  await page.waitForFunction(() => window.attnscope.result.batch.length === 3 && window.attnscope.result.tokens.includes('[PAD]'));
  await page.click('#share');
  const sn = await page.evaluate(() => ({ link: document.getElementById('share-link').value, iframe: document.getElementById('share-iframe').value, el: document.getElementById('share-element').value }));
  assert.ok(sn.link.startsWith(server.url) && sn.link.includes('batch=1'), sn.link);
  assert.match(sn.iframe, /^<iframe src="[^"]*embed=head[^"]*"/);
  // the whole batch, as the element takes it (issue 29: every setting of the view kept)
  // (its content: the line a page shows until the script runs, or where it cannot load)
  assert.ok(sn.el.includes('<attn-scope sentence="hi" batch="time flies like an arrow|The quick brown fox jumps over the lazy dog by the river.|hi" item="2" mask="padding" view="head" layer="0" head="0" engine="cpu">attnscope draws its view here once '), sn.el);
  assert.ok(sn.el.endsWith('the iframe snippet works anywhere.</attn-scope>'), sn.el);
  assertClean(p);
  await page.close();
});

test('text past 512 tokens is truncated with a notice', async () => {
  const p = await open('#e=cpu');
  const { page } = p;
  await page.fill('#sentence', 'word '.repeat(600));
  await page.waitForFunction(() => window.attnscope.result.tokens.length === 512, null, { timeout: 120000 });
  assert.match(await page.textContent('#input-status'), /longer than the model's 512 positions and was truncated/);
  assertClean(p);
  await page.close();
});

test('another checkpoint loads from files and from a URL; switching the engine keeps it; a failed URL keeps the old one', async () => {
  const p = await open('#e=cpu');
  const { page, requests } = p;
  const tiny = path.join(ROOT, 'tests/fixtures/models/tiny-bert');
  await page.setInputFiles('#files', ['config.json', 'model.safetensors', 'tokenizer.json'].map((f) => path.join(tiny, f)));
  await page.waitForFunction(() => window.attnscope.info && window.attnscope.info.layers === 2);
  assert.match(await page.textContent('#model-name'), /2 layers × 3 heads · hidden 24/);
  await page.fill('#sentence', 'the cat sat on the mat');
  await page.waitForFunction(() => window.attnscope.result.attention.length === 2 && window.attnscope.result.tokens.join(' ') === '[CLS] the cat sat on the mat [SEP]');
  await gridDrawn(page); // the grid is rebuilt for 2 × 3 heads tasks after the result lands
  assert.equal(await page.locator('#model-view .cell').count(), 6);
  // switching the engine keeps the loaded checkpoint and downloads nothing
  const before = requests.filter((u) => /model\.safetensors/.test(u)).length;
  await page.selectOption('#engine', 'auto');
  await page.waitForFunction(() => window.attnscope.engine && /^auto|WebGPU is not/.test(window.attnscope.engine.line) && window.attnscope.result.attention.length === 2, null, { timeout: 60000 });
  assert.equal(requests.filter((u) => /model\.safetensors/.test(u)).length, before, 'no download when switching the engine');
  assert.equal(await page.evaluate(() => window.attnscope.info.layers), 2, 'still the checkpoint from files');
  // a missing file is named
  await page.setInputFiles('#files', [path.join(tiny, 'config.json')]);
  await page.waitForSelector('#error:not([hidden])');
  assert.match(await page.textContent('#error'), /model\.safetensors, tokenizer\.json/);
  // a URL that fails: an error that says the old model stays, and it does
  await page.fill('#model-url', server.url + 'assets/models/nothing-here/');
  await page.click('#load-url');
  await page.waitForFunction(() => /HTTP 404/.test(document.getElementById('error').textContent));
  assert.match(await page.textContent('#error'), /still showing local files/);
  assert.equal(await page.evaluate(() => window.attnscope.info.layers), 2);
  await page.fill('#sentence', 'the dog sat');
  await page.waitForFunction(() => window.attnscope.result.tokens.join(' ') === '[CLS] the dog sat [SEP]');
  // back to the default model from its base URL; the URL goes into the link
  const url = server.url + 'assets/models/all-MiniLM-L6-v2/';
  await page.fill('#model-url', url);
  await page.click('#load-url');
  await page.waitForFunction(() => window.attnscope.info.layers === 6 && window.attnscope.result.attention.length === 6, null, { timeout: 120000 });
  assert.equal(await page.isVisible('#error'), false);
  await page.waitForFunction((u) => new URLSearchParams(location.hash.slice(1)).get('model') === u, url); // the link follows
  assertClean(p);
  await page.close();
});

test('a second visit starts without downloading the model again', async () => {
  const ctx = await noGpu.newContext();
  const first = await ctx.newPage();
  const seen = [];
  ctx.on('request', (r) => seen.push(r.url()));
  await first.goto(server.url + '#e=cpu');
  assert.equal(await ready(first), null);
  await first.close();
  const n = seen.filter((u) => u.endsWith('model.safetensors')).length;
  const second = await ctx.newPage();
  await second.goto(server.url + '#e=cpu');
  assert.equal(await ready(second), null);
  assert.equal(seen.filter((u) => u.endsWith('model.safetensors')).length, n, 'the model came from the browser\'s cache');
  await ctx.close();
});

/** The head view's heatmap colour at the centre of every visible cell: [q][k] → [r, g, b]. */
const heatPixels = (page) => page.evaluate(() => {
  const c = document.querySelector('#head-view .heat');
  const d = c.dataset, r = c.width / parseFloat(c.style.width), ctx = c.getContext('2d');
  return Array.from({ length: +d.n }, (_, q) => Array.from({ length: +d.n }, (_, k) => Array.from(ctx.getImageData(Math.round((+d.x0 + (k + 0.5) * +d.cell) * r), Math.round((+d.y0 + (q + 0.5) * +d.cell) * r), 1, 1).data).slice(0, 3)));
});
/** Waits until the head view has drawn `names` as its selected rows (none: no selection). */
const selDrawn = (page, names) => page.waitForFunction((n) => {
  const label = document.querySelector('#head-view .heat')?.getAttribute('aria-label') ?? '';
  return n ? label.endsWith(`; selected rows: ${n}`) : !label.includes('selected rows');
}, names, { timeout: 60000 });
/** Where query token q's label is in the head view (the row labels left of the cells). */
async function rowLabel(page, q) {
  const { g, y } = await headCell(page, q, 0);
  const box = await page.locator('#head-view .overlay').boundingBox();
  return { x: box.x + +g.x0 / 2, y };
}
const meanRows = (rows) => rows[0].map((_, k) => rows.reduce((a, r) => a + r[k], 0) / rows.length);
const maxAbs = (a, b) => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0);

test('selecting query tokens: only their rows at full colour, their mean as a strip, in the link; Esc clears', async () => {
  const text = 'the cat sat on the mat';
  const p = await open(`#e=cpu&s=${encodeURIComponent(text)}&l=2&h=5`, { width: 1280, height: 800, scale: 2 });
  const { page } = p;
  const want = cli(['--', text]).results[0];
  await resultFor(page, want.tokens.join(' '));
  await allDrawn(page);
  const before = await heatPixels(page);
  // a click on a query token's label keeps only its row
  let at = await rowLabel(page, 2);
  await page.mouse.click(at.x, at.y);
  await selDrawn(page, 'cat');
  let sel = await page.evaluate(() => window.attnscope.selection);
  assert.deepEqual(sel.rows, [2]);
  assert.ok(maxAbs(sel.combined, Array.from(want.attention[2][5][2])) <= 1e-4, 'the strip is the CLI\'s row');
  const after = await heatPixels(page);
  for (let q = 0; q < before.length; q++) {
    for (let k = 0; k < before.length; k++) {
      const [b, a] = [before[q][k], after[q][k]];
      if (q === 2) assert.ok(b.every((v, c) => Math.abs(v - a[c]) <= 2), `the selected row keeps its colour (${q}, ${k}: ${b} → ${a})`);
      else assert.ok(a.every((v, c) => v >= b[c] - 2 && v >= 190), `an unselected row is faded (${q}, ${k}: ${b} → ${a})`);
    }
  }
  // shift-click adds a token: the mean of the two rows
  at = await rowLabel(page, 4);
  await page.keyboard.down('Shift');
  await page.mouse.click(at.x, at.y);
  await page.keyboard.up('Shift');
  await selDrawn(page, 'cat, on');
  sel = await page.evaluate(() => window.attnscope.selection);
  assert.deepEqual(sel.rows, [2, 4]);
  assert.ok(maxAbs(sel.combined, meanRows([2, 4].map((q) => Array.from(want.attention[2][5][q])))) <= 1e-4, 'the strip is the mean of the CLI\'s rows');
  assert.ok(Math.abs(sel.combined.reduce((a, b) => a + b, 0) - 1) <= 1e-5, 'the strip sums to 1');
  await page.waitForFunction(() => location.hash.includes('q=2,4'));
  // the strip: under the heatmap's columns, labelled with its strongest keys, values on hover
  const strip = await page.evaluate(() => {
    const b = (s) => document.querySelector(s).getBoundingClientRect();
    const st = document.querySelector('#head-view .sel-strip');
    return { strip: b('#head-view .sel-strip'), heat: b('#head-view .heat'), label: st.getAttribute('aria-label'), hidden: st.hidden, tools: document.querySelector('#head-view .sel-label').textContent };
  });
  assert.equal(strip.hidden, false);
  assert.ok(Math.abs(strip.strip.left - strip.heat.left) < 0.5 && Math.abs(strip.strip.width - strip.heat.width) < 0.5, 'the strip spans the heatmap\'s columns');
  assert.ok(strip.strip.top >= strip.heat.bottom && strip.strip.top - strip.heat.bottom < 12, 'the strip sits right under the heatmap');
  assert.match(strip.label, /^selected cat \+ on \(mean of 2 rows\): strongest keys [^,]+ 0\.\d\d, [^,]+ 0\.\d\d, [^,]+ 0\.\d\d$/);
  assert.equal(strip.tools, 'selected: cat + on');
  const g = await page.evaluate(() => ({ ...document.querySelector('#head-view .heat').dataset }));
  await page.mouse.move(strip.strip.x + +g.x0 + 3.5 * +g.cell, strip.strip.y + strip.strip.height / 2);
  await page.waitForSelector('#head-view .tooltip:not([hidden])');
  assert.equal(await page.textContent('#head-view .tooltip'), `cat + on → sat: ${sel.combined[3].toFixed(4)}`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'selection-1280.png') });
  await page.locator('#head-panel').screenshot({ path: path.join(ARTIFACTS, 'selection-head.png') });
  // shift-click on a selected token removes it (the element screenshot may have scrolled the page)
  at = await rowLabel(page, 4);
  await page.keyboard.down('Shift');
  await page.mouse.click(at.x, at.y);
  await page.keyboard.up('Shift');
  await selDrawn(page, 'cat');
  // the link restores the selection
  await page.keyboard.down('Shift');
  await page.mouse.click(at.x, at.y);
  await page.keyboard.up('Shift');
  await page.waitForFunction(() => location.hash.includes('q=2,4'));
  const link = await page.evaluate(() => location.hash.replace('q=2,4', 'q=2,4,99')); // 99: past T, clamped away
  const again = await open(link, { width: 390, height: 844, scale: 2 });
  await resultFor(again.page, want.tokens.join(' '));
  await selDrawn(again.page, 'cat, on');
  assert.deepEqual(await again.page.evaluate(() => window.attnscope.selection.rows), [2, 4]);
  await again.page.waitForFunction(() => location.hash.includes('q=2,4&') || location.hash.endsWith('q=2,4'));
  const fits = await again.page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, strip: document.querySelector('#head-view .sel-strip').getBoundingClientRect().right }));
  assert.ok(fits.scroll <= 390 && fits.strip <= 390, `the strip fits a phone (${JSON.stringify(fits)})`);
  await again.page.locator('#head-panel').screenshot({ path: path.join(ARTIFACTS, 'selection-390.png') });
  assertClean(again);
  await again.page.close();
  // Escape clears; so does the button
  await page.mouse.move(2, 2);
  await page.keyboard.press('Escape');
  await selDrawn(page, null);
  assert.equal(await page.evaluate(() => window.attnscope.selection), null);
  await page.waitForFunction(() => !location.hash.includes('q='));
  assert.equal(await page.isVisible('#head-view .sel-strip'), false);
  // from the keyboard: Enter selects the cursor's row
  await page.focus('#head-view .overlay');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Enter');
  await selDrawn(page, 'the');
  await page.click('#head-view .sel-clear');
  await selDrawn(page, null);
  // a query token in the line view selects it; its lines only
  const box = await page.locator('#lines-view canvas').boundingBox();
  const step = (box.height - 12) / want.tokens.length;
  await page.mouse.click(box.x + 12, box.y + 6 + 3.5 * step);
  await selDrawn(page, 'sat');
  assert.deepEqual(await page.evaluate(() => window.attnscope.selection.rows), [3]);
  await page.mouse.move(2, 2);
  await page.waitForFunction(() => /lines of the selected "sat"/.test(document.querySelector('#lines-view .lines-note').textContent));
  await page.locator('#head-panel').screenshot({ path: path.join(ARTIFACTS, 'selection-lines.png') });
  // new tokens drop the selection
  await page.fill('#sentence', 'a different sentence');
  await resultFor(page, '[CLS] a different sentence [SEP]');
  assert.equal(await page.evaluate(() => window.attnscope.store.get().sel.length), 0);
  await page.waitForFunction(() => !location.hash.includes('q='));
  assertClean(p);
  await page.close();
});

/** Word groups of WordPiece tokens, written independently of web/words.js: `##x` joins the token before. */
function wordGroups(tokens) {
  const words = [];
  tokens.forEach((t, i) => {
    if (t.startsWith('##') && words.length) { words[words.length - 1].label += t.slice(2); words[words.length - 1].pieces.push(i); }
    else words.push({ label: t, pieces: [i] });
  });
  return words;
}
/** A piece-level head as words: to a word the sum over its pieces, from a word the mean. */
const wordHead = (A, words) => words.map((wq) => words.map((wk) => wq.pieces.reduce((a, q) => a + wk.pieces.reduce((b, k) => b + A[q][k], 0), 0) / wq.pieces.length));

test('"words" merges WordPiece pieces in the attention views: sum to a word, mean from a word; off restores the pieces', async () => {
  const text = 'The tokenizer splits unbelievably long words';
  const p = await open(`#e=cpu&s=${encodeURIComponent(text)}&l=1&h=3`, { width: 1280, height: 800, scale: 2 });
  const { page } = p;
  const want = cli(['--', text]).results[0];
  assert.ok(want.tokens.includes('##izer') && want.tokens.includes('##bly'), `the sentence has word pieces: ${want.tokens.join(' ')}`);
  await resultFor(page, want.tokens.join(' '));
  await allDrawn(page);
  const words = wordGroups(want.tokens);
  await page.check('#words');
  await page.waitForFunction((n) => window.attnscope.words?.tokens.length === n && document.querySelector('#head-view .heat').dataset.t === String(n), words.length);
  await page.waitForFunction(() => location.hash.includes('words=1'));
  const got = await page.evaluate(() => {
    const w = window.attnscope.words;
    return { tokens: w.tokens, pieces: w.pieces, attention: w.attention.map((l) => l.map((h) => h.map((r) => Array.from(r)))), result: window.attnscope.result.tokens };
  });
  assert.deepEqual(got.tokens, ['[CLS]', 'the', 'tokenizer', 'splits', 'unbelievably', 'long', 'words', '[SEP]']);
  assert.deepEqual(got.pieces, words.map((w) => w.pieces));
  assert.deepEqual(got.result, want.tokens, 'window.attnscope.result keeps the word pieces');
  let worst = 0, worstSum = 0;
  want.attention.forEach((heads, l) => heads.forEach((A, h) => {
    const W = wordHead(A, words);
    W.forEach((row, q) => {
      worst = Math.max(worst, maxAbs(got.attention[l][h][q], row));
      worstSum = Math.max(worstSum, Math.abs(got.attention[l][h][q].reduce((a, b) => a + b, 0) - 1));
    });
  }));
  console.log(`words vs the CLI's pieces merged: max |Δ| = ${worst.toExponential(2)}, rows sum to 1 within ${worstSum.toExponential(2)}`);
  assert.ok(worst <= 1e-4, `a word cell differs from the sum/mean of the CLI's pieces by ${worst}`);
  assert.ok(worstSum <= 1e-5, `a word row sums to 1 within ${worstSum}`);
  // the grid, head and line views show words; the steps keep the pieces
  await page.waitForFunction(() => {
    const s = window.attnscope.store.get();
    return document.getElementById('model-view').dataset.drawn?.split('|')[0] === `${s.run.id}w`
      && [...document.querySelectorAll('#steps-view figure canvas')].every((c) => c.dataset.n === String(s.run.T));
  });
  const grid = await page.evaluate(() => document.querySelector('#model-view .cell[data-layer="1"][data-head="3"]').getAttribute('aria-label'));
  assert.doesNotMatch(grid, /##/, 'the grid names words');
  assert.match(await page.textContent('#steps-caption'), /per word piece/);
  // a word selection is over words
  const at = await rowLabel(page, 4);
  await page.mouse.click(at.x, at.y);
  await selDrawn(page, 'unbelievably');
  const sel = await page.evaluate(() => window.attnscope.selection);
  assert.ok(maxAbs(sel.combined, wordHead(want.attention[1][3], words)[4]) <= 1e-4);
  await page.mouse.move(2, 2);
  await page.screenshot({ path: path.join(ARTIFACTS, 'words-1280.png') });
  await page.locator('#head-panel').screenshot({ path: path.join(ARTIFACTS, 'words-head.png') });
  const phone = await open(await page.evaluate(() => location.hash), { width: 390, height: 844, scale: 2 });
  await phone.page.waitForFunction((n) => document.querySelector('#head-view .heat')?.dataset.t === String(n), words.length);
  await selDrawn(phone.page, 'unbelievably');
  assert.ok(await phone.page.evaluate(() => document.documentElement.scrollWidth) <= 390);
  await phone.page.locator('#head-panel').screenshot({ path: path.join(ARTIFACTS, 'words-390.png') });
  await phone.page.locator('#model-panel').screenshot({ path: path.join(ARTIFACTS, 'words-390-grid.png') });
  assertClean(phone);
  await phone.page.close();
  // off: the pieces again (the selected word becomes its pieces)
  await page.uncheck('#words');
  await page.waitForFunction((n) => window.attnscope.words === null && document.querySelector('#head-view .heat').dataset.t === String(n), want.tokens.length);
  await page.waitForFunction(() => !location.hash.includes('words='));
  assert.deepEqual(await page.evaluate(() => window.attnscope.selection.rows), [5, 6, 7, 8, 9]);
  // a padded batch: each sentence merges its own pieces
  const texts = ['unbelievably long', 'The tokenizer splits words'];
  const batch = cli(['--', ...texts]).results;
  await page.keyboard.press('Escape');
  await page.check('#words');
  await page.check('#batch-mode');
  await page.fill('#batch', texts.join('\n'));
  await page.waitForFunction(() => window.attnscope.result.batch.length === 2 && window.attnscope.words?.tokens[1] === 'unbelievably');
  for (const b of [0, 1]) {
    if (b) { await page.selectOption('#item', '1'); await page.waitForFunction(() => window.attnscope.words.tokens[2] === 'tokenizer'); }
    const w = wordGroups(batch[b].tokens);
    const g2 = await page.evaluate(() => ({ tokens: window.attnscope.words.tokens, A: Array.from(window.attnscope.words.attention[0][0].flatMap((r) => Array.from(r))), T: window.attnscope.words.tokens.length }));
    assert.deepEqual(g2.tokens.slice(0, w.length), w.map((x) => x.label));
    assert.ok(g2.tokens.slice(w.length).every((t) => t === '[PAD]'));
    const exp = wordHead(batch[b].attention[0][0], w);
    let d = 0;
    exp.forEach((row, q) => row.forEach((v, k) => { d = Math.max(d, Math.abs(v - g2.A[q * g2.T + k])); }));
    assert.ok(d <= 1e-4, `batch item ${b}: words differ from the CLI's merged pieces by ${d}`);
  }
  assertClean(p);
  await page.close();
});
