// An encoder–decoder model in the page (tests/fixtures/models/tiny-marian, loaded from a URL):
// the page translates instead of running the encoder alone, window.attnscope.result carries the
// fields of `attnscope translate` and equals it on the CPU engine and on WebGPU, the pair box
// teacher-forces a target, a step can be focused, and the encoder's views give way to the
// translation view. Screenshots at phone, laptop and projector widths in test-artifacts/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { cpSync, rmSync, readFileSync } from 'node:fs';
import { startServer, launch, openPage, ready, maxDiff, ARTIFACTS, ROOT } from './harness.mjs';

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

/** `attnscope translate`, under the build lock (another build may share the machine). */
function cli(args) {
  const out = execFileSync('flock', ['/tmp/build.lock', 'cargo', 'run', '--quiet', '--bin', 'attnscope', '--', 'translate', '--model', fixture, '--top-k', '5', ...args], {
    cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'ignore'],
  });
  return JSON.parse(out).results[0];
}

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
    assert.equal(await page.locator('table.tr-matrix').count(), 3);
    // the cross-attention's rows are the steps, its columns the source's tokens
    const [rows, cols] = await page.evaluate(() => {
      const t = document.querySelectorAll('table.tr-matrix')[0];
      return [t.querySelectorAll('tr').length - 1, t.querySelectorAll('th.col').length];
    });
    assert.deepEqual([rows, cols], [want.output_ids.length - 1, want.source_ids.length]);
    // the decoder's no-peek mask: the upper triangle greyed
    const T = want.output_ids.length - 1;
    assert.equal(await page.locator('table.tr-matrix >> nth=1 >> td.masked').count(), (T * (T - 1)) / 2);
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
  const run = (args) => JSON.parse(execFileSync('flock', ['/tmp/build.lock', 'cargo', 'run', '--quiet', '--bin', 'attnscope', '--', 'translate', '--model', dir, '--top-k', '5', ...args], {
    cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'ignore'],
  })).results[0];
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
  // the built-in choice, from the default model
  const { page, problems } = await openPage(browser, `${server.url}#e=cpu&s=${encodeURIComponent('Sunday, 9 Sept 2018')}`, { width: 1280, height: 900 });
  assert.equal(await ready(page), null);
  await page.selectOption('#model-builtin', 'models/dates/');
  await page.waitForFunction(() => window.attnscope.result?.output_text === '2018-09-09', null, { timeout: 120000 });
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
  assert.match(await step(), /^Step 1 of 11/);
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
    const caption = (el) => el.shadowRoot.querySelector('table.tr-matrix caption').textContent;
    return {
      a: { text: ra.output_text, step: a.shadowRoot.querySelector('.tr-step h3').textContent, caption: caption(a) },
      b: { text: rb.output_text, target: rb.target, caption: caption(b), tables: b.shadowRoot.querySelectorAll('table.tr-matrix').length },
    };
  });
  assert.equal(got.a.text, '2018-09-09');
  assert.match(got.a.step, /^Step 6 of 11/);
  assert.match(got.a.caption, /decoder layer 1, head 2/, 'the model\'s own head');
  assert.equal(got.b.target, '2018-05-09');
  assert.match(got.b.caption, /decoder layer 0, head 3/, 'the attributes\' head');
  assert.equal(got.b.tables, 3);
  clean(problems);
  await page.close();
});
