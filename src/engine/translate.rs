//! An encoder–decoder model's translation of a padded batch of sources: the encoder once, then
//! the decoder, greedily one position at a time with a cache (each step runs the decoder for
//! its new position only, the earlier positions' self-attention keys and values and the
//! source's cross-attention keys and values kept), or over a given output at once (teacher
//! forcing). Every attention is kept as its rectangular record: the encoder's `(S × S)`, the
//! decoder's `(T × T)`, the cross-attention's `(T × S)`.

use std::collections::BTreeMap;
use std::future::Future;

use ndarray::{s, Array2, Array3, Array4, Array5};

use super::cpu::exec::{CpuOps, DecoderCache, StackLayers};
use super::cpu::pass_on_the_pool;
use super::ops::{values, AttentionId, AttentionKind, Kept, PassMasks, Stack, Value};
use super::trace::{AttentionGroup, KeptValues, ModelInputs, TargetInputs, TraceOptions};
use crate::engine::network::Loaded;
use crate::engine::network::{EngineOps, Translating};
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::limits::MAX_ATTENTION_VALUES;
use crate::model::{Config, Encoded};

/// How the decoder's output is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoding {
    /// The likeliest token at each step (HF's `generate(num_beams=1, do_sample=False)`), never
    /// the pad token; stops at EOS or after `max_new_tokens` (the last one EOS where the config
    /// has a `forced_eos_token_id`).
    Greedy { max_new_tokens: usize },
    /// Teacher forcing: each source's output given, `output_ids` as [`Translation`] holds them
    /// (the decoder start token first).
    Forced(Vec<Vec<u32>>),
}

/// A padded batch of sources translated.
///
/// # Shapes
/// * `source`: `(B, S)`; `output_ids`: `B` lists, each the decoder start token, then the output
///   (EOS last when it was reached); item `b` has `T_b = len(output_ids[b]) − 1` steps
/// * with `T = max T_b`: `encoder_attention` `(B, L_enc, H_enc, S, S)`, `decoder_attention`
///   `(B, L_dec, H_dec, T, T)`, `cross_attention` `(B, L_dec, H_dec, T, S)`; row `t` of the
///   decoder's is the step that wrote `output_ids[b][t + 1]` (HF's forward pass with
///   `decoder_input_ids = output_ids[:-1]`); rows past an item's `T_b` are not part of it
/// * `step_logits`: `(B, T, V)`, each step's logits over the vocabulary
/// * `step_ms`: `(T,)` with greedy decoding, each step's time (the first's with the encoder's);
///   empty with teacher forcing
#[derive(Debug, Clone)]
pub struct Translation {
    pub source: Encoded,
    pub output_ids: Vec<Vec<u32>>,
    pub encoder_attention: Array5<f32>,
    pub decoder_attention: Array5<f32>,
    pub cross_attention: Array5<f32>,
    pub step_logits: Array3<f32>,
    pub step_ms: Vec<f64>,
}

impl Translation {
    /// The number of steps of item `b`, `T_b`.
    pub fn steps(&self, b: usize) -> usize {
        self.output_ids[b].len() - 1
    }
}

/// One pass of a translation: every attention it computed, by stack and kind, and the logits
/// of each decoder position, `(B·n, V)`.
pub(crate) struct Pass {
    pub groups: Vec<AttentionGroup>,
    pub logits: Array2<f32>,
}

/// The passes an engine runs for a translation of the source it was made for: the driver
/// ([`decode`]) decides the tokens, the engine computes.
pub(crate) trait Passes {
    /// Step `t` of a greedy decoding, `tokens` `(B,)` fed at position `t`: the decoder for that
    /// position alone, reading the cache of the earlier steps (step 0 runs the encoder too and
    /// fills the cross-attention's cache). The decoder's attentions are `(B, L, H, 1, n_k)`
    /// whose keys `0..=t` are the positions so far (any after them masked); the logits `(B, V)`.
    fn step(&mut self, t: usize, tokens: &[u32]) -> impl Future<Output = Result<Pass>>;

