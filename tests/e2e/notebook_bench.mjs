// The notebook: the wheel's size, the front end each widget carries in a saved notebook, and the
// time from a cell's head_view / model_view call to the view drawn (the element's first
// `attnscope-render`) in a real JupyterLab in headless Chromium, for a 512-token input of
// all-MiniLM-L6-v2 (6 layers × 12 heads × 512 × 512: 72 MiB of float32), as HF transformers
// computes it with `output_attentions=True` (the system's python3 with torch and transformers,
// run here first: the notebook's kernel is target/py's, which has neither; without them, random
// attention of the same shape, said so). The bar: head_view within 2 s. An input over
// attnscope.notebook.PREVIEW_ABOVE is drawn first with the layer its view opens on alone, then
// with every layer (in the same output): both times are printed, and the size a view takes in
// the saved notebook.
//   make setup wheel && target/py/bin/pip install target/wheels/attnscope-*.whl && node tests/e2e/notebook_bench.mjs
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, mkdtempSync, rmSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import os from 'node:os';
import path from 'node:path';
import { launch, openPage, ROOT, MODEL_DIR } from './harness.mjs';
import { notebook, startLab, onlyLocal, runNotebook } from './jupyter.mjs';

const WHEELS = path.join(ROOT, 'target/wheels');
const wheel = existsSync(WHEELS) && readdirSync(WHEELS).find((f) => /^attnscope-.*\.whl$/.test(f));
if (!wheel) {
  console.log('target/wheels: no attnscope wheel; `make wheel` builds it');
  process.exit(0);
}
const KiB = (n) => `${(n / 1024).toFixed(0)} KiB`;
const esm = statSync(path.join(ROOT, 'python/attnscope/static/widget.js')).size;
const esmPage = Math.ceil(gzipSync(readFileSync(path.join(ROOT, 'python/attnscope/static/widget.js')), { level: 9 }).length / 3) * 4;
console.log(`wheel ${wheel}: ${KiB(statSync(path.join(WHEELS, wheel)).size)}; the front end: ${KiB(esm)}, in each view's page (gzipped, base64): ${KiB(esmPage)}`);

// the attention, as HF computes it (else as attnscope's CLI does, equal to HF's within 1e-6; else
// random, said so), of 512 tokens of this repository's prose (docs/app.md, its markup left out)
const tmp = mkdtempSync(path.join(os.tmpdir(), 'attnscope-nbbench-'));
const npz = path.join(tmp, 'attention.npz');
const source = execFileSync('python3', ['-c', `
import json, re, subprocess, sys, numpy as np
out, model_dir, root = sys.argv[1], sys.argv[2], sys.argv[3]
text = " ".join(re.sub(r"[\\x60*#|\\[\\]()]", " ", open(f"{root}/docs/app.md").read()).split()[:700])
cli = f"{root}/target/release/attnscope"
try:
    import torch
    from transformers import AutoModel, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    enc = tok(text, truncation=True, max_length=512, return_tensors="pt")
    with torch.no_grad():
        att = model(**enc, output_attentions=True).attentions
    a = np.stack([x[0].numpy() for x in att]).astype(np.float32)
    tokens = tok.convert_ids_to_tokens(enc["input_ids"][0])
    print(f"all-MiniLM-L6-v2 by HF transformers {a.shape}")
except ImportError:
  try:
    run = json.loads(subprocess.run([cli, "attention", "--model", model_dir, text], capture_output=True, check=True).stdout)["results"][0]
    a = np.array(run["attention"], dtype=np.float32)
    tokens = run["tokens"]
    print(f"all-MiniLM-L6-v2 by attnscope's CLI (HF's within 1e-6; no torch in python3) {a.shape}")
  except (OSError, subprocess.CalledProcessError):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 12, 512, 512)).astype(np.float32)
    a = np.exp(x - x.max(-1, keepdims=True)); a /= a.sum(-1, keepdims=True)
    tokens = [f"t{i}" for i in range(512)]
    print(f"random attention {a.shape} (no torch in python3, no {cli})")
np.savez(out, attention=a, tokens=np.array(tokens))
`, npz, MODEL_DIR, ROOT], { encoding: 'utf8' }).trim();
console.log(`input: ${source}`);

