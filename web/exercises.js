// Predict, then check: three short exercises for a class (issue 52), each a question the reader
// answers before the page shows the answer, checked against the engine's own numbers:
//   previous-token: which head reads the token just before? (the heads' roles, roles.rs)
//   first-token:    how much of this head's weight goes to the first token, and how much is left
//                   once each key counts by the size of what the head writes from it, ‖W_O v‖?
//                   (value-weighted attention, Kobayashi et al. 2020)
//   knock-out:      the head that writes most toward the next token, knocked out: what is p now?
//                   (the direct logit attribution, and the knock-out that tests it)
// The state is the store's `exercise` (an id, or ''), `guess` (a fraction answered on a slider)
// and `checked` (the answer frozen when "check" was pressed, or null). Everything else is
// computed here from the run, so a verdict waits for the numbers it needs and never guesses.

import { repeatedText } from './store.js';
import { byValue } from './values.js';
import { inlineText, layerNumber } from './result.js';

/** A text whose first token draws weight in most decoders' heads, and whose words BERT splits little. */
const SINK_TEXT = 'The animal didn\'t cross the street because it was too tired.';
/** A text whose next token every built-in decoder with an LM head predicts with some confidence. */
const NEXT_TEXT = 'The capital of France is';

/** A guess within this of the engine's number is right; within twice this, close. */
export const NEAR = 0.1;

export const EXERCISES = {
  'previous-token': {
    title: 'Which head reads the previous token?',
    answer: 'head',
    needs: (info) => (info?.decoder ? 'The heads\' roles are read on a model\'s self-attention: choose an encoder or a decoder-only model.' : ''),
    start: () => ({ sentences: [repeatedText()], metric: '', byValue: false, off: [] }),
    // checked: the grid coloured by the role asked of
    reveal: () => ({ metric: 'role:previous_token' }),
    hide: { metric: '' },
  },
  'first-token': {
    title: 'How much goes to the first token?',
    answer: 'fraction',
    shown: (v) => `${Math.round(v * 100)}%`,
    needs: (info) => (info?.decoder ? 'The first token\'s weight is read on a model\'s self-attention: choose an encoder or a decoder-only model.' : ''),
    start: () => ({ sentences: [SINK_TEXT], metric: '', byValue: false, off: [] }),
    // checked: the head asked of, its views weighed by value
    reveal: ({ layer, head }) => ({ byValue: true, layer, head }),
    hide: { byValue: false },
  },
  'knock-out': {
    title: 'Knock out the head that writes most: what is p now?',
    answer: 'fraction',
    shown: (v) => `p = ${v.toFixed(2)}`,
    needs: (info) => (info?.logit_attribution ? ''
      : 'This one reads what each head writes toward the next token: a model with an LM head and one norm before it (SmolLM2, GPT-2 or a Llama in the Model select).'),
    start: () => ({ sentences: [NEXT_TEXT], metric: '', byValue: false, off: [], writes: true }),
    // checked: the run again without the head asked of
    reveal: ({ layer, head }) => ({ off: [`${layer}:${head}`], layer, head }),
    hide: { off: [] },
  },
};

/** The store's patch that starts exercise `id` (its text and a clean slate), or closes it (''). */
export function startExercise(id) {
  if (!EXERCISES[id]) return { exercise: '', guess: 0.5, checked: null };
  return { ...EXERCISES[id].start(), exercise: id, guess: 0.5, checked: null, batch: false, compare: false, item: 0, sel: [] };
}

/** The store's patch that checks `answer` (the head focused, or the head asked of with the
 *  guess): the answer frozen, and what the exercise shows then. */
export function check(id, answer) {
  return { checked: answer, ...EXERCISES[id].reveal(answer) };
}

/** The store's patch that takes a checked answer back: what "check" showed is hidden again. */
export function tryAgain(id) {
  return { checked: null, guess: 0.5, ...EXERCISES[id]?.hide };
}

