// A long prompt, on the CPU engine and on WebGPU: SmolLM2-135M-Instruct (the page's built-in
// Q4_1 GGUF, fetched by setup) over a text of 1,025 tokens on the CPU engine, and on WebGPU a
// tiny Llama of 4 layers × 16 heads (tests/fixtures/models/tiny-llama-wide) over 1,026 tokens:
// SwiftShader computes SmolLM2's pass in about 280 s, the tiny one's in seconds, and both pass
// the page's long-run threshold (every head of SmolLM2's would be 283M probabilities, 1.1 GB;
// the tiny one's 67M). The engine keeps each layer's queries and keys instead, the worker
// summarises every head from them a layer at a time (the grid's thumbnails, the table), and the
// page asks for the focused head, one at a time, which equals the CLI's `--heads` (the CPU engine's
// attention over the same model, natively); the wasm memory after it stays under 512 MiB.
// LONG_SMOLLM2_GPU=1 runs SmolLM2 on WebGPU too (docs/speed.md's figure).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { cpSync, rmSync, readFileSync, writeFileSync } from 'node:fs';
import { startServer, launch, openPage, ready, ROOT, ARTIFACTS, attnscope, PARAGRAPH } from './harness.mjs';
import { thumbBins, foldRows } from '../../web/summary.js';

const GGUF = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf'; // index.html's built-in choice
const WIDE = 'assets/models/e2e-tiny-llama-wide'; // a copy of the fixture where the server serves models
// another, its positions 4,096 (the fixture's 2,048 would cut a text past the head view's pooling)
const WIDE_4K = 'assets/models/e2e-tiny-llama-wide-4k';
const TOL = 1e-4;
const MIB = 1 << 20;

// a plain paragraph, again and again, and its first sentence: 1,025 of SmolLM2's tokens
const TEXT = `${PARAGRAPH.repeat(14)}${PARAGRAPH.split('. ')[0]}.`;
// the tiny tokenizer's pieces are shorter: four paragraphs and 34 words are 1,026 of its tokens
const WIDE_TEXT = `${PARAGRAPH.repeat(4)}${PARAGRAPH.split(' ').slice(0, 34).join(' ')}`;

const CASES = [
  { engine: 'cpu', name: 'SmolLM2 over 1,025 tokens on the CPU engine', model: GGUF, text: TEXT, heads: [[5, 3], [29, 8]] },
  { engine: 'gpu', name: 'a tiny Llama of 64 heads over 1,026 tokens on WebGPU', model: WIDE, text: WIDE_TEXT, heads: [[0, 5], [3, 14]] },
  ...(process.env.LONG_SMOLLM2_GPU ? [{ engine: 'gpu', name: 'SmolLM2 over 1,025 tokens on WebGPU', model: GGUF, text: TEXT, heads: [[5, 3], [29, 8]] }] : []),
];

let server, browser;
const references = new Map();
/** The CLI over the same model and text: the case's heads and the last position's next tokens. */
function reference(c) {
  const key = `${c.model}|${c.heads.join(';')}|${c.text}`;
  if (!references.has(key)) {
    references.set(key, attnscope(['attention', '--model', path.join(ROOT, c.model), '--heads', c.heads.map(([l, h]) => `${l}:${h}`).join(','), '--scores', '--top-k', '5', '--', c.text]).results[0]);
  }
  return references.get(key);
}
before(async () => {
  cpSync(path.join(ROOT, 'tests/fixtures/models/tiny-llama-wide'), path.join(ROOT, WIDE), { recursive: true });
  cpSync(path.join(ROOT, 'tests/fixtures/models/tiny-llama-wide'), path.join(ROOT, WIDE_4K), { recursive: true });
  const config = path.join(ROOT, WIDE_4K, 'config.json');
  writeFileSync(config, JSON.stringify({ ...JSON.parse(readFileSync(config, 'utf8')), max_position_embeddings: 4096 }, null, 2));
  server = await startServer();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  server?.stop();
  rmSync(path.join(ROOT, WIDE), { recursive: true, force: true });
  rmSync(path.join(ROOT, WIDE_4K), { recursive: true, force: true });
});

/** The page's head (layer, head) of item 0 once the page has it, rows as arrays. */
async function headOf(page, layer, head) {
  await page.evaluate(([l, h]) => window.attnscope.store.update({ layer: l, head: h }), [layer, head]);
  await page.waitForFunction(([l, h]) => {
    const s = window.attnscope.store.get();
    return s.run.hasHead(0, l, h) && s.rendered.startsWith(`${s.run.id}:`) && !document.getElementById('long-note').hidden && document.getElementById('long-note').textContent.includes(`L${l} H${h} is here.`);
  }, [layer, head], { timeout: 300000, polling: 250 });
  return page.evaluate(([l, h]) => { const r = window.attnscope.store.get().run; return Array.from(r.head(0, l, h)); }, [layer, head]);
}

/** The page's thumbnail of head (layer, head) and its largest probability against the CLI's
 *  head (`rows`, T × T) max-pooled as summary.js pools: the largest |Δ| of either. */
async function thumbDiff(page, rows, T, [layer, head]) {
  const bins = thumbBins(T), flat = new Float32Array(T * T), pooled = new Float32Array(bins.side * bins.side);
  rows.forEach((row, q) => flat.set(row, q * T));
  const best = { max: 0, q: 0, k: 0 };
  foldRows(flat, T, 0, T, T, bins, pooled, null, best);
  const own = await page.evaluate(([l, h]) => { const r = window.attnscope.store.get().run; return { values: Array.from(r.thumb(0, l, h).values), max: r.probMax(0, l, h) }; }, [layer, head]);
  if (own.values.length !== pooled.length) return Infinity;
  return Math.max(Math.abs(own.max - best.max), own.values.reduce((m, v, i) => Math.max(m, Math.abs(v - pooled[i])), 0));
}

