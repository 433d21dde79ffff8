//! ggml's weight formats, kept quantized: a [`QuantMatrix`] holds a linear layer's weight as the
//! GGUF file stores it and multiplies by it block by block, never making an f32 copy of it.
//!
//! The formats are ggml's own (`ggml/src/ggml-common.h`, dequantized as `ggml-quants.c` does,
//! each product in the same order, so that a value equals ggml's and the `gguf` package's to
//! the bit). A row of `cols` values is `cols / block_len` blocks laid end to end; every number
//! is little-endian, and the scales `d`, `m` and `dmin` are `f16`:
//!
//! | type   | values | bytes | block                                                         |
//! |--------|--------|-------|---------------------------------------------------------------|
//! | `F32`  | 1      | 4     | the value                                                     |
//! | `F16`  | 1      | 2     | the value                                                     |
//! | `BF16` | 1      | 2     | the value's top 16 bits                                       |
//! | `Q8_0` | 32     | 34    | `d`, `qs[32]` (`i8`): `x = qs·d`                              |
//! | `Q4_0` | 32     | 18    | `d`, `qs[16]`: value `j` in the low nibble of byte `j`, value `j + 16` in its high one, `x = (q − 8)·d` |
//! | `Q4_1` | 32     | 20    | `d`, `m`, `qs[16]` as `Q4_0`: `x = q·d + m`                   |
//! | `Q2_K` | 256    | 84    | `scales[16]` (a 4-bit scale and min a byte), `qs[64]` (2 bits), `d`, `dmin`: `x = d·sc·q − dmin·m` per 16 values |
//! | `Q3_K` | 256    | 110   | `hmask[32]` (high bit), `qs[64]` (low 2 bits), `scales[12]` (sixteen 6-bit scales), `d`: `x = d·(sc − 32)·(q − 4)` per 16 values |
//! | `Q4_K` | 256    | 144   | `d`, `dmin`, `scales[12]` (eight 6-bit scales and mins), `qs[128]`: `x = d·sc·q − dmin·m` per 32 values |
//! | `Q5_K` | 256    | 176   | `d`, `dmin`, `scales[12]` as `Q4_K`, `qh[32]` (fifth bit), `qs[128]` (low 4 bits): `x = d·sc·q − dmin·m` per 32 values |
//! | `Q6_K` | 256    | 210   | `ql[128]` (low 4 bits), `qh[64]` (high 2 bits), `scales[16]` (`i8`), `d`: `x = d·sc·(q − 32)` per 16 values |
//!
//! Any other ggml type is refused where the file is read ([`crate::model::gguf`]), by its name.

use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Arc;

use half::f16;
use half::slice::HalfFloatSliceExt;
use ndarray::{Array2, Array3, ArrayView1, ArrayView2, ArrayViewMut2, Axis};

use crate::linalg::gemm::{matmul_in_one_thread, PackedB};
use crate::linalg::{dot, isa, team};

pub use fast::{FastMatrix, Q8Rows};

mod fast;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;
#[cfg(target_arch = "x86_64")]
mod x86;

/// Values in a K-quant super-block (`QK_K`).
const QK_K: usize = 256;

/// The ggml tensor types attnscope reads, by ggml's names (`ggml_type`).
#[allow(non_camel_case_types)] // ggml's own names, as every GGUF tool prints them
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    /// 5-bit blocks: what llama.cpp's quantizer writes where a row is not a whole number of
    /// K-quant super-blocks (a `Q4_K_M` file's fallback).
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
}

impl GgmlType {
    pub const ALL: [GgmlType; 13] = [
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::Q8_0,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
    ];

    /// The type a GGUF file's tensor info names by `code` (`enum ggml_type`), when attnscope
    /// reads it; [`ggml_type_name`] names the others.
    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.code() == code)
    }

    /// Its number in `enum ggml_type`, as a GGUF file stores it.
    pub const fn code(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::BF16 => 30,
        }
    }

    /// ggml's name for it (`ggml_type_name`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q8_0 => "Q8_0",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q2_K => "Q2_K",
            Self::Q3_K => "Q3_K",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
        }
    }

    /// Values in one block: a row's length is a multiple of it.
    pub const fn block_len(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q8_0 | Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 => 32,
            Self::Q2_K | Self::Q3_K | Self::Q4_K | Self::Q5_K | Self::Q6_K => QK_K,
        }
    }

    /// Bytes in one block (`sizeof(block_…)`).
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q2_K => 84,
            Self::Q3_K => 110,
            Self::Q4_K => 144,
            Self::Q5_K => 176,
            Self::Q6_K => 210,
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// ggml's name for the type numbered `code` in `enum ggml_type`, read or not (as of ggml's
/// 2025 types; the numbers 4, 5 and 31–33, 36–38 belonged to types since removed).
pub fn ggml_type_name(code: u32) -> Option<&'static str> {
    if let Some(t) = GgmlType::from_code(code) {
        return Some(t.name());
    }
    Some(match code {
        9 => "Q8_1",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        40 => "NVFP4",
        41 => "Q1_0",
        _ => return None,
    })
}

/// Why `rows × cols` values of a type cannot be laid out, or do not fit where they are said to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error(
        "a {ty} row is made of blocks of {block} values, but this one has {cols} values \
         (not a multiple of {block})",
        block = ty.block_len()
    )]
    RowLength { ty: GgmlType, cols: usize },

    #[error("{rows} rows of {cols} {ty} values are more bytes than this machine can address")]
    TooLarge {
        ty: GgmlType,
        rows: usize,
        cols: usize,
    },

    #[error(
        "{rows} rows of {cols} {ty} values take {needed} bytes from byte {start}, past the end \
         of the {len} bytes that hold them"
    )]
    OutOfBounds {
        ty: GgmlType,
        rows: usize,
        cols: usize,
        needed: usize,
        start: usize,
        len: usize,
    },
}

/// Bytes of one row of `cols` values of type `ty`.
pub fn row_bytes(ty: GgmlType, cols: usize) -> Result<usize, LayoutError> {
    if !cols.is_multiple_of(ty.block_len()) {
        return Err(LayoutError::RowLength { ty, cols });
    }
    (cols / ty.block_len())
        .checked_mul(ty.block_bytes())
        .ok_or(LayoutError::TooLarge { ty, rows: 1, cols })
}

/// Bytes of `rows` rows of `cols` values of type `ty`.
pub fn bytes_for(ty: GgmlType, rows: usize, cols: usize) -> Result<usize, LayoutError> {
    row_bytes(ty, cols)?
        .checked_mul(rows)
        .ok_or(LayoutError::TooLarge { ty, rows, cols })
}

/// The bytes a file's matrices share: the whole file, held once (a `Vec<u8>`, an `Arc<[u8]>`'s
/// contents, anything that lends its bytes).
pub type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A weight `W` of a linear layer, `(out = rows, in = cols)` as PyTorch stores it (GGUF's
/// `ne = [cols, rows]`), kept in its ggml type inside bytes shared with the rest of its file.
///
/// # Shapes
/// * `W`: `(rows, cols)`, row `r` the `r`-th run of [`row_bytes`]`(ty, cols)` bytes from `start`
#[derive(Clone)]
pub struct QuantMatrix {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    bytes: SharedBytes,
    start: usize,
}

impl fmt::Debug for QuantMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuantMatrix")
            .field("ty", &self.ty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

/// Whether a matrix–vector product of `ty` has a WebAssembly SIMD kernel (`simd128.rs`): the
/// 32-value block types of `Q4_0` and `Q4_1` files. The others go through the portable loop.
/// (x86-64's kernels read more: [`x86::reads`].)
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn has_kernel(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1)
}

/// The fastest way this build and CPU dot weight rows of one type with `x`: the x86-64 kernel the
/// CPU runs (found at run time, [`x86::Kernel::best`]), the WebAssembly SIMD kernel (chosen when
/// compiled, [`has_kernel`]), or else the portable loops the caller gives.
#[derive(Debug, Clone, Copy)]
struct RowKernel {
    /// (Read by the kernels only: the portable loops are the caller's.)
    #[cfg_attr(
        not(any(
            target_arch = "x86_64",
            all(target_arch = "wasm32", target_feature = "simd128")
        )),
        allow(dead_code)
    )]
    ty: GgmlType,
    #[cfg(target_arch = "x86_64")]
    x86: Option<x86::Kernel>,
}

impl RowKernel {
    fn best(ty: GgmlType) -> Self {
        Self {
            ty,
            #[cfg(target_arch = "x86_64")]
            x86: x86::Kernel::best(ty),
        }
    }

