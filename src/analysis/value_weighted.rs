//! Value-weighted attention (Kobayashi et al., EMNLP 2020, "Attention is not only a weight"):
//! what head `h` of a layer adds to query `i`'s stream from key `j` is `α_ij · W_O^h v_j^h`, so
//! its size, `‖α_ij · W_O^h v_j^h‖₂ = α_ij · ‖W_O^h v_j^h‖₂`, says how much the key counts, where
//! the weight alone does not: a head can put most of its weight on a token whose value is small
//! (the first token's sink).
//!
//! * `v_j^h`: the value vector the head reads at key `j`, its bias included (under grouped-query
//!   attention, its group's value head);
//! * `W_O^h`: the head's `d` columns of the layer's output projection, without its bias and
//!   without any norm after it (Gemma's post-attention norm).

use ndarray::linalg::general_mat_mul;
use ndarray::{
    s, Array, Array2, Array3, Array4, ArrayView2, ArrayView3, ArrayView4, Axis, CowArray,
    Dimension, Ix2, Ix3, Ix4,
};

use super::ItemAttention;
use crate::engine::network::Network;
use crate::engine::translate::{Translation, ValueNorms};
use crate::error::{Error, Result};
use crate::model::weights::{Linear, Matrix};

/// One text's value-weighted attention.
///
/// # Shapes
/// * `norms`: `(L, H, T)`, `‖W_O^h v_j^h‖₂` of every head and key
/// * `weighted`: `(L, H, T, T)`, `α_ij · ‖W_O^h v_j^h‖₂` (not normalised)
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ValueWeighted {
    #[serde(rename = "value_norms", serialize_with = "nested")]
    pub norms: Array3<f32>,
    #[serde(rename = "value_weighted", serialize_with = "nested")]
    pub weighted: Array4<f32>,
}

/// An array as nested JSON lists.
fn nested<S: serde::Serializer, D: ndarray::Dimension>(
    a: &ndarray::Array<f32, D>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&crate::report::Nested(a.view().into_dyn()), s)
}

impl ValueWeighted {
    /// Item `b`'s, from its attention (`item`) and every layer's values as the pass kept them
    /// (`values`, [`crate::engine::Trace::values`]), through the network's output projections.
    ///
    /// # Shapes
    /// * `values`: `L × (B, T, H_kv·d)`
    pub fn of(
        network: &dyn Network,
        values: &[Array3<f32>],
        item: &ItemAttention,
        b: usize,
    ) -> Result<Self> {
        let (layers, heads) = item.layers_heads();
        let t = item.valid.len();
        if values.len() != layers {
            return Err(Error::Engine(format!(
                "value-weighted attention needs the values of {layers} layers: the pass kept {}",
                values.len()
            )));
        }
        let norms = key_value_norms(network, values, b, heads)?;
        let mut weighted = Array4::<f32>::zeros((layers, heads, t, t));
        for l in 0..layers {
            for h in 0..heads {
                let (a, _) = item.head(l, h)?; // (T, T)
                let norm = norms.slice(s![l, h, ..]);
                let mut out = weighted.slice_mut(s![l, h, .., ..]);
                out.assign(&a);
                out *= &norm; // each key's column by its value's size
            }
        }
        Ok(Self { norms, weighted })
    }
}

/// A translation item's value-weighted attentions, each of its three attentions' own.
///
/// # Shapes
/// * `value_norms`: encoder `(L_enc, H, S)`, decoder `(L_dec, H, T)`, cross `(L_dec, H, S)`
/// * `value_weighted`: encoder `(L_enc, H, S, S)`, decoder `(L_dec, H, T, T)`, cross
///   `(L_dec, H, T, S)`: `α_ij · ‖W_O^h v_j^h‖₂`, not normalised
///
/// With `S` and `T` the item's own source length and steps.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TranslationValueWeighted {
    pub value_norms: ByAttention<Ix3>,
    pub value_weighted: ByAttention<Ix4>,
}

