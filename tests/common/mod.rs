//! Shared test helpers: checkpoints, golden fixtures and comparisons.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use attnscope::engine::gpu::{GpuDevice, GpuEngine};
use attnscope::engine::{cpu, GenerateOptions, ScoreScale, TraceOptions};
use attnscope::families::bert::BertWeights;
use attnscope::model::Encoded;
use attnscope::{Mask, MaskKind, Model, Trace};
use ndarray::{s, ArrayD, ArrayViewD, IxDyn};
use serde::Deserialize;

/// BERT's (and RoBERTa's) weights of `m`, when it is one.
pub fn bert(m: &Model) -> Option<&BertWeights> {
    m.weights.as_any().downcast_ref()
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where a named test checkpoint lives: `minilm` is the default model fetched by
/// `scripts/setup.sh` (or `$ATTNSCOPE_MODEL`); the tiny ones are committed.
pub fn model_dir(name: &str) -> PathBuf {
    match name {
        "minilm" => std::env::var_os("ATTNSCOPE_MODEL")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("assets/models/all-MiniLM-L6-v2")),
        // the dates → ISO model the repository ships (tools/train_dates.py)
        "dates" => root().join("models/dates"),
        other => root().join("tests/fixtures/models").join(other),
    }
}

/// A loaded checkpoint, shared by all tests of one test binary.
pub fn model(name: &str) -> &'static Model {
    static CACHE: OnceLock<Mutex<HashMap<String, &'static Model>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache.entry(name.to_owned()).or_insert_with(|| {
        let dir = model_dir(name);
        let m = Model::from_dir(&dir).unwrap_or_else(|e| {
            panic!(
                "cannot load test model {name} from {}: {e} (run scripts/setup.sh)",
                dir.display()
            )
        });
        Box::leak(Box::new(m))
    })
}

#[derive(Debug, Deserialize)]
pub struct Meta {
    pub model: String,
    pub texts: Vec<String>,
    pub pair: Option<String>,
    pub mask: MaskKind,
    pub tokens: Vec<Vec<String>>,
    pub token_ids: Vec<Vec<u32>>,
    pub type_ids: Vec<Vec<u32>>,
    /// The heads the reference knocked out, `[layer, head]`.
    #[serde(default)]
    pub head_mask: Vec<[usize; 2]>,
    /// What the reference divided its scores by (`attention.self.scaling = 1` for `none`).
    #[serde(default)]
    pub scale: ScoreScale,
    /// The layers whose intermediate values the reference recorded.
    #[serde(default)]
    pub layer_trace: Vec<usize>,
    /// Whether the reference left its rotary positions out.
    #[serde(default)]
    pub no_rope: bool,
    /// Whether the reference left its QK-norm out (every `q_norm` and `k_norm` an identity).
    #[serde(default)]
    pub no_qk_norm: bool,
    /// The reference's cross-attention from the pair's second sentence to its first.
    pub cross_attention: Option<CrossMeta>,
}

/// Which layer a cross-attention fixture is of, and the tokens of each sentence encoded alone.
#[derive(Debug, Deserialize)]
pub struct CrossMeta {
    pub layer: usize,
    pub queries: Vec<String>,
    pub keys: Vec<String>,
}

/// One golden case written by `tools/make_fixtures.py` from HF transformers.
pub struct Golden {
    pub name: String,
    pub meta: Meta,
    pub tensors: HashMap<String, ArrayD<f32>>,
}

pub fn golden(name: &str) -> Golden {
    Golden {
        name: name.to_owned(),
        meta: golden_meta(name),
        tensors: golden_tensors(name),
    }
}

/// A golden case's `.json`, read as `T`.
pub fn golden_meta<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let path = root().join(format!("tests/fixtures/golden/{name}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A golden case's tensors (its `.safetensors`), by name.
pub fn golden_tensors(name: &str) -> HashMap<String, ArrayD<f32>> {
    let dir = root().join("tests/fixtures/golden");
    let bytes = std::fs::read(dir.join(format!("{name}.safetensors"))).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(k, v)| {
            let vals: Vec<f32> = v
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (k, ArrayD::from_shape_vec(IxDyn(v.shape()), vals).unwrap())
        })
        .collect()
}

/// The golden cases in `tests/fixtures/golden` (the names of their `.json` files), sorted.
pub fn golden_case_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("tests/fixtures/golden"))
        .unwrap()
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

