//! Recording and running dispatches: the kernels on one device, and a plan of dispatches
//! (kernel, parameters, buffers, grid) that the encoder and the single-kernel ops share.

use super::device::GpuDevice;
use super::kernels::{filled, GpuLayerNorm, GpuLinear, Pipelines, TILE, WG};
use crate::error::{Error, Result};
use crate::model::Activation;

#[derive(Clone, Copy)]
pub enum Kernel {
    Embed,
    Matmul,
    Gelu,
    AddNorm,
    Scores,
    Softmax,
    Context,
}

pub struct Step {
    pub kernel: Kernel,
    pub bind: wgpu::BindGroup,
    pub groups: (u32, u32, u32),
}

/// `(rows)` as a 2-D grid within the 65535-per-dimension dispatch limit.
pub fn grid(rows: u32) -> (u32, u32, u32) {
    (rows.clamp(1, 65535), rows.div_ceil(65535).max(1), 1)
}

/// The compiled pipelines on one device.
pub struct GpuKernels {
    pub dev: GpuDevice,
    pipelines: Pipelines,
}

impl GpuKernels {
    /// Compiles every kernel for `dev`.
    pub fn new(dev: GpuDevice) -> Self {
        let pipelines = Pipelines::new(&dev);
        Self { dev, pipelines }
    }

    /// A command encoder with `steps` recorded in one compute pass.
    pub fn encode(&self, steps: &[Step]) -> wgpu::CommandEncoder {
        let mut enc = self.dev.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("attnscope"),
                timestamp_writes: None,
            });
            for s in steps {
                pass.set_pipeline(self.pipeline(s.kernel));
                pass.set_bind_group(0, &s.bind, &[]);
                pass.dispatch_workgroups(s.groups.0, s.groups.1, s.groups.2);
            }
        }
        enc
    }

    pub fn pipeline(&self, k: Kernel) -> &wgpu::ComputePipeline {
        let p = &self.pipelines;
        match k {
            Kernel::Embed => &p.embed_layernorm,
            Kernel::Matmul => &p.matmul_bias,
            Kernel::Gelu => &p.gelu,
            Kernel::AddNorm => &p.add_layernorm,
            Kernel::Scores => &p.attention_scores,
            Kernel::Softmax => &p.attention_softmax,
            Kernel::Context => &p.attention_context,
        }
    }

    pub fn wait(&self) -> Result<()> {
        self.dev
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(e.to_string()))?;
        self.dev.check()
    }

    /// Maps `len` bytes of a staging buffer and copies them out. On the web the map callback
    /// arrives through the event loop: we await it through a channel (`poll` is a no-op there).
    pub async fn read(&self, staging: &wgpu::Buffer, len: u64) -> Result<Vec<f32>> {
        let slice = staging.slice(..len);
        let (tx, rx) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        self.wait()?;
        rx.await
            .map_err(|_| Error::Gpu("read-back was cancelled (device lost?)".into()))?
            .map_err(|e| Error::Gpu(format!("read-back failed: {e}")))?;
        let out = {
            let view = slice
                .get_mapped_range()
                .map_err(|e| Error::Gpu(format!("read-back failed: {e}")))?;
            bytemuck::cast_slice::<u8, f32>(&view).to_vec()
        };
        staging.unmap();
        self.dev.check()?;
        Ok(out)
    }

    pub fn buffer(&self, label: &str, floats: usize, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        self.dev.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: (floats.max(1) * 4) as u64,
            usage,
            mapped_at_creation: false,
        })
    }

    pub fn uniform(&self, words: &[u32]) -> wgpu::Buffer {
        filled(
            &self.dev,
            "params",
            bytemuck::cast_slice(words),
            wgpu::BufferUsages::UNIFORM,
        )
    }

    pub fn step(&self, kernel: Kernel, buffers: &[&wgpu::Buffer], groups: (u32, u32, u32)) -> Step {
        let layout = self.pipeline(kernel).get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let bind = self
            .dev
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &layout,
                entries: &entries,
            });
        Step {
            kernel,
            bind,
            groups,
        }
    }
}

/// Where Q, K and V sit in their row-major buffers: `(row stride, column offset)` in floats.
/// Head `h` of row `i` of item `b` of Q starts at `(b·n_q + i)·stride + offset + h·d_k`.
pub struct AttentionLayout {
    pub batch: u32,
    pub heads: u32,
    pub n_q: u32,
    pub n_k: u32,
    pub d_k: u32,
    pub d_v: u32,
    pub q: (u32, u32),
    pub k: (u32, u32),
    pub v: (u32, u32),
}

