//! Marian (`MarianMTModel`, the Helsinki-NLP opus-mt layout): the Transformer as it was built
//! for translation, an encoder and a decoder, post-LN.
//!
//! ```text
//! x = E[src]·s + P[0..S]                       s = √d_model with scale_embedding, else 1
//! each encoder layer:  x = LN(x + self_attn(x));  x = LN(x + fc2(act(fc1(x))))
//! y = E[out]·s + P[0..T]
//! each decoder layer:  y = LN(y + self_attn(y, no-peek));
//!                      y = LN(y + cross_attn(q = y, k = v = x));
//!                      y = LN(y + fc2(act(fc1(y))))
//! logits = y·Eᵀ + final_logits_bias
//! ```
//!
//! `P` is sinusoidal, computed, not read (HF's `MarianSinusoidalPositionalEmbedding`: sin in the
//! first half of the vector, cos in the second, not interleaved). One table of token embeddings
//! (`model.shared`) serves both stacks and the LM head, unless the config says otherwise.
//!
//! A decoding runs the same code one position at a time: the self-attention's keys and values
//! of the earlier positions, and the cross-attention's of the source, come from the decoding's
//! cache ([`Ops::extend`], [`Ops::cached`]).

use ndarray::{Array1, Array2};

use crate::engine::network::{EngineOps, Network, Translating};
use crate::engine::ops::{
    values, AddNorm, AttentionId, AttentionKind, AttentionSpec, CacheSlot, Heads, Ids, Kept, Ops,
    Stack, Value,
};
use crate::error::{Error, Result};
use crate::model::config::{
    classic_layer, default_true, global_layers, Activation, Architecture, DecoderConfig, Family,
    Focus, LayerNormOrder, ModelKind, Positions,
};
use crate::model::weights::{Linear, Norm, Table, Tensors};
use crate::model::Config;
use serde::Deserialize;

/// Marian (`marian`).
pub const FAMILY: super::FamilyEntry = super::FamilyEntry {
    model_types: &["marian"],
    untyped: false,
    config,
    weights: |t, c| Ok(Box::new(MarianWeights::load(t, c)?)),
    gguf: None,
};

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

/// Marian's config: the encoder's sizes under BERT's names, the decoder's in a
/// [`DecoderConfig`].
pub(super) fn config(
    json: serde_json::Value,
    model_type: Option<&str>,
) -> std::result::Result<Config, String> {
    let c: MarianJson = serde_json::from_value(json).map_err(|e| e.to_string())?;
    if let Some(v) = c.decoder_vocab_size.filter(|&v| v != c.vocab_size) {
        return Err(format!(
            "`decoder_vocab_size` {v} differs from `vocab_size` {}: a separate target \
             vocabulary is not supported",
            c.vocab_size
        ));
    }
    Ok(Config {
        family: Family {
            name: "marian",
            // the encoder's sizes (the decoder's are checked under their own names)
            renamed: &[
                ("hidden_size", "d_model"),
                ("num_hidden_layers", "encoder_layers"),
                ("num_attention_heads", "encoder_attention_heads"),
                ("intermediate_size", "encoder_ffn_dim"),
            ],
        },
        model_type: model_type.map(str::to_owned),
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
            false,
            ModelKind::EncoderDecoder,
            Positions::Sinusoidal,
            c.activation_function,
            LayerNormOrder::Post,
            1e-5,
            c.encoder_attention_heads,
            c.d_model,
            global_layers(c.encoder_layers, "encoder_layers")?,
        ),
        eos_token_ids: vec![c.eos_token_id],
        bos_token_id: None,
        parameters,
    })
}

/// Marian's parameters: one table of token embeddings (its positions computed), the logits'
/// bias, the encoder's classic layers, and decoder layers with a cross-attention and its
/// LayerNorm more.
fn parameters(c: &Config) -> u128 {
    let (v, d, i) = (
        c.vocab_size as u128,
        c.hidden_size as u128,
        c.intermediate_size as u128,
    );
    let decoder = c.decoder.as_ref().map_or(0, |dec| {
        let f = dec.ffn_dim as u128;
        dec.layers as u128 * (8 * (d * d + d) + 3 * 2 * d + (d * f + f) + (f * d + d))
    });
    v * d + v + c.num_hidden_layers as u128 * classic_layer(d, i) + decoder
}

