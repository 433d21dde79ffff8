import { startServer, launch, openPage, ready } from './harness.mjs';
const GGUF = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';
const PARAGRAPH = 'The committee met on a wet Tuesday morning to decide where the new library would stand. '
  + 'Some wanted it near the river, where the old mill had been; others argued for the square, because '
  + 'children walk there after school and the buses stop at its corner. After two hours nobody had '
  + 'changed their mind, so the chair suggested a walk to both places before lunch. ';
const TEXT = `${PARAGRAPH.repeat(14)}${PARAGRAPH.split('. ')[0]}.`;
const server = await startServer();
const browser = await launch({ extraArgs: ['--js-flags=--prof --logfile=/tmp/v8prof/v8-%p.log --no-logfile-per-isolate'.split(' ').join(' ')] });
try {
  const url = `${server.url}?wasm=threads#model=${encodeURIComponent(GGUF)}&s=${encodeURIComponent('The committee met.')}&e=cpu`;
  const { page } = await openPage(browser, url, { width: 1280, height: 900 });
  await ready(page);
  const waitDone = (t) => page.waitForFunction((t) => {
    const s = window.attnscope.store.get();
    return window.attnscope.result?.text === t && s.run?.long && s.run.hasHead(0, Math.min(s.layer, s.run.L - 1), Math.min(s.head, s.run.H - 1)) && s.rendered?.startsWith(`${s.run.id}:`);
  }, t, { timeout: 900000, polling: 100 });
  for (const first of ['First', 'Second']) {
    const t0 = Date.now();
    const text = `${first}: ${TEXT}`;
    await page.fill('#sentence', text);
    await waitDone(text);
    console.log(`${first}: ${Date.now() - t0} ms`);
  }
} finally { await browser.close(); server.stop(); }
