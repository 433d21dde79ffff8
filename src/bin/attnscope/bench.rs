//! `attnscope bench`: ms per forward pass at several sequence lengths, on the CPU engine and
//! the GPU engine (its time split into upload, compute and read-back).

use std::path::Path;
use std::time::Instant;

use attnscope::engine::gpu::{GpuDevice, GpuEngine, GpuTiming};
use attnscope::engine::{cpu, TraceOptions};
use attnscope::model::Encoded;
use attnscope::{Error, Mask, MaskKind, Model};
use ndarray::s;

use crate::run::BackendArg;

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
    input
}

pub fn run(dir: &Path, backend: BackendArg, lengths: &[usize], iters: usize) -> Result<(), Error> {
    let model = Model::from_dir(dir)?;
    let max = model.tokenizer.max_len();
    let long = TEXT.repeat(64);
    let full = model.tokenizer.encode(&[long.as_str()], None)?;
    let iters = iters.max(1);
    let gpu = match backend {
        BackendArg::Cpu => None,
        BackendArg::Gpu => Some(GpuEngine::new(
            pollster::block_on(GpuDevice::acquire())?,
            &model,
        )?),
        BackendArg::Auto => match pollster::block_on(GpuDevice::acquire()) {
            Ok(dev) => Some(GpuEngine::new(dev, &model)?),
            Err(e) => {
                println!("no GPU: {e}");
                None
            }
        },
    };
    println!(
        "model: {}, batch 1, median of {iters} runs after a warm-up",
        model.short_name()
    );
    if let Some(g) = &gpu {
        println!("{}", g.describe());
    }
    println!(
        "{:>7} {:>10} | {:>10} {:>10} {:>10} {:>10}",
        "tokens", "cpu ms", "gpu ms", "upload", "compute", "read-back"
    );
    for &t in lengths {
        if t < 2 || t > max.min(full.len()) {
            return Err(Error::Input(format!("length {t} must be within 2..={max}")));
        }
        let input = input_of_len(&full, t);
        let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
        let opts = TraceOptions::default();
        cpu::forward(&model, &input, &mask, opts)?; // warm-up
        let cpu_ms = median(
            (0..iters)
                .map(|_| {
                    let start = Instant::now();
                    cpu::forward(&model, &input, &mask, opts)
                        .map(|_| start.elapsed().as_secs_f64() * 1e3)
                })
                .collect::<Result<_, _>>()?,
        );
        let mut line = format!("{t:>7} {cpu_ms:>10.2} |");
        if let Some(g) = &gpu {
            let run =
                || pollster::block_on(g.forward(&input, &mask, opts)).map(|(_, timing)| timing);
            run()?; // warm-up: builds this shape's buffers
            let timings: Vec<GpuTiming> = (0..iters).map(|_| run()).collect::<Result<_, _>>()?;
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
