//! The GPU engine: a model's family recorded once per batch shape and options (`record.rs`),
//! replayed as one command submission per pass, and what the trace keeps read back by name.

use std::sync::{Arc, Mutex};

use ndarray::{s, Array5, ArrayView2, ArrayView4};
use web_time::Instant;

use super::device::GpuDevice;
use super::kernels::GpuParams;
use super::plan::GpuKernels;
use super::record::{GpuCache, Recorder, Recording};
use crate::engine::cpu::exec::StackLayers;
use crate::engine::network::EngineOps;
use crate::engine::network::Loaded;
use crate::engine::ops::{AttentionId, AttentionKind, Ids, PassMasks, Stack};
use crate::engine::progress::PassProgress;
use crate::engine::trace::{AttentionGroup, KeptValues};
use crate::engine::translate::EncoderDecoder;
use crate::engine::{
    check_input, check_layer_heads, AttentionKept, GpuTiming, ModelInputs, Trace, TraceOptions,
};
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::weights::ParamId;
use crate::model::Encoded;

/// The GPU engine: pipelines compiled once, a model's parameters uploaded the first time a pass
/// records them (for the model it is made for, by a pass over one token when it is made), and
/// the recorded pass kept for the last model, batch shape and options, reused while they do
/// not change.
pub struct GpuEngine {
    pub(super) kernels: GpuKernels,
    params: Mutex<GpuParams>,
    workspace: Mutex<Option<Workspace>>,
}

/// What a pooled workspace was recorded for: `(model, B, T, options)`.
type WorkspaceKey = (ParamId, usize, usize, TraceOptions);

/// A recorded pass, and the staging buffer its reads are copied into.
struct Workspace {
    key: WorkspaceKey,
    pub recording: Recording,
    pub staging: wgpu::Buffer,
}

fn gpu_shape(e: ndarray::ShapeError) -> Error {
    Error::Gpu(e.to_string())
}

impl GpuEngine {
    /// Compiles the pipelines and uploads the weights of `model` to `dev` (by recording a pass
    /// over one token).
    pub fn new(dev: GpuDevice, model: &dyn Loaded) -> Result<Self> {
        let engine = Self {
            kernels: GpuKernels::new(dev),
            params: Mutex::new(GpuParams::default()),
            workspace: Mutex::new(None),
        };
        let opts = TraceOptions::default();
        let c = model.config();
        let warm = match EncoderDecoder::of(model) {
            // an encoder–decoder's parameters, by a whole pass over one token each side
            Some(passes) => {
                let layers = StackLayers {
                    encoder: c.num_hidden_layers,
                    decoder: c.decoder()?.layers,
                };
                let shape = Shape {
                    batch: 1,
                    lens: [1, 1],
                    layers,
                    trace_layers: c.num_hidden_layers,
                };
                engine.record(shape, &opts, None, |rec| {
                    passes.forward(EngineOps::Gpu(rec))
                })?;
                None
            }
            None => {
                let stack = model.stack();
                let shape = Shape {
                    batch: 1,
                    lens: [1, 0],
                    layers: StackLayers::single(stack, c.num_hidden_layers),
                    trace_layers: c.num_hidden_layers,
                };
                let rec =
                    engine.record(shape, &opts, None, |rec| model.run(EngineOps::Gpu(rec)))?;
                Some(engine.workspace_of((model.id(), 1, 1, opts), rec))
            }
        };
        engine.kernels.dev.check()?;
        *engine.workspace.lock().map_err(|_| poisoned())? = warm;
        Ok(engine)
    }

    /// `gpu: <adapter> (<API>)`
    pub fn describe(&self) -> String {
        self.kernels.dev.describe()
    }

