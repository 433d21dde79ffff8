"""The conversions of python/attnscope/records.py: what PyTorch, HF transformers and numpy hand
out, as records (docs/given.md); every bad input and its message."""

import json
import struct

import numpy as np
import pytest

import attnscope
from attnscope.records import FORMAT, assemble_generate, from_generate, given

rng = np.random.default_rng(7)


def softmax(x, causal=False):
    if causal:
        n = x.shape[-1]
        x = np.where(np.tril(np.ones((n, n), bool)), x, -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def attention(L=3, H=4, n_q=5, n_k=5, causal=False):
    """(L, H, n_q, n_k) rows that sum to 1."""
    return softmax(rng.normal(size=(L, H, n_q, n_k)), causal)


class Tensor:
    """What the conversions need of a torch.Tensor: detach, cpu, float, numpy (a bfloat16 one
    cannot become numpy before float())."""

    def __init__(self, a, bf16=False):
        self.a, self.bf16 = np.asarray(a), bf16
        self.calls = []

    @property
    def shape(self):
        return self.a.shape

    def detach(self):
        self.calls.append("detach")
        return self

    def cpu(self):
        self.calls.append("cpu")
        return self

    def float(self):
        self.calls.append("float")
        return Tensor(self.a.astype(np.float32))

    def numpy(self):
        if self.bf16:
            raise TypeError("Got unsupported ScalarType BFloat16")
        return self.a


def hf_tuple(a):
    """HF's `outputs.attentions`: one (1, H, n_q, n_k) tensor a layer."""
    return tuple(Tensor(layer[None]) for layer in a)


def test_an_hf_tuple_becomes_one_record_a_layer():
    a = attention()
    g = given(hf_tuple(a), tokens=["[CLS]", "the", "Ġcat", "▁sat", "</w>x"])
    assert g.kind == "encoder" and g.mask == "none"
    assert g.tokens == ["[CLS]", "the", " cat", " sat", "x"]  # bertviz's prettify_tokens
    assert [(r.stack, r.kind, r.layer, r.query_heads, r.kv_heads, r.n_q, r.n_k) for r in g.records] == [
        ("encoder", "self", l, 4, 4, 5, 5) for l in range(3)
    ]
    for l, r in enumerate(g.records):
        np.testing.assert_array_equal(r.values, a[l])
    assert given(hf_tuple(a), tokens=list("abcde"), prettify_tokens=False).tokens == list("abcde")


def test_a_bfloat16_tensor_is_read_through_float():
    a = attention(L=1)
    t = Tensor(a[0][None], bf16=True)
    g = given((t,), tokens=list("abcde"))
    np.testing.assert_array_equal(g.records[0].values, a[0])
    assert t.calls == ["detach", "cpu", "float"]


@pytest.mark.parametrize(
    "layout",
    [
        lambda a: a,  # (L, H, T, T)
        lambda a: a[:, None],  # (L, 1, H, T, T): torch.stack of the tuple
        lambda a: [layer for layer in a],  # a list of (H, T, T)
        lambda a: a.tolist(),  # nested lists
        lambda a: tuple(layer[None].tolist() for layer in a),  # a tuple of nested lists
    ],
)
def test_numpy_arrays_and_lists(layout):
    a = attention()
    g = given(layout(a), tokens=list("abcde"))
    assert len(g.records) == 3
    for l, r in enumerate(g.records):
        np.testing.assert_allclose(r.values, a[l], rtol=0, atol=0)


def test_a_decoder_is_causal_and_says_so():
    a = attention(causal=True)
    g = given(hf_tuple(a), tokens=list("abcde"))
    assert g.kind == "decoder" and g.mask == "causal"
    assert {r.stack for r in g.records} == {"decoder"}
    # one value above the diagonal: not causal
    a[1, 2, 0, 3] = 0.01
    assert given(a, tokens=list("abcde")).mask == "none"


def test_grouped_query_heads():
    a = attention(H=6, causal=True)
    g = given(a, tokens=list("abcde"), num_key_value_heads=2)
    assert [(r.query_heads, r.kv_heads) for r in g.records] == [(6, 2)] * 3
    with pytest.raises(ValueError, match=r"num_key_value_heads=4: the 6 query heads of attention do not split"):
        given(a, tokens=list("abcde"), num_key_value_heads=4)


def test_include_layers_layer_and_heads():
    a = attention(L=4)
    g = given(a, tokens=list("abcde"), include_layers=[1, 3], layer=3, heads=[0, 2])
    assert [r.layer for r in g.records] == [1, 3]  # the model's own layer numbers
    np.testing.assert_array_equal(g.records[1].values, a[3])
    assert g.view == {"layer": 3, "heads": [0, 2]}
    assert g.meta()["view"] == {"layer": 3, "heads": [0, 2]}
    with pytest.raises(ValueError, match=r"include_layers: layer 4, but the attention has layers 0\.\.3"):
        given(a, tokens=list("abcde"), include_layers=[4])
    with pytest.raises(ValueError, match=r"layer=0: not among the layers shown \(\[1, 3\]\)"):
        given(a, tokens=list("abcde"), include_layers=[1, 3], layer=0)
    with pytest.raises(ValueError, match=r"heads: head 4, but each layer has heads 0\.\.3"):
        given(a, tokens=list("abcde"), heads=[4])


def test_sentence_b_start():
    a = attention()
    assert given(a, tokens=list("abcde"), sentence_b_start=3).meta()["sentence_b_start"] == 3
    with pytest.raises(ValueError, match=r"sentence_b_start=5: not a position of the 5 tokens"):
        given(a, tokens=list("abcde"), sentence_b_start=5)


def steps_of(full, P):
    """A causal (L, H, N, N) as generate's per-step attentions: (1, H, P, P), then (1, H, 1, P + t)."""
    L, H, N, _ = full.shape
    steps = [tuple(Tensor(full[l, :, :P, :P][None]) for l in range(L))]
    for q in range(P, N):
        steps.append(tuple(Tensor(full[l, :, q : q + 1, : q + 1][None]) for l in range(L)))
    return tuple(steps)


def test_generate_steps_assemble_into_the_full_causal_map():
    full = attention(L=2, H=3, n_q=9, n_k=9, causal=True)
    out = assemble_generate({"attentions": steps_of(full, P=4)})
    assert list(out) == ["attention"]
    for l in range(2):
        np.testing.assert_array_equal(out["attention"][l], full[l])
    g = given(out["attention"], tokens=list("abcdefghi"))
    assert g.mask == "causal" and g.records[0].n_q == 9


def test_what_generate_and_other_implementations_hand_out_is_refused_with_the_way_out():
    full = attention(L=2, H=2, n_q=6, n_k=6, causal=True)
    with pytest.raises(ValueError, match=r"attention: a tuple of tuples, as generate's per-step attentions are: attnscope\.assemble_generate"):
        given(steps_of(full, P=4), tokens=list("abcdef"))
    with pytest.raises(ValueError, match=r'attention: a layer is None: .*attn_implementation="eager"'):
        given((None, None), tokens=list("abcdef"))
    beams = [tuple(Tensor(np.repeat(full[l, :, :4, :4][None], 3, 0)) for l in range(2))]
    with pytest.raises(ValueError, match=r"attentions\[0\]\[0\]: shape \(3, 2, 4, 4\): 3 sequences \(num_beams"):
        from_generate(beams)
    with pytest.raises(ValueError, match=r"tokens\[1\]: 464 is not a string; pass the tokens as text \(tokenizer\.convert_ids_to_tokens"):
        given(full, tokens=["a", 464, "c", "d", "e", "f"])


def test_an_encoder_decoder_without_an_encoder_writes_no_encoder_tokens():
    g = given(decoder_attention=attention(L=1, causal=True), decoder_tokens=list("abcde"))
    meta = g.meta()
    assert "encoder_tokens" not in meta and meta["decoder_tokens"] == list("abcde")
    g = given(attention(L=1, H=4, causal=True), tokens=list("abcde"), num_key_value_heads=np.int64(2))
    assert type(g.records[0].kv_heads) is int and json.loads(g.to_json())["records"][0]["kv_heads"] == 2


def test_generate_without_a_cache_is_refused():
    full = attention(L=1, H=2, n_q=6, n_k=6, causal=True)
    steps = [tuple(Tensor(full[l, :, :4, :4][None]) for l in range(1))]
    steps.append(tuple(Tensor(full[l, :, :5, :5][None]) for l in range(1)))  # the whole square again
    with pytest.raises(ValueError, match=r"attentions\[1\]\[0\]: shape \(2, 5, 5\); step 1 feeds one token.*use_cache=True and a"):
        from_generate(steps)


def test_an_encoder_decoder_generation():
    Te, N = 6, 5
    enc = attention(L=2, H=4, n_q=Te, n_k=Te)
    dec = attention(L=2, H=4, n_q=N, n_k=N, causal=True)
    cross = attention(L=2, H=4, n_q=N, n_k=Te)

    class Out:  # generate's Seq2SeqLMOutput: the decoder starts from one token
        encoder_attentions = hf_tuple(enc)
        decoder_attentions = steps_of(dec, P=1)
        cross_attentions = tuple(
            tuple(Tensor(cross[l, :, q : q + 1][None]) for l in range(2)) for q in range(N)
        )

    out = assemble_generate(Out())
    assert sorted(out) == ["cross_attention", "decoder_attention", "encoder_attention"]
    for l in range(2):
        np.testing.assert_array_equal(out["encoder_attention"][l], enc[l])
        np.testing.assert_array_equal(out["decoder_attention"][l], dec[l])
        np.testing.assert_array_equal(out["cross_attention"][l], cross[l])
    g = given(**out, encoder_tokens=list("abcdef"), decoder_tokens=list("vwxyz"))
    assert g.kind == "encoder-decoder" and g.mask == "causal"
    assert [(r.stack, r.kind, r.n_q, r.n_k) for r in g.records] == [
        ("encoder", "self", Te, Te)] * 2 + [("decoder", "self", N, N)] * 2 + [("decoder", "cross", N, Te)] * 2
    meta = g.meta()
    assert meta["encoder_tokens"] == list("abcdef") and meta["decoder_tokens"] == list("vwxyz")
    assert "tokens" not in meta


def test_an_encoder_decoder_that_does_not_fit():
    enc = attention(L=2, n_q=6, n_k=6)
    cross = attention(L=2, n_q=5, n_k=7)
    with pytest.raises(ValueError, match=r"cross_attention: over 7 keys, but the encoder has 6 positions"):
        given(encoder_attention=enc, cross_attention=cross, encoder_tokens=list("abcdef"), decoder_tokens=list("vwxyz"))
    with pytest.raises(ValueError, match=r"decoder_tokens: 4 tokens, but the attention is over 5 positions"):
        given(cross_attention=cross, encoder_tokens=list("abcdefg"), decoder_tokens=list("wxyz"))
    with pytest.raises(ValueError, match=r"decoder_attention has 3 layers, cross_attention 2"):
        given(decoder_attention=attention(L=3, causal=True), cross_attention=attention(L=2, n_q=5, n_k=7),
              encoder_tokens=list("abcdefg"), decoder_tokens=list("vwxyz"))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, r"attention: missing; expected a tuple \(or list\) with one array per layer, each \(batch, heads, n_q, n_k\)"),
        ({"attention": ()}, r"attention: an empty tuple, as `outputs.attentions` is under transformers. default attention \(sdpa\)"),
        ({"attention": np.zeros((0, 4, 5, 5))}, r"attention: empty, no layer to show"),
        ({"attention": np.ones((5, 5))}, r"attention: one array of shape \(5, 5\); expected a tuple"),
        ({"attention": (np.ones((1, 1, 4, 5, 5)),)}, r"attention\[0\]: shape \(1, 1, 4, 5, 5\); expected a tuple"),
        ({"attention": (np.ones((2, 4, 5, 5)),)}, r"attention\[0\]: a batch of 2 sequences \(shape \(2, 4, 5, 5\)\); the views show one: pass attention\[i:i\+1\]"),
        ({"attention": (np.ones((4, 5, 5)), np.ones((4, 6, 6)))}, r"attention\[1\]: shape \(4, 6, 6\), but layer 0 is \(4, 5, 5\)"),
        ({"attention": (np.ones((4, 5, 0)),)}, r"attention\[0\]: shape \(4, 5, 0\) holds no value"),
        ({"attention": (np.ones((4, 3, 5)),)}, r"attention: n_q = 3 queries over n_k = 5 keys; self-attention is square"),
        ({"attention": [["a", "b"], ["c", "d"]]}, r"attention\[0\]: not an array of numbers \(could not convert string to float"),
        ({"attention": np.ones((2, 4, 5, 5)), "tokens": list("abcd")}, r"tokens: 4 tokens, but the attention is over 5 positions"),
        ({"attention": np.ones((2, 4, 5, 5)), "tokens": None}, r"tokens: missing; expected 5 strings"),
        ({"attention": np.ones((2, 4, 5, 5)), "encoder_attention": np.ones((2, 4, 5, 5))}, r"pass either attention \(with tokens\) or encoder_/decoder_/cross_attention, not both"),
    ],
)
def test_bad_input_is_refused_naming_the_layout(kwargs, message):
    kwargs = {"tokens": list("abcde"), **kwargs}
    with pytest.raises(ValueError, match=message):
        given(**kwargs)