/// Asserts the fixtures whose names `belong` are exactly `cases`: none without a test.
pub fn assert_cases_cover_fixtures(cases: &[&str], belong: impl Fn(&str) -> bool) {
    let found: Vec<String> = golden_case_names()
        .into_iter()
        .filter(|n| belong(n))
        .collect();
    let mut listed: Vec<String> = cases.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed);
}

pub fn max_abs_diff(a: ArrayViewD<f32>, b: ArrayViewD<f32>) -> f32 {
    assert_eq!(a.shape(), b.shape(), "shapes differ");
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// A forward pass by some engine (CPU, GPU, ...).
pub type Forward<'a> = &'a dyn Fn(&Model, &Encoded, &Mask) -> attnscope::Result<Trace>;

pub const ATTENTION_TOL: f32 = 1e-4;

/// A decoder-only model's trace (kept with its hidden states and LM logits) against golden case
/// `g`: every layer's attention and the next-token probabilities within [`ATTENTION_TOL`], the
/// hidden states within [`HIDDEN_TOL`]; `what` names the case and engine in the messages.
pub fn assert_lm_case(what: &str, g: &Golden, trace: &Trace) {
    let att = max_abs_diff(
        trace.attention.view().into_dyn(),
        g.tensors["attention"].view(),
    );
    let hs = max_abs_diff(
        trace.hidden_states.as_ref().unwrap().view().into_dyn(),
        g.tensors["hidden_states"].view(),
    );
    let probs = attnscope::families::next_token_probs(trace.lm_logits.as_ref().unwrap());
    let p = max_abs_diff(
        probs.view().into_dyn(),
        g.tensors["next_token_probs"].view(),
    );
    eprintln!("{what}: attention {att:.2e}, hidden states {hs:.2e}, next tokens {p:.2e}");
    assert!(att <= ATTENTION_TOL, "{what}: attention differs by {att}");
    assert!(hs <= HIDDEN_TOL, "{what}: hidden states differ by {hs}");
    assert!(
        p <= ATTENTION_TOL,
        "{what}: next-token probabilities differ by {p}"
    );
}
pub const HIDDEN_TOL: f32 = 1e-3;

/// Tokenises a golden case with our tokenizer, checks tokens and ids against HF's, runs `forward`
/// and checks attention (≤ 1e-4), hidden states (≤ 1e-3) and logits against HF.
pub fn check_golden(name: &str, forward: Forward) -> (f32, f32) {
    let g = golden(name);
    let m = model(&g.meta.model);
    let texts: Vec<&str> = g.meta.texts.iter().map(String::as_str).collect();
    let input = m.tokenizer.encode(&texts, g.meta.pair.as_deref()).unwrap();
    assert_eq!(
        input.tokens, g.meta.tokens,
        "{name}: tokens differ from HF's"
    );
    let ids: Vec<Vec<u32>> = input.ids.outer_iter().map(|r| r.to_vec()).collect();
    let types: Vec<Vec<u32>> = input.type_ids.outer_iter().map(|r| r.to_vec()).collect();
    assert_eq!(ids, g.meta.token_ids, "{name}: token ids differ");
    assert_eq!(types, g.meta.type_ids, "{name}: token type ids differ");
    let mask = Mask::from_kind(g.meta.mask, input.valid.view());
    let trace = forward(m, &input, &mask).unwrap();
    let da = max_abs_diff(
        trace.attention.view().into_dyn(),
        g.tensors["attention"].view(),
    );
    let dh = max_abs_diff(trace.hidden.view().into_dyn(), g.tensors["hidden"].view());
    eprintln!("{name}: max |Δ| attention {da:.2e}, hidden {dh:.2e}");
    assert!(
        da <= ATTENTION_TOL,
        "{name}: attention max |Δ| {da} > {ATTENTION_TOL}"
    );
    assert!(
        dh <= HIDDEN_TOL,
        "{name}: hidden max |Δ| {dh} > {HIDDEN_TOL}"
    );
    match (g.tensors.get("next_token_probs"), &trace.lm_logits) {
        (Some(want), Some(logits)) => {
            let got = attnscope::families::next_token_probs(logits);
            let dp = max_abs_diff(got.view().into_dyn(), want.view());
            eprintln!("{name}: next-token probabilities max |Δ| {dp:.2e}");
            assert!(
                dp <= ATTENTION_TOL,
                "{name}: next-token probabilities max |Δ| {dp} > {ATTENTION_TOL}"
            );
        }
        (None, _) => {}
        (Some(_), None) => {
            panic!("{name}: the fixture has next-token probabilities, the trace no LM logits")
        }
    }
    match (g.tensors.get("logits"), &trace.logits) {
        (Some(want), Some(got)) => {
            let dl = max_abs_diff(got.view().into_dyn(), want.view());
            assert!(dl <= HIDDEN_TOL, "{name}: logits max |Δ| {dl}");
        }
        (None, None) => {}
        (w, g) => panic!(
            "{name}: logits present in fixture: {}, in trace: {}",
            w.is_some(),
            g.is_some()
        ),
    }
    (da, dh)
}

/// One GPU device for the whole test binary (lavapipe where there is no GPU); one engine per model.
pub fn gpu_device() -> &'static GpuDevice {
    static DEV: OnceLock<GpuDevice> = OnceLock::new();
    DEV.get_or_init(|| {
        pollster::block_on(GpuDevice::acquire())
            .expect("a GPU adapter (scripts/setup.sh installs mesa-vulkan-drivers for lavapipe)")
    })
}

