//! Typing at the end of a text: a decoder-only model's causal pass that reuses what the last pass
//! over the same beginning computed. Under the causal mask a position reads only the positions
//! before it, so every value of the tokens two texts share at their start is the same in both
//! passes: their keys and values (the cache a decoding keeps), their queries, and everything
//! kept per position (hidden states, the traced layer's values, the LM head's logits). The
//! pass runs the layers over the new tokens alone, reading the kept keys and values, and
//! computes the attention of every position's rows from the kept queries and the new ones (a
//! few `T × T` products: the projections, the feed-forward and the LM head are the cost, and
//! they run on the new tokens only). A long text's pass, which keeps the queries and keys and
//! folds each head's thumbnails ([`AttentionKept::QueriesKeys`]), resumes the last pass's
//! thumbnails instead: its attention is the new positions' rows alone (or, where the text
//! changed before its last row of bins, those from the first of the row of bins it changed
//! in). The kept keys, values and queries take the new rows in place: nothing is copied where
//! nothing else holds them (the session drops a long run's before the next pass). What it
//! returns equals [`super::forward`] over the whole text.

use std::sync::Arc;

use ndarray::{concatenate, s, Axis};

use super::exec::{CpuOps, DecoderCache, StackLayers};
use super::forward::{forward, pass_on_the_pool};
use crate::engine::generate::pass_inputs;
use crate::engine::network::EngineOps;
use crate::engine::network::Loaded;
use crate::engine::ops::{AttentionKind, Kept, PassMasks};
use crate::engine::trace::KeptValues;
use crate::engine::{check_input, AttentionGroup, AttentionKept, Trace, TraceOptions};
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::config::{Config, ModelKind};
use crate::model::limits::MAX_QUERIES_KEYS;
use crate::model::Encoded;

/// The longest text whose pass is kept for the next.
pub const MAX_PREFIX_TOKENS: usize = 64;

/// The most memory the kept passes hold together, their per-position values and caches (for
/// SmolLM2-135M about 0.31 MB a token, its LM head's logits over 49,152 tokens 0.2 MB of it, and
/// 0.52 MB with every layer's writes to the residual stream: two passes of 64 tokens are kept,
/// a knock-out's and the plain one beside it, with their writes too). The oldest go first; a
/// pass larger than this is not kept.
pub const MAX_KEPT_BYTES: usize = 72 << 20;

/// The most memory a long text's kept pass holds ([`AttentionKept::QueriesKeys`]: each
/// layer's keys, values and queries, and its per-position values; SmolLM2-135M: 0.12 MB a
/// token). Its queries and keys are the run's own (shared, not copied), at most
/// [`MAX_QUERIES_KEYS`] of them (768 MiB), and its values, with their norms, at most as many
/// again (a model whose every head has its own keys and values): any long text that runs is
/// kept for typing on, unless it keeps every layer's hidden states or the LM head's logits at
/// every position (0.2 MB a token for SmolLM2). A long text's pass is kept alone.
pub const MAX_LONG_KEPT_BYTES: usize = 9 * MAX_QUERIES_KEYS;

/// How many passes under different options are kept (a page runs a text under its options, and
/// with heads knocked out also without them).
const KEPT_PASSES: usize = 2;

/// What one pass over a text kept for the next: its token ids, its options, each layer's keys,
/// values and queries, and its per-position values.
#[derive(Debug)]
struct KeptPass {
    ids: Vec<u32>,
    opts: TraceOptions,
    cache: DecoderCache,
    values: KeptValues,
}

impl KeptPass {
    fn bytes(&self) -> usize {
        let values: usize = self
            .values
            .values()
            .map(|x| x.len() * std::mem::size_of::<f32>())
            .sum();
        values + self.cache.bytes()
    }
}

/// The last passes of a session, the newest last ([`forward_reusing`]).
#[derive(Debug, Default)]
pub struct Prefixes {
    kept: Vec<KeptPass>,
}

/// A pass's trace and how many of its first positions came from the last pass (0: none).
#[derive(Debug)]
pub struct Reused {
    pub trace: Trace,
    pub reused: usize,
}

/// About what a pass over `t` tokens keeps ([`KeptPass::bytes`]), from the config: each layer's
/// keys, values and queries, and the per-position values `opts` asks for (the LM head's logits,
/// every layer's hidden states, the traced layer's values, every layer's value vectors, context
/// and sum after attention, the model's output). A pass that
/// would keep more than [`MAX_KEPT_BYTES`] runs whole, so it never holds them even for a moment.
pub(crate) fn kept_bytes(c: &Config, opts: &TraceOptions, t: usize) -> usize {
    let a = &c.architecture;
    let (d, h, kv) = (a.head_dim, a.heads.query, a.heads.key_value);
    let cache = c.num_hidden_layers * (2 * kv * d + h * d);
    let lm = if opts.lm_logits { c.vocab_size } else { 0 };
    let states = if opts.hidden_states || opts.writes {
        (c.num_hidden_layers + 1) * c.hidden_size
    } else {
        c.hidden_size
    };
    // the traced layer: its norms, Q, K, V, rotated Q and K, context and sums (≈ 12 D), its
    // feed-forward's gate, up and product (3 F)
    let traced = if opts.layer_trace.is_some() {
        12 * c.hidden_size + 3 * c.intermediate_size
    } else {
        0
    };
    let values = if opts.values { kv * d } else { 0 };
    let writes = if opts.writes {
        h * d + c.hidden_size
    } else {
        0
    };
    let layers = c.num_hidden_layers * (values + writes);
    t * std::mem::size_of::<f32>() * (cache + lm + states + traced + layers)
}

