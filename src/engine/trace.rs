//! What a forward pass returns (everything the visualiser draws), and what to change or keep
//! while running it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::mem::MaybeUninit;
use std::sync::Arc;

use ndarray::{
    s, Array2, Array3, Array4, Array5, ArrayD, ArrayView2, ArrayView3, ArrayViewMut2, Axis,
    CowArray, Ix2,
};

use super::ops::{values, AttentionKind, Heads, Ids, Kept, Reach, Stack};
use crate::analysis::thumbnail::HeadThumbnails;
use crate::engine::cpu::Scores;
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::config::Layer;

/// Heads knocked out of a forward pass: their context `softmax(QKᵀ/√d_k)·V` is zero in the
/// concatenation before the output projection (as HF's former `head_mask` did), so every later
/// layer feels it; their own attention is still computed and reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HeadMask {
    off: BTreeSet<(usize, usize)>,
}

impl HeadMask {
    /// No head knocked out.
    pub fn none() -> Self {
        Self::default()
    }

    /// `(layer, head)` pairs, 0-based.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (usize, usize)>) -> Self {
        Self {
            off: pairs.into_iter().collect(),
        }
    }

    /// Parses `L:H[,L:H…]` (0-based, as the page and the JSON number layers and heads); an
    /// empty string is no head.
    pub fn parse(spec: &str) -> Result<Self> {
        let mut off = BTreeSet::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || {
                Error::Input(format!(
                    "head {part:?}: expected LAYER:HEAD, e.g. 0:3 (0-based)"
                ))
            };
            let (l, h) = part.split_once(':').ok_or_else(bad)?;
            off.insert((
                l.trim().parse().map_err(|_| bad())?,
                h.trim().parse().map_err(|_| bad())?,
            ));
        }
        Ok(Self { off })
    }

    pub fn is_empty(&self) -> bool {
        self.off.is_empty()
    }

    /// Whether head `head` of layer `layer` is knocked out.
    pub fn is_off(&self, layer: usize, head: usize) -> bool {
        self.off.contains(&(layer, head))
    }

    /// The knocked-out `(layer, head)` pairs, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.off.iter().copied()
    }

    /// One layer's heads: `true` where knocked out.
    pub fn layer(&self, layer: usize, heads: usize) -> Vec<bool> {
        (0..heads).map(|h| self.is_off(layer, h)).collect()
    }

    /// Refuses heads the model does not have.
    pub fn check(&self, layers: usize, heads: usize) -> Result<()> {
        match self.off.iter().find(|&&(l, h)| l >= layers || h >= heads) {
            Some((l, h)) => Err(Error::Input(format!(
                "head {l}:{h} does not exist: the model has {layers} layers of {heads} heads (0-based)"
            ))),
            None => Ok(()),
        }
    }
}

impl std::fmt::Display for HeadMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.off.iter().map(|(l, h)| format!("{l}:{h}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// What the attention scores are divided by before softmax.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ScoreScale {
    /// `QKᵀ/√d_k`: the transformer's scaled dot product.
    #[default]
    SqrtDk,
    /// `QKᵀ` unscaled: the ablation that shows softmax saturate into near one-hot rows.
    None,
}

impl ScoreScale {
    /// The factor the dot products are multiplied by for keys of width `d_k`.
    pub fn factor(self, d_k: usize) -> f32 {
        match self {
            Self::SqrtDk => 1.0 / (d_k as f32).sqrt(),
            Self::None => 1.0,
        }
    }
}

/// What one attention's scores are multiplied by: the pass's choice ([`ScoreScale`]) with the
/// layer's own factor where its family gives one (Gemma 3's `query_pre_attn_scalar^-½`), else
/// `1/√d_k`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreFactor {
    pub scale: ScoreScale,
    /// The layer's own factor in place of `1/√d_k`.
    pub own: Option<f32>,
}

impl ScoreFactor {
    /// The factor for keys of width `d_k`.
    pub fn of(self, d_k: usize) -> f32 {
        match self.scale {
            ScoreScale::SqrtDk => self.own.unwrap_or_else(|| ScoreScale::SqrtDk.factor(d_k)),
            ScoreScale::None => 1.0,
        }
    }
}

impl From<ScoreScale> for ScoreFactor {
    fn from(scale: ScoreScale) -> Self {
        Self { scale, own: None }
    }
}

