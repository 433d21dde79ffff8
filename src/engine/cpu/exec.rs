//! The CPU engine's [`Ops`]: each operation computed when the family calls it, on `ndarray`.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;

use ndarray::{s, Array2, Array5, ArrayView2, Axis};

use super::attention::{heads_into, HeadArrays};
use super::ops::{activate, layer_norm, linear};
use crate::engine::ops::{split_width, AddNorm, AttentionId, AttentionKind, Ids, Kept, Ops, Stack};
use crate::engine::trace::{KeptValues, StackAttention};
use crate::engine::{ModelInputs, TraceOptions};
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::weights::{LayerNorm, Linear, Table};
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

    /// The values as an array of their own (no copy when nothing else holds them).
    fn into_owned(self) -> Array2<f32> {
        if self.cols == (0..self.data.ncols()) {
            Arc::try_unwrap(self.data).unwrap_or_else(|shared| (*shared).clone())
        } else {
            self.view().to_owned()
        }
    }
}

/// One pass of a family's forward over a padded batch on the CPU: its inputs, its mask and
/// options, and what it keeps. The self-attention of the model's stack is written straight
/// into the trace's `(B, L, H, T, T)` arrays, head by head, with no copy.
pub struct CpuOps<'a> {
    inputs: &'a ModelInputs,
    mask: &'a Mask,
    opts: &'a TraceOptions,
    stack: Stack,
    layers: usize,
    /// `(B, L, H, T, T)`, written layer by layer; `written[l]` once layer `l`'s is whole.
    probs: Array5<MaybeUninit<f32>>,
    scores: Option<Array5<MaybeUninit<f32>>>,
    written: Vec<bool>,
    kept: HashMap<Kept, CpuX>,
}

impl<'a> CpuOps<'a> {
    /// A pass over `inputs` (each `(B, T)`) through `layers` layers of `heads` heads of `stack`,
    /// whose self-attention applies `mask`, `(B, T, T)`.
    pub fn new(
        inputs: &'a ModelInputs,
        mask: &'a Mask,
        opts: &'a TraceOptions,
        stack: Stack,
        layers: usize,
        heads: usize,
    ) -> Self {
        let (b, t) = inputs.tokens.dim();
        // not zeroed (a `memset` of 75 MB at 512 tokens): every layer's heads write their slices
        let shape = (b, layers, heads, t, t);
        Self {
            inputs,
            mask,
            opts,
            stack,
            layers,
            probs: Array5::uninit(shape),
            scores: opts.scores.then(|| Array5::uninit(shape)),
            written: vec![false; layers],
            kept: HashMap::new(),
        }
    }

    /// The trace's attention and the values kept, once every layer's attention was written.
    pub(crate) fn finish(self) -> Result<(StackAttention, KeptValues)> {
        if let Some(l) = self.written.iter().position(|&w| !w) {
            return Err(Error::Engine(format!(
                "the pass computed no self-attention for layer {l}"
            )));
        }
        // SAFETY: every layer's attention was written whole (`written`, set by `attention` after
        // `heads_into` returned Ok for every item, which writes every value of its slices)
        let (probs, scores) = unsafe {
            (
                self.probs.assume_init(),
                self.scores.map(|s| s.assume_init()),
            )
        };
        let kept = self
            .kept
            .into_iter()
            .map(|(k, x)| (k, x.into_owned()))
            .collect();
        Ok((StackAttention { probs, scores }, kept))
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
}

impl Ops for CpuOps<'_> {
    type X = CpuX;

    fn batch(&self) -> usize {
        self.inputs.tokens.nrows()
    }

    fn wants(&self, what: Kept) -> bool {
        self.opts.wants(what, self.layers)
    }

    fn keep(&mut self, what: Kept, x: &CpuX) -> Result<()> {
        if self.wants(what) {
            self.kept.insert(what, x.clone());
        }
        Ok(())
    }

