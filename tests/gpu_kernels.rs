//! Each WGSL kernel on its own against its CPU reference, at awkward sizes: 1, 7, 33 and 512
//! rows, widths off the 64-wide matmul tile and the 64-wide row workgroup, sizes and strides
//! that are not multiples of 4 (the matmul's and attention's scalar forms), n_q ≠ n_k,
//! d_k ≠ d_v, grouped-query attention; the Llama family's RMSNorm, rotary positions and
//! gate; and a GGUF file's matrices of every ggml type multiplied and gathered from block by
//! block.

use std::sync::OnceLock;

use crate::common::*;
use attnscope::engine::cpu::attention::{merge_heads, scaled_dot_product_attention, split_heads};
use attnscope::engine::cpu::ops;
use attnscope::engine::gpu::GpuKernels;
use attnscope::engine::ops::Heads;
use attnscope::model::quant::{self, GgmlType, QuantMatrix};
use attnscope::model::rope::{RopeScaling, Rotary};
use attnscope::model::weights::{Linear, Matrix, Norm, Table};
use attnscope::model::Activation;
use attnscope::Mask;
use half::{bf16, f16};
use ndarray::{s, Array1, Array2, Array3, Axis};
use pollster::block_on;
use std::sync::Arc;

fn kernels() -> &'static GpuKernels {
    static K: OnceLock<GpuKernels> = OnceLock::new();
    K.get_or_init(|| GpuKernels::new(gpu_device().clone()))
}

/// The kernels without the `*_shared.wgsl` ones, which [`kernels`] runs where it can.
fn plain_kernels() -> &'static GpuKernels {
    static K: OnceLock<GpuKernels> = OnceLock::new();
    K.get_or_init(|| GpuKernels::new(gpu_device().clone()).without_shared_rows())
}

/// Deterministic values in [-2, 2) from a seed (a small LCG: no randomness between runs).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn matrix(r: usize, c: usize, seed: u64) -> Array2<f32> {
    Array2::from_shape_vec((r, c), values(r * c, seed)).unwrap()
}

fn diff<D: ndarray::Dimension>(a: &ndarray::Array<f32, D>, b: &ndarray::Array<f32, D>) -> f32 {
    max_abs_diff(a.view().into_dyn(), b.view().into_dyn())
}

/// A device with subgroups of 8 or more lanes (lavapipe has 8) runs the `*_shared.wgsl` kernels:
/// their check at compile time must pass there, not quietly fall back.
#[test]
fn the_shared_rows_kernel_is_used_where_the_device_has_subgroups_of_eight() {
    assert_eq!(kernels().shares_rows(), gpu_device().shares_rows());
    assert!(!plain_kernels().shares_rows());
}

#[test]
fn matmul_bias_at_odd_sizes() {
    for kernels in [kernels(), plain_kernels()] {
        matmul_bias_at_odd_sizes_on(kernels);
    }
}

fn matmul_bias_at_odd_sizes_on(kernels: &GpuKernels) {
    let shared = kernels.shares_rows();
    for (m, k, n) in [
        (1, 24, 40),
        (7, 24, 72),
        (33, 384, 1152),
        (512, 40, 24),
        (5, 1, 3),
        (17, 17, 17),
    ] {
        let l = Linear::new(matrix(n, k, 1), Array1::from(values(n, 2)));
        let x = matrix(m, k, 3);
        let gpu = block_on(kernels.linear(x.view(), &l, None)).unwrap();
        let d = diff(&gpu, &ops::linear(x.view(), &l));
        assert!(
            d < 1e-4 * (k as f32).sqrt(),
            "({m}×{k})·({n}×{k})ᵀ differs by {d} (shared rows: {shared})"
        );
    }
    let l = Linear::new(matrix(4, 3, 1), Array1::zeros(4));
    assert!(block_on(kernels.linear(matrix(2, 5, 1).view(), &l, None)).is_err());
}

