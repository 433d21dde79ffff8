//! Checkpoints as transformers 5 saves them (tests/fixtures/models/v5-*, written by
//! `save_pretrained` in tools/make_fixtures.py `transformers5`): `rope_parameters` in place of a
//! top-level `rope_theta`, Qwen2's `layer_types`, weights under the names transformers 5 saves, a
//! chat template in `chat_template.jinja` that writes its own BOS; a Llama for each `rope_type`
//! (`linear`, `llama3`, `yarn`). Against HF on the CPU and GPU engines: ids, attention and
//! next-token probabilities, greedy generation after the chat template as HF's
//! `apply_chat_template(…, tokenize=True)` tokenises it; the same config in the older form gives
//! the same numbers; what cannot be honoured is refused, naming the key and its value.

use crate::common::*;
use attnscope::engine::{cpu, generate, GenerateOptions, TraceOptions};
use attnscope::families::read_config;
use attnscope::model::config::{Config, Positions, Reach};
use attnscope::model::rope::RopeScaling;
use attnscope::{Mask, Model};
use ndarray::Axis;
use pollster::block_on;
use std::path::Path;

/// The decoder-only folders' padded batches (attention, hidden states, next-token probabilities).
const DECODER_CASES: [&str; 12] = [
    "v5_llama",
    "v5_llama_linear",
    "v5_llama_llama3",
    "v5_llama_yarn",
    "v5_qwen2",
    "v5_qwen3",
    "v5_mistral",
    "v5_gemma3",
    // its logits soft-capped (`final_logit_softcapping`)
    "v5_gemma3_softcap",
    "v5_gpt2",
    // QK-norm left out (`--no-qk-norm`): HF's q_norm and k_norm made identities
    "v5_qwen3_noqknorm",
    "v5_gemma3_noqknorm",
];
/// The encoders' padded batches (`check_golden`: tokens, type ids, attention, hidden).
const ENCODER_CASES: [&str; 3] = ["v5_bert", "v5_roberta", "v5_distilbert"];
/// Greedy generations after the chat template.
const GENERATE_CASES: [&str; 9] = [
    "v5_llama_generate",
    "v5_llama_linear_generate",
    "v5_llama_llama3_generate",
    "v5_llama_yarn_generate",
    "v5_qwen2_generate",
    "v5_qwen3_generate",
    "v5_mistral_generate",
    "v5_gemma3_generate",
    "v5_gemma3_softcap_generate",
];
/// The folders of a scaled `rope_type`.
const ROPE_FOLDERS: [&str; 3] = ["v5-llama-linear", "v5-llama-llama3", "v5-llama-yarn"];

#[test]
fn every_transformers5_fixture_has_a_test() {
    let mut cases: Vec<&str> = [&DECODER_CASES[..], &ENCODER_CASES, &GENERATE_CASES].concat();
    cases.push("v5_marian_generate");
    assert_cases_cover_fixtures(&cases, |n| n.starts_with("v5_"));
}

/// What a decoder case's reference computed: every hidden state and the LM head's logits, with
/// QK-norm left out where it was.
fn options(g: &Golden) -> TraceOptions {
    TraceOptions {
        hidden_states: true,
        lm_logits: true,
        no_qk_norm: g.meta.no_qk_norm,
        ..TraceOptions::default()
    }
}

#[test]
fn every_transformers5_folder_equals_hf_on_the_cpu_engine() {
    for name in DECODER_CASES {
        let (g, m, input, mask) = case_input(name);
        assert_lm_case(
            &format!("{name} cpu"),
            &g,
            &cpu::forward(m, &input, &mask, &options(&g)).unwrap(),
        );
    }
    for name in ENCODER_CASES {
        check_golden(name, &|m, input, mask| {
            cpu::forward(m, input, mask, &golden_options())
        });
    }
}

#[test]
fn every_transformers5_folder_equals_hf_on_the_gpu_engine() {
    for name in DECODER_CASES {
        let (g, m, input, mask) = case_input(name);
        let trace = block_on(gpu_engine(m).forward(m, &input, &mask, &options(&g)))
            .unwrap()
            .0;
        assert_lm_case(&format!("{name} gpu"), &g, &trace);
    }
    for name in ENCODER_CASES {
        check_golden(name, &gpu_forward);
    }
}

/// A generation case's user message (its `chat`, the conversation HF's template was given).
fn user_message(name: &str) -> String {
    let meta: serde_json::Value = golden_meta(name);
    meta["chat"][0]["content"].as_str().unwrap().to_owned()
}

