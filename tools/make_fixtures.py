#!/usr/bin/env python3
"""Writes the golden fixtures the Rust tests compare against (run once; outputs are committed).

    pip install torch transformers safetensors
    python3 tools/make_fixtures.py [--model assets/models/all-MiniLM-L6-v2]

For each case it writes tests/fixtures/golden/<case>.json (inputs, tokens, ids) and
<case>.safetensors (attention (B, L, H, T, T), hidden (B, T, D), logits (B, labels) if any),
computed by HF transformers with attn_implementation="eager" and output_attentions=True.

It writes web/reference/minilm.json too (and, with the dates model, web/reference/dates.json):
HF's attention for the page's worked examples, which
the page's "check" button compares its engine with.

It also (re)creates two tiny checkpoints under tests/fixtures/models/, with a trimmed vocabulary:
  * tiny-bert: BertForSequenceClassification, f16 weights under the `bert.` prefix, 3 labels;
  * tiny-bert-preln: pre-LN encoder layers (the seeds' TransformerEncoderLayer), bf16 weights,
    gelu_new; HF has no pre-LN BERT, so its reference is the explicit PyTorch code below.

The Llama family (`--only llama`; pip install gguf too; needs scripts/setup.sh's SmolLM2 GGUF):
  * tiny-llama: LlamaForCausalLM, f16 weights, hidden 256, 2 layers, 4 heads over 2 KV heads,
    head_dim 48 (not 256/4), untied lm_head, rope_theta 1e5, rms_norm_eps 1e-5, byte-level BPE
    with <|endoftext|> <|im_start|> <|im_end|> (0, 1, 2) and SmolLM2's ChatML chat_template in
    tokenizer_config.json; cases llama_batch (3 texts, right-padded, causal), llama_single, and
    llama_generate (8 greedy tokens after a chat prompt; prompt_ids, output_ids, step_top5_ids, and
    one forward pass over prompt + output[:-1]);
  * tiny-llama-wide (also `--only llama-wide`): 4 layers of 16 query heads over 4 KV heads of 16
    dimensions, 2,048 positions: no golden case; the page's 1,024-token test on WebGPU runs it;
  * tiny-qwen2: Qwen2ForCausalLM, bf16 weights, q/k/v biases, tied embeddings, sliding_window in the
    config but use_sliding_window false; cases qwen2_batch and qwen2_generate;
  * tiny-llama-gguf/tiny-llama-{F16,Q8_0,Q4_0,Q4_1,Q4_K,Q6_K,Q5_K,Q3_K,Q2_K}.gguf (also
    `--only llama-gguf`, from tiny-llama as it is on disk; `--gguf-type T`, repeatable, writes only
    those): tiny-llama as llama.cpp's convert_hf_to_gguf.py writes it (Q/K rows permuted, llama.*
    metadata, the gpt2 tokenizer) and `llama-quantize --pure` quantizes it (1-D tensors F32; a row
    length a type's blocks do not divide falls back as llama-quant.cpp does: Q4_K -> Q5_0,
    Q5_K -> Q5_1, Q6_K -> Q8_0, here attn_output's 192; Q2_K and Q3_K -> Q4_0, where llama.cpp
    writes IQ4_NL, which attnscope does not read); cases llama_gguf_{type} from HF loading each file
    alone (it dequantizes), and llama_gguf_generate (Q4_K);
  * smollm2_prompts: SmolLM2-135M-Instruct's Q4_1 GGUF under HF: ids, f32 attention of every layer,
    top-10 next-token ids and probabilities per position for each prompt, 16 greedy tokens;
  * (also `--only llama-inside`, from tiny-llama as it is on disk) llama_trace: layer 1's values
    through hooks (layer1_{input, attn_norm, q, k, v, q_rope, k_rope, context, attention_output,
    ffn_norm, gate, up, act, output}; q_rope and k_rope as HF's apply_rotary_pos_emb returned
    them, (1, heads, T, d)), llama_norope (apply_rotary_pos_emb returning Q and K unturned), and
    llama_knockout (heads 0:0, 0:1 and 1:2 zeroed before o_proj).
Their safetensors: attention (B, L, H, T, T), next_token_probs (B, T, V), and for the padded cases
hidden (B, T, D) and hidden_states (B, L+1, T, D) (the last after the final RMSNorm, as HF returns it).

The heads' roles (`--only roles`; needs scripts/setup.sh's SmolLM2 GGUF): roles_minilm and
roles_smollm2, a text of 16 words twice (and four more for SmolLM2); each head's previous-token,
sink, induction and duplicate-token scores (head_roles, (4, L, H)) from HF's attention.

Value-weighted attention (`--only value-weighted`; after `--only families` and `--only llama`, whose
tiny folders it reads): vw_minilm, vw_gpt2 and vw_llama, each key's ||W_O^h v_j|| (value_norms,
(B, L, H, T)) and alpha_ij * ||W_O^h v_j|| (value_weighted, (B, L, H, T, T)) from HF's values;
vw_marian (tiny-marian), the same for a translation's encoder, decoder and cross-attention.

What writes the next token (`--only logit-attribution`; reads tests/fixtures/models/tiny-gpt2,
tiny-llama and v5-gemma3): la_gpt2, la_llama and la_gemma3 (JSON only; Gemma's norm after the
attention frozen as the final norm is), two direct logit attributions each: the logit, the
embedding's part, each head's [L][H], each MLP's [L], the constants, and the K token ids each head
promotes and suppresses most.

Information-flow routes (`--only flow`; reads tests/fixtures/models/tiny-gpt2, tiny-llama and
v5-gemma3): flow_gpt2, flow_llama and flow_gemma3, every edge's importance (flow_heads (L, H, T, T), flow_residual (L, T)) in
float64 from hooks on HF's modules, and the routes to the last position at FLOW_THRESHOLD (JSON).

Gemma 3 270M (`--only gemma`; pip install gguf accelerate; needs scripts/setup.sh's Q4_K_M GGUF):
  * gemma3_270m_prompts: HF loading the GGUF (it dequantizes; its tokenizer built once and saved
    beside the file, in hf-tokenizer/): two short prompts and one of 671 tokens, past the local
    layers' 512-token window; ids, attention (L, H, R, T) at the query positions `rows` (every one
    for the short prompts; around the window's edge and the last for the long one), top-10
    next-token ids and probabilities there, 16 greedy tokens after the first prompt.
"""
import argparse
import copy
import json
import math
import os
import shutil

import torch
import transformers
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import BertConfig, BertForSequenceClassification, BertModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "fixtures", "golden")
WEB_REFERENCE = os.path.join(ROOT, "web", "reference", "minilm.json")
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")

MINILM_CASES = {
    "arrow": dict(texts=["time flies like an arrow"], mask="padding"),
    "it": dict(texts=["The animal didn't cross the street because it was too tired."], mask="padding"),
    "unicode": dict(texts=["Café naïve — 東京 😀 résumé, ok?"], mask="padding"),
    "long": dict(
        texts=[
            "The encoder reads the whole sentence at once, and every head decides for every "
            "token which other tokens matter, layer after layer, until the meaning settles."
        ],
        mask="padding",
    ),
    "pair": dict(texts=["The cat sat on the mat."], pair="It was very comfortable.", mask="padding"),
    "batch": dict(
        texts=["time flies like an arrow", "The quick brown fox jumps over the lazy dog by the river.", "hi"],
        mask="padding",
    ),
    "causal": dict(texts=["time flies like an arrow", "fruit flies like a banana, they say"], mask="causal"),
    "nomask": dict(texts=["time flies like an arrow", "hi"], mask="none"),
}
# The page's worked examples (web/examples.js), with HF's numbers shipped beside the app.
WEB_CASES = ["it", "arrow", "batch", "causal", "pair"]


def load_tokenizer(path, max_len):
    tok = Tokenizer.from_file(path)
    pad = tok.padding
    pad_id, pad_token = (pad["pad_id"], pad["pad_token"]) if pad else (tok.token_to_id("[PAD]"), "[PAD]")
    tok.no_padding()
    tok.enable_truncation(max_len)
    tok.enable_padding(pad_id=pad_id, pad_token=pad_token)  # right, to the longest
    return tok


def encode(tok, texts, pair):
    encs = tok.encode_batch([(t, pair) if pair else t for t in texts])
    ids = torch.tensor([e.ids for e in encs])
    types = torch.tensor([e.type_ids for e in encs])
    valid = torch.tensor([e.attention_mask for e in encs])
    return encs, ids, types, valid


def hf_mask(kind, valid):
    """The attention_mask argument for HF: (B, T) padding, or all ones for 'none'."""
    return torch.ones_like(valid) if kind == "none" else valid


def write_case(name, model_name, spec, encs, ids, types, tensors, extra=None):
    """extra: more meta fields (what the reference changed or computed beyond the plain pass)."""
    os.makedirs(GOLDEN, exist_ok=True)
    meta = dict(
        model=model_name,
        texts=spec["texts"],
        pair=spec.get("pair"),
        mask=spec["mask"],
        tokens=[e.tokens for e in encs],
        token_ids=ids.tolist(),
        type_ids=types.tolist(),
        **(extra or {}),
    )
    with open(os.path.join(GOLDEN, name + ".json"), "w") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
    save_file({k: v.contiguous().float() for k, v in tensors.items()}, os.path.join(GOLDEN, name + ".safetensors"))
    print(f"{name}: {list(ids.shape)} -> " + ", ".join(f"{k} {list(v.shape)}" for k, v in tensors.items()))


def check_causal(att, valid):
    t = att.shape[-1]
    upper = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
    assert att[..., upper].abs().max() == 0, "HF did not apply the causal mask"
    pad_keys = (valid == 0)[:, None, None, None, :].expand_as(att)
    assert att[pad_keys].abs().max() == 0 if pad_keys.any() else True


@torch.no_grad()
def minilm(model_dir):
    tok = load_tokenizer(os.path.join(model_dir, "tokenizer.json"), 512)
    base = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    causal_cfg = copy.deepcopy(base.config)
    causal_cfg.is_decoder = True  # HF applies tril(ones) ∧ padding for decoders
    causal = BertModel.from_pretrained(model_dir, config=causal_cfg, attn_implementation="eager").eval()
    web = []
    for name, spec in MINILM_CASES.items():
        encs, ids, types, valid = encode(tok, spec["texts"], spec.get("pair"))
        model = causal if spec["mask"] == "causal" else base
        out = model(input_ids=ids, token_type_ids=types, attention_mask=hf_mask(spec["mask"], valid),
                    output_attentions=True, use_cache=False)
        att = torch.stack(out.attentions, dim=1)  # (B, L, H, T, T)
        if spec["mask"] == "causal":
            check_causal(att, valid)
        write_case("minilm_" + name, "minilm", spec, encs, ids, types,
                   dict(attention=att, hidden=out.last_hidden_state))
        if name in WEB_CASES:
            web.append(dict(name=name, texts=spec["texts"], pair=spec.get("pair"), mask=spec["mask"],
                            tokens=[e.tokens for e in encs],
                            attention=[[[[[float(f"{v:.7g}") for v in row] for row in head] for head in layer]
                                        for layer in item] for item in att.tolist()]))
    os.makedirs(os.path.dirname(WEB_REFERENCE), exist_ok=True)
    with open(WEB_REFERENCE, "w") as f:
        json.dump(dict(source=f"HF transformers {transformers.__version__}, torch {torch.__version__.split('+')[0]}",
                       model="all-MiniLM-L6-v2", cases=web), f, ensure_ascii=False, separators=(",", ":"))
    print(f"{WEB_REFERENCE}: {len(web)} cases")


# Reading the heads (issue 9): head summaries and rollout from HF's attentions, and a forward pass
# with heads knocked out by a hook that zeroes their context before the output projection.
HEAD_CASES = {
    "heads_batch": dict(
        texts=["The trophy didn't fit in the suitcase because it was too big.", "time flies like an arrow", "hi"],
        mask="padding"),
    "heads_pair": dict(texts=["The cat sat on the mat."], pair="It was very comfortable.", mask="padding"),
    "heads_causal": dict(texts=["time flies like an arrow", "fruit flies like a banana"], mask="causal"),
    "heads_knockout": dict(texts=["The animal didn't cross the street because it was too tired.", "hi there"],
                           mask="padding", head_mask=[[0, 1], [2, 3], [2, 4], [5, 11]]),
}
METRICS = ["entropy", "to_cls", "to_sep", "to_self", "to_prev", "to_next", "distance", "to_first", "sink"]


def head_metrics(att, ids, valid, cls_id, sep_id):
    """(B, L, H, T, T) attention -> (B, 9, L, H): Clark et al.'s summaries over each text's real queries, and
    the attention sinks': the share on the first token, and the largest share any one key receives."""
    att = att.double()
    b_, l_, h_, t, _ = att.shape
    out = torch.zeros(b_, len(METRICS), l_, h_, dtype=torch.float64)
    pos = torch.arange(t, dtype=torch.float64)
    for b in range(b_):
        real = valid[b].bool()
        n = int(real.sum())
        a = att[b][:, :, :n, :]  # right-padded: the real queries are the first n
        plogp = torch.where(a > 0, a * torch.log(a.clamp_min(1e-300)), torch.zeros_like(a))
        out[b, 0] = (-plogp.sum(-1)).mean(-1)
        cls_keys = (ids[b] == cls_id) & real
        sep_keys = (ids[b] == sep_id) & real
        out[b, 1] = a[..., cls_keys].sum(-1).mean(-1)
        out[b, 2] = a[..., sep_keys].sum(-1).mean(-1)
        q = torch.arange(n)
        out[b, 3] = a[:, :, q, q].mean(-1)
        out[b, 4] = a[:, :, q[1:], q[1:] - 1].mean(-1) if n > 1 else 0
        out[b, 5] = a[:, :, q[:-1], q[:-1] + 1].mean(-1) if n > 1 else 0
        dist = (pos[None, :] - pos[:n, None]).abs()  # (n, T): |q - k|
        out[b, 6] = (a * dist).sum(-1).mean(-1)
        out[b, 7] = a[..., 0].mean(-1)  # right-padded: the first real position is 0
        out[b, 8] = a[..., :n].mean(-2).max(-1).values  # each real key's mean share, the largest
    return out.float()


def rollout(att, valid):
    """(B, L, H, T, T) -> (B, T, T): R = Â_L … Â_1, Â = 0.5·mean_h(A) + 0.5·I, rows renormalised, real tokens only."""
    att = att.double()
    b_, l_, _, t, _ = att.shape
    out = torch.zeros(b_, t, t, dtype=torch.float64)
    for b in range(b_):
        n = int(valid[b].sum())
        r = torch.eye(n, dtype=torch.float64)
        for layer in range(l_):
            a = 0.5 * att[b, layer, :, :n, :n].mean(0) + 0.5 * torch.eye(n, dtype=torch.float64)
            a = a / a.sum(-1, keepdim=True)
            r = a @ r
        out[b, :n, :n] = r
    return out.float()


def sentence_embedding(hidden, valid):
    """sentence-transformers' mean pooling over the real tokens, then Normalize()."""
    m = valid[..., None].to(hidden.dtype)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp_min(1e-9)
    return F.normalize(pooled, p=2, dim=1)


@torch.no_grad()
def heads(model_dir):
    tok = load_tokenizer(os.path.join(model_dir, "tokenizer.json"), 512)
    empty = tok.encode("")
    marks = [i for i, m in zip(empty.ids, empty.special_tokens_mask) if m]
    cls_id, sep_id = marks[0], marks[-1]
    base = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    causal_cfg = copy.deepcopy(base.config)
    causal_cfg.is_decoder = True
    causal = BertModel.from_pretrained(model_dir, config=causal_cfg, attn_implementation="eager").eval()
    d_head = base.config.hidden_size // base.config.num_attention_heads
    for name, spec in HEAD_CASES.items():
        encs, ids, types, valid = encode(tok, spec["texts"], spec.get("pair"))
        model = causal if spec["mask"] == "causal" else base
        hooks = []
        for layer, head in spec.get("head_mask", []):
            # the concatenated context enters attention.output.dense: zero this head's slice
            def zero(_mod, args, head=head):
                ctx = args[0].clone()
                ctx[..., head * d_head:(head + 1) * d_head] = 0
                return (ctx,)
            hooks.append(model.encoder.layer[layer].attention.output.dense.register_forward_pre_hook(zero))
        out = model(input_ids=ids, token_type_ids=types, attention_mask=hf_mask(spec["mask"], valid),
                    output_attentions=True, use_cache=False)
        for hk in hooks:
            hk.remove()
        att = torch.stack(out.attentions, dim=1)  # (B, L, H, T, T)
        if spec["mask"] == "causal":
            check_causal(att, valid)
        tensors = dict(attention=att, hidden=out.last_hidden_state,
                       head_metrics=head_metrics(att, ids, valid, cls_id, sep_id), rollout=rollout(att, valid),
                       sentence_embedding=sentence_embedding(out.last_hidden_state, valid))
        write_case(name, "minilm", spec, encs, ids, types, tensors)
        if spec.get("head_mask"):
            meta_path = os.path.join(GOLDEN, name + ".json")
            meta = json.load(open(meta_path))
            meta["head_mask"] = spec["head_mask"]
            with open(meta_path, "w") as f:
                json.dump(meta, f, ensure_ascii=False, indent=1)



# The heads' roles (issue 52): on a text that repeats a sequence of period N, each head's
# previous-token, sink, induction and duplicate-token scores from HF's attentions, for
# all-MiniLM (its [CLS] first: positions count after it) and SmolLM2-135M-Instruct's Q4_1 GGUF
# (no BOS; its induction heads are the point; four words of a third repeat after two). The words
# are one token each with a space before them, so the ids repeat exactly.
ROLE_WORDS = ["river", "green", "table", "music", "horse", "paper", "cloud", "stone", "happy", "window",
              "garden", "silver", "yellow", "market", "summer", "doctor"]
