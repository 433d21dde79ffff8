// The heads table: every head's summaries (src/analysis/heads.rs: entropy, attention to [CLS],
// [SEP], itself, the previous and next token, mean distance), sortable by any column, each cell
// tinted on its column's scale. Click a row to focus the head; alt-click knocks it out.

import { metricScale, css, inkOn } from '../colour.js';
import { METRICS, ROLES, metricLabel, metricsFor } from '../store.js';
import { layerNumber } from '../result.js';


/** The columns of a run's table (store.js `metricsFor`, and the roles where the text repeats),
 *  and the key its headers are built for. */
const columnsOf = (run, opts) => [...metricsFor(opts.modelInfo, run.mask_kind), ...(run.repeatOf?.(opts.item) ? Object.keys(ROLES) : [])];
const labelsKey = (run, opts) => `${opts.modelInfo?.specials?.join(' ') ?? ''}|${columnsOf(run, opts).join(' ')}`;

function build(target, run, opts) {
  target._labels = labelsKey(run, opts);
  target.replaceChildren();
  target.classList.add('heads-view');
  const note = document.createElement('p');
  note.className = 'muted heads-note';
  const wrap = document.createElement('div');
  wrap.className = 'table-wrap';
  const table = document.createElement('table');
  table.className = 'heads-table';
  const thead = table.createTHead().insertRow();
  for (const [key, label] of [['layer', 'layer'], ['head', 'head'], ...columnsOf(run, opts).map((m) => [m, metricLabel(m, opts.modelInfo, true)])]) {
    const th = document.createElement('th');
    th.scope = 'col';
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.sort = key;
    b.textContent = label;
    b.title = METRICS[key] || ROLES[key] ? `sort by ${metricLabel(key, opts.modelInfo)}` : `sort by ${key}`;
    th.append(b);
    thead.append(th);
  }
  table.createTBody();
  wrap.append(table);
  target.append(note, wrap);
  target._sort = { key: 'layer', desc: false };
  table.tHead.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-sort]');
    if (!b) return;
    const s = target._sort;
    target._sort = { key: b.dataset.sort, desc: s.key === b.dataset.sort ? !s.desc : b.dataset.sort !== 'layer' && b.dataset.sort !== 'head' };
    target._drawn = null;
    render(target, target._run, target._opts);
  });
  table.tBodies[0].addEventListener('click', (e) => {
    const tr = e.target.closest('tr[data-layer]');
    if (!tr) return;
    if (e.altKey) target._opts.onKnock?.(+tr.dataset.layer, +tr.dataset.head);
    else target._opts.onFocus?.(+tr.dataset.layer, +tr.dataset.head);
  });
}

/**
 * `run`: the result contract (with head metrics); `opts`: {item, layer, head, off: Set of
 * "layer:head", onFocus(layer, head), onKnock(layer, head)}.
 */
export function render(target, run, opts) {
  // the headers name the model's special tokens and the metrics that apply: built again for others
  if (!target.querySelector('.heads-table') || target._labels !== labelsKey(run, opts)) build(target, run, opts);
  target._run = run;
  target._opts = opts;
  const names = columnsOf(run, opts);
  const note = target.querySelector('.heads-note');
  const body = target.querySelector('tbody');
  if (!run.metric(opts.item, names[0])) {
    note.textContent = 'Computing the head summaries…';
    return;
  }
  const { key: sortKey, desc } = target._sort;
  const key = [run.id, opts.item, sortKey, desc, [...opts.off].join(',')].join('|');
  if (target._drawn !== key) {
    target._drawn = key;
    const cols = names.map((m) => {
      const v = run.metric(opts.item, m);
      let lo = Infinity, hi = -Infinity;
      for (const x of v) { lo = Math.min(lo, x); hi = Math.max(hi, x); }
      return { m, v, sc: metricScale(lo, hi, metricLabel(m, opts.modelInfo)) };
    });
    const rows = [];
    for (let l = 0; l < run.L; l++) for (let h = 0; h < run.H; h++) rows.push({ l, h, i: l * run.H + h });
    const val = (r) => (sortKey === 'layer' ? r.l * 1e4 + r.h : sortKey === 'head' ? r.h * 1e4 + r.l : run.metric(opts.item, sortKey)[r.i]);
    rows.sort((a, b) => (desc ? val(b) - val(a) : val(a) - val(b)));
    const trs = rows.map(({ l, h, i }) => {
      const tr = document.createElement('tr');
      tr.dataset.layer = l;
      tr.dataset.head = h;
      const th = document.createElement('th');
      th.scope = 'row';
      th.textContent = layerNumber(run, l); // given attention of some layers: the model's numbers
      const td = document.createElement('td');
      td.textContent = h;
      tr.append(th, td);
      for (const { m, v, sc } of cols) {
        const c = document.createElement('td');
        const rgb = sc.table[sc.index(v[i])];
        c.textContent = v[i].toFixed(3);
        c.dataset.metric = m;
        c.style.background = css(rgb);
        c.style.color = inkOn(rgb);
        tr.append(c);
      }
      if (opts.off.has(`${l}:${h}`)) { tr.classList.add('off'); tr.title = 'knocked out'; }
      return tr;
    });
    body.replaceChildren(...trs);
    for (const b of target.querySelectorAll('th button')) {
      b.parentElement.setAttribute('aria-sort', b.dataset.sort === sortKey ? (desc ? 'descending' : 'ascending') : 'none');
    }
    const repeat = run.repeatOf?.(opts.item);
    const roles = repeat ? ` The roles: over its text, which repeats a sequence of ${repeat.period} tokens (the induction and duplicate-token roles over the second repeat).` : '';
    note.textContent = `${run.L * run.H} heads of sentence ${opts.item + 1}, means over its ${run.results[opts.item].length} real tokens.${roles} Click a column to sort, a row to focus the head${opts.onKnock ? ', alt-click to knock it out' : ''}.`;
  }
  for (const tr of body.rows) tr.classList.toggle('focused', +tr.dataset.layer === opts.layer && +tr.dataset.head === opts.head);
}
