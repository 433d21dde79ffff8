//! The CPU engine's matrix product, `C = α·A·B + bias`, with `B` packed once into column
//! panels: the weights at load, an attention head's keys and values per head.
//!
//! The layout is the one BLIS and ONNX Runtime's MLAS use. `B` is cut into panels of
//! [`NR`] columns, each stored row after row (`k` outer, the `NR` columns inner), so the
//! micro-kernel reads it as one contiguous stream. The micro-kernel keeps an `MR × NR` block
//! of `C` in registers: for each `k` it broadcasts `MR` values of `A` and multiplies them by
//! the panel's row (AVX-512: the rows of two panels), and `C` is written once, with `α` and the
//! bias applied then. `A` (whose rows may be strided, like one head's columns of `Q`) is taken in
//! blocks of [`MC`] × [`KC`] that stay in cache while every panel passes over them; natively,
//! where enough panels read a block, it is first packed into micro-panels of `MR` rows, `k`
//! outer, so that the kernel finds its `MR` values of a `k` side by side at fixed offsets.
//!
//! Natively, a large product's panels are shared among rayon's threads; each output is computed
//! by one thread in the same order whatever their number, so the result is the same bits.
//!
//! The micro-kernel is written with each instruction set's intrinsics: AVX-512 or AVX2 + FMA
//! natively when the CPU has them (detected at run time), else plain Rust (SSE2); in wasm the
//! `f32x4` intrinsics (the build enables `simd128`), with relaxed SIMD's fused multiply-add in
//! the build that enables `relaxed-simd`. (Plain Rust that LLVM vectorised measured 108–114
//! GFLOP/s on one core with AVX-512 and 8 rows; with `A` packed LLVM vectorised it across the
//! rows instead, with gathers, 15× slower.)

use std::mem::MaybeUninit;
use std::ops::Range;

use ndarray::{Array2, ArrayView1, ArrayView2, ArrayViewMut2, CowArray, Ix2, Zip};

use super::isa::Isa;
use super::team;

/// Columns of `B` in a panel: the micro-kernel's width (two `f32x4` in wasm; one AVX-512
/// vector, or two AVX2 vectors, natively).
#[cfg(target_arch = "wasm32")]
pub const NR: usize = 8;
#[cfg(not(target_arch = "wasm32"))]
pub const NR: usize = 16;

/// Rows of `A` (and `C`) the micro-kernel holds at once, by instruction set: `MR × NR / lanes`
/// accumulators, as many as the registers hold beside a panel row and a broadcast. AVX-512:
/// 12 rows of two panels, 24 of 32 `zmm` (the best of 16 products of `(128, 384) × (384,
/// 1152 or 1536)`, `(128, 1536) × (1536, 384)` and `(512, 384) × (384, 1536)` on one core
/// here: 140–151 GFLOP/s; one panel at a time 124–137; 14 rows of one panel 91–134, 8 rows
/// 72–128; before `A` was packed, 8 rows of one panel 109–115); AVX2: 12 of 16 `ymm`; wasm: 8
/// of V8's 16 `xmm` (5 or 6 rows measured 1.5–1.9× slower, from spilling).
#[cfg(target_arch = "wasm32")]
const MR_WASM: usize = 4;
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
const MR_AVX512: usize = 12;
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
const MR_AVX2: usize = 6;
#[cfg(not(target_arch = "wasm32"))]
const MR_OTHER: usize = 4;

/// The depth of one pass of the micro-kernel: an `NR × KC` panel slice stays in L1 (24 KB
/// natively, 12 KB in wasm). 384, a BERT-base or MiniLM layer's width, makes each product with
/// `k = hidden` one pass, so `C` is written once: at 16 tokens, measured against 256, the pass
/// took 12.1 ms instead of 13.5 in Chromium (relaxed SIMD, one thread) and 6.9–7.4 ms instead
/// of 8.0–8.7 natively; 512 and 768 measured the same as 384.
const KC: usize = 384;
/// Rows of `A` per block: an `MC × KC` block of `A` (packed, 108 KB) stays in L2 while the
/// panels stream by. A multiple of every `MR`.
const MC: usize = 72;

/// `B` (`k × n`) packed into panels of [`NR`] columns, the last one padded with zeros.
///
/// # Shapes
/// * `data`: `(⌈n / NR⌉, k, NR)`
#[derive(Debug, Clone, PartialEq)]
pub struct PackedB {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl PackedB {
    /// Packs `B = Wᵀ` from `W` as a linear layer stores it, one output per row (also the
    /// keys of `QKᵀ`, one key per row: a head's columns of `K`, rows strided).
    ///
    /// # Shapes
    /// * `w`: `(n, k)`, giving `B`: `(k, n)`
    pub fn from_transposed(w: ArrayView2<f32>) -> Self {
        Self::transposed(w, Sharing::OneThread)
    }

    /// [`PackedB::from_transposed`] with its panels packed on the team or the pool
    /// ([`team::for_each_part`]): a prompt's `xᵀ` for each projection (a MiB or more, which
    /// one thread packed while the others waited).
    ///
    /// # Shapes
    /// * `w`: `(n, k)`, giving `B`: `(k, n)`
    pub fn from_transposed_shared(w: ArrayView2<f32>) -> Self {
        Self::transposed(w, Sharing::Threads)
    }

    /// `B = Wᵀ` packed, panel by panel, on the calling thread or shared.
    fn transposed(w: ArrayView2<f32>, sharing: Sharing) -> Self {
        /// Panels a task packs where they are shared: 8 × `NR` rows of `W`.
        const PANELS: usize = 8;
        let (n, k) = w.dim();
        let mut data = vec![0.0; n.div_ceil(NR) * k * NR];
        let w = with_contiguous_rows(w);
        let panel_len = (k * NR).max(1);
        // panels `first..` of B into `out`
        let pack = |(first, out): (usize, &mut [f32])| {
            for (panel, out) in (first..).zip(out.chunks_exact_mut(panel_len)) {
                // the panel's rows of W, its columns of B
                let rows: Vec<&[f32]> = (panel * NR..n.min(panel * NR + NR))
                    .map(|i| row_of(&w, i))
                    .collect();
                for (p, out) in out.chunks_exact_mut(NR).enumerate() {
                    for (o, row) in out.iter_mut().zip(&rows) {
                        *o = row[p];
                    }
                }
            }
        };
        match sharing {
            Sharing::OneThread => pack((0, &mut data)),
            Sharing::Threads => team::for_each_part(
                data.chunks_mut(panel_len * PANELS)
                    .enumerate()
                    .map(|(i, out)| (i * PANELS, out)),
                pack,
            ),
        }
        Self { k, n, data }
    }

