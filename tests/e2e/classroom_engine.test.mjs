// Issue 29, "Engine errors": WebGPU asked for where the browser cannot give it falls back to the
// CPU engine, says so in plain words and shows it in the select and the link, and switching
// engines always loads and runs the model; the threaded build starts without wasm-bindgen's
// "deprecated parameters" warning.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, launch, openPage, ready, INK, ARTIFACTS } from './harness.mjs';

let server;
before(async () => { server = await startServer(); });
after(() => server?.stop());

/** The page's engine as a teacher sees it: the select, the link, the engine line and its details. */
const engineShown = (page) => page.evaluate(() => ({
  select: document.getElementById('engine').value,
  store: window.attnscope.store.get().engine,
  link: new URLSearchParams(location.hash.slice(1)).get('e'),
  line: document.getElementById('engine-status').textContent,
  detailsShown: !document.getElementById('engine-details').hidden,
  why: document.getElementById('engine-why').textContent,
  whyVisible: document.getElementById('engine-why').checkVisibility(),
  backend: window.attnscope.result?.backend ?? null,
}));

/** Waits until a model load after `version` has landed and the run after it is on screen. */
async function loadedAfter(page, version) {
  await page.waitForFunction((v) => {
    const s = window.attnscope.store.get();
    return s.modelVersion > v && !s.loading && !s.busy && s.run && s.rendered.split(':')[0] === String(s.run.id) && s.run.id !== window.lastRunId;
  }, version, { timeout: 120000 });
  await page.evaluate(() => { window.lastRunId = window.attnscope.store.get().run.id; });
  await page.waitForFunction(() => new URLSearchParams(location.hash.slice(1)).get('e') === (window.attnscope.store.get().engine === 'auto' ? null : window.attnscope.store.get().engine));
}

/** Chooses `engine` in the select and waits for the model to load with it and run. */
async function choose(page, engine) {
  const version = await page.evaluate(() => window.attnscope.store.get().modelVersion);
  await page.selectOption('#engine', engine);
  await loadedAfter(page, version);
}

const headInk = (page) => page.evaluate((ink) => eval(ink)(document.querySelector('#head-view .heat')), INK);

/**
 * The page opened with `#e=gpu` in `browser`, where WebGPU cannot start: the CPU engine runs the
 * model, the line says `plain`, and choosing WebGPU, auto and the CPU engine each loads and runs it.
 */
async function fallsBackAndRecovers(browser, url, plain, shot) {
  const link = `${url}#e=gpu&s=${encodeURIComponent('the cat sat on the mat')}`;
  const p = await openPage(browser, link, { width: 1280, height: 800 });
  const { page, problems } = p;
  assert.equal(await ready(page), null, 'the model loads on the CPU engine');
  await loadedAfter(page, 0);
  let shown = await engineShown(page);
  assert.equal(shown.select, 'cpu', 'the select shows the engine that runs');
  assert.equal(shown.store, 'cpu');
  assert.equal(shown.link, 'cpu', 'the link names the engine that runs');
  assert.equal(shown.backend, 'cpu');
  assert.match(shown.line, plain);
  assert.doesNotMatch(shown.line, /vulkan|wgpu|adapter:|GPU:/i, 'no driver words in the visible line');
  assert.ok(shown.detailsShown, 'the raw error waits under "details"');
  assert.ok(shown.why.length > 0 && !shown.whyVisible, `the raw error is there, folded: ${shown.why}`);
  assert.ok(await headInk(page) > 0.05, 'the heatmap is drawn');
  assert.equal(await page.locator('#error').isVisible(), false, 'no load error');
  for (const size of [{ width: 390, height: 844, scale: 2 }, { width: 1280, height: 800, scale: 1 }, { width: 1920, height: 1080, scale: 1 }]) {
    const q = await openPage(browser, link, size);
    assert.equal(await ready(q.page), null);
    assert.match(await q.page.textContent('#engine-status'), plain);
    await q.page.locator('#models').scrollIntoViewIfNeeded();
    await q.page.screenshot({ path: path.join(ARTIFACTS, `classroom-engine-${shot}-${size.width}.png`) });
    assert.deepEqual(q.problems, []);
    await q.page.close();
  }

  // every switch loads and runs the model: WebGPU (the CPU engine again), auto (the CPU engine,
  // however auto words it), CPU, WebGPU
  for (const [engine, select, line] of [['gpu', 'cpu', plain], ['auto', 'auto', /CPU engine/], ['cpu', 'cpu', /^CPU engine \(chosen\)$/], ['gpu', 'cpu', plain]]) {
    await choose(page, engine);
    shown = await engineShown(page);
    assert.equal(shown.select, select, `after choosing ${engine}`);
    assert.equal(shown.backend, 'cpu');
    assert.match(shown.line, line, `after choosing ${engine}`);
    assert.doesNotMatch(shown.line, /vulkan|wgpu|adapter:|GPU:/i, `no driver words after choosing ${engine}`);
    assert.ok(await headInk(page) > 0.05, `the heatmap is drawn after choosing ${engine}`);
    assert.equal(await page.locator('#error').isVisible(), false, `no load error after choosing ${engine}`);
  }
  assert.deepEqual(problems, [], 'no console error, no uncaught error');
  await page.close();
}