/** The model grid drawn for the page's run, each of its `heads` by the rows a text typed on
 *  changed (web/views/grid.js `sameRows`), against the grid drawn whole (by another scale, then
 *  this one again): equal, pixel for pixel. Returns the cells' pixels and the thumbnails' side. */
async function gridByRows(page, heads) {
  await page.waitForFunction(() => document.getElementById('model-view').dataset.drawn?.split('|')[0] === String(window.attnscope.store.get().run.id), null, { timeout: 60000 });
  const sheet = () => page.evaluate(() => {
    const v = document.getElementById('model-view'), c = v._sheet.canvas, d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let h = 2166136261;
    for (let i = 0; i < d.length; i++) h = Math.imul(h ^ d[i], 16777619);
    return { hash: h >>> 0, kept: Number(v.dataset.keptHeads), drawn: v.dataset.drawn, slot: v._sheet.slot, side: window.attnscope.store.get().run.thumb(0, 0, 0).n };
  });
  const byRows = await sheet();
  assert.equal(byRows.kept, heads, 'every head of the grid drawn by its changed rows');
  let drawn = byRows.drawn;
  for (const scale of ['head', 'absolute']) {
    await page.evaluate((sc) => window.attnscope.store.update({ scale: sc }), scale);
    drawn = await page.waitForFunction(([d, sc]) => { const v = document.getElementById('model-view'); return v.dataset.drawn !== d && v.dataset.drawn.includes(`|${sc}|`) && v.dataset.drawn; }, [drawn, scale], { timeout: 60000 }).then((h) => h.jsonValue());
  }
  const whole = await sheet();
  assert.equal(whole.kept, 0, 'the grid drawn whole');
  assert.equal(whole.hash, byRows.hash, `the grid drawn by its changed rows (cells of ${byRows.slot} pixels) equals the grid drawn whole`);
  return byRows;
}

function worst(got, want, T) {
  let d = 0;
  for (let q = 0; q < T; q++) for (let k = 0; k < T; k++) d = Math.max(d, Math.abs(got[q * T + k] - want[q][k]));
  return d;
}

