// A stand-in for the Hugging Face Hub on two local origins, for the tests (nothing reaches the
// internet): the Hub's origin answers `GET /<owner>/<name>/resolve/main/<file>`, redirecting
// model.safetensors (302) to a second origin, the CDN, as the Hub does; both refuse HEAD (405) and
// CORS preflights (403), as the Hub's CDN does, so the page must load with plain GETs alone.
import { createServer } from 'node:http';
import { readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './harness.mjs';

const fixture = (name) => path.join(ROOT, 'tests/fixtures/models', name);

/**
 * The models this Hub holds, by id: `{dir}` (its three files from a fixture folder) and what is
 * wrong with it (`missing`, `status`, `sharded`, `html`, `modelType`).
 */
export const MODELS = {
  'acme/tiny-gpt2': { dir: fixture('tiny-gpt2') },
  'acme/tiny-bert': { dir: fixture('tiny-bert') },
  'acme/gated-model': { dir: fixture('tiny-bert'), status: 401 },
  'acme/private-model': { dir: fixture('tiny-bert'), status: 403 },
  'acme/sharded-model': { dir: fixture('tiny-bert'), noWeights: true, sharded: true },
  'acme/pytorch-only': { dir: fixture('tiny-bert'), noWeights: true },
  'acme/html-weights': { dir: fixture('tiny-bert'), html: true },
  'acme/llama-model': { dir: fixture('tiny-bert'), modelType: 'llama' },
};

const HTML = '<!DOCTYPE html><html><head><title>404</title></head><body>Sorry, we can\'t find the page you are looking for.</body></html>';

function listen(handler) {
  return new Promise((resolve) => {
    const server = createServer(handler);
    server.listen(0, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${server.address().port}` }));
  });
}

/** Starts the Hub and its CDN: `{hub, cdn, requests: [{origin, method, path}], stop}`. */
export async function startHub() {
  const requests = [];
  const cors = { 'Access-Control-Allow-Origin': '*', 'Cross-Origin-Resource-Policy': 'cross-origin' };
  const refuse = (req, res, origin) => {
    requests.push({ origin, method: req.method, path: req.url });
    if (req.method === 'OPTIONS') { res.writeHead(403, cors); res.end(); return true; }
    if (req.method !== 'GET') { res.writeHead(405, cors); res.end(); return true; }
    return false;
  };
  const cdn = await listen((req, res) => {
    if (refuse(req, res, 'cdn')) return;
    const m = req.url.match(/^\/blobs\/([^/]+\/[^/]+)\/model\.safetensors$/);
    const model = m && MODELS[m[1]];
    if (!model) { res.writeHead(404, cors); res.end(); return; }
    const bytes = readFileSync(path.join(model.dir, 'model.safetensors'));
    res.writeHead(200, { ...cors, 'Content-Type': 'application/octet-stream', 'Content-Length': bytes.length });
    res.end(bytes);
  });
  const hub = await listen((req, res) => {
    if (refuse(req, res, 'hub')) return;
    const m = req.url.match(/^\/([^/]+\/[^/]+)\/resolve\/main\/([^/?]+)$/);
    const model = m && MODELS[m[1]];
    if (!model) { res.writeHead(404, { ...cors, 'Content-Type': 'text/plain' }); res.end('Repository not found'); return; }
    if (model.status) { res.writeHead(model.status, { ...cors, 'Content-Type': 'text/plain' }); res.end('Access to this model is restricted'); return; }
    const file = m[2];
    if (file === 'model.safetensors') {
      if (model.noWeights) { res.writeHead(404, cors); res.end('Entry not found'); return; }
      if (model.html) { res.writeHead(200, { ...cors, 'Content-Type': 'application/octet-stream' }); res.end(HTML); return; }
      res.writeHead(302, { ...cors, Location: `${cdn.url}/blobs/${m[1]}/model.safetensors` });
      res.end();
      return;
    }
    if (file === 'model.safetensors.index.json') {
      if (!model.sharded) { res.writeHead(404, cors); res.end('Entry not found'); return; }
      res.writeHead(200, { ...cors, 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ metadata: {}, weight_map: { 'embeddings.word_embeddings.weight': 'model-00001-of-00002.safetensors' } }));
      return;
    }
    const p = path.join(model.dir, file);
    if (!['config.json', 'tokenizer.json'].includes(file) || !existsSync(p)) { res.writeHead(404, cors); res.end('Entry not found'); return; }
    let body = readFileSync(p);
    if (file === 'config.json' && model.modelType) body = Buffer.from(JSON.stringify({ ...JSON.parse(body), model_type: model.modelType }));
    res.writeHead(200, { ...cors, 'Content-Type': 'application/json', 'Content-Length': body.length });
    res.end(body);
  });
  return {
    hub: hub.url, cdn: cdn.url, requests,
    stop: () => { hub.server.close(); cdn.server.close(); },
  };
}
