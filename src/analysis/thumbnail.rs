//! A head's thumbnail: its probabilities max-pooled into at most [`THUMB`] × [`THUMB`] bins, with
//! its largest probability and where, as the page's grid and heads table show a long text's
//! heads: folded by the CPU engine's pass as it computes each block of query rows
//! ([`HeadFold`]), or from a head computed again from the kept queries and keys
//! ([`HeadThumbnails::of`]); none is copied to JavaScript. A run the page holds whole is pooled
//! here too, every head's own thumbnail alone ([`HeadsSummary`]); web/summary.js pools the heads
//! given to the page the same way (`thumbBins`, `foldRows`), and web/sink.js hides the first key
//! as [`HeadThumbnails::without_sink`] does.
//!
//! The head view's heatmap of a long text's head is pooled here too ([`PoolFold`]: the part on
//! screen to its device pixels, as web/summary.js `pooledPart` pools a head the page holds).

use ndarray::{s, ArrayView2, ArrayView5};

use crate::engine::cpu::attention::largest_abs;
use crate::engine::cpu::ops::fold_lanes;
use crate::linalg::team;

/// Side of a thumbnail at most: a head over more positions is pooled.
pub const THUMB: usize = 64;

/// How a head over `T` positions is pooled: bins of `w` consecutive positions (the last may hold
/// fewer), `side` of them along each axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bins {
    pub w: usize,
    pub side: usize,
}

impl Bins {
    /// The bins of a head over `t` positions: `w = ⌈t / THUMB⌉`, `side = ⌈t / w⌉`.
    pub fn of(t: usize) -> Self {
        let w = t.div_ceil(THUMB).max(1);
        Self {
            w,
            side: t.div_ceil(w),
        }
    }
}

/// A head pooled: each bin's largest probability, and the head's largest and the first cell in
/// row order that holds it.
///
/// # Shapes
/// * `values`: `(side, side)`, row-major; `arg`: `q·n_k + k`
#[derive(Debug, Clone, PartialEq)]
pub struct Thumbnail {
    pub values: Vec<f32>,
    pub max: f32,
    pub arg: usize,
}

impl Thumbnail {
    /// `probs` max-pooled in `bins` (a bin with nothing above 0 stays 0; `max` 0 at `arg` 0
    /// for a head of zeros), without the sink-hidden one [`HeadThumbnails`] adds: the grid's
    /// thumbnail of a head the page holds whole, as web/summary.js `foldRows` pooled it.
    ///
    /// # Shapes
    /// * `probs`: `(T, n_k)`, both at most `bins.w · bins.side`; `values`: `(side, side)`
    pub fn of(probs: ArrayView2<f32>, bins: Bins) -> Self {
        let probs = probs.as_standard_layout();
        let keys = probs.ncols();
        let mut values = vec![0f32; bins.side * bins.side];
        let (mut max, mut arg) = (0f32, 0);
        for (q, row) in probs.rows().into_iter().enumerate() {
            let row = row
                .to_slice()
                .expect("a standard-layout array's rows are contiguous");
            let pooled = &mut values[q / bins.w * bins.side..][..bins.side];
            // (a select, not a branch: bins of a few keys, their largest anywhere)
            for (bin, run) in pooled.iter_mut().zip(row.chunks(bins.w)) {
                *bin = run.iter().fold(*bin, |m, &v| if v > m { v } else { m });
            }
            // the row's largest, and the first cell that holds it where it is the head's so far
            let m = largest(row);
            if m > max {
                max = m;
                arg = q * keys + row.iter().position(|&v| v == m).unwrap_or(0);
            }
        }
        Self { values, max, arg }
    }
}

/// What the page's grid and heads table read of every head of a run it holds whole (web/worker.js
/// gives it to the page as web/summary.js `summarise` would): each head's thumbnail past
/// [`THUMB`] positions, its largest probability and where, and its largest |score|.
///
/// # Shapes
/// * `thumbs`: `(heads, side, side)` (none at most [`THUMB`] positions: `side` 0); the others
///   `(heads,)`, heads in `(b, l, h)` order; `prob_arg`: `q·T + k`
#[derive(Debug, Clone, PartialEq)]
pub struct HeadsSummary {
    pub side: usize,
    pub thumbs: Vec<f32>,
    pub prob_max: Vec<f32>,
    pub prob_arg: Vec<u32>,
    pub score_max: Vec<f32>,
}

