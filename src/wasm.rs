//! The browser API (`#[wasm_bindgen]`): the only place errors become `JsError`.
//!
//! The page's worker loads a checkpoint from three byte buffers, then runs texts. A run comes
//! back as the contract of [`crate::report`]: a [`RunInfo`] through `serde-wasm-bindgen`, with the
//! tensors beside it as flat typed arrays (transferred to the page, never copied into nested JS
//! arrays here).

use js_sys::{Float32Array, Object, Reflect, Uint8Array};
use serde::Serialize;
use wasm_bindgen::prelude::*;
use web_time::Instant;

use crate::analysis::flow::Flow;
use crate::analysis::logit_attribution::read_out;
use crate::analysis::positions::{learned_position_similarity, sinusoidal_similarity};
use crate::analysis::scaling::variance_experiment;
use crate::analysis::stack::layer_similarity;
use crate::analysis::thumbnail::{Part, PoolFold};
use crate::analysis::value_weighted::key_value_norms;
use crate::analysis::{heads::METRICS, roles::ROLES, rollout, sentence_embedding};
use crate::analysis::{AttributionOptions, HeadMetrics, HeadRoles, LogitAttribution, Repeated};
use crate::checkpoint::ChatFiles;
use crate::engine::ops::{AttentionKind, Stack};
use crate::engine::progress::{PassProgress, Progress};
use crate::engine::{
    cpu, AttentionKept, BackendChoice, Decoding, HeadMask, Numerics, QueriesKeys, Run, Runner,
    ScoreScale, TraceOptions,
};
use crate::masks::{Mask, MaskKind};
use crate::model::{limits, Encoded, WeightsFile, CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE};
use crate::report::{
    item_attention, next_tokens, predictions, DecoderTraceItem, ItemInput, ModelInfo, PaddedBatch,
    RunInfo, TranslationReport,
};
use crate::Model;

/// The threaded build's `initThreadPool(n)`: starts rayon's `n` threads on Web Workers sharing
/// this module's memory (the worker calls it once, after `init`, where the page is
/// cross-origin isolated).
#[cfg(feature = "threads")]
pub use wasm_bindgen_rayon::init_thread_pool;

/// A value's name as the page reads it: `attention_output` as `attentionOutput`.
fn camel_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for ch in name.chars() {
        match ch {
            '_' => upper = true,
            _ if upper => {
                out.extend(ch.to_uppercase());
                upper = false;
            }
            _ => out.push(ch),
        }
    }
    out
}

fn js_err(e: crate::Error) -> JsError {
    JsError::new(&e.to_string())
}

fn to_js(value: &impl Serialize) -> Result<JsValue, JsError> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| JsError::new(&format!("cannot hand the result to the page: {e}")))
}

fn set(obj: &Object, key: &str, value: impl Into<JsValue>) -> Result<(), JsError> {
    Reflect::set(obj, &key.into(), &value.into())
        .map(|_| ())
        .map_err(|_| JsError::new(&format!("cannot set {key}")))
}

/// `a`'s values in logical (row-major) order, copied into a new JS array.
fn flat<S: ndarray::Data<Elem = f32>, D: ndarray::Dimension>(
    a: &ndarray::ArrayBase<S, D>,
) -> Float32Array {
    Float32Array::from(&*row_major(a))
}

/// `a`'s values in row-major order: `a`'s own where it holds them so, else a copy.
fn row_major<S: ndarray::Data<Elem = f32>, D: ndarray::Dimension>(
    a: &ndarray::ArrayBase<S, D>,
) -> std::borrow::Cow<'_, [f32]> {
    match a.as_slice() {
        Some(s) => s.into(),
        None => a.iter().copied().collect::<Vec<_>>().into(),
    }
}

/// Buffers the worker made ready while it waited for the next run (web/worker.js
/// `spareBuffers`), each written to once then: a run's records are copied into them, not into
/// new arrays. A new array is zeroed and its pages given to it as the copy first writes them: a
/// copy into one takes ~3× as long as a copy into memory already written (one layer's
/// probabilities of MiniLM at 128 tokens, 786 KB: 0.117 ms against 0.034 in V8), and a
/// keystroke's run at 128 tokens, 9.4 MB of probabilities and scores, answers 2–4 ms sooner.
#[derive(Default)]
struct Spares(std::cell::RefCell<Vec<Float32Array>>);

impl Spares {
    /// `a`'s values in the first spare buffer that holds them (taken from the spares: the page
    /// gets it), as a view of their length from its start; copied into a new array when none
    /// does.
    fn flat<S: ndarray::Data<Elem = f32>, D: ndarray::Dimension>(
        &self,
        a: &ndarray::ArrayBase<S, D>,
    ) -> Float32Array {
        let n = a.len() as u32;
        let mut spares = self.0.borrow_mut();
        let Some(i) = spares.iter().position(|b| b.length() >= n) else {
            return flat(a);
        };
        let into = spares.swap_remove(i).subarray(0, n);
        into.copy_from(&row_major(a));
        into
    }
}

/// What one record holds besides its values: docs/given.md's record with its `name` and
/// `shape`; an attention's (`name` "attention", `shape` `[H, n_q, n_k]`) also its heads and
/// sizes as given attention names them.
#[derive(Serialize)]
struct RecordMeta {
    stack: Stack,
    kind: AttentionKind,
    layer: usize,
    name: &'static str,
    shape: Vec<usize>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    attention: Option<AttentionMeta>,
}

#[derive(Serialize)]
struct AttentionMeta {
    query_heads: usize,
    kv_heads: usize,
    n_q: usize,
    n_k: usize,
}

impl RecordMeta {
    /// Layer `layer`'s attention `(H, n_q, n_k)`, named `attention`: its `H` query heads over
    /// `kv_heads` key/value heads (at most `H`).
    fn attention(
        stack: Stack,
        kind: AttentionKind,
        layer: usize,
        (heads, n_q, n_k): (usize, usize, usize),
        kv_heads: usize,
    ) -> Self {
        Self {
            stack,
            kind,
            layer,
            name: "attention",
            shape: vec![heads, n_q, n_k],
            attention: Some(AttentionMeta {
                query_heads: heads,
                kv_heads: kv_heads.min(heads),
                n_q,
                n_k,
            }),
        }
    }

    /// Any other value of layer `layer`, by its name and shape.
    fn named(
        stack: Stack,
        kind: AttentionKind,
        layer: usize,
        name: &'static str,
        shape: &[usize],
    ) -> Self {
        Self {
            stack,
            kind,
            layer,
            name,
            shape: shape.to_vec(),
            attention: None,
        }
    }
}

/// One layer's values as a record: `{stack, kind, layer, name, shape, …, values: Float32Array}`.
fn record_of(meta: RecordMeta, values: Float32Array) -> Result<JsValue, JsError> {
    let o = to_js(&meta)?;
    set(&o.clone().into(), "values", values)?;
    Ok(o)
}

/// [`record_of`] with `values` copied out of wasm memory.
fn record<D: ndarray::Dimension>(
    meta: RecordMeta,
    values: ndarray::ArrayView<f32, D>,
) -> Result<JsValue, JsError> {
    record_of(meta, flat(&values))
}

/// Layer `layer`'s attention `(H, n_q, n_k)` as a record named `attention`, its `H` query heads
/// over `kv_heads` key/value heads (at most `H`).
fn attention_record(
    stack: Stack,
    kind: AttentionKind,
    layer: usize,
    kv_heads: usize,
    values: ndarray::ArrayView3<f32>,
) -> Result<JsValue, JsError> {
    let meta = RecordMeta::attention(stack, kind, layer, values.dim(), kv_heads);
    record(meta, values)
}

/// Item `b` of a translation as records, one a layer: each attention's (`(H, n_q, n_k)`: the
/// encoder's `S × S`, the decoder's `T × T`, the cross-attention's `T × S`), and with `norms`
/// each key's value size (`value_norms`, `(H, n_k)`).
fn translation_records(
    tr: &crate::engine::Translation,
    b: usize,
    kv_heads: usize,
    norms: Option<&crate::engine::translate::ValueNorms>,
) -> Result<js_sys::Array, JsError> {
    use ndarray::s;
    let (n_s, n_t) = (tr.source.length(b), tr.steps(b));
    let all = js_sys::Array::new();
    let attentions = [
        (
            Stack::Encoder,
            AttentionKind::SelfAttention,
            &tr.encoder_attention,
            n_s,
            n_s,
        ),
        (
            Stack::Decoder,
            AttentionKind::SelfAttention,
            &tr.decoder_attention,
            n_t,
            n_t,
        ),
        (
            Stack::Decoder,
            AttentionKind::Cross,
            &tr.cross_attention,
            n_t,
            n_s,
        ),
    ];
    for (stack, kind, attention, n_q, n_k) in attentions {
        for layer in 0..attention.len_of(ndarray::Axis(1)) {
            // (H, n_q, n_k)
            let values = attention.slice(s![b, layer, .., ..n_q, ..n_k]);
            let heads = values.len_of(ndarray::Axis(0));
            all.push(&attention_record(stack, kind, layer, kv_heads, values)?);
            if let Some(norms) = norms {
                let sizes = match (stack, kind) {
                    (Stack::Encoder, _) => &norms.encoder,
                    (_, AttentionKind::SelfAttention) => &norms.decoder,
                    (_, AttentionKind::Cross) => &norms.cross,
                };
                // (H, n_k)
                let sizes = sizes.slice(s![b, layer, .., ..n_k]);
                let meta = RecordMeta::named(stack, kind, layer, "value_norms", &[heads, n_k]);
                all.push(&record(meta, sizes)?);
            }
        }
    }
    Ok(all)
}

/// Item `b` of a run as records, one a layer: its attention (`(H, T, T)`, named
/// `attention`) and, where the run kept them, its scores before softmax (`scores`, the same
/// shape), each layer's attention before its scores.
fn run_records(
    t: &crate::engine::Trace,
    b: usize,
    stack: Stack,
    kv_heads: usize,
    spares: &Spares,
) -> Result<js_sys::Array, JsError> {
    let all = js_sys::Array::new();
    let kind = AttentionKind::SelfAttention;
    for layer in 0..t.attention.len_of(ndarray::Axis(1)) {
        // (H, T, T)
        let values = t.attention.index_axis(ndarray::Axis(0), b);
        let values = values.index_axis(ndarray::Axis(0), layer);
        let meta = RecordMeta::attention(stack, kind, layer, values.dim(), kv_heads);
        all.push(&record_of(meta, spares.flat(&values))?);
        if let Some(scores) = &t.scores {
            let values = scores.index_axis(ndarray::Axis(0), b);
            let values = values.index_axis(ndarray::Axis(0), layer);
            let meta = RecordMeta::named(stack, kind, layer, "scores", values.shape());
            all.push(&record_of(meta, spares.flat(&values))?);
        }
    }
    Ok(all)
}

