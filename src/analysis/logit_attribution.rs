//! What writes the next token: the direct logit attribution (Elhage et al. 2021, "A mathematical
//! framework for transformer circuits"). In a pre-norm decoder every layer adds to the residual
//! stream, so the stream at the last layer is the sum of what was written to it: the embedding,
//! each head's context through its columns of `W_O`, each feed-forward's output, and constants
//! (the output projections' biases). The final norm is frozen at the real stream `x` (its scale
//! `γ / rms(x)` for RMSNorm, `γ / σ(x)` after centring each write for LayerNorm, whose bias is a
//! constant too), and each write is read onto the target token's row of the LM head: the parts
//! sum to the logit the model gives. A norm after the attention (Gemma 3's
//! `post_attention_layernorm`) is frozen the same way at the attention's real output, so each
//! head's write is its share of the normed sum; a feed-forward's write is what the stream gained
//! across it, its own norm after it included.

use ndarray::{s, Array1, Array2, Array3, ArrayView1, ArrayView2, Axis};

use super::value_weighted::through_each_head;
use crate::engine::cpu::ops::linear;
use crate::engine::cpu::{exp_nonpositive, sum_exp};
use crate::engine::network::{Network, Unembedding};
use crate::engine::{top_k, Writes};
use crate::error::{Error, Result};
use crate::model::weights::{Linear, Norm, NormKind};
use crate::model::TextTokenizer;

/// One token of the vocabulary (its text as a reader sees it: [`TextTokenizer::text_of`]) and
/// what a write gives its logit.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TokenValue {
    pub id: u32,
    pub token: String,
    pub text: String,
    pub value: f32,
}

/// The target token of an attribution.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Target {
    pub id: u32,
    pub token: String,
    pub text: String,
}

/// One position's logit of one token, split into the direct writes to the residual stream.
///
/// # Shapes
/// * `heads`: `(L, H)`; `mlps`: `(L,)`; `promotes`, `suppresses`: `[L][H][K]` (empty for `K = 0`)
/// * `head_writes`: `(L, H, D)`
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogitAttribution {
    pub position: usize,
    pub target: Target,
    /// The model's logit of the target at the position.
    pub logit: f32,
    /// The target's probability there (the softmax of the logits).
    pub probability: f32,
    pub embedding: f32,
    #[serde(serialize_with = "nested")]
    pub heads: Array2<f32>,
    pub mlps: Vec<f32>,
    /// The constants: the output projections' biases, the final norm's bias, the LM head's.
    pub other: f32,
    /// Each head's write read onto every token: the `K` it raises most, and lowers most (left
    /// out for `K = 0`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub promotes: Vec<Vec<Vec<TokenValue>>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suppresses: Vec<Vec<Vec<TokenValue>>>,
    /// Each head's write through the frozen final norm (the norm's bias apart): what
    /// [`read_out`] reads onto every token. The page keeps these, and reads the focused head's.
    #[serde(skip)]
    pub head_writes: Array3<f32>,
}

fn nested<S: serde::Serializer>(a: &Array2<f32>, s: S) -> std::result::Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&crate::report::Nested(a.view().into_dyn()), s)
}

/// Where and what to attribute: item `b`'s `position` (its last real token by default) and
/// `target` (the likeliest next token there by default), `k` tokens a head promotes and
/// suppresses (none for `k = 0`: reading every head onto the vocabulary is most of the cost).
#[derive(Debug, Clone, Copy)]
pub struct AttributionOptions {
    pub position: Option<usize>,
    pub target: Option<u32>,
    pub k: usize,
}

