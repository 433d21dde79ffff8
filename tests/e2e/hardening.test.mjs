// Hardening, end to end: hostile model URLs, text that looks like markup, long sessions, a lost
// WebGPU device, and the input limits. Each must fail cleanly and leave the page working.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, ready, ARTIFACTS, ROOT } from './harness.mjs';

let server, browser, hostile;
const TINY = path.join(ROOT, 'tests/fixtures/models/tiny-bert');
const tinyFile = (f) => readFileSync(path.join(TINY, f));

/** A GGUF file's header: version 3, no tensors, `general.architecture` = `arch`. */
function ggufHeader(arch) {
  const str = (s) => { const b = Buffer.from(s, 'utf8'), n = Buffer.alloc(8); n.writeBigUInt64LE(BigInt(b.length)); return Buffer.concat([n, b]); };
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; };
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
  return Buffer.concat([Buffer.from('GGUF'), u32(3), u64(0), u64(1), str('general.architecture'), u32(8), str(arch)]);
}

/** A server of bad answers: /CASE/{config.json, model.safetensors, tokenizer.json}, and
 *  /gguf/relabelled.gguf (an architecture no family runs, then 1 GiB, announced). */
function hostileServer() {
  const weights = tinyFile('model.safetensors');
  const open = new Set();
  const srv = http.createServer((req, res) => {
    const [, kase, file] = req.url.split('/');
    res.setHeader('Access-Control-Allow-Origin', '*');
    if (kase === 'gguf') { // the header, then zeros until the reader stops: what it read is counted
      const head = ggufHeader('gemmax'), chunk = Buffer.alloc(1 << 20), total = head.length + 1024 * chunk.length;
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': total });
      res.write(head);
      srv.ggufSent = head.length;
      const more = () => { // every chunk handed to the socket counted, one more only once it drained
        while (srv.ggufSent < total) {
          srv.ggufSent += chunk.length;
          if (!res.write(chunk)) return res.once('drain', more);
        }
        return res.end();
      };
      res.on('close', () => res.removeAllListeners('drain'));
      return more();
    }
    const real = () => { res.writeHead(200, { 'Content-Type': 'application/octet-stream' }); res.end(tinyFile(file)); };
    if (file !== 'model.safetensors' && kase !== 'html' && kase !== 'missing') return real();
    switch (kase) {
      case 'missing': res.writeHead(404); return res.end('not found');
      case 'html': res.writeHead(200, { 'Content-Type': 'text/html' }); return res.end('<!doctype html><html><body><h1>Welcome!</h1><script>alert(1)</script></body></html>');
      case 'truncated': // announces the whole file, sends half, hangs up
        res.writeHead(200, { 'Content-Length': weights.length });
        res.write(weights.subarray(0, weights.length >> 1));
        return setTimeout(() => res.socket.destroy(), 50);
      case 'length': // a Content-Length other than what the header describes
        res.writeHead(200, { 'Content-Length': weights.length + 4096 });
        res.write(weights);
        return res.end(Buffer.alloc(4096));
      case 'huge': { // a 1 GB body behind a small header, no Content-Length
        res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
        res.write(weights);
        const chunk = Buffer.alloc(1 << 20);
        let sent = 0;
        const more = () => { while (sent < 1024 && res.write(chunk)) sent++; if (sent < 1024) res.once('drain', more); else res.end(); };
        return more();
      }
      case 'hang': open.add(res); return undefined; // never answers
      default: return real();
    }
  });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({
    url: `http://127.0.0.1:${srv.address().port}/`,
    ggufSent: () => srv.ggufSent ?? 0,
    stop: () => { for (const r of open) r.socket?.destroy(); srv.close(); },
  })));
}

before(async () => {
  server = await startServer();
  hostile = await hostileServer();
  browser = await launch({ extraArgs: ['--js-flags=--expose-gc'] });
});
after(async () => { await browser?.close(); server?.stop(); hostile?.stop(); });

async function open(hash = '#e=cpu', query = '') {
  const p = await openPage(browser, server.url + query + hash);
  assert.equal(await ready(p.page), null);
  return p;
}
const resultFor = (page, joined) => page.waitForFunction((t) => window.attnscope.result && window.attnscope.result.tokens.join(' ') === t, joined, { timeout: 60000 });

