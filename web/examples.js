// Worked examples a teacher can jump to. Each sets the intent (and a head worth looking at):
// EXAMPLES for an encoder (or GPT-2), TRANSLATION_EXAMPLES for the dates → ISO model.

export const EXAMPLES = [
  {
    id: 'it', title: 'coreference: what does "it" attend to?',
    state: { sentences: ['The animal didn\'t cross the street because it was too tired.'], pair: '', mask: 'padding', batch: false, layer: 3, head: 1 },
  },
  {
    id: 'arrow', title: 'ambiguity: "time flies like an arrow"',
    state: { sentences: ['time flies like an arrow'], pair: '', mask: 'padding', batch: false, layer: 5, head: 3 },
  },
  {
    id: 'batch', title: 'a padded batch: [PAD] rows and columns',
    state: { sentences: ['time flies like an arrow', 'The quick brown fox jumps over the lazy dog by the river.', 'hi'], pair: '', mask: 'padding', batch: true, item: 2, layer: 0, head: 0 },
  },
  {
    id: 'causal', title: 'the causal (no-peek) mask',
    state: { sentences: ['time flies like an arrow', 'fruit flies like a banana, they say'], pair: '', mask: 'causal', batch: true, item: 0, layer: 0, head: 0 },
  },
  {
    id: 'pair', title: 'a sentence pair: [SEP] and token types',
    state: { sentences: ['The cat sat on the mat.'], pair: 'It was very comfortable.', mask: 'padding', batch: false, layer: 3, head: 0 },
  },
];

/**
 * For a decoder-only model (GPT-2, the Llama family, Gemma 3), under its own causal mask: a chat
 * turn written in the model's template (`needs: 'chat'`: a model with one), a repeated sequence
 * (the second copy's tokens look back at what followed them the first time: induction heads), a
 * reference back across a long sentence, and the attention sink (the grid by attention to the
 * first token). `gen`: the tokens it writes once the sentence's run is in.
 */
export const DECODER_EXAMPLES = [
  {
    id: 'chat', title: 'a chat turn: the question in the model\'s template, then its answer', needs: 'chat', gen: 16,
    state: { sentences: ['What is the capital of France?'], pair: '', mask: 'causal', batch: false, chat: true, metric: '' },
  },
  {
    id: 'induction', title: 'a repeated sequence: induction heads look back at what came next',
    state: { sentences: ['Mr and Mrs Dursley, of number four, Privet Drive, were proud to say. Mr and Mrs Dursley, of number four, Privet Drive, were proud to say.'], pair: '', mask: 'causal', batch: false, metric: 'to_prev' },
  },
  {
    id: 'reference', title: 'a long-range reference: the last word reads back to a name',
    state: { sentences: ['Marie Curie was born in Warsaw in 1867. After years of study in Paris, and two Nobel prizes, the scientist who discovered polonium was'], pair: '', mask: 'causal', batch: false, metric: '' },
  },
  {
    id: 'sink', title: 'the attention sink: heads that park on the first token',
    state: { sentences: ['time flies like an arrow; fruit flies like a banana.'], pair: '', mask: 'causal', batch: false, metric: 'to_first' },
  },
];

/** For the dates model (models/dates/): its forms, a teacher-forced mistake, a padded batch. */
export const TRANSLATION_EXAMPLES = [
  {
    id: 'dates-ordinal', title: 'the 9th of May 2018: each digit reads its field',
    state: { sentences: ['the 9th of May 2018'], pair: '', batch: false, step: 6, attn: 'cross' },
  },
  {
    id: 'dates-us', title: 'Sunday, September 9, 2018: the weekday is ignored',
    state: { sentences: ['Sunday, September 9, 2018'], pair: '', batch: false, step: 6, attn: 'cross' },
  },
  {
    id: 'dates-numeric', title: '09/05/2018: day first, from numbers alone',
    state: { sentences: ['09/05/2018'], pair: '', batch: false, step: 5, attn: 'cross' },
  },
  {
    id: 'dates-forced', title: 'teacher forcing a wrong target: where does it look?',
    state: { sentences: ['9 May 2018'], pair: '2018-05-10', batch: false, step: 8, attn: 'cross' },
  },
  {
    id: 'dates-nopeek', title: 'the decoder\'s no-peek mask',
    state: { sentences: ['May 9th, 2018'], pair: '', batch: false, step: 4, attn: 'decoder' },
  },
  {
    id: 'dates-batch', title: 'a padded batch: the padding, no-peek and combined masks',
    state: { sentences: ['9 May 2018 => 2018-05-09', 'Wednesday, May 9, 2018 => 2018-05'], pair: '', batch: true, item: 1, step: 6, attn: 'decoder' },
  },
];

/**
 * Whether a model is the dates → ISO model trained here: tools/train_dates.py writes the head it
 * found most readable into the config (`attnscope_focus`, the engine's `decoder.focus`), which no
 * other checkpoint carries.
 */
export const isDatesModel = (info) => Boolean(info?.decoder?.focus);

const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];

/** Why `text` is not a valid `YYYY-MM-DD` date (a month 01–12, a day within its month, leap years
 *  counted), or null when it is one. */
export function dateProblem(text) {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text);
  if (!m) return 'it is not in the form YYYY-MM-DD';
  const [year, month, day] = m.slice(1).map(Number);
  if (month < 1 || month > 12) return `there is no month ${m[2]} (months run 01–12)`;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1];
  if (day < 1 || day > days) return `${MONTHS[month - 1]} ${m[1]} has ${days} days, so there is no day ${m[3]}`;
  return null;
}
