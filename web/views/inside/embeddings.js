// Inside the encoder (or a decoder-only model's decoder), panel "embeddings": token + position +
// token-type embeddings of each token (those the architecture has), their sum and the norm after
// it (a post-norm model's), each (T, D) with per-token L2 norms; and the
// learned position embeddings' cosine similarity beside that of sinusoidal encodings (both from
// the engine: src/analysis/positions.rs).

import { fit, bitmap } from '../../canvas.js';
import { cellAt } from '../../matrix.js';
import { pixels } from '../../colour.js';
import { heatmap, figure, part, rowNorms, robustMax, legendFor, diverging, begin } from './draw.js';
import { stackWord, normName } from '../../architecture.js';

const STEPS = [
  { name: 'embeddings.word', title: 'token (word) embedding', what: 'E_tok[id]' },
  { name: 'embeddings.position', title: '+ position embedding', what: 'P[t]' },
  { name: 'embeddings.tokenType', title: '+ token-type embedding', what: 'S[type]' },
  { name: 'embeddings.sum', title: '= sum', what: 'sum' },
  { name: 'embeddings.normed', title: '→ LayerNorm (enters layer 0)', what: 'LN(sum)' },
];

/** What the embeddings are, for this model's architecture (`info`: the model's ModelInfo). */
function introOf(info, D) {
  const how = `Rows are tokens, columns the ${D} dimensions; the bars on the right are each token's L2 norm.`;
  const arch = info?.architecture, norm = normName(arch);
  const positions = arch?.positions ?? { type: 'learned', offset: 0 }, types = arch?.token_types ?? true;
  const tables = [
    `its token's row of the vocabulary table${arch?.lm_head === 'tied' ? ' (the same table the LM head multiplies by to predict the next token)' : ''}`,
    ...(positions.type === 'learned' ? ['its position\'s row'] : positions.type === 'sinusoidal' ? ['its position\'s fixed sinusoidal encoding'] : []),
    ...(types ? ['its segment\'s (token type) row'] : []),
  ];
  const terms = ['E_tok[id]', ...(positions.type === 'learned' ? ['P[t]'] : positions.type === 'sinusoidal' ? ['PE(t)'] : []), ...(types ? ['S[type]'] : [])].join(' + ');
  const what = tables.length === 1
    ? `${tables[0]}, a learned vector of width D = ${D}`
    : `the sum of ${tables.length === 2 ? 'two' : 'three'} vectors of width D = ${D}: ${tables.slice(0, -1).join(', ')} and ${tables.at(-1)}`;
  const pre = arch?.norm_order === 'pre';
  const rescales = arch?.norm === 'rms' ? 'rescales' : 'centres and rescales';
  const after = pre
    ? `${types ? `No ${norm} here` : `${info.name} has no token types, and no ${norm} here`}: it is pre-norm, so each layer norms its input itself and a final ${norm} norms the last layer's output.`
    : `${types ? '' : `${info?.name ?? 'This model'} has no token types; `}${norm} then ${rescales} each token's sum.`;
  const thetas = [...new Set((arch?.layers ?? []).map((l) => l.rotary?.theta).filter((t) => t))];
  const rotary = positions.type === 'rotary'
    ? ` No position is added here: rotary embeddings (RoPE, θ = ${thetas.join(' or ')}) rotate each query and key inside every attention by its position, so a score depends on how far apart the two tokens are.`
    : '';
  const offset = positions.type === 'learned' && positions.offset
    ? ` Positions count from ${positions.offset}, not 0: RoBERTa keeps the rows before it for its padding token (its pad id is ${positions.offset - 1}), so P[t] is row t + ${positions.offset} for the t-th token and padding takes row ${positions.offset - 1}.`
    : '';
  return `Each token's vector entering the ${stackWord(arch)} is ${what}. ${after}${rotary} x = ${pre ? terms : `${norm}(${terms})`}.${offset} ${how}`;
}

