//! How alike positions are: the cosine similarity between the position encodings of every pair
//! of the first `n` positions, for a checkpoint's learned position embeddings and for the
//! sinusoidal encodings of "Attention is all you need" at the same width, so the page can show
//! them side by side.

use ndarray::{s, Array2, ArrayView2};

use crate::Model;

/// Cosine similarity between every pair of rows of `rows` (a zero row is similar to nothing: 0).
///
/// # Shapes
/// * `rows`: `(n, d)` → `(n, n)`, symmetric, 1 on the diagonal (for non-zero rows)
pub fn cosine_matrix(rows: ArrayView2<f32>) -> Array2<f32> {
    let n = rows.nrows();
    let r = rows.mapv(f64::from);
    let norms: Vec<f64> = r.outer_iter().map(|x| x.dot(&x).sqrt()).collect();
    let dots = r.dot(&r.t()); // (n, n)
    Array2::from_shape_fn((n, n), |(i, j)| {
        let den = norms[i] * norms[j];
        if den > 0.0 {
            (dots[[i, j]] / den) as f32
        } else {
            0.0
        }
    })
}

/// The sinusoidal position encodings: `PE(pos, 2i) = sin(pos / 10000^(2i/d))`,
/// `PE(pos, 2i+1) = cos(pos / 10000^(2i/d))`.
///
/// # Shapes
/// * `(n, d)`
pub fn sinusoidal(n: usize, d: usize) -> Array2<f32> {
    Array2::from_shape_fn((n, d), |(pos, j)| {
        let i2 = (j - j % 2) as f64; // 2i
        let angle = pos as f64 / 10000f64.powf(i2 / d as f64);
        (if j % 2 == 0 { angle.sin() } else { angle.cos() }) as f32
    })
}

/// Cosine similarity of the sinusoidal encodings of positions `0..n` at width `d`.
///
/// # Shapes
/// * `(n, n)`
pub fn sinusoidal_similarity(n: usize, d: usize) -> Array2<f32> {
    cosine_matrix(sinusoidal(n, d).view())
}

/// Cosine similarity of the model's position embeddings (rows `0..n` of its position table,
/// BERT's `embeddings.position_embeddings.weight`; `n` is cut to the table's length); `None`
/// for a model whose positions turn its queries and keys (rotary) rather than add a table.
///
/// # Shapes
/// * `(n, n)`
pub fn learned_position_similarity(model: &Model, n: usize) -> Option<Array2<f32>> {
    let table = model.weights.position_table()?.weight.as_f32()?;
    let n = n.min(table.nrows());
    Some(cosine_matrix(table.slice(s![..n, ..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinusoidal_similarity_is_symmetric_with_ones_on_the_diagonal() {
        let (n, d) = (40, 384);
        let m = sinusoidal_similarity(n, d);
        assert_eq!(m.dim(), (n, n));
        for i in 0..n {
            assert!(
                (m[[i, i]] - 1.0).abs() < 1e-6,
                "diagonal {i}: {}",
                m[[i, i]]
            );
            for j in 0..n {
                assert!((m[[i, j]] - m[[j, i]]).abs() < 1e-6);
                assert!(m[[i, j]].abs() <= 1.0 + 1e-6);
            }
        }
        // nearby positions are more alike than far ones
        assert!(m[[10, 11]] > m[[10, 30]]);
    }

    #[test]
    fn sinusoidal_similarity_by_hand() {
        // d = 2: PE(pos) = (sin pos, cos pos), a unit vector, so sim(p, q) = cos(p − q)
        let m = sinusoidal_similarity(4, 2);
        assert!((m[[0, 1]] - 1f32.cos()).abs() < 1e-6, "{}", m[[0, 1]]);
        assert!((m[[1, 3]] - 2f32.cos()).abs() < 1e-6, "{}", m[[1, 3]]);
        // d = 4: frequencies 1 and 1/100, each pair a unit vector: the mean of their cosines
        let m = sinusoidal_similarity(3, 4);
        let want = (2f64.cos() + 0.02f64.cos()) / 2.0;
        assert!(
            (f64::from(m[[0, 2]]) - want).abs() < 1e-6,
            "{} vs {want}",
            m[[0, 2]]
        );
        let pe = sinusoidal(2, 4);
        assert_eq!(pe.row(0).to_vec(), vec![0.0, 1.0, 0.0, 1.0]);
    }

    #[test]
    fn a_zero_row_is_similar_to_nothing() {
        let rows = ndarray::array![[0.0f32, 0.0], [1.0, 0.0], [2.0, 0.0]];
        let m = cosine_matrix(rows.view());
        assert_eq!(m[[0, 1]], 0.0);
        assert!((m[[1, 2]] - 1.0).abs() < 1e-6);
    }
}
