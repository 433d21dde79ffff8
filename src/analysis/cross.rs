//! Cross-attention between two sentences encoded alone, through one BERT-family encoder
//! layer's own projections: how the seeds imitate an encoder–decoder's attention with an
//! encoder's weights.

use ndarray::{s, Array2, Array3};

use crate::engine::cpu::{self, multi_head_attention, ops::norm};
use crate::engine::{check_layer, TraceOptions};
use crate::error::{Error, Result};
use crate::families::bert;
use crate::masks::{Mask, MaskKind};
use crate::model::LayerNormOrder;
use crate::Model;

/// One layer's attention from a second sentence to a first, each encoded alone.
///
/// # Shapes
/// * `queries`: `(n_q,)`, the second sentence's tokens; `keys`: `(n_k,)`, the first's
/// * `attention`: `(H, n_q, n_k)`, rows sum to 1
#[derive(Debug, Clone)]
pub struct CrossAttention {
    /// 0-based.
    pub layer: usize,
    pub queries: Vec<String>,
    pub keys: Vec<String>,
    pub attention: Array3<f32>,
}

/// Cross-attention between two sentences through one layer's own projections: `first` and
/// `second` are each encoded alone (a single text with its own [CLS] and [SEP], under the
/// padding mask, with `opts`' scale and head mask); the queries come from the second's hidden
/// states entering `layer`, the keys and values from the first's (post-LN: those states;
/// pre-LN: their `LN₁`, as the layer's attention sees its input). Nothing is masked: a single
/// text has no padding.
///
/// # Shapes
/// * see [`CrossAttention`]
pub fn cross_attention(
    model: &Model,
    first: &str,
    second: &str,
    layer: usize,
    opts: &TraceOptions,
) -> Result<CrossAttention> {
    let c = &model.config;
    check_layer("cross-attention", layer, c)?;
    let layers = bert::encoder_layers(&*model.weights).ok_or_else(|| {
        Error::Input(format!(
            "cross-attention between two sentences encoded alone needs an encoder; {} is a decoder-only model",
            model.short_name()
        ))
    })?;
    let states = TraceOptions {
        scores: false,
        hidden_states: true,
        layer_trace: None,
        ..opts.clone()
    };
    // (tokens, the hidden states entering `layer`: (T, D)) of one text encoded alone
    let entering = |text: &str| -> Result<(Vec<String>, Array2<f32>)> {
        let mut input = model.tokenizer.encode(&[text], None)?;
        let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
        let trace = cpu::forward(model, &input, &mask, &states)?;
        let hs = trace
            .hidden_states
            .expect("hidden states were asked for")
            .slice(s![0, layer, .., ..])
            .to_owned();
        let x = match c.layer_norm_order {
            LayerNormOrder::Post => hs,
            LayerNormOrder::Pre => norm(hs.view(), &layers[layer].attention_norm),
        };
        Ok((input.tokens.swap_remove(0), x))
    };
    let (keys, x_kv) = entering(first)?;
    let (queries, x_q) = entering(second)?;
    let attn = multi_head_attention(
        layers[layer].attention.projections(),
        c.num_attention_heads,
        x_q.view(),
        x_kv.view(),
        None,
        &opts.head_mask.layer(layer, c.num_attention_heads),
        opts.scale,
    )?;
    Ok(CrossAttention {
        layer,
        queries,
        keys,
        attention: attn.probs,
    })
}
