//! The WGSL kernels and the model's weights on the GPU.
//!
//! Each kernel is `shaders/common.wgsl` (workgroup reductions, `erf`, the activations) followed by
//! its own `shaders/<kernel>.wgsl` (a `*_shared.wgsl` kernel after the file it builds on),
//! composed at build time. Its buffers are declared once, here, as an explicit bind-group layout
//! (binding 0 is always its parameters); its workgroup size is set from the constants below
//! through the shader's `override`s, and the dispatches in `plan.rs` read the same constants.
//! Pipelines are compiled once per device.

use std::collections::HashMap;

use super::device::GpuDevice;
use crate::model::config::Rotary;
use crate::model::weights::{Linear, Norm, NormKind, ParamId, Table};

/// Threads per workgroup of the row kernels (gather, scatter, the norms, rotary, gate): one
/// workgroup per row, reducing across its threads (the `WG` override of `common.wgsl`).
pub const ROW_WG: u32 = 64;
/// Each matmul invocation computes a `MATMUL_BLOCK × MATMUL_BLOCK` block of its output in
/// registers (fixed by `matmul.wgsl`'s code).
pub const MATMUL_BLOCK: u32 = 8;
/// A matmul workgroup is `MATMUL_SIDE × MATMUL_SIDE` invocations (the `SIDE` override of
/// `matmul.wgsl`), so it covers a `MATMUL_TILE × MATMUL_TILE` tile of the output.
pub const MATMUL_SIDE: u32 = 8;
pub const MATMUL_TILE: u32 = MATMUL_BLOCK * MATMUL_SIDE;
/// Invocations per workgroup of `attention_probs.wgsl` (its `QUERIES_WG` override), each
/// owning `ATTENTION_ROWS` query rows (fixed by its code).
pub const QUERIES_WG: u32 = 16;
pub const ATTENTION_ROWS: u32 = 4;
/// Products of at most this many rows run `matmul_shared.wgsl`'s `main_shared_short` (groups of
/// 16 rows), longer ones its `main_shared` (groups of 32).
pub const SHORT_ROWS: u32 = 16;

/// `shaders/common.wgsl` followed by `shaders/<name>.wgsl` for each name, as one source at build
/// time.
macro_rules! composed {
    ($($name:literal),+) => {
        concat!(
            include_str!("../../../shaders/common.wgsl"),
            $("\n", include_str!(concat!("../../../shaders/", $name, ".wgsl"))),+
        )
    };
}

/// The kernels: one per `shaders/*.wgsl` besides `common.wgsl`, and `matmul.wgsl` in three
/// specialisations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// An embedding lookup.
    Gather,
    /// A decoding's cache write: rows to the rows the host names.
    Scatter,
    /// Rotary position embeddings on Q or K, by the pass's positions.
    Rotary,
    /// A gated feed-forward's `act(gate) ⊙ up`.
    Gate,
    /// `matmul.wgsl` reading vec4s, A and B along k: `x·Wᵀ` (offsets, strides and K multiples
    /// of 4).
    Matmul,
    /// `matmul_shared.wgsl` (after `matmul.wgsl`): [`Kernel::Matmul`] with each row read once per
    /// eight lanes, shared through subgroup shuffles; only where [`GpuDevice::shares_rows`].
    MatmulShared,
    /// `matmul_shared.wgsl` as [`Kernel::MatmulBAlongN`]: `P·V`.
    MatmulSharedBAlongN,
    /// [`Kernel::MatmulShared`] for products of at most [`SHORT_ROWS`] rows (`main_shared_short`:
    /// groups of 16 rows instead of 32).
    MatmulSharedShort,
    /// [`Kernel::MatmulSharedBAlongN`] for products of at most [`SHORT_ROWS`] rows.
    MatmulSharedShortBAlongN,
    /// `matmul.wgsl` reading vec4s, A along k and B along n: `P·V`.
    MatmulBAlongN,
    /// `matmul.wgsl` reading scalars: any offsets, strides and sizes.
    MatmulScalar,
    /// A residual sum and a LayerNorm or RMSNorm.
    AddLayerNorm,
    /// `attention_probs.wgsl` reading vec4s (d_k, strides and offsets multiples of 4).
    AttentionProbs,
    /// `attention_probs_shared.wgsl` (after `attention_probs.wgsl`): [`Kernel::AttentionProbs`]
    /// with each row of K read once per eight lanes; only where [`GpuDevice::shares_rows`].
    AttentionProbsShared,
    /// `attention_probs.wgsl` reading scalars.
    AttentionProbsScalar,
}

