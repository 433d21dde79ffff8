//! The CPU engine's [`Ops`]: each operation computed when the family calls it, on `ndarray`.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;

use ndarray::{concatenate, s, Array2, Array5, ArrayView2, Axis};
use rayon::prelude::*;

use super::attention::{heads_into, Folds, HeadArrays};
use super::ops::{
    activate, fast_products, gate, gated_feed_forward, linear, linear_in, norm, norm_heads, rotate,
    soft_capped,
};
use crate::analysis::thumbnail::{Bins, HeadFold};
use crate::engine::ops::{
    group_of, split_width, AddNorm, AttentionId, AttentionKind, AttentionRecord, AttentionSpec,
    CacheSlot, GatedFeedForward, Ids, Kept, Ops, PassMasks, Reach, Stack,
};
use crate::engine::trace::{AttentionGroup, KeptValues};
use crate::engine::{ModelInputs, ScoreFactor, TraceOptions};
use crate::error::{Error, Result};
use crate::model::rope::Rotary;
use crate::model::weights::{Linear, Norm, Table};
use crate::model::Activation;

/// An activation on the CPU: some columns of a shared matrix.
///
/// # Shapes
/// * `(rows, cols.len())` of `data`'s `(rows, c)`
#[derive(Debug, Clone)]
pub struct CpuX {
    data: Arc<Array2<f32>>,
    cols: Range<usize>,
}

impl CpuX {
    fn new(data: Array2<f32>) -> Self {
        let cols = 0..data.ncols();
        Self {
            data: Arc::new(data),
            cols,
        }
    }

    /// The activation as a view.
    pub fn view(&self) -> ArrayView2<'_, f32> {
        self.data.slice(s![.., self.cols.clone()])
    }

    fn rows(&self) -> usize {
        self.data.nrows()
    }

    /// The array itself, where this holds all of it and nothing else holds it (`None`: it
    /// must be copied to change).
    fn alone(&mut self) -> Option<&mut Array2<f32>> {
        let data = Arc::get_mut(&mut self.data)?;
        (self.cols == (0..data.ncols()) && data.is_standard_layout()).then_some(data)
    }

    /// Keeps the first `rows` rows, in place where it can ([`CpuX::alone`]: its buffer kept
    /// for the rows that come next), else as a copy.
    fn truncate(&mut self, rows: usize) {
        if self.rows() <= rows {
            return;
        }
        match self.alone() {
            Some(data) => {
                let c = data.ncols();
                let mut v = buffer_of(std::mem::take(data));
                v.truncate(rows * c);
                *data = Array2::from_shape_vec((rows, c), v).expect("rows · c values");
            }
            None => *self = CpuX::new(self.view().slice(s![..rows, ..]).to_owned()),
        }
    }

    /// `new`'s rows after these, in place where it can ([`CpuX::alone`]: its buffer grows
    /// [`CACHE_HEADROOM`] rows past what it needs when it must), else joined into a copy.
    ///
    /// # Shapes
    /// * `(n, c)` and `new` `(m, c)` → `(n + m, c)`
    fn append(&mut self, what: &str, new: ArrayView2<f32>) -> Result<()> {
        let c = self.cols.len();
        if new.ncols() != c {
            return Err(Error::Shape {
                what: format!("{what}: new rows (m, c) as the cache's"),
                expected: vec![new.nrows(), c],
                found: vec![new.nrows(), new.ncols()],
            });
        }
        let n = self.rows();
        match self.alone() {
            Some(data) => {
                let mut v = buffer_of(std::mem::take(data));
                if v.capacity() < (n + new.nrows()) * c {
                    v.reserve_exact((new.nrows() + CACHE_HEADROOM) * c);
                }
                for row in new.rows() {
                    match row.to_slice() {
                        Some(row) => v.extend_from_slice(row),
                        None => v.extend(row.iter().copied()),
                    }
                }
                *data = Array2::from_shape_vec((n + new.nrows(), c), v).expect("rows · c values");
            }
            None => {
                let joined = concatenate(Axis(0), &[self.view(), new])
                    .map_err(|e| Error::Engine(format!("{what}: {e}")))?;
                *self = CpuX::new(joined);
            }
        }
        Ok(())
    }

    /// The values as an array shared with what else holds it (a copy only where this is some
    /// columns of a wider one).
    fn into_shared(self) -> Arc<Array2<f32>> {
        match self.cols == (0..self.data.ncols()) {
            true => self.data,
            false => Arc::new(self.view().to_owned()),
        }
    }
}

