// The notebook widget's front end, for anywidget: web/attn-scope.js and everything it imports as
// one ES module (python/attnscope/static/widget.js, git-ignored; `make wheel` runs this).
//
// anywidget imports a widget's module from a blob: URL, so nothing can sit beside it:
// * the stylesheets are inlined (web/element-styles.js swapped for their text, in <style>);
// * `import.meta.url`, which the page's modules resolve their neighbours against, becomes the
//   document's URL: only the engine (the worker, the wasm, the default model) reads those, and
//   an element showing given attention never makes the engine (web/scope.js).

import * as esbuild from 'esbuild';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const WEB = here('../../web/');

const inlineStyles = {
  name: 'inline-styles',
  setup(build) {
    build.onResolve({ filter: /\/element-styles\.js$/ }, () => ({ path: 'element-styles', namespace: 'attnscope' }));
    build.onLoad({ filter: /.*/, namespace: 'attnscope' }, async () => {
      const css = await Promise.all(['views.css', 'attn-scope.css'].map((f) => readFile(WEB + f, 'utf8')));
      return { contents: `export const STYLE_MARKUP = ${JSON.stringify(`<style>${css.join('\n')}</style>`)};`, loader: 'js' };
    });
  },
};

const result = await esbuild.build({
  entryPoints: [here('widget.js')],
  outfile: here('../attnscope/static/widget.js'),
  bundle: true,
  format: 'esm',
  target: 'es2022',
  minify: true,
  legalComments: 'none',
  define: { 'import.meta.url': 'document.baseURI', 'define.amd': 'false' },
  plugins: [inlineStyles],
  metafile: true,
});
const out = Object.entries(result.metafile.outputs)[0];
console.log(`${out[0]}: ${(out[1].bytes / 1024).toFixed(0)} KiB`);
