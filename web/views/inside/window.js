// Inside the layer, panel "window" (a model with sliding-window layers: Mistral, Qwen2's,
// Gemma 3's local ones): what each layer lets the focused token reach, with the real attention.
// First its attention in every layer (the focused head's row of the focused token; the keys
// outside a sliding layer's window masked, as the engine masked them), then how far information
// can travel to it through the stack: a sliding layer carries it at most w − 1 positions
// further, a global layer any distance.

import { fit, bitmap, hatchPattern } from '../../canvas.js';
import { scale, pixels } from '../../colour.js';
import { figure, part, begin, legendFor } from './draw.js';

const OWN = '#2166ac', THROUGH = '#b9d3ea', QUERY = '#d94801';

/**
 * Each layer's reach back from a query at `q` through the stack: `{own, through}` per layer, first
 * to last. `own`: the earliest key the layer itself lets `q` attend to; `through`: the earliest
 * position whose token can have reached `q`'s state by the end of that layer (every earlier
 * layer's window added: a global layer reaches position 0).
 * `reach`: each layer's `{attention: 'global' | 'sliding', window}`.
 */
export function reachBack(reach, q) {
  let back = 0; // how far back the token's state has read so far
  return reach.map((r) => {
    const w = r?.attention === 'sliding' ? r.window : Infinity;
    back = Math.min(q, back + (w === Infinity ? q : w - 1));
    return { own: Math.max(0, q - (w === Infinity ? q : w - 1)), through: q - back };
  });
}

