//! Attention masks as explicit values the caller composes.
//!
//! A mask is boolean: `true` where query `i` may attend to key `j`. The engines apply it as
//! the seeds' `scores.masked_fill(mask == 0, -inf)` before `softmax`, so a masked key gets
//! probability exactly 0.

use ndarray::{s, Array3, ArrayView2, Axis};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Which mask a view uses; see [`Mask::from_kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MaskKind {
    /// Keys that are `[PAD]` are hidden (`ids != pad_id`).
    #[default]
    Padding,
    /// Padding plus the no-peek (causal) mask: query `i` sees keys `j <= i` only.
    Causal,
    /// Nothing is hidden, not even padding (to show what leaks).
    None,
}

impl std::str::FromStr for MaskKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "padding" => Ok(Self::Padding),
            "causal" => Ok(Self::Causal),
            "none" => Ok(Self::None),
            _ => Err(Error::Input(format!(
                "unknown mask {s:?} (expected padding, causal or none)"
            ))),
        }
    }
}

/// A batch of boolean attention masks.
///
/// # Shapes
/// * `(B, n_q, n_k)`
#[derive(Debug, Clone, PartialEq)]
pub struct Mask(pub Array3<bool>);

impl Mask {
    /// No cell masked.
    pub fn none(batch: usize, n_q: usize, n_k: usize) -> Self {
        Self(Array3::from_elem((batch, n_q, n_k), true))
    }

    /// Padding mask from the valid-token flags `(B, T)`: every query may see the real keys only.
    pub fn padding(valid: ArrayView2<bool>) -> Self {
        let (b, t) = valid.dim();
        Self(Array3::from_shape_fn((b, t, t), |(b, _, j)| valid[[b, j]]))
    }

    /// The no-peek mask `tril(ones(T, T))`, the same for every item of the batch.
    pub fn causal(batch: usize, t: usize) -> Self {
        Self(Array3::from_shape_fn((batch, t, t), |(_, i, j)| j <= i))
    }

    /// Whether this is [`Mask::causal`]'s mask, read in place (at 8,192 tokens the mask to
    /// compare with would be 67 MB).
    pub fn is_causal(&self) -> bool {
        let (_, n_q, n_k) = self.0.dim();
        n_q == n_k
            && self
                .0
                .outer_iter()
                .all(|m| m.indexed_iter().all(|((i, j), &on)| on == (j <= i)))
    }

    /// An explicit mask for every item of a batch.
    pub fn explicit(mask: Array3<bool>) -> Self {
        Self(mask)
    }

    /// The cell-wise AND of two masks of the same shape (e.g. padding ∧ causal).
    pub fn and(&self, other: &Mask) -> Result<Self> {
        if self.0.dim() != other.0.dim() {
            let (a, b) = (self.0.shape().to_vec(), other.0.shape().to_vec());
            return Err(Error::Shape {
                what: "mask combination".into(),
                expected: a,
                found: b,
            });
        }
        let mut out = self.0.clone();
        out.zip_mut_with(&other.0, |a, b| *a = *a && *b);
        Ok(Self(out))
    }

    /// The mask a [`MaskKind`] names, for a batch with valid-token flags `(B, T)`.
    pub fn from_kind(kind: MaskKind, valid: ArrayView2<bool>) -> Self {
        let (b, t) = valid.dim();
        match kind {
            MaskKind::None => Self::none(b, t, t),
            MaskKind::Padding => Self::padding(valid),
            MaskKind::Causal => {
                let mut m = Self::padding(valid);
                m.0.zip_mut_with(&Self::causal(b, t).0, |a, c| *a = *a && *c);
                m
            }
        }
    }

    /// This mask where each query also sees no key `window` or more positions before its own
    /// (HF's sliding window: key `j` is seen from position `p` when `p − j < window`); key `j`
    /// is at position `j`, and query `i` of item `b` at `position(b, i)`.
    pub fn within_window(&self, window: usize, position: impl Fn(usize, usize) -> usize) -> Self {
        let mut out = self.0.clone();
        for ((b, i, j), allowed) in out.indexed_iter_mut() {
            *allowed = *allowed && position(b, i) < j + window;
        }
        Self(out)
    }

    /// `(B, n_q, n_k)`
    pub fn dim(&self) -> (usize, usize, usize) {
        self.0.dim()
    }

    /// The mask of batch item `b`, `(n_q, n_k)`.
    pub fn item(&self, b: usize) -> ArrayView2<'_, bool> {
        self.0.index_axis(Axis(0), b)
    }

    /// The keys of row `q` of item `b` from its first attended one to its last (empty where the
    /// row attends to none): every cell outside is masked. Read 16 cells at a time from the end
    /// (a causal row's masked half is most of its cells).
    pub fn span(&self, b: usize, q: usize) -> std::ops::Range<usize> {
        let row = self.0.slice(s![b, q, ..]);
        attended_span(row.as_slice().expect("a mask's rows are contiguous"))
    }

    /// `u32` words a row of keys takes as bits: `ceil(n_k / 32)`.
    pub fn words_per_row(n_k: usize) -> usize {
        n_k.div_ceil(32)
    }

    /// Every row of keys as bits, the layout the GPU kernels read: key `j` of row `(b, i)` is
    /// bit `j % 32` of word `(b·n_q + i)·words + j / 32`, 1 where the query may attend to it
    /// (`words` = [`Mask::words_per_row`]; the bits past `n_k` are 0).
    ///
    /// # Shapes
    /// * `(B, n_q, n_k)` → `(B, n_q, words)`
    pub fn to_bits(&self) -> Vec<u32> {
        let words = Self::words_per_row(self.0.dim().2);
        let mut out = Vec::with_capacity(self.0.len() / self.0.dim().2.max(1) * words);
        for row in self.0.rows() {
            let mut packed = vec![0u32; words];
            for (j, _) in row.iter().enumerate().filter(|(_, &m)| m) {
                packed[j / 32] |= 1 << (j % 32);
            }
            out.extend(packed);
        }
        out
    }
}

/// The keys from a row's first attended key to its last (`0..0` when it attends to none): the
/// cells outside it are all masked. Found by `memchr` from either end, 16 or more cells an
/// instruction, so a causal row's masked tail costs little.
pub fn attended_span(row: &[bool]) -> std::ops::Range<usize> {
    // SAFETY: a bool is one byte, 0 or 1, so the row read as bytes is the same length, each 0 or 1
    let bytes = unsafe { std::slice::from_raw_parts(row.as_ptr().cast::<u8>(), row.len()) };
    match (memchr::memchr(1, bytes), memchr::memrchr(1, bytes)) {
        (Some(first), Some(last)) => first..last + 1,
        _ => 0..0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array3;
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    #[test]
    fn to_bits_packs_each_row_of_keys_into_words_bit_j_mod_32_of_word_j_div_32() {
        // 2 items × 3 queries × 70 keys: three words a row, the last one holding 6 keys
        let allowed = |b: usize, i: usize, j: usize| (b * 7 + i * 3 + j * j) % 5 < 2;
        let mask = Mask::explicit(Array3::from_shape_fn((2, 3, 70), |(b, i, j)| {
            allowed(b, i, j)
        }));
        let bits = mask.to_bits();
        assert_eq!(Mask::words_per_row(70), 3);
        assert_eq!(bits.len(), 2 * 3 * 3);
        for b in 0..2 {
            for i in 0..3 {
                let row = &bits[(b * 3 + i) * 3..][..3];
                for j in 0..96 {
                    let bit = row[j / 32] >> (j % 32) & 1 == 1;
                    assert_eq!(
                        bit,
                        j < 70 && allowed(b, i, j),
                        "item {b}, query {i}, key {j}"
                    );
                }
            }
        }
        assert_eq!(Mask::none(1, 1, 32).to_bits(), vec![u32::MAX]);
        assert_eq!(
            Mask::none(1, 2, 33).to_bits(),
            vec![u32::MAX, 1, u32::MAX, 1]
        );
    }

    /// A causal mask is known as one in place; a padded one, a square full one, a cell flipped
    /// or another shape is not.
    #[test]
    fn a_causal_mask_is_read_as_one_and_no_other() {
        assert!(Mask::causal(2, 5).is_causal() && Mask::causal(1, 1).is_causal());
        assert!(!Mask::none(1, 5, 5).is_causal());
        assert!(!Mask::none(1, 1, 5).is_causal(), "a step's row over 5 keys");
        for (b, i, j) in [(0, 0, 1), (1, 4, 0), (1, 3, 3)] {
            let mut m = Mask::causal(2, 5);
            m.0[[b, i, j]] ^= true;
            assert!(!m.is_causal(), "cell ({b}, {i}, {j}) flipped");
        }
        let valid = ndarray::array![[true, true, false]];
        let padded = Mask::causal(1, 3)
            .and(&Mask::padding(valid.view()))
            .unwrap();
        assert!(!padded.is_causal());
    }

    /// `span` against the first and last attended keys found one cell at a time, over rows of
    /// 1 to 70 keys (below, at and past the 16 cells it reads at once) with cells on at random,
    /// none, or one at either end.
    #[test]
    fn a_row_s_span_runs_from_its_first_attended_key_to_its_last() {
        let mut rng = SmallRng::seed_from_u64(0x9e37_79b9);
        for n_k in 1..=70 {
            let mut rows = vec![vec![false; n_k], vec![true; n_k]];
            for at in [0, n_k - 1, n_k / 2] {
                let mut one = vec![false; n_k];
                one[at] = true;
                rows.push(one);
            }
            for density in [2, 8, 64] {
                rows.push((0..n_k).map(|_| rng.random_ratio(1, density)).collect());
            }
            let mask = Mask::explicit(Array3::from_shape_fn((1, rows.len(), n_k), |(_, i, j)| {
                rows[i][j]
            }));
            for (q, row) in rows.iter().enumerate() {
                let want = match (
                    row.iter().position(|&on| on),
                    row.iter().rposition(|&on| on),
                ) {
                    (Some(first), Some(last)) => first..last + 1,
                    _ => 0..0,
                };
                assert_eq!(mask.span(0, q), want, "row {q} of {n_k} keys: {row:?}");
            }
        }
        let causal = Mask::causal(2, 40);
        for q in 0..40 {
            assert_eq!(causal.span(1, q), 0..q + 1, "causal row {q}");
        }
    }

    /// HF's `sliding_window_overlay`: `kv_idx > q_idx − window`, on top of the causal mask.
    #[test]
    fn a_window_keeps_the_last_keys_up_to_the_query_s_own() {
        let causal = Mask::causal(1, 6);
        let w = causal.within_window(3, |_, i| i);
        for i in 0..6 {
            for j in 0..6 {
                assert_eq!(w.0[[0, i, j]], j <= i && i - j < 3, "query {i}, key {j}");
            }
        }
        // a decoding step: one query at position 5 over 6 keys
        let step = Mask::none(1, 1, 6).within_window(2, |_, _| 5);
        assert_eq!(
            step.0.iter().copied().collect::<Vec<_>>(),
            [false, false, false, false, true, true]
        );
    }
}