@pytest.mark.parametrize("value", [np.nan, np.inf, -0.25, 1.5])
def test_values_that_are_not_probabilities_are_refused_where_they_are(value):
    a = attention()
    a[2, 1, 3, 0] = value
    with pytest.raises(ValueError, match=rf"attention\[2\]: {value} at head 1, query 3, key 0; attention probabilities are in \[0, 1\]"):
        given(a, tokens=list("abcde"))
    a[2, 1, 3, 0] = 1.004  # bfloat16's rounding of 1
    given(a, tokens=list("abcde"))


def read_safetensors(data):
    """A safetensors file's header and tensors, read by hand (the format's spec)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    assert (8 + n) % 8 == 0, "the data starts 8-byte aligned"
    body = data[8 + n :]
    tensors = {}
    end = 0
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        assert v["dtype"] == "F32"
        tensors[k] = np.frombuffer(body[a:b], "<f4").reshape(v["shape"])
        end = max(end, b)
    assert end == len(body), "no byte after the last tensor"
    return header, tensors


def test_the_binary_form_is_a_safetensors_file_with_the_metadata():
    a = attention(H=6, causal=True)
    g = given(a, tokens=list("abcde"), num_key_value_heads=3, model="tiny-llama")
    header, tensors = read_safetensors(g.to_safetensors())
    meta = json.loads(header["__metadata__"]["attnscope"])
    assert meta == g.meta()
    assert meta["format"] == FORMAT == "attnscope.given/1"
    assert meta["architecture"] == {"kind": "decoder"} and meta["model"] == "tiny-llama"
    for i, r in enumerate(meta["records"]):
        assert r == {"stack": "decoder", "kind": "self", "layer": i, "query_heads": 6, "kv_heads": 3, "n_q": 5, "n_k": 5, "buffer": i}
        np.testing.assert_array_equal(tensors[f"records.{i}"], a[i])


def test_the_json_form_holds_the_values_as_lists():
    a = attention(L=2)
    g = given(a, tokens=["ü", "b", "c", "d", "e"])
    meta = json.loads(g.to_json())
    assert meta["tokens"][0] == "ü"
    for l, r in enumerate(meta["records"]):
        assert "buffer" not in r
        np.testing.assert_array_equal(np.array(r["values"], np.float32), a[l])


def test_save_writes_either_form(tmp_path):
    g = given(attention(L=1), tokens=list("abcde"))
    assert json.loads(g.save(tmp_path / "a.json").read_text())["format"] == FORMAT
    header, _ = read_safetensors(g.save(tmp_path / "a.safetensors").read_bytes())
    assert "attnscope" in header["__metadata__"]
    with pytest.raises(ValueError, match=r"a\.npz: save writes a \.safetensors or a \.json file"):
        g.save(tmp_path / "a.npz")


def test_the_package_exports_the_conversions():
    assert attnscope.given is given and attnscope.FORMAT == FORMAT


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


def layers(d, prefix):
    return [d[f"{prefix}.layer{l}"] for l in range(2)]


def test_hf_gpt2_generate_equals_one_causal_pass():
    """HF's own per-step attentions (tools/make_given_fixtures.py), assembled, equal HF's forward
    pass over the prompt and the tokens written but the last."""
    d = np.load(FIXTURES / "gpt2_generate.npz")
    steps = [tuple(layers(d, f"step{t}")) for t in range(5)]
    out = assemble_generate({"attentions": steps})
    full = layers(d, "full")
    for l in range(2):
        np.testing.assert_allclose(out["attention"][l], full[l][0], rtol=0, atol=1e-6)
    g = given(out["attention"], tokens=[str(i) for i in d["sequences"][0, :-1]])
    assert g.kind == "decoder" and g.mask == "causal" and g.records[0].n_q == 8


def test_hf_bart_generate_equals_one_pass_of_its_decoder():
    d = np.load(FIXTURES / "bart_generate.npz")

    class Out:  # generate's Seq2SeqLMOutput
        encoder_attentions = tuple(layers(d, "encoder"))
        decoder_attentions = [tuple(layers(d, f"dec.step{t}")) for t in range(4)]
        cross_attentions = [tuple(layers(d, f"cross.step{t}")) for t in range(4)]

    out = assemble_generate(Out())
    for l in range(2):
        np.testing.assert_allclose(out["encoder_attention"][l], d[f"full_enc.layer{l}"][0], rtol=0, atol=1e-6)
        np.testing.assert_allclose(out["decoder_attention"][l], d[f"full_dec.layer{l}"][0], rtol=0, atol=1e-6)
        np.testing.assert_allclose(out["cross_attention"][l], d[f"full_cross.layer{l}"][0], rtol=0, atol=1e-6)
    g = given(**out, encoder_tokens=list("abcdef"), decoder_tokens=list("wxyz"))
    assert g.mask == "causal" and [r.n_k for r in g.records] == [6, 6, 4, 4, 6, 6]


def test_bfloat16_form_rounds_to_nearest_even_and_halves_the_bytes():
    a = attention(L=2, H=2, n_q=6, n_k=6)
    a[0, 0, 0, :3] = [1.0, 0.0, 2.0**-130]  # exact, zero, subnormal
    g = given(a, list("abcdef"))
    f32, bf16 = g.to_safetensors(), g.to_safetensors("bfloat16")
    n = struct.unpack("<Q", bf16[:8])[0]
    header = json.loads(bf16[8 : 8 + n])
    assert header["records.0"]["dtype"] == "BF16" and header["records.0"]["shape"] == [2, 6, 6]
    held = np.frombuffer(bf16[8 + n :], dtype="<u2").astype(np.uint32) << 16
    back = held.view(np.float32).reshape(a.shape)
    # each value the nearest bfloat16 (8 significant bits): within half a step of it
    step = np.spacing(np.abs(a).astype(np.float32)) * 2**16
    assert np.all(np.abs(back - a) <= step / 2)
    assert back[0, 0, 0, 0] == 1.0 and back[0, 0, 0, 1] == 0.0
    n32 = struct.unpack("<Q", f32[:8])[0]
    assert len(bf16) - 8 - n == (len(f32) - 8 - n32) // 2 == a.size * 2  # half the bytes of values
    # ties go to the even neighbour: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7
    tie = given(np.full((1, 1, 2, 2), 0.5, np.float32), ["a", "b"])
    tie.records[0].values[0, 0, 0] = np.float32(1 + 2**-8)
    n = struct.unpack("<Q", tie.to_safetensors("bfloat16")[:8])[0]
    assert np.frombuffer(tie.to_safetensors("bfloat16")[8 + n :], "<u2")[0] == 0x3F80
    with pytest.raises(ValueError, match=r"dtype='float16': expected one of 'float32', 'bfloat16', 'uint16'"):
        g.to_safetensors("float16")


def test_uint16_form_holds_each_probability_within_half_a_65535th():
    a = attention(L=2, H=2, n_q=6, n_k=6)
    a[0, 0, 0, :4] = [1.0, 0.0, 0.5 / 65535, 1.004]  # one, zero, a tie below a step, bfloat16's 1
    g = given(a, list("abcdef"))
    u16 = g.to_safetensors("uint16")
    n = struct.unpack("<Q", u16[:8])[0]
    header = json.loads(u16[8 : 8 + n])
    assert header["records.0"]["dtype"] == "U16" and header["records.1"]["shape"] == [2, 6, 6]
    held = np.frombuffer(u16[8 + n :], dtype="<u2").reshape(a.shape)
    back = held / 65535
    # within half a step everywhere, 1 and 0 exact, a value above 1 held as 1
    assert np.abs(back - np.minimum(a, 1)).max() <= 0.5 / 65535 + 1e-9
    assert list(held[0, 0, 0, :4]) == [65535, 0, 0, 65535]  # 0.5 of a step: to even, 0
    assert len(u16) - 8 - n == a.size * 2
    # not the same numbers: the test can tell the rounding from float32
    assert np.abs(back - a).max() > 0


@pytest.mark.parametrize("layers", [[2, 0], [0, 2, 2], (2, 0)])
def test_include_layers_in_any_order_shown_in_the_models(layers):
    a = attention()
    g = given(a, list("abcde"), include_layers=layers)
    assert [r.layer for r in g.records] == [0, 2]
    np.testing.assert_array_equal(g.records[1].values, a[2])


def test_a_whole_output_an_empty_tuple_or_a_string_of_tokens_says_what_to_pass():
    # transformers' default attention (sdpa) gives outputs.attentions == ()
    with pytest.raises(ValueError, match=r"attention: an empty tuple, as `outputs.attentions` is under transformers' default attention \(sdpa\).*attn_implementation=\"eager\""):
        given((), list("abcde"))

    class Output(dict):  # a ModelOutput is an ordered dict of its fields
        def __getattr__(self, k):
            return self[k]

    with pytest.raises(ValueError, match=r"a whole output \(Output with logits, attentions\); pass its attentions: outputs\.attentions"):
        given(Output(logits=1, attentions=tuple(attention())), list("abcde"))
    with pytest.raises(ValueError, match=r"a whole generate\(\) output \(fields sequences, attentions\).*attnscope\.assemble_generate\(output\)"):
        given(Output(sequences=[[1, 2]], attentions=()), list("abcde"))
    with pytest.raises(ValueError, match=r"a whole output \(dict with attentions\)"):
        given({"attentions": attention()}, list("abcde"))
    with pytest.raises(ValueError, match=r"tokens: one string \('the cat sat on the mat'\); expected a list of 5 tokens, one a position: tokenizer\.convert_ids_to_tokens\(ids\)"):
        given(attention(), "the cat sat on the mat")