/// What to change in the forward pass and what to keep beyond the attention probabilities and
/// final hidden states.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TraceOptions {
    /// Keep the scores (`QKᵀ` times the [`ScoreScale`] factor) of every layer and head (before
    /// the mask).
    pub scores: bool,
    /// Heads knocked out (see [`HeadMask`]).
    pub head_mask: HeadMask,
    /// What every layer divides its scores by.
    pub scale: ScoreScale,
    /// Keep every layer's output and the embeddings ([`Trace::hidden_states`]).
    pub hidden_states: bool,
    /// Keep the intermediate values of this layer (0-based; [`LayerTrace`]).
    pub layer_trace: Option<usize>,
    /// Keep the embeddings' steps in the layer trace whatever its layer (they are always kept
    /// when it traces layer 0, the layer they feed).
    pub embeddings: bool,
    /// Keep the LM head's logits over the vocabulary ([`Trace::lm_logits`]), where the model
    /// has one.
    pub lm_logits: bool,
    /// Keep the LM head's logits at each item's last position only ([`Kept::NextLogits`]),
    /// what a generation's passes need.
    pub next_logits: bool,
    /// An encoder–decoder's pass: keep this decoder layer's values and the decoder's
    /// embeddings ([`crate::engine::DecoderTrace`]).
    pub decoder_trace: Option<usize>,
    /// The ablation of rotary positions: a model that turns its queries and keys by their
    /// positions ([`crate::engine::Ops::rotate`]) leaves them as projected, so its scores no
    /// longer depend on where the tokens are (only the causal mask still does).
    pub no_rope: bool,
    /// The ablation of QK-norm: a layer that norms its query and key heads
    /// ([`crate::engine::Ops::norm_heads`]) leaves them as projected, so its scores are as large
    /// as its raw queries and keys make them.
    pub no_qk_norm: bool,
    /// What the pass keeps of its attention (see [`AttentionKept`]).
    pub attention: AttentionKept,
    /// Keep every layer's self-attention values ([`Trace::values`]): what value-weighted
    /// attention reads (`crate::analysis::value_weighted`).
    pub values: bool,
    /// Keep what every layer writes to the residual stream ([`Trace::writes`]): what the
    /// direct logit attribution reads (`crate::analysis::logit_attribution`).
    pub writes: bool,
    /// Where the CPU engine reports each self-attention layer it begins, and where it reads
    /// whether to stop ([`super::progress`]); nothing it computes depends on it.
    pub progress: super::progress::Progress,
    /// How the CPU engine multiplies by a model's 4-bit matrices ([`Numerics`]).
    pub numerics: Numerics,
}

/// How the CPU engine multiplies activations by a model's quantized matrices.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Numerics {
    /// In f32, each weight dequantized exactly: what HF computes on the same file (attention
    /// within 1e-4 of it).
    #[default]
    Exact,
    /// The activations rounded to 8 bits (32 values to a scale) and multiplied by the 4-bit
    /// matrices (`Q4_0`, `Q4_1`) in integers, as llama.cpp does (`crate::model::quant::
    /// FastMatrix`): quicker in WebAssembly, and no longer equal to HF (the SmolLM2 golden test
    /// prints by how much). Other matrices, the attention itself and the GPU engine stay exact.
    Fast,
}

impl std::str::FromStr for Numerics {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "exact" => Ok(Self::Exact),
            "fast" => Ok(Self::Fast),
            _ => Err(format!("unknown numerics {s:?} (expected exact or fast)")),
        }
    }
}

/// What a pass keeps of its self-attention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKept {
    /// Every head's probabilities, and their scores with [`TraceOptions::scores`]
    /// ([`Trace::attention`], `B·L·H·T²` values).
    #[default]
    Probabilities,
    /// Each layer's queries and keys as its attention read them ([`QueriesKeys`], `B·L·T·(H +
    /// H_kv)·d` values), from which any head's probabilities and scores are computed again: a
    /// long text, whose `L·H·T²` probabilities would not fit in memory (SmolLM2-135M at 1,024
    /// tokens: 283M of them, 1.1 GB, against 24M queries and keys).
    QueriesKeys,
}

impl TraceOptions {
    /// Whether an attention of `kind` keeps its queries and keys rather than its probabilities
    /// ([`AttentionKept::QueriesKeys`]: the self-attention of the pass's one stack).
    pub(crate) fn keeps_queries_keys(&self, kind: AttentionKind) -> bool {
        self.attention == AttentionKept::QueriesKeys && kind == AttentionKind::SelfAttention
    }

    /// Keep the scores, change nothing.
    pub fn with_scores() -> Self {
        Self {
            scores: true,
            ..Self::default()
        }
    }
}

/// The embeddings' steps over a padded batch: `normed = LayerNorm(word + position + token_type)`
/// (GPT-2: `word + position`, normed by each layer's `ln_1` rather than here).
///
/// # Shapes
/// * every field `(B, T, D)`; `position` is row `t` of the position table at token `t`
#[derive(Debug, Clone)]
pub struct EmbeddingTrace {
    pub word: Array3<f32>,
    /// `None` in a family whose positions are no embedding (rotary: Llama's, applied to Q and K
    /// in each layer).
    pub position: Option<Array3<f32>>,
    /// `None` in a family without token types.
    pub token_type: Option<Array3<f32>>,
    pub sum: Array3<f32>,
    /// The embeddings' output: what enters layer 0.
    pub normed: Array3<f32>,
}

