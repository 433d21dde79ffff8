#!/usr/bin/env python3
"""The PyTorch peer of `make bench` for translation: HF transformers' MarianMTModel.generate on
the same checkpoint (greedy, every attention returned, as attnscope keeps them), batch 1.

    python3 bench/torch_translate.py [--model M] [--iters 5] [--threads 1,2]

Prints one JSON object: {"torch": version, "ms": {"<threads>": {"24+24": median ms of encoding
the 24-token source and generating 24 tokens, "step1", "step16", "step64": median ms of those
steps of a 64-token generation (step 1 with the encoder)}}}.
"""
import argparse
import json
import os
import statistics
import time

import torch
from tokenizers import Tokenizer
from transformers import LogitsProcessor, LogitsProcessorList, MarianMTModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = "the cat sat on the mat and time flies by us"  # 24 tokens with </s>, as bench.rs's


class Clock(LogitsProcessor):
    """The time at each step's logits: the differences are the steps' times."""

    def __init__(self):
        self.marks = []

    def __call__(self, input_ids, scores):
        self.marks.append(time.perf_counter())
        return scores


def generate(model, ids, n):
    clock = Clock()
    start = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=1, do_sample=False,
                         max_new_tokens=n, min_new_tokens=n, bad_words_ids=[[model.config.pad_token_id]],
                         output_attentions=True, return_dict_in_generate=True,
                         logits_processor=LogitsProcessorList([clock]))
    total = (time.perf_counter() - start) * 1e3
    assert out.sequences.shape[1] == n + 1, out.sequences.shape
    steps = [(b - a) * 1e3 for a, b in zip([start] + clock.marks[:-1], clock.marks)]
    return total, steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "assets", "models", "opus-mt-en-de-shape-random"))
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    model = MarianMTModel.from_pretrained(args.model, attn_implementation="eager", dtype=torch.float32).eval()
    ids = torch.tensor([Tokenizer.from_file(os.path.join(args.model, "tokenizer.json")).encode(SOURCE).ids])
    assert ids.shape[1] == 24, ids.shape
    out = {"torch": torch.__version__, "ms": {}}
    with torch.inference_mode():
        for threads in [int(x) for x in args.threads.split(",")]:
            torch.set_num_threads(threads)
            generate(model, ids, 24)  # warm-up
            whole = statistics.median(generate(model, ids, 24)[0] for _ in range(args.iters))
            runs = [generate(model, ids, 64)[1] for _ in range(args.iters)]
            row = {"24+24": whole}
            for k in (1, 16, 64):
                row[f"step{k}"] = statistics.median(r[k - 1] for r in runs)
            out["ms"][str(threads)] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
