//! The matrix–vector product's inner loop for the block types common files hold (see [`reads`]),
//! written for x86-64's vector units (AVX-512, or AVX2) with F16C: the portable loops
//! ([`super::dot_blocks`], [`super::dot_q4_k`], [`super::dot_q6_k`]) convert each block's `f16`
//! scales in integer operations, unpack bits value by value and leave LLVM to schedule the rest,
//! which costs them two to three times the instructions of the arithmetic itself. Here a block
//! of one weight row is a few 16-byte loads, its integers widened, unpacked and converted in
//! registers, multiplied by `x` and added into the row's lanes with the block's scale
//! (`vcvtph2ps`) in fused multiply-adds.
//!
//! The products are the portable loops' (`d·Σ q·x + m·Σ x` per block or sub-block) with the
//! multiply-adds fused, so they differ from them in the last bits only.

use std::arch::x86_64::*;

use super::GgmlType;

/// The instruction set a [`dot_rows`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kernel {
    /// AVX-512F: a block's 32 values in two registers.
    Avx512,
    /// AVX2: in four.
    Avx2,
}

impl Kernel {
    /// The widest kernel this CPU runs for blocks of `ty`, if any (detected once).
    pub(super) fn best(ty: GgmlType) -> Option<Kernel> {
        static BEST: std::sync::OnceLock<Option<Kernel>> = std::sync::OnceLock::new();
        if !reads(ty) {
            return None;
        }
        *BEST.get_or_init(|| Kernel::available().first().copied())
    }

    /// Every kernel this CPU runs, the widest first (the tests walk them all).
    pub(super) fn available() -> Vec<Kernel> {
        let mut kernels = Vec::new();
        if is_x86_feature_detected!("f16c") && is_x86_feature_detected!("fma") {
            if is_x86_feature_detected!("avx512f") {
                kernels.push(Kernel::Avx512);
            }
            if is_x86_feature_detected!("avx2") {
                kernels.push(Kernel::Avx2);
            }
        }
        kernels
    }
}

/// Whether the kernels read blocks of `ty`: the 32-value types of `Q4_0` and `Q4_1` files and the
/// K-quants of `Q4_K_M` files (`Q5_0`, `Q4_K`, `Q6_K` beside `Q8_0`).
pub(super) fn reads(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q4_K
            | GgmlType::Q6_K
    )
}

/// `R` weight rows of `ty` ([`reads`]) dotted with `x`; `sums` holds `Σ x` of each run of 32
/// values of `x` (the offsets of `Q4_1` and the mins of `Q4_K` multiply them). The 32-value types
/// read each value of `x` once for the `R` rows; a K-quant's row of 256-value blocks takes one
/// row at a time (its `x` stays in the first-level cache).
///
/// # Shapes
/// * `w`: `R × (cols / block_len · block_bytes,)`, `x`: `(cols,)`, `sums`: `(cols / 32,)` → `(R,)`
///
/// # Safety
/// The CPU must run `kernel` (one of [`Kernel::available`]).
///
/// # Panics
/// If a row holds fewer blocks than `x` has runs of 32 values, or `ty` has no kernel.
pub(super) unsafe fn dot_rows<const R: usize>(
    kernel: Kernel,
    ty: GgmlType,
    w: [&[u8]; R],
    x: &[f32],
    sums: &[f32],
) -> [f32; R] {
    let blocks = x.len() / ty.block_len();
    for w in w {
        assert!(
            w.len() >= blocks * ty.block_bytes(),
            "{blocks} blocks of {ty}"
        );
    }
    assert!(sums.len() >= x.len() / 32);
    // SAFETY: the caller's CPU runs `kernel`; the lengths are checked above
    unsafe {
        match ty {
            GgmlType::Q8_0 => on::<blocks::Q8_0, R>(kernel, w, x, sums),
            GgmlType::Q4_0 => on::<blocks::Q4_0, R>(kernel, w, x, sums),
            GgmlType::Q4_1 => on::<blocks::Q4_1, R>(kernel, w, x, sums),
            GgmlType::Q5_0 => on::<blocks::Q5_0, R>(kernel, w, x, sums),
            GgmlType::Q4_K => w.map(|w| match kernel {
                Kernel::Avx512 => q4_k_avx512(w, x, sums),
                Kernel::Avx2 => q4_k_avx2(w, x, sums),
            }),
            GgmlType::Q6_K => w.map(|w| match kernel {
                Kernel::Avx512 => q6_k_avx512(w, x),
                Kernel::Avx2 => q6_k_avx2(w, x),
            }),
            _ => panic!("no x86 kernel reads {ty}"),
        }
    }
}

