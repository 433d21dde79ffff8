// The Python package in a real JupyterLab (started here on 127.0.0.1 from target/py, where
// `make test` installed the wheel) driven by headless Chromium: a notebook calls bertviz's
// head_view and model_view through attnscope (each a standalone page, text/html), and run() (a
// widget on attnscope's engine); the numbers each element's `result` carries equal the ones the
// notebook stored (uint16, each within 7.6e-6 of the one given), bit for bit; nothing is
// requested from outside the machine. Then the notebook is saved with Ctrl+S (JupyterLab's
// defaults: no widget state), the kernel shut down, and the notebook opened again: every view
// renders from the saved file. nbconvert exports the saved notebook, and the executed one, with
// the package's `attnscope` template: each opens from a file with no kernel and no network and
// renders the same numbers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { launch, openPage, golden, ARTIFACTS, ROOT } from './harness.mjs';
import { PY, notebook, startLab, onlyLocal, runNotebook } from './jupyter.mjs';
import { startHub } from './hubserver.mjs';

/** The notebook: the seeds' kind of attention (a softmax over scaled scores, masked for a
 *  decoder), an encoder in head_view, a decoder with grouped-query heads in model_view, the
 *  standalone page of html_action="return", shown and saved, run() on a local checkpoint and a
 *  Hub id, a large input (the layer its view opens on first, then every layer in its place: held
 *  back here until the test has seen the first and moved the head), and an encoder–decoder's
 *  model_view; each cell also writes the numbers it stored, for the test to compare. */
const cells = (hubUrl) => [
  { markdown: 'Each head weighs its keys by $\\mathrm{softmax}\\left(\\frac{QK^\\top}{\\sqrt{d_k}}\\right)$.' },
  `import json, os, time
import numpy as np
import attnscope
import IPython.display
HUB = ${JSON.stringify(hubUrl)}

def softmax_attention(rng, layers, heads, T, causal):
    x = rng.normal(size=(layers, heads, T, T)) * 2
    if causal:
        x = np.where(np.tril(np.ones((T, T), bool)), x, -np.inf)
    a = np.exp(x - x.max(-1, keepdims=True))
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)

def write(name, g, exact):
    """What a view stores (uint16), as the element reads it (q / 65535), and what was given."""
    held = [(np.frombuffer(b, "<u2") / 65535).reshape(r.values.shape).tolist() for b, r in zip(g.buffers("uint16"), g.records)]
    json.dump({"attention": held, "exact": np.asarray(exact).tolist(), "tokens": g.tokens}, open(f"{name}.json", "w"))`,
  `rng = np.random.default_rng(7)
enc = softmax_attention(rng, 2, 4, 6, causal=False)
enc_tokens = ["[CLS]", "the", "cat", "sat", "down", "[SEP]"]
write("encoder", attnscope.given(enc, enc_tokens), enc)
attnscope.head_view(tuple(layer[None] for layer in enc), enc_tokens, layer=1, heads=[2])`,
  `dec = softmax_attention(rng, 3, 6, 5, causal=True)
dec_tokens = ["<s>", "Ġa", "Ġdog", "Ġran", "."]
write("decoder", attnscope.given(list(dec), dec_tokens, num_key_value_heads=2), dec)
attnscope.model_view(list(dec), dec_tokens, num_key_value_heads=2)`,
  `small = softmax_attention(rng, 1, 2, 4, causal=False)
write("page", attnscope.given(small, ["a", "b", "c", "d"]), small)
page = attnscope.head_view(small, ["a", "b", "c", "d"], html_action="return")
page.save("page.html")
attnscope.model_view(list(dec), dec_tokens, num_key_value_heads=2, html_action="return").save("model.html")
page`,
  `from IPython.display import display
w_run = attnscope.run(${JSON.stringify(path.join(ROOT, 'tests/fixtures/models/tiny-gpt2'))}, "attention is all you need", view="model")
display(w_run)
display(w_run)  # one widget in two views: each asks, each draws`,
  `attnscope.run("acme/tiny-bert", "the cat sat", view="head", hub=HUB)  # a Hub id, through a local mirror`,
  `attnscope.notebook.PREVIEW_ABOVE = 0  # a small input the large ones' way: its first layer alone, then all
late = softmax_attention(rng, 2, 3, 7, causal=True)
write("late", attnscope.given(late, [f"x{i}" for i in range(7)]), late)
update = IPython.display.DisplayHandle.update
def held_back(self, obj, **kw):  # in JupyterLab, every layer once the test has seen the first alone
    while os.path.exists("hold"):
        time.sleep(0.05)
    update(self, obj, **kw)
IPython.display.DisplayHandle.update = held_back
try:
    attnscope.head_view(late, [f"x{i}" for i in range(7)])
finally:
    IPython.display.DisplayHandle.update = update
    attnscope.notebook.PREVIEW_ABOVE = 16 << 20`,
  `src, tgt = ["▁the", "▁cat", "▁sat", "</s>"], ["<pad>", "▁le", "▁chat", "▁assis", "</s>"]
ed = {k: softmax_attention(rng, 2, 4, n, causal=c) for k, n, c in (("enc", 4, False), ("dec", 5, True))}
x = rng.normal(size=(2, 4, 5, 4)); cross = (np.exp(x) / np.exp(x).sum(-1, keepdims=True)).astype(np.float32)
attnscope.model_view(encoder_attention=list(ed["enc"]), decoder_attention=list(ed["dec"]), cross_attention=list(cross), encoder_tokens=src, decoder_tokens=tgt)`,
];

