// The page: its controls and the store, wired to the shared views (scope.js). User text is only
// ever drawn on canvases or set as textContent/value, never parsed as HTML.

import { createStore, INTENT_DEFAULTS, MAX_BATCH, METRICS, ROLES, repeatedText, COMPARE_FIRST, INSIDE, DECODER_INSIDE, PARTS, metricLabel, metricsFor } from './store.js';
import { cosine } from './compare.js';
import { parseHash, writeHash } from './hash.js';
import { connect, toggleHead, toggleGroup, translationPanes, drawDecoderPanels, splitLine, textsOf, urlSource, hubSource, sourceOf, shownOf, delayedBusy, needsModel, isGiven, runOptions, zoomOf } from './scope.js';
import { combine } from './select.js';
import { wordsOf, carrySel } from './words.js';
import { engine } from './engine.js';
import { published, publishedTranslation, withGeneration, maxAbsDiff, visibleText, inlineText, engineOf, decoderSteps, layerNumber, stepsPart } from './result.js';
import * as translationView from './views/translation.js';
import { EXAMPLES, TRANSLATION_EXAMPLES, DECODER_EXAMPLES } from './examples.js';
import { exportView, exportPanel } from './export.js';
import { METRIC_NOTES, METRIC_HELP, SCALE_HELP, specialNotes } from './glossary.js';
import { readsPair, stackWord, normName, ffnWords } from './architecture.js';
import { connectGeneration, canGenerate, kvGroups } from './generation.js';
import * as generationView from './views/generation.js';
import { readGiven, fromGiven, precisionNote } from './given.js';
import { player, PLAY_MS } from './play.js';
import * as runStatus from './progress.js';
import { startExercise } from './exercises.js';

const $ = (id) => document.getElementById(id);

// ---------- the store: the intent (from the hash) and what the page learned since ----------
const store = createStore({
  ...parseHash(location.hash),
  modelInfo: null, modelKey: '', modelSource: null, modelVersion: 0, engineStatus: null,
  loading: null, modelError: null, run: null, runError: null, busy: false, hover: null, win: null, rendered: '', scaling: null, positions: null,
  readOut: null, // the focused head's write read onto every token (web/views/writes.js)
  translation: null, decoderTrace: null, playing: false, // an encoder–decoder model's result (its focused step is the intent's `step`), and whether it plays
  generation: null, // a decoder-only model's generation (web/generation.js), its focused step the intent's `step`
  genMax: 16, // the Generate control's "max new tokens": the last asked for, kept when a new sentence lets the generation go
});
/** Play: a decoding step by step from the focused step, one every PLAY_MS (web/play.js). */
const play = player(store);

const embed = store.get().embed;
if (embed) document.body.classList.add('embed', `embed-${embed}`);

// ---------- the API tests and scripts read ----------
let resolveReady, rejectReady;
const api = {
  ready: new Promise((res, rej) => { resolveReady = res; rejectReady = rej; }),
  get result() {
    const s = store.get();
    if (s.translation) return publishedTranslation(s.translation, Math.min(s.item, s.translation.results.length - 1));
    if (!s.run) return null;
    // a generation's run: its fields as `attnscope generate` prints them beside
    return withGeneration(published(s.run, Math.min(s.item, s.run.B - 1)), s.run, s.generation);
  },
  get info() { return store.get().modelInfo; },
  get engine() { return store.get().engineStatus; },
  /** The selected query rows of the focused head and item (in words with "words" on): `{rows, combined: [T]}`, or null. */
  get selection() {
    const s = store.get(), run = shownOf(s);
    if (!run || !s.sel.length) return null;
    const b = Math.min(s.item, run.B - 1), l = Math.min(s.layer, run.L - 1), h = Math.min(s.head, run.H - 1);
    if (!run.hasHead(b, l, h)) return null; // a long text's head not computed yet
    const c = combine(run.head(b, l, h), run.maskOf(b, l), run.T, s.sel);
    return c && { rows: c.rows, combined: Array.from(c.combined) };
  },
  /** With "words" on, the focused item at word level: `{tokens, pieces: [[piece index]], attention: [L][H][T'][T']}`; else null. */
  get words() {
    const s = store.get();
    if (!s.run || !s.words) return null;
    const w = wordsOf(s.run), b = Math.min(s.item, w.B - 1), item = w.results[b];
    return { tokens: item.tokens, pieces: w.words(b).pieces, attention: item.attention };
  },
  error: null, renders: 0, lastRenderAt: 0, insideRenders: 0, insideAt: 0,
  store,
  /** The worker's wasm memory and what it holds (for long-session checks). */
  stats: () => engine().stats(),
  /** With `?testhooks=1`: destroys the worker's WebGPU devices, as a GPU crash would. */
  loseDevice: () => engine().loseDevice(),
  /** With `?testhooks=1`: a panic in the engine's wasm module, as a bug would, at 'call', 'future' or 'pool' (rejects with it). */
  crash: (site = 'call') => engine().crash(site),
};
api.ready.catch(() => {});
window.attnscope = api;

// ---------- views ----------
const presenterFont = (s) => (s.presenter ? 18 : 12);
function layout(s) {
  const wide = window.innerWidth >= 1100;
  const headPanel = $('head-panel');
  const avail = headPanel.clientWidth || 600;
  const showHeat = s.view !== 'lines' || s.embed === 'head';
  const sideBySide = isSideBySide(s);
  const showLines = ((s.view !== 'heatmap' && !s.embed) || s.embed === 'lines') && !sideBySide;
  const linesW = showLines && showHeat ? Math.min(320, Math.max(220, avail * 0.3)) : avail;
  let top = 0; // the head view's offset in the page (no DOMRect a render)
  for (let el = $('head-view'); el; el = el.offsetParent) top += el.offsetTop;
  const maxHeight = s.embed ? window.innerHeight - 70 : s.presenter && wide ? presenterHeight(top) : Math.max(280, wide ? window.innerHeight - Math.min(top, 260) - 70 : avail);
  const headW = showHeat ? (wide && showLines ? avail - linesW - 16 : sideBySide && wide ? (avail - 16) / 2 : avail) : 0;
  const size = Math.min(headW, maxHeight);
  return {
    model: !s.embed || s.embed === 'model' ? {} : null,
    head: showHeat ? { maxHeight, fontPx: presenterFont(s) } : null,
    lines: showLines ? { height: showHeat ? size : Math.min(maxHeight, 720), fontPx: presenterFont(s) } : null,
    heads: !s.embed && s.table ? {} : null,
    ...Object.fromEntries(INSIDE.map((id) => [`inside:${id}`, !s.embed && s.inside.includes(id) ? { fontPx: presenterFont(s), width: $(`inside-${id}`).clientWidth || 900 } : null])),
    rollout: !s.embed && s.rollout ? { fontPx: presenterFont(s), panelPx: Math.min(420, Math.floor(($('rollout-view').clientWidth || 800) / (window.innerWidth < 700 ? 1 : 2)) - 24) } : null,
    writes: !s.embed && s.writes ? { fontPx: presenterFont(s) } : null,
    flow: !s.embed && s.flow ? { fontPx: presenterFont(s) } : null,
    exercise: !s.embed && s.exercise ? {} : null,
    headB: showHeat && sideBySide ? { maxHeight, fontPx: presenterFont(s) } : null,
    steps: !s.embed || s.embed === 'steps' ? { panelPx: Math.min(s.presenter ? 360 : 260, Math.floor(($('steps-view').clientWidth || 1000) / (window.innerWidth < 700 ? 1 : 4)) - 16), fontPx: s.presenter ? 15 : 11 } : null,
  };
}

/**
 * Presenter mode on a wide screen: the head view's heatmap as tall as the screen leaves it, from
 * `top` (the view's offset in the page) down to the fold, under its tools and over its legend
 * (their heights as last drawn).
 */
function presenterHeight(top) {
  const view = $('head-view'), stage = view.querySelector('.stage'), legend = view.querySelector('.legend');
  const above = stage?.offsetTop ?? 40, below = (legend?.offsetHeight || 30) + 12;
  return Math.max(240, window.innerHeight - top - above - below);
}

/** Compare mode with two sentences of different lengths: their head views side by side. */
function isSideBySide(s) {
  return s.compare && s.run?.B === 2 && s.run.results[0].length !== s.run.results[1].length;
}

const targets = {
  model: $('model-view'), head: $('head-view'), lines: $('lines-view'), steps: $('steps-view'), heads: $('heads-view'), rollout: $('rollout-view'), writes: $('writes-view'), flow: $('flow-view'), exercise: $('exercise-view'), headB: $('head-view-b'),
  ...Object.fromEntries(INSIDE.map((id) => [`inside:${id}`, $(`inside-${id}`)])),
};
/** Which of the head panel's panes show, side by side or not: set before the views are drawn
 *  and measured (connect's subscriber draws them, so this one is subscribed first). */
function showPanes(s) {
  const sideBySide = isSideBySide(s);
  show($('lines-view'), !(s.embed ? s.embed !== 'lines' : s.view === 'heatmap' || sideBySide));
  show($('head-view'), !(s.embed ? s.embed !== 'head' : s.view === 'lines'));
  show($('head-view-b'), sideBySide);
  document.body.classList.toggle('side-by-side', sideBySide);
}
const PANE_KEYS = ['embed', 'view', 'compare', 'run'];
showPanes(store.get());
store.subscribe((s, changed) => { if (PANE_KEYS.some((k) => changed.has(k))) showPanes(s); });
// a long run's progress, in a box over the page (it moves nothing): the layer its pass or its
// heads' summary is on, and a stop where the page can ask for one (web/progress.js)
const showRun = (p) => runStatus.render($('run-status'), p, { scale: store.get().scale }); // (its layers coloured as the grid)
const scope = connect(store, { targets, layout, engineFollows: true, onRunProgress: showRun }); // the engine select shows the engine that runs

