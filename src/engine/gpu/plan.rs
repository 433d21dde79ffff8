//! Recording dispatches: the compiled kernels on one device, and a [`Plan`] of dispatches (kernel,
//! parameters, buffers, grid) that a family's recorded pass (`record.rs`) and the single-kernel
//! ops (`ops.rs`) share.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::device::GpuDevice;
use super::kernels::{
    filled, padded, GpuBlocks, GpuLinear, GpuMatrix, GpuNorm, GpuTable, Kernel, Pipelines,
    QuantSpec, ATTENTION_ROWS, MATMUL_TILE, QUANT_COLS, QUANT_ROWS, QUANT_TILE, QUERIES_WG,
    SHORT_ROWS,
};
use crate::engine::ScoreFactor;
use crate::error::{Error, Result};
use crate::model::weights::NormKind;
use crate::model::Activation;

/// One dispatch ready to record: its kernel's pipeline, its buffers bound, its grid of
/// workgroups.
pub struct Dispatch {
    pub pipeline: wgpu::ComputePipeline,
    pub bind_group: wgpu::BindGroup,
    pub workgroups: [u32; 3],
}

/// One workgroup per row, as a 2-D grid within the 65535-per-dimension limit (`grid_row` in
/// `common.wgsl` undoes it).
fn row_grid(rows: u32) -> [u32; 3] {
    [rows.clamp(1, 65535), rows.div_ceil(65535).max(1), 1]
}

/// One workgroup per `MATMUL_TILE × MATMUL_TILE` block of an `(m, n)` output, for each of `z`
/// batched products.
fn matmul_grid(m: u32, n: u32, z: u32) -> [u32; 3] {
    [n.div_ceil(MATMUL_TILE), m.div_ceil(MATMUL_TILE), z]
}

/// `quant.wgsl`'s grid for an `(m, n)` product: one workgroup per `QUANT_TILE × QUANT_TILE`
/// block (`main`), or per `QUANT_COLS` columns as a 2-D grid (`main_rows`).
fn quant_grid(m: u32, n: u32, rows_kernel: bool) -> [u32; 3] {
    if rows_kernel {
        let groups = n.div_ceil(QUANT_COLS);
        return [groups.min(65535), groups.div_ceil(65535), 1];
    }
    [n.div_ceil(QUANT_TILE), m.div_ceil(QUANT_TILE), 1]
}

/// The compiled kernels on one device.
pub struct GpuKernels {
    pub dev: GpuDevice,
    /// The device's kernels ([`GpuDevice::pipelines`]).
    pipelines: Arc<Pipelines>,
    /// Whether the products and scores may run the `*_shared.wgsl` kernels the device has
    /// (false: [`GpuKernels::without_shared_rows`]).
    shared_rows: bool,
    /// Four bytes bound where a kernel's mode leaves a binding unused (no bias, no sum).
    unused: wgpu::Buffer,
    /// The same, for a read-only binding of a dispatch that binds [`GpuKernels::unused`] for
    /// writing too (a buffer may not be bound both ways in one dispatch), or that its entry
    /// point does not read (a `quant.wgsl` product's ids, a gather's x and bias).
    unused_read: wgpu::Buffer,
}

impl GpuKernels {
    /// Every kernel `dev` can run: compiled here for the first engine on the device, the
    /// device's own after that. The `*_shared.wgsl` kernels are kept only when a dense product
    /// through `matmul_shared.wgsl` equals the CPU's (they assume how subgroups lie in a
    /// workgroup).
    pub fn new(dev: GpuDevice) -> Self {
        let unused = filled(&dev, "unused", &[0; 4], wgpu::BufferUsages::STORAGE);
        let unused_read = filled(&dev, "unused_read", &[0; 4], wgpu::BufferUsages::STORAGE);
        let compiled = dev.pipelines.get().cloned();
        let mut kernels = Self {
            pipelines: compiled
                .clone()
                .unwrap_or_else(|| Arc::new(Pipelines::new(&dev))),
            dev,
            shared_rows: true,
            unused,
            unused_read,
        };
        if compiled.is_none() {
            if kernels.shares_rows() && !kernels.shared_rows_agree() {
                let only = Arc::get_mut(&mut kernels.pipelines).expect("compiled here, held here");
                for k in Kernel::ALL.into_iter().filter(|k| k.needs_subgroups()) {
                    only.drop_kernel(k);
                }
            }
            // two engines made at once compile twice; the device keeps the first's
            let _ = kernels.dev.pipelines.set(kernels.pipelines.clone());
        }
        kernels
    }

