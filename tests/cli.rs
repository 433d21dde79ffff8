//! The CLI contract: `attnscope attention ...` prints one JSON object; errors go to stderr.

use std::process::Command;

use crate::common::*;
use serde_json::Value;

fn attnscope(args: &[&str]) -> (i32, Value, String) {
    attnscope_env(args, &[])
}

fn attnscope_env(args: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_attnscope"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "the CLI panicked: {stderr}");
    let json = if out.status.success() {
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
    } else {
        assert!(out.stdout.is_empty());
        Value::Null
    };
    (out.status.code().unwrap_or(-1), json, stderr)
}

fn minilm() -> String {
    model_dir("minilm").display().to_string()
}

fn dims(v: &Value) -> Vec<usize> {
    let mut d = vec![];
    let mut cur = v;
    while let Some(a) = cur.as_array() {
        d.push(a.len());
        cur = &a[0];
    }
    d
}

fn cell(att: &Value, l: usize, h: usize, q: usize, k: usize) -> f64 {
    att[l][h][q][k].as_f64().unwrap()
}

/// The largest |a − b| over two nested arrays of numbers of one shape.
fn max_diff(a: &Value, b: &Value) -> f64 {
    match (a.as_array(), b.as_array()) {
        (Some(a), Some(b)) => {
            assert_eq!(a.len(), b.len(), "the shapes differ");
            a.iter()
                .zip(b)
                .map(|(a, b)| max_diff(a, b))
                .fold(0.0, f64::max)
        }
        _ => (a.as_f64().unwrap() - b.as_f64().unwrap()).abs(),
    }
}

#[test]
fn attention_prints_the_contract() {
    let (code, json, _) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--",
        "time flies like an arrow",
    ]);
    assert_eq!(code, 0);
    assert_eq!(json["model"], "all-MiniLM-L6-v2");
    assert_eq!(json["backend"], "cpu");
    let r = &json["results"][0];
    assert_eq!(r["text"], "time flies like an arrow");
    let tokens: Vec<&str> = r["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tokens,
        ["[CLS]", "time", "flies", "like", "an", "arrow", "[SEP]"]
    );
    assert_eq!(r["token_ids"][0], 101);
    assert_eq!(dims(&r["attention"]), [6, 12, 7, 7]);
    assert!(r.get("hidden").is_none());
}

#[test]
fn several_texts_are_one_padded_batch_equal_to_hf() {
    let g = golden("minilm_batch");
    let mut args = vec!["attention", "--model"];
    let dir = minilm();
    args.push(&dir);
    args.push("--hidden");
    args.push("--");
    args.extend(g.meta.texts.iter().map(String::as_str));
    let (code, json, _) = attnscope(&args);
    assert_eq!(code, 0);
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let t = g.meta.tokens[0].len();
    let want = &g.tensors["attention"];
    let want_h = &g.tensors["hidden"];
    let mut max = 0.0f64;
    let mut max_h = 0.0f64;
    for (b, r) in results.iter().enumerate() {
        assert_eq!(r["tokens"], serde_json::json!(g.meta.tokens[b]));
        assert_eq!(dims(&r["attention"]), [6, 12, t, t]);
        assert_eq!(dims(&r["hidden"]), [t, 384]);
        for l in 0..6 {
            for h in 0..12 {
                for q in 0..t {
                    for k in 0..t {
                        max = max.max(
                            (cell(&r["attention"], l, h, q, k) - want[[b, l, h, q, k]] as f64)
                                .abs(),
                        );
                    }
                }
            }
        }
        for q in 0..t {
            for d in 0..384 {
                max_h = max_h
                    .max((r["hidden"][q][d].as_f64().unwrap() - want_h[[b, q, d]] as f64).abs());
            }
        }
    }
    assert!(max <= 1e-4, "CLI attention differs from HF by {max}");
    assert!(max_h <= 1e-3, "CLI hidden differs from HF by {max_h}");
    assert!(results[2]["tokens"]
        .as_array()
        .unwrap()
        .contains(&Value::from("[PAD]")));
}

#[test]
fn causal_empties_the_upper_triangle_and_none_leaks_padding() {
    let dir = minilm();
    let (_, causal, _) = attnscope(&[
        "attention",
        "--model",
        &dir,
        "--mask",
        "causal",
        "time flies like an arrow",
        "hi",
    ]);
    let (_, none, _) = attnscope(&[
        "attention",
        "--model",
        &dir,
        "--mask",
        "none",
        "time flies like an arrow",
        "hi",
    ]);
    let (_, pad, _) = attnscope(&[
        "attention",
        "--model",
        &dir,
        "time flies like an arrow",
        "hi",
    ]);
    let c = &causal["results"][0]["attention"];
    for q in 0..7 {
        for k in q + 1..7 {
            assert_eq!(cell(c, 3, 5, q, k), 0.0);
        }
    }
    // "hi" is [CLS] hi [SEP] + 4 × [PAD]
    assert_eq!(cell(&pad["results"][1]["attention"], 0, 0, 1, 5), 0.0);
    assert!(cell(&none["results"][1]["attention"], 0, 0, 1, 5) > 0.0);
    assert_eq!(causal["mask"], "causal");
}

