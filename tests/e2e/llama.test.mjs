// The Llama family in the page: tests/fixtures/models/tiny-llama (a safetensors folder with its
// chat template) and tiny-llama-Q4_K.gguf (one GGUF file, kept quantized) load by URL, run on the
// CPU engine and on WebGPU and equal HF transformers' golden numbers (attention, next-token
// probabilities); `gen=8` writes the tokens HF's greedy generate writes, the step control moves
// through them and the head view grows with the steps.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { cpSync, rmSync, mkdirSync, readFileSync } from 'node:fs';
import { startServer, launch, openPage, ready, maxDiff, ROOT, attnscope } from './harness.mjs';
import { GenerationResult } from '../../web/generation.js';
import { summarise } from '../../web/summary.js';

const FOLDER = path.join(ROOT, 'assets/models/e2e-tiny-llama');
const YARN = path.join(ROOT, 'assets/models/e2e-v5-llama-yarn'); // rope_type yarn: scaled frequencies and cosines
const GGUF_DIR = path.join(ROOT, 'assets/models/e2e-tiny-llama-gguf');
const GGUF = 'tiny-llama-Q4_K.gguf';
const TOL = 1e-4;

let server, browser;
before(async () => {
  cpSync(path.join(ROOT, 'tests/fixtures/models/tiny-llama'), FOLDER, { recursive: true });
  cpSync(path.join(ROOT, 'tests/fixtures/models/v5-llama-yarn'), YARN, { recursive: true });
  mkdirSync(GGUF_DIR, { recursive: true });
  cpSync(path.join(ROOT, 'tests/fixtures/models/tiny-llama-gguf', GGUF), path.join(GGUF_DIR, GGUF));
  server = await startServer();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  server?.stop();
  rmSync(FOLDER, { recursive: true, force: true });
  rmSync(YARN, { recursive: true, force: true });
  rmSync(GGUF_DIR, { recursive: true, force: true });
});

/** A golden fixture: its JSON and its safetensors' F32 tensors as `{data, shape}`. */
function golden(name) {
  const json = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden', `${name}.json`), 'utf8'));
  const buf = readFileSync(path.join(ROOT, 'tests/fixtures/golden', `${name}.safetensors`));
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const tensors = {};
  for (const [k, t] of Object.entries(header)) {
    if (k === '__metadata__') continue;
    assert.equal(t.dtype, 'F32', `${name}/${k}`);
    const [a, b] = t.data_offsets;
    const bytes = buf.subarray(8 + n + a, 8 + n + b);
    tensors[k] = { data: new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)), shape: t.shape };
  }
  return { json, tensors };
}

/** Item 0 of a `(1, L, H, T, T)` tensor as nested `[L][H][T][T]`. */
function nested({ data, shape: [, L, H, T] }) {
  return Array.from({ length: L }, (_, l) => Array.from({ length: H }, (_, h) =>
    Array.from({ length: T }, (_, q) => Array.from(data.subarray((((l * H + h) * T) + q) * T, (((l * H + h) * T) + q + 1) * T)))));
}

const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);

async function open(model, text, hash, size = { width: 1280, height: 900 }) {
  const url = `${server.url}${process.env.WASM ? `?wasm=${process.env.WASM}` : ""}#model=${encodeURIComponent(model)}&s=${encodeURIComponent(text)}&${hash}`;
  const p = await openPage(browser, url, size);
  assert.equal(await ready(p.page), null);
  await p.page.waitForFunction((t) => window.attnscope.result?.text === t, text, { timeout: 120000 });
  return p;
}

const MODELS = [
  ['the safetensors folder', () => `${server.url}assets/models/e2e-tiny-llama/`, 'llama_single'],
  ['the Q4_K GGUF file', () => `${server.url}assets/models/e2e-tiny-llama-gguf/${GGUF}`, 'llama_gguf_Q4_K'],
];

for (const [what, model, fixture] of MODELS) {
  test(`Llama, ${what}: the page's attention and next-token probabilities equal HF's on the CPU engine and on WebGPU`, async () => {
    const { json, tensors } = golden(fixture);
    const want = nested(tensors.attention);
    const probs = tensors.next_token_probs; // (1, T, V)
    const V = probs.shape[2];
    for (const engine of ['cpu', 'gpu']) {
      const { page, problems } = await open(model(), json.texts[0], `e=${engine}`);
      const got = await page.evaluate(() => {
        const r = window.attnscope.result;
        return { tokens: r.tokens, ids: r.token_ids, mask: r.mask_kind, backend: r.backend, attention: r.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))), next: r.next_tokens };
      });
      const info = await page.evaluate(() => window.attnscope.info);
      assert.equal(info.architecture.kind, 'decoder');
      assert.ok(info.lm_head);
      assert.equal(got.mask, 'causal');
      assert.deepEqual(got.tokens, json.tokens[0]);
      assert.deepEqual(got.ids, json.token_ids[0]);
      if (engine === 'gpu') assert.match(got.backend, /WebGPU|gpu/i, `ran on ${got.backend}`);
      const d = maxDiff(got.attention, want);
      assert.ok(d <= TOL, `${engine} (${got.backend}): attention differs from HF's by ${d}`);
      let worst = 0;
      for (let q = 0; q < got.next.length; q++) {
        for (const p of got.next[q]) worst = Math.max(worst, Math.abs(p.p - probs.data[q * V + p.id]));
        // the likeliest is HF's likeliest
        const row = probs.data.subarray(q * V, (q + 1) * V);
        assert.ok(Math.abs(row[got.next[q][0].id] - Math.max(...row)) <= TOL, `position ${q}: the likeliest token`);
      }
      assert.ok(worst <= TOL, `${engine}: next-token probabilities differ from HF's by ${worst}`);
      // the generate view is offered; the grid says which query heads share a key/value head
      assert.ok(await page.isVisible('#generate'));
      assert.match(await page.textContent('#kv-groups'), /heads 0–1 share key\/value head 0, heads 2–3 share key\/value head 1/);
      assert.equal(await page.isVisible('#gen-chat'), info.chat_template === true);
      // the page's words follow the architecture: a Generate link, the gated feed-forward
      assert.ok(await page.isVisible('#page-nav a[href="#generate"]'));
      assert.equal(await page.textContent('details[data-panel="ffn"] summary'), '6 · Feed-forward: SiLU(gate) ⊙ up → down (SwiGLU)');
      clean(problems);
      await page.close();
    }
  });
}

test('a generation\'s summary, kept a row a step, is summarise\'s over the cut attention (pooled past 64 positions, ties included), and each head its copy; its rows are the passes\' records, layer by layer', () => {
  let seed = 7;
  const rnd = () => { seed = (seed * 16807) % 2147483647; return Math.round((seed / 2147483647) * 40) / 40; }; // ties
  const [L, H] = [3, 4];
  for (const [P, NEW] of [[5, 4], [40, 30], [64, 64], [100, 37]]) {
    const N = P + NEW - 1, all = new Float32Array(L * H * N * N); // (L, H, N, N): every pass's rows, as the records say
    // a pass's records (src/wasm.rs Generating.step): one a layer, (H, nq, nk), its rows at positions from…from + nq − 1
    const records = (from, nq, nk, value) => Array.from({ length: L }, (_, layer) => {
      const values = new Float32Array(H * nq * nk);
      for (let h = 0; h < H; h++) {
        for (let q = 0; q < nq; q++) {
          for (let k = 0; k < nk; k++) values[(h * nq + q) * nk + k] = all[((layer * H + h) * N + from + q) * N + k] = value(from + q, k);
        }
      }
      return { stack: 'decoder', kind: 'self', layer, name: 'attention', shape: [H, nq, nk], query_heads: H, kv_heads: H, n_q: nq, n_k: nk, values };
    });
    const pass = (recs) => ({ records: recs, id: 1, token: 'b', text: 'b', top_k: [], step_ms: 1, output_text: '' });
    // causal: zeros past the diagonal
    const g = new GenerationResult({ ...pass(records(0, P, P, (q, k) => (k <= q ? rnd() : 0))), prompt_ids: Array(P).fill(1), prompt_tokens: Array(P).fill('a'), prompt_texts: Array(P).fill('a'), prompt: 'x' }, NEW);
    const check = (n, what) => {
      const mask = new Float32Array(n * n);
      for (let q = 0; q < n; q++) mask.fill(1, q * n, q * n + q + 1);
      const cut = g.cut(n), want = summarise((b, l, h) => cut.subarray((l * H + h) * n * n, (l * H + h + 1) * n * n), null, mask, [1, L, H, n]), got = g.summary(n);
      for (const f of ['R', 'thumbs', 'thumbMask', 'probMax', 'probArg']) assert.deepEqual(got[f], want[f], `P ${P}, n ${n} (${what}): ${f}`);
      for (let lh = 0; lh < L * H; lh++) {
        for (let q = 0; q < n; q++) assert.deepEqual(cut.subarray((lh * n + q) * n, (lh * n + q + 1) * n), all.subarray((lh * N + q) * N, (lh * N + q) * N + n), `P ${P}, n ${n}: head ${lh}, row ${q}`);
      }
      return cut;
    };
    // the summary kept a row a step (the bins widening at 65 and 129 positions), at every step
    check(P, 'the prompt');
    for (let s = 1; s < NEW; s++) { g.add(pass(records(P + s - 1, 1, P + s, rnd))); check(g.n, 'kept'); }
    // and made afresh over fewer positions (a finished generation's earlier step)
    for (const n of [2, P, P + NEW - 7]) {
      const cut = check(n, 'made');
      for (const lh of [0, 5, L * H - 1]) assert.deepEqual(g.head(lh, n), cut.subarray(lh * n * n, (lh + 1) * n * n), `P ${P}, n ${n}: head ${lh}`);
    }
    // a step of another shape is refused by name
    if (g.n < N) assert.throws(() => g.add(pass(records(g.n - 1, 1, g.n, rnd))), /shape \[4,1,\d+\]/);
  }
});