    /// Whether the products and the scores run the `*_shared.wgsl` kernels, which read each row
    /// once per eight lanes (see [`GpuDevice::shares_rows`]).
    pub fn shares_rows(&self) -> bool {
        self.shared_rows && self.pipelines.has(Kernel::MatmulShared)
    }

    /// The same kernels, the products and scores not running the `*_shared.wgsl` ones (for
    /// tests of both).
    pub fn without_shared_rows(mut self) -> Self {
        self.shared_rows = false;
        self
    }

    /// `(70, 12)·(72, 12)ᵀ + b` (over 2 × 2 workgroups with partial tiles) and its first 7 rows
    /// (`main_shared_short`), through `matmul_shared.wgsl` against the CPU's products. Natively
    /// only: wgpu offers subgroups nowhere else, so the kernel is never compiled on the web.
    #[cfg(not(target_arch = "wasm32"))]
    fn shared_rows_agree(&self) -> bool {
        use crate::model::weights::Linear;
        use ndarray::{s, Array1, Array2};
        let value = |i: usize| ((i * 37 % 23) as f32 - 11.0) / 8.0;
        let x = Array2::from_shape_fn((70, 12), |(i, j)| value(i * 12 + j));
        let w = Array2::from_shape_fn((72, 12), |(i, j)| value(i * 5 + j + 3));
        let l = Linear::new(w, Array1::from_shape_fn(72, value));
        let agrees = |x: ndarray::ArrayView2<f32>| {
            let want = crate::engine::cpu::ops::linear(x, &l);
            match pollster::block_on(self.linear(x, &l, None)) {
                Ok(got) => got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-4),
                Err(_) => false,
            }
        };
        agrees(x.view()) && agrees(x.slice(s![..7, ..]))
    }

    #[cfg(target_arch = "wasm32")]
    fn shared_rows_agree(&self) -> bool {
        false
    }

    /// A command encoder with `dispatches` recorded in one compute pass.
    pub fn encode(&self, dispatches: &[Dispatch]) -> wgpu::CommandEncoder {
        let mut enc = self.dev.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("attnscope"),
                timestamp_writes: None,
            });
            for d in dispatches {
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, &d.bind_group, &[]);
                let [x, y, z] = d.workgroups;
                pass.dispatch_workgroups(x, y, z);
            }
        }
        enc
    }

    pub fn wait(&self) -> Result<()> {
        self.dev
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(e.to_string()))?;
        self.dev.check()
    }

    /// Waits for `done`, which a callback of `Queue::on_submitted_work_done` sends (natively
    /// the device is polled until its queue is empty; on the web the callback arrives through
    /// the event loop).
    pub async fn done(&self, done: futures_channel::oneshot::Receiver<()>) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        self.wait()?;
        done.await
            .map_err(|_| Error::Gpu("the GPU's work was cancelled (device lost?)".into()))
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
            size: padded(floats * 4),
            usage,
            mapped_at_creation: false,
        })
    }

    /// `kernel`'s pipeline (for `spec`, a `quant.wgsl` kernel's), and `buffers` bound in the
    /// order of its layout (`Kernel::bindings`).
    fn bind(
        &self,
        kernel: Kernel,
        spec: Option<QuantSpec>,
        buffers: &[&wgpu::Buffer],
    ) -> (wgpu::ComputePipeline, wgpu::BindGroup) {
        let (pipeline, layout) = self.pipelines.get(&self.dev, kernel, spec);
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let bind_group = self
            .dev
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &layout,
                entries: &entries,
            });
        (pipeline, bind_group)
    }
}

/// What `add_layernorm.wgsl` computes over each row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddNorm {
    /// `norm = LN(a)`: pre-LN, before a sub-layer.
    Norm = 0,
    /// `sum = a + b; norm = LN(sum)`: post-LN's `LN(x + Sublayer(x))`; pre-LN's second norm,
    /// keeping the residual sum.
    AddThenNorm = 1,
    /// `sum = a + b`: pre-LN's last residual.
    Add = 2,
}

/// The code of `activate` in `common.wgsl`.
fn activation_code(act: Option<Activation>) -> u32 {
    match act {
        None => 0,
        Some(Activation::Gelu) => 1,
        Some(Activation::GeluTanh) => 2,
        Some(Activation::Relu) => 3,
        Some(Activation::Silu) => 4,
    }
}