/// The activations run fused into the matmul's epilogue: through an identity layer (`x·Iᵀ + 0`
/// is exact) they are compared alone.
#[test]
fn activations_match_the_cpu() {
    for (act, f) in [
        (Activation::Gelu, ops::gelu as fn(f32) -> f32),
        (Activation::GeluTanh, ops::gelu_tanh),
        (Activation::Relu, |v: f32| v.max(0.0)),
        (Activation::Silu, ops::silu),
    ] {
        for (r, c) in [(1, 1), (7, 33), (33, 1536)] {
            let x = matrix(r, c, 7) * 3.0;
            let identity = Linear::new(Array2::eye(c), Array1::zeros(c));
            let gpu = block_on(kernels().linear(x.view(), &identity, Some(act))).unwrap();
            let d = diff(&gpu, &x.mapv(f));
            assert!(d < 1e-6, "{act:?} {r}×{c} differs by {d}");
        }
    }
}

#[test]
fn add_layernorm_in_both_forms() {
    for (rows, d) in [(1, 24), (7, 7), (33, 384), (512, 100)] {
        let ln = Norm::new(
            Array1::from(values(d, 4)),
            Array1::from(values(d, 5)),
            1e-12,
        );
        let (a, b) = (matrix(rows, d, 8), matrix(rows, d, 9));
        let (sum, norm) = block_on(kernels().add_layernorm(a.view(), Some(b.view()), &ln)).unwrap();
        let want_sum = &a + &b;
        assert!(diff(&sum, &want_sum) < 1e-6);
        let dn = diff(&norm, &ops::norm(want_sum.view(), &ln));
        assert!(dn < 1e-4, "LN(a + b) {rows}×{d} differs by {dn}");
        let (_, norm_a) = block_on(kernels().add_layernorm(a.view(), None, &ln)).unwrap();
        let da = diff(&norm_a, &ops::norm(a.view(), &ln));
        assert!(da < 1e-4, "LN(a) {rows}×{d} differs by {da}");
    }
}

/// RMSNorm through the same kernel (its `kind` flag): no mean subtracted, no bias.
#[test]
fn rms_norm_in_both_forms() {
    for (rows, d) in [(1, 24), (7, 7), (33, 256), (512, 100)] {
        let ln = Norm::rms(Array1::from(values(d, 4)), 1e-5);
        // off-centre rows, where LayerNorm and RMSNorm differ most
        let (a, b) = (matrix(rows, d, 8) + 1.5, matrix(rows, d, 9));
        let (sum, norm) = block_on(kernels().add_layernorm(a.view(), Some(b.view()), &ln)).unwrap();
        let want_sum = &a + &b;
        assert!(diff(&sum, &want_sum) < 1e-6);
        let dn = diff(&norm, &ops::norm(want_sum.view(), &ln));
        assert!(dn < 1e-5, "RMS(a + b) {rows}×{d} differs by {dn}");
        let (_, norm_a) = block_on(kernels().add_layernorm(a.view(), None, &ln)).unwrap();
        let da = diff(&norm_a, &ops::norm(a.view(), &ln));
        assert!(da < 1e-5, "RMS(a) {rows}×{d} differs by {da}");
    }
}

