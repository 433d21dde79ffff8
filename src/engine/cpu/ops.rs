//! Plain CPU kernels on `ndarray`: the reference every GPU shader is checked against.

use std::mem::MaybeUninit;
use std::ops::Range;

use ndarray::{s, Array2, ArrayView2};

use crate::engine::ops::{row_blocks, GatedFeedForward};
use crate::engine::Numerics;
use crate::error::{Error, Result};
use crate::linalg::gemm::matmul_new;
use crate::linalg::{isa, team};
use crate::model::quant::Q8Rows;
use crate::model::rope::Rotary;
use crate::model::weights::{Linear, Matrix, Norm, NormKind};
use crate::model::Activation;

/// `x·Wᵀ + b`.
///
/// # Shapes
/// * `x`: `(T, in)` → `(T, out)`
pub fn linear(x: ArrayView2<f32>, l: &Linear) -> Array2<f32> {
    match (&l.weight, l.packed()) {
        (_, Some(packed)) => matmul_new(x, packed, 1.0, Some(l.bias.view())),
        // block by block from the quantized bytes (src/model/quant/)
        (Matrix::Quantized(q), None) => q.linear(x, l.bias.view()),
        (Matrix::F32(_), None) => unreachable!("an f32 layer packs its weights"),
    }
}

/// `x·Wᵀ + b` in `numerics`: the fast ones where `W` is a 4-bit matrix ([`fast_products`]),
/// else exactly ([`linear`]).
///
/// # Shapes
/// * `x`: `(T, in)` → `(T, out)`
pub fn linear_in(x: ArrayView2<f32>, l: &Linear, numerics: Numerics) -> Array2<f32> {
    match fast_products(x, &[l], numerics) {
        Some(mut y) => y.pop().expect("one layer's product"),
        None => linear(x, l),
    }
}

/// Each layer's `x·Wᵀ + b` in the fast numerics ([`Numerics::Fast`]), `x` rounded to 8 bits
/// once for them all; `None` in the exact numerics, or where a `W` is not a 4-bit matrix (the
/// caller multiplies exactly).
///
/// # Shapes
/// * `x`: `(T, in)` → each `(T, out)`
pub fn fast_products(
    x: ArrayView2<f32>,
    ls: &[&Linear],
    numerics: Numerics,
) -> Option<Vec<Array2<f32>>> {
    if numerics != Numerics::Fast {
        return None;
    }
    let ws = ls.iter().map(|l| l.fast()).collect::<Option<Vec<_>>>()?;
    let x = Q8Rows::quantize(x);
    Some(
        ws.iter()
            .zip(ls)
            .map(|(w, l)| {
                let bias = l.bias.as_slice().expect("a layer's bias is contiguous");
                w.linear(&x, Some(bias))
            })
            .collect(),
    )
}

/// LayerNorm (biased variance, as PyTorch) or RMSNorm over each row, as `ln.kind` says,
/// vectorised for the widest instruction set the CPU has, and its rows shared among the
/// threads when there are many.
///
/// # Shapes
/// * `x`: `(T, D)` → `(T, D)`
pub fn norm(x: ArrayView2<f32>, ln: &Norm) -> Array2<f32> {
    let mut y = x.as_standard_layout().into_owned();
    let d = y.ncols();
    // the parameters as slices: in place (a checkpoint's are contiguous), else copied
    let (weight, bias) = (ln.weight.as_standard_layout(), ln.bias.as_standard_layout());
    let contiguous = "a standard-layout array is contiguous";
    let (weight, bias) = (
        weight.as_slice().expect(contiguous),
        bias.as_slice().expect(contiguous),
    );
    let norm = |rows: &mut [f32]| {
        isa::vectorised(
            #[inline(always)]
            || {
                for row in rows.chunks_exact_mut(d) {
                    match ln.kind {
                        NormKind::Layer => normalize(row, weight, bias, ln.eps),
                        NormKind::Rms => rms_normalize(row, weight, ln.eps),
                    }
                }
            },
        )
    };
    match y.as_slice_mut() {
        Some(values) if d > 0 && values.len() >= LAYER_NORM_PARALLEL_MIN => {
            team::for_each_part(values.chunks_mut(d * 64), norm)
        }
        Some(values) if d > 0 => norm(values),
        _ => {} // no columns: nothing to normalise
    }
    y
}

