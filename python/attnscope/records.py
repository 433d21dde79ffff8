"""Attention computed elsewhere, as the records attnscope draws (docs/given.md).

What PyTorch and HF transformers hand out — a tuple of per-layer tensors ``(batch, heads, n_q,
n_k)`` from ``output_attentions=True``, numpy arrays, nested lists, or the per-step attentions of
``generate(..., output_attentions=True, return_dict_in_generate=True)`` — becomes a
:class:`Given`: one record per layer and attention (stack, kind, layer, query heads, key/value
heads, n_q, n_k) with its values as one float32 buffer ``(heads, n_q, n_k)``, and the tokens.
Every check runs here, before anything is sent or written: a bad input raises a ``ValueError``
naming the argument, the layout expected and what it got.

No deep-learning framework is imported: a tensor is read through ``detach()``, ``cpu()``,
``float()`` and ``numpy()`` when it has them, anything else through ``numpy.asarray``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

#: The format's name and version, in every file and message (docs/given.md).
FORMAT = "attnscope.given/1"

#: The largest probability taken: 1, and bfloat16's rounding above it.
MAX_P = 1.01

@dataclass(frozen=True)
class Dtype:
    """One value type of the binary form."""

    safetensors: str  #: its name in a safetensors header
    width: int  #: the bytes of one value


#: The binary form's value types by numpy's names. ``uint16`` is a fixed point: each probability p
#: held as round(p · 65535) (within 1/131070 ≈ 7.6e-6 of p).
DTYPES = {"float32": Dtype("F32", 4), "bfloat16": Dtype("BF16", 2), "uint16": Dtype("U16", 2)}

#: uint16's scale: the integer a probability of 1 is held as.
U16_ONE = 65535

LAYOUT = (
    "a tuple (or list) with one array per layer, each (batch, heads, n_q, n_k) as "
    "`model(..., output_attentions=True).attentions` gives it, or (heads, n_q, n_k), "
    "or one array (layers, heads, n_q, n_k)"
)


@dataclass
class Record:
    """One layer's attention of one stack and kind.

    # Shapes
    * ``values``: ``(query_heads, n_q, n_k)``, float32, C order
    """

    stack: str  # "encoder" | "decoder"
    kind: str  # "self" | "cross"
    layer: int
    kv_heads: int
    values: np.ndarray

    @property
    def query_heads(self) -> int:
        return int(self.values.shape[0])

    @property
    def n_q(self) -> int:
        return int(self.values.shape[1])

    @property
    def n_k(self) -> int:
        return int(self.values.shape[2])

    def meta(self, buffer: int) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "kind": self.kind,
            "layer": self.layer,
            "query_heads": self.query_heads,
            "kv_heads": self.kv_heads,
            "n_q": self.n_q,
            "n_k": self.n_k,
            "buffer": buffer,
        }


@dataclass
class Given:
    """Attention to show: its records, the tokens, and what the views open on (docs/given.md)."""

    kind: str  # "encoder" | "decoder" | "encoder-decoder"
    records: list[Record]
    tokens: list[str] | None = None
    encoder_tokens: list[str] | None = None
    decoder_tokens: list[str] | None = None
    mask: str = "none"  # "causal" | "none": how the decoder's self-attention was masked
    sentence_b_start: int | None = None
    view: dict[str, Any] = field(default_factory=dict)
    model: str | None = None

    def meta(self) -> dict[str, Any]:
        """Everything but the values: the JSON half of the format."""
        out: dict[str, Any] = {"format": FORMAT, "architecture": {"kind": self.kind}, "mask": self.mask}
        if self.model is not None:
            out["model"] = self.model
        if self.kind == "encoder-decoder":
            # the lists of the stacks the records hold (a cross-attention's keys are the encoder's)
            if self.encoder_tokens is not None:
                out["encoder_tokens"] = self.encoder_tokens
            if self.decoder_tokens is not None:
                out["decoder_tokens"] = self.decoder_tokens
        else:
            out["tokens"] = self.tokens
        if self.sentence_b_start is not None:
            out["sentence_b_start"] = self.sentence_b_start
        if self.view:
            out["view"] = self.view
        out["records"] = [r.meta(i) for i, r in enumerate(self.records)]
        return out

    def buffers(self, dtype: str = "float32") -> list[memoryview]:
        """Each record's values, in the records' order, little-endian: float32 (views, not
        copies), bfloat16 (float32's upper half, rounded to nearest even) or uint16 (round(p ·
        65535), a value above 1 held as 1)."""
        out = []
        for r in self.records:
            f32 = np.ascontiguousarray(r.values, dtype="<f4")
            if dtype == "bfloat16":
                u = f32.view("<u4")
                f32 = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype("<u2")  # no NaN here: checked
            elif dtype == "uint16":
                f32 = np.rint(np.minimum(f32, np.float32(1)) * np.float32(U16_ONE)).astype("<u2")
            out.append(memoryview(f32).cast("B"))
        return out

    def to_json(self) -> str:
        """The JSON form: the metadata with each record's values as nested lists (small inputs)."""
        meta = self.meta()
        for m, r in zip(meta["records"], self.records):
            del m["buffer"]
            m["values"] = r.values.tolist()
        return json.dumps(meta, ensure_ascii=False)

    def to_safetensors(self, dtype: str = "float32") -> bytes:
        """The binary form: a safetensors file, one tensor ``records.{i}`` a record, the metadata as
        JSON under ``__metadata__["attnscope"]``. ``dtype``: ``"float32"`` (F32, exact),
        ``"bfloat16"`` (BF16: half the bytes, each value rounded to 8 significant bits) or
        ``"uint16"`` (U16: half the bytes, each value rounded to a multiple of 1/65535, within
        7.6e-6 of it; it compresses best: the notebook's views store it gzipped)."""
        if dtype not in DTYPES:
            raise ValueError(f"dtype={dtype!r}: expected one of {', '.join(map(repr, DTYPES))}")
        header: dict[str, Any] = {"__metadata__": {"attnscope": json.dumps(self.meta(), ensure_ascii=False)}}
        at = 0
        data = self.buffers(dtype)
        for i, (r, b) in enumerate(zip(self.records, data)):
            header[f"records.{i}"] = {"dtype": DTYPES[dtype].safetensors, "shape": list(r.values.shape), "data_offsets": [at, at + b.nbytes]}
            at += b.nbytes
        text = json.dumps(header, ensure_ascii=False).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
        return b"".join([struct.pack("<Q", len(text)), text, *data])  # one copy of the values

    def save(self, path: str | Path) -> Path:
        """Writes the binary form (``.safetensors``) or the JSON form (``.json``) to ``path``."""
        path = Path(path)
        if path.suffix == ".json":
            path.write_text(self.to_json(), encoding="utf-8")
        elif path.suffix == ".safetensors":
            path.write_bytes(self.to_safetensors())
        else:
            raise ValueError(f"{path}: save writes a .safetensors or a .json file")
        return path