/// One layer's values over a padded batch, by the names its family gives them
/// ([`crate::engine::ops::Value`]): `input` and `output` (the hidden states entering and
/// leaving it), and what its forward pass kept, each family its own.
///
/// * every family's ([`crate::engine::ops::values`]): `q`, `k`, `v` (the projections, before
///   any rotation or split into heads), `context` (the heads' outputs concatenated before `W_o`;
///   a knocked-out head's slice is zero), `attention_output` (post-LN: `LN₁(input + W_o·context)`;
///   pre-LN: `input + W_o·context`, the residual stream), `pre_activation` (the feed-forward's
///   first projection before its activation; a gated one's gate) and `intermediate` (what its
///   last projection reads: `act(pre_activation)`, or `act(gate) ⊙ up`)
/// * the Llama family's also: `attn_norm` and `ffn_norm` (the norms' outputs entering the
///   attention and the feed-forward), `q_rope` and `k_rope` (Q and K after the rotation, split
///   into their heads), `up` (the gated feed-forward's up projection)
/// * `embeddings`: for layer 0 (or with [`TraceOptions::embeddings`]), see [`EmbeddingTrace`]
///
/// # Shapes
/// * a value of rows: `(B, T, c)` (`input`, `q`, `attention_output`, `output`: `(B, T, D)`;
///   `context`: `(B, T, H·d_v)`; `pre_activation`, `intermediate`: `(B, T, intermediate_size)`)
/// * a value of heads: `(B, heads, T, d)` (`q_rope`: `(B, H, T, d)`; `k_rope`: `(B, H_kv, T, d)`)
#[derive(Debug, Clone)]
pub struct LayerTrace {
    /// 0-based.
    pub layer: usize,
    pub embeddings: Option<EmbeddingTrace>,
    /// Every value, by name.
    pub values: BTreeMap<&'static str, ArrayD<f32>>,
}

impl LayerTrace {
    /// The value `name`, or an error naming it.
    pub fn get(&self, name: &str) -> Result<&ArrayD<f32>> {
        self.values.get(name).ok_or_else(|| {
            Error::Engine(format!(
                "layer {}'s trace has no {name:?} (it has {})",
                self.layer,
                self.names().join(", ")
            ))
        })
    }

    /// A value of rows, `(B, T, c)`.
    pub fn rows(&self, name: &str) -> Result<ArrayView3<'_, f32>> {
        self.get(name)?
            .view()
            .into_dimensionality()
            .map_err(|e| Error::Engine(format!("layer {}'s {name:?}: {e}", self.layer)))
    }

    /// The names of its values, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.values.keys().copied().collect()
    }
}

/// Each layer's self-attention queries and keys, as the pass's attention read them (turned by
/// their positions, in a family with rotary ones), kept in place of the probabilities
/// ([`AttentionKept::QueriesKeys`]): [`QueriesKeys::head`] computes any head's probabilities
/// and scores again with the CPU engine's attention, the same values a pass keeping them
/// returns.
///
/// # Shapes
/// * `queries[l]`: `(B·T, H·d)`, item after item; `keys[l]`: `(B·T, H_kv·d)`
#[derive(Debug, Clone)]
pub struct QueriesKeys {
    pub heads: Heads,
    /// Each layer (a sliding layer's window hides more than the mask; a layer may scale its
    /// scores its own way).
    pub layers: Vec<Layer>,
    pub scale: ScoreScale,
    pub queries: Vec<Arc<Array2<f32>>>,
    pub keys: Vec<Arc<Array2<f32>>>,
    /// Each head's thumbnails, `(B, L, H)` flat, where the pass folded them as it went (the CPU
    /// engine's); otherwise [`QueriesKeys::heads`] computes each head again to fold it.
    pub thumbnails: Option<Vec<HeadThumbnails>>,
}

/// One head's attention over one text: its probabilities, and its scores when asked for.
///
/// # Shapes
/// * each `(T, T)`, `[query][key]`
#[derive(Debug, Clone)]
pub struct HeadAttention {
    pub probs: Array2<f32>,
    pub scores: Option<Array2<f32>>,
}

impl QueriesKeys {
    /// Head `head` of layer `layer` over item `b` of the batch, under `mask` (the pass's,
    /// `(B, T, T)`), with its scores when `scores` says so: its rows in blocks on the pool's
    /// threads (each row's values are its own, whatever block it is in).
    pub fn head(
        &self,
        b: usize,
        layer: usize,
        head: usize,
        mask: &Mask,
        scores: bool,
    ) -> Result<HeadAttention> {
        let of = self.item_layer(b, layer, head..head + 1, mask)?;
        let t = of.queries.nrows();
        let mut probs = Array2::uninit((t, t));
        let mut kept = scores.then(|| Array2::uninit((t, t)));
        let keys = crate::engine::cpu::head_keys(of.keys, self.heads, head)?;
        self.rows_into(
            &of,
            head,
            &keys,
            0..t,
            probs.view_mut(),
            kept.as_mut().map(|s| s.view_mut()).into(),
        )?;
        // SAFETY: `rows_into` returned Ok, writing every value of both
        unsafe {
            Ok(HeadAttention {
                probs: probs.assume_init(),
                scores: kept.map(|s| s.assume_init()),
            })
        }
    }

