//! Weights of a BERT-family checkpoint, read from `model.safetensors` by HF key names.
//!
//! Every layer is built by one `load(&Tensors, prefix, &Config)` whose key prefixes follow
//! the checkpoint's own names; the math (`engine`) never sees the file format.

use half::{bf16, f16};
use ndarray::{Array1, Array2, ArrayD, IxDyn};
use safetensors::{Dtype, SafeTensors};

use super::config::Config;
use crate::error::{Error, Result};

/// The tensors of one safetensors file, and the prefix (`""`, `"bert."`, ...) of its encoder keys.
pub struct Tensors<'a> {
    st: SafeTensors<'a>,
    file: String,
    prefix: String,
}

const ANCHOR: &str = "embeddings.word_embeddings.weight";

impl<'a> Tensors<'a> {
    /// Parses a safetensors buffer; `file` names it in errors.
    pub fn new(bytes: &'a [u8], file: &str) -> Result<Self> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| Error::Safetensors {
            file: file.into(),
            msg: e.to_string(),
        })?;
        // The encoder may sit under a model prefix (`bert.` in BertForSequenceClassification).
        let prefix = st
            .names()
            .into_iter()
            .filter_map(|k| k.strip_suffix(ANCHOR))
            .min_by_key(|p| p.len())
            .map(str::to_owned)
            .ok_or_else(|| Error::MissingTensor {
                file: file.into(),
                key: ANCHOR.into(),
            })?;
        Ok(Self {
            st,
            file: file.into(),
            prefix,
        })
    }

    /// The model prefix found in the file, e.g. `"bert."` or `""`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn has(&self, key: &str) -> bool {
        self.st.tensor(key).is_ok()
    }

    /// Reads `key` (a full key, without the model prefix added) as f32 with the expected shape.
    fn read(&self, key: &str, expected: &[usize]) -> Result<ArrayD<f32>> {
        let view = self.st.tensor(key).map_err(|_| Error::MissingTensor {
            file: self.file.clone(),
            key: key.into(),
        })?;
        if view.shape() != expected {
            return Err(Error::TensorShape {
                file: self.file.clone(),
                key: key.into(),
                expected: expected.to_vec(),
                found: view.shape().to_vec(),
            });
        }
        let data = view.data();
        let values: Vec<f32> = match view.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(Error::TensorDtype {
                    file: self.file.clone(),
                    key: key.into(),
                    dtype: format!("{other:?}"),
                })
            }
        };
        ArrayD::from_shape_vec(IxDyn(expected), values).map_err(|_| Error::TensorShape {
            file: self.file.clone(),
            key: key.into(),
            expected: expected.to_vec(),
            found: vec![data.len()],
        })
    }

    fn read1(&self, key: &str, n: usize) -> Result<Array1<f32>> {
        Ok(self
            .read(key, &[n])?
            .into_dimensionality()
            .expect("shape checked"))
    }

    fn read2(&self, key: &str, rows: usize, cols: usize) -> Result<Array2<f32>> {
        Ok(self
            .read(key, &[rows, cols])?
            .into_dimensionality()
            .expect("shape checked"))
    }
}

/// A dense layer `y = x·Wᵀ + b`.
///
/// # Shapes
/// * `weight`: `(out, in)` as stored by PyTorch's `nn.Linear`
/// * `bias`: `(out,)`
#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: Array2<f32>,
    pub bias: Array1<f32>,
}

impl Linear {
    pub fn load(t: &Tensors, prefix: &str, input: usize, output: usize) -> Result<Self> {
        Ok(Self {
            weight: t.read2(&format!("{prefix}.weight"), output, input)?,
            bias: t.read1(&format!("{prefix}.bias"), output)?,
        })
    }
}

/// LayerNorm over the last axis. Old TF-converted checkpoints name its tensors `gamma`/`beta`.
///
/// # Shapes
/// * `weight`, `bias`: `(hidden,)`
#[derive(Debug, Clone)]
pub struct LayerNorm {
    pub weight: Array1<f32>,
    pub bias: Array1<f32>,
    pub eps: f32,
}