    /// Packs `B` as it is (the values of `P·V`, one key per row: a head's columns of `V`, rows
    /// strided). Each row of `B` is read once and copied into every panel.
    ///
    /// # Shapes
    /// * `b`: `(k, n)`
    pub fn from_matrix(b: ArrayView2<f32>) -> Self {
        let (k, n) = b.dim();
        let mut data = vec![0.0; n.div_ceil(NR) * k * NR];
        let b = with_contiguous_rows(b);
        for p in 0..k {
            // row p of B: NR values at row p of each panel
            for (panel, cols) in row_of(&b, p).chunks(NR).enumerate() {
                let at = (panel * k + p) * NR;
                data[at..at + cols.len()].copy_from_slice(cols);
            }
        }
        Self { k, n, data }
    }

    /// `(k, n)`, the shape of `B`.
    pub fn dim(&self) -> (usize, usize) {
        (self.k, self.n)
    }

    fn panel(&self, j: usize) -> &[f32] {
        &self.data[j * self.k * NR..(j + 1) * self.k * NR]
    }
}

/// `x` with each row contiguous: `x` itself where its columns are adjacent (a head's columns
/// of a projection are, their rows strided), else a standard-layout copy.
fn with_contiguous_rows(x: ArrayView2<f32>) -> CowArray<f32, Ix2> {
    if x.strides()[1] == 1 {
        x.into()
    } else {
        x.as_standard_layout().into_owned().into()
    }
}

/// Row `i` of an array from [`with_contiguous_rows`], as a slice.
fn row_of<'x>(x: &'x CowArray<f32, Ix2>, i: usize) -> &'x [f32] {
    x.row(i)
        .to_slice()
        .expect("with_contiguous_rows: each row is contiguous")
}

/// `α·A·B + bias` into a new `(m, n)` array, a large product's panels shared among the
/// threads. The array is not zeroed first: the product writes every value (a zeroed one cost a
/// `memset` of each output, 2–3 % of a pass at 512 tokens with the heap reused).
///
/// # Shapes
/// * `a`: `(m, k)`, `b`: `(k, n)`, `bias`: `(n,)` → `(m, n)`
pub fn matmul_new(
    a: ArrayView2<f32>,
    b: &PackedB,
    alpha: f32,
    bias: Option<ArrayView1<f32>>,
) -> Array2<f32> {
    matmul_new_on(Isa::best(), Sharing::Threads, a, b, alpha, bias)
}

/// `C = α·A·B + bias` written into `C`, which may be uninitialised (every value is written), on
/// the calling thread alone: for a caller that already shares its work among the threads (the
/// attention heads), where splitting each of its products again would only add hand-overs.
/// Returns `C`, initialised.
///
/// # Shapes
/// * `a`: `(m, k)`, `b`: `(k, n)`, `bias`: `(n,)`, `c`: `(m, n)`
///
/// # Panics
/// If the shapes disagree (the callers' shapes are checked where the model is loaded).
pub fn matmul_in_one_thread<'c>(
    a: ArrayView2<f32>,
    b: &PackedB,
    alpha: f32,
    bias: Option<ArrayView1<f32>>,
    c: ArrayViewMut2<'c, MaybeUninit<f32>>,
) -> ArrayViewMut2<'c, f32> {
    matmul_into(Isa::best(), Sharing::OneThread, a, b, alpha, bias, c)
}

/// [`matmul_in_one_thread`] over a [`Part`] of the product alone: only the part's columns of `C`
/// are written, each value the same bits as the whole product gives it. Returns those columns
/// of `C`, written.
///
/// # Shapes
/// * `a`: `(m, k)`, `b`: `(k, n)`, `c`: `(m, n)` with unit column stride → `(m, columns)`
///
/// # Panics
/// If the shapes disagree, or `C`'s columns are not adjacent.
pub fn matmul_part_in_one_thread<'c>(
    a: ArrayView2<f32>,
    b: &PackedB,
    part: Part,
    alpha: f32,
    mut c: ArrayViewMut2<'c, MaybeUninit<f32>>,
) -> ArrayViewMut2<'c, f32> {
    let (m, n) = (a.nrows(), b.n);
    check(a, b);
    assert_eq!(c.dim(), (m, n), "matmul: C must be {m}×{n}");
    assert!(
        c.strides()[1] == 1 && c.strides()[0] >= 0,
        "matmul over a part: C's columns must be adjacent"
    );
    let all = n.div_ceil(NR);
    let panels = part.panels.start.min(all)..part.panels.end.min(all);
    let end = part.depth.end.min(a.ncols());
    let depth = (part.depth.start.min(end) / KC * KC)..end;
    let out = Out {
        c: c.as_mut_ptr().cast(),
        ldc: c.strides()[0] as usize,
    };
    let columns = panels.start * NR..(panels.end * NR).min(n);
    let part = Part { panels, depth };
    // SAFETY: `out` is `c`, (m, n) with rows `ldc` apart and unit column stride, borrowed
    // mutably for the call; `product` writes each value of the part's columns.
    unsafe {
        product(
            Isa::best(),
            Sharing::OneThread,
            a,
            b,
            alpha,
            None,
            out,
            part,
        )
    };
    // SAFETY: every value of these columns was written above
    unsafe { c.slice_move(ndarray::s![.., columns]).assume_init() }
}

/// Whether a product may share its panels among rayon's threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sharing {
    /// Among every thread of the pool, when the product is large enough to gain from it.
    Threads,
    OneThread,
}

/// [`matmul_new`] with the micro-kernel compiled for `isa`.
fn matmul_new_on(
    isa: Isa,
    sharing: Sharing,
    a: ArrayView2<f32>,
    b: &PackedB,
    alpha: f32,
    bias: Option<ArrayView1<f32>>,
) -> Array2<f32> {
    let mut c = Array2::uninit((a.nrows(), b.n));
    matmul_into(isa, sharing, a, b, alpha, bias, c.view_mut());
    // SAFETY: `matmul_into` wrote every value
    unsafe { c.assume_init() }
}

