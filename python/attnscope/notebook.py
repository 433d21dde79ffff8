"""attnscope in the notebook: bertviz's ``head_view`` and ``model_view``, drawn by attnscope's
``<attn-scope>`` element, and :func:`run`, attnscope's own engine in the notebook's browser.

    from attnscope import head_view      # was: from bertviz import head_view
    head_view(outputs.attentions, tokens)

``head_view`` and ``model_view`` show a :class:`Page`, as bertviz shows its HTML: one ``text/html``
output holding the element's code and the numbers, which needs no kernel, no widget state and no
network, so a notebook saved with JupyterLab's defaults, reopened, exported by nbconvert or shown
by a static viewer keeps its views. The numbers are stored as ``uint16`` by default (each
probability within 7.6e-6), gzipped; ``precision="float32"`` keeps them exact. :func:`run` is an
anywidget widget (JupyterLab, Notebook 7, VS Code, Colab): its kernel sends the checkpoint and the
engine's wasm. The front end (``static/widget.js``, one ES module: the element, its views and
styles) ships in the wheel; nothing is fetched from a CDN.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import gzip
import hashlib
import html
import json
import numbers
import re
import uuid
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .records import DTYPES, Given, given

STATIC = Path(__file__).parent / "static"
WIDGET_JS = STATIC / "widget.js"
#: The engine's one-thread SIMD128 wasm build (python/js/build.mjs copies it from web/pkg).
WASM = STATIC / "attnscope_bg.wasm"

#: A checkpoint folder's files the engine reads (tokenizer_config.json and chat_template.jinja:
#: a chat template, as transformers saved it before 5 and since; optional).
CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json")
OPTIONAL_FILES = ("tokenizer_config.json", "chat_template.jinja")

#: The views of run() (the element's `view` attribute).
RUN_VIEWS = ("model", "head", "lines", "steps", "masks", "inside", "generate", "heads", "rollout")

#: Above this many bytes of float32 values, head_view and model_view first show the layer their
#: view opens on, alone, then every layer in its place: the browser draws it sooner (a fraction of
#: the bytes to store, send and read; measured: tests/e2e/notebook_bench.mjs, docs/notebook.md).
PREVIEW_ABOVE = 16 << 20


def _first_layer(g: Given) -> Given | None:
    """A large encoder's or decoder's records of the layer the view opens on, alone (else None)."""
    if g.kind == "encoder-decoder" or len(g.records) < 2:
        return None
    if sum(r.values.size for r in g.records) * 4 <= PREVIEW_ABOVE:
        return None
    want = g.view.get("layer", g.records[0].layer)
    return dataclasses.replace(g, records=[r for r in g.records if r.layer == want])

#: A page's lines beside the view: its note, and what it says until its script runs.
NOTE_STYLE = "margin:0.25em 0;font:12px system-ui,sans-serif;color:#595959"
WITHOUT_SCRIPT = (
    "attnscope's attention view draws with its script, which has not run here: in JupyterLab, trust the "
    "notebook (Command Palette: Trust Notebook) or run the cell again; a viewer that runs no script "
    "(GitHub's) cannot show it, nbviewer and nbconvert's HTML can."
)

#: bertviz's values of ``html_action``.
HTML_ACTIONS = ("view", "return")

#: bertviz's values of ``display_mode`` (model_view).
DISPLAY_MODES = ("light", "dark")


def front_end() -> str:
    """The widget's ES module: built by ``make wheel`` (python/js/build.mjs) into the package."""
    if not WIDGET_JS.is_file():
        raise RuntimeError(
            f"{WIDGET_JS}: missing; attnscope's front end is built into the wheel "
            "(`make wheel` in the repository, then `pip install target/wheels/attnscope-*.whl`)"
        )
    return WIDGET_JS.read_text(encoding="utf-8")


@functools.cache
def _front_end_gzipped(text: str) -> str:
    """The front end gzipped, in base64 (a third of its size: each page carries it)."""
    return base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


