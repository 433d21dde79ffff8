//! Marian, an encoder–decoder model, on the CPU engine against HF transformers (fixtures by
//! `tools/make_fixtures.py --only marian`): greedy decoding equal to HF's `generate`, teacher
//! forcing, a padded batch equal to each source alone, and the cached step-by-step decoding
//! equal to one masked pass over the same output.

use crate::common::*;
use attnscope::engine::translate;

#[test]
fn every_translation_fixture_has_a_test() {
    assert_cases_cover_fixtures(TRANSLATION_CASES, |n| n.starts_with("marian_"));
}

#[test]
fn marian_generate_equals_hf() {
    let (a, p) = check_translation("marian_generate", &cpu_translate);
    eprintln!("marian_generate: attention {a:.2e}, step probabilities {p:.2e}");
}

#[test]
fn marian_teacher_forcing_equals_hf() {
    check_translation("marian_teacher", &cpu_translate);
}

#[test]
fn marian_f16_generate_equals_hf() {
    check_translation("marian_f16_generate", &cpu_translate);
}

#[test]
fn marian_f16_teacher_forcing_equals_hf() {
    check_translation("marian_f16_teacher", &cpu_translate);
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

/// The batch as the engine ran it (`PaddedBatch`, the page's masks view): a teacher-forced batch
/// of two lengths each way, its masks as the seeds build them (`src != pad`, `(tgt != pad) &
/// no-peek`), applied (a masked key gets exactly 0), and its real cells equal to each item's own.
#[test]
fn a_padded_batch_shows_its_masks_applied() {
    use attnscope::engine::Decoding;
    use attnscope::report::TranslationReport;
    let m = model("tiny-marian");
    let sources = ["hi".to_owned(), "time flies like an arrow".to_owned()];
    let targets = ["a b c d e f".to_owned(), "x".to_owned()];
    let refs: Vec<&str> = sources.iter().map(String::as_str).collect();
    let trefs: Vec<&str> = targets.iter().map(String::as_str).collect();
    let tr = translate(m, &refs, &Decoding::forced(m, &trefs).unwrap()).unwrap();
    let mut report = TranslationReport::new(m, "cpu", &sources, Some(&targets), &tr, None);
    report.padded = Some(attnscope::report::PaddedBatch::new(m, &tr, true));
    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    let p = &json["padded"];
    let flags =
        |v: &serde_json::Value| -> Vec<Vec<bool>> { serde_json::from_value(v.clone()).unwrap() };
    let (sv, tv) = (flags(&p["source_valid"]), flags(&p["target_valid"]));
    let (s, t) = (sv[0].len(), tv[0].len());
    assert!(
        sv[0].contains(&false) && !sv[1].contains(&false),
        "the short source is padded: {sv:?}"
    );
    assert!(
        tv[1].contains(&false) && !tv[0].contains(&false),
        "the short target is padded: {tv:?}"
    );
    assert_eq!(p["target_padding_masked"], true);
    let pad = m.tokenizer.token(m.tokenizer.pad_id());
    assert_eq!(p["source_tokens"][0][s - 1], pad.as_str());
    assert_eq!(p["target_tokens"][1][t - 1], pad.as_str());
    let at = |name: &str, b: usize, l: usize, h: usize, q: usize, k: usize| {
        p[name][b][l][h][q][k].as_f64().unwrap()
    };
    let mut masked = 0;
    for b in 0..2 {
        let item = &json["results"][b];
        let (sb, tb) = (
            sv[b].iter().filter(|&&v| v).count(),
            tv[b].iter().filter(|&&v| v).count(),
        );
        let dims = |name: &str| {
            let a = &p[name][b];
            (a.as_array().unwrap().len(), a[0].as_array().unwrap().len())
        };
        let (ld, hd) = dims("decoder_attention");
        for (l, h) in (0..ld).flat_map(|l| (0..hd).map(move |h| (l, h))) {
            for q in 0..t {
                for k in 0..t {
                    // the seeds' tgt_mask: (tgt != pad).unsqueeze(-2) & subsequent_mask
                    if k > q || !tv[b][k] {
                        assert_eq!(
                            at("decoder_attention", b, l, h, q, k),
                            0.0,
                            "item {b} L{l} H{h} decoder ({q}, {k}) is masked"
                        );
                        masked += 1;
                    } else if q < tb {
                        let own = item["decoder_attention"][l][h][q][k].as_f64().unwrap();
                        assert_eq!(at("decoder_attention", b, l, h, q, k), own);
                    }
                }
                for k in 0..s {
                    if !sv[b][k] {
                        assert_eq!(
                            at("cross_attention", b, l, h, q, k),
                            0.0,
                            "item {b} cross ({q}, {k}) is masked"
                        );
                        masked += 1;
                    } else if q < tb {
                        assert_eq!(
                            at("cross_attention", b, l, h, q, k),
                            item["cross_attention"][l][h][q][k].as_f64().unwrap()
                        );
                    }
                }
            }
        }
        let (le, he) = dims("encoder_attention");
        for (l, h) in (0..le).flat_map(|l| (0..he).map(move |h| (l, h))) {
            for q in 0..sb {
                for k in 0..s {
                    let v = at("encoder_attention", b, l, h, q, k);
                    if sv[b][k] {
                        assert_eq!(v, item["encoder_attention"][l][h][q][k].as_f64().unwrap());
                    } else {
                        assert_eq!(v, 0.0, "item {b} encoder ({q}, {k}) is masked");
                        masked += 1;
                    }
                }
            }
        }
    }
    assert!(masked > 0);
}

/// The GPU engine (lavapipe where there is no GPU): its recorded passes, the cache written a
/// row per step and read under the mask, equal HF's as the CPU's do.
/// [`translate`] on the CPU engine, as [`check_translation`] takes a translation.
fn cpu_translate(
    m: &attnscope::Model,
    sources: &[&str],
    decoding: &attnscope::engine::Decoding,
) -> attnscope::Result<attnscope::engine::Translation> {
    translate(m, sources, decoding)
}

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

/// The decoder's inside, as the page's panels draw it (`decoder_trace`: one teacher-forced pass
/// over a greedy translation's own output), is the decoder's own arithmetic: the token rows are
/// the shared table's times `√d_model`, the positions Marian's sinusoids, each sublayer's sum is
/// its input plus its output, the cross-attention's scores are `q·k/√d_k` of its queries (from
/// the decoder) and keys (from the encoder), their masked softmax is the translation's
/// cross-attention, and the context is that softmax times the values.
#[test]
fn the_decoder_trace_is_the_decoder_s_own_arithmetic() {
    use attnscope::engine::{decoder_trace, Decoding};
    use attnscope::families::marian::sinusoidal_positions;
    use ndarray::{s, Axis};
    let m = model("dates");
    let sources = ["the 9th of May 2018", "1.2.1999"];
    let tr = translate(m, &sources, &Decoding::Greedy { max_new_tokens: 12 }).unwrap();
    let d = m.config.decoder.as_ref().unwrap();
    let (heads, dk) = (d.heads, m.config.hidden_size / d.heads);
    let bytes = std::fs::read(model_dir("dates").join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let table = st.tensor("model.shared.weight").unwrap();
    let width = table.shape()[1];
    let row = |id: u32| -> Vec<f32> {
        let raw = &table.data()[id as usize * width * 4..(id as usize + 1) * width * 4];
        raw.chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let close = |a: f32, b: f32, what: &str| {
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "{what}: {a} vs {b}"
        )
    };
    let mut previous_output = None;
    for layer in 0..d.layers {
        const ORDER: [&str; 15] = [
            "input",
            "v",
            "self_output",
            "self_sum",
            "self_normed",
            "cross_q",
            "cross_k",
            "cross_v",
            "cross_context",
            "cross_output",
            "cross_sum",
            "cross_normed",
            "ffn_output",
            "ffn_sum",
            "output",
        ];
        let dt = decoder_trace(m, &sources, &tr.output_ids, layer).unwrap();
        let v = |name: &str| dt.get(name).unwrap();
        let sinusoids = sinusoidal_positions(64, width);
        for b in 0..sources.len() {
            let t_b = tr.steps(b);
            let s_b = tr.source.valid.row(b).iter().filter(|&&v| v).count();
            for t in 0..t_b {
                let id = tr.output_ids[b][t];
                for j in 0..width {
                    let what = format!("layer {layer} item {b} step {t} dim {j}");
                    close(
                        dt.word[[b, t, j]],
                        row(id)[j] * d.embed_scale,
                        &format!("{what}: word"),
                    );
                    close(
                        dt.position[[b, t, j]],
                        sinusoids[[t, j]],
                        &format!("{what}: position"),
                    );
                    close(
                        v("self_sum")[[b, t, j]],
                        v("input")[[b, t, j]] + v("self_output")[[b, t, j]],
                        &format!("{what}: self sum"),
                    );
                    close(
                        v("cross_sum")[[b, t, j]],
                        v("self_normed")[[b, t, j]] + v("cross_output")[[b, t, j]],
                        &format!("{what}: cross sum"),
                    );
                    close(
                        v("ffn_sum")[[b, t, j]],
                        v("cross_normed")[[b, t, j]] + v("ffn_output")[[b, t, j]],
                        &format!("{what}: ffn sum"),
                    );
                }
                for h in 0..heads {
                    let (c0, c1) = (h * dk, (h + 1) * dk);
                    let q = v("cross_q").slice(s![b, t, c0..c1]);
                    let scores: Vec<f32> = (0..s_b)
                        .map(|k| q.dot(&v("cross_k").slice(s![b, k, c0..c1])) / (dk as f32).sqrt())
                        .collect();
                    let max = scores.iter().cloned().fold(f32::MIN, f32::max);
                    let z: f32 = scores.iter().map(|x| (x - max).exp()).sum();
                    for (k, &score) in scores.iter().enumerate() {
                        let what = format!("layer {layer} item {b} step {t} head {h} key {k}");
                        close(
                            dt.cross_scores[[b, h, t, k]],
                            score,
                            &format!("{what}: score"),
                        );
                        let p = (score - max).exp() / z;
                        close(
                            p,
                            tr.cross_attention[[b, layer, h, t, k]],
                            &format!("{what}: probability"),
                        );
                    }
                    for j in 0..dk {
                        let ctx: f32 = (0..s_b)
                            .map(|k| {
                                tr.cross_attention[[b, layer, h, t, k]]
                                    * v("cross_v")[[b, k, h * dk + j]]
                            })
                            .sum();
                        close(
                            v("cross_context")[[b, t, h * dk + j]],
                            ctx,
                            &format!("layer {layer} item {b} step {t} head {h}: context {j}"),
                        );
                    }
                }
            }
        }
        // a layer reads the one before it: layer 0 the embeddings' sum
        let input = v("input").clone();
        match previous_output.replace(v("output").clone()) {
            None => {
                let sum = &dt.word + &dt.position;
                for (a, b) in input.iter().zip(sum.iter()) {
                    close(*a, *b, "layer 0 reads the embeddings' sum");
                }
            }
            Some(prev) => {
                for (a, b) in input.iter().zip(prev.iter()) {
                    close(
                        *a,
                        *b,
                        &format!("layer {layer} reads layer {}'s output", layer - 1),
                    );
                }
            }
        }
        assert_eq!(v("cross_k").len_of(Axis(1)), tr.source.ids.ncols());
        // the names the page's inside-the-decoder panels read (web/views/decoder/)
        let mut names: Vec<&str> = dt.values.keys().copied().collect();
        names.sort_by_key(|n| ORDER.iter().position(|o| o == n));
        assert_eq!(names, ORDER, "layer {layer}'s values");
    }
    assert!(
        decoder_trace(m, &sources, &tr.output_ids, d.layers).is_err(),
        "a layer past the last is an error"
    );
}

/// A checkpoint whose `tokenizer.json` does not mark `<pad>` (Marian's decoder start) special
/// still writes its output text without it, as HF's `decode(ids, skip_special_tokens=True)` does
/// with the config's pad token; the tokens themselves keep it.
#[test]
fn the_output_text_leaves_out_the_decoder_s_own_special_tokens() {
    use attnscope::engine::Decoding;
    use attnscope::report::TranslationReport;
    use attnscope::Model;
    let dir = model_dir("tiny-marian");
    let mut tokenizer: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tokenizer.json")).unwrap()).unwrap();
    for t in tokenizer["added_tokens"].as_array_mut().unwrap() {
        t["special"] = serde_json::Value::Bool(false);
    }
    let m = Model::from_bytes(
        "tiny-marian, no special added tokens",
        &std::fs::read(dir.join("config.json")).unwrap(),
        &std::fs::read(dir.join("model.safetensors")).unwrap(),
        &serde_json::to_vec(&tokenizer).unwrap(),
    )
    .unwrap();
    let sources = ["time flies like an arrow".to_owned()];
    let tr = translate(
        &m,
        &["time flies like an arrow"],
        &Decoding::Greedy { max_new_tokens: 12 },
    )
    .unwrap();
    let json =
        serde_json::to_value(TranslationReport::new(&m, "cpu", &sources, None, &tr, None)).unwrap();
    let item = &json["results"][0];
    assert_eq!(
        item["output_tokens"][0], "<pad>",
        "the decoding starts with the start token"
    );
    let text = item["output_text"].as_str().unwrap();
    assert!(
        !text.contains("<pad>") && !text.contains("</s>"),
        "special tokens in {text:?}"
    );
    // the same text as the model with its own tokenizer.json, which marks them special
    let own = model("tiny-marian");
    let tr = translate(
        own,
        &["time flies like an arrow"],
        &Decoding::Greedy { max_new_tokens: 12 },
    )
    .unwrap();
    let json = serde_json::to_value(TranslationReport::new(
        own, "cpu", &sources, None, &tr, None,
    ))
    .unwrap();
    assert_eq!(json["results"][0]["output_text"].as_str().unwrap(), text);
}