/** What the run must bring for exercise `id` (src/wasm.rs `RunOptions`), beyond what views ask. */
export function exerciseOptions(id, info) {
  if (id === 'previous-token') return { headRoles: true };
  if (id === 'first-token') return { valueNorms: true };
  if (id === 'knock-out' && info?.logit_attribution) return { logitAttribution: {} };
  return {};
}

const signed = (v, digits = 2) => `${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(digits)}`;
const quoted = (text) => `“${inlineText(text)}”`;
const pct = (v) => `${Math.round(v * 100)}%`;

/** The (layer, head) with the largest `score(l, h)`. */
function best(L, H, score) {
  let top = { layer: 0, head: 0, value: -Infinity };
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
    const value = score(l, h);
    if (value > top.value) top = { layer: l, head: h, value };
  }
  return top;
}

/**
 * The first token's share of head (l, h)'s rows: `{weight, valued}`, the mean over every query
 * after the first of its probability on key 0, and of the same with each key weighed by its
 * value's size and the row rescaled (web/values.js), item b's real tokens alone.
 */
export function firstTokenShare(run, b, l, h) {
  const T = run.T, n = run.results[b].tokens.length, valued = byValue(run);
  if (valued === run || n < 2) return null;
  const p = run.head(b, l, h), v = valued.head(b, l, h);
  let weight = 0, share = 0;
  for (let q = 1; q < n; q++) { weight += p[q * T]; share += v[q * T]; }
  return { weight: weight / (n - 1), valued: share / (n - 1) };
}

/**
 * Exercise `id` on the run: `{question, head?}` (the head it asks of, where it asks of one), or
 * `{waiting}` until the run brings what it reads, or `{unavailable}` on a model it cannot read.
 */
export function questionOf(id, run, b, info, checked) {
  const ex = EXERCISES[id];
  const why = ex.needs(info);
  if (why) return { unavailable: why };
  if (!run || run.given) return { waiting: 'Waiting for the model\'s run…' };
  if (run.long) return { unavailable: 'A text this long keeps no values or writes: the exercises read short texts.' };
  const { L, H } = run, name = (x) => `L${layerNumber(run, x.layer)} H${x.head}`;
  if (id === 'previous-token') {
    if (!run.roleNames?.length) return { waiting: 'Scoring the heads\' roles…' };
    if (!run.repeatOf(b)) return { unavailable: 'This exercise reads a text that repeats a sequence of words from its start ("river green table river green table"): this one does not. In the page, start the exercise again for a new one.' };
    return { question: 'Each word of this text comes twice. Some heads put most of each row\'s weight on the token just before the query: in the head view, a diagonal one step below the main one. Which head does that most? Click it in the grid, then check.' };
  }
  if (id === 'first-token') {
    if (!run.valueNormsOf?.(b, 0, 0)) return { waiting: 'Computing each key\'s value size…' };
    // the classic case: the head whose first token's weight means least once weighed by value
    const head = checked ?? best(L, H, (l, h) => { const s = firstTokenShare(run, b, l, h); return s ? s.weight - s.valued : -Infinity; });
    return { head, question: `Look at ${name(head)} in the head view. On average over the text's tokens, how much of its weight goes to the first token, ${quoted(run.results[b].labels[0])}? Guess on the slider, then check.` };
  }
  // knock-out: the head that writes most toward the token the model predicts
  const a = run.attributionOf?.(b);
  if (checked) return { head: checked, question: `After this text the model gave ${quoted(checked.target)} p = ${checked.p.toFixed(3)}, and ${name(checked)} wrote most toward it (${signed(checked.value)} of the logit ${checked.logit.toFixed(2)}). What is p(${quoted(checked.target)}) once it is knocked out?` };
  if (!a) return { waiting: 'Computing what writes the next token…' };
  const head = best(L, H, (l, h) => a.heads[l][h]);
  return {
    head: { ...head, target: a.target.text, targetId: a.target.id, p: a.probability, logit: a.logit },
    question: `After this text the model gives ${quoted(a.target.text)} p = ${a.probability.toFixed(3)}. Of its ${L * H} heads, ${name(head)} writes most toward it: ${signed(head.value)} of the logit ${a.logit.toFixed(2)}. Knock it out: what will p(${quoted(a.target.text)}) be? Guess on the slider, then check.`,
  };
}