@functools.cache
def _run_class():
    """run()'s widget class, made once: anywidget is imported here."""
    try:
        import anywidget
        import traitlets
    except ImportError as e:  # head_view and model_view work without them; run() does not
        raise ImportError(
            "attnscope's run() is an anywidget widget: `pip install anywidget` (or install attnscope's wheel "
            "with its extra: `pip install \"target/wheels/attnscope-0.1.0-py3-none-any.whl[notebook]\"`)"
        ) from e

    class Run(anywidget.AnyWidget):
        """One ``<attn-scope>`` element running attnscope's engine on a checkpoint (:func:`run`).

        * ``_checkpoint``: ``{key, name}`` of the files, which the page asks for by a custom
          message (sent as buffers, never saved in the notebook), as it asks for the wasm, once a
          page; a Hub id's files the element fetches (``_checkpoint`` empty);
        * ``attributes``: the element's (``sentence``, ``view``, ``layer``, ``head``, …).
        """

        _esm = front_end()
        _checkpoint = traitlets.Dict().tag(sync=True)
        attributes = traitlets.Dict().tag(sync=True)

        def __init__(self, files: dict[str, Path] | None, checkpoint: dict[str, str], attributes: dict[str, Any]) -> None:
            super().__init__(_checkpoint=checkpoint, attributes=attributes)
            self.checkpoint_files = files or {}
            self.on_msg(self._answer)

        def _answer(self, _widget, content: dict[str, Any], _buffers) -> None:
            kind, at = content.get("type"), content.get("id")  # the answer carries the request's id
            try:
                if kind == "wasm?":
                    self.send({"type": "wasm", "id": at}, buffers=[WASM.read_bytes()])
                elif kind == "files?":
                    names = list(self.checkpoint_files)
                    self.send({"type": "files", "id": at, "names": names}, buffers=[self.checkpoint_files[n].read_bytes() for n in names])
            except OSError as e:  # the file moved or went: the widget says so
                self.send({"type": "error", "id": at, "message": f"{e.filename}: {e.strerror}"})
            except Exception as e:  # noqa: BLE001: whatever it is, the widget says it, not waits
                self.send({"type": "error", "id": at, "message": f"{type(e).__name__}: {e}"})

        def _repr_mimebundle_(self, **kwargs):
            # where no widget can render (a saved notebook exported or viewed without the widget's
            # state): what ran, and how to see it
            bundle = super()._repr_mimebundle_(**kwargs)
            data = bundle[0] if isinstance(bundle, tuple) else bundle
            if isinstance(data, dict):
                a = self.attributes
                line = (
                    f"attnscope.run: {self._checkpoint.get('name') or a.get('hf', 'a model')} on “{a.get('sentence', '')}”, "
                    f"view {a.get('view')!r}. attnscope's engine draws it in the browser, with the kernel: run the cell to see it."
                )
                data["text/plain"] = line
                data["text/html"] = f"<p>{html.escape(line)}</p>"
            return bundle

    return Run


