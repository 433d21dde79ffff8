// The page, end to end, in headless Chromium: typing, tokens, values equal to the CLI's,
// drawn heatmaps, hover, masks, links, the CPU fallback, a corrupt model, screenshots.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, launch, openPage, cli, ARTIFACTS, ROOT } from './harness.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launch(); });
after(async () => { await browser?.close(); server?.stop(); });

async function ready(page) {
  await page.waitForFunction(() => window.attnscope && ((window.attnscope.result && window.attnscope.info) || window.attnscope.error), null, { timeout: 120000 });
  const error = await page.evaluate(() => window.attnscope.error);
  assert.equal(error, null, `the model did not load: ${error}`);
}
const resultFor = (page, tokensJoined) => page.waitForFunction((t) => window.attnscope.result && window.attnscope.result.tokens.join(' ') === t, tokensJoined, { timeout: 60000 });

function maxDiff(pageAtt, cliAtt) {
  let max = 0;
  for (let l = 0; l < cliAtt.length; l++) for (let h = 0; h < cliAtt[l].length; h++)
    for (let q = 0; q < cliAtt[l][h].length; q++) for (let k = 0; k < cliAtt[l][h][q].length; k++)
      max = Math.max(max, Math.abs(pageAtt[l][h][q][k] - cliAtt[l][h][q][k]));
  return max;
}

function assertClean({ problems, requests }) {
  assert.deepEqual(problems, [], 'no uncaught error or console error');
  const foreign = requests.filter((u) => !u.startsWith(server.url) && !u.startsWith('blob:') && !u.startsWith('data:'));
  assert.deepEqual(foreign, [], 'the page makes no request off the app server');
}

test('typing a sentence shows the tokenizer\'s tokens and the CLI\'s attention', async () => {
  const p = await openPage(browser, server.url);
  const { page } = p;
  await ready(page);
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
  }));
  assert.deepEqual(got.tokens, want.tokens);
  const d = maxDiff(got.attention, want.attention);
  console.log(`page (${got.backend}) vs CLI: max |Δ| = ${d.toExponential(2)}, forward ${got.elapsedMs.toFixed(1)} ms`);
  assert.ok(d <= 1e-4, `attention differs from the CLI by ${d}`);
  assert.equal(got.attention.length, 6);
  assert.equal(got.attention[0].length, 12);
  assert.match(await page.textContent('#backend'), /^gpu: .*\(WebGPU\)|^cpu/);
  // the two views the README shows
  await page.locator('#model-panel').screenshot({ path: path.join(ARTIFACTS, 'model-view.png') });
  await page.locator('#head-panel').screenshot({ path: path.join(ARTIFACTS, 'head-view.png') });
  await page.screenshot({ path: path.join(ARTIFACTS, 'app.png'), fullPage: true });
  assertClean(p);
  await page.close();
});

test('heatmaps are drawn, hovering a cell shows its value, arrows move the focus', async () => {
  const p = await openPage(browser, server.url + '#s=time%20flies%20like%20an%20arrow&l=1&h=2');
  const { page } = p;
  await ready(page);
  const inked = await page.evaluate(() => {
    const ink = (c) => {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 240 || d[i + 1] < 240)) n++;
      return n / (d.length / 4);
    };
    return { head: ink(document.getElementById('head-canvas')), grid: [...document.querySelectorAll('#model-view canvas')].map(ink) };
  });
  assert.ok(inked.head > 0.05, `head view is blank (${inked.head})`);
  assert.equal(inked.grid.length, 72);
  assert.ok(inked.grid.every((x) => x > 0.05), 'every grid heatmap is drawn');
  // hover the cell (query 2, key 4) of the focused head
  const box = await page.locator('#head-canvas').boundingBox();
  const geo = await page.evaluate(() => {
    const c = document.getElementById('head-canvas');
    const T = window.attnscope.result.tokens.length;
    return { w: c.width, cell: Math.max(2, Math.min(36, Math.floor((c.width - 92 - 4) / T))) };
  });
  const scale = box.width / geo.w;
  await page.mouse.move(box.x + (92 + 4.5 * geo.cell) * scale, box.y + (92 + 2.5 * geo.cell) * scale);
  await page.waitForSelector('#tooltip:not([hidden])');
  const tip = await page.textContent('#tooltip');
  const want = await page.evaluate(() => window.attnscope.result.attention[1][2][2][4]);
  assert.equal(tip, `flies → an: ${want.toFixed(4)}`);
  assert.match(await page.textContent('#focus-label'), /layer 1, head 2/);
  await page.mouse.move(5, 5);
  await page.locator('#model-view').focus();
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowRight');
  assert.match(await page.textContent('#focus-label'), /layer 2, head 3/);
  assert.match(page.url(), /l=2&h=3/);
  assertClean(p);
  await page.close();
});

