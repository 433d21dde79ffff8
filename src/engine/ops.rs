//! The operations a model family's forward pass is written in.
//!
//! A family (`crate::families`) writes its forward pass once, over [`Ops`]; each engine provides
//! the operations. The CPU engine ([`crate::engine::cpu::CpuOps`]) computes each one when it is
//! called; the GPU engine records each one as dispatches into its plan and, after one
//! submission, reads back what the pass kept **by name** ([`AttentionId`], [`Kept`]).
//!
//! Activations are matrices whose rows are the positions of a batch, item after item: `(B·n, c)`
//! for a stream of `n` positions. A handle may be a view of some of another's columns
//! ([`Ops::project`] returns such views), as `x.view(B, n, H, d)` is of `x`.

use serde::Serialize;

use crate::error::Result;
use crate::masks::Mask;
pub use crate::model::config::{Heads, Layer, Reach};
use crate::model::rope::Rotary;
use crate::model::weights::{Linear, Norm, Table};
use crate::model::Activation;

/// Which stack of the Transformer an attention belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stack {
    /// Reads the whole input at once (BERT, and a translation model's source side).
    Encoder,
    /// Writes its output one position after another, under the no-peek mask (GPT-2, and a
    /// translation model's target side).
    Decoder,
}

/// Where an attention's keys and values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKind {
    /// From the same positions as the queries (`n_q = n_k`).
    #[serde(rename = "self")]
    SelfAttention,
    /// From the encoder's output: the decoder's encoder–decoder attention (`n_q ≠ n_k`).
    Cross,
}

/// The name of one layer's attention: which stack, which kind, which layer (0-based). Every
/// attention a pass computes is kept under its name, `(B, H, n_q, n_k)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AttentionId {
    pub stack: Stack,
    pub kind: AttentionKind,
    pub layer: usize,
}

impl AttentionId {
    /// Self-attention of `stack`'s layer `layer`.
    pub fn self_attention(stack: Stack, layer: usize) -> Self {
        Self {
            stack,
            kind: AttentionKind::SelfAttention,
            layer,
        }
    }
}

/// An engine's record of every layer's attention of one stack and kind, `(H, n_q, n_k)` a layer
/// (the CPU's arrays, the GPU's buffers): what [`group_of`] finds or makes.
pub(crate) trait AttentionRecord {
    fn stack(&self) -> Stack;
    fn kind(&self) -> AttentionKind;
    /// `(H, n_q, n_k)`.
    fn shape(&self) -> [usize; 3];
}

/// The record in `groups` of `id`'s stack and kind, made by `make` when it is the first; an
/// error when `id`'s layer is past the `layers` its stack runs in this pass, or its
/// `(H, n_q, n_k)` (`shape`) is not the one the stack's other layers gave.
pub(crate) fn group_of<G: AttentionRecord>(
    groups: &mut Vec<G>,
    id: AttentionId,
    layers: usize,
    shape: [usize; 3],
    make: impl FnOnce() -> G,
) -> Result<&mut G> {
    if id.layer >= layers {
        return Err(crate::error::Error::Engine(format!(
            "{id:?}: this pass runs {layers} layers of the {:?} stack",
            id.stack
        )));
    }
    let at = match groups
        .iter()
        .position(|g| (g.stack(), g.kind()) == (id.stack, id.kind))
    {
        Some(at) => at,
        None => {
            groups.push(make());
            groups.len() - 1
        }
    };
    let g = &mut groups[at];
    if g.shape() != shape {
        return Err(crate::error::Error::Shape {
            what: format!("{id:?}: (heads, n_q, n_k) as the stack's other layers"),
            expected: g.shape().to_vec(),
            found: shape.to_vec(),
        });
    }
    Ok(g)
}

impl AttentionId {
    /// The decoder's encoder–decoder attention of layer `layer`.
    pub fn cross(layer: usize) -> Self {
        Self {
            stack: Stack::Decoder,
            kind: AttentionKind::Cross,
            layer,
        }
    }
}

/// The mask each kind of attention of a pass applies, `true` where a query may see a key.
///
/// # Shapes
/// * `encoder`: `(B, S, S)`; `decoder`: `(B, n_q, n_k)` (a step of a decoding: `n_q = 1` new
///   position, `n_k` written so far); `cross`: `(B, n_q, S)`
#[derive(Debug, Clone, Copy, Default)]
pub struct PassMasks<'a> {
    pub encoder: Option<&'a Mask>,
    pub decoder: Option<&'a Mask>,
    pub cross: Option<&'a Mask>,
}