/// [`norm`] over each of `heads` heads of `x`'s rows on its own: QK-norm, `ln` spanning one
/// head's `d` columns.
///
/// # Shapes
/// * `x`: `(rows, heads·d)` → `(rows, heads·d)`
pub fn norm_heads(x: ArrayView2<f32>, heads: usize, ln: &Norm) -> Result<Array2<f32>> {
    let (rows, cols) = x.dim();
    let d = ln.weight.len();
    if heads == 0 || cols != heads * d {
        return Err(Error::Shape {
            what: format!("{heads} heads of the norm's {d} columns each"),
            expected: vec![rows, heads * d],
            found: vec![rows, cols],
        });
    }
    // (rows, heads·d) → (rows·heads, d): a head's columns one row of their own
    let heads_as_rows = x
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order((rows * heads, d))
        .map_err(|e| Error::Engine(e.to_string()))?;
    norm(heads_as_rows.view(), ln)
        .into_shape_with_order((rows, cols))
        .map_err(|e| Error::Engine(e.to_string()))
}

/// Values from which [`norm`] shares its rows among the threads (64 rows to a job):
/// 128 tokens of 384 stay on one thread.
const LAYER_NORM_PARALLEL_MIN: usize = 1 << 16;

/// One row of LayerNorm ([`norm`]) in place: `(x − mean)/√(var + eps)·weight + bias`.
#[inline(always)]
fn normalize(row: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = sum_lanes(row, |v| v) / n;
    let var = sum_lanes(row, |v| (v - mean) * (v - mean)) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, &w), &b) in row.iter_mut().zip(weight).zip(bias) {
        *v = (*v - mean) * inv * w + b;
    }
}

/// One row of RMSNorm in place: `x/√(mean(x²) + eps)·weight` (HF's `LlamaRMSNorm`).
#[inline(always)]
fn rms_normalize(row: &mut [f32], weight: &[f32], eps: f32) {
    let mean_square = sum_lanes(row, |v| v * v) / row.len() as f32;
    let inv = 1.0 / (mean_square + eps).sqrt();
    for (v, &w) in row.iter_mut().zip(weight) {
        *v = w * (*v * inv);
    }
}

/// Exact GELU, `x·Φ(x) = x/2·(1 + erf(x/√2))` (PyTorch's `nn.GELU()` default).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `erf(x)` within 3·10⁻⁷ (absolute, what `1 + erf` in GELU needs) of libm's (tested):
/// Numerical Recipes' `erfc` by Chebyshev fitting, the formula the GPU engine's shaders use
/// (`shaders/common.wgsl`), written without branches or calls so a loop over it vectorises
/// (`libm::erff` was a tenth of a native pass).
#[inline(always)]
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

/// The tanh approximation of GELU (HF's `gelu_new`, Gemma's `gelu_pytorch_tanh`).
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
    0.5 * x * (1.0 + tanh(C * (x + 0.044_715 * x * x * x)))
}

/// `tanh(x)` within 3·10⁻⁷ (absolute, what `1 + tanh` in GELU needs) of libm's (tested):
/// `±(1 − e)/(1 + e)` with `e = e^(−2|x|)` ([`exp_nonpositive`]), written without calls so a
/// loop over it vectorises (`f32::tanh`, a library call per value, was a sixth of Gemma 3's
/// prompt pass).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let e = exp_nonpositive(-2.0 * x.abs());
    let t = ((1.0 - e) / (1.0 + e)).copysign(x);
    if x.is_nan() {
        x
    } else {
        t
    }
}

/// SiLU (swish), `x · σ(x) = x / (1 + e^(−x))`, with `e = e^(−|x|)` ([`exp_nonpositive`]):
/// `σ(x) = 1 / (1 + e)` for `x ≥ 0`, `e / (1 + e)` below, written without calls so a loop over
/// it vectorises (`f32::exp`, a library call per value, was 3 % of SmolLM2's prompt pass in
/// wasm: every layer's `T × 1536` values).
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    let e = exp_nonpositive(-x.abs());
    let sigma = if x >= 0.0 { 1.0 } else { e } / (1.0 + e);
    if x.is_nan() {
        x
    } else {
        x * sigma
    }
}

/// Applies the feed-forward activation in place, in chunks shared among the threads (a loop
/// over each chunk that the compiler vectorises, for the widest instruction set the CPU has).
pub fn activate(x: &mut Array2<f32>, act: Activation) {
    match act {
        Activation::Gelu => each(x, gelu),
        Activation::GeluTanh => each(x, gelu_tanh),
        Activation::Relu => each(x, |v| v.max(0.0)),
        Activation::Silu => each(x, silu),
    }
}