test('Llama: gen=8 writes the tokens HF writes, step by step, on the CPU engine and on WebGPU; the step control moves through them and the heatmap grows', async () => {
  const { json, tensors } = golden('llama_generate');
  const prompt = json.texts[0];
  for (const engine of ['cpu', 'gpu']) {
    const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, prompt, `e=${engine}&gen=8`);
    await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 8 && !window.attnscope.result.running, null, { timeout: 60000 });
    const got = await page.evaluate(() => {
      const r = window.attnscope.result;
      return { prompt_ids: r.prompt_ids, output_ids: r.output_ids, steps: r.steps.map((s) => s.top_k.map((p) => p.id)), n: r.generate.n, attention: Array.from(r.generate.attention), T: r.tokens.length, backend: r.backend };
    });
    assert.equal(got.backend.startsWith('gpu'), engine === 'gpu', `${engine}: generated on ${got.backend}`);
    assert.match(await page.textContent('#generate-caption'), engine === 'gpu' ? /8 new tokens on WebGPU/ : /8 new tokens on the CPU engine/);
    assert.match(await page.textContent('#generate-view .gen-status'), engine === 'gpu' ? /ms a token \(on WebGPU, keys and values cached\)/ : /ms a token \(on the CPU engine, keys and values cached\)/);
    assert.deepEqual(got.prompt_ids, json.prompt_ids);
    assert.deepEqual(got.output_ids, json.output_ids);
    assert.deepEqual(got.steps, json.step_top5_ids);
    // the whole generation's attention, (L, H, N, N), N = P + 8 − 1: HF's over the same ids
    const N = json.prompt_ids.length + 7;
    assert.equal(got.n, N);
    const { data, shape } = tensors.attention; // (1, L, H, 48, 48): prompt and output fed at once
    const [, L, H, M] = shape;
    let worst = 0;
    for (let lh = 0; lh < L * H; lh++) for (let q = 0; q < N; q++) for (let k = 0; k < N; k++) {
      worst = Math.max(worst, Math.abs(got.attention[(lh * N + q) * N + k] - data[(lh * M + q) * M + k]));
    }
    assert.ok(worst <= TOL, `${engine}: generation attention differs from HF's by ${worst}`);
    console.log(`# ${engine}: gen=8, the attention over ${N} positions vs HF's: max |Δ| ${worst.toExponential(2)}`);
    assert.equal(got.T, N, 'at the last step the views show every position fed');
    // the text as written, token by token; the step in the link
    assert.equal(await page.locator('#generate-view .gen-token').count(), 8);
    await page.waitForFunction(() => /(^|&)gen=8(&|$)/.test(location.hash.slice(1)));
    // the slider to the first step: the views show the prompt alone, the link says st=0
    const drawn = () => page.evaluate(() => document.querySelector('#head-view')._view.tokens.length); // the head view's rows
    assert.equal(await drawn(), N);
    const P = json.prompt_ids.length;
    await page.locator('#gen-slider').fill('1');
    await page.waitForFunction((P) => window.attnscope.result.step === 0 && window.attnscope.result.tokens.length === P, P);
    await page.waitForFunction(() => /(^|&)st=0(&|$)/.test(location.hash.slice(1)));
    await page.waitForFunction((P) => document.querySelector('#head-view')._view.tokens.length === P, P);
    // → steps on: the heatmap grows a row and a column a step
    for (let t = 1; t < 8; t++) {
      await page.locator('#generate-view button[aria-label="next step"]').click();
      await page.waitForFunction((t) => window.attnscope.result.step === t, t);
      assert.equal(await page.evaluate(() => window.attnscope.result.attention[0][0].length), P + t);
      await page.waitForFunction((n) => document.querySelector('#head-view')._view.tokens.length === n, P + t);
    }
    assert.equal(await drawn(), N);
    clean(problems);
    await page.close();
  }
});

test('Llama: the RoPE panel turns the engine\'s query by its position, its score-by-distance curve meets the engine\'s score, and the switch reruns the model without the rotation; a YaRN model\'s too', async () => {
  const text = 'time flies like an arrow and fruit flies like a banana';
  for (const [folder, engine] of [['e2e-tiny-llama', 'cpu'], ['e2e-tiny-llama', 'gpu'], ['e2e-v5-llama-yarn', 'cpu'], ['e2e-v5-llama-yarn', 'gpu']]) {
    const { page, problems } = await open(`${server.url}assets/models/${folder}/`, text, `e=${engine}&l=1&h=2&inside=rope`);
    assert.ok(await page.isVisible('details[data-panel="rope"][open]'), 'the panel is offered, open');
    const drawn = (ablated) => page.waitForFunction((a) => document.querySelector('#inside-rope')._rope?.ablated === a, ablated, { timeout: 60000 });
    await drawn(false);
    const r = await page.evaluate(() => ({ ...document.querySelector('#inside-rope')._rope, attention: window.attnscope.result.attention[1][2] }));
    assert.ok(r.p > 0 && r.j <= r.p, `query ${r.p}, key ${r.j}`);
    // the curve, computed in the page from the engine's q and k and the model's θ, is the engine's score at their distance
    assert.ok(Math.abs(r.curve[r.p - r.j] - r.engine) <= 1e-4 * Math.max(1, Math.abs(r.engine)), `${engine}: curve ${r.curve[r.p - r.j]} vs the engine's score ${r.engine}`);
    // the dials: the engine's turned pair is the projected one turned by p·θᵢ (the engine's θᵢ,
    // YaRN's rescaled), its length kept (YaRN: multiplied by its attention_scaling)
    const yarn = folder.includes('yarn');
    assert.equal(r.scale === 1, !yarn, `${folder}: scale ${r.scale}`);
    if (yarn) assert.match(await page.textContent('#inside-rope'), /rope_type yarn/);
    for (const { angle, before, after } of r.shown) {
      const want = [before[0] * Math.cos(angle) - before[1] * Math.sin(angle), before[1] * Math.cos(angle) + before[0] * Math.sin(angle)].map((v) => v * r.scale);
      assert.ok(Math.abs(want[0] - after[0]) <= 1e-4 && Math.abs(want[1] - after[1]) <= 1e-4, `${engine}: ${after} vs ${want}`);
    }
    assert.ok(Math.max(...r.curve) - Math.min(...r.curve) > 1e-3, 'the score moves with the distance');
    // the ablation: the whole model reruns unturned, the link says so, the panel and every view show it
    await page.click('#inside-rope .inside-switch input');
    await drawn(true);
    await page.waitForFunction(() => /(^|&)norope=1(&|$)/.test(location.hash.slice(1)));
    assert.ok(await page.isVisible('#inside-rope .inside-banner'));
    const a = await page.evaluate(() => ({ ...document.querySelector('#inside-rope')._rope, attention: window.attnscope.result.attention[1][2] }));
    assert.ok(Math.abs(a.engine - a.plain) <= 1e-4 * Math.max(1, Math.abs(a.plain)), `${engine}: unturned, the engine's score ${a.engine} is q·k/√d ${a.plain}`);
    let moved = 0;
    for (let q = 0; q < r.attention.length; q++) for (let k = 0; k <= q; k++) moved = Math.max(moved, Math.abs(r.attention[q][k] - a.attention[q][k]));
    assert.ok(moved > 0.01, `${engine}: the attention without the rotation moved by ${moved}`);
    clean(problems);
    await page.close();
  }
});