    /// [`QueriesKeys::head`]'s probabilities `rows` query rows at a time (at least 4; the last
    /// part up to 3 more or fewer), each part handed to `part` (its first row, its
    /// probabilities and the layer's mask of its rows, each `(rows, T)`) on the calling thread
    /// while the pool computes the next part into a second buffer: a long text's head is never
    /// whole here (the page copies each part out, the threads meanwhile at the next). Its
    /// scores are not kept: returns their largest |value| over every cell, the masked ones too
    /// (the steps view's colour scale; [`QueriesKeys::scores_in`] gives a window of them).
    pub fn head_in_parts(
        &self,
        b: usize,
        layer: usize,
        head: usize,
        mask: &Mask,
        rows: usize,
        mut part: impl FnMut(usize, ArrayView2<f32>, ArrayView2<bool>) -> Result<()>,
    ) -> Result<f32> {
        let of = self.item_layer(b, layer, head..head + 1, mask)?;
        let t = of.queries.nrows();
        let parts = row_parts(t, rows);
        let most = parts.iter().map(|r| r.len()).max().unwrap_or(0);
        // two buffers of a part's rows: one handed to `part`, the next part computed into the other
        let keys = crate::engine::cpu::head_keys(of.keys, self.heads, head)?;
        let compute = |range: &std::ops::Range<usize>, into: &mut Array2<MaybeUninit<f32>>| {
            let mut largest = 0f32;
            let probs = into.slice_mut(s![..range.len(), ..]);
            let scores = Scores::Largest(&mut largest);
            self.rows_into(&of, head, &keys, range.clone(), probs, scores)?;
            Ok(largest)
        };
        let compute = &compute;
        let next_rows = if parts.len() > 1 { most } else { 0 };
        let (mut here, mut next) = (Array2::uninit((most, t)), Array2::uninit((next_rows, t)));
        let Some(first_part) = parts.first() else {
            return Ok(0.0);
        };
        let mut largest = compute(first_part, &mut here)?;
        for (i, range) in parts.iter().enumerate() {
            let (first, n) = (range.start, range.len());
            let mut computed = Ok(0.0);
            let handed = rayon::in_place_scope(|scope| {
                if let Some(after) = parts.get(i + 1) {
                    let (next, computed) = (&mut next, &mut computed);
                    scope.spawn(move |_| *computed = compute(after, next));
                }
                // SAFETY: `compute` returned Ok, writing every value of the part's rows
                let probs = unsafe { here.slice(s![..n, ..]).assume_init() };
                part(first, probs, of.mask.slice(s![first..first + n, ..]))
            });
            handed?;
            largest = largest.max(computed?);
            std::mem::swap(&mut here, &mut next);
        }
        Ok(largest)
    }

    /// Head `head`'s scores (`QKᵀ·factor` before the mask, as [`QueriesKeys::head`] gives
    /// them, the same bits) of the query rows `rows` against the keys `keys`: a window of a
    /// head whose scores are not kept (the steps view's, a cell the page reads). Its rows are
    /// computed whole, at least 4 of them (fewer would take attention's few-row path, whose
    /// sums go in another order), and the window's keys taken.
    ///
    /// # Shapes
    /// * returns `(rows.len(), keys.len())`
    pub fn scores_in(
        &self,
        b: usize,
        layer: usize,
        head: usize,
        mask: &Mask,
        rows: std::ops::Range<usize>,
        keys: std::ops::Range<usize>,
    ) -> Result<Array2<f32>> {
        let of = self.item_layer(b, layer, head..head + 1, mask)?;
        let t = of.queries.nrows();
        if rows.start > rows.end || rows.end > t || keys.start > keys.end || keys.end > t {
            return Err(Error::Shape {
                what: format!(
                    "a window of head {head}'s scores, query rows {rows:?} and keys {keys:?} of \
                     {t} tokens"
                ),
                expected: vec![t, t],
                found: vec![rows.end, keys.end],
            });
        }
        // at least 4 rows, within the text where it has them
        let end = rows.end.max((rows.start + 4).min(t));
        let computed = end.saturating_sub(4).min(rows.start)..end;
        let mut probs = Array2::uninit((computed.len(), t));
        let mut scores = Array2::uninit((computed.len(), t));
        let packed = crate::engine::cpu::head_keys(of.keys, self.heads, head)?;
        let kept = Scores::Kept(scores.view_mut());
        self.rows_into(&of, head, &packed, computed.clone(), probs.view_mut(), kept)?;
        // SAFETY: `rows_into` returned Ok, writing every value
        let scores = unsafe { scores.assume_init() };
        let from = rows.start - computed.start;
        Ok(scores.slice(s![from..from + rows.len(), keys]).to_owned())
    }

    /// Rows `rows` of head `head` of `of` into `probs` (and their scores as `scores` says:
    /// [`Scores`]), each `(rows, T)` and possibly uninitialised, in blocks on the pool's
    /// threads, each block written into its rows (no block copied after): when this returns
    /// `Ok`, every value of both has been written. `keys`: the head's `Kᵀ` packed
    /// (`head_keys`), read by every block.
    fn rows_into(
        &self,
        of: &ItemLayer,
        head: usize,
        keys: &crate::linalg::gemm::PackedB,
        rows: std::ops::Range<usize>,
        probs: ArrayViewMut2<MaybeUninit<f32>>,
        scores: Scores,
    ) -> Result<()> {
        use rayon::prelude::*;
        let (q, k, mask, factor) = (of.queries, of.keys, of.mask.view(), of.factor);
        let parts = row_blocks(rows.len(), 4 * rayon::current_num_threads().max(1));
        // where the largest |score| is asked for: each block's, then the largest of them
        let (mut rest_scores, largest) = match scores {
            Scores::Kept(kept) => (Some(kept), None),
            Scores::Largest(largest) => (None, Some(largest)),
            Scores::Dropped => (None, None),
        };
        let mut each = vec![*largest.as_deref().unwrap_or(&0.0); parts.len()];
        let mut blocks = Vec::new();
        let mut rest = probs;
        for (block, fold) in parts.into_iter().zip(each.iter_mut()) {
            let (here, after) = rest.split_at(Axis(0), block.len());
            rest = after;
            let scores = match (rest_scores.take(), largest.is_some()) {
                (Some(kept), _) => {
                    let (here, after) = kept.split_at(Axis(0), block.len());
                    rest_scores = Some(after);
                    Scores::Kept(here)
                }
                (None, true) => Scores::Largest(fold),
                (None, false) => Scores::Dropped,
            };
            let at = rows.start + block.start..rows.start + block.end;
            blocks.push((at, here, scores));
        }
        crate::engine::cpu::forward::on_the_pool(|| {
            blocks
                .into_par_iter()
                .map(|(at, probs, scores)| {
                    crate::engine::cpu::head_attention_into(
                        q.slice(s![at.clone(), ..]),
                        k,
                        self.heads,
                        head,
                        mask.slice(s![at, ..]),
                        factor,
                        probs,
                        scores,
                        Some(keys),
                    )
                })
                .collect::<Result<()>>()
        })?;
        if let Some(largest) = largest {
            *largest = each.into_iter().fold(*largest, f32::max);
        }
        Ok(())
    }

