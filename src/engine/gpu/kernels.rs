//! The WGSL kernels and the model's weights on the GPU.
//!
//! Each kernel is `shaders/common.wgsl` (workgroup reductions, `erf`, the activations) followed by
//! its own `shaders/<kernel>.wgsl` (a `*_shared.wgsl` kernel after the file it builds on; the
//! products, `matmul.wgsl` and `quant.wgsl`, after `tiles.wgsl`, their register tiles), composed
//! at build time. Its buffers are declared once, here, as an explicit bind-group layout
//! (binding 0 is always its parameters); its workgroup size is set from the constants below
//! through the shader's `override`s, and the dispatches in `plan.rs` read the same constants.
//! Pipelines are compiled once per device; `quant.wgsl`'s once per ggml type, when a pass first
//! records one ([`QuantSpec`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use super::device::GpuDevice;
use super::quant::{BlockFormat, Packed};
use crate::error::Result;
use crate::model::quant::{GgmlType, QuantMatrix};
use crate::model::rope::Rotary;
use crate::model::weights::{Linear, Matrix, Norm, NormKind, ParamId, Table};

/// Threads per workgroup of the row kernels (gather, scatter, the norms, rotary, gate, the soft
/// cap): one workgroup per row, reducing across its threads (the `WG` override of
/// `common.wgsl`).
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
/// A `quant.wgsl` product workgroup (`main`) is `QUANT_SIDE × QUANT_SIDE` invocations (its
/// `SIDE` override), each an 8 × 8 block of the output, so it covers a `QUANT_TILE × QUANT_TILE`
/// tile.
pub const QUANT_SIDE: u32 = 8;
pub const QUANT_TILE: u32 = 8 * QUANT_SIDE;
/// Products of at most this many rows run `quant.wgsl`'s `main_rows` (fixed by its `ROWS`
/// accumulators), whose workgroups cover `QUANT_COLS` weight rows (its `VEC_COLS` override),
/// each split `QUANT_SPLIT` ways along k (`VEC_SPLIT`).
pub const QUANT_ROWS: u32 = 8;
pub const QUANT_COLS: u32 = 16;
pub const QUANT_SPLIT: u32 = 4;

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

/// The kernels: one per `shaders/*.wgsl` besides `common.wgsl` and `tiles.wgsl`, and
/// `matmul.wgsl` in three specialisations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// An embedding lookup.
    Gather,
    /// A decoding's cache write: rows to the rows the host names.
    Scatter,
    /// Rotary position embeddings on Q or K, by the pass's positions.
    Rotary,
    /// A gated feed-forward's `act(gate) ⊙ up`.
    Gate,
    /// Values soft-capped, `cap·tanh(x/cap)` (the LM head's logits).
    SoftCap,
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
    /// `quant.wgsl`'s `main`: `x·Wᵀ` with `W` packed ggml blocks (`quant.rs`), x read as vec4s.
    MatmulQuant,
    /// [`Kernel::MatmulQuant`] reading x as scalars (any offset, stride and K).
    MatmulQuantScalar,
    /// `quant.wgsl`'s `main_rows`: [`Kernel::MatmulQuant`] for at most [`QUANT_ROWS`] rows of x.
    MatmulQuantRows,
    /// [`Kernel::MatmulQuantRows`] reading x as scalars.
    MatmulQuantRowsScalar,
    /// `quant.wgsl`'s `main_gather`: an embedding lookup in a packed table.
    GatherQuant,
}

/// How a kernel binds one buffer.
#[derive(Clone, Copy)]
enum Binding {
    Uniform,
    Read,
    ReadWrite,
}

impl Kernel {
    pub const ALL: [Kernel; 21] = [
        Kernel::Gather,
        Kernel::Scatter,
        Kernel::Rotary,
        Kernel::Gate,
        Kernel::SoftCap,
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
        Kernel::MatmulQuant,
        Kernel::MatmulQuantScalar,
        Kernel::MatmulQuantRows,
        Kernel::MatmulQuantRowsScalar,
        Kernel::GatherQuant,
    ];