async function stillWorks(page) {
  await page.fill('#pair', '');
  await page.fill('#sentence', 'still here');
  await resultFor(page, '[CLS] still here [SEP]');
}

test('hostile model URLs: a readable error each, the tab responsive, the previous model still running', async () => {
  const p = await open();
  const { page } = p;
  const cases = [
    ['missing', /config\.json: HTTP 404/],
    ['html', /config\.json/],
    ['truncated', /model\.safetensors: (the download broke off|got \d+ bytes)/],
    ['length', /model\.safetensors: the server announces \d+ bytes, the header describes \d+/],
    ['huge', /model\.safetensors: the body is longer than the \d+ bytes its header describes; stopped/],
  ];
  for (const [kase, want] of cases) {
    await page.fill('#model-url', `${hostile.url}${kase}/`);
    await page.click('#load-url');
    await page.waitForFunction((k) => document.getElementById('error').textContent.includes(k) || /Could not load/.test(document.getElementById('error').textContent), `/${kase}/`, { timeout: 60000 });
    const err = await page.textContent('#error');
    assert.match(err, want, `${kase}: ${err}`);
    assert.match(err, /still showing all-MiniLM-L6-v2/, `${kase}: the old model is named as still running`);
    assert.equal(await page.evaluate(() => window.attnscope.info.layers), 6);
    await stillWorks(page);
    await page.fill('#sentence', 'back again');
    await resultFor(page, '[CLS] back again [SEP]');
  }
  // a GGUF file of an architecture no family runs: refused by its header, named, long before
  // its 1 GiB arrive (the page checks the header as its first bytes come, and stops once they refuse it)
  await page.fill('#model-url', `${hostile.url}gguf/relabelled.gguf`);
  await page.click('#load-url');
  await page.waitForFunction(() => /gemmax/.test(document.getElementById('error').textContent), null, { timeout: 60000 });
  const err = await page.textContent('#error');
  assert.match(err, /relabelled\.gguf: invalid config: general\.architecture "gemmax" is not supported/, err);
  await new Promise((r) => setTimeout(r, 500));
  const sent = hostile.ggufSent();
  console.log(`# a refused GGUF file: ${(sent / 2 ** 20).toFixed(1)} MiB of its 1,024 MiB sent before the page stopped it`);
  assert.ok(sent < 64 * 2 ** 20, `the page read ${sent} bytes of a file its header refuses`);
  await stillWorks(page);
  // a server that never answers: a progress bar with a cancel button, and the tab responsive
  await page.fill('#model-url', `${hostile.url}hang/`);
  await page.click('#load-url');
  await page.waitForSelector('#progress-wrap:not([hidden])');
  const t = Date.now();
  assert.equal(await page.evaluate(() => 1 + 1), 2);
  assert.ok(Date.now() - t < 1000, 'the tab answers while a download hangs');
  await page.click('#cancel-load');
  await page.waitForFunction(() => /cancelled/.test(document.getElementById('error').textContent));
  assert.equal(await page.isVisible('#progress-wrap'), false);
  await stillWorks(page);
  p.problems.splice(0); // the failed requests themselves are the point of this test
  await page.close();
});

const PAYLOADS = [
  '<img src=x onerror="window.__xss=1">',
  'javascript:window.__xss=1',
  '"><svg onload="window.__xss=1"><script>window.__xss=1</script>',
  '\u202Eevil\u202C and \u200B\u200C\u200Dzero-width',
  'lone \uD800 surrogate',
  'long '.repeat(4000),
];

async function injected(page) {
  return page.evaluate(() => {
    const all = [document, ...[...document.querySelectorAll('*')].filter((e) => e.shadowRoot).map((e) => e.shadowRoot)];
    return { xss: window.__xss ?? 0, elements: all.reduce((n, r) => n + r.querySelectorAll('img, svg, script:not([src]), iframe, object, embed').length, 0) };
  });
}

