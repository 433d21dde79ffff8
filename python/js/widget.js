// The front end in the notebook: importing it defines <attn-scope> (head_view's and model_view's
// pages import it, python/attnscope/notebook.py `Page`), and its default export is run()'s
// widget (anywidget's module contract): one <attn-scope> running attnscope's own engine on a
// checkpoint. `_checkpoint` names its files, which the kernel sends when asked (custom messages:
// never saved in the notebook), as it sends the engine's wasm, once a page (a Hub id: the element
// fetches the files itself); `attributes` are the element's (sentence, view, layer, head, …).
// python/attnscope/notebook.py `Run` is the other side.

import '../../web/attn-scope.js';
import WORKER_SOURCE from 'attnscope:worker-source';

/** An ArrayBuffer of exactly a DataView's bytes (a copy where it views part of a larger one). */
const bufferOf = (dv) => (dv.byteOffset === 0 && dv.byteLength === dv.buffer.byteLength ? dv.buffer : dv.buffer.slice(dv.byteOffset, dv.byteOffset + dv.byteLength));

/** Asks the kernel (`request`: a custom message) and resolves with its answer of type `answer`
 *  to this request (the kernel echoes its id: one widget shown twice asks twice), `{content,
 *  buffers}`. The kernel answers when it is idle (after the cells queued before), so no timeout;
 *  where there is no kernel (a saved page) `send` throws. */
function ask(model, request, answer) {
  const id = `${Date.now()}-${Math.random().toString(36).slice(2)}`;
  return new Promise((resolve, reject) => {
    const on = (msg, buffers) => {
      if (msg?.id !== id || (msg.type !== answer && msg.type !== 'error')) return;
      model.off('msg:custom', on);
      if (msg.type === 'error') reject(new Error(msg.message));
      else resolve({ content: msg, buffers });
    };
    model.on('msg:custom', on);
    try {
      model.send({ ...request, id });
    } catch (e) {
      model.off('msg:custom', on);
      reject(e);
    }
  });
}

/** The page's one engine, once: its wasm compiled from the bytes a widget's kernel sends, its
 *  worker a blob of the bundled web/worker.js, handed the compiled module first. Kept on
 *  globalThis: each widget imports its own copy of this module (anywidget), the page has one
 *  <attn-scope> class and one engine. */
function engineFor(model) {
  const page = (globalThis.__attnscope ??= {});
  if (!page.wasm) {
    page.wasm = ask(model, { type: 'wasm?' }, 'wasm').then(({ buffers }) => WebAssembly.compile(bufferOf(buffers[0])));
    page.wasm.catch(() => { page.wasm = null; }); // another widget may ask again
    // the worker's source, once a page (asked again after a failed wasm, the same URL)
    const url = (page.workerUrl ??= URL.createObjectURL(new Blob([WORKER_SOURCE], { type: 'text/javascript' })));
    customElements.get('attn-scope').useWorker(() => {
      const worker = new Worker(url, { type: 'module' });
      page.wasm.then((module) => worker.postMessage({ type: 'wasm-module', module }), () => {}); // the element shows the load's error
      return worker;
    });
  }
  return page.wasm;
}

function render({ model, el }) {
  const scope = document.createElement('attn-scope');
  const attributes = () => {
    const want = model.get('attributes') ?? {};
    for (const { name } of [...scope.attributes]) if (!(name in want)) scope.removeAttribute(name);
    for (const [name, value] of Object.entries(want)) scope.setAttribute(name, String(value));
  };
  attributes();
  model.on('change:attributes', attributes);
  // the element appears once the wasm (and a checkpoint's files, where the kernel read them: a
  // Hub id's the element fetches) are here
  const checkpoint = model.get('_checkpoint') ?? {};
  const note = Object.assign(document.createElement('p'), { textContent: `Loading ${checkpoint.name ?? 'the engine'} from the kernel (it answers once it is idle)…` });
  note.style.cssText = 'margin:0.25em 0;font:12px system-ui,sans-serif;color:#595959';
  el.append(note);
  // once a page a checkpoint (one widget shown twice, or run again): its buffers go to the
  // engine's worker at the first load, which the later ones reuse (web/engine.js)
  const page = (globalThis.__attnscope ??= {});
  page.checkpoints ??= new Map();
  if (checkpoint.key && !page.checkpoints.has(checkpoint.key)) {
    const asked = ask(model, { type: 'files?' }, 'files');
    page.checkpoints.set(checkpoint.key, asked);
    asked.catch(() => page.checkpoints.delete(checkpoint.key)); // asked again next time
  }
  const files = checkpoint.key ? page.checkpoints.get(checkpoint.key) : null;
  Promise.all([engineFor(model), files]).then(([, sent]) => {
    if (sent) {
      const { content, buffers } = sent;
      scope.files = { key: checkpoint.key, name: checkpoint.name, files: Object.fromEntries(content.names.map((n, i) => [n, bufferOf(buffers[i])])) };
    }
    note.replaceWith(scope);
  }).catch((e) => {
    note.textContent = `attnscope could not start its engine: ${e?.message ?? e}`;
  });
  return () => model.off('change:attributes', attributes);
}

export default { render };