impl LogitAttribution {
    /// Item `b`'s attribution from what the pass kept of its residual stream (`writes`), with
    /// `heads` query heads a layer and the item's `length` real tokens. `lm_logits`: the
    /// model's logits the pass computed, `(B, T, V)`, if it did (else the position's are
    /// computed again from the stream).
    pub fn of(
        network: &dyn Network,
        tokenizer: &TextTokenizer,
        (writes, lm_logits): (&Writes, Option<&Array3<f32>>),
        b: usize,
        (heads, length): (usize, usize),
        opts: AttributionOptions,
    ) -> Result<Self> {
        let Unembedding { norm, lm_head } = network.unembedding().ok_or_else(|| {
            Error::Input(
                "the direct logit attribution reads a pre-norm decoder with an LM head whose \
                 layers each add a write to the residual stream (GPT-2, the Llama family, \
                 Gemma 3) and whose logits are not soft-capped: this model is not one"
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
        let logits = match lm_logits {
            Some(all) => all.slice(s![b, p, ..]).to_owned(),
            None => {
                let x = (frozen(stream.view()) + &norm.bias).insert_axis(Axis(0));
                linear(x.view(), lm_head).row(0).to_owned()
            }
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
        // as the likeliest next tokens' p (`top_k`)
        let probability = {
            let max = logits.fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let all = logits.as_slice().expect("a new array is contiguous");
            exp_nonpositive(logits[target as usize] - max) / sum_exp(all, max)
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
            let mut per_head = through_each_head(context.view(), w_o, heads)
                .map_err(|e| Error::Engine(format!("layer {l}: {e}")))?;
            // a norm after the attention (Gemma 3): its scale frozen at the real output, each
            // head's write is its part of the normed sum, and so is the bias
            let mut bias = w_o.bias.clone();
            if let Some(post) = network.attention_post_norm(l) {
                let out = (per_head.sum_axis(Axis(0)) + &bias).insert_axis(Axis(0)); // (1, D)
                let scale = frozen_post_norm(post, out.view())
                    .map_err(|e| Error::Engine(format!("layer {l}: {e}")))?;
                per_head *= &scale;
                bias *= &scale.row(0);
            }
            for h in 0..heads {
                head_parts[[l, h]] = read(per_head.row(h));
            }
            other += read(bias.view());
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
        // every head's frozen write: (L, H, D)
        let frozen_heads: Vec<ArrayView1<f32>> =
            all_heads.iter().flatten().map(|w| w.view()).collect();
        let head_writes = ndarray::stack(Axis(0), &frozen_heads)
            .and_then(|w| w.into_shape_with_order((layers, heads, stream.len())))
            .map_err(|e| Error::Engine(format!("the heads' writes: {e}")))?;
        let (mut promotes, mut suppresses) = (vec![], vec![]);
        if opts.k > 0 {
            let flat = head_writes
                .view()
                .into_shape_with_order((layers * heads, stream.len()))
                .map_err(|e| Error::Engine(format!("the heads' writes: {e}")))?;
            let read = read_out(flat, lm_head, tokenizer, opts.k);
            let mut read = read.into_iter();
            for _ in 0..layers {
                let (up, down): (Vec<_>, Vec<_>) = read.by_ref().take(heads).unzip();
                promotes.push(up);
                suppresses.push(down);
            }
        }
        Ok(Self {
            position: p,
            target: Target {
                id: target,
                token: tokenizer.token(target),
                text: tokenizer.text_of(target),
            },
            logit: logits[target as usize],
            probability,
            embedding,
            heads: head_parts,
            mlps,
            other,
            promotes,
            suppresses,
            head_writes,
        })
    }

    /// The parts' sum: the embedding, every head and feed-forward, and the constants.
    pub fn total(&self) -> f32 {
        self.embedding + self.heads.sum() + self.mlps.iter().sum::<f32>() + self.other
    }
}

/// An RMSNorm after the attention, frozen at its real inputs `out` (each row an attention's
/// output, bias included): each row's weight over that row's RMS, which turns each part of the
/// row into its share of the norm's output.
///
/// # Shapes
/// * `out`: `(N, D)` → `(N, D)`
pub(crate) fn frozen_post_norm(post: &Norm, out: ArrayView2<f32>) -> Result<Array2<f32>> {
    if post.kind != NormKind::Rms {
        return Err(Error::Engine(
            "a LayerNorm after the attention centres its input: only an RMSNorm is frozen".into(),
        ));
    }
    let mut scale = Array2::<f32>::zeros(out.raw_dim());
    for (mut s, o) in scale.rows_mut().into_iter().zip(out.rows()) {
        let rms = (o.mapv(|v| v * v).mean().unwrap_or(0.0) + post.eps).sqrt();
        s.assign(&(&post.weight / rms));
    }
    Ok(scale)
}

/// Writes to the residual stream, each already through the frozen final norm, read onto every
/// token of the vocabulary by the LM head (its bias apart): for each, the `k` tokens it raises
/// most (largest first) and lowers most (lowest first).
///
/// # Shapes
/// * `writes`: `(N, D)` → `N` pairs of `k` tokens
pub fn read_out(
    writes: ArrayView2<f32>,
    lm_head: &Linear,
    tokenizer: &TextTokenizer,
    k: usize,
) -> Vec<(Vec<TokenValue>, Vec<TokenValue>)> {
    let mut onto = linear(writes, lm_head); // (N, V)
    onto -= &lm_head.bias;
    let vocab = onto.ncols();
    let k = k.min(vocab);
    let named = |r: ArrayView1<f32>, i: usize| TokenValue {
        id: i as u32,
        token: tokenizer.token(i as u32),
        text: tokenizer.text_of(i as u32),
        value: r[i],
    };
    onto.rows()
        .into_iter()
        .map(|r| {
            let mut order: Vec<usize> = (0..vocab).collect();
            let mut ends = |larger: bool| -> Vec<TokenValue> {
                let by = |a: &usize, b: &usize| match larger {
                    true => r[*b].total_cmp(&r[*a]),
                    false => r[*a].total_cmp(&r[*b]),
                };
                if k == 0 {
                    return vec![];
                }
                order.select_nth_unstable_by(k - 1, by);
                let mut end = order[..k].to_vec();
                end.sort_by(by);
                end.into_iter().map(|i| named(r, i)).collect()
            };
            let up = ends(true);
            (up, ends(false))
        })
        .collect()
}