/// Every head of run `t` summarised for the page's grid and heads table, on the pool's threads
/// (`crate::analysis::thumbnail::HeadsSummary`): `{side, thumbs: Float32Array (heads × side ×
/// side; side 0 and none at most 64 positions), probMax: Float32Array, probArg: Uint32Array
/// (q·T + k), scoreMax: Float32Array}`, heads in `(b, l, h)` order, as web/summary.js
/// `summarise` gives them.
fn heads_summary(t: &crate::engine::Trace) -> Result<Object, JsError> {
    let scores = t.scores.as_ref().map(|s| s.view());
    let summary = crate::engine::cpu::pass_on_the_pool(|| {
        crate::analysis::thumbnail::HeadsSummary::of(t.attention.view(), scores)
    });
    let o = thumbnails_object(&summary.thumbs, &summary.prob_max, &summary.prob_arg)?;
    set(&o, "side", summary.side as f64)?;
    set(
        &o,
        "scoreMax",
        Float32Array::from(summary.score_max.as_slice()),
    )?;
    Ok(o)
}

/// Heads' thumbnails side by side, their largest probabilities and where (`q·T + k`), as the
/// page's summaries hold them: `{thumbs (Float32Array), probMax (Float32Array), probArg
/// (Uint32Array)}`.
fn thumbnails_object(thumbs: &[f32], max: &[f32], arg: &[u32]) -> Result<Object, JsError> {
    let o = Object::new();
    set(&o, "thumbs", Float32Array::from(thumbs))?;
    set(&o, "probMax", Float32Array::from(max))?;
    set(&o, "probArg", js_sys::Uint32Array::from(arg))?;
    Ok(o)
}

/// Which engine answers one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    /// The ndarray reference engine.
    Cpu,
    /// The session's runner: WebGPU when it has a device (with the CPU as its fallback).
    Gpu,
}

impl std::str::FromStr for Engine {
    type Err = JsError;
    fn from_str(s: &str) -> Result<Self, JsError> {
        match s {
            "cpu" => Ok(Self::Cpu),
            "gpu" => Ok(Self::Gpu),
            _ => Err(JsError::new(&format!(
                "unknown engine {s:?} (expected cpu or gpu)"
            ))),
        }
    }
}

/// What a run changes and computes beyond the attention (`run`'s last argument; every field
/// optional): `{headMask: "L:H,…", scale: "sqrt_dk" | "none", noRope: bool, scores: bool,
/// headMetrics: bool, headRoles: bool, valueNorms: bool, rollout: bool, sentenceEmbedding: bool}`. `scale: "none"` leaves every
/// layer's scores undivided by √d_k (the ablation; default `"sqrt_dk"`); `noRope` leaves a
/// Llama-family model's rotary positions out. The analyses cost time at long inputs, so the page
/// asks only for what it shows.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
struct RunOptions {
    head_mask: String,
    scale: ScoreScale,
    /// Leave out the rotary positions (the ablation, [`TraceOptions::no_rope`]).
    no_rope: bool,
    /// Leave out QK-norm (the ablation, [`TraceOptions::no_qk_norm`]).
    no_qk_norm: bool,
    /// How the CPU engine multiplies by 4-bit matrices: `"exact"` (the default) or `"fast"`
    /// ([`Numerics`]).
    numerics: Numerics,
    /// Every layer's scores, `QKᵀ/√d_k` before the mask (`scores`, `(B, L, H, T, T)`); unless
    /// `false`, as the page's steps and summaries read them. `false` returns the probabilities
    /// alone, as ONNX Runtime returns a BERT's attentions (`make bench` compares them so).
    scores: Option<bool>,
    head_metrics: bool,
    /// Each head's roles on a text that repeats ([`Repeated::detect`]'s period): `headRoles`,
    /// `(B, role, L, H)`, NaN for a text that does not.
    head_roles: bool,
    /// Each key's `‖W_O^h v_j‖` ([`crate::analysis::value_weighted`]): `valueNorms`,
    /// `(B, L, H, T)`, what the page weighs attention by.
    value_norms: bool,
    /// What writes the next token ([`LogitAttribution`]) at each item's last token:
    /// `logitAttribution`, `[B]` of its JSON without the tokens each head promotes, and
    /// `headWrites`, `(B, L, H, D)`, each head's write through the frozen final norm (what
    /// [`Session::read_out`] reads onto the vocabulary). Not for a long run.
    logit_attribution: Option<AttributionAsk>,
    /// Every edge's importance of the information-flow routes ([`Flow`]): `flow`, `{heads:
    /// (B, L, H, T, T), residual: (B, L, T)}`, what the page's routes graph follows down from a
    /// position. Not for a long run.
    flow: bool,
    rollout: bool,
    sentence_embedding: bool,
    /// Every layer's output and the embeddings' (`hiddenStates`, `(B, L+1, T, D)`), and each
    /// token's cosine to its state one layer before (`layerSimilarity`, `(B, L, T)`).
    hidden_states: bool,
    /// One layer's intermediate values (`layerTrace`, see [`crate::engine::LayerTrace`]).
    layer_trace: Option<usize>,
    /// The embeddings' steps in `layerTrace` whatever its layer.
    embeddings: bool,
    /// Cross-attention through this layer from the pair's second sentence to each text
    /// (`crossAttention`, one `{layer, queries, keys, attention: (H, n_q, n_k)}` a text).
    cross_attention: Option<usize>,
    /// For a model with an LM head: the K likeliest next tokens at every position
    /// (`nextTokens`, `[B][T][K]` of `{id, token, text, p}`, as the CLI's `--top-k`).
    top_k: Option<usize>,
    /// A run whose heads nobody will ask for (the plain run beside a knock-out): a long one
    /// does not take the place of the session's long run ([`Session::long_head`]).
    no_heads_later: bool,
    /// The text by its token ids, not tokenised again (a generation's prompt and what the model
    /// wrote up to the focused step: the ids it was fed, a chat template's included); `texts`
    /// holds its one text, the name it goes by. No pair.
    ids: Option<Vec<u32>>,
}

/// Which token each item's attribution is of (`RunOptions::logit_attribution`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
struct AttributionAsk {
    /// Item by item, the token id; `null` (or none given) for the likeliest next token.
    targets: Vec<Option<u32>>,
}

/// How a generation runs (see [`Session::generate`]).
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
struct GenerateOptions {
    max_new_tokens: usize,
    top_k: usize,
    /// Wrap the prompt in the model's chat template as a user message.
    chat: bool,
    /// Heads knocked out while writing, `L:H[,L:H…]` (as a run's `headMask`).
    head_mask: String,
    /// `"exact"` or `"fast"`, as a run's `numerics`.
    numerics: Numerics,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_new_tokens: 32,
            top_k: 5,
            chat: false,
            head_mask: String::new(),
            numerics: Numerics::Exact,
        }
    }
}

/// A generation the page drives one token at a time ([`Session::generate`]): each
/// [`Generating::step`] runs one pass (the prompt's first) and hands its attention to the page,
/// which keeps the generation's; nothing of it stays here. A long one (its attention over the
/// limit a generation keeps) runs no pass itself: the page runs each as a run of a long text
/// and hands it what the run wrote ([`Generating::accept`]).
#[wasm_bindgen]
pub struct Generating {
    model: std::sync::Arc<Model>,
    steps: GenerationSteps,
    state: crate::engine::generate::Greedy,
    prompt: String,
    /// What the next pass feeds (`None` before the prompt's pass and after the last).
    next: Option<(usize, u32)>,
    started: bool,
    /// A long generation: its attention, `(L, H, N, N)`, over the limit a generation keeps, so
    /// the page runs each pass as a run of a long text (queries and keys kept, heads computed
    /// when looked at, the last run's pass reused) and hands its likeliest next tokens to
    /// [`Generating::accept`].
    long: bool,
}

/// The passes of a generation the page drives, on the engine the session runs.
enum GenerationSteps {
    Cpu(crate::engine::generate::CpuSteps<std::sync::Arc<Model>>),
    /// (boxed: its recorded passes make it the larger by far)
    Gpu(
        Box<
            crate::engine::gpu::GpuSteps<
                std::rc::Rc<crate::engine::gpu::GpuEngine>,
                std::sync::Arc<Model>,
            >,
        >,
    ),
}

impl GenerationSteps {
    /// What runs the passes: `cpu` or `gpu: <adapter> (<API>)`.
    fn backend(&self) -> String {
        match self {
            Self::Cpu(_) => "cpu".into(),
            Self::Gpu(g) => g.describe(),
        }
    }

    async fn prefill(&mut self, ids: &[u32]) -> crate::Result<crate::engine::generate::StepPass> {
        use crate::engine::generate::Steps;
        match self {
            Self::Cpu(c) => c.prefill_now(ids),
            Self::Gpu(g) => g.prefill(ids).await,
        }
    }

    async fn step(
        &mut self,
        n: usize,
        token: u32,
    ) -> crate::Result<crate::engine::generate::StepPass> {
        use crate::engine::generate::Steps;
        match self {
            Self::Cpu(c) => c.step_now(n, token),
            Self::Gpu(g) => g.step(n, token).await,
        }
    }
}

