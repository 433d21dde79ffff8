// Inside the encoder (issue 8), end to end: the embeddings, Q/K/V, ·V, residual and feed-forward
// panels, each drawn from the engine's numbers, which equal the CLI's --layer-trace.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, launch, openPage, cli, ready, ARTIFACTS, INK } from './harness.mjs';

let server, browser;
const cache = new Map();
before(async () => { server = await startServer(); browser = await launch({ webgpu: false }); });
after(async () => { await browser?.close(); server?.stop(); });

const SENTENCE = 'The animal didn\'t cross the street because it was too tired.';
const enc = encodeURIComponent;
const TOL = 1e-4;

/** The CLI's layer trace of item 0 (one run a layer). */
function cliTrace(layer) {
  if (!cache.has(layer)) cache.set(layer, cli(['--layer-trace', String(layer), '--', SENTENCE]).results[0]);
  return cache.get(layer);
}

/** Opens the page with one panel open, waits until it has drawn the current run. */
async function openPanel(id, { layer = 2, head = 3, extra = '', width = 1280, height = 900 } = {}) {
  const p = await openPage(browser, `${server.url}#e=cpu&s=${enc(SENTENCE)}&inside=${id}&l=${layer}&h=${head}${extra}`, { width, height });
  assert.equal(await ready(p.page), null);
  await p.page.waitForFunction((pid) => {
    const el = document.getElementById(`inside-${pid}`);
    return el && el.dataset.drawn && el.dataset.drawn === String(window.attnscope.store.get().run?.id);
  }, id, { timeout: 60000 });
  return p;
}

/** Largest |page − CLI| of a layer-trace field (page name, CLI rows [T][W]). */
const fieldDiff = (page, name, rows) => page.evaluate(([n, r]) => {
  const f = window.attnscope.store.get().run.traceOf(0).get(n);
  let max = 0;
  r.forEach((row, t) => row.forEach((v, j) => { max = Math.max(max, Math.abs(f.values[t * f.width + j] - v)); }));
  return { max, width: f.width };
}, [name, rows]);

async function checkDrawn(page, id) {
  const panel = page.locator(`#inside-${id}`);
  const canvases = panel.locator('canvas[role="img"]');
  assert.ok(await canvases.count() > 0, `${id}: no picture`);
  const labels = await canvases.evaluateAll((cs) => cs.map((c) => c.getAttribute('aria-label') ?? ''));
  assert.ok(labels.every((l) => l.length > 10), `${id}: every picture has an aria-label (${labels})`);
  const ink = await canvases.first().evaluate(new Function(`return (${INK})`)());
  assert.ok(ink > 0.02, `${id}: the first picture is not blank (${ink})`);
  await panel.screenshot({ path: path.join(ARTIFACTS, `inside-${id}.png`) });
  return labels;
}

test('embeddings: the five steps equal the CLI, the position similarity is the engine\'s', async () => {
  const { page, problems } = await openPanel('embeddings', { layer: 2 });
  const want = cliTrace(0).layer_trace; // the CLI keeps the embeddings' steps with layer 0's trace; they are the same at any layer
  for (const [n, k] of [['word', 'word'], ['position', 'position'], ['tokenType', 'token_type'], ['sum', 'sum'], ['normed', 'normed']]) {
    const d = await fieldDiff(page, `embeddings.${n}`, want.embeddings[k]);
    assert.ok(d.max < TOL, `${n}: max |Δ| ${d.max}`);
    assert.equal(d.width, 384);
  }
  const pos = await page.evaluate(() => { const p = window.attnscope.store.get().positions; return { n: p.n, dim: p.dim, d00: p.learned[0], s01: p.sinusoidal[1], len: p.learned.length, sym: p.learned[5 * p.n + 9] - p.learned[9 * p.n + 5] }; });
  assert.equal(pos.n, 64);
  assert.equal(pos.dim, 384);
  assert.equal(pos.len, 64 * 64);
  assert.ok(Math.abs(pos.d00 - 1) < 1e-5 && Math.abs(pos.sym) < 1e-6);
  // sinusoidal positions 0 and 1: the mean over the D/2 frequencies of cos(1/10000^(2i/D))
  let want01 = 0;
  for (let i = 0; i < 192; i++) want01 += Math.cos(1 / 10000 ** ((2 * i) / 384)) / 192;
  assert.ok(Math.abs(pos.s01 - want01) < 1e-5, `${pos.s01} vs ${want01}`);
  const labels = await checkDrawn(page, 'embeddings');
  assert.ok(labels.some((l) => l.includes('384 dimensions')));
  assert.ok(labels.some((l) => l.includes('sinusoidal')));
  assert.deepEqual(problems, []);
  await page.close();
});