test('text is never markup: the sentence, pair and batch boxes and the URL hash', async () => {
  const p = await open();
  const { page } = p;
  let dialogs = 0;
  page.on('dialog', (d) => { dialogs++; d.dismiss(); });
  const base = await injected(page);
  for (const s of PAYLOADS) {
    await page.fill('#sentence', s);
    await page.fill('#pair', s.slice(0, 200));
    await page.waitForFunction(() => window.attnscope.result && !document.body.classList.contains('busy'), null, { timeout: 60000 });
  }
  await page.check('#batch-mode');
  await page.fill('#batch', PAYLOADS.slice(0, 4).join('\n'));
  await page.waitForFunction(() => window.attnscope.result?.batch.length === 4, null, { timeout: 60000 });
  await page.click('#share');
  // the snippets quote the text: parsed, they make one element whose attribute is the text
  const parsed = await page.evaluate(() => {
    // (the iframe's style attribute is for the page it is pasted into: left out here, under this page's CSP)
    const html = document.getElementById('share-element').value + document.getElementById('share-iframe').value.replace(/ style="[^"]*"/, '');
    const doc = new DOMParser().parseFromString(html, 'text/html');
    return { injected: doc.querySelectorAll('img, svg, body > script:not([src])').length, sentence: doc.querySelector('attn-scope')?.getAttribute('sentence'), iframes: doc.querySelectorAll('iframe').length };
  });
  assert.deepEqual(parsed, { injected: 0, sentence: PAYLOADS[0], iframes: 1 });
  await page.keyboard.press('Escape');
  for (const s of PAYLOADS.slice(0, 3)) {
    await page.goto(`${server.url}#e=cpu&s=${encodeURIComponent(s)}&p=${encodeURIComponent(s)}`);
    await page.waitForFunction((t) => window.attnscope?.result?.text === t, s, { timeout: 60000 });
    assert.equal(await page.inputValue('#sentence'), s);
  }
  assert.deepEqual(await injected(page), base, 'no script ran and no element was injected');
  assert.equal(dialogs, 0);
  await stillWorks(page);
  assert.deepEqual(p.problems, []);
  await page.close();
});

test('text is never markup: <attn-scope> attributes', async () => {
  const p = await openPage(browser);
  const { page } = p;
  let dialogs = 0;
  page.on('dialog', (d) => { dialogs++; d.dismiss(); });
  await page.route('**/xss-test.html', (route) => route.fulfill({ contentType: 'text/html', body: '<!doctype html><link rel="icon" href="data:,"><script type="module" src="/attn-scope.js"></script><div id="host"></div>' }));
  await page.goto(server.url + 'xss-test.html');
  await page.evaluate((payloads) => {
    for (const [i, s] of payloads.slice(0, 4).entries()) {
      const el = document.createElement('attn-scope');
      for (const a of ['sentence', 'pair', 'view', 'mask', 'layer', 'head', 'engine']) el.setAttribute(a, a === 'sentence' ? s : s.slice(0, 60));
      el.setAttribute('engine', 'cpu');
      el.id = `x${i}`;
      document.getElementById('host').append(el);
    }
  }, PAYLOADS);
  for (let i = 0; i < 4; i++) { // each renders once scrolled into view
    await page.locator(`#x${i}`).scrollIntoViewIfNeeded();
    await page.waitForFunction((id) => document.getElementById(id).result, `x${i}`, { timeout: 120000 });
  }
  const texts = await page.evaluate(() => [...document.querySelectorAll('attn-scope')].map((e) => e.result.text));
  assert.deepEqual(texts, PAYLOADS.slice(0, 4).map((s) => s.replace(/\uD800/g, '\uFFFD')));
  assert.deepEqual(await injected(page), { xss: 0, elements: 0 });
  assert.equal(dialogs, 0);
  assert.deepEqual(p.problems, []);
  await page.close();
});

test('a lost WebGPU device: the CPU engine takes over with a note, and the next keystroke works', async () => {
  const p = await open('#e=gpu', '?testhooks=1');
  const { page } = p;
  assert.match(await page.evaluate(() => window.attnscope.result.backend), /^gpu: /);
  await page.evaluate(() => window.attnscope.loseDevice());
  await page.fill('#sentence', 'the device is gone');
  await resultFor(page, '[CLS] the device is gone [SEP]');
  assert.equal(await page.evaluate(() => window.attnscope.result.backend), 'cpu');
  assert.match(await page.textContent('#input-status'), /WebGPU stopped/);
  assert.match(await page.textContent('#engine-status'), /CPU engine: WebGPU stopped working/);
  await page.fill('#sentence', 'and the next one works');
  await resultFor(page, '[CLS] and the next one works [SEP]');
  p.problems.splice(0, p.problems.length, ...p.problems.filter((m) => !/destroy|lost|Device/i.test(m))); // WebGPU's own console messages about the destroyed device
  assert.deepEqual(p.problems, []);
  await page.close();
});

