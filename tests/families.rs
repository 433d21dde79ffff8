//! Every family as a person loading their own checkpoint meets it: HF's hidden states layer by
//! layer, GPT-2's files as either class saves them, the tokenizers of each family, and the CLI's
//! fields (tests/fixtures/models/tiny-*, made by tools/make_fixtures.py).

use std::process::Command;

use crate::common::*;
use attnscope::engine::{cpu, TraceOptions};
use attnscope::model::TextTokenizer;
use attnscope::{Mask, Model};
use serde_json::Value;

const FAMILY_CASES: [&str; 5] = [
    "roberta_batch",
    "roberta_pair",
    "distilbert_batch",
    "gpt2_batch",
    "gpt2_single",
];

#[test]
fn every_layers_hidden_states_equal_hfs_on_both_engines() {
    let opts = TraceOptions {
        hidden_states: true,
        ..TraceOptions::default()
    };
    for name in FAMILY_CASES {
        let g = golden(name);
        let m = model(&g.meta.model);
        let texts: Vec<&str> = g.meta.texts.iter().map(String::as_str).collect();
        let input = m.tokenizer.encode(&texts, g.meta.pair.as_deref()).unwrap();
        let mask = Mask::from_kind(g.meta.mask, input.valid.view());
        let want = &g.tensors["hidden_states"]; // (B, L+1, T, D); the last after GPT-2's ln_f
        let c = cpu::forward(m, &input, &mask, &opts).unwrap();
        let (gpu, _) = pollster::block_on(gpu_engine(m).forward(m, &input, &mask, &opts)).unwrap();
        for (engine, trace) in [("cpu", c), ("gpu", gpu)] {
            let hs = trace.hidden_states.unwrap();
            let d = max_abs_diff(hs.view().into_dyn(), want.view());
            eprintln!("{name} {engine}: hidden states max |Δ| {d:.2e}");
            assert!(
                d <= HIDDEN_TOL,
                "{name} {engine}: hidden states differ by {d}"
            );
        }
    }
}

#[test]
fn gpt2_loads_with_or_without_the_transformer_prefix_and_ignores_its_mask_buffers() {
    let dir = model_dir("tiny-gpt2");
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let names = st.names();
    assert!(
        names.iter().any(|k| k.ends_with("attn.bias")),
        "the fixture keeps attn.bias"
    );
    assert!(!names.iter().any(|k| k.starts_with("transformer.")));
    // as GPT2LMHeadModel.save_pretrained writes it: every key under `transformer.`
    let prefixed: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .map(|(k, v)| (format!("transformer.{k}"), v))
        .collect();
    let prefixed = safetensors::serialize(prefixed, None).unwrap();
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let m = Model::from_bytes(
        "lm",
        &read("config.json"),
        &prefixed,
        &read("tokenizer.json"),
    )
    .unwrap();
    let g = golden("gpt2_single");
    let input = m
        .tokenizer
        .encode(&["attention is all you need"], None)
        .unwrap();
    let mask = Mask::from_kind(g.meta.mask, input.valid.view());
    let trace = cpu::forward(&m, &input, &mask, &TraceOptions::default()).unwrap();
    let d = max_abs_diff(
        trace.attention.view().into_dyn(),
        g.tensors["attention"].view(),
    );
    assert!(d <= ATTENTION_TOL, "{d}");
}

/// RoBERTa's pair (`<s> A </s></s> B </s>`) gives every token type 0: where B starts is the
/// tokenizer's sequence ids', after both of its separators.
#[test]
fn a_roberta_pair_starts_after_its_two_separators() {
    let g = golden("roberta_pair");
    let m = model(&g.meta.model);
    let texts: Vec<&str> = g.meta.texts.iter().map(String::as_str).collect();
    let input = m.tokenizer.encode(&texts, g.meta.pair.as_deref()).unwrap();
    assert!(g.meta.type_ids[0].iter().all(|&t| t == 0));
    let tokens = &g.meta.tokens[0];
    let b = input.sentence_b_start[0].unwrap();
    assert_eq!(tokens[b - 2..b], ["</s>", "</s>"], "{tokens:?}: B at {b}");
    assert_eq!(tokens.last().unwrap(), "</s>");
    // B's pieces are the pair's text encoded alone, its specials aside
    let alone = m
        .tokenizer
        .encode(&[g.meta.pair.as_deref().unwrap()], None)
        .unwrap();
    let n = input.length(0);
    assert_eq!(
        input.tokens[0][b..n - 1],
        alone.tokens[0][1..alone.length(0) - 1]
    );
}

