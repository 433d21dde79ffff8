//! What writes the next token: the direct logit attribution (Elhage et al. 2021, "A mathematical
//! framework for transformer circuits"). In a pre-norm decoder every layer adds to the residual
//! stream, so the stream at the last layer is the sum of what was written to it: the embedding,
//! each head's context through its columns of `W_O`, each feed-forward's output, and constants
//! (the output projections' biases). The final norm is frozen at the real stream `x` (its scale
//! `γ / rms(x)` for RMSNorm, `γ / σ(x)` after centring each write for LayerNorm, whose bias is a
//! constant too), and each write is read onto the target token's row of the LM head: the parts
//! sum to the logit the model gives.

use ndarray::{s, Array1, Array2, ArrayView1, Axis};

use super::value_weighted::through_each_head;
use crate::engine::cpu::ops::linear;
use crate::engine::network::{Network, Unembedding};
use crate::engine::{top_k, Writes};
use crate::error::{Error, Result};
use crate::model::weights::NormKind;
use crate::model::TextTokenizer;

/// One token of the vocabulary and what a write gives its logit.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TokenValue {
    pub id: u32,
    pub token: String,
    pub value: f32,
}

/// The target token of an attribution.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Target {
    pub id: u32,
    pub token: String,
}

/// One position's logit of one token, split into the direct writes to the residual stream.
///
/// # Shapes
/// * `heads`: `(L, H)`; `mlps`: `(L,)`; `promotes`, `suppresses`: `[L][H][K]`
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogitAttribution {
    pub position: usize,
    pub target: Target,
    /// The model's logit of the target at the position.
    pub logit: f32,
    pub embedding: f32,
    #[serde(serialize_with = "nested")]
    pub heads: Array2<f32>,
    pub mlps: Vec<f32>,
    /// The constants: the output projections' biases, the final norm's bias, the LM head's.
    pub other: f32,
    /// Each head's write read onto every token: the `K` it raises most, and lowers most.
    pub promotes: Vec<Vec<Vec<TokenValue>>>,
    pub suppresses: Vec<Vec<Vec<TokenValue>>>,
}

fn nested<S: serde::Serializer>(a: &Array2<f32>, s: S) -> std::result::Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&crate::report::Nested(a.view().into_dyn()), s)
}

/// Where and what to attribute: item `b`'s `position` (its last real token by default) and
/// `target` (the likeliest next token there by default), `k` tokens a head promotes and
/// suppresses.
#[derive(Debug, Clone, Copy)]
pub struct AttributionOptions {
    pub position: Option<usize>,
    pub target: Option<u32>,
    pub k: usize,
}