    /// The files under `shaders/` composed after `common.wgsl`, the kernel's own file last.
    pub fn files(self) -> &'static [&'static str] {
        match self {
            Kernel::Gather => &["gather.wgsl"],
            Kernel::Scatter => &["scatter.wgsl"],
            Kernel::Rotary => &["rotary.wgsl"],
            Kernel::Gate => &["gate.wgsl"],
            Kernel::SoftCap => &["soft_cap.wgsl"],
            Kernel::Matmul | Kernel::MatmulBAlongN | Kernel::MatmulScalar => {
                &["tiles.wgsl", "matmul.wgsl"]
            }
            Kernel::MatmulShared
            | Kernel::MatmulSharedBAlongN
            | Kernel::MatmulSharedShort
            | Kernel::MatmulSharedShortBAlongN => {
                &["tiles.wgsl", "matmul.wgsl", "matmul_shared.wgsl"]
            }
            Kernel::AddLayerNorm => &["add_layernorm.wgsl"],
            Kernel::AttentionProbs | Kernel::AttentionProbsScalar => &["attention_probs.wgsl"],
            Kernel::AttentionProbsShared => {
                &["attention_probs.wgsl", "attention_probs_shared.wgsl"]
            }
            Kernel::MatmulQuant
            | Kernel::MatmulQuantScalar
            | Kernel::MatmulQuantRows
            | Kernel::MatmulQuantRowsScalar
            | Kernel::GatherQuant => &["tiles.wgsl", "quant.wgsl"],
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
            Kernel::SoftCap => composed!("soft_cap"),
            Kernel::Matmul | Kernel::MatmulBAlongN | Kernel::MatmulScalar => {
                composed!("tiles", "matmul")
            }
            Kernel::MatmulShared
            | Kernel::MatmulSharedBAlongN
            | Kernel::MatmulSharedShort
            | Kernel::MatmulSharedShortBAlongN => composed!("tiles", "matmul", "matmul_shared"),
            Kernel::AddLayerNorm => composed!("add_layernorm"),
            Kernel::AttentionProbs | Kernel::AttentionProbsScalar => {
                composed!("attention_probs")
            }
            Kernel::AttentionProbsShared => composed!("attention_probs", "attention_probs_shared"),
            Kernel::MatmulQuant
            | Kernel::MatmulQuantScalar
            | Kernel::MatmulQuantRows
            | Kernel::MatmulQuantRowsScalar
            | Kernel::GatherQuant => composed!("tiles", "quant"),
        }
    }

    /// The entry point: `main`, a `*_shared.wgsl` file's `main_shared` (`main_shared_short`),
    /// or `quant.wgsl`'s `main_rows` and `main_gather`.
    pub fn entry(self) -> &'static str {
        match self {
            Kernel::MatmulShared | Kernel::MatmulSharedBAlongN | Kernel::AttentionProbsShared => {
                "main_shared"
            }
            Kernel::MatmulSharedShort | Kernel::MatmulSharedShortBAlongN => "main_shared_short",
            Kernel::MatmulQuantRows | Kernel::MatmulQuantRowsScalar => "main_rows",
            Kernel::GatherQuant => "main_gather",
            _ => "main",
        }
    }

    /// Whether it is compiled for each ggml type it multiplies by or gathers from
    /// ([`QuantSpec`]): `quant.wgsl`'s kernels.
    pub fn specialised(self) -> bool {
        matches!(
            self,
            Kernel::MatmulQuant
                | Kernel::MatmulQuantScalar
                | Kernel::MatmulQuantRows
                | Kernel::MatmulQuantRowsScalar
                | Kernel::GatherQuant
        )
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
            // params, x → out
            Kernel::SoftCap => &[Uniform, Read, ReadWrite],
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
            // params, ids, x, x as vec4s, w, bias → c (a product binds no ids, a gather no x
            // and no bias)
            Kernel::MatmulQuant
            | Kernel::MatmulQuantScalar
            | Kernel::MatmulQuantRows
            | Kernel::MatmulQuantRowsScalar
            | Kernel::GatherQuant => &[Uniform, Read, Read, Read, Read, Read, ReadWrite],
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
            Kernel::MatmulQuant => &[("SIDE", QUANT_SIDE as f64), ("X_VEC4", 1.0)],
            Kernel::MatmulQuantScalar => &[("SIDE", QUANT_SIDE as f64), ("X_VEC4", 0.0)],
            Kernel::MatmulQuantRows => &[
                ("VEC_COLS", QUANT_COLS as f64),
                ("VEC_SPLIT", QUANT_SPLIT as f64),
                ("X_VEC4", 1.0),
            ],
            Kernel::MatmulQuantRowsScalar => &[
                ("VEC_COLS", QUANT_COLS as f64),
                ("VEC_SPLIT", QUANT_SPLIT as f64),
                ("X_VEC4", 0.0),
            ],
            _ => &[("WG", ROW_WG as f64)],
        }
    }
}

