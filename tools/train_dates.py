#!/usr/bin/env python3
"""Trains the classroom's translation model: English dates → ISO (`9th of May 2018` → `2018-05-09`),
a small MarianMTModel (the seeds' Transformer: post-LN encoder and decoder, sinusoidal positions,
shared embeddings), on a corpus this script generates, on the CPU, seeded.

    pip install torch transformers safetensors tokenizers
    python3 tools/train_dates.py [--out models/dates] [--seconds 600]

Writes `models/dates/` (config.json, model.safetensors, tokenizer.json; committed) and prints, on a
held-out set of dates the training never saw, in every form: the exact-match accuracy per form,
and how readable the cross-attention is: for each digit of a correct output, whether the source
token the producing step's cross-attention row puts most weight on lies in the field the digit
comes from (year digits → the year, month digits → the month's name or number, day digits → the
day with its ordinal suffix), for every (layer, head) and every layer's mean over heads; the best
is named, and written to config.json as `attnscope_focus` for the page to open on.
"""
import argparse
import datetime
import json
import math
import os
import random
import time

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
MON = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
FIRST, LAST = datetime.date(1900, 1, 1), datetime.date(2099, 12, 31)


def ordinal(d):
    return f"{d}{'th' if 10 <= d % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(d % 10, 'th')}"


# Each form: a function of (date, rng) → list of (text, field) parts, field one of None, "year",
# "month", "day": the fields' character spans are what the alignment figure checks against.
def month_full(d, rng):
    return MONTHS[d.month - 1]


def month_abbr(d, rng):
    return "Sept" if d.month == 9 and rng.random() < 0.5 else MON[d.month - 1]


def weekday(d, rng):
    w = WEEKDAYS[d.weekday()]
    return w if rng.random() < 0.5 else w[:3]


FORMS = {
    "d Month yyyy": lambda d, r: [(str(d.day), "day"), (" ", None), (month_full(d, r), "month"), (" ", None), (str(d.year), "year")],
    "dd Month yyyy": lambda d, r: [(f"{d.day:02d}", "day"), (" ", None), (month_full(d, r), "month"), (" ", None), (str(d.year), "year")],
    "d Month, yyyy": lambda d, r: [(str(d.day), "day"), (" ", None), (month_full(d, r), "month"), (", ", None), (str(d.year), "year")],
    "d Mon yyyy": lambda d, r: [(str(d.day), "day"), (" ", None), (month_abbr(d, r), "month"), (" ", None), (str(d.year), "year")],
    "Month d yyyy": lambda d, r: [(month_full(d, r), "month"), (" ", None), (str(d.day), "day"), (" ", None), (str(d.year), "year")],
    "Month d, yyyy": lambda d, r: [(month_full(d, r), "month"), (" ", None), (str(d.day), "day"), (", ", None), (str(d.year), "year")],
    "Mon d, yyyy": lambda d, r: [(month_abbr(d, r), "month"), (" ", None), (str(d.day), "day"), (", ", None), (str(d.year), "year")],
    "Month dth, yyyy": lambda d, r: [(month_full(d, r), "month"), (" ", None), (ordinal(d.day), "day"), (", ", None), (str(d.year), "year")],
    "Month dth yyyy": lambda d, r: [(month_full(d, r), "month"), (" ", None), (ordinal(d.day), "day"), (" ", None), (str(d.year), "year")],
    "the dth of Month yyyy": lambda d, r: [("the ", None), (ordinal(d.day), "day"), (" of ", None), (month_full(d, r), "month"), (" ", None), (str(d.year), "year")],
    "dth of Month, yyyy": lambda d, r: [(ordinal(d.day), "day"), (" of ", None), (month_full(d, r), "month"), (", ", None), (str(d.year), "year")],
    "Weekday, d Mon yyyy": lambda d, r: [(weekday(d, r), None), (", ", None), (str(d.day), "day"), (" ", None), (month_abbr(d, r), "month"), (" ", None), (str(d.year), "year")],
    "Weekday, Month d, yyyy": lambda d, r: [(weekday(d, r), None), (", ", None), (month_full(d, r), "month"), (" ", None), (str(d.day), "day"), (", ", None), (str(d.year), "year")],
    "Weekday d Mon yyyy": lambda d, r: [(weekday(d, r), None), (" ", None), (str(d.day), "day"), (" ", None), (month_abbr(d, r), "month"), (" ", None), (str(d.year), "year")],
    "dd.mm.yyyy": lambda d, r: [(f"{d.day:02d}", "day"), (".", None), (f"{d.month:02d}", "month"), (".", None), (str(d.year), "year")],
    "d.m.yyyy": lambda d, r: [(str(d.day), "day"), (".", None), (str(d.month), "month"), (".", None), (str(d.year), "year")],
    "dd/mm/yyyy": lambda d, r: [(f"{d.day:02d}", "day"), ("/", None), (f"{d.month:02d}", "month"), ("/", None), (str(d.year), "year")],
    "d/m/yyyy": lambda d, r: [(str(d.day), "day"), ("/", None), (str(d.month), "month"), ("/", None), (str(d.year), "year")],
    "yyyy-mm-dd": lambda d, r: [(str(d.year), "year"), ("-", None), (f"{d.month:02d}", "month"), ("-", None), (f"{d.day:02d}", "day")],
}