#[test]
fn greedy_generation_after_the_chat_template_equals_hf_on_both_engines() {
    for name in GENERATE_CASES {
        let meta: GenerateMeta = golden_meta(name);
        let want = golden_tensors(name);
        let m = model(&meta.model);
        // the prompt as HF's apply_chat_template(…, tokenize=True) gives it: one BOS, the
        // template's own
        let (_, chat) = m.encode_chat(&[&user_message(name)]).unwrap();
        let ids: Vec<u32> = chat.ids.row(0).to_vec();
        assert_eq!(ids, meta.prompt_ids, "{name}: the chat prompt's ids");
        let opts = GenerateOptions {
            max_new_tokens: meta.max_new_tokens,
            top_k: 5,
            stop_at_eos: true,
            head_mask: Default::default(),
            numerics: Default::default(),
        };
        let cpu_gen = generate(m, &meta.prompt_ids, &opts).unwrap();
        let gpu_gen = block_on(gpu_engine(m).generate(m, &meta.prompt_ids, &opts)).unwrap();
        for (engine, g) in [("cpu", &cpu_gen), ("gpu", &gpu_gen)] {
            assert_eq!(g.output_ids, meta.output_ids, "{name} {engine}: greedy ids");
            for (i, top) in meta.step_top5_ids.iter().enumerate() {
                let ids: Vec<u32> = g.next[i].iter().map(|t| t.id).collect();
                assert_eq!(&ids, top, "{name} {engine}: step {i}'s five likeliest");
            }
            let att = max_abs_diff(
                g.attention.view().insert_axis(Axis(0)).into_dyn(),
                want["attention"].view(),
            );
            eprintln!("{name} {engine}: cached generation vs HF's pass, attention {att:.2e}");
            assert!(att <= ATTENTION_TOL, "{name} {engine}: attention {att}");
        }
        assert_cached_equals_the_full_pass(name, m, &cpu_gen, meta.prompt_ids.len(), &opts);
    }
}