    /// The encoder and the decoder over the whole `target` `(B, T)` at once, under `decoder`
    /// `(B, T, T)` and `cross` `(B, T, S)` (teacher forcing): logits `(B·T, V)`.
    fn whole(
        &mut self,
        target: TargetInputs,
        decoder: &Mask,
        cross: &Mask,
    ) -> impl Future<Output = Result<Pass>>;
}

/// Translates `sources` with an encoder–decoder `model` on the CPU engine.
pub fn translate(model: &dyn Loaded, sources: &[&str], decoding: &Decoding) -> Result<Translation> {
    let passes_of = EncoderDecoder::translating(model)?;
    let source = model.tokenizer().encode(sources, None)?;
    pass_on_the_pool(|| {
        let mut passes = CpuPasses::new(model, passes_of, &source)?;
        let decoding = std::pin::pin!(decode(model, &mut passes, &source, decoding));
        // the CPU's passes never wait: polled once, the future is done
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match decoding.poll(&mut cx) {
            std::task::Poll::Ready(done) => done,
            std::task::Poll::Pending => Err(Error::Engine(
                "the CPU engine's decoding waited for something".into(),
            )),
        }
    })
}

impl Decoding {
    /// Teacher forcing of `targets`, one per source: each the decoder start token followed by
    /// the target's ids as the tokenizer encodes it (with its special tokens: Marian's `</s>`).
    pub fn forced(model: &dyn Loaded, targets: &[&str]) -> Result<Self> {
        let start = model.config().decoder()?.start_token_id;
        let enc = model.tokenizer().encode(targets, None)?;
        let outputs = (0..enc.batch())
            .map(|b| {
                let n = enc.length(b);
                std::iter::once(start)
                    .chain(enc.ids.row(b).iter().take(n).copied())
                    .collect()
            })
            .collect();
        Ok(Self::Forced(outputs))
    }
}

/// An encoder–decoder model's two passes over an engine's operations, its family's forward pass
/// (the engines know no family: the CPU engine runs these, the GPU engine records them).
#[derive(Clone, Copy)]
pub struct EncoderDecoder<'m> {
    passes: &'m dyn Translating,
    config: &'m Config,
}

impl<'m> EncoderDecoder<'m> {
    /// `model`'s passes, if it is an encoder–decoder model.
    pub fn of(model: &'m dyn Loaded) -> Option<Self> {
        model.network().translation().map(|passes| Self {
            passes,
            config: model.config(),
        })
    }

    /// `model`'s passes, or an error saying it is not an encoder–decoder model.
    pub fn translating(model: &'m dyn Loaded) -> Result<Self> {
        Self::of(model).ok_or_else(|| {
            Error::Input(format!(
                "{} is not an encoder–decoder model: `translate` needs one (marian); use \
                 `attention`",
                model.name()
            ))
        })
    }

    /// The source through the encoder, then every target position given through the decoder.
    pub fn forward(self, ops: EngineOps<'_, '_>) -> Result<()> {
        self.passes.run_whole(ops, self.config)
    }

    /// The decoder alone over its new positions: the cache holds the earlier positions' keys
    /// and values, and the source's for the cross-attention.
    pub fn decode_cached(self, ops: EngineOps<'_, '_>) -> Result<()> {
        self.passes.run_decoder(ops, self.config)
    }
}

/// The ids the encoder reads (the source and its positions `0..S`) and the decoder's.
pub(crate) fn source_inputs(source: &Encoded, target: TargetInputs) -> ModelInputs {
    let (b, s) = source.ids.dim();
    ModelInputs {
        tokens: source.ids.clone(),
        token_types: Array2::zeros((b, s)),
        positions: Array2::from_shape_fn((b, s), |(_, j)| j as u32),
        target: Some(target),
    }
}

