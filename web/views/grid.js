// The model view: every layer × head as a small heatmap (rows = layers). Click or arrow keys
// focus a head; alt-click knocks it out (or back in). Large inputs are pooled (max) to the
// thumbnail's pixels and drawn a few heads a frame, so no task blocks the page; a streaming
// generation's newer step draws only the thumbnails' rows it added. Coloured by a
// head metric (or, comparing two sentences, by max |ΔA|), each head is one flat colour with its value.
//
// All heads are drawn into ONE canvas laid over the grid's cells: a canvas is a composited layer
// of its own, and 72 of them (plus the layers the browser adds for what overlaps them) made every
// frame's commit cost 20–30 ms in software. The cells under it are empty elements that carry
// the layer/head, the click, the `focused`/`off` classes and each head's text alternative.

import { scale, pixels, metricScale, css, inkOn, MASKED_CSS } from '../colour.js';
import { dpr, measure } from '../canvas.js';
import { pooled, pooledFrame, pooledPart, thumbBins, THUMB } from '../summary.js';
import { metricLabel, PARTS, partWords } from '../store.js';
import { layerNumber } from '../result.js';
import * as legend from './legend.js';

const fmt = (v) => (Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2));

const BUDGET_MS = 5;
const FOCUS = '#1d4ed8', OFF = '#c0392b';

/** Grouped-query attention: how many query heads share a key/value head (0: each has its own). */
const perGroup = (info, H) => {
  const kv = info?.architecture?.heads?.key_value;
  return kv && kv < H && info.architecture.heads.query === H ? H / kv : 0;
};