    /// Bytes of the model's parameters on the device (uploaded when the engine is made): a GGUF
    /// file's matrices in their ggml types, as `quant.rs` packs them, others as f32.
    pub fn parameter_bytes(&self) -> Result<u64> {
        Ok(self.params.lock().map_err(|_| poisoned())?.bytes())
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
        model: &dyn Loaded,
        input: &Encoded,
        mask: &Mask,
        opts: &TraceOptions,
    ) -> Result<(Trace, GpuTiming)> {
        let c = model.config();
        check_input(c, input, mask, opts)?;
        if opts.attention == AttentionKept::QueriesKeys {
            check_layer_heads(c, input.ids.ncols())?;
        }
        self.kernels.dev.check()?;
        let (b, t) = input.ids.dim();
        let start = Instant::now();
        // Take the pooled workspace out while we use it (no lock is held across an await): a
        // concurrent call finds none and builds its own rather than waiting.
        let key = (model.id(), b, t, opts.clone());
        let pooled = self
            .workspace
            .lock()
            .map_err(|_| poisoned())?
            .take()
            .filter(|w| w.key == key);
        let stack = model.stack();
        let ws = match pooled {
            Some(ws) => ws,
            None => {
                let layers = StackLayers::single(stack, c.num_hidden_layers);
                let shape = Shape {
                    batch: b,
                    lens: [t, 0],
                    layers,
                    trace_layers: c.num_hidden_layers,
                };
                let recording =
                    self.record(shape, opts, None, |rec| model.run(EngineOps::Gpu(rec)))?;
                self.workspace_of(key, recording)
            }
        };
        let inputs = model.inputs(input);
        let masks = PassMasks::single(stack, mask);
        opts.progress.begin(0)?; // where a stop was asked, no pass
        let watched = opts.progress.cells();
        let pass = self
            .replay(
                &ws.recording,
                &ws.staging,
                &inputs,
                &masks,
                b,
                &[],
                start,
                watched,
            )
            .await?;
        let (mut groups, kept, mut timing) = pass;
        let attention = AttentionGroup::take(&mut groups, stack, AttentionKind::SelfAttention)?;
        let reading = Instant::now();
        let mut trace = Trace::assemble(attention, kept, opts, &c.architecture.layers, mask)?;
        trace.logits = model.logits(&trace.hidden);
        timing.readback_ms += reading.elapsed().as_secs_f64() * 1e3;
        // back to the pool only after a clean pass (a failed one may leave staging mapped)
        if let Ok(mut slot) = self.workspace.lock() {
            *slot = Some(ws);
        }
        Ok((trace, timing))
    }

    /// Records a pass of `shape` (`f` runs the family over the recorder): every dispatch, with
    /// its buffers.
    pub(super) fn record(
        &self,
        shape: Shape,
        opts: &TraceOptions,
        cache: Option<&mut GpuCache>,
        f: impl FnOnce(&mut Recorder) -> Result<()>,
    ) -> Result<Recording> {
        let mut params = self.params.lock().map_err(|_| poisoned())?;
        let mut rec = Recorder::new(
            &self.kernels,
            &mut params,
            opts,
            shape.layers,
            shape.trace_layers,
            shape.batch,
            shape.lens,
            cache,
        );
        f(&mut rec)?;
        rec.finish()
    }

    /// A recorded pass and the staging buffer its reads are copied into.
    fn workspace_of(&self, key: WorkspaceKey, recording: Recording) -> Workspace {
        let staging = self.staging_for(&recording);
        Workspace {
            key,
            recording,
            staging,
        }
    }

    /// The buffer a recorded pass's reads are copied into.
    pub(super) fn staging_for(&self, recording: &Recording) -> wgpu::Buffer {
        let floats = recording.reads.iter().map(|r| r.floats).sum();
        self.kernels.buffer(
            "staging",
            floats,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        )
    }