class Page:
    """Given attention as one standalone HTML file: the element, its code and the numbers, inline.

    In a notebook it displays itself (``_repr_html_``), as bertviz's views do: the output needs
    no kernel, no widget state and no network. ``save(path)`` writes it as a whole document;
    ``data`` is the HTML text. The numbers travel gzipped, as ``precision`` says (``"uint16"``:
    each probability within 7.6e-6; ``"bfloat16"``; ``"float32"``: exact); the element's
    ``result`` carries them as stored, with that ``precision``. ``note``: a line under the view
    (a large input's first layer: the others are on their way); ``tag``: the output's id, which
    the page with every layer shares with its first layer's (it takes that element over: the
    reader's layer and head stay).
    """

    def __init__(self, g: Given, attributes: dict[str, Any], precision: str = "uint16", note: str | None = None, tag: str | None = None) -> None:
        if precision not in DTYPES:
            raise ValueError(f"precision={precision!r}: expected one of {', '.join(map(repr, DTYPES))}")
        self.given = g
        self.attributes = dict(attributes)
        self.precision = precision
        self.tag = tag or f"attnscope-{uuid.uuid4().hex}"
        self.data = self._html(note)

    def _html(self, note: str | None) -> str:
        # the safetensors file, its values' bytes in planes (every value's first byte, then every
        # second…: a plane of high bytes compresses to a fraction), gzipped; the page puts them back
        file = self.given.to_safetensors(self.precision)
        head = 8 + int.from_bytes(file[:8], "little")
        width = DTYPES[self.precision].width  # the bytes of a value: a page's planes
        planes = np.frombuffer(file, np.uint8, offset=head).reshape(-1, width).T.tobytes()
        payload = base64.b64encode(gzip.compress(file[:head] + planes, compresslevel=1, mtime=0)).decode("ascii")
        attrs = json.dumps({k: str(v) for k, v in self.attributes.items()}).replace("</", "<\\/")
        tag = json.dumps(self.tag)
        note_html = f'<p class="attnscope-note" style="{NOTE_STYLE}">{html.escape(note)}</p>' if note else ""
        # The module (gzipped) is imported from a blob once a page: an earlier output may have
        # defined <attn-scope>. The element is made with its data, then placed: one placed bare
        # would start on its default model. A first layer's element is kept by its id, for the
        # page with every layer to take over (the same view: the reader's layer and head stay).
        return (
            f'<div class="attnscope-page" id="{self.tag}"><p style="{NOTE_STYLE}">{WITHOUT_SCRIPT}</p></div>{note_html}\n'
            '<script type="module">\n'
            f"const CODE = {json.dumps(_front_end_gzipped(front_end()))};\n"
            f"const DATA = {json.dumps(payload)}, WIDTH = {width};\n"
            f"const place = document.getElementById({tag});\n"
            "const bytes = (b64) => {\n"
            "  if (Uint8Array.fromBase64) return Uint8Array.fromBase64(b64);\n"
            "  const s = atob(b64), out = new Uint8Array(s.length);\n"
            "  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);\n"
            "  return out;\n"
            "};\n"
            "const inflated = (b64) => new Response(new Blob([bytes(b64)]).stream().pipeThrough(new DecompressionStream('gzip')));\n"
            "try {\n"
            "  if (!customElements.get('attn-scope')) {\n"
            "    const url = URL.createObjectURL(new Blob([await inflated(CODE).text()], { type: 'text/javascript' }));\n"
            "    try { await import(url); } finally { URL.revokeObjectURL(url); }\n"
            "  }\n"
            "  const packed = new Uint8Array(await inflated(DATA).arrayBuffer());\n"
            "  const head = 8 + Number(new DataView(packed.buffer).getBigUint64(0, true)), n = (packed.length - head) / WIDTH;\n"
            "  const file = new Uint8Array(packed.length);\n"
            "  file.set(packed.subarray(0, head));\n"
            "  for (let k = 0; k < WIDTH; k++) for (let i = 0, at = head + k * n; i < n; i++) file[head + i * WIDTH + k] = packed[at + i];\n"
            "  const kept = (globalThis.__attnscopePreviews ??= new Map());\n"
            f"  let el = kept.get({tag});\n"
            f"  kept.delete({tag});\n"
            "  if (!el || el.isConnected) {\n"
            "    el = document.createElement('attn-scope');\n"
            f"    for (const [k, v] of Object.entries({attrs})) el.setAttribute(k, v);\n"
            "  }\n"
            + (f"  kept.set({tag}, el);\n  el.setAttribute('data-preview', '');\n" if note else "  el.removeAttribute('data-preview');\n")
            + "  el.data = file;\n"
            "  place.replaceChildren(el);\n"
            "} catch (e) {\n"
            "  place.firstChild.textContent = `attnscope could not draw this view in this browser: ${e?.message ?? e}`;\n"
            "}\n"
            "</script>\n"
        )

    def _repr_html_(self) -> str:
        return self.data

    def save(self, path: str | Path) -> Path:
        """Writes a whole HTML document to ``path`` (opens offline, in any browser)."""
        path = Path(path)
        title = html.escape(self.given.model or "attention")
        path.write_text(
            f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{title} · attnscope</title></head>\n<body>\n{self.data}</body></html>\n",
            encoding="utf-8",
        )
        return path


