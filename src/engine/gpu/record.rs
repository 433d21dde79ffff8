//! The GPU engine's [`Ops`]: a family's forward pass recorded as dispatches into a [`Plan`],
//! once per batch shape and options, and what it keeps listed by name for the read-back.
//!
//! Each operation's output is a buffer of its own, unless an earlier one of the same size is
//! no longer held by any handle ([`GpuX`]): the dispatches run in order, so a buffer whose
//! last reader has been recorded can take a later result (a layer reuses the previous one's).
//! What the trace keeps is held until the pass is read back, so nothing overwrites it.

use std::rc::Rc;

use super::kernels::GpuParams;
use super::plan::{AddNorm as AddNormMode, AttentionLayout, Dispatch, GpuKernels, Plan, Rows};
use crate::engine::cpu::exec::StackLayers;
use crate::engine::ops::{
    group_of, split_width, AddNorm, AttentionId, AttentionKind, AttentionRecord, AttentionSpec,
    CacheSlot, Ids, Kept, Ops, Reach, Stack,
};
use crate::engine::{ScoreFactor, TraceOptions};
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::rope::Rotary;
use crate::model::weights::{Linear, Norm, Table};
use crate::model::Activation;

/// A buffer of activations and how many floats it holds.
struct Slot {
    buffer: wgpu::Buffer,
    floats: usize,
}

/// An activation on the GPU: `rows × cols` floats in a buffer, row `i` at
/// `at.offset + i·at.stride` (a view of some columns of a wider result, or the whole of one).
#[derive(Clone)]
pub struct GpuX {
    slot: Rc<Slot>,
    rows: u32,
    at: Rows,
    cols: u32,
}

impl GpuX {
    /// Whether its rows lie one after the other with nothing between.
    fn dense(&self) -> bool {
        self.at == Rows::dense(self.cols)
    }
}

/// What a pass reads back: a buffer's first `floats` floats.
pub(super) struct Read {
    pub buffer: wgpu::Buffer,
    pub floats: usize,
}

/// A kept value: which [`Read`] holds it, and where in it.
pub(super) struct KeptRead {
    pub what: Kept,
    pub read: usize,
    pub rows: u32,
    pub at: Rows,
    pub cols: u32,
}

/// The attentions of one kind of one stack in a recorded pass: the mask the host writes before
/// each run, and each layer's probabilities and, when kept, scores (indices into
/// [`Recording::reads`]).
pub(super) struct GroupRead {
    pub stack: Stack,
    pub kind: AttentionKind,
    /// `(H, n_q, n_k)`.
    pub shape: [usize; 3],
    /// The mask as bits, `(B, n_q, ⌈n_k/32⌉)` words.
    pub mask: wgpu::Buffer,
    /// The mask within each window the stack's sliding layers attend through, the same shape.
    pub windows: Vec<(usize, wgpu::Buffer)>,
    /// The layers of its stack.
    pub layers: usize,
    /// The reads of each layer's probabilities and scores, `(B, H, n_q, n_k)` each: none in a
    /// pass that keeps the queries and keys instead
    /// ([`crate::engine::AttentionKept::QueriesKeys`]).
    pub probs: Vec<usize>,
    pub scores: Vec<usize>,
}

/// A recorded pass: its dispatches, the buffers the host writes before each run, and what it
/// reads back afterwards.
pub(super) struct Recording {
    pub dispatches: Vec<Dispatch>,
    /// Where each layer's self-attention begins among the dispatches (of the first stack's
    /// layers, in order): a watched pass goes to the GPU a layer at a time
    /// ([`crate::engine::gpu::GpuEngine::forward`]).
    pub layer_starts: Vec<usize>,
    /// The ids each [`Ids`] the pass gathers by, `(B·n,)` u32 each.
    pub ids: Vec<(Ids, wgpu::Buffer)>,
    pub groups: Vec<GroupRead>,
    pub reads: Vec<Read>,
    pub kept: Vec<KeptRead>,
    /// Every other buffer the dispatches bind (activations, parameters).
    pub _keep: Vec<wgpu::Buffer>,
}

