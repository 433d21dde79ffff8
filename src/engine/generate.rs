//! A decoder-only model writing text after a prompt, one token at a time: the prompt in one
//! causal pass (the prefill), then one pass per new token over that token alone, its keys and
//! values appended to each layer's cache of the positions before it (HF's
//! `generate(do_sample=False)` with `use_cache=True`). Every attention is kept: the prefill's
//! `(P × P)` and each step's row over every position so far, assembled into the attention of
//! one causal pass over everything the model was fed.

use std::future::Future;

use ndarray::{s, Array2, Array4, Array5, ArrayView1, ArrayView2, Axis};

use super::cpu::exec::{CpuOps, DecoderCache, StackLayers};
use super::cpu::{self, pass_on_the_pool};
use super::network::EngineOps;
use super::ops::{AttentionKind, Kept, PassMasks, Stack};
use super::trace::{AttentionGroup, HeadMask, KeptValues, ModelInputs, Numerics, TraceOptions};
use crate::engine::network::Loaded;
use crate::engine::GpuTiming;
use crate::error::{Error, Result};
use crate::masks::Mask;
use crate::model::config::{Config, ModelKind};
use crate::model::limits::MAX_ATTENTION_VALUES;

/// How many new tokens to write, how many likeliest tokens to report at each position, and
/// which heads are knocked out while writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateOptions {
    /// At most this many new tokens (fewer when EOS comes first).
    pub max_new_tokens: usize,
    /// The `top_k` likeliest next tokens kept at each position fed to the model.
    pub top_k: usize,
    /// Stop at the model's EOS token (HF's `generate`); `false` writes all `max_new_tokens`
    /// whatever they are (a benchmark's fixed length).
    pub stop_at_eos: bool,
    /// Heads knocked out in every pass, the prompt's and each step's (see [`HeadMask`]).
    pub head_mask: HeadMask,
    /// How the CPU engine multiplies by 4-bit matrices (see [`Numerics`]).
    pub numerics: Numerics,
}

/// A token and its probability (the softmax of its position's logits over the vocabulary); read
/// from a run's `{id, token, text, p}` too (the page's long generation: the other fields left).
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
pub struct TokenProb {
    pub id: u32,
    pub p: f32,
}

/// A prompt and what the model wrote after it, greedily.
///
/// # Shapes
/// * `N = len(prompt_ids) + len(output_ids) − 1`: every position the model was fed
/// * `attention`: `(L, H, N, N)`, H the query heads: equal to one causal pass over the prompt
///   and the output but its last token; row `P − 1 + i` is the step that wrote `output_ids[i]`
/// * `next`: `[len(output_ids)][top_k]`, the likeliest next tokens at the step that wrote each
///   output token (after position `P − 1 + i`), best first
/// * `step_ms`: `(len(output_ids),)`, each step's time (the first's is the prefill's)
#[derive(Debug, Clone)]
pub struct Generation {
    pub prompt_ids: Vec<u32>,
    /// The new tokens, EOS last when it was reached.
    pub output_ids: Vec<u32>,
    pub attention: Array4<f32>,
    pub next: Vec<Vec<TokenProb>>,
    pub step_ms: Vec<f64>,
    /// On the GPU: where each pass's time went, and what it replays.
    pub gpu: Option<GpuPasses>,
}

/// A generation's passes on the GPU: each pass's time in its phases (the prefill's first, as
/// `step_ms`), and how many dispatches the prefill's recorded pass and a step's replay (a
/// step's are the same at every token: only what the host writes changes).
#[derive(Debug, Clone, Default)]
pub struct GpuPasses {
    pub timing: Vec<GpuTiming>,
    pub prefill_dispatches: usize,
    pub step_dispatches: usize,
}

impl Generation {
    /// Every token the model was fed: the prompt and the output but its last, `(N,)`.
    pub fn fed(&self) -> Vec<u32> {
        let mut ids = self.prompt_ids.clone();
        ids.extend_from_slice(&self.output_ids[..self.output_ids.len().saturating_sub(1)]);
        ids
    }
}

