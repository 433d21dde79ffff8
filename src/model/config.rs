//! The model's `config.json`, deserialised from Hugging Face's own field names.

use serde::Deserialize;
use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// The activation inside the feed-forward layer (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Activation {
    /// Exact GELU, `x · Φ(x)` with the error function (HF's `"gelu"`).
    #[serde(rename = "gelu")]
    Gelu,
    /// The tanh approximation of GELU (HF's `"gelu_new"` / `"gelu_pytorch_tanh"`).
    #[serde(alias = "gelu_new", alias = "gelu_pytorch_tanh", rename = "gelu_tanh")]
    GeluTanh,
    #[serde(rename = "relu")]
    Relu,
}

/// Where the residual block puts its LayerNorm.
///
/// * `Post` (BERT): `x = LN(x + Sublayer(x))`.
/// * `Pre` (the seeds' `TransformerEncoderLayer`): `x = x + Sublayer(LN(x))`.
///
/// In both orders the two LayerNorms of a layer are read from the same checkpoint keys
/// (`attention.output.LayerNorm` around attention, `output.LayerNorm` around the feed-forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayerNormOrder {
    #[default]
    Post,
    Pre,
}

fn default_type_vocab_size() -> usize {
    2
}
fn default_layer_norm_eps() -> f64 {
    1e-12
}
fn default_position_embedding_type() -> String {
    "absolute".into()
}

/// A BERT-family configuration with HF's field names.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    #[serde(default)]
    pub model_type: Option<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab_size")]
    pub type_vocab_size: usize,
    #[serde(default = "default_layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    #[serde(default = "default_position_embedding_type")]
    pub position_embedding_type: String,
    /// Not an HF field: `"post"` (default, BERT) or `"pre"` (pre-LN encoder layers).
    #[serde(default)]
    pub layer_norm_order: LayerNormOrder,
    /// Label names of a classification head, when the checkpoint has one.
    #[serde(default)]
    pub id2label: Option<BTreeMap<String, String>>,
}

impl Config {
    /// Parses and validates `config.json`; `file` names it in errors.
    pub fn from_json(bytes: &[u8], file: &str) -> Result<Self> {
        let config: Config = serde_json::from_slice(bytes).map_err(|e| Error::Config {
            file: file.into(),
            msg: e.to_string(),
        })?;
        config.validate(file)?;
        Ok(config)
    }

    /// Checks what the math relies on.
    pub fn validate(&self, file: &str) -> Result<()> {
        let bad = |msg: String| {
            Err(Error::Config {
                file: file.into(),
                msg,
            })
        };
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ] {
            if v == 0 {
                return bad(format!("`{name}` must be positive"));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return bad(format!(
                "`hidden_size` {} is not divisible by `num_attention_heads` {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.position_embedding_type != "absolute" {
            return bad(format!(
                "`position_embedding_type` {:?} is not supported (only \"absolute\")",
                self.position_embedding_type
            ));
        }
        if self.layer_norm_eps.is_nan() || self.layer_norm_eps <= 0.0 {
            return bad("`layer_norm_eps` must be positive".into());
        }
        Ok(())
    }

    /// Size of one head, `d_k = d_v = hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}