    /// Whether a kernel written for the instruction set reads the rows (not the portable loops).
    fn by_hand(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return self.x86.is_some();
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return has_kernel(self.ty);
        #[allow(unreachable_code)]
        false
    }

    /// `R` weight rows dotted with `x` (`sums`: `Σ x` of each run of 32 values) by the kernel,
    /// or by `portable` where there is none.
    ///
    /// # Shapes
    /// * `w`: `R × (one row's bytes)`, `x`: `(cols,)`, `sums`: `(cols / 32,)` → `(R,)`
    #[inline(always)]
    #[cfg_attr(
        not(any(
            target_arch = "x86_64",
            all(target_arch = "wasm32", target_feature = "simd128")
        )),
        allow(unused_variables)
    )]
    fn dots<const R: usize>(
        self,
        w: [&[u8]; R],
        x: &[f32],
        sums: &[f32],
        portable: impl FnOnce() -> [f32; R],
    ) -> [f32; R] {
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = self.x86 {
            // SAFETY: `Kernel::best` found it on this CPU
            return unsafe { x86::dot_rows(k, self.ty, w, x, sums) };
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        if has_kernel(self.ty) {
            return simd128::dot_rows(self.ty, w, x, sums);
        }
        portable()
    }
}

/// Rows of `x` from which a product goes through the tiled matrix product rather than one
/// weight row at a time (a decoding step has 1).
const GEMM_MIN_INPUTS: usize = 8;

/// Weight rows a matrix–vector product takes together, reading each value of `x` once for them.
const ROWS_TOGETHER: usize = 4;

/// Weight rows dequantized together for the tiled product, its `A`: four of the AVX-512
/// micro-kernel's 12-row tiles, twelve of wasm's 4-row ones. Gemma 3's prefill of 64 tokens on
/// 2 threads measured 88–91 ms against 93–95 with tiles of 64 rows (fewer, and the last 4 rows
/// of each a tile of their own).
const GEMM_TILE_ROWS: usize = 48;

thread_local! {
    /// The weight rows a thread's tile of [`QuantMatrix::matmul_t`] dequantizes, reused by every
    /// product.
    static TILE: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
    /// The row a thread's task of the matrix–vector product converts a float weight row into.
    static ROW: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
    /// The product of a thread's tile of [`QuantMatrix::matmul_t`] with `xᵀ`, reused likewise.
    static PRODUCT: std::cell::Cell<Vec<MaybeUninit<f32>>> =
        const { std::cell::Cell::new(Vec::new()) };
}

/// Multiply-adds below which a task is not worth handing to another thread.
const TASK_MIN_WORK: usize = 1 << 16;

/// Multiply-adds below which a task is not worth a decoding step's team claiming
/// ([`team::for_each_task`]): about 10 µs in wasm.
const TEAM_TASK_MIN_WORK: usize = 1 << 15;

