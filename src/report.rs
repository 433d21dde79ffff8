//! The one result contract, shared by the CLI (`attnscope attention`, through `serde_json`) and
//! the browser (`src/wasm.rs`, through `serde-wasm-bindgen`, tensors as typed arrays):
//!
//! `{"model", "model_type", "backend", "mask", "mask_ablation"?: true, "head_mask"?: [[layer,
//!   head]…], "scale"?: "none", "no_rope"?: true, "results":
//!   [{"text", "pair"?, "tokens", "token_ids", "length", "truncated", "attention": [L][H][T][T],
//!   "hidden"?: [T][D], "scores"?: [L][H][T][T], "mask": [T][T], "logits"?, "head_metrics"?:
//!   {name: [L][H]}, "head_roles"?: {"previous_token", "sink", "induction", "duplicate_token"},
//!   each [L][H], "rollout"?: [T][T], "sentence_embedding"?: [D], "hidden_states"?:
//!   [L+1][T][D], "layer_trace"?: {"layer", "embeddings"?: {"word", "position", "token_type",
//!   "sum", "normed"}, "input", "q", "k", "v", "context", "attention_output", "pre_activation",
//!   "intermediate", "output", "attn_norm"?, "q_rope"?, "k_rope"?, "ffn_norm"?, "gate"?, "up"?,
//!   "act"?}, "cross_attention"?: {"layer", "queries", "keys", "attention": [H][n_q][n_k]},
//!   "next_tokens"?: [T][K] of {"id", "token", "text", "p"}}]}`
//!
//! The page's `window.attnscope.result` is one item of `results` with the same field names and
//! shapes, plus the run's `model`, `backend`, `fallback` and `elapsed_ms`.

use std::collections::BTreeMap;

use ndarray::{s, Array2, ArrayViewD, Axis};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::analysis::flow::{Flow, Routes};
use crate::analysis::CrossAttention;
use crate::analysis::{
    rollout, sentence_embedding, AttributionOptions, HeadMetrics, HeadRoles, ItemAttention,
    ItemHeads, LogitAttribution, Repeated, SpecialIds, TranslationValueWeighted, ValueWeighted,
};
use crate::engine::network::Loaded;
use crate::engine::{AttentionKept, EmbeddingTrace, LayerTrace, Numerics, ScoreScale, Trace};
use crate::masks::MaskKind;
use crate::model::{Activation, Encoded, LayerNormOrder};
use crate::Model;

/// Serialises an n-dimensional array as nested JSON arrays, without copying it.
pub struct Nested<'a, T>(pub ArrayViewD<'a, T>);

impl<T: Serialize + Copy> Serialize for Nested<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.ndim() == 0 {
            return self.0.iter().next().copied().serialize(s);
        }
        let mut seq = s.serialize_seq(Some(self.0.len_of(Axis(0))))?;
        for sub in self.0.outer_iter() {
            if sub.ndim() == 0 {
                seq.serialize_element(&sub.iter().next().copied())?;
            } else {
                seq.serialize_element(&Nested(sub))?;
            }
        }
        seq.end()
    }
}

/// An owned array as nested JSON arrays (the `Some` of a skipped-when-`None` field).
fn nested_owned<S: Serializer>(a: &Option<Array2<f32>>, s: S) -> Result<S::Ok, S::Error> {
    match a {
        Some(a) => Nested(a.view().into_dyn()).serialize(s),
        None => s.serialize_none(),
    }
}

/// Named `(L, H)` grids as `{name: [L][H], …}`, in their order.
fn named_grids<S: Serializer>(all: &[(&str, &Array2<f32>)], s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(all.len()))?;
    for (name, values) in all {
        map.serialize_entry(name, &Nested(values.view().into_dyn()))?;
    }
    map.end()
}

impl Serialize for HeadMetrics {
    /// `{"entropy": [L][H], "to_cls": [L][H], …}`
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        named_grids(&self.all(), s)
    }
}

impl Serialize for HeadRoles {
    /// `{"previous_token": [L][H], "sink": [L][H], "induction": [L][H], "duplicate_token": [L][H]}`
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        named_grids(&self.all(), s)
    }
}

impl Serialize for CrossAttention {
    /// `{"layer", "queries": [n_q], "keys": [n_k], "attention": [H][n_q][n_k]}`
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(4))?;
        map.serialize_entry("layer", &self.layer)?;
        map.serialize_entry("queries", &self.queries)?;
        map.serialize_entry("keys", &self.keys)?;
        map.serialize_entry("attention", &Nested(self.attention.view().into_dyn()))?;
        map.end()
    }
}

/// One text's embeddings, step by step (item `b` of an [`EmbeddingTrace`]).
///
/// # Shapes
/// * every field `[T][D]`
#[derive(serde::Serialize)]
pub struct ItemEmbeddings<'a> {
    pub word: Nested<'a, f32>,
    /// Absent where the family's positions are no embedding (rotary).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<Nested<'a, f32>>,
    /// Absent where the family has no token types.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_type: Option<Nested<'a, f32>>,
    pub sum: Nested<'a, f32>,
    pub normed: Nested<'a, f32>,
}

impl<'a> ItemEmbeddings<'a> {
    pub fn new(e: &'a EmbeddingTrace, b: usize) -> Self {
        let item = |a: &'a ndarray::Array3<f32>| Nested(a.index_axis(Axis(0), b).into_dyn());
        Self {
            word: item(&e.word),
            position: e.position.as_ref().map(item),
            token_type: e.token_type.as_ref().map(item),
            sum: item(&e.sum),
            normed: item(&e.normed),
        }
    }
}

