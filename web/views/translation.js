// The translation view: an encoder–decoder model's output, written token by token (greedy
// decoding, or a target teacher-forced), a step control, and its three attentions, one at a time,
// drawn by the model view's views (grid.js, head.js, lines.js): the cross-attention (output steps × source tokens: where the decoder looks in
// the source as it writes each token), the decoder's self-attention (steps × steps, the no-peek
// mask's upper triangle hatched) and the encoder's (source × source), each as every layer and
// head, the focused head large and its lines. For a batch, the masks the engine applied to it,
// padded (the seeds' source padding, no-peek and their `&`). Every label is text, never markup.
//
// render(target, tr, opts): `tr` is what `Session.translate` returns (src/wasm.rs); `opts`:
// {item, layer, head, step, info, playing, attn ('cross' | 'decoder' | 'encoder'), panes (of
// 'grid', 'head', 'lines', 'masks'), width, fontPx, show (the page's 'both' | 'heatmap' |
// 'lines'), foldPx (presenter mode: the screen's height, see below), onStep(step), onFocus(layer,
// head), onPlay(), onAttn(attn), onShow(show)}.
//
// Presenter mode (`foldPx`, the screen's height in CSS px): on a wide view the focused step and
// the attention's controls sit beside the views, and the focused head's heatmap ends above the
// fold (its top as drawn, measured, and the head drawn again to fit under it when it did not).

import { matricesOf, runOfMatrices, decoderSteps, attentionsOf, translationLayer, shownToken as shown, stepLabel, visibleText, ATTENTION_KINDS } from '../result.js';
import { isDatesModel, dateProblem } from '../examples.js';
import * as headView from './head.js';
import * as grid from './grid.js';
import * as lines from './lines.js';
import { exportTranslation } from '../export.js';
import { precisionNote } from '../given.js';


/** The focused head's value sizes in a line: the first key's, the largest's and their mean. */
function valueLine(r, attn, l, h) {
  const n = r.value_norms[attn][l][h], keys = attn === 'decoder' ? decoderSteps(r).inputs : r.source_tokens;
  let top = 0, mean = 0;
  n.forEach((v, k) => { mean += v / n.length; if (v > n[top]) top = k; });
  return `this head's values: the first key (“${visibleText(shown(keys[0]))}”) ${n[0].toFixed(2)}, the largest (“${visibleText(shown(keys[top]))}”) ${n[top].toFixed(2)}, their mean ${mean.toFixed(2)}.`;
}

function el(tag, attrs = {}, text = null) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  return e;
}