/// QK-norm: each head of Q (or K) read in place from a fused matrix, normed on its own, against
/// the CPU's `norm_heads` of the same columns; heads of odd and wide sizes, the view at an
/// offset.
#[test]
fn a_norm_of_each_head_matches_the_cpu() {
    for (rows, heads, d, from, extra) in [
        (1, 1, 4, 0, 0),
        (7, 4, 48, 0, 96),
        (33, 3, 7, 21, 14),
        (65, 2, 256, 512, 0),
    ] {
        let c = from + heads * d + extra;
        let x = matrix(rows, c, 41) * 2.0 + 0.3;
        let ln = Norm::rms(Array1::from(values(d, 5)), 1e-6);
        let gpu = block_on(kernels().norm_heads(x.view(), from, heads, &ln)).unwrap();
        let cols = x.slice(ndarray::s![.., from..from + heads * d]);
        let want = ops::norm_heads(cols, heads, &ln).unwrap();
        let dn = diff(&gpu, &want);
        assert!(dn < 1e-5, "{rows}×{heads}·{d} from {from}: differs by {dn}");
        // each head as a row of its own through the plain norm
        for h in 0..heads {
            let head = cols.slice(ndarray::s![.., h * d..(h + 1) * d]);
            let alone = ops::norm(head, &ln);
            assert!(
                diff(
                    &want.slice(ndarray::s![.., h * d..(h + 1) * d]).to_owned(),
                    &alone
                ) < 1e-6
            );
        }
    }
    let ln = Norm::rms(Array1::from(values(4, 5)), 1e-6);
    assert!(block_on(kernels().norm_heads(matrix(2, 7, 1).view(), 0, 2, &ln)).is_err());
    assert!(ops::norm_heads(matrix(2, 7, 1).view(), 2, &ln).is_err());
}

/// Rotary positions against the CPU's `rotate`, up to the last position a model may have
/// (`MAX_POSITIONS`), where the angle is largest: the kernel's own cosine and sine; and each
/// `rope_type`'s frequencies, YaRN's scaled cosines and sines among them.
#[test]
fn rotary_positions_match_the_cpu() {
    let yarn = RopeScaling::Yarn {
        factor: 4.0,
        ramp: (3.0, 20.0),
        attention_factor: 1.1386,
    };
    let llama3 = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 64.0,
    };
    for (rows, heads, d, theta, scaling) in [
        (1, 1, 2, 10000.0, RopeScaling::Default),
        (7, 4, 48, 100000.0, RopeScaling::Default),
        (33, 3, 64, 10000.0, RopeScaling::Default),
        (130, 2, 128, 1000000.0, RopeScaling::Default),
        (33, 3, 64, 10000.0, RopeScaling::Linear { factor: 2.0 }),
        (33, 3, 64, 500000.0, llama3),
        (130, 2, 128, 10000.0, yarn),
    ] {
        let rope = Rotary {
            theta,
            head_dim: d,
            scaling,
        };
        let x = matrix(rows, heads * d, 21) * 3.0;
        // early positions, and late ones up to the largest
        let positions: Vec<u32> = (0..rows as u32)
            .map(|r| if r % 2 == 0 { r } else { 8191 - r * 61 })
            .collect();
        let gpu = block_on(kernels().rotate(x.view(), heads, &rope, &positions)).unwrap();
        let want = ops::rotate(x.view(), heads, &rope, &positions);
        let d_max = diff(&gpu, &want);
        eprintln!("rotate {rows}×{heads}·{d} θ={theta} {scaling:?}: {d_max:.2e}");
        assert!(
            d_max < 1e-5,
            "{rows}×{heads}·{d} θ={theta} {scaling:?}: differs by {d_max}"
        );
    }
    let rope = Rotary {
        theta: 10000.0,
        head_dim: 4,
        scaling: RopeScaling::Default,
    };
    let odd = block_on(kernels().rotate(matrix(2, 12, 1).view(), 2, &rope, &[0, 1]));
    assert!(odd.is_err(), "12 columns are not 2 heads of 4");
}

#[test]
fn gate_matches_the_cpu() {
    for act in [Activation::Silu, Activation::Gelu, Activation::GeluTanh] {
        for (rows, f) in [(1, 1), (7, 33), (33, 256), (70, 1000)] {
            let (g, u) = (matrix(rows, f, 31) * 3.0, matrix(rows, f, 32));
            let gpu = block_on(kernels().gate(g.view(), u.view(), act)).unwrap();
            let want = ops::gate(g.view(), u.view(), act);
            // within 1e-6 of each value's size (the products reach 12)
            let worst = gpu
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
                .fold(0.0, f32::max);
            assert!(
                worst < 1e-6,
                "{act:?} {rows}×{f} differs by {worst} (relative)"
            );
        }
    }
}

