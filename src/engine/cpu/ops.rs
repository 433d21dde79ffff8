//! Plain CPU kernels on `ndarray`: the reference every GPU shader is checked against.

use ndarray::{Array2, ArrayView2, ArrayViewMut1, Axis, Zip};

use super::gemm::matmul;
use crate::model::weights::{LayerNorm, Linear};
use crate::model::Activation;

/// `x·Wᵀ + b`.
///
/// # Shapes
/// * `x`: `(T, in)` → `(T, out)`
pub fn linear(x: ArrayView2<f32>, l: &Linear) -> Array2<f32> {
    let mut y = Array2::zeros((x.nrows(), l.bias.len()));
    matmul(x, l.packed(), 1.0, Some(l.bias.view()), y.view_mut());
    y
}

/// LayerNorm over each row (biased variance, as PyTorch).
///
/// # Shapes
/// * `x`: `(T, D)` → `(T, D)`
pub fn layer_norm(x: ArrayView2<f32>, ln: &LayerNorm) -> Array2<f32> {
    let mut y = x.to_owned();
    for mut row in y.axis_iter_mut(Axis(0)) {
        let n = row.len() as f32;
        let mean = row.sum() / n;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let inv = 1.0 / (var + ln.eps).sqrt();
        Zip::from(&mut row)
            .and(&ln.weight)
            .and(&ln.bias)
            .for_each(|v, w, b| *v = (*v - mean) * inv * w + b);
    }
    y
}

/// Exact GELU, `x·Φ(x) = x/2·(1 + erf(x/√2))` (PyTorch's `nn.GELU()` default).
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// The tanh approximation of GELU (HF's `gelu_new`).
pub fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
    0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
}

/// Applies the feed-forward activation in place (in parallel where there are threads).
pub fn activate(x: &mut Array2<f32>, act: Activation) {
    match act {
        Activation::Gelu => x.par_mapv_inplace(gelu),
        Activation::GeluTanh => x.par_mapv_inplace(gelu_tanh),
        Activation::Relu => x.par_mapv_inplace(|v| v.max(0.0)),
    }
}

/// Softmax of one row in place, where `-inf` cells (masked) become exactly 0.
/// A row with every cell masked becomes all zeros rather than NaN.
pub fn softmax_in_place(mut row: ArrayViewMut1<f32>) {
    let max = row.fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    // the exponentials first (a loop the compiler vectorises), then their sum
    row.mapv_inplace(|v| exp_nonpositive(v - max));
    let sum = row.sum();
    row.mapv_inplace(|v| v / sum);
}

/// `eˣ` for `x ≤ 0` (what softmax exponentiates after subtracting the row's max), `-inf` → 0,
/// within 2 ulp of `f32::exp` (tested). Written without branches or calls, so a loop over it
/// vectorises; `f32::exp` is a library call per value, 7–10 % of a forward pass in wasm.
///
/// `eˣ = 2ⁿ·eʳ` with `n = round(x·log₂e)` and `r = x − n·ln 2` in `[−ln2/2, ln2/2]`, where `eʳ`
/// is Cephes' `expf` polynomial.
#[inline]
pub fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4; // ln 2 split in two for an exact n·LN2_HI
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5·2²³: adding it rounds to an integer in the low bits
                                     // below −87.3 the result underflows: clamp (−inf included) and zero it at the end
    let xc = x.max(-87.0);
    let t = xc * LOG2E + ROUND;
    let n = t - ROUND; // round(x·log₂e), as a float
    let r = xc - n * LN2_HI - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let er = p * r * r + r + 1.0;
    // 2ⁿ from the integer in `t`'s low bits, as a float's exponent
    let n_int = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let two_n = f32::from_bits(((n_int + 127) << 23) as u32);
    if x < -87.0 {
        0.0
    } else {
        er * two_n
    }
}

#[cfg(test)]
mod tests {
    use super::exp_nonpositive;

    #[test]
    fn exp_nonpositive_is_within_2_ulp_of_exp() {
        let mut worst = 0f32;
        let mut x = 0.0f32;
        while x > -87.0 {
            let (got, want) = (exp_nonpositive(x), x.exp());
            let ulp = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulp <= 2, "e^{x}: {got} vs {want} ({ulp} ulp)");
            worst = worst.max((got - want).abs() / want);
            x -= 0.000_37;
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-100.0), 0.0);
        assert!(worst < 3e-7, "relative error {worst}");
    }
}
