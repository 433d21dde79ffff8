//! The encoder on the CPU: embeddings, encoder layers (post-LN or pre-LN), the stack, the
//! [CLS] classification head, and cross-attention between two sentences encoded alone.

use ndarray::{s, Array1, Array2, Array3, Array4, Array5, ArrayView1, ArrayView2, Axis};

use super::attention::{multi_head_attention, multi_head_attention_into, HeadArrays, Projections};
use super::ops::{activate, layer_norm, linear};
use crate::engine::{
    check_input, check_layer, EmbeddingTrace, LayerTrace, ScoreScale, Trace, TraceOptions,
};
use crate::error::Result;
use crate::masks::{Mask, MaskKind};
use crate::model::weights::{ClassifierWeights, Embeddings, LayerWeights};
use crate::model::{Config, Encoded, LayerNormOrder, Model};

/// The embeddings of one text, step by step: `normed = LayerNorm(word + position + token_type)`.
///
/// # Shapes
/// * every field `(T, D)`
#[derive(Debug, Clone)]
pub struct Embedded {
    pub word: Array2<f32>,
    pub position: Array2<f32>,
    pub token_type: Array2<f32>,
    pub sum: Array2<f32>,
    /// What enters layer 0.
    pub normed: Array2<f32>,
}

/// Token + position + token-type embeddings, then LayerNorm.
///
/// # Shapes
/// * `ids`, `type_ids`: `(T,)` → every field `(T, D)`
pub fn embed(w: &Embeddings, ids: ArrayView1<u32>, type_ids: ArrayView1<u32>) -> Embedded {
    let t = ids.len();
    let word = w.word.select(Axis(0), &ids.mapv(|i| i as usize).to_vec()); // (T, D)
    let position = w.position.slice(s![..t, ..]).to_owned(); // (T, D)
    let token_type = w
        .token_type
        .select(Axis(0), &type_ids.mapv(|i| i as usize).to_vec()); // (T, D)
    let sum = &word + &position + &token_type;
    let normed = layer_norm(sum.view(), &w.layer_norm);
    Embedded {
        word,
        position,
        token_type,
        sum,
        normed,
    }
}

/// The position-wise feed-forward's steps: `output = dense₂(act(dense₁(x)))`.
///
/// # Shapes
/// * `pre_activation`, `intermediate`: `(T, intermediate)`; `output`: `(T, D)`
#[derive(Debug, Clone)]
pub struct FeedForward {
    /// `dense₁(x)` before the activation, when it was asked for (a traced layer): otherwise
    /// the activation is applied in place, with no copy of it.
    pub pre_activation: Option<Array2<f32>>,
    /// `act(dense₁(x))`.
    pub intermediate: Array2<f32>,
    pub output: Array2<f32>,
}

/// Position-wise feed-forward; `keep_pre_activation` keeps `dense₁(x)` apart from its
/// activation.
///
/// # Shapes
/// * `x`: `(T, D)` → see [`FeedForward`]
pub fn feed_forward(
    w: &LayerWeights,
    config: &Config,
    x: ArrayView2<f32>,
    keep_pre_activation: bool,
) -> FeedForward {
    let mut intermediate = linear(x, &w.intermediate); // (T, intermediate)
    let pre_activation = keep_pre_activation.then(|| intermediate.clone());
    activate(&mut intermediate, config.hidden_act);
    let output = linear(intermediate.view(), &w.output); // (T, D)
    FeedForward {
        pre_activation,
        intermediate,
        output,
    }
}

/// One encoder layer's output and what it computed on the way (see [`LayerTrace`] for the
/// meaning of each in post-LN and pre-LN layers); the heads' probabilities and scores went to
/// the [`HeadArrays`] the caller gave.
///
/// # Shapes
/// * `output`, `attention_output`: `(T, D)`; `pre_activation`, `intermediate`: `(T, intermediate)`
/// * `attention`: see [`Projections`]
#[derive(Debug, Clone)]
pub struct LayerOutput {
    pub output: Array2<f32>,
    pub attention: Projections,
    pub attention_output: Array2<f32>,
    /// `dense₁(·)` before the activation, kept when the layer is traced.
    pub pre_activation: Option<Array2<f32>>,
    pub intermediate: Array2<f32>,
}