/** The grid's cells and labels; `number(l)`: layer l as its model numbers it. */
function build(target, L, H, opts, number, reach) {
  target.replaceChildren();
  target.classList.add('grid-view');
  const grid = document.createElement('div');
  grid.className = 'grid';
  grid.tabIndex = 0;
  grid.setAttribute('role', 'grid');
  grid.setAttribute('aria-label', `${L} layers × ${H} heads; arrow keys move the focused head`);
  grid.style.gridTemplateColumns = `2.2em repeat(${H}, minmax(0, 1fr))`;
  // an ARIA grid of rows (each `display: contents`: the cells stay the CSS grid's items), a
  // header row of heads, then a row a layer
  const row = (...children) => {
    const r = document.createElement('div');
    r.setAttribute('role', 'row');
    r.append(...children);
    grid.append(r);
  };
  const header = (cls, text, role, name) => {
    const s = document.createElement('span');
    s.className = cls;
    s.textContent = text;
    s.setAttribute('role', role);
    s.setAttribute('aria-label', name);
    return s;
  };
  // grouped-query attention: which query heads share a key/value head, a bracket over them
  // (said in words beside the grid: the row is for the eye)
  const per = perGroup(opts.modelInfo, H);
  const sliding = reach.filter((r) => r?.attention === 'sliding'), mixed = sliding.length > 0 && sliding.length < L;
  if (per) {
    const groups = Array.from({ length: H / per }, (_, g) => {
      const s = document.createElement('span');
      s.className = 'kvlabel';
      s.style.gridColumn = `span ${per}`;
      s.textContent = `K/V head ${g}`;
      s.title = `query heads ${g * per}–${(g + 1) * per - 1} read key/value head ${g}`;
      return s;
    });
    const r = document.createElement('div');
    r.setAttribute('aria-hidden', 'true');
    r.className = 'kvrow';
    r.append(document.createElement('span'), ...groups);
    grid.append(r);
  }
  const corner = header('corner', '', 'columnheader', 'layer');
  corner.append(Object.assign(document.createElement('span'), { className: 'sr-only', textContent: 'layer' }));
  row(corner, ...Array.from({ length: H }, (_, h) => header('collabel', h, 'columnheader', `head ${h}`)));
  for (let l = 0; l < L; l++) {
    const cells = Array.from({ length: H }, (_, h) => {
      const c = document.createElement('div');
      c.className = 'cell';
      c.dataset.layer = l;
      c.dataset.head = h;
      c.id = `${target.id || 'grid'}-l${l}h${h}`; // the grid's active descendant when focused
      c.setAttribute('role', 'gridcell');
      c.setAttribute('aria-label', `layer ${number(l)}, head ${h}`);
      return c;
    });
    // a sliding-window layer's label in italics, a global one's in bold, where a model has both
    const w = reach[l]?.attention === 'sliding' ? reach[l].window : 0;
    const label = header('rowlabel', `L${number(l)}`, 'rowheader', `layer ${number(l)}${w ? `, a ${w}-token sliding window` : mixed ? ', global' : ''}`);
    if (w) label.classList.add('local');
    else if (mixed) label.classList.add('global');
    label.title = w ? `layer ${number(l)} attends through a sliding window: each token reaches its last ${w} tokens, itself included` : mixed ? `layer ${number(l)} is global: each token reaches every earlier token` : '';
    row(label, ...cells);
  }
  const canvas = document.createElement('canvas');
  canvas.className = 'thumbs';
  canvas.setAttribute('aria-hidden', 'true'); // the cells carry the text
  grid.append(canvas);
  grid.addEventListener('click', (e) => {
    const c = e.target.closest('.cell');
    if (!c) return;
    if (e.altKey) target._opts.onKnock?.(+c.dataset.layer, +c.dataset.head);
    else target._opts.onFocus?.(+c.dataset.layer, +c.dataset.head);
  });
  grid.addEventListener('keydown', (e) => {
    const mv = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] }[e.key];
    if (!mv) return;
    e.preventDefault();
    target._opts.onMove?.(mv[0], mv[1]); // relative: a second key before the next render still counts
  });
  target.append(grid);
  if (sliding.length) { // the layers' reach in words (the labels are for the eye)
    const windows = [...new Set(sliding.map((r) => r.window))].map((w) => w.toLocaleString('en')).join(' or ');
    const global = reach.map((r, l) => (r?.attention === 'sliding' ? null : `L${number(l)}`)).filter(Boolean);
    const note = document.createElement('p');
    note.className = 'grid-reach muted';
    note.textContent = mixed
      ? `Layers in italics attend through a sliding window of ${windows} tokens; the bold ones (${global.join(', ')}) are global: every earlier token.`
      : `Every layer attends through a sliding window of ${windows} tokens.`;
    target.append(note);
  }
  target._sheet = null;
  target._geo = null;
  // a new size re-lays the canvas over the cells and redraws what is there
  new ResizeObserver(() => { if (target._sheet) { layout(target); paint(target, null); } }).observe(grid);
}

/**
 * The canvas sized to the grid, and each cell's rectangle in its device pixels:
 * `target._geo = {ratio, rects: [L·H] of {x, y, s}, side}` (side: a cell's CSS width).
 */
function layout(target) {
  const grid = target.querySelector('.grid'), canvas = grid.querySelector('canvas.thumbs');
  const ratio = dpr();
  const w = grid.clientWidth, h = grid.clientHeight;
  const bw = Math.round(w * ratio), bh = Math.round(h * ratio);
  if (canvas.width !== bw || canvas.height !== bh) { canvas.width = bw; canvas.height = bh; }
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  const cells = [...grid.querySelectorAll('.cell')];
  const rects = cells.map((c) => {
    const x = Math.round(c.offsetLeft * ratio), y = Math.round(c.offsetTop * ratio);
    return { x, y, s: Math.round((c.offsetLeft + c.offsetWidth) * ratio) - x };
  });
  target._geo = { ratio, rects, side: cells[0]?.offsetWidth || 48 };
}

/**
 * Draws heads from the sheet (`indices`, or all when null) onto the canvas at their cells, then the
 * focus frame and the knocked-out marks. `target._sheet`: {canvas: one slot a head, slot: its
 * side, n: [L·H] pixel columns used (0: not drawn yet), rows: [L·H] pixel rows used (a sentence
 * pair's part may be wider than tall: drawn stretched to its square cell)} or {coloured: {fill(i),
 * ink(i), text(i)}}.
 */