/// `C = α·A·B + bias` written into `C`, which may be uninitialised, with the micro-kernel
/// compiled for `isa`, which the CPU must run (the tests check every one the CPU has). Returns
/// `C`, every value written.
fn matmul_into<'c>(
    isa: Isa,
    sharing: Sharing,
    a: ArrayView2<f32>,
    b: &PackedB,
    alpha: f32,
    bias: Option<ArrayView1<f32>>,
    mut c: ArrayViewMut2<'c, MaybeUninit<f32>>,
) -> ArrayViewMut2<'c, f32> {
    let (m, n) = (a.nrows(), b.n);
    check(a, b);
    assert_eq!(c.dim(), (m, n), "matmul: C must be {m}×{n}");
    if c.strides()[1] == 1 && c.strides()[0] >= 0 {
        let out = Out {
            c: c.as_mut_ptr().cast(),
            ldc: c.strides()[0] as usize,
        };
        // SAFETY: `out` is `c`, (m, n) with rows `ldc` apart and unit column stride, borrowed
        // mutably for the call; `product` writes each of its values.
        let part = Part {
            panels: 0..n.div_ceil(NR),
            depth: 0..a.ncols(),
        };
        unsafe { product(isa, sharing, a, b, alpha, bias, out, part) }
    } else {
        // the kernel writes rows of C with unit column stride: into a new array, then copied
        let mut fresh = Array2::uninit((m, n));
        let product = matmul_into(isa, sharing, a, b, alpha, bias, fresh.view_mut());
        Zip::from(&mut c).and(&product).for_each(|c, &v| {
            c.write(v);
        });
    }
    // SAFETY: every value of `c` was written above
    unsafe { c.assume_init() }
}

/// Panics if `A`'s columns are not `B`'s rows (the callers' shapes are checked where the model
/// is loaded).
fn check(a: ArrayView2<f32>, b: &PackedB) {
    let (m, k) = a.dim();
    assert_eq!(b.k, k, "matmul: A is {m}×{k} but B has {} rows", b.k);
}

/// Where a product writes `C`: its first value, rows `ldc` apart, columns adjacent.
#[derive(Clone, Copy)]
struct Out {
    c: *mut f32,
    ldc: usize,
}

/// What of `C = α·A·B` a product computes: the columns of `B`'s panels `panels` ([`NR`] columns
/// each, the last one's as many as `B` has; all: `0..⌈n / NR⌉`), each summed over `A`'s columns
/// `depth` alone (all: `0..k`). Summing over some depth is for an `A` that is zero outside it (a
/// block of attention probabilities over the keys its rows reach): the sum begins at the
/// multiple of [`KC`] at or before `depth.start`, where one of the whole product's passes over
/// `k` begins, so each value is the same bits as the whole product's (the terms left out are
/// zeros, which change no sum); a column is one row of `A` times one column of `B`, summed in
/// the same order whatever the panels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub panels: Range<usize>,
    pub depth: Range<usize>,
}

impl Part {
    /// Every column, summed over `depth` alone.
    pub fn depth(depth: Range<usize>) -> Self {
        Self {
            panels: 0..usize::MAX,
            depth,
        }
    }

    /// The columns of panels `panels` alone, each summed over all of `A`'s columns.
    pub fn panels(panels: Range<usize>) -> Self {
        Self {
            panels,
            depth: 0..usize::MAX,
        }
    }
}

/// `C = α·A·B + bias` written into `out` for the columns and the depth `part` says: every value
/// of those columns of `C` is written, and none is read before it is written, so `out` may be
/// uninitialised.
///
/// # Safety
/// `out` must point to `m × n` writable values (`m` = `A`'s rows, `n` = `B`'s columns), rows
/// `ldc ≥ n` apart, that nothing else reads or writes during the call; `A`'s columns are `B`'s
/// rows; `part`'s panels lie within `0..⌈n / NR⌉` and its depth within `0..k`; the CPU runs
/// `isa`.
#[allow(clippy::too_many_arguments)]
unsafe fn product(
    isa: Isa,
    sharing: Sharing,
    a: ArrayView2<f32>,
    b: &PackedB,
    alpha: f32,
    bias: Option<ArrayView1<f32>>,
    out: Out,
    part: Part,
) {
    let Part { panels, depth } = part;
    let (m, k) = a.dim();
    let n = b.n;
    if m == 0 || n == 0 {
        return;
    }
    let bias_owned: Option<Vec<f32>> = bias
        .as_ref()
        .filter(|b| b.as_slice().is_none())
        .map(|b| b.to_vec());
    let bias = bias_owned
        .as_deref()
        .or(bias.as_ref().and_then(|b| b.as_slice()));
    if depth.is_empty() {
        // an empty sum: C is the bias, or zeros
        for i in 0..m {
            for j in panels.start * NR..(panels.end * NR).min(n) {
                out.c.add(i * out.ldc + j).write(bias.map_or(0.0, |b| b[j]));
            }
        }
        return;
    }
    // the kernel reads rows of A with unit column stride
    let a_owned;
    let a = if a.strides()[1] == 1 && a.strides()[0] >= 0 {
        a
    } else {
        a_owned = a.as_standard_layout().into_owned();
        a_owned.view()
    };
    let job = Job {
        a: a.as_ptr(),
        lda: a.strides()[0] as usize,
        m,
        k,
        n,
        b,
        alpha,
        bias,
        c: out.c,
        ldc: out.ldc,
        depth,
    };
    let count = panels.len();
    // the panels shared out among the threads, where there is enough work to share
    let parts = if sharing == Sharing::Threads && m * n * k >= PARALLEL_MIN_WORK {
        (rayon::current_num_threads() * TASKS_PER_THREAD)
            .min(count)
            .max(1)
    } else {
        1
    };
    let run_part = |part: usize| {
        let range = panels.start + count * part / parts..panels.start + count * (part + 1) / parts;
        // SAFETY: `job` describes `a` (m × k, row stride lda, unit column stride), `b`
        // (k × n, packed) and `out` (m × n, row stride ldc, unit column stride) as the caller
        // promised; each part writes only the columns of its own panels.
        unsafe { run(&job, range, isa) }
    };
    if parts == 1 {
        run_part(0);
    } else {
        // on a decoding step's team where the caller leads one, else on rayon's pool
        crate::linalg::team::for_each_task(parts, run_part);
    }
}