ROLES = ["previous_token", "sink", "induction", "duplicate_token"]


def head_roles(att, start, n, period):
    """(L, H, T, T) attention of one text -> (4, L, H): with p = start + i the position of the text's
    i-th token (after any BOS or [CLS]) and n its tokens (up to the next special token):
    previous_token = mean over 1 <= i < n of a(p, p-1); sink = mean over 0 <= i < n of a(p, 0);
    induction = mean over N <= i < 2N of a(p, p-N+1); duplicate_token = mean over N <= i < 2N of a(p, p-N)."""
    att = att.double()
    i = torch.arange(n) + start
    second = i[period:2 * period]
    return torch.stack([
        att[:, :, i[1:], i[1:] - 1].mean(-1),
        att[:, :, i, 0].mean(-1),
        att[:, :, second, second - period + 1].mean(-1),
        att[:, :, second, second - period].mean(-1),
    ]).float()


@torch.no_grad()
def roles(model_dir):
    period = len(ROLE_WORDS)
    words = " ".join(ROLE_WORDS)
    cases = []
    # all-MiniLM: "river green … river green …", [CLS] first and [SEP] last
    tok = load_tokenizer(os.path.join(model_dir, "tokenizer.json"), 512)
    bert = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    text = f"{words} {words}"
    encs, ids, types, valid = encode(tok, [text], None)
    out = bert(input_ids=ids, token_type_ids=types, attention_mask=valid, output_attentions=True)
    cases.append(("roles_minilm", "minilm", text, encs[0].tokens, ids[0].tolist(), 1, len(ids[0]) - 2,
                  torch.stack(out.attentions, dim=1)[0]))
    # SmolLM2: " river green … river green … river green table music", no BOS: past the two
    # repeats, the previous-token and sink scores read the whole text
    stok, smol, name = load_smollm2()
    text = f" {words} {words} {' '.join(ROLE_WORDS[:4])}"
    sids = stok(text).input_ids
    out = smol(input_ids=torch.tensor([sids]), output_attentions=True)
    cases.append(("roles_smollm2", "assets/models/SmolLM2-135M-Instruct/" + name, text, stok.convert_ids_to_tokens(sids), sids, 0,
                  len(sids), torch.stack(out.attentions, dim=1)[0]))
    for case, model_name, text, tokens, token_ids, start, n, att in cases:
        body = token_ids[start:start + 2 * period]
        assert body[:period] == body[period:] and len(set(body[:period])) == period, \
            f"{case}: the words are not one token each: {tokens}"
        r = head_roles(att, start, n, period)
        meta = dict(model=model_name, texts=[text], mask="causal" if start == 0 else "padding", period=period,
                    start=start, tokens=[tokens], token_ids=[token_ids], roles=ROLES)
        with open(os.path.join(GOLDEN, case + ".json"), "w") as f:
            json.dump(meta, f, ensure_ascii=False, indent=1)
        save_file(dict(head_roles=r.contiguous()), os.path.join(GOLDEN, case + ".safetensors"))
        best = [(float(r[k].max()), divmod(int(r[k].argmax()), r.shape[-1])) for k in range(4)]
        print(f"{case}: {len(token_ids)} tokens; the strongest head of each role: " +
              ", ".join(f"{role} {v:.3f} at {l}:{h}" for role, (v, (l, h)) in zip(ROLES, best)))

# Inside the encoder (issue 8): every layer's scores left undivided by √d_k (HF's
# attention.self.scaling set to 1), one layer's intermediate values through forward hooks, every
# layer's hidden states (output_hidden_states), and cross-attention from a pair's second sentence to
# its first, each encoded alone, through one layer's own query/key/value modules.
INSIDE_CASES = {
    "inside_noscale": dict(
        texts=["The animal didn't cross the street because it was too tired.", "time flies like an arrow"],
        mask="padding", scale="none"),
    "inside_trace": dict(
        texts=["The trophy didn't fit in the suitcase because it was too big.", "hi there"],
        mask="padding", layer_trace=[0, 3]),
    "inside_cross": dict(texts=["The cat sat on the mat."], pair="It was very comfortable.", mask="padding",
                         cross_attention=2),
}


def trace_layers(model, layers):
    """Hooks that record the embeddings' steps and each of `layers`' intermediate values: returns
    (the dict they fill, the hooks to remove)."""
    got, hooks = {}, []

    def out(key, pick=lambda o: o):
        def hook(_mod, _args, output):
            got[key] = pick(output)
        return hook

    def arg(key):
        def hook(_mod, args, kwargs):
            got[key] = args[0] if args else kwargs["hidden_states"]
        return hook

    first = lambda o: o[0] if isinstance(o, tuple) else o
    emb = model.embeddings
    hooks += [emb.word_embeddings.register_forward_hook(out("embeddings_word")),
              emb.position_embeddings.register_forward_hook(out("embeddings_position")),
              emb.token_type_embeddings.register_forward_hook(out("embeddings_token_type")),
              emb.LayerNorm.register_forward_pre_hook(lambda _m, args: got.__setitem__("embeddings_sum", args[0])),
              emb.LayerNorm.register_forward_hook(out("embeddings_normed"))]
    for n in layers:
        layer, p = model.encoder.layer[n], f"layer{n}_"
        hooks += [layer.register_forward_pre_hook(arg(p + "input"), with_kwargs=True),
                  layer.attention.self.query.register_forward_hook(out(p + "q")),
                  layer.attention.self.key.register_forward_hook(out(p + "k")),
                  layer.attention.self.value.register_forward_hook(out(p + "v")),
                  layer.attention.output.dense.register_forward_pre_hook(
                      lambda _m, args, key=p + "context": got.__setitem__(key, args[0])),
                  layer.attention.register_forward_hook(out(p + "attention_output", first)),
                  layer.intermediate.dense.register_forward_hook(out(p + "pre_activation")),
                  layer.intermediate.register_forward_hook(out(p + "intermediate")),
                  layer.register_forward_hook(out(p + "output", first))]
    return got, hooks


@torch.no_grad()
def cross_attention(model, tok, first, second, layer):
    """softmax(QKᵀ/√d_k) with Q from `second`'s hidden states entering `layer`, K from `first`'s,
    each encoded alone, through the layer's own query/key modules: (H, n_q, n_k)."""
    def entering(text):
        enc = tok.encode(text)
        ids = torch.tensor([enc.ids])
        out = model(input_ids=ids, token_type_ids=torch.tensor([enc.type_ids]), output_hidden_states=True)
        return enc.tokens, out.hidden_states[layer][0]  # (T, D)
    keys, x_kv = entering(first)
    queries, x_q = entering(second)
    a = model.encoder.layer[layer].attention.self
    h, dk = a.num_attention_heads, a.attention_head_size
    split = lambda y: y.view(y.shape[0], h, dk).transpose(0, 1)  # (H, T, d_k)
    q, k = split(a.query(x_q)), split(a.key(x_kv))
    probs = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(dk), dim=-1)
    return queries, keys, probs


# Value-weighted attention (issue 52; Kobayashi et al. 2020, "Attention is not only a weight"): for
# head h, key j and query i, ||a_ij * W_O^h v_j^h||_2 = a_ij * ||W_O^h v_j^h||_2, with v_j^h the value
# the head reads (bias included; under GQA its group's value head) and W_O^h its d columns of the
# output projection (no bias). HF's values from a hook on each layer's value projection.
VW_TEXTS = ["The cat sat on the mat.", "Attention is not only a weight, says the paper."]


def value_norms(v, w_o, heads):
    """(B, T, H_kv*d) values and a (D, H*d) output projection -> (B, H, T): ||W_O^h v_j^{g(h)}||."""
    d = w_o.shape[1] // heads
    per_group = heads // (v.shape[-1] // d)
    out = []
    for h in range(heads):
        g = h // per_group
        out.append((v[..., g * d:(g + 1) * d].double() @ w_o[:, h * d:(h + 1) * d].double().T).norm(dim=-1))
    return torch.stack(out, dim=1).float()


@torch.no_grad()
def value_weighted_case(name, model_name, spec, tok, model, pad_id, layers, heads):
    """`layers`: [(value module, its output -> (B, T, H_kv*d), W_O (D, H*d))] a layer."""
    encs = tok.encode_batch(spec["texts"])
    t = max(len(e.ids) for e in encs)
    ids = torch.tensor([e.ids + [pad_id] * (t - len(e.ids)) for e in encs])
    valid = torch.tensor([[1] * len(e.ids) + [0] * (t - len(e.ids)) for e in encs])
    seen = [None] * len(layers)
    hooks = [m.register_forward_hook(lambda _m, _i, out, l=l, pick=pick: seen.__setitem__(l, pick(out)))
             for l, (m, pick, _) in enumerate(layers)]
    out = model(input_ids=ids, attention_mask=valid, output_attentions=True)
    for h in hooks:
        h.remove()
    att = torch.stack(out.attentions, dim=1)  # (B, L, H, T, T)
    norms = torch.stack([value_norms(seen[l], w_o, heads) for l, (_, _, w_o) in enumerate(layers)], dim=1)  # (B, L, H, T)
    weighted = att * norms[:, :, :, None, :]
    padded = [e.tokens + [tok.id_to_token(pad_id)] * (t - len(e.ids)) for e in encs]

    class Enc:  # write_case reads .tokens
        def __init__(self, tokens):
            self.tokens = tokens
    write_case(name, model_name, spec, [Enc(p) for p in padded], ids, torch.zeros_like(ids),
               dict(attention=att, value_norms=norms, value_weighted=weighted))
    first = norms[0, :, :, 0].mean().item() / norms[0].mean().item()
    print(f"  {name}: the first key's value is {first:.2f}x the mean size")


@torch.no_grad()
def value_weighted(model_dir):
    """`--only value-weighted`: vw_minilm (all-MiniLM, a padded batch of two), vw_gpt2 (tiny-gpt2)
    and vw_llama (tiny-llama, grouped-query attention 4/2): each key's ||W_O^h v_j|| (value_norms,
    (B, L, H, T)) and the value-weighted attention (value_weighted, (B, L, H, T, T)), with HF's
    attention (attention); and vw_marian, a translation's three attentions (value_weighted_marian)."""
    from transformers import GPT2LMHeadModel, LlamaForCausalLM
    bert = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    tok = load_tokenizer(os.path.join(model_dir, "tokenizer.json"), 512)
    tok.no_padding()
    value_weighted_case("vw_minilm", "minilm", dict(texts=VW_TEXTS, mask="padding"), tok, bert, tok.token_to_id("[PAD]"),
                        [(l.attention.self.value, lambda o: o, l.attention.output.dense.weight) for l in bert.encoder.layer],
                        bert.config.num_attention_heads)
    d = os.path.join(MODELS, "tiny-gpt2")
    gpt2 = GPT2LMHeadModel.from_pretrained(d, attn_implementation="eager").eval()
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    n = gpt2.config.n_embd
    value_weighted_case("vw_gpt2", "tiny-gpt2", dict(texts=VW_TEXTS, mask="causal"), tok, gpt2, gpt2.config.eos_token_id,
                        [(b.attn.c_attn, lambda o: o[..., 2 * n:], b.attn.c_proj.weight.T) for b in gpt2.transformer.h],
                        gpt2.config.n_head)
    d = os.path.join(MODELS, "tiny-llama")
    llama = LlamaForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    value_weighted_case("vw_llama", "tiny-llama", dict(texts=VW_TEXTS, mask="causal"), tok, llama, llama.config.pad_token_id,
                        [(l.self_attn.v_proj, lambda o: o, l.self_attn.o_proj.weight) for l in llama.model.layers],
                        llama.config.num_attention_heads)
    value_weighted_marian()


@torch.no_grad()
def value_weighted_marian():
    """vw_marian (tiny-marian): each of a translation's three attentions' value sizes, HF's greedy
    output of each source alone teacher-forced through one forward pass with hooks on every
    v_proj. Per item i: value_norms_{encoder,decoder,cross}_i ((L, H, S), (L, H, T), (L, H, S))
    and value_weighted_{encoder,decoder,cross}_i (the attention times its keys' sizes)."""
    from transformers import MarianMTModel
    d = os.path.join(MODELS, "tiny-marian")
    model = MarianMTModel.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    pad = tok.token_to_id("<pad>")
    heads = model.config.encoder_attention_heads
    enc_layers, dec_layers = model.model.encoder.layers, model.model.decoder.layers
    kinds = dict(encoder=[l.self_attn for l in enc_layers], decoder=[l.self_attn for l in dec_layers],
                 cross=[l.encoder_attn for l in dec_layers])
    items, tensors = [], {}
    for i, src in enumerate(MARIAN_SOURCES[:2]):
        ids = torch.tensor([tok.encode(src).ids])
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=1, do_sample=False,
                             max_new_tokens=8, bad_words_ids=[[pad]])
        output_ids = out[0].tolist()
        vals = {k: [None] * len(mods) for k, mods in kinds.items()}
        hooks = [m.v_proj.register_forward_hook(lambda _m, _i, o, k=k, l=l: vals[k].__setitem__(l, o[0]))
                 for k, mods in kinds.items() for l, m in enumerate(mods)]
        fw = model(input_ids=ids, attention_mask=torch.ones_like(ids), decoder_input_ids=torch.tensor([output_ids[:-1]]),
                   output_attentions=True)
        for h in hooks:
            h.remove()
        att = dict(encoder=fw.encoder_attentions, decoder=fw.decoder_attentions, cross=fw.cross_attentions)
        for k, mods in kinds.items():
            norms = []
            for l, m in enumerate(mods):
                v, w = vals[k][l].double(), m.out_proj.weight.double()  # (n, H*d), (D, H*d)
                dh = v.shape[1] // heads
                norms.append(torch.stack([(v[:, h * dh:(h + 1) * dh] @ w[:, h * dh:(h + 1) * dh].T).norm(dim=-1)
                                          for h in range(heads)]))  # (H, n)
            norms = torch.stack(norms)  # (L, H, n_k)
            tensors[f"value_norms_{k}_{i}"] = norms
            tensors[f"value_weighted_{k}_{i}"] = torch.stack(att[k])[:, 0].double() * norms[:, :, None, :]
        items.append(dict(source=src, output_ids=output_ids))
    meta = dict(model="tiny-marian", items=items)
    with open(os.path.join(GOLDEN, "vw_marian.json"), "w") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
    save_file({k: v.contiguous().float() for k, v in tensors.items()}, os.path.join(GOLDEN, "vw_marian.safetensors"))
    print("vw_marian: " + "; ".join(f"{it['source']!r} -> {it['output_ids']}" for it in items))


# What writes the next token (issue 52; Elhage et al. 2021): a decoder's logit of a target token at a
# position, split into the direct writes to its residual stream: the embedding, each head (its
# context through its columns of W_O, no bias), each MLP (its output less its bias) and the
# constants (the output biases, the final norm's bias). Each write goes through the final norm
# frozen at the real stream x (RMSNorm: times w / rms(x); LayerNorm: centred, times w / sigma(x))
# onto the target's row of the LM head. From hooks on HF's modules.
LA_TEXT = "the cat sat on the mat because it was"
LA_K = 5


@torch.no_grad()
def gemma_norm(norm):
    """A Gemma RMSNorm's effective weight (1 + gamma) and epsilon, in float64."""
    return 1 + norm.weight.double(), norm.eps


def logit_attribution_case(name, model_name, tok, model, blocks, final_norm, rms, heads, final=None):
    """`blocks`: [(attention module, its W_O (D, H*d) and bias, the o_proj to pre-hook, mlp module (its
    output: the feed-forward's write), its output bias, and the attention's post-norm as (weight,
    eps) or None)]. `final`: the final RMSNorm's (weight, eps) where its module's are not them (Gemma)."""
    ids = torch.tensor([tok.encode(LA_TEXT).ids])
    n_layers = len(blocks)
    ctx, attn, mlp, final_in = [None] * n_layers, [None] * n_layers, [None] * n_layers, [None]
    hooks = [final_norm.register_forward_pre_hook(lambda _m, args: final_in.__setitem__(0, args[0]))]
    for l, (att_mod, _, _, o_proj, mlp_mod, _, _) in enumerate(blocks):
        hooks.append(o_proj.register_forward_pre_hook(lambda _m, args, l=l: ctx.__setitem__(l, args[0])))
        hooks.append(att_mod.register_forward_hook(lambda _m, _i, out, l=l: attn.__setitem__(l, out[0])))
        hooks.append(mlp_mod.register_forward_hook(lambda _m, _i, out, l=l: mlp.__setitem__(l, out)))
    out = model(input_ids=ids, output_hidden_states=True)
    for h in hooks:
        h.remove()
    U = model.lm_head.weight.double()  # (V, D)
    T = ids.shape[1]
    cases = []
    for p, target in [(T - 1, None), (2, 10)]:
        logits = out.logits[0, p].double()
        t = int(logits.argmax()) if target is None else target
        x = final_in[0][0, p].double()
        w, eps = final if final else (final_norm.weight.double(), getattr(final_norm, "variance_epsilon", None))
        if rms:
            scale = w / (x.pow(2).mean() + eps).sqrt()
            centre = lambda v: v
            const = 0.0
        else:
            scale = w / (x.var(unbiased=False) + final_norm.eps).sqrt()
            centre = lambda v: v - v.mean(-1, keepdim=True)
            const = float(final_norm.bias.double() @ U[t])
        read = lambda v: centre(v.double()) * scale  # (.., D) -> frozen
        embedding = float(read(out.hidden_states[0][0, p]) @ U[t])
        head_parts, mlps, writes = [], [], []
        other = const + (float(model.lm_head.bias[t]) if getattr(model.lm_head, "bias", None) is not None else 0.0)
        for l, (_, w_o, b_o, _, _, b_mlp, post) in enumerate(blocks):
            c = ctx[l][0, p].double()
            d = c.shape[0] // heads
            per_head = torch.stack([w_o[:, h * d:(h + 1) * d].double() @ c[h * d:(h + 1) * d] for h in range(heads)])  # (H, D)
            assert (per_head.sum(0) + (b_o.double() if b_o is not None else 0) - attn[l][0, p].double()).abs().max() < 1e-4
            if post is not None:  # the norm after the attention, frozen at its real output
                a_out = attn[l][0, p].double()
                per_head = per_head * (post[0] / (a_out.pow(2).mean() + post[1]).sqrt())
            writes.append(per_head)
            head_parts.append((read(per_head) @ U[t]).tolist())
            m = mlp[l][0, p].double() - (b_mlp.double() if b_mlp is not None else 0)
            mlps.append(float(read(m) @ U[t]))
            if b_o is not None:
                other += float(read(b_o) @ U[t])
            if b_mlp is not None:
                other += float(read(b_mlp) @ U[t])
        total = embedding + sum(map(sum, head_parts)) + sum(mlps) + other
        assert abs(total - float(logits[t])) < 1e-3 * max(1, abs(float(logits[t]))), (total, float(logits[t]))
        onto = read(torch.cat(writes)) @ U.T  # (L*H, V)
        promotes = onto.topk(LA_K, dim=-1).indices.view(n_layers, heads, LA_K).tolist()
        suppresses = (-onto).topk(LA_K, dim=-1).indices.view(n_layers, heads, LA_K).tolist()
        cases.append(dict(position=p, target=t, logit=float(logits[t]), probability=float(logits.softmax(-1)[t]), embedding=embedding, heads=head_parts, mlps=mlps,
                          other=other, promotes=promotes, suppresses=suppresses))
        print(f"  {name} position {p} target {t}: logit {float(logits[t]):.4f}, parts sum {total:.4f}")
    with open(os.path.join(GOLDEN, name + ".json"), "w") as f:
        json.dump(dict(model=model_name, texts=[LA_TEXT], token_ids=ids[0].tolist(), k=LA_K, attributions=cases), f, indent=1)


