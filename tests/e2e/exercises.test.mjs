// "Predict, then check" (issue 52; web/exercises.js): three exercises for a class, each asking
// first and then checking the answer against the engine's numbers, in the page and in an
// <attn-scope> element. The numbers each verdict quotes are computed here again from the
// attention, the value sizes and the attribution the page holds, and each grade follows them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { existsSync } from 'node:fs';
import { site, ready, servedFixtures, ROOT, ARTIFACTS } from './harness.mjs';

const SMOLLM2 = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf';
const fixtures = servedFixtures('ex', ['tiny-llama']);
const TINY = fixtures.path('tiny-llama');
const app = site({ fixtures });

const enc = encodeURIComponent;
const clean = ({ problems }) => assert.deepEqual(problems, [], 'no console errors or uncaught exceptions');
const pct = (v) => `${Math.round(v * 100)}%`;

/** The card's question, once it asks (not while it waits for the run). */
const asking = (page, root = 'document') => page.waitForFunction((r) => {
  const card = (r === 'document' ? document : document.querySelector(r).shadowRoot).querySelector('.exercise-view');
  return card && !card.hidden && !card.querySelector('.exercise-answer').hidden && card.querySelector('.exercise-question').textContent;
}, root, { timeout: 120000 }).then((h) => h.jsonValue());

/** The card's verdict, once the numbers it reads are in: `{grade, text}`. */
const verdict = (page, root = 'document') => page.waitForFunction((r) => {
  const card = (r === 'document' ? document : document.querySelector(r).shadowRoot).querySelector('.exercise-view');
  const g = card?.querySelector('.exercise-grade');
  return g && { grade: ['right', 'close', 'wrong'].find((c) => g.classList.contains(c)), text: card.querySelector('.exercise-verdict').textContent };
}, root, { timeout: 120000 }).then((h) => h.jsonValue());

/** Each head's previous-token score from the run's attention: the mean over the repeated text's
 *  positions after the first of α(i, i−1) (positions after any [CLS] or BOS: roles.rs). */
const previousToken = (store) => {
  const r = store.get().run, { start, len } = r.repeatOf(0), att = window.attnscope.result.attention;
  return att.map((layer) => layer.map((rows) => {
    let s = 0;
    for (let i = start + 1; i < start + len; i++) s += rows[i][i - 1];
    return s / (len - 1);
  }));
};

