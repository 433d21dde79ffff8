// The cross-attention panel (a section of its own after "Inside the encoder": an encoder has no
// cross-attention): the mechanism of a decoder's encoder–decoder attention with real weights:
// queries from the pair's second sentence, keys from the first (each encoded alone), through the
// focused layer's own projections (src/engine/cpu/encoder.rs `cross_attention`). Every head
// small, the focused one large with its tokens.

import { scale } from '../../colour.js';
import * as legend from '../legend.js';
import { el, heatmap, hoverTip, num } from './plot.js';

const EXAMPLE_PAIR = 'It was very comfortable.';

function build(target) {
  target.replaceChildren();
  target.classList.add('inside-panel', 'cross-panel');
  const parts = {
    intro: el('p', 'inside-intro'), caveat: el('p', 'inside-banner inside-caveat'), formula: el('p', 'inside-formula'),
    empty: el('div', 'inside-empty'), bigCap: el('p', 'inside-caption'), big: el('canvas'), leg: el('div', 'legend'),
    smallCap: el('p', 'inside-caption'), smalls: el('div', 'inside-smalls'),
  };
  parts.big.setAttribute('role', 'img');
  target.append(...Object.values(parts));
  target._parts = parts;
  hoverTip(target, parts.big, (cell) => {
    const v = target._view;
    if (!cell || !v) return null;
    return `${v.queries[cell.r]} → ${v.keys[cell.c]}: ${num(v.head[cell.r * v.nk + cell.c], 4)}`;
  });
}