/// The parameters of `scatter.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ScatterParams {
    rows: u32,
    dim: u32,
    src_stride: u32,
    src_offset: u32,
    dst_rows: u32,
    _pad: [u32; 3],
}

/// The parameters of `gather.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct GatherParams {
    rows: u32,
    dim: u32,
    table_rows: u32,
    scale: f32,
    /// The table piece's first row, and whether it is the table's last piece (1).
    first_row: u32,
    last_piece: u32,
    _pad: [u32; 2],
}

/// The parameters of `quant.wgsl`: a product `c = act(alpha · x·Wᵀ + bias)` or a gather from
/// `W`, packed ggml blocks (`Params` in the shader).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
struct QuantParams {
    m: u32,
    /// W's rows, and the stride of its group-major words.
    n: u32,
    k: u32,
    scales_at: u32,
    sub_at: u32,
    x_base: u32,
    x_row: u32,
    c_base: u32,
    c_row: u32,
    act: u32,
    has_bias: u32,
    alpha: f32,
    /// A gather's table piece: its first row, and whether it is the table's last piece (1).
    first_row: u32,
    last_piece: u32,
    _pad: [u32; 2],
}

impl QuantParams {
    /// `W`'s `(rows, cols)` and format.
    fn of(w: &GpuMatrix, b: &GpuBlocks) -> Self {
        Self {
            n: w.rows,
            k: w.cols,
            scales_at: b.scales_at,
            sub_at: b.sub_at,
            alpha: 1.0,
            ..Default::default()
        }
    }
}

/// The parameters of `add_layernorm.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AddNormParams {
    rows: u32,
    dim: u32,
    mode: u32,
    eps: f32,
    /// 0 = LayerNorm, 1 = RMSNorm (see [`norm_code`]).
    kind: u32,
    /// A norm of `heads` heads a row of `a`, each on its own, `a` in rows of `a_stride` floats
    /// from `a_offset` (QK-norm); 1, `dim` and 0 elsewhere.
    heads: u32,
    a_stride: u32,
    a_offset: u32,
}

/// The code of `kind` in `add_layernorm.wgsl`.
fn norm_code(kind: NormKind) -> u32 {
    match kind {
        NormKind::Layer => 0,
        NormKind::Rms => 1,
    }
}

/// The parameters of `rotary.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RotaryParams {
    rows: u32,
    heads: u32,
    head_dim: u32,
    x_stride: u32,
    x_offset: u32,
    /// What the cosine and sine are multiplied by ([`crate::model::rope::Rotary::attention_scaling`]).
    scale: f32,
    _pad: [u32; 2],
}

/// The parameters of `gate.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct GateParams {
    rows: u32,
    dim: u32,
    gate_stride: u32,
    gate_offset: u32,
    up_stride: u32,
    up_offset: u32,
    act: u32,
    _pad: u32,
}

/// The parameters of `soft_cap.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SoftCapParams {
    rows: u32,
    dim: u32,
    cap: f32,
    _pad: u32,
}

/// The parameters of `attention_probs.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttentionParams {
    n_q: u32,
    n_k: u32,
    heads: u32,
    d_k: u32,
    q_stride: u32,
    q_offset: u32,
    k_stride: u32,
    k_offset: u32,
    scale: f32,
    keep_scores: u32,
    /// Query heads per key/value head.
    group: u32,
    _pad: u32,
}

/// Where one matmul operand's elements are (`Operand` in `matmul.wgsl`), in floats: the start of
/// batch item `b`, head `h` is `base + b·item + h·head`, and rows are `row` apart.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
struct Operand {
    base: u32,
    item: u32,
    head: u32,
    row: u32,
}

impl Operand {
    /// A plain row-major matrix with `cols` columns.
    fn matrix(cols: u32) -> Self {
        Self {
            row: cols,
            ..Default::default()
        }
    }
}

/// The parameters of `matmul.wgsl`: `C = act(alpha · A·Bᵀ + bias)` over `items × heads`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatmulParams {
    m: u32,
    n: u32,
    k: u32,
    heads: u32,
    a: Operand,
    b: Operand,
    c: Operand,
    /// The stride of B along k.
    b_col: u32,
    act: u32,
    alpha: f32,
    has_bias: u32,
    /// B's head of product head `h` is `(b_first_head + h) / b_group`: the key/value head of
    /// query head `b_first_head + h` (0 and 1 but for the context of grouped-query attention).
    b_first_head: u32,
    b_group: u32,
    _pad: [u32; 2],
}

