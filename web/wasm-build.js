// The wasm core's build, imported and instantiated: beside this module, three (Makefile, "web");
// worker.js picks the fastest the browser can run. A bundle that has no files beside it (the
// notebook widget: python/js/build.mjs) swaps this module for one whose module comes by message.

const PKG = { threads: './pkg-threads/attnscope.js', 'relaxed-simd': './pkg-relaxed/attnscope.js', simd128: './pkg/attnscope.js' };

/** `{m, wasm, build}`: build `build`'s exports, its instance's exports, and the build loaded. */
export async function loadBuild(build) {
  const m = await import(PKG[build]);
  return { m, wasm: await m.default(), build };
}