#[test]
fn soft_cap_matches_the_cpu() {
    for (rows, c) in [(1, 1), (3, 70), (2, 4099)] {
        // logits of every size, the tails far past the cap, and the extremes tanh must not
        // overflow at
        let mut x = matrix(rows, c, 33) * 40.0;
        x[[0, 0]] = 3e38;
        if c > 2 {
            x[[rows - 1, 1]] = -3e38;
            x[[rows - 1, 2]] = 1e-30;
        }
        for cap in [0.5, 2.0, 30.0] {
            let gpu = block_on(kernels().soft_cap(x.view(), cap)).unwrap();
            let want = ops::soft_capped(x.view(), cap);
            for ((at, a), b) in gpu.indexed_iter().zip(&want) {
                assert!(
                    (a - b).abs() <= 1e-6 * cap && a.abs() <= cap,
                    "cap {cap}, {rows}×{c} at {at:?}: GPU {a}, CPU {b}, from {}",
                    x[at]
                );
            }
        }
    }
}

/// Each key/value head's columns repeated for the `group` query heads that read it (HF's
/// `repeat_kv`): grouped-query attention as multi-head attention.
///
/// # Shapes
/// * `x`: `(B, n, H_kv·d)` → `(B, n, H_kv·group·d)`
fn repeat_kv(x: &Array3<f32>, kv: usize, group: usize) -> Array3<f32> {
    let (b, n, cols) = x.dim();
    let d = cols / kv;
    Array3::from_shape_fn((b, n, kv * group * d), |(bi, i, c)| {
        let (h, j) = (c / d, c % d);
        x[[bi, i, (h / group) * d + j]]
    })
}

/// The CPU reference: per item and head, SDPA on the split heads, then the merge.
fn cpu_attention(
    q: &Array3<f32>,
    k: &Array3<f32>,
    v: &Array3<f32>,
    heads: usize,
    mask: &Mask,
) -> (Array3<f32>, Array3<f32>) {
    let (b, n_q, _) = q.dim();
    let n_k = k.dim().1;
    let mut probs = Array3::zeros((b * heads, n_q, n_k));
    let mut ctx = Array3::zeros((b, n_q, v.dim().2));
    for bi in 0..b {
        let (qh, kh, vh) = (
            split_heads(q.index_axis(Axis(0), bi), heads).unwrap(), // (H, n_q, d_k)
            split_heads(k.index_axis(Axis(0), bi), heads).unwrap(),
            split_heads(v.index_axis(Axis(0), bi), heads).unwrap(), // (H, n_k, d_v)
        );
        let mut out = Array3::zeros((heads, n_q, vh.dim().2));
        for h in 0..heads {
            let a = scaled_dot_product_attention(
                qh.index_axis(Axis(0), h),
                kh.index_axis(Axis(0), h),
                vh.index_axis(Axis(0), h),
                Some(mask.item(bi)),
            )
            .unwrap();
            probs
                .index_axis_mut(Axis(0), bi * heads + h)
                .assign(&a.probs);
            out.index_axis_mut(Axis(0), h).assign(&a.output);
        }
        ctx.index_axis_mut(Axis(0), bi)
            .assign(&merge_heads(out.view()));
    }
    (probs, ctx)
}

#[test]
fn attention_with_n_q_not_n_k_and_d_k_not_d_v() {
    for kernels in [kernels(), plain_kernels()] {
        attention_on(kernels);
    }
}

