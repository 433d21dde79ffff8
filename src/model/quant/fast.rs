//! The "fast" numerics ([`crate::engine::Numerics::Fast`], off unless asked for): a 4-bit
//! matrix multiplied by activations rounded to 8 bits, in integers, as llama.cpp multiplies a
//! `Q4_1` matrix by `Q8_1` activations (`ggml_vec_dot_q4_1_q8_1`).
//!
//! Each row of `x` is cut into runs of 32 values, and each run is rounded to `i8` on a scale of
//! its own ([`Q8Rows`]: `x ≈ d_x·q_x`, `d_x = max |x| / 127`, to the nearest, ties away from
//! zero). A 32-value block of weights is `w = d·q + m` with `q` in `0..16` (`Q4_1` as stored,
//! `Q4_0` with `m = −8·d`), so a block's share of a dot product is
//!
//! `Σ w·x ≈ (d·d_x)·Σ q·q_x + m·(d_x·Σ q_x)`,
//!
//! its `Σ q·q_x` a sum of integers: exact, whatever the order. In WebAssembly with relaxed SIMD
//! one instruction (`i32x4.relaxed_dot_i8x16_i7x16_add_s`, `vpdpbusd` on x86) takes 16 of those
//! products where `f32x4.relaxed_madd` takes 4: in Chromium on this project's test host, one
//! thread, 124 billion products a second against 31 in a bare loop, and this kernel, its
//! nibbles unpacked and each block's scales applied, 53 billion. The weights are exact; only
//! `x` is rounded, so the results differ from the exact numerics by what rounding `x` to 8 bits
//! makes of them: the SmolLM2 golden test (`tests/llama.rs`) prints it against HF.
//!
//! Every kernel adds a block's terms in the same order with the same float operations, none
//! fused, so the portable loop and the SIMD one give the same bits.

use std::mem::MaybeUninit;

use ndarray::{Array2, ArrayView2, ArrayViewMut2, Axis};

use super::{half_at, write_row, GgmlType, QuantMatrix, TASK_MIN_WORK, TEAM_TASK_MIN_WORK};
use crate::linalg::{isa, team};

/// Values in a block, of the weights and of `x`.
const BLOCK: usize = 32;

/// Weight rows a group of the layout holds: one lane each of an `i32x4`.
const QUAD: usize = 4;

/// Groups of four weight rows a kernel call takes together (eight outputs).
const QUADS: usize = 2;

/// Rows of `x` a kernel call takes together.
const X_ROWS: usize = 4;

/// Rows of `x` a task walks through before moving to its next weights: a run of `x` that stays
/// in the cache while its weights are read.
const X_CHUNK: usize = 64;

/// Rows of activations rounded to 8 bits, 32 values at a time: `x ≈ d·q` per run.
///
/// # Shapes
/// * `q`: `(n, cols)`; `d`, `sums`: `(n, cols / 32)`, `sums` = `d·Σ q` of each run
#[derive(Debug, Clone)]
pub struct Q8Rows {
    q: Vec<i8>,
    d: Vec<f32>,
    sums: Vec<f32>,
    n: usize,
    cols: usize,
}

impl Q8Rows {
    /// `x` rounded, each run of 32 values on its own scale (as llama.cpp's `quantize_row_q8_1`:
    /// `d = max |x| / 127`, `q = round(x / d)`; a run that holds a NaN or an infinity gets a
    /// scale of NaN, so that what it touches is NaN, as in the exact numerics).
    ///
    /// # Shapes
    /// * `x`: `(n, cols)`, `cols` a multiple of 32
    ///
    /// # Panics
    /// If `cols` is not a multiple of 32 ([`FastMatrix::of`] takes only such matrices).
    pub fn quantize(x: ArrayView2<f32>) -> Self {
        let (n, cols) = x.dim();
        assert!(
            cols.is_multiple_of(BLOCK),
            "8-bit rows of {cols} values: not a multiple of {BLOCK}"
        );
        let x = x.as_standard_layout();
        let xs = x.as_slice().expect("standard layout");
        let runs = n * cols / BLOCK;
        let mut q = vec![0i8; n * cols];
        let mut d = vec![0f32; runs];
        let mut sums = vec![0f32; runs];
        // tasks of whole rows, about 8,192 values each (at least one row)
        let values = ((BLOCK * 256) / cols.max(1)).max(1) * cols.max(BLOCK);
        let parts = q
            .chunks_mut(values)
            .zip(d.chunks_mut(values / BLOCK))
            .zip(sums.chunks_mut(values / BLOCK))
            .zip(xs.chunks(values));
        team::for_each_part(parts, |(((q, d), sums), x)| {
            isa::vectorised(
                #[inline(always)]
                || {
                    let runs = q.chunks_exact_mut(BLOCK).zip(x.chunks_exact(BLOCK));
                    for (((q, x), d), s) in runs.zip(d.iter_mut()).zip(sums.iter_mut()) {
                        (*d, *s) = round_run(x.try_into().expect("32 values"), q);
                    }
                },
            )
        });
        Self {
            q,
            d,
            sums,
            n,
            cols,
        }
    }