pub fn gpu_engine(m: &Model) -> &'static GpuEngine {
    static ENGINES: OnceLock<Mutex<HashMap<usize, &'static GpuEngine>>> = OnceLock::new();
    let dev = gpu_device();
    let mut engines = ENGINES.get_or_init(Default::default).lock().unwrap();
    engines
        .entry(m as *const Model as usize)
        .or_insert_with(|| Box::leak(Box::new(GpuEngine::new(dev.clone(), m).unwrap())))
}

/// What the golden tests keep: the scores, and the LM logits where the model has an LM head.
pub fn golden_options() -> TraceOptions {
    TraceOptions {
        lm_logits: true,
        ..TraceOptions::with_scores()
    }
}

/// The GPU forward pass, keeping scores (and LM logits, where there is an LM head).
pub fn gpu_forward(m: &Model, input: &Encoded, mask: &Mask) -> attnscope::Result<Trace> {
    pollster::block_on(gpu_engine(m).forward(m, input, mask, &golden_options())).map(|(t, _)| t)
}

/// One `#[test]` per golden case, each checking `$forward`
/// against HF with [`check_golden`].
#[macro_export]
macro_rules! golden_tests {
    ($forward:expr) => {
        $crate::golden_tests!($forward;
    minilm_arrow,
    minilm_it,
    minilm_unicode,
    minilm_long,
    minilm_pair,
    minilm_batch,
    minilm_causal,
    minilm_nomask,
    tiny_bert_pair,
    tiny_preln_causal,
    roberta_batch,
    roberta_pair,
    distilbert_batch,
    gpt2_batch,
    gpt2_single
        );
    };
    ($forward:expr; $($name:ident),* $(,)?) => {
        /// The cases this file tests, checked against the fixture folder.
        #[allow(dead_code)]
        const GOLDEN_CASES: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                $crate::common::check_golden(stringify!($name), &$forward);
            }
        )*
    };
}

/// One source of a translation golden case (`marian_*`).
#[derive(Debug, Deserialize)]
pub struct TranslationItem {
    pub source: String,
    pub source_ids: Vec<u32>,
    pub source_tokens: Vec<String>,
    /// Character spans, as Python's tokenizers gives them.
    pub source_offsets: Vec<[usize; 2]>,
    pub output_ids: Vec<u32>,
    pub output_tokens: Vec<String>,
    pub output_text: String,
    /// The target that was teacher-forced, or `None` for HF's greedy `generate`.
    pub target: Option<String>,
}

/// A translation golden case: HF's `generate` (or teacher forcing) per source alone.
#[derive(Debug, Deserialize)]
pub struct TranslationMeta {
    pub model: String,
    pub max_new_tokens: usize,
    pub items: Vec<TranslationItem>,
}

/// A translation by some engine (CPU, GPU, ...).
pub type Translate<'a> = &'a dyn Fn(
    &Model,
    &[&str],
    &attnscope::engine::Decoding,
) -> attnscope::Result<attnscope::engine::Translation>;

/// The translation golden cases.
pub const TRANSLATION_CASES: &[&str] = &[
    "marian_generate",
    "marian_teacher",
    "marian_f16_generate",
    "marian_f16_teacher",
    "marian_dates",
];

