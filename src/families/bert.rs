//! BERT and the encoders shaped like it (MiniLM, the seeds' pre-LN encoder, RoBERTa): its
//! weights by HF's key names, and its forward pass over [`Ops`].
//!
//! ```text
//! x = LN(word[ids] + position[p] + token_type[types])
//! post-LN (BERT):  h = LN₁(x + MHA(x));      x = LN₂(h + FFN(h))
//! pre-LN (seeds):  h = x + MHA(LN₁(x));      x = h + FFN(LN₂(h))
//! ```
//!
//! BERT's positions are `p = 0, 1, …`; RoBERTa's start after its padding index and padding
//! keeps that index (HF's `create_position_ids_from_input_ids`). DistilBERT (`distilbert.rs`)
//! runs the same encoder over its own keys, without token types.

use ndarray::{Array1, Array2, Array3, ArrayView1, Axis};
use rayon::prelude::*;

use crate::engine::cpu::AttentionLinears;
use crate::engine::network::{run_on, EngineOps, Forward, Network};
use crate::engine::ops::{values, AttentionId, AttentionSpec, Heads, Ids, Kept, Ops, Stack};
use crate::engine::ModelInputs;
use crate::error::Result;
use crate::model::config::{global_layers, Activation, Architecture, Family, ModelKind, Positions};
use crate::model::weights::{Linear, Norm, Table, Tensors};
use crate::model::{Config, Encoded, LayerNormOrder};
use serde::Deserialize;
use std::collections::BTreeMap;

/// BERT and RoBERTa (`bert`, or no `model_type`; `roberta`, `xlm-roberta`, `camembert`).
pub const FAMILY: super::FamilyEntry = super::FamilyEntry {
    model_types: &["bert", "roberta", "xlm-roberta", "camembert"],
    untyped: true,
    config,
    weights: |t, c| Ok(Box::new(BertWeights::load(t, c)?)),
    gguf: None,
};

/// The `model_type`s read as RoBERTa (BERT's layers, positions after the padding index).
pub(super) const ROBERTA: [&str; 3] = ["roberta", "xlm-roberta", "camembert"];

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

/// BERT's config (or RoBERTa's, where `model_type` is one of [`ROBERTA`]).
pub(super) fn config(
    json: serde_json::Value,
    model_type: Option<&str>,
) -> std::result::Result<Config, String> {
    let c: BertJson = serde_json::from_value(json).map_err(|e| e.to_string())?;
    if c.position_embedding_type != "absolute" {
        return Err(format!(
            "`position_embedding_type` {:?} is not supported (only \"absolute\")",
            c.position_embedding_type
        ));
    }
    let roberta = model_type.is_some_and(|t| ROBERTA.contains(&t));
    // RoBERTa's positions start after its padding index
    let offset = match (roberta, c.pad_token_id) {
        (true, Some(pad)) => pad as usize + 1,
        _ => 0,
    };
    Ok(Config {
        family: Family {
            name: if roberta { "roberta" } else { "bert" },
            renamed: &[],
        },
        model_type: model_type.map(str::to_owned),
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
            true,
            ModelKind::Encoder,
            Positions::Learned { offset },
            c.hidden_act,
            c.layer_norm_order,
            c.layer_norm_eps,
            c.num_attention_heads,
            c.hidden_size,
            global_layers(c.num_hidden_layers, "num_hidden_layers")?,
        ),
        eos_token_ids: vec![],
        bos_token_id: None,
        parameters: Config::classic_parameters,
    })
}

/// Token + position + token-type embeddings, then LayerNorm.
///
/// # Shapes
/// * `word`: `(vocab_size, D)`, `position`: `(max_position_embeddings, D)`,
///   `token_type`: `(type_vocab_size, D)` (views into the checkpoint's file)
#[derive(Debug, Clone)]
pub struct Embeddings {
    pub word: Table,
    pub position: Table,
    /// `None` in a family without token types (DistilBERT).
    pub token_type: Option<Table>,
    pub layer_norm: Norm,
}

impl Embeddings {
    pub fn load(t: &Tensors, prefix: &str, c: &Config) -> Result<Self> {
        let d = c.hidden_size;
        Ok(Self {
            word: Table::load(
                t,
                &format!("{prefix}.word_embeddings.weight"),
                c.vocab_size,
                d,
            )?,
            position: Table::load(
                t,
                &format!("{prefix}.position_embeddings.weight"),
                c.max_position_embeddings,
                d,
            )?,
            token_type: Some(Table::load(
                t,
                &format!("{prefix}.token_type_embeddings.weight"),
                c.type_vocab_size,
                d,
            )?),
            layer_norm: Norm::load(t, &format!("{prefix}.LayerNorm"), d, c.layer_norm_eps)?,
        })
    }
}