test('Llama: the cache panel gives the key/value cache at the config\'s sizes, against multi-head and multi-query, and follows the generation step by step', async () => {
  const cfg = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/models/tiny-llama/config.json'), 'utf8'));
  const { json } = golden('llama_generate');
  const prompt = json.texts[0], P = json.prompt_ids.length;
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, prompt, 'e=cpu&gen=8&inside=cache&h=3');
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 8 && !window.attnscope.result.running, null, { timeout: 60000 });
  assert.ok(await page.isVisible('details[data-panel="cache"][open]'));
  const cache = (n) => page.waitForFunction((n) => { const c = document.querySelector('#inside-cache')._cache; return c?.n === n && c; }, n).then((h) => h.jsonValue());
  // K and V × layers × key/value heads × head_dim × 4 bytes (float32), from config.json
  const perToken = (kv) => 2 * cfg.num_hidden_layers * kv * cfg.head_dim * 4;
  let c = await cache(P + 7);
  assert.deepEqual([c.H, c.kv, c.d, c.L], [cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.num_hidden_layers]);
  assert.equal(c.perToken, perToken(cfg.num_key_value_heads));
  assert.equal(c.multiHead, perToken(cfg.num_attention_heads));
  assert.equal(c.multiQuery, perToken(1));
  assert.equal(c.onScreen, (P + 7) * c.perToken);
  assert.equal(c.step, 7);
  assert.match(await page.textContent('#inside-cache .cache-growth'), /step 8 of 8/);
  // query head 3 reads key/value head 1, with head 2
  assert.match(await page.getAttribute('#inside-cache figure[data-fig="heads"] canvas', 'aria-label'), /query head 3 reads key\/value head 1, with heads 2 to 3/);
  // the first step: the prompt's positions alone
  await page.locator('#gen-slider').fill('1');
  c = await cache(P);
  assert.equal(c.step, 0);
  assert.equal(c.onScreen, P * c.perToken);
  clean(problems);
  await page.close();
});

test('Llama: a knock-out gives HF\'s next token with those heads zeroed beside every head\'s, a key/value group knocks out at once, and a generation writes again without them beside what every head writes', async () => {
  const knock = golden('llama_knockout'), plain = golden('llama_trace'); // the same text: heads zeroed before o_proj, and not
  const text = knock.json.texts[0], T = knock.json.token_ids[0].length;
  const off = knock.json.head_mask.map(([l, h]) => `${l}:${h}`).join(',');
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, text, `e=cpu&l=1&h=2&off=${encodeURIComponent(off)}`);
  const V = knock.tensors.next_token_probs.shape[2];
  const hf = (g, id) => g.tensors.next_token_probs.data[(T - 1) * V + id];
  // the last position's likeliest tokens, knocked out and with every head, against HF's
  await page.waitForSelector('#next-list .next-was');
  const got = await page.evaluate(() => {
    const r = window.attnscope.result;
    return { head_mask: r.head_mask, next: r.next_tokens.at(-1), line: document.getElementById('next-line').textContent };
  });
  assert.deepEqual(got.head_mask, knock.json.head_mask);
  for (const p of got.next) assert.ok(Math.abs(p.p - hf(knock, p.id)) <= TOL, `knocked out, token ${p.id}: ${p.p} vs HF's ${hf(knock, p.id)}`);
  const rows = await page.$$eval('#next-list li:not(.next-gone)', (lis) => lis.map((li) => li.querySelector('.next-label').textContent));
  assert.equal(rows.length, got.next.length);
  let compared = 0;
  for (const [i, row] of rows.entries()) {
    const m = /\(([\d.]+)% with every head\)/.exec(row);
    if (!m) { assert.match(row, /not in the \d+ likeliest with every head/); continue; }
    compared++;
    const want = 100 * hf(plain, got.next[i].id);
    assert.ok(Math.abs(Number(m[1]) - want) <= 0.051, `token ${got.next[i].id} with every head: ${m[1]}% vs HF's ${want.toFixed(2)}%`);
  }
  assert.ok(compared > 0, 'some of the knocked-out model\'s likeliest were among every head\'s');
  assert.match(got.line, /with L0 H0, L0 H1, L1 H2 knocked out the model expects/);
  // the grid brackets the query heads by the key/value head they read
  assert.deepEqual(await page.$$eval('#model-view .kvlabel', (s) => s.map((e) => [e.textContent, e.title])), [['K/V head 0', 'query heads 0–1 read key/value head 0'], ['K/V head 1', 'query heads 2–3 read key/value head 1']]);
  // the focused head's key/value group (H2 and H3 share key/value head 1) knocks out at once, and back in
  const group = page.locator('#knock-group');
  assert.equal(await group.textContent(), 'knock out L1 H2–3 (they share key/value head 1)');
  assert.equal(await group.getAttribute('aria-pressed'), 'false');
  await group.click();
  await page.waitForFunction(() => /(^|&)off=0%3A0%2C0%3A1%2C1%3A2%2C1%3A3(&|$)|(^|&)off=0:0,0:1,1:2,1:3(&|$)/.test(location.hash.slice(1)));
  await page.waitForFunction(() => JSON.stringify(window.attnscope.result.head_mask) === '[[0,0],[0,1],[1,2],[1,3]]', null, { timeout: 60000 });
  assert.equal(await group.getAttribute('aria-pressed'), 'true');
  await group.click();
  await page.waitForFunction(() => JSON.stringify(window.attnscope.result.head_mask) === '[[0,0],[0,1]]', null, { timeout: 60000 });
  // generating with L0 H0, L0 H1 knocked out: the first step is the knocked-out model's
  await page.locator('#gen-max').fill('6');
  await page.click('#gen-go');
  await page.waitForFunction(() => { const g = document.getElementById('gen-compare'); return g && !g.hidden && /every head/.test(g.textContent) && !window.attnscope.result.running; }, null, { timeout: 60000 });
  const gen = await page.evaluate(() => ({ ids: window.attnscope.result.output_ids, first: window.attnscope.result.steps[0].top_k, compare: document.getElementById('gen-compare').textContent, parts: [...document.querySelectorAll('#generate-view .gen-token')].findIndex((t) => t.classList.contains('gen-parts')) }));
  assert.ok(gen.ids.length >= 1 && gen.ids.length <= 6, `${gen.ids.length} tokens`);
  // restoring every head writes again: what the comparison said every head writes
  await page.click('#knock-reset');
  await page.waitForFunction(() => { const r = window.attnscope.result; return r.output_ids?.length > 0 && !r.running && !r.head_mask?.length && document.getElementById('gen-compare').hidden; }, null, { timeout: 60000 });
  const every = await page.evaluate(() => ({ ids: window.attnscope.result.output_ids, text: window.attnscope.result.output_text }));
  const parted = every.ids.findIndex((id, i) => id !== gen.ids[i]);
  if (parted < 0 && every.ids.length === gen.ids.length) assert.match(gen.compare, /writes the same \d+ tokens? as with every head/);
  else {
    assert.equal(gen.parts, parted, 'the first token the knock-out changed is marked');
    assert.ok(gen.compare.includes(`parts from token ${parted + 1} on`), gen.compare);
    assert.ok(gen.compare.includes(every.text.trim()), `${gen.compare} names every head's text ${every.text}`);
  }
  // and every head's first step is the plain model's (HF's with every head)
  const firstPlain = await page.evaluate(() => window.attnscope.result.steps[0].top_k);
  for (const p of firstPlain) assert.ok(Math.abs(p.p - hf(plain, p.id)) <= TOL, `every head, token ${p.id}: ${p.p} vs HF's ${hf(plain, p.id)}`);
  clean(problems);
  await page.close();
});

/** A safetensors file's F16 tensor `key` as floats. */
function f16Tensor(file, key) {
  const buf = readFileSync(file), n = Number(buf.readBigUInt64LE(0));
  const t = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'))[key];
  assert.equal(t.dtype, 'F16', key);
  const [a, b] = t.data_offsets, out = [];
  for (let i = 8 + n + a; i < 8 + n + b; i += 2) {
    const h = buf.readUInt16LE(i), e = (h >> 10) & 31, m = h & 1023, sign = h >> 15 ? -1 : 1;
    out.push(sign * (e === 0 ? m * 2 ** -24 : e === 31 ? (m ? NaN : Infinity) : (1 + m / 1024) * 2 ** (e - 15)));
  }
  return out;
}