/// What one `quant.wgsl` pipeline is specialised for, through its overrides: the ggml type's
/// layout (the integers' width and zero, their decoding, the scales), and for `main_rows` one row
/// of x or up to [`QUANT_ROWS`]. Specialised, the shader branches on none of them: a CPU driver
/// such as lavapipe runs both sides of every branch of a SIMD batch of invocations, taken or
/// not, so a kernel that switched on the type at run time paid for every type (3× slower).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantSpec {
    pub format: BlockFormat,
    pub one_row: bool,
}

impl QuantSpec {
    fn constants(self) -> [(&'static str, f64); 5] {
        let f = self.format;
        [
            ("BITS", f.bits as f64),
            ("ZERO", f.zero as f64),
            ("DECODE", f.decode as u32 as f64),
            ("SCALES", f.scales as u32 as f64),
            ("ONE_ROW", self.one_row as u32 as f64),
        ]
    }
}

/// A kernel compiled for one device, with its bind-group layout.
pub struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

/// Every kernel the device can run, compiled for it: each once, by [`Kernel`], but `quant.wgsl`'s,
/// compiled for each [`QuantSpec`] the first time a pass records one (a model uses a few of the
/// types).
pub struct Pipelines {
    fixed: [Option<Pipeline>; Kernel::ALL.len()],
    /// `quant.wgsl`: its module and layout (every entry point binds the same buffers), and its
    /// pipelines so far.
    quant_module: wgpu::ShaderModule,
    quant_layout: wgpu::BindGroupLayout,
    quant: Mutex<HashMap<(Kernel, QuantSpec), wgpu::ComputePipeline>>,
}

impl Pipelines {
    pub fn new(dev: &GpuDevice) -> Self {
        let quant = Kernel::MatmulQuant;
        Self {
            fixed: Kernel::ALL.map(|k| {
                let runs = !k.needs_subgroups() || dev.shares_rows();
                (runs && !k.specialised()).then(|| {
                    let layout = layout(dev, k);
                    let module = module(dev, k);
                    Pipeline {
                        pipeline: pipeline(dev, k, &layout, &module, &[]),
                        layout,
                    }
                })
            }),
            quant_module: module(dev, quant),
            quant_layout: layout(dev, quant),
            quant: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `k` was compiled (see [`Kernel::needs_subgroups`]).
    pub fn has(&self, k: Kernel) -> bool {
        self.fixed[k as usize].is_some()
    }

    /// Drops `k`, so that [`Pipelines::has`] says no.
    pub fn drop_kernel(&mut self, k: Kernel) {
        self.fixed[k as usize] = None;
    }

    /// `k`'s pipeline and layout; a `quant.wgsl` kernel's for `spec`, compiled on first use.
    ///
    /// # Panics
    /// When `k` was not compiled (ask [`Pipelines::has`] first), or is `quant.wgsl`'s and has
    /// no `spec`.
    pub fn get(
        &self,
        dev: &GpuDevice,
        k: Kernel,
        spec: Option<QuantSpec>,
    ) -> (wgpu::ComputePipeline, wgpu::BindGroupLayout) {
        if !k.specialised() {
            let p = self.fixed[k as usize]
                .as_ref()
                .unwrap_or_else(|| panic!("{k:?} was not compiled for this device"));
            return (p.pipeline.clone(), p.layout.clone());
        }
        let spec = spec.unwrap_or_else(|| panic!("{k:?} is compiled for a ggml type"));
        let mut cache = self.quant.lock().unwrap_or_else(|e| e.into_inner());
        let p = cache.entry((k, spec)).or_insert_with(|| {
            pipeline(
                dev,
                k,
                &self.quant_layout,
                &self.quant_module,
                &spec.constants(),
            )
        });
        (p.clone(), self.quant_layout.clone())
    }
}

/// `kernel`'s bind-group layout: its buffers, as [`Kernel::bindings`] lists them.
fn layout(dev: &GpuDevice, kernel: Kernel) -> wgpu::BindGroupLayout {
    let name = format!("{kernel:?}");
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
    dev.device
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(&name),
            entries: &entries,
        })
}

/// `kernel`'s composed source, as a module.
fn module(dev: &GpuDevice, kernel: Kernel) -> wgpu::ShaderModule {
    dev.device
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(kernel.file()),
            source: wgpu::ShaderSource::Wgsl(kernel.source().into()),
        })
}

