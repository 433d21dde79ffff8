//! The GPU engine: a family's forward pass recorded as WGSL compute shaders through `wgpu`
//! (Vulkan, Metal or DX12 natively, WebGPU in the browser), checked against the CPU engine.

mod decode;
mod device;
mod forward;
mod generate;
mod kernels;
mod ops;
mod plan;
pub mod quant;
mod record;

pub use crate::engine::GpuTiming;
pub use device::GpuDevice;
pub use forward::GpuEngine;
pub use generate::GpuSteps;
pub use kernels::{Kernel, MATMUL_TILE, ROW_WG};
pub use ops::AttentionOutput;
pub use plan::GpuKernels;
pub use record::{GpuX, Recorder};
