// The heads' roles in the page (issue 52): on a text that repeats a sequence of tokens, each head's
// previous-token, sink, induction and duplicate-token scores (src/analysis/roles.rs), equal to
// HF's on the CPU engine and on WebGPU (tools/make_fixtures.py --only roles), and "Find the heads",
// which writes such a text and colours the grid by the induction role, equal to the CLI's.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { readFileSync, existsSync } from 'node:fs';
import { startServer, launch, openPage, ready, golden, gridCells, ROOT, ARTIFACTS, attnscope } from './harness.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launch(); });
after(async () => { await browser?.close(); server?.stop(); });

const SMOLLM2 = 'assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf'; // index.html's built-in choice
const ROLES = ['previous_token', 'sink', 'induction', 'duplicate_token'];
const enc = encodeURIComponent;

async function open(hash, opts = {}) {
  const p = await openPage(browser, `${server.url}#${hash}`, { width: 1280, height: 1000, ...opts });
  const err = await ready(p.page);
  assert.equal(err, null, `the model did not load: ${err}`);
  return p;
}

/** Waits until the page's result for `text` has its roles and the grid has drawn them. */
const rolesDrawn = (page, text) => page.waitForFunction((t) => {
  const a = window.attnscope, d = document.getElementById('model-view').dataset.drawn ?? '';
  return a.result?.text === t && a.result.head_roles && d.split('|')[0] === String(a.store.get().run?.id) && d.includes('induction role');
}, text, { timeout: 180000 });

const clean = ({ problems }) => assert.deepEqual(problems, [], 'no console errors or uncaught exceptions');

for (const [fixture, model] of [['roles_minilm', ''], ['roles_smollm2', SMOLLM2]]) {
  test(`${fixture}: the page's head roles equal HF's within 1e-5 on the CPU engine and on WebGPU, the grid coloured by them and the note naming the strongest`, async () => {
    if (model) assert.ok(existsSync(path.join(ROOT, model)), `${model} is missing: scripts/setup.sh fetches it`);
    const meta = JSON.parse(readFileSync(path.join(ROOT, 'tests/fixtures/golden', `${fixture}.json`), 'utf8'));
    const want = golden(fixture, 'head_roles'); // (4, L, H)
    const [, L, H] = want.shape;
    const text = meta.texts[0];
    for (const engine of ['cpu', 'gpu']) {
      const p = await open(`${model ? `model=${enc(model)}&` : ''}e=${engine}&s=${enc(text)}&metric=role:induction`);
      const { page } = p;
      await rolesDrawn(page, text);
      const got = await page.evaluate(() => {
        const a = window.attnscope, s = a.store.get();
        return { roles: a.result.head_roles, ids: a.result.token_ids, backend: s.run.backend, repeat: s.run.repeatOf(0) };
      });
      if (engine === 'gpu') assert.match(got.backend, /WebGPU|gpu/i, `ran on ${got.backend}`);
      assert.deepEqual(got.ids, meta.token_ids[0]);
      assert.deepEqual(got.repeat, { start: meta.start, len: meta.token_ids[0].length - (meta.start ? 2 : 0), period: meta.period });
      let worst = 0, best = 0;
      ROLES.forEach((role, r) => {
        for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
          const d = Math.abs(got.roles[role][l][h] - want.data[(r * L + l) * H + h]);
          assert.ok(d <= 1e-5, `${engine} (${got.backend}): ${role} of L${l} H${h} differs from HF's by ${d}`);
          worst = Math.max(worst, d);
        }
      });
      for (let i = 0; i < L * H; i++) if (want.data[2 * L * H + i] > want.data[2 * L * H + best]) best = i;
      console.log(`${fixture} ${engine} (${got.backend}): head roles max |Δ| against HF ${worst.toExponential(1)}`);
      // the note names HF's strongest induction head; the grid's heads carry their four roles
      const note = await page.textContent('#roles-note');
      assert.match(note, new RegExp(`repeats a sequence of ${meta.period} tokens.*strongest is L${Math.floor(best / H)} H${best % H} \\(`));
      const cells = await page.evaluate(gridCells, '#model-view');
      const cell = cells.find((c) => c.layer === Math.floor(best / H) && c.head === best % H);
      assert.match(cell.label, /induction role .*; roles: previous-token [\d.]+, sink [\d.]+, induction [\d.]+, duplicate-token [\d.]+$/);
      clean(p);
      await page.close();
    }
  });
}

