// The generate view (a decoder-only model with an LM head): the controls (chat, max new tokens,
// Generate, Stop), the prompt and what the model wrote token by token, the focused step's
// likeliest tokens and the step control (← slider → and play). The attention views draw the
// focused step's run (web/generation.js generationRun); this view draws the text around them.
//
// render(target, {info, generation, step, chat, maxNew, playing}, {onGenerate(maxNew, chat), onMax(maxNew),
// onStop, onStep(step), onPlay, onChat(chat)}); `generation`: {result (web/generation.js GenerationResult),
// running, stopped, error, off (the heads knocked out while writing, "layer:head"), baseline (then,
// what the model writes with every head: {output_ids, output_text})} or null. User text is set as
// textContent only.

import { visibleText, engineOf } from '../result.js';
import { stepOf } from '../generation.js';

function el(tag, attrs = {}, text = null) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  return e;
}

const shown = (text) => visibleText(text);

/** The parts drawn once (so typing in "max new tokens" or dragging the slider is never cut off). */
function build(target) {
  const v = {};
  v.controls = el('div', { class: 'gen-controls' });
  v.chatLabel = el('label', { class: 'inline gen-chat' });
  v.chat = el('input', { type: 'checkbox', id: 'gen-chat' });
  v.chatLabel.append(v.chat, document.createTextNode(' chat (the prompt as a user message, in the model\'s chat template)'));
  const maxLabel = el('label', { class: 'inline' }, 'max new tokens ');
  v.max = el('input', { type: 'number', min: '1', max: '256', id: 'gen-max', class: 'gen-max' });
  maxLabel.append(v.max);
  v.go = el('button', { type: 'button', id: 'gen-go', class: 'primary' }, 'Generate');
  v.stop = el('button', { type: 'button', id: 'gen-stop' }, '■ Stop');
  v.status = el('span', { class: 'muted gen-status', role: 'status' });
  v.controls.append(v.chatLabel, maxLabel, v.go, v.stop, v.status);
  v.text = el('p', { class: 'gen-text', 'aria-live': 'polite' });
  // scrolled down: its top fades, so a line cut there reads as "more above"
  v.text.addEventListener('scroll', () => v.text.classList.toggle('gen-more', v.text.scrollTop > 0), { passive: true });
  v.compare = el('p', { class: 'gen-compare', id: 'gen-compare' });
  v.step = el('div', { class: 'tr-step gen-step' });
  v.heading = el('h3');
  v.next = el('ol', { class: 'next-list tr-next', 'aria-label': 'the likeliest next tokens at this step' });
  v.nav = el('div', { class: 'tr-nav' });
  v.prev = el('button', { type: 'button', 'aria-label': 'previous step' }, '← step');
  v.slider = el('input', { type: 'range', min: '1', max: '1', value: '1', 'aria-label': 'step', class: 'tr-slider', id: 'gen-slider' });
  v.fwd = el('button', { type: 'button', 'aria-label': 'next step' }, 'step →');
  v.play = el('button', { type: 'button' });
  v.nav.append(v.prev, v.slider, v.fwd, v.play);
  v.step.append(v.heading, v.next, v.nav);
  target.replaceChildren(v.controls, v.text, v.compare, v.step);
  const h = () => target._gen.handlers;
  v.go.addEventListener('click', () => h().onGenerate?.(Math.max(1, Math.min(256, Number(v.max.value) || 16)), v.chat.checked && !v.chatLabel.hidden));
  v.stop.addEventListener('click', () => h().onStop?.());
  v.chat.addEventListener('change', () => h().onChat?.(v.chat.checked));
  v.max.addEventListener('keydown', (e) => { if (e.key === 'Enter') v.go.click(); });
  // the number asked for is kept (a new sentence, which lets a generation go, leaves it)
  v.max.addEventListener('change', () => { const n = Number(v.max.value); if (Number.isInteger(n) && n >= 1 && n <= 256) h().onMax?.(n); });
  v.prev.addEventListener('click', () => h().onStep?.(target._gen.t - 1));
  v.fwd.addEventListener('click', () => h().onStep?.(target._gen.t + 1));
  v.slider.addEventListener('input', () => h().onStep?.(Number(v.slider.value) - 1));
  v.play.addEventListener('click', () => h().onPlay?.());
  // ← → step through the output anywhere in the view but its text boxes
  target.addEventListener('keydown', (e) => {
    if (e.target === v.max || !target._gen.outputs || !['ArrowLeft', 'ArrowRight'].includes(e.key)) return;
    if (e.target === v.slider) return; // the slider steps itself
    e.preventDefault();
    h().onStep?.(target._gen.t + (e.key === 'ArrowRight' ? 1 : -1));
  });
  target._gen = { v, handlers: {}, t: 0, outputs: 0 };
  return target._gen;
}