export function render(target, tr, { item = 0, layer = 0, head = 0, step = null, info, playing = false, attn: asked = 'cross', panes = ['grid', 'head', 'lines', 'masks'], width = 720, fontPx = 12, show = null, foldPx = null, byValue = false, onStep, onFocus, onPlay, onAttn, onShow, onByValue }) {
  const b = Math.min(item, tr.results.length - 1);
  const r = tr.results[b];
  const dec = info?.decoder ?? { layers: r.decoder_attention.length, heads: r.decoder_attention[0]?.length ?? 1 };
  // what the decoder reads at each step, and what each step writes (null: given attention's, not known)
  const { T, inputs, written } = decoderSteps(r), S = r.source_tokens.length;
  const t = Math.max(0, Math.min(T - 1, step ?? T - 1));
  const available = attentionsOf(r); // given attention may hold some of the three only
  const attn = available.includes(asked) ? asked : available[0];
  const stack = attn === 'encoder' ? { layers: info.layers, heads: info.heads } : dec;
  const fl = Math.min(layer, stack.layers - 1), fh = Math.min(head, stack.heads - 1);
  const nl = translationLayer(r, attn, fl); // the model's number of the focused layer

  const out = el('div', { class: 'tr' });
  // the output, token by token: each a button that focuses its step
  const line = el('p', { class: 'tr-output' });
  line.append(el('span', { class: 'muted' }, r.given ? 'Decoder input (given): ' : r.target ? 'Target (teacher-forced): ' : 'Output: '));
  (written ?? inputs).forEach((tok, i) => {
    const bt = el('button', { type: 'button', class: 'tr-token', 'aria-pressed': String(i === t) }, shown(tok));
    bt.title = written ? `step ${i + 1}: reads ${shown(inputs[i])}, writes ${shown(tok)}` : `step ${i + 1}: reads ${shown(tok)}`;
    bt.addEventListener('click', () => onStep?.(i));
    line.append(bt);
  });
  if (!r.given) line.append(el('span', { class: 'tr-text' }, ` → “${visibleText(r.output_text)}”`));
  out.append(line);
  // the dates model writes what its training taught it, right or not: an output that is no date says so
  const problem = !r.target && !r.given && isDatesModel(info) ? dateProblem(r.output_text) : null;
  if (problem) out.append(el('p', { class: 'tr-invalid' }, `“${r.output_text}” is not a valid date: ${problem}. The model was trained on dates written in its 19 forms; it writes the digits it reads in the places it learned, checked or not.`));
  const unknown = !r.given && [r.source_tokens, r.target ? r.output_tokens : []].some((x) => x.includes('<unk>'));
  // the source's unknown words by their character spans; a target's as a whole
  const unknownWords = r.source_tokens.flatMap((t, i) => (t === '<unk>' ? [`“${[...r.source].slice(...r.source_offsets[i]).join('')}”`] : []));
  if (unknown) out.append(el('p', { class: 'muted tr-unk' }, unknownWords.length
    ? `${unknownWords.join(', ')} ${unknownWords.length > 1 ? 'are' : 'is'} not in the model's vocabulary: the tokenizer reads ${unknownWords.length > 1 ? 'them' : 'it'} as <unk>, which the model has no meaning for.`
    : 'Part of the target is not in the model\'s vocabulary: the tokenizer reads it as <unk>, which the model has no meaning for.'));

  // the focused step: what the model expected there
  const top = r.steps?.[t]?.top_k;
  const next = el('div', { class: 'tr-step' });
  // teacher forcing feeds the target's next token whatever the model predicts
  const predicted = r.steps?.[t]?.top_k?.[0];
  const before = t ? ' (and everything before it)' : '';
  next.append(el('h3', {}, !written
    ? `Step ${t + 1} of ${T}: the decoder reads “${shown(inputs[t])}”${before}`
    : r.target
    ? `Step ${t + 1} of ${T}: the decoder reads “${shown(inputs[t])}”${before}; the target's next token is “${shown(written[t])}”${predicted && predicted.id !== r.output_ids[t + 1] ? ` (the model predicts “${shown(predicted.token)}”)` : ''}`
    : `Step ${t + 1} of ${T}: the decoder reads “${shown(inputs[t])}”${before}, writes “${shown(written[t])}”`));
  const stepRow = el('div', { class: 'tr-step-row' });
  if (top) {
    const ol = el('ol', { class: 'next-list tr-next', 'aria-label': 'the likeliest next tokens' });
    for (const p of top) {
      const li = el('li', p.id === r.output_ids[t + 1] ? { class: 'chosen' } : {});
      const bar = el('span', { class: 'next-bar' });
      bar.style.width = `${Math.max(1, Math.round(p.p * 100))}%`;
      li.append(bar, el('span', { class: 'next-label' }, `“${shown(p.token)}” ${(100 * p.p).toFixed(1)}%${p.id === r.output_ids[t + 1] ? (r.target ? ' ← the target' : ' ← chosen') : ''}`));
      li.title = `token ${p.id} (${p.token}): p = ${p.p.toPrecision(4)}`;
      ol.append(li);
    }
    stepRow.append(ol);
  }
  // where the focused head's cross-attention reads in the source at this step, as text
  if (attn !== 'encoder') {
    const row = (attn === 'cross' ? r.cross_attention : r.decoder_attention)[fl][fh][t];
    const keys = attn === 'cross' ? r.source_tokens : inputs;
    const best = [...row.keys()].sort((x, y) => row[y] - row[x]).slice(0, 3).filter((k) => row[k] >= 0.01);
    // a token's position tells two equal tokens apart (the 0s of a date)
    stepRow.append(el('p', { class: 'tr-reads' }, `${attn === 'cross' ? 'Reads in the source' : 'Reads in its output'} (layer ${nl}, head ${fh}): ${best.map((k) => `“${shown(keys[k])}” (position ${k}) ${(100 * row[k]).toFixed(0)}%`).join(', ')}`));
  } else {
    stepRow.append(el('p', { class: 'tr-reads' }, 'The encoder runs once, before the first step: the steps change the decoder\'s attentions, not this one.'));
  }
  next.append(stepRow);
  if (top) {
    const wrote = r.output_ids[t + 1];
    if (!top.some((p) => p.id === wrote)) {
      next.append(el('p', { class: 'muted' }, r.target
        ? `The target's token “${shown(written[t])}” is not among the ${top.length} likeliest.`
        : `“${shown(written[t])}” was written because the decoding reached its length limit: the config's forced_eos_token_id ends it there, as HF's generate does.`));
    }
  }
  // the step control: the buttons, a slider and play (the ← → keys work anywhere in the view)
  const nav = el('div', { class: 'tr-nav' });
  const prev = el('button', { type: 'button', 'aria-label': 'previous step' }, '← step');
  const fwd = el('button', { type: 'button', 'aria-label': 'next step' }, 'step →');
  const play = el('button', { type: 'button', 'aria-label': playing ? 'stop' : 'play the decoding from this step', 'aria-pressed': String(!!playing) }, playing ? '■ stop' : '▶ play');
  const slider = el('input', { type: 'range', min: '1', max: String(T), value: String(t + 1), 'aria-label': 'step', class: 'tr-slider' });
  prev.disabled = t === 0;
  fwd.disabled = t === T - 1;
  prev.addEventListener('click', () => onStep?.(t - 1));
  fwd.addEventListener('click', () => onStep?.(t + 1));
  play.addEventListener('click', () => onPlay?.());
  slider.addEventListener('input', () => onStep?.(Number(slider.value) - 1));
  nav.append(prev, slider, fwd, ...(onPlay ? [play] : []));
  next.append(nav);
  // the focused step and the attention's controls, then its views (presenter mode: side by side)
  const main = el('div', { class: 'tr-main' }), side = el('div', { class: 'tr-side' });
  side.append(next);

  // which attention, and its focused layer and head
  const bar = el('div', { class: 'tr-pick', role: 'group', 'aria-label': 'which attention' });
  for (const id of available) {
    const a = ATTENTION_KINDS[id];
    const bt = el('button', { type: 'button', class: 'tr-attn', 'data-attn': id, 'aria-pressed': String(id === attn) }, a.name);
    bt.title = a.line;
    bt.addEventListener('click', () => onAttn?.(id));
    bar.append(bt);
  }
  const select = (label, n, value, onChange, name = String) => {
    const l = el('label', { class: 'inline' }, label + ' ');
    const s = el('select', { 'aria-label': label });
    for (let i = 0; i < n; i++) s.append(el('option', { value: String(i) }, name(i)));
    s.value = String(value);
    s.addEventListener('change', () => onChange(Number(s.value)));
    l.append(s);
    return l;
  };
  bar.append(
    select('layer', stack.layers, fl, (v) => onFocus?.(v, fh), (l) => String(translationLayer(r, attn, l))),
    select('head', stack.heads, fh, (v) => onFocus?.(fl, v)),
  );
  // the head view, its lines or both (the page's choice, kept in the link)
  if (onShow) {
    const l = el('label', { class: 'inline' }, 'show ');
    const s = el('select', { 'aria-label': 'show', class: 'tr-show' });
    for (const [v, text] of [['both', 'heatmap and lines'], ['heatmap', 'heatmap'], ['lines', 'lines']]) s.append(el('option', { value: v }, text));
    s.value = show ?? 'both';
    s.addEventListener('change', () => onShow(s.value));
    l.append(s);
    bar.append(l);
  }
  // the value switch (Kobayashi et al. 2020): each weight times its key's ‖W_O·v‖, rows rescaled
  if (onByValue && !r.given) {
    const l = el('label', { class: 'inline', title: 'a view, not the model\'s attention: each weight times the size of what its head writes from that key, ‖W_O v‖ (Kobayashi et al. 2020), each row rescaled to sum to 1' });
    const box = el('input', { type: 'checkbox', class: 'tr-byvalue' });
    box.checked = byValue;
    box.addEventListener('change', () => onByValue(box.checked));
    l.append(box, ' weigh by ‖value‖');
    bar.append(l);
  }
  const exports = el('span', { class: 'exports' });
  for (const [view, formats] of [['head', ['svg', 'png']], ['model', ['svg', 'png']], ['lines', ['svg']], ['all', ['json']]]) {
    for (const f of formats) {
      const bt = el('button', { type: 'button', class: 'export', 'data-view': view, 'data-format': f }, view === 'all' ? 'JSON' : `${view === 'model' ? 'grid' : view} ${f.toUpperCase()}`);
      bt.title = view === 'all' ? 'export this item\'s three attentions, every layer and head, as JSON' : `export the ${view === 'model' ? 'grid of every layer and head' : view === 'head' ? 'focused head' : 'line view'} of the ${ATTENTION_KINDS[attn].name} as ${f.toUpperCase()}`;
      bt.addEventListener('click', () => exportTranslation(tr, view, f, { item: b, attn, layer: fl, head: fh, byValue: byValue && Boolean(r.value_norms) }));
      exports.append(bt);
    }
  }
  bar.append(exports);
  // the attention's controls and line where one of its views is shown (not an element's inside view)
  const weighed = byValue && Boolean(r.value_norms);
  if (panes.length) {
    side.append(bar, el('p', { class: 'tr-line muted' }, r.given ? GIVEN_LINES[attn] : ATTENTION_KINDS[attn].line));
    if (byValue && !r.given) {
      side.append(el('p', { class: 'tr-value-note status' }, weighed
        ? `Weighed by ‖value‖, rows renormalised: a view, not the model's attention. Each weight times the size of what the head writes from that key, ‖W_O·v‖ (Kobayashi et al. 2020); ${valueLine(r, attn, fl, fh)}`
        : 'Computing each key\'s ‖W_O·v‖…'));
    }
  }

  const matrices = matricesOf(r, attn, weighed);
  const m = matrices[fl][fh];
  // the attention as a run (its heads n_q × n_k), for the grid and the head view
  const run = runOfMatrices(matrices, (l) => translationLayer(r, attn, l), { valueWeighted: weighed });
  const focusRow = attn === 'encoder' ? -1 : t;
  const label = `${ATTENTION_KINDS[attn].name}, ${attn === 'encoder' ? 'encoder' : 'decoder'} layer ${nl}, head ${fh}`;
  const views = el('div', { class: 'tr-views' });
  const pane = (cls, title) => {
    const f = el('figure', { class: `tr-pane ${cls}` });
    f.append(el('figcaption', {}, title));
    const v = el('div', { class: 'tr-canvas' });
    f.append(v);
    views.append(f);
    return v;
  };
  const beside = foldPx !== null && width >= BESIDE_PX;
  const sideW = Math.round(Math.min(520, Math.max(340, width * 0.3)));
  if (beside) {
    main.classList.add('beside');
    side.style.flexBasis = `${sideW}px`;
  }
  const room = beside ? width - sideW - BESIDE_GAP_PX : width; // the views' width
  const wide = room >= 900 || beside;
  const inner = (frac) => Math.max(220, Math.floor(wide ? room * frac : room) - 16);
  const linesW = Math.min(380 + 10 * Math.max(0, fontPx - 12), inner(0.27));
  let linesEl = null, headEl = null, headOpts = null, gridEl = null;
  const drawLines = (hoverRow) => linesEl && lines.draw(linesEl, m, { width: linesW, fontPx, focusRow, hoverRow, after: attn === 'encoder' ? null : t, notes: [`weights ≥ ${lines.floorOf(m)}`], label: `line view of the ${label}: queries on the left, keys on the right` });
  if (panes.includes('head')) {
    const v = pane('tr-head', `Layer ${nl}, head ${fh}: ${attn === 'encoder' ? 'source × source' : `${T} steps (rows: ${written ? 'writes ← reads' : 'what each reads'}) × ${attn === 'cross' ? `${S} source tokens` : `the ${T} tokens read`}, step ${t + 1} outlined`}`);
    headEl = v;
    headOpts = {
      // every cell, each weight written where it fits; a projector's width gives the cells room:
      // up to 52 px each; beside the step, what the lines leave
      item: 0, layer: fl, head: fh, whole: true, weights: true, width: beside ? room - (panes.includes('lines') ? linesW + 22 : 0) : Math.min(wide ? 860 : 640, inner(0.42)), maxCell: width >= 1600 ? 52 : 36, fontPx, focusRow, label,
      axes: attn === 'encoder' ? { rows: 'source tokens (queries)', cols: 'source tokens (keys)' } : { rows: 'decoder steps (queries)', cols: attn === 'cross' ? 'source tokens (keys)' : 'steps so far (keys)' },
      describe: (q, k) => {
        const from = attn === 'encoder' ? `“${m.rows[q]}” at position ${q}` : written ? `step ${q + 1} (writes “${shown(written[q])}”, reads “${shown(inputs[q])}”)` : `step ${q + 1} (reads “${shown(inputs[q])}”)`;
        const to = attn === 'decoder' ? `“${m.cols[k]}” at position ${k}` : `source “${m.cols[k]}” at position ${k}`;
        return m.masked?.(q, k) ? `${from} → ${to}: masked (−∞ before softmax, so 0)` : `${from} → ${to}: ${m.values[q][k].toFixed(3)}`;
      },
      onRow: attn === 'encoder' ? null : (q) => onStep?.(q),
      onHover: (cell) => drawLines(cell?.q ?? null),
      after: attn === 'encoder' ? null : t, // the steps after the focused one, not yet written: dimmed
    };
    headView.render(v, run, headOpts);
  }
  if (panes.includes('lines')) {
    linesEl = pane('tr-lines', attn === 'cross' ? 'Lines: decoder steps left, source right' : attn === 'decoder' ? 'Lines: each step over the steps so far' : 'Lines: the source over itself');
    drawLines(null);
  }
  if (panes.includes('grid')) {
    gridEl = pane('tr-grid', `Every layer and head of the ${ATTENTION_KINDS[attn].name} (click one to focus it)`);
    gridEl.style.width = `${Math.min(inner(0.24), 72 * stack.heads + 40)}px`;
  }
  main.append(side, views);
  out.append(main);
  if (panes.includes('masks') && tr.padded && tr.results.length > 1) out.append(masksOf(tr, b, { attn, layer: fl, head: fh, dec, info, width }));
  else if (panes.length === 1 && panes[0] === 'masks') out.append(el('p', { class: 'muted' }, 'The masks need a batch of two or more sources of different lengths (each "source => target" to teacher-force).'));
  const encoder = info.layers ? `, encoder: ${info.layers} × ${info.heads}` : '';
  const how = tr.given ? `given${precisionNote(tr.precision)}` : `${tr.backend.replace(/^gpu: /, 'WebGPU: ')} · ${tr.elapsed_ms.toFixed(1)} ms`;
  out.append(el('p', { class: 'muted' }, `${S} source tokens, ${T} steps · decoder: ${dec.layers} layers × ${dec.heads} heads${encoder} · ${how}`));
  // a step changed by the keyboard keeps the keyboard where it was: the same control, or the view,
  // without scrolling the page (a view taller than the screen would scroll the header away)
  const had = target.contains(document.activeElement) ? document.activeElement.getAttribute('aria-label') ?? '' : null;
  target.replaceChildren(out);
  target.tabIndex = 0;
  target.setAttribute('role', 'group');
  target.setAttribute('aria-label', `translation, step ${t + 1} of ${T}: ← and → step through the decoding`);
  if (had !== null) (had && target.querySelector(`[aria-label="${CSS.escape(had)}"]`) || target).focus({ preventScroll: true });
  if (beside && headEl) fitAboveFold(headEl, run, headOpts, foldPx);
  // the model view's grid, as a run's (views/grid.js), once in the page: it lays its cells out
  if (gridEl) {
    const onMove = (dl, dh) => onFocus?.(Math.max(0, Math.min(stack.layers - 1, fl + dl)), Math.max(0, Math.min(stack.heads - 1, fh + dh)));
    grid.render(gridEl, run, { item: 0, layer: fl, head: fh, scale: 'absolute', label: `every layer and head of the ${ATTENTION_KINDS[attn].name}`, onFocus, onMove });
  }
  // ← and → step through the decoding wherever the focus is in the view (not in a control that
  // takes the arrows itself)
  target.onkeydown = (e) => {
    if (!['ArrowLeft', 'ArrowRight'].includes(e.key) || e.defaultPrevented || e.target.closest?.('select, input')) return;
    e.preventDefault();
    onStep?.(Math.max(0, Math.min(T - 1, t + (e.key === 'ArrowRight' ? 1 : -1))));
  };
}