/// [`forward`], reusing the positions `input` shares at its start with the last pass under the
/// same `opts` that `prefixes` kept; then keeps this pass for the next. A pass reuses when the
/// model is decoder-only, the batch one text under the causal mask, and at least its first
/// token is the same: a pass keeping every probability of at most [`MAX_PREFIX_TOKENS`] tokens,
/// or a long text's keeping the queries and keys, up to [`MAX_LONG_KEPT_BYTES`]; at least its
/// last token is always computed. Any other pass runs whole, and is not kept.
///
/// # Shapes
/// * as [`forward`]
pub fn forward_reusing(
    model: &dyn Loaded,
    input: &Encoded,
    mask: &Mask,
    opts: &TraceOptions,
    prefixes: &mut Prefixes,
) -> Result<Reused> {
    let c = model.config();
    check_input(c, input, mask, opts)?;
    let (b, t) = input.ids.dim();
    let long = opts.attention == AttentionKept::QueriesKeys;
    let fits = match long {
        false => t <= MAX_PREFIX_TOKENS && kept_bytes(c, opts, t) <= MAX_KEPT_BYTES,
        true => kept_bytes(c, opts, t) <= MAX_LONG_KEPT_BYTES,
    };
    let reusable = c.architecture.kind == ModelKind::Decoder
        && b == 1
        && fits
        && input.length(0) == t
        && opts.decoder_trace.is_none()
        && (!opts.next_logits || long)
        && mask.dim() == (1, t, t)
        && mask.is_causal();
    if !reusable {
        let trace = forward(model, input, mask, opts)?;
        return Ok(Reused { trace, reused: 0 });
    }
    let ids: Vec<u32> = input.ids.row(0).to_vec();
    let last = prefixes.kept.iter().position(|k| k.opts == *opts);
    let last = last.map(|i| prefixes.kept.remove(i));
    // the positions both texts begin with, the last always computed
    let shared = last.as_ref().map_or(0, |k| {
        let same = k.ids.iter().zip(&ids).take_while(|(a, b)| a == b).count();
        same.min(t - 1)
    });
    // (a pass that shares nothing frees the last one's before it runs)
    let (mut cache, old) = match last.filter(|_| shared > 0) {
        Some(mut k) => {
            k.cache.truncate(shared);
            (k.cache, Some(k.values))
        }
        None => (DecoderCache::with_queries(), None),
    };
    let pass = || -> Result<_> {
        let inputs = pass_inputs(&ids[shared..], shared);
        let stack = model.stack();
        let layers = c.num_hidden_layers;
        let mut ops = CpuOps::new(
            &inputs,
            PassMasks::single(stack, mask),
            opts,
            StackLayers::single(stack, layers),
            layers,
            Some(&mut cache),
        );
        model.run(EngineOps::Cpu(&mut ops))?;
        let (mut groups, mut values) = ops.finish()?;
        // each kept value: the shared positions' rows from the last pass, then the new ones'
        // (the queries and keys are every position's already: the cache's; the LM head's
        // logits at the last position are the text's)
        let whole = |k: &Kept| matches!(k, Kept::Queries(_) | Kept::Keys(_) | Kept::NextLogits);
        if let Some(old) = &old {
            for (what, x) in values.iter_mut().filter(|(k, _)| !whole(k)) {
                let before = old.get(what).ok_or_else(|| {
                    Error::Engine(format!("the last pass kept no {what:?} to reuse"))
                })?;
                let joined = concatenate(Axis(0), &[before.slice(s![..shared, ..]), x.view()])
                    .map_err(|e| Error::Engine(format!("{what:?}: {e}")))?;
                *x = Arc::new(joined);
            }
        }
        // what the next pass reads of this one (the cache holds the queries and keys)
        let next: KeptValues = values
            .iter()
            .filter(|(k, _)| !whole(k))
            .map(|(k, x)| (*k, x.clone()))
            .collect();
        let attention = AttentionGroup::take(&mut groups, stack, AttentionKind::SelfAttention)?;
        let mut trace = Trace::assemble(attention, values, opts, &c.architecture.layers, mask)?;
        trace.logits = model.logits(&trace.hidden);
        Ok((trace, next))
    };
    let (trace, values) = pass_on_the_pool(pass)?;
    let pass = KeptPass {
        ids,
        opts: opts.clone(),
        cache,
        values,
    };
    match long {
        // a long text's pass alone: it takes the place of every other
        true if pass.bytes() <= MAX_LONG_KEPT_BYTES => prefixes.kept = vec![pass],
        true => prefixes.kept.clear(),
        false => {
            if pass.bytes() <= MAX_KEPT_BYTES {
                prefixes.kept.push(pass);
            }
            // the oldest go while there are too many, or they hold too much
            while prefixes.kept.len() > KEPT_PASSES
                || prefixes.kept.iter().map(KeptPass::bytes).sum::<usize>() > MAX_KEPT_BYTES
            {
                prefixes.kept.remove(0);
            }
        }
    }
    Ok(Reused {
        trace,
        reused: shared,
    })
}
