//! Single kernels run on their own with uploaded inputs: what the per-kernel tests compare
//! with the CPU ops (`engine::cpu::ops`, `engine::cpu::attention`).

use ndarray::{Array2, Array3, Array4, ArrayView2, ArrayView3};

use super::kernels::{storage, GpuLayerNorm, GpuLinear};
use super::plan::{AddNorm, AttentionLayout, GpuKernels, Plan};
use crate::engine::ScoreScale;
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::weights::{LayerNorm, Linear};
use crate::model::Activation;

/// Every step of multi-head scaled dot-product attention, read back from the GPU.
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

    /// `matmul.wgsl` as a dense layer: `act(x·Wᵀ + b)`.
    ///
    /// # Shapes
    /// * `x`: `(M, K)` → `(M, N)`
    pub async fn linear(
        &self,
        x: ArrayView2<'_, f32>,
        l: &Linear,
        act: Option<Activation>,
    ) -> Result<Array2<f32>> {
        let (m, k) = x.dim();
        if l.weight.ncols() != k {
            return Err(shape_err(
                "linear input (M, K)",
                vec![m, l.weight.ncols()],
                x.shape(),
            ));
        }
        let w = GpuLinear::upload(&self.dev, "linear", l);
        let a = storage(&self.dev, "x", &flat(&x));
        let n = w.n as usize;
        let c = self.output("y", m * n);
        let mut plan = Plan::new(self);
        plan.linear(m as u32, &a, &w, act, &c);
        let out = self.run(plan, &[(&c, m * n)]).await?;
        Array2::from_shape_vec((m, n), out.concat()).map_err(|e| Error::Gpu(e.to_string()))
    }

    /// `add_layernorm.wgsl`: `LN(a + b)` (and the sum), or `LN(a)` when `b` is `None`.
    ///
    /// # Shapes
    /// * `a`, `b`: `(rows, D)` → `(a + b, LN(a + b))`, each `(rows, D)`
    pub async fn add_layernorm(
        &self,
        a: ArrayView2<'_, f32>,
        b: Option<ArrayView2<'_, f32>>,
        ln: &LayerNorm,
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
        let gln = GpuLayerNorm::upload(&self.dev, "ln", ln);
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

    /// Attention as the encoder runs it: the probabilities (scores, mask and softmax in one
    /// kernel), then `P·V` (a batched matmul) with the head merge.
    /// `n_q ≠ n_k` (cross-attention) and `d_k ≠ d_v` are allowed.
    ///
    /// # Shapes
    /// * `q`: `(B, n_q, H·d_k)`, `k`: `(B, n_k, H·d_k)`, `v`: `(B, n_k, H·d_v)`
    /// * `mask`: `(B, n_q, n_k)`
    pub async fn attention(
        &self,
        q: ArrayView3<'_, f32>,
        k: ArrayView3<'_, f32>,
        v: ArrayView3<'_, f32>,
        heads: usize,
        mask: &Mask,
    ) -> Result<AttentionOutput> {
        let (b, n_q, qd) = q.dim();
        let (_, n_k, vd) = v.dim();
        if heads == 0 || qd % heads != 0 || vd % heads != 0 {
            return Err(shape_err(
                "heads dividing H·d_k and H·d_v",
                vec![heads],
                &[qd, vd],
            ));
        }
        if k.dim() != (b, n_k, qd) {
            return Err(shape_err(
                "keys (B, n_k, H·d_k)",
                vec![b, n_k, qd],
                k.shape(),
            ));
        }
        if v.dim().0 != b {
            return Err(shape_err(
                "values (B, n_k, H·d_v)",
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
        let (d_k, d_v) = (qd / heads, vd / heads);
        let qb = storage(&self.dev, "q", &flat(&q));
        let kb = storage(&self.dev, "k", &flat(&k));
        let vb = storage(&self.dev, "v", &flat(&v));
        let mb = super::kernels::filled(
            &self.dev,
            "mask",
            bytemuck::cast_slice(&mask.to_bits()),
            wgpu::BufferUsages::STORAGE,
        );
        let p_floats = b * heads * n_q * n_k;
        let (scores, probs) = (
            self.output("scores", p_floats),
            self.output("probs", p_floats),
        );
        let ctx = self.output("ctx", b * n_q * vd);
        let layout = AttentionLayout {
            batch: b as u32,
            heads: heads as u32,
            n_q: n_q as u32,
            n_k: n_k as u32,
            d_k: d_k as u32,
            d_v: d_v as u32,
            q: (qd as u32, 0),
            k: (qd as u32, 0),
            v: (vd as u32, 0),
            scale: ScoreScale::SqrtDk,
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
                    (&ctx, b * n_q * vd),
                ],
            )
            .await?;
        let e = |e: ndarray::ShapeError| Error::Gpu(e.to_string());
        Ok(AttentionOutput {
            scores: Array4::from_shape_vec((b, heads, n_q, n_k), out[0].clone()).map_err(e)?,
            probs: Array4::from_shape_vec((b, heads, n_q, n_k), out[1].clone()).map_err(e)?,
            context: Array3::from_shape_vec((b, n_q, vd), out[2].clone()).map_err(e)?,
        })
    }
}
