//! Gemma 3 (`Gemma3ForCausalLM`, `gemma3_text`; a GGUF file's `gemma3`): a decoder-only stack
//! whose layers are mostly local, attending through a sliding window with a rotary base of its
//! own, every sixth one global (`layer_types`); each query and key head normed on its own
//! (QK-norm); a norm before and a norm after each sub-layer; a GELU-tanh gated feed-forward;
//! the token embeddings scaled by `√d_model` and tied to the LM head. Its RMSNorms multiply by
//! `1 + γ`.
//!
//! ```text
//! x = embed_tokens[ids] · √D
//! each layer:  a = input_layernorm(x)
//!              q, k = rope_l(q_norm(q_proj(a))), rope_l(k_norm(k_proj(a)))   (head by head)
//!              x = x + post_attention_layernorm(o_proj(attn_l(q, k, v_proj(a))))
//!              m = pre_feedforward_layernorm(x)
//!              x = x + post_feedforward_layernorm(down_proj(gelu_tanh(gate_proj(m)) ⊙ up_proj(m)))
//! h = norm(x);  logits = cap_f(h · embed_tokensᵀ)
//! ```
//!
//! `attn_l` reaches layer `l`'s window (or every earlier key), its scores `q·k` times
//! `query_pre_attn_scalar^-½`; `rope_l` turns by the layer type's own base.
//! `cap_f(z) = f·tanh(z/f)` where the config sets `final_logit_softcapping` f, else `z`
//! (Gemma 3's own configs set null). `attn_logit_softcapping` is left unread: HF's
//! `Gemma3Attention` does not apply it (Gemma 2's scores were capped; Gemma 3's are normed).

use rayon::prelude::*;
use serde::Deserialize;
use serde_json::{Map, Value as Json};

use crate::engine::network::{run_on, EngineOps, Forward, Network, Unembedding};
use crate::engine::ops::{
    values, AttentionId, AttentionSpec, CacheSlot, GatedFeedForward, Ids, Kept, Ops, Stack, Value,
};
use crate::error::{Error, Result};
use crate::model::config::{
    stack_of, Activation, Architecture, Biases, Config, Family, FeedForward, Heads, Layer,
    LayerNormOrder, LmHead, ModelKind, NormPlacement, Positions, Reach,
};
use crate::model::gguf::GgufFile;
use crate::model::limits::MAX_HIDDEN_SIZE;
use crate::model::quant::SharedBytes;
use crate::model::rope::RopeJson;
use crate::model::weights::{Linear, Norm, Table, Tensors};

/// Gemma 3's text model (`gemma3_text`; a GGUF file's `gemma3`).
pub const FAMILY: super::FamilyEntry = super::FamilyEntry {
    model_types: &["gemma3_text"],
    untyped: false,
    config,
    weights: |t, c| Ok(Box::new(Gemma3Weights::load(t, c)?)),
    gguf: Some(super::GgufFamily {
        architectures: &["gemma3"],
        config: gguf_config,
        weights: |g, bytes, c| Ok(Box::new(Gemma3Weights::from_gguf(g, bytes, c)?)),
        sentencepiece: crate::model::gguf_tokenizer::SentencePiece::Gemma,
    }),
};

/// The values its layers keep beside every family's.
const ATTN_NORM: Value = Value::rows("attn_norm");
const POST_ATTENTION_NORM: Value = Value::rows("post_attention_norm");
const FFN_NORM: Value = Value::rows("ffn_norm");
const POST_FFN_NORM: Value = Value::rows("post_ffn_norm");

fn default_vocab() -> usize {
    262_208
}
fn default_heads() -> usize {
    8
}
fn default_kv_heads() -> usize {
    4
}
fn default_head_dim() -> usize {
    256
}
fn default_activation() -> Activation {
    Activation::GeluTanh
}
fn default_eps() -> f64 {
    1e-6
}
fn default_positions() -> usize {
    131_072
}
fn default_pad() -> Option<u32> {
    Some(0)
}
fn default_eos() -> Option<Json> {
    Some(Json::from(1))
}
fn default_bos() -> Option<u32> {
    Some(2)
}
fn default_scalar() -> f64 {
    256.0
}
fn default_window() -> Option<usize> {
    Some(4096)
}
fn default_pattern() -> usize {
    6
}
fn default_true() -> bool {
    true
}

