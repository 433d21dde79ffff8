// Where a keystroke's time goes in the page's engine: SmolLM2-135M-Instruct Q4_1 on the one-thread
// wasm build in headless Chromium, the text and options of tests/e2e/roles_bench.mjs (64 tokens, a
// keystroke changing the last word, so the pass reuses the 63 before it), sampled by Chromium's
// profiler (CDP `Profiler`, every 100 µs) over 30 keystrokes. Prints the time a keystroke spends in
// each function, itself, the wasm functions by their Rust names (largest first).
//   READING=writes node tests/e2e/keystroke_profile.mjs   (none, roles, writes or flow)
// `writes` is what writes the next token with the panel's read-out of one head onto the
// vocabulary after each run, as the page asks for it.
import { startServer, launch, smollm2Page, fetched, SMOLLM2_GGUF } from './harness.mjs';

if (!fetched(SMOLLM2_GGUF)) process.exit(0);

const READING = process.env.READING ?? 'none', KEYSTROKES = 30, TOP = Number(process.env.TOP ?? 20);

const server = await startServer();
const browser = await launch({ webgpu: false });
try {
  const page = await smollm2Page(browser, server, 'keystroke profile');
  await page.evaluate(async ({ reading }) => {
    const { session, words: W } = window.smollm2;
    // roles_bench.mjs's text: 30 words twice, 3 more and the last, which each keystroke changes
    const text = (last) => { const words = W.slice(0, 30); return [...words, ...words, ...words.slice(0, 3), last].join(' '); };
    const READINGS = { none: {}, roles: { headRoles: true }, writes: { logitAttribution: {} }, flow: { flow: true } };
    const options = { headMask: '', scale: 'sqrt_dk', headMetrics: true, rollout: false, sentenceEmbedding: true, embeddings: false, hiddenStates: false, topK: 5, ...READINGS[reading] };
    window.keystroke = async (i) => {
      const r = await session.run([text(i < 0 ? 'start' : W[30 + (i % 4)])], undefined, 'causal', 'cpu', options);
      if (reading === 'writes') session.readOut(r.headWrites.subarray(0, r.headWrites.length / (30 * 9)), 6); // one head's
      if (i >= 0 && r.info.reused !== 63) throw new Error(`the pass reused ${r.info.reused} tokens, not 63`);
    };
    await window.keystroke(-1); // a whole pass, kept for the keystrokes to reuse
    for (let i = 0; i < 4; i++) await window.keystroke(i);
  }, { reading: READING });
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
  await cdp.send('Profiler.start');
  const ms = await page.evaluate(async (n) => {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await window.keystroke(i);
    return (performance.now() - t0) / n;
  }, KEYSTROKES);
  const { profile } = await cdp.send('Profiler.stop');
  const nodes = new Map(profile.nodes.map((n) => [n.id, n])), self = new Map();
  for (const id of profile.samples) {
    const f = nodes.get(id).callFrame, name = (f.functionName || f.url || '(anonymous)').replace(/::h[0-9a-f]{16}$/, '');
    self.set(name, (self.get(name) ?? 0) + 1);
  }
  console.log(`SmolLM2-135M-Instruct Q4_1, 64 tokens, one-thread wasm, reading "${READING}": ${ms.toFixed(1)} ms a keystroke (under the profiler), ${KEYSTROKES} keystrokes; time in each function itself:`);
  for (const [name, n] of [...self].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
    console.log(`${(ms * n / profile.samples.length).toFixed(1).padStart(7)} ms  ${name.slice(0, 110)}`);
  }
} finally {
  await browser.close();
  server.stop();
}
