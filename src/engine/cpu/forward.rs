//! The CPU engine's forward pass: the model's family written over [`CpuOps`], and
//! cross-attention between two sentences encoded alone.

use ndarray::{s, Array2, Array3};

use super::attention::multi_head_attention;
use super::exec::{CpuOps, StackLayers};
use super::ops::norm;
use crate::engine::ops::{AttentionKind, PassMasks};
use crate::engine::AttentionGroup;
use crate::engine::{check_input, check_layer, Trace, TraceOptions};
use crate::error::{Error, Result};
use crate::masks::{Mask, MaskKind};
use crate::model::{Encoded, LayerNormOrder};
use crate::Model;

/// The model over a padded batch, keeping every layer's and head's attention and what `opts`
/// asks for besides (scores, every layer's hidden states, one layer's trace).
///
/// # Shapes
/// * `input.ids`, `input.type_ids`: `(B, T)`; `mask`: `(B, T, T)`
/// * the trace: see [`Trace`]
pub fn forward(model: &Model, input: &Encoded, mask: &Mask, opts: &TraceOptions) -> Result<Trace> {
    on_the_pool(|| forward_here(model, input, mask, opts))
}

/// Runs `f` on one of rayon's threads. Every parallel step of a pass (the heads, a product's
/// panels, GELU's chunks) is then a job on the pool's own queues, which its other threads
/// steal; from outside the pool each one would be handed over and waited for, fifty times a
/// pass (150 times a decoding step). In the browser that hand-over is a message through shared
/// memory and a wake-up, and it cost more than a 16-token pass gained from the second thread;
/// natively, with a pool of one thread (`attnscope bench --threads 1`), the hand-overs took two
/// fifths of a decoding step. The caller waits once, for the whole pass.
pub(crate) fn on_the_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    // the single-threaded wasm build has no pool: `f` runs where it is
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    if rayon::current_thread_index().is_none() {
        return rayon::join(f, || ()).0;
    }
    f()
}

/// [`forward`], on the calling thread.
fn forward_here(model: &Model, input: &Encoded, mask: &Mask, opts: &TraceOptions) -> Result<Trace> {
    let c = &model.config;
    check_input(c, input, mask, opts)?;
    let inputs = model.inputs(input);
    let stack = model.stack();
    let mut ops = CpuOps::new(
        &inputs,
        PassMasks::single(stack, mask),
        opts,
        StackLayers::single(stack, c.num_hidden_layers),
        c.num_hidden_layers,
        None,
    );
    model.forward(&mut ops)?;
    let (mut groups, kept) = ops.finish()?;
    let attention = AttentionGroup::take(&mut groups, stack, AttentionKind::SelfAttention)?;
    let mut trace = Trace::assemble(attention, kept, opts, &c.architecture.layers, mask)?;
    trace.logits = model.logits(&trace.hidden);
    Ok(trace)
}

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
    let layers = model.weights.encoder_layers().ok_or_else(|| {
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
        let trace = forward(model, &input, &mask, &states)?;
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
        &layers[layer].attention,
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