/// The attentions of one kind of one stack being recorded (see [`GroupRead`]).
struct Group {
    stack: Stack,
    kind: AttentionKind,
    shape: [usize; 3],
    mask: wgpu::Buffer,
    windows: Vec<(usize, wgpu::Buffer)>,
    probs: Vec<Option<wgpu::Buffer>>,
    scores: Vec<Option<wgpu::Buffer>>,
    /// In a pass that keeps the queries and keys: the one buffer every layer's probabilities
    /// are written to in turn, never read back.
    own: Option<wgpu::Buffer>,
}

/// A decoding's cache on the GPU, shared by the passes of its steps: each slot's buffer of
/// `rows_per_item` rows per item, written `m` rows per item a pass (one a step; a prompt's `P`
/// at once in a prefill) at the rows the host names in `rows_at` (`(B·m,)`, row `j` of item `b`
/// to `b·rows_per_item + t + j` for the pass's first position `t`), and the values computed
/// once.
pub(super) struct GpuCache {
    pub rows_per_item: usize,
    /// Room for `B·rows_per_item` rows: the most a pass may write.
    pub rows_at: wgpu::Buffer,
    /// Held here, a value's buffer is never taken for another result in the pass that made it.
    values: Vec<(CacheSlot, GpuX)>,
}

impl GpuCache {
    pub fn new(kernels: &GpuKernels, batch: usize, rows_per_item: usize) -> Self {
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        Self {
            rows_per_item,
            rows_at: kernels.buffer("cache rows", batch * rows_per_item, usage),
            values: vec![],
        }
    }

    fn get(&self, slot: CacheSlot) -> Option<GpuX> {
        let (_, x) = self.values.iter().find(|(s, _)| *s == slot)?;
        Some(x.clone())
    }

    fn put(&mut self, slot: CacheSlot, x: &GpuX) {
        self.values.retain(|(s, _)| *s != slot);
        self.values.push((slot, x.clone()));
    }
}

/// Records a family's forward pass over a batch of `B` items (`n` positions each of the input,
/// and of a translation's target).
pub struct Recorder<'a> {
    kernels: &'a GpuKernels,
    params: &'a mut GpuParams,
    opts: &'a TraceOptions,
    layers: StackLayers,
    trace_layers: usize,
    batch: usize,
    /// Positions per item of the input ([`Ids::Tokens`] …) and of the target.
    seq: usize,
    target_seq: usize,
    plan: Plan<'a>,
    ids: Vec<(Ids, wgpu::Buffer)>,
    slots: Vec<Rc<Slot>>,
    groups: Vec<Group>,
    kept: Vec<(Kept, GpuX)>,
    cache: Option<&'a mut GpuCache>,
    /// [`Recording::layer_starts`].
    layer_starts: Vec<usize>,
}

