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

/// Cosine similarity of two vectors (0 when either is zero).
pub fn cosine(a: ArrayView1<f32>, b: ArrayView1<f32>) -> f32 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        (dot / (na * nb)) as f32
    }
}
