//! What an engine runs: a model's forward pass behind a trait object, so that no engine names a
//! family or a checkpoint. Each family (`crate::families`) implements [`Network`] for its
//! weights, writing its forward pass once over [`Ops`] and running it on whichever engine's
//! operations it is handed ([`EngineOps`], [`run_on`]); a loaded checkpoint (`crate::Model`)
//! implements [`Loaded`]: its config, its network and its tokenizer.

use std::any::Any;

use ndarray::{Array2, Array3};

use super::cpu::exec::CpuOps;
#[cfg(feature = "gpu")]
use super::gpu::Recorder;
use super::ops::{AttentionId, Ops, Stack};
use super::ModelInputs;
use crate::error::Result;
use crate::model::config::Config;
use crate::model::weights::{Linear, Norm, ParamId, Table};
use crate::model::{Encoded, TextTokenizer};

/// One engine's operations, for a forward pass to run on: the CPU engine computes each, the GPU
/// engine records each.
pub enum EngineOps<'o, 'p> {
    Cpu(&'o mut CpuOps<'p>),
    #[cfg(feature = "gpu")]
    Gpu(&'o mut Recorder<'p>),
}

/// A forward pass written once over [`Ops`], the way a family writes it.
pub trait Forward {
    fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X>;
}

/// `pass`'s forward over the engine `ops` names.
pub fn run_on(pass: &impl Forward, ops: EngineOps<'_, '_>, c: &Config) -> Result<()> {
    match ops {
        EngineOps::Cpu(o) => pass.forward(o, c).map(drop),
        #[cfg(feature = "gpu")]
        EngineOps::Gpu(o) => pass.forward(o, c).map(drop),
    }
}

/// A model's weights as the engines run them, whatever its family.
pub trait Network: Any + Send + Sync + std::fmt::Debug {
    /// The stack its layers form (an encoder–decoder model's first: its encoder).
    fn stack(&self) -> Stack;

    /// The ids a pass over `input` reads (the family decides the positions; by default each
    /// item's `0, 1, …`).
    fn inputs(&self, input: &Encoded, _c: &Config) -> ModelInputs {
        ModelInputs {
            tokens: input.ids.clone(),
            token_types: input.type_ids.clone(),
            positions: Array2::from_shape_fn(input.ids.dim(), |(_, t)| t as u32),
            target: None,
        }
    }

    /// Its forward pass for one stack's model over `ops` (an encoder–decoder model translates
    /// instead: [`Network::translation`]).
    fn run(&self, ops: EngineOps<'_, '_>, c: &Config) -> Result<()>;

    /// Whether it predicts the next token of its input (has an LM head over it; an
    /// encoder–decoder model's predicts its output's, in `translate`).
    fn has_lm_head(&self) -> bool {
        false
    }

    /// A classification head's logits from the model's output `(B, T, D)`, where the
    /// checkpoint has one: `(B, num_labels)`.
    fn logits(&self, _hidden: &Array3<f32>) -> Option<Array2<f32>> {
        None
    }

    /// The position embeddings added to the tokens, `(positions, D)` (learned, or sinusoids);
    /// `None` for rotary positions, which turn the queries and keys instead.
    fn position_table(&self) -> Option<&Table> {
        None
    }

    /// An encoder–decoder model's two passes.
    fn translation(&self) -> Option<&dyn Translating> {
        None
    }

    /// Layer `layer`'s self-attention output projection `W_O` (the heads' contexts side by
    /// side in, `D` out), what value-weighted attention multiplies each value by; `None` for a
    /// layer it does not have, or a model that runs no self-attention stack of its own (an
    /// encoder–decoder model translates).
    fn attention_output(&self, _layer: usize) -> Option<&Linear> {
        None
    }

    /// Layer `layer`'s feed-forward output projection, where the family has one: its bias is a
    /// constant the direct logit attribution counts apart from what the feed-forward computes.
    fn mlp_output(&self, _layer: usize) -> Option<&Linear> {
        None
    }