def prettify(tokens: Sequence[str]) -> list[str]:
    """bertviz's ``prettify_tokens``: GPT-2's ``Ġ`` and SentencePiece's ``▁`` as spaces, ``</w>`` dropped."""
    return [t.replace("Ġ", " ").replace("▁", " ").replace("</w>", "") for t in tokens]


def to_numpy(x: Any, what: str) -> np.ndarray:
    """A tensor, array or nested list as a float32 array (a framework's tensor read off its device)."""
    if hasattr(x, "detach"):
        x = x.detach()
    if hasattr(x, "cpu"):
        x = x.cpu()
    if hasattr(x, "float") and not isinstance(x, (np.ndarray, np.generic)):
        x = x.float()  # bfloat16 has no numpy type
    if hasattr(x, "numpy") and not isinstance(x, (np.ndarray, np.generic)):
        x = x.numpy()
    try:
        a = np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what}: not an array of numbers ({e}); expected {LAYOUT}") from None
    return a


def layers_of(attention: Any, what: str, kv_heads: int | None = None) -> list[np.ndarray]:
    """Per-layer ``(heads, n_q, n_k)`` arrays from any of the layouts in ``LAYOUT``, checked."""
    if attention is None:
        raise ValueError(f"{what}: missing; expected {LAYOUT}")
    if isinstance(attention, (tuple, list)) and len(attention) == 0:
        raise ValueError(
            f"{what}: an empty tuple, as `outputs.attentions` is under transformers' default attention "
            f"(sdpa), which hands no probabilities out: load the model with "
            f"attn_implementation=\"eager\" and call it with output_attentions=True"
        )
    whole_output = _whole_output(attention)
    if whole_output:
        raise ValueError(f"{what}: {whole_output}")
    if isinstance(attention, (tuple, list)) and attention and not _is_number_list(attention):
        if any(a is None for a in attention):
            raise ValueError(
                f"{what}: a layer is None: the model's attention implementation hands no probabilities "
                f"out; load it with attn_implementation=\"eager\""
            )
        if all(isinstance(a, (tuple, list)) and a and len(getattr(a[0], "shape", ())) >= 3 for a in attention):
            raise ValueError(
                f"{what}: a tuple of tuples, as generate's per-step attentions are: "
                f"attnscope.assemble_generate(output) makes them one map a layer"
            )
        layers = [to_numpy(a, f"{what}[{i}]") for i, a in enumerate(attention)]
    else:
        whole = to_numpy(attention, what)
        if whole.ndim == 5:  # (layers, batch, heads, n_q, n_k): torch.stack of the tuple
            layers = list(whole)
        elif whole.ndim == 4:
            layers = list(whole)
        elif whole.size == 0:
            layers = []
        else:
            raise ValueError(f"{what}: one array of shape {tuple(whole.shape)}; expected {LAYOUT}")
    if not layers:
        raise ValueError(f"{what}: empty, no layer to show; expected {LAYOUT}")
    out = []
    for i, a in enumerate(layers):
        if a.ndim == 4:
            if a.shape[0] != 1:
                raise ValueError(
                    f"{what}[{i}]: a batch of {a.shape[0]} sequences (shape {tuple(a.shape)}); "
                    f"the views show one: pass attention[i:i+1] of each layer, or run one sequence"
                )
            a = a[0]
        if a.ndim != 3:
            raise ValueError(f"{what}[{i}]: shape {tuple(a.shape)}; expected {LAYOUT}")
        if 0 in a.shape:
            raise ValueError(f"{what}[{i}]: shape {tuple(a.shape)} holds no value")
        if out and a.shape != out[0].shape:
            raise ValueError(
                f"{what}[{i}]: shape {tuple(a.shape)}, but layer 0 is {tuple(out[0].shape)}: "
                f"every layer has the same heads, n_q and n_k"
            )
        ok = (a >= 0) & (a <= MAX_P)  # NaN fails both
        if not ok.all():
            h, q, k = (int(v) for v in np.argwhere(~ok)[0])
            raise ValueError(
                f"{what}[{i}]: {a[h, q, k]} at head {h}, query {q}, key {k}; attention probabilities are in [0, 1]"
            )
        out.append(np.ascontiguousarray(a, dtype=np.float32))
    heads = out[0].shape[0]
    if kv_heads is not None and (int(kv_heads) != kv_heads or kv_heads < 1 or heads % int(kv_heads)):
        raise ValueError(
            f"num_key_value_heads={kv_heads}: the {heads} query heads of {what} do not split into "
            f"groups of equal size"
        )
    return out