#[test]
fn pair_makes_one_sentence_pair() {
    let (code, json, _) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--pair",
        "it was very comfortable.",
        "The cat sat on the mat.",
    ]);
    assert_eq!(code, 0);
    let g = golden("minilm_pair");
    assert_eq!(
        json["results"][0]["tokens"],
        serde_json::json!(g.meta.tokens[0])
    );
    assert_eq!(json["results"][0]["pair"], "it was very comfortable.");
    // where the pair starts, as bertviz finds it: HF's first token type id of 1
    let b_start = g.meta.type_ids[0].iter().position(|&t| t == 1).unwrap();
    assert_eq!(json["results"][0]["sentence_b_start"], b_start);
    assert_eq!(json["results"][0]["tokens"][b_start - 1], "[SEP]");
    // a text alone has none
    let (_, alone, _) = attnscope(&["attention", "--model", &minilm(), "The cat sat."]);
    assert!(alone["results"][0].get("sentence_b_start").is_none());
}

#[test]
fn classification_checkpoints_report_logits() {
    let dir = model_dir("tiny-bert").display().to_string();
    let (code, json, _) = attnscope(&[
        "attention",
        "--model",
        &dir,
        "--scores",
        "the cat sat on the mat",
    ]);
    assert_eq!(code, 0);
    assert_eq!(dims(&json["results"][0]["logits"]), [3]);
    assert_eq!(dims(&json["results"][0]["scores"]), [2, 3, 8, 8]);
}

#[test]
fn errors_go_to_stderr_with_a_nonzero_exit() {
    let (code, _, err) = attnscope(&["attention", "--model", "/no/such/model", "hello"]);
    assert_ne!(code, 0);
    assert!(err.contains("/no/such/model/config.json"), "{err}");
    let (code, _, err) = attnscope(&["attention", "--model", &minilm(), "   "]);
    assert_ne!(code, 0);
    assert!(err.contains("empty"), "{err}");
    let (code, _, err) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--mask",
        "sideways",
        "hi",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("sideways"), "{err}");
}

#[test]
fn the_input_and_checkpoint_limits_are_errors_on_stderr() {
    let tiny = model_dir("tiny-bert").display().to_string();
    let five = ["time flies", "a cat", "the dog", "it was happy", "an arrow"];
    let (code, _, err) = attnscope(&[&["attention", "--model", &tiny, "--"][..], &five].concat());
    assert_ne!(code, 0);
    assert!(
        err.contains("a batch of 5 texts is over the limit of 4"),
        "{err}"
    );
    let (code, _, err) = attnscope(&["attention", "--model", &tiny, "\u{200B}\u{FEFF}"]);
    assert_ne!(code, 0);
    assert!(err.contains("text 0 has no tokens"), "{err}");
    // a checkpoint whose config claims a billion-wide hidden layer
    let dir = tempfile::tempdir().unwrap();
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(model_dir("tiny-bert").join(f), dir.path().join(f)).unwrap();
    }
    let config = std::fs::read_to_string(model_dir("tiny-bert").join("config.json")).unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        config.replace("\"hidden_size\": 24", "\"hidden_size\": 1000000000"),
    )
    .unwrap();
    let path = dir.path().display().to_string();
    let (code, _, err) = attnscope(&["attention", "--model", &path, "hello"]);
    assert_ne!(code, 0);
    assert!(
        err.contains(&format!("{path}/config.json"))
            && err.contains("`hidden_size` 1000000000 is over the limit of 8192"),
        "{err}"
    );
}

#[test]
fn truncation_is_reported() {
    let long = "word ".repeat(600);
    let (code, json, err) = attnscope(&["attention", "--model", &minilm(), &long]);
    assert_eq!(code, 0);
    assert_eq!(json["results"][0]["truncated"], true);
    assert_eq!(json["results"][0]["tokens"].as_array().unwrap().len(), 512);
    assert!(err.contains("truncated"), "{err}");
}

#[test]
fn the_gpu_backend_names_its_adapter_and_equals_the_cpu() {
    let dir = minilm();
    let run = |b: &str| {
        attnscope(&[
            "attention",
            "--model",
            &dir,
            "--backend",
            b,
            "--mask",
            "causal",
            "time flies like an arrow",
            "hi",
        ])
    };
    let (code, gpu, _) = run("gpu");
    assert_eq!(code, 0);
    let name = gpu["backend"].as_str().unwrap();
    assert!(name.starts_with("gpu: ") && name.ends_with(')'), "{name}");
    let (_, cpu, _) = run("cpu");
    let (g, c) = (
        &gpu["results"][1]["attention"],
        &cpu["results"][1]["attention"],
    );
    assert_eq!(dims(g), [6, 12, 7, 7]);
    let max = max_diff(g, c);
    assert!(max <= 1e-4, "gpu and cpu differ by {max}");
}

#[test]
fn without_an_adapter_gpu_is_an_error_and_auto_says_it_fell_back() {
    // Vulkan only, with no Vulkan driver: no adapter at all.
    let none = [
        ("WGPU_BACKEND", "vulkan"),
        ("VK_ICD_FILENAMES", "/dev/null"),
        ("VK_DRIVER_FILES", "/dev/null"),
    ];
    let dir = minilm();
    let (code, _, err) = attnscope_env(
        &["attention", "--model", &dir, "--backend", "gpu", "hi"],
        &none,
    );
    assert_ne!(code, 0);
    assert!(err.contains("no GPU adapter"), "{err}");
    let (code, json, err) = attnscope_env(
        &["attention", "--model", &dir, "--backend", "auto", "hi"],
        &none,
    );
    assert_eq!(code, 0);
    assert_eq!(json["backend"], "cpu");
    assert!(json["fallback"]
        .as_str()
        .unwrap()
        .contains("no GPU adapter"));
    assert!(err.contains("running on the CPU"), "{err}");
}

