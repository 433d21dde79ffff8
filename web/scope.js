// What the page and every <attn-scope> element share: loading a checkpoint, running the engine
// whenever the input changes (at once when it is idle, the latest input when it frees up), and
// rendering the views that are shown, in slices of a few milliseconds so none blocks the page.

import { engine, DEFAULT_MODEL } from './engine.js';
import { watchRun } from './progress.js';
import { MAX_BATCH, DEFAULT_HUB, isHubId } from './store.js';
import { measure, SLICE_MS } from './canvas.js';
import { withArchitecture, readsPair, normName, ffnWords } from './architecture.js';
import * as grid from './views/grid.js';
import * as head from './views/head.js';
import * as lines from './views/lines.js';
import * as steps from './views/steps.js';
import * as heads from './views/heads.js';
import * as rolloutView from './views/rollout.js';
import * as writesView from './views/writes.js';
import * as flowView from './views/flow.js';
import * as exerciseView from './views/exercise.js';
import { exerciseOptions } from './exercises.js';
import { compareOf, alone } from './compare.js';
import { INSIDE, DECODER_INSIDE } from './store.js';
import * as embeddingsView from './views/inside/embeddings.js';
import * as qkvView from './views/inside/qkv.js';
import * as contextView from './views/inside/context.js';
import * as scaleView from './views/inside/scale.js';
import * as residualView from './views/inside/residual.js';
import * as ffnView from './views/inside/ffn.js';
import * as stackView from './views/inside/stack.js';
import * as crossView from './views/inside/cross.js';
import * as ropeView from './views/inside/rope.js';
import * as cacheView from './views/inside/cache.js';
import * as windowView from './views/inside/window.js';
import * as qknormView from './views/inside/qknorm.js';
import * as decEmbeddingsView from './views/decoder/embeddings.js';
import * as decCrossView from './views/decoder/cross.js';
import * as decLayerView from './views/decoder/layer.js';

/** Inside a translation model's decoder: each panel's view and title, by its DECODER_INSIDE id. */
export const DECODER_PANELS = {
  'dec-embeddings': { view: decEmbeddingsView, title: 'The decoder\'s input: token × √d_model + sinusoidal position' },
  'dec-cross': { view: decCrossView, title: 'Cross-attention: Q from the decoder, K and V from the encoder' },
  'dec-layer': { view: decLayerView, title: 'The decoder layer: three sublayers, each with a residual and a LayerNorm (post-LN)' },
};

/**
 * Draws the decoder panels `targets` names ({id: element}) for a translation state: the focused
 * source, step, layer and head, from the engine's decoder trace once it is in (until then, or on
 * an error, a line saying so). Returns whether they were drawn with the engine's values.
 */
export function drawDecoderPanels(s, targets, { fontPx = 11 } = {}) {
  const tr = s.translation, dec = s.modelInfo.decoder;
  const r = tr.results[Math.min(s.item, tr.results.length - 1)], T = r.output_ids.length - 1;
  const layer = Math.min(s.layer, dec.layers - 1), head = Math.min(s.head, dec.heads - 1);
  const dt = s.decoderTrace?.key === decoderTraceKey(s) ? s.decoderTrace : null;
  for (const [id, target] of Object.entries(targets)) {
    if (!dt || dt.error) {
      const line = document.createElement('p');
      line.className = dt ? 'error' : 'muted';
      line.textContent = dt ? `Could not compute the decoder's inside: ${dt.error}` : 'The engine is computing the decoder\'s values…';
      target.replaceChildren(line);
      target._p = null;
      continue;
    }
    DECODER_PANELS[id].view.render(target, dt.data, { step: Math.min(s.step ?? T - 1, T - 1), head, probs: r.cross_attention[layer][head], written: r.output_tokens.slice(1), width: target.clientWidth || 600, fontPx });
  }
  return Boolean(dt && !dt.error);
}

/** The panels inside a layer (store.js INSIDE) in the order they are read: the rotary
 *  positions and the cache after the heads, as the page's index.html has them. */
export const LAYER_PANELS = ['embeddings', 'qkv', 'rope', 'qknorm', 'cache', 'window', 'context', 'scale', 'residual', 'ffn', 'stack', 'cross'];

/**
 * The panels inside a layer of an encoder's or a decoder-only model's stack, in LAYER_PANELS'
 * order, as `[id, title]` for `arch` (ModelInfo.architecture): those its model has (rotary
 * positions, a decoder's cache; the imitated cross-attention reads a sentence pair). The page's
 * are in its index.html; an element's `view="inside"` shows these.
 */
export function insidePanels(arch, { pair = false } = {}) {
  const parts = ['token', ...(arch.positions?.type === 'rotary' ? [] : ['position']), ...(arch.token_types ? ['token type'] : [])];
  const titles = {
    embeddings: `1 · Embeddings: ${parts.join(' + ')}${arch.norm_order === 'post' ? `, then ${normName(arch)}` : ''}`,
    qkv: '2 · Q, K, V and the heads: split, attend, concatenate, W_o',
    rope: arch.positions?.type === 'rotary' ? '2b · Rotary positions (RoPE): each query and key turned by where its token stands' : null,
    cache: arch.kind === 'decoder' ? '2c · Grouped-query attention and the KV cache: what writing token by token keeps' : null,
    qknorm: arch.layers?.some((l) => l.qk_norm) ? '2a · QK-norm: each query and key head through its own RMSNorm' : null,
    window: arch.layers?.some((l) => l.attention === 'sliding') ? '2d · Sliding windows: what each layer lets a token reach' : null,
    context: '3 · Scaled dot-product attention ·V: the focused head\'s context',
    scale: '4 · Why divide by √d_k?',
    residual: `5 · Residual + ${normName(arch)}`,
    ffn: `6 · Feed-forward: ${ffnWords(arch)}`,
    stack: '7 · The stack and its output',
    cross: pair && readsPair(arch) ? 'Cross-attention (encoder–decoder), imitated with the sentence pair' : null,
  };
  return LAYER_PANELS.filter((id) => titles[id]).map((id) => [id, titles[id]]);
}

