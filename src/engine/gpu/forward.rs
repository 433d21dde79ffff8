//! The encoder as one sequence of compute dispatches, encoded into one command submission.

use std::sync::Mutex;

use ndarray::{s, Array2, Array3, Array4, Array5, Axis};
use web_time::Instant;

use super::device::GpuDevice;
use super::kernels::{GpuLayer, GpuWeights};
use super::plan::{AddNorm, AttentionLayout, Dispatch, GpuKernels, Plan};
use crate::engine::cpu::encoder::classify;
use crate::engine::{check_input, EmbeddingTrace, LayerTrace, ScoreScale, Trace, TraceOptions};
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
    /// Copying the mapped probabilities (and hidden states, scores, a layer's trace) out into
    /// the trace.
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
    /// What the pass reads back, in the staging buffer's order (see [`Readback`]), each with
    /// its length in floats.
    reads: Vec<(wgpu::Buffer, usize)>,
    staging: wgpu::Buffer,
    dispatches: Vec<Dispatch>,
    /// The intermediate activations and the dispatches' parameters, bound by `dispatches`.
    _keep: Vec<wgpu::Buffer>,
}

/// The order of the staging buffer, written by `build_workspace` and read by `forward`:
///
/// 1. every layer's probabilities, `L × (B, H, T, T)`
/// 2. the last hidden states, `(B·T, D)`
/// 3. every layer's scores, `L × (B, H, T, T)`, when kept
/// 4. the hidden states, `(L+1) × (B·T, D)`, when kept
/// 5. the traced layer, when asked: its input `(B·T, D)`, `[Q | K | V]` `(B·T, 3·D)`, context,
///    attention output `(B·T, D)`, pre-activation and intermediate `(B·T, I)`, output
///    `(B·T, D)`; then, with the embeddings' steps, their parts `(4, B·T, D)` and their output
struct Readback {
    data: Vec<f32>,
    at: usize,
}

impl Readback {
    /// The next `n` floats.
    fn take(&mut self, n: usize) -> Vec<f32> {
        let out = self.data[self.at..self.at + n].to_vec();
        self.at += n;
        out
    }

    /// The next `(B·T, cols)` block as `(B, T, cols)`.
    fn rows(&mut self, b: usize, t: usize, cols: usize) -> Result<Array3<f32>> {
        Array3::from_shape_vec((b, t, cols), self.take(b * t * cols)).map_err(gpu_shape)
    }
}

