// <attn-scope>: one attention view of a real transformer, for blog posts and slides.
//
//   <script type="module" src="attnscope/attn-scope.js"></script>
//   <attn-scope sentence="The animal didn't cross the street because it was too tired."
//               view="head" layer="3" head="1"></attn-scope>
//
// Attributes: sentence (required; a translation model's source), pair (its target, to
// teacher-force), mask (padding | causal | none), view (model | head | lines | steps), layer,
// head, scale (absolute: 0–1 for every head | head: each head to its max), words (present: the
// tokenizer's words in place of its pieces), off (knocked-out heads, "layer:head,…"), step (a
// translation's, 0-based), attention (a translation's: cross | decoder | encoder;
// its view: model = every head, head, lines, masks = a batch's masks, inside = inside its
// decoder; head and lines without one), batch (a translation's sources, separated by |, each
// "source => target" to teacher-force; item the one shown), model (a checkpoint folder's base
// URL, or a .gguf file's; default: the model beside the script), hf (a model id on the Hugging
// Face Hub, instead), file (with hf: the repository's .gguf file to load), hub (a mirror of the Hub), engine
// (auto | cpu | gpu), editable (adds a sentence box), src (attention computed elsewhere, in place
// of a model: a file of docs/given.md's records, an encoder's, a decoder's or an encoder–decoder's,
// or the CLI's JSON; the `data` property takes the same as bytes, text or an object), controls
// (present: a layer and a head to choose above a view of one head, and for a sentence pair which
// sentence's queries over which one's keys, also above the model view), part (that choice: all | aa
// | bb | ab | ba, sentence B from the attention's sentence_b_start); view="heads" (every head's
// summaries, a sortable table) and view="rollout" (attention rollout through the stack); view="roles"
// (the model view coloured by a role), view="writes" (what writes the next token) and view="flow"
// (the information-flow routes), each with exercise (a "predict, then check" under the view:
// previous-token | first-token | knock-out | none; roles and writes ask one unless told); view="generate" (a decoder-only model with an LM head
// writing after the sentence, token by token, the focused step's head view under it) with gen (how
// many tokens to write once the sentence's run is in; else on its Generate button) and chat (present:
// the sentence as a chat's user message), value-weighted (present: every attention view weighs
// each key's weight by the size of what it writes, ‖α · W_O v‖, each row renormalised for drawing,
// as the page's "weigh by ‖value‖" does; the caption says so). Changing one re-renders.
// Elements on a page share one worker and load a model once; each renders when first scrolled
// into view, sized by its container. `result` and the `attnscope-render` event carry the same
// contract as the page's window.attnscope.result.

import { createStore, INTENT_DEFAULTS, MASKS, ENGINES, EMBEDS, ATTENTIONS, INSIDE, DECODER_INSIDE, MAX_BATCH, PARTS } from './store.js';
import { connect, sourceOf, delayedBusy, translationPanes, drawDecoderPanels, needsModel, isGiven, insidePanels, LAYER_PANELS, DECODER_PANELS, runOptions } from './scope.js';
import { published, publishedTranslation, withGeneration, layerNumber, decoderSteps } from './result.js';
import { parseHeads } from './hash.js';
import * as translationView from './views/translation.js';
import { readGiven, fromGiven, precisionNote, UNNAMED } from './given.js';
import { STYLE_MARKUP } from './element-styles.js';
import { useWorker, engine } from './engine.js';
import { connectGeneration, canGenerate } from './generation.js';
import * as generationView from './views/generation.js';
import { player } from './play.js';
import { EXERCISES } from './exercises.js';
import { byValue } from './values.js';

/** A translation model's own views beside the encoder's: its batch's masks, inside its decoder. */
const TRANSLATION_EMBEDS = ['masks', 'inside'];

/** The reading of every head an element shows alone (the page's "heads" and "rollout" sections):
 *  the heads table (each head's summaries, sortable) and attention rollout through the stack. */
const READINGS = ['heads', 'rollout'];

/** The views that read what each head does (issue 52), each with its "predict, then check"
 *  exercise by default (web/exercises.js; the `exercise` attribute names another, or `none`):
 *  `roles` the model grid, coloured by the heads' roles on a text that repeats, `writes` what
 *  writes the next token, `flow` the information-flow routes. */