def _show(g: Given, attributes: dict[str, Any], html_action: str, precision: str):
    """The view shown as a :class:`Page` (``"view"``: a large input's layer it opens on first,
    alone, then every layer in its place), or the page returned (``"return"``). The layer and
    heads the view opens on travel in the records' own ``view`` (docs/given.md)."""
    if html_action not in HTML_ACTIONS:
        raise ValueError(f"html_action={html_action!r}: expected 'view' (show it) or 'return' (an HTML page)")
    if html_action == "return":
        return Page(g, attributes, precision)
    from IPython.display import display

    first = _first_layer(g)
    if first is None:
        display(Page(g, attributes, precision))
        return None
    shown = Page(first, attributes, precision, note="The other layers are on their way…")
    handle = display(shown, display_id=True)
    handle.update(Page(g, attributes, precision, tag=shown.tag))
    return None


def head_view(
    attention: Any = None,
    tokens: Sequence[str] | None = None,
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    layer: int | None = None,
    heads: Sequence[int] | None = None,
    encoder_attention: Any = None,
    decoder_attention: Any = None,
    cross_attention: Any = None,
    encoder_tokens: Sequence[str] | None = None,
    decoder_tokens: Sequence[str] | None = None,
    include_layers: Sequence[int] | None = None,
    html_action: str = "view",
    num_key_value_heads: int | None = None,
    model: str | None = None,
    precision: str = "uint16",
):
    """bertviz's ``head_view``: a head's attention, query by query, as a heatmap, with the layer
    and the head to choose above it (and with ``sentence_b_start``, bertviz's filter: sentence A's
    or B's queries over A's or B's keys).

    The arguments are bertviz's (see :func:`attnscope.given` for the layouts taken), plus
    ``num_key_value_heads`` (grouped-query attention's key/value heads) and ``model`` (a name for
    the caption). ``heads`` names the one head the view opens on: bertviz overlays several, which
    attnscope's one-head view does not, so more than one is refused. ``html_action="view"`` shows
    the view (a :class:`Page`, which the saved notebook keeps) and returns None; ``"return"``
    gives the :class:`Page`. ``precision``: how the numbers are stored, ``"uint16"`` (each
    probability within 7.6e-6: 12 layers × 12 heads × 512 tokens in about 47 MB, not 201 MB),
    ``"bfloat16"`` or ``"float32"`` (exact).
    """
    if heads is not None and len(list(heads)) > 1:
        hs = [int(h) for h in heads]
        raise ValueError(
            f"heads={hs}: bertviz overlays these heads in one view; attnscope's head view shows one head "
            f"at a time (the others a click away above it): pass heads=[{hs[0]}] to open on head {hs[0]}, "
            f"or call head_view once a head"
        )
    g = given(
        attention, tokens, sentence_b_start, prettify_tokens, layer, heads, encoder_attention, decoder_attention,
        cross_attention, encoder_tokens, decoder_tokens, include_layers, num_key_value_heads, model,
    )
    # a few tokens' heatmap no wider than it reads well; a long input's as wide as the output
    n = max(r.n_k for r in g.records)
    return _show(g, {"view": "head", "controls": "", "style": f"display:block;max-width:{max(480, 32 * n + 220)}px"}, html_action, precision)