test('Llama: RMSNorm beside LayerNorm and the SwiGLU\'s gate, up projection and product, on the focused token, are HF\'s numbers', async () => {
  const { json, tensors } = golden('llama_trace');
  const layer = json.layer_trace[0], text = json.texts[0];
  const cfg = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/models/tiny-llama/config.json'), 'utf8'));
  const gamma = f16Tensor(path.join(ROOT, 'tests/fixtures/models/tiny-llama/model.safetensors'), `model.layers.${layer}.input_layernorm.weight`);
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, text, `e=cpu&l=${layer}&inside=residual,ffn`);
  const rms = await page.waitForFunction(() => document.querySelector('#inside-residual')._rms, null, { timeout: 60000 }).then((h) => h.jsonValue());
  const D = cfg.hidden_size, at = (name, t, j) => tensors[`layer${layer}_${name}`].data[t * tensors[`layer${layer}_${name}`].shape[2] + j];
  const x = Array.from({ length: D }, (_, j) => at('input', rms.token, j));
  const mu = x.reduce((a, v) => a + v, 0) / D, want = Math.sqrt(x.reduce((a, v) => a + v * v, 0) / D + cfg.rms_norm_eps);
  assert.ok(Math.abs(rms.mu - mu) <= TOL && Math.abs(rms.rms - want) <= TOL * want, `μ ${rms.mu} vs ${mu}, RMS ${rms.rms} vs ${want}`);
  assert.equal(rms.rows.length, 6);
  for (const r of rms.rows) {
    assert.ok(Math.abs(r.engine - at('attn_norm', rms.token, r.dim)) <= TOL, `dim ${r.dim}: RMSNorm ${r.engine} vs HF's ${at('attn_norm', rms.token, r.dim)}`);
    assert.ok(Math.abs(r.gamma - gamma[r.dim]) <= 1e-3, `dim ${r.dim}: γ ${r.gamma} vs the checkpoint's ${gamma[r.dim]}`);
  }
  assert.match(await page.textContent('#inside-residual .inside-rms'), /takes no mean away/);
  const sw = await page.waitForFunction(() => document.querySelector('#inside-ffn')._swiglu, null, { timeout: 60000 }).then((h) => h.jsonValue());
  assert.equal(sw.rows.length, 8);
  const silu = (z) => z / (1 + Math.exp(-z));
  for (const r of sw.rows) {
    assert.ok(Math.abs(r.gate - at('gate', sw.token, r.unit)) <= TOL, `unit ${r.unit}: gate ${r.gate} vs HF's`);
    assert.ok(Math.abs(r.up - at('up', sw.token, r.unit)) <= TOL, `unit ${r.unit}: up ${r.up} vs HF's`);
    assert.ok(Math.abs(r.engine - at('act', sw.token, r.unit)) <= TOL, `unit ${r.unit}: act ${r.engine} vs HF's`);
    assert.ok(Math.abs(r.product - silu(r.gate) * r.up) <= 1e-6 && Math.abs(r.product - r.engine) <= TOL, `unit ${r.unit}: SiLU(gate)·up ${r.product} vs the engine's ${r.engine}`);
  }
  assert.equal(await page.locator('#inside-ffn .inside-swiglu tbody tr').count(), 8);
  clean(problems);
  await page.close();
});

test('Llama: the sink switch hides the first token from the attention views and renormalises each row, labelled as a view, in the link; the result keeps the model\'s attention', async () => {
  const text = 'time flies like an arrow and fruit flies like a banana';
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, text, 'e=cpu&l=1&h=2');
  assert.ok(await page.isHidden('#sink-note'));
  const model = await page.evaluate(() => window.attnscope.result.attention[1][2].map((r) => Array.from(r)));
  await page.check('#nosink');
  await page.waitForFunction(() => /(^|&)nosink=1(&|$)/.test(location.hash.slice(1)));
  const note = await page.textContent('#sink-note');
  assert.match(note, /^A view, not the model's attention: the first token \(“tim”\) is hidden/);
  assert.ok(await page.isVisible('#nosink-note'), 'the head view says so too');
  // the head view draws the renormalised rows: the first column 0, each other row the model's over keys 1…q
  const drawn = await page.waitForFunction(() => { const v = document.querySelector('#head-view')._view; return v?.run.sinkHidden && Array.from(v.values); }, null, { timeout: 30000 }).then((h) => h.jsonValue());
  const T = model.length;
  let worst = 0, share = 0;
  for (let q = 0; q < T; q++) {
    share += model[q][0];
    const rest = model[q].slice(1).reduce((a, v) => a + v, 0);
    for (let k = 0; k < T; k++) worst = Math.max(worst, Math.abs(drawn[q * T + k] - (k === 0 || rest === 0 ? 0 : model[q][k] / rest)));
  }
  assert.ok(worst <= 1e-6, `the head view's rows differ from the renormalised attention by ${worst}`);
  assert.ok(note.includes(`gives it ${(100 * share / T).toFixed(1)}% of its attention`), note);
  // every attention view reads the same view: the model grid too
  await page.waitForFunction(() => /s\|/.test(document.querySelector('#model-view').dataset.drawn ?? ''));
  // the result is the model's, unchanged
  const still = await page.evaluate(() => window.attnscope.result.attention[1][2].map((r) => Array.from(r)));
  assert.deepEqual(still, model);
  // off again: the model's rows
  await page.uncheck('#nosink');
  await page.waitForFunction(() => !document.querySelector('#head-view')._view.run.sinkHidden);
  assert.ok(await page.isHidden('#sink-note'));
  clean(problems);
  await page.close();
});

test('Llama: typing at the end reuses the last pass for the tokens both texts begin with, and every run equals the CLI\'s whole pass', async () => {
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, 'time flies like an arrow', 'e=cpu');
  const cliOf = (text) => attnscope(['attention', '--model', path.join(ROOT, 'tests/fixtures/models/tiny-llama'), '--top-k', '5', '--', text]);
  await page.focus('#sentence');
  await page.keyboard.press('End');
  let text = 'time flies like an arrow', reusedAny = 0;
  for (const key of [' ', 'a', 'n', 'd', 'Backspace']) {
    text = key === 'Backspace' ? text.slice(0, -1) : text + key;
    await page.keyboard.press(key === ' ' ? 'Space' : key);
    await page.waitForFunction((t) => window.attnscope.result?.text === t && !window.attnscope.store.get().busy, text, { timeout: 60000 });
    const got = await page.evaluate(() => { const r = window.attnscope.result; return { reused: r.reused, T: r.tokens.length, attention: r.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))), next: r.next_tokens }; });
    const want = cliOf(text).results[0];
    assert.ok(got.reused < got.T, `${got.reused} of ${got.T} positions reused`);
    reusedAny = Math.max(reusedAny, got.reused);
    const d = maxDiff(got.attention, want.attention);
    assert.ok(d <= 1e-5, `"${text}": attention differs from the CLI's whole pass by ${d}`);
    for (const [q, top] of want.next_tokens.entries()) {
      assert.deepEqual(got.next[q].map((p) => p.id), top.map((p) => p.id), `"${text}" position ${q}: the likeliest next tokens`);
      for (const [i, p] of top.entries()) assert.ok(Math.abs(got.next[q][i].p - p.p) <= 1e-5, `"${text}" position ${q}: ${got.next[q][i].p} vs ${p.p}`);
    }
  }
  assert.ok(reusedAny >= 5, `typing reused at most ${reusedAny} positions`);
  clean(problems);
  await page.close();
});