/// Where Q, K and V sit in their row-major buffers: `(row stride, column offset)` in floats.
/// Head `h` of row `i` of item `b` of Q starts at `(b·n_q + i)·stride + offset + h·d_k`; query
/// head `h` reads key/value head `h / (heads / kv_heads)` of K and V.
pub struct AttentionLayout {
    pub batch: u32,
    /// Query heads, and key/value heads (as many, or fewer: grouped-query attention).
    pub heads: u32,
    pub kv_heads: u32,
    pub n_q: u32,
    pub n_k: u32,
    pub d_k: u32,
    pub d_v: u32,
    pub q: (u32, u32),
    pub k: (u32, u32),
    pub v: (u32, u32),
    /// What the scores are multiplied by.
    pub scale: ScoreFactor,
}

/// A dispatch being recorded (it holds its buffers: a handle each).
struct Pending {
    kernel: Kernel,
    spec: Option<QuantSpec>,
    params: Vec<u8>,
    buffers: Vec<wgpu::Buffer>,
    workgroups: [u32; 3],
}

/// Where a matrix operand's rows are in its buffer, in floats: row `i` starts at
/// `offset + i·stride` (a view of some of a wider matrix's columns has `stride` > its width).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    pub offset: u32,
    pub stride: u32,
}

impl Rows {
    /// A plain row-major matrix of `cols` columns.
    pub fn dense(cols: u32) -> Self {
        Self {
            offset: 0,
            stride: cols,
        }
    }
}

/// Dispatches being recorded, in order.
pub struct Plan<'a> {
    kernels: &'a GpuKernels,
    pending: Vec<Pending>,
}

impl<'a> Plan<'a> {
    pub fn new(kernels: &'a GpuKernels) -> Self {
        Self {
            kernels,
            pending: vec![],
        }
    }

