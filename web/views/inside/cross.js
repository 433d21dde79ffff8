// Inside the encoder, panel "cross" (being built: see issue 8).

/** `run`: the result contract; `opts`: the focused {item, layer, head}, {modelInfo, fontPx, noScale, onNoScale, scaling}. */
export function render(target, run, opts) {
  target.textContent = `layer ${opts.layer}, head ${opts.head}`;
}
