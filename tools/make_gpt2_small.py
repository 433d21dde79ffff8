#!/usr/bin/env python3
"""Writes checkpoints of GPT-2 small's shape with random weights, for measuring the page and the
engines at a real size (nothing in them is learned; no weights can be downloaded here):

    python3 tools/make_gpt2_small.py [--out assets/models]

makes `gpt2-small-random/` (F32, 498 MB) and `gpt2-small-random-f16/` (F16, 249 MB): 124 M
parameters in the original `gpt2` files' layout (wte, wpe, h.{0..11}.{ln_1, attn.c_attn,
attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_f; Conv1D weights stored (in, out); the LM head tied
to wte), GPT-2 small's config.json (vocab 50257, 1024 positions, 768 wide, 12 layers of 12 heads),
and the byte-level BPE tokenizer of tests/fixtures/models/tiny-gpt2 (its ids are all below 50257).
Both folders are git-ignored: re-run the script to make them.
"""
import argparse
import json
import os
import shutil

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = dict(
    architectures=["GPT2LMHeadModel"], model_type="gpt2", vocab_size=50257, n_positions=1024, n_ctx=1024,
    n_embd=768, n_layer=12, n_head=12, n_inner=None, activation_function="gelu_new", layer_norm_epsilon=1e-5,
    initializer_range=0.02, bos_token_id=50256, eos_token_id=50256, tie_word_embeddings=True,
)


def weights(dtype, seed=0):
    """GPT-2 small's tensors, N(0, 0.02) as GPT-2 initialises them, LayerNorms at 1 and 0."""
    rng = np.random.default_rng(seed)
    d, v, p, inner = CONFIG["n_embd"], CONFIG["vocab_size"], CONFIG["n_positions"], 4 * CONFIG["n_embd"]
    normal = lambda *shape: (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dtype)
    ones, zeros = (lambda n: np.ones(n, dtype)), (lambda n: np.zeros(n, dtype))
    t = {"wte.weight": normal(v, d), "wpe.weight": normal(p, d), "ln_f.weight": ones(d), "ln_f.bias": zeros(d)}
    for i in range(CONFIG["n_layer"]):
        h = f"h.{i}."
        t.update({
            h + "ln_1.weight": ones(d), h + "ln_1.bias": zeros(d),
            h + "attn.c_attn.weight": normal(d, 3 * d), h + "attn.c_attn.bias": zeros(3 * d),
            h + "attn.c_proj.weight": normal(d, d), h + "attn.c_proj.bias": zeros(d),
            h + "ln_2.weight": ones(d), h + "ln_2.bias": zeros(d),
            h + "mlp.c_fc.weight": normal(d, inner), h + "mlp.c_fc.bias": zeros(inner),
            h + "mlp.c_proj.weight": normal(inner, d), h + "mlp.c_proj.bias": zeros(d),
        })
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "assets", "models"))
    args = ap.parse_args()
    tokenizer = os.path.join(ROOT, "tests", "fixtures", "models", "tiny-gpt2", "tokenizer.json")
    for name, dtype in [("gpt2-small-random", np.float32), ("gpt2-small-random-f16", np.float16)]:
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        t = weights(dtype)
        save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(CONFIG, f, indent=2)
        shutil.copy(tokenizer, os.path.join(d, "tokenizer.json"))
        n = sum(a.size for a in t.values())
        print(f"{d}: {n / 1e6:.1f} M parameters, {os.path.getsize(os.path.join(d, 'model.safetensors')) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