    /// The dispatches recorded so far.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    fn push(
        &mut self,
        kernel: Kernel,
        params: &impl Pod,
        buffers: Vec<&wgpu::Buffer>,
        workgroups: [u32; 3],
    ) {
        self.push_spec(kernel, None, params, buffers, workgroups);
    }

    /// [`Plan::push`], of a `quant.wgsl` kernel for `spec`.
    fn push_spec(
        &mut self,
        kernel: Kernel,
        spec: Option<QuantSpec>,
        params: &impl Pod,
        buffers: Vec<&wgpu::Buffer>,
        workgroups: [u32; 3],
    ) {
        self.pending.push(Pending {
            kernel,
            spec,
            params: bytemuck::bytes_of(params).to_vec(),
            buffers: buffers.into_iter().cloned().collect(),
            workgroups,
        });
    }

    /// Row `ids[r]` of `table` times `scale` for each of `rows` rows: `gather.wgsl` from f32
    /// rows, `quant.wgsl`'s `main_gather` from packed blocks; one dispatch per piece of the
    /// table, each writing the rows whose ids fall in it.
    ///
    /// # Shapes
    /// * `ids`: `(rows,)`, `table`: `(table_rows, dim)` → `out`: `(rows, dim)`
    pub fn gather(
        &mut self,
        rows: u32,
        ids: &wgpu::Buffer,
        table: &GpuTable,
        scale: f32,
        out: &wgpu::Buffer,
    ) {
        let last = table.pieces.len().saturating_sub(1);
        for (i, piece) in table.pieces.iter().enumerate() {
            let (first_row, last_piece) = (piece.first_row, u32::from(i == last));
            let Some(blocks) = &piece.blocks else {
                let params = GatherParams {
                    rows,
                    dim: piece.cols,
                    table_rows: piece.rows,
                    scale,
                    first_row,
                    last_piece,
                    _pad: [0; 2],
                };
                self.push(
                    Kernel::Gather,
                    &params,
                    vec![ids, &piece.buffer, out],
                    row_grid(rows),
                );
                continue;
            };
            let params = QuantParams {
                m: rows,
                c_row: piece.cols,
                alpha: scale,
                first_row,
                last_piece,
                ..QuantParams::of(piece, blocks)
            };
            let none = self.kernels.unused_read.clone();
            let spec = QuantSpec {
                format: blocks.format,
                one_row: false,
            };
            self.push_spec(
                Kernel::GatherQuant,
                Some(spec),
                &params,
                vec![ids, &none, &none, &piece.buffer, &none, out],
                row_grid(rows),
            );
        }
    }

    /// Row `r` of `src` to row `rows_at[r]` of `dst`, for each of `rows` rows (a decoding's
    /// cache write).
    ///
    /// # Shapes
    /// * `rows_at`: `(rows,)`; `src`: `(rows, dim)` at `at`; `dst`: `(dst_rows, dim)`
    pub fn scatter(
        &mut self,
        [rows, dim]: [u32; 2],
        rows_at: &wgpu::Buffer,
        src: &wgpu::Buffer,
        at: Rows,
        dst: &wgpu::Buffer,
        dst_rows: u32,
    ) {
        let params = ScatterParams {
            rows,
            dim,
            src_stride: at.stride,
            src_offset: at.offset,
            dst_rows,
            _pad: [0; 3],
        };
        self.push(
            Kernel::Scatter,
            &params,
            vec![rows_at, src, dst],
            row_grid(rows),
        );
    }

    /// `out = act(x·Wᵀ + bias)`, the activation fused into the matmul.
    ///
    /// # Shapes
    /// * `x`: `(M, K)`, `w`: `(N, K)` → `out`: `(M, N)`
    pub fn linear(
        &mut self,
        m: u32,
        x: &wgpu::Buffer,
        w: &GpuLinear,
        act: Option<Activation>,
        out: &wgpu::Buffer,
    ) {
        self.linear_rows(m, x, Rows::dense(w.k), w, act, out);
    }

    /// [`Plan::linear`] of a matrix whose rows are laid out as `rows` says (some columns of a
    /// wider one). Each of the layer's parts is a product into its own columns of `out`:
    /// `matmul.wgsl` for f32 rows, `quant.wgsl` for packed blocks.
    ///
    /// # Shapes
    /// * `x`: `(M, K)` → `out`: `(M, N)`, dense
    pub fn linear_rows(
        &mut self,
        m: u32,
        x: &wgpu::Buffer,
        rows: Rows,
        w: &GpuLinear,
        act: Option<Activation>,
        out: &wgpu::Buffer,
    ) {
        let mut first = 0;
        for part in &w.parts {
            let weight = &part.weight;
            match &weight.blocks {
                None => {
                    let params = MatmulParams {
                        m,
                        n: weight.rows,
                        k: w.k,
                        heads: 1,
                        a: Operand {
                            base: rows.offset,
                            row: rows.stride,
                            ..Default::default()
                        },
                        b: Operand::matrix(w.k),
                        c: Operand {
                            base: first,
                            row: w.n,
                            ..Default::default()
                        },
                        b_col: 1,
                        act: activation_code(act),
                        alpha: 1.0,
                        has_bias: 1,
                        b_first_head: 0,
                        b_group: 1,
                        _pad: [0; 2],
                    };
                    self.matmul(params, [x, &weight.buffer, &part.bias, out], false, 1);
                }
                Some(blocks) => {
                    let params = QuantParams {
                        m,
                        x_base: rows.offset,
                        x_row: rows.stride,
                        c_base: first,
                        c_row: w.n,
                        act: activation_code(act),
                        has_bias: 1,
                        ..QuantParams::of(weight, blocks)
                    };
                    self.matmul_quant(params, blocks, [x, &weight.buffer, &part.bias, out]);
                }
            }
            first += weight.rows;
        }
    }

    /// `quant.wgsl`'s product over `[x, w, bias, c]`: `main_rows` for at most [`QUANT_ROWS`]
    /// rows of x (specialised for one), `main` for more, each reading x as vec4s where its
    /// layout allows.
    fn matmul_quant(
        &mut self,
        p: QuantParams,
        blocks: &GpuBlocks,
        [x, w, bias, c]: [&wgpu::Buffer; 4],
    ) {
        let vec4 = [p.x_base, p.x_row, p.k].iter().all(|v| v.is_multiple_of(4))
            && x.size().is_multiple_of(16);
        let rows_kernel = p.m <= QUANT_ROWS;
        let kernel = match (rows_kernel, vec4) {
            (true, true) => Kernel::MatmulQuantRows,
            (true, false) => Kernel::MatmulQuantRowsScalar,
            (false, true) => Kernel::MatmulQuant,
            (false, false) => Kernel::MatmulQuantScalar,
        };
        let none = self.kernels.unused_read.clone();
        let grid = quant_grid(p.m, p.n, rows_kernel);
        let spec = QuantSpec {
            format: blocks.format,
            one_row: p.m == 1,
        };
        self.push_spec(kernel, Some(spec), &p, vec![&none, x, x, w, bias, c], grid);
    }

    /// `matmul.wgsl` over `[a, b, bias, c]` for `z` = items × heads products, in its vec4 form
    /// when the layout allows it. `b_along_n`: B's elements are contiguous along n (V), not
    /// along k (W, K).
    fn matmul(
        &mut self,
        p: MatmulParams,
        [a, b, bias, c]: [&wgpu::Buffer; 4],
        b_along_n: bool,
        z: u32,
    ) {
        let four = |v: &u32| v.is_multiple_of(4);
        let whole_vec4s = |buf: &wgpu::Buffer| buf.size().is_multiple_of(16);
        let a_vec4 = [p.a.base, p.a.item, p.a.head, p.a.row, p.k]
            .iter()
            .all(four);
        let b_vec4 = if b_along_n {
            p.b.row == 1
                && p.n >= 4
                && [p.b.base, p.b.item, p.b.head, p.b_col, p.n]
                    .iter()
                    .all(four)
        } else {
            p.b_col == 1
                && [p.b.base, p.b.item, p.b.head, p.b.row, p.k]
                    .iter()
                    .all(four)
        };
        let (shared, short) = (self.kernels.shares_rows(), p.m <= SHORT_ROWS);
        let kernel = match (
            a_vec4 && b_vec4 && whole_vec4s(a) && whole_vec4s(b),
            b_along_n,
        ) {
            (true, false) if shared && short => Kernel::MatmulSharedShort,
            (true, false) if shared => Kernel::MatmulShared,
            (true, false) => Kernel::Matmul,
            (true, true) if shared && short => Kernel::MatmulSharedShortBAlongN,
            (true, true) if shared => Kernel::MatmulSharedBAlongN,
            (true, true) => Kernel::MatmulBAlongN,
            (false, _) => Kernel::MatmulScalar,
        };
        let grid = matmul_grid(p.m, p.n, z);
        self.push(kernel, &p, vec![a, a, b, b, bias, c], grid);
    }

    /// Rotary position embeddings on each of `heads` heads of `head_dim` columns of `x`, row `r`
    /// turned by the angles `positions[r]·inv_freq[i]`, the cosines and sines multiplied by
    /// `scale`.
    ///
    /// # Shapes
    /// * `positions`: `(rows,)`, `inv_freq`: `(head_dim/2,)`, `x`: `(rows, heads·head_dim)` at
    ///   `at` → `out`: `(rows, heads·head_dim)`, dense
    #[allow(clippy::too_many_arguments)]
    pub fn rotary(
        &mut self,
        [rows, heads, head_dim]: [u32; 3],
        positions: &wgpu::Buffer,
        (inv_freq, scale): (&wgpu::Buffer, f32),
        x: &wgpu::Buffer,
        at: Rows,
        out: &wgpu::Buffer,
    ) {
        let params = RotaryParams {
            rows,
            heads,
            head_dim,
            x_stride: at.stride,
            x_offset: at.offset,
            scale,
            _pad: [0; 2],
        };
        self.push(
            Kernel::Rotary,
            &params,
            vec![positions, inv_freq, x, out],
            row_grid(rows),
        );
    }

    /// `out = act(gate) ⊙ up` over `rows` rows of `dim`.
    ///
    /// # Shapes
    /// * `gate`, `up`: `(rows, dim)` at their [`Rows`] → `out`: `(rows, dim)`, dense
    pub fn gate(
        &mut self,
        [rows, dim]: [u32; 2],
        (gate, gate_at): (&wgpu::Buffer, Rows),
        (up, up_at): (&wgpu::Buffer, Rows),
        act: Activation,
        out: &wgpu::Buffer,
    ) {
        let params = GateParams {
            rows,
            dim,
            gate_stride: gate_at.stride,
            gate_offset: gate_at.offset,
            up_stride: up_at.stride,
            up_offset: up_at.offset,
            act: activation_code(Some(act)),
            _pad: 0,
        };
        self.push(Kernel::Gate, &params, vec![gate, up, out], row_grid(rows));
    }

    /// `out = cap·tanh(x/cap)` over `rows` dense rows of `dim`.
    ///
    /// # Shapes
    /// * `x`: `(rows, dim)` → `out`: `(rows, dim)`
    pub fn soft_cap(
        &mut self,
        [rows, dim]: [u32; 2],
        x: &wgpu::Buffer,
        cap: f32,
        out: &wgpu::Buffer,
    ) {
        let params = SoftCapParams {
            rows,
            dim,
            cap,
            _pad: 0,
        };
        self.push(Kernel::SoftCap, &params, vec![x, out], row_grid(rows));
    }

    /// Residual add and/or a norm (LayerNorm or RMSNorm, as `ln.kind` says) over `rows` rows
    /// (see [`AddNorm`]); `b` is ignored by [`AddNorm::Norm`], `sum` written by all but
    /// [`AddNorm::Norm`], `norm` by all but [`AddNorm::Add`] (pass [`None`] for what is not
    /// written).
    ///
    /// # Shapes
    /// * `a`, `b`, `sum`, `norm`: `(rows, D)`
    pub fn add_norm(
        &mut self,
        mode: AddNorm,
        rows: u32,
        [a, b]: [&wgpu::Buffer; 2],
        ln: &GpuNorm,
        sum: Option<&wgpu::Buffer>,
        norm: Option<&wgpu::Buffer>,
    ) {
        let unused = self.kernels.unused.clone();
        let params = AddNormParams {
            rows,
            dim: ln.dim,
            mode: mode as u32,
            eps: ln.eps,
            kind: norm_code(ln.kind),
            heads: 1,
            a_stride: ln.dim,
            a_offset: 0,
        };
        let buffers = vec![
            a,
            b,
            &ln.gamma,
            &ln.beta,
            sum.unwrap_or(&unused),
            norm.unwrap_or(&unused),
        ];
        self.push(Kernel::AddLayerNorm, &params, buffers, row_grid(rows));
    }

    /// QK-norm: each of `heads` heads of `rows` rows of `x` at `at` through `ln` on its own.
    ///
    /// # Shapes
    /// * `x`: `(rows, heads·d)` at `at`, `d = ln.dim` → `out`: `(rows, heads·d)`, dense
    pub fn norm_heads(
        &mut self,
        [rows, heads]: [u32; 2],
        x: &wgpu::Buffer,
        at: Rows,
        ln: &GpuNorm,
        out: &wgpu::Buffer,
    ) {
        let unused = self.kernels.unused.clone();
        let params = AddNormParams {
            rows: rows * heads,
            dim: ln.dim,
            mode: AddNorm::Norm as u32,
            eps: ln.eps,
            kind: norm_code(ln.kind),
            heads,
            a_stride: at.stride,
            a_offset: at.offset,
        };
        let buffers = vec![x, x, &ln.gamma, &ln.beta, &unused, out];
        self.push(
            Kernel::AddLayerNorm,
            &params,
            buffers,
            row_grid(rows * heads),
        );
    }

    /// `sum = a + b` over `rows` rows of `dim` ([`AddNorm::Add`], with no norm).
    ///
    /// # Shapes
    /// * `a`, `b`, `sum`: `(rows, dim)`
    pub fn add(&mut self, rows: u32, dim: u32, [a, b]: [&wgpu::Buffer; 2], sum: &wgpu::Buffer) {
        let (unused, read) = (
            self.kernels.unused.clone(),
            self.kernels.unused_read.clone(),
        );
        let params = AddNormParams {
            rows,
            dim,
            mode: AddNorm::Add as u32,
            eps: 1.0,
            kind: norm_code(NormKind::Layer),
            heads: 1,
            a_stride: dim,
            a_offset: 0,
        };
        let buffers = vec![a, b, &read, &read, sum, &unused];
        self.push(Kernel::AddLayerNorm, &params, buffers, row_grid(rows));
    }

    /// Scaled dot-product attention in two dispatches: the probabilities (scores `QKᵀ/√d_k`,
    /// mask and softmax fused; the scores kept before the mask when `scores` is given), then
    /// `P·V` (a batched matmul) written straight into `ctx` in the merged-heads layout, zero
    /// for the heads knocked out in `off` (one more dispatch per run of such heads). Query head
    /// `h` reads key/value head `h / (heads / kv_heads)` of K and V.
    ///
    /// # Shapes
    /// * `q`, `k`, `v`: see [`AttentionLayout`]; `mask`: `(B, n_q, n_k)`; `off`: `(H,)` or empty
    /// * `scores`, `probs`: `(B, H, n_q, n_k)`; `ctx`: `(B·n_q, H·d_v)`
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &mut self,
        l: &AttentionLayout,
        [q, k, v]: [&wgpu::Buffer; 3],
        mask: &wgpu::Buffer,
        scores: Option<&wgpu::Buffer>,
        probs: &wgpu::Buffer,
        ctx: &wgpu::Buffer,
        off: &[bool],
    ) {
        let unused = &self.kernels.unused.clone();
        // P = softmax(masked_fill(Q·Kᵀ/√d_k, mask == 0, -inf)), or Q·Kᵀ unscaled
        let params = AttentionParams {
            n_q: l.n_q,
            n_k: l.n_k,
            heads: l.heads,
            d_k: l.d_k,
            q_stride: l.q.0,
            q_offset: l.q.1,
            k_stride: l.k.0,
            k_offset: l.k.1,
            scale: l.scale.of(l.d_k as usize),
            keep_scores: scores.is_some() as u32,
            group: l.heads / l.kv_heads.max(1),
            _pad: 0,
        };
        let vec4 = [l.d_k, l.q.0, l.q.1, l.k.0, l.k.1]
            .iter()
            .all(|v| v.is_multiple_of(4))
            && [q, k].iter().all(|b| b.size().is_multiple_of(16));
        let kernel = if vec4 && self.kernels.shares_rows() {
            Kernel::AttentionProbsShared
        } else if vec4 {
            Kernel::AttentionProbs
        } else {
            Kernel::AttentionProbsScalar
        };
        let buffers = vec![q, q, k, k, mask, scores.unwrap_or(unused), probs];
        let rows_per_group = QUERIES_WG * ATTENTION_ROWS;
        let grid = [l.n_q.div_ceil(rows_per_group), l.batch * l.heads, 1];
        self.push(kernel, &params, buffers, grid);
        // (B, H, n_q, n_k), as the probabilities are laid out
        let per_head = l.n_q * l.n_k;
        // context = P·V, V read as (d_v, n_k): its rows are columns of V. One matmul per run of
        // heads that are all kept or all knocked out; a knocked-out run is written as zeros
        // (alpha 0), so the concatenation holds no trace of it.
        let mut h0 = 0;
        while h0 < l.heads {
            let is_off = |h: u32| off.get(h as usize).copied().unwrap_or(false);
            let mut h1 = h0 + 1;
            while h1 < l.heads && is_off(h1) == is_off(h0) {
                h1 += 1;
            }
            let params = MatmulParams {
                m: l.n_q,
                n: l.d_v,
                k: l.n_k,
                heads: h1 - h0,
                a: Operand {
                    base: h0 * per_head,
                    item: l.heads * per_head,
                    head: per_head,
                    row: l.n_k,
                },
                // query head h0 + h reads V's key/value head (h0 + h) / group
                b: Operand {
                    base: l.v.1,
                    item: l.n_k * l.v.0,
                    head: l.d_v,
                    row: 1,
                },
                c: Operand {
                    base: h0 * l.d_v,
                    item: l.n_q * l.heads * l.d_v,
                    head: l.d_v,
                    row: l.heads * l.d_v,
                },
                b_col: l.v.0,
                act: 0,
                alpha: if is_off(h0) { 0.0 } else { 1.0 },
                has_bias: 0,
                b_first_head: h0,
                b_group: l.heads / l.kv_heads.max(1),
                _pad: [0; 2],
            };
            self.matmul(params, [probs, v, unused, ctx], true, l.batch * (h1 - h0));
            h0 = h1;
        }
    }

    /// Bind groups for every recorded dispatch, and the parameter buffers they bind.
    pub fn finish(self) -> (Vec<Dispatch>, Vec<wgpu::Buffer>) {
        let mut params = Vec::with_capacity(self.pending.len());
        let dispatches = self
            .pending
            .into_iter()
            .map(|p| {
                let uniform = filled(
                    &self.kernels.dev,
                    "params",
                    &p.params,
                    wgpu::BufferUsages::UNIFORM,
                );
                let mut buffers = vec![&uniform];
                buffers.extend(p.buffers.iter());
                let (pipeline, bind_group) = self.kernels.bind(p.kernel, p.spec, &buffers);
                params.push(uniform);
                Dispatch {
                    pipeline,
                    bind_group,
                    workgroups: p.workgroups,
                }
            })
            .collect();
        (dispatches, params)
    }
}
