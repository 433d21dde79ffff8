//! Scaled dot-product attention and multi-head attention on the CPU.

use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::ops::Range;

use ndarray::{
    s, Array2, Array3, ArrayView1, ArrayView2, ArrayView3, ArrayViewMut1, ArrayViewMut2,
    ArrayViewMut3, Axis,
};

use super::ops::{linear, masked_softmax, masked_softmax_in_place, whole_lanes};
use crate::analysis::thumbnail::HeadFold;
use crate::engine::ops::Heads;
use crate::engine::{ScoreFactor, ScoreScale};
use crate::error::{Error, Result};
use crate::linalg::gemm::{matmul_in_one_thread, matmul_part_in_one_thread, PackedB, Part, NR};
use crate::linalg::{dot, isa, team};
use crate::masks::attended_span;
use crate::model::weights::Linear;

/// Every step of `softmax(QKᵀ/√d_k + mask)·V` (or of `softmax(QKᵀ + mask)·V`, unscaled), kept
/// for the visualiser.
///
/// # Shapes
/// * `scores`: `(n_q, n_k)`, `QKᵀ/√d_k` (or `QKᵀ`) before the mask
/// * `probs`: `(n_q, n_k)`, after `masked_fill(-inf)` and `softmax`; rows sum to 1, masked cells are 0
/// * `output`: `(n_q, d_v)`
#[derive(Debug, Clone)]
pub struct Attention {
    pub scores: Array2<f32>,
    pub probs: Array2<f32>,
    pub output: Array2<f32>,
}

/// Scaled dot-product attention, `softmax(QKᵀ/√d_k + mask)·V`. `d_k` may differ from `d_v`
/// and `n_q` from `n_k` (encoder–decoder cross-attention).
///
/// # Shapes
/// * `q`: `(n_q, d_k)`, `k`: `(n_k, d_k)`, `v`: `(n_k, d_v)`
/// * `mask`: `(n_q, n_k)`, `true` where attending is allowed
pub fn scaled_dot_product_attention(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    mask: Option<ArrayView2<bool>>,
) -> Result<Attention> {
    dot_product_attention(q, k, v, mask, ScoreScale::SqrtDk)
}

/// Dot-product attention with the scores scaled as `scale` says: `QKᵀ/√d_k` (the transformer's)
/// or `QKᵀ` (the ablation).
///
/// # Shapes
/// * `q`: `(n_q, d_k)`, `k`: `(n_k, d_k)`, `v`: `(n_k, d_v)`
/// * `mask`: `(n_q, n_k)`, `true` where attending is allowed
pub fn dot_product_attention(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    mask: Option<ArrayView2<bool>>,
    scale: ScoreScale,
) -> Result<Attention> {
    let (n_q, d_k) = q.dim();
    let (n_k, d_v) = v.dim();
    if k.dim() != (n_k, d_k) {
        return Err(Error::Shape {
            what: "attention keys (n_k, d_k)".into(),
            expected: vec![n_k, d_k],
            found: k.shape().to_vec(),
        });
    }
    check_mask(mask, n_q, n_k)?;
    let mut scores = Array2::uninit((n_q, n_k));
    let mut probs = Array2::uninit((n_q, n_k));
    let mut output = Array2::uninit((n_q, d_v));
    attend_into(
        q,
        k,
        v,
        mask,
        scale.into(),
        Scores::Kept(scores.view_mut()),
        Probs::Kept(probs.view_mut()),
        Some(output.view_mut()),
        None,
    );
    // SAFETY: `attend_into` writes every value of the three
    unsafe {
        Ok(Attention {
            scores: scores.assume_init(),
            probs: probs.assume_init(),
            output: output.assume_init(),
        })
    }
}

/// A mask of `(n_q, n_k)`, or none; otherwise an error naming both shapes.
fn check_mask(mask: Option<ArrayView2<bool>>, n_q: usize, n_k: usize) -> Result<()> {
    match mask {
        Some(m) if m.dim() != (n_q, n_k) => Err(Error::Shape {
            what: "attention mask (n_q, n_k)".into(),
            expected: vec![n_q, n_k],
            found: m.shape().to_vec(),
        }),
        _ => Ok(()),
    }
}

/// Query rows [`attend_into`] takes at a time: one block's probabilities (64 × 512 × 4 bytes
/// at 512 keys) stay in the core's cache from `QKᵀ` through softmax to `·V`, instead of a
/// whole head's going out to memory and back between the steps.
const QUERY_BLOCK: usize = 64;

/// What becomes of a head's probabilities in [`attend_into`].
enum Probs<'a> {
    /// Written into the caller's array, `(n_q, n_k)`, which may be uninitialised.
    Kept(ArrayViewMut2<'a, MaybeUninit<f32>>),
    /// Not kept: each block's are computed in a buffer of the block's size and folded into the
    /// head's thumbnails, a row at a time (a long text's pass), the queries' first row being
    /// the text's `first_row`.
    Folded {
        fold: &'a mut HeadFold,
        first_row: usize,
    },
    /// Not kept, each block's computed in a buffer of the block's size.
    Dropped,
}

impl<'a> Probs<'a> {
    /// Each head's of `h`: its `(n_q, n_k)` of `kept` `(H, n_q, n_k)` where they are kept, its
    /// fold of `folds` (`h` of them) where they are folded, or dropped.
    fn per_head(
        kept: Option<&'a mut ArrayViewMut3<'_, MaybeUninit<f32>>>,
        folds: Option<Folds<'a>>,
        h: usize,
    ) -> Vec<Self> {
        match (kept, folds) {
            (Some(a), _) => a.axis_iter_mut(Axis(0)).map(Probs::Kept).collect(),
            (None, Some(Folds { heads, first_row })) => heads
                .iter_mut()
                .map(|fold| Probs::Folded { fold, first_row })
                .collect(),
            (None, None) => (0..h).map(|_| Probs::Dropped).collect(),
        }
    }
}

/// What becomes of a head's scores, `QKᵀ·factor` before the mask, in [`attend_into`].
pub enum Scores<'a> {
    /// Not kept (`QKᵀ` then only over the keys the mask reaches, where the probabilities are
    /// not kept either).
    Dropped,
    /// Written into the caller's array, `(n_q, n_k)`, which may be uninitialised: every one,
    /// the masked ones too.
    Kept(ArrayViewMut2<'a, MaybeUninit<f32>>),
    /// Not kept: their largest |value| over every cell (the masked ones too) folded into this
    /// (where it is larger): the steps view's colour scale of a head whose scores the page
    /// does not hold.
    Largest(&'a mut f32),
}

impl<'a> From<Option<ArrayViewMut2<'a, MaybeUninit<f32>>>> for Scores<'a> {
    fn from(kept: Option<ArrayViewMut2<'a, MaybeUninit<f32>>>) -> Self {
        kept.map_or(Scores::Dropped, Scores::Kept)
    }
}

/// The largest of `from` and every |value| of `a` (a NaN passed over), in lanes the compiler
/// turns into vector maxima (`f32::max` it cannot, for its NaN rule).
pub(crate) fn largest_abs(a: ArrayView2<f32>, from: f32) -> f32 {
    const LANES: usize = 8;
    let larger = |m: f32, v: f32| if v.abs() > m { v.abs() } else { m };
    let mut lanes = [from; LANES];
    let mut rest = from;
    for row in a.rows() {
        let Some(row) = row.to_slice() else {
            rest = row.iter().fold(rest, |m, &v| larger(m, v));
            continue;
        };
        let chunks = row.chunks_exact(LANES);
        rest = chunks.remainder().iter().fold(rest, |m, &v| larger(m, v));
        for chunk in chunks {
            for (m, &v) in lanes.iter_mut().zip(chunk) {
                *m = larger(*m, v);
            }
        }
    }
    lanes.into_iter().fold(rest, larger)
}