/// One pass of a generation: the decoder's attention `(1, L, H, n_q, n_k)` and the logits of
/// its last position, `(V,)`, and the `top_k` next tokens after it; on the GPU, where its time
/// went.
pub struct StepPass {
    pub attention: Array5<f32>,
    pub logits: ndarray::Array1<f32>,
    pub next: Vec<TokenProb>,
    pub gpu: Option<GpuTiming>,
}

impl StepPass {
    /// A pass's `attention` and what it `kept`: the logits of its last position
    /// ([`Kept::NextLogits`], `(1, V)`).
    pub(crate) fn new(attention: Array5<f32>, mut kept: KeptValues, top: usize) -> Result<Self> {
        let logits = kept
            .remove(&Kept::NextLogits)
            .ok_or_else(|| Error::Engine("the pass kept no logits".into()))?; // (1, V)
        Ok(Self {
            attention,
            next: top_k(logits.view(), top).swap_remove(0),
            logits: logits.row(0).to_owned(),
            gpu: None,
        })
    }
}

/// The passes an engine runs for a generation: the driver ([`run`]) picks the tokens.
pub(crate) trait Steps {
    /// The prompt `(P,)` at positions `0..P` under the causal mask, filling the cache.
    fn prefill(&mut self, ids: &[u32]) -> impl Future<Output = Result<StepPass>>;
    /// `token` at position `n`, reading the cache of positions `0..n` and adding its own.
    fn step(&mut self, n: usize, token: u32) -> impl Future<Output = Result<StepPass>>;
    /// The dispatches the prefill's pass and a step's replay, on the GPU.
    fn dispatches(&self) -> Option<(usize, usize)> {
        None
    }
}

/// Writes after `prompt` greedily with a decoder-only `model` on the CPU engine.
pub fn generate(model: &dyn Loaded, prompt: &[u32], opts: &GenerateOptions) -> Result<Generation> {
    check(model, prompt, opts)?;
    {
        let mut steps = CpuSteps::new(model, opts);
        let run = std::pin::pin!(run(model, &mut steps, prompt, opts));
        // the CPU's passes never wait: polled once, the future is done
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match run.poll(&mut cx) {
            std::task::Poll::Ready(done) => done,
            std::task::Poll::Pending => Err(Error::Engine(
                "the CPU engine's generation waited for something".into(),
            )),
        }
    }
}

/// Refuses a generation the model cannot run: not a decoder-only model with an LM head, an
/// empty prompt, no new token asked for, or more positions than the model has, its window
/// allows or a pass may keep attention for.
pub fn check(model: &dyn Loaded, prompt: &[u32], opts: &GenerateOptions) -> Result<()> {
    check_prompt(model, prompt, opts)?;
    keeps_attention(model.config(), positions(prompt, opts))
}

/// Every position a generation of `prompt` under `opts` may feed: the prompt's and the new
/// tokens' but the last.
pub fn positions(prompt: &[u32], opts: &GenerateOptions) -> usize {
    prompt.len() + opts.max_new_tokens.max(1) - 1
}

/// [`check`] but the bound on the attention a generation keeps: what a generation whose passes
/// keep each layer's queries and keys must hold (the page's long generation, a pass of a long
/// text a step), with the bound such a pass checks itself.
pub fn check_prompt(model: &dyn Loaded, prompt: &[u32], opts: &GenerateOptions) -> Result<()> {
    let c = model.config();
    if c.architecture.kind != ModelKind::Decoder || !model.network().has_lm_head() {
        return Err(Error::Input(format!(
            "{} is not a decoder-only model with an LM head: `generate` needs one (gpt2, llama, \
             mistral, qwen2)",
            model.name()
        )));
    }
    if prompt.is_empty() {
        return Err(Error::Input("the prompt has no tokens".into()));
    }
    opts.head_mask
        .check(c.num_hidden_layers, c.num_attention_heads)?;
    if opts.max_new_tokens == 0 {
        return Err(Error::Input("max_new_tokens must be at least 1".into()));
    }
    if let Some(&id) = prompt.iter().find(|&&id| id as usize >= c.vocab_size) {
        return Err(Error::Input(format!(
            "token id {id} is outside the model's vocabulary (vocab_size {})",
            c.vocab_size
        )));
    }
    let n = positions(prompt, opts);
    if n > c.max_tokens() {
        return Err(Error::Input(format!(
            "a prompt of {} tokens and {} new ones need {n} positions: the model has {}",
            prompt.len(),
            opts.max_new_tokens,
            c.max_tokens()
        )));
    }
    Ok(())
}