test('"Find the heads" writes a text of words twice and colours the heads by their induction role: the CLI\'s numbers in the grid and the heads table; a text that does not repeat says how to get one', async () => {
  assert.ok(existsSync(path.join(ROOT, SMOLLM2)), `${SMOLLM2} is missing: scripts/setup.sh fetches it`);
  const shots = [];
  for (const [name, width, height] of [['laptop', 1280, 800], ['phone', 390, 844], ['projector', 1920, 1080]]) {
    const p = await open(`model=${enc(SMOLLM2)}&e=cpu`, { width, height });
    const { page } = p;
    await page.click('#find-heads');
    const text = await page.inputValue('#sentence');
    const words = text.split(' ');
    assert.equal(words.length, 24, text);
    assert.deepEqual(words.slice(12), words.slice(0, 12), 'the same 12 words twice');
    assert.equal(new Set(words).size, 12);
    assert.equal(await page.inputValue('#metric'), 'role:induction');
    await rolesDrawn(page, text);
    const got = await page.evaluate(() => ({ roles: window.attnscope.result.head_roles, repeat: window.attnscope.store.get().run.repeatOf(0), n: window.attnscope.result.length }));
    // each word is one of SmolLM2's tokens: the period is 12, its first word without the space its copy has
    assert.deepEqual(got.repeat, { start: 0, len: 24, period: 12 });
    if (name === 'laptop') {
      // the CLI's numbers for the same text and period
      const want = attnscope(['attention', '--model', path.join(ROOT, SMOLLM2), '--head-roles', '--period', '12', '--', text]).results[0].head_roles;
      let worst = 0;
      for (const role of ROLES) want[role].forEach((row, l) => row.forEach((v, h) => { worst = Math.max(worst, Math.abs(v - got.roles[role][l][h])); }));
      assert.ok(worst <= 1e-5, `the page's roles differ from the CLI's by ${worst}`);
      // SmolLM2 has induction heads: the strongest reads the token after the earlier copy most of the time
      const flat = want.induction.flat();
      assert.ok(Math.max(...flat) > 0.5, `the strongest induction head: ${Math.max(...flat)}`);
      // the heads table sorts by a role, the CLI's values in its cells
      await page.click('#table-details summary');
      await page.waitForFunction(() => document.querySelectorAll('#heads-view tbody tr').length === 270);
      await page.click('#heads-view th button[data-sort="role:induction"]');
      await page.waitForFunction(() => document.querySelector('#heads-view th[aria-sort=descending] button')?.dataset.sort === 'role:induction');
      const first = await page.evaluate(() => {
        const tr = document.querySelector('#heads-view tbody tr');
        return { l: +tr.dataset.layer, h: +tr.dataset.head, v: +tr.querySelector('td[data-metric="role:induction"]').textContent };
      });
      const best = flat.indexOf(Math.max(...flat));
      assert.deepEqual([first.l, first.h], [Math.floor(best / 9), best % 9], 'the strongest induction head comes first');
      // the click focused it: the head view shows what it reads
      const focus = await page.evaluate(() => [window.attnscope.store.get().layer, window.attnscope.store.get().head]);
      assert.deepEqual(focus, [Math.floor(best / 9), best % 9], 'the strongest induction head is focused');
      assert.ok(Math.abs(first.v - flat[best]) <= 6e-4);
      await page.click('#table-details summary');
    }
    await page.locator('#model-h').scrollIntoViewIfNeeded();
    const shot = path.join(ARTIFACTS, `roles-${name}.png`);
    await page.screenshot({ path: shot });
    shots.push(shot);
    if (name === 'laptop') {
      // a text that does not repeat: the grid goes back to attention, the note says how to get one
      await page.fill('#sentence', 'The cat sat on the mat.');
      await page.waitForFunction(() => /does not: "Find the heads" writes one/.test(document.getElementById('roles-note').textContent), null, { timeout: 60000 });
      assert.equal(await page.inputValue('#metric'), 'role:induction', 'the choice stays for the next repeated text');
      // the choice is in the link
      await page.waitForFunction(() => /metric=role%3Ainduction|metric=role:induction/.test(location.hash));
    }
    clean(p);
    await page.close();
  }
  console.log(`screenshots: ${shots.join(', ')}`);
});
