#!/usr/bin/env python3
"""Writes the GGUF tokenizer fixture tests/gguf.rs compares attnscope's GGUF tokenizer with (run
once; outputs are committed).

    pip install gguf tokenizers transformers
    python3 tools/make_gguf_tokenizer.py

It trains a small byte-level BPE (500 tokens, seeded text below) with `tokenizers`, then writes
its vocabulary as llama.cpp's convert_hf_to_gguf.py writes a "gpt2" tokenizer
(`_set_vocab_gpt2`: `tokenizer.ggml.model` "gpt2", `.pre`, `.tokens`, `.token_type` NORMAL 1 /
CONTROL 3 for special added tokens / USER_DEFINED 4 for other added tokens, `.merges`, the
special ids, `.add_bos_token`, `tokenizer.chat_template`) into two GGUF files with a one-layer
llama's config keys and no tensors:

* tests/fixtures/gguf/tokenizer-llama-bpe.gguf: `.pre` "llama-bpe" (Llama 3's split), BOS added;
* tests/fixtures/gguf/tokenizer-gpt2.gguf: `.pre` "gpt-2" (GPT-2's own split), no BOS added.

and two SentencePiece vocabularies (no merges: transformers derives them):

* tests/fixtures/gguf/tokenizer-sentencepiece.gguf: Llama 2's way (`LlamaTokenizer`);
* tests/fixtures/gguf/tokenizer-gemma.gguf: Gemma 3's way (`general.architecture` "gemma3",
  `GemmaTokenizer`): `<pad>`, `<eos>`, `<bos>`, `<unk>`, `<mask>` first, `<start_of_turn>` and
  `<end_of_turn>` CONTROL, newlines and runs of spaces USER_DEFINED with the spaces stored as
  spaces (as Gemma's files store them), and scores that do not follow the merge order (Gemma's
  do not: transformers orders the merges by the tokens' places in the file). Its texts are
  the common ones and GEMMA_TEXTS.

For each it loads `AutoTokenizer.from_pretrained(dir, gguf_file=...)` (transformers, offline) and
writes the ids it gives each text into tests/fixtures/gguf/tokenizer-ids.json (not tokenizer.json, which transformers would read):
`{"texts": [...], "<file>": {"ids": [[...], ...], "bos": id, "eos": id, "pad": id|null}}`.
"""
import io
import json
import os
import tempfile

import gguf
import sentencepiece as spm
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests/fixtures/gguf")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Attention is all you need: queries, keys and values.",
    "Time flies like an arrow; fruit flies like a banana.",
    "In 2024, 3 models read 12345 tokens in 0.5 seconds!",
    "the cat sat on the mat\nthe dog sat on the log",
    "Héllo wörld — naïve café, 東京 and emoji 😀 too.",
    "def attend(q, k, v):\n    return softmax(q @ k.T / sqrt(d)) @ v",
    "I'm sure they'll say it's what we'd've done.",
] * 20

TEXTS = [
    "The quick brown fox",
    "Hello world",
    " leading space and  two spaces",
    "numbers 1234567 and 3.14159",
    "new\nlines\n\n and\ttabs",
    "Héllo 東京 😀",
    "<|im_start|>user\nhi<|im_end|>",
    "they'll say it's <think>fine</think>",
    "unseen: ß∑ 🦀 Ωmega",
    "",
]

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# an added token that is not special (llama.cpp: USER_DEFINED)
USER = ["<think>", "</think>"]


def train():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_tokens(USER)
    return tok


GEMMA_TEXTS = [
    "<start_of_turn>user\nhi there<end_of_turn>\n<start_of_turn>model\n",
    "two  spaces,   three, and\n\n\n newlines",
    "    indented code",
]
GEMMA_CONTROL = ["<mask>", "<start_of_turn>", "<end_of_turn>"]
GEMMA_USER = ["\n", "\n\n", "\n\n\n", "\u2581\u2581", "\u2581\u2581\u2581", "\u2581\u2581\u2581\u2581"]


