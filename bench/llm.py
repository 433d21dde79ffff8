#!/usr/bin/env python3
"""`make bench-llm`: the built-in models that write (SmolLM2-135M-Instruct's Q4_1 GGUF and Gemma 3
270M's Q4_K_M GGUF), a 64-token prompt then 64 greedy tokens, on attnscope's CPU engine beside
llama.cpp (llama-cpp-python, on the same file) and PyTorch (HF transformers from the same GGUF,
dequantized to float32, eager attention, with its cache), on 1 and 2 threads: the prompt's pass
in ms and the tokens after it per second (llama-bench's pp and tg). A peer that is not installed
is skipped with a note.

    python3 bench/llm.py [--model GGUF ...] [--iters 3] [--threads 1,2]

Prints a Markdown table a model, then one JSON line of every figure.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGUFS = [os.path.join(ROOT, "assets", "models", "SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf"),
         os.path.join(ROOT, "assets", "models", "gemma-3-270m", "gemma-3-270m-q4_k_m.gguf")]
# attnscope's `bench --prompt-tokens` text (src/bin/attnscope/bench.rs TEXT), repeated
TEXT = "Attention lets every token look at every other token and decide how much of it to take. "
PROMPT, NEW = 64, 64


def attnscope(model, threads, iters):
    exe = os.path.join(ROOT, "target", "release", "attnscope")
    out = subprocess.run([exe, "bench", "--model", model, "--threads", str(threads), "--prompt-tokens", str(PROMPT),
                          "--new-tokens", str(NEW), "--iters", str(iters), "--json"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return r["prefill_ms"], r["decode_tokens_per_s"]


def attnscope_ids(model, text):
    """`text`'s ids as attnscope's tokenizer of `model` reads them (its BOS first where it adds
    one: 64 ids all the same, the timing is the same)."""
    exe = os.path.join(ROOT, "target", "release", "attnscope")
    out = subprocess.run([exe, "attention", "--model", model, "--heads", "0:0", "--", text],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["results"][0]["token_ids"]


def prompt_ids(tokenize):
    ids = tokenize(TEXT * 16)
    assert len(ids) >= PROMPT, len(ids)
    return ids[:PROMPT]


def llama_cpp(model, threads, iters):
    import llama_cpp
    import numpy as np
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=PROMPT + NEW + 8, n_threads=threads, n_threads_batch=threads,
                n_batch=PROMPT, verbose=False, logits_all=False)
    ids = prompt_ids(lambda t: llm.tokenize(t.encode(), add_bos=False))

    def last_logits():
        # the last token's (llm.scores is filled only with logits_all, which costs every row's)
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
    pp, tg = [], []
    for i in range(iters + 1):
        llm.reset()
        start = time.perf_counter()
        llm.eval(ids)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(NEW - 1):
            token = int(last_logits().argmax())
            llm.eval([token])
        decode = time.perf_counter() - start
        if i:  # the first is the warm-up
            pp.append(prefill * 1e3)
            tg.append((NEW - 1) / decode)
    return statistics.median(pp), statistics.median(tg)


def pytorch(model, threads, iters):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(threads)
    d, name = os.path.split(model)
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                             attn_implementation="eager").eval()
    # the ids attnscope reads the text as (HF's own GGUF tokenizer of Gemma 3 takes minutes to
    # build; the tests check the two give the same ids)
    ids = torch.tensor([prompt_ids(lambda t: attnscope_ids(model, t))])
    pp, tg = [], []
    with torch.no_grad():
        for i in range(iters + 1):
            start = time.perf_counter()
            out = m(input_ids=ids, use_cache=True, output_attentions=True)
            prefill = time.perf_counter() - start
            cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            start = time.perf_counter()
            for _ in range(NEW - 1):
                out = m(input_ids=token, past_key_values=cache, use_cache=True, output_attentions=True)
                cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            decode = time.perf_counter() - start
            if i:
                pp.append(prefill * 1e3)
                tg.append((NEW - 1) / decode)
    return statistics.median(pp), statistics.median(tg)


PEERS = {"attnscope": ("attnscope (CPU engine, every attention kept)", attnscope),
         "llama.cpp": ("llama.cpp (llama-cpp-python)", llama_cpp),
         "pytorch": ("PyTorch (HF, float32, eager, every attention)", pytorch)}


def measure(peer, model, threads, iters):
    """One peer on `threads` threads in a process of its own (a peer built for instructions this
    CPU lacks dies alone): (prefill ms, decode tokens/s), or the reason there are none."""
    r = subprocess.run([sys.executable, __file__, "--one", peer, "--model", model, "--threads", str(threads),
                        "--iters", str(iters)], capture_output=True, text=True)
    last = (r.stdout.strip().splitlines() or [""])[-1]
    if r.returncode == 0 and last.startswith("{"):
        got = json.loads(last)
        return (got["prefill_ms"], got["decode_tokens_per_s"]), None
    if r.returncode < 0:
        return None, f"crashed (signal {-r.returncode})"
    why = (r.stderr.strip().splitlines() or ["failed"])[-1]
    return None, "skipped (not installed)" if "ModuleNotFoundError" in why else f"failed: {why}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", help="a GGUF file (default: the built-in ones present)")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--one", choices=PEERS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        pp, tg = PEERS[args.one][1](args.model[0], int(args.threads), args.iters)
        print(json.dumps({"prefill_ms": pp, "decode_tokens_per_s": tg}))
        return
    threads = [int(t) for t in args.threads.split(",")]
    models = args.model or [g for g in GGUFS if os.path.exists(g)]
    figures = {}
    for model in models:
        rows, file = [], os.path.basename(model)
        for peer, (name, _) in PEERS.items():
            cells = []
            for t in threads:
                got, why = measure(peer, model, t, args.iters)
                if got:
                    figures.setdefault(file, {}).setdefault(name, {})[t] = {"prefill_ms": got[0], "decode_tokens_per_s": got[1]}
                    cells.append(f"{got[0]:.0f} ms | {got[1]:.1f}")
                else:
                    cells.append(f"{why} | –")
            rows.append(f"| {name} | " + " | ".join(cells) + " |")
        head = " | ".join(f"prefill, {t} thread{'s' if t > 1 else ''} | decode tokens/s, {t}" for t in threads)
        print(f"{file}, a {PROMPT}-token prompt then {NEW} greedy tokens, median of {args.iters} runs after a warm-up\n")
        print(f"| engine | {head} |")
        print("|---|" + "---:|" * (2 * len(threads)))
        print("\n".join(rows) + "\n")
    print(json.dumps(figures))


if __name__ == "__main__":
    sys.exit(main())
