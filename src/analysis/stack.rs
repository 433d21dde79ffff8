//! How the stack changes each token: the cosine similarity of every token's hidden state to its
//! state one layer before (1 = the layer left its direction alone, lower = it turned it).

use ndarray::{Array2, ArrayView3};

/// `cos(h_l[t], h_{l-1}[t])` for l = 1 … L, every token t.
///
/// # Shapes
/// * `hidden_states`: `(L+1, T, D)` (the embeddings' output, then every layer's) → `(L, T)`
///
/// A zero vector has cosine 0 with anything.
pub fn layer_similarity(hidden_states: ArrayView3<f32>) -> Array2<f32> {
    let (n, t, _) = hidden_states.dim();
    let l = n.saturating_sub(1);
    Array2::from_shape_fn((l, t), |(i, j)| {
        let a = hidden_states.slice(ndarray::s![i, j, ..]);
        let b = hidden_states.slice(ndarray::s![i + 1, j, ..]);
        let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
        for (&x, &y) in a.iter().zip(b.iter()) {
            let (x, y) = (x as f64, y as f64);
            dot += x * y;
            na += x * x;
            nb += y * y;
        }
        let den = (na * nb).sqrt();
        if den > 0.0 {
            (dot / den) as f32
        } else {
            0.0
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array3;

    #[test]
    fn cosines_between_consecutive_layers_per_token() {
        // 3 states (L = 2), 2 tokens, D = 2
        let hs = Array3::from_shape_vec(
            (3, 2, 2),
            vec![
                1.0, 0.0, /* t1 */ 0.0, 2.0, // embeddings
                2.0, 0.0, /* t1 */ 1.0, 1.0, // layer 1
                0.0, 3.0, /* t1 */ -1.0, -1.0, // layer 2
            ],
        )
        .unwrap();
        let s = layer_similarity(hs.view());
        assert_eq!(s.dim(), (2, 2));
        let want = [[1.0, std::f32::consts::FRAC_1_SQRT_2], [0.0, -1.0]];
        for l in 0..2 {
            for t in 0..2 {
                assert!(
                    (s[[l, t]] - want[l][t]).abs() < 1e-6,
                    "{l} {t}: {}",
                    s[[l, t]]
                );
            }
        }
    }

    #[test]
    fn a_zero_state_has_cosine_0_and_no_layers_give_an_empty_matrix() {
        let hs = Array3::<f32>::zeros((2, 1, 3));
        assert_eq!(layer_similarity(hs.view())[[0, 0]], 0.0);
        assert_eq!(
            layer_similarity(Array3::<f32>::zeros((1, 4, 3)).view()).dim(),
            (0, 4)
        );
    }
}