test('switching to the causal mask empties the upper triangle; none lets padding leak', async () => {
  const p = await openPage(browser, server.url + '#s=time%20flies%20like%20an%20arrow');
  const { page } = p;
  await ready(page);
  await page.selectOption('#mask', 'causal');
  await page.waitForFunction(() => location.hash.includes('m=causal') && window.attnscope.result.attention[0][0][0][1] === 0);
  const upper = await page.evaluate(() => {
    let max = 0;
    for (const l of window.attnscope.result.attention) for (const h of l)
      h.forEach((row, q) => row.forEach((v, k) => { if (k > q) max = Math.max(max, v); }));
    return max;
  });
  assert.equal(upper, 0, 'the causal mask leaves the upper triangle exactly 0');
  // batch mode: the short sentence is padded; with "none" its [PAD] keys get weight
  await page.check('#batch-mode');
  await page.fill('#batch', 'time flies like an arrow\nhi');
  await page.selectOption('#mask', 'none');
  await page.selectOption('#item', '1');
  await page.waitForFunction(() => window.attnscope.result.item === 1 && window.attnscope.result.tokens.includes('[PAD]') && window.attnscope.result.attention[0][0][1][5] > 0);
  const tokens = await page.evaluate(() => window.attnscope.result.tokens);
  assert.deepEqual(tokens, ['[CLS]', 'hi', '[SEP]', '[PAD]', '[PAD]', '[PAD]', '[PAD]']);
  await page.selectOption('#mask', 'padding');
  await page.waitForFunction(() => window.attnscope.result.attention[0][0][1][5] === 0);
  await page.locator('#steps').screenshot({ path: path.join(ARTIFACTS, 'mask-steps.png') });
  assertClean(p);
  await page.close();
});

test('a link restores the sentence, pair, mask, layer, head and view', async () => {
  const p = await openPage(browser, server.url + '#s=the%20cat%20sat&p=it%20purred&m=causal&l=4&h=7&v=lines');
  const { page } = p;
  await ready(page);
  assert.equal(await page.inputValue('#view'), 'lines');
  assert.equal(await page.isVisible('#head-canvas'), false);
  assert.equal(await page.isVisible('#lines'), true);
  assert.equal(await page.inputValue('#sentence'), 'the cat sat');
  assert.equal(await page.inputValue('#pair'), 'it purred');
  assert.equal(await page.inputValue('#mask'), 'causal');
  assert.match(await page.textContent('#focus-label'), /layer 4, head 7/);
  const want = cli(['--mask', 'causal', '--pair', 'it purred', '--', 'the cat sat']).results[0];
  await resultFor(page, want.tokens.join(' '));
  const d = await page.evaluate((w) => {
    let max = 0;
    window.attnscope.result.attention[4][7].forEach((row, q) => row.forEach((v, k) => { max = Math.max(max, Math.abs(v - w[q][k])); }));
    return max;
  }, want.attention[4][7]);
  assert.ok(d <= 1e-4, `restored view differs from the CLI by ${d}`);
  assertClean(p);
  await page.close();
});

test('without WebGPU the CPU engine runs and the page says so', async () => {
  const noGpu = await launch({ webgpu: false });
  try {
    const p = await openPage(noGpu, server.url);
    const { page } = p;
    await ready(page);
    assert.match(await page.textContent('#backend'), /^cpu/);
    assert.equal(await page.evaluate(() => window.attnscope.result.backend), 'cpu');
    assert.ok(await page.isVisible('#note'));
    assert.match(await page.textContent('#note'), /WebGPU is not available.*CPU engine/);
    await page.click('#check');
    await page.waitForFunction(() => /max \|Δ\|/.test(document.getElementById('check-result').textContent));
    assertClean(p);
  } finally {
    await noGpu.close();
  }
});

test('a corrupt model file produces a visible error, not a blank page', async () => {
  const p = await openPage(browser);
  const { page } = p;
  await page.route('**/model.safetensors', (route) => route.fulfill({ status: 200, contentType: 'application/octet-stream', body: Buffer.from('this is not a safetensors file') }));
  await page.goto(server.url);
  await page.waitForSelector('#error:not([hidden])', { timeout: 60000 });
  const err = await page.textContent('#error');
  assert.match(err, /model\.safetensors/);
  assert.match(await page.textContent('#model-name'), /no model loaded/);
  await page.screenshot({ path: path.join(ARTIFACTS, 'corrupt-model.png') });
  assertClean(p);
  await page.close();
});

test('text past 512 tokens is truncated with a notice', async () => {
  const p = await openPage(browser, server.url + '#e=cpu');
  const { page } = p;
  await ready(page);
  await page.fill('#sentence', 'word '.repeat(600));
  await page.waitForFunction(() => window.attnscope.result.tokens.length === 512, null, { timeout: 120000 });
  assert.match(await page.textContent('#note'), /truncated/);
  assertClean(p);
  await page.close();
});

test('another checkpoint loads from three local files, and from a base URL', async () => {
  const p = await openPage(browser, server.url + '#e=cpu');
  const { page } = p;
  await ready(page);
  const tiny = path.join(ROOT, 'tests/fixtures/models/tiny-bert');
  await page.setInputFiles('#files', ['config.json', 'model.safetensors', 'tokenizer.json'].map((f) => path.join(tiny, f)));
  await page.waitForFunction(() => window.attnscope.info && window.attnscope.info.layers === 2);
  assert.match(await page.textContent('#model-name'), /2 layers × 3 heads · hidden 24/);
  await page.fill('#sentence', 'the cat sat on the mat');
  await page.waitForFunction(() => window.attnscope.result.attention.length === 2 && window.attnscope.result.tokens.join(' ') === '[CLS] the cat sat on the mat [SEP]');
  assert.equal(await page.locator('#model-view canvas').count(), 6);
  // a missing file is named
  await page.setInputFiles('#files', [path.join(tiny, 'config.json')]);
  await page.waitForSelector('#error:not([hidden])');
  assert.match(await page.textContent('#error'), /model\.safetensors, tokenizer\.json/);
  // back to the default model, from its base URL
  await page.fill('#model-url', server.url + 'assets/models/all-MiniLM-L6-v2/');
  await page.click('#load-url');
  await page.waitForFunction(() => window.attnscope.info.layers === 6 && window.attnscope.result.attention.length === 6, null, { timeout: 120000 });
  assert.equal(await page.isVisible('#error'), false);
  assertClean(p);
  await page.close();
});