// ---------- generating (a decoder-only model with an LM head) ----------
const generating = connectGeneration(store, engine(), runOptions, showRun);
const GENERATE_KEYS = ['generation', 'step', 'modelInfo', 'playing', 'chat', 'gen'];
store.subscribe((s, changed) => {
  if (!GENERATE_KEYS.some((k) => changed.has(k))) return;
  const on = canGenerate(s.modelInfo) && !s.embed;
  show($('generate'), on);
  document.body.classList.toggle('generating', on);
  document.body.classList.toggle('generated', on && Boolean(s.generation?.result)); // presenter mode makes room for its views (style.css)
  const kv = kvGroups(s.modelInfo?.architecture);
  show($('kv-groups'), Boolean(kv));
  setText($('kv-groups'), kv);
  if (!on) return;
  const r = s.generation?.result;
  setText($('generate-caption'), r ? `· ${r.output_ids.length} new tokens on ${engineOf(r.backend)}${s.chat && s.modelInfo.chat_template ? ', as a chat' : ''}` : '');
  generationView.render($('generate-view'), { info: s.modelInfo, generation: s.generation, step: s.step, chat: s.chat, maxNew: s.gen || s.genMax, playing: s.playing }, {
    onGenerate: (maxNew, chat) => { play.stop(); generating.start(maxNew, chat); },
    onMax: (genMax) => store.update({ genMax }),
    onStop: () => generating.stop(),
    onChat: (chat) => store.update({ chat }),
    onStep: (step) => { play.stop(); const n = store.get().generation?.result?.output_ids.length ?? 1; store.update({ step: Math.max(0, Math.min(n - 1, step)) }); },
    onPlay: () => play.toggle({ key: 'step', count: r?.output_ids.length ?? 1 }),
  });
});

// ---------- controls ← state ----------
function syncInputs(s) {
  $('sentence').value = s.sentences[0] || '';
  $('batch').value = s.sentences.join('\n');
  $('pair').value = s.pair;
  $('mask').value = s.mask;
  $('batch-mode').checked = s.batch;
  $('batch-wrap').hidden = !s.batch;
  $('sentence').closest('label').hidden = s.batch;
  $('engine').value = s.engine;
  $('numerics').value = s.numerics;
  $('view').value = s.view;
  $('part').value = s.part;
  $('scale').value = s.scale;
  $('presenter').checked = s.presenter;
  $('words').checked = s.words;
  showSource();
  $('metric').value = s.metric;
  describeChoices();
  $('compare-mode').checked = s.compare;
  $('compare-wrap').hidden = !s.compare;
  $('compare-text').value = s.compareText;
  $('batch-mode').disabled = s.compare;
  $('table-details').open = s.table;
  for (const d of document.querySelectorAll('details[data-panel]')) d.open = s.inside.includes(d.dataset.panel);
  $('rollout-details').open = s.rollout;
  $('writes-details').open = s.writes;
  $('writes-details').hidden = !s.modelInfo?.lm_head || isGiven(s);
  $('flow-details').open = s.flow;
  $('flow-details').hidden = !s.modelInfo?.lm_head || isGiven(s);
  $('exercise-view').hidden = !s.exercise;
  for (const b of document.querySelectorAll('.exercise-starts [data-exercise]')) b.setAttribute('aria-pressed', String(b.dataset.exercise === s.exercise));
}

$('part').append(...Object.entries(PARTS).map(([value, name]) => Object.assign(document.createElement('option'), { value, textContent: name })));
for (const [name, label] of Object.entries(METRICS)) {
  const o = document.createElement('option');
  o.value = name;
  o.textContent = label;
  o.title = METRIC_NOTES[name];
  $('metric').append(o);
}
{
  // the heads' roles: scored where the text repeats ("Find the heads" writes one)
  const group = Object.assign(document.createElement('optgroup'), { label: 'roles, on a text that repeats' });
  for (const [name, label] of Object.entries(ROLES)) group.append(Object.assign(document.createElement('option'), { value: name, textContent: label, title: METRIC_NOTES[name] }));
  $('metric').append(group);
}
$('metric').options[0].title = METRIC_NOTES[''];

/** The summary choices explain themselves on hover and focus: what the control does, and what
 *  its current choice shows (a select's title is its accessible description too). */
function describeChoices() {
  const describe = (id, text) => { $(id).title = text; $(id).closest('label').title = text; };
  describe('metric', `${METRIC_HELP} Now: ${METRIC_NOTES[$('metric').value]}.`);
  describe('scale', SCALE_HELP);
}

/** The worked examples of the loaded model's kind: an encoder's, a decoder-only model's (a chat
 *  turn where it has a chat template), or a translation's; and that kind's name. */
const exampleKind = (info) => (info?.decoder ? 'translation' : info?.own_mask === 'causal' ? `decoder${info.chat_template ? '-chat' : ''}` : 'encoder');
const examplesOf = (info) => ({ translation: TRANSLATION_EXAMPLES, decoder: DECODER_EXAMPLES.filter((e) => !e.needs), 'decoder-chat': DECODER_EXAMPLES }[exampleKind(info)] ?? EXAMPLES);
function listExamples(info) {
  const list = examplesOf(info), select = $('example');
  if (select.dataset.kind === exampleKind(info)) return;
  select.dataset.kind = exampleKind(info);
  select.replaceChildren(Object.assign(document.createElement('option'), { value: '', textContent: 'choose…' }), ...list.map((ex) => Object.assign(document.createElement('option'), { value: ex.id, textContent: ex.title })));
}
listExamples(null);
/** The worked example whose input is on screen (its sentences, pair, mask and batch), if any: the
 *  choice shows it, and goes back to "choose…" once the text is the user's own. */
function exampleShown(s) {
  const input = (x) => (x.batch ? x.sentences.join('\n') : x.sentences[0]);
  // (a chat turn's only with chat on: its text run plain is not the example, which picked writes)
  return examplesOf(s.modelInfo).find(({ state: e }) => !s.compare && e.batch === s.batch && input(e) === input(s) && e.pair === s.pair && (e.mask ?? s.mask) === s.mask && (e.chat ?? s.chat) === s.chat);
}

// Writes a text only where it differs: the same textContent set again still replaces the node,
// and the browser restyles and lays it out again, at every keystroke.
function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}
/** Shows or hides `el`, touching it only when that changes (setting `hidden` to what it was
 *  still restyles the element: a token written would restyle the views it holds). */
function show(el, on) {
  if (el.hidden === on) el.hidden = !on;
}

function status(el, msg) { // one short line, details on request
  setText(el, msg?.line ?? '');
  el.hidden = !msg;
}

// the stale views greyed and "computing…" shown (style.css) while a run takes long (scope.js, BUSY_DELAY_MS)
const showBusy = delayedBusy((busy) => document.body.classList.toggle('busy', busy));
function renderChrome(s, changed) {
  document.body.classList.toggle('presenter', s.presenter);
  $('pair').closest('label').classList.toggle('unused', !s.pair.trim()); // presenter mode shows it only in use
  const along = s.modelInfo?.decoder ? ['step', 'the decoding'] : s.generation?.result ? ['step', 'the generation'] : ['layer', 'the layers'];
  setText($('presenter-keys'), `PgDn/→ next ${along[0]} · PgUp/← back · Space plays`);
  $('presenter-keys').title = `a presentation clicker: PageDown or → shows the next ${along[0]}, PageUp or ← the one before, Space plays ${along[1]} from the ${along[0]} shown (from the first after the last) or stops`;
  const info = s.modelInfo;
  setText($('model-name'), info?.given ? `${info.name} · given attention: ${givenSize(info)}`
    : info ? `${s.modelSource?.hub ?? info.name} · ${info.layers} layers × ${info.heads} heads · hidden ${info.hidden}`
    : s.loading ? `loading ${s.loading.name}…` : 'no model loaded');
  const failed = !info && !s.loading && !!s.modelError;
  $('model-name').classList.toggle('error-text', failed);
  if (document.body.classList.contains('no-model') !== failed) { // an embed shows its error alone, the page its error under the inputs (style.css)
    document.body.classList.toggle('no-model', failed);
    showSource(); // the Model choice says so
  }
  if (failed) setText($('model-name'), 'no model loaded: see "Model and engine" below');
  if (info) setText($('grid-caption'), `${info.layers} layers × ${info.heads} heads (rows = layers)`);
  $('progress-wrap').hidden = !s.loading;
  if (s.loading) {
    const mb = (n) => (n / 1048576).toFixed(1);
    $('progress').max = s.loading.total || 1;
    $('progress').value = s.loading.loaded || 0;
    setText($('progress-text'), s.loading.file ? `${s.loading.name} · ${s.loading.file}: ${mb(s.loading.loaded)} of ${s.loading.total ? mb(s.loading.total) : '?'} MB` : `${s.loading.name}…`);
  }
  status($('error'), s.modelError && !s.modelError.instead && { line: s.modelError.line + (info ? ` (still showing ${s.modelSource?.hub ?? info.name})` : '') });
  // a link's model that did not load, the default shown instead: said under the inputs, above the fold
  status($('link-error'), s.modelError?.instead && info && { line: `${s.modelError.line} (showing ${info.name} instead: correct the link under "Model and engine" below, or pick a model)` });
  const es = s.engineStatus;
  setText($('engine-status'), es?.line ?? '');
  $('engine-details').hidden = !es?.details;
  setText($('engine-why'), es?.details ?? '');
  const r = s.run;
  // the engine and what its time measures: a pass over the text, or a whole generation (the
  // prompt's pass and every token's, the generation line's parts summed)
  const g = r?.generated;
  const took = r && (g ? `${g.source.step_ms.reduce((a, b) => a + b, 0).toFixed(0)} ms to read the prompt and write ${g.outputs} token${g.outputs === 1 ? '' : 's'}` : `${r.elapsed_ms.toFixed(1)} ms a pass`);
  setText($('backend'), isGiven(s) ? `given${precisionNote((r ?? s.translation).precision)}` : r ? `${r.backend.replace(/^gpu: /, 'WebGPU: ').replace(/ \(WebGPU\)$/, '')} · ${took}` : (es?.line ?? '…'));
  $('backend').title = isGiven(s) || !r ? '' : g ? 'the engine, and the time it took in all: the prompt\'s pass and each token\'s step (the generation\'s line gives them apart)'
    : 'the engine, and the time of its forward pass over the text (every layer and head, in the worker)';
  showBusy(s.busy);
  // the input's own line: why nothing runs, what was cut, what answered instead
  const notes = [];
  if (s.runError) notes.push(s.runError.line);
  if (r) {
    const cut = r.results.map((x, i) => (x.truncated ? i + 1 : 0)).filter(Boolean);
    if (cut.length) notes.push(`${r.B > 1 ? `Sentence ${cut.join(', ')} was` : 'The text was'} longer than the model's ${info?.max_length} positions and was truncated.`);
    if (r.fallback) notes.push(`The CPU answered: ${r.fallback}`);
  }
  if (s.batch && s.sentences.filter((x) => x.trim()).length > MAX_BATCH) notes.push(`Batch mode takes up to ${MAX_BATCH} sentences; the rest are ignored.`);
  status($('input-status'), notes.length ? { line: notes.join(' ') } : null);
  $('input-status').classList.toggle('error', !!s.runError);
  if (changed.has('run') || changed.has('item') || changed.has('translation')) {
    // the sentences of a batch (a translation's sources)
    const items = r ? r.results.map((x) => x.text) : s.translation?.results.map((x) => x.source) ?? [];
    $('item-wrap').hidden = items.length < 2;
    if ($('item').options.length !== items.length || changed.has('run') || changed.has('translation')) {
      $('item').replaceChildren(...items.map((x, i) => { const o = document.createElement('option'); o.value = i; o.textContent = `${i + 1}: ${x.slice(0, 40)}`; return o; }));
    }
    $('item').value = String(Math.min(s.item, Math.max(0, items.length - 1)));
  }
  $('noscale-note').hidden = r?.scale !== 'none'; // the √d_k ablation: the head view shows unscaled attention
  // a sentence pair's parts, where the run knows where its second sentence starts
  $('part-wrap').hidden = !Number.isInteger(r?.results[Math.min(s.item, r.B - 1)]?.sentence_b_start);
  if ($('part').value !== s.part) $('part').value = s.part;
  sinkNote(s);
  valueNote(s);
  longNote(s);
  rolesNote(s);
  setText($('steps-caption'), r?.given ? '' : r ? `layer ${s.layer}, head ${s.head}, d_k = ${info?.head_dim}${s.words && shownOf(s).id !== r.id ? ' · per word piece (QKᵀ is per token)' : ''}` : '');
  knockStatus(s);
  compareStatus(s);
  modelInputs(s);
  nextTokens(s);
  translation(s, changed);
  givenInputs(s); // after the two above, whose model's choices it overrides
  insideDecoder(s, changed);
  $('example').value = exampleShown(s)?.id ?? ''; // after translation(), which lists the model's examples
  for (const o of $('metric').options) if (o.value) setText(o, metricLabel(o.value, info));
  // "heads by" offers the metrics that say something of this model's text (store.js metricsFor)
  const applies = [...metricsFor(info, s.run?.mask_kind ?? s.mask), ...Object.keys(ROLES)];
  for (const o of $('metric').options) o.hidden = Boolean(o.value) && !applies.includes(o.value);
  if (s.metric && !applies.includes(s.metric) && info) store.update({ metric: '' });
  // the head summaries name the model's special tokens: what those are, on hover
  if (changed.has('modelInfo')) $('table-details').querySelector('summary').title = specialNotes(...(info?.specials ?? ['[CLS]', '[SEP]']));
  if (changed.has('modelInfo') && info && !info.given) familyWords(info.architecture); // given attention names no family
}

