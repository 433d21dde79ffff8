//! The CPU engine's forward pass: the model's family written over [`CpuOps`].

use super::exec::{CpuOps, StackLayers};
use crate::engine::network::EngineOps;
use crate::engine::network::Loaded;
use crate::engine::ops::{AttentionKind, PassMasks};
use crate::engine::AttentionGroup;
use crate::engine::{check_input, Trace, TraceOptions};
use crate::error::Result;
use crate::linalg::team::with_team;
use crate::masks::Mask;
use crate::model::Encoded;

/// The model over a padded batch, keeping every layer's and head's attention and what `opts`
/// asks for besides (scores, every layer's hidden states, one layer's trace).
///
/// # Shapes
/// * `input.ids`, `input.type_ids`: `(B, T)`; `mask`: `(B, T, T)`
/// * the trace: see [`Trace`]
pub fn forward(
    model: &dyn Loaded,
    input: &Encoded,
    mask: &Mask,
    opts: &TraceOptions,
) -> Result<Trace> {
    pass_on_the_pool(|| forward_here(model, input, mask, opts))
}

/// Runs `f` on one of rayon's threads. Every parallel step of a pass (the heads, a product's
/// panels, GELU's chunks) is then a job on the pool's own queues, which its other threads
/// steal; from outside the pool each one would be handed over and waited for, fifty times a
/// pass (150 times a decoding step). In the browser that hand-over is a message through shared
/// memory and a wake-up, and it cost more than a 16-token pass gained from the second thread;
/// natively, with a pool of one thread (`attnscope bench --threads 1`), the hand-overs took two
/// fifths of a decoding step. The caller waits once, for the whole pass.
pub(crate) fn on_the_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    // the single-threaded wasm build has no pool: `f` runs where it is
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    if rayon::current_thread_index().is_none() {
        return rayon::join(f, || ()).0;
    }
    f()
}

/// Runs pass `f` on one of rayon's threads ([`on_the_pool`]); in the browser, with the pool's
/// other threads held for it as a team ([`with_team`]): they spin between its parallel steps
/// rather than sleep. Woken for each step, they cost a MiniLM pass of 128 tokens 34 ms when
/// it came right after another and 60 ms after 300 ms without one (as a keystroke comes): a
/// wake from a long sleep is slower (docs/speed.md, "a pass after a pause"). Natively rayon's
/// threads yield a while before they sleep, and its hand-overs are quick.
pub(crate) fn pass_on_the_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    on_the_pool(|| match cfg!(target_arch = "wasm32") {
        true => with_team(f),
        false => f(),
    })
}

/// [`forward`], on the calling thread.
fn forward_here(
    model: &dyn Loaded,
    input: &Encoded,
    mask: &Mask,
    opts: &TraceOptions,
) -> Result<Trace> {
    let c = model.config();
    check_input(c, input, mask, opts)?;
    let inputs = model.inputs(input);
    let stack = model.stack();
    let mut ops = CpuOps::new(
        &inputs,
        PassMasks::single(stack, mask),
        opts,
        StackLayers::single(stack, c.num_hidden_layers),
        c.num_hidden_layers,
        None,
    );
    model.run(EngineOps::Cpu(&mut ops))?;
    let (mut groups, kept) = ops.finish()?;
    let attention = AttentionGroup::take(&mut groups, stack, AttentionKind::SelfAttention)?;
    let mut trace = Trace::assemble(attention, kept, opts, &c.architecture.layers, mask)?;
    trace.logits = model.logits(&trace.hidden);
    Ok(trace)
}
