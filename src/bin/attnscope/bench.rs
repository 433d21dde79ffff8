//! `attnscope bench`: ms per forward pass at several sequence lengths, on the CPU engine and,
//! unless `--backend cpu`, the GPU engine (its time split into upload, compute and read-back),
//! each timed through a [`Runner`] as `attention` runs it; and what reading the heads (head
//! summaries and rollout, `--head-metrics --rollout`) adds to a CPU pass.

use web_time::Instant;

use std::path::Path;
use std::sync::Arc;

use attnscope::analysis::{rollout, HeadMetrics};
use attnscope::engine::gpu::GpuTiming;
use attnscope::engine::{BackendChoice, Run, Runner, TraceOptions};
use attnscope::model::Encoded;
use attnscope::report::item_attention;
use attnscope::{Error, Mask, MaskKind, Model};
use ndarray::s;

const TEXT: &str =
    "Attention lets every token look at every other token and decide how much of it to take. ";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `[CLS]` + the first `t - 2` word pieces of a long text + `[SEP]`.
fn input_of_len(full: &Encoded, t: usize) -> Encoded {
    let mut input = full.clone();
    input.ids = full.ids.slice(s![.., ..t]).to_owned();
    input.ids[[0, t - 1]] = full.ids[[0, full.len() - 1]];
    input.type_ids = full.type_ids.slice(s![.., ..t]).to_owned();
    input.valid = full.valid.slice(s![.., ..t]).to_owned();
    input.tokens = vec![full.tokens[0][..t].to_vec()];
    input.offsets = vec![full.offsets[0][..t].to_vec()];
    input.word_ids = vec![full.word_ids[0][..t].to_vec()];
    input.texts = vec![full.texts[0][..t].to_vec()];
    input
}

/// `iters` timed passes after a warm-up. Each pass's result is dropped before the next starts, as
/// the page drops the result it drew last: only what `keep` takes of a pass outlives it.
fn time<X>(
    runner: &Runner<Model>,
    input: &Encoded,
    mask: &Mask,
    iters: usize,
    keep: impl Fn(Run) -> Result<X, Error>,
) -> Result<Vec<X>, Error> {
    let opts = TraceOptions::default();
    pollster::block_on(runner.forward(input, mask, &opts))?; // warm-up (and buffers)
    (0..iters)
        .map(|_| keep(pollster::block_on(runner.forward(input, mask, &opts))?))
        .collect()
}

/// One row per length: the length, the CPU engine's ms, then (with a GPU) the GPU engine's ms
/// and its upload, compute and read-back.
pub fn run(
    dir: &Path,
    backend: BackendChoice,
    lengths: &[usize],
    iters: usize,
    threads: Option<usize>,
) -> Result<(), Error> {
    set_threads(threads)?;
    let model = Arc::new(Model::from_path(dir)?);
    if model.config.decoder.is_some() {
        return translation(model, backend, iters);
    }
    let max = model.tokenizer.max_len();
    let long = TEXT.repeat(64);
    let full = model.tokenizer.encode(&[long.as_str()], None)?;
    let iters = iters.max(1);
    let cpu = pollster::block_on(Runner::<Model>::new(model.clone(), BackendChoice::Cpu))?;
    // `gpu`: an error without an adapter; `auto`: the CPU column alone, saying why
    let gpu = match backend {
        BackendChoice::Cpu => None,
        choice => {
            let runner = pollster::block_on(Runner::<Model>::new(model.clone(), choice))?;
            match runner.unavailable() {
                Some(why) => {
                    println!("no GPU: {why}");
                    None
                }
                None => Some(runner),
            }
        }
    };
    println!(
        "model: {}, batch 1, median of {iters} runs after a warm-up, CPU engine on {} thread(s)",
        model.short_name(),
        rayon::current_num_threads()
    );
    if let Some(g) = &gpu {
        println!("{}", g.describe());
    }
    println!(
        "{:>7} {:>10} {:>10} {:>10} | {:>10} {:>10} {:>10} {:>10}",
        "tokens", "cpu ms", "+metrics", "+rollout", "gpu ms", "upload", "compute", "read-back"
    );
    for &t in lengths {
        if t < 2 || t > max.min(full.len()) {
            return Err(Error::Input(format!("length {t} must be within 2..={max}")));
        }
        let input = input_of_len(&full, t);
        let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
        let cpu_ms = median(time(&cpu, &input, &mask, iters, |r| Ok(r.elapsed_ms))?);
        // head summaries and rollout of a pass that keeps the scores (as the page's runs and
        // `--head-metrics --rollout` do), each pass dropped before the next, as in `time`
        let special = model.tokenizer.special_ids();
        let ms_of = |f: &dyn Fn()| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        };
        let (mut metrics, mut rollouts) = (Vec::with_capacity(iters), Vec::with_capacity(iters));
        for _ in 0..iters {
            let r = pollster::block_on(cpu.forward(&input, &mask, &TraceOptions::with_scores()))?;
            metrics.push(ms_of(&|| {
                let _ = std::hint::black_box(HeadMetrics::of(&item_attention(
                    &r.trace, &input, 0, special,
                )));
            }));
            rollouts.push(ms_of(&|| {
                let _ =
                    std::hint::black_box(rollout(&item_attention(&r.trace, &input, 0, special)));
            }));
        }
        let (metrics_ms, rollout_ms) = (median(metrics), median(rollouts));
        let mut line = format!("{t:>7} {cpu_ms:>10.2} {metrics_ms:>10.2} {rollout_ms:>10.2} |");
        if let Some(g) = &gpu {
            let timings = time(g, &input, &mask, iters, |r| {
                r.gpu_timing.ok_or_else(|| {
                    Error::Gpu(r.fallback.unwrap_or_else(|| "the GPU did not run".into()))
                })
            })?;
            let pick = |f: fn(&GpuTiming) -> f64| median(timings.iter().map(f).collect());
            line += &format!(
                " {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                pick(GpuTiming::total_ms),
                pick(|t| t.upload_ms),
                pick(|t| t.compute_ms),
                pick(|t| t.readback_ms)
            );
        }
        println!("{line}");
    }
    Ok(())
}

