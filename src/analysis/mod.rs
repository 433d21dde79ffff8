//! Reading the heads from a forward pass's attention, on the engine's own numbers:
//!
//! * [`heads`]: per-head summaries (Clark et al. 2019, "What does BERT look at?"): entropy,
//!   attention to [CLS], [SEP], the token itself, the previous and next token, and distance;
//! * [`roles`]: each head's previous-token, sink, induction and duplicate-token scores on a
//!   text that repeats a sequence;
//! * [`rollout`]: attention rollout (Abnar & Zuidema 2020) through the whole stack;
//! * [`pooling`]: the mean-pooled, L2-normalised sentence embedding (sentence-transformers);
//! * [`scaling`]: the experiment behind dividing scores by √d_k;
//! * [`positions`]: how alike positions are, learned position embeddings beside sinusoidal ones;
//! * [`stack`]: how much each layer turns each token's hidden state (cosine to the layer before);
//! * [`cross`]: attention from one sentence to another encoded alone, through an encoder layer;
//! * [`value_weighted`]: each weight times the size of what the head writes from its key
//!   (Kobayashi et al. 2020);
//! * [`logit_attribution`]: a next-token logit split into what each head, feed-forward and the
//!   embedding wrote to the residual stream (Elhage et al. 2021);
//! * [`flow`]: the information-flow routes to a prediction, each head's and the residual's
//!   edges between positions' streams layer by layer (Ferrando & Voita 2024);
//! * [`thumbnail`]: a head max-pooled for the grid, and with its first key hidden; a part of it
//!   max-pooled for the head view's pixels.
//!
//! Every mean is over a text's real tokens: padding is excluded, so a padded batch gives each
//! text the numbers it has alone.

pub mod cross;
pub mod flow;
pub mod heads;
pub mod logit_attribution;
pub mod pooling;
pub mod positions;
pub mod roles;
pub mod rollout;
pub mod scaling;
pub mod stack;
pub mod thumbnail;
pub mod value_weighted;

pub use cross::{cross_attention, CrossAttention};
pub use heads::HeadMetrics;
pub use logit_attribution::{AttributionOptions, LogitAttribution};
pub use pooling::sentence_embedding;
pub use roles::{HeadRoles, Repeated};
pub use rollout::rollout;
pub use value_weighted::{TranslationValueWeighted, ValueWeighted};

use ndarray::{s, Array1, Array2, ArrayView4, CowArray, Ix2};

use crate::engine::QueriesKeys;
use crate::error::{Error, Result};
use crate::masks::Mask;

/// The ids of the tokenizer's sentence markers (`[CLS]` and `[SEP]` for BERT), as its
/// post-processor adds them: the first and the last special token of an encoded empty text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecialIds {
    pub cls: Option<u32>,
    pub sep: Option<u32>,
}

/// One text of a batch as the analyses see it.
///
/// # Shapes
/// * `ids`, `valid`: `(T,)`; each head `(T, T)` (see [`ItemHeads`])
pub struct ItemAttention<'a> {
    pub heads: ItemHeads<'a>,
    pub ids: ndarray::ArrayView1<'a, u32>,
    pub valid: ndarray::ArrayView1<'a, bool>,
    pub special: SpecialIds,
}

/// Where a text's heads come from: the pass kept them, or they are computed one at a time from
/// the pass's queries and keys (a long text, whose `L·H·T²` probabilities are never all held).
pub enum ItemHeads<'a> {
    /// `probs`: `(L, H, T, T)`; `scores`: the same, `QKᵀ/√d_k` before the mask, when kept: with
    /// them a row's entropy needs one logarithm, not one a cell (see [`heads`]).
    Kept {
        probs: ndarray::ArrayView4<'a, f32>,
        scores: Option<ndarray::ArrayView4<'a, f32>>,
    },
    /// Item `item` of a pass that kept its queries and keys, under its `mask`, `(B, T, T)`.
    Recomputed {
        from: &'a QueriesKeys,
        mask: &'a Mask,
        item: usize,
    },
}

/// One head's probabilities and, when there are any, its scores, `(T, T)` each.
pub type Head<'a> = (CowArray<'a, f32, Ix2>, Option<CowArray<'a, f32, Ix2>>);

impl ItemAttention<'_> {
    /// The positions of the real (not padding) tokens.
    pub fn real(&self) -> Vec<usize> {
        (0..self.valid.len()).filter(|&i| self.valid[i]).collect()
    }

    /// `(L, H)`: the layers and the heads of each.
    pub fn layers_heads(&self) -> (usize, usize) {
        match &self.heads {
            ItemHeads::Kept { probs, .. } => (probs.dim().0, probs.dim().1),
            ItemHeads::Recomputed { from, .. } => (from.queries.len(), from.heads.query),
        }
    }

    /// Head `head` of layer `layer`: a view of the kept values, or computed (with its scores).
    pub fn head(&self, layer: usize, head: usize) -> Result<Head<'_>> {
        match &self.heads {
            ItemHeads::Kept { probs, scores } => {
                let (l, h) = (probs.dim().0, probs.dim().1);
                if layer >= l || head >= h {
                    return Err(Error::Input(format!(
                        "head {layer}:{head} does not exist: the pass has {l} layers of {h} heads"
                    )));
                }
                let at = s![layer, head, .., ..];
                Ok((
                    probs.slice(at).into(),
                    scores.as_ref().map(|sc| sc.slice(at).into()),
                ))
            }
            ItemHeads::Recomputed { from, mask, item } => {
                let one = from.head(*item, layer, head, mask, true)?;
                Ok((one.probs.into(), one.scores.map(Into::into)))
            }
        }
    }
}

/// The heads' summaries and the rollout of attention computed elsewhere (web/given.js): `probs`
/// of one text, every position a real token, whose sentence markers are given by position (`cls`
/// and `sep`: where the tokens the summaries call [CLS] and [SEP] are, none for a tokenizer that
/// adds none). The same numbers as a pass's own ([`HeadMetrics::of`], [`rollout`]).
///
/// # Shapes
/// * `probs`: `(L, H, T, T)`; the rollout `(T, T)`, the summaries `(L, H)` each
pub fn of_given(
    probs: ArrayView4<'_, f32>,
    cls: &[usize],
    sep: &[usize],
) -> Result<(HeadMetrics, Array2<f32>)> {
    let (_, _, t, k) = probs.dim();
    if t != k {
        return Err(Error::Input(format!(
            "given attention of {t} queries over {k} keys: self-attention is square"
        )));
    }
    // the markers as ids the summaries look for: 1 a [CLS], 2 a [SEP] (1 too where the same
    // token is both, as a tokenizer that adds one special token has it), 0 any other token
    let sep_id = if cls == sep { 1 } else { 2 };
    let mut ids = Array1::<u32>::zeros(t);
    for (marks, id) in [(cls, 1), (sep, sep_id)] {
        for &p in marks {
            if p >= t {
                return Err(Error::Input(format!(
                    "a sentence marker at position {p} of {t} tokens"
                )));
            }
            ids[p] = id;
        }
    }
    let valid = Array1::from_elem(t, true);
    let item = ItemAttention {
        heads: ItemHeads::Kept {
            probs,
            scores: None,
        },
        ids: ids.view(),
        valid: valid.view(),
        special: SpecialIds {
            cls: Some(1),
            sep: Some(sep_id),
        },
    };
    Ok((HeadMetrics::of(&item)?, rollout(&item)?))
}
