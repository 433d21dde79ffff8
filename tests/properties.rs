//! Properties every attention computation must have, on random inputs and on the real model.

use crate::common::*;
use attnscope::analysis::thumbnail::{Bins, HeadThumbnails};
use attnscope::analysis::{rollout, HeadMetrics};
use attnscope::engine::cpu::{self, attention::scaled_dot_product_attention};
use attnscope::engine::{AttentionKept, ScoreScale, TraceOptions};
use attnscope::report::item_attention;
use attnscope::{Mask, MaskKind};
use ndarray::{s, Array2, Array3, Axis};
use proptest::prelude::*;

fn matrix(rows: usize, cols: usize) -> impl Strategy<Value = Array2<f32>> {
    prop::collection::vec(-4.0f32..4.0, rows * cols)
        .prop_map(move |v| Array2::from_shape_vec((rows, cols), v).unwrap())
}

/// Random attention problems with d_k ≠ d_v and n_q ≠ n_k allowed, and a mask that leaves
/// at least the first key of each row visible.
fn problem() -> impl Strategy<Value = (Array2<f32>, Array2<f32>, Array2<f32>, Array2<bool>)> {
    (1usize..9, 1usize..9, 1usize..7, 1usize..7).prop_flat_map(|(n_q, n_k, d_k, d_v)| {
        (
            matrix(n_q, d_k),
            matrix(n_k, d_k),
            matrix(n_k, d_v),
            prop::collection::vec(any::<bool>(), n_q * n_k).prop_map(move |v| {
                let mut m = Array2::from_shape_vec((n_q, n_k), v).unwrap();
                m.column_mut(0).fill(true);
                m
            }),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn sdpa_rows_sum_to_one_and_masked_cells_are_zero((q, k, v, mask) in problem()) {
        let a = scaled_dot_product_attention(q.view(), k.view(), v.view(), Some(mask.view())).unwrap();
        prop_assert_eq!(a.probs.dim(), (q.nrows(), k.nrows()));
        prop_assert_eq!(a.output.dim(), (q.nrows(), v.ncols()));
        for (row, mrow) in a.probs.outer_iter().zip(mask.outer_iter()) {
            prop_assert!((row.sum() - 1.0).abs() < 1e-5, "row sums to {}", row.sum());
            for (p, m) in row.iter().zip(mrow.iter()) {
                if !m { prop_assert_eq!(*p, 0.0) } else { prop_assert!(*p >= 0.0) }
            }
        }
        // the steps: scores are QKᵀ/√d_k, the output is P·V
        let want = q.dot(&k.t()) / (q.ncols() as f32).sqrt();
        prop_assert!(a.scores.iter().zip(want.iter()).all(|(x, y)| (x - y).abs() < 1e-5));
        let pv = a.probs.dot(&v);
        prop_assert!(a.output.iter().zip(pv.iter()).all(|(x, y)| (x - y).abs() < 1e-5));
    }

    #[test]
    fn sdpa_with_a_full_mask_equals_no_mask((q, k, v, _m) in problem()) {
        let all = Array2::from_elem((q.nrows(), k.nrows()), true);
        let a = scaled_dot_product_attention(q.view(), k.view(), v.view(), Some(all.view())).unwrap();
        let b = scaled_dot_product_attention(q.view(), k.view(), v.view(), None).unwrap();
        prop_assert_eq!(a.probs, b.probs);
    }
}

#[test]
fn a_fully_masked_row_is_zero_not_nan() {
    let q = Array2::<f32>::ones((2, 3));
    let mut mask = Array2::from_elem((2, 4), true);
    mask.row_mut(1).fill(false);
    let a = scaled_dot_product_attention(
        q.view(),
        Array2::ones((4, 3)).view(),
        Array2::ones((4, 5)).view(),
        Some(mask.view()),
    )
    .unwrap();
    assert!(a.probs.row(1).iter().all(|&p| p == 0.0));
    assert!((a.probs.row(0).sum() - 1.0).abs() < 1e-6);
}

#[test]
fn sdpa_rejects_mismatched_shapes() {
    let q = Array2::<f32>::ones((2, 3));
    let err = scaled_dot_product_attention(
        q.view(),
        Array2::ones((4, 2)).view(),
        Array2::ones((4, 5)).view(),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("[4, 3]") && err.contains("[4, 2]"), "{err}");
    let bad_mask = Array2::from_elem((3, 3), true);
    let err = scaled_dot_product_attention(
        q.view(),
        Array2::ones((4, 3)).view(),
        Array2::ones((4, 5)).view(),
        Some(bad_mask.view()),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("mask"), "{err}");
}

#[test]
fn cross_attention_has_n_q_by_n_k_weights() {
    let m = model("tiny-bert");
    let d = m.config.hidden_size;
    let x_dec = Array2::from_shape_fn((3, d), |(i, j)| ((i * 7 + j) as f32 * 0.37).sin()); // (n_q, D)
    let x_enc = Array2::from_shape_fn((5, d), |(i, j)| ((i * 3 + j) as f32 * 0.11).cos()); // (n_k, D)
    let w = &bert(m).unwrap().layers[0].attention;
    let out = cpu::multi_head_attention(
        w.projections(),
        m.config.num_attention_heads,
        x_dec.view(),
        x_enc.view(),
        None,
        &[],
        ScoreScale::SqrtDk,
    )
    .unwrap();
    assert_eq!(out.projections.output.dim(), (3, d));
    assert_eq!(out.probs.dim(), (m.config.num_attention_heads, 3, 5));
    for row in out.probs.lanes(Axis(2)) {
        assert!((row.sum() - 1.0).abs() < 1e-5);
    }
}

#[test]
fn split_then_merge_heads_is_identity() {
    let x = Array2::from_shape_fn((5, 12), |(i, j)| (i * 12 + j) as f32);
    let heads = cpu::attention::split_heads(x.view(), 3).unwrap(); // (3, 5, 4)
    assert_eq!(heads.dim(), (3, 5, 4));
    assert_eq!(heads[[1, 2, 3]], x[[2, 4 + 3]]); // head 1 holds columns 4..8
    assert_eq!(cpu::attention::merge_heads(heads.view()), x);
    assert!(cpu::attention::split_heads(x.view(), 5).is_err());
}

fn run(texts: &[&str], kind: MaskKind) -> (attnscope::model::Encoded, attnscope::Trace) {
    let m = model("minilm");
    let input = m.tokenizer.encode(texts, None).unwrap();
    let mask = Mask::from_kind(kind, input.valid.view());
    let trace = cpu::forward(m, &input, &mask, &TraceOptions::with_scores()).unwrap();
    (input, trace)
}

#[test]
fn model_rows_sum_to_one_and_masked_cells_are_exactly_zero() {
    for kind in [MaskKind::Padding, MaskKind::Causal, MaskKind::None] {
        let (input, trace) = run(
            &[
                "time flies like an arrow",
                "hi",
                "a much longer sentence than the others",
            ],
            kind,
        );
        let (b, l, h, t, _) = trace.attention.dim();
        for bi in 0..b {
            let mask = trace.mask.item(bi);
            for li in 0..l {
                for hi in 0..h {
                    let p = trace.attention.slice(s![bi, li, hi, .., ..]);
                    for q in 0..t {
                        assert!(
                            (p.row(q).sum() - 1.0).abs() < 1e-5,
                            "{kind:?}: row sum {}",
                            p.row(q).sum()
                        );
                        for k in 0..t {
                            if !mask[[q, k]] {
                                assert_eq!(p[[q, k]], 0.0, "{kind:?}: masked cell ({q},{k}) not 0");
                            }
                            if kind == MaskKind::None && !input.valid[[bi, k]] {
                                assert!(p[[q, k]] > 0.0, "without a mask [PAD] keys leak");
                            }
                        }
                    }
                    // masked scores are what softmax saw: -inf exactly where masked
                    let ms = trace.masked_scores(bi, li, hi).unwrap();
                    assert!(ms
                        .indexed_iter()
                        .all(|((q, k), v)| mask[[q, k]] != (*v == f32::NEG_INFINITY)));
                }
            }
        }
    }
}

#[test]
fn causal_mask_is_padding_and_no_peek() {
    let m = model("minilm");
    let input = m
        .tokenizer
        .encode(&["time flies like an arrow", "hi"], None)
        .unwrap();
    let (b, t) = input.ids.dim();
    let combined = Mask::padding(input.valid.view())
        .and(&Mask::causal(b, t))
        .unwrap();
    assert_eq!(
        Mask::from_kind(MaskKind::Causal, input.valid.view()),
        combined
    );
    assert!(!combined.0[[1, 0, 3]]); // "hi" has 3 real tokens; key 3 is [PAD]
    assert!(!combined.0[[0, 1, 2]]); // no peeking ahead
    assert!(combined.0[[0, 2, 1]]);
    assert!(Mask::padding(input.valid.view())
        .and(&Mask::causal(b, t + 1))
        .is_err());
}

#[test]
fn a_sentence_attends_the_same_alone_and_in_a_padded_batch() {
    for kind in [MaskKind::Padding, MaskKind::Causal] {
        let (alone_in, alone) = run(&["time flies like an arrow"], kind);
        let (batch_in, batch) = run(
            &[
                "the quick brown fox jumps over the lazy dog again",
                "time flies like an arrow",
            ],
            kind,
        );
        let n = alone_in.len();
        assert!(
            batch_in.len() > n,
            "the sentence must be padded in the batch"
        );
        assert_eq!(batch_in.ids.slice(s![1, ..n]), alone_in.ids.row(0));
        let a = alone.attention.slice(s![0, .., .., .., ..]);
        let b = batch.attention.slice(s![1, .., .., ..n, ..n]);
        let d = max_abs_diff(a.into_dyn(), b.into_dyn());
        assert!(
            d < 1e-5,
            "{kind:?}: attention differs by {d} on the real tokens"
        );
        // and the padded keys get nothing
        assert!(batch
            .attention
            .slice(s![1, .., .., .., n..])
            .iter()
            .all(|&p| p == 0.0));
        let dh = max_abs_diff(
            alone.hidden.slice(s![0, .., ..]).into_dyn(),
            batch.hidden.slice(s![1, ..n, ..]).into_dyn(),
        );
        assert!(dh < 1e-4, "{kind:?}: hidden differs by {dh}");
    }
}

#[test]
fn with_the_causal_mask_earlier_positions_ignore_later_tokens() {
    let (a_in, a) = run(&["time flies like an arrow"], MaskKind::Causal);
    let (b_in, b) = run(&["time flies like a big yellow banana"], MaskKind::Causal);
    let shared = 4; // [CLS] time flies like
    assert_eq!(
        a_in.ids.slice(s![0, ..shared]),
        b_in.ids.slice(s![0, ..shared])
    );
    assert_ne!(a_in.ids[[0, shared]], b_in.ids[[0, shared]]);
    let da = max_abs_diff(
        a.attention
            .slice(s![0, .., .., ..shared, ..shared])
            .into_dyn(),
        b.attention
            .slice(s![0, .., .., ..shared, ..shared])
            .into_dyn(),
    );
    let dh = max_abs_diff(
        a.hidden.slice(s![0, ..shared, ..]).into_dyn(),
        b.hidden.slice(s![0, ..shared, ..]).into_dyn(),
    );
    assert!(
        da < 1e-6 && dh < 1e-5,
        "causal outputs changed: attention {da}, hidden {dh}"
    );
    // without the mask they do change: the test can fail
    let (_, a2) = run(&["time flies like an arrow"], MaskKind::Padding);
    let (_, b2) = run(&["time flies like a big yellow banana"], MaskKind::Padding);
    let dh2 = max_abs_diff(
        a2.hidden.slice(s![0, ..shared, ..]).into_dyn(),
        b2.hidden.slice(s![0, ..shared, ..]).into_dyn(),
    );
    assert!(
        dh2 > 1e-3,
        "bidirectional attention should see later tokens ({dh2})"
    );
}

#[test]
fn explicit_masks_are_applied_as_given() {
    let m = model("tiny-bert");
    let input = m
        .tokenizer
        .encode(&["the cat sat on the mat"], None)
        .unwrap();
    let t = input.len();
    // each token may attend only to itself and [CLS]
    let mask = Mask::explicit(Array3::from_shape_fn((1, t, t), |(_, q, k)| {
        k == q || k == 0
    }));
    let trace = cpu::forward(m, &input, &mask, &TraceOptions::default()).unwrap();
    for ((_, _, _, q, k), p) in trace.attention.indexed_iter() {
        if !(k == q || k == 0) {
            assert_eq!(*p, 0.0);
        }
    }
    let wrong = Mask::none(1, t, t + 1);
    assert!(cpu::forward(m, &input, &wrong, &TraceOptions::default()).is_err());
}

/// Without scores kept, each head computes `QKᵀ` in its probabilities' slice and turns it into
/// probabilities there: the same bits as through a scores array.
#[test]
fn probabilities_are_the_same_with_or_without_the_scores_kept() {
    let m = model("minilm");
    let input = m
        .tokenizer
        .encode(&["time flies like an arrow", "hi"], None)
        .unwrap();
    let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
    let with = cpu::forward(m, &input, &mask, &TraceOptions::with_scores()).unwrap();
    let without = cpu::forward(m, &input, &mask, &TraceOptions::default()).unwrap();
    assert!(without.scores.is_none());
    assert_eq!(with.attention, without.attention);
    assert_eq!(with.hidden, without.hidden);
}

/// Every field of two traces of one text, within `tol`: the attention, the scores, the hidden
/// states, the traced layer's values, the LM head's logits, and each layer's value vectors and
/// writes to the residual stream where the traces keep them.
fn assert_traces_equal(what: &str, got: &attnscope::Trace, want: &attnscope::Trace, tol: f32) {
    let mut fields = vec![
        (
            "attention",
            got.attention.view().into_dyn(),
            want.attention.view().into_dyn(),
        ),
        (
            "hidden",
            got.hidden.view().into_dyn(),
            want.hidden.view().into_dyn(),
        ),
    ];
    let pairs = [(got.scores.as_ref(), want.scores.as_ref(), "scores")];
    for (g, w, name) in pairs {
        fields.push((
            name,
            g.expect(name).view().into_dyn(),
            w.expect(name).view().into_dyn(),
        ));
    }
    let (gh, wh) = (
        got.hidden_states.as_ref().unwrap(),
        want.hidden_states.as_ref().unwrap(),
    );
    fields.push(("hidden_states", gh.view().into_dyn(), wh.view().into_dyn()));
    let (gl, wl) = (
        got.lm_logits.as_ref().unwrap(),
        want.lm_logits.as_ref().unwrap(),
    );
    fields.push(("lm_logits", gl.view().into_dyn(), wl.view().into_dyn()));
    let (gt, wt) = (
        got.layer_trace.as_ref().unwrap(),
        want.layer_trace.as_ref().unwrap(),
    );
    // every value the family named (a Llama's norms, rotations and up projection among them)
    fields.extend(layer_trace_pairs(gt, wt));
    assert_eq!(got.mask, want.mask, "{what}: the mask");
    for (name, g, w) in fields {
        assert_eq!(g.shape(), w.shape(), "{what}: {name}'s shape");
        let d = max_abs_diff(g, w);
        assert!(
            d <= tol,
            "{what}: {name} differs from the whole pass by {d}"
        );
    }
    // each layer's value vectors and writes to the residual stream, where the traces keep them
    let per_layer = |name: &str, g: &[ndarray::Array3<f32>], w: &[ndarray::Array3<f32>]| {
        assert_eq!(g.len(), w.len(), "{what}: {name}'s layers");
        for (l, (g, w)) in g.iter().zip(w).enumerate() {
            assert_eq!(g.shape(), w.shape(), "{what}: {name}[{l}]'s shape");
            let d = max_abs_diff(g.view().into_dyn(), w.view().into_dyn());
            assert!(
                d <= tol,
                "{what}: {name}[{l}] differs from the whole pass by {d}"
            );
        }
    };
    assert_eq!(
        got.values.is_some(),
        want.values.is_some(),
        "{what}: values kept"
    );
    if let (Some(g), Some(w)) = (&got.values, &want.values) {
        per_layer("values", g, w);
    }
    assert_eq!(
        got.writes.is_some(),
        want.writes.is_some(),
        "{what}: writes kept"
    );
    if let (Some(g), Some(w)) = (&got.writes, &want.writes) {
        per_layer("writes.hidden", &g.hidden, &w.hidden);
        per_layer("writes.context", &g.context, &w.context);
        per_layer(
            "writes.after_attention",
            &g.after_attention,
            &w.after_attention,
        );
    }
}

/// The positions a pass over `ids` reuses from the last pass's (`last`): every position both
/// texts begin with, but the last.
fn reused_of(last: Option<&[u32]>, ids: &[u32]) -> usize {
    last.map_or(0, |l| {
        let same = l.iter().zip(ids).take_while(|(a, b)| a == b).count();
        same.min(ids.len() - 1)
    })
}

/// A long text's pass (queries and keys kept, each head's thumbnails folded) typed on: it
/// reuses the shared beginning and resumes the last pass's thumbnails, computing the attention
/// of the new rows alone (or of the shared positions' last row of bins), and equals the whole
/// pass: the same thumbnails, queries, keys, output and next-token logits. Typed on, the last
/// word retyped, a word taken back, a word changed in the middle (a row of bins begun again),
/// and past a multiple
/// of 64 positions, where the bins widen and every row is folded again; under sliding windows
/// too (tiny Gemma 3). Each pass shows every layer's heads as it ends it, in the cells the page
/// reads (`PassProgress`): the thumbnails it keeps, bit for bit.
#[test]
fn a_long_text_typed_on_resumes_its_thumbnails_and_equals_the_whole_pass() {
    use attnscope::engine::progress::{PassProgress, Progress};
    use std::sync::Arc;
    // the cells as the page reads them (src/wasm.rs `Session.progressCells`): six u32, the
    // thumbnails' address, and `(layers, heads, side, side)` values from there
    let shown = |p: &PassProgress| -> ([u32; 6], Vec<f32>) {
        // SAFETY: `cells()` is the `repr(C)` struct's start: six `AtomicU32`, then an
        // `AtomicUsize` (offset 24, aligned) holding the thumbnails' address, where the pass
        // wrote the values of its folded layers
        unsafe {
            let c = p.cells();
            let six: [u32; 6] = std::slice::from_raw_parts(c, 6).try_into().unwrap();
            let at = *(c.add(6) as *const usize) as *const f32;
            let n = (six[3] * six[4] * six[4] * six[5]) as usize;
            (six, std::slice::from_raw_parts(at, n).to_vec())
        }
    };
    let words =
        |n: usize| ["the", "cat", "sat", "on", "a", "mat"].repeat(n.div_ceil(6))[..n].join(" ");
    for (name, steps) in [
        ("tiny-llama", [40, 42, 43, 70, 71, 71, 72, 72]),
        ("v5-gemma3", [20, 22, 23, 25, 26, 26, 27, 27]),
    ] {
        let m = model(name);
        let cells = Arc::new(PassProgress::default());
        let (layers, heads) = (m.config.num_hidden_layers, m.config.num_attention_heads);
        cells.make_room(layers, heads);
        let opts = TraceOptions {
            attention: AttentionKept::QueriesKeys,
            next_logits: true,
            progress: Progress::to(&cells),
            ..TraceOptions::default()
        };
        let mut prefixes = cpu::Prefixes::default();
        let mut last: Option<Vec<u32>> = None;
        let (mut resumed, mut widened, mut mid_bin, mut retyped) = (false, false, false, false);
        for (i, n) in steps.into_iter().enumerate() {
            // step 5 retypes the last word (its token changes), the last a word near the
            // start: the shared beginning ends there
            let text = match i {
                5 => format!("{}s", words(n)),
                7 => words(n).replacen("sat", "ran", 1),
                _ => words(n),
            };
            let input = m.tokenizer.encode(&[text.as_str()], None).unwrap();
            let t = input.len();
            assert!(t <= m.config.max_position_embeddings, "{name}: {t} tokens");
            let mask = Mask::causal(1, t);
            let ids = input.ids.row(0).to_vec();
            cells.start(layers);
            let r = cpu::forward_reusing(m, &input, &mask, &opts, &mut prefixes).unwrap();
            let shared = reused_of(last.as_deref(), &ids);
            assert_eq!(r.reused, shared, "{name} step {i}: positions reused");
            let before = last.as_ref().map_or(0, Vec::len);
            widened |= shared > 0 && Bins::of(before).w != Bins::of(t).w;
            resumed |= shared > 0 && Bins::of(before).w == Bins::of(t).w;
            // typed on with the last row of bins part full, or the last token retyped:
            // resumed in the middle of a row of bins
            let same_bins = shared > 0 && Bins::of(before).w == Bins::of(t).w;
            let mid = same_bins && !shared.is_multiple_of(Bins::of(t).w);
            mid_bin |= mid && shared == before;
            retyped |= mid && shared + 1 == before;
            let whole = cpu::forward(m, &input, &mask, &opts).unwrap();
            let what = format!("{name} step {i} ({t} tokens, {shared} reused)");
            let (got, want) = (
                r.trace.queries_keys.as_ref().unwrap(),
                whole.queries_keys.as_ref().unwrap(),
            );
            // the new rows are computed in blocks of their own (a few rows: dot products, not the
            // matrix product), so their sums may end a few bits apart: within 1e-5, as typing
            // at the end of a short text
            let (gt, wt) = (
                got.thumbnails.as_ref().unwrap(),
                want.thumbnails.as_ref().unwrap(),
            );
            assert_eq!(gt.len(), wt.len(), "{what}: the heads' thumbnails");
            let side = Bins::of(t).side;
            let (six, values) = shown(&cells);
            assert_eq!(
                six,
                [
                    layers as u32,
                    layers as u32,
                    0,
                    layers as u32,
                    side as u32,
                    heads as u32
                ],
                "{what}: the cells after the pass: every layer folded and shown"
            );
            let kept: Vec<f32> = gt.iter().flat_map(|g| g.own.values.clone()).collect();
            assert!(
                values == kept,
                "{what}: the thumbnails shown are not the pass's own"
            );
            let h = want.heads.query;
            for (at, (g, w)) in gt.iter().zip(wt).enumerate() {
                let head = want
                    .head(0, at / h, at % h, &whole.mask, false)
                    .unwrap()
                    .probs;
                for (kind, g, w) in [
                    ("own", &g.own, &w.own),
                    ("without its sink", &g.without_sink, &w.without_sink),
                ] {
                    let d = g.values.iter().zip(&w.values).map(|(a, b)| (a - b).abs());
                    let (cell, d) = d
                        .enumerate()
                        .fold((0, 0f32), |m, (i, d)| if d > m.1 { (i, d) } else { m });
                    assert!(
                        g.values.len() == w.values.len() && d <= 1e-5 && (g.max - w.max).abs() <= 1e-5,
                        "{what}: head {at}'s thumbnail ({kind}) differs by {d} at bin {cell}, its largest {} vs {}",
                        g.max, w.max
                    );
                }
                let arg = g.own.arg;
                assert!(
                    (head[[arg / t, arg % t]] - w.own.max).abs() <= 1e-5,
                    "{what}: head {at}'s largest at {arg}"
                );
            }
            for (l, (g, w)) in got.queries.iter().zip(&want.queries).enumerate() {
                let d = max_abs_diff(g.view().into_dyn(), w.view().into_dyn());
                assert!(
                    g.dim() == w.dim() && d <= 1e-5,
                    "{what}: layer {l}'s queries differ by {d}"
                );
            }
            for (l, (g, w)) in got.keys.iter().zip(&want.keys).enumerate() {
                let d = max_abs_diff(g.view().into_dyn(), w.view().into_dyn());
                assert!(
                    g.dim() == w.dim() && d <= 1e-5,
                    "{what}: layer {l}'s keys differ by {d}"
                );
            }
            let d = max_abs_diff(
                r.trace.hidden.view().into_dyn(),
                whole.hidden.view().into_dyn(),
            );
            assert!(d <= 1e-5, "{what}: the output differs by {d}");
            let (g, w) = (
                r.trace.next_logits.as_ref().unwrap(),
                whole.next_logits.as_ref().unwrap(),
            );
            let d = max_abs_diff(g.view().into_dyn(), w.view().into_dyn());
            assert!(d <= 1e-4, "{what}: the next token's logits differ by {d}");
            last = Some(ids);
        }
        assert!(resumed, "{name}: no pass resumed the last one's thumbnails");
        if name == "tiny-llama" {
            assert!(widened, "{name}: no pass widened the bins");
            assert!(
                mid_bin,
                "{name}: no pass resumed in the middle of a row of bins"
            );
            assert!(
                retyped,
                "{name}: no pass retyped the last token mid-row of bins"
            );
        }
    }
}

#[test]
fn typing_at_the_end_reuses_the_shared_beginning_and_equals_the_whole_pass() {
    // a text typed a character at a time, a character taken back, and one changed in the middle
    let texts = [
        "time flies like an arrow",
        "time flies like an arrows",
        "time flies like an arrow",
        "time flies like an arrow a",
        "time flies like an arrow an",
        "time flies like an arrow and",
        "time flies like an arrow and fruit",
        "time files like an arrow and fruit",
    ];
    for name in ["tiny-llama", "tiny-qwen2", "tiny-gpt2"] {
        let m = model(name);
        // the traced layer 0 or 1; with layer 1, each layer's value vectors and writes to the
        // residual stream too (value-weighted attention, what writes the next token)
        for layer in [0, 1] {
            let opts = TraceOptions {
                scores: true,
                hidden_states: true,
                lm_logits: true,
                layer_trace: Some(layer),
                values: layer == 1,
                writes: layer == 1,
                ..TraceOptions::default()
            };
            let mut prefixes = cpu::Prefixes::default();
            let mut last: Option<Vec<u32>> = None;
            let mut reused_any = false;
            for text in texts {
                let input = m.tokenizer.encode(&[text], None).unwrap();
                let mask = Mask::causal(1, input.len());
                let ids = input.ids.row(0).to_vec();
                let r = cpu::forward_reusing(m, &input, &mask, &opts, &mut prefixes).unwrap();
                let shared = reused_of(last.as_deref(), &ids);
                assert_eq!(r.reused, shared, "{name} {text:?}: positions reused");
                reused_any |= r.reused > 0;
                let whole = cpu::forward(m, &input, &mask, &opts).unwrap();
                assert_traces_equal(
                    &format!("{name} layer {layer} {text:?}"),
                    &r.trace,
                    &whole,
                    1e-5,
                );
                last = Some(ids);
            }
            assert!(reused_any, "{name}: no pass reused the last one");
        }
        // a text longer than MAX_PREFIX_TOKENS is not kept: the next runs whole
        let long = "time flies like an arrow and fruit flies like a banana ".repeat(5);
        let opts = TraceOptions::default();
        let mut prefixes = cpu::Prefixes::default();
        // (tiny-gpt2 has 64 positions: no text of its is too long to keep)
        let room = m.config.max_tokens() > cpu::MAX_PREFIX_TOKENS + 8;
        for text in [long.clone(), format!("{long}x")]
            .into_iter()
            .filter(|_| room)
        {
            let input = m.tokenizer.encode(&[&text], None).unwrap();
            assert!(
                input.len() > cpu::MAX_PREFIX_TOKENS,
                "{name}: {} tokens",
                input.len()
            );
            let mask = Mask::causal(1, input.len());
            let r = cpu::forward_reusing(m, &input, &mask, &opts, &mut prefixes).unwrap();
            assert_eq!(r.reused, 0, "{name}: a long text");
        }
        // another option set, a batch or the padding mask run whole
        let input = m
            .tokenizer
            .encode(&["time flies", "like an arrow"], None)
            .unwrap();
        let mask = Mask::from_kind(MaskKind::Causal, input.valid.view());
        let r = cpu::forward_reusing(
            m,
            &input,
            &mask,
            &TraceOptions::default(),
            &mut cpu::Prefixes::default(),
        )
        .unwrap();
        assert_eq!(r.reused, 0, "{name}: a batch of two");
    }
}

/// A pass that keeps each layer's queries and keys in place of the probabilities (a long text's
/// way): each head computed from them equals the head a pass keeping every probability returns,
/// scores too, and so do the head metrics and the rollout read through them, and the
/// thumbnails the pass folded as it went (its largest probability where the kept head has it);
/// the rest of the trace is the same values. On every single-stack family, a padded batch of two under the
/// model's own mask, with a head knocked out (its attention is still computed and kept).
#[test]
fn heads_computed_from_the_kept_queries_and_keys_equal_the_kept_probabilities() {
    for name in [
        "tiny-llama",
        "tiny-qwen2",
        "tiny-gpt2",
        "tiny-bert",
        "tiny-roberta",
    ] {
        let m = model(name);
        // long enough that one head's rows go in several blocks on the pool (`QueriesKeys::head`)
        let long = "time flies like an arrow and fruit flies like a banana; ".repeat(4);
        let input = m.tokenizer.encode(&[long.as_str(), "hi"], None).unwrap();
        let mask = Mask::from_kind(m.own_mask(), input.valid.view());
        let kept = TraceOptions {
            scores: true,
            head_mask: attnscope::engine::HeadMask::parse("1:1").unwrap(),
            hidden_states: true,
            lm_logits: m.weights.has_lm_head(),
            ..TraceOptions::default()
        };
        let qk = TraceOptions {
            attention: AttentionKept::QueriesKeys,
            ..kept.clone()
        };
        let want = cpu::forward(m, &input, &mask, &kept).unwrap();
        let got = cpu::forward(m, &input, &mask, &qk).unwrap();
        let (b, l, h, t, _) = want.attention.dim();
        assert_eq!(
            got.attention.dim(),
            (b, l, h, 0, 0),
            "{name}: no probabilities kept"
        );
        assert!(got.scores.is_none(), "{name}: no scores kept");
        let from = got.queries_keys.as_ref().expect("queries and keys kept");
        assert!(want.queries_keys.is_none());
        assert_eq!((from.queries.len(), from.heads.query), (l, h));
        for i in 0..b {
            for li in 0..l {
                // a layer's heads at once (in parallel on the pool) are each head's alone
                let all = from.heads(i, li, 0..h, &got.mask, true).unwrap();
                assert_eq!(all.len(), h);
                for (hi, many) in all.into_iter().enumerate() {
                    let one = from.head(i, li, hi, &got.mask, true).unwrap();
                    assert_eq!((&many.probs, &many.scores), (&one.probs, &one.scores));
                    // and a few rows at a time, each part handed over before the next (what
                    // the page copies out of a long text's head), the same values; the scores
                    // not kept, their largest |value| over every cell, the masked ones too
                    let sc = one.scores.as_ref().unwrap();
                    let largest = sc.iter().fold(0f32, |m, v| m.max(v.abs()));
                    for rows in [1, 5, 64] {
                        let mut probs = one.probs.clone();
                        probs.fill(f32::NAN);
                        let mut next = 0;
                        let score_max = from
                            .head_in_parts(i, li, hi, &got.mask, rows, |first, p, m| {
                                // the parts in order, each of 4 rows or more
                                assert_eq!(first, next);
                                assert!(p.nrows() >= 4.min(one.probs.nrows()));
                                // with the layer's mask of its rows: a key it hides holds 0
                                assert_eq!(m.dim(), p.dim());
                                assert!(
                                    p.iter().zip(&m).all(|(&v, &on)| on || v == 0.0),
                                    "{name} item {i} head {li}:{hi}: a masked key's probability"
                                );
                                probs.slice_mut(s![first..first + p.nrows(), ..]).assign(&p);
                                next += p.nrows();
                                Ok(())
                            })
                            .unwrap();
                        assert_eq!(next, one.probs.nrows(), "every row in a part");
                        assert_eq!(
                            &probs, &one.probs,
                            "{name} item {i} head {li}:{hi}, {rows} rows a part"
                        );
                        assert!(largest > 0.0);
                        assert_eq!(
                            score_max.to_bits(),
                            largest.to_bits(),
                            "{name} item {i} head {li}:{hi}, {rows} rows a part: the largest |score|"
                        );
                    }
                    // a window of its scores: the same bits as the head's, down to one cell,
                    // and one at the end of the text (its rows taken from before it)
                    let n = sc.nrows();
                    for (rows, keys) in [
                        (0..n, 0..n),
                        (3..n.min(40), 1..n.min(9)),
                        (n - 1..n, 0..n),
                        (n / 2..n / 2 + 1, n / 3..n / 3 + 1),
                        (n - 2..n, n - 2..n),
                        (5..5, 0..n),
                    ] {
                        let got = from
                            .scores_in(i, li, hi, &got.mask, rows.clone(), keys.clone())
                            .unwrap();
                        assert_eq!(
                            got,
                            sc.slice(s![rows.clone(), keys.clone()]),
                            "{name} item {i} head {li}:{hi}: scores of {rows:?} × {keys:?}"
                        );
                    }
                    let err = from
                        .scores_in(i, li, hi, &got.mask, n - 1..n + 1, 0..n)
                        .unwrap_err();
                    assert!(err.to_string().contains("query rows"), "{err}");
                }
                for hi in 0..h {
                    let one = from.head(i, li, hi, &got.mask, true).unwrap();
                    let at = s![i, li, hi, .., ..];
                    let (p, sc) = (
                        want.attention.slice(at),
                        want.scores.as_ref().unwrap().slice(at),
                    );
                    assert_eq!(one.probs.dim(), (t, t));
                    let dp = max_abs_diff(one.probs.view().into_dyn(), p.into_dyn());
                    let ds = max_abs_diff(one.scores.unwrap().view().into_dyn(), sc.into_dyn());
                    assert!(dp <= 1e-6 && ds <= 1e-5, "{name} item {i} head {li}:{hi}: probabilities differ by {dp}, scores by {ds}");
                }
            }
        }
        assert_folded_as_kept(name, from, &want.attention);
        // the knocked-out head's context is zero in both, so every layer after it agrees
        assert_eq!(got.hidden, want.hidden, "{name}: the output");
        assert_eq!(
            got.hidden_states, want.hidden_states,
            "{name}: every layer's output"
        );
        assert_eq!(
            got.lm_logits, want.lm_logits,
            "{name}: the LM head's logits"
        );
        let special = m.tokenizer.special_ids();
        for i in 0..b {
            let (g, w) = (
                item_attention(&got, &input, i, special),
                item_attention(&want, &input, i, special),
            );
            let (gm, wm) = (HeadMetrics::of(&g).unwrap(), HeadMetrics::of(&w).unwrap());
            for ((metric, gv), (_, wv)) in gm.all().into_iter().zip(wm.all()) {
                let d = max_abs_diff(gv.view().into_dyn(), wv.view().into_dyn());
                assert!(d <= 1e-5, "{name} item {i}: {metric} differs by {d}");
            }
            let d = max_abs_diff(
                rollout(&g).unwrap().view().into_dyn(),
                rollout(&w).unwrap().view().into_dyn(),
            );
            assert!(d <= 1e-5, "{name} item {i}: the rollout differs by {d}");
        }
        // a head the pass does not have is named
        let err = from
            .head(0, l, 0, &got.mask, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("layer {l} does not exist")), "{err}");
        let err = from
            .head(b, 0, 0, &got.mask, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("item {b}, head 0")), "{err}");
    }
    // a translation model's two stacks are refused by name
    let m = model("tiny-marian");
    let input = m.tokenizer.encode(&["hello"], None).unwrap();
    let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
    let qk = TraceOptions {
        attention: AttentionKept::QueriesKeys,
        ..TraceOptions::default()
    };
    let err = cpu::forward(m, &input, &mask, &qk).unwrap_err().to_string();
    assert!(err.contains("translation model"), "{err}");
}

/// Each head's thumbnails that a pass keeping the queries and keys folded as it went (`from`)
/// are those of the head a pass keeping every probability returns (`kept`, `(B, L, H, T, T)`):
/// each bin and the largest within 1e-6, and the largest where the kept head has it.
fn assert_folded_as_kept(
    name: &str,
    from: &attnscope::engine::QueriesKeys,
    kept: &ndarray::Array5<f32>,
) {
    let (b, l, h, t, _) = kept.dim();
    let folded = from.thumbnails.as_ref().expect("the CPU pass folds");
    assert_eq!(folded.len(), b * l * h, "{name}: a head's thumbnails each");
    for (at, f) in folded.iter().enumerate() {
        let (i, li, hi) = (at / (l * h), at / h % l, at % h);
        let p = kept.slice(s![i, li, hi, .., ..]);
        let whole = HeadThumbnails::of(p, Bins::of(t));
        for (f, w) in [(&f.own, &whole.own), (&f.without_sink, &whole.without_sink)] {
            let d = f.values.iter().zip(&w.values).map(|(a, b)| (a - b).abs());
            let d = d.fold(0f32, f32::max);
            assert!(
                f.values.len() == w.values.len() && d <= 1e-6 && (f.max - w.max).abs() <= 1e-6,
                "{name} item {i} head {li}:{hi}: the folded thumbnail differs by {d}, its largest {} vs {}",
                f.max,
                w.max
            );
        }
        let arg = f.own.arg;
        assert!(
            (p[[arg / t, arg % t]] - whole.own.max).abs() <= 1e-6,
            "{name} item {i} head {li}:{hi}: the largest at {arg}"
        );
    }
}

/// A long text's pass folds each head's thumbnails a block of query rows at a time, over the
/// keys each block reaches: over more than one block and pooled (tiny Llama, 120 positions in
/// bins of 2), and under sliding windows of 5 (tiny Gemma 3), with a shorter item padded beside;
/// each head computed again from the kept queries and keys is the kept one.
#[test]
fn thumbnails_folded_by_a_long_pass_equal_the_kept_heads() {
    for (name, words) in [("tiny-llama", 120), ("v5-gemma3", 60)] {
        let m = model(name);
        // the longest text of these words the model's positions hold
        let input = (1..=words)
            .rev()
            .map(|n: usize| {
                let text =
                    ["the", "cat", "sat", "on", "a", "mat"].repeat(n.div_ceil(6))[..n].join(" ");
                m.tokenizer
                    .encode(&[text.as_str(), "time flies"], None)
                    .unwrap()
            })
            .find(|e| e.ids.ncols() <= m.config.max_position_embeddings)
            .unwrap();
        let mask = Mask::from_kind(m.own_mask(), input.valid.view());
        let qk = TraceOptions {
            attention: AttentionKept::QueriesKeys,
            ..TraceOptions::default()
        };
        let want = cpu::forward(m, &input, &mask, &TraceOptions::default()).unwrap();
        let got = cpu::forward(m, &input, &mask, &qk).unwrap();
        let t = want.attention.dim().3;
        assert!(t > 50, "{name}: {t} positions");
        let from = got.queries_keys.as_ref().unwrap();
        assert_folded_as_kept(name, from, &want.attention);
        // each head computed again from the queries and keys (its rows in blocks on the pool, a
        // sliding layer's window cut from the item's mask) equals the kept one
        let (b, l, h, _, _) = want.attention.dim();
        for i in 0..b {
            for li in 0..l {
                for hi in 0..h {
                    let one = from.head(i, li, hi, &got.mask, false).unwrap();
                    let kept = want.attention.slice(s![i, li, hi, .., ..]);
                    let d = max_abs_diff(one.probs.view().into_dyn(), kept.into_dyn());
                    assert!(
                        d <= 1e-6,
                        "{name} item {i} head {li}:{hi}: computed again, {d} off"
                    );
                }
            }
        }
    }
}

/// The plain reference: every probability in f64, every index sorted by (p descending, id).
fn top_k_reference(row: &[f32], k: usize) -> Vec<(u32, f64)> {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    order
        .into_iter()
        .take(k)
        .map(|i| (i as u32, (row[i] as f64 - max).exp() / sum))
        .collect()
}

proptest! {
    /// Ids in the reference's order (ties by the lower id: logits drawn from a few values
    /// tie often) and probabilities within 1e-6 of the f64 softmax, for any k.
    #[test]
    fn top_k_equals_a_full_softmax_sorted(
        rows in 1usize..4, v in 1usize..300, k in 0usize..12, levels in 1u32..40, seed in any::<u64>()
    ) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let logits = Array2::from_shape_fn((rows, v), |_| rng.random_range(0..levels) as f32 * 0.37 - 5.0);
        let got = attnscope::engine::top_k(logits.view(), k);
        prop_assert_eq!(got.len(), rows);
        for (r, top) in got.iter().enumerate() {
            let want = top_k_reference(logits.row(r).as_slice().unwrap(), k);
            prop_assert_eq!(top.iter().map(|t| t.id).collect::<Vec<_>>(), want.iter().map(|w| w.0).collect::<Vec<_>>(), "row {}", r);
            for (t, w) in top.iter().zip(&want) {
                prop_assert!((t.p as f64 - w.1).abs() <= 1e-6, "row {} id {}: {} vs {}", r, t.id, t.p, w.1);
            }
        }
    }
}