for (const { engine, name, model, text, heads } of CASES) {
  test(`${name}: the engine keeps queries and keys, the grid and table summarise every head, the focused heads (one at a time, the first with the run) equal the CLI's --heads, the wasm memory stays under 512 MiB, the sink switch hides the first key from them, and (CPU) two words typed at its end reuse the pass and equal the CLI's`, async () => {
    // a short text first (the model loads and runs), then the long one typed in
    const want = reference({ model, text, heads });
    const url = `${server.url}${process.env.WASM ? `?wasm=${process.env.WASM}` : ''}#model=${encodeURIComponent(model)}&s=${encodeURIComponent('The committee met.')}&e=${engine}`;
    const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
    assert.equal(await ready(page), null);
    // whether the focused head is here when the long run first reaches the store
    await page.evaluate(() => window.attnscope.store.subscribe((s, changed) => {
      const r = s.run;
      if (changed.has('run') && r?.long && !window.firstHead) window.firstHead = { at: `${Math.min(s.layer, r.L - 1)}:${Math.min(s.head, r.H - 1)}`, here: r.hasHead(0, Math.min(s.layer, r.L - 1), Math.min(s.head, r.H - 1)) };
    }));
    // what the progress box says while the run works (web/progress.js)
    await page.evaluate(() => {
      window.boxSaid = [];
      const said = document.querySelector('#run-status .run-text');
      new MutationObserver(() => window.boxSaid.push(said.textContent)).observe(said, { childList: true, characterData: true, subtree: true });
    });
    await page.fill('#sentence', text);
    await page.waitForFunction((t) => window.attnscope.result?.text === t, text, { timeout: 900000, polling: 500 });
    // the pass told its layers as it went (a WebGPU pass as the GPU begins each)
    const said = await page.evaluate(() => window.boxSaid);
    assert.ok(said.some((x) => /^Computing layer \d+ of \d+…$/.test(x)), `the box told the pass's layers: ${JSON.stringify(said)}`);
    // the run brought its focused head with it: the views wait on no second message
    const first = await page.evaluate(() => window.firstHead);
    assert.ok(first.here, `the focused head ${first.at} came with the run`);
    const [ll, hh] = heads.at(-1);
    const run = await page.evaluate(([l, h]) => { const r = window.attnscope.store.get().run; return { long: r.long, T: r.T, L: r.L, H: r.H, backend: r.backend, thumb: r.thumb(0, l, h)?.n ?? 0, metrics: r.metricNames.length }; }, [ll, hh]);
    assert.equal(run.long, true, 'a long run');
    assert.ok(run.T >= 1024 && run.T === want.tokens.length, `${run.T} tokens (the CLI: ${want.tokens.length})`);
    assert.equal(run.backend.startsWith('gpu'), engine === 'gpu', run.backend);
    assert.ok(run.thumb > 0 && run.thumb <= 64, `every head has its thumbnail (${run.thumb})`);
    for (const [i, [layer, head]] of heads.entries()) {
      const got = await headOf(page, layer, head);
      const cli = want.heads[i];
      assert.deepEqual([cli.layer, cli.head], [layer, head]);
      // the page holds no T² scores of a long run's head: the steps view draws the window it
      // shows, which the engine gives a window at a time, on the scale of the largest |score|
      // over every cell (folded as the head is made); both the CLI's
      const steps = await (await page.waitForFunction(([l, h]) => {
        const r = window.attnscope.store.get().run, v = document.getElementById('steps-view')._view;
        if (!v?.key.startsWith(`${r.id}|0|${l}|${h}|`) || !v.imgs.scores || !v.imgs.filled) return null;
        const { q0, k0, n } = v.g, part = { q0, q1: q0 + n, k0, k1: k0 + n };
        return { part, values: Array.from(r.scoresIn(0, l, h, part)), max: r.scoreMax(0, l, h), pending: document.querySelector('#steps-view figure[data-step="scores"] canvas').dataset.pending };
      }, [layer, head], { timeout: 60000, polling: 100 })).jsonValue();
      const { q0, q1, k0, k1 } = steps.part;
      assert.ok(q1 - q0 === 64 && k1 - k0 === 64, `the steps view's window ${JSON.stringify(steps.part)}`);
      let ds = 0;
      for (let q = q0; q < q1; q++) for (let k = k0; k < k1; k++) ds = Math.max(ds, Math.abs(steps.values[(q - q0) * 64 + k - k0] - cli.scores[q][k]));
      const cliMax = cli.scores.reduce((m, row) => row.reduce((x, v) => Math.max(x, Math.abs(v)), m), 0);
      assert.ok(ds <= TOL, `${engine}: head ${layer}:${head}'s scores in the steps view's window differ from the CLI's by ${ds}`);
      assert.ok(cliMax > 0 && Math.abs(steps.max - cliMax) <= TOL, `${engine}: head ${layer}:${head}'s largest |score| ${steps.max}, the CLI's ${cliMax}`);
      assert.equal(steps.pending, '', 'the scores panel drawn');
      // its steps exported: the window the steps view shows, four panels of 64 × 64 cells
      const svg = await page.evaluate(async ([l, h, part]) => {
        const { toSVG } = await import('/web/export.js');
        const text = toSVG(window.attnscope.store.get().run, 'steps', { item: 0, layer: l, head: h, scale: 'absolute', part });
        return { cells: (text.match(/<rect [^>]*data-q=/g) ?? []).length, labels: (text.match(/class="qlabel"/g) ?? []).length };
      }, [layer, head, steps.part]);
      assert.deepEqual(svg, { cells: 4 * 64 * 64, labels: 4 * 64 }, 'the steps exported: the window shown');
      console.log(`# ${engine}: head ${layer}:${head}'s scores in the steps view's window ${JSON.stringify(steps.part)} vs the CLI's: max |Δ| ${ds.toExponential(2)}; the largest |score| ${steps.max} (the CLI's ${cliMax})`);
      const d = worst(got, cli.attention, run.T);
      assert.ok(d <= TOL, `${engine}: head ${layer}:${head} differs from the CLI's by ${d}`);
      console.log(`# ${engine}: head ${layer}:${head} over ${run.T} tokens vs the CLI's --heads: max |Δ| ${d.toExponential(2)}`);
    }
    // the page holds the heads it asked for, one at a time (the first focused, then the case's),
    // each T × T, null for the others, and a layer none was asked of is null
    const held = await page.evaluate(() => {
      const a = window.attnscope.result.attention;
      return { heads: a.flatMap((x, l) => (x ? x.flatMap((y, h) => (y ? [`${l}:${h}`] : [])) : [])), rows: a.flatMap((x) => (x ? x.filter(Boolean).map((y) => y.length) : [])), empty: a.filter((x) => x === null).length };
    });
    const asked = [...new Set([first.at, ...heads.map(([l, h]) => `${l}:${h}`)])];
    assert.deepEqual(held.heads.sort(), asked.sort(), 'the heads the page holds');
    assert.deepEqual(held.rows, asked.map(() => run.T));
    assert.equal(held.empty, run.L - new Set(asked.map((x) => x.split(':')[0])).size, 'the layers with no head held');
    // the last position's likeliest next tokens, as the CLI's
    const next = await page.evaluate(() => window.attnscope.result.next_tokens.at(-1));
    const last = want.next_tokens.at(-1);
    assert.deepEqual(next.map((p) => p.id), last.map((p) => p.id));
    for (const [i, p] of last.entries()) assert.ok(Math.abs(next[i].p - p.p) <= TOL, `next token ${i}: ${next[i].p} vs ${p.p}`);
    // the grid drew every head of this run (from the summaries)
    await page.waitForFunction(() => document.getElementById('model-view').dataset.drawn?.split('|')[0] === String(window.attnscope.store.get().run.id), null, { timeout: 60000 });
    assert.match(await page.evaluate(() => document.getElementById('long-note').textContent), /kept each layer's queries and keys/);
    const stats = await page.evaluate(() => window.attnscope.stats());
    console.log(`# ${engine}: wasm memory after the ${run.T}-token run ${(stats.wasmBytes / MIB).toFixed(1)} MiB`);
    assert.ok(stats.wasmBytes <= 512 * MIB, `wasm memory ${(stats.wasmBytes / MIB).toFixed(1)} MiB`);
    // the focused head's thumbnail (the CPU engine's pass folded it; after WebGPU's, the engine
    // folded it from the kept queries and keys) is the CLI's head max-pooled as summary.js pools
    const dOwn = await thumbDiff(page, want.heads.at(-1).attention, run.T, heads.at(-1));
    assert.ok(dOwn <= TOL, `${engine}: the head's thumbnail and largest differ from the CLI's pooled by ${dOwn}`);
    console.log(`# ${engine}: head ${heads.at(-1).join(':')}'s thumbnail vs the CLI's pooled: max |Δ| ${dOwn.toExponential(2)}`);
    // the sink switch: the focused head (the last asked for) drawn with the first key hidden and
    // each row renormalised, and the grid's thumbnails of every head so (the worker's summary)
    await page.check('#nosink');
    const hidden = await page.waitForFunction(() => { const v = document.querySelector('#head-view')._view; return v?.run.sinkHidden && Array.from(v.values); }, null, { timeout: 60000, polling: 250 }).then((h) => h.jsonValue());
    const cli = want.heads.at(-1).attention, T = run.T;
    const expected = new Float32Array(T * T);
    for (let q = 0; q < T; q++) {
      const rest = cli[q].reduce((a, v, k) => a + (k ? v : 0), 0);
      for (let k = 1; k < T; k++) expected[q * T + k] = rest === 0 ? 0 : cli[q][k] / rest;
    }
    const dSink = hidden.reduce((d, v, i) => Math.max(d, Math.abs(v - expected[i])), 0);
    assert.ok(dSink <= TOL, `${engine}: the sink-hidden head differs from the CLI's renormalised by ${dSink}`);
    // its thumbnail in the grid: the worker's, max-pooled as summary.js pools every head
    const bins = thumbBins(T), want2 = new Float32Array(bins.side * bins.side);
    foldRows(expected, T, 0, T, T, bins, want2, null, { max: 0, q: 0, k: 0 });
    const thumb = await page.evaluate(([l, h]) => Array.from(document.querySelector('#head-view')._view.run.thumb(0, l, h).values), heads.at(-1));
    const dThumb = thumb.reduce((d, v, i) => Math.max(d, Math.abs(v - want2[i])), thumb.length === want2.length ? 0 : Infinity);
    assert.ok(dThumb <= TOL, `${engine}: the sink-hidden thumbnail differs by ${dThumb}`);
    console.log(`# ${engine}: head ${heads.at(-1).join(':')} with the sink hidden vs the CLI's renormalised: max |Δ| ${dSink.toExponential(2)}, its thumbnail ${dThumb.toExponential(2)}`);
    await page.waitForFunction(() => document.getElementById('model-view').dataset.drawn?.split('|')[0] === `${window.attnscope.store.get().run.id}s`, null, { timeout: 60000 });
    assert.match(await page.textContent('#sink-note'), /^A view, not the model's attention/);
    assert.doesNotMatch(await page.textContent('#long-note'), /sink/);
    if (engine === 'cpu') {
      // two words typed at its end: the pass reuses the last one's positions and resumes its
      // thumbnails (src/engine/cpu/prefix.rs), computing the new rows alone; the focused head,
      // its thumbnail and the next tokens equal the CLI's over the new text
      await page.uncheck('#nosink');
      // (the grid drawn again with the first key shown, before the text grows)
      await page.waitForFunction((id) => document.getElementById('model-view').dataset.drawn?.split('|')[0] === String(id), await page.evaluate(() => window.attnscope.store.get().run.id), { timeout: 60000 });
      const typed = `${text} Again.`, again = reference({ model, text: typed, heads });
      await page.fill('#sentence', typed);
      await page.waitForFunction((t) => window.attnscope.result?.text === t, typed, { timeout: 300000, polling: 100 });
      const after = await page.evaluate(() => { const r = window.attnscope.store.get().run; return { T: r.T, reused: r.reused, pass: r.elapsed_ms }; });
      assert.equal(after.T, again.tokens.length);
      assert.ok(after.reused >= run.T - 1, `${after.reused} positions reused of the ${run.T} before`);
      const got = await headOf(page, ll, hh);
      const d = worst(got, again.heads.at(-1).attention, after.T);
      const dThumb2 = await thumbDiff(page, again.heads.at(-1).attention, after.T, heads.at(-1));
      assert.ok(d <= TOL && dThumb2 <= TOL, `typed on: head ${ll}:${hh} differs from the CLI's by ${d}, its thumbnail by ${dThumb2}`);
      // drawn by what changed: the grid redraws each head's thumbnail from its first changed
      // row, and that is what drawing it whole gives; with cells narrower than a thumbnail (its
      // rows pooled again), then as wide or wider (a projector's: drawn cell for cell)
      const pooledAgain = await gridByRows(page, run.L * run.H);
      assert.ok(pooledAgain.slot < pooledAgain.side, `a ${pooledAgain.side}-cell thumbnail in ${pooledAgain.slot} pixels`);
      const next2 = await page.evaluate(() => window.attnscope.result.next_tokens.at(-1));
      assert.deepEqual(next2.map((p) => p.id), again.next_tokens.at(-1).map((p) => p.id));
      console.log(`# cpu: two words typed on (${after.T} tokens, ${after.reused} reused, the pass ${after.pass.toFixed(0)} ms): head ${ll}:${hh} vs the CLI's max |Δ| ${d.toExponential(2)}, its thumbnail ${dThumb2.toExponential(2)}`);
      await page.setViewportSize({ width: 2560, height: 1400 });
      for (const more of [' And', ' And again.']) { // the first drawn whole at the new size, the next by rows
        await page.fill('#sentence', `${typed}${more}`);
        await page.waitForFunction((t) => window.attnscope.result?.text === t && document.getElementById('model-view').dataset.drawn?.split('|')[0] === String(window.attnscope.store.get().run.id), `${typed}${more}`, { timeout: 300000, polling: 100 });
      }
      const cellForCell = await gridByRows(page, run.L * run.H);
      assert.ok(cellForCell.slot >= cellForCell.side, `a ${cellForCell.side}-cell thumbnail in ${cellForCell.slot} pixels`);
      await page.setViewportSize({ width: 1280, height: 900 });
      console.log(`# cpu: typed on, the grid redrew ${run.L * run.H} heads by their changed rows, pixel for pixel as drawn whole, in cells of ${pooledAgain.slot} and ${cellForCell.slot} pixels`);
    }
    assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);
    await page.close();
  });
}

// The heads' summary after a pass on the CPU engine only reads the thumbnails the pass folded
// (src/engine/cpu/attention.rs): it is over in milliseconds, so a stop is asked in the pass.
test('a long run shows the layer it is on, over the page, and its stop ends it before the next layer: the views keep the text before, and the next run runs', async () => {
  const url = `${server.url}#model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent('The committee met.')}&e=cpu`;
  const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
  assert.equal(await ready(page), null);
  const before = await page.evaluate(() => window.attnscope.store.get().run.id);
  const header = await page.evaluate(() => document.getElementById('top').offsetHeight);
  await page.fill('#sentence', TEXT);
  // the progress as the page shows it, over the page: "Computing layer N of 30…", a bar and a
  // stop; the header keeps its height
  const shown = await page.waitForFunction(() => {
    const box = document.getElementById('run-status'), bar = box.querySelector('progress');
    return !box.hidden && box.dataset.phase === 'pass' && !box.querySelector('.stop-run').hidden
      && { text: box.querySelector('.run-text').textContent, bar: [bar.value, bar.max], position: getComputedStyle(box).position, header: document.getElementById('top').offsetHeight };
  }, null, { timeout: 300000, polling: 20 }).then((h) => h.jsonValue());
  const m = shown.text.match(/^Computing layer (\d+) of 30…$/);
  assert.ok(m, shown.text);
  assert.deepEqual(shown.bar, [+m[1], 30], 'the bar: the layers begun, of SmolLM2\'s 30');
  assert.equal(shown.position, 'fixed');
  assert.equal(shown.header, header, 'the header keeps its height');
  await page.screenshot({ path: path.join(ARTIFACTS, 'long-progress-pass.png') });
  await page.click('#run-status .stop-run');
  const line = await page.waitForFunction(() => { const s = window.attnscope.store.get(); return !s.busy && s.runError?.line; }, null, { timeout: 60000, polling: 50 }).then((h) => h.jsonValue());
  assert.match(line, /^The run stopped as asked, after \d+ of 30 layers: the views still show the text before\.$/);
  const after = await page.evaluate(() => ({ id: window.attnscope.store.get().run.id, text: window.attnscope.result.text, box: document.getElementById('run-status').hidden }));
  assert.deepEqual(after, { id: before, text: 'The committee met.', box: true }, 'what was shown stays, the progress gone');
  assert.equal(await page.textContent('#input-status'), line);
  // the engine runs the next text
  await page.fill('#sentence', 'The committee met again.');
  await page.waitForFunction(() => window.attnscope.result?.text === 'The committee met again.' && !window.attnscope.store.get().runError, null, { timeout: 60000 });
  assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);
  await page.close();
});