export function render(target, { info, generation, step = null, chat = false, maxNew = 16, playing = false }, handlers) {
  const g = target._gen ?? build(target);
  g.handlers = handlers;
  const { v } = g;
  v.chatLabel.hidden = !info?.chat_template;
  v.chat.checked = chat;
  if (document.activeElement !== v.max) v.max.value = String(maxNew);
  const running = Boolean(generation?.running);
  v.go.disabled = running;
  v.stop.hidden = !running;
  const r = generation?.result;
  const outputs = r?.output_ids.length ?? 0;
  const t = stepOf(step, outputs);
  g.t = t;
  g.outputs = running ? 0 : outputs;
  const ms = r?.step_ms ?? [];
  const perToken = ms.length > 1 ? ms.slice(1).reduce((a, b) => a + b, 0) / (ms.length - 1) : null;
  v.status.textContent = generation?.error ? '' : !r ? (running ? 'reading the prompt…' : '')
    : `${running ? 'writing… ' : ''}${outputs} token${outputs === 1 ? '' : 's'}${generation.stopped ? ' (stopped)' : ''}; the prompt's pass ${ms[0].toFixed(0)} ms${perToken !== null ? `, then ${perToken.toFixed(perToken < 10 ? 1 : 0)} ms a token (on ${engineOf(r.backend)}, ${r.long ? 'a long text\'s pass each, reusing the one before' : 'keys and values cached'})` : ''}`;

  // the prompt (as the model read it) and the output, token by token: click one to see its step.
  // A generation's tokens are appended as they come (a streaming step lays out one token, not
  // the text), and drawn anew for another generation or error.
  const error = generation?.error ?? null;
  if (!g.shown || g.shown.result !== r || g.shown.error !== error) {
    const head = [];
    if (error) head.push(el('span', { class: 'error' }, error));
    if (r) head.push(promptOf(r.prompt));
    v.text.replaceChildren(...head);
    g.shown = { result: r, error, tokens: [], pressed: -1 };
  }
  const { tokens } = g.shown;
  for (let i = tokens.length; i < (r?.steps.length ?? 0); i++) {
    const s = r.steps[i];
    const token = el('button', { type: 'button', class: 'gen-token', 'aria-pressed': 'false', 'data-step': String(i) }, shown(tokenOf(r, i)));
    token.title = `step ${i + 1}: token ${r.output_ids[i]} (${s.top_k[0]?.token ?? ''}), p = ${(s.top_k.find((p) => p.id === r.output_ids[i])?.p ?? 0).toPrecision(3)}`;
    token.addEventListener('click', () => g.handlers.onStep?.(i));
    tokens.push(token);
    v.text.append(token);
  }
  const pressed = running ? -1 : t;
  if (g.shown.pressed !== pressed) {
    tokens[g.shown.pressed]?.setAttribute('aria-pressed', 'false');
    tokens[pressed]?.setAttribute('aria-pressed', 'true');
    g.shown.pressed = pressed;
  }
  v.text.hidden = !v.text.childElementCount;
  // the token in focus (the newest while writing) in sight: a prompt taller than the box (a chat
  // template's system message, presenter mode's large type, a phone) scrolls the box, not the
  // page; once for each token written or focused (or the box resized), so the box can be scrolled back
  const focused = tokens[running ? tokens.length - 1 : t];
  const sight = `${tokens.length}:${pressed}:${v.text.clientHeight}`;
  if (focused && g.shown.sight !== sight) { g.shown.sight = sight; inSight(v.text, focused); }
  knockedOut(v.compare, generation, tokens);

  // the focused step: what the model expected there, and the control that moves through them
  v.step.hidden = !r || !outputs;
  if (!r || !outputs) return;
  const at = running ? outputs - 1 : t;
  const before = r.texts[r.prompt_ids.length - 1 + at];
  v.heading.textContent = `Step ${at + 1} of ${outputs}: reading “${shown(before)}” (position ${r.prompt_ids.length - 1 + at}) and everything before it, the model writes “${shown(tokenOf(r, at))}”`;
  const rows = r.steps[at].top_k.map((p) => {
    const li = el('li', p.id === r.output_ids[at] ? { class: 'chosen' } : {});
    const bar = el('span', { class: 'next-bar' });
    bar.style.width = `${Math.max(1, Math.round(p.p * 100))}%`;
    li.append(bar, el('span', { class: 'next-label' }, `“${shown(p.text)}” ${(100 * p.p).toFixed(1)}%${p.id === r.output_ids[at] ? ' ← chosen' : ''}`));
    li.title = `token ${p.id} (${p.token}): p = ${p.p.toPrecision(4)}`;
    return li;
  });
  v.next.replaceChildren(...rows);
  v.nav.hidden = running;
  v.slider.max = String(outputs);
  v.slider.value = String(t + 1);
  v.prev.disabled = t === 0;
  v.fwd.disabled = t === outputs - 1;
  v.play.hidden = !handlers.onPlay; // no play without a player
  v.play.textContent = playing ? '■ stop' : '▶ play';
  v.play.setAttribute('aria-pressed', String(playing));
  v.play.setAttribute('aria-label', playing ? 'stop' : 'play the generation from this step');
}

