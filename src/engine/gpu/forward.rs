//! The encoder as one sequence of compute dispatches, encoded into one command submission.

use std::sync::Mutex;

use ndarray::{Array2, Array3, Array5, Axis};
use web_time::Instant;

use super::device::GpuDevice;
use super::kernels::{GpuLayer, GpuWeights};
use super::plan::{AddNorm, AttentionLayout, Dispatch, GpuKernels, Plan};
use crate::engine::cpu::encoder::classify;
use crate::engine::{check_input, ScoreScale, Trace, TraceOptions};
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::weights::ClassifierWeights;
use crate::model::{Activation, Config, Encoded, LayerNormOrder, Model};

/// Where a GPU forward pass spent its time, in milliseconds (one submission: the phases are
/// measured on the host around it).
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuTiming {
    /// Writing ids, token types and the mask (and building buffers for a new shape).
    pub upload_ms: f64,
    /// From the submission until the results are mapped: every layer's dispatches and the copy
    /// of what is read back.
    pub compute_ms: f64,
    /// Copying the mapped probabilities (and hidden states, scores) out into the trace.
    pub readback_ms: f64,
}

impl GpuTiming {
    pub fn total_ms(&self) -> f64 {
        self.upload_ms + self.compute_ms + self.readback_ms
    }
}

/// The GPU engine for one model: pipelines compiled and weights uploaded once, intermediate
/// buffers kept for the last batch shape and reused while it does not change.
pub struct GpuEngine {
    kernels: GpuKernels,
    weights: GpuWeights,
    config: Config,
    /// The [CLS] head runs on the CPU from the read-back hidden states.
    classifier: Option<ClassifierWeights>,
    workspace: Mutex<Option<Workspace>>,
}

/// Buffers, bind groups and the dispatches for one `(B, T, options)`.
struct Workspace {
    /// The batch shape and the options the dispatches were recorded for.
    key: (usize, usize, TraceOptions),
    ids: wgpu::Buffer,
    type_ids: wgpu::Buffer,
    mask: wgpu::Buffer,
    /// `(B, H, T, T)` per layer
    probs: Vec<wgpu::Buffer>,
    /// `(B, H, T, T)` per layer when scores are kept, else none
    scores: Vec<wgpu::Buffer>,
    /// `(B·T, D)`
    hidden: wgpu::Buffer,
    staging: wgpu::Buffer,
    dispatches: Vec<Dispatch>,
    /// The intermediate activations and the dispatches' parameters, bound by `dispatches`.
    _keep: Vec<wgpu::Buffer>,
}

impl GpuEngine {
    /// Compiles the pipelines and uploads the weights of `model` to `dev`.
    pub fn new(dev: GpuDevice, model: &Model) -> Result<Self> {
        let kernels = GpuKernels::new(dev);
        let weights = GpuWeights::upload(&kernels.dev, &model.weights, &model.config);
        kernels.dev.check()?;
        Ok(Self {
            kernels,
            weights,
            config: model.config.clone(),
            classifier: model.weights.classifier.clone(),
            workspace: Mutex::new(None),
        })
    }

    /// `gpu: <adapter> (<API>)`
    pub fn describe(&self) -> String {
        self.kernels.dev.describe()
    }