@torch.no_grad()
def logit_attribution():
    """`--only logit-attribution`: la_gpt2 (tiny-gpt2, LayerNorm), la_llama (tiny-llama, RMSNorm,
    GQA) and la_gemma3 (v5-gemma3, norms after each sub-layer): two attributions each (the last
    position's likeliest token; position 2's token 10)."""
    from transformers import AutoModelForCausalLM, GPT2LMHeadModel, LlamaForCausalLM
    d = os.path.join(MODELS, "tiny-gpt2")
    gpt2 = GPT2LMHeadModel.from_pretrained(d, attn_implementation="eager").eval()
    logit_attribution_case("la_gpt2", "tiny-gpt2", Tokenizer.from_file(os.path.join(d, "tokenizer.json")), gpt2,
                           [(b.attn, b.attn.c_proj.weight.T, b.attn.c_proj.bias, b.attn.c_proj, b.mlp, b.mlp.c_proj.bias, None)
                            for b in gpt2.transformer.h], gpt2.transformer.ln_f, False, gpt2.config.n_head)
    d = os.path.join(MODELS, "tiny-llama")
    llama = LlamaForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    logit_attribution_case("la_llama", "tiny-llama", Tokenizer.from_file(os.path.join(d, "tokenizer.json")), llama,
                           [(l.self_attn, l.self_attn.o_proj.weight, l.self_attn.o_proj.bias, l.self_attn.o_proj, l.mlp, None, None)
                            for l in llama.model.layers], llama.model.norm, True, llama.config.num_attention_heads)
    # Gemma 3: a norm after the attention and after the feed-forward (the latter's output is the
    # write), RMSNorms of weight 1 + gamma, the embedding times sqrt(D), a sliding window of 5
    d = os.path.join(MODELS, "v5-gemma3")
    gemma = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    logit_attribution_case("la_gemma3", "v5-gemma3", Tokenizer.from_file(os.path.join(d, "tokenizer.json")), gemma,
                           [(l.self_attn, l.self_attn.o_proj.weight, None, l.self_attn.o_proj, l.post_feedforward_layernorm, None,
                             gemma_norm(l.post_attention_layernorm)) for l in gemma.model.layers],
                           gemma.model.norm, True, gemma.config.num_attention_heads, final=gemma_norm(gemma.model.norm))


# Information-flow routes (issue 52; Ferrando & Voita 2024): node (l, i) is position i's residual
# stream entering layer l. The attention block's output y_i = x_i + sum_h sum_j a_ij^h W_O^h v_j^h + b_O
# is a sum of contributions: the residual x_i and each head's from each key. A contribution c counts
# max(0, |y|_1 - |y - c|_1), normalised over the node's contributions. The routes: the edges of at
# least FLOW_THRESHOLD followed down from the last position's output.
FLOW_THRESHOLD = 0.04


def flow_routes(heads_imp, residual_imp, threshold):
    """heads_imp (L, H, T, T), residual_imp (L, T): the edges to the last position, as src/analysis/flow.rs orders them."""
    L, H, T, _ = heads_imp.shape
    reached, edges = {T - 1}, []
    for l in reversed(range(L)):
        below = set()
        for i in sorted(reached):
            for h in range(H):
                for j in range(T):
                    v = float(heads_imp[l, h, i, j])
                    if v >= threshold and v > 0:
                        edges.append(dict(layer=l, head=h, **{"from": j}, to=i, importance=v))
                        below.add(j)
            v = float(residual_imp[l, i])
            if v >= threshold and v > 0:
                edges.append(dict(layer=l, head=None, **{"from": i}, to=i, importance=v))
                below.add(i)
        reached = below
    return edges