/// `attnscope bench --backend cpu` prints one row per length, the length first and the CPU
/// engine's ms second: scripts read it.
#[test]
fn bench_on_the_cpu_prints_one_row_per_length() {
    let out = Command::new(env!("CARGO_BIN_EXE_attnscope"))
        .args(["bench", "--model", &minilm(), "--backend", "cpu"])
        .args(["--lengths", "8,12", "--iters", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.first().is_some_and(|w| w.parse::<usize>().is_ok()))
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    for (row, t) in rows.iter().zip(["8", "12"]) {
        assert_eq!(row[0], t, "{stdout}");
        assert!(row[1].parse::<f64>().unwrap() > 0.0, "{stdout}");
    }
}

#[test]
fn reading_the_heads_adds_its_fields_and_leaves_the_rest() {
    let (code, json, _) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--head-metrics",
        "--rollout",
        "--sentence-embedding",
        "--head-mask",
        "0:1,5:11",
        "--",
        "time flies like an arrow",
        "hi",
    ]);
    assert_eq!(code, 0);
    assert_eq!(json["head_mask"], serde_json::json!([[0, 1], [5, 11]]));
    let r = &json["results"][1];
    assert_eq!(r["length"], 3, "hi: [CLS] hi [SEP], then padding");
    assert_eq!(dims(&r["attention"]), [6, 12, 7, 7]);
    let metrics = r["head_metrics"].as_object().unwrap();
    let names: Vec<&str> = metrics.keys().map(String::as_str).collect();
    for name in [
        "entropy", "to_cls", "to_sep", "to_self", "to_prev", "to_next", "distance", "to_first",
        "sink",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
        assert_eq!(dims(&metrics[name]), [6, 12], "{name}");
    }
    assert_eq!(dims(&r["rollout"]), [7, 7]);
    assert_eq!(
        r["rollout"][5][5], 0.0,
        "padding rows and columns of the rollout are 0"
    );
    assert_eq!(dims(&r["sentence_embedding"]), [384]);
    let norm: f64 = r["sentence_embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap().powi(2))
        .sum();
    assert!((norm - 1.0).abs() < 1e-5, "L2-normalised: {norm}");
    // without the flags, none of it
    let (_, plain, _) = attnscope(&["attention", "--model", &minilm(), "--", "hi"]);
    for key in ["head_metrics", "rollout", "sentence_embedding"] {
        assert!(plain["results"][0].get(key).is_none(), "{key}");
    }
    assert!(plain.get("head_mask").is_none());
}

/// `--head-roles --period N` adds each head's four role scores (checked against HF's in
/// `golden_heads::head_roles_equal_hfs`) for every text of a batch; a text that does not repeat,
/// or no `--period`, is an error.
#[test]
fn head_roles_add_four_scores_per_head_and_need_a_repeated_text() {
    let dir = minilm();
    let roles = |texts: &[&str]| {
        let args = [
            "attention",
            "--model",
            &dir,
            "--head-roles",
            "--period",
            "4",
            "--",
        ];
        attnscope(&[args.as_slice(), texts].concat())
    };
    let words = "river green table music";
    let (code, json, err) = roles(&[
        &format!("{words} {words}"),
        &format!("{words} {words} {words}"),
    ]);
    assert_eq!(code, 0, "{err}");
    for r in json["results"].as_array().unwrap() {
        let roles = r["head_roles"].as_object().unwrap();
        let mut names: Vec<&str> = roles.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["duplicate_token", "induction", "previous_token", "sink"]
        );
        for name in names {
            assert_eq!(dims(&roles[name]), [6, 12], "{name}");
        }
    }
    let (code, _, err) = roles(&["river green table music river green table art"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("its token 7 (\"art\") is not its token 3 (\"music\")"),
        "{err}"
    );
    let (code, _, err) = attnscope(&["attention", "--model", &minilm(), "--head-roles", "hi"]);
    assert_ne!(code, 0);
    assert!(err.contains("--period"), "{err}");
    let (_, plain, _) = attnscope(&["attention", "--model", &minilm(), "--", "hi"]);
    assert!(plain["results"][0].get("head_roles").is_none());
}

#[test]
fn a_head_mask_naming_a_missing_head_is_an_error() {
    let (code, _, err) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--head-mask",
        "6:0",
        "--",
        "hi",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("head 6:0 does not exist") && err.contains("6 layers of 12 heads"),
        "{err}"
    );
    let (code, _, err) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--head-mask",
        "zero",
        "--",
        "hi",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("expected LAYER:HEAD"), "{err}");
}

/// `--heads` gives the heads asked for, computed from the kept queries and keys, equal to the
/// same heads of the whole attention; the head metrics read every head so; a head the model
/// lacks is named.
#[test]
fn heads_gives_those_heads_computed_again_equal_to_the_whole_attention() {
    let dir = model_dir("tiny-llama").display().to_string();
    let text = "time flies like an arrow and fruit flies like a banana";
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "attention",
            "--model",
            &dir,
            "--head-metrics",
            "--top-k",
            "2",
        ];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--", text]);
        a
    };
    let (code, whole, err) = attnscope(&args(&[]));
    assert_eq!(code, 0, "{err}");
    let (code, some, err) = attnscope(&args(&["--heads", "1:3,0:0", "--scores"]));
    assert_eq!(code, 0, "{err}");
    let (w, g) = (&whole["results"][0], &some["results"][0]);
    assert!(g.get("attention").is_none(), "no [L][H][T][T] with --heads");
    let heads = g["heads"].as_array().unwrap();
    let t = w["tokens"].as_array().unwrap().len();
    // in layer order, then head
    for (one, (l, h)) in heads.iter().zip([(0, 0), (1, 3)]) {
        assert_eq!(
            (one["layer"].as_u64(), one["head"].as_u64()),
            (Some(l), Some(h))
        );
        assert_eq!(dims(&one["attention"]), [t, t]);
        assert_eq!(dims(&one["scores"]), [t, t]);
        let mut worst = 0f64;
        for q in 0..t {
            for k in 0..t {
                let got = one["attention"][q][k].as_f64().unwrap();
                worst =
                    worst.max((got - cell(&w["attention"], l as usize, h as usize, q, k)).abs());
            }
        }
        assert!(
            worst <= 1e-6,
            "head {l}:{h} differs from the whole attention by {worst}"
        );
    }
    for key in ["head_metrics", "next_tokens", "tokens"] {
        assert_eq!(g[key], w[key], "{key}");
    }
    let (code, _, err) = attnscope(&args(&["--heads", "2:0"]));
    assert_ne!(code, 0);
    assert!(err.contains("layer 2 does not exist"), "{err}");
}