impl<'a> PassMasks<'a> {
    /// A single stack's self-attention mask (an encoder's, or a decoder-only model's).
    pub fn single(stack: Stack, mask: &'a Mask) -> Self {
        match stack {
            Stack::Encoder => Self {
                encoder: Some(mask),
                ..Self::default()
            },
            Stack::Decoder => Self {
                decoder: Some(mask),
                ..Self::default()
            },
        }
    }

    /// The mask of attention `id`, if the pass has one.
    pub fn of(&self, id: AttentionId) -> Option<&'a Mask> {
        match (id.kind, id.stack) {
            (AttentionKind::Cross, _) => self.cross,
            (AttentionKind::SelfAttention, Stack::Encoder) => self.encoder,
            (AttentionKind::SelfAttention, Stack::Decoder) => self.decoder,
        }
    }
}

/// The token-level inputs of a pass, one id per row (see [`ModelInputs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ids {
    /// The input's tokens: an encoder's, a decoder-only model's, a translation's source.
    Tokens,
    TokenTypes,
    Positions,
    /// A translation model's decoder inputs: the output so far (or the step's one new token).
    TargetTokens,
    TargetPositions,
}

/// What a decoding keeps from step to step in each decoder layer ([`Ops::extend`],
/// [`Ops::cached`]): the self-attention's keys and values of the positions written so far, and
/// the cross-attention's keys and values of the encoder's output, computed once per source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheSlot {
    SelfKeys(usize),
    SelfValues(usize),
    CrossKeys(usize),
    CrossValues(usize),
}

/// Values a family offers the trace; the engine keeps those the caller asked for
/// ([`Ops::wants`]) and reads them back by this name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kept {
    /// The embeddings' parts before their sum (`(B·T, D)` each), and the sum.
    EmbeddingWord,
    EmbeddingPosition,
    EmbeddingTokenType,
    EmbeddingSum,
    /// The hidden states entering layer `l` (`l = 0`: the embeddings' output); `l = L`: the
    /// last layer's output.
    Hidden(usize),
    /// What the model returns, HF's `last_hidden_state`: the last layer's output, after the
    /// final LayerNorm where the family has one (GPT-2's `ln_f`).
    Output,
    /// The LM head's logits over the vocabulary, `(B·T, V)`, where the family has one.
    LmLogits,
    /// The LM head's logits at each item's last position only, `(B, V)`: all a decoding step
    /// writes from (a prompt's pass multiplies one row by the head, not every position's).
    NextLogits,
    /// Layer `l`'s intermediate values, by name (see [`Value`], [`crate::engine::LayerTrace`]).
    Layer(usize, Value),
    /// Layer `l`'s self-attention queries, `(B·T, H·d)`, and keys, `(B·T, H_kv·d)`, as its
    /// attention reads them (turned by their positions, where the family turns them): kept by
    /// the engine's attention in place of the probabilities
    /// ([`crate::engine::AttentionKept::QueriesKeys`]).
    Queries(usize),
    Keys(usize),
    /// An encoder–decoder's decoder embeddings, `(B·T, D)` each: the token rows times the
    /// embedding scale (`√d_model` for Marian), and the positions' rows.
    DecoderWord,
    DecoderPosition,
    /// An encoder–decoder's decoder layer `l`'s values, by name (see [`Value`],
    /// [`crate::engine::DecoderTrace`]).
    Decoder(usize, Value),
}

/// One of a layer's values, by the name its family gives it (HF's module names where it has
/// them): a row a position, `(B·T, c)`, or the rows of `heads` heads side by side (Q or K
/// split into its heads), which the trace gives as `(B, heads, T, d)`; in a decoder layer, a
/// row a source position, `(B·S, c)` (its cross-attention's keys and values). A new value is a
/// new name in a family's forward pass ([`crate::engine::LayerTrace`] and
/// [`crate::engine::DecoderTrace`] keep whatever the family names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value {
    pub name: &'static str,
    pub heads: Option<usize>,
    /// Its rows are the source's positions, not the layer's own.
    pub source: bool,
}

