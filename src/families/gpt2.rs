//! GPT-2 (`GPT2Model` / `GPT2LMHeadModel`): a decoder-only stack, pre-LN, under the no-peek mask
//! it was trained with, and an LM head tied to its token embeddings.
//!
//! ```text
//! x = wte[ids] + wpe[p]
//! each block:  x = x + attn(ln_1(x));   x = x + mlp(ln_2(x))
//! h = ln_f(x);  logits = h·wteᵀ
//! ```
//!
//! Its linear layers are `Conv1D`s, stored `(in, out)`: read as they are, `c_attn` holding Q, K
//! and V side by side. The checkpoint's `attn.bias` / `attn.masked_bias` buffers (the causal mask
//! as a tensor, in older files) are not read: the engine applies the mask.

use rayon::prelude::*;

use crate::engine::network::{run_on, EngineOps, Forward, Network, Unembedding};
use crate::engine::ops::{
    values, AttentionId, AttentionSpec, CacheSlot, Heads, Ids, Kept, Ops, Stack, Value,
};
use crate::error::Result;
use crate::model::config::{
    default_true, global_layers, Activation, Architecture, Family, LayerNormOrder, ModelKind,
    Positions,
};
use crate::model::weights::{Linear, Norm, Table, Tensors};
use crate::model::Config;
use serde::Deserialize;
use std::collections::BTreeMap;

/// GPT-2 (`gpt2`).
pub const FAMILY: super::FamilyEntry = super::FamilyEntry {
    model_types: &["gpt2"],
    untyped: false,
    config,
    weights: |t, c| Ok(Box::new(Gpt2Weights::load(t, c)?)),
    gguf: None,
};

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

/// GPT-2's config.
pub(super) fn config(
    json: serde_json::Value,
    model_type: Option<&str>,
) -> std::result::Result<Config, String> {
    let c: Gpt2Json = serde_json::from_value(json).map_err(|e| e.to_string())?;
    for (name, on) in [
        (
            "scale_attn_by_inverse_layer_idx",
            c.scale_attn_by_inverse_layer_idx,
        ),
        ("reorder_and_upcast_attn", c.reorder_and_upcast_attn),
    ] {
        if on {
            return Err(format!("`{name}` is not supported (only false)"));
        }
    }
    if !c.scale_attn_weights {
        return Err(
            "`scale_attn_weights` false is not supported (the scores are divided by √d_k)".into(),
        );
    }
    Ok(Config {
        family: Family {
            name: "gpt2",
            renamed: &[
                ("hidden_size", "n_embd"),
                ("num_hidden_layers", "n_layer"),
                ("num_attention_heads", "n_head"),
                ("intermediate_size", "n_inner"),
                ("max_position_embeddings", "n_positions"),
                ("layer_norm_eps", "layer_norm_epsilon"),
            ],
        },
        model_type: model_type.map(str::to_owned),
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
            false,
            ModelKind::Decoder,
            Positions::Learned { offset: 0 },
            c.activation_function,
            LayerNormOrder::Pre,
            c.layer_norm_epsilon,
            c.n_head,
            c.n_embd,
            global_layers(c.n_layer, "n_layer")?,
        ),
        eos_token_ids: c.eos_token_id.into_iter().collect(),
        bos_token_id: None,
        parameters: Config::classic_parameters,
    })
}

/// The key every GPT-2 checkpoint holds, under its model prefix (`transformer.` in
/// `GPT2LMHeadModel`, none in `GPT2Model` and the original `gpt2` files).
const ANCHOR: &str = "wte.weight";

/// One block's weights (`h.{i}.…`).
#[derive(Debug, Clone)]
pub struct Block {
    pub ln_1: Norm,
    /// `attn.c_attn`: `D → 3·D`, `[Q | K | V]`.
    pub c_attn: Linear,
    /// `attn.c_proj`: the output projection `W_o`.
    pub c_proj: Linear,
    pub ln_2: Norm,
    /// `mlp.c_fc`: `D → inner`.
    pub c_fc: Linear,
    /// `mlp.c_proj`: `inner → D`.
    pub mlp_proj: Linear,
}

/// All weights of GPT-2.
#[derive(Debug, Clone)]
pub struct Gpt2Weights {
    /// `(vocab_size, D)`, the token embeddings and the LM head's weights.
    pub wte: Table,
    /// `(n_positions, D)`.
    pub wpe: Table,
    pub blocks: Vec<Block>,
    pub ln_f: Norm,
    /// `h·wteᵀ`, tied to `wte` (or the file's own `lm_head.weight`, where it has one).
    pub lm_head: Linear,
}

