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

use super::ItemAttention;
use crate::error::Result;

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
        let (l, h) = item.layers_heads();
        let real = item.real();
        let is_real = |i: usize| i < item.valid.len() && item.valid[i];
        let marks = |id: Option<u32>| -> Vec<usize> {
            real.iter()
                .copied()
                .filter(|&k| id == Some(item.ids[k]))
                .collect()
        };
        let (cls, sep) = (marks(item.special.cls), marks(item.special.sep));
        let mut out = [(); 9].map(|_| Array2::<f32>::zeros((l, h)));
        let first = real.first().copied();
        let t = item.valid.len();
        for li in 0..l {
            for hi in 0..h {
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
                for &q in &real {
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
                    for &k in &real {
                        columns[k] += row[k] as f64;
                    }
                }
                let n = real.len();
                let counts = [n, n, n, n, n_prev, n_next, n, n];
                for (m, (s, c)) in sum.iter().zip(counts).enumerate() {
                    out[m][[li, hi]] = if c == 0 { 0.0 } else { (s / c as f64) as f32 };
                }
                let top = real.iter().map(|&k| columns[k]).fold(0f64, f64::max);
                out[8][[li, hi]] = if n == 0 { 0.0 } else { (top / n as f64) as f32 };
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