def model_view(
    attention: Any = None,
    tokens: Sequence[str] | None = None,
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    display_mode: str = "dark",
    encoder_attention: Any = None,
    decoder_attention: Any = None,
    cross_attention: Any = None,
    encoder_tokens: Sequence[str] | None = None,
    decoder_tokens: Sequence[str] | None = None,
    include_layers: Sequence[int] | None = None,
    include_heads: Sequence[int] | None = None,
    html_action: str = "view",
    num_key_value_heads: int | None = None,
    model: str | None = None,
    precision: str = "uint16",
):
    """bertviz's ``model_view``: every layer's every head at once, each a small heatmap (and with
    ``sentence_b_start``, bertviz's filter above them: each head's part of sentence A's or B's
    queries over A's or B's keys).

    ``display_mode`` is taken for bertviz's calls ('light' or 'dark'); attnscope draws in its
    own colours, whose scale reads the same in both. ``include_heads`` is refused unless it names
    every head: bertviz shows only the heads named, attnscope every head (slice the attention to
    show fewer). The rest is as :func:`head_view`. An encoder–decoder's trio is drawn by the
    translation view, as wide as the output.
    """
    if display_mode not in DISPLAY_MODES:
        raise ValueError(f"display_mode={display_mode!r}: expected 'light' or 'dark'")
    g = given(
        attention, tokens, sentence_b_start, prettify_tokens, None, include_heads, encoder_attention,
        decoder_attention, cross_attention, encoder_tokens, decoder_tokens, include_layers, num_key_value_heads, model,
    )
    H = g.records[0].query_heads
    if include_heads is not None and sorted({int(h) for h in include_heads}) != list(range(H)):
        hs = [int(h) for h in include_heads]
        raise ValueError(
            f"include_heads={hs}: bertviz shows only these heads; attnscope's model view shows every head "
            f"of each layer (0..{H - 1}). To show only these, pass each layer's attention[:, {hs}] "
            f"(numbered 0..{len(hs) - 1} then), or leave include_heads out"
        )
    # each head's thumbnail no larger than a few tokens need (about 8 px a token, 48 to 160); an
    # encoder–decoder's translation view (three attentions and the steps) as wide as the output
    H, n = g.records[0].query_heads, max(r.n_k for r in g.records)
    width = "none" if g.kind == "encoder-decoder" else f"{max(360, H * min(160, max(48, 8 * n)) + 80)}px"
    # `controls`: with sentence_b_start, bertviz's filter above the heads (the element offers it for a pair)
    return _show(g, {"view": "model", "controls": "", "style": f"display:block;max-width:{width}"}, html_action, precision)