/// One text's layer trace (item `b` of a [`LayerTrace`], which says what each value is): its
/// values by their names, `[T][c]` each, or `[heads][T][d]` for a value split into heads
/// (`q_rope`, `k_rope`). A gated feed-forward's are named as it names them too: `gate` (its
/// `pre_activation`) and `act` (`act(gate) ⊙ up`, its `intermediate`) beside `up`.
pub struct ItemLayerTrace<'a> {
    pub layer: usize,
    pub embeddings: Option<ItemEmbeddings<'a>>,
    pub values: Vec<(&'static str, Nested<'a, f32>)>,
}

impl<'a> ItemLayerTrace<'a> {
    pub fn new(t: &'a LayerTrace, b: usize) -> Self {
        let item = |a: &'a ndarray::ArrayD<f32>| Nested(a.index_axis(Axis(0), b));
        let mut values: Vec<(&'static str, Nested<'a, f32>)> =
            t.values.iter().map(|(name, a)| (*name, item(a))).collect();
        if t.values.contains_key("up") {
            for (alias, name) in [("gate", "pre_activation"), ("act", "intermediate")] {
                if let Some(a) = t.values.get(name) {
                    values.push((alias, item(a)));
                }
            }
        }
        Self {
            layer: t.layer,
            embeddings: t.embeddings.as_ref().map(|e| ItemEmbeddings::new(e, b)),
            values,
        }
    }
}

impl serde::Serialize for ItemLayerTrace<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("layer", &self.layer)?;
        if let Some(e) = &self.embeddings {
            m.serialize_entry("embeddings", e)?;
        }
        for (name, v) in &self.values {
            m.serialize_entry(name, v)?;
        }
        m.end()
    }
}

/// What to include beyond tokens and attention.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// `(layer, head)` pairs: only these heads' attention, computed from a trace that kept
    /// each layer's queries and keys ([`crate::engine::AttentionKept::QueriesKeys`]), in
    /// `heads` rather than every head's in `attention`.
    pub heads: Vec<(usize, usize)>,
    pub hidden: bool,
    pub scores: bool,
    /// Per-head summaries ([`HeadMetrics`]).
    pub head_metrics: bool,
    /// The heads' roles ([`HeadRoles`]) on texts that repeat a sequence of this many tokens.
    pub head_roles: Option<usize>,
    /// Value-weighted attention ([`ValueWeighted`]); the trace must have kept the values
    /// ([`crate::engine::TraceOptions::values`]).
    pub value_weighted: bool,
    /// The direct logit attribution ([`LogitAttribution`]); the trace must have kept the
    /// residual stream's writes ([`crate::engine::TraceOptions::writes`]).
    pub logit_attribution: Option<AttributionOptions>,
    /// The information-flow routes ([`Flow`]) to each text's last position, the edges of at
    /// least this importance; the trace must have kept the values and the writes.
    pub flow: Option<f32>,
    /// Attention rollout ([`rollout`]).
    pub rollout: bool,
    /// The mean-pooled, L2-normalised sentence embedding ([`sentence_embedding`]).
    pub sentence_embedding: bool,
    /// The K likeliest next tokens at each position ([`NextToken`]), from the trace's LM logits.
    pub top_k: Option<usize>,
}

/// One prediction of the next token.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NextToken {
    pub id: u32,
    /// As the vocabulary holds it (`Ġarrow`).
    pub token: String,
    /// As text (` arrow`).
    pub text: String,
    /// Its probability: the softmax of the position's logits over the whole vocabulary.
    pub p: f32,
}

/// The `k` likeliest next tokens after each row of an LM head's `logits`, best first, named.
///
/// # Shapes
/// * `logits`: `(T, V)` → `[T][k]`
pub fn next_tokens(
    logits: ndarray::ArrayView2<f32>,
    k: usize,
    tokenizer: &crate::model::TextTokenizer,
) -> Vec<Vec<NextToken>> {
    crate::engine::top_k(logits, k)
        .iter()
        .map(|top| predictions(top, tokenizer))
        .collect()
}

/// One text of a traced batch, as the analyses read it.
pub fn item_attention<'a>(
    trace: &'a Trace,
    input: &'a Encoded,
    b: usize,
    special: SpecialIds,
) -> ItemAttention<'a> {
    let heads = match &trace.queries_keys {
        Some(from) => ItemHeads::Recomputed {
            from,
            mask: &trace.mask,
            item: b,
        },
        None => ItemHeads::Kept {
            probs: trace.attention.slice(s![b, .., .., .., ..]),
            scores: trace
                .scores
                .as_ref()
                .map(|sc| sc.slice(s![b, .., .., .., ..])),
        },
    };
    ItemAttention {
        heads,
        ids: input.ids.row(b),
        valid: input.valid.row(b),
        special,
    }
}

/// One text of a batch as the tokenizer saw it: the part of an item that is not a tensor.
#[derive(serde::Serialize)]
pub struct ItemInput<'a> {
    pub text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair: Option<&'a str>,
    /// `[T]`, with `[PAD]` where the batch padded this text.
    pub tokens: &'a [String],
    pub token_ids: Vec<u32>,
    /// `[length]`: each real token as a person reads it (`Ġarrow` → ` arrow`).
    pub token_texts: &'a [String],
    /// `[length]`: each real token's `[start, end]` in its text, in bytes (`[0, 0]` for a special
    /// token the tokenizer added).
    pub offsets: &'a [(usize, usize)],
    /// `[length]`: each real token's word (the tokenizer's word boundaries); `null` for a special
    /// token.
    pub word_ids: &'a [Option<u32>],
    /// How many of `tokens` are real: the rest is padding.
    pub length: usize,
    /// Whether the text was cut at the model's `max_position_embeddings`.
    pub truncated: bool,
    /// With a pair: the position of its first token (bertviz's `sentence_b_start`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentence_b_start: Option<usize>,
}