// A WebGPU pass the page watches goes to the GPU a layer at a time (src/engine/gpu/forward.rs
// `replay`), two layers' work queued ahead: the box says the layer the GPU is on, and a stop is
// read as each layer's work ends, so the pass ends there rather than after its last layer. The
// tiny Llama over ~2,400 tokens: SwiftShader takes ~7 s a layer.
test('a long WebGPU pass shows the layer the GPU is on, and its stop ends it before its last layer: the views keep the text before, and the next run runs', async () => {
  const url = `${server.url}#model=${encodeURIComponent(WIDE_4K)}&s=${encodeURIComponent('The committee met.')}&e=gpu`;
  const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
  assert.equal(await ready(page), null);
  const before = await page.evaluate(() => window.attnscope.store.get().run.id);
  await page.fill('#sentence', PARAGRAPH.repeat(10));
  const shown = await page.waitForFunction(() => {
    const box = document.getElementById('run-status');
    return !box.hidden && box.dataset.phase === 'pass' && !box.querySelector('.stop-run').hidden && box.querySelector('.run-text').textContent;
  }, null, { timeout: 300000, polling: 20 }).then((h) => h.jsonValue());
  assert.match(shown, /^Computing layer [1-3] of 4…$/);
  await page.click('#run-status .stop-run');
  const line = await page.waitForFunction(() => { const s = window.attnscope.store.get(); return !s.busy && s.runError?.line; }, null, { timeout: 120000, polling: 50 }).then((h) => h.jsonValue());
  assert.match(line, /^The run stopped as asked, after [1-3] of 4 layers: the views still show the text before\.$/);
  const after = await page.evaluate(() => ({ id: window.attnscope.store.get().run.id, text: window.attnscope.result.text, box: document.getElementById('run-status').hidden }));
  assert.deepEqual(after, { id: before, text: 'The committee met.', box: true }, 'what was shown stays, the progress gone');
  await page.fill('#sentence', 'The committee met again.');
  await page.waitForFunction(() => window.attnscope.result?.text === 'The committee met again.' && !window.attnscope.store.get().runError, null, { timeout: 120000 });
  assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);
  await page.close();
});

