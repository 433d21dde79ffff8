//! DistilBERT (`DistilBertModel`): BERT's post-LN encoder under other key names, without token
//! types. Its weights are read by its own keys into BERT's layers, which
//! [`bert::encoder`](super::bert) runs.
//!
//! | DistilBERT                               | BERT                                |
//! |------------------------------------------|-------------------------------------|
//! | `attention.{q_lin,k_lin,v_lin,out_lin}`  | `attention.self.{query,key,value}`, `attention.output.dense` |
//! | `sa_layer_norm`                          | `attention.output.LayerNorm`        |
//! | `ffn.lin1`, `ffn.lin2`                   | `intermediate.dense`, `output.dense`|
//! | `output_layer_norm`                      | `output.LayerNorm`                  |

use rayon::prelude::*;

use super::bert::{encoder, AttentionWeights, Embeddings, LayerWeights};
use crate::engine::network::{run_on, EngineOps, Forward, Network};
use crate::engine::ops::{Ops, Stack};
use crate::error::Result;
use crate::model::config::{
    global_layers, Activation, Architecture, Family, LayerNormOrder, ModelKind, Positions,
};
use crate::model::weights::{Linear, Norm, Table, Tensors};
use crate::model::Config;
use serde::Deserialize;
use std::collections::BTreeMap;

fn default_distilbert_activation() -> Activation {
    Activation::Gelu
}

/// DistilBERT (`distilbert`).
pub const FAMILY: super::FamilyEntry = super::FamilyEntry {
    model_types: &["distilbert"],
    untyped: false,
    config,
    weights: |t, c| Ok(Box::new(DistilBertWeights::load(t, c)?)),
    gguf: None,
};

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

/// DistilBERT's config.
pub(super) fn config(
    json: serde_json::Value,
    model_type: Option<&str>,
) -> std::result::Result<Config, String> {
    let c: DistilBertJson = serde_json::from_value(json).map_err(|e| e.to_string())?;
    Ok(Config {
        family: Family {
            name: "distilbert",
            renamed: &[
                ("hidden_size", "dim"),
                ("num_hidden_layers", "n_layers"),
                ("num_attention_heads", "n_heads"),
                ("intermediate_size", "hidden_dim"),
            ],
        },
        model_type: model_type.map(str::to_owned),
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
            false,
            ModelKind::Encoder,
            Positions::Learned { offset: 0 },
            c.activation,
            LayerNormOrder::Post,
            1e-12,
            c.n_heads,
            c.dim,
            global_layers(c.n_layers, "n_layers")?,
        ),
        eos_token_ids: vec![],
        bos_token_id: None,
        parameters: Config::classic_parameters,
    })
}

/// The key every DistilBERT checkpoint holds, under its model prefix (`distilbert.` in
/// `DistilBertForSequenceClassification`, none in `DistilBertModel`).
const ANCHOR: &str = "embeddings.word_embeddings.weight";

/// All weights of a DistilBERT encoder, in BERT's layout.
#[derive(Debug, Clone)]
pub struct DistilBertWeights {
    pub embeddings: Embeddings,
    pub layers: Vec<LayerWeights>,
}

impl DistilBertWeights {
    /// Loads every tensor the encoder needs; each missing or misshapen one is an error naming
    /// its key.
    pub fn load(t: &Tensors, c: &Config) -> Result<Self> {
        let (d, i, eps) = (c.hidden_size, c.intermediate_size, c.layer_norm_eps);
        t.check_holds(
            c.parameter_count(),
            &format!(
                "vocab_size {}, dim {d}, n_layers {}, hidden_dim {i}",
                c.vocab_size, c.num_hidden_layers
            ),
        )?;
        let p = t.prefix_of(ANCHOR)?;
        let embeddings = Embeddings {
            word: Table::load(
                t,
                &format!("{p}embeddings.word_embeddings.weight"),
                c.vocab_size,
                d,
            )?,
            position: Table::load(
                t,
                &format!("{p}embeddings.position_embeddings.weight"),
                c.max_position_embeddings,
                d,
            )?,
            token_type: None,
            layer_norm: Norm::load(t, &format!("{p}embeddings.LayerNorm"), d, eps)?,
        };
        let layer = |n: usize| -> Result<LayerWeights> {
            let k = |name: &str| format!("{p}transformer.layer.{n}.{name}");
            Ok(LayerWeights {
                attention: AttentionWeights {
                    query: Linear::load(t, &k("attention.q_lin"), d, d)?,
                    key: Linear::load(t, &k("attention.k_lin"), d, d)?,
                    value: Linear::load(t, &k("attention.v_lin"), d, d)?,
                    output: Linear::load(t, &k("attention.out_lin"), d, d)?,
                },
                attention_norm: Norm::load(t, &k("sa_layer_norm"), d, eps)?,
                intermediate: Linear::load(t, &k("ffn.lin1"), d, i)?,
                output: Linear::load(t, &k("ffn.lin2"), i, d)?,
                output_norm: Norm::load(t, &k("output_layer_norm"), d, eps)?,
            })
        };
        // read and packed on every thread; the first error in layer order is the one reported
        let layers = (0..c.num_hidden_layers)
            .into_par_iter()
            .map(layer)
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { embeddings, layers })
    }

    /// The encoder over the batch the engine holds. Returns its output, `(B·T, D)`.
    pub fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        encoder(ops, c, &self.embeddings, &self.layers)
    }
}

impl Forward for DistilBertWeights {
    fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        DistilBertWeights::forward(self, ops, c)
    }
}

impl Network for DistilBertWeights {
    fn attention_output(&self, layer: usize) -> Option<&Linear> {
        Some(&self.layers.get(layer)?.attention.output)
    }

    fn stack(&self) -> Stack {
        Stack::Encoder
    }

    fn run(&self, ops: EngineOps<'_, '_>, c: &Config) -> Result<()> {
        run_on(self, ops, c)
    }

    fn position_table(&self) -> Option<&Table> {
        Some(&self.embeddings.position)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