/** The likeliest next tokens a translation's steps show. */
const TOP_K = 5;
const INSIDE_VIEWS = [embeddingsView, qkvView, contextView, scaleView, residualView, ffnView, stackView, crossView, ropeView, cacheView, windowView, qknormView]; // INSIDE's order
import { wordsOf } from './words.js';
import { withoutSink } from './sink.js';
import { byValue } from './values.js';
import { clampSel } from './select.js';
import { partOf, stepsPart } from './result.js';

export const VIEWS = {
  model: grid, head, lines, steps, heads, rollout: rolloutView, writes: writesView, flow: flowView, exercise: exerciseView, headB: head,
  ...Object.fromEntries(INSIDE.map((id, i) => [`inside:${id}`, INSIDE_VIEWS[i]])),
};

/**
 * A run that answers within this long (a keystroke's, usually) changes nothing on screen but its
 * result: greying the views and back for a few milliseconds would only flicker, and restyle the
 * page while the engine works. A longer run greys the stale views.
 */
export const BUSY_DELAY_MS = 150;

/** A setter for the busy veil: `apply(true)` once a run has been busy for BUSY_DELAY_MS, `apply(false)` at once. */
export function delayedBusy(apply) {
  let timer = 0, busy = false;
  return (now) => {
    if (now === busy) return;
    busy = now;
    clearTimeout(timer);
    if (busy) timer = setTimeout(() => apply(true), BUSY_DELAY_MS);
    else apply(false); // a class toggled off that was never on: no restyle
  };
}

/** The texts a state asks to run: the sentence, or up to MAX_BATCH non-blank lines. */
export function textsOf(s) {
  if (s.compare) return [s.sentences[0] ?? '', s.compareText].filter((x) => x.trim());
  const t = s.batch ? s.sentences.filter((x) => x.trim()).slice(0, MAX_BATCH) : s.sentences.slice(0, 1).filter((x) => x.trim());
  return t;
}

/** A translation line: `{source, target}` of `source => target` (or `→`), else `{source: line, target: null}`. */
export function splitLine(line) {
  const i = line.search(/=>|→/);
  return i < 0 ? { source: line, target: null } : { source: line.slice(0, i).trim(), target: line.slice(i).replace(/^(=>|→)/, '').trim() };
}

/**
 * What a translation model runs for a state: `{sources, targets}` (`targets` null: greedy
 * decoding). A batch line `source => target` (or `→`) teacher-forces its own target (the pair
 * box is for one source); lines of which only some name a target are an error.
 */
export function translationInputs(s) {
  const pair = s.batch ? '' : (s.pair ?? '').trim(); // a batch's lines name their own targets
  const lines = textsOf(s).map((t) => {
    const line = splitLine(t);
    return { source: line.source, target: line.target ?? pair };
  });
  const forced = lines.filter((x) => x.target).length;
  if (forced && forced < lines.length) throw new Error('Give every source a target to teacher-force ("source => target", or the target box for all), or none to decode greedily.');
  if (lines.some((x) => !x.source)) throw new Error('A line has a target but no source: write "source => target".');
  return { sources: lines.map((x) => x.source), targets: forced ? lines.map((x) => x.target) : null };
}

/**
 * A run this small also brings the head metrics, the focused layer's trace and every layer's
 * states, panels open or not, so opening a panel draws at once: at most EAGER_TOKENS tokens, and
 * at most EAGER_VALUES values of every layer's states (T·(L + 1)·D a text: MiniLM's 64 tokens
 * are 172k). A larger model's run brings what the open panels draw and no more, so a keystroke
 * does not pay for the closed ones (SmolLM2's 39 tokens: 696k values, and as many again of the
 * other kinds, copied and converted at every keystroke: a quarter of its time).
 */
const EAGER_TOKENS = 64;
const EAGER_VALUES = 1 << 18;

/** How many tokens the focused head's write raises and lowers most the writes panel lists. */
const READ_OUT_TOKENS = 6;

/** How many next tokens a run of a model with an LM head brings, at every position. */
export const NEXT_TOKENS = 5;

/** The pair a state runs: none for a model that reads one text (a decoder-only model has no
 *  sentence pairs). */
export function pairOf(s) {
  return readsPair(s.modelInfo?.architecture) ? s.pair : '';
}

/** What a state asks the engine to compute beyond attention (src/wasm.rs `RunOptions`). */
export function runOptions(s) {
  const open = (id) => s.inside.includes(id);
  // the last run's length, and the text's: a text of over 8 characters a token is surely past
  // EAGER_TOKENS (a long text's run need not hold every layer's states)
  const texts = textsOf(s), info = s.modelInfo;
  const states = (T) => texts.length * T * ((info?.layers ?? 0) + 1) * (info?.hidden ?? 0);
  const eager = (!s.run || (s.run.T <= EAGER_TOKENS && states(s.run.T) <= EAGER_VALUES)) && texts.every((t) => t.length <= 8 * EAGER_TOKENS);
  const traced = eager || TRACED.some(open);
  // a "predict, then check" exercise: what it reads (web/exercises.js)
  const ex = exerciseOptions(s.exercise, info);
  return {
    headMask: s.off.join(','), scale: s.noScale ? 'none' : 'sqrt_dk',
    // the rotation left out: only a model that has one (the link may say so for any)
    ...(s.noRope && s.modelInfo?.architecture?.positions?.type === 'rotary' ? { noRope: true } : {}),
    ...(s.noQkNorm && s.modelInfo?.architecture?.layers?.some((l) => l.qk_norm) ? { noQkNorm: true } : {}),
    // the fast numerics: 8-bit activations times the 4-bit matrices (the CPU engine's; exact elsewhere)
    ...(s.numerics === 'fast' ? { numerics: 'fast' } : {}),
    headMetrics: eager || Boolean(s.metric) || s.table || open('scale'), rollout: s.rollout, sentenceEmbedding: true,
    // the heads' roles, where a text repeats (a few floats a head; none where it does not)
    headRoles: eager || Boolean(s.metric) || s.table || Boolean(ex.headRoles),
    // the value switch: each key's ‖W_O^h v_j‖, which the views weigh the attention by
    ...(s.byValue || ex.valueNorms ? { valueNorms: true } : {}),
    // what writes the next token: each head's and feed-forward's part of its logit
    ...((s.writes && s.modelInfo?.logit_attribution) || ex.logitAttribution ? { logitAttribution: {} } : {}),
    // the information-flow routes: every edge's importance, the page follows the routes down
    ...(s.flow && s.modelInfo?.logit_attribution ? { flow: true } : {}),
    // inside the encoder: what the open panels draw, and nothing else
    layerTrace: traced ? s.layer : undefined, embeddings: eager || open('embeddings'), hiddenStates: eager || open('stack'),
    crossAttention: open('cross') && pairOf(s).trim() ? s.layer : undefined,
    // a model with an LM head (GPT-2): the likeliest next tokens at every position
    topK: s.modelInfo?.lm_head ? NEXT_TOKENS : undefined,
  };
}

