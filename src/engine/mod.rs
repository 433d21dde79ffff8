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

pub use backend::{numerics_of, BackendChoice, GenerationRun, GpuTiming, Run, Runner};
pub use generate::{generate, top_k, GenerateOptions, Generation, GpuPasses, TokenProb};
pub use trace::{
    AttentionGroup, AttentionKept, EmbeddingTrace, HeadAttention, HeadMask, LayerTrace,
    ModelInputs, Numerics, QueriesKeys, ScoreFactor, ScoreScale, TargetInputs, Trace, TraceOptions,
    Writes,
};
pub use translate::{decoder_trace, translate, DecoderTrace, Decoding, Translation};

use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::config::Positions;
use crate::model::limits::{MAX_ATTENTION_VALUES, MAX_QUERIES_KEYS};
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
/// translation model (two stacks, and a cross-attention); or one whose queries and keys would
/// be over [`MAX_QUERIES_KEYS`]. The CPU engine holds no more of a layer's attention than a
/// block of each head's rows at a time; the GPU engine holds a layer's heads whole
/// ([`check_layer_heads`]).
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
    if kept > MAX_QUERIES_KEYS as u128 {
        // the longest text whose queries and keys fit
        let most = MAX_QUERIES_KEYS / (b * c.num_hidden_layers * width);
        return Err(Error::Input(format!(
            "{b} text(s) of {t} tokens: {kept} queries and keys kept ({b} × {} layers × {t} × \
             {width}), over the limit of {MAX_QUERIES_KEYS}: this model takes at most \
             {most} tokens",
            c.num_hidden_layers
        )));
    }
    Ok(())
}

/// Refuses a pass that holds one layer's heads whole while the layer runs (the GPU engine's,
/// keeping queries and keys: each text's `H·T²` probabilities at a time) over
/// [`MAX_ATTENTION_VALUES`].
pub fn check_layer_heads(c: &Config, t: usize) -> Result<()> {
    let h = c.architecture.heads.query;
    let layer = (h * t) as u128 * t as u128;
    if layer > MAX_ATTENTION_VALUES as u128 {
        let most = ((MAX_ATTENTION_VALUES / h) as f64).sqrt() as usize;
        return Err(Error::Input(format!(
            "a text of {t} tokens: the GPU engine holds one layer's {h} heads × {t}² = {layer} \
             probabilities at a time, over the limit of {MAX_ATTENTION_VALUES}: it takes at most \
             {most} tokens (the CPU engine takes longer texts)"
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A Llama config of `layers` layers of `heads` query heads (`kv` key/value heads) of
    /// `d` dimensions, `hidden` wide.
    fn llama(layers: usize, heads: usize, kv: usize, d: usize, hidden: usize) -> Config {
        let json = format!(
            r#"{{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 400,
            "hidden_size": {hidden}, "intermediate_size": 256, "num_hidden_layers": {layers},
            "num_attention_heads": {heads}, "num_key_value_heads": {kv}, "head_dim": {d},
            "hidden_act": "silu", "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0}}"#
        );
        crate::families::read_config(json.as_bytes(), "config.json").unwrap()
    }

    /// 2 layers of `heads` query heads (2 key/value heads) of 4 dimensions.
    fn heads_of_four(heads: usize) -> Config {
        llama(2, heads, 2, 4, 256)
    }

    /// The longest text a long pass takes is kept for the next (typing at its end reuses it):
    /// SmolLM2-135M's shape, and a model whose every head has its own keys and values, each
    /// with the value norms the page may ask for.
    #[test]
    fn the_longest_text_a_long_pass_takes_is_kept_for_typing_on() {
        use crate::engine::cpu::prefix::{kept_bytes, MAX_LONG_KEPT_BYTES};
        for (layers, heads, kv, d, hidden) in [(30, 9, 3, 64, 576), (12, 12, 12, 64, 768)] {
            let c = llama(layers, heads, kv, d, hidden);
            let most = MAX_QUERIES_KEYS / (layers * (heads + kv) * d);
            check_queries_keys(&c, 1, most).unwrap();
            let opts = TraceOptions {
                attention: AttentionKept::QueriesKeys,
                next_logits: true,
                values: true,
                ..TraceOptions::default()
            };
            let kept = kept_bytes(&c, &opts, most);
            assert!(
                kept <= MAX_LONG_KEPT_BYTES,
                "{heads} heads, {kv} key/value heads at {most} tokens: {kept} bytes kept"
            );
        }
    }

    /// A long text's pass on the CPU engine holds a block of each head's rows, not a layer's
    /// `H·T²` probabilities: only its queries and keys bound it; the GPU engine's layer of
    /// heads is refused past its own bound, which it names.
    #[test]
    fn a_long_texts_pass_is_bounded_by_its_queries_and_keys_on_the_cpu() {
        let c = heads_of_four(64);
        // 64 heads × 1,500² = 144M probabilities a layer, over the limit of 2²⁷
        const _: () = assert!(64 * 1500 * 1500 > MAX_ATTENTION_VALUES);
        check_queries_keys(&c, 1, 1500).unwrap();
        let err = check_layer_heads(&c, 1500).unwrap_err().to_string();
        assert!(err.contains("takes at most 1448 tokens"), "{err}");
        check_layer_heads(&c, 1448).unwrap();
        // 2 layers × (64 + 2) heads × 4 = 528 values a token kept
        let most = MAX_QUERIES_KEYS / 528;
        check_queries_keys(&c, 1, most).unwrap();
        let err = check_queries_keys(&c, 1, most + 1).unwrap_err().to_string();
        assert!(
            err.contains(&format!("takes at most {most} tokens")),
            "{err}"
        );
    }
}
