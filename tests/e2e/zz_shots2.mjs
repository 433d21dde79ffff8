import { startServer, launch, openPage, ready } from './harness.mjs';
const server = await startServer(); const browser = await launch({ webgpu: false });
const A = 'The tokenizer sat on the mat.', B = 'it was very comfortable.';
for (const [w, h] of [[390, 1400], [1280, 1000], [1920, 1200]]) {
  const { page } = await openPage(browser, `${server.url}#s=${encodeURIComponent(A)}&p=${encodeURIComponent(B)}&e=cpu&l=2&h=5&part=ab`, { width: w, height: h });
  await ready(page);
  await page.waitForFunction(() => (document.getElementById('model-view').dataset.drawn ?? '').endsWith('|ab'), null, { timeout: 90000 });
  await page.locator('#model-view').screenshot({ path: `/tmp/zz/page-part-${w}.png` });
  await page.close();
}
const { page } = await openPage(browser, null, { width: 390, height: 900 });
await page.goto(`${server.url}web/views.css`);
await page.evaluate(async (model) => {
  await import('/web/attn-scope.js');
  for (const view of ['rollout', 'heads']) {
    const el = document.createElement('attn-scope');
    el.id = view;
    for (const [k, v] of Object.entries({ sentence: 'The animal didn\'t cross the street because it was too tired.', model, view, engine: 'cpu' })) el.setAttribute(k, v);
    el.style.cssText = 'display:block;width:370px';
    document.body.prepend(el);
    for (let i = 0; i < 600 && !el.result; i++) await new Promise((r) => setTimeout(r, 100));
  }
}, `${server.url}assets/models/all-MiniLM-L6-v2/`);
await new Promise((r) => setTimeout(r, 1000));
await page.locator('#heads').screenshot({ path: '/tmp/zz/el-heads-390.png' });
await page.locator('#rollout').screenshot({ path: '/tmp/zz/el-rollout-390.png' });
await browser.close(); server.stop();