#[wasm_bindgen]
impl Generating {
    /// Runs the next pass and returns what it wrote: `{id, token, text, top_k: [{id, token,
    /// text, p}], step_ms, done, gpu? (on the GPU: {upload_ms, compute_ms, readback_ms,
    /// dispatches}, the pass's phases), output_text (every token written so far, decoded),
    /// records}`,
    /// its attention as records, one a layer (`{stack: "decoder", kind: "self", layer, name:
    /// "attention", shape: [H, n_q, n_k], query_heads, kv_heads, n_q, n_k, values:
    /// Float32Array}`, as a translation's: the prompt's pass `n_q = n_k = P`; a step one row
    /// over every position so far); the prompt's pass adds what `attnscope generate`
    /// prints of the prompt, `{model, model_type, backend, prompt, prompt_ids, prompt_tokens,
    /// prompt_texts}` (`text`, `prompt_texts`: `TextTokenizer::text_of`);
    /// `null` once the generation is over.
    pub async fn step(&mut self) -> Result<JsValue, JsError> {
        if self.long {
            return Err(JsError::new(
                "a long generation's passes are runs of a long text: hand each one's likeliest \
                 next tokens to `accept`",
            ));
        }
        let start = Instant::now();
        let first = !self.started;
        let mut pass = match (self.started, self.next) {
            (false, _) => {
                self.started = true;
                let prompt = self.state.prompt_ids().to_vec();
                self.steps.prefill(&prompt).await
            }
            (true, Some((n, token))) => self.steps.step(n, token).await,
            (true, None) => return Ok(JsValue::NULL),
        }
        .map_err(js_err)?;
        let attention = std::mem::take(&mut pass.attention); // (1, L, H, n_q, n_k)
        let gpu = pass.gpu;
        self.next = self.state.accept(pass, start.elapsed().as_secs_f64() * 1e3);
        let o = self.written(first)?;
        if let (Some(t), GenerationSteps::Gpu(g)) = (gpu, &self.steps) {
            // where the pass's time went on the GPU, and how many dispatches it replayed
            use crate::engine::generate::Steps;
            let (prefill, step) = g.dispatches().unwrap_or_default();
            let phases = Object::new();
            set(&phases, "upload_ms", t.upload_ms)?;
            set(&phases, "compute_ms", t.compute_ms)?;
            set(&phases, "readback_ms", t.readback_ms)?;
            set(
                &phases,
                "dispatches",
                if first { prefill } else { step } as f64,
            )?;
            set(&o, "gpu", phases)?;
        }
        let kv_heads = self.model.config.architecture.heads.key_value;
        let records = js_sys::Array::new();
        for (layer, values) in attention
            .index_axis(ndarray::Axis(0), 0)
            .outer_iter()
            .enumerate()
        {
            // (H, n_q, n_k)
            let (stack, kind) = (Stack::Decoder, AttentionKind::SelfAttention);
            records.push(&attention_record(stack, kind, layer, kv_heads, values)?);
        }
        set(&o, "records", records)?;
        Ok(o.into())
    }

    /// Whether this is a long generation: its passes are runs of a long text the page makes
    /// (`Session.run` with `ids`: the prompt's and what was written so far, and `topK`), each
    /// one's likeliest next tokens handed to [`Generating::accept`]; `step()` refuses.
    #[wasm_bindgen(getter)]
    pub fn long(&self) -> bool {
        self.long
    }

    /// The prompt's token ids (a chat template's included).
    #[wasm_bindgen(getter, js_name = promptIds)]
    pub fn prompt_ids(&self) -> Vec<u32> {
        self.state.prompt_ids().to_vec()
    }

    /// The prompt as the model reads it (in its chat template, when asked).
    #[wasm_bindgen(getter)]
    pub fn prompt(&self) -> String {
        self.prompt.clone()
    }

    /// A long generation's next pass, which the page ran (`step_ms` its time): its likeliest
    /// next tokens after the last position, best first (a run's `nextTokens[0][T − 1]`, `[{id,
    /// p}]`), the first written. Returns what `step()` does, without records: the page has the
    /// run. An error in a generation that is not long, or is over.
    pub fn accept(&mut self, next: JsValue, step_ms: f64) -> Result<JsValue, JsError> {
        if !self.long {
            return Err(JsError::new(
                "`accept` is for a long generation: this one's passes are `step()`'s",
            ));
        }
        if self.started && self.next.is_none() {
            return Err(JsError::new(
                "the generation is over: it takes no more passes",
            ));
        }
        let next: Vec<crate::engine::TokenProb> = serde_wasm_bindgen::from_value(next)
            .map_err(|e| JsError::new(&format!("a pass's likeliest next tokens: {e}")))?;
        let vocab = self.model.config.vocab_size;
        if let Some(t) = next.iter().find(|t| t.id as usize >= vocab) {
            return Err(JsError::new(&format!(
                "a pass's likeliest next token {} is outside the vocabulary of {vocab}",
                t.id
            )));
        }
        let first = !self.started;
        self.started = true;
        self.next = self.state.accept_next(next, step_ms).map_err(js_err)?;
        Ok(self.written(first)?.into())
    }
}

impl Generating {
    /// What the pass just accepted wrote: `{id, token, text, top_k, step_ms, done,
    /// output_text}`, and the prompt's fields after the `first` pass (see [`Generating::step`]).
    fn written(&self, first: bool) -> Result<Object, JsError> {
        let i = self.state.output_ids().len() - 1;
        let id = self.state.output_ids()[i];
        let tok = &self.model.tokenizer;
        let o = Object::new();
        if first {
            let ids = self.state.prompt_ids();
            set(&o, "model", self.model.short_name())?;
            set(&o, "model_type", self.model.config.family.name())?;
            set(&o, "backend", self.steps.backend())?;
            set(&o, "prompt", self.prompt.as_str())?;
            set(&o, "prompt_ids", to_js(&ids)?)?;
            let tokens: Vec<String> = ids.iter().map(|&id| tok.token(id)).collect();
            set(&o, "prompt_tokens", to_js(&tokens)?)?;
            let texts: Vec<String> = ids.iter().map(|&id| tok.text_of(id)).collect();
            set(&o, "prompt_texts", to_js(&texts)?)?;
        }
        set(&o, "id", id)?;
        set(&o, "token", tok.token(id))?;
        set(&o, "text", tok.text_of(id))?;
        set(
            &o,
            "top_k",
            to_js(&predictions(self.state.step_top_k(i), tok))?,
        )?;
        set(&o, "step_ms", *self.state.step_ms().last().unwrap_or(&0.0))?;
        set(&o, "done", self.next.is_none())?;
        set(&o, "output_text", tok.decode(self.state.output_ids()))?;
        Ok(o)
    }
}

/// What a translation computes besides its attentions (see [`Session::translate`]).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
struct TranslateOptions {
    max_new_tokens: Option<usize>,
    top_k: Option<usize>,
    /// The batch as the engine ran it, padded ([`crate::report::PaddedBatch`]).
    padded: bool,
    /// Each attention's value sizes: records named `value_norms` beside the attentions'.
    value_weighted: bool,
}

/// The message of the last panic in this module. A panic aborts the wasm call (a
/// `WebAssembly.RuntimeError` in JS) and leaves the instance's state untrustworthy: the worker
/// reads the message here, says it, and the page starts a fresh engine (web/engine.js).
static LAST_PANIC: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The page's `BroadcastChannel` for panics on the threaded build's pool threads
/// ([`report_crashes_on`]).
static CRASH_CHANNEL: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Runs when the module is instantiated (in every thread of the threaded build): records each
/// panic's message for [`last_panic`]. A panic on one of rayon's pool threads also goes to the
/// page's crash channel: the worker that waits for that thread's work waits forever and cannot
/// say so itself.
#[wasm_bindgen(start)]
fn record_panics() {
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string();
        if let Ok(mut last) = LAST_PANIC.lock() {
            *last = Some(message.clone());
        }
        let channel = CRASH_CHANNEL.lock().ok().and_then(|c| c.clone());
        if let (Some(name), Some(_)) = (channel, rayon::current_thread_index()) {
            if let Ok(c) = web_sys::BroadcastChannel::new(&name) {
                let _ = c.post_message(&message.into());
                c.close();
            }
        }
    }));
}

/// Names the `BroadcastChannel` on which a panic on a pool thread is posted (its message); the
/// page makes one a worker (web/engine.js) and listens on it.
#[wasm_bindgen(js_name = reportCrashesOn)]
pub fn report_crashes_on(channel: String) {
    if let Ok(mut c) = CRASH_CHANNEL.lock() {
        *c = Some(channel);
    }
}

/// The last panic's message (`panicked at FILE:LINE:COL:` and what it said), if one happened.
#[wasm_bindgen(js_name = lastPanic)]
pub fn last_panic() -> Option<String> {
    LAST_PANIC.lock().ok()?.clone()
}

/// Where [`crash_for_tests`] panics.
#[wasm_bindgen]
#[derive(Clone, Copy)]
pub enum CrashSite {
    /// In the call.
    Call = "call",
    /// In a future the module polls after the call returns.
    Future = "future",
    /// On rayon's threads, while the call waits for them (as a panic in a parallel kernel would
    /// be; on the single-thread builds rayon runs it in the call).
    Pool = "pool",
}

/// Panics, as a bug would, at `site`: the page's crash tests (`?testhooks=1`, web/worker.js)
/// check that the page says so and comes back with a fresh engine.
#[wasm_bindgen(js_name = crashForTests)]
pub fn crash_for_tests(site: CrashSite) {
    use rayon::prelude::*;
    match site {
        CrashSite::Call => panic!("the page's test hook asked the engine to crash"),
        CrashSite::Future => wasm_bindgen_futures::spawn_local(async {
            panic!("the page's test hook asked the engine to crash, in a future");
        }),
        CrashSite::Pool => (0..64).into_par_iter().for_each(|_| {
            panic!("the page's test hook asked the engine to crash, on rayon's threads")
        }),
        CrashSite::__Invalid => panic!("the page's test hook named no crash site"),
    }
}

/// The experiment behind `÷√d_k` (src/analysis/scaling.rs): for d_k = 1, 2, 4, … 512, the
/// variance of `q·k` and of `q·k/√d_k` over `samples` random pairs of unit-variance vectors:
/// `[{d_k, raw, scaled}]`.
#[wasm_bindgen(js_name = scalingExperiment)]
pub fn scaling_experiment(samples: usize) -> Result<JsValue, JsError> {
    let d_ks: Vec<usize> = (0..10).map(|i| 1 << i).collect();
    to_js(&variance_experiment(&d_ks, samples.clamp(10, 20_000), 1))
}

/// The heads' summaries and the rollout of attention computed elsewhere (web/given.js, the page's
/// heads table and rollout panel): `probs` `(L, H, T, T)` flat, `cls` and `sep` the positions of
/// its sentence markers (crate::analysis::of_given): `{headMetrics: (metric, L, H) flat in
/// `metrics`' order, rollout: (T, T) flat, metrics}`.
#[wasm_bindgen(js_name = analyseGiven)]
pub fn analyse_given(
    probs: &[f32],
    layers: usize,
    heads: usize,
    tokens: usize,
    cls: Vec<u32>,
    sep: Vec<u32>,
) -> Result<JsValue, JsError> {
    let shape = (layers, heads, tokens, tokens);
    let probs = ndarray::ArrayView4::from_shape(shape, probs).map_err(|_| {
        JsError::new(&format!(
            "given attention: {} values, not {layers} × {heads} × {tokens} × {tokens}",
            probs.len()
        ))
    })?;
    let at = |v: Vec<u32>| v.into_iter().map(|p| p as usize).collect::<Vec<_>>();
    let (metrics, rolled) = crate::analysis::of_given(probs, &at(cls), &at(sep)).map_err(js_err)?;
    let mut all = Vec::with_capacity(METRICS.len() * layers * heads);
    for (_, values) in metrics.all() {
        all.extend(values.iter());
    }
    let o = Object::new();
    set(&o, "headMetrics", Float32Array::from(all.as_slice()))?;
    set(
        &o,
        "rollout",
        Float32Array::from(
            rolled
                .as_standard_layout()
                .as_slice()
                .expect("standard layout"),
        ),
    )?;
    set(&o, "metrics", to_js(&METRICS)?)?;
    Ok(o.into())
}