    /// Runs a recorded pass once: writes its ids, its masks and `writes` (other host-written
    /// buffers, such as a decoding's cache rows), submits it, and reads back every attention
    /// group, `(B, L, H, n_q, n_k)`, and what it kept, by name. `start`: when the caller began.
    /// A `watched` pass goes to the GPU a layer at a time, each layer told to the cells as the
    /// GPU begins it (the work before it done: the page's progress box, the layer a long pass
    /// is on), and ends with [`Error::Stopped`] where a stop was asked, read as each layer's
    /// work ends (two layers' work queued ahead of it) and once more at the pass's end (the last
    /// layers, already submitted, are not kept); others in one submission.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn replay(
        &self,
        rec: &Recording,
        staging: &wgpu::Buffer,
        inputs: &ModelInputs,
        masks: &PassMasks<'_>,
        b: usize,
        writes: &[(&wgpu::Buffer, Vec<u32>)],
        start: Instant,
        watched: Option<&Arc<PassProgress>>,
    ) -> Result<(Vec<AttentionGroup>, KeptValues, GpuTiming)> {
        let mut timing = GpuTiming::default();
        let q = &self.kernels.dev.queue;
        for (which, buf) in &rec.ids {
            let ids = inputs
                .ids(*which)
                .ok_or_else(|| Error::Engine(format!("this pass has no {which:?}")))?;
            let ids: Vec<u32> = ids.iter().copied().collect();
            q.write_buffer(buf, 0, bytemuck::cast_slice(&ids));
        }
        for g in &rec.groups {
            let id = AttentionId {
                stack: g.stack,
                kind: g.kind,
                layer: 0,
            };
            let mask = masks
                .of(id)
                .ok_or_else(|| Error::Engine(format!("this pass has no mask for {id:?}")))?;
            let [_, n_q, n_k] = g.shape;
            if mask.0.dim() != (b, n_q, n_k) {
                return Err(Error::Shape {
                    what: format!("{id:?}: the mask (B, n_q, n_k)"),
                    expected: vec![b, n_q, n_k],
                    found: mask.0.shape().to_vec(),
                });
            }
            q.write_buffer(&g.mask, 0, bytemuck::cast_slice(&mask.to_bits()));
            if !g.windows.is_empty() {
                // each query at its position: the stack's own (a decoder's of an encoder–decoder
                // model: its targets')
                let which = match (g.stack, &inputs.target) {
                    (Stack::Decoder, Some(_)) => Ids::TargetPositions,
                    _ => Ids::Positions,
                };
                let positions = inputs
                    .ids(which)
                    .ok_or_else(|| Error::Engine(format!("this pass has no {which:?}")))?;
                for (w, buf) in &g.windows {
                    let within = mask.within_window(*w, |b, i| positions[[b, i]] as usize);
                    q.write_buffer(buf, 0, bytemuck::cast_slice(&within.to_bits()));
                }
            }
        }
        for (buf, data) in writes {
            q.write_buffer(buf, 0, bytemuck::cast_slice(data));
        }
        timing.upload_ms = start.elapsed().as_secs_f64() * 1e3;

        let computing = Instant::now();
        // a watched pass: the dispatches up to layer 1's self-attention, then up to layer 2's,
        // …, then the last layer's and the reads, each submitted as it is encoded, at most
        // `AHEAD` of them queued before the GPU ends the first: a stop asked is read as each
        // one ends, and what is not yet submitted never runs
        const AHEAD: usize = 2;
        // the pass stopped after `done` layers, where a stop was asked
        let stopped = |done: usize| {
            let cells = watched.filter(|c| c.stop_asked())?;
            let layers = cells.at().1;
            Some(Error::Stopped {
                layer: done.min(layers),
                layers,
            })
        };
        let mut cuts: Vec<usize> = match watched {
            Some(_) => rec.layer_starts.iter().skip(1).copied().collect(),
            None => vec![],
        };
        cuts.push(rec.dispatches.len());
        let mut queued = std::collections::VecDeque::new();
        let mut from = 0;
        for (part, &to) in cuts.iter().enumerate() {
            if queued.len() == AHEAD {
                let (ended, done) = queued.pop_front().expect("AHEAD parts queued");
                self.kernels.done(done).await?;
                if let Some(e) = stopped(ended + 1) {
                    return Err(e);
                }
            }
            if to == rec.dispatches.len() {
                break; // the last part goes with the reads
            }
            q.submit([self.kernels.encode(&rec.dispatches[from..to]).finish()]);
            if let Some(cells) = watched.cloned() {
                let (tx, done) = futures_channel::oneshot::channel();
                q.on_submitted_work_done(move || {
                    cells.mark_begun(part + 1);
                    let _ = tx.send(());
                });
                queued.push_back((part, done));
            }
            from = to;
        }
        let mut enc = self.kernels.encode(&rec.dispatches[from..]);
        let mut offsets = Vec::with_capacity(rec.reads.len());
        let mut offset = 0u64;
        for r in &rec.reads {
            let bytes = (r.floats * 4) as u64;
            enc.copy_buffer_to_buffer(&r.buffer, 0, staging, offset, bytes);
            offsets.push(offset as usize / 4);
            offset += bytes;
        }
        q.submit([enc.finish()]);
        let data = self.kernels.read(staging, offset).await?;
        if let Some(e) = stopped(usize::MAX) {
            return Err(e); // asked while the GPU ran the last layers, submitted already
        }
        let reading = Instant::now();
        timing.compute_ms = (reading - computing).as_secs_f64() * 1e3;

        let read = |i: usize| &data[offsets[i]..offsets[i] + rec.reads[i].floats];
        let mut groups = Vec::with_capacity(rec.groups.len());
        for g in &rec.groups {
            let [h, n_q, n_k] = g.shape;
            // every layer's (B, H, n_q, n_k) into the group's (B, L, H, n_q, n_k)
            let stacked = |layers: &[usize]| -> Result<Array5<f32>> {
                let mut all = Array5::uninit((b, layers.len(), h, n_q, n_k));
                for (layer, &i) in layers.iter().enumerate() {
                    let one =
                        ArrayView4::from_shape((b, h, n_q, n_k), read(i)).map_err(gpu_shape)?;
                    one.assign_to(all.slice_mut(s![.., layer, .., .., ..]));
                }
                // SAFETY: each layer's slice was assigned above
                Ok(unsafe { all.assume_init() })
            };
            groups.push(AttentionGroup {
                stack: g.stack,
                kind: g.kind,
                // a pass that kept the queries and keys read back no probabilities
                probs: match g.probs.is_empty() {
                    true => Array5::zeros((b, g.layers, h, 0, 0)),
                    false => stacked(&g.probs)?,
                },
                scores: if g.scores.is_empty() {
                    None
                } else {
                    Some(stacked(&g.scores)?)
                },
                // the GPU folds no thumbnail: they are computed again from the queries and keys
                thumbnails: None,
            });
        }
        let mut kept = KeptValues::new();
        for k in &rec.kept {
            let (rows, stride) = (k.rows as usize, k.at.stride as usize);
            let all = ArrayView2::from_shape((rows, stride), &read(k.read)[..rows * stride])
                .map_err(gpu_shape)?;
            let cols = k.at.offset as usize..(k.at.offset + k.cols) as usize;
            kept.insert(k.what, Arc::new(all.slice(s![.., cols]).to_owned()));
        }
        timing.readback_ms = reading.elapsed().as_secs_f64() * 1e3;
        Ok((groups, kept, timing))
    }
}

/// What a recorded pass runs over: `batch` items of `lens[0]` input positions (and `lens[1]` of
/// a translation's target) through `layers`; [`Kept::Hidden`] counts `trace_layers`.
///
/// [`Kept::Hidden`]: crate::engine::ops::Kept::Hidden
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub batch: usize,
    pub lens: [usize; 2],
    pub layers: StackLayers,
    pub trace_layers: usize,
}

fn poisoned() -> Error {
    Error::Gpu("a lock of the GPU engine was poisoned".into())
}