#[test]
fn roberta_counts_positions_after_its_padding_index() {
    let m = model("tiny-roberta");
    // 66 rows of positions, two of them before the first token (padding_idx 1): 64 tokens
    assert_eq!(m.config.max_position_embeddings, 66);
    assert_eq!(m.config.max_tokens(), 64);
    assert_eq!(m.tokenizer.max_len(), 64);
    let long = "the cat sat on the mat ".repeat(40);
    let input = m
        .tokenizer
        .encode(&[long.as_str(), "a dog!"], None)
        .unwrap();
    assert_eq!(input.len(), 64);
    assert_eq!(input.truncated, [true, false]);
    let positions = attnscope::engine::network::Loaded::inputs(m, &input).positions;
    assert_eq!(positions[[0, 0]], 2);
    assert_eq!(positions[[0, 63]], 65);
    let n = input.valid.row(1).iter().filter(|&&v| v).count();
    assert_eq!(positions[[1, n - 1]], n as u32 + 1);
    assert!(
        positions.row(1).iter().skip(n).all(|&p| p == 1),
        "padding keeps padding_idx"
    );
    // and the longest text runs on both engines
    let mask = Mask::from_kind(attnscope::MaskKind::Padding, input.valid.view());
    let c = cpu::forward(m, &input, &mask, &TraceOptions::default()).unwrap();
    let (g, _) =
        pollster::block_on(gpu_engine(m).forward(m, &input, &mask, &TraceOptions::default()))
            .unwrap();
    let d = max_abs_diff(g.attention.view().into_dyn(), c.attention.view().into_dyn());
    assert!(d <= ATTENTION_TOL, "{d}");
}

#[test]
fn a_sentencepiece_unigram_tokenizer_encodes_as_the_tokenizers_library_does() {
    #[derive(serde::Deserialize)]
    struct Case {
        text: String,
        tokens: Vec<String>,
        ids: Vec<u32>,
    }
    let dir = root().join("tests/fixtures/tokenizers");
    let bytes = std::fs::read(dir.join("unigram.json")).unwrap();
    let tok = TextTokenizer::from_bytes(&bytes, "unigram.json", 64, None).unwrap();
    let cases: Vec<Case> =
        serde_json::from_slice(&std::fs::read(dir.join("unigram_expected.json")).unwrap()).unwrap();
    for c in cases {
        let e = tok.encode(&[c.text.as_str()], None).unwrap();
        assert_eq!(e.tokens[0], c.tokens, "{}", c.text);
        assert_eq!(e.ids.row(0).to_vec(), c.ids, "{}", c.text);
        // shown as text: ▁ as the space it stands for, never the marker itself
        assert!(
            e.texts[0].iter().all(|t| !t.contains('▁')),
            "{:?}",
            e.texts[0]
        );
        let shown: String = e.texts[0].concat();
        assert_eq!(
            shown.trim(),
            c.text.trim(),
            "the pieces read back as the text"
        );
    }
}

#[test]
fn a_converted_opus_mt_tokenizer_with_a_null_charsmap_loads() {
    // HF's converter leaves `precompiled_charsmap: null` where the SentencePiece model has no
    // normalisation rules; the tokenizers library (Python 0.23) panics on it
    let dir = root().join("tests/fixtures/tokenizers");
    let bytes = std::fs::read(dir.join("precompiled_null.json")).unwrap();
    let json: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(json["normalizer"]["normalizers"][0]["precompiled_charsmap"].is_null());
    let tok = TextTokenizer::from_bytes(&bytes, "tokenizer.json", 64, None).unwrap();
    let plain = std::fs::read(dir.join("unigram.json")).unwrap();
    let plain = TextTokenizer::from_bytes(&plain, "unigram.json", 64, None).unwrap();
    // the normaliser left (two spaces → one) still applies; the null map changes nothing
    let a = tok.encode(&["time  flies like an arrow"], None).unwrap();
    let b = plain.encode(&["time flies like an arrow"], None).unwrap();
    assert_eq!(a.ids, b.ids);
}

#[test]
fn gpt2_byte_level_tokens_read_as_text() {
    let m = model("tiny-gpt2");
    let input = m
        .tokenizer
        .encode(&["time flies like an arrow 😀"], None)
        .unwrap();
    let texts = &input.texts[0];
    assert!(texts.iter().all(|t| !t.contains('Ġ')), "{texts:?}");
    assert!(texts.iter().any(|t| t.starts_with(' ')), "{texts:?}");
    // the emoji's pieces hold parts of one character: each shows its bytes, marked (HF's
    // decode writes �; tests/token_texts.rs), never byte soup
    assert!(texts.iter().any(|t| t.contains('‹')), "{texts:?}");
    assert!(texts.iter().all(|t| !t.contains('\u{FFFD}')), "{texts:?}");
    // no pad token in the tokenizer: a batch pads with the config's eos id and runs
    let batch = m.tokenizer.encode(&["time flies", "a"], None).unwrap();
    assert_eq!(batch.ids[[1, 1]], m.config.pad_token_id.unwrap());
}