/// The 32-value block types the kernels read, one type each: a kernel is compiled once per
/// block type, so its loop tests no type.
mod blocks {
    use super::GgmlType;

    pub(super) trait Block {
        const TY: GgmlType;
    }
    pub(super) struct Q8_0;
    pub(super) struct Q4_0;
    pub(super) struct Q4_1;
    pub(super) struct Q5_0;
    impl Block for Q8_0 {
        const TY: GgmlType = GgmlType::Q8_0;
    }
    impl Block for Q4_0 {
        const TY: GgmlType = GgmlType::Q4_0;
    }
    impl Block for Q4_1 {
        const TY: GgmlType = GgmlType::Q4_1;
    }
    impl Block for Q5_0 {
        const TY: GgmlType = GgmlType::Q5_0;
    }
}
use blocks::Block;

/// [`dot_rows`] for blocks of `B` on `kernel`.
///
/// # Safety
/// As [`dot_rows`]'s, whose checks it needs.
unsafe fn on<B: Block, const R: usize>(
    kernel: Kernel,
    w: [&[u8]; R],
    x: &[f32],
    sums: &[f32],
) -> [f32; R] {
    // SAFETY: the caller's
    unsafe {
        match kernel {
            Kernel::Avx512 => avx512::<B, R>(w, x, sums),
            Kernel::Avx2 => avx2::<B, R>(w, x, sums),
        }
    }
}

/// A block's `f16` scale (and `Q4_1`'s offset) at its first bytes, in lanes 0 (and 1).
#[inline(always)]
unsafe fn scales(b: *const u8) -> __m128 {
    // SAFETY: a block holds at least 4 bytes (the caller's)
    unsafe { _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(b as *const i32))) }
}

/// Where a block's 16 bytes of values start.
fn values_at(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q4_1 => 4,
        GgmlType::Q5_0 => 6,
        _ => 2,
    }
}

/// A `Q5_0` block's 32 fifth bits (`qh`, bit `j` for value `j`), at bytes 2–5.
#[inline(always)]
unsafe fn fifth_bits(b: *const u8) -> u32 {
    // SAFETY: a `Q5_0` block is 22 bytes (the caller's)
    unsafe { std::ptr::read_unaligned(b.add(2) as *const u32) }
}

/// How far ahead of the block it reads the AVX-512 kernel asks for the matrix's bytes. A decoding
/// step reads every weight once (Gemma 3's 262,144 × 640 `Q8_0` LM head: 178 MB), so the kernel
/// waits on memory: measured on an AVX-512 core (`docs/speed.md`, 2026-12-02), Gemma 3 270M's
/// one-thread decoding was 20–23 tokens/s with no hint, 39–43 with the next group's block (R rows
/// on, 2.7 kB for that head) and 52–56 at 16 KiB.
const AHEAD: usize = 16 << 10;

