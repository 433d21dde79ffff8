//! Single kernels run on their own with uploaded inputs: what the per-kernel tests compare
//! with the CPU ops (`engine::cpu::ops`, `engine::cpu::attention`).

use ndarray::{Array2, Array3, Array4, ArrayView2, ArrayView3};

use super::kernels::{filled, storage, GpuLinear, GpuNorm, GpuParams};
use super::plan::{AddNorm, AttentionLayout, GpuKernels, Plan, Rows};
use crate::engine::ops::Heads;
use crate::engine::ScoreScale;
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::rope::Rotary;
use crate::model::weights::{Linear, Norm, Table};
use crate::model::Activation;

/// Every step of multi-head (or grouped-query) scaled dot-product attention, read back from the
/// GPU.
///
/// # Shapes
/// * `scores`, `probs`: `(B, H, n_q, n_k)`
/// * `context`: `(B, n_q, H·d_v)`, heads merged
#[derive(Debug, Clone)]
pub struct AttentionOutput {
    pub scores: Array4<f32>,
    pub probs: Array4<f32>,
    pub context: Array3<f32>,
}

fn flat<D: ndarray::Dimension>(a: &ndarray::ArrayView<f32, D>) -> Vec<f32> {
    a.iter().copied().collect()
}

fn shape_err(what: &str, expected: Vec<usize>, found: &[usize]) -> Error {
    Error::Shape {
        what: what.into(),
        expected,
        found: found.to_vec(),
    }
}

impl GpuKernels {
    fn output(&self, label: &str, floats: usize) -> wgpu::Buffer {
        self.buffer(
            label,
            floats,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        )
    }

    /// Runs a recorded plan in one submission and reads back `outputs` (buffer, float count).
    async fn run(
        &self,
        plan: Plan<'_>,
        outputs: &[(&wgpu::Buffer, usize)],
    ) -> Result<Vec<Vec<f32>>> {
        let (dispatches, _params) = plan.finish();
        let mut enc = self.encode(&dispatches);
        let total: usize = outputs.iter().map(|o| o.1).sum();
        let staging = self.buffer(
            "staging",
            total,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let mut offset = 0u64;
        for (buf, n) in outputs {
            enc.copy_buffer_to_buffer(buf, 0, &staging, offset, (*n * 4) as u64);
            offset += (*n * 4) as u64;
        }
        self.dev.queue.submit([enc.finish()]);
        let data = self.read(&staging, offset).await?;
        let mut out = vec![];
        let mut at = 0;
        for (_, n) in outputs {
            out.push(data[at..at + n].to_vec());
            at += n;
        }
        Ok(out)
    }

    /// A dense layer, `act(x·Wᵀ + b)`: `matmul.wgsl` for f32 weights, `quant.wgsl` for a
    /// GGUF file's ggml blocks.
    ///
    /// # Shapes
    /// * `x`: `(M, K)` → `(M, N)`
    pub async fn linear(
        &self,
        x: ArrayView2<'_, f32>,
        l: &Linear,
        act: Option<Activation>,
    ) -> Result<Array2<f32>> {
        self.fused_linear(x, &[l], act).await
    }

    /// Dense layers of the same input as one product, as `Ops::project` records Q, K and V:
    /// their weights stacked where they can be, else a product each into its own columns.
    ///
    /// # Shapes
    /// * `x`: `(M, K)`, `ls[i].weight`: `(N_i, K)` → `(M, Σ N_i)`
    pub async fn fused_linear(
        &self,
        x: ArrayView2<'_, f32>,
        ls: &[&Linear],
        act: Option<Activation>,
    ) -> Result<Array2<f32>> {
        let (m, k) = x.dim();
        if let Some(l) = ls.iter().find(|l| l.weight.ncols() != k) {
            return Err(shape_err(
                "linear input (M, K)",
                vec![m, l.weight.ncols()],
                x.shape(),
            ));
        }
        let w = GpuLinear::fused(&self.dev, "linear", ls)?;
        let a = storage(&self.dev, "x", &flat(&x));
        let n = w.n as usize;
        let c = self.output("y", m * n);
        let mut plan = Plan::new(self);
        plan.linear(m as u32, &a, &w, act, &c);
        let out = self.run(plan, &[(&c, m * n)]).await?;
        Array2::from_shape_vec((m, n), out.concat()).map_err(|e| Error::Gpu(e.to_string()))
    }

    /// `gather.wgsl` (f32 rows) or `quant.wgsl`'s `main_gather` (packed blocks): rows `ids` of
    /// an embedding table, times its scale.
    ///
    /// # Shapes
    /// * `ids`: `(n,)` → `(n, D)`
    pub async fn gather(&self, table: &Table, ids: &[u32]) -> Result<Array2<f32>> {
        let rows = table.weight.nrows();
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= rows) {
            return Err(Error::Input(format!(
                "id {bad} is outside an embedding table of {rows} rows"
            )));
        }
        let mut params = GpuParams::default();
        let t = params.table(&self.dev, table)?;
        let idb = filled(
            &self.dev,
            "ids",
            bytemuck::cast_slice(ids),
            wgpu::BufferUsages::STORAGE,
        );
        let (n, d) = (ids.len(), t.cols as usize);
        let out = self.output("rows", n * d);
        let mut plan = Plan::new(self);
        plan.gather(n as u32, &idb, &t, table.scale, &out);
        let got = self.run(plan, &[(&out, n * d)]).await?;
        Array2::from_shape_vec((n, d), got.concat()).map_err(|e| Error::Gpu(e.to_string()))
    }