    /// `(n, cols)`.
    pub fn dim(&self) -> (usize, usize) {
        (self.n, self.cols)
    }

    /// Row `i`'s values, scales and sums.
    fn row(&self, i: usize) -> (&[i8], &[f32], &[f32]) {
        let runs = self.cols / BLOCK;
        (
            &self.q[i * self.cols..][..self.cols],
            &self.d[i * runs..][..runs],
            &self.sums[i * runs..][..runs],
        )
    }
}

/// One run of 32 values rounded into `q` (to the nearest, ties away from zero, as `roundf`):
/// its scale `d` and `d·Σ q`.
#[inline(always)]
fn round_run(x: &[f32; BLOCK], q: &mut [i8]) -> (f32, f32) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        simd_round_run(x, q)
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        portable_round_run(x, q)
    }
}

/// [`round_run`] in plain Rust.
#[cfg_attr(
    all(target_arch = "wasm32", target_feature = "simd128"),
    allow(dead_code)
)]
#[inline(always)]
fn portable_round_run(x: &[f32; BLOCK], q: &mut [i8]) -> (f32, f32) {
    // |x|'s largest, and whether any is NaN, in one pass
    let (mut amax, mut nan) = (0f32, false);
    for &v in x {
        amax = amax.max(v.abs());
        nan |= v.is_nan();
    }
    if nan || !amax.is_finite() {
        q.fill(0);
        return (f32::NAN, f32::NAN);
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in q.iter_mut().zip(x) {
        let r = (v * id).round() as i8; // within ±127: |v·id| ≤ 127 (to a rounding)
        *q = r;
        sum += i32::from(r);
    }
    (d, d * sum as f32)
}

/// [`round_run`] in WebAssembly SIMD, the same operations on each value (LLVM vectorises
/// neither the largest |x| nor the rounding of the plain loop: 0.2 s of a 1,028-token pass a
/// thread).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline(always)]
fn simd_round_run(x: &[f32; BLOCK], q: &mut [i8]) -> (f32, f32) {
    use core::arch::wasm32::*;
    assert!(q.len() >= BLOCK);
    // SAFETY: x holds 32 values: eight vectors of four
    let v: [v128; 8] =
        std::array::from_fn(|i| unsafe { v128_load(x.as_ptr().add(4 * i) as *const v128) });
    let (mut most, mut nan) = (f32x4_splat(0.0), i32x4_splat(0));
    for &v in &v {
        most = f32x4_max(most, f32x4_abs(v));
        nan = v128_or(nan, f32x4_ne(v, v));
    }
    let amax = [
        f32x4_extract_lane::<0>(most),
        f32x4_extract_lane::<1>(most),
        f32x4_extract_lane::<2>(most),
        f32x4_extract_lane::<3>(most),
    ]
    .into_iter()
    .fold(0f32, f32::max);
    if v128_any_true(nan) || !amax.is_finite() {
        q[..BLOCK].fill(0);
        return (f32::NAN, f32::NAN);
    }
    let d = amax / 127.0;
    let id = f32x4_splat(if d != 0.0 { 1.0 / d } else { 0.0 });
    // `roundf`: truncated, then a step away from zero where at least half a step was cut off
    // (`y − trunc(y)` is exact); WebAssembly's `nearest` ties to even, which SmolLM2's
    // attention measured further from HF's (0.158 against 0.111 at most)
    let (half, one) = (f32x4_splat(0.5), f32x4_splat(1.0));
    let ints: [v128; 8] = std::array::from_fn(|i| {
        let y = f32x4_mul(v[i], id);
        let t = f32x4_trunc(y);
        let away = f32x4_ge(f32x4_abs(f32x4_sub(y, t)), half);
        let step = v128_and(
            away,
            v128_bitselect(f32x4_neg(one), one, f32x4_lt(y, f32x4_splat(0.0))),
        );
        i32x4_trunc_sat_f32x4(f32x4_add(t, step))
    });
    let mut sum = i32x4_splat(0);
    for &i in &ints {
        sum = i32x4_add(sum, i);
    }
    let sum = i32x4_extract_lane::<0>(sum)
        + i32x4_extract_lane::<1>(sum)
        + i32x4_extract_lane::<2>(sum)
        + i32x4_extract_lane::<3>(sum);
    for h in 0..2 {
        let low = i16x8_narrow_i32x4(ints[4 * h], ints[4 * h + 1]);
        let high = i16x8_narrow_i32x4(ints[4 * h + 2], ints[4 * h + 3]);
        // SAFETY: q holds 32 values (asserted above)
        unsafe {
            v128_store(
                q.as_mut_ptr().add(16 * h) as *mut v128,
                i8x16_narrow_i16x8(low, high),
            )
        };
    }
    (d, d * sum as f32)
}

/// A 4-bit weight matrix laid out for [`FastMatrix::linear`]: the weight rows in groups of
/// four, each 32-value block of a group 64 bytes of nibbles and its four scales and offsets.
/// The nibbles of a group's block are its four rows' `Q4_1`/`Q4_0` bytes, four at a time
/// side by side: a 16-byte vector whose lane `r` holds four bytes of row `r`, the low nibbles
/// values `4p..4p + 4` of the block and the high ones `16 + 4p..` (the order ggml's blocks
/// keep them in), so that one relaxed dot product takes four values of each row.
///
/// # Shapes
/// * `nibbles`: `(groups, blocks, 4 vectors, 4 rows, 4 bytes)`
/// * `d`, `m`: `(groups, blocks, 4 rows)`; a missing row's zero
#[derive(Debug, Clone)]
pub struct FastMatrix {
    nibbles: Vec<u8>,
    d: Vec<f32>,
    m: Vec<f32>,
    rows: usize,
    cols: usize,
}

impl FastMatrix {
    /// `w` laid out for the fast numerics, where its type is one whose blocks are 32 values of
    /// 4 bits with a scale and an offset (`Q4_0`, `Q4_1`); `None` for the others, which the
    /// fast numerics multiply as the exact ones do.
    pub fn of(w: &QuantMatrix) -> Option<Self> {
        let ty = w.ty();
        if !matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1) {
            return None;
        }
        let (rows, cols) = w.dim();
        let blocks = cols / BLOCK;
        let groups = rows.div_ceil(QUAD * QUADS) * QUADS;
        let mut nibbles = vec![0u8; groups * blocks * 64];
        let (mut d, mut m) = (
            vec![0f32; groups * blocks * QUAD],
            vec![0f32; groups * blocks * QUAD],
        );
        let size = ty.block_bytes();
        for r in 0..rows {
            let (g, lane) = (r / QUAD, r % QUAD);
            let row = w.row_data(r);
            for b in 0..blocks {
                let block = &row[b * size..][..size];
                let (scale, offset, qs) = match ty {
                    GgmlType::Q4_1 => (half_at(block, 0), half_at(block, 2), &block[4..20]),
                    _ => {
                        let scale = half_at(block, 0);
                        (scale, -8.0 * scale, &block[2..18])
                    }
                };
                let at = (g * blocks + b) * QUAD + lane;
                (d[at], m[at]) = (scale, offset);
                for p in 0..4 {
                    let to = (g * blocks + b) * 64 + p * 16 + lane * 4;
                    nibbles[to..to + 4].copy_from_slice(&qs[p * 4..p * 4 + 4]);
                }
            }
        }
        Some(Self {
            nibbles,
            d,
            m,
            rows,
            cols,
        })
    }

    /// `(rows, cols)`.
    pub fn dim(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// `x · Wᵀ + b` with `x` rounded to 8 bits ([`Q8Rows`]), `b` added to each value as it is
    /// written (where given).
    ///
    /// # Shapes
    /// * `x`: `(n, cols)`, `bias`: `(rows,)` → `(n, rows)`
    ///
    /// # Panics
    /// If `x` does not have `cols` columns, or `bias` does not hold `rows` values.
    pub fn linear(&self, x: &Q8Rows, bias: Option<&[f32]>) -> Array2<f32> {
        let (n, cols) = x.dim();
        assert_eq!(
            cols, self.cols,
            "x · Wᵀ (8-bit): x has {cols} columns, W ({} × {}) takes {}",
            self.rows, self.cols, self.cols
        );
        if let Some(b) = bias {
            assert_eq!(b.len(), self.rows, "x · Wᵀ + b: b for {} rows", self.rows);
        }
        let mut out = Array2::<f32>::uninit((n, self.rows));
        if n == 0 || self.rows == 0 {
            // SAFETY: there is no value to write
            return unsafe { out.assume_init() };
        }
        // tasks of whole groups of eight rows, a few a thread, none too small
        let per_output = (n * cols).max(1);
        let outputs = QUAD * QUADS;
        let chunk = if team::leading() {
            // a prompt's tasks wide enough to read each run of x for 32 outputs
            TEAM_TASK_MIN_WORK
                .div_ceil(per_output)
                .max(if n >= X_CHUNK { 32 } else { 1 })
        } else {
            TASK_MIN_WORK
                .div_ceil(per_output)
                .max(self.rows.div_ceil(4 * rayon::current_num_threads()))
        }
        .max(1)
        .next_multiple_of(outputs);
        let parts = out.axis_chunks_iter_mut(Axis(1), chunk).enumerate();
        team::for_each_part(parts, |(c, out)| self.part_into(x, bias, c * chunk, out));
        // SAFETY: the tasks write every value of `out`
        unsafe { out.assume_init() }
    }

    /// Columns `first..first + out.ncols()` of `x · Wᵀ + b` into `out`.
    fn part_into(
        &self,
        x: &Q8Rows,
        bias: Option<&[f32]>,
        first: usize,
        mut out: ArrayViewMut2<MaybeUninit<f32>>,
    ) {
        let (n, width) = out.dim();
        isa::vectorised(
            #[inline(always)]
            || {
                for rows in (0..n).step_by(X_CHUNK) {
                    let rows = rows..n.min(rows + X_CHUNK);
                    for o in (0..width).step_by(QUAD * QUADS) {
                        let w = self.weights((first + o) / QUAD);
                        let keep = (width - o).min(QUAD * QUADS);
                        let bias = bias.map(|b| &b[first + o..][..keep]);
                        let mut i = rows.start;
                        while i < rows.end {
                            let take = if rows.end - i >= X_ROWS { X_ROWS } else { 1 };
                            let mut sums = [[0f32; QUAD * QUADS]; X_ROWS];
                            if take == X_ROWS {
                                let xr: [_; X_ROWS] = std::array::from_fn(|r| x.row(i + r));
                                kernel::<X_ROWS>(&w, &xr, &mut sums);
                            } else {
                                let mut one = [[0f32; QUAD * QUADS]; 1];
                                kernel::<1>(&w, &[x.row(i)], &mut one);
                                sums[0] = one[0];
                            }
                            for (r, sums) in sums.iter().take(take).enumerate() {
                                let mut row = out.row_mut(i + r);
                                let row =
                                    &mut row.as_slice_mut().expect("a row's columns")[o..o + keep];
                                write_row(row, sums, bias);
                            }
                            i += take;
                        }
                    }
                }
            },
        );
    }
}

/// The weights of two groups (eight rows), as a kernel reads them.
struct Weights<'a> {
    nibbles: [&'a [u8]; QUADS],
    d: [&'a [f32]; QUADS],
    m: [&'a [f32]; QUADS],
}

impl FastMatrix {
    /// Groups `g` and `g + 1`'s weights.
    fn weights(&self, g: usize) -> Weights<'_> {
        let blocks = self.cols / BLOCK;
        let (bytes, scales) = (blocks * 64, blocks * QUAD);
        Weights {
            nibbles: std::array::from_fn(|k| &self.nibbles[(g + k) * bytes..][..bytes]),
            d: std::array::from_fn(|k| &self.d[(g + k) * scales..][..scales]),
            m: std::array::from_fn(|k| &self.m[(g + k) * scales..][..scales]),
        }
    }
}

impl Weights<'_> {
    /// The blocks of a row, checked against `x`'s: the SIMD kernels read by pointer.
    ///
    /// # Panics
    /// If a group or a row of `x` holds fewer.
    #[cfg(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "relaxed-simd")
    ))]
    fn blocks(&self, x: &[(&[i8], &[f32], &[f32])]) -> usize {
        let blocks = self.d[0].len() / QUAD;
        for k in 0..QUADS {
            assert!(self.nibbles[k].len() >= blocks * 64 && self.m[k].len() >= blocks * QUAD);
        }
        for (q, d, sums) in x {
            assert!(q.len() >= blocks * BLOCK && d.len() >= blocks && sums.len() >= blocks);
        }
        blocks
    }
}

