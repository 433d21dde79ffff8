// `make bench`'s table: attnscope beside the engines a person would pick instead, on this
// machine, the same checkpoint, batch 1, every attention probability returned by every engine.
//
// * native: `attnscope bench --backend cpu --threads 1|2` against PyTorch eager
//   (bench/torch_bench.py) at 1 and 2 threads; skipped with a note when torch is not installed.
// * headless Chromium: attnscope's wasm engine (`Session.run` in a module worker, as the page's
//   worker calls it; its threaded build at 2 threads, its relaxed-SIMD and SIMD128 builds at 1,
//   returning the probabilities alone as ONNX Runtime does, then the threaded build with every
//   score as well, as the page runs it)
//   against ONNX Runtime Web (`onnxruntime-web`, wasm backend) at 1 thread and, the page being
//   cross-origin isolated, 2 threads, on the checkpoint exported by bench/export_onnx.py;
//   skipped with a note when that export is missing.
//
// * the page itself (`make serve`'s) in the same Chromium: a keystroke at the end of a text of T
//   tokens until every view is drawn again, PAUSE ms between keystrokes as a person types
//   (the engine's threads asleep meanwhile, as they are in use).
//
// Env: MODEL (a checkpoint folder), LENGTHS (16,128,512), ITERS (15: this machine is noisy),
// PAUSE (300).
import { spawnSync } from 'node:child_process';
import { createReadStream, existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, openPage, startServer } from '../tests/e2e/harness.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const MODEL = path.resolve(ROOT, process.env.MODEL ?? 'assets/models/all-MiniLM-L6-v2');
const LENGTHS = (process.env.LENGTHS ?? '16,128,512').split(',').map(Number);
const ITERS = Number(process.env.ITERS ?? 15);
const PAUSE = Number(process.env.PAUSE ?? 300);
const ONNX = path.join(MODEL, 'onnx', 'model.onnx');
const notes = [];
const rows = []; // {where, engine, ms: {T: ms}}