function paint(target, indices) {
  const canvas = target.querySelector('.grid canvas.thumbs');
  const { rects, ratio } = target._geo, sheet = target._sheet, H = target._H;
  const { focused, off } = target._marks;
  const ctx = canvas.getContext('2d');
  ctx.imageSmoothingEnabled = false;
  if (indices === null) ctx.clearRect(0, 0, canvas.width, canvas.height);
  for (const i of indices ?? rects.keys()) {
    const r = rects[i];
    if (!r) continue;
    if (sheet.coloured) {
      ctx.fillStyle = sheet.coloured.fill(i);
      ctx.fillRect(r.x, r.y, r.s, r.s);
      ctx.fillStyle = sheet.coloured.ink(i);
      ctx.font = `${Math.round(r.s / 3.6)}px system-ui, sans-serif`;
      ctx.textAlign = 'center';
      ctx.textBaseline = 'middle';
      ctx.fillText(sheet.coloured.text(i), r.x + r.s / 2, r.y + r.s / 2);
    } else if (sheet.n[i] > 0) {
      const sx = (i % H) * sheet.slot, sy = Math.floor(i / H) * sheet.slot;
      ctx.drawImage(sheet.canvas, sx, sy, sheet.n[i], sheet.rows[i], r.x, r.y, r.s, r.s);
    } else {
      ctx.fillStyle = '#fff';
      ctx.fillRect(r.x, r.y, r.s, r.s);
    }
    if (off.has(i)) { // a knocked-out head: a red cross over it
      ctx.strokeStyle = OFF;
      ctx.lineWidth = Math.max(1.5, r.s / 14);
      ctx.beginPath();
      ctx.moveTo(r.x + r.s * 0.15, r.y + r.s * 0.15); ctx.lineTo(r.x + r.s * 0.85, r.y + r.s * 0.85);
      ctx.moveTo(r.x + r.s * 0.85, r.y + r.s * 0.15); ctx.lineTo(r.x + r.s * 0.15, r.y + r.s * 0.85);
      ctx.stroke();
    }
  }
  // the frames sit in the grid's gap: solid blue around the focused head, red dashes around a
  // knocked-out one (over the blue when it is both)
  const w = Math.max(2, Math.round(2 * ratio));
  const frame = (i, colour, dash) => {
    const r = rects[i];
    if (!r) return;
    ctx.strokeStyle = colour;
    ctx.lineWidth = w;
    ctx.setLineDash(dash);
    ctx.strokeRect(r.x - w / 2, r.y - w / 2, r.s + w, r.s + w);
  };
  frame(focused, FOCUS, []);
  for (const i of off) frame(i, OFF, [3 * w, 2 * w]);
  ctx.setLineDash([]);
}

/** A pair's part of a long text's head from its thumbnail (bins of w positions: those the part's
 *  rows and columns fall in), as pooledPart gives it; `arg` null (no cell of the head is known). */
function partOfThumb(t, T, part, R) {
  const { w } = thumbBins(T);
  const bins = { q0: Math.floor(part.q0 / w), q1: Math.ceil(part.q1 / w), k0: Math.floor(part.k0 / w), k1: Math.ceil(part.k1 / w) };
  return { ...pooledPart(t.values, t.mask, t.n, bins, R), arg: null };
}

/**
 * What colours the heads instead of their attention: `{values(l, h), sc, what}` for a metric
 * (when the run has it) or for max |ΔA| (comparing two sentences of the same length), else null.
 */