    /// `add_layernorm.wgsl` as QK-norm: each of `heads` heads of `x`'s columns `from..` through
    /// `ln` on its own (as [`crate::engine::cpu::ops::norm_heads`] of those columns), read in
    /// place from `x`'s rows as a pass reads Q or K from the fused QKV matrix.
    ///
    /// # Shapes
    /// * `x`: `(rows, c)`, `c ≥ from + heads·d`, `d = ln`'s width → `(rows, heads·d)`
    pub async fn norm_heads(
        &self,
        x: ArrayView2<'_, f32>,
        from: usize,
        heads: usize,
        ln: &Norm,
    ) -> Result<Array2<f32>> {
        let (rows, c) = x.dim();
        let d = ln.weight.len();
        if heads == 0 || from + heads * d > c {
            return Err(shape_err(
                "QK-norm input (rows, from + heads·d)",
                vec![rows, from + heads * d],
                x.shape(),
            ));
        }
        let gln = GpuNorm::upload(&self.dev, "ln", ln);
        let xb = storage(&self.dev, "x", &flat(&x));
        let out = self.output("normed", rows * heads * d);
        let mut plan = Plan::new(self);
        let at = Rows {
            offset: from as u32,
            stride: c as u32,
        };
        plan.norm_heads([rows as u32, heads as u32], &xb, at, &gln, &out);
        let got = self.run(plan, &[(&out, rows * heads * d)]).await?;
        Array2::from_shape_vec((rows, heads * d), got.concat())
            .map_err(|e| Error::Gpu(e.to_string()))
    }

    /// `add_layernorm.wgsl`: `LN(a + b)` (and the sum), or `LN(a)` when `b` is `None`, LN the
    /// LayerNorm or RMSNorm `ln.kind` says.
    ///
    /// # Shapes
    /// * `a`, `b`: `(rows, D)` → `(a + b, LN(a + b))`, each `(rows, D)`
    pub async fn add_layernorm(
        &self,
        a: ArrayView2<'_, f32>,
        b: Option<ArrayView2<'_, f32>>,
        ln: &Norm,
    ) -> Result<(Array2<f32>, Array2<f32>)> {
        let (rows, d) = a.dim();
        if ln.weight.len() != d {
            return Err(shape_err(
                "layer norm input (rows, D)",
                vec![rows, ln.weight.len()],
                a.shape(),
            ));
        }
        if let Some(b) = &b {
            if b.dim() != a.dim() {
                return Err(shape_err(
                    "residual (rows, D)",
                    a.shape().to_vec(),
                    b.shape(),
                ));
            }
        }
        let gln = GpuNorm::upload(&self.dev, "ln", ln);
        let abuf = storage(&self.dev, "a", &flat(&a));
        let bbuf = storage(&self.dev, "b", &b.as_ref().map_or_else(|| vec![0.0], flat));
        let (sum, norm) = (self.output("sum", rows * d), self.output("norm", rows * d));
        let mut plan = Plan::new(self);
        let mode = match b {
            Some(_) => AddNorm::AddThenNorm,
            None => AddNorm::Norm,
        };
        plan.add_norm(
            mode,
            rows as u32,
            [&abuf, &bbuf],
            &gln,
            Some(&sum),
            Some(&norm),
        );
        let out = self
            .run(plan, &[(&sum, rows * d), (&norm, rows * d)])
            .await?;
        let sum = if b.is_some() {
            out[0].clone()
        } else {
            flat(&a)
        };
        let to2 = |v: Vec<f32>| {
            Array2::from_shape_vec((rows, d), v).map_err(|e| Error::Gpu(e.to_string()))
        };
        Ok((to2(sum)?, to2(out[1].clone())?))
    }