// ---------- native ----------
for (const threads of [1, 2]) {
  const r = spawnSync('cargo', ['run', '--quiet', '--release', '--', 'bench', '--model', MODEL, '--backend', 'cpu', '--lengths', LENGTHS.join(','), '--iters', String(ITERS), '--threads', String(threads)], { cwd: ROOT, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`attnscope bench failed: ${r.stderr}`);
  const ms = {};
  for (const line of r.stdout.split('\n')) {
    const m = line.match(/^\s*(\d+)\s+([\d.]+)/); // the length, then the CPU engine's ms
    if (m) ms[m[1]] = Number(m[2]);
  }
  rows.push({ where: `native, ${threads} thread${threads > 1 ? 's' : ''}`, engine: 'attnscope CPU engine', ms });
}
{
  const r = spawnSync('python3', [path.join(ROOT, 'bench/torch_bench.py'), '--model', MODEL, '--lengths', LENGTHS.join(','), '--iters', String(ITERS), '--threads', '1,2'], { encoding: 'utf8' });
  if (r.status === 0) {
    const { torch, ms } = JSON.parse(r.stdout.trim().split('\n').pop());
    const v = torch.split('+')[0];
    rows.push({ where: 'native, 1 thread', engine: `PyTorch ${v} eager`, ms: ms['1'] });
    rows.push({ where: 'native, 2 threads', engine: `PyTorch ${v} eager`, ms: ms['2'] });
  } else {
    notes.push(`PyTorch skipped: ${/No module named/.test(r.stderr) ? 'torch or transformers is not installed (pip install torch transformers)' : r.stderr.trim().split('\n').pop()}`);
  }
}

// ---------- headless Chromium ----------
// A local server, cross-origin isolated (COOP + COEP) so ONNX Runtime Web may use threads:
// / (an empty page), /pkg/ (attnscope's wasm build), /ort/ (onnxruntime-web), /model/ (the
// checkpoint and its ONNX export).
const ORT_DIR = path.join(ROOT, 'bench/node_modules/onnxruntime-web/dist');
const MOUNTS = { '/pkg/': path.join(ROOT, 'web/pkg'), '/pkg-relaxed/': path.join(ROOT, 'web/pkg-relaxed'), '/pkg-threads/': path.join(ROOT, 'web/pkg-threads'), '/ort/': ORT_DIR, '/model/': MODEL };
const TYPES = { '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json' };
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  const headers = { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp', 'Cross-Origin-Resource-Policy': 'same-origin' };
  if (url.pathname === '/') { res.writeHead(200, { ...headers, 'Content-Type': 'text/html' }); res.end('<!doctype html><title>bench</title>'); return; }
  const mount = Object.keys(MOUNTS).find((m) => url.pathname.startsWith(m));
  const file = mount && path.join(MOUNTS[mount], path.normalize(decodeURIComponent(url.pathname.slice(mount.length))));
  if (!file || !file.startsWith(MOUNTS[mount]) || !existsSync(file)) { res.writeHead(404, headers); res.end('not found'); return; }
  res.writeHead(200, { ...headers, 'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream' });
  createReadStream(file).pipe(res);
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const ORIGIN = `http://127.0.0.1:${server.address().port}`;

async function benchPage(browser) {
  const page = await browser.newPage();
  await page.goto(`${ORIGIN}/`);
  return page;
}

/** The median of `iters` runs after two warm-ups, in ms, for each length (run in the page).
 *  Passes at every length for at least 3 s come first, for every engine alike: the browser
 *  compiles wasm with a baseline compiler and swaps in optimised code for the hot functions
 *  while they run, compiling it on background threads that take the cores the engine's own
 *  threads need. With one pass at every length instead, the threaded build's first row was
 *  slower than its second with more work (every score returned too: 66.6 and 71.4 ms at 128
 *  tokens against 46.4 and 44.2), the second reusing the first's optimised code. */
const TIMING = `async (run, lengths, iters) => {
  const warm = performance.now() + 3000;
  do { for (const t of lengths) await run(t); } while (performance.now() < warm);
  const out = {};
  for (const t of lengths) {
    const times = [];
    for (let i = 0; i < iters + 2; i++) {
      const start = performance.now();
      await run(t);
      if (i >= 2) times.push(performance.now() - start);
    }
    times.sort((a, b) => a - b);
    out[t] = times[times.length >> 1];
  }
  return out;
}`;

const browser = await launch({ webgpu: false });
try {
  // the wasm core's three builds (Makefile, "web"), each in a module worker as the page runs it:
  // threads (the page's choice where it is cross-origin isolated, as here), relaxed SIMD (its
  // choice elsewhere) and plain SIMD128 (browsers without relaxed SIMD)
  // (the probabilities alone, as ONNX Runtime returns them; then the threaded build as the page
  // runs it, with every layer's scores too)
  const builds = [
    ['pkg-threads', 'threads, relaxed SIMD', 2, { scores: false }],
    ['pkg-relaxed', 'relaxed SIMD', 1, { scores: false }],
    ['pkg', 'SIMD128', 1, { scores: false }],
    ['pkg-threads', 'threads, relaxed SIMD; every score too, as the page runs', 2, {}],
  ];
  for (const [pkg, label, threads, options] of builds) {
    const page = await benchPage(browser);
    const ms = await page.evaluate(async ([timing, lengths, iters, pkg, threads, options]) => {
      const src = `self.onmessage = async ({ data: [timing, lengths, iters, pkg, threads, options] }) => {
        try {
          const m = await import(location.origin + '/' + pkg + '/attnscope.js');
          await m.default();
          if (threads > 1) await m.initThreadPool(threads);
          const get = async (f) => new Uint8Array(await (await fetch(location.origin + '/model/' + f)).arrayBuffer());
          const s = await m.loadSession('bench', await get('config.json'), m.WeightsFile.fromBytes('model.safetensors', await get('model.safetensors')), await get('tokenizer.json'), 'cpu');
          // "the" is one word piece: T − 2 of them between [CLS] and [SEP] are T tokens
          const run = async (t) => {
            const r = await s.run([Array(t - 2).fill('the').join(' ')], undefined, 'padding', 'cpu', options);
            if (r.info.shape[3] !== t) throw new Error(r.info.shape[3] + ' tokens, not ' + t);
          };
          self.postMessage({ ms: await (0, eval)(timing)(run, lengths, iters) });
        } catch (e) { self.postMessage({ error: String(e && e.stack || e) }); }
      };`;
      const worker = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })), { type: 'module' });
      const out = await new Promise((resolve) => { worker.onmessage = (e) => resolve(e.data); worker.postMessage([timing, lengths, iters, pkg, threads, options]); });
      worker.terminate();
      if (out.error) throw new Error(out.error);
      return out.ms;
    }, [TIMING, LENGTHS, ITERS, pkg, threads, options]);
    rows.push({ where: `Chromium, ${threads} thread${threads > 1 ? 's' : ''}`, engine: `attnscope wasm (${label})`, ms });
    await page.close();
  }
  // the page itself, as a person types: a keystroke at the end of a text of T tokens until every
  // view is drawn again (web/app.js `lastRenderAt`), on the CPU engine, its threaded build; a
  // pause of PAUSE ms after each, as between keystrokes, where the engine's threads sleep
  {
    const app = await startServer();
    const ms = {};
    let threads = 0; // the page's own pool (web/worker.js `stats`)
    try {
      for (const t of LENGTHS) {
        // "the" is one word piece, and so are "door" and "doors": T tokens either way
        const text = `${Array(t - 3).fill('the').join(' ')} door`;
        const { page } = await openPage(browser, `${app.url}#e=cpu&s=${encodeURIComponent(text)}`, { width: 1400, height: 1000 });
        await page.waitForFunction((t) => window.attnscope?.result?.tokens.length === t && window.attnscope.renders > 0, t, { timeout: 120000 });
        await page.evaluate(() => document.getElementById('sentence').addEventListener('keydown', () => { window.__keyAt = performance.now(); }, true));
        await page.focus('#sentence');
        await page.keyboard.press('End');
        const times = [];
        for (let i = 0; i < ITERS + 2; i++) {
          // the views drawn again, heard from the page's store, not polled: Playwright's
          // waitForFunction polls each animation frame, which makes the page draw 60 frames a
          // second on the cores the pass runs on (3 ms more a keystroke here), as no one's page does
          await page.evaluate(() => {
            const api = window.attnscope, before = api.renders;
            window.__drawn = new Promise((resolve) => {
              const off = api.store.subscribe(() => { if (api.renders > before) { off(); resolve(); } });
            });
          });
          await page.keyboard.press(i % 2 ? 'Backspace' : 's');
          let timer;
          await Promise.race([page.evaluate(() => window.__drawn), new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('the page drew no views within 60 s of a keystroke')), 60000); })]).finally(() => clearTimeout(timer));
          const [took, n] = await page.evaluate(() => [window.attnscope.lastRenderAt - window.__keyAt, window.attnscope.result.tokens.length]);
          if (n !== t) throw new Error(`the page ran ${n} tokens, not ${t}`);
          if (i >= 2) times.push(took);
          await page.waitForTimeout(PAUSE);
        }
        times.sort((a, b) => a - b);
        ms[t] = times[times.length >> 1];
        ({ threads } = await page.evaluate(() => window.attnscope.stats()));
        await page.close();
      }
    } finally {
      app.stop();
    }
    rows.push({ where: `Chromium, ${threads} thread${threads > 1 ? 's' : ''}`, engine: `attnscope page, keystroke → every view drawn (${PAUSE} ms between keystrokes)`, ms });
  }
  if (!existsSync(ONNX)) {
    notes.push(`ONNX Runtime Web skipped: no ${path.relative(ROOT, ONNX)} (python3 bench/export_onnx.py writes it; it needs torch)`);
  } else if (!existsSync(ORT_DIR)) {
    notes.push('ONNX Runtime Web skipped: not installed (cd bench && npm ci)');
  } else {
    const version = JSON.parse(readFileSync(path.join(ORT_DIR, '../package.json'), 'utf8')).version;
    for (const threads of [1, 2]) {
      const page = await benchPage(browser);
      const { ms, isolated, outputs } = await page.evaluate(async ([timing, lengths, iters, threads]) => {
        const ort = await import('/ort/ort.wasm.min.mjs');
        ort.env.wasm.wasmPaths = '/ort/';
        ort.env.wasm.numThreads = threads;
        const session = await ort.InferenceSession.create('/model/onnx/model.onnx', { executionProviders: ['wasm'], graphOptimizationLevel: 'all' });
        let outputs = [];
        const run = async (t) => {
          const ids = new BigInt64Array(t).fill(1996n); // "the"
          ids[0] = 101n; ids[t - 1] = 102n;
          const feeds = {
            input_ids: new ort.Tensor('int64', ids, [1, t]),
            attention_mask: new ort.Tensor('int64', new BigInt64Array(t).fill(1n), [1, t]),
            token_type_ids: new ort.Tensor('int64', new BigInt64Array(t), [1, t]),
          };
          const r = await session.run(feeds);
          outputs = Object.entries(r).map(([k, v]) => `${k} ${v.dims.join('×')}`);
        };
        return { ms: await (0, eval)(timing)(run, lengths, iters), isolated: crossOriginIsolated, outputs };
      }, [TIMING, LENGTHS, ITERS, threads]);
      if (threads > 1 && !isolated) { notes.push('ONNX Runtime Web, 2 threads: skipped, the page is not cross-origin isolated'); continue; }
      rows.push({ where: `Chromium, ${threads} thread${threads > 1 ? 's' : ''}`, engine: `ONNX Runtime Web ${version} (wasm)`, ms });
      if (threads === 1) notes.push(`ONNX Runtime Web returns ${outputs.join(', ')} at T = ${LENGTHS[LENGTHS.length - 1]}`);
      await page.close();
    }
  }
} finally {
  await browser.close();
  server.close();
}

