"""The notebook's calls (python/attnscope/notebook.py): bertviz's head_view and model_view shown
as a standalone page (text/html: the element's code and the records, gzipped, inline), or
returned; every bad argument refused before anything is shown; run()'s widget. Their rendering
in a real JupyterLab, after a save and in nbconvert's export, is tests/e2e/notebook.test.mjs's."""

import base64
import dataclasses
import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnscope
from attnscope import notebook

rng = np.random.default_rng(11)


def attention(L=2, H=3, T=5):
    x = rng.normal(size=(L, H, T, T))
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


TOKENS = ["[CLS]", "Ġa", "Ġcat", "Ġsat", "[SEP]"]


class Shown:
    """IPython's display, recorded: each object shown, and each update of a display_id's."""

    def __init__(self, monkeypatch):
        self.shown, self.updates = [], []
        monkeypatch.setattr("IPython.display.display", self.display)

    def display(self, obj, display_id=None):
        self.shown.append(obj)
        if display_id:
            return type("Handle", (), {"update": lambda _, o: self.updates.append(o)})()
        return None


def stored(page):
    """A page's records as it stores them: the safetensors file (its values' bytes put back from
    their planes, as the page's script does), and the front end it carries."""
    data = re.search(r'const DATA = "([A-Za-z0-9+/=]*)", WIDTH = (\d);', page.data)
    packed, width = gzip.decompress(base64.b64decode(data.group(1))), int(data.group(2))
    head = 8 + int.from_bytes(packed[:8], "little")
    values = np.frombuffer(packed, np.uint8, offset=head).reshape(width, -1).T.tobytes()
    code = gzip.decompress(base64.b64decode(re.search(r'const CODE = "([A-Za-z0-9+/=]*)";', page.data).group(1))).decode()
    return packed[:head] + values, code


def test_head_view_shows_a_page_with_the_records_gzipped_and_the_front_end_inline(monkeypatch):
    out = Shown(monkeypatch)
    a = attention()
    assert attnscope.head_view(tuple(layer[None] for layer in a), TOKENS, layer=1, heads=[2]) is None
    (page,) = out.shown
    assert isinstance(page, attnscope.Page) and page._repr_html_() == page.data  # text/html: kept by any save
    g = attnscope.given(tuple(layer[None] for layer in a), TOKENS, layer=1, heads=[2])
    file, code = stored(page)
    assert file == g.to_safetensors("uint16")  # each probability within 1/131070, as uint16
    assert page.attributes["view"] == "head" and page.attributes["controls"] == ""  # the layer and head chosen above it
    # the front end, bundled and inline: the element and its styles, no URL of a CDN
    assert code == notebook.front_end() and "customElements.define" in code and "<style>" in code
    urls = set(re.findall(r"https?://[^\s\"'`)]+", code))
    assert urls <= {"http://www.w3.org/2000/svg", "https://huggingface.co"}, urls  # SVG's namespace; the Hub, for the element's hf attribute
    assert "<script src" not in page.data and not re.findall(r"https?://", page.data.split("const CODE")[0])
    # until its script runs (an untrusted notebook, a viewer that runs none), the output says so
    assert f'id="{page.tag}"><p style="{notebook.NOTE_STYLE}">{notebook.WITHOUT_SCRIPT}</p></div>' in page.data
    # float32 on request: exact
    attnscope.head_view(a, TOKENS, precision="float32")
    assert stored(out.shown[-1])[0] == attnscope.given(a, TOKENS).to_safetensors()
    with pytest.raises(ValueError, match=r"precision='float16': expected one of 'float32', 'bfloat16', 'uint16'"):
        attnscope.model_view(a, TOKENS, precision="float16")


