//! The model's `config.json`, deserialised from Hugging Face's own field names.

use serde::Deserialize;
use std::collections::BTreeMap;

use super::limits::{
    MAX_HEADS, MAX_HIDDEN_SIZE, MAX_INTERMEDIATE_SIZE, MAX_LAYERS, MAX_MODEL_ATTENTION_VALUES,
    MAX_PARAMETERS, MAX_POSITIONS, MAX_TYPE_VOCAB_SIZE, MAX_VOCAB_SIZE,
};
use super::rope::Rotary;
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

/// The family that read a config (`crate::families` reads each): its name, as HF's `model_type`
/// names it and reports give it, and the names its `config.json` gives the fields BERT names
/// otherwise, so that an error names a field as the file does (GPT-2's `n_embd` for
/// `hidden_size`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    /// `(BERT's name, the family's)` for each field it names otherwise.
    pub renamed: &'static [(&'static str, &'static str)],
}

impl Family {
    /// The family as HF's `model_type` names it.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The name this family's `config.json` gives the field BERT names `bert_name`.
    pub fn field(self, bert_name: &'static str) -> &'static str {
        self.renamed
            .iter()
            .find(|(bert, _)| *bert == bert_name)
            .map_or(bert_name, |(_, own)| own)
    }
}

/// serde's default for a field that is `true` where a config leaves it out.
pub fn default_true() -> bool {
    true
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

/// A stack of `n` layers (the config's `field`), layer `i` being `layer(i)`: or, where `n` is
/// over [`MAX_LAYERS`], the error [`Config::validate`] gives, before anything is allocated
/// from it.
pub fn stack_of(
    n: usize,
    field: &str,
    layer: impl FnMut(usize) -> Layer,
) -> std::result::Result<Vec<Layer>, String> {
    if n > MAX_LAYERS {
        return Err(format!("`{field}` {n} is over the limit of {MAX_LAYERS}"));
    }
    Ok((0..n).map(layer).collect())
}

/// `n` global layers that add their positions to the embeddings (BERT's, GPT-2's, a Marian
/// encoder's), as [`stack_of`].
pub fn global_layers(n: usize, field: &str) -> std::result::Result<Vec<Layer>, String> {
    stack_of(n, field, |_| Layer::plain())
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

/// One layer of a model's stack, as its family declares it: what its attention reaches, the
/// rotation it turns its queries and keys by (`None`: positions added to the embeddings), what
/// its scores are multiplied by, and whether its queries and keys are normed head by head.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Layer {
    #[serde(flatten)]
    pub reach: Reach,
    pub rotary: Option<Rotary>,
    /// What the scores `q·k` are multiplied by in place of `1/√d_k` (Gemma 3's
    /// `query_pre_attn_scalar^-½`).
    pub score_scale: Option<f32>,
    /// QK-norm: each query and key head through an RMSNorm of its own before the rotation
    /// (Qwen3's, Gemma 3's).
    pub qk_norm: bool,
    /// Where its norms stand around its attention and its feed-forward.
    pub norms: NormPlacement,
}

impl Layer {
    /// A global layer that adds its positions to the embeddings, its scores `q·k/√d_k`, no
    /// QK-norm, its norms after each residual (BERT's, GPT-2's, Marian's: a family sets
    /// `norms`).
    pub fn plain() -> Self {
        Self {
            reach: Reach::Global,
            rotary: None,
            score_scale: None,
            qk_norm: false,
            norms: NormPlacement::Post,
        }
    }
}

/// Where a layer's norms stand around each of its sub-layers `f` (attention, feed-forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormPlacement {
    /// `x + f(norm(x))` (GPT-2, Llama).
    Pre,
    /// `norm(x + f(x))` (BERT, Marian).
    Post,
    /// `x + norm(f(norm(x)))`: a norm before the sub-layer and one on its output (Gemma 3).
    Both,
}

impl From<LayerNormOrder> for NormPlacement {
    fn from(order: LayerNormOrder) -> Self {
        match order {
            LayerNormOrder::Pre => Self::Pre,
            LayerNormOrder::Post => Self::Post,
        }
    }
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
    /// Where the LM head's logits `z` are soft-capped, as `cap·tanh(z/cap)` (Gemma's
    /// `final_logit_softcapping`).
    pub logit_cap: Option<f32>,
    /// Segment A / B embeddings.
    pub token_types: bool,
    /// The stack's layers, first to last (an encoder–decoder's: its encoder's).
    pub layers: Vec<Layer>,
}

impl Architecture {
    /// The architecture of the families of 2018–2019 (BERT, RoBERTa, DistilBERT, GPT-2, Marian):
    /// LayerNorm, a plain feed-forward, a key/value head for every query head, biases
    /// everywhere; GPT-2's LM head tied to its embeddings, Marian's to its shared ones.
    /// `layers`: [`global_layers`].
    #[allow(clippy::too_many_arguments)]
    pub fn classic(
        token_types: bool,
        kind: ModelKind,
        positions: Positions,
        activation: Activation,
        order: LayerNormOrder,
        eps: f64,
        heads: usize,
        hidden: usize,
        layers: Vec<Layer>,
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
            logit_cap: None,
            token_types,
            layers: layers
                .into_iter()
                .map(|l| Layer {
                    norms: order.into(),
                    ..l
                })
                .collect(),
        }
    }