/// The largest file the worker may download for each of a checkpoint's three files, in bytes
/// (`{"config.json": n, "model.safetensors": n, "tokenizer.json": n}`, from [`limits`]): a
/// download over its limit is stopped before the bytes pile up.
#[wasm_bindgen(js_name = fileLimits)]
pub fn file_limits() -> Result<JsValue, JsError> {
    let o = Object::new();
    set(&o, CONFIG_FILE, limits::MAX_CONFIG_BYTES as f64)?;
    set(&o, WEIGHTS_FILE, limits::MAX_WEIGHTS_BYTES as f64)?;
    set(&o, TOKENIZER_FILE, limits::MAX_TOKENIZER_BYTES as f64)?;
    set(
        &o,
        "safetensorsHeader",
        limits::MAX_SAFETENSORS_HEADER_BYTES as f64,
    )?;
    set(&o, "ggufHeader", limits::MAX_GGUF_HEADER_BYTES as f64)?;
    Ok(o.into())
}

/// A GGUF file's header checked from its first bytes alone, before the rest is downloaded or
/// copied into wasm memory: `head` is the first bytes of a file of `len` bytes (at most the
/// `ggufHeader` limit). A malformed or hostile header, or an architecture no family runs, is
/// refused as soon as the bytes given show it, its error naming the file (natively,
/// [`Model::from_path`] does the same). `false` while the header runs past `head` and more of
/// the file could hold it: the page reads on and asks again; `true` once it was checked whole.
#[wasm_bindgen(js_name = checkGgufHeader)]
pub fn check_gguf_header(name: &str, head: &[u8], len: f64) -> Result<bool, JsError> {
    Model::check_gguf_so_far(head, len as usize, name).map_err(js_err)
}

/// Whether a folder whose `config.json` is `config_json` may carry a chat template: its family
/// reads it as a model that writes text (a decoder with an LM head). The page then asks the
/// folder for its chat files (`tokenizer_config.json`, `chat_template.jinja`); it asks no other
/// folder, so none logs a 404.
#[wasm_bindgen(js_name = writesText)]
pub fn writes_text(config_json: &[u8]) -> bool {
    crate::families::read_config(config_json, CONFIG_FILE).is_ok_and(|c| {
        c.architecture.kind == crate::model::config::ModelKind::Decoder
            && c.architecture.lm_head != crate::model::config::LmHead::None
    })
}

/// A loaded model and the engine that runs it.
#[wasm_bindgen]
pub struct Session {
    runner: Runner<Model>,
    /// The CPU engine's last passes, which a text typed at the end reuses
    /// ([`cpu::forward_reusing`]).
    prefixes: std::cell::RefCell<cpu::Prefixes>,
    /// The last long run's queries and keys, from which the page asks for the heads it shows
    /// ([`Session::long_head`]); dropped before the next long run's pass, so that only one is
    /// ever held (SmolLM2-135M at 1,024 tokens: 94 MB, the same arrays as the cache of its
    /// kept pass, which the next pass over the same beginning then appends to in place).
    long: std::cell::RefCell<Option<LongRun>>,
    /// The number the next long run is known by.
    next_long: std::cell::Cell<u32>,
    /// How far the run under way has gone, and whether the page asked it to stop
    /// ([`Session::progress_cells`]).
    progress: std::sync::Arc<PassProgress>,
    /// What the next run's records are copied into ([`Session::set_spare_buffers`]).
    spares: Spares,
}

/// A long run's queries and keys and its mask, `(B, T, T)`, by the number its `RunInfo` gives.
struct LongRun {
    id: u32,
    from: QueriesKeys,
    mask: Mask,
}

impl LongRun {
    /// The scores of item `item`'s head `head` of layer `layer` in `part`, computed from the
    /// run's queries and keys ([`QueriesKeys::scores_in`]): `{part, values}`, `values` a
    /// Float32Array of `(q1 − q0, k1 − k0)`.
    fn scores_in(
        &self,
        item: usize,
        layer: usize,
        head: usize,
        part: Part,
    ) -> Result<Object, JsError> {
        let Part { q0, q1, k0, k1 } = part;
        let values = self
            .from
            .scores_in(item, layer, head, &self.mask, q0..q1, k0..k1)
            .map_err(js_err)?;
        let values = values.as_standard_layout();
        let o = Object::new();
        set(
            &o,
            "part",
            serde_wasm_bindgen::to_value(&part).map_err(|e| JsError::new(&e.to_string()))?,
        )?;
        let values = values
            .as_slice()
            .ok_or_else(|| JsError::new("a window of scores apart"))?;
        set(&o, "values", Float32Array::from(values))?;
        Ok(o)
    }

    /// Long run `run`, where the session still keeps it.
    fn kept(kept: &Option<LongRun>, run: u32) -> Result<&LongRun, JsError> {
        kept.as_ref().filter(|r| r.id == run).ok_or_else(|| {
            JsError::new(&format!(
                "long run {run} is no longer kept (the session keeps its last long run's \
                 queries and keys): run the text again"
            ))
        })
    }
}

/// `value` read as a `T`, or none where it is `undefined` or `null`; an error naming `what`
/// where it is neither a `T` nor none.
fn optional<T: serde::de::DeserializeOwned>(
    value: JsValue,
    what: &str,
) -> Result<Option<T>, JsError> {
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    serde_wasm_bindgen::from_value(value)
        .map(Some)
        .map_err(|e| JsError::new(&format!("{what}: {e}")))
}

/// Where [`Session::long_head`] puts a long run's head as its parts come
/// ([`QueriesKeys::head_in_parts`]): each row's span of the pass's mask copied into `attention`
/// (the probabilities around it are 0: a new array's are already, an array written over gets
/// them filled), and folded into `pooled` where the page asked for the head view's pooling.
struct LongHeadOut<'a> {
    t: usize,
    item: usize,
    /// The pass's mask: each row's span.
    mask: &'a Mask,
    /// Whether `attention` held another head (a new array's values are 0 already).
    written_over: bool,
    attention: Float32Array,
    pooled: Option<PoolFold>,
}

impl LongHeadOut<'_> {
    /// The rows from `first` on: `probs` and the layer's `mask` of them, each `(rows, T)`.
    fn part(
        &mut self,
        first: usize,
        probs: ndarray::ArrayView2<f32>,
        mask: ndarray::ArrayView2<bool>,
    ) -> crate::error::Result<()> {
        let apart = |what: &str| crate::error::Error::Engine(format!("{what} apart"));
        let t = self.t;
        let probs = probs.as_slice().ok_or_else(|| apart("a part's rows"))?;
        for (i, row) in probs.chunks_exact(t).enumerate() {
            let q = first + i;
            if let Some(pooled) = self.pooled.as_mut() {
                let m = mask.row(i);
                pooled.row(q, row, m.as_slice().ok_or_else(|| apart("a mask's row"))?);
            }
            let keys = match self.mask.span(self.item, q) {
                // a row that attends to none: every value
                keys if keys.is_empty() => 0..t,
                keys => keys,
            };
            let at = (q * t) as u32;
            if self.written_over {
                // the values around the span set to 0 in JavaScript, not copied out of wasm
                // memory (a copy from shared memory runs at a few GB/s: half the copy a row
                // of a causal head)
                self.attention.fill(0.0, at, at + keys.start as u32);
                self.attention
                    .fill(0.0, at + keys.end as u32, at + t as u32);
            }
            let from = at + keys.start as u32;
            self.attention
                .subarray(from, from + keys.len() as u32)
                .copy_from(&row[keys]);
        }
        Ok(())
    }
}

/// A mask's cells as JavaScript bytes (1: attended), `(B, T, T)` flat, copied a part at a time
/// (a long text's is T² bytes: none copied whole again in wasm memory).
fn mask_bytes(mask: &Mask) -> Uint8Array {
    let cells = mask.0.as_standard_layout();
    let out = Uint8Array::new_with_length(cells.len() as u32);
    let mut part = Vec::with_capacity(MASK_PART.min(cells.len()));
    for (i, run) in cells
        .as_slice()
        .expect("a standard-layout array is contiguous")
        .chunks(MASK_PART)
        .enumerate()
    {
        part.clear();
        part.extend(run.iter().map(|&on| u8::from(on)));
        let at = (i * MASK_PART) as u32;
        out.subarray(at, at + part.len() as u32).copy_from(&part);
    }
    out
}

/// The bytes of a mask copied to JavaScript at once ([`mask_bytes`]).
const MASK_PART: usize = 1 << 20;

/// The most of a long run's head in a part, in values (16 MiB, and as much of scores):
/// [`Session::long_head`] copies each part out while the threads compute the next into a second
/// part's memory (`QueriesKeys::head_in_parts`), 64 MiB in all.
const LONG_HEAD_PART: usize = 1 << 22;

/// Past this many attention probabilities (`B·L·H·T²`: 128 MiB of them, and as much again of
/// scores) a run keeps each layer's queries and keys instead ([`AttentionKept::QueriesKeys`]),
/// and the page asks for the heads it shows: SmolLM2-135M past 352 tokens, GPT-2 past 482.
const LONG_RUN_VALUES: usize = 1 << 25;

/// A checkpoint's `model.safetensors` in wasm memory (`new WeightsFile(name, length)`), which
/// the worker fills chunk by chunk as it reads a cached file (`write`), so that the file is never
/// whole in JavaScript and then copied in (a download or a dropped file comes in whole:
/// `fromBytes`); the sessions loaded from it share its aligned f32 matrices ([`WeightsFile`]).
/// `free()` it when no new session will be loaded from it.
#[wasm_bindgen(js_name = WeightsFile)]
pub struct WeightsBuffer {
    file: WeightsFile,
    /// The file as errors name it.
    name: String,
}

#[wasm_bindgen(js_class = WeightsFile)]
impl WeightsBuffer {
    /// `length` zero bytes; an error naming `name` when `length` is over the limit for the
    /// weights (nothing is allocated then).
    #[wasm_bindgen(constructor)]
    pub fn new(name: String, length: usize) -> Result<WeightsBuffer, JsError> {
        let file = WeightsFile::zeroed(length, &name).map_err(js_err)?;
        Ok(Self { file, name })
    }