@torch.no_grad()
def flow_case(name, model_name, tok, model, layers, heads):
    """`layers`: [(attention module (its output[0]: the block's write, bias included), value module, its
    output -> (1, T, H_kv*d), W_O (D, H*d), the attention's post-norm as (weight, eps) or None)] a
    layer. A post-norm is frozen at each query's real attention output: each contribution times
    its query's scale."""
    ids = torch.tensor([tok.encode(LA_TEXT).ids])
    n = len(layers)
    attn_out, vals = [None] * n, [None] * n
    hooks = []
    for l, (att_mod, v_mod, pick, _, _) in enumerate(layers):
        hooks.append(att_mod.register_forward_hook(lambda _m, _i, out, l=l: attn_out.__setitem__(l, out[0])))
        hooks.append(v_mod.register_forward_hook(lambda _m, _i, out, l=l, pick=pick: vals.__setitem__(l, pick(out))))
    out = model(input_ids=ids, output_hidden_states=True, output_attentions=True)
    for h in hooks:
        h.remove()
    T = ids.shape[1]
    heads_imp = torch.zeros(n, heads, T, T, dtype=torch.float64)
    residual_imp = torch.zeros(n, T, dtype=torch.float64)
    for l, (_, _, _, w_o, post) in enumerate(layers):
        x = out.hidden_states[l][0].double()  # (T, D), the stream entering layer l
        a_out = attn_out[l][0].double()
        scale = post[0] / (a_out.pow(2).mean(-1, keepdim=True) + post[1]).sqrt() if post is not None else torch.ones_like(a_out)  # (T, D)
        y = x + a_out * scale  # the stream after attention
        v = vals[l][0].double()  # (T, G*d)
        d = w_o.shape[1] // heads
        per = heads // (v.shape[1] // d)
        a = out.attentions[l][0].double()  # (H, T, T)
        u = torch.stack([v[:, (h // per) * d:(h // per + 1) * d] @ w_o[:, h * d:(h + 1) * d].double().T for h in range(heads)])  # (H, T, D)
        total = y.abs().sum(-1)  # (T,)
        c = a[:, :, :, None] * u[:, None, :, :] * scale[None, :, None, :]  # (H, T_q, T_k, D)
        imp = (total[None, :, None] - (y[None, :, None, :] - c).abs().sum(-1)).clamp(min=0)
        imp = torch.where(a > 0, imp, torch.zeros_like(imp))
        res = (total - (y - x).abs().sum(-1)).clamp(min=0)
        norm = imp.sum((0, 2)) + res  # (T,)
        heads_imp[l] = imp / norm[None, :, None]
        residual_imp[l] = res / norm
    edges = flow_routes(heads_imp, residual_imp, FLOW_THRESHOLD)
    near = min(abs(float(v) - FLOW_THRESHOLD) for v in torch.cat([heads_imp.flatten(), residual_imp.flatten()]))
    assert near > 1e-4, f"{name}: an importance within {near} of the threshold: the routes would not be stable"

    class Enc:  # write_case reads .tokens
        tokens = tok.encode(LA_TEXT).tokens
    write_case(name, model_name, dict(texts=[LA_TEXT], mask="causal"), [Enc()], ids, torch.zeros_like(ids),
               dict(flow_heads=heads_imp, flow_residual=residual_imp), extra=dict(threshold=FLOW_THRESHOLD, edges=edges))
    print(f"  {name}: {len(edges)} edges to the last position at {FLOW_THRESHOLD}, the nearest importance {near:.1e} from it")


@torch.no_grad()
def flow():
    """`--only flow`: flow_gpt2 (tiny-gpt2), flow_llama (tiny-llama, grouped-query attention 4/2) and
    flow_gemma3 (v5-gemma3, a norm after the attention)."""
    from transformers import AutoModelForCausalLM, GPT2LMHeadModel, LlamaForCausalLM
    d = os.path.join(MODELS, "tiny-gpt2")
    gpt2 = GPT2LMHeadModel.from_pretrained(d, attn_implementation="eager").eval()
    n = gpt2.config.n_embd
    flow_case("flow_gpt2", "tiny-gpt2", Tokenizer.from_file(os.path.join(d, "tokenizer.json")), gpt2,
              [(b.attn, b.attn.c_attn, lambda o: o[..., 2 * n:], b.attn.c_proj.weight.T, None) for b in gpt2.transformer.h],
              gpt2.config.n_head)
    d = os.path.join(MODELS, "tiny-llama")
    llama = LlamaForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    flow_case("flow_llama", "tiny-llama", Tokenizer.from_file(os.path.join(d, "tokenizer.json")), llama,
              [(l.self_attn, l.self_attn.v_proj, lambda o: o, l.self_attn.o_proj.weight, None) for l in llama.model.layers],
              llama.config.num_attention_heads)
    d = os.path.join(MODELS, "v5-gemma3")
    gemma = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    flow_case("flow_gemma3", "v5-gemma3", Tokenizer.from_file(os.path.join(d, "tokenizer.json")), gemma,
              [(l.self_attn, l.self_attn.v_proj, lambda o: o, l.self_attn.o_proj.weight, gemma_norm(l.post_attention_layernorm))
               for l in gemma.model.layers], gemma.config.num_attention_heads)


@torch.no_grad()
def inside(model_dir):
    tok = load_tokenizer(os.path.join(model_dir, "tokenizer.json"), 512)
    base = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    unscaled = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    for layer in unscaled.encoder.layer:
        assert hasattr(layer.attention.self, "scaling"), "BertSelfAttention has no `scaling` to ablate"
        layer.attention.self.scaling = 1.0
    for name, spec in INSIDE_CASES.items():
        encs, ids, types, valid = encode(tok, spec["texts"], spec.get("pair"))
        args = dict(input_ids=ids, token_type_ids=types, attention_mask=hf_mask(spec["mask"], valid),
                    output_attentions=True, output_hidden_states=True)
        if name == "inside_noscale":
            out = unscaled(**args)
            att = torch.stack(out.attentions, dim=1)
            scaled = torch.stack(base(**args).attentions, dim=1)
            assert (att - scaled).abs().max() > 1e-2, "scaling = 1 changed nothing"
            write_case(name, "minilm", spec, encs, ids, types, dict(attention=att, hidden=out.last_hidden_state),
                       extra=dict(scale="none"))
        elif name == "inside_trace":
            got, hooks = trace_layers(base, spec["layer_trace"])
            out = base(**args)
            for hk in hooks:
                hk.remove()
            got["embeddings_position"] = got["embeddings_position"].expand_as(got["embeddings_word"])
            hs = torch.stack(out.hidden_states, dim=1)  # (B, L+1, T, D)
            assert (got["embeddings_normed"] - hs[:, 0]).abs().max() == 0
            for n in spec["layer_trace"]:
                assert (got[f"layer{n}_output"] - hs[:, n + 1]).abs().max() == 0
            write_case(name, "minilm", spec, encs, ids, types,
                       dict(attention=torch.stack(out.attentions, dim=1), hidden=out.last_hidden_state,
                            hidden_states=hs, **{k: v.clone() for k, v in got.items()}),
                       extra=dict(layer_trace=spec["layer_trace"]))
        else:
            layer = spec["cross_attention"]
            queries, keys, probs = cross_attention(base, tok, spec["texts"][0], spec["pair"], layer)
            write_case(name, "minilm", spec, encs, ids, types, dict(cross_attention=probs),
                       extra=dict(cross_attention=dict(layer=layer, queries=queries, keys=keys)))


def tiny_tokenizer(src_path, dst_path, texts):
    """bert-base-uncased's tokenizer.json with its vocabulary cut down to what the texts need."""
    full = Tokenizer.from_file(src_path)
    full.no_padding()
    full.no_truncation()
    spec = json.load(open(src_path))
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = set()
    for t in texts:
        pieces.update(full.encode(t).tokens)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    words = sorted(pieces - set(specials)) + letters + ["##" + c for c in letters] + list(".,!?'-")
    vocab = {}
    for w in specials + words:
        vocab.setdefault(w, len(vocab))
    spec["model"]["vocab"] = vocab
    for added in spec["added_tokens"]:
        added["id"] = vocab[added["content"]]
    for name, st in spec["post_processor"]["special_tokens"].items():
        st["ids"] = [vocab[name]]
    spec["padding"] = None  # exercise the no-padding-settings path: [PAD] is looked up
    spec["truncation"] = None
    with open(dst_path, "w") as f:
        json.dump(spec, f, ensure_ascii=False)
    return len(vocab)


def tiny_config(vocab_size, **kw):
    return BertConfig(vocab_size=vocab_size, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                      intermediate_size=40, max_position_embeddings=64, type_vocab_size=2,
                      initializer_range=0.25, pad_token_id=0, **kw)


def round_to(model, dtype):
    for p in model.parameters():
        p.data = p.data.to(dtype).float()


@torch.no_grad()
def tiny_bert(src_tok):
    d = os.path.join(MODELS, "tiny-bert")
    os.makedirs(d, exist_ok=True)
    spec = dict(texts=["the cat sat on the mat", "a dog!"], pair="it was happy", mask="padding")
    n = tiny_tokenizer(src_tok, os.path.join(d, "tokenizer.json"), spec["texts"] + [spec["pair"], "time flies like an arrow"])
    torch.manual_seed(0)
    cfg = tiny_config(n, hidden_act="gelu", num_labels=3, id2label={0: "negative", 1: "neutral", 2: "positive"})
    model = BertForSequenceClassification(cfg).eval()
    round_to(model, torch.float16)
    state = {k: v.half().contiguous() for k, v in model.state_dict().items() if "position_ids" not in k}
    assert any(k.startswith("bert.") for k in state)
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg.to_json_file(os.path.join(d, "config.json"))
    model.config._attn_implementation = "eager"
    tok = load_tokenizer(os.path.join(d, "tokenizer.json"), cfg.max_position_embeddings)
    encs, ids, types, valid = encode(tok, spec["texts"], spec["pair"])
    out = model(input_ids=ids, token_type_ids=types, attention_mask=valid, output_attentions=True,
                output_hidden_states=True)
    att = torch.stack(out.attentions, dim=1)
    write_case("tiny_bert_pair", "tiny-bert", spec, encs, ids, types,
               dict(attention=att, hidden=out.hidden_states[-1], logits=out.logits))


def preln_forward(model, ids, types, allowed, act):
    """The seeds' pre-LN encoder: x = x + MHA(LN1(x)); x = x + FFN(LN2(x)). allowed: (B, T, T) bool."""
    x = model.embeddings(input_ids=ids, token_type_ids=types)
    cfg = model.config
    h, dk = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    b, t, _ = x.shape
    atts = []
    for layer in model.encoder.layer:
        a = layer.attention
        n1 = a.output.LayerNorm(x)
        split = lambda y: y.view(b, t, h, dk).transpose(1, 2)  # (B, H, T, d_k)
        q, k, v = split(a.self.query(n1)), split(a.self.key(n1)), split(a.self.value(n1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(dk)
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        p = F.softmax(scores, dim=-1)
        atts.append(p)
        ctx = (p @ v).transpose(1, 2).reshape(b, t, h * dk)  # (B, T, D)
        x = x + a.output.dense(ctx)
        n2 = layer.output.LayerNorm(x)
        x = x + layer.output.dense(act(layer.intermediate.dense(n2)))
    return torch.stack(atts, dim=1), x


@torch.no_grad()
def tiny_preln(src_tok):
    d = os.path.join(MODELS, "tiny-bert-preln")
    os.makedirs(d, exist_ok=True)
    spec = dict(texts=["the cat sat on the mat", "a dog!"], mask="causal")
    shutil.copy(os.path.join(MODELS, "tiny-bert", "tokenizer.json"), os.path.join(d, "tokenizer.json"))
    n = len(json.load(open(os.path.join(d, "tokenizer.json")))["model"]["vocab"])
    torch.manual_seed(1)
    cfg = tiny_config(n, hidden_act="gelu_new")
    model = BertModel(cfg, add_pooling_layer=False).eval()
    round_to(model, torch.bfloat16)
    state = {k: v.bfloat16().contiguous() for k, v in model.state_dict().items() if "position_ids" not in k}
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg_json = cfg.to_dict()
    cfg_json["layer_norm_order"] = "pre"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=2)
    tok = load_tokenizer(os.path.join(d, "tokenizer.json"), cfg.max_position_embeddings)
    encs, ids, types, valid = encode(tok, spec["texts"], None)
    t = ids.shape[1]
    allowed = valid.bool()[:, None, :] & torch.tril(torch.ones(t, t, dtype=torch.bool))
    att, hidden = preln_forward(model, ids, types, allowed, lambda y: F.gelu(y, approximate="tanh"))
    write_case("tiny_preln_causal", "tiny-bert-preln", spec, encs, ids, types, dict(attention=att, hidden=hidden))


# Model families (issue 23): tiny RoBERTa, DistilBERT and GPT-2 checkpoints made by transformers'
# own classes with random weights (initializer_range 0.25, so that attention is far from uniform),
# their tokenizers trained here on a small corpus, and HF's outputs on a padded batch.
CORPUS = [
    "time flies like an arrow", "fruit flies like a banana", "the cat sat on the mat",
    "the quick brown fox jumps over the lazy dog", "it was happy", "a dog!",
    "The animal didn't cross the street because it was too tired.",
    "Café naïve résumé, ok? 😀", "attention is all you need", "transformers read the whole sentence at once",
    "every head decides which other tokens matter", "layer after layer the meaning settles",
    "the model expects the next word", "she sells sea shells by the sea shore",
    "colourless green ideas sleep furiously", "where does the model look when it writes this word",
] * 20


def byte_level_bpe(specials):
    """A byte-level BPE of 400 tokens trained on CORPUS, `specials` its first ids, no
    post-processor yet."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def byte_level_tokenizer(path, specials, roberta):
    """A byte-level BPE tokenizer.json as GPT-2's (no special tokens added) or RoBERTa's
    (`<s> A </s>`, `<s> A </s></s> B </s>`), trained on CORPUS."""
    from tokenizers import processors
    tok = byte_level_bpe(specials)
    if roberta:
        tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                          ("<s>", tok.token_to_id("<s>")))
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.save(path)
    return tok.get_vocab_size()


def family_case(name, model_dir, model_type, spec, tok, model, pad_id, extra_tensors=None, extra=None):
    """Runs `model` (eager attention) on the case's padded batch and writes the golden case."""
    encs = tok.encode_batch([(t, spec["pair"]) if spec.get("pair") else t for t in spec["texts"]])
    t = max(len(e.ids) for e in encs)
    ids = torch.tensor([e.ids + [pad_id] * (t - len(e.ids)) for e in encs])
    valid = torch.tensor([[1] * len(e.ids) + [0] * (t - len(e.ids)) for e in encs])
    types = torch.zeros_like(ids)
    out = model(input_ids=ids, attention_mask=valid, output_attentions=True, output_hidden_states=True)
    att = torch.stack(out.attentions, dim=1)  # (B, L, H, T, T)
    # the base model's last_hidden_state (GPT-2's after ln_f, Llama's after its final norm), as HF returns it
    base = model.base_model
    hidden = base(input_ids=ids, attention_mask=valid).last_hidden_state
    tensors = dict(attention=att, hidden=hidden, hidden_states=torch.stack(out.hidden_states, dim=1),
                   **(extra_tensors(out) if extra_tensors else {}))
    padded = [e.tokens + [tok.id_to_token(pad_id)] * (t - len(e.ids)) for e in encs]

    class Enc:  # write_case reads .tokens
        def __init__(self, tokens):
            self.tokens = tokens
    write_case(name, model_dir, spec, [Enc(p) for p in padded], ids, types, tensors,
               extra=dict(model_type=model_type, **(extra or {})))
    return att, valid


@torch.no_grad()
def tiny_roberta():
    from transformers import RobertaConfig, RobertaModel
    d = os.path.join(MODELS, "tiny-roberta")
    os.makedirs(d, exist_ok=True)
    n = byte_level_tokenizer(os.path.join(d, "tokenizer.json"), ["<s>", "<pad>", "</s>", "<unk>", "<mask>"], True)
    torch.manual_seed(2)
    cfg = RobertaConfig(vocab_size=n, hidden_size=24, num_hidden_layers=2, num_attention_heads=3, intermediate_size=40,
                        max_position_embeddings=66, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                        hidden_act="gelu", initializer_range=0.25, layer_norm_eps=1e-5)
    model = RobertaModel(cfg, add_pooling_layer=False).eval()
    round_to(model, torch.float16)
    state = {k: v.half().contiguous() for k, v in model.state_dict().items() if "position_ids" not in k and "token_type_ids" not in k}
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg.to_json_file(os.path.join(d, "config.json"))
    model.config._attn_implementation = "eager"
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    family_case("roberta_batch", "tiny-roberta", "roberta",
                dict(texts=["time flies like an arrow", "Café naïve 😀", "the cat sat on the mat"], mask="padding"),
                tok, model, cfg.pad_token_id)
    family_case("roberta_pair", "tiny-roberta", "roberta",
                dict(texts=["the cat sat on the mat", "a dog!"], pair="it was happy", mask="padding"),
                tok, model, cfg.pad_token_id)


@torch.no_grad()
def tiny_distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    d = os.path.join(MODELS, "tiny-distilbert")
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(MODELS, "tiny-bert", "tokenizer.json"), os.path.join(d, "tokenizer.json"))
    n = len(json.load(open(os.path.join(d, "tokenizer.json")))["model"]["vocab"])
    torch.manual_seed(3)
    cfg = DistilBertConfig(vocab_size=n, dim=24, n_layers=2, n_heads=3, hidden_dim=40, max_position_embeddings=64,
                           activation="gelu", initializer_range=0.25, pad_token_id=0)
    model = DistilBertModel(cfg).eval()
    for p in model.parameters():  # DistilBERT's init leaves LayerNorms at 1/0: give them some spread too
        if p.dim() == 1:
            p.data += 0.1 * torch.randn_like(p)
    round_to(model, torch.bfloat16)
    state = {k: v.bfloat16().contiguous() for k, v in model.state_dict().items() if "position_ids" not in k}
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg.to_json_file(os.path.join(d, "config.json"))
    model.config._attn_implementation = "eager"
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    family_case("distilbert_batch", "tiny-distilbert", "distilbert",
                dict(texts=["time flies like an arrow", "a dog!"], mask="padding"), tok, model, 0)


@torch.no_grad()
def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    d = os.path.join(MODELS, "tiny-gpt2")
    os.makedirs(d, exist_ok=True)
    n = byte_level_tokenizer(os.path.join(d, "tokenizer.json"), ["<|endoftext|>"], False)
    torch.manual_seed(4)
    cfg = GPT2Config(vocab_size=n, n_positions=64, n_embd=24, n_layer=2, n_head=3, activation_function="gelu_new",
                     initializer_range=0.25, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    # the original gpt2 files: no `transformer.` prefix, no lm_head (tied to wte), and the causal
    # mask as a buffer in every layer (attn.bias) beside attn.masked_bias, which the engine ignores
    state = {k.removeprefix("transformer."): v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    for i in range(cfg.n_layer):
        state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64)
        state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg.architectures = ["GPT2LMHeadModel"]
    cfg.to_json_file(os.path.join(d, "config.json"))
    again = GPT2LMHeadModel.from_pretrained(d, attn_implementation="eager").eval()
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    probe = torch.tensor([tok.encode("time flies like an arrow").ids])
    assert (again(probe).logits - model(probe).logits).abs().max() < 1e-5, "the saved file does not load back"
    probs = lambda out: dict(next_token_probs=F.softmax(out.logits, dim=-1))  # (B, T, V)
    att, valid = family_case("gpt2_batch", "tiny-gpt2", "gpt2",
                             dict(texts=["time flies like an arrow", "the cat sat", "fruit flies like a banana"], mask="causal"),
                             tok, again, cfg.eos_token_id, probs)
    check_causal(att, valid)
    family_case("gpt2_single", "tiny-gpt2", "gpt2", dict(texts=["attention is all you need"], mask="causal"),
                tok, again, cfg.eos_token_id, probs)


def marian_tokenizer(path, null_charsmap):
    """A SentencePiece (Unigram) tokenizer.json shaped as the converted opus-mt ones: `</s>` (id 0)
    after every text, `<unk>` 1, `<pad>` the last id (opus-mt's pad is its last token), trained on
    CORPUS and DATES. With `null_charsmap`, the Precompiled normaliser with a null charsmap that
    converted Marian tokenizers have (the Rust side drops it; Python's tokenizers panics on it,
    so the ids are computed by the same tokenizer without it)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(CORPUS + MARIAN_TARGETS * 20,
                            trainers.UnigramTrainer(vocab_size=180, special_tokens=["</s>", "<unk>"],
                                                    unk_token="<unk>", show_progress=False))
    pad = tok.get_vocab_size()
    tok.add_special_tokens(["<pad>"])
    assert tok.token_to_id("<pad>") == pad
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A $B </s>",
                                                       special_tokens=[("</s>", 0)])
    spec = json.loads(tok.to_str())
    if null_charsmap:
        spec["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": None},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    with open(path, "w") as f:
        json.dump(spec, f, ensure_ascii=False)
    return tok, pad


MARIAN_SOURCES = ["time flies like an arrow", "the cat sat on the mat", "hi", "Café naïve 😀"]
MARIAN_TARGETS = ["die Zeit fliegt wie ein Pfeil", "the 9th of May 2018", "2018-05-09"]


def marian_case(name, model_dir, tok, model, pad, sources, targets=None, max_new_tokens=10, extra=None):
    """HF's greedy `generate` (or the given targets, teacher-forced) for each source alone, and
    the three attentions and each step's next-token probabilities from one forward pass with
    `decoder_input_ids = output_ids[:-1]`; the sources decoded as one padded batch must give the
    same ids. Tensors per item i: encoder_attention_i (L, H, S, S), decoder_attention_i
    (L, H, T, T), cross_attention_i (L, H, T, S), step_probs_i (T, V)."""
    cfg = model.config
    items, tensors = [], {}
    for i, src in enumerate(sources):
        enc = tok.encode(src)
        ids = torch.tensor([enc.ids])
        if targets is None:
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=1, do_sample=False,
                                 max_new_tokens=max_new_tokens, bad_words_ids=[[pad]])
            output_ids = out[0].tolist()
        else:
            output_ids = [cfg.decoder_start_token_id] + tok.encode(targets[i]).ids
        dec = torch.tensor([output_ids[:-1]])
        fw = model(input_ids=ids, attention_mask=torch.ones_like(ids), decoder_input_ids=dec, output_attentions=True)
        tensors[f"encoder_attention_{i}"] = torch.stack(fw.encoder_attentions, dim=1)[0]
        tensors[f"decoder_attention_{i}"] = torch.stack(fw.decoder_attentions, dim=1)[0]
        tensors[f"cross_attention_{i}"] = torch.stack(fw.cross_attentions, dim=1)[0]
        tensors[f"step_probs_{i}"] = F.softmax(fw.logits[0], dim=-1)
        text = tok.decode(output_ids, skip_special_tokens=True)
        items.append(dict(source=src, source_ids=enc.ids, source_tokens=enc.tokens,
                          source_offsets=[list(o) for o in enc.offsets], output_ids=output_ids,
                          output_tokens=[tok.id_to_token(t) for t in output_ids], output_text=text,
                          target=None if targets is None else targets[i]))
    if targets is None and len(sources) > 1:  # HF's own batch equals each source alone
        encs = [tok.encode(s).ids for s in sources]
        s = max(map(len, encs))
        ids = torch.tensor([e + [pad] * (s - len(e)) for e in encs])
        valid = torch.tensor([[1] * len(e) + [0] * (s - len(e)) for e in encs])
        out = model.generate(input_ids=ids, attention_mask=valid, num_beams=1, do_sample=False,
                             max_new_tokens=max_new_tokens, bad_words_ids=[[pad]])
        for it, row in zip(items, out.tolist()):
            assert row[:len(it["output_ids"])] == it["output_ids"], (row, it["output_ids"])
    os.makedirs(GOLDEN, exist_ok=True)
    meta = dict(model=model_dir, model_type="marian", max_new_tokens=max_new_tokens, items=items, **(extra or {}))
    with open(os.path.join(GOLDEN, name + ".json"), "w") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
    save_file({k: v.contiguous().float() for k, v in tensors.items()}, os.path.join(GOLDEN, name + ".safetensors"))
    print(f"{name}: " + "; ".join(f"{it['source']!r} -> {it['output_ids']}" for it in items))
    return items, tensors


@torch.no_grad()
def tiny_marian(name, seed, dtype, null_charsmap, keep_positions, eos_bias, **kw):
    """A small random MarianMTModel (2 + 2 layers unless `kw` says otherwise) saved as HF saves
    one: `model.shared.weight` (tied to both embeddings and the LM head), `final_logits_bias`, the
    sinusoidal `embed_positions.weight` kept or left out. `eos_bias` raises EOS's logit so that
    some greedy outputs stop before `max_new_tokens`."""
    from transformers import MarianConfig, MarianMTModel
    d = os.path.join(MODELS, name)
    os.makedirs(d, exist_ok=True)
    tok, pad = marian_tokenizer(os.path.join(d, "tokenizer.json"), null_charsmap)
    torch.manual_seed(seed)
    args = dict(vocab_size=pad + 1, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=64,
                pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0,
                init_std=0.25, scale_embedding=True, activation_function="swish")
    args.update(kw)
    cfg = MarianConfig(**args)
    model = MarianMTModel(cfg).eval()
    for n, p in model.named_parameters():  # LayerNorms and biases get some spread too
        if p.dim() == 1 and "embed_positions" not in n:
            p.data += 0.1 * torch.randn_like(p)
    model.final_logits_bias[0, 0] += eos_bias
    positions = {n: p.data.clone() for n, p in model.named_parameters() if "embed_positions" in n}
    round_to(model, dtype)
    for n, p in model.named_parameters():  # computed, not stored: never rounded
        if n in positions:
            p.data = positions[n]
    model.final_logits_bias.data = model.final_logits_bias.to(dtype).float()
    state = {k: v for k, v in model.state_dict().items()
             if k not in ("lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
             and (keep_positions or "embed_positions" not in k)}
    save_file({k: v.to(dtype).contiguous() for k, v in state.items()}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    cfg.architectures = ["MarianMTModel"]
    cfg.to_json_file(os.path.join(d, "config.json"))
    again = MarianMTModel.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    probe = torch.tensor([tok.encode("time flies").ids])
    dec = torch.tensor([[pad, 5, 6]])
    assert (again(input_ids=probe, decoder_input_ids=dec).logits - model(input_ids=probe, decoder_input_ids=dec).logits).abs().max() < 1e-4, \
        "the saved file does not load back"
    return d, tok, pad, again


@torch.no_grad()
def dates():
    """The shipped dates → ISO model (models/dates, tools/train_dates.py) under HF: greedy
    outputs and attentions of a few held-out dates in several forms, one padded batch."""
    from transformers import MarianMTModel
    d = os.path.join(ROOT, "models", "dates")
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    model = MarianMTModel.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    pad = model.config.pad_token_id
    items, tensors = marian_case("marian_dates", "dates", tok, model, pad,
                                 ["the 9th of May 2018", "Sunday, 9 Sept 2018", "09/05/2018", "MARCH  3RD, 1999"],
                                 max_new_tokens=16)
    # the page's "check" on the dates model: HF's ids and three attentions for the same dates
    import transformers
    rounded = lambda t: [[[[round(v, 7) for v in row] for row in m] for m in heads] for heads in t.tolist()]
    cases = [dict(source=it["source"], output_ids=it["output_ids"],
                  **{k: rounded(tensors[f"{k}_{i}"]) for k in ("encoder_attention", "decoder_attention", "cross_attention")})
             for i, it in enumerate(items)]
    path = os.path.join(ROOT, "web", "reference", "dates.json")
    with open(path, "w") as f:
        json.dump(dict(source=f"HF transformers {transformers.__version__}, torch {torch.__version__.split('+')[0]}",
                       cases=cases), f, separators=(",", ":"))
    print(f"{path}: {len(cases)} cases")


def tiny_marians():
    d, tok, pad, model = tiny_marian("tiny-marian", 5, torch.float32, False, True, 3.0)
    marian_case("marian_generate", "tiny-marian", tok, model, pad, MARIAN_SOURCES, max_new_tokens=10)
    marian_case("marian_teacher", "tiny-marian", tok, model, pad, MARIAN_SOURCES[:2],
                targets=["die Zeit fliegt wie ein Pfeil", "2018-05-09"])
    d, tok, pad, model = tiny_marian("tiny-marian-f16", 6, torch.float16, True, False, 4.0,
                                     activation_function="gelu", decoder_layers=3, decoder_attention_heads=2,
                                     decoder_ffn_dim=40, encoder_ffn_dim=56, scale_embedding=False)
    marian_case("marian_f16_generate", "tiny-marian-f16", tok, model, pad, MARIAN_SOURCES, max_new_tokens=12)
    marian_case("marian_f16_teacher", "tiny-marian-f16", tok, model, pad, MARIAN_SOURCES[2:],
                targets=["the 9th of May 2018", "hi"])


TOKENIZERS = os.path.join(ROOT, "tests", "fixtures", "tokenizers")


def sentencepiece_tokenizers():
    """Two SentencePiece-style tokenizer.json files: a Unigram model trained here (Metaspace ▁)
    with the tokens and ids the tokenizers library gives a few texts, and one shaped like the
    converted opus-mt (Marian) tokenizers, whose Precompiled normaliser has a null charsmap."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    os.makedirs(TOKENIZERS, exist_ok=True)
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=200, special_tokens=["<pad>", "</s>", "<unk>"],
                                                            unk_token="<unk>", show_progress=False))
    tok.save(os.path.join(TOKENIZERS, "unigram.json"))
    texts = ["time flies like an arrow", "Café naïve 😀", "the cat sat on the mat"]
    expected = [dict(text=t, tokens=e.tokens, ids=e.ids, offsets=e.offsets) for t, e in zip(texts, tok.encode_batch(texts))]
    with open(os.path.join(TOKENIZERS, "unigram_expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
    spec = json.loads(tok.to_str())
    spec["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Precompiled", "precompiled_charsmap": None},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    with open(os.path.join(TOKENIZERS, "precompiled_null.json"), "w") as f:
        json.dump(spec, f, ensure_ascii=False)
    try:  # what the Python library makes of it, for the record (tokenizers 0.23: a Rust panic)
        Tokenizer.from_file(os.path.join(TOKENIZERS, "precompiled_null.json"))
        print("precompiled_null.json: the tokenizers library loads it")
    except BaseException as e:  # pyo3's PanicException is not an Exception
        print(f"precompiled_null.json: the tokenizers library fails on it: {type(e).__name__}: {e}")
    print(f"{TOKENIZERS}: unigram.json ({tok.get_vocab_size()} tokens), precompiled_null.json")


# The Llama family (issue 30): a tiny Llama (GQA, head_dim ≠ hidden/heads, untied LM head) and a
# tiny Qwen2 (q/k/v biases, tied embeddings) made by transformers' own classes, the tiny Llama
# written again as GGUF files the way llama.cpp's convert_hf_to_gguf.py and llama-quantize
# (--pure) write them, and SmolLM2-135M-Instruct's llama.cpp Q4_1 GGUF (scripts/setup.sh) under HF.
LLAMA_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2, as SmolLM2's and Qwen2's
# SmolLM2-135M-Instruct's chat template (its tokenizer_config.json and its GGUF's tokenizer.chat_template)
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA_CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "time flies like an arrow"}]
SMOLLM2_GGUF = os.path.join(ROOT, "assets", "models", "SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def spread_1d(model, bias_std):
    """RMSNorm weights 1 + 0.1·randn (the init leaves them at 1) and biases bias_std·randn (at 0)."""
    for n, p in model.named_parameters():
        if p.dim() == 1:
            p.data += (0.1 if n.endswith("norm.weight") else bias_std) * torch.randn_like(p)


def hub_config(cfg, rope_theta, **fields):
    """config.json as the Hub's Llama/Qwen2 checkpoints spell it: `rope_theta` and
    `rope_scaling: null` at the top level (transformers 5 writes `rope_parameters` instead and
    still reads this form)."""
    spec = cfg.to_dict()
    for key in ("rope_parameters", "dtype", "output_hidden_states", "output_attentions", "return_dict", "id2label",
                "label2id", "problem_type", "chunk_size_feed_forward", "is_encoder_decoder", "_name_or_path"):
        spec.pop(key, None)  # transformers 5's generic fields, which Hub causal LM configs do not have
    spec.update(rope_theta=rope_theta, rope_scaling=None, **fields)
    return spec


def chatml_tokenizer_config(path, bos, eos, pad, unk):
    with open(path, "w") as f:
        json.dump(dict(add_bos_token=False, add_prefix_space=False, bos_token=bos, eos_token=eos, pad_token=pad,
                       unk_token=unk, clean_up_tokenization_spaces=False, model_max_length=128,
                       tokenizer_class="GPT2Tokenizer", chat_template=CHATML_TEMPLATE), f, ensure_ascii=False, indent=2)


def top_k_ids(scores, k):
    return [s[0].topk(k).indices.tolist() for s in scores]


@torch.no_grad()
def generate_case(name, model_dir, model_type, tok, model, prompt, max_new_tokens=8, extra=None):
    """HF's greedy `generate` from one prompt (no padding), then one forward pass over
    prompt + output[:-1]: its attention (1, L, H, N, N) and next_token_probs (1, N, V). The json
    has prompt_ids, output_ids (EOS included if reached) and each step's top-5 ids of generate's
    scores; token_ids/tokens are the forward pass's sequence."""
    enc = tok.encode(prompt)
    ids = torch.tensor([enc.ids])
    gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, num_beams=1,
                         max_new_tokens=max_new_tokens, output_scores=True, return_dict_in_generate=True)
    output_ids = gen.sequences[0, ids.shape[1]:].tolist()
    seq = torch.tensor([enc.ids + output_ids[:-1]])
    out = model(input_ids=seq, attention_mask=torch.ones_like(seq), output_attentions=True)
    att = torch.stack(out.attentions, dim=1)
    check_causal(att, torch.ones_like(seq))
    probs = F.softmax(out.logits, dim=-1)
    p = len(enc.ids)
    assert probs[0, p - 1:].argmax(-1).tolist() == output_ids, "the forward pass disagrees with generate"

    class Enc:
        tokens = [tok.id_to_token(t) for t in seq[0].tolist()]
    write_case(name, model_dir, dict(texts=[prompt], mask="causal"), [Enc()], seq, torch.zeros_like(seq),
               dict(attention=att, next_token_probs=probs),
               extra=dict(model_type=model_type, prompt_ids=enc.ids, output_ids=output_ids,
                          output_tokens=[tok.id_to_token(t) for t in output_ids], max_new_tokens=max_new_tokens,
                          eos_token_id=model.config.eos_token_id, step_top5_ids=top_k_ids(gen.scores, 5),
                          **(extra or {})))
    return output_ids


def check_right_padding(model, tok, texts, att):
    """HF's Llama/Qwen2 give every row positions 0..T-1 (cache_position) with right padding: each
    text's real block of the batch's attention equals the text's own attention run alone."""
    for b, text in enumerate(texts):
        ids = torch.tensor([tok.encode(text).ids])
        alone = torch.stack(model(input_ids=ids, output_attentions=True).attentions, dim=1)[0]
        n = ids.shape[1]
        assert (att[b, :, :, :n, :n] - alone).abs().max() < 1e-5, f"row {b} is not positioned 0..{n - 1}"


def attention_spread(att, valid):
    """Mean entropy (nats) and mean maximum of the real query rows, to show attention is not uniform."""
    rows = valid.bool()[:, None, None, :, None].expand(-1, att.shape[1], att.shape[2], -1, 1).squeeze(-1)
    a = att.double()[rows]
    h = -(a * a.clamp_min(1e-30).log()).sum(-1)
    return float(h.mean()), float(a.max(-1).values.mean())


def padded_case(name, model_dir, model_type, texts, tok, model, pad_id):
    probs = lambda out: dict(next_token_probs=F.softmax(out.logits, dim=-1))  # (B, T, V)
    att, valid = family_case(name, model_dir, model_type, dict(texts=texts, mask="causal"), tok, model, pad_id, probs,
                             extra=dict(position_ids="0..T-1 in every row (right padding)"))
    check_causal(att, valid)
    if len(texts) > 1:
        check_right_padding(model, tok, texts, att)
    ent, top = attention_spread(att, valid)
    print(f"  {name}: attention entropy {ent:.3f} nats on average, mean row maximum {top:.3f}")
    return att


def tiny_llama_folder(name, seed, rope_theta, **fields):
    """tests/fixtures/models/<name>: a LlamaForCausalLM of `fields` (seeded `seed`) in f16 weights,
    the byte-level BPE with SmolLM2's specials and ChatML template, config.json as the Hub spells
    it; the folder, and the model and tokenizer loaded back from it (checked to be the model)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    d = os.path.join(MODELS, name)
    os.makedirs(d, exist_ok=True)
    n = byte_level_tokenizer(os.path.join(d, "tokenizer.json"), LLAMA_SPECIALS, False)
    chatml_tokenizer_config(os.path.join(d, "tokenizer_config.json"), "<|im_start|>", "<|im_end|>", "<|im_end|>",
                            "<|endoftext|>")
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=n, rms_norm_eps=1e-5, rope_parameters=dict(rope_type="default", rope_theta=rope_theta),
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                      attn_implementation="eager", **fields)
    model = LlamaForCausalLM(cfg).eval()
    spread_1d(model, 0.0)
    round_to(model, torch.float16)
    save_file({k: v.half().contiguous() for k, v in model.state_dict().items()}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    spec = hub_config(cfg, rope_theta, architectures=["LlamaForCausalLM"], torch_dtype="float16")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(spec, f, indent=2)
    again = LlamaForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    assert again.config.rope_parameters["rope_theta"] == rope_theta and again.config.head_dim == fields["head_dim"]
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    probe = torch.tensor([tok.encode("time flies like an arrow").ids])
    assert (again(probe).logits - model(probe).logits).abs().max() < 1e-5, "the saved file does not load back"
    return d, again, tok, probe


@torch.no_grad()
def tiny_llama():
    """tests/fixtures/models/tiny-llama: LlamaForCausalLM, f16 weights, GQA 4/2 heads, head_dim 48."""
    # hidden 256: every row length is a multiple of 256 (Q4_K, Q6_K) except o_proj's 4·48 = 192;
    # initializer_range 0.1 at width 256 gives attention logits of a few units, neither flat nor one-hot
    d, again, tok, _ = tiny_llama_folder("tiny-llama", 30, 100000.0, hidden_size=256, intermediate_size=256,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=48, max_position_embeddings=128, initializer_range=0.1)
    cfg = again.config
    padded_case("llama_batch", "tiny-llama", "llama",
                ["time flies like an arrow", "the cat sat", "fruit flies like a banana"], tok, again, cfg.pad_token_id)
    padded_case("llama_single", "tiny-llama", "llama", ["attention is all you need"], tok, again, cfg.pad_token_id)
    from transformers import AutoTokenizer
    hf_tok = AutoTokenizer.from_pretrained(d)
    prompt = hf_tok.apply_chat_template(LLAMA_CHAT, add_generation_prompt=True, tokenize=False)
    assert hf_tok(prompt).input_ids == tok.encode(prompt).ids
    generate_case("llama_generate", "tiny-llama", "llama", tok, again, prompt,
                  extra=dict(chat=LLAMA_CHAT, add_generation_prompt=True))
    return d, again, tok


@torch.no_grad()
def tiny_llama_wide():
    """tests/fixtures/models/tiny-llama-wide: LlamaForCausalLM, f16 weights, 4 layers of 16 query heads
    over 4 KV heads of 16 dimensions (hidden 64), 2,048 positions, tiny-llama's tokenizer. Many
    heads over little width: at 1,025 tokens its L·H·T² probabilities (67M) pass the page's long
    run threshold (2^25) at a small fraction of SmolLM2's work, so the end-to-end test runs a
    1,024-token prompt on WebGPU (SwiftShader) in seconds; its numbers are checked against the
    CLI there, the CPU engine's against HF on the other tiny Llamas."""
    _, again, _, probe = tiny_llama_folder("tiny-llama-wide", 32, 10000.0, hidden_size=64, intermediate_size=128,
                                           num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
                                           head_dim=16, max_position_embeddings=2048, initializer_range=0.2)
    ent, top = attention_spread(torch.stack(again(probe, output_attentions=True).attentions, 1), torch.ones(probe.shape, dtype=torch.bool))
    print(f"  tiny-llama-wide: attention entropy {ent:.3f} nats on average, mean row maximum {top:.3f}")


@torch.no_grad()
def tiny_qwen2():
    """tests/fixtures/models/tiny-qwen2: Qwen2ForCausalLM, bf16 weights, q/k/v biases, tied embeddings."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    d = os.path.join(MODELS, "tiny-qwen2")
    os.makedirs(d, exist_ok=True)
    n = byte_level_tokenizer(os.path.join(d, "tokenizer.json"), LLAMA_SPECIALS, False)
    chatml_tokenizer_config(os.path.join(d, "tokenizer_config.json"), None, "<|im_end|>", "<|endoftext|>", None)
    torch.manual_seed(31)
    cfg = Qwen2Config(vocab_size=n, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
                      rope_parameters=dict(rope_type="default", rope_theta=1000000.0), initializer_range=0.2,
                      tie_word_embeddings=True, use_sliding_window=False, sliding_window=4096, max_window_layers=2,
                      bos_token_id=0, eos_token_id=2, attn_implementation="eager")
    model = Qwen2ForCausalLM(cfg).eval()
    spread_1d(model, 0.2)
    round_to(model, torch.bfloat16)
    state = {k: v.bfloat16().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    assert "model.layers.0.self_attn.q_proj.bias" in state
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    spec = hub_config(cfg, 1000000.0, architectures=["Qwen2ForCausalLM"], torch_dtype="bfloat16",
                      use_sliding_window=False, sliding_window=4096, max_window_layers=2)
    spec.pop("layer_types", None)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(spec, f, indent=2)
    again = Qwen2ForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    assert again.config.tie_word_embeddings and again.lm_head.weight.data_ptr() == again.model.embed_tokens.weight.data_ptr()
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    probe = torch.tensor([tok.encode("time flies like an arrow").ids])
    assert (again(probe).logits - model(probe).logits).abs().max() < 1e-5, "the saved file does not load back"
    padded_case("qwen2_batch", "tiny-qwen2", "qwen2",
                ["time flies like an arrow", "the cat sat on the mat", "hi"], tok, again, 0)
    # a prompt whose greedy output has a special token (<|im_start|>) in it
    generate_case("qwen2_generate", "tiny-qwen2", "qwen2", tok, again,
                  "The animal didn't cross the street because it was too tired.")


def quantize_q4_k(blocks):
    """(n, 256) f32 -> (n, 144) uint8 Q4_K blocks (d, dmin f16; 12 bytes of 6-bit sub-block scales and
    mins; 128 bytes of 4-bit quants): value = d·sc·q - dmin·m over 8 sub-blocks of 32. A plain
    min/max fit per sub-block (llama.cpp's make_qkx2_quants searches further; any fit decodes alike)."""
    import numpy as np
    n = blocks.shape[0]
    x = blocks.reshape(n, 8, 32)
    offs = -np.minimum(x.min(-1), 0)  # (n, 8) ≥ 0
    scale = (x.max(-1) + offs) / 15
    d = (scale.max(-1) / 63).astype(np.float16)
    dmin = (offs.max(-1) / 63).astype(np.float16)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.where(df > 0, np.rint(scale / np.where(df > 0, df, 1)), 0).clip(0, 63).astype(np.uint8)
    m = np.where(dminf > 0, np.rint(offs / np.where(dminf > 0, dminf, 1)), 0).clip(0, 63).astype(np.uint8)
    step, low = (df * sc)[..., None], (dminf * m)[..., None]
    q = np.where(step > 0, np.rint((x + low) / np.where(step > 0, step, 1)), 0).clip(0, 15).astype(np.uint8)
    scales = np.concatenate([(sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6), (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6),
                             (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)], axis=-1)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, 128)
    return np.concatenate([d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2), scales, qs], axis=-1)


def quantize_q5_k(blocks):
    """(n, 256) f32 -> (n, 176) uint8 Q5_K blocks (d, dmin f16; 12 bytes of 6-bit sub-block scales and
    mins packed as Q4_K's; 32 bytes of fifth bits, bit j of byte l for value 32j + l; 128 bytes of low
    4 bits as Q4_K's): value = d·sc·q - dmin·m over 8 sub-blocks of 32, q < 32. quantize_q4_k's fit."""
    import numpy as np
    n = blocks.shape[0]
    x = blocks.reshape(n, 8, 32)
    offs = -np.minimum(x.min(-1), 0)  # (n, 8) ≥ 0
    scale = (x.max(-1) + offs) / 31
    d = (scale.max(-1) / 63).astype(np.float16)
    dmin = (offs.max(-1) / 63).astype(np.float16)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.where(df > 0, np.rint(scale / np.where(df > 0, df, 1)), 0).clip(0, 63).astype(np.uint8)
    m = np.where(dminf > 0, np.rint(offs / np.where(dminf > 0, dminf, 1)), 0).clip(0, 63).astype(np.uint8)
    step, low = (df * sc)[..., None], (dminf * m)[..., None]
    q = np.where(step > 0, np.rint((x + low) / np.where(step > 0, step, 1)), 0).clip(0, 31).astype(np.uint8)
    scales = np.concatenate([(sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6), (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6),
                             (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)], axis=-1)
    qs = ((q[:, 0::2] & 15) | ((q[:, 1::2] & 15) << 4)).reshape(n, 128)
    qh = ((q >> 4) << np.arange(8, dtype=np.uint8)[None, :, None]).sum(1, dtype=np.uint8)  # (n, 32)
    return np.concatenate([d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2), scales, qh, qs],
                          axis=-1)


def quantize_q3_k(blocks):
    """(n, 256) f32 -> (n, 110) uint8 Q3_K blocks (32 bytes of high bits, bit b of byte l for value
    32b + l; 64 bytes of low 2 bits, bits 2k of byte 32h + l for value 128h + 32k + l; 12 bytes of
    sixteen 6-bit sub-block scales stored plus 32; d f16): value = d·sc·(q - 4) over 16 sub-blocks of
    16, q < 8, sc in [-32, 31]. As llama.cpp's make_q3_quants, each sub-block's value of largest
    magnitude is at q - 4 = -4 (its scale negative where that value is positive)."""
    import numpy as np
    n = blocks.shape[0]
    x = blocks.reshape(n, 16, 16)
    top = np.take_along_axis(x, np.abs(x).argmax(-1)[..., None], -1)[..., 0]  # (n, 16), signed
    s = -top / 4
    d = (np.abs(s).max(-1) / 31).astype(np.float16)
    df = d.astype(np.float32)[:, None]
    sc = np.where(df > 0, np.rint(s / np.where(df > 0, df, 1)), 0).clip(-32, 31).astype(np.int8)
    step = (df * sc)[..., None]
    q = (np.where(step != 0, np.rint(x / np.where(step != 0, step, 1)), 0).clip(-4, 3) + 4).astype(np.uint8)
    q = q.reshape(n, 256)
    ls = (sc.astype(np.int16) + 32).astype(np.uint8)  # (n, 16), 6 bits
    scales = np.concatenate([(ls[:, :8] & 15) | ((ls[:, 8:] & 15) << 4),
                             ((ls >> 4).reshape(n, 4, 4) << (2 * np.arange(4, dtype=np.uint8))[None, :, None])
                             .sum(1, dtype=np.uint8)], axis=-1)
    hmask = ((q >> 2).reshape(n, 8, 32) << np.arange(8, dtype=np.uint8)[None, :, None]).sum(1, dtype=np.uint8)
    qs = ((q & 3).reshape(n, 2, 4, 32) << (2 * np.arange(4, dtype=np.uint8))[None, None, :, None])
    qs = qs.sum(2, dtype=np.uint8).reshape(n, 64)
    return np.concatenate([hmask, qs, scales, d.view(np.uint8).reshape(n, 2)], axis=-1)


def quantize_q2_k(blocks):
    """(n, 256) f32 -> (n, 84) uint8 Q2_K blocks (16 bytes of 4-bit sub-block scales, low nibble, and
    mins, high; 64 bytes of 2-bit quants, bits 2k of byte 32h + l for value 128h + 32k + l; d, dmin
    f16): value = d·sc·q - dmin·m over 16 sub-blocks of 16, q < 4. quantize_q4_k's fit."""
    import numpy as np
    n = blocks.shape[0]
    x = blocks.reshape(n, 16, 16)
    offs = -np.minimum(x.min(-1), 0)  # (n, 16) ≥ 0
    scale = (x.max(-1) + offs) / 3
    d = (scale.max(-1) / 15).astype(np.float16)
    dmin = (offs.max(-1) / 15).astype(np.float16)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.where(df > 0, np.rint(scale / np.where(df > 0, df, 1)), 0).clip(0, 15).astype(np.uint8)
    m = np.where(dminf > 0, np.rint(offs / np.where(dminf > 0, dminf, 1)), 0).clip(0, 15).astype(np.uint8)
    step, low = (df * sc)[..., None], (dminf * m)[..., None]
    q = np.where(step > 0, np.rint((x + low) / np.where(step > 0, step, 1)), 0).clip(0, 3).astype(np.uint8)
    qs = (q.reshape(n, 2, 4, 32) << (2 * np.arange(4, dtype=np.uint8))[None, None, :, None])
    qs = qs.sum(2, dtype=np.uint8).reshape(n, 64)
    return np.concatenate([sc | (m << 4), qs, d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2)],
                          axis=-1)