const HEAD_READINGS = { roles: 'previous-token', writes: 'knock-out', flow: '' };

const ATTRS = ['sentence', 'batch', 'item', 'pair', 'mask', 'view', 'attention', 'layer', 'head', 'scale', 'words', 'off', 'step', 'model', 'hf', 'file', 'hub', 'engine', 'editable', 'src', 'controls', 'part', 'gen', 'chat', 'exercise', 'value-weighted'];

/** A decoder-only model writing after the sentence (`view="generate"`): the text token by token,
 *  its steps, and the focused head's attention over prompt and output. The element's own view. */
const GENERATE = 'generate';

/** The views of one layer's one head: the `controls` attribute's layer and head choices are theirs. */
const ONE_HEAD = ['head', 'lines', 'steps', 'inside', GENERATE];

/** The caption's note when the views weigh the attention by the values (`value-weighted`). */
const WEIGHED = ' · weighed by ‖value‖, rows renormalised';

class AttnScope extends HTMLElement {
  static observedAttributes = ATTRS;

  constructor() {
    super();
    const root = this.attachShadow({ mode: 'open' });
    root.innerHTML = `
      ${STYLE_MARKUP}
      <div class="frame">
        <label class="edit" hidden>Sentence <input type="text" spellcheck="false" autocomplete="off"></label>
        <div class="controls" hidden>
          <label>Layer <select class="layer"></select></label>
          <label>Head <select class="head"></select></label>
          <label class="part" hidden>Attention <select>${Object.entries(PARTS).map(([k, name]) => `<option value="${k}">${name}</option>`).join('')}</select></label>
        </div>
        <div class="loading" hidden><progress max="1" value="0"></progress> <span></span></div>
        <p class="message" role="alert" hidden></p>
        <div class="view pending" part="view"></div>
        <p class="caption muted"></p>
      </div>`;
    this.$ = (sel) => root.querySelector(sel);
    this.$('.edit input').addEventListener('input', (e) => this.store?.update({ sentences: [e.target.value] }));
    this.$('.controls .layer').addEventListener('change', (e) => this.store?.update({ layer: Number(e.target.value), win: null }));
    this.$('.controls .head').addEventListener('change', (e) => this.store?.update({ head: Number(e.target.value) }));
    this.$('.controls .part select').addEventListener('change', (e) => this.store?.update({ part: e.target.value, sel: [] }));
    this.result = null;
    this.given = null; // the `data` property's
    this.checkpoint = null; // the `files` property's
  }

  /** Attention computed elsewhere, shown in place of a model's (docs/given.md): an ArrayBuffer
   *  or byte view (a safetensors file or JSON text), a string of JSON, or the parsed object. */
  set data(value) {
    this.given = value ?? null;
    if (this.store) this.loadGiven();
  }

  get data() { return this.given; }

  /** A checkpoint's files, loaded in place of the `model` or `hf` attribute's: `{key, name,
   *  files}`, `files` ArrayBuffers by name (config.json, model.safetensors, tokenizer.json, and
   *  tokenizer_config.json and chat_template.jinja where a folder has them; or one .gguf), `key` naming them for the engine's cache (the
   *  notebook's `attnscope.run`: the kernel reads them). null brings the attributes' model back. */
  set files(value) {
    this.checkpoint = value ?? null;
    if (this.store && !this.showsGiven()) this.load(this.intent());
  }

  get files() { return this.checkpoint; }

  /** Where the engine's worker comes from, for every element on the page (web/engine.js
   *  `useWorker`): a bundle with no worker.js beside it makes its own. */
  static useWorker(make) { useWorker(make); }

  /** Whether the element shows given attention (the `data` property or the `src` attribute). */
  showsGiven() { return this.given !== null || this.hasAttribute('src'); }