/** `run`: the result contract; `opts`: {item, layer, head, sel, width, fontPx, modelInfo}. */
export function render(target, run, opts) {
  const arch = opts.modelInfo?.architecture, reach = arch?.layers ?? [];
  const { item, head: h } = opts;
  const n = run.results[item].length ?? run.T, T = run.T;
  const q = Math.min(n - 1, opts.sel?.length ? opts.sel[opts.sel.length - 1] : n - 1);
  const key = [run.id, item, h, q, opts.width, opts.layer].join('|');
  const intro = begin(target, key);
  if (!intro) return;
  target.classList.add('window-panel');
  const L = run.L, tokens = run.results[item].labels;
  const sliding = reach.map((r, l) => (r?.attention === 'sliding' ? l : -1)).filter((l) => l >= 0);
  if (!sliding.length) { intro.textContent = 'Every layer of this model is global: each token reaches every key its mask allows.'; return; }
  const windows = [...new Set(sliding.map((l) => reach[l].window))];
  const global = reach.map((r, l) => (r?.attention === 'sliding' ? -1 : l)).filter((l) => l >= 0);
  const W = Math.min(...windows);
  const layers = (ls) => `${ls.length > 1 ? 'Layers' : 'Layer'} ${ls.join(', ')}`;
  intro.textContent = `${global.length
    ? `${layers(sliding)} ${sliding.length > 1 ? 'attend' : 'attends'} through a sliding window of ${windows.join(' or ')} tokens: a query reaches only its own key and the ${W - 1} before it, the rest masked (−∞ before the softmax) as the padding or a later token is. ${layers(global)} ${global.length > 1 ? 'are' : 'is'} global: every earlier token.`
    : `Every layer attends through a sliding window of ${windows.join(' or ')} tokens: a query reaches only its own key and the ${W - 1} before it.`} A window keeps each layer's cost and cache to w keys a query, however long the text; what lies further back still arrives, passed along by the layers in between.${n <= W
    ? ` This text has ${n} tokens, no more than the window: no key is cut out. A text of over ${W} tokens shows the window at work.`
    : ''} Following "${tokens[q]}" (token ${q}${opts.sel?.length ? '' : ', the last: select a token in the head view to follow another'}).`;
  const width = Math.max(280, Math.min(1100, opts.width || 900));
  const fontPx = opts.fontPx ?? 11;
  const label = (l) => `L${l}${reach[l]?.attention === 'sliding' ? ` · ${reach[l].window}` : ' · global'}`;
  // the labels' column as wide as the longest (system-ui's digits and letters about 0.6 em)
  const padL = Math.ceil(fontPx * 0.62 * Math.max(...reach.map((_, l) => label(l).length))) + 8;
  // a phone's width: no words right of the rows (the tooltips say them)
  const side = width >= 560, padR = side ? Math.round(fontPx * 12) : 6, rowPx = Math.max(10, Math.min(22, Math.floor(360 / L)));
  const cellsW = width - padL - padR, colPx = cellsW / (q + 1);

  // 1. the focused head's attention from token q, in every layer, over keys 0..q
  const att = figure(part(target, 'inside-row window-attention'), 'window-attention', { legendBox: true });
  const here = Array.from({ length: L }, (_, l) => run.hasHead(item, l, h));
  const values = new Float32Array(L * (q + 1)), mask = new Uint8Array(L * (q + 1));
  for (let l = 0; l < L; l++) {
    if (!here[l]) continue;
    const p = run.head(item, l, h), m = run.maskOf(item, l);
    for (let k = 0; k <= q; k++) { values[l * (q + 1) + k] = p[q * T + k]; mask[l * (q + 1) + k] = m[q * T + k]; }
  }
  const hgt = L * rowPx + 4;
  const ctx = fit(att.canvas, width, hgt, q + 2);
  ctx.clearRect(0, 0, width, hgt);
  const sc = scale('probability', { max: 1 });
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(bitmap(pixels(values, L, sc, mask, q + 1)), 0, 0, q + 1, L, padL, 2, cellsW, L * rowPx);
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  ctx.textBaseline = 'middle';
  for (let l = 0; l < L; l++) {
    const y = 2 + l * rowPx;
    ctx.fillStyle = l === opts.layer ? QUERY : '#374151';
    ctx.textAlign = 'right';
    ctx.fillText(label(l), padL - 4, y + rowPx / 2);
    if (!here[l]) { ctx.fillStyle = '#f3f4f6'; ctx.fillRect(padL, y, cellsW, rowPx - 1); ctx.fillStyle = '#6b7280'; ctx.textAlign = 'left'; ctx.fillText('not computed for this long text', padL + 4, y + rowPx / 2); continue; }
    // the keys outside the window, hatched where a cell is wide enough to see it
    const r = reachBack([reach[l]], q)[0];
    if (r.own > 0 && colPx >= 3) { ctx.fillStyle = hatchPattern(ctx); ctx.fillRect(padL, y, r.own * colPx, rowPx - 1); }
    if (r.own > 0) { ctx.strokeStyle = OWN; ctx.lineWidth = 2; ctx.beginPath(); ctx.moveTo(padL + r.own * colPx, y); ctx.lineTo(padL + r.own * colPx, y + rowPx - 1); ctx.stroke(); }
    let best = 0;
    for (let k = 1; k <= q; k++) if (values[l * (q + 1) + k] > values[l * (q + 1) + best]) best = k;
    ctx.fillStyle = '#374151';
    ctx.textAlign = 'left';
    if (side) ctx.fillText(`most: ${tokens[best]}`.slice(0, 22), padL + cellsW + 6, y + rowPx / 2);
  }
  att.canvas._describe = (x, y) => {
    const l = Math.floor((y - 2) / rowPx), k = Math.floor((x - padL) / colPx);
    if (l < 0 || l >= L || k < 0 || k > q || !here[l]) return null;
    const why = run.maskWhy?.(item, l, q, k);
    return `layer ${l}, ${tokens[q]} → ${tokens[k]}: ${values[l * (q + 1) + k].toFixed(4)}${why ? ` (masked: ${why})` : ''}`;
  };
  att.set(`Head ${h}: "${tokens[q]}" attends in every layer`, `(${L} layers, ${q + 1} keys)`, 'Each row is one layer\'s attention from the token to keys 0…its own (the focused head; the blue line is a sliding layer\'s window edge, the keys left of it masked).');
  legendFor(att.legend, sc);
  att.canvas.setAttribute('aria-label', `head ${h}'s attention from token ${q} in each of ${L} layers; ${sliding.length} sliding layers of ${windows.join(' or ')} tokens`);

  // 2. how far back information can have come to token q, layer by layer
  const fig = figure(part(target, 'inside-row inside-reach'), 'window-reach');
  const back = reachBack(reach, q);
  const ctx2 = fit(fig.canvas, width, hgt, 0);
  ctx2.clearRect(0, 0, width, hgt);
  ctx2.font = `${fontPx}px system-ui, sans-serif`;
  ctx2.textBaseline = 'middle';
  for (let l = 0; l < L; l++) {
    const y = 2 + l * rowPx, { own, through } = back[l];
    ctx2.fillStyle = THROUGH;
    ctx2.fillRect(padL + through * colPx, y + 1, (q + 1 - through) * colPx, rowPx - 3);
    ctx2.fillStyle = OWN;
    ctx2.fillRect(padL + own * colPx, y + 1, (q + 1 - own) * colPx, rowPx - 3);
    ctx2.fillStyle = QUERY;
    ctx2.fillRect(padL + q * colPx, y + 1, Math.max(2, colPx), rowPx - 3);
    ctx2.fillStyle = l === opts.layer ? QUERY : '#374151';
    ctx2.textAlign = 'right';
    ctx2.fillText(label(l), padL - 4, y + rowPx / 2);
    ctx2.textAlign = 'left';
    ctx2.fillStyle = '#374151';
    if (side) ctx2.fillText(`from token ${through}`, padL + cellsW + 6, y + rowPx / 2);
  }
  fig.canvas._describe = (x, y) => {
    const l = Math.floor((y - 2) / rowPx);
    if (l < 0 || l >= L) return null;
    const { own, through } = back[l];
    return `layer ${l}: attends to tokens ${own}–${q} itself; by its end, "${tokens[q]}" can hold information from tokens ${through}–${q}`;
  };
  const full = back.findIndex((b) => b.through === 0);
  fig.set(`How far back information reaches "${tokens[q]}"`, `(${L} layers)`, `Dark: the keys the layer itself reaches; light: the positions whose information can have come to the token by the end of that layer, through the windows before it. ${full < 0 ? `After all ${L} layers it can know tokens ${back[L - 1].through}–${q}, no further back.` : `From layer ${full} on it can know every token before it${reach[full]?.attention === 'sliding' ? ', the windows stacked' : ', through a global layer'}.`}`);
  fig.canvas.setAttribute('aria-label', `how far back information reaches token ${q}: ${back.map((b, l) => `layer ${l} from token ${b.through}`).join(', ')}`);
  // what the panel says, for the tests
  target._window = { q, sliding, global, windows, back, masked: Array.from({ length: L }, (_, l) => reachBack([reach[l]], q)[0].own) };
  target.dataset.drawn = String(run.id);
}