    /// The heads from `first` on that [`QueriesKeys::heads`] computes together: one a thread of
    /// the pool (fewer at the layer's end).
    pub fn heads_together(&self, first: usize) -> std::ops::Range<usize> {
        let end = (first + rayon::current_num_threads().max(1)).min(self.heads.query);
        first.min(end)..end
    }

    /// Heads `heads` of layer `layer` over item `b` ([`QueriesKeys::head`] each), in parallel
    /// where there are threads: each head's `QKᵀ` and softmax on one of them.
    pub fn heads(
        &self,
        b: usize,
        layer: usize,
        heads: std::ops::Range<usize>,
        mask: &Mask,
        scores: bool,
    ) -> Result<Vec<HeadAttention>> {
        use rayon::prelude::*;
        let of = self.item_layer(b, layer, heads.clone(), mask)?;
        let (q, k, mask, factor) = (of.queries, of.keys, of.mask.view(), of.factor);
        crate::engine::cpu::forward::on_the_pool(|| {
            heads
                .into_par_iter()
                .map(|head| {
                    let (probs, scores) = crate::engine::cpu::head_attention(
                        q, k, self.heads, head, mask, factor, scores,
                    )?;
                    Ok(HeadAttention { probs, scores })
                })
                .collect()
        })
    }