  /** The intent the attributes describe. */
  intent() {
    const a = (k) => this.getAttribute(k);
    const int = (k) => Math.max(0, parseInt(a(k), 10) || 0);
    const asked = [...EMBEDS, ...TRANSLATION_EMBEDS, ...READINGS, ...Object.keys(HEAD_READINGS), GENERATE].includes(a('view')) ? a('view') : 'head';
    // view="roles" is the model grid, coloured by a role until an exercise asks first
    const view = asked === 'roles' ? 'model' : asked;
    const exercise = Object.hasOwn(EXERCISES, a('exercise') ?? '') ? a('exercise') : a('exercise') === 'none' ? '' : HEAD_READINGS[asked] ?? '';
    // a batch: its sources separated by |, each "source => target" to teacher-force its own
    const batch = (a('batch') ?? '').split('|').map((x) => x.trim()).filter(Boolean).slice(0, MAX_BATCH);
    return {
      sentences: batch.length ? batch : [a('sentence') ?? ''], batch: batch.length > 0, item: int('item'), pair: a('pair') ?? '',
      // a translation's decoder panels (all three), or the first of an encoder's or a decoder's layer (the others open on a click)
      inside: view === 'inside' ? [...DECODER_INSIDE, INSIDE[0]] : [],
      mask: MASKS.includes(a('mask')) ? a('mask') : 'padding',
      layer: int('layer'), head: int('head'), embed: view, view: view === 'lines' ? 'lines' : 'heatmap',
      // the heads table and the rollout: the engine computes what they read for the views that show them
      table: view === 'heads', rollout: view === 'rollout', writes: view === 'writes', flow: view === 'flow',
      exercise, metric: asked === 'roles' && !exercise ? 'role:induction' : '',
      scale: a('scale') === 'head' ? 'head' : 'absolute', words: this.hasAttribute('words'), off: parseHeads(a('off') ?? ''),
      engine: ENGINES.includes(a('engine')) ? a('engine') : 'auto', model: a('model') ?? '', hf: a('hf') ?? '', file: a('file') ?? '', hub: a('hub') ?? '',
      step: this.hasAttribute('step') ? int('step') : null, attn: ATTENTIONS.includes(a('attention')) ? a('attention') : 'cross',
      part: Object.hasOwn(PARTS, a('part') ?? '') ? a('part') : 'all',
      // view="generate": how many tokens to write once the sentence's run is in, and as a chat's user message
      gen: Math.min(int('gen'), 256), chat: this.hasAttribute('chat'),
      byValue: this.hasAttribute('value-weighted'),
    };
  }