    /// `rotary.wgsl`: rotary position embeddings on each of `heads` heads of `x`, row `r` at
    /// position `positions[r]` (as [`crate::engine::cpu::ops::rotate`]).
    ///
    /// # Shapes
    /// * `x`: `(rows, heads·d)`, `d = rope.head_dim`; `positions`: `(rows,)` → `(rows, heads·d)`
    pub async fn rotate(
        &self,
        x: ArrayView2<'_, f32>,
        heads: usize,
        rope: &Rotary,
        positions: &[u32],
    ) -> Result<Array2<f32>> {
        let (rows, cols) = x.dim();
        let d = rope.head_dim;
        if d == 0 || !d.is_multiple_of(2) || cols != heads * d || positions.len() != rows {
            return Err(shape_err(
                "rotary input (rows, heads·d) of an even d, a position per row",
                vec![positions.len(), heads * d],
                x.shape(),
            ));
        }
        let xb = storage(&self.dev, "x", &flat(&x));
        let pb = filled(
            &self.dev,
            "positions",
            bytemuck::cast_slice(positions),
            wgpu::BufferUsages::STORAGE,
        );
        let inv_freq = storage(&self.dev, "inv_freq", &rope.inverse_frequencies());
        let out = self.output("rotated", rows * cols);
        let mut plan = Plan::new(self);
        plan.rotary(
            [rows as u32, heads as u32, d as u32],
            &pb,
            (&inv_freq, rope.attention_scaling()),
            &xb,
            Rows::dense(cols as u32),
            &out,
        );
        let got = self.run(plan, &[(&out, rows * cols)]).await?;
        Array2::from_shape_vec((rows, cols), got.concat()).map_err(|e| Error::Gpu(e.to_string()))
    }

    /// `gate.wgsl`: `act(gate) ⊙ up`, with `gate` and `up` the two halves of one `(rows, 2·F)`
    /// matrix (as the fused gate and up projections leave them).
    ///
    /// # Shapes
    /// * `gate`, `up`: `(rows, F)` → `(rows, F)`
    pub async fn gate(
        &self,
        gate: ArrayView2<'_, f32>,
        up: ArrayView2<'_, f32>,
        act: Activation,
    ) -> Result<Array2<f32>> {
        let (rows, f) = gate.dim();
        if up.dim() != (rows, f) {
            return Err(shape_err("up (rows, F) as gate", vec![rows, f], up.shape()));
        }
        let both = ndarray::concatenate(ndarray::Axis(1), &[gate, up])
            .map_err(|e| Error::Gpu(e.to_string()))?;
        let buf = storage(&self.dev, "gate and up", &flat(&both.view()));
        let out = self.output("gated", rows * f);
        let (width, stride) = (f as u32, 2 * f as u32);
        let halves = [0, width].map(|offset| Rows { offset, stride });
        let mut plan = Plan::new(self);
        plan.gate(
            [rows as u32, width],
            (&buf, halves[0]),
            (&buf, halves[1]),
            act,
            &out,
        );
        let got = self.run(plan, &[(&out, rows * f)]).await?;
        Array2::from_shape_vec((rows, f), got.concat()).map_err(|e| Error::Gpu(e.to_string()))
    }

    /// `cap·tanh(x/cap)` over every value of `x` (`soft_cap.wgsl`).
    ///
    /// # Shapes
    /// * `x`: `(rows, c)` → `(rows, c)`
    pub async fn soft_cap(&self, x: ArrayView2<'_, f32>, cap: f32) -> Result<Array2<f32>> {
        let (rows, c) = x.dim();
        let buf = storage(&self.dev, "x", &flat(&x));
        let out = self.output("soft-capped", rows * c);
        let mut plan = Plan::new(self);
        plan.soft_cap([rows as u32, c as u32], &buf, cap, &out);
        let got = self.run(plan, &[(&out, rows * c)]).await?;
        Array2::from_shape_vec((rows, c), got.concat()).map_err(|e| Error::Gpu(e.to_string()))
    }

