//! The matrix–vector product's inner loop for the 32-value block types, written for x86-64's
//! vector units (AVX-512, or AVX2) with F16C: the portable loop ([`super::dot_blocks`]) converts
//! each block's `f16` scales in integer operations and leaves LLVM to schedule the rest, which
//! costs it about twice the instructions of the arithmetic itself. Here a block of one weight
//! row is a 16-byte load, its integers widened and converted in registers, multiplied by `x` and
//! added into the row's lanes with the block's scale (`vcvtph2ps`) in fused multiply-adds, while
//! the next group of rows is prefetched.
//!
//! The products are the portable loop's (`d·Σ q·x + m·Σ x` per block) with the multiply-adds
//! fused, so they differ from it in the last bits only.

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
        if !super::has_kernel(ty) {
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

/// `R` weight rows of `ty` ([`super::has_kernel`]) dotted with `x`, each value
/// of `x` read once for them; `sums` holds `Σ x` of each run of 32 values of `x` (the offsets of
/// `Q4_1` multiply them).
///
/// # Shapes
/// * `w`: `R × (cols / 32 · block_bytes,)`, `x`: `(cols,)`, `sums`: `(cols / 32,)` → `(R,)`
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
    let runs = x.len() / 32;
    for w in w {
        assert!(w.len() >= runs * ty.block_bytes(), "{runs} blocks of {ty}");
    }
    assert!(sums.len() >= runs);
    // SAFETY: the caller's CPU runs `kernel`; the lengths are checked above
    unsafe {
        match ty {
            GgmlType::Q8_0 => on::<blocks::Q8_0, R>(kernel, w, x, sums),
            GgmlType::Q4_0 => on::<blocks::Q4_0, R>(kernel, w, x, sums),
            GgmlType::Q4_1 => on::<blocks::Q4_1, R>(kernel, w, x, sums),
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
    impl Block for Q8_0 {
        const TY: GgmlType = GgmlType::Q8_0;
    }
    impl Block for Q4_0 {
        const TY: GgmlType = GgmlType::Q4_0;
    }
    impl Block for Q4_1 {
        const TY: GgmlType = GgmlType::Q4_1;
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
        _ => 2,
    }
}

#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn avx512<B: Block, const R: usize>(w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    let ty = B::TY;
    let (bytes, at) = (ty.block_bytes(), values_at(ty));
    let mut acc = [_mm512_setzero_ps(); R];
    let mut offsets = [_mm_setzero_ps(); R];
    let (low, eight) = (_mm512_set1_epi32(0x0F), _mm512_set1_epi32(8));
    for (i, run) in x.as_chunks::<32>().0.iter().enumerate() {
        // SAFETY: a run is 32 values; each row holds block i's bytes (checked by `dot_rows`)
        unsafe {
            let (x0, x1) = (
                _mm512_loadu_ps(run.as_ptr()),
                _mm512_loadu_ps(run.as_ptr().add(16)),
            );
            for r in 0..R {
                let b = w[r].as_ptr().add(i * bytes);
                // the same block R rows on (the next group's: the rows lie end to end); a
                // hint, which never faults
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(R * w[r].len()) as *const i8);
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
    std::array::from_fn(|r| {
        let a = acc[r];
        let four = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
        let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
        let one = _mm_add_ss(two, _mm_movehdup_ps(two));
        _mm_cvtss_f32(one)
    })
}