/// Refuses a generation over `n` positions whose every attention, `(L, H, n, n)`, would be over
/// [`MAX_ATTENTION_VALUES`].
pub fn keeps_attention(c: &Config, n: usize) -> Result<()> {
    let values = (c.num_hidden_layers * c.num_attention_heads) as u128 * (n * n) as u128;
    if values > MAX_ATTENTION_VALUES as u128 {
        return Err(Error::Input(format!(
            "{n} positions would keep {values} attention probabilities ({} layers × {} heads × \
             {n}²), over the limit of {MAX_ATTENTION_VALUES}",
            c.num_hidden_layers, c.num_attention_heads
        )));
    }
    Ok(())
}

/// Greedy generation with `steps`: the driver of every engine.
pub(crate) async fn run<S: Steps>(
    model: &dyn Loaded,
    steps: &mut S,
    prompt: &[u32],
    opts: &GenerateOptions,
) -> Result<Generation> {
    let mut state = Greedy::new(model, prompt, opts);
    let mut rows = Vec::with_capacity(opts.max_new_tokens); // each pass's attention
    let mut start = web_time::Instant::now();
    let mut pass = steps.prefill(prompt).await?;
    loop {
        rows.push(std::mem::take(&mut pass.attention));
        let Some((n, token)) = state.accept(pass, start.elapsed().as_secs_f64() * 1e3) else {
            break;
        };
        start = web_time::Instant::now();
        pass = steps.step(n, token).await?;
    }
    let attention = causal_map(prompt.len(), &rows);
    let gpu = steps.dispatches().map(|(prefill, step)| GpuPasses {
        timing: std::mem::take(&mut state.gpu_timing),
        prefill_dispatches: prefill,
        step_dispatches: step,
    });
    Ok(Generation {
        prompt_ids: state.prompt_ids,
        output_ids: state.output_ids,
        attention,
        next: state.next,
        step_ms: state.step_ms,
        gpu,
    })
}

/// Each pass's attention, `(1, L, H, n_q, n_k)` (the prefill's over the prompt's `p`
/// positions, then one row a step), assembled into one causal map.
///
/// # Shapes
/// * `rows`: `(1, L, H, p, p)`, then `(1, L, H, 1, p + i)` for step `i ≥ 1` → `(L, H, N, N)`,
///   `N = p + len(rows) − 1`
fn causal_map(p: usize, rows: &[Array5<f32>]) -> Array4<f32> {
    let n = p + rows.len() - 1;
    let (_, l, h, _, _) = rows[0].dim();
    let mut attention = Array4::zeros((l, h, n, n));
    attention
        .slice_mut(s![.., .., ..p, ..p])
        .assign(&rows[0].slice(s![0, .., .., .., ..]));
    // the step that fed position `q` (the last token written is never fed): its one row
    for (i, row) in rows.iter().enumerate().skip(1) {
        let q = p + i - 1;
        attention
            .slice_mut(s![.., .., q, ..=q])
            .assign(&row.slice(s![0, .., .., 0, ..]));
    }
    attention
}

/// Where a greedy generation stands: what it has written so far. It takes each pass's result
/// ([`Greedy::accept`]) and says what to feed next, so a caller may drive it one token at a
/// time (the page shows each as it comes); the passes' attention is the caller's to keep.
#[derive(Debug, Clone)]
pub struct Greedy {
    prompt_ids: Vec<u32>,
    output_ids: Vec<u32>,
    /// Each pass's likeliest next tokens.
    next: Vec<Vec<TokenProb>>,
    step_ms: Vec<f64>,
    /// Each pass's phases, where a GPU ran it.
    gpu_timing: Vec<GpuTiming>,
    eos: Vec<u32>,
    max_new_tokens: usize,
}

