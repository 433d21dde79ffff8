//! Per-head summaries (Clark et al. 2019): what each head attends to, averaged over the real
//! query tokens of one text. With `Q` the real positions, `p(q, k)` a head's attention:
//!
//! * `entropy` = mean over q ∈ Q of −Σ_k p(q,k)·ln p(q,k) (nats; 0·ln 0 = 0)
//! * `to_cls` = mean over q ∈ Q of Σ_{k: id_k = [CLS]} p(q,k); `to_sep` likewise for [SEP]
//! * `to_self` = mean over q ∈ Q of p(q,q)
//! * `to_prev` = mean over q ∈ Q with q−1 ∈ Q of p(q,q−1); `to_next` = mean over q ∈ Q with
//!   q+1 ∈ Q of p(q,q+1) (0 when no query has such a neighbour)
//! * `distance` = mean over q ∈ Q of Σ_k p(q,k)·|q−k| (in tokens)
//! * `to_first` = mean over q ∈ Q of p(q, f), f the first real position: the attention sink of
//!   a decoder-only model (Xiao et al. 2023), [CLS] in BERT
//! * `sink` = max over k ∈ Q of the mean over q ∈ Q of p(q,k): the share of attention the one
//!   key most attended to receives, whichever it is (a sink that is not the first token too)
//!
//! With the scores `s` that softmax turned into `p`, `ln p(q,k) = s(q,k) − lse(q)` and
//! `lse(q) = s(q,m) − ln p(q,m)` for the row's largest `p(q,m)`, so a row's entropy is
//! `s(q,m) − ln p(q,m) − Σ_k p(q,k)·s(q,k)`: one logarithm a row instead of one a cell.

use ndarray::Array2;

use super::{ItemAttention, ItemHeads};
use crate::error::Result;

/// The attention probabilities of a text's heads from which [`HeadMetrics::of`] shares them
/// among the pool's threads (MiniLM's 72 heads at 128 tokens: 1.2 million).
const PARALLEL_MIN_VALUES: usize = 1 << 20;

/// Every head's summaries for one text.
///
/// # Shapes
/// * every field: `(L, H)`
#[derive(Debug, Clone, PartialEq)]
pub struct HeadMetrics {
    pub entropy: Array2<f32>,
    pub to_cls: Array2<f32>,
    pub to_sep: Array2<f32>,
    pub to_self: Array2<f32>,
    pub to_prev: Array2<f32>,
    pub to_next: Array2<f32>,
    pub distance: Array2<f32>,
    pub to_first: Array2<f32>,
    pub sink: Array2<f32>,
}

/// The names of [`HeadMetrics`]' fields, in the order [`HeadMetrics::all`] gives them.
pub const METRICS: [&str; 9] = [
    "entropy", "to_cls", "to_sep", "to_self", "to_prev", "to_next", "distance", "to_first", "sink",
];

impl HeadMetrics {
    /// Summarises every head of one text (computing each from the pass's queries and keys in
    /// turn, where the pass kept those).
    pub fn of(item: &ItemAttention) -> Result<Self> {
        use rayon::prelude::*;
        let (l, h) = item.layers_heads();
        let real = item.real();
        let marks = |id: Option<u32>| -> Vec<usize> {
            real.iter()
                .copied()
                .filter(|&k| id == Some(item.ids[k]))
                .collect()
        };
        let text = Text {
            cls: marks(item.special.cls),
            sep: marks(item.special.sep),
            real: &real,
        };
        let one = |i: usize| text.head(item, i / h, i % h);
        // kept heads on the pool's threads, where they are enough work to wake them (a head of
        // 128 tokens ~70 µs in wasm); heads computed from queries and keys one at a time, as
        // each is the T² values of a long text (256 MB at 8,192 tokens)
        let kept = matches!(item.heads, ItemHeads::Kept { .. });
        let t = item.valid.len();
        let heads = match kept && l * h * t * t >= PARALLEL_MIN_VALUES {
            true => (0..l * h)
                .into_par_iter()
                .map(one)
                .collect::<Result<Vec<_>>>()?,
            false => (0..l * h).map(one).collect::<Result<Vec<_>>>()?,
        };
        let mut out = [(); 9].map(|_| Array2::<f32>::zeros((l, h)));
        for (i, values) in heads.iter().enumerate() {
            for (m, v) in values.iter().enumerate() {
                out[m][[i / h, i % h]] = *v;
            }
        }
        let [entropy, to_cls, to_sep, to_self, to_prev, to_next, distance, to_first, sink] = out;
        Ok(Self {
            entropy,
            to_cls,
            to_sep,
            to_self,
            to_prev,
            to_next,
            distance,
            to_first,
            sink,
        })
    }

    /// `(name, values)` for every metric, in [`METRICS`] order.
    pub fn all(&self) -> [(&'static str, &Array2<f32>); 9] {
        let [e, c, s, me, p, n, d, f, k] = METRICS;
        [
            (e, &self.entropy),
            (c, &self.to_cls),
            (s, &self.to_sep),
            (me, &self.to_self),
            (p, &self.to_prev),
            (n, &self.to_next),
            (d, &self.distance),
            (f, &self.to_first),
            (k, &self.sink),
        ]
    }
}

/// What every head of one text shares: its real positions and where its markers are.
struct Text<'a> {
    cls: Vec<usize>,
    sep: Vec<usize>,
    real: &'a [usize],
}