/// `m·n·k` from which a product is shared among threads (below it, the hand-over costs more
/// than it saves).
const PARALLEL_MIN_WORK: usize = 1 << 18;

/// How many tasks a thread's share of a product is cut into. The threads claim them as they
/// go, so a thread the system sets aside for a while (in the browser: the page's own work for
/// a keystroke, on the same two cores) leaves its last tasks to the others; with one task a
/// thread, the whole product waited for it.
const TASKS_PER_THREAD: usize = 4;

/// One product, as raw parts for the micro-kernels.
struct Job<'a> {
    a: *const f32,
    lda: usize,
    m: usize,
    k: usize,
    n: usize,
    b: &'a PackedB,
    alpha: f32,
    bias: Option<&'a [f32]>,
    c: *mut f32,
    ldc: usize,
    /// The columns of `A` (rows of `B`) summed over: `0..k`, or from a multiple of [`KC`].
    depth: Range<usize>,
}

// SAFETY: the pointers are only read (`a`) or written in disjoint column ranges (`c`, one
// range of panels per thread), for the duration of one `matmul` call that borrows them.
unsafe impl Sync for Job<'_> {}

/// The micro-kernel compiled for `isa`, over the panels in `panels`.
///
/// # Safety
/// `job` must describe valid matrices (see [`product`]), and the CPU must run `isa`.
unsafe fn run(job: &Job, panels: Range<usize>, isa: Isa) {
    match isa {
        #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
        Isa::Avx512 => blocks_avx512(job, panels),
        #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
        Isa::Avx2Fma => blocks_avx2(job, panels),
        #[cfg(target_arch = "wasm32")]
        Isa::Baseline => blocks::<Simd128, MR_WASM>(job, panels),
        #[cfg(not(target_arch = "wasm32"))]
        Isa::Baseline => blocks::<Portable, MR_OTHER>(job, panels),
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn blocks_avx512(job: &Job, panels: Range<usize>) {
    blocks::<Avx512, MR_AVX512>(job, panels)
}

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
#[target_feature(enable = "avx2,fma")]
unsafe fn blocks_avx2(job: &Job, panels: Range<usize>) {
    blocks::<Avx2, MR_AVX2>(job, panels)
}

/// The loops around the micro-kernel: `k` in blocks of [`KC`], rows in blocks of [`MC`] (each
/// block of `A` packed where [`PACK_A`] and [`PACK_MIN_PANELS`] say, see [`pack_a`]), then every
/// panel (or pair of panels, where `K` takes pairs) over the block, `MR` rows at a time (at most
/// 14), by the micro-kernel `K`.
#[inline(always)]
unsafe fn blocks<K: MicroKernel, const MR: usize>(job: &Job, panels: Range<usize>) {
    // A is packed where enough panels read it (not P of P·V, whose n is one head's d_v)
    let pack = PACK_A && panels.len() >= PACK_MIN_PANELS;
    let size = if pack {
        MC.min(job.m) * KC.min(job.depth.len())
    } else {
        0
    };
    // the thread's buffer, kept from call to call: a new one was zeroed for every product
    // (a `memset` of 108 KB a linear layer and thread)
    let mut packed = if pack { PACKED_A.take() } else { Vec::new() };
    if packed.len() < size {
        packed.resize(size, 0.0);
    }
    let mut pc = job.depth.start;
    while pc < job.depth.end {
        let kc = KC.min(job.depth.end - pc);
        let stage = Stage {
            first: pc == job.depth.start,
            last: pc + kc == job.depth.end,
        };
        let mut ic = 0;
        while ic < job.m {
            let mc = MC.min(job.m - ic);
            if pack {
                pack_a(job, ic..ic + mc, pc..pc + kc, MR, &mut packed);
            }
            let mut jp = panels.start;
            while jp < panels.end {
                // two panels at once where the kernel holds both in registers
                let pair = K::PAIRS && jp + 1 < panels.end;
                let panel = job.b.panel(jp).as_ptr().add(pc * NR);
                let mut ir = 0;
                while ir < mc {
                    let rows = MR.min(mc - ir);
                    let tile = Tile {
                        row: ic + ir,
                        col: jp * NR,
                        kc,
                        a: if pack {
                            packed.as_ptr().add(ir * kc)
                        } else {
                            job.a.add((ic + ir) * job.lda + pc)
                        },
                        panel,
                        pair,
                    };
                    if pack {
                        tile_of::<K, MR, true>(job, &tile, stage, rows);
                    } else {
                        tile_of::<K, MR, false>(job, &tile, stage, rows);
                    }
                    ir += rows;
                }
                jp += if pair { 2 } else { 1 };
            }
            ic += mc;
        }
        pc += kc;
    }
    if pack {
        PACKED_A.set(packed);
    }
}

thread_local! {
    /// The block of `A` that [`blocks`] packs, one buffer a thread, reused by every product.
    static PACKED_A: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The tile at `t`, of `rows` ≤ `MR` rows: `A` packed or in place as `PACKED` says.
#[inline(always)]
unsafe fn tile_of<K: MicroKernel, const MR: usize, const PACKED: bool>(
    job: &Job,
    t: &Tile,
    stage: Stage,
    rows: usize,
) {
    if rows == MR {
        tile_kernel::<K, MR, PACKED>(job, t, stage);
    } else {
        // the last rows of a block, when fewer than MR remain
        match rows {
            1 => tile_kernel::<K, 1, PACKED>(job, t, stage),
            2 => tile_kernel::<K, 2, PACKED>(job, t, stage),
            3 => tile_kernel::<K, 3, PACKED>(job, t, stage),
            4 => tile_kernel::<K, 4, PACKED>(job, t, stage),
            5 => tile_kernel::<K, 5, PACKED>(job, t, stage),
            6 => tile_kernel::<K, 6, PACKED>(job, t, stage),
            7 => tile_kernel::<K, 7, PACKED>(job, t, stage),
            8 => tile_kernel::<K, 8, PACKED>(job, t, stage),
            9 => tile_kernel::<K, 9, PACKED>(job, t, stage),
            10 => tile_kernel::<K, 10, PACKED>(job, t, stage),
            11 => tile_kernel::<K, 11, PACKED>(job, t, stage),
            12 => tile_kernel::<K, 12, PACKED>(job, t, stage),
            13 => tile_kernel::<K, 13, PACKED>(job, t, stage),
            _ => unreachable!("MR is at most 14"),
        }
    }
}

/// Where a pass over `k` stands: the first one overwrites `C`, the last applies `α` and the
/// bias.
#[derive(Clone, Copy)]
struct Stage {
    first: bool,
    last: bool,
}

/// Packs the block `A[rows, depth]` into micro-panels of `mr` rows, each stored `k` after `k`
/// (the `mr` values of one `k` side by side; the last micro-panel has the rows that remain),
/// so the micro-kernel reads its `A` as one stream at fixed offsets, as BLIS packs `A`. The
/// block is read once here and then by every panel of `B` from `L2`.
///
/// # Shapes
/// * `out`: at least `rows.len() × depth.len()`; micro-panel `i` starts at `i · mr · depth.len()`
unsafe fn pack_a(job: &Job, rows: Range<usize>, depth: Range<usize>, mr: usize, out: &mut [f32]) {
    let kc = depth.len();
    let mut i = 0;
    while i < rows.len() {
        let r_n = mr.min(rows.len() - i);
        let panel = &mut out[i * kc..(i + r_n) * kc];
        let first = job.a.add((rows.start + i) * job.lda + depth.start);
        // written in order, read from r_n rows at once (each read sequentially)
        for (p, at_p) in panel.chunks_exact_mut(r_n).enumerate() {
            for (r, v) in at_p.iter_mut().enumerate() {
                *v = *first.add(r * job.lda + p);
            }
        }
        i += r_n;
    }
}

/// The panels a part of a product must have for its `A` to be packed: below, each value of `A`
/// is read too few times to pay for its copy, a gather of scalars (`P·V` of one head at 512
/// tokens spent 9 % of the pass packing `P` for its two panels). Measured on one core here,
/// best of 30, `A` packed against read in place: 64 × 640 times 640 × 64 (a prompt of 64
/// tokens through a dequantized tile of weights, 4 panels) 92 against 155 GFLOP/s, and
/// Gemma 3's prefill of 64 tokens 186 against 151–158 ms; 16 panels 139 against 155; 24 the
/// same; 64–96 panels (`(128, 384) × (384, 1152 or 1536)`, `(1024, 64) × (64, 1024)`)
/// 154–166 against 132–159.
const PACK_MIN_PANELS: usize = 32;

/// Whether `A` is ever packed. In wasm, no: with four rows a tile, packing measured no faster in
/// Chromium (16, 128 and 512 tokens: 15.0–15.2, 101–114 and 535–549 ms a pass against
/// 14.9–15.3, 98–100 and 524–549 reading `A` in place).
const PACK_A: bool = cfg!(not(target_arch = "wasm32"));

/// An `R × NR` block of `C` at (`row`, `col`), or `R × 2·NR` with `pair`, over `kc` values of
/// `k`: `a` its first value of `A` (packed, `A[r, p]` is at `a + p·R + r`, see [`pack_a`]; in
/// place, at `a + r·lda + p`), `panel` its slice of `B` (`kc × NR`; with `pair`, the next
/// panel's slice follows `k × NR` values further).
struct Tile {
    row: usize,
    col: usize,
    kc: usize,
    a: *const f32,
    panel: *const f32,
    pair: bool,
}

/// The micro-kernel: `R × NR` accumulators (`R × 2·NR` for a pair of panels), then one write of
/// the block.
#[inline(always)]
unsafe fn tile_kernel<K: MicroKernel, const R: usize, const PACKED: bool>(
    job: &Job,
    t: &Tile,
    stage: Stage,
) {
    let (row, k) = if PACKED { (1, R) } else { (job.lda, 1) };
    if t.pair {
        let second = t.panel.add(job.k * NR);
        let (left, right) = K::accumulate_pair::<R>(t, second, row, k);
        K::store(job, t.row, t.col, stage, &left);
        K::store(job, t.row, t.col + NR, stage, &right);
    } else {
        K::store(job, t.row, t.col, stage, &K::accumulate::<R>(t, row, k));
    }
}

/// Writes `R × NR` accumulators into `C` at (`row`, `col`): the first pass over `k` overwrites,
/// the last applies `α` and the bias.
#[inline(always)]
unsafe fn store<const R: usize>(
    job: &Job,
    row: usize,
    col: usize,
    stage: Stage,
    acc: &[[f32; NR]; R],
) {
    let cols = NR.min(job.n - col);
    for (r, acc_r) in acc.iter().enumerate() {
        let c = job.c.add((row + r) * job.ldc + col);
        for j in 0..cols {
            let c = c.add(j);
            let mut v = acc_r[j];
            if !stage.first {
                v += *c;
            }
            if stage.last {
                v *= job.alpha;
                if let Some(bias) = job.bias {
                    v += bias[col + j];
                }
            }
            *c = v;
        }
    }
}

/// `Σₚ A[row + r, p]·B[p, col + j]` over a tile's `kc` values of `p`, in registers: the
/// micro-kernel, one per instruction set. Each keeps `R × NR` accumulators and, for each `p`,
/// loads the panel's row once and multiplies it by the `R` values of `A` (at fixed offsets in
/// packed `A`), each broadcast. Every kernel with fused multiply-adds does the same IEEE
/// operations in the same order, so they give the same bits.
trait MicroKernel {
    /// # Safety
    /// `A[r, p]` is at `t.a + r·row + p·k` for `r < R`, `p < t.kc`; `t.panel` holds
    /// `t.kc × NR` values; the CPU runs the kernel's instruction set.
    unsafe fn accumulate<const R: usize>(t: &Tile, row: usize, k: usize) -> [[f32; NR]; R];

    /// Whether [`MicroKernel::accumulate_pair`] holds two panels' accumulators at once.
    const PAIRS: bool = false;

    /// Writes the block into `C` as [`store`] does; a kernel may write it its own way, to the
    /// same bits.
    ///
    /// # Safety
    /// As [`store`]'s caller: the block lies within `C`, which this tile alone writes.
    #[inline(always)]
    unsafe fn store<const R: usize>(
        job: &Job,
        row: usize,
        col: usize,
        stage: Stage,
        acc: &[[f32; NR]; R],
    ) {
        store(job, row, col, stage, acc)
    }

    /// The tile over `t.panel` and, beside it, over `second`: by default two passes.
    ///
    /// # Safety
    /// As [`MicroKernel::accumulate`], `second` holding `t.kc × NR` values too.
    #[inline(always)]
    unsafe fn accumulate_pair<const R: usize>(
        t: &Tile,
        second: *const f32,
        row: usize,
        k: usize,
    ) -> ([[f32; NR]; R], [[f32; NR]; R]) {
        let right = Tile {
            panel: second,
            ..*t
        };
        (
            Self::accumulate::<R>(t, row, k),
            Self::accumulate::<R>(&right, row, k),
        )
    }
}

/// AVX-512: a row of the tile is one `zmm` (`NR` = 16).
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
struct Avx512;

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
impl MicroKernel for Avx512 {
    #[inline(always)]
    unsafe fn accumulate<const R: usize>(t: &Tile, row: usize, k: usize) -> [[f32; NR]; R] {
        let [acc] = avx512_accumulate::<R, 1>(t, [t.panel], row, k);
        acc
    }

    /// `2·R` of the 32 `zmm` (24 for 12 rows): two panel rows loaded a `k`, each broadcast of `A`
    /// used twice, so that the multiply-adds, not the loads, set the pace.
    const PAIRS: bool = true;

    #[inline(always)]
    unsafe fn accumulate_pair<const R: usize>(
        t: &Tile,
        second: *const f32,
        row: usize,
        k: usize,
    ) -> ([[f32; NR]; R], [[f32; NR]; R]) {
        let [left, right] = avx512_accumulate::<R, 2>(t, [t.panel, second], row, k);
        (left, right)
    }
}

/// The AVX-512 kernel over `P` panels side by side (`P · R` accumulators): each broadcast of
/// `A` is used by every panel.
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn avx512_accumulate<const R: usize, const P: usize>(
    t: &Tile,
    panels: [*const f32; P],
    row: usize,
    k: usize,
) -> [[[f32; NR]; R]; P] {
    #[cfg(target_arch = "x86")]
    use std::arch::x86::*;
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); R]; P];
    for p in 0..t.kc {
        let b: [__m512; P] = std::array::from_fn(|i| _mm512_loadu_ps(panels[i].add(p * NR)));
        let a = t.a.add(p * k);
        for r in 0..R {
            let x = _mm512_set1_ps(*a.add(r * row));
            for (acc_i, b_i) in acc.iter_mut().zip(&b) {
                acc_i[r] = _mm512_fmadd_ps(x, *b_i, acc_i[r]);
            }
        }
    }
    // SAFETY: one __m512 is sixteen f32 (NR = 16 natively)
    std::mem::transmute_copy::<[[__m512; R]; P], [[[f32; NR]; R]; P]>(&acc)
}