/// A step's decoder inputs: `tokens` `(B,)` at position `t`.
pub(crate) fn step_inputs(t: usize, tokens: &[u32]) -> TargetInputs {
    let b = tokens.len();
    TargetInputs {
        tokens: Array2::from_shape_fn((b, 1), |(i, _)| tokens[i]),
        positions: Array2::from_elem((b, 1), t as u32),
    }
}

/// The cross-attention's mask for `n_q` decoder positions: every real source token.
///
/// # Shapes
/// * `valid`: `(B, S)` → `(B, n_q, S)`
pub(crate) fn cross_mask(valid: &Array2<bool>, n_q: usize) -> Mask {
    let (b, s) = valid.dim();
    Mask::explicit(Array3::from_shape_fn((b, n_q, s), |(i, _, j)| {
        valid[[i, j]]
    }))
}

/// The layers of an encoder–decoder's two stacks.
pub(crate) fn stack_layers(model: &dyn Loaded) -> Result<StackLayers> {
    Ok(StackLayers {
        encoder: model.config().num_hidden_layers,
        decoder: model.config().decoder()?.layers,
    })
}

/// What a translation's passes keep besides the attentions: the logits.
pub(crate) fn pass_options() -> TraceOptions {
    TraceOptions {
        lm_logits: true,
        ..TraceOptions::default()
    }
}

/// The logits a pass kept.
pub(crate) fn logits_of(mut kept: KeptValues) -> Result<Array2<f32>> {
    kept.remove(&Kept::LmLogits)
        .map(std::sync::Arc::unwrap_or_clone)
        .ok_or_else(|| Error::Engine("the pass kept no logits".into()))
}

/// Refuses a translation over the model's positions or the attention a pass may keep.
fn check_size(model: &dyn Loaded, b: usize, s: usize, t: usize) -> Result<()> {
    let c = model.config();
    let d = c.decoder()?;
    let max = c.max_position_embeddings;
    if s > max || t > max {
        return Err(Error::Input(format!(
            "a source of {s} tokens and an output of {t} steps: the model has {max} positions"
        )));
    }
    let values = b
        * (c.num_hidden_layers * c.num_attention_heads * s * s + d.layers * d.heads * t * (t + s));
    if values > MAX_ATTENTION_VALUES {
        return Err(Error::Input(format!(
            "{b} sources of {s} tokens and {t} steps would keep {values} attention \
             probabilities, over the limit of {MAX_ATTENTION_VALUES}: fewer or shorter"
        )));
    }
    Ok(())
}

/// Translates `source` with `passes`, as `decoding` says: the driver of every engine.
pub(crate) async fn decode<P: Passes>(
    model: &dyn Loaded,
    passes: &mut P,
    source: &Encoded,
    decoding: &Decoding,
) -> Result<Translation> {
    match decoding {
        Decoding::Greedy { max_new_tokens } => greedy(model, passes, source, *max_new_tokens).await,
        Decoding::Forced(outputs) => forced(model, passes, source, outputs).await,
    }
}

/// The longest greedy decoding a `(B, S)` source may ask for: at least 1 step, within the
/// model's positions and the attention a translation may keep.
pub(crate) fn check_greedy(
    model: &dyn Loaded,
    source: &Encoded,
    max_new_tokens: usize,
) -> Result<()> {
    if max_new_tokens == 0 {
        return Err(Error::Input("max_new_tokens must be at least 1".into()));
    }
    let (b, s) = source.ids.dim();
    check_size(model, b, s, max_new_tokens)
}