/** The translation view's panes a state shows: the head view's choice (heatmap, lines or both)
 *  beside the grid and the batch's masks, or the one view the embed mode names (an element's
 *  `masks`: the batch's masks alone; `inside`: none, the decoder's panels below). */
export function translationPanes(s) {
  if (s.embed) return { model: ['grid'], head: ['head'], lines: ['lines'], steps: ['head', 'lines'], masks: ['masks'], inside: [] }[s.embed] ?? ['head'];
  return ['grid', ...(s.view !== 'lines' ? ['head'] : []), ...(s.view !== 'heatmap' ? ['lines'] : []), 'masks'];
}

/** Which decoder trace a translation state shows: its model, translation, layer and source. */
export function decoderTraceKey(s) {
  const tr = s.translation, dec = s.modelInfo?.decoder;
  return tr && dec ? `${s.modelKey}|${tr.id}|${Math.min(s.layer, dec.layers - 1)}|${Math.min(s.item, tr.results.length - 1)}` : '';
}

/** Whether a run already holds what `runOptions(s)` asks for (so showing it needs no new run). */
function runHas(r, s) {
  if (!r) return false;
  const o = runOptions(s), trace = r.traceOf(0), open = (id) => s.inside.includes(id);
  // what the open panels draw must be there (what a short input brings eagerly need not)
  // (a long text's run has no rollout: the view says so)
  return (!o.headMetrics || r.metricNames.length > 0) && (!o.headRoles || r.roleNames.length > 0) && (!o.rollout || r.rolloutOf(0) !== null || r.long)
    && (!TRACED.some(open) || (trace?.layer === s.layer && (!open('embeddings') || trace.names.includes('embeddings.word'))))
    && (!o.valueNorms || r.valueNormsOf(0, 0, 0) !== null || r.long) && (!o.logitAttribution || r.attributionOf(0) !== null || r.long) && (!o.flow || r.flowOf(0) !== null || r.long) && (!open('stack') || r.hiddenStatesOf(0) !== null) && (o.crossAttention === undefined || r.crossOf(0)?.layer === o.crossAttention);
}

/** The views that draw a generation's streamed run (its attention, no scores, metrics or trace;
 *  the cache panel reads the architecture and how many positions are fed; the window panel, the
 *  attention) until the pass over its focused step is in (`stepPass`), which every view draws. */
const GENERATED_VIEWS = ['model', 'head', 'headB', 'lines', 'inside:cache', 'inside:window'];

/** The most positions a generation's focused step is run again for (`stepPass`). */
const STEP_PASS_TOKENS = 1024;

/** The views a long text's run draws before its focused head comes (they read the summaries of
 *  every head). */
const LONG_FIRST = ['model', 'heads'];

/** The views attention computed elsewhere (web/given.js) draws: the others compute from a model
 *  (the heads' summaries and rollout come from the engine, from the attention given). */
const GIVEN_VIEWS = ['model', 'head', 'headB', 'lines', 'heads', 'rollout'];

/** Whether a state shows attention computed elsewhere (web/given.js), not a model's. */
export const isGiven = (s) => Boolean(s.run?.given || s.translation?.given);

/** In place of a view that needs a model, under given attention: a line saying so (`what`). */
export function needsModel(el, what = 'This view computes from the model itself (its queries, keys, values or heads knocked out)') {
  if (el._needsModel) return;
  const p = document.createElement('p');
  p.className = 'muted';
  p.textContent = `${what}: the attention shown was given, with no model to ask.`;
  el.replaceChildren(p);
  el._needsModel = true;
}

/** The panels that draw the focused layer's trace. */
const TRACED = ['embeddings', 'qkv', 'context', 'residual', 'ffn', 'rope', 'qknorm'];

/** The knocked-out heads (`"layer:head"`, sorted) with head `layer`, `head` knocked out, or back in if it was. */
export function toggleHead(off, layer, head) {
  const key = `${layer}:${head}`;
  const byPlace = (a, b) => a.split(':')[0] - b.split(':')[0] || a.split(':')[1] - b.split(':')[1];
  return off.includes(key) ? off.filter((k) => k !== key) : [...off, key].sort(byPlace);
}

/**
 * The knocked-out heads with every query head of layer `layer` that shares key/value head `group`
 * (`per` query heads a key/value head) knocked out, or all back in when they all were.
 */
export function toggleGroup(off, layer, group, per) {
  const keys = Array.from({ length: per }, (_, i) => `${layer}:${group * per + i}`);
  const all = keys.every((k) => off.includes(k));
  const rest = off.filter((k) => !keys.includes(k));
  const byPlace = (a, b) => a.split(':')[0] - b.split(':')[0] || a.split(':')[1] - b.split(':')[1];
  return all ? rest : [...rest, ...keys].sort(byPlace);
}

/** The run the attention views show: the word-piece run, weighed by its values with the value
 *  switch on (web/values.js), or its words (web/words.js) with "words" on; with the sink switch
 *  on, that run with the first key hidden and each row renormalised (web/sink.js). */
export function shownOf(s) {
  // a long text's run has its heads one at a time: words, which remake every head, are for
  // shorter texts (the page says so), and so is the value switch; the sink switch reads the
  // worker's summary of every head with the sink hidden, and hides it in the heads here
  const run = s.byValue ? byValue(s.run) : s.run;
  const r = run && s.words && !run.long ? wordsOf(run) : run;
  return r && s.noSink ? withoutSink(r) : r;
}

