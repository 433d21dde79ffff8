// A long prompt: SmolLM2-135M-Instruct (the page's built-in Q4_1 GGUF, fetched by setup) over a
// text of 1,025 tokens, on the CPU engine and on WebGPU. Every head's attention would
// be 283M probabilities (1.1 GB): the engine keeps each layer's queries and keys instead, the
// worker summarises every head from them a layer at a time (the grid's thumbnails, the table),
// and the page asks for the focused layer's heads, which equal the CLI's `--heads` (the CPU
// engine's attention over the same file, natively); the wasm memory after it stays under 512 MiB.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { startServer, launch, openPage, ready, ROOT } from './harness.mjs';

const GGUF = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf'; // index.html's built-in choice
const TOL = 1e-4;
const MIB = 1 << 20;

// a plain paragraph, again and again, and its first sentence: 1,025 of SmolLM2's tokens
const PARAGRAPH = 'The committee met on a wet Tuesday morning to decide where the new library would stand. '
  + 'Some wanted it near the river, where the old mill had been; others argued for the square, because '
  + 'children walk there after school and the buses stop at its corner. After two hours nobody had '
  + 'changed their mind, so the chair suggested a walk to both places before lunch. ';
const TEXT = `${PARAGRAPH.repeat(14)}${PARAGRAPH.split('. ')[0]}.`;

let server, browser, reference;
before(async () => {
  server = await startServer();
  browser = await launch();
  // the CLI over the same file: the focused heads and the last position's next tokens
  reference = JSON.parse(execFileSync('cargo', ['run', '--quiet', '--profile', 'test', '--bin', 'attnscope', '--', 'attention', '--model', path.join(ROOT, GGUF), '--heads', '5:3,29:8', '--top-k', '5', '--', TEXT], { cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'inherit'] })).results[0];
});
after(async () => {
  await browser?.close();
  server?.stop();
});

/** The page's head (layer, head) of item 0 once the page has it, rows as arrays. */
async function headOf(page, layer, head) {
  await page.evaluate(([l, h]) => window.attnscope.store.update({ layer: l, head: h }), [layer, head]);
  await page.waitForFunction(([l]) => {
    const s = window.attnscope.store.get();
    return s.run.hasLayer(0, l) && s.rendered.startsWith(`${s.run.id}:`) && !document.getElementById('long-note').hidden && /heads are here/.test(document.getElementById('long-note').textContent);
  }, [layer], { timeout: 300000, polling: 250 });
  return page.evaluate(([l, h]) => { const r = window.attnscope.store.get().run; return Array.from(r.head(0, l, h)); }, [layer, head]);
}

function worst(got, want, T) {
  let d = 0;
  for (let q = 0; q < T; q++) for (let k = 0; k < T; k++) d = Math.max(d, Math.abs(got[q * T + k] - want[q][k]));
  return d;
}

for (const engine of ['cpu', 'gpu']) {
  test(`SmolLM2 over 1,025 tokens on ${engine === 'cpu' ? 'the CPU engine' : 'WebGPU'}: the engine keeps queries and keys, the grid and table summarise every head, the focused layer's heads equal the CLI's --heads, and the wasm memory stays under 512 MiB`, async () => {
    // a short text first (the model loads and runs), then the long one typed in
    const url = `${server.url}${process.env.WASM ? `?wasm=${process.env.WASM}` : ''}#model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent('The committee met.')}&e=${engine}`;
    const { page, problems } = await openPage(browser, url, { width: 1280, height: 900 });
    assert.equal(await ready(page), null);
    await page.fill('#sentence', TEXT);
    await page.waitForFunction((t) => window.attnscope.result?.text === t, TEXT, { timeout: 900000, polling: 500 });
    const run = await page.evaluate(() => { const r = window.attnscope.store.get().run; return { long: r.long, T: r.T, L: r.L, H: r.H, backend: r.backend, thumb: r.thumb(0, 29, 8)?.n ?? 0, metrics: r.metricNames.length }; });
    assert.equal(run.long, true, 'a long run');
    assert.ok(run.T >= 1024 && run.T === reference.tokens.length, `${run.T} tokens (the CLI: ${reference.tokens.length})`);
    assert.equal(run.backend.startsWith('gpu'), engine === 'gpu', run.backend);
    assert.ok(run.thumb > 0 && run.thumb <= 64, `every head has its thumbnail (${run.thumb})`);
    for (const [i, [layer, head]] of [[5, 3], [29, 8]].entries()) {
      const got = await headOf(page, layer, head);
      const want = reference.heads[i];
      assert.deepEqual([want.layer, want.head], [layer, head]);
      const d = worst(got, want.attention, run.T);
      assert.ok(d <= TOL, `${engine}: head ${layer}:${head} differs from the CLI's by ${d}`);
      console.log(`# ${engine}: head ${layer}:${head} over ${run.T} tokens vs the CLI's --heads: max |Δ| ${d.toExponential(2)}`);
    }
    // the last position's likeliest next tokens, as the CLI's
    const next = await page.evaluate(() => window.attnscope.result.next_tokens.at(-1));
    const want = reference.next_tokens.at(-1);
    assert.deepEqual(next.map((p) => p.id), want.map((p) => p.id));
    for (const [i, p] of want.entries()) assert.ok(Math.abs(next[i].p - p.p) <= TOL, `next token ${i}: ${next[i].p} vs ${p.p}`);
    // the grid drew every head of this run (from the summaries)
    await page.waitForFunction(() => document.getElementById('model-view').dataset.drawn?.split('|')[0] === String(window.attnscope.store.get().run.id), null, { timeout: 60000 });
    assert.match(await page.evaluate(() => document.getElementById('long-note').textContent), /kept each layer's queries and keys/);
    const stats = await page.evaluate(() => window.attnscope.stats());
    console.log(`# ${engine}: wasm memory after the ${run.T}-token run ${(stats.wasmBytes / MIB).toFixed(1)} MiB`);
    assert.ok(stats.wasmBytes <= 512 * MIB, `wasm memory ${(stats.wasmBytes / MIB).toFixed(1)} MiB`);
    assert.deepEqual(problems.filter((x) => !/favicon/.test(x)), []);
    await page.close();
  });
}
