//! Information-flow routes (Ferrando & Voita 2024, "Information flow routes: automatically
//! interpreting language models at scale", the method behind Meta's LLM-Transparency-Tool).
//!
//! The nodes are the residual stream's states: `(l, i)` is position `i`'s stream as it enters
//! layer `l` (`l = L`: the stack's output). A pre-norm layer's attention adds to query `i`'s
//! stream a sum of contributions, and the sum is the stream after attention:
//!
//! `y_i = x_i + Σ_h Σ_j α_ij^h · W_O^h v_j^h + b_O`
//!
//! the residual `x_i`, and each head's part from each key `j` (`v_j^h` the value it reads, its
//! bias included; `W_O^h` its columns of the output projection). A contribution `c` counts by its
//! proximity to the total, `max(0, ‖y‖₁ − ‖y − c‖₁)`, normalised over the node's contributions (the
//! residual's and every head's from every key) to sum to 1. Head `h`'s contribution from `j` is
//! the edge `(l, j) → (l + 1, i)`; the residual's, `(l, i) → (l + 1, i)` (the feed-forward after
//! the attention is part of the node's way up). The routes to a prediction are the edges of at
//! least a threshold's importance that reach the last position's output, followed down from it.

use ndarray::{s, Array2, Array3, Array4, ArrayView1, Axis};
use rayon::prelude::*;

use super::logit_attribution::frozen_post_norm;
use super::value_weighted::through_each_head;
use super::ItemAttention;
use crate::engine::cpu::ops::linear;
use crate::engine::network::Network;
use crate::engine::Writes;
use crate::error::{Error, Result};

/// The threshold the routes keep edges from, as LLM-Transparency-Tool's default.
pub const DEFAULT_THRESHOLD: f32 = 0.04;

/// Every edge's importance of one text.
///
/// # Shapes
/// * `heads`: `(L, H, T, T)`, `[l][h][i][j]` head `h`'s edge from key `j` at layer `l` into
///   query `i` at `l + 1` (0 where `i` does not attend to `j`)
/// * `residual`: `(L, T)`, `[l][i]` the edge `(l, i) → (l + 1, i)`
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    pub heads: Array4<f32>,
    pub residual: Array2<f32>,
}

/// One edge of the routes: from `(layer, from)` to `(layer + 1, to)`, through `head` (`None`:
/// the residual, `from == to`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Edge {
    pub layer: usize,
    pub head: Option<usize>,
    pub from: usize,
    pub to: usize,
    pub importance: f32,
}

/// The routes to a text's last position (`"flow"` in the CLI's JSON).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Routes {
    pub threshold: f32,
    pub edges: Vec<Edge>,
}