fn gpu_shape(e: ndarray::ShapeError) -> Error {
    Error::Gpu(e.to_string())
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
    /// the scores, every layer's hidden states and one layer's intermediate values when asked).
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
        q.write_buffer(&ws.mask, 0, bytemuck::cast_slice(&mask.to_bits()));
        timing.upload_ms = start.elapsed().as_secs_f64() * 1e3;

        let computing = Instant::now();
        let mut enc = self.kernels.encode(&ws.dispatches);
        let mut offset = 0u64;
        for (buf, floats) in &ws.reads {
            let bytes = (floats * 4) as u64;
            enc.copy_buffer_to_buffer(buf, 0, &ws.staging, offset, bytes);
            offset += bytes;
        }
        q.submit([enc.finish()]);
        let data = self.kernels.read(&ws.staging, offset).await?;
        // back to the pool only after a clean pass (a failed one may leave staging mapped)
        if let Ok(mut slot) = self.workspace.lock() {
            *slot = Some(ws);
        }
        let reading = Instant::now();
        timing.compute_ms = (reading - computing).as_secs_f64() * 1e3;

        let mut rb = Readback { data, at: 0 }; // in the order `Readback` documents
        let p_floats = b * h * t * t;
        let layers = |v: Vec<f32>| -> Result<Array5<f32>> {
            let a = Array5::from_shape_vec((l, b, h, t, t), v).map_err(gpu_shape)?; // (L, B, H, T, T)
            Ok(a.permuted_axes([1, 0, 2, 3, 4])
                .as_standard_layout()
                .into_owned()) // (B, L, H, T, T)
        };
        let attention = layers(rb.take(l * p_floats))?;
        let hidden = rb.rows(b, t, d)?;
        let scores = if opts.scores {
            Some(layers(rb.take(l * p_floats))?)
        } else {
            None
        };
        let hidden_states = if opts.hidden_states {
            let a = Array4::from_shape_vec((l + 1, b, t, d), rb.take((l + 1) * b * t * d))
                .map_err(gpu_shape)?; // (L+1, B, T, D)
            Some(
                a.permuted_axes([1, 0, 2, 3])
                    .as_standard_layout()
                    .into_owned(),
            ) // (B, L+1, T, D)
        } else {
            None
        };
        let layer_trace = match opts.layer_trace {
            Some(layer) => Some(read_layer_trace(&mut rb, layer, opts, c, b, t)?),
            None => None,
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
                hidden_states,
                layer_trace,
                logits,
                mask: mask.clone(),
            },
            timing,
        ))
    }

    /// Allocates the buffers for a `(B, T)` batch and records every dispatch of the forward pass.
    fn build_workspace(&self, b: usize, t: usize, opts: &TraceOptions) -> Workspace {
        use wgpu::BufferUsages as U;
        let c = &self.config;
        let (l, h, d) = (c.num_hidden_layers, c.num_attention_heads, c.hidden_size);
        let m = b * t;
        let k = &self.kernels;
        let input = U::STORAGE | U::COPY_DST;
        let ids = k.buffer("ids", m, input);
        let type_ids = k.buffer("type_ids", m, input);
        let mask = k.buffer("mask", b * t * Mask::words_per_row(t), input);
        let rw = U::STORAGE | U::COPY_SRC;
        // The hidden states between layers, (B·T, D) each: two in turn, or all L+1 when they,
        // or a traced layer's input and output, are read back.
        let keep_states = opts.hidden_states || opts.layer_trace.is_some();
        let x: Vec<_> = (0..if keep_states { l + 1 } else { 2 })
            .map(|i| k.buffer(&format!("x{i}"), m * d, rw))
            .collect();
        let state = |i: usize| &x[if keep_states { i } else { i % 2 }];
        // Every layer reuses one set of activations; a traced layer has its own, so the layers
        // after it leave its values to be read back.
        let act = Activations::new(k, m, d, c.intermediate_size, false);
        let traced = opts
            .layer_trace
            .map(|_| Activations::new(k, m, d, c.intermediate_size, true));
        let parts = traced_embeddings(opts).then(|| k.buffer("embedding_parts", 4 * m * d, rw));
        let p_floats = b * h * t * t; // (B, H, T, T)
        let probs: Vec<_> = (0..l)
            .map(|i| k.buffer(&format!("probs{i}"), p_floats, rw))
            .collect();
        let scores: Vec<_> = (0..if opts.scores { l } else { 0 })
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
        let tokens = [&ids, &type_ids];
        if let Some(parts) = &parts {
            plan.embed_parts(
                shape.rows(),
                shape.seq,
                tokens,
                &self.weights.embeddings,
                parts,
            );
        }
        plan.embed(
            shape.rows(),
            shape.seq,
            tokens,
            &self.weights.embeddings,
            state(0),
        );
        for (i, layer) in self.weights.layers.iter().enumerate() {
            let trace = AttentionTrace {
                mask: &mask,
                scores: scores.get(i),
                probs: &probs[i],
                off: opts.head_mask.layer(i, h),
            };
            let act = match (&traced, opts.layer_trace) {
                (Some(own), Some(traced_layer)) if traced_layer == i => own,
                _ => &act,
            };
            encoder_layer(
                &mut plan,
                c.layer_norm_order,
                &shape,
                layer,
                act,
                &trace,
                state(i),
                state(i + 1),
            );
        }
        let (dispatches, mut keep) = plan.finish();

        // what is read back, in the order `Readback` documents
        let mut reads: Vec<(wgpu::Buffer, usize)> = Vec::new();
        reads.extend(probs.iter().map(|p| (p.clone(), p_floats)));
        reads.push((state(l).clone(), m * d));
        reads.extend(scores.iter().map(|s| (s.clone(), p_floats)));
        if opts.hidden_states {
            reads.extend((0..=l).map(|i| (state(i).clone(), m * d)));
        }
        if let (Some(layer), Some(a)) = (opts.layer_trace, &traced) {
            let i = c.intermediate_size;
            reads.push((state(layer).clone(), m * d));
            reads.push((a.qkv.clone(), m * 3 * d));
            reads.push((a.ctx.clone(), m * d));
            reads.push((a.h.clone(), m * d)); // the attention block's output (see encoder_layer)
            if let Some(pre) = &a.pre_activation {
                reads.push((pre.clone(), m * i));
            }
            reads.push((a.ffn_hidden.clone(), m * i));
            reads.push((state(layer + 1).clone(), m * d));
            if let Some(parts) = &parts {
                reads.push((parts.clone(), 4 * m * d));
                reads.push((state(0).clone(), m * d));
            }
        }
        let staging_floats = reads.iter().map(|(_, n)| n).sum();
        let staging = k.buffer("staging", staging_floats, U::MAP_READ | U::COPY_DST);
        keep.extend(act.into_buffers());
        keep.extend(traced.into_iter().flat_map(Activations::into_buffers));
        keep.extend(parts);
        keep.extend(x);
        keep.extend(probs);
        keep.extend(scores);
        Workspace {
            key: (b, t, opts.clone()),
            ids,
            type_ids,
            mask,
            reads,
            staging,
            dispatches,
            _keep: keep,
        }
    }
}