def quantize_q6_k(blocks):
    """(n, 256) f32 -> (n, 210) uint8 Q6_K blocks (128 bytes low 4 bits, 64 bytes high 2 bits,
    16 int8 sub-block scales, d f16): value = d·sc·(q - 32) over 16 sub-blocks of 16."""
    import numpy as np
    n = blocks.shape[0]
    x = blocks.reshape(n, 16, 16)
    s = np.abs(x).max(-1) / 31
    d = (s.max(-1) / 127).astype(np.float16)
    df = d.astype(np.float32)[:, None]
    sc = np.where(df > 0, np.rint(s / np.where(df > 0, df, 1)), 0).clip(0, 127).astype(np.int8)
    step = (df * sc)[..., None]
    q = (np.where(step > 0, np.rint(x / np.where(step > 0, step, 1)), 0).clip(-32, 31) + 32).astype(np.uint8)
    q = q.reshape(n, 256)
    low, high = (q & 15).reshape(n, 2, 2, 64), (q >> 4).reshape(n, 2, 4, 32)
    ql = (low[:, :, 0] | (low[:, :, 1] << 4)).reshape(n, 128)
    qh = (high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)).reshape(n, 64)
    return np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(n, 2)], axis=-1)


# The GGUF types written, each with llama.cpp's file type and the type a 2-D tensor whose row
# length does not divide into its blocks falls back to (llama-quant.cpp's llama_tensor_get_type,
# `convert_incompatible_tensor`). llama.cpp falls back from Q2_K and Q3_K to IQ4_NL, Q4_0's block
# (d, 16 bytes of nibbles) with a non-linear table of 16 values, which attnscope does not read:
# those two files use Q4_0 there, as llama.cpp does for TQ1_0 and TQ2_0.
GGUF_TYPES = {
    "F16": ("F16", "MOSTLY_F16", None),
    "Q8_0": ("Q8_0", "MOSTLY_Q8_0", None),
    "Q4_0": ("Q4_0", "MOSTLY_Q4_0", None),
    "Q4_1": ("Q4_1", "MOSTLY_Q4_1", None),
    "Q4_K": ("Q4_K", "MOSTLY_Q4_K_S", "Q5_0"),
    "Q6_K": ("Q6_K", "MOSTLY_Q6_K", "Q8_0"),
    "Q5_K": ("Q5_K", "MOSTLY_Q5_K_S", "Q5_1"),
    "Q3_K": ("Q3_K", "MOSTLY_Q3_K_S", "Q4_0"),
    "Q2_K": ("Q2_K", "MOSTLY_Q2_K", "Q4_0"),
}