    /// A copy of `bytes` (the file as the page holds it, e.g. one a user dropped).
    #[wasm_bindgen(js_name = fromBytes)]
    pub fn from_bytes(name: String, bytes: &Uint8Array) -> Result<WeightsBuffer, JsError> {
        let mut w = Self::new(name, bytes.length() as usize)?;
        bytes.copy_to(w.file.bytes_mut());
        Ok(w)
    }

    #[wasm_bindgen(getter)]
    pub fn length(&self) -> usize {
        self.file.len()
    }

    /// A copy of the file's bytes (the worker parks a checkpoint in JavaScript with it while
    /// another model loads).
    pub fn bytes(&self) -> Uint8Array {
        Uint8Array::from(self.file.bytes())
    }

    /// Copies `chunk` into the file at byte `offset`.
    pub fn write(&mut self, offset: usize, chunk: &Uint8Array) -> Result<(), JsError> {
        let end = offset.checked_add(chunk.length() as usize);
        match end.and_then(|end| self.file.bytes_mut().get_mut(offset..end)) {
            Some(dst) => {
                chunk.copy_to(dst);
                Ok(())
            }
            None => Err(JsError::new(&format!(
                "{}: {} bytes at offset {offset} go past the file's {} bytes",
                self.name,
                chunk.length(),
                self.file.len()
            ))),
        }
    }
}

/// Loads a checkpoint from its three files; `backend` is `cpu`, `gpu` or `auto`. The model is
/// read before this returns (its errors are thrown here); the promise resolves to the
/// [`Session`] once the backend is up. The session shares the weights file's matrices; the file
/// stays the caller's, to `free()` whenever it likes.
/// `tokenizer_config` and `chat_template`: the folder's `tokenizer_config.json` and
/// `chat_template.jinja` where it has them (an instruct model's chat template), else
/// `undefined`.
#[wasm_bindgen(js_name = loadSession)]
pub fn load_session(
    name: String,
    config_json: &[u8],
    safetensors: &WeightsBuffer,
    tokenizer_json: &[u8],
    backend: String,
    tokenizer_config: Option<Vec<u8>>,
    chat_template: Option<Vec<u8>>,
) -> Result<js_sys::Promise, JsError> {
    let choice: BackendChoice = backend.parse().map_err(js_err)?;
    let chat = ChatFiles {
        tokenizer_config: tokenizer_config.as_deref(),
        chat_template: chat_template.as_deref(),
    };
    let model = Model::load(&name, config_json, &safetensors.file, tokenizer_json)
        .and_then(|m| m.with_chat_files(chat, &name))
        .map_err(js_err)?;
    start_session(model, choice)
}

/// Loads a GGUF file (a Llama-family model: config, tokenizer and chat template from its
/// metadata, quantized matrices kept so) held in `file`, which the session then shares; as
/// [`load_session`] otherwise.
#[wasm_bindgen(js_name = loadGgufSession)]
pub fn load_gguf_session(
    name: String,
    file: &WeightsBuffer,
    backend: String,
) -> Result<js_sys::Promise, JsError> {
    let choice: BackendChoice = backend.parse().map_err(js_err)?;
    let model = Model::from_gguf(&name, &file.file).map_err(js_err)?;
    start_session(model, choice)
}

/// A promise of the [`Session`] of `model` once its backend is up.
fn start_session(model: Model, choice: BackendChoice) -> Result<js_sys::Promise, JsError> {
    Ok(wasm_bindgen_futures::future_to_promise(async move {
        let runner = Runner::<Model>::new(model, choice)
            .await
            .map_err(|e| JsValue::from(js_err(e)))?;
        Ok(Session {
            runner,
            prefixes: Default::default(),
            long: Default::default(),
            next_long: Default::default(),
            progress: Default::default(),
            spares: Default::default(),
        }
        .into())
    }))
}

impl Session {
    /// Tokenises a batch (each text paired with `pair` when it is not blank), or takes one
    /// text's token ids as given ([`RunOptions::ids`]), and builds its mask.
    fn prepare(
        &self,
        texts: &[String],
        pair: Option<&str>,
        ids: Option<&[u32]>,
        mask: &str,
    ) -> Result<(Encoded, Mask, MaskKind), JsError> {
        let (input, kind) = self.encode(texts, pair, ids, mask)?;
        let mask = Mask::from_kind(kind, input.valid.view());
        Ok((input, mask, kind))
    }

    /// [`Session::prepare`] but the mask: its kind.
    fn encode(
        &self,
        texts: &[String],
        pair: Option<&str>,
        ids: Option<&[u32]>,
        mask: &str,
    ) -> Result<(Encoded, MaskKind), JsError> {
        let kind: MaskKind = mask.parse().map_err(js_err)?;
        let input = match ids {
            Some(ids) => self.encode_ids(ids, texts, pair)?,
            None => {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let tokenizer = &self.runner.model().tokenizer;
                tokenizer.encode(&refs, pair).map_err(js_err)?
            }
        };
        Ok((input, kind))
    }

    /// One text given by its token ids ([`Model::encode_ids`]): one text, the name it goes by,
    /// and no pair.
    fn encode_ids(
        &self,
        ids: &[u32],
        texts: &[String],
        pair: Option<&str>,
    ) -> Result<Encoded, JsError> {
        if texts.len() != 1 || pair.is_some() {
            return Err(JsError::new(
                "a run by token ids takes one text and no pair",
            ));
        }
        self.runner.model().encode_ids(ids).map_err(js_err)
    }

    async fn forward(
        &self,
        engine: Engine,
        input: &Encoded,
        mask: &Mask,
        opts: &TraceOptions,
    ) -> Result<(Run, usize), JsError> {
        match engine {
            Engine::Gpu => Ok((
                self.runner
                    .forward(input, mask, opts)
                    .await
                    .map_err(js_err)?,
                0,
            )),
            Engine::Cpu => {
                let start = Instant::now();
                let mut prefixes = self.prefixes.borrow_mut();
                let r = cpu::forward_reusing(self.runner.model(), input, mask, opts, &mut prefixes)
                    .map_err(js_err)?;
                let run = Run {
                    trace: r.trace,
                    backend: "cpu".into(),
                    fallback: None,
                    elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
                    gpu_timing: None,
                };
                Ok((run, r.reused))
            }
        }
    }
}

#[wasm_bindgen]
impl Session {
    /// Where in wasm memory (a byte address) the run under way reports its progress: seven
    /// `u32`, the self-attention layers its pass has begun, its layers, a stop request (not 0:
    /// stop; the page writes it), then the layers whose heads it has folded whole (a long run's
    /// pass folds each head's thumbnail as it computes it), their thumbnails' side, the heads a
    /// layer and the thumbnails' address (`(layers, heads, side, side)` f32 from there, the
    /// first item's own thumbnails: [`PassProgress::folded`]), so that the page draws each layer
    /// as the pass ends it. The pass stops before its next layer, the run failing with "stopped
    /// as asked"; a long run's summary (the worker's, a layer at a time) reads
    /// [`Session::stop_asked`] between its layers. The threaded build's memory is shared, so
    /// the page reads and writes them while the worker is busy with the run; both engines
    /// report (a WebGPU pass as the GPU begins each layer, and a long run's heads as its summary
    /// computes them again: [`Session::summary_heads`]). They are cleared (no layer begun, of none) for
    /// the run about to begin, so that the page never reads the last run's; the thumbnails'
    /// room is made here, before the memory the page was given grows.
    #[wasm_bindgen(js_name = progressCells)]
    pub fn progress_cells(&self) -> u32 {
        let c = &self.runner.model().config;
        self.progress
            .make_room(c.num_hidden_layers, c.num_attention_heads);
        self.progress.start(0);
        self.progress.cells() as usize as u32
    }

    /// Buffers to copy the next runs' records into (each `Float32Array`'s buffer wholly its
    /// own, written to once already), in place of those given before: a record takes the first
    /// that holds it, as a view of its length from the buffer's start, and the buffer goes to
    /// the page with it (see [`Spares`]).
    #[wasm_bindgen(js_name = setSpareBuffers)]
    pub fn set_spare_buffers(&self, buffers: Vec<Float32Array>) {
        *self.spares.0.borrow_mut() = buffers;
    }

    /// Whether the page asked the run under way to stop ([`Session::progress_cells`]).
    #[wasm_bindgen(js_name = stopAsked)]
    pub fn stop_asked(&self) -> bool {
        self.progress.stop_asked()
    }

    /// The GPU this session runs on (`gpu: <adapter> (WebGPU)`), if it has one.
    pub fn gpu(&self) -> Option<String> {
        let d = self.runner.describe();
        (d != "cpu").then_some(d)
    }

    /// Why the GPU is not used although it was wanted, if so.
    pub fn unavailable(&self) -> Option<String> {
        self.runner.unavailable().map(str::to_owned)
    }

    /// The checkpoint's shapes: a [`ModelInfo`].
    pub fn info(&self) -> Result<JsValue, JsError> {
        to_js(&ModelInfo::new(self.runner.model()))
    }

    /// How alike the first `n` positions are (src/analysis/positions.rs): `{learned:
    /// Float32Array, sinusoidal: Float32Array, n, dim}`, each `(n, n)` cosine similarities, of the
    /// checkpoint's learned position embeddings and of sinusoidal encodings of the same width
    /// `dim`; `n` is cut to the position table's length.
    #[wasm_bindgen(js_name = positionSimilarity)]
    pub fn position_similarity(&self, n: usize) -> Result<JsValue, JsError> {
        let model = self.runner.model();
        let learned = learned_position_similarity(model, n.max(1)).ok_or_else(|| {
            JsError::new("the model's positions are rotary: it has no table of them to compare")
        })?;
        let n = learned.nrows();
        let dim = model.config.hidden_size;
        let o = Object::new();
        set(&o, "learned", flat(&learned))?;
        set(&o, "sinusoidal", flat(&sinusoidal_similarity(n, dim)))?;
        set(&o, "n", n as f64)?;
        set(&o, "dim", dim as f64)?;
        Ok(o.into())
    }

