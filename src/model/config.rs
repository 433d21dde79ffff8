//! The model's `config.json`, deserialised from Hugging Face's own field names.

use serde::Deserialize;
use std::collections::BTreeMap;

use super::limits::{
    file_too_big, MAX_CONFIG_BYTES, MAX_HEADS, MAX_HIDDEN_SIZE, MAX_INTERMEDIATE_SIZE, MAX_LAYERS,
    MAX_MODEL_ATTENTION_VALUES, MAX_PARAMETERS, MAX_POSITIONS, MAX_TYPE_VOCAB_SIZE, MAX_VOCAB_SIZE,
};
use super::rope::{RopeJson, Rotary};
use crate::error::{Error, Result};

/// The activation inside the feed-forward layer (`hidden_act`, GPT-2's `activation_function`,
/// DistilBERT's `activation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum Activation {
    /// Exact GELU, `x · Φ(x)` with the error function (HF's `"gelu"`).
    #[serde(rename = "gelu")]
    Gelu,
    /// The tanh approximation of GELU (HF's `"gelu_new"` / `"gelu_pytorch_tanh"`).
    #[serde(alias = "gelu_new", alias = "gelu_pytorch_tanh", rename = "gelu_tanh")]
    GeluTanh,
    #[serde(rename = "relu")]
    Relu,
    /// SiLU, `x · σ(x)` (HF's `"swish"` / `"silu"`: Marian's).
    #[serde(alias = "swish", rename = "silu")]
    Silu,
}

/// Where the residual block puts its LayerNorm.
///
/// * `Post` (BERT): `x = LN(x + Sublayer(x))`.
/// * `Pre` (the seeds' `TransformerEncoderLayer`): `x = x + Sublayer(LN(x))`.
///
/// In both orders the two LayerNorms of a layer are read from the same checkpoint keys
/// (`attention.output.LayerNorm` around attention, `output.LayerNorm` around the feed-forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LayerNormOrder {
    #[default]
    Post,
    Pre,
}

/// The model families attnscope runs, by HF's `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// `bert` and BERT-shaped encoders (MiniLM); a config without `model_type` is read as BERT.
    Bert,
    /// `roberta` (and `xlm-roberta`, `camembert`): BERT's layers, positions after the padding
    /// index, byte-level BPE or SentencePiece tokens.
    Roberta,
    /// `distilbert`: BERT's layers under other names, no token types.
    #[serde(rename = "distilbert")]
    DistilBert,
    /// `gpt2`: a decoder-only stack, pre-LN, causal, with an LM head tied to its embeddings.
    Gpt2,
    /// `marian`: an encoder–decoder translation model (the Helsinki-NLP opus-mt layout), post-LN,
    /// sinusoidal positions, embeddings shared by both stacks and the LM head.
    Marian,
    /// `llama` (and SmolLM): a decoder-only stack, pre-RMSNorm, rotary positions, grouped-query
    /// attention, a SwiGLU feed-forward, no biases (`attention_bias` / `mlp_bias` may add them).
    Llama,
    /// `mistral`: Llama's layers, and a sliding window over the keys.
    Mistral,
    /// `qwen2`: Llama's layers with biases on Q, K and V.
    Qwen2,
}

impl Family {
    /// The `model_type`s each family is read from, as a person would list them.
    pub const SUPPORTED: &'static str =
        "bert, roberta (xlm-roberta, camembert), distilbert, gpt2, marian, llama, mistral, qwen2";

    /// The family of a config's `model_type` (`None`: BERT, as configs before `model_type`).
    pub fn from_model_type(model_type: Option<&str>) -> Option<Self> {
        match model_type {
            None | Some("bert") => Some(Self::Bert),
            Some("roberta" | "xlm-roberta" | "camembert") => Some(Self::Roberta),
            Some("distilbert") => Some(Self::DistilBert),
            Some("gpt2") => Some(Self::Gpt2),
            Some("marian") => Some(Self::Marian),
            Some("llama") => Some(Self::Llama),
            Some("mistral") => Some(Self::Mistral),
            Some("qwen2") => Some(Self::Qwen2),
            Some(_) => None,
        }
    }