    /// What heads `heads` of layer `layer` over item `b` are computed from; an error naming the
    /// layer, item or head the pass did not run.
    fn item_layer<'a>(
        &'a self,
        b: usize,
        layer: usize,
        heads: std::ops::Range<usize>,
        mask: &'a Mask,
    ) -> Result<ItemLayer<'a>> {
        let (batch, t, _) = mask.dim();
        let (q, k) = match (self.queries.get(layer), self.keys.get(layer)) {
            (Some(q), Some(k)) => (q, k),
            _ => {
                return Err(Error::Input(format!(
                    "layer {layer} does not exist: the pass kept {} layers (0-based)",
                    self.queries.len()
                )))
            }
        };
        if b >= batch || heads.end > self.heads.query || heads.is_empty() {
            return Err(Error::Input(format!(
                "item {b}, head {}: the pass ran {batch} item(s) of {} heads (0-based)",
                heads.end.saturating_sub(1).max(heads.start),
                self.heads.query
            )));
        }
        let rows = s![b * t..(b + 1) * t, ..];
        let arch = self.layers.get(layer).copied().unwrap_or_else(Layer::plain);
        let item = mask.item(b);
        let mask = match arch.reach {
            // a sliding layer's window cut from the item's mask (as `Mask::within_window`): a
            // query reaches the keys less than `w` positions before it
            Reach::Sliding(w) => CowArray::from(Array2::from_shape_fn(item.dim(), |(i, j)| {
                item[[i, j]] && i < j + w
            })),
            _ => CowArray::from(item),
        };
        let factor = ScoreFactor {
            scale: self.scale,
            own: arch.score_scale,
        };
        Ok(ItemLayer {
            queries: q.slice(rows),
            keys: k.slice(rows),
            mask,
            factor,
        })
    }

    /// The values held, `Σ_l` the queries' and keys'.
    pub fn len(&self) -> usize {
        self.queries.iter().chain(&self.keys).map(|x| x.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One item's layer of [`QueriesKeys`], as its heads are computed from it.
///
/// # Shapes
/// * `queries`: `(T, H·d)`; `keys`: `(T, H_kv·d)`; `mask`: `(T, T)`, the pass's (a view), or
///   a sliding layer's window cut from it
struct ItemLayer<'a> {
    queries: ArrayView2<'a, f32>,
    keys: ArrayView2<'a, f32>,
    mask: CowArray<'a, bool, Ix2>,
    /// The layer's score factor.
    factor: ScoreFactor,
}

/// `t` rows in about `blocks` blocks of consecutive rows, none shorter than 4 (the attention's
/// row count where it takes the matrix product's path), at least one block.
fn row_blocks(t: usize, blocks: usize) -> Vec<std::ops::Range<usize>> {
    row_parts(t, t.div_ceil(blocks.max(1)))
}

/// `0..t` in parts of `size` rows, at least 4 (fewer take attention's few-row path, whose sums
/// go in another order: `attend_rows`), a short last part joining the one before it.
fn row_parts(t: usize, size: usize) -> Vec<std::ops::Range<usize>> {
    super::ops::row_blocks(t, size, 4)
}

/// A traced forward pass over a padded batch.
///
/// # Shapes
/// * `attention`: `(B, L, H, T, T)`, `[batch][layer][head][query][key]`; `(B, L, H, 0, 0)`
///   when the pass kept each layer's queries and keys instead (`queries_keys`)
/// * `scores`: `(B, L, H, T, T)` when requested, before the mask (scaled as [`TraceOptions::scale`] says)
/// * `hidden`: `(B, T, D)`, the model's output (HF's `last_hidden_state`: GPT-2's after `ln_f`)
/// * `hidden_states`: `(B, L+1, T, D)` when requested: the embeddings' output, then every
///   layer's (HF's `output_hidden_states`)
/// * `layer_trace`: one layer's intermediate values when requested, see [`LayerTrace`]
/// * `logits`: `(B, num_labels)` when the checkpoint has a [CLS] classification head
/// * `lm_logits`: `(B, T, V)` when asked for and the model has an LM head: at each position,
///   the logits of the next token; `next_logits`: `(B, V)`, at each item's last position
/// * `mask`: `(B, T, T)`, the mask that was applied
#[derive(Debug, Clone)]
pub struct Trace {
    pub attention: Array5<f32>,
    pub scores: Option<Array5<f32>>,
    pub hidden: Array3<f32>,
    pub hidden_states: Option<Array4<f32>>,
    pub layer_trace: Option<LayerTrace>,
    pub logits: Option<Array2<f32>>,
    pub lm_logits: Option<Array3<f32>>,
    /// `(B, V)`: the LM head's logits at each item's last position, with
    /// [`TraceOptions::next_logits`].
    pub next_logits: Option<Array2<f32>>,
    pub mask: Mask,
    /// With [`AttentionKept::QueriesKeys`]: what any head's attention is computed from.
    pub queries_keys: Option<QueriesKeys>,
    /// With [`TraceOptions::values`]: each layer's self-attention values as its attention
    /// reads them, bias included, `L × (B, T, H_kv·d)`.
    pub values: Option<Vec<Array3<f32>>>,
    /// With [`TraceOptions::writes`]: what every layer writes to the residual stream.
    pub writes: Option<Writes>,
}

/// The residual stream of a pre-norm stack, layer by layer: what the direct logit attribution
/// splits a logit by (`crate::analysis::logit_attribution`).
///
/// # Shapes
/// * `hidden`: `L + 1 × (B, T, D)`: what enters each layer, then the last layer's output
///   before the final norm
/// * `context`: `L × (B, T, H·d)`: the heads' contexts, side by side, before `W_O`
/// * `after_attention`: `L × (B, T, D)`: the residual after each layer's attention
#[derive(Debug, Clone)]
pub struct Writes {
    pub hidden: Vec<Array3<f32>>,
    pub context: Vec<Array3<f32>>,
    pub after_attention: Vec<Array3<f32>>,
}

impl Trace {
    /// The scores of one head after `masked_fill(mask == 0, -inf)`: what softmax sees.
    ///
    /// # Shapes
    /// * `(T, T)`; `None` when scores were not kept.
    pub fn masked_scores(&self, b: usize, layer: usize, head: usize) -> Option<Array2<f32>> {
        let scores = self.scores.as_ref()?;
        let mut out = scores.slice(s![b, layer, head, .., ..]).to_owned();
        out.zip_mut_with(&self.mask.item(b), |v, &m| {
            if !m {
                *v = f32::NEG_INFINITY
            }
        });
        Some(out)
    }
}

/// The ids one pass reads, one per position: what a family makes of an [`Encoded`] batch
/// (BERT: positions `0..T`; RoBERTa: positions after its padding index).
///
/// # Shapes
/// * each `(B, T)`
///
/// [`Encoded`]: crate::model::Encoded
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInputs {
    pub tokens: Array2<u32>,
    pub token_types: Array2<u32>,
    pub positions: Array2<u32>,
    /// A translation model's decoder inputs and their positions, `(B, T)` each (a step of a
    /// decoding: `(B, 1)`).
    pub target: Option<TargetInputs>,
}

/// The decoder's side of an encoder–decoder pass (see [`ModelInputs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TargetInputs {
    pub tokens: Array2<u32>,
    pub positions: Array2<u32>,
}

impl ModelInputs {
    /// The ids of `which`, `(B, n)`, if the pass has them.
    pub fn ids(&self, which: Ids) -> Option<&Array2<u32>> {
        match which {
            Ids::Tokens => Some(&self.tokens),
            Ids::TokenTypes => Some(&self.token_types),
            Ids::Positions => Some(&self.positions),
            Ids::TargetTokens => self.target.as_ref().map(|t| &t.tokens),
            Ids::TargetPositions => self.target.as_ref().map(|t| &t.positions),
        }
    }
}

/// The attention of every layer of one kind of one stack, as a pass computed it: its records
/// `(B, H, n_q, n_k)` stacked by layer.
///
/// # Shapes
/// * `probs`: `(B, L, H, n_q, n_k)`; `scores`: the same, when kept
/// * `thumbnails`: `(B, L, H)` flat, each head's, where the pass folded them as it computed
///   probabilities it did not keep (the CPU engine's, keeping the queries and keys)
#[derive(Debug, Clone)]
pub struct AttentionGroup {
    pub stack: Stack,
    pub kind: AttentionKind,
    pub probs: Array5<f32>,
    pub scores: Option<Array5<f32>>,
    pub thumbnails: Option<Vec<HeadThumbnails>>,
}