impl Gpt2Weights {
    /// Loads every tensor the model needs; each missing or misshapen one is an error naming
    /// its key.
    pub fn load(t: &Tensors, c: &Config) -> Result<Self> {
        let (d, inner, eps) = (c.hidden_size, c.intermediate_size, c.layer_norm_eps);
        t.check_holds(
            c.parameter_count(),
            &format!(
                "vocab_size {}, n_embd {d}, n_layer {}, n_inner {inner}, n_positions {}",
                c.vocab_size, c.num_hidden_layers, c.max_position_embeddings
            ),
        )?;
        let p = t.prefix_of(ANCHOR)?;
        // a Conv1D: `{key}.weight` `(in, out)` and `{key}.bias` `(out,)`
        let conv1d = |key: &str, input: usize, output: usize| -> Result<Linear> {
            Ok(Linear::from_conv1d(
                t.read2(&format!("{key}.weight"), input, output)?,
                t.read1(&format!("{key}.bias"), output)?,
            ))
        };
        let block = |i: usize| -> Result<Block> {
            let k = |name: &str| format!("{p}h.{i}.{name}");
            Ok(Block {
                ln_1: Norm::load(t, &k("ln_1"), d, eps)?,
                c_attn: conv1d(&k("attn.c_attn"), d, 3 * d)?,
                c_proj: conv1d(&k("attn.c_proj"), d, d)?,
                ln_2: Norm::load(t, &k("ln_2"), d, eps)?,
                c_fc: conv1d(&k("mlp.c_fc"), d, inner)?,
                mlp_proj: conv1d(&k("mlp.c_proj"), inner, d)?,
            })
        };
        let wte = Table::load(t, &format!("{p}wte.weight"), c.vocab_size, d)?;
        let wpe = Table::load(t, &format!("{p}wpe.weight"), c.max_position_embeddings, d)?;
        // read and packed on every thread; the first error in block order is the one reported
        let blocks = (0..c.num_hidden_layers)
            .into_par_iter()
            .map(block)
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let ln_f = Norm::load(t, &format!("{p}ln_f"), d, eps)?;
        // tied to wte, as GPT-2 is, unless the file holds a head of its own
        let lm_head = match t.shape("lm_head.weight") {
            Some(_) => Linear::new(
                t.read2("lm_head.weight", c.vocab_size, d)?,
                ndarray::Array1::zeros(c.vocab_size),
            ),
            None => Linear::tied(&wte, None),
        };
        Ok(Self {
            wte,
            wpe,
            blocks,
            ln_f,
            lm_head,
        })
    }

    /// The stack over the batch the engine holds; the LM head's logits when the trace keeps
    /// them. Returns `ln_f` of the last block's output, `(B·T, D)`.
    pub fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        let word = ops.gather(&self.wte, Ids::Tokens)?;
        let position = ops.gather(&self.wpe, Ids::Positions)?;
        let mut x = ops.add(&word, &position)?; // (B·T, D)
        ops.keep(Kept::EmbeddingWord, &word)?;
        ops.keep(Kept::EmbeddingPosition, &position)?;
        ops.keep(Kept::EmbeddingSum, &x)?;
        ops.keep(Kept::Hidden(0), &x)?;
        for (i, b) in self.blocks.iter().enumerate() {
            let value = |v: Value| Kept::Layer(i, v);
            // x = x + attn(ln_1(x))
            let a = ops.norm(&x, &b.ln_1)?;
            let qkv = ops.linear(&a, &b.c_attn, None)?; // (B·T, 3·D)
            let qkv = ops.split(&qkv, 3)?; // 3 × (B·T, D)
            let (q, k, v) = (&qkv[0], &qkv[1], &qkv[2]);
            ops.keep(value(values::Q), q)?;
            ops.keep(value(values::K), k)?;
            ops.keep(value(values::V), v)?;
            // a generation step's keys and values join those of the positions before it
            let k = ops.extend(CacheSlot::SelfKeys(i), k)?;
            let v = ops.extend(CacheSlot::SelfValues(i), v)?;
            let id = AttentionId::self_attention(Stack::Decoder, i);
            let context = ops.attention(
                id,
                AttentionSpec::global(Heads::all(c.num_attention_heads)),
                q,
                &k,
                &v,
            )?;
            ops.keep(value(values::CONTEXT), &context)?;
            let attn = ops.linear(&context, &b.c_proj, None)?;
            let h = ops.add_norm(&x, &attn, &b.ln_2)?; // x + attn, and ln_2 of it
            ops.keep(value(values::ATTENTION_OUTPUT), &h.sum)?;
            // x = x + mlp(ln_2(x))
            let pre = value(values::PRE_ACTIVATION);
            if ops.wants(pre) {
                let before = ops.linear(&h.norm, &b.c_fc, None)?;
                ops.keep(pre, &before)?;
            }
            let inner = ops.linear(&h.norm, &b.c_fc, Some(c.hidden_act))?;
            ops.keep(value(values::INTERMEDIATE), &inner)?;
            let mlp = ops.linear(&inner, &b.mlp_proj, None)?;
            x = ops.add(&h.sum, &mlp)?;
            ops.keep(Kept::Hidden(i + 1), &x)?;
        }
        let out = ops.norm(&x, &self.ln_f)?;
        ops.keep(Kept::Output, &out)?;
        super::lm_logits(ops, &out, &self.lm_head, c.architecture.logit_cap)?;
        Ok(out)
    }
}

impl Forward for Gpt2Weights {
    fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        Gpt2Weights::forward(self, ops, c)
    }
}

impl Network for Gpt2Weights {
    fn mlp_output(&self, layer: usize) -> Option<&Linear> {
        Some(&self.blocks.get(layer)?.mlp_proj)
    }

    fn unembedding(&self) -> Option<Unembedding<'_>> {
        Some(Unembedding {
            norm: &self.ln_f,
            lm_head: &self.lm_head,
        })
    }

    fn attention_output(&self, layer: usize) -> Option<&Linear> {
        Some(&self.blocks.get(layer)?.c_proj)
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

    fn position_table(&self) -> Option<&Table> {
        Some(&self.wpe)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
