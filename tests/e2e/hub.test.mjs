// Loading a checkpoint from the Hugging Face Hub by its model id (`hf=` in the link, the model
// controls' field, the element's `hf` attribute), against a local stand-in for the Hub whose CDN is
// a second origin (tests/e2e/hubserver.mjs): one plain GET per file through the redirect, progress,
// cancel and the cache as for a base URL, and each way a Hub model can fail named in words, with
// the id and the URL. Every page passes `hub=` for the local Hub: nothing here reaches the internet.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, launch, openPage, ready, ARTIFACTS } from './harness.mjs';
import { startHub, MODELS } from './hubserver.mjs';

let server, browser, hub;
before(async () => { server = await startServer(); browser = await launch({ webgpu: false }); hub = await startHub(); });
after(async () => { await browser?.close(); server?.stop(); hub?.stop(); });

const clean = (problems) => assert.deepEqual(problems.filter((x) => !/favicon|Failed to load resource/.test(x)), []);
/** No request of the page or its worker went to the real Hub (the harness records both). */
const offline = (requests) => assert.deepEqual(requests.filter((u) => /huggingface\.co|hf\.co\b/.test(new URL(u).hostname)), []);
const hubHash = (id, more = '') => `#hf=${id}&hub=${encodeURIComponent(hub.hub)}&e=cpu${more}`;
const seen = (from = 0) => hub.requests.slice(from).map((r) => `${r.origin} ${r.method} ${r.path}`);
const errorText = (page) => page.evaluate(() => { const e = document.getElementById('error'); return e.hidden ? '' : e.textContent; });

/** Types an id into the model controls' field and presses Enter; resolves once that load has ended. */
async function loadId(page, id) {
  const before = await page.evaluate(() => window.attnscope.store.get().modelVersion);
  await page.evaluate(() => window.attnscope.store.update({ modelError: null }));
  await page.fill('#model-hf', id);
  await page.press('#model-hf', 'Enter');
  await page.waitForFunction((v) => {
    const s = window.attnscope.store.get();
    return !s.loading && (s.modelError || s.modelVersion > v);
  }, before, { timeout: 60000 });
  return errorText(page);
}

