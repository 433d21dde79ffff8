//! The engines that run a model: the operations a family's forward pass is written in (`ops`),
//! the CPU reference that computes them (`cpu`), the GPU that records them (`gpu`), the
//! choice between the two (`backend`), an encoder–decoder model's decoding (`translate`) and a
//! decoder-only model's generation (`generate`).

mod backend;
pub mod cpu;
pub mod generate;
pub mod gpu;
pub mod ops;
mod trace;
pub mod translate;

pub use backend::{BackendChoice, GenerationRun, Run, Runner};
pub use generate::{generate, GenerateOptions, Generation, TokenProb};
pub use trace::{
    AttentionGroup, EmbeddingTrace, HeadMask, LayerTrace, ModelInputs, ScoreScale, TargetInputs,
    Trace, TraceOptions,
};
pub use translate::{decoder_trace, translate, DecoderTrace, Decoding, Translation};

use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::config::Positions;
use crate::model::limits::MAX_ATTENTION_VALUES;
use crate::model::{Config, Encoded};

/// Checks a batch and the options against the model before any engine runs it.
pub fn check_input(c: &Config, input: &Encoded, mask: &Mask, opts: &TraceOptions) -> Result<()> {
    opts.head_mask
        .check(c.num_hidden_layers, c.num_attention_heads)?;
    if let Some(layer) = opts.layer_trace {
        check_layer("layer trace", layer, c)?;
    }
    if opts.no_rope && !matches!(c.architecture.positions, Positions::Rotary(_)) {
        return Err(Error::Input(format!(
            "no rotary positions to leave out: {} places its positions by {}",
            c.family.name(),
            match c.architecture.positions {
                Positions::Learned { .. } => "a learned table added to the embeddings",
                _ => "sinusoids added to the embeddings",
            }
        )));
    }
    let (b, t) = input.ids.dim();
    if b == 0 || t == 0 {
        return Err(Error::Input("empty batch".into()));
    }
    if input.type_ids.dim() != (b, t) {
        return Err(Error::Shape {
            what: "token type ids (B, T)".into(),
            expected: vec![b, t],
            found: input.type_ids.shape().to_vec(),
        });
    }
    if t > c.max_tokens() {
        return Err(Error::Input(format!(
            "{t} tokens exceed the model's {} positions",
            c.max_tokens()
        )));
    }
    if let Some(w) = c.architecture.sliding_window.filter(|&w| t > w) {
        return Err(Error::Input(format!(
            "{t} tokens exceed the model's sliding window of {w} (`sliding_window`), which \
             attnscope does not apply: a shorter text"
        )));
    }
    if let Some(&id) = input.ids.iter().find(|&&id| id as usize >= c.vocab_size) {
        return Err(Error::Input(format!(
            "token id {id} is outside the model's vocabulary (vocab_size {}): is tokenizer.json from the same checkpoint?",
            c.vocab_size
        )));
    }
    if let Some(&ty) = input
        .type_ids
        .iter()
        .find(|&&ty| c.architecture.token_types && ty as usize >= c.type_vocab_size)
    {
        return Err(Error::Input(format!(
            "token type id {ty} is outside type_vocab_size {}",
            c.type_vocab_size
        )));
    }
    let (l, h) = (c.num_hidden_layers, c.num_attention_heads);
    let kept = (b * l * h) as u128 * (t * t) as u128;
    if kept > MAX_ATTENTION_VALUES as u128 {
        // the longest text a pass of this batch may have
        let most = ((MAX_ATTENTION_VALUES / (b * l * h)) as f64).sqrt() as usize;
        return Err(Error::Input(format!(
            "{b} text(s) of {t} tokens would keep {kept} attention probabilities ({b} × {l} layers \
             × {h} heads × {t}²), over the limit of {MAX_ATTENTION_VALUES}: this model takes at \
             most {most} tokens in a batch of {b}"
        )));
    }
    if mask.dim() != (b, t, t) {
        return Err(Error::Shape {
            what: "attention mask (B, T, T)".into(),
            expected: vec![b, t, t],
            found: mask.0.shape().to_vec(),
        });
    }
    Ok(())
}

/// Refuses a layer the model does not have; `what` names the option that asked for it.
pub fn check_layer(what: &str, layer: usize, c: &Config) -> Result<()> {
    if layer < c.num_hidden_layers {
        return Ok(());
    }
    Err(Error::Input(format!(
        "{what}: layer {layer} does not exist: the model has {} layers (0-based: 0 to {})",
        c.num_hidden_layers,
        c.num_hidden_layers - 1
    )))
}