impl<'a> ItemInput<'a> {
    /// The inputs of every text of a batch.
    pub fn all(texts: &'a [String], pair: Option<&'a str>, input: &'a Encoded) -> Vec<Self> {
        texts
            .iter()
            .enumerate()
            .map(|(b, text)| Self {
                text,
                pair,
                tokens: &input.tokens[b],
                token_ids: input.ids.row(b).to_vec(),
                token_texts: &input.texts[b],
                offsets: &input.offsets[b],
                word_ids: &input.word_ids[b],
                length: input.length(b),
                truncated: input.truncated[b],
                sentence_b_start: input.sentence_b_start[b],
            })
            .collect()
    }
}

/// The report for one text of a batch.
#[derive(serde::Serialize)]
pub struct ItemReport<'a> {
    #[serde(flatten)]
    pub input: ItemInput<'a>,
    /// `[L][H][T][T]`; absent when the pass kept each layer's queries and keys (`heads`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<Nested<'a, f32>>,
    /// The heads asked for, computed from the pass's queries and keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heads: Option<Vec<HeadReport>>,
    /// `[T][T]`, 1 where attending is allowed.
    pub mask: Vec<Vec<u8>>,
    /// `[T][D]`
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden: Option<Nested<'a, f32>>,
    /// `[L][H][T][T]`, `QKᵀ/√d_k` (`QKᵀ` under `"scale": "none"`) before the mask.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scores: Option<Nested<'a, f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logits: Option<Vec<f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_metrics: Option<HeadMetrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_roles: Option<HeadRoles>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logit_attribution: Option<LogitAttribution>,
    /// `{"threshold", "edges": [{layer, head, from, to, importance}]}`
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<Routes>,
    /// `"value_weighted"`: `[L][H][T][T]`, `"value_norms"`: `[L][H][T]`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub value_weighted: Option<ValueWeighted>,
    /// `[T][T]`
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "nested_owned"
    )]
    pub rollout: Option<Array2<f32>>,
    /// `[D]`
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentence_embedding: Option<Vec<f32>>,
    /// `[L+1][T][D]`: the embeddings' output, then every layer's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden_states: Option<Nested<'a, f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer_trace: Option<ItemLayerTrace<'a>>,
    /// From the pair's second sentence to its first, each encoded alone
    /// ([`crate::engine::cpu::cross_attention`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_attention: Option<CrossAttention>,
    /// `[T][K]`: at each position, the likeliest next tokens (a model with an LM head).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_tokens: Option<Vec<Vec<NextToken>>>,
}

/// One head's attention over one text, `(layer, head)` 0-based.
///
/// # Shapes
/// * `attention`, `scores`: `[T][T]`
#[derive(serde::Serialize)]
pub struct HeadReport {
    pub layer: usize,
    pub head: usize,
    #[serde(serialize_with = "nested_array")]
    pub attention: Array2<f32>,
    /// `QKᵀ/√d_k` (`QKᵀ` under `"scale": "none"`) before the mask, with `--scores`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "nested_owned"
    )]
    pub scores: Option<Array2<f32>>,
}

/// An owned array as nested JSON arrays.
fn nested_array<S: Serializer>(a: &Array2<f32>, s: S) -> Result<S::Ok, S::Error> {
    Nested(a.view().into_dyn()).serialize(s)
}

/// The whole report.
#[derive(serde::Serialize)]
pub struct Report<'a> {
    pub model: &'a str,
    /// The family, as HF's `model_type` names it.
    pub model_type: &'static str,
    /// What the model is, layer by layer (each layer's reach, window, rotation, QK-norm and
    /// norms): the page's `modelInfo.architecture`.
    pub architecture: &'a crate::model::config::Architecture,
    pub backend: &'a str,
    /// Why the CPU ran although the GPU was wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<&'a str>,
    pub mask: MaskKind,
    /// Whether `mask` is not the one the model was trained with (padding for an encoder, causal
    /// for a decoder-only model): an ablation.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mask_ablation: bool,
    /// The heads knocked out of the forward pass, `[layer, head]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub head_mask: Vec<[usize; 2]>,
    /// What the scores were divided by: absent for `√d_k` (the default), `"none"` for the
    /// unscaled ablation.
    #[serde(skip_serializing_if = "is_sqrt_dk")]
    pub scale: ScoreScale,
    /// Whether the rotary positions were left out (the ablation; absent when they were applied).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_rope: bool,
    /// Whether QK-norm was left out (the ablation; absent when the heads were normed).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_qk_norm: bool,
    /// How the 4-bit matrices were multiplied: absent for the exact numerics, `"fast"` for
    /// 8-bit activations ([`Numerics::Fast`]).
    #[serde(skip_serializing_if = "is_exact")]
    pub numerics: Numerics,
    pub results: Vec<ItemReport<'a>>,
}

fn is_sqrt_dk(s: &ScoreScale) -> bool {
    *s == ScoreScale::SqrtDk
}

fn is_exact(n: &Numerics) -> bool {
    *n == Numerics::Exact
}