def run(
    model: str | Path,
    text: str,
    view: str = "model",
    layer: int = 0,
    head: int = 0,
    pair: str | None = None,
    mask: str | None = None,
    engine: str = "auto",
    editable: bool = True,
    hub: str | None = None,
    max_new_tokens: int | None = None,
    chat: bool = False,
    words: bool = False,
    knocked_out: Sequence[tuple[int, int]] = (),
):
    """attnscope's own engine in the notebook's browser: ``model`` (a checkpoint folder with
    config.json, model.safetensors and tokenizer.json; a .gguf file; or a Hub id such as
    ``"sentence-transformers/all-MiniLM-L6-v2"``, which the browser fetches) run on ``text``,
    with the views of the ``<attn-scope>`` element: ``view`` one of ``"model"``, ``"head"``, ``"lines"``,
    ``"steps"`` (scaled dot-product attention step by step), ``"inside"`` (the panels inside the
    focused layer: embeddings, Q/K/V and the heads, RoPE, the KV cache, ·V, √d_k, the residual and
    norm, the feed-forward, the stack; a translation model's decoder layer), and for a translation
    model ``"masks"``; ``"generate"`` (a decoder-only model with an LM head writing after
    ``text`` greedily, token by token, with a step control and the focused step's head view:
    ``max_new_tokens`` of them at once, else on its Generate button; ``chat`` the text as a chat's
    user message in the model's template); ``"heads"`` (every head's summaries: entropy, attention to
    the special tokens, to itself, the previous and next token, mean distance; a table sorted by a
    click) and ``"rollout"`` (attention rollout through the stack beside the last layer's mean);
    ``pair`` a translation's target to teacher-force, ``mask``
    ``"padding"``, ``"causal"`` or ``"none"``, ``engine`` ``"auto"``, ``"cpu"`` or ``"gpu"``
    (WebGPU); ``words`` the tokenizer's words in place of its pieces (each word's attention the sum
    over its pieces' keys, the mean over its pieces' queries); ``knocked_out`` heads knocked out
    from the start, ``(layer, head)`` pairs. Click a head to focus it, alt-click to knock it out
    (or back in); ``editable`` adds a box to
    type another sentence; ``hub`` a mirror of the Hub for a Hub id (its base URL). Returns the
    widget (shown when it ends a cell).

    The kernel reads the files and sends them, and the engine's wasm once a page, by custom
    messages: the saved notebook keeps neither.
    """
    if view not in RUN_VIEWS:
        raise ValueError(f"view={view!r}: expected one of {', '.join(RUN_VIEWS)}")
    if engine not in ("auto", "cpu", "gpu"):
        raise ValueError(f"engine={engine!r}: expected 'auto', 'cpu' or 'gpu'")
    if mask is not None and mask not in ("padding", "causal", "none"):
        raise ValueError(f"mask={mask!r}: expected 'padding', 'causal' or 'none'")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text: expected the sentence to run, a non-empty string")
    for name, v in (("layer", layer), ("head", head)):
        if int(v) != v or v < 0:
            raise ValueError(f"{name}={v!r}: expected a whole number ≥ 0")
    if max_new_tokens is not None and (int(max_new_tokens) != max_new_tokens or not 1 <= max_new_tokens <= 256):
        raise ValueError(f"max_new_tokens={max_new_tokens!r}: expected a whole number from 1 to 256")
    off = []
    for pair_ in knocked_out:
        if not (isinstance(pair_, (tuple, list)) and len(pair_) == 2 and all(isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= 0 for x in pair_)):
            raise ValueError(f"knocked_out: {pair_!r}: expected (layer, head), two whole numbers ≥ 0")
        off.append(f"{pair_[0]}:{pair_[1]}")
    if (max_new_tokens is not None or chat) and view != "generate":
        raise ValueError(f"max_new_tokens and chat go with view='generate', not view={view!r}")
    # `controls`: the layer and the head chosen above a view of one head
    attributes: dict[str, Any] = {"sentence": text, "view": view, "layer": int(layer), "head": int(head), "engine": engine, "controls": ""}
    if pair is not None:
        attributes["pair"] = pair
    if mask is not None:
        attributes["mask"] = mask
    if max_new_tokens is not None:
        attributes["gen"] = int(max_new_tokens)
    if chat:
        attributes["chat"] = ""
    if words:
        attributes["words"] = ""
    if off:
        attributes["off"] = ",".join(off)
    if editable:
        attributes["editable"] = ""
    if hub is not None:
        attributes["hub"] = hub
    files, checkpoint = _checkpoint(model, attributes)
    if not WASM.is_file():
        raise RuntimeError(f"{WASM}: missing; attnscope's engine is built into the wheel (`make wheel` in the repository)")
    return _run_class()(files, checkpoint, attributes)


def _checkpoint(model: str | Path, attributes: dict[str, Any]) -> tuple[dict[str, Path] | None, dict[str, str]]:
    """The files of a folder or a .gguf file, checked; or a Hub id, for the element to fetch."""
    path = Path(model).expanduser()
    if path.is_dir():
        missing = [f for f in CHECKPOINT_FILES if not (path / f).is_file()]
        if missing:
            raise ValueError(
                f"{path}: no {', '.join(missing)}; a checkpoint folder holds {', '.join(CHECKPOINT_FILES)} "
                f"(a slow tokenizer's vocab.txt or merges.txt is not read: save it with a fast tokenizer)"
            )
        files = {f: path / f for f in CHECKPOINT_FILES + OPTIONAL_FILES if (path / f).is_file()}
    elif path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"{path}: a file, but not a .gguf one; pass a checkpoint folder, a .gguf file or a Hub id")
        files = {path.name: path}
    elif isinstance(model, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", model):
        attributes["hf"] = model  # the element fetches it from the Hub
        return None, {}
    else:
        raise ValueError(f"{model}: no such folder or file, and not a Hub id (owner/name)")
    # the engine's cache key: the files' place, sizes and times, hashed (the saved notebook keeps
    # it: no local path in it)
    stat = [f"{n}:{f.stat().st_size}:{int(f.stat().st_mtime)}" for n, f in files.items()]
    key = "notebook:" + hashlib.sha256("|".join([str(path.resolve()), *stat]).encode()).hexdigest()[:24]
    return files, {"key": key, "name": path.name}