#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn avx512<B: Block, const R: usize>(w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    let ty = B::TY;
    let (bytes, at) = (ty.block_bytes(), values_at(ty));
    let mut acc = [_mm512_setzero_ps(); R];
    let mut offsets = [_mm_setzero_ps(); R];
    let (low, eight, sixteen) = (
        _mm512_set1_epi32(0x0F),
        _mm512_set1_epi32(8),
        _mm512_set1_epi32(16),
    );
    for (i, run) in x.as_chunks::<32>().0.iter().enumerate() {
        // SAFETY: a run is 32 values; each row holds block i's bytes (checked by `dot_rows`)
        unsafe {
            let (x0, x1) = (
                _mm512_loadu_ps(run.as_ptr()),
                _mm512_loadu_ps(run.as_ptr().add(16)),
            );
            for r in 0..R {
                let b = w[r].as_ptr().add(i * bytes);
                // the bytes AHEAD on (the rows lie end to end: a later group's); a hint,
                // which never faults
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(AHEAD) as *const i8);
                let q = _mm_loadu_si128(b.add(at) as *const __m128i);
                // values 0..16 and 16..32 of the block, as 16 integers each
                let (q0, q1) = if ty == GgmlType::Q8_0 {
                    let q1 = _mm_loadu_si128(b.add(at + 16) as *const __m128i);
                    (_mm512_cvtepi8_epi32(q), _mm512_cvtepi8_epi32(q1))
                } else {
                    // each byte: value j in its low nibble, value j + 16 in its high one
                    let q = _mm512_cvtepu8_epi32(q);
                    let (q0, q1) = (_mm512_and_si512(q, low), _mm512_srli_epi32::<4>(q));
                    if ty == GgmlType::Q4_0 {
                        (_mm512_sub_epi32(q0, eight), _mm512_sub_epi32(q1, eight))
                    } else if ty == GgmlType::Q5_0 {
                        // value j topped by bit j of qh (16 where it is set), less 16
                        let qh = fifth_bits(b);
                        let (q0, q1) = (
                            _mm512_mask_add_epi32(q0, qh as u16, q0, sixteen),
                            _mm512_mask_add_epi32(q1, (qh >> 16) as u16, q1, sixteen),
                        );
                        (_mm512_sub_epi32(q0, sixteen), _mm512_sub_epi32(q1, sixteen))
                    } else {
                        (q0, q1)
                    }
                };
                let t = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(q1),
                    x1,
                    _mm512_mul_ps(_mm512_cvtepi32_ps(q0), x0),
                );
                let s = scales(b);
                acc[r] = _mm512_fmadd_ps(t, _mm512_broadcastss_ps(s), acc[r]);
                if ty == GgmlType::Q4_1 {
                    // lane 1: m · Σ x
                    offsets[r] = _mm_fmadd_ps(s, _mm_set_ps(0.0, 0.0, sums[i], 0.0), offsets[r]);
                }
            }
        }
    }
    std::array::from_fn(|r| {
        _mm512_reduce_add_ps(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(offsets[r]))
    })
}

