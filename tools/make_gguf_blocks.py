#!/usr/bin/env python3
"""Writes the GGUF block-format fixture tests/gguf.rs reads (run once; outputs are committed).

    pip install gguf safetensors numpy
    python3 tools/make_gguf_blocks.py

tests/fixtures/gguf/blocks.gguf, written by the `gguf` package's GGUFWriter (alignment 64),
holds one tensor per ggml type attnscope reads, `<type>` of 4 rows × 256 values (ne = [256, 4]),
for each K-quant a tensor of 2 rows × 512 too (`<type>.wide`, two super-blocks a row), a 1-D F32
tensor, and metadata of every value type (nested arrays too). F32, F16, BF16, Q8_0, Q4_0, Q4_1,
Q5_0 and Q5_1 are seeded normal values quantized by `gguf.quants.quantize`; the package has no
quantizer for the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), so their blocks are seeded random bits
with finite f16 scales (every bit of a block is read, so random blocks test the layout as well as
real ones). Q2_K's, Q3_K's and Q5_K's come from a generator of their own, after the others, so
that the tensors written before them keep their bytes.

tests/fixtures/gguf/blocks.safetensors holds, under each tensor's name, the package's
`gguf.quants.dequantize` of its bytes as f32, shaped (rows, cols): what attnscope must equal.
"""
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests/fixtures/gguf")

rng = np.random.default_rng(30)


# where each K-quant block's f16 scales are: (first byte, how many): d, dmin for Q2_K, Q4_K and
# Q5_K; d for Q3_K and Q6_K (ggml-common.h's block_q*_K)
K_SCALES = {T.Q2_K: (80, 2), T.Q3_K: (108, 1), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208, 1)}


def k_quant_blocks(qtype, n_blocks, gen=rng):
    """`n_blocks` blocks of random bits (from `gen`) with finite f16 scales (K_SCALES)."""
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    at, n = K_SCALES[qtype]
    b = gen.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    scales = gen.uniform(0.001, 0.02, size=(n_blocks, n)).astype(np.float16)
    b[:, at:at + 2 * n] = scales.view(np.uint8)
    return b


def main():
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "blocks.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_uint64("test.u64", 1 << 40)
    w.add_int64("test.i64", -(1 << 40))
    w.add_float32("test.f32", 0.1)
    w.add_float64("test.f64", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "blocks – ünïcode")
    w.add_array("test.strings", ["a", "bc", "Ġd"])
    w.add_array("test.floats", [0.5, -1.25])
    w.add_key_value("test.ints", [1, -2, 3], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32)
    w.add_array("test.nested", [[1, 2], [3]])

    dequantized = {}

    def add(name, qtype, raw):
        w.add_tensor(name, raw, raw_dtype=qtype)
        rows = raw.shape[0] if raw.ndim > 1 else 1
        deq = gguf.quants.dequantize(raw, qtype).astype(np.float32)
        dequantized[name] = np.ascontiguousarray(deq.reshape(rows, -1))

    for qtype in (T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1):
        x = rng.standard_normal((4, 256), dtype=np.float32)
        # F32 and F16 come back as float arrays, the others as each row's bytes
        add(qtype.name, qtype, gguf.quants.quantize(x, qtype))
    for qtype in (T.Q4_K, T.Q6_K):
        add(qtype.name, qtype, k_quant_blocks(qtype, 4).reshape(4, -1))
        add(qtype.name + ".wide", qtype, k_quant_blocks(qtype, 4).reshape(2, -1))
    add("norm", T.F32, rng.standard_normal(256, dtype=np.float32))
    more = np.random.default_rng(31)
    for qtype in (T.Q2_K, T.Q3_K, T.Q5_K):
        add(qtype.name, qtype, k_quant_blocks(qtype, 4, more).reshape(4, -1))
        add(qtype.name + ".wide", qtype, k_quant_blocks(qtype, 4, more).reshape(2, -1))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file(dequantized, os.path.join(OUT, "blocks.safetensors"))
    print(path, os.path.getsize(path), "bytes;", len(dequantized), "tensors")


if __name__ == "__main__":
    main()