def test_a_12_layer_12_head_512_token_view_is_stored_in_under_60_mb(monkeypatch):
    # issue 50's case: 12 × 12 × 512 × 512 float32 is 151 MB (201 MB in base64). Each head's
    # rows as a trained encoder's often are, and are not random: most of a row's weight on a few
    # keys (a special token, the previous and next ones), the rest spread thinly
    out = Shown(monkeypatch)
    T = 512
    x = rng.normal(size=(12, 12, T, T)).astype(np.float32) * 1.5
    x[..., 0] += 3  # a sink
    idx = np.arange(T)
    x[..., idx[1:], idx[:-1]] += 2  # the previous token
    a = np.exp(x - x.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    del x
    page = attnscope.model_view(a, [f"t{i}" for i in range(T)], html_action="return")
    assert len(page.data) <= 60e6, f"{len(page.data) / 1e6:.1f} MB"
    print(f"12 x 12 x 512: {len(page.data) / 1e6:.1f} MB stored (float32 in base64: {a.nbytes * 4 / 3 / 1e6:.1f} MB)")


def test_model_view_display_mode_and_include_heads(monkeypatch):
    out = Shown(monkeypatch)
    shown = out.shown
    a = attention(L=3, H=4)
    attnscope.model_view(list(a), TOKENS, display_mode="light", include_heads=[3, 2, 1, 0], include_layers=[2, 0, 1])
    (w,) = shown
    # 4 heads of 5 tokens; `controls`: a pair's filter above the heads (none here: no sentence_b_start)
    assert w.attributes == {"view": "model", "controls": "", "style": "display:block;max-width:360px"}
    assert [r.layer for r in w.given.records] == [0, 1, 2], "include_layers in any order, shown in the model's"
    # bertviz shows only the heads named: attnscope's model view shows every head, so fewer are refused, saying so
    with pytest.raises(ValueError, match=r"include_heads=\[1, 3\]: bertviz shows only these heads; attnscope's model view shows every head of each layer \(0\.\.3\)\. To show only these, pass each layer's attention\[:, \[1, 3\]\]"):
        attnscope.model_view(list(a), TOKENS, include_heads=[1, 3])
    # and head_view's heads: bertviz overlays them, attnscope shows one head
    with pytest.raises(ValueError, match=r"heads=\[3, 1\]: bertviz overlays these heads in one view; attnscope's head view shows one head at a time .*pass heads=\[3\]"):
        attnscope.head_view(list(a), TOKENS, layer=2, heads=[3, 1])
    attnscope.head_view(list(a), TOKENS, layer=2, heads=[3])
    assert shown[-1].given.view == {"layer": 2, "heads": [3]}
    shown.pop()
    with pytest.raises(ValueError, match=r"display_mode='grey': expected 'light' or 'dark'"):
        attnscope.model_view(list(a), TOKENS, display_mode="grey")
    assert len(shown) == 1


def test_an_encoder_decoders_model_view_is_as_wide_as_the_output(monkeypatch):
    out = Shown(monkeypatch)
    enc, dec, cross = attention(L=2, H=2, T=6), attention(L=2, H=2, T=4), attention(L=2, H=2, T=6)[:, :, :4]
    cross = cross / cross.sum(-1, keepdims=True)
    attnscope.model_view(encoder_attention=list(enc), decoder_attention=list(dec), cross_attention=list(cross),
                         encoder_tokens=list("abcdef"), decoder_tokens=list("wxyz"))
    (page,) = out.shown
    assert page.given.kind == "encoder-decoder" and page.attributes["style"] == "display:block;max-width:none"


@pytest.mark.parametrize("call", [attnscope.head_view, attnscope.model_view])
def test_html_action_other_than_view_or_return_is_refused(call):
    with pytest.raises(ValueError, match=r"html_action='show': expected 'view' \(show it\) or 'return' \(an HTML page\)"):
        call(attention(), TOKENS, html_action="show")


def test_bad_input_raises_before_anything_is_shown(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda w: shown.append(w))
    with pytest.raises(ValueError, match="tokens"):
        attnscope.head_view(attention(), TOKENS[:3])
    a = attention()
    a[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match=r"attention\[0\]: nan at head 0, query 0, key 0"):
        attnscope.model_view(a, TOKENS)
    with pytest.raises(ValueError, match="attention"):
        attnscope.head_view([], [])
    assert shown == []


def test_returned_page_is_standalone_html_with_the_numbers(tmp_path):
    a = attention()
    page = attnscope.head_view(a, ["a", "b", "<c>", "d", "e"], html_action="return", model='x"<b>')
    assert isinstance(page, attnscope.Page)
    html = page._repr_html_()
    assert "document.createElement('attn-scope')" in html and '{"view": "head", "controls": "", "style": ' in html
    assert stored(page)[0] == page.given.to_safetensors("uint16")
    assert "</script" not in html.split('<script type="module">', 1)[1].rsplit("</script>", 1)[0]
    out = page.save(tmp_path / "attention.html")
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and "<title>x&quot;&lt;b&gt; · attnscope</title>" in text


def test_the_page_keeps_its_script_whole(monkeypatch):
    # a `</script>` in the module (in a string, any case) would end the page's script early
    monkeypatch.setattr(notebook, "front_end", lambda: 'const s = "</script><b>x</b></SCRIPT >";')
    page = attnscope.head_view(attention(), list("abcde"), html_action="return", model="</script>")
    body = page.data.split('<script type="module">', 1)[1]
    assert body.lower().count("</script") == 1 and body.rstrip().endswith("</script>")
    assert stored(page)[1] == 'const s = "</script><b>x</b></SCRIPT >";'


def test_a_missing_front_end_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(notebook, "WIDGET_JS", tmp_path / "widget.js")
    with pytest.raises(RuntimeError, match=r"widget\.js: missing; attnscope's front end is built into the wheel"):
        notebook.front_end()


def test_a_large_input_shows_the_layer_its_view_opens_on_first_then_every_layer_in_its_place(monkeypatch):
    out = Shown(monkeypatch)
    monkeypatch.setattr(notebook, "PREVIEW_ABOVE", 0)
    a = attention(L=4, H=2)
    attnscope.head_view(a, TOKENS, layer=2)
    (first,), (every,) = out.shown, out.updates
    assert [r.layer for r in first.given.records] == [2] and "other layers are on their way" in first.data
    g = attnscope.given(a, TOKENS, layer=2)
    assert stored(first)[0] == dataclasses.replace(g, records=g.records[2:3]).to_safetensors("uint16")
    # then every layer, in the same output (its display_id): only it is saved; its page takes the first one's element over
    assert stored(every)[0] == g.to_safetensors("uint16")
    assert every.tag == first.tag and "on their way" not in every.data


def test_a_small_input_goes_once(monkeypatch):
    out = Shown(monkeypatch)
    attnscope.model_view(attention(), TOKENS)
    assert len(out.shown) == 1 and out.updates == []


FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[2] / "tests/fixtures/models"


def test_run_sends_the_checkpoint_and_the_wasm_when_asked_and_saves_neither(monkeypatch):
    pytest.importorskip("anywidget")
    w = attnscope.run(FIXTURES / "tiny-gpt2", "attention is all you need", view="head", layer=1, head=2)
    assert w._checkpoint["name"] == "tiny-gpt2" and w._checkpoint["key"].startswith("notebook:")
    assert w.attributes == {"sentence": "attention is all you need", "view": "head", "layer": 1, "head": 2, "engine": "auto", "controls": "", "editable": ""}
    assert not [k for k, t in w.traits(sync=True).items() if isinstance(t, __import__("traitlets").Bytes)], "no bytes in the saved state"
    sent = []
    monkeypatch.setattr(w, "send", lambda content, buffers=None: sent.append((content, buffers)))
    w._answer(w, {"type": "files?", "id": "a"}, [])
    w._answer(w, {"type": "wasm?", "id": "b"}, [])
    (files, fbufs), (wasm, wbufs) = sent
    assert files == {"type": "files", "id": "a", "names": ["config.json", "model.safetensors", "tokenizer.json"]}
    assert fbufs == [(FIXTURES / "tiny-gpt2" / n).read_bytes() for n in files["names"]]
    assert wasm == {"type": "wasm", "id": "b"} and wbufs[0][:4] == b"\0asm"
    assert str(FIXTURES) not in w._checkpoint["key"], "no local path in the saved state"


def test_run_gguf_hub_id_and_bad_input(tmp_path):
    pytest.importorskip("anywidget")
    gguf = next((FIXTURES / "tiny-llama-gguf").glob("*.gguf"))
    w = attnscope.run(gguf, "hi")
    assert w._checkpoint["name"] == gguf.name
    # writing after the text: so many tokens at once, as a chat
    w = attnscope.run(gguf, "hi", view="generate", max_new_tokens=8, chat=True)
    assert w.attributes["view"] == "generate" and w.attributes["gen"] == 8 and w.attributes["chat"] == ""
    # every head's summaries, and the rollout
    assert [attnscope.run(gguf, "hi", view=v).attributes["view"] for v in ("heads", "rollout")] == ["heads", "rollout"]
    # words in place of pieces, heads knocked out from the start (the element's `words` and `off`)
    w = attnscope.run(gguf, "hi", words=True, knocked_out=[(0, 1), (2, 3)])
    assert w.attributes["words"] == "" and w.attributes["off"] == "0:1,2:3"
    assert "words" not in attnscope.run(gguf, "hi").attributes and "off" not in attnscope.run(gguf, "hi").attributes
    for bad in ([(0,)], [(0, -1)], [(True, 1)], ["0:1"]):
        with pytest.raises(ValueError, match=r"knocked_out: .*: expected \(layer, head\), two whole numbers ≥ 0"):
            attnscope.run(gguf, "hi", knocked_out=bad)
    w = attnscope.run("sentence-transformers/all-MiniLM-L6-v2", "hi", engine="cpu", editable=False)
    assert w.attributes["hf"] == "sentence-transformers/all-MiniLM-L6-v2" and w._checkpoint == {}
    # where no widget renders (a notebook saved without its widget state, exported): what ran, and how to see it
    bundle = w._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert data["text/plain"] == "attnscope.run: sentence-transformers/all-MiniLM-L6-v2 on “hi”, view 'model'. attnscope's engine draws it in the browser, with the kernel: run the cell to see it."
    assert data["text/html"].startswith("<p>attnscope.run: ") and "application/vnd.jupyter.widget-view+json" in data
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"no model\.safetensors, tokenizer\.json; a checkpoint folder holds"):
        attnscope.run(tmp_path, "hi")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"notes\.txt: a file, but not a \.gguf one"):
        attnscope.run(tmp_path / "notes.txt", "hi")
    with pytest.raises(ValueError, match=r"/no/such: no such folder or file, and not a Hub id"):
        attnscope.run("/no/such", "hi")
    with pytest.raises(ValueError, match=r"view='grid': expected one of model, head, lines, steps, masks, inside, generate, heads, rollout$"):
        attnscope.run(gguf, "hi", view="grid")
    with pytest.raises(ValueError, match=r"max_new_tokens=0: expected a whole number from 1 to 256"):
        attnscope.run(gguf, "hi", view="generate", max_new_tokens=0)
    with pytest.raises(ValueError, match=r"max_new_tokens and chat go with view='generate', not view='model'"):
        attnscope.run(gguf, "hi", max_new_tokens=4)
    with pytest.raises(ValueError, match=r"text: expected the sentence to run"):
        attnscope.run(gguf, "  ")
    with pytest.raises(ValueError, match=r"engine='webgpu'"):
        attnscope.run(gguf, "hi", engine="webgpu")