impl AttentionGroup {
    /// The group of `stack` and `kind`, taken out of a pass's `groups`, or an error saying the
    /// pass computed none.
    pub fn take(groups: &mut Vec<Self>, stack: Stack, kind: AttentionKind) -> Result<Self> {
        let at = groups
            .iter()
            .position(|g| (g.stack, g.kind) == (stack, kind))
            .ok_or_else(|| {
                Error::Engine(format!("the pass computed no {stack:?} {kind:?} attention"))
            })?;
        Ok(groups.swap_remove(at))
    }
}

impl TraceOptions {
    /// Whether a pass over `layers` layers keeps `what` for the trace: the model's output
    /// always; every layer's with [`TraceOptions::hidden_states`]; the traced layer's values,
    /// input and output with [`TraceOptions::layer_trace`], and the embeddings' steps with it
    /// when it traces layer 0 or [`TraceOptions::embeddings`] says so.
    pub fn wants(&self, what: Kept, layers: usize) -> bool {
        let traced = |l: usize| self.layer_trace == Some(l);
        let embeddings = self.layer_trace.is_some_and(|l| l == 0 || self.embeddings);
        match what {
            Kept::EmbeddingWord
            | Kept::EmbeddingPosition
            | Kept::EmbeddingTokenType
            | Kept::EmbeddingSum => embeddings,
            Kept::Hidden(l) => {
                self.writes
                    || (self.hidden_states && l < layers)
                    || traced(l)
                    || (l > 0 && traced(l - 1))
                    || (l == 0 && embeddings)
            }
            Kept::Output => true,
            Kept::LmLogits => self.lm_logits,
            Kept::NextLogits => self.next_logits,
            Kept::Layer(l, v) => {
                traced(l)
                    || (self.values && v == values::V)
                    || (self.writes && (v == values::CONTEXT || v == values::ATTENTION_OUTPUT))
            }
            Kept::Queries(_) | Kept::Keys(_) => self.attention == AttentionKept::QueriesKeys,
            Kept::DecoderWord | Kept::DecoderPosition => self.decoder_trace.is_some(),
            Kept::Decoder(l, v) => {
                self.decoder_trace == Some(l)
                    || (self.values && (v == values::V || v == values::CROSS_V))
            }
        }
    }
}

/// What a pass kept, by name, each `(B·T, c)` (see [`Kept`]): shared with what else holds it,
/// not copied (a long text's queries and keys are the cache's, which the next pass over the
/// same beginning appends to).
pub(crate) type KeptValues = HashMap<Kept, Arc<Array2<f32>>>;