def _whole_output(x: Any) -> str | None:
    """What to pass in place of a model's or generate's whole output (a ``ModelOutput``, a dict),
    or None for anything else."""
    if not isinstance(x, dict) and not hasattr(x, "attentions") and not hasattr(x, "sequences"):
        return None
    keys = list(x.keys()) if hasattr(x, "keys") else [k for k in ("sequences", "attentions") if hasattr(x, k)]
    if "sequences" in keys:
        return (
            f"a whole generate() output (fields {', '.join(map(str, keys))}); its per-step attentions "
            f"make one map a layer: attnscope.assemble_generate(output)"
        )
    return (
        f"a whole output ({type(x).__name__} with {', '.join(map(str, keys)) or 'no fields'}); pass its "
        f"attentions: outputs.attentions (an encoder–decoder's: encoder_attentions, decoder_attentions, "
        f"cross_attentions)"
    )


def _is_number_list(x: Any) -> bool:
    """Whether ``x`` is a nested list of numbers (one array) rather than a tuple of layers."""
    while isinstance(x, (list, tuple)) and x:
        x = x[0]
    return isinstance(x, (int, float, np.number))


def tokens_of(tokens: Any, n: int, what: str, prettify_tokens: bool) -> list[str]:
    if tokens is None:
        raise ValueError(f"{what}: missing; expected {n} strings, one a position")
    if isinstance(tokens, str):
        raise ValueError(
            f"{what}: one string ({tokens[:40]!r}); expected a list of {n} tokens, one a position: "
            f"tokenizer.convert_ids_to_tokens(ids)"
        )
    tokens = list(tokens)
    for i, t in enumerate(tokens):
        if not isinstance(t, str):
            raise ValueError(
                f"{what}[{i}]: {t!r} is not a string; pass the tokens as text "
                f"(tokenizer.convert_ids_to_tokens(ids))"
            )
    if len(tokens) != n:
        raise ValueError(f"{what}: {len(tokens)} tokens, but the attention is over {n} positions")
    return prettify(tokens) if prettify_tokens else tokens


