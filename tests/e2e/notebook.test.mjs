// The Python package in a real JupyterLab (started here on 127.0.0.1 from target/py, where
// `make test` installed the wheel) driven by headless Chromium: a notebook calls bertviz's
// head_view and model_view through attnscope, the widgets render, and the numbers each
// element's `result` carries equal the ones the notebook gave, bit for bit; nothing is requested
// from outside the machine. Then the same notebook, executed and exported by nbconvert with its
// widget state (the package's `attnscope` template), opens from a file with no kernel and no
// network and renders the same numbers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { launch, openPage, golden, ARTIFACTS, ROOT } from './harness.mjs';
import { PY, notebook, startLab, onlyLocal, runNotebook } from './jupyter.mjs';
import { startHub } from './hubserver.mjs';

/** The notebook: the seeds' kind of attention (a softmax over scaled scores, masked for a
 *  decoder), an encoder in head_view, a decoder with grouped-query heads in model_view, the
 *  standalone page of html_action="return", shown and saved, and a decoder sent as a large input
 *  is (the layer its view opens on first, then every layer); each cell also writes the numbers it
 *  gave, for the test to compare. */
const cells = (hubUrl) => [
  `import json
import numpy as np
import attnscope
HUB = ${JSON.stringify(hubUrl)}

def softmax_attention(rng, layers, heads, T, causal):
    x = rng.normal(size=(layers, heads, T, T)) * 2
    if causal:
        x = np.where(np.tril(np.ones((T, T), bool)), x, -np.inf)
    a = np.exp(x - x.max(-1, keepdims=True))
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)`,
  `rng = np.random.default_rng(7)
enc = softmax_attention(rng, 2, 4, 6, causal=False)
enc_tokens = ["[CLS]", "the", "cat", "sat", "down", "[SEP]"]
json.dump({"attention": enc.tolist(), "tokens": enc_tokens}, open("encoder.json", "w"))
attnscope.head_view(tuple(layer[None] for layer in enc), enc_tokens, layer=1, heads=[2])`,
  `dec = softmax_attention(rng, 3, 6, 5, causal=True)
dec_tokens = ["<s>", "Ġa", "Ġdog", "Ġran", "."]
json.dump({"attention": dec.tolist(), "tokens": attnscope.prettify(dec_tokens)}, open("decoder.json", "w"))
attnscope.model_view(list(dec), dec_tokens, num_key_value_heads=2)`,
  `small = softmax_attention(rng, 1, 2, 4, causal=False)
json.dump({"attention": small.tolist(), "tokens": ["a", "b", "c", "d"]}, open("page.json", "w"))
page = attnscope.head_view(small, ["a", "b", "c", "d"], html_action="return")
page.save("page.html")
page`,
  `from IPython.display import display
w_run = attnscope.run(${JSON.stringify(path.join(ROOT, 'tests/fixtures/models/tiny-gpt2'))}, "attention is all you need", view="model")
display(w_run)
display(w_run)  # one widget in two views: each asks, each draws`,
  `attnscope.run("acme/tiny-bert", "the cat sat", view="head", hub=HUB)  # a Hub id, through a local mirror`,
  `attnscope.notebook.PREVIEW_ABOVE = 0  # a small input the large ones' way: its first layer alone, then all
late = softmax_attention(rng, 2, 3, 7, causal=True)
json.dump({"attention": late.tolist(), "tokens": [f"x{i}" for i in range(7)]}, open("late.json", "w"))
w = attnscope.notebook.AttnScope(attnscope.given(late, [f"x{i}" for i in range(7)]), {"view": "model"})
display(w)  # model_view's show(), its two halves apart: the first layer now, every layer in the next cell`,
  'w.send_all()',
];
const LAST = cells('').length - 1; // run by the test once the first layer alone is seen

let browser, lab, hub;

before(async () => {
  hub = await startHub();
  lab = await startLab({ 'attention.ipynb': JSON.stringify(notebook(cells(hub.hub)), null, 1) });
  browser = await launch({ webgpu: false });
});
after(async () => {
  await browser?.close();
  lab?.stop();
  hub?.stop();
});

/** What each cell gave, as it wrote it. */
const given = (name) => JSON.parse(readFileSync(path.join(lab.work, `${name}.json`)));

/** Every <attn-scope> in the page (in output order): its result's numbers, or the message it shows. */
const ELEMENTS = async () => {
  const all = [...document.querySelectorAll('attn-scope')];
  return all.map((el) => {
    const r = el.result;
    const cells = el.shadowRoot.querySelectorAll('.grid .cell, canvas').length;
    return r
      ? { backend: r.backend, mask_kind: r.mask_kind, precision: r.precision, layers: r.layers, tokens: r.tokens, heads: r.attention[0].length, cells, attention: r.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))) }
      : { message: el.shadowRoot.querySelector('.message:not([hidden])')?.textContent ?? null };
  });
};