def test_run_names_a_file_that_went(monkeypatch, tmp_path):
    pytest.importorskip("anywidget")
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        (tmp_path / f).write_bytes((FIXTURES / "tiny-bert" / f).read_bytes())
    w = attnscope.run(tmp_path, "hi")
    (tmp_path / "model.safetensors").unlink()
    sent = []
    monkeypatch.setattr(w, "send", lambda content, buffers=None: sent.append(content))
    w._answer(w, {"type": "files?", "id": "r1"}, [])
    assert sent[0]["type"] == "error" and sent[0]["id"] == "r1"
    assert sent[0]["message"].endswith("model.safetensors: No such file or directory")


def test_a_build_from_source_without_the_front_end_stops_at_install_time_with_the_command(tmp_path):
    # the package's tree as a clean clone has it: the front end (attnscope/static/, the template's
    # mathjax.js) not built
    src = Path(__file__).resolve().parent.parent
    tree = tmp_path / "python"
    shutil.copytree(src, tree, ignore=shutil.ignore_patterns("static", "mathjax.js", "node_modules", "build", "*.egg-info", "__pycache__", "tests"))
    assert not (tree / "attnscope" / "static").exists() and not (tree / "share/templates/attnscope/mathjax.js").exists()
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path / "w"), str(tree)],
        capture_output=True, text=True,
    )
    assert r.returncode != 0, "no wheel without its front end"
    out = r.stdout + r.stderr
    assert "widget.js" in out and "mathjax.js" in out and "`make wheel`" in out and "target/wheels/attnscope-*.whl" in out, out[-2000:]
    assert not list(tmp_path.glob("w/*.whl"))
