// Inside the layer, panel "cache" (a decoder-only model): grouped-query attention and the
// key/value cache, at the model's own sizes. Which query heads read each key/value head (the
// focused head's group marked); what a decoding keeps so that a step computes one new row
// instead of the whole square: K and V of every position fed, in every layer, for each
// key/value head, per token and for the positions on screen, against multi-head attention (a
// key/value head for every query head) and multi-query attention (one for all); and, while a
// generation is shown, how the cache has grown step by step.

import { fit } from '../../canvas.js';
import { part, begin, figure } from './draw.js';

const FOCUS = '#d94801', OTHER = '#9ca3af', KV = '#2166ac';

/** Bytes a decoding's cache holds: K and V, `layers` × `kvHeads` × `headDim` values each, per position. */
export const cacheBytes = ({ layers, kvHeads, headDim, positions, bytes = 4 }) => 2 * layers * kvHeads * headDim * positions * bytes;

/** `n` bytes in the unit a person reads them in. */
export function size(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }
  return `${n >= 100 || u === 0 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2)} ${units[u]}`;
}

/** `run`: the result contract; `opts`: {head, width, fontPx, modelInfo}. */
export function render(target, run, opts) {
  const info = opts.modelInfo ?? {}, arch = info.architecture;
  const gen = run.generated ?? null;
  const key = [run.id, opts.head, opts.width, run.T, gen?.step].join('|');
  const intro = begin(target, key);
  if (!intro) return;
  target.classList.add('cache-panel');
  if (arch?.kind !== 'decoder') { intro.textContent = 'This model reads its whole input at once: it keeps no cache.'; return; }
  const H = arch.heads.query, kv = arch.heads.key_value, d = arch.head_dim ?? info.head_dim, L = info.layers;
  const h = Math.min(opts.head, H - 1), group = H / kv, g = Math.floor(h / group);
  const n = run.T, max = info.max_length;
  const of = (heads, positions, bytes = 4) => cacheBytes({ layers: L, kvHeads: heads, headDim: d, positions, bytes });
  intro.textContent = `Writing token by token, a decoder-only model computes each new position's query, key and value once and keeps the keys and values (the KV cache): the next step attends with one new query row against every key kept, (1, d) · (d, n), instead of recomputing the whole (n, n) square. ${kv < H
    ? `${info.name ?? 'This model'} shares each key/value head among ${group} query heads (grouped-query attention, ${H} query heads over ${kv} key/value heads): the cache holds ${kv} heads a layer, not ${H}, ${group}× smaller, and each query head still has its own attention.`
    : `${info.name ?? 'This model'} gives every query head its own key/value head (multi-head attention, ${H} of each).`}`;

  // the heads: H query heads above, H_kv key/value heads below, each query head joined to the one it reads
  const width = Math.max(280, Math.min(1000, opts.width || 900));
  const heads = figure(part(target, 'inside-row'), 'heads');
  heads.set(`Query head ${h} reads key/value head ${g}`, `${H} query heads → ${kv} key/value heads of d = ${d}`,
    kv < H ? `Heads ${g * group}–${(g + 1) * group - 1} share it: their keys and values are the same numbers, their queries differ.` : 'One key/value head for each query head: nothing is shared.');
  drawHeads(heads.canvas, { H, kv, h, width, fontPx: opts.fontPx });

  // the sizes: this model, multi-head, multi-query; a token, the positions on screen, the longest input
  const rows = [
    [`this model (${kv < H ? 'grouped-query' : kv === 1 ? 'multi-query' : 'multi-head'}: ${kv} key/value head${kv === 1 ? '' : 's'} a layer)`, kv],
    ...(kv !== H ? [[`multi-head (${H} key/value heads, one per query head)`, H]] : []),
    ...(kv !== 1 ? [['multi-query (1 key/value head for all)', 1]] : []),
  ];
  const table = part(target, 'cache-table', 'table');
  const head = document.createElement('tr');
  for (const t of ['attention', 'a token', `${n} positions (on screen)`, `${max} positions, float16`]) {
    const th = document.createElement('th');
    th.textContent = t;
    head.append(th);
  }
  const body = rows.map(([label, k], i) => {
    const tr = document.createElement('tr');
    if (i === 0) tr.className = 'own';
    for (const t of [label, size(of(k, 1)), size(of(k, n)), size(of(k, max, 2))]) {
      const td = document.createElement(tr.childElementCount ? 'td' : 'th');
      td.textContent = t;
      tr.append(td);
    }
    return tr;
  });
  table.replaceChildren(head, ...body);
  const formula = part(target, 'inside-note', 'p');
  formula.textContent = `Per position: 2 (K and V) × ${L} layers × ${kv} key/value heads × ${d} values × 4 bytes (float32, as attnscope keeps them) = ${size(of(kv, 1))}. The last column is the model's longest input (${max} positions) in float16, as most runtimes keep it.`;

  // the growth: a step adds one position to every layer's cache
  const growth = part(target, 'cache-growth', 'p');
  growth.textContent = gen
    ? `This generation, at step ${gen.step + 1} of ${gen.outputs}: the prompt's ${gen.P} positions and ${gen.step} written before it are cached, ${n} in all, ${size(of(kv, n))}; each step adds ${size(of(kv, 1))}, and after the last it holds ${size(of(kv, gen.P + gen.outputs - 1))}.`
    : `Generate below to watch it grow: each token written adds ${size(of(kv, 1))}.`;
  // what the panel says, for the tests
  target._cache = { H, kv, d, L, n, perToken: of(kv, 1), onScreen: of(kv, n), multiHead: of(H, 1), multiQuery: of(1, 1), step: gen?.step ?? null };
  target.dataset.drawn = String(run.id);
}

