#!/usr/bin/env python3
"""Writes a checkpoint of Helsinki-NLP/opus-mt-en-de's shape with random weights, for measuring
translation at a real size (nothing in it is learned; no weights can be downloaded here):

    python3 tools/make_opus_shape.py [--out assets/models]

makes `opus-mt-en-de-shape-random/` (F32, ~296 MB, git-ignored): MarianMTModel's layout
(model.shared, 6 encoder and 6 decoder layers of d_model 512, 8 heads, ffn 2048, vocabulary
58101, swish, scale_embedding, final_logits_bias), opus-mt-en-de's config.json, and the
SentencePiece tokenizer of tests/fixtures/models/tiny-marian (its ids are all below 58101).
EOS's logit bias is -1e4, so that a greedy decoding runs every step it is given (the last one
EOS, forced, as the config says).
"""
import argparse
import json
import os
import shutil

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = dict(
    architectures=["MarianMTModel"], model_type="marian", vocab_size=58101, decoder_vocab_size=58101,
    d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
    encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish", max_position_embeddings=512,
    scale_embedding=True, pad_token_id=58100, eos_token_id=0, decoder_start_token_id=58100,
    forced_eos_token_id=0, bos_token_id=0, share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
    static_position_embeddings=True, init_std=0.02, is_encoder_decoder=True,
)


def weights(seed=0):
    rng = np.random.default_rng(seed)
    c = CONFIG
    d, v, f = c["d_model"], c["vocab_size"], c["encoder_ffn_dim"]
    normal = lambda *shape: rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    ones, zeros = (lambda n: np.ones(n, np.float32)), (lambda n: np.zeros(n, np.float32))
    bias = zeros((1, v))
    bias[0, c["eos_token_id"]] = -1e4
    t = {"model.shared.weight": normal(v, d), "final_logits_bias": bias}

    def attention(p):
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            t[f"{p}.{proj}.weight"], t[f"{p}.{proj}.bias"] = normal(d, d), zeros(d)

    def norm(p):
        t[f"{p}.weight"], t[f"{p}.bias"] = ones(d), zeros(d)

    def ffn(p):
        t[f"{p}.fc1.weight"], t[f"{p}.fc1.bias"] = normal(f, d), zeros(f)
        t[f"{p}.fc2.weight"], t[f"{p}.fc2.bias"] = normal(d, f), zeros(d)

    for i in range(c["encoder_layers"]):
        p = f"model.encoder.layers.{i}"
        attention(f"{p}.self_attn"), norm(f"{p}.self_attn_layer_norm"), ffn(p), norm(f"{p}.final_layer_norm")
    for i in range(c["decoder_layers"]):
        p = f"model.decoder.layers.{i}"
        attention(f"{p}.self_attn"), norm(f"{p}.self_attn_layer_norm")
        attention(f"{p}.encoder_attn"), norm(f"{p}.encoder_attn_layer_norm")
        ffn(p), norm(f"{p}.final_layer_norm")
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "assets", "models"))
    args = ap.parse_args()
    d = os.path.join(args.out, "opus-mt-en-de-shape-random")
    os.makedirs(d, exist_ok=True)
    save_file(weights(), os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(CONFIG, fh, indent=1)
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "models", "tiny-marian", "tokenizer.json"),
                os.path.join(d, "tokenizer.json"))
    print(f"{d}: {os.path.getsize(os.path.join(d, 'model.safetensors')) / 2**20:.0f} MB")


if __name__ == "__main__":
    main()