# The K-quants gguf-py cannot quantize, with the largest round-trip error allowed (relative to the
# tensor's largest magnitude): a little over half a step of the type's integers at the fits above.
K_QUANTIZERS = {
    "Q2_K": (quantize_q2_k, 0.4),
    "Q3_K": (quantize_q3_k, 0.3),
    "Q4_K": (quantize_q4_k, 0.12),
    "Q5_K": (quantize_q5_k, 0.06),
    "Q6_K": (quantize_q6_k, 0.03),
}


def gguf_encode(w, qtype):
    """A 2-D f32 array (rows, cols) -> (the array or bytes to write, the GGML type written)."""
    import gguf
    import numpy as np
    type_name, _, fallback = GGUF_TYPES[qtype]
    t = gguf.GGMLQuantizationType[type_name]
    block = gguf.GGML_QUANT_SIZES[t][0]
    if w.shape[1] % block:
        t = gguf.GGMLQuantizationType[fallback]
        assert w.shape[1] % gguf.GGML_QUANT_SIZES[t][0] == 0
    if t == gguf.GGMLQuantizationType.F16:
        return w.astype(np.float16), t
    if t.name in K_QUANTIZERS:
        quantize, tol = K_QUANTIZERS[t.name]
        rows = w.shape[0]
        data = quantize(np.ascontiguousarray(w, dtype=np.float32).reshape(-1, 256)).reshape(rows, -1)
        back = gguf.quants.dequantize(data, t).reshape(w.shape)
        err = np.abs(back - w).max() / np.abs(w).max()
        assert err < tol, f"{t.name} round trip error {err}"
        return data, t
    return gguf.quants.quantize(np.ascontiguousarray(w, dtype=np.float32), t), t


def llama_permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rows from HF's rotate-half order
    (pairs i, i + d/2) to llama.cpp's interleaved order (pairs 2i, 2i + 1)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(path, model, tok_path, qtype):
    """The tiny Llama as convert_hf_to_gguf.py writes it (F16) and `llama-quantize --pure` then
    quantizes it: every 2-D weight in `qtype` (or its fallback), 1-D norms F32. Returns
    {tensor name: GGML type name}."""
    import gguf
    import numpy as np
    cfg = model.config
    spec = json.load(open(tok_path))
    vocab = spec["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    special = {a["content"] for a in spec["added_tokens"] if a["special"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    w = gguf.GGUFWriter(path, "llama")
    w.add_type("model")
    w.add_name("tiny-llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_file_type(gguf.LlamaFileType[GGUF_TYPES[qtype][1]])
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_unk_token_id(vocab["<|endoftext|>"])
    w.add_pad_token_id(cfg.pad_token_id)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    state = {k: v.float().numpy() for k, v in model.state_dict().items()}
    names = [("model.embed_tokens.weight", "token_embd.weight")]
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        names += [(p + "input_layernorm.weight", f"blk.{i}.attn_norm.weight"),
                  (p + "self_attn.q_proj.weight", f"blk.{i}.attn_q.weight"),
                  (p + "self_attn.k_proj.weight", f"blk.{i}.attn_k.weight"),
                  (p + "self_attn.v_proj.weight", f"blk.{i}.attn_v.weight"),
                  (p + "self_attn.o_proj.weight", f"blk.{i}.attn_output.weight"),
                  (p + "post_attention_layernorm.weight", f"blk.{i}.ffn_norm.weight"),
                  (p + "mlp.gate_proj.weight", f"blk.{i}.ffn_gate.weight"),
                  (p + "mlp.up_proj.weight", f"blk.{i}.ffn_up.weight"),
                  (p + "mlp.down_proj.weight", f"blk.{i}.ffn_down.weight")]
    names += [("model.norm.weight", "output_norm.weight"), ("lm_head.weight", "output.weight")]
    assert {hf for hf, _ in names} == set(state), set(state) ^ {hf for hf, _ in names}
    types = {}
    for hf, name in names:
        x = state[hf]
        if hf.endswith("q_proj.weight"):
            x = llama_permute(x, cfg.num_attention_heads, cfg.num_attention_heads)
        elif hf.endswith("k_proj.weight"):
            x = llama_permute(x, cfg.num_attention_heads, cfg.num_key_value_heads)
        if x.ndim == 1:
            data, t = x.astype(np.float32), gguf.GGMLQuantizationType.F32
        else:
            data, t = gguf_encode(x, qtype)
        w.add_tensor(name, data, raw_dtype=t)
        types[name] = t.name
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


@torch.no_grad()
def tiny_llama_gguf(src_dir, model, tok, qtypes=None):
    """tests/fixtures/models/tiny-llama-gguf/tiny-llama-{type}.gguf and, for each, HF's reference
    from the GGUF alone (transformers dequantizes it and rebuilds its config and tokenizer); of
    every type in GGUF_TYPES, or of those in `qtypes`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d = os.path.join(MODELS, "tiny-llama-gguf")
    os.makedirs(d, exist_ok=True)
    text = "time flies like an arrow"
    for qtype in qtypes or GGUF_TYPES:
        name = f"tiny-llama-{qtype}.gguf"
        types = write_llama_gguf(os.path.join(d, name), model, os.path.join(src_dir, "tokenizer.json"), qtype)
        hf_tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
        ids = hf_tok(text).input_ids
        assert ids == tok.encode(text).ids, (ids, tok.encode(text).ids)
        prompt = hf_tok.apply_chat_template(LLAMA_CHAT, add_generation_prompt=True, tokenize=False)
        assert hf_tok(prompt).input_ids == tok.encode(prompt).ids, "the GGUF tokenizer splits the chat prompt otherwise"
        gm = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, attn_implementation="eager",
                                                  dtype=torch.float32).eval()
        c = gm.config
        assert (type(gm).__name__, c.head_dim, c.num_key_value_heads, c.tie_word_embeddings) == \
            ("LlamaForCausalLM", 48, 2, False), (type(gm).__name__, c.head_dim, c.num_key_value_heads, c.tie_word_embeddings)
        probe = torch.tensor([ids])
        diff = float((gm(probe).logits - model(probe).logits).abs().max())
        if qtype == "F16":
            assert diff == 0, f"the F16 GGUF does not give the safetensors' logits ({diff})"
        print(f"  {name}: {os.path.getsize(os.path.join(d, name))} bytes, logits differ from the f16 model by "
              f"{diff:.3g}; types {sorted(set(types.values()))}")
        gguf_meta = dict(gguf_file=f"tiny-llama-gguf/{name}", gguf_type=qtype, gguf_tokenizer_ids=[ids],
                         tensor_types=types)
        probs = lambda out: dict(next_token_probs=F.softmax(out.logits, dim=-1))
        att, valid = family_case(f"llama_gguf_{qtype}", "tiny-llama-gguf", "llama", dict(texts=[text], mask="causal"),
                                 tok, gm, c.pad_token_id, probs, extra=gguf_meta)
        check_causal(att, valid)
        if qtype == "Q4_K":
            generate_case("llama_gguf_generate", "tiny-llama-gguf", "llama", tok, gm, prompt,
                          extra=dict(gguf_meta, gguf_tokenizer_ids=[hf_tok(prompt).input_ids], chat=LLAMA_CHAT,
                                     add_generation_prompt=True))


# The GGUF types the tiny Gemma 3 and Qwen3 are written in (Q4_K's small matrices fall back to
# Q5_0, Q6_K's to Q8_0, as llama-quantize's do; their widths are 256 so that every matrix is a
# K-quant's where it can be).
FAMILY_GGUF_TYPES = ["Q8_0", "Q4_K", "Q6_K", "Q5_K", "Q3_K", "Q2_K"]
FAMILY_GGUF_TEXT = "time flies like an arrow and fruit flies like a banana"


class HfTokens:
    """A transformers tokenizer (one HF builds from a GGUF file) with the `tokenizers` methods
    family_case and generate_case call: encode, encode_batch, id_to_token."""
    def __init__(self, hf):
        self.hf = hf

    def encode(self, text):
        import types
        ids = self.hf(text).input_ids
        return types.SimpleNamespace(ids=ids, tokens=self.hf.convert_ids_to_tokens(ids))

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]

    def id_to_token(self, i):
        return self.hf.convert_ids_to_tokens(i)


def write_family_gguf(path, arch, model, tokenizer, names, qtype, norm_shift=0.0, extra=None):
    """`model`'s weights as llama.cpp's convert_hf_to_gguf.py writes an `arch` model (no rotary
    permutation: Gemma 3's and Qwen3's heads stay in HF's order; every norm + `norm_shift`, Gemma's
    1), then `llama-quantize --pure`: every matrix in `qtype` or its fallback, vectors F32.
    `tokenizer(w)` writes the vocabulary; `names`: [(HF key, GGUF key)]; `extra(w)` the family's
    own keys. Returns {tensor name: GGML type name}."""
    import gguf
    import numpy as np
    cfg = model.config
    w = gguf.GGUFWriter(path, arch)
    w.add_type("model")
    w.add_name(os.path.splitext(os.path.basename(path))[0])
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType[GGUF_TYPES[qtype][1]])
    w.add_vocab_size(cfg.vocab_size)
    if extra:
        extra(w)
    tokenizer(w)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    state = {k: v.float().numpy() for k, v in model.state_dict().items()}
    assert {hf for hf, _ in names} == set(state) - {"lm_head.weight"}, set(state) ^ {hf for hf, _ in names}
    types = {}
    for hf, name in names:
        x = state[hf]
        if x.ndim == 1:
            data, t = (x + (norm_shift if hf.endswith("norm.weight") else 0.0)).astype(np.float32), gguf.GGMLQuantizationType.F32
        else:
            data, t = gguf_encode(x, qtype)
        w.add_tensor(name, data, raw_dtype=t)
        types[name] = t.name
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def layer_names(n, own):
    """[(HF key, GGUF key)] of `n` decoder layers: the attention and gated feed-forward every
    family shares, QK-norm, and `own` [(HF suffix, GGUF suffix)] (its norms)."""
    names = [("model.embed_tokens.weight", "token_embd.weight"), ("model.norm.weight", "output_norm.weight")]
    shared = [("self_attn.q_proj.weight", "attn_q.weight"), ("self_attn.k_proj.weight", "attn_k.weight"),
              ("self_attn.v_proj.weight", "attn_v.weight"), ("self_attn.o_proj.weight", "attn_output.weight"),
              ("self_attn.q_norm.weight", "attn_q_norm.weight"), ("self_attn.k_norm.weight", "attn_k_norm.weight"),
              ("mlp.gate_proj.weight", "ffn_gate.weight"), ("mlp.up_proj.weight", "ffn_up.weight"),
              ("mlp.down_proj.weight", "ffn_down.weight")]
    for i in range(n):
        names += [(f"model.layers.{i}.{hf}", f"blk.{i}.{g}") for hf, g in shared + own]
    return names


@torch.no_grad()
def tiny_family_ggufs(qtypes=None):
    """`--only family-gguf`: a tiny random Gemma 3 (six layers, five local with a window of 5 and
    θ 10,000, one global with θ 1,000,000; tests/fixtures/gguf/tokenizer-gemma.gguf's SentencePiece
    vocabulary) and Qwen3 (QK-norm, tied, tiny-llama's byte-level BPE as `qwen2`), each written in
    every FAMILY_GGUF_TYPES type as convert_hf_to_gguf.py and llama-quantize write them, and HF's
    reference from each file alone (transformers dequantizes it and rebuilds its config and
    tokenizer): tests/fixtures/models/tiny-{gemma3,qwen3}-gguf/, golden {gemma3,qwen3}_gguf_<type>
    and, from the Q4_K files, a greedy generation."""
    import gguf
    from transformers import (AutoModelForCausalLM, AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig,
                              Qwen3Config, Qwen3ForCausalLM)
    sp = gguf.GGUFReader(os.path.join(ROOT, "tests", "fixtures", "gguf", "tokenizer-gemma.gguf"))
    field = lambda k: sp.fields[k].contents()

    def gemma_tokenizer(w):
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(field("tokenizer.ggml.tokens"))
        w.add_token_scores(field("tokenizer.ggml.scores"))
        w.add_token_types(field("tokenizer.ggml.token_type"))
        for k, add in [("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id),
                       ("unknown_token_id", w.add_unk_token_id), ("padding_token_id", w.add_pad_token_id)]:
            add(field(f"tokenizer.ggml.{k}"))
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)

    spec = json.load(open(os.path.join(MODELS, "tiny-llama", "tokenizer.json")))
    vocab = spec["model"]["vocab"]
    bpe_tokens = [None] * len(vocab)
    for t, i in vocab.items():
        bpe_tokens[i] = t
    special = {a["content"] for a in spec["added_tokens"] if a["special"]}

    def qwen_tokenizer(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(bpe_tokens)
        w.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in bpe_tokens])
        w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_pad_token_id(2)
        w.add_add_bos_token(False)
        w.add_chat_template(CHATML_TEMPLATE)

    n_gemma = len(field("tokenizer.ggml.tokens"))
    torch.manual_seed(61)
    gemma = Gemma3ForCausalLM(Gemma3TextConfig(
        vocab_size=n_gemma, hidden_size=256, intermediate_size=256, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, max_position_embeddings=64, rms_norm_eps=1e-6, sliding_window=V5_WINDOW,
        query_pre_attn_scalar=256, initializer_range=0.05, pad_token_id=0, bos_token_id=2, eos_token_id=1,
        rope_parameters=dict(sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                             full_attention=dict(rope_type="default", rope_theta=1000000.0)),
        attn_implementation="eager")).eval()
    spread_1d(gemma, 0.0)
    round_to(gemma, torch.float16)
    torch.manual_seed(62)
    qwen = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(vocab), hidden_size=256, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=128, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=True,
        initializer_range=0.05, pad_token_id=2, bos_token_id=1, eos_token_id=2,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0), attn_implementation="eager")).eval()
    spread_1d(qwen, 0.0)
    round_to(qwen, torch.float16)
    families = [
        ("gemma3", gemma, gemma_tokenizer, layer_names(6, [
            ("input_layernorm.weight", "attn_norm.weight"), ("post_attention_layernorm.weight", "post_attention_norm.weight"),
            ("pre_feedforward_layernorm.weight", "ffn_norm.weight"), ("post_feedforward_layernorm.weight", "post_ffw_norm.weight")]),
         1.0, lambda w: (w.add_rope_freq_base(1000000.0), w.add_sliding_window(V5_WINDOW)), "Gemma3ForCausalLM"),
        ("qwen3", qwen, qwen_tokenizer, layer_names(2, [
            ("input_layernorm.weight", "attn_norm.weight"), ("post_attention_layernorm.weight", "ffn_norm.weight")]),
         0.0, lambda w: w.add_rope_freq_base(1000000.0), "Qwen3ForCausalLM"),
    ]
    for family, model, tokenizer, names, shift, extra, cls in families:
        d = os.path.join(MODELS, f"tiny-{family}-gguf")
        os.makedirs(d, exist_ok=True)
        # first the file in F16, the model's own precision: HF reads back the very model
        check = os.path.join(d, "check-F16.gguf")
        write_family_gguf(check, family, model, tokenizer, names, "F16", shift, extra)
        again = AutoModelForCausalLM.from_pretrained(d, gguf_file="check-F16.gguf", attn_implementation="eager",
                                                     dtype=torch.float32).eval()
        probe = torch.tensor([HfTokens(AutoTokenizer.from_pretrained(d, gguf_file="check-F16.gguf")).encode(FAMILY_GGUF_TEXT).ids])
        diff = float((again(probe).logits - model(probe).logits).abs().max())
        os.remove(check)
        assert diff < 1e-4, f"{family}: the F16 GGUF does not give the model's logits ({diff})"
        for qtype in qtypes or FAMILY_GGUF_TYPES:
            name = f"tiny-{family}-{qtype}.gguf"
            types = write_family_gguf(os.path.join(d, name), family, model, tokenizer, names, qtype, shift, extra)
            tok = HfTokens(AutoTokenizer.from_pretrained(d, gguf_file=name))
            ids = tok.encode(FAMILY_GGUF_TEXT).ids
            gm = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, attn_implementation="eager",
                                                      dtype=torch.float32).eval()
            c = gm.config
            assert type(gm).__name__ == cls and c.head_dim == model.config.head_dim and c.tie_word_embeddings, \
                (type(gm).__name__, c.head_dim, c.tie_word_embeddings)
            if family == "gemma3":
                assert c.layer_types == ["sliding_attention"] * 5 + ["full_attention"] and c.sliding_window == V5_WINDOW, c
                assert c.query_pre_attn_scalar == model.config.query_pre_attn_scalar, c.query_pre_attn_scalar
            probe = torch.tensor([ids])
            diff = float((gm(probe).logits - model(probe).logits).abs().max())
            print(f"  {name}: {os.path.getsize(os.path.join(d, name))} bytes, {len(ids)} tokens, logits differ from "
                  f"the f16 model by {diff:.3g}; types {sorted(set(types.values()))}")
            meta = dict(gguf_file=f"tiny-{family}-gguf/{name}", gguf_type=qtype, gguf_tokenizer_ids=[ids],
                        tensor_types=types)
            probs = lambda out: dict(next_token_probs=F.softmax(out.logits, dim=-1))
            att, valid = family_case(f"{family}_gguf_{qtype}", f"tiny-{family}-gguf", c.model_type,
                                     dict(texts=[FAMILY_GGUF_TEXT], mask="causal"), tok, gm, c.pad_token_id, probs,
                                     extra=meta)
            check_causal(att, valid)
            if qtype == "Q4_K":
                prompt = "time flies like"
                generate_case(f"{family}_gguf_generate", f"tiny-{family}-gguf", c.model_type, tok, gm, prompt,
                              extra=dict(meta, gguf_tokenizer_ids=[tok.encode(prompt).ids]))


SMOLLM2_PROMPTS = ["The capital of France is", "Attention lets every word look at the others"]


def load_smollm2():
    """SmolLM2-135M-Instruct's Q4_1 GGUF under HF: (its GGUF tokenizer, the model in f32 with eager
    attention, the file's name)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if not os.path.exists(SMOLLM2_GGUF):
        raise SystemExit(f"{SMOLLM2_GGUF} is missing: run scripts/setup.sh")
    d, name = os.path.split(SMOLLM2_GGUF)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    return tok, model, name


@torch.no_grad()
def smollm2():
    """SmolLM2-135M-Instruct's Q4_1 GGUF under HF (its dequantized weights, its GGUF tokenizer):
    for each prompt alone (the last one the chat template's), the ids, every layer's attention
    (f32, (L, H, T, T)), the top-10 next-token ids and probabilities per position; 16 greedy
    tokens after the chat prompt. No digits: the GGUF's pre-tokenizer `smollm` splits digits one by
    one, which transformers' GGUF tokenizer does not do."""
    tok, model, name = load_smollm2()
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is attention?"}]
    texts = SMOLLM2_PROMPTS + [tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)]
    items, tensors = [], {}
    for i, text in enumerate(texts):
        ids = tok(text).input_ids
        x = torch.tensor([ids])
        out = model(input_ids=x, output_attentions=True)
        att = torch.stack(out.attentions, dim=1)[0]  # (L, H, T, T)
        check_causal(att[None], torch.ones_like(x))
        top = F.softmax(out.logits[0], dim=-1).topk(10, dim=-1)
        tensors[f"attention_{i}"] = att
        tensors[f"top10_probs_{i}"] = top.values
        item = dict(text=text, token_ids=ids, tokens=tok.convert_ids_to_tokens(ids), top10_ids=top.indices.tolist())
        if i == len(texts) - 1:
            item["chat"] = chat
            gen = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False, num_beams=1,
                                 max_new_tokens=16)
            item["output_ids"] = gen[0, len(ids):].tolist()
            item["output_text"] = tok.decode(item["output_ids"])
        items.append(item)
    cfg = model.config
    meta = dict(model="SmolLM2-135M-Instruct", gguf_file="assets/models/SmolLM2-135M-Instruct/" + name,
                model_type="llama", mask="causal", max_new_tokens=16, eos_token_id=cfg.eos_token_id,
                config=dict(num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
                            num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                            hidden_size=cfg.hidden_size, vocab_size=cfg.vocab_size),
                items=items)
    with open(os.path.join(GOLDEN, "smollm2_prompts.json"), "w") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(GOLDEN, "smollm2_prompts.safetensors"))
    print("smollm2_prompts: " + "; ".join(f"{len(it['token_ids'])} tokens" for it in items) +
          f"; {items[-1]['output_text']!r}")