/** `run`: the result contract; `opts`: {item, layer, head, pair, onPair, onFocus, noScale, modelInfo, fontPx, width}. */
export function render(target, run, opts) {
  if (!target._parts) build(target);
  const p = target._parts, info = opts.modelInfo ?? {}, fontPx = opts.fontPx ?? 11;
  const dk = info.head_dim, D = info.hidden, H = run.H;
  const width = Math.max(300, opts.width ?? 900);
  p.intro.textContent = 'In an encoder–decoder transformer (the original one, T5, BART, Marian), each decoder layer also attends to the encoder\'s output: its queries come from the sentence being generated, its keys and values from the encoded source. The matrix is rectangular, n_q × n_k. Its mask is the source\'s padding: in a batch, the keys of a shorter source\'s pad tokens get −∞ before softmax, so 0; there is no no-peek mask, as the whole source is known from the start. Here each sentence is encoded alone, with no padding, so no key is masked.';
  p.caveat.textContent = `${info.name} (${info.model_type}) is an encoder only: it has no trained cross-attention. This panel shows the mechanism with real weights: queries from sentence B\'s hidden states, keys (and values) from sentence A\'s, each sentence encoded alone, through the focused layer\'s own Q and K projections.`;
  // the real thing: a translation model trained here, its decoder reading its encoder
  const real = el('a', 'real-cross', 'See a trained one: the dates → ISO translation model\'s cross-attention, inside its decoder.');
  real.href = '#model=models/dates/&s=the%209th%20of%20May%202018&inside=dec-cross';
  p.caveat.append(' ', real);
  if (info.architecture?.kind === 'decoder') {
    // a decoder-only model has neither a second sentence nor an encoder to read
    p.caveat.textContent = `${info.name} is a decoder-only model: it has no encoder, so no encoder–decoder attention, and it reads one text, so there is no second sentence to imitate one with. This panel does not apply to it.`;
    p.formula.textContent = '';
    p.empty.replaceChildren();
    for (const c of [p.bigCap, p.big, p.leg, p.smallCap, p.smalls]) c.hidden = true;
    return;
  }
  for (const c of [p.bigCap, p.big, p.leg, p.smallCap, p.smalls]) c.hidden = false;
  const cross = opts.pair?.trim() ? run.crossOf(opts.item) : null;
  p.empty.replaceChildren();
  if (!opts.pair?.trim()) {
    p.empty.append(el('p', '', 'Cross-attention needs a second sentence: type one in the "Second sentence (pair)" box above. Its tokens become the queries (rows); this sentence\'s tokens become the keys (columns).'));
    const b = el('button', '', `fill a pair example ("${EXAMPLE_PAIR}")`);
    b.type = 'button';
    b.addEventListener('click', () => target._opts?.onPair?.(EXAMPLE_PAIR));
    p.empty.append(b);
  } else if (!cross) p.empty.append(el('p', '', 'The engine is computing the cross-attention…'));
  target._opts = opts;
  const showing = Boolean(cross);
  for (const k of ['formula', 'bigCap', 'big', 'leg', 'smallCap', 'smalls']) p[k].hidden = !showing;
  if (!showing) { target._view = null; target.dataset.drawn = String(run.id); return; }

  const nq = cross.queries.length, nk = cross.keys.length, layer = cross.layer, h = Math.min(opts.head, H - 1);
  const headOf = (i) => cross.attention.subarray(i * nq * nk, (i + 1) * nq * nk);
  const div = run.scale === 'none' ? '' : ' / √d_k';
  p.formula.textContent = `A = softmax(Q_B K_Aᵀ${div}), Q_B = H_B W_q^(${layer}) → (${nq}, ${D}), split into ${H} heads of (${nq}, ${dk}); K_A = H_A W_k^(${layer}) → (${nk}, ${D}), heads of (${nk}, ${dk}); each head's A: (${nq}, ${dk})·(${dk}, ${nk}) → (${nq}, ${nk}), then A · V_A → (${nq}, ${dk})${run.scale === 'none' ? ' (the ablation is on: not divided by √d_k)' : ''}`;
  const sc = scale('probability');
  legend.render(p.leg, sc, { masked: false });
  const head = headOf(h);
  p.bigCap.textContent = `layer ${layer}, head ${h}: queries = sentence B (the pair, ${nq} tokens, rows) × keys = sentence A (${nk} tokens, columns)`;
  p.big._g = heatmap(p.big, {
    values: head, rows: nq, cols: nk, sc, width: Math.min(width, 140 + nk * 40), fontPx, maxCellW: 40,
    rowLabels: cross.queries, colLabels: cross.keys,
  });
  p.big.setAttribute('aria-label', `cross-attention, layer ${layer}, head ${h}: ${nq} queries (${cross.queries.join(' ')}) × ${nk} keys (${cross.keys.join(' ')})`);
  target._view = { queries: cross.queries, keys: cross.keys, head, nk };
  target._shown = { layer, head: h, queries: cross.queries, keys: cross.keys, attention: Array.from(cross.attention) };

  p.smallCap.textContent = `all ${H} heads of layer ${layer} (${nq} × ${nk} each); click one to focus it`;
  const smallW = Math.max(60, Math.min(160, Math.floor((width - 8 * 6) / Math.min(H, 6))));
  while (p.smalls.children.length > H) p.smalls.lastChild.remove();
  while (p.smalls.children.length < H) {
    const fig = el('figure', 'inside-small');
    const c = el('canvas');
    c.setAttribute('role', 'img');
    const i = p.smalls.children.length;
    c.addEventListener('click', () => target._opts?.onFocus?.(target._layer, i));
    fig.append(c, el('figcaption'));
    p.smalls.append(fig);
  }
  target._layer = layer;
  [...p.smalls.children].forEach((fig, i) => {
    const c = fig.querySelector('canvas');
    heatmap(c, { values: headOf(i), rows: nq, cols: nk, sc, width: smallW, left: 0, top: 0, cellH: smallW / nk });
    fig.classList.toggle('focused', i === h);
    fig.querySelector('figcaption').textContent = `head ${i}`;
    c.setAttribute('aria-label', `cross-attention, layer ${layer}, head ${i}, ${nq} × ${nk}${i === h ? ' (focused)' : ''}`);
  });
  target.dataset.drawn = String(run.id);
}