/**
 * Exercise `id`'s verdict on the answer `checked` (frozen when "check" was pressed), from the
 * run: `{grade: 'right' | 'close' | 'wrong', line, why}`, or `{waiting}` until the run brings
 * the numbers (the knocked-out run, the value sizes).
 */
export function verdictOf(id, run, b, checked) {
  const { L, H } = run, name = (x) => `L${layerNumber(run, x.layer)} H${x.head}`;
  if (id === 'previous-token') {
    const v = run.metric(b, 'role:previous_token');
    if (!v) return { waiting: 'Scoring the heads\' roles…' };
    const top = best(L, H, (l, h) => v[l * H + h]), mine = v[checked.layer * H + checked.head];
    const above = Array.from(v).filter((x) => x >= 0.5).length;
    const grade = (checked.layer === top.layer && checked.head === top.head) || mine >= 0.5 ? 'right' : mine >= 0.25 ? 'close' : 'wrong';
    return {
      grade,
      line: `${name(checked)} puts ${pct(mine)} of each row's weight on the token before it.`,
      why: `The strongest previous-token head is ${name(top)} (${pct(top.value)}); ${above} of the ${L * H} heads put over half there. The grid is now coloured by this role: a head that reads the previous token moves information one position on, and an induction head later in the stack uses what it moved.`,
    };
  }
  if (id === 'first-token') {
    const s = firstTokenShare(run, b, checked.layer, checked.head);
    if (!s) return { waiting: 'Computing each key\'s value size…' };
    const off = Math.abs(checked.guess - s.weight);
    const norms = run.valueNormsOf(b, checked.layer, checked.head), n = run.results[b].tokens.length;
    let rest = 0;
    for (let k = 1; k < n; k++) rest += norms[k];
    rest /= Math.max(1, n - 1);
    return {
      grade: off <= NEAR ? 'right' : off <= 2 * NEAR ? 'close' : 'wrong',
      line: `${name(checked)} puts ${pct(s.weight)} of its weight on ${quoted(run.results[b].labels[0])}; you guessed ${pct(checked.guess)}.`,
      why: `But what it writes from there is small: ‖W_O·v‖ is ${norms[0].toFixed(2)} for the first token against ${rest.toFixed(2)} on average for the others. Weighed by value, the first token gets ${pct(s.valued)} (the views now weigh by ‖value‖). A heavy weight on a small value is a sink: the head parks its attention where it changes little (Kobayashi et al. 2020; Xiao et al. 2023).`,
    };
  }
  // knock-out: the knocked-out run attributes the same token without the head
  const key = `${checked.layer}:${checked.head}`, a = run.attributionOf?.(b);
  if (!a || (run.head_mask ?? []).map(([l, h]) => `${l}:${h}`).join(',') !== key || a.target.id !== checked.targetId) return { waiting: `Running the model without ${name(checked)}…` };
  const off = Math.abs(checked.guess - a.probability), fell = checked.logit - a.logit;
  return {
    grade: off <= NEAR ? 'right' : off <= 2 * NEAR ? 'close' : 'wrong',
    line: `Without ${name(checked)}, p(${quoted(checked.target)}) is ${a.probability.toFixed(3)} (it was ${checked.p.toFixed(3)}); you guessed ${checked.guess.toFixed(2)}.`,
    why: `Its logit went from ${checked.logit.toFixed(2)} to ${a.logit.toFixed(2)}: ${fell >= 0 ? 'down' : 'up'} ${Math.abs(fell).toFixed(2)}, against the ${signed(checked.value)} the head wrote directly. `
      + (Math.abs(fell) > Math.abs(checked.value) ? 'More than its own write: later layers read what it wrote, and write less without it.'
        : 'Less than its own write: other heads and the feed-forwards make up for part of it.')
      + ' The panel "what writes the next token" shows the parts without it; put the head back there or with "try again".',
  };
}
