//! The GPU engine's [`Ops`]: a family's forward pass recorded as dispatches into a [`Plan`],
//! once per batch shape and options, and what it keeps listed by name for the read-back.
//!
//! Each operation's output is a buffer of its own, unless an earlier one of the same size is
//! no longer held by any handle ([`GpuX`]): the dispatches run in order, so a buffer whose
//! last reader has been recorded can take a later result (a layer reuses the previous one's).
//! What the trace keeps is held until the pass is read back, so nothing overwrites it.

use std::rc::Rc;

use super::kernels::{GpuParams, GpuTable};
use super::plan::{AddNorm as AddNormMode, AttentionLayout, Dispatch, GpuKernels, Plan, Rows};
use crate::engine::ops::{
    split_width, AddNorm, AttentionId, AttentionKind, CacheSlot, Ids, Kept, Ops, Stack,
};
use crate::engine::TraceOptions;
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::weights::{LayerNorm, Linear, Table};
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

/// A recorded pass: its dispatches, the buffers the host writes before each run, and what it
/// reads back afterwards.
pub(super) struct Recording {
    pub dispatches: Vec<Dispatch>,
    /// The ids each [`Ids`] the pass gathers by, `(B·T,)` u32 each.
    pub ids: Vec<(Ids, wgpu::Buffer)>,
    /// The self-attention mask as bits, `(B, T, ⌈T/32⌉)` words.
    pub mask: wgpu::Buffer,
    pub reads: Vec<Read>,
    /// Each layer's probabilities and, when kept, scores: indices into `reads`.
    pub probs: Vec<usize>,
    pub scores: Vec<usize>,
    pub kept: Vec<KeptRead>,
    /// Every other buffer the dispatches bind (activations, parameters).
    pub _keep: Vec<wgpu::Buffer>,
}

/// Records a family's forward pass over a `(B, T)` batch.
pub(super) struct Recorder<'a> {
    kernels: &'a GpuKernels,
    params: &'a mut GpuParams,
    opts: &'a TraceOptions,
    stack: Stack,
    layers: usize,
    heads: usize,
    batch: usize,
    seq: usize,
    plan: Plan<'a>,
    ids: Vec<(Ids, wgpu::Buffer)>,
    mask: wgpu::Buffer,
    slots: Vec<Rc<Slot>>,
    probs: Vec<Option<wgpu::Buffer>>,
    scores: Vec<Option<wgpu::Buffer>>,
    kept: Vec<(Kept, GpuX)>,
}

