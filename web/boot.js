// Starts the engine's worker before the rest of the page has arrived: index.html runs this module
// first (it needs only engine.js and result.js), so the worker compiles the wasm core and starts
// its threads while the page's other modules load; web/app.js's `engine()` finds the same worker.
import { engine } from './engine.js';

engine();
