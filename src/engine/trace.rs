//! What a forward pass returns (everything the visualiser draws), and what to change or keep
//! while running it.

use std::collections::BTreeSet;

use ndarray::{s, Array2, Array3, Array5};

use crate::error::{Error, Result};
use crate::masks::Mask;

/// Heads knocked out of a forward pass: their context `softmax(QKᵀ/√d_k)·V` is zero in the
/// concatenation before the output projection (as HF's former `head_mask` did), so every later
/// layer feels it; their own attention is still computed and reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HeadMask {
    off: BTreeSet<(usize, usize)>,
}

impl HeadMask {
    /// No head knocked out.
    pub fn none() -> Self {
        Self::default()
    }

    /// `(layer, head)` pairs, 0-based.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (usize, usize)>) -> Self {
        Self {
            off: pairs.into_iter().collect(),
        }
    }

    /// Parses `L:H[,L:H…]` (0-based, as the page and the JSON number layers and heads); an
    /// empty string is no head.
    pub fn parse(spec: &str) -> Result<Self> {
        let mut off = BTreeSet::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || {
                Error::Input(format!(
                    "head {part:?}: expected LAYER:HEAD, e.g. 0:3 (0-based)"
                ))
            };
            let (l, h) = part.split_once(':').ok_or_else(bad)?;
            off.insert((
                l.trim().parse().map_err(|_| bad())?,
                h.trim().parse().map_err(|_| bad())?,
            ));
        }
        Ok(Self { off })
    }

    pub fn is_empty(&self) -> bool {
        self.off.is_empty()
    }

    /// Whether head `head` of layer `layer` is knocked out.
    pub fn is_off(&self, layer: usize, head: usize) -> bool {
        self.off.contains(&(layer, head))
    }

    /// The knocked-out `(layer, head)` pairs, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.off.iter().copied()
    }

    /// One layer's heads: `true` where knocked out.
    pub fn layer(&self, layer: usize, heads: usize) -> Vec<bool> {
        (0..heads).map(|h| self.is_off(layer, h)).collect()
    }

    /// Refuses heads the model does not have.
    pub fn check(&self, layers: usize, heads: usize) -> Result<()> {
        match self.off.iter().find(|&&(l, h)| l >= layers || h >= heads) {
            Some((l, h)) => Err(Error::Input(format!(
                "head {l}:{h} does not exist: the model has {layers} layers of {heads} heads (0-based)"
            ))),
            None => Ok(()),
        }
    }
}

impl std::fmt::Display for HeadMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.off.iter().map(|(l, h)| format!("{l}:{h}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// What to change in the forward pass and what to keep beyond the attention probabilities and
/// final hidden states.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TraceOptions {
    /// Keep the scaled scores `QKᵀ/√d_k` of every layer and head (before the mask).
    pub scores: bool,
    /// Heads knocked out (see [`HeadMask`]).
    pub head_mask: HeadMask,
}

impl TraceOptions {
    /// Keep the scores, change nothing.
    pub fn with_scores() -> Self {
        Self {
            scores: true,
            ..Self::default()
        }
    }
}

/// A traced forward pass over a padded batch.
///
/// # Shapes
/// * `attention`: `(B, L, H, T, T)`, `[batch][layer][head][query][key]`
/// * `scores`: `(B, L, H, T, T)` when requested, before the mask
/// * `hidden`: `(B, T, D)`, the last layer's output
/// * `logits`: `(B, num_labels)` when the checkpoint has a [CLS] classification head
/// * `mask`: `(B, T, T)`, the mask that was applied
#[derive(Debug, Clone)]
pub struct Trace {
    pub attention: Array5<f32>,
    pub scores: Option<Array5<f32>>,
    pub hidden: Array3<f32>,
    pub logits: Option<Array2<f32>>,
    pub mask: Mask,
}

impl Trace {
    /// The scores of one head after `masked_fill(mask == 0, -inf)`: what softmax sees.
    ///
    /// # Shapes
    /// * `(T, T)`; `None` when scores were not kept.
    pub fn masked_scores(&self, b: usize, layer: usize, head: usize) -> Option<Array2<f32>> {
        let scores = self.scores.as_ref()?;
        let mut out = scores.slice(s![b, layer, head, .., ..]).to_owned();
        out.zip_mut_with(&self.mask.item(b), |v, &m| {
            if !m {
                *v = f32::NEG_INFINITY
            }
        });
        Some(out)
    }
}
