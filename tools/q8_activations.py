#!/usr/bin/env python3
"""Would llama.cpp's way of decoding keep attnscope's numbers? A measurement, not a test.

llama.cpp multiplies a quantized matrix by activations quantized to 8 bits in blocks of 32 values
(its q8 types), with integer instructions. attnscope keeps the activations in f32, so that the
attention and the next-token probabilities stay within 1e-4 of HF transformers' on the same file.
This runs HF's float32 model from SmolLM2-135M-Instruct's Q4_1 GGUF (dequantized: the reference
the golden tests use) on a 64-token prompt twice, the second time with every linear layer's input
rounded to 8 bits per block of 32 values (scale = max |x| / 127), and prints the largest change
of the attention probabilities and of the last position's next-token probabilities.

    python3 tools/q8_activations.py      (needs torch, transformers, gguf and accelerate)
"""
import os

import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "assets", "models", "SmolLM2-135M-Instruct")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = "Attention lets every token look at every other token and decide how much of it to take. "


def q8(x):
    """`x` rounded to 8 bits per run of 32 values of its last axis, as llama.cpp's q8_0."""
    shape = x.shape
    blocks = x.reshape(*shape[:-1], shape[-1] // 32, 32)
    d = blocks.abs().amax(-1, keepdim=True) / 127
    q = torch.where(d > 0, torch.round(blocks / torch.where(d > 0, d, 1)), 0)
    return (q * d).reshape(shape)


def main():
    torch.set_grad_enabled(False)
    tok = transformers.AutoTokenizer.from_pretrained(DIR, gguf_file=GGUF)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        DIR, gguf_file=GGUF, torch_dtype=torch.float32, attn_implementation="eager")
    ids = tok(TEXT * 3, return_tensors="pt").input_ids[:, :64]
    base = model(ids, output_attentions=True)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    for m in linears:
        m.register_forward_pre_hook(lambda _m, args: (q8(args[0]),))
    quant = model(ids, output_attentions=True)
    attention = max((a - b).abs().max().item() for a, b in zip(base.attentions, quant.attentions))
    p, q = (torch.softmax(o.logits[0, -1], -1) for o in (base, quant))
    same = bool((base.logits.argmax(-1) == quant.logits.argmax(-1)).all())
    print(f"{len(linears)} linear layers' inputs at 8 bits per 32 values: max |Δ| attention {attention:.3e}, "
          f"next-token probabilities {(p - q).abs().max().item():.3e}, every position's likeliest token the same: {same}")


if __name__ == "__main__":
    main()