// A long pass on the CPU engine folds each head's thumbnail as it computes it, and shows each
// layer's as it ends it in the progress cells (src/engine/progress.rs `PassProgress::folded`):
// the box over the page draws the layers' heads while the later layers compute, and what it drew
// is the picture of the thumbnails the whole run gives, pooled and coloured as the grid does
// (0–1 for every head, or each to its largest).
test('a long run draws each layer\'s heads in its progress box as the pass ends the layer, the picture of the thumbnails the whole run gives, on either colour scale', async () => {
  const url = `${server.url}#model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent('The committee met.')}&e=cpu`;
  const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
  assert.equal(await ready(page), null);
  let before = 'The committee met.';
  for (const [by, text] of [['absolute', TEXT], ['head', `Then: ${TEXT}`]]) { // (nothing shared: a whole pass)
    await page.evaluate((sc) => window.attnscope.store.update({ scale: sc }), by);
    await page.fill('#sentence', text);
    const early = await page.waitForFunction(() => {
      const box = document.getElementById('run-status'), figure = box.querySelector('.run-layers'), c = figure.querySelector('canvas');
      return !box.hidden && !figure.hidden && +c.dataset.layers >= 1 && { layers: +c.dataset.layers, begun: box.querySelector('progress').value, caption: figure.querySelector('figcaption').textContent, text: window.attnscope.result.text };
    }, null, { timeout: 300000, polling: 20 }).then((h) => h.jsonValue());
    assert.ok(early.layers < 30 && early.layers <= early.begun, `drawn while the pass goes on: ${early.layers} layers drawn, ${early.begun} begun`);
    assert.equal(early.text, before, 'the views still show the text before');
    assert.match(early.caption, /^The heads of (layer 1|layers 1–\d+) of 30, as each layer is done: a column a layer, a square a head$/);
    await page.screenshot({ path: path.join(ARTIFACTS, `long-progress-layers-${by}.png`) });
    await page.waitForFunction((t) => window.attnscope.result?.text === t && !window.attnscope.store.get().busy, text, { timeout: 300000, polling: 100 });
    before = text;
    // each head's square, pooled and coloured here on its own from the whole run's thumbnail
    // (each device pixel the largest of the bins it covers; 0–1, or 0 to the head's largest)
    const drawn = await page.evaluate(async (by) => {
      const { scale } = await import('/web/colour.js');
      const live = document.querySelector('#run-status .run-layers canvas'), r = window.devicePixelRatio;
      const layers = +live.dataset.layers, run = window.attnscope.store.get().run, { L, H } = run, side = run.thumb(0, 0, 0).n;
      const cell = (live.width / r + 1) / L - 1, px = Math.round(cell * r), at = (i) => Math.round(i * (cell + 1) * r);
      const data = live.getContext('2d').getImageData(0, 0, live.width, live.height).data;
      let differ = 0, first = null, coloured = 0;
      for (let l = 0; l < L; l++) {
        for (let h = 0; h < H; h++) {
          const t = l < layers ? run.thumb(0, l, h) : null, pooled = new Float32Array(px * px);
          if (t) for (let q = 0; q < side; q++) for (let k = 0; k < side; k++) {
            const i = Math.floor((q * px) / side) * px + Math.floor((k * px) / side);
            pooled[i] = Math.max(pooled[i], t.values[q * side + k]);
          }
          const sc = scale('probability', { max: by === 'head' && t ? t.max : 1 });
          for (let i = 0; i < px; i++) {
            for (let j = 0; j < px; j++) {
              const want = t ? sc.table[sc.index(pooled[i * px + j])] : [229, 231, 235]; // (a layer not drawn: its grey slot)
              const o = ((at(h) + i) * live.width + at(l) + j) * 4, got = [data[o], data[o + 1], data[o + 2]];
              if (got.some((c, ch) => c !== want[ch])) { differ++; first ??= { l, h, i, j, got, want }; }
              if (t && got[0] < 200) coloured++;
            }
          }
        }
      }
      return { layers, side, px, differ, first, coloured };
    }, by);
    assert.ok(drawn.layers >= early.layers, `${drawn.layers} layers drawn in the end`);
    assert.ok(drawn.px < drawn.side, `squares of ${drawn.px} pixels, thumbnails of ${drawn.side} cells: pooled`);
    assert.equal(drawn.differ, 0, `${by}: the box's heads, as the whole run's thumbnails pool and colour: first at ${JSON.stringify(drawn.first)}`);
    assert.ok(drawn.coloured > 0, 'some attention is drawn');
    console.log(`# ${by}: the box drew the heads of layer ${early.layers} while the pass began layer ${early.begun}, and ${drawn.layers} of 30 in all, pixel for pixel the run's thumbnails pooled to ${drawn.px} pixels`);
  }
  assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);
  await page.close();
});