impl QuantMatrix {
    /// The matrix of `rows × cols` values of type `ty` found `start` bytes into `bytes`.
    pub fn new(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: SharedBytes,
        start: usize,
    ) -> Result<Self, LayoutError> {
        let row_bytes = row_bytes(ty, cols)?;
        let needed = bytes_for(ty, rows, cols)?;
        let len = (*bytes).as_ref().len();
        if start.checked_add(needed).is_none_or(|end| end > len) {
            return Err(LayoutError::OutOfBounds {
                ty,
                rows,
                cols,
                needed,
                start,
                len,
            });
        }
        Ok(Self {
            ty,
            rows,
            cols,
            row_bytes,
            bytes,
            start,
        })
    }

    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `(rows, cols)`.
    pub fn dim(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Its rows `rows` (within [`QuantMatrix::rows`]), sharing its bytes.
    pub fn row_range(&self, rows: std::ops::Range<usize>) -> Self {
        assert!(
            rows.start <= rows.end && rows.end <= self.rows,
            "rows {rows:?} of {}",
            self.rows
        );
        Self {
            rows: rows.len(),
            start: self.start + rows.start * self.row_bytes,
            bytes: self.bytes.clone(),
            ..*self
        }
    }

    /// The matrix's bytes, row after row.
    pub fn data(&self) -> &[u8] {
        &(*self.bytes).as_ref()[self.start..self.start + self.rows * self.row_bytes]
    }

    /// The bytes of row `r`.
    fn row_data(&self, r: usize) -> &[u8] {
        &self.data()[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Row `r` as f32, written into `out`: the reference every product is checked against.
    ///
    /// # Shapes
    /// * `out`: `(cols,)`
    ///
    /// # Panics
    /// If `r` is not a row or `out` is not `cols` long.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows, "row {r} of a {}-row matrix", self.rows);
        assert_eq!(out.len(), self.cols, "a row holds {} values", self.cols);
        dequantize(self.ty, self.row_data(r), out);
    }

    /// The whole matrix as f32: for the small tensors (norms' weights, tests) that are kept
    /// as arrays.
    ///
    /// # Shapes
    /// → `(rows, cols)`
    pub fn dequantize(&self) -> Array2<f32> {
        let mut w = Array2::zeros((self.rows, self.cols));
        for (r, mut row) in w.rows_mut().into_iter().enumerate() {
            let out = row
                .as_slice_mut()
                .expect("a new array's rows are contiguous");
            self.dequantize_row(r, out);
        }
        w
    }

    /// `x · Wᵀ`, from the quantized bytes, the weight rows shared among rayon's threads. Below
    /// [`GEMM_MIN_INPUTS`] rows of `x` (decoding, a matrix–vector product), each weight row is
    /// dotted with every row of `x` straight from its blocks, never written out as f32
    /// ([`dot_row`], [`dot_32s`], or the 32-value blocks' kernels: `x86.rs`, `simd128.rs`);
    /// from there on (a prompt), tiles of [`GEMM_TILE_ROWS`] weight rows are dequantized into a
    /// buffer of the thread's and go through the engine's matrix product.
    ///
    /// # Shapes
    /// * `x`: `(n, cols)` → `(n, rows)`
    ///
    /// # Panics
    /// If `x` does not have `cols` columns (the callers' shapes are checked where the model is
    /// loaded).
    pub fn matmul_t(&self, x: ArrayView2<f32>) -> Array2<f32> {
        self.product(x, None)
    }

    /// `x · Wᵀ + b`, as [`QuantMatrix::matmul_t`] and then the bias added, to the same bits; a
    /// prompt's bias is added by each tile's thread as it writes its values (added after, it
    /// was a pass over the whole output on one thread: most of a long prompt's projections
    /// have a bias of zeros).
    ///
    /// # Shapes
    /// * `x`: `(n, cols)`, `bias`: `(rows,)` → `(n, rows)`
    ///
    /// # Panics
    /// As [`QuantMatrix::matmul_t`], or if `bias` does not hold `rows` values.
    pub fn linear(&self, x: ArrayView2<f32>, bias: ArrayView1<f32>) -> Array2<f32> {
        assert_eq!(
            bias.len(),
            self.rows,
            "x · Wᵀ + b: b for {} rows",
            self.rows
        );
        let bias = bias.as_standard_layout();
        let bias = bias
            .as_slice()
            .expect("a standard-layout array is contiguous");
        self.product(x, Some(bias))
    }

    /// `x · Wᵀ`, plus `bias` where given (see [`QuantMatrix::linear`]).
    fn product(&self, x: ArrayView2<f32>, bias: Option<&[f32]>) -> Array2<f32> {
        let (n, cols) = x.dim();
        assert_eq!(
            cols, self.cols,
            "x · Wᵀ: x has {cols} columns, W ({} × {}) takes {}",
            self.rows, self.cols, self.cols
        );
        let x = x.as_standard_layout();
        let x = x.view();
        let with_bias = |mut y: Array2<f32>| {
            if let Some(bias) = bias {
                y += &ArrayView1::from(bias);
            }
            y
        };
        if cols == 0 {
            return with_bias(Array2::zeros((n, self.rows)));
        }
        let mut out = Array2::<f32>::uninit((n, self.rows));
        if n > 0 && self.rows > 0 {
            if n < GEMM_MIN_INPUTS {
                self.matvec_into(x, out.view_mut());
            } else {
                self.gemm_into(x, bias, out.view_mut());
                // SAFETY: the product writes every value of `out`, its bias added
                return unsafe { out.assume_init() };
            }
        }
        // SAFETY: both products write every value of `out` (there is none when n or rows is 0)
        with_bias(unsafe { out.assume_init() })
    }

    /// `x · Wᵀ` in parts: for each row of `x` and each weight row, its dot products over each
    /// run of `part` columns, apart (a head's columns of an output projection, each head's
    /// write: `crate::analysis::value_weighted`). Where a run holds whole blocks, each part is
    /// dotted straight from them by the kernels [`QuantMatrix::matmul_t`] uses; else each weight
    /// row is dequantized once into a row of scratch.
    ///
    /// # Shapes
    /// * `x`: `(n, cols)` → `(n, cols / part, rows)`
    ///
    /// # Panics
    /// If `x` does not have `cols` columns, or `part` does not divide them.
    pub fn matmul_t_parts(&self, x: ArrayView2<f32>, part: usize) -> Array3<f32> {
        let (n, cols) = x.dim();
        assert!(
            cols == self.cols && part > 0 && cols.is_multiple_of(part),
            "x · Wᵀ in parts of {part}: x has {cols} columns, W ({} × {}) takes {}",
            self.rows,
            self.cols,
            self.cols
        );
        let parts = cols / part;
        let x = x.as_standard_layout();
        let xs = x.as_slice().expect("standard layout");
        let mut out = Array3::<f32>::zeros((n, parts, self.rows));
        let whole = part.is_multiple_of(self.ty.block_len()) && part.is_multiple_of(32);
        if whole {
            let sums: Vec<f32> = xs.chunks_exact(32).map(|run| run.iter().sum()).collect();
            let (part_bytes, per_part) = (
                part / self.ty.block_len() * self.ty.block_bytes(),
                part / 32,
            );
            let kernel = RowKernel::best(self.ty);
            let mut scratch = vec![0.0f32; part];
            isa::vectorised(
                #[inline(always)]
                || {
                    for r in 0..self.rows {
                        let row = self.row_data(r);
                        for i in 0..n {
                            for p in 0..parts {
                                let w = &row[p * part_bytes..(p + 1) * part_bytes];
                                let x = &xs[i * cols + p * part..][..part];
                                let sums = &sums[(i * cols + p * part) / 32..][..per_part];
                                let [d] = kernel.dots([w], x, sums, || {
                                    [dot_row(self.ty, w, x, sums, &mut scratch)]
                                });
                                out[[i, p, r]] = d;
                            }
                        }
                    }
                },
            );
        } else {
            let mut row = vec![0.0f32; cols];
            for r in 0..self.rows {
                self.dequantize_row(r, &mut row);
                for i in 0..n {
                    for p in 0..parts {
                        out[[i, p, r]] =
                            dot(&row[p * part..][..part], &xs[i * cols + p * part..][..part]);
                    }
                }
            }
        }
        out
    }

    /// `x · Wᵀ` into `out`, each weight row read once from its blocks and dotted with every
    /// row of `x` ([`dot_row`], [`dot_32s`]; four rows at a time by the x86-64 kernel where
    /// there is one for the type, and for 32-value blocks by the WebAssembly SIMD kernel).
    fn matvec_into(&self, x: ArrayView2<f32>, mut out: ArrayViewMut2<MaybeUninit<f32>>) {
        let (n, cols) = x.dim();
        let xs = x.as_slice().expect("standard layout");
        // each row of x summed over every run of 32 values: the blocks' offsets multiply them
        let sums_per_row = cols / 32;
        let sums: Vec<f32> = xs
            .chunks_exact(cols)
            .flat_map(|row| row.chunks_exact(32).map(|run| run.iter().sum::<f32>()))
            .collect();
        let (data, row_bytes) = (self.data(), self.row_bytes);
        let kernel = RowKernel::best(self.ty);
        // a few tasks per thread, none too small to be worth handing over; a decoding step's
        // team claims its tasks with an atomic swap, and takes smaller ones
        let per_row = (n * cols).max(1);
        let chunk = if team::leading() {
            TEAM_TASK_MIN_WORK
                .div_ceil(per_row)
                .next_multiple_of(ROWS_TOGETHER)
        } else {
            TASK_MIN_WORK
                .div_ceil(per_row)
                .max(self.rows.div_ceil(4 * rayon::current_num_threads()))
                .max(1)
        };
        let parts = out.axis_chunks_iter_mut(Axis(1), chunk).enumerate();
        team::for_each_part(parts, |(c, mut out)| {
            // the float types are converted into the thread's row of scratch, kept from call
            // to call (a decoding step's team takes hundreds of tasks); blocks need none
            let mut kept = ROW.take();
            kept.resize(kept.len().max(cols), 0.0);
            let scratch = &mut kept[..cols];
            // compiled for the widest instruction set the CPU has (AVX2 natively)
            isa::vectorised(
                #[inline(always)]
                || {
                    let rows = &data[c * chunk * row_bytes..][..out.ncols() * row_bytes];
                    // four weight rows at a time: 32-value blocks read each x once for the
                    // four; the x86 kernels of the K-quants take them in turn (the portable
                    // K-quant loops, one row at a time, gain nothing)
                    let together = if self.ty.block_len() == 32 || kernel.by_hand() {
                        rows.len() / (ROWS_TOGETHER * row_bytes)
                    } else {
                        0
                    };
                    let (fours, rest) = rows.split_at(together * ROWS_TOGETHER * row_bytes);
                    for (f, w) in fours.chunks_exact(ROWS_TOGETHER * row_bytes).enumerate() {
                        let w: [&[u8]; ROWS_TOGETHER] =
                            std::array::from_fn(|r| &w[r * row_bytes..(r + 1) * row_bytes]);
                        for (i, x) in xs.chunks_exact(cols).enumerate() {
                            let sums = &sums[i * sums_per_row..(i + 1) * sums_per_row];
                            let dots = kernel.dots(w, x, sums, || dot_32s(self.ty, w, x, sums));
                            for (r, d) in dots.into_iter().enumerate() {
                                out[[i, ROWS_TOGETHER * f + r]].write(d);
                            }
                        }
                    }
                    let done = out.ncols() - rest.len() / row_bytes;
                    for (j, w) in rest.chunks_exact(row_bytes).enumerate() {
                        for (i, x) in xs.chunks_exact(cols).enumerate() {
                            let sums = &sums[i * sums_per_row..(i + 1) * sums_per_row];
                            out[[i, done + j]].write(dot_row(self.ty, w, x, sums, scratch));
                        }
                    }
                },
            );
            ROW.set(kept);
        });
    }

    /// `x · Wᵀ` into `out`, tile by tile of weight rows, each dequantized and multiplied by the
    /// engine's matrix product on one thread as `W_tile · xᵀ`: the tile is the product's left
    /// operand, read as it is, and `xᵀ` is packed once for every tile. (Packing each tile as the
    /// right operand transposed it value by value: a fifth of a prompt's pass.) Each tile's
    /// `(rows, n)` product is written transposed into its columns of `out`.
    fn gemm_into(
        &self,
        x: ArrayView2<f32>,
        bias: Option<&[f32]>,
        mut out: ArrayViewMut2<MaybeUninit<f32>>,
    ) {
        let (n, cols) = x.dim();
        let xt = PackedB::from_transposed_shared(x); // xᵀ, (cols, n)
        let tiles = out
            .axis_chunks_iter_mut(Axis(1), GEMM_TILE_ROWS)
            .enumerate();
        team::for_each_part(tiles, |(t, mut out)| {
            let rows = out.ncols();
            // the thread's tile and its product, kept from call to call: a new tile was zeroed
            // for each of rayon's splits (a `memset` of up to 512 KB, 3 % of a prompt's pass)
            let (mut tile, mut product) = (TILE.take(), PRODUCT.take());
            tile.resize(tile.len().max(rows * cols), 0.0);
            product.resize_with(product.len().max(rows * n), MaybeUninit::uninit);
            isa::vectorised(
                #[inline(always)]
                || {
                    for (j, w) in tile.chunks_exact_mut(cols).take(rows).enumerate() {
                        dequantize(self.ty, self.row_data(t * GEMM_TILE_ROWS + j), w);
                    }
                },
            );
            let weights = ArrayView2::from_shape((rows, cols), &tile[..rows * cols])
                .expect("the tile holds rows × cols values");
            let into = ArrayViewMut2::from_shape((rows, n), &mut product[..rows * n])
                .expect("the product holds rows × n values");
            let into = matmul_in_one_thread(weights, &xt, 1.0, None, into); // (rows, n)
            let into = into.as_slice().expect("the product's rows × n, in order");
            let bias = bias.map(|b| &b[t * GEMM_TILE_ROWS..][..rows]);
            for (i, mut out) in out.rows_mut().into_iter().enumerate() {
                let out = out.as_slice_mut().expect("a row of x · Wᵀ's columns");
                // column i of the product, (rows,)
                write_row(out, into[i..].iter().step_by(n), bias);
            }
            TILE.set(tile);
            PRODUCT.set(product);
        });
    }
}

/// `values` written into `out`, each plus its `bias` where given: two loops, as adding a bias of
/// zero would turn −0.0 into +0.0 (not the same bits as no bias).
///
/// # Shapes
/// * `out`, `values`, `bias`: the same length
#[inline(always)]
fn write_row<'a>(
    out: &mut [MaybeUninit<f32>],
    values: impl IntoIterator<Item = &'a f32>,
    bias: Option<&[f32]>,
) {
    match bias {
        Some(bias) => {
            for ((o, &v), &b) in out.iter_mut().zip(values).zip(bias) {
                o.write(v + b);
            }
        }
        None => {
            for (o, &v) in out.iter_mut().zip(values) {
                o.write(v);
            }
        }
    }
}

/// A weight row of type `ty` dotted with `x`, straight from its blocks: each block's
/// integers are multiplied by `x` as they are unpacked and the block's scale is applied once to
/// their sum (`Σ (d·q + m)·x = d·Σ q·x + m·Σ x`, with `Σ x` from `sums`); the float types go
/// through `scratch`.
///
/// # Shapes
/// * `w`: one row's bytes, `x`: `(cols,)`, `sums`: `(cols / 32,)`, `scratch`: `(cols,)`
#[inline(always)]
fn dot_row(ty: GgmlType, w: &[u8], x: &[f32], sums: &[f32], scratch: &mut [f32]) -> f32 {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            dequantize(ty, w, scratch);
            dot(scratch, x)
        }
        GgmlType::Q2_K => dot_q2_k(w, x),
        GgmlType::Q3_K => dot_q3_k(w, x),
        GgmlType::Q4_K => dot_q4_k(w, x, sums),
        GgmlType::Q5_K => dot_q5_k(w, x, sums),
        GgmlType::Q6_K => dot_q6_k(w, x),
        _ => {
            let [d] = dot_32s(ty, [w], x, sums);
            d
        }
    }
}

