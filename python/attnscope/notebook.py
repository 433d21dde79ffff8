"""attnscope in the notebook: bertviz's ``head_view`` and ``model_view``, drawn by attnscope's
``<attn-scope>`` element as an anywidget widget (JupyterLab, Notebook 7, VS Code, Colab, marimo).

    from attnscope import head_view      # was: from bertviz import head_view
    head_view(outputs.attentions, tokens)

The front end (the element, its views and styles: one ES module, ``static/widget.js``) ships in
the wheel; nothing is fetched from a CDN. The matrices travel as one binary buffer (docs/given.md's
safetensors form), not as JSON lists. ``html_action="return"`` gives a :class:`Page`: one
standalone HTML file that works offline (``Page.save(path)``).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import html
import json
import numbers
import re
import uuid
from pathlib import Path
from typing import Any, Sequence

from .records import Given, given

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

#: Above this many bytes of float32 values, the widget sends the layer its view opens on first:
#: the browser draws it sooner (a fraction of the bytes through the kernel, the server and the
#: socket), and every layer follows at once (measured: tests/e2e/notebook_bench.mjs,
#: docs/notebook.md).
PREVIEW_ABOVE = 16 << 20


def _first_layer(g: Given) -> Given | None:
    """A large encoder's or decoder's records of the layer the view opens on, alone (else None)."""
    if g.kind == "encoder-decoder" or len(g.records) < 2:
        return None
    if sum(r.values.size for r in g.records) * 4 <= PREVIEW_ABOVE:
        return None
    want = g.view.get("layer", g.records[0].layer)
    return dataclasses.replace(g, records=[r for r in g.records if r.layer == want])

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
def _widget_classes():
    """The widgets' classes (given attention's, run()'s), made once: anywidget is imported here."""
    try:
        import anywidget
        import traitlets
    except ImportError as e:  # the records work without them; the widget does not
        raise ImportError(
            "attnscope's notebook views need anywidget: `pip install anywidget` (or install attnscope's wheel "
            "with its extra: `pip install \"target/wheels/attnscope-0.1.0-py3-none-any.whl[notebook]\"`)"
        ) from e
    esm = front_end()  # one module serves both (python/js/widget.js)

    class Run(anywidget.AnyWidget):
        """One ``<attn-scope>`` element running attnscope's engine on a checkpoint (:func:`run`).

        * ``_checkpoint``: ``{key, name}`` of the files, which the page asks for by a custom
          message (sent as buffers, never saved in the notebook), as it asks for the wasm, once a
          page; a Hub id's files the element fetches (``_checkpoint`` empty);
        * ``attributes``: the element's (``sentence``, ``view``, ``layer``, ``head``, …).
        """

        _esm = esm
        _run = traitlets.Bool(True).tag(sync=True)
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

    class AttnScope(anywidget.AnyWidget):
        """One ``<attn-scope>`` element showing given attention.

        * ``_given``: docs/given.md's safetensors form (bytes: one buffer, never JSON lists);
        * ``_preview``: a large input's layer the view opens on, alone, sent first (drawn sooner),
          emptied once ``_given`` is sent (:meth:`show`); the saved state holds ``_given`` only;
        * ``attributes``: the element's attributes (``view``, ``layer``, ``head``, …).
        """

        _esm = esm
        _given = traitlets.Bytes(b"").tag(sync=True)
        _preview = traitlets.Bytes(b"").tag(sync=True)
        attributes = traitlets.Dict().tag(sync=True)

        def __init__(self, g: Given, attributes: dict[str, Any]) -> None:
            first = _first_layer(g)
            if first is not None:
                super().__init__(_preview=first.to_safetensors(), attributes=attributes)
            else:
                super().__init__(_given=g.to_safetensors(), attributes=attributes)
            self.given = g

        def show(self) -> None:
            """Displays the widget; a large input's every layer follows the one sent first."""
            from IPython.display import display

            display(self)
            self.send_all()

        def send_all(self) -> None:
            """Sends every layer, where only the first went (the saved state keeps them alone)."""
            if not self._given:
                self._given = self.given.to_safetensors()
                self._preview = b""

        def page(self) -> "Page":
            """This view as one standalone HTML file (:class:`Page`)."""
            return Page(self.given, self.attributes)

    return AttnScope, Run


