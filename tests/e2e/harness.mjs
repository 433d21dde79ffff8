// Shared set-up for the end-to-end tests and the latency benchmark: the app served as
// `make serve` serves it, and Debian's Chromium driven by playwright-core.
import { spawn, execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { before, after } from 'node:test';
import { chromium } from 'playwright-core';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const ARTIFACTS = path.join(ROOT, 'test-artifacts');
export const MODEL_DIR = path.join(ROOT, 'assets/models/all-MiniLM-L6-v2');
/** The long-text benchmarks' paragraph (~72 tokens of SmolLM2's), repeated N times. */
export const PARAGRAPH = 'The committee met on a wet Tuesday morning to decide where the new library would stand. '
  + 'Some wanted it near the river, where the old mill had been; others argued for the square, because '
  + 'children walk there after school and the buses stop at its corner. After two hours nobody had '
  + 'changed their mind, so the chair suggested a walk to both places before lunch. ';
mkdirSync(ARTIFACTS, { recursive: true });

const BASE_ARGS = ['--no-sandbox', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'];

/** A random local port for a test's server, below Linux's ephemeral ports (32768–60999), which
 *  the browser's and Node's own connections take. */
export const freePort = () => 20000 + Math.floor(Math.random() * 12000);

/** Starts scripts/serve.py on a free local port (with `isolation` false, without the COOP and COEP
 *  headers, as a plain static host: the engine then runs on one thread); resolves to {url, stop}.
 *  A port that does not answer within 10 s (taken, say) is left for another, three times at most. */
export async function startServer({ isolation = true } = {}) {
  const tried = [];
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = freePort();
    tried.push(port);
    const proc = spawn('python3', [path.join(ROOT, 'scripts/serve.py')], {
      env: { ...process.env, PORT: String(port), ATTNSCOPE_QUIET: '1', ...(isolation ? {} : { ATTNSCOPE_ISOLATION: '0' }) },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    let exited = false;
    proc.on('exit', () => { exited = true; });
    const url = `http://127.0.0.1:${port}/`;
    for (let i = 0; i < 100 && !exited; i++) {
      try { if ((await fetch(url)).ok) return { url, stop: () => proc.kill() }; } catch { /* not yet */ }
      await new Promise((r) => setTimeout(r, 100));
    }
    proc.kill();
  }
  throw new Error(`the app server did not start on 127.0.0.1, ports ${tried.join(', ')}`);
}

/** Debian's Chromium; with WebGPU on SwiftShader unless `webgpu` is false. */
export function launch({ webgpu = true, extraArgs = [] } = {}) {
  const args = [...BASE_ARGS, ...(webgpu ? ['--enable-unsafe-webgpu'] : ['--disable-blink-features=WebGPU']), ...extraArgs];
  return chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args });
}

/** A page that records console errors, uncaught exceptions and every request. */
export async function openPage(browser, url, { width = 1400, height = 1300, scale = 1 } = {}) {
  const page = await browser.newPage({ viewport: { width, height }, deviceScaleFactor: scale });
  const problems = [];
  const requests = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
  page.on('request', (r) => requests.push(r.url()));
  page.on('worker', (w) => w.on('console', (m) => { if (m.type() === 'error') problems.push(`worker console: ${m.text()}`); }));
  if (url) await page.goto(url);
  return { page, problems, requests };
}

/**
 * Fixture models (tests/fixtures/models/NAME) served for one test file, copied to
 * assets/models/e2e-TAG-NAME (git-ignored; the server serves assets/models/): `path(name)` is a
 * copy's path for a link, `copy()` makes them (the file's `before`), `remove()` deletes them
 * (its `after`).
 */
export function servedFixtures(tag, names) {
  const rel = (name) => `assets/models/e2e-${tag}-${name}`;
  return {
    path: rel,
    copy: () => { for (const name of names) cpSync(path.join(ROOT, 'tests/fixtures/models', name), path.join(ROOT, rel(name)), { recursive: true }); },
    remove: () => { for (const name of names) rmSync(path.join(ROOT, rel(name)), { recursive: true, force: true }); },
  };
}

/**
 * A test file's site, set up once for the file: registers its `before` (copy `fixtures`, a
 * servedFixtures, if any; start the server; launch the browser) and its `after` (undo all three).
 * `open(rest, opts)` opens the server's URL followed by `rest` in a new page: openPage's record.
 */
export function site({ fixtures = null } = {}) {
  const s = { server: null, browser: null, open: (rest, opts) => openPage(s.browser, `${s.server.url}${rest}`, opts) };
  before(async () => {
    fixtures?.copy();
    s.server = await startServer();
    s.browser = await launch();
  });
  after(async () => {
    await s.browser?.close();
    s.server?.stop();
    fixtures?.remove();
  });
  return s;
}

/** Waits until the page has a model and a result (or failed to load one). */
export async function ready(page) {
  await page.waitForFunction(() => window.attnscope && ((window.attnscope.result && window.attnscope.info) || window.attnscope.error), null, { timeout: 120000 });
  return page.evaluate(() => window.attnscope.error);
}

/** Largest |a − b| over two [L][H][T][T] arrays. */
export function maxDiff(a, b) {
  let max = 0;
  for (let l = 0; l < b.length; l++) for (let h = 0; h < b[l].length; h++)
    for (let q = 0; q < b[l][h].length; q++) for (let k = 0; k < b[l][h][q].length; k++)
      max = Math.max(max, Math.abs(a[l][h][q][k] - b[l][h][q][k]));
  return max;
}

/** Fraction of a canvas's pixels that are not (near) white or transparent. */
export const INK = `(c) => {
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 240 || d[i + 1] < 240)) n++;
  return n / (d.length / 4);
}`;

/**
 * The model grid in the element \`selector\`, read back from its one canvas (run it with
 * \`page.evaluate(gridCells, selector)\`): each head's cell with its layer, head, classes, text
 * alternative, the share of its pixels with ink (as INK counts it), the colour two device pixels
 * below its top edge, in the middle, and the colours (hex) of the frame line just above it.
 */
export function gridCells(selector) {
  const grid = document.querySelector(selector).querySelector('.grid'), c = grid.querySelector('canvas.thumbs');
  const r = c.width / c.clientWidth, ctx = c.getContext('2d');
  return [...grid.querySelectorAll('.cell')].map((cell) => {
    const x = Math.round(cell.offsetLeft * r), y = Math.round(cell.offsetTop * r);
    const s = Math.round((cell.offsetLeft + cell.offsetWidth) * r) - x;
    const d = ctx.getImageData(x, y, s, s).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 240 || d[i + 1] < 240)) n++;
    const top = [...ctx.getImageData(x + (s >> 1), y + 2, 1, 1).data.slice(0, 3)];
    const line = ctx.getImageData(x, y - 1, s, 1).data, frame = new Set();
    for (let i = 0; i < line.length; i += 4) if (line[i + 3] === 255) frame.add([0, 1, 2].map((j) => line[i + j].toString(16).padStart(2, '0')).join(''));
    return { layer: +cell.dataset.layer, head: +cell.dataset.head, classes: [...cell.classList], label: cell.getAttribute('aria-label'), ink: n / (s * s), top, frame: [...frame] };
  });
}