/// `R` rows of `x` dotted with eight weight rows into `out`: per block, `Σ q·q_x` in integers,
/// then `acc = (acc + Σ·(d·d_x)) + m·s_x` in floats.
///
/// # Shapes
/// * `x`: `R ×` ([`Q8Rows::row`]), `out`: `(R, 8)`
#[inline(always)]
fn kernel<const R: usize>(w: &Weights, x: &[(&[i8], &[f32], &[f32]); R], out: &mut [[f32; 8]; R]) {
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    {
        relaxed::kernel(w, x, out)
    }
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(isa) = avx2::Avx2::best() {
            // SAFETY: `Avx2::best` found the instruction set on this CPU
            return unsafe { isa.run(w, x, out) };
        }
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
    {
        portable(w, x, out)
    }
}

/// [`kernel`] as plain loops: the reference every kernel gives the bits of (slow: LLVM vectorises
/// none of it).
#[cfg_attr(
    all(target_arch = "wasm32", target_feature = "relaxed-simd"),
    allow(dead_code)
)]
#[inline(always)]
fn portable<const R: usize>(
    w: &Weights,
    x: &[(&[i8], &[f32], &[f32]); R],
    out: &mut [[f32; 8]; R],
) {
    let blocks = w.d[0].len() / QUAD;
    for (r, &(q, dx, sx)) in x.iter().enumerate() {
        for k in 0..QUADS {
            for lane in 0..QUAD {
                let mut acc = 0f32;
                for b in 0..blocks {
                    let nib = &w.nibbles[k][b * 64..][..64];
                    let qx = &q[b * BLOCK..][..BLOCK];
                    let mut sum = 0i32;
                    for p in 0..4 {
                        for t in 0..4 {
                            let byte = nib[p * 16 + lane * 4 + t];
                            sum += i32::from(byte & 0x0F) * i32::from(qx[p * 4 + t]);
                            sum += i32::from(byte >> 4) * i32::from(qx[16 + p * 4 + t]);
                        }
                    }
                    let at = b * QUAD + lane;
                    acc = (acc + sum as f32 * (w.d[k][at] * dx[b])) + w.m[k][at] * sx[b];
                }
                out[r][k * QUAD + lane] = acc;
            }
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
mod relaxed {
    //! [`super::kernel`] in relaxed SIMD: sixteen products an instruction.
    use core::arch::wasm32::*;

    use super::{Weights, BLOCK, QUAD, QUADS};

    #[inline(always)]
    pub(super) fn kernel<const R: usize>(
        w: &Weights,
        x: &[(&[i8], &[f32], &[f32]); R],
        out: &mut [[f32; 8]; R],
    ) {
        let blocks = w.blocks(x); // (checked: the loads below are unchecked)
        let low = u8x16_splat(0x0F);
        let mut acc = [[f32x4_splat(0.0); QUADS]; R];
        for b in 0..blocks {
            // the low nibbles' products and the high ones' apart: two chains of dependent dot
            // products, not one twice as long (10 % quicker: 52.9 billion products a second
            // against 48.2, in Chromium on the test host)
            let mut sums = [[i32x4_splat(0); QUADS]; R];
            let mut high = [[i32x4_splat(0); QUADS]; R];
            for p in 0..4 {
                let mut lo = [low; QUADS];
                let mut hi = [low; QUADS];
                for k in 0..QUADS {
                    // SAFETY: the group's blocks hold 64 bytes each (asserted above)
                    let v = unsafe {
                        v128_load(w.nibbles[k].as_ptr().add(b * 64 + p * 16) as *const v128)
                    };
                    lo[k] = v128_and(v, low);
                    hi[k] = u8x16_shr(v, 4);
                }
                for r in 0..R {
                    // SAFETY: the row holds its blocks' 32 values each (asserted above)
                    let (xl, xh) = unsafe {
                        let q = x[r].0.as_ptr().add(b * BLOCK + p * 4) as *const u32;
                        (v128_load32_splat(q), v128_load32_splat(q.add(4)))
                    };
                    for k in 0..QUADS {
                        sums[r][k] = i32x4_relaxed_dot_i8x16_i7x16_add(xl, lo[k], sums[r][k]);
                        high[r][k] = i32x4_relaxed_dot_i8x16_i7x16_add(xh, hi[k], high[r][k]);
                    }
                }
            }
            for k in 0..QUADS {
                // SAFETY: the group's block has four scales and four offsets (asserted above)
                let (d, m) = unsafe {
                    (
                        v128_load(w.d[k].as_ptr().add(b * QUAD) as *const v128),
                        v128_load(w.m[k].as_ptr().add(b * QUAD) as *const v128),
                    )
                };
                for r in 0..R {
                    // SAFETY: a scale and a sum a block (asserted above)
                    let (dx, sx) = unsafe {
                        (
                            v128_load32_splat(x[r].1.as_ptr().add(b) as *const u32),
                            v128_load32_splat(x[r].2.as_ptr().add(b) as *const u32),
                        )
                    };
                    let sum = i32x4_add(sums[r][k], high[r][k]);
                    let scaled = f32x4_mul(f32x4_convert_i32x4(sum), f32x4_mul(d, dx));
                    acc[r][k] = f32x4_add(f32x4_add(acc[r][k], scaled), f32x4_mul(m, sx));
                }
            }
        }
        for (out, acc) in out.iter_mut().zip(acc) {
            for (k, acc) in acc.into_iter().enumerate() {
                // SAFETY: out's row holds QUADS · 4 values
                unsafe { v128_store(out.as_mut_ptr().add(k * QUAD) as *mut v128, acc) };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! [`super::kernel`] in AVX2, the two groups' eight rows side by side in one register:
    //! `vpmaddubsw` multiplies the weights' bytes by `x`'s in pairs and `vpmaddwd` adds the
    //! pairs' pairs, which is relaxed SIMD's dot product four lanes at a time (a pair's sum, at
    //! most 2·15·127, does not saturate); with AVX-512 VNNI, `vpdpbusd` does both at once, as
    //! in the page. LLVM does not vectorise the portable loop: it took 16 s where the exact
    //! numerics take 1.3 (SmolLM2, 1,000 tokens).
    use std::arch::x86_64::*;

    use super::{Weights, BLOCK, QUAD};

    /// The instruction sets of the kernel.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Avx2 {
        /// AVX2 with AVX-512 VNNI's dot products on its 256-bit registers.
        Vnni,
        /// AVX2's multiply-adds of bytes, then of pairs.
        Plain,
    }

    impl Avx2 {
        /// The best this CPU runs (detected once).
        pub(super) fn best() -> Option<Avx2> {
            static BEST: std::sync::OnceLock<Option<Avx2>> = std::sync::OnceLock::new();
            *BEST.get_or_init(|| Avx2::available().first().copied())
        }

        /// Every one this CPU runs, the best first (the tests walk them all), as
        /// `super::super::x86::Kernel::available`.
        pub(super) fn available() -> Vec<Avx2> {
            let mut kernels = Vec::new();
            if is_x86_feature_detected!("avx2") {
                if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") {
                    kernels.push(Avx2::Vnni);
                }
                kernels.push(Avx2::Plain);
            }
            kernels
        }

        /// [`super::kernel`] on this instruction set.
        ///
        /// # Safety
        /// The CPU must run it (it is one of [`Avx2::available`]).
        pub(super) unsafe fn run<const R: usize>(
            self,
            w: &Weights,
            x: &[(&[i8], &[f32], &[f32]); R],
            out: &mut [[f32; 8]; R],
        ) {
            // SAFETY: the CPU runs it (the caller's promise)
            unsafe {
                match self {
                    Avx2::Vnni => kernel_vnni(w, x, out),
                    Avx2::Plain => kernel(w, x, out),
                }
            }
        }
    }

    /// # Safety
    /// The CPU must run AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn kernel<const R: usize>(
        w: &Weights,
        x: &[(&[i8], &[f32], &[f32]); R],
        out: &mut [[f32; 8]; R],
    ) {
        // SAFETY: the CPU runs AVX2 (the caller's promise)
        unsafe { body::<R, false>(w, x, out) }
    }

    /// # Safety
    /// The CPU must run AVX2, AVX-512 VNNI and AVX-512 VL.
    #[target_feature(enable = "avx2,avx512vnni,avx512vl")]
    unsafe fn kernel_vnni<const R: usize>(
        w: &Weights,
        x: &[(&[i8], &[f32], &[f32]); R],
        out: &mut [[f32; 8]; R],
    ) {
        // SAFETY: the CPU runs them (the caller's promise)
        unsafe { body::<R, true>(w, x, out) }
    }

    /// The kernel, inlined into the function of its instruction set.
    #[inline(always)]
    unsafe fn body<const R: usize, const VNNI: bool>(
        w: &Weights,
        x: &[(&[i8], &[f32], &[f32]); R],
        out: &mut [[f32; 8]; R],
    ) {
        let blocks = w.blocks(x); // (checked: the loads below are unchecked)
        let (low, ones) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi16(1));
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..blocks {
            let mut sums = [_mm256_setzero_si256(); R];
            let mut high = [_mm256_setzero_si256(); R];
            for p in 0..4 {
                // SAFETY: the groups' blocks hold 64 bytes each (asserted above)
                let v = unsafe {
                    let at =
                        |k: usize| w.nibbles[k].as_ptr().add(b * 64 + p * 16) as *const __m128i;
                    _mm256_set_m128i(_mm_loadu_si128(at(1)), _mm_loadu_si128(at(0)))
                };
                let (lo, hi) = (
                    _mm256_and_si256(v, low),
                    _mm256_and_si256(_mm256_srli_epi16(v, 4), low),
                );
                for r in 0..R {
                    // SAFETY: the row holds its blocks' 32 values each (asserted above)
                    let (xl, xh) = unsafe {
                        let q = x[r].0.as_ptr().add(b * BLOCK + p * 4);
                        (
                            _mm256_set1_epi32((q as *const i32).read_unaligned()),
                            _mm256_set1_epi32((q.add(16) as *const i32).read_unaligned()),
                        )
                    };
                    // the weights' bytes (0..16) as the unsigned operand, x's as the signed one
                    let dot = |acc: __m256i, w: __m256i, x: __m256i| {
                        if VNNI {
                            _mm256_dpbusd_epi32(acc, w, x)
                        } else {
                            let pairs = _mm256_maddubs_epi16(w, x);
                            _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones))
                        }
                    };
                    sums[r] = dot(sums[r], lo, xl);
                    high[r] = dot(high[r], hi, xh);
                }
            }
            // SAFETY: the groups' blocks have four scales and four offsets (asserted above)
            let (d, m) = unsafe {
                let at = |v: &[f32]| _mm_loadu_ps(v.as_ptr().add(b * QUAD));
                (
                    _mm256_set_m128(at(w.d[1]), at(w.d[0])),
                    _mm256_set_m128(at(w.m[1]), at(w.m[0])),
                )
            };
            for r in 0..R {
                let (dx, sx) = (_mm256_set1_ps(x[r].1[b]), _mm256_set1_ps(x[r].2[b]));
                let sum = _mm256_cvtepi32_ps(_mm256_add_epi32(sums[r], high[r]));
                let scaled = _mm256_mul_ps(sum, _mm256_mul_ps(d, dx));
                acc[r] = _mm256_add_ps(_mm256_add_ps(acc[r], scaled), _mm256_mul_ps(m, sx));
            }
        }
        for r in 0..R {
            // SAFETY: out's row holds eight values
            unsafe { _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    fn matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> QuantMatrix {
        super::super::tests::matrix(ty, rows, cols, seed)
    }

    /// `x · Wᵀ` computed the plain way from the blocks' integers, in f64: the reference.
    fn reference(w: &QuantMatrix, x: &Q8Rows) -> Array2<f64> {
        let (rows, cols) = w.dim();
        let mut wf = vec![0f32; cols];
        let mut out = Array2::zeros((x.n, rows));
        for o in 0..rows {
            w.dequantize_row(o, &mut wf);
            for i in 0..x.n {
                let (q, d, _) = x.row(i);
                out[[i, o]] = (0..cols)
                    .map(|c| f64::from(wf[c]) * f64::from(q[c]) * f64::from(d[c / BLOCK]))
                    .sum();
            }
        }
        out
    }

    #[test]
    fn an_8_bit_product_equals_the_dequantized_weights_times_the_rounded_rows() {
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1] {
            for (n, rows) in [(1, 8), (3, 13), (5, 40), (70, 9), (9, 1)] {
                let cols = 96;
                let w = matrix(ty, rows, cols, 7 + n as u64);
                let x = Array2::from_shape_fn((n, cols), |(i, c)| {
                    ((i * 31 + c * 7) % 23) as f32 / 7.0 - 1.5
                });
                let fast = FastMatrix::of(&w).expect("a 4-bit type");
                let q = Q8Rows::quantize(x.view());
                let got = fast.linear(&q, None);
                let want = reference(&w, &q);
                for ((i, o), &g) in got.indexed_iter() {
                    let e = want[[i, o]];
                    assert!(
                        (f64::from(g) - e).abs() <= 1e-4 * (1.0 + e.abs()),
                        "{ty} n={n} rows={rows}: [{i}, {o}] is {g}, the reference {e}"
                    );
                }
                // and the exact product, which rounds nothing, is near: x moved by at most
                // half a step of its 8-bit scale
                let exact = w.matmul_t(x.view());
                for ((i, o), &g) in got.indexed_iter() {
                    let e = exact[[i, o]];
                    assert!(
                        (g - e).abs() <= 0.05 * (1.0 + e.abs()),
                        "{ty} n={n}: [{i}, {o}] is {g}, exactly {e}"
                    );
                }
                // the bias is added as each value is written
                let bias: Vec<f32> = (0..rows).map(|o| o as f32 * 0.25 - 1.0).collect();
                let with = fast.linear(&q, Some(&bias));
                for ((i, o), &g) in with.indexed_iter() {
                    assert_eq!(g.to_bits(), (got[[i, o]] + bias[o]).to_bits());
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_kernel_gives_the_portable_loops_bits() {
        let (rows, cols) = (8, 96);
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1] {
            let fast = FastMatrix::of(&matrix(ty, rows, cols, 3)).expect("a 4-bit type");
            let x = Array2::from_shape_fn((4, cols), |(i, c)| {
                ((i * 13 + c * 5) % 29) as f32 / 3.0 - 4.5
            });
            let q = Q8Rows::quantize(x.view());
            let w = fast.weights(0);
            let xr: [_; 4] = std::array::from_fn(|r| q.row(r));
            let mut want = [[0f32; 8]; 4];
            portable(&w, &xr, &mut want);
            for isa in avx2::Avx2::available() {
                let mut got = [[0f32; 8]; 4];
                // SAFETY: the CPU runs it (one of those available)
                unsafe { isa.run(&w, &xr, &mut got) };
                for r in 0..4 {
                    for o in 0..8 {
                        let (g, e) = (got[r][o].to_bits(), want[r][o].to_bits());
                        assert_eq!(g, e, "{isa:?}: {ty} [{r}, {o}]");
                    }
                }
            }
        }
    }

    #[test]
    fn rounding_to_8_bits_keeps_each_run_within_half_a_step() {
        let x = Array2::from_shape_fn((3, 64), |(i, c)| (c as f32 - 20.0) * (i as f32 + 0.5));
        let q = Q8Rows::quantize(x.view());
        for i in 0..3 {
            let (qs, d, s) = q.row(i);
            for c in 0..64 {
                let back = f32::from(qs[c]) * d[c / 32];
                assert!(
                    (back - x[[i, c]]).abs() <= d[c / 32] * 0.5 + 1e-6,
                    "[{i}, {c}]"
                );
            }
            for b in 0..2 {
                let sum: i32 = qs[b * 32..][..32].iter().map(|&v| i32::from(v)).sum();
                assert_eq!(s[b], d[b] * sum as f32);
            }
        }
        // zeros round to zeros, and a NaN poisons its run
        let mut z = Array2::<f32>::zeros((1, 64));
        z[[0, 40]] = f32::NAN;
        let q = Q8Rows::quantize(z.view());
        assert_eq!(q.row(0).1[0], 0.0);
        assert!(q.row(0).1[1].is_nan());
    }

    #[test]
    fn rows_of_no_values_give_the_bias() {
        let fast = FastMatrix::of(&matrix(GgmlType::Q4_1, 5, 0, 2)).expect("a 4-bit type");
        let q = Q8Rows::quantize(Array2::<f32>::zeros((3, 0)).view());
        let bias = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y = fast.linear(&q, Some(&bias));
        assert_eq!(y, Array2::from_shape_fn((3, 5), |(_, o)| bias[o]));
    }

    #[test]
    fn other_types_have_no_fast_layout() {
        for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F32] {
            assert!(FastMatrix::of(&matrix(ty, 4, 256, 1)).is_none(), "{ty}");
        }
    }
}
