// The README's pictures: the page on a laptop (the "it" example, hovering it → animal), reading
// the heads (the grid by a metric, the heads table), inside the encoder (Q, K, V and the heads),
// the blog example, and the dates model translating. `node docshots.mjs` after `make dist`;
// writes docs/screenshot.png, docs/heads.png, docs/inside.png, docs/blog.png and
// docs/translation.png.
import { spawn } from 'node:child_process';
import { cpSync, copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startServer, launch, openPage, ready, ROOT, freePort } from './harness.mjs';

const server = await startServer();
const browser = await launch({ webgpu: false });
try {
  // the dates model at step 7, writing the month's second digit: the cross-attention, every head
  const dates = await openPage(browser, `${server.url}#model=models/dates/&e=cpu&st=6&s=${encodeURIComponent('Sunday, September 9, 2018')}`, { width: 1280, height: 860 });
  await ready(dates.page);
  await dates.page.waitForFunction(() => window.attnscope.result?.output_text === '2018-09-09', null, { timeout: 60000 });
  await dates.page.locator('#translation').screenshot({ path: path.join(ROOT, 'docs/translation.png') });
  await dates.page.close();
  const { page } = await openPage(browser, server.url + '#e=cpu', { width: 1280, height: 860 });
  await ready(page);
  await page.waitForFunction(() => document.querySelector('#model-view[data-drawn]'));
  const box = await page.locator('#head-view .overlay').boundingBox();
  const g = await page.evaluate(() => ({ ...document.querySelector('#head-view .heat').dataset }));
  const tokens = await page.evaluate(() => window.attnscope.result.tokens);
  const q = tokens.indexOf('it'), k = tokens.indexOf('animal');
  await page.mouse.move(box.x + +g.x0 + (k + 0.5) * +g.cell, box.y + +g.y0 + (q + 0.5) * +g.cell);
  await page.waitForTimeout(300);
  await page.screenshot({ path: path.join(ROOT, 'docs/screenshot.png') });
  await page.close();
  // reading the heads: the grid by "attention to the previous token", the table sorted by it
  const heads = await openPage(browser, server.url + '#e=cpu&metric=to_prev&table=1&l=0&h=2', { width: 1280, height: 860 });
  await ready(heads.page);
  await heads.page.waitForFunction(() => document.querySelectorAll('#heads-view tbody tr').length > 0 && /previous/.test(document.getElementById('model-view').dataset.drawn ?? ''), null, { timeout: 60000 });
  await heads.page.click('#heads-view th button[data-sort=to_prev]');
  await heads.page.locator('#model-panel').screenshot({ path: path.join(ROOT, 'docs/heads.png') });
  await heads.page.close();
  // inside the encoder: layer 3's Q, K, V split into heads, head 1 in front
  const inside = await openPage(browser, server.url + '#e=cpu&inside=qkv&l=3&h=1', { width: 1280, height: 1000 });
  await ready(inside.page);
  await inside.page.waitForFunction(() => document.getElementById('inside-qkv').dataset.drawn, null, { timeout: 60000 });
  await inside.page.locator('#inside details[data-panel=qkv]').screenshot({ path: path.join(ROOT, 'docs/inside.png') });
  await inside.page.close();
  const dir = mkdtempSync(path.join(tmpdir(), 'attnscope-docs-'));
  cpSync(path.join(ROOT, 'dist'), path.join(dir, 'attnscope'), { recursive: true });
  copyFileSync(path.join(ROOT, 'examples/blog.html'), path.join(dir, 'blog.html'));
  const port = freePort();
  const proc = spawn('python3', ['-m', 'http.server', String(port), '--bind', '127.0.0.1', '--directory', dir], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 800));
  const blog = await openPage(browser, null, { width: 900, height: 1500 });
  await blog.page.goto(`http://127.0.0.1:${port}/blog.html`);
  for (const id of ['#coref', '#grid']) await blog.page.locator(id).scrollIntoViewIfNeeded();
  await blog.page.waitForFunction(() => document.querySelector('#coref').result && document.querySelector('#grid').result, null, { timeout: 120000 });
  await blog.page.evaluate(() => window.scrollTo(0, 0));
  await blog.page.waitForTimeout(300);
  await blog.page.screenshot({ path: path.join(ROOT, 'docs/blog.png') });
  proc.kill();
  rmSync(dir, { recursive: true, force: true });
} finally {
  await browser.close();
  server.stop();
}