    /// The family as HF's `model_type` names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bert => "bert",
            Self::Roberta => "roberta",
            Self::DistilBert => "distilbert",
            Self::Gpt2 => "gpt2",
            Self::Marian => "marian",
            Self::Llama => "llama",
            Self::Mistral => "mistral",
            Self::Qwen2 => "qwen2",
        }
    }

    /// The name this family's `config.json` gives the field BERT names `bert_name` (GPT-2's
    /// `n_embd` for `hidden_size`, …).
    pub fn field(self, bert_name: &'static str) -> &'static str {
        let renamed: &[(&str, &'static str)] = match self {
            Self::Bert | Self::Roberta => &[],
            Self::Llama | Self::Mistral | Self::Qwen2 => &[("layer_norm_eps", "rms_norm_eps")],
            Self::DistilBert => &[
                ("hidden_size", "dim"),
                ("num_hidden_layers", "n_layers"),
                ("num_attention_heads", "n_heads"),
                ("intermediate_size", "hidden_dim"),
            ],
            Self::Gpt2 => &[
                ("hidden_size", "n_embd"),
                ("num_hidden_layers", "n_layer"),
                ("num_attention_heads", "n_head"),
                ("intermediate_size", "n_inner"),
                ("max_position_embeddings", "n_positions"),
                ("layer_norm_eps", "layer_norm_epsilon"),
            ],
            // the encoder's sizes (the decoder's are checked under their own names)
            Self::Marian => &[
                ("hidden_size", "d_model"),
                ("num_hidden_layers", "encoder_layers"),
                ("num_attention_heads", "encoder_attention_heads"),
                ("intermediate_size", "encoder_ffn_dim"),
            ],
        };
        renamed
            .iter()
            .find(|(bert, _)| *bert == bert_name)
            .map_or(bert_name, |(_, own)| own)
    }

    /// Whether the model reads token types (segment A / B).
    pub fn has_token_types(self) -> bool {
        matches!(self, Self::Bert | Self::Roberta)
    }

    /// Whether the family's layers are Llama's (rotary positions, RMSNorm, a gated
    /// feed-forward, grouped-query attention).
    pub fn is_llama(self) -> bool {
        matches!(self, Self::Llama | Self::Mistral | Self::Qwen2)
    }
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

/// BERT's `config.json` (and RoBERTa's, the same fields), with HF's field names.
#[derive(Debug, Clone, Deserialize)]
struct BertJson {
    #[serde(default)]
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    hidden_act: Activation,
    max_position_embeddings: usize,
    #[serde(default = "default_type_vocab_size")]
    type_vocab_size: usize,
    #[serde(default = "default_layer_norm_eps")]
    layer_norm_eps: f64,
    #[serde(default)]
    pad_token_id: Option<u32>,
    #[serde(default = "default_position_embedding_type")]
    position_embedding_type: String,
    /// Not an HF field: `"post"` (default, BERT) or `"pre"` (pre-LN encoder layers).
    #[serde(default)]
    layer_norm_order: LayerNormOrder,
    #[serde(default)]
    id2label: Option<BTreeMap<String, String>>,
}

fn default_distilbert_activation() -> Activation {
    Activation::Gelu
}

/// DistilBERT's `config.json`.
#[derive(Debug, Clone, Deserialize)]
struct DistilBertJson {
    vocab_size: usize,
    dim: usize,
    n_layers: usize,
    n_heads: usize,
    hidden_dim: usize,
    #[serde(default = "default_distilbert_activation")]
    activation: Activation,
    max_position_embeddings: usize,
    #[serde(default)]
    pad_token_id: Option<u32>,
    #[serde(default)]
    id2label: Option<BTreeMap<String, String>>,
}

fn default_true() -> bool {
    true
}

fn default_gpt2_activation() -> Activation {
    Activation::GeluTanh
}
fn default_gpt2_eps() -> f64 {
    1e-5
}

/// GPT-2's `config.json`.
#[derive(Debug, Clone, Deserialize)]
struct Gpt2Json {
    vocab_size: usize,
    n_positions: usize,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    #[serde(default)]
    n_inner: Option<usize>,
    #[serde(default = "default_gpt2_activation")]
    activation_function: Activation,
    #[serde(default = "default_gpt2_eps")]
    layer_norm_epsilon: f64,
    #[serde(default)]
    eos_token_id: Option<u32>,
    #[serde(default = "default_true")]
    scale_attn_weights: bool,
    #[serde(default)]
    scale_attn_by_inverse_layer_idx: bool,
    #[serde(default)]
    reorder_and_upcast_attn: bool,
    #[serde(default)]
    id2label: Option<BTreeMap<String, String>>,
}

/// `MarianConfig`'s default (opus-mt configs name theirs: `swish`).
fn default_marian_activation() -> Activation {
    Activation::Gelu
}

/// Marian's `config.json` (`MarianConfig`).
#[derive(Debug, Clone, Deserialize)]
struct MarianJson {
    vocab_size: usize,
    #[serde(default)]
    decoder_vocab_size: Option<usize>,
    d_model: usize,
    encoder_layers: usize,
    decoder_layers: usize,
    encoder_attention_heads: usize,
    decoder_attention_heads: usize,
    encoder_ffn_dim: usize,
    decoder_ffn_dim: usize,
    #[serde(default = "default_marian_activation")]
    activation_function: Activation,
    max_position_embeddings: usize,
    #[serde(default)]
    scale_embedding: bool,
    pad_token_id: u32,
    eos_token_id: u32,
    #[serde(default)]
    decoder_start_token_id: Option<u32>,
    #[serde(default)]
    forced_eos_token_id: Option<u32>,
    #[serde(default = "default_true")]
    share_encoder_decoder_embeddings: bool,
    /// Not an HF field: the cross-attention head a training found most readable
    /// (`tools/train_dates.py`), where the page opens.
    #[serde(default)]
    attnscope_focus: Option<Focus>,
}

fn default_rms_norm_eps() -> f64 {
    1e-6
}
fn default_silu() -> Activation {
    Activation::Silu
}

/// One token id or several (`eos_token_id` is a list in some configs).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum TokenIds {
    One(u32),
    Many(Vec<u32>),
}

impl TokenIds {
    fn into_vec(self) -> Vec<u32> {
        match self {
            Self::One(id) => vec![id],
            Self::Many(ids) => ids,
        }
    }
}

/// The `config.json` of Llama, Mistral and Qwen2 (`LlamaConfig`, `MistralConfig`,
/// `Qwen2Config`), with HF's field names.
#[derive(Debug, Clone, Deserialize)]
struct LlamaJson {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    #[serde(default)]
    num_key_value_heads: Option<usize>,
    #[serde(default)]
    head_dim: Option<usize>,
    #[serde(default = "default_silu")]
    hidden_act: Activation,
    max_position_embeddings: usize,
    #[serde(default = "default_rms_norm_eps")]
    rms_norm_eps: f64,
    /// `rope_parameters`, or the older `rope_theta` and `rope_scaling`.
    #[serde(flatten)]
    rope: RopeJson,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default)]
    bos_token_id: Option<u32>,
    #[serde(default)]
    eos_token_id: Option<TokenIds>,
    #[serde(default)]
    pad_token_id: Option<u32>,
    /// `null` (no window) told apart from a config without the key (Mistral's default window).
    #[serde(default, deserialize_with = "given")]
    sliding_window: Option<Option<usize>>,
    /// Qwen2's switch for its window (off: no layer slides).
    #[serde(default)]
    use_sliding_window: bool,
    /// Qwen2's layers from this one on slide, where `layer_types` is not given (HF's default: 28).
    #[serde(default)]
    max_window_layers: Option<usize>,
    /// Qwen2's `"full_attention"` or `"sliding_attention"` per layer (transformers 5 writes it).
    #[serde(default)]
    layer_types: Option<Vec<String>>,
}