impl LayerNorm {
    pub fn load(t: &Tensors, prefix: &str, config: &Config) -> Result<Self> {
        let n = config.hidden_size;
        let (w, b) = if t.has(&format!("{prefix}.gamma")) {
            ("gamma", "beta")
        } else {
            ("weight", "bias")
        };
        Ok(Self {
            weight: t.read1(&format!("{prefix}.{w}"), n)?,
            bias: t.read1(&format!("{prefix}.{b}"), n)?,
            eps: config.layer_norm_eps as f32,
        })
    }
}

/// Token + position + token-type embeddings, then LayerNorm.
///
/// # Shapes
/// * `word`: `(vocab_size, hidden)`, `position`: `(max_position_embeddings, hidden)`,
///   `token_type`: `(type_vocab_size, hidden)`
#[derive(Debug, Clone)]
pub struct Embeddings {
    pub word: Array2<f32>,
    pub position: Array2<f32>,
    pub token_type: Array2<f32>,
    pub layer_norm: LayerNorm,
}

impl Embeddings {
    pub fn load(t: &Tensors, prefix: &str, c: &Config) -> Result<Self> {
        let d = c.hidden_size;
        Ok(Self {
            word: t.read2(&format!("{prefix}.word_embeddings.weight"), c.vocab_size, d)?,
            position: t.read2(
                &format!("{prefix}.position_embeddings.weight"),
                c.max_position_embeddings,
                d,
            )?,
            token_type: t.read2(
                &format!("{prefix}.token_type_embeddings.weight"),
                c.type_vocab_size,
                d,
            )?,
            layer_norm: LayerNorm::load(t, &format!("{prefix}.LayerNorm"), c)?,
        })
    }
}

/// The projections of multi-head self-attention (`attention.self.{query,key,value}`, `attention.output.dense`).
#[derive(Debug, Clone)]
pub struct AttentionWeights {
    pub query: Linear,
    pub key: Linear,
    pub value: Linear,
    pub output: Linear,
}

impl AttentionWeights {
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
    pub attention_norm: LayerNorm,
    /// `intermediate.dense`: hidden → intermediate.
    pub intermediate: Linear,
    /// `output.dense`: intermediate → hidden.
    pub output: Linear,
    /// `output.LayerNorm`: the norm around the feed-forward sub-layer.
    pub output_norm: LayerNorm,
}

impl LayerWeights {
    pub fn load(t: &Tensors, prefix: &str, c: &Config) -> Result<Self> {
        let (d, i) = (c.hidden_size, c.intermediate_size);
        Ok(Self {
            attention: AttentionWeights::load(t, &format!("{prefix}.attention"), c)?,
            attention_norm: LayerNorm::load(t, &format!("{prefix}.attention.output.LayerNorm"), c)?,
            intermediate: Linear::load(t, &format!("{prefix}.intermediate.dense"), d, i)?,
            output: Linear::load(t, &format!("{prefix}.output.dense"), i, d)?,
            output_norm: LayerNorm::load(t, &format!("{prefix}.output.LayerNorm"), c)?,
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

/// All weights of a BERT-family encoder.
#[derive(Debug, Clone)]
pub struct BertWeights {
    pub embeddings: Embeddings,
    pub layers: Vec<LayerWeights>,
    /// `pooler.dense` + `classifier`, present only in classification checkpoints.
    pub classifier: Option<ClassifierWeights>,
}

impl BertWeights {
    /// Loads every tensor the encoder needs; each missing or misshapen one is an error naming its key.
    pub fn load(t: &Tensors, c: &Config) -> Result<Self> {
        let p = t.prefix().to_owned();
        let embeddings = Embeddings::load(t, &format!("{p}embeddings"), c)?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| LayerWeights::load(t, &format!("{p}encoder.layer.{i}"), c))
            .collect::<Result<Vec<_>>>()?;
        let classifier = if t.has("classifier.weight") {
            let labels =
                t.st.tensor("classifier.weight")
                    .map(|v| v.shape().first().copied().unwrap_or(0))
                    .unwrap_or(0);
            Some(ClassifierWeights {
                pooler: Linear::load(t, &format!("{p}pooler.dense"), c.hidden_size, c.hidden_size)?,
                classifier: Linear::load(t, "classifier", c.hidden_size, labels)?,
            })
        } else {
            None
        };
        Ok(Self {
            embeddings,
            layers,
            classifier,
        })
    }
}