/// How a kernel binds one buffer.
#[derive(Clone, Copy)]
enum Binding {
    Uniform,
    Read,
    ReadWrite,
}

impl Kernel {
    pub const ALL: [Kernel; 15] = [
        Kernel::Gather,
        Kernel::Scatter,
        Kernel::Rotary,
        Kernel::Gate,
        Kernel::Matmul,
        Kernel::MatmulShared,
        Kernel::MatmulSharedBAlongN,
        Kernel::MatmulSharedShort,
        Kernel::MatmulSharedShortBAlongN,
        Kernel::MatmulBAlongN,
        Kernel::MatmulScalar,
        Kernel::AddLayerNorm,
        Kernel::AttentionProbs,
        Kernel::AttentionProbsShared,
        Kernel::AttentionProbsScalar,
    ];

    /// The files under `shaders/` composed after `common.wgsl`, the kernel's own file last.
    pub fn files(self) -> &'static [&'static str] {
        match self {
            Kernel::Gather => &["gather.wgsl"],
            Kernel::Scatter => &["scatter.wgsl"],
            Kernel::Rotary => &["rotary.wgsl"],
            Kernel::Gate => &["gate.wgsl"],
            Kernel::Matmul | Kernel::MatmulBAlongN | Kernel::MatmulScalar => &["matmul.wgsl"],
            Kernel::MatmulShared
            | Kernel::MatmulSharedBAlongN
            | Kernel::MatmulSharedShort
            | Kernel::MatmulSharedShortBAlongN => &["matmul.wgsl", "matmul_shared.wgsl"],
            Kernel::AddLayerNorm => &["add_layernorm.wgsl"],
            Kernel::AttentionProbs | Kernel::AttentionProbsScalar => &["attention_probs.wgsl"],
            Kernel::AttentionProbsShared => {
                &["attention_probs.wgsl", "attention_probs_shared.wgsl"]
            }
        }
    }

    /// The kernel's own file under `shaders/`.
    pub fn file(self) -> &'static str {
        let files = self.files();
        files[files.len() - 1]
    }

    /// The composed module: `common.wgsl` + the kernel's [`files`](Kernel::files).
    pub fn source(self) -> &'static str {
        match self {
            Kernel::Gather => composed!("gather"),
            Kernel::Scatter => composed!("scatter"),
            Kernel::Rotary => composed!("rotary"),
            Kernel::Gate => composed!("gate"),
            Kernel::Matmul | Kernel::MatmulBAlongN | Kernel::MatmulScalar => composed!("matmul"),
            Kernel::MatmulShared
            | Kernel::MatmulSharedBAlongN
            | Kernel::MatmulSharedShort
            | Kernel::MatmulSharedShortBAlongN => composed!("matmul", "matmul_shared"),
            Kernel::AddLayerNorm => composed!("add_layernorm"),
            Kernel::AttentionProbs | Kernel::AttentionProbsScalar => {
                composed!("attention_probs")
            }
            Kernel::AttentionProbsShared => composed!("attention_probs", "attention_probs_shared"),
        }
    }

    /// The entry point: `main`, or a `*_shared.wgsl` file's `main_shared` (`main_shared_short`).
    pub fn entry(self) -> &'static str {
        match self {
            Kernel::MatmulShared | Kernel::MatmulSharedBAlongN | Kernel::AttentionProbsShared => {
                "main_shared"
            }
            Kernel::MatmulSharedShort | Kernel::MatmulSharedShortBAlongN => "main_shared_short",
            _ => "main",
        }
    }

    /// Whether it runs only where [`GpuDevice::shares_rows`] (it shuffles among subgroup lanes).
    /// These kernels are compiled, checked and dropped together (`GpuKernels::new`).
    pub fn needs_subgroups(self) -> bool {
        matches!(
            self,
            Kernel::MatmulShared
                | Kernel::MatmulSharedBAlongN
                | Kernel::MatmulSharedShort
                | Kernel::MatmulSharedShortBAlongN
                | Kernel::AttentionProbsShared
        )
    }

    /// The kernel's buffers in binding order, as its `@binding(i)` declarations list them.
    fn bindings(self) -> &'static [Binding] {
        use Binding::*;
        match self {
            // params, ids, table → out
            Kernel::Gather => &[Uniform, Read, Read, ReadWrite],
            // params, rows_at, src → dst
            Kernel::Scatter => &[Uniform, Read, Read, ReadWrite],
            // params, positions, inv_freq, x → out
            Kernel::Rotary => &[Uniform, Read, Read, Read, ReadWrite],
            // params, gate, up → out
            Kernel::Gate => &[Uniform, Read, Read, ReadWrite],
            // params, a, a as vec4s, b, b as vec4s, bias → c
            Kernel::Matmul
            | Kernel::MatmulShared
            | Kernel::MatmulSharedBAlongN
            | Kernel::MatmulSharedShort
            | Kernel::MatmulSharedShortBAlongN
            | Kernel::MatmulBAlongN
            | Kernel::MatmulScalar => &[Uniform, Read, Read, Read, Read, Read, ReadWrite],
            // params, a, b, gamma, beta → sum, norm
            Kernel::AddLayerNorm => &[Uniform, Read, Read, Read, Read, ReadWrite, ReadWrite],
            // params, q, q as vec4s, k, k as vec4s, mask → scores, probs
            Kernel::AttentionProbs
            | Kernel::AttentionProbsShared
            | Kernel::AttentionProbsScalar => {
                &[Uniform, Read, Read, Read, Read, Read, ReadWrite, ReadWrite]
            }
        }
    }

    /// The `override` constants that size its workgroups (and specialise the matmul).
    fn constants(self) -> &'static [(&'static str, f64)] {
        const SIDE: f64 = MATMUL_SIDE as f64;
        match self {
            Kernel::Matmul | Kernel::MatmulShared | Kernel::MatmulSharedShort => {
                &[("SIDE", SIDE), ("VEC4", 1.0), ("B_ALONG_N", 0.0)]
            }
            Kernel::MatmulBAlongN
            | Kernel::MatmulSharedBAlongN
            | Kernel::MatmulSharedShortBAlongN => {
                &[("SIDE", SIDE), ("VEC4", 1.0), ("B_ALONG_N", 1.0)]
            }
            Kernel::MatmulScalar => &[("SIDE", SIDE), ("VEC4", 0.0), ("B_ALONG_N", 0.0)],
            Kernel::AttentionProbs | Kernel::AttentionProbsShared => {
                &[("QUERIES_WG", QUERIES_WG as f64), ("VEC4", 1.0)]
            }
            Kernel::AttentionProbsScalar => &[("QUERIES_WG", QUERIES_WG as f64), ("VEC4", 0.0)],
            _ => &[("WG", ROW_WG as f64)],
        }
    }
}