    /// Runs `texts` (one right-padded batch; each paired with `pair` when it is not blank) under
    /// `mask` (`padding`, `causal` or `none`) on `engine` (`cpu` or `gpu`), with `options` (see
    /// [`RunOptions`]; `undefined` for none). Returns `{info: RunInfo, records: [B][record] (each
    /// item's attention and, unless `scores: false`, its scores, one record a layer:
    /// [`run_records`]; none for a long text's run), summary: every head's for the grid and
    /// heads table (none for a long text's run: [`heads_summary`]), mask: Uint8Array,
    /// logits?: Float32Array,
    /// nextTokens?: [B][T][K] of {id, token, text, p} (with `topK`, for a model with an LM head),
    /// headMetrics?: Float32Array, headRoles?: Float32Array, valueNorms?: Float32Array, rollout?: Float32Array, sentenceEmbedding?: Float32Array,
    /// hiddenStates?: Float32Array, layerTrace?: {layer, input, q, k, v, context, attentionOutput,
    /// preActivation, intermediate, output, embeddings?: {word, position, tokenType, sum,
    /// normed}} (each `(B, T, ·)`), crossAttention?: [{layer, queries, keys, attention}]}`
    /// (shapes in [`RunInfo`] and [`RunOptions`]).
    pub async fn run(
        &self,
        texts: Vec<String>,
        pair: Option<String>,
        mask: String,
        engine: String,
        options: JsValue,
    ) -> Result<JsValue, JsError> {
        let engine: Engine = engine.parse()?;
        let options: RunOptions = optional(options, "run options")?.unwrap_or_default();
        let pair = pair.filter(|p| !p.trim().is_empty());
        let (input, kind) = self.encode(&texts, pair.as_deref(), options.ids.as_deref(), &mask)?;
        let c = &self.runner.model().config;
        let (batch, tokens) = input.ids.dim();
        let probabilities = batch * c.num_hidden_layers * c.num_attention_heads * tokens * tokens;
        let long = probabilities > LONG_RUN_VALUES && c.decoder.is_none();
        let next = options.top_k.is_some() && self.runner.model().weights.has_lm_head();
        let opts = TraceOptions {
            scores: options.scores.unwrap_or(true),
            head_mask: HeadMask::parse(&options.head_mask).map_err(js_err)?,
            scale: options.scale,
            hidden_states: options.hidden_states,
            layer_trace: options.layer_trace,
            embeddings: options.embeddings,
            // a long run's LM head at the last position only (every position's logits over the
            // vocabulary: 201 MB for SmolLM2-135M at 1,024 tokens)
            lm_logits: next && !long,
            next_logits: next && long,
            decoder_trace: None,
            no_rope: options.no_rope,
            no_qk_norm: options.no_qk_norm,
            numerics: options.numerics,
            attention: match long {
                true => AttentionKept::QueriesKeys,
                false => AttentionKept::Probabilities,
            },
            values: options.value_norms || (options.flow && !long),
            writes: (options.logit_attribution.is_some() || options.flow) && !long,
            progress: Progress::to(&self.progress),
        };
        self.progress.start(c.num_hidden_layers);
        // a long run takes the place of the last: its queries and keys go before the pass, and
        // its mask before this one's is made (at 8,192 tokens 67 MB each: a generation's steps,
        // each a token longer, would not fit in the last one's)
        let keeps_heads = long && !options.no_heads_later;
        if keeps_heads {
            self.long.borrow_mut().take();
        }
        let mask = Mask::from_kind(kind, input.valid.view());
        let cross =
            match (options.cross_attention, pair.as_deref()) {
                (None, _) => vec![],
                (Some(_), None) => return Err(JsError::new(
                    "cross-attention needs a second sentence (the pair): its queries come from it",
                )),
                (Some(layer), Some(second)) => texts
                    .iter()
                    .map(|first| {
                        crate::analysis::cross_attention(
                            self.runner.model(),
                            first,
                            second,
                            layer,
                            &opts,
                        )
                    })
                    .collect::<crate::Result<Vec<_>>>()
                    .map_err(js_err)?,
            };
        let (mut run, reused) = self.forward(engine, &input, &mask, &opts).await?;
        drop(mask); // the trace holds its own
        let lm_logits = run.trace.lm_logits.take();
        let next_logits = run.trace.next_logits.take();
        let t = &run.trace;
        let shape = t.attention.shape();
        let (b, l, h, tt) = (shape[0], shape[1], shape[2], tokens);
        let special = self.runner.model().tokenizer.special_ids();
        let model = self.runner.model();
        let info = RunInfo {
            model: model.short_name(),
            model_type: model.config.family.name(),
            backend: &run.backend,
            fallback: run.fallback.as_deref(),
            mask: kind,
            mask_ablation: kind != model.own_mask(),
            elapsed_ms: run.elapsed_ms,
            reused,
            attention: opts.attention,
            long_run: keeps_heads.then(|| self.next_long.get()),
            shape: [b, l, h, tokens, tokens],
            reach: model
                .config
                .architecture
                .layers
                .iter()
                .map(|l| l.reach)
                .collect(),
            items: ItemInput::all(&texts, pair.as_deref(), &input),
            head_mask: opts.head_mask.pairs().map(|(l, h)| [l, h]).collect(),
            scale: opts.scale,
            no_rope: opts.no_rope,
            no_qk_norm: opts.no_qk_norm,
            numerics: crate::engine::numerics_of(&run.backend, opts.numerics),
            head_metrics: if options.head_metrics { &METRICS } else { &[] },
            head_roles: if options.head_roles { &ROLES } else { &[] },
            repeats: match options.head_roles {
                true => (0..b).map(|i| Repeated::detect(&input, i)).collect(),
                false => vec![],
            },
        };
        let o = Object::new();
        set(&o, "info", to_js(&info)?)?;
        if !long {
            let kv_heads = model.config.architecture.heads.key_value;
            let items = js_sys::Array::new();
            for i in 0..b {
                let spares = &self.spares;
                items.push(&run_records(t, i, model.weights.stack(), kv_heads, spares)?.into());
            }
            set(&o, "records", items)?;
            set(&o, "summary", heads_summary(t)?)?;
        }
        set(&o, "mask", mask_bytes(&t.mask))?;
        if let Some(l) = &t.logits {
            set(&o, "logits", flat(l))?;
        }
        if let (Some(k), Some(logits)) = (options.top_k, lm_logits.as_ref()) {
            let all: Vec<_> = logits // (B, T, V)
                .outer_iter()
                .map(|item| next_tokens(item, k, &model.tokenizer))
                .collect();
            set(&o, "nextTokens", to_js(&all)?)?;
        }
        // a long run's: the last position's alone, the others empty
        if let (Some(k), Some(logits)) = (options.top_k, next_logits) {
            let all: Vec<Vec<Vec<_>>> = next_tokens(logits.view(), k, &model.tokenizer) // (B, V)
                .into_iter()
                .map(|last| {
                    let mut rows = vec![vec![]; tt - 1];
                    rows.push(last);
                    rows
                })
                .collect();
            set(&o, "nextTokens", to_js(&all)?)?;
        }
        if options.head_metrics {
            // (B, metric, L, H), metrics in `info.head_metrics` order
            let mut all = Vec::with_capacity(b * METRICS.len() * l * h);
            for i in 0..b {
                let m = HeadMetrics::of(&item_attention(t, &input, i, special)).map_err(js_err)?;
                for (_, values) in m.all() {
                    all.extend(values.iter());
                }
            }
            set(&o, "headMetrics", Float32Array::from(all.as_slice()))?;
        }
        if let Some(values) = t.values.as_deref().filter(|_| options.value_norms) {
            // (B, L, H, T)
            let mut all = Vec::with_capacity(b * l * h * tt);
            for i in 0..b {
                let norms =
                    key_value_norms(model.weights.as_ref(), values, i, h).map_err(js_err)?;
                all.extend(norms.iter());
            }
            set(&o, "valueNorms", Float32Array::from(all.as_slice()))?;
        }
        if options.head_roles {
            // (B, role, L, H), roles in `info.head_roles` order; NaN where a text does not repeat
            let mut all = Vec::with_capacity(b * ROLES.len() * l * h);
            for (i, repeated) in info.repeats.iter().enumerate() {
                match repeated {
                    Some(r) => {
                        let item = item_attention(t, &input, i, special);
                        for (_, values) in HeadRoles::of(&item, *r).map_err(js_err)?.all() {
                            all.extend(values.iter());
                        }
                    }
                    None => all.resize(all.len() + ROLES.len() * l * h, f32::NAN),
                }
            }
            set(&o, "headRoles", Float32Array::from(all.as_slice()))?;
        }
        if let (Some(ask), Some(writes)) = (&options.logit_attribution, t.writes.as_ref()) {
            let all = js_sys::Array::new();
            let mut head_writes = Vec::new(); // (B, L, H, D)
            for i in 0..b {
                let opts = AttributionOptions {
                    position: None,
                    target: ask.targets.get(i).copied().flatten(),
                    k: 0,
                };
                let sizes = (h, input.length(i));
                let a = LogitAttribution::of(
                    model.weights.as_ref(),
                    &model.tokenizer,
                    (writes, lm_logits.as_ref()),
                    i,
                    sizes,
                    opts,
                )
                .map_err(js_err)?;
                all.push(&to_js(&a)?);
                head_writes.extend(a.head_writes.iter().copied());
            }
            set(&o, "logitAttribution", all)?;
            set(&o, "headWrites", Float32Array::from(head_writes.as_slice()))?;
        }
        if let (true, Some(writes), Some(values)) =
            (options.flow, t.writes.as_ref(), t.values.as_deref())
        {
            let (mut heads, mut residual) = (Vec::new(), Vec::new()); // (B, L, H, T, T), (B, L, T)
            for i in 0..b {
                let item = item_attention(t, &input, i, special);
                let f =
                    Flow::of(model.weights.as_ref(), writes, values, &item, i).map_err(js_err)?;
                heads.extend(f.heads.iter().copied());
                residual.extend(f.residual.iter().copied());
            }
            let x = Object::new();
            set(&x, "heads", Float32Array::from(heads.as_slice()))?;
            set(&x, "residual", Float32Array::from(residual.as_slice()))?;
            set(&o, "flow", x)?;
        }
        // a long run's rollout would multiply L matrices of T × T: the page says so instead
        if options.rollout && !long {
            let mut all = Vec::with_capacity(b * tt * tt); // (B, T, T)
            for i in 0..b {
                let r = rollout(&item_attention(t, &input, i, special)).map_err(js_err)?;
                all.extend(r.iter());
            }
            set(&o, "rollout", Float32Array::from(all.as_slice()))?;
        }
        if options.sentence_embedding {
            let mut all = vec![]; // (B, D)
            for i in 0..b {
                all.extend(sentence_embedding(
                    t.hidden.index_axis(ndarray::Axis(0), i),
                    input.valid.row(i),
                ));
            }
            set(&o, "sentenceEmbedding", Float32Array::from(all.as_slice()))?;
        }
        if let Some(hs) = &t.hidden_states {
            set(&o, "hiddenStates", flat(hs))?;
            let mut all = Vec::with_capacity(b * l * tt); // (B, L, T)
            for i in 0..b {
                all.extend(layer_similarity(hs.index_axis(ndarray::Axis(0), i)).iter());
            }
            set(&o, "layerSimilarity", Float32Array::from(all.as_slice()))?;
        }
        if let Some(lt) = &t.layer_trace {
            let x = Object::new();
            set(&x, "layer", lt.layer as f64)?;
            // each value by its name in camelCase (`q`, `attentionOutput`, `qRope`, …): (B, T, c),
            // or (B, heads, T, d) for a value split into heads
            for (name, a) in &lt.values {
                set(&x, &camel_case(name), flat(a))?;
            }
            if let Some(e) = &lt.embeddings {
                let y = Object::new();
                for (name, a) in [
                    ("word", Some(&e.word)),
                    ("position", e.position.as_ref()),
                    ("tokenType", e.token_type.as_ref()),
                    ("sum", Some(&e.sum)),
                    ("normed", Some(&e.normed)),
                ] {
                    if let Some(a) = a {
                        set(&y, name, flat(a))?;
                    }
                }
                set(&x, "embeddings", y)?;
            }
            set(&o, "layerTrace", x)?;
        }
        if !cross.is_empty() {
            let all = js_sys::Array::new();
            for c in &cross {
                let x = Object::new();
                set(&x, "layer", c.layer as f64)?;
                set(&x, "queries", to_js(&c.queries)?)?;
                set(&x, "keys", to_js(&c.keys)?)?;
                set(&x, "attention", flat(&c.attention))?;
                all.push(&x);
            }
            set(&o, "crossAttention", all)?;
        }
        if let Some(from) = run.trace.queries_keys.take().filter(|_| keeps_heads) {
            let id = self.next_long.get();
            self.next_long.set(id.wrapping_add(1));
            // (the trace's own mask: the run's last use of it)
            let mask = std::mem::replace(&mut run.trace.mask, Mask::none(0, 0, 0));
            *self.long.borrow_mut() = Some(LongRun { id, from, mask });
        }
        Ok(o.into())
    }