  connectedCallback() {
    // `data` set on the element before its module defined it: an own property hiding the setter
    for (const p of ['data', 'files']) {
      if (!Object.hasOwn(this, p)) continue;
      const value = this[p];
      delete this[p];
      this[p] = value;
    }
    if (this.seen) { this.resize?.observe(this); return; } // moved: its size followed again
    this.seen = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.startOnce();
    }, { rootMargin: '100px' }); // start just before it scrolls into view
    this.seen.observe(this);
    // given attention (no model to load) draws off screen too once the page is idle, so that a
    // printout or a full-page screenshot of an exported notebook shows every view
    const idle = globalThis.requestIdleCallback ?? ((f) => setTimeout(f, 500));
    idle(() => { if (this.isConnected && this.showsGiven()) this.startOnce(); }, { timeout: 2000 });
  }

  /** Starts the element (its store, views, and a model's load or the given attention's), once. */
  startOnce() {
    this.seen.disconnect();
    if (!this.store) this.start();
  }

  disconnectedCallback() { this.resize?.disconnect(); this.play?.stop(); }

  attributeChangedCallback(name) {
    this.$('.edit').hidden = !this.hasAttribute('editable');
    // the space the view will take, until its first render: no layout shift, and an element
    // below the fold stays below it (this style is inline: the shadow's stylesheet loads later)
    const view = this.$('.view');
    if (view.classList.contains('pending')) view.style.aspectRatio = { model: '2 / 1', steps: '3 / 1', lines: '1 / 1', heads: '3 / 2', rollout: '2 / 1', writes: '3 / 2', flow: '3 / 2' }[this.intent().embed] ?? '1 / 1.15';
    if (!this.store) return;
    const next = this.intent();
    const now = this.store.get();
    const modelChanged = next.model !== now.model || next.hf !== now.hf || next.file !== now.file || next.hub !== now.hub || next.engine !== now.engine;
    const { inside, ...rest } = next; // the panels opened stay open while the view does
    this.store.update({ ...rest, ...(name === 'view' ? { inside } : {}), win: null });
    if (name === 'sentence') this.$('.edit input').value = next.sentences[0];
    if (name === 'src') this.loadGiven();
    else if (modelChanged && !this.showsGiven()) this.load(next);
  }

  start() {
    const intent = this.intent();
    this.$('.edit input').value = intent.sentences[0];
    this.showBusy = delayedBusy((busy) => this.$('.view').classList.toggle('busy', busy)); // greyed while a run takes long
    this.store = createStore({
      ...INTENT_DEFAULTS, ...intent,
      modelInfo: null, modelKey: '', modelVersion: 0, loading: null, modelError: null, run: null, translation: null,
      runError: null, busy: false, hover: null, win: null, rendered: '', size: '', generation: null, playing: false, genMax: 16,
    });
    this.play = player(this.store); // a decoding's steps one by one (a translation's, a generation's)
    const view = this.$('.view');
    const name = intent.embed;
    const targets = { [name]: view };
    // view="generate": the generate view, and under it the head view of the step it focuses
    if (name === GENERATE) {
      const head = document.createElement('div');
      head.className = 'view generated-head';
      view.after(head);
      targets.head = head;
    }
    // view="inside" on an encoder or a decoder-only model: the panels inside its focused layer
    // (a translation model's are its decoder's: insideDecoder)
    if (name === 'inside') {
      const box = document.createElement('div');
      box.className = 'layer-inside';
      box.hidden = true;
      for (const id of LAYER_PANELS) {
        const panel = document.createElement('details');
        panel.dataset.panel = id;
        const v = document.createElement('div');
        v.className = 'view';
        v.id = `inside-${id}`;
        panel.append(document.createElement('summary'), v);
        // a panel opened is computed and drawn (scope.js draws the open ones: `inside`)
        panel.addEventListener('toggle', () => {
          const open = new Set(this.store.get().inside);
          if (panel.open) open.add(id); else open.delete(id);
          this.store.update({ inside: [...DECODER_INSIDE, ...INSIDE.filter((x) => open.has(x))] });
        });
        box.append(panel);
        targets[`inside:${id}`] = v;
      }
      view.after(box);
    }
    // an exercise: its question under the view
    if (intent.exercise) {
      const card = document.createElement('div');
      card.className = 'view exercise';
      this.$('.caption').before(card);
      targets.exercise = card;
    }
    this.scope = connect(this.store, {
      targets, dropOld: false,
      // the `files` property's checkpoint went to the engine that crashed (the notebook's `run()`: the kernel sends them)
      filesAgain: 'set the element\'s files again to go on (in a notebook, run the cell again)',
      // a translation model opens on its most readable head unless the attributes name one
      modelFocus: () => !this.hasAttribute('layer') && !this.hasAttribute('head'),
      layout: (s) => {
        const width = Math.max(160, view.clientWidth || this.clientWidth || 480);
        const height = this.clientHeight > 120 ? this.clientHeight - 40 : width;
        return {
          model: {}, head: { maxHeight: name === GENERATE ? Math.min(width, 560) : Math.min(width, height), fontPx: 12 },
          lines: { height: Math.min(height, 640), fontPx: 12 },
          heads: {}, rollout: { fontPx: 12, panelPx: Math.min(420, Math.floor(width / (width >= 640 ? 2 : 1)) - 24) },
          writes: { fontPx: 12, width }, flow: { fontPx: 12 }, exercise: s.exercise ? {} : null,
          steps: { panelPx: Math.floor(width / (width >= 720 ? 4 : 2)) - 14, fontPx: 10 },
          ...Object.fromEntries(INSIDE.map((id) => [`inside:${id}`, name === 'inside' && s.inside.includes(id) ? { fontPx: 11, width } : null])),
        };
      },
    });
    if (name === GENERATE) this.generating = connectGeneration(this.store, engine(), runOptions);
    this.store.subscribe((s, changed) => this.show(s, changed));
    this.resize = new ResizeObserver(() => this.store.update({ size: `${this.clientWidth}x${this.clientHeight}` }));
    this.resize.observe(this);
    if (this.showsGiven()) this.loadGiven();
    else this.load(intent);
  }

  /** Shows the given attention (`data`, else `src`'s file): its run, and a model's description
   *  made from its records, in place of the model's (a model loading is dropped); a file that
   *  cannot be read is shown as the error, naming it. With neither, the model comes back. */
  async loadGiven() {
    const ticket = (this.givenTicket = {});
    if (!this.showsGiven()) { this.load(this.intent()); return; }
    const src = this.getAttribute('src');
    const source = this.given !== null ? 'data' : src;
    let shown;
    try {
      let input = this.given;
      if (input === null) {
        this.store.update({ loading: { name: src, loaded: 0, total: 0 }, modelError: null });
        let res;
        try {
          res = await fetch(new URL(src, document.baseURI));
        } catch (e) {
          throw new Error(`${src}: ${e.message}`);
        }
        if (!res.ok) throw new Error(`${src}: HTTP ${res.status}`);
        input = await res.arrayBuffer();
      }
      if (ticket !== this.givenTicket) return;
      shown = fromGiven(readGiven(input, source), source);
    } catch (e) {
      if (ticket !== this.givenTicket) return;
      this.result = null;
      this.store.update({ loading: null, modelInfo: null, modelKey: '', run: null, modelError: { line: String(e.message || e) } });
      return;
    }
    if (ticket !== this.givenTicket) return;
    const s = this.store.get();
    // the attributes, else where the reader is when more of the same attention comes (a notebook
    // view's every layer after its first one alone: the same layer by its number), else the file's view
    const again = s.run?.given && shown.run && s.modelInfo?.heads === shown.modelInfo.heads
      && s.run.results[0].tokens.join('\u0000') === shown.run.results[0].tokens.join('\u0000');
    const layer = again ? Array.from({ length: shown.run.L }, (_, l) => layerNumber(shown.run, l)).indexOf(layerNumber(s.run, s.layer)) : -1;
    const focus = layer >= 0 ? { layer, head: s.head } : shown.focus;
    const at = (k) => (this.hasAttribute(k) ? s[k] : focus[k]);
    this.scope.showGiven(shown, { layer: at('layer'), head: at('head') });
  }

  /** Loads the checkpoint the `files` property holds, else the model an intent names (a Hub id,
   *  a base URL or the default); a bad id is shown as the error. */
  load(intent) {
    let source;
    try { source = this.checkpoint ?? sourceOf(intent); } catch (e) { this.store.update({ modelError: { line: e.message } }); return; }
    this.scope.loadModel(source);
  }

  /** view="inside": the decoder's three panels for the focused source, step, layer and head. */
  insideDecoder(s) {
    let box = this.$('.dec-inside');
    if (!box) {
      box = document.createElement('div');
      box.className = 'dec-inside';
      for (const [id, { title }] of Object.entries(DECODER_PANELS)) {
        const h = document.createElement('h3');
        h.textContent = title;
        const v = document.createElement('div');
        v.dataset.panel = id;
        box.append(h, v);
      }
      this.$('.view').after(box);
    }
    drawDecoderPanels(s, Object.fromEntries([...box.querySelectorAll('[data-panel]')].map((v) => [v.dataset.panel, v])));
  }

  show(s, changed) {
    this.$('.loading').hidden = !s.loading;
    if (s.loading) {
      const p = this.$('.loading progress');
      p.max = s.loading.total || 1;
      p.value = s.loading.loaded || 0;
      this.$('.loading span').textContent = `loading ${s.loading.name}${s.loading.file ? ` · ${s.loading.file}` : ''}…`;
    }
    const err = s.modelError?.line ?? s.runError?.line ?? '';
    this.$('.message').textContent = err;
    this.$('.message').hidden = !err;
    // a model that never loaded: the error alone, not the space its view would have taken
    const failed = Boolean(s.modelError && !s.modelInfo);
    // view="inside" on an encoder or a decoder-only model: its layer's panels in place of the one view
    const layerInside = s.embed === 'inside' && Boolean(s.modelInfo?.architecture) && !s.translation && !s.modelInfo.decoder;
    this.$('.view').hidden = failed || layerInside;
    this.$('.caption').hidden = failed;
    this.showBusy(s.busy);
    const given = isGiven(s);
    this.$('.edit').hidden = !this.hasAttribute('editable') || given; // given attention's text is the file's
    this.controls(s, changed);
    if (s.embed === 'inside' && ['modelInfo', 'run', 'translation', 'pair', 'inside'].some((k) => changed.has(k))) this.layerPanels(s, layerInside && !failed);
    if (s.embed === GENERATE && ['modelInfo', 'run', 'generation', 'step', 'chat', 'gen', 'playing'].some((k) => changed.has(k))) this.generate(s);
    // a translation model's own views (`masks`, `inside`) have nothing to draw under given attention
    if (given && TRANSLATION_EMBEDS.includes(s.embed) && (changed.has('run') || changed.has('translation'))) {
      needsModel(this.$('.view'), `The ${s.embed} view computes from a translation model`);
      this.$('.view').classList.remove('pending');
      this.$('.view').style.aspectRatio = '';
      // the numbers given are the result still
      if (s.translation) this.publish(publishedTranslation(s.translation, 0));
    }
    // the focused head, where the view shows one (the rollout reads every layer's every head)
    const focus = s.run && s.embed !== 'rollout' ? `layer ${layerNumber(s.run, s.layer)}, head ${s.head} · ` : '';
    if (s.run?.given) this.$('.caption').textContent = `${s.run.model === UNNAMED ? '' : `${s.run.model} · `}${focus}given${precisionNote(s.run.precision)}`;
    else if (s.run) this.$('.caption').textContent = `${s.run.model} · ${focus}${s.run.backend === 'cpu' ? 'CPU' : 'WebGPU'} ${s.run.elapsed_ms.toFixed(0)} ms${s.byValue && byValue(s.run).valueWeighted ? WEIGHED : ''}`;
    // an encoder–decoder model: the translation view (the `view` attribute names an encoder's views)
    if (s.translation && !(s.translation.given && TRANSLATION_EMBEDS.includes(s.embed)) && ['translation', 'layer', 'head', 'step', 'item', 'attn', 'size', 'decoderTrace', 'playing', 'byValue'].some((k) => changed.has(k))) {
      const view = this.$('.view');
      view.classList.remove('pending');
      view.style.aspectRatio = '';
      const b = Math.min(s.item, s.translation.results.length - 1);
      const steps = decoderSteps(s.translation.results[b]).T;
      translationView.render(view, s.translation, {
        item: b, layer: s.layer, head: s.head, step: s.step, info: s.modelInfo, attn: s.attn, playing: s.playing,
        // the head and its lines, or the one view the `view` attribute names
        panes: this.hasAttribute('view') ? translationPanes(s) : ['head', 'lines'], width: view.clientWidth || this.clientWidth || 480,
        onAttn: (attn) => this.store.update({ attn }),
        onStep: (step) => { this.play.stop(); this.store.update({ step: Math.max(0, Math.min(steps - 1, step)) }); },
        onPlay: () => this.play.toggle({ key: 'step', count: steps }),
        onFocus: (layer, head) => this.store.update({ layer, head }),
        byValue: s.byValue,
      });
      if (s.embed === 'inside') this.insideDecoder(s);
      const tr = s.translation;
      this.$('.caption').textContent = tr.given ? `${tr.model === UNNAMED ? '' : `${tr.model} · `}given${precisionNote(tr.precision)}`
        : `${tr.model} · ${tr.backend === 'cpu' ? 'CPU' : 'WebGPU'} ${tr.elapsed_ms.toFixed(0)} ms${s.byValue && tr.results[b].value_norms ? WEIGHED : ''}`;
      this.publish(publishedTranslation(s.translation, b));
    }
    if (changed.has('rendered') && s.run) {
      this.$('.view').classList.remove('pending');
      this.$('.view').style.aspectRatio = '';
      this.publish(withGeneration(published(s.run, Math.min(s.item, s.run.B - 1)), s.run, s.generation));
    }
  }

  /** view="generate": the generate view (web/views/generation.js) for a decoder-only model with an
   *  LM head, writing after the sentence on the Generate button (or the `gen` attribute's tokens
   *  once the sentence's run is in), its steps played one by one on ▶; the head view under it
   *  draws the focused step. Any other
   *  model, or given attention, says what it needs. */
  generate(s) {
    const view = this.$('.view');
    if (!s.modelInfo) return;
    view.classList.remove('pending');
    view.style.aspectRatio = '';
    if (!canGenerate(s.modelInfo)) {
      const line = document.createElement('p');
      line.className = 'muted';
      line.textContent = s.modelInfo.given ? 'Writing token by token needs the model itself: the attention shown was given, with no model to ask.'
        : `${s.modelInfo.name} does not write text: writing token by token needs a decoder-only model with an LM head (GPT-2, a Llama).`;
      view.replaceChildren(line);
      view._gen = null; // the generate view's parts, drawn anew for a model that writes
      return;
    }
    generationView.render(view, { info: s.modelInfo, generation: s.generation, step: s.step, chat: s.chat, maxNew: s.gen || s.genMax, playing: s.playing }, {
      onGenerate: (maxNew, chat) => { this.play.stop(); this.generating.start(maxNew, chat); },
      onMax: (genMax) => this.store.update({ genMax }),
      onStop: () => this.generating.stop(),
      onChat: (chat) => this.store.update({ chat }),
      onStep: (step) => { this.play.stop(); const n = this.store.get().generation?.result?.output_ids.length ?? 1; this.store.update({ step: Math.max(0, Math.min(n - 1, step)) }); },
      onPlay: () => this.play.toggle({ key: 'step', count: this.store.get().generation?.result?.output_ids.length ?? 1 }),
    });
  }

  /** view="inside" on an encoder or a decoder-only model: the panels its model has, titled in
   *  its own words (its norm, its feed-forward), in place of the one view; those open that the
   *  state's `inside` names. */
  layerPanels(s, on) {
    const box = this.$('.layer-inside');
    box.hidden = !on;
    if (!on) return;
    const shown = new Map(insidePanels(s.modelInfo.architecture, { pair: Boolean(s.pair.trim()) }));
    for (const panel of box.querySelectorAll('[data-panel]')) {
      const title = shown.get(panel.dataset.panel);
      panel.hidden = !title;
      panel.lastElementChild.hidden = !title; // scope.js draws the targets that are not hidden
      panel.firstElementChild.textContent = title ?? '';
      const open = Boolean(title) && s.inside.includes(panel.dataset.panel);
      if (panel.open !== open) panel.open = open;
    }
  }

  /**
   * The `controls` attribute's choices above a view of one head: its layer (under the model's own
   * numbers), its head (with its key/value head where several share one) and, for a sentence
   * pair (`sentence_b_start`), which sentence's queries over which sentence's keys (bertviz's
   * filter; above the model view, that alone).
   */
  controls(s, changed) {
    const box = this.$('.controls'), r = s.run;
    const oneHead = ONE_HEAD.includes(s.embed), pair = Number.isInteger(r?.results[Math.min(s.item, r.B - 1)]?.sentence_b_start);
    // the model view: a pair's part alone (every head is drawn: the grid chooses the head)
    box.hidden = !this.hasAttribute('controls') || !r || Boolean(s.translation) || !(oneHead || (s.embed === 'model' && pair));
    if (box.hidden) return;
    for (const select of ['.layer', '.head']) this.$(`.controls ${select}`).parentElement.hidden = !oneHead;
    const options = (select, labels) => {
      if (select.options.length === labels.length && [...select.options].every((o, i) => o.textContent === labels[i])) return;
      select.replaceChildren(...labels.map((text, i) => Object.assign(document.createElement('option'), { value: String(i), textContent: text })));
    };
    if (changed.has('run') || !box.dataset.filled) {
      const kv = s.modelInfo?.architecture?.heads?.key_value, per = kv && kv < r.H ? r.H / kv : 0;
      options(this.$('.controls .layer'), Array.from({ length: r.L }, (_, l) => String(layerNumber(r, l))));
      options(this.$('.controls .head'), Array.from({ length: r.H }, (_, h) => (per ? `${h} (K/V ${Math.floor(h / per)})` : String(h))));
      box.dataset.filled = '1';
    }
    this.$('.controls .layer').value = String(Math.min(s.layer, r.L - 1));
    this.$('.controls .head').value = String(Math.min(s.head, r.H - 1));
    this.$('.controls .part').hidden = !pair;
    this.$('.controls .part select').value = s.part;
  }

  /** `result`, and the `attnscope-render` event that carries it. */
  publish(result) {
    this.result = result;
    this.dispatchEvent(new CustomEvent('attnscope-render', { detail: result, bubbles: true, composed: true }));
  }
}

if (!customElements.get('attn-scope')) customElements.define('attn-scope', AttnScope);