/// Greedy decoding, one position per step (see [`Decoding::Greedy`]).
async fn greedy<P: Passes>(
    model: &dyn Loaded,
    passes: &mut P,
    source: &Encoded,
    max_new_tokens: usize,
) -> Result<Translation> {
    let c = model.config();
    let d = c.decoder()?;
    let (b, s) = source.ids.dim();
    check_greedy(model, source, max_new_tokens)?;
    let pad = model.tokenizer().pad_id();
    let mut outputs: Vec<Vec<u32>> = vec![vec![d.start_token_id]; b];
    let mut done = vec![false; b];
    let mut next = vec![d.start_token_id; b];
    let mut encoder_attention = None;
    // each step's rows: the decoder's (B, L, H, 1, n_k), the cross-attention's (B, L, H, 1, S)
    let (mut self_rows, mut cross_rows, mut logit_rows) = (vec![], vec![], vec![]);
    let mut step_ms = Vec::with_capacity(max_new_tokens);
    for t in 0..max_new_tokens {
        let start = web_time::Instant::now();
        let Pass { mut groups, logits } = passes.step(t, &next).await?; // logits (B, V)
        step_ms.push(start.elapsed().as_secs_f64() * 1e3);
        if t == 0 {
            let encoder =
                AttentionGroup::take(&mut groups, Stack::Encoder, AttentionKind::SelfAttention)?;
            encoder_attention = Some(encoder.probs);
        }
        self_rows.push(
            AttentionGroup::take(&mut groups, Stack::Decoder, AttentionKind::SelfAttention)?.probs,
        );
        cross_rows
            .push(AttentionGroup::take(&mut groups, Stack::Decoder, AttentionKind::Cross)?.probs);
        let last = t + 1 == max_new_tokens;
        for i in 0..b {
            if done[i] {
                next[i] = pad; // as HF feeds a finished sequence
                continue;
            }
            let token = match d.forced_eos_token_id {
                Some(eos) if last => eos,
                _ => likeliest(logits.row(i), pad),
            };
            outputs[i].push(token);
            next[i] = token;
            done[i] = token == d.eos_token_id;
        }
        logit_rows.push(logits);
        if done.iter().all(|&x| x) {
            break;
        }
    }
    let steps = self_rows.len();
    let (_, l, h, _, _) = self_rows[0].dim();
    let mut decoder_attention = Array5::zeros((b, l, h, steps, steps));
    let mut cross_attention = Array5::zeros((b, l, h, steps, s));
    let mut step_logits = Array3::zeros((b, steps, c.vocab_size));
    for (t, ((own, across), logits)) in self_rows
        .iter()
        .zip(&cross_rows)
        .zip(&logit_rows)
        .enumerate()
    {
        decoder_attention
            .slice_mut(s![.., .., .., t, ..t + 1])
            .assign(&own.slice(s![.., .., .., 0, ..t + 1]));
        cross_attention
            .slice_mut(s![.., .., .., t, ..])
            .assign(&across.slice(s![.., .., .., 0, ..]));
        step_logits.slice_mut(s![.., t, ..]).assign(logits);
    }
    Ok(Translation {
        source: source.clone(),
        output_ids: outputs,
        encoder_attention: encoder_attention.expect("the first step ran the encoder"),
        decoder_attention,
        cross_attention,
        step_logits,
        step_ms,
    })
}

/// The likeliest token of a step's logits that is not the pad token (the first of equals, as
/// `argmax`).
fn likeliest(logits: ndarray::ArrayView1<f32>, pad: u32) -> u32 {
    let mut best: Option<(f32, u32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        let i = i as u32;
        if i != pad && best.is_none_or(|(b, _)| v > b) {
            best = Some((v, i));
        }
    }
    best.map_or(pad, |(_, i)| i)
}