fn attention_on(kernels: &GpuKernels) {
    let shared = kernels.shares_rows();
    // (B, n_q, n_k, H, d_k, d_v); n_k and d_v multiples of 4 read V as vec4s along n
    for (b, n_q, n_k, h, d_k, d_v) in [
        (2, 3, 5, 2, 4, 6),
        (1, 1, 33, 3, 8, 8),
        (3, 7, 1, 1, 5, 3),
        (1, 512, 512, 2, 16, 8),
        (2, 33, 7, 4, 3, 7),
        (2, 70, 36, 3, 8, 12),
        (1, 20, 68, 2, 32, 32),
    ] {
        let q = Array3::from_shape_vec((b, n_q, h * d_k), values(b * n_q * h * d_k, 11)).unwrap();
        let k = Array3::from_shape_vec((b, n_k, h * d_k), values(b * n_k * h * d_k, 12)).unwrap();
        let v = Array3::from_shape_vec((b, n_k, h * d_v), values(b * n_k * h * d_v, 13)).unwrap();
        // a scattered pattern that differs per item and row, every row keeping key 0
        let mask = Mask::explicit(Array3::from_shape_fn((b, n_q, n_k), |(bi, i, j)| {
            j == 0 || (3 * j + i + bi) % 4 != 0
        }));
        let gpu = block_on(kernels.attention(q.view(), k.view(), v.view(), Heads::all(h), &mask))
            .unwrap();
        let (probs, ctx) = cpu_attention(&q, &k, &v, h, &mask);
        let gp = gpu
            .probs
            .clone()
            .into_shape_with_order((b * h, n_q, n_k))
            .unwrap();
        let (dp, dc) = (diff(&gp, &probs), diff(&gpu.context, &ctx));
        eprintln!(
            "B={b} n_q={n_q} n_k={n_k} H={h} d_k={d_k} d_v={d_v} (shared rows: {shared}): probs {dp:.2e}, context {dc:.2e}"
        );
        assert!(
            dp <= ATTENTION_TOL && dc <= 1e-4,
            "probs {dp}, context {dc}"
        );
        for ((bi, _, i, j), p) in gpu.probs.indexed_iter() {
            if !mask.0[[bi, i, j]] {
                assert_eq!(*p, 0.0);
            }
        }
        // the scores are QKᵀ/√d_k before the mask
        let s00: f32 = q
            .slice(s![0, 0, ..d_k])
            .iter()
            .zip(k.slice(s![0, 0, ..d_k]))
            .map(|(a, b)| a * b)
            .sum::<f32>()
            / (d_k as f32).sqrt();
        assert!((gpu.scores[[0, 0, 0, 0]] - s00).abs() < 1e-4);
    }
    let q = Array3::<f32>::zeros((1, 2, 4));
    let bad_mask = Mask::none(1, 2, 2);
    assert!(block_on(kernels.attention(
        q.view(),
        Array3::zeros((1, 3, 4)).view(),
        Array3::zeros((1, 3, 4)).view(),
        Heads::all(2),
        &bad_mask
    ))
    .is_err());
}