#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn avx2<B: Block, const R: usize>(w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    let ty = B::TY;
    let (bytes, at) = (ty.block_bytes(), values_at(ty));
    // a row's lanes; `Q4_1`'s offsets go into its lane 0 (sixteen registers hold the four rows
    // and the run of `x` with no spill, where a register of offsets per row did not)
    let mut acc = [_mm256_setzero_ps(); R];
    let (low, eight) = (_mm256_set1_epi32(0x0F), _mm256_set1_epi32(8));
    let (one, sixteen) = (_mm256_set1_epi32(1), _mm256_set1_epi32(16));
    // `Q5_0`: where the fifth bits of values 8g..8g + 8 stand in `qh`
    let bits = [0, 8, 16, 24]
        .map(|g| _mm256_setr_epi32(g, g + 1, g + 2, g + 3, g + 4, g + 5, g + 6, g + 7));
    for (i, run) in x.as_chunks::<32>().0.iter().enumerate() {
        // SAFETY: as `avx512`'s
        unsafe {
            let p = run.as_ptr();
            let xs = [0, 8, 16, 24].map(|k| _mm256_loadu_ps(p.add(k)));
            // Σ x of the run in lane 0, the others 0
            let sum = _mm256_setr_ps(sums[i], 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
            for r in 0..R {
                let b = w[r].as_ptr().add(i * bytes);
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(R * w[r].len()) as *const i8);
                // values 0..8, 8..16, 16..24 and 24..32 of the block, 8 integers each
                let q: [__m256i; 4] = if ty == GgmlType::Q8_0 {
                    [0, 8, 16, 24].map(|k| {
                        _mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(at + k) as *const __m128i))
                    })
                } else {
                    let h = [0, 8].map(|k| {
                        _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(at + k) as *const __m128i))
                    });
                    let q = [
                        _mm256_and_si256(h[0], low),
                        _mm256_and_si256(h[1], low),
                        _mm256_srli_epi32::<4>(h[0]),
                        _mm256_srli_epi32::<4>(h[1]),
                    ];
                    if ty == GgmlType::Q4_0 {
                        q.map(|q| _mm256_sub_epi32(q, eight))
                    } else if ty == GgmlType::Q5_0 {
                        // value 8g + l topped by bit 8g + l of qh, less 16
                        let qh = _mm256_set1_epi32(fifth_bits(b) as i32);
                        std::array::from_fn(|g| {
                            let bit = _mm256_and_si256(_mm256_srlv_epi32(qh, bits[g]), one);
                            _mm256_sub_epi32(
                                _mm256_or_si256(q[g], _mm256_slli_epi32::<4>(bit)),
                                sixteen,
                            )
                        })
                    } else {
                        q
                    }
                };
                let f = q.map(|q| _mm256_cvtepi32_ps(q));
                let t = _mm256_fmadd_ps(
                    f[3],
                    xs[3],
                    _mm256_fmadd_ps(
                        f[2],
                        xs[2],
                        _mm256_fmadd_ps(f[1], xs[1], _mm256_mul_ps(f[0], xs[0])),
                    ),
                );
                let s = scales(b);
                acc[r] = _mm256_fmadd_ps(t, _mm256_broadcastss_ps(s), acc[r]);
                if ty == GgmlType::Q4_1 {
                    // lane 0: m · Σ x
                    let m = _mm256_broadcastss_ps(_mm_movehdup_ps(s));
                    acc[r] = _mm256_fmadd_ps(m, sum, acc[r]);
                }
            }
        }
    }
    acc.map(|a| sum8(a))
}

/// `Σ` of a register's 8 lanes.
#[target_feature(enable = "avx2")]
fn sum8(a: __m256) -> f32 {
    let four = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
    let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)))
}

/// A `Q4_K` block's 8 sub-blocks' `d·sc` and `dmin·m` (its scales `d` and `dmin` at bytes 0–3,
/// [`super::scale_min_k4`] of bytes 4–15).
#[inline(always)]
fn q4_k_scales(b: &[u8; 144]) -> ([f32; 8], [f32; 8]) {
    let (d, dmin) = (super::half_at(b, 0), super::half_at(b, 2));
    let mut scales = ([0.0; 8], [0.0; 8]);
    for j in 0..8 {
        let (sc, m) = super::scale_min_k4(j, &b[4..16]);
        scales.0[j] = d * f32::from(sc);
        scales.1[j] = dmin * f32::from(m);
    }
    scales
}

