"""Each token of a few fixture vocabularies as HF's tokenizers library decodes it alone
(`decode([id], skip_special_tokens=False)`), for tests/token_texts.rs: attnscope's
`TextTokenizer::text_of` must read every token as HF does, but where HF writes `�` for a token
that holds only part of a character (there attnscope shows the bytes, marked) and where a
SentencePiece decoder strips the `▁` of a token read alone (there attnscope keeps the space).

    pip install tokenizers
    python3 tools/make_token_texts.py   # writes tests/fixtures/golden/token_texts.json
"""
import json
from pathlib import Path

import tokenizers

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests/fixtures/models"
# byte-level BPE (GPT-2's, Gemma 3's and Qwen2's tiny folders), SentencePiece (Marian), WordPiece (BERT)
NAMES = ["tiny-gpt2", "v5-gemma3", "v5-qwen2", "tiny-marian", "tiny-bert"]


def main():
    out = {"tokenizers": tokenizers.__version__, "models": {}}
    for name in NAMES:
        tok = tokenizers.Tokenizer.from_file(str(MODELS / name / "tokenizer.json"))
        rows = []
        for i in range(tok.get_vocab_size(with_added_tokens=True)):
            token = tok.id_to_token(i)
            if token is None:
                continue
            rows.append([i, token, tok.decode([i], skip_special_tokens=False)])
        out["models"][name] = rows
    path = ROOT / "tests/fixtures/golden/token_texts.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n")
    print(f"wrote {path.relative_to(ROOT)}: {sum(len(r) for r in out['models'].values())} tokens")


if __name__ == "__main__":
    main()