impl Text<'_> {
    /// Head `hi` of layer `li`'s metrics, in [`METRICS`] order.
    fn head(&self, item: &ItemAttention, li: usize, hi: usize) -> Result<[f32; 9]> {
        let (cls, sep, real) = (&self.cls, &self.sep, self.real);
        let is_real = |i: usize| i < item.valid.len() && item.valid[i];
        let first = real.first().copied();
        let t = item.valid.len();
        let (head, s_head) = item.head(li, hi)?;
        let head = head.as_standard_layout(); // (T, T), contiguous rows
        let p = head.as_slice().expect("standard layout");
        let s_head = s_head.as_ref().map(|v| v.as_standard_layout());
        let scores = s_head
            .as_ref()
            .map(|v| v.as_slice().expect("standard layout"));
        // sums over queries, and how many queries each sum has
        let mut sum = [0f64; 8];
        let (mut n_prev, mut n_next) = (0usize, 0usize);
        let mut columns = vec![0f64; t]; // Σ over queries of p(q, k), each key
        for &q in real {
            let row = &p[q * t..(q + 1) * t];
            // per row in f32, summed over rows in f64
            let mut distance = 0f32;
            for (k, &pk) in row.iter().enumerate() {
                distance += pk * q.abs_diff(k) as f32;
            }
            let entropy = match scores {
                Some(sc) => {
                    let s_row = &sc[q * t..(q + 1) * t];
                    let (m, &pm) = row
                        .iter()
                        .enumerate()
                        .max_by(|a, b| a.1.total_cmp(b.1))
                        .expect("a row has keys");
                    // masked keys have p = 0 and a finite score: they add nothing
                    let ps: f32 = row.iter().zip(s_row).map(|(&pk, &sk)| pk * sk).sum();
                    s_row[m] - pm.ln() - ps
                }
                None => row
                    .iter()
                    .filter(|&&pk| pk > 0.0)
                    .map(|&pk| -pk * pk.ln())
                    .sum(),
            };
            sum[0] += entropy as f64;
            sum[1] += cls.iter().map(|&k| row[k] as f64).sum::<f64>();
            sum[2] += sep.iter().map(|&k| row[k] as f64).sum::<f64>();
            sum[3] += row[q] as f64;
            if q > 0 && is_real(q - 1) {
                sum[4] += row[q - 1] as f64;
                n_prev += 1;
            }
            if is_real(q + 1) {
                sum[5] += row[q + 1] as f64;
                n_next += 1;
            }
            sum[6] += distance as f64;
            sum[7] += first.map_or(0.0, |f| row[f] as f64);
            for &k in real {
                columns[k] += row[k] as f64;
            }
        }
        let n = real.len();
        let counts = [n, n, n, n, n_prev, n_next, n, n];
        let top = real.iter().map(|&k| columns[k]).fold(0f64, f64::max);
        let mut out = [0f32; 9];
        for (m, (s, c)) in sum.iter().zip(counts).enumerate() {
            out[m] = if c == 0 { 0.0 } else { (s / c as f64) as f32 };
        }
        out[8] = if n == 0 { 0.0 } else { (top / n as f64) as f32 };
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::SpecialIds;
    use ndarray::{s, Array1, Array4, ArrayView4};

    /// Heads enough to be shared among the pool's threads give each head the bits it gets
    /// alone (one head: below [`PARALLEL_MIN_VALUES`], in turn on this thread).
    #[test]
    fn heads_shared_among_threads_give_each_heads_metrics_alone() {
        let (l, h, t) = (2, 4, 400);
        assert!(l * h * t * t >= PARALLEL_MIN_VALUES && t * t < PARALLEL_MIN_VALUES);
        // scores from a small LCG; each row softmaxed over its real keys, the last 3 padding
        let mut state = 12345u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 8) as f32 / (1 << 24) as f32 * 8.0 - 4.0
        };
        let real = t - 3;
        let scores = Array4::from_shape_simple_fn((l, h, t, t), &mut next);
        let mut probs = Array4::<f32>::zeros((l, h, t, t));
        for (mut p, s) in probs.rows_mut().into_iter().zip(scores.rows()) {
            let top = s.slice(s![..real]).fold(f32::MIN, |a, &b| a.max(b));
            let sum: f32 = s.slice(s![..real]).iter().map(|&v| (v - top).exp()).sum();
            for k in 0..real {
                p[k] = (s[k] - top).exp() / sum;
            }
        }
        let ids = Array1::from_shape_fn(t, |i| [101, 7, 102, 7, 9][i % 5]);
        let valid = Array1::from_shape_fn(t, |i| i < real);
        let special = SpecialIds {
            cls: Some(101),
            sep: Some(102),
        };
        fn item<'a>(
            (probs, scores): (ArrayView4<'a, f32>, ArrayView4<'a, f32>),
            ids: &'a Array1<u32>,
            valid: &'a Array1<bool>,
            special: SpecialIds,
        ) -> ItemAttention<'a> {
            ItemAttention {
                heads: ItemHeads::Kept {
                    probs,
                    scores: Some(scores),
                },
                ids: ids.view(),
                valid: valid.view(),
                special,
            }
        }
        let all =
            HeadMetrics::of(&item((probs.view(), scores.view()), &ids, &valid, special)).unwrap();
        for li in 0..l {
            for hi in 0..h {
                let one = |a: &Array4<f32>| a.slice(s![li..li + 1, hi..hi + 1, .., ..]).to_owned();
                let (p, sc) = (one(&probs), one(&scores));
                let alone =
                    HeadMetrics::of(&item((p.view(), sc.view()), &ids, &valid, special)).unwrap();
                for ((name, a), (_, b)) in all.all().into_iter().zip(alone.all()) {
                    let (a, b) = (a[[li, hi]], b[[0, 0]]);
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "head {li}:{hi}'s {name}: {a} alone {b}"
                    );
                }
            }
        }
        // (the metrics are not all zero: the rows were read)
        assert!(all.entropy.iter().all(|&e| e > 1.0) && all.to_cls.sum() > 0.0);
    }
}