const CRASH_SITES = { call: '', future: ', in a future', pool: ", on rayon's threads" };
for (const [site, where] of Object.entries(CRASH_SITES)) {
  test(`a panic in the engine (${site}): the page says so, a fresh engine loads the model again, and the next keystroke works`, { timeout: 120000 }, async () => {
    const p = await open('#e=cpu', '?testhooks=1');
    const { page } = p;
    const shown = await page.evaluate(() => window.attnscope.result.tokens.join(' '));
    // 'pool' on the threaded build: the worker waits for its threads for ever, and the panic
    // reaches the page on its crash channel (a single-thread build runs the pool's work in the call)
    const error = await page.evaluate((s) => window.attnscope.crash(s).then(() => 'no error', (e) => e.message), site);
    const said = `the page's test hook asked the engine to crash${where}`;
    assert.match(error, new RegExp(`^the engine crashed \\(panicked at src/wasm\\.rs:\\d+:\\d+: ${said}\\); a fresh engine has started$`));
    // the old result stays on screen while the checkpoint loads again in the fresh worker
    assert.equal(await page.evaluate(() => window.attnscope.result.tokens.join(' ')), shown);
    await page.fill('#sentence', 'after the crash');
    await resultFor(page, '[CLS] after the crash [SEP]');
    assert.match(await page.textContent('#engine-status'), /restarted after a crash$/);
    assert.match(await page.textContent('#engine-why'), new RegExp(said));
    const stats = await page.evaluate(() => window.attnscope.stats());
    assert.deepEqual([stats.sessions, stats.checkpoints], [1, 1]);
    await page.fill('#sentence', 'and the next one works');
    await resultFor(page, '[CLS] and the next one works [SEP]');
    // the trapped pool threads' own uncaught `unreachable`: the worker that started them is
    // blocked waiting for them and cannot catch it (one a thread that panicked, at most all)
    const { wasmBuild, threads } = stats;
    const trapped = p.problems.filter((m) => m === 'uncaught: unreachable');
    if (site === 'pool' && wasmBuild === 'threads') assert.ok(trapped.length >= 1 && trapped.length <= threads, p.problems.join('\n'));
    else assert.deepEqual(trapped, []);
    assert.deepEqual(p.problems.filter((m) => m !== 'uncaught: unreachable'), []);
    await page.close();
  });
}

