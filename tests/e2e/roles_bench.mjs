// What the heads' roles (issue 52) add to a keystroke's pass on SmolLM2-135M-Instruct (the page's
// built-in model that writes) at 64 tokens, in headless Chromium on the one-thread wasm build: the
// engine's `run` with the options a keystroke asks for with the grid coloured by a role (web/scope.js
// runOptions: the head metrics, the sentence embedding, the next tokens), with `headRoles` and
// without, alternately. The text is 30 words twice and 4 more words
// of a third repeat (SmolLM2 makes one token of each): a keystroke changes its last word, so the
// pass reuses the tokens before it as the page's does, and the text still repeats (period 30).
// Also a whole pass (its first word changed: nothing to reuse). Prints the medians and the ratio.
//   make setup && make web && node tests/e2e/roles_bench.mjs
import { existsSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, ROOT } from './harness.mjs';

const GGUF = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';
if (!existsSync(path.join(ROOT, GGUF))) {
  console.log(`${GGUF}: missing; \`make setup\` fetches it (scripts/setup.sh)`);
  process.exit(0);
}
const ITERS = Number(process.env.ITERS ?? 15);

const server = await startServer();
const browser = await launch({ webgpu: false });
try {
  // an empty page on the app's origin, where the wasm build and the model are served
  const { page } = await openPage(browser, null);
  await page.route('**/roles-bench.html', (r) => r.fulfill({ contentType: 'text/html', body: '<!doctype html><title>roles bench</title>' }));
  await page.goto(`${server.url}roles-bench.html`);
  const out = await page.evaluate(async ({ url, iters }) => {
    const m = await import('/web/pkg/attnscope.js');
    await m.default();
    const { ROLE_WORDS } = await import('/web/store.js');
    const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
    const session = await m.loadGgufSession('SmolLM2', m.WeightsFile.fromBytes('SmolLM2.gguf', bytes), 'cpu');
    // 30 words twice (its first word `first` in both), 3 more and `last`: 64 tokens
    const text = (last, first = ROLE_WORDS[0]) => {
      const words = [first, ...ROLE_WORDS.filter((w) => w !== first).slice(1, 30)];
      return [...words, ...words, ...words.slice(0, 3), last].join(' ');
    };
    // a keystroke's (web/scope.js runOptions, "heads by" a role chosen, no panel open: SmolLM2's
    // states at 64 tokens are past what a run brings eagerly), with the roles and without
    const options = (roles) => ({ headMask: '', scale: 'sqrt_dk', headMetrics: true, headRoles: roles, rollout: false, sentenceEmbedding: true, embeddings: false, hiddenStates: false, topK: 5 });
    const time = async (t, roles) => {
      const t0 = performance.now();
      const r = await session.run([t], undefined, 'causal', 'cpu', options(roles));
      const ms = performance.now() - t0;
      if (r.info.shape[3] !== 64) throw new Error(`${r.info.shape[3]} tokens, not 64`);
      if (roles && r.info.repeats[0]?.period !== 30) throw new Error(`the text does not repeat with period 30: ${JSON.stringify(r.info.repeats)}`);
      return { ms, reused: r.info.reused };
    };
    const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1]; };
    const result = {};
    // a keystroke changes the last word; a whole pass the first word of both repeats
    for (const [what, vary] of [['keystroke', (i) => text(ROLE_WORDS[4 + (i % 20)])], ['whole pass', (i) => text(ROLE_WORDS[31], ROLE_WORDS[i % 30])]]) {
      const ms = { with: [], without: [] }, reused = [];
      await time(vary(99), true); // warm
      for (let i = 0; i < iters; i++) {
        for (const roles of i % 2 ? [true, false] : [false, true]) {
          const t = await time(vary(2 * i + (roles ? 1 : 0)), roles);
          ms[roles ? 'with' : 'without'].push(t.ms);
          reused.push(t.reused);
        }
      }
      result[what] = { with: median(ms.with), without: median(ms.without), reused: median(reused) };
    }
    return result;
  }, { url: `${server.url}${GGUF}`, iters: ITERS });
  console.log(`SmolLM2-135M-Instruct Q4_1, 64 tokens, CPU engine, one-thread wasm, ${ITERS} runs each, medians:`);
  console.log('| pass | without roles | with roles | roles add |');
  console.log('|---|---:|---:|---:|');
  for (const [what, r] of Object.entries(out)) {
    console.log(`| ${what} (reuses ${r.reused} tokens) | ${r.without.toFixed(1)} ms | ${r.with.toFixed(1)} ms | ${(100 * (r.with / r.without - 1)).toFixed(1)} % |`);
  }
} finally {
  await browser.close();
  server.stop();
}
