// The notebook widget (anywidget's module contract): one <attn-scope> showing what the kernel
// sent: `_given`, a docs/given.md safetensors file (bytes: a DataView here); before it, for a
// large input, `_preview`, the layer the view opens on alone (a fraction of the bytes, drawn
// sooner); and `attributes`, the element's (view, layer, head, …). python/attnscope/notebook.py
// is the other side.

import '../../web/attn-scope.js';

/** A DataView (a Python bytes trait) as the bytes it views; null when empty. */
const bytesOf = (dv) => (dv?.byteLength ? new Uint8Array(dv.buffer, dv.byteOffset, dv.byteLength) : null);

function render({ model, el }) {
  const scope = document.createElement('attn-scope');
  const note = Object.assign(document.createElement('p'), { textContent: 'The other layers are on their way…' });
  note.style.cssText = 'margin:0.25em 0;font:12px system-ui,sans-serif;color:#666';
  const attributes = () => {
    const want = model.get('attributes') ?? {};
    for (const { name } of [...scope.attributes]) if (!(name in want) && name !== 'data-preview') scope.removeAttribute(name);
    for (const [name, value] of Object.entries(want)) scope.setAttribute(name, String(value));
  };
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
  attributes();
  data();
  model.on('change:attributes', attributes);
  model.on('change:_given', data);
  model.on('change:_preview', data);
  return () => {
    model.off('change:attributes', attributes);
    model.off('change:_given', data);
    model.off('change:_preview', data);
  };
}

export default { render };