/// A key's value, `null` included: `Some(None)` for a `null`, where the key's absence (serde's
/// default) is `None`.
fn given<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// An attention's heads: `query` heads, each reading key/value head `h / (query / key_value)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Heads {
    pub query: usize,
    pub key_value: usize,
}

impl Heads {
    /// Multi-head attention: a key/value head for every query head.
    pub fn all(n: usize) -> Self {
        Self {
            query: n,
            key_value: n,
        }
    }

    /// The query heads that share one key/value head.
    pub fn group(self) -> usize {
        self.query / self.key_value.max(1)
    }

    /// An error unless the query heads fall into equal groups, one per key/value head.
    pub fn check(self, what: &str) -> Result<()> {
        if self.query == 0 || self.key_value == 0 || !self.query.is_multiple_of(self.key_value) {
            return Err(Error::Shape {
                what: format!("{what}: query heads in equal groups, one per key/value head"),
                expected: vec![self.key_value * (self.query / self.key_value.max(1)).max(1)],
                found: vec![self.query],
            });
        }
        Ok(())
    }
}

/// How far back one layer's attention reaches, beyond what the pass's mask allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "attention", content = "window")]
pub enum Reach {
    /// Every key the mask allows (a causal decoder's every earlier position, an encoder's every
    /// position): a global layer.
    Global,
    /// Only the keys fewer than `window` positions before the query's own, it included
    /// (HF's `sliding_window`: Mistral's layers, Qwen2's and Gemma 3's local ones).
    Sliding(usize),
}

/// One layer of a model's stack, as its family declares it: what its attention reaches, and
/// the rotation it turns its queries and keys by (`None`: positions added to the embeddings).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Layer {
    #[serde(flatten)]
    pub reach: Reach,
    pub rotary: Option<Rotary>,
}

/// Which stacks a model has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// Reads the whole input at once (BERT).
    Encoder,
    /// Writes its output token after token under the no-peek mask (GPT-2, Llama).
    Decoder,
    /// An encoder over the source and a decoder writing the target (Marian).
    EncoderDecoder,
}

/// Where a model's positions come from.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Positions {
    /// A learned table added to the token embeddings; a text's first position is `offset`
    /// (RoBERTa's: its padding index + 1).
    Learned { offset: usize },
    /// Fixed sinusoids added to the token embeddings (Marian).
    Sinusoidal,
    /// Rotary embeddings turning each head's queries and keys inside every layer (Llama), each
    /// layer by its own rotation ([`Layer::rotary`]).
    Rotary,
}

/// A model's feed-forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum FeedForward {
    /// `W₂·act(W₁x)`.
    Plain { activation: Activation },
    /// `W_down·(act(W_gate x) ⊙ W_up x)` (SwiGLU with SiLU).
    Gated { activation: Activation },
}

/// Which linear layers have a bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Biases {
    /// Q, K and V.
    pub qkv: bool,
    /// The attention's output projection.
    pub output: bool,
    pub feed_forward: bool,
}

/// The LM head over the vocabulary, where the model has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LmHead {
    None,
    /// Its weights are the token embeddings'.
    Tied,
    /// Its own weights.
    Separate,
}

/// What a model is, declared by its family from its config: what every layer, the engines'
/// checks and the page read, rather than the family's name.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Architecture {
    pub kind: ModelKind,
    pub positions: Positions,
    pub norm: crate::model::weights::NormKind,
    /// Where each sub-layer's norm sits (pre: `x + f(norm(x))`; post: `norm(x + f(x))`).
    pub norm_order: LayerNormOrder,
    pub norm_eps: f64,
    pub feed_forward: FeedForward,
    /// Query heads and key/value heads (grouped-query attention where they differ).
    pub heads: Heads,
    pub head_dim: usize,
    pub biases: Biases,
    pub lm_head: LmHead,
    /// Segment A / B embeddings.
    pub token_types: bool,
    /// The stack's layers, first to last (an encoder–decoder's: its encoder's).
    pub layers: Vec<Layer>,
}

impl Architecture {
    /// The architecture of the families of 2018–2019 (BERT, RoBERTa, DistilBERT, GPT-2, Marian):
    /// LayerNorm, a plain feed-forward, a key/value head for every query head, biases
    /// everywhere; GPT-2's LM head tied to its embeddings, Marian's to its shared ones.
    #[allow(clippy::too_many_arguments)]
    fn classic(
        family: Family,
        kind: ModelKind,
        positions: Positions,
        activation: Activation,
        order: LayerNormOrder,
        eps: f64,
        heads: usize,
        hidden: usize,
        layers: usize,
    ) -> Self {
        Self {
            kind,
            positions,
            norm: crate::model::weights::NormKind::Layer,
            norm_order: order,
            norm_eps: eps,
            feed_forward: FeedForward::Plain { activation },
            heads: Heads::all(heads),
            head_dim: hidden / heads.max(1),
            biases: Biases {
                qkv: true,
                output: true,
                feed_forward: true,
            },
            lm_head: match kind {
                ModelKind::Encoder => LmHead::None,
                ModelKind::Decoder | ModelKind::EncoderDecoder => LmHead::Tied,
            },
            token_types: matches!(family, Family::Bert | Family::Roberta),
            layers: vec![
                Layer {
                    reach: Reach::Global,
                    rotary: None,
                };
                layers
            ],
        }
    }

