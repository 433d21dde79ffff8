#!/usr/bin/env python3
"""The PyTorch peer of `make bench`: HF transformers' BertModel on the same checkpoint, eager
attention with every attention probability returned (as attnscope keeps them), batch 1.

    python3 bench/torch_bench.py [--model M] [--lengths 16,128,512] [--iters 7] [--threads 1,2]

Prints one JSON object: {"torch": version, "ms": {"<threads>": {"<length>": median ms}}}.
"""
import argparse
import json
import os
import statistics
import time

import torch
from transformers import BertModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "assets", "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--lengths", default="16,128,512")
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    model = BertModel.from_pretrained(args.model, attn_implementation="eager").eval()
    out = {"torch": torch.__version__, "ms": {}}
    for threads in [int(x) for x in args.threads.split(",")]:
        torch.set_num_threads(threads)
        row = {}
        for t in [int(x) for x in args.lengths.split(",")]:
            g = torch.Generator().manual_seed(t)
            ids = torch.randint(1000, 20000, (1, t), generator=g)
            ids[0, 0], ids[0, -1] = 101, 102  # [CLS] … [SEP]
            mask = torch.ones(1, t, dtype=torch.long)
            times = []
            with torch.inference_mode():
                for i in range(args.iters + 2):  # two warm-ups
                    start = time.perf_counter()
                    r = model(input_ids=ids, attention_mask=mask, output_attentions=True)
                    assert len(r.attentions) == model.config.num_hidden_layers
                    if i >= 2:
                        times.append((time.perf_counter() - start) * 1e3)
            row[str(t)] = statistics.median(times)
        out["ms"][str(threads)] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
