//! The matrix–vector product's inner loop for the 32-value block types in WebAssembly SIMD
//! (`simd128`; relaxed SIMD's fused multiply-add in the builds that enable it): what
//! [`super::x86`] is natively. LLVM's vectorisation of the portable loop ([`super::dot_blocks`])
//! widens a block's bytes lane by lane; here a block of one weight row is one 16-byte load,
//! widened to 16-bit lanes once, its nibbles split there, then to eight `f32x4` multiplied by
//! `x` and added up, and the block's scale applied once to the sum. The four rows' scales and
//! offsets of a block are converted from `f16` together, in one vector.
//!
//! The products are the portable loop's (`d·Σ q·x + m·Σ x` per block); only the order in which
//! a block's 32 products are added differs (and, with relaxed SIMD, which are fused).

use core::arch::wasm32::*;

use super::GgmlType;
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

/// [`dot_rows`] for one type, which the caller gives as a constant. The `R ≤ 4` rows' scales
/// (and `Q4_1`'s offsets) of a block are read into one vector and converted from `f16`
/// together ([`f16s`]), not one by one.
#[inline(always)]
fn dot_blocks_of<const R: usize>(ty: GgmlType, w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    const { assert!(R <= 4, "four rows at most share a vector of scales") };
    let bytes = ty.block_bytes();
    let at = if ty == GgmlType::Q4_1 { 4 } else { 2 };
    let (low, eight) = (u16x8_splat(0x0F), i16x8_splat(8));
    let mut acc = [f32x4_splat(0.0); R];
    // lane r: row r's Σ m·Σx over its blocks (Q4_1)
    let mut offsets = f32x4_splat(0.0);
    let mut blocks = w.map(|w| w.chunks_exact(bytes));
    for (run, &s) in x.as_chunks::<32>().0.iter().zip(sums) {
        // SAFETY: a run is 32 values, eight v128 (wasm loads need no alignment)
        let xs: [v128; 8] =
            std::array::from_fn(|k| unsafe { v128_load(run.as_ptr().add(4 * k) as *const v128) });
        let b: [&[u8]; R] = std::array::from_fn(|r| {
            blocks[r]
                .next()
                .expect("a row holds a block for each run of x")
        });
        // the rows' scales in 16-bit lanes 0..R, their offsets (Q4_1) in lanes 4..4 + R
        let mut halves = [0u16; 8];
        for r in 0..R {
            halves[r] = u16::from_le_bytes([b[r][0], b[r][1]]);
            if ty == GgmlType::Q4_1 {
                halves[4 + r] = u16::from_le_bytes([b[r][2], b[r][3]]);
            }
        }
        // SAFETY: eight u16 are one v128
        let halves = unsafe { v128_load(halves.as_ptr() as *const v128) };
        let d = f16s(u32x4_extend_low_u16x8(halves));
        if ty == GgmlType::Q4_1 {
            offsets = madd(
                f16s(u32x4_extend_high_u16x8(halves)),
                f32x4_splat(s),
                offsets,
            );
        }
        for r in 0..R {
            // SAFETY: a block holds its 16 (Q8_0: 32) bytes of values from `at` on
            let q = unsafe { v128_load(b[r].as_ptr().add(at) as *const v128) };
            // values 0..8, 8..16, 16..24, 24..32 of the block as 16-bit integers
            let q16: [v128; 4] = if ty == GgmlType::Q8_0 {
                // SAFETY: as above
                let q1 = unsafe { v128_load(b[r].as_ptr().add(at + 16) as *const v128) };
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
            acc[r] = madd(f32x4_add(t[0], t[1]), lane(d, r), acc[r]);
        }
    }
    let offsets = [
        f32x4_extract_lane::<0>(offsets),
        f32x4_extract_lane::<1>(offsets),
        f32x4_extract_lane::<2>(offsets),
        f32x4_extract_lane::<3>(offsets),
    ];
    std::array::from_fn(|r| {
        let a = acc[r];
        f32x4_extract_lane::<0>(a)
            + f32x4_extract_lane::<1>(a)
            + f32x4_extract_lane::<2>(a)
            + f32x4_extract_lane::<3>(a)
            + offsets[r]
    })
}

/// Lane `r` (0 to 3) of `v` in every lane.
#[inline(always)]
fn lane(v: v128, r: usize) -> v128 {
    match r {
        0 => i32x4_shuffle::<0, 0, 0, 0>(v, v),
        1 => i32x4_shuffle::<1, 1, 1, 1>(v, v),
        2 => i32x4_shuffle::<2, 2, 2, 2>(v, v),
        _ => i32x4_shuffle::<3, 3, 3, 3>(v, v),
    }
}

/// Four `f16`s' bits (one in the low half of each 32-bit lane) as `f32`, exactly: the scalar
/// [`super::f16_to_f32`] lane by lane (the bits moved into an f32's place times 2¹¹²; an
/// infinity or NaN keeps an all-ones exponent).
#[inline(always)]
fn f16s(h: v128) -> v128 {
    let sign = i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16);
    let magnitude = i32x4_shl(v128_and(h, u32x4_splat(0x7FFF)), 13);
    let scaled = f32x4_mul(magnitude, f32x4_splat(f32::from_bits(0x7780_0000)));
    let exponent = u32x4_splat(0x7C00);
    let special = i32x4_eq(v128_and(h, exponent), exponent);
    let value = v128_bitselect(
        v128_or(magnitude, u32x4_splat(0x7F80_0000)),
        scaled,
        special,
    );
    v128_or(value, sign)
}
