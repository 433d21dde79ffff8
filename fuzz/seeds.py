#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into fuzz/corpus/<target>/seed-* from the committed
tiny checkpoints of every family (tests/fixtures/models/tiny-*) and a few generated cases.
Idempotent."""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILY_MODELS = ("tiny-bert", "tiny-bert-preln", "tiny-roberta", "tiny-distilbert", "tiny-gpt2", "tiny-marian",
                 "tiny-marian-f16")
MODELS = [os.path.join(ROOT, "tests/fixtures/models", m) for m in FAMILY_MODELS]
CORPUS = os.path.join(ROOT, "fuzz/corpus")


def read(model, f):
    with open(os.path.join(model, f), "rb") as h:
        return h.read()


def safetensors(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def seeds():
    configs, weights, tokenizers = [], [], []
    for m in MODELS:
        configs.append(read(m, "config.json"))
        weights.append(read(m, "model.safetensors"))
        tokenizers.append(read(m, "tokenizer.json"))
    base = json.loads(configs[0])
    for edit in ({"hidden_act": "gelu_new"}, {"layer_norm_order": "pre"},
                 {"hidden_size": 1000000000}, {"num_attention_heads": 0},
                 {"max_position_embeddings": 3}, {"pad_token_id": 99}):
        configs.append(json.dumps({**base, **edit}).encode())
    gpt2 = json.loads(configs[FAMILY_MODELS.index("tiny-gpt2")])
    for edit in ({"n_inner": 7}, {"n_head": 5}, {"n_positions": 1000000000}, {"scale_attn_by_inverse_layer_idx": True},
                 {"model_type": "llama"}, {"activation_function": "swish"}):
        configs.append(json.dumps({**gpt2, **edit}).encode())
    distil = json.loads(configs[FAMILY_MODELS.index("tiny-distilbert")])
    for edit in ({"dim": 25}, {"n_layers": 0}, {"hidden_dim": 1 << 40}):
        configs.append(json.dumps({**distil, **edit}).encode())
    marian = json.loads(configs[FAMILY_MODELS.index("tiny-marian")])
    for edit in ({"decoder_layers": 0}, {"decoder_attention_heads": 5}, {"decoder_start_token_id": 1 << 40},
                 {"eos_token_id": 100000}, {"decoder_vocab_size": 7}, {"d_model": 1 << 30}, {"decoder_ffn_dim": 1 << 40},
                 {"activation_function": "tanh"}, {"max_position_embeddings": 1}, {"share_encoder_decoder_embeddings": False}):
        configs.append(json.dumps({**marian, **edit}).encode())
    # configs as transformers 5 writes them: each rope_type, Qwen2's layer_types, and edits of both forms
    for m in ("v5-llama-yarn", "v5-llama-llama3", "v5-llama-linear", "v5-qwen2", "v5-mistral"):
        configs.append(read(os.path.join(ROOT, "tests/fixtures/models", m), "config.json"))
    yarn = json.loads(read(os.path.join(ROOT, "tests/fixtures/models/v5-llama-yarn"), "config.json"))
    rope = yarn["rope_parameters"]
    for edit in ({"rope_parameters": {**rope, "rope_type": "dynamic"}}, {"rope_theta": 7.0},
                 {"rope_scaling": {"type": "yarn", "factor": 2.0}}, {"rope_parameters": {**rope, "beta_fast": 1e300}},
                 {"rope_parameters": {**rope, "factor": 1e-300, "attention_factor": -1}},
                 {"rope_parameters": {**rope, "original_max_position_embeddings": 0, "truncate": False}},
                 {"rope_parameters": {"full_attention": rope, "sliding_attention": {"rope_theta": 1}}},
                 {"rope_parameters": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4}},
                 {"model_type": "qwen2", "layer_types": ["sliding_attention"], "use_sliding_window": True,
                  "sliding_window": 1}):
        configs.append(json.dumps({**yarn, **edit}).encode())
    weights.append(safetensors({"embeddings.word_embeddings.weight":
                                {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16)))
    weights.append(safetensors({"__metadata__": {"format": "pt"}}))
    tok = json.loads(tokenizers[0])
    tok["padding"] = {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None,
                      "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}
    tokenizers.append(json.dumps(tok).encode())
    texts = [b"time flies like an arrow", b"the cat sat on the mat\na dog!\nit was happy",
             b"\xf0\x9f\x98\x80 \xe4\xb8\xad ok\n\xe2\x80\x8b", b"time flies " * 40,
             b"a\nb\nc\nd\ne", b"   \n\t"]
    return {
        "weights": weights,
        "config": configs,
        "tokenizer": tokenizers,
        "model": [struct.pack("<II", len(c), len(t)) + c + t + w
                  for c, t, w in zip(configs[:len(MODELS)], tokenizers, weights[:len(MODELS)])],
        "forward": [bytes([flags]) + t for flags in range(8) for t in texts],
        "gguf": [read(os.path.join(ROOT, "tests/fixtures/gguf"), f)
                 for f in ("blocks.gguf", "tokenizer-gpt2.gguf", "tokenizer-sentencepiece.gguf", "tokenizer-gemma.gguf")]
        # the tiny Gemma 3's and Qwen3's headers (their config keys and vocabularies), cut before
        # the tensors' data: the harness reads them as the first bytes of a longer file
        + [read(os.path.join(ROOT, "tests/fixtures/models", f"tiny-{family}-gguf"), f"tiny-{family}-Q2_K.gguf")[:60000]
           for family in ("gemma3", "qwen3")],
    }


def main():
    targets = sys.argv[1:]
    for target, inputs in seeds().items():
        if targets and target not in targets:
            continue
        d = os.path.join(CORPUS, target)
        os.makedirs(d, exist_ok=True)
        for i, data in enumerate(inputs):
            with open(os.path.join(d, f"seed-{i:02}"), "wb") as h:
                h.write(data)


if __name__ == "__main__":
    main()
