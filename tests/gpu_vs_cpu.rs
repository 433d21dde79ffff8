//! The GPU kernels against the CPU engine at awkward sizes: sequence lengths 1, 7, 33 and 512,
//! a hidden size (24) that is not a multiple of the 64-wide matmul tile, padded batches,
//! causal and explicit masks, pre-LN layers and the tanh GELU.

use crate::common::*;
use attnscope::engine::{cpu, AttentionKept, HeadMask, TraceOptions};
use attnscope::model::Encoded;
use attnscope::{Mask, MaskKind, Model};
use ndarray::{Array2, Array3, ArrayViewD};

/// A batch of `b` sequences of length `t` with `real[i]` real tokens each (the rest padding),
/// ids drawn deterministically from the vocabulary.
fn synthetic(m: &Model, t: usize, real: &[usize]) -> Encoded {
    let b = real.len();
    let vocab = m.config.vocab_size as u64;
    let ids = Array2::from_shape_fn((b, t), |(i, j)| {
        if j >= real[i] {
            0
        } else {
            ((i as u64 * 7919 + j as u64 * 104_729 + 13) % vocab) as u32
        }
    });
    let types = m.config.type_vocab_size.max(1) as u32;
    let type_ids = Array2::from_shape_fn((b, t), |(_, j)| (j >= t / 2) as u32 % types);
    let valid = Array2::from_shape_fn((b, t), |(i, j)| j < real[i]);
    Encoded {
        tokens: vec![vec![]; b],
        ids,
        type_ids,
        valid,
        truncated: vec![false; b],
        offsets: vec![vec![]; b],
        word_ids: vec![vec![]; b],
        sentence_b_start: vec![None; b],
        texts: vec![vec![]; b],
    }
}

fn compare(name: &str, m: &Model, input: &Encoded, mask: &Mask) {
    let g = gpu_forward(m, input, mask).unwrap();
    let c = cpu::forward(m, input, mask, &TraceOptions::with_scores()).unwrap();
    let da = max_abs_diff(g.attention.view().into_dyn(), c.attention.view().into_dyn());
    let ds = max_abs_diff(
        g.scores.unwrap().view().into_dyn(),
        c.scores.unwrap().view().into_dyn(),
    );
    let dh = max_abs_diff(g.hidden.view().into_dyn(), c.hidden.view().into_dyn());
    eprintln!("{name}: max |Δ| attention {da:.2e}, scores {ds:.2e}, hidden {dh:.2e}");
    assert!(da <= ATTENTION_TOL, "{name}: attention differs by {da}");
    assert!(ds <= 1e-3, "{name}: scores differ by {ds}");
    assert!(dh <= HIDDEN_TOL, "{name}: hidden differs by {dh}");
    // masked cells are exactly 0 on the GPU too
    for ((bi, _, _, q, k), p) in g.attention.indexed_iter() {
        if !mask.0[[bi, q, k]] {
            assert_eq!(*p, 0.0, "{name}: masked cell ({q},{k}) is {p}");
        }
    }
    match (&g.logits, &c.logits) {
        (Some(gl), Some(cl)) => {
            assert!(max_abs_diff(gl.view().into_dyn(), cl.view().into_dyn()) <= HIDDEN_TOL)
        }
        (None, None) => {}
        _ => panic!("{name}: logits on one engine only"),
    }
}

#[test]
fn odd_sequence_lengths_on_a_hidden_size_off_the_tile() {
    for name in ["tiny-bert", "tiny-bert-preln"] {
        let m = model(name);
        for t in [1, 7, 33] {
            let input = synthetic(m, t, &[t]);
            for kind in [MaskKind::Padding, MaskKind::Causal] {
                compare(
                    &format!("{name} T={t} {kind:?}"),
                    m,
                    &input,
                    &Mask::from_kind(kind, input.valid.view()),
                );
            }
        }
    }
}

#[test]
fn padded_batches_and_every_mask() {
    for name in ["tiny-bert", "minilm"] {
        let m = model(name);
        let input = synthetic(m, 33, &[33, 7, 1]);
        for kind in [MaskKind::Padding, MaskKind::Causal, MaskKind::None] {
            compare(
                &format!("{name} batch {kind:?}"),
                m,
                &input,
                &Mask::from_kind(kind, input.valid.view()),
            );
        }
    }
}

#[test]
fn explicit_masks_and_fully_masked_rows() {
    let m = model("tiny-bert");
    let input = synthetic(m, 9, &[9, 9]);
    // a striped pattern; row 4 of item 1 sees nothing at all and must be all zeros
    let mask = Mask::explicit(Array3::from_shape_fn((2, 9, 9), |(b, q, k)| {
        (q + k + b) % 3 != 0 && !(b == 1 && q == 4)
    }));
    compare("explicit", m, &input, &mask);
    let g = gpu_forward(m, &input, &mask).unwrap();
    assert!(g
        .attention
        .slice(ndarray::s![1, .., .., 4, ..])
        .iter()
        .all(|&p| p == 0.0));
}

