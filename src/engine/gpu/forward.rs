//! The GPU engine: a model's family recorded once per batch shape and options (`record.rs`),
//! replayed as one command submission per pass, and what the trace keeps read back by name.

use std::sync::Mutex;

use ndarray::{s, Array5, ArrayView2, ArrayView4};
use web_time::Instant;

use super::device::GpuDevice;
use super::kernels::GpuParams;
use super::plan::GpuKernels;
use super::record::{Recorder, Recording};
use crate::engine::ops::AttentionKind;
use crate::engine::trace::{AttentionGroup, KeptValues};
use crate::engine::{check_input, Trace, TraceOptions};
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::weights::ParamId;
use crate::model::{Encoded, Model};

/// Where a GPU forward pass spent its time, in milliseconds (one submission: the phases are
/// measured on the host around it).
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuTiming {
    /// Writing ids, token types and the mask (and recording the pass for a new shape).
    pub upload_ms: f64,
    /// From the submission until the results are mapped: every layer's dispatches and the copy
    /// of what is read back.
    pub compute_ms: f64,
    /// Copying the mapped probabilities (and hidden states, scores, a layer's trace) out into
    /// the trace.
    pub readback_ms: f64,
}

impl GpuTiming {
    pub fn total_ms(&self) -> f64 {
        self.upload_ms + self.compute_ms + self.readback_ms
    }
}

/// The GPU engine: pipelines compiled once, a model's parameters uploaded the first time a pass
/// records them (for the model it is made for, by a pass over one token when it is made), and
/// the recorded pass kept for the last model, batch shape and options, reused while they do
/// not change.
pub struct GpuEngine {
    kernels: GpuKernels,
    params: Mutex<GpuParams>,
    workspace: Mutex<Option<Workspace>>,
}

/// A recorded pass for one `(model, B, T, options)`, and the staging buffer its reads are copied into.
struct Workspace {
    key: (ParamId, usize, usize, TraceOptions),
    recording: Recording,
    staging: wgpu::Buffer,
}

fn gpu_shape(e: ndarray::ShapeError) -> Error {
    Error::Gpu(e.to_string())
}

impl GpuEngine {
    /// Compiles the pipelines and uploads the weights of `model` to `dev` (by recording a pass
    /// over one token).
    pub fn new(dev: GpuDevice, model: &Model) -> Result<Self> {
        let engine = Self {
            kernels: GpuKernels::new(dev),
            params: Mutex::new(GpuParams::default()),
            workspace: Mutex::new(None),
        };
        let warm = engine.build_workspace(model, 1, 1, &TraceOptions::default())?;
        engine.kernels.dev.check()?;
        *engine.workspace.lock().map_err(|_| poisoned())? = Some(warm);
        Ok(engine)
    }

    /// `gpu: <adapter> (<API>)`
    pub fn describe(&self) -> String {
        self.kernels.dev.describe()
    }

