//! Llama, Mistral, Qwen2 and Qwen3 (`LlamaForCausalLM`, `MistralForCausalLM`,
//! `Qwen2ForCausalLM`, `Qwen3ForCausalLM`): a decoder-only stack, pre-RMSNorm, rotary positions
//! on Q and K, grouped-query attention (a key/value head shared by a group of query heads), a
//! SwiGLU feed-forward, and an LM head of its own or tied to the token embeddings. Its
//! [`Architecture`](crate::model::config::Architecture) says which biases it has (Qwen2's on Q,
//! K and V), its heads, rotation and windows, and whether its layers have QK-norm (Qwen3's: each
//! query and key head through an RMSNorm of its own before the rotation).
//!
//! ```text
//! x = embed_tokens[ids]
//! each layer:  a = input_layernorm(x)
//!              x = x + o_proj(attn(rope(q_proj(a)), rope(k_proj(a)), v_proj(a)))
//!              (Qwen3: rope(q_norm(q_proj(a))), rope(k_norm(k_proj(a))), head by head)
//!              m = post_attention_layernorm(x)
//!              x = x + down_proj(silu(gate_proj(m)) ⊙ up_proj(m))
//! h = norm(x);  logits = lm_head(h)
//! ```

use rayon::prelude::*;

use crate::engine::network::{run_on, EngineOps, Forward, Network, Unembedding};
use crate::engine::ops::{
    values, AttentionId, AttentionSpec, CacheSlot, GatedFeedForward, Ids, Kept, Ops, Stack, Value,
};
use crate::error::{Error, Result};
use ndarray::Array1;

use crate::model::config::{
    stack_of, Activation, Architecture, Biases, Family, FeedForward, Heads, Layer as LayerArch,
    LayerNormOrder, LmHead, ModelKind, NormPlacement, Positions, Reach,
};
use crate::model::gguf::{self, GgufFile};
use crate::model::limits::MAX_HIDDEN_SIZE;
use crate::model::quant::{QuantMatrix, SharedBytes};
use crate::model::rope::{RopeJson, Rotary};
use crate::model::weights::{Linear, Norm, Table, Tensors};
use crate::model::Config;
use serde::Deserialize;

/// Llama, Mistral, Qwen2 and Qwen3 (`llama`, `mistral`, `qwen2`, `qwen3`), from safetensors or
/// GGUF.
pub const FAMILY: super::FamilyEntry = super::FamilyEntry {
    model_types: &Variant::NAMES,
    untyped: false,
    config,
    weights: |t, c| Ok(Box::new(LlamaWeights::load(t, c)?)),
    gguf: Some(super::GgufFamily {
        architectures: &Variant::NAMES,
        config: gguf_config,
        weights: |g, bytes, c| Ok(Box::new(LlamaWeights::from_gguf(g, bytes, c)?)),
        sentencepiece: crate::model::gguf_tokenizer::SentencePiece::Llama,
    }),
};

/// The family's `model_type`s (and GGUF architectures): Llama's layers, Mistral's with a window
/// over every layer, Qwen2's with biases on Q, K and V and a window on some layers, Qwen3's with
/// QK-norm and Qwen2's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
}

impl Variant {
    /// Its names: `config.json`'s `model_type`, a GGUF file's `general.architecture`.
    pub(super) const NAMES: [&str; 4] = ["llama", "mistral", "qwen2", "qwen3"];

    fn of(name: &str) -> Option<Self> {
        match name {
            "llama" => Some(Self::Llama),
            "mistral" => Some(Self::Mistral),
            "qwen2" => Some(Self::Qwen2),
            "qwen3" => Some(Self::Qwen3),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Mistral => "mistral",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
        }
    }

    /// Whether its layers norm each query and key head (QK-norm).
    fn qk_norm(self) -> bool {
        self == Self::Qwen3
    }
}