impl HeadsSummary {
    /// The heads of `attention`, and of `scores` where the run kept them (else every largest
    /// |score| 0), a head a task on the team or pool ([`team::for_each_part`]).
    ///
    /// # Shapes
    /// * `attention`, `scores`: `(B, L, H, T, T)`
    pub fn of<'a>(attention: ArrayView5<'a, f32>, scores: Option<ArrayView5<'a, f32>>) -> Self {
        let (b, l, h, t, _) = attention.dim();
        let heads = b * l * h;
        let bins = Bins::of(t);
        let side = if t > THUMB { bins.side } else { 0 };
        let mut out = Self {
            side,
            thumbs: vec![0f32; heads * side * side],
            prob_max: vec![0f32; heads],
            prob_arg: vec![0u32; heads],
            score_max: vec![0f32; heads],
        };
        // head i of a (B, L, H, T, T) array: (T, T)
        let head = |a: ArrayView5<'a, f32>, i: usize| {
            a.slice_move(s![i / (l * h), i / h % l, i % h, .., ..])
        };
        // each head's slots: its thumbnail (none at most THUMB positions), largest probability,
        // where, and largest |score|
        let thumbs: Vec<Option<&mut [f32]>> = match side {
            0 => (0..heads).map(|_| None).collect(),
            _ => out.thumbs.chunks_mut(side * side).map(Some).collect(),
        };
        let slots = (out.prob_max.iter_mut())
            .zip(out.prob_arg.iter_mut())
            .zip(out.score_max.iter_mut())
            .zip(thumbs);
        team::for_each_part(slots.enumerate(), |(i, (((max, arg), score), thumb))| {
            let pooled = Thumbnail::of(head(attention, i), bins);
            (*max, *arg) = (pooled.max, pooled.arg as u32);
            if let Some(thumb) = thumb {
                thumb.copy_from_slice(&pooled.values);
            }
            if let Some(scores) = scores {
                *score = largest_abs(head(scores, i), 0.0);
            }
        });
        out
    }
}

/// A head's two thumbnails: `own`, its probabilities as the model computed them; `without_sink`,
/// the same with the first key hidden: column 0 set to 0 and each row divided by what is left
/// (its sum over keys 1…, in f64, as web/sink.js `renormalised` sums it), a row with
/// nothing left (the first query of a causal mask reads only the first key) all 0.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadThumbnails {
    pub own: Thumbnail,
    pub without_sink: Thumbnail,
}

impl HeadThumbnails {
    /// Both thumbnails of `probs`, max-pooled in `bins` (a bin with nothing above 0 stays 0;
    /// `max` 0 at `arg` 0 for a head of zeros).
    ///
    /// # Shapes
    /// * `probs`: `(T, n_k)`, both at most `bins.w · bins.side`
    pub fn of(probs: ArrayView2<f32>, bins: Bins) -> Self {
        let probs = probs.as_standard_layout();
        let mut fold = HeadFold::new(bins, probs.ncols());
        for (q, row) in probs.rows().into_iter().enumerate() {
            let row = row.to_slice();
            fold.row(
                q,
                0,
                row.expect("a standard-layout array's rows are contiguous"),
            );
        }
        fold.thumbnails()
    }
}

/// A head's [`HeadThumbnails`] being folded, a row at a time in row order: how a pass that keeps
/// no probability folds each block of query rows as it computes them
/// (`crate::engine::AttentionKept::QueriesKeys`), and how [`HeadThumbnails::of`] folds a whole
/// head. No row is kept: the sink-hidden one is renormalised as it is folded.
#[derive(Debug, Clone)]
pub struct HeadFold {
    own: Fold,
    without_sink: Fold,
}

impl HeadFold {
    /// A head over `keys` keys, pooled in `bins`.
    pub fn new(bins: Bins, keys: usize) -> Self {
        Self {
            own: Fold::new(bins, keys),
            without_sink: Fold::new(bins, keys),
        }
    }

    /// Row `q`'s probabilities of keys `from..from + row.len()`, every other key's 0 (a causal
    /// row's keys after it, a sliding layer's outside its band): zeros change no bin, so they
    /// need not be folded. One sweep of the row finds each bin's largest probability; the
    /// sink-hidden bin is that divided by the row's rest (rounding is monotonic, so the largest
    /// of the quotients is the quotient of the largest: one division a bin, not a key).
    ///
    /// # Shapes
    /// * `row`: `(n,)`, `from + n ≤ n_k`
    pub fn row(&mut self, q: usize, from: usize, row: &[f32]) {
        self.own.begin(q);
        self.without_sink.begin(q);
        // the first key's probability, where the row holds it: hidden, and outside the rest
        let (rest_from, rest_row) = match (from, row.split_first()) {
            (0, Some((&first, others))) => {
                self.own.offer(q, 0, first, &[first], |v| v);
                (1, others)
            }
            _ => (from, row),
        };
        let rest = sum(rest_row);
        let w = self.own.bins.w;
        let end = from + row.len();
        let mut k = rest_from;
        while k < end {
            // the keys of `k`'s bin that the row holds
            let to = ((k / w + 1) * w).min(end);
            let run = &row[k - from..to - from];
            let top = largest(run);
            self.own.offer(q, k, top, run, |v| v);
            if rest > 0.0 {
                let hidden = |v: f32| (f64::from(v) / rest) as f32;
                self.without_sink.offer(q, k, hidden(top), run, hidden);
            }
            k = to;
        }
    }