/// The projections of multi-head self-attention (`attention.self.{query,key,value}`,
/// `attention.output.dense`).
#[derive(Debug, Clone)]
pub struct AttentionWeights {
    pub query: Linear,
    pub key: Linear,
    pub value: Linear,
    pub output: Linear,
}

impl AttentionWeights {
    /// Its four dense layers, as the CPU engine's attention of two inputs takes them.
    pub fn projections(&self) -> AttentionLinears<'_> {
        AttentionLinears {
            query: &self.query,
            key: &self.key,
            value: &self.value,
            output: &self.output,
        }
    }

    pub fn load(t: &Tensors, prefix: &str, c: &Config) -> Result<Self> {
        let d = c.hidden_size;
        Ok(Self {
            query: Linear::load(t, &format!("{prefix}.self.query"), d, d)?,
            key: Linear::load(t, &format!("{prefix}.self.key"), d, d)?,
            value: Linear::load(t, &format!("{prefix}.self.value"), d, d)?,
            output: Linear::load(t, &format!("{prefix}.output.dense"), d, d)?,
        })
    }
}

/// One encoder layer: attention, its LayerNorm, the feed-forward pair and its LayerNorm.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub attention: AttentionWeights,
    /// `attention.output.LayerNorm`: the norm around the attention sub-layer.
    pub attention_norm: Norm,
    /// `intermediate.dense`: hidden → intermediate.
    pub intermediate: Linear,
    /// `output.dense`: intermediate → hidden.
    pub output: Linear,
    /// `output.LayerNorm`: the norm around the feed-forward sub-layer.
    pub output_norm: Norm,
}

impl LayerWeights {
    pub fn load(t: &Tensors, prefix: &str, c: &Config) -> Result<Self> {
        let (d, i, eps) = (c.hidden_size, c.intermediate_size, c.layer_norm_eps);
        Ok(Self {
            attention: AttentionWeights::load(t, &format!("{prefix}.attention"), c)?,
            attention_norm: Norm::load(t, &format!("{prefix}.attention.output.LayerNorm"), d, eps)?,
            intermediate: Linear::load(t, &format!("{prefix}.intermediate.dense"), d, i)?,
            output: Linear::load(t, &format!("{prefix}.output.dense"), i, d)?,
            output_norm: Norm::load(t, &format!("{prefix}.output.LayerNorm"), d, eps)?,
        })
    }
}

/// The [CLS] classification head of `BertForSequenceClassification`:
/// `logits = classifier(tanh(pooler(h_CLS)))`.
#[derive(Debug, Clone)]
pub struct ClassifierWeights {
    pub pooler: Linear,
    pub classifier: Linear,
}

impl ClassifierWeights {
    /// `classifier(tanh(pooler(h[0])))`.
    ///
    /// # Shapes
    /// * `h_cls`: `(D,)` → `(num_labels,)`
    pub fn classify(&self, h_cls: ArrayView1<f32>) -> Array1<f32> {
        use crate::engine::cpu::ops::linear;
        let x = h_cls.insert_axis(Axis(0)); // (1, D)
        let pooled = linear(x, &self.pooler).mapv(f32::tanh);
        linear(pooled.view(), &self.classifier).row(0).to_owned()
    }
}

/// The key every BERT checkpoint holds, under its model prefix (`bert.` in
/// `BertForSequenceClassification`, none in `BertModel`).
const ANCHOR: &str = "embeddings.word_embeddings.weight";

/// All weights of a BERT-family encoder.
#[derive(Debug, Clone)]
pub struct BertWeights {
    pub embeddings: Embeddings,
    pub layers: Vec<LayerWeights>,
    /// `pooler.dense` + `classifier`, present only in classification checkpoints.
    pub classifier: Option<ClassifierWeights>,
}