/// A Llama, Mistral or Qwen2 `config.json`.
pub(super) fn config(
    json: serde_json::Value,
    model_type: Option<&str>,
) -> std::result::Result<Config, String> {
    let variant = model_type
        .and_then(Variant::of)
        .ok_or_else(|| format!("model_type {model_type:?} is not a Llama-family model's"))?;
    let c: LlamaJson = serde_json::from_value(json).map_err(|e| e.to_string())?;
    llama_config(variant, model_type.map(str::to_owned), c)
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

/// A Llama, Mistral or Qwen2 config: the fields the engines read, or why it cannot run.
fn llama_config(
    variant: Variant,
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
    if head_dim == 0 || !head_dim.is_multiple_of(2) || head_dim > MAX_HIDDEN_SIZE {
        return Err(format!(
            "the head size {head_dim} (`head_dim`, or `hidden_size` / `num_attention_heads`) must be \
             even and positive for rotary positions, and at most {}",
            MAX_HIDDEN_SIZE
        ));
    }
    let rope = c.rope.rotary(head_dim, c.max_position_embeddings)?;
    let layers = {
        let (window, slides) = windows(variant, &c)?;
        stack_of(c.num_hidden_layers, "num_hidden_layers", |i| LayerArch {
            reach: match window {
                Some(w) if slides.slides(i) => Reach::Sliding(w),
                _ => Reach::Global,
            },
            rotary: Some(rope),
            qk_norm: variant.qk_norm(),
            norms: NormPlacement::Pre,
            ..LayerArch::plain()
        })?
    };
    check_windows(&layers)?;
    let qkv_bias = variant == Variant::Qwen2 || c.attention_bias;
    Ok(Config {
        family: Family {
            name: variant.name(),
            renamed: &[("layer_norm_eps", "rms_norm_eps")],
        },
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
            logit_cap: None,
            token_types: false,
            layers,
        },
        eos_token_ids: c.eos_token_id.map(TokenIds::into_vec).unwrap_or_default(),
        bos_token_id: c.bos_token_id,
        parameters,
    })
}

/// The parameters of a Llama-family model: the token embeddings (and an LM head of its own),
/// each layer's projections (Q of `H·d`, K and V of `H_kv·d`, with the biases it has), the
/// gated feed-forward's three matrices, its two RMSNorms, and the final norm.
fn parameters(c: &Config) -> u128 {
    let a = &c.architecture;
    let (v, d, i) = (
        c.vocab_size as u128,
        c.hidden_size as u128,
        c.intermediate_size as u128,
    );
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
        + 2 * d
        + bias(a.layers.iter().any(|l| l.qk_norm), 2 * a.head_dim as u128);
    let head = if a.lm_head == LmHead::Separate {
        v * d
    } else {
        0
    };
    v * d + head + c.num_hidden_layers as u128 * layer + d
}

/// Which of a Llama-family model's layers slide.
enum Slides<'a> {
    Every,
    /// Qwen2's layers from this one on (`max_window_layers`).
    From(usize),
    /// Qwen2's `layer_types`: those of `"sliding_attention"`.
    Types(&'a [String]),
}

impl Slides<'_> {
    fn slides(&self, i: usize) -> bool {
        match self {
            Self::Every => true,
            Self::From(from) => i >= *from,
            Self::Types(types) => types[i] == "sliding_attention",
        }
    }
}