/// `f` applied to every value of `x` in place, as [`activate`] does.
fn each(x: &mut Array2<f32>, f: impl Fn(f32) -> f32 + Sync) {
    match x.as_slice_mut() {
        Some(values) => team::for_each_part(values.chunks_mut(4096), |chunk| {
            isa::vectorised(|| {
                for v in chunk {
                    *v = f(*v);
                }
            })
        }),
        None => x.mapv_inplace(f),
    }
}

/// `cap·tanh(x/cap)`, in HF's order: a value soft-capped below ±`cap` (Gemma's
/// `final_logit_softcapping` on the logits), with [`tanh`] (within `3·10⁻⁷·cap` of libm's).
#[inline(always)]
pub fn soft_cap(x: f32, cap: f32) -> f32 {
    cap * tanh(x / cap)
}

/// [`soft_cap`] over every value of `x`.
///
/// # Shapes
/// * `x`: `(rows, c)` → `(rows, c)`
pub fn soft_capped(x: ArrayView2<f32>, cap: f32) -> Array2<f32> {
    let mut y = x.as_standard_layout().into_owned();
    each(&mut y, |v| soft_cap(v, cap));
    y
}

/// `act(gate) ⊙ up`: a gated feed-forward's inner activation (SwiGLU with SiLU).
///
/// # Shapes
/// * `gate`, `up`: `(rows, F)` → `(rows, F)`
pub fn gate(gate: ArrayView2<f32>, up: ArrayView2<f32>, act: Activation) -> Array2<f32> {
    let mut g = gate.as_standard_layout().into_owned();
    activate(&mut g, act);
    g *= &up;
    g
}

/// A gated feed-forward, `down(act(gate(x)) ⊙ up(x))`, over blocks of about `rows` rows of
/// `x` ([`row_blocks`]: at least 8, as many as a quantized product takes in its matrix
/// product's path), each block's output written into its rows: the `(rows, F)` values are a
/// block's at a time, not every row's (SmolLM2's three at 8,192 tokens: 150 MB). Each row is
/// computed by the same products as in the whole: the same bits.
///
/// # Shapes
/// * `x`: `(T, D)` → `(T, D)`
pub fn gated_feed_forward(
    x: ArrayView2<f32>,
    ffn: &GatedFeedForward,
    rows: usize,
    numerics: Numerics,
) -> Array2<f32> {
    let blocks = row_blocks(x.nrows(), rows, FEED_FORWARD_LEAST_ROWS);
    let mut y = Array2::<f32>::zeros((x.nrows(), ffn.down.weight.nrows()));
    for r in blocks {
        let x = x.slice(s![r.clone(), ..]);
        // (rows, F) each: in the fast numerics x rounded once for the two; else the two
        // products side by side, as `CpuOps::project` runs them
        let (g, up) = match fast_products(x, &[ffn.gate, ffn.up], numerics) {
            Some(both) => {
                let [g, up]: [Array2<f32>; 2] = both.try_into().expect("two products");
                (g, up)
            }
            None => rayon::join(|| linear(x, ffn.gate), || linear(x, ffn.up)),
        };
        let inner = gate(g.view(), up.view(), ffn.act);
        drop((g, up));
        y.slice_mut(s![r, ..])
            .assign(&linear_in(inner.view(), ffn.down, numerics));
    }
    y
}

/// The fewest rows of a block of [`gated_feed_forward`]: a quantized product of fewer rows reads
/// its weights a row at a time (`QuantMatrix::matmul_t`), summing in another order.
const FEED_FORWARD_LEAST_ROWS: usize = 8;

