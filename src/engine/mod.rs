//! The engines that run a model: the operations a family's forward pass is written in (`ops`),
//! the CPU reference that computes them (`cpu`), the GPU that records them (`gpu`), the
//! choice between the two (`backend`), an encoder–decoder model's decoding (`translate`), a
//! decoder-only model's generation (`generate`) and how far a pass has gone (`progress`).

mod backend;
pub mod cpu;
pub mod generate;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod network;
pub mod ops;
pub mod progress;
mod trace;
pub mod translate;

pub use backend::{BackendChoice, GenerationRun, GpuTiming, Run, Runner};
pub use generate::{generate, top_k, GenerateOptions, Generation, GpuPasses, TokenProb};
pub use trace::{
    AttentionGroup, AttentionKept, EmbeddingTrace, HeadAttention, HeadMask, LayerTrace,
    ModelInputs, QueriesKeys, ScoreFactor, ScoreScale, TargetInputs, Trace, TraceOptions, Writes,
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
    if opts.no_rope && !matches!(c.architecture.positions, Positions::Rotary) {
        return Err(Error::Input(format!(
            "no rotary positions to leave out: {} places its positions by {}",
            c.family.name(),
            match c.architecture.positions {
                Positions::Learned { .. } => "a learned table added to the embeddings",
                _ => "sinusoids added to the embeddings",
            }
        )));
    }
    if opts.no_qk_norm && !c.architecture.layers.iter().any(|l| l.qk_norm) {
        return Err(Error::Input(format!(
            "no QK-norm to leave out: no layer of {} norms its query and key heads",
            c.family.name()
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
    match opts.attention {
        AttentionKept::Probabilities => check_kept_attention(b, t, l, h)?,
        AttentionKept::QueriesKeys => check_queries_keys(c, b, t)?,
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

/// Refuses a pass whose `B·L·H·T²` probabilities would be over [`MAX_ATTENTION_VALUES`],
/// saying how many tokens fit.
fn check_kept_attention(b: usize, t: usize, l: usize, h: usize) -> Result<()> {
    let kept = (b * l * h) as u128 * (t * t) as u128;
    if kept > MAX_ATTENTION_VALUES as u128 {
        // the longest text a pass of this batch may have
        let most = ((MAX_ATTENTION_VALUES / (b * l * h)) as f64).sqrt() as usize;
        return Err(Error::Input(format!(
            "{b} text(s) of {t} tokens would keep {kept} attention probabilities ({b} × {l} layers \
             × {h} heads × {t}²), over the limit of {MAX_ATTENTION_VALUES}: this model takes at \
             most {most} tokens in a batch of {b}, or keep each layer's queries and keys instead \
             (a long text)"
        )));
    }
    Ok(())
}

/// Refuses a pass keeping queries and keys ([`AttentionKept::QueriesKeys`]) that cannot: a
/// translation model (two stacks, and a cross-attention); or one whose queries and keys, or
/// one layer's heads' `H·T²` probabilities (each item's, while its layer runs), would be over
/// [`MAX_ATTENTION_VALUES`].
fn check_queries_keys(c: &Config, b: usize, t: usize) -> Result<()> {
    if c.decoder.is_some() {
        return Err(Error::Input(format!(
            "{} is a translation model: a pass keeping queries and keys in place of the \
             attention is for a single stack",
            c.family.name()
        )));
    }
    let a = &c.architecture;
    let width = (a.heads.query + a.heads.key_value) * a.head_dim;
    let kept = (b * c.num_hidden_layers * t) as u128 * width as u128;
    let layer = (a.heads.query * t) as u128 * t as u128;
    if kept.max(layer) > MAX_ATTENTION_VALUES as u128 {
        return Err(Error::Input(format!(
            "{b} text(s) of {t} tokens: {kept} queries and keys kept ({b} × {} layers × {t} × \
             {width}), and one layer's {} heads × {t}² = {layer} probabilities at a time; the \
             limit is {MAX_ATTENTION_VALUES}",
            c.num_hidden_layers, a.heads.query
        )));
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