impl<'a> Recorder<'a> {
    /// A pass over `batch` items of `seq` positions (and `target_seq` of a translation's
    /// target) through `layers`; `trace_layers`: the layers [`Kept::Hidden`] counts; a step of
    /// a decoding with its `cache`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        kernels: &'a GpuKernels,
        params: &'a mut GpuParams,
        opts: &'a TraceOptions,
        layers: StackLayers,
        trace_layers: usize,
        batch: usize,
        [seq, target_seq]: [usize; 2],
        cache: Option<&'a mut GpuCache>,
    ) -> Self {
        Self {
            kernels,
            params,
            opts,
            layers,
            trace_layers,
            batch,
            seq,
            target_seq,
            plan: Plan::new(kernels),
            ids: vec![],
            slots: vec![],
            groups: vec![],
            kept: vec![],
            cache,
            layer_starts: vec![],
        }
    }

    /// A buffer for `floats` results: one no handle holds any more, or a new one.
    fn output(&mut self, rows: u32, cols: u32) -> GpuX {
        let floats = rows as usize * cols as usize;
        let free = self
            .slots
            .iter()
            .find(|s| s.floats == floats && Rc::strong_count(s) == 1)
            .cloned();
        let slot = free.unwrap_or_else(|| {
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
            let slot = Rc::new(Slot {
                buffer: self.kernels.buffer("activation", floats, usage),
                floats,
            });
            self.slots.push(slot.clone());
            slot
        });
        GpuX {
            slot,
            rows,
            at: Rows::dense(cols),
            cols,
        }
    }

    /// Positions per item of `which`.
    fn len(&self, which: Ids) -> usize {
        match which {
            Ids::Tokens | Ids::TokenTypes | Ids::Positions => self.seq,
            Ids::TargetTokens | Ids::TargetPositions => self.target_seq,
        }
    }

    /// The buffer the host writes `which` ids into, `(B·n,)`.
    fn ids(&mut self, which: Ids) -> wgpu::Buffer {
        if let Some((_, b)) = self.ids.iter().find(|(i, _)| *i == which) {
            return b.clone();
        }
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let b = self
            .kernels
            .buffer(&format!("{which:?}"), self.batch * self.len(which), usage);
        self.ids.push((which, b.clone()));
        b
    }

    fn dense<'x>(&self, what: &str, x: &'x GpuX) -> Result<&'x GpuX> {
        if x.dense() {
            return Ok(x);
        }
        Err(Error::Engine(format!(
            "{what} takes a whole matrix, not a view of some of its columns"
        )))
    }

    fn same(&self, what: &str, a: &GpuX, b: &GpuX) -> Result<()> {
        if (a.rows, a.cols) == (b.rows, b.cols) {
            return Ok(());
        }
        Err(Error::Shape {
            what: what.into(),
            expected: vec![a.rows as usize, a.cols as usize],
            found: vec![b.rows as usize, b.cols as usize],
        })
    }

    /// `act(x·Wᵀ + b)` of the layers `ws` fused into one product (one layer: itself).
    ///
    /// # Shapes
    /// * `x`: `(rows, in)` → `(rows, Σ out)`, dense
    fn product(&mut self, x: &GpuX, ws: &[&Linear], act: Option<Activation>) -> Result<GpuX> {
        let gw = self.params.linear(&self.kernels.dev, ws)?;
        if x.cols != gw.k {
            return Err(Error::Shape {
                what: "a dense layer's input (rows, in)".into(),
                expected: vec![x.rows as usize, gw.k as usize],
                found: vec![x.rows as usize, x.cols as usize],
            });
        }
        let out = self.output(x.rows, gw.n);
        self.plan
            .linear_rows(x.rows, &x.slot.buffer, x.at, &gw, act, &out.slot.buffer);
        Ok(out)
    }

    /// The recorded pass, once every group's every layer was recorded.
    pub(super) fn finish(self) -> Result<Recording> {
        for g in &self.groups {
            if let Some(l) = g.probs.iter().position(Option::is_none) {
                return Err(Error::Engine(format!(
                    "the pass computed no {:?} attention for the {:?} stack's layer {l}",
                    g.kind, g.stack
                )));
            }
        }
        let (dispatches, params) = self.plan.finish();
        let mut reads: Vec<Read> = vec![];
        let mut read_of = |buffer: &wgpu::Buffer, floats: usize| -> usize {
            match reads.iter().position(|r| r.buffer == *buffer) {
                Some(i) => i,
                None => {
                    reads.push(Read {
                        buffer: buffer.clone(),
                        floats,
                    });
                    reads.len() - 1
                }
            }
        };
        let mut keep = params;
        let mut groups = Vec::with_capacity(self.groups.len());
        for g in self.groups {
            let floats = self.batch * g.shape.iter().product::<usize>(); // (B, H, n_q, n_k)
            let layers = g.probs.len();
            let probs = match g.own {
                Some(_) => vec![],
                None => g
                    .probs
                    .iter()
                    .flatten()
                    .map(|b| read_of(b, floats))
                    .collect(),
            };
            let scores = g
                .scores
                .iter()
                .flatten()
                .map(|b| read_of(b, floats))
                .collect();
            keep.extend(g.probs.into_iter().flatten());
            keep.extend(g.scores.into_iter().flatten());
            groups.push(GroupRead {
                stack: g.stack,
                kind: g.kind,
                shape: g.shape,
                mask: g.mask,
                windows: g.windows,
                layers,
                probs,
                scores,
            });
        }
        let kept = self
            .kept
            .iter()
            .map(|(what, x)| KeptRead {
                what: *what,
                read: read_of(&x.slot.buffer, x.slot.floats),
                rows: x.rows,
                at: x.at,
                cols: x.cols,
            })
            .collect();
        keep.extend(self.slots.iter().map(|s| s.buffer.clone()));
        Ok(Recording {
            dispatches,
            layer_starts: self.layer_starts,
            ids: self.ids,
            groups,
            reads,
            kept,
            _keep: keep,
        })
    }

    /// The rows per item of `x`, `(B·n, c)` → `n`.
    fn per_item(&self, what: &str, x: &GpuX) -> Result<u32> {
        let b = self.batch as u32;
        if b > 0 && x.rows.is_multiple_of(b) {
            return Ok(x.rows / b);
        }
        Err(Error::Shape {
            what: format!("{what} (B·n, c) of a batch of {b}"),
            expected: vec![(b * x.rows.div_ceil(b.max(1))) as usize, x.cols as usize],
            found: vec![x.rows as usize, x.cols as usize],
        })
    }

    /// The group of `id`'s stack and kind, made for `(H, n_q, n_k)` when it is the first.
    fn group(&mut self, id: AttentionId, shape: [usize; 3]) -> Result<&mut Group> {
        let (batch, layers, kernels) = (self.batch, self.layers.of(id.stack), &self.kernels);
        group_of(&mut self.groups, id, layers, shape, || {
            let [_, n_q, n_k] = shape;
            let input = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
            let words = batch * n_q * Mask::words_per_row(n_k);
            let mask = kernels.buffer(&format!("{:?} {:?} mask", id.stack, id.kind), words, input);
            Group {
                stack: id.stack,
                kind: id.kind,
                shape,
                mask,
                windows: vec![],
                probs: vec![None; layers],
                scores: vec![None; layers],
                own: None,
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

impl Ops for Recorder<'_> {
    type X = GpuX;

    fn batch(&self) -> usize {
        self.batch
    }

    fn wants(&self, what: Kept) -> bool {
        self.opts.wants(what, self.trace_layers)
    }

    fn keep(&mut self, what: Kept, x: &GpuX) -> Result<()> {
        if self.wants(what) {
            self.kept.push((what, x.clone()));
        }
        Ok(())
    }

    fn gather(&mut self, table: &Table, ids: Ids) -> Result<GpuX> {
        let weight = self.params.table(&self.kernels.dev, table)?;
        let n = (self.batch * self.len(ids)) as u32;
        let ids = self.ids(ids);
        let out = self.output(n, weight.cols);
        self.plan
            .gather(n, &ids, &weight, table.scale, &out.slot.buffer);
        Ok(out)
    }

    fn add(&mut self, a: &GpuX, b: &GpuX) -> Result<GpuX> {
        self.same("a residual sum", a, b)?;
        let (a, b) = (self.dense("a sum", a)?, self.dense("a sum", b)?);
        let out = self.output(a.rows, a.cols);
        self.plan.add(
            a.rows,
            a.cols,
            [&a.slot.buffer, &b.slot.buffer],
            &out.slot.buffer,
        );
        Ok(out)
    }

    fn norm(&mut self, x: &GpuX, ln: &Norm) -> Result<GpuX> {
        let x = self.dense("a norm", x)?;
        let gln = self.params.norm(&self.kernels.dev, ln);
        let out = self.output(x.rows, x.cols);
        let b = &x.slot.buffer;
        self.plan.add_norm(
            AddNormMode::Norm,
            x.rows,
            [b, b],
            &gln,
            None,
            Some(&out.slot.buffer),
        );
        Ok(out)
    }

    fn norm_heads(&mut self, x: &GpuX, heads: usize, ln: &Norm) -> Result<GpuX> {
        if self.opts.no_qk_norm {
            return Ok(x.clone()); // the ablation: the heads as projected
        }
        let gln = self.params.norm(&self.kernels.dev, ln);
        if heads == 0 || x.cols != heads as u32 * gln.dim {
            return Err(Error::Shape {
                what: format!("{heads} heads of the norm's {} columns each", gln.dim),
                expected: vec![x.rows as usize, heads * gln.dim as usize],
                found: vec![x.rows as usize, x.cols as usize],
            });
        }
        let out = self.output(x.rows, x.cols);
        self.plan.norm_heads(
            [x.rows, heads as u32],
            &x.slot.buffer,
            x.at,
            &gln,
            &out.slot.buffer,
        );
        Ok(out)
    }

    fn add_norm(&mut self, a: &GpuX, b: &GpuX, ln: &Norm) -> Result<AddNorm<GpuX>> {
        self.same("a residual sum", a, b)?;
        let (a, b) = (self.dense("a sum", a)?, self.dense("a sum", b)?);
        let gln = self.params.norm(&self.kernels.dev, ln);
        let (sum, norm) = (self.output(a.rows, a.cols), self.output(a.rows, a.cols));
        self.plan.add_norm(
            AddNormMode::AddThenNorm,
            a.rows,
            [&a.slot.buffer, &b.slot.buffer],
            &gln,
            Some(&sum.slot.buffer),
            Some(&norm.slot.buffer),
        );
        Ok(AddNorm { sum, norm })
    }

    fn soft_cap(&mut self, x: &GpuX, cap: f32) -> Result<GpuX> {
        let x = self.dense("a soft cap", x)?;
        let out = self.output(x.rows, x.cols);
        self.plan
            .soft_cap([x.rows, x.cols], &x.slot.buffer, cap, &out.slot.buffer);
        Ok(out)
    }

    fn linear(&mut self, x: &GpuX, w: &Linear, act: Option<Activation>) -> Result<GpuX> {
        self.product(x, &[w], act)
    }

    fn project(&mut self, x: &GpuX, ws: &[&Linear]) -> Result<Vec<GpuX>> {
        // one product into one buffer, each layer's output a view of its columns
        let all = self.product(x, ws, None)?;
        let mut offset = 0;
        Ok(ws
            .iter()
            .map(|w| {
                let cols = w.weight.nrows() as u32;
                let view = GpuX {
                    slot: all.slot.clone(),
                    rows: all.rows,
                    at: Rows {
                        offset,
                        stride: all.cols,
                    },
                    cols,
                };
                offset += cols;
                view
            })
            .collect())
    }

    /// A pass's new rows (`m` per item: one in a step, the prompt's in a prefill) written to
    /// the rows of each item the host names (`GpuCache::rows_at`); the whole cache is the
    /// result, `(B·rows_per_item, c)`, whose rows past the pass's are zero (or stale) and
    /// masked.
    fn extend(&mut self, slot: CacheSlot, x: &GpuX) -> Result<GpuX> {
        let m = self.per_item("a step's new rows", x)?;
        let b = self.batch;
        let Some(cache) = self.cache.as_deref() else {
            return Ok(x.clone());
        };
        if m as usize > cache.rows_per_item {
            return Err(Error::Engine(format!(
                "{slot:?}: {m} new rows per item overflow a cache of {} rows per item",
                cache.rows_per_item
            )));
        }
        let all = match cache.get(slot) {
            Some(all) => all,
            None => {
                // zeroed: the rows no step has written are finite, and masked
                let rows = (b * cache.rows_per_item) as u32;
                let floats = rows as usize * x.cols as usize;
                let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
                let buffer = self.kernels.buffer(&format!("{slot:?}"), floats, usage);
                GpuX {
                    slot: Rc::new(Slot { buffer, floats }),
                    rows,
                    at: Rows::dense(x.cols),
                    cols: x.cols,
                }
            }
        };
        if all.cols != x.cols {
            return Err(Error::Shape {
                what: format!("{slot:?}: a step's new rows (B, c) as the cache's"),
                expected: vec![b, all.cols as usize],
                found: vec![x.rows as usize, x.cols as usize],
            });
        }
        let rows_at = cache.rows_at.clone();
        self.plan.scatter(
            [x.rows, x.cols],
            &rows_at,
            &x.slot.buffer,
            x.at,
            &all.slot.buffer,
            all.rows,
        );
        if let Some(cache) = self.cache.as_deref_mut() {
            cache.put(slot, &all);
        }
        Ok(all)
    }

    fn cached(&mut self, slot: CacheSlot) -> Option<GpuX> {
        self.cache.as_deref()?.get(slot)
    }

    fn cache(&mut self, slot: CacheSlot, x: &GpuX) -> Result<()> {
        if let Some(cache) = self.cache.as_deref_mut() {
            cache.put(slot, x);
        }
        Ok(())
    }

    fn rotate(&mut self, x: &GpuX, heads: usize, rope: &Rotary, which: Ids) -> Result<GpuX> {
        let d = rope.head_dim as u32;
        let rows = (self.batch * self.len(which)) as u32;
        if d == 0 || !d.is_multiple_of(2) || x.cols != heads as u32 * d || x.rows != rows {
            return Err(Error::Shape {
                what: format!(
                    "rotary positions: (B·n, heads·d) of {heads} heads of an even d = {d}, a \
                     row per {which:?}"
                ),
                expected: vec![rows as usize, heads * d as usize],
                found: vec![x.rows as usize, x.cols as usize],
            });
        }
        if self.opts.no_rope {
            return Ok(x.clone()); // the ablation: Q and K as projected
        }
        let inv_freq = self.params.rotation(&self.kernels.dev, rope);
        let positions = self.ids(which);
        let out = self.output(x.rows, x.cols);
        self.plan.rotary(
            [x.rows, heads as u32, d],
            &positions,
            (&inv_freq, rope.attention_scaling()),
            &x.slot.buffer,
            x.at,
            &out.slot.buffer,
        );
        Ok(out)
    }

    fn gate(&mut self, gate: &GpuX, up: &GpuX, act: Activation) -> Result<GpuX> {
        self.same("a gated feed-forward's gate and up", gate, up)?;
        let out = self.output(gate.rows, gate.cols);
        self.plan.gate(
            [gate.rows, gate.cols],
            (&gate.slot.buffer, gate.at),
            (&up.slot.buffer, up.at),
            act,
            &out.slot.buffer,
        );
        Ok(out)
    }

    fn last_rows(&mut self, x: &GpuX) -> Result<GpuX> {
        let n = self.per_item("the rows whose last is taken", x)?;
        if n == 0 {
            return Err(Error::Engine("no rows to take the last of".into()));
        }
        // a view: row n − 1 of each item, one item's rows apart
        Ok(GpuX {
            slot: x.slot.clone(),
            rows: self.batch as u32,
            at: Rows {
                offset: x.at.offset + (n - 1) * x.at.stride,
                stride: x.at.stride * n,
            },
            cols: x.cols,
        })
    }

    fn split(&mut self, x: &GpuX, parts: usize) -> Result<Vec<GpuX>> {
        let c = split_width(x.rows as usize, x.cols as usize, parts)? as u32;
        Ok((0..parts as u32)
            .map(|i| GpuX {
                slot: x.slot.clone(),
                rows: x.rows,
                at: Rows {
                    offset: x.at.offset + i * c,
                    stride: x.at.stride,
                },
                cols: c,
            })
            .collect())
    }

    fn attention(
        &mut self,
        id: AttentionId,
        spec: AttentionSpec,
        q: &GpuX,
        k: &GpuX,
        v: &GpuX,
    ) -> Result<GpuX> {
        let heads = spec.heads;
        heads.check(&format!("{id:?}"))?;
        let (h, kv) = (heads.query as u32, heads.key_value as u32);
        let b = self.batch as u32;
        let (n_q, n_k) = (
            self.per_item("attention queries", q)?,
            self.per_item("attention keys", k)?,
        );
        let d_k = q.cols / h;
        if !q.cols.is_multiple_of(h)
            || !v.cols.is_multiple_of(kv)
            || k.cols != kv * d_k
            || v.rows != k.rows
        {
            return Err(Error::Shape {
                what: format!(
                    "{id:?}: queries (B·n_q, H·d_k) of {h} heads, keys and values \
                     (B·n_k, H_kv·d) of {kv}"
                ),
                expected: vec![
                    q.rows as usize,
                    (h * d_k) as usize,
                    k.rows as usize,
                    (kv * d_k) as usize,
                ],
                found: vec![
                    q.rows as usize,
                    q.cols as usize,
                    v.rows as usize,
                    k.cols as usize,
                ],
            });
        }
        let layer = id.layer;
        if id.kind == AttentionKind::SelfAttention && layer == self.layer_starts.len() {
            self.layer_starts.push(self.plan.len());
        }
        let layout = AttentionLayout {
            batch: b,
            heads: h,
            kv_heads: kv,
            n_q,
            n_k,
            d_k,
            d_v: v.cols / kv,
            q: (q.at.stride, q.at.offset),
            k: (k.at.stride, k.at.offset),
            v: (v.at.stride, v.at.offset),
            scale: ScoreFactor {
                scale: self.opts.scale,
                own: spec.score_scale,
            },
        };
        let heads = heads.query;
        let rw = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        let floats = self.batch * heads * (n_q * n_k) as usize; // (B, H, n_q, n_k)
        let label = format!("{:?} {:?} {layer}", id.stack, id.kind);
        // a pass that keeps the queries and keys reads them back, and writes every layer's
        // probabilities into one buffer (the dispatches run in order)
        let queries_keys = self.opts.keeps_queries_keys(id.kind);
        if queries_keys {
            self.keep(Kept::Queries(layer), q)?;
            self.keep(Kept::Keys(layer), k)?;
        }
        let own = match queries_keys {
            true => {
                let shape = [heads, n_q as usize, n_k as usize];
                let g = self.group(id, shape)?;
                let own = g.own.clone();
                Some(own.unwrap_or_else(|| {
                    self.kernels
                        .buffer(&format!("probs {:?} {:?}", id.stack, id.kind), floats, rw)
                }))
            }
            false => None,
        };
        let probs = match &own {
            Some(own) => own.clone(),
            None => self.kernels.buffer(&format!("probs {label}"), floats, rw),
        };
        let scores = (self.opts.scores && own.is_none())
            .then(|| self.kernels.buffer(&format!("scores {label}"), floats, rw));
        let context = self.output(b * n_q, h * layout.d_v);
        let off = self.opts.head_mask.layer(layer, heads);
        let shape = [heads, n_q as usize, n_k as usize];
        let g = self.group(id, shape)?;
        let mask = match spec.reach {
            Reach::Global => g.mask.clone(),
            // a sliding layer's mask: the host writes the stack's within the window
            Reach::Sliding(w) => match g.windows.iter().find(|(at, _)| *at == w) {
                Some((_, m)) => m.clone(),
                None => {
                    let words = g.mask.size() as usize / 4;
                    let input = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
                    let label = format!("{:?} {:?} mask within {w}", id.stack, id.kind);
                    let m = self.kernels.buffer(&label, words, input);
                    self.group(id, shape)?.windows.push((w, m.clone()));
                    m
                }
            },
        };
        self.plan.attention(
            &layout,
            [&q.slot.buffer, &k.slot.buffer, &v.slot.buffer],
            &mask,
            scores.as_ref(),
            &probs,
            &context.slot.buffer,
            &off,
        );
        let g = self.group(id, [heads, n_q as usize, n_k as usize])?;
        g.probs[layer] = Some(probs);
        g.scores[layer] = scores;
        g.own = own;
        Ok(context)
    }
}
