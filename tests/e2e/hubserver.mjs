// A stand-in for the Hugging Face Hub on two local origins, for the tests (nothing reaches the
// internet): the Hub's origin answers `GET /<owner>/<name>/resolve/main/<file>`, redirecting
// model.safetensors (302) to a second origin, the CDN, as the Hub does; both refuse HEAD (405) and
// CORS preflights (403), as the Hub's CDN does, so the page must load with plain GETs alone.
// `node hubserver.mjs` runs it on its own (ports 8801 and 8802, or HUB_PORT and HUB_PORT + 1).
import { createServer } from 'node:http';
import { readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const fixture = (name) => path.join(ROOT, 'tests/fixtures/models', name);

/**
 * The models this Hub holds, by id: `{dir}` (its three files from a fixture folder) and what is
 * wrong with it: `status` (every file answers it, with `code` as X-Error-Code, as the Hub names
 * its reasons), `noWeights`, `sharded`, `html` ('type': served as text/html; 'body': an HTML body
 * under another type), `modelType`, `bigConfig` ('announced' in Content-Length, or 'chunked'),
 * `hang` (the CDN sends half the weights, then nothing), `gguf` (a GGUF repository: its .gguf files, through the CDN).
 */
export const MODELS = {
  'acme/tiny-bert': { dir: fixture('tiny-bert') },
  'acme/gated-model': { dir: fixture('tiny-bert'), status: 401, code: 'GatedRepo' },
  'acme/hidden-model': { dir: fixture('tiny-bert'), status: 401, code: 'RepoNotFound' }, // what the Hub answers for a missing model without a token
  'acme/private-model': { dir: fixture('tiny-bert'), status: 403 },
  'acme/sharded-model': { dir: fixture('tiny-bert'), noWeights: true, sharded: true },
  'acme/pytorch-only': { dir: fixture('tiny-bert'), noWeights: true },
  'acme/html-weights': { dir: fixture('tiny-bert'), html: 'type' },
  'acme/html-body': { dir: fixture('tiny-bert'), html: 'body' },
  'acme/t5-model': { dir: fixture('tiny-bert'), modelType: 't5' },
  'acme/big-config': { dir: fixture('tiny-bert'), bigConfig: 'announced' },
  'acme/big-config-chunked': { dir: fixture('tiny-bert'), bigConfig: 'chunked' },
  'acme/slow-model': { dir: fixture('tiny-bert'), hang: true },
};
// the other families' fixtures, where they exist (a GGUF repository holds .gguf files only)
if (existsSync(path.join(fixture('tiny-llama-gguf'), 'tiny-llama-Q4_K.gguf'))) MODELS['acme/tiny-llama-GGUF'] = { dir: fixture('tiny-llama-gguf'), gguf: true };
for (const name of ['tiny-gpt2', 'tiny-roberta', 'tiny-distilbert', 'tiny-llama']) {
  if (existsSync(path.join(fixture(name), 'model.safetensors'))) MODELS[`acme/${name}`] = { dir: fixture(name) };
}

const HTML = '<!DOCTYPE html><html><head><title>404</title></head><body>Sorry, we can\'t find the page you are looking for.</body></html>';

function listen(handler, port = 0) {
  return new Promise((resolve) => {
    const server = createServer(handler);
    server.listen(port, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${server.address().port}` }));
  });
}

/** Starts the Hub and its CDN: `{hub, cdn, requests: [{origin, method, path}], stop}`. */
export async function startHub({ port = 0 } = {}) {
  const requests = [];
  const hanging = new Set();
  // the Hub lets the page read its reason for an error, as huggingface.co does
  const cors = { 'Access-Control-Allow-Origin': '*', 'Access-Control-Expose-Headers': 'X-Error-Code', 'Cross-Origin-Resource-Policy': 'cross-origin' };
  const refuse = (req, res, origin) => {
    requests.push({ origin, method: req.method, path: req.url });
    if (req.method === 'OPTIONS') { res.writeHead(403, cors); res.end(); return true; }
    if (req.method !== 'GET') { res.writeHead(405, cors); res.end(); return true; }
    return false;
  };
  const cdn = await listen((req, res) => {
    if (refuse(req, res, 'cdn')) return;
    const m = req.url.match(/^\/blobs\/([^/]+\/[^/]+)\/(model\.safetensors|[^/]+\.gguf)$/);
    const model = m && MODELS[m[1]];
    if (!model || !existsSync(path.join(model.dir, m[2]))) { res.writeHead(404, cors); res.end(); return; }
    const bytes = readFileSync(path.join(model.dir, m[2]));
    res.writeHead(200, { ...cors, 'Content-Type': 'application/octet-stream', 'Content-Length': bytes.length });
    // half the weights, once the small files are in (so the weights' progress is the page's last), then nothing
    if (model.hang) { hanging.add(res); setTimeout(() => res.write(bytes.subarray(0, bytes.length >> 1)), 500); return; }
    res.end(bytes);
  }, port && port + 1);
  const hub = await listen((req, res) => {
    if (refuse(req, res, 'hub')) return;
    const m = req.url.match(/^\/([^/]+\/[^/]+)\/resolve\/main\/([^/?]+)$/);
    const model = m && MODELS[m[1]];
    if (!model) { res.writeHead(404, { ...cors, 'Content-Type': 'text/plain', 'X-Error-Code': 'RepoNotFound' }); res.end('Repository not found'); return; }
    if (model.status) {
      res.writeHead(model.status, { ...cors, 'Content-Type': 'text/plain', ...(model.code ? { 'X-Error-Code': model.code } : {}) });
      res.end('Access to this model is restricted');
      return;
    }
    const file = m[2];
    const notFound = () => { res.writeHead(404, { ...cors, 'X-Error-Code': 'EntryNotFound' }); res.end('Entry not found'); };
    if (file.endsWith('.gguf')) {
      if (!existsSync(path.join(model.dir, file))) return notFound();
      res.writeHead(302, { ...cors, Location: `${cdn.url}/blobs/${m[1]}/${file}` });
      res.end();
      return;
    }
    if (file === 'model.safetensors') {
      if (model.noWeights || model.gguf) return notFound();
      if (model.html) { res.writeHead(200, { ...cors, 'Content-Type': model.html === 'type' ? 'text/html; charset=utf-8' : 'application/octet-stream' }); res.end(HTML); return; }
      res.writeHead(302, { ...cors, Location: `${cdn.url}/blobs/${m[1]}/model.safetensors` });
      res.end();
      return;
    }
    if (file === 'model.safetensors.index.json') {
      if (!model.sharded) return notFound();
      res.writeHead(200, { ...cors, 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ metadata: {}, weight_map: { 'embeddings.word_embeddings.weight': 'model-00001-of-00002.safetensors' } }));
      return;
    }
    const p = path.join(model.dir, file);
    if (!['config.json', 'tokenizer.json'].includes(file) || !existsSync(p)) return notFound();
    let body = readFileSync(p);
    if (file === 'config.json' && model.modelType) body = Buffer.from(JSON.stringify({ ...JSON.parse(body), model_type: model.modelType }));
    // a config of 1.5 MB, over the page's limit of 1 MB for config.json
    if (file === 'config.json' && model.bigConfig) body = Buffer.from(JSON.stringify({ ...JSON.parse(body), notes: 'x'.repeat(3 << 19) }));
    if (model.bigConfig === 'chunked' && file === 'config.json') {
      res.writeHead(200, { ...cors, 'Content-Type': 'application/json' }); // no Content-Length: the page learns the size as it reads
      for (let at = 0; at < body.length; at += 1 << 16) res.write(body.subarray(at, at + (1 << 16)));
      res.end();
      return;
    }
    res.writeHead(200, { ...cors, 'Content-Type': 'application/json', 'Content-Length': body.length });
    res.end(body);
  }, port);
  return {
    hub: hub.url, cdn: cdn.url, requests,
    stop: () => {
      for (const r of hanging) r.socket?.destroy();
      hub.server.close();
      cdn.server.close();
    },
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const h = await startHub({ port: Number(process.env.HUB_PORT) || 8801 });
  console.log(`a local Hub at ${h.hub} (its CDN at ${h.cdn}); models: ${Object.keys(MODELS).join(', ')}`);
}