impl BertWeights {
    /// Loads every tensor the encoder needs; each missing or misshapen one is an error naming
    /// its key. A file holding fewer values than the config's [`Config::parameter_count`] is
    /// refused before any tensor is read.
    pub fn load(t: &Tensors, c: &Config) -> Result<Self> {
        t.check_holds(
            c.parameter_count(),
            &format!(
                "vocab_size {}, hidden_size {}, num_hidden_layers {}, intermediate_size {}",
                c.vocab_size, c.hidden_size, c.num_hidden_layers, c.intermediate_size
            ),
        )?;
        let p = t.prefix_of(ANCHOR)?;
        let embeddings = Embeddings::load(t, &format!("{p}embeddings"), c)?;
        // the layers read (in place, or converted) and packed on every thread; the first missing
        // or misshapen tensor in layer order is the error, whatever the threads' order
        let layers = (0..c.num_hidden_layers)
            .into_par_iter()
            .map(|i| LayerWeights::load(t, &format!("{p}encoder.layer.{i}"), c))
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let classifier = match t.shape("classifier.weight") {
            Some(shape) => {
                let labels = shape.first().copied().unwrap_or(0);
                Some(ClassifierWeights {
                    pooler: Linear::load(
                        t,
                        &format!("{p}pooler.dense"),
                        c.hidden_size,
                        c.hidden_size,
                    )?,
                    classifier: Linear::load(t, "classifier", c.hidden_size, labels)?,
                })
            }
            None => None,
        };
        Ok(Self {
            embeddings,
            layers,
            classifier,
        })
    }

    /// The ids a pass reads: the tokens, their types, and their positions: `0..T` in every
    /// item, or RoBERTa's (see the module's documentation).
    ///
    /// # Shapes
    /// * `input`: `(B, T)` → each `(B, T)`
    pub fn inputs(&self, input: &Encoded, c: &Config) -> ModelInputs {
        // RoBERTa's positions start after its padding index
        let positions = match c.architecture.positions {
            Positions::Learned { offset } if offset > 0 => {
                roberta_positions(input, offset as u32 - 1)
            }
            _ => positions_from_zero(input),
        };
        ModelInputs {
            tokens: input.ids.clone(),
            token_types: input.type_ids.clone(),
            positions,
            target: None,
        }
    }

    /// The classification head's logits from the last hidden states, when the checkpoint has
    /// one.
    ///
    /// # Shapes
    /// * `hidden`: `(B, T, D)` → `(B, num_labels)`
    pub fn logits(&self, hidden: &Array3<f32>) -> Option<Array2<f32>> {
        let head = self.classifier.as_ref()?;
        let rows: Vec<Array1<f32>> = hidden
            .outer_iter()
            .map(|item| head.classify(item.row(0)))
            .collect();
        let n = head.classifier.bias.len();
        Some(Array2::from_shape_fn((rows.len(), n), |(i, j)| rows[i][j]))
    }

    /// The encoder over the batch the engine holds. Returns its output, `(B·T, D)`.
    pub fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        encoder(ops, c, &self.embeddings, &self.layers)
    }
}

/// Positions `0..T` in every item.
pub(crate) fn positions_from_zero(input: &Encoded) -> Array2<u32> {
    let (b, t) = input.ids.dim();
    Array2::from_shape_fn((b, t), |(_, j)| j as u32)
}

/// RoBERTa's positions: `pad + 1, pad + 2, …` over the tokens that are not padding, `pad` on
/// padding (HF's `create_position_ids_from_input_ids`: `cumsum(ids != pad)·(ids != pad) + pad`).
fn roberta_positions(input: &Encoded, pad: u32) -> Array2<u32> {
    let mut positions = input.ids.mapv(|id| (id != pad) as u32);
    for mut row in positions.rows_mut() {
        let mut seen = 0;
        for p in row.iter_mut() {
            seen += *p;
            *p = *p * seen + pad;
        }
    }
    positions
}

/// The embeddings (token types where the family has them), then every layer: the encoder of
/// BERT, RoBERTa and DistilBERT. Returns its output, `(B·T, D)`.
pub(crate) fn encoder<O: Ops>(
    ops: &mut O,
    c: &Config,
    e: &Embeddings,
    layers: &[LayerWeights],
) -> Result<O::X> {
    let word = ops.gather(&e.word, Ids::Tokens)?;
    let position = ops.gather(&e.position, Ids::Positions)?;
    ops.keep(Kept::EmbeddingWord, &word)?;
    ops.keep(Kept::EmbeddingPosition, &position)?;
    let mut sum = ops.add(&word, &position)?;
    if let Some(table) = &e.token_type {
        let token_type = ops.gather(table, Ids::TokenTypes)?;
        ops.keep(Kept::EmbeddingTokenType, &token_type)?;
        sum = ops.add(&sum, &token_type)?;
    }
    ops.keep(Kept::EmbeddingSum, &sum)?;
    let mut x = ops.norm(&sum, &e.layer_norm)?;
    ops.keep(Kept::Hidden(0), &x)?;
    for (i, w) in layers.iter().enumerate() {
        x = layer(ops, c, w, i, &x)?;
        ops.keep(Kept::Hidden(i + 1), &x)?;
    }
    ops.keep(Kept::Output, &x)?;
    Ok(x)
}