/** The store's zoom window where it is for its words setting (a window over words means
 *  nothing over the pieces), else null, whatever the run's length. */
const zoomOfWords = (s) => (s.win?.words === s.words ? s.win : null);

/** The store's zoom window where it is for `run`: its length and its words setting, else null
 *  (the whole head). */
export function zoomOf(s, run) {
  const win = zoomOfWords(s);
  return win?.T === run.T ? win : null;
}

/** Whether two runs hold the same tokens (a selection of query indices still means the same). */
const sameTokens = (a, b) => a.B === b.B && a.results.every((x, i) => x.tokens.join('\n') === b.results[i].tokens.join('\n'));

/**
 * A checkpoint on the Hugging Face Hub by its model id: its files from
 * `<hub>/<id>/resolve/main/`, one plain GET each (the Hub redirects the large ones to another
 * origin, whose CORS preflight refuses HEAD and custom headers). `hub`: a mirror's http(s) URL
 * (relative to the page), or '' for the Hub. An id or hub that is not one is an error, thrown.
 */
export function hubSource(id, hub = '', file = '') {
  const shown = id.length > 100 ? `${id.slice(0, 100)}…` : id;
  if (!isHubId(id)) throw new Error(`"${shown}" is not a Hugging Face Hub model id: owner/name or name, of letters, digits, "-", "_" and "." (no "..")`);
  let root;
  try { root = new URL(hub || DEFAULT_HUB, location.href); } catch { root = null; }
  if (!root || !/^https?:$/.test(root.protocol)) throw new Error(`hub "${hub}" is not an http(s) URL: give the address of a mirror of the Hugging Face Hub, or nothing for the Hub`);
  const base = `${root.href.replace(/\/+$/, '')}/${id}/resolve/main/`;
  if (file) {
    // a GGUF file of the repository: its URL is the source (worker.js downloadGguf)
    if (!/^([A-Za-z0-9._-]+\/)*[A-Za-z0-9._-]+\.gguf$/i.test(file) || file.split('/').includes('..')) throw new Error(`"${file.slice(0, 100)}" is not a GGUF file's path in a Hub repository (a name ending in .gguf)`);
    return { key: base + file, name: `${id}/${file}`, base: base + file, hub: id };
  }
  return { key: base, name: id, base, hub: id };
}

/** The model a state asks for: a Hub id (`hf`), a base URL (`model`), or the default. */
export function sourceOf(s) {
  return s.hf ? hubSource(s.hf, s.hub, s.file) : urlSource(s.model);
}

/** A model source for a state: `{key, name, base}` of its URL, or the default. */
export function urlSource(url) {
  const base = url ? new URL(url, location.href).href : DEFAULT_MODEL;
  // a folder's name; for a Hub-like `<owner>/<name>/resolve/<revision>/` address, the model's id
  const hubLike = url && new URL(base).pathname.match(/\/([^/]+\/[^/]+)\/resolve\/[^/]+\/?$/);
  const name = hubLike ? decodeURIComponent(hubLike[1]) : url ? base.replace(/\/+$/, '').split('/').pop() || base : 'all-MiniLM-L6-v2';
  return { key: base, name, base };
}

// A new task without setTimeout's clamping (4 ms a call once timers nest five deep, as a render
// pass's chain of views does): a message to ourselves.
const channel = new MessageChannel();
const waiting = [];
channel.port1.onmessage = () => waiting.shift()?.();
const nextTask = () => new Promise((r) => { waiting.push(r); channel.port2.postMessage(null); });

/**
 * Connects a store to the engine and to view containers.
 * `targets`: {model?, head?, lines?, steps?} elements; `layout(state)` → per-view options
 * (sizes, fonts). With `engineFollows` (the page, whose engine select and link show the store's
 * `engine`), a load that asked for WebGPU where it cannot start (the CPU engine runs instead,
 * worker.js) sets `engine` to 'cpu', in the update that brings the model. `filesAgain`: what to
 * do after the engine crashed on a checkpoint whose files were handed to it (the new engine does
 * not have them). `dropOld`: a model loaded frees the one before it in the engine. `modelFocus()`
 * (when given) says whether a model opens on the layer and head its config focuses, rather than
 * the link's.
 * `onRunProgress(p)`: a long run's progress as web/progress.js reads it, while the run works.
 * Returns {loadModel(source, {refresh, opening}), showGiven(given, {layer, head}) (attention
 * given, not computed), run() (the store's input through the engine), render(changed),
 * cancel() (the load under way), stopRun() (the run under way, between two layers)}.
 */