#[test]
fn inside_the_encoder_adds_its_fields_and_leaves_the_rest() {
    let (code, json, _) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--hidden-states",
        "--layer-trace",
        "0",
        "--",
        "time flies like an arrow",
        "hi",
    ]);
    assert_eq!(code, 0);
    assert!(json.get("scale").is_none(), "√d_k is the default, unnamed");
    let r = &json["results"][1];
    assert_eq!(dims(&r["attention"]), [6, 12, 7, 7]);
    assert_eq!(dims(&r["hidden_states"]), [7, 7, 384]);
    let lt = &r["layer_trace"];
    assert_eq!(lt["layer"], 0);
    for key in ["word", "position", "token_type", "sum", "normed"] {
        assert_eq!(dims(&lt["embeddings"][key]), [7, 384], "embeddings.{key}");
    }
    for key in [
        "input",
        "q",
        "k",
        "v",
        "context",
        "attention_output",
        "output",
    ] {
        assert_eq!(dims(&lt[key]), [7, 384], "{key}");
    }
    assert_eq!(dims(&lt["intermediate"]), [7, 1536]);
    // the embeddings' output enters layer 0, and layer 0's output is hidden state 1
    assert_eq!(lt["embeddings"]["normed"], lt["input"]);
    assert_eq!(lt["input"], r["hidden_states"][0]);
    assert_eq!(lt["output"], r["hidden_states"][1]);
    // a later layer has no embeddings
    let (_, later, _) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--layer-trace",
        "5",
        "--",
        "hi",
    ]);
    let lt = &later["results"][0]["layer_trace"];
    assert_eq!(lt["layer"], 5);
    assert!(lt.get("embeddings").is_none());
    // without the flags, none of it
    let (_, plain, _) = attnscope(&["attention", "--model", &minilm(), "--", "hi"]);
    for key in ["hidden_states", "layer_trace", "cross_attention"] {
        assert!(plain["results"][0].get(key).is_none(), "{key}");
    }
}