/// Every item of `case`'s translation by some engine against HF's: the source's ids and the
/// output ids exact, the three attentions and each step's probabilities within 1e-4. Returns
/// the largest difference of each (attention, probabilities).
pub fn check_translation(case: &str, translate: Translate) -> (f32, f32) {
    use attnscope::engine::Decoding;
    use ndarray::s;
    let meta: TranslationMeta = golden_meta(case);
    let tensors = golden_tensors(case);
    let m = model(&meta.model);
    let sources: Vec<&str> = meta.items.iter().map(|i| i.source.as_str()).collect();
    let decoding = if meta.items[0].target.is_some() {
        Decoding::Forced(meta.items.iter().map(|i| i.output_ids.clone()).collect())
    } else {
        Decoding::Greedy {
            max_new_tokens: meta.max_new_tokens,
        }
    };
    // the sources as one padded batch, and each alone: the same results
    let batch = translate(m, &sources, &decoding).unwrap();
    let mut worst = (0f32, 0f32);
    for (i, item) in meta.items.iter().enumerate() {
        let alone_decoding = match &decoding {
            Decoding::Forced(o) => Decoding::Forced(vec![o[i].clone()]),
            greedy => greedy.clone(),
        };
        let alone = translate(m, &[&item.source], &alone_decoding).unwrap();
        for (tr, b, how) in [(&batch, i, "in the batch"), (&alone, 0, "alone")] {
            let (s_len, t_len) = (item.source_ids.len(), item.output_ids.len() - 1);
            let ids: Vec<u32> = tr.source.ids.row(b).iter().copied().take(s_len).collect();
            assert_eq!(ids, item.source_ids, "{case} {i} {how}: source ids");
            assert_eq!(
                tr.output_ids[b], item.output_ids,
                "{case} {i} {how}: output ids"
            );
            let probs = attnscope::families::next_token_probs(&tr.step_logits);
            for (name, ours) in [
                (
                    "encoder_attention",
                    tr.encoder_attention
                        .slice(s![b, .., .., ..s_len, ..s_len])
                        .into_dyn(),
                ),
                (
                    "decoder_attention",
                    tr.decoder_attention
                        .slice(s![b, .., .., ..t_len, ..t_len])
                        .into_dyn(),
                ),
                (
                    "cross_attention",
                    tr.cross_attention
                        .slice(s![b, .., .., ..t_len, ..s_len])
                        .into_dyn(),
                ),
                ("step_probs", probs.slice(s![b, ..t_len, ..]).into_dyn()),
            ] {
                let hf = &tensors[&format!("{name}_{i}")];
                let d = max_abs_diff(ours, hf.view());
                assert!(
                    d <= ATTENTION_TOL,
                    "{case} {i} {how}: {name} differs from HF by {d}"
                );
                if name == "step_probs" {
                    worst.1 = worst.1.max(d);
                } else {
                    worst.0 = worst.0.max(d);
                }
            }
        }
    }
    worst
}

/// A generation golden case (`llama_generate`, `qwen2_generate`, `llama_gguf_generate`): the
/// prompt, what HF's `generate` wrote, and each step's five likeliest ids.
#[derive(Debug, Deserialize)]
pub struct GenerateMeta {
    pub model: String,
    pub prompt_ids: Vec<u32>,
    pub output_ids: Vec<u32>,
    pub max_new_tokens: usize,
    pub step_top5_ids: Vec<Vec<u32>>,
}

/// SmolLM2-135M-Instruct's prompts (the golden case `smollm2_prompts`, tools/make_fixtures.py
/// `smollm2`): its GGUF file under the repository, and each prompt with HF's ids and ten likeliest
/// next tokens at each position (their probabilities in the case's tensors, `top10_probs_{i}`).
#[derive(Debug, Deserialize)]
pub struct SmolMeta {
    pub gguf_file: String,
    pub max_new_tokens: usize,
    pub items: Vec<SmolItem>,
}

/// One prompt of [`SmolMeta`], with HF's greedy answer where the case has one.
#[derive(Debug, Deserialize)]
pub struct SmolItem {
    pub text: String,
    pub token_ids: Vec<u32>,
    pub top10_ids: Vec<Vec<u32>>,
    #[serde(default)]
    pub output_ids: Option<Vec<u32>>,
}

