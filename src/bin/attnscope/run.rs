use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use attnscope::analysis::{AttributionOptions, TranslationValueWeighted};
use attnscope::engine::{
    numerics_of, AttentionKept, BackendChoice, Decoding, GenerateOptions, HeadMask, Numerics,
    Runner, ScoreScale, TraceOptions,
};
use attnscope::report::{GenerationReport, Report, ReportOptions};
use attnscope::{Error, Mask, MaskKind, Model};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "attnscope",
    version,
    about = "See how a transformer attends: every layer's and head's attention of an encoder, a \
             decoder or an encoder–decoder, as JSON"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BackendArg {
    Cpu,
    Gpu,
    Auto,
}

impl From<BackendArg> for BackendChoice {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Cpu => BackendChoice::Cpu,
            BackendArg::Gpu => BackendChoice::Gpu,
            BackendArg::Auto => BackendChoice::Auto,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum MaskArg {
    Padding,
    Causal,
    None,
}

impl From<MaskArg> for MaskKind {
    fn from(m: MaskArg) -> Self {
        match m {
            MaskArg::Padding => MaskKind::Padding,
            MaskArg::Causal => MaskKind::Causal,
            MaskArg::None => MaskKind::None,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the model on TEXTs (one right-padded batch) and print every layer's and head's attention as JSON.
    Attention {
        /// Checkpoint folder with config.json, model.safetensors and tokenizer.json.
        #[arg(long)]
        model: PathBuf,
        /// Wrap each TEXT in the model's chat template as a user message (an instruct model),
        /// tokenised as HF's apply_chat_template does (the template's special tokens, none added).
        #[arg(long, conflicts_with = "pair")]
        chat: bool,
        /// cpu, gpu (an error when there is no adapter) or auto (the GPU when there is one).
        #[arg(long, value_enum, default_value = "cpu")]
        backend: BackendArg,
        /// padding: hide [PAD] keys; causal: padding + no-peek; none: hide nothing. Default: the
        /// model's own (causal for a decoder-only model such as GPT-2, padding otherwise); any
        /// other is an ablation, and the JSON says so ("mask_ablation": true).
        #[arg(long, value_enum)]
        mask: Option<MaskArg>,
        /// Second sentence: each TEXT and TEXT_B form one sentence pair.
        #[arg(long, value_name = "TEXT_B")]
        pair: Option<String>,
        /// Include the final hidden states [T][D].
        #[arg(long)]
        hidden: bool,
        /// Include the scaled scores QKᵀ/√d_k [L][H][T][T] (before the mask; QKᵀ with --no-scale).
        #[arg(long)]
        scores: bool,
        /// Include each head's summaries ("head_metrics": entropy, to_cls, to_sep, to_self,
        /// to_prev, to_next, distance, each [L][H]; docs/app.md: "Reading the heads").
        #[arg(long)]
        head_metrics: bool,
        /// Include each head's role scores on a TEXT that repeats a sequence of --period tokens
        /// ("head_roles": previous_token, sink, induction, duplicate_token, each [L][H]; positions
        /// counted after any BOS or [CLS]; docs/app.md: "Reading the heads").
        #[arg(long, requires = "period")]
        head_roles: bool,
        /// Include value-weighted attention (Kobayashi et al. 2020): "value_weighted"
        /// [L][H][T][T], each weight times the size of what the head writes from its key,
        /// α_ij·‖W_O^h v_j‖, and "value_norms" [L][H][T], each key's ‖W_O^h v_j‖ (docs/cli.md:
        /// "Value-weighted attention").
        #[arg(long)]
        value_weighted: bool,
        /// Include the direct logit attribution (Elhage et al. 2021) of a decoder's next token
        /// ("logit_attribution": its logit split into the embedding, each head [L][H], each
        /// feed-forward [L] and the constants, with the --top-k tokens, default 10, each head
        /// promotes and suppresses; docs/cli.md: "What writes the next token").
        #[arg(long)]
        logit_attribution: bool,
        /// The position --logit-attribution reads (0-based; default: the text's last token).
        #[arg(long, value_name = "P", requires = "logit_attribution")]
        position: Option<usize>,
        /// The token id --logit-attribution splits the logit of (default: the likeliest next).
        #[arg(long, value_name = "ID", requires = "logit_attribution")]
        target: Option<u32>,
        /// Include the information-flow routes (Ferrando & Voita 2024) to the text's last
        /// position: "flow": {"threshold", "edges": [{layer, head, from, to, importance}]}, each
        /// head's (head null: the residual's) edge from position `from` at layer `layer` into
        /// `to` at the next, of importance at least --threshold (docs/cli.md: "Information-flow
        /// routes").
        #[arg(long)]
        flow: bool,
        /// The least importance of an edge --flow keeps (default 0.04).
        #[arg(long, value_name = "τ", requires = "flow")]
        threshold: Option<f32>,
        /// The period of --head-roles' TEXT, in tokens: its first 2·N tokens must be a sequence
        /// of N twice (its first token may be its copy's word without the space before it).
        #[arg(long, value_name = "N", requires = "head_roles")]
        period: Option<usize>,
        /// Include the attention rollout [T][T] through the whole stack.
        #[arg(long)]
        rollout: bool,
        /// Include the sentence embedding [D]: the last hidden states mean-pooled over the real
        /// tokens (padding excluded), then L2-normalised (sentence-transformers' pooling).
        #[arg(long)]
        sentence_embedding: bool,
        /// Knock out heads: their context is zero before the output projection, so every later
        /// layer feels it; their own attention is still reported. 0-based LAYER:HEAD pairs.
        #[arg(long, value_name = "L:H[,L:H…]", value_parser = parse_head_mask)]
        head_mask: Option<HeadMask>,
        /// Report only these heads' attention ("heads": [{layer, head, attention [T][T],
        /// scores with --scores}] in layer then head order, in place of "attention"), 0-based
        /// LAYER:HEAD pairs. The pass
        /// keeps each layer's queries and keys rather than every probability and computes these
        /// heads from them, so a text too long for every head's attention runs (SmolLM2-135M at
        /// 1,024 tokens: 24M values kept, not 283M); --head-metrics and --rollout read every
        /// head, computed in turn.
        #[arg(long, value_name = "L:H[,L:H…]", value_parser = parse_head_mask)]
        heads: Option<HeadMask>,
        /// Do not divide the scores by √d_k in any layer (the ablation that shows softmax
        /// saturate); the JSON says "scale": "none".
        #[arg(long)]
        no_scale: bool,
        /// Leave out the rotary positions (a Llama-family model: Q and K as projected, unturned;
        /// the ablation shows what positions do to the scores); the JSON says "no_rope": true.
        #[arg(long)]
        no_rope: bool,
        /// Leave out QK-norm (Qwen3, Gemma 3: each query and key head as projected, not through
        /// its RMSNorm; the ablation shows how far the norm keeps the scores in range); the JSON
        /// says "no_qk_norm": true.
        #[arg(long)]
        no_qk_norm: bool,
        /// How the CPU engine multiplies by a GGUF file's 4-bit matrices: exact (f32, equal to HF)
        /// or fast (the activations rounded to 8 bits, products in integers, as llama.cpp; no
        /// longer equal to HF); the JSON says "numerics": "fast".
        #[arg(long, value_name = "exact|fast", default_value = "exact")]
        numerics: Numerics,
        /// Include every layer's output [L+1][T][D], the embeddings' first (HF's
        /// output_hidden_states).
        #[arg(long)]
        hidden_states: bool,
        /// Include one layer's intermediate values ("layer_trace": input, q, k, v, context,
        /// attention_output, pre_activation, intermediate, output; the embeddings' steps for
        /// layer 0; a Llama-family model adds attn_norm, q_rope, k_rope, ffn_norm, gate, up and
        /// act), 0-based.
        #[arg(long, value_name = "LAYER")]
        layer_trace: Option<usize>,
        /// Include the attention [H][n_q][n_k] of LAYER (0-based) from the pair's second sentence
        /// (queries) to the first (keys), each encoded alone; computed by the CPU engine.
        #[arg(long, value_name = "LAYER", requires = "pair")]
        cross_attention: Option<usize>,
        /// For a model with an LM head (GPT-2, Llama): include "next_tokens" [T][K], at each
        /// position the K likeliest next tokens ({id, token, text, p}, p over the whole
        /// vocabulary).
        #[arg(long, value_name = "K")]
        top_k: Option<usize>,
        /// One text by its token ids, not tokenised (a prompt and what `generate` wrote after
        /// it: its `prompt_ids` then its `output_ids`); TEXT, if given, is the name it goes by.
        #[arg(long, value_name = "ID,ID…", value_delimiter = ',', conflicts_with_all = ["pair", "chat"])]
        ids: Option<Vec<u32>>,
        #[arg(required_unless_present = "ids", num_args = 1..)]
        texts: Vec<String>,
    },
    /// Translate SOURCEs (one right-padded batch) with an encoder–decoder model (Marian): greedy
    /// decoding, or the given --target, and print every attention as JSON (encoder [L][H][S][S],
    /// decoder [L][H][T][T], cross [L][H][T][S]).
    Translate {
        /// Checkpoint folder with config.json, model.safetensors and tokenizer.json.
        #[arg(long)]
        model: PathBuf,
        #[arg(long, value_enum, default_value = "cpu")]
        backend: BackendArg,
        /// Stop after this many new tokens if EOS has not come (default: 64, or the model's
        /// positions if fewer).
        #[arg(long, value_name = "N")]
        max_new_tokens: Option<usize>,
        /// Include "steps" [T]: after each step, the K likeliest next tokens ({id, token, text,
        /// p}, p over the whole vocabulary).
        #[arg(long, value_name = "K")]
        top_k: Option<usize>,
        /// Teacher forcing: decode this target instead of generating (once for every source, or
        /// once per source, in order).
        #[arg(long, value_name = "TEXT")]
        target: Vec<String>,
        /// Include each attention's value-weighted attention (Kobayashi et al. 2020):
        /// "value_weighted" {"encoder" [L][H][S][S], "decoder" [L][H][T][T], "cross"
        /// [L][H][T][S]}, α_ij·‖W_O^h v_j‖, and "value_norms" {"encoder" [L][H][S], "decoder"
        /// [L][H][T], "cross" [L][H][S]}, each key's ‖W_O^h v_j‖ (docs/cli.md).
        #[arg(long)]
        value_weighted: bool,
        #[arg(required = true, num_args = 1..)]
        sources: Vec<String>,
    },
    /// Write after PROMPT with a decoder-only model (GPT-2, Llama, Mistral, Qwen2): greedily,
    /// one token at a time with a key/value cache, until EOS or N new tokens; print the ids,
    /// the text, every attention over the positions the model was fed [L][H][N][N] and each
    /// step's likeliest tokens as JSON.
    Generate {
        /// Checkpoint folder with config.json, model.safetensors and tokenizer.json.
        #[arg(long)]
        model: PathBuf,
        #[arg(long, value_enum, default_value = "cpu")]
        backend: BackendArg,
        /// Stop after this many new tokens if EOS has not come.
        #[arg(long, value_name = "N", default_value_t = 32)]
        max_new_tokens: usize,
        /// The likeliest tokens each step lists ("steps": [{"top_k": [{id, token, text, p}]}]).
        #[arg(long, value_name = "K", default_value_t = 5)]
        top_k: usize,
        /// Wrap PROMPT in the model's chat template as a user message (an instruct model).
        #[arg(long)]
        chat: bool,
        /// Knock these heads out while writing (0-based), as `attention --head-mask`.
        #[arg(long, value_name = "L:H[,L:H…]", value_parser = parse_head_mask)]
        head_mask: Option<HeadMask>,
        /// How the CPU engine multiplies by a GGUF file's 4-bit matrices: exact (f32, equal to HF)
        /// or fast (the activations rounded to 8 bits, products in integers, as llama.cpp; no
        /// longer equal to HF); the JSON says "numerics": "fast".
        #[arg(long, value_name = "exact|fast", default_value = "exact")]
        numerics: Numerics,
        prompt: String,
    },
    /// Time the forward pass at several sequence lengths.
    Bench {
        #[arg(long)]
        model: PathBuf,
        /// cpu: the CPU engine only; gpu or auto: the CPU and the GPU engines (a generation:
        /// gpu, the GPU's alone; cpu or auto, the CPU's).
        #[arg(long, value_enum, default_value = "auto")]
        backend: BackendArg,
        #[arg(long, value_delimiter = ',', default_value = "16,128,512")]
        lengths: Vec<usize>,
        #[arg(long, default_value_t = 5)]
        iters: usize,
        /// Threads for the CPU engine (default: one per core).
        #[arg(long)]
        threads: Option<usize>,
        /// A decoder-only model's generation instead: a prompt of this many tokens, then
        /// `--new-tokens` greedy tokens (every attention kept), on the CPU engine, or with
        /// `--backend gpu` on the GPU's (each step's time in its phases, and its dispatches).
        #[arg(long, value_name = "N", requires = "new_tokens")]
        prompt_tokens: Option<usize>,
        #[arg(long, value_name = "N", requires = "prompt_tokens")]
        new_tokens: Option<usize>,
        /// With --new-tokens: one line of JSON, {model, threads, prompt_tokens, new_tokens,
        /// prefill_ms, decode_tokens_per_s} (medians of --iters runs after a warm-up).
        #[arg(long)]
        json: bool,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Attention {
            model,
            chat,
            backend,
            mask,
            pair,
            hidden,
            scores,
            head_metrics,
            head_roles,
            value_weighted,
            logit_attribution,
            position,
            target,
            flow,
            threshold,
            period,
            rollout,
            sentence_embedding,
            head_mask,
            heads,
            no_scale,
            no_rope,
            no_qk_norm,
            numerics,
            hidden_states,
            layer_trace,
            cross_attention,
            top_k,
            ids,
            texts,
        } => attention(
            &model,
            Tokens::of(chat, ids),
            backend,
            mask.map(Into::into),
            pair.as_deref(),
            &TraceOptions {
                // the head summaries read the scores too (one logarithm a row, not a cell)
                scores: scores || head_metrics,
                head_mask: head_mask.unwrap_or_default(),
                scale: if no_scale {
                    ScoreScale::None
                } else {
                    ScoreScale::SqrtDk
                },
                hidden_states,
                layer_trace,
                embeddings: false, // the layer trace has them for layer 0
                lm_logits: top_k.is_some(),
                next_logits: false,
                decoder_trace: None,
                no_rope,
                no_qk_norm,
                attention: match heads {
                    Some(_) => AttentionKept::QueriesKeys,
                    None => AttentionKept::Probabilities,
                },
                values: value_weighted || flow,
                writes: logit_attribution || flow,
                progress: Default::default(), // the CLI shows none
                numerics,
            },
            cross_attention,
            ReportOptions {
                heads: heads.map_or_else(Vec::new, |h| h.pairs().collect()),
                hidden,
                scores,
                head_metrics,
                head_roles: period.filter(|_| head_roles),
                value_weighted,
                logit_attribution: logit_attribution.then_some(AttributionOptions {
                    position,
                    target,
                    k: top_k.unwrap_or(10),
                }),
                flow: flow
                    .then(|| threshold.unwrap_or(attnscope::analysis::flow::DEFAULT_THRESHOLD)),
                rollout,
                sentence_embedding,
                top_k,
            },
            &texts,
        ),
        Command::Translate {
            model,
            backend,
            max_new_tokens,
            top_k,
            target,
            value_weighted,
            sources,
        } => translate(
            &model,
            backend,
            (max_new_tokens, top_k, value_weighted),
            &target,
            &sources,
        ),
        Command::Generate {
            model,
            backend,
            max_new_tokens,
            top_k,
            chat,
            head_mask,
            numerics,
            prompt,
        } => generate(
            &model,
            backend,
            GenerateOptions {
                max_new_tokens,
                top_k,
                stop_at_eos: true,
                head_mask: head_mask.unwrap_or_default(),
                numerics,
            },
            chat,
            &prompt,
        ),
        Command::Bench {
            model,
            backend,
            threads,
            prompt_tokens: Some(prompt_tokens),
            new_tokens: Some(new_tokens),
            iters,
            json,
            ..
        } => crate::bench::generation(
            &model,
            backend.into(),
            threads,
            prompt_tokens,
            new_tokens,
            iters,
            json,
        ),
        Command::Bench {
            model,
            backend,
            lengths,
            iters,
            threads,
            ..
        } => crate::bench::run(&model, backend.into(), &lengths, iters, threads),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `attnscope ... | head` closing the pipe early is not an error
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `attnscope translate`: see [`Command::Translate`].
fn translate(
    dir: &std::path::Path,
    backend: BackendArg,
    (max_new_tokens, top_k, value_weighted): (Option<usize>, Option<usize>, bool),
    targets: &[String],
    sources: &[String],
) -> Result<(), Error> {
    let model = Model::from_path(dir)?;
    attnscope::engine::translate::EncoderDecoder::translating(&model)?;
    let refs: Vec<&str> = sources.iter().map(String::as_str).collect();
    let targets: Option<Vec<String>> = match targets.len() {
        0 => None,
        1 => Some(vec![targets[0].clone(); sources.len()]),
        n if n == sources.len() => Some(targets.to_vec()),
        n => {
            return Err(Error::Input(format!(
                "{n} targets for {} sources: give one --target for all, or one per source",
                sources.len()
            )))
        }
    };
    let decoding = match &targets {
        Some(targets) => {
            let refs: Vec<&str> = targets.iter().map(String::as_str).collect();
            Decoding::forced(&model, &refs)?
        }
        None => Decoding::Greedy {
            max_new_tokens: max_new_tokens
                .unwrap_or_else(|| 64.min(model.config.max_position_embeddings)),
        },
    };
    let runner = pollster::block_on(Runner::<Model>::new(model, backend.into()))?;
    let (tr, ran, fallback) = pollster::block_on(runner.translate(&refs, &decoding))?;
    // the value sizes of the same pass (teacher-forced over the output written), CPU engine
    let norms = value_weighted
        .then(|| attnscope::engine::translate::value_norms(runner.model(), &refs, &tr.output_ids))
        .transpose()?;
    let mut report = attnscope::report::TranslationReport::new(
        runner.model(),
        &ran,
        sources,
        targets.as_deref(),
        &tr,
        top_k,
    );
    if let Some(norms) = &norms {
        for (b, item) in report.results.iter_mut().enumerate() {
            item.value_weighted = Some(TranslationValueWeighted::of(&tr, norms, b));
        }
    }
    report.fallback = fallback.as_deref();
    print_json(&report)
}

/// `report` as one line of JSON on stdout.
fn print_json(report: &impl serde::Serialize) -> Result<(), Error> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer(&mut out, report).map_err(|e| match e.io_error_kind() {
        Some(kind) => Error::Io {
            path: "<stdout>".into(),
            source: kind.into(),
        },
        None => Error::Input(e.to_string()),
    })?;
    writeln!(out)
        .and_then(|_| out.flush())
        .map_err(|source| Error::Io {
            path: "<stdout>".into(),
            source,
        })
}

fn parse_head_mask(s: &str) -> Result<HeadMask, String> {
    HeadMask::parse(s).map_err(|e| e.to_string())
}

/// `attnscope generate`: see [`Command::Generate`].
fn generate(
    dir: &std::path::Path,
    backend: BackendArg,
    opts: GenerateOptions,
    chat: bool,
    prompt: &str,
) -> Result<(), Error> {
    let model = Model::from_path(dir)?;
    let (text, ids) = if chat {
        let (mut written, ids) = model.encode_chat(&[prompt])?;
        (written.remove(0), ids)
    } else {
        (prompt.to_owned(), model.tokenizer.encode(&[prompt], None)?)
    };
    let n = ids.length(0);
    let prompt_ids: Vec<u32> = ids.ids.row(0).iter().take(n).copied().collect();
    let runner = pollster::block_on(Runner::<Model>::new(model, backend.into()))?;
    let run = pollster::block_on(runner.generate(&prompt_ids, &opts))?;
    if let Some(why) = &run.fallback {
        eprintln!("note: running on the CPU: {why}");
    }
    let mut report = GenerationReport::new(runner.model(), &run.backend, &text, &run.generation);
    report.fallback = run.fallback.as_deref();
    report.head_mask = opts.head_mask.pairs().map(|(l, h)| [l, h]).collect();
    report.numerics = numerics_of(&run.backend, opts.numerics);
    print_json(&report)
}

/// How `attention` reads its texts into tokens.
enum Tokens {
    /// The tokenizer's way, with the special tokens it adds.
    Tokenised,
    /// Each text as a user message in the model's chat template.
    Chat,
    /// One text by these ids.
    Ids(Vec<u32>),
}

impl Tokens {
    fn of(chat: bool, ids: Option<Vec<u32>>) -> Self {
        match (ids, chat) {
            (Some(ids), _) => Self::Ids(ids),
            (None, true) => Self::Chat,
            (None, false) => Self::Tokenised,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn attention(
    dir: &std::path::Path,
    tokens: Tokens,
    backend: BackendArg,
    mask_kind: Option<MaskKind>,
    pair: Option<&str>,
    opts: &TraceOptions,
    cross_attention: Option<usize>,
    report_opts: ReportOptions,
    texts: &[String],
) -> Result<(), Error> {
    let model = Model::from_path(dir)?;
    if report_opts.top_k.is_some() && !model.weights.has_lm_head() {
        return Err(Error::Input(format!(
            "--top-k: {} has no LM head to predict the next token with (model_type {})",
            model.short_name(),
            model.config.family.name()
        )));
    }
    let mask_kind = mask_kind.unwrap_or_else(|| model.own_mask());
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (texts, input) = match tokens {
        Tokens::Chat => model.encode_chat(&refs)?,
        Tokens::Tokenised => (texts.to_vec(), model.tokenizer.encode(&refs, pair)?),
        Tokens::Ids(ids) => {
            if texts.len() > 1 {
                return Err(Error::Input(format!(
                    "--ids gives one text: {} TEXTs given beside it",
                    texts.len()
                )));
            }
            let name = texts.first().cloned().unwrap_or_default();
            (vec![name], model.encode_ids(&ids)?)
        }
    };
    let texts = &texts[..];
    for (text, cut) in texts.iter().zip(&input.truncated) {
        if *cut {
            eprintln!(
                "warning: {text:.40?}… was truncated to the model's {} tokens",
                model.tokenizer.max_len()
            );
        }
    }
    let mask = Mask::from_kind(mask_kind, input.valid.view());
    let runner = pollster::block_on(Runner::<Model>::new(model, backend.into()))?;
    let run = pollster::block_on(runner.forward(&input, &mask, opts))?;
    let model = runner.model();
    if let Some(why) = &run.fallback {
        eprintln!("note: running on the CPU: {why}");
    }
    let mut report = Report::new(
        model,
        &run.backend,
        mask_kind,
        texts,
        pair,
        &input,
        &run.trace,
        report_opts,
    )?;
    report.fallback = run.fallback.as_deref();
    report.head_mask = opts.head_mask.pairs().map(|(l, h)| [l, h]).collect();
    report.scale = opts.scale;
    report.no_rope = opts.no_rope;
    report.numerics = numerics_of(&run.backend, opts.numerics);
    report.no_qk_norm = opts.no_qk_norm;
    if let (Some(layer), Some(second)) = (cross_attention, pair) {
        for (item, first) in report.results.iter_mut().zip(texts) {
            item.cross_attention = Some(attnscope::analysis::cross_attention(
                model, first, second, layer, opts,
            )?);
        }
    }
    print_json(&report)
}