/// Sizes rayon's pool: `n` threads, or one per core.
fn set_threads(threads: Option<usize>) -> Result<(), Error> {
    if let Some(n) = threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global()
            .map_err(|e| Error::Input(format!("--threads {n}: {e}")))?;
    }
    Ok(())
}

/// A decoder-only model writing `new_tokens` greedily after a prompt of `prompt_tokens` (the
/// bench's text repeated, cut), every attention kept, on the CPU engine, or with `--backend
/// gpu` on the GPU's: the prompt's pass in ms and the steps after it in tokens per second, each
/// the median of `iters` runs after a warm-up (`llama-bench`'s pp and tg, as `bench/llm.py`
/// prints them beside llama.cpp and PyTorch). On the GPU, also a step's phases (the medians of
/// every step of every run: writing its inputs, its dispatches and the copy read back, the copy
/// out) and how many dispatches the prefill and a step replay.
pub fn generation(
    dir: &Path,
    backend: BackendChoice,
    threads: Option<usize>,
    prompt_tokens: usize,
    new_tokens: usize,
    iters: usize,
    json: bool,
) -> Result<(), Error> {
    use attnscope::engine::GenerateOptions;
    set_threads(threads)?;
    let model = Arc::new(Model::from_path(dir)?);
    let text = TEXT.repeat(prompt_tokens / 8 + 2);
    let enc = model.tokenizer.encode(&[text.as_str()], None)?;
    if enc.length(0) < prompt_tokens {
        return Err(Error::Input(format!(
            "--prompt-tokens {prompt_tokens}: the model takes at most {} tokens",
            enc.length(0)
        )));
    }
    let prompt: Vec<u32> = enc.ids.row(0).iter().take(prompt_tokens).copied().collect();
    let opts = GenerateOptions {
        max_new_tokens: new_tokens,
        top_k: 5,
        stop_at_eos: false,
        head_mask: Default::default(),
        numerics: Default::default(),
    };
    // the GPU only when named (`auto` is the CPU's figure, as `bench/llm.py` reads it)
    let choice = match backend {
        BackendChoice::Gpu => BackendChoice::Gpu,
        _ => BackendChoice::Cpu,
    };
    let runner = pollster::block_on(Runner::<Model>::new(model.clone(), choice))?;
    let generate = || pollster::block_on(runner.generate(&prompt, &opts));
    generate()?; // warm-up (and, on the GPU, the passes recorded)
    let (mut prefill, mut decode, mut phases, mut dispatches) = (vec![], vec![], vec![], None);
    for _ in 0..iters.max(1) {
        let g = generate()?.generation;
        prefill.push(g.step_ms[0]);
        let steps: f64 = g.step_ms[1..].iter().sum();
        decode.push((g.step_ms.len() - 1) as f64 / (steps / 1e3));
        if let Some(gpu) = g.gpu {
            phases.extend(gpu.timing.into_iter().skip(1)); // the steps'
            dispatches = Some((gpu.prefill_dispatches, gpu.step_dispatches));
        }
    }
    let (prefill_ms, decode_tokens_per_s) = (median(prefill), median(decode));
    let phase = |f: fn(&GpuTiming) -> f64| median(phases.iter().map(f).collect());
    let engine = match dispatches {
        Some(_) => format!("attnscope ({})", runner.describe()),
        None => "attnscope (CPU)".into(),
    };
    let threads = rayon::current_num_threads();
    if json {
        let mut line = serde_json::json!({
            "model": model.short_name(),
            "engine": engine,
            "threads": threads,
            "prompt_tokens": prompt_tokens,
            "new_tokens": new_tokens,
            "prefill_ms": prefill_ms,
            "decode_tokens_per_s": decode_tokens_per_s,
        });
        if let Some((prefill, step)) = dispatches {
            line["step_upload_ms"] = phase(|t| t.upload_ms).into();
            line["step_compute_ms"] = phase(|t| t.compute_ms).into();
            line["step_readback_ms"] = phase(|t| t.readback_ms).into();
            line["prefill_dispatches"] = prefill.into();
            line["step_dispatches"] = step.into();
        }
        println!("{line}");
        return Ok(());
    }
    let on = match dispatches {
        Some(_) => runner.describe(),
        None => format!("CPU engine on {threads} thread(s)"),
    };
    println!(
        "model: {}, {prompt_tokens}-token prompt then {new_tokens} greedy tokens, median of {} \
         runs after a warm-up, {on}\nprefill {prefill_ms:.1} ms, decode {decode_tokens_per_s:.1} \
         tokens/s",
        model.short_name(),
        iters.max(1)
    );
    if let Some((prefill, step)) = dispatches {
        println!(
            "a step (median): {:.2} ms writing its inputs, {:.2} ms its {step} dispatches and the \
             copy read back, {:.2} ms copying out; the prefill replays {prefill} dispatches",
            phase(|t| t.upload_ms),
            phase(|t| t.compute_ms),
            phase(|t| t.readback_ms),
        );
    }
    Ok(())
}