/// What the decoder reads when it is given `outputs`, one for each source, each the start token
/// and at least one more (an error otherwise, or past the model's sizes): `output_ids[:-1]`
/// right-padded to the longest, `(B, T)`, its mask, `no-peek & (tgt != pad)`, `(B, T, T)`, and
/// the cross-attention's, `(B, T, S)`.
fn forced_inputs(
    model: &dyn Loaded,
    source: &Encoded,
    outputs: &[Vec<u32>],
) -> Result<(TargetInputs, Mask, Mask)> {
    let (b, s) = source.ids.dim();
    if outputs.len() != b {
        return Err(Error::Input(format!(
            "{b} sources and {} outputs: one output for each source",
            outputs.len()
        )));
    }
    if let Some(i) = outputs.iter().position(|o| o.len() < 2) {
        return Err(Error::Input(format!(
            "output {i} has no token after the decoder start token"
        )));
    }
    let t = outputs.iter().map(|o| o.len() - 1).max().unwrap_or(0);
    check_size(model, b, s, t)?;
    let pad = model.tokenizer().pad_id();
    let tokens = Array2::from_shape_fn((b, t), |(i, j)| {
        if j + 1 < outputs[i].len() {
            outputs[i][j]
        } else {
            pad
        }
    });
    let valid = Array2::from_shape_fn((b, t), |(i, j)| j + 1 < outputs[i].len());
    let target = TargetInputs {
        tokens,
        positions: Array2::from_shape_fn((b, t), |(_, j)| j as u32),
    };
    let decoder_mask = Mask::causal(b, t).and(&Mask::padding(valid.view()))?;
    Ok((target, decoder_mask, cross_mask(&source.valid, t)))
}

/// A decoder layer's values in one teacher-forced pass (see [`decoder_trace`]): the
/// embeddings, the cross-attention's scores, and every value the family names in the layer
/// (Marian's: `input`, `v`, `self_output`, `self_sum`, `self_normed`, `cross_q`, `cross_k`,
/// `cross_v`, `cross_context`, `cross_output`, `cross_sum`, `cross_normed`, `ffn_output`,
/// `ffn_sum`, `output`).
///
/// # Shapes
/// * `word`, `position`: `(B, T, D)`; `cross_scores`: `(B, H, T, S)`, `QKᵀ/√d_k` before the
///   source's padding mask
/// * each value `(B, T, c)`, or `(B, S, c)` where its rows are the source's ([`Value::source`]:
///   the encoder's output projected into the cross-attention's keys and values)
#[derive(Debug, Clone)]
pub struct DecoderTrace {
    /// 0-based.
    pub layer: usize,
    /// The sources as the encoder read them, `(B, S)`.
    pub source: Encoded,
    /// The token rows times the embedding scale, the positions' rows.
    pub word: Array3<f32>,
    pub position: Array3<f32>,
    pub cross_scores: ndarray::Array4<f32>,
    /// Every value the layer keeps, by name, with what it is.
    pub values: BTreeMap<&'static str, (Value, Array3<f32>)>,
}

impl DecoderTrace {
    /// The value `name`, or an error naming it and those there are.
    pub fn get(&self, name: &str) -> Result<&Array3<f32>> {
        self.values.get(name).map(|(_, x)| x).ok_or_else(|| {
            Error::Engine(format!(
                "decoder layer {}'s trace has no {name:?} (it has {})",
                self.layer,
                self.values.keys().copied().collect::<Vec<_>>().join(", ")
            ))
        })
    }
}

