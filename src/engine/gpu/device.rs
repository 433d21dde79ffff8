//! Acquiring a GPU device, kept apart from running on one so that tests can pass their own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::kernels::Pipelines;
use crate::error::{Error, Result};

/// A device and queue with what we watch on them: loss and uncaptured (validation) errors.
#[derive(Clone)]
pub struct GpuDevice {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    lost: Arc<AtomicBool>,
    error: Arc<Mutex<Option<String>>>,
    /// The most bytes one buffer may hold and one binding see, if less than the device's.
    binding_limit: Option<u64>,
    /// Its kernels, compiled by the first engine on it and shared by every later one (compiling
    /// them takes lavapipe ~1.7 s, each model's engine the same).
    pub(super) pipelines: Arc<OnceLock<Arc<Pipelines>>>,
}

impl GpuDevice {
    /// Wraps a device the caller acquired, installing the loss and error watchers.
    pub fn from_parts(device: wgpu::Device, queue: wgpu::Queue, info: wgpu::AdapterInfo) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let error = Arc::new(Mutex::new(None));
        let l = lost.clone();
        device.set_device_lost_callback(move |_, _| l.store(true, Ordering::SeqCst));
        let e = error.clone();
        device.on_uncaptured_error(Arc::new(move |err: wgpu::Error| {
            if let Ok(mut slot) = e.lock() {
                slot.get_or_insert_with(|| err.to_string());
            }
        }));
        Self {
            device,
            queue,
            info,
            lost,
            error,
            binding_limit: None,
            pipelines: Arc::default(),
        }
    }

    /// The most bytes one buffer may hold and one storage binding see: the device's limits
    /// (lavapipe's binding: 128 MiB), or less where asked ([`GpuDevice::with_binding_limit`]).
    /// A larger matrix is bound in pieces of rows.
    pub fn binding_limit(&self) -> u64 {
        let limits = self.device.limits();
        let own = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        self.binding_limit.map_or(own, |l| l.min(own))
    }

    /// The device, binding no more than `bytes` at once (a matrix is then bound in more
    /// pieces): for a driver that fails below its stated limits, and to see the pieces at work
    /// on small matrices.
    pub fn with_binding_limit(mut self, bytes: u64) -> Self {
        self.binding_limit = Some(bytes);
        self
    }

    /// Requests the default adapter and a device with the adapter's real limits (a model's
    /// embedding table can exceed WebGPU's default binding sizes) and its subgroups, where it
    /// has them (natively: wgpu does not offer them on WebGPU yet).
    pub async fn acquire() -> Result<Self> {
        // Compute needs Vulkan, Metal, DX12 or WebGPU; probing GL only adds noise. WGPU_BACKEND overrides.
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
        let instance = wgpu::Instance::new(desc);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| Error::Gpu(format!("no GPU adapter: {e}")))?;
        let info = adapter.get_info();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("attnscope"),
                required_features: adapter.features() & wgpu::Features::SUBGROUP,
                required_limits: adapter.limits(),
                ..Default::default()
            })
            .await
            .map_err(|e| Error::Gpu(format!("{}: cannot open the device: {e}", info.name)))?;
        Ok(Self::from_parts(device, queue, info))
    }

    /// Whether the device has subgroups whose sizes are all multiples of 8, which the
    /// `*_shared.wgsl` kernels divide into groups of eight lanes.
    pub fn shares_rows(&self) -> bool {
        self.device.features().contains(wgpu::Features::SUBGROUP)
            && self.info.subgroup_min_size >= 8
            && self.info.subgroup_min_size.is_power_of_two()
    }

    /// What ran, e.g. `gpu: llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)`.
    pub fn describe(&self) -> String {
        let api = match self.info.backend {
            wgpu::Backend::BrowserWebGpu => "WebGPU".to_owned(),
            other => format!("{other:?}"),
        };
        let name = if self.info.name.is_empty() {
            "adapter"
        } else {
            &self.info.name
        };
        format!("gpu: {name} ({api})")
    }

    /// An error if the device was lost or reported an uncaptured error since the last check.
    pub fn check(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(Error::Gpu(format!("{}: device lost", self.info.name)));
        }
        if let Some(e) = self.error.lock().ok().and_then(|mut s| s.take()) {
            return Err(Error::Gpu(e));
        }
        Ok(())
    }
}