fn attnscope(args: &[&str]) -> (bool, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_attnscope"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "the CLI panicked: {stderr}");
    let json = if out.status.success() {
        serde_json::from_slice(&out.stdout).unwrap()
    } else {
        Value::Null
    };
    (out.status.success(), json, stderr)
}

#[test]
fn the_cli_predicts_gpt2s_next_tokens_under_its_own_mask() {
    let dir = model_dir("tiny-gpt2").display().to_string();
    let g = golden("gpt2_single");
    for backend in ["cpu", "gpu"] {
        let (ok, json, err) = attnscope(&[
            "attention",
            "--model",
            &dir,
            "--backend",
            backend,
            "--top-k",
            "3",
            "--hidden",
            "attention is all you need",
        ]);
        assert!(ok, "{err}");
        assert_eq!(json["model_type"], "gpt2");
        assert_eq!(json["mask"], "causal", "GPT-2 is causal without being told");
        assert!(json.get("mask_ablation").is_none());
        let r = &json["results"][0];
        let t = r["tokens"].as_array().unwrap().len();
        let next = r["next_tokens"].as_array().unwrap();
        assert_eq!(next.len(), t);
        let want = &g.tensors["next_token_probs"]; // (1, T, V)
        for (pos, row) in next.iter().enumerate() {
            let row = row.as_array().unwrap();
            assert_eq!(row.len(), 3);
            let ps: Vec<f64> = row.iter().map(|p| p["p"].as_f64().unwrap()).collect();
            assert!(ps.windows(2).all(|w| w[0] >= w[1]), "best first: {ps:?}");
            for p in row {
                let id = p["id"].as_u64().unwrap() as usize;
                let hf = want[[0, pos, id]] as f64;
                assert!(
                    (p["p"].as_f64().unwrap() - hf).abs() <= 1e-4,
                    "{backend} {pos} {id}"
                );
                assert!(p["token"].is_string() && p["text"].is_string());
            }
            // the best is HF's argmax
            let best = (0..want.shape()[2])
                .max_by(|&a, &b| want[[0, pos, a]].total_cmp(&want[[0, pos, b]]))
                .unwrap();
            assert_eq!(row[0]["id"].as_u64().unwrap() as usize, best);
        }
    }
    // any other mask is an ablation, and the JSON says so
    let (ok, json, err) = attnscope(&["attention", "--model", &dir, "--mask", "none", "a b"]);
    assert!(ok, "{err}");
    assert_eq!(json["mask"], "none");
    assert_eq!(json["mask_ablation"], true);
    // an encoder has no next token to predict
    let bert = model_dir("tiny-distilbert").display().to_string();
    let (ok, _, err) = attnscope(&["attention", "--model", &bert, "--top-k", "3", "a dog"]);
    assert!(!ok);
    assert!(err.contains("--top-k") && err.contains("LM head"), "{err}");
}

#[test]
fn the_cli_says_each_familys_model_type_and_gives_its_tokens_as_text() {
    for (name, model_type) in [
        ("tiny-bert", "bert"),
        ("tiny-roberta", "roberta"),
        ("tiny-distilbert", "distilbert"),
        ("tiny-gpt2", "gpt2"),
    ] {
        let dir = model_dir(name).display().to_string();
        let (ok, json, err) = attnscope(&["attention", "--model", &dir, "the cat sat", "a dog!"]);
        assert!(ok, "{name}: {err}");
        assert_eq!(json["model_type"], model_type);
        for r in json["results"].as_array().unwrap() {
            let n = r["length"].as_u64().unwrap() as usize;
            assert_eq!(r["token_texts"].as_array().unwrap().len(), n, "{name}");
            assert_eq!(r["offsets"].as_array().unwrap().len(), n, "{name}");
            assert_eq!(r["word_ids"].as_array().unwrap().len(), n, "{name}");
            // the tokens of each word (by the tokenizer's word ids) read back as the word
            let mut words: Vec<String> = vec![];
            let mut last = None;
            for (text, word) in r["token_texts"]
                .as_array()
                .unwrap()
                .iter()
                .zip(r["word_ids"].as_array().unwrap())
            {
                let Some(word) = word.as_u64() else {
                    last = None;
                    continue; // a special token
                };
                if last == Some(word) {
                    words.last_mut().unwrap().push_str(text.as_str().unwrap());
                } else {
                    words.push(text.as_str().unwrap().to_owned());
                }
                last = Some(word);
            }
            let words: Vec<&str> = words.iter().map(|w| w.trim()).collect();
            let text = r["text"].as_str().unwrap();
            let want: Vec<&str> = text
                .split(' ')
                .flat_map(|w| match w.strip_suffix('!') {
                    Some(w) => vec![w, "!"],
                    None => vec![w],
                })
                .collect();
            assert_eq!(words, want, "{name}");
        }
    }
}