test('qkv: Q, K, V, context and the attention output equal the CLI', async () => {
  const { page, problems } = await openPanel('qkv', { layer: 2, head: 3 });
  const want = cliTrace(2).layer_trace;
  for (const [n, k] of [['q', 'q'], ['k', 'k'], ['v', 'v'], ['context', 'context'], ['attentionOutput', 'attention_output']]) {
    const d = await fieldDiff(page, n, want[k]);
    assert.ok(d.max < TOL, `${n}: max |Δ| ${d.max}`);
  }
  const labels = await checkDrawn(page, 'qkv');
  assert.ok(labels.some((l) => l.includes('12 bands of 32, head 3 outlined')), labels.join(' / '));
  assert.ok(labels.some((l) => l.includes('12 heads of (')));
  assert.deepEqual(problems, []);
  await page.close();
});

test('context: the focused head\'s context is its slice of the CLI\'s context', async () => {
  const { page, problems } = await openPanel('context', { layer: 2, head: 5 });
  const want = cliTrace(2);
  const slice = want.layer_trace.context.map((row) => row.slice(5 * 32, 6 * 32));
  const got = await page.evaluate(() => {
    const f = window.attnscope.store.get().run.traceOf(0).get('context');
    return Array.from({ length: window.attnscope.store.get().run.T }, (_, t) => Array.from(f.values.subarray(t * f.width + 160, t * f.width + 192)));
  });
  let max = 0;
  slice.forEach((row, t) => row.forEach((v, j) => { max = Math.max(max, Math.abs(got[t][j] - v)); }));
  assert.ok(max < TOL, `context head 5: ${max}`);
  const attn = await page.evaluate(() => Array.from(window.attnscope.store.get().run.head(0, 2, 5)));
  const T = want.tokens.length;
  let amax = 0;
  want.attention[2][5].forEach((row, q) => row.forEach((v, k) => { amax = Math.max(amax, Math.abs(attn[q * T + k] - v)); }));
  assert.ok(amax < TOL, `attention: ${amax}`);
  const labels = await checkDrawn(page, 'context');
  assert.ok(labels.some((l) => l.includes(`head 5's context: ${T} tokens × 32`)), labels.join(' / '));
  assert.deepEqual(problems, []);
  await page.close();
});

test('residual: input, attention output and output equal the CLI; post-LN is said', async () => {
  const { page, problems } = await openPanel('residual', { layer: 4 });
  const want = cliTrace(4).layer_trace;
  for (const [n, k] of [['input', 'input'], ['attentionOutput', 'attention_output'], ['output', 'output']]) {
    const d = await fieldDiff(page, n, want[k]);
    assert.ok(d.max < TOL, `${n}: max |Δ| ${d.max}`);
  }
  const flow = await page.locator('#inside-residual .inside-flow').textContent();
  assert.match(flow, /MultiHeadAttention→\+ x→LayerNorm₁/);
  await checkDrawn(page, 'residual');
  assert.deepEqual(problems, []);
  await page.close();
});

test('ffn: the pre-activation and the activation equal the CLI; the focused token follows the selection', async () => {
  const { page, problems } = await openPanel('ffn', { layer: 1 });
  const want = cliTrace(1).layer_trace;
  for (const [n, k] of [['preActivation', 'pre_activation'], ['intermediate', 'intermediate']]) {
    const d = await fieldDiff(page, n, want[k]);
    assert.ok(d.max < TOL, `${n}: max |Δ| ${d.max}`);
    assert.equal(d.width, 1536);
  }
  assert.equal(await page.locator('#inside-ffn').getAttribute('data-token'), '1');
  // the near-zero count the page shows is the CLI's intermediate of token 1 under the stated rule
  const row = want.intermediate[1];
  const top = Math.max(...row.map(Math.abs));
  const near = row.filter((v) => Math.abs(v) < 0.01 * top).length;
  assert.equal(Number(await page.locator('#inside-ffn').getAttribute('data-near-zero')), near);
  const labels = await checkDrawn(page, 'ffn');
  assert.ok(labels[0].includes('GELU (exact)') && labels[0].includes('1536 pre-activations'), labels[0]);
  await page.evaluate(() => window.attnscope.store.update({ sel: [4] }));
  await page.waitForFunction(() => document.getElementById('inside-ffn').dataset.token === '4', null, { timeout: 20000 });
  assert.deepEqual(problems, []);
  await page.close();
});