    /// The bins it pools in.
    pub fn bins(&self) -> Bins {
        self.own.bins
    }

    /// Its own thumbnail's bins as folded so far, `(side, side)` row-major (the values of
    /// [`HeadFold::thumbnails`]' `own`, with no copy).
    pub fn own_values(&self) -> &[f32] {
        &self.own.values
    }

    /// A fold of the same bins and keys with no row folded yet: the rows of the head from a
    /// row of bins' first on, folded apart from this fold's (a task of their own) and taken
    /// back with [`HeadFold::join`].
    pub fn part(&self) -> Self {
        Self::new(self.own.bins, self.own.keys)
    }

    /// Takes in `later`, a [`HeadFold::part`] of this fold that folded rows from `from` on
    /// (the first row of a row of bins; this fold none from it on): this fold is then the fold
    /// of both's rows in row order, the same as one fold of every row.
    pub fn join(&mut self, later: Self, from: usize) {
        self.own.join(later.own, from);
        self.without_sink.join(later.without_sink, from);
    }

    /// The thumbnails folded so far.
    pub fn thumbnails(&self) -> HeadThumbnails {
        HeadThumbnails {
            own: self.own.thumbnail(),
            without_sink: self.without_sink.thumbnail(),
        }
    }

    /// This fold, carried over to a text of `keys` positions pooled in `bins` whose first
    /// `rows` query rows are this one's (a text typed on, or changed after `rows`), and the
    /// first row the new text's fold must go on from: `rows` where this fold still holds each
    /// row of its last row of bins apart (any `rows` from that row of bins' first: the last
    /// token retyped, or the text typed on), otherwise the first row of the row of bins
    /// `rows` falls in (every row after it folded again). Under a causal mask a row before
    /// `rows` reads only keys before it, so it pools the same in either text. `None` where the
    /// bins are not as wide (the text crossed a multiple of [`THUMB`] positions: every row is
    /// folded again).
    pub fn resumed(self, bins: Bins, keys: usize, rows: usize) -> Option<(Self, usize)> {
        let (own, from) = self.own.resumed(bins, keys, rows)?;
        let (without_sink, also) = self.without_sink.resumed(bins, keys, rows)?;
        (from == also).then_some((Self { own, without_sink }, from))
    }
}

/// The largest of `run` (0 for none: a bin starts at 0), in four lanes the compiler turns into
/// one vector: a bin is a few dozen keys (17 at 1,025 positions), where sixteen lanes' reduction
/// cost more than the maxima themselves. (The largest is the same whatever the lanes.)
#[inline(always)]
fn largest(run: &[f32]) -> f32 {
    let max_of = |m: f32, v: f32| if v > m { v } else { m };
    let mut lanes = [0f32; 4];
    let mut chunks = run.chunks_exact(4);
    for chunk in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = max_of(*m, v);
        }
    }
    let top = max_of(max_of(lanes[0], lanes[1]), max_of(lanes[2], lanes[3]));
    chunks.remainder().iter().fold(top, |m, &v| max_of(m, v))
}

/// `Σ run` in f64, in lanes (web/sink.js sums a row in one; the two agree to f64's rounding, far
/// below the f32 each quotient becomes).
#[inline(always)]
fn sum(run: &[f32]) -> f64 {
    fold_lanes(run, 0f64, |s, v| s + f64::from(v), |a, b| a + b)
}

/// A thumbnail being folded, a row at a time in row order: its bins, and each row of bins'
/// largest value and the first cell in row order that holds it (`q·keys + k`), so that rows of
/// bins can be dropped and folded again ([`Fold::resumed`]); and the rows of its last row of
/// bins each apart, so that the rows of it that are kept can be folded again without the others.
#[derive(Debug, Clone)]
struct Fold {
    bins: Bins,
    keys: usize,
    values: Vec<f32>,
    largest: Vec<(f32, usize)>,
    tail: Tail,
}

/// The rows of a fold's last row of bins, each apart: `values` `(w, side)`, each row's largest
/// in each bin, and each row's largest and where (`q·keys + k`).
#[derive(Debug, Clone)]
struct Tail {
    /// Its first row (a multiple of `w`).
    row0: usize,
    values: Vec<f32>,
    largest: Vec<(f32, usize)>,
}

impl Tail {
    fn new(bins: Bins, row0: usize) -> Self {
        Self {
            row0,
            values: vec![0f32; bins.w * bins.side],
            largest: vec![(0.0, 0); bins.w],
        }
    }
}

impl Fold {
    fn new(bins: Bins, keys: usize) -> Self {
        Self {
            bins,
            keys,
            values: vec![0f32; bins.side * bins.side],
            largest: vec![(0.0, 0); bins.side],
            tail: Tail::new(bins, 0),
        }
    }

    /// Row `q` is about to be folded: a row of bins after the tail's starts a new tail.
    #[inline(always)]
    fn begin(&mut self, q: usize) {
        let row0 = q / self.bins.w * self.bins.w;
        if row0 != self.tail.row0 {
            self.tail.values.fill(0.0);
            self.tail.largest.fill((0.0, 0));
            self.tail.row0 = row0;
        }
    }

