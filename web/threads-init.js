// What each thread of the threaded build's pool imports in place of the build's own module (see
// `PoolThread` in web/worker.js): wasm-bindgen-rayon 1.3's helper calls `default(module, memory)`,
// the positional form that wasm-bindgen deprecates and warns about on every thread; this
// `default` passes the two as the one object wasm-bindgen asks for.
import init from './pkg-threads/attnscope.js';

export * from './pkg-threads/attnscope.js';

export default (module, memory) => init({ module_or_path: module, memory });