def render(parts, rng):
    """The parts as one text, in a random letter case, with extra spaces now and then; and each
    field's character span."""
    case = rng.choice([str, str, str.lower, str.upper, str.title])
    text, spans = "", {}
    for piece, field in parts:
        if piece.strip() == "" or piece.endswith(" ") or piece.startswith(" "):
            piece = piece.replace(" ", " " * rng.choice([1, 1, 1, 1, 2, 3]))
        piece = case(piece)
        if field:
            spans[field] = (len(text), len(text) + len(piece))
        text += piece
    if rng.random() < 0.1:
        text = " " * rng.randint(1, 2) + text
        spans = {k: (a + len(text) - len(text.lstrip()), b + len(text) - len(text.lstrip())) for k, (a, b) in spans.items()}
    if rng.random() < 0.1:
        text += " " * rng.randint(1, 2)
    return text, spans


def example(d, form, rng):
    text, spans = render(FORMS[form](d, rng), rng)
    return dict(source=text, target=d.isoformat(), form=form, spans=spans)


def held_out(d):
    """The dates the training never sees: every seventh day, counted from 1900-01-04."""
    return (d - FIRST).days % 7 == 3


def tokenizer():
    """Words and digits a student can read: month and weekday names and their abbreviations, the
    ordinal suffixes, "the", "of", each digit and each punctuation mark, lowercased."""
    words = [m.lower() for m in MONTHS] + [m.lower() for m in MON if m.lower() not in [x.lower() for x in MONTHS]]
    words += ["sept"] + [w.lower() for w in WEEKDAYS] + [w[:3].lower() for w in WEEKDAYS]
    words += ["the", "of", "st", "nd", "rd", "th"] + [str(i) for i in range(10)] + ["-", ".", "/", ","]
    vocab = {"</s>": 0, "<unk>": 1}
    for w in words:
        vocab.setdefault(w, len(vocab))
    vocab["<pad>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation("isolated"),
                                                 pre_tokenizers.Digits(individual_digits=True)])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A $B </s>", special_tokens=[("</s>", 0)])
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(["</s>", "<unk>", "<pad>"])
    return tok


def batches(data, tok, pad, size, rng):
    order = list(range(len(data)))
    rng.shuffle(order)
    for i in range(0, len(order), size):
        chunk = [data[j] for j in order[i:i + size]]
        src = [tok.encode(x["source"]).ids for x in chunk]
        tgt = [tok.encode(x["target"]).ids for x in chunk]
        s, t = max(map(len, src)), max(map(len, tgt))
        ids = torch.tensor([x + [pad] * (s - len(x)) for x in src])
        mask = torch.tensor([[1] * len(x) + [0] * (s - len(x)) for x in src])
        labels = torch.tensor([x + [-100] * (t - len(x)) for x in tgt])
        yield ids, mask, labels


