//! What a forward pass returns: everything the visualiser draws.

use ndarray::{s, Array2, Array3, Array5};

use crate::masks::Mask;

/// What to keep beyond the attention probabilities and final hidden states.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceOptions {
    /// Keep the scaled scores `QKᵀ/√d_k` of every layer and head (before the mask).
    pub scores: bool,
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