/// `kernel`'s entry point of `module`, its overrides set from [`Kernel::constants`] and `more`.
fn pipeline(
    dev: &GpuDevice,
    kernel: Kernel,
    layout: &wgpu::BindGroupLayout,
    module: &wgpu::ShaderModule,
    more: &[(&str, f64)],
) -> wgpu::ComputePipeline {
    let name = format!("{kernel:?}");
    let label = Some(name.as_str());
    let pipeline_layout = dev
        .device
        .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label,
            bind_group_layouts: &[Some(layout)],
            immediate_size: 0,
        });
    let constants: Vec<(&str, f64)> = kernel.constants().iter().chain(more).copied().collect();
    dev.device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label,
            layout: Some(&pipeline_layout),
            module,
            entry_point: Some(kernel.entry()),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &constants,
                ..Default::default()
            },
            cache: None,
        })
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
) -> Cow<'a, [f32]> {
    match a.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(a.iter().copied().collect()),
    }
}

/// A weight matrix on the GPU, `(rows, cols)`: f32 rows as nn.Linear stores them, or a GGUF
/// file's ggml blocks packed as `quant.rs` lays them out (never an f32 copy of those). A matrix
/// larger than one binding ([`GpuDevice::binding_limit`]) is several, each a piece of its rows
/// from `first_row` on.
#[derive(Clone)]
pub struct GpuMatrix {
    pub buffer: wgpu::Buffer,
    pub rows: u32,
    pub cols: u32,
    /// How its blocks are packed; `None` for f32 rows.
    pub blocks: Option<GpuBlocks>,
    /// Its first row in the whole matrix it is a piece of (0 for a whole one).
    pub first_row: u32,
}

/// An embedding table on the GPU, `(rows, cols)`, in pieces of rows where it is larger than
/// one binding (Gemma 3's 262,144 × 640 Q8_0 table: 178 MB, lavapipe's binding 128 MiB).
#[derive(Clone)]
pub struct GpuTable {
    pub pieces: Vec<GpuMatrix>,
    pub rows: u32,
    pub cols: u32,
}

/// The rows of `m` one binding of `limit` bytes holds on the GPU (at least one).
fn rows_per_binding(m: &Matrix, limit: u64) -> usize {
    let cols = m.ncols();
    let row_bytes = match gpu_kind(m).and_then(BlockFormat::of) {
        None => 4 * cols,
        Some(format) => 4 * Packed::row_words_at_most(format, cols),
    };
    // a packed matrix's few words of rounding
    let usable = limit.saturating_sub(64);
    usize::try_from(usable / row_bytes.max(1) as u64)
        .unwrap_or(usize::MAX)
        .max(1)
}

/// A packed matrix's format and where its scales start (see [`Packed`]).
#[derive(Debug, Clone, Copy)]
pub struct GpuBlocks {
    pub format: BlockFormat,
    pub scales_at: u32,
    pub sub_at: u32,
}

/// What a matrix becomes on the GPU: f32 rows (an array's, or a GGUF file's `F32`), or blocks
/// of one ggml type packed.
fn gpu_kind(m: &Matrix) -> Option<GgmlType> {
    match m {
        Matrix::Quantized(q) if q.ty() != GgmlType::F32 => Some(q.ty()),
        _ => None,
    }
}