/// 24 source tokens (with `</s>`) under the committed SentencePiece tokenizer of the Marian
/// fixtures and of `tools/make_opus_shape.py`'s checkpoint.
const SOURCE: &str = "the cat sat on the mat and time flies by us";

/// An encoder–decoder model's figures, each the median of `iters` runs after a warm-up: ms to
/// encode the 24-token source and decode 24 tokens greedily (every attention kept), and ms of
/// the decoder's steps 1 (with the encoder), 16 and 64 of a 64-step decoding.
fn translation(model: Arc<Model>, backend: BackendChoice, iters: usize) -> Result<(), Error> {
    use attnscope::engine::Decoding;
    let iters = iters.max(1);
    let s = model.tokenizer.encode(&[SOURCE], None)?.len();
    println!(
        "model: {} (encoder–decoder), a {s}-token source, batch 1, median of {iters} runs after \
         a warm-up, CPU engine on {} thread(s)",
        model.short_name(),
        rayon::current_num_threads()
    );
    let mut runners = vec![pollster::block_on(Runner::<Model>::new(
        model.clone(),
        BackendChoice::Cpu,
    ))?];
    if backend != BackendChoice::Cpu {
        let gpu = pollster::block_on(Runner::<Model>::new(model.clone(), backend))?;
        match gpu.unavailable() {
            Some(why) => println!("no GPU: {why}"),
            None => runners.push(gpu),
        }
    }
    println!(
        "{:>40} {:>14} {:>10} {:>10} {:>10}",
        "engine", "24 + 24 ms", "step 1", "step 16", "step 64"
    );
    for runner in &runners {
        let run = |n: usize| -> Result<(f64, Vec<f64>), Error> {
            let start = Instant::now();
            let (tr, _, fallback) = pollster::block_on(
                runner.translate(&[SOURCE], &Decoding::Greedy { max_new_tokens: n }),
            )?;
            if let Some(why) = fallback {
                return Err(Error::Gpu(why));
            }
            if tr.steps(0) != n {
                return Err(Error::Input(format!(
                    "the decoding stopped after {} of {n} steps (EOS): the bench needs a \
                     checkpoint that runs every step (tools/make_opus_shape.py)",
                    tr.steps(0)
                )));
            }
            Ok((start.elapsed().as_secs_f64() * 1e3, tr.step_ms))
        };
        run(24)?; // warm-up (and buffers)
        let whole = median(
            (0..iters)
                .map(|_| run(24).map(|r| r.0))
                .collect::<Result<_, _>>()?,
        );
        let steps: Vec<Vec<f64>> = (0..iters)
            .map(|_| run(64).map(|r| r.1))
            .collect::<Result<_, _>>()?;
        let at = |k: usize| median(steps.iter().map(|s| s[k - 1]).collect());
        println!(
            "{:>40} {whole:>14.2} {:>10.2} {:>10.2} {:>10.2}",
            runner.describe(),
            at(1),
            at(16),
            at(64)
        );
    }
    Ok(())
}