/** The outputs that are given attention (a page each), in the notebook's order. */
const GIVEN = ['encoder', 'decoder', 'page', 'late'];

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

/** What each cell stored, as it wrote it. */
const given = (name) => JSON.parse(readFileSync(path.join(lab.work, `${name}.json`)));

/** Every <attn-scope> in the page (in output order): its result's numbers, or the message it shows. */
const ELEMENTS = async () => {
  const all = [...document.querySelectorAll('attn-scope')];
  return all.map((el) => {
    const r = el.result;
    const cells = el.shadowRoot.querySelectorAll('.grid .cell, canvas').length;
    return r
      ? { backend: r.backend, mask_kind: r.mask_kind, precision: r.precision, layers: r.layers, tokens: r.tokens ?? r.source_tokens, heads: (r.attention ?? r.encoder_attention)[0].length, cells, width: el.getBoundingClientRect().width, attention: (r.attention ?? []).map((l) => l.map((h) => h.map((row) => Array.from(row)))) }
      : { message: el.shadowRoot.querySelector('.message:not([hidden])')?.textContent ?? null };
  });
};

/** Every value the element shows equals the one the notebook stored (as float32), each within
 *  half a 65535th of the one given. */
function assertGiven(got, want, what) {
  assert.equal(got.backend, 'given', what);
  assert.equal(got.precision, 'uint16', what);
  assert.deepEqual(got.tokens, want.tokens, `${what}: tokens`);
  const f32 = (x) => Math.fround(x);
  assert.deepEqual(got.attention, want.attention.map((l) => l.map((h) => h.map((row) => row.map(f32)))), `${what}: the numbers stored, bit for bit`);
  const far = got.attention.flat(3).reduce((m, v, i) => Math.max(m, Math.abs(v - want.exact.flat(3)[i])), 0);
  assert.ok(far <= 0.5 / 65535 + 1e-7, `${what}: max |Δ| ${far} from the numbers given`);
}

/** The page's elements once `n` of them show something; else an error with what the page shows
 *  (its outputs' text, its console's errors) and a screenshot. */
