//! Plain CPU kernels on `ndarray`: the reference every GPU shader is checked against.

use ndarray::{Array2, ArrayView2, ArrayViewMut1, Axis, Zip};

use crate::model::weights::{LayerNorm, Linear};
use crate::model::Activation;

/// `x·Wᵀ + b`.
///
/// # Shapes
/// * `x`: `(T, in)` → `(T, out)`
pub fn linear(x: ArrayView2<f32>, l: &Linear) -> Array2<f32> {
    let mut y = x.dot(&l.weight.t());
    y += &l.bias;
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

/// Applies the feed-forward activation in place.
pub fn activate(x: &mut Array2<f32>, act: Activation) {
    match act {
        Activation::Gelu => x.mapv_inplace(gelu),
        Activation::GeluTanh => x.mapv_inplace(gelu_tanh),
        Activation::Relu => x.mapv_inplace(|v| v.max(0.0)),
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
    let mut sum = 0.0;
    row.mapv_inplace(|v| {
        let e = (v - max).exp();
        sum += e;
        e
    });
    row.mapv_inplace(|v| v / sum);
}