impl<'a> Report<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        model: &'a Model,
        backend: &'a str,
        mask: MaskKind,
        texts: &'a [String],
        pair: Option<&'a str>,
        input: &'a Encoded,
        trace: &'a Trace,
        opts: ReportOptions,
    ) -> crate::Result<Self> {
        let special = model.tokenizer.special_ids();
        // the heads asked for, each item's, from the pass's queries and keys
        let heads = |b: usize| -> crate::Result<Option<Vec<HeadReport>>> {
            let Some(from) = &trace.queries_keys else {
                return Ok(None);
            };
            let heads = opts.heads.iter().map(|&(layer, head)| {
                let one = from.head(b, layer, head, &trace.mask, opts.scores)?;
                Ok(HeadReport {
                    layer,
                    head,
                    attention: one.probs,
                    scores: one.scores,
                })
            });
            heads.collect::<crate::Result<_>>().map(Some)
        };
        let results = ItemInput::all(texts, pair, input)
            .into_iter()
            .enumerate()
            .map(|(b, item)| -> crate::Result<ItemReport> {
                let of = || item_attention(trace, input, b, special);
                Ok(ItemReport {
                    head_metrics: opts
                        .head_metrics
                        .then(|| HeadMetrics::of(&of()))
                        .transpose()?,
                    head_roles: opts
                        .head_roles
                        .map(|period| HeadRoles::of(&of(), Repeated::find(input, b, period)?))
                        .transpose()?,
                    logit_attribution: opts
                        .logit_attribution
                        .map(|o| {
                            let writes = trace.writes.as_ref().ok_or_else(|| {
                                crate::Error::Engine("the pass kept no writes".into())
                            })?;
                            let heads = trace.attention.dim().2;
                            let sizes = (heads, input.length(b));
                            let (net, tok) = (model.weights.as_ref(), &model.tokenizer);
                            let kept = (writes, trace.lm_logits.as_ref());
                            LogitAttribution::of(net, tok, kept, b, sizes, o)
                        })
                        .transpose()?,
                    flow: opts
                        .flow
                        .map(|threshold| {
                            let kept = || crate::Error::Engine("the pass kept no writes".into());
                            let writes = trace.writes.as_ref().ok_or_else(kept)?;
                            let values = trace.values.as_deref().ok_or_else(kept)?;
                            let flow = Flow::of(model.weights.as_ref(), writes, values, &of(), b)?;
                            Ok::<_, crate::Error>(
                                flow.routes(input.length(b).saturating_sub(1), threshold),
                            )
                        })
                        .transpose()?,
                    value_weighted: opts
                        .value_weighted
                        .then(|| {
                            let values = trace.values.as_deref().ok_or_else(|| {
                                crate::Error::Engine("the pass kept no values".into())
                            })?;
                            ValueWeighted::of(model.weights.as_ref(), values, &of(), b)
                        })
                        .transpose()?,
                    rollout: opts.rollout.then(|| rollout(&of())).transpose()?,
                    sentence_embedding: opts.sentence_embedding.then(|| {
                        sentence_embedding(trace.hidden.slice(s![b, .., ..]), input.valid.row(b))
                            .to_vec()
                    }),
                    input: item,
                    attention: trace
                        .queries_keys
                        .is_none()
                        .then(|| Nested(trace.attention.slice(s![b, .., .., .., ..]).into_dyn())),
                    heads: heads(b)?,
                    mask: trace
                        .mask
                        .item(b)
                        .outer_iter()
                        .map(|r| r.iter().map(|&m| m as u8).collect())
                        .collect(),
                    hidden: opts
                        .hidden
                        .then(|| Nested(trace.hidden.slice(s![b, .., ..]).into_dyn())),
                    scores: trace
                        .scores
                        .as_ref()
                        .filter(|_| opts.scores)
                        .map(|sc| Nested(sc.slice(s![b, .., .., .., ..]).into_dyn())),
                    logits: trace.logits.as_ref().map(|l| l.row(b).to_vec()),
                    hidden_states: trace
                        .hidden_states
                        .as_ref()
                        .map(|hs| Nested(hs.index_axis(Axis(0), b).into_dyn())),
                    layer_trace: trace
                        .layer_trace
                        .as_ref()
                        .map(|lt| ItemLayerTrace::new(lt, b)),
                    cross_attention: None,
                    next_tokens: trace
                        .lm_logits
                        .as_ref()
                        .zip(opts.top_k)
                        .map(|(l, k)| next_tokens(l.index_axis(Axis(0), b), k, &model.tokenizer)),
                })
            })
            .collect::<crate::Result<_>>()?;
        Ok(Self {
            model: model.short_name(),
            model_type: model.config.family.name(),
            architecture: &model.config.architecture,
            backend,
            fallback: None,
            mask_ablation: mask != model.own_mask(),
            mask,
            head_mask: vec![],
            scale: ScoreScale::SqrtDk,
            no_rope: false,
            no_qk_norm: false,
            numerics: Numerics::Exact,
            results,
        })
    }
}