// ---------- the table ----------
const cell = (x) => (x === undefined ? '—' : x.toFixed(x < 100 ? 1 : 0));
const head = `| where | engine | ${LENGTHS.map((t) => `T = ${t}`).join(' | ')} |`;
console.log(`${path.basename(MODEL)}, batch 1, ms per forward pass, median of ${ITERS} after 3 s of passes at every length and 2 warm-ups, every attention probability returned`);
console.log(head);
console.log(`|---|---|${LENGTHS.map(() => '---:').join('|')}|`);
for (const r of rows) console.log(`| ${r.where} | ${r.engine} | ${LENGTHS.map((t) => cell(r.ms[t])).join(' | ')} |`);
// each peer against attnscope in the same place at the same thread count (at one thread in the
// browser, the build the page runs there: relaxed SIMD, the first one-thread row)
const ours = (where) => {
  const same = rows.filter((r) => r.engine.startsWith('attnscope') && r.where.split(',')[0] === where.split(',')[0]);
  return same.find((r) => r.where === where);
};
console.log('\nattnscope ÷ peer (below 1: attnscope is faster)');
for (const r of rows.filter((x) => !x.engine.startsWith('attnscope'))) {
  const a = ours(r.where);
  if (!a) continue;
  console.log(`  ${a.where} attnscope vs ${r.engine}, ${r.where}: ${LENGTHS.map((t) => `T = ${t}: ${(a.ms[t] / r.ms[t]).toFixed(2)}`).join(', ')}`);
  // and the page, every view drawn, against the peer's pass alone
  const page = rows.find((x) => x.engine.startsWith('attnscope page') && x.where === r.where);
  if (page) console.log(`  ${page.where} the attnscope page, a keystroke to every view drawn, vs ${r.engine}'s pass: ${LENGTHS.map((t) => `T = ${t}: ${(page.ms[t] / r.ms[t]).toFixed(2)}`).join(', ')}`);
}
for (const n of notes) console.log(`note: ${n}`);