/** Every value the element shows equals the one given, as float32 (what the kernel sent). */
function assertGiven(got, want, what) {
  assert.equal(got.backend, 'given', what);
  assert.deepEqual(got.tokens, want.tokens, `${what}: tokens`);
  const f32 = (x) => Math.fround(x);
  assert.deepEqual(got.attention, want.attention.map((l) => l.map((h) => h.map((row) => row.map(f32)))), `${what}: the numbers, bit for bit`);
}

/** The page's elements once `n` of them show something; else an error with what the page shows
 *  (its outputs' text, its console's errors) and a screenshot. */
async function elementsShown(page, n, problems, shot, { preview = false } = {}) {
  try {
    await page.waitForFunction(({ n, preview }) => {
      const all = [...document.querySelectorAll('attn-scope')];
      // a large input's first layer alone is not yet what was given (the widget marks it
      // data-preview), unless that is what is awaited
      const waiting = all.find((el) => (!el.result || el.hasAttribute('data-preview') !== (preview && el === all[n - 1])) && !el.shadowRoot.querySelector('.message:not([hidden])'));
      waiting?.scrollIntoView(); // an element draws once scrolled into view
      return all.length >= n && !waiting;
    }, { n, preview }, { timeout: 90000 });
  } catch (e) {
    await page.screenshot({ path: path.join(ARTIFACTS, `${shot}-failed.png`) });
    const outputs = await page.evaluate(() => [...document.querySelectorAll('.jp-OutputArea-output, pre')].map((o) => o.textContent.slice(0, 300)));
    throw new Error(`${e.message}\n<attn-scope> elements: ${await page.evaluate(() => document.querySelectorAll('attn-scope').length)}\noutputs: ${JSON.stringify(outputs)}\nproblems: ${problems.join('\n')}`);
  }
  return page.evaluate(ELEMENTS);
}