    /// Runs `model` over a padded batch: one submission for
    /// the whole pass, then only what the trace keeps is read back (every layer's
    /// probabilities and the last hidden states; the scores, every layer's hidden states and
    /// one layer's intermediate values when asked).
    ///
    /// # Shapes
    /// * `input.ids`, `input.type_ids`: `(B, T)`; `mask`: `(B, T, T)`
    /// * the trace: see [`Trace`]
    pub async fn forward(
        &self,
        model: &Model,
        input: &Encoded,
        mask: &Mask,
        opts: &TraceOptions,
    ) -> Result<(Trace, GpuTiming)> {
        let c = &model.config;
        check_input(c, input, mask, opts)?;
        self.kernels.dev.check()?;
        let (b, t) = input.ids.dim();
        let (l, h) = (c.num_hidden_layers, c.num_attention_heads);
        let mut timing = GpuTiming::default();
        let start = Instant::now();

        // Take the pooled workspace out while we use it (no lock is held across an await): a
        // concurrent call finds none and builds its own rather than waiting.
        let key = (model.id, b, t, opts.clone());
        let pooled = self
            .workspace
            .lock()
            .map_err(|_| poisoned())?
            .take()
            .filter(|w| w.key == key);
        let ws = match pooled {
            Some(ws) => ws,
            None => self.build_workspace(model, b, t, opts)?,
        };
        let rec = &ws.recording;
        let q = &self.kernels.dev.queue;
        let inputs = model.inputs(input);
        for (which, buf) in &rec.ids {
            let ids = inputs
                .ids(*which)
                .ok_or_else(|| Error::Engine(format!("this pass has no {which:?}")))?;
            let ids: Vec<u32> = ids.iter().copied().collect();
            q.write_buffer(buf, 0, bytemuck::cast_slice(&ids));
        }
        q.write_buffer(&rec.mask, 0, bytemuck::cast_slice(&mask.to_bits()));
        timing.upload_ms = start.elapsed().as_secs_f64() * 1e3;

        let computing = Instant::now();
        let mut enc = self.kernels.encode(&rec.dispatches);
        let mut offsets = Vec::with_capacity(rec.reads.len());
        let mut offset = 0u64;
        for r in &rec.reads {
            let bytes = (r.floats * 4) as u64;
            enc.copy_buffer_to_buffer(&r.buffer, 0, &ws.staging, offset, bytes);
            offsets.push(offset as usize / 4);
            offset += bytes;
        }
        q.submit([enc.finish()]);
        let data = self.kernels.read(&ws.staging, offset).await?;
        let reading = Instant::now();
        timing.compute_ms = (reading - computing).as_secs_f64() * 1e3;

        let read = |i: usize| &data[offsets[i]..offsets[i] + rec.reads[i].floats];
        // every layer's (B, H, T, T) into the trace's (B, L, H, T, T)
        let stacked = |layers: &[usize]| -> Result<Array5<f32>> {
            let mut all = Array5::uninit((b, l, h, t, t));
            for (layer, &i) in layers.iter().enumerate() {
                let one = ArrayView4::from_shape((b, h, t, t), read(i)).map_err(gpu_shape)?;
                one.assign_to(all.slice_mut(s![.., layer, .., .., ..]));
            }
            if layers.len() != l {
                return Err(Error::Engine(format!(
                    "the pass read back {} layers' attention of {l}",
                    layers.len()
                )));
            }
            // SAFETY: each of the L layers' slices was assigned above
            Ok(unsafe { all.assume_init() })
        };
        let attention = AttentionGroup {
            stack: model.stack(),
            kind: AttentionKind::SelfAttention,
            probs: stacked(&rec.probs)?,
            scores: if opts.scores {
                Some(stacked(&rec.scores)?)
            } else {
                None
            },
        };
        let mut kept = KeptValues::new();
        for k in &rec.kept {
            let (rows, stride) = (k.rows as usize, k.at.stride as usize);
            let all = ArrayView2::from_shape((rows, stride), &read(k.read)[..rows * stride])
                .map_err(gpu_shape)?;
            let cols = k.at.offset as usize..(k.at.offset + k.cols) as usize;
            kept.insert(k.what, all.slice(s![.., cols]).to_owned());
        }
        let mut trace = Trace::assemble(attention, kept, opts, l, mask)?;
        trace.logits = model.logits(&trace.hidden);
        timing.readback_ms = reading.elapsed().as_secs_f64() * 1e3;
        // back to the pool only after a clean pass (a failed one may leave staging mapped)
        if let Ok(mut slot) = self.workspace.lock() {
            *slot = Some(ws);
        }
        Ok((trace, timing))
    }

    /// Records `model`'s pass over a `(B, T)` batch: every dispatch, with its buffers.
    fn build_workspace(
        &self,
        model: &Model,
        b: usize,
        t: usize,
        opts: &TraceOptions,
    ) -> Result<Workspace> {
        let c = &model.config;
        let mut params = self.params.lock().map_err(|_| poisoned())?;
        let mut rec = Recorder::new(
            &self.kernels,
            &mut params,
            opts,
            model.stack(),
            c.num_hidden_layers,
            c.num_attention_heads,
            b,
            t,
        );
        model.forward(&mut rec)?;
        let recording = rec.finish()?;
        let floats = recording.reads.iter().map(|r| r.floats).sum();
        let staging = self.kernels.buffer(
            "staging",
            floats,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        Ok(Workspace {
            key: (model.id, b, t, opts.clone()),
            recording,
            staging,
        })
    }
}

fn poisoned() -> Error {
    Error::Gpu("a lock of the GPU engine was poisoned".into())
}