/// A kernel compiled for one device, with its bind-group layout.
pub struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

/// Every kernel the device can run, compiled for it, indexed by [`Kernel`].
pub struct Pipelines([Option<Pipeline>; Kernel::ALL.len()]);

impl Pipelines {
    pub fn new(dev: &GpuDevice) -> Self {
        Self(
            Kernel::ALL
                .map(|k| (!k.needs_subgroups() || dev.shares_rows()).then(|| compile(dev, k))),
        )
    }

    /// Whether `k` was compiled (see [`Kernel::needs_subgroups`]).
    pub fn has(&self, k: Kernel) -> bool {
        self.0[k as usize].is_some()
    }

    /// Drops `k`, so that [`Pipelines::has`] says no.
    pub fn drop_kernel(&mut self, k: Kernel) {
        self.0[k as usize] = None;
    }

    /// # Panics
    /// When `k` was not compiled: ask [`Pipelines::has`] first.
    pub fn get(&self, k: Kernel) -> &Pipeline {
        self.0[k as usize]
            .as_ref()
            .unwrap_or_else(|| panic!("{k:?} was not compiled for this device"))
    }
}

fn compile(dev: &GpuDevice, kernel: Kernel) -> Pipeline {
    let d = &dev.device;
    let name = format!("{kernel:?}");
    let label = Some(name.as_str());
    let entries: Vec<wgpu::BindGroupLayoutEntry> = kernel
        .bindings()
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupLayoutEntry {
            binding: i as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: match b {
                    Binding::Uniform => wgpu::BufferBindingType::Uniform,
                    Binding::Read => wgpu::BufferBindingType::Storage { read_only: true },
                    Binding::ReadWrite => wgpu::BufferBindingType::Storage { read_only: false },
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    let layout = d.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label,
        entries: &entries,
    });
    let pipeline_layout = d.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label,
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
        label,
        source: wgpu::ShaderSource::Wgsl(kernel.source().into()),
    });
    let pipeline = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label,
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some(kernel.entry()),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants: kernel.constants(),
            ..Default::default()
        },
        cache: None,
    });
    Pipeline { pipeline, layout }
}