/// A browser run: everything but the tensors, which travel beside it as typed arrays
/// (`attention` and `scores` `(B, L, H, T, T)` as `Float32Array`, `mask` `(B, T, T)` as
/// `Uint8Array`, `logits` `(B, num_labels)`). The page turns it into `results` items of the
/// same shape as the CLI's.
#[derive(serde::Serialize)]
pub struct RunInfo<'a> {
    pub model: &'a str,
    pub model_type: &'static str,
    pub backend: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<&'a str>,
    pub mask: MaskKind,
    /// Whether `mask` is not the one the model was trained with (see [`Report::mask_ablation`]).
    pub mask_ablation: bool,
    /// The forward pass alone, in milliseconds.
    pub elapsed_ms: f64,
    /// How many of the text's first positions the CPU engine took from its last pass over the
    /// same beginning rather than computing them (typing at the end: see
    /// [`crate::engine::cpu::forward_reusing`]); 0 when it ran the whole text.
    pub reused: usize,
    /// What the run kept of its attention: `"probabilities"` (every head's, in `attention`),
    /// or `"queries_keys"` for a long text, whose heads the page asks for one at a time
    /// (`Session.longHead(long_run, item, layer, head)`).
    pub attention: AttentionKept,
    /// The number a long run is known by in its session, for `longHead` (absent for a long
    /// run asked with `noHeadsLater`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub long_run: Option<u32>,
    /// `[B, L, H, T, T]`
    pub shape: [usize; 5],
    /// Each layer's reach (`{"attention": "global"}` or `{"attention": "sliding", "window": w}`):
    /// the page cuts a sliding layer's own mask from `mask` by it.
    pub reach: Vec<crate::model::config::Reach>,
    pub items: Vec<ItemInput<'a>>,
    /// The heads knocked out of the forward pass, `[layer, head]`.
    pub head_mask: Vec<[usize; 2]>,
    /// What the scores were divided by: `"sqrt_dk"` or `"none"`.
    pub scale: ScoreScale,
    /// Whether the rotary positions were left out (the ablation).
    pub no_rope: bool,
    /// Whether QK-norm was left out (the ablation).
    pub no_qk_norm: bool,
    /// How the 4-bit matrices were multiplied: `"exact"` or `"fast"` ([`Numerics`]).
    pub numerics: Numerics,
    /// The names of the head metrics beside the run (`headMetrics`, `(B, metric, L, H)`), in
    /// that order; empty when none were asked for.
    pub head_metrics: &'static [&'static str],
    /// The names of the heads' roles beside the run (`headRoles`, `(B, role, L, H)`), in that
    /// order; empty when none were asked for.
    pub head_roles: &'static [&'static str],
    /// Where each text repeats (`{start, len, period}`), the roles' ground: `null` for a text
    /// that does not begin with two repeats, whose roles are NaN. Empty unless roles were asked.
    pub repeats: Vec<Option<Repeated>>,
}

/// An encoder–decoder model's decoder, as [`ModelInfo`] describes it (the encoder's sizes are
/// `layers`, `heads`, …).
#[derive(serde::Serialize)]
pub struct DecoderInfo {
    pub layers: usize,
    pub heads: usize,
    /// The decoder's embeddings are scaled by this (`√d_model` with `scale_embedding`).
    pub embed_scale: f32,
    pub start_token: String,
    pub eos_token: String,
    /// Where the page opens: the most readable cross-attention head a training found.
    pub focus: Option<crate::model::config::Focus>,
}

/// What the page shows about a loaded checkpoint, from its config.
#[derive(serde::Serialize)]
pub struct ModelInfo<'a> {
    pub name: &'a str,
    /// The family, as HF's `model_type` names it (`bert`, `roberta`, `distilbert`, `gpt2`,
    /// `marian`, `llama`, `mistral`, `qwen2`): a name to show, not to decide by (the
    /// `architecture` says what the model is).
    pub model_type: &'static str,
    /// What the model is: its kind, positions, norm, feed-forward, query and key/value heads,
    /// biases and LM head ([`Architecture`](crate::model::config::Architecture)).
    pub architecture: &'a crate::model::config::Architecture,
    /// `encoder`, or `decoder` for a decoder-only model.
    pub stack: crate::engine::ops::Stack,
    /// The mask the model was trained with (`padding`, or `causal` for a decoder-only model).
    pub own_mask: MaskKind,
    /// Whether it reads token types (segment A / B).
    pub token_types: bool,
    /// The first position id of a text (RoBERTa's: its padding index + 1; else 0).
    pub position_offset: usize,
    /// Whether it predicts the next token (an LM head: `topK` runs give `nextTokens`).
    pub lm_head: bool,
    /// Whether what writes its next token can be split into its layers' writes (the direct
    /// logit attribution: a pre-norm decoder with an LM head, GPT-2 and the Llama family).
    pub logit_attribution: bool,
    /// Whether it has a chat template (an instruct model: `generate` may wrap the prompt as a
    /// user message, `chat: true`).
    pub chat_template: bool,
    /// An encoder–decoder (translation) model's decoder: the page translates with it
    /// (`Session.translate`) rather than running the encoder alone; `null` for other models.
    pub decoder: Option<DecoderInfo>,
    /// The special tokens its tokenizer adds around a text (`[CLS]`/`[SEP]`, `<s>`/`</s>`; none
    /// for GPT-2).
    pub specials: Vec<String>,
    pub layers: usize,
    pub heads: usize,
    pub hidden: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub max_length: usize,
    pub vocab_size: usize,
    pub hidden_act: String,
    pub layer_norm_order: String,
    /// `id2label` names when the checkpoint has a [CLS] classification head.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