// The head view pools a head of more than 2,048 positions to its pixels (views/head.js poolOf):
// for a long run the engine pools it as it makes the head's rows (src/analysis/thumbnail.rs
// PoolFold), so the page reads none of its T² values to draw it. The tiny Llama of 64 heads
// over 2,136 tokens.
const POOL_TEXT = PARAGRAPH.repeat(9);
test('a long run\'s head comes pooled for the head view by the engine, the same bits as the page pools it; with the sink hidden the page pools its own', async () => {
  const url = `${server.url}${process.env.WASM ? `?wasm=${process.env.WASM}` : ''}#model=${encodeURIComponent(WIDE_4K)}&s=${encodeURIComponent(POOL_TEXT)}&e=cpu&l=0&h=0`;
  const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
  await page.addInitScript(() => { // what each request for a long run's head asked pooled
    const post = Worker.prototype.postMessage;
    window.longHeads = [];
    Worker.prototype.postMessage = function (msg, ...rest) {
      if (msg?.type === 'long-head') window.longHeads.push({ head: `${msg.layer}:${msg.head}`, pool: msg.pool ?? null });
      return post.call(this, msg, ...rest);
    };
  });
  await page.reload();
  assert.equal(await ready(page), null);
  await page.waitForFunction(() => window.attnscope.store.get().run?.long, null, { timeout: 300000, polling: 250 });
  const T = await page.evaluate(() => window.attnscope.store.get().run.T);
  assert.ok(T > 2048, `${T} tokens: past the head view's pooling`);
  /** Head (l, h) focused, then every view drawn with it: how the heatmap was pooled, and the
   *  engine's pooled part against summary.js pooledPart over the head the page holds. */
  const focus = (l, h) => page.evaluate(async ([l, h]) => {
    const before = window.attnscope.store.get().rendered;
    window.attnscope.store.update({ layer: l, head: h });
    const s = () => window.attnscope.store.get();
    while (!(s().run.hasHead(0, l, h) && s().rendered !== before && s().rendered.startsWith(`${s().run.id}:`))) await new Promise((r) => setTimeout(r, 50));
    const { pooledPart } = await import('/web/summary.js');
    const r = s().run, made = r.pooledOf(0, l, h);
    const heat = document.querySelector('#head-view .heat');
    if (!made) return { by: heat.dataset.pooledBy, made: null };
    const want = pooledPart(r.head(0, l, h), r.maskOf(0, l), r.T, made.part, made.px);
    const same = (a, b) => a.length === b.length && a.every((v, i) => Object.is(v, b[i]));
    return {
      by: heat.dataset.pooledBy, part: made.part, px: made.px, bins: [made.rows, made.cols, made.w],
      sameShape: made.rows === want.rows && made.cols === want.cols && made.w === want.w,
      sameValues: same(made.values, want.values), sameMask: same(made.mask, want.mask),
      largest: [made.max, made.arg], want: [want.max, want.arg],
      cells: made.values.filter((v) => v > 0).length,
    };
  }, [l, h]);
  for (const [l, h] of [[0, 5], [2, 11], [3, 0]]) {
    const got = await focus(l, h);
    assert.equal(got.by, 'engine', `head ${l}:${h} drawn from the engine's pooling: ${JSON.stringify(got)}`);
    assert.deepEqual(got.part, { q0: 0, q1: T, k0: 0, k1: T }, 'the whole head');
    assert.ok(got.px < T && got.bins[2] >= 2, `pooled to fewer pixels than cells: ${JSON.stringify(got)}`);
    assert.ok(got.sameShape && got.sameValues && got.sameMask, `head ${l}:${h}: the engine's bins equal pooledPart's: ${JSON.stringify(got)}`);
    assert.deepEqual(got.largest, got.want, `head ${l}:${h}: the largest and its first cell`);
    assert.ok(got.cells > got.bins[0], 'a causal head fills its lower half of bins');
  }
  // the sink hidden: the view draws heads renormalised from the engine's, which the page pools
  await page.evaluate(() => window.attnscope.store.update({ noSink: true }));
  const hidden = await focus(1, 7);
  assert.equal(hidden.by, 'page', `with the sink hidden the page pools: ${JSON.stringify(hidden)}`);
  const asked = await page.evaluate(() => window.longHeads);
  assert.deepEqual(asked.map((x) => x.head), ['0:5', '2:11', '3:0', '1:7']);
  assert.ok(asked.slice(0, 3).every((x) => x.pool?.px > 0), `each asked pooled: ${JSON.stringify(asked)}`);
  assert.equal(asked[3].pool, null, 'not with the sink hidden');
  assert.deepEqual(problems, []);
  await page.close();
});