/// A buffer size in bytes, rounded up to whole vec4s (the matmul may read any buffer as vec4s).
pub fn padded(bytes: usize) -> u64 {
    (bytes.max(16) as u64).next_multiple_of(16)
}

/// A buffer filled through the queue (not mapped at creation, which panics on a lost device).
pub fn filled(
    dev: &GpuDevice,
    label: &str,
    bytes: &[u8],
    usage: wgpu::BufferUsages,
) -> wgpu::Buffer {
    let buf = dev.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: padded(bytes.len()),
        usage: usage | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    dev.queue.write_buffer(&buf, 0, bytes);
    buf
}

pub fn storage(dev: &GpuDevice, label: &str, data: &[f32]) -> wgpu::Buffer {
    filled(
        dev,
        label,
        bytemuck::cast_slice(data),
        wgpu::BufferUsages::STORAGE,
    )
}

fn slice<'a>(
    a: &'a ndarray::ArrayBase<impl ndarray::Data<Elem = f32>, impl ndarray::Dimension>,
) -> std::borrow::Cow<'a, [f32]> {
    match a.as_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(a.iter().copied().collect()),
    }
}

/// A dense layer: `weight` `(N, K)` as nn.Linear stores it, `bias` `(N,)`.
#[derive(Clone)]
pub struct GpuLinear {
    pub weight: wgpu::Buffer,
    pub bias: wgpu::Buffer,
    pub n: u32,
    pub k: u32,
}

impl GpuLinear {
    pub(super) fn upload(dev: &GpuDevice, label: &str, l: &Linear) -> Self {
        Self::fused(dev, label, &[l])
    }

    /// Several dense layers of the same input as one: their weights stacked, `(ΣN, K)`, and
    /// their biases (Q, K and V in one product).
    pub(super) fn fused(dev: &GpuDevice, label: &str, ls: &[&Linear]) -> Self {
        let (w, b): (Vec<f32>, Vec<f32>) = match ls {
            [one] => (
                one.weight.values().into_owned(),
                slice(&one.bias).into_owned(),
            ),
            _ => (
                ls.iter()
                    .flat_map(|l| l.weight.values().into_owned())
                    .collect(),
                ls.iter().flat_map(|l| l.bias.iter().copied()).collect(),
            ),
        };
        Self {
            weight: storage(dev, &format!("{label}.weight"), &w),
            bias: storage(dev, &format!("{label}.bias"), &b),
            n: ls.iter().map(|l| l.weight.nrows()).sum::<usize>() as u32,
            k: ls.first().map_or(0, |l| l.weight.ncols()) as u32,
        }
    }
}