/// The rows a cached value's buffer grows by past what a pass needs, where it must grow: typing
/// at the end of a long text then copies the cache once every this many tokens, not at each.
const CACHE_HEADROOM: usize = 64;

/// A standard-layout array's values in row-major order, as a vector (its own buffer, where its
/// values begin it and fill it: always, for the arrays the cache makes).
fn buffer_of(a: Array2<f32>) -> Vec<f32> {
    let n = a.len();
    match a.into_raw_vec_and_offset() {
        (v, Some(0) | None) if v.len() == n => v,
        (v, offset) => v[offset.unwrap_or(0)..][..n].to_vec(),
    }
}

/// The layers of each stack a pass runs through.
#[derive(Debug, Clone, Copy, Default)]
pub struct StackLayers {
    pub encoder: usize,
    pub decoder: usize,
}

impl StackLayers {
    /// A single stack's `layers` (an encoder, or a decoder-only model).
    pub fn single(stack: Stack, layers: usize) -> Self {
        match stack {
            Stack::Encoder => Self {
                encoder: layers,
                decoder: 0,
            },
            Stack::Decoder => Self {
                encoder: 0,
                decoder: layers,
            },
        }
    }

    pub fn of(&self, stack: Stack) -> usize {
        match stack {
            Stack::Encoder => self.encoder,
            Stack::Decoder => self.decoder,
        }
    }
}

/// What a decoding on the CPU keeps from one step to the next ([`CacheSlot`]): each a
/// `(B·n, c)` activation, `n` rows per item.
#[derive(Debug, Default)]
pub struct DecoderCache {
    values: HashMap<CacheSlot, CpuX>,
    /// In a pass that reuses a prefix ([`super::prefix`]): each layer's self-attention queries
    /// of the positions so far, so that the pass's attention is every position's rows, not only
    /// the new ones' (`None`: a decoding's steps, which keep only their own row).
    queries: Option<HashMap<usize, CpuX>>,
    /// In a pass that reuses a prefix and keeps the queries and keys (a long text's): each
    /// head's thumbnails as the pass folded them, `(B, L, H)` flat, which the next pass over the
    /// same beginning resumes ([`HeadFold::resumed`]): its attention is then the rows of the
    /// new positions alone (or, where the text changed before its last row of bins, those
    /// from the first of the row of bins it changed in).
    folds: Option<Vec<HeadFold>>,
}

impl DecoderCache {
    /// A cache that also keeps every layer's self-attention queries (see `queries`).
    pub(crate) fn with_queries() -> Self {
        Self {
            values: HashMap::new(),
            queries: Some(HashMap::new()),
            folds: None,
        }
    }

    /// The bytes of every cached value.
    pub(crate) fn bytes(&self) -> usize {
        let queries = self.queries.iter().flat_map(|q| q.values());
        self.values
            .values()
            .chain(queries)
            .map(|x| x.rows() * x.cols.len() * std::mem::size_of::<f32>())
            .sum()
    }

    /// Keeps the first `rows` rows of every cached value (one item's: `(n, c)` each): the
    /// positions a pass that starts at `rows` reads.
    pub(crate) fn truncate(&mut self, rows: usize) {
        let queries = self.queries.iter_mut().flat_map(|q| q.values_mut());
        for x in self.values.values_mut().chain(queries) {
            x.truncate(rows);
        }
    }
}