impl GpuMatrix {
    /// `ms` stacked, `(Σ rows, cols)`: all f32, or all of one ggml type (see [`stackable`]).
    fn upload(dev: &GpuDevice, label: &str, ms: &[&Matrix]) -> Result<Self> {
        let rows = ms.iter().map(|m| m.nrows()).sum::<usize>() as u32;
        let cols = ms.first().map_or(0, |m| m.ncols()) as u32;
        let usage = wgpu::BufferUsages::STORAGE;
        let quantized: Option<Vec<&QuantMatrix>> = ms
            .iter()
            .map(|m| match m {
                Matrix::Quantized(q) if gpu_kind(m).is_some() => Some(q),
                _ => None,
            })
            .collect();
        if let Some(qs) = quantized {
            let packed = Packed::new(label, &qs)?;
            return Ok(Self {
                buffer: filled(dev, label, bytemuck::cast_slice(&packed.words), usage),
                rows: packed.rows,
                cols: packed.cols,
                blocks: Some(GpuBlocks {
                    format: packed.format,
                    scales_at: packed.scales_at,
                    sub_at: packed.sub_at,
                }),
                first_row: 0,
            });
        }
        // f32 rows: an array's values, or a GGUF F32 matrix's little-endian bytes as they are
        fn bytes_of(m: &Matrix) -> Cow<'_, [u8]> {
            match m {
                Matrix::F32(w) => match slice(w) {
                    Cow::Borrowed(s) => Cow::Borrowed(bytemuck::cast_slice(s)),
                    Cow::Owned(v) => Cow::Owned(bytemuck::cast_slice(&v).to_vec()),
                },
                Matrix::Quantized(q) => Cow::Borrowed(q.data()),
            }
        }
        let buffer = match ms {
            [one] => filled(dev, label, &bytes_of(one), usage),
            _ => {
                let all: Vec<u8> = ms.iter().flat_map(|m| bytes_of(m).into_owned()).collect();
                filled(dev, label, &all, usage)
            }
        };
        Ok(Self {
            buffer,
            rows,
            cols,
            blocks: None,
            first_row: 0,
        })
    }

    /// `m` in pieces of rows, each within one binding ([`GpuDevice::binding_limit`]): one
    /// piece where it fits.
    fn pieces(dev: &GpuDevice, label: &str, m: &Matrix) -> Result<Vec<Self>> {
        let (rows, per) = (m.nrows(), rows_per_binding(m, dev.binding_limit()));
        if rows <= per {
            return Ok(vec![Self::upload(dev, label, &[m])?]);
        }
        (0..rows)
            .step_by(per)
            .map(|start| {
                let piece = m.row_range(start..(start + per).min(rows));
                let mut g = Self::upload(dev, &format!("{label}[{start}..]"), &[&piece])?;
                g.first_row = start as u32;
                Ok(g)
            })
            .collect()
    }
}

/// Whether `ms` can be one matrix on the GPU, their rows stacked: all of one width and all f32,
/// or all of one ggml type.
fn stackable(ms: &[&Matrix]) -> bool {
    ms.windows(2)
        .all(|p| p[0].ncols() == p[1].ncols() && gpu_kind(p[0]) == gpu_kind(p[1]))
}

/// One matrix of a dense layer and its bias `(rows,)`.
#[derive(Clone)]
pub struct GpuPart {
    pub weight: GpuMatrix,
    pub bias: wgpu::Buffer,
}

/// A dense layer: its weight `(N, K)` as nn.Linear stores it and its bias `(N,)`, in one part,
/// or in several when it is several layers fused (Q, K and V) that cannot be stacked into one
/// matrix (an f32 one beside a quantized one, or two ggml types): each part is then a product
/// of its own, into its own columns of the one output.
#[derive(Clone)]
pub struct GpuLinear {
    pub parts: Vec<GpuPart>,
    pub n: u32,
    pub k: u32,
}

