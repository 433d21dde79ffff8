// What the page's words mean, for a first-time reader: the special tokens a tokenizer adds, and
// the choices that colour the model view. Shown on hover and focus (tooltips, titles), never
// parsed as markup.

/** The special tokens of the families attnscope runs (BERT, RoBERTa, DistilBERT, GPT-2, Marian). */
const SPECIAL_NOTES = {
  '[CLS]': 'a token the tokenizer adds at the start; its final vector stands for the whole sentence (a classifier reads it)',
  '[SEP]': 'a token the tokenizer adds at the end of each sentence; it also separates the two sentences of a pair',
  '[PAD]': 'padding: fills a shorter sentence of a batch up to the longest one; the mask hides it',
  '[UNK]': 'unknown: a piece of text the vocabulary has no token for',
  '[MASK]': 'a blanked-out token, the one a masked language model is trained to guess',
  '<s>': 'the start token (RoBERTa\'s [CLS]): the tokenizer adds it at the start; its final vector stands for the whole sentence',
  '</s>': 'the end token: the tokenizer adds it at the end of a sentence (RoBERTa\'s [SEP]); a translation\'s decoder writes it to stop',
  '<pad>': 'padding: fills a shorter sentence of a batch up to the longest one, and the mask hides it; Marian\'s decoder also starts from it',
  '<unk>': 'unknown: a piece of text the vocabulary has no token for',
  '<mask>': 'a blanked-out token, the one a masked language model is trained to guess',
  '<|endoftext|>': 'GPT-2\'s end of text: it separates documents in training, and the model may predict it to stop',
};

/** "[CLS]: a token the tokenizer adds…" for a special token (by its text, spaces ignored), else ''. */
export function specialNote(token) {
  const t = String(token).trim();
  return Object.hasOwn(SPECIAL_NOTES, t) ? `${t}: ${SPECIAL_NOTES[t]}` : '';
}

/** The notes of the special tokens among `tokens` ('' if none), each once, one a line. */
export function specialNotes(...tokens) {
  return [...new Set(tokens.map(specialNote).filter(Boolean))].join('\n');
}

/** What "heads by" does, and each of its choices (store.js METRICS; '' is plain attention). */
export const METRIC_NOTES = {
  '': 'each head\'s own attention pattern, as a small heatmap',
  entropy: 'how spread out each head\'s attention is: low = each token looks at one or two tokens, high = at many',
  to_cls: 'how much of each head\'s attention goes to the start token, on average over the tokens',
  to_sep: 'how much of each head\'s attention goes to the end token, on average over the tokens (often a head\'s "nowhere to look")',
  to_self: 'how much of each head\'s attention a token puts on itself',
  to_prev: 'how much of each head\'s attention goes to the token just before (a "previous token" head)',
  to_next: 'how much of each head\'s attention goes to the token just after',
  distance: 'how far, in tokens, each head looks on average: near (syntax) or far (whole sentence)',
  to_first: 'how much of each head\'s attention goes to the very first token, on average over the tokens: in a decoder-only LLM many heads park most of their attention there (an "attention sink"), whatever that token says',
  sink: 'the largest share of a head\'s attention that any one token receives, on average over the tokens: high when a head pours its attention into one key (a sink, the first token or another)',
  'role:previous_token': 'on a text that repeats: how much of each head\'s attention goes to the token just before, on average over the text',
  'role:sink': 'on a text that repeats: how much of each head\'s attention goes to the first position, on average over the text',
  'role:induction': 'on a text that repeats: in the second repeat, how much of each head\'s attention goes to the token after the earlier copy of the current token (an induction head, Olsson et al. 2022: it predicts the copy goes on)',
  'role:duplicate_token': 'on a text that repeats: in the second repeat, how much of each head\'s attention goes to the earlier copy of the current token (a duplicate-token head)',
};
export const METRIC_HELP = 'Colour the model view by one number a head: each head becomes one flat colour, from the lowest head to the highest (the legend). "their attention" draws each head\'s own pattern instead.';

/** What "colour" does. */
export const SCALE_HELP = 'How attention weights become colours: "0–1 for every head" uses one scale, so heads can be compared; "each head to its max" stretches every head to its own largest weight, so a faint head shows its pattern.';

/** Adds, under a tooltip's text, what the special tokens among `tokens` are (nothing if none). */
export function noteTip(tip, ...tokens) {
  const note = specialNotes(...tokens);
  if (note) tip.append(Object.assign(document.createElement('span'), { className: 'tip-note', textContent: note }));
}

/**
 * What a token's label is, where it is not the vocabulary's piece (result.js `labelsOf`):
 * `“ flies” is the token Ġflies`, and for a part of a character, what its marked bytes are.
 * '' where the label is the piece.
 */
export function pieceNote(label, piece) {
  if (piece === undefined || label === piece) return '';
  const bytes = /‹[0-9A-F ]+›/.test(label) ? ': ‹…› are bytes of a character the tokenizer split across tokens (each token holds part of it)' : '';
  return `“${label}” is the token ${piece}${bytes}`;
}

/** The notes on the tokens `labels[i]` / `pieces[i]` of each position in `at` ([`noteTip`], [`pieceNote`]). */
export function tokenTip(tip, labels, pieces, ...at) {
  noteTip(tip, ...at.map((i) => labels[i]));
  const notes = [...new Set(at.map((i) => pieceNote(labels[i], pieces?.[i])).filter(Boolean))];
  if (notes.length) tip.append(Object.assign(document.createElement('span'), { className: 'tip-note', textContent: notes.join('\n') }));
}