test('a phone: the panels do not overflow the page', async () => {
  const { page, problems } = await openPanel('embeddings', { width: 390, height: 844, extra: '' });
  for (const id of ['qkv', 'context', 'residual', 'ffn']) {
    await page.locator(`#inside details[data-panel="${id}"] > summary`).click();
    await page.waitForFunction((pid) => document.getElementById(`inside-${pid}`).dataset.drawn === String(window.attnscope.store.get().run?.id), id, { timeout: 60000 });
  }
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page is ${overflow}px wider than the phone`);
  await page.locator('#inside').screenshot({ path: path.join(ARTIFACTS, 'inside-phone.png') });
  assert.deepEqual(problems, []);
  await page.close();
});

test('<attn-scope view="inside">: the panels inside the focused layer, its model\'s own, each the engine\'s numbers (the CLI\'s), the layer and the head chosen above them', async () => {
  const { page, problems } = await openPage(browser, null, { width: 900, height: 900 });
  await page.route('**/favicon.ico', (r) => r.fulfill({ status: 204 }));
  await page.goto(`${server.url}web/views.css`);
  const shown = () => page.evaluate(async () => {
    const el = document.getElementById('in'), root = el.shadowRoot;
    const panels = () => [...root.querySelectorAll('.layer-inside [data-panel]:not([hidden])')];
    const open = () => panels().filter((p) => p.open);
    const drawn = () => el.result && open().length > 0 && open().every((p) => p.querySelector('.view').dataset.drawn === String(el.store.get().run?.id));
    for (let i = 0; i < 900 && !drawn(); i++) await new Promise((r) => setTimeout(r, 100));
    return {
      drawn: drawn(), panels: panels().map((p) => [p.dataset.panel, p.querySelector('summary').textContent]), open: open().map((p) => p.dataset.panel), oneView: !root.querySelector('.view').hidden,
      controls: !root.querySelector('.controls').hidden, layer: el.store.get().layer, head: el.store.get().head,
    };
  });
  await page.evaluate(async ({ sentence, model }) => {
    await import('/web/attn-scope.js');
    const el = document.createElement('attn-scope');
    el.id = 'in';
    for (const [k, v] of Object.entries({ sentence, model, view: 'inside', layer: '1', head: '3', engine: 'cpu', controls: '' })) el.setAttribute(k, v);
    el.style.cssText = 'display:block;width:860px';
    document.body.prepend(el);
  }, { sentence: SENTENCE, model: `${server.url}assets/models/all-MiniLM-L6-v2/` });
  const first = await shown();
  assert.ok(first.drawn, 'the open panel drawn from the run');
  assert.deepEqual(first.open, ['embeddings'], 'the first panel open, the others a click away');
  assert.equal(first.oneView, false);
  assert.deepEqual(first.panels.map(([id]) => id), ['embeddings', 'qkv', 'context', 'scale', 'residual', 'ffn', 'stack'], 'BERT\'s: no rotary positions, no cache, no pair');
  assert.deepEqual(first.panels.find(([id]) => id === 'residual'), ['residual', '5 · Residual + LayerNorm']);
  assert.match(first.panels.find(([id]) => id === 'ffn')[1], /Linear → GELU → Linear/);
  // panels opened, then the layer chosen above them: its trace is the CLI's
  for (const id of ['qkv', 'ffn']) await page.locator(`#in [data-panel="${id}"] > summary`).click();
  await page.locator('#in .controls .layer').selectOption('2');
  const second = await shown();
  assert.ok(second.drawn && second.layer === 2 && second.head === 3, JSON.stringify(second));
  assert.deepEqual(second.open, ['embeddings', 'qkv', 'ffn']);
  const want = cliTrace(2).layer_trace;
  for (const [n, k] of [['q', 'q'], ['context', 'context'], ['attentionOutput', 'attention_output'], ['intermediate', 'intermediate']]) {
    const d = await page.evaluate(([n, rows]) => {
      const f = document.getElementById('in').store.get().run.traceOf(0).get(n);
      let max = 0;
      rows.forEach((row, t) => row.forEach((v, j) => { max = Math.max(max, Math.abs(f.values[t * f.width + j] - v)); }));
      return max;
    }, [n, want[k]]);
    assert.ok(d < TOL, `${n}: max |Δ| ${d}`);
  }
  const labels = await page.evaluate(() => [...document.getElementById('in').shadowRoot.querySelectorAll('[data-panel="qkv"] canvas[role="img"]')].map((c) => c.getAttribute('aria-label')));
  assert.ok(labels.some((l) => l.includes('12 bands of 32, head 3 outlined')), labels.join(' / '));
  await page.locator('#in').screenshot({ path: path.join(ARTIFACTS, 'inside-element.png') });
  assert.deepEqual(problems, []);
  await page.close();
});
