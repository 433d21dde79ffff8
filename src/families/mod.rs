//! Model families, each written once in its own module: its config read from its own field
//! names, its weights found by its own HF key names (and a GGUF file's, where it reads them),
//! and its forward pass over the engines' operations ([`Ops`]), which the CPU engine computes
//! and the GPU engine records.
//!
//! [`FAMILIES`] lists them: the only place a `model_type` or a GGUF architecture is looked up.
//! A new family is a module here (its weights a [`Network`] the engines run) and a line in
//! [`FAMILIES`].

pub mod bert;
pub mod distilbert;
pub mod gemma3;
pub mod gpt2;
pub mod llama;
pub mod marian;

use ndarray::Array3;

use crate::engine::network::Network;
use crate::engine::ops::{Kept, Ops};
use crate::error::{Error, Result};
use crate::model::config::Config;
use crate::model::gguf::GgufFile;
use crate::model::gguf_tokenizer::SentencePiece;
use crate::model::limits::{file_too_big, MAX_CONFIG_BYTES};
use crate::model::quant::{QuantMatrix, SharedBytes};
use crate::model::weights::{Linear, Tensors};

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
    /// How transformers builds its SentencePiece vocabulary (`tokenizer.ggml.model` "llama").
    pub sentencepiece: SentencePiece,
}

/// Every family attnscope runs.
pub static FAMILIES: &[FamilyEntry] = &[
    bert::FAMILY,
    distilbert::FAMILY,
    gpt2::FAMILY,
    marian::FAMILY,
    llama::FAMILY,
    gemma3::FAMILY,
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

/// A GGUF file's tensors as a family reads them: each matrix kept in its ggml type, sharing
/// the file's bytes; each vector as f32; a missing or misshapen one an error naming its key.
pub(crate) struct GgufTensors<'g> {
    g: &'g GgufFile,
    bytes: &'g SharedBytes,
}

/// `g`'s tensors, in `bytes` (the file's).
pub(crate) fn gguf_reader<'g>(g: &'g GgufFile, bytes: &'g SharedBytes) -> GgufTensors<'g> {
    GgufTensors { g, bytes }
}

impl GgufTensors<'_> {
    fn info(&self, key: &str) -> Result<&crate::model::gguf::TensorInfo> {
        self.g.tensor(key).ok_or_else(|| Error::MissingTensor {
            file: self.g.file.clone(),
            key: key.into(),
        })
    }

    fn shaped(
        &self,
        key: &str,
        want: &[usize],
        pytorch: Vec<usize>,
    ) -> Result<&crate::model::gguf::TensorInfo> {
        let t = self.info(key)?;
        if t.shape != want {
            return Err(Error::TensorShape {
                file: self.g.file.clone(),
                key: key.into(),
                expected: pytorch,
                found: t.torch_shape(),
            });
        }
        Ok(t)
    }

    /// The matrix `key`, `(rows, cols)` as PyTorch stores it (GGUF's `ne = [cols, rows]`).
    pub fn matrix(&self, key: &str, rows: usize, cols: usize) -> Result<QuantMatrix> {
        let t = self.shaped(key, &[cols, rows], vec![rows, cols])?;
        self.g.matrix(t, self.bytes.clone())
    }

    /// The vector `key`, `(n,)`, as f32.
    pub fn vector(&self, key: &str, n: usize) -> Result<ndarray::Array1<f32>> {
        let t = self.shaped(key, &[n], vec![n])?;
        let m = self.g.matrix(t, self.bytes.clone())?;
        Ok(m.dequantize()
            .into_shape_with_order(n)
            .expect("(1, n) holds n values"))
    }
}

/// A model's weights, whatever its family: what the engines run ([`Network`]).
pub type Weights = Box<dyn Network>;

/// Reads the weights of `c`'s family from `t`.
pub fn load_weights(t: &Tensors, c: &Config) -> Result<Weights> {
    (of(c)?.weights)(t, c)
}

/// A decoder's LM head on its output `out`, `(B·T, D)`, kept where the pass wants it: at every
/// position ([`Kept::LmLogits`], `(B·T, V)`) and at each item's last ([`Kept::NextLogits`],
/// `(B, V)`: one row through the head where a generation needs no more); soft-capped as
/// `cap·tanh(z/cap)` where the architecture has a cap ([`Architecture::logit_cap`]).
///
/// [`Architecture::logit_cap`]: crate::model::config::Architecture::logit_cap
pub(crate) fn lm_logits<O: Ops>(
    ops: &mut O,
    out: &O::X,
    lm_head: &Linear,
    cap: Option<f32>,
) -> Result<()> {
    let head = |ops: &mut O, x: &O::X| {
        let logits = ops.linear(x, lm_head, None)?;
        match cap {
            Some(cap) => ops.soft_cap(&logits, cap),
            None => Ok(logits),
        }
    };
    if ops.wants(Kept::LmLogits) {
        let logits = head(ops, out)?; // (B·T, V)
        ops.keep(Kept::LmLogits, &logits)?;
    }
    if ops.wants(Kept::NextLogits) {
        let last = ops.last_rows(out)?; // (B, D)
        let logits = head(ops, &last)?; // (B, V)
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