/// The window a Llama-family model's sliding layers attend through, and which layers slide, as
/// HF's config classes read them: Mistral's `sliding_window` (4,096 where the key is absent;
/// `null`: none) over every layer; Qwen2's over the layers that slide (by `layer_types`, or from
/// `max_window_layers` on) where `use_sliding_window` is on; Llama none.
fn windows(
    variant: Variant,
    c: &LlamaJson,
) -> std::result::Result<(Option<usize>, Slides<'_>), String> {
    match variant {
        Variant::Mistral => Ok((c.sliding_window.unwrap_or(Some(4096)), Slides::Every)),
        Variant::Qwen2 | Variant::Qwen3 => {
            let window = c.sliding_window.flatten().filter(|_| c.use_sliding_window);
            let Some(types) = &c.layer_types else {
                return Ok((window, Slides::From(c.max_window_layers.unwrap_or(28))));
            };
            if types.len() != c.num_hidden_layers {
                return Err(format!(
                    "`layer_types` names {} layers, and `num_hidden_layers` is {}",
                    types.len(),
                    c.num_hidden_layers
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
            Ok((window, Slides::Types(types)))
        }
        Variant::Llama => Ok((None, Slides::Every)),
    }
}

/// A window of 0 positions would hide every key, the query's own too.
fn check_windows(layers: &[LayerArch]) -> std::result::Result<(), String> {
    match layers.iter().find(|l| l.reach == Reach::Sliding(0)) {
        Some(_) => Err("`sliding_window` 0 hides every key: it must be at least 1".into()),
        None => Ok(()),
    }
}

/// A Llama-family model's config from a GGUF file's metadata (`general.architecture` and its
/// `{arch}.*` keys, as llama.cpp's converter writes them), read as HF's GGUF loader reads it:
/// the head size from `{arch}.rope.dimension_count` (or `attention.key_length`), the vocabulary
/// from `tokenizer.ggml.tokens`, the LM head tied when the file has no `output.weight`, Q/K/V
/// biases when it has `blk.0.attn_q.bias`.
pub(super) fn gguf_config(g: &GgufFile) -> Result<Config> {
    let bad = |msg: String| Error::Config {
        file: g.file.clone(),
        msg,
    };
    let arch = g.get_str("general.architecture")?;
    let variant = Variant::of(arch).ok_or_else(|| {
        bad(format!(
            "general.architecture {arch:?} is not a Llama-family model's"
        ))
    })?;
    let key = |k: &str| format!("{arch}.{k}");
    let optional_u32 = |k: &str| -> Result<Option<u32>> {
        match g.get(&key(k)) {
            Some(_) => g.get_u32(&key(k)).map(Some),
            None => Ok(None),
        }
    };
    if let Some(scaling) = g.get(&key("rope.scaling.type")) {
        if !matches!(scaling, gguf::Value::String(s) if s == "none") {
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
    let config = llama_config(variant, Some(arch.to_owned()), c).map_err(bad)?;
    config.validate(&g.file)?;
    Ok(config)
}

/// The norm's output entering attention, and entering the feed-forward.
const ATTN_NORM: Value = Value::rows("attn_norm");
const FFN_NORM: Value = Value::rows("ffn_norm");

/// The key every checkpoint of the family holds, under its model prefix (`model.` in
/// `LlamaForCausalLM`, none in `LlamaModel`).
const ANCHOR: &str = "embed_tokens.weight";

/// One decoder layer's weights (`layers.{i}.…`).
#[derive(Debug, Clone)]
pub struct Layer {
    pub input_layernorm: Norm,
    /// `self_attn.q_proj`: `D → H·d`.
    pub q_proj: Linear,
    /// `self_attn.k_proj`, `self_attn.v_proj`: `D → H_kv·d`.
    pub k_proj: Linear,
    pub v_proj: Linear,
    /// `self_attn.o_proj`: `H·d → D`.
    pub o_proj: Linear,
    /// `self_attn.q_norm`, `self_attn.k_norm`: QK-norm's RMSNorms over a head's `d`, where the
    /// layer has it (Qwen3).
    pub qk_norm: Option<[Norm; 2]>,
    pub post_attention_layernorm: Norm,
    /// `mlp.gate_proj`, `mlp.up_proj`: `D → F`; `mlp.down_proj`: `F → D`.
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl Layer {
    /// The layer's gated feed-forward under `act`.
    fn feed_forward(&self, act: Activation) -> GatedFeedForward<'_> {
        GatedFeedForward {
            gate: &self.gate_proj,
            up: &self.up_proj,
            down: &self.down_proj,
            act,
        }
    }
}

/// All weights of a Llama-family model.
#[derive(Debug, Clone)]
pub struct LlamaWeights {
    /// `(vocab_size, D)`.
    pub embed_tokens: Table,
    pub layers: Vec<Layer>,
    /// The final RMSNorm.
    pub norm: Norm,
    /// `lm_head`: its own `(vocab_size, D)`, or the token embeddings (`tie_word_embeddings`).
    pub lm_head: Linear,
}

impl LlamaWeights {
    /// Loads every tensor the model needs; each missing or misshapen one is an error naming
    /// its key.
    pub fn load(t: &Tensors, c: &Config) -> Result<Self> {
        let a = &c.architecture;
        let (d, f, eps) = (c.hidden_size, c.intermediate_size, c.layer_norm_eps);
        let (q, kv) = (a.heads.query * a.head_dim, a.heads.key_value * a.head_dim);
        t.check_holds(
            c.parameter_count(),
            &format!(
                "vocab_size {}, hidden_size {d}, num_hidden_layers {}, intermediate_size {f}, \
                 {} query heads and {} key/value heads of {}",
                c.vocab_size, c.num_hidden_layers, a.heads.query, a.heads.key_value, a.head_dim
            ),
        )?;
        let p = t.prefix_of(ANCHOR)?;
        // `{key}.weight` `(output, input)`, and `{key}.bias` where the architecture has one
        let linear = |key: &str, input: usize, output: usize, bias: bool| -> Result<Linear> {
            let w = t.read2(&format!("{key}.weight"), output, input)?;
            let b = if bias {
                t.read1(&format!("{key}.bias"), output)?
            } else {
                ndarray::Array1::zeros(output)
            };
            Ok(Linear::new(w, b))
        };
        let layer = |i: usize| -> Result<Layer> {
            let k = |name: &str| format!("{p}layers.{i}.{name}");
            let b = a.biases;
            Ok(Layer {
                input_layernorm: Norm::load_rms(t, &k("input_layernorm"), d, eps)?,
                q_proj: linear(&k("self_attn.q_proj"), d, q, b.qkv)?,
                k_proj: linear(&k("self_attn.k_proj"), d, kv, b.qkv)?,
                v_proj: linear(&k("self_attn.v_proj"), d, kv, b.qkv)?,
                o_proj: linear(&k("self_attn.o_proj"), q, d, b.output)?,
                qk_norm: match a.layers[i].qk_norm {
                    true => Some([
                        Norm::load_rms(t, &k("self_attn.q_norm"), a.head_dim, eps)?,
                        Norm::load_rms(t, &k("self_attn.k_norm"), a.head_dim, eps)?,
                    ]),
                    false => None,
                },
                post_attention_layernorm: Norm::load_rms(
                    t,
                    &k("post_attention_layernorm"),
                    d,
                    eps,
                )?,
                gate_proj: linear(&k("mlp.gate_proj"), d, f, b.feed_forward)?,
                up_proj: linear(&k("mlp.up_proj"), d, f, b.feed_forward)?,
                down_proj: linear(&k("mlp.down_proj"), f, d, b.feed_forward)?,
            })
        };
        let embed_tokens = Table::load(t, &format!("{p}embed_tokens.weight"), c.vocab_size, d)?;
        // read and packed on every thread; the first error in layer order is the one reported
        let layers = (0..c.num_hidden_layers)
            .into_par_iter()
            .map(layer)
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let norm = Norm::load_rms(t, &format!("{p}norm"), d, eps)?;
        let lm_head = match a.lm_head {
            LmHead::Separate => Linear::new(
                t.read2("lm_head.weight", c.vocab_size, d)?,
                ndarray::Array1::zeros(c.vocab_size),
            ),
            LmHead::Tied | LmHead::None => Linear::tied(&embed_tokens, None),
        };
        Ok(Self {
            embed_tokens,
            layers,
            norm,
            lm_head,
        })
    }

    /// The stack over the batch the engine holds (or over a decoding step's new tokens, their
    /// keys and values appended to the cache); the LM head's logits when the trace keeps them.
    /// Returns `norm` of the last layer's output, `(B·T, D)`.
    pub fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        let a = &c.architecture;
        let FeedForward::Gated { activation } = a.feed_forward else {
            return Err(Error::Engine(
                "a Llama-family model needs a gated feed-forward".into(),
            ));
        };
        let mut x = ops.gather(&self.embed_tokens, Ids::Tokens)?; // (B·T, D)
        ops.keep(Kept::EmbeddingWord, &x)?;
        ops.keep(Kept::EmbeddingSum, &x)?;
        ops.keep(Kept::Hidden(0), &x)?;
        if a.layers.len() != self.layers.len() {
            return Err(Error::Engine(format!(
                "the architecture declares {} layers, and the weights have {}",
                a.layers.len(),
                self.layers.len()
            )));
        }
        for (i, (l, arch)) in self.layers.iter().zip(&a.layers).enumerate() {
            let value = |v: Value| Kept::Layer(i, v);
            let Some(rope) = &arch.rotary else {
                return Err(Error::Engine(format!(
                    "layer {i} of a Llama-family model needs rotary positions"
                )));
            };
            // x = x + attn(input_layernorm(x))
            let n = ops.norm(&x, &l.input_layernorm)?;
            ops.keep(value(ATTN_NORM), &n)?;
            let qkv = ops.project(&n, &[&l.q_proj, &l.k_proj, &l.v_proj])?;
            let (q, k, v) = (&qkv[0], &qkv[1], &qkv[2]); // (B·T, H·d), 2 × (B·T, H_kv·d)
            ops.keep(value(values::Q), q)?;
            ops.keep(value(values::K), k)?;
            ops.keep(value(values::V), v)?;
            // QK-norm: each query and key head through its own RMSNorm, before the rotation
            let (q, k) = match &l.qk_norm {
                Some([q_norm, k_norm]) => {
                    let q = ops.norm_heads(q, a.heads.query, q_norm)?;
                    let k = ops.norm_heads(k, a.heads.key_value, k_norm)?;
                    ops.keep(value(Value::heads("q_normed", a.heads.query)), &q)?;
                    ops.keep(value(Value::heads("k_normed", a.heads.key_value)), &k)?;
                    (q, k)
                }
                None => (q.clone(), k.clone()),
            };
            let (q, k) = rotated(ops, rope, a.heads.query, a.heads.key_value, &q, &k)?;
            ops.keep(value(Value::heads("q_rope", a.heads.query)), &q)?;
            ops.keep(value(Value::heads("k_rope", a.heads.key_value)), &k)?;
            // a decoding step's keys and values join those of the positions before it
            let k = ops.extend(CacheSlot::SelfKeys(i), &k)?;
            let v = ops.extend(CacheSlot::SelfValues(i), v)?;
            let id = AttentionId::self_attention(Stack::Decoder, i);
            let spec = AttentionSpec::of(arch, a.heads);
            let context = ops.attention(id, spec, &q, &k, &v)?; // (B·T, H·d)
            ops.keep(value(values::CONTEXT), &context)?;
            let attn = ops.linear(&context, &l.o_proj, None)?;
            let h = ops.add_norm(&x, &attn, &l.post_attention_layernorm)?;
            ops.keep(value(values::ATTENTION_OUTPUT), &h.sum)?;
            ops.keep(value(FFN_NORM), &h.norm)?;
            // x = x + mlp(post_attention_layernorm(x)), mlp(m) = down(act(gate(m)) ⊙ up(m))
            let mlp = ops.gated_feed_forward(&h.norm, &l.feed_forward(activation), i)?;
            x = ops.add(&h.sum, &mlp)?;
            ops.keep(Kept::Hidden(i + 1), &x)?;
        }
        let out = ops.norm(&x, &self.norm)?;
        ops.keep(Kept::Output, &out)?;
        super::lm_logits(ops, &out, &self.lm_head, c.architecture.logit_cap)?;
        Ok(out)
    }
}

/// `q` and `k` turned by their positions ([`Ops::rotate`]).
///
/// # Shapes
/// * `q`: `(B·T, H·d)`, `k`: `(B·T, H_kv·d)` → the same
fn rotated<O: Ops>(
    ops: &mut O,
    rope: &Rotary,
    heads: usize,
    kv_heads: usize,
    q: &O::X,
    k: &O::X,
) -> Result<(O::X, O::X)> {
    Ok((
        ops.rotate(q, heads, rope, Ids::Positions)?,
        ops.rotate(k, kv_heads, rope, Ids::Positions)?,
    ))
}

/// The GGUF names of a Llama-family model's tensors, as llama.cpp's converter writes them.
mod gguf_keys {
    pub const EMBED: &str = "token_embd.weight";
    pub const NORM: &str = "output_norm.weight";
    pub const OUTPUT: &str = "output.weight";
    pub fn layer(i: usize, name: &str) -> String {
        format!("blk.{i}.{name}")
    }
}

impl LlamaWeights {
    /// Reads the model from a GGUF file `g` whose bytes are `bytes`: each matrix kept in its
    /// ggml type (quantized ones stay quantized, sharing the file's bytes), the norms' weights
    /// and the biases as f32. The converter's row permutation of Q and K (`LlamaModel.permute`,
    /// for its interleaved rotation) is undone, so that every value equals HF's.
    pub fn from_gguf(g: &GgufFile, bytes: &SharedBytes, c: &Config) -> Result<Self> {
        let a = &c.architecture;
        let (d, f) = (c.hidden_size, c.intermediate_size);
        let (q, kv) = (a.heads.query * a.head_dim, a.heads.key_value * a.head_dim);
        let r = super::gguf_reader(g, bytes);
        let matrix = |key: &str, rows: usize, cols: usize| r.matrix(key, rows, cols);
        let vector = |key: &str, n: usize| r.vector(key, n);
        let bias = |key: &str, n: usize, on: bool| -> Result<Array1<f32>> {
            if on {
                vector(key, n)
            } else {
                Ok(Array1::zeros(n))
            }
        };
        let rms_of = |key: &str, n: usize| -> Result<Norm> {
            Ok(Norm::rms(vector(key, n)?, c.layer_norm_eps as f32))
        };
        let rms = |key: &str| rms_of(key, d);
        // Q and K rows back in HF's order ([`converted_row`])
        let unpermute = |m: QuantMatrix, heads: usize| -> Result<QuantMatrix> {
            let hd = a.head_dim;
            let order: Vec<usize> = (0..heads * hd).map(|r| converted_row(r, hd)).collect();
            rows_reordered(&m, &order).map_err(|e| Error::Gguf {
                file: g.file.clone(),
                msg: e.to_string(),
            })
        };
        let b = a.biases;
        // llama.cpp turns Llama's (and Mistral's) pairs `(2j, 2j+1)`, so its converter
        // interleaves their Q and K rows; Qwen2's and Qwen3's it turns as HF does, and leaves
        // alone
        let permuted = matches!(
            Variant::of(c.family.name()),
            Some(Variant::Llama | Variant::Mistral)
        );
        let layer = |i: usize| -> Result<Layer> {
            let k = |name: &str| gguf_keys::layer(i, name);
            let (mut wq, mut wk) = (
                matrix(&k("attn_q.weight"), q, d)?,
                matrix(&k("attn_k.weight"), kv, d)?,
            );
            if permuted {
                wq = unpermute(wq, a.heads.query)?;
                wk = unpermute(wk, a.heads.key_value)?;
            }
            // the biases of Q and K are permuted as their rows are
            let (bq, bk) = if b.qkv && permuted {
                let permuted = |v: Array1<f32>, heads: usize| {
                    let hd = a.head_dim;
                    Array1::from_shape_fn(heads * hd, |r| v[converted_row(r, hd)])
                };
                (
                    permuted(vector(&k("attn_q.bias"), q)?, a.heads.query),
                    permuted(vector(&k("attn_k.bias"), kv)?, a.heads.key_value),
                )
            } else {
                (
                    bias(&k("attn_q.bias"), q, b.qkv)?,
                    bias(&k("attn_k.bias"), kv, b.qkv)?,
                )
            };
            Ok(Layer {
                input_layernorm: rms(&k("attn_norm.weight"))?,
                q_proj: Linear::quantized(wq, bq),
                k_proj: Linear::quantized(wk, bk),
                v_proj: Linear::quantized(
                    matrix(&k("attn_v.weight"), kv, d)?,
                    bias(&k("attn_v.bias"), kv, b.qkv)?,
                ),
                o_proj: Linear::quantized(
                    matrix(&k("attn_output.weight"), d, q)?,
                    bias(&k("attn_output.bias"), d, b.output)?,
                ),
                qk_norm: match a.layers[i].qk_norm {
                    true => Some([
                        rms_of(&k("attn_q_norm.weight"), a.head_dim)?,
                        rms_of(&k("attn_k_norm.weight"), a.head_dim)?,
                    ]),
                    false => None,
                },
                post_attention_layernorm: rms(&k("ffn_norm.weight"))?,
                gate_proj: Linear::quantized(
                    matrix(&k("ffn_gate.weight"), f, d)?,
                    bias(&k("ffn_gate.bias"), f, b.feed_forward)?,
                ),
                up_proj: Linear::quantized(
                    matrix(&k("ffn_up.weight"), f, d)?,
                    bias(&k("ffn_up.bias"), f, b.feed_forward)?,
                ),
                down_proj: Linear::quantized(
                    matrix(&k("ffn_down.weight"), d, f)?,
                    bias(&k("ffn_down.bias"), d, b.feed_forward)?,
                ),
            })
        };
        let embed_tokens = Table::quantized(matrix(gguf_keys::EMBED, c.vocab_size, d)?);
        let layers = (0..c.num_hidden_layers)
            .into_par_iter()
            .map(layer)
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let norm = rms(gguf_keys::NORM)?;
        let lm_head = match a.lm_head {
            LmHead::Separate => Linear::quantized(
                matrix(gguf_keys::OUTPUT, c.vocab_size, d)?,
                Array1::zeros(c.vocab_size),
            ),
            LmHead::Tied | LmHead::None => Linear::tied(&embed_tokens, None),
        };
        Ok(Self {
            embed_tokens,
            layers,
            norm,
            lm_head,
        })
    }
}

/// Where llama.cpp's converter put HF's row `r` of Q or K (heads of `hd` rows): HF's row
/// `h·hd + s·hd/2 + j` (pair `j`'s half `s` in the rotate-half layout) is its row
/// `h·hd + 2j + s` (the pair side by side, for llama.cpp's interleaved rotation).
fn converted_row(r: usize, hd: usize) -> usize {
    let (h, within) = (r / hd, r % hd);
    let (s, j) = (within / (hd / 2), within % (hd / 2));
    h * hd + 2 * j + s
}

/// `m` with its rows in `order` (row `r` of the result is row `order[r]` of `m`): a copy of
/// its bytes, rows kept whole (a quantized row's blocks never cross rows).
fn rows_reordered(
    m: &QuantMatrix,
    order: &[usize],
) -> std::result::Result<QuantMatrix, crate::model::quant::LayoutError> {
    let row = crate::model::quant::row_bytes(m.ty(), m.cols())?;
    let data = m.data();
    let mut bytes = Vec::with_capacity(order.len() * row);
    for &r in order {
        bytes.extend_from_slice(&data[r * row..(r + 1) * row]);
    }
    let shared: SharedBytes = std::sync::Arc::new(bytes);
    QuantMatrix::new(m.ty(), order.len(), m.cols(), shared, 0)
}

impl Forward for LlamaWeights {
    fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        LlamaWeights::forward(self, ops, c)
    }
}

impl Network for LlamaWeights {
    fn mlp_output(&self, layer: usize) -> Option<&Linear> {
        Some(&self.layers.get(layer)?.down_proj)
    }

    fn unembedding(&self) -> Option<Unembedding<'_>> {
        Some(Unembedding {
            norm: &self.norm,
            lm_head: &self.lm_head,
        })
    }

    fn attention_output(&self, layer: usize) -> Option<&Linear> {
        Some(&self.layers.get(layer)?.o_proj)
    }

    fn stack(&self) -> Stack {
        Stack::Decoder
    }

    fn run(&self, ops: EngineOps<'_, '_>, c: &Config) -> Result<()> {
        run_on(self, ops, c)
    }

    fn has_lm_head(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