/// AVX2 + FMA: a row of the tile is two `ymm`.
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
struct Avx2;

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
impl MicroKernel for Avx2 {
    #[inline(always)]
    unsafe fn accumulate<const R: usize>(t: &Tile, row: usize, k: usize) -> [[f32; NR]; R] {
        avx2_accumulate::<R>(t, row, k)
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn avx2_accumulate<const R: usize>(t: &Tile, row: usize, k: usize) -> [[f32; NR]; R] {
    #[cfg(target_arch = "x86")]
    use std::arch::x86::*;
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for p in 0..t.kc {
        let b0 = _mm256_loadu_ps(t.panel.add(p * NR));
        let b1 = _mm256_loadu_ps(t.panel.add(p * NR + 8));
        let a = t.a.add(p * k);
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let x = _mm256_set1_ps(*a.add(r * row));
            acc_r[0] = _mm256_fmadd_ps(x, b0, acc_r[0]);
            acc_r[1] = _mm256_fmadd_ps(x, b1, acc_r[1]);
        }
    }
    // SAFETY: two __m256 are sixteen f32 (NR = 16 natively)
    std::mem::transmute_copy::<[[__m256; 2]; R], [[f32; NR]; R]>(&acc)
}

/// The target's baseline (SSE2 on x86-64, or any other CPU): plain Rust, a multiply then an
/// add (`mul_add` would be a library call without the FMA instruction).
#[cfg(not(target_arch = "wasm32"))]
struct Portable;

#[cfg(not(target_arch = "wasm32"))]
impl MicroKernel for Portable {
    #[inline(always)]
    unsafe fn accumulate<const R: usize>(t: &Tile, row: usize, k: usize) -> [[f32; NR]; R] {
        let mut acc = [[0f32; NR]; R];
        for p in 0..t.kc {
            let b: [f32; NR] = *(t.panel.add(p * NR) as *const [f32; NR]);
            let a = t.a.add(p * k);
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let x = *a.add(r * row);
                for (c, &b) in acc_r.iter_mut().zip(&b) {
                    *c += x * b;
                }
            }
        }
        acc
    }
}