function colouring(run, opts) {
  if (opts.compare?.same) {
    const { maxAbs, maxAll } = opts.compare;
    return { values: maxAbs, sc: metricScale(0, maxAll, 'max |ΔA| of the head (second sentence − first)'), what: 'max |ΔA|' };
  }
  const flat = opts.metric ? run.metric(opts.item, opts.metric) : null;
  if (!flat) return null;
  let lo = Infinity, hi = -Infinity;
  for (const v of flat) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  return { values: (l, h) => flat[l * run.H + h], sc: metricScale(lo, hi, metricLabel(opts.metric, opts.modelInfo)), what: metricLabel(opts.metric, opts.modelInfo) };
}

/**
 * How many leading rows two thumbnails of a head ({values, mask, n, max}) have the same, values
 * and mask bit for bit: 0 where their sides differ, or their largest values where each is drawn
 * on a scale of its own (`ownScale`).
 */
function sameRows(t, was, ownScale) {
  if (t.n !== was.n || (ownScale && t.max !== was.max) || !t.mask !== !was.mask) return 0;
  // the values' bits as Int32 (small integers to V8, where Uint32's upper half would not be)
  const bits = (v) => (v.BYTES_PER_ELEMENT === 4 ? new Int32Array(v.buffer, v.byteOffset, v.length) : null);
  const a = bits(t.values), b = bits(was.values), n = t.n, m = t.mask, mw = was.mask;
  if (!a || !b) return 0;
  for (let r = 0; r < n; r++) {
    for (let i = r * n; i < (r + 1) * n; i++) if (a[i] !== b[i]) return r;
    if (m) for (let i = r * n; i < (r + 1) * n; i++) if (m[i] !== mw[i]) return r;
  }
  return n;
}

/**
 * A thumbnail's ({values, mask, n}) pixels from the row its row `r0` falls in, for a cell of R
 * pixels: where it is wider than R, pooled in the frame of an F-cell one (summary.js
 * `pooledFrame`), else its own rows. `{p0: the first pixel row, q: {values, mask, n, rows}}`.
 */
function rowsFrom(t, r0, R, F) {
  if (t.n <= R) return { p0: r0, q: { values: t.values.subarray(r0 * t.n), mask: t.mask?.subarray(r0 * t.n) ?? null, n: t.n, rows: t.n - r0 } };
  const p0 = Math.floor((r0 * R) / F);
  return { p0, q: pooledFrame(t.values, t.mask, t.n, R, F, p0) };
}

/** A generation's (web/generation.js GenerationResult) number, for the keys of what was drawn. */
const sources = new WeakMap();
let sourcesSeen = 0;
const sourceId = (source) => sources.get(source) ?? sources.set(source, ++sourcesSeen).get(source);

/**
 * `run`: the result contract (its heads T × T, or T × `run.nk`, each with its layer's mask);
 * `opts`: {item, layer, head, scale: 'absolute' | 'head', metric: a METRICS name or '', off: Set
 * of "layer:head" knocked out, compare: compareOf(run) or null, label: what the heads are (the
 * grid's accessible name begins with it), onFocus(layer, head), onMove(dLayer, dHead),
 * onKnock(layer, head)}.
 */

