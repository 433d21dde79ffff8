// The translation view: an encoder–decoder model's output, written token by token (greedy
// decoding, or a target teacher-forced), and, for the focused layer and head, its three
// attentions as tables a person can read and a screen reader can walk: the cross-attention
// (output steps × source tokens: where the decoder looks in the source as it writes each token),
// the decoder's self-attention (steps × steps, the no-peek mask's upper triangle greyed) and the
// encoder's (source × source). Every label is text (textContent), never markup.
//
// render(target, tr, opts): `tr` is what `Session.translate` returns (src/wasm.rs); `opts`:
// {item, layer, head, step, info, playing, onStep(step), onFocus(layer, head), onPlay()}.

import { scale, css, MASKED_CSS } from '../colour.js';

const PROB = scale('probability');
const colourOf = (p) => css(PROB.table[PROB.index(p)]);
// a token as a reader sees it: SentencePiece's ▁ as the space it stands for
const shown = (t) => t.replace(/▁/g, ' ').trim() || t;

function el(tag, attrs = {}, text = null) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  return e;
}

/**
 * One attention matrix as a table: `rows` labels down, `cols` across, `values[q][k]`;
 * `masked(q, k)` greys a cell the mask hides; row `focus` is outlined.
 */
function matrix(caption, rows, cols, values, { masked = () => false, focus = -1, onRow = null, rowTitle = null } = {}) {
  const table = el('table', { class: 'tr-matrix' });
  table.append(el('caption', {}, caption));
  const head = el('tr');
  head.append(el('th', { scope: 'col', class: 'corner' }, ''));
  for (const c of cols) head.append(el('th', { scope: 'col', class: 'col' }, shown(c)));
  table.append(head);
  values.forEach((row, q) => {
    const tr = el('tr', q === focus ? { class: 'focus' } : {});
    const th = el('th', { scope: 'row' }, shown(rows[q]));
    if (rowTitle) th.title = rowTitle(q);
    if (onRow) {
      th.tabIndex = 0;
      th.classList.add('pick');
      th.addEventListener('click', () => onRow(q));
      th.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); onRow(q); } });
    }
    tr.append(th);
    row.forEach((p, k) => {
      const hidden = masked(q, k);
      const td = el('td', hidden ? { class: 'masked' } : {});
      td.style.background = hidden ? MASKED_CSS : colourOf(p);
      td.title = hidden ? `${shown(rows[q])} → ${shown(cols[k])}: masked (−∞ before softmax, so 0)` : `${shown(rows[q])} → ${shown(cols[k])}: ${p.toFixed(3)}`;
      td.textContent = hidden ? '' : p >= 0.995 ? '1' : p < 0.005 ? '' : p.toFixed(2).slice(1);
      if (p > 0.55 && !hidden) td.classList.add('dark');
      tr.append(td);
    });
    table.append(tr);
  });
  return table;
}

