//! The matrix–vector product's inner loop for the 32-value block types in WebAssembly SIMD
//! (`simd128`; relaxed SIMD's fused multiply-add in the builds that enable it): what
//! [`super::x86`] is natively. LLVM's vectorisation of the portable loop ([`super::dot_blocks`])
//! widens a block's bytes lane by lane; here a block of one weight row is one 16-byte load,
//! widened to 16-bit lanes once, its nibbles split there, then to eight `f32x4` multiplied by
//! `x` and added up, and the block's scale applied once to the sum.
//!
//! The products are the portable loop's (`d·Σ q·x + m·Σ x` per block); only the order in which
//! a block's 32 products are added differs.

use core::arch::wasm32::*;

use super::{half_at, GgmlType};
use crate::linalg::gemm::madd;

/// Eight 16-bit integers as two `f32x4`.
#[inline(always)]
fn floats(q: v128, signed: bool) -> [v128; 2] {
    if signed {
        [
            f32x4_convert_i32x4(i32x4_extend_low_i16x8(q)),
            f32x4_convert_i32x4(i32x4_extend_high_i16x8(q)),
        ]
    } else {
        [
            f32x4_convert_i32x4(u32x4_extend_low_u16x8(q)),
            f32x4_convert_i32x4(u32x4_extend_high_u16x8(q)),
        ]
    }
}

/// `R` weight rows of `ty` (see [`super::has_kernel`]) dotted with `x`, each value of `x` read once for
/// them; `sums` holds `Σ x` of each run of 32 values of `x` (the offsets of `Q4_1` multiply
/// them).
///
/// # Shapes
/// * `w`: `R × (cols / 32 · block_bytes,)`, `x`: `(cols,)`, `sums`: `(cols / 32,)` → `(R,)`
///
/// # Panics
/// If a row holds fewer blocks than `x` has runs of 32 values, or `ty` is not taken.
#[inline(always)]
pub(super) fn dot_rows<const R: usize>(
    ty: GgmlType,
    w: [&[u8]; R],
    x: &[f32],
    sums: &[f32],
) -> [f32; R] {
    // one loop per type, each with its type known: no test of the type inside it
    match ty {
        GgmlType::Q8_0 => dot_blocks_of(GgmlType::Q8_0, w, x, sums),
        GgmlType::Q4_0 => dot_blocks_of(GgmlType::Q4_0, w, x, sums),
        GgmlType::Q4_1 => dot_blocks_of(GgmlType::Q4_1, w, x, sums),
        _ => panic!("no SIMD128 loop for {ty}"),
    }
}

/// [`dot_rows`] for one type, which the caller gives as a constant.
#[inline(always)]
fn dot_blocks_of<const R: usize>(ty: GgmlType, w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    let bytes = ty.block_bytes();
    let at = if ty == GgmlType::Q4_1 { 4 } else { 2 };
    let (low, eight) = (u16x8_splat(0x0F), i16x8_splat(8));
    let mut acc = [f32x4_splat(0.0); R];
    let mut offsets = [0.0f32; R];
    let mut blocks = w.map(|w| w.chunks_exact(bytes));
    for (run, &s) in x.as_chunks::<32>().0.iter().zip(sums) {
        // SAFETY: a run is 32 values, eight v128 (wasm loads need no alignment)
        let xs: [v128; 8] =
            std::array::from_fn(|k| unsafe { v128_load(run.as_ptr().add(4 * k) as *const v128) });
        for r in 0..R {
            let b = blocks[r]
                .next()
                .expect("a row holds a block for each run of x");
            // SAFETY: a block holds its 16 (Q8_0: 32) bytes of values from `at` on
            let q = unsafe { v128_load(b.as_ptr().add(at) as *const v128) };
            // values 0..8, 8..16, 16..24, 24..32 of the block as 16-bit integers
            let q16: [v128; 4] = if ty == GgmlType::Q8_0 {
                // SAFETY: as above
                let q1 = unsafe { v128_load(b.as_ptr().add(at + 16) as *const v128) };
                [
                    i16x8_extend_low_i8x16(q),
                    i16x8_extend_high_i8x16(q),
                    i16x8_extend_low_i8x16(q1),
                    i16x8_extend_high_i8x16(q1),
                ]
            } else {
                // each byte: value j in its low nibble, value j + 16 in its high one
                let (a, c) = (u16x8_extend_low_u8x16(q), u16x8_extend_high_u8x16(q));
                let q = [
                    v128_and(a, low),
                    v128_and(c, low),
                    u16x8_shr(a, 4),
                    u16x8_shr(c, 4),
                ];
                if ty == GgmlType::Q4_0 {
                    q.map(|q| i16x8_sub(q, eight))
                } else {
                    q
                }
            };
            let signed = ty != GgmlType::Q4_1;
            let mut t = [f32x4_splat(0.0); 2];
            for (k, &q) in q16.iter().enumerate() {
                let [f0, f1] = floats(q, signed);
                t[0] = madd(f0, xs[2 * k], t[0]);
                t[1] = madd(f1, xs[2 * k + 1], t[1]);
            }
            acc[r] = madd(f32x4_add(t[0], t[1]), f32x4_splat(half_at(b, 0)), acc[r]);
            if ty == GgmlType::Q4_1 {
                offsets[r] += half_at(b, 2) * s;
            }
        }
    }
    std::array::from_fn(|r| {
        let a = acc[r];
        f32x4_extract_lane::<0>(a)
            + f32x4_extract_lane::<1>(a)
            + f32x4_extract_lane::<2>(a)
            + f32x4_extract_lane::<3>(a)
            + offsets[r]
    })
}