/** The inside sections' words for the loaded model's architecture: its stack (the encoder, or a
 *  decoder-only model's decoder), its norm, and what its embeddings add. */
function familyWords(arch) {
  for (const e of document.querySelectorAll('.stack-word')) setText(e, stackWord(arch));
  for (const e of document.querySelectorAll('.norm-word')) setText(e, normName(arch));
  for (const e of document.querySelectorAll('.ffn-words')) setText(e, ffnWords(arch));
  const parts = ['token', ...(arch.positions.type === 'rotary' ? [] : ['position']), ...(arch.token_types ? ['token type'] : [])];
  setText($('embeddings-parts'), `${parts.join(' + ')}${arch.norm_order === 'post' ? `, then ${normName(arch)}` : ''}`);
  document.querySelector('details[data-panel="rope"]').hidden = arch.positions.type !== 'rotary';
  document.querySelector('details[data-panel="cache"]').hidden = arch.kind !== 'decoder';
  document.querySelector('details[data-panel="qknorm"]').hidden = !arch.layers?.some((l) => l.qk_norm);
  document.querySelector('details[data-panel="window"]').hidden = !arch.layers?.some((l) => l.attention === 'sliding');
}

/**
 * An encoder–decoder model's page: the translation view in place of the encoder's views (which
 * draw one stack's square attention), the pair box as the target to teacher-force.
 */
function translation(s, changed) {
  const on = !!s.modelInfo?.decoder;
  document.body.classList.toggle('translating', on);
  $('translation').hidden = !on;
  setText($('pair-label'), on ? 'Target (teacher forcing, optional)' : 'Second sentence (pair, optional)');
  setText($('batch-label'), on ? 'Batch: up to 4 sources, one a line ("source => target" teacher-forces its own target)' : 'Batch: up to 4 sentences, one a line');
  listExamples(s.modelInfo);
  // what a translation model does not use: compare and words (an encoder's views), and the
  // target box in batch mode (each line names its own target)
  for (const id of ['compare-mode', 'words']) {
    $(id).disabled = on;
    $(id).closest('label').title = on ? 'not for a translation model: its views are the translation\'s' : '';
  }
  if (on) {
    $('pair').disabled = s.batch;
    $('pair').title = s.batch ? 'in batch mode each line names its own target: "source => target"' : '';
  }
  const tr = s.translation;
  if (!on || !tr || !['translation', 'item', 'layer', 'head', 'step', 'playing', 'modelInfo', 'attn', 'view', 'size', 'presenter', 'embed', 'byValue'].some((k) => changed.has(k))) return;
  const item = tr.results[Math.min(s.item, tr.results.length - 1)];
  const steps = decoderSteps(item).T;
  setText($('translation-caption'), `· ${item.given ? 'given' : item.target ? 'teacher-forced' : 'greedy decoding'}, ${steps} steps`);
  translationView.render($('translation-view'), tr, {
    item: s.item, layer: s.layer, head: s.head, step: s.step, info: s.modelInfo, playing: play.playing,
    attn: s.attn, panes: translationPanes(s), width: $('translation-view').clientWidth || 900, fontPx: presenterFont(s),
    foldPx: s.presenter && !s.embed ? window.innerHeight : null, // presenter mode: the focused head above the fold
    show: s.view, onShow: s.embed ? null : (view) => store.update({ view }), // an embed shows the view it names
    onAttn: (attn) => store.update({ attn }),
    onStep: (step) => { play.stop(); store.update({ step: Math.max(0, Math.min(steps - 1, step)) }); },
    onFocus: (layer, head) => store.update({ layer, head }),
    onPlay: () => play.toggle(presentedSteps(store.get())),
    byValue: s.byValue, onByValue: s.embed ? null : (byValue) => store.update({ byValue }),
  });
  api.renders++;
  api.lastRenderAt = performance.now();
}

/** Inside the decoder's open panels, for the focused source, step, layer and head. */
let scrollToDecoder = false;
function insideDecoder(s, changed) {
  const tr = s.translation, dec = s.modelInfo?.decoder;
  if (!tr || !dec || !['decoderTrace', 'translation', 'step', 'head', 'layer', 'item', 'inside', 'size', 'presenter'].some((k) => changed.has(k))) return;
  const b = Math.min(s.item, tr.results.length - 1), r = tr.results[b];
  const T = decoderSteps(r).T, step = Math.min(s.step ?? T - 1, T - 1);
  const layer = Math.min(s.layer, dec.layers - 1), head = Math.min(s.head, dec.heads - 1);
  setText($('inside-decoder-caption'), `· source ${b + 1}, decoder layer ${layer}, head ${head}, step ${step + 1} of ${T}`);
  const open = DECODER_INSIDE.filter((id) => s.inside.includes(id));
  if (tr.given) { for (const id of open) needsModel($(`inside-${id}`), 'The decoder\'s insides compute from the model itself'); return; }
  if (drawDecoderPanels(s, Object.fromEntries(open.map((id) => [id, $(`inside-${id}`)])), { fontPx: presenterFont(s) }) && open.length) {
    api.insideRenders++;
    api.insideAt = performance.now();
    if (scrollToDecoder) { scrollToDecoder = false; $('inside-decoder').scrollIntoView({ block: 'start' }); }
  }
}

/** Play (web/play.js `play`): in presenter mode, an encoder's layers too, one every LAYER_PLAY_MS (a whole new heatmap to read). */
const LAYER_PLAY_MS = 1200;

/** Given attention: the inputs hold its text, and what only a model reads (a second sentence, a
 *  batch, a mask, an example) is off; a model loaded below brings them back. */
function givenInputs(s) {
  const given = isGiven(s);
  $('sentence').readOnly = given;
  $('sentence').title = given ? 'the text of the given attention\'s tokens: it was computed elsewhere, with no model here to run another' : '';
  if (given) {
    const r = s.run?.results[0] ?? s.translation.results[0];
    $('sentence').value = r.text ?? r.source;
  }
  for (const id of ['pair', 'batch-mode', 'words', 'compare-mode', 'mask', 'example', 'check']) {
    const e = $(id);
    if (given && e.title !== GIVEN_OFF) { e.dataset.titleBefore = e.title; e.title = GIVEN_OFF; }
    else if (!given && e.title === GIVEN_OFF) { e.disabled = false; e.title = e.dataset.titleBefore ?? ''; } // the model's renders set the rest again
    if (given) e.disabled = true;
  }
  if (given) $('mask').value = s.run?.mask_kind === 'causal' ? 'causal' : 'padding';
}
const GIVEN_OFF = 'not for given attention: there is no model here to run';

/** What the loaded model's family changes in the inputs: its own mask marked, the mask an
 *  ablation when it is another, and no pair for a model that reads one text. */
function modelInputs(s) {
  const info = s.modelInfo, own = info?.own_mask ?? 'padding';
  const names = { padding: 'padding', causal: 'causal (no-peek) + padding', none: 'none (padding leaks)' };
  for (const o of $('mask').options) setText(o, names[o.value] + (info && o.value === own ? ' · the model\'s own' : ''));
  const single = Boolean(info) && !readsPair(info.architecture);
  $('mask').disabled = !!info?.decoder;
  $('mask').title = info?.decoder ? 'a translation model applies its own masks: padding in the encoder and across, no-peek in the decoder' : '';
  $('pair').disabled = single;
  $('pair').closest('label').hidden = single; // a decoder-only model reads one text: no pair box
  document.body.classList.toggle('one-text', single);
  const notes = [];
  if (info && s.mask !== own) notes.push(`Ablation: ${info.name} was trained with the ${own} mask; this view runs it with "${s.mask}".`);
  if (single && s.pair.trim()) notes.push(`${info.name} reads one text (a decoder-only model has no sentence pairs): the second sentence is not run.`);
  status($('model-note'), notes.length ? { line: notes.join(' ') } : null);
}

/**
 * A model with an LM head (GPT-2, the Llama family): the likeliest next tokens after the focused
 * position (the hovered row, else the last selected one, else the text's last token), best first,
 * with the token the text goes on with marked; with heads knocked out, each beside its
 * probability with every head (a hollow bar), and the likeliest of that model.
 */
