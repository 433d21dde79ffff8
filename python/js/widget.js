// The notebook widget (anywidget's module contract): one <attn-scope>, showing either
// * attention the kernel computed (head_view, model_view): `_given`, a docs/given.md safetensors
//   file (bytes: a DataView here); before it, for a large input, `_preview`, the layer the view
//   opens on alone (a fraction of the bytes, drawn sooner); or
// * attnscope's own engine on a checkpoint (run): `_checkpoint` names its files, which the kernel
//   sends when asked (custom messages: never saved in the notebook), as it sends the engine's
//   wasm, once a page;
// and `attributes`, the element's (sentence, view, layer, head, …). python/attnscope/notebook.py
// is the other side.

import '../../web/attn-scope.js';
import WORKER_SOURCE from 'attnscope:worker-source';

/** A DataView (a Python bytes trait) as the bytes it views; null when empty. */
const bytesOf = (dv) => (dv?.byteLength ? new Uint8Array(dv.buffer, dv.byteOffset, dv.byteLength) : null);

/** An ArrayBuffer of exactly a DataView's bytes (a copy where it views part of a larger one). */
const bufferOf = (dv) => (dv.byteOffset === 0 && dv.byteLength === dv.buffer.byteLength ? dv.buffer : dv.buffer.slice(dv.byteOffset, dv.byteOffset + dv.byteLength));

/** How long the kernel may take to answer (a GGUF file of some hundred MB included). */
const ASK_MS = 120000;

/** Asks the kernel (`request`: a custom message) and resolves with its answer of type `answer`:
 *  `{content, buffers}`. */
function ask(model, request, answer) {
  return new Promise((resolve, reject) => {
    const late = setTimeout(() => { model.off('msg:custom', on); reject(new Error('no answer from the kernel: run the cell again')); }, ASK_MS);
    const on = (msg, buffers) => {
      if (msg?.type === 'error' && msg.about === request.type) { clearTimeout(late); model.off('msg:custom', on); reject(new Error(msg.message)); }
      if (msg?.type !== answer) return;
      clearTimeout(late);
      model.off('msg:custom', on);
      resolve({ content: msg, buffers });
    };
    model.on('msg:custom', on);
    try { model.send(request); } catch (e) { clearTimeout(late); model.off('msg:custom', on); reject(e); } // no kernel (a saved page)
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
    const url = URL.createObjectURL(new Blob([WORKER_SOURCE], { type: 'text/javascript' }));
    customElements.get('attn-scope').useWorker(() => {
      const worker = new Worker(url, { type: 'module' });
      page.wasm.then((module) => worker.postMessage({ type: 'wasm-module', module }));
      return worker;
    });
  }
  return page.wasm;
}

function render({ model, el }) {
  const scope = document.createElement('attn-scope');
  const note = Object.assign(document.createElement('p'), { textContent: 'The other layers are on their way…' });
  note.style.cssText = 'margin:0.25em 0;font:12px system-ui,sans-serif;color:#666';
  const attributes = () => {
    const want = model.get('attributes') ?? {};
    for (const { name } of [...scope.attributes]) if (!(name in want) && name !== 'data-preview') scope.removeAttribute(name);
    for (const [name, value] of Object.entries(want)) scope.setAttribute(name, String(value));
  };
  attributes();
  model.on('change:attributes', attributes);
  const checkpoint = model.get('_checkpoint');
  if (checkpoint?.key) {
    // attnscope's engine: the element appears once the wasm and the checkpoint's files are here
    note.textContent = `Loading ${checkpoint.name} from the kernel…`;
    el.append(note);
    Promise.all([engineFor(model), ask(model, { type: 'files?' }, 'files')]).then(([, { content, buffers }]) => {
      const files = Object.fromEntries(content.names.map((n, i) => [n, bufferOf(buffers[i])]));
      scope.files = { key: checkpoint.key, name: checkpoint.name, files };
      note.replaceWith(scope);
    }).catch((e) => {
      note.textContent = `attnscope could not start its engine: ${e?.message ?? e}`;
    });
    return () => model.off('change:attributes', attributes);
  }
  // every layer once it is here, the first one until then (`data-preview` says which)
  let shown = null;
  const data = () => {
    const all = model.get('_given'), next = all?.byteLength ? all : model.get('_preview');
    if (!next?.byteLength || next === shown) return;
    shown = next;
    const preview = next !== all;
    scope.toggleAttribute('data-preview', preview);
    if (preview) scope.after(note);
    else note.remove();
    scope.data = bytesOf(next);
  };
  el.append(scope);
  data();
  model.on('change:_given', data);
  model.on('change:_preview', data);
  return () => {
    model.off('change:attributes', attributes);
    model.off('change:_given', data);
    model.off('change:_preview', data);
  };
}

export default { render };