impl GpuLinear {
    /// Several dense layers of the same input as one: their weights stacked, `(ΣN, K)`, and
    /// their biases (Q, K and V in one product), or side by side where they cannot be stacked.
    pub(super) fn fused(dev: &GpuDevice, label: &str, ls: &[&Linear]) -> Result<Self> {
        let weights: Vec<&Matrix> = ls.iter().map(|l| &l.weight).collect();
        let k = weights.first().map_or(0, |w| w.ncols());
        if let Some(w) = weights.iter().find(|w| w.ncols() != k) {
            return Err(crate::error::Error::Shape {
                what: format!("{label}: layers fused into one product take inputs of one width"),
                expected: vec![w.nrows(), k],
                found: vec![w.nrows(), w.ncols()],
            });
        }
        let bias = |ls: &[&Linear]| -> Vec<f32> {
            ls.iter().flat_map(|l| l.bias.iter().copied()).collect()
        };
        let rows: usize = weights.iter().map(|w| w.nrows()).sum();
        let one_binding = weights
            .first()
            .is_none_or(|w| rows <= rows_per_binding(w, dev.binding_limit()));
        let parts = if stackable(&weights) && one_binding {
            vec![GpuPart {
                weight: GpuMatrix::upload(dev, &format!("{label}.weight"), &weights)?,
                bias: storage(dev, &format!("{label}.bias"), &bias(ls)),
            }]
        } else {
            // side by side, each in as many pieces as the bindings need
            let mut parts = Vec::new();
            for l in ls {
                for weight in GpuMatrix::pieces(dev, &format!("{label}.weight"), &l.weight)? {
                    let at = weight.first_row as usize..(weight.first_row + weight.rows) as usize;
                    let b = l.bias.slice(ndarray::s![at]).to_vec();
                    parts.push(GpuPart {
                        weight,
                        bias: storage(dev, &format!("{label}.bias"), &b),
                    });
                }
            }
            parts
        };
        Ok(Self {
            parts,
            n: weights.iter().map(|w| w.nrows()).sum::<usize>() as u32,
            k: k as u32,
        })
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

/// A model's parameters on one device, uploaded the first time a recorded pass uses each, and
/// found again by their [`ParamId`]s.
#[derive(Default)]
pub struct GpuParams {
    /// One dense layer, or several of the same input fused into one product.
    linears: HashMap<Vec<ParamId>, GpuLinear>,
    norms: HashMap<ParamId, GpuNorm>,
    /// The embedding tables, `(rows, D)` each.
    tables: HashMap<ParamId, GpuTable>,
    /// Each rotation's inverse frequencies `(d/2,)` (a model has one or a few).
    rotations: Vec<(Rotary, wgpu::Buffer)>,
}

impl GpuParams {
    /// `ls` as one product (uploaded on first use). A layer tied to a table already uploaded
    /// (an LM head) multiplies by that table's copy, with its own bias.
    pub fn linear(&mut self, dev: &GpuDevice, ls: &[&Linear]) -> Result<GpuLinear> {
        let key: Vec<ParamId> = ls.iter().map(|l| l.id).collect();
        if let Some(l) = self.linears.get(&key) {
            return Ok(l.clone());
        }
        let tied = match ls {
            [one] => one.tied.and_then(|t| self.tables.get(&t)).cloned(),
            _ => None,
        };
        let l = match tied {
            Some(table) => GpuLinear {
                n: table.rows,
                k: table.cols,
                // a product by each piece into its own columns
                parts: table
                    .pieces
                    .into_iter()
                    .map(|weight| {
                        let at =
                            weight.first_row as usize..(weight.first_row + weight.rows) as usize;
                        let bias = ls[0].bias.slice(ndarray::s![at]).to_vec();
                        GpuPart {
                            weight,
                            bias: storage(dev, "bias", &bias),
                        }
                    })
                    .collect(),
            },
            None => GpuLinear::fused(dev, "linear", ls)?,
        };
        self.linears.insert(key, l.clone());
        Ok(l)
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
        if let Some((_, b)) = self.rotations.iter().find(|(r, _)| r == rope) {
            return b.clone();
        }
        let b = storage(dev, "inv_freq", &rope.inverse_frequencies());
        self.rotations.push((*rope, b.clone()));
        b
    }

    /// An embedding table, `(rows, D)` (uploaded on first use).
    pub fn table(&mut self, dev: &GpuDevice, t: &Table) -> Result<GpuTable> {
        if let Some(m) = self.tables.get(&t.id) {
            return Ok(m.clone());
        }
        let (rows, cols) = t.weight.dim();
        let m = GpuTable {
            pieces: GpuMatrix::pieces(dev, "table", &t.weight)?,
            rows: rows as u32,
            cols: cols as u32,
        };
        self.tables.insert(t.id, m.clone());
        Ok(m)
    }

    /// Bytes of the parameters uploaded so far, each buffer once (an LM head tied to its table
    /// multiplies by the table's).
    pub fn bytes(&self) -> u64 {
        let mut buffers: Vec<&wgpu::Buffer> = self
            .linears
            .values()
            .flat_map(|l| l.parts.iter().flat_map(|p| [&p.weight.buffer, &p.bias]))
            .chain(self.norms.values().flat_map(|n| [&n.gamma, &n.beta]))
            .chain(
                self.tables
                    .values()
                    .flat_map(|t| t.pieces.iter().map(|p| &p.buffer)),
            )
            .chain(self.rotations.iter().map(|(_, b)| b))
            .collect();
        buffers.sort();
        buffers.dedup();
        buffers.iter().map(|b| b.size()).sum()
    }
}