/// Prompt `i` of `smollm2_prompts` (`item`, the case's tensors `want`) against one causal pass
/// over it by some engine, kept with its LM logits (`what` names the engine in the messages):
/// every layer's attention within [`ATTENTION_TOL`] of HF's (`attention_{i}`), and at every
/// position the probability of each of HF's ten likeliest next tokens within [`ATTENTION_TOL`]
/// of HF's (`top10_probs_{i}`).
pub fn assert_smollm2_prompt(
    what: &str,
    i: usize,
    item: &SmolItem,
    want: &HashMap<String, ArrayD<f32>>,
    trace: &Trace,
) {
    let (att, p) = smollm2_differences(i, item, want, trace);
    eprintln!("smollm2 prompt {i} {what}: attention {att:.2e}, top-10 next tokens {p:.2e}");
    assert!(
        att <= ATTENTION_TOL,
        "{what} prompt {i}: attention differs by {att}"
    );
    assert!(
        p <= ATTENTION_TOL,
        "{what} prompt {i}: next-token probabilities differ by {p}"
    );
}

/// How far a trace of SmolLM2's prompt `i` is from HF's: the largest difference of an
/// attention probability, and of the probability of one of HF's ten likeliest next tokens at
/// any position.
pub fn smollm2_differences(
    i: usize,
    item: &SmolItem,
    want: &HashMap<String, ArrayD<f32>>,
    trace: &Trace,
) -> (f32, f32) {
    let att = max_abs_diff(
        trace.attention.slice(s![0, .., .., .., ..]).into_dyn(),
        want[&format!("attention_{i}")].view(),
    );
    let probs = attnscope::families::next_token_probs(trace.lm_logits.as_ref().unwrap());
    let top = &want[&format!("top10_probs_{i}")];
    let mut p = 0f32;
    for (pos, ids) in item.top10_ids.iter().enumerate() {
        for (j, &id) in ids.iter().enumerate() {
            p = p.max((probs[[0, pos, id as usize]] - top[[pos, j]]).abs());
        }
    }
    (att, p)
}

/// A golden case's batch, tokenised by attnscope (the ids checked against HF's), and its mask.
pub fn case_input(name: &str) -> (Golden, &'static Model, Encoded, Mask) {
    let g = golden(name);
    let m = model(&g.meta.model);
    let texts: Vec<&str> = g.meta.texts.iter().map(String::as_str).collect();
    let input = m.tokenizer.encode(&texts, None).unwrap();
    let ids: Vec<Vec<u32>> = input.ids.outer_iter().map(|r| r.to_vec()).collect();
    assert_eq!(ids, g.meta.token_ids, "{name}: token ids");
    let mask = Mask::from_kind(g.meta.mask, input.valid.view());
    (g, m, input, mask)
}

/// The values of two traces of the same layer, by name: `(name, a's, b's)`; both traces name
/// the same values, every family's among them.
pub fn layer_trace_pairs<'a>(
    a: &'a attnscope::engine::LayerTrace,
    b: &'a attnscope::engine::LayerTrace,
) -> Vec<(&'static str, ArrayViewD<'a, f32>, ArrayViewD<'a, f32>)> {
    assert_eq!(
        a.names(),
        b.names(),
        "the two traces name their values alike"
    );
    for name in [
        "input",
        "q",
        "k",
        "v",
        "context",
        "attention_output",
        "pre_activation",
        "intermediate",
        "output",
    ] {
        assert!(a.values.contains_key(name), "no {name} in {:?}", a.names());
    }
    a.values
        .iter()
        .map(|(name, x)| (*name, x.view(), b.values[name].view()))
        .collect()
}

/// The `llama_knockout` case as a generation: its golden values, the model, the prompt's ids and
/// options that write 6 tokens (EOS or not) with the case's heads knocked out.
pub fn knockout_generation() -> (
    Golden,
    &'static Model,
    Vec<u32>,
    attnscope::engine::GenerateOptions,
) {
    let (g, m, input, _) = case_input("llama_knockout");
    let prompt: Vec<u32> = input
        .ids
        .row(0)
        .iter()
        .take(input.length(0))
        .copied()
        .collect();
    let opts = attnscope::engine::GenerateOptions {
        max_new_tokens: 6,
        top_k: 5,
        stop_at_eos: false,
        head_mask: attnscope::engine::HeadMask::from_pairs(
            g.meta.head_mask.iter().map(|&[l, h]| (l, h)),
        ),
        numerics: Default::default(),
    };
    (g, m, prompt, opts)
}

