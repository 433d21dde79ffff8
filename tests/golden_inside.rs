//! Inside the encoder against HF transformers (fixtures `inside_*` by `tools/make_fixtures.py`):
//! the unscaled-scores ablation (HF's `attention.self.scaling = 1`), one layer's intermediate
//! values (forward hooks) and every layer's hidden states (`output_hidden_states`) on the CPU
//! and the GPU engines; and cross-attention between two sentences encoded alone on the CPU
//! engine.

use crate::common::*;
use attnscope::engine::gpu::GpuEngine;
use attnscope::engine::{cpu, BackendChoice, Runner, ScoreScale, Trace, TraceOptions};
use attnscope::model::Encoded;
use attnscope::{Mask, Model};
use ndarray::{s, ArrayViewD};

const CASES: &[&str] = &["inside_noscale", "inside_trace", "inside_cross"];

/// Tokenises a case as HF did (tokens checked) and builds its mask.
fn input(m: &Model, g: &Golden) -> (Encoded, Mask) {
    let texts: Vec<&str> = g.meta.texts.iter().map(String::as_str).collect();
    let input = m.tokenizer.encode(&texts, g.meta.pair.as_deref()).unwrap();
    assert_eq!(
        input.tokens, g.meta.tokens,
        "{}: tokens differ from HF's",
        g.name
    );
    let mask = Mask::from_kind(g.meta.mask, input.valid.view());
    (input, mask)
}

/// `max |Δ|` of one value against the fixture's tensor `key`, asserted `≤ tol`.
fn close(g: &Golden, key: &str, got: ArrayViewD<f32>, tol: f32) -> f32 {
    let want = g
        .tensors
        .get(key)
        .unwrap_or_else(|| panic!("{}: no tensor {key}", g.name));
    let d = max_abs_diff(got, want.view());
    assert!(d <= tol, "{}: {key} max |Δ| {d} > {tol}", g.name);
    d
}

fn gpu_run(m: &Model, input: &Encoded, mask: &Mask, opts: &TraceOptions) -> Trace {
    pollster::block_on(gpu_engine(m).forward(m, input, mask, opts))
        .unwrap()
        .0
}

fn check_no_scale(engine: &str, run: &dyn Fn(&Model, &Encoded, &Mask, &TraceOptions) -> Trace) {
    let g = golden("inside_noscale");
    assert_eq!(g.meta.scale, ScoreScale::None);
    let m = model(&g.meta.model);
    let (input, mask) = input(m, &g);
    let opts = TraceOptions {
        scale: ScoreScale::None,
        scores: true,
        ..TraceOptions::default()
    };
    let trace = run(m, &input, &mask, &opts);
    let da = close(
        &g,
        "attention",
        trace.attention.view().into_dyn(),
        ATTENTION_TOL,
    );
    let dh = close(&g, "hidden", trace.hidden.view().into_dyn(), HIDDEN_TOL);
    // the ablation is not the plain pass: an engine that ignored the option would fail above
    let plain = run(m, &input, &mask, &TraceOptions::with_scores());
    let moved = max_abs_diff(
        plain.attention.view().into_dyn(),
        g.tensors["attention"].view(),
    );
    assert!(
        moved > 1e-2,
        "{engine}: the unscaled attention differs from the scaled one by only {moved}"
    );
    // the reported scores are QKᵀ itself: layer 0 sees the same input either way, so its
    // scaled scores are the unscaled ones divided by √d_k
    let root_dk = (m.config.head_dim() as f32).sqrt();
    let unscaled = trace.scores.as_ref().unwrap().slice(s![.., 0, .., .., ..]);
    let scaled = plain.scores.as_ref().unwrap().slice(s![.., 0, .., .., ..]);
    let ds = max_abs_diff((&unscaled / root_dk).view().into_dyn(), scaled.into_dyn());
    assert!(ds <= 1e-4, "{engine}: layer 0 scores QKᵀ/√d_k vs QKᵀ: {ds}");
    eprintln!(
        "inside_noscale {engine}: max |Δ| attention {da:.1e}, hidden {dh:.1e} (scaled vs unscaled attention {moved:.2})"
    );
}