test('a panic under an <attn-scope> whose checkpoint came as its `files` (the notebook\'s run()): the element says to set them again, not to choose them', { timeout: 120000 }, async () => {
  const { page, problems } = await openPage(browser, null, { width: 800, height: 700 });
  await page.route('**/favicon.ico', (r) => r.fulfill({ status: 204 }));
  await page.goto(`${server.url}web/views.css?testhooks=1`);
  const said = await page.evaluate(async () => {
    await import('/web/attn-scope.js');
    const names = ['config.json', 'model.safetensors', 'tokenizer.json'];
    const files = Object.fromEntries(await Promise.all(names.map(async (n) => [n, await (await fetch(`/models/dates/${n}`)).arrayBuffer()])));
    const el = document.createElement('attn-scope');
    el.setAttribute('sentence', '9 May 2018');
    el.setAttribute('engine', 'cpu');
    el.files = { key: 'files:dates', name: 'dates', files };
    document.body.prepend(el);
    for (let i = 0; i < 300 && !el.result; i++) await new Promise((r) => setTimeout(r, 100));
    if (!el.result) return `no result before the crash: ${el.shadowRoot.querySelector('.message').textContent}`;
    const { engine } = await import('/web/engine.js');
    await engine().crash('call').catch(() => {});
    const message = () => el.shadowRoot.querySelector('.message');
    for (let i = 0; i < 300 && message().hidden; i++) await new Promise((r) => setTimeout(r, 100));
    return message().textContent;
  });
  assert.match(said, /^the engine crashed \(panicked at src\/wasm\.rs:\d+:\d+: the page's test hook asked the engine to crash\); a fresh engine has started: set the element's files again to go on \(in a notebook, run the cell again\)\.$/);
  assert.deepEqual(problems, []);
  await page.close();
});

test('auto, when WebGPU fails on its test pass: the CPU engine is chosen, saying why, and runs', async () => {
  const p = await open('#e=auto', '?testhooks=lose-at-probe');
  const { page } = p;
  assert.equal(await page.evaluate(() => window.attnscope.result.backend), 'cpu');
  await page.waitForFunction(() => !/while WebGPU is timed/.test(document.getElementById('engine-status').textContent), null, { timeout: 120000 });
  assert.match(await page.textContent('#engine-status'), /auto: CPU engine, [\d.]+ m?s a pass; WebGPU failed on a test pass/);
  await page.fill('#sentence', 'the probe failed');
  await resultFor(page, '[CLS] the probe failed [SEP]');
  assert.equal(await page.evaluate(() => window.attnscope.result.backend), 'cpu');
  p.problems.splice(0, p.problems.length, ...p.problems.filter((m) => !/destroy|lost|Device/i.test(m))); // WebGPU's own console messages about the destroyed device
  assert.deepEqual(p.problems, []);
  await page.close();
});

test('input limits: over 4 sentences, empty, only spaces, only unknown or dropped characters', async () => {
  const p = await open();
  const { page } = p;
  await page.check('#batch-mode');
  await page.fill('#batch', 'one\ntwo\nthree\nfour\nfive\nsix');
  await page.waitForFunction(() => window.attnscope.result?.batch.length === 4);
  assert.match(await page.textContent('#input-status'), /Batch mode takes up to 4 sentences; the rest are ignored/);
  await page.uncheck('#batch-mode');
  for (const blank of ['', '   \t  ']) {
    await page.fill('#sentence', blank);
    await page.waitForFunction(() => window.attnscope.result === null);
    assert.match(await page.textContent('#input-status'), /Type a sentence: there is nothing to attend to yet/);
  }
  await page.fill('#sentence', '☃☃ ☃');
  await page.waitForFunction(() => window.attnscope.result?.tokens.includes('[UNK]'));
  await page.fill('#sentence', '\u200B\u200C\uFEFF');
  await page.waitForFunction(() => /no tokens/.test(document.getElementById('input-status').textContent));
  assert.ok(await page.evaluate(() => document.getElementById('input-status').classList.contains('error')));
  await stillWorks(page);
  assert.deepEqual(p.problems, []);
  await page.close();
});

test('a long session: twice 1000 keystrokes, 100 view switches and 20 model reloads: wasm memory, workers and latency hold', async () => {
  const p = await open('#e=cpu&s=the%20cat%20sat%20on%20the%20mat%20and%20looked%20at%20the%20door');
  const { page } = p;
  // The JS heap the page's objects hold: a heap snapshot's objects, arrays, strings, closures and
  // shapes, after a full collection. Left out: V8's compiled code (JIT tiers keep compiling hot
  // functions over a session: 0.7 → 1.0 MB here, bounded by the code's size) and Blink's native
  // objects (the input's undo history, capped at 1000 steps). usedJSHeapSize, which counts the
  // code, is printed beside it.
  const cdp = await page.context().newCDPSession(page);
  const jsHeap = async () => {
    await page.evaluate(() => { window.gc(); window.gc(); });
    const chunks = [];
    const take = (e) => chunks.push(e.chunk);
    cdp.on('HeapProfiler.addHeapSnapshotChunk', take);
    await cdp.send('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
    cdp.off('HeapProfiler.addHeapSnapshotChunk', take);
    const snap = JSON.parse(chunks.join(''));
    const fields = snap.snapshot.meta.node_fields, types = snap.snapshot.meta.node_types[0];
    const [ti, si, n] = [fields.indexOf('type'), fields.indexOf('self_size'), fields.length];
    let bytes = 0;
    for (let i = 0; i < snap.nodes.length; i += n) {
      if (!['code', 'native', 'synthetic'].includes(types[snap.nodes[i + ti]])) bytes += snap.nodes[i + si];
    }
    return bytes;
  };
  const measure = async () => {
    const heap = await jsHeap();
    const used = await page.evaluate(() => performance.memory.usedJSHeapSize);
    const s = await page.evaluate(() => window.attnscope.stats());
    return { wasm: s.wasmBytes, heap, used, sessions: s.sessions };
  };
  await page.evaluate(() => {
    window.__keyAt = 0;
    document.getElementById('sentence').addEventListener('keydown', () => { window.__keyAt = performance.now(); }, true);
  });
  await page.focus('#sentence');
  await page.keyboard.press('End');
  const latency = [];
  const keystrokes = async (n) => {
    await page.focus('#sentence');
    await page.keyboard.press('End');
    for (let i = 0; i < n; i++) {
      const renders = await page.evaluate(() => window.attnscope.renders);
      await page.keyboard.press(i % 2 ? 'Backspace' : 's');
      await page.waitForFunction((r) => window.attnscope.renders > r, renders);
      latency.push(await page.evaluate(() => window.attnscope.lastRenderAt - window.__keyAt));
    }
  };
  const switches = async (n) => {
    for (let i = 0; i < n; i++) {
      await page.selectOption('#view', ['heatmap', 'lines', 'both'][i % 3]);
      await page.selectOption('#scale', i % 2 ? 'head' : 'absolute');
    }
  };
  const url = server.url + 'assets/models/all-MiniLM-L6-v2/';
  const reloads = async (n) => {
    for (let i = 0; i < n; i++) {
      if (i % 2) {
        await page.fill('#model-url', url);
        await page.click('#load-url');
        await page.waitForFunction(() => window.attnscope.info.layers === 6 && window.attnscope.result?.attention.length === 6 && !window.attnscope.store.get().loading, null, { timeout: 120000 });
      } else {
        await page.setInputFiles('#files', ['config.json', 'model.safetensors', 'tokenizer.json'].map((f) => path.join(TINY, f)));
        await page.waitForFunction(() => window.attnscope.info.layers === 2 && window.attnscope.result?.attention.length === 2, null, { timeout: 60000 });
      }
    }
    await page.fill('#sentence', 'the cat sat on the mat and looked at the door');
    await resultFor(page, '[CLS] the cat sat on the mat and looked at the door [SEP]');
  };
  // The first run of each action (a few keystrokes, view switches and reloads) compiles their code
  // and loads the test driver's own scripts into the page (about 0.3 MB of source text): the
  // levels are taken after it. Then two rounds of the whole session: the wasm memory and the
  // JS heap must stay within 10% of those levels, one worker and one session, and keystrokes
  // must not get slower.
  const round = async () => { await keystrokes(1000); await switches(100); await reloads(20); };
  const atFirstResult = await measure();
  await keystrokes(20);
  await switches(6);
  await reloads(2);
  const start = await measure();
  await round();
  const first = await measure();
  await round();
  const last = await measure();
  const median = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
  const early = median(latency.slice(0, 100)), late = median(latency.slice(-100));
  const mib = (x) => (x / 1048576).toFixed(2);
  console.log(`long session: at the first result ${mib(atFirstResult.heap)} MiB JS heap (usedJSHeapSize ${mib(atFirstResult.used)}), ${mib(atFirstResult.wasm)} MiB wasm; after the first run of each action ${mib(start.heap)} MiB (${mib(start.used)})`);
  console.log(`long session: wasm ${mib(start.wasm)} → ${mib(first.wasm)} → ${mib(last.wasm)} MiB, JS heap ${mib(start.heap)} → ${mib(first.heap)} → ${mib(last.heap)} MiB (usedJSHeapSize ${mib(start.used)} → ${mib(first.used)} → ${mib(last.used)}), keystroke median ${early.toFixed(1)} → ${late.toFixed(1)} ms, workers ${page.workers().length}`);
  const wasm0 = atFirstResult.wasm;
  assert.ok([start, first, last].every((m) => m.wasm <= wasm0 * 1.1), `wasm memory ${wasm0} → ${start.wasm} → ${first.wasm} → ${last.wasm}`);
  assert.ok(first.heap <= start.heap * 1.1 && last.heap <= start.heap * 1.1, `JS heap ${start.heap} → ${first.heap} → ${last.heap} bytes`);
  assert.equal(last.sessions, 1, 'one session in the worker');
  // the engine's worker, and the threaded build's threads (workers too), nothing more
  const { wasmBuild, threads } = await page.evaluate(() => window.attnscope.stats());
  assert.equal(page.workers().length, 1 + (wasmBuild === 'threads' ? threads : 0), `no worker leaked (${wasmBuild} build)`);
  assert.ok(late <= early * 1.5 + 5, `keystroke latency does not grow (${early.toFixed(1)} → ${late.toFixed(1)} ms)`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'long-session.png') });
  assert.deepEqual(p.problems, []);
  await page.close();
});