impl<'a> ModelInfo<'a> {
    pub fn new(model: &'a Model) -> Self {
        let c = &model.config;
        let mut labels: Vec<(usize, String)> = c
            .id2label
            .iter()
            .flatten()
            .filter_map(|(id, name)| Some((id.parse().ok()?, name.clone())))
            .collect();
        labels.sort();
        let special = model.tokenizer.special_ids();
        Self {
            name: model.short_name(),
            model_type: c.family.name(),
            architecture: &c.architecture,
            stack: model.stack(),
            own_mask: model.own_mask(),
            token_types: c.architecture.token_types,
            position_offset: match c.architecture.positions {
                crate::model::config::Positions::Learned { offset } => offset,
                _ => 0,
            },
            lm_head: model.weights.has_lm_head(),
            logit_attribution: crate::engine::network::Network::unembedding(model.weights.as_ref())
                .is_some(),
            chat_template: model.chat.is_some(),
            decoder: c.decoder.as_ref().map(|d| DecoderInfo {
                layers: d.layers,
                heads: d.heads,
                embed_scale: d.embed_scale,
                start_token: model.tokenizer.token(d.start_token_id),
                eos_token: model.tokenizer.token(d.eos_token_id),
                focus: d.focus,
            }),
            specials: [special.cls, special.sep]
                .into_iter()
                .flatten()
                .map(|id| model.tokenizer.token(id))
                .collect(),
            layers: c.num_hidden_layers,
            heads: c.num_attention_heads,
            hidden: c.hidden_size,
            head_dim: c.head_dim(),
            intermediate: c.intermediate_size,
            max_length: c.max_tokens(),
            vocab_size: c.vocab_size,
            hidden_act: match c.hidden_act {
                Activation::Gelu => "gelu",
                Activation::GeluTanh => "gelu_tanh",
                Activation::Relu => "relu",
                Activation::Silu => "silu",
            }
            .into(),
            layer_norm_order: match c.layer_norm_order {
                LayerNormOrder::Post => "post",
                LayerNormOrder::Pre => "pre",
            }
            .into(),
            labels: labels.into_iter().map(|(_, name)| name).collect(),
        }
    }
}

/// One source's decoder layer, inside ([`crate::engine::DecoderTrace`]'s item `b`, cut to its
/// own `S` source tokens and `T` steps): what the page's inside-the-decoder panels draw.
///
/// Every value `[T][D]` but those of a row a source position (Marian's `cross_k` and
/// `cross_v`), `[S][D]`, and `cross_scores`, `[H][T][S]`; each named as the family names it,
/// beside the fields below.
#[derive(serde::Serialize)]
pub struct DecoderTraceItem<'a> {
    pub layer: usize,
    /// What the token rows are multiplied by (`√d_model` for Marian), the heads and `d_k`.
    pub embed_scale: f32,
    pub heads: usize,
    pub head_dim: usize,
    pub source_tokens: Vec<String>,
    /// What the decoder reads at each step: `output_ids[:-1]`.
    pub target_tokens: Vec<String>,
    pub word: Nested<'a, f32>,
    pub position: Nested<'a, f32>,
    pub cross_scores: Nested<'a, f32>,
    #[serde(flatten)]
    pub values: BTreeMap<&'static str, Nested<'a, f32>>,
}

impl<'a> DecoderTraceItem<'a> {
    /// Item `b` of `tr`, whose decoder read `output_ids[:-1]`.
    pub fn new(
        model: &Model,
        tr: &'a crate::engine::DecoderTrace,
        b: usize,
        output_ids: &[u32],
    ) -> crate::error::Result<Self> {
        let d = model.config.decoder()?;
        let source = &tr.source;
        let s = source.length(b);
        let t = output_ids.len().saturating_sub(1).min(tr.word.dim().1);
        let rows =
            |a: &'a ndarray::Array3<f32>, n: usize| Nested(a.slice(s![b, ..n, ..]).into_dyn());
        Ok(Self {
            layer: tr.layer,
            embed_scale: d.embed_scale,
            heads: d.heads,
            head_dim: model.config.hidden_size / d.heads.max(1),
            source_tokens: source.tokens[b][..s].to_vec(),
            target_tokens: output_ids[..t]
                .iter()
                .map(|&id| model.tokenizer.token(id))
                .collect(),
            word: rows(&tr.word, t),
            position: rows(&tr.position, t),
            cross_scores: Nested(tr.cross_scores.slice(s![b, .., ..t, ..s]).into_dyn()),
            values: tr
                .values
                .iter()
                .map(|(&name, (v, x))| (name, rows(x, if v.source { s } else { t })))
                .collect(),
        })
    }
}

/// `generate`'s report: a prompt, what the model wrote after it, and every attention of one
/// causal pass over the `N` positions it was fed (see [`crate::engine::Generation`]).
#[derive(serde::Serialize)]
pub struct GenerationReport<'a> {
    pub model: &'a str,
    pub model_type: &'static str,
    /// What the model is, layer by layer (each layer's reach, window, rotation, QK-norm and
    /// norms): the page's `modelInfo.architecture`.
    pub architecture: &'a crate::model::config::Architecture,
    pub backend: &'a str,
    /// Why the CPU ran although the GPU was wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<&'a str>,
    /// The text as the model read it (after the chat template, with `--chat`).
    pub prompt: &'a str,
    pub prompt_ids: &'a [u32],
    /// The new tokens, EOS last when it was reached.
    pub output_ids: &'a [u32],
    /// The new tokens decoded, special tokens skipped.
    pub output_text: String,
    /// `[N]`: every token the model was fed, as the vocabulary holds it.
    pub tokens: Vec<String>,
    /// `[N]`: the same tokens as text ([`crate::model::TextTokenizer::text_of`]: ` arrow`, a
    /// part of a character as its bytes, marked: ` ‹F0 9F›`).
    pub texts: Vec<String>,
    /// `[L][H][N][N]`, H the query heads (the page's copy carries it as a typed array beside).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<Nested<'a, f32>>,
    /// One per output token: the likeliest tokens at the step that wrote it, best first.
    pub steps: Vec<Step>,
    /// Each step's time in ms (the first's is the prompt's pass).
    pub step_ms: &'a [f64],
    /// The heads knocked out while writing, `[layer, head]` (absent when none were).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub head_mask: Vec<[usize; 2]>,
    /// How the 4-bit matrices were multiplied: absent for the exact numerics, `"fast"` for
    /// 8-bit activations ([`Numerics::Fast`]).
    #[serde(skip_serializing_if = "is_exact")]
    pub numerics: Numerics,
}