def is_causal(layers: list[np.ndarray]) -> bool:
    """Whether every head puts nothing above the diagonal (a decoder's causal mask)."""
    for a in layers:
        n_q, n_k = a.shape[1:]
        if n_q != n_k or n_q < 2:
            return False
        if np.any(np.triu(a, 1)):
            return False
    return True


def view_of(layers: int, layer: int | None, heads: Sequence[int] | None, include_layers: Sequence[int] | None,
            query_heads: int) -> tuple[list[int], dict[str, Any]]:
    """The layers kept (``include_layers``, bertviz's: any order, each once, shown in the model's
    order) and what the views open on."""
    keep = list(range(layers)) if include_layers is None else sorted({int(i) for i in include_layers})
    for i in keep:
        if not 0 <= i < layers:
            raise ValueError(f"include_layers: layer {i}, but the attention has layers 0..{layers - 1}")
    if not keep:
        raise ValueError("include_layers: empty, no layer to show")
    view: dict[str, Any] = {}
    if layer is not None:
        if int(layer) not in keep:
            raise ValueError(f"layer={layer}: not among the layers shown ({keep})")
        view["layer"] = int(layer)
    if heads is not None:
        hs = [int(h) for h in heads]
        for h in hs:
            if not 0 <= h < query_heads:
                raise ValueError(f"heads: head {h}, but each layer has heads 0..{query_heads - 1}")
        view["heads"] = hs
    return keep, view