/// The tiny Llama from the inside (tools/make_fixtures.py `llama_inside`), each case through
/// `forward` (an engine's pass) and against HF: `llama_trace`, layer 1's values (the RMSNorms'
/// outputs, Q and K before and after HF's own rotation, the SwiGLU's gate, up and act…);
/// `llama_norope`, the rotation left out; `llama_knockout`, heads zeroed before `o_proj`. Each
/// within [`ATTENTION_TOL`], with the attention and the next-token probabilities; `what` names the
/// engine in the messages.
pub fn check_llama_inside(
    what: &str,
    forward: impl Fn(&Model, &Encoded, &Mask, &TraceOptions) -> Trace,
) {
    for name in ["llama_trace", "llama_norope", "llama_knockout"] {
        let (g, m, input, mask) = case_input(name);
        let opts = TraceOptions {
            lm_logits: true,
            layer_trace: g.meta.layer_trace.first().copied(),
            no_rope: g.meta.no_rope,
            head_mask: attnscope::engine::HeadMask::from_pairs(
                g.meta.head_mask.iter().map(|&[l, h]| (l, h)),
            ),
            ..TraceOptions::default()
        };
        let trace = forward(m, &input, &mask, &opts);
        let att = max_abs_diff(
            trace.attention.view().into_dyn(),
            g.tensors["attention"].view(),
        );
        let probs = attnscope::families::next_token_probs(trace.lm_logits.as_ref().unwrap());
        let p = max_abs_diff(
            probs.view().into_dyn(),
            g.tensors["next_token_probs"].view(),
        );
        eprintln!("{name} {what}: attention {att:.2e}, next tokens {p:.2e}");
        assert!(
            att <= ATTENTION_TOL,
            "{name} {what}: attention differs by {att}"
        );
        assert!(
            p <= ATTENTION_TOL,
            "{name} {what}: next-token probabilities differ by {p}"
        );
        let Some(&layer) = g.meta.layer_trace.first() else {
            continue;
        };
        let lt = trace.layer_trace.as_ref().expect("the layer trace");
        // HF's hooks name the gated feed-forward's values as it does: gate, up, act
        fn name_of(field: &str) -> &str {
            match field {
                "gate" => "pre_activation",
                "act" => "intermediate",
                other => other,
            }
        }
        let fields: Vec<(&str, ArrayViewD<f32>)> = [
            "input",
            "attn_norm",
            "q",
            "k",
            "v",
            "q_rope",
            "k_rope",
            "context",
            "attention_output",
            "ffn_norm",
            "gate",
            "up",
            "act",
            "output",
        ]
        .into_iter()
        .map(|f| (f, lt.get(name_of(f)).unwrap().view()))
        .collect();
        for (field, got) in fields {
            let want = &g.tensors[&format!("layer{layer}_{field}")];
            assert_eq!(got.shape(), want.shape(), "{name} {what}: {field}'s shape");
            let d = max_abs_diff(got, want.view());
            eprintln!("  layer {layer} {field}: {d:.2e}");
            assert!(
                d <= ATTENTION_TOL,
                "{name} {what}: layer {layer}'s {field} differs by {d}"
            );
        }
    }
}

/// Generation `g` (after a prompt of `p` tokens, under `gen`'s head mask) against the engine's
/// one causal pass over every token it fed, under the same mask: the attention, and each step's
/// likeliest tokens with their probabilities at the position it fed.
pub fn assert_cached_equals_the_full_pass(
    name: &str,
    m: &Model,
    g: &attnscope::engine::Generation,
    p: usize,
    gen: &GenerateOptions,
) {
    let fed = g.fed();
    let input = m.tokenizer.from_ids(&fed);
    let mask = Mask::causal(1, fed.len());
    let opts = TraceOptions {
        lm_logits: true,
        head_mask: gen.head_mask.clone(),
        ..TraceOptions::default()
    };
    let full = cpu::forward(m, &input, &mask, &opts).unwrap();
    let d = max_abs_diff(
        full.attention.slice(s![0, .., .., .., ..]).into_dyn(),
        g.attention.view().into_dyn(),
    );
    assert!(d <= 1e-5, "{name}: cached decoding vs the full pass: {d}");
    let probs = attnscope::families::next_token_probs(full.lm_logits.as_ref().unwrap());
    // each step's likeliest tokens: those of the full pass at the position it fed
    assert_eq!(g.next.len(), g.output_ids.len(), "{name}: one step a token");
    for (i, top) in g.next.iter().enumerate() {
        let pos = p - 1 + i;
        for t in top {
            let full_p = probs[[0, pos, t.id as usize]];
            assert!(
                (t.p - full_p).abs() <= 1e-5,
                "{name}: position {pos} token {}: {} vs {full_p}",
                t.id,
                t.p
            );
        }
    }
}

/// The attnscope CLI run with `args`: its JSON, or its error output.
pub fn cli(args: &[&str]) -> Result<serde_json::Value, String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_attnscope"))
        .args(args)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}