    /// Runs the encoder over a padded batch: one submission for the whole pass, then only what
    /// the trace keeps is read back (every layer's probabilities and the last hidden states;
    /// the scores when asked). Every layer's hidden states and a layer's trace are not computed
    /// here: the trace leaves them `None` whatever `opts` asks (the [`crate::engine::Runner`]
    /// fills them from the CPU engine).
    ///
    /// # Shapes
    /// * `input.ids`, `input.type_ids`: `(B, T)`; `mask`: `(B, T, T)`
    /// * the trace: see [`Trace`]
    pub async fn forward(
        &self,
        input: &Encoded,
        mask: &Mask,
        opts: &TraceOptions,
    ) -> Result<(Trace, GpuTiming)> {
        let c = &self.config;
        check_input(c, input, mask, opts)?;
        // what the GPU pass computes, and what its workspace is recorded for
        let opts = &TraceOptions {
            hidden_states: false,
            layer_trace: None,
            ..opts.clone()
        };
        self.kernels.dev.check()?;
        let (b, t) = input.ids.dim();
        let (l, h, d) = (c.num_hidden_layers, c.num_attention_heads, c.hidden_size);
        let mut timing = GpuTiming::default();
        let start = Instant::now();

        // Take the pooled workspace out while we use it (no lock is held across an await): a
        // concurrent call finds none and builds its own rather than waiting.
        let key = (b, t, opts.clone());
        let pooled = self
            .workspace
            .lock()
            .map_err(|_| Error::Gpu("workspace lock poisoned".into()))?
            .take()
            .filter(|w| w.key == key);
        let ws = match pooled {
            Some(ws) => ws,
            None => self.build_workspace(b, t, opts),
        };
        let q = &self.kernels.dev.queue;
        q.write_buffer(
            &ws.ids,
            0,
            bytemuck::cast_slice(&input.ids.iter().copied().collect::<Vec<u32>>()),
        );
        q.write_buffer(
            &ws.type_ids,
            0,
            bytemuck::cast_slice(&input.type_ids.iter().copied().collect::<Vec<u32>>()),
        );
        q.write_buffer(&ws.mask, 0, bytemuck::cast_slice(&mask.to_u32()));
        timing.upload_ms = start.elapsed().as_secs_f64() * 1e3;

        let computing = Instant::now();
        let mut enc = self.kernels.encode(&ws.dispatches);
        // Read back only what was asked for: probabilities and hidden states, scores on request.
        let p_bytes = (b * h * t * t * 4) as u64;
        let mut offset = 0u64;
        for buf in &ws.probs {
            enc.copy_buffer_to_buffer(buf, 0, &ws.staging, offset, p_bytes);
            offset += p_bytes;
        }
        let h_bytes = (b * t * d * 4) as u64;
        enc.copy_buffer_to_buffer(&ws.hidden, 0, &ws.staging, offset, h_bytes);
        offset += h_bytes;
        if opts.scores {
            for buf in &ws.scores {
                enc.copy_buffer_to_buffer(buf, 0, &ws.staging, offset, p_bytes);
                offset += p_bytes;
            }
        }
        q.submit([enc.finish()]);
        let data = self.kernels.read(&ws.staging, offset).await?;
        // back to the pool only after a clean pass (a failed one may leave staging mapped)
        if let Ok(mut slot) = self.workspace.lock() {
            *slot = Some(ws);
        }
        let reading = Instant::now();
        timing.compute_ms = (reading - computing).as_secs_f64() * 1e3;

        // staging = [probs of every layer | hidden | scores of every layer (if kept)]
        let mut probs = data;
        let mut hidden = probs.split_off(l * b * h * t * t);
        let scores = hidden.split_off(b * t * d);
        let layers = |v: Vec<f32>| -> Result<Array5<f32>> {
            let a = Array5::from_shape_vec((l, b, h, t, t), v)
                .map_err(|e| Error::Gpu(e.to_string()))?; // (L, B, H, T, T)
            Ok(a.permuted_axes([1, 0, 2, 3, 4])
                .as_standard_layout()
                .into_owned()) // (B, L, H, T, T)
        };
        let attention = layers(probs)?;
        let hidden =
            Array3::from_shape_vec((b, t, d), hidden).map_err(|e| Error::Gpu(e.to_string()))?;
        let scores = if opts.scores {
            Some(layers(scores)?)
        } else {
            None
        };
        // The [CLS] head is a few hundred multiply-adds: done on the CPU from the read-back states.
        let logits = self.classifier.as_ref().map(|w| {
            let rows: Vec<_> = (0..b)
                .map(|i| classify(w, hidden.index_axis(Axis(0), i).row(0)))
                .collect();
            let n = rows.first().map_or(0, |r| r.len());
            Array2::from_shape_fn((b, n), |(i, j)| rows[i][j])
        });
        timing.readback_ms = reading.elapsed().as_secs_f64() * 1e3;
        Ok((
            Trace {
                attention,
                scores,
                hidden,
                hidden_states: None,
                layer_trace: None,
                logits,
                mask: mask.clone(),
            },
            timing,
        ))
    }