function nextTokens(s) {
  const r = s.run, b = r ? Math.min(s.item, r.B - 1) : 0, item = r?.results[b], next = item?.next_tokens;
  $('next-view').hidden = !next;
  if (!next) return;
  const n = item.length;
  // the focused row, in word pieces (with "words" on, the last piece of the focused word)
  const toPiece = (q) => (s.words ? wordsOf(r).words(b).pieces[q]?.at(-1) ?? n - 1 : q);
  const hovered = s.hover && toPiece(s.hover.q);
  let q = Math.min(n - 1, hovered ?? (s.sel.length ? toPiece(s.sel[s.sel.length - 1]) : n - 1));
  // a long text's run has the LM head at its last position only
  if (!next[q]?.length) q = next.findLastIndex((x) => x.length > 0);
  if (q < 0) { $('next-view').hidden = true; return; }
  const shown = (t) => `“${inlineText(t)}”`;
  // a token that is only part of a character shows its bytes, marked (‹F0 9F›: the engine's text)
  const predicted = (p) => shown(p.text);
  const pct = (p) => `${(100 * p).toFixed(1)}%`;
  const before = item.labels.slice(0, q + 1).join('').trim();
  const following = q + 1 < n ? item.token_ids[q + 1] : null;
  // with heads knocked out: the same position's likeliest tokens with every head
  const plain = r.head_mask?.length ? r.baselineNext?.(b)?.[q] ?? null : null;
  // Gemma's `final_logit_softcapping`: every logit z through c·tanh(z/c) before the softmax
  const cap = s.modelInfo?.architecture?.logit_cap;
  const capped = cap ? `, each logit z soft-capped to ${cap}·tanh(z/${cap}) (never past ±${cap})` : '';
  setText($('next-caption'), `· after token ${q + 1} of ${n} (position ${q}): the LM head over all ${s.modelInfo?.vocab_size ?? ''} tokens${capped}, softmax (${next[q].length} likeliest)${r.long ? '; a text this long gets it at its last position only' : ''}`);
  const goes = following === null ? 'the text ends here' : `the text goes on with ${shown(item.labels[q + 1])}`;
  let line = `After ${shown(before)}, the model expects: (${goes})`;
  if (plain) {
    const names = r.head_mask.map(([l, h]) => `L${l} H${h}`).join(', ');
    const [was, now] = [plain[0], next[q][0]];
    line = `After ${shown(before)}, with ${names} knocked out the model expects (${goes}). `
      + (was.id === now.id ? `Its likeliest stays ${predicted(now)}: ${pct(was.p)} with every head → ${pct(now.p)}.`
        : `Its likeliest changes: ${predicted(was)} ${pct(was.p)} with every head → ${predicted(now)} ${pct(now.p)}.`)
      + ' Hollow bars: with every head.';
  }
  setText($('next-line'), line);
  const row = (p, was) => {
    const li = document.createElement('li');
    const bar = document.createElement('span');
    bar.className = 'next-bar';
    bar.style.width = `${Math.max(1, Math.round(p.p * 100))}%`;
    const label = document.createElement('span');
    label.className = 'next-label';
    const change = was === undefined ? '' : was ? ` (${pct(was.p)} with every head)` : ` (not in the ${plain.length} likeliest with every head)`;
    label.textContent = `${predicted(p)} ${pct(p.p)}${change}${p.id === following ? ' ← the text\'s next token' : ''}`;
    li.classList.toggle('chosen', p.id === following);
    if (was) {
      const ghost = document.createElement('span');
      ghost.className = 'next-was';
      ghost.style.width = `${Math.max(1, Math.round(was.p * 100))}%`;
      li.append(ghost);
    }
    li.append(bar, label);
    li.title = `token ${p.id} (${p.token}): p = ${p.p.toPrecision(4)}${was ? `; with every head ${was.p.toPrecision(4)}` : ''}`;
    return li;
  };
  const rows = next[q].map((p) => row(p, plain ? plain.find((x) => x.id === p.id) ?? null : undefined));
  // the likeliest with every head that the knock-out pushed out of the list
  const gone = plain ? plain.filter((x) => !next[q].some((p) => p.id === x.id)) : [];
  if (gone.length) {
    const li = document.createElement('li');
    li.className = 'next-gone';
    li.textContent = `With every head, also: ${gone.map((x) => `${predicted(x)} ${pct(x.p)}`).join(', ')} (now below the ${next[q].length} likeliest).`;
    rows.push(li);
  }
  $('next-list').replaceChildren(...rows);
}

/** The sink switch, and while it is on, the line that says the views are not the model's attention. */
function sinkNote(s) {
  $('nosink').checked = s.noSink;
  const r = s.run, on = s.noSink && Boolean(r) && !s.translation;
  $('sink-note').hidden = !on;
  $('nosink-note').hidden = !on;
  if (!on) return;
  const b = Math.min(s.item, r.B - 1), first = r.results[b]?.labels?.[0] ?? '';
  // the share the focused head gives the first token, averaged over its rows (the sink's size;
  // a long text's once its layer is here)
  const T = r.T, n = r.results[b].length, v = r.head(b, Math.min(s.layer, r.L - 1), Math.min(s.head, r.H - 1));
  let share = 0;
  for (let q = 0; v && q < n; q++) share += v[q * T];
  setText($('sink-note'), `A view, not the model's attention: the first token (“${visibleText(first)}”) is hidden from every attention view and each row is rescaled to sum to 1 over the other tokens.${v ? ` L${s.layer} H${s.head} gives it ${(100 * share / n).toFixed(1)}% of its attention on average.` : ''}${r.mask_kind === 'causal' ? ' The first row, which can read only the first token, is left empty.' : ''}`);
}

/** The heads' roles: what the run scored them on and its strongest head of the role shown, or,
 *  a role chosen on a text that does not repeat, how to get one. */
function rolesNote(s) {
  const r = s.run, role = ROLES[s.metric] && !s.translation && r && !r.generated ? s.metric : '';
  $('find-heads').hidden = Boolean(s.translation || s.modelInfo?.decoder);
  $('roles-note').hidden = !role;
  if (!role) return;
  const b = Math.min(s.item, r.B - 1), repeat = r.repeatOf?.(b), v = r.metric(b, role);
  if (!repeat || !v) {
    setText($('roles-note'), r.roleNames?.length ? 'The roles read a text that repeats a sequence of tokens from its start, at least twice ("the cat sat the cat sat"). This one does not: "Find the heads" writes one.' : 'Scoring the heads\' roles…');
    return;
  }
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[best]) best = i;
  const l = Math.floor(best / r.H), h = best % r.H;
  setText($('roles-note'), `This text repeats a sequence of ${repeat.period} tokens: each head is coloured by its ${metricLabel(role, s.modelInfo)}. The strongest is L${layerNumber(r, l)} H${h} (${v[best].toFixed(3)}); hover a head for its four roles, or open the heads table to sort by them.`);
  // "Find the heads" focuses the strongest, so the head view shows what it reads
  if (findingHeads) {
    findingHeads = false;
    if (s.layer !== l || s.head !== h) store.update({ layer: l, head: h });
  }
}
/** Whether "Find the heads" was clicked and its run has not yet focused its strongest head. */
let findingHeads = false;

/** The value switch: what the views show, and the focused head's value sizes (the first key's
 *  beside the largest and the mean: a sink's weight is heavy, its value small). */
function valueNote(s) {
  $('byvalue').checked = s.byValue;
  const r = s.run, on = s.byValue && Boolean(r) && !s.translation;
  $('value-note').hidden = !on;
  $('byvalue-note').hidden = !on;
  if (!on) return;
  if (r.long || r.generated || r.given) {
    setText($('value-note'), r.long ? 'A long text\'s run: its heads come one at a time, and the views show their weights, not weighed by the values.'
      : 'This attention comes without its values (a generation\'s steps, or attention given from a file): the views show the weights.');
    return;
  }
  const b = Math.min(s.item, r.B - 1), l = Math.min(s.layer, r.L - 1), h = Math.min(s.head, r.H - 1);
  const n = r.valueNormsOf(b, l, h), labels = r.results[b].labels, T = r.results[b].length;
  if (!n) { setText($('value-note'), 'Computing each key\'s ‖W_O v‖…'); return; }
  let top = 0, mean = 0;
  for (let k = 0; k < T; k++) { mean += n[k] / T; if (n[k] > n[top]) top = k; }
  setText($('value-note'), `A view, not the model's attention: each weight times the size of what the head writes from that key, ‖W_O·v‖ (its value through its part of the output projection; Kobayashi et al. 2020), each row rescaled to sum to 1. L${layerNumber(r, l)} H${h}'s values: the first token (“${visibleText(labels[0])}”) ${n[0].toFixed(2)}, the largest (“${visibleText(labels[top])}”) ${n[top].toFixed(2)}, their mean ${mean.toFixed(2)}.`);
}

/** A long text's run: what the engine kept, and what the page does for it. */
function longNote(s) {
  const r = s.run, on = Boolean(r?.long) && !s.translation;
  $('long-note').hidden = !on;
  if (!on) return;
  const mb = (x) => `${Math.round(x / 1e6)} MB`;
  const a = s.modelInfo?.architecture, d = a?.head_dim ?? 0, kv = a?.heads.key_value ?? r.H;
  const kept = r.B * r.L * r.T * (r.H + kv) * d * 4, all = r.B * r.L * r.H * r.T * r.T;
  const b = Math.min(s.item, r.B - 1), l = Math.min(s.layer, r.L - 1), h = Math.min(s.head, r.H - 1);
  setText($('long-note'), `${r.T} tokens: every head's attention would be ${(all / 1e6).toFixed(0)}M probabilities (${mb(4 * all)}), so the engine kept each layer's queries and keys${d ? ` (${mb(kept)})` : ''} and computes a head again when you look at it. `
    + (r.hasHead(b, l, h) ? `L${layerNumber(r, l)} H${h} is here.` : `Computing L${layerNumber(r, l)} H${h}…`)
    + ' The grid and the table summarise every head; the rollout and words are for shorter texts.');
}

