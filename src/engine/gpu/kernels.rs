//! The compiled WGSL pipelines and the model's weights on the GPU, built once per model.

use super::device::GpuDevice;
use crate::model::weights::{LayerNorm, Linear};
use crate::model::{BertWeights, Config};

/// One compute pipeline per `shaders/*.wgsl` kernel.
pub struct Pipelines {
    pub embed_layernorm: wgpu::ComputePipeline,
    pub matmul_bias: wgpu::ComputePipeline,
    pub gelu: wgpu::ComputePipeline,
    pub add_layernorm: wgpu::ComputePipeline,
    pub attention_scores: wgpu::ComputePipeline,
    pub attention_softmax: wgpu::ComputePipeline,
    pub attention_context: wgpu::ComputePipeline,
}

/// Workgroup sizes, set through the shaders' `override` constants.
pub const TILE: u32 = 16;
pub const WG: u32 = 64;

fn pipeline(
    dev: &GpuDevice,
    desc: wgpu::ShaderModuleDescriptor,
    constants: &[(&str, f64)],
) -> wgpu::ComputePipeline {
    let label = desc.label;
    let module = dev.device.create_shader_module(desc);
    dev.device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                ..Default::default()
            },
            cache: None,
        })
}

impl Pipelines {
    pub fn new(dev: &GpuDevice) -> Self {
        let wg = [("WG", WG as f64)];
        Self {
            embed_layernorm: pipeline(
                dev,
                wgpu::include_wgsl!("../../../shaders/embed_layernorm.wgsl"),
                &wg,
            ),
            matmul_bias: pipeline(
                dev,
                wgpu::include_wgsl!("../../../shaders/matmul_bias.wgsl"),
                &[("TILE", TILE as f64)],
            ),
            gelu: pipeline(dev, wgpu::include_wgsl!("../../../shaders/gelu.wgsl"), &wg),
            add_layernorm: pipeline(
                dev,
                wgpu::include_wgsl!("../../../shaders/add_layernorm.wgsl"),
                &wg,
            ),
            attention_scores: pipeline(
                dev,
                wgpu::include_wgsl!("../../../shaders/attention_scores.wgsl"),
                &[],
            ),
            attention_softmax: pipeline(
                dev,
                wgpu::include_wgsl!("../../../shaders/attention_softmax.wgsl"),
                &wg,
            ),
            attention_context: pipeline(
                dev,
                wgpu::include_wgsl!("../../../shaders/attention_context.wgsl"),
                &[],
            ),
        }
    }
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
        size: (bytes.len().max(4) as u64).next_multiple_of(4),
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

pub struct GpuLinear {
    pub weight: wgpu::Buffer,
    pub bias: wgpu::Buffer,
    pub n: u32,
    pub k: u32,
}

impl GpuLinear {
    pub(super) fn upload(dev: &GpuDevice, label: &str, l: &Linear) -> Self {
        Self::from_parts(
            dev,
            label,
            &slice(&l.weight),
            &slice(&l.bias),
            l.weight.nrows(),
            l.weight.ncols(),
        )
    }
    fn from_parts(dev: &GpuDevice, label: &str, w: &[f32], b: &[f32], n: usize, k: usize) -> Self {
        Self {
            weight: storage(dev, &format!("{label}.weight"), w),
            bias: storage(dev, &format!("{label}.bias"), b),
            n: n as u32,
            k: k as u32,
        }
    }
}

pub struct GpuLayerNorm {
    pub gamma: wgpu::Buffer,
    pub beta: wgpu::Buffer,
    pub eps: f32,
}

impl GpuLayerNorm {
    pub(super) fn upload(dev: &GpuDevice, label: &str, ln: &LayerNorm) -> Self {
        Self {
            gamma: storage(dev, &format!("{label}.gamma"), &slice(&ln.weight)),
            beta: storage(dev, &format!("{label}.beta"), &slice(&ln.bias)),
            eps: ln.eps,
        }
    }
}

pub struct GpuLayer {
    /// Q, K and V fused into one `(3·D, D)` dense layer: one matmul instead of three.
    pub qkv: GpuLinear,
    pub attn_out: GpuLinear,
    pub attention_norm: GpuLayerNorm,
    pub intermediate: GpuLinear,
    pub output: GpuLinear,
    pub output_norm: GpuLayerNorm,
}

pub struct GpuWeights {
    pub word: wgpu::Buffer,
    pub position: wgpu::Buffer,
    pub token_type: wgpu::Buffer,
    pub embed_norm: GpuLayerNorm,
    pub layers: Vec<GpuLayer>,
    /// A one-float placeholder for bindings a kernel mode does not read.
    pub dummy: wgpu::Buffer,
}

impl GpuWeights {
    /// Uploads every weight once.
    pub fn upload(dev: &GpuDevice, w: &BertWeights, c: &Config) -> Self {
        let e = &w.embeddings;
        let layers = w
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let a = &l.attention;
                let qkv_w: Vec<f32> = [&a.query.weight, &a.key.weight, &a.value.weight]
                    .iter()
                    .flat_map(|m| m.iter().copied())
                    .collect(); // (3·D, D)
                let qkv_b: Vec<f32> = [&a.query.bias, &a.key.bias, &a.value.bias]
                    .iter()
                    .flat_map(|m| m.iter().copied())
                    .collect(); // (3·D,)
                GpuLayer {
                    qkv: GpuLinear::from_parts(
                        dev,
                        &format!("layer{i}.qkv"),
                        &qkv_w,
                        &qkv_b,
                        3 * c.hidden_size,
                        c.hidden_size,
                    ),
                    attn_out: GpuLinear::upload(
                        dev,
                        &format!("layer{i}.attention.output"),
                        &a.output,
                    ),
                    attention_norm: GpuLayerNorm::upload(
                        dev,
                        &format!("layer{i}.attention_norm"),
                        &l.attention_norm,
                    ),
                    intermediate: GpuLinear::upload(
                        dev,
                        &format!("layer{i}.intermediate"),
                        &l.intermediate,
                    ),
                    output: GpuLinear::upload(dev, &format!("layer{i}.output"), &l.output),
                    output_norm: GpuLayerNorm::upload(
                        dev,
                        &format!("layer{i}.output_norm"),
                        &l.output_norm,
                    ),
                }
            })
            .collect();
        Self {
            word: storage(dev, "word_embeddings", &slice(&e.word)),
            position: storage(dev, "position_embeddings", &slice(&e.position)),
            token_type: storage(dev, "token_type_embeddings", &slice(&e.token_type)),
            embed_norm: GpuLayerNorm::upload(dev, "embeddings.LayerNorm", &e.layer_norm),
            layers,
            dummy: storage(dev, "dummy", &[0.0]),
        }
    }
}
