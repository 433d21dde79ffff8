// Attention computed elsewhere (docs/given.md) in <attn-scope>: a file python/attnscope wrote
// (safetensors, by `src`), the CLI's JSON (by the `data` property), and input that cannot be
// read. The element's `result` carries the numbers given, bit for bit; the views that need a
// model say so; a bad file is an error naming it, nothing thrown.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { startServer, launch, openPage, cli, ARTIFACTS, ROOT } from './harness.mjs';

let browser, server;

/** The largest |a − b| over two nested arrays of numbers of the same shape. */
const maxAbsDiff = (a, b) => (typeof a === 'number' ? Math.abs(a - b) : a.reduce((m, x, i) => Math.max(m, maxAbsDiff(x, b[i])), 0));
before(async () => { server = await startServer(); browser = await launch({ webgpu: false }); });
after(async () => { await browser?.close(); server?.stop(); });

/** A page of the app's origin with an <attn-scope> (`attrs`) in it, `data` set first when given
 *  (in the page: bytes as a Uint8Array, an object as itself), resolved with its first `result`
 *  or the error it shows. */
async function element(page, attrs, data = null) {
  await origin(page);
  return page.evaluate(async ({ attrs, data }) => {
    await import('/web/attn-scope.js');
    const el = document.createElement('attn-scope');
    el.id = 'given';
    el.style.cssText = 'display:block;width:640px;height:640px';
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (data) el.data = data.bytes ? new Uint8Array(data.bytes) : data.object;
    document.body.prepend(el);
    el.scrollIntoView();
    const shown = () => el.result ?? (el.shadowRoot.querySelector('.message:not([hidden])')?.textContent || null);
    for (let i = 0; i < 600 && !shown(); i++) await new Promise((r) => setTimeout(r, 100));
    const r = el.result;
    return {
      error: r ? null : shown(),
      caption: el.shadowRoot.querySelector('.caption').textContent,
      view: el.shadowRoot.querySelector('.view').textContent,
      cells: el.shadowRoot.querySelectorAll('.grid .cell').length,
      result: r && { model: r.model, backend: r.backend, mask_kind: r.mask_kind, precision: r.precision, layers: r.layers, tokens: r.tokens, attention: r.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))) },
    };
  }, { attrs, data });
}

/** The app's origin (its modules import from there), on a page of its own: a stylesheet's, with
 *  the browser's request for a favicon answered (the server has none). */
async function origin(page) {
  await page.route('**/favicon.ico', (r) => r.fulfill({ status: 204 }));
  await page.goto(`${server.url}web/views.css`);
}

/** What a Python script using python/attnscope (target/py's numpy) writes to stdout, as JSON. */
function python(code) {
  return JSON.parse(execFileSync(path.join(ROOT, 'target/py/bin/python'), ['-c', code], {
    cwd: ROOT, env: { ...process.env, PYTHONPATH: path.join(ROOT, 'python') }, maxBuffer: 1 << 26,
  }));
}

/** python/attnscope's file for a random decoder with grouped-query heads, and its numbers. */
function pythonFile() {
  return python(`
import json, sys
import numpy as np
import attnscope
rng = np.random.default_rng(3)
L, H, K, T = 3, 6, 2, 7
x = rng.normal(size=(L, H, T, T))
x = np.where(np.tril(np.ones((T, T), bool)), x, -np.inf)
a = np.exp(x - x.max(-1, keepdims=True)); a = (a / a.sum(-1, keepdims=True)).astype(np.float32)
tokens = ["<s>", "Ġthe", "Ġcat", "Ġsat", "Ġon", "Ġit", "."]
g = attnscope.given(tuple(layer[None] for layer in a), tokens, num_key_value_heads=K, layer=2, heads=[4], model="tiny-gqa")
sys.stdout.buffer.write(json.dumps({"bytes": list(g.to_safetensors()), "attention": a.tolist(), "tokens": g.tokens}).encode())
`);
}