/// One array for each of an encoder–decoder model's attentions.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ByAttention<D: Dimension> {
    #[serde(serialize_with = "nested")]
    pub encoder: Array<f32, D>,
    #[serde(serialize_with = "nested")]
    pub decoder: Array<f32, D>,
    #[serde(serialize_with = "nested")]
    pub cross: Array<f32, D>,
}

impl TranslationValueWeighted {
    /// Item `b`'s, from the translation's attentions and the value sizes of its pass.
    pub fn of(tr: &Translation, norms: &ValueNorms, b: usize) -> Self {
        let (s, t) = (tr.source.length(b), tr.steps(b));
        // each key's column of α times its value's size: (L, H, n_q, n_k) · (L, H, n_k)
        let weigh = |a: ArrayView4<f32>, n: ArrayView3<f32>| &a * &n.insert_axis(Axis(2));
        let value_norms = ByAttention {
            encoder: norms.encoder.slice(s![b, .., .., ..s]).to_owned(),
            decoder: norms.decoder.slice(s![b, .., .., ..t]).to_owned(),
            cross: norms.cross.slice(s![b, .., .., ..s]).to_owned(),
        };
        let value_weighted = ByAttention {
            encoder: weigh(
                tr.encoder_attention.slice(s![b, .., .., ..s, ..s]),
                value_norms.encoder.view(),
            ),
            decoder: weigh(
                tr.decoder_attention.slice(s![b, .., .., ..t, ..t]),
                value_norms.decoder.view(),
            ),
            cross: weigh(
                tr.cross_attention.slice(s![b, .., .., ..t, ..s]),
                value_norms.cross.view(),
            ),
        };
        Self {
            value_norms,
            value_weighted,
        }
    }
}

/// Item `b`'s `‖W_O^h v_j‖₂`, every layer's, head's and key's: what the page weighs each
/// attention row by (it draws value-weighted attention from these and the probabilities).
///
/// # Shapes
/// * `values`: `L × (B, T, H_kv·d)` → `(L, H, T)`
pub fn key_value_norms(
    network: &dyn Network,
    values: &[Array3<f32>],
    b: usize,
    heads: usize,
) -> Result<Array3<f32>> {
    let t = values.first().map_or(0, |v| v.dim().1);
    let mut norms = Array3::<f32>::zeros((values.len(), heads, t));
    for (l, v) in values.iter().enumerate() {
        let w = network.attention_output(l).ok_or_else(|| {
            Error::Input(format!(
                "value-weighted attention reads each layer's output projection: this model has \
                 none for layer {l}"
            ))
        })?;
        let n = value_norms(v.index_axis(Axis(0), b), w, heads)
            .map_err(|e| Error::Engine(format!("layer {l}: {e}")))?;
        norms.index_axis_mut(Axis(0), l).assign(&n);
    }
    Ok(norms)
}

/// `‖W_O^h v_j‖₂` of every head `h` and position `j` of one layer ([`through_each_head`]).
///
/// # Shapes
/// * `v`: `(T, H_kv·d)`, `w`: `(D, H·d)` → `(H, T)`
pub(crate) fn value_norms(v: ArrayView2<f32>, w: &Linear, heads: usize) -> Result<Array2<f32>> {
    let t = v.nrows();
    let y = through_each_head(v, w, heads)?; // (H·T, D)
    let norms = y.rows().into_iter().map(|r| r.dot(&r).sqrt()).collect();
    Ok(Array2::from_shape_vec((heads, t), norms).expect("(H, T)"))
}

/// Rows of `x` below which [`through_each_head`] reads a quantized `W_O` block by block, head by
/// head, rather than dequantizing it whole once (on one wasm thread, SmolLM2's 30 layers: the
/// attribution's one row 3.8–4.9 ms where the whole dequantization and the products took 20 ms;
/// the flow's keystroke, 64 rows, 368 ms block by block against 203 ms: docs/speed.md).
const BLOCKWISE_MAX_ROWS: usize = 8;