/// `Gemma3TextConfig`'s fields, with its defaults.
#[derive(Debug, Clone, Deserialize)]
struct GemmaJson {
    #[serde(default = "default_vocab")]
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    #[serde(default = "default_heads")]
    num_attention_heads: usize,
    #[serde(default = "default_kv_heads")]
    num_key_value_heads: usize,
    #[serde(default = "default_head_dim")]
    head_dim: usize,
    #[serde(default = "default_activation")]
    hidden_activation: Activation,
    #[serde(default = "default_positions")]
    max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    rms_norm_eps: f64,
    #[serde(default = "default_pad")]
    pad_token_id: Option<u32>,
    #[serde(default = "default_eos")]
    eos_token_id: Option<Json>,
    #[serde(default = "default_bos")]
    bos_token_id: Option<u32>,
    #[serde(default = "default_true")]
    tie_word_embeddings: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default = "default_scalar")]
    query_pre_attn_scalar: f64,
    #[serde(default = "default_window")]
    sliding_window: Option<usize>,
    /// Each layer's `"sliding_attention"` or `"full_attention"`; where absent, every
    /// `sliding_window_pattern`-th layer is global.
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default = "default_pattern")]
    sliding_window_pattern: usize,
    /// The logits soft-capped at this value. (`attn_logit_softcapping` is left unread: HF's
    /// `Gemma3Attention` does not apply it. Gemma 2 capped its scores; Gemma 3 norms them.)
    #[serde(default)]
    final_logit_softcapping: Option<f64>,
    #[serde(default)]
    use_bidirectional_attention: bool,
    /// transformers 5's form: one rotation per layer type.
    #[serde(default)]
    rope_parameters: Option<Map<String, Json>>,
    /// The older form: the global layers' base and scaling, and the local layers' base.
    #[serde(default)]
    rope_theta: Option<f64>,
    #[serde(default)]
    rope_scaling: Option<Map<String, Json>>,
    #[serde(default)]
    rope_local_base_freq: Option<f64>,
}

/// A `gemma3_text` `config.json`.
fn config(json: Json, model_type: Option<&str>) -> std::result::Result<Config, String> {
    let c: GemmaJson = serde_json::from_value(json).map_err(|e| e.to_string())?;
    gemma_config(model_type.map(str::to_owned), c)
}

/// The two layer types, as `layer_types` and `rope_parameters` name them.
const SLIDING: &str = "sliding_attention";
const FULL: &str = "full_attention";