/// One encoder layer. `off`: the heads knocked out (see
/// [`super::multi_head_attention`]); `scale`: what the scores are divided by; `heads`: where
/// each head's probabilities (and scores) go; `traced`: whether the caller keeps what the
/// layer computed on the way (the pre-activation is only kept then).
///
/// * post-LN (BERT): `h = LN₁(x + MHA(x)); out = LN₂(h + FFN(h))`
/// * pre-LN (the seeds): `h = x + MHA(LN₁(x)); out = h + FFN(LN₂(h))`
///
/// `attention_output` is `h`.
///
/// # Shapes
/// * `x`: `(T, D)`, `mask`: `(T, T)`, `off`: `(H,)` or empty, `arrays`: `(H, T, T)` each → see
///   [`LayerOutput`]
#[allow(clippy::too_many_arguments)]
pub fn encoder_layer(
    w: &LayerWeights,
    config: &Config,
    x: ArrayView2<f32>,
    mask: Option<ArrayView2<bool>>,
    off: &[bool],
    scale: ScoreScale,
    arrays: HeadArrays,
    traced: bool,
) -> Result<LayerOutput> {
    let heads = config.num_attention_heads;
    let mha = |x: ArrayView2<f32>, arrays: HeadArrays| {
        multi_head_attention_into(&w.attention, heads, x, x, mask, off, scale, arrays)
    };
    match config.layer_norm_order {
        LayerNormOrder::Post => {
            let attn = mha(x, arrays)?;
            let h = layer_norm((&attn.output + &x).view(), &w.attention_norm);
            let ff = feed_forward(w, config, h.view(), traced);
            Ok(LayerOutput {
                output: layer_norm((ff.output + &h).view(), &w.output_norm),
                attention: attn,
                attention_output: h,
                pre_activation: ff.pre_activation,
                intermediate: ff.intermediate,
            })
        }
        LayerNormOrder::Pre => {
            let normed = layer_norm(x, &w.attention_norm);
            let n = normed.view();
            let attn = mha(n, arrays)?;
            let h = &attn.output + &x;
            let ff = feed_forward(
                w,
                config,
                layer_norm(h.view(), &w.output_norm).view(),
                traced,
            );
            Ok(LayerOutput {
                output: ff.output + &h,
                attention: attn,
                attention_output: h,
                pre_activation: ff.pre_activation,
                intermediate: ff.intermediate,
            })
        }
    }
}

/// The [CLS] classification head: `classifier(tanh(pooler(h[0])))`.
///
/// # Shapes
/// * `h_cls`: `(D,)` → `(num_labels,)`
pub fn classify(w: &ClassifierWeights, h_cls: ArrayView1<f32>) -> Array1<f32> {
    let x = h_cls.insert_axis(ndarray::Axis(0)); // (1, D)
    let pooled = linear(x, &w.pooler).mapv(f32::tanh);
    linear(pooled.view(), &w.classifier).row(0).to_owned()
}

/// The whole encoder stack over a padded batch, keeping every layer's and head's attention and
/// what `opts` asks for besides (scores, every layer's hidden states, one layer's trace).
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
/// pass. In the browser that hand-over is a message through shared memory and a wake-up, and it
/// cost more than a 16-token pass gained from the second thread. The caller waits once, for the
/// whole pass.
fn on_the_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    // the single-threaded wasm build has no pool: `f` runs where it is
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    if rayon::current_thread_index().is_none() && rayon::current_num_threads() > 1 {
        return rayon::join(f, || ()).0;
    }
    f()
}