impl Greedy {
    pub fn new(model: &dyn Loaded, prompt: &[u32], opts: &GenerateOptions) -> Self {
        Self {
            prompt_ids: prompt.to_vec(),
            output_ids: Vec::with_capacity(opts.max_new_tokens),
            next: Vec::new(),
            step_ms: Vec::with_capacity(opts.max_new_tokens),
            gpu_timing: Vec::new(),
            eos: if opts.stop_at_eos {
                model.config().eos_token_ids.clone()
            } else {
                vec![]
            },
            max_new_tokens: opts.max_new_tokens,
        }
    }

    /// Takes a pass's logits and likeliest tokens (it took `ms`) and writes its likeliest token;
    /// returns the
    /// position and token the next pass feeds, or `None` when the generation is over (EOS, or
    /// `max_new_tokens` written).
    pub(crate) fn accept(&mut self, pass: StepPass, ms: f64) -> Option<(usize, u32)> {
        self.gpu_timing.extend(pass.gpu);
        self.write(argmax(pass.logits.view()), pass.next, ms)
    }

    /// Takes a pass's likeliest next tokens alone, best first (a pass of a long text keeps the
    /// logits of its last position only as these: [`top_k`]), and writes the first: the
    /// likeliest, the first of equals as [`argmax`] takes it. What comes next as
    /// [`Greedy::accept`]; an error when `next` is empty.
    pub fn accept_next(&mut self, next: Vec<TokenProb>, ms: f64) -> Result<Option<(usize, u32)>> {
        let token = next
            .first()
            .ok_or_else(|| Error::Input("a pass's likeliest next tokens: none given".into()))?
            .id;
        Ok(self.write(token, next, ms))
    }

    /// Writes `token`, the pass's likeliest of `next`.
    fn write(&mut self, token: u32, next: Vec<TokenProb>, ms: f64) -> Option<(usize, u32)> {
        self.step_ms.push(ms);
        self.next.push(next);
        self.output_ids.push(token);
        let over = self.eos.contains(&token) || self.output_ids.len() >= self.max_new_tokens;
        (!over).then(|| (self.prompt_ids.len() + self.output_ids.len() - 1, token))
    }

    /// The prompt's tokens.
    pub fn prompt_ids(&self) -> &[u32] {
        &self.prompt_ids
    }

    /// The tokens written so far.
    pub fn output_ids(&self) -> &[u32] {
        &self.output_ids
    }

    /// The likeliest tokens at the step that wrote output token `i`.
    pub fn step_top_k(&self, i: usize) -> &[TokenProb] {
        &self.next[i]
    }

    /// Whether the last token written ends the generation.
    pub fn is_over(&self) -> bool {
        self.output_ids.last().is_some_and(|t| self.eos.contains(t))
            || self.output_ids.len() >= self.max_new_tokens
    }

    /// The time each pass took so far, in ms.
    pub fn step_ms(&self) -> &[f64] {
        &self.step_ms
    }
}

/// The likeliest token (the first of equals, as `argmax`).
fn argmax(logits: ArrayView1<f32>) -> u32 {
    let mut best = (f32::NEG_INFINITY, 0u32);
    for (i, &v) in logits.iter().enumerate() {
        if v > best.0 {
            best = (v, i as u32);
        }
    }
    best.1
}

/// The `k` likeliest next tokens after each row of `logits`, best first (of equal logits, the
/// lower id first), with their probabilities (the softmax of the row over the vocabulary).
///
/// A row is read twice: once for its `k` largest logits (a sorted list of `k` that most values
/// only compare with its last), once for the softmax's denominator `Σ e^(v − max)`, added in
/// lanes by [`cpu::sum_exp`] (a loop that vectorises). Rows run in parallel. Nothing of `(n, V)`
/// is allocated: a 39-token prompt's rows over SmolLM2's 49,152 tokens took 65 ms in wasm as a
/// softmax of every value then a partial sort of every row's indices, and a few ms so.
///
/// # Shapes
/// * `logits`: `(n, V)` → `[n][min(k, V)]`
pub fn top_k(logits: ArrayView2<f32>, k: usize) -> Vec<Vec<TokenProb>> {
    use ndarray::parallel::prelude::*;
    logits
        .axis_iter(Axis(0))
        .into_par_iter()
        .map(|row| {
            let row = row
                .as_slice()
                .map_or_else(|| row.to_vec().into(), std::borrow::Cow::Borrowed);
            let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
            for (i, &v) in row.iter().enumerate() {
                if best.len() == k && !best.last().is_some_and(|&(w, _)| v > w) {
                    continue;
                }
                // after every value at least as large: equals keep the order they came in
                let at = best.partition_point(|&(w, _)| w >= v);
                best.insert(at, (v, i as u32));
                best.truncate(k);
            }
            let Some(&(max, _)) = best.first() else {
                return vec![];
            };
            let sum = cpu::sum_exp(&row, max);
            best.into_iter()
                .map(|(v, id)| TokenProb {
                    id,
                    p: cpu::exp_nonpositive(v - max) / sum,
                })
                .collect()
        })
        .collect()
}