/// Rotary position embeddings in HF's rotate-half layout: in each head of `d` columns, the pair
/// `(x_i, x_{i+d/2})` of the row at position `p` becomes
/// `(x_i·cos − x_{i+d/2}·sin, x_{i+d/2}·cos + x_i·sin)` of the angle `p·θᵢ`
/// ([`Rotary::inverse_frequencies`]), the cosine and sine multiplied by
/// [`Rotary::attention_scaling`] (1 but for YaRN), computed in f32 in HF's order.
///
/// # Shapes
/// * `x`: `(rows, heads·d)`, `positions`: `(rows,)` → `(rows, heads·d)`
pub fn rotate(x: ArrayView2<f32>, heads: usize, rope: &Rotary, positions: &[u32]) -> Array2<f32> {
    let d = rope.head_dim;
    let half = d / 2;
    let inv = rope.inverse_frequencies();
    let scale = rope.attention_scaling();
    let mut y = x.as_standard_layout().into_owned();
    let cols = y.ncols();
    debug_assert_eq!(cols, heads * d);
    let Some(values) = y.as_slice_mut() else {
        unreachable!("a standard-layout array is contiguous")
    };
    let rotate_row = |(row, &p): (&mut [f32], &u32)| {
        let (cos, sin): (Vec<f32>, Vec<f32>) = inv
            .iter()
            .map(|&f| {
                let angle = p as f32 * f;
                (angle.cos() * scale, angle.sin() * scale)
            })
            .unzip();
        for head in row.chunks_exact_mut(d) {
            let (a, b) = head.split_at_mut(half);
            for i in 0..half {
                let (x1, x2) = (a[i], b[i]);
                a[i] = x1 * cos[i] + -x2 * sin[i];
                b[i] = x2 * cos[i] + x1 * sin[i];
            }
        }
    };
    if cols > 0 {
        // 16 rows a task: one row is too little work to hand to another thread
        let tasks = values.chunks_mut(16 * cols).zip(positions.chunks(16));
        team::for_each_part(tasks, |(rows, positions)| {
            rows.chunks_exact_mut(cols)
                .zip(positions)
                .for_each(rotate_row)
        });
    }
    y
}

/// Softmax of one row in place after `masked_fill(!allowed, -inf)`: masked cells become
/// exactly 0, and a row with every cell masked becomes all zeros rather than NaN.
///
/// # Shapes
/// * `row`: `(n_k,)`; `allowed`: `(n_k,)`, `true` where attending is allowed
#[inline(always)]
pub fn masked_softmax_in_place(row: &mut [f32], allowed: Option<&[bool]>) {
    if let Some(allowed) = allowed {
        assert_eq!(
            row.len(),
            allowed.len(),
            "softmax: the mask's row is not the row's length"
        );
        for (v, &ok) in row.iter_mut().zip(allowed) {
            if !ok {
                *v = f32::NEG_INFINITY; // masked_fill(mask == 0, -inf)
            }
        }
    }
    softmax_in_place(row);
}

/// [`masked_softmax_in_place`] of `scores` written into `probs`, `scores` left as they are:
/// `masked_fill` is the copy, so a kept row of scores costs no pass of its own. `probs` may be
/// uninitialised: every value is written, and the row is returned initialised. The same bits
/// as copying `scores` into `probs` and calling [`masked_softmax_in_place`] on it.
///
/// # Shapes
/// * `scores`, `probs`, `allowed`: `(n_k,)`
#[inline(always)]
pub fn masked_softmax<'p>(
    scores: &[f32],
    probs: &'p mut [MaybeUninit<f32>],
    allowed: Option<&[bool]>,
) -> &'p mut [f32] {
    assert_eq!(
        scores.len(),
        probs.len(),
        "softmax: the probabilities' row is not the scores' length"
    );
    match allowed {
        Some(allowed) => {
            assert_eq!(
                scores.len(),
                allowed.len(),
                "softmax: the mask's row is not the row's length"
            );
            for ((p, &s), &ok) in probs.iter_mut().zip(scores).zip(allowed) {
                p.write(if ok { s } else { f32::NEG_INFINITY }); // masked_fill(mask == 0, -inf)
            }
        }
        None => {
            for (p, &s) in probs.iter_mut().zip(scores) {
                p.write(s);
            }
        }
    }
    // SAFETY: every value of `probs` was written above; `MaybeUninit<f32>` has `f32`'s layout
    let probs = unsafe { &mut *(probs as *mut [MaybeUninit<f32>] as *mut [f32]) };
    softmax_in_place(probs);
    probs
}

/// Softmax of one row in place, `-inf` cells giving 0 (all zeros when every cell is `-inf`).
/// Three passes over the row: its max; `eˣ⁻ᵐᵃˣ` written and summed in the same pass; each
/// value times the sum's reciprocal (one division a row instead of one a value: within an ulp of
/// dividing, and a tenth of a pass at 512 tokens went to softmax).
#[inline(always)]
fn softmax_in_place(row: &mut [f32]) {
    // `>` rather than `f32::max`: the same result (the running max is never NaN, and a NaN
    // score is passed over as `f32::max` passes it), but one instruction a vector (`vmaxps`,
    // wasm's `f32x4.pmax`) instead of a max, a NaN check and a blend
    let max_of = |a: f32, b: f32| if b > a { b } else { a };
    let max = fold_lanes(row, f32::NEG_INFINITY, max_of, max_of);
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let sum = map_and_sum_lanes(row, |v| exp_nonpositive(v - max));
    let inv = 1.0 / sum;
    for v in row.iter_mut() {
        *v *= inv;
    }
}