/// [`dot_row`] of `R` rows of 32-value blocks at once, each value of `x` read once for them.
///
/// # Panics
/// If `ty`'s blocks are not of 32 values (F32, F16, BF16 and the K-quants).
#[inline(always)]
fn dot_32s<const R: usize>(ty: GgmlType, w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    match ty {
        GgmlType::Q8_0 => dot_q8_0(w, x, sums),
        GgmlType::Q4_0 => dot_q4_0(w, x, sums),
        GgmlType::Q4_1 => dot_q4_1(w, x, sums),
        GgmlType::Q5_0 => dot_q5_0(w, x, sums),
        GgmlType::Q5_1 => dot_q5_1(w, x, sums),
        _ => unreachable!("{ty} has no blocks of 32 values"),
    }
}

/// Sixteen lanes that the blocks' partial sums are added into (one AVX-512 register, two AVX2
/// or four `simd128` ones), summed once at the end of a row.
type Lanes = [f32; 16];

/// `acc += d · t`, lane by lane.
#[inline(always)]
fn add_scaled(acc: &mut Lanes, d: f32, t: &Lanes) {
    for k in 0..16 {
        acc[k] += d * t[k];
    }
}

/// `Σ q·x` of 32 values in two runs of 16 (`q(j)` is value `j` of a run's first half, `q(j + 16)`
/// of its second), lane by lane.
#[inline(always)]
fn pairs(x: &[f32; 32], q: impl Fn(usize) -> (f32, f32)) -> Lanes {
    let mut t = [0.0; 16];
    for j in 0..16 {
        let (lo, hi) = q(j);
        t[j] = lo * x[j] + hi * x[j + 16];
    }
    t
}

/// `R` rows of 32-value blocks of `B` bytes, each dotted with `x` (read once for all of them):
/// `q(block, j)` gives a block's values `j` and `j + 16` as integers, multiplied by `x` lane by
/// lane; then the block's `f16` scale at byte `d_at` multiplies their sum once (and its offset at
/// `m_at`, if any, the block's `Σ x` from `sums`).
///
/// # Shapes
/// * `w`: `R × (cols / 32 · B,)` bytes, `x`: `(cols,)`, `sums`: `(cols / 32,)` → `(R,)`
#[inline(always)]
fn dot_blocks<const B: usize, const R: usize>(
    w: [&[u8]; R],
    x: &[f32],
    sums: &[f32],
    d_at: usize,
    m_at: Option<usize>,
    q: impl Fn(&[u8; B], usize) -> (f32, f32),
) -> [f32; R] {
    let (mut acc, mut offsets) = ([[0.0; 16]; R], [0.0; R]);
    let blocks = w.map(|w| w.as_chunks::<B>().0);
    for (i, (x, s)) in x.as_chunks::<32>().0.iter().zip(sums).enumerate() {
        for r in 0..R {
            let b = &blocks[r][i];
            let t = pairs(x, |j| q(b, j));
            add_scaled(&mut acc[r], half_at(b, d_at), &t);
            if let Some(m_at) = m_at {
                offsets[r] += half_at(b, m_at) * s;
            }
        }
    }
    std::array::from_fn(|r| acc[r].iter().sum::<f32>() + offsets[r])
}

#[inline(always)]
fn dot_q8_0<const R: usize>(w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    dot_blocks::<34, R>(w, x, sums, 0, None, |b, j| {
        (f32::from(b[2 + j] as i8), f32::from(b[18 + j] as i8))
    })
}

#[inline(always)]
fn dot_q4_0<const R: usize>(w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    dot_blocks::<18, R>(w, x, sums, 0, None, |b, j| {
        let q = b[2 + j];
        (
            f32::from((q & 0x0F) as i8 - 8),
            f32::from((q >> 4) as i8 - 8),
        )
    })
}

#[inline(always)]
fn dot_q4_1<const R: usize>(w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    dot_blocks::<20, R>(w, x, sums, 0, Some(2), |b, j| {
        let q = b[4 + j];
        (f32::from(q & 0x0F), f32::from(q >> 4))
    })
}

#[inline(always)]
fn dot_q5_0<const R: usize>(w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    dot_blocks::<22, R>(w, x, sums, 0, None, |b, j| {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let (lo, hi) = five_bits(b[6 + j], qh, j);
        ((i32::from(lo) - 16) as f32, (i32::from(hi) - 16) as f32)
    })
}

#[inline(always)]
fn dot_q5_1<const R: usize>(w: [&[u8]; R], x: &[f32], sums: &[f32]) -> [f32; R] {
    dot_blocks::<24, R>(w, x, sums, 0, Some(2), |b, j| {
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let (lo, hi) = five_bits(b[8 + j], qh, j);
        (f32::from(lo), f32::from(hi))
    })
}

/// Each run of 64 values is 32 bytes, low nibbles (scale `2i`) then high (`2i + 1`): two
/// sub-blocks of 32, each `d·sc·Σ q·x − dmin·m·Σ x`.
#[inline(always)]
fn dot_q4_k(w: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    let (mut acc, mut offsets) = ([0.0; 16], 0.0);
    let runs = x.as_chunks::<QK_K>().0.iter().zip(sums.as_chunks::<8>().0);
    for (b, (x, s)) in w.as_chunks::<144>().0.iter().zip(runs) {
        let (d, dmin) = (half_at(b, 0), half_at(b, 2));
        let scales = &b[4..16];
        for i in 0..4 {
            let qs: &[u8; 32] = b[16 + 32 * i..48 + 32 * i].try_into().unwrap();
            for (k, x) in x[64 * i..64 * i + 64]
                .as_chunks::<32>()
                .0
                .iter()
                .enumerate()
            {
                let (sc, m) = scale_min_k4(2 * i + k, scales);
                let t = pairs(x, |j| {
                    let shift = 4 * k as u32;
                    (
                        f32::from((qs[j] >> shift) & 0x0F),
                        f32::from((qs[j + 16] >> shift) & 0x0F),
                    )
                });
                add_scaled(&mut acc, d * f32::from(sc), &t);
                offsets -= dmin * f32::from(m) * s[2 * i + k];
            }
        }
    }
    acc.iter().sum::<f32>() + offsets
}