const sim = (x) => x.toFixed(4);
/** The knocked-out heads and what they change: the sentence embedding with vs without them. */
function knockStatus(s) {
  const r = s.run;
  $('knock-status').hidden = isGiven(s); // given attention has no model to run again without a head
  $('knock-reset').hidden = !s.off.length;
  // the focused head's own switch: a phone has no Alt-click, a keyboard no click
  const focused = `${s.layer}:${s.head}`;
  setText($('knock-toggle'), `knock out L${s.layer} H${s.head}`);
  $('knock-toggle').setAttribute('aria-pressed', String(s.off.includes(focused)));
  // grouped-query attention: the query heads sharing the focused head's key/value head, at once
  const q = s.modelInfo?.architecture?.heads?.query, kv = s.modelInfo?.architecture?.heads?.key_value;
  const per = q && kv && kv < q ? q / kv : 0, group = per ? Math.floor(s.head / per) : 0;
  $('knock-group').hidden = !per;
  if (per) {
    const keys = Array.from({ length: per }, (_, i) => `${s.layer}:${group * per + i}`);
    setText($('knock-group'), `knock out L${s.layer} H${group * per}–${group * per + per - 1} (they share key/value head ${group})`);
    $('knock-group').setAttribute('aria-pressed', String(keys.every((k) => s.off.includes(k))));
  }
  if (!s.off.length) {
    setText($('knock-line'), `Knock the focused head out (or Alt-click a head): its context is zeroed before the output projection, and every later layer feels it${s.modelInfo?.lm_head ? '; the next-token panel then shows the probabilities with and without it, and a generation writes again without it' : ''}.`);
    return;
  }
  const names = s.off.map((k) => k.replace(/^(\d+):(\d+)$/, 'L$1 H$2')).join(', ');
  let line = `Knocked out: ${names}.`;
  if (r && r.baseline(0)) {
    const item = Math.min(s.item, r.B - 1);
    line += ` Sentence embedding, cosine with vs without them: ${sim(cosine(r.embedding(item), r.baseline(item)))}.`;
    if (r.B > 1) {
      const pairs = [];
      for (let i = 0; i < r.B; i++) for (let j = i + 1; j < r.B; j++) pairs.push(`${i + 1}↔${j + 1}: ${sim(cosine(r.baseline(i), r.baseline(j)))} → ${sim(cosine(r.embedding(i), r.embedding(j)))}`);
      line += ` Similarity between sentences (all heads → knocked out): ${pairs.join(', ')}.`;
    }
  }
  setText($('knock-line'), line);
}

/** Compare mode's one line: what ΔA shows, or why the two are side by side. */
function compareStatus(s) {
  const c = s.compare && s.run?.B === 2 ? s.run : null;
  $('compare-status').hidden = !c;
  if (!c) return;
  const [a, b] = c.results.map((x) => x.length);
  if (a === b) {
    setText($('compare-status'), `Both sentences are ${a} tokens: the grid shows each head's largest |ΔA|, the head view ΔA = second − first (blue: the second attends more, red: less).`);
  } else {
    setText($('compare-status'), `The sentences tokenise to ${a} and ${b} tokens, so there is no cell-by-cell ΔA: they are shown side by side (first, then second).`);
  }
}

// the link follows the intent, written in a task of its own after typing pauses
const HASH_KEYS = Object.keys(INTENT_DEFAULTS);
let hashTimer = 0;
function syncHash() {
  clearTimeout(hashTimer);
  const h = writeHash(store.get());
  if (h !== location.hash) history.replaceState(null, '', h);
}
store.subscribe((s, changed) => {
  if (HASH_KEYS.some((k) => changed.has(k))) {
    clearTimeout(hashTimer);
    hashTimer = setTimeout(syncHash, 120);
  }
  // a token written (the generation alone changed) changes nothing the chrome shows: the
  // generate view's subscriber draws it, and a generating page draws a frame a token
  if (changed.size > 1 || !changed.has('generation')) renderChrome(s, changed);
  // a model trained with another mask switches it (scope.js): the control follows
  if (changed.has('mask') && $('mask').value !== s.mask) $('mask').value = s.mask;
  // an exercise checked colours the grid by the role it asked of (web/exercises.js): the control follows
  if (changed.has('metric') && $('metric').value !== s.metric) { $('metric').value = s.metric; describeChoices(); }
  if (changed.has('rendered') && s.run) { api.renders++; api.lastRenderAt = performance.now(); }
  // another engine loads the model again; an engine a load settled on itself comes with its model
  if (changed.has('engine') && !changed.has('modelVersion') && !linkedModel) loadWithEngine(s);
  if (changed.has('modelVersion')) syncInputs(store.get()); // the input a model opens on, and where it came from
});
/** Loads the model with the engine just chosen: the one on screen, or, where none loaded (the
 *  first load failed), the one the link names, so that switching engines recovers from any failure. */
function loadWithEngine(s) {
  if (isGiven(s)) return; // given attention has no engine to change
  try { scope.loadModel(s.modelSource ?? sourceOf(s)); } catch (e) { store.update({ modelError: { line: e.message } }); }
}
/** Whether a link is loading another model (the engine it names goes with that load). */
let linkedModel = false;

// ---------- controls → state ----------
const on = (id, ev, f) => $(id).addEventListener(ev, f);
on('sentence', 'input', (e) => store.update({ sentences: [e.target.value, ...store.get().sentences.slice(1)] }));
on('sentence', 'keydown', (e) => { if (e.key === 'Enter') e.preventDefault(); }); // one sentence: the box wraps it (presenter mode), Enter adds no line
on('pair', 'input', (e) => store.update({ pair: e.target.value }));
on('mask', 'change', (e) => store.update({ mask: e.target.value }));
on('batch-mode', 'change', (e) => {
  const s = store.get();
  const batch = e.target.checked;
  // keep what was typed: the sentence becomes the batch's first line, and the batch's lines
  // are kept when going back (the first one shows in the sentence box)
  let sentences = s.sentences;
  // a batch of one gets the model's own batch example's other sentences (a translation's sources)
  const example = s.modelInfo?.decoder ? TRANSLATION_EXAMPLES.find((x) => x.id === 'dates-batch') : EXAMPLES.find((x) => x.id === 'batch');
  if (batch && sentences.length < 2) sentences = [sentences[0] || '', ...example.state.sentences.slice(1).map((x) => splitLine(x).source)].filter((x) => x.trim());
  store.update({ batch, sentences, item: 0 });
  syncInputs(store.get());
});
on('batch', 'input', (e) => store.update({ sentences: e.target.value.split('\n') }));
on('item', 'change', (e) => store.update({ item: +e.target.value }));
on('view', 'change', (e) => store.update({ view: e.target.value }));
on('part', 'change', (e) => store.update({ part: e.target.value, sel: [] }));
on('scale', 'change', (e) => store.update({ scale: e.target.value }));
on('presenter', 'change', (e) => {
  store.update({ presenter: e.target.checked });
});
on('words', 'change', (e) => { // the selection follows: a piece's word, or a word's pieces
  const s = store.get(), words = e.target.checked;
  const sel = s.run && s.sel.length ? carrySel(s.run, Math.min(s.item, s.run.B - 1), s.sel, words) : [];
  store.update({ words, sel, win: null, hover: null });
});
on('engine', 'change', (e) => store.update({ engine: e.target.value }));
on('numerics', 'change', (e) => store.update({ numerics: e.target.value === 'fast' ? 'fast' : 'exact' }));
on('metric', 'change', (e) => { store.update({ metric: e.target.value }); describeChoices(); });
on('knock-reset', 'click', () => store.update({ off: [] }));
on('nosink', 'change', (e) => store.update({ noSink: e.target.checked }));
on('byvalue', 'change', (e) => store.update({ byValue: e.target.checked }));
// a random sequence of words twice, coloured by the induction role (a decoder's induction heads light up)
on('find-heads', 'click', () => {
  findingHeads = true;
  store.update({ sentences: [repeatedText(), ...store.get().sentences.slice(1)], batch: false, compare: false, item: 0, metric: 'role:induction' });
  syncInputs(store.get());
});
on('knock-toggle', 'click', () => { const s = store.get(); store.update({ off: toggleHead(s.off, s.layer, s.head) }); });
on('knock-group', 'click', () => {
  const s = store.get(), { query, key_value: kv } = s.modelInfo.architecture.heads, per = query / kv;
  store.update({ off: toggleGroup(s.off, s.layer, Math.floor(s.head / per), per) });
});
// "On this page:": the hash holds the view, so a link scrolls to its section (and moves the
// keyboard there) instead of navigating
on('page-nav', 'click', (e) => {
  const a = e.target.closest('a[href^="#"]');
  if (!a) return;
  e.preventDefault();
  const section = $(a.getAttribute('href').slice(1));
  const heading = section.querySelector('h2');
  heading.tabIndex = -1;
  heading.focus({ preventScroll: true });
  section.scrollIntoView({ block: 'start' });
});
on('compare-mode', 'change', (e) => {
  const s = store.get();
  const compare = e.target.checked;
  // a minimal pair to start from when the sentence box holds the default example
  const sentences = compare && s.sentences[0] === INTENT_DEFAULTS.sentences[0] ? [COMPARE_FIRST] : s.sentences;
  store.update({ compare, sentences, item: 0, batch: compare ? false : s.batch });
  syncInputs(store.get());
});
on('compare-text', 'input', (e) => store.update({ compareText: e.target.value }));
on('table-details', 'toggle', (e) => store.update({ table: e.target.open }));
for (const d of document.querySelectorAll('details[data-panel]')) {
  d.addEventListener('toggle', () => {
    const open = new Set(store.get().inside);
    if (d.open) open.add(d.dataset.panel); else open.delete(d.dataset.panel);
    store.update({ inside: [...INSIDE, ...DECODER_INSIDE].filter((id) => open.has(id)) });
  });
}
on('rollout-details', 'toggle', (e) => store.update({ rollout: e.target.open }));
on('writes-details', 'toggle', (e) => store.update({ writes: e.target.open }));
on('flow-details', 'toggle', (e) => store.update({ flow: e.target.open }));
// a "predict, then check" exercise: its text in the box, its question above the model view
for (const b of document.querySelectorAll('.exercise-starts [data-exercise]')) {
  b.addEventListener('click', () => {
    store.update(startExercise(b.dataset.exercise));
    syncInputs(store.get());
    $('model-panel').scrollIntoView({ block: 'start', behavior: 'smooth' });
  });
}
on('example', 'change', (e) => {
  const ex = examplesOf(store.get().modelInfo).find((x) => x.id === e.target.value);
  if (!ex) return;
  // a new source opens on its last step: a translation example's step waits for its translation
  exampleStep = ex.state.step ?? null;
  // a decoder's example that writes: once its sentence's run is in
  exampleGen = ex.gen ? { maxNew: ex.gen, chat: Boolean(ex.state.chat) } : null;
  store.update({ item: 0, win: null, ...ex.state });
  syncInputs(store.get());
  // its text already run (a link to the model opened on it) and nothing to run again: it writes now
  exampleWrites(store.get());
});
let exampleGen = null;
store.subscribe((s, changed) => { if (changed.has('run')) exampleWrites(s); });
/** A worked example that writes: once the run of its text is in (and no other under way). */
function exampleWrites(s) {
  if (!exampleGen || !s.run || s.run.generated || s.busy || !canGenerate(s.modelInfo) || s.run.results[0]?.text !== s.sentences[0]) return;
  const { maxNew, chat } = exampleGen;
  exampleGen = null;
  generating.start(maxNew, chat && Boolean(s.modelInfo.chat_template));
}
let exampleStep = null;
store.subscribe((s, changed) => {
  if (exampleStep === null || !changed.has('translation') || !s.translation) return;
  const step = exampleStep;
  exampleStep = null;
  store.update({ step });
});