/// Decoder layer `layer`'s values on the CPU engine, for `sources` and their `outputs` (each the
/// decoder start token first: a translation's `output_ids`, which this pass equals, or a
/// target's), in one teacher-forced pass: what the page's inside-the-decoder panels draw.
pub fn decoder_trace(
    model: &dyn Loaded,
    sources: &[&str],
    outputs: &[Vec<u32>],
    layer: usize,
) -> Result<DecoderTrace> {
    let d = model.config().decoder()?;
    if layer >= d.layers {
        return Err(Error::Input(format!(
            "decoder layer {layer}: the decoder has {} layers",
            d.layers
        )));
    }
    let opts = TraceOptions {
        scores: true,
        decoder_trace: Some(layer),
        ..TraceOptions::default()
    };
    let ForcedPass {
        source,
        steps: t,
        mut groups,
        mut kept,
    } = forced_pass(model, sources, outputs, &opts)?;
    let (b, s) = source.ids.dim();
    let scores = AttentionGroup::take(&mut groups, Stack::Decoder, AttentionKind::Cross)?
        .scores
        .ok_or_else(|| Error::Engine("the pass kept no cross-attention scores".into()))?;
    // the values the family named in the layer
    let named: Vec<Kept> = kept
        .keys()
        .filter(|k| matches!(k, Kept::Decoder(l, _) if *l == layer))
        .copied()
        .collect();
    // (B·n, c) → (B, n, c): n the target's T, or the source's S
    let mut take = |what: Kept| -> Result<Array3<f32>> {
        let x = kept
            .remove(&what)
            .ok_or_else(|| Error::Engine(format!("the pass kept no {what:?}")))?;
        let (rows, cols) = x.dim();
        std::sync::Arc::unwrap_or_clone(x)
            .into_shape_with_order((b, rows / b.max(1), cols))
            .map_err(|e| Error::Engine(format!("{what:?}: {e}")))
    };
    let (word, position) = (take(Kept::DecoderWord)?, take(Kept::DecoderPosition)?);
    let mut values = BTreeMap::new();
    for what in named {
        let Kept::Decoder(_, v) = what else {
            unreachable!("filtered above")
        };
        let x = take(what)?;
        let want = if v.source { s } else { t };
        if x.dim().1 != want {
            return Err(Error::Engine(format!(
                "decoder layer {layer}'s {:?}: {} rows an item, not {want}",
                v.name,
                x.dim().1
            )));
        }
        values.insert(v.name, (v, x));
    }
    Ok(DecoderTrace {
        layer,
        source,
        word,
        position,
        cross_scores: scores.index_axis_move(ndarray::Axis(1), layer),
        values,
    })
}

/// One teacher-forced pass ([`forced_pass`]): the sources as the encoder read them, the steps
/// `T`, and every attention and value the pass kept.
struct ForcedPass {
    source: Encoded,
    steps: usize,
    groups: Vec<AttentionGroup>,
    kept: KeptValues,
}

/// `sources` and their `outputs` (each the decoder start token first) in one teacher-forced
/// pass on the CPU engine, keeping what `opts` asks.
fn forced_pass(
    model: &dyn Loaded,
    sources: &[&str],
    outputs: &[Vec<u32>],
    opts: &TraceOptions,
) -> Result<ForcedPass> {
    let passes = EncoderDecoder::translating(model)?;
    let source = model.tokenizer().encode(sources, None)?;
    let (target, decoder, cross) = forced_inputs(model, &source, outputs)?;
    let steps = target.tokens.ncols();
    let (groups, kept) = pass_on_the_pool(|| {
        let encoder = Mask::padding(source.valid.view());
        let masks = StackMasks {
            encoder: &encoder,
            decoder: &decoder,
            cross: &cross,
        };
        cpu_pass(model, &source, target, masks, opts, None, |ops| {
            passes.forward(EngineOps::Cpu(ops))
        })
    })?;
    Ok(ForcedPass {
        source,
        steps,
        groups,
        kept,
    })
}

/// Each of a translation's three attentions' value sizes, `‖W_O^h v_j^h‖₂` of every layer, head
/// and key ([`crate::analysis::value_weighted`]): what the value-weighted attention weighs each
/// key by.
///
/// # Shapes
/// * `encoder`: `(B, L_enc, H_enc, S)`; `decoder`: `(B, L_dec, H_dec, T)`; `cross`:
///   `(B, L_dec, H_dec, S)`, over the padded batch (a padded key's value is computed and never
///   weighed: its attention is 0)
#[derive(Debug, Clone)]
pub struct ValueNorms {
    pub encoder: Array4<f32>,
    pub decoder: Array4<f32>,
    pub cross: Array4<f32>,
}