/// One `Q4_K` row dotted with `x`: each run of 64 values is 32 bytes, their low nibbles sub-block
/// `2h` (values `j` and `j + 16` of it from bytes `j` and `j + 16`), their high ones `2h + 1`.
///
/// # Safety
/// The CPU must run AVX-512F; `w` holds `x.len() / 256` blocks, `sums` `x.len() / 32` values.
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn q4_k_avx512(w: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    let mut acc = _mm512_setzero_ps();
    let mut offsets = 0.0;
    let low = _mm512_set1_epi32(0x0F);
    let runs = x.as_chunks::<256>().0.iter().zip(sums.as_chunks::<8>().0);
    for (b, (x, s)) in w.as_chunks::<144>().0.iter().zip(runs) {
        let (dsc, dm) = q4_k_scales(b);
        for h in 0..4 {
            // SAFETY: a block's run h is bytes 16 + 32h.. of its 144; x's 64 values at 64h
            unsafe {
                let q = b.as_ptr().add(16 + 32 * h);
                let (qa, qb) = (
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(q as *const __m128i)),
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(q.add(16) as *const __m128i)),
                );
                let p = x.as_ptr().add(64 * h);
                for k in 0..2 {
                    let (q0, q1) = if k == 0 {
                        (_mm512_and_si512(qa, low), _mm512_and_si512(qb, low))
                    } else {
                        (_mm512_srli_epi32::<4>(qa), _mm512_srli_epi32::<4>(qb))
                    };
                    let (x0, x1) = (
                        _mm512_loadu_ps(p.add(32 * k)),
                        _mm512_loadu_ps(p.add(32 * k + 16)),
                    );
                    let t = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(q1),
                        x1,
                        _mm512_mul_ps(_mm512_cvtepi32_ps(q0), x0),
                    );
                    acc = _mm512_fmadd_ps(t, _mm512_set1_ps(dsc[2 * h + k]), acc);
                }
            }
        }
        for j in 0..8 {
            offsets -= dm[j] * s[j];
        }
    }
    _mm512_reduce_add_ps(acc) + offsets
}

/// [`q4_k_avx512`] in AVX2's 8 lanes.
///
/// # Safety
/// The CPU must run AVX2 and FMA; the lengths as [`q4_k_avx512`]'s.
#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn q4_k_avx2(w: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut offsets = 0.0;
    let low = _mm256_set1_epi32(0x0F);
    let runs = x.as_chunks::<256>().0.iter().zip(sums.as_chunks::<8>().0);
    for (b, (x, s)) in w.as_chunks::<144>().0.iter().zip(runs) {
        let (dsc, dm) = q4_k_scales(b);
        for h in 0..4 {
            // SAFETY: as `q4_k_avx512`'s
            unsafe {
                let q = b.as_ptr().add(16 + 32 * h);
                let qs = [0, 8, 16, 24]
                    .map(|k| _mm256_cvtepu8_epi32(_mm_loadl_epi64(q.add(k) as *const __m128i)));
                let p = x.as_ptr().add(64 * h);
                for k in 0..2 {
                    let t = (0..4).fold(_mm256_setzero_ps(), |t, e| {
                        let q = if k == 0 {
                            _mm256_and_si256(qs[e], low)
                        } else {
                            _mm256_srli_epi32::<4>(qs[e])
                        };
                        let x = _mm256_loadu_ps(p.add(32 * k + 8 * e));
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), x, t)
                    });
                    acc = _mm256_fmadd_ps(t, _mm256_set1_ps(dsc[2 * h + k]), acc);
                }
            }
        }
        for j in 0..8 {
            offsets -= dm[j] * s[j];
        }
    }
    sum8(acc) + offsets
}