// cells as wide as a thumbnail or wider (a laptop's, for this model's 4 heads), and narrower (a
// phone's, or a model with more heads: the thumbnails pooled again, in a full thumbnail's frame)
for (const [cells, narrow] of [['cells wider than a thumbnail', false], ['cells narrower than a thumbnail (pooled again)', true]]) {
  test(`Llama: a generation past 64 positions, ${cells}: the model grid draws a newer step by the rows it added, and they are what drawing every head again gives`, async () => {
    const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, 'time flies like an arrow', 'e=cpu&gen=90');
    await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 90 && !window.attnscope.result.running, null, { timeout: 120000 });
    if (narrow) {
      await page.evaluate(() => { document.querySelector('#model-view').style.maxWidth = '130px'; });
      await page.waitForFunction(() => { const c = document.querySelector('#model-view .cell'); return c && c.offsetWidth < 30; });
    }
    const grid = () => page.evaluate(() => {
      const v = document.querySelector('#model-view'), c = v.querySelector('canvas.thumbs');
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let h = 2166136261;
      for (let i = 0; i < d.length; i++) h = Math.imul(h ^ d[i], 16777619);
      return { hash: h >>> 0, drawn: v.dataset.drawn, grown: Number(v.dataset.grown ?? 0), n: window.attnscope.result.tokens.length, side: v._sheet.n[0], slot: v._sheet.slot };
    });
    // the step control: a step's run, then the next ones' (a position more each, the same bins of 2)
    const to = async (step, before) => {
      await page.locator('#gen-slider').fill(String(step + 1));
      await page.waitForFunction(([d, n]) => { const v = document.querySelector('#model-view'); return v.dataset.drawn !== d && window.attnscope.result.tokens.length === n; }, [before.drawn, before.n + (step - before.step)]);
      return { ...(await grid()), step };
    };
    const last = { ...(await grid()), step: 89 };
    const at70 = await to(70, last);
    assert.ok(at70.n > 64 + 2 && at70.n < 126, `${at70.n} positions: bins of 2`);
    const thumb = Math.ceil(at70.n / 2);
    if (narrow) assert.ok(at70.slot < thumb && at70.side < at70.slot, `a ${thumb}-cell thumbnail in ${at70.side} of a slot's ${at70.slot} pixels`);
    else assert.equal(at70.side, thumb, 'a thumbnail drawn cell for cell');
    // two steps: one of them adds a thumbnail column (its rows above masked)
    const at71 = await to(71, at70);
    assert.equal(at71.grown, at70.grown + 1, 'the next step drew only its new rows');
    const at72 = await to(72, at71);
    assert.equal(at72.grown, at71.grown + 1, 'and the next');
    // the first step (the prompt alone, bins of 1), then each step again: drawn whole
    for (const step of [at71, at72]) {
      const first = await to(0, step);
      const again = await to(step.step, first);
      assert.equal(again.grown, at72.grown, 'drawn whole, not by rows');
      assert.notEqual(first.hash, step.hash);
      assert.equal(again.hash, step.hash, `step ${step.step}: the grid drawn by the rows a step added equals the grid drawn whole`);
    }
    clean(problems);
    await page.close();
  });
}

test('Llama: Generate streams the text (the first token as it comes, then at most 20 showings a second), Stop ends it, chat wraps the prompt in the template', async () => {
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, 'time flies like an arrow', 'e=cpu');
  // every count of written tokens the page shows, when, and whether it was still writing
  await page.evaluate(() => {
    window.seen = [];
    new MutationObserver(() => window.seen.push({ n: document.querySelectorAll('#generate-view .gen-token').length, t: performance.now(), writing: Boolean(window.attnscope.store.get().generation?.running) }))
      .observe(document.getElementById('generate-view'), { childList: true, subtree: true });
  });
  await page.fill('#gen-max', '96');
  await page.click('#gen-go');
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length > 0 && !window.attnscope.result.running, null, { timeout: 60000 });
  const written = await page.evaluate(() => window.attnscope.result.output_ids.length);
  // each new count shown: the first token at once, the text while it streams no sooner than
  // 50 ms after it was last shown (web/generation.js TEXT_MS), and every token at the end
  const shows = await page.evaluate(() => window.seen.filter((x, i, all) => x.n > 0 && x.n !== all[i - 1]?.n));
  assert.equal(shows[0].n, 1, `the first token shown as it came (${JSON.stringify(shows)})`);
  assert.equal(shows.at(-1).n, written, 'every token written shown at the end');
  assert.ok(shows.every((x, i) => i === 0 || x.n > shows[i - 1].n), `the text only grows: ${shows.map((x) => x.n)}`);
  const streaming = shows.filter((x) => x.writing);
  assert.ok(streaming.length >= 2 && streaming.at(-1).n < written, `shown while writing, before the end: ${JSON.stringify(shows)}`);
  for (let i = 1; i < streaming.length; i++) assert.ok(streaming[i].t - streaming[i - 1].t >= 45, `showings ${(streaming[i].t - streaming[i - 1].t).toFixed(1)} ms apart while writing (${streaming[i - 1].n} → ${streaming[i].n} tokens)`);
  // a generation of 6 tokens, as the rest of the test reads it
  await page.fill('#gen-max', '6');
  await page.click('#gen-go');
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 6 && !window.attnscope.result.running, null, { timeout: 60000 });
  // the header's time says what it measures: the whole generation, the line's parts summed
  const times = await page.evaluate(() => ({ badge: document.getElementById('backend').textContent, ms: window.attnscope.result.generate.step_ms }));
  const total = times.ms.reduce((a, b) => a + b, 0);
  assert.match(times.badge, /^(cpu|CPU).* · \d+ ms to read the prompt and write 6 tokens$/, times.badge);
  assert.equal(Number(times.badge.match(/(\d+) ms/)[1]), Math.round(total), 'the sum of the generation line\'s times');
  // Stop: the tokens written so far stay
  await page.fill('#gen-max', '100');
  await page.click('#gen-go');
  // (the tiny model writes fast: Stop is clicked in the frame that sees two tokens)
  await page.waitForFunction(() => {
    const r = window.attnscope.result;
    if (!r?.running || r.output_ids.length < 2) return false;
    document.getElementById('gen-stop').click();
    return true;
  }, null, { polling: 'raf' });
  await page.waitForFunction(() => !window.attnscope.result.running);
  const stopped = await page.evaluate(() => window.attnscope.result.output_ids.length);
  assert.ok(stopped < 100, `stopped after ${stopped} tokens`);
  assert.match(await page.textContent('#generate-view .gen-status'), /stopped/);
  // chat: the prompt as the template's user message
  await page.check('#gen-chat');
  await page.fill('#gen-max', '3');
  await page.click('#gen-go');
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 3 && !window.attnscope.result.running, null, { timeout: 60000 });
  const prompt = await page.evaluate(() => window.attnscope.result.prompt);
  assert.match(prompt, /<\|im_start\|>user\ntime flies like an arrow<\|im_end\|>/);
  // shown with the template's special tokens boxed, the message as text
  const specials = await page.$$eval('#generate-view .gen-prompt .gen-special', (s) => s.map((e) => e.textContent));
  assert.equal(specials.length, (prompt.match(/<\|im_(start|end)\|>/g) ?? []).length);
  assert.ok(specials.every((t) => /^<\|im_(start|end)\|>$/.test(t)), specials.join(' '));
  assert.match(await page.textContent('#generate-view .gen-prompt'), /user⏎\ntime flies like an arrow<\|im_end\|>/);
  // the link says so (it is rewritten a moment after each change)
  await page.waitForFunction(() => /(^|&)chat=1(&|$)/.test(location.hash.slice(1)), null, { timeout: 5000 });
  // typing a new sentence lets the generation go: the views show the sentence's own pass
  await page.fill('#sentence', 'attention is all you need');
  await page.waitForFunction(() => window.attnscope.result?.text === 'attention is all you need' && !window.attnscope.result.output_ids);
  await page.waitForFunction(() => !/(^|&)gen=/.test(location.hash.slice(1)));
  // and the number of tokens last asked for stays in its box
  assert.equal(await page.inputValue('#gen-max'), '3');
  await page.fill('#gen-max', '5');
  await page.press('#gen-max', 'Tab');
  await page.fill('#sentence', 'attention is all you need, still');
  await page.waitForFunction(() => window.attnscope.result?.text === 'attention is all you need, still');
  assert.equal(await page.inputValue('#gen-max'), '5', 'a number typed and not yet used stays too');
  clean(problems);
  await page.close();
});

// GPT-2's byte-level alphabet's characters that stand for bytes (Ġ a space, Ċ a newline, ð 0xF0 …):
// a token shown with any of them is shown raw
const BYTE_SOUP = /[\u0100-\u0143ÃÂâðÅ×]|\ufffd/;
/** The bytes a label stands for: its characters' UTF-8 (a token of spaces alone shows ␣ for each), each `‹F0 9F›` the bytes it names. */
const bytesOf = (label) => label.replace(/^␣+$/, (s) => ' '.repeat(s.length)).split(/(‹[0-9A-F ]+›)/).flatMap((part) => (/^‹/.test(part)
  ? part.slice(1, -1).split(' ').map((h) => parseInt(h, 16)) : [...new TextEncoder().encode(part)]));