    /// Writes to the residual stream through the frozen final norm (`writes`, `(N, D)` flat: a
    /// run's `headWrites`, or some of them) read onto the vocabulary by the LM head: `[N]` of
    /// `{promotes, suppresses}`, each `k` of `{id, token, value}` ([`read_out`]).
    #[wasm_bindgen(js_name = readOut)]
    pub fn read_out(&self, writes: Vec<f32>, k: usize) -> Result<JsValue, JsError> {
        let model = self.runner.model();
        let lm_head = crate::engine::network::Network::unembedding(model.weights.as_ref())
            .ok_or_else(|| JsError::new("this model has no LM head to read a write onto"))?
            .lm_head;
        let d = model.config.hidden_size;
        if d == 0 || !writes.len().is_multiple_of(d) {
            return Err(JsError::new(&format!(
                "{} values are not whole writes of the model's width {d}",
                writes.len()
            )));
        }
        let writes = ndarray::Array2::from_shape_vec((writes.len() / d, d), writes)
            .map_err(|e| JsError::new(&format!("the writes: {e}")))?;
        #[derive(Serialize)]
        struct Read {
            promotes: Vec<crate::analysis::logit_attribution::TokenValue>,
            suppresses: Vec<crate::analysis::logit_attribution::TokenValue>,
        }
        let read: Vec<Read> = read_out(writes.view(), lm_head, &model.tokenizer, k)
            .into_iter()
            .map(|(promotes, suppresses)| Read {
                promotes,
                suppresses,
            })
            .collect();
        to_js(&read)
    }

    /// Heads `first…` of layer `layer` of item `item` of long run `run`, folded for the worker's
    /// summary of every head ([`crate::analysis::thumbnail`]): the thumbnails the pass folded as
    /// it went where it did (the CPU engine's: every head from `first` of `layer` to the run's
    /// last, layer after layer and item after item, with nothing computed), or else as many
    /// heads as there are threads (fewer at the layer's end) computed again from the run's
    /// queries and keys, each folded on the thread that computed it. `{heads, side, own, sink}`,
    /// `own` the heads as they are and `sink` with their first key hidden, each `{thumbs
    /// (Float32Array, heads × side × side), probMax (Float32Array), probArg (Uint32Array,
    /// q·T + k)}`. Errors as [`Session::long_head`]'s.
    #[wasm_bindgen(js_name = summaryHeads)]
    pub fn summary_heads(
        &self,
        run: u32,
        item: usize,
        layer: usize,
        first: usize,
    ) -> Result<JsValue, JsError> {
        use crate::analysis::thumbnail::{Bins, HeadThumbnails, Thumbnail};
        use rayon::prelude::*;
        let kept = self.long.borrow();
        let long = LongRun::kept(&kept, run)?;
        let (_, t, _) = long.mask.dim();
        let from = &long.from;
        let (h, layers) = (from.heads.query, from.queries.len());
        let computed;
        let folded: &[HeadThumbnails] = match &from.thumbnails {
            Some(all) => {
                if layer >= layers || first >= h || (item * layers + layer + 1) * h > all.len() {
                    return Err(JsError::new(&format!(
                        "item {item}, layer {layer}, head {first}: the run has {} item(s) of \
                         {layers} layers of {h} heads (0-based)",
                        all.len() / (layers * h).max(1)
                    )));
                }
                &all[(item * layers + layer) * h + first..]
            }
            None => {
                let heads = from.heads_together(first);
                let some = from
                    .heads(item, layer, heads, &long.mask, false)
                    .map_err(js_err)?;
                let bins = Bins::of(t);
                computed = crate::engine::cpu::forward::on_the_pool(|| {
                    some.par_iter()
                        .map(|one| HeadThumbnails::of(one.probs.view(), bins))
                        .collect::<Vec<_>>()
                });
                // the page's progress box draws each layer as its last head is in (the CPU
                // engine's pass shows its layers itself), the first item's
                if item == 0 {
                    let own = computed.iter().map(|f| f.own.values.as_slice());
                    self.progress.folded_heads(layer, first, h, bins.side, own);
                }
                &computed
            }
        };
        let summary = |pick: fn(&HeadThumbnails) -> &Thumbnail| {
            // the heads' thumbnails side by side, copied into JavaScript once
            let cells = folded.first().map_or(0, |f| pick(f).values.len());
            let mut thumbs = Vec::with_capacity(folded.len() * cells);
            for (i, f) in folded.iter().enumerate() {
                let values = &pick(f).values;
                if values.len() != cells {
                    return Err(JsError::new(&format!(
                        "head {i} of the summary has a thumbnail of {} cells, the first {cells}",
                        values.len()
                    )));
                }
                thumbs.extend_from_slice(values);
            }
            let max: Vec<f32> = folded.iter().map(|f| pick(f).max).collect();
            let arg: Vec<u32> = folded.iter().map(|f| pick(f).arg as u32).collect();
            thumbnails_object(&thumbs, &max, &arg)
        };
        let (own, sink) = (summary(|f| &f.own)?, summary(|f| &f.without_sink)?);
        let o = Object::new();
        set(&o, "heads", folded.len() as f64)?;
        set(&o, "side", Bins::of(t).side as f64)?;
        set(&o, "own", own)?;
        set(&o, "sink", sink)?;
        Ok(o.into())
    }

    /// Head `head` of layer `layer` over item `item` of long run `run` (its `info.long_run`),
    /// computed again from the run's queries and keys, its rows on the threads:
    /// `{attention, score_max}`, `attention` a Float32Array of `(T, T)`, `[query][key]` (the
    /// values a run that keeps them gives: [`run_records`]), `score_max` its largest |score|
    /// over every cell, the masked ones too (the steps view's scale, folded where the scores
    /// are made: the page holds none of a long run's `T²` scores, only windows of them,
    /// [`Session::long_scores`]). `into_attention`, where given and of `T·T` values, is written
    /// over and returned (a head the page let go: memory already touched, where a new array's
    /// first write of each page costs more than the copy itself).
    /// `pool` (`{part: {q0, q1, k0, k1}, px}`, or none) asks for the head's part max-pooled to
    /// `px` pixels a side as its rows are made, as the head view pools it (web/summary.js
    /// `pooledPart`): `pooled` then holds `{part, px, w, rows, cols, max, arg, values
    /// (Float32Array), mask (Uint8Array)}` (`analysis::thumbnail::PooledPart`), so the page
    /// need not read the head's `T²` values again on its main thread to draw it.
    /// `scores` (`{q0, q1, k0, k1}`, or none) asks for a window of its scores with it (the
    /// steps view's): `scores` then holds `{part, values}`, as [`Session::long_scores`] gives.
    /// An error when the session no longer keeps that run (it keeps the last), or names a
    /// layer, head, item or part the run does not have.
    #[allow(clippy::too_many_arguments)]
    #[wasm_bindgen(js_name = longHead)]
    pub fn long_head(
        &self,
        run: u32,
        item: usize,
        layer: usize,
        head: usize,
        into_attention: Option<Float32Array>,
        pool: JsValue,
        scores: JsValue,
    ) -> Result<JsValue, JsError> {
        let kept = self.long.borrow();
        let long = LongRun::kept(&kept, run)?;
        let t = long.mask.dim().1;
        #[derive(serde::Deserialize)]
        struct Pool {
            part: Part,
            px: usize,
        }
        let pool: Option<Pool> = optional(pool, "longHead's pool")?;
        // the window of scores first: a part the run does not have is refused before the head
        let window: Option<Part> = optional(scores, "longHead's scores")?;
        let scores = window
            .map(|part| long.scores_in(item, layer, head, part))
            .transpose()?;
        let pooled = match pool {
            Some(Pool { part, px }) => Some(PoolFold::new(part, px, t).map_err(js_err)?),
            None => None,
        };
        // A row's probabilities outside its mask's span are 0 (masked_fill's −∞ through
        // softmax): only the span is copied (a causal head's lower half).
        let into = into_attention.filter(|a| a.length() as usize == t * t);
        let mut out = LongHeadOut {
            t,
            item,
            mask: &long.mask,
            written_over: into.is_some(),
            attention: into.unwrap_or_else(|| Float32Array::new_with_length((t * t) as u32)),
            pooled,
        };
        // computed LONG_HEAD_PART values at a time, each part copied out while the next is
        // computed: the head whole only in JavaScript (at 8,192 tokens 268 MB)
        let rows = (LONG_HEAD_PART / t.max(1)).max(1);
        let score_max = long
            .from
            .head_in_parts(item, layer, head, &long.mask, rows, |first, p, m| {
                out.part(first, p, m)
            })
            .map_err(js_err)?;
        let o = Object::new();
        set(&o, "attention", out.attention)?;
        set(&o, "score_max", score_max)?;
        if let Some(p) = out.pooled.map(PoolFold::finish) {
            let to = serde_wasm_bindgen::to_value(&p).map_err(|e| JsError::new(&e.to_string()))?;
            let to: Object = to.unchecked_into();
            set(&to, "values", Float32Array::from(p.values.as_slice()))?;
            set(&to, "mask", Uint8Array::from(p.mask.as_slice()))?;
            set(&o, "pooled", to)?;
        }
        if let Some(scores) = scores {
            set(&o, "scores", scores)?;
        }
        Ok(o.into())
    }