/// Grouped-query attention: query head h reads key/value head h / (H / H_kv), as multi-head
/// attention over the key/value heads repeated; on both sets of kernels, with d_k a multiple of
/// 4 (the `vec4` and shared forms) and not.
#[test]
fn grouped_query_attention_reads_each_groups_key_value_head() {
    for kernels in [kernels(), plain_kernels()] {
        let shared = kernels.shares_rows();
        // (B, n_q, n_k, H, H_kv, d_k, d_v)
        for (b, n_q, n_k, h, kv, d_k, d_v) in [
            (2, 9, 9, 4, 2, 48, 48),
            (1, 1, 37, 8, 2, 16, 16),
            (2, 7, 5, 6, 3, 5, 7),
            (1, 70, 70, 4, 1, 32, 32),
        ] {
            let q =
                Array3::from_shape_vec((b, n_q, h * d_k), values(b * n_q * h * d_k, 41)).unwrap();
            let k =
                Array3::from_shape_vec((b, n_k, kv * d_k), values(b * n_k * kv * d_k, 42)).unwrap();
            let v =
                Array3::from_shape_vec((b, n_k, kv * d_v), values(b * n_k * kv * d_v, 43)).unwrap();
            let mask = Mask::explicit(Array3::from_shape_fn((b, n_q, n_k), |(bi, i, j)| {
                j == 0 || (3 * j + i + bi) % 4 != 0
            }));
            let heads = Heads {
                query: h,
                key_value: kv,
            };
            let gpu =
                block_on(kernels.attention(q.view(), k.view(), v.view(), heads, &mask)).unwrap();
            let group = h / kv;
            let (probs, ctx) = cpu_attention(
                &q,
                &repeat_kv(&k, kv, group),
                &repeat_kv(&v, kv, group),
                h,
                &mask,
            );
            let gp = gpu
                .probs
                .clone()
                .into_shape_with_order((b * h, n_q, n_k))
                .unwrap();
            let (dp, dc) = (diff(&gp, &probs), diff(&gpu.context, &ctx));
            eprintln!(
                "GQA B={b} n_q={n_q} n_k={n_k} H={h} H_kv={kv} d_k={d_k} d_v={d_v} (shared rows: \
                 {shared}): probs {dp:.2e}, context {dc:.2e}"
            );
            assert!(dp <= 1e-5 && dc <= 1e-5, "probs {dp}, context {dc}");
        }
    }
    // query heads that do not fall into equal groups
    let q = Array3::<f32>::zeros((1, 2, 12));
    let kv = Array3::<f32>::zeros((1, 2, 8));
    let heads = Heads {
        query: 3,
        key_value: 2,
    };
    let mask = Mask::none(1, 2, 2);
    assert!(block_on(kernels().attention(q.view(), kv.view(), kv.view(), heads, &mask)).is_err());
}

