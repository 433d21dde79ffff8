//! Choosing an engine, with an honest fallback: the GPU when asked for and available, the CPU
//! otherwise, and every result names what really ran.

#[cfg(feature = "gpu")]
use std::rc::Rc;
use std::sync::Arc;

use web_time::Instant;

#[cfg(feature = "gpu")]
use super::gpu::{GpuDevice, GpuEngine};
use super::{
    cpu, Decoding, GenerateOptions, Generation, Numerics, Trace, TraceOptions, Translation,
};
use crate::engine::network::Loaded;
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::Encoded;

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    Cpu,
    /// The GPU or an error: never a silent CPU run.
    Gpu,
    /// The GPU when an adapter exists, else the CPU (saying why).
    Auto,
}

impl std::str::FromStr for BackendChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(Self::Cpu),
            "gpu" => Ok(Self::Gpu),
            "auto" => Ok(Self::Auto),
            _ => Err(Error::Input(format!(
                "unknown backend {s:?} (expected cpu, gpu or auto)"
            ))),
        }
    }
}

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

/// One forward pass and what ran it.
pub struct Run {
    pub trace: Trace,
    /// `"cpu"` or `"gpu: <adapter> (<API>)"`.
    pub backend: String,
    /// Why the CPU ran although the GPU was wanted.
    pub fallback: Option<String>,
    pub elapsed_ms: f64,
    #[cfg(feature = "gpu")]
    pub gpu_timing: Option<GpuTiming>,
}

/// A generation and the engine that ran it.
pub struct GenerationRun {
    pub generation: Generation,
    /// `"cpu"` or `"gpu: <adapter> (<API>)"`.
    pub backend: String,
    /// Why the CPU ran although the GPU was wanted.
    pub fallback: Option<String>,
}

/// The numerics a run on `backend` (a [`Run`]'s or [`GenerationRun`]'s) computed in when
/// `asked` was asked for: the GPU engine's are always exact.
pub fn numerics_of(backend: &str, asked: Numerics) -> Numerics {
    match backend {
        "cpu" => asked,
        _ => Numerics::Exact,
    }
}

/// A model (a loaded checkpoint: `crate::Model`) and the engine that runs it.
pub struct Runner<M: Loaded> {
    model: Arc<M>,
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))] // what a GPU failure falls back by
    choice: BackendChoice,
    #[cfg(feature = "gpu")]
    gpu: Option<Rc<GpuEngine>>,
    /// Why there is no GPU engine, when one was wanted.
    unavailable: Option<String>,
}

impl<M: Loaded> Runner<M> {
    /// Sets up the chosen backend for `model`, acquiring a GPU device when needed.
    pub async fn new(model: impl Into<Arc<M>>, choice: BackendChoice) -> Result<Self> {
        let model = model.into();
        let mut runner = Self {
            model,
            choice,
            #[cfg(feature = "gpu")]
            gpu: None,
            unavailable: None,
        };
        if choice == BackendChoice::Cpu {
            return Ok(runner);
        }
        #[cfg(not(feature = "gpu"))]
        {
            let why = "attnscope was built without the GPU engine (the `gpu` feature)";
            if choice == BackendChoice::Gpu {
                return Err(Error::Gpu(why.into()));
            }
            runner.unavailable = Some(why.into());
        }
        #[cfg(feature = "gpu")]
        let gpu = match GpuDevice::acquire().await {
            Ok(dev) => GpuEngine::new(dev, &runner.model),
            Err(e) => Err(e),
        };
        #[cfg(feature = "gpu")]
        match (gpu, choice) {
            (Ok(g), _) => runner.gpu = Some(Rc::new(g)),
            (Err(e), BackendChoice::Gpu) => return Err(e),
            (Err(e), _) => runner.unavailable = Some(e.to_string()),
        }
        Ok(runner)
    }

    /// Runs `model` on a GPU engine the caller built for it (tests pass their own device).
    #[cfg(feature = "gpu")]
    pub fn with_gpu(model: impl Into<Arc<M>>, gpu: GpuEngine, choice: BackendChoice) -> Self {
        Self {
            model: model.into(),
            choice,
            gpu: Some(Rc::new(gpu)),
            unavailable: None,
        }
    }