/// A recorded dispatch: kernel, index of its parameter buffer, its buffers, its grid.
type Op<'a> = (Kernel, usize, Vec<&'a wgpu::Buffer>, (u32, u32, u32));

/// Dispatches being recorded: kernel, parameters, buffers, grid.
pub struct Plan<'a> {
    kernels: &'a GpuKernels,
    params: Vec<wgpu::Buffer>,
    ops: Vec<Op<'a>>,
}

impl<'a> Plan<'a> {
    pub fn new(kernels: &'a GpuKernels) -> Self {
        Self {
            kernels,
            params: vec![],
            ops: vec![],
        }
    }

    pub fn push(
        &mut self,
        kernel: Kernel,
        params: &[u32],
        buffers: Vec<&'a wgpu::Buffer>,
        groups: (u32, u32, u32),
    ) {
        self.params.push(self.kernels.uniform(params));
        self.ops
            .push((kernel, self.params.len() - 1, buffers, groups));
    }

    /// `out = a · Wᵀ + bias`, `a`: (M, K), `out`: (M, N)
    pub fn matmul(&mut self, m: u32, a: &'a wgpu::Buffer, w: &'a GpuLinear, out: &'a wgpu::Buffer) {
        let groups = (w.n.div_ceil(TILE), m.div_ceil(TILE), 1);
        self.push(
            Kernel::Matmul,
            &[m, w.n, w.k, 0],
            vec![a, &w.weight, &w.bias, out],
            groups,
        );
    }

    /// The feed-forward activation in place over `n` floats of `x` (`gelu.wgsl`).
    pub fn activation(&mut self, n: u32, act: Activation, x: &'a wgpu::Buffer) {
        let code = match act {
            Activation::Gelu => 0,
            Activation::GeluTanh => 1,
            Activation::Relu => 2,
        };
        self.push(
            Kernel::Gelu,
            &[n, code, 0, 0],
            vec![x],
            grid(n.div_ceil(WG)),
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub fn add_norm(
        &mut self,
        rows: u32,
        d: u32,
        mode: u32,
        a: &'a wgpu::Buffer,
        b: &'a wgpu::Buffer,
        ln: &'a GpuLayerNorm,
        sum: &'a wgpu::Buffer,
        norm: &'a wgpu::Buffer,
    ) {
        self.push(
            Kernel::AddNorm,
            &[rows, d, mode, ln.eps.to_bits()],
            vec![a, b, &ln.gamma, &ln.beta, sum, norm],
            grid(rows),
        );
    }

    /// Scaled dot-product attention in three dispatches: scores `QKᵀ/√d_k` (kept, before the
    /// mask), mask + softmax into `probs`, and `P·V` into `ctx` in the merged-heads layout.
    ///
    /// # Shapes
    /// * `mask`: `(B, n_q, n_k)`; `scores`, `probs`: `(B, H, n_q, n_k)`; `ctx`: `(B·n_q, H·d_v)`
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &mut self,
        l: &AttentionLayout,
        [q, k, v]: [&'a wgpu::Buffer; 3],
        mask: &'a wgpu::Buffer,
        scores: &'a wgpu::Buffer,
        probs: &'a wgpu::Buffer,
        ctx: &'a wgpu::Buffer,
    ) {
        let bh = l.batch * l.heads;
        let scale = (1.0 / (l.d_k as f32).sqrt()).to_bits();
        self.push(
            Kernel::Scores,
            &[
                l.n_q, l.n_k, l.heads, l.d_k, l.q.0, l.q.1, l.k.0, l.k.1, scale, 0, 0, 0,
            ],
            vec![q, k, scores],
            (l.n_k.div_ceil(16), l.n_q.div_ceil(16), bh),
        );
        let rows = bh * l.n_q;
        self.push(
            Kernel::Softmax,
            &[l.n_q, l.n_k, l.heads, rows],
            vec![scores, mask, probs],
            grid(rows),
        );
        self.push(
            Kernel::Context,
            &[l.n_q, l.n_k, l.heads, l.d_v, l.v.0, l.v.1, 0, 0],
            vec![probs, v, ctx],
            ((l.n_q * l.d_v).div_ceil(64), bh, 1),
        );
    }

    /// Bind groups for every recorded dispatch; the parameter buffers are returned to be kept.
    pub fn finish(self) -> (Vec<Step>, Vec<wgpu::Buffer>) {
        let steps = self
            .ops
            .into_iter()
            .map(|(kernel, p, buffers, groups)| {
                let mut all = vec![&self.params[p]];
                all.extend(buffers);
                self.kernels.step(kernel, &all, groups)
            })
            .collect();
        (steps, self.params)
    }
}