/// Lanes a reduction keeps apart (one AVX-512 vector): written out, so that the loop
/// vectorises without reassociating anything, and the result is the same bits on every
/// instruction set.
const LANES: usize = 16;

/// The columns of a row of `n` from the [`LANES`]-wide chunk that holds `keys.start` to the
/// end of the one that holds the last of `keys` (or the row's end): where every value outside
/// `keys` is masked, [`masked_softmax_in_place`] over these columns gives the same bits as over
/// the whole row (each reduction's lanes see the same values, the others' terms being its
/// identity, −∞ for the max and 0 for the sum), and leaves the others' 0 to the caller.
pub(crate) fn whole_lanes(keys: Range<usize>, n: usize) -> Range<usize> {
    let end = keys.end.div_ceil(LANES) * LANES;
    (keys.start / LANES * LANES)..end.min(n)
}

/// `xs` folded by `step` in [`LANES`] interleaved lanes, the lanes then joined by `combine` in
/// order, then the tail folded by `step` (also a head's thumbnail's bins and rows:
/// `crate::analysis::thumbnail`, with an f64 sum).
#[inline(always)]
pub(crate) fn fold_lanes<A: Copy>(
    xs: &[f32],
    init: A,
    step: impl Fn(A, f32) -> A,
    combine: impl Fn(A, A) -> A,
) -> A {
    let mut acc = [init; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a = step(*a, x);
        }
    }
    let lanes = acc.into_iter().fold(init, combine);
    chunks.remainder().iter().fold(lanes, |a, &x| step(a, x))
}

/// `Σ f(x)` over `xs`, added in [`LANES`] interleaved lanes (see [`fold_lanes`]).
#[inline(always)]
fn sum_lanes(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    fold_lanes(xs, 0.0, |a, x| a + f(x), |a, b| a + b)
}

/// Replaces each value `x` of `xs` by `f(x)` and returns their sum, added in [`LANES`]
/// interleaved lanes as [`sum_lanes`] adds them (the same bits as mapping, then summing).
#[inline(always)]
fn map_and_sum_lanes(xs: &mut [f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0; LANES];
    let mut chunks = xs.chunks_exact_mut(LANES);
    for chunk in &mut chunks {
        for (a, x) in acc.iter_mut().zip(chunk) {
            *x = f(*x);
            *a += *x;
        }
    }
    let lanes = acc.into_iter().fold(0.0, |a, b| a + b);
    chunks.into_remainder().iter_mut().fold(lanes, |a, x| {
        *x = f(*x);
        a + *x
    })
}

/// `Σ e^(x − max)` over `xs` (`max` at least every `x`: a softmax's denominator), added in
/// [`LANES`] lanes with [`exp_nonpositive`], a loop that vectorises.
pub fn sum_exp(xs: &[f32], max: f32) -> f32 {
    sum_lanes(xs, |x| exp_nonpositive(x - max))
}