// each call in a cell of its own, the kernel's clock read just before it
const CELLS = [
  `import time, numpy as np, attnscope
z = np.load(${JSON.stringify(npz)})
attention, tokens = tuple(z["attention"][:, None]), [str(t) for t in z["tokens"]]`,
  'start_head = time.time() * 1000\nattnscope.head_view(attention, tokens)',
  // after the head view's layers have all arrived, so the two do not share the socket
  'time.sleep(5)\nstart_model = time.time() * 1000\nattnscope.model_view(attention, tokens)',
  'print(f"START {start_head} {start_model}")',
  // what the saved notebook holds for a view: its page (the front end and the numbers, gzipped)
  `for p in ("uint16", "float32"):
    page = attnscope.model_view(attention, tokens, html_action="return", precision=p)
    print(f"SIZE {p} {len(page.data)}")`,
];

const lab = await startLab({ 'bench.ipynb': JSON.stringify(notebook(CELLS)) });
const browser = await launch({ webgpu: false });
try {
  const { page } = await openPage(browser, null, { width: 1400, height: 1300 });
  const outside = await onlyLocal(page);
  await page.addInitScript(() => {
    window.__renders = [];
    // as a reader would: each new output's element scrolled to (an element draws once in view)
    new MutationObserver(() => {
      const all = document.querySelectorAll('attn-scope');
      if (all.length > (window.__seen ?? 0)) { window.__seen = all.length; all[all.length - 1].scrollIntoView(); }
    }).observe(document, { childList: true, subtree: true });
    document.addEventListener('attnscope-render', (e) => window.__renders.push({
      at: Date.now(), element: [...document.querySelectorAll('attn-scope')].indexOf(e.target), layers: e.detail?.layers?.length,
    }), true);
  });
  await runNotebook(page, lab, 'bench.ipynb');
  await page.waitForFunction(() => [...document.querySelectorAll('.jp-OutputArea-output')].some((o) => o.textContent.includes('START')), null, { timeout: 300000 });
  await page.waitForFunction(() => {
    const all = [...document.querySelectorAll('attn-scope')];
    all.find((el) => !el.result || el.hasAttribute('data-preview'))?.scrollIntoView();
    return all.length === 2 && all.every((el) => el.result && !el.hasAttribute('data-preview'));
  }, null, { timeout: 300000 });
  const starts = (await page.evaluate(() => [...document.querySelectorAll('.jp-OutputArea-output')].map((o) => o.textContent).find((t) => t.includes('START'))))
    .match(/START ([\d.]+) ([\d.]+)/).slice(1).map(Number);
  const renders = await page.evaluate(() => window.__renders);
  for (const [i, call] of ['head_view', 'model_view'].entries()) {
    const first = renders.find((r) => r.element === i), all = renders.find((r) => r.element === i && r.layers === 6);
    console.log(`${call}: call → first drawn ${(first.at - starts[i]).toFixed(0)} ms (${first.layers} of 6 layers), → every layer ${(all.at - starts[i]).toFixed(0)} ms${i ? '' : ' (bar: first drawn within 2000)'}`);
  }
  const sizes = await page.evaluate(() => [...document.querySelectorAll('.jp-OutputArea-output')].map((o) => o.textContent).join('\n'));
  for (const [, p, n] of sizes.matchAll(/SIZE (\w+) (\d+)/g)) console.log(`a view's page in the saved notebook, ${p}: ${(n / 1e6).toFixed(1)} MB (float32 in base64: ${(6 * 12 * 512 * 512 * 4 * 4 / 3 / 1e6).toFixed(1)} MB)`);
  if (outside.length) console.log(`requests outside the machine: ${outside.join(', ')}`);
} finally {
  await browser.close();
  lab.stop();
  rmSync(tmp, { recursive: true, force: true });
}