def given(
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
    num_key_value_heads: int | None = None,
    model: str | None = None,
) -> Given:
    """bertviz's arguments (``head_view``'s and ``model_view``'s) as a :class:`Given`, checked.

    Either ``attention`` with ``tokens`` (an encoder, or a decoder: causal when every head is
    zero above the diagonal), or the encoder–decoder trio ``encoder_attention``,
    ``decoder_attention``, ``cross_attention`` (any of them) with ``encoder_tokens`` and
    ``decoder_tokens``. ``num_key_value_heads`` groups the query heads that share a key/value
    head (grouped-query attention).
    """
    trio = (encoder_attention, decoder_attention, cross_attention)
    if attention is not None and any(a is not None for a in trio):
        raise ValueError("pass either attention (with tokens) or encoder_/decoder_/cross_attention, not both")
    if attention is None and all(a is None for a in trio):
        raise ValueError(f"attention: missing; expected {LAYOUT}")
    if attention is not None:
        layers = layers_of(attention, "attention", num_key_value_heads)
        H, n_q, n_k = layers[0].shape
        if n_q != n_k:
            raise ValueError(
                f"attention: n_q = {n_q} queries over n_k = {n_k} keys; self-attention is square "
                f"(a decoder's cross-attention goes in cross_attention, with encoder_tokens and decoder_tokens)"
            )
        toks = tokens_of(tokens, n_k, "tokens", prettify_tokens)
        if sentence_b_start is not None and not 0 <= int(sentence_b_start) < n_k:
            raise ValueError(f"sentence_b_start={sentence_b_start}: not a position of the {n_k} tokens")
        keep, view = view_of(len(layers), layer, heads, include_layers, H)
        causal = is_causal(layers)
        kv = int(num_key_value_heads or H)
        stack = "decoder" if causal else "encoder"
        records = [Record(stack, "self", i, kv, layers[i]) for i in keep]
        return Given(
            kind="decoder" if causal else "encoder", records=records, tokens=toks,
            mask="causal" if causal else "none",
            sentence_b_start=None if sentence_b_start is None else int(sentence_b_start), view=view, model=model,
        )
    # an encoder–decoder model
    enc = layers_of(encoder_attention, "encoder_attention") if encoder_attention is not None else None
    dec = layers_of(decoder_attention, "decoder_attention", num_key_value_heads) if decoder_attention is not None else None
    cross = layers_of(cross_attention, "cross_attention", num_key_value_heads) if cross_attention is not None else None
    n_enc = enc[0].shape[1] if enc else (cross[0].shape[2] if cross else None)
    n_dec = dec[0].shape[1] if dec else (cross[0].shape[1] if cross else None)
    if enc and enc[0].shape[1] != enc[0].shape[2]:
        raise ValueError(f"encoder_attention: n_q = {enc[0].shape[1]} over n_k = {enc[0].shape[2]}; self-attention is square")
    if dec and dec[0].shape[1] != dec[0].shape[2]:
        raise ValueError(f"decoder_attention: n_q = {dec[0].shape[1]} over n_k = {dec[0].shape[2]}; self-attention is square")
    if cross:
        if n_enc is not None and cross[0].shape[2] != n_enc:
            raise ValueError(f"cross_attention: over {cross[0].shape[2]} keys, but the encoder has {n_enc} positions")
        if n_dec is not None and cross[0].shape[1] != n_dec:
            raise ValueError(f"cross_attention: {cross[0].shape[1]} queries, but the decoder has {n_dec} positions")
    if dec and cross and len(dec) != len(cross):
        raise ValueError(f"decoder_attention has {len(dec)} layers, cross_attention {len(cross)}: one of each a decoder layer")
    enc_toks = tokens_of(encoder_tokens, n_enc, "encoder_tokens", prettify_tokens) if n_enc is not None else None
    dec_toks = tokens_of(decoder_tokens, n_dec, "decoder_tokens", prettify_tokens) if n_dec is not None else None
    records: list[Record] = []
    view: dict[str, Any] = {}
    for stack, kind, layers in (("encoder", "self", enc), ("decoder", "self", dec), ("decoder", "cross", cross)):
        if not layers:
            continue
        H = layers[0].shape[0]
        keep, v = view_of(len(layers), layer, heads, include_layers, H)
        view = view or v
        kv = H if stack == "encoder" else int(num_key_value_heads or H)
        records += [Record(stack, kind, i, kv, layers[i]) for i in keep]
    return Given(
        kind="encoder-decoder", records=records, encoder_tokens=enc_toks, decoder_tokens=dec_toks,
        mask="causal" if dec and is_causal(dec) else "none", view=view, model=model,
    )