/// The value sizes of `sources`' attentions with their `outputs` (each the decoder start token
/// first: a translation's `output_ids`, which this pass equals, or a target's), in one
/// teacher-forced pass on the CPU engine that keeps every layer's values.
pub fn value_norms(
    model: &dyn Loaded,
    sources: &[&str],
    outputs: &[Vec<u32>],
) -> Result<ValueNorms> {
    let translating = model
        .network()
        .translation()
        .ok_or_else(|| Error::Input(format!("{} is not an encoder–decoder model", model.name())))?;
    let c = model.config();
    let dec = c.decoder()?;
    let opts = TraceOptions {
        values: true,
        ..TraceOptions::default()
    };
    let ForcedPass {
        source,
        steps: t,
        kept,
        ..
    } = forced_pass(model, sources, outputs, &opts)?;
    let (b, s) = source.ids.dim();
    // one attention's sizes: its layers' values `(B·n, H_kv·d)` through their projections
    let of = |stack: Stack,
              kind: AttentionKind,
              layers: usize,
              heads: usize,
              n: usize,
              what: &dyn Fn(usize) -> Kept|
     -> Result<Array4<f32>> {
        let mut out = Array4::<f32>::zeros((b, layers, heads, n));
        for l in 0..layers {
            let id = AttentionId {
                stack,
                kind,
                layer: l,
            };
            let w = translating
                .output_projection(id)
                .ok_or_else(|| Error::Engine(format!("{id:?} has no output projection")))?;
            let v = kept
                .get(&what(l))
                .ok_or_else(|| Error::Engine(format!("the pass kept no {:?}", what(l))))?;
            for i in 0..b {
                let rows = v.slice(s![i * n..(i + 1) * n, ..]);
                let norms = crate::analysis::value_weighted::value_norms(rows, w, heads)
                    .map_err(|e| Error::Engine(format!("{id:?}: {e}")))?;
                out.slice_mut(s![i, l, .., ..]).assign(&norms);
            }
        }
        Ok(out)
    };
    let (enc_layers, enc_heads) = (c.num_hidden_layers, c.num_attention_heads);
    Ok(ValueNorms {
        encoder: of(
            Stack::Encoder,
            AttentionKind::SelfAttention,
            enc_layers,
            enc_heads,
            s,
            &|l| Kept::Layer(l, values::V),
        )?,
        decoder: of(
            Stack::Decoder,
            AttentionKind::SelfAttention,
            dec.layers,
            dec.heads,
            t,
            &|l| Kept::Decoder(l, values::V),
        )?,
        cross: of(
            Stack::Decoder,
            AttentionKind::Cross,
            dec.layers,
            dec.heads,
            s,
            &|l| Kept::Decoder(l, values::CROSS_V),
        )?,
    })
}

/// Teacher forcing: the decoder over each given output at once (see [`Decoding::Forced`]).
async fn forced<P: Passes>(
    model: &dyn Loaded,
    passes: &mut P,
    source: &Encoded,
    outputs: &[Vec<u32>],
) -> Result<Translation> {
    let c = model.config();
    let b = source.batch();
    let (target, decoder_mask, cross) = forced_inputs(model, source, outputs)?;
    let t = target.tokens.ncols();
    let Pass { mut groups, logits } = passes.whole(target, &decoder_mask, &cross).await?;
    let step_logits = logits
        .into_shape_with_order((b, t, c.vocab_size))
        .map_err(|e| Error::Engine(format!("the logits: {e}")))?;
    Ok(Translation {
        encoder_attention: AttentionGroup::take(
            &mut groups,
            Stack::Encoder,
            AttentionKind::SelfAttention,
        )?
        .probs,
        decoder_attention: AttentionGroup::take(
            &mut groups,
            Stack::Decoder,
            AttentionKind::SelfAttention,
        )?
        .probs,
        cross_attention: AttentionGroup::take(&mut groups, Stack::Decoder, AttentionKind::Cross)?
            .probs,
        source: source.clone(),
        output_ids: outputs.to_vec(),
        step_logits,
        step_ms: vec![],
    })
}

