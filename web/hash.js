// The URL hash ↔ the intent. Everything a link needs to reproduce a view; nothing else.
// Values are only ever read as text (URLSearchParams), never as markup.

import { INTENT_DEFAULTS, MASKS, ENGINES, HEAD_VIEWS, PARTS, EMBEDS, ATTENTIONS, DECODER_INSIDE, MAX_BATCH, METRICS, ROLES, INSIDE, DEFAULT_HUB } from './store.js';
import { EXERCISES } from './exercises.js';

const int = (v, d) => { const n = parseInt(v, 10); return Number.isFinite(n) && n >= 0 ? n : d; };

/** `"0:1,2:3"` → `["0:1", "2:3"]`: well-formed, distinct, sorted (the engine checks the ranges). */
export function parseHeads(text) {
  const heads = text.split(',').map((x) => x.trim()).filter((x) => /^\d{1,3}:\d{1,3}$/.test(x)).map((x) => x.split(':').map(Number));
  heads.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  return [...new Set(heads.map(([l, h]) => `${l}:${h}`))].slice(0, 1000);
}

/** `"5,3,x,3"` → `[3, 5]`: the selected query tokens, distinct and sorted (clamped to T once a run is in). */
export function parseSel(text) {
  const qs = text.split(',').filter((x) => /^\d{1,4}$/.test(x.trim())).map(Number);
  return [...new Set(qs)].sort((a, b) => a - b);
}

export function parseHash(hash) {
  const h = new URLSearchParams(hash.replace(/^#/, ''));
  const s = { ...INTENT_DEFAULTS };
  if (h.has('s')) s.sentences = h.getAll('s').slice(0, MAX_BATCH);
  if (h.has('p')) s.pair = h.get('p');
  if (MASKS.includes(h.get('m'))) s.mask = h.get('m');
  s.batch = h.get('batch') === '1' || s.sentences.length > 1;
  s.layer = int(h.get('l'), s.layer);
  s.head = int(h.get('h'), s.head);
  s.item = int(h.get('i'), 0);
  if (h.has('st')) s.step = int(h.get('st'), null); // a translation's focused step (0-based)
  s.gen = Math.min(int(h.get('gen'), 0), 256); // a generation's new tokens (web/generation.js)
  s.chat = h.get('chat') === '1';
  if (ATTENTIONS.includes(h.get('a'))) s.attn = h.get('a'); // a translation's attention
  if (ENGINES.includes(h.get('e'))) s.engine = h.get('e');
  if (HEAD_VIEWS.includes(h.get('v'))) s.view = h.get('v');
  if (h.get('scale') === 'head') s.scale = 'head';
  if (h.has('model')) s.model = h.get('model');
  if (h.has('hf')) s.hf = h.get('hf');
  if (h.has('hub')) s.hub = h.get('hub');
  if (h.has('file')) s.file = h.get('file');
  if (h.has('data')) s.data = h.get('data');
  s.presenter = h.get('present') === '1';
  if (EMBEDS.includes(h.get('embed'))) s.embed = h.get('embed');
  if (Object.hasOwn(METRICS, h.get('metric') ?? '') || Object.hasOwn(ROLES, h.get('metric') ?? '')) s.metric = h.get('metric');
  s.table = h.get('table') === '1';
  s.rollout = h.get('rollout') === '1';
  s.writes = h.get('writes') === '1';
  s.flow = h.get('flow') === '1';
  if (Object.hasOwn(EXERCISES, h.get('ex') ?? '')) s.exercise = h.get('ex');
  s.off = parseHeads(h.get('off') ?? '');
  if (h.has('cmp')) { s.compare = true; s.compareText = h.get('cmp'); }
  s.inside = [...INSIDE, ...DECODER_INSIDE].filter((id) => (h.get('inside') ?? '').split(',').includes(id));
  s.noScale = h.get('noscale') === '1';
  s.noRope = h.get('norope') === '1';
  s.noQkNorm = h.get('noqknorm') === '1';
  s.numerics = h.get('num') === 'fast' ? 'fast' : 'exact';
  s.noSink = h.get('nosink') === '1';
  s.byValue = h.get('vw') === '1';
  s.sel = parseSel(h.get('q') ?? '');
  s.words = h.get('words') === '1';
  if (Object.hasOwn(PARTS, h.get('part') ?? '')) s.part = h.get('part');
  return s;
}

export function writeHash(s) {
  const h = new URLSearchParams();
  const texts = s.batch ? s.sentences : s.sentences.slice(0, 1);
  for (const t of texts) h.append('s', t);
  if (s.pair) h.set('p', s.pair);
  h.set('m', s.mask);
  if (s.batch) h.set('batch', '1');
  h.set('l', s.layer);
  h.set('h', s.head);
  if (s.item) h.set('i', s.item);
  if (s.step !== null && s.step !== undefined) h.set('st', s.step);
  if (s.attn && s.attn !== 'cross') h.set('a', s.attn);
  if (s.gen) h.set('gen', s.gen);
  if (s.chat) h.set('chat', '1');
  if (s.engine !== 'auto') h.set('e', s.engine);
  if (s.view !== 'both') h.set('v', s.view);
  if (s.scale !== 'absolute') h.set('scale', s.scale);
  if (s.model) h.set('model', s.model);
  if (s.hf) h.set('hf', s.hf);
  if (s.hf && s.file) h.set('file', s.file);
  if (s.data) h.set('data', s.data); // given attention: the model's fields are what comes back without it
  if (s.hf && s.hub && s.hub.replace(/\/+$/, '') !== DEFAULT_HUB) h.set('hub', s.hub); // a mirror; the Hub goes without saying
  if (s.presenter) h.set('present', '1');
  if (s.embed) h.set('embed', s.embed);
  if (s.metric) h.set('metric', s.metric);
  if (s.table) h.set('table', '1');
  if (s.rollout) h.set('rollout', '1');
  if (s.writes) h.set('writes', '1');
  if (s.flow) h.set('flow', '1');
  if (s.exercise) h.set('ex', s.exercise);
  if (s.off.length) h.set('off', s.off.join(','));
  if (s.compare) h.set('cmp', s.compareText);
  if (s.inside.length) h.set('inside', s.inside.join(','));
  if (s.noScale) h.set('noscale', '1');
  if (s.noRope) h.set('norope', '1');
  if (s.noQkNorm) h.set('noqknorm', '1');
  if (s.numerics === 'fast') h.set('num', 'fast');
  if (s.noSink) h.set('nosink', '1');
  if (s.byValue) h.set('vw', '1');
  if (s.sel?.length) h.set('q', s.sel.join(','));
  if (s.words) h.set('words', '1');
  if (s.part && s.part !== 'all') h.set('part', s.part);
  return '#' + h.toString().replace(/(^|&)q=[\d%C]+/, (q) => q.replace(/%2C/g, ',')); // q=3,5 reads better than q=3%2C5
}