test('the page, all-MiniLM: "which head reads the previous token?" grades the head clicked by its score, and "how much goes to the first token?" the guess by the head\'s mean weight; drawn at phone, laptop and projector sizes', async () => {
  const p = await app.open(`#e=cpu`, { width: 1280, height: 900 });
  const { page } = p;
  assert.equal(await ready(page), null);
  await page.click('#class-details summary');
  await page.click('.exercise-starts [data-exercise="previous-token"]');
  const q = await asking(page);
  assert.match(q, /Click it in the grid, then check/);
  const text = await page.inputValue('#sentence');
  const words = text.split(' ');
  assert.deepEqual(words.slice(12), words.slice(0, 12), 'a text of 12 words twice');
  // the engine's scores, and the same from the attention
  const { scores, engine } = await page.evaluate(`(${previousToken})(window.attnscope.store)`).then(async (scores) => ({
    scores, engine: await page.evaluate(() => { const r = window.attnscope.store.get().run, v = r.metric(0, 'role:previous_token'); return Array.from({ length: r.L }, (_, l) => Array.from(v.subarray(l * r.H, (l + 1) * r.H))); }),
  }));
  let worst = 0;
  scores.forEach((row, l) => row.forEach((v, h) => { worst = Math.max(worst, Math.abs(v - engine[l][h])); }));
  assert.ok(worst <= 1e-5, `the role's scores against the attention's: ${worst}`);
  const heads = scores.flatMap((row, l) => row.map((v, h) => ({ l, h, v }))).sort((a, b) => b.v - a.v);
  // the weakest head first: not quite (or close), with its score and the strongest named
  for (const [pick, want] of [[heads[heads.length - 1], null], [heads[0], 'right']]) {
    await page.click(`#model-view .cell[data-layer="${pick.l}"][data-head="${pick.h}"]`);
    await page.waitForFunction(([l, h]) => document.querySelector('.exercise-head').textContent.startsWith(`your answer: L${l} H${h},`), [pick.l, pick.h]);
    await page.click('.exercise-check');
    const v = await verdict(page);
    assert.equal(v.grade, want ?? (pick.v >= 0.5 ? 'right' : pick.v >= 0.25 ? 'close' : 'wrong'), v.text);
    assert.ok(v.text.includes(`L${pick.l} H${pick.h} puts ${pct(pick.v)} of each row's weight on the token before it`), v.text);
    assert.ok(v.text.includes(`The strongest previous-token head is L${heads[0].l} H${heads[0].h} (${pct(heads[0].v)})`), v.text);
    assert.equal(await page.inputValue('#metric'), 'role:previous_token', 'the grid is coloured by the role once checked');
    if (!want) { await page.click('.exercise-again'); assert.equal(await page.inputValue('#metric'), ''); }
  }
  // shared, the exercise comes with the element's grid
  await page.click('#share');
  const el = await page.inputValue('#share-element');
  assert.ok(el.includes(' view="roles" exercise="previous-token"'), el);
  await page.keyboard.press('Escape');
  for (const [name, width, height] of [['phone', 390, 844], ['laptop', 1280, 800], ['projector', 1920, 1080]]) {
    await page.setViewportSize({ width, height });
    await page.locator('#exercise-view').screenshot({ path: path.join(ARTIFACTS, `exercise-${name}.png`) }).catch(() => {});
    const over = await page.evaluate(() => document.documentElement.scrollWidth - innerWidth);
    assert.ok(over <= 0, `${name}: no sideways scrolling (${over} px)`);
  }
  await page.setViewportSize({ width: 1280, height: 900 });

  // how much goes to the first token: the head asked of is the one whose weight there means least once weighed by value
  await page.click('.exercise-starts [data-exercise="first-token"]');
  const q2 = await asking(page);
  const shares = await page.evaluate(() => {
    const r = window.attnscope.store.get().run, att = window.attnscope.result.attention, n = r.results[0].tokens.length;
    return att.map((layer, l) => layer.map((rows, h) => {
      const norms = r.valueNormsOf(0, l, h);
      let w = 0, v = 0;
      for (let q = 1; q < n; q++) {
        let sum = 0;
        for (let k = 0; k < n; k++) sum += rows[q][k] * norms[k];
        w += rows[q][0];
        v += (rows[q][0] * norms[0]) / sum;
      }
      return { w: w / (n - 1), v: v / (n - 1) };
    }));
  });
  const asked = shares.flatMap((row, l) => row.map((s, h) => ({ l, h, ...s }))).sort((a, b) => (b.w - b.v) - (a.w - a.v))[0];
  assert.match(q2, new RegExp(`Look at L${asked.l} H${asked.h} in the head view.*“\\[CLS\\]”`));
  assert.ok(asked.w - asked.v > 0.2, `a heavy weight on a small value: ${asked.w} → ${asked.v}`);
  await page.click('.exercise-show');
  await page.waitForFunction(([l, h]) => { const s = window.attnscope.store.get(); return s.layer === l && s.head === h; }, [asked.l, asked.h]);
  const guess = Math.round(asked.w * 100) / 100;
  await page.locator('.exercise-guess input').fill(String(guess));
  await page.click('.exercise-check');
  const v2 = await verdict(page);
  assert.equal(v2.grade, 'right', v2.text);
  assert.ok(v2.text.includes(`L${asked.l} H${asked.h} puts ${pct(asked.w)} of its weight on “[CLS]”; you guessed ${pct(guess)}`), v2.text);
  assert.ok(v2.text.includes(`Weighed by value, the first token gets ${pct(asked.v)}`), v2.text);
  assert.equal(await page.isChecked('#byvalue'), true, 'the views weigh by value once checked');
  // the link follows in a task of its own, 120 ms after the last change (web/app.js `syncHash`)
  await page.waitForFunction(() => /ex=first-token/.test(location.hash), null, { timeout: 5000 }).catch(() => {});
  assert.match(await page.evaluate(() => location.hash), /ex=first-token/);
  clean(p);
  await page.close();
});