/// A Gemma 3 config: the fields the engines read, or why it cannot run.
fn gemma_config(model_type: Option<String>, c: GemmaJson) -> std::result::Result<Config, String> {
    let cap = |name: &str, v: Option<f64>| match v {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(format!("`{name}` {v} must be positive")),
        v => Ok(v.map(|v| v as f32)),
    };
    let logit_cap = cap("final_logit_softcapping", c.final_logit_softcapping)?;
    if c.use_bidirectional_attention {
        return Err("`use_bidirectional_attention` true is not supported (only false)".into());
    }
    let (heads, kv) = (c.num_attention_heads, c.num_key_value_heads);
    if kv == 0 || !heads.is_multiple_of(kv) {
        return Err(format!(
            "`num_attention_heads` {heads} is not a multiple of `num_key_value_heads` {kv}"
        ));
    }
    let d = c.head_dim;
    if d == 0 || !d.is_multiple_of(2) || d > MAX_HIDDEN_SIZE {
        return Err(format!(
            "`head_dim` {d} must be even and positive for rotary positions, and at most \
             {MAX_HIDDEN_SIZE}"
        ));
    }
    if !(c.query_pre_attn_scalar.is_finite() && c.query_pre_attn_scalar > 0.0) {
        return Err(format!(
            "`query_pre_attn_scalar` {} must be positive",
            c.query_pre_attn_scalar
        ));
    }
    // each layer type's rotation, in either form: the global layers' base 1,000,000 and the
    // local layers' 10,000 where neither gives one
    let mut per_type = c.rope_parameters.clone().unwrap_or_default();
    if let Some((key, _)) = per_type
        .iter()
        .find(|(k, v)| !v.is_object() || ![SLIDING, FULL].contains(&k.as_str()))
    {
        return Err(format!(
            "`rope_parameters.{key}`: Gemma 3 gives one rotation per layer type ({SLIDING}, {FULL})"
        ));
    }
    let mut rotary = |layer_type: &str| {
        let (theta, scaling, default) = match layer_type {
            FULL => (c.rope_theta, c.rope_scaling.clone(), 1_000_000.0),
            _ => (c.rope_local_base_freq, None, 10_000.0),
        };
        let params = per_type.remove(layer_type).and_then(|v| match v {
            Json::Object(m) => Some(m),
            _ => None,
        });
        let given = theta.is_some()
            || params
                .as_ref()
                .is_some_and(|p| p.contains_key("rope_theta"));
        let rope = RopeJson {
            rope_parameters: params,
            rope_theta: theta.or((!given).then_some(default)),
            rope_scaling: scaling,
            ..RopeJson::default()
        };
        rope.rotary(d, c.max_position_embeddings)
            .map_err(|e| format!("{layer_type}: {e}"))
    };
    let (full, sliding) = (rotary(FULL)?, rotary(SLIDING)?);
    let pattern = c.sliding_window_pattern.max(1);
    let type_of = |i: usize| -> &str {
        match &c.layer_types {
            Some(types) => types[i].as_str(),
            None if (i + 1).is_multiple_of(pattern) => FULL,
            None => SLIDING,
        }
    };
    if let Some(types) = &c.layer_types {
        if types.len() != c.num_hidden_layers {
            return Err(format!(
                "`layer_types` names {} layers, and `num_hidden_layers` is {}",
                types.len(),
                c.num_hidden_layers
            ));
        }
        if let Some((i, t)) = types
            .iter()
            .enumerate()
            .find(|(_, t)| ![SLIDING, FULL].contains(&t.as_str()))
        {
            return Err(format!(
                "`layer_types[{i}]` {t:?} is not supported (only \"{FULL}\" and \"{SLIDING}\")"
            ));
        }
    }
    let window = c.sliding_window;
    if window == Some(0) {
        return Err("`sliding_window` 0 hides every key: it must be at least 1".into());
    }
    let score_scale = Some(c.query_pre_attn_scalar.powf(-0.5) as f32);
    let layers = stack_of(c.num_hidden_layers, "num_hidden_layers", |i| {
        let local = type_of(i) == SLIDING;
        Layer {
            reach: match window {
                Some(w) if local => Reach::Sliding(w),
                _ => Reach::Global,
            },
            rotary: Some(if local { sliding } else { full }),
            score_scale,
            qk_norm: true,
            norms: NormPlacement::Both,
        }
    })?;
    let eos_token_ids = match &c.eos_token_id {
        None | Some(Json::Null) => vec![],
        Some(v) => serde_json::from_value::<TokenIds>(v.clone())
            .map_err(|e| format!("`eos_token_id` {v}: {e}"))?
            .into_vec(),
    };
    Ok(Config {
        family: Family {
            name: "gemma3_text",
            renamed: &[("layer_norm_eps", "rms_norm_eps")],
        },
        model_type,
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        num_hidden_layers: c.num_hidden_layers,
        num_attention_heads: heads,
        intermediate_size: c.intermediate_size,
        hidden_act: c.hidden_activation,
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
                activation: c.hidden_activation,
            },
            heads: Heads {
                query: heads,
                key_value: kv,
            },
            head_dim: d,
            biases: Biases {
                qkv: c.attention_bias,
                output: c.attention_bias,
                feed_forward: false,
            },
            lm_head: if c.tie_word_embeddings {
                LmHead::Tied
            } else {
                LmHead::Separate
            },
            logit_cap,
            token_types: false,
            layers,
        },
        eos_token_ids,
        bos_token_id: c.bos_token_id,
        parameters,
    })
}

/// One token id or several.
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

