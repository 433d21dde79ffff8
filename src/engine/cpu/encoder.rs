//! The encoder on the CPU: embeddings, encoder layers (post-LN or pre-LN), the stack and the
//! [CLS] classification head.

use ndarray::{s, Array1, Array2, Array3, Array5, ArrayView1, ArrayView2};

use super::attention::{multi_head_attention, MultiHeadOutput};
use super::ops::{activate, layer_norm, linear};
use crate::engine::{check_input, Trace, TraceOptions};
use crate::error::Result;
use crate::masks::Mask;
use crate::model::weights::{ClassifierWeights, Embeddings, LayerWeights};
use crate::model::{Config, Encoded, LayerNormOrder, Model};

/// Token + position + token-type embeddings, then LayerNorm.
///
/// # Shapes
/// * `ids`, `type_ids`: `(T,)` → `(T, D)`
pub fn embed(w: &Embeddings, ids: ArrayView1<u32>, type_ids: ArrayView1<u32>) -> Array2<f32> {
    let t = ids.len();
    let d = w.word.ncols();
    let mut x = Array2::zeros((t, d));
    for (i, mut row) in x.outer_iter_mut().enumerate() {
        row.assign(&w.word.row(ids[i] as usize));
        row += &w.position.row(i);
        row += &w.token_type.row(type_ids[i] as usize);
    }
    layer_norm(x.view(), &w.layer_norm)
}

/// Position-wise feed-forward: `dense₂(act(dense₁(x)))`.
///
/// # Shapes
/// * `x`: `(T, D)` → `(T, D)`, through `(T, intermediate)`
pub fn feed_forward(w: &LayerWeights, config: &Config, x: ArrayView2<f32>) -> Array2<f32> {
    let mut h = linear(x, &w.intermediate); // (T, intermediate)
    activate(&mut h, config.hidden_act);
    linear(h.view(), &w.output) // (T, D)
}

/// One encoder layer, returning its output and its attention. `off`: the heads knocked out
/// (see [`multi_head_attention`]).
///
/// * post-LN (BERT): `x = LN₁(x + MHA(x)); x = LN₂(x + FFN(x))`
/// * pre-LN (the seeds): `x = x + MHA(LN₁(x)); x = x + FFN(LN₂(x))`
///
/// # Shapes
/// * `x`: `(T, D)`, `mask`: `(T, T)`, `off`: `(H,)` or empty → `(T, D)`
pub fn encoder_layer(
    w: &LayerWeights,
    config: &Config,
    x: ArrayView2<f32>,
    mask: Option<ArrayView2<bool>>,
    off: &[bool],
) -> Result<(Array2<f32>, MultiHeadOutput)> {
    let heads = config.num_attention_heads;
    match config.layer_norm_order {
        LayerNormOrder::Post => {
            let attn = multi_head_attention(&w.attention, heads, x, x, mask, off)?;
            let h = layer_norm((&attn.output + &x).view(), &w.attention_norm);
            let out = layer_norm(
                (feed_forward(w, config, h.view()) + &h).view(),
                &w.output_norm,
            );
            Ok((out, attn))
        }
        LayerNormOrder::Pre => {
            let normed = layer_norm(x, &w.attention_norm);
            let attn =
                multi_head_attention(&w.attention, heads, normed.view(), normed.view(), mask, off)?;
            let h = &attn.output + &x;
            let ff = feed_forward(w, config, layer_norm(h.view(), &w.output_norm).view());
            Ok((ff + &h, attn))
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

/// The whole encoder stack over a padded batch, keeping every layer's and head's attention.
pub fn forward(model: &Model, input: &Encoded, mask: &Mask, opts: &TraceOptions) -> Result<Trace> {
    let c = &model.config;
    check_input(c, input, mask, opts)?;
    let (b, t) = input.ids.dim();
    let (l, h) = (c.num_hidden_layers, c.num_attention_heads);
    let mut attention = Array5::zeros((b, l, h, t, t));
    let mut scores = opts.scores.then(|| Array5::zeros((b, l, h, t, t)));
    let mut hidden = Array3::zeros((b, t, c.hidden_size));
    let mut logits = model
        .weights
        .classifier
        .as_ref()
        .map(|w| Array2::zeros((b, w.classifier.bias.len())));
    for i in 0..b {
        let mut x = embed(
            &model.weights.embeddings,
            input.ids.row(i),
            input.type_ids.row(i),
        ); // (T, D)
        for (layer, w) in model.weights.layers.iter().enumerate() {
            let off = opts.head_mask.layer(layer, h);
            let (out, attn) = encoder_layer(w, c, x.view(), Some(mask.item(i)), &off)?;
            attention
                .slice_mut(s![i, layer, .., .., ..])
                .assign(&attn.probs);
            if let Some(sc) = scores.as_mut() {
                sc.slice_mut(s![i, layer, .., .., ..]).assign(&attn.scores);
            }
            x = out;
        }
        if let (Some(lg), Some(w)) = (logits.as_mut(), model.weights.classifier.as_ref()) {
            lg.row_mut(i).assign(&classify(w, x.row(0)));
        }
        hidden.slice_mut(s![i, .., ..]).assign(&x);
    }
    Ok(Trace {
        attention,
        scores,
        hidden,
        logits,
        mask: mask.clone(),
    })
}