impl Trace {
    /// A trace from what a pass kept by name, as [`TraceOptions`] asked: `kept` holds every
    /// value [`TraceOptions::wants`].
    ///
    /// # Shapes
    /// * `kept`: each `(B·T, c)`; `attention`: the model's own stack's self-attention, see
    ///   [`AttentionGroup`]
    pub(crate) fn assemble(
        attention: AttentionGroup,
        mut kept: KeptValues,
        opts: &TraceOptions,
        arch: &[Layer],
        mask: &Mask,
    ) -> Result<Self> {
        let layers = arch.len();
        let (b, _, heads, _, _) = attention.probs.dim();
        let t = mask.dim().1;
        // each layer's writes and values, before the layer trace takes its own out
        let writes = opts
            .writes
            .then(|| -> Result<Writes> {
                let all = |of: &dyn Fn(usize) -> Kept, n: usize| {
                    (0..n)
                        .map(|l| kept_copy(&kept, of(l), b, t))
                        .collect::<Result<Vec<_>>>()
                };
                Ok(Writes {
                    hidden: all(&Kept::Hidden, layers + 1)?,
                    context: all(&|l| Kept::Layer(l, values::CONTEXT), layers)?,
                    after_attention: all(&|l| Kept::Layer(l, values::ATTENTION_OUTPUT), layers)?,
                })
            })
            .transpose()?;
        let value_vectors = opts
            .values
            .then(|| {
                (0..layers)
                    .map(|l| kept_copy(&kept, Kept::Layer(l, values::V), b, t))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        let layer_trace = match opts.layer_trace {
            Some(layer) => {
                let embeddings = if opts.wants(Kept::EmbeddingWord, layers) {
                    Some(EmbeddingTrace {
                        word: take(&mut kept, Kept::EmbeddingWord, b, t)?,
                        position: kept
                            .contains_key(&Kept::EmbeddingPosition)
                            .then(|| take(&mut kept, Kept::EmbeddingPosition, b, t))
                            .transpose()?,
                        token_type: kept
                            .contains_key(&Kept::EmbeddingTokenType)
                            .then(|| take(&mut kept, Kept::EmbeddingTokenType, b, t))
                            .transpose()?,
                        sum: take(&mut kept, Kept::EmbeddingSum, b, t)?,
                        normed: kept_copy(&kept, Kept::Hidden(0), b, t)?,
                    })
                } else {
                    None
                };
                let mut values = BTreeMap::new();
                values.insert(
                    "input",
                    kept_copy(&kept, Kept::Hidden(layer), b, t)?.into_dyn(),
                );
                values.insert(
                    "output",
                    kept_copy(&kept, Kept::Hidden(layer + 1), b, t)?.into_dyn(),
                );
                let names: Vec<Kept> = kept
                    .keys()
                    .filter(|k| matches!(k, Kept::Layer(l, _) if *l == layer))
                    .copied()
                    .collect();
                for what in names {
                    let Kept::Layer(_, v) = what else {
                        unreachable!("filtered above")
                    };
                    let x = take(&mut kept, what, b, t)?;
                    let value = match v.heads {
                        None => x.into_dyn(),
                        // (B, T, heads·d) → (B, heads, T, d)
                        Some(heads) => {
                            let d = x.dim().2 / heads.max(1);
                            x.into_shape_with_order((b, t, heads, d))
                                .map_err(|e| {
                                    Error::Engine(format!("{} into {heads} heads: {e}", v.name))
                                })?
                                .permuted_axes([0, 2, 1, 3])
                                .as_standard_layout()
                                .into_owned()
                                .into_dyn()
                        }
                    };
                    values.insert(v.name, value);
                }
                Some(LayerTrace {
                    layer,
                    embeddings,
                    values,
                })
            }
            None => None,
        };
        let hidden = take(&mut kept, Kept::Output, b, t)?;
        // HF's `output_hidden_states`: what enters each layer, then the model's output
        let hidden_states = if opts.hidden_states {
            let mut all = Array4::zeros((b, layers + 1, t, hidden.dim().2));
            for l in 0..layers {
                let x = kept_copy(&kept, Kept::Hidden(l), b, t)?;
                all.slice_mut(s![.., l, .., ..]).assign(&x);
            }
            all.slice_mut(s![.., layers, .., ..]).assign(&hidden);
            Some(all)
        } else {
            None
        };
        let lm_logits = kept
            .contains_key(&Kept::LmLogits)
            .then(|| take(&mut kept, Kept::LmLogits, b, t))
            .transpose()?;
        let queries_keys = match opts.attention {
            AttentionKept::Probabilities => None,
            AttentionKept::QueriesKeys => {
                let mut all = |of: fn(usize) -> Kept| -> Result<Vec<Arc<Array2<f32>>>> {
                    (0..layers)
                        .map(|l| {
                            kept.remove(&of(l)).ok_or_else(|| {
                                Error::Engine(format!("the pass kept no {:?}", of(l)))
                            })
                        })
                        .collect()
                };
                let (queries, keys) = (all(Kept::Queries)?, all(Kept::Keys)?);
                // d from the query heads, H_kv from the keys' width
                let d = queries
                    .first()
                    .map_or(1, |q| q.ncols() / heads.max(1))
                    .max(1);
                let key_value = keys.first().map_or(heads, |k| k.ncols() / d);
                Some(QueriesKeys {
                    heads: Heads {
                        query: heads,
                        key_value,
                    },
                    layers: arch.to_vec(),
                    scale: opts.scale,
                    queries,
                    keys,
                    thumbnails: attention.thumbnails,
                })
            }
        };
        Ok(Trace {
            attention: attention.probs,
            scores: attention.scores,
            hidden,
            hidden_states,
            layer_trace,
            logits: None,
            lm_logits,
            next_logits: kept.remove(&Kept::NextLogits).map(Arc::unwrap_or_clone),
            mask: mask.clone(),
            queries_keys,
            values: value_vectors,
            writes,
        })
    }
}

/// A kept value, taken out, as `(B, T, c)`.
fn take(kept: &mut KeptValues, what: Kept, b: usize, t: usize) -> Result<Array3<f32>> {
    let x = kept
        .remove(&what)
        .ok_or_else(|| Error::Engine(format!("the pass kept no {what:?}")))?;
    let c = x.ncols();
    Arc::unwrap_or_clone(x)
        .into_shape_with_order((b, t, c))
        .map_err(|e| Error::Engine(format!("{what:?}: {e}")))
}

/// A copy of a kept value that more than one field of the trace reads, as `(B, T, c)`.
fn kept_copy(kept: &KeptValues, what: Kept, b: usize, t: usize) -> Result<Array3<f32>> {
    let x = kept
        .get(&what)
        .ok_or_else(|| Error::Engine(format!("the pass kept no {what:?}")))?;
    let c = x.ncols();
    x.to_shape((b, t, c))
        .map(|v| v.to_owned())
        .map_err(|e| Error::Engine(format!("{what:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::row_blocks;

    #[test]
    fn row_blocks_cover_every_row_once_none_shorter_than_four() {
        for t in 0..200 {
            for blocks in [1, 2, 3, 8, 16, 500] {
                let b = row_blocks(t, blocks);
                assert!(!b.is_empty(), "t {t}, {blocks} blocks: none");
                assert_eq!(b[0].start, 0, "t {t}, {blocks} blocks: {b:?}");
                assert_eq!(b.last().unwrap().end, t, "t {t}, {blocks} blocks: {b:?}");
                for w in b.windows(2) {
                    assert_eq!(w[0].end, w[1].start, "t {t}, {blocks} blocks: {b:?}");
                }
                if t >= 4 {
                    assert!(
                        b.iter().all(|r| r.len() >= 4),
                        "t {t}, {blocks} blocks: {b:?}"
                    );
                }
                assert!(b.len() <= blocks.max(1), "t {t}, {blocks} blocks: {b:?}");
            }
        }
    }
}