test('Llama: byte-level tokens read as text everywhere (axes, top-k, the written tokens, the step heading), a part of a character as its bytes marked, the raw piece in the tooltip', async () => {
  // ש is D7 A9, written × © in the byte-level alphabet; 👩 is F0 9F 91 A9: the tiny vocabulary
  // holds neither whole
  const text = 'café 👩 שלום';
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, text, 'e=cpu&gen=6');
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 6 && !window.attnscope.result.running, null, { timeout: 60000 });
  // the focused step's head view: every position's label, and the tokens it reads
  await page.click('#generate-view .gen-token[data-step="0"]');
  const P = await page.evaluate(() => window.attnscope.result.prompt_ids.length);
  await page.waitForFunction((P) => document.querySelector('#head-view')._view.tokens.length === P, P);
  const axes = await page.evaluate(() => ({ labels: document.querySelector('#head-view')._view.tokens, pieces: window.attnscope.result.tokens }));
  assert.ok(axes.pieces.some((t) => BYTE_SOUP.test(t)), `the vocabulary writes bytes: ${axes.pieces}`);
  for (const l of axes.labels) assert.doesNotMatch(l, BYTE_SOUP, `a label shown raw: ${JSON.stringify(axes.labels)}`);
  assert.ok(axes.labels.some((l) => /‹[0-9A-F ]+›/.test(l)), `parts of a character marked: ${JSON.stringify(axes.labels)}`);
  const read = new TextDecoder().decode(new Uint8Array(axes.labels.flatMap(bytesOf)));
  assert.ok(read.includes(text), `the labels read back as the text: ${JSON.stringify(read)}`);
  // the written tokens, the step's heading and its likeliest tokens
  const shown = await page.evaluate(() => ({
    written: [...document.querySelectorAll('#generate-view .gen-token')].map((t) => t.textContent),
    heading: document.querySelector('#generate-view h3, #generate-view .gen-step-heading')?.textContent ?? '',
    next: [...document.querySelectorAll('#generate-view .next-label')].map((t) => t.textContent),
  }));
  assert.equal(shown.written.length, 6);
  for (const t of [...shown.written, shown.heading, ...shown.next]) assert.doesNotMatch(t, BYTE_SOUP, `shown raw: ${JSON.stringify(shown)}`);
  // the raw piece in a column label's tooltip
  const k = axes.labels.findIndex((l) => /‹/.test(l));
  await page.locator('#head-view .overlay').scrollIntoViewIfNeeded();
  const at = await page.evaluate((k) => {
    const v = document.querySelector('#head-view'), g = v._view.g, r = v.querySelector('.overlay').getBoundingClientRect();
    return { x: r.left + g.x0 + (k - g.k0 + 0.5) * g.cell, y: r.top + g.y0 / 2 };
  }, k);
  await page.mouse.move(at.x, at.y);
  const tip = await page.textContent('#head-view .tooltip');
  assert.ok(tip.includes(`is the token ${axes.pieces[k]}`) && tip.includes('bytes of a character'), `the tooltip of ${axes.labels[k]}: ${tip}`);
  clean(problems);
  await page.close();
});

test('Llama: sharing a generation at a step gives an element that writes the same tokens and shows that step, as the iframe does', async () => {
  const text = 'time flies like an arrow';
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, text, 'e=cpu&gen=8&st=4');
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 8 && !window.attnscope.result.running, null, { timeout: 60000 });
  const want = await page.evaluate(() => ({ ids: window.attnscope.result.output_ids, labels: document.querySelector('#head-view')._view.tokens }));
  await page.click('#share');
  await page.waitForFunction(() => document.getElementById('share-element').value.includes('<attn-scope'));
  const element = await page.inputValue('#share-element');
  const attrs = Object.fromEntries([...element.matchAll(/ ([a-z]+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
  assert.deepEqual([attrs.view, attrs.gen, attrs.step, attrs.sentence], ['generate', '8', '4', text], element);
  clean(problems);
  await page.close();
  // pasted into a page: the element writes the 8 tokens and its head view is step 5's, over the same positions
  const other = await openPage(browser, null, { width: 1280, height: 900 });
  const blog = `${server.url}a-blog-post.html`; // a page of the app's origin holding the snippet alone
  await other.page.route(blog, (r) => r.fulfill({ contentType: 'text/html', body: `<!doctype html><html lang="en"><head><link rel="icon" href="data:,"></head><body><p>What the model wrote:</p>\n${element}</body></html>` }));
  await other.page.goto(blog);
  await other.page.waitForFunction(() => document.querySelector('attn-scope').result?.output_ids?.length === 8 && !document.querySelector('attn-scope').result.running, null, { timeout: 120000 })
    .catch(async (e) => { throw new Error(`${e.message}: ${element} ${await other.page.evaluate(() => { const s = document.querySelector('attn-scope').store?.get(); return JSON.stringify({ gen: s?.gen, run: Boolean(s?.run), busy: s?.busy, generation: Boolean(s?.generation), err: s?.runError, merr: s?.modelError, embed: s?.embed }); })} ${other.problems}`); });
  await other.page.waitForFunction((n) => document.querySelector('attn-scope').shadowRoot.querySelector('.generated-head')?._view?.tokens.length === n, want.labels.length, { timeout: 30000 });
  const got = await other.page.evaluate(() => ({ ids: document.querySelector('attn-scope').result.output_ids, labels: document.querySelector('attn-scope').shadowRoot.querySelector('.generated-head')._view.tokens }));
  assert.deepEqual(got, want, 'the element writes what the page wrote and shows the same step');
  clean(other.problems);
  await other.page.close();
});

test('Llama: after Generate every panel follows the focused step: inside the layer (RMSNorm, SwiGLU, RoPE), the heads table and its colours, over the positions fed to that step, the same attention as the generation\'s', async () => {
  const cfg = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/models/tiny-llama/config.json'), 'utf8'));
  const heads = cfg.num_hidden_layers * cfg.num_attention_heads;
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, 'time flies like an arrow', 'e=cpu&gen=6&st=2&l=1&inside=residual,ffn,rope&table=1&metric=entropy');
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 6 && !window.attnscope.result.running, null, { timeout: 60000 });
  const P = await page.evaluate(() => window.attnscope.result.prompt_ids.length);
  for (const step of [2, 4]) {
    if (step !== 2) await page.click(`#generate-view .gen-token[data-step="${step}"]`);
    const T = P + step;
    // the pass over the step's positions takes the streamed run's place: every panel is drawn from it
    await page.waitForFunction((T) => { const r = window.attnscope.store.get().run; return r?.generated?.full && r.T === T; }, T, { timeout: 60000 });
    await page.waitForFunction(() => ['#inside-residual', '#inside-ffn', '#inside-rope'].every((id) => document.querySelector(id)._rms ?? document.querySelector(id)._swiglu ?? document.querySelector(id)._rope), null, { timeout: 30000 });
    await page.waitForFunction((n) => document.querySelectorAll('#heads-view tbody tr').length === n, heads, { timeout: 30000 });
    const got = await page.evaluate(() => {
      const r = window.attnscope.store.get().run, g = window.attnscope.store.get().generation.result;
      const trace = r.traceOf(0);
      let worst = 0;
      for (let lh = 0; lh < g.heads; lh++) {
        const a = g.head(lh, r.T), b = r.head(0, Math.floor(lh / (g.heads / r.L)), lh % (g.heads / r.L));
        for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
      }
      return { traced: Boolean(trace), worst };
    });
    assert.ok(got.traced, `step ${step}: the layer's trace`);
    assert.ok(got.worst <= 1e-5, `step ${step}: the pass's attention is the generation's (max |Δ| ${got.worst})`);
  }
  clean(problems);
  await page.close();
});