impl Value {
    /// A value of rows.
    pub const fn rows(name: &'static str) -> Self {
        Self {
            name,
            heads: None,
            source: false,
        }
    }

    /// A value of `heads` heads' rows side by side.
    pub const fn heads(name: &'static str, heads: usize) -> Self {
        Self {
            name,
            heads: Some(heads),
            source: false,
        }
    }

    /// A decoder layer's value of a row a source position.
    pub const fn source_rows(name: &'static str) -> Self {
        Self {
            name,
            heads: None,
            source: true,
        }
    }
}

/// The values every family's layer keeps (the page's panels read them by these names).
pub mod values {
    use super::Value;
    /// The projections of Q, K and V, before any rotation or split into heads.
    pub const Q: Value = Value::rows("q");
    pub const K: Value = Value::rows("k");
    pub const V: Value = Value::rows("v");
    /// The cross-attention's values: the encoder's output projected, a row a source position.
    pub const CROSS_V: Value = Value::source_rows("cross_v");
    /// The heads' contexts, concatenated before the output projection.
    pub const CONTEXT: Value = Value::rows("context");
    /// The residual after the attention (post-LN: after its norm).
    pub const ATTENTION_OUTPUT: Value = Value::rows("attention_output");
    /// The feed-forward's first projection before its activation (a gated one's gate).
    pub const PRE_ACTIVATION: Value = Value::rows("pre_activation");
    /// The feed-forward's inner values, what its last projection reads.
    pub const INTERMEDIATE: Value = Value::rows("intermediate");
    /// A gated feed-forward's up projection (its gate is [`PRE_ACTIVATION`]).
    pub const UP: Value = Value::rows("up");
}

/// A gated feed-forward's weights, `down(act(gate(x)) ⊙ up(x))`: SwiGLU with SiLU (Llama),
/// GeGLU with GELU-tanh (Gemma).
#[derive(Debug, Clone, Copy)]
pub struct GatedFeedForward<'a> {
    /// `D → F` each.
    pub gate: &'a Linear,
    pub up: &'a Linear,
    /// `F → D`.
    pub down: &'a Linear,
    pub act: Activation,
}

impl GatedFeedForward<'_> {
    /// The values layer `layer` hands to the trace, when it wants them: the gate
    /// ([`values::PRE_ACTIVATION`]), the up projection ([`values::UP`]) and the inner values
    /// ([`values::INTERMEDIATE`]).
    pub fn kept(layer: usize) -> [Kept; 3] {
        [values::PRE_ACTIVATION, values::UP, values::INTERMEDIATE].map(|v| Kept::Layer(layer, v))
    }

    /// Layer `layer`'s feed-forward over `x` in the ops alone, every value whole, each inner
    /// value handed to the trace ([`GatedFeedForward::kept`]): [`Ops::gated_feed_forward`]'s way
    /// where an engine has no other.
    ///
    /// # Shapes
    /// * `x`: `(rows, D)` → `(rows, D)`; inside, `(rows, F)` each
    pub fn whole<O: Ops + ?Sized>(&self, ops: &mut O, x: &O::X, layer: usize) -> Result<O::X> {
        let [gate, up, inner] = Self::kept(layer);
        let gu = ops.project(x, &[self.gate, self.up])?; // 2 × (rows, F)
        ops.keep(gate, &gu[0])?;
        ops.keep(up, &gu[1])?;
        let i = ops.gate(&gu[0], &gu[1], self.act)?; // act(gate) ⊙ up
        ops.keep(inner, &i)?;
        ops.linear(&i, self.down, None)
    }
}

/// `0..t` in blocks of `size` rows (at least `least`), the last block up to `least − 1` rows
/// longer where fewer would be left alone: `[0..t]` when `t` is at most `size`.
pub(crate) fn row_blocks(t: usize, size: usize, least: usize) -> Vec<std::ops::Range<usize>> {
    let size = size.max(least).max(1);
    let mut out: Vec<std::ops::Range<usize>> =
        (0..t).step_by(size).map(|r| r..(r + size).min(t)).collect();
    // a short last block joins the one before it
    if out.len() > 1 && out.last().is_some_and(|r| r.len() < least) {
        let last = out.pop().expect("a last block");
        out.last_mut().expect("a block before it").end = last.end;
    }
    if out.is_empty() {
        out.push(0..t);
    }
    out
}