// The keys act on the view that has the focus (the model grid, the head view, the translation
// view: each handles its own); elsewhere the page scrolls as usual. Presenter mode adds a
// presentation clicker's keys, which work wherever the focus is (a clicker cannot focus a view).
document.addEventListener('keydown', (e) => {
  const s = store.get();
  if (!s.modelInfo || e.defaultPrevented) return;
  if (e.key === 'Escape' && s.sel.length && !e.target.closest?.('input:not([type=checkbox]), textarea, select, dialog')) { store.update({ sel: [] }); return; }
  if (s.presenter && !e.altKey && !e.ctrlKey && !e.metaKey && clickerKey(e.key, e.target)) e.preventDefault();
});

// Whether the focus last moved by a pointer (a click, a tap) rather than by Tab. Chrome's
// :focus-visible cannot tell alone: a clicked button matches it from the first key pressed on it.
let focusByPointer = false;
document.addEventListener('pointerdown', () => { focusByPointer = true; }, true);
document.addEventListener('keydown', (e) => { if (e.key === 'Tab') focusByPointer = false; }, true);

/** A clicker's keys: next and back (PageDown/PageUp, → ←), Space plays or stops. */
const CLICKER_STEPS = { PageDown: 1, ArrowRight: 1, PageUp: -1, ArrowLeft: -1 };
/**
 * Presenter mode: `key` steps through the decoding (a translation model's steps) or the encoder's
 * layers, or Space plays them from the focused one (a layer every LAYER_PLAY_MS) or stops, unless
 * `target` is a control that uses the key itself (typing, a select, a slider; Space on a button
 * or a checkbox the keyboard focused: one clicked with the mouse leaves Space to the clicker).
 * Returns whether the key was the clicker's.
 */
function clickerKey(key, target) {
  if (target.closest?.('input:not([type=checkbox]), textarea, select, dialog, [contenteditable]')) return false;
  if (key === ' ' && !focusByPointer && target.closest?.('button, input, summary, a[href]')?.matches(':focus-visible')) return false;
  const s = store.get(), along = presentedSteps(s);
  if (!along) return false;
  if (key === ' ') {
    play.toggle(along);
    return true;
  }
  const d = CLICKER_STEPS[key];
  if (!d) return false;
  play.stop();
  const now = s[along.key] ?? along.count - 1; // a translation's step is null at its last
  store.update({ [along.key]: Math.max(0, Math.min(along.count - 1, now + d)) });
  return true;
}

/** What play and presenter mode step through: a translation's steps, a finished generation's, or
 *  the layers; null before a result. */
function presentedSteps(s) {
  const g = s.generation;
  if (g?.result && !g.running && g.result.output_ids.length) return { key: 'step', count: g.result.output_ids.length, ms: PLAY_MS };
  if (s.modelInfo?.decoder) {
    const tr = s.translation;
    return tr && { key: 'step', count: tr.results[Math.min(s.item, tr.results.length - 1)].output_ids.length - 1, ms: PLAY_MS };
  }
  return s.run && { key: 'layer', count: s.run.L, ms: LAYER_PLAY_MS };
}

// check: this engine against the other, and against PyTorch on the worked examples
on('check', 'click', async () => {
  const out = $('check-result');
  const s = store.get();
  out.textContent = 'checking…';
  try {
    const parts = []; // {line, worst?: max |Δ|, same?: the same output ids}
    if (s.engineStatus && !/WebGPU is not available|CPU engine \(chosen\)|so the CPU engine runs the model/.test(s.engineStatus.line)) { // worker.js makeSession
      const texts = textsOf(s);
      if (texts.length) {
        const c = s.modelInfo?.decoder
          ? await engine().checkTranslation(s.modelKey, { sources: texts.map((t) => splitLine(t).source) })
          : await engine().check(s.modelKey, { texts, pair: s.pair, mask: s.mask });
        if (c.other !== 'cpu') parts.push({ line: `CPU vs WebGPU: ${c.sameIds === false ? 'different output ids, ' : ''}max |Δ| = ${c.maxAbsDiff.toExponential(2)}`, worst: c.maxAbsDiff, same: c.sameIds !== false });
      }
    }
    parts.push(await compareWithReference(s));
    out.textContent = [verdict(parts), ...parts.map((p) => p.line)].filter(Boolean).join(' · ');
  } catch (err) {
    out.textContent = `check failed: ${err.message || err}`;
  }
  out.title = out.textContent; // the header shows one line of it (style.css)
});

/** How close the engines agree, first in the header's one line (its whole text is the title):
 *  `✓ max |Δ| 4.6e-07` where every comparison is within CHECK_TOL with the same output ids, else ✗. */
const CHECK_TOL = 1e-4; // the project's bound on attention probabilities (docs/correctness.md)
function verdict(parts) {
  const measured = parts.filter((p) => p.worst !== undefined);
  if (!measured.length) return '';
  const worst = Math.max(...measured.map((p) => p.worst));
  const ok = worst <= CHECK_TOL && measured.every((p) => p.same !== false);
  return `${ok ? '✓' : '✗'} max |Δ| ${worst.toExponential(1)}`;
}

/** Runs the worked examples that have PyTorch reference numbers and reports the largest gap: `{line, worst?}`. */
async function compareWithReference(s) {
  if (s.modelInfo?.decoder) return compareTranslations(s);
  if (s.modelInfo?.name !== 'all-MiniLM-L6-v2') return { line: 'PyTorch reference numbers ship for all-MiniLM-L6-v2 and the dates model only' };
  const resp = await fetch(new URL('./reference/minilm.json', import.meta.url));
  if (!resp.ok) throw new Error(`reference numbers: HTTP ${resp.status}`);
  const ref = await resp.json();
  let worst = 0;
  for (const c of ref.cases) {
    const r = await engine().run(s.modelKey, { texts: c.texts, pair: c.pair ?? '', mask: c.mask });
    c.attention.forEach((want, b) => { worst = Math.max(worst, maxAbsDiff(want, r.results[b].attention)); });
  }
  return { line: `${store.get().run?.backend ?? 'engine'} vs PyTorch (${ref.source}) on ${ref.cases.length} worked examples: max |Δ| = ${worst.toExponential(2)}`, worst };
}

/** The dates model against HF's generate on four dates (web/reference/dates.json, written by
 *  tools/make_fixtures.py): the same ids, and the three attentions' largest gap: `{line, worst?, same?}`. */
async function compareTranslations(s) {
  if (s.modelInfo.name !== 'dates') return { line: 'PyTorch reference numbers ship for all-MiniLM-L6-v2 and the dates model only' };
  const resp = await fetch(new URL('./reference/dates.json', import.meta.url));
  if (!resp.ok) throw new Error(`reference numbers: HTTP ${resp.status}`);
  const ref = await resp.json();
  let worst = 0, backend = 'engine', ids = 0;
  for (const c of ref.cases) {
    const tr = await engine().translate(s.modelKey, { sources: [c.source] });
    const r = tr.results[0];
    backend = tr.backend;
    if (r.output_ids.join() === c.output_ids.join()) ids++;
    for (const k of ['encoder_attention', 'decoder_attention', 'cross_attention']) worst = Math.max(worst, maxAbsDiff(c[k], r[k]));
  }
  return { line: `${backend} vs PyTorch (${ref.source}) on ${ref.cases.length} dates: the same output ids for ${ids} of ${ref.cases.length}, three attentions max |Δ| = ${worst.toExponential(2)}`, worst, same: ids === ref.cases.length };
}

// ---------- share ----------
/** The iframe snippet's width (CSS px, a blog column's; it shrinks to a narrower one); its height is the embed's own. */
const EMBED_WIDTH = 640;
/** How tall the embed is drawn to measure it: tall enough that its views size by its width. */
const MEASURE_HEIGHT = 2000;
/** The iframe's height until (or unless) the embed is measured. */
const GUESSED_HEIGHT = 760;

/** The text inside a shared <attn-scope>, shown until its script runs, and for good where it
 *  cannot load (escaped: it goes into HTML). */
const elementFallback = (script) => `attnscope draws its view here once ${new URL(script).host} lets this page load ${new URL(script).pathname}. If this stays, that server does not allow other sites to load it (it must send Access-Control-Allow-Origin: *), or it is offline; the iframe snippet works anywhere.`
  .replace(/&/g, '&amp;').replace(/</g, '&lt;');

/**
 * Why an <attn-scope> pasted into another site would fail to load from this one, or '' when this
 * server sends the headers that let it (scripts/headers.txt): Access-Control-Allow-Origin for the
 * module script, its worker, wasm and model files; Cross-Origin-Resource-Policy where the other
 * page is cross-origin isolated.
 */
async function elementBlocked(script, model) {
  const missing = [];
  for (const url of [script, model].filter(Boolean)) {
    if (new URL(url).origin !== location.origin) continue; // another site's: its own headers, not read here
    try {
      const r = await fetch(url, { method: 'HEAD', cache: 'no-store' });
      if (r.headers.get('access-control-allow-origin') !== '*') missing.push(`Access-Control-Allow-Origin: * for ${new URL(url).pathname}`);
    } catch { /* offline: nothing to say */ }
  }
  return missing.length ? `This server sends no ${[...new Set(missing)].join(', no ')}: pasted into another site, the element will only show a note saying so. Send the headers in scripts/headers.txt (docs/app.md, "Publishing"), or use the iframe above.` : '';
}

/** A URL that works from any page: a relative one resolved against this page. */
const absolute = (u) => (/^[a-z][a-z0-9+.-]*:/i.test(u) ? u : new URL(u, location.href).href);

/** The element's view that an exercise under way is shared with: where its answer is given. */
const EXERCISE_VIEWS = { 'previous-token': 'roles', 'knock-out': 'writes' };

