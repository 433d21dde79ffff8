// One "predict, then check" exercise (web/exercises.js) as a card: its question, the answer (the
// head focused in the views, or a guess on a slider), "check", and then the verdict with the
// engine's numbers and why; "try again" hides the answer again. The page shows it above the model
// view, an <attn-scope exercise="…"> element under its view.

import { EXERCISES, questionOf, verdictOf, check, tryAgain, startExercise } from '../exercises.js';
import { layerNumber } from '../result.js';

function build(target) {
  target.classList.add('exercise-view');
  target.innerHTML = `
    <div class="exercise-top"><h3 class="exercise-title"></h3><button type="button" class="exercise-end" title="end the exercise">end</button></div>
    <p class="exercise-question"></p>
    <button type="button" class="exercise-show" hidden></button>
    <div class="exercise-answer">
      <label class="exercise-guess">your guess <input type="range" min="0" max="1" step="0.01"> <output></output></label>
      <span class="exercise-head"></span>
      <button type="button" class="exercise-check">check</button>
      <button type="button" class="exercise-again" hidden>try again</button>
    </div>
    <div class="exercise-verdict" aria-live="polite"></div>`;
  const range = target.querySelector('.exercise-guess input');
  range.addEventListener('input', () => {
    target.querySelector('.exercise-guess output').textContent = EXERCISES[target._opts?.exercise]?.shown?.(Number(range.value)) ?? range.value;
    target._opts?.onUpdate?.({ guess: Number(range.value) });
  });
  target.querySelector('.exercise-check').addEventListener('click', () => target._check?.());
  target.querySelector('.exercise-again').addEventListener('click', () => target._opts?.onUpdate?.(tryAgain(target._opts.exercise)));
  target.querySelector('.exercise-end').addEventListener('click', () => target._opts?.onUpdate?.({ ...tryAgain(target._opts.exercise), ...startExercise('') }));
  target.querySelector('.exercise-show').addEventListener('click', () => { const h = target._show; if (h) target._opts?.onUpdate?.({ layer: h.layer, head: h.head }); });
}

/**
 * `run`: the result contract (the piece run); `opts`: {exercise (an id of EXERCISES), item, layer,
 * head (the focused head: a head answer), guess (0–1), checked (the answer checked, or null),
 * modelInfo, onUpdate(patch) (the store's update), onFocus(layer, head)}.
 */
export function render(target, run, opts) {
  if (!target.querySelector('.exercise-question')) build(target);
  target._opts = opts;
  const ex = EXERCISES[opts.exercise];
  target.hidden = !ex;
  if (!ex) return;
  const $ = (sel) => target.querySelector(sel);
  $('.exercise-title').textContent = `Predict, then check: ${ex.title}`;
  const b = Math.min(opts.item, (run?.B ?? 1) - 1);
  const q = questionOf(opts.exercise, run, b, opts.modelInfo, opts.checked);
  const answer = $('.exercise-answer'), verdict = $('.exercise-verdict');
  $('.exercise-question').textContent = q.unavailable ?? q.waiting ?? q.question;
  answer.hidden = Boolean(q.unavailable || q.waiting);
  if (answer.hidden) { verdict.replaceChildren(); $('.exercise-show').hidden = true; return; }
  const checked = opts.checked;
  const range = $('.exercise-guess input');
  $('.exercise-guess').hidden = ex.answer !== 'fraction';
  range.disabled = Boolean(checked);
  const guess = checked?.guess ?? opts.guess;
  if (Number(range.value) !== guess) range.value = String(guess);
  $('.exercise-guess output').textContent = ex.shown?.(guess) ?? String(guess);
  const focused = { layer: Math.min(opts.layer, run.L - 1), head: Math.min(opts.head, run.H - 1) };
  $('.exercise-head').textContent = ex.answer === 'head' && !checked ? `your answer: L${layerNumber(run, focused.layer)} H${focused.head}, the head focused (click another in the grid)` : '';
  $('.exercise-head').hidden = !$('.exercise-head').textContent;
  // the head the question asks of, one click from the head view
  const asked = q.head && (q.head.layer !== focused.layer || q.head.head !== focused.head) ? q.head : null;
  target._show = asked;
  $('.exercise-show').hidden = !asked;
  if (asked) $('.exercise-show').textContent = `show L${layerNumber(run, asked.layer)} H${asked.head} in the head view`;
  $('.exercise-check').hidden = Boolean(checked);
  $('.exercise-again').hidden = !checked;
  // the answer: the head focused, or the head asked of with the guess
  target._check = () => opts.onUpdate?.(check(opts.exercise, ex.answer === 'head' ? focused : { ...q.head, guess: opts.guess }));
  if (!checked) { verdict.replaceChildren(); return; }
  const v = verdictOf(opts.exercise, run, b, checked);
  if (v.waiting) { verdict.replaceChildren(Object.assign(document.createElement('p'), { className: 'muted', textContent: v.waiting })); return; }
  const head = Object.assign(document.createElement('p'), { className: `exercise-grade ${v.grade}` });
  head.append(Object.assign(document.createElement('strong'), { textContent: { right: 'Right. ', close: 'Close. ', wrong: 'Not quite. ' }[v.grade] }), v.line);
  verdict.replaceChildren(head, Object.assign(document.createElement('p'), { className: 'exercise-why', textContent: v.why }));
}
