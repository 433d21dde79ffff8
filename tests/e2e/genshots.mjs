// SmolLM2-135M-Instruct (the page's built-in model that writes) writing a chat answer, as a
// class would see it: the page (its top, on a phone its Generate section: the prompt, the written
// tokens, the step) and presenter mode, on a phone (390 × 844), a laptop (1280 × 800) and a projector (1920 × 1080). Writes
// test-artifacts/smollm2-generate-{390,1280,1920}{,-presenter}.png; FULL=1 adds each page whole
// (…-full.png). `node tests/e2e/genshots.mjs` after `make setup` (which fetches the model).
import { existsSync } from 'node:fs';
import path from 'node:path';
import { startServer, launch, openPage, ready, ARTIFACTS, ROOT } from './harness.mjs';

const GGUF = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf'; // index.html's built-in choice
if (!existsSync(path.join(ROOT, GGUF))) {
  console.log(`${GGUF}: missing; \`make setup\` fetches it (scripts/setup.sh, step 4b)`);
  process.exit(0);
}
const PROMPT = 'Explain attention in one sentence.';
const NEW = 16;
const SIZES = [[390, 844, 2], [1280, 800, 1], [1920, 1080, 1]];

const server = await startServer();
const browser = await launch({ webgpu: false });
try {
  for (const presenter of [false, true]) {
    for (const [width, height, scale] of SIZES) {
      const hash = `model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent(PROMPT)}&chat=1&gen=${NEW}&e=cpu${presenter ? '&present=1' : ''}`;
      const { page, problems } = await openPage(browser, `${server.url}#${hash}`, { width, height, scale });
      const err = await ready(page);
      if (err) throw new Error(`the page did not load SmolLM2: ${JSON.stringify(err)}`);
      await page.waitForFunction((n) => window.attnscope.result?.output_ids?.length === n && !window.attnscope.result.running, NEW, { timeout: 120000 });
      await page.waitForFunction(() => document.querySelector('#head-view canvas.heat')?.getAttribute('aria-label') && document.querySelector('#model-view[data-drawn]'), null, { timeout: 60000 });
      // a phone's first screen is the controls: its picture is the Generate section, scrolled to
      await page.evaluate((phone) => { document.activeElement?.blur(); if (phone) document.getElementById('generate').scrollIntoView({ block: 'start' }); else scrollTo(0, 0); }, width < 700 && !presenter);
      await page.waitForTimeout(500);
      const name = `smollm2-generate-${width}${presenter ? '-presenter' : ''}`;
      await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`) });
      if (process.env.FULL) await page.screenshot({ path: path.join(ARTIFACTS, `${name}-full.png`), fullPage: true });
      const info = await page.evaluate(() => {
        const r = (sel) => { const e = document.querySelector(sel); if (!e) return null; const b = e.getBoundingClientRect(); return `${Math.round(b.left)},${Math.round(b.top)} ${Math.round(b.width)}×${Math.round(b.height)}`; };
        return { text: window.attnscope.result.output_text, sideways: document.documentElement.scrollWidth - innerWidth, heat: r('#head-view canvas.heat'), tokens: r('#generate-view .gen-text'), step: r('#generate-view .gen-step') };
      });
      console.log(`${name}.png: ${JSON.stringify(info)}${problems.length ? ` problems: ${problems.join(' | ')}` : ''}`);
      await page.close();
    }
  }
} finally {
  await browser.close();
  server.stop();
}
