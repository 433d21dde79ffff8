//! The matrix–vector product's inner loop for the 32-value block types, written for AVX-512
//! with F16C: the portable loop ([`super::dot_blocks`]) converts each block's `f16` scales in
//! integer operations and leaves LLVM to schedule the rest, which costs it three times the
//! instructions of the arithmetic itself. Here a block of one weight row is a 16-byte load,
//! its integers widened and converted in two registers, multiplied by `x` and added into the
//! row's lanes with the block's scale (`vcvtph2ps`) in two fused multiply-adds.
//!
//! The products are the same as the portable loop's (`d·Σ q·x + m·Σ x` per block) with the
//! multiply-adds fused, so they differ from it in the last bits only.

use std::arch::x86_64::*;

use super::GgmlType;

/// Whether [`dot_rows`] takes blocks of `ty`.
pub(super) fn takes(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1)
}

/// Whether this CPU runs [`dot_rows`].
pub(super) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("f16c")
            && is_x86_feature_detected!("fma")
    })
}

/// `R` weight rows of `ty` (see [`takes`]) dotted with `x`, each value of `x` read once for
/// them; `sums` holds `Σ x` of each run of 32 values of `x` (the offsets of `Q4_1` multiply
/// them).
///
/// # Shapes
/// * `w`: `R × (cols / 32 · block_bytes,)`, `x`: `(cols,)`, `sums`: `(cols / 32,)` → `(R,)`
///
/// # Safety
/// The CPU must run AVX-512F, F16C and FMA ([`available`]).
///
/// # Panics
/// If a row holds fewer blocks than `x` has runs of 32 values.
#[target_feature(enable = "avx512f,f16c,fma")]
pub(super) unsafe fn dot_rows<const R: usize>(
    ty: GgmlType,
    w: [&[u8]; R],
    x: &[f32],
    sums: &[f32],
) -> [f32; R] {
    let runs = x.as_chunks::<32>().0;
    let bytes = ty.block_bytes();
    for w in w {
        assert!(
            w.len() >= runs.len() * bytes,
            "{} blocks of {ty}",
            runs.len()
        );
    }
    assert!(sums.len() >= runs.len());
    let mut acc = [_mm512_setzero_ps(); R];
    let mut offsets = [_mm_setzero_ps(); R];
    let low = _mm512_set1_epi32(0x0F);
    let eight = _mm512_set1_epi32(8);
    for (i, run) in runs.iter().enumerate() {
        // SAFETY: a run is 32 values; each row holds block i's `bytes` bytes (asserted above)
        unsafe {
            let (x0, x1) = (
                _mm512_loadu_ps(run.as_ptr()),
                _mm512_loadu_ps(run.as_ptr().add(16)),
            );
            for r in 0..R {
                let b = w[r].as_ptr().add(i * bytes);
                // the same block of the row R rows on (the next group's, where the rows lie end
                // to end): a hint, which never faults
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(R * w[r].len()) as *const i8);
                // the block's f16 scale (and offset) in lanes 0 (and 1)
                let scales =
                    _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(b as *const i32)));
                let t = match ty {
                    GgmlType::Q8_0 => {
                        let q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(2) as *const __m128i));
                        let q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(18) as *const __m128i));
                        _mm512_fmadd_ps(
                            _mm512_cvtepi32_ps(q1),
                            x1,
                            _mm512_mul_ps(_mm512_cvtepi32_ps(q0), x0),
                        )
                    }
                    _ => {
                        // Q4_0 and Q4_1: value j in byte j's low nibble, value j + 16 in its high
                        let at = if ty == GgmlType::Q4_1 { 4 } else { 2 };
                        let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(at) as *const __m128i));
                        let (mut q0, mut q1) =
                            (_mm512_and_si512(q, low), _mm512_srli_epi32::<4>(q));
                        if ty == GgmlType::Q4_0 {
                            (q0, q1) = (_mm512_sub_epi32(q0, eight), _mm512_sub_epi32(q1, eight));
                        }
                        _mm512_fmadd_ps(
                            _mm512_cvtepi32_ps(q1),
                            x1,
                            _mm512_mul_ps(_mm512_cvtepi32_ps(q0), x0),
                        )
                    }
                };
                acc[r] = _mm512_fmadd_ps(t, _mm512_broadcastss_ps(scales), acc[r]);
                if ty == GgmlType::Q4_1 {
                    // lane 1: m · Σ x
                    offsets[r] =
                        _mm_fmadd_ps(scales, _mm_set_ps(0.0, 0.0, sums[i], 0.0), offsets[r]);
                }
            }
        }
    }
    std::array::from_fn(|r| {
        _mm512_reduce_add_ps(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(offsets[r]))
    })
}
