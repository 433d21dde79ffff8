// The notebook widget's front end, for anywidget: web/attn-scope.js and everything it imports as
// one ES module (python/attnscope/static/widget.js, git-ignored; `make wheel` runs this).
//
// anywidget imports a widget's module from a blob: URL, so nothing can sit beside it:
// * the stylesheets are inlined (web/element-styles.js swapped for their text, in <style>);
// * `import.meta.url`, which the page's modules resolve their neighbours against, becomes the
//   document's URL: only the engine (the worker, the wasm, the default model) reads those, and
//   an element showing given attention never makes the engine (web/scope.js);
// * the engine's worker is bundled too, as text (the widget makes a blob of it), its wasm given
//   by message: the wasm file goes beside the module, into the wheel, and the kernel sends it.

import * as esbuild from 'esbuild';
import { readFile, writeFile, copyFile, mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const WEB = here('../../web/');

const inlineStyles = {
  name: 'inline-styles',
  setup(build) {
    build.onResolve({ filter: /\/element-styles\.js$/ }, () => ({ path: 'element-styles', namespace: 'attnscope' }));
    build.onLoad({ filter: /^element-styles$/, namespace: 'attnscope' }, async () => {
      const css = await Promise.all(['views.css', 'attn-scope.css'].map((f) => readFile(WEB + f, 'utf8')));
      return { contents: `export const STYLE_MARKUP = ${JSON.stringify(`<style>${css.join('\n')}</style>`)};`, loader: 'js' };
    });
  },
};

// the engine's worker for attnscope.run(): web/worker.js with the wasm glue bundled in and its
// module given by message (wasm-given.js for web/wasm-build.js), as text the widget makes a blob of
const swapWasmBuild = {
  name: 'wasm-given',
  setup(build) {
    build.onResolve({ filter: /\/wasm-build\.js$/ }, () => ({ path: here('wasm-given.js') }));
  },
};
const worker = await esbuild.build({
  entryPoints: [WEB + 'worker.js'],
  bundle: true,
  format: 'esm',
  target: 'es2022',
  minify: true,
  legalComments: 'none',
  write: false,
  define: { 'import.meta.url': 'self.location.href' },
  plugins: [swapWasmBuild],
});
const workerSource = {
  name: 'worker-source',
  setup(build) {
    build.onResolve({ filter: /^attnscope:worker-source$/ }, () => ({ path: 'worker-source', namespace: 'attnscope' }));
    build.onLoad({ filter: /^worker-source$/, namespace: 'attnscope' }, () => ({ contents: `export default ${JSON.stringify(worker.outputFiles[0].text)};`, loader: 'js' }));
  },
};

// the one-thread SIMD128 build's module beside the widget's, in the wheel: the kernel sends it
// to the page once (python/attnscope/notebook.py), never into the saved notebook
await mkdir(here('../attnscope/static'), { recursive: true });
await copyFile(WEB + 'pkg/attnscope_bg.wasm', here('../attnscope/static/attnscope_bg.wasm'));

const result = await esbuild.build({
  entryPoints: [here('widget.js')],
  outfile: here('../attnscope/static/widget.js'),
  bundle: true,
  format: 'esm',
  target: 'es2022',
  minify: true,
  legalComments: 'none',
  define: { 'import.meta.url': 'document.baseURI', 'define.amd': 'false' },
  plugins: [inlineStyles, workerSource],
  metafile: true,
});
const out = Object.entries(result.metafile.outputs)[0];
console.log(`${out[0]}: ${(out[1].bytes / 1024).toFixed(0)} KiB (the worker in it: ${(worker.outputFiles[0].text.length / 1024).toFixed(0)} KiB)`);

// MathJax for the nbconvert template's exports (python/share/templates/attnscope), inline where a
// notebook writes math: its SVG output needs no font files, the full build no other component,
// so an export asks no CDN. Raw for Jinja, whole inside the template's <script>.
const mathjax = await readFile(here('node_modules/mathjax/es5/tex-svg-full.js'), 'utf8');
if (/endraw|<\/script/i.test(mathjax)) throw new Error('mathjax/es5/tex-svg-full.js: holds "endraw" or "</script": it cannot be inlined raw');
await writeFile(here('../share/templates/attnscope/mathjax.js'), `{% raw %}${mathjax}{% endraw %}`);
console.log(`../share/templates/attnscope/mathjax.js: ${(mathjax.length / 1024).toFixed(0)} KiB (MathJax ${JSON.parse(await readFile(here('node_modules/mathjax/package.json'), 'utf8')).version})`);