/// The key every Marian checkpoint holds, under its model prefix (`model.` in
/// `MarianMTModel`, none in `MarianModel`).
const ANCHOR: &str = "encoder.layers.0.self_attn.q_proj.weight";

/// One attention's projections (`{self_attn,encoder_attn}.{q,k,v,out}_proj`).
#[derive(Debug, Clone)]
pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub out_proj: Linear,
}

impl Attention {
    fn load(t: &Tensors, prefix: &str, d: usize) -> Result<Self> {
        let l = |name: &str| Linear::load(t, &format!("{prefix}.{name}"), d, d);
        Ok(Self {
            q_proj: l("q_proj")?,
            k_proj: l("k_proj")?,
            v_proj: l("v_proj")?,
            out_proj: l("out_proj")?,
        })
    }
}

/// The feed-forward of a layer: `fc2(act(fc1(x)))`.
#[derive(Debug, Clone)]
pub struct FeedForward {
    pub fc1: Linear,
    pub fc2: Linear,
}

impl FeedForward {
    fn load(t: &Tensors, prefix: &str, d: usize, inner: usize) -> Result<Self> {
        Ok(Self {
            fc1: Linear::load(t, &format!("{prefix}.fc1"), d, inner)?,
            fc2: Linear::load(t, &format!("{prefix}.fc2"), inner, d)?,
        })
    }
}

/// One encoder layer's weights (`encoder.layers.{i}.…`).
#[derive(Debug, Clone)]
pub struct EncoderLayer {
    pub self_attn: Attention,
    pub self_attn_layer_norm: Norm,
    pub ffn: FeedForward,
    pub final_layer_norm: Norm,
}

/// One decoder layer's weights (`decoder.layers.{i}.…`).
#[derive(Debug, Clone)]
pub struct DecoderLayer {
    pub self_attn: Attention,
    pub self_attn_layer_norm: Norm,
    /// The encoder–decoder attention: queries from the decoder, keys and values from the
    /// encoder's output.
    pub encoder_attn: Attention,
    pub encoder_attn_layer_norm: Norm,
    pub ffn: FeedForward,
    pub final_layer_norm: Norm,
}

/// All weights of a Marian model.
#[derive(Debug, Clone)]
pub struct MarianWeights {
    /// The token embeddings of each stack, `(vocab_size, d_model)` (one table when shared),
    /// scaled by `embed_scale` when looked up.
    pub encoder_embed: Table,
    pub decoder_embed: Table,
    /// The sinusoidal positions, `(max_position_embeddings, d_model)`, computed.
    pub positions: Table,
    pub encoder: Vec<EncoderLayer>,
    pub decoder: Vec<DecoderLayer>,
    /// `y·Eᵀ + final_logits_bias`: tied to the decoder's embeddings (or the file's own
    /// `lm_head.weight`, where it has one).
    pub lm_head: Linear,
}

/// HF's sinusoidal positions for Marian: row `p`, column `c < ⌈D/2⌉` is
/// `sin(p / 10000^(2c/D))`, column `⌈D/2⌉ + c` is `cos(p / 10000^(2c/D))` (computed in f64,
/// as numpy does there, then rounded to f32).
///
/// # Shapes
/// * `(positions, dim)`
pub fn sinusoidal_positions(positions: usize, dim: usize) -> Array2<f32> {
    let half = dim.div_ceil(2);
    Array2::from_shape_fn((positions, dim), |(p, j)| {
        let (c, sin) = if j < half {
            (j, true)
        } else {
            (j - half, false)
        };
        let angle = p as f64 / 10000f64.powf(2.0 * c as f64 / dim as f64);
        (if sin { angle.sin() } else { angle.cos() }) as f32
    })
}