test('Llama: a decoder-only model shows only what it has: no pair box, no cross-attention section, no heads-table column that is always 0 under its causal mask, worked examples of its own (a chat turn that writes)', async () => {
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, 'time flies like an arrow', 'e=cpu&table=1');
  await page.waitForFunction(() => document.querySelectorAll('#heads-view tbody tr').length > 0, null, { timeout: 60000 });
  const shown = await page.evaluate(() => ({
    pair: document.getElementById('pair').checkVisibility(),
    cross: document.getElementById('cross-section').checkVisibility(),
    nav: [...document.querySelectorAll('#page-nav a')].filter((a) => a.checkVisibility()).map((a) => a.textContent),
    examples: [...document.querySelectorAll('#example option')].map((o) => o.value).filter(Boolean),
    columns: [...document.querySelectorAll('#heads-view th button[data-sort]')].map((b) => b.dataset.sort),
    metrics: [...document.querySelectorAll('#metric option')].filter((o) => o.value && !o.hidden).map((o) => o.value),
    specials: window.attnscope.info.specials,
  }));
  assert.equal(shown.pair, false, 'no second sentence: a decoder-only model reads one text');
  assert.equal(shown.cross, false, 'no cross-attention imitated with a pair');
  assert.ok(!shown.nav.some((t) => /Cross-attention/.test(t)), `the page's contents: ${shown.nav}`);
  assert.deepEqual(shown.examples, ['chat', 'induction', 'reference', 'sink']);
  assert.ok(!shown.columns.includes('to_next') && !shown.metrics.includes('to_next'), `→next is always 0 under the causal mask: ${shown.columns}`);
  if (shown.specials.length < 2) assert.ok(!shown.columns.includes('to_sep') && !shown.metrics.includes('to_sep'), `no last special token: ${shown.columns}`);
  for (const m of ['entropy', 'to_self', 'to_prev', 'distance', 'to_first', 'sink']) assert.ok(shown.columns.includes(m) && shown.metrics.includes(m), `${m}: ${shown.columns}`);
  // the chat turn: its question in the template, and what the model writes after it
  await page.selectOption('#example', 'chat');
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 16 && !window.attnscope.result.running, null, { timeout: 60000 });
  assert.match(await page.evaluate(() => window.attnscope.result.prompt), /<\|im_start\|>user\nWhat is the capital of France\?<\|im_end\|>/);
  assert.equal(await page.inputValue('#mask'), 'causal', 'the model\'s own mask, not the encoder examples\' padding');
  clean(problems);
  await page.close();
});

test('Llama: a link to the model alone opens on its chat turn\'s question, not yet the example (chat off, nothing written); choosing the example writes at once, though its text is already run', async () => {
  const { page, problems } = await openPage(browser, `${server.url}#model=${encodeURIComponent(`${server.url}assets/models/e2e-tiny-llama/`)}&e=cpu`, { width: 1280, height: 900 });
  assert.equal(await ready(page), null);
  await page.waitForFunction(() => window.attnscope.result?.text === 'What is the capital of France?' && !window.attnscope.store.get().busy, null, { timeout: 60000 });
  assert.deepEqual(await page.evaluate(() => ({ example: document.getElementById('example').value, chat: window.attnscope.store.get().chat, written: window.attnscope.result.output_ids ?? null })),
    { example: '', chat: false, written: null }, 'the question, run plain: the example shows once chosen');
  await page.selectOption('#example', 'chat');
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 16 && !window.attnscope.result.running, null, { timeout: 60000 });
  assert.match(await page.evaluate(() => window.attnscope.result.prompt), /<\|im_start\|>user\nWhat is the capital of France\?<\|im_end\|>/);
  assert.equal(await page.inputValue('#example'), 'chat');
  clean(problems);
  await page.close();
});

test('Llama: presenter mode with a generation: the clicker steps through it (not the layers), and the head view is above the fold and large, at 1280 × 800 and 1920 × 1080', async () => {
  for (const [width, height] of [[1280, 800], [1920, 1080]]) {
    const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, 'time flies like an arrow', 'e=cpu&gen=6&present=1&l=1&h=2', { width, height });
    await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 6 && !window.attnscope.result.running, null, { timeout: 60000 });
    const P = await page.evaluate(() => window.attnscope.result.prompt_ids.length);
    const at = () => page.evaluate(() => { const s = window.attnscope.store.get(); return { step: s.step, layer: s.layer, rows: document.querySelector('#head-view')._view.tokens.length }; });
    const press = async (key, step) => {
      await page.keyboard.press(key);
      await page.waitForFunction((n) => document.querySelector('#head-view')._view.tokens.length === n, P + step);
      assert.deepEqual(await at(), { step, layer: 1, rows: P + step }, `${width}: ${key}`);
    };
    await page.evaluate(() => document.activeElement?.blur()); // no control focused: the keys are the clicker's
    await press('PageUp', 4); // from the last step (5)
    await press('ArrowLeft', 3);
    await press('ArrowRight', 4);
    await press('PageDown', 5);
    assert.match(await page.textContent('#presenter-keys'), /next step/);
    // the head view's heatmap: above the fold, most of the window's height
    await page.evaluate(() => scrollTo(0, 0));
    const heat = await page.evaluate(() => { const r = document.querySelector('#head-view canvas.heat').getBoundingClientRect(); return { top: r.top, bottom: r.bottom, height: r.height }; });
    assert.ok(heat.bottom <= height && heat.height >= 0.45 * height, `${width} × ${height}: the heatmap from ${heat.top} to ${heat.bottom} px`);
    await page.screenshot({ path: path.join(ROOT, 'test-artifacts', `llama-presenter-generate-${width}.png`) });
    clean(problems);
    await page.close();
  }
});

test('Llama: one .gguf chosen in the file picker loads and generates', async () => {
  const { page, problems } = await open(`${server.url}assets/models/e2e-tiny-llama/`, 'time flies like an arrow', 'e=cpu');
  await page.setInputFiles('#files', [path.join(GGUF_DIR, GGUF)]);
  await page.waitForFunction((name) => window.attnscope.info?.name === name && window.attnscope.result?.text === 'time flies like an arrow' && !window.attnscope.result.output_ids, GGUF, { timeout: 60000 })
    .catch(async (e) => { throw new Error(`${e.message}: ${await page.evaluate(() => JSON.stringify([window.attnscope.info?.name, window.attnscope.store.get().modelError]))}`); });
  const { json } = golden('llama_gguf_Q4_K');
  assert.deepEqual(await page.evaluate(() => window.attnscope.result.token_ids), json.token_ids[0]);
  await page.click('#gen-go');
  await page.waitForFunction(() => window.attnscope.result?.output_ids?.length === 16 && !window.attnscope.result.running, null, { timeout: 60000 });
  clean(problems);
  await page.close();
});

test('<attn-scope> takes a .gguf file: its result equals HF\'s attention', async () => {
  const { json, tensors } = golden('llama_gguf_Q4_K');
  const { page, problems } = await openPage(browser, null, { width: 900, height: 800 });
  const model = `${server.url}assets/models/e2e-tiny-llama-gguf/${GGUF}`;
  await page.route('**/gguf-element.html', (route) => route.fulfill({ contentType: 'text/html', body: `<!doctype html><link rel="icon" href="data:,"><script type="module" src="/attn-scope.js"></script>
    <attn-scope id="g" model="${model}" sentence="${json.texts[0]}" view="model" engine="cpu"></attn-scope>` }));
  await page.goto(`${server.url}gguf-element.html`);
  await page.waitForFunction(() => document.querySelector('#g')?.result, null, { timeout: 120000 })
    .catch(async (e) => { throw new Error(`${e.message}: ${await page.evaluate(() => document.querySelector('#g')?.shadowRoot?.querySelector('.message')?.textContent)}`); });
  const got = await page.evaluate(() => {
    const r = document.querySelector('#g').result;
    return { ids: r.token_ids, attention: r.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))) };
  });
  assert.deepEqual(got.ids, json.token_ids[0]);
  const d = maxDiff(got.attention, nested(tensors.attention));
  assert.ok(d <= TOL, `<attn-scope>: attention differs from HF's by ${d}`);
  clean(problems);
  await page.close();
});

test('<attn-scope view="inside"> on a Llama: its panels (rotary positions and the cache among them) in its own words, RMSNorm and SwiGLU, each drawn when opened', async () => {
  const { page, problems } = await openPage(browser, null, { width: 900, height: 800 });
  const model = `${server.url}assets/models/e2e-tiny-llama/`;
  await page.route('**/inside-element.html', (route) => route.fulfill({ contentType: 'text/html', body: `<!doctype html><link rel="icon" href="data:,"><script type="module" src="/attn-scope.js"></script>
    <attn-scope id="g" model="${model}" sentence="time flies like an arrow" view="inside" engine="cpu" layer="1"></attn-scope>` }));
  await page.goto(`${server.url}inside-element.html`);
  const panels = () => page.evaluate(() => [...document.querySelector('#g').shadowRoot.querySelectorAll('.layer-inside [data-panel]:not([hidden])')].map((p) => [p.dataset.panel, p.querySelector('summary').textContent, p.open, p.querySelector('.view').dataset.drawn ?? '']));
  await page.waitForFunction(() => document.querySelector('#g')?.result && document.querySelector('#g').shadowRoot.querySelector('[data-panel="embeddings"] .view').dataset.drawn, null, { timeout: 120000 })
    .catch(async (e) => { throw new Error(`${e.message}: ${JSON.stringify(await page.evaluate(() => { const el = document.querySelector('#g'); return [Boolean(el?.result), el?.store?.get().positions, el?.shadowRoot?.querySelector('[data-panel="embeddings"] .inside-note')?.textContent]; }))} ${JSON.stringify(problems)} ${JSON.stringify(await panels())}`); });
  const got = await panels();
  assert.deepEqual(got.map(([id]) => id), ['embeddings', 'qkv', 'rope', 'cache', 'context', 'scale', 'residual', 'ffn', 'stack']);
  assert.deepEqual(got.find(([id]) => id === 'residual').slice(0, 2), ['residual', '5 · Residual + RMSNorm']);
  assert.match(got.find(([id]) => id === 'ffn')[1], /SiLU\(gate\) ⊙ up → down \(SwiGLU\)/);
  assert.equal(got.find(([id]) => id === 'embeddings')[1], '1 · Embeddings: token', 'rotary positions: nothing added to the token');
  for (const id of ['rope', 'cache']) {
    await page.locator(`#g [data-panel="${id}"] > summary`).click();
    await page.waitForFunction((pid) => { const el = document.querySelector('#g'); return el.shadowRoot.querySelector(`[data-panel="${pid}"] .view`).dataset.drawn === String(el.store.get().run?.id); }, id, { timeout: 60000 });
  }
  clean(problems);
  await page.close();
});