test('the page, SmolLM2: knock out the head that writes most toward " Paris"; the verdict quotes the knocked-out run\'s p, and "try again" puts the head back', async () => {
  assert.ok(existsSync(path.join(ROOT, SMOLLM2)), `${SMOLLM2} is missing: scripts/setup.sh fetches it`);
  const p = await app.open(`#model=${enc(SMOLLM2)}&e=cpu&ex=knock-out&s=${enc('The capital of France is')}`, { width: 1280, height: 900 });
  const { page } = p;
  assert.equal(await ready(page), null);
  const q = await asking(page);
  const plain = await page.evaluate(() => window.attnscope.store.get().run.attributionOf(0));
  const top = plain.heads.flatMap((row, l) => row.map((v, h) => ({ l, h, v }))).sort((a, b) => b.v - a.v)[0];
  assert.equal(plain.target.text, ' Paris');
  assert.ok(q.includes(`gives “ Paris” p = ${plain.probability.toFixed(3)}`) && q.includes(`L${top.l} H${top.h} writes most toward it: +${top.v.toFixed(2)}`), q);
  await page.locator('.exercise-guess input').fill('0.9');
  await page.click('.exercise-check');
  const v = await verdict(page);
  const knocked = await page.evaluate(() => { const r = window.attnscope.store.get().run; return { mask: r.head_mask, a: r.attributionOf(0) }; });
  assert.deepEqual(knocked.mask, [[top.l, top.h]]);
  assert.equal(knocked.a.target.id, plain.target.id);
  const off = Math.abs(0.9 - knocked.a.probability);
  assert.equal(v.grade, off <= 0.1 ? 'right' : off <= 0.2 ? 'close' : 'wrong', v.text);
  assert.ok(v.text.includes(`Without L${top.l} H${top.h}, p(“ Paris”) is ${knocked.a.probability.toFixed(3)} (it was ${plain.probability.toFixed(3)})`), v.text);
  assert.ok(v.text.includes(`Its logit went from ${plain.logit.toFixed(2)} to ${knocked.a.logit.toFixed(2)}`), v.text);
  await page.click('.exercise-again');
  await page.waitForFunction(() => (window.attnscope.store.get().run?.head_mask ?? []).length === 0 && !document.querySelector('.exercise-grade'));
  clean(p);
  await page.close();
});

test('<attn-scope view="roles">, view="writes" and view="flow": the exercise under the view, checked in the element; the routes drawn', async () => {
  const p = await app.open(`#e=cpu`, { width: 1024, height: 900 });
  const { page } = p;
  assert.equal(await ready(page), null);
  await page.evaluate(async (tiny) => {
    await import('/web/attn-scope.js');
    const roles = document.createElement('attn-scope');
    roles.id = 'roles';
    for (const [k, v] of Object.entries({ view: 'roles', engine: 'cpu', sentence: 'river green table music river green table music' })) roles.setAttribute(k, v);
    const writes = document.createElement('attn-scope');
    writes.id = 'writes';
    for (const [k, v] of Object.entries({ view: 'writes', engine: 'cpu', model: `/${tiny}/`, sentence: 'time flies like an arrow' })) writes.setAttribute(k, v);
    const flow = document.createElement('attn-scope');
    flow.id = 'flow';
    for (const [k, v] of Object.entries({ view: 'flow', engine: 'cpu', model: `/${tiny}/`, sentence: 'time flies like an arrow' })) flow.setAttribute(k, v);
    for (const el of [flow, writes, roles]) { el.style.cssText = 'display:block;width:720px'; document.body.prepend(el); }
  }, TINY);
  // roles: the grid, a head clicked in it, checked
  await page.locator('#roles').scrollIntoViewIfNeeded();
  const q = await asking(page, '#roles');
  assert.match(q, /Click it in the grid, then check/);
  await page.locator('#roles').locator('.cell[data-layer="0"][data-head="0"]').click();
  await page.locator('#roles').locator('.exercise-check').click();
  const v = await verdict(page, '#roles');
  const score = await page.evaluate(() => { const r = document.querySelector('#roles').store.get().run; return r.metric(0, 'role:previous_token')[0]; });
  assert.ok(v.text.includes(`L0 H0 puts ${pct(score)} of each row's weight on the token before it`), v.text);
  // writes: the tiny Llama's top writer knocked out
  await page.locator('#writes').scrollIntoViewIfNeeded();
  const q2 = await asking(page, '#writes');
  assert.match(q2, /Knock it out: what will p/);
  await page.locator('#writes').locator('.exercise-check').click();
  const v2 = await verdict(page, '#writes');
  const a = await page.evaluate(() => document.querySelector('#writes').store.get().run.attributionOf(0));
  assert.ok(v2.text.includes(`p(“${a.target.text}”) is ${a.probability.toFixed(3)}`), v2.text);
  assert.ok(await page.locator('#writes').locator('.writes-line').count() === 1, 'the writes panel is the view');
  // flow: the routes are the view, with no exercise
  await page.locator('#flow').scrollIntoViewIfNeeded();
  await page.waitForFunction(() => /edges of importance/.test(document.querySelector('#flow').shadowRoot.querySelector('.flow-line')?.textContent ?? ''), null, { timeout: 60000 });
  assert.equal(await page.locator('#flow').locator('.exercise-view').count(), 0);
  clean(p);
  await page.close();
});