GEMMA3_GGUF = os.path.join(ROOT, "assets", "models", "gemma-3-270m", "gemma-3-270m-q4_k_m.gguf")
GEMMA3_PROMPTS = ["The capital of France is", "Attention lets every word look at the others"]


def gemma3_long_text():
    """A text of about 650 Gemma 3 tokens, past the 512-token window of its local layers:
    sentences that repeat their words in a shifting order, so that a head copying from earlier
    has something to find on either side of the window's edge."""
    adjectives = ["quiet", "red", "ancient", "small", "bright", "heavy", "curious"]
    nouns = ["fox", "river", "lantern", "teacher", "engine", "garden", "letter", "mountain", "violin", "harbor",
             "clock"]
    verbs = ["watches", "follows", "remembers", "carries", "answers"]
    places = ["old bridge", "market square", "northern shore", "library steps"]
    return " ".join(f"In scene {i}, the {adjectives[i % 7]} {nouns[i % 11]} {verbs[i % 5]} the "
                    f"{nouns[(3 * i + 1) % 11]} near the {places[i % 4]}." for i in range(40))


@torch.no_grad()
def gemma3_270m():
    """Gemma 3 270M's Q4_K_M GGUF under HF (its dequantized weights, its GGUF tokenizer, saved
    once beside the file: building it takes HF a while): for each prompt alone, the ids; for the
    short ones every layer's attention (f32, (L, H, T, T)) and the top-10 next-token ids and
    probabilities at every position; for the long one (past the local layers' 512-token window)
    the same at a few query positions on either side of the window's edge (`rows`), the whole
    (L, H, T, T) being 100 MB; 16 greedy tokens after the first prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if not os.path.exists(GEMMA3_GGUF):
        raise SystemExit(f"{GEMMA3_GGUF} is missing: run scripts/setup.sh")
    d, name = os.path.split(GEMMA3_GGUF)
    saved = os.path.join(d, "hf-tokenizer")
    if not os.path.exists(os.path.join(saved, "tokenizer.json")):
        AutoTokenizer.from_pretrained(d, gguf_file=name).save_pretrained(saved)
    tok = AutoTokenizer.from_pretrained(saved)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    cfg = model.config
    window = cfg.sliding_window
    texts = GEMMA3_PROMPTS + [gemma3_long_text()]
    items, tensors = [], {}
    for i, text in enumerate(texts):
        ids = tok(text).input_ids
        x = torch.tensor([ids])
        out = model(input_ids=x, output_attentions=True)
        att = torch.stack(out.attentions, dim=1)[0]  # (L, H, T, T)
        check_causal(att[None], torch.ones_like(x))
        n = len(ids)
        rows = list(range(n)) if n <= 64 else sorted({0, window // 2, window - 1, window, window + 1, n - 2, n - 1})
        if n > 64:
            assert n > window + 64, f"the long text has {n} tokens, not past the window of {window}"
            # the window at work: a local layer gives no key window or more back any weight
            local = [l for l, t in enumerate(cfg.layer_types) if t == "sliding_attention"]
            assert att[local, :, n - 1, : n - window].abs().max() == 0
        top = F.softmax(out.logits[0, rows], dim=-1).topk(10, dim=-1)
        tensors[f"attention_{i}"] = att[:, :, rows, :].contiguous()  # (L, H, R, T)
        tensors[f"top10_probs_{i}"] = top.values.contiguous()
        item = dict(text=text, token_ids=ids, rows=rows, top10_ids=top.indices.tolist())
        if i == 0:
            gen = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False, num_beams=1,
                                 max_new_tokens=16)
            item["output_ids"] = gen[0, n:].tolist()
            item["output_text"] = tok.decode(item["output_ids"])
        items.append(item)
    meta = dict(model="gemma-3-270m Q4_K_M", gguf_file="assets/models/gemma-3-270m/" + name, model_type="gemma3_text",
                mask="causal", max_new_tokens=16, eos_token_id=cfg.eos_token_id, sliding_window=window,
                layer_types=cfg.layer_types,
                config=dict(num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
                            num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                            hidden_size=cfg.hidden_size, vocab_size=cfg.vocab_size,
                            query_pre_attn_scalar=cfg.query_pre_attn_scalar),
                items=items)
    with open(os.path.join(GOLDEN, "gemma3_270m_prompts.json"), "w") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
    save_file(tensors, os.path.join(GOLDEN, "gemma3_270m_prompts.safetensors"))
    print("gemma3_270m_prompts: " + "; ".join(f"{len(it['token_ids'])} tokens" for it in items) +
          f"; {items[0]['output_text']!r}")


# What a modern LLM does differently (issue 31), on tests/fixtures/models/tiny-llama as it is on
# disk: layer 1 from the inside through hooks (the RMSNorms' outputs; Q and K as projected and as
# HF's own apply_rotary_pos_emb turned them, recorded from its call; the SwiGLU's gate, up and
# act, what down_proj reads), the model with apply_rotary_pos_emb returning Q and K unturned, and
# heads knocked out by zeroing their slices before o_proj (Llama has no head_mask): a whole
# key/value group of layer 0 (heads 0 and 1 read key/value head 0) and head 2 of layer 1.
LLAMA_INSIDE_TEXT = "time flies like an arrow and fruit flies like a banana"
LLAMA_INSIDE_LAYER = 1
LLAMA_KNOCKOUT = [[0, 0], [0, 1], [1, 2]]


@torch.no_grad()
def llama_inside():
    from transformers import LlamaForCausalLM
    from transformers.models.llama import modeling_llama
    d = os.path.join(MODELS, "tiny-llama")
    model = LlamaForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    enc = tok.encode(LLAMA_INSIDE_TEXT)
    ids = torch.tensor([enc.ids])
    types = torch.zeros_like(ids)
    spec = dict(texts=[LLAMA_INSIDE_TEXT], mask="causal")
    head_dim = model.config.head_dim

    def run():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
        att = torch.stack(out.attentions, dim=1)  # (1, L, H, T, T)
        check_causal(att, torch.ones_like(ids))
        return dict(attention=att, next_token_probs=F.softmax(out.logits, dim=-1))

    # llama_trace: the plain pass, and layer 1's values
    layer, got, hooks = model.model.layers[LLAMA_INSIDE_LAYER], {}, []
    out = lambda key: (lambda _m, _a, o: got.__setitem__(key, o[0] if isinstance(o, tuple) else o))
    into = lambda key: (lambda _m, args, kwargs: got.__setitem__(key, args[0] if args else kwargs["hidden_states"]))
    hooks += [layer.register_forward_pre_hook(into("input"), with_kwargs=True),
              layer.input_layernorm.register_forward_hook(out("attn_norm")),
              layer.self_attn.q_proj.register_forward_hook(out("q")),
              layer.self_attn.k_proj.register_forward_hook(out("k")),
              layer.self_attn.v_proj.register_forward_hook(out("v")),
              layer.self_attn.o_proj.register_forward_pre_hook(into("context"), with_kwargs=True),
              layer.post_attention_layernorm.register_forward_pre_hook(into("attention_output"), with_kwargs=True),
              layer.post_attention_layernorm.register_forward_hook(out("ffn_norm")),
              layer.mlp.gate_proj.register_forward_hook(out("gate")),
              layer.mlp.up_proj.register_forward_hook(out("up")),
              layer.mlp.down_proj.register_forward_pre_hook(into("act"), with_kwargs=True),
              layer.register_forward_hook(out("output"))]
    rotations, rotate = [], modeling_llama.apply_rotary_pos_emb

    def recording(q, k, cos, sin, *a, **kw):
        turned = rotate(q, k, cos, sin, *a, **kw)
        rotations.append(turned)
        return turned
    modeling_llama.apply_rotary_pos_emb = recording
    try:
        tensors = run()
    finally:
        modeling_llama.apply_rotary_pos_emb = rotate
        for hk in hooks:
            hk.remove()
    q_rope, k_rope = rotations[LLAMA_INSIDE_LAYER]  # (1, H, T, d), (1, H_kv, T, d)
    # they are the hooked projections turned: HF split them into heads before turning them
    split = lambda x: x.view(1, x.shape[1], -1, head_dim).transpose(1, 2)
    cos, sin = model.model.rotary_emb(got["q"], torch.arange(ids.shape[1])[None])
    again = rotate(split(got["q"]), split(got["k"]), cos, sin)
    assert (again[0] - q_rope).abs().max() < 1e-6 and (again[1] - k_rope).abs().max() < 1e-6
    p = f"layer{LLAMA_INSIDE_LAYER}_"
    tensors.update({p + k: v for k, v in got.items()})
    tensors.update({p + "q_rope": q_rope, p + "k_rope": k_rope})
    write_case("llama_trace", "tiny-llama", spec, [enc], ids, types, tensors,
               extra=dict(model_type="llama", layer_trace=[LLAMA_INSIDE_LAYER]))

    # llama_norope: the rotation left out in every layer
    modeling_llama.apply_rotary_pos_emb = lambda q, k, cos, sin, *a, **kw: (q, k)
    try:
        plain = run()
    finally:
        modeling_llama.apply_rotary_pos_emb = rotate
    change = (plain["attention"] - tensors["attention"]).abs().max()
    print(f"  llama_norope: the attention moves by up to {change:.3f} without the rotation")
    write_case("llama_norope", "tiny-llama", spec, [enc], ids, types, plain,
               extra=dict(model_type="llama", no_rope=True))

    # llama_knockout: the heads' slices of the context zeroed before o_proj
    hooks = []
    for n, h in LLAMA_KNOCKOUT:
        def zero(_m, args, h=h):
            ctx = args[0].clone()
            ctx[..., h * head_dim:(h + 1) * head_dim] = 0
            return (ctx,)
        hooks.append(model.model.layers[n].self_attn.o_proj.register_forward_pre_hook(zero))
    try:
        knocked = run()
    finally:
        for hk in hooks:
            hk.remove()
    change = (knocked["next_token_probs"] - tensors["next_token_probs"]).abs().max()
    print(f"  llama_knockout: the next-token probabilities move by up to {change:.3f}")
    write_case("llama_knockout", "tiny-llama", spec, [enc], ids, types, knocked,
               extra=dict(model_type="llama", head_mask=LLAMA_KNOCKOUT))


# Checkpoints as transformers 5 saves them (issue 48): every family's folder written by
# `save_pretrained` (config.json with transformers 5's keys: `rope_parameters` and no top-level
# `rope_theta`, `layer_types`, `dtype`; its weights under the names it saves; a chat template as
# chat_template.jinja), and a Llama for each `rope_type` small real models ship with. Their texts
# are long enough for each rotation to matter (a scaled frequency turns differently from the
# second position on).
V5_SPECIALS = ["<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"]  # ids 0-4
# A Gemma / Llama 3-style template, which writes the BOS token itself
V5_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
    "{{ message['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
V5_CHAT = [{"role": "user", "content": "time flies like an arrow"}]
V5_TEXTS = ["time flies like an arrow and fruit flies like a banana", "the cat sat", "where does the model look"]
V5_SMALL = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=64, initializer_range=0.3,
                rms_norm_eps=1e-5, pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="eager")
V5_WINDOW = 5  # Mistral's and Qwen2's sliding window: a few tokens, so that every text crosses it
V5_ROPES = {
    "linear": dict(rope_type="linear", factor=4.0),
    "llama3": dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=16),
    "yarn": dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=16),
}


def v5_tokenizer(d, bos, chat):
    """The byte-level BPE on CORPUS with V5_SPECIALS, written by transformers 5's own
    save_pretrained: tokenizer.json (a BOS before every text where `bos`), tokenizer_config.json
    and, where `chat`, chat_template.jinja. Returns the tokenizers library's tokenizer."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    tok = byte_level_bpe(V5_SPECIALS)
    byte_level = processors.ByteLevel(trim_offsets=False)
    tok.post_processor = processors.Sequence([byte_level, processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", 1)])]) if bos else byte_level
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    hf = PreTrainedTokenizerFast(tokenizer_file=path, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")
    if chat:
        hf.chat_template = V5_CHAT_TEMPLATE
    hf.save_pretrained(d)
    assert os.path.exists(os.path.join(d, "chat_template.jinja")) == chat
    return Tokenizer.from_file(path)


def v5_saved(d, model, model_class):
    """`model` saved by transformers 5 into `d` and loaded back in f32, eager, checked to be it."""
    model.save_pretrained(d)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))  # attnscope reads the config's ids; not needed
    config = json.load(open(os.path.join(d, "config.json")))
    assert "rope_theta" not in config and "rope_scaling" not in config, "transformers 5 wrote the old form"
    again = model_class.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    return again


def v5_decoder(name, model_class, cfg, seed, dtype, bias_std=0.0, bos=False, texts=V5_TEXTS):
    """A decoder-only model of `cfg` (seeded `seed`, weights rounded to and saved in `dtype`) in
    tests/fixtures/models/<name>; its padded batch case of `texts` and a greedy generation after
    a chat prompt, as transformers' apply_chat_template(…, tokenize=True) tokenises it."""
    d = os.path.join(MODELS, name)
    shutil.rmtree(d, ignore_errors=True)
    tok = v5_tokenizer(d, bos, True)
    torch.manual_seed(seed)
    cfg.vocab_size = tok.get_vocab_size()
    model = model_class(cfg).eval()
    spread_1d(model, bias_std)
    round_to(model, dtype)
    again = v5_saved(d, copy.deepcopy(model).to(dtype), model_class)  # (its rotary buffer kept in f32)
    probe = torch.tensor([tok.encode("time flies like an arrow").ids])
    assert (again(probe).logits - model(probe).logits).abs().max() < 1e-4, "the saved file does not load back"
    case = name.replace("-", "_")
    model_type = cfg.model_type
    padded_case(case, name, model_type, texts, tok, again, cfg.pad_token_id)
    from transformers import AutoTokenizer
    hf_tok = AutoTokenizer.from_pretrained(d)
    prompt = hf_tok.apply_chat_template(V5_CHAT, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    text = hf_tok.apply_chat_template(V5_CHAT, add_generation_prompt=True, tokenize=False)
    if bos:
        assert prompt.count(1) == 1 and hf_tok(text).input_ids.count(1) == 2, "one BOS from the template, two if added again"
    v5_generate(case + "_generate", name, model_type, tok, again, prompt, text)
    return d, again, tok


@torch.no_grad()
def v5_generate(name, model_dir, model_type, tok, model, prompt_ids, text, max_new_tokens=8):
    """generate_case's greedy generation from `prompt_ids` (the chat template's rendering `text`,
    tokenised as apply_chat_template does)."""
    ids = torch.tensor([prompt_ids])
    gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, num_beams=1,
                         max_new_tokens=max_new_tokens, output_scores=True, return_dict_in_generate=True)
    output_ids = gen.sequences[0, ids.shape[1]:].tolist()
    seq = torch.tensor([prompt_ids + output_ids[:-1]])
    out = model(input_ids=seq, attention_mask=torch.ones_like(seq), output_attentions=True)
    att = torch.stack(out.attentions, dim=1)
    check_causal(att, torch.ones_like(seq))
    probs = F.softmax(out.logits, dim=-1)
    assert probs[0, len(prompt_ids) - 1:].argmax(-1).tolist() == output_ids, "the forward pass disagrees with generate"

    class Enc:
        tokens = [tok.id_to_token(t) for t in seq[0].tolist()]
    write_case(name, model_dir, dict(texts=[text], mask="causal"), [Enc()], seq, torch.zeros_like(seq),
               dict(attention=att, next_token_probs=probs),
               extra=dict(model_type=model_type, prompt_ids=prompt_ids, output_ids=output_ids,
                          output_tokens=[tok.id_to_token(t) for t in output_ids], max_new_tokens=max_new_tokens,
                          eos_token_id=model.config.eos_token_id, step_top5_ids=top_k_ids(gen.scores, 5),
                          chat=V5_CHAT, add_generation_prompt=True))


@torch.no_grad()
def v5_no_qk_norm():
    """`--only v5-ablations`: QK-norm left out (every layer's q_norm and k_norm an identity) of
    the saved v5-qwen3 and v5-gemma3, their padded batches as attnscope's `--no-qk-norm` must give
    them (the folders as they are on disk: run after `--only v5`)."""
    from transformers import Gemma3ForCausalLM, Qwen3ForCausalLM
    for name, model_class, texts in [("v5-qwen3", Qwen3ForCausalLM, V5_TEXTS), ("v5-gemma3", Gemma3ForCausalLM, V5_TEXTS[:1])]:
        d = os.path.join(MODELS, name)
        model = model_class.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        probe = torch.tensor([tok.encode(texts[0]).ids])
        normed = model(probe, output_attentions=True).attentions
        for layer in model.model.layers:
            layer.self_attn.q_norm = torch.nn.Identity()
            layer.self_attn.k_norm = torch.nn.Identity()
        plain = model(probe, output_attentions=True).attentions
        change = max((a - b).abs().max().item() for a, b in zip(normed, plain))
        print(f"  {name}: the attention moves by up to {change:.3f} without QK-norm")
        assert change > 1e-2, "QK-norm left out changes nothing: the case could not fail"
        case = name.replace("-", "_") + "_noqknorm"
        probs = lambda out: dict(next_token_probs=F.softmax(out.logits, dim=-1))
        att, valid = family_case(case, name, model.config.model_type, dict(texts=texts, mask="causal"), tok, model,
                                 model.config.pad_token_id, probs, extra=dict(no_qk_norm=True))
        check_causal(att, valid)


def v5_old_form(d, model_class, probe):
    """config.json of `d` written in the form before transformers 5 (top-level `rope_theta`,
    `rope_scaling` with `type`), checked to give transformers 5 the same model: attnscope's test
    rewrites it so too and must give the same numbers."""
    spec = json.load(open(os.path.join(d, "config.json")))
    rope = dict(spec.pop("rope_parameters"))
    old = dict(spec, rope_theta=rope.pop("rope_theta"))
    kind = rope.pop("rope_type")
    old["rope_scaling"] = dict(type=kind, **rope) if kind != "default" else None
    tmp = d + "-old-form"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(d, tmp)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(old, f, indent=2)
    a = model_class.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    b = model_class.from_pretrained(tmp, attn_implementation="eager", dtype=torch.float32).eval()
    params = lambda m: {k: v for k, v in m.config.rope_parameters.items() if k != "type"}  # kept beside rope_type
    assert params(a) == params(b), (a.config.rope_parameters, b.config.rope_parameters)
    assert torch.equal(a(probe).logits, b(probe).logits)
    shutil.rmtree(tmp)


@torch.no_grad()
def v5_softcap():
    """`--only v5-softcap` (and part of `--only v5`): tests/fixtures/models/v5-gemma3-softcap, a
    Gemma 3 with its logits soft-capped, cap·tanh(z/cap) (`final_logit_softcapping`), the cap low
    enough that tanh bends the largest logits by more than a tenth; and Gemma 2's
    `attn_logit_softcapping` set, which HF's Gemma3Attention leaves unapplied."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    _, model, tok = v5_decoder("v5-gemma3-softcap", Gemma3ForCausalLM, Gemma3TextConfig(**dict(
        V5_SMALL, num_hidden_layers=2, query_pre_attn_scalar=24, sliding_window=V5_WINDOW,
        final_logit_softcapping=2.0, attn_logit_softcapping=1.5,
        rope_parameters=dict(sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                             full_attention=dict(rope_type="default", rope_theta=1000000.0)))),
        53, torch.float32, bos=True, texts=V5_TEXTS[:1])
    ids = torch.tensor([tok.encode(V5_TEXTS[0]).ids])
    free = copy.deepcopy(model)
    free.config.final_logit_softcapping = free.config.attn_logit_softcapping = None
    (capped, a), (logits, b) = ((out.logits, torch.stack(out.attentions))
                                for out in (m(ids, output_attentions=True) for m in (model, free)))
    assert torch.equal(a, b), "HF's Gemma 3 now applies attn_logit_softcapping: attnscope must too"
    assert torch.allclose(capped, 2.0 * torch.tanh(logits / 2.0), atol=1e-6)
    assert (capped - logits).abs().max() > 0.1 * logits.abs().max(), "the cap does not bend the logits"


@torch.no_grad()
def transformers5():
    from transformers import (BertConfig, BertModel, DistilBertConfig, DistilBertModel, GPT2Config, GPT2LMHeadModel,
                              LlamaConfig, LlamaForCausalLM, MarianMTModel, MistralConfig, MistralForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM, RobertaConfig, RobertaModel)
    small = V5_SMALL
    # Llama in f32 with θ = 500,000 and a BOS-writing chat template (Llama 3's and Gemma's way)
    d, _, tok = v5_decoder("v5-llama", LlamaForCausalLM, LlamaConfig(
        rope_parameters=dict(rope_type="default", rope_theta=500000.0), tie_word_embeddings=False, **small),
        40, torch.float32, bos=True)
    # one Llama for each rope_type, in bf16 and f32
    for i, (kind, rope) in enumerate(V5_ROPES.items()):
        name = f"v5-llama-{kind}"
        v5_decoder(name, LlamaForCausalLM, LlamaConfig(
            rope_parameters=dict(rope_theta=10000.0, **rope), tie_word_embeddings=False, **small),
            41 + i, torch.bfloat16 if i % 2 == 0 else torch.float32)
        v5_old_form(os.path.join(MODELS, name), LlamaForCausalLM, torch.tensor([tok.encode(V5_TEXTS[0]).ids]))
    # Qwen2 in bf16: biases, a tied head, a window of 5 on its second layer (layer_types), and
    # Mistral's over every layer: each crossed by the texts. One text a batch: a padded query row
    # past a short text's end would see no key inside its window, and HF's eager attention
    # spreads such a row over every key where attnscope's gives it none
    one = V5_TEXTS[:1]
    v5_decoder("v5-qwen2", Qwen2ForCausalLM, Qwen2Config(
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0), tie_word_embeddings=True,
        use_sliding_window=True, sliding_window=V5_WINDOW, max_window_layers=1, **small), 44, torch.bfloat16,
        bias_std=0.2, texts=one)
    assert json.load(open(os.path.join(MODELS, "v5-qwen2", "config.json")))["layer_types"] == ["full_attention", "sliding_attention"]
    v5_decoder("v5-mistral", MistralForCausalLM, MistralConfig(
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0), sliding_window=V5_WINDOW, **small),
        45, torch.float32, texts=one)
    # Qwen3: QK-norm (each query and key head through its own RMSNorm before the rotation), in bf16
    from transformers import Qwen3Config, Qwen3ForCausalLM
    v5_decoder("v5-qwen3", Qwen3ForCausalLM, Qwen3Config(
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0), tie_word_embeddings=True, **small),
        51, torch.bfloat16)
    # Gemma 3: five local layers (a window of 5, θ 10,000) to each global one (θ 1,000,000),
    # QK-norm, a norm before and after each sub-layer, scores scaled by query_pre_attn_scalar^-½
    # (24, not head_dim 16), the embeddings by √D, a BOS-writing chat template
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    v5_decoder("v5-gemma3", Gemma3ForCausalLM, Gemma3TextConfig(**dict(
        small, num_hidden_layers=6, query_pre_attn_scalar=24, sliding_window=V5_WINDOW,
        rope_parameters=dict(sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                             full_attention=dict(rope_type="default", rope_theta=1000000.0)))),
        52, torch.float32, bos=True, texts=one)
    gemma = json.load(open(os.path.join(MODELS, "v5-gemma3", "config.json")))
    assert gemma["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"], gemma["layer_types"]
    v5_softcap()
    # GPT-2 as transformers 5 saves GPT2LMHeadModel (its `transformer.` prefix, no lm_head)
    d = os.path.join(MODELS, "v5-gpt2")
    shutil.rmtree(d, ignore_errors=True)
    tok = v5_tokenizer(d, False, False)
    torch.manual_seed(46)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=24, n_layer=2, n_head=3,
                                      initializer_range=0.25, bos_token_id=2, eos_token_id=2, pad_token_id=0)).eval()
    spread_1d(gpt2, 0.1)
    again = v5_saved(d, gpt2, GPT2LMHeadModel)
    padded_case("v5_gpt2", "v5-gpt2", "gpt2", V5_TEXTS, tok, again, 0)
    # the encoders: BERT, RoBERTa and DistilBERT as their base models save themselves
    for name, model_class, cfg, seed in [
        ("v5-bert", BertModel, BertConfig(hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                                          intermediate_size=40, max_position_embeddings=64, initializer_range=0.25,
                                          pad_token_id=0), 47),
        ("v5-roberta", RobertaModel, RobertaConfig(hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                                                   intermediate_size=40, max_position_embeddings=66, type_vocab_size=1,
                                                   initializer_range=0.25, pad_token_id=0, bos_token_id=1,
                                                   eos_token_id=2), 48),
        ("v5-distilbert", DistilBertModel, DistilBertConfig(dim=24, n_layers=2, n_heads=3, hidden_dim=40,
                                                            max_position_embeddings=64, initializer_range=0.25,
                                                            pad_token_id=0), 49),
    ]:
        d = os.path.join(MODELS, name)
        shutil.rmtree(d, ignore_errors=True)
        tok = v5_tokenizer(d, True, False)
        cfg.vocab_size = tok.get_vocab_size()
        torch.manual_seed(seed)
        model = (model_class(cfg, add_pooling_layer=False) if model_class is not DistilBertModel else model_class(cfg)).eval()
        spread_1d(model, 0.1)
        again = v5_saved(d, model, model_class)
        case = name.replace("-", "_")
        family_case(case, name, cfg.model_type, dict(texts=V5_TEXTS, mask="padding"), tok, again, 0)
    # Marian, as MarianMTModel saves itself
    d, tok, pad, marian = tiny_marian("v5-marian", 50, torch.float32, False, True, 3.0)
    for f in ("config.json", "model.safetensors"):  # tiny_marian's own, written by hand
        os.remove(os.path.join(d, f))
    marian = v5_saved(d, marian, MarianMTModel)
    marian_case("v5_marian_generate", "v5-marian", tok, marian, pad, MARIAN_SOURCES, max_new_tokens=10)


def llama_family(gguf_types=None):
    src_dir, model, tok = tiny_llama()
    tiny_llama_wide()
    tiny_qwen2()
    tiny_llama_gguf(src_dir, model, tok, gguf_types)
    smollm2()
    llama_inside()


@torch.no_grad()
def llama_gguf_only(gguf_types=None):
    """`--only llama-gguf`: the GGUF files and their cases from tests/fixtures/models/tiny-llama as
    it is on disk (the model `tiny_llama` loads back)."""
    from transformers import LlamaForCausalLM
    d = os.path.join(MODELS, "tiny-llama")
    model = LlamaForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    tiny_llama_gguf(d, model, Tokenizer.from_file(os.path.join(d, "tokenizer.json")), gguf_types)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "assets", "models", "all-MiniLM-L6-v2"))
    groups = ["minilm", "heads", "inside", "tiny", "families", "marian", "dates", "llama", "llama-inside",
              "llama-wide", "llama-gguf", "v5", "v5-softcap", "v5-ablations", "family-gguf", "gemma", "roles", "value-weighted", "logit-attribution", "flow"]
    ap.add_argument("--only", choices=groups, action="append",
                    help="write only these groups of fixtures (default: all)")
    ap.add_argument("--gguf-type", choices=list(GGUF_TYPES), action="append",
                    help="write only these tiny-llama GGUF files and their cases (default: all)")
    args = ap.parse_args()
    only = set(args.only or groups)
    torch.set_num_threads(1)
    if "minilm" in only:
        minilm(args.model)
    if "heads" in only:
        heads(args.model)
    if "roles" in only:
        roles(args.model)
    if "value-weighted" in only:
        value_weighted(args.model)
    if "logit-attribution" in only:
        logit_attribution()
    if "flow" in only:
        flow()
    if "inside" in only:
        inside(args.model)
    if "tiny" in only:
        tok = os.path.join(args.model, "tokenizer.json")
        tiny_bert(tok)
        tiny_preln(tok)
    if "families" in only:
        tiny_roberta()
        tiny_distilbert()
        tiny_gpt2()
        sentencepiece_tokenizers()
    if "marian" in only:
        tiny_marians()
    if "dates" in only:
        dates()
    if "v5" in only:
        transformers5()
    elif "v5-softcap" in only:
        v5_softcap()
    if "v5-ablations" in only:
        v5_no_qk_norm()
    if "family-gguf" in only:
        tiny_family_ggufs()
    if "gemma" in only:
        gemma3_270m()
    if "llama" in only:
        llama_family(args.gguf_type)
    else:
        if "llama-gguf" in only:
            llama_gguf_only(args.gguf_type)
        if "llama-inside" in only:
            llama_inside()
        if "llama-wide" in only:
            tiny_llama_wide()


if __name__ == "__main__":
    main()
