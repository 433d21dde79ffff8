"""The notebook's calls (python/attnscope/notebook.py): bertviz's head_view and model_view as the
widget (its traits: the records' safetensors bytes, the element's attributes) or as the standalone
page; every bad argument refused before anything is sent. The widget's rendering in a real
JupyterLab is tests/e2e/notebook.test.mjs's."""

import base64
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnscope
from attnscope import notebook

anywidget = pytest.importorskip("anywidget")

rng = np.random.default_rng(11)


def attention(L=2, H=3, T=5):
    x = rng.normal(size=(L, H, T, T))
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


TOKENS = ["[CLS]", "Ġa", "Ġcat", "Ġsat", "[SEP]"]


def test_head_view_shows_a_widget_with_the_records_as_one_buffer(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda w: shown.append(w))
    a = attention()
    assert attnscope.head_view(tuple(layer[None] for layer in a), TOKENS, layer=1, heads=[2]) is None
    (w,) = shown
    assert isinstance(w, anywidget.AnyWidget)
    g = attnscope.given(tuple(layer[None] for layer in a), TOKENS, layer=1, heads=[2])
    assert w._given == g.to_safetensors()  # bytes: a binary buffer, not JSON lists
    assert w.attributes["view"] == "head" and w.attributes["controls"] == ""  # the layer and head chosen above it
    # the front end, bundled and inline: the element and its styles, no URL of a CDN
    assert "customElements.define" in w._esm and "<style>" in w._esm
    urls = set(re.findall(r"https?://[^\s\"'`)]+", w._esm))
    assert urls <= {"http://www.w3.org/2000/svg", "https://huggingface.co"}, urls  # SVG's namespace; the Hub, for the element's hf attribute


def test_model_view_display_mode_and_include_heads(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda w: shown.append(w))
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
    assert "<script src" not in html and "http" not in re.sub(r"https?://[^\s\"'`]*w3\.org[^\s\"'`]*", "", html.split("const b64")[1])
    b64 = re.search(r'const b64 = "([A-Za-z0-9+/=]*)"', html).group(1)
    assert base64.b64decode(b64) == page.given.to_safetensors()
    assert "</script" not in html.split('<script type="module">', 1)[1].rsplit("</script>", 1)[0]
    out = page.save(tmp_path / "attention.html")
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and "<title>x&quot;&lt;b&gt; · attnscope</title>" in text


def test_the_page_keeps_its_script_whole(monkeypatch):
    # a `</script>` in the module (in a string, any case) would end the page's script early
    monkeypatch.setattr(notebook, "front_end", lambda: 'const s = "</script><b>x</b></SCRIPT >";')
    html = attnscope.head_view(attention(), list("abcde"), html_action="return").data
    body = html.split('<script type="module">', 1)[1]
    assert body.lower().count("</script") == 1 and body.rstrip().endswith("</script>")
    assert '"<\\/script><b>x</b><\\/SCRIPT >"' in body


def test_a_missing_front_end_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(notebook, "WIDGET_JS", tmp_path / "widget.js")
    with pytest.raises(RuntimeError, match=r"widget\.js: missing; attnscope's front end is built into the wheel"):
        notebook.front_end()


def test_a_large_input_sends_the_layer_its_view_opens_on_first(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda w: shown.append((w, w._given, w._preview)))
    monkeypatch.setattr(notebook, "PREVIEW_ABOVE", 0)
    a = attention(L=4, H=2)
    attnscope.head_view(a, TOKENS, layer=2)
    ((w, given_then, preview_then),) = shown
    first = attnscope.given(a[2:3], TOKENS)
    assert given_then == b"" and preview_then  # displayed with layer 2 alone
    n = int.from_bytes(preview_then[:8], "little")
    meta = __import__("json").loads(__import__("json").loads(preview_then[8 : 8 + n])["__metadata__"]["attnscope"])
    assert [r["layer"] for r in meta["records"]] == [2]
    assert preview_then[8 + n :] == first.to_safetensors()[-len(a[2].tobytes()) :]
    # then every layer, and no preview kept
    assert w._given == attnscope.given(a, TOKENS, layer=2).to_safetensors() and w._preview == b""


def test_a_small_input_goes_once(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda w: shown.append((w._given, w._preview)))
    attnscope.model_view(attention(), TOKENS)
    ((given_then, preview_then),) = shown
    assert given_then and preview_then == b""


FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[2] / "tests/fixtures/models"


def test_run_sends_the_checkpoint_and_the_wasm_when_asked_and_saves_neither(monkeypatch):
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
    assert w.attributes["hf"] == "sentence-transformers/all-MiniLM-L6-v2" and w._checkpoint == {} and w._run
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
    # the package's tree as a clean clone has it: the front end (attnscope/static/) not built
    src = Path(__file__).resolve().parent.parent
    tree = tmp_path / "python"
    shutil.copytree(src, tree, ignore=shutil.ignore_patterns("static", "build", "*.egg-info", "__pycache__", "tests"))
    assert not (tree / "attnscope" / "static").exists()
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path / "w"), str(tree)],
        capture_output=True, text=True,
    )
    assert r.returncode != 0, "no wheel without its front end"
    out = r.stdout + r.stderr
    assert "widget.js" in out and "`make wheel`" in out and "target/wheels/attnscope-*.whl" in out, out[-2000:]
    assert not list(tmp_path.glob("w/*.whl"))