/// One encoder layer (see the module's documentation for the two orders).
fn layer<O: Ops>(ops: &mut O, c: &Config, w: &LayerWeights, i: usize, x: &O::X) -> Result<O::X> {
    match c.layer_norm_order {
        LayerNormOrder::Post => {
            let attn = self_attention(ops, c, &w.attention, i, x)?;
            let h = ops.add_norm(&attn, x, &w.attention_norm)?.norm; // LN₁(x + MHA(x))
            ops.keep(Kept::Layer(i, values::ATTENTION_OUTPUT), &h)?;
            let ff = feed_forward(ops, c, w, i, &h)?;
            Ok(ops.add_norm(&ff, &h, &w.output_norm)?.norm) // LN₂(h + FFN(h))
        }
        LayerNormOrder::Pre => {
            let normed = ops.norm(x, &w.attention_norm)?;
            let attn = self_attention(ops, c, &w.attention, i, &normed)?;
            let h = ops.add_norm(x, &attn, &w.output_norm)?; // x + MHA(LN₁(x)), and LN₂ of it
            ops.keep(Kept::Layer(i, values::ATTENTION_OUTPUT), &h.sum)?;
            let ff = feed_forward(ops, c, w, i, &h.norm)?;
            ops.add(&h.sum, &ff) // h + FFN(LN₂(h))
        }
    }
}

/// `W_o·concat(head₁ … head_H) + b_o`, each head `softmax(QKᵀ/√d_k)·V` over `x`'s positions.
fn self_attention<O: Ops>(
    ops: &mut O,
    c: &Config,
    w: &AttentionWeights,
    i: usize,
    x: &O::X,
) -> Result<O::X> {
    let qkv = ops.project(x, &[&w.query, &w.key, &w.value])?;
    let (q, k, v) = (&qkv[0], &qkv[1], &qkv[2]);
    ops.keep(Kept::Layer(i, values::Q), q)?;
    ops.keep(Kept::Layer(i, values::K), k)?;
    ops.keep(Kept::Layer(i, values::V), v)?;
    let id = AttentionId::self_attention(Stack::Encoder, i);
    let context = ops.attention(
        id,
        AttentionSpec::global(Heads::all(c.num_attention_heads)),
        q,
        k,
        v,
    )?;
    ops.keep(Kept::Layer(i, values::CONTEXT), &context)?;
    ops.linear(&context, &w.output, None)
}

/// The position-wise feed-forward, `dense₂(act(dense₁(x)))`; `dense₁(x)` is computed apart from
/// its activation only when the trace keeps it.
fn feed_forward<O: Ops>(
    ops: &mut O,
    c: &Config,
    w: &LayerWeights,
    i: usize,
    x: &O::X,
) -> Result<O::X> {
    let pre = Kept::Layer(i, values::PRE_ACTIVATION);
    if ops.wants(pre) {
        let before = ops.linear(x, &w.intermediate, None)?;
        ops.keep(pre, &before)?;
    }
    let intermediate = ops.linear(x, &w.intermediate, Some(c.hidden_act))?;
    ops.keep(Kept::Layer(i, values::INTERMEDIATE), &intermediate)?;
    ops.linear(&intermediate, &w.output, None)
}

impl Forward for BertWeights {
    fn forward<O: Ops>(&self, ops: &mut O, c: &Config) -> Result<O::X> {
        BertWeights::forward(self, ops, c)
    }
}

impl Network for BertWeights {
    fn attention_output(&self, layer: usize) -> Option<&Linear> {
        Some(&self.layers.get(layer)?.attention.output)
    }

    fn stack(&self) -> Stack {
        Stack::Encoder
    }

    fn inputs(&self, input: &Encoded, c: &Config) -> ModelInputs {
        BertWeights::inputs(self, input, c)
    }

    fn run(&self, ops: EngineOps<'_, '_>, c: &Config) -> Result<()> {
        run_on(self, ops, c)
    }

    fn logits(&self, hidden: &Array3<f32>) -> Option<Array2<f32>> {
        BertWeights::logits(self, hidden)
    }

    fn position_table(&self) -> Option<&Table> {
        Some(&self.embeddings.position)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// An encoder's layers in BERT's layout (BERT's, RoBERTa's, DistilBERT's), where `w` is one.
pub fn encoder_layers(w: &dyn Network) -> Option<&[LayerWeights]> {
    let any = w.as_any();
    match any.downcast_ref::<BertWeights>() {
        Some(b) => Some(&b.layers),
        None => any
            .downcast_ref::<super::distilbert::DistilBertWeights>()
            .map(|d| d.layers.as_slice()),
    }
}