/// Whether a layer trace keeps the embeddings' steps: always for layer 0, the layer they
/// feed, and for any layer when asked.
fn traced_embeddings(opts: &TraceOptions) -> bool {
    opts.layer_trace
        .is_some_and(|layer| layer == 0 || opts.embeddings)
}

/// The traced layer's values from the read-back (after the hidden states), as the CPU engine
/// reports them.
///
/// # Shapes
/// * see [`LayerTrace`]; `[Q | K | V]` comes back as one `(B·T, 3·D)` block and is split here
fn read_layer_trace(
    rb: &mut Readback,
    layer: usize,
    opts: &TraceOptions,
    c: &Config,
    b: usize,
    t: usize,
) -> Result<LayerTrace> {
    let (d, i) = (c.hidden_size, c.intermediate_size);
    let input = rb.rows(b, t, d)?;
    let qkv = rb.rows(b, t, 3 * d)?; // (B, T, 3·D) = [Q | K | V]
    let part = |j: usize| qkv.slice(s![.., .., j * d..(j + 1) * d]).to_owned();
    let (q, k, v) = (part(0), part(1), part(2));
    let context = rb.rows(b, t, d)?;
    let attention_output = rb.rows(b, t, d)?;
    let pre_activation = rb.rows(b, t, i)?;
    let intermediate = rb.rows(b, t, i)?;
    let output = rb.rows(b, t, d)?;
    let embeddings = if traced_embeddings(opts) {
        let parts =
            Array4::from_shape_vec((4, b, t, d), rb.take(4 * b * t * d)).map_err(gpu_shape)?; // (4, B, T, D)
        let part = |j: usize| parts.index_axis(Axis(0), j).to_owned();
        Some(EmbeddingTrace {
            word: part(0),
            position: part(1),
            token_type: part(2),
            sum: part(3),
            normed: rb.rows(b, t, d)?,
        })
    } else {
        None
    };
    Ok(LayerTrace {
        layer,
        embeddings,
        input,
        q,
        k,
        v,
        context,
        attention_output,
        pre_activation,
        intermediate,
        output,
    })
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

/// The intermediate activations of one layer: one set reused by every layer, and a traced
/// layer's own.
///
/// # Shapes
/// * `qkv`: `(B·T, 3·D)`, `ffn_hidden` and `pre_activation`: `(B·T, intermediate)`, the others
///   `(B·T, D)`
struct Activations {
    qkv: wgpu::Buffer,
    ctx: wgpu::Buffer,
    attn: wgpu::Buffer,
    h: wgpu::Buffer,
    normed: wgpu::Buffer,
    ffn_hidden: wgpu::Buffer,
    ffn: wgpu::Buffer,
    /// The feed-forward's first projection before its activation, kept for a traced layer (the
    /// pass itself fuses the activation into that matmul).
    pre_activation: Option<wgpu::Buffer>,
}

impl Activations {
    fn new(k: &GpuKernels, m: usize, d: usize, inter: usize, pre_activation: bool) -> Self {
        let rw = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        Self {
            qkv: k.buffer("qkv", m * 3 * d, rw),
            ctx: k.buffer("ctx", m * d, rw),
            attn: k.buffer("attn", m * d, rw),
            h: k.buffer("h", m * d, rw),
            normed: k.buffer("normed", m * d, rw),
            ffn_hidden: k.buffer("ffn_hidden", m * inter, rw),
            ffn: k.buffer("ffn", m * d, rw),
            pre_activation: pre_activation.then(|| k.buffer("pre_activation", m * inter, rw)),
        }
    }

    fn into_buffers(self) -> Vec<wgpu::Buffer> {
        let mut out = vec![
            self.qkv,
            self.ctx,
            self.attn,
            self.h,
            self.normed,
            self.ffn_hidden,
            self.ffn,
        ];
        out.extend(self.pre_activation);
        out
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

/// `act.ffn = dense₂(act(dense₁(x)))`, the activation fused into the first matmul (for a traced
/// layer, `dense₁(x)` is also written without it, to `act.pre_activation`).
fn feed_forward<'a>(
    plan: &mut Plan<'a>,
    s: &Shape,
    w: &'a GpuLayer,
    act: &'a Activations,
    x: &'a wgpu::Buffer,
) {
    if let Some(pre) = &act.pre_activation {
        plan.linear(s.rows(), x, &w.intermediate, None, pre);
    }
    plan.linear(s.rows(), x, &w.intermediate, Some(s.act), &act.ffn_hidden);
    plan.linear(s.rows(), &act.ffn_hidden, &w.output, None, &act.ffn);
}
