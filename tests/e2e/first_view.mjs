// The first heatmap after opening the page, in headless Chromium on the default model, on two
// hosts: a plain static host (no COOP/COEP: one thread) and a cross-origin-isolated one (the
// threaded build), each cold (a fresh browser profile: nothing in the HTTP cache or Cache Storage)
// and warm (the same profile, opened again). Median and worst of N loads each, from navigation to
// the end of the first render pass, and where the time went: the page's navigation timing and
// the engine's milestones (performance marks in web/worker.js and web/app.js, on the page's clock).
// `ENGINE=auto` (default `auto`, as a first visitor has it) or `cpu`; `N` loads (default 5).
import { startServer, launch } from './harness.mjs';

const N = Number(process.env.N || 5);
const ENGINE = process.env.ENGINE || 'auto';
const median = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];

/** One load in `context`: ms to the first heatmap, and the milestones on the way. */
async function load(context, url) {
  const page = await context.newPage();
  try {
    await page.goto(url);
    await page.waitForFunction(() => window.attnscope?.renders > 0, null, { timeout: 120000 });
    return await page.evaluate(async () => {
      const nav = performance.getEntriesByType('navigation')[0];
      const at = { 'HTML in': nav.responseEnd, 'modules run (DOMContentLoaded)': nav.domContentLoadedEventEnd };
      const { marks, wasmBuild } = await window.attnscope.stats();
      for (const [name, epoch] of marks) at[name.replace('attnscope: ', '')] ??= epoch - performance.timeOrigin;
      for (const m of performance.getEntriesByType('mark')) at[m.name.replace('attnscope: ', '')] ??= m.startTime;
      at['first heatmap drawn'] = window.attnscope.lastRenderAt;
      return { first: window.attnscope.lastRenderAt, at, wasmBuild, engine: window.attnscope.result.backend };
    });
  } finally {
    await page.close();
  }
}

const browser = await launch();
try {
  for (const isolation of [false, true]) {
    const server = await startServer({ isolation });
    try {
      const url = `${server.url}#e=${ENGINE}`;
      const cold = [], warm = [];
      let sample = null;
      for (let i = 0; i < N; i++) {
        const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
        const c = await load(context, url);
        const w = await load(context, url);
        cold.push(c.first);
        warm.push(w.first);
        sample = { c, w };
        await context.close();
      }
      const host = isolation ? 'isolated host (COOP+COEP)' : 'plain static host';
      console.log(`first heatmap, ${host}, engine=${ENGINE}, wasm build ${sample.c.wasmBuild}, ran on ${sample.c.engine}, ${N} loads: cold median ${median(cold).toFixed(0)} ms (worst ${Math.max(...cold).toFixed(0)}), warm median ${median(warm).toFixed(0)} ms (worst ${Math.max(...warm).toFixed(0)})`);
      for (const [kind, run] of [['cold', sample.c], ['warm', sample.w]]) {
        const steps = Object.entries(run.at).sort((a, b) => a[1] - b[1]).map(([k, v]) => `${k} ${v.toFixed(0)}`);
        console.log(`  ${kind}, the last load's milestones (ms from navigation): ${steps.join(' · ')}`);
      }
    } finally {
      server.stop();
    }
  }
} finally {
  await browser.close();
}