async function elementsShown(page, n, problems, shot, { preview = false } = {}) {
  try {
    await page.waitForFunction(({ n, preview }) => {
      const all = [...document.querySelectorAll('attn-scope')];
      // a large input's first layer alone is not yet what was given (its page marks it
      // data-preview), unless that is what is awaited
      const waiting = all.find((el) => (!el.result || el.hasAttribute('data-preview') !== preview) && !el.shadowRoot.querySelector('.message:not([hidden])'));
      waiting?.scrollIntoView(); // run()'s element starts once scrolled into view
      return all.length >= n && !waiting;
    }, { n, preview }, { timeout: 90000 });
  } catch (e) {
    await page.screenshot({ path: path.join(ARTIFACTS, `${shot}-failed.png`) });
    const outputs = await page.evaluate(() => [...document.querySelectorAll('.jp-OutputArea-output, pre')].map((o) => o.textContent.slice(0, 300)));
    throw new Error(`${e.message}\n<attn-scope> elements: ${await page.evaluate(() => document.querySelectorAll('attn-scope').length)}\noutputs: ${JSON.stringify(outputs)}\nproblems: ${problems.join('\n')}`);
  }
  return page.evaluate(ELEMENTS);
}

/** The given views among `shown` (every element but run()'s), checked against what the cells stored. */
function assertEveryGiven(shown, what) {
  const ours = shown.filter((s) => s.backend === 'given');
  assert.equal(ours.length, GIVEN.length + 1, `${what}: ${JSON.stringify(shown.map((s) => s.message ?? s.backend))}`);
  GIVEN.forEach((name, i) => assertGiven(ours[i], given(name), `${what}: ${name}`));
  assert.deepEqual(ours[3].layers, [0, 1], `${what}: every layer of the large input`);
  assert.equal(ours[1].mask_kind, 'causal');
  // an encoder–decoder's model view: the translation view, as wide as the output (not 360 px)
  assert.deepEqual(ours[4].tokens, [' the', ' cat', ' sat', '</s>'], 'the encoder\'s tokens, prettified as bertviz does');
  assert.ok(ours[4].width > 700, `${what}: the encoder–decoder's view is ${ours[4].width} px wide`);
  assert.ok(ours.every((s) => s.cells > 0), `${what}: the views drew`);
}

