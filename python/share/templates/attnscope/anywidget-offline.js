// anywidget views from a saved notebook's widget state, without a kernel or a network (index.html.j2
// includes it, after REQUIRE_JS and HTML_MANAGER: the lab template's URLs, for other widgets).
const STATE = 'application/vnd.jupyter.widget-state+json';
const VIEW = 'application/vnd.jupyter.widget-view+json';

/** A base64 buffer of the state as the DataView anywidget hands a widget. */
const dataView = (b64) => {
  const bytes = Uint8Array.fromBase64 ? Uint8Array.fromBase64(b64) : Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  return new DataView(bytes.buffer);
};

/** A model's values, its buffers put back at their paths. */
function valuesOf(saved) {
  const values = structuredClone(saved.state ?? {});
  for (const { path, data, encoding } of saved.buffers ?? []) {
    if (encoding !== 'base64' || !path?.length) continue;
    let at = values;
    for (const key of path.slice(0, -1)) at = at[key];
    at[path[path.length - 1]] = dataView(data);
  }
  return values;
}

/** What a widget's module may call on its model: its values, and nothing to send them to. */
function modelOf(values) {
  const listeners = new Map();
  return {
    get: (name) => values[name],
    set: (name, value) => { values[name] = value; for (const f of listeners.get(`change:${name}`) ?? []) f(); },
    save_changes() {},
    send() { throw new Error('no kernel: this page was saved from a notebook, and this widget asks its kernel'); },
    on: (name, f) => listeners.set(name, [...(listeners.get(name) ?? []), f]),
    off: (name, f) => listeners.set(name, (listeners.get(name) ?? []).filter((g) => f && g !== f)),
    widget_manager: { get_model: async () => { throw new Error('no kernel: a saved page has no other models'); } },
  };
}

const modules = new Map(); // a module's text → its import

async function renderView(script, models) {
  const { model_id: id } = JSON.parse(script.textContent);
  const saved = models[id];
  if (!saved || saved.model_module !== 'anywidget') return false;
  const values = valuesOf(saved);
  if (!modules.has(values._esm)) {
    modules.set(values._esm, import(URL.createObjectURL(new Blob([values._esm], { type: 'text/javascript' }))));
  }
  let widget = (await modules.get(values._esm)).default;
  if (typeof widget === 'function') widget = await widget();
  if (values._css) {
    const style = document.createElement('style');
    style.textContent = values._css;
    document.head.append(style);
  }
  const model = modelOf(values);
  await widget.initialize?.({ model, experimental: {} });
  const el = document.createElement('div');
  el.className = 'attnscope-anywidget';
  script.replaceWith(el);
  try {
    await widget.render?.({ model, el, experimental: {} });
  } catch (e) {
    el.replaceChildren(unrendered(e));
  }
  return true;
}

/** The line shown where a widget could not be drawn. */
function unrendered(e) {
  const p = document.createElement('pre');
  p.textContent = `This widget could not be drawn from the saved state: ${e?.message ?? e}`;
  return p;
}

async function renderAll() {
  const stateScript = document.querySelector(`script[type="${STATE}"]`);
  if (!stateScript) return;
  const models = JSON.parse(stateScript.textContent).state ?? {};
  let others = false;
  for (const script of document.querySelectorAll(`script[type="${VIEW}"]`)) {
    try {
      if (!(await renderView(script, models))) others = true;
    } catch (e) {
      script.replaceWith(unrendered(e));
    }
  }
  // widgets anywidget does not make: JupyterLab's own renderer, from its CDN, as the lab template does
  if (others) {
    const require = document.createElement('script');
    require.src = REQUIRE_JS;
    require.onload = () => {
      const manager = document.createElement('script');
      manager.src = HTML_MANAGER;
      document.body.append(manager);
    };
    document.head.append(require);
  }
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', renderAll);
else renderAll();
