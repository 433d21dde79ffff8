// Play: a state's step (or layer) moved on one at a time on a timer, from the focused one (from
// the first when at the last) until the last; the page's and each <attn-scope> element's own.

/** How long each step of a decoding (a translation's, a generation's) is shown while it plays. */
export const PLAY_MS = 700;

/**
 * A player of `store`'s state: `start({key, count, ms})` moves `key` ('step' or 'layer') on every
 * `ms` until `count − 1` (a null `key` is at its last), with the store's `playing` true meanwhile;
 * `stop()`; `toggle(along)` one or the other; `playing` whether it plays.
 */
export function player(store) {
  let timer = 0;
  const stop = () => {
    if (!timer) return;
    clearInterval(timer);
    timer = 0;
    store.update({ playing: false });
  };
  const start = ({ key, count, ms = PLAY_MS }) => {
    clearInterval(timer);
    timer = setInterval(() => {
      const now = store.get()[key] ?? count - 1;
      if (now >= count - 1) stop();
      else store.update({ [key]: now + 1 });
    }, ms);
    const now = store.get()[key] ?? count - 1;
    store.update({ [key]: now >= count - 1 ? 0 : now, playing: true });
  };
  return { start, stop, toggle: (along) => (timer ? stop() : start(along)), get playing() { return timer !== 0; } };
}