/// The CPU engine's passes, the cache kept between them; `M` holds the model (a reference, or
/// the page's shared `Arc`).
pub struct CpuSteps<M: Loaded> {
    model: M,
    cache: DecoderCache,
    opts: TraceOptions,
    top_k: usize,
}

impl<M: Loaded> CpuSteps<M> {
    /// The passes of a generation under `opts` (its head mask and top-k).
    pub fn new(model: M, opts: &GenerateOptions) -> Self {
        Self {
            model,
            cache: DecoderCache::default(),
            opts: TraceOptions {
                next_logits: true,
                head_mask: opts.head_mask.clone(),
                numerics: opts.numerics,
                ..TraceOptions::default()
            },
            top_k: opts.top_k,
        }
    }

    /// The decoder over `ids` at positions `first..` under `mask`, reading and filling the
    /// cache.
    fn pass(&mut self, ids: &[u32], first: usize, mask: &Mask) -> Result<StepPass> {
        let inputs = pass_inputs(ids, first);
        let model = &self.model;
        let layers = model.config().num_hidden_layers;
        let mut ops = CpuOps::new(
            &inputs,
            PassMasks::single(Stack::Decoder, mask),
            &self.opts,
            StackLayers::single(Stack::Decoder, layers),
            layers,
            Some(&mut self.cache),
        );
        model.run(EngineOps::Cpu(&mut ops))?;
        let (mut groups, kept) = ops.finish()?;
        let attention =
            AttentionGroup::take(&mut groups, Stack::Decoder, AttentionKind::SelfAttention)?.probs;
        StepPass::new(attention, kept, self.top_k)
    }
}

/// The inputs of a pass over `ids` at positions `first..first + n`, `(1, n)` each.
pub(crate) fn pass_inputs(ids: &[u32], first: usize) -> ModelInputs {
    let n = ids.len();
    ModelInputs {
        tokens: Array2::from_shape_fn((1, n), |(_, j)| ids[j]),
        token_types: Array2::zeros((1, n)),
        positions: Array2::from_shape_fn((1, n), |(_, j)| (first + j) as u32),
        target: None,
    }
}

impl<M: Loaded + Send> CpuSteps<M> {
    /// [`Steps::prefill`], on the calling thread's pool.
    pub(crate) fn prefill_now(&mut self, ids: &[u32]) -> Result<StepPass> {
        pass_on_the_pool(|| self.pass(ids, 0, &Mask::causal(1, ids.len())))
    }

    /// [`Steps::step`], on the calling thread's pool. In the browser its other threads wait
    /// for the step's products as a team (a step is ~200 short ones: [`crate::linalg::team`]):
    /// waking them for each was slower there. Natively rayon's own hand-overs are quick, and
    /// the team, whose other threads leave rayon's parallel loops (`q`, `k` and `v` side by
    /// side) to the step's thread, measured slower (140 against 171 tokens/s on 2 threads,
    /// docs/speed.md).
    pub(crate) fn step_now(&mut self, n: usize, token: u32) -> Result<StepPass> {
        pass_on_the_pool(|| self.pass(&[token], n, &Mask::none(1, 1, n + 1)))
    }
}

impl<M: Loaded + Send> Steps for CpuSteps<M> {
    async fn prefill(&mut self, ids: &[u32]) -> Result<StepPass> {
        self.prefill_now(ids)
    }

    async fn step(&mut self, n: usize, token: u32) -> Result<StepPass> {
        self.step_now(n, token)
    }
}