/// As [`dot_q4_k`], each value topped by its fifth bit: value `l + 32j` takes bit `j` of
/// `qh[l]`.
#[inline(always)]
fn dot_q5_k(w: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    let (mut acc, mut offsets) = ([0.0; 16], 0.0);
    let runs = x.as_chunks::<QK_K>().0.iter().zip(sums.as_chunks::<8>().0);
    for (b, (x, s)) in w.as_chunks::<176>().0.iter().zip(runs) {
        let (d, dmin) = (half_at(b, 0), half_at(b, 2));
        let scales = &b[4..16];
        let qh: &[u8; 32] = b[16..48].try_into().unwrap();
        for i in 0..4 {
            let qs: &[u8; 32] = b[48 + 32 * i..80 + 32 * i].try_into().unwrap();
            for (k, x) in x[64 * i..64 * i + 64]
                .as_chunks::<32>()
                .0
                .iter()
                .enumerate()
            {
                let j = 2 * i + k;
                let (sc, m) = scale_min_k4(j, scales);
                let five =
                    |l: usize| f32::from(((qs[l] >> (4 * k)) & 0x0F) | (((qh[l] >> j) & 1) << 4));
                let t = pairs(x, |l| (five(l), five(l + 16)));
                add_scaled(&mut acc, d * f32::from(sc), &t);
                offsets -= dmin * f32::from(m) * s[j];
            }
        }
    }
    acc.iter().sum::<f32>() + offsets
}

/// In each half of 128 values, value `l + 32k` takes its low 2 bits from bits `2k` of
/// `qs[l]` and its high bit from bit `4·half + k` of `hmask[l]`; each run of 16 has its scale.
#[inline(always)]
fn dot_q3_k(w: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0.0; 16];
    for (b, x) in w.as_chunks::<110>().0.iter().zip(x.as_chunks::<QK_K>().0) {
        let d = half_at(b, 108);
        let sc = scales_q3_k(&b[96..108]);
        for half in 0..2 {
            for k in 0..4 {
                for run in 0..2 {
                    let at = 128 * half + 32 * k + 16 * run;
                    let x: &[f32; 16] = x[at..at + 16].try_into().unwrap();
                    let mut t: Lanes = [0.0; 16];
                    for j in 0..16 {
                        let l = 16 * run + j;
                        let low = (b[32 + 32 * half + l] >> (2 * k)) & 3;
                        let high = (b[l] >> (4 * half + k)) & 1;
                        t[j] = f32::from((low | (high << 2)) as i8 - 4) * x[j];
                    }
                    add_scaled(&mut acc, d * f32::from(sc[at / 16]), &t);
                }
            }
        }
    }
    acc.iter().sum()
}

/// In each half of 128 values, value `l + 32k` is bits `2k` of `qs[l]`; each run of 16 has its
/// scale and min (`d·sc·Σ q·x − dmin·m·Σ x`, the mins' terms added lane by lane apart).
#[inline(always)]
fn dot_q2_k(w: &[u8], x: &[f32]) -> f32 {
    let (mut acc, mut offsets) = ([0.0; 16], [0.0; 16]);
    for (b, x) in w.as_chunks::<84>().0.iter().zip(x.as_chunks::<QK_K>().0) {
        let (d, dmin) = (half_at(b, 80), half_at(b, 82));
        for half in 0..2 {
            for k in 0..4 {
                for run in 0..2 {
                    let at = 128 * half + 32 * k + 16 * run;
                    let x: &[f32; 16] = x[at..at + 16].try_into().unwrap();
                    let qs = 16 + 32 * half + 16 * run;
                    let mut t: Lanes = [0.0; 16];
                    for j in 0..16 {
                        t[j] = f32::from((b[qs + j] >> (2 * k)) & 3) * x[j];
                    }
                    let s = b[at / 16];
                    add_scaled(&mut acc, d * f32::from(s & 0x0F), &t);
                    add_scaled(&mut offsets, dmin * f32::from(s >> 4), x);
                }
            }
        }
    }
    acc.iter().sum::<f32>() - offsets.iter().sum::<f32>()
}

/// In each half of 128 values, value `l + 32k` takes its low 4 bits from `ql[l + 32(k & 1)]`
/// and its high 2 from bits `2k` of `qh[l]`; each run of 16 has its scale.
#[inline(always)]
fn dot_q6_k(w: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0.0; 16];
    for (b, x) in w.as_chunks::<210>().0.iter().zip(x.as_chunks::<QK_K>().0) {
        let d = half_at(b, 208);
        for half in 0..2 {
            let (ql, qh, sc) = (64 * half, 128 + 32 * half, 192 + 8 * half);
            for k in 0..4 {
                for run in 0..2 {
                    let at = 128 * half + 32 * k + 16 * run;
                    let x: &[f32; 16] = x[at..at + 16].try_into().unwrap();
                    let mut t: Lanes = [0.0; 16];
                    for j in 0..16 {
                        let l = 16 * run + j;
                        let low = (b[ql + l + 32 * (k & 1)] >> (4 * (k / 2))) & 0x0F;
                        let high = (b[qh + l] >> (2 * k)) & 3;
                        t[j] = f32::from((low | (high << 4)) as i8 - 32) * x[j];
                    }
                    add_scaled(&mut acc, d * f32::from(b[sc + 2 * k + run] as i8), &t);
                }
            }
        }
    }
    acc.iter().sum()
}

/// Dequantizes whole blocks of type `ty` into `out`.
///
/// # Shapes
/// * `bytes`: `(k / block_len · block_bytes,)`, `out`: `(k,)`
#[inline(always)]
fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    match ty {
        GgmlType::F32 => {
            for (b, y) in bytes.as_chunks::<4>().0.iter().zip(out) {
                *y = f32::from_le_bytes(*b);
            }
        }
        GgmlType::F16 => f16_row(bytes, out),
        GgmlType::BF16 => {
            // a bf16 is an f32's top 16 bits (ggml's GGML_BF16_TO_FP32)
            for (b, y) in bytes.as_chunks::<2>().0.iter().zip(out) {
                *y = f32::from_bits(u32::from(u16::from_le_bytes(*b)) << 16);
            }
        }
        GgmlType::Q8_0 => blocks(bytes, out, q8_0),
        GgmlType::Q4_0 => blocks(bytes, out, q4_0),
        GgmlType::Q4_1 => blocks(bytes, out, q4_1),
        GgmlType::Q5_0 => blocks(bytes, out, q5_0),
        GgmlType::Q5_1 => blocks(bytes, out, q5_1),
        GgmlType::Q2_K => blocks(bytes, out, q2_k),
        GgmlType::Q3_K => blocks(bytes, out, q3_k),
        GgmlType::Q4_K => blocks(bytes, out, q4_k),
        GgmlType::Q5_K => blocks(bytes, out, q5_k),
        GgmlType::Q6_K => blocks(bytes, out, q6_k),
    }
}

/// `block` applied to each block of `B` bytes and its `L` values: fixed sizes, so that LLVM
/// drops the bounds checks and vectorises each block's loops.
#[inline(always)]
fn blocks<const B: usize, const L: usize>(
    bytes: &[u8],
    out: &mut [f32],
    block: fn(&[u8; B], &mut [f32; L]),
) {
    for (b, y) in bytes
        .as_chunks::<B>()
        .0
        .iter()
        .zip(out.as_chunks_mut::<L>().0)
    {
        block(b, y);
    }
}

/// A row of little-endian `f16`, converted 64 at a time by `half`'s slice conversion (F16C
/// where the CPU has it).
#[inline(always)]
fn f16_row(bytes: &[u8], out: &mut [f32]) {
    let mut h = [f16::ZERO; 64];
    for (b, y) in bytes.chunks(128).zip(out.chunks_mut(64)) {
        for (h, b) in h.iter_mut().zip(b.as_chunks::<2>().0) {
            *h = f16::from_le_bytes(*b);
        }
        h[..y.len()].convert_to_f32_slice(y);
    }
}

/// The little-endian `f16` at byte `at`, as f32.
#[inline(always)]
fn half_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// An `f16`'s bits as f32, exactly (as `half`'s conversion), in a few integer operations and
/// no branch, so that it inlines into the blocks' loops: the bits moved into an f32's place are
/// the value times 2⁻¹¹² (a normal number's exponent is 112 short of f32's bias, a subnormal's
/// mantissa lands in an f32 subnormal's), so multiplied back; infinities and NaNs keep an
/// all-ones exponent.
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let (sign, magnitude) = ((h & 0x8000) << 16, (h & 0x7FFF) << 13);
    let scaled = (f32::from_bits(magnitude) * f32::from_bits(0x7780_0000)).to_bits(); // 2¹¹²
    let value = if h & 0x7C00 == 0x7C00 {
        magnitude | 0x7F80_0000
    } else {
        scaled
    };
    f32::from_bits(value | sign)
}

/// `block_q8_0 { d: f16, qs: [i8; 32] }`: `x = qs·d`.
#[inline(always)]
fn q8_0(b: &[u8; 34], y: &mut [f32; 32]) {
    let d = half_at(b, 0);
    for j in 0..32 {
        y[j] = f32::from(b[2 + j] as i8) * d;
    }
}