impl<'a> Recorder<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kernels: &'a GpuKernels,
        params: &'a mut GpuParams,
        opts: &'a TraceOptions,
        stack: Stack,
        layers: usize,
        heads: usize,
        batch: usize,
        seq: usize,
    ) -> Self {
        let input = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let mask = kernels.buffer("mask", batch * seq * Mask::words_per_row(seq), input);
        Self {
            kernels,
            params,
            opts,
            stack,
            layers,
            heads,
            batch,
            seq,
            plan: Plan::new(kernels),
            ids: vec![],
            mask,
            slots: vec![],
            probs: vec![None; layers],
            scores: vec![None; layers],
            kept: vec![],
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

    /// The buffer the host writes `which` ids into, `(B·T,)`.
    fn ids(&mut self, which: Ids) -> wgpu::Buffer {
        if let Some((_, b)) = self.ids.iter().find(|(i, _)| *i == which) {
            return b.clone();
        }
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let b = self
            .kernels
            .buffer(&format!("{which:?}"), self.batch * self.seq, usage);
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
        let gw = self.params.linear(&self.kernels.dev, ws);
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

    /// The recorded pass, once every layer's attention was recorded.
    pub fn finish(self) -> Result<Recording> {
        if let Some(l) = self.probs.iter().position(Option::is_none) {
            return Err(Error::Engine(format!(
                "the pass computed no self-attention for layer {l}"
            )));
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
        let p_floats = self.batch * self.heads * self.seq * self.seq; // (B, H, T, T)
        let probs = self
            .probs
            .iter()
            .flatten()
            .map(|b| read_of(b, p_floats))
            .collect();
        let scores = self
            .scores
            .iter()
            .flatten()
            .map(|b| read_of(b, p_floats))
            .collect();
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
        let mut keep = params;
        keep.extend(self.slots.iter().map(|s| s.buffer.clone()));
        keep.extend(self.probs.into_iter().flatten());
        keep.extend(self.scores.into_iter().flatten());
        Ok(Recording {
            dispatches,
            ids: self.ids,
            mask: self.mask,
            reads,
            probs,
            scores,
            kept,
            _keep: keep,
        })
    }
}

impl Ops for Recorder<'_> {
    type X = GpuX;

    fn batch(&self) -> usize {
        self.batch
    }

    fn wants(&self, what: Kept) -> bool {
        self.opts.wants(what, self.layers)
    }

    fn keep(&mut self, what: Kept, x: &GpuX) -> Result<()> {
        if self.wants(what) {
            self.kept.push((what, x.clone()));
        }
        Ok(())
    }

    fn gather(&mut self, table: &Table, ids: Ids) -> Result<GpuX> {
        let GpuTable { weight, rows, dim } = self.params.table(&self.kernels.dev, table);
        let ids = self.ids(ids);
        let n = (self.batch * self.seq) as u32;
        let out = self.output(n, dim);
        self.plan
            .gather(n, &ids, &weight, [rows, dim], table.scale, &out.slot.buffer);
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

    fn layer_norm(&mut self, x: &GpuX, ln: &LayerNorm) -> Result<GpuX> {
        let x = self.dense("LayerNorm", x)?;
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

    fn add_norm(&mut self, a: &GpuX, b: &GpuX, ln: &LayerNorm) -> Result<AddNorm<GpuX>> {
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

    // a recorded pass is a whole pass, never a step of a decoding: nothing is cached
    fn extend(&mut self, _slot: CacheSlot, x: &GpuX) -> Result<GpuX> {
        Ok(x.clone())
    }

    fn cached(&mut self, _slot: CacheSlot) -> Option<GpuX> {
        None
    }

    fn cache(&mut self, _slot: CacheSlot, _x: &GpuX) -> Result<()> {
        Ok(())
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
        heads: usize,
        q: &GpuX,
        k: &GpuX,
        v: &GpuX,
    ) -> Result<GpuX> {
        let layer = id.layer;
        if id.stack != self.stack || id.kind != AttentionKind::SelfAttention || layer >= self.layers
        {
            return Err(Error::Engine(format!(
                "this pass keeps the self-attention of the {:?} stack's {} layers, not {id:?}",
                self.stack, self.layers
            )));
        }
        let (b, t) = (self.batch as u32, self.seq as u32);
        let h = heads as u32;
        if heads != self.heads
            || !q.cols.is_multiple_of(h)
            || !v.cols.is_multiple_of(h)
            || k.cols != q.cols
        {
            return Err(Error::Shape {
                what: "attention heads: queries, keys and values (B·T, H·d)".into(),
                expected: vec![self.heads, q.cols as usize, q.cols as usize],
                found: vec![heads, k.cols as usize, v.cols as usize],
            });
        }
        for x in [q, k, v] {
            if x.rows != b * t {
                return Err(Error::Shape {
                    what: "self-attention rows (B·T)".into(),
                    expected: vec![(b * t) as usize],
                    found: vec![x.rows as usize],
                });
            }
        }
        let layout = AttentionLayout {
            batch: b,
            heads: h,
            n_q: t,
            n_k: t,
            d_k: q.cols / h,
            d_v: v.cols / h,
            q: (q.at.stride, q.at.offset),
            k: (k.at.stride, k.at.offset),
            v: (v.at.stride, v.at.offset),
            scale: self.opts.scale,
        };
        let rw = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        let p_floats = self.batch * self.heads * self.seq * self.seq; // (B, H, T, T)
        let probs = self.kernels.buffer(&format!("probs{layer}"), p_floats, rw);
        let scores = self
            .opts
            .scores
            .then(|| self.kernels.buffer(&format!("scores{layer}"), p_floats, rw));
        let context = self.output(b * t, v.cols);
        let off = self.opts.head_mask.layer(layer, heads);
        self.plan.attention(
            &layout,
            [&q.slot.buffer, &k.slot.buffer, &v.slot.buffer],
            &self.mask,
            scores.as_ref(),
            &probs,
            &context.slot.buffer,
            &off,
        );
        self.probs[layer] = Some(probs);
        self.scores[layer] = scores;
        Ok(context)
    }
}