    /// Attention as the encoder runs it: the probabilities (scores, mask and softmax in one
    /// kernel), then `P·V` (a batched matmul) with the head merge. `n_q ≠ n_k`
    /// (cross-attention), `d_k ≠ d_v` and fewer key/value heads than query heads (grouped-query
    /// attention: query head `h` reads key/value head `h / (H / H_kv)`) are allowed.
    ///
    /// # Shapes
    /// * `q`: `(B, n_q, H·d_k)`, `k`: `(B, n_k, H_kv·d_k)`, `v`: `(B, n_k, H_kv·d_v)`
    /// * `mask`: `(B, n_q, n_k)`
    pub async fn attention(
        &self,
        q: ArrayView3<'_, f32>,
        k: ArrayView3<'_, f32>,
        v: ArrayView3<'_, f32>,
        heads: Heads,
        mask: &Mask,
    ) -> Result<AttentionOutput> {
        heads.check("attention")?;
        let (b, n_q, qd) = q.dim();
        let (_, n_k, vd) = v.dim();
        let (h, kv) = (heads.query, heads.key_value);
        if qd % h != 0 || vd % kv != 0 {
            return Err(shape_err(
                "query heads dividing H·d_k, key/value heads H_kv·d_v",
                vec![h, kv],
                &[qd, vd],
            ));
        }
        let (d_k, d_v) = (qd / h, vd / kv);
        if k.dim() != (b, n_k, kv * d_k) {
            return Err(shape_err(
                "keys (B, n_k, H_kv·d_k)",
                vec![b, n_k, kv * d_k],
                k.shape(),
            ));
        }
        if v.dim().0 != b {
            return Err(shape_err(
                "values (B, n_k, H_kv·d_v)",
                vec![b, n_k, vd],
                v.shape(),
            ));
        }
        if mask.dim() != (b, n_q, n_k) {
            return Err(shape_err(
                "mask (B, n_q, n_k)",
                vec![b, n_q, n_k],
                mask.0.shape(),
            ));
        }
        let qb = storage(&self.dev, "q", &flat(&q));
        let kb = storage(&self.dev, "k", &flat(&k));
        let vb = storage(&self.dev, "v", &flat(&v));
        let mb = filled(
            &self.dev,
            "mask",
            bytemuck::cast_slice(&mask.to_bits()),
            wgpu::BufferUsages::STORAGE,
        );
        let p_floats = b * h * n_q * n_k;
        let (scores, probs) = (
            self.output("scores", p_floats),
            self.output("probs", p_floats),
        );
        let ctx_cols = h * d_v;
        let ctx = self.output("ctx", b * n_q * ctx_cols);
        let layout = AttentionLayout {
            batch: b as u32,
            heads: h as u32,
            kv_heads: kv as u32,
            n_q: n_q as u32,
            n_k: n_k as u32,
            d_k: d_k as u32,
            d_v: d_v as u32,
            q: (qd as u32, 0),
            k: ((kv * d_k) as u32, 0),
            v: (vd as u32, 0),
            scale: ScoreScale::SqrtDk.into(),
        };
        let mut plan = Plan::new(self);
        plan.attention(
            &layout,
            [&qb, &kb, &vb],
            &mb,
            Some(&scores),
            &probs,
            &ctx,
            &[],
        );
        let out = self
            .run(
                plan,
                &[
                    (&scores, p_floats),
                    (&probs, p_floats),
                    (&ctx, b * n_q * ctx_cols),
                ],
            )
            .await?;
        let e = |e: ndarray::ShapeError| Error::Gpu(e.to_string());
        Ok(AttentionOutput {
            scores: Array4::from_shape_vec((b, h, n_q, n_k), out[0].clone()).map_err(e)?,
            probs: Array4::from_shape_vec((b, h, n_q, n_k), out[1].clone()).map_err(e)?,
            context: Array3::from_shape_vec((b, n_q, ctx_cols), out[2].clone()).map_err(e)?,
        })
    }
}