    /// See [`HeadFold::join`].
    fn join(&mut self, later: Self, from: usize) {
        let (w, side) = (self.bins.w, self.bins.side);
        assert!(
            later.bins == self.bins && later.keys == self.keys && from.is_multiple_of(w),
            "a part of the same bins, from a row of bins' first row"
        );
        // `later` holds every row of bins from `from`'s on, this fold none of them
        let r = (from / w).min(side);
        self.values[r * side..].copy_from_slice(&later.values[r * side..]);
        self.largest[r..].copy_from_slice(&later.largest[r..]);
        if later.tail.row0 >= from {
            self.tail = later.tail; // it folded a row: its last row of bins is the last
        }
    }

    /// See [`HeadFold::resumed`].
    fn resumed(self, bins: Bins, keys: usize, rows: usize) -> Option<(Self, usize)> {
        if bins.w != self.bins.w {
            return None;
        }
        let (w, old, side) = (bins.w, self.bins.side, self.bins.side.min(bins.side));
        let at = |arg: usize| arg / self.keys.max(1) * keys + arg % self.keys.max(1);
        let mut fold = Self::new(bins, keys);
        // the rows of bins `rows` fills whole
        let whole = rows / w;
        for r in 0..whole.min(side) {
            fold.values[r * bins.side..][..side].copy_from_slice(&self.values[r * old..][..side]);
            let (max, arg) = self.largest[r];
            fold.largest[r] = (max, at(arg));
        }
        fold.tail.row0 = whole * w;
        if rows == whole * w || self.tail.row0 != whole * w {
            return Some((fold, whole * w));
        }
        // the row of bins `rows` ends in: its kept rows, from the tail
        for i in 0..rows - whole * w {
            let row = &self.tail.values[i * old..][..side];
            fold.tail.values[i * bins.side..][..side].copy_from_slice(row);
            let bin_row = &mut fold.values[whole * bins.side..][..side];
            for (bin, &v) in bin_row.iter_mut().zip(row) {
                if v > *bin {
                    *bin = v;
                }
            }
            let (max, arg) = self.tail.largest[i];
            fold.tail.largest[i] = (max, at(arg));
            if max > fold.largest[whole].0 {
                fold.largest[whole] = (max, at(arg));
            }
        }
        Some((fold, rows))
    }

    /// `top`, the largest value of row `q`'s keys `k..k + run.len()` (all in one bin; `value`
    /// of each probability of `run`), into its bin, its row's in the tail, and the largest
    /// so far.
    #[inline(always)]
    fn offer(&mut self, q: usize, k: usize, top: f32, run: &[f32], value: impl Fn(f32) -> f32) {
        let Bins { w, side } = self.bins;
        let bin = &mut self.values[q / w * side + k / w];
        if top > *bin {
            *bin = top;
        }
        let i = q - self.tail.row0;
        let own = &mut self.tail.values[i * side + k / w];
        if top > *own {
            *own = top;
        }
        let (largest, row) = (&mut self.largest[q / w], &mut self.tail.largest[i]);
        if top > row.0 {
            // the first key of the run that holds it: an earlier one would have set it
            let at = run.iter().position(|&p| value(p) == top).unwrap_or(0);
            *row = (top, q * self.keys + k + at);
            if top > largest.0 {
                *largest = *row;
            }
        }
    }

    fn thumbnail(&self) -> Thumbnail {
        // the first row of bins with the largest holds its first cell in row order
        let (max, arg) = self
            .largest
            .iter()
            .fold((0f32, 0), |best, &(v, at)| match v > best.0 {
                true => (v, at),
                false => best,
            });
        Thumbnail {
            values: self.values.clone(),
            max,
            arg,
        }
    }
}

/// A part of a `T × T` head: its queries `q0..q1` over its keys `k0..k1` (web/result.js
/// `partOf`; the whole head, or the window a view is zoomed to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Part {
    pub q0: usize,
    pub q1: usize,
    pub k0: usize,
    pub k1: usize,
}

/// A part of a head max-pooled to at most `px` pixels a side, as web/summary.js `pooledPart`
/// pools a head the page holds, to the same bits: bins of `w = ⌈max(n_q, n_k) / px⌉` positions
/// along both axes (a cell stays square), `rows × cols` of them; each bin's largest probability
/// (0 where it has none above 0) and 1 in `mask` where the layer's mask leaves it a cell; the
/// part's largest probability and the first cell in row order that holds it (`arg` = `q·T +
/// k`). A long text's head is pooled so as its rows are made ([`PoolFold`], in
/// `Session.longHead`), so the page need not read its `T²` values on the main thread to draw it.
///
/// # Shapes
/// * `values`, `mask`: `(rows, cols)`, row-major
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PooledPart {
    pub part: Part,
    pub px: usize,
    pub w: usize,
    pub rows: usize,
    pub cols: usize,
    #[serde(skip)]
    pub values: Vec<f32>,
    #[serde(skip)]
    pub mask: Vec<u8>,
    pub max: f32,
    pub arg: usize,
}