    /// The rotation layer `layer` turns its queries and keys by, where it has one.
    pub fn rotary(&self, layer: usize) -> Option<&Rotary> {
        self.layers.get(layer).and_then(|l| l.rotary.as_ref())
    }
}

/// A Llama, Mistral or Qwen2 config: the fields the engines read, or why it cannot run.
fn llama_config(
    family: Family,
    model_type: Option<String>,
    c: LlamaJson,
) -> std::result::Result<Config, String> {
    let heads = c.num_attention_heads;
    let kv_heads = c.num_key_value_heads.unwrap_or(heads);
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads.max(1)) {
        return Err(format!(
            "`num_attention_heads` {heads} is not a multiple of `num_key_value_heads` {kv_heads}"
        ));
    }
    let head_dim = c.head_dim.unwrap_or(c.hidden_size / heads.max(1));
    if head_dim == 0 || !head_dim.is_multiple_of(2) || head_dim > super::limits::MAX_HIDDEN_SIZE {
        return Err(format!(
            "the head size {head_dim} (`head_dim`, or `hidden_size` / `num_attention_heads`) must be \
             even and positive for rotary positions, and at most {}",
            super::limits::MAX_HIDDEN_SIZE
        ));
    }
    let rope = c.rope.rotary(head_dim, c.max_position_embeddings)?;
    let reaches = reaches(family, &c)?;
    check_windows(&reaches)?;
    let qkv_bias = family == Family::Qwen2 || c.attention_bias;
    Ok(Config {
        family,
        model_type,
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        num_hidden_layers: c.num_hidden_layers,
        num_attention_heads: heads,
        intermediate_size: c.intermediate_size,
        hidden_act: c.hidden_act,
        max_position_embeddings: c.max_position_embeddings,
        type_vocab_size: 0,
        layer_norm_eps: c.rms_norm_eps,
        pad_token_id: c.pad_token_id,
        layer_norm_order: LayerNormOrder::Pre,
        id2label: None,
        decoder: None,
        architecture: Architecture {
            kind: ModelKind::Decoder,
            positions: Positions::Rotary,
            norm: crate::model::weights::NormKind::Rms,
            norm_order: LayerNormOrder::Pre,
            norm_eps: c.rms_norm_eps,
            feed_forward: FeedForward::Gated {
                activation: c.hidden_act,
            },
            heads: Heads {
                query: heads,
                key_value: kv_heads,
            },
            head_dim,
            biases: Biases {
                qkv: qkv_bias,
                output: c.attention_bias,
                feed_forward: c.mlp_bias,
            },
            lm_head: if c.tie_word_embeddings {
                LmHead::Tied
            } else {
                LmHead::Separate
            },
            token_types: false,
            layers: reaches
                .into_iter()
                .map(|reach| Layer {
                    reach,
                    rotary: Some(rope),
                })
                .collect(),
        },
        eos_token_ids: c.eos_token_id.map(TokenIds::into_vec).unwrap_or_default(),
        bos_token_id: c.bos_token_id,
    })
}

/// What each layer of a Llama-family model reaches, as HF's config classes read it: Mistral's
/// `sliding_window` (4,096 where the key is absent; `null`: none) over every layer; Qwen2's
/// over the layers that slide (by `layer_types`, or from `max_window_layers` on) where
/// `use_sliding_window` is on; Llama's layers are all global.
fn reaches(family: Family, c: &LlamaJson) -> std::result::Result<Vec<Reach>, String> {
    let n = c.num_hidden_layers;
    let sliding = |window: Option<usize>, slides: &dyn Fn(usize) -> bool| -> Vec<Reach> {
        (0..n)
            .map(|i| match window {
                Some(w) if slides(i) => Reach::Sliding(w),
                _ => Reach::Global,
            })
            .collect()
    };
    match family {
        Family::Mistral => Ok(sliding(c.sliding_window.unwrap_or(Some(4096)), &|_| true)),
        Family::Qwen2 => {
            let window = c.sliding_window.flatten().filter(|_| c.use_sliding_window);
            let Some(types) = &c.layer_types else {
                let from = c.max_window_layers.unwrap_or(28);
                return Ok(sliding(window, &|i| i >= from));
            };
            if types.len() != n {
                return Err(format!(
                    "`layer_types` names {} layers, and `num_hidden_layers` is {n}",
                    types.len()
                ));
            }
            for (i, t) in types.iter().enumerate() {
                if !matches!(t.as_str(), "full_attention" | "sliding_attention") {
                    return Err(format!(
                        "`layer_types[{i}]` {t:?} is not supported (only \"full_attention\" and \
                         \"sliding_attention\")"
                    ));
                }
            }
            Ok(sliding(window, &|i| types[i] == "sliding_attention"))
        }
        _ => Ok(sliding(None, &|_| false)),
    }
}

/// A window of 0 positions would hide every key, the query's own too.
fn check_windows(reaches: &[Reach]) -> std::result::Result<(), String> {
    match reaches.iter().find(|r| **r == Reach::Sliding(0)) {
        Some(_) => Err("`sliding_window` 0 hides every key: it must be at least 1".into()),
        None => Ok(()),
    }
}

