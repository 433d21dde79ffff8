//! An encoder–decoder's translation on the GPU: the driver is the CPU's
//! ([`crate::engine::translate`]); the passes are recorded once per translation and replayed.
//!
//! A greedy decoding records two passes that share one cache ([`GpuCache`]): the first step
//! (the encoder, the cross-attention's keys and values of its output written to the cache once,
//! the decoder for position 0) and every later step (the decoder for one position). Each step
//! writes its new keys and values to the cache's row `t` of each item (`scatter.wgsl`, at rows
//! the host names) and attends over all `T_max` rows under a mask that allows `0..=t`: so a
//! step changes only what the host writes (ids, masks, rows), never a buffer or a dispatch.

use web_time::Instant;

use super::forward::{GpuEngine, Shape};
use super::record::{GpuCache, Recording};
use crate::engine::network::EngineOps;
use crate::engine::network::Loaded;
use crate::engine::trace::TargetInputs;
use crate::engine::translate::{
    check_greedy, cross_mask, decode, logits_of, pass_options, source_inputs, stack_layers,
    step_inputs, EncoderDecoder, Pass, Passes, StackMasks,
};
use crate::engine::{Decoding, TraceOptions, Translation};
use crate::error::Result;
use crate::masks::Mask;
use crate::model::Encoded;

impl GpuEngine {
    /// Translates `sources` with an encoder–decoder `model` on the GPU (see
    /// [`crate::engine::translate`]).
    pub async fn translate(
        &self,
        model: &dyn Loaded,
        sources: &[&str],
        decoding: &Decoding,
    ) -> Result<Translation> {
        let passes_of = EncoderDecoder::translating(model)?;
        self.kernels.dev.check()?;
        let source = model.tokenizer().encode(sources, None)?;
        let rows_per_item = match decoding {
            Decoding::Greedy { max_new_tokens } => {
                check_greedy(model, &source, *max_new_tokens)?;
                *max_new_tokens
            }
            Decoding::Forced(_) => 1,
        };
        let mut passes = GpuPasses {
            engine: self,
            model,
            passes_of,
            source: &source,
            encoder_mask: Mask::padding(source.valid.view()),
            cross: cross_mask(&source.valid, 1),
            cache: GpuCache::new(&self.kernels, source.batch(), rows_per_item),
            first: None,
            rest: None,
            opts: pass_options(),
        };
        decode(model, &mut passes, &source, decoding).await
    }
}

/// A recorded pass and its staging buffer.
struct Recorded {
    recording: Recording,
    staging: wgpu::Buffer,
}

/// The GPU's passes of one translation.
struct GpuPasses<'e> {
    engine: &'e GpuEngine,
    model: &'e dyn Loaded,
    /// The model's passes, which this records.
    passes_of: EncoderDecoder<'e>,
    source: &'e Encoded,
    encoder_mask: Mask,
    /// `(B, 1, S)`: a step's cross-attention mask.
    cross: Mask,
    cache: GpuCache,
    /// The first step's pass and every later step's, recorded when first run.
    first: Option<Recorded>,
    rest: Option<Recorded>,
    opts: TraceOptions,
}

impl<'e> GpuPasses<'e> {
    /// Records a pass over `lens` positions (source, target), with the cache or without.
    fn record(
        &mut self,
        lens: [usize; 2],
        cached: bool,
        f: impl FnOnce(EncoderDecoder<'e>, &mut super::record::Recorder) -> Result<()>,
    ) -> Result<Recorded> {
        let c = &self.model.config();
        let shape = Shape {
            batch: self.source.batch(),
            lens,
            layers: stack_layers(self.model)?,
            trace_layers: c.num_hidden_layers,
        };
        let m = self.passes_of;
        let cache = cached.then_some(&mut self.cache);
        let recording = self
            .engine
            .record(shape, &self.opts, cache, |rec| f(m, rec))?;
        let staging = self.engine.staging_for(&recording);
        Ok(Recorded { recording, staging })
    }

    /// Runs `pass` over the source and `target` under the source's padding, `decoder` and
    /// `cross`, the host first writing `writes`: the attentions it kept and the logits.
    async fn replay(
        &self,
        pass: &Recorded,
        target: TargetInputs,
        decoder: &Mask,
        cross: &Mask,
        writes: &[(&wgpu::Buffer, Vec<u32>)],
        start: Instant,
    ) -> Result<Pass> {
        let masks = StackMasks {
            encoder: &self.encoder_mask,
            decoder,
            cross,
        };
        let inputs = source_inputs(self.source, target);
        let b = self.source.batch();
        let (groups, kept, _) = self
            .engine
            .replay(
                &pass.recording,
                &pass.staging,
                &inputs,
                &masks.into(),
                b,
                writes,
                start,
                None,
            )
            .await?;
        Ok(Pass {
            groups,
            logits: logits_of(kept)?,
        })
    }
}

impl Passes for GpuPasses<'_> {
    async fn step(&mut self, t: usize, tokens: &[u32]) -> Result<Pass> {
        let start = Instant::now();
        let (b, s) = self.source.ids.dim();
        if t == 0 && self.first.is_none() {
            let r = self.record([s, 1], true, |m, rec| m.forward(EngineOps::Gpu(rec)))?;
            self.first = Some(r);
        }
        if t > 0 && self.rest.is_none() {
            let r = self.record([s, 1], true, |m, rec| m.decode_cached(EngineOps::Gpu(rec)))?;
            self.rest = Some(r);
        }
        let pass = if t == 0 { &self.first } else { &self.rest };
        let Some(pass) = pass.as_ref() else {
            unreachable!("recorded above")
        };
        let n = self.cache.rows_per_item;
        // the step sees the positions written so far, 0..=t, of the cache's n
        let decoder = Mask::explicit(ndarray::Array3::from_shape_fn((b, 1, n), |(_, _, j)| {
            j <= t
        }));
        let rows_at: Vec<u32> = (0..b).map(|i| (i * n + t) as u32).collect();
        let writes = [(&self.cache.rows_at, rows_at)];
        let target = step_inputs(t, tokens);
        self.replay(pass, target, &decoder, &self.cross, &writes, start)
            .await
    }

    async fn whole(&mut self, target: TargetInputs, decoder: &Mask, cross: &Mask) -> Result<Pass> {
        let start = Instant::now();
        let s = self.source.ids.ncols();
        let t = target.tokens.ncols();
        let pass = self.record([s, t], false, |m, rec| m.forward(EngineOps::Gpu(rec)))?;
        self.replay(&pass, target, decoder, cross, &[], start).await
    }
}