/** The link, the embed's URL, the element's script, the iframe snippet of a given height, and the <attn-scope> snippet
 *  with every setting of the view the element takes (web/attn-scope.js) and its model's absolute URL.
 *  A generation is shared as the element's view="generate": it writes the same tokens (`gen`,
 *  `chat`) and shows the focused step's head view, as the iframe (the page, which writes them too). */
function shareSnippets(s) {
  const page = new URL(location.href);
  page.hash = writeHash(s);
  const view = s.view === 'lines' ? 'lines' : 'head';
  const generated = s.gen > 0 && Boolean(s.generation);
  const embedUrl = new URL(page.href);
  embedUrl.hash = writeHash({ ...s, embed: view });
  const attr = ([k, v]) => ` ${k}="${String(v).replace(/&/g, '&amp;').replace(/"/g, '&quot;')}"`;
  const script = new URL('../attn-scope.js', import.meta.url).href;
  const texts = textsOf(s), item = Math.min(s.item, Math.max(0, texts.length - 1));
  const batch = s.batch && texts.length > 1 && !texts.some((t) => t.includes('|')); // the attribute separates them by |
  const attrs = [
    ['sentence', texts[item] ?? ''], batch && ['batch', texts.join('|')], batch && item && ['item', item],
    s.pair && ['pair', s.pair], ['mask', s.mask], ['view', generated ? 'generate' : EXERCISE_VIEWS[s.exercise] ?? view],
    s.exercise && ['exercise', s.exercise],
    s.modelInfo?.decoder && s.attn !== 'cross' && ['attention', s.attn],
    ['layer', s.layer], ['head', s.head], s.scale !== 'absolute' && ['scale', s.scale], s.words && ['words', ''], s.part !== 'all' && ['part', s.part],
    s.off.length && ['off', s.off.join(',')], s.step !== null && s.step !== undefined && ['step', s.step],
    generated && ['gen', s.gen], generated && s.chat && ['chat', ''],
    ...(s.hf ? [['hf', s.hf], s.hub && ['hub', absolute(s.hub)]] : [s.model && ['model', absolute(s.model)]]),
    s.engine !== 'auto' && ['engine', s.engine],
  ].filter(Boolean);
  return {
    link: page.href,
    embedUrl: embedUrl.href,
    script,
    iframe: (height) => `<iframe src="${embedUrl.href.replace(/"/g, '%22')}" width="${EMBED_WIDTH}" height="${height}" style="border:0;max-width:100%" title="attnscope: layer ${s.layer}, head ${s.head}"></iframe>`,
    // what a page shows where the script cannot load (its host allows no other site to read it):
    // the element's own content, which its shadow root hides once it runs
    element: `<script type="module" src="${script}"></script>\n<attn-scope${attrs.map(attr).join('')}>${elementFallback(script)}</attn-scope>`,
  };
}

/**
 * The height (CSS px) the embed at `src` takes `width` px wide: the page loaded out of sight in
 * an iframe and measured once its view is drawn and holds still (null if it could not be, or
 * `signal` aborted it first: the iframe goes either way).
 */
function measureEmbed(src, width, signal) {
  const frame = document.createElement('iframe');
  frame.className = 'measure';
  frame.tabIndex = -1;
  frame.setAttribute('aria-hidden', 'true');
  frame.width = String(width);
  frame.height = String(MEASURE_HEIGHT);
  const measured = new Promise((resolve) => {
    signal.addEventListener('abort', () => resolve(null), { once: true });
    frame.addEventListener('load', async () => {
      try {
        const win = frame.contentWindow;
        await win.attnscope.ready;
        // drawn: a render in, and the same height three looks in a row, 100 ms apart
        let last = 0, same = 0;
        for (let i = 0; i < 150 && same < 3 && !signal.aborted; i++) {
          await new Promise((r) => setTimeout(r, 100));
          const h = win.attnscope.renders > 0 ? Math.ceil(win.document.body.getBoundingClientRect().height) : 0;
          same = h > 0 && h === last ? same + 1 : 0;
          last = h;
        }
        resolve(same >= 3 ? last + 8 : null); // 8: slack for rounding (an embed shows no scroll bar, style.css)
      } catch { resolve(null); }
    }, { once: true });
  });
  frame.src = src;
  document.body.append(frame);
  return measured.finally(() => frame.remove());
}

let measuring = new AbortController(); // the share dialog's measurement: closing the dialog ends it
$('share-dialog').addEventListener('close', () => measuring.abort());
on('share', 'click', () => {
  const sn = shareSnippets(store.get());
  $('share-link').value = sn.link;
  $('share-element').value = sn.element;
  $('share-iframe').value = sn.iframe(GUESSED_HEIGHT); // until the view's own is measured
  const copyIframe = document.querySelector('#share-dialog .copy[data-copy="share-iframe"]');
  copyIframe.disabled = true;
  setText($('share-iframe-note'), 'Measuring the view to size the iframe…');
  for (const st of document.querySelectorAll('#share-dialog .copy-status')) st.textContent = '';
  $('share-dialog').showModal();
  measuring = new AbortController();
  const { signal } = measuring;
  $('share-element-warning').hidden = true;
  // the element's script, and its model's first file where this server holds it (a Hub model's are the Hub's)
  const s = store.get(), base = s.hf ? null : urlSource(s.model).base;
  const modelFile = base && (/\.gguf$/i.test(base) ? base : new URL('config.json', base.endsWith('/') ? base : `${base}/`).href);
  elementBlocked(sn.script, modelFile).then((why) => {
    if (signal.aborted) return;
    setText($('share-element-warning'), why);
    $('share-element-warning').hidden = !why;
  });
  measureEmbed(sn.embedUrl, EMBED_WIDTH, signal).then((height) => {
    if (signal.aborted) return;
    $('share-iframe').value = sn.iframe(height ?? GUESSED_HEIGHT);
    copyIframe.disabled = false;
    setText($('share-iframe-note'), height ? `${EMBED_WIDTH} × ${height} px: the view's own size, nothing cut off.` : 'The view could not be measured here: adjust the height to fit.');
  });
});
/** Copies a box's text: the Clipboard API, else (an insecure origin, no permission) the selection. */
async function copyBox(box, status) {
  let ok = true;
  try {
    await navigator.clipboard.writeText(box.value);
  } catch {
    box.focus();
    box.select();
    ok = document.execCommand('copy');
  }
  status.textContent = ok ? 'copied' : 'selected: press Ctrl+C (⌘C) to copy';
}
for (const b of document.querySelectorAll('#share-dialog .copy')) b.addEventListener('click', () => copyBox($(b.dataset.copy), b.parentElement.querySelector('.copy-status')));

// ---------- export ----------
for (const span of document.querySelectorAll('.exports')) {
  const view = span.dataset.view;
  const formats = view === 'head' ? ['svg', 'png', 'json', 'csv'] : ['svg', 'png', 'json'];
  for (const f of formats) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'export';
    b.dataset.format = f;
    b.textContent = f.toUpperCase();
    b.title = `export the ${view === 'model' ? 'model view' : view === 'head' ? 'focused head' : 'steps'} as ${f.toUpperCase()}`;
    b.addEventListener('click', () => {
      const s = store.get();
      if (!s.run) return;
      const v = view === 'head' && s.view === 'lines' ? 'lines' : view;
      // a long run's steps: the window the steps view shows (the page holds its scores a window at a time)
      const part = v === 'steps' && s.run.long ? stepsPart(s.run.T, zoomOf(s, s.run)) : null;
      exportView(v === 'steps' ? s.run : shownOf(s), v, f, { item: Math.min(s.item, s.run.B - 1), layer: s.layer, head: s.head, scale: s.scale, part });
    });
    span.append(b);
  }
}
// the inside-the-layer panels, as drawn: SVG (each canvas a picture, the text as text) and PNG
for (const d of document.querySelectorAll('details[data-panel]')) {
  const id = d.dataset.panel, what = d.querySelector('summary').textContent.replace(/^\d+ · /, '');
  const span = Object.assign(document.createElement('span'), { className: 'exports panel-exports' });
  span.dataset.panel = id;
  span.append(Object.assign(document.createElement('span'), { className: 'muted', textContent: 'export this panel:' }));
  for (const f of ['svg', 'png']) {
    const b = Object.assign(document.createElement('button'), { type: 'button', className: 'export', textContent: f.toUpperCase(), title: `export "${what}" as drawn, as ${f.toUpperCase()}` });
    b.dataset.format = f;
    b.addEventListener('click', () => {
      const s = store.get();
      exportPanel($(`inside-${id}`), f, { name: `attnscope-inside-${id}-L${s.layer}H${s.head}`, title: `attnscope: ${what}, layer ${s.layer}, head ${s.head}` });
    });
    span.append(b);
  }
  d.querySelector('summary').after(span);
}

// ---------- attention computed elsewhere (web/given.js, docs/given.md) ----------

/** Given attention's size, as its records say: an encoder's or a decoder's layers and heads, an encoder–decoder's stacks. */
function givenSize(info) {
  const groups = (q, kv) => (kv && kv !== q ? ` (${kv} key/value heads)` : '');
  const { query, key_value: kv } = info.architecture.heads;
  if (!info.decoder) return `${info.stack ?? 'encoder'}, ${info.layers} layers × ${info.heads} heads${groups(query, kv)}`;
  return `encoder–decoder, decoder ${info.decoder.layers} layers × ${info.decoder.heads} heads${groups(query, kv)}${info.layers ? `, encoder ${info.layers} × ${info.heads}` : ''}`;
}

/**
 * Shows attention computed elsewhere, in place of the model's: `input` the bytes of a file
 * (`name` names it in errors), `data` the URL the link keeps ('' for a file from disk). It opens
 * where the link says (`link` names a layer or a head), else where the file says. A file that
 * cannot be read is the error, naming it; what was shown stays.
 */