/// Where a view of a model opens: a decoder layer and one of its heads (`None`: the layer's
/// mean over heads was the most readable; the page opens on head 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Focus {
    pub layer: usize,
    #[serde(default)]
    pub head: Option<usize>,
}

/// The decoder of an encoder–decoder model, and how it decodes (Marian's fields).
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderConfig {
    /// `decoder_layers`.
    pub layers: usize,
    /// `decoder_attention_heads`, of its self- and its cross-attention.
    pub heads: usize,
    /// `decoder_ffn_dim`.
    pub ffn_dim: usize,
    /// `decoder_start_token_id` (Marian's: the pad token): the first input of every decoding.
    pub start_token_id: u32,
    /// `eos_token_id`: a decoding stops once it writes it.
    pub eos_token_id: u32,
    /// `forced_eos_token_id`: written as the last token when a decoding reaches its length limit
    /// (as HF's `generate` does).
    pub forced_eos_token_id: Option<u32>,
    /// What the token embeddings are multiplied by (`√d_model` with `scale_embedding`, else 1).
    pub embed_scale: f32,
    /// `share_encoder_decoder_embeddings`: one table of token embeddings for both stacks.
    pub shared_embeddings: bool,
    /// Where a view opens (`attnscope_focus`, written by `tools/train_dates.py`).
    pub focus: Option<Focus>,
}

/// A model's configuration, read from its `config.json` by its family's own field names and
/// described here with BERT's (HF's `hidden_size`, `num_hidden_layers`, …), whatever the
/// family: what the engines, the report and the page need to know of any model.
#[derive(Debug, Clone)]
pub struct Config {
    pub family: Family,
    /// As the file gives it (`None` for an old BERT config without one).
    pub model_type: Option<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    /// Rows of the position table (RoBERTa's include its padding index and the one before).
    pub max_position_embeddings: usize,
    /// Rows of the token-type table; 0 where the family has none.
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub pad_token_id: Option<u32>,
    pub layer_norm_order: LayerNormOrder,
    /// Label names of a classification head, when the checkpoint has one.
    pub id2label: Option<BTreeMap<String, String>>,
    /// An encoder–decoder model's decoder (the fields above describe its encoder).
    pub decoder: Option<DecoderConfig>,
    /// What the model is (see [`Architecture`]).
    pub architecture: Architecture,
    /// The tokens that end a generation (`eos_token_id`, one or several).
    pub eos_token_ids: Vec<u32>,
    /// `bos_token_id`, where the config gives one.
    pub bos_token_id: Option<u32>,
}

impl Config {
    /// The decoder's config of an encoder–decoder model; an error for a model without one.
    pub fn decoder(&self) -> Result<&DecoderConfig> {
        self.decoder.as_ref().ok_or_else(|| {
            Error::Engine(format!(
                "a {} model has no decoder to translate with",
                self.family.name()
            ))
        })
    }