impl Flow {
    /// Item `b`'s, from what the pass kept: its residual stream (`writes`), every layer's values
    /// (`values`, [`crate::engine::Trace::values`]) and its attention (`item`), through the
    /// network's output projections, a norm after the attention frozen at its real output
    /// (Gemma 3). A model whose layers do not each add a write to the stream (an encoder's
    /// post-norm) is an error.
    ///
    /// # Shapes
    /// * `values`: `L × (B, T, H_kv·d)`; `writes`: as [`Writes`]
    pub fn of(
        network: &dyn Network,
        writes: &Writes,
        values: &[Array3<f32>],
        item: &ItemAttention,
        b: usize,
    ) -> Result<Self> {
        if network.unembedding().is_none() {
            return Err(Error::Input(
                "information-flow routes read a pre-norm decoder with an LM head whose layers \
                 each add a write to the residual stream (GPT-2, the Llama family, Gemma 3): \
                 this model is not one"
                    .into(),
            ));
        }
        let (layers, heads) = item.layers_heads();
        let t = item.valid.len();
        if values.len() != layers || writes.after_attention.len() != layers {
            return Err(Error::Engine(format!(
                "the flow reads {layers} layers' values and writes: the pass kept {} and {}",
                values.len(),
                writes.after_attention.len()
            )));
        }
        let mut flow = Self {
            heads: Array4::zeros((layers, heads, t, t)),
            residual: Array2::zeros((layers, t)),
        };
        for (l, v) in values.iter().enumerate() {
            let w_o = network
                .attention_output(l)
                .ok_or_else(|| Error::Engine(format!("layer {l} has no output projection")))?;
            // what each head writes from each key, before its weight: (H·T, D), head h's T rows
            let u = through_each_head(v.index_axis(Axis(0), b), w_o, heads)
                .map_err(|e| Error::Engine(format!("layer {l}: {e}")))?;
            // a norm after the attention (Gemma 3), frozen at each query's real output (the
            // heads' contexts through W_O, bias included): what a head writes from a key is its
            // part of the normed sum, (T, D)
            let frozen = match network.attention_post_norm(l) {
                Some(post) => {
                    let out = linear(writes.context[l].index_axis(Axis(0), b), w_o);
                    Some(frozen_post_norm(post, out.view())?)
                }
                None => None,
            };
            let x = writes.hidden[l].index_axis(Axis(0), b); // (T, D)
            let y = writes.after_attention[l].index_axis(Axis(0), b); // (T, D)
            let probs: Vec<_> = (0..heads)
                .map(|h| item.head(l, h).map(|(a, _)| a.into_owned()))
                .collect::<Result<_>>()?; // H × (T, T)
                                          // each query's contributions, normalised: (T, H·T + 1), the residual's last
            let rows: Vec<Vec<f32>> = (0..t)
                .into_par_iter()
                .map(|i| {
                    let yi = contiguous(y.row(i));
                    let total: f32 = yi.iter().map(|v| v.abs()).sum();
                    let mut row = vec![0.0f32; heads * t + 1];
                    let scale = frozen.as_ref().map(|f| f.row(i));
                    let mut scaled = vec![0.0f32; if scale.is_some() { u.ncols() } else { 0 }];
                    for (h, a) in probs.iter().enumerate() {
                        for j in 0..t {
                            let w = a[[i, j]];
                            if w != 0.0 {
                                let uj = contiguous(u.row(h * t + j));
                                let uj: &[f32] = match &scale {
                                    Some(s) => {
                                        scaled
                                            .iter_mut()
                                            .zip(uj.iter().zip(s))
                                            .for_each(|(o, (&v, &g))| *o = v * g);
                                        &scaled
                                    }
                                    None => &uj,
                                };
                                row[h * t + j] = (total - distance(&yi, w, uj)).max(0.0);
                            }
                        }
                    }
                    let xi = contiguous(x.row(i));
                    row[heads * t] = (total - distance(&yi, 1.0, &xi)).max(0.0);
                    let sum: f32 = row.iter().sum();
                    if sum > 0.0 {
                        row.iter_mut().for_each(|v| *v /= sum);
                    }
                    row
                })
                .collect();
            for (i, row) in rows.iter().enumerate() {
                for h in 0..heads {
                    flow.heads
                        .slice_mut(s![l, h, i, ..])
                        .assign(&ArrayView1::from(&row[h * t..(h + 1) * t]));
                }
                flow.residual[[l, i]] = row[heads * t];
            }
        }
        Ok(flow)
    }

    /// The routes to position `to`'s output: every edge of importance at least `threshold` on a
    /// way down from `(L, to)`, layer by layer from the top (within a layer by query, then
    /// head, then key; the residual's after the heads').
    pub fn routes(&self, to: usize, threshold: f32) -> Routes {
        let (layers, heads, t, _) = self.heads.dim();
        let mut reached = vec![false; t];
        if to < t {
            reached[to] = true;
        }
        let mut edges = vec![];
        for l in (0..layers).rev() {
            let mut below = vec![false; t];
            for i in (0..t).filter(|&i| reached[i]) {
                for h in 0..heads {
                    let row = self.heads.slice(s![l, h, i, ..]);
                    for (j, &importance) in row.iter().enumerate() {
                        if importance >= threshold && importance > 0.0 {
                            edges.push(Edge {
                                layer: l,
                                head: Some(h),
                                from: j,
                                to: i,
                                importance,
                            });
                            below[j] = true;
                        }
                    }
                }
                let importance = self.residual[[l, i]];
                if importance >= threshold && importance > 0.0 {
                    edges.push(Edge {
                        layer: l,
                        head: None,
                        from: i,
                        to: i,
                        importance,
                    });
                    below[i] = true;
                }
            }
            reached = below;
        }
        Routes { threshold, edges }
    }
}

/// A row as one slice (a view's, when it is one; else a copy).
fn contiguous(v: ArrayView1<'_, f32>) -> std::borrow::Cow<'_, [f32]> {
    match v.to_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(v.to_vec()),
    }
}

/// `‖y − w·u‖₁`, in eight running sums (which the compiler keeps in SIMD registers).
fn distance(y: &[f32], w: f32, u: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let whole = y.len() / 8 * 8;
    for (yc, uc) in y[..whole].chunks_exact(8).zip(u[..whole].chunks_exact(8)) {
        for k in 0..8 {
            acc[k] += (yc[k] - w * uc[k]).abs();
        }
    }
    let rest: f32 = y[whole..]
        .iter()
        .zip(&u[whole..])
        .map(|(a, b)| (a - w * b).abs())
        .sum();
    acc.iter().sum::<f32>() + rest
}