/// `old`'s rows then `new`'s, item by item: `(B·n, c)` and `(B·m, c)` → `(B·(n+m), c)`. One
/// item's are `old` itself grown, in place where it can ([`CpuX::append`]); a batch's, a copy.
fn join_rows(what: &str, old: &mut CpuX, new: &CpuX, b: usize, m: usize) -> Result<CpuX> {
    let (n, c) = (old.rows() / b, old.cols.len());
    if c != new.cols.len() {
        return Err(Error::Shape {
            what: format!("{what}: a step's new rows (B·m, c) as the cache's"),
            expected: vec![b * m, c],
            found: vec![new.rows(), new.cols.len()],
        });
    }
    if b == 1 {
        old.append(what, new.view())?;
        return Ok(old.clone());
    }
    let (old, new) = (old.view(), new.view());
    let parts: Vec<ArrayView2<f32>> = (0..b)
        .flat_map(|i| {
            [
                old.slice_move(s![i * n..(i + 1) * n, ..]),
                new.slice_move(s![i * m..(i + 1) * m, ..]),
            ]
        })
        .collect();
    let joined = concatenate(Axis(0), &parts).map_err(|e| Error::Engine(format!("{what}: {e}")))?;
    Ok(CpuX::new(joined))
}

/// The attention of every layer of one kind of one stack, written layer by layer.
struct Group {
    stack: Stack,
    kind: AttentionKind,
    /// `(H, n_q, n_k)`, each layer's.
    shape: [usize; 3],
    /// `(B, L, H, n_q, n_k)`, or `(B, L, H, 0, 0)` in a pass that keeps the queries and keys
    /// instead ([`crate::engine::AttentionKept::QueriesKeys`]); `written[l]` once layer `l`'s
    /// is whole.
    probs: Array5<MaybeUninit<f32>>,
    scores: Option<Array5<MaybeUninit<f32>>>,
    /// In a pass that keeps the queries and keys: each head's thumbnails, folded as its
    /// probabilities are computed, `(B, L, H)` flat; empty in a pass that keeps them.
    folds: Vec<HeadFold>,
    /// The first query row whose attention the pass computes: 0, or in a pass that resumed the
    /// last one's `folds`, the first row they do not hold.
    first_row: usize,
    written: Vec<bool>,
}

/// One pass of a family's forward over a padded batch on the CPU: its inputs, its masks and
/// options, and what it keeps. Every attention is written straight into its group's
/// `(B, L, H, n_q, n_k)` arrays, head by head, with no copy. In a step of a decoding, `cache`
/// holds what the earlier steps kept.
pub struct CpuOps<'a> {
    inputs: &'a ModelInputs,
    masks: PassMasks<'a>,
    opts: &'a TraceOptions,
    layers: StackLayers,
    /// The layers [`Kept::Hidden`] counts (the model's own stack's).
    trace_layers: usize,
    groups: Vec<Group>,
    kept: HashMap<Kept, CpuX>,
    cache: Option<&'a mut DecoderCache>,
}

impl<'a> CpuOps<'a> {
    /// A pass over `inputs` (each `(B, n)`) through `layers`, whose attentions apply `masks`;
    /// `trace_layers`: the layers of the stack whose hidden states the trace keeps.
    pub fn new(
        inputs: &'a ModelInputs,
        masks: PassMasks<'a>,
        opts: &'a TraceOptions,
        layers: StackLayers,
        trace_layers: usize,
        cache: Option<&'a mut DecoderCache>,
    ) -> Self {
        Self {
            inputs,
            masks,
            opts,
            layers,
            trace_layers,
            groups: vec![],
            kept: HashMap::new(),
            cache,
        }
    }