// A generation past the attention a generation keeps (src/wasm.rs `Generating.long`: every
// head over its N positions, L·H·N², would be over 2²⁷ probabilities): the tiny Llama of 64 heads
// after a prompt of 1,446 tokens (the bound: 1,448 positions). Each pass is a run of a long text
// over the prompt and what was written so far, reusing the one before it.
const GEN_TEXT = `${PARAGRAPH.repeat(6)}${PARAGRAPH.split(' ').slice(0, 23).join(' ')}`;
test('a long run\'s heads the page lets go are written over by the next ones: a head computed again into them is the same bits as it was in new arrays', async () => {
  const url = `${server.url}#model=${encodeURIComponent(WIDE)}&s=${encodeURIComponent(GEN_TEXT)}&e=cpu&l=0&h=0`;
  const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
  // the engine's requests for a long run's head, and whether each gave arrays back
  await page.addInitScript(() => {
    const post = Worker.prototype.postMessage;
    window.longHeads = [];
    Worker.prototype.postMessage = function (msg, ...rest) {
      if (msg?.type === 'long-head') window.longHeads.push({ head: `${msg.layer}:${msg.head}`, into: Boolean(msg.into), scores: msg.scores });
      // an array given back holds NaN in every cell: the engine writes each one (the zeros
      // around a row's span too: a head with another mask could have left values there)
      msg?.into?.fill(NaN);
      if (msg?.type === 'long-scores') (window.longScores ??= []).push(`${msg.layer}:${msg.head}`);
      return post.call(this, msg, ...rest);
    };
  });
  await page.reload();
  assert.equal(await ready(page), null);
  await page.waitForFunction(() => window.attnscope.store.get().run?.long, null, { timeout: 300000, polling: 250 });
  const T = await page.evaluate(() => window.attnscope.store.get().run.T);
  assert.equal(T, 1446);
  // each head's probabilities as one FNV-1a hash of their bits, and its largest |score|
  const bits = ([l, h]) => page.evaluate(([l, h]) => {
    const r = window.attnscope.store.get().run, hash = (a) => new Uint32Array(a.buffer, a.byteOffset, a.length).reduce((x, w) => Math.imul(x ^ w, 16777619), 2166136261) >>> 0;
    return { probs: hash(r.head(0, l, h)), max: r.scoreMax(0, l, h) };
  }, [l, h]);
  // 8.4 MB a head at 1,446 tokens: the page holds 10 (result.js LONG_HEAD_BYTES), so the 14
  // focused after the first let 4 go, and then the first comes again
  const order = Array.from({ length: 14 }, (_, i) => [Math.floor((i + 1) / 16), (i + 1) % 16]);
  const first = await bits([0, 0]);
  for (const [l, h] of [...order, [0, 0]]) { // each focused, then every view drawn with it
    const before = await page.evaluate(([l, h]) => { const r = window.attnscope.store.get().rendered; window.attnscope.store.update({ layer: l, head: h }); return r; }, [l, h]);
    await page.waitForFunction(([l, h, before]) => { const s = window.attnscope.store.get(); return s.run.hasHead(0, l, h) && s.rendered !== before && s.rendered.startsWith(`${s.run.id}:`); }, [l, h, before], { timeout: 60000, polling: 50 });
  }
  const again = await bits([0, 0]);
  const asked = await page.evaluate(() => window.longHeads);
  assert.deepEqual(asked.map((x) => x.head), [...order, [0, 0]].map(([l, h]) => `${l}:${h}`), 'each head asked for once');
  assert.ok(asked.filter((x) => x.into).length >= 3, `heads written into arrays let go: ${JSON.stringify(asked)}`);
  assert.ok(asked.at(-1).into, 'the first head, again, into arrays let go');
  assert.deepEqual(again, first, 'the first head computed again into arrays let go: the same bits');
  // each head asked for with the window of its scores the steps view shows, and the first,
  // which came with the run, too: none asked for alone
  assert.ok(asked.every((x) => x.scores?.q1 - x.scores?.q0 === 64), `the steps view's window with each head: ${JSON.stringify(asked.map((x) => x.scores))}`);
  assert.deepEqual(await page.evaluate(() => window.longScores ?? []), [], 'windows of scores asked for alone');
  assert.deepEqual(problems, []);
  await page.close();
});