    /// The model this runner runs.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The model, shared (a generation the page drives step by step holds it).
    pub fn shared_model(&self) -> Arc<M> {
        self.model.clone()
    }

    /// The GPU engine, shared (a generation the page drives step by step on it holds it), if
    /// the runner has one.
    #[cfg(feature = "gpu")]
    pub fn shared_gpu(&self) -> Option<Rc<GpuEngine>> {
        self.gpu.clone()
    }

    /// What will run: `"cpu"` or the GPU's description.
    pub fn describe(&self) -> String {
        #[cfg(not(feature = "gpu"))]
        return "cpu".to_owned();
        #[cfg(feature = "gpu")]
        self.gpu
            .as_ref()
            .map_or_else(|| "cpu".to_owned(), |g| g.describe())
    }

    /// Why the GPU is not used although it was wanted.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Translates `sources` with an encoder–decoder model (see [`super::translate()`]); returns
    /// the translation, what ran it and why the CPU did where the GPU was wanted. With `auto`,
    /// a GPU failure is answered by the CPU engine; with `gpu` it is an error.
    pub async fn translate(
        &self,
        sources: &[&str],
        decoding: &Decoding,
    ) -> Result<(Translation, String, Option<String>)> {
        #[allow(unused_mut)] // the GPU's failure may set it
        let mut fallback = self.unavailable.clone();
        #[cfg(feature = "gpu")]
        if let Some(g) = &self.gpu {
            match g.translate(&self.model, sources, decoding).await {
                Ok(tr) => return Ok((tr, g.describe(), None)),
                Err(e @ Error::Gpu(_)) if self.choice == BackendChoice::Auto => {
                    fallback = Some(format!("the GPU failed, the CPU answered: {e}"));
                }
                Err(e) => return Err(e),
            }
        }
        let tr = super::translate(&self.model, sources, decoding)?;
        Ok((tr, "cpu".into(), fallback))
    }

    /// Writes after `prompt` greedily (a decoder-only model). With `auto`, a GPU failure is
    /// answered by the CPU engine; with `gpu` it is an error.
    pub async fn generate(&self, prompt: &[u32], opts: &GenerateOptions) -> Result<GenerationRun> {
        #[allow(unused_mut)] // the GPU's failure may set it
        let mut fallback = self.unavailable.clone();
        #[cfg(feature = "gpu")]
        if let Some(g) = &self.gpu {
            match g.generate(&self.model, prompt, opts).await {
                Ok(generation) => {
                    return Ok(GenerationRun {
                        generation,
                        backend: g.describe(),
                        fallback: None,
                    })
                }
                Err(e @ Error::Gpu(_)) if self.choice == BackendChoice::Auto => {
                    fallback = Some(format!("the GPU failed, the CPU answered: {e}"));
                }
                Err(e) => return Err(e),
            }
        }
        let generation = super::generate(&self.model, prompt, opts)?;
        Ok(GenerationRun {
            generation,
            backend: "cpu".into(),
            fallback,
        })
    }

    /// Runs the encoder. With `auto`, a GPU failure (device lost, say) is answered by the CPU
    /// engine and the run says so; with `gpu` it is an error.
    pub async fn forward(&self, input: &Encoded, mask: &Mask, opts: &TraceOptions) -> Result<Run> {
        let start = Instant::now();
        #[allow(unused_mut)] // the GPU's failure may set it
        let mut fallback = self.unavailable.clone();
        #[cfg(feature = "gpu")]
        if let Some(g) = &self.gpu {
            match g.forward(&self.model, input, mask, opts).await {
                Ok((trace, timing)) => {
                    return Ok(Run {
                        trace,
                        backend: g.describe(),
                        fallback: None,
                        elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
                        gpu_timing: Some(timing),
                    });
                }
                Err(e @ Error::Gpu(_)) if self.choice == BackendChoice::Auto => {
                    fallback = Some(format!("the GPU failed, the CPU answered: {e}"));
                }
                Err(e) => return Err(e),
            }
        }
        let trace = cpu::forward(&self.model, input, mask, opts)?;
        Ok(Run {
            trace,
            backend: "cpu".into(),
            fallback,
            elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
            #[cfg(feature = "gpu")]
            gpu_timing: None,
        })
    }
}