    /// Every attention the pass computed, by stack and kind (each group whole: every layer of
    /// its stack written), and the values kept.
    pub(crate) fn finish(mut self) -> Result<(Vec<AttentionGroup>, KeptValues)> {
        let mut groups = Vec::with_capacity(self.groups.len());
        for g in self.groups {
            if let Some(l) = g.written.iter().position(|&w| !w) {
                return Err(Error::Engine(format!(
                    "the pass computed no {:?} attention for the {:?} stack's layer {l}",
                    g.kind, g.stack
                )));
            }
            // SAFETY: every layer's attention was written whole (`written`, set by `attention`
            // after `heads_into` returned Ok for every item, which writes every value of its
            // slices)
            let (probs, scores) =
                unsafe { (g.probs.assume_init(), g.scores.map(|s| s.assume_init())) };
            let folded = !g.folds.is_empty();
            let thumbnails = folded.then(|| g.folds.iter().map(HeadFold::thumbnails).collect());
            // kept for the next pass over the same beginning
            if let Some(cache) = self.cache.as_deref_mut().filter(|c| c.queries.is_some()) {
                if folded {
                    cache.folds = Some(g.folds);
                }
            }
            groups.push(AttentionGroup {
                stack: g.stack,
                kind: g.kind,
                probs,
                scores,
                thumbnails,
            });
        }
        let kept = self
            .kept
            .into_iter()
            .map(|(k, x)| (k, x.into_shared()))
            .collect();
        Ok((groups, kept))
    }

    fn same_rows(&self, what: &str, a: &CpuX, b: &CpuX) -> Result<()> {
        if a.view().dim() == b.view().dim() {
            return Ok(());
        }
        Err(Error::Shape {
            what: what.into(),
            expected: a.view().shape().to_vec(),
            found: b.view().shape().to_vec(),
        })
    }

    /// The rows per item of `x`, `(B·n, c)` → `n`.
    fn per_item(&self, what: &str, x: &CpuX) -> Result<usize> {
        let b = self.batch();
        if b > 0 && x.rows().is_multiple_of(b) {
            return Ok(x.rows() / b);
        }
        Err(Error::Shape {
            what: format!("{what} (B·n, c) of a batch of {b}"),
            expected: vec![b * x.rows().div_ceil(b.max(1)), x.cols.len()],
            found: vec![x.rows(), x.cols.len()],
        })
    }

    /// The group of `id`'s stack and kind, made for `(H, n_q, n_k)` when it is the first; in a
    /// pass that keeps the queries and keys, its rows from `shared` on new (a pass that reuses
    /// a prefix), the folds the cache holds from the last pass resumed where they can be.
    fn group(&mut self, id: AttentionId, shape: [usize; 3], shared: usize) -> Result<&mut Group> {
        let (b, layers) = (self.batch(), self.layers.of(id.stack));
        let kept = !self.opts.keeps_queries_keys(id.kind);
        let scores = self.opts.scores && kept;
        let last = match kept {
            true => None,
            false => self.cache.as_deref_mut().and_then(|c| c.folds.take()),
        };
        group_of(&mut self.groups, id, layers, shape, || {
            // not zeroed (a `memset` of 75 MB at 512 tokens): every layer's heads write
            // their slices
            let [h, n_q, n_k] = shape;
            let dim = match kept {
                true => (b, layers, h, n_q, n_k),
                false => (b, layers, h, 0, 0),
            };
            let bins = Bins::of(n_q.max(n_k));
            // the last pass's folds go on from the first row of the text that changed, or
            // from the first of its row of bins (the same for every head)
            let resumed = last.filter(|f| f.len() == b * layers * h).and_then(|last| {
                let f: Option<Vec<(HeadFold, usize)>> = last
                    .into_iter()
                    .map(|f| f.resumed(bins, n_k, shared))
                    .collect();
                let first_row = f.as_ref()?.first()?.1;
                let f = f.filter(|f| f.iter().all(|(_, r)| *r == first_row))?;
                Some((f.into_iter().map(|(f, _)| f).collect(), first_row))
            });
            let (folds, first_row) = match (kept, resumed) {
                (true, _) => (vec![], 0),
                (false, Some(resumed)) => resumed,
                (false, None) => (vec![HeadFold::new(bins, n_k); b * layers * h], 0),
            };
            Group {
                stack: id.stack,
                kind: id.kind,
                shape,
                probs: Array5::uninit(dim),
                scores: scores.then(|| Array5::uninit(dim)),
                folds,
                first_row,
                written: vec![false; layers],
            }
        })
    }
}

