//! Model families, each written once in its own module: its config read from its own field
//! names, its weights found by its own HF key names (and a GGUF file's, where it reads them),
//! and its forward pass over the engines' operations ([`Ops`]), which the CPU engine computes
//! and the GPU engine records.
//!
//! [`FAMILIES`] lists them: the only place a `model_type` or a GGUF architecture is looked up.
//! A new family is a module here and a line in [`FAMILIES`] (and, until the engines run any
//! family's forward pass, a variant of [`Weights`]).

pub mod bert;
pub mod distilbert;
pub mod gpt2;
pub mod llama;
pub mod marian;

use ndarray::{Array2, Array3};

use crate::engine::ops::{Kept, Ops, Stack};
use crate::engine::ModelInputs;
use crate::error::{Error, Result};
use crate::model::config::Config;
use crate::model::gguf::GgufFile;
use crate::model::limits::{file_too_big, MAX_CONFIG_BYTES};
use crate::model::quant::SharedBytes;
use crate::model::weights::{Linear, Table, Tensors};
use crate::model::Encoded;

/// What a family reads, and how: one entry a family.
pub struct FamilyEntry {
    /// The `model_type`s it reads, as a person would list them.
    pub model_types: &'static [&'static str],
    /// Whether a config without `model_type` is this family's (BERT's, as configs before it).
    pub untyped: bool,
    /// Its config from `config.json`'s JSON and its `model_type`, or why it cannot run.
    pub config: fn(serde_json::Value, Option<&str>) -> std::result::Result<Config, String>,
    /// Its weights from a checkpoint's tensors.
    pub weights: fn(&Tensors, &Config) -> Result<Weights>,
    /// The GGUF files it reads, where it reads them.
    pub gguf: Option<GgufFamily>,
}

/// How a family reads a GGUF file.
pub struct GgufFamily {
    /// The `general.architecture`s it reads.
    pub architectures: &'static [&'static str],
    /// Its config from the file's metadata.
    pub config: fn(&GgufFile) -> Result<Config>,
    /// Its weights from the file's tensors, kept in their ggml types inside `bytes`.
    pub weights: fn(&GgufFile, &SharedBytes, &Config) -> Result<Weights>,
}

/// Every family attnscope runs.
pub static FAMILIES: &[FamilyEntry] = &[
    bert::FAMILY,
    distilbert::FAMILY,
    gpt2::FAMILY,
    marian::FAMILY,
    llama::FAMILY,
];

/// The `model_type`s read, as a person would list them.
pub fn supported() -> String {
    let types: Vec<&str> = FAMILIES
        .iter()
        .flat_map(|f| f.model_types)
        .copied()
        .collect();
    types.join(", ")
}

/// The family of a config read by it (its `family.name` is one of the entry's `model_types`).
pub fn of(c: &Config) -> Result<&'static FamilyEntry> {
    FAMILIES
        .iter()
        .find(|f| f.model_types.contains(&c.family.name()))
        .ok_or_else(|| Error::Engine(format!("no family reads {:?}", c.family.name())))
}

/// Parses and validates `config.json` by its family's own field names; `file` names it in
/// errors. A file over [`MAX_CONFIG_BYTES`] is refused unread.
pub fn read_config(bytes: &[u8], file: &str) -> Result<Config> {
    let bad = |msg: String| Error::Config {
        file: file.into(),
        msg,
    };
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(bad(file_too_big(bytes.len() as u64, MAX_CONFIG_BYTES)));
    }
    let json: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let model_type = match json.get("model_type") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(t)) => Some(t.clone()),
        Some(other) => return Err(bad(format!("`model_type` {other} is not a string"))),
    };
    let family = FAMILIES
        .iter()
        .find(|f| match &model_type {
            None => f.untyped,
            Some(t) => f.model_types.contains(&t.as_str()),
        })
        .ok_or_else(|| {
            bad(format!(
                "model_type {:?} is not supported (supported: {})",
                model_type.clone().unwrap_or_default(),
                supported()
            ))
        })?;
    let config = (family.config)(json, model_type.as_deref()).map_err(bad)?;
    config.validate(file)?;
    Ok(config)
}

/// A GGUF file's family (by its `general.architecture`) with its config, read from the file's
/// metadata.
pub fn read_gguf_config(g: &GgufFile) -> Result<(&'static GgufFamily, Config)> {
    let arch = g.get_str("general.architecture")?;
    let readers = || FAMILIES.iter().filter_map(|f| f.gguf.as_ref());
    let family = readers()
        .find(|r| r.architectures.contains(&arch))
        .ok_or_else(|| {
            let known: Vec<&str> = readers()
                .flat_map(|r| r.architectures.iter().copied())
                .collect();
            Error::Config {
                file: g.file.clone(),
                msg: format!(
                    "general.architecture {arch:?} is not supported (supported in GGUF files: {})",
                    known.join(", ")
                ),
            }
        })?;
    Ok((family, (family.config)(g)?))
}

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
        (of(c)?.weights)(t, c)
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