/// A [`PooledPart`] being folded a query row at a time, in row order. The rows of one row of
/// bins are first folded key by key (each key's largest, and whether the mask leaves it), one
/// vector instruction for several keys; each bin of that row of bins is read from them once the
/// rows move past it.
#[derive(Debug, Clone)]
pub struct PoolFold {
    pooled: PooledPart,
    /// The row of bins `keys` holds (`None`: none yet).
    bin_row: Option<usize>,
    /// Each key of the part: its largest probability over the rows of `bin_row` so far, and
    /// whether the mask leaves it to any of them.
    ///
    /// # Shapes
    /// * `(k1 − k0,)` each
    keys: Vec<f32>,
    attended: Vec<bool>,
}

impl PoolFold {
    /// Nothing pooled yet of `part` of a head over `t` positions, to `px` pixels a side; a part
    /// outside the head, empty, or no pixel is refused by name.
    pub fn new(part: Part, px: usize, t: usize) -> crate::error::Result<Self> {
        let Part { q0, q1, k0, k1 } = part;
        if q0 >= q1 || k0 >= k1 || q1 > t || k1 > t || px == 0 {
            return Err(crate::error::Error::Input(format!(
                "a pooled part of queries {q0}..{q1} over keys {k0}..{k1} to {px} pixels: \
                 not a part of a head over {t} positions"
            )));
        }
        let w = (q1 - q0).max(k1 - k0).div_ceil(px).max(1);
        let (rows, cols) = ((q1 - q0).div_ceil(w), (k1 - k0).div_ceil(w));
        Ok(Self {
            pooled: PooledPart {
                part,
                px,
                w,
                rows,
                cols,
                values: vec![0f32; rows * cols],
                mask: vec![0u8; rows * cols],
                max: 0.0,
                arg: q0 * t + k0,
            },
            bin_row: None,
            keys: vec![0f32; k1 - k0],
            attended: vec![false; k1 - k0],
        })
    }

    /// Query `q`'s row: its probabilities over every key, and the layer's mask of them (a
    /// masked key's probability is 0). Rows come in order; one outside the part is passed
    /// over. Only the keys from the first its mask leaves in the part to the last are read:
    /// the others hold 0 and change no bin.
    ///
    /// # Shapes
    /// * `probs`, `mask`: `(T,)`
    pub fn row(&mut self, q: usize, probs: &[f32], mask: &[bool]) {
        let Part { q0, q1, k0, k1 } = self.pooled.part;
        if !(q0..q1).contains(&q) {
            return;
        }
        let bin_row = (q - q0) / self.pooled.w;
        if self.bin_row != Some(bin_row) {
            self.flush();
            self.bin_row = Some(bin_row);
        }
        let span = crate::masks::attended_span(&mask[k0..k1]);
        if span.is_empty() {
            return; // no key left: every probability 0, no bin's cell
        }
        let (run, on) = (&probs[k0..k1][span.clone()], &mask[k0..k1][span.clone()]);
        // each loop one vector instruction for several keys (the row's largest in lanes)
        for (key, &p) in self.keys[span.clone()].iter_mut().zip(run) {
            *key = if p > *key { p } else { *key };
        }
        for (a, &m) in self.attended[span.clone()].iter_mut().zip(on) {
            *a |= m;
        }
        let top = largest(run);
        if top > self.pooled.max {
            // a new largest (rarely): the first key of the row that holds it
            let at = run.iter().position(|&p| p == top).unwrap_or(0);
            (self.pooled.max, self.pooled.arg) = (top, q * probs.len() + k0 + span.start + at);
        }
    }

    /// The row of bins the keys hold, into its bins; the keys then 0 again.
    fn flush(&mut self) {
        let Some(r) = self.bin_row.take() else {
            return;
        };
        let (w, cols) = (self.pooled.w, self.pooled.cols);
        let bins = self.keys.chunks(w).zip(self.attended.chunks(w));
        for (c, (keys, on)) in bins.enumerate() {
            self.pooled.values[r * cols + c] = largest(keys);
            self.pooled.mask[r * cols + c] = u8::from(on.contains(&true));
        }
        self.keys.fill(0.0);
        self.attended.fill(false);
    }