impl AttentionRecord for Group {
    fn stack(&self) -> Stack {
        self.stack
    }
    fn kind(&self) -> AttentionKind {
        self.kind
    }
    fn shape(&self) -> [usize; 3] {
        self.shape
    }
}

/// That `x`, `(rows, in)`, is what `w` takes.
/// The rows of a block of a long pass's feed-forward ([`Ops::gated_feed_forward`]): its inner
/// values a block at a time (SmolLM2: 9 MB, not 150 MB at 8,192 tokens).
const FEED_FORWARD_ROWS: usize = 512;

fn check_input(x: &CpuX, w: &Linear) -> Result<()> {
    let (rows, input) = x.view().dim();
    if input != w.weight.ncols() {
        return Err(Error::Shape {
            what: "a dense layer's input (rows, in)".into(),
            expected: vec![rows, w.weight.ncols()],
            found: vec![rows, input],
        });
    }
    Ok(())
}

impl Ops for CpuOps<'_> {
    type X = CpuX;

    fn batch(&self) -> usize {
        self.inputs.tokens.nrows()
    }

    fn wants(&self, what: Kept) -> bool {
        self.opts.wants(what, self.trace_layers)
    }

    fn keep(&mut self, what: Kept, x: &CpuX) -> Result<()> {
        if self.wants(what) {
            self.kept.insert(what, x.clone());
        }
        Ok(())
    }

    fn gather(&mut self, table: &Table, which: Ids) -> Result<CpuX> {
        let ids = self
            .inputs
            .ids(which)
            .ok_or_else(|| Error::Engine(format!("this pass has no {which:?}")))?;
        let rows = table.weight.nrows();
        let ids: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
        if let Some(&bad) = ids.iter().find(|&&i| i >= rows) {
            return Err(Error::Input(format!(
                "id {bad} is outside an embedding table of {rows} rows"
            )));
        }
        let mut x = table.weight.rows_of(&ids); // (B·n, D)
        if table.scale != 1.0 {
            x *= table.scale;
        }
        Ok(CpuX::new(x))
    }

    fn add(&mut self, a: &CpuX, b: &CpuX) -> Result<CpuX> {
        self.same_rows("a residual sum", a, b)?;
        Ok(CpuX::new(&a.view() + &b.view()))
    }

    fn norm(&mut self, x: &CpuX, ln: &Norm) -> Result<CpuX> {
        Ok(CpuX::new(norm(x.view(), ln)))
    }

    fn norm_heads(&mut self, x: &CpuX, heads: usize, ln: &Norm) -> Result<CpuX> {
        if self.opts.no_qk_norm {
            return Ok(x.clone()); // the ablation: the heads as projected
        }
        Ok(CpuX::new(norm_heads(x.view(), heads, ln)?))
    }

    fn add_norm(&mut self, a: &CpuX, b: &CpuX, ln: &Norm) -> Result<AddNorm<CpuX>> {
        let sum = self.add(a, b)?;
        let norm = self.norm(&sum, ln)?;
        Ok(AddNorm { sum, norm })
    }

    fn linear(&mut self, x: &CpuX, w: &Linear, act: Option<Activation>) -> Result<CpuX> {
        check_input(x, w)?;
        let mut y = linear_in(x.view(), w, self.opts.numerics);
        if let Some(act) = act {
            activate(&mut y, act);
        }
        Ok(CpuX::new(y))
    }

    fn project(&mut self, x: &CpuX, ws: &[&Linear]) -> Result<Vec<CpuX>> {
        for w in ws {
            check_input(x, w)?;
        }
        // the fast numerics round x to 8 bits once for every layer that takes it
        if let Some(ys) = fast_products(x.view(), ws, self.opts.numerics) {
            return Ok(ys.into_iter().map(CpuX::new).collect());
        }
        // the layers' products side by side: every thread has work from the start, where one
        // product after another would wake the pool each time (on a pass's team, in the
        // browser, they run one after another, each shared among the team's threads)
        Ok(ws
            .par_iter()
            .map(|w| CpuX::new(linear(x.view(), w)))
            .collect())
    }

    fn extend(&mut self, slot: CacheSlot, x: &CpuX) -> Result<CpuX> {
        let m = self.per_item("a step's new rows", x)?;
        let b = self.batch();
        let Some(cache) = self.cache.as_deref_mut() else {
            return Ok(x.clone());
        };
        // item by item: its n cached rows, then its m new ones
        let all = match cache.values.get_mut(&slot) {
            None => x.clone(),
            Some(old) => join_rows(&format!("{slot:?}"), old, x, b, m)?,
        };
        cache.values.insert(slot, all.clone());
        Ok(all)
    }

    fn cached(&mut self, slot: CacheSlot) -> Option<CpuX> {
        self.cache.as_ref()?.values.get(&slot).cloned()
    }

    fn cache(&mut self, slot: CacheSlot, x: &CpuX) -> Result<()> {
        if let Some(cache) = self.cache.as_deref_mut() {
            cache.values.insert(slot, x.clone());
        }
        Ok(())
    }

    fn rotate(&mut self, x: &CpuX, heads: usize, rope: &Rotary, which: Ids) -> Result<CpuX> {
        let (rows, cols) = x.view().dim();
        if cols != heads * rope.head_dim || !rope.head_dim.is_multiple_of(2) {
            return Err(Error::Shape {
                what: format!("rotary positions on {heads} heads of an even size"),
                expected: vec![rows, heads * rope.head_dim],
                found: vec![rows, cols],
            });
        }
        if self.opts.no_rope {
            return Ok(x.clone()); // the ablation: Q and K as projected
        }
        let positions = self
            .inputs
            .ids(which)
            .ok_or_else(|| Error::Engine(format!("this pass has no {which:?}")))?;
        let positions: Vec<u32> = positions.iter().copied().collect();
        if positions.len() != rows {
            return Err(Error::Shape {
                what: format!("{which:?}: one position per row"),
                expected: vec![rows],
                found: vec![positions.len()],
            });
        }
        Ok(CpuX::new(rotate(x.view(), heads, rope, &positions)))
    }

    fn gate(&mut self, g: &CpuX, up: &CpuX, act: Activation) -> Result<CpuX> {
        self.same_rows("a gated feed-forward's gate and up projection", g, up)?;
        Ok(CpuX::new(gate(g.view(), up.view(), act)))
    }

    /// Over blocks of [`FEED_FORWARD_ROWS`] rows where the trace keeps none of its inner values
    /// ([`gated_feed_forward`]), else whole.
    fn gated_feed_forward(
        &mut self,
        x: &CpuX,
        ffn: &GatedFeedForward,
        layer: usize,
    ) -> Result<CpuX> {
        let kept = GatedFeedForward::kept(layer).iter().any(|&k| self.wants(k));
        if kept || x.rows() <= FEED_FORWARD_ROWS {
            return ffn.whole(self, x, layer);
        }
        for w in [ffn.gate, ffn.up] {
            check_input(x, w)?;
        }
        Ok(CpuX::new(gated_feed_forward(
            x.view(),
            ffn,
            FEED_FORWARD_ROWS,
            self.opts.numerics,
        )))
    }

    fn soft_cap(&mut self, x: &CpuX, cap: f32) -> Result<CpuX> {
        Ok(CpuX::new(soft_capped(x.view(), cap)))
    }

    fn last_rows(&mut self, x: &CpuX) -> Result<CpuX> {
        let n = self.per_item("the rows whose last is taken", x)?;
        if n == 0 {
            return Err(Error::Engine("no rows to take the last of".into()));
        }
        Ok(CpuX::new(x.view().slice(s![n - 1..;n, ..]).to_owned())) // (B, c)
    }

    fn split(&mut self, x: &CpuX, parts: usize) -> Result<Vec<CpuX>> {
        let c = split_width(x.rows(), x.cols.len(), parts)?;
        Ok((0..parts)
            .map(|i| CpuX {
                data: x.data.clone(),
                cols: x.cols.start + i * c..x.cols.start + (i + 1) * c,
            })
            .collect())
    }

    fn attention(
        &mut self,
        id: AttentionId,
        spec: AttentionSpec,
        q: &CpuX,
        k: &CpuX,
        v: &CpuX,
    ) -> Result<CpuX> {
        let progress = &self.opts.progress;
        if id.kind == AttentionKind::SelfAttention {
            progress.begin(id.layer)?; // where a stop was asked, the pass ends here
        }
        let b = self.batch();
        let new_rows = self.per_item("attention queries", q)?;
        // a pass that reuses a prefix: its new queries join the prefix's, and the attention is
        // every position's rows, as a pass over the whole text computes them
        let joined = match (id.kind, self.cache.as_deref_mut()) {
            (
                AttentionKind::SelfAttention,
                Some(DecoderCache {
                    queries: Some(kept),
                    ..
                }),
            ) => {
                let all = match kept.get_mut(&id.layer) {
                    None => q.clone(),
                    Some(old) => join_rows("queries", old, q, b, new_rows)?,
                };
                kept.insert(id.layer, all.clone());
                Some(all)
            }
            _ => None,
        };
        let q = joined.as_ref().unwrap_or(q);
        let n_q = self.per_item("attention queries", q)?;
        let n_k = self.per_item("attention keys", k)?;
        if v.rows() != k.rows() {
            return Err(Error::Shape {
                what: format!("{id:?}: values (B·n_k, c) as the keys"),
                expected: vec![k.rows(), v.cols.len()],
                found: vec![v.rows(), v.cols.len()],
            });
        }
        let mask = self
            .masks
            .of(id)
            .ok_or_else(|| Error::Engine(format!("this pass has no mask for {id:?}")))?;
        if mask.0.dim() != (b, n_q, n_k) {
            return Err(Error::Shape {
                what: format!("{id:?}: the mask (B, n_q, n_k)"),
                expected: vec![b, n_q, n_k],
                found: mask.0.shape().to_vec(),
            });
        }
        // a sliding layer's: the queries are the last `n_q` of the `n_k` positions
        let windowed;
        let mask = match spec.reach {
            Reach::Global => mask,
            Reach::Sliding(w) => {
                windowed = mask.within_window(w, |_, i| n_k - n_q + i);
                &windowed
            }
        };
        let heads = spec.heads;
        let off = self.opts.head_mask.layer(id.layer, heads.query);
        let scale = ScoreFactor {
            scale: self.opts.scale,
            own: spec.score_scale,
        };
        let layer = id.layer;
        let (qv, kv, vv) = (q.view(), k.view(), v.view());
        heads.check(&format!("{id:?}"))?;
        let d_v = vv.ncols() / heads.key_value;
        let queries_keys = self.opts.keeps_queries_keys(id.kind);
        if queries_keys {
            self.keep(Kept::Queries(layer), q)?;
            self.keep(Kept::Keys(layer), k)?;
        }
        let g = self.group(id, [heads.query, n_q, n_k], n_q - new_rows)?;
        // the rows computed: every position's, or, where the last pass's thumbnails were
        // resumed, those from the first row they do not hold
        let r0 = g.first_row;
        let rows = n_q - r0;
        // (B·rows, H·d_v): every query head writes its context, from its group's values
        let mut context = Array2::uninit((b * rows, heads.query * d_v));
        for i in 0..b {
            // a pass that keeps the queries and keys keeps no probability: each head computes
            // its own a block of rows at a time, and folds them into its thumbnails
            let arrays = match queries_keys {
                true => {
                    let h = heads.query;
                    let at = (i * g.written.len() + layer) * h;
                    HeadArrays {
                        probs: None,
                        scores: None,
                        folds: Some(Folds {
                            heads: &mut g.folds[at..at + h],
                            first_row: r0,
                        }),
                    }
                }
                false => HeadArrays {
                    probs: Some(g.probs.slice_mut(s![i, layer, .., .., ..])),
                    scores: g
                        .scores
                        .as_mut()
                        .map(|sc| sc.slice_mut(s![i, layer, .., .., ..])),
                    folds: None,
                },
            };
            heads_into(
                qv.slice(s![i * n_q + r0..(i + 1) * n_q, ..]),
                kv.slice(s![i * n_k..(i + 1) * n_k, ..]),
                vv.slice(s![i * n_k..(i + 1) * n_k, ..]),
                heads,
                Some(mask.item(i).slice_move(s![r0.., ..])),
                &off,
                scale,
                arrays,
                context.slice_mut(s![i * rows..(i + 1) * rows, ..]),
            )?;
        }
        g.written[layer] = true;
        if queries_keys && id.kind == AttentionKind::SelfAttention {
            // the first item's heads, folded whole: shown while the pass goes on
            let h = heads.query;
            progress.folded(layer, &g.folds[layer * h..(layer + 1) * h]);
        }
        // SAFETY: `heads_into` returned Ok for every item, writing every row of the context
        let context = unsafe { context.assume_init() };
        if rows == new_rows {
            return Ok(CpuX::new(context));
        }
        // the new positions' rows go on through the layer: each item's last `new_rows`
        let parts: Vec<ArrayView2<f32>> = (0..b)
            .map(|i| context.slice(s![(i + 1) * rows - new_rows..(i + 1) * rows, ..]))
            .collect();
        let rows =
            concatenate(Axis(0), &parts).map_err(|e| Error::Engine(format!("{id:?}: {e}")))?;
        Ok(CpuX::new(rows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    fn rows(n: usize, c: usize, from: f32) -> Array2<f32> {
        Array2::from_shape_fn((n, c), |(i, j)| from + (i * c + j) as f32)
    }

    /// A cached value that nothing else holds grows and shrinks in its own buffer (a typed
    /// character copies no cache); one shared with a trace is copied, and the trace's stays as
    /// it was. Both hold the rows a join would.
    #[test]
    fn a_cached_value_alone_grows_in_place_and_a_shared_one_is_copied() {
        let (c, old, new) = (3, rows(5, 3, 0.0), rows(2, 3, 100.0));
        let want = concatenate(Axis(0), &[old.view(), new.view()]).unwrap();
        // made by a join: no room yet, so the first append moves it once, with room for more
        let mut x = CpuX::new(old.clone());
        x.append("k", new.view()).unwrap();
        assert_eq!(x.view(), want.view());
        let at = x.view().as_ptr();
        x.append("k", rows(1, c, 200.0).view()).unwrap();
        assert_eq!(x.view().as_ptr(), at, "the second append moved the buffer");
        x.truncate(6);
        assert_eq!(x.view().as_ptr(), at, "truncating moved the buffer");
        x.append("k", rows(1, c, 300.0).view()).unwrap();
        assert_eq!(x.view().as_ptr(), at);
        assert_eq!(x.view().slice(s![..5, ..]), old.view());
        assert_eq!(x.view().row(5), want.row(5));
        assert_eq!(x.view().row(6), rows(1, c, 300.0).row(0));
        // shared: a copy, the other holder's values unchanged
        let held = x.clone();
        x.append("k", new.view()).unwrap();
        assert_ne!(x.view().as_ptr(), at);
        assert_eq!((held.rows(), x.rows()), (7, 9));
        assert_eq!(held.view().row(6), rows(1, c, 300.0).row(0));
        let mut y = held.clone();
        y.truncate(2);
        assert_eq!((y.rows(), held.rows()), (2, 7));
        // some columns of a wider matrix: joined into a copy of those columns
        let wide = CpuX::new(rows(5, 6, 0.0));
        let mut part = CpuX {
            data: wide.data.clone(),
            cols: 3..6,
        };
        part.append("k", new.view()).unwrap();
        assert_eq!(
            part.view().slice(s![..5, ..]),
            wide.view().slice(s![.., 3..])
        );
        assert_eq!(part.view().slice(s![5.., ..]), new.view());
        assert!(part.append("k", rows(1, 2, 0.0).view()).is_err());
    }
}