#[test]
fn cpu_no_scale_equals_hf() {
    check_no_scale("cpu", &|m, i, k, o| cpu::forward(m, i, k, o).unwrap());
}

#[test]
fn gpu_no_scale_equals_hf() {
    check_no_scale("gpu", &gpu_run);
}

/// Compares one layer's trace (and the embeddings' steps for layer 0) and every layer's hidden
/// states with the hooked HF forward pass; returns the largest `|Δ|`.
fn check_layer_trace(g: &Golden, trace: &Trace, layer: usize) -> f32 {
    let lt = trace.layer_trace.as_ref().expect("a layer trace");
    assert_eq!(lt.layer, layer);
    let hs = trace.hidden_states.as_ref().expect("hidden states");
    let mut worst = close(g, "hidden_states", hs.view().into_dyn(), HIDDEN_TOL);
    let p = format!("layer{layer}_");
    for name in [
        "input",
        "q",
        "k",
        "v",
        "context",
        "attention_output",
        "pre_activation",
        "intermediate",
        "output",
    ] {
        worst = worst.max(close(
            g,
            &format!("{p}{name}"),
            lt.get(name).unwrap().view(),
            HIDDEN_TOL,
        ));
    }
    match (&lt.embeddings, layer) {
        (Some(e), 0) => {
            for (name, got) in [
                ("word", &e.word),
                ("position", e.position.as_ref().unwrap()),
                ("token_type", e.token_type.as_ref().unwrap()),
                ("sum", &e.sum),
                ("normed", &e.normed),
            ] {
                worst = worst.max(close(
                    g,
                    &format!("embeddings_{name}"),
                    got.view().into_dyn(),
                    HIDDEN_TOL,
                ));
            }
        }
        (None, l) if l > 0 => {}
        (e, l) => panic!("layer {l}: embeddings present: {}", e.is_some()),
    }
    worst
}

#[test]
fn cpu_layer_trace_and_hidden_states_equal_hf() {
    let g = golden("inside_trace");
    let m = model(&g.meta.model);
    let (input, mask) = input(m, &g);
    assert_eq!(g.meta.layer_trace, [0, 3]);
    // the fixture's layers are not alike: a trace of the wrong layer fails
    let apart = max_abs_diff(g.tensors["layer0_q"].view(), g.tensors["layer3_q"].view());
    assert!(apart > 1e-2, "layers 0 and 3 have the same q ({apart})");
    for &layer in &g.meta.layer_trace {
        let opts = TraceOptions {
            hidden_states: true,
            layer_trace: Some(layer),
            ..TraceOptions::default()
        };
        let trace = cpu::forward(m, &input, &mask, &opts).unwrap();
        let d = check_layer_trace(&g, &trace, layer);
        let da = close(
            &g,
            "attention",
            trace.attention.view().into_dyn(),
            ATTENTION_TOL,
        );
        eprintln!("inside_trace cpu layer {layer}: max |Δ| values {d:.1e}, attention {da:.1e}");
    }
}

/// The GPU engine computes the layer trace (the embeddings' parts with their own kernel, the
/// pre-activation beside the fused matmul) and every layer's hidden states itself; the runner
/// on the GPU backend hands them on.
#[test]
fn gpu_layer_trace_and_hidden_states_equal_hf() {
    let g = golden("inside_trace");
    let m = model(&g.meta.model);
    let (input, mask) = input(m, &g);
    for &layer in &g.meta.layer_trace {
        let opts = TraceOptions {
            hidden_states: true,
            layer_trace: Some(layer),
            ..TraceOptions::default()
        };
        let trace = gpu_run(m, &input, &mask, &opts);
        let d = check_layer_trace(&g, &trace, layer);
        let da = close(
            &g,
            "attention",
            trace.attention.view().into_dyn(),
            ATTENTION_TOL,
        );
        eprintln!("inside_trace gpu layer {layer}: max |Δ| values {d:.1e}, attention {da:.1e}");
    }
    let engine = GpuEngine::new(gpu_device().clone(), m).unwrap();
    let own = Model::from_dir(model_dir(&g.meta.model)).unwrap(); // the runner owns its model
    let runner = Runner::<Model>::with_gpu(own, engine, BackendChoice::Gpu);
    let opts = TraceOptions {
        hidden_states: true,
        layer_trace: Some(3),
        ..TraceOptions::default()
    };
    let run = pollster::block_on(runner.forward(&input, &mask, &opts)).unwrap();
    assert!(run.backend.starts_with("gpu"), "{}", run.backend);
    check_layer_trace(&g, &run.trace, 3);
}