export function render(target, tr, { item = 0, layer = 0, head = 0, step = null, info, playing = false, onStep, onFocus, onPlay }) {
  const r = tr.results[Math.min(item, tr.results.length - 1)];
  const dec = info?.decoder ?? { layers: r.decoder_attention.length, heads: r.decoder_attention[0]?.length ?? 1 };
  const T = r.output_ids.length - 1, S = r.source_tokens.length;
  const t = Math.max(0, Math.min(T - 1, step ?? T - 1));
  const dl = Math.min(layer, dec.layers - 1), dh = Math.min(head, dec.heads - 1);
  const el0 = Math.min(layer, info.layers - 1), eh = Math.min(head, info.heads - 1);
  const inputs = r.output_tokens.slice(0, T); // what the decoder reads at each step
  const written = r.output_tokens.slice(1); // what each step writes

  const out = el('div', { class: 'tr' });
  // the output, token by token: each a button that focuses its step
  const line = el('p', { class: 'tr-output' });
  line.append(el('span', { class: 'muted' }, r.target ? 'Target (teacher-forced): ' : 'Output: '));
  written.forEach((tok, i) => {
    const b = el('button', { type: 'button', class: 'tr-token', 'aria-pressed': String(i === t) }, shown(tok));
    b.title = `step ${i + 1}: reads ${shown(inputs[i])}, writes ${shown(tok)}`;
    b.addEventListener('click', () => onStep?.(i));
    line.append(b);
  });
  line.append(el('span', { class: 'tr-text' }, ` → “${r.output_text}”`));
  out.append(line);

  // the focused step: what the model expected there
  const top = r.steps?.[t]?.top_k;
  const next = el('div', { class: 'tr-step' });
  next.append(el('h3', {}, `Step ${t + 1} of ${T}: the decoder reads “${shown(inputs[t])}” (and everything before it), writes “${shown(written[t])}”`));
  if (top) {
    const ol = el('ol', { class: 'next-list' });
    for (const p of top) {
      const li = el('li', p.id === r.output_ids[t + 1] ? { class: 'chosen' } : {});
      const bar = el('span', { class: 'next-bar' });
      bar.style.width = `${Math.max(1, Math.round(p.p * 100))}%`;
      li.append(bar, el('span', { class: 'next-label' }, `“${shown(p.token)}” ${(100 * p.p).toFixed(1)}%${p.id === r.output_ids[t + 1] ? (r.target ? ' ← the target' : ' ← chosen') : ''}`));
      li.title = `token ${p.id} (${p.token}): p = ${p.p.toPrecision(4)}`;
      ol.append(li);
    }
    next.append(ol);
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
  const play = el('button', { type: 'button', 'aria-label': playing ? 'stop' : 'play the decoding from its first step', 'aria-pressed': String(!!playing) }, playing ? '■ stop' : '▶ play');
  const slider = el('input', { type: 'range', min: '1', max: String(T), value: String(t + 1), 'aria-label': 'step', class: 'tr-slider' });
  prev.disabled = t === 0;
  fwd.disabled = t === T - 1;
  prev.addEventListener('click', () => onStep?.(t - 1));
  fwd.addEventListener('click', () => onStep?.(t + 1));
  play.addEventListener('click', () => onPlay?.());
  slider.addEventListener('input', () => onStep?.(Number(slider.value) - 1));
  nav.append(prev, slider, fwd, ...(onPlay ? [play] : []));
  next.append(nav);
  out.append(next);

  // the focused layer and head of each stack
  const pickers = el('p', { class: 'tr-pick' });
  const select = (label, n, value, onChange) => {
    const l = el('label', { class: 'inline' }, label + ' ');
    const s = el('select');
    for (let i = 0; i < n; i++) s.append(el('option', { value: String(i) }, String(i)));
    s.value = String(value);
    s.addEventListener('change', () => onChange(Number(s.value)));
    l.append(s);
    return l;
  };
  pickers.append(
    select('layer', Math.max(dec.layers, info.layers), layer, (v) => onFocus?.(v, head)),
    select('head', Math.max(dec.heads, info.heads), head, (v) => onFocus?.(layer, v)),
  );
  out.append(pickers);

  const grids = el('div', { class: 'tr-grids' });
  const rowTitle = (q) => `step ${q + 1}: reads ${shown(inputs[q])}, writes ${shown(written[q])}`;
  grids.append(matrix(
    `Cross-attention, decoder layer ${dl}, head ${dh}: each step's query (rows: what the decoder reads) over the source's keys and values (columns)`,
    inputs, r.source_tokens, r.cross_attention[dl][dh], { focus: t, onRow: onStep, rowTitle },
  ));
  grids.append(matrix(
    `Decoder self-attention, layer ${dl}, head ${dh}: under the no-peek mask, step t sees steps 0…t only`,
    inputs, inputs, r.decoder_attention[dl][dh], { masked: (q, k) => k > q, focus: t, onRow: onStep, rowTitle },
  ));
  grids.append(matrix(
    `Encoder self-attention, layer ${el0}, head ${eh}: the source reads itself, all at once`,
    r.source_tokens, r.source_tokens, r.encoder_attention[el0][eh],
  ));
  out.append(grids);
  out.append(el('p', { class: 'muted' }, `${S} source tokens, ${T} steps · decoder: ${dec.layers} layers × ${dec.heads} heads, encoder: ${info.layers} × ${info.heads} · ${tr.backend.replace(/^gpu: /, 'WebGPU: ')} · ${tr.elapsed_ms.toFixed(1)} ms`));
  // a step changed by the keyboard keeps the keyboard where it was: the same control, or the view
  const had = target.contains(document.activeElement) ? document.activeElement.getAttribute('aria-label') ?? '' : null;
  target.replaceChildren(out);
  target.tabIndex = 0;
  if (had !== null) (had && target.querySelector(`[aria-label="${CSS.escape(had)}"]`) || target).focus();
  // ← and → step through the decoding wherever the focus is in the view (not in a control that
  // takes the arrows itself)
  target.onkeydown = (e) => {
    if (!['ArrowLeft', 'ArrowRight'].includes(e.key) || e.target.closest?.('select, input')) return;
    e.preventDefault();
    onStep?.(Math.max(0, Math.min(T - 1, t + (e.key === 'ArrowRight' ? 1 : -1))));
  };
}
