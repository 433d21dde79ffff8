// What the benchmarks read of the page besides their own timings: each view's render measure,
// and CPU profiles of the page's workers (the engine's, web/worker.js, and its pool threads).

/** Records each view's render measure (web/canvas.js `measure`) in `window.__measures`
 *  (`{name, t, ms}`) from the page's next load on. */
export async function measureViews(page) {
  await page.addInitScript(() => {
    const m = window.__measures = [];
    new PerformanceObserver((l) => { for (const e of l.getEntries()) if (e.name.startsWith('attnscope:')) m.push({ name: e.name.slice(10), t: e.startTime, ms: e.duration }); }).observe({ type: 'measure' });
  });
}

/** The workers' DevTools targets (the engine's, web/worker.js, and its pool threads, blobs),
 *  through the browser's CDP session: `send(target, method, params)`. */
export async function workerTargets(browser) {
  const cdp = await browser.newBrowserCDPSession();
  const { targetInfos } = await cdp.send('Target.getTargets');
  const replies = new Map();
  let next = 1;
  cdp.on('Target.receivedMessageFromTarget', (e) => {
    const m = JSON.parse(e.message);
    if (m.id && replies.has(m.id)) { replies.get(m.id)(m); replies.delete(m.id); }
  });
  const targets = [];
  for (const t of targetInfos.filter((x) => x.type === 'worker')) {
    const { sessionId } = await cdp.send('Target.attachToTarget', { targetId: t.targetId, flatten: false });
    targets.push({ engine: /\/web\/worker\.js/.test(t.url), sessionId });
  }
  const send = (target, method, params = {}) => new Promise((resolve, reject) => {
    const id = next++;
    replies.set(id, (m) => (m.error ? reject(new Error(`${method}: ${m.error.message}`)) : resolve(m.result)));
    cdp.send('Target.sendMessageToTarget', { sessionId: target.sessionId, message: JSON.stringify({ id, method, params }) }).catch(reject);
  });
  return { targets, send, detach: () => cdp.detach() };
}

/** A Rust function's name as the profile has it, shorter: no crate hashes, type parameters as `<…>`. */
export function shortName(name) {
  let out = '', depth = 0;
  for (const c of name.replace(/\[[0-9a-f]{16}\]/g, '')) {
    if (c === '<') { if (depth++ === 1) out += '…'; if (depth > 1) continue; }
    if (c === '>' && --depth > 0) continue;
    if (depth <= 1) out += c;
  }
  return out.length > 90 ? `${out.slice(0, 89)}…` : out;
}

/** A CPU profile's self time by function, the `top` largest: [[name, ms]]. */
export function selfTimes(profile, top = 8) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const ms = new Map();
  for (let i = 0; i < profile.samples.length; i++) {
    const n = byId.get(profile.samples[i]), f = n.callFrame;
    const name = shortName(f.functionName || (f.url ? `(anonymous ${f.url.split('/').pop()}:${f.lineNumber})` : '(program)'));
    ms.set(name, (ms.get(name) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1e3);
  }
  return [...ms].sort((a, b) => b[1] - a[1]).slice(0, top);
}

