// What the heads' readings (issue 52) add to a keystroke's pass on SmolLM2-135M-Instruct (the
// page's built-in model that writes) at 64 tokens, in headless Chromium on the one-thread wasm
// build: the engine's `run` with the options a keystroke asks for (web/scope.js runOptions: the head
// metrics, the sentence embedding, the next tokens), with a reading and without, alternately: the
// heads' roles (`headRoles`, the grid coloured by a role) and what writes the next token
// (`logitAttribution`, its panel open, with the focused head's write read onto the vocabulary:
// `readOut`, as the panel asks after each run), and the information-flow routes (`flow`, every
// edge's importance, its panel open). The text is 30 words twice and 4 more words
// of a third repeat (SmolLM2 makes one token of each): a keystroke changes its last word, so the
// pass reuses the tokens before it as the page's does, and the text still repeats (period 30).
// Also a whole pass (its first word changed: nothing to reuse). Prints the medians and the ratio.
//   make setup && make web && node tests/e2e/roles_bench.mjs
import { startServer, launch, smollm2Page, fetched, SMOLLM2_GGUF } from './harness.mjs';

if (!fetched(SMOLLM2_GGUF)) process.exit(0);

const ITERS = Number(process.env.ITERS ?? 15);

const server = await startServer();
const browser = await launch({ webgpu: false });
try {
  const page = await smollm2Page(browser, server, 'roles bench');
  const out = await page.evaluate(async ({ iters }) => {
    const { session, words: ROLE_WORDS } = window.smollm2;
    // 30 words twice (its first word `first` in both), 3 more and `last`: 64 tokens
    const text = (last, first = ROLE_WORDS[0]) => {
      const words = [first, ...ROLE_WORDS.filter((w) => w !== first).slice(1, 30)];
      return [...words, ...words, ...words.slice(0, 3), last].join(' ');
    };
    // a keystroke's (web/scope.js runOptions, "heads by" a role chosen, no panel open: SmolLM2's
    // states at 64 tokens are past what a run brings eagerly), with the roles and without
    const READINGS = { roles: { headRoles: true }, writes: { logitAttribution: {} }, flow: { flow: true } };
    const options = (reading) => ({ headMask: '', scale: 'sqrt_dk', headMetrics: true, rollout: false, sentenceEmbedding: true, embeddings: false, hiddenStates: false, topK: 5, ...(READINGS[reading] ?? {}) });
    const time = async (t, reading) => {
      const t0 = performance.now();
      const r = await session.run([t], undefined, 'causal', 'cpu', options(reading));
      const t1 = performance.now();
      if (reading === 'writes') session.readOut(r.headWrites.subarray(0, r.headWrites.length / (30 * 9)), 6); // L0 H0's
      const ms = performance.now() - t0;
      if (reading === 'writes') readOuts.push(performance.now() - t1);
      if (r.info.shape[3] !== 64) throw new Error(`${r.info.shape[3]} tokens, not 64`);
      if (reading === 'roles' && r.info.repeats[0]?.period !== 30) throw new Error(`the text does not repeat with period 30: ${JSON.stringify(r.info.repeats)}`);
      if (reading === 'writes' && !r.logitAttribution?.[0]) throw new Error('no attribution');
      if (reading === 'flow' && !r.flow?.heads?.length) throw new Error('no flow');
      return { ms, reused: r.info.reused };
    };
    const readOuts = [];
    const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1]; };
    const result = {};
    // a keystroke changes the last word; a whole pass the first word of both repeats
    for (const reading of Object.keys(READINGS)) {
      for (const [what, vary] of [['keystroke', (i) => text(ROLE_WORDS[4 + (i % 20)])], ['whole pass', (i) => text(ROLE_WORDS[31], ROLE_WORDS[i % 30])]]) {
        const ms = { with: [], without: [] }, reused = { with: [], without: [] };
        await time(vary(99), reading); // warm
        for (let i = 0; i < iters; i++) {
          for (const on of i % 2 ? [true, false] : [false, true]) {
            const t = await time(vary(2 * i + (on ? 1 : 0)), on ? reading : '');
            ms[on ? 'with' : 'without'].push(t.ms);
            reused[on ? 'with' : 'without'].push(t.reused);
          }
        }
        result[`${reading}, ${what}`] = { with: median(ms.with), without: median(ms.without), reused: median(reused.without), reusedWith: median(reused.with) };
      }
    }
    result.readOut = median(readOuts);
    return result;
  }, { iters: ITERS });
  console.log(`SmolLM2-135M-Instruct Q4_1, 64 tokens, CPU engine, one-thread wasm, ${ITERS} runs each, medians:`);
  console.log('| reading, pass | without it | with it | it adds |');
  console.log('|---|---:|---:|---:|');
  const readOut = out.readOut;
  delete out.readOut;
  for (const [what, r] of Object.entries(out)) {
    console.log(`| ${what} (reuses ${r.reused} tokens; with it ${r.reusedWith}) | ${r.without.toFixed(1)} ms | ${r.with.toFixed(1)} ms | ${(100 * (r.with / r.without - 1)).toFixed(1)} % |`);
  }
  console.log(`(writes: the focused head's read-out onto the vocabulary, within "with it": ${readOut.toFixed(1)} ms)`);
} finally {
  await browser.close();
  server.stop();
}