def train_gemma():
    """A SentencePiece BPE model with byte fallback and Gemma 3's special pieces, trained on CORPUS."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=420,
                                   model_type="bpe", byte_fallback=True, character_coverage=1.0,
                                   pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>",
                                   bos_piece="<bos>", unk_piece="<unk>", control_symbols=GEMMA_CONTROL,
                                   user_defined_symbols=GEMMA_USER, remove_extra_whitespaces=False,
                                   add_dummy_prefix=False, num_threads=1, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def write_gemma(sp, path):
    """As llama.cpp's convert_hf_to_gguf.py writes Gemma 3's vocabulary: its pieces, with a run of
    spaces stored as spaces; the scores of the ordinary pieces reversed, so that only the file's
    order of tokens gives the merge order."""
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        piece = sp.IdToPiece(i)
        if piece in GEMMA_USER and set(piece) == {"\u2581"}:
            piece = " " * len(piece)
        tokens.append(piece)
        scores.append(sp.GetScore(i))
        if sp.IsUnknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.IsControl(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.IsByte(i):
            types.append(gguf.TokenType.BYTE)
        elif sp.IdToPiece(i) in GEMMA_USER:
            types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
    normal = [i for i, t in enumerate(types) if t == gguf.TokenType.NORMAL]
    for i, j in zip(normal, reversed(normal)):
        scores[i] = -float(j)
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_name("tokenizer fixture")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_key_length(4)
    w.add_value_length(4)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_sliding_window(4)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def train_sentencepiece():
    """A SentencePiece BPE model with byte fallback, as Llama 2's, trained on CORPUS."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=400,
                                   model_type="bpe", byte_fallback=True, character_coverage=1.0,
                                   user_defined_symbols=USER, num_threads=1, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def llama_config(w, n_vocab):
    """A one-layer llama's config keys, for transformers to read the file as a llama."""
    w.add_name("tokenizer fixture")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)


def write_sentencepiece(sp, path):
    """As convert_hf_to_gguf.py's `_set_vocab_sentencepiece` writes a Llama 2 vocabulary."""
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.IdToPiece(i))
        scores.append(sp.GetScore(i))
        if sp.IsUnknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.IsControl(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.IsUnused(i):
            types.append(gguf.TokenType.UNUSED)
        elif sp.IsByte(i):
            types.append(gguf.TokenType.BYTE)
        elif tokens[-1] in USER:
            types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
    w = gguf.GGUFWriter(path, "llama")
    llama_config(w, len(tokens))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write(tok, path, pre, add_bos):
    vocab = tok.get_vocab(with_added_tokens=True)
    by_id = {i: t for t, i in vocab.items()}
    added = {t.content: t for t in tok.get_added_tokens_decoder().values()}
    tokens, types = [], []
    for i in range(len(by_id)):
        t = by_id[i]
        tokens.append(t)
        if t in added:
            types.append(gguf.TokenType.CONTROL if added[t].special else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
    merges = [" ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]

    w = gguf.GGUFWriter(path, "llama")
    llama_config(w, len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab["<|endoftext|>"])
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_pad_token_id(vocab["<|endoftext|>"])
    w.add_add_bos_token(add_bos)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    os.makedirs(OUT, exist_ok=True)
    tok = train()
    out = {"texts": TEXTS}
    sp = train_sentencepiece()
    for name, pre, add_bos in (("tokenizer-llama-bpe.gguf", "llama-bpe", True),
                               ("tokenizer-gpt2.gguf", "gpt-2", False),
                               ("tokenizer-sentencepiece.gguf", None, True),
                               ("tokenizer-gemma.gguf", None, True)):
        path = os.path.join(OUT, name)
        texts = TEXTS
        if name == "tokenizer-gemma.gguf":
            write_gemma(train_gemma(), path)
            texts = TEXTS + GEMMA_TEXTS
        elif pre is None:
            write_sentencepiece(sp, path)
        else:
            write(tok, path, pre, add_bos)
        hf = AutoTokenizer.from_pretrained(OUT, gguf_file=name, local_files_only=True)
        out[name] = {
            "ids": [hf(t)["input_ids"] for t in texts],
            "bos": hf.bos_token_id,
            "eos": hf.eos_token_id,
            "pad": hf.pad_token_id,
        }
        if texts is not TEXTS:
            out[name]["texts"] = texts
        with open(os.path.join(tempfile.gettempdir(), name + ".tokenizer.json"), "w") as f:
            f.write(hf.backend_tokenizer.to_str(pretty=True))
        print(path, os.path.getsize(path), "bytes;", type(hf).__name__, out[name]["ids"][:2])
    with open(os.path.join(OUT, "tokenizer-ids.json"), "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