/// Gemma 3's parameters: the token embeddings (an LM head of its own where untied), each
/// layer's projections (with their biases), QK-norm's two norms of a head's width, the gated
/// feed-forward's three matrices, four RMSNorms, and the final norm.
fn parameters(c: &Config) -> u128 {
    let a = &c.architecture;
    let (v, d, f, hd) = (
        c.vocab_size as u128,
        c.hidden_size as u128,
        c.intermediate_size as u128,
        a.head_dim as u128,
    );
    let (q, kv) = (a.heads.query as u128 * hd, a.heads.key_value as u128 * hd);
    let bias = |on: bool, n: u128| if on { n } else { 0 };
    let layer = d * q
        + 2 * d * kv
        + bias(a.biases.qkv, q + 2 * kv)
        + q * d
        + bias(a.biases.output, d)
        + 2 * hd
        + 3 * d * f
        + 4 * d;
    let head = if a.lm_head == LmHead::Separate {
        v * d
    } else {
        0
    };
    v * d + head + c.num_hidden_layers as u128 * layer + d
}

/// A GGUF file's `gemma3` metadata, read as HF's GGUF loader reads it: `rope.freq_base` the
/// global layers' base (the local layers' 10,000), `attention.sliding_window`, every sixth layer
/// global, `query_pre_attn_scalar` HF's default (256).
fn gguf_config(g: &GgufFile) -> Result<Config> {
    let bad = |msg: String| Error::Config {
        file: g.file.clone(),
        msg,
    };
    let key = |k: &str| format!("gemma3.{k}");
    let optional_u32 = |k: &str| -> Result<Option<u32>> {
        match g.get(k) {
            Some(_) => g.get_u32(k).map(Some),
            None => Ok(None),
        }
    };
    let vocab = match g.get("tokenizer.ggml.tokens") {
        Some(_) => g.get_str_array("tokenizer.ggml.tokens")?.len(),
        None => g.get_u32(&key("vocab_size"))? as usize,
    };
    let heads = g.get_u32(&key("attention.head_count"))?;
    let optional_f32 = |k: &str| -> Result<Option<f64>> {
        match g.get(k) {
            Some(_) => g.get_f32(k).map(|v| Some(v as f64)),
            None => Ok(None),
        }
    };
    let json = serde_json::json!({
        "vocab_size": vocab,
        "hidden_size": g.get_u32(&key("embedding_length"))?,
        "intermediate_size": g.get_u32(&key("feed_forward_length"))?,
        "num_hidden_layers": g.get_u32(&key("block_count"))?,
        "num_attention_heads": heads,
        "num_key_value_heads": optional_u32(&key("attention.head_count_kv"))?.unwrap_or(heads),
        "head_dim": optional_u32(&key("attention.key_length"))?.unwrap_or(256),
        "max_position_embeddings": g.get_u32(&key("context_length"))?,
        "rms_norm_eps": g.get_f32(&key("attention.layer_norm_rms_epsilon"))? as f64,
        "rope_theta": optional_f32(&key("rope.freq_base"))?,
        "final_logit_softcapping": optional_f32(&key("final_logit_softcapping"))?,
        "sliding_window": optional_u32(&key("attention.sliding_window"))?,
        "tie_word_embeddings": g.tensor("output.weight").is_none(),
        "bos_token_id": optional_u32("tokenizer.ggml.bos_token_id")?,
        "eos_token_id": optional_u32("tokenizer.ggml.eos_token_id")?,
        "pad_token_id": optional_u32("tokenizer.ggml.padding_token_id")?,
    });
    let c: GemmaJson = serde_json::from_value(json).map_err(|e| bad(e.to_string()))?;
    let config = gemma_config(Some("gemma3".into()), c).map_err(bad)?;
    config.validate(&g.file)?;
    Ok(config)
}