/** Scrolls `box` (when it overflows) so that `token` shows whole, by as little as it takes. */
function inSight(box, token) {
  if (box.hidden || box.scrollHeight <= box.clientHeight) return;
  const b = box.getBoundingClientRect(), r = token.getBoundingClientRect();
  if (r.bottom > b.bottom) box.scrollTop += r.bottom - b.bottom + 4;
  else if (r.top < b.top) box.scrollTop -= b.top - r.top + 4;
  box.classList.toggle('gen-more', box.scrollTop > 0);
}

/**
 * With heads knocked out while writing: which, and once written, what the model writes with
 * every head beside it, the first token where the two part marked in the text (`tokens`).
 */
function knockedOut(p, generation, tokens) {
  const off = generation?.off ?? [], r = generation?.result;
  for (const t of tokens) t.classList.remove('gen-parts');
  p.hidden = !off.length || !r;
  if (p.hidden) return;
  const names = off.map((k) => k.replace(/^(\d+):(\d+)$/, 'L$1 H$2')).join(', ');
  const base = generation.baseline;
  if (generation.running || !base) {
    p.replaceChildren(`Written with ${names} knocked out, in every pass (the prompt's and each token's)${generation.stopped ? '; stopped, so nothing to compare with' : generation.running ? '' : '.'}`);
    return;
  }
  const ours = r.output_ids, n = Math.max(ours.length, base.output_ids.length);
  let i = 0;
  while (i < n && ours[i] === base.output_ids[i]) i++;
  if (i === n) {
    p.replaceChildren(`With ${names} knocked out the model writes the same ${ours.length} token${ours.length === 1 ? '' : 's'} as with every head.`);
    return;
  }
  tokens[i]?.classList.add('gen-parts');
  if (tokens[i]) tokens[i].title += ' · the first token the knock-out changed';
  const text = el('span', { class: 'gen-baseline' }, `“${shown(base.output_text)}”`);
  p.replaceChildren(`With ${names} knocked out the text parts from token ${i + 1} on (underlined). With every head the model writes: `, text);
}

/** A chat template's special tokens (`<|im_start|>`, `<|user|>`, `<s>`, `[INST]`…) in a prompt. */
const SPECIAL = /(<\|[^|<>\s]{1,40}\|>|<\/?s>|\[\/?INST\])/;

/**
 * The prompt as the model read it: a chat template's special tokens boxed (each is one token the
 * model reads, as it reads the text), the rest as text, its newlines and tabs visible.
 */
function promptOf(prompt) {
  const p = el('span', { class: 'gen-prompt' });
  const parts = prompt.split(SPECIAL);
  if (parts.length === 1) { p.textContent = shown(prompt); return p; }
  parts.forEach((part, i) => {
    if (!part) return;
    // a template's newlines: the sign, and the line break the model's text would have
    p.append(i % 2 ? el('span', { class: 'gen-special', title: 'a special token of the chat template' }, part) : document.createTextNode(part.split('\n').map((line) => (line ? shown(line) : '')).join('⏎\n')));
  });
  p.title = 'the prompt in the model\'s chat template: the boxed special tokens are read like any other';
  return p;
}

/** Output token i as the engine reads it (src/model/tokenizer.rs `text_of`: a part of a character as its bytes, marked). */
function tokenOf(r, i) {
  return r.steps[i].text;
}