/// What one attention is beyond its inputs: its heads, how far back it reaches, and what its
/// scores are multiplied by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionSpec {
    pub heads: Heads,
    pub reach: Reach,
    /// In place of `1/√d_k` (see [`Layer::score_scale`]).
    pub score_scale: Option<f32>,
}

impl AttentionSpec {
    /// `heads` over every key the pass's mask allows, the scores `q·k/√d_k`.
    pub fn global(heads: Heads) -> Self {
        Self {
            heads,
            reach: Reach::Global,
            score_scale: None,
        }
    }

    /// `heads` in a layer `layer` describes.
    pub fn of(layer: &Layer, heads: Heads) -> Self {
        Self {
            heads,
            reach: layer.reach,
            score_scale: layer.score_scale,
        }
    }
}

/// A residual sum and its norm (see [`Ops::add_norm`]).
pub struct AddNorm<X> {
    pub sum: X,
    pub norm: X,
}

/// The width of each of `parts` equal parts of `cols` columns ([`Ops::split`]), or an error
/// naming the shape that does not divide.
pub fn split_width(rows: usize, cols: usize, parts: usize) -> Result<usize> {
    if parts == 0 || !cols.is_multiple_of(parts) {
        return Err(crate::error::Error::Shape {
            what: format!("columns split into {parts} equal parts"),
            expected: vec![rows, parts.max(1) * (cols / parts.max(1))],
            found: vec![rows, cols],
        });
    }
    Ok(cols / parts)
}

/// The operations of a forward pass, over activations `X` (see the module's documentation).
///
/// Each returns a new activation and leaves its inputs as they are. Shapes are checked by the
/// family, which knows them; an engine refuses what it cannot run with an error.
pub trait Ops {
    /// An activation, `(rows, cols)`: cheap to clone (a handle).
    type X: Clone;

    /// The batch size `B`: every activation's rows are `B` items of equal length.
    fn batch(&self) -> usize;

    /// Whether the caller keeps `what` (a family computes a value only for the trace when it
    /// is wanted).
    fn wants(&self, what: Kept) -> bool;

    /// Hands `x` to the trace under `what`, when [`Ops::wants`] it.
    fn keep(&mut self, what: Kept, x: &Self::X) -> Result<()>;

    /// Row `ids[r]` of `table` for every row `r`.
    ///
    /// # Shapes
    /// * `table`: `(V, D)` → `(B·T, D)`
    fn gather(&mut self, table: &Table, ids: Ids) -> Result<Self::X>;

    /// `a + b`.
    fn add(&mut self, a: &Self::X, b: &Self::X) -> Result<Self::X>;

    /// The norm `ln` (LayerNorm or RMSNorm, [`crate::model::weights::NormKind`]) over each row.
    fn norm(&mut self, x: &Self::X, ln: &Norm) -> Result<Self::X>;

    /// QK-norm: each of `heads` heads of `x`'s rows through the norm `ln` on its own (`ln`
    /// spans one head's `d` columns).
    ///
    /// # Shapes
    /// * `x`: `(rows, heads·d)` → `(rows, heads·d)`
    fn norm_heads(&mut self, x: &Self::X, heads: usize, ln: &Norm) -> Result<Self::X>;

    /// `sum = a + b`, `norm = ln(sum)`: a residual and the norm after it, in one step.
    fn add_norm(&mut self, a: &Self::X, b: &Self::X, ln: &Norm) -> Result<AddNorm<Self::X>>;

    /// `act(x·Wᵀ + b)`.
    ///
    /// # Shapes
    /// * `x`: `(rows, in)` → `(rows, out)`
    fn linear(&mut self, x: &Self::X, w: &Linear, act: Option<Activation>) -> Result<Self::X>;

    /// `x` through several dense layers at once (Q, K and V): an engine may fuse them into one
    /// product, whose columns the results are views of.
    ///
    /// # Shapes
    /// * `x`: `(rows, in)` → `(rows, out_i)` for each layer
    fn project(&mut self, x: &Self::X, ws: &[&Linear]) -> Result<Vec<Self::X>>;

    /// `x`'s rows appended, item by item, to those `slot` holds from a decoding's earlier steps;
    /// returns them all, `(B·(n + m), c)` for `x`'s `(B·m, c)`, and keeps them for the next step.
    /// In a pass that is not a step of a decoding, `x` itself.
    fn extend(&mut self, slot: CacheSlot, x: &Self::X) -> Result<Self::X>;