test('WebGPU asked for where it finds no adapter: the CPU engine runs, in plain words, and every engine switch works', async () => {
  // WebGPU off (harness.mjs): navigator.gpu is there, and its requestAdapter() resolves to null
  const browser = await launch({ webgpu: false });
  try {
    await fallsBackAndRecovers(browser, server.url, /^This browser offers no usable GPU \(WebGPU found no adapter\), so the CPU engine runs the model\.$/, 'no-adapter');
  } finally {
    await browser.close();
  }
});

test('WebGPU asked for where the page has no navigator.gpu (not a secure page): the CPU engine runs, in plain words', async () => {
  // a host name other than localhost over http: not a secure context, so no navigator.gpu (and a
  // plain static host's headers: an insecure page ignores COOP, with a console error)
  const plainHost = await startServer({ isolation: false });
  const browser = await launch({ extraArgs: ['--host-resolver-rules=MAP classroom.test 127.0.0.1'] });
  try {
    const url = plainHost.url.replace('127.0.0.1', 'classroom.test');
    const probe = await browser.newPage();
    await probe.goto(url);
    assert.deepEqual(await probe.evaluate(() => [isSecureContext, 'gpu' in navigator]), [false, false], 'the page has no WebGPU');
    await probe.close();
    await fallsBackAndRecovers(browser, url, /^WebGPU needs a secure page \(https, or http on localhost\), so the CPU engine runs the model\.$/, 'insecure');
  } finally {
    await browser.close();
    plainHost.stop();
  }
});

test('the first load fails with an engine failure (a crash): choosing an engine loads the model and runs it', async () => {
  const browser = await launch({ webgpu: false });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const problems = [];
    page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
    page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
    // the engine crashes (?testhooks=1) as the page starts, before its first load is done
    await page.addInitScript(() => {
      Object.defineProperty(window, 'attnscope', {
        configurable: true,
        get() { return this.attnscopeApi; },
        set(api) { this.attnscopeApi = api; api.crash().catch(() => {}); },
      });
    });
    await page.goto(`${server.url}?testhooks=1#e=auto&s=${encodeURIComponent('the cat sat on the mat')}`);
    assert.match(await ready(page), /^Could not load all-MiniLM-L6-v2: the engine crashed/, 'the first load failed');
    assert.match(await page.textContent('#error'), /the engine crashed/);
    assert.equal(await page.evaluate(() => window.attnscope.store.get().modelInfo), null, 'no model');
    await choose(page, 'cpu');
    assert.equal(await page.locator('#error').isVisible(), false, 'the error is gone');
    assert.equal(await page.evaluate(() => window.attnscope.result.text), 'the cat sat on the mat');
    assert.equal((await engineShown(page)).line, 'CPU engine (chosen)');
    assert.ok(await headInk(page) > 0.05, 'the heatmap is drawn');
    assert.deepEqual(problems, []);
    await page.close();
  } finally {
    await browser.close();
  }
});

test('the threaded build starts its threads without wasm-bindgen\'s "deprecated parameters" warning', async () => {
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    // every console message of the page and of its workers (the engine's, and the pool's threads it starts)
    const messages = [];
    page.on('console', (m) => messages.push(`page ${m.type()}: ${m.text()}`));
    page.on('worker', (w) => w.on('console', (m) => messages.push(`worker ${m.type()}: ${m.text()}`)));
    await page.goto(server.url);
    assert.equal(await ready(page), null);
    const { wasmBuild, threads } = await page.evaluate(() => window.attnscope.stats());
    assert.equal(wasmBuild, 'threads', 'the cross-origin isolated page runs the threaded build');
    assert.ok(threads > 1, `on ${threads} threads`);
    assert.equal(page.workers().length, 1 + threads, 'the engine\'s worker and its threads');
    // a run on the threads: they took their work, after their init
    await page.fill('#sentence', 'the threads share the heads');
    await page.waitForFunction(() => window.attnscope.result?.text === 'the threads share the heads', null, { timeout: 60000 });
    const deprecated = messages.filter((m) => /deprecated parameters/.test(m));
    assert.deepEqual(deprecated, [], 'no "deprecated parameters" warning');
    assert.deepEqual(messages.filter((m) => /(page|worker) (error|warning):/.test(m)), [], 'no warning or error at all');
    await page.close();
  } finally {
    await browser.close();
  }
});
