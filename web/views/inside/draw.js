// What the "inside the encoder" panels share: (T, W) heatmaps with token labels, per-token norms
// beside them and column bands (the heads), a figure with a caption and a tooltip, and small
// helpers. Every number drawn comes from the engine; this only maps values to colours.

import { scale, pixels } from '../../colour.js';
import { fit, bitmap } from '../../canvas.js';
import * as legend from '../legend.js';

/** A diverging scale (RdBu) of ±max labelled `label`. */
export function diverging(max, label) {
  return { ...scale('score', { max }), label };
}

/** A robust colour range: the 99th percentile of |value| (a few outlier dimensions would wash out the rest). */
export function robustMax(values) {
  const step = Math.max(1, Math.floor(values.length / 20000));
  const a = [];
  for (let i = 0; i < values.length; i += step) a.push(Math.abs(values[i]));
  a.sort((x, y) => x - y);
  return a[Math.min(a.length - 1, Math.floor(a.length * 0.99))] || 1;
}

/** The L2 norm of each of the first `rows` rows of a (·, W) matrix. */
export function rowNorms(values, W, rows) {
  const out = new Float32Array(rows);
  for (let t = 0; t < rows; t++) {
    let s = 0;
    for (let j = 0; j < W; j++) s += values[t * W + j] ** 2;
    out[t] = Math.sqrt(s);
  }
  return out;
}

/** Columns [c0, c0+w) of the first `rows` rows of a (·, W) matrix, as a new (rows, w) array. */
export function columns(values, W, rows, c0, w) {
  const out = new Float32Array(rows * w);
  for (let t = 0; t < rows; t++) out.set(values.subarray(t * W + c0, t * W + c0 + w), t * w);
  return out;
}

export const fmt = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toFixed(3));

/**
 * A figure: caption (title + shape), canvas, optional legend and note. `parent` gets it once;
 * returns its parts. Text only through textContent.
 */
export function figure(parent, id, { legendBox = false } = {}) {
  let fig = parent.querySelector(`figure[data-fig="${id}"]`);
  if (!fig) {
    fig = document.createElement('figure');
    fig.className = 'inside-fig';
    fig.dataset.fig = id;
    const cap = document.createElement('figcaption');
    const b = document.createElement('b'), shape = document.createElement('span');
    shape.className = 'shape';
    cap.append(b, ' ', shape);
    const canvas = document.createElement('canvas');
    canvas.setAttribute('role', 'img');
    fig.append(cap, canvas);
    if (legendBox) { const l = document.createElement('div'); l.className = 'legend'; fig.append(l); }
    const note = document.createElement('p');
    note.className = 'fig-note muted';
    fig.append(note);
    parent.append(fig);
  }
  return {
    fig, canvas: fig.querySelector('canvas'), legend: fig.querySelector('.legend'),
    set(title, shape, note = '') {
      fig.querySelector('b').textContent = title;
      fig.querySelector('.shape').textContent = shape;
      fig.querySelector('.fig-note').textContent = note;
    },
  };
}

/** An element `tag.cls` under `parent`, made once. */
/**
 * A panel's redraw, once per distinct `key` (the run and what the panel shows): its intro
 * paragraph to write into, or null when nothing changed since the last draw.
 */
export function begin(target, key) {
  if (target._key === key) return null;
  target._key = key;
  target.classList.add('inside-panel');
  tooltip(target);
  return part(target, 'inside-intro', 'p');
}

export function part(parent, cls, tag = 'div') {
  // every class it is made with (`'inside-row inside-eq'`: an element with both), so a second
  // draw finds the element the first made
  let el = parent.querySelector(`:scope > ${tag}${cls.split(/\s+/).map((c) => `.${c}`).join('')}`);
  if (!el) { el = document.createElement(tag); el.className = cls; parent.append(el); }
  return el;
}

/** `box`, a table that scrolls sideways on a narrow screen, made a named region the keyboard reaches. */
export function scrollRegion(box, label) {
  if (box.hasAttribute('tabindex')) return;
  box.tabIndex = 0;
  box.setAttribute('role', 'region');
  box.setAttribute('aria-label', label);
}

/** One tooltip for a panel, following the mouse over canvases whose `_describe(x, y)` says what is there. */
export function tooltip(target) {
  let tip = target.querySelector(':scope > .tooltip');
  if (tip) return tip;
  tip = document.createElement('div');
  tip.className = 'tooltip';
  tip.setAttribute('role', 'tooltip');
  tip.hidden = true;
  target.append(tip);
  target.addEventListener('mousemove', (e) => {
    const c = e.target;
    if (!(c instanceof HTMLCanvasElement) || !c._describe) { tip.hidden = true; return; }
    const r = c.getBoundingClientRect();
    const text = c._describe(e.clientX - r.left, e.clientY - r.top);
    if (!text) { tip.hidden = true; return; }
    tip.textContent = text;
    tip.style.left = `${e.clientX + 12}px`;
    tip.style.top = `${e.clientY + 12}px`;
    tip.hidden = false;
  });
  target.addEventListener('mouseleave', () => { tip.hidden = true; });
  return tip;
}

/**
 * Draws a (rows, W) matrix: tokens as rows (labelled when legible), W columns, a diverging
 * colour scale of ±max, each row's L2 norm as a bar on the right (`norms`), column bands of
 * `band` columns with band `focus` outlined. `width`: CSS pixels of the whole canvas.
 */