/// One `Q6_K` row dotted with `x`: in each half of 128 values, value `l + 32k` takes its low 4
/// bits from `ql[l + 32(k & 1)]` (the high nibble for `k ≥ 2`) and its high 2 from bits `2k` of
/// `qh[l]`, less 32; each run of 16 values has its `i8` scale.
///
/// # Safety
/// The CPU must run AVX-512F; `w` holds `x.len() / 256` blocks.
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn q6_k_avx512(w: &[u8], x: &[f32]) -> f32 {
    let mut acc = _mm512_setzero_ps();
    let (low, top, thirty_two) = (
        _mm512_set1_epi32(0x0F),
        _mm512_set1_epi32(0x30),
        _mm512_set1_epi32(32),
    );
    for (b, x) in w.as_chunks::<210>().0.iter().zip(x.as_chunks::<256>().0) {
        let d = super::half_at(b, 208);
        for half in 0..2 {
            for run in 0..2 {
                // SAFETY: ql, qh and the scales lie in the block's 210 bytes; x's 16 values
                // at 128·half + 32k + 16·run
                unsafe {
                    let l = 16 * run;
                    let load = |at: usize| {
                        _mm512_cvtepu8_epi32(_mm_loadu_si128(b.as_ptr().add(at) as *const __m128i))
                    };
                    let ql = [load(64 * half + l), load(64 * half + 32 + l)];
                    let qh = load(128 + 32 * half + l);
                    for k in 0..4 {
                        let low = if k < 2 {
                            _mm512_and_si512(ql[k & 1], low)
                        } else {
                            _mm512_srli_epi32::<4>(ql[k & 1])
                        };
                        // bits 2k, 2k + 1 of qh to bits 4, 5
                        let high = match k {
                            0 => _mm512_slli_epi32::<4>(qh),
                            1 => _mm512_slli_epi32::<2>(qh),
                            2 => qh,
                            _ => _mm512_srli_epi32::<2>(qh),
                        };
                        let q = _mm512_sub_epi32(
                            _mm512_or_si512(low, _mm512_and_si512(high, top)),
                            thirty_two,
                        );
                        let xv = _mm512_loadu_ps(x.as_ptr().add(128 * half + 32 * k + l));
                        let t = _mm512_mul_ps(_mm512_cvtepi32_ps(q), xv);
                        let sc = f32::from(b[192 + 8 * half + 2 * k + run] as i8);
                        acc = _mm512_fmadd_ps(t, _mm512_set1_ps(d * sc), acc);
                    }
                }
            }
        }
    }
    _mm512_reduce_add_ps(acc)
}

/// [`q6_k_avx512`] in AVX2's 8 lanes.
///
/// # Safety
/// The CPU must run AVX2 and FMA; `w` holds `x.len() / 256` blocks.
#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn q6_k_avx2(w: &[u8], x: &[f32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let (low, top, thirty_two) = (
        _mm256_set1_epi32(0x0F),
        _mm256_set1_epi32(0x30),
        _mm256_set1_epi32(32),
    );
    for (b, x) in w.as_chunks::<210>().0.iter().zip(x.as_chunks::<256>().0) {
        let d = super::half_at(b, 208);
        for half in 0..2 {
            for run in 0..2 {
                // SAFETY: as `q6_k_avx512`'s
                unsafe {
                    let l = 16 * run;
                    let load = |at: usize| {
                        [0, 8].map(|e| {
                            _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                b.as_ptr().add(at + e) as *const __m128i
                            ))
                        })
                    };
                    let ql = [load(64 * half + l), load(64 * half + 32 + l)];
                    let qh = load(128 + 32 * half + l);
                    for k in 0..4 {
                        let t = (0..2).fold(_mm256_setzero_ps(), |t, e| {
                            let low = if k < 2 {
                                _mm256_and_si256(ql[k & 1][e], low)
                            } else {
                                _mm256_srli_epi32::<4>(ql[k & 1][e])
                            };
                            let high = match k {
                                0 => _mm256_slli_epi32::<4>(qh[e]),
                                1 => _mm256_slli_epi32::<2>(qh[e]),
                                2 => qh[e],
                                _ => _mm256_srli_epi32::<2>(qh[e]),
                            };
                            let q = _mm256_sub_epi32(
                                _mm256_or_si256(low, _mm256_and_si256(high, top)),
                                thirty_two,
                            );
                            let xv =
                                _mm256_loadu_ps(x.as_ptr().add(128 * half + 32 * k + l + 8 * e));
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), xv, t)
                        });
                        let sc = f32::from(b[192 + 8 * half + 2 * k + run] as i8);
                        acc = _mm256_fmadd_ps(t, _mm256_set1_ps(d * sc), acc);
                    }
                }
            }
        }
    }
    sum8(acc)
}