export function connect(store, { targets, layout, dropOld = true, modelFocus = null, engineFollows = false, filesAgain = 'choose the checkpoint\'s files again to go on', onRunProgress = null }) {
  // the engine (its worker, its wasm) once a model is asked for: given attention needs none
  let made = null;
  const eng = () => {
    if (made) return made;
    made = engine();
    listen(made);
    return made;
  };
  let loads = 0;
  // a link that names the layer or head keeps them for the model it opens; any later model
  // opens where its own config says (a trained model's most readable head), if anywhere
  // (`modelFocus()`, when given, decides instead: the element's layer and head attributes)
  const linkFocus = /(^|[#&])(l|h)=/.test(location.hash);
  const opensOnModelFocus = () => (modelFocus ? modelFocus() : loads > 0 || !linkFocus);
  let running = false, again = false;
  let stopRun = null; // asks the run under way to stop (web/progress.js), while there is one
  let positionsPending = false, scalingAsked = false;
  let translations = 0, decoderPending = '';

  async function run() {
    const s = store.get();
    if (!s.modelKey) return;
    if (running) { again = true; return; }
    const texts = textsOf(s);
    if (!texts.length) { store.update({ run: null, sel: [], busy: false, runError: { line: 'Type a sentence: there is nothing to attend to yet.' } }); return; }
    running = true;
    store.update({ busy: true });
    // given attention shown while this run is under way replaces the model: its result is dropped
    const era = givenShown;
    // an encoder–decoder model translates: the sources, and the targets to teacher-force when
    // there are (views/translation.js draws it)
    if (s.modelInfo?.decoder) {
      try {
        const { sources, targets } = translationInputs(s);
        // a batch brings itself as the engine ran it, padded: the masks view draws it
        // the value switch on: each attention's value sizes come with it
        const tr = await eng().translate(s.modelKey, { sources, targets, options: { topK: TOP_K, padded: sources.length > 1, ...(s.byValue ? { valueWeighted: true } : {}) } });
        if (era !== givenShown) return;
        tr.id = ++translations;
        // a new source starts at its last step; the same one (a new target, an engine) keeps it,
        // as does the first translation, whose step a link may give
        const prev = store.get().translation;
        const sourcesOf = (x) => x.results.map((r) => r.source).join('\n');
        const step = !prev || sourcesOf(prev) === sourcesOf(tr) ? store.get().step : null;
        store.update({ run: null, translation: tr, step, item: Math.min(store.get().item, tr.results.length - 1), runError: null, busy: again, ...(tr.status ? { engineStatus: tr.status } : {}) });
      } catch (err) {
        if (era === givenShown) store.update({ busy: again, runError: { line: String(err.message || err) } });
      } finally {
        running = false;
        if (again) { again = false; run(); }
      }
      return;
    }
    // how far it has gone (the layer its pass or its heads' summary is on), and a stop
    const watch = watchRun((p) => onRunProgress?.(p));
    stopRun = () => { again = false; watch.stop(); };
    try {
      // a long text's run brings the focused head with it (the views wait on no second message),
      // and the steps view's window of its scores (its zoom window, where it is for the new
      // run's length: the worker knows it)
      const focus = { item: s.item, layer: s.layer, head: s.head, steps: stepsShown(s) ? { win: zoomOfWords(s) } : null };
      const r = await eng().run(s.modelKey, { texts, pair: pairOf(s), mask: s.mask, options: runOptions(s), focus }, (m) => watch.message(m));
      if (era !== givenShown) return;
      const latest = store.get();
      // the selection survives a run over the same tokens (clamped to them), not new tokens
      const sel = latest.run && !sameTokens(latest.run, r) ? [] : clampSel(latest.sel, shownOf({ ...latest, run: r }).T);
      store.update({ run: r, translation: null, sel, item: Math.min(latest.item, r.B - 1), runError: null, busy: again, ...(r.status ? { engineStatus: r.status } : {}) });
    } catch (err) {
      const line = String(err.message || err);
      // a stop asked for: what was shown stays
      const stopped = /^stopped as asked/.test(line) && `The run ${line}${store.get().run ? ': the views still show the text before.' : '.'}`;
      if (era === givenShown) store.update({ busy: again, runError: { line: stopped || line } });
    } finally {
      watch.done();
      stopRun = null;
      running = false;
      if (again) { again = false; run(); }
    }
  }

  /**
   * A finished generation's focused step as a pass of its own: the ids the model was fed up to
   * that step (its prompt's, a chat template's included, and what it wrote), run with everything
   * the open views ask for (`runOptions`), so that the panels the streamed run cannot draw (the
   * layer's insides, the heads' colours and table, the rollout) follow the step. It takes the
   * streamed run's place, `generated` kept (`full`: every view draws it), while the state still
   * shows that step of that generation. The attention is the same: a cached decoding equals the
   * full causal pass (tests/e2e/llama.test.mjs).
   */
  let stepAsked = '';
  async function stepPass() {
    const s = store.get(), r = s.run, g = s.generation;
    if (!r?.generated || !g?.result || g.running || !s.modelKey || (r.generated.full && runHas(r, s))) return;
    // a long text's step: its attention views only (a pass over thousands of positions a step
    // would hold the engine for seconds at each move of the step control)
    if (r.T > STEP_PASS_TOKENS) return;
    const src = g.result, ids = [...src.prompt_ids, ...src.output_ids].slice(0, r.T);
    const options = { ...runOptions(s), ids };
    const asked = `${s.modelKey}|${JSON.stringify(options)}`;
    if (stepAsked === asked) return;
    stepAsked = asked;
    try {
      const full = await eng().run(s.modelKey, { texts: [src.prompt], pair: '', mask: 'causal', options });
      const now = store.get();
      if (now.generation?.result !== src || now.generation.running || now.run?.generated?.step !== r.generated.step || now.run.T !== full.T) return;
      full.generated = { ...r.generated, full: true };
      store.update({ run: full });
    } catch (err) {
      store.update({ runError: { line: `the pass over the focused step: ${String(err.message || err)}` } });
    } finally {
      if (stepAsked === asked) stepAsked = '';
    }
  }

  /**
   * Loads `source` ({key, name, base} or {key, name, files}) with the state's engine.
   * `opening(info, state)`: what the model opens on (a patch of the intent, applied with the
   * model in one update, so no run reads the old model's input with the new model).
   */
  async function loadModel(source, { refresh = false, opening = null } = {}) {
    const s = store.get();
    const era = givenShown; // given attention shown since this load began: its model is not wanted
    store.update({ loading: { key: source.key, name: source.name, loaded: 0, total: 0, file: '' }, modelError: null });
    try {
      const asked = s.engine;
      const r = await eng().load(source, asked, (p) => { if (era === givenShown) store.update({ loading: { key: source.key, name: source.name, file: p.file, loaded: p.loaded, total: p.total } }); }, { refresh, exclusive: dropOld });
      if (era !== givenShown) return false;
      const old = store.get().modelKey;
      if (dropOld && old && old !== source.key) eng().drop(old);
      const info = withArchitecture(r.info);
      const latest = store.get();
      // a model's own mask (GPT-2's causal one) is where its view starts: a model trained with
      // another mask than the one before it switches the mask, and any other is an ablation
      const own = info.own_mask ?? 'padding', before = latest.modelInfo?.own_mask ?? 'padding';
      const mask = own !== before || (!latest.modelInfo && latest.mask === 'padding') ? own : latest.mask;
      store.update({
        loading: null, modelInfo: info, modelKey: source.key, translation: null, modelSource: { key: source.key, name: source.name, base: source.base, hub: source.hub }, engineStatus: r.status, mask,
        ...(info.decoder?.focus && opensOnModelFocus()
          ? { layer: info.decoder.focus.layer, head: info.decoder.focus.head ?? 0 }
          : { layer: Math.min(latest.layer, Math.max(info.layers, info.decoder?.layers ?? 0) - 1), head: Math.min(latest.head, Math.max(info.heads, info.decoder?.heads ?? 0) - 1) }),
        ...opening?.(info, latest),
        ...(engineFollows && asked === 'gpu' && r.engine === 'cpu' && latest.engine === asked ? { engine: 'cpu' } : {}),
        modelVersion: ++loads,
      });
      return true;
    } catch (err) {
      if (era !== givenShown) return false;
      const msg = String(err.message || err);
      // the worker's errors about a Hub model already name it (worker.js hubError), and the
      // engine's may name the file within it ("<name>/config.json: …"): the name once, not twice
      const named = source.hub && (msg.startsWith(`${source.hub} `) || msg.startsWith(`no model ${source.hub} `));
      const line = msg === 'cancelled' ? 'Loading was cancelled.' : named ? msg
        : msg.startsWith(`${source.name}/`) ? `Could not load ${msg}` : `Could not load ${source.name}: ${msg}`;
      store.update({ loading: null, modelError: { line } });
      return false;
    }
  }

  /**
   * Shows attention computed elsewhere (web/given.js `fromGiven`: `{modelInfo, run, translation}`) in place of
   * a model's, focused on `layer` and `head`: a model loading is cancelled and its result, when
   * it comes, dropped; no model is asked for a run (`modelKey` is empty).
   */
  let givenShown = 0;
  function showGiven({ modelInfo, run, translation }, { layer, head }) {
    givenShown++;
    const loading = store.get().loading;
    if (loading?.key) made?.cancel(loading.key);
    // an encoder–decoder's: its decoder's layers and heads (the encoder's are clamped where drawn)
    const [L, H] = run ? [run.L, run.H] : [modelInfo.decoder.layers, modelInfo.decoder.heads];
    store.update({
      loading: null, modelError: null, runError: null, busy: false, modelKey: '', modelSource: null, modelInfo, translation,
      run, layer: Math.min(layer, L - 1), head: Math.min(head, H - 1), modelVersion: ++loads,
    });
  }

  // ---------- rendering: the views that are shown, in tasks of at most SLICE_MS ----------
  let renderToken = 0;
  async function render(changed) {
    const s = store.get();
    const token = ++renderToken;
    const r = s.run;
    for (const el of Object.values(targets)) el?.classList.toggle('empty', !r && !s.translation);
    if (!r) return;
    const opts = layout(s);
    // the attention views show words with "words" on; the steps keep the pieces (scores are per piece)
    const shown = shownOf(s), samePieces = (s.words ? wordsOf(r) : r).id === r.id;
    const base = {
      item: Math.min(s.item, r.B - 1), layer: Math.min(s.layer, r.L - 1), head: Math.min(s.head, r.H - 1), scale: s.scale,
      win: zoomOf(s, shown),
      metric: s.metric, off: new Set(s.off), compare: s.compare && !r.long ? compareOf(shown) : null,
      sel: clampSel(s.sel, shown.T),
    };
    base.part = partOf(shown, base.item, s.part); // a sentence pair's part: the head and line views'
    const onlyHover = changed && [...changed].every((k) => k === 'hover');
    const onlySel = changed && [...changed].every((k) => k === 'hover' || k === 'sel'); // dims rows, draws the strip and lines
    const order = onlyHover ? ['lines'] : onlySel ? ['head', 'headB', 'lines', 'inside:ffn'] : ['head', 'headB', 'lines', 'model', 'steps', 'heads', 'rollout', 'writes', 'flow', 'exercise', ...INSIDE.map((id) => `inside:${id}`)];
    // compare mode, two lengths: the second sentence's head view beside the first's
    const sideBySide = base.compare && !base.compare.same;
    let slice = performance.now();
    // a long text's run before its focused head is here: the grid and the table (summaries of
    // every head) now, the views of the head once it comes
    const waiting = !r.hasHead(base.item, base.layer, base.head);
    for (const name of order) {
      const el = targets[name];
      if (!el || !opts[name] || (name === 'headB' ? !sideBySide : el.hidden)) continue;
      if (waiting && !LONG_FIRST.includes(name)) continue;
      // a generation keeps its attention alone: the panels of a pass's insides keep the sentence's
      if (r.generated && !r.generated.full && !GENERATED_VIEWS.includes(name)) continue;
      if (r.given && !GIVEN_VIEWS.includes(name)) { needsModel(el); continue; }
      el._needsModel = false;
      // views in one task while they are quick (one frame paints them all); past SLICE_MS the
      // rest wait for a task of their own, so a long input's views never hold up the page
      if (!onlyHover && performance.now() - slice > SLICE_MS) {
        await nextTask();
        if (token !== renderToken) return;
        slice = performance.now();
      }
      const t0 = performance.now();
      // QKᵀ, the mask and the layer's insides are per piece: those views keep the piece run
      const pieces = name === 'steps' || name === 'writes' || name === 'flow' || name === 'exercise' || name.startsWith('inside:');
      // side by side, each sentence's views are its own length: no padding rows or columns (the
      // first head view, the second's, and the focused sentence's grid and steps)
      const own = sideBySide ? { head: 0, headB: 1, model: base.item, steps: base.item }[name] : undefined;
      VIEWS[name].render(el, own !== undefined ? alone(pieces ? r : shown, own) : pieces ? r : shown, {
        ...base, ...opts[name], hover: s.hover, headDim: s.modelInfo?.head_dim, ...(own !== undefined ? { item: own, win: null, cellsLike: Math.max(...base.compare.lengths) } : {}),
        modelInfo: s.modelInfo, noScale: s.noScale, readOut: s.readOut, scaling: s.scaling, pair: pairOf(s),
        exercise: s.exercise, guess: s.guess, checked: s.checked, onUpdate: (patch) => store.update(patch),
        positions: s.positions?.key === s.modelKey ? s.positions : null,
        onNoScale: (noScale) => store.update({ noScale }),
        noRope: s.noRope, onNoRope: (noRope) => store.update({ noRope }),
        noQkNorm: s.noQkNorm, onNoQkNorm: (noQkNorm) => store.update({ noQkNorm }),
        onPair: (pair) => store.update({ pair }),
        onFocus: (layer, headIdx) => store.update({ layer, head: headIdx }),
        onScores: (part) => longScores(r, base.item, base.layer, base.head, part),
        onMove: (dl, dh) => {
          const now = store.get();
          store.update({ layer: Math.max(0, Math.min(r.L - 1, now.layer + dl)), head: Math.max(0, Math.min(r.H - 1, now.head + dh)) });
        },
        ...(pieces && !samePieces ? { win: null, sel: [] } : {}),
        onZoom: (win) => store.update({ win: win ? { ...win, T: shown.T, words: s.words } : null }),
        onSelect: (sel) => store.update({ sel }),
        onHover: (cell) => store.update({ hover: cell }),
        // given attention has no model to run again without a head
        onKnock: r.given ? null : (layer, headIdx) => store.update({ off: toggleHead(store.get().off, layer, headIdx) }),
      });
      measure(`attnscope:${name}`, t0); // per-view cost, for the benchmark and DevTools
    }
    if (!waiting) store.update({ rendered: r.id + ':' + token });
  }

  /** Inside the decoder: the focused layer's values for the focused source, once one of its
   *  panels is open (a teacher-forced pass over the translation's own output of that source). */
  function decoderInside(s) {
    const tr = s.translation;
    if (!tr || tr.given || !s.modelInfo?.decoder || !s.inside.some((id) => DECODER_INSIDE.includes(id))) return;
    const item = Math.min(s.item, tr.results.length - 1), layer = Math.min(s.layer, s.modelInfo.decoder.layers - 1);
    const key = decoderTraceKey(s);
    if (s.decoderTrace?.key === key || decoderPending === key) return;
    decoderPending = key;
    // the focused source alone (a padded batch's item equals it): one item's pass, not the batch's
    const r = tr.results[item];
    eng().decoderTrace(s.modelKey, { sources: [r.source], outputs: [r.output_ids], layer, item: 0 })
      .then((data) => ({ key, data }), (err) => ({ key, error: String(err.message || err) }))
      .then((decoderTrace) => { if (decoderPending === key) decoderPending = ''; store.update({ decoderTrace }); });
  }

  // a long text's run: the focused head, asked of the engine when it is not here (one head's
  // T·T, not the layer's H·T·T: a keystroke at 1,024 tokens waits on 8 MB, not 76)
  // The probabilities of the last head a run let go go back to the engine with the next head
  // asked for, which it writes into them: at 8,192 tokens a new head's first write of each page
  // of its 268 MB took longer than the copy itself. They go once a render has drawn every view
  // since (no view holds them then: each drew a newer head), and are moved, not shared.
  let spare = null; // {probs, drawn}
  let headFor = '';
  // the part the head view would draw pooled, asked of the engine with the head, which pools it
  // as it makes the head's rows: the page then reads none of its T² values to draw it (where
  // the view shows the run's own heads: no words, no sink hidden, not value-weighted)
  function headPool(s) {
    const el = targets.head, r = s.run;
    const opts = layout(s).head;
    if (!el || el.hidden || !opts || shownOf(s) !== r) return null;
    return head.poolWanted(el, r.T, { ...opts, win: zoomOf(s, r), part: partOf(r, Math.min(s.item, r.B - 1), s.part) });
  }
  // the window of scores the steps view shows, asked of the engine with the head (a long run's
  // page holds windows of a head's scores, not its T²)
  function stepsWindow(s) {
    return stepsShown(s) ? stepsPart(s.run.T, zoomOf(s, s.run)) : null;
  }
  function stepsShown(s) {
    return Boolean(targets.steps && !targets.steps.hidden && layout(s).steps);
  }
  // a window of a long run's head's scores a view drew without (the steps view's after a zoom
  // or a drag, the rotary panel's cell): asked once at a time, the views drawn again when it comes
  const scoresFor = new Set();
  function longScores(r, b, l, h, part) {
    const want = `${r.id}:${b}:${l}:${h}:${part.q0}:${part.q1}:${part.k0}:${part.k1}`;
    if (!r.long || scoresFor.has(want)) return;
    scoresFor.add(want);
    eng().longScores(store.get().modelKey, { run: r.longRun, item: b, layer: l, head: h, part }).then((w) => {
      if (r.addScores(b, l, h, w) && store.get().run === r) store.update({ extras: `${r.id}:scores:${want}` });
    }, (err) => {
      if (store.get().run === r) store.update({ runError: { line: `head ${l}:${h}'s scores: ${String(err.message || err)}` } });
    }).finally(() => scoresFor.delete(want));
  }
  function longHead(s) {
    const r = s.run;
    if (!r?.long) return;
    const b = Math.min(s.item, r.B - 1), l = Math.min(s.layer, r.L - 1), h = Math.min(s.head, r.H - 1), want = `${r.id}:${b}:${l}:${h}`;
    if (r.hasHead(b, l, h) || headFor === want) return;
    headFor = want;
    const into = spare?.drawn ? spare.probs : null;
    spare = null;
    eng().longHead(s.modelKey, { run: r.longRun, item: b, layer: l, head: h, into, pool: headPool(s), scores: stepsWindow(s) }).then((values) => {
      const gone = r.addHead(b, l, h, values).at(-1);
      if (gone) spare = { probs: gone, drawn: false };
      if (store.get().run === r) store.update({ extras: `${r.id}:head:${b}:${l}:${h}` });
    }, (err) => {
      if (store.get().run === r) store.update({ runError: { line: `head ${l}:${h}: ${String(err.message || err)}` } });
    }).finally(() => { if (headFor === want) headFor = ''; });
  }

  // what writes the next token: the focused head's write read onto every token, asked of the
  // engine when the panel shows a head whose read-out is not here (one head's: L·H of them
  // onto a vocabulary of 49,152 would cost a keystroke ten times over)
  let readOutFor = '';
  function headReadOut(s) {
    const r = s.run;
    if (!s.writes || !r?.attributionOf?.(0) || !s.modelKey) return;
    const b = Math.min(s.item, r.B - 1), l = Math.min(s.layer, r.L - 1), h = Math.min(s.head, r.H - 1);
    const key = writesView.readOutKey(r, b, l, h);
    if (s.readOut?.key === key || readOutFor === key || s.off.includes(`${l}:${h}`)) return;
    readOutFor = key;
    eng().readOut(s.modelKey, { writes: r.headWritesOf(b, l, h).slice(), k: READ_OUT_TOKENS })
      .then(([read]) => ({ key, ...read }), (err) => ({ key, error: String(err.message || err) }))
      .then((readOut) => { if (readOutFor === key) readOutFor = ''; if (store.get().run === r) store.update({ readOut }); });
  }

  // given attention: the heads' summaries and rollout, from the engine, once a view shows them
  let analysing = null;
  function givenAnalyses(s) {
    const r = s.run;
    if (!r?.analysis || analysing === r || !(s.table || s.rollout || s.metric)) return;
    analysing = r;
    eng().analyseGiven(r.analysis.ask).then((analyses) => {
      if (store.get().run === r) store.update({ run: r.analysis.with(analyses) });
    }, (err) => {
      if (store.get().run === r) store.update({ runError: { line: `the heads' summaries: ${String(err.message || err)}` } });
    }).finally(() => { if (analysing === r) analysing = null; });
  }

  let otherFor = null; // the run whose other-scale metrics are being computed
  function otherScale(s) {
    const r = s.run;
    if (!r || r.otherScaleMetrics || otherFor === r) return;
    otherFor = r;
    eng().otherScale(s.modelKey, { texts: textsOf(s), pair: pairOf(s), mask: s.mask, options: runOptions(s) }).then((m) => {
      r.otherScaleMetrics = m;
      if (store.get().run === r) store.update({ extras: `${r.id}:scale` });
    }, () => {}).finally(() => { if (otherFor === r) otherFor = null; });
  }

  const RENDER_KEYS = ['extras', 'run', 'noSink', 'byValue', 'item', 'layer', 'head', 'scale', 'win', 'hover', 'view', 'presenter', 'size', 'embed', 'metric', 'table', 'rollout', 'writes', 'flow', 'readOut', 'exercise', 'guess', 'checked', 'sel', 'words', 'inside', 'scaling', 'positions', 'part'];
  const RUN_KEYS = ['sentences', 'pair', 'mask', 'batch', 'modelVersion', 'off', 'compare', 'compareText', 'noScale', 'noRope', 'noQkNorm', 'numerics'];
  const SHOW_KEYS = ['metric', 'table', 'rollout', 'inside', 'layer', 'byValue', 'writes', 'flow', 'exercise']; // a new run only when the last one lacks what they show
  store.subscribe((s, changed) => {
    decoderInside(s);
    // a generation's run (web/generation.js) is not a pass to redo for what a panel shows
    // (a translation run again for its value sizes when the value switch comes on)
    const trLacks = changed.has('byValue') && s.byValue && s.translation && !s.translation.given && !s.translation.results[0]?.value_norms;
    if (RUN_KEYS.some((k) => changed.has(k)) || trLacks || (SHOW_KEYS.some((k) => changed.has(k)) && s.run && !s.run.generated && !runHas(s.run, s))) run();
    // a generation's focused step, written: the pass over what the model was fed to there
    else if (s.run?.generated && (changed.has('run') || changed.has('generation') || SHOW_KEYS.some((k) => changed.has(k)))) stepPass();
    if (changed.has('rendered') && spare) spare.drawn = true;
    if (['run', 'layer', 'head', 'item'].some((k) => changed.has(k))) longHead(s);
    if (['run', 'layer', 'head', 'item', 'writes'].some((k) => changed.has(k))) headReadOut(s);
    if (['run', 'table', 'rollout', 'metric'].some((k) => changed.has(k))) givenAnalyses(s);
    if (RENDER_KEYS.some((k) => changed.has(k))) render(changed);
    // the √d_k experiment: computed by the engine once, when its panel first opens
    if (s.inside.includes('scale') && !s.scaling && s.modelKey && !scalingAsked) {
      scalingAsked = true;
      eng().scaling(2000).then((scaling) => store.update({ scaling }), () => { scalingAsked = false; });
    }
    // the √d_k panel's other scale: one more pass for the run on screen, not a whole new run
    if ((changed.has('inside') || changed.has('run')) && s.inside.includes('scale')) otherScale(s);
    // learned vs sinusoidal position similarity: from the engine once a model (again for a longer input)
    const posN = Math.max(64, s.run?.T ?? 0);
    if (s.inside.includes('embeddings') && s.modelKey && !positionsPending && (s.positions?.key !== s.modelKey || (s.positions.want ?? 0) < posN)) {
      positionsPending = true;
      const key = s.modelKey;
      eng().positions(key, posN).then((p) => ({ ...p, key, want: posN }), (err) => ({ key, want: posN, error: String(err.message || err) }))
        .then((positions) => { positionsPending = false; store.update({ positions }); });
    }
  });

  /** What the engine tells this page unasked: the engine `auto` kept, a restart after a crash. */
  function listen(e) {
    // `auto` showed the first view on the CPU engine and has now timed WebGPU: the engine's line
    // says which it keeps, and a run on WebGPU shows it at once
    e.onEngineChosen(({ key, engine: chosen, status }) => {
      if (key !== store.get().modelKey) return;
      store.update({ engineStatus: status });
      if (chosen === 'gpu') run();
    });

    // a fresh engine after a crash: the checkpoint loads again (a URL's files from the browser's
    // cache) and the run with it, and the engine's line says what happened; files chosen from disk
    // went to the old engine and must be chosen again. What is on screen stays until then.
    e.onRestart(async (err) => {
      const s = store.get();
      if (!s.modelSource) return;
      if (!s.modelSource.base) {
        store.update({ modelError: { line: `${err.message}: ${filesAgain}.` } });
        return;
      }
      if (!(await loadModel(s.modelSource))) return;
      const line = store.get().engineStatus?.line;
      store.update({ engineStatus: { line: `${line ? `${line}; ` : ''}restarted after a crash`, details: err.message } });
    });
  }

  return { loadModel, showGiven, run, render, cancel: () => store.get().loading && made?.cancel(store.get().loading.key), stopRun: () => stopRun?.() };
}