#[test]
fn a_llama_layer_trace_names_its_norms_rotations_and_gate_and_no_rope_says_so() {
    let dir = root().join("tests/fixtures/models/tiny-llama");
    let dir = dir.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["attention", "--model", dir, "--layer-trace", "1"];
        args.extend_from_slice(extra);
        args.extend(["--", "time flies like an arrow"]);
        attnscope(&args)
    };
    let (code, json, err) = run(&[]);
    assert_eq!(code, 0, "{err}");
    assert!(json.get("no_rope").is_none());
    let lt = &json["results"][0]["layer_trace"];
    let t = json["results"][0]["tokens"].as_array().unwrap().len();
    // d_model 256, 4 query heads over 2 key/value heads of 48, intermediate 256
    for (key, shape) in [
        ("attn_norm", vec![t, 256]),
        ("ffn_norm", vec![t, 256]),
        ("q", vec![t, 192]),
        ("k", vec![t, 96]),
        ("q_rope", vec![4, t, 48]),
        ("k_rope", vec![2, t, 48]),
        ("gate", vec![t, 256]),
        ("up", vec![t, 256]),
        ("act", vec![t, 256]),
    ] {
        assert_eq!(dims(&lt[key]), shape, "{key}");
    }
    // gate and act are the feed-forward's pre_activation and intermediate, by their gated names
    assert_eq!(lt["gate"], lt["pre_activation"]);
    assert_eq!(lt["act"], lt["intermediate"]);
    // position 0 is turned by angle 0: its rotated query is query head 1's slice of q
    let q0 = lt["q"][0].as_array().unwrap();
    assert_eq!(lt["q_rope"][1][0].as_array().unwrap()[..], q0[48..96]);
    assert_ne!(
        lt["q_rope"][1][1].as_array().unwrap()[..],
        lt["q"][1].as_array().unwrap()[48..96]
    );
    // --no-rope: the rotation left out, and said
    let (code, plain, err) = run(&["--no-rope"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(plain["no_rope"], true);
    let lt = &plain["results"][0]["layer_trace"];
    assert_eq!(
        lt["q_rope"][1][1].as_array().unwrap()[..],
        lt["q"][1].as_array().unwrap()[48..96]
    );
    assert_ne!(
        plain["results"][0]["attention"],
        json["results"][0]["attention"]
    );
    // a model without rotary positions refuses it
    let (code, _, err) = attnscope(&["attention", "--model", &minilm(), "--no-rope", "--", "hi"]);
    assert_ne!(code, 0);
    assert!(err.contains("no rotary positions to leave out"), "{err}");
}

#[test]
fn a_gemma_3_result_says_what_each_layer_is_and_its_layer_trace_names_its_norms() {
    let dir = root().join("tests/fixtures/models/v5-gemma3");
    let dir = dir.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["attention", "--model", dir, "--layer-trace", "5"];
        args.extend_from_slice(extra);
        args.extend(["--", "time flies like an arrow"]);
        attnscope(&args)
    };
    let (code, json, err) = run(&[]);
    assert_eq!(code, 0, "{err}");
    // five sliding layers (a window of 5, θ 10,000) to each global one (θ 1,000,000)
    let layers = json["architecture"]["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 6);
    for (l, layer) in layers.iter().enumerate() {
        let sliding = l < 5;
        assert_eq!(
            layer["attention"],
            if sliding { "sliding" } else { "global" },
            "layer {l}"
        );
        assert_eq!(
            layer["window"],
            if sliding {
                5.into()
            } else {
                serde_json::Value::Null
            },
            "layer {l}"
        );
        assert_eq!(
            layer["rotary"]["theta"],
            if sliding { 10000.0 } else { 1000000.0 },
            "layer {l}"
        );
        assert_eq!(layer["qk_norm"], true, "layer {l}");
        assert_eq!(layer["norms"], "both", "layer {l}");
    }
    assert!(json.get("no_qk_norm").is_none());
    let lt = &json["results"][0]["layer_trace"];
    let t = json["results"][0]["tokens"].as_array().unwrap().len();
    // d_model 32, 4 query heads over 2 key/value heads of 16
    for (key, shape) in [
        ("q_normed", vec![4, t, 16]),
        ("k_normed", vec![2, t, 16]),
        ("post_attention_norm", vec![t, 32]),
        ("post_ffn_norm", vec![t, 32]),
    ] {
        assert_eq!(dims(&lt[key]), shape, "{key}");
    }
    // --no-qk-norm: the heads as projected, and said; the attention moves
    let (code, plain, err) = run(&["--no-qk-norm"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(plain["no_qk_norm"], true);
    assert_ne!(
        plain["results"][0]["attention"],
        json["results"][0]["attention"]
    );
    // a model without QK-norm refuses it
    let (code, _, err) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--no-qk-norm",
        "--",
        "hi",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("no QK-norm to leave out"), "{err}");
}

#[test]
fn no_scale_saturates_softmax_and_says_so() {
    let dir = minilm();
    let run = |extra: &[&str]| {
        let mut args = vec!["attention", "--model", &dir, "--scores"];
        args.extend_from_slice(extra);
        args.extend([
            "--",
            "The animal didn't cross the street because it was too tired.",
        ]);
        attnscope(&args)
    };
    let (code, unscaled, _) = run(&["--no-scale"]);
    assert_eq!(code, 0);
    assert_eq!(unscaled["scale"], "none");
    let (_, scaled, _) = run(&[]);
    // QKᵀ vs QKᵀ/√d_k: layer 0 sees the same input, so its scores differ by √32 exactly
    let (u, s) = (
        cell(&unscaled["results"][0]["scores"], 0, 0, 1, 2),
        cell(&scaled["results"][0]["scores"], 0, 0, 1, 2),
    );
    assert!((u / 32f64.sqrt() - s).abs() < 1e-4, "{u} vs {s}");
    // the largest probability of each row is closer to 1 without the scale
    let peak = |json: &Value| {
        let att = json["results"][0]["attention"][0].as_array().unwrap();
        let rows: Vec<f64> = att
            .iter()
            .flat_map(|head| head.as_array().unwrap())
            .map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_f64().unwrap())
                    .fold(0.0, f64::max)
            })
            .collect();
        rows.iter().sum::<f64>() / rows.len() as f64
    };
    assert!(
        peak(&unscaled) > peak(&scaled) + 0.1,
        "{} vs {}",
        peak(&unscaled),
        peak(&scaled)
    );
}

#[test]
fn cross_attention_runs_the_pair_alone_and_needs_a_pair() {
    let (code, json, _) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--pair",
        "It was very comfortable.",
        "--cross-attention",
        "2",
        "--",
        "The cat sat on the mat.",
    ]);
    assert_eq!(code, 0);
    let ca = &json["results"][0]["cross_attention"];
    assert_eq!(ca["layer"], 2);
    assert_eq!(
        ca["queries"],
        serde_json::json!(["[CLS]", "it", "was", "very", "comfortable", ".", "[SEP]"])
    );
    assert_eq!(ca["keys"].as_array().unwrap().len(), 9);
    assert_eq!(dims(&ca["attention"]), [12, 7, 9]);
    let row: f64 = ca["attention"][4][3]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_f64().unwrap())
        .sum();
    assert!((row - 1.0).abs() < 1e-5, "rows sum to 1: {row}");
    let (code, _, err) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--cross-attention",
        "2",
        "--",
        "hi",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--pair"), "{err}");
}

#[test]
fn layers_out_of_range_are_errors_naming_the_layer_count() {
    let dir = minilm();
    for flags in [
        &["--layer-trace", "6"][..],
        &["--pair", "there", "--cross-attention", "6"][..],
    ] {
        let mut args = vec!["attention", "--model", &dir];
        args.extend_from_slice(flags);
        args.extend(["--", "hi"]);
        let (code, _, err) = attnscope(&args);
        assert_ne!(code, 0, "{flags:?}");
        assert!(
            err.contains("layer 6 does not exist") && err.contains("6 layers"),
            "{flags:?}: {err}"
        );
    }
}