test('<attn-scope view="generate" gen="8">: the element writes the tokens HF writes, token by token, and its head view follows the step chosen and the steps played', async () => {
  const { json } = golden('llama_generate');
  const { page, problems } = await openPage(browser, null, { width: 900, height: 900 });
  const model = `${server.url}assets/models/e2e-tiny-llama/`;
  const attr = (t) => t.replace(/&/g, '&amp;').replace(/"/g, '&quot;');
  await page.route('**/generate-element.html', (route) => route.fulfill({ contentType: 'text/html', body: `<!doctype html><link rel="icon" href="data:,"><script type="module" src="/attn-scope.js"></script>
    <attn-scope id="g" model="${model}" sentence="${attr(json.texts[0])}" view="generate" gen="8" engine="cpu" controls></attn-scope>` }));
  await page.goto(`${server.url}generate-element.html`);
  await page.waitForFunction(() => { const r = document.querySelector('#g')?.result; return r?.output_ids?.length === 8 && !r.running; }, null, { timeout: 120000 })
    .catch(async (e) => { throw new Error(`${e.message}: ${await page.evaluate(() => { const s = document.querySelector('#g').store.get(); return JSON.stringify({ gen: s.gen, run: Boolean(s.run), busy: s.busy, generation: Boolean(s.generation), err: s.runError, merr: s.modelError, sentences: s.sentences, embed: s.embed }); })}`); });
  const P = json.prompt_ids.length;
  const got = await page.evaluate(() => {
    const el = document.querySelector('#g'), root = el.shadowRoot, r = el.result;
    return {
      prompt_ids: r.prompt_ids, output_ids: r.output_ids, tokens: root.querySelectorAll('.gen-token').length, play: root.querySelector('.tr-nav button:last-child').hidden,
      t: Number(root.querySelector('.generated-head canvas.heat').dataset.t), controls: !root.querySelector('.controls').hidden,
    };
  });
  assert.deepEqual(got.prompt_ids, json.prompt_ids);
  assert.deepEqual(got.output_ids, json.output_ids, 'HF\'s greedy tokens');
  assert.equal(got.tokens, 8);
  assert.equal(got.play, false, 'a play button');
  assert.equal(got.t, P + 7, 'the head view over every position fed');
  assert.ok(got.controls);
  // a written token chosen: its step, the head view over the positions fed until then
  await page.locator('#g .gen-token[data-step="3"]').click();
  await page.waitForFunction((n) => Number(document.querySelector('#g').shadowRoot.querySelector('.generated-head canvas.heat').dataset.t) === n, P + 3);
  assert.equal(await page.evaluate(() => document.querySelector('#g').result.step), 3);
  // play: the steps one by one from the one focused, the head view following, until the last
  const seen = await page.evaluate(async () => {
    const el = document.querySelector('#g'), root = el.shadowRoot, play = root.querySelector('.tr-nav button:last-child');
    const seen = [];
    play.click();
    const pressed = play.getAttribute('aria-pressed');
    for (let i = 0; i < 200 && (el.store.get().playing || !seen.length); i++) {
      const t = Number(root.querySelector('.generated-head canvas.heat').dataset.t);
      if (seen.at(-1) !== t) seen.push(t);
      await new Promise((r) => setTimeout(r, 50));
    }
    return { seen, pressed, after: root.querySelector('.tr-nav button:last-child').getAttribute('aria-pressed'), step: el.result.step };
  });
  assert.equal(seen.pressed, 'true');
  assert.deepEqual(seen.seen, [3, 4, 5, 6, 7].map((k) => P + k), 'each step in turn');
  assert.deepEqual([seen.after, seen.step], ['false', 7], 'stopped at the last');
  // an encoder does not write: it says so
  await page.evaluate((m) => document.querySelector('#g').setAttribute('model', m), `${server.url}assets/models/all-MiniLM-L6-v2/`);
  await page.waitForFunction(() => /does not write text/.test(document.querySelector('#g').shadowRoot.querySelector('.view').textContent), null, { timeout: 60000 });
  clean(problems);
  await page.close();
});

test('SmolLM2 in the fast numerics (the Numerics control, in the link): layer 0\'s 8-bit products in the page are the CLI\'s --numerics fast to the bit in the relaxed-SIMD and the SIMD128 builds, and its attention is near the CLI\'s, not the exact one', async () => {
  const SMOL = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';
  const text = 'Attention lets every word look at the others';
  const cli = (numerics) => attnscope(['attention', '--model', path.join(ROOT, SMOL), '--numerics', numerics, '--layer-trace', '0', '--', text]).results[0];
  const fast = cli('fast'), exact = cli('exact');
  const moved = maxDiff(fast.attention, exact.attention);
  assert.ok(moved > 1e-3 && moved < 0.15, `the fast numerics move the attention by ${moved}`);
  for (const wasm of ['relaxed-simd', 'simd128']) {
    const url = `${server.url}?wasm=${wasm}#model=${encodeURIComponent(SMOL)}&s=${encodeURIComponent(text)}&e=cpu&l=0`;
    const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
    assert.equal(await ready(page), null);
    await page.waitForFunction((t) => window.attnscope.result?.text === t, text, { timeout: 120000 });
    assert.equal(await page.evaluate(() => window.attnscope.result.numerics), undefined, 'exact, as the CLI says it: not at all');
    await page.selectOption('#numerics', 'fast');
    await page.waitForFunction(() => window.attnscope.result?.numerics === 'fast' && window.attnscope.store.get().run?.traceOf(0), null, { timeout: 120000 });
    await page.waitForFunction(() => /num=fast/.test(location.hash), null, { timeout: 5000 });
    const got = await page.evaluate(() => {
      const r = window.attnscope.store.get().run, t = r.traceOf(0);
      return { layer: t.layer, attention: window.attnscope.result.attention.map((l) => l.map((h) => h.map((row) => Array.from(row)))), ...Object.fromEntries(['attnNorm', 'q', 'k', 'v'].map((n) => [n, Array.from(t.get(n).values)])) };
    });
    assert.equal(got.layer, 0);
    // the products' input is the CLI's to the bit, and so are the products: the 8-bit rounding
    // and the kernel (relaxed SIMD's dot products, or the portable loop) are native's
    for (const [name, key] of [['attnNorm', 'attn_norm'], ['q', 'q'], ['k', 'k'], ['v', 'v']]) {
      const want = fast.layer_trace[key].flat(3).map(Math.fround); // the JSON's shortest f32s
      assert.equal(got[name].length, want.length, name);
      const differ = got[name].filter((x, i) => x !== want[i]).length;
      assert.equal(differ, 0, `${wasm}: ${differ} of layer 0's ${name} values are not the CLI's`);
    }
    // later layers part by what the exact parts (rotary, softmax) round differently across
    // builds, which the 8-bit rounding then magnifies: near the CLI's fast attention
    const d = maxDiff(got.attention, fast.attention);
    assert.ok(d < moved, `${wasm}: the page's fast attention is ${d} from the CLI's, the exact one ${moved}`);
    console.log(`SmolLM2 ${wasm} fast numerics: layer 0's q, k, v the CLI's to the bit; the attention ${d.toExponential(2)} from the CLI's, the exact ${moved.toExponential(2)}`);
    clean(problems);
    await page.close();
  }
});