test('JupyterLab: head_view, model_view, the returned page and run() render the numbers given (run(): HF\'s), nothing fetched from outside', async () => {
  const { page, problems, requests } = await openPage(browser, null, { width: 1280, height: 1400 });
  const outside = await onlyLocal(page);
  writeFileSync(path.join(lab.work, 'hold'), '');
  await runNotebook(page, lab, 'attention.ipynb', null, { wait: false });
  // the large input's cell shows its first layer alone, and waits
  await page.waitForFunction(() => document.querySelector('attn-scope[data-preview]')?.result, null, { timeout: 90000 });
  const first = await page.evaluate(() => {
    const el = document.querySelector('attn-scope[data-preview]');
    return { layers: el.result.layers, note: el.parentElement.nextElementSibling?.textContent };
  });
  assert.deepEqual(first.layers, [0], 'the large input\'s first view: its layer 0 alone');
  assert.match(first.note, /other layers are on their way/);
  // the reader moves to head 2; then every layer comes, in the same output: drawn where the reader is
  await page.evaluate(() => {
    const sel = document.querySelector('attn-scope[data-preview]').shadowRoot.querySelector('.controls .head');
    sel.value = '2';
    sel.dispatchEvent(new Event('change'));
  });
  rmSync(path.join(lab.work, 'hold'));
  const shown = await elementsShown(page, 8, problems, 'notebook-lab');
  assert.equal(await page.evaluate(() => document.querySelectorAll('.attnscope-note').length), 0, 'the note gone');
  assert.equal(await page.evaluate(() => [...document.querySelectorAll('attn-scope')].find((el) => el.result?.layers?.length === 2 && el.result.tokens[0] === 'x0').shadowRoot.querySelector('.controls .head').value), '2', 'the reader\'s head kept');
  await page.screenshot({ path: path.join(ARTIFACTS, 'notebook-lab.png'), fullPage: false });
  assert.equal(shown.length, 8, JSON.stringify(shown.map((s) => s.message)));
  assertEveryGiven(shown, 'live');
  // run(): attnscope's engine on tiny-gpt2 (the kernel sent its files and the wasm) equals HF
  const runs = shown.filter((s) => s.backend !== 'given');
  const hf = golden('gpt2_single', 'attention'), meta = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden/gpt2_single.json'), 'utf8'));
  assert.equal(runs[0].backend, 'cpu', JSON.stringify(runs.map((s) => s.message ?? s.backend)));
  assert.deepEqual(runs[0].tokens, meta.tokens[0]);
  const [, L, H, T] = hf.shape;
  let max = 0;
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) for (let q = 0; q < T; q++) for (let k = 0; k < T; k++) {
    max = Math.max(max, Math.abs(runs[0].attention[l][h][q][k] - hf.data[((l * H + h) * T + q) * T + k]));
  }
  assert.ok(max <= 1e-4, `run() against HF transformers: max |Δ| ${max}`);
  assert.deepEqual(runs[1].attention, runs[0].attention, 'the same widget\'s second view: the same numbers');
  // a Hub id: the element fetched it from the (local) Hub, the kernel sent the wasm
  assert.equal(runs[2].backend, 'cpu');
  assert.deepEqual(runs[2].tokens, ['[CLS]', 'the', 'cat', 'sat', '[SEP]']);
  assert.ok(hub.requests.some((r) => r.path === '/acme/tiny-bert/resolve/main/config.json'), 'the Hub asked for the model');
  console.log(`# run() on tiny-gpt2 against HF transformers: max |Δ| ${max.toExponential(2)}`);
  // no error output in the notebook's cells
  const errors = await page.evaluate(() => [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"], .jp-OutputArea-output .ansi-red-fg')].map((e) => e.textContent));
  assert.deepEqual(errors, []);
  assert.deepEqual(outside, [], 'nothing requested from outside the machine');
  // nor from the notebook's server: no element started on a default model, run() asked its kernel
  assert.deepEqual(requests.filter((u) => /worker\.js|\/assets\/models\/|\.wasm/.test(u)), []);
  assert.deepEqual(problems.filter((p) => /attn|widget|engine|wasm/i.test(p)), []);

  // Ctrl+S with JupyterLab's defaults (no widget state), the kernel shut down, the notebook opened again
  const file = path.join(lab.work, 'attention.ipynb');
  const before = statSync(file).mtimeMs;
  await page.click('.jp-Notebook .jp-CodeCell .jp-InputArea-editor');
  await page.keyboard.press('Escape');
  await page.keyboard.press('Control+s');
  await page.waitForFunction(() => !window.jupyterapp.shell.currentWidget.context.model.dirty, null, { timeout: 30000 });
  assert.ok(statSync(file).mtimeMs > before, 'saved');
  const saved = JSON.parse(readFileSync(file, 'utf8'));
  assert.equal(saved.metadata.widgets, undefined, 'a default save keeps no widget state');
  const mb = statSync(file).size / 1e6;
  console.log(`# the notebook saved with Ctrl+S: ${mb.toFixed(2)} MB, no widget state`);
  assert.ok(mb < 2, `${mb} MB`);
  await page.evaluate(() => window.jupyterapp.commands.execute('kernelmenu:shutdown'));
  await page.close();
  const again = await openPage(browser, null, { width: 1280, height: 1400 });
  const outside2 = await onlyLocal(again.page);
  await again.page.goto(lab.url('attention.ipynb'));
  const reopened = await elementsShown(again.page, GIVEN.length + 1, again.problems, 'notebook-reopened');
  await again.page.screenshot({ path: path.join(ARTIFACTS, 'notebook-reopened.png'), fullPage: false });
  assertEveryGiven(reopened, 'reopened');
  assert.deepEqual(outside2, []);
  await again.page.close();
});

test('nbconvert: the notebook saved with no widget state, and the executed one, exported by the attnscope template, render with no kernel and no network', async () => {
  for (const [name, args] of [['saved', []], ['executed', ['--execute']]]) {
    execFileSync(path.join(PY, 'bin/jupyter'), [
      'nbconvert', '--to', 'html', ...args, '--template', 'attnscope', '--output', name, 'attention.ipynb',
    ], { cwd: lab.work, env: lab.env, stdio: 'pipe', timeout: 300000 });
    const html = readFileSync(path.join(lab.work, `${name}.html`), 'utf8');
    assert.equal(/application\/vnd\.jupyter\.widget-state\+json/.test(html), name === 'executed', `${name}: run()'s widget state in the export`);
    const { page, problems } = await openPage(browser, null, { width: 1280, height: 1400 });
    const outside = await onlyLocal(page);
    await page.goto(`file://${path.join(lab.work, `${name}.html`)}`);
    // every given view draws with nobody scrolling to it (a printout, a full-page screenshot),
    // the last far below the fold
    await page.waitForFunction((n) => [...document.querySelectorAll('attn-scope')].filter((el) => el.result?.backend === 'given').length === n, GIVEN.length + 1, { timeout: 30000 });
    assert.ok(await page.evaluate(() => [...document.querySelectorAll('attn-scope')].at(-1).getBoundingClientRect().top > 2 * innerHeight), 'the last view is far below the fold');
    assert.equal(await page.evaluate(() => scrollY), 0, 'nothing scrolled');
    const shown = await elementsShown(page, GIVEN.length + 1, problems, `notebook-export-${name}`);
    await page.screenshot({ path: path.join(ARTIFACTS, `notebook-export-${name}.png`), fullPage: true });
    assertEveryGiven(shown, `${name} export`);
    const text = await page.evaluate(() => document.body.textContent);
    // run() needs its kernel: the executed export's widget says so; the saved one's output says what ran
    if (name === 'executed') assert.match(text, /attnscope could not start its engine: no kernel/);
    else assert.match(text, /attnscope\.run: tiny-gpt2 on “attention is all you need”, view 'model'\. attnscope's engine draws it in the browser, with the kernel: run the cell to see it\./);
    assert.deepEqual(outside, [], `${name}: nothing requested from outside (MathJax inline, no CDN)`);
    assert.ok(await page.evaluate(() => document.querySelector('mjx-container svg')), `${name}: the markdown's math typeset`);
    assert.deepEqual(problems.filter((p) => /attn|widget|anywidget/i.test(p)), []);
    await page.close();
  }
});

const AXE = readFileSync(path.join(ROOT, 'tests/e2e/node_modules/axe-core/axe.min.js'), 'utf8');

test('Page.save: one HTML file that opens from disk with no network and carries the numbers; axe-core finds no serious or critical violation in it', async () => {
  for (const [file, name] of [['page.html', 'page'], ['model.html', 'decoder']]) {
    const { page, problems } = await openPage(browser, null, { width: 800, height: 900 });
    const outside = await onlyLocal(page);
    await page.goto(`file://${path.join(lab.work, file)}`);
    const shown = await elementsShown(page, 1, problems, `notebook-${name}`);
    assertGiven(shown[0], given(name), file);
    assert.deepEqual(outside, []);
    assert.deepEqual(problems, []);
    await page.evaluate(AXE);
    const found = await page.evaluate(async () => (await window.axe.run(document, { resultTypes: ['violations'] })).violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id} (${v.impact}): ${v.help}: ${v.nodes.slice(0, 4).map((n) => n.target.join(' ')).join(' | ')}`));
    assert.deepEqual(found, [], `${file}: axe-core's serious and critical violations`);
    await page.close();
  }
  // where no script runs (an untrusted notebook, GitHub's viewer): a line that says why, not a blank
  const noScript = await browser.newContext({ javaScriptEnabled: false });
  const bare = await noScript.newPage();
  await bare.goto(`file://${path.join(lab.work, 'page.html')}`);
  assert.match(await bare.textContent('.attnscope-page'), /^attnscope's attention view draws with its script, which has not run here: in JupyterLab, trust the notebook/);
  await noScript.close();
});