export function render(target, run, opts) {
  target._opts = opts;
  // `T` queries over `nk` keys: a run's T × T, or any attention's n_q × n_k (a translation's
  // cross-attention: result.js runOfMatrices)
  const { L, H, T } = run, nk = run.nk ?? T;
  const off = opts.off ?? new Set();
  const number = (l) => layerNumber(run, l);
  const reach = run.reach ?? [];
  const shape = `${L}x${H}x${perGroup(opts.modelInfo, H)}x${run.layerNumbers ?? ''}x${reach.map((r) => r?.window ?? 0).join(',')}`;
  if (target._shape !== shape) {
    build(target, L, H, opts, number, reach);
    target._shape = shape;
  }
  target._H = H;
  const cells = [...target.querySelectorAll('.grid .cell')];
  for (const c of cells) {
    const focused = +c.dataset.layer === opts.layer && +c.dataset.head === opts.head;
    c.classList.toggle('focused', focused);
    c.setAttribute('aria-selected', String(focused));
    if (focused) c.closest('.grid').setAttribute('aria-activedescendant', c.id); // a screen reader follows the arrow keys
    c.classList.toggle('off', off.has(`${c.dataset.layer}:${c.dataset.head}`));
  }
  const marks = { focused: opts.layer * H + opts.head, off: new Set([...off].map((k) => { const [l, h] = k.split(':'); return +l * H + +h; })) };
  const marksKey = `${marks.focused}|${[...marks.off].join(',')}`;
  const by = colouring(run, opts);
  // a sentence pair's part (one sentence's queries over one's keys): each head's block of it
  const part = by ? null : opts.part ?? null;
  // a generation's step is the same attention in its streamed run and in the pass over it
  // (scope.js stepPass): drawn once, unless the pass brings a colouring
  const drawnRun = run.generated ? `gen${sourceId(run.generated.source)}:${T}` : run.id;
  const key = [drawnRun, opts.item, opts.scale, by ? by.what : '', [...off].join(','), part?.name ?? ''].join('|');
  if (target._drawn === key) {
    // the same heads: only the focus frame may have moved
    if (target._marksKey !== marksKey && target._sheet) {
      target._marks = marks;
      target._marksKey = marksKey;
      paint(target, null);
    }
    return;
  }
  target._drawn = key;
  const last = target._grown; // what a finished drawing of a generation's step left (below)
  target._grown = null;
  const before = target._kept; // what a finished drawing of a run's thumbnails left (below)
  target._kept = null;
  const marksMoved = target._marksKey !== marksKey;
  target._marks = marks;
  target._marksKey = marksKey;
  // the colour key, only while the heads are coloured by a value
  let keyEl = target.querySelector('.grid-legend');
  if (by && !keyEl) {
    keyEl = document.createElement('div');
    keyEl.className = 'grid-legend';
    target.append(keyEl);
  }
  if (by) legend.render(keyEl, by.sc, { masked: false });
  else keyEl?.remove();
  let partEl = target.querySelector('.grid-part');
  if (part && !partEl) {
    partEl = document.createElement('p');
    partEl.className = 'grid-part part-label muted';
    target.prepend(partEl);
  }
  if (part) partEl.textContent = `${partWords(part)}, in every head`;
  else partEl?.remove();
  target.querySelector('.grid').setAttribute('aria-label', `${opts.label ? `${opts.label}: ` : ''}${L} layers × ${H} heads${by ? `, coloured by ${by.what}` : part ? `, ${PARTS[part.name]}` : ''}; arrow keys move the focused head${opts.onKnock ? ', alt-click knocks a head out' : ''}`);
  const token = (target._token = {});
  // the cells move only when the grid is resized (the ResizeObserver lays them out again then)
  // or rebuilt: reading their places at every keystroke forced a layout of the page
  if (!target._geo || target._geo.ratio !== dpr()) layout(target);
  // where the text repeats, each head's four roles in its label and tooltip
  const roles = run.repeatOf?.(opts.item) ? run.roleNames.map((name) => [name, run.metric(opts.item, `role:${name}`)]) : [];
  const rolesOf = (i) => (roles.length ? `; roles: ${roles.map(([name, v]) => `${name.replace('_', '-')} ${fmt(v[i])}`).join(', ')}` : '');
  const label = (i, text) => {
    const words = `layer ${layerNumber(run, Math.floor(i / H))}, head ${i % H}: ${text}${marks.off.has(i) ? ' (knocked out)' : ''}${rolesOf(i)}`;
    cells[i].setAttribute('aria-label', words);
    if (roles.length) cells[i].title = words;
    else cells[i].removeAttribute('title');
  };
  if (by) {
    const value = (i) => by.values(Math.floor(i / H), i % H);
    target._sheet = {
      coloured: {
        fill: (i) => css(by.sc.table[by.sc.index(value(i))]),
        ink: (i) => inkOn(by.sc.table[by.sc.index(value(i))]),
        text: (i) => fmt(value(i)),
      },
    };
    cells.forEach((_, i) => label(i, `${by.what} ${fmt(value(i))}`));
    paint(target, null);
    target.dataset.drawn = key;
    return;
  }
  const R = Math.max(16, Math.ceil(target._geo.side * dpr()));
  const tokens = run.results[opts.item].labels, keys = run.results[opts.item].keyLabels ?? tokens;
  const strongest = (arg, max) => `strongest ${tokens[Math.floor(arg / nk)]} → ${keys[arg % nk]} (${max.toFixed(2)})`;
  // the sheet keeps each head's pixels, so a resize or a focus move redraws without recomputing
  // (a slot of R pixels a head, kept while R is: short inputs use a corner of theirs)
  let sheet = target._sheet;
  if (!sheet?.canvas || sheet.slot !== R) {
    const fresh = { canvas: new OffscreenCanvas(H * R, L * R), slot: R, n: new Int32Array(L * H), rows: new Int32Array(L * H) };
    if (sheet?.canvas) { // until the new heads arrive, the old ones, rescaled
      const c = fresh.canvas.getContext('2d');
      c.imageSmoothingEnabled = false;
      sheet.n.forEach((n, i) => {
        if (n > 0) c.drawImage(sheet.canvas, (i % H) * sheet.slot, Math.floor(i / H) * sheet.slot, n, sheet.rows[i], (i % H) * R, Math.floor(i / H) * R, R, R);
        fresh.n[i] = fresh.rows[i] = n > 0 ? R : 0;
      });
    }
    sheet = target._sheet = fresh;
  }
  if (marksMoved) paint(target, null); // the frames moved: start from a clean canvas
  const sctx = sheet.canvas.getContext('2d');
  const probScale = (max) => scale('probability', { max: opts.scale === 'head' ? max : 1 });
  const gen = run.generated;
  // a generation's thumbnails wider than a slot are pooled in the frame of a full one (THUMB
  // cells), so that its bins stay put as the thumbnails grow
  const framed = (side) => Boolean(gen) && side > sheet.slot;
  // a streaming generation's newer step over the same bins: only its new thumbnail rows change
  // (the rows of the queries fed since, and a new column, masked above them), not L·H heads
  const thumbs = gen && !part && last?.source === gen.source && last.w === gen.w && last.T <= T && last.slot === sheet.slot
    && last.item === opts.item && last.scale === 'absolute' && opts.scale === 'absolute' && sheet.n.every((n) => n === last.px)
    ? cells.map((_, i) => run.thumb(opts.item, Math.floor(i / H), i % H)) : null;
  if (thumbs?.every(Boolean) && framed(thumbs[0].n) === framed(last.side)) {
    const start = performance.now(), r0 = Math.floor(last.T / gen.w), sc = probScale(1);
    thumbs.forEach((p, i) => {
      const x = (i % H) * sheet.slot, y = Math.floor(i / H) * sheet.slot;
      // the rows from the first that changed: the thumbnail's own, or its pooled pixels'
      const { p0, q } = rowsFrom(p, r0, sheet.slot, THUMB);
      if (q.rows > 0) sctx.putImageData(pixels(q.values, q.rows, sc, q.mask, q.n), x, y + p0);
      if (q.n > last.px && p0 > 0) {
        sctx.fillStyle = MASKED_CSS;
        sctx.fillRect(x + last.px, y, q.n - last.px, p0);
      }
      sheet.n[i] = sheet.rows[i] = q.n;
      label(i, strongest(p.arg, p.max));
    });
    paint(target, null);
    measure('attnscope:model:chunk', start);
    target.dataset.drawn = key;
    target.dataset.grown = String(Number(target.dataset.grown ?? 0) + 1); // how many times (the tests read it)
    target._grown = { ...last, T, side: thumbs[0].n, px: sheet.n[0] };
    return;
  }
  // a text typed on (the CPU engine took its first `reused` positions from its last pass): each
  // head's thumbnail rows that are the ones drawn before, bit for bit, stay as they were drawn
  const kept = !gen && !part && nk === T && run.reused > 0 && before?.sheet === sheet && before.item === opts.item
    && before.scale === opts.scale ? before.thumbs : null;
  let i = 0, keptHeads = 0;
  const step = () => {
    if (target._token !== token) return; // a newer render took over
    const start = performance.now(), drawn = [];
    while (i < cells.length && performance.now() - start < BUDGET_MS) {
      const l = Math.floor(i / H), h = i % H;
      // long inputs come pooled from the worker (pooled again here where a slot is smaller
      // than the thumbnail: a phone's or a laptop's cells; the strongest cell stays the worker's);
      // short ones are pooled here (cheaply)
      const t = run.thumb(opts.item, l, h);
      // a pair's part: from the head, or (a long text's head not fetched) its thumbnail's bins;
      // an n_q × n_k head: all of it, stretched to the square cell
      const block = part ?? (nk !== T ? { q0: 0, q1: T, k0: 0, k1: nk } : null);
      if (block) {
        const p = run.hasHead(opts.item, l, h) ? pooledPart(run.head(opts.item, l, h), run.maskOf(opts.item, l), nk, block, R) : partOfThumb(t, T, part, R);
        sctx.clearRect(h * sheet.slot, l * sheet.slot, sheet.slot, sheet.slot);
        sctx.putImageData(pixels(p.values, p.rows, probScale(p.max), p.mask, p.cols), h * sheet.slot, l * sheet.slot);
        sheet.n[i] = p.cols;
        sheet.rows[i] = p.rows;
        label(i, p.arg === null ? `${PARTS[part.name]}, strongest ${p.max.toFixed(2)}` : strongest(p.arg, p.max));
        drawn.push(i++);
        continue;
      }
      const was = kept?.[i], r0 = t && was ? sameRows(t, was, opts.scale === 'head') : 0;
      if (r0 > 0) { // its rows from the first that changed, pooled in the same bins as the whole's
        const { p0, q } = rowsFrom(t, r0, R, t.n);
        if (q.rows > 0) sctx.putImageData(pixels(q.values, q.rows, probScale(t.max), q.mask, q.n), h * sheet.slot, l * sheet.slot + p0);
        sheet.n[i] = sheet.rows[i] = q.n;
        label(i, strongest(t.arg, t.max));
        drawn.push(i++);
        keptHeads++;
        continue;
      }
      const p = !t ? pooled(run.head(opts.item, l, h), run.maskOf(opts.item, l), T, R) : framed(t.n) ? { ...pooledFrame(t.values, t.mask, t.n, R, THUMB), max: t.max, arg: t.arg }
        : t.n > R ? { ...pooledFrame(t.values, t.mask, t.n, R, t.n), max: t.max, arg: t.arg } : t; // (the worker's largest)
      const { max, arg } = p;
      sctx.putImageData(pixels(p.values, p.n, probScale(max), p.mask), h * sheet.slot, l * sheet.slot);
      sheet.n[i] = sheet.rows[i] = p.n;
      label(i, strongest(arg, max));
      drawn.push(i++);
    }
    paint(target, drawn);
    measure('attnscope:model:chunk', start);
    if (i < cells.length) requestAnimationFrame(step);
    else {
      target.dataset.drawn = key;
      target.dataset.keptHeads = keptHeads; // the heads drawn by the rows that changed (the tests read it)
      const t = run.thumb(opts.item, 0, 0);
      if (gen && t) target._grown = { source: gen.source, w: gen.w, T, side: t.n, px: sheet.n[0], slot: sheet.slot, item: opts.item, scale: opts.scale };
      if (!gen && !part && t) target._kept = { sheet, item: opts.item, scale: opts.scale, thumbs: cells.map((_, c) => run.thumb(opts.item, Math.floor(c / H), c % H)) };
    }
  };
  step();
}