/// `block_q4_0 { d: f16, qs: [u8; 16] }`: value `j` in the low nibble of `qs[j]`, value `j + 16`
/// in its high nibble, `x = (q − 8)·d`.
#[inline(always)]
fn q4_0(b: &[u8; 18], y: &mut [f32; 32]) {
    let d = half_at(b, 0);
    for j in 0..16 {
        let q = b[2 + j];
        y[j] = f32::from((q & 0x0F) as i8 - 8) * d;
        y[j + 16] = f32::from((q >> 4) as i8 - 8) * d;
    }
}

/// `block_q4_1 { d: f16, m: f16, qs: [u8; 16] }`: nibbles as `Q4_0`, `x = q·d + m`.
#[inline(always)]
fn q4_1(b: &[u8; 20], y: &mut [f32; 32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    for j in 0..16 {
        let q = b[4 + j];
        y[j] = f32::from(q & 0x0F) * d + m;
        y[j + 16] = f32::from(q >> 4) * d + m;
    }
}

/// `block_q5_0 { d: f16, qh: [u8; 4], qs: [u8; 16] }`: value `j` is the low nibble of `qs[j]`
/// (value `j + 16`: its high nibble) topped by bit `j` (`j + 16`) of `qh` as its fifth bit,
/// `x = d·(q − 16)` (`dequantize_row_q5_0`).
#[inline(always)]
fn q5_0(b: &[u8; 22], y: &mut [f32; 32]) {
    let d = half_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for j in 0..16 {
        let (lo, hi) = five_bits(b[6 + j], qh, j);
        y[j] = (i32::from(lo) - 16) as f32 * d;
        y[j + 16] = (i32::from(hi) - 16) as f32 * d;
    }
}

/// `block_q5_1 { d: f16, m: f16, qh: [u8; 4], qs: [u8; 16] }`: as [`q5_0`]'s, `x = d·q + m`.
#[inline(always)]
fn q5_1(b: &[u8; 24], y: &mut [f32; 32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    for j in 0..16 {
        let (lo, hi) = five_bits(b[8 + j], qh, j);
        y[j] = f32::from(lo) * d + m;
        y[j + 16] = f32::from(hi) * d + m;
    }
}

/// Values `j` and `j + 16` of a 5-bit block: `q`'s nibbles, each topped by its bit of `qh`.
#[inline(always)]
fn five_bits(q: u8, qh: u32, j: usize) -> (u8, u8) {
    let lo_high = (((qh >> j) << 4) & 0x10) as u8;
    let hi_high = ((qh >> (j + 12)) & 0x10) as u8;
    ((q & 0x0F) | lo_high, (q >> 4) | hi_high)
}

/// Scale and min `j` (of 8) of a `Q4_K` block's 12 packed bytes (`get_scale_min_k4`): the first
/// four are the low 6 bits of bytes 0–3 and 4–7, the last four a nibble of bytes 8–11 topped by
/// the 2 high bits of bytes 0–3 and 4–7.
#[inline(always)]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// `block_q4_K { d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128] }` over 256 values: each
/// run of 64 values is 32 bytes of `qs`, low nibbles first (scale `2i`), then high (`2i + 1`);
/// `x = (d·sc)·q − dmin·m`.
#[inline(always)]
fn q4_k(b: &[u8; 144], y: &mut [f32; 256]) {
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let scales = &b[4..16];
    for i in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * i, scales);
        let (sc2, m2) = scale_min_k4(2 * i + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
        for l in 0..32 {
            let q = b[16 + 32 * i + l];
            y[64 * i + l] = d1 * f32::from(q & 0x0F) - m1;
            y[64 * i + 32 + l] = d2 * f32::from(q >> 4) - m2;
        }
    }
}

/// `block_q5_K { d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] }` over 256
/// values: as [`q4_k`]'s, each value topped by a fifth bit, value `l + 32j` (`j` = 0..8) taking
/// bit `j` of `qh[l]`; `x = (d·sc)·q − dmin·m` (`dequantize_row_q5_K`).
#[inline(always)]
fn q5_k(b: &[u8; 176], y: &mut [f32; 256]) {
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let scales = &b[4..16];
    for i in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * i, scales);
        let (sc2, m2) = scale_min_k4(2 * i + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
        for l in 0..32 {
            let (q, h) = (b[48 + 32 * i + l], b[16 + l] >> (2 * i));
            let lo = (q & 0x0F) | ((h & 1) << 4);
            let hi = (q >> 4) | (((h >> 1) & 1) << 4);
            y[64 * i + l] = d1 * f32::from(lo) - m1;
            y[64 * i + 32 + l] = d2 * f32::from(hi) - m2;
        }
    }
}