impl<'a> GenerationReport<'a> {
    pub fn new(
        model: &'a Model,
        backend: &'a str,
        prompt: &'a str,
        g: &'a crate::engine::Generation,
    ) -> Self {
        let tok = &model.tokenizer;
        Self {
            model: model.short_name(),
            model_type: model.config.family.name(),
            architecture: &model.config.architecture,
            backend,
            fallback: None,
            prompt,
            prompt_ids: &g.prompt_ids,
            output_ids: &g.output_ids,
            output_text: tok.decode(&g.output_ids),
            tokens: g.fed().iter().map(|&id| tok.token(id)).collect(),
            texts: g.fed().iter().map(|&id| tok.text_of(id)).collect(),
            attention: Some(Nested(g.attention.view().into_dyn())),
            steps: (0..g.output_ids.len())
                .map(|i| Step {
                    top_k: predictions(&g.next[i], tok),
                })
                .collect(),
            step_ms: &g.step_ms,
            head_mask: vec![],
            numerics: Numerics::Exact,
        }
    }
}

/// An engine's likeliest tokens, named.
pub fn predictions(
    top: &[crate::engine::TokenProb],
    tok: &crate::model::TextTokenizer,
) -> Vec<NextToken> {
    top.iter()
        .map(|t| NextToken {
            id: t.id,
            token: tok.token(t.id),
            text: tok.text_of(t.id),
            p: t.p,
        })
        .collect()
}

/// One step of a decoding: the likeliest next tokens after it, best first.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Step {
    pub top_k: Vec<NextToken>,
}

/// One source's translation ([`crate::engine::Translation`]'s item `b`), cut to its own length:
/// `S` source tokens, `T` steps.
#[derive(serde::Serialize)]
pub struct TranslationItem<'a> {
    pub source: &'a str,
    pub source_ids: Vec<u32>,
    pub source_tokens: Vec<String>,
    /// Each source token's character span in the source (`[0, 0]`: a special token).
    pub source_offsets: Vec<[usize; 2]>,
    /// The teacher-forced target, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<&'a str>,
    /// As HF's `generate` returns them: the decoder start token first, EOS last when reached.
    pub output_ids: &'a [u32],
    pub output_tokens: Vec<String>,
    /// The output decoded, special tokens skipped.
    pub output_text: String,
    /// `[L_enc][H_enc][S][S]`. The three attentions are `None` where they go another way (the
    /// page's: one record a layer, `src/wasm.rs` `Session.translate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoder_attention: Option<Nested<'a, f32>>,
    /// `[L_dec][H_dec][T][T]`: row `t` is the step that wrote `output_ids[t + 1]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoder_attention: Option<Nested<'a, f32>>,
    /// `[L_dec][H_dec][T][S]`: the decoder's rows, the source's columns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_attention: Option<Nested<'a, f32>>,
    /// `[T]`: each step's likeliest next tokens, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<Step>>,
    /// Each attention's value-weighted attention and value sizes, when asked for:
    /// `"value_weighted"` and `"value_norms"`, each `{"encoder", "decoder", "cross"}`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub value_weighted: Option<TranslationValueWeighted>,
}

/// `translate`'s whole report.
#[derive(serde::Serialize)]
pub struct TranslationReport<'a> {
    pub model: &'a str,
    pub model_type: &'static str,
    /// What the model is, layer by layer (each layer's reach, window, rotation, QK-norm and
    /// norms): the page's `modelInfo.architecture`.
    pub architecture: &'a crate::model::config::Architecture,
    pub backend: &'a str,
    /// Why the CPU ran although the GPU was wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<&'a str>,
    pub results: Vec<TranslationItem<'a>>,
    /// The batch as the engine ran it, when asked for ([`PaddedBatch`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub padded: Option<PaddedBatch<'a>>,
}

/// A translation's batch as the engine ran it: every source padded to the longest (`S`), every
/// decoder input to the most steps (`T`), which positions are tokens, and each attention over
/// the whole padded frame, so a reader sees the masks applied: a padded key gets exactly 0.
///
/// A teacher-forced batch's decoder ran under `no-peek & target padding`; a greedy one's under
/// no-peek alone, as HF's `generate` runs it (a finished output is fed the pad token, and its
/// steps after EOS are computed and ignored).
#[derive(serde::Serialize)]
pub struct PaddedBatch<'a> {
    /// `[B][S]`: the encoder's input, the pad token where a source is shorter.
    pub source_tokens: Vec<Vec<String>>,
    /// `[B][S]`: which source positions hold a token (the padding mask, `src != pad`).
    pub source_valid: Vec<Vec<bool>>,
    /// `[B][T]`: what the decoder reads at each position, the pad token after an output's end.
    pub target_tokens: Vec<Vec<String>>,
    /// `[B][T]`: which decoder positions read a token of the output (`tgt != pad`).
    pub target_valid: Vec<Vec<bool>>,
    /// Whether the decoder's self-attention was masked by `target_valid` as well as no-peek.
    pub target_padding_masked: bool,
    /// `[B][L_enc][H_enc][S][S]`
    pub encoder_attention: Nested<'a, f32>,
    /// `[B][L_dec][H_dec][T][T]`
    pub decoder_attention: Nested<'a, f32>,
    /// `[B][L_dec][H_dec][T][S]`
    pub cross_attention: Nested<'a, f32>,
}