function showGivenFile(input, name, data, link = '') {
  let shown;
  try {
    shown = fromGiven(readGiven(input, name), name);
  } catch (e) {
    store.update({ loading: null, modelError: { line: String(e.message || e) } });
    return false;
  }
  const s = store.get();
  scope.showGiven(shown, /(^|[#&])(l|h)=/.test(link) ? { layer: s.layer, head: s.head } : shown.focus);
  // what only a model has: its knocked-out heads, a second sentence, its generation
  store.update({ data, model: '', hf: '', file: '', off: [], sel: [], compare: false, gen: 0, generation: null });
  showSource();
  return true;
}

/** Given attention from a URL (the link's `data=`): fetched, then shown. */
async function loadGivenUrl(url, link = '') {
  store.update({ loading: { name: url, loaded: 0, total: 0 }, modelError: null });
  let bytes;
  try {
    const res = await fetch(new URL(url, location.href));
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    bytes = await res.arrayBuffer();
  } catch (e) {
    store.update({ loading: null, modelError: { line: `Could not load ${url}: ${e.message}` } });
    return false;
  }
  return showGivenFile(bytes, url, url, link);
}

// ---------- loading a model ----------
/** The intent keys a worked example sets, by their names in a link. */
const EXAMPLE_KEYS = { sentences: 's', pair: 'p', batch: 'batch', item: 'i', step: 'st', attn: 'a', layer: 'l', head: 'h', compare: 'cmp' };
const kindOf = (info) => (info?.decoder ? 'translation' : 'encoder');

/**
 * What a model opens on (scope.js loadModel's `opening`): its own first worked example, a date
 * for a translation model and a sentence for an encoder, where the page would otherwise run the
 * other kind's input (BERT's sentence "translated" into a date with <unk>s, a date through BERT).
 * `link`: the hash of the link that opens the model; what it names stays as it says, and a
 * sentence it gives (`s=`) is kept whatever the model. Without a link (a model chosen in the
 * page), the example comes only with a change of kind: another encoder keeps the sentence.
 */
function openingOf(link = null) {
  const named = link === null ? null : new URLSearchParams(link.replace(/^#/, ''));
  return (info, s) => {
    if (named ? named.has('s') : kindOf(s.modelInfo) === kindOf(info)) return {};
    const { state } = examplesOf(info)[0];
    // a translation's step and attention where the example names none (an encoder's: none), one item, no second sentence to compare with
    const opens = { ...state, step: state.step ?? INTENT_DEFAULTS.step, attn: state.attn ?? INTENT_DEFAULTS.attn, item: state.item ?? 0, compare: false };
    // an encoder's example names its head: in the loaded model's range
    if ('layer' in state) opens.layer = Math.min(state.layer, info.layers - 1);
    if ('head' in state) opens.head = Math.min(state.head, info.heads - 1);
    const patch = {};
    for (const [k, name] of Object.entries(EXAMPLE_KEYS)) if (k in opens && !named?.has(name)) patch[k] = opens[k];
    return patch;
  };
}

async function loadFiles(fileList) {
  const files = {};
  for (const f of fileList) files[f.name] = f;
  // one GGUF file holds a whole checkpoint; a folder's three files may bring its chat template
  // (tokenizer_config.json, chat_template.jinja)
  const gguf = Object.keys(files).find((n) => /\.gguf$/i.test(n));
  // one .json or .safetensors file alone: attention computed elsewhere (docs/given.md)
  const names = Object.keys(files);
  if (!gguf && names.length === 1 && /\.(json|safetensors)$/i.test(names[0]) && names[0] !== 'config.json') {
    await showGivenFile(await files[names[0]].arrayBuffer(), names[0], '');
    return;
  }
  const need = gguf ? [gguf] : ['config.json', 'model.safetensors', 'tokenizer.json', ...['tokenizer_config.json', 'chat_template.jinja'].filter((n) => files[n])];
  const missing = need.filter((n) => !files[n]);
  if (missing.length) {
    store.update({ modelError: { line: `Missing ${missing.join(', ')}: a checkpoint needs config.json, model.safetensors and tokenizer.json (or one .gguf file); attention computed elsewhere is one .json or .safetensors file (docs/given.md).` } });
    return;
  }
  const bufs = {};
  for (const n of need) bufs[n] = await files[n].arrayBuffer();
  const key = `files:${need.map((n) => `${files[n].name}:${files[n].size}:${files[n].lastModified}`).join('|')}`;
  if (await scope.loadModel({ key, name: gguf ?? 'local files', files: bufs }, { opening: openingOf() })) store.update({ model: '', hf: '', data: '' });
  showSource();
}
on('files', 'change', (e) => { loadFiles([...e.target.files]); e.target.value = ''; }); // picking the same files again loads them again
document.addEventListener('dragover', (e) => { e.preventDefault(); $('drop-hint').hidden = false; });
document.addEventListener('dragleave', () => { $('drop-hint').hidden = true; });
document.addEventListener('drop', (e) => { e.preventDefault(); $('drop-hint').hidden = true; loadFiles(e.dataTransfer.files); });
on('load-url', 'click', async () => {
  const url = $('model-url').value.trim();
  if (!url) { store.update({ modelError: { line: 'Give the base URL of a folder with config.json, model.safetensors and tokenizer.json.' } }); return; }
  if (await scope.loadModel(urlSource(url), { refresh: true, opening: openingOf() })) store.update({ model: url, hf: '', data: '' });
  showSource();
});
async function loadHub() {
  // a model's address on the Hub, pasted, is read as its id; a .gguf file's as its id and file
  const typed = $('model-hf').value.trim().replace(/^(https?:\/\/)?(www\.)?(huggingface\.co|hf\.co)\//, '');
  const file = typed.match(/\/(?:blob|resolve)\/[^/]+\/(.+\.gguf)$/i)?.[1] ?? '';
  const id = typed.replace(/\/(tree|blob|resolve)\/.*$/, '').replace(/\/+$/, '');
  if (!id) { store.update({ modelError: { line: 'Give a model id on the Hugging Face Hub, e.g. openai-community/gpt2.' } }); return; }
  let source;
  try { source = hubSource(id, store.get().hub, file); } catch (e) { store.update({ modelError: { line: e.message } }); return; }
  if (await scope.loadModel(source, { opening: openingOf() })) store.update({ hf: id, file, model: '', data: '' });
  showSource();
}

/** The model choice at the top of the page ("Model"): the built-in models of "Built in" below,
 *  by their short names, and a checkpoint loaded below (the Hub, a URL, files) by its own. */
const OTHER_MODEL = '#other';
$('model-pick').replaceChildren(
  ...[...$('model-builtin').options].map((o) => Object.assign(document.createElement('option'), { value: o.value, textContent: o.dataset.short ?? o.textContent })),
  Object.assign(document.createElement('option'), { value: OTHER_MODEL, hidden: true }),
);
/** The model selects and the URL and Hub fields show where the model came from: the other one is emptied. */
function showSource() {
  const s = store.get();
  const fromFiles = s.modelSource && !s.modelSource.base; // chosen from disk: no URL, no id
  const given = isGiven(s); // attention computed elsewhere: no model
  const builtin = !given && [...$('model-builtin').options].some((o) => o.value === s.model) && !s.hf && !fromFiles;
  $('model-builtin').value = builtin ? s.model : '';
  $('model-url').value = builtin ? '' : s.model;
  $('model-hf').value = s.hf && s.file ? `${s.hf}/resolve/main/${s.file}` : s.hf;
  const other = $('model-pick').querySelector(`option[value="${OTHER_MODEL}"]`);
  // what the choice says is true: a model that did not load (no model running) is named as it
  // was asked for, as failed, and choosing any model, that one too, loads it
  const failed = !s.modelInfo && !!s.modelError;
  other.hidden = builtin && !failed;
  other.textContent = given ? `${s.modelInfo.name} (given attention)` : failed ? `${s.hf || (builtin ? urlSource(s.model).name : s.model)} (failed)`
    : builtin ? '' : `${s.hf || (fromFiles ? s.modelSource.name : urlSource(s.model).name)} (loaded below)`;
  $('model-pick').value = builtin && !failed ? s.model : OTHER_MODEL;
}
async function loadBuiltin(url) {
  if (await scope.loadModel(urlSource(url), { opening: openingOf() })) store.update({ model: url, hf: '', data: '' });
  showSource(); // the choice that failed to load gives way to the model still running
}
on('load-hf', 'click', loadHub);
on('model-builtin', 'change', (e) => loadBuiltin(e.target.value));
on('model-pick', 'change', (e) => { if (e.target.value !== OTHER_MODEL) loadBuiltin(e.target.value); });
on('model-hf', 'keydown', (e) => { if (e.key === 'Enter') loadHub(); });
on('cancel-load', 'click', () => scope.cancel());
// (the run under way, or a long generation's pass: its stop ends the generation)
$('run-status').querySelector('.stop-run').addEventListener('click', () => { scope.stopRun(); generating.stop(); });

window.addEventListener('hashchange', () => {
  const next = parseHash(location.hash), before = store.get();
  // a link to another model (the cross-attention panel's to the dates model, the back button):
  // the state first (its engine too), then the one load, with that engine
  linkedModel = next.model !== before.model || next.hf !== before.hf || next.hub !== before.hub || next.file !== before.file;
  const linkedData = next.data !== before.data;
  store.update(next);
  syncInputs(store.get());
  if (linkedData && next.data) { linkedModel = false; loadGivenUrl(next.data); return; }
  if (linkedModel || linkedData) {
    linkedModel = false;
    try { scope.loadModel(sourceOf(next), { opening: openingOf(location.hash) }); } catch (e) { store.update({ modelError: { line: e.message } }); }
    // a link into the decoder's panels (the encoder's cross panel's) shows them once drawn
    scrollToDecoder = next.inside.some((id) => DECODER_INSIDE.includes(id));
  }
});
let resizeFrame = 0;
window.addEventListener('resize', () => {
  cancelAnimationFrame(resizeFrame);
  resizeFrame = requestAnimationFrame(() => store.update({ size: `${window.innerWidth}x${window.innerHeight}` }));
});

// ---------- start ----------
const startLink = location.hash; // what the link names, before the page writes the whole state into it
syncHash(); // the link shows the whole state from the start
syncInputs(store.get());
renderChrome(store.get(), new Set(['run']));
let start;
try {
  start = store.get().data ? loadGivenUrl(store.get().data, startLink) : scope.loadModel(sourceOf(store.get()), { opening: openingOf(startLink) });
} catch (e) { store.update({ modelError: { line: e.message } }); start = Promise.resolve(false); }
start.then(async (ok) => {
  if (ok) { performance.mark('attnscope: model loaded'); resolveReady(store.get().modelInfo); return; }
  api.error = store.get().modelError.line;
  rejectReady(new Error(api.error));
  // a link's model that did not load: its error stays above, and the page opens the default
  // model under it rather than no model at all (an embed shows its error alone; attention
  // given, or a load cancelled, is left as it is)
  const s = store.get();
  if (embed || s.data || !(s.model || s.hf) || s.modelInfo || s.modelError?.line === 'Loading was cancelled.') return;
  const error = s.modelError;
  if (await scope.loadModel(urlSource(''), { opening: openingOf() })) {
    store.update({ model: '', hf: '', file: '', modelError: { ...error, instead: true } });
    showSource();
    if (s.model) $('model-url').value = s.model; // the link's URL, to correct
  }
});