/// The sixteen 6-bit scales of a `Q3_K` block's 12 packed bytes, each less 32, as
/// `dequantize_row_q3_K` unpacks them: scale `j`'s low 4 bits are a nibble of byte `j % 8` (the
/// low one for `j < 8`), its high 2 bits are bits `2(j / 4)` of byte `8 + j % 4`.
#[inline(always)]
fn scales_q3_k(s: &[u8]) -> [i8; 16] {
    std::array::from_fn(|j| {
        let low = (s[j % 8] >> (4 * (j / 8))) & 0x0F;
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// `block_q3_K { hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16 }` over 256 values: in
/// each half of 128, value `l + 32k` (`k` = 0..4, `l` = 0..32) takes its low 2 bits from bits
/// `2k` of `qs[32·half + l]` and its high bit from bit `4·half + k` of `hmask[l]`; scale
/// `(l + 32k) / 16` of [`scales_q3_k`]; `x = (d·sc)·(q − 4)` (`dequantize_row_q3_K`, whose
/// `q − 4` is the low bits less 4 where the high bit is clear).
#[inline(always)]
fn q3_k(b: &[u8; 110], y: &mut [f32; 256]) {
    let d = half_at(b, 108);
    let sc = scales_q3_k(&b[96..108]);
    // d·sc as ggml rounds them
    let scale: [f32; 16] = std::array::from_fn(|j| d * f32::from(sc[j]));
    for half in 0..2 {
        for k in 0..4 {
            for l in 0..32 {
                let low = (b[32 + 32 * half + l] >> (2 * k)) & 3;
                let high = (b[l] >> (4 * half + k)) & 1;
                let at = 128 * half + 32 * k + l;
                y[at] = scale[at / 16] * f32::from((low | (high << 2)) as i8 - 4);
            }
        }
    }
}

/// `block_q2_K { scales: [u8; 16], qs: [u8; 64], d: f16, dmin: f16 }` over 256 values: in each
/// half of 128, value `l + 32k` (`k` = 0..4, `l` = 0..32) is bits `2k` of `qs[32·half + l]`; run
/// `j` of 16 values has the scale `sc` in the low nibble of `scales[j]` and the min `m` in its
/// high one; `x = (d·sc)·q − dmin·m` (`dequantize_row_q2_K`).
#[inline(always)]
fn q2_k(b: &[u8; 84], y: &mut [f32; 256]) {
    let (d, dmin) = (half_at(b, 80), half_at(b, 82));
    for (j, &s) in b[..16].iter().enumerate() {
        let (dl, ml) = (d * f32::from(s & 0x0F), dmin * f32::from(s >> 4));
        // run j is values 16j.. : half j / 8, shift 2k with k = (j / 2) % 4, bytes from 16(j % 2)
        let (half, k, run) = (j / 8, (j / 2) % 4, j % 2);
        for l in 0..16 {
            let q = (b[16 + 32 * half + 16 * run + l] >> (2 * k)) & 3;
            y[16 * j + l] = dl * f32::from(q) - ml;
        }
    }
}

/// `block_q6_K { ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16 }` over 256 values: in
/// each half of 128, value `l + 32k` (`k` = 0..4, `l` = 0..32) takes its low 4 bits from
/// `ql[l + 32(k & 1)]` (low nibble for `k < 2`, high after) and its high 2 from bits `2k` of
/// `qh[l]`; scale `l / 16 + 2k`; `x = (d·sc)·(q − 32)`.
#[inline(always)]
fn q6_k(b: &[u8; 210], y: &mut [f32; 256]) {
    let d = half_at(b, 208);
    for half in 0..2 {
        let (ql, qh, sc) = (64 * half, 128 + 32 * half, 192 + 8 * half);
        // the 8 scales of this half, d·sc as ggml rounds them
        let scale: [f32; 8] = std::array::from_fn(|k| d * f32::from(b[sc + k] as i8));
        for l in 0..32 {
            let h = b[qh + l];
            let q = [
                (b[ql + l] & 0x0F) | ((h & 3) << 4),
                (b[ql + l + 32] & 0x0F) | (((h >> 2) & 3) << 4),
                (b[ql + l] >> 4) | (((h >> 4) & 3) << 4),
                (b[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4),
            ];
            for (k, q) in q.into_iter().enumerate() {
                y[128 * half + l + 32 * k] = scale[l / 16 + 2 * k] * f32::from(q as i8 - 32);
            }
        }
    }
}

/// One block of a quantized type as the integers it is made of, for an engine that lays the
/// blocks out its own way (the GPU's, `engine::gpu::quant`): its `block_len` values written into
/// `q`, unsigned, so that a value is `x = d·(q − zero) + m` with `zero` as below, and the raw
/// bits of its scales appended to `scales` (`d`, `m` and `dmin` as f16 bits):
///
/// | type           | `zero`                  | `scales`                                                |
/// |----------------|-------------------------|---------------------------------------------------------|
/// | `Q8_0`         | 128 (the `i8` plus 128) | `[d]`                                                   |
/// | `Q4_0`, `Q5_0` | 8, 16                   | `[d]`                                                   |
/// | `Q4_1`, `Q5_1` | 0                       | `[d, m]`                                                |
/// | `Q2_K`         | 0                       | `[d, dmin, sc_0 + 16·m_0, …, sc_15 + 16·m_15]` (the file's bytes): values `16j..16j + 16` are `x = (d·sc_j)·q − dmin·m_j` |
/// | `Q3_K`         | 4                       | `[d, sc_0, …, sc_15]` (each `i8`'s bits, the 6-bit scale less 32): values `16j..16j + 16` are `x = (d·sc_j)·(q − 4)` |
/// | `Q4_K`, `Q5_K` | 0                       | `[d, dmin, sc_0 + 256·m_0, …, sc_7 + 256·m_7]`: values `32j..32j + 32` are `x = (d·sc_j)·q − dmin·m_j` |
/// | `Q6_K`         | 32                      | `[d, sc_0, …, sc_15]` (each `i8`'s bits): values `16j..16j + 16` are `x = (d·sc_j)·(q − 32)` |
///
/// `F32`, `F16` and `BF16` are not made of integers: nothing is written for them.
///
/// # Shapes
/// * `b`: `(block_bytes,)`, `q`: `(block_len,)`
#[cfg(feature = "gpu")]
pub(crate) fn block_integers(ty: GgmlType, b: &[u8], q: &mut [u8], scales: &mut Vec<u16>) {
    let bits = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    // values j and j + 16 of a 32-value block: the nibbles of byte `at + j`
    let nibbles = |q: &mut [u8], at: usize| {
        for j in 0..16 {
            (q[j], q[j + 16]) = (b[at + j] & 0x0F, b[at + j] >> 4);
        }
    };
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {}
        GgmlType::Q8_0 => {
            scales.push(bits(0));
            for j in 0..32 {
                q[j] = b[2 + j] ^ 0x80;
            }
        }
        GgmlType::Q4_0 => {
            scales.push(bits(0));
            nibbles(q, 2);
        }
        GgmlType::Q4_1 => {
            scales.extend([bits(0), bits(2)]);
            nibbles(q, 4);
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let at = if ty == GgmlType::Q5_0 {
                scales.push(bits(0));
                2
            } else {
                scales.extend([bits(0), bits(2)]);
                4
            };
            let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
            for j in 0..16 {
                (q[j], q[j + 16]) = five_bits(b[at + 4 + j], qh, j);
            }
        }
        GgmlType::Q4_K => {
            scales.extend([bits(0), bits(2)]);
            scales.extend((0..8).map(|j| {
                let (sc, m) = scale_min_k4(j, &b[4..16]);
                u16::from(sc) | u16::from(m) << 8
            }));
            for i in 0..4 {
                for l in 0..32 {
                    let v = b[16 + 32 * i + l];
                    (q[64 * i + l], q[64 * i + 32 + l]) = (v & 0x0F, v >> 4);
                }
            }
        }
        GgmlType::Q5_K => {
            scales.extend([bits(0), bits(2)]);
            scales.extend((0..8).map(|j| {
                let (sc, m) = scale_min_k4(j, &b[4..16]);
                u16::from(sc) | u16::from(m) << 8
            }));
            // as `q5_k` reads them
            for i in 0..4 {
                for l in 0..32 {
                    let (v, h) = (b[48 + 32 * i + l], b[16 + l] >> (2 * i));
                    q[64 * i + l] = (v & 0x0F) | ((h & 1) << 4);
                    q[64 * i + 32 + l] = (v >> 4) | (((h >> 1) & 1) << 4);
                }
            }
        }
        GgmlType::Q3_K => {
            scales.push(bits(108));
            scales.extend(scales_q3_k(&b[96..108]).map(|sc| u16::from(sc as u8)));
            // as `q3_k` reads them
            for half in 0..2 {
                for k in 0..4 {
                    for l in 0..32 {
                        let low = (b[32 + 32 * half + l] >> (2 * k)) & 3;
                        let high = (b[l] >> (4 * half + k)) & 1;
                        q[128 * half + 32 * k + l] = low | (high << 2);
                    }
                }
            }
        }
        GgmlType::Q2_K => {
            scales.extend([bits(80), bits(82)]);
            scales.extend(b[..16].iter().map(|&s| u16::from(s)));
            for half in 0..2 {
                for k in 0..4 {
                    for l in 0..32 {
                        q[128 * half + 32 * k + l] = (b[16 + 32 * half + l] >> (2 * k)) & 3;
                    }
                }
            }
        }
        GgmlType::Q6_K => {
            scales.push(bits(208));
            scales.extend(b[192..208].iter().map(|&sc| u16::from(sc)));
            // as `q6_k` reads them
            for half in 0..2 {
                let (ql, qh) = (64 * half, 128 + 32 * half);
                for l in 0..32 {
                    let h = b[qh + l];
                    let at = 128 * half + l;
                    q[at] = (b[ql + l] & 0x0F) | ((h & 3) << 4);
                    q[at + 32] = (b[ql + l + 32] & 0x0F) | (((h >> 2) & 3) << 4);
                    q[at + 64] = (b[ql + l] >> 4) | (((h >> 4) & 3) << 4);
                    q[at + 96] = (b[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;
    use ndarray::{s, Array1, Array2};

    /// A deterministic byte stream (xorshift), for blocks of arbitrary bits.
    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed.max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    /// `rows × cols` random blocks of `ty`, each block's `f16` scales set to small finite values
    /// (random bits would make infinities and NaNs).
    pub(super) fn matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> QuantMatrix {
        let mut b = bytes(bytes_for(ty, rows, cols).unwrap(), seed);
        let scale_at: &[usize] = match ty {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => &[],
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 => &[0],
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            GgmlType::Q2_K => &[80, 82],
            GgmlType::Q3_K => &[108],
            GgmlType::Q6_K => &[208],
        };
        for (i, block) in b.chunks_exact_mut(ty.block_bytes()).enumerate() {
            match ty {
                GgmlType::F32 => {
                    block.copy_from_slice(&((i % 97) as f32 / 50.0 - 1.0).to_le_bytes())
                }
                GgmlType::F16 => block
                    .copy_from_slice(&f16::from_f32((i % 89) as f32 / 40.0 - 1.1).to_le_bytes()),
                GgmlType::BF16 => block
                    .copy_from_slice(&bf16::from_f32((i % 83) as f32 / 40.0 - 1.0).to_le_bytes()),
                _ => {}
            }
            for (k, &at) in scale_at.iter().enumerate() {
                let v = 0.01 + 0.001 * ((i * 7 + k * 3) % 13) as f32;
                block[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
            }
        }
        QuantMatrix::new(ty, rows, cols, Arc::new(b), 0).unwrap()
    }

    fn x(n: usize, cols: usize) -> Array2<f32> {
        Array2::from_shape_fn((n, cols), |(i, j)| {
            ((i * 31 + j * 17) % 23) as f32 / 11.0 - 1.0
        })
    }

    #[test]
    fn sizes_are_ggml_s() {
        // sizeof(block_…) in ggml-common.h
        assert_eq!(bytes_for(GgmlType::Q4_K, 2, 512), Ok(2 * 2 * 144));
        assert_eq!(bytes_for(GgmlType::Q6_K, 1, 256), Ok(210));
        assert_eq!(bytes_for(GgmlType::Q5_K, 1, 256), Ok(176));
        assert_eq!(bytes_for(GgmlType::Q3_K, 2, 256), Ok(2 * 110));
        assert_eq!(bytes_for(GgmlType::Q2_K, 1, 512), Ok(2 * 84));
        assert_eq!(bytes_for(GgmlType::Q8_0, 3, 64), Ok(3 * 2 * 34));
        assert_eq!(bytes_for(GgmlType::BF16, 3, 5), Ok(30));
        let e = bytes_for(GgmlType::Q4_K, 1, 100).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a Q4_K row is made of blocks of 256 values, but this one has 100 values (not a \
             multiple of 256)"
        );
        assert!(matches!(
            bytes_for(GgmlType::F32, usize::MAX / 2, 4),
            Err(LayoutError::TooLarge { .. })
        ));
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_code(t.code()), Some(t));
            assert_eq!(ggml_type_name(t.code()), Some(t.name()));
        }
        assert_eq!(ggml_type_name(13), Some("Q5_K"));
        assert_eq!(ggml_type_name(23), Some("IQ4_XS"));
        assert_eq!(ggml_type_name(4), None);
    }

    #[test]
    fn out_of_bounds_is_refused() {
        let e = QuantMatrix::new(GgmlType::Q8_0, 2, 32, Arc::new(vec![0u8; 67]), 0).unwrap_err();
        assert!(e.to_string().contains("take 68 bytes from byte 0"), "{e}");
        let e =
            QuantMatrix::new(GgmlType::F32, 1, 1, Arc::new(vec![0u8; 8]), usize::MAX).unwrap_err();
        assert!(matches!(e, LayoutError::OutOfBounds { .. }), "{e}");
    }

    #[test]
    fn q4_0_nibbles_are_ggml_s_order() {
        // d = 1: byte j holds value j (low) and j + 16 (high)
        let mut b = f16::from_f32(1.0).to_le_bytes().to_vec();
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let m = QuantMatrix::new(GgmlType::Q4_0, 1, 32, Arc::new(b), 0).unwrap();
        let mut y = [0.0; 32];
        m.dequantize_row(0, &mut y);
        for j in 0..16 {
            assert_eq!(y[j], j as f32 - 8.0);
            assert_eq!(y[j + 16], 7.0 - j as f32);
        }
    }

    #[test]
    fn q4_k_scales_unpack_as_ggml() {
        // every 6-bit scale and min distinct, packed as quantize_row_q4_K_ref packs them
        let (ls, lm): ([u8; 8], [u8; 8]) =
            ([1, 5, 9, 63, 17, 33, 48, 62], [2, 6, 10, 0, 20, 40, 50, 61]);
        let mut s = [0u8; 12];
        for j in 0..8 {
            if j < 4 {
                s[j] = ls[j];
                s[j + 4] = lm[j];
            } else {
                s[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
                s[j - 4] |= (ls[j] >> 4) << 6;
                s[j] |= (lm[j] >> 4) << 6;
            }
        }
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &s), (ls[j], lm[j]), "scale {j}");
        }
    }

    #[test]
    fn q3_k_scales_unpack_as_ggml() {
        // every 6-bit scale distinct, packed as quantize_row_q3_K_ref packs them (l = sc + 32)
        let ls: [u8; 16] = [0, 1, 15, 16, 17, 31, 32, 33, 47, 48, 49, 62, 63, 5, 40, 20];
        let mut s = [0u8; 12];
        for (j, &l) in ls.iter().enumerate() {
            if j < 8 {
                s[j] = l & 0xF;
            } else {
                s[j - 8] |= (l & 0xF) << 4;
            }
            s[j % 4 + 8] |= (l >> 4) << (2 * (j / 4));
        }
        let want: [i8; 16] = ls.map(|l| l as i8 - 32);
        assert_eq!(scales_q3_k(&s), want);
    }

    #[test]
    fn f16_converts_as_half_does() {
        for h in 0..=u16::MAX {
            let (got, want) = (f16_to_f32(h), f16::from_bits(h).to_f32());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{h:#06x}: {got} vs {want}"
            );
        }
    }

    /// `x · Wᵀ + b` with the bias added as each tile is written (a prompt) or after (a few
    /// rows) is the same bits as the product with the bias added after it, its 70 rows two
    /// tiles and a part.
    #[test]
    fn a_product_with_its_bias_added_as_it_is_written_is_the_same_bits() {
        for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K] {
            let cols = 2 * ty.block_len().max(32);
            let m = matrix(ty, 70, cols, 3 + ty.code() as u64);
            let bias = Array1::from_shape_fn(70, |j| (j as f32 - 31.5) / 9.0);
            for n in [0, 1, 7, 8, 33] {
                let x = x(n, cols);
                let want = m.matmul_t(x.view()) + &bias;
                let got = m.linear(x.view(), bias.view());
                assert_eq!(got.dim(), (n, 70));
                for ((at, g), w) in got.indexed_iter().zip(&want) {
                    assert_eq!(g.to_bits(), w.to_bits(), "{ty} n={n} at {at:?}: {g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn products_equal_the_dequantized_matrix() {
        for ty in GgmlType::ALL {
            let cols = 2 * ty.block_len().max(32);
            let m = matrix(ty, 70, cols, 7 + ty.code() as u64);
            let w = m.dequantize();
            assert!(w.iter().all(|v| v.is_finite()), "{ty}");
            for n in [0, 1, 3, 7, 8, 33] {
                let x = x(n, cols);
                let want = x.dot(&w.t());
                let got = m.matmul_t(x.view());
                assert_eq!(got.dim(), (n, 70));
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                        "{ty} n={n}: {g} vs {w}"
                    );
                }
            }
            // a strided x gives the same product
            let xt = x(cols, 5);
            let want = xt.t().dot(&w.t());
            let got = m.matmul_t(xt.t());
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{ty} strided: {g} vs {w}"
                );
            }
        }
    }

    /// The products in parts equal each part of the dequantized matrix's product: parts of whole
    /// blocks (from the blocks) and parts that cut blocks (from the dequantized rows).
    #[test]
    fn products_in_parts_equal_the_dequantized_parts() {
        for ty in GgmlType::ALL {
            let block = ty.block_len().max(32);
            let cols = 4 * block;
            let m = matrix(ty, 9, cols, 11 + ty.code() as u64);
            let w = m.dequantize();
            for part in [block, 2 * block, block / 2, 16] {
                for n in [1, 3] {
                    let x = x(n, cols);
                    let got = m.matmul_t_parts(x.view(), part);
                    assert_eq!(got.dim(), (n, cols / part, 9), "{ty} part {part}");
                    for ((i, p, r), g) in got.indexed_iter() {
                        let cut = p * part..(p + 1) * part;
                        let want = x.slice(s![i, cut.clone()]).dot(&w.slice(s![r, cut]));
                        assert!(
                            (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{ty} part {part}, x row {i}, part {p}, weight row {r}: {g} vs {want}"
                        );
                    }
                }
            }
        }
    }

    /// The x86-64 kernels and the portable loop (which the products above take only where the
    /// CPU has no kernel, and wasm always) give the same dots.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_x86_kernels_equal_the_portable_loop() {
        let kernels = x86::Kernel::available();
        if kernels.is_empty() {
            eprintln!("this CPU runs no x86 kernel: only the portable loop runs here");
        }
        for ty in GgmlType::ALL
            .into_iter()
            .filter(|&ty| x86::Kernel::best(ty).is_some())
        {
            let cols = 256 * 3;
            let m = matrix(ty, ROWS_TOGETHER, cols, 11 + ty.code() as u64);
            let x = x(1, cols);
            let x = x.as_slice().unwrap();
            let sums: Vec<f32> = x.chunks_exact(32).map(|r| r.iter().sum()).collect();
            let rows: [&[u8]; ROWS_TOGETHER] = std::array::from_fn(|r| m.row_data(r));
            let want = rows.map(|w| dot_row(ty, w, x, &sums, &mut []));
            for &k in &kernels {
                // SAFETY: `available` found it on this CPU
                let got = unsafe { x86::dot_rows(k, ty, rows, x, &sums) };
                for (r, (g, w)) in got.iter().zip(want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "{ty} row {r}: {k:?} {g} vs portable {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_matrix_may_start_inside_shared_bytes() {
        let m = matrix(GgmlType::Q6_K, 2, 256, 3);
        let mut shared = vec![9u8; 5];
        shared.extend_from_slice(m.data());
        let moved = QuantMatrix::new(GgmlType::Q6_K, 2, 256, Arc::new(shared), 5).unwrap();
        assert_eq!(moved.dequantize(), m.dequantize());
    }
}