#[test]
fn a_template_that_writes_its_bos_gives_one_bos_in_the_cli_as_in_hf() {
    let name = "v5_llama_generate";
    let meta: GenerateMeta = golden_meta(name);
    assert_eq!(
        meta.prompt_ids.iter().filter(|&&id| id == 1).count(),
        1,
        "HF's prompt has one BOS"
    );
    let dir = model_dir("v5-llama");
    // the tokenizer adds a BOS before a text of its own: the template's is not doubled
    let plain = model("v5-llama")
        .tokenizer
        .encode(&["time flies"], None)
        .unwrap();
    assert_eq!(
        plain.ids[[0, 0]],
        1,
        "the tokenizer adds a BOS to plain text"
    );
    let max = meta.max_new_tokens.to_string();
    let json = cli(&[
        "generate",
        "--model",
        dir.to_str().unwrap(),
        "--max-new-tokens",
        &max,
        "--chat",
        "--",
        &user_message(name),
    ])
    .unwrap();
    let ids = |k: &str| -> Vec<u32> {
        json[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    assert_eq!(ids("prompt_ids"), meta.prompt_ids);
    assert_eq!(ids("output_ids"), meta.output_ids);
    // `attention --chat` reads the same tokens
    let json = cli(&[
        "attention",
        "--model",
        dir.to_str().unwrap(),
        "--chat",
        "--",
        &user_message(name),
    ])
    .unwrap();
    let got: Vec<u32> = json["results"][0]["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(got, meta.prompt_ids);
}

/// A copy of test checkpoint `name` whose config.json `edit` changed.
fn edited(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    let src = model_dir(name);
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
    dir
}

/// A transformers 5 config written in the form before it: a top-level `rope_theta`, and
/// `rope_scaling` with the type as `type` (null for the default rotation).
fn old_form(config: &mut serde_json::Value) {
    let mut rope = config
        .as_object_mut()
        .unwrap()
        .remove("rope_parameters")
        .unwrap();
    let params = rope.as_object_mut().unwrap();
    config["rope_theta"] = params.remove("rope_theta").unwrap();
    let kind = params.remove("rope_type").unwrap();
    config["rope_scaling"] = if kind == "default" {
        serde_json::Value::Null
    } else {
        params.insert("type".into(), kind);
        rope
    };
}

/// The CPU engine's attention and next-token probabilities over `texts` of the checkpoint in `dir`.
fn run(dir: &Path, texts: &[&str]) -> (ndarray::Array5<f32>, ndarray::Array3<f32>) {
    let m = Model::from_dir(dir).unwrap();
    let input = m.tokenizer.encode(texts, None).unwrap();
    let mask = Mask::from_kind(m.own_mask(), input.valid.view());
    let opts = TraceOptions {
        lm_logits: true,
        ..TraceOptions::default()
    };
    let t = cpu::forward(&m, &input, &mask, &opts).unwrap();
    let probs = attnscope::families::next_token_probs(t.lm_logits.as_ref().unwrap());
    (t.attention, probs)
}

#[test]
fn a_config_in_the_older_form_gives_the_same_numbers_as_in_transformers_5s() {
    let texts = [
        "time flies like an arrow and fruit flies like a banana",
        "hi",
    ];
    for name in ["v5-llama", "v5-qwen2"].into_iter().chain(ROPE_FOLDERS) {
        let old = edited(name, old_form);
        let new_config = &model(name).config.architecture;
        let old_config = &Model::from_dir(old.path()).unwrap().config.architecture;
        assert_eq!(new_config.positions, old_config.positions, "{name}");
        let (a, p) = run(&model_dir(name), &texts);
        let (b, q) = run(old.path(), &texts);
        assert!(a == b && p == q, "{name}: the two forms differ");
    }
}

/// What attnscope read of these folders before it read `rope_parameters` (θ = 10,000, the default
/// rotation) is far from HF's numbers: the fixtures tell a wrong rotation from the right one.
#[test]
fn each_rope_type_and_base_is_honoured_the_one_read_before_would_be_off() {
    for name in ["v5-llama"].into_iter().chain(ROPE_FOLDERS) {
        let case = name.replace('-', "_");
        let g = golden(&case);
        let arch = &model(name).config.architecture;
        assert_eq!(arch.positions, Positions::Rotary);
        let rope = arch.rotary(0).unwrap();
        assert!(arch.layers.iter().all(|l| l.rotary.as_ref() == Some(rope)));
        assert!(
            rope.scaling != RopeScaling::Default || rope.theta != 10000.0,
            "{name}: {rope:?}"
        );
        let plain = edited(name, |c| {
            c["rope_parameters"] =
                serde_json::json!({"rope_type": "default", "rope_theta": 10000.0});
        });
        let texts: Vec<&str> = g.meta.texts.iter().map(String::as_str).collect();
        let (att, _) = run(plain.path(), &texts);
        let d = max_abs_diff(att.into_dyn().view(), g.tensors["attention"].view());
        eprintln!("{name}: θ = 10,000 and the default rotation: attention off HF's by {d:.3}");
        assert!(d > 0.01, "{name}: its rotation made no difference ({d})");
    }
    let yarn = model("v5-llama-yarn")
        .config
        .architecture
        .rotary(1)
        .unwrap();
    // HF's default: 0.1·ln(factor 4) + 1
    assert!((yarn.attention_scaling() - 1.138_629_5).abs() < 1e-6);
}

/// The windows each layer reaches through: what HF's config class makes of each form.
fn windows(c: &Config) -> Vec<Option<usize>> {
    c.architecture
        .layers
        .iter()
        .map(|l| match l.reach {
            Reach::Sliding(w) => Some(w),
            Reach::Global => None,
        })
        .collect()
}

/// Gemma 3's config before transformers 5 (`rope_theta` the global layers', `rope_local_base_freq`
/// the local layers', every `sliding_window_pattern`-th layer global) is the same model; a
/// rotation per layer type, two bases, a window on the local layers, QK-norm and the scores'
/// own scale are read as HF reads them.
#[test]
fn gemma_3s_layers_are_read_from_either_form() {
    let arch = &model("v5-gemma3").config.architecture;
    let bases: Vec<f32> = arch
        .layers
        .iter()
        .map(|l| l.rotary.unwrap().theta)
        .collect();
    assert_eq!(bases, [1e4, 1e4, 1e4, 1e4, 1e4, 1e6]);
    assert_eq!(
        windows(&model("v5-gemma3").config),
        [Some(5), Some(5), Some(5), Some(5), Some(5), None]
    );
    assert!(arch
        .layers
        .iter()
        .all(|l| l.qk_norm && l.score_scale == Some(24f32.powf(-0.5))));
    let old = edited("v5-gemma3", |c| {
        let c = c.as_object_mut().unwrap();
        c.remove("rope_parameters");
        c.remove("layer_types");
        c.insert("rope_theta".into(), 1e6.into());
        c.insert("rope_local_base_freq".into(), 1e4.into());
        c.insert("sliding_window_pattern".into(), 6.into());
    });
    let again = Model::from_dir(old.path()).unwrap();
    assert_eq!(&again.config.architecture.layers, &arch.layers);
    let texts = ["time flies like an arrow and fruit flies like a banana"];
    let (a, p) = run(&model_dir("v5-gemma3"), &texts);
    let (b, q) = run(old.path(), &texts);
    assert!(a == b && p == q, "the two forms differ");
    // v5-gemma3's config edited, read: the error
    let refused = |edit: fn(&mut serde_json::Value)| {
        let bytes = std::fs::read(edited("v5-gemma3", edit).path().join("config.json")).unwrap();
        read_config(&bytes, "config.json").unwrap_err().to_string()
    };
    // the forms disagree: refused, naming both
    let e = refused(|c| c["rope_local_base_freq"] = 5e4.into());
    assert!(
        e.contains("sliding_attention") && e.contains("10000.0") && e.contains("50000.0"),
        "{e}"
    );
    let e = refused(|c| c["final_logit_softcapping"] = (-30.0).into());
    assert!(
        e.contains("`final_logit_softcapping` -30") && e.contains("positive"),
        "{e}"
    );
}

#[test]
fn each_family_reads_its_windows_as_transformers_5_writes_them() {
    // Qwen2: `layer_types` puts its second layer behind the window; Mistral's every layer
    assert_eq!(windows(&model("v5-qwen2").config), [None, Some(5)]);
    assert_eq!(windows(&model("v5-mistral").config), [Some(5), Some(5)]);
    let bytes = std::fs::read(model_dir("v5-qwen2").join("config.json")).unwrap();
    let qwen2: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let read = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut c = qwen2.clone();
        edit(&mut c);
        read_config(c.to_string().as_bytes(), "config.json").map(|c| windows(&c))
    };
    // no layer slides, or the window is switched off: none
    let full = serde_json::json!(["full_attention", "full_attention"]);
    assert_eq!(
        read(&|c| c["layer_types"] = full.clone()).unwrap(),
        [None, None]
    );
    assert_eq!(
        read(&|c| c["use_sliding_window"] = false.into()).unwrap(),
        [None, None]
    );
    // without `layer_types`: the layers from `max_window_layers` on slide
    let without = |layers: usize| {
        move |c: &mut serde_json::Value| {
            c.as_object_mut().unwrap().remove("layer_types");
            c["max_window_layers"] = layers.into();
        }
    };
    assert_eq!(read(&without(0)).unwrap(), [Some(5), Some(5)]);
    assert_eq!(read(&without(1)).unwrap(), [None, Some(5)]);
    assert_eq!(read(&without(2)).unwrap(), [None, None]);
    let e = read(&|c| c["layer_types"] = serde_json::json!(["full_attention", "chunked"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`layer_types[1]` \"chunked\""), "{e}");
    let e = read(&|c| c["sliding_window"] = 0.into())
        .unwrap_err()
        .to_string();
    assert!(e.contains("`sliding_window` 0"), "{e}");
    // a Llama has no window, whatever its config says
    let mut llama = qwen2.clone();
    llama["model_type"] = "llama".into();
    let c = read_config(llama.to_string().as_bytes(), "config.json").unwrap();
    assert_eq!(windows(&c), [None, None]);
    // Mistral's default where the key is absent, none where it is null
    let mistral = |window: Option<serde_json::Value>| {
        let mut c = qwen2.clone();
        c["model_type"] = "mistral".into();
        match window {
            Some(w) => c["sliding_window"] = w,
            None => {
                c.as_object_mut().unwrap().remove("sliding_window");
            }
        }
        windows(&read_config(c.to_string().as_bytes(), "config.json").unwrap())
    };
    assert_eq!(mistral(None), [Some(4096), Some(4096)]);
    assert_eq!(mistral(Some(serde_json::Value::Null)), [None, None]);
}

#[test]
fn a_rotation_that_cannot_be_honoured_is_refused_naming_its_key_and_value() {
    let bytes = std::fs::read(model_dir("v5-llama-yarn").join("config.json")).unwrap();
    let yarn: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let refused = |edit: &dyn Fn(&mut serde_json::Value)| -> String {
        let mut c = yarn.clone();
        edit(&mut c);
        read_config(c.to_string().as_bytes(), "v5/config.json")
            .unwrap_err()
            .to_string()
    };
    /// What is refused, how the config is changed to say it, and what the error says.
    type Case<'a> = (&'a str, &'a dyn Fn(&mut serde_json::Value), &'a [&'a str]);
    let cases: [Case; 6] = [
        (
            "an unknown rope_type",
            &|c| c["rope_parameters"]["rope_type"] = "dynamic".into(),
            &["v5/config.json", "`rope_parameters.rope_type` \"dynamic\" is not supported", "yarn"],
        ),
        (
            "the older form's unknown type",
            &|c| {
                old_form(c);
                c["rope_scaling"]["type"] = "longrope".into();
            },
            &["`rope_scaling.type` \"longrope\" is not supported"],
        ),
        (
            "two thetas",
            &|c| c["rope_theta"] = 500000.0.into(),
            &["`rope_parameters.rope_theta` 10000.0 and `rope_theta` 500000.0 disagree"],
        ),
        (
            "two factors",
            &|c| c["rope_scaling"] = serde_json::json!({"type": "yarn", "factor": 8.0}),
            &["`rope_parameters.factor` 4.0 and `rope_scaling.factor` 8.0 disagree"],
        ),
        (
            "two types",
            &|c| c["rope_scaling"] = serde_json::json!({"rope_type": "linear", "factor": 4.0}),
            &["`rope_parameters.rope_type` \"yarn\" and `rope_scaling.rope_type` \"linear\" disagree"],
        ),
        (
            "one rotation per layer type",
            &|c| {
                c["rope_parameters"] = serde_json::json!({
                    "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                })
            },
            &[
                "`rope_parameters` gives each layer type its own rotary positions",
                "full_attention: rope_theta 1000000.0",
                "sliding_attention: rope_theta 10000.0",
                "not supported",
            ],
        ),
    ];
    for (what, edit, says) in cases {
        let e = refused(edit);
        for s in says {
            assert!(e.contains(s), "{what}: {e:?} does not say {s:?}");
        }
    }
    // forms that agree are one config
    let mut both = yarn.clone();
    both["rope_theta"] = 1e4.into();
    both["rope_scaling"] =
        serde_json::json!({"type": "yarn", "factor": 4, "original_max_position_embeddings": 16});
    let c = read_config(both.to_string().as_bytes(), "config.json").unwrap();
    assert_eq!(
        c.architecture.positions,
        model("v5-llama-yarn").config.architecture.positions
    );
}

#[test]
fn a_folder_with_two_chat_templates_that_differ_is_refused_naming_both_files() {
    let dir = edited("v5-llama", |_| {});
    let config = dir.path().join("tokenizer_config.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let jinja = std::fs::read_to_string(dir.path().join("chat_template.jinja")).unwrap();
    // the same template in both: one template
    json["chat_template"] = jinja.clone().into();
    std::fs::write(&config, json.to_string()).unwrap();
    assert!(Model::from_dir(dir.path()).unwrap().chat.is_some());
    // another in tokenizer_config.json: refused
    json["chat_template"] = jinja.replace("model", "assistant").into();
    std::fs::write(&config, json.to_string()).unwrap();
    let e = Model::from_dir(dir.path()).err().unwrap().to_string();
    assert!(
        e.contains("chat_template.jinja")
            && e.contains("tokenizer_config.json's `chat_template`")
            && e.contains("differs"),
        "{e}"
    );
    // tokenizer_config.json's alone (the older form) is read
    std::fs::remove_file(dir.path().join("chat_template.jinja")).unwrap();
    let m = Model::from_dir(dir.path()).unwrap();
    let (text, _) = m.encode_chat(&["hi"]).unwrap();
    assert!(text[0].ends_with("<start_of_turn>assistant\n"), "{text:?}");
}

#[test]
fn marian_saved_by_transformers_5_translates_as_hf_on_both_engines() {
    let cpu = |m: &Model, sources: &[&str], decoding: &attnscope::engine::Decoding| {
        attnscope::engine::translate(m, sources, decoding)
    };
    let gpu = |m: &Model, sources: &[&str], decoding: &attnscope::engine::Decoding| {
        block_on(gpu_engine(m).translate(m, sources, decoding))
    };
    for (engine, translate) in [("cpu", &cpu as Translate), ("gpu", &gpu)] {
        let (a, p) = check_translation("v5_marian_generate", translate);
        eprintln!("v5_marian_generate {engine}: attention {a:.2e}, step probabilities {p:.2e}");
    }
}