@torch.no_grad()
def evaluate(model, tok, pad, data, batch=256):
    """Greedy outputs (as HF's generate), exact match per form, and the alignment of each digit
    of the correct ones: per (layer, head) and per layer's mean, the share of digits whose
    producing row's argmax source token lies in the digit's field."""
    model.eval()
    L, H = model.config.decoder_layers, model.config.decoder_attention_heads
    hits = torch.zeros(L, H + 1)
    digits = 0
    right, per_form = 0, {}
    for i in range(0, len(data), batch):
        chunk = data[i:i + batch]
        encs = [tok.encode(x["source"]) for x in chunk]
        s = max(len(e.ids) for e in encs)
        ids = torch.tensor([e.ids + [pad] * (s - len(e.ids)) for e in encs])
        mask = torch.tensor([[1] * len(e.ids) + [0] * (s - len(e.ids)) for e in encs])
        out = model.generate(input_ids=ids, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=12,
                             bad_words_ids=[[pad]])
        for x, e, row in zip(chunk, encs, out.tolist()):
            ids_out = row[1:]
            if 0 in ids_out:
                ids_out = ids_out[:ids_out.index(0)]
            text = tok.decode(ids_out, skip_special_tokens=True)
            ok = text == x["target"]
            right += ok
            f = per_form.setdefault(x["form"], [0, 0])
            f[0] += ok
            f[1] += 1
            if not ok:
                continue
            # HF's forward over output_ids[:-1]: row t wrote output_ids[t + 1]
            dec = torch.tensor([row[:row.index(0) + 1][:-1] if 0 in row else row[:-1]])
            fw = model(input_ids=torch.tensor([e.ids]), decoder_input_ids=dec, output_attentions=True)
            cross = torch.stack(fw.cross_attentions)[:, 0]  # (L, H, T, S)
            # each source token's field, by its character span
            field_of = []
            for (a, b) in e.offsets:
                f_ = None
                for name, (fa, fb) in x["spans"].items():
                    if a < fb and b > fa and b > a:
                        f_ = name
                field_of.append(f_)
            for t, field in enumerate(["year"] * 4 + [None] + ["month"] * 2 + [None] + ["day"] * 2):
                if field is None:
                    continue
                digits += 1
                per_head = cross[:, :, t].argmax(-1)  # (L, H)
                mean = cross[:, :, t].mean(1).argmax(-1)  # (L,)
                for l in range(L):
                    for h in range(H):
                        hits[l, h] += field_of[per_head[l, h]] == field
                    hits[l, H] += field_of[mean[l]] == field
    model.train()
    return right / len(data), per_form, hits / max(digits, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "dates"))
    ap.add_argument("--train", type=int, default=60000)
    ap.add_argument("--per-form", type=int, default=100, help="held-out examples of each form")
    ap.add_argument("--seconds", type=float, default=900, help="stop training after this long at most")
    ap.add_argument("--epochs", type=int, default=16, help="train at least this many epochs (the attention sharpens after the outputs are right)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--heads", type=int, default=4, help="attention heads of each layer")
    args = ap.parse_args()
    from transformers import MarianConfig, MarianMTModel
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, args.threads))
    days = (LAST - FIRST).days + 1
    all_dates = [FIRST + datetime.timedelta(n) for n in range(days)]
    train_dates = [d for d in all_dates if not held_out(d)]
    test_dates = [d for d in all_dates if held_out(d)]
    forms = list(FORMS)
    train = [example(rng.choice(train_dates), rng.choice(forms), rng) for _ in range(args.train)]
    test = [example(rng.choice(test_dates), f, rng) for f in forms for _ in range(args.per_form)]
    tok = tokenizer()
    pad = tok.token_to_id("<pad>")
    cfg = MarianConfig(vocab_size=tok.get_vocab_size(), decoder_vocab_size=tok.get_vocab_size(), d_model=64,
                       encoder_layers=2, decoder_layers=2, encoder_attention_heads=args.heads, decoder_attention_heads=args.heads,
                       encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=64, pad_token_id=pad,
                       eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0, scale_embedding=True,
                       activation_function="swish", dropout=0.1, attention_dropout=0.0, share_encoder_decoder_embeddings=True)
    model = MarianMTModel(cfg)
    model.config._attn_implementation = "eager"
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"{params} parameters; {len(train)} training examples, {len(test)} held-out ({args.per_form} of each of {len(forms)} forms)")
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    start, step = time.time(), 0
    model.train()
    for epoch in range(100):
        for ids, mask, labels in batches(train, tok, pad, 128, rng):
            lr = 2e-3 * min(1.0, (step + 1) / 200)
            for g in opt.param_groups:
                g["lr"] = lr
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
        acc, _, _ = evaluate(model, tok, pad, test[::7])
        print(f"epoch {epoch + 1}: loss {loss.item():.4f}, held-out sample {100 * acc:.2f} % ({time.time() - start:.0f} s)")
        if (acc == 1.0 and epoch + 1 >= args.epochs) or time.time() - start > args.seconds:
            break
    model.eval()
    acc, per_form, align = evaluate(model, tok, pad, test)
    print(f"held-out exact match: {100 * acc:.2f} % of {len(test)}")
    for f, (r, n) in per_form.items():
        print(f"  {f:24} {100 * r / n:6.2f} %")
    L, H = cfg.decoder_layers, cfg.decoder_attention_heads
    print("cross-attention argmax in the digit's field (rows: decoder layers; columns: heads, then the layer's mean):")
    for l in range(L):
        print(f"  layer {l}: " + "  ".join(f"{100 * align[l, h]:5.1f}" for h in range(H + 1)))
    best = max(((l, h) for l in range(L) for h in range(H + 1)), key=lambda lh: align[lh])
    what = f"layer {best[0]}, mean over heads" if best[1] == H else f"layer {best[0]}, head {best[1]}"
    print(f"best: {what}: {100 * align[best]:.1f} % of the digits")
    os.makedirs(args.out, exist_ok=True)
    model.config.attnscope_focus = {"layer": best[0], "head": None if best[1] == H else best[1],
                                    "digits_in_field": round(float(align[best]), 4), "exact_match": round(acc, 4)}
    model.save_pretrained(args.out, safe_serialization=True)
    for extra in ("generation_config.json",):
        p = os.path.join(args.out, extra)
        if os.path.exists(p):
            os.remove(p)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "heldout.json"), "w") as fh:
        json.dump([dict(source=x["source"], target=x["target"], form=x["form"], spans=x["spans"]) for x in test], fh,
                  ensure_ascii=False, indent=0)
    print(f"{args.out}: {os.path.getsize(os.path.join(args.out, 'model.safetensors')) / 1024:.0f} KB")


if __name__ == "__main__":
    main()