/// The steps of [`dot_product_attention`] written into the caller's arrays (the multi-head loop
/// writes each head straight into its slice of the trace, with no array of its own per head),
/// which may be uninitialised: every value of each is written. `scores`: where the scores go
/// ([`Scores`]; not kept, `QKᵀ` is computed in the probabilities and turned into them there).
/// `output`: `None` skips `·V` (a knocked-out head's, written by the caller). `probs`: where
/// the probabilities go ([`Probs`]). `packed`: the key/value head packed by the caller, where
/// it is. Every query row is independent of the others, so the steps run over blocks of
/// [`QUERY_BLOCK`] rows; each row is computed as it would be alone.
///
/// # Shapes
/// * `q`: `(n_q, d_k)`, `k`: `(n_k, d_k)`, `v`: `(n_k, d_v)`, `mask`: `(n_q, n_k)`, checked by
///   the caller
/// * `scores`, `probs`: `(n_q, n_k)`; `output`: `(n_q, d_v)`
#[allow(clippy::too_many_arguments)]
fn attend_into(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    mask: Option<ArrayView2<bool>>,
    scale: ScoreFactor,
    mut scores: Scores,
    probs: Probs,
    mut output: Option<ArrayViewMut2<MaybeUninit<f32>>>,
    packed: Option<Packed>,
) {
    // Dividing by √d_k keeps the dot products' variance near 1 whatever d_k is, so softmax
    // does not saturate into a one-hot row with vanishing gradients (ScoreScale::None shows it).
    let factor = scale.of(q.dim().1);
    if q.nrows() < PACKED_MIN_QUERIES {
        return match scores {
            Scores::Largest(largest) => {
                let mut kept = Array2::uninit((q.nrows(), k.nrows()));
                attend_rows(q, k, v, mask, factor, Some(kept.view_mut()), probs, output);
                // SAFETY: `attend_rows` writes every score it is given room for
                *largest = largest_abs(unsafe { kept.assume_init() }.view(), *largest);
            }
            Scores::Kept(kept) => attend_rows(q, k, v, mask, factor, Some(kept), probs, output),
            Scores::Dropped => attend_rows(q, k, v, mask, factor, None, probs, output),
        };
    }
    let keys = match packed {
        Some(Packed { keys, .. }) => Cow::Borrowed(keys),
        None => Cow::Owned(PackedB::from_transposed(k)), // Kᵀ, (d_k, n_k)
    };
    let keys = keys.as_ref();
    let values = output.is_some().then(|| match packed {
        Some(Packed {
            values: Some(values),
            ..
        }) => Cow::Borrowed(values),
        _ => Cow::Owned(PackedB::from_matrix(v)), // V, (n_k, d_v)
    });
    let n_q = q.nrows();
    let (mut probs, mut fold) = match probs {
        Probs::Kept(probs) => (Some(probs), None),
        Probs::Folded { fold, first_row } => (None, Some((fold, first_row))),
        Probs::Dropped => (None, None),
    };
    // where the probabilities are not kept: one block's at a time, (block, n_k)
    let kept = probs.is_some();
    let mut scratch = probs
        .is_none()
        .then(|| Array2::uninit((QUERY_BLOCK.min(n_q), k.nrows())));
    for start in (0..n_q).step_by(QUERY_BLOCK) {
        let end = (start + QUERY_BLOCK).min(n_q);
        let rows = s![start..end, ..];
        let block = match (probs.as_mut(), scratch.as_mut()) {
            (Some(probs), _) => probs.slice_mut(rows),
            (None, Some(scratch)) => scratch.slice_mut(s![..end - start, ..]),
            (None, None) => unreachable!("a buffer is made where the probabilities are not kept"),
        }; // (block, n_k)
        let mask = mask.map(|m| m.slice_move(rows));
        // the probabilities, and the keys outside which they are all 0 (none: any key)
        let (probs, reach) = match &mut scores {
            Scores::Kept(scores) => {
                // QKᵀ·factor, every score (the masked ones are shown too)
                let scores =
                    matmul_in_one_thread(q.slice(rows), keys, factor, None, scores.slice_mut(rows));
                // the softmax over the keys some row of the block may read, in whole lanes of
                // its sums (the same bits as over the row), the others' 0 written here
                let Reached { lanes, .. } = Reached::of(mask, k.nrows());
                let mut block = block;
                zero_outside(&mut block, lanes.clone(), MaybeUninit::new(0.0));
                softmax_rows(
                    scores.slice(s![.., lanes.clone()]),
                    block.slice_mut(s![.., lanes.clone()]),
                    mask.map(|m| m.slice_move(s![.., lanes])),
                );
                // SAFETY: the lanes' columns were written by the softmax, the others above
                (unsafe { block.assume_init() }, None)
            }
            // probabilities not kept: `QKᵀ` only over the keys some row of the block may read
            // (a causal block's keys up to its last row, a sliding layer's its band), the
            // others' scores masked whatever they are (`masked_fill` writes −∞ over them), and
            // `·V` over those keys alone
            Scores::Dropped if !kept => {
                let Reached {
                    panels,
                    keys: reached,
                    lanes,
                } = Reached::of(mask, k.nrows());
                let mut block = block;
                zero_outside(&mut block, reached.clone(), MaybeUninit::new(0.0));
                let within = block.view_mut();
                matmul_part_in_one_thread(
                    q.slice(rows),
                    keys,
                    Part::panels(panels),
                    factor,
                    within,
                );
                // SAFETY: the panels' columns were written by the product, the others above
                let mut probs = unsafe { block.assume_init() };
                // softmax over the reached keys alone (in whole lanes of its sums: the same
                // bits as over the row), the others' 0 written above
                softmax_rows_in_place(
                    probs.slice_mut(s![.., lanes.clone()]),
                    mask.map(|m| m.slice_move(s![.., lanes])),
                );
                (probs, Some(reached))
            }
            // every score computed in the probabilities (the largest |score| read from them
            // there, where it is asked for), then the softmax over the keys some row of the
            // block may read, in whole lanes of its sums (the same bits as over the row), the
            // others' 0 written here
            Scores::Largest(_) | Scores::Dropped => {
                let mut probs = matmul_in_one_thread(q.slice(rows), keys, factor, None, block);
                if let Scores::Largest(largest) = &mut scores {
                    **largest = largest_abs(probs.view(), **largest);
                }
                let Reached { lanes, .. } = Reached::of(mask, k.nrows());
                zero_outside(&mut probs, lanes.clone(), 0.0);
                softmax_rows_in_place(
                    probs.slice_mut(s![.., lanes.clone()]),
                    mask.map(|m| m.slice_move(s![.., lanes])),
                );
                (probs, None)
            }
        };
        if let Some((fold, first_row)) = fold.as_mut() {
            // each row's keys outside the reached ones are 0: only those are folded
            let keys = reach.clone().unwrap_or(0..k.nrows());
            for (i, row) in probs.rows().into_iter().enumerate() {
                let row = row.to_slice().expect("a block's rows are contiguous");
                fold.row(*first_row + start + i, keys.start, &row[keys.clone()]);
            }
        }
        if let (Some(out), Some(values)) = (output.as_mut(), &values) {
            // (block, d_v)
            let out = out.slice_mut(rows);
            match reach {
                Some(keys) => {
                    matmul_part_in_one_thread(probs.view(), values, Part::depth(keys), 1.0, out)
                }
                None => matmul_in_one_thread(probs.view(), values, 1.0, None, out),
            };
        }
    }
}

/// The panels of `Kᵀ` ([`NR`] keys each, of `n_k`) that hold every key some row of `mask` may
/// read (`mask`: a block's rows; none: every key).
///
/// # Shapes
/// * `mask`: `(rows, n_k)`
fn reached_panels(mask: Option<ArrayView2<bool>>, n_k: usize) -> Range<usize> {
    let Some(mask) = mask else {
        return 0..n_k.div_ceil(NR);
    };
    let (mut first, mut last) = (n_k, 0);
    for row in mask.rows() {
        let span = match row.as_slice() {
            Some(row) => attended_span(row),
            None => attended_span(&row.to_vec()),
        };
        if !span.is_empty() {
            first = first.min(span.start);
            last = last.max(span.end);
        }
    }
    if first >= last {
        return 0..0; // every key masked: every probability 0 (the softmax of −∞ alone)
    }
    first / NR..last.div_ceil(NR)
}