/** `run`: the result contract; `opts`: {item, layer, width, fontPx, modelInfo, positions}. */
export function render(target, run, opts) {
  const trace = run.traceOf(opts.item);
  const has = trace && trace.names.includes('embeddings.word');
  const pos = opts.positions;
  const key = [run.id, opts.item, opts.width, has, pos?.n ?? 0, pos?.error ?? ''].join('|');
  const intro = begin(target, key);
  if (!intro) return;
  const info = opts.modelInfo;
  const D = info?.hidden ?? (has ? trace.get('embeddings.word').width : 0);
  intro.textContent = introOf(info, D);
  const grid = part(target, 'inside-row');
  if (!has) { grid.textContent = 'The embeddings\' steps are not in this run yet.'; return; }
  // a model without token types has no third table; a pre-norm one's sum enters layer 0 as it is
  const arch = info?.architecture, norm = normName(arch);
  const steps = STEPS.filter((st) => trace.names.includes(st.name)).map((st) => (st.name !== 'embeddings.normed' ? st
    : arch?.norm_order === 'pre' ? { ...st, title: `→ enters layer 0 (each layer's first ${norm} norms it)`, what: 'x₀' }
      : { ...st, title: `→ ${norm} (enters layer 0)`, what: `${norm === 'RMSNorm' ? 'RMSNorm' : 'LN'}(sum)` }));
  const tokens = run.results[opts.item].labels, rows = run.results[opts.item].length;
  const width = Math.max(280, opts.width || 900);
  const figW = width >= 900 ? Math.floor((width - 24) / 3) : width >= 600 ? Math.floor((width - 12) / 2) : width - 4;
  for (const s of steps) {
    const f = figure(grid, s.name, { legendBox: true });
    const { values, width: W } = trace.get(s.name);
    const max = robustMax(values.subarray(0, rows * W));
    const norms = rowNorms(values, W, rows);
    const { sc } = heatmap(f.canvas, { values, rows, W, tokens, max, width: figW, fontPx: opts.fontPx, norms, label: `${s.what}, ±99th pct |value|`, what: s.what, maxRowPx: 16 });
    f.set(s.title, `(${rows}, ${W})`);
    legendFor(f.legend, sc);
    f.canvas.setAttribute('aria-label', `${s.title}: ${rows} tokens × ${W} dimensions, colour ±${max.toFixed(3)}; L2 norms ${norms[0].toFixed(2)} (token 0) to ${norms[rows - 1].toFixed(2)} (token ${rows - 1})`);
  }
  // the position similarity: learned (this checkpoint) beside sinusoidal at the same width
  const simRow = part(target, 'inside-sim');
  const note = part(target, 'inside-note', 'p');
  if (!pos) { note.textContent = 'Position similarity: computing…'; return; }
  if (pos.error) { note.textContent = `Position similarity: ${pos.error}`; target.dataset.drawn = String(run.id); return; } // all there is (a rotary model has no table)
  const n = pos.n;
  const size = Math.max(220, Math.min(330, Math.floor((width - 40) / 2)));
  const sc = diverging(1, 'cosine similarity');
  for (const [id, title, values] of [['learned', 'learned position embeddings', pos.learned], ['sinusoidal', 'sinusoidal PE', pos.sinusoidal]]) {
    const f = figure(simRow, `sim-${id}`, { legendBox: id === 'sinusoidal' });
    const pad = 16, cell = (size - pad - 2) / n;
    const g = { nq: n, nk: n, q0: 0, k0: 0, cell, x0: pad, y0: pad, size: cell * n };
    const ctx = fit(f.canvas, size, size, n + 1);
    ctx.clearRect(0, 0, size, size);
    ctx.drawImage(bitmap(pixels(values, n, sc)), 0, 0, n, n, g.x0, g.y0, g.size, g.size);
    ctx.fillStyle = '#374151';
    ctx.font = '10px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'left';
    ctx.fillText(`position j: 0–${n - 1} →`, g.x0, g.y0 / 2);
    ctx.save(); ctx.translate(g.x0 / 2, g.y0); ctx.rotate(Math.PI / 2); ctx.fillText(`position i: 0–${n - 1} →`, 0, 0); ctx.restore();
    f.canvas._describe = (x, y) => { const c = cellAt(g, x, y); return c ? `positions ${c.q} and ${c.k}: cos ${values[c.q * n + c.k].toFixed(4)}` : null; };
    f.set(title, `cos(P[i], P[j]), (${n}, ${n})`, id === 'learned' ? `rows 0–${n - 1} of this checkpoint's position table (D = ${pos.dim})` : `PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)), D = ${pos.dim}`);
    f.canvas.setAttribute('aria-label', `cosine similarity of the ${title} of positions 0 to ${n - 1}, ${n} × ${n}; positions 0 and 1: ${values[1].toFixed(3)}`);
    if (id === 'sinusoidal') legendFor(f.legend, sc);
  }
  note.textContent = `${info?.name ?? 'This model'} learns a vector per position (one row for each of its ${opts.modelInfo?.max_length ?? 'first'} positions) instead of the fixed sinusoids of the original transformer. Both put nearby positions close (a bright band along the diagonal); the learned one is what this model actually adds at positions 0–${n - 1}.`;
  target.dataset.drawn = String(run.id);
}