/// One decoder layer's weights.
#[derive(Debug, Clone)]
pub struct GemmaLayer {
    pub input_layernorm: Norm,
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    /// QK-norm's two RMSNorms over a head's `d`.
    pub q_norm: Norm,
    pub k_norm: Norm,
    pub post_attention_layernorm: Norm,
    pub pre_feedforward_layernorm: Norm,
    pub post_feedforward_layernorm: Norm,
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl GemmaLayer {
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

/// All weights of a Gemma 3 text model.
#[derive(Debug, Clone)]
pub struct Gemma3Weights {
    /// `(vocab_size, D)`, each row scaled by `√D` when looked up.
    pub embed_tokens: Table,
    pub layers: Vec<GemmaLayer>,
    pub norm: Norm,
    pub lm_head: Linear,
    /// `final_logit_softcapping`: the logits are `f·tanh(z/f)`, not the stream read through
    /// the LM head, so no write has a share of them (the direct logit attribution refuses).
    pub logit_cap: Option<f32>,
}

/// An RMSNorm of weight `1 + γ` (Gemma's norms multiply by `1 + γ`, and store `γ`).
fn one_plus(gamma: ndarray::Array1<f32>, eps: f64) -> Norm {
    Norm::rms(gamma.mapv(|g| 1.0 + g), eps as f32)
}

/// The key every checkpoint of the family holds, under its model prefix (`model.`).
const ANCHOR: &str = "embed_tokens.weight";

impl Gemma3Weights {
    /// Loads every tensor from a checkpoint's safetensors; each missing or misshapen one is an
    /// error naming its key.
    pub fn load(t: &Tensors, c: &Config) -> Result<Self> {
        let a = &c.architecture;
        let (d, f, eps, hd) = (
            c.hidden_size,
            c.intermediate_size,
            c.layer_norm_eps,
            a.head_dim,
        );
        let (q, kv) = (a.heads.query * hd, a.heads.key_value * hd);
        t.check_holds(
            c.parameter_count(),
            &format!(
                "vocab_size {}, hidden_size {d}, num_hidden_layers {}, intermediate_size {f}, \
                 {} query heads and {} key/value heads of {hd}",
                c.vocab_size, c.num_hidden_layers, a.heads.query, a.heads.key_value
            ),
        )?;
        let p = t.prefix_of(ANCHOR)?;
        let linear = |key: &str, input: usize, output: usize, bias: bool| -> Result<Linear> {
            let w = t.read2(&format!("{key}.weight"), output, input)?;
            let b = if bias {
                t.read1(&format!("{key}.bias"), output)?
            } else {
                ndarray::Array1::zeros(output)
            };
            Ok(Linear::new(w, b))
        };
        let norm = |key: &str, n: usize| -> Result<Norm> {
            Ok(one_plus(t.read1(&format!("{key}.weight"), n)?, eps))
        };
        let layer = |i: usize| -> Result<GemmaLayer> {
            let k = |name: &str| format!("{p}layers.{i}.{name}");
            let b = a.biases;
            Ok(GemmaLayer {
                input_layernorm: norm(&k("input_layernorm"), d)?,
                q_proj: linear(&k("self_attn.q_proj"), d, q, b.qkv)?,
                k_proj: linear(&k("self_attn.k_proj"), d, kv, b.qkv)?,
                v_proj: linear(&k("self_attn.v_proj"), d, kv, b.qkv)?,
                o_proj: linear(&k("self_attn.o_proj"), q, d, b.output)?,
                q_norm: norm(&k("self_attn.q_norm"), hd)?,
                k_norm: norm(&k("self_attn.k_norm"), hd)?,
                post_attention_layernorm: norm(&k("post_attention_layernorm"), d)?,
                pre_feedforward_layernorm: norm(&k("pre_feedforward_layernorm"), d)?,
                post_feedforward_layernorm: norm(&k("post_feedforward_layernorm"), d)?,
                gate_proj: linear(&k("mlp.gate_proj"), d, f, false)?,
                up_proj: linear(&k("mlp.up_proj"), d, f, false)?,
                down_proj: linear(&k("mlp.down_proj"), f, d, false)?,
            })
        };
        let embed_tokens = Table::load(t, &format!("{p}embed_tokens.weight"), c.vocab_size, d)?;
        let layers = (0..c.num_hidden_layers)
            .into_par_iter()
            .map(layer)
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let lm_head = match a.lm_head {
            LmHead::Separate => Linear::new(
                t.read2("lm_head.weight", c.vocab_size, d)?,
                ndarray::Array1::zeros(c.vocab_size),
            ),
            LmHead::Tied | LmHead::None => Linear::tied(&embed_tokens, None),
        };
        Ok(Self {
            embed_tokens: embed_tokens.scaled((d as f32).sqrt()),
            layers,
            norm: norm(&format!("{p}norm"), d)?,
            lm_head,
            logit_cap: a.logit_cap,
        })
    }

    /// Reads the model from a GGUF file, its matrices kept in their ggml types (llama.cpp's
    /// converter stores each norm's `1 + γ`, and turns Q and K as HF does: no rows to reorder).
    pub fn from_gguf(g: &GgufFile, bytes: &SharedBytes, c: &Config) -> Result<Self> {
        let a = &c.architecture;
        let (d, f, hd) = (c.hidden_size, c.intermediate_size, a.head_dim);
        let (q, kv) = (a.heads.query * hd, a.heads.key_value * hd);
        let r = super::gguf_reader(g, bytes);
        let norm = |key: &str, n: usize| -> Result<Norm> {
            Ok(Norm::rms(r.vector(key, n)?, c.layer_norm_eps as f32))
        };
        let linear = |key: &str, rows: usize, cols: usize| -> Result<Linear> {
            Ok(Linear::quantized(
                r.matrix(key, rows, cols)?,
                ndarray::Array1::zeros(rows),
            ))
        };
        if a.biases.qkv {
            return Err(Error::Gguf {
                file: g.file.clone(),
                msg: "a Gemma 3 GGUF file with attention biases is not read".into(),
            });
        }
        let layer = |i: usize| -> Result<GemmaLayer> {
            let k = |name: &str| format!("blk.{i}.{name}");
            Ok(GemmaLayer {
                input_layernorm: norm(&k("attn_norm.weight"), d)?,
                q_proj: linear(&k("attn_q.weight"), q, d)?,
                k_proj: linear(&k("attn_k.weight"), kv, d)?,
                v_proj: linear(&k("attn_v.weight"), kv, d)?,
                o_proj: linear(&k("attn_output.weight"), d, q)?,
                q_norm: norm(&k("attn_q_norm.weight"), hd)?,
                k_norm: norm(&k("attn_k_norm.weight"), hd)?,
                post_attention_layernorm: norm(&k("post_attention_norm.weight"), d)?,
                pre_feedforward_layernorm: norm(&k("ffn_norm.weight"), d)?,
                post_feedforward_layernorm: norm(&k("post_ffw_norm.weight"), d)?,
                gate_proj: linear(&k("ffn_gate.weight"), f, d)?,
                up_proj: linear(&k("ffn_up.weight"), f, d)?,
                down_proj: linear(&k("ffn_down.weight"), d, f)?,
            })
        };
        let embed_tokens = Table::quantized(r.matrix("token_embd.weight", c.vocab_size, d)?);
        let layers = (0..c.num_hidden_layers)
            .into_par_iter()
            .map(layer)
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let lm_head = match a.lm_head {
            LmHead::Separate => linear("output.weight", c.vocab_size, d)?,
            LmHead::Tied | LmHead::None => Linear::tied(&embed_tokens, None),
        };
        Ok(Self {
            embed_tokens: embed_tokens.scaled((d as f32).sqrt()),
            layers,
            norm: norm("output_norm.weight", d)?,
            lm_head,
            logit_cap: a.logit_cap,
        })
    }
}

impl Forward for Gemma3Weights {
    /// The stack over the batch the engine holds (or a decoding step's new tokens); the LM
    /// head's logits when the trace keeps them. Returns `norm` of the last layer's output.
    fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        let a = &c.architecture;
        let FeedForward::Gated { activation } = a.feed_forward else {
            return Err(Error::Engine("Gemma 3 needs a gated feed-forward".into()));
        };
        if a.layers.len() != self.layers.len() {
            return Err(Error::Engine(format!(
                "the architecture declares {} layers, and the weights have {}",
                a.layers.len(),
                self.layers.len()
            )));
        }
        let (h, kv) = (a.heads.query, a.heads.key_value);
        let mut x = ops.gather(&self.embed_tokens, Ids::Tokens)?; // (B·T, D), times √D
        ops.keep(Kept::EmbeddingWord, &x)?;
        ops.keep(Kept::EmbeddingSum, &x)?;
        ops.keep(Kept::Hidden(0), &x)?;
        for (i, (l, arch)) in self.layers.iter().zip(&a.layers).enumerate() {
            let value = |v: Value| Kept::Layer(i, v);
            let Some(rope) = &arch.rotary else {
                return Err(Error::Engine(format!(
                    "Gemma 3's layer {i} needs a rotation"
                )));
            };
            // x = x + post_attention_layernorm(attn(input_layernorm(x)))
            let n = ops.norm(&x, &l.input_layernorm)?;
            ops.keep(value(ATTN_NORM), &n)?;
            let qkv = ops.project(&n, &[&l.q_proj, &l.k_proj, &l.v_proj])?;
            let (q, k, v) = (&qkv[0], &qkv[1], &qkv[2]); // (B·T, H·d), 2 × (B·T, H_kv·d)
            ops.keep(value(values::Q), q)?;
            ops.keep(value(values::K), k)?;
            ops.keep(value(values::V), v)?;
            // QK-norm, head by head, then each turned by the layer type's rotation
            let q = ops.norm_heads(q, h, &l.q_norm)?;
            let k = ops.norm_heads(k, kv, &l.k_norm)?;
            ops.keep(value(Value::heads("q_normed", h)), &q)?;
            ops.keep(value(Value::heads("k_normed", kv)), &k)?;
            let q = ops.rotate(&q, h, rope, Ids::Positions)?;
            let k = ops.rotate(&k, kv, rope, Ids::Positions)?;
            ops.keep(value(Value::heads("q_rope", h)), &q)?;
            ops.keep(value(Value::heads("k_rope", kv)), &k)?;
            let k = ops.extend(CacheSlot::SelfKeys(i), &k)?;
            let v = ops.extend(CacheSlot::SelfValues(i), v)?;
            let id = AttentionId::self_attention(Stack::Decoder, i);
            let context = ops.attention(id, AttentionSpec::of(arch, a.heads), &q, &k, &v)?;
            ops.keep(value(values::CONTEXT), &context)?;
            let attn = ops.linear(&context, &l.o_proj, None)?;
            let attn = ops.norm(&attn, &l.post_attention_layernorm)?;
            ops.keep(value(POST_ATTENTION_NORM), &attn)?;
            // x = x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))
            let h1 = ops.add_norm(&x, &attn, &l.pre_feedforward_layernorm)?;
            ops.keep(value(values::ATTENTION_OUTPUT), &h1.sum)?;
            ops.keep(value(FFN_NORM), &h1.norm)?;
            // mlp(m) = down(gelu_tanh(gate(m)) ⊙ up(m))
            let mlp = ops.gated_feed_forward(&h1.norm, &l.feed_forward(activation), i)?;
            let mlp = ops.norm(&mlp, &l.post_feedforward_layernorm)?;
            ops.keep(value(POST_FFN_NORM), &mlp)?;
            x = ops.add(&h1.sum, &mlp)?;
            ops.keep(Kept::Hidden(i + 1), &x)?;
        }
        let out = ops.norm(&x, &self.norm)?;
        ops.keep(Kept::Output, &out)?;
        super::lm_logits(ops, &out, &self.lm_head, a.logit_cap)?;
        Ok(out)
    }
}

impl Network for Gemma3Weights {
    fn attention_output(&self, layer: usize) -> Option<&Linear> {
        Some(&self.layers.get(layer)?.o_proj)
    }

    fn attention_post_norm(&self, layer: usize) -> Option<&Norm> {
        Some(&self.layers.get(layer)?.post_attention_layernorm)
    }

    /// The final norm and the tied LM head; none where the logits are soft-capped.
    fn unembedding(&self) -> Option<Unembedding<'_>> {
        self.logit_cap.is_none().then_some(Unembedding {
            norm: &self.norm,
            lm_head: &self.lm_head,
        })
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