    /// The part pooled from the rows folded.
    pub fn finish(mut self) -> PooledPart {
        self.flush();
        self.pooled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    /// The pooling as the page writes it (web/summary.js `foldRows`): a cell at a time.
    fn cell_by_cell(probs: &Array2<f32>, bins: Bins) -> Thumbnail {
        let mut values = vec![0f32; bins.side * bins.side];
        let (mut max, mut arg) = (0f32, 0);
        for ((q, k), &v) in probs.indexed_iter() {
            let bin = &mut values[q / bins.w * bins.side + k / bins.w];
            if v > *bin {
                *bin = v;
            }
            if v > max {
                (max, arg) = (v, q * probs.ncols() + k);
            }
        }
        Thumbnail { values, max, arg }
    }

    /// `probs` with the first key hidden, each row renormalised whole, as web/sink.js does.
    fn renormalised(probs: &Array2<f32>) -> Array2<f32> {
        let mut hidden = Array2::<f32>::zeros(probs.dim());
        for (row, mut to) in probs.rows().into_iter().zip(hidden.rows_mut()) {
            let rest: f64 = row.iter().skip(1).map(|&v| f64::from(v)).sum();
            for k in 1..row.len() {
                if rest > 0.0 {
                    to[k] = (f64::from(row[k]) / rest) as f32;
                }
            }
        }
        hidden
    }

    /// A causal head of `t` positions whose values tie often (steps of 1/`levels`).
    fn causal(t: usize, levels: usize) -> Array2<f32> {
        Array2::from_shape_fn((t, t), |(q, k)| {
            if k > q {
                0.0
            } else {
                ((q * 31 + k * 17) % levels + 1) as f32 / levels as f32
            }
        })
    }

    #[test]
    fn bins_cover_every_position_in_at_most_thumb_a_side() {
        for t in [1, 2, 63, 64, 65, 127, 128, 129, 1025, 2049, 8192] {
            let b = Bins::of(t);
            assert!(
                b.side <= THUMB && b.w * b.side >= t && b.w * (b.side - 1) < t,
                "{t}: {b:?}"
            );
        }
        assert_eq!(Bins::of(64), Bins { w: 1, side: 64 });
        assert_eq!(Bins::of(1025), Bins { w: 17, side: 61 });
    }

    #[test]
    fn pools_each_bin_and_finds_the_first_largest_as_the_page_does() {
        for t in [5, 64, 65, 130, 300] {
            // ties on purpose, and a causal head's zeros above the diagonal
            let probs = causal(t, 7);
            let bins = Bins::of(t);
            let got = HeadThumbnails::of(probs.view(), bins);
            assert_eq!(got.own, cell_by_cell(&probs, bins), "T = {t}");
            assert_eq!(
                Thumbnail::of(probs.view(), bins),
                got.own,
                "own alone, T = {t}"
            );
            // and through a transposed view
            let t_view = probs.t();
            assert_eq!(
                HeadThumbnails::of(t_view, bins).own,
                cell_by_cell(&t_view.to_owned(), bins),
                "Tᵀ, T = {t}"
            );
        }
        let zeros = Array2::<f32>::zeros((70, 70));
        let got = HeadThumbnails::of(zeros.view(), Bins::of(70));
        assert_eq!((got.own.max, got.own.arg), (0.0, 0));
        assert_eq!((got.without_sink.max, got.without_sink.arg), (0.0, 0));
    }

    #[test]
    fn a_runs_summary_pools_each_head_as_the_page_does_and_finds_its_largest_score() {
        use ndarray::Array5;
        // T = 12: no thumbnails (at most THUMB positions); 100: 50 × 50
        for t in [12, 100] {
            let (b, l, h) = (2, 2, 3);
            let head = |i: usize| causal(t, 5 + i);
            let attention = Array5::from_shape_fn((b, l, h, t, t), |(bi, li, hi, q, k)| {
                head((bi * l + li) * h + hi)[[q, k]]
            });
            // scores of both signs, the largest |score| a negative one in some heads
            let scores = attention.mapv(|p| 3.0 - 7.0 * p);
            let got = HeadsSummary::of(attention.view(), Some(scores.view()));
            let side = if t > THUMB { Bins::of(t).side } else { 0 };
            assert_eq!(
                (got.side, got.thumbs.len()),
                (side, b * l * h * side * side)
            );
            for i in 0..b * l * h {
                let want = cell_by_cell(&head(i), Bins::of(t));
                assert_eq!(
                    (got.prob_max[i], got.prob_arg[i] as usize),
                    (want.max, want.arg)
                );
                if side > 0 {
                    assert_eq!(
                        got.thumbs[i * side * side..][..side * side],
                        want.values[..]
                    );
                }
                let most = head(i)
                    .iter()
                    .fold(0f32, |m, &p| m.max((3.0 - 7.0 * p).abs()));
                assert_eq!(got.score_max[i], most, "T = {t}, head {i}");
            }
            // without scores: every largest |score| 0
            let alone = HeadsSummary::of(attention.view(), None);
            assert!(alone.score_max.iter().all(|&s| s == 0.0));
            assert_eq!((alone.prob_max, alone.thumbs), (got.prob_max, got.thumbs));
        }
    }

    #[test]
    fn without_sink_renormalises_the_other_keys_and_zeroes_a_row_that_reads_only_the_first() {
        // three positions: one a bin, so the thumbnail is the renormalised head itself
        let probs = ndarray::array![[1.0f32, 0.0, 0.0], [0.5, 0.25, 0.25], [0.2, 0.6, 0.2]];
        let got = HeadThumbnails::of(probs.view(), Bins::of(3)).without_sink;
        assert_eq!(
            got.values,
            [0.0f32, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.75, 0.25]
        );
        assert_eq!((got.max, got.arg), (0.75, 7));
        // pooled, it is the thumbnail of the head renormalised whole
        for t in [65, 130] {
            let probs = causal(t, 11);
            let bins = Bins::of(t);
            let want = cell_by_cell(&renormalised(&probs), bins);
            assert_eq!(
                HeadThumbnails::of(probs.view(), bins).without_sink,
                want,
                "T = {t}"
            );
        }
    }

    /// A fold of a text's first rows, resumed for a longer or shorter text (typed on, its last
    /// token retyped, taken back) and folded on from the row it says, is the fold of the new
    /// text's head whole; bins of another width are not resumed.
    #[test]
    fn a_fold_resumed_for_a_text_typed_on_equals_the_whole_fold() {
        let head = |t: usize| causal(t, 13);
        for (before, after, shared) in [
            (130, 140, 130),
            (130, 150, 99),
            (140, 129, 128),
            (70, 75, 70),
            (131, 133, 131),
            (133, 134, 133),
            (133, 134, 132),
            (133, 140, 131),
            (137, 134, 133),
            (134, 136, 133),
            (300, 305, 298),
        ] {
            let (old, new) = (head(before), head(after));
            let bins = Bins::of(after);
            let mut fold = HeadFold::new(Bins::of(before), before);
            for (q, row) in old.rows().into_iter().enumerate() {
                fold.row(q, 0, row.as_slice().unwrap());
            }
            // from the first row that changed where it is in the last row of bins, else from
            // the first of the row of bins it falls in
            let (mut fold, rows) = fold.resumed(bins, after, shared).expect("bins as wide");
            let last_row_of_bins = (before - 1) / bins.w * bins.w;
            let want_rows = match shared >= last_row_of_bins {
                true => shared,
                false => shared / bins.w * bins.w,
            };
            assert_eq!(rows, want_rows, "{before} → {after}, {shared} shared");
            for (q, row) in new.rows().into_iter().enumerate().skip(rows) {
                fold.row(q, 0, row.as_slice().unwrap());
            }
            let want = HeadThumbnails::of(new.view(), bins);
            assert_eq!(
                fold.thumbnails(),
                want,
                "{before} → {after}, {shared} shared"
            );
        }
        // 64 → 65 positions: bins of 1 then 2
        let fold = HeadFold::new(Bins::of(64), 64);
        assert!(fold.resumed(Bins::of(65), 65, 64).is_none());
    }

    /// A head's rows folded in parts, each from a row of bins' first on (the tasks of a pass),
    /// and joined in order, are the fold of every row in one: its thumbnails, and the fold
    /// resumed for the text typed on.
    #[test]
    fn parts_of_a_head_folded_apart_and_joined_equal_one_fold() {
        for (t, cuts) in [
            (130, vec![4]),
            (300, vec![5, 140, 245]),
            (1025, vec![17, 510, 901]),
            (1025, vec![1020]),
        ] {
            let probs = causal(t, 9);
            let bins = Bins::of(t);
            let whole = |rows: usize| {
                let mut fold = HeadFold::new(bins, t);
                for (q, row) in probs.rows().into_iter().enumerate().take(rows) {
                    fold.row(q, 0, row.as_slice().unwrap());
                }
                fold
            };
            // the first part from row 0, each other from a multiple of w
            let cuts: Vec<usize> = cuts.iter().map(|c| c / bins.w * bins.w).collect();
            let mut fold = HeadFold::new(bins, t);
            let mut parts: Vec<(HeadFold, usize)> =
                cuts.iter().map(|&c| (fold.part(), c)).collect();
            let ends: Vec<usize> = cuts.iter().copied().chain([t]).collect();
            for (q, row) in probs.rows().into_iter().enumerate() {
                let row = row.as_slice().unwrap();
                match cuts.iter().rposition(|&c| q >= c) {
                    Some(p) => parts[p].0.row(q, 0, row),
                    None => fold.row(q, 0, row),
                }
            }
            assert!(
                ends.windows(2).all(|w| w[0] < w[1]),
                "parts of at least a row"
            );
            for (part, from) in parts.drain(..) {
                fold.join(part, from);
            }
            let want = whole(t);
            assert_eq!(fold.thumbnails(), want.thumbnails(), "T = {t}, {cuts:?}");
            // typed on: the last row of bins' rows are each still apart
            let on = t + 3;
            let (mut a, ra) = fold.resumed(Bins::of(on), on, t).expect("bins as wide");
            let (mut b, rb) = want.resumed(Bins::of(on), on, t).expect("bins as wide");
            assert_eq!(ra, rb);
            let longer = causal(on, 9);
            for (q, row) in longer.rows().into_iter().enumerate().skip(ra) {
                a.row(q, 0, row.as_slice().unwrap());
                b.row(q, 0, row.as_slice().unwrap());
            }
            assert_eq!(a.thumbnails(), b.thumbnails(), "T = {t} typed on");
        }
    }

    /// What a pass folds: each row's keys from its first non-zero one to its last (any start,
    /// across bins' edges), the zeros outside left out, gives the thumbnails of the whole rows.
    #[test]
    fn rows_folded_by_the_keys_they_reach_equal_whole_rows() {
        for (t, window) in [(70, 70), (130, 9), (300, 40), (300, 300)] {
            // a band of `window` keys up to the diagonal (a sliding layer's; all of them: causal)
            let probs = Array2::from_shape_fn((t, t), |(q, k)| {
                if k > q || q - k >= window {
                    0.0
                } else {
                    ((q * 13 + k * 5) % 11 + 1) as f32 / 11.0
                }
            });
            let bins = Bins::of(t);
            let mut fold = HeadFold::new(bins, t);
            for (q, row) in probs.rows().into_iter().enumerate() {
                let from = (q + 1).saturating_sub(window);
                fold.row(q, from, &row.as_slice().unwrap()[from..=q]);
            }
            let got = fold.thumbnails();
            assert_eq!(
                got,
                HeadThumbnails::of(probs.view(), bins),
                "T = {t}, window {window}"
            );
            assert_eq!(got.own, cell_by_cell(&probs, bins));
            assert_eq!(got.without_sink, cell_by_cell(&renormalised(&probs), bins));
        }
    }

    /// A part pooled cell by cell, as the page's pooling is specified (web/summary.js
    /// `pooledPart`): each cell into its bin, its mask's into the bin's, the first largest in
    /// row order.
    fn part_cell_by_cell(
        probs: &Array2<f32>,
        mask: &Array2<bool>,
        part: Part,
        px: usize,
    ) -> PooledPart {
        let t = probs.ncols();
        let mut want = PoolFold::new(part, px, t).unwrap().finish();
        for q in part.q0..part.q1 {
            for k in part.k0..part.k1 {
                let i = (q - part.q0) / want.w * want.cols + (k - part.k0) / want.w;
                let v = probs[[q, k]];
                if v > want.values[i] {
                    want.values[i] = v;
                }
                want.mask[i] |= u8::from(mask[[q, k]]);
                if v > want.max {
                    (want.max, want.arg) = (v, q * t + k);
                }
            }
        }
        want
    }

    /// Rows folded a part's span at a time equal the cells pooled one by one: under causal,
    /// banded, padded and scattered masks (rows that attend to none among them), for the whole
    /// head and windows of it, to fewer pixels than cells (bins of several) and more (bins of
    /// one). A part outside the head is refused.
    #[test]
    fn a_part_pooled_by_its_rows_spans_equals_its_cells_pooled_one_by_one() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(51);
        let t = 150;
        let masks: Vec<(&str, Array2<bool>)> = vec![
            ("causal", Array2::from_shape_fn((t, t), |(q, k)| k <= q)),
            (
                "band of 9",
                Array2::from_shape_fn((t, t), |(q, k)| k <= q && q - k < 9),
            ),
            (
                "padded",
                Array2::from_shape_fn((t, t), |(q, k)| k < 120 && q < 120),
            ),
            (
                "scattered",
                Array2::from_shape_fn((t, t), |_| rng.random_ratio(1, 5)),
            ),
        ];
        for (name, mask) in &masks {
            // a head under the mask: a masked key's probability 0, ties among the others
            let probs = mask.mapv(|on| {
                if on {
                    f32::from(rng.random_range(1u8..=40)) / 40.0
                } else {
                    0.0
                }
            });
            let whole = Part {
                q0: 0,
                q1: t,
                k0: 0,
                k1: t,
            };
            let windows = [
                whole,
                Part {
                    q0: 37,
                    q1: 101,
                    k0: 5,
                    k1: 69,
                },
                Part {
                    q0: 140,
                    q1: 150,
                    k0: 0,
                    k1: 150,
                },
            ];
            for part in windows {
                for px in [1, 7, 40, 64, 149, 400] {
                    let mut got = PoolFold::new(part, px, t).unwrap();
                    for q in 0..t {
                        got.row(
                            q,
                            probs.row(q).as_slice().unwrap(),
                            mask.row(q).as_slice().unwrap(),
                        );
                    }
                    assert_eq!(
                        got.finish(),
                        part_cell_by_cell(&probs, mask, part, px),
                        "{name}, {part:?}, {px} px"
                    );
                }
            }
        }
        let outside = PoolFold::new(
            Part {
                q0: 0,
                q1: 151,
                k0: 0,
                k1: 10,
            },
            10,
            t,
        )
        .unwrap_err();
        assert!(outside.to_string().contains("queries 0..151"), "{outside}");
    }
}