impl MarianWeights {
    /// Loads every tensor the model needs; each missing or misshapen one is an error naming
    /// its key.
    pub fn load(t: &Tensors, c: &Config) -> Result<Self> {
        let dec = c.decoder()?;
        let (d, v, eps) = (c.hidden_size, c.vocab_size, c.layer_norm_eps);
        t.check_holds(
            c.parameter_count(),
            &format!(
                "vocab_size {v}, d_model {d}, encoder_layers {}, decoder_layers {}, \
                 encoder_ffn_dim {}, decoder_ffn_dim {}",
                c.num_hidden_layers, dec.layers, c.intermediate_size, dec.ffn_dim
            ),
        )?;
        let p = t.prefix_of(ANCHOR)?;
        // the first of `keys` the file holds, `(vocab_size, d_model)`
        let table = |keys: &[String]| -> Result<Table> {
            match keys.iter().find(|k| t.has(k)) {
                Some(k) => Table::load(t, k, v, d),
                None => Err(Error::Safetensors {
                    file: t.file().into(),
                    msg: format!("no token embeddings: none of {}", keys.join(", ")),
                }),
            }
        };
        let (shared, enc, dec_key) = (
            format!("{p}shared.weight"),
            format!("{p}encoder.embed_tokens.weight"),
            format!("{p}decoder.embed_tokens.weight"),
        );
        let (encoder_embed, decoder_embed) = if dec.shared_embeddings {
            let one = table(&[shared, enc, dec_key, "lm_head.weight".into()])?;
            (one.clone(), one)
        } else {
            (table(&[enc, shared.clone()])?, table(&[dec_key, shared])?)
        };
        let norm = |key: String| Norm::load(t, &key, d, eps);
        let encoder = (0..c.num_hidden_layers)
            .map(|i| {
                let k = |name: &str| format!("{p}encoder.layers.{i}.{name}");
                Ok(EncoderLayer {
                    self_attn: Attention::load(t, &k("self_attn"), d)?,
                    self_attn_layer_norm: norm(k("self_attn_layer_norm"))?,
                    ffn: FeedForward::load(
                        t,
                        &format!("{p}encoder.layers.{i}"),
                        d,
                        c.intermediate_size,
                    )?,
                    final_layer_norm: norm(k("final_layer_norm"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let decoder = (0..dec.layers)
            .map(|i| {
                let k = |name: &str| format!("{p}decoder.layers.{i}.{name}");
                Ok(DecoderLayer {
                    self_attn: Attention::load(t, &k("self_attn"), d)?,
                    self_attn_layer_norm: norm(k("self_attn_layer_norm"))?,
                    encoder_attn: Attention::load(t, &k("encoder_attn"), d)?,
                    encoder_attn_layer_norm: norm(k("encoder_attn_layer_norm"))?,
                    ffn: FeedForward::load(t, &format!("{p}decoder.layers.{i}"), d, dec.ffn_dim)?,
                    final_layer_norm: norm(k("final_layer_norm"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // `final_logits_bias`, `(1, vocab_size)`; a base MarianModel has none
        let bias = if t.has("final_logits_bias") {
            t.read2("final_logits_bias", 1, v)?.row(0).to_owned()
        } else {
            Array1::zeros(v)
        };
        let lm_head = if t.has("lm_head.weight") && !dec.shared_embeddings {
            Linear::new(t.read2("lm_head.weight", v, d)?, bias)
        } else {
            Linear::tied(&decoder_embed, Some(bias))
        };
        let scale = dec.embed_scale;
        Ok(Self {
            encoder_embed: encoder_embed.scaled(scale),
            decoder_embed: decoder_embed.scaled(scale),
            positions: Table::new(sinusoidal_positions(c.max_position_embeddings, d)),
            encoder,
            decoder,
            lm_head,
        })
    }

    /// The encoder over the source the engine holds ([`Ids::Tokens`], [`Ids::Positions`]),
    /// under the source's padding mask. Returns its output, `(B·S, D)`.
    pub fn encode<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        let word = ops.gather(&self.encoder_embed, Ids::Tokens)?;
        let position = ops.gather(&self.positions, Ids::Positions)?;
        let mut x = ops.add(&word, &position)?; // (B·S, D)
        for (i, l) in self.encoder.iter().enumerate() {
            // x = LN(x + self_attn(x))
            let a = &l.self_attn;
            let qkv = ops.project(&x, &[&a.q_proj, &a.k_proj, &a.v_proj])?;
            ops.keep(Kept::Layer(i, values::V), &qkv[2])?;
            let id = AttentionId::self_attention(Stack::Encoder, i);
            let context = ops.attention(
                id,
                AttentionSpec::global(Heads::all(c.num_attention_heads)),
                &qkv[0],
                &qkv[1],
                &qkv[2],
            )?;
            let attn = ops.linear(&context, &a.out_proj, None)?;
            x = ops.add_norm(&x, &attn, &l.self_attn_layer_norm)?.norm;
            // x = LN(x + fc2(act(fc1(x))))
            x = self
                .feed_forward(ops, c, &x, &l.ffn, &l.final_layer_norm)?
                .1
                .norm;
        }
        Ok(x)
    }

    /// The decoder over the target inputs the engine holds ([`Ids::TargetTokens`],
    /// [`Ids::TargetPositions`]: a whole output, or a decoding step's new position), its
    /// self-attention under the no-peek mask, its cross-attention reading `memory`, the
    /// encoder's output `(B·S, D)` (`None` in a later step of a decoding, whose cache holds the
    /// cross-attention's keys and values). Returns the logits of the next token at each
    /// position, `(B·T, V)`.
    pub fn decode<O: Ops>(&self, ops: &mut O, c: &Config, memory: Option<&O::X>) -> Result<O::X> {
        let heads = c.decoder()?.heads;
        let word = ops.gather(&self.decoder_embed, Ids::TargetTokens)?; // × √d_model
        let position = ops.gather(&self.positions, Ids::TargetPositions)?;
        ops.keep(Kept::DecoderWord, &word)?;
        ops.keep(Kept::DecoderPosition, &position)?;
        let mut y = ops.add(&word, &position)?; // (B·T, D)
        for (i, l) in self.decoder.iter().enumerate() {
            // the layer's values by name, in its order (`DecoderTrace`, the page's panels)
            let keep = |ops: &mut O, v: Value, x: &O::X| ops.keep(Kept::Decoder(i, v), x);
            keep(ops, Value::rows("input"), &y)?;
            // y = LN(y + self_attn(y)), over the positions written so far
            let a = &l.self_attn;
            let qkv = ops.project(&y, &[&a.q_proj, &a.k_proj, &a.v_proj])?;
            keep(ops, values::V, &qkv[2])?;
            let k = ops.extend(CacheSlot::SelfKeys(i), &qkv[1])?;
            let v = ops.extend(CacheSlot::SelfValues(i), &qkv[2])?;
            let id = AttentionId::self_attention(Stack::Decoder, i);
            let context = ops.attention(
                id,
                AttentionSpec::global(Heads::all(heads)),
                &qkv[0],
                &k,
                &v,
            )?;
            let attn = ops.linear(&context, &a.out_proj, None)?;
            let sub = ops.add_norm(&y, &attn, &l.self_attn_layer_norm)?;
            keep(ops, Value::rows("self_output"), &attn)?;
            keep(ops, Value::rows("self_sum"), &sub.sum)?;
            keep(ops, Value::rows("self_normed"), &sub.norm)?;
            y = sub.norm;
            // y = LN(y + cross_attn(q = y, k = v = memory))
            let a = &l.encoder_attn;
            let q = ops.linear(&y, &a.q_proj, None)?;
            let (k, v) = match (
                ops.cached(CacheSlot::CrossKeys(i)),
                ops.cached(CacheSlot::CrossValues(i)),
            ) {
                (Some(k), Some(v)) => (k, v),
                _ => {
                    let memory = memory.ok_or_else(|| {
                        Error::Engine(
                            "the cross-attention has neither the encoder's output nor a cache"
                                .into(),
                        )
                    })?;
                    let kv = ops.project(memory, &[&a.k_proj, &a.v_proj])?; // (B·S, D) each
                    ops.cache(CacheSlot::CrossKeys(i), &kv[0])?;
                    ops.cache(CacheSlot::CrossValues(i), &kv[1])?;
                    (kv[0].clone(), kv[1].clone())
                }
            };
            let context = ops.attention(
                AttentionId::cross(i),
                AttentionSpec::global(Heads::all(heads)),
                &q,
                &k,
                &v,
            )?;
            let attn = ops.linear(&context, &a.out_proj, None)?;
            let sub = ops.add_norm(&y, &attn, &l.encoder_attn_layer_norm)?;
            for (v, x) in [
                (Value::rows("cross_q"), &q),
                // the encoder's output projected: a row a source position
                (Value::source_rows("cross_k"), &k),
                (values::CROSS_V, &v),
                (Value::rows("cross_context"), &context),
                (Value::rows("cross_output"), &attn),
                (Value::rows("cross_sum"), &sub.sum),
                (Value::rows("cross_normed"), &sub.norm),
            ] {
                keep(ops, v, x)?;
            }
            // y = LN(y + fc2(act(fc1(y))))
            let (out, sub) = self.feed_forward(ops, c, &sub.norm, &l.ffn, &l.final_layer_norm)?;
            keep(ops, Value::rows("ffn_output"), &out)?;
            keep(ops, Value::rows("ffn_sum"), &sub.sum)?;
            keep(ops, Value::rows("output"), &sub.norm)?;
            y = sub.norm;
        }
        ops.keep(Kept::Output, &y)?;
        let logits = ops.linear(&y, &self.lm_head, None)?; // (B·T, V)
        ops.keep(Kept::LmLogits, &logits)?;
        Ok(logits)
    }

    /// The whole model: the encoder over the source, the decoder over the target inputs.
    /// Returns the logits, `(B·T, V)`.
    pub fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        let memory = self.encode(ops, c)?;
        self.decode(ops, c, Some(&memory))
    }

    /// `fc2(act(fc1(x)))`, and `x` plus it with its LayerNorm, `LN(x + fc2(act(fc1(x))))`.
    fn feed_forward<O: Ops>(
        &self,
        ops: &mut O,
        c: &Config,
        x: &O::X,
        ffn: &FeedForward,
        ln: &Norm,
    ) -> Result<(O::X, AddNorm<O::X>)> {
        let inner = ops.linear(x, &ffn.fc1, Some(c.hidden_act))?;
        let out = ops.linear(&inner, &ffn.fc2, None)?;
        let sum = ops.add_norm(x, &out, ln)?;
        Ok((out, sum))
    }
}

impl Network for MarianWeights {
    fn stack(&self) -> Stack {
        Stack::Encoder
    }

    fn run(&self, _ops: EngineOps<'_, '_>, c: &Config) -> Result<()> {
        Err(Error::Input(format!(
            "a {} model is an encoder–decoder (translation) model: use `attnscope translate`, \
             which runs its encoder and decodes its output",
            c.family.name()
        )))
    }

    fn position_table(&self) -> Option<&Table> {
        Some(&self.positions)
    }

    fn translation(&self) -> Option<&dyn Translating> {
        Some(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Translating for MarianWeights {
    fn run_whole(&self, ops: EngineOps<'_, '_>, c: &Config) -> Result<()> {
        match ops {
            EngineOps::Cpu(o) => self.forward(o, c).map(drop),
            #[cfg(feature = "gpu")]
            EngineOps::Gpu(o) => self.forward(o, c).map(drop),
        }
    }

    fn run_decoder(&self, ops: EngineOps<'_, '_>, c: &Config) -> Result<()> {
        match ops {
            EngineOps::Cpu(o) => self.decode(o, c, None).map(drop),
            #[cfg(feature = "gpu")]
            EngineOps::Gpu(o) => self.decode(o, c, None).map(drop),
        }
    }

    fn output_projection(&self, id: AttentionId) -> Option<&Linear> {
        Some(match (id.stack, id.kind) {
            (Stack::Encoder, AttentionKind::SelfAttention) => {
                &self.encoder.get(id.layer)?.self_attn.out_proj
            }
            (Stack::Decoder, AttentionKind::SelfAttention) => {
                &self.decoder.get(id.layer)?.self_attn.out_proj
            }
            (Stack::Decoder, AttentionKind::Cross) => {
                &self.decoder.get(id.layer)?.encoder_attn.out_proj
            }
            _ => return None,
        })
    }
}