/// `rows × cols` random values of `ty` (ggml's blocks of random bytes), each block's f16 scales
/// set to small finite values, one block in five's below f16's smallest normal (6.1e-5), where a
/// GPU's own f16 conversion may flush them to zero.
fn quant_matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> QuantMatrix {
    let n = quant::bytes_for(ty, rows, cols).unwrap();
    let mut s = seed.max(1);
    let mut b: Vec<u8> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect();
    let scales_at: &[usize] = match ty {
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => &[],
    };
    let vs = values(n / ty.block_bytes(), seed);
    for (i, block) in b.chunks_exact_mut(ty.block_bytes()).enumerate() {
        let tiny = i % 5 == 0;
        let v = vs[i];
        match ty {
            GgmlType::F32 => block.copy_from_slice(&v.to_le_bytes()),
            GgmlType::F16 => {
                let v = if tiny { v * 1e-5 } else { v };
                block.copy_from_slice(&f16::from_f32(v).to_le_bytes())
            }
            GgmlType::BF16 => block.copy_from_slice(&bf16::from_f32(v).to_le_bytes()),
            _ => {}
        }
        for (k, &at) in scales_at.iter().enumerate() {
            let d = 0.01 + 0.001 * ((i * 7 + k * 3) % 13) as f32;
            let d = if tiny { d * 3e-3 } else { d };
            block[at..at + 2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        }
    }
    QuantMatrix::new(ty, rows, cols, Arc::new(b), 0).unwrap()
}

/// `got` against `want` element by element (llm.c's `validate_result`): within `tol` times
/// the element's `Σ|x·w|` (the size of what was summed, where f32's rounding scales), the
/// first element beyond it named by its index. The largest difference.
fn validate(
    what: &str,
    got: &Array2<f32>,
    want: &Array2<f32>,
    size: &Array2<f32>,
    tol: f32,
) -> f32 {
    assert_eq!(got.dim(), want.dim(), "{what}: shape");
    let mut worst = 0f32;
    for (((i, j), g), (w, s)) in got.indexed_iter().zip(want.iter().zip(size)) {
        let d = (g - w).abs();
        assert!(
            d <= tol * s.max(1.0),
            "{what}: element ({i}, {j}) is {g} on the GPU, {w} on the CPU (Σ|x·w| = {s})"
        );
        worst = worst.max(d);
    }
    worst
}

/// `x·Wᵀ + b` from a random matrix of every ggml type, on the GPU (`quant.wgsl`: `main_rows` for
/// up to 8 rows of x, `main` past them, partial tiles of 64 rows and columns) against the CPU's
/// product from the same blocks and against the dequantized f32 product.
#[test]
fn every_ggml_type_multiplies_block_by_block_as_on_the_cpu() {
    for ty in GgmlType::ALL {
        // K-quants: two super-blocks a row; F16 and BF16 also at a width off 32 and off 4
        let mut widths = vec![2 * ty.block_len().max(32)];
        if ty.block_len() == 1 {
            widths.push(37);
        }
        for cols in widths {
            let (n, seed) = (70, 11 + ty.code() as u64);
            let q = quant_matrix(ty, n, cols, seed);
            let w = q.dequantize();
            assert!(w.iter().all(|v| v.is_finite()), "{ty}");
            let bias = Array1::from(values(n, 5));
            let l = Linear::quantized(q.clone(), bias.clone());
            let mut line = vec![];
            for m in [1, 7, 8, 9, 70] {
                let x = matrix(m, cols, 3 + m as u64);
                let gpu = block_on(kernels().linear(x.view(), &l, None)).unwrap();
                let cpu = q.matmul_t(x.view()) + &bias;
                let f32_product = x.dot(&w.t()) + &bias;
                let size = x.abs().dot(&w.abs().t()) + bias.abs();
                let what = format!("{ty} ({m}×{cols})·({n}×{cols})ᵀ");
                let d_cpu = validate(&what, &gpu, &cpu, &size, 1e-5);
                let d_f32 = validate(&what, &gpu, &f32_product, &size, 1e-5);
                line.push(format!("{m}: {d_cpu:.1e}/{d_f32:.1e}"));
            }
            eprintln!(
                "{ty} × {cols} max |Δ| vs matmul_t / the f32 product, by rows of x: {}",
                line.join(", ")
            );
        }
    }
}

/// Q, K and V fused into one product: stacked when they share a type, else a product each into
/// its columns of the one output (a Q4_K_M file's Q6_K V beside Q4_K Q and K; an f32 layer
/// beside a quantized one).
#[test]
fn fused_layers_of_mixed_types_multiply_into_one_output() {
    let k = 256;
    let layer = |ty: GgmlType, n: usize, seed: u64| {
        Linear::quantized(
            quant_matrix(ty, n, k, seed),
            Array1::from(values(n, seed + 1)),
        )
    };
    let dense = Linear::new(matrix(24, k, 7), Array1::from(values(24, 8)));
    for (what, ls) in [
        (
            "Q4_K, Q4_K, Q4_K",
            [
                layer(GgmlType::Q4_K, 40, 1),
                layer(GgmlType::Q4_K, 24, 2),
                layer(GgmlType::Q4_K, 24, 3),
            ],
        ),
        (
            "Q4_K, Q4_K, Q6_K",
            [
                layer(GgmlType::Q4_K, 40, 1),
                layer(GgmlType::Q4_K, 24, 2),
                layer(GgmlType::Q6_K, 24, 3),
            ],
        ),
        (
            "Q8_0, F32, Q4_1",
            [
                layer(GgmlType::Q8_0, 40, 1),
                dense.clone(),
                layer(GgmlType::Q4_1, 24, 3),
            ],
        ),
    ] {
        let refs: Vec<&Linear> = ls.iter().collect();
        for m in [1, 33] {
            let x = matrix(m, k, 9);
            let gpu = block_on(kernels().fused_linear(x.view(), &refs, None)).unwrap();
            // each layer on the CPU, side by side, and the size of each sum
            let cat = |parts: Vec<Array2<f32>>| {
                let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
                ndarray::concatenate(Axis(1), &views).unwrap()
            };
            let cpu = cat(ls.iter().map(|l| ops::linear(x.view(), l)).collect());
            let size = cat(ls
                .iter()
                .map(|l| {
                    let w = match &l.weight {
                        Matrix::F32(w) => w.to_owned(),
                        Matrix::Quantized(q) => q.dequantize(),
                    };
                    x.abs().dot(&w.abs().t()) + l.bias.abs()
                })
                .collect());
            let d = validate(&format!("fused {what}, {m} rows"), &gpu, &cpu, &size, 1e-5);
            eprintln!("fused {what}, {m} rows: max |Δ| {d:.2e}");
        }
    }
}

/// An embedding lookup in a quantized table dequantizes the rows in the shader from the packed
/// blocks: the CPU's values (`Matrix::rows_of`), exactly.
#[test]
fn a_quantized_tables_rows_are_the_cpus() {
    for ty in GgmlType::ALL {
        let cols = 2 * ty.block_len().max(32);
        let t = Table::quantized(quant_matrix(ty, 70, cols, 21 + ty.code() as u64));
        let ids = [0u32, 69, 3, 3, 40, 5];
        let ids_usize: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
        let want = t.weight.rows_of(&ids_usize);
        for scale in [1.0, 2.5] {
            let got = block_on(kernels().gather(&t.scaled(scale), &ids)).unwrap();
            for ((i, j), g) in got.indexed_iter() {
                let w = want[[i, j]] * scale;
                assert!(
                    g.to_bits() == w.to_bits() || *g == w,
                    "{ty} row {} value {j} (×{scale}): {g:e} on the GPU, {w:e} on the CPU",
                    ids[i]
                );
            }
        }
    }
    let t = Table::quantized(quant_matrix(GgmlType::Q8_0, 4, 32, 1));
    assert!(
        block_on(kernels().gather(&t, &[4])).is_err(),
        "id 4 of 4 rows"
    );
}

/// A matrix larger than one binding is bound in pieces of rows (Gemma 3's 178 MB table against
/// lavapipe's 128 MiB binding): on a device held to about 16 rows a binding, a product by every
/// ggml type's 70 × k matrix (five pieces, the last short) and a lookup in its table (ids in
/// every piece, the first and last rows among them) are the CPU's.
#[test]
fn a_matrix_larger_than_one_binding_is_bound_in_pieces() {
    for ty in GgmlType::ALL {
        let cols = 2 * ty.block_len().max(32);
        let row_bytes = match ty {
            GgmlType::F32 => 4 * cols,
            _ => {
                4 * attnscope::engine::gpu::quant::Packed::row_words_at_most(
                    attnscope::engine::gpu::quant::BlockFormat::of(ty).unwrap(),
                    cols,
                )
            }
        };
        let small = GpuKernels::new(
            gpu_device()
                .clone()
                .with_binding_limit((16 * row_bytes + 64) as u64),
        );
        let (n, seed) = (70, 31 + ty.code() as u64);
        let q = quant_matrix(ty, n, cols, seed);
        let w = q.dequantize();
        let bias = Array1::from(values(n, 6));
        let l = Linear::quantized(q.clone(), bias.clone());
        for m in [1, 9] {
            let x = matrix(m, cols, 4 + m as u64);
            let gpu = block_on(small.linear(x.view(), &l, None)).unwrap();
            let cpu = q.matmul_t(x.view()) + &bias;
            let size = x.abs().dot(&w.abs().t()) + bias.abs();
            validate(
                &format!("{ty} in pieces, {m} rows"),
                &gpu,
                &cpu,
                &size,
                1e-5,
            );
        }
        let t = Table::quantized(q);
        let ids = [0u32, 69, 15, 16, 17, 40, 64, 3];
        let want = t
            .weight
            .rows_of(&ids.iter().map(|&i| i as usize).collect::<Vec<_>>());
        let got = block_on(small.gather(&t, &ids)).unwrap();
        assert_eq!(got, want, "{ty}: a table's rows from its pieces");
    }
}
