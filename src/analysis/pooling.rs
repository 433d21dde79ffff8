//! The sentence embedding of a sentence-transformers model such as all-MiniLM-L6-v2: the last
//! hidden states mean-pooled over the real tokens (padding excluded), then L2-normalised.

use ndarray::{Array1, ArrayView1, ArrayView2};

/// `normalize(Σ_{t real} h_t / n)`.
///
/// # Shapes
/// * `hidden`: `(T, D)`, `valid`: `(T,)` → `(D,)`
pub fn sentence_embedding(hidden: ArrayView2<f32>, valid: ArrayView1<bool>) -> Array1<f32> {
    let d = hidden.ncols();
    let mut sum = Array1::<f64>::zeros(d);
    let mut n = 0usize;
    for (row, _) in hidden.outer_iter().zip(valid).filter(|(_, &v)| v) {
        sum.zip_mut_with(&row, |s, &x| *s += x as f64);
        n += 1;
    }
    if n > 0 {
        sum /= n as f64;
    }
    // sentence-transformers' Normalize: x / max(‖x‖, 1e-12)
    let norm = sum.dot(&sum).sqrt().max(1e-12);
    sum.mapv(|x| (x / norm) as f32)
}