/// `translate` prints HF's generation for each source, cut to its own lengths, with every
/// field of the contract; `--target` teacher-forces; `attention` on Marian and `translate` on
/// an encoder say which to use.
#[test]
fn translate_prints_the_contract_equal_to_hf() {
    let meta: TranslationMeta = golden_meta("marian_generate");
    let tensors = golden_tensors("marian_generate");
    let dir = model_dir(&meta.model).display().to_string();
    let max = meta.max_new_tokens.to_string();
    let mut args = vec![
        "translate",
        "--model",
        &dir,
        "--max-new-tokens",
        &max,
        "--top-k",
        "3",
        "--",
    ];
    args.extend(meta.items.iter().map(|i| i.source.as_str()));
    let (code, v, err) = attnscope(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["model_type"], "marian");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), meta.items.len());
    for (i, (r, item)) in results.iter().zip(&meta.items).enumerate() {
        let ids = |k: &str| -> Vec<u64> {
            r[k].as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect()
        };
        assert_eq!(
            ids("source_ids"),
            item.source_ids
                .iter()
                .map(|&x| x as u64)
                .collect::<Vec<_>>()
        );
        assert_eq!(
            ids("output_ids"),
            item.output_ids
                .iter()
                .map(|&x| x as u64)
                .collect::<Vec<_>>()
        );
        assert_eq!(r["source_tokens"], serde_json::json!(item.source_tokens));
        assert_eq!(r["source_offsets"], serde_json::json!(item.source_offsets));
        assert_eq!(r["output_tokens"], serde_json::json!(item.output_tokens));
        assert_eq!(r["output_text"], item.output_text.as_str());
        let (s, t) = (item.source_ids.len(), item.output_ids.len() - 1);
        for (name, shape) in [
            ("encoder_attention", [s, s]),
            ("decoder_attention", [t, t]),
            ("cross_attention", [t, s]),
        ] {
            let hf = &tensors[&format!("{name}_{i}")];
            let d = dims(&r[name]);
            assert_eq!(d, hf.shape(), "{name} of item {i}");
            assert_eq!(d[2..], shape);
            let ours: Vec<f32> = flatten(&r[name]);
            let diff = ours
                .iter()
                .zip(hf.iter())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(
                diff <= ATTENTION_TOL,
                "{name} of item {i} differs from HF by {diff}"
            );
        }
        let steps = r["steps"].as_array().unwrap();
        assert_eq!(steps.len(), t);
        let probs = &tensors[&format!("step_probs_{i}")];
        for (k, step) in steps.iter().enumerate() {
            let top = step["top_k"].as_array().unwrap();
            assert_eq!(top.len(), 3);
            let (id, p) = (
                top[0]["id"].as_u64().unwrap() as usize,
                top[0]["p"].as_f64().unwrap() as f32,
            );
            assert!(
                (probs[[k, id]] - p).abs() <= ATTENTION_TOL,
                "step {k} of item {i}"
            );
        }
    }

    // the GPU engine (lavapipe where there is no GPU) prints the same
    let gpu_args: Vec<&str> = [&args[..3], &["--backend", "gpu"], &args[3..]].concat();
    let (code, g, err) = attnscope(&gpu_args);
    assert_eq!(code, 0, "{err}");
    assert!(
        g["backend"].as_str().unwrap().starts_with("gpu"),
        "{}",
        g["backend"]
    );
    for (r, c) in g["results"].as_array().unwrap().iter().zip(results) {
        assert_eq!(r["output_ids"], c["output_ids"]);
        let (a, b) = (
            flatten(&r["cross_attention"]),
            flatten(&c["cross_attention"]),
        );
        let d = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(
            a.len() == b.len() && d <= ATTENTION_TOL,
            "the GPU's cross-attention differs by {d}"
        );
    }

    let (code, v, err) = attnscope(&[
        "translate",
        "--model",
        &dir,
        "--target",
        "2018-05-09",
        "--",
        "the 9th of May 2018",
    ]);
    assert_eq!(code, 0, "{err}");
    let r = &v["results"][0];
    assert_eq!(r["target"], "2018-05-09");
    assert_eq!(r["output_text"], "2018-05-09");
    let t = r["output_ids"].as_array().unwrap().len() - 1;
    assert_eq!(dims(&r["cross_attention"])[2], t);

    let (code, _, err) = attnscope(&["attention", "--model", &dir, "--", "hi"]);
    assert_ne!(code, 0);
    assert!(err.contains("attnscope translate"), "{err}");
    let (code, _, err) = attnscope(&[
        "translate",
        "--model",
        &model_dir("tiny-gpt2").display().to_string(),
        "--",
        "hi",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("not an encoder–decoder"), "{err}");
}

fn flatten(v: &Value) -> Vec<f32> {
    match v.as_array() {
        Some(a) => a.iter().flat_map(flatten).collect(),
        None => vec![v.as_f64().unwrap() as f32],
    }
}

/// A GGUF header of version 3 with no tensors and these string keys.
fn gguf_header(kvs: &[(&str, &str)]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend((kvs.len() as u64).to_le_bytes());
    let string = |b: &mut Vec<u8>, s: &str| {
        b.extend((s.len() as u64).to_le_bytes());
        b.extend(s.as_bytes());
    };
    for (k, v) in kvs {
        string(&mut b, k);
        b.extend(8u32.to_le_bytes()); // a string
        string(&mut b, v);
    }
    b
}

/// The CLI on `args`: its exit code, stderr and peak resident memory in KiB (this child's alone:
/// `wait4` on its pid).
#[allow(clippy::zombie_processes)] // reaped by wait4, which std's `wait` would not let read its usage
fn attnscope_rss(args: &[&str]) -> (i32, String, i64) {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_attnscope"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    (libc::WEXITSTATUS(status), err, usage.ru_maxrss)
}