test('JupyterLab: head_view, model_view, the returned page and run() render the numbers given (run(): HF\'s), nothing fetched from outside', async () => {
  const { page, problems, requests } = await openPage(browser, null, { width: 1280, height: 1400 });
  const outside = await onlyLocal(page);
  // every cell but the last: the large input's widget shows its first layer alone
  await runNotebook(page, lab, 'attention.ipynb', LAST);
  const first = await elementsShown(page, 7, problems, 'notebook-lab', { preview: true });
  assert.deepEqual(first[6].layers, [0], 'the large input\'s first view: its layer 0 alone');
  assert.match(await page.evaluate(() => document.querySelectorAll('attn-scope')[6].nextElementSibling?.textContent), /other layers are on their way/);
  // then the last cell sends every layer: drawn where the reader is, the note gone
  await page.evaluate(() => window.jupyterapp.commands.execute('notebook:run-cell'));
  const shown = await elementsShown(page, 7, problems, 'notebook-lab');
  assert.equal(await page.evaluate(() => document.querySelectorAll('attn-scope')[6].nextElementSibling), null);
  await page.screenshot({ path: path.join(ARTIFACTS, 'notebook-lab.png'), fullPage: false });
  assert.equal(shown.length, 7, JSON.stringify(shown.map((s) => s.message)));
  assertGiven(shown[0], given('encoder'), 'head_view');
  assertGiven(shown[1], given('decoder'), 'model_view');
  assertGiven(shown[2], given('page'), 'html_action="return"');
  assertGiven(shown[6], given('late'), 'a large input\'s float32 numbers, after its preview');
  assert.deepEqual(shown[6].layers, [0, 1], 'every layer, after the first one alone');
  // run(): attnscope's engine on tiny-gpt2 (the kernel sent its files and the wasm) equals HF
  const hf = golden('gpt2_single', 'attention'), meta = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden/gpt2_single.json'), 'utf8'));
  assert.equal(shown[3].backend, 'cpu', JSON.stringify(shown.slice(3, 6).map((s) => s.message ?? s.backend)));
  assert.deepEqual(shown[3].tokens, meta.tokens[0]);
  const [, L, H, T] = hf.shape;
  let max = 0;
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) for (let q = 0; q < T; q++) for (let k = 0; k < T; k++) {
    max = Math.max(max, Math.abs(shown[3].attention[l][h][q][k] - hf.data[((l * H + h) * T + q) * T + k]));
  }
  assert.ok(max <= 1e-4, `run() against HF transformers: max |Δ| ${max}`);
  assert.deepEqual(shown[4].attention, shown[3].attention, 'the same widget\'s second view: the same numbers');
  // a Hub id: the element fetched it from the (local) Hub, the kernel sent the wasm
  assert.equal(shown[5].backend, 'cpu');
  assert.deepEqual(shown[5].tokens, ['[CLS]', 'the', 'cat', 'sat', '[SEP]']);
  assert.ok(hub.requests.some((r) => r.path === '/acme/tiny-bert/resolve/main/config.json'), 'the Hub asked for the model');
  console.log(`# run() on tiny-gpt2 against HF transformers: max |Δ| ${max.toExponential(2)}`);
  assert.equal(shown[1].mask_kind, 'causal');
  assert.ok(shown.every((s) => s.cells > 0), 'the views drew');
  // no error output in the notebook's cells
  const errors = await page.evaluate(() => [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"], .jp-OutputArea-output .ansi-red-fg')].map((e) => e.textContent));
  assert.deepEqual(errors, []);
  assert.deepEqual(outside, [], 'nothing requested from outside the machine');
  // nor from the notebook's server: no element started on a default model, run() asked its kernel
  assert.deepEqual(requests.filter((u) => /worker\.js|\/assets\/models\/|\.wasm/.test(u)), []);
  assert.deepEqual(problems.filter((p) => /attn|widget|engine|wasm/i.test(p)), []);
  await page.close();
});

test('nbconvert: the executed notebook exported with its widget state renders with no kernel and no network', async () => {
  execFileSync(path.join(PY, 'bin/jupyter'), [
    'nbconvert', '--to', 'html', '--execute', '--template', 'attnscope', '--output', 'exported', 'attention.ipynb',
  ], { cwd: lab.work, env: lab.env, stdio: 'pipe' });
  const html = readFileSync(path.join(lab.work, 'exported.html'), 'utf8');
  assert.match(html, /application\/vnd\.jupyter\.widget-state\+json/, 'the widget state is in the export');
  const { page, problems } = await openPage(browser, null, { width: 1280, height: 1400 });
  const outside = await onlyLocal(page);
  await page.goto(`file://${path.join(lab.work, 'exported.html')}`);
  const shown = await elementsShown(page, 4, problems, 'notebook-export');
  // run()'s widget asks its kernel for the files and the wasm: a saved page has none, and says so
  assert.match(await page.evaluate(() => document.body.textContent), /attnscope could not start its engine: no kernel/);
  await page.screenshot({ path: path.join(ARTIFACTS, 'notebook-export.png'), fullPage: false });
  assertGiven(shown[0], given('encoder'), 'head_view, exported');
  assertGiven(shown[1], given('decoder'), 'model_view, exported');
  assertGiven(shown[2], given('page'), 'the returned page, exported');
  assertGiven(shown[3], given('late'), 'a large input, exported: its float32 numbers (the preview is not saved)');
  // the saved state: each widget's float32 file, and no preview
  const state = JSON.parse(readFileSync(path.join(lab.work, 'exported.html'), 'utf8').match(/<script type="application\/vnd\.jupyter\.widget-state\+json">([^]*?)<\/script>/)[1]).state;
  const ours = Object.values(state).filter((m) => m.model_module === 'anywidget' && !m.state._run);
  assert.equal(ours.length, 3);
  const runs = Object.values(state).filter((m) => m.state._run);
  assert.equal(runs.length, 2);
  for (const r of runs) assert.deepEqual(r.buffers ?? [], [], 'run() saves no file of the model, and no wasm');
  for (const m of ours) {
    const [given, preview] = ['_given', '_preview'].map((k) => m.buffers.find((b) => b.path.join('.') === k)?.data ?? '');
    assert.ok(given.length > 0, 'the records, float32');
    assert.equal(preview, '', 'no preview kept');
  }
  // the lab template's MathJax is the one thing it asks a CDN for (the widgets ask nothing)
  assert.deepEqual(outside.filter((u) => !/mathjax/i.test(u)), []);
  assert.deepEqual(problems.filter((p) => /attn|widget|anywidget/i.test(p)), []);
  await page.close();
});

test('Page.save: one HTML file that opens from disk with no network and carries the numbers', async () => {
  const { page, problems } = await openPage(browser, null, { width: 800, height: 900 });
  const outside = await onlyLocal(page);
  await page.goto(`file://${path.join(lab.work, 'page.html')}`);
  const shown = await elementsShown(page, 1, problems, 'notebook-page');
  assertGiven(shown[0], given('page'), 'page.html');
  assert.deepEqual(outside, []);
  assert.deepEqual(problems, []);
  await page.close();
});