    /// What [`Ops::cache`] kept under `slot` in an earlier step of this decoding, if anything.
    fn cached(&mut self, slot: CacheSlot) -> Option<Self::X>;

    /// Keeps `x` under `slot` for the later steps of a decoding (nothing, in a pass that is not a
    /// step of one).
    fn cache(&mut self, slot: CacheSlot, x: &Self::X) -> Result<()>;

    /// Rotary position embeddings (RoPE, in HF's rotate-half layout) on each of `heads` heads of
    /// `x`: the pair of dimensions `(i, i + d/2)` of a head at position `p` (the pass's
    /// [`Ids::Positions`], or [`Ids::TargetPositions`]) turned by the angle `p·θᵢ`,
    /// `θᵢ = rope.theta^(−2i/d)`.
    ///
    /// # Shapes
    /// * `x`: `(B·n, heads·d)` → `(B·n, heads·d)`, `d = rope.head_dim`
    fn rotate(&mut self, x: &Self::X, heads: usize, rope: &Rotary, which: Ids) -> Result<Self::X>;

    /// A gated feed-forward's inner activation, `act(gate) ⊙ up` (SwiGLU with SiLU).
    ///
    /// # Shapes
    /// * `gate`, `up`: `(rows, F)` → `(rows, F)`
    fn gate(&mut self, gate: &Self::X, up: &Self::X, act: Activation) -> Result<Self::X>;

    /// Layer `layer`'s gated feed-forward over `x`, `down(act(gate(x)) ⊙ up(x))`, its gate, up
    /// projection and inner values handed to the trace when it wants them
    /// ([`GatedFeedForward::kept`]). An engine may compute it a block of rows at a time where
    /// the trace wants none of them: each row's values are its own.
    ///
    /// # Shapes
    /// * `x`: `(rows, D)` → `(rows, D)`; inside, `(rows, F)` each
    fn gated_feed_forward(
        &mut self,
        x: &Self::X,
        ffn: &GatedFeedForward,
        layer: usize,
    ) -> Result<Self::X> {
        ffn.whole(self, x, layer)
    }

    /// `cap·tanh(x/cap)` element by element: values soft-capped below ±`cap` (Gemma's logits).
    ///
    /// # Shapes
    /// * `x`: `(rows, c)` → `(rows, c)`
    fn soft_cap(&mut self, x: &Self::X, cap: f32) -> Result<Self::X>;

    /// Each item's last row (the position whose next token a decoding step writes).
    ///
    /// # Shapes
    /// * `x`: `(B·n, c)` → `(B, c)`
    fn last_rows(&mut self, x: &Self::X) -> Result<Self::X>;

    /// `x`'s columns cut into `parts` equal views (GPT-2's fused `c_attn` into Q, K and V).
    ///
    /// # Shapes
    /// * `x`: `(rows, parts·c)` → `parts × (rows, c)`
    fn split(&mut self, x: &Self::X, parts: usize) -> Result<Vec<Self::X>>;

    /// Multi-head scaled dot-product attention, `softmax(masked_fill(QKᵀ/√d_k, mask == 0, -inf))·V`
    /// per query head, the heads' outputs concatenated: `concat(head₁ … head_H)` before `W_o`.
    /// Query head `h` reads key/value head `h / (H / H_kv)` (grouped-query attention; `H_kv = H`
    /// is multi-head attention). The engine applies the mask it holds for `id`, the scale and the
    /// heads knocked out that the caller chose, and keeps the probabilities (and scores, when
    /// asked) under `id`, as `(B, H, n_q, n_k)`. A sliding layer ([`Reach::Sliding`]) also
    /// hides the keys outside its window (key `j` is at position `j`).
    ///
    /// # Shapes
    /// * `q`: `(B·n_q, H·d_k)`, `k`: `(B·n_k, H_kv·d_k)`, `v`: `(B·n_k, H_kv·d_v)` →
    ///   `(B·n_q, H·d_v)`
    fn attention(
        &mut self,
        id: AttentionId,
        spec: AttentionSpec,
        q: &Self::X,
        k: &Self::X,
        v: &Self::X,
    ) -> Result<Self::X>;
}