def AttnScope(g: Given, attributes: dict[str, Any]):  # noqa: N802: the widget's class, made once
    """The widget showing ``g`` (see :func:`head_view`)."""
    return _widget_classes()[0](g, attributes)


class Page:
    """Given attention as one standalone HTML file: the element, its code and the numbers, inline.

    In a notebook it displays itself (``_repr_html_``, as bertviz's ``html_action="return"``
    gives an ``IPython.display.HTML``); ``save(path)`` writes it; ``data`` is the HTML text.
    The element's ``result`` carries the given numbers, as on any page.
    """

    def __init__(self, g: Given, attributes: dict[str, Any]) -> None:
        self.given = g
        self.attributes = dict(attributes)
        self.data = self._html()

    def _html(self) -> str:
        tag = f"attnscope-{uuid.uuid4().hex}"
        payload = base64.b64encode(self.given.to_safetensors()).decode("ascii")
        # the module inline: `</script` cannot end it early
        code = re.sub(r"</(script)", r"<\\/\1", front_end(), flags=re.IGNORECASE)
        attrs = json.dumps({k: str(v) for k, v in self.attributes.items()}).replace("</", "<\\/")
        # the element made with its data, then placed: where the page already defines
        # <attn-scope> (a notebook's widget did), one placed bare would start on its default model.
        # In a block of its own: the minified module's top-level names are any short names
        return (
            f'<div class="attnscope-page" id="{tag}"></div>\n'
            f'<script type="module">\n{code}\n'
            "{\n"
            f"const b64 = {json.dumps(payload)};\n"
            "const bytes = Uint8Array.fromBase64 ? Uint8Array.fromBase64(b64) : Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));\n"
            "const el = document.createElement('attn-scope');\n"
            f"for (const [k, v] of Object.entries({attrs})) el.setAttribute(k, v);\n"
            "el.data = bytes;\n"
            f"document.getElementById({json.dumps(tag)}).append(el);\n"
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


def _show(g: Given, attributes: dict[str, Any], html_action: str):
    """The widget, shown (``"view"``), or the standalone page (``"return"``). The layer and heads
    the view opens on travel in the records' own ``view`` (docs/given.md)."""
    if html_action not in HTML_ACTIONS:
        raise ValueError(f"html_action={html_action!r}: expected 'view' (show it) or 'return' (an HTML page)")
    if html_action == "return":
        return Page(g, attributes)
    AttnScope(g, attributes).show()
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
):
    """bertviz's ``head_view``: a head's attention, query by query, as a heatmap, with the layer
    and the head to choose above it (and with ``sentence_b_start``, bertviz's filter: sentence A's
    or B's queries over A's or B's keys).

    The arguments are bertviz's (see :func:`attnscope.given` for the layouts taken), plus
    ``num_key_value_heads`` (grouped-query attention's key/value heads) and ``model`` (a name for
    the caption). ``heads`` names the one head the view opens on: bertviz overlays several, which
    attnscope's one-head view does not, so more than one is refused. ``html_action="view"`` shows
    the widget; ``"return"`` gives a :class:`Page`.
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
    return _show(g, {"view": "head", "controls": "", "style": f"display:block;max-width:{max(480, 32 * n + 220)}px"}, html_action)


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
):
    """bertviz's ``model_view``: every layer's every head at once, each a small heatmap (and with
    ``sentence_b_start``, bertviz's filter above them: each head's part of sentence A's or B's
    queries over A's or B's keys).

    ``display_mode`` is taken for bertviz's calls ('light' or 'dark'); attnscope draws in its
    own colours, whose scale reads the same in both. ``include_heads`` is refused unless it names
    every head: bertviz shows only the heads named, attnscope every head (slice the attention to
    show fewer). The rest is as :func:`head_view`.
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
    # each head's thumbnail no larger than a few tokens need (about 8 px a token, 48 to 160)
    H, n = g.records[0].query_heads, max(r.n_k for r in g.records)
    width = max(360, H * min(160, max(48, 8 * n)) + 80)
    # `controls`: with sentence_b_start, bertviz's filter above the heads (the element offers it for a pair)
    return _show(g, {"view": "model", "controls": "", "style": f"display:block;max-width:{width}px"}, html_action)


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
    return _widget_classes()[1](files, checkpoint, attributes)


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