/** What each attention is, for given attention: its steps are the positions the decoder read
 *  (what a step wrote is the model's, not given). */
const GIVEN_LINES = {
  cross: 'Encoder–decoder attention, as given: each decoder position\'s query over the source\'s keys; rows: the token each step reads.',
  decoder: 'The decoder\'s self-attention, as given: each position over the positions read so far (under a causal mask, the later ones are hatched); rows and columns: the tokens read.',
  encoder: ATTENTION_KINDS.encoder.line,
};

/** Presenter mode: the translation's step beside its views from this wide (CSS px), with this gap (views.css `.tr-main.beside`). */
const BESIDE_PX = 1000, BESIDE_GAP_PX = 28;

/**
 * Draws the head of `run` in `target` (drawn with `opts`) again, smaller, when its heatmap and
 * the legend under it end below `foldPx` from the page's top: the room left from where it starts.
 */
function fitAboveFold(target, run, opts, foldPx) {
  const stage = target.querySelector('.stage'), legendEl = target.querySelector('.legend');
  const top = stage.getBoundingClientRect().top + window.scrollY;
  const below = legendEl ? legendEl.getBoundingClientRect().bottom - stage.getBoundingClientRect().bottom : 0;
  const room = Math.floor(foldPx - top - below - 8);
  if (stage.offsetHeight > room) headView.render(target, run, { ...opts, maxHeight: Math.max(160, room) });
}

