//! `attnscope bench`: ms per forward pass at several sequence lengths.

use std::path::Path;
use std::time::Instant;

use attnscope::engine::{self, TraceOptions};
use attnscope::{Error, Mask, MaskKind, Model};

use crate::run::BackendArg;

const TEXT: &str =
    "Attention lets every token look at every other token and decide how much of it to take. ";

pub fn run(dir: &Path, _backend: BackendArg, lengths: &[usize], iters: usize) -> Result<(), Error> {
    let model = Model::from_dir(dir)?;
    let max = model.tokenizer.max_len();
    let long = TEXT.repeat(64);
    let full = model.tokenizer.encode(&[long.as_str()], None)?;
    println!(
        "model: {}  backend: cpu  iters: {iters}",
        model.short_name()
    );
    println!("{:>8} {:>12} {:>12}", "tokens", "median ms", "min ms");
    for &t in lengths {
        if t < 2 || t > max.min(full.len()) {
            return Err(Error::Input(format!("length {t} must be within 2..={max}")));
        }
        // [CLS] + the first t-2 word pieces + [SEP]
        let mut input = full.clone();
        let sep = full.ids[[0, full.len() - 1]];
        input.ids = full.ids.slice(ndarray::s![.., ..t]).to_owned();
        input.ids[[0, t - 1]] = sep;
        input.type_ids = full.type_ids.slice(ndarray::s![.., ..t]).to_owned();
        input.valid = full.valid.slice(ndarray::s![.., ..t]).to_owned();
        input.tokens = vec![full.tokens[0][..t].to_vec()];
        let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
        engine::cpu::forward(&model, &input, &mask, TraceOptions::default())?; // warm-up
        let mut times: Vec<f64> = (0..iters.max(1))
            .map(|_| {
                let start = Instant::now();
                engine::cpu::forward(&model, &input, &mask, TraceOptions::default())
                    .map(|_| start.elapsed().as_secs_f64() * 1e3)
            })
            .collect::<Result<_, _>>()?;
        times.sort_by(f64::total_cmp);
        println!("{t:>8} {:>12.2} {:>12.2}", times[times.len() / 2], times[0]);
    }
    Ok(())
}