impl LogitAttribution {
    /// Item `b`'s attribution from what the pass kept of its residual stream (`writes`), with
    /// `heads` query heads a layer and the item's `length` real tokens.
    pub fn of(
        network: &dyn Network,
        tokenizer: &TextTokenizer,
        writes: &Writes,
        b: usize,
        (heads, length): (usize, usize),
        opts: AttributionOptions,
    ) -> Result<Self> {
        let Unembedding { norm, lm_head } = network.unembedding().ok_or_else(|| {
            Error::Input(
                "the direct logit attribution reads a pre-norm decoder with an LM head whose \
                 layers write to the residual stream directly (GPT-2, the Llama family): this \
                 model is not one"
                    .into(),
            )
        })?;
        let layers = writes.context.len();
        let p = opts.position.unwrap_or(length.saturating_sub(1));
        if p >= length {
            return Err(Error::Input(format!(
                "position {p} is past the text's {length} tokens"
            )));
        }
        let at = |x: &ndarray::Array3<f32>| x.slice(s![b, p, ..]).to_owned();
        let stream = at(&writes.hidden[layers]); // x, (D,)
                                                 // the final norm frozen at x: a write's coordinates, centred first for LayerNorm, times
                                                 // `scale`; the norm's bias is a constant
        let centred = norm.kind == NormKind::Layer;
        let spread = {
            let m = if centred {
                stream.mean().unwrap_or(0.0)
            } else {
                0.0
            };
            (stream.mapv(|v| (v - m) * (v - m)).mean().unwrap_or(0.0) + norm.eps).sqrt()
        };
        let scale = &norm.weight / spread;
        let frozen = |w: ArrayView1<f32>| -> Array1<f32> {
            let m = if centred {
                w.mean().unwrap_or(0.0)
            } else {
                0.0
            };
            (&w - m) * &scale
        };
        // the logits of the real stream (the norm's output through the LM head), and the target
        let logits = {
            let x = (frozen(stream.view()) + &norm.bias).insert_axis(Axis(0));
            linear(x.view(), lm_head).row(0).to_owned()
        };
        let vocab = logits.len();
        let target = match opts.target {
            Some(t) if (t as usize) < vocab => t,
            Some(t) => {
                return Err(Error::Input(format!(
                    "target {t} is outside the vocabulary's {vocab} tokens"
                )))
            }
            None => top_k(logits.view().insert_axis(Axis(0)), 1)[0][0].id,
        };
        let row = lm_head.weight.rows_of(&[target as usize]).row(0).to_owned(); // U_t, (D,)
        let read = |w: ArrayView1<f32>| frozen(w).dot(&row);
        let mut other =
            norm.bias.dot(&row) + lm_head.bias.get(target as usize).copied().unwrap_or(0.0);
        let embedding = read(at(&writes.hidden[0]).view());
        let mut head_parts = Array2::<f32>::zeros((layers, heads));
        let mut mlps = Vec::with_capacity(layers);
        let mut all_heads = Vec::with_capacity(layers);
        for l in 0..layers {
            let w_o = network
                .attention_output(l)
                .ok_or_else(|| Error::Engine(format!("layer {l} has no output projection")))?;
            // each head's context through its own columns of W_O: (H, D)
            let context = at(&writes.context[l]).insert_axis(Axis(0));
            let per_head = through_each_head(context.view(), w_o, heads)
                .map_err(|e| Error::Engine(format!("layer {l}: {e}")))?;
            for h in 0..heads {
                head_parts[[l, h]] = read(per_head.row(h));
            }
            other += read(w_o.bias.view());
            // the feed-forward's write: the stream after the layer less the stream after its
            // attention, its output bias apart
            let mlp = at(&writes.hidden[l + 1]) - at(&writes.after_attention[l]);
            match network.mlp_output(l).map(|w| &w.bias) {
                Some(bias) => {
                    mlps.push(read((&mlp - bias).view()));
                    other += read(bias.view());
                }
                None => mlps.push(read(mlp.view())),
            }
            all_heads.push(per_head.rows().into_iter().map(frozen).collect::<Vec<_>>());
        }
        // every head's frozen write onto every token: (L·H, V)
        let frozen_heads: Vec<ArrayView1<f32>> =
            all_heads.iter().flatten().map(|w| w.view()).collect();
        let stacked = ndarray::stack(Axis(0), &frozen_heads)
            .map_err(|e| Error::Engine(format!("the heads' writes: {e}")))?;
        let mut onto = linear(stacked.view(), lm_head);
        onto -= &lm_head.bias;
        let named = |id: usize, value: f32| TokenValue {
            id: id as u32,
            token: tokenizer.token(id as u32),
            value,
        };
        let (mut promotes, mut suppresses) = (vec![], vec![]);
        for l in 0..layers {
            let (mut up, mut down) = (vec![], vec![]);
            for h in 0..heads {
                let r = onto.row(l * heads + h);
                let mut order: Vec<usize> = (0..vocab).collect();
                let k = opts.k.min(vocab);
                order.select_nth_unstable_by(k.saturating_sub(1).min(vocab - 1), |&a, &b| {
                    r[b].total_cmp(&r[a])
                });
                let mut top: Vec<usize> = order[..k].to_vec();
                top.sort_by(|&a, &b| r[b].total_cmp(&r[a]));
                up.push(top.iter().map(|&i| named(i, r[i])).collect());
                order.select_nth_unstable_by(k.saturating_sub(1).min(vocab - 1), |&a, &b| {
                    r[a].total_cmp(&r[b])
                });
                let mut low: Vec<usize> = order[..k].to_vec();
                low.sort_by(|&a, &b| r[a].total_cmp(&r[b]));
                down.push(low.iter().map(|&i| named(i, r[i])).collect());
            }
            promotes.push(up);
            suppresses.push(down);
        }
        Ok(Self {
            position: p,
            target: Target {
                id: target,
                token: tokenizer.token(target),
            },
            logit: logits[target as usize],
            embedding,
            heads: head_parts,
            mlps,
            other,
            promotes,
            suppresses,
        })
    }

    /// The parts' sum: the embedding, every head and feed-forward, and the constants.
    pub fn total(&self) -> f32 {
        self.embedding + self.heads.sum() + self.mlps.iter().sum::<f32>() + self.other
    }
}
