//! The model's `config.json`, deserialised from Hugging Face's own field names.

use serde::Deserialize;
use std::collections::BTreeMap;

use super::limits::{
    file_too_big, MAX_ATTENTION_VALUES, MAX_CONFIG_BYTES, MAX_HEADS, MAX_HIDDEN_SIZE,
    MAX_INTERMEDIATE_SIZE, MAX_LAYERS, MAX_PARAMETERS, MAX_POSITIONS, MAX_TYPE_VOCAB_SIZE,
    MAX_VOCAB_SIZE,
};
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
    /// Parses and validates `config.json`; `file` names it in errors. A file over
    /// [`MAX_CONFIG_BYTES`] is refused unread.
    pub fn from_json(bytes: &[u8], file: &str) -> Result<Self> {
        if bytes.len() > MAX_CONFIG_BYTES {
            return Err(Error::Config {
                file: file.into(),
                msg: file_too_big(bytes.len() as u64, MAX_CONFIG_BYTES),
            });
        }
        let config: Config = serde_json::from_slice(bytes).map_err(|e| Error::Config {
            file: file.into(),
            msg: e.to_string(),
        })?;
        config.validate(file)?;
        Ok(config)
    }

    /// Checks what the math relies on, and every size against its limit in
    /// [`limits`](super::limits), so that no tensor is ever allocated from an absurd size.
    pub fn validate(&self, file: &str) -> Result<()> {
        let bad = |msg: String| {
            Err(Error::Config {
                file: file.into(),
                msg,
            })
        };
        for (name, v, limit) in [
            ("vocab_size", self.vocab_size, MAX_VOCAB_SIZE),
            ("hidden_size", self.hidden_size, MAX_HIDDEN_SIZE),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_HEADS),
            (
                "intermediate_size",
                self.intermediate_size,
                MAX_INTERMEDIATE_SIZE,
            ),
            (
                "max_position_embeddings",
                self.max_position_embeddings,
                MAX_POSITIONS,
            ),
            ("type_vocab_size", self.type_vocab_size, MAX_TYPE_VOCAB_SIZE),
        ] {
            if v == 0 {
                return bad(format!("`{name}` must be positive"));
            }
            if v > limit {
                return bad(format!("`{name}` {v} is over the limit of {limit}"));
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
        // The engines compute in f32: an eps that is not a positive f32 breaks every LayerNorm.
        let eps = self.layer_norm_eps as f32;
        if !(eps.is_finite() && eps > 0.0) {
            return bad(format!(
                "`layer_norm_eps` {} must be positive and finite in f32",
                self.layer_norm_eps
            ));
        }
        let parameters = self.parameter_count();
        if parameters > MAX_PARAMETERS as u128 {
            return bad(format!(
                "the sizes imply {parameters} parameters (vocab_size {}, hidden_size {}, \
                 num_hidden_layers {}, intermediate_size {}), over the limit of {MAX_PARAMETERS}",
                self.vocab_size, self.hidden_size, self.num_hidden_layers, self.intermediate_size
            ));
        }
        let (l, h, p) = (
            self.num_hidden_layers as u128,
            self.num_attention_heads as u128,
            self.max_position_embeddings as u128,
        );
        let attention = l * h * p * p;
        if attention > MAX_ATTENTION_VALUES as u128 {
            return bad(format!(
                "one text of max_position_embeddings {p} tokens would make {attention} attention \
                 probabilities (num_hidden_layers {l} × num_attention_heads {h} × {p}²), \
                 over the limit of {MAX_ATTENTION_VALUES}"
            ));
        }
        Ok(())
    }

    /// The number of parameters the encoder's tensors hold by this config (embeddings and
    /// every layer; not a classification head), in `u128` so that no size can overflow it.
    pub fn parameter_count(&self) -> u128 {
        let (v, d, p, t, i) = (
            self.vocab_size as u128,
            self.hidden_size as u128,
            self.max_position_embeddings as u128,
            self.type_vocab_size as u128,
            self.intermediate_size as u128,
        );
        let embeddings = (v + p + t) * d + 2 * d;
        // Q, K, V and output projections; two LayerNorms; the feed-forward pair.
        let layer = 4 * (d * d + d) + 2 * 2 * d + (d * i + i) + (i * d + d);
        embeddings + self.num_hidden_layers as u128 * layer
    }

    /// Size of one head, `d_k = d_v = hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}