/// A norm's `γ` and `β`, each `(D,)` (an RMSNorm's `β`, zero, is never read), and its kind.
#[derive(Clone)]
pub struct GpuNorm {
    pub gamma: wgpu::Buffer,
    pub beta: wgpu::Buffer,
    pub dim: u32,
    pub eps: f32,
    pub kind: NormKind,
}

impl GpuNorm {
    pub(super) fn upload(dev: &GpuDevice, label: &str, ln: &Norm) -> Self {
        Self {
            gamma: storage(dev, &format!("{label}.gamma"), &slice(&ln.weight)),
            beta: storage(dev, &format!("{label}.beta"), &slice(&ln.bias)),
            dim: ln.weight.len() as u32,
            eps: ln.eps,
            kind: ln.kind,
        }
    }
}

/// An embedding table on the GPU.
///
/// # Shapes
/// * `weight`: `(rows, dim)`
#[derive(Clone)]
pub struct GpuTable {
    pub weight: wgpu::Buffer,
    pub rows: u32,
    pub dim: u32,
}

/// A model's parameters on one device, uploaded the first time a recorded pass uses each, and
/// found again by their [`ParamId`]s.
#[derive(Default)]
pub struct GpuParams {
    /// One dense layer, or several of the same input fused into one product.
    linears: HashMap<Vec<ParamId>, GpuLinear>,
    norms: HashMap<ParamId, GpuNorm>,
    tables: HashMap<ParamId, GpuTable>,
    /// Each rotation's inverse frequencies `(d/2,)`, by `(theta's bits, head_dim)`.
    rotations: HashMap<(u32, usize), wgpu::Buffer>,
}

impl GpuParams {
    /// `ls` as one product (uploaded on first use). A layer tied to a table already uploaded
    /// (an LM head) multiplies by that table's copy, with its own bias.
    pub fn linear(&mut self, dev: &GpuDevice, ls: &[&Linear]) -> GpuLinear {
        let key: Vec<ParamId> = ls.iter().map(|l| l.id).collect();
        let tied = match ls {
            [one] => one.tied.and_then(|t| self.tables.get(&t)).cloned(),
            _ => None,
        };
        self.linears
            .entry(key)
            .or_insert_with(|| match tied {
                Some(table) => GpuLinear {
                    weight: table.weight,
                    bias: storage(dev, "bias", &ls[0].bias.to_vec()),
                    n: table.rows,
                    k: table.dim,
                },
                None => GpuLinear::fused(dev, "linear", ls),
            })
            .clone()
    }

    pub fn norm(&mut self, dev: &GpuDevice, ln: &Norm) -> GpuNorm {
        self.norms
            .entry(ln.id)
            .or_insert_with(|| GpuNorm::upload(dev, "layer_norm", ln))
            .clone()
    }

    /// The inverse frequencies of `rope`, `(d/2,)`: the CPU's own values
    /// ([`Rotary::inverse_frequencies`]), so that both engines turn by the same angles.
    pub fn rotation(&mut self, dev: &GpuDevice, rope: &Rotary) -> wgpu::Buffer {
        self.rotations
            .entry((rope.theta.to_bits(), rope.head_dim))
            .or_insert_with(|| storage(dev, "inv_freq", &rope.inverse_frequencies()))
            .clone()
    }

    pub fn table(&mut self, dev: &GpuDevice, t: &Table) -> GpuTable {
        self.tables
            .entry(t.id)
            .or_insert_with(|| GpuTable {
                weight: storage(dev, "table", &t.weight.values()),
                rows: t.weight.nrows() as u32,
                dim: t.weight.ncols() as u32,
            })
            .clone()
    }
}
