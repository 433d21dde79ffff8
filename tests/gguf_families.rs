//! Gemma 3 and Qwen3 from GGUF files of every common type (tests/fixtures/models/tiny-gemma3-gguf
//! and tiny-qwen3-gguf, written by tools/make_fixtures.py `--only family-gguf` as llama.cpp's
//! convert_hf_to_gguf.py and llama-quantize write them: Q8_0, Q4_K, Q6_K, Q5_K, Q3_K, Q2_K) against
//! HF transformers reading the same file (it dequantizes it and rebuilds the config and the
//! tokenizer): the GGUF tokenizer's ids (Gemma's SentencePiece read the Gemma way, Qwen3's
//! byte-level BPE as `qwen2`), attention, hidden states and next-token probabilities on the CPU
//! and GPU engines, each file's matrices kept in their ggml types, and greedy generation from the
//! Q4_K files. The tiny Gemma's window of 5 is crossed by the text, its sixth layer global.

use crate::common::*;
use attnscope::engine::{cpu, generate, GenerateOptions, TraceOptions};
use attnscope::model::config::Reach;
use attnscope::{Mask, Model};
use ndarray::Axis;
use pollster::block_on;
use serde::Deserialize;

const TYPES: [&str; 6] = ["Q8_0", "Q4_K", "Q6_K", "Q5_K", "Q3_K", "Q2_K"];
const FAMILIES: [&str; 2] = ["gemma3", "qwen3"];

#[derive(Debug, Deserialize)]
struct GgufMeta {
    gguf_file: String,
    gguf_tokenizer_ids: Vec<Vec<u32>>,
}

/// A fixture's `.gguf` file, loaded once per test binary.
fn gguf_model(file: &str) -> &'static Model {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, &'static Model>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache.entry(file.to_owned()).or_insert_with(|| {
        let path = root().join("tests/fixtures/models").join(file);
        let m = Model::from_path(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Box::leak(Box::new(m))
    })
}

fn options() -> TraceOptions {
    TraceOptions {
        hidden_states: true,
        lm_logits: true,
        ..TraceOptions::default()
    }
}

#[test]
fn every_family_gguf_fixture_has_a_test() {
    let mut cases: Vec<String> = FAMILIES
        .iter()
        .flat_map(|f| TYPES.iter().map(move |t| format!("{f}_gguf_{t}")))
        .collect();
    cases.extend(FAMILIES.iter().map(|f| format!("{f}_gguf_generate")));
    let cases: Vec<&str> = cases.iter().map(String::as_str).collect();
    assert_cases_cover_fixtures(&cases, |n| {
        FAMILIES
            .iter()
            .any(|f| n.starts_with(&format!("{f}_gguf_")))
    });
}

#[test]
fn gemma_3_and_qwen3_from_gguf_files_of_each_type_equal_hf_on_both_engines() {
    for family in FAMILIES {
        for ty in TYPES {
            let name = format!("{family}_gguf_{ty}");
            let g = golden(&name);
            let meta: GgufMeta = golden_meta(&name);
            let m = gguf_model(&meta.gguf_file);
            if family == "gemma3" {
                let reach: Vec<Reach> = m
                    .config
                    .architecture
                    .layers
                    .iter()
                    .map(|l| l.reach)
                    .collect();
                assert_eq!(
                    reach,
                    [[Reach::Sliding(5); 5].as_slice(), &[Reach::Global]].concat()
                );
            }
            assert!(
                m.config.architecture.layers.iter().all(|l| l.qk_norm),
                "{name}: QK-norm"
            );
            let texts: Vec<&str> = g.meta.texts.iter().map(String::as_str).collect();
            let input = m.tokenizer.encode(&texts, None).unwrap();
            let ids: Vec<Vec<u32>> = input.ids.outer_iter().map(|r| r.to_vec()).collect();
            assert_eq!(
                ids, meta.gguf_tokenizer_ids,
                "{name}: the GGUF tokenizer's ids"
            );
            let mask = Mask::from_kind(g.meta.mask, input.valid.view());
            let cpu = cpu::forward(m, &input, &mask, &options()).unwrap();
            assert_lm_case(&format!("{name} cpu"), &g, &cpu);
            let gpu = block_on(gpu_engine(m).forward(m, &input, &mask, &options()))
                .unwrap()
                .0;
            assert_lm_case(&format!("{name} gpu"), &g, &gpu);
        }
    }
}

#[test]
fn gemma_3_and_qwen3_from_q4_k_files_generate_as_hf_does_on_both_engines() {
    for family in FAMILIES {
        let name = format!("{family}_gguf_generate");
        let meta: GenerateMeta = golden_meta(&name);
        let want = golden_tensors(&name);
        let m = gguf_model(&format!("tiny-{family}-gguf/tiny-{family}-Q4_K.gguf"));
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
            let att = max_abs_diff(
                g.attention.view().insert_axis(Axis(0)).into_dyn(),
                want["attention"].view(),
            );
            eprintln!("{name} {engine}: attention {att:.2e}");
            assert!(
                att <= ATTENTION_TOL,
                "{name} {engine}: attention differs by {att}"
            );
        }
    }
}

#[test]
fn each_familys_config_is_read_from_its_files_header_alone() {
    use attnscope::model::gguf::GgufFile;
    for (family, layers) in [("gemma3", 6), ("qwen3", 2)] {
        let name = format!("tiny-{family}-Q2_K.gguf");
        let bytes =
            std::fs::read(root().join(format!("tests/fixtures/models/tiny-{family}-gguf/{name}")))
                .unwrap();
        let whole = GgufFile::parse(&bytes, &name).unwrap();
        // the header's bytes alone, as the page and Model::from_path read them before the rest
        let head = GgufFile::parse_header(&bytes[..whole.data_start], bytes.len(), &name).unwrap();
        let (f, config) = attnscope::families::read_gguf_config(&head).unwrap();
        assert!(f.architectures.contains(&family), "{name}");
        assert_eq!(config.architecture.layers.len(), layers, "{name}");
        assert_eq!(
            Model::check_gguf(&bytes[..whole.data_start], bytes.len(), &name)
                .unwrap()
                .tensors,
            whole.tensors
        );
        // as a download comes in: not yet, then checked whole
        let so_far = |n: usize| Model::check_gguf_so_far(&bytes[..n], bytes.len(), &name).unwrap();
        assert!(!so_far(64) && so_far(whole.data_start), "{name}");
    }
}
