#!/usr/bin/env python3
"""Writes the fixtures of the Python package's tests (python/tests/fixtures/; run once, the outputs
are committed):

    pip install torch transformers
    python3 tools/make_given_fixtures.py

Two tiny random models of HF transformers (no download), eager attention, greedy:
  * gpt2_generate.npz: a GPT-2 (2 layers, 2 heads) writing 5 tokens after a 4-token prompt with
    `generate(..., output_attentions=True, return_dict_in_generate=True)`: its per-step
    attentions (`step{t}.layer{l}`, (1, H, n_q, n_k)), and one forward pass over the prompt and
    the tokens written but the last (`full.layer{l}`, (1, H, N, N));
  * bart_generate.npz: a BART (2 + 2 layers, 2 heads) translating a 6-token source: its
    `encoder.layer{l}`, the decoder's per-step self and cross attentions (`dec.step{t}.layer{l}`,
    `cross.step{t}.layer{l}`), and one forward pass of the decoder over the tokens it was fed
    (`full_dec.layer{l}`, `full_cross.layer{l}`).
python/tests/test_records.py assembles the steps (attnscope.assemble_generate) and compares them
with the forward pass: what one causal pass over the same tokens gives.
"""

from pathlib import Path

import numpy as np
import torch
from transformers import BartConfig, BartForConditionalGeneration, GPT2Config, GPT2LMHeadModel

OUT = Path(__file__).resolve().parent.parent / "python" / "tests" / "fixtures"


def arrays(prefix, layers):
    return {f"{prefix}.layer{l}": a.detach().numpy().astype(np.float32) for l, a in enumerate(layers)}


def gpt2():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=2, bos_token_id=63, eos_token_id=63,
        attn_implementation="eager",
    )
    model = GPT2LMHeadModel(config).eval()
    prompt = torch.tensor([[5, 9, 2, 17]])
    with torch.no_grad():
        out = model.generate(
            prompt, max_new_tokens=5, min_new_tokens=5, do_sample=False, output_attentions=True,
            return_dict_in_generate=True, pad_token_id=0, eos_token_id=None,
        )
        fed = out.sequences[:, :-1]
        full = model(fed, output_attentions=True).attentions
    data = {"sequences": out.sequences.numpy()}
    for t, step in enumerate(out.attentions):
        data |= arrays(f"step{t}", step)
    data |= arrays("full", full)
    np.savez_compressed(OUT / "gpt2_generate.npz", **data)


def bart():
    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_bos_token_id=None,
        forced_eos_token_id=None, attn_implementation="eager",
    )
    model = BartForConditionalGeneration(config).eval()
    source = torch.tensor([[0, 7, 11, 13, 19, 2]])
    with torch.no_grad():
        out = model.generate(
            source, max_new_tokens=4, min_new_tokens=4, do_sample=False, num_beams=1, output_attentions=True,
            return_dict_in_generate=True, eos_token_id=None,
        )
        fed = out.sequences[:, :-1]
        full = model(input_ids=source, decoder_input_ids=fed, output_attentions=True)
    data = {"sequences": out.sequences.numpy()}
    data |= arrays("encoder", out.encoder_attentions)
    for t, step in enumerate(out.decoder_attentions):
        data |= arrays(f"dec.step{t}", step)
    for t, step in enumerate(out.cross_attentions):
        data |= arrays(f"cross.step{t}", step)
    data |= arrays("full_dec", full.decoder_attentions)
    data |= arrays("full_cross", full.cross_attentions)
    data |= arrays("full_enc", full.encoder_attentions)
    np.savez_compressed(OUT / "bart_generate.npz", **data)


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    gpt2()
    bart()
    for f in sorted(OUT.glob("*.npz")):
        print(f, f.stat().st_size, "bytes")