#[test]
fn minilm_at_7_and_512_tokens() {
    let m = model("minilm");
    for t in [7, 512] {
        let input = synthetic(m, t, &[t]);
        compare(
            &format!("minilm T={t}"),
            m,
            &input,
            &Mask::from_kind(MaskKind::Padding, input.valid.view()),
        );
    }
}

#[test]
fn buffers_are_reused_and_rebuilt_when_the_shape_changes() {
    let m = model("tiny-bert");
    for t in [5, 5, 12, 5] {
        let input = synthetic(m, t, &[t, t - 1]);
        compare(
            &format!("reuse T={t}"),
            m,
            &input,
            &Mask::from_kind(MaskKind::Padding, input.valid.view()),
        );
    }
}

#[test]
fn a_lost_device_is_an_error_and_auto_falls_back_to_the_cpu() {
    use attnscope::engine::gpu::{GpuDevice, GpuEngine};
    use attnscope::engine::{BackendChoice, Runner};
    // a runner owns its model: this test's own copy of tiny-bert
    let m = std::sync::Arc::new(Model::from_dir(model_dir("tiny-bert")).unwrap());
    let dev = pollster::block_on(GpuDevice::acquire()).unwrap();
    let input = synthetic(&m, 6, &[6]);
    let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
    let engine = || GpuEngine::new(dev.clone(), &m).unwrap();
    let auto = Runner::<Model>::with_gpu(m.clone(), engine(), BackendChoice::Auto);
    let strict = Runner::<Model>::with_gpu(m.clone(), engine(), BackendChoice::Gpu);
    let ok = pollster::block_on(auto.forward(&input, &mask, &TraceOptions::default())).unwrap();
    assert!(ok.backend.starts_with("gpu: "), "{}", ok.backend);
    dev.device.destroy();
    let run = pollster::block_on(auto.forward(&input, &mask, &TraceOptions::default())).unwrap();
    assert_eq!(run.backend, "cpu");
    assert!(
        run.fallback.as_deref().unwrap_or("").contains("GPU"),
        "{:?}",
        run.fallback
    );
    let e = pollster::block_on(strict.forward(&input, &mask, &TraceOptions::default())).err();
    assert!(matches!(e, Some(attnscope::Error::Gpu(_))), "{e:?}");
    // a new engine on a lost device is an error, not a panic
    assert!(GpuEngine::new(dev, &m).is_err());
}

/// Every layer's trace (with the embeddings' steps) and every layer's hidden states, post-LN and
/// pre-LN, over a padded batch with a head knocked out in the traced layer and the scores kept
/// (as the page asks: every part of the read-back at once): the GPU engine's own values equal
/// the CPU engine's.
#[test]
fn every_layer_trace_and_the_hidden_states_of_every_family() {
    for name in [
        "tiny-bert",
        "tiny-bert-preln",
        "tiny-roberta",
        "tiny-distilbert",
        "tiny-gpt2",
    ] {
        let m = model(name);
        let input = synthetic(m, 33, &[33, 7, 1]);
        let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
        for layer in 0..m.config.num_hidden_layers {
            let opts = TraceOptions {
                hidden_states: true,
                layer_trace: Some(layer),
                embeddings: true,
                head_mask: HeadMask::from_pairs([(layer, 1)]),
                scores: true,
                ..TraceOptions::default()
            };
            let (g, _) =
                pollster::block_on(gpu_engine(m).forward(m, &input, &mask, &opts)).unwrap();
            let c = cpu::forward(m, &input, &mask, &opts).unwrap();
            let what = format!("{name} layer {layer}");
            let diff = |field: &str, a: ArrayViewD<f32>, b: ArrayViewD<f32>| {
                assert_eq!(a.shape(), b.shape(), "{what}: {field} shape");
                let d = max_abs_diff(a, b);
                assert!(d <= HIDDEN_TOL, "{what}: {field} differs by {d}");
                d
            };
            fn view(x: &Array3<f32>) -> ArrayViewD<'_, f32> {
                x.view().into_dyn()
            }
            let (gt, ct) = (g.layer_trace.unwrap(), c.layer_trace.unwrap());
            assert_eq!(gt.layer, layer);
            let mut worst = max_abs_diff(
                g.hidden_states.unwrap().view().into_dyn(),
                c.hidden_states.unwrap().view().into_dyn(),
            );
            assert!(
                worst <= HIDDEN_TOL,
                "{what}: hidden states differ by {worst}"
            );
            for (field, a, b) in layer_trace_pairs(&gt, &ct) {
                worst = worst.max(diff(field, a, b));
            }
            let (ge, ce) = (
                gt.embeddings.as_ref().unwrap(),
                ct.embeddings.as_ref().unwrap(),
            );
            for (field, a, b) in [
                ("word", &ge.word, &ce.word),
                ("sum", &ge.sum, &ce.sum),
                ("normed", &ge.normed, &ce.normed),
            ] {
                worst = worst.max(diff(field, view(a), view(b)));
            }
            assert_eq!(
                ge.position.is_some(),
                ce.position.is_some(),
                "{what}: positions"
            );
            if let (Some(a), Some(b)) = (&ge.position, &ce.position) {
                worst = worst.max(diff("position", view(a), view(b)));
            }
            let has_types = m.config.architecture.token_types;
            assert_eq!(ge.token_type.is_some(), has_types, "{what}: token types");
            assert_eq!(ce.token_type.is_some(), has_types, "{what}: token types");
            if let (Some(a), Some(b)) = (&ge.token_type, &ce.token_type) {
                worst = worst.max(diff("token_type", view(a), view(b)));
            }
            // the knocked-out head's slice of the context is zero on the GPU as well
            let d_v = m.config.head_dim();
            assert!(gt
                .rows("context")
                .unwrap()
                .slice(ndarray::s![.., .., d_v..2 * d_v])
                .iter()
                .all(|&x| x == 0.0));
            eprintln!("{what}: max |Δ| {worst:.2e}");
        }
    }
}