impl<'a> PaddedBatch<'a> {
    /// `tr`'s whole batch; `forced`: whether its outputs were teacher-forced.
    pub fn new(model: &Model, tr: &'a crate::engine::Translation, forced: bool) -> Self {
        let tok = &model.tokenizer;
        let pad = tok.pad_id();
        let (b, s) = tr.source.ids.dim();
        let t = tr.decoder_attention.dim().3;
        let source_valid: Vec<Vec<bool>> = (0..b)
            .map(|i| (0..s).map(|j| tr.source.valid[[i, j]]).collect())
            .collect();
        let source_tokens = (0..b)
            .map(|i| {
                (0..s)
                    .map(|j| {
                        tok.token(if source_valid[i][j] {
                            tr.source.ids[[i, j]]
                        } else {
                            pad
                        })
                    })
                    .collect()
            })
            .collect();
        // position j reads output_ids[j] while it is not the output's last token
        let target_valid: Vec<Vec<bool>> = (0..b)
            .map(|i| (0..t).map(|j| j + 1 < tr.output_ids[i].len()).collect())
            .collect();
        let target_tokens = (0..b)
            .map(|i| {
                (0..t)
                    .map(|j| {
                        tok.token(if target_valid[i][j] {
                            tr.output_ids[i][j]
                        } else {
                            pad
                        })
                    })
                    .collect()
            })
            .collect();
        Self {
            source_tokens,
            source_valid,
            target_tokens,
            target_valid,
            target_padding_masked: forced,
            encoder_attention: Nested(tr.encoder_attention.view().into_dyn()),
            decoder_attention: Nested(tr.decoder_attention.view().into_dyn()),
            cross_attention: Nested(tr.cross_attention.view().into_dyn()),
        }
    }
}

/// A decoding's text as HF's `decode(ids, skip_special_tokens=True)` gives it: every special token
/// left out, the decoder's start, end and pad tokens too where the tokenizer does not mark them
/// special (a checkpoint's `tokenizer.json` may not, while its config names them).
fn output_text(model: &Model, ids: &[u32]) -> String {
    let dec = model.config.decoder.as_ref();
    let special = |id: u32| {
        id == model.tokenizer.pad_id()
            || dec.is_some_and(|d| {
                id == d.start_token_id || id == d.eos_token_id || Some(id) == d.forced_eos_token_id
            })
    };
    let kept: Vec<u32> = ids.iter().copied().filter(|&id| !special(id)).collect();
    model.tokenizer.decode(&kept)
}

impl<'a> TranslationReport<'a> {
    /// `tr`'s items, each cut to its own lengths; `steps` with the `top_k` likeliest tokens of
    /// each step when asked for.
    pub fn new(
        model: &'a Model,
        backend: &'a str,
        sources: &'a [String],
        targets: Option<&'a [String]>,
        tr: &'a crate::engine::Translation,
        top_k: Option<usize>,
    ) -> Self {
        let tok = &model.tokenizer;
        let results = sources
            .iter()
            .enumerate()
            .map(|(b, source)| {
                let s = tr.source.length(b);
                let t = tr.steps(b);
                // bytes → characters, as Python's tokenizers counts them
                let chars = |byte: usize| source.get(..byte).map_or(0, |p| p.chars().count());
                TranslationItem {
                    source,
                    source_ids: tr.source.ids.row(b).iter().take(s).copied().collect(),
                    source_tokens: tr.source.tokens[b][..s].to_vec(),
                    source_offsets: tr.source.offsets[b][..s]
                        .iter()
                        .map(|&(a, z)| [chars(a), chars(z)])
                        .collect(),
                    target: targets.map(|t| t[b].as_str()),
                    output_ids: &tr.output_ids[b],
                    output_tokens: tr.output_ids[b].iter().map(|&id| tok.token(id)).collect(),
                    output_text: output_text(model, &tr.output_ids[b]),
                    encoder_attention: Some(Nested(
                        tr.encoder_attention
                            .slice(s![b, .., .., ..s, ..s])
                            .into_dyn(),
                    )),
                    decoder_attention: Some(Nested(
                        tr.decoder_attention
                            .slice(s![b, .., .., ..t, ..t])
                            .into_dyn(),
                    )),
                    cross_attention: Some(Nested(
                        tr.cross_attention.slice(s![b, .., .., ..t, ..s]).into_dyn(),
                    )),
                    steps: top_k.map(|k| {
                        next_tokens(tr.step_logits.slice(s![b, ..t, ..]), k, tok)
                            .into_iter()
                            .map(|top_k| Step { top_k })
                            .collect()
                    }),
                    value_weighted: None,
                }
            })
            .collect();
        Self {
            model: model.short_name(),
            model_type: model.config.family.name(),
            architecture: &model.config.architecture,
            backend,
            fallback: None,
            results,
            padded: None,
        }
    }
}