#[test]
fn cpu_cross_attention_equals_hf() {
    let g = golden("inside_cross");
    let m = model(&g.meta.model);
    let want = g.meta.cross_attention.as_ref().unwrap();
    let pair = g.meta.pair.as_deref().unwrap();
    let got = attnscope::analysis::cross_attention(
        m,
        &g.meta.texts[0],
        pair,
        want.layer,
        &TraceOptions::default(),
    )
    .unwrap();
    assert_eq!(got.layer, want.layer);
    assert_eq!(got.queries, want.queries);
    assert_eq!(got.keys, want.keys);
    let d = close(
        &g,
        "cross_attention",
        got.attention.view().into_dyn(),
        ATTENTION_TOL,
    );
    // not a uniform (or all-zero) answer that any wrong wiring of the right shape could give
    let n_k = want.keys.len() as f32;
    let spread = got
        .attention
        .iter()
        .map(|p| (p - 1.0 / n_k).abs())
        .fold(0.0, f32::max);
    assert!(
        spread > 1e-2,
        "cross-attention is nearly uniform ({spread})"
    );
    eprintln!(
        "inside_cross cpu layer {}: max |Δ| attention {d:.1e}",
        want.layer
    );
}

#[test]
fn layers_the_model_does_not_have_are_errors_naming_its_layer_count() {
    let m = model("minilm");
    let input = m.tokenizer.encode(&["hi"], None).unwrap();
    let mask = Mask::from_kind(attnscope::MaskKind::Padding, input.valid.view());
    let opts = TraceOptions {
        layer_trace: Some(6),
        ..TraceOptions::default()
    };
    let e = cpu::forward(m, &input, &mask, &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("layer 6") && e.contains("6 layers"), "{e}");
    let e = pollster::block_on(gpu_engine(m).forward(m, &input, &mask, &opts))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("layer 6") && e.contains("6 layers"), "{e}");
    let e = attnscope::analysis::cross_attention(m, "a", "b", 9, &TraceOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cross-attention") && e.contains("6 layers"),
        "{e}"
    );
}

#[test]
fn every_inside_fixture_has_a_case() {
    assert_cases_cover_fixtures(CASES, |n| n.starts_with("inside_"));
}

/// The learned position similarity (src/analysis/positions.rs) is the cosine of the rows of the
/// checkpoint's own position table, read here straight from model.safetensors.
#[test]
fn learned_position_similarity_is_the_cosine_of_the_safetensors_position_rows() {
    use attnscope::analysis::positions::learned_position_similarity;
    let m = model("minilm");
    let bytes = std::fs::read(model_dir("minilm").join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let name = st
        .names()
        .into_iter()
        .find(|n| n.ends_with("embeddings.position_embeddings.weight"))
        .expect("a position table")
        .to_string();
    let t = st.tensor(&name).unwrap();
    assert_eq!(t.dtype(), safetensors::Dtype::F32);
    let d = t.shape()[1];
    let table: Vec<f32> = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let n = 70;
    let got = learned_position_similarity(m, n).unwrap();
    assert_eq!(got.dim(), (n, n));
    let row = |i: usize| &table[i * d..(i + 1) * d];
    let mut worst = 0f32;
    for i in 0..n {
        for j in 0..n {
            let (a, b) = (row(i), row(j));
            let dot: f64 = a
                .iter()
                .zip(b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            worst = worst.max((got[[i, j]] - (dot / (na * nb)) as f32).abs());
        }
    }
    assert!(worst < 1e-5, "max |Δ| {worst}");
    // the table is cut at its length
    let all = learned_position_similarity(m, 100_000).unwrap();
    assert_eq!(all.nrows(), m.config.max_position_embeddings);
}
