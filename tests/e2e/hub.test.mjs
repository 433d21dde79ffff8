// Loading a checkpoint from the Hugging Face Hub by its model id (`hf=` in the link, the model
// controls' field, the element's `hf` attribute), against a local stand-in for the Hub whose CDN is
// a second origin (tests/e2e/hubserver.mjs): one plain GET per file through the redirect, and each
// way a Hub model can fail named in words. Nothing here reaches the internet.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, launch, openPage, ready, ARTIFACTS } from './harness.mjs';
import { startHub } from './hubserver.mjs';

let server, browser, hub;
before(async () => { server = await startServer(); browser = await launch({ webgpu: false }); hub = await startHub(); });
after(async () => { await browser?.close(); server?.stop(); hub?.stop(); });

const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon|Failed to load resource/.test(x)), []);
const none = (requests) => assert.ok(!requests.some((u) => /huggingface\.co/.test(u)), 'a request went to huggingface.co');

test('a Hub model id loads through the redirect to the CDN, with plain GETs only, and the link restores it', async () => {
  hub.requests.length = 0;
  const { page, problems, requests } = await openPage(browser, `${server.url}#hf=acme/tiny-gpt2&hub=${encodeURIComponent(hub.hub)}&e=cpu&s=time%20flies`);
  assert.equal(await ready(page), null);
  await page.waitForFunction(() => window.attnscope.info?.name === 'tiny-gpt2' && window.attnscope.result);
  assert.match(await page.textContent('#model-name'), /^acme\/tiny-gpt2 · 2 layers × 3 heads/);
  assert.equal(await page.evaluate(() => window.attnscope.info.model_type), 'gpt2');
  assert.equal(await page.evaluate(() => window.attnscope.result.attention.length), 2);
  const seen = hub.requests.map((r) => `${r.origin} ${r.method} ${r.path}`);
  for (const f of ['config.json', 'tokenizer.json', 'model.safetensors']) assert.ok(seen.includes(`hub GET /acme/tiny-gpt2/resolve/main/${f}`), seen.join('\n'));
  assert.ok(seen.includes('cdn GET /blobs/acme/tiny-gpt2/model.safetensors'), seen.join('\n'));
  assert.ok(hub.requests.every((r) => r.method === 'GET'), `only GETs: ${seen.join(', ')}`);
  none(requests);
  // the field shows the id, and the link keeps it with its hub
  assert.equal(await page.inputValue('#model-hf'), 'acme/tiny-gpt2');
  await page.waitForFunction(() => /hf=acme%2Ftiny-gpt2/.test(location.hash) && /hub=/.test(location.hash));
  clean(problems);
  await page.close();
});

test('the field loads a Hub model on Enter, and each way a Hub model fails is named', async () => {
  const { page, problems, requests } = await openPage(browser, `${server.url}#hub=${encodeURIComponent(hub.hub)}&hf=acme/tiny-bert&e=cpu`);
  assert.equal(await ready(page), null);
  const tryId = async (id) => {
    await page.fill('#model-hf', id);
    await page.press('#model-hf', 'Enter');
    await page.waitForFunction(() => !window.attnscope.store.get().loading && (document.getElementById('error').textContent || document.getElementById('model-hf').value.endsWith(window.attnscope.info?.name)), null, { timeout: 60000 });
    return page.textContent('#error');
  };
  for (const [id, says] of [
    ['acme/no-such-model', /no model acme\/no-such-model on the Hub \(HTTP 404 for http:\/\/127\.0\.0\.1:\d+\/acme\/no-such-model\/resolve\/main\/config\.json\)/],
    ['acme/gated-model', /acme\/gated-model is gated or private on the Hub \(HTTP 401 for .*config\.json\)/],
    ['acme/private-model', /acme\/private-model is gated or private on the Hub \(HTTP 403/],
    ['acme/sharded-model', /acme\/sharded-model is sharded on the Hub .*which attnscope does not read/],
    ['acme/pytorch-only', /acme\/pytorch-only has no model\.safetensors on the Hub .*pytorch_model\.bin/],
    ['acme/html-weights', /model\.safetensors: http:\/\/127\.0\.0\.1:\d+\/acme\/html-weights\/resolve\/main\/model\.safetensors answered with an HTML page, not model\.safetensors/],
    ['acme/llama-model', /model_type "llama" is not supported \(supported: bert, roberta \(xlm-roberta, camembert\), distilbert, gpt2\)/],
    ['acme/../etc', /"acme\/\.\.\/etc" is not a Hub model id/],
  ]) {
    await page.evaluate(() => window.attnscope.store.update({ modelError: null }));
    const msg = await tryId(id);
    assert.match(msg, says, `${id}: ${msg}`);
    if (id === 'acme/gated-model') {
      // the model controls with the error, as a person sees them, at phone, laptop and projector widths
      for (const width of [390, 1280, 1920]) {
        await page.setViewportSize({ width, height: 900 });
        await page.locator('#models').screenshot({ path: path.join(ARTIFACTS, `hub-error-${width}.png`) });
      }
      await page.setViewportSize({ width: 1400, height: 1300 });
    }
    // the model shown before stays
    assert.equal(await page.evaluate(() => window.attnscope.info.name), 'tiny-bert', id);
  }
  // and a good one loads
  await page.evaluate(() => window.attnscope.store.update({ modelError: null }));
  await tryId('acme/tiny-gpt2');
  await page.waitForFunction(() => window.attnscope.info?.name === 'tiny-gpt2' && window.attnscope.result?.model_type === 'gpt2');
  none(requests);
  clean(problems);
  await page.close();
});

test('<attn-scope hf=… hub=…> loads a Hub model', async () => {
  const { page, problems, requests } = await openPage(browser, `${server.url}#e=cpu`);
  assert.equal(await ready(page), null);
  await page.evaluate(async (hubUrl) => {
    await import('/attn-scope.js');
    const el = document.createElement('attn-scope');
    el.setAttribute('sentence', 'the cat sat on the mat');
    el.setAttribute('hf', 'acme/tiny-bert');
    el.setAttribute('hub', hubUrl);
    el.setAttribute('engine', 'cpu');
    el.id = 'hub-element';
    el.style.cssText = 'display:block;width:600px;height:400px';
    document.body.prepend(el);
  }, hub.hub);
  await page.waitForFunction(() => document.getElementById('hub-element').result?.tokens?.join(' ') === '[CLS] the cat sat on the mat [SEP]', null, { timeout: 60000 });
  assert.equal(await page.evaluate(() => document.getElementById('hub-element').result.attention.length), 2);
  none(requests);
  clean(problems);
  await page.close();
});
