//! The encoder as one sequence of compute dispatches, encoded into one command submission.

use std::sync::Mutex;

use ndarray::{Array2, Array3, Array5, Axis};
use web_time::Instant;

use super::device::GpuDevice;
use super::kernels::GpuWeights;
use super::plan::{grid, AttentionLayout, GpuKernels, Kernel, Plan, Step};
use crate::engine::cpu::encoder::classify;
use crate::engine::{check_input, Trace, TraceOptions};
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::{Config, Encoded, LayerNormOrder, Model};

/// Where a GPU forward pass spent its time, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuTiming {
    /// Writing ids, token types and the mask (and building buffers for a new shape).
    pub upload_ms: f64,
    /// The dispatches of every layer, submitted and finished.
    pub compute_ms: f64,
    /// Copying the probabilities (and hidden states, scores) out and mapping them.
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
    workspace: Mutex<Option<Workspace>>,
}

/// Buffers, bind groups and the dispatch list for one `(B, T, keep_scores)`.
struct Workspace {
    key: (usize, usize, bool),
    ids: wgpu::Buffer,
    type_ids: wgpu::Buffer,
    mask: wgpu::Buffer,
    /// `(B, H, T, T)` per layer
    probs: Vec<wgpu::Buffer>,
    /// `(B, H, T, T)` per layer when scores are kept, else one reused buffer
    scores: Vec<wgpu::Buffer>,
    /// `(B·T, D)`
    hidden: wgpu::Buffer,
    staging: wgpu::Buffer,
    steps: Vec<Step>,
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
            workspace: Mutex::new(None),
        })
    }

    pub fn device(&self) -> &GpuDevice {
        &self.kernels.dev
    }

    /// `gpu: <adapter> (<API>)`
    pub fn describe(&self) -> String {
        self.kernels.dev.describe()
    }

    /// Runs the encoder; `split` submits upload, compute and read-back separately so the
    /// benchmark can time each (otherwise the whole pass is one submission).
    pub async fn forward(
        &self,
        model: &Model,
        input: &Encoded,
        mask: &Mask,
        opts: TraceOptions,
        split: bool,
    ) -> Result<(Trace, GpuTiming)> {
        let c = &self.config;
        check_input(c, input, mask)?;
        self.kernels.dev.check()?;
        let (b, t) = input.ids.dim();
        let (l, h, d) = (c.num_hidden_layers, c.num_attention_heads, c.hidden_size);
        let mut timing = GpuTiming::default();
        let start = Instant::now();

        // Take the pooled workspace out while we use it (no lock is held across an await): a
        // concurrent call finds none and builds its own rather than waiting.
        let key = (b, t, opts.scores);
        let pooled = self
            .workspace
            .lock()
            .map_err(|_| Error::Gpu("workspace lock poisoned".into()))?
            .take()
            .filter(|w| w.key == key);
        let ws = match pooled {
            Some(ws) => ws,
            None => self.build_workspace(b, t, opts.scores),
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
        if split {
            q.submit([]);
            self.kernels.wait()?;
        }
        timing.upload_ms = start.elapsed().as_secs_f64() * 1e3;

        let t1 = Instant::now();
        let mut enc = self.kernels.encode(&ws.steps);
        if split {
            q.submit([enc.finish()]);
            self.kernels.wait()?;
            timing.compute_ms = t1.elapsed().as_secs_f64() * 1e3;
            enc = self
                .kernels
                .dev
                .device
                .create_command_encoder(&Default::default());
        }
        let t2 = Instant::now();
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
        let elapsed = t2.elapsed().as_secs_f64() * 1e3;
        if split {
            timing.readback_ms = elapsed;
        } else {
            timing.compute_ms = t1.elapsed().as_secs_f64() * 1e3;
        }

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
        let logits = model.weights.classifier.as_ref().map(|w| {
            let rows: Vec<_> = (0..b)
                .map(|i| classify(w, hidden.index_axis(Axis(0), i).row(0)))
                .collect();
            let n = rows.first().map_or(0, |r| r.len());
            Array2::from_shape_fn((b, n), |(i, j)| rows[i][j])
        });
        Ok((
            Trace {
                attention,
                scores,
                hidden,
                logits,
                mask: mask.clone(),
            },
            timing,
        ))
    }

    /// Allocates the buffers for a `(B, T)` batch and records every dispatch of the forward pass.
    fn build_workspace(&self, b: usize, t: usize, keep_scores: bool) -> Workspace {
        use wgpu::BufferUsages as U;
        let c = &self.config;
        let (l, h, d, inter) = (
            c.num_hidden_layers,
            c.num_attention_heads,
            c.hidden_size,
            c.intermediate_size,
        );
        let m = b * t;
        let rw = U::STORAGE | U::COPY_SRC;
        let input = U::STORAGE | U::COPY_DST;
        let ids = self.kernels.buffer("ids", m, input);
        let type_ids = self.kernels.buffer("type_ids", m, input);
        let mask = self.kernels.buffer("mask", b * t * t, input);
        let x = [
            self.kernels.buffer("x0", m * d, rw),
            self.kernels.buffer("x1", m * d, rw),
        ]; // (B·T, D) ping-pong
        let qkv = self.kernels.buffer("qkv", m * 3 * d, rw); // (B·T, 3·D)
        let ctx = self.kernels.buffer("ctx", m * d, rw);
        let attn_out = self.kernels.buffer("attn_out", m * d, rw);
        let hbuf = self.kernels.buffer("h", m * d, rw);
        let normed = self.kernels.buffer("normed", m * d, rw);
        let scratch = self.kernels.buffer("scratch", m * d, rw);
        let ffn_in = self.kernels.buffer("intermediate", m * inter, rw); // (B·T, I)
        let ffn = self.kernels.buffer("ffn", m * d, rw);
        let p_floats = b * h * t * t; // (B, H, T, T)
        let probs: Vec<_> = (0..l)
            .map(|i| self.kernels.buffer(&format!("probs{i}"), p_floats, rw))
            .collect();
        let scores: Vec<_> = (0..if keep_scores { l } else { 1 })
            .map(|i| self.kernels.buffer(&format!("scores{i}"), p_floats, rw))
            .collect();

        let e = &self.weights;
        let (m32, d32, t32, h32) = (m as u32, d as u32, t as u32, h as u32);
        let dk = (d / h) as u32;
        let mut plan = Plan::new(&self.kernels);
        plan.push(
            Kernel::Embed,
            &[m32, d32, t32, e.embed_norm.eps.to_bits()],
            vec![
                &ids,
                &type_ids,
                &e.word,
                &e.position,
                &e.token_type,
                &e.embed_norm.gamma,
                &e.embed_norm.beta,
                &x[0],
            ],
            grid(m32),
        );
        let mut cur = 0;
        for (li, layer) in e.layers.iter().enumerate() {
            let (xin, xout) = (&x[cur], &x[1 - cur]);
            let sc = &scores[if keep_scores { li } else { 0 }];
            let pr = &probs[li];
            let attn_input = match c.layer_norm_order {
                LayerNormOrder::Post => xin,
                LayerNormOrder::Pre => {
                    plan.add_norm(
                        m32,
                        d32,
                        0,
                        xin,
                        &e.dummy,
                        &layer.attention_norm,
                        &scratch,
                        &normed,
                    );
                    &normed
                }
            };
            plan.matmul(m32, attn_input, &layer.qkv, &qkv);
            let layout = AttentionLayout {
                batch: b as u32,
                heads: h32,
                n_q: t32,
                n_k: t32,
                d_k: dk,
                d_v: dk,
                q: (3 * d32, 0),
                k: (3 * d32, d32),
                v: (3 * d32, 2 * d32),
            };
            plan.attention(&layout, [&qkv, &qkv, &qkv], &mask, sc, pr, &ctx);
            plan.matmul(m32, &ctx, &layer.attn_out, &attn_out);
            let ffn_input = match c.layer_norm_order {
                LayerNormOrder::Post => {
                    plan.add_norm(
                        m32,
                        d32,
                        1,
                        &attn_out,
                        xin,
                        &layer.attention_norm,
                        &scratch,
                        &hbuf,
                    );
                    &hbuf
                }
                LayerNormOrder::Pre => {
                    plan.add_norm(
                        m32,
                        d32,
                        1,
                        xin,
                        &attn_out,
                        &layer.output_norm,
                        &hbuf,
                        &normed,
                    );
                    &normed
                }
            };
            plan.matmul(m32, ffn_input, &layer.intermediate, &ffn_in);
            let n_inter = (m * inter) as u32;
            plan.activation(n_inter, c.hidden_act, &ffn_in);
            plan.matmul(m32, &ffn_in, &layer.output, &ffn);
            match c.layer_norm_order {
                LayerNormOrder::Post => {
                    plan.add_norm(m32, d32, 1, &ffn, &hbuf, &layer.output_norm, &scratch, xout)
                }
                LayerNormOrder::Pre => {
                    plan.add_norm(m32, d32, 2, &hbuf, &ffn, &layer.output_norm, xout, &scratch)
                }
            }
            cur = 1 - cur;
        }
        let (steps, mut keep) = plan.finish();
        let hidden = x[cur].clone();
        let staging_floats = l * p_floats * if keep_scores { 2 } else { 1 } + m * d;
        let staging = self
            .kernels
            .buffer("staging", staging_floats, U::MAP_READ | U::COPY_DST);
        keep.extend([qkv, ctx, attn_out, hbuf, normed, scratch, ffn_in, ffn]);
        keep.extend(x);
        Workspace {
            key: (b, t, keep_scores),
            ids,
            type_ids,
            mask,
            probs,
            scores,
            hidden,
            staging,
            steps,
            _keep: keep,
        }
    }
}
