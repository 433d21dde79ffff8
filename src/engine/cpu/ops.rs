//! Plain CPU kernels on `ndarray`: the reference every GPU shader is checked against.

use ndarray::{Array2, ArrayView2, ArrayViewMut1, Axis, Zip};

use rayon::prelude::*;

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
#[inline]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `erf(x)` within 3·10⁻⁷ (absolute, what `1 + erf` in GELU needs) of libm's (tested): Numerical Recipes' `erfc` by Chebyshev fitting,
/// the formula the GPU engine's shaders use (`shaders/common.wgsl`), written without branches
/// or calls so a loop over it vectorises (`libm::erff` was a tenth of a native pass).
#[inline]
pub fn erf(x: f32) -> f32 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_204
                                + t * (1.488_515_9 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    // the exponent is at most 3·10⁻⁸ (at z = 0), where `exp_nonpositive` is still exact
    let erfc = t * exp_nonpositive(poly - z * z);
    (1.0 - erfc).copysign(x)
}

/// The tanh approximation of GELU (HF's `gelu_new`).
pub fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
    0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
}

/// Applies the feed-forward activation in place, in chunks shared among the threads (a loop
/// over each chunk that the compiler vectorises).
pub fn activate(x: &mut Array2<f32>, act: Activation) {
    fn each(x: &mut Array2<f32>, f: impl Fn(f32) -> f32 + Sync) {
        match x.as_slice_mut() {
            Some(values) => values.par_chunks_mut(4096).for_each(|chunk| {
                for v in chunk {
                    *v = f(*v);
                }
            }),
            None => x.mapv_inplace(f),
        }
    }
    match act {
        Activation::Gelu => each(x, gelu),
        Activation::GeluTanh => each(x, gelu_tanh),
        Activation::Relu => each(x, |v| v.max(0.0)),
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
    use super::{erf, exp_nonpositive};

    #[test]
    fn erf_is_within_3e_7_of_libm() {
        let mut x = -7.0f32;
        while x < 7.0 {
            let (got, want) = (erf(x), libm::erff(x));
            assert!((got - want).abs() <= 3e-7, "erf({x}): {got} vs {want}");
            x += 0.000_71;
        }
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
    }

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