test('a long generation: each pass a long text\'s run reusing the last, the tokens and likeliest next tokens the CLI gives over the same ids, the focused head the CLI\'s at the last step and at an earlier one', async () => {
  const GEN = 6, HEAD = [3, 14];
  const url = `${server.url}#model=${encodeURIComponent(WIDE)}&s=${encodeURIComponent(GEN_TEXT)}&e=cpu&gen=${GEN}&l=${HEAD[0]}&h=${HEAD[1]}`;
  const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
  assert.equal(await ready(page), null);
  // the passes as they come: each one's run, its positions and what it reused
  await page.evaluate(() => window.attnscope.store.subscribe((s, changed) => {
    const r = s.run;
    if (changed.has('run') && r?.generated) (window.passes ??= []).push({ T: r.T, reused: r.reused, long: r.long, step: r.generated.step });
  }));
  await page.waitForFunction((n) => { const g = window.attnscope.store.get().generation; return g?.result?.output_ids.length === n && !g.running; }, GEN, { timeout: 300000, polling: 250 });
  const gen = await page.evaluate(() => { const g = window.attnscope.store.get().generation.result; return { long: g.long, prompt: g.prompt_ids, out: g.output_ids, steps: g.steps.map((s) => s.top_k) }; });
  const P = gen.prompt.length, N = P + GEN - 1;
  assert.equal(gen.long, true, 'a long generation');
  assert.equal(P, 1446);
  assert.ok(64 * N * N > 2 ** 27 && 64 * (P + 2) ** 2 <= 2 ** 27, `${N} positions: past the bound, which the prompt is under`);
  const fed = [...gen.prompt, ...gen.out.slice(0, -1)];
  const want = attnscope(['attention', '--model', path.join(ROOT, WIDE), '--ids', fed.join(','), '--top-k', '5', '--heads', HEAD.join(':'), '--', 'fed']).results[0];
  assert.equal(want.tokens.length, N);
  // each step wrote the CLI's likeliest next token at its position, with its five likeliest
  for (let i = 0; i < GEN; i++) {
    const cli = want.next_tokens[P - 1 + i], got = gen.steps[i];
    assert.equal(gen.out[i], cli[0].id, `step ${i} wrote the likeliest`);
    assert.deepEqual(got.map((p) => p.id), cli.map((p) => p.id), `step ${i}'s five likeliest`);
    for (const [j, p] of cli.entries()) assert.ok(Math.abs(got[j].p - p.p) <= TOL, `step ${i}, token ${j}: ${got[j].p} vs ${p.p}`);
  }
  // the views' runs: long texts' over P, P + 1, …, N positions, each reusing all but its last
  const passes = await page.evaluate(() => window.passes);
  const last = passes.at(-1);
  assert.deepEqual({ T: last.T, long: last.long, step: last.step }, { T: N, long: true, step: GEN - 1 });
  assert.ok(passes.every((p, i) => i === 0 || p.reused === p.T - 1), `each pass after the first reused every position before its last: ${JSON.stringify(passes)}`);
  const d = worst(await headOf(page, ...HEAD), want.heads[0].attention, N);
  assert.ok(d <= TOL, `the last step's head ${HEAD.join(':')} differs from the CLI's by ${d}`);
  // an earlier step: a pass over its positions, the head the CLI's cut to them (causal)
  await page.evaluate(() => window.attnscope.store.update({ step: 2 }));
  await page.waitForFunction((n) => { const r = window.attnscope.store.get().run; return r.T === n && r.generated?.step === 2; }, P + 2, { timeout: 60000, polling: 100 });
  const d2 = worst(await headOf(page, ...HEAD), want.heads[0].attention.slice(0, P + 2).map((row) => row.slice(0, P + 2)), P + 2);
  assert.ok(d2 <= TOL, `step 2's head differs from the CLI's cut by ${d2}`);
  console.log(`# a long generation of ${GEN} tokens after ${P}: head ${HEAD.join(':')} vs the CLI's over the ids fed, max |Δ| ${d.toExponential(2)}; at step 2 ${d2.toExponential(2)}; passes ${passes.map((p) => `${p.T}/${p.reused}`).join(' ')}`);
  // a head knocked out writes again with it out, beside what every head writes (their runs keep
  // no heads for the page): the same tokens as the first generation's, every head's
  await page.evaluate(() => window.attnscope.store.update({ off: ['0:0'] }));
  const knocked = await page.waitForFunction(() => {
    const g = window.attnscope.store.get().generation;
    return g && !g.running && g.off.join() === '0:0' && (g.error ?? (g.baseline && { ids: g.result.output_ids, baseline: g.baseline.output_ids, long: g.result.long }));
  }, null, { timeout: 300000, polling: 250 }).then((h) => h.jsonValue());
  assert.equal(typeof knocked, 'object', `the knocked-out generation: ${knocked}`);
  assert.equal(knocked.long, true);
  assert.deepEqual(knocked.baseline, gen.out, 'every head writes what the first generation wrote');
  assert.equal(knocked.ids.length, GEN);
  assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);
  await page.close();
});
