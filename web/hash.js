// The URL hash ↔ the intent. Everything a link needs to reproduce a view; nothing else.
// Values are only ever read as text (URLSearchParams), never as markup.

import { INTENT_DEFAULTS, MASKS, ENGINES, HEAD_VIEWS, EMBEDS, MAX_BATCH } from './store.js';

const int = (v, d) => { const n = parseInt(v, 10); return Number.isFinite(n) && n >= 0 ? n : d; };

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
  if (ENGINES.includes(h.get('e'))) s.engine = h.get('e');
  if (HEAD_VIEWS.includes(h.get('v'))) s.view = h.get('v');
  if (h.get('scale') === 'head') s.scale = 'head';
  if (h.has('model')) s.model = h.get('model');
  s.presenter = h.get('present') === '1';
  if (EMBEDS.includes(h.get('embed'))) s.embed = h.get('embed');
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
  if (s.engine !== 'auto') h.set('e', s.engine);
  if (s.view !== 'both') h.set('v', s.view);
  if (s.scale !== 'absolute') h.set('scale', s.scale);
  if (s.model) h.set('model', s.model);
  if (s.presenter) h.set('present', '1');
  if (s.embed) h.set('embed', s.embed);
  return '#' + h.toString();
}