test('a safetensors file python/attnscope wrote: the decoder\'s heads as given, in groups, the file\'s layer and head', async () => {
  const want = pythonFile();
  const { page, problems, requests } = await openPage(browser, null, { width: 800, height: 800 });
  // the file by `src`: a blob URL of its bytes (the element fetches it as it would a URL)
  await origin(page);
  const got = await page.evaluate(async ({ bytes }) => {
    await import('/web/attn-scope.js');
    const el = document.createElement('attn-scope');
    el.style.cssText = 'display:block;width:640px;height:640px';
    el.setAttribute('view', 'model');
    el.setAttribute('src', URL.createObjectURL(new Blob([new Uint8Array(bytes)])));
    document.body.prepend(el);
    el.scrollIntoView();
    for (let i = 0; i < 600 && !el.result; i++) await new Promise((r) => setTimeout(r, 100));
    const r = el.result;
    return {
      caption: el.shadowRoot.querySelector('.caption').textContent,
      cells: el.shadowRoot.querySelectorAll('.grid .cell').length,
      groups: [...el.shadowRoot.querySelectorAll('.grid')].map((g) => g.getAttribute('aria-label')).join(' '),
      result: r && { model: r.model, backend: r.backend, mask_kind: r.mask_kind, tokens: r.tokens, attention: r.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))) },
    };
  }, { bytes: want.bytes });
  await page.screenshot({ path: path.join(ARTIFACTS, 'given-python.png') });
  assert.ok(got.result, `the element rendered the file (caption "${got.caption}")`);
  assert.deepEqual(got.result.tokens, want.tokens);
  assert.deepEqual(got.result.attention, want.attention, 'the numbers given, bit for bit');
  assert.equal(got.result.mask_kind, 'causal');
  assert.equal(got.result.model, 'tiny-gqa');
  assert.equal(got.cells, 3 * 6, 'a cell a head');
  assert.match(got.caption, /^tiny-gqa · layer 2, head 4 · given$/, 'the file\'s layer and head, and "given" where an engine would be named');
  assert.deepEqual(requests.filter((u) => /worker\.js|\.wasm|\/assets\/models\//.test(u)), [], 'no engine (its worker, its wasm) and no model for given attention');
  assert.deepEqual(problems, []);
});

test('a bfloat16 file (half the bytes): each value as the file stored it, the precision said', async () => {
  const want = python(`
import json, sys
import numpy as np
import attnscope
rng = np.random.default_rng(5)
x = rng.normal(size=(2, 3, 6, 6)) * 3
a = np.exp(x - x.max(-1, keepdims=True)); a = (a / a.sum(-1, keepdims=True)).astype(np.float32)
g = attnscope.given(a, [f"t{i}" for i in range(6)])
data = g.to_safetensors("bfloat16")
# the values the file holds: float32's upper halves, rounded to nearest even (numpy has no bfloat16)
u = a.view(np.uint32)
held = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
sys.stdout.write(json.dumps({"bytes": list(data), "held": held.tolist(), "exact": a.tolist(), "f32_bytes": len(g.to_safetensors())}))
`);
  assert.ok(want.bytes.length < want.f32_bytes, `${want.bytes.length} bytes against float32's ${want.f32_bytes}`);
  const { page, problems } = await openPage(browser, null, { width: 800, height: 800 });
  const got = await element(page, { view: 'model' }, { bytes: want.bytes });
  assert.equal(got.error, null);
  assert.deepEqual(got.result.attention, want.held, 'each value as the file stored it, bit for bit');
  assert.notDeepEqual(got.result.attention, want.exact.map((l) => l.map((h) => h.map((row) => row.map(Math.fround)))), 'bfloat16 rounds: the test can tell');
  assert.equal(got.result.precision, 'bfloat16');
  assert.match(got.caption, /· given \(bfloat16\)$/);
  assert.deepEqual(problems, []);
});

test('a uint16 file (half the bytes, p as round(p · 65535)): each value q / 65535, within 7.6e-6 of the one given, the precision said', async () => {
  const want = python(`
import json, sys
import numpy as np
import attnscope
rng = np.random.default_rng(6)
x = rng.normal(size=(2, 3, 6, 6)) * 3
a = np.exp(x - x.max(-1, keepdims=True)); a = (a / a.sum(-1, keepdims=True)).astype(np.float32)
g = attnscope.given(a, [f"t{i}" for i in range(6)])
data = g.to_safetensors("uint16")
n = int.from_bytes(data[:8], "little")
held = (np.frombuffer(data[8 + n:], "<u2") / 65535).reshape(a.shape)
sys.stdout.write(json.dumps({"bytes": list(data), "held": held.tolist(), "exact": a.tolist()}))
`);
  const { page, problems } = await openPage(browser, null, { width: 800, height: 800 });
  const got = await element(page, { view: 'model' }, { bytes: want.bytes });
  assert.equal(got.error, null);
  const f32 = (t) => t.map((l) => l.map((h) => h.map((row) => row.map(Math.fround))));
  assert.deepEqual(got.result.attention, f32(want.held), 'each value q / 65535, bit for bit');
  const far = got.result.attention.flat(3).reduce((m, v, i) => Math.max(m, Math.abs(v - want.exact.flat(3)[i])), 0);
  assert.ok(far > 0 && far <= 0.5 / 65535 + 1e-7, `max |Δ| ${far} from the values given: rounded, within half a step`);
  assert.equal(got.result.precision, 'uint16');
  assert.match(got.caption, /· given$/, 'no note in the caption: below what any view shows');
  assert.deepEqual(problems, []);
});