    /// Allocates the buffers for a `(B, T)` batch and records every dispatch of the forward pass.
    fn build_workspace(&self, b: usize, t: usize, opts: &TraceOptions) -> Workspace {
        let keep_scores = opts.scores;
        use wgpu::BufferUsages as U;
        let c = &self.config;
        let (l, h, d) = (c.num_hidden_layers, c.num_attention_heads, c.hidden_size);
        let m = b * t;
        let k = &self.kernels;
        let input = U::STORAGE | U::COPY_DST;
        let ids = k.buffer("ids", m, input);
        let type_ids = k.buffer("type_ids", m, input);
        let mask = k.buffer("mask", b * t * t, input);
        let rw = U::STORAGE | U::COPY_SRC;
        let x = [k.buffer("x0", m * d, rw), k.buffer("x1", m * d, rw)]; // (B·T, D) ping-pong
        let act = Activations {
            qkv: k.buffer("qkv", m * 3 * d, rw),
            ctx: k.buffer("ctx", m * d, rw),
            attn: k.buffer("attn", m * d, rw),
            h: k.buffer("h", m * d, rw),
            normed: k.buffer("normed", m * d, rw),
            ffn_hidden: k.buffer("ffn_hidden", m * c.intermediate_size, rw),
            ffn: k.buffer("ffn", m * d, rw),
        };
        let p_floats = b * h * t * t; // (B, H, T, T)
        let probs: Vec<_> = (0..l)
            .map(|i| k.buffer(&format!("probs{i}"), p_floats, rw))
            .collect();
        let scores: Vec<_> = (0..if keep_scores { l } else { 0 })
            .map(|i| k.buffer(&format!("scores{i}"), p_floats, rw))
            .collect();

        let shape = Shape {
            batch: b as u32,
            seq: t as u32,
            heads: h as u32,
            dim: d as u32,
            act: c.hidden_act,
            scale: opts.scale,
        };
        let mut plan = Plan::new(k);
        plan.embed(
            shape.rows(),
            shape.seq,
            [&ids, &type_ids],
            &self.weights.embeddings,
            &x[0],
        );
        for (i, layer) in self.weights.layers.iter().enumerate() {
            let trace = AttentionTrace {
                mask: &mask,
                scores: scores.get(i),
                probs: &probs[i],
                off: opts.head_mask.layer(i, h),
            };
            let (x_in, x_out) = (&x[i % 2], &x[1 - i % 2]);
            encoder_layer(
                &mut plan,
                c.layer_norm_order,
                &shape,
                layer,
                &act,
                &trace,
                x_in,
                x_out,
            );
        }
        let (dispatches, mut keep) = plan.finish();
        let hidden = x[l % 2].clone();
        let staging_floats = l * p_floats * if keep_scores { 2 } else { 1 } + m * d;
        let staging = k.buffer("staging", staging_floats, U::MAP_READ | U::COPY_DST);
        keep.extend(act.into_buffers());
        keep.extend(x);
        Workspace {
            key: (b, t, opts.clone()),
            ids,
            type_ids,
            mask,
            probs,
            scores,
            hidden,
            staging,
            dispatches,
            _keep: keep,
        }
    }
}

/// The sizes one forward pass records its dispatches for.
struct Shape {
    batch: u32,
    seq: u32,
    heads: u32,
    dim: u32,
    act: Activation,
    scale: ScoreScale,
}

impl Shape {
    /// `B·T`: the rows of every activation.
    fn rows(&self) -> u32 {
        self.batch * self.seq
    }
}

/// The intermediate activations of one layer, reused by every layer.
///
/// # Shapes
/// * `qkv`: `(B·T, 3·D)`, `ffn_hidden`: `(B·T, intermediate)`, the others `(B·T, D)`
struct Activations {
    qkv: wgpu::Buffer,
    ctx: wgpu::Buffer,
    attn: wgpu::Buffer,
    h: wgpu::Buffer,
    normed: wgpu::Buffer,
    ffn_hidden: wgpu::Buffer,
    ffn: wgpu::Buffer,
}

impl Activations {
    fn into_buffers(self) -> [wgpu::Buffer; 7] {
        [
            self.qkv,
            self.ctx,
            self.attn,
            self.h,
            self.normed,
            self.ffn_hidden,
            self.ffn,
        ]
    }
}

