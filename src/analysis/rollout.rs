//! Attention rollout (Abnar & Zuidema 2020): how much each token's final state draws on each
//! input token through the whole stack, counting the residual path.
//!
//! Per layer `Â_l = 0.5·mean_h(A_l) + 0.5·I`, each row renormalised to sum to 1, and
//! `R = Â_L · … · Â_1` (the last layer on the left). Computed over the real tokens only.

use ndarray::Array2;

use super::ItemAttention;
use crate::error::Result;

/// The rollout of one text.
///
/// # Shapes
/// * `(T, T)`, `[query][key]`; rows and columns of padding are 0, real rows sum to 1.
pub fn rollout(item: &ItemAttention) -> Result<Array2<f32>> {
    let t = item.valid.len();
    let real = item.real();
    let n = real.len();
    let (layers, heads) = item.layers_heads();
    let mut r: Option<Array2<f64>> = None;
    for l in 0..layers {
        // Â = 0.5·mean_h(A) + 0.5·I over the real tokens, rows renormalised
        let mut a = Array2::<f64>::zeros((n, n));
        for h in 0..heads {
            let (head, _) = item.head(l, h)?;
            let head = head.as_standard_layout(); // (T, T)
            let p = head.as_slice().expect("standard layout");
            for (i, &qi) in real.iter().enumerate() {
                let row = &p[qi * t..(qi + 1) * t];
                for (aij, &kj) in a.row_mut(i).iter_mut().zip(&real) {
                    *aij += row[kj] as f64;
                }
            }
        }
        a.mapv_inplace(|x| 0.5 * x / heads as f64);
        for (i, mut row) in a.outer_iter_mut().enumerate() {
            row[i] += 0.5;
            let sum = row.sum();
            if sum > 0.0 {
                row /= sum;
            }
        }
        r = Some(match r {
            None => a,
            Some(prev) => a.dot(&prev), // Â_l · (Â_{l-1} · … · Â_1)
        });
    }
    let mut out = Array2::zeros((t, t));
    if let Some(r) = r {
        for (i, &qi) in real.iter().enumerate() {
            for (j, &kj) in real.iter().enumerate() {
                out[[qi, kj]] = r[[i, j]] as f32;
            }
        }
    }
    Ok(out)
}