    /// The RMSNorm between layer `layer`'s attention output projection and the residual stream,
    /// where the family has one (Gemma 3's `post_attention_layernorm`): the direct logit
    /// attribution and the flow routes freeze its scale at the real attention output, so each
    /// head's write is its part of the normed sum.
    fn attention_post_norm(&self, _layer: usize) -> Option<&Norm> {
        None
    }

    /// How the residual stream becomes the next token's logits, for a pre-norm decoder whose
    /// layers each add a write to the stream (directly, or through a norm after the attention:
    /// [`Network::attention_post_norm`]): the final norm and the LM head. `None` for any other
    /// model (an encoder, logits soft-capped).
    fn unembedding(&self) -> Option<Unembedding<'_>> {
        None
    }

    /// The weights as their own type, for what only their family reads of them.
    fn as_any(&self) -> &dyn Any;
}

/// The final norm and the LM head of a pre-norm decoder ([`Network::unembedding`]).
#[derive(Debug, Clone, Copy)]
pub struct Unembedding<'a> {
    pub norm: &'a Norm,
    pub lm_head: &'a Linear,
}

/// An encoder–decoder model's two passes over an engine's operations.
pub trait Translating: Send + Sync {
    /// The source through the encoder, then every target position given through the decoder.
    fn run_whole(&self, ops: EngineOps<'_, '_>, c: &Config) -> Result<()>;

    /// The decoder alone over its new positions: the cache holds the earlier positions' keys
    /// and values, and the source's for the cross-attention.
    fn run_decoder(&self, ops: EngineOps<'_, '_>, c: &Config) -> Result<()>;

    /// Attention `id`'s output projection (its heads' contexts into the stream), where the
    /// model has that attention: what value-weighted attention reads.
    fn output_projection(&self, id: AttentionId) -> Option<&Linear>;
}

/// A loaded model as the engines see it: what names it, its config, the network its family runs
/// and its tokenizer.
pub trait Loaded: Send + Sync {
    /// Unique to this load: what an engine made for the model knows it by.
    fn id(&self) -> ParamId;
    /// Its name as errors give it (a folder's last component, a file's name).
    fn name(&self) -> &str;
    fn config(&self) -> &Config;
    fn network(&self) -> &dyn Network;
    fn tokenizer(&self) -> &TextTokenizer;

    /// The stack its layers form: an encoder, or a decoder-only model's decoder.
    fn stack(&self) -> Stack {
        self.network().stack()
    }

    /// The ids a pass over `input` reads (the family decides the positions).
    fn inputs(&self, input: &Encoded) -> ModelInputs {
        self.network().inputs(input, self.config())
    }

    /// Its forward pass over an engine's operations.
    fn run(&self, ops: EngineOps<'_, '_>) -> Result<()> {
        self.network().run(ops, self.config())
    }

    /// A classification head's logits from the last hidden states `(B, T, D)`, when it has
    /// one: `(B, num_labels)`.
    fn logits(&self, hidden: &Array3<f32>) -> Option<Array2<f32>> {
        self.network().logits(hidden)
    }
}

impl<T: Loaded + ?Sized> Loaded for &T {
    fn id(&self) -> ParamId {
        (**self).id()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn config(&self) -> &Config {
        (**self).config()
    }
    fn network(&self) -> &dyn Network {
        (**self).network()
    }
    fn tokenizer(&self) -> &TextTokenizer {
        (**self).tokenizer()
    }
}

impl<T: Loaded + ?Sized> Loaded for std::sync::Arc<T> {
    fn id(&self) -> ParamId {
        (**self).id()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn config(&self) -> &Config {
        (**self).config()
    }
    fn network(&self) -> &dyn Network {
        (**self).network()
    }
    fn tokenizer(&self) -> &TextTokenizer {
        (**self).tokenizer()
    }
}