    /// The rotation layer `layer` turns its queries and keys by, where it has one.
    pub fn rotary(&self, layer: usize) -> Option<&Rotary> {
        self.layers.get(layer).and_then(|l| l.rotary.as_ref())
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

/// A model's configuration, read from its `config.json` by its family (`crate::families`) by its
/// own field names and described here with BERT's (HF's `hidden_size`, `num_hidden_layers`, …), whatever the
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
    /// How its family counts its parameters ([`Config::parameter_count`]).
    pub parameters: fn(&Config) -> u128,
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
            let optional = name == "type_vocab_size" && !self.architecture.token_types;
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
        // rotary families give their head size (`head_dim`); the others divide `hidden_size`
        let own_head_dim = self.architecture.positions == Positions::Rotary;
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
        if let Positions::Learned { offset } = self.architecture.positions {
            if offset > 0 && offset >= self.max_position_embeddings {
                return bad(format!(
                    "`pad_token_id` {} leaves no position for a token: RoBERTa's positions \
                     start after it, and `max_position_embeddings` is {}",
                    offset - 1,
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
    /// layer; not a classification head), in `u128` so that no size can overflow it: as its
    /// family counts them ([`Config::parameters`]).
    pub fn parameter_count(&self) -> u128 {
        (self.parameters)(self)
    }

    /// [`Config::parameter_count`] of the families of 2018–2019 (BERT, RoBERTa, DistilBERT,
    /// GPT-2): the tables and the LayerNorm after them (GPT-2: its final `ln_f` instead), and
    /// in each layer the Q, K, V and output projections, two LayerNorms and the feed-forward
    /// pair, every one with its bias.
    pub fn classic_parameters(&self) -> u128 {
        let (v, d, p, t, i) = (
            self.vocab_size as u128,
            self.hidden_size as u128,
            self.max_position_embeddings as u128,
            self.type_vocab_size as u128,
            self.intermediate_size as u128,
        );
        (v + p + t) * d + 2 * d + self.num_hidden_layers as u128 * classic_layer(d, i)
    }

    /// The longest text in tokens: the position table's rows, less RoBERTa's padding index and
    /// the row before it.
    pub fn max_tokens(&self) -> usize {
        if let Positions::Rotary = self.architecture.positions {
            return self.max_position_embeddings.min(MAX_POSITIONS);
        }
        match self.architecture.positions {
            Positions::Learned { offset } => self.max_position_embeddings.saturating_sub(offset),
            _ => self.max_position_embeddings,
        }
    }

    /// Size of one head, `d_k = d_v` (`hidden_size / num_attention_heads`, or `head_dim`).
    pub fn head_dim(&self) -> usize {
        self.architecture.head_dim
    }
}

/// The parameters of one classic layer (BERT's, GPT-2's, a Marian encoder's) of width `d` and
/// feed-forward width `i`: Q, K, V and output projections, two LayerNorms, the feed-forward
/// pair, each with its bias.
pub fn classic_layer(d: u128, i: u128) -> u128 {
    4 * (d * d + d) + 2 * 2 * d + (d * i + i) + (i * d + d)
}