/// What each of `heads` query heads writes through `W_O` from rows of `x` (its values, or the
/// heads' contexts side by side), query head `h` reading group `h / (H / G)` of `x`'s `G`: head
/// `h`'s part times its own `d` columns of `W_O`, without the bias. Head `h`'s rows come `h`-th.
/// (A head's product is `T·d·D`, not the `T·H·d·D` of its part placed among zeros through the
/// whole projection. A quantized `W_O` is read block by block for a few rows of `x`, the
/// attribution's one position: [`crate::model::quant::QuantMatrix::matmul_t_parts`]; for more,
/// the flow's every position, it is dequantized once and each head's product is a matrix
/// product.)
///
/// # Shapes
/// * `x`: `(T, G·d)`, `w`: `(D, H·d)` → `(H·T, D)`
pub(crate) fn through_each_head(
    x: ArrayView2<f32>,
    w: &Linear,
    heads: usize,
) -> Result<Array2<f32>> {
    let (t, width) = x.dim();
    let (out, inner) = w.weight.dim();
    let d = inner / heads.max(1);
    if d == 0
        || width == 0
        || inner != heads * d
        || !width.is_multiple_of(d)
        || !heads.is_multiple_of((width / d).max(1))
    {
        return Err(Error::Engine(format!(
            "values of width {width} do not make key/value heads of the {d} dimensions {heads} \
             query heads read through an output projection of {inner} inputs"
        )));
    }
    let per_group = heads / (width / d);
    let dense: CowArray<f32, Ix2> = match &w.weight {
        Matrix::Quantized(q) if t < BLOCKWISE_MAX_ROWS => {
            // each query head's part beside the others (a group's, copied for each head
            // reading it), dotted with its own d columns of W_O, block by block
            let mut spread = Array2::<f32>::zeros((t, inner)); // (T, H·d)
            for h in 0..heads {
                let g = h / per_group;
                spread
                    .slice_mut(s![.., h * d..(h + 1) * d])
                    .assign(&x.slice(s![.., g * d..(g + 1) * d]));
            }
            let parts = q.matmul_t_parts(spread.view(), d); // (T, H, D)
            let y = parts.permuted_axes([1, 0, 2]); // (H, T, D)
            let y = y.as_standard_layout().into_owned();
            return Ok(y.into_shape_with_order((heads * t, out)).expect("(H·T, D)"));
        }
        Matrix::F32(a) => a.view().into(),
        Matrix::Quantized(_) => w.weight.rows_of(&(0..out).collect::<Vec<_>>()).into(),
    }; // (D, H·d)
    let mut y = Array2::<f32>::zeros((heads * t, out));
    for h in 0..heads {
        let g = h / per_group;
        let part = x.slice(s![.., g * d..(g + 1) * d]); // (T, d)
        let columns = dense.slice(s![.., h * d..(h + 1) * d]); // (D, d)
        general_mat_mul(
            1.0,
            &part,
            &columns.t(),
            0.0,
            &mut y.slice_mut(s![h * t..(h + 1) * t, ..]),
        );
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, Array1};

    /// Two query heads over one value head (d = 1), `W_O` scaling head 0 by 2 and head 1 by 3
    /// onto two outputs, with a bias that must not count.
    #[test]
    fn each_heads_values_go_through_its_own_columns() {
        let w = Linear::new(
            array![[2.0f32, 0.0], [0.0, 3.0]],
            Array1::from(vec![5.0, -7.0]),
        );
        let v = array![[1.0f32], [-4.0]]; // (T = 2, H_kv·d = 1)
        let n = value_norms(v.view(), &w, 2).unwrap();
        assert_eq!(n, array![[2.0, 8.0], [3.0, 12.0]]);
        // values that make no whole head are an error naming the widths
        let e = value_norms(array![[1.0f32, 2.0, 3.0]].view(), &w, 2).unwrap_err();
        assert!(e.to_string().contains("values of width 3"), "{e}");
    }
}