test('a Hub model id in the link loads through the redirect to the CDN, with one plain GET per file, into the cache', async () => {
  const from = hub.requests.length;
  const { page, problems, requests } = await openPage(browser, server.url + hubHash('acme/tiny-bert', '&s=the%20cat%20sat'));
  assert.equal(await ready(page), null);
  assert.equal(await page.evaluate(() => window.attnscope.result.tokens.join(' ')), '[CLS] the cat sat [SEP]');
  assert.equal(await page.evaluate(() => window.attnscope.info.model_type), 'bert');
  assert.equal(await page.evaluate(() => window.attnscope.result.attention.length), 2);
  assert.match(await page.textContent('#model-name'), /^acme\/tiny-bert · 2 layers × \d+ heads/);
  // each file once, the weights through the 302 to the second origin, and nothing but GETs
  assert.deepEqual(seen(from).sort(), [
    'cdn GET /blobs/acme/tiny-bert/model.safetensors',
    'hub GET /acme/tiny-bert/resolve/main/config.json',
    'hub GET /acme/tiny-bert/resolve/main/model.safetensors',
    'hub GET /acme/tiny-bert/resolve/main/tokenizer.json',
  ]);
  // the page's own record sees the worker's requests (so `offline` below means something)
  assert.ok(requests.includes(`${hub.hub}/acme/tiny-bert/resolve/main/config.json`), requests.join('\n'));
  assert.ok(requests.includes(`${hub.cdn}/blobs/acme/tiny-bert/model.safetensors`), requests.join('\n'));
  offline(requests);
  // the field shows the id, and the link keeps it with its hub
  assert.equal(await page.inputValue('#model-hf'), 'acme/tiny-bert');
  const hash = await page.evaluate(() => location.hash);
  assert.match(hash, /(^#|&)hf=acme%2Ftiny-bert(&|$)/);
  assert.match(hash, new RegExp(`(^#|&)hub=${encodeURIComponent(hub.hub).replace(/\./g, '\\.')}(&|$)`), hash);
  // the three files are in Cache Storage under their Hub URLs: a reload asks the Hub for nothing
  const cached = await page.evaluate(async () => (await (await caches.open('attnscope-models-v1')).keys()).map((r) => r.url));
  for (const f of ['config.json', 'model.safetensors', 'tokenizer.json']) assert.ok(cached.includes(`${hub.hub}/acme/tiny-bert/resolve/main/${f}`), cached.join('\n'));
  const again = hub.requests.length;
  await page.reload();
  assert.equal(await ready(page), null);
  assert.equal(await page.evaluate(() => window.attnscope.info.model_type), 'bert');
  assert.deepEqual(seen(again), []);
  clean(problems);
  await page.close();
});

test('every family\'s fixture on the Hub loads by its id', async () => {
  const { page, problems, requests } = await openPage(browser, server.url + hubHash('acme/tiny-bert'));
  assert.equal(await ready(page), null);
  const families = { 'acme/tiny-gpt2': 'gpt2', 'acme/tiny-roberta': 'roberta', 'acme/tiny-distilbert': 'distilbert', 'acme/tiny-llama': 'llama' };
  const present = Object.keys(families).filter((id) => MODELS[id]);
  for (const id of present) {
    assert.equal(await loadId(page, id), '', id);
    await page.waitForFunction((t) => window.attnscope.result?.model_type === t, families[id], { timeout: 60000 });
    assert.match(await page.textContent('#model-name'), new RegExp(`^${id} · `));
  }
  if (present.length < Object.keys(families).length) console.log(`# no fixture yet for ${Object.keys(families).filter((id) => !MODELS[id]).join(', ')}`);
  assert.ok(hub.requests.every((r) => r.method === 'GET'));
  offline(requests);
  clean(problems);
  await page.close();
});

test('hf=…&file=NAME.gguf loads one GGUF file of a Hub repository through its CDN, kept in the link', async () => {
  const id = 'acme/tiny-llama-GGUF', file = 'tiny-llama-Q4_K.gguf';
  assert.ok(MODELS[id], 'the tiny Llama GGUF fixture exists (tools/make_fixtures.py --only llama)');
  const from = hub.requests.length;
  const { page, problems, requests } = await openPage(browser, server.url + hubHash(id, `&file=${file}&s=time%20flies%20like%20an%20arrow`));
  assert.equal(await ready(page), null);
  await page.waitForFunction(() => window.attnscope.result?.model_type === 'llama', null, { timeout: 60000 });
  assert.match(await page.textContent('#model-name'), new RegExp(`^${id}`));
  assert.ok(seen(from).includes(`hub GET /${id}/resolve/main/${file}`), seen(from).join('\n'));
  assert.ok(seen(from).includes(`cdn GET /blobs/${id}/${file}`), seen(from).join('\n'));
  assert.match(await page.evaluate(() => location.hash), new RegExp(`file=${file.replace('.', '\\.')}`));
  offline(requests);
  clean(problems);
  await page.close();
});

test('the field loads on Enter and on its button; each way a Hub model fails is named with its id and URL', async () => {
  const { page, problems, requests } = await openPage(browser, server.url + hubHash('acme/tiny-bert'));
  assert.equal(await ready(page), null);
  const url = (id, file) => `${hub.hub}/${id}/resolve/main/${file}`.replace(/[.?*+^$()[\]{}|\\/]/g, '\\$&');
  const cases = [
    ['acme/no-such-model', `^no model acme/no-such-model on the Hub \\(HTTP 404 for ${url('acme/no-such-model', 'config.json')}\\)`],
    ['acme/hidden-model', `^no model acme/hidden-model on the Hub \\(HTTP 401 for ${url('acme/hidden-model', 'config.json')}\\), or it is private`],
    ['acme/gated-model', `^acme/gated-model is gated on the Hub \\(HTTP 401 for ${url('acme/gated-model', 'config.json')}\\): it needs its licence accepted on the Hub and an access token, which this page cannot send`],
    ['acme/private-model', `^acme/private-model is gated or private on the Hub \\(HTTP 403 for ${url('acme/private-model', 'config.json')}\\): it needs its licence accepted`],
    ['acme/sharded-model', `^acme/sharded-model is sharded on the Hub \\(HTTP 404 for ${url('acme/sharded-model', 'model.safetensors')}\\): its weights are in shards listed by model\\.safetensors\\.index\\.json, which attnscope does not read; save the model as one model\\.safetensors`],
    ['acme/pytorch-only', `^acme/pytorch-only has no model\\.safetensors on the Hub \\(HTTP 404 for ${url('acme/pytorch-only', 'model.safetensors')}\\): perhaps only pytorch_model\\.bin, which attnscope does not read; convert it`],
    ['acme/html-weights', `^acme/html-weights on the Hub: the server answered with an HTML page, not model\\.safetensors: ${url('acme/html-weights', 'model.safetensors')}`],
    ['acme/html-body', `^acme/html-body on the Hub: the server answered with an HTML page, not model\\.safetensors: ${url('acme/html-body', 'model.safetensors')}`],
    ['acme/big-config', `^acme/big-config on the Hub: config\\.json: the server announces 1\\.5 MB, over the page's limit of 1\\.0 MB: ${url('acme/big-config', 'config.json')}`],
    ['acme/t5-model', '^Could not load acme/t5-model/config\\.json: invalid config: model_type "t5" is not supported \\(supported: bert, roberta, xlm-roberta, camembert, distilbert, gpt2, marian, llama, mistral, qwen2, qwen3, gemma3_text\\)'],
    ['acme/../etc', '^"acme/\\.\\./etc" is not a Hugging Face Hub model id: owner/name or name, of letters, digits, "-", "_" and "\\." \\(no "\\.\\."\\)'],
    ['a/b/c', '^"a/b/c" is not a Hugging Face Hub model id'],
    ['acme/<b>x</b>', '^"acme/<b>x</b>" is not a Hugging Face Hub model id'],
  ];
  for (const [id, says] of cases) {
    const from = hub.requests.length;
    const msg = await loadId(page, id);
    assert.match(msg, new RegExp(says), `${id}: ${msg}`);
    assert.doesNotMatch(msg, /header claims|Could not load (\S+): \1/, `${id}: ${msg}`); // no safetensors parse of HTML, no id said twice
    assert.match(msg, /\(still showing acme\/tiny-bert\)$/, id);
    assert.equal(await page.$$eval('#error *', (els) => els.length), 0, 'the message is text, not markup');
    // the model shown before stays, and runs
    assert.equal(await page.evaluate(() => window.attnscope.info.name), 'tiny-bert', id);
    // only GETs; the only extra file ever asked for is the small index, and never pytorch_model.bin
    const asked = seen(from);
    assert.ok(hub.requests.slice(from).every((r) => r.method === 'GET'), asked.join('\n'));
    assert.ok(asked.every((r) => /\/(config\.json|model\.safetensors|tokenizer\.json|model\.safetensors\.index\.json)$/.test(r)), asked.join('\n'));
    assert.equal(asked.some((r) => r.endsWith('model.safetensors.index.json')), ['acme/sharded-model', 'acme/pytorch-only'].includes(id), `${id}: ${asked.join(', ')}`);
    if (id.includes('..')) assert.deepEqual(asked, [], 'a bad id asks nothing');
    if (['acme/gated-model', 'acme/t5-model'].includes(id)) await screenshots(page, `hub-error-${id.split('/')[1]}`);
  }
  assert.match(await page.evaluate(() => location.hash), /(^#|&)hf=acme%2Ftiny-bert(&|$)/, 'a failed load leaves the link as it was');
  // the button loads as Enter does, and a good id clears the error
  await page.fill('#model-hf', 'https://huggingface.co/acme/tiny-gpt2/tree/main'); // a pasted address is read as its id
  await page.click('#load-hf');
  await page.waitForFunction(() => window.attnscope.info?.model_type === 'gpt2' && window.attnscope.result?.model_type === 'gpt2', null, { timeout: 60000 });
  assert.equal(await errorText(page), '');
  await page.waitForFunction(() => /(^#|&)hf=acme%2Ftiny-gpt2(&|$)/.test(location.hash)); // the link follows (syncHash waits for a quiet moment)
  // an empty field says what to type
  assert.match(await loadId(page, ''), /^Give a model id on the Hugging Face Hub/);
  offline(requests);
  clean(problems);
  await page.close();
});

test('the HTML and size checks hold for a base URL too, and loading from a URL takes hf= out of the link', async () => {
  const { page, problems, requests } = await openPage(browser, server.url + hubHash('acme/tiny-bert'));
  assert.equal(await ready(page), null);
  const fromUrl = async (base) => {
    const before = await page.evaluate(() => window.attnscope.store.get().modelVersion);
    await page.evaluate(() => window.attnscope.store.update({ modelError: null }));
    await page.fill('#model-url', base);
    await page.click('#load-url');
    await page.waitForFunction((v) => {
      const s = window.attnscope.store.get();
      return !s.loading && (s.modelError || s.modelVersion > v);
    }, before, { timeout: 60000 });
    return errorText(page);
  };
  for (const [id, says] of [
    ['acme/html-weights', 'model\\.safetensors: the server answered with an HTML page, not model\\.safetensors: URL \\(is the base URL a checkpoint folder\\?\\)'],
    ['acme/html-body', 'model\\.safetensors: the server answered with an HTML page, not model\\.safetensors: URL \\(is the base URL a checkpoint folder\\?\\)'],
    ['acme/big-config-chunked', 'config\\.json: over the page\'s limit of 1\\.0 MB; stopped: URL'],
  ]) {
    const base = `${hub.hub}/${id}/resolve/main/`;
    const file = says.startsWith('config') ? 'config.json' : 'model.safetensors';
    const msg = await fromUrl(base);
    assert.match(msg, new RegExp(`^Could not load ${id}: ` + says.replace('URL', (base + file).replace(/[.?*+^$()[\]{}|\\/]/g, '\\$&'))), `${id}: ${msg}`);
    assert.doesNotMatch(msg, /header claims/);
  }
  // a base URL that loads: the link says model=, not hf=
  const good = MODELS['acme/tiny-roberta'] ? 'acme/tiny-roberta' : 'acme/tiny-bert';
  await fromUrl(`${hub.hub}/${good}/resolve/main/`);
  await page.waitForFunction(() => /(^#|&)model=/.test(location.hash));
  const hash = await page.evaluate(() => location.hash);
  assert.doesNotMatch(hash, /(^#|&)(hf|hub)=/, hash);
  assert.equal(await page.inputValue('#model-hf'), '');
  offline(requests);
  clean(problems);
  await page.close();
});

test('a Hub download shows its progress and can be cancelled; the previous model stays', async () => {
  const { page, problems, requests } = await openPage(browser, server.url + hubHash('acme/tiny-bert'));
  assert.equal(await ready(page), null);
  await page.fill('#model-hf', 'acme/slow-model');
  await page.press('#model-hf', 'Enter');
  // the CDN sent half the weights and stalls: the bar shows them
  await page.waitForFunction(() => /^acme\/slow-model · model\.safetensors: [\d.]+ of [\d.]+ MB/.test(document.getElementById('progress-text').textContent), null, { timeout: 30000 });
  assert.ok(await page.isVisible('#progress-wrap'));
  await page.click('#cancel-load');
  await page.waitForFunction(() => /Loading was cancelled/.test(document.getElementById('error').textContent));
  assert.equal(await page.isVisible('#progress-wrap'), false);
  assert.equal(await page.evaluate(() => window.attnscope.info.name), 'tiny-bert');
  assert.match(await page.evaluate(() => location.hash), /(^#|&)hf=acme%2Ftiny-bert(&|$)/);
  offline(requests);
  clean(problems);
  await page.close();
});

test('the link: hub= only for a mirror, a bad hub named; the share dialog\'s element carries hf and hub', async () => {
  const { page, problems, requests } = await openPage(browser, server.url + hubHash('acme/tiny-bert'));
  assert.equal(await ready(page), null);
  const got = await page.evaluate(async () => {
    const { writeHash, parseHash } = await import('/web/hash.js');
    const { hubSource } = await import('/web/scope.js');
    const s = parseHash('#hf=acme/x&hub=https://huggingface.co/');
    const bad = (...a) => { try { hubSource(...a); return null; } catch (e) { return e.message; } };
    return {
      defaultHub: writeHash(s), mirror: writeHash(parseHash('#hf=acme/x&hub=https://mirror.example/hf')), noHf: writeHash(parseHash('#model=https://a.example/m/&hub=https://mirror.example')),
      base: hubSource('acme/x').base, bare: hubSource('gpt2').base, mirrorBase: hubSource('acme/x', 'https://mirror.example/hf/').base,
      jsHub: bad('acme/x', 'javascript:alert(1)'), long: bad('a'.repeat(300)),
    };
  });
  assert.match(got.defaultHub, /(^#|&)hf=acme%2Fx(&|$)/);
  assert.doesNotMatch(got.defaultHub, /hub=/, 'the Hub itself goes without saying');
  assert.match(got.mirror, /(^#|&)hub=https%3A%2F%2Fmirror\.example%2Fhf(&|$)/);
  assert.doesNotMatch(got.noHf, /hub=/);
  assert.equal(got.base, 'https://huggingface.co/acme/x/resolve/main/');
  assert.equal(got.bare, 'https://huggingface.co/gpt2/resolve/main/');
  assert.equal(got.mirrorBase, 'https://mirror.example/hf/acme/x/resolve/main/');
  assert.match(got.jsHub, /^hub "javascript:alert\(1\)" is not an http\(s\) URL/);
  assert.ok(got.long.length < 250, got.long);
  // the share dialog's element snippet names the Hub model
  await page.click('#share');
  const element = await page.inputValue('#share-element');
  assert.match(element, new RegExp(`<attn-scope [^>]*hf="acme/tiny-bert" hub="${hub.hub.replace(/[.]/g, '\\.')}"`), element);
  assert.doesNotMatch(element, / model="/);
  await page.keyboard.press('Escape');
  // a link with a hub that is no URL says so, and loads nothing
  const from = hub.requests.length;
  const other = await openPage(browser, `${server.url}#hf=acme/tiny-bert&hub=javascript:alert(1)&e=cpu`);
  assert.match(await ready(other.page), /^hub "javascript:alert\(1\)" is not an http\(s\) URL/);
  assert.deepEqual(seen(from), []);
  offline([...requests, ...other.requests]);
  clean(problems);
  await other.page.close();
  await page.close();
});

test('<attn-scope hf=… hub=…> loads a Hub model, and names a Hub failure in its box', async () => {
  const { page, problems, requests } = await openPage(browser, server.url + hubHash('acme/tiny-bert'));
  assert.equal(await ready(page), null);
  const from = hub.requests.length;
  await page.evaluate(async (hubUrl) => {
    await import('/attn-scope.js');
    for (const [id, hf] of [['hub-element', 'acme/tiny-bert'], ['hub-gated', 'acme/gated-model']]) {
      const el = document.createElement('attn-scope');
      el.setAttribute('sentence', 'the cat sat on the mat');
      el.setAttribute('hf', hf);
      el.setAttribute('hub', hubUrl);
      el.setAttribute('engine', 'cpu');
      el.id = id;
      el.style.cssText = 'display:block;width:600px;height:400px';
      document.body.prepend(el);
    }
  }, hub.hub);
  await page.waitForFunction(() => document.getElementById('hub-element').result?.tokens?.join(' ') === '[CLS] the cat sat on the mat [SEP]', null, { timeout: 60000 });
  assert.equal(await page.evaluate(() => document.getElementById('hub-element').result.attention.length), 2);
  await page.waitForFunction(() => !document.getElementById('hub-gated').shadowRoot.querySelector('.message').hidden, null, { timeout: 60000 });
  const msg = await page.evaluate(() => document.getElementById('hub-gated').shadowRoot.querySelector('.message').textContent);
  assert.match(msg, new RegExp(`^acme/gated-model is gated on the Hub \\(HTTP 401 for ${hub.hub.replace(/[./]/g, '\\$&')}/acme/gated-model/resolve/main/config\\.json\\)`), msg);
  // switching the element to another Hub model by its attribute
  if (MODELS['acme/tiny-gpt2']) {
    await page.evaluate(() => document.getElementById('hub-element').setAttribute('hf', 'acme/tiny-gpt2'));
    await page.waitForFunction(() => document.getElementById('hub-element').result?.model_type === 'gpt2', null, { timeout: 60000 });
  }
  // the page's model was in the cache already: the elements asked only for what they did not share
  assert.ok(hub.requests.slice(from).every((r) => r.method === 'GET'), seen(from).join('\n'));
  offline(requests);
  clean(problems);
  await page.close();
});

test('the model controls with the Hub field, and with an error, at phone, laptop and projector widths', async () => {
  for (const [width, scale] of [[390, 2], [1280, 1], [1920, 1]]) {
    const { page, problems } = await openPage(browser, server.url + hubHash('acme/tiny-bert'), { width, height: 900, scale });
    assert.equal(await ready(page), null);
    await page.locator('#models').scrollIntoViewIfNeeded();
    await page.locator('#models').screenshot({ path: path.join(ARTIFACTS, `hub-field-${width}.png`) });
    // the field and its button fit the width; nothing sticks out of the page
    const box = await page.evaluate(() => {
      const r = (id) => document.getElementById(id).getBoundingClientRect();
      return { field: r('model-hf'), button: r('load-hf'), page: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth };
    });
    assert.ok(box.field.right <= box.page && box.button.right <= box.page, JSON.stringify(box));
    assert.ok(box.field.width >= Math.min(250, width - 100), `the field is wide enough to read an id: ${JSON.stringify(box)}`);
    assert.ok(box.field.width <= 700, `an id needs no projector-wide field: ${JSON.stringify(box)}`);
    assert.ok(Math.abs(box.button.bottom - box.field.bottom) < 8 && box.button.left > box.field.right, `the button beside its field: ${JSON.stringify(box)}`);
    assert.equal(box.scroll, box.page, 'no sideways scrolling');
    await loadId(page, 'acme/sharded-model');
    await page.locator('#models').screenshot({ path: path.join(ARTIFACTS, `hub-error-long-${width}.png`) });
    const err = await page.evaluate(() => { const r = document.getElementById('error').getBoundingClientRect(); return { right: r.right, page: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth }; });
    assert.ok(err.right <= err.page && err.scroll === err.page, `the error and its URL wrap within the page: ${JSON.stringify(err)}`);
    clean(problems);
    await page.close();
  }
});

/** The model controls showing an error, at the three widths (the page's own viewport). */
async function screenshots(page, name) {
  const was = page.viewportSize();
  for (const width of [390, 1280, 1920]) {
    await page.setViewportSize({ width, height: 900 });
    await page.locator('#models').screenshot({ path: path.join(ARTIFACTS, `${name}-${width}.png`) });
  }
  await page.setViewportSize(was);
}