    fn gather(&mut self, table: &Table, ids: Ids) -> Result<CpuX> {
        let ids = self.inputs.ids(ids);
        let rows = table.weight.nrows();
        let ids: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
        if let Some(&bad) = ids.iter().find(|&&i| i >= rows) {
            return Err(Error::Input(format!(
                "id {bad} is outside an embedding table of {rows} rows"
            )));
        }
        Ok(CpuX::new(table.weight.select(Axis(0), &ids))) // (B·T, D)
    }

    fn add(&mut self, a: &CpuX, b: &CpuX) -> Result<CpuX> {
        self.same_rows("a residual sum", a, b)?;
        Ok(CpuX::new(&a.view() + &b.view()))
    }

    fn layer_norm(&mut self, x: &CpuX, ln: &LayerNorm) -> Result<CpuX> {
        Ok(CpuX::new(layer_norm(x.view(), ln)))
    }

    fn add_norm(&mut self, a: &CpuX, b: &CpuX, ln: &LayerNorm) -> Result<AddNorm<CpuX>> {
        let sum = self.add(a, b)?;
        let norm = self.layer_norm(&sum, ln)?;
        Ok(AddNorm { sum, norm })
    }

    fn linear(&mut self, x: &CpuX, w: &Linear, act: Option<Activation>) -> Result<CpuX> {
        let (rows, input) = x.view().dim();
        if input != w.weight.ncols() {
            return Err(Error::Shape {
                what: "a dense layer's input (rows, in)".into(),
                expected: vec![rows, w.weight.ncols()],
                found: vec![rows, input],
            });
        }
        let mut y = linear(x.view(), w);
        if let Some(act) = act {
            activate(&mut y, act);
        }
        Ok(CpuX::new(y))
    }

    fn project(&mut self, x: &CpuX, ws: &[&Linear]) -> Result<Vec<CpuX>> {
        ws.iter().map(|w| self.linear(x, w, None)).collect()
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
        heads: usize,
        q: &CpuX,
        k: &CpuX,
        v: &CpuX,
    ) -> Result<CpuX> {
        let layer = id.layer;
        if id.stack != self.stack || id.kind != AttentionKind::SelfAttention || layer >= self.layers
        {
            return Err(Error::Engine(format!(
                "this pass keeps the self-attention of the {:?} stack's {} layers, not {id:?}",
                self.stack, self.layers
            )));
        }
        let b = self.batch();
        let (_, _, h, t, _) = self.probs.dim();
        let shape = |what: &str, expected: Vec<usize>, found: &[usize]| Error::Shape {
            what: what.into(),
            expected,
            found: found.to_vec(),
        };
        if heads != h {
            return Err(shape("attention heads", vec![h], &[heads]));
        }
        for (what, x) in [("queries", q), ("keys", k), ("values", v)] {
            if x.rows() != b * t {
                let found = x.view().shape().to_vec();
                return Err(shape(
                    &format!("self-attention {what} (B·T, c)"),
                    vec![b * t, found[1]],
                    &found,
                ));
            }
        }
        let off = self.opts.head_mask.layer(layer, heads);
        let (qv, kv, vv) = (q.view(), k.view(), v.view());
        let mut context = Array2::uninit((b * t, vv.ncols()));
        for i in 0..b {
            let rows = s![i * t..(i + 1) * t, ..];
            let arrays = HeadArrays {
                probs: self.probs.slice_mut(s![i, layer, .., .., ..]),
                scores: self
                    .scores
                    .as_mut()
                    .map(|sc| sc.slice_mut(s![i, layer, .., .., ..])),
            };
            heads_into(
                qv.slice(rows),
                kv.slice(rows),
                vv.slice(rows),
                heads,
                Some(self.mask.item(i)),
                &off,
                self.opts.scale,
                arrays,
                context.slice_mut(rows),
            )?;
        }
        self.written[layer] = true;
        // SAFETY: `heads_into` returned Ok for every item, writing every row of the context
        Ok(CpuX::new(unsafe { context.assume_init() }))
    }
}
