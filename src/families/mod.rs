//! Model families, each written once: its weights found by its own HF key names and its forward
//! pass over the engines' operations ([`Ops`]), which the CPU engine computes and the GPU engine
//! records. Its config is read by [`Config::from_json`] from its own field names.
//!
//! A new family is a module here (its keys and its forward), a variant of [`Weights`], and a
//! [`Family`] that `Config::from_json` reads its `model_type` into, declaring its
//! [`Architecture`](crate::model::config::Architecture).

pub mod bert;
pub mod distilbert;
pub mod gpt2;
pub mod llama;
pub mod marian;

use ndarray::{Array2, Array3};

use crate::engine::ops::{Kept, Ops, Stack};
use crate::engine::ModelInputs;
use crate::error::{Error, Result};
use crate::model::weights::{Linear, Table, Tensors};
use crate::model::{Config, Encoded, Family};

/// A model's weights, by family.
#[derive(Debug, Clone)]
pub enum Weights {
    /// BERT and RoBERTa.
    Bert(Box<bert::BertWeights>),
    DistilBert(Box<distilbert::DistilBertWeights>),
    Gpt2(Box<gpt2::Gpt2Weights>),
    /// An encoder–decoder translation model.
    Marian(Box<marian::MarianWeights>),
    /// Llama, Mistral and Qwen2.
    Llama(Box<llama::LlamaWeights>),
}

impl Weights {
    /// Reads the weights of `c`'s family from `t`.
    pub fn load(t: &Tensors, c: &Config) -> Result<Self> {
        Ok(match c.family {
            Family::Bert | Family::Roberta => Self::Bert(bert::BertWeights::load(t, c)?.into()),
            Family::DistilBert => {
                Self::DistilBert(distilbert::DistilBertWeights::load(t, c)?.into())
            }
            Family::Gpt2 => Self::Gpt2(gpt2::Gpt2Weights::load(t, c)?.into()),
            Family::Marian => Self::Marian(marian::MarianWeights::load(t, c)?.into()),
            Family::Llama | Family::Mistral | Family::Qwen2 => {
                Self::Llama(llama::LlamaWeights::load(t, c)?.into())
            }
        })
    }

    /// The stack the model's layers form (an encoder–decoder model's first: its encoder).
    pub fn stack(&self) -> Stack {
        match self {
            Self::Bert(_) | Self::DistilBert(_) | Self::Marian(_) => Stack::Encoder,
            Self::Gpt2(_) | Self::Llama(_) => Stack::Decoder,
        }
    }

    /// The ids a pass over `input` reads (the family decides the positions).
    pub fn inputs(&self, input: &Encoded, c: &Config) -> ModelInputs {
        match self {
            Self::Bert(w) => w.inputs(input, c),
            Self::DistilBert(_) | Self::Gpt2(_) | Self::Marian(_) | Self::Llama(_) => ModelInputs {
                tokens: input.ids.clone(),
                token_types: input.type_ids.clone(),
                positions: bert::positions_from_zero(input),
                target: None,
            },
        }
    }

    /// The family's forward pass over `ops` for one stack's model; returns the model's output,
    /// `(B·T, D)`. An encoder–decoder model translates instead ([`crate::engine::translate`]).
    pub fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        match self {
            Self::Bert(w) => w.forward(ops, c),
            Self::DistilBert(w) => w.forward(ops, c),
            Self::Gpt2(w) => w.forward(ops, c),
            Self::Llama(w) => w.forward(ops, c),
            Self::Marian(_) => Err(Error::Input(format!(
                "a {} model is an encoder–decoder (translation) model: use `attnscope translate`, \
                 which runs its encoder and decodes its output",
                c.family.name()
            ))),
        }
    }

    /// A classification head's logits from the model's output `(B, T, D)`, where the
    /// checkpoint has one: `(B, num_labels)`.
    pub fn logits(&self, hidden: &Array3<f32>) -> Option<Array2<f32>> {
        match self {
            Self::Bert(w) => w.logits(hidden),
            Self::DistilBert(_) | Self::Gpt2(_) | Self::Marian(_) | Self::Llama(_) => None,
        }
    }

    /// The position embeddings added to the tokens, `(positions, D)` (learned, or Marian's
    /// sinusoids); `None` for rotary positions, which turn the queries and keys instead.
    pub fn position_table(&self) -> Option<&Table> {
        match self {
            Self::Bert(w) => Some(&w.embeddings.position),
            Self::DistilBert(w) => Some(&w.embeddings.position),
            Self::Gpt2(w) => Some(&w.wpe),
            Self::Marian(w) => Some(&w.positions),
            Self::Llama(_) => None,
        }
    }

    /// An encoder's layers, in BERT's layout (BERT, RoBERTa, DistilBERT).
    pub fn encoder_layers(&self) -> Option<&[bert::LayerWeights]> {
        match self {
            Self::Bert(w) => Some(&w.layers),
            Self::DistilBert(w) => Some(&w.layers),
            Self::Gpt2(_) | Self::Marian(_) | Self::Llama(_) => None,
        }
    }

    /// Whether the model predicts the next token of its input (has an LM head over it; an
    /// encoder–decoder model's predicts its output's, in `translate`).
    pub fn has_lm_head(&self) -> bool {
        matches!(self, Self::Gpt2(_) | Self::Llama(_))
    }
}

/// A decoder's LM head on its output `out`, `(B·T, D)`, kept where the pass wants it: at every
/// position ([`Kept::LmLogits`], `(B·T, V)`) and at each item's last ([`Kept::NextLogits`],
/// `(B, V)`: one row through the head where a generation needs no more).
pub(crate) fn lm_logits<O: Ops>(ops: &mut O, out: &O::X, lm_head: &Linear) -> Result<()> {
    if ops.wants(Kept::LmLogits) {
        let logits = ops.linear(out, lm_head, None)?; // (B·T, V)
        ops.keep(Kept::LmLogits, &logits)?;
    }
    if ops.wants(Kept::NextLogits) {
        let last = ops.last_rows(out)?; // (B, D)
        let logits = ops.linear(&last, lm_head, None)?; // (B, V)
        ops.keep(Kept::NextLogits, &logits)?;
    }
    Ok(())
}

/// The probability of every next token at every position: `softmax` over the vocabulary of
/// each row of an LM head's logits (the page and the CLI take only the likeliest:
/// [`crate::engine::top_k`]).
///
/// # Shapes
/// * `logits`: `(B, T, V)` → `(B, T, V)`
pub fn next_token_probs(logits: &Array3<f32>) -> Array3<f32> {
    let mut p = logits.clone();
    for mut row in p.rows_mut() {
        let max = row.fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        row.mapv_inplace(|v| (v - max).exp());
        let sum = row.sum();
        row.mapv_inplace(|v| v / sum);
    }
    p
}
