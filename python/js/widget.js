// The notebook widget (anywidget's module contract): one <attn-scope> showing what the kernel
// sent: `_given`, a docs/given.md safetensors file (bytes: a DataView here); before it, for a
// large input, `_preview`, the same in bfloat16 (half the bytes, drawn sooner); and `attributes`,
// the element's (view, layer, head, …). python/attnscope/notebook.py is the other side.

import '../../web/attn-scope.js';

/** A DataView (a Python bytes trait) as the bytes it views; null when empty. */
const bytesOf = (dv) => (dv?.byteLength ? new Uint8Array(dv.buffer, dv.byteOffset, dv.byteLength) : null);

function render({ model, el }) {
  const scope = document.createElement('attn-scope');
  const attributes = () => {
    const want = model.get('attributes') ?? {};
    for (const { name } of [...scope.attributes]) if (!(name in want)) scope.removeAttribute(name);
    for (const [name, value] of Object.entries(want)) scope.setAttribute(name, String(value));
  };
  // the float32 numbers once they are here, the preview until then
  let shown = null;
  const data = () => {
    const next = model.get('_given')?.byteLength ? model.get('_given') : model.get('_preview');
    if (!next?.byteLength || next === shown) return;
    shown = next;
    scope.data = bytesOf(next);
  };
  attributes();
  data();
  el.append(scope);
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