#[test]
fn a_refused_or_hostile_gguf_file_of_a_gib_is_refused_from_its_header_in_little_memory() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        // an architecture no family runs, then 1 GiB (sparse: no disk taken)
        (
            "relabelled.gguf",
            gguf_header(&[("general.architecture", "gemmax")]),
            "general.architecture \"gemmax\" is not supported",
        ),
        // a header that claims a 2 GiB string
        (
            "hostile.gguf",
            {
                let mut b = gguf_header(&[]);
                b[16..24].copy_from_slice(&1u64.to_le_bytes());
                b.extend(20u64.to_le_bytes());
                b.extend(b"general.architecture");
                b.extend(8u32.to_le_bytes());
                b.extend((2u64 << 30).to_le_bytes());
                b
            },
            "hostile.gguf",
        ),
    ];
    for (name, head, want) in cases {
        let path = dir.path().join(name);
        let f = std::fs::File::create(&path).unwrap();
        use std::io::Write;
        (&f).write_all(&head).unwrap();
        f.set_len(1 << 30).unwrap();
        let (code, err, rss_kib) =
            attnscope_rss(&["attention", "--model", path.to_str().unwrap(), "--", "hi"]);
        eprintln!(
            "{name}: exit {code}, peak RSS {:.1} MiB: {}",
            rss_kib as f64 / 1024.0,
            err.trim()
        );
        assert_ne!(code, 0, "{name}");
        assert!(err.contains(want), "{name}: {err}");
        assert!(
            rss_kib < 64 * 1024,
            "{name}: peak RSS {rss_kib} KiB reading a refused 1 GiB file"
        );
    }
}

/// `--value-weighted` adds each key's `‖W_O^h v_j‖` ("value_norms", `[L][H][T]`) and every weight
/// times its key's ("value_weighted", `[L][H][T][T]`: HF's numbers in
/// `golden_heads::value_weighted_attention_equals_hfs`), for every text of a batch.
#[test]
fn value_weighted_attention_is_each_weight_times_its_keys_value_size() {
    let dir = minilm();
    let (code, json, err) = attnscope(&[
        "attention",
        "--model",
        &dir,
        "--value-weighted",
        "--",
        "The cat sat.",
        "A heavy weight can mean little.",
    ]);
    assert_eq!(code, 0, "{err}");
    for r in json["results"].as_array().unwrap() {
        let t = r["tokens"].as_array().unwrap().len();
        assert_eq!(dims(&r["value_norms"]), [6, 12, t]);
        assert_eq!(dims(&r["value_weighted"]), [6, 12, t, t]);
        let (a, n, w) = (&r["attention"], &r["value_norms"], &r["value_weighted"]);
        let at = |v: &serde_json::Value, ix: &[usize]| {
            ix.iter().fold(v, |v, &i| &v[i]).as_f64().unwrap()
        };
        for (l, h, q, k) in [(0, 0, 0, 0), (5, 11, t - 1, 1), (3, 7, 1, t - 1)] {
            let want = at(a, &[l, h, q, k]) * at(n, &[l, h, k]);
            assert!(
                (at(w, &[l, h, q, k]) - want).abs() <= 1e-6 * want.abs().max(1.0),
                "L{l} H{h} {q}→{k}"
            );
        }
    }
}

