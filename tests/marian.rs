//! Marian, an encoder–decoder model, on the CPU engine against HF transformers (fixtures by
//! `tools/make_fixtures.py --only marian`): greedy decoding equal to HF's `generate`, teacher
//! forcing, a padded batch equal to each source alone, and the cached step-by-step decoding
//! equal to one masked pass over the same output.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use attnscope::engine::translate;
use common::*;

#[test]
fn every_translation_fixture_has_a_test() {
    assert_cases_cover_fixtures(TRANSLATION_CASES, |n| n.starts_with("marian_"));
}

#[test]
fn marian_generate_equals_hf() {
    let (a, p) = check_translation("marian_generate", &translate);
    eprintln!("marian_generate: attention {a:.2e}, step probabilities {p:.2e}");
}

#[test]
fn marian_teacher_forcing_equals_hf() {
    check_translation("marian_teacher", &translate);
}

#[test]
fn marian_f16_generate_equals_hf() {
    check_translation("marian_f16_generate", &translate);
}

#[test]
fn marian_f16_teacher_forcing_equals_hf() {
    check_translation("marian_f16_teacher", &translate);
}

/// burn's autoregressive test, for the whole decoder: each step run for its new position alone,
/// reading the cached keys and values of the earlier positions and of the source, equals one
/// pass over the whole output under the no-peek mask.
#[test]
fn cached_decoding_equals_the_masked_full_pass() {
    use attnscope::engine::Decoding;
    use ndarray::s;
    for name in ["tiny-marian", "tiny-marian-f16"] {
        let m = model(name);
        let sources = [
            "time flies like an arrow",
            "the cat sat on the mat",
            "a dog!",
        ];
        let greedy = translate(m, &sources, &Decoding::Greedy { max_new_tokens: 16 }).unwrap();
        let full = translate(m, &sources, &Decoding::Forced(greedy.output_ids.clone())).unwrap();
        assert_eq!(full.output_ids, greedy.output_ids);
        for b in 0..sources.len() {
            let t = greedy.steps(b);
            let s_len = greedy.source.valid.row(b).iter().filter(|&&v| v).count();
            for (what, a, c) in [
                (
                    "encoder",
                    greedy
                        .encoder_attention
                        .slice(s![b, .., .., .., ..])
                        .into_dyn(),
                    full.encoder_attention
                        .slice(s![b, .., .., .., ..])
                        .into_dyn(),
                ),
                (
                    "decoder",
                    greedy
                        .decoder_attention
                        .slice(s![b, .., .., ..t, ..t])
                        .into_dyn(),
                    full.decoder_attention
                        .slice(s![b, .., .., ..t, ..t])
                        .into_dyn(),
                ),
                (
                    "cross",
                    greedy
                        .cross_attention
                        .slice(s![b, .., .., ..t, ..s_len])
                        .into_dyn(),
                    full.cross_attention
                        .slice(s![b, .., .., ..t, ..s_len])
                        .into_dyn(),
                ),
                (
                    "logits",
                    greedy.step_logits.slice(s![b, ..t, ..]).into_dyn(),
                    full.step_logits.slice(s![b, ..t, ..]).into_dyn(),
                ),
            ] {
                let d = max_abs_diff(a, c);
                assert!(
                    d <= 1e-5,
                    "{name} item {b}: the cached decoding's {what} differs by {d}"
                );
            }
            // the no-peek mask: nothing above the diagonal, in either
            let upper = (0..t).flat_map(|i| (i + 1..t).map(move |j| (i, j)));
            for (i, j) in upper {
                let cell = greedy.decoder_attention.slice(s![b, .., .., i, j]);
                assert!(
                    cell.iter().all(|&p| p == 0.0),
                    "{name} item {b}: row {i} sees {j}"
                );
            }
        }
    }
}

/// A source's padding is hidden from the encoder and the cross-attention: no probability on a
/// pad key, every row a distribution.
#[test]
fn padding_is_masked_in_the_encoder_and_across() {
    use attnscope::engine::Decoding;
    let m = model("tiny-marian");
    let tr = translate(
        m,
        &["hi", "time flies like an arrow"],
        &Decoding::Greedy { max_new_tokens: 4 },
    )
    .unwrap();
    let valid = tr.source.valid.row(0);
    let pads: Vec<usize> = (0..valid.len()).filter(|&j| !valid[j]).collect();
    assert!(!pads.is_empty(), "the short source is padded");
    for a in [&tr.encoder_attention, &tr.cross_attention] {
        let item = a.index_axis(ndarray::Axis(0), 0);
        for row in item.lanes(ndarray::Axis(3)) {
            let sum: f32 = row.sum();
            assert!(
                sum == 0.0 || (sum - 1.0).abs() < 1e-5,
                "a row sums to {sum}"
            );
            for &j in &pads {
                assert_eq!(row[j], 0.0, "a pad key has probability");
            }
        }
    }
}

/// The GPU engine (lavapipe where there is no GPU): its recorded passes, the cache written a
/// row per step and read under the mask, equal HF's as the CPU's do.
fn gpu_translate(
    m: &attnscope::Model,
    sources: &[&str],
    decoding: &attnscope::engine::Decoding,
) -> attnscope::Result<attnscope::engine::Translation> {
    pollster::block_on(gpu_engine(m).translate(m, sources, decoding))
}

#[test]
fn gpu_translations_equal_hf() {
    for case in TRANSLATION_CASES {
        let (a, p) = check_translation(case, &gpu_translate);
        eprintln!("{case} on the GPU: attention {a:.2e}, step probabilities {p:.2e}");
    }
}

#[test]
fn gpu_equals_cpu_on_a_longer_decoding() {
    use attnscope::engine::Decoding;
    use ndarray::s;
    let m = model("tiny-marian-f16");
    let sources = [
        "time flies like an arrow",
        "the cat sat on the mat",
        "a dog!",
    ];
    let decoding = Decoding::Greedy { max_new_tokens: 24 };
    let cpu = translate(m, &sources, &decoding).unwrap();
    let gpu = gpu_translate(m, &sources, &decoding).unwrap();
    assert_eq!(gpu.output_ids, cpu.output_ids);
    for b in 0..sources.len() {
        let t = cpu.steps(b);
        let d = max_abs_diff(
            gpu.decoder_attention
                .slice(s![b, .., .., ..t, ..t])
                .into_dyn(),
            cpu.decoder_attention
                .slice(s![b, .., .., ..t, ..t])
                .into_dyn(),
        );
        assert!(
            d <= 1e-5,
            "item {b}: the decoder's attention differs by {d}"
        );
        let d = max_abs_diff(
            gpu.cross_attention.slice(s![b, .., .., ..t, ..]).into_dyn(),
            cpu.cross_attention.slice(s![b, .., .., ..t, ..]).into_dyn(),
        );
        assert!(d <= 1e-5, "item {b}: the cross-attention differs by {d}");
    }
}