/// The CPU engine's passes: each computed when asked, a step's cache kept between steps.
struct CpuPasses<'m> {
    model: &'m dyn Loaded,
    passes: EncoderDecoder<'m>,
    source: &'m Encoded,
    encoder_mask: Mask,
    /// `(B, 1, S)`: a step's cross-attention mask.
    cross: Mask,
    cache: DecoderCache,
    opts: TraceOptions,
}

impl<'m> CpuPasses<'m> {
    fn new(model: &'m dyn Loaded, passes: EncoderDecoder<'m>, source: &'m Encoded) -> Result<Self> {
        Ok(Self {
            model,
            passes,
            source,
            encoder_mask: Mask::padding(source.valid.view()),
            cross: cross_mask(&source.valid, 1),
            cache: DecoderCache::default(),
            opts: pass_options(),
        })
    }
}

/// The masks of an encoder–decoder pass: the encoder's (the source's padding), the decoder's
/// self-attention's and the cross-attention's.
pub(crate) struct StackMasks<'a> {
    pub encoder: &'a Mask,
    pub decoder: &'a Mask,
    pub cross: &'a Mask,
}

impl<'a> From<StackMasks<'a>> for PassMasks<'a> {
    fn from(m: StackMasks<'a>) -> Self {
        PassMasks {
            encoder: Some(m.encoder),
            decoder: Some(m.decoder),
            cross: Some(m.cross),
        }
    }
}

/// One CPU pass of an encoder–decoder over `source` and `target` under `masks`, keeping what
/// `opts` asks; `run` drives the family's stacks on the engine's ops (the whole model, or a
/// later step's decoder alone, reading `cache`).
fn cpu_pass(
    model: &dyn Loaded,
    source: &Encoded,
    target: TargetInputs,
    masks: StackMasks,
    opts: &TraceOptions,
    cache: Option<&mut DecoderCache>,
    run: impl FnOnce(&mut CpuOps) -> Result<()>,
) -> Result<(Vec<AttentionGroup>, KeptValues)> {
    let inputs = source_inputs(source, target);
    let layers = stack_layers(model)?;
    let trace_layers = model.config().num_hidden_layers;
    let mut ops = CpuOps::new(&inputs, masks.into(), opts, layers, trace_layers, cache);
    run(&mut ops)?;
    ops.finish()
}

impl Passes for CpuPasses<'_> {
    async fn step(&mut self, t: usize, tokens: &[u32]) -> Result<Pass> {
        let m = self.passes;
        let decoder = Mask::none(tokens.len(), 1, t + 1);
        let masks = StackMasks {
            encoder: &self.encoder_mask,
            decoder: &decoder,
            cross: &self.cross,
        };
        let target = step_inputs(t, tokens);
        let cache = Some(&mut self.cache);
        let (groups, kept) = cpu_pass(
            self.model,
            self.source,
            target,
            masks,
            &self.opts,
            cache,
            |ops| {
                // the first step runs the encoder too, and caches its keys and values for the rest
                if t == 0 {
                    m.forward(EngineOps::Cpu(ops))
                } else {
                    m.decode_cached(EngineOps::Cpu(ops))
                }
            },
        )?;
        Ok(Pass {
            groups,
            logits: logits_of(kept)?,
        })
    }

    async fn whole(&mut self, target: TargetInputs, decoder: &Mask, cross: &Mask) -> Result<Pass> {
        let m = self.passes;
        let masks = StackMasks {
            encoder: &self.encoder_mask,
            decoder,
            cross,
        };
        let (groups, kept) = cpu_pass(
            self.model,
            self.source,
            target,
            masks,
            &self.opts,
            None,
            |ops| m.forward(EngineOps::Cpu(ops)),
        )?;
        Ok(Pass {
            groups,
            logits: logits_of(kept)?,
        })
    }
}