/// `x·b + acc` in `f32x4` lanes, one fused instruction in the builds that enable relaxed SIMD
/// (where the CPU has it): the wasm loops' multiply-add (the micro-kernel's, the quantized
/// blocks').
#[cfg(target_arch = "wasm32")]
#[inline(always)]
pub(crate) fn madd(
    x: core::arch::wasm32::v128,
    b: core::arch::wasm32::v128,
    acc: core::arch::wasm32::v128,
) -> core::arch::wasm32::v128 {
    use core::arch::wasm32::*;
    #[cfg(target_feature = "relaxed-simd")]
    {
        f32x4_relaxed_madd(x, b, acc)
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        f32x4_add(f32x4_mul(x, b), acc)
    }
}

/// WebAssembly SIMD, two `f32x4` accumulators a row, each value of `A` loaded once as a
/// splat. With `relaxed-simd` (a build that enables it) the multiply-add is one fused
/// instruction where the CPU has it.
#[cfg(target_arch = "wasm32")]
struct Simd128;

#[cfg(target_arch = "wasm32")]
impl MicroKernel for Simd128 {
    #[inline(always)]
    unsafe fn accumulate<const R: usize>(t: &Tile, row: usize, k: usize) -> [[f32; NR]; R] {
        use core::arch::wasm32::*;
        let mut acc = [[f32x4_splat(0.0); 2]; R];
        for p in 0..t.kc {
            let b0 = v128_load(t.panel.add(p * NR) as *const v128);
            let b1 = v128_load(t.panel.add(p * NR + 4) as *const v128);
            let a = t.a.add(p * k);
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let x = v128_load32_splat(a.add(r * row) as *const u32);
                acc_r[0] = madd(x, b0, acc_r[0]);
                acc_r[1] = madd(x, b1, acc_r[1]);
            }
        }
        // SAFETY: two v128 are eight f32 (NR = 8 in wasm)
        std::mem::transmute_copy::<[[v128; 2]; R], [[f32; NR]; R]>(&acc)
    }

    /// A whole panel's width as two `f32x4` a row, each lane the same operations as
    /// [`store`]'s: V8 ran the plain loop a value at a time (one core, Chromium, a head's
    /// 64-deep `QKᵀ` at 1,024 tokens 57–59 → 61–64 GFLOP/s; SmolLM2's projections 54–63 →
    /// 62–64).
    #[inline(always)]
    unsafe fn store<const R: usize>(
        job: &Job,
        row: usize,
        col: usize,
        stage: Stage,
        acc: &[[f32; NR]; R],
    ) {
        use core::arch::wasm32::*;
        if job.n - col < NR {
            return store(job, row, col, stage, acc); // a product's last panel, narrower
        }
        let alpha = f32x4_splat(job.alpha);
        for (r, acc_r) in acc.iter().enumerate() {
            let c = job.c.add((row + r) * job.ldc + col);
            for half in 0..NR / 4 {
                let (c, at) = (c.add(4 * half) as *mut v128, col + 4 * half);
                let mut v = v128_load(acc_r.as_ptr().add(4 * half) as *const v128);
                if !stage.first {
                    v = f32x4_add(v, v128_load(c));
                }
                if stage.last {
                    v = f32x4_mul(v, alpha);
                    if let Some(bias) = job.bias {
                        v = f32x4_add(v, v128_load(bias.as_ptr().add(at) as *const v128));
                    }
                }
                v128_store(c, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array1, Array2};

    /// [`matmul_in_one_thread`] into a new array, uninitialised.
    fn in_one_thread(
        a: ArrayView2<f32>,
        b: &PackedB,
        alpha: f32,
        bias: Option<ArrayView1<f32>>,
    ) -> Array2<f32> {
        let mut c = Array2::uninit((a.nrows(), b.dim().1));
        matmul_in_one_thread(a, b, alpha, bias, c.view_mut());
        // SAFETY: matmul_in_one_thread wrote every value
        unsafe { c.assume_init() }
    }

    /// A plain triple loop in f64: the reference.
    fn reference(
        a: &Array2<f32>,
        b: &Array2<f32>,
        alpha: f32,
        bias: Option<&Array1<f32>>,
    ) -> Array2<f32> {
        let (m, k) = a.dim();
        let n = b.ncols();
        Array2::from_shape_fn((m, n), |(i, j)| {
            let dot: f64 = (0..k).map(|p| a[[i, p]] as f64 * b[[p, j]] as f64).sum();
            (dot * alpha as f64) as f32 + bias.map_or(0.0, |b| b[j])
        })
    }

    fn filled(rows: usize, cols: usize, seed: u32) -> Array2<f32> {
        Array2::from_shape_fn((rows, cols), |(i, j)| {
            let h = (i as u32).wrapping_mul(2_654_435_761) ^ (j as u32).wrapping_mul(40_503) ^ seed;
            (h % 2001) as f32 / 1000.0 - 1.0
        })
    }

    #[test]
    fn equals_the_reference_at_every_edge_of_the_blocking() {
        // sizes below, at and past every MR (4, 6, 12), NR, KC and MC, A read in place and
        // packed, with and without bias and scale
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 7, 5),
            (4, KC, NR),
            (6, KC - 1, NR - 1),
            (7, 9, 2 * NR),
            (8, KC, NR),
            (9, KC + 1, NR + 1),
            (12, KC, NR + 3),
            (25, 5, 2 * NR + 1),
            // A packed (at least PACK_MIN_PANELS panels): panels in pairs, one left over
            (25, 5, (PACK_MIN_PANELS + 2) * NR + 1),
            (MC + 5, 2 * KC + 3, (PACK_MIN_PANELS + 1) * NR - 3),
            // A in place, just short of packed, and with few panels
            (MC + 5, 2 * KC + 3, (PACK_MIN_PANELS - 1) * NR - 1),
            (MC + 5, 2 * KC + 3, 3 * NR - 1),
            (16, 384, 384),
            (2, 1536, 20),
        ] {
            let a = filled(m, k, 1);
            let b = filled(k, n, 2);
            let bias = Array1::from_shape_fn(n, |j| j as f32 * 0.01);
            for (alpha, bias, isa) in
                [(1.0, Some(&bias)), (0.125, None)]
                    .into_iter()
                    .flat_map(|(alpha, bias)| {
                        Isa::available()
                            .into_iter()
                            .map(move |isa| (alpha, bias, isa))
                    })
            {
                let want = reference(&a, &b, alpha, bias);
                // B packed as it is, and from Bᵀ as a linear layer stores it: the same panels
                let bt = b.t().to_owned();
                let [got, again] = [
                    PackedB::from_matrix(b.view()),
                    PackedB::from_transposed(bt.view()),
                ]
                .map(|packed| {
                    matmul_new_on(
                        isa,
                        Sharing::Threads,
                        a.view(),
                        &packed,
                        alpha,
                        bias.map(|b| b.view()),
                    )
                });
                let worst = (&got - &want).iter().fold(0f32, |w, d| w.max(d.abs()));
                assert!(worst <= 1e-4 * k as f32, "{isa:?} {m}×{k}×{n}: |Δ| {worst}");
                assert_eq!(again, got, "from_transposed packs the same B");
            }
        }
    }

    #[test]
    fn packs_panels_of_nr_columns_k_outer_from_any_view() {
        // B[p, c] at (panel·k + p)·NR + j for c = panel·NR + j, the last panel padded with 0;
        // from B itself, from Bᵀ, and from strided views (a head's columns; a transposed array)
        for (k, n) in [(0, 3), (3, 0), (1, 1), (7, NR), (32, 2 * NR + 5), (33, 48)] {
            let wide = filled(k, 3 * n + 1, 10);
            let b = wide.slice(s![.., n..2 * n]); // rows strided
            let bt_owned = b.t().to_owned();
            let bt_strided = b.t(); // columns strided
            let want: Vec<f32> = (0..n.div_ceil(NR) * k * NR)
                .map(|i| {
                    let (panel, p, j) = (i / (k * NR), i / NR % k, i % NR);
                    let c = panel * NR + j;
                    if c < n {
                        b[[p, c]]
                    } else {
                        0.0
                    }
                })
                .collect();
            for (how, packed) in [
                ("B, rows strided", PackedB::from_matrix(b)),
                ("B owned", PackedB::from_matrix(b.to_owned().view())),
                ("Bᵀ owned", PackedB::from_transposed(bt_owned.view())),
                ("Bᵀ, columns strided", PackedB::from_transposed(bt_strided)),
            ] {
                assert_eq!(packed.dim(), (k, n), "{how}");
                assert_eq!(packed.data, want, "{how}, {k}×{n}");
            }
        }
    }

    #[test]
    fn reads_strided_rows_and_writes_strided_outputs() {
        // one head's columns of Q (row stride H·d) into one head's slice of a 3-D array
        let q = filled(9, 4 * 32, 3);
        let k = filled(11, 32, 4);
        let head = q.slice(s![.., 64..96]);
        let keys = PackedB::from_transposed(k.view());
        let want = reference(&head.to_owned(), &k.t().to_owned(), 0.5, None);
        let mut out = ndarray::Array3::uninit((2, 9, 11));
        let got = matmul_in_one_thread(head, &keys, 0.5, None, out.slice_mut(s![1, .., ..]));
        let worst = (&got - &want).iter().fold(0f32, |w, d| w.max(d.abs()));
        assert!(worst < 1e-5, "|Δ| {worst}");
        // a transposed (column-strided) output
        let mut t = Array2::uninit((11, 9));
        let into_t = matmul_in_one_thread(head, &keys, 0.5, None, t.view_mut().reversed_axes());
        assert_eq!(into_t, got);
        // SAFETY: the product wrote every value
        let t = unsafe { t.assume_init() };
        assert_eq!(t.t(), got);
    }

    #[test]
    fn the_same_bits_on_one_thread_or_two_or_in_one_thread_of_two() {
        let (a, b) = (filled(100, 384, 5), filled(384, 1536, 6));
        let packed = PackedB::from_matrix(b.view());
        let on = |threads: usize, product: fn(ArrayView2<f32>, &PackedB) -> Array2<f32>| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| product(a.view(), &packed))
        };
        let one = on(1, |a, b| matmul_new(a, b, 1.0, None));
        assert_eq!(one, on(2, |a, b| matmul_new(a, b, 1.0, None)));
        assert_eq!(one, on(2, |a, b| in_one_thread(a, b, 1.0, None)));
    }

    #[test]
    fn a_new_array_is_the_same_bits_as_a_product_into_a_view() {
        for (m, k, n) in [(1, 5, 3), (13, 600, 37), (100, 384, 1536)] {
            let (a, b) = (filled(m, k, 7), filled(k, n, 8));
            let bias = filled(1, n, 9).row(0).to_owned();
            let packed = PackedB::from_matrix(b.view());
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let want =
                    pool.install(|| in_one_thread(a.view(), &packed, 0.5, Some(bias.view())));
                let got = pool.install(|| matmul_new(a.view(), &packed, 0.5, Some(bias.view())));
                assert_eq!(got, want, "{m}×{k}×{n} on {threads} thread(s)");
            }
        }
    }

    /// A product over some columns of `B` (panels) or some depth, of an `A` that is zero
    /// outside that depth, gives each value the whole product's bits: the band of attention
    /// probabilities a long text's pass multiplies.
    #[test]
    fn some_panels_or_some_depth_give_the_whole_products_bits() {
        let (m, k, n) = (MC + 7, 3 * KC + 50, 5 * NR + 3);
        let b = PackedB::from_matrix(filled(k, n, 2).view());
        let full = filled(m, k, 1);
        for depth in [
            0..k,
            10..KC - 3,
            KC + 1..2 * KC + 9,
            2 * KC - 5..k,
            700..700,
        ] {
            let a = Array2::from_shape_fn((m, k), |(i, p)| {
                if depth.contains(&p) {
                    full[[i, p]]
                } else {
                    0.0
                }
            });
            let want = in_one_thread(a.view(), &b, 1.0, None);
            let mut c = Array2::uninit((m, n));
            let got = matmul_part_in_one_thread(
                a.view(),
                &b,
                Part::depth(depth.clone()),
                1.0,
                c.view_mut(),
            );
            let same = got
                .iter()
                .zip(&want)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "depth {depth:?}: not the whole product's bits");
            for panels in [0..1, 2..4, 4..6, 0..6] {
                let mut c = Array2::uninit((m, n));
                let got = matmul_part_in_one_thread(
                    a.view(),
                    &b,
                    Part::panels(panels.clone()),
                    1.0,
                    c.view_mut(),
                );
                let cols = panels.start * NR..(panels.end * NR).min(n);
                let want = want.slice(ndarray::s![.., cols]);
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(
                    same,
                    "depth {depth:?}, panels {panels:?}: not the whole product's bits"
                );
            }
        }
    }

    #[test]
    fn empty_depth_gives_the_bias() {
        let a = Array2::<f32>::zeros((3, 0));
        let b = PackedB::from_matrix(Array2::<f32>::zeros((0, 4)).view());
        let bias = Array1::from(vec![1.0, 2.0, 3.0, 4.0]);
        let c = in_one_thread(a.view(), &b, 1.0, Some(bias.view()));
        assert!(c.rows().into_iter().all(|r| r == bias));
        let new = matmul_new(a.view(), &b, 1.0, Some(bias.view()));
        assert!(new.rows().into_iter().all(|r| r == bias));
        assert_eq!(
            matmul_new(a.view(), &b, 1.0, None),
            Array2::<f32>::zeros((3, 4))
        );
    }
}
