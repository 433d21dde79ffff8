//! Reading the heads from a forward pass's attention, on the engine's own numbers:
//!
//! * [`heads`]: per-head summaries (Clark et al. 2019, "What does BERT look at?"): entropy,
//!   attention to [CLS], [SEP], the token itself, the previous and next token, and distance;
//! * [`rollout`]: attention rollout (Abnar & Zuidema 2020) through the whole stack;
//! * [`pooling`]: the mean-pooled, L2-normalised sentence embedding (sentence-transformers);
//! * [`scaling`]: the experiment behind dividing scores by √d_k;
//! * [`positions`]: how alike positions are, learned position embeddings beside sinusoidal ones;
//! * [`stack`]: how much each layer turns each token's hidden state (cosine to the layer before).
//!
//! Every mean is over a text's real tokens: padding is excluded, so a padded batch gives each
//! text the numbers it has alone.

pub mod heads;
pub mod pooling;
pub mod positions;
pub mod rollout;
pub mod scaling;
pub mod stack;

pub use heads::HeadMetrics;
pub use pooling::sentence_embedding;
pub use rollout::rollout;

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
/// * `attention`: `(L, H, T, T)`; `ids`, `valid`: `(T,)`
pub struct ItemAttention<'a> {
    pub attention: ndarray::ArrayView4<'a, f32>,
    /// `(L, H, T, T)`, the scores `QKᵀ/√d_k` softmax turned into `attention`, when kept: with
    /// them a row's entropy needs one logarithm, not one a cell (see [`heads`]).
    pub scores: Option<ndarray::ArrayView4<'a, f32>>,
    pub ids: ndarray::ArrayView1<'a, u32>,
    pub valid: ndarray::ArrayView1<'a, bool>,
    pub special: SpecialIds,
}

impl ItemAttention<'_> {
    /// The positions of the real (not padding) tokens.
    pub fn real(&self) -> Vec<usize> {
        (0..self.valid.len()).filter(|&i| self.valid[i]).collect()
    }
}