/// `eˣ` for `x ≤ 0` (what softmax exponentiates after subtracting the row's max), `-inf` → 0,
/// within 2 ulp of `f32::exp` (tested). Written without branches or calls, so a loop over it
/// vectorises; `f32::exp` is a library call per value, 7–10 % of a forward pass in wasm.
///
/// `eˣ = 2ⁿ·eʳ` with `n = round(x·log₂e)` and `r = x − n·ln 2` in `[−ln2/2, ln2/2]`, where `eʳ`
/// is Cephes' `expf` polynomial.
#[inline(always)]
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
    use super::{
        erf, exp_nonpositive, gelu, gelu_tanh, masked_softmax, masked_softmax_in_place, norm, silu,
        tanh, whole_lanes,
    };
    use crate::linalg::isa::{self, Isa};
    use crate::model::weights::Norm;
    use std::mem::MaybeUninit;

    /// Values in about [-8, 8), from a fixed sequence.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2_654_435_761) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 16_000) as f32 / 1000.0 - 8.0
            })
            .collect()
    }

    #[test]
    fn masked_softmax_equals_f64_and_is_the_same_bits_on_every_instruction_set() {
        for n in [1, 5, 16, 17, 37, 512] {
            let scores = values(n, n as u32);
            let allowed: Vec<bool> = (0..n).map(|i| i % 3 != 1 || n == 1).collect();
            for mask in [None, Some(allowed.as_slice())] {
                // f64 reference: masked cells are 0, the others softmax over the allowed ones
                let ok = |i: usize| mask.is_none_or(|m| m[i]);
                let max = (0..n)
                    .filter(|&i| ok(i))
                    .map(|i| scores[i] as f64)
                    .fold(f64::MIN, f64::max);
                let sum: f64 = (0..n)
                    .filter(|&i| ok(i))
                    .map(|i| (scores[i] as f64 - max).exp())
                    .sum();
                let want: Vec<f64> = (0..n)
                    .map(|i| {
                        if ok(i) {
                            (scores[i] as f64 - max).exp() / sum
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let runs: Vec<Vec<f32>> = Isa::available()
                    .into_iter()
                    .map(|i| {
                        let mut row = scores.clone();
                        isa::on(
                            i,
                            #[inline(always)]
                            || masked_softmax_in_place(&mut row, mask),
                        );
                        row
                    })
                    .collect();
                for (got, isa) in runs.iter().zip(Isa::available()) {
                    assert_eq!(
                        got,
                        &runs[0],
                        "n = {n}: {isa:?} differs from {:?}",
                        Isa::available()[0]
                    );
                    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g as f64 - w).abs() <= 1e-6,
                            "n = {n}, cell {i}: {g} vs {w}"
                        );
                        if !ok(i) {
                            assert_eq!(g, 0.0, "n = {n}: masked cell {i} is {g}");
                        }
                    }
                }
            }
        }
        // every cell masked: zeros, not NaN
        let mut row = vec![1.0, 2.0, 3.0];
        masked_softmax_in_place(&mut row, Some(&[false, false, false]));
        assert_eq!(row, [0.0, 0.0, 0.0]);
        let mut probs = [MaybeUninit::uninit(); 3];
        let probs = masked_softmax(&[1.0, 2.0, 3.0], &mut probs, Some(&[false, false, false]));
        assert_eq!(probs, [0.0, 0.0, 0.0]);
    }

    #[test]
    fn masked_softmax_into_probs_is_the_same_bits_as_in_place_and_keeps_the_scores() {
        for n in [1, 7, 16, 33, 512] {
            let scores = values(n, 3 * n as u32);
            let allowed: Vec<bool> = (0..n).map(|i| i % 4 != 2 || n == 1).collect();
            for mask in [None, Some(allowed.as_slice())] {
                for isa in Isa::available() {
                    let mut in_place = scores.clone();
                    let mut probs = vec![MaybeUninit::uninit(); n];
                    let probs = isa::on(
                        isa,
                        #[inline(always)]
                        || {
                            masked_softmax_in_place(&mut in_place, mask);
                            masked_softmax(&scores, &mut probs, mask).to_vec()
                        },
                    );
                    assert_eq!(probs, in_place, "n = {n}, {isa:?}, mask {}", mask.is_some());
                    assert_eq!(scores, values(n, 3 * n as u32), "the scores were changed");
                }
            }
        }
    }

    #[test]
    fn layer_norm_equals_f64_and_is_the_same_bits_on_one_thread_or_two() {
        // widths below, at and past a lane; row counts below and past the parallel threshold
        for (t, d) in [(3, 1), (4, 5), (2, 16), (7, 17), (16, 384), (200, 384)] {
            let x = ndarray::Array2::from_shape_vec((t, d), values(t * d, d as u32))
                .unwrap()
                .mapv(|v| v * 3.0 + 1.5);
            let ln = Norm::new(
                ndarray::Array1::from(values(d, 11)),
                ndarray::Array1::from(values(d, 12)),
                1e-12,
            );
            let on = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                pool.install(|| norm(x.view(), &ln))
            };
            let got = on(1);
            assert_eq!(got, on(2), "{t}×{d}: one thread and two differ");
            // a strided view (columns reversed) normalises as its copy does, column by column
            let reversed = norm(
                x.slice(ndarray::s![.., ..;-1]),
                &Norm::new(
                    ln.weight.slice(ndarray::s![..;-1]).to_owned(),
                    ln.bias.slice(ndarray::s![..;-1]).to_owned(),
                    ln.eps,
                ),
            );
            for (i, row) in x.rows().into_iter().enumerate() {
                let n = d as f64;
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
                for j in 0..d {
                    let want = (row[j] as f64 - mean) / (var + 1e-12).sqrt() * ln.weight[j] as f64
                        + ln.bias[j] as f64;
                    let g = got[[i, j]] as f64;
                    assert!(
                        (g - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{t}×{d} [{i}, {j}]: {g} vs {want}"
                    );
                    let r = reversed[[i, d - 1 - j]] as f64;
                    assert!(
                        (r - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "reversed {t}×{d} [{i}, {j}]: {r} vs {want}"
                    );
                }
            }
        }
    }

    /// `f` of each of `xs`, computed for every instruction set the CPU runs, which must all
    /// give the same bits (`f` is a function's own type, not a pointer, so that it is compiled
    /// into each instruction set's loop).
    fn the_same_bits_on_every_isa(xs: &[f32], f: impl Fn(f32) -> f32) -> Vec<f32> {
        let runs: Vec<Vec<f32>> = Isa::available()
            .into_iter()
            .map(|i| {
                isa::on(
                    i,
                    #[inline(always)]
                    || xs.iter().map(|&x| f(x)).collect(),
                )
            })
            .collect();
        for (got, isa) in runs.iter().zip(Isa::available()) {
            assert_eq!(got, &runs[0], "{isa:?}");
        }
        runs.into_iter()
            .next()
            .expect("the portable instruction set at least")
    }

    #[test]
    fn gelu_is_the_same_bits_on_every_instruction_set() {
        let xs = values(4099, 7);
        let got = the_same_bits_on_every_isa(&xs, gelu);
        // and near the exact formula: x·Φ(x)
        for (&x, &g) in xs.iter().zip(&got) {
            let want = 0.5 * x as f64 * (1.0 + libm::erf(x as f64 / std::f64::consts::SQRT_2));
            assert!(
                (g as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "gelu({x}): {g} vs {want}"
            );
        }
    }

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
    fn tanh_is_within_3e_7_of_libm() {
        let mut x = -12.0f32;
        while x < 12.0 {
            let (got, want) = (tanh(x), libm::tanhf(x));
            assert!((got - want).abs() <= 3e-7, "tanh({x}): {got} vs {want}");
            x += 0.000_53;
        }
        assert_eq!(tanh(0.0), 0.0);
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert!(tanh(f32::NAN).is_nan());
    }

    /// HF's SiLU, in f64: `x / (1 + e^(−x))`, on every ISA alike; ±∞ and NaN as the formula's.
    #[test]
    fn silu_is_hf_s_formula() {
        let xs: Vec<f32> = (0..40_000).map(|i| (i as f32 - 20_000.0) / 397.0).collect();
        let got = the_same_bits_on_every_isa(&xs, silu);
        for (&x, &g) in xs.iter().zip(&got) {
            let x64 = x as f64;
            let want = x64 / (1.0 + (-x64).exp());
            assert!(
                (g as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "silu({x}): {g} vs {want}"
            );
        }
        assert_eq!(silu(0.0), 0.0);
        assert_eq!(silu(f32::INFINITY), f32::INFINITY);
        // −∞ / (1 + ∞), as the formula (and torch's kernel) gives it
        assert!(silu(f32::NEG_INFINITY).is_nan());
        assert!(silu(f32::NAN).is_nan());
    }

    /// HF's `gelu_new`, in f64: `x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, on every ISA alike.
    #[test]
    fn gelu_tanh_is_hf_s_formula() {
        let xs: Vec<f32> = (0..20_000).map(|i| (i as f32 - 10_000.0) / 997.0).collect();
        let got = the_same_bits_on_every_isa(&xs, gelu_tanh);
        for (&x, &g) in xs.iter().zip(&got) {
            let x64 = x as f64;
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (x64 + 0.044_715 * x64.powi(3));
            let want = 0.5 * x64 * (1.0 + inner.tanh());
            assert!(
                (g as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "gelu_tanh({x}): {g} vs {want}"
            );
        }
    }

    /// A row's softmax over [`whole_lanes`] of the keys it may read (the others masked, and 0
    /// outside those lanes) is the same bits as over the whole row, for keys that begin and end
    /// anywhere (mid chunk, in the row's tail); over the keys alone it is not.
    #[test]
    fn a_softmax_over_the_whole_lanes_of_its_keys_is_the_rows() {
        let (mut same, mut differ) = (0, 0);
        for n in [1, 7, 16, 17, 40, 100, 129] {
            let row: Vec<f32> = (0..n)
                .map(|j| ((j * 7919 % 131) as f32 / 13.0 - 5.0) * (1.0 + j as f32 / 50.0))
                .collect();
            for start in 0..n {
                for end in start + 1..=n {
                    let allowed: Vec<bool> = (0..n).map(|j| (start..end).contains(&j)).collect();
                    let mut whole = row.clone();
                    masked_softmax_in_place(&mut whole, Some(&allowed));
                    let part = |cols: std::ops::Range<usize>| {
                        let mut p = vec![0.0; n];
                        p[cols.clone()].copy_from_slice(&row[cols.clone()]);
                        masked_softmax_in_place(&mut p[cols.clone()], Some(&allowed[cols]));
                        p.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                    };
                    let bits: Vec<u32> = whole.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(
                        part(whole_lanes(start..end, n)),
                        bits,
                        "n {n}, keys {start}..{end}"
                    );
                    same += 1;
                    differ += usize::from(part(start..end) != bits);
                }
            }
        }
        assert!(
            differ > 0,
            "the keys alone gave the row's bits in all {same} cases"
        );
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

    /// A gated feed-forward over blocks of rows is the whole one's bits, row for row: f32
    /// weights (packed for the matrix product) and Q4_1 and Q8_0 ones (SmolLM2's, and the
    /// product's other kernels), blocks of 8 to more than every row, a short last block joined
    /// to the one before it.
    #[test]
    fn a_feed_forward_over_blocks_of_rows_is_the_whole_ones_bits() {
        use super::{
            gate, gated_feed_forward, linear, row_blocks, GatedFeedForward, FEED_FORWARD_LEAST_ROWS,
        };
        use crate::model::quant::{GgmlType, QuantMatrix};
        use crate::model::weights::Linear;
        use crate::model::Activation;
        use ndarray::{Array1, Array2};
        use std::sync::Arc;
        let (t, d, f) = (100, 64, 96);
        let dense = |rows: usize, cols: usize, seed: u32| {
            let w = Array2::from_shape_vec((rows, cols), values(rows * cols, seed)).unwrap();
            Linear::new(w.mapv(|v| v / 16.0), Array1::from(values(rows, seed + 1)))
        };
        // random blocks, each block's f16 scales (and Q4_1's minimum) small and finite
        let quantized = |ty: GgmlType, rows: usize, cols: usize, seed: u32| {
            let (block, scales): (usize, &[usize]) = match ty {
                GgmlType::Q4_1 => (20, &[0, 2]),
                GgmlType::Q8_0 => (34, &[0]),
                _ => unreachable!("the two types this test makes"),
            };
            let n = rows * cols / 32 * block;
            let mut b: Vec<u8> = values(n, seed)
                .iter()
                .map(|v| (v * 16.0) as i8 as u8)
                .collect();
            for (i, blk) in b.chunks_exact_mut(block).enumerate() {
                for &at in scales {
                    let v = half::f16::from_f32(0.01 + 0.001 * (i % 13) as f32);
                    blk[at..at + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
            let m = QuantMatrix::new(ty, rows, cols, Arc::new(b), 0).unwrap();
            Linear::quantized(m, Array1::zeros(rows))
        };
        let x = Array2::from_shape_vec((t, d), values(t * d, 7)).unwrap();
        let weights: [(&str, [Linear; 3]); 3] = [
            ("f32", [dense(f, d, 1), dense(f, d, 2), dense(d, f, 3)]),
            (
                "Q4_1",
                [(f, d, 4), (f, d, 5), (d, f, 6)]
                    .map(|(r, c, s)| quantized(GgmlType::Q4_1, r, c, s)),
            ),
            (
                "Q8_0",
                [(f, d, 7), (f, d, 8), (d, f, 9)]
                    .map(|(r, c, s)| quantized(GgmlType::Q8_0, r, c, s)),
            ),
        ];
        for (name, [g, u, down]) in &weights {
            for act in [Activation::Silu, Activation::GeluTanh] {
                let ffn = GatedFeedForward {
                    gate: g,
                    up: u,
                    down,
                    act,
                };
                let whole = linear(
                    gate(linear(x.view(), g).view(), linear(x.view(), u).view(), act).view(),
                    down,
                );
                for rows in [8, 13, 64, 99, 100, 1000] {
                    let blocks =
                        gated_feed_forward(x.view(), &ffn, rows, crate::engine::Numerics::Exact);
                    let at = whole
                        .iter()
                        .zip(&blocks)
                        .position(|(a, b)| a.to_bits() != b.to_bits());
                    assert_eq!(
                        at,
                        None,
                        "{name} {act:?}, blocks of {rows} rows ({:?}): value {at:?} differs",
                        row_blocks(t, rows, FEED_FORWARD_LEAST_ROWS)
                    );
                }
            }
        }
    }
}
