//! Gemma 3 270M from its Q4_K_M GGUF (fetched from PyPI by scripts/setup.sh; Q5_0, Q4_K, Q8_0,
//! Q6_K and F32 tensors, a 262,144-token SentencePiece vocabulary) against HF transformers on the
//! same file (tools/make_fixtures.py `gemma3_270m`): the ids, every layer's attention (at a few
//! query positions on either side of the local layers' 512-token window for the 671-token
//! prompt), the next-token probabilities and a greedy generation, on the CPU engine and the GPU
//! engine. Its 178 MB Q8_0 embedding, tied as the LM head, is larger than one storage binding
//! of lavapipe (128 MiB): the GPU engine binds it in pieces.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::common::*;
use attnscope::engine::{cpu, generate, GenerateOptions, TraceOptions};
use attnscope::model::config::Reach;
use attnscope::{Mask, Model, Trace};
use ndarray::{s, ArrayD, Axis};
use pollster::block_on;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Meta {
    gguf_file: String,
    max_new_tokens: usize,
    sliding_window: usize,
    layer_types: Vec<String>,
    items: Vec<Item>,
}

#[derive(Debug, Deserialize)]
struct Item {
    text: String,
    token_ids: Vec<u32>,
    /// The query positions HF's attention and top-10 are kept at.
    rows: Vec<usize>,
    top10_ids: Vec<Vec<u32>>,
    #[serde(default)]
    output_ids: Option<Vec<u32>>,
}

const CASE: &str = "gemma3_270m_prompts";

/// The model, loaded once per test binary.
fn gemma() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| {
        let meta: Meta = golden_meta(CASE);
        let path = root().join(&meta.gguf_file);
        Model::from_path(&path)
            .unwrap_or_else(|e| panic!("{e} (scripts/setup.sh fetches Gemma 3 270M from PyPI)"))
    })
}

/// What to keep: the LM logits at every position of a short prompt; of a long one (whose
/// logits over 262,144 tokens at every position would take 700 MB) the last position's.
fn options(item: &Item) -> TraceOptions {
    let short = item.rows.len() == item.token_ids.len();
    TraceOptions {
        lm_logits: short,
        next_logits: !short,
        ..TraceOptions::default()
    }
}

/// Prompt `i` against one causal pass over it (`what` names the engine): every layer's and
/// head's attention at HF's rows within [`ATTENTION_TOL`], and the probability of each of HF's
/// ten likeliest next tokens where the pass kept the logits.
fn assert_prompt(
    what: &str,
    i: usize,
    item: &Item,
    want: &HashMap<String, ArrayD<f32>>,
    t: &Trace,
) {
    let rows = t
        .attention
        .slice(s![0, .., .., .., ..])
        .select(Axis(2), &item.rows); // (L, H, R, T)
    let att = max_abs_diff(
        rows.view().into_dyn(),
        want[&format!("attention_{i}")].view(),
    );
    let top = &want[&format!("top10_probs_{i}")];
    let (probs, at): (ndarray::Array2<f32>, Vec<usize>) = match (&t.lm_logits, &t.next_logits) {
        (Some(l), _) => (
            attnscope::families::next_token_probs(l).index_axis_move(Axis(0), 0),
            (0..item.rows.len()).collect(),
        ),
        (None, Some(n)) => (
            attnscope::families::next_token_probs(&n.clone().insert_axis(Axis(0)))
                .index_axis_move(Axis(0), 0),
            vec![item.rows.len() - 1],
        ),
        (None, None) => panic!("no logits kept"),
    };
    let mut p = 0f32;
    for (row, &r) in at.iter().enumerate() {
        for (j, &id) in item.top10_ids[r].iter().enumerate() {
            p = p.max((probs[[row, id as usize]] - top[[r, j]]).abs());
        }
    }
    eprintln!(
        "gemma3 270m prompt {i} ({} tokens) {what}: attention {att:.2e}, top-10 next tokens {p:.2e}",
        item.token_ids.len()
    );
    assert!(
        att <= ATTENTION_TOL,
        "{what} prompt {i}: attention differs by {att}"
    );
    assert!(
        p <= ATTENTION_TOL,
        "{what} prompt {i}: next-token probabilities differ by {p}"
    );
}

#[test]
fn gemma_3_270m_s_layers_are_its_own() {
    let meta: Meta = golden_meta(CASE);
    let a = &gemma().config.architecture;
    let reach: Vec<Reach> = meta
        .layer_types
        .iter()
        .map(|t| match t.as_str() {
            "sliding_attention" => Reach::Sliding(meta.sliding_window),
            _ => Reach::Global,
        })
        .collect();
    assert_eq!(a.layers.iter().map(|l| l.reach).collect::<Vec<_>>(), reach);
    assert!(a.layers.iter().all(|l| l.qk_norm));
    let theta: Vec<f32> = a.layers.iter().map(|l| l.rotary.unwrap().theta).collect();
    assert_eq!((theta[0], theta[5]), (10_000.0, 1_000_000.0));
}

#[test]
fn gemma_3_270m_equals_hf_on_the_cpu_engine() {
    let meta: Meta = golden_meta(CASE);
    let want = golden_tensors(CASE);
    let m = gemma();
    for (i, item) in meta.items.iter().enumerate() {
        let input = m.tokenizer.encode(&[&item.text], None).unwrap();
        assert_eq!(input.ids.row(0).to_vec(), item.token_ids, "prompt {i}: ids");
        let trace = cpu::forward(m, &input, &Mask::causal(1, input.len()), &options(item)).unwrap();
        assert_prompt("cpu", i, item, &want, &trace);
        if let Some(out) = &item.output_ids {
            let opts = GenerateOptions {
                max_new_tokens: meta.max_new_tokens,
                top_k: 1,
                stop_at_eos: true,
                head_mask: Default::default(),
                numerics: Default::default(),
            };
            let g = generate(m, &item.token_ids, &opts).unwrap();
            assert_eq!(&g.output_ids, out, "prompt {i}: greedy ids");
        }
    }
}

#[test]
fn gemma_3_270m_equals_hf_on_the_gpu_engine() {
    let meta: Meta = golden_meta(CASE);
    let want = golden_tensors(CASE);
    let m = gemma();
    let engine = gpu_engine(m);
    for (i, item) in meta.items.iter().enumerate() {
        let input = m.tokenizer.encode(&[&item.text], None).unwrap();
        let mask = Mask::causal(1, input.len());
        let (trace, _) = block_on(engine.forward(m, &input, &mask, &options(item))).unwrap();
        assert_prompt("gpu", i, item, &want, &trace);
        if let Some(out) = &item.output_ids {
            let opts = GenerateOptions {
                max_new_tokens: meta.max_new_tokens,
                top_k: 1,
                stop_at_eos: true,
                head_mask: Default::default(),
                numerics: Default::default(),
            };
            let g = block_on(engine.generate(m, &item.token_ids, &opts)).unwrap();
            assert_eq!(&g.output_ids, out, "prompt {i}: greedy ids on the GPU");
        }
    }
}
