//! A head's thumbnail: its probabilities max-pooled into at most [`THUMB`] × [`THUMB`] bins, with
//! its largest probability and where, as the page's grid and heads table show a long text's
//! heads (`Session.summaryHeads`: each head folded on the thread that computed it, none copied
//! to JavaScript). web/summary.js pools the heads the page holds whole the same way
//! (`thumbBins`, `foldRows`), and web/sink.js hides the first key as
//! [`thumbnail_without_sink`] does.

use ndarray::ArrayView2;

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

/// `probs` max-pooled in `bins` (a bin with nothing above 0 stays 0; `max` 0 at `arg` 0 for a
/// head of zeros).
///
/// # Shapes
/// * `probs`: `(T, n_k)`, both at most `bins.w · bins.side`
pub fn thumbnail(probs: ArrayView2<f32>, bins: Bins) -> Thumbnail {
    let probs = probs.as_standard_layout();
    let mut fold = Fold::new(bins, probs.ncols());
    for (q, row) in probs.rows().into_iter().enumerate() {
        fold.row(
            q,
            row.to_slice()
                .expect("a standard-layout array's rows are contiguous"),
        );
    }
    fold.done()
}

/// [`thumbnail`] of `probs` with the first key hidden: column 0 set to 0 and each row divided
/// by what is left (its sum over keys 1…, in f64 as the page sums it: web/sink.js
/// `renormalised`); a row with nothing left (the first query of a causal mask reads only the
/// first key) all 0. Each row is renormalised into one row of scratch, never the whole head.
///
/// # Shapes
/// * `probs`: `(T, n_k)`, both at most `bins.w · bins.side`
pub fn thumbnail_without_sink(probs: ArrayView2<f32>, bins: Bins) -> Thumbnail {
    let mut fold = Fold::new(bins, probs.ncols());
    let mut hidden = vec![0f32; probs.ncols()];
    for (q, row) in probs.rows().into_iter().enumerate() {
        let rest: f64 = row.iter().skip(1).map(|&v| f64::from(v)).sum();
        for (o, &v) in hidden.iter_mut().zip(&row) {
            *o = if rest > 0.0 {
                (f64::from(v) / rest) as f32
            } else {
                0.0
            };
        }
        if let Some(first) = hidden.first_mut() {
            *first = 0.0;
        }
        fold.row(q, &hidden);
    }
    fold.done()
}

/// A thumbnail being folded, a row at a time in row order.
struct Fold {
    bins: Bins,
    keys: usize,
    values: Vec<f32>,
    max: f32,
    arg: usize,
}

impl Fold {
    fn new(bins: Bins, keys: usize) -> Self {
        Self {
            bins,
            keys,
            values: vec![0f32; bins.side * bins.side],
            max: 0.0,
            arg: 0,
        }
    }

    /// Row `q` (`(n_k,)`) into its row of bins, and into the largest so far.
    fn row(&mut self, q: usize, row: &[f32]) {
        let Bins { w, side } = self.bins;
        let out = &mut self.values[q / w * side..][..side];
        for (c, (bin, run)) in out.iter_mut().zip(row.chunks(w)).enumerate() {
            let top = run.iter().fold(*bin, |m, &v| if v > m { v } else { m });
            *bin = top;
            if top > self.max {
                // the first cell of the run that holds it: an earlier one would have set `max`
                let k = run.iter().position(|&v| v == top).unwrap_or(0);
                (self.max, self.arg) = (top, q * self.keys + c * w + k);
            }
        }
    }

    fn done(self) -> Thumbnail {
        Thumbnail {
            values: self.values,
            max: self.max,
            arg: self.arg,
        }
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
            // ties on purpose (values in steps of 1/7), and a causal head's zeros above the diagonal
            let probs = Array2::from_shape_fn((t, t), |(q, k)| {
                if k > q {
                    0.0
                } else {
                    ((q * 31 + k * 17) % 7) as f32 / 7.0
                }
            });
            let bins = Bins::of(t);
            assert_eq!(
                thumbnail(probs.view(), bins),
                cell_by_cell(&probs, bins),
                "T = {t}"
            );
            // and through a transposed view
            let t_view = probs.t();
            assert_eq!(
                thumbnail(t_view, bins),
                cell_by_cell(&t_view.to_owned(), bins),
                "Tᵀ, T = {t}"
            );
        }
        let zeros = Array2::<f32>::zeros((70, 70));
        let got = thumbnail(zeros.view(), Bins::of(70));
        assert_eq!((got.max, got.arg), (0.0, 0));
    }

    #[test]
    fn without_sink_renormalises_the_other_keys_and_zeroes_a_row_that_reads_only_the_first() {
        // three positions: one a bin, so the thumbnail is the renormalised head itself
        let probs = ndarray::array![[1.0f32, 0.0, 0.0], [0.5, 0.25, 0.25], [0.2, 0.6, 0.2]];
        let got = thumbnail_without_sink(probs.view(), Bins::of(3));
        assert_eq!(
            got.values,
            [0.0f32, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.75, 0.25]
        );
        assert_eq!((got.max, got.arg), (0.75, 7));
        // pooled, it is the thumbnail of the head renormalised whole, as web/sink.js does
        for t in [65, 130] {
            let probs = Array2::from_shape_fn((t, t), |(q, k)| {
                if k > q {
                    0.0
                } else {
                    ((q * 13 + k * 5) % 11 + 1) as f32 / 11.0
                }
            });
            let mut hidden = Array2::<f32>::zeros((t, t));
            for (row, mut to) in probs.rows().into_iter().zip(hidden.rows_mut()) {
                let rest: f64 = row.iter().skip(1).map(|&v| f64::from(v)).sum();
                for k in 1..t {
                    if rest > 0.0 {
                        to[k] = (f64::from(row[k]) / rest) as f32;
                    }
                }
            }
            let bins = Bins::of(t);
            let want = cell_by_cell(&hidden, bins);
            assert_eq!(thumbnail_without_sink(probs.view(), bins), want, "T = {t}");
        }
    }
}