/// The keys some row of a block may read: their panels of `Kᵀ` ([`reached_panels`]), the keys
/// those panels hold (within `n_k`), and the whole lanes of the softmax's sums that hold those
/// ([`whole_lanes`]: a softmax over them gives the same bits as over the row).
struct Reached {
    panels: Range<usize>,
    keys: Range<usize>,
    lanes: Range<usize>,
}

impl Reached {
    /// # Shapes
    /// * `mask`: `(rows, n_k)`
    fn of(mask: Option<ArrayView2<bool>>, n_k: usize) -> Self {
        let panels = reached_panels(mask, n_k);
        let keys = (panels.start * NR).min(n_k)..(panels.end * NR).min(n_k);
        let lanes = whole_lanes(keys.clone(), n_k);
        Reached {
            panels,
            keys,
            lanes,
        }
    }
}

/// Writes `zero` in every column of `block` outside `keep`.
fn zero_outside<T: Clone>(block: &mut ArrayViewMut2<T>, keep: Range<usize>, zero: T) {
    for mut row in block.rows_mut() {
        row.slice_mut(s![..keep.start]).fill(zero.clone());
        row.slice_mut(s![keep.end..]).fill(zero.clone());
    }
}

/// A key/value head packed for the products of [`attend_into`] once for every query head and
/// block of rows that reads it: `Kᵀ`, and `V` where `·V` is taken (else packed by the call).
///
/// # Shapes
/// * `keys`: `(d_k, n_k)`, `values`: `(n_k, d_v)`
#[derive(Clone, Copy)]
struct Packed<'p> {
    keys: &'p PackedB,
    values: Option<&'p PackedB>,
}

/// Query rows from which [`attend_into`] packs `Kᵀ` and `V` for the matrix product: below, as
/// in a decoding step (one row), packing them would cost as much as the products themselves.
const PACKED_MIN_QUERIES: usize = 4;

/// Output columns [`attend_rows`] sums over the keys at a time, held in registers: 32 floats,
/// eight of wasm's vectors (independent chains of adds, so a key's adds do not wait for the
/// last key's), two of AVX-512's.
const CONTEXT_LANES: usize = 32;

/// [`attend_into`] for a few query rows, straight from `k` and `v`: each score a dot product of
/// the query with a key, each output row the probabilities' sum of the value rows.
///
/// # Shapes
/// As [`attend_into`]'s.
#[allow(clippy::too_many_arguments)]
fn attend_rows(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    mask: Option<ArrayView2<bool>>,
    factor: f32,
    mut scores: Option<ArrayViewMut2<MaybeUninit<f32>>>,
    mut probs: Probs,
    mut output: Option<ArrayViewMut2<MaybeUninit<f32>>>,
) {
    // a head's rows are contiguous in the projections (its columns of each row)
    fn slice<'a>(x: ArrayView1<'a, f32>) -> Cow<'a, [f32]> {
        match x.to_slice() {
            Some(x) => Cow::Borrowed(x),
            None => Cow::Owned(x.to_vec()),
        }
    }
    let mask = mask.as_ref().map(|m| m.as_standard_layout());
    let (mut row, mut context) = (vec![0.0f32; k.nrows()], vec![0.0f32; v.ncols()]);
    // the keys and values as rows of a slice, each `stride` after the last (the head's columns
    // of the projections: no copy)
    let (k, k_stride) = rows_of(&k);
    let (v_rows, v_stride) = rows_of(&v);
    let (d_k, d_v) = (q.ncols(), v.ncols());
    let key = |j: usize| &k[j * k_stride..][..d_k];
    let value = |j: usize| &v_rows[j * v_stride..][..d_v];
    isa::vectorised(
        #[inline(always)]
        || {
            for (i, q) in q.rows().into_iter().enumerate() {
                let q = slice(q);
                let allowed = mask.as_ref().map(|m| {
                    let row = m.row(i);
                    row.to_slice()
                        .expect("a standard-layout array's row is contiguous")
                });
                // QKᵀ·factor
                for (j, s) in row.iter_mut().enumerate() {
                    *s = dot(&q, key(j)) * factor;
                }
                if let Some(scores) = scores.as_mut() {
                    write_row(scores.row_mut(i), &row);
                }
                masked_softmax_in_place(&mut row, allowed);
                match &mut probs {
                    Probs::Kept(probs) => write_row(probs.row_mut(i), &row),
                    Probs::Folded { fold, first_row } => fold.row(*first_row + i, 0, &row),
                    Probs::Dropped => {}
                }
                if let Some(output) = output.as_mut() {
                    // Σⱼ pⱼ·vⱼ, a run of CONTEXT_LANES columns at a time, each held in
                    // registers over every key (not stored and loaded again at each key)
                    let (runs, tail) = context.as_chunks_mut::<CONTEXT_LANES>();
                    for (r, c) in runs.iter_mut().enumerate() {
                        let from = r * CONTEXT_LANES;
                        let mut acc = [0.0f32; CONTEXT_LANES];
                        for (j, &p) in row.iter().enumerate() {
                            let v: &[f32; CONTEXT_LANES] = value(j)[from..from + CONTEXT_LANES]
                                .try_into()
                                .expect("a run of a value row");
                            for l in 0..CONTEXT_LANES {
                                acc[l] += p * v[l];
                            }
                        }
                        *c = acc;
                    }
                    let from = d_v - tail.len();
                    tail.fill(0.0);
                    for (j, &p) in row.iter().enumerate() {
                        for (c, &v) in tail.iter_mut().zip(&value(j)[from..]) {
                            *c += p * v;
                        }
                    }
                    write_row(output.row_mut(i), &context);
                }
            }
        },
    );
}

/// The rows of `x` as one slice, each `stride` values after the last: `x`'s own memory where its
/// rows are contiguous (a head's columns of a projection), else a copy in standard layout. (The
/// tiled product's `with_contiguous_rows` and `row_of` give the same rows one view at a time:
/// [`attend_rows`] taking each key and value so measured 15 % slower natively, 30 layers × 9
/// heads of one row over 600 keys: 5.2–5.4 ms against 4.4–4.7.)
///
/// # Shapes
/// * `x`: `(n, d)` → `(n−1)·stride + d` values
fn rows_of<'a>(x: &ArrayView2<'a, f32>) -> (Cow<'a, [f32]>, usize) {
    let (n, d) = x.dim();
    let stride = x.strides()[0];
    if n == 0 || d == 0 {
        return (Cow::Borrowed(&[]), 0);
    }
    if x.strides()[1] == 1 || d == 1 {
        if let Ok(stride) = usize::try_from(stride) {
            if stride >= d {
                // SAFETY: the span runs from the view's first value to its last (row i's d
                // values start at `ptr + i·stride`, column stride 1), within the one
                // allocation the view borrows for 'a; between its rows lie the other heads'
                // columns of the same projection, which attention only reads
                let all = unsafe { std::slice::from_raw_parts(x.as_ptr(), (n - 1) * stride + d) };
                return (Cow::Borrowed(all), stride);
            }
        }
    }
    let owned = x.as_standard_layout().into_owned();
    (Cow::Owned(owned.into_raw_vec_and_offset().0), d)
}

/// `values` written into `row`.
#[inline(always)]
fn write_row(mut row: ArrayViewMut1<MaybeUninit<f32>>, values: &[f32]) {
    for (r, &v) in row.iter_mut().zip(values) {
        r.write(v);
    }
}