def from_generate(steps: Any, what: str = "attentions", cross: bool = False) -> list[np.ndarray]:
    """The per-step attentions of ``generate(..., output_attentions=True,
    return_dict_in_generate=True)`` (``out.attentions``, ``out.decoder_attentions`` or
    ``out.cross_attentions``) assembled into one ``(heads, n_q, n_k)`` array a layer.

    Step 0 is the prompt's pass, ``(batch, heads, P, P)`` a layer (an encoder–decoder's first
    decoder step: ``(batch, heads, 1, 1)``); each later step adds one query row over one more
    key, ``(batch, heads, 1, P + t)``. A self-attention comes out square, ``N = P + steps − 1``
    positions, zero above the diagonal (what one causal pass over the same tokens gives); a
    cross-attention keeps its keys, ``(heads, N, n_k)``.
    """
    if steps is None or len(steps) == 0:
        raise ValueError(f"{what}: empty; expected generate(..., output_attentions=True, return_dict_in_generate=True).{what}")
    first = steps[0][0] if isinstance(steps[0], (tuple, list)) and len(steps[0]) else None
    shape = (getattr(first, "shape", None) or np.shape(first)) if first is not None else ()
    if len(shape) == 4 and shape[0] != 1:
        raise ValueError(
            f"{what}[0][0]: shape {tuple(shape)}: {shape[0]} sequences (num_beams or "
            f"num_return_sequences above 1, or a batch); beams are reordered at each step, so "
            f"generate one sequence (num_beams=1) to assemble its attention"
        )
    per_step = [layers_of(s, f"{what}[{t}]") for t, s in enumerate(steps)]
    L = len(per_step[0])
    for t, s in enumerate(per_step):
        if len(s) != L:
            raise ValueError(f"{what}[{t}]: {len(s)} layers, but step 0 has {L}")
    H, P, K0 = per_step[0][0].shape
    if not cross and K0 != P:
        raise ValueError(
            f"{what}[0]: {P} queries over {K0} keys; a self-attention's first step is square (P, P) "
            f"(a static cache's keys span the whole cache: generate with the default dynamic cache)"
        )
    rows = P + len(per_step) - 1
    cols = K0 if cross else rows
    out = [np.zeros((H, rows, cols), np.float32) for _ in range(L)]
    for l in range(L):
        out[l][:, :P, :K0] = per_step[0][l]
    q = P
    for t, s in enumerate(per_step[1:], start=1):
        for l, a in enumerate(s):
            want = (H, 1, cols if cross else q + 1)
            if a.shape != want:
                raise ValueError(
                    f"{what}[{t}][{l}]: shape {tuple(a.shape)}; step {t} feeds one token: expected "
                    f"(batch, {H}, 1, {want[2]}) (a cache's step): generate with use_cache=True and a "
                    f"dynamic cache (not use_cache=False, nor cache_implementation=\"static\")"
                )
            out[l][:, q, : want[2]] = a[:, 0]
        q += 1
    return out


def assemble_generate(output: Any) -> dict[str, list[np.ndarray]]:
    """``generate``'s output (return_dict_in_generate=True, output_attentions=True) as full
    per-layer maps: ``attention`` for a decoder-only model; ``encoder_attention``,
    ``decoder_attention`` and ``cross_attention`` for an encoder–decoder."""
    get = (lambda k: output.get(k)) if isinstance(output, dict) else (lambda k: getattr(output, k, None))
    if get("decoder_attentions") is not None or get("cross_attentions") is not None:
        out: dict[str, list[np.ndarray]] = {}
        if get("encoder_attentions") is not None:
            out["encoder_attention"] = layers_of(get("encoder_attentions"), "encoder_attentions")
        if get("decoder_attentions") is not None:
            out["decoder_attention"] = from_generate(get("decoder_attentions"), "decoder_attentions")
        if get("cross_attentions") is not None:
            out["cross_attention"] = from_generate(get("cross_attentions"), "cross_attentions", cross=True)
        return out
    if get("attentions") is None:
        raise ValueError(
            "generate's output holds no attentions: call generate(..., output_attentions=True, "
            "return_dict_in_generate=True)"
        )
    return {"attention": from_generate(get("attentions"))}