/**
 * The batch as the engine ran it (`tr.padded`, src/report.rs `PaddedBatch`): the seeds' masks,
 * built from it and drawn (1 = a key the query may read), then applied: item `b`'s focused head
 * over the padded frame, every masked key exactly 0.
 */
function masksOf(tr, b, { attn, layer, head, dec, info, width }) {
  const p = tr.padded;
  const B = p.source_valid.length, S = p.source_valid[0].length, T = p.target_valid[0].length;
  const sec = el('section', { class: 'tr-masks', 'aria-label': 'the batch\'s masks' });
  sec.append(el('h3', {}, `The batch's masks: ${B} sources padded to ${S} tokens, ${B} outputs to ${T} steps`));
  sec.append(el('p', { class: 'muted' }, 'A batch is one rectangle: shorter sources and outputs are filled with the pad token, and masks keep every query from reading a pad (or, in the decoder, a later step). Each mask is applied with masked_fill(mask == 0, −∞) before softmax, so a hidden key gets exactly 0.'));
  // `corner` names the rows and the columns (the steps count from 1, the positions from 0)
  const flags = (caption, corner, rows, cols, ok, note) => {
    const t = el('table', { class: 'tr-matrix tr-mask' });
    t.append(el('caption', {}, caption));
    const hr = el('tr');
    hr.append(el('th', { class: 'corner' }, corner));
    cols.forEach((c) => hr.append(el('th', { scope: 'col', class: 'col' }, shown(c))));
    t.append(hr);
    rows.forEach((label, q) => {
      const tr2 = el('tr');
      tr2.append(el('th', { scope: 'row' }, shown(label)));
      cols.forEach((c, k) => {
        const v = ok(q, k);
        const td = el('td', v ? { class: 'on' } : { class: 'masked' }, v ? '1' : '0');
        td.title = `row ${shown(label)}, column ${shown(c)}: ${v ? 'may read (1)' : 'masked (0 → −∞)'}`;
        tr2.append(td);
      });
      t.append(tr2);
    });
    const f = el('figure', { class: 'tr-mask-fig' });
    f.append(t);
    if (note) f.append(el('figcaption', { class: 'muted' }, note));
    return f;
  };
  const items = p.source_valid.map((_, i) => `${i + 1}`);
  const counted = (n, from) => Array.from({ length: n }, (_, i) => String(i + from));
  const positions = (n) => counted(n, 0);
  const src = p.source_tokens[b], tgt = p.target_tokens[b];
  // each step of the padded frame: what it writes ← what it reads (a step past the output's end writes nothing kept)
  const written = tr.results[b].output_tokens;
  const steps = tgt.map((reads, q) => (q + 1 < written.length ? stepLabel(written[q + 1], reads) : `– ← ${shown(reads)}`));
  const grids = el('div', { class: 'tr-grids' });
  grids.append(
    flags('Source padding: src_mask = (src != pad), (B, 1, S)', 'source ╲ position', items, positions(S), (i, j) => p.source_valid[i][j], 'a row per source; it masks the encoder\'s keys and the cross-attention\'s'),
    flags('Target padding: (tgt != pad), (B, 1, T)', 'output ╲ position', items, positions(T), (i, j) => p.target_valid[i][j], 'a row per output: which positions it fills. Built from each output\'s length, not by comparing tokens: Marian\'s decoder start token (position 0) is the pad token itself'),
    flags('No-peek: subsequent_mask(T), (1, T, T)', 'step ╲ position', counted(T, 1), positions(T), (q, k) => k <= q, 'rows are steps (from 1), columns positions (from 0): step t reads positions 0…t − 1, the start token and what the steps before it wrote'),
    flags(p.target_padding_masked ? `Combined, source ${b + 1}: tgt_mask = (tgt != pad) & no-peek, (T, T)` : `The decoder's mask, source ${b + 1}: no-peek alone`,
      'writes ← reads ╲ reads', steps, tgt, (q, k) => k <= q && (!p.target_padding_masked || p.target_valid[b][k]),
      p.target_padding_masked ? 'the & of the two above: a step reads neither the future nor a pad'
        : 'greedy decoding, as HF\'s generate runs it: a finished output is fed pad tokens, whose steps are computed and ignored, so no target padding mask (type a target per source, "source => target", to teacher-force a padded batch)'),
  );
  sec.append(grids);
  // applied: the focused head of source b over the padded frame
  const L = attn === 'encoder' ? Math.min(layer, info.layers - 1) : Math.min(layer, dec.layers - 1);
  const H = attn === 'encoder' ? Math.min(head, info.heads - 1) : Math.min(head, dec.heads - 1);
  const decoderMasked = (q, k) => k > q || (p.target_padding_masked && !p.target_valid[b][k]);
  const m = {
    cross: { values: p.cross_attention[b][L][H], rows: steps, cols: src.map(shown), masked: (q, k) => !p.source_valid[b][k] },
    decoder: { values: p.decoder_attention[b][L][H], rows: steps, cols: tgt.map(shown), masked: decoderMasked },
    encoder: { values: p.encoder_attention[b][L][H], rows: src.map(shown), cols: src.map(shown), masked: (q, k) => !p.source_valid[b][k] },
  }[attn];
  const f = el('figure', { class: 'tr-pane tr-applied' });
  f.append(el('figcaption', {}, `Applied: the ${ATTENTION_KINDS[attn].name} of source ${b + 1} over the padded batch, layer ${L}, head ${H} (hatched: masked, exactly 0)`));
  const v = el('div', { class: 'tr-canvas' });
  f.append(v);
  sec.append(f);
  headView.render(v, runOfMatrices([[m]]), { item: 0, layer: 0, head: 0, whole: true, weights: true, width: Math.min(560, width - 16), label: `applied mask: ${ATTENTION_KINDS[attn].name} of source ${b + 1} over the padded batch`, describe: (q, k) => `${attn === 'encoder' ? `“${m.rows[q]}” at position ${q}` : `step ${q + 1} (writes ← reads: ${m.rows[q]})`} → “${m.cols[k]}” at position ${k}: ${m.values[q][k].toFixed(3)}${m.masked(q, k) ? ' (masked: −∞ before softmax)' : ''}` });
  return sec;
}
