#!/usr/bin/env python3
"""Exports the default checkpoint to ONNX for the ONNX Runtime Web peer of `make bench`.

    pip install torch transformers onnx onnxscript
    python3 bench/export_onnx.py [--model assets/models/all-MiniLM-L6-v2]

Writes <model>/onnx/model.onnx (git-ignored with the model): HF's BertModel with
attn_implementation="eager", inputs input_ids, attention_mask, token_type_ids (batch 1, any
length), outputs the last hidden state, every layer's hidden states and every layer's attention
probabilities, as the page keeps them. Checked against PyTorch on one sentence before it is kept.
"""
import argparse
import os

import numpy as np
import torch
from transformers import BertModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Traced(torch.nn.Module):
    """The encoder with its hidden states and attentions as plain tensor outputs."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                         output_attentions=True, output_hidden_states=True)
        # (L+1, 1, T, D) and (L, 1, H, T, T)
        return out.last_hidden_state, torch.stack(out.hidden_states), torch.stack(out.attentions)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "assets", "models", "all-MiniLM-L6-v2"))
    args = ap.parse_args()
    model = BertModel.from_pretrained(args.model, attn_implementation="eager").eval()
    net = Traced(model)
    t = 16
    ids = torch.randint(1000, 2000, (1, t))
    mask = torch.ones(1, t, dtype=torch.long)
    types = torch.zeros(1, t, dtype=torch.long)
    out_dir = os.path.join(args.model, "onnx")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.onnx")
    seq = {1: "sequence"}
    torch.onnx.export(
        net, (ids, mask, types), path, dynamo=False, opset_version=17,
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state", "hidden_states", "attentions"],
        dynamic_axes={"input_ids": seq, "attention_mask": seq, "token_type_ids": seq,
                      "last_hidden_state": seq, "hidden_states": {2: "sequence"},
                      "attentions": {3: "sequence", 4: "sequence"}},
    )
    # the exported graph against PyTorch, at another length than the one traced
    try:
        import onnxruntime as ort
    except ImportError:
        print(f"wrote {path} (onnxruntime not installed: not checked)")
        return
    t = 37
    ids = torch.randint(1000, 2000, (1, t))
    feeds = {"input_ids": ids.numpy(), "attention_mask": np.ones((1, t), np.int64), "token_type_ids": np.zeros((1, t), np.int64)}
    got = ort.InferenceSession(path).run(None, feeds)
    fresh = Traced(BertModel.from_pretrained(args.model, attn_implementation="eager").eval())  # export traced `net`
    with torch.no_grad():
        want = fresh(ids, torch.ones(1, t, dtype=torch.long), torch.zeros(1, t, dtype=torch.long))
    worst = max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want))
    assert worst < 1e-4, f"the ONNX graph differs from PyTorch by {worst}"
    print(f"wrote {path}: max |Δ| against PyTorch at {t} tokens {worst:.1e}")


if __name__ == "__main__":
    main()