/// `--logit-attribution` splits the next token's logit into the embedding's, each head's, each
/// MLP's and the constants' writes, which sum to it (HF's numbers in
/// `golden_heads::logit_attribution_equals_hfs`), with the `--top-k` tokens each head promotes
/// and suppresses; `--position` and `--target` choose what; an encoder, or a model whose logits
/// are soft-capped, is an error saying why.
#[test]
fn logit_attribution_splits_the_logit_into_what_wrote_it() {
    let llama = root().join("tests/fixtures/models/tiny-llama");
    let llama = llama.to_str().unwrap();
    let (code, json, err) = attnscope(&[
        "attention",
        "--model",
        llama,
        "--logit-attribution",
        "--top-k",
        "3",
        "--position",
        "2",
        "--target",
        "10",
        "--",
        "the cat sat on the mat",
    ]);
    assert_eq!(code, 0, "{err}");
    let a = &json["results"][0]["logit_attribution"];
    assert_eq!(
        (a["position"].as_u64(), a["target"]["id"].as_u64()),
        (Some(2), Some(10))
    );
    assert_eq!(dims(&a["heads"]), [2, 4]);
    assert_eq!(dims(&a["promotes"]), [2, 4, 3]);
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    let heads: f64 = a["heads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l.as_array().unwrap().iter().map(f))
        .sum();
    let mlps: f64 = a["mlps"].as_array().unwrap().iter().map(f).sum();
    let total = f(&a["embedding"]) + heads + mlps + f(&a["other"]);
    assert!(
        (total - f(&a["logit"])).abs() <= 1e-4 * f(&a["logit"]).abs().max(1.0),
        "{total} vs {}",
        a["logit"]
    );
    // a head's promoted tokens, best first
    let top = &a["promotes"][0][0];
    assert!(f(&top[0]["value"]) >= f(&top[2]["value"]) && top[0]["token"].is_string());
    let (code, _, err) = attnscope(&[
        "attention",
        "--model",
        &minilm(),
        "--logit-attribution",
        "--",
        "hi",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("pre-norm decoder with an LM head"), "{err}");
    // a Gemma 3 whose logits are soft-capped: no write has a share of f·tanh(z/f)
    let capped = root().join("tests/fixtures/models/v5-gemma3-softcap");
    let capped = capped.to_str().unwrap();
    let (code, _, err) = attnscope(&[
        "attention",
        "--model",
        capped,
        "--logit-attribution",
        "--",
        "hi",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("not soft-capped"), "{err}");
}

/// `translate --value-weighted` adds each attention's value sizes and value-weighted attention,
/// cut to each item's own lengths: each weight times its key's size (HF's numbers in
/// `golden_heads::translation_value_weighted_equals_hfs`).
#[test]
fn translate_value_weighted_weighs_each_attention() {
    let dir = model_dir("tiny-marian").display().to_string();
    let (code, v, err) = attnscope(&[
        "translate",
        "--model",
        &dir,
        "--max-new-tokens",
        "5",
        "--value-weighted",
        "--",
        "time flies like an arrow",
        "hi",
    ]);
    assert_eq!(code, 0, "{err}");
    for r in v["results"].as_array().unwrap() {
        let (s, t) = (
            r["source_ids"].as_array().unwrap().len(),
            r["output_ids"].as_array().unwrap().len() - 1,
        );
        for (kind, q, k) in [("encoder", s, s), ("decoder", t, t), ("cross", t, s)] {
            let (a, n, w) = (
                &r[format!("{kind}_attention")],
                &r["value_norms"][kind],
                &r["value_weighted"][kind],
            );
            assert_eq!(dims(n), [2, 4, k], "{kind}'s value sizes");
            assert_eq!(dims(w), [2, 4, q, k], "{kind}'s value-weighted attention");
            let f = |x: &serde_json::Value| x.as_f64().unwrap();
            let (l, h, i, j) = (1, 2, q - 1, k - 1);
            let want = f(&a[l][h][i][j]) * f(&n[l][h][j]);
            assert!(
                (f(&w[l][h][i][j]) - want).abs() <= 1e-6 * want.abs().max(1.0),
                "{kind}"
            );
        }
    }
}

/// `--flow` gives the information-flow routes to the text's last position: HF's edges at the
/// fixture's threshold (`golden_heads::flow_equals_hfs` checks every importance), each edge
/// `{layer, head, from, to, importance}` with `head` null for the residual; `--threshold`
/// keeps fewer edges as it rises; an encoder is an error saying why.
#[test]
fn flow_gives_the_routes_to_the_last_position() {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/golden/flow_gpt2.json")).unwrap(),
    )
    .unwrap();
    let gpt2 = root().join("tests/fixtures/models/tiny-gpt2");
    let text = meta["texts"][0].as_str().unwrap();
    let run = |threshold: &str| {
        let (code, json, err) = attnscope(&[
            "attention",
            "--model",
            gpt2.to_str().unwrap(),
            "--flow",
            "--threshold",
            threshold,
            "--",
            text,
        ]);
        assert_eq!(code, 0, "{err}");
        json["results"][0]["flow"].clone()
    };
    let flow = run("0.04");
    let key = |e: &serde_json::Value| {
        (
            e["layer"].clone(),
            e["head"].clone(),
            e["from"].clone(),
            e["to"].clone(),
        )
    };
    let edges = flow["edges"].as_array().unwrap();
    assert_eq!(
        edges.iter().map(key).collect::<Vec<_>>(),
        meta["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(key)
            .collect::<Vec<_>>()
    );
    assert!(
        edges.iter().any(|e| e["head"].is_null()),
        "the residual's edges"
    );
    assert!(edges.iter().any(|e| e["head"].is_u64()), "the heads' edges");
    let last = meta["token_ids"][0].as_array().unwrap().len() as u64 - 1;
    assert!(edges.iter().any(|e| e["to"] == last && e["layer"] == 1));
    assert!(run("0.2")["edges"].as_array().unwrap().len() < edges.len());
    let (code, _, err) = attnscope(&["attention", "--model", &minilm(), "--flow", "--", "hi"]);
    assert_eq!(code, 1);
    assert!(err.contains("pre-norm decoder"), "{err}");
}

#[test]
fn the_fast_numerics_say_so_and_move_a_q4_1_model_a_little_but_not_on_the_gpu() {
    let path = root().join("tests/fixtures/models/tiny-llama-gguf/tiny-llama-Q4_1.gguf");
    let model = path.display().to_string();
    let run = |numerics: &str, backend: &str| {
        let (code, json, err) = attnscope(&[
            "attention",
            "--model",
            &model,
            "--numerics",
            numerics,
            "--backend",
            backend,
            "--",
            "the quick brown fox jumps over the lazy dog",
        ]);
        assert_eq!(code, 0, "{err}");
        json
    };
    let (exact, fast, gpu) = (run("exact", "cpu"), run("fast", "cpu"), run("fast", "gpu"));
    assert_eq!(exact.get("numerics"), None, "the exact numerics go unsaid");
    assert_eq!(fast["numerics"], "fast");
    assert_eq!(
        gpu.get("numerics"),
        None,
        "the GPU engine's numerics are exact"
    );
    let (e, f) = (
        &exact["results"][0]["attention"],
        &fast["results"][0]["attention"],
    );
    assert_eq!(dims(e).len(), 4, "(L, H, T, T)");
    let max = max_diff(e, f);
    assert!(
        max > 1e-6 && max < 0.1,
        "the fast numerics moved the attention by {max}"
    );
    let bad = attnscope(&["attention", "--model", &model, "--numerics", "quick", "hi"]);
    assert_ne!(bad.0, 0);
    assert!(bad.2.contains("unknown numerics \"quick\""), "{}", bad.2);
}