export function heatmap(canvas, { values, rows, W, tokens, max, width, fontPx = 11, norms = null, band = 0, focus = -1, label, what = 'value', maxRowPx = 18, height: fixedH = 0, top = 2 }) {
  const sc = diverging(max, label ?? what);
  const rowPx = fixedH ? fixedH / rows : Math.max(1, Math.min(maxRowPx, 560 / rows));
  const showLabels = rowPx >= 9;
  const font = Math.min(fontPx, Math.floor(rowPx) - 1, 12);
  const padL = showLabels ? Math.min(96, Math.round(font * 6.5)) : 14;
  const normW = norms ? 70 : 0;
  const y0 = band ? 14 : top;
  const h = Math.ceil(y0 + rows * rowPx) + 2;
  const cellsW = Math.max(40, width - padL - normW - 8);
  const ctx = fit(canvas, width, h, Math.max(rows, W) + 1);
  ctx.clearRect(0, 0, width, h);
  ctx.drawImage(bitmap(pixels(values, rows, sc, null, W)), 0, 0, W, rows, padL, y0, cellsW, rows * rowPx);
  const colPx = cellsW / W;
  if (band) {
    const bands = Math.round(W / band);
    ctx.strokeStyle = 'rgba(17,24,39,0.35)';
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let i = 1; i < bands; i++) { const x = padL + i * band * colPx; ctx.moveTo(x, y0); ctx.lineTo(x, y0 + rows * rowPx); }
    ctx.stroke();
    ctx.font = '10px system-ui, sans-serif';
    ctx.textAlign = 'center';
    ctx.textBaseline = 'alphabetic';
    for (let i = 0; i < bands; i++) {
      if (band * colPx < 14 && i !== focus) continue;
      ctx.fillStyle = i === focus ? '#b45309' : '#6b7280';
      ctx.fillText(i === focus ? `head ${i}` : String(i), padL + (i + 0.5) * band * colPx, 10);
    }
    if (focus >= 0) {
      ctx.strokeStyle = '#f59e0b';
      ctx.lineWidth = 2.5;
      ctx.strokeRect(padL + focus * band * colPx, y0 - 1, band * colPx, rows * rowPx + 2);
    }
  }
  ctx.fillStyle = '#374151';
  ctx.textBaseline = 'middle';
  if (showLabels) {
    ctx.font = `${font}px system-ui, sans-serif`;
    ctx.textAlign = 'right';
    for (let t = 0; t < rows; t++) ctx.fillText(tokens[t], padL - 4, y0 + (t + 0.5) * rowPx, padL - 6);
  } else {
    ctx.save();
    ctx.font = '10px system-ui, sans-serif';
    ctx.translate(7, y0);
    ctx.rotate(Math.PI / 2);
    ctx.textAlign = 'left';
    ctx.fillText(`tokens 0–${rows - 1} →`, 0, 0);
    ctx.restore();
  }
  if (norms) {
    const nMax = Math.max(...norms) || 1;
    const x = padL + cellsW + 6, bw = normW - 32;
    for (let t = 0; t < rows; t++) {
      ctx.fillStyle = '#9ca3af';
      ctx.fillRect(x, y0 + t * rowPx + (rowPx > 3 ? 1 : 0), Math.max(1, (norms[t] / nMax) * bw), Math.max(1, rowPx - (rowPx > 3 ? 2 : 0)));
      if (showLabels) {
        ctx.fillStyle = '#374151';
        ctx.font = `${Math.min(font, 10)}px system-ui, sans-serif`;
        ctx.textAlign = 'left';
        ctx.fillText(norms[t].toFixed(1), x + bw + 2, y0 + (t + 0.5) * rowPx);
      }
    }
  }
  canvas._describe = (x, y) => {
    const t = Math.floor((y - y0) / rowPx);
    if (t < 0 || t >= rows) return null;
    if (norms && x >= padL + cellsW + 4) return `${tokens[t]} (token ${t}): ‖row‖₂ = ${norms[t].toFixed(4)}`;
    const j = Math.floor((x - padL) / colPx);
    if (j < 0 || j >= W) return null;
    const head = band ? `, head ${Math.floor(j / band)} dim ${j % band}` : '';
    return `${tokens[t]} (token ${t}), ${what} column ${j}${head}: ${values[t * W + j].toFixed(4)}`;
  };
  return { sc, h, padL, cellsW, rowPx, y0 };
}

/** A legend for a diverging scale under a figure. */
export function legendFor(el, sc) {
  if (el) legend.render(el, sc, { masked: false });
}

/** The focused token: the first selected query if there is one, else the panel's own pick (default 1). */
export function focusToken(target, opts, rows) {
  const sel = opts.sel?.[0];
  const t = Number.isInteger(sel) ? sel : (target._token ?? 1);
  return Math.max(0, Math.min(rows - 1, t));
}

/** A token picker (a select) in `parent`, shown disabled while a selected query decides. */
export function tokenPicker(parent, target, tokens, current, fromSel, redraw) {
  const box = part(parent, 'token-pick', 'label');
  let sel = box.querySelector('select');
  if (!sel) {
    box.append('token ');
    sel = document.createElement('select');
    sel.addEventListener('change', () => { target._token = Number(sel.value); redraw(); });
    box.append(sel);
    box.append(document.createElement('span'));
  }
  const sig = tokens.join('\n');
  if (sel._sig !== sig) {
    sel.replaceChildren(...tokens.map((t, i) => { const o = document.createElement('option'); o.value = String(i); o.textContent = `${i}: ${t}`; return o; }));
    sel._sig = sig;
  }
  sel.value = String(current);
  sel.disabled = fromSel;
  box.querySelector('span').textContent = fromSel ? ' (the selected query token; clear the selection to pick)' : '';
}
