// web/wasm-build.js for the notebook's worker (a blob: nothing beside it): the one-thread SIMD128
// build's glue bundled in, its module compiled by the page (from the bytes the kernel sent, once
// a page) and posted to the worker first (widget.js `engineFor`).

import * as m from '../../web/pkg/attnscope.js';

const given = new Promise((resolve) => {
  self.addEventListener('message', function once(e) {
    if (e.data?.type !== 'wasm-module') return;
    self.removeEventListener('message', once);
    resolve(e.data.module);
  });
});

/** `{m, wasm, build}`, as web/wasm-build.js's, whatever build the worker would have picked. */
export async function loadBuild() {
  const module = await given;
  return { m, wasm: await m.default({ module_or_path: module }), build: 'simd128' };
}