/**
 * `attnscope <args>`'s JSON: the numbers the page must match. The CLI of the test profile
 * (optimised: SmolLM2's reference takes seconds, not the half-minute of an unoptimised build):
 * `make test` names the one its `cargo test` built and ran (ATTNSCOPE_CLI), so that it compiles
 * no other; without it, `cargo run --profile test` builds it first, under the build lock (another
 * build may share the machine).
 */
export function attnscope(args) {
  const built = process.env.ATTNSCOPE_CLI;
  const [command, prefix] = built ? [built, []] : ['flock', ['/tmp/build.lock', 'cargo', 'run', '--quiet', '--profile', 'test', '--bin', 'attnscope', '--']];
  const out = execFileSync(command, [...prefix, ...args], {
    cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'ignore'],
  });
  return JSON.parse(out);
}

/** What the CLI prints for the same input on the default model (the contract the page must match). */
export const cli = (args) => attnscope(['attention', '--model', MODEL_DIR, ...args]);

/** Hovers cell (q, k) of the translation view's head view (`root`: its container); its tooltip's line
 *  (without the note under it that says what a special token is). */
export async function hoverTranslationCell(page, q, k, root = '.tr-head .tr-canvas') {
  const pt = await page.evaluate(([sel, q, k]) => {
    const v = document.querySelector(sel);
    v.scrollIntoView({ block: 'center' });
    const g = v._view.g, r = v.querySelector('.overlay').getBoundingClientRect();
    return { x: r.left + g.x0 + (k + 0.5) * g.cell, y: r.top + g.y0 + (q + 0.5) * g.cell };
  }, [root, q, k]);
  await page.mouse.move(pt.x, pt.y);
  return page.evaluate((sel) => document.querySelector(sel).firstChild.textContent, `${root} .tooltip`);
}

/** Tensor `name` of a golden case (tools/make_fixtures.py, HF transformers' numbers): `{shape, data}`. */
export function golden(caseName, name) {
  const bytes = readFileSync(path.join(ROOT, 'tests/fixtures/golden', `${caseName}.safetensors`));
  const n = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8'));
  const t = header[name], [from, to] = t.data_offsets;
  const raw = bytes.subarray(8 + n + from, 8 + n + to);
  return { shape: t.shape, data: new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length)) };
}

/** SmolLM2-135M-Instruct Q4_1, the page's built-in model that writes (scripts/setup.sh fetches it). */
export const SMOLLM2_GGUF = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';

/** Whether set-up has fetched `rel` (under the repository); says so when not. */
export function fetched(rel) {
  if (existsSync(path.join(ROOT, rel))) return true;
  console.log(`${rel}: missing; \`make setup\` fetches it (scripts/setup.sh)`);
  return false;
}

/**
 * For the page's engine benchmarks: a blank page (`title`) on the app's origin, with the
 * one-thread wasm build and SmolLM2's session on `backend` (the CPU engine, or `gpu`: WebGPU)
 * loaded in it as `window.smollm2` `{session, words}` (`words`: store.js `ROLE_WORDS`). Returns
 * the page.
 */
export async function smollm2Page(browser, server, title, { backend = 'cpu' } = {}) {
  const { page } = await openPage(browser, null);
  await page.route('**/bench.html', (r) => r.fulfill({ contentType: 'text/html', body: `<!doctype html><title>${title}</title>` }));
  await page.goto(`${server.url}bench.html`);
  await page.evaluate(async ({ url, backend }) => {
    const m = await import('/web/pkg/attnscope.js');
    await m.default();
    const { ROLE_WORDS } = await import('/web/store.js');
    const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
    const session = await m.loadGgufSession('SmolLM2', m.WeightsFile.fromBytes('SmolLM2.gguf', bytes), backend);
    window.smollm2 = { session, words: ROLE_WORDS };
  }, { url: `${server.url}${SMOLLM2_GGUF}`, backend });
  return page;
}