/** Query heads in a row above their key/value heads, each joined to the one it reads; head `h` and its own marked. */
function drawHeads(canvas, { H, kv, h, width, fontPx = 11 }) {
  const hgt = 128, padX = 16;
  const ctx = fit(canvas, width, hgt, 0);
  ctx.clearRect(0, 0, width, hgt);
  const group = H / kv, g = Math.floor(h / group);
  const qw = Math.min(40, (width - 2 * padX) / H - 4), kw = Math.min(60, (width - 2 * padX) / kv - 8);
  const qx = (i) => padX + ((i + 0.5) / H) * (width - 2 * padX), kx = (j) => padX + ((j + 0.5) / kv) * (width - 2 * padX);
  const qy = 30, ky = 90;
  ctx.font = `${fontPx}px system-ui, sans-serif`;
  ctx.textAlign = 'center';
  ctx.textBaseline = 'middle';
  for (let i = 0; i < H; i++) {
    const mine = Math.floor(i / group) === g;
    ctx.strokeStyle = i === h ? FOCUS : mine ? KV : OTHER;
    ctx.lineWidth = i === h ? 2.5 : 1;
    ctx.beginPath(); ctx.moveTo(qx(i), qy + 9); ctx.lineTo(kx(Math.floor(i / group)), ky - 9); ctx.stroke();
  }
  ctx.lineWidth = 1;
  for (let i = 0; i < H; i++) {
    ctx.fillStyle = i === h ? FOCUS : '#fff';
    ctx.strokeStyle = i === h ? FOCUS : '#374151';
    ctx.fillRect(qx(i) - qw / 2, qy - 9, qw, 18);
    ctx.strokeRect(qx(i) - qw / 2, qy - 9, qw, 18);
    ctx.fillStyle = i === h ? '#fff' : '#111827';
    if (qw >= 14) ctx.fillText(`Q${i}`, qx(i), qy);
  }
  for (let j = 0; j < kv; j++) {
    ctx.fillStyle = j === g ? KV : '#fff';
    ctx.strokeStyle = KV;
    ctx.fillRect(kx(j) - kw / 2, ky - 9, kw, 18);
    ctx.strokeRect(kx(j) - kw / 2, ky - 9, kw, 18);
    ctx.fillStyle = j === g ? '#fff' : '#111827';
    if (kw >= 24) ctx.fillText(`K,V ${j}`, kx(j), ky);
  }
  ctx.fillStyle = '#6b7280';
  ctx.textAlign = 'left';
  ctx.fillText('query heads', padX, 9);
  ctx.fillText('key/value heads (what the cache keeps)', padX, hgt - 8);
  canvas.setAttribute('aria-label', `${H} query heads over ${kv} key/value heads: query head ${h} reads key/value head ${g}, with heads ${g * group} to ${(g + 1) * group - 1}`);
}