test('some layers only (include_layers): each drawn and published under its own number', async () => {
  const want = python(`
import json, sys
import numpy as np
import attnscope
rng = np.random.default_rng(9)
x = rng.normal(size=(5, 2, 4, 4))
a = np.exp(x - x.max(-1, keepdims=True)); a = (a / a.sum(-1, keepdims=True)).astype(np.float32)
g = attnscope.given(a, ["w", "x", "y", "z"], include_layers=[1, 3, 4], layer=3, heads=[1])
sys.stdout.write(json.dumps({"bytes": list(g.to_safetensors()), "kept": a[[1, 3, 4]].tolist()}))
`);
  const { page, problems } = await openPage(browser, null, { width: 800, height: 800 });
  const got = await element(page, { view: 'model' }, { bytes: want.bytes });
  assert.equal(got.error, null);
  assert.deepEqual(got.result.layers, [1, 3, 4]);
  assert.deepEqual(got.result.attention, want.kept, 'the layers kept, in order, bit for bit');
  assert.match(got.caption, /^layer 3, head 1 · given$/, 'the file\'s layer by its own number');
  const labels = await page.evaluate(() => [...document.querySelector('#given').shadowRoot.querySelectorAll('.grid .rowlabel')].map((e) => e.textContent));
  assert.deepEqual(labels, ['L1', 'L3', 'L4']);
  // no model to run again without a head: alt-click knocks nothing out, and the grid does not offer it
  const knock = await page.evaluate(async () => {
    const el = document.querySelector('#given'), grid = el.shadowRoot.querySelector('.grid');
    el.shadowRoot.querySelector('.grid .cell').dispatchEvent(new MouseEvent('click', { bubbles: true, altKey: true }));
    await new Promise((r) => setTimeout(r, 300));
    return { off: el.store.get().off, label: grid.getAttribute('aria-label') };
  });
  assert.equal(knock.off.length, 0, `nothing knocked out (${JSON.stringify(knock.off)})`);
  assert.doesNotMatch(knock.label, /alt-click/);
  assert.deepEqual(problems, []);
});

test('the CLI\'s JSON by the `data` property: the CLI\'s numbers; the steps view says it needs the model', async () => {
  const out = cli(['--', 'time flies like an arrow']);
  const { page, problems } = await openPage(browser, null, { width: 800, height: 800 });
  const got = await element(page, { view: 'head', layer: '1', head: '3' }, { object: out });
  assert.equal(got.error, null);
  assert.deepEqual(got.result.tokens, out.results[0].tokens);
  // the CLI prints each f32 in its shortest decimal: as f32, the same bits
  const f32 = out.results[0].attention.map((l) => l.map((h) => h.map((row) => row.map(Math.fround))));
  assert.deepEqual(got.result.attention, f32, 'the CLI\'s numbers, bit for bit');
  assert.equal(got.result.mask_kind, 'none');
  assert.match(got.caption, /^all-MiniLM-L6-v2 · layer 1, head 3 · given$/);
  await page.screenshot({ path: path.join(ARTIFACTS, 'given-cli.png') });
  const steps = await element(page, { view: 'steps' }, { object: out });
  assert.match(steps.view, /computes from the model itself/, 'the steps inside a layer need the model');
  assert.deepEqual(problems, []);
});