#[test]
fn top_k_of_a_vocabulary_row_reads_a_non_contiguous_view() {
    // (V, n) as stored, read transposed: each row of the (n, V) view is strided
    let stored = Array2::from_shape_fn((500, 3), |(i, r)| ((i * 7 + r * 13) % 101) as f32 / 10.0);
    let logits = stored.t(); // (3, 500), each row strided
    assert!(logits.row(0).as_slice().is_none());
    let got = attnscope::engine::top_k(logits, 3);
    for (r, top) in got.iter().enumerate() {
        let want = top_k_reference(&logits.row(r).to_vec(), 3);
        assert_eq!(
            top.iter().map(|t| t.id).collect::<Vec<_>>(),
            want.iter().map(|w| w.0).collect::<Vec<_>>()
        );
    }
}

/// A pass reports each self-attention layer it begins where it is given progress cells, and
/// computes the same bits; a stop asked before it ends it before its first layer, by name; a
/// pass begun again after the stop runs whole.
#[test]
fn a_pass_reports_its_layers_and_stops_when_asked() {
    use attnscope::engine::progress::{PassProgress, Progress};
    use std::sync::Arc;
    let m = model("tiny-llama");
    let layers = m.config.num_hidden_layers;
    let input = m
        .tokenizer
        .encode(&["the cat sat on the mat"], None)
        .unwrap();
    let mask = Mask::from_kind(MaskKind::Causal, input.valid.view());
    let plain = cpu::forward(m, &input, &mask, &TraceOptions::default()).unwrap();
    let cells = Arc::new(PassProgress::default());
    let opts = TraceOptions {
        progress: Progress::to(&cells),
        ..TraceOptions::default()
    };
    for kept in [AttentionKept::Probabilities, AttentionKept::QueriesKeys] {
        let opts = TraceOptions {
            attention: kept,
            ..opts.clone()
        };
        cells.start(layers);
        assert_eq!(cells.at(), (0, layers));
        let got = cpu::forward(m, &input, &mask, &opts).unwrap();
        assert_eq!(cells.at(), (layers, layers), "{kept:?}: every layer begun");
        assert_eq!(got.hidden, plain.hidden, "{kept:?}: the same bits");
        // asked to stop before it begins: no layer runs
        cells.start(layers);
        cells.ask_to_stop();
        let err = cpu::forward(m, &input, &mask, &opts).unwrap_err();
        assert!(
            matches!(err, attnscope::Error::Stopped { layer: 0, layers: l } if l == layers),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            format!("stopped as asked, after 0 of {layers} layers")
        );
        assert_eq!(cells.at(), (0, layers));
    }
    // begun again: whole
    cells.start(layers);
    let again = cpu::forward(m, &input, &mask, &opts).unwrap();
    assert_eq!(again.attention, plain.attention);
}