/// [`forward`], on the calling thread.
fn forward_here(model: &Model, input: &Encoded, mask: &Mask, opts: &TraceOptions) -> Result<Trace> {
    let c = &model.config;
    check_input(c, input, mask, opts)?;
    let (b, t) = input.ids.dim();
    let (l, h, d) = (c.num_hidden_layers, c.num_attention_heads, c.hidden_size);
    // not zeroed (a `memset` of 75 MB at 512 tokens): every layer's heads write their slices
    let mut attention = Array5::uninit((b, l, h, t, t));
    let mut scores = opts.scores.then(|| Array5::uninit((b, l, h, t, t)));
    let mut hidden = Array3::zeros((b, t, d));
    let mut hidden_states = opts.hidden_states.then(|| Array4::zeros((b, l + 1, t, d)));
    let mut layer_trace = opts
        .layer_trace
        .map(|layer| empty_layer_trace(layer, opts.embeddings, b, t, c));
    let mut logits = model
        .weights
        .classifier
        .as_ref()
        .map(|w| Array2::zeros((b, w.classifier.bias.len())));
    for i in 0..b {
        let e = embed(
            &model.weights.embeddings,
            input.ids.row(i),
            input.type_ids.row(i),
        );
        if let Some(emb) = layer_trace.as_mut().and_then(|lt| lt.embeddings.as_mut()) {
            for (all, one) in [
                (&mut emb.word, &e.word),
                (&mut emb.position, &e.position),
                (&mut emb.token_type, &e.token_type),
                (&mut emb.sum, &e.sum),
                (&mut emb.normed, &e.normed),
            ] {
                all.index_axis_mut(Axis(0), i).assign(one);
            }
        }
        let mut x = e.normed; // (T, D)
        if let Some(hs) = hidden_states.as_mut() {
            hs.slice_mut(s![i, 0, .., ..]).assign(&x);
        }
        for (layer, w) in model.weights.layers.iter().enumerate() {
            let off = opts.head_mask.layer(layer, h);
            // the heads write their probabilities and scores straight into the trace
            let arrays = HeadArrays {
                probs: attention.slice_mut(s![i, layer, .., .., ..]),
                scores: scores
                    .as_mut()
                    .map(|sc| sc.slice_mut(s![i, layer, .., .., ..])),
            };
            let traced = layer_trace.as_ref().is_some_and(|lt| lt.layer == layer);
            let out = encoder_layer(
                w,
                c,
                x.view(),
                Some(mask.item(i)),
                &off,
                opts.scale,
                arrays,
                traced,
            )?;
            if let Some(lt) = layer_trace.as_mut().filter(|lt| lt.layer == layer) {
                let a = &out.attention;
                let pre = out
                    .pre_activation
                    .as_ref()
                    .expect("a traced layer keeps its pre-activation");
                for (all, one) in [
                    (&mut lt.input, &x),
                    (&mut lt.q, &a.q),
                    (&mut lt.k, &a.k),
                    (&mut lt.v, &a.v),
                    (&mut lt.context, &a.context),
                    (&mut lt.attention_output, &out.attention_output),
                    (&mut lt.pre_activation, pre),
                    (&mut lt.intermediate, &out.intermediate),
                    (&mut lt.output, &out.output),
                ] {
                    all.index_axis_mut(Axis(0), i).assign(one);
                }
            }
            x = out.output;
            if let Some(hs) = hidden_states.as_mut() {
                hs.slice_mut(s![i, layer + 1, .., ..]).assign(&x);
            }
        }
        if let (Some(lg), Some(w)) = (logits.as_mut(), model.weights.classifier.as_ref()) {
            lg.row_mut(i).assign(&classify(w, x.row(0)));
        }
        hidden.slice_mut(s![i, .., ..]).assign(&x);
    }
    // SAFETY: every item's every layer returned Ok from `encoder_layer`, whose attention wrote
    // its whole `(H, T, T)` slice of both (see `HeadArrays`)
    let (attention, scores) = unsafe { (attention.assume_init(), scores.map(|s| s.assume_init())) };
    Ok(Trace {
        attention,
        scores,
        hidden,
        hidden_states,
        layer_trace,
        logits,
        mask: mask.clone(),
    })
}

/// A layer trace of zeros for a `(B, T)` batch, filled item by item.
fn empty_layer_trace(layer: usize, embeddings: bool, b: usize, t: usize, c: &Config) -> LayerTrace {
    let d = c.hidden_size;
    let z = || Array3::zeros((b, t, d));
    LayerTrace {
        layer,
        embeddings: (layer == 0 || embeddings).then(|| EmbeddingTrace {
            word: z(),
            position: z(),
            token_type: z(),
            sum: z(),
            normed: z(),
        }),
        input: z(),
        q: z(),
        k: z(),
        v: z(),
        context: z(),
        attention_output: z(),
        pre_activation: Array3::zeros((b, t, c.intermediate_size)),
        intermediate: Array3::zeros((b, t, c.intermediate_size)),
        output: z(),
    }
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
            LayerNormOrder::Pre => {
                layer_norm(hs.view(), &model.weights.layers[layer].attention_norm)
            }
        };
        Ok((input.tokens.swap_remove(0), x))
    };
    let (keys, x_kv) = entering(first)?;
    let (queries, x_q) = entering(second)?;
    let attn = multi_head_attention(
        &model.weights.layers[layer].attention,
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