/// What one layer's attention leaves for the trace: the mask it applies, its scores (before
/// the mask, when kept) and its probabilities.
struct AttentionTrace<'a> {
    mask: &'a wgpu::Buffer,
    scores: Option<&'a wgpu::Buffer>,
    probs: &'a wgpu::Buffer,
    /// `(H,)`: the heads knocked out, whose context is zero.
    off: Vec<bool>,
}

/// One encoder layer from `x` into `out`, as `cpu::encoder::encoder_layer` computes it:
///
/// * post-LN (BERT): `h = LN₁(x + MHA(x)); out = LN₂(h + FFN(h))`
/// * pre-LN (the seeds): `h = x + MHA(LN₁(x)); out = h + FFN(LN₂(h))`
#[allow(clippy::too_many_arguments)]
fn encoder_layer<'a>(
    plan: &mut Plan<'a>,
    order: LayerNormOrder,
    s: &Shape,
    w: &'a GpuLayer,
    act: &'a Activations,
    trace: &AttentionTrace<'a>,
    x: &'a wgpu::Buffer,
    out: &'a wgpu::Buffer,
) {
    let rows = s.rows();
    match order {
        LayerNormOrder::Post => {
            self_attention(plan, s, w, act, trace, x); // act.attn = MHA(x)
            plan.add_norm(
                AddNorm::AddThenNorm,
                rows,
                [&act.attn, x],
                &w.attention_norm,
                Some(&act.normed),
                Some(&act.h),
            );
            feed_forward(plan, s, w, act, &act.h); // act.ffn = FFN(h)
            plan.add_norm(
                AddNorm::AddThenNorm,
                rows,
                [&act.ffn, &act.h],
                &w.output_norm,
                Some(&act.normed),
                Some(out),
            );
        }
        LayerNormOrder::Pre => {
            plan.add_norm(
                AddNorm::Norm,
                rows,
                [x, x],
                &w.attention_norm,
                None,
                Some(&act.normed),
            );
            self_attention(plan, s, w, act, trace, &act.normed); // act.attn = MHA(LN₁(x))
            plan.add_norm(
                AddNorm::AddThenNorm,
                rows,
                [x, &act.attn],
                &w.output_norm,
                Some(&act.h),
                Some(&act.normed),
            );
            feed_forward(plan, s, w, act, &act.normed); // act.ffn = FFN(LN₂(h))
            plan.add_norm(
                AddNorm::Add,
                rows,
                [&act.h, &act.ffn],
                &w.output_norm,
                Some(out),
                None,
            );
        }
    }
}

/// `act.attn = MHA(x)`: the fused Q/K/V projection, attention per head (its scores and
/// probabilities kept in `trace`), the output projection.
fn self_attention<'a>(
    plan: &mut Plan<'a>,
    s: &Shape,
    w: &'a GpuLayer,
    act: &'a Activations,
    trace: &AttentionTrace<'a>,
    x: &'a wgpu::Buffer,
) {
    plan.linear(s.rows(), x, &w.qkv, None, &act.qkv); // (B·T, 3·D) = [Q | K | V]
    let d = s.dim;
    let layout = AttentionLayout {
        batch: s.batch,
        heads: s.heads,
        n_q: s.seq,
        n_k: s.seq,
        d_k: d / s.heads,
        d_v: d / s.heads,
        q: (3 * d, 0),
        k: (3 * d, d),
        v: (3 * d, 2 * d),
        scale: s.scale,
    };
    let qkv = [&act.qkv; 3];
    plan.attention(
        &layout,
        qkv,
        trace.mask,
        trace.scores,
        trace.probs,
        &act.ctx,
        &trace.off,
    );
    plan.linear(s.rows(), &act.ctx, &w.attn_out, None, &act.attn);
}

/// `act.ffn = dense₂(act(dense₁(x)))`, the activation fused into the first matmul.
fn feed_forward<'a>(
    plan: &mut Plan<'a>,
    s: &Shape,
    w: &'a GpuLayer,
    act: &'a Activations,
    x: &'a wgpu::Buffer,
) {
    plan.linear(s.rows(), x, &w.intermediate, Some(s.act), &act.ffn_hidden);
    plan.linear(s.rows(), &act.ffn_hidden, &w.output, None, &act.ffn);
}