    /// Parses and validates `config.json`; `file` names it in errors. A file over
    /// [`MAX_CONFIG_BYTES`] is refused unread.
    pub fn from_json(bytes: &[u8], file: &str) -> Result<Self> {
        if bytes.len() > MAX_CONFIG_BYTES {
            return Err(Error::Config {
                file: file.into(),
                msg: file_too_big(bytes.len() as u64, MAX_CONFIG_BYTES),
            });
        }
        let bad = |msg: String| Error::Config {
            file: file.into(),
            msg,
        };
        let json: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        let model_type = match json.get("model_type") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(t)) => Some(t.as_str()),
            Some(other) => return Err(bad(format!("`model_type` {other} is not a string"))),
        };
        let family = Family::from_model_type(model_type).ok_or_else(|| {
            bad(format!(
                "model_type {:?} is not supported (supported: {})",
                model_type.unwrap_or_default(),
                Family::SUPPORTED
            ))
        })?;
        let model_type = model_type.map(str::to_owned);
        let parse = |e: serde_json::Error| bad(e.to_string());
        let config = match family {
            Family::Bert | Family::Roberta => {
                let c: BertJson = serde_json::from_value(json).map_err(parse)?;
                if c.position_embedding_type != "absolute" {
                    return Err(bad(format!(
                        "`position_embedding_type` {:?} is not supported (only \"absolute\")",
                        c.position_embedding_type
                    )));
                }
                Config {
                    family,
                    model_type: c.model_type,
                    vocab_size: c.vocab_size,
                    hidden_size: c.hidden_size,
                    num_hidden_layers: c.num_hidden_layers,
                    num_attention_heads: c.num_attention_heads,
                    intermediate_size: c.intermediate_size,
                    hidden_act: c.hidden_act,
                    max_position_embeddings: c.max_position_embeddings,
                    type_vocab_size: c.type_vocab_size,
                    layer_norm_eps: c.layer_norm_eps,
                    pad_token_id: c.pad_token_id,
                    layer_norm_order: c.layer_norm_order,
                    id2label: c.id2label,
                    decoder: None,
                    architecture: Architecture::classic(
                        family,
                        ModelKind::Encoder,
                        Positions::Learned {
                            offset: match (family, c.pad_token_id) {
                                (Family::Roberta, Some(pad)) => pad as usize + 1,
                                _ => 0,
                            },
                        },
                        c.hidden_act,
                        c.layer_norm_order,
                        c.layer_norm_eps,
                        c.num_attention_heads,
                        c.hidden_size,
                        c.num_hidden_layers,
                    ),
                    eos_token_ids: vec![],
                    bos_token_id: None,
                }
            }
            Family::DistilBert => {
                let c: DistilBertJson = serde_json::from_value(json).map_err(parse)?;
                Config {
                    family,
                    model_type,
                    vocab_size: c.vocab_size,
                    hidden_size: c.dim,
                    num_hidden_layers: c.n_layers,
                    num_attention_heads: c.n_heads,
                    intermediate_size: c.hidden_dim,
                    hidden_act: c.activation,
                    max_position_embeddings: c.max_position_embeddings,
                    type_vocab_size: 0,
                    // HF's DistilBERT builds every LayerNorm with eps 1e-12
                    layer_norm_eps: 1e-12,
                    pad_token_id: c.pad_token_id,
                    layer_norm_order: LayerNormOrder::Post,
                    id2label: c.id2label,
                    decoder: None,
                    architecture: Architecture::classic(
                        family,
                        ModelKind::Encoder,
                        Positions::Learned { offset: 0 },
                        c.activation,
                        LayerNormOrder::Post,
                        1e-12,
                        c.n_heads,
                        c.dim,
                        c.n_layers,
                    ),
                    eos_token_ids: vec![],
                    bos_token_id: None,
                }
            }
            Family::Gpt2 => {
                let c: Gpt2Json = serde_json::from_value(json).map_err(parse)?;
                for (name, on) in [
                    (
                        "scale_attn_by_inverse_layer_idx",
                        c.scale_attn_by_inverse_layer_idx,
                    ),
                    ("reorder_and_upcast_attn", c.reorder_and_upcast_attn),
                ] {
                    if on {
                        return Err(bad(format!("`{name}` is not supported (only false)")));
                    }
                }
                if !c.scale_attn_weights {
                    return Err(bad(
                        "`scale_attn_weights` false is not supported (the scores are divided by √d_k)".into(),
                    ));
                }
                Config {
                    family,
                    model_type,
                    vocab_size: c.vocab_size,
                    hidden_size: c.n_embd,
                    num_hidden_layers: c.n_layer,
                    num_attention_heads: c.n_head,
                    intermediate_size: c.n_inner.unwrap_or(4 * c.n_embd),
                    hidden_act: c.activation_function,
                    max_position_embeddings: c.n_positions,
                    type_vocab_size: 0,
                    layer_norm_eps: c.layer_norm_epsilon,
                    pad_token_id: c.eos_token_id,
                    layer_norm_order: LayerNormOrder::Pre,
                    id2label: c.id2label,
                    decoder: None,
                    architecture: Architecture::classic(
                        family,
                        ModelKind::Decoder,
                        Positions::Learned { offset: 0 },
                        c.activation_function,
                        LayerNormOrder::Pre,
                        c.layer_norm_epsilon,
                        c.n_head,
                        c.n_embd,
                        c.n_layer,
                    ),
                    eos_token_ids: c.eos_token_id.into_iter().collect(),
                    bos_token_id: None,
                }
            }
            Family::Marian => {
                let c: MarianJson = serde_json::from_value(json).map_err(parse)?;
                if let Some(v) = c.decoder_vocab_size.filter(|&v| v != c.vocab_size) {
                    return Err(bad(format!(
                        "`decoder_vocab_size` {v} differs from `vocab_size` {}: a separate target \
                         vocabulary is not supported",
                        c.vocab_size
                    )));
                }
                Config {
                    family,
                    model_type,
                    vocab_size: c.vocab_size,
                    hidden_size: c.d_model,
                    num_hidden_layers: c.encoder_layers,
                    num_attention_heads: c.encoder_attention_heads,
                    intermediate_size: c.encoder_ffn_dim,
                    hidden_act: c.activation_function,
                    max_position_embeddings: c.max_position_embeddings,
                    type_vocab_size: 0,
                    // HF's Marian builds every LayerNorm with PyTorch's default eps
                    layer_norm_eps: 1e-5,
                    pad_token_id: Some(c.pad_token_id),
                    layer_norm_order: LayerNormOrder::Post,
                    id2label: None,
                    decoder: Some(DecoderConfig {
                        layers: c.decoder_layers,
                        heads: c.decoder_attention_heads,
                        ffn_dim: c.decoder_ffn_dim,
                        start_token_id: c.decoder_start_token_id.unwrap_or(c.pad_token_id),
                        eos_token_id: c.eos_token_id,
                        forced_eos_token_id: c.forced_eos_token_id,
                        embed_scale: if c.scale_embedding {
                            (c.d_model as f32).sqrt()
                        } else {
                            1.0
                        },
                        shared_embeddings: c.share_encoder_decoder_embeddings,
                        focus: c.attnscope_focus,
                    }),
                    architecture: Architecture::classic(
                        family,
                        ModelKind::EncoderDecoder,
                        Positions::Sinusoidal,
                        c.activation_function,
                        LayerNormOrder::Post,
                        1e-5,
                        c.encoder_attention_heads,
                        c.d_model,
                        c.encoder_layers,
                    ),
                    eos_token_ids: vec![c.eos_token_id],
                    bos_token_id: None,
                }
            }
            Family::Llama | Family::Mistral | Family::Qwen2 => {
                let c: LlamaJson = serde_json::from_value(json).map_err(parse)?;
                llama_config(family, model_type, c).map_err(bad)?
            }
        };
        config.validate(file)?;
        Ok(config)
    }

    /// A Llama-family model's config from a GGUF file's metadata (`general.architecture` and
    /// its `{arch}.*` keys, as llama.cpp's converter writes them), read as HF's GGUF loader
    /// reads it: the head size from `{arch}.rope.dimension_count` (or `attention.key_length`),
    /// the vocabulary from `tokenizer.ggml.tokens`, the LM head tied when the file has no
    /// `output.weight`, Q/K/V biases when it has `blk.0.attn_q.bias`.
    pub fn from_gguf(g: &super::gguf::GgufFile) -> Result<Self> {
        let bad = |msg: String| Error::Config {
            file: g.file.clone(),
            msg,
        };
        let arch = g.get_str("general.architecture")?;
        let family = match arch {
            "llama" => Family::Llama,
            "mistral" => Family::Mistral,
            "qwen2" => Family::Qwen2,
            other => {
                return Err(bad(format!(
                    "general.architecture {other:?} is not supported (supported in GGUF files: \
                     llama, mistral, qwen2)"
                )))
            }
        };
        let key = |k: &str| format!("{arch}.{k}");
        let optional_u32 = |k: &str| -> Result<Option<u32>> {
            match g.get(&key(k)) {
                Some(_) => g.get_u32(&key(k)).map(Some),
                None => Ok(None),
            }
        };
        if let Some(scaling) = g.get(&key("rope.scaling.type")) {
            if !matches!(scaling, super::gguf::Value::String(s) if s == "none") {
                return Err(bad(format!(
                    "`{}` {scaling:?} is not supported (only none)",
                    key("rope.scaling.type")
                )));
            }
        }
        let vocab = match g.get("tokenizer.ggml.tokens") {
            Some(_) => g.get_str_array("tokenizer.ggml.tokens")?.len(),
            None => g.get_u32(&key("vocab_size"))? as usize,
        };
        let token_id = |k: &str| -> Result<Option<u32>> {
            match g.get(k) {
                Some(_) => g.get_u32(k).map(Some),
                None => Ok(None),
            }
        };
        let heads = g.get_u32(&key("attention.head_count"))?;
        let head_dim = match optional_u32("rope.dimension_count")? {
            Some(d) => Some(d),
            None => optional_u32("attention.key_length")?,
        };
        let eps = g.get_f32(&key("attention.layer_norm_rms_epsilon"))?;
        let theta = match g.get(&key("rope.freq_base")) {
            Some(_) => g.get_f32(&key("rope.freq_base"))?,
            None => 10000.0,
        };
        let json = serde_json::json!({
            "vocab_size": vocab,
            "hidden_size": g.get_u32(&key("embedding_length"))?,
            "intermediate_size": g.get_u32(&key("feed_forward_length"))?,
            "num_hidden_layers": g.get_u32(&key("block_count"))?,
            "num_attention_heads": heads,
            "num_key_value_heads": optional_u32("attention.head_count_kv")?.unwrap_or(heads),
            "head_dim": head_dim,
            "max_position_embeddings": g.get_u32(&key("context_length"))?,
            // f32 in the file: read as the f64 HF's loader makes of it
            "rms_norm_eps": eps as f64,
            "rope_theta": theta as f64,
            "tie_word_embeddings": g.tensor("output.weight").is_none(),
            "attention_bias": g.tensor("blk.0.attn_q.bias").is_some(),
            "bos_token_id": token_id("tokenizer.ggml.bos_token_id")?,
            "eos_token_id": token_id("tokenizer.ggml.eos_token_id")?,
            "pad_token_id": token_id("tokenizer.ggml.padding_token_id")?,
            "sliding_window": optional_u32("attention.sliding_window")?,
        });
        let c: LlamaJson = serde_json::from_value(json).map_err(|e| bad(e.to_string()))?;
        let config = llama_config(family, Some(arch.to_owned()), c).map_err(bad)?;
        config.validate(&g.file)?;
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
        // errors name the field as the family's config.json names it
        let f = |name: &'static str| self.family.field(name);
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
            // a family without token types has no table of them
            let optional = name == "type_vocab_size" && !self.family.has_token_types();
            let field = f(name);
            if v == 0 && !optional {
                return bad(format!("`{field}` must be positive"));
            }
            // rotary positions have no table: a longer text is refused when it is run
            let rotary = matches!(self.architecture.positions, Positions::Rotary);
            if v > limit && !(rotary && name == "max_position_embeddings") {
                return bad(format!("`{field}` {v} is over the limit of {limit}"));
            }
        }
        let own_head_dim = self.family.is_llama();
        if !own_head_dim && !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return bad(format!(
                "`{}` {} is not divisible by `{}` {}",
                f("hidden_size"),
                self.hidden_size,
                f("num_attention_heads"),
                self.num_attention_heads
            ));
        }
        // RoBERTa's positions start after its padding index, which is a row of the table too
        if let (Family::Roberta, Some(pad)) = (self.family, self.pad_token_id) {
            if pad as usize + 1 >= self.max_position_embeddings {
                return bad(format!(
                    "`pad_token_id` {pad} leaves no position for a token: RoBERTa's positions \
                     start after it, and `max_position_embeddings` is {}",
                    self.max_position_embeddings
                ));
            }
        }
        // The engines compute in f32: an eps that is not a positive f32 breaks every LayerNorm.
        let eps = self.layer_norm_eps as f32;
        if !(eps.is_finite() && eps > 0.0) {
            return bad(format!(
                "`{}` {} must be positive and finite in f32",
                f("layer_norm_eps"),
                self.layer_norm_eps
            ));
        }
        if let Some(d) = &self.decoder {
            for (name, v, limit) in [
                ("decoder_layers", d.layers, MAX_LAYERS),
                ("decoder_attention_heads", d.heads, MAX_HEADS),
                ("decoder_ffn_dim", d.ffn_dim, MAX_INTERMEDIATE_SIZE),
            ] {
                if v == 0 {
                    return bad(format!("`{name}` must be positive"));
                }
                if v > limit {
                    return bad(format!("`{name}` {v} is over the limit of {limit}"));
                }
            }
            if !self.hidden_size.is_multiple_of(d.heads) {
                return bad(format!(
                    "`d_model` {} is not divisible by `decoder_attention_heads` {}",
                    self.hidden_size, d.heads
                ));
            }
            if let Some(f) = d.focus {
                if f.layer >= d.layers || f.head.is_some_and(|h| h >= d.heads) {
                    return bad(format!(
                        "`attnscope_focus` {f:?} is not a head of the decoder's {} layers of {} heads",
                        d.layers, d.heads
                    ));
                }
            }
            let v = self.vocab_size as u64;
            for (name, id) in [
                ("decoder_start_token_id", Some(d.start_token_id)),
                ("eos_token_id", Some(d.eos_token_id)),
                ("forced_eos_token_id", d.forced_eos_token_id),
                ("pad_token_id", self.pad_token_id),
            ] {
                if let Some(id) = id.filter(|&id| id as u64 >= v) {
                    return bad(format!(
                        "`{name}` {id} is not a token of the vocabulary (`vocab_size` {v})"
                    ));
                }
            }
        }
        let parameters = self.parameter_count();
        if parameters > MAX_PARAMETERS as u128 {
            return bad(format!(
                "the sizes imply {parameters} parameters (vocab_size {}, {} {}, {} {}, {} {}), \
                 over the limit of {MAX_PARAMETERS}",
                self.vocab_size,
                f("hidden_size"),
                self.hidden_size,
                f("num_hidden_layers"),
                self.num_hidden_layers,
                f("intermediate_size"),
                self.intermediate_size
            ));
        }
        let (l, h, p) = (
            self.num_hidden_layers as u128,
            self.num_attention_heads as u128,
            self.max_tokens() as u128,
        );
        if matches!(self.architecture.positions, Positions::Rotary) {
            // a long context is the point of these models: a pass over more tokens than
            // `MAX_ATTENTION_VALUES` allows is refused when it is run, saying how many fit
            return Ok(());
        }
        // a decoder's layers attend over its outputs and, across, over the source
        let decoder = self
            .decoder
            .as_ref()
            .map_or(0, |d| d.layers as u128 * d.heads as u128 * 2 * p * p);
        let attention = l * h * p * p + decoder;
        if attention > MAX_MODEL_ATTENTION_VALUES as u128 {
            return bad(format!(
                "one text of {} {p} tokens would make {attention} attention probabilities \
                 ({} {l} × {} {h} × {p}²), over the limit of {MAX_MODEL_ATTENTION_VALUES}",
                f("max_position_embeddings"),
                f("num_hidden_layers"),
                f("num_attention_heads")
            ));
        }
        Ok(())
    }

    /// The number of parameters the model's tensors hold by this config (embeddings and every
    /// layer; not a classification head), in `u128` so that no size can overflow it.
    pub fn parameter_count(&self) -> u128 {
        let (v, d, p, t, i) = (
            self.vocab_size as u128,
            self.hidden_size as u128,
            self.max_position_embeddings as u128,
            self.type_vocab_size as u128,
            self.intermediate_size as u128,
        );
        // the tables, and the LayerNorm after them (GPT-2: its final ln_f instead)
        let embeddings = (v + p + t) * d + 2 * d;
        // Q, K, V and output projections; two LayerNorms; the feed-forward pair.
        let layer = 4 * (d * d + d) + 2 * 2 * d + (d * i + i) + (i * d + d);
        if self.family.is_llama() {
            let a = &self.architecture;
            let (q, kv) = (
                (a.heads.query * a.head_dim) as u128,
                (a.heads.key_value * a.head_dim) as u128,
            );
            let bias = |on: bool, n: u128| if on { n } else { 0 };
            let layer = d * q
                + 2 * d * kv
                + bias(a.biases.qkv, q + 2 * kv)
                + q * d
                + bias(a.biases.output, d)
                + 3 * d * i
                + bias(a.biases.feed_forward, 2 * i + d)
                + 2 * d;
            let head = if a.lm_head == LmHead::Separate {
                v * d
            } else {
                0
            };
            return v * d + head + self.num_hidden_layers as u128 * layer + d;
        }
        if let Some(dec) = &self.decoder {
            // Marian: one table of token embeddings, its positions computed, the logits' bias;
            // a decoder layer has a cross-attention and its LayerNorm more
            let f = dec.ffn_dim as u128;
            let dec_layer = 8 * (d * d + d) + 3 * 2 * d + (d * f + f) + (f * d + d);
            return v * d
                + v
                + self.num_hidden_layers as u128 * layer
                + dec.layers as u128 * dec_layer;
        }
        embeddings + self.num_hidden_layers as u128 * layer
    }

    /// The longest text in tokens: the position table's rows, less RoBERTa's padding index and
    /// the row before it.
    pub fn max_tokens(&self) -> usize {
        if let Positions::Rotary = self.architecture.positions {
            return self.max_position_embeddings.min(MAX_POSITIONS);
        }
        match (self.family, self.pad_token_id) {
            (Family::Roberta, Some(pad)) => self
                .max_position_embeddings
                .saturating_sub(pad as usize + 1),
            _ => self.max_position_embeddings,
        }
    }

    /// Size of one head, `d_k = d_v` (`hidden_size / num_attention_heads`, or `head_dim`).
    pub fn head_dim(&self) -> usize {
        self.architecture.head_dim
    }
}