test('input that cannot be read is an error naming it, and nothing is thrown', async () => {
  const { page, problems } = await openPage(browser, null, { width: 800, height: 800 });
  const rec = (r) => ({ stack: 'decoder', kind: 'self', layer: 0, query_heads: 1, kv_heads: 1, n_q: 2, n_k: 2, values: [[[1, 0], [0.5, 0.5]]], ...r });
  const file = (r, extra = {}) => ({ object: { format: 'attnscope.given/1', architecture: { kind: 'decoder' }, mask: 'causal', tokens: ['a', 'b'], records: [rec(r)], ...extra } });
  const bytes = (text) => [...new TextEncoder().encode(text)];
  const cases = [
    [{ bytes: [1, 2, 3] }, /^data: 3 bytes, neither JSON nor a safetensors file \(it starts 01 02 03\)/],
    [{ bytes: bytes('<!doctype html><p>not found') }, /^data: 27 bytes, neither JSON nor a safetensors file \(it starts 3c 21 64 6f/],
    [{ bytes: [...new Uint8Array(new BigUint64Array([4n]).buffer), ...bytes('{}  ')] }, /^data: a safetensors file without attnscope's records/],
    [{ bytes: [0xef, 0xbb, 0xbf, ...bytes('{"format": "attnscope.given/9"}')] }, /^data: format "attnscope.given\/9": this page reads attnscope.given\/1/],
    [{ object: { format: 'attnscope.given/1', architecture: { kind: 'decoder' }, tokens: ['a'], records: [null] } }, /^data: records\[0\]: expected an object/],
    [file({ values: [[[1, 0], [0.5, 'x']]] }), /^data: records\[0\]\.values: "x" at head 0, query 1, key 1: a number/],
    [file({ values: [[[1, 0], [0.5, 1.5]]] }), /^data: records\[0\]: 1\.5 at head 0, query 1, key 1; attention probabilities are in \[0, 1\]/],
    [file({ values: [[[0.5, 0.5], [0.5, 0.5]]] }), /^data: records\[0\]: 0\.5 at head 0, query 0, key 1; the mask is causal: a query attends to no later key/],
    [file({}, { tokens: ['a'] }), /^data: records\[0\]: 2 queries, but tokens has 1/],
    [file({ query_heads: 64, kv_heads: 64, n_q: 100000, n_k: 100000 }), /^data: records\[0\]: 100000 queries, but tokens has 2/],
    [file({ query_heads: 3, kv_heads: 2 }), /^data: records\[0\]: 3 query heads do not split into groups over 2 key\/value heads/],
    [file({ stack: 'encoder' }), /^data: records\[0\]: encoder self-attention in the records of a decoder: its own self-attention only/],
    [{ object: { ...file({}).object, records: [rec({ layer: 1 }), rec({ layer: 0 })] } }, /^data: records\[1\] \(decoder self, layer 0\) after records\[0\] \(decoder self, layer 1\): records go by stack/],
    [file({}, { sentence_b_start: 2 }), /^data: sentence_b_start 2: the position where a sentence pair's second sentence starts, one of the 2 tokens/],
  ];
  for (const [data, message] of cases) {
    const got = await element(page, { view: 'head' }, data);
    assert.equal(got.result, null);
    assert.match(got.error ?? '', message);
  }
  const missing = await element(page, { view: 'head', src: `${server.url}web/no-such-file.safetensors` });
  assert.match(missing.error ?? '', /no-such-file\.safetensors: HTTP 404/);
  assert.deepEqual(problems.filter((p) => !/404/.test(p)), [], 'no uncaught error (the 404 is the browser\'s own console line)');
});

test('data set while the element\'s model loads replaces it, before its module defines the element too; data = null brings the model back', async () => {
  const out = cli(['--', 'time flies like an arrow']);
  const { page, problems } = await openPage(browser, null, { width: 800, height: 800 });
  await origin(page);
  const got = await page.evaluate(async (out) => {
    const wait = async (ok, ms = 60000) => { for (let t = 0; t < ms && !ok(); t += 100) await new Promise((r) => setTimeout(r, 100)); return ok(); };
    // set before the module defines <attn-scope>: an own property the element takes on upgrade
    const early = document.createElement('attn-scope');
    early.setAttribute('view', 'head');
    early.data = out;
    early.style.cssText = 'display:block;width:400px;height:400px';
    document.body.prepend(early);
    await import('/web/attn-scope.js');
    await wait(() => early.result);
    // the default model loading when data comes: its model, when it is in, does not replace the data's
    const late = document.createElement('attn-scope');
    late.setAttribute('view', 'head');
    late.setAttribute('sentence', 'a dog');
    late.style.cssText = 'display:block;width:400px;height:400px';
    document.body.prepend(late);
    await wait(() => late.shadowRoot.querySelector('.loading:not([hidden])'), 10000);
    late.data = out;
    await wait(() => late.result?.backend === 'given');
    await new Promise((r) => setTimeout(r, 8000)); // long enough for the model to load
    const kept = { backend: late.result?.backend, tokens: late.result?.tokens, message: late.shadowRoot.querySelector('.message').hidden ? '' : late.shadowRoot.querySelector('.message').textContent, caption: late.shadowRoot.querySelector('.caption').textContent };
    // data = null, no src: the model, and the sentence's run
    late.data = null;
    await wait(() => late.result && late.result.backend !== 'given');
    return { early: early.result?.backend, earlyTokens: early.result?.tokens, kept, back: { backend: late.result?.backend, tokens: late.result?.tokens } };
  }, out);
  assert.equal(got.early, 'given', 'data set before the module defined the element');
  assert.deepEqual(got.earlyTokens, out.results[0].tokens);
  assert.equal(got.kept.backend, 'given', 'the model that was loading did not replace the given attention');
  assert.deepEqual(got.kept.tokens, out.results[0].tokens);
  assert.equal(got.kept.message, '');
  assert.match(got.kept.caption, /· given$/);
  assert.notEqual(got.back.backend, 'given');
  assert.deepEqual(got.back.tokens, ['[CLS]', 'a', 'dog', '[SEP]'], 'data = null: the model runs the element\'s sentence');
  assert.deepEqual(problems, []);
});

test('a view that needed the model, back with the model (data = null): drawn in full, nothing of the note left', async () => {
  const out = cli(['--', 'time flies like an arrow']);
  const { page, problems } = await openPage(browser, null, { width: 800, height: 900 });
  await origin(page);
  const got = await page.evaluate(async (out) => {
    const wait = async (ok, ms = 90000) => { for (let t = 0; t < ms && !ok(); t += 100) await new Promise((r) => setTimeout(r, 100)); return ok(); };
    await import('/web/attn-scope.js');
    const el = document.createElement('attn-scope');
    el.setAttribute('view', 'steps');
    el.setAttribute('sentence', 'a dog');
    el.style.cssText = 'display:block;width:700px';
    el.data = out;
    document.body.prepend(el);
    await wait(() => el.result?.backend === 'given' && /computes from the model/.test(el.shadowRoot.querySelector('.view').textContent));
    const given = el.shadowRoot.querySelector('.view').textContent;
    el.data = null;
    await wait(() => el.result && el.result.backend !== 'given' && el.shadowRoot.querySelectorAll('.view canvas').length > 0);
    await new Promise((r) => setTimeout(r, 500));
    const view = el.shadowRoot.querySelector('.view');
    return { given, back: view.textContent, canvases: view.querySelectorAll('canvas').length, backend: el.result?.backend };
  }, out);
  assert.match(got.given, /computes from the model itself/);
  assert.notEqual(got.backend, 'given');
  assert.doesNotMatch(got.back, /computes from the model itself/, 'the note is gone');
  assert.ok(got.canvases >= 4, `the steps drawn (${got.canvases} canvases)`);
  assert.deepEqual(problems, []);
});

/** python/attnscope's file for a random encoder–decoder (bertviz's trio, `attnscope.given`):
 *  `keep` names the attentions the file holds; `layers` include_layers. */
function encoderDecoderFile({ keep = ['encoder', 'decoder', 'cross'], layers = null } = {}) {
  return python(`
import json, sys
import numpy as np
import attnscope
keep, layers = ${JSON.stringify(JSON.stringify(keep))}, ${JSON.stringify(JSON.stringify(layers))}
keep, layers = json.loads(keep), json.loads(layers)
rng = np.random.default_rng(7)
def probs(L, H, n_q, n_k, causal=False):
    x = rng.normal(size=(L, H, n_q, n_k)) * 2
    if causal:
        x = np.where(np.tril(np.ones((n_q, n_k), bool)), x, -np.inf)
    a = np.exp(x - x.max(-1, keepdims=True))
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)
S, T = 6, 5
enc, dec, cross = probs(3, 4, S, S), probs(3, 4, T, T, causal=True), probs(3, 4, T, S)
src = ["▁The", "▁cat", "▁sat", "▁down", ".", "</s>"]
tgt = ["<pad>", "▁Die", "▁Katze", "▁saß", "."]
args = {"encoder": enc, "decoder": dec, "cross": cross}
g = attnscope.given(**{f"{k}_attention": tuple(l[None] for l in args[k]) for k in keep},
                    encoder_tokens=src, decoder_tokens=tgt, include_layers=layers, model="tiny-marian")
want = {f"{k}_attention": args[k][layers if layers else slice(None)].tolist() for k in keep}
sys.stdout.write(json.dumps({"bytes": list(g.to_safetensors()), "want": want, "src": g.encoder_tokens, "tgt": g.decoder_tokens}))
`);
}

/** An <attn-scope> (`attrs`) given `bytes`: its result's attentions and tokens, its view's text
 *  and controls, after `then(el)` (clicks) where given. */
async function encoderDecoder(page, attrs, bytes, clicks = []) {
  await origin(page);
  return page.evaluate(async ({ attrs, bytes, clicks }) => {
    const wait = async (ok, ms = 30000) => { for (let t = 0; t < ms && !ok(); t += 50) await new Promise((r) => setTimeout(r, 50)); return ok(); };
    await import('/web/attn-scope.js');
    const el = document.createElement('attn-scope');
    el.style.cssText = 'display:block;width:900px';
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    el.data = new Uint8Array(bytes);
    document.body.prepend(el);
    el.scrollIntoView();
    await wait(() => el.result || el.shadowRoot.querySelector('.message:not([hidden])'));
    const root = el.shadowRoot;
    const shot = () => ({
      pressed: root.querySelector('.tr-attn[aria-pressed="true"]')?.dataset.attn ?? null,
      attentions: [...root.querySelectorAll('.tr-attn')].map((b) => b.dataset.attn),
      layers: [...root.querySelectorAll('select[aria-label="layer"] option')].map((o) => o.textContent),
      head: root.querySelector('.tr-head figcaption')?.textContent ?? null,
      step: root.querySelector('.tr-step h3')?.textContent ?? null,
      output: root.querySelector('.tr-output')?.textContent ?? null,
      grid: root.querySelector('.tr-grid .grid')?.getAttribute('aria-label') ?? null,
      line: root.querySelector('.tr-line')?.textContent ?? null,
    });
    const states = [shot()];
    for (const c of clicks) {
      root.querySelector(c).click();
      await new Promise((r) => setTimeout(r, 200));
      states.push(shot());
    }
    const r = el.result;
    // the rows are views into the records' Float32Arrays: as lists, to compare with the file's
    const plain = (a) => a && (ArrayBuffer.isView(a) ? Array.from(a) : a.map(plain));
    return {
      error: root.querySelector('.message:not([hidden])')?.textContent ?? null,
      caption: root.querySelector('.caption').textContent, view: root.querySelector('.view').textContent, states,
      result: r && { model: r.model, backend: r.backend, source_tokens: r.source_tokens, decoder_tokens: r.decoder_tokens, encoder_attention: plain(r.encoder_attention), decoder_attention: plain(r.decoder_attention), cross_attention: plain(r.cross_attention) },
    };
  }, { attrs, bytes, clicks });
}

test('an encoder–decoder\'s given attention (bertviz\'s trio): the three attentions as given, each drawn, the decoder\'s steps by what they read', async () => {
  const file = encoderDecoderFile();
  const { page, problems, requests } = await openPage(browser, null, { width: 1000, height: 1000 });
  const got = await encoderDecoder(page, { view: 'model' }, file.bytes, ['.tr-attn[data-attn="decoder"]', '.tr-attn[data-attn="encoder"]']);
  await page.screenshot({ path: path.join(ARTIFACTS, 'given-encoder-decoder.png') });
  assert.equal(got.error, null);
  assert.ok(got.result, `the element rendered the file (caption "${got.caption}")`);
  assert.equal(got.result.backend, 'given');
  assert.equal(got.result.model, 'tiny-marian');
  assert.deepEqual(got.result.source_tokens, file.src);
  assert.deepEqual(got.result.decoder_tokens, file.tgt);
  for (const k of ['encoder_attention', 'decoder_attention', 'cross_attention']) assert.deepEqual(got.result[k], file.want[k], `${k}: the numbers given, bit for bit`);
  assert.match(got.caption, /^tiny-marian · given$/);
  const [cross, dec, enc] = got.states;
  assert.deepEqual(cross.attentions, ['cross', 'decoder', 'encoder']);
  assert.equal(cross.pressed, 'cross', 'it opens on the cross-attention');
  assert.match(cross.grid, /every layer and head of the cross-attention: 3 layers × 4 heads/);
  assert.match(cross.step, /^Step 5 of 5: the decoder reads “\.”/, 'a step by what it reads: what it wrote is the model\'s, not given');
  assert.doesNotMatch(cross.step, /writes/);
  assert.match(cross.output, /^Decoder input \(given\): /);
  assert.match(cross.line, /as given: .*rows: the token each step reads/, 'the line says what the rows are, not "writes ← reads"');
  assert.equal(dec.pressed, 'decoder');
  assert.match(dec.grid, /decoder self-attention/);
  assert.equal(enc.pressed, 'encoder');
  assert.match(enc.grid, /encoder self-attention: 3 layers × 4 heads/);
  assert.deepEqual(requests.filter((u) => /worker\.js|\.wasm|\/assets\/models\//.test(u)), [], 'no engine and no model for given attention');
  assert.deepEqual(problems, []);
});

test('an encoder–decoder\'s given attention, some of it: the cross-attention alone of two layers, each under its own number; inside the decoder needs the model', async () => {
  const file = encoderDecoderFile({ keep: ['cross'], layers: [0, 2] });
  const { page, problems } = await openPage(browser, null, { width: 1000, height: 1000 });
  const got = await encoderDecoder(page, { view: 'head', layer: '1' }, file.bytes);
  assert.equal(got.error, null);
  assert.deepEqual(got.result.cross_attention, file.want.cross_attention);
  assert.equal(got.result.encoder_attention, null);
  const [s] = got.states;
  assert.deepEqual(s.attentions, ['cross'], 'only the attention the file holds');
  assert.deepEqual(s.layers, ['0', '2'], 'the layers under their own numbers');
  assert.match(s.head, /^Layer 2, head 0: 5 steps \(rows: what each reads\) × 6 source tokens/);
  const inside = await encoderDecoder(page, { view: 'inside' }, file.bytes);
  assert.match(inside.view, /The inside view computes from a translation model: the attention shown was given/);
  assert.deepEqual(problems, []);
});

test('the page opens given attention: a link\'s data=, then a file chosen (an encoder–decoder\'s), a file it cannot read, then a model again', async () => {
  const dec = pythonFile(), encdec = encoderDecoderFile();
  const { page, problems } = await openPage(browser, null, { width: 1400, height: 1000 });
  await page.route('**/given/dec.safetensors', (r) => r.fulfill({ body: Buffer.from(dec.bytes) }));
  await page.goto(`${server.url}#data=/given/dec.safetensors`);
  await page.waitForFunction(() => window.attnscope?.result?.backend === 'given', null, { timeout: 60000 });
  const first = await page.evaluate(() => {
    const r = window.attnscope.result, s = window.attnscope.store.get();
    return {
      tokens: r.tokens, attention: r.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))), focus: [s.layer, s.head],
      name: document.getElementById('model-name').textContent, badge: document.getElementById('backend').textContent,
      sentence: document.getElementById('sentence').value, readOnly: document.getElementById('sentence').readOnly,
      knock: document.getElementById('knock-status').hidden, steps: document.getElementById('steps-view').textContent,
      cells: document.querySelectorAll('#model-view .grid .cell').length, pick: document.getElementById('model-pick').selectedOptions[0].textContent,
    };
  });
  assert.deepEqual(first.tokens, dec.tokens);
  assert.deepEqual(first.attention, dec.attention, 'the numbers given, bit for bit');
  assert.deepEqual(first.focus, [2, 4], 'where the file says');
  assert.match(first.name, /^tiny-gqa · given attention: decoder, 3 layers × 6 heads \(2 key\/value heads\)$/);
  assert.equal(first.badge, 'given');
  assert.equal(first.pick, 'tiny-gqa (given attention)');
  assert.ok(first.readOnly, 'the sentence is the file\'s');
  assert.equal(first.sentence, dec.tokens.join(''));
  assert.ok(first.knock, 'no knock-outs without a model');
  assert.match(first.steps, /computes from the model itself/);
  assert.equal(first.cells, 3 * 6);
  assert.match(page.url(), /[#&]data=%2Fgiven%2Fdec\.safetensors/, 'the link keeps it');
  await page.screenshot({ path: path.join(ARTIFACTS, 'given-page.png') });
  // a file chosen from disk: an encoder–decoder's, drawn by the translation view
  await page.setInputFiles('#files', { name: 'tiny-marian.safetensors', mimeType: 'application/octet-stream', buffer: Buffer.from(encdec.bytes) });
  await page.waitForFunction(() => window.attnscope.result?.cross_attention, null, { timeout: 30000 });
  const second = await page.evaluate(() => {
    const r = window.attnscope.result;
    const plain = (a) => a && (ArrayBuffer.isView(a) ? Array.from(a) : a.map(plain)); // the records' rows as lists
    return { r: { source_tokens: r.source_tokens, decoder_tokens: r.decoder_tokens, encoder_attention: plain(r.encoder_attention), decoder_attention: plain(r.decoder_attention), cross_attention: plain(r.cross_attention) }, step: document.querySelector('#translation-view .tr-step h3')?.textContent, hidden: document.getElementById('translation').hidden };
  });
  for (const k of ['encoder_attention', 'decoder_attention', 'cross_attention']) assert.deepEqual(second.r[k], encdec.want[k], k);
  assert.deepEqual(second.r.decoder_tokens, encdec.tgt);
  assert.equal(second.hidden, false);
  assert.match(second.step, /^Step 5 of 5: the decoder reads/);
  await page.waitForFunction(() => !/[#&]data=/.test(location.hash), null, { timeout: 5000 }); // a file from disk has no URL to keep
  // a file it cannot read: the error names it, and the attention shown stays
  await page.setInputFiles('#files', { name: 'notes.json', mimeType: 'application/json', buffer: Buffer.from('{"format": "something else"}') });
  await page.waitForFunction(() => /notes\.json/.test(document.getElementById('error').textContent), null, { timeout: 10000 });
  assert.match(await page.textContent('#error'), /notes\.json: format "something else": this page reads attnscope\.given\/1/);
  assert.ok(await page.evaluate(() => Boolean(window.attnscope.result?.cross_attention)), 'still showing the encoder–decoder');
  // a model again (built in): its own run, the inputs back
  await page.selectOption('#model-builtin', '');
  await page.waitForFunction(() => window.attnscope.result && window.attnscope.result.backend !== 'given' && !window.attnscope.result.cross_attention, null, { timeout: 90000 });
  assert.equal(await page.evaluate(() => document.getElementById('sentence').readOnly), false);
  assert.equal(await page.evaluate(() => document.getElementById('knock-status').hidden), false);
  assert.deepEqual(problems, []);
});

test('the page\'s heads table and rollout of given attention: the engine\'s numbers for the same attention as for its own run', async () => {
  const { page, problems } = await openPage(browser, null, { width: 1400, height: 1000 });
  // the model's own run, its heads table and rollout open
  await page.goto(`${server.url}#s=${encodeURIComponent('The cat sat on the mat.')}&e=cpu&table=1&rollout=1`);
  await page.waitForFunction(() => window.attnscope?.result?.head_metrics && window.attnscope.result.rollout, null, { timeout: 90000 });
  const own = await page.evaluate(() => {
    const r = window.attnscope.result;
    return { tokens: r.tokens, attention: r.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))), head_metrics: r.head_metrics, rollout: r.rollout.map((row) => Array.from(row)) };
  });
  // the same attention given (JSON records), by a link
  const L = own.attention.length, H = own.attention[0].length, T = own.tokens.length;
  const records = own.attention.map((values, layer) => ({ stack: 'encoder', kind: 'self', layer, query_heads: H, kv_heads: H, n_q: T, n_k: T, values }));
  const file = JSON.stringify({ format: 'attnscope.given/1', architecture: { kind: 'encoder' }, tokens: own.tokens, records });
  await page.route('**/given/minilm.json', (r) => r.fulfill({ body: file, contentType: 'application/json' }));
  await page.goto(`${server.url}#data=/given/minilm.json&table=1&rollout=1`); // the same page, a link followed
  await page.waitForFunction(() => window.attnscope?.result?.backend === 'given' && window.attnscope.result.head_metrics && window.attnscope.result.rollout, null, { timeout: 60000 });
  const got = await page.evaluate(() => {
    const r = window.attnscope.result;
    return {
      head_metrics: r.head_metrics, rollout: r.rollout.map((row) => Array.from(row)),
      rows: document.querySelectorAll('#heads-view tbody tr').length, note: document.querySelector('#heads-view .heads-note').textContent,
      header: document.querySelector('#heads-view th button[data-sort="to_cls"]').textContent,
      maps: [...document.querySelectorAll('#rollout-view canvas')].map((c) => c.width > 0),
    };
  });
  assert.equal(got.rows, L * H, 'a row a head');
  assert.equal(got.header, '→[CLS]', 'the markers found in the tokens');
  assert.doesNotMatch(got.note, /knock/, 'no knock-outs without a model');
  assert.ok(got.maps.every(Boolean));
  let worst = 0;
  for (const [name, grid] of Object.entries(own.head_metrics)) {
    const d = maxAbsDiff(grid, got.head_metrics[name]);
    assert.ok(d <= 1e-5, `${name}: max |Δ| ${d}`);
    worst = Math.max(worst, d);
  }
  const dr = maxAbsDiff(own.rollout, got.rollout);
  assert.ok(dr <= 1e-5, `rollout: max |Δ| ${dr}`);
  console.log(`given attention's heads table and rollout against the model's own: max |Δ| ${worst.toExponential(2)}, rollout ${dr.toExponential(2)}`);
  assert.deepEqual(problems, []);
});