/// `probs = softmax(masked_fill(scores, mask == 0, -inf))`, row by row, vectorised for the
/// widest instruction set the CPU has; `probs` may be uninitialised, and is returned written.
///
/// # Shapes
/// * `scores`, `probs`, `mask`: `(n, n_k)`
fn softmax_rows<'p>(
    scores: ArrayView2<f32>,
    mut probs: ArrayViewMut2<'p, MaybeUninit<f32>>,
    mask: Option<ArrayView2<bool>>,
) -> ArrayViewMut2<'p, f32> {
    for_each_row(
        probs.view_mut(),
        mask,
        #[inline(always)]
        |i, mut row, allowed| {
            let from = scores.row(i);
            match (row.as_slice_mut(), from.as_slice()) {
                (Some(row), Some(from)) => {
                    masked_softmax(from, row, allowed);
                }
                // a strided view (never the engine's own arrays): a contiguous copy
                _ => {
                    let mut copy = from.to_vec();
                    masked_softmax_in_place(&mut copy, allowed);
                    for (p, v) in row.iter_mut().zip(copy) {
                        p.write(v);
                    }
                }
            }
        },
    );
    // SAFETY: every row of `probs` was written above
    unsafe { probs.assume_init() }
}

/// [`softmax_rows`] of scores that are in `probs` already, turned into probabilities in place.
///
/// # Shapes
/// * `probs`, `mask`: `(n, n_k)`
fn softmax_rows_in_place(probs: ArrayViewMut2<f32>, mask: Option<ArrayView2<bool>>) {
    for_each_row(
        probs,
        mask,
        #[inline(always)]
        |_, mut row, allowed| match row.as_slice_mut() {
            Some(row) => masked_softmax_in_place(row, allowed),
            // a strided view (never the engine's own arrays): a contiguous copy
            None => {
                let mut copy = row.to_vec();
                masked_softmax_in_place(&mut copy, allowed);
                row.assign(&ndarray::ArrayView1::from(&copy));
            }
        },
    );
}

/// `f(i, row i, row i of the mask)` for each row of `rows`, compiled for the widest instruction
/// set the CPU has (`f` is inlined into it).
///
/// # Shapes
/// * `rows`, `mask`: `(n, n_k)`
#[inline(always)]
fn for_each_row<T>(
    mut rows: ArrayViewMut2<T>,
    mask: Option<ArrayView2<bool>>,
    f: impl Fn(usize, ArrayViewMut1<T>, Option<&[bool]>),
) {
    isa::vectorised(
        #[inline(always)]
        || {
            for (i, row) in rows.rows_mut().into_iter().enumerate() {
                // each row of `mask` as a slice: the engine's masks' rows are contiguous (some
                // of their columns too), a strided view's row is copied
                let allowed = mask.map(|m| {
                    let row = m.index_axis_move(Axis(0), i);
                    match row.to_slice() {
                        Some(row) => Cow::Borrowed(row),
                        None => Cow::Owned(row.to_vec()),
                    }
                });
                f(i, row, allowed.as_deref());
            }
        },
    );
}

/// Splits the last axis into heads: `x.view(T, H, d).transpose(0, 1)`, a view (no copy):
/// head `h` is columns `h·d..(h+1)·d` of `x`.
///
/// # Shapes
/// * `x`: `(T, H·d)`, rows contiguous → `(H, T, d)`
pub fn split_heads(x: ArrayView2<f32>, heads: usize) -> Result<ArrayView3<f32>> {
    let (t, d_model) = x.dim();
    if heads == 0 || !d_model.is_multiple_of(heads) {
        return Err(Error::Shape {
            what: format!("split into {heads} heads"),
            expected: vec![t, heads.max(1) * (d_model / heads.max(1))],
            found: vec![t, d_model],
        });
    }
    let d = d_model / heads;
    let x = x
        .into_shape_with_order((t, heads, d)) // (T, H, d)
        .map_err(|e| Error::Input(format!("split into {heads} heads: {e}")))?;
    Ok(x.permuted_axes([1, 0, 2])) // (H, T, d)
}

/// Concatenates heads back: `x.transpose(0, 1).reshape(T, H·d)`.
///
/// # Shapes
/// * `x`: `(H, T, d)` → `(T, H·d)`
pub fn merge_heads(x: ArrayView3<f32>) -> Array2<f32> {
    let (h, t, d) = x.dim();
    let x = x.permuted_axes([1, 0, 2]).as_standard_layout().into_owned(); // (T, H, d)
    x.into_shape_with_order((t, h * d))
        .expect("a standard-layout array reshapes") // (T, H·d)
}

/// The output of multi-head attention: its per-head weights, and the projections and output.
///
/// # Shapes
/// * `probs`, `scores`: `(H, n_q, n_k)`
#[derive(Debug, Clone)]
pub struct MultiHeadOutput {
    pub probs: Array3<f32>,
    pub scores: Array3<f32>,
    pub projections: Projections,
}

/// Where [`heads_into`] writes each head's probabilities and, if kept, scores: the caller's
/// arrays (a layer's slice of the trace), so nothing is filled and then copied. They may be
/// uninitialised: when it returns `Ok`, every value of each has been written (a knocked-out
/// head's too), and nothing is read before it is written. `probs`: `None` when they are not
/// kept (a long text's pass, which keeps the queries and keys instead): each head then
/// computes them a block of query rows at a time in a buffer of its own, `QUERY_BLOCK × n_k`,
/// never `n_q × n_k`, with the same values, and folds each block into its thumbnails in
/// `folds` where they are given.
///
/// # Shapes
/// * `probs`, `scores`: `(H, n_q, n_k)`; `folds`: `(H,)`, each over `n_k` keys
pub struct HeadArrays<'a> {
    pub probs: Option<ArrayViewMut3<'a, MaybeUninit<f32>>>,
    pub scores: Option<ArrayViewMut3<'a, MaybeUninit<f32>>>,
    pub folds: Option<Folds<'a>>,
}

/// Each head's thumbnails being folded ([`HeadArrays::folds`]), and the row of the text that
/// the queries' first is (the queries may be the text's last rows: a pass that reuses the last
/// one's thumbnails).
pub struct Folds<'a> {
    pub heads: &'a mut [HeadFold],
    pub first_row: usize,
}

/// What multi-head attention computes besides the per-head arrays.
///
/// # Shapes
/// * `output`: `(n_q, D)`, `W_o·context + b_o`
/// * `q`: `(n_q, H·d_k)`, `k`: `(n_k, H·d_k)`, `v`: `(n_k, H·d_v)`: the projections before the
///   split into heads
/// * `context`: `(n_q, H·d_v)`, the heads' outputs concatenated (knocked-out heads zero)
#[derive(Debug, Clone)]
pub struct Projections {
    pub output: Array2<f32>,
    pub q: Array2<f32>,
    pub k: Array2<f32>,
    pub v: Array2<f32>,
    pub context: Array2<f32>,
}

/// One attention's four dense layers: Q, K and V, and the output projection.
#[derive(Clone, Copy)]
pub struct AttentionLinears<'a> {
    pub query: &'a Linear,
    pub key: &'a Linear,
    pub value: &'a Linear,
    pub output: &'a Linear,
}

/// Multi-head attention: project Q from `x_q` and K, V from `x_kv`, split into heads,
/// attend per head (`QKᵀ/√d_k`, or `QKᵀ` with [`ScoreScale::None`]), concatenate, project out.
/// `x_q == x_kv` is self-attention; otherwise it is encoder–decoder (cross) attention with
/// `n_q ≠ n_k`. Heads marked in `off` are knocked out: their context is zero in the
/// concatenation (their probabilities are still returned).
///
/// # Shapes
/// * `x_q`: `(n_q, D)`, `x_kv`: `(n_k, D)`, `mask`: `(n_q, n_k)`, `off`: `(H,)` or empty
pub fn multi_head_attention(
    w: AttentionLinears<'_>,
    heads: usize,
    x_q: ArrayView2<f32>,
    x_kv: ArrayView2<f32>,
    mask: Option<ArrayView2<bool>>,
    off: &[bool],
    scale: ScoreScale,
) -> Result<MultiHeadOutput> {
    let (q, k, v) = (
        linear(x_q, w.query),  // (n_q, H·d_k)
        linear(x_kv, w.key),   // (n_k, H·d_k)
        linear(x_kv, w.value), // (n_k, H·d_v)
    );
    let (n_q, n_k) = (q.nrows(), k.nrows());
    let mut probs = Array3::uninit((heads, n_q, n_k));
    let mut scores = Array3::uninit((heads, n_q, n_k));
    let mut context = Array2::uninit((n_q, v.ncols()));
    let arrays = HeadArrays {
        probs: Some(probs.view_mut()),
        scores: Some(scores.view_mut()),
        folds: None,
    };
    heads_into(
        q.view(),
        k.view(),
        v.view(),
        Heads::all(heads),
        mask,
        off,
        scale.into(),
        arrays,
        context.view_mut(),
    )?;
    // SAFETY: `heads_into` returned Ok, so it wrote every value of the three
    let (probs, scores, context) = unsafe {
        (
            probs.assume_init(),
            scores.assume_init(),
            context.assume_init(),
        )
    };
    let output = linear(context.view(), w.output); // (n_q, D)
    Ok(MultiHeadOutput {
        probs,
        scores,
        projections: Projections {
            output,
            q,
            k,
            v,
            context,
        },
    })
}