    /// A window of head `head` of layer `layer` over item `item` of long run `run`: its scores
    /// (`QKᵀ/√d_k` before the mask, the masked ones too) of the queries `q0..q1` against the
    /// keys `k0..k1` of `part` (`{q0, q1, k0, k1}`), computed from the run's queries and keys,
    /// the same bits as a run that keeps its scores gives: `{part, values}`, `values` a
    /// Float32Array of `(q1 − q0, k1 − k0)`. A long run's page holds windows of scores, not
    /// the `T²` of a head (the steps view's, a cell the rotary panel reads).
    #[wasm_bindgen(js_name = longScores)]
    pub fn long_scores(
        &self,
        run: u32,
        item: usize,
        layer: usize,
        head: usize,
        part: JsValue,
    ) -> Result<JsValue, JsError> {
        let kept = self.long.borrow();
        let long = LongRun::kept(&kept, run)?;
        let part: Part = serde_wasm_bindgen::from_value(part)
            .map_err(|e| JsError::new(&format!("longScores' part: {e}")))?;
        Ok(long.scores_in(item, layer, head, part)?.into())
    }

    /// Translates `sources` with an encoder–decoder model on `engine` (`cpu`, or `gpu`: the
    /// session's runner): greedily, or teacher-forcing `targets` (one per source) when given.
    /// `options`: `{maxNewTokens?: number (default 64, or the model's positions), topK?:
    /// number, padded?: bool, valueWeighted?: bool}`. Returns what `attnscope translate` prints,
    /// `{model, model_type, backend, results: [{source, source_ids, source_tokens,
    /// source_offsets, target?, output_ids, output_tokens, output_text, steps?: [T] of
    /// {top_k}, records}]}`, each item's attentions as `records` (one a layer, the encoder's
    /// self-attention, the decoder's and its cross-attention: [`translation_records`]; with
    /// `valueWeighted`, each key's value size beside them) where the CLI nests them; plus
    /// `elapsed_ms` and `step_ms` (each greedy step's time, the first's with the encoder's);
    /// with `padded`, the batch as the engine ran it ([`PaddedBatch`]: the masks applied).
    pub async fn translate(
        &self,
        sources: Vec<String>,
        targets: Option<Vec<String>>,
        engine: String,
        options: JsValue,
    ) -> Result<JsValue, JsError> {
        let engine: Engine = engine.parse()?;
        let options: TranslateOptions = optional(options, "translate options")?.unwrap_or_default();
        let model = self.runner.model();
        crate::engine::translate::EncoderDecoder::translating(model).map_err(js_err)?;
        let refs: Vec<&str> = sources.iter().map(String::as_str).collect();
        let decoding = match &targets {
            Some(t) if t.len() != sources.len() => {
                return Err(JsError::new(&format!(
                    "{} targets for {} sources: one per source",
                    t.len(),
                    sources.len()
                )))
            }
            Some(t) => {
                let t: Vec<&str> = t.iter().map(String::as_str).collect();
                Decoding::forced(model, &t).map_err(js_err)?
            }
            None => Decoding::Greedy {
                max_new_tokens: options
                    .max_new_tokens
                    .unwrap_or_else(|| 64.min(model.config.max_position_embeddings)),
            },
        };
        let start = Instant::now();
        let (tr, backend, fallback) = match engine {
            Engine::Gpu => self.runner.translate(&refs, &decoding).await,
            Engine::Cpu => crate::engine::translate(model, &refs, &decoding)
                .map(|tr| (tr, "cpu".to_owned(), None)),
        }
        .map_err(js_err)?;
        let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
        let mut report = TranslationReport::new(
            model,
            &backend,
            &sources,
            targets.as_deref(),
            &tr,
            options.top_k,
        );
        report.fallback = fallback.as_deref();
        if options.padded {
            report.padded = Some(PaddedBatch::new(model, &tr, targets.is_some()));
        }
        // the sizes of the same pass, teacher-forced over the output written (CPU engine)
        let norms = match options.value_weighted {
            true => Some(
                crate::engine::translate::value_norms(model, &refs, &tr.output_ids)
                    .map_err(js_err)?,
            ),
            false => None,
        };
        // the attentions go as records, not nested arrays
        for item in &mut report.results {
            item.encoder_attention = None;
            item.decoder_attention = None;
            item.cross_attention = None;
        }
        let o = to_js(&report)?;
        let items = Reflect::get(&o, &"results".into())
            .map_err(|_| JsError::new("the translation's report has no results"))?;
        let kv_heads = model.config.architecture.heads.key_value;
        for b in 0..sources.len() {
            let records = translation_records(&tr, b, kv_heads, norms.as_ref())?;
            let item = Reflect::get_u32(&items, b as u32)
                .map_err(|_| JsError::new(&format!("the translation's report has no item {b}")))?;
            set(&item.into(), "records", records)?;
        }
        for (key, value) in [
            ("elapsed_ms", JsValue::from(elapsed_ms)),
            ("step_ms", to_js(&tr.step_ms)?),
        ] {
            Reflect::set(&o, &key.into(), &value)
                .map_err(|_| JsError::new(&format!("could not set {key}")))?;
        }
        Ok(o)
    }

    /// Starts writing after `prompt` with a decoder-only model on `engine` (`cpu`, or `gpu`:
    /// WebGPU where the session has a device, else the CPU engine), greedily: `options`
    /// `{maxNewTokens?: number (32), topK?: number (5), chat?: bool, headMask?: string}`.
    /// Returns a [`Generating`] the page steps one token at a time; the prompt's errors (no
    /// chat template, too long, not a decoder) are thrown here. Past the attention a generation
    /// keeps (`L·H·N²`, N its positions), the generation is long ([`Generating::long`]).
    pub fn generate(
        &self,
        prompt: String,
        engine: String,
        options: JsValue,
    ) -> Result<Generating, JsError> {
        let engine: Engine = engine.parse()?;
        let options: GenerateOptions = optional(options, "generate options")?.unwrap_or_default();
        let model = self.runner.shared_model();
        let (text, enc) = if options.chat {
            let (mut written, enc) = model.encode_chat(&[&prompt]).map_err(js_err)?;
            (written.remove(0), enc)
        } else {
            let enc = model.tokenizer.encode(&[&prompt], None).map_err(js_err)?;
            (prompt, enc)
        };
        let ids: Vec<u32> = enc.ids.row(0).iter().take(enc.length(0)).copied().collect();
        let opts = crate::engine::GenerateOptions {
            max_new_tokens: options.max_new_tokens,
            top_k: options.top_k,
            stop_at_eos: true,
            head_mask: HeadMask::parse(&options.head_mask).map_err(js_err)?,
            numerics: options.numerics,
        };
        // past the attention a generation keeps, a long one: each pass a run of a long text,
        // which checks what it keeps itself
        use crate::engine::generate::{check_prompt, keeps_attention, positions};
        check_prompt(&model, &ids, &opts).map_err(js_err)?;
        let long = keeps_attention(&model.config, positions(&ids, &opts)).is_err();
        let steps = match (engine, self.runner.shared_gpu()) {
            (Engine::Gpu, Some(gpu)) if !long => GenerationSteps::Gpu(Box::new(
                crate::engine::gpu::GpuSteps::new(gpu, model.clone(), ids.len(), &opts)
                    .map_err(js_err)?,
            )),
            _ => GenerationSteps::Cpu(crate::engine::generate::CpuSteps::new(model.clone(), &opts)),
        };
        Ok(Generating {
            steps,
            state: crate::engine::generate::Greedy::new(&model, &ids, &opts),
            model,
            prompt: text,
            next: None,
            started: false,
            long,
        })
    }

    /// Decoder layer `layer` inside, for source `item` of `sources` and its `outputs` (each the
    /// decoder start token first: a translation's `output_ids`, or a target's), on the CPU engine
    /// in one teacher-forced pass: [`DecoderTraceItem`] (every value by name, `[T][D]`, the
    /// cross-attention's keys and values `[S][D]` and scores `[H][T][S]`).
    #[wasm_bindgen(js_name = decoderTrace)]
    pub fn decoder_trace(
        &self,
        sources: Vec<String>,
        outputs: JsValue,
        layer: usize,
        item: usize,
    ) -> Result<JsValue, JsError> {
        let outputs: Vec<Vec<u32>> = serde_wasm_bindgen::from_value(outputs)
            .map_err(|e| JsError::new(&format!("decoder trace outputs: {e}")))?;
        if item >= sources.len() || item >= outputs.len() {
            return Err(JsError::new(&format!(
                "item {item} of {} sources and {} outputs",
                sources.len(),
                outputs.len()
            )));
        }
        let model = self.runner.model();
        let refs: Vec<&str> = sources.iter().map(String::as_str).collect();
        let tr = crate::engine::decoder_trace(model, &refs, &outputs, layer).map_err(js_err)?;
        to_js(&DecoderTraceItem::new(model, &tr, item, &outputs[item]).map_err(js_err)?)
    }

    /// Runs the same input on the CPU engine and on the session's runner: `{maxAbsDiff, cpuMs,
    /// otherMs, other}`; `other` is `cpu` when the session has no GPU.
    pub async fn check(
        &self,
        texts: Vec<String>,
        pair: Option<String>,
        mask: String,
    ) -> Result<JsValue, JsError> {
        let pair = pair.filter(|p| !p.trim().is_empty());
        let (input, mask, _) = self.prepare(&texts, pair.as_deref(), None, &mask)?;
        let opts = TraceOptions::default();
        let (c, _) = self.forward(Engine::Cpu, &input, &mask, &opts).await?;
        let (other, _) = self.forward(Engine::Gpu, &input, &mask, &opts).await?;
        let diff = c
            .trace
            .attention
            .iter()
            .zip(other.trace.attention.iter())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let o = Object::new();
        set(&o, "maxAbsDiff", diff)?;
        set(&o, "cpuMs", c.elapsed_ms)?;
        set(&o, "otherMs", other.elapsed_ms)?;
        set(&o, "other", other.backend.as_str())?;
        Ok(o.into())
    }
}
