//! A decoder-only model's greedy generation on the GPU: the driver is the CPU's
//! ([`crate::engine::generate`]); the passes are recorded once per generation and replayed.
//!
//! A generation records two passes that share one cache ([`GpuCache`], `N` rows: every position
//! the model will be fed, `N = P + max_new_tokens − 1`): the prefill (the prompt's `P` tokens,
//! their keys and values written to the cache's rows `0..P`) and a step (one token at position
//! `n`, its keys and values written to row `n`), replayed for every new token. Each pass
//! attends over all `N` rows under a mask that allows a query at position `i` the rows
//! `0..=i`: the rows not written yet are zero and masked, their probabilities exactly 0, and
//! the host cuts each pass's attention to the positions so far. So a step changes only what
//! the host writes (ids, positions, the mask, the cache rows), never a buffer or a dispatch.

use std::borrow::Borrow;

use ndarray::{s, Array3};
use web_time::Instant;

use crate::engine::network::EngineOps;

use super::forward::{GpuEngine, Shape};
use super::record::{GpuCache, Recording};
use crate::engine::cpu::exec::StackLayers;
use crate::engine::generate::{check, pass_inputs, run, StepPass, Steps};
use crate::engine::network::Loaded;
use crate::engine::ops::{AttentionKind, PassMasks, Stack};
use crate::engine::trace::AttentionGroup;
use crate::engine::{GenerateOptions, Generation, TraceOptions};
use crate::error::Result;
use crate::masks::Mask;

impl GpuEngine {
    /// Writes after `prompt` greedily with a decoder-only `model` on the GPU (see
    /// [`crate::engine::generate()`], the CPU's, which it equals).
    pub async fn generate(
        &self,
        model: &dyn Loaded,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<Generation> {
        check(model, prompt, opts)?;
        let mut steps = GpuSteps::new(self, model, prompt.len(), opts)?;
        run(model, &mut steps, prompt, opts).await
    }
}

/// A recorded pass and its staging buffer.
struct Recorded {
    recording: Recording,
    staging: wgpu::Buffer,
}

/// The GPU's passes of one generation; `E` and `M` hold the engine and the model (references,
/// or, for a generation the page drives a step at a time, the session's shared `Rc` of the
/// engine and `Arc` of the model).
pub struct GpuSteps<E: Borrow<GpuEngine>, M: Loaded> {
    engine: E,
    model: M,
    cache: GpuCache,
    /// The prefill's pass and every step's, recorded when first run.
    prefill: Option<Recorded>,
    step: Option<Recorded>,
    opts: TraceOptions,
    top_k: usize,
}

impl<E: Borrow<GpuEngine>, M: Loaded> GpuSteps<E, M> {
    /// The passes of a generation after a prompt of `prompt_len` tokens, with a cache of every
    /// position it will feed (`prompt_len + opts.max_new_tokens − 1`).
    pub fn new(engine: E, model: M, prompt_len: usize, opts: &GenerateOptions) -> Result<Self> {
        engine.borrow().kernels.dev.check()?;
        let positions = prompt_len + opts.max_new_tokens - 1;
        let cache = GpuCache::new(&engine.borrow().kernels, 1, positions);
        Ok(Self {
            engine,
            model,
            cache,
            prefill: None,
            step: None,
            opts: TraceOptions {
                next_logits: true,
                head_mask: opts.head_mask.clone(),
                ..TraceOptions::default()
            },
            top_k: opts.top_k,
        })
    }

    /// What runs the passes: `gpu: <adapter> (<API>)`.
    pub fn describe(&self) -> String {
        self.engine.borrow().describe()
    }

    /// Records the decoder over `n` positions, reading and writing the cache.
    fn record(&mut self, n: usize) -> Result<Recorded> {
        let model = &self.model;
        let layers = model.config().num_hidden_layers;
        let shape = Shape {
            batch: 1,
            lens: [n, 0],
            layers: StackLayers::single(Stack::Decoder, layers),
            trace_layers: layers,
        };
        let engine = self.engine.borrow();
        let recording = engine.record(shape, &self.opts, Some(&mut self.cache), |rec| {
            model.run(EngineOps::Gpu(rec))
        })?;
        let staging = engine.staging_for(&recording);
        Ok(Recorded { recording, staging })
    }

    /// Replays `pass` over `ids` at positions `first..first + n`: their keys and values to the
    /// cache's rows `first..first + n`, each attending to the rows up to its own. The attention
    /// `(1, L, H, n, first + n)`, the logits of the last position and the likeliest tokens
    /// after it.
    async fn replay(&self, pass: &Recorded, ids: &[u32], first: usize) -> Result<StepPass> {
        let start = Instant::now();
        let (n, rows) = (ids.len(), self.cache.rows_per_item);
        let mask = Mask::explicit(Array3::from_shape_fn((1, n, rows), |(_, i, j)| {
            j <= first + i
        }));
        let rows_at: Vec<u32> = (first..first + n).map(|r| r as u32).collect();
        let (mut groups, kept, timing) = self
            .engine
            .borrow()
            .replay(
                &pass.recording,
                &pass.staging,
                &pass_inputs(ids, first),
                &PassMasks::single(Stack::Decoder, &mask),
                1,
                &[(&self.cache.rows_at, rows_at)],
                start,
                None,
            )
            .await?;
        let all = AttentionGroup::take(&mut groups, Stack::Decoder, AttentionKind::SelfAttention)?;
        // the rows past the pass's last position are masked: exactly 0, and not shown
        let attention = all.probs.slice(s![.., .., .., .., ..first + n]).to_owned();
        let mut pass = StepPass::new(attention, kept, self.top_k)?;
        pass.gpu = Some(timing);
        Ok(pass)
    }
}

impl<E: Borrow<GpuEngine>, M: Loaded> Steps for GpuSteps<E, M> {
    async fn prefill(&mut self, ids: &[u32]) -> Result<StepPass> {
        if self.prefill.is_none() {
            self.prefill = Some(self.record(ids.len())?);
        }
        let Some(pass) = self.prefill.as_ref() else {
            unreachable!("recorded above")
        };
        self.replay(pass, ids, 0).await
    }

    async fn step(&mut self, n: usize, token: u32) -> Result<StepPass> {
        if self.step.is_none() {
            self.step = Some(self.record(1)?);
        }
        let Some(pass) = self.step.as_ref() else {
            unreachable!("recorded above")
        };
        self.replay(pass, &[token], n).await
    }

    /// (0 for a pass not recorded yet)
    fn dispatches(&self) -> Option<(usize, usize)> {
        let count = |r: &Option<Recorded>| r.as_ref().map_or(0, |r| r.recording.dispatches.len());
        Some((count(&self.prefill), count(&self.step)))
    }
}