/// One query head's probabilities (and scores, when `scores` says so) from a pass's queries
/// and keys, computed as [`heads_into`] computes them in the pass (the same steps over the same
/// rows: the same values): query head `head` with key head `head / (H / H_kv)`.
///
/// # Shapes
/// * `q`: `(n_q, H·d)`, `k`: `(n_k, H_kv·d)`, `mask`: `(n_q, n_k)` → `(n_q, n_k)` each
pub fn head_attention(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    heads: Heads,
    head: usize,
    mask: ArrayView2<bool>,
    scale: ScoreFactor,
    scores: bool,
) -> Result<(Array2<f32>, Option<Array2<f32>>)> {
    let (n_q, n_k) = (q.nrows(), k.nrows());
    let mut probs = Array2::uninit((n_q, n_k));
    let mut kept = scores.then(|| Array2::uninit((n_q, n_k)));
    head_attention_into(
        q,
        k,
        heads,
        head,
        mask,
        scale,
        probs.view_mut(),
        kept.as_mut().map(|s| s.view_mut()).into(),
        None,
    )?;
    // SAFETY: `head_attention_into` returned Ok: it wrote every value of both
    unsafe { Ok((probs.assume_init(), kept.map(|s| s.assume_init()))) }
}

/// Query head `head`'s `Kᵀ` (its key head's columns of `k`) packed for the products of
/// [`head_attention_into`]: a head computed in blocks of rows packs it once, not once a block.
///
/// # Shapes
/// * `k`: `(n_k, H_kv·d)`
pub fn head_keys(k: ArrayView2<f32>, heads: Heads, head: usize) -> Result<PackedB> {
    heads.check("attention")?;
    let d = k.ncols() / heads.key_value;
    if head >= heads.query || k.ncols() != heads.key_value * d {
        return Err(Error::Shape {
            what: format!(
                "head {head}'s keys (n_k, H_kv·d), {} query and {} key/value heads",
                heads.query, heads.key_value
            ),
            expected: vec![k.nrows(), heads.key_value * d],
            found: vec![k.nrows(), k.ncols()],
        });
    }
    Ok(PackedB::from_transposed(self::head(
        k,
        head / heads.group(),
        d,
    )))
}

/// [`head_attention`] written into `probs` (and its scores as `scores` says: [`Scores`]), which
/// may be uninitialised: when this returns `Ok`, every value of them has been written. A head's rows
/// may go in blocks, each into its rows of one array: each row's values are its own; `keys`,
/// where given, is [`head_keys`] of `k` for `head`, packed once for every block.
///
/// # Shapes
/// * `q`: `(n_q, H·d)`, `k`: `(n_k, H_kv·d)`, `mask`, `probs`, `scores`: `(n_q, n_k)`
#[allow(clippy::too_many_arguments)]
pub fn head_attention_into(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    heads: Heads,
    head: usize,
    mask: ArrayView2<bool>,
    scale: ScoreFactor,
    probs: ArrayViewMut2<MaybeUninit<f32>>,
    scores: Scores,
    keys: Option<&PackedB>,
) -> Result<()> {
    heads.check("attention")?;
    let (n_q, n_k) = (q.nrows(), k.nrows());
    let d = q.ncols() / heads.query;
    if head >= heads.query || q.ncols() != heads.query * d || k.ncols() != heads.key_value * d {
        return Err(Error::Shape {
            what: format!(
                "head {head} of queries (n_q, H·d) and keys (n_k, H_kv·d), {} query and {} \
                 key/value heads",
                heads.query, heads.key_value
            ),
            expected: vec![n_q, heads.query * d, n_k, heads.key_value * d],
            found: vec![n_q, q.ncols(), n_k, k.ncols()],
        });
    }
    check_mask(Some(mask), n_q, n_k)?;
    let kept = match &scores {
        Scores::Kept(kept) => Some(kept),
        Scores::Dropped | Scores::Largest(_) => None,
    };
    for a in std::iter::once(&probs).chain(kept) {
        if a.dim() != (n_q, n_k) {
            return Err(Error::Shape {
                what: "one head's attention (n_q, n_k)".into(),
                expected: vec![n_q, n_k],
                found: a.shape().to_vec(),
            });
        }
    }
    if let Some(keys) = keys.filter(|keys| keys.dim() != (d, n_k)) {
        return Err(Error::Shape {
            what: format!("head {head}'s packed Kᵀ (d, n_k)"),
            expected: vec![d, n_k],
            found: vec![keys.dim().0, keys.dim().1],
        });
    }
    let g = head / heads.group();
    attend_into(
        self::head(q, head, d),
        self::head(k, g, d),
        // no values: `·V` is skipped
        ArrayView2::from_shape((n_k, 0), &[]).expect("an empty (n_k, 0) view"),
        Some(mask),
        scale,
        scores,
        Probs::Kept(probs),
        None,
        keys.map(|keys| Packed { keys, values: None }),
    );
    Ok(())
}

/// A part of a head in [`heads_into`], some of its query rows: where their probabilities,
/// scores and context go.
struct PartWork<'a, 's> {
    head: usize,
    rows: Range<usize>,
    probs: Probs<'a>,
    scores: Option<ArrayViewMut2<'s, MaybeUninit<f32>>>,
    context: ArrayViewMut2<'s, MaybeUninit<f32>>,
}

/// Tasks a thread [`heads_into`] aims for (each head's rows cut into parts to make them), so
/// that the last ones to finish leave the others little to wait.
const TASKS_A_THREAD: usize = 8;

/// Query rows a part of a head takes at least in [`heads_into`]: a block.
const PART_MIN_ROWS: usize = QUERY_BLOCK;

/// Where [`heads_into`] cuts each head's `n_q` query rows into `parts` of about the same work
/// (the first row of each part but the first): a row's work is the keys its mask lets it read
/// (a causal head's later rows read more), read every [`QUERY_BLOCK`]th row. Each cut is the
/// text's first row of a row of thumbnail bins `align` rows wide (`first_row` being the
/// queries' first), and no part has fewer than [`PART_MIN_ROWS`] rows.
///
/// # Shapes
/// * `mask`: `(n_q, n_k)`
fn row_cuts(
    mask: Option<ArrayView2<bool>>,
    n_q: usize,
    parts: usize,
    first_row: usize,
    align: usize,
) -> Vec<usize> {
    let parts = parts.min(n_q / PART_MIN_ROWS);
    if parts < 2 {
        return Vec::new();
    }
    // each block's work: its rows times the keys its first row reads, and one for the rest
    // of a row's work
    let work: Vec<usize> = (0..n_q)
        .step_by(QUERY_BLOCK)
        .map(|r| {
            let keys = mask.map_or(0, |m| {
                let row = m.row(r);
                match row.as_slice() {
                    Some(row) => attended_span(row).len(),
                    None => attended_span(&row.to_vec()).len(),
                }
            });
            (keys + 1) * QUERY_BLOCK.min(n_q - r)
        })
        .collect();
    let total: usize = work.iter().sum();
    let mut cuts = Vec::with_capacity(parts - 1);
    let (mut done, mut block) = (0, 0);
    for p in 1..parts {
        while block < work.len() && done < total / parts * p {
            done += work[block];
            block += 1;
        }
        // the next row of bins' first row
        let at = (first_row + block * QUERY_BLOCK).next_multiple_of(align) - first_row;
        let after = cuts.last().copied().unwrap_or(0);
        if at >= after + PART_MIN_ROWS && at + PART_MIN_ROWS <= n_q {
            cuts.push(at);
        }
    }
    cuts
}