/// A pass keeping each layer's queries and keys (a long text's way) on the GPU reads back no
/// probability: each head computed from its queries and keys equals the CPU engine's kept head,
/// its output equals the GPU's own pass keeping every probability, and it replays with the rest.
#[test]
fn heads_from_the_gpu_s_queries_and_keys_equal_the_cpu_s_probabilities() {
    for name in ["tiny-llama", "tiny-gpt2", "tiny-bert"] {
        let m = model(name);
        let input = synthetic(m, 33, &[33, 7]);
        let mask = Mask::from_kind(m.own_mask(), input.valid.view());
        let kept = TraceOptions::with_scores();
        let qk = TraceOptions {
            attention: AttentionKept::QueriesKeys,
            ..kept.clone()
        };
        let c = cpu::forward(m, &input, &mask, &kept).unwrap();
        let gpu = |opts: &TraceOptions| {
            pollster::block_on(gpu_engine(m).forward(m, &input, &mask, opts))
                .unwrap()
                .0
        };
        let (g, whole) = (gpu(&qk), gpu(&kept));
        let (b, l, h, t, _) = c.attention.dim();
        assert_eq!(
            g.attention.dim(),
            (b, l, h, 0, 0),
            "{name}: no probabilities read back"
        );
        assert!(g.scores.is_none());
        let from = g.queries_keys.as_ref().expect("queries and keys read back");
        let mut worst = 0f32;
        for i in 0..b {
            for li in 0..l {
                for hi in 0..h {
                    let one = from.head(i, li, hi, &g.mask, true).unwrap();
                    let at = ndarray::s![i, li, hi, .., ..];
                    assert_eq!(one.probs.dim(), (t, t));
                    let d = max_abs_diff(
                        one.probs.view().into_dyn(),
                        c.attention.slice(at).into_dyn(),
                    );
                    assert!(
                        d <= ATTENTION_TOL,
                        "{name} item {i} head {li}:{hi} differs by {d}"
                    );
                    worst = worst.max(d);
                }
            }
        }
        let d = max_abs_diff(g.hidden.view().into_dyn(), whole.hidden.view().into_dyn());
        assert!(
            d <= HIDDEN_TOL,
            "{name}: the output differs from the GPU's whole pass by {d}"
        );
        // a second pass of the same shape replays the recording
        let again = gpu(&qk);
        assert_eq!(
            again.queries_keys.unwrap().queries,
            from.queries,
            "{name}: replayed"
        );
        eprintln!(
            "{name}: heads from the GPU's queries and keys vs the CPU's, max |Δ| {worst:.2e}"
        );
    }
}

/// A watched pass on the GPU goes to it a layer at a time and tells each layer as the GPU
/// begins it: after the pass every layer is begun, and its attention and hidden states are the
/// bits of the pass submitted whole; a stop asked before it runs none, by name.
#[test]
fn a_watched_gpu_pass_tells_its_layers_and_computes_the_same_bits() {
    use attnscope::engine::progress::{PassProgress, Progress};
    use std::sync::Arc;
    let m = model("tiny-llama");
    let layers = m.config.num_hidden_layers;
    let input = m
        .tokenizer
        .encode(&["the cat sat on the mat"], None)
        .unwrap();
    let mask = Mask::from_kind(MaskKind::Causal, input.valid.view());
    let gpu = gpu_engine(m);
    let whole = pollster::block_on(gpu.forward(m, &input, &mask, &TraceOptions::default()))
        .unwrap()
        .0;
    let cells = Arc::new(PassProgress::default());
    let opts = TraceOptions {
        progress: Progress::to(&cells),
        ..TraceOptions::default()
    };
    cells.start(layers);
    let (got, _) = pollster::block_on(gpu.forward(m, &input, &mask, &opts)).unwrap();
    assert_eq!(cells.at(), (layers, layers), "every layer begun");
    assert_eq!(got.attention, whole.attention, "the same probabilities");
    assert_eq!(got.hidden, whole.hidden, "the same hidden states");
    cells.start(layers);
    cells.ask_to_stop();
    let err = pollster::block_on(gpu.forward(m, &input, &mask, &opts)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("stopped as asked, after 0 of {layers} layers")
    );
    assert_eq!(cells.at(), (0, layers), "no layer begun");
}