/// `a`'s rows cut at `cuts` (each part's first row but the first's), in order.
fn rows_at<'a, T>(mut a: ArrayViewMut2<'a, T>, cuts: &[usize]) -> Vec<ArrayViewMut2<'a, T>> {
    let mut parts = Vec::with_capacity(cuts.len() + 1);
    let mut done = 0;
    for &cut in cuts {
        let (part, rest) = a.split_at(Axis(0), cut - done);
        parts.push(part);
        a = rest;
        done = cut;
    }
    parts.push(a);
    parts
}

/// Each of `h` heads' `(n_q, n_k)` of `a` `(H, n_q, n_k)`, or `h` nones where there is none.
fn per_head<'s>(
    a: Option<&'s mut ArrayViewMut3<'_, MaybeUninit<f32>>>,
    h: usize,
) -> Vec<Option<ArrayViewMut2<'s, MaybeUninit<f32>>>> {
    match a {
        Some(a) => a.axis_iter_mut(Axis(0)).map(Some).collect(),
        None => (0..h).map(|_| None).collect(),
    }
}

/// Head `h`'s columns of `x`, `h·d..(h+1)·d`.
fn head(x: ArrayView2<'_, f32>, h: usize, d: usize) -> ArrayView2<'_, f32> {
    x.slice_move(s![.., h * d..(h + 1) * d])
}

/// The heads of multi-head attention over projected queries, keys and values: each query head
/// `h` attends with its columns `h·d..(h+1)·d` of `q` and the columns of key/value head
/// `g = h / (H / H_kv)` of `k` and `v` (`x.view(n, H, d).transpose(0, 1)`, as views; HF's
/// `repeat_kv` without the copy), writes its probabilities (and scores, if asked for) into
/// `arrays` and its output into its columns of `context`: `concat(head₁ … head_H)`, before
/// `W_o`. Heads marked in `off` are knocked out: their context is zero (their probabilities are
/// still written). `context` may be uninitialised: when this returns `Ok`, every value of it has
/// been written. With threads, each head's rows are cut into parts of about the same work that
/// attend as tasks of their own ([`row_cuts`]; each row is computed as it would be alone, so
/// the bits are those of the head whole), every key/value head packed once for them.
///
/// # Shapes
/// * `q`: `(n_q, H·d_k)`, `k`: `(n_k, H_kv·d_k)`, `v`: `(n_k, H_kv·d_v)`, `mask`: `(n_q, n_k)`,
///   `off`: `(H,)` or empty, `arrays`: see [`HeadArrays`], `context`: `(n_q, H·d_v)`
#[allow(clippy::too_many_arguments)]
pub fn heads_into(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    heads: Heads,
    mask: Option<ArrayView2<bool>>,
    off: &[bool],
    scale: ScoreFactor,
    arrays: HeadArrays,
    mut context: ArrayViewMut2<MaybeUninit<f32>>,
) -> Result<()> {
    let (n_q, n_k) = (q.nrows(), k.nrows());
    let shape = |what: &str, expected: Vec<usize>, found: &[usize]| {
        Err(Error::Shape {
            what: what.into(),
            expected,
            found: found.to_vec(),
        })
    };
    heads.check("attention")?;
    let (h, kv) = (heads.query, heads.key_value);
    if !q.ncols().is_multiple_of(h) || !v.ncols().is_multiple_of(kv) {
        return shape(
            &format!("queries split into {h} heads, values into {kv}"),
            vec![n_q, h * (q.ncols() / h)],
            q.shape(),
        );
    }
    let (d_k, d_v) = (q.ncols() / h, v.ncols() / kv);
    if k.dim() != (n_k, kv * d_k) {
        return shape(
            "attention keys (n_k, H_kv·d_k)",
            vec![n_k, kv * d_k],
            k.shape(),
        );
    }
    if v.nrows() != n_k {
        return shape(
            "attention values (n_k, H_kv·d_v)",
            vec![n_k, kv * d_v],
            v.shape(),
        );
    }
    if context.dim() != (n_q, h * d_v) {
        return shape(
            "attention context (n_q, H·d_v)",
            vec![n_q, h * d_v],
            context.shape(),
        );
    }
    check_mask(mask, n_q, n_k)?;
    let HeadArrays {
        mut probs,
        mut scores,
        folds,
    } = arrays;
    for a in probs.iter().chain(scores.as_ref()) {
        if a.dim() != (h, n_q, n_k) {
            return shape(
                "per-head attention arrays (H, n_q, n_k)",
                vec![h, n_q, n_k],
                a.shape(),
            );
        }
    }
    if let Some(folds) = folds.as_ref().filter(|f| f.heads.len() != h) {
        return shape("per-head thumbnails (H,)", vec![h], &[folds.heads.len()]);
    }
    // each head's rows cut into parts of about the same work, so that the heads' tasks share
    // the threads evenly (9 heads on 2 threads: one would take 5 and the other wait a head's
    // time, each layer); a part folds its rows apart from a row of bins' first on
    let threads = rayon::current_num_threads();
    let parts = if threads < 2 {
        1
    } else {
        (TASKS_A_THREAD * threads).div_ceil(h)
    };
    let (first_row, align) = match &folds {
        Some(f) => (f.first_row, f.heads.first().map_or(1, |fold| fold.bins().w)),
        None => (0, 1),
    };
    let cuts = row_cuts(mask, n_q, parts, first_row, align);
    let bounds: Vec<usize> = std::iter::once(0)
        .chain(cuts.iter().copied())
        .chain([n_q])
        .collect();
    // each head's later parts' folds, joined into its own when every part is done
    let mut folds = folds;
    let mut later: Vec<Vec<HeadFold>> = match &folds {
        Some(f) => f
            .heads
            .iter()
            .map(|fold| cuts.iter().map(|_| fold.part()).collect())
            .collect(),
        None => Vec::new(),
    };
    // each key/value head's `Kᵀ` and `V` packed once for its query heads' parts (none for a
    // few query rows, a decoding step's, which read them as they are)
    let mut packed: Vec<Option<(PackedB, PackedB)>> = (0..kv).map(|_| None).collect();
    if n_q >= PACKED_MIN_QUERIES {
        team::for_each_part(packed.iter_mut().enumerate(), |(g, slot)| {
            *slot = Some((
                PackedB::from_transposed(head(k, g, d_k)), // Kᵀ, (d_k, n_k)
                PackedB::from_matrix(head(v, g, d_v)),     // V, (n_k, d_v)
            ));
        });
    }
    // where each part's probabilities go, and its scores, or none where they are not kept
    let reborrowed = folds.as_mut().map(|f| Folds {
        heads: &mut *f.heads,
        first_row: f.first_row,
    });
    let mut work: Vec<PartWork> = Vec::with_capacity(h * parts);
    let each_head = Probs::per_head(probs.as_mut(), reborrowed, h)
        .into_iter()
        .zip(per_head(scores.as_mut(), h))
        .zip(context.axis_chunks_iter_mut(Axis(1), d_v))
        .zip(
            later
                .iter_mut()
                .map(Some)
                .chain(std::iter::repeat_with(|| None)),
        );
    for (i, (((probs, scores), context), later)) in each_head.enumerate() {
        let probs: Vec<Probs> = match probs {
            Probs::Kept(a) => rows_at(a, &cuts).into_iter().map(Probs::Kept).collect(),
            Probs::Folded { fold, first_row } => std::iter::once(fold)
                .chain(later.into_iter().flat_map(|folds| folds.iter_mut()))
                .zip(&bounds)
                .map(|(fold, &from)| Probs::Folded {
                    fold,
                    first_row: first_row + from,
                })
                .collect(),
            Probs::Dropped => bounds[1..].iter().map(|_| Probs::Dropped).collect(),
        };
        let scores: Vec<_> = match scores {
            Some(a) => rows_at(a, &cuts).into_iter().map(Some).collect(),
            None => bounds[1..].iter().map(|_| None).collect(),
        };
        let parts = probs.into_iter().zip(scores).zip(rows_at(context, &cuts));
        for (p, ((probs, scores), context)) in parts.enumerate() {
            work.push(PartWork {
                head: i,
                rows: bounds[p]..bounds[p + 1],
                probs,
                scores,
                context,
            });
        }
    }
    // the parts attend independently: in parallel where there are threads (on a decoding
    // step's team too, whose other threads took none of rayon's work: a step over ~600
    // positions spends a fifth of its time here in wasm), each writing its own rows of its
    // head's columns of the concatenation
    team::for_each_part(work, |part| {
        let PartWork {
            head: h,
            rows,
            probs,
            scores,
            mut context,
        } = part;
        let knocked_out = off.get(h).copied().unwrap_or(false);
        if knocked_out {
            context.fill(MaybeUninit::new(0.0)); // its context is zero
        }
        let g = h / heads.group();
        let packed = packed[g].as_ref();
        attend_into(
            head(q, h, d_k).slice_move(s![rows.clone(), ..]),
            head(k, g, d_k),
            head(v, g, d_v),
            mask.map(|m| m.slice_move(s![rows, ..])),
            scale,
            scores.into(),
            probs,
            (!knocked_out).then_some(context),
            packed.map(|(keys, values)| Packed {
                keys,
                values: Some(values),
            }),
        );
    });
    if let Some(f) = folds {
        for (fold, parts) in f.heads.iter_mut().zip(later) {
            for (part, &from) in parts.into_iter().zip(&cuts) {
                fold.join(part, f.first_row + from);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A causal mask of `n` positions, each row within `window` keys of itself (none: every
    /// key before it), the last `padding` keys masked (a padded item's).
    fn causal_band(n: usize, window: Option<usize>, padding: usize) -> Array2<bool> {
        Array2::from_shape_fn((n, n), |(i, j)| {
            j <= i && window.is_none_or(|w| i < j + w) && j < n - padding
        })
    }

    /// A pass that keeps no probability computes `QKᵀ` and `·V` of each block of rows only
    /// over the keys its rows may read: its context is the same bits as the pass that keeps
    /// every probability, over blocks whose reach skips keys at either end (a causal mask's
    /// later keys, a sliding window's earlier ones, past one pass of `·V`'s depth at 900
    /// positions, a padded item's last), with grouped heads; and each head's thumbnails, folded
    /// a block at a time over the keys it reached, are those of the head it keeps whole.
    #[test]
    fn heads_reaching_some_keys_alone_give_the_same_context_bits() {
        use crate::analysis::thumbnail::{Bins, HeadThumbnails};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let heads = Heads {
            query: 4,
            key_value: 2,
        };
        let d = 24;
        for (n, window, padding) in [
            (900, Some(37), 0),
            (800, None, 0),
            (200, None, 0),
            (200, Some(5), 0),
            (150, Some(37), 20),
            (70, Some(64), 3),
            (3, Some(2), 0),
        ] {
            let mut random = |rows, cols| {
                Array2::from_shape_fn((rows, cols), |_| rng.random_range(-2.0f32..2.0))
            };
            let (q, k, v) = (random(n, 4 * d), random(n, 2 * d), random(n, 2 * d));
            // causal, within the window, the padded last keys masked
            let mask = causal_band(n, window, padding);
            let bins = Bins::of(n);
            let run = |keep: bool| {
                let mut probs = Array3::uninit((4, n, n));
                let mut context = Array2::uninit((n, 4 * d));
                let mut folds = vec![HeadFold::new(bins, n); 4];
                let arrays = HeadArrays {
                    probs: keep.then(|| probs.view_mut()),
                    scores: None,
                    folds: (!keep).then_some(Folds {
                        heads: &mut folds[..],
                        first_row: 0,
                    }),
                };
                heads_into(
                    q.view(),
                    k.view(),
                    v.view(),
                    heads,
                    Some(mask.view()),
                    &[],
                    ScoreScale::SqrtDk.into(),
                    arrays,
                    context.view_mut(),
                )
                .unwrap();
                // SAFETY: `heads_into` returned Ok, writing every value of the context (and
                // of the probabilities where they were kept)
                let thumbnails = match keep {
                    true => unsafe { probs.assume_init() }
                        .outer_iter()
                        .map(|p| HeadThumbnails::of(p, bins))
                        .collect(),
                    false => folds.iter().map(HeadFold::thumbnails).collect::<Vec<_>>(),
                };
                (unsafe { context.assume_init() }, thumbnails)
            };
            let ((whole, kept), (banded, folded)) = (run(true), run(false));
            for (h, (a, b)) in kept.iter().zip(&folded).enumerate() {
                assert_eq!(
                    a, b,
                    "n {n}, window {window:?}, padding {padding}: head {h}"
                );
            }
            for (((i, j), a), b) in whole.indexed_iter().zip(banded.iter()) {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "n {n}, window {window:?}, padding {padding}: context ({i}, {j}) {a} vs {b}"
                );
            }
        }
    }

    /// Each head's rows cut into parts, each part a task (several threads), give the same bits
    /// as each head whole (one thread): probabilities, scores, context and thumbnails, the
    /// queries the text's first rows or its last ones (a pass that reuses the last), under
    /// causal masks, sliding windows and padding, with grouped heads and a head knocked out.
    #[test]
    fn heads_cut_into_parts_give_the_bits_of_heads_whole() {
        use crate::analysis::thumbnail::Bins;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let heads = Heads {
            query: 4,
            key_value: 2,
        };
        let d = 16;
        let pool = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
        };
        let (one, three) = (pool(1), pool(3));
        for (n, from, window, padding) in [
            (900, 0, None, 0),
            (1025, 300, None, 0),
            (700, 3, Some(100), 0),
            (600, 0, None, 40),
        ] {
            let mut random = |rows, cols| {
                Array2::from_shape_fn((rows, cols), |_| rng.random_range(-2.0f32..2.0))
            };
            let (q, k, v) = (random(n, 4 * d), random(n, 2 * d), random(n, 2 * d));
            let mask = causal_band(n, window, padding);
            let n_q = n - from;
            let (q, mask) = (q.slice(s![from.., ..]), mask.slice(s![from.., ..]));
            let run = |keep: bool| {
                let mut probs = Array3::uninit((4, n_q, n));
                let mut scores = Array3::uninit((4, n_q, n));
                let mut context = Array2::uninit((n_q, 4 * d));
                let mut folds = vec![HeadFold::new(Bins::of(n), n); 4];
                let arrays = HeadArrays {
                    probs: keep.then(|| probs.view_mut()),
                    scores: keep.then(|| scores.view_mut()),
                    folds: (!keep).then_some(Folds {
                        heads: &mut folds[..],
                        first_row: from,
                    }),
                };
                heads_into(
                    q,
                    k.view(),
                    v.view(),
                    heads,
                    Some(mask),
                    &[false, false, true, false],
                    ScoreScale::SqrtDk.into(),
                    arrays,
                    context.view_mut(),
                )
                .unwrap();
                let bits = |a: Array2<f32>| a.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                let bits3 = |a: Array3<f32>| a.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                // SAFETY: `heads_into` returned Ok, writing every value of the context, and of
                // the probabilities and scores where they were kept
                unsafe {
                    (
                        bits(context.assume_init()),
                        keep.then(|| (bits3(probs.assume_init()), bits3(scores.assume_init()))),
                        folds.iter().map(HeadFold::thumbnails).collect::<Vec<_>>(),
                    )
                }
            };
            for keep in [true, false] {
                let whole = one.install(|| run(keep));
                let parts = three.install(|| {
                    // the parts this pass cuts each head into
                    let cuts = row_cuts(Some(mask), n_q, 6, from, Bins::of(n).w);
                    assert!(cuts.len() >= 2, "n {n} from {from}: {cuts:?}");
                    run(keep)
                });
                let what = format!("n {n}, from {from}, window {window:?}, padding {padding}");
                assert!(whole.0 == parts.0, "{what}: the context");
                assert!(whole.1 == parts.1, "{what}: the probabilities and scores");
                assert!(whole.2 == parts.2, "{what}: the thumbnails");
            }
        }
    }

    /// Each head's rows are cut where the work before them is an equal share: a causal head's
    /// later rows read more keys, so its first part has more rows than its last; each cut is
    /// a row of bins' first row, in the text's rows.
    #[test]
    fn a_head_is_cut_into_parts_of_equal_work_at_rows_of_bins() {
        let n = 1024;
        let causal = Array2::from_shape_fn((n, n), |(i, j)| j <= i);
        let cuts = row_cuts(Some(causal.view()), n, 2, 0, 1);
        // half the keys a causal head reads are read by its first 1/√2 of rows
        assert_eq!(cuts, [768]);
        let cuts = row_cuts(None, n, 4, 0, 1);
        assert_eq!(cuts, [256, 512, 768]);
        // from the text's row 10, bins of 17 rows: each cut 10 rows before a multiple of 17
        let cuts = row_cuts(None, n, 4, 10, 17);
        assert!(cuts.iter().all(|c| (c + 10) % 17 == 0), "{cuts:?}");
        // no part under a block
        assert!(row_cuts(None, 127, 8, 0, 1).is_empty());
        assert_eq!(row_cuts(None, 128, 8, 0, 1), [64]);
    }

    /// A head that keeps its scores takes the softmax over the keys its block's rows may read
    /// alone: each row's probabilities are the same bits as the softmax over the whole row of
    /// its scores (masked_fill and softmax, `ops::masked_softmax`), under causal masks, sliding
    /// windows and padding; its rows computed in blocks against `head_keys` packed once are
    /// the same bits as the whole head packing its own; and with its scores not kept
    /// (`Scores::Largest`), the same probabilities and the largest |score| of every cell.
    #[test]
    fn a_head_s_softmax_over_its_reached_keys_is_the_whole_row_s() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let heads = Heads {
            query: 4,
            key_value: 2,
        };
        let d = 16;
        for (n, window, padding) in [
            (300, None, 0),
            (300, Some(40), 0),
            (130, Some(7), 9),
            (70, None, 5),
            (5, Some(2), 0),
        ] {
            let mut random = |rows, cols| {
                Array2::from_shape_fn((rows, cols), |_| rng.random_range(-3.0f32..3.0))
            };
            let (q, k) = (random(n, 4 * d), random(n, 2 * d));
            let mask = causal_band(n, window, padding);
            for head in [0, 3] {
                let factor = ScoreScale::SqrtDk.into();
                let (probs, scores) =
                    head_attention(q.view(), k.view(), heads, head, mask.view(), factor, true)
                        .unwrap();
                let scores = scores.expect("scores asked for");
                for i in 0..n {
                    let mut want = vec![MaybeUninit::uninit(); n];
                    let want = masked_softmax(
                        scores.row(i).as_slice().unwrap(),
                        &mut want,
                        Some(mask.row(i).as_slice().unwrap()),
                    );
                    for (j, (a, b)) in probs.row(i).iter().zip(want.iter()).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "n {n}, window {window:?}, padding {padding}, head {head}: ({i}, {j})"
                        );
                    }
                }
                // in blocks of 64 rows (the last up to 3 more: fewer than PACKED_MIN_QUERIES
                // rows take the few-row path), Kᵀ packed once
                let keys = head_keys(k.view(), heads, head).unwrap();
                // rows `rows` of the head into `probs`, its scores as `scores` says
                let rows_into = |rows: &Range<usize>,
                                 probs: ArrayViewMut2<'_, MaybeUninit<f32>>,
                                 scores: Scores<'_>| {
                    let (q, mask) = (
                        q.slice(s![rows.clone(), ..]),
                        mask.slice(s![rows.clone(), ..]),
                    );
                    head_attention_into(
                        q,
                        k.view(),
                        heads,
                        head,
                        mask,
                        factor,
                        probs,
                        scores,
                        Some(&keys),
                    )
                    .unwrap()
                };
                let (mut blocked, mut blocked_scores) =
                    (Array2::uninit((n, n)), Array2::uninit((n, n)));
                for at in (0..n)
                    .step_by(64)
                    .filter(|&at| at == 0 || n - at >= PACKED_MIN_QUERIES)
                {
                    let end = if n - (at + 64).min(n) < PACKED_MIN_QUERIES {
                        n
                    } else {
                        at + 64
                    };
                    let rows = at..end;
                    let probs = blocked.slice_mut(s![rows.clone(), ..]);
                    rows_into(
                        &rows,
                        probs,
                        Scores::Kept(blocked_scores.slice_mut(s![rows.clone(), ..])),
                    );
                }
                // SAFETY: every block of rows returned Ok, writing each value of both
                let (blocked, blocked_scores) =
                    unsafe { (blocked.assume_init(), blocked_scores.assume_init()) };
                for (a, b) in [(&probs, &blocked), (&scores, &blocked_scores)] {
                    for ((ij, x), y) in a.indexed_iter().zip(b.iter()) {
                        assert_eq!(x.to_bits(), y.to_bits(), "n {n}, head {head}: {ij:?}");
                    }
                }
                // the scores not kept, their largest |value| folded over blocks of 1, 2, 5 and
                // 64 rows in turn (under PACKED_MIN_QUERIES rows, the few-row path): every
                // cell's, the masked ones too, and the same probabilities
                let mut blocks = Vec::new();
                for size in [1, 2, 5, 64].into_iter().cycle() {
                    let at = blocks.last().map_or(0, |b: &Range<usize>| b.end);
                    if at == n {
                        break;
                    }
                    blocks.push(at..(at + size).min(n));
                }
                let mut largest = -1.0f32;
                let mut folded = Array2::uninit((n, n));
                for rows in &blocks {
                    rows_into(
                        rows,
                        folded.slice_mut(s![rows.clone(), ..]),
                        Scores::Largest(&mut largest),
                    );
                }
                // SAFETY: every block of rows returned Ok, writing each value
                let folded = unsafe { folded.assume_init() };
                // each block of rows alone: its own scores' largest |value|
                let want = blocks.iter().fold(-1.0f32, |most, rows| {
                    let (q, mask) = (
                        q.slice(s![rows.clone(), ..]),
                        mask.slice(s![rows.clone(), ..]),
                    );
                    let (_, kept) =
                        head_attention(q, k.view(), heads, head, mask, factor, true).unwrap();
                    let kept = kept.expect("scores asked for");
                    kept.iter().fold(most, |m, v| m.max(v.abs()))
                });
                let whole = scores.iter().fold(0f32, |m, v| m.max(v.abs()));
                assert!(
                    want > 0.0 && (want - whole).abs() <= 1e-6 * whole,
                    "{want} {whole}"
                );
                assert_eq!(largest.to_bits(), want.to_bits(), "n {n}, head {head}");
                // the packed path's probabilities: the same bits as with the scores kept
                for rows in blocks.iter().filter(|b| b.len() >= PACKED_MIN_QUERIES) {
                    for i in rows.clone() {
                        for j in 0..n {
                            let (x, y) = (folded[[i, j]], blocked[[i, j]]);
                            assert_eq!(x.to_bits(), y.to_bits(), "n {n}, head {head}: ({i}, {j})");
                        }
                    }
                }
            }
        }
        let keys = head_keys(ndarray::Array2::zeros((4, 2 * d)).view(), heads, 1).unwrap();
        let err = head_attention_into(
            ndarray::Array2::zeros((4, 4 * d)).view(),
            ndarray::Array2::zeros((5, 2 * d)).view(),
            heads,
            1,
            ndarray::Array2::from_elem((4, 5), true).view(),
            ScoreScale::SqrtDk.into(),
            Array2::uninit((4, 5)).view_mut(),
            Scores::Dropped,
            Some(&keys),
        )
        .unwrap_err();
        assert!(err.to_string().contains("packed Kᵀ"), "{err}");
    }
}
