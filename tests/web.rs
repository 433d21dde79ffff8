//! In a real browser (headless Chromium through Debian's chromedriver, wasm-bindgen's test runner
//! as cargo's runner for wasm32: `make test` gives the command): the GPU engine on WebGPU against
//! the CPU engine in the same page, and both against HF transformers, on the committed tiny
//! checkpoint (hidden 24, 3 heads: every kernel, sizes off the matmul tile); and GGUF files'
//! matrices kept in their ggml types on WebGPU.
#![cfg(target_arch = "wasm32")]

use attnscope::engine::gpu::{GpuDevice, GpuEngine};
use attnscope::engine::{cpu, generate, GenerateOptions, TraceOptions};
use attnscope::{Mask, MaskKind, Model, Trace};
use ndarray::{ArrayD, IxDyn};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn tiny() -> Model {
    Model::from_bytes(
        "tiny-bert",
        include_bytes!("fixtures/models/tiny-bert/config.json"),
        include_bytes!("fixtures/models/tiny-bert/model.safetensors"),
        include_bytes!("fixtures/models/tiny-bert/tokenizer.json"),
    )
    .expect("the tiny checkpoint loads from bytes")
}

fn golden(name: &str) -> ArrayD<f32> {
    tensor(
        include_bytes!("fixtures/golden/tiny_bert_pair.safetensors"),
        name,
    )
}

fn max_abs_diff(a: &ArrayD<f32>, b: &ArrayD<f32>) -> f32 {
    assert_eq!(a.shape(), b.shape());
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[wasm_bindgen_test]
async fn webgpu_engine_equals_cpu_engine_and_hf() {
    let m = tiny();
    let dev = GpuDevice::acquire()
        .await
        .expect("WebGPU adapter (--enable-unsafe-webgpu)");
    let name = dev.describe();
    assert!(name.contains("WebGPU"), "{name}");
    web_sys::console::log_1(&format!("GPU engine on {name}").into());
    let gpu = GpuEngine::new(dev, &m).unwrap();

    // the golden sentence pair (padded batch of 2) against HF, on both engines
    let input = m
        .tokenizer
        .encode(&["the cat sat on the mat", "a dog!"], Some("it was happy"))
        .unwrap();
    let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
    let (g, timing) = gpu
        .forward(&m, &input, &mask, &TraceOptions::with_scores())
        .await
        .unwrap();
    let c = cpu::forward(&m, &input, &mask, &TraceOptions::with_scores()).unwrap();
    let hf_att = golden("attention");
    let d_gpu_hf = max_abs_diff(&g.attention.clone().into_dyn(), &hf_att);
    let d_cpu_hf = max_abs_diff(&c.attention.clone().into_dyn(), &hf_att);
    let d_gpu_cpu = max_abs_diff(
        &g.attention.clone().into_dyn(),
        &c.attention.clone().into_dyn(),
    );
    let d_hidden = max_abs_diff(&g.hidden.clone().into_dyn(), &golden("hidden"));
    let d_logits = max_abs_diff(&g.logits.clone().unwrap().into_dyn(), &golden("logits"));
    web_sys::console::log_1(
        &format!("max |Δ| gpu-hf {d_gpu_hf:.2e}, cpu-hf {d_cpu_hf:.2e}, gpu-cpu {d_gpu_cpu:.2e}, hidden {d_hidden:.2e}; {timing:?}").into(),
    );
    assert!(d_gpu_hf <= 1e-4 && d_cpu_hf <= 1e-4 && d_gpu_cpu <= 1e-4);
    assert!(d_hidden <= 1e-3 && d_logits <= 1e-3);

    // what the inside-the-encoder panels read: every layer's hidden states and one layer's
    // trace with the embeddings' steps, computed on WebGPU, equal the CPU engine's
    let opts = TraceOptions {
        hidden_states: true,
        layer_trace: Some(1),
        embeddings: true,
        ..TraceOptions::default()
    };
    let (g, _) = gpu.forward(&m, &input, &mask, &opts).await.unwrap();
    let c = cpu::forward(&m, &input, &mask, &opts).unwrap();
    let (gt, ct) = (g.layer_trace.unwrap(), c.layer_trace.unwrap());
    let (ge, ce) = (
        gt.embeddings.as_ref().unwrap(),
        ct.embeddings.as_ref().unwrap(),
    );
    let mut worst = max_abs_diff(
        &g.hidden_states.unwrap().into_dyn(),
        &c.hidden_states.unwrap().into_dyn(),
    );
    assert_eq!(gt.names(), ct.names());
    for (name, a) in &gt.values {
        worst = worst.max(max_abs_diff(a, &ct.values[name]));
    }
    for (a, b) in [
        (&ge.word, &ce.word),
        (ge.position.as_ref().unwrap(), ce.position.as_ref().unwrap()),
        (
            ge.token_type.as_ref().unwrap(),
            ce.token_type.as_ref().unwrap(),
        ),
        (&ge.sum, &ce.sum),
        (&ge.normed, &ce.normed),
    ] {
        worst = worst.max(max_abs_diff(&a.clone().into_dyn(), &b.clone().into_dyn()));
    }
    web_sys::console::log_1(
        &format!("layer trace and hidden states: gpu-cpu max |Δ| {worst:.2e}").into(),
    );
    assert!(worst <= 1e-3, "the layer trace differs by {worst}");

    // causal mask and odd lengths, reusing and rebuilding the pooled buffers
    for text in [
        "a",
        "the cat sat on the mat, the cat sat on the mat, the cat sat on the mat",
    ] {
        let input = m.tokenizer.encode(&[text], None).unwrap();
        let mask = Mask::from_kind(MaskKind::Causal, input.valid.view());
        let (g, _) = gpu
            .forward(&m, &input, &mask, &TraceOptions::default())
            .await
            .unwrap();
        let c = cpu::forward(&m, &input, &mask, &TraceOptions::default()).unwrap();
        let d = max_abs_diff(&g.attention.clone().into_dyn(), &c.attention.into_dyn());
        assert!(d <= 1e-4, "{text}: gpu and cpu differ by {d}");
        let t = input.len();
        for q in 0..t {
            for k in q + 1..t {
                assert_eq!(g.attention[[0, 1, 2, q, k]], 0.0);
            }
        }
    }
}

#[wasm_bindgen_test]
fn bad_bytes_are_errors_not_panics() {
    let e = Model::from_bytes("upload", b"{}", b"", b"").err().unwrap();
    assert!(e.to_string().contains("upload/config.json"));
    let e = Model::from_bytes(
        "upload",
        include_bytes!("fixtures/models/tiny-bert/config.json"),
        b"garbage",
        include_bytes!("fixtures/models/tiny-bert/tokenizer.json"),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("model.safetensors"), "{e}");
}

/// A session of the tiny BERT checkpoint on the CPU engine, its weights `file`, as the
/// worker loads one (`loadSession`): the JS object.
async fn tiny_bert_session(file: &attnscope::wasm::WeightsBuffer) -> wasm_bindgen::JsValue {
    let session = attnscope::wasm::load_session(
        "tiny".into(),
        include_bytes!("fixtures/models/tiny-bert/config.json"),
        file,
        include_bytes!("fixtures/models/tiny-bert/tokenizer.json"),
        "cpu".into(),
        None,
        None,
    )
    .unwrap();
    wasm_bindgen_futures::JsFuture::from(session).await.unwrap()
}

/// The worker's way in: the weights written into a `WeightsFile` chunk by chunk, then a session
/// loaded from it; a chunk past the end, or a file over the limit, is an error naming the file.
#[wasm_bindgen_test]
async fn weights_written_in_chunks_load_a_session() {
    use attnscope::wasm::WeightsBuffer;
    use wasm_bindgen::{JsCast, JsValue};
    let message = |e: wasm_bindgen::JsError| {
        JsValue::from(e)
            .dyn_into::<js_sys::Error>()
            .map(|e| String::from(e.message()))
            .unwrap_or_default()
    };
    let bytes: &[u8] = include_bytes!("fixtures/models/tiny-bert/model.safetensors");
    let mut file = WeightsBuffer::new("tiny/model.safetensors".into(), bytes.len()).unwrap();
    assert_eq!(file.length(), bytes.len());
    for (i, chunk) in bytes.chunks(1000).enumerate() {
        file.write(i * 1000, &js_sys::Uint8Array::from(chunk))
            .unwrap();
    }
    let e = message(
        file.write(bytes.len() - 2, &js_sys::Uint8Array::from(&[1u8, 2, 3][..]))
            .unwrap_err(),
    );
    assert!(
        e.starts_with("tiny/model.safetensors: 3 bytes at offset"),
        "{e}"
    );
    let session = tiny_bert_session(&file).await;
    assert!(session.is_object());
    let over = attnscope::model::limits::MAX_WEIGHTS_BYTES + 1;
    let e = message(
        WeightsBuffer::new("up/model.safetensors".into(), over)
            .err()
            .unwrap(),
    );
    assert!(
        e.contains(&format!(
            "up/model.safetensors: not a valid safetensors file: the file is {over} bytes"
        )),
        "{e}"
    );
}

/// A run's records copied into the spare buffers the worker made ready (`setSpareBuffers`) are
/// the records copied into new arrays, value for value: each a view of its length from its
/// buffer's start, the buffer a spare that holds it; a spare too small for any is left, and a
/// spare is used once.
#[wasm_bindgen_test]
async fn records_copied_into_spare_buffers_are_the_records_copied_into_new_ones() {
    use attnscope::wasm::WeightsBuffer;
    use js_sys::{Array, Float32Array, Function, Promise, Reflect};
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;
    let bytes: &[u8] = include_bytes!("fixtures/models/tiny-bert/model.safetensors");
    let mut file = WeightsBuffer::new("tiny/model.safetensors".into(), bytes.len()).unwrap();
    file.write(0, &js_sys::Uint8Array::from(bytes)).unwrap();
    let session = tiny_bert_session(&file).await;
    let method = |name: &str| -> Function {
        Reflect::get(&session, &name.into())
            .unwrap()
            .dyn_into()
            .unwrap()
    };
    let texts = Array::of1(&"the cat sat on the mat".into());
    let args = [
        texts.into(),
        JsValue::UNDEFINED,
        "padding".into(),
        "cpu".into(),
        JsValue::UNDEFINED,
    ];
    // every record's values of item 0 (attention and scores, a layer each)
    let run = || async {
        let promise: Promise = method("run")
            .apply(&session, &args.iter().collect::<Array>())
            .unwrap()
            .dyn_into()
            .unwrap();
        let r = JsFuture::from(promise).await.unwrap();
        let records: Array = Reflect::get(&Reflect::get(&r, &"records".into()).unwrap(), &0.into())
            .unwrap()
            .dyn_into()
            .unwrap();
        records
            .iter()
            .map(|rec| {
                Reflect::get(&rec, &"values".into())
                    .unwrap()
                    .unchecked_into()
            })
            .collect::<Vec<Float32Array>>()
    };
    let fresh = run().await;
    let lengths: Vec<u32> = fresh.iter().map(|v| v.length()).collect();
    // (H, T, T) each: any spare that holds one holds every one
    assert!(
        fresh.len() >= 4 && lengths.iter().all(|&n| n == lengths[0]),
        "{lengths:?}"
    );
    // a spare for each record but the last, NaN-filled and one value longer, and one too small
    let n = lengths[0];
    let tiny = Float32Array::new_with_length(1);
    let spares: Vec<Float32Array> = (1..fresh.len())
        .map(|_| Float32Array::new_with_length(n + 1))
        .chain([tiny.clone()])
        .collect();
    for s in &spares {
        s.fill(f32::NAN, 0, s.length());
    }
    method("setSpareBuffers")
        .call1(&session, &spares.iter().collect::<Array>())
        .unwrap();
    let again = run().await;
    let used = |v: &Float32Array| spares.iter().any(|s| s.buffer() == v.buffer());
    for (i, (a, b)) in fresh.iter().zip(&again).enumerate() {
        assert_eq!(a.to_vec(), b.to_vec(), "record {i}'s values");
        assert_eq!((b.byte_offset(), b.length()), (0, n), "record {i}'s view");
        assert_eq!(used(b), i + 1 < fresh.len(), "record {i} in a spare");
        assert!(
            b.buffer() != tiny.buffer(),
            "record {i} in the spare too small"
        );
    }
    // the spares went with the last run: the next copies into new arrays
    let third = run().await;
    assert!(third.iter().all(|v| !used(v)));
    assert_eq!(
        third.iter().map(Float32Array::to_vec).collect::<Vec<_>>(),
        fresh.iter().map(Float32Array::to_vec).collect::<Vec<_>>()
    );
}

/// One golden case of a family's tiny checkpoint: its files and HF's outputs
/// (tools/make_fixtures.py).
struct FamilyCase {
    name: &'static str,
    files: [&'static [u8]; 3],
    golden: &'static [u8],
    texts: &'static [&'static str],
    mask: MaskKind,
}

macro_rules! family_case {
    ($name:literal, $model:literal, $texts:expr, $mask:expr) => {
        FamilyCase {
            name: $name,
            files: [
                include_bytes!(concat!("fixtures/models/", $model, "/config.json")),
                include_bytes!(concat!("fixtures/models/", $model, "/model.safetensors")),
                include_bytes!(concat!("fixtures/models/", $model, "/tokenizer.json")),
            ],
            golden: include_bytes!(concat!("fixtures/golden/", $name, ".safetensors")),
            texts: $texts,
            mask: $mask,
        }
    };
}

/// The texts of tools/make_fixtures.py's `transformers5` cases.
const V5_TEXTS: &[&str] = &[
    "time flies like an arrow and fruit flies like a banana",
    "the cat sat",
    "where does the model look",
];

/// Whether a golden case's safetensors file has tensor `name`.
fn has_tensor(golden: &[u8], name: &str) -> bool {
    let st = safetensors::SafeTensors::deserialize(golden).unwrap();
    st.names().contains(&name)
}

/// Tensor `name` of a golden case's safetensors file.
fn tensor(golden: &[u8], name: &str) -> ArrayD<f32> {
    let st = safetensors::SafeTensors::deserialize(golden).unwrap();
    let v = st.tensor(name).unwrap();
    let vals: Vec<f32> = v
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    ArrayD::from_shape_vec(IxDyn(v.shape()), vals).unwrap()
}

/// RoBERTa (F16), DistilBERT (BF16) and GPT-2 (its next-token probabilities too), and folders
/// as transformers 5 saves them (`rope_parameters`: YaRN's scaled rotation in BF16, Llama 3's in
/// F32; Qwen2's `layer_types` and Mistral's window, crossed by the text; BERT's weights under
/// its names) on WebGPU and on the CPU engine in the browser, each against HF.
#[wasm_bindgen_test]
async fn every_family_on_webgpu_and_the_cpu_equals_hf() {
    let cases = [
        family_case!(
            "roberta_batch",
            "tiny-roberta",
            &[
                "time flies like an arrow",
                "Café naïve 😀",
                "the cat sat on the mat"
            ],
            MaskKind::Padding
        ),
        family_case!(
            "distilbert_batch",
            "tiny-distilbert",
            &["time flies like an arrow", "a dog!"],
            MaskKind::Padding
        ),
        family_case!("v5_llama_yarn", "v5-llama-yarn", V5_TEXTS, MaskKind::Causal),
        family_case!(
            "v5_llama_llama3",
            "v5-llama-llama3",
            V5_TEXTS,
            MaskKind::Causal
        ),
        family_case!("v5_qwen2", "v5-qwen2", &V5_TEXTS[..1], MaskKind::Causal),
        family_case!("v5_mistral", "v5-mistral", &V5_TEXTS[..1], MaskKind::Causal),
        family_case!(
            "v5_gemma3_softcap",
            "v5-gemma3-softcap",
            &V5_TEXTS[..1],
            MaskKind::Causal
        ),
        family_case!("v5_bert", "v5-bert", V5_TEXTS, MaskKind::Padding),
        family_case!(
            "gpt2_batch",
            "tiny-gpt2",
            &[
                "time flies like an arrow",
                "the cat sat",
                "fruit flies like a banana"
            ],
            MaskKind::Causal
        ),
    ];
    let dev = GpuDevice::acquire()
        .await
        .expect("WebGPU adapter (--enable-unsafe-webgpu)");
    let opts = TraceOptions {
        lm_logits: true,
        ..TraceOptions::with_scores()
    };
    for case in cases {
        let [config, weights, tokenizer] = case.files;
        let m = Model::from_bytes(case.name, config, weights, tokenizer).unwrap();
        let gpu = GpuEngine::new(dev.clone(), &m).unwrap();
        let input = m.tokenizer.encode(case.texts, None).unwrap();
        let mask = Mask::from_kind(case.mask, input.valid.view());
        let (g, _) = gpu.forward(&m, &input, &mask, &opts).await.unwrap();
        let c = cpu::forward(&m, &input, &mask, &opts).unwrap();
        let (att, hidden) = (
            tensor(case.golden, "attention"),
            tensor(case.golden, "hidden"),
        );
        for (engine, t) in [("webgpu", &g), ("cpu", &c)] {
            let da = max_abs_diff(&t.attention.clone().into_dyn(), &att);
            let dh = max_abs_diff(&t.hidden.clone().into_dyn(), &hidden);
            web_sys::console::log_1(
                &format!(
                    "{} {engine}: max |Δ| attention {da:.2e}, hidden {dh:.2e}",
                    case.name
                )
                .into(),
            );
            assert!(da <= 1e-4, "{} {engine}: attention {da}", case.name);
            assert!(dh <= 1e-3, "{} {engine}: hidden {dh}", case.name);
            if has_tensor(case.golden, "next_token_probs") {
                let p = attnscope::families::next_token_probs(t.lm_logits.as_ref().unwrap());
                let dp = max_abs_diff(&p.into_dyn(), &tensor(case.golden, "next_token_probs"));
                assert!(
                    dp <= 1e-4,
                    "{} {engine}: next-token probabilities {dp}",
                    case.name
                );
            }
        }
    }
}

/// Marian in the browser: greedy decoding and teacher forcing on WebGPU (the cache written a row
/// per step) and on the CPU engine, each against HF's `generate` and forward pass: output ids
/// exact, the three attentions and the step probabilities within 1e-4.
#[wasm_bindgen_test]
async fn marian_translations_on_webgpu_and_the_cpu_equal_hf() {
    use attnscope::engine::{translate, Decoding, Translation};
    use ndarray::s;
    macro_rules! case {
        ($name:literal, $model:literal) => {
            (
                $name,
                include_str!(concat!("fixtures/golden/", $name, ".json")),
                include_bytes!(concat!("fixtures/golden/", $name, ".safetensors")).as_slice(),
                [
                    include_bytes!(concat!("fixtures/models/", $model, "/config.json")).as_slice(),
                    include_bytes!(concat!("fixtures/models/", $model, "/model.safetensors"))
                        .as_slice(),
                    include_bytes!(concat!("fixtures/models/", $model, "/tokenizer.json"))
                        .as_slice(),
                ],
            )
        };
    }
    let cases = [
        case!("marian_generate", "tiny-marian"),
        case!("marian_teacher", "tiny-marian"),
        case!("marian_f16_generate", "tiny-marian-f16"),
        case!("marian_f16_teacher", "tiny-marian-f16"),
        // the dates → ISO model the repository ships (tools/train_dates.py)
        (
            "marian_dates",
            include_str!("fixtures/golden/marian_dates.json"),
            include_bytes!("fixtures/golden/marian_dates.safetensors").as_slice(),
            [
                include_bytes!("../models/dates/config.json").as_slice(),
                include_bytes!("../models/dates/model.safetensors").as_slice(),
                include_bytes!("../models/dates/tokenizer.json").as_slice(),
            ],
        ),
    ];
    let dev = GpuDevice::acquire()
        .await
        .expect("WebGPU adapter (--enable-unsafe-webgpu)");
    for (name, meta, golden, [config, weights, tokenizer]) in cases {
        let meta: serde_json::Value = serde_json::from_str(meta).unwrap();
        let items = meta["items"].as_array().unwrap();
        let ids = |v: &serde_json::Value| -> Vec<u32> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        };
        let m = Model::from_bytes(name, config, weights, tokenizer).unwrap();
        let gpu = GpuEngine::new(dev.clone(), &m).unwrap();
        let sources: Vec<&str> = items
            .iter()
            .map(|i| i["source"].as_str().unwrap())
            .collect();
        let decoding = if items[0]["target"].is_null() {
            Decoding::Greedy {
                max_new_tokens: meta["max_new_tokens"].as_u64().unwrap() as usize,
            }
        } else {
            Decoding::Forced(items.iter().map(|i| ids(&i["output_ids"])).collect())
        };
        let g = gpu.translate(&m, &sources, &decoding).await.unwrap();
        let c = translate(&m, &sources, &decoding).unwrap();
        for (engine, tr) in [("webgpu", &g), ("cpu", &c)] {
            let tr: &Translation = tr;
            let probs = attnscope::families::next_token_probs(&tr.step_logits);
            let mut worst = 0f32;
            for (i, item) in items.iter().enumerate() {
                assert_eq!(
                    tr.output_ids[i],
                    ids(&item["output_ids"]),
                    "{name} {engine} {i}"
                );
                let s_len = ids(&item["source_ids"]).len();
                let t_len = tr.steps(i);
                for (key, ours) in [
                    (
                        "encoder_attention",
                        tr.encoder_attention
                            .slice(s![i, .., .., ..s_len, ..s_len])
                            .to_owned()
                            .into_dyn(),
                    ),
                    (
                        "decoder_attention",
                        tr.decoder_attention
                            .slice(s![i, .., .., ..t_len, ..t_len])
                            .to_owned()
                            .into_dyn(),
                    ),
                    (
                        "cross_attention",
                        tr.cross_attention
                            .slice(s![i, .., .., ..t_len, ..s_len])
                            .to_owned()
                            .into_dyn(),
                    ),
                    (
                        "step_probs",
                        probs.slice(s![i, ..t_len, ..]).to_owned().into_dyn(),
                    ),
                ] {
                    let d = max_abs_diff(&ours, &tensor(golden, &format!("{key}_{i}")));
                    assert!(d <= 1e-4, "{name} {engine} {i}: {key} differs by {d}");
                    worst = worst.max(d);
                }
            }
            web_sys::console::log_1(&format!("{name} {engine}: max |Δ| {worst:.2e}").into());
        }
    }
}

/// `texts` tokenised and run under a causal mask on WebGPU (`gpu`) and on the CPU engine, each
/// keeping `opts`: (WebGPU's trace, the CPU's).
async fn causal_on_both(
    m: &Model,
    gpu: &GpuEngine,
    texts: &[&str],
    opts: &TraceOptions,
) -> (Trace, Trace) {
    let input = m.tokenizer.encode(texts, None).unwrap();
    let mask = Mask::from_kind(MaskKind::Causal, input.valid.view());
    let (g, _) = gpu.forward(m, &input, &mask, opts).await.unwrap();
    let c = cpu::forward(m, &input, &mask, opts).unwrap();
    (g, c)
}

/// A generation golden case's `.json` (tools/make_fixtures.py): the prompt's ids, HF's greedy
/// output ids, and options for as many new tokens (stopping at EOS, as HF's `generate`), keeping
/// each step's five likeliest tokens.
fn generate_case(json: &str) -> (Vec<u32>, Vec<u32>, GenerateOptions) {
    let meta: serde_json::Value = serde_json::from_str(json).unwrap();
    let ids = |k: &str| -> Vec<u32> {
        meta[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    let opts = GenerateOptions {
        max_new_tokens: meta["max_new_tokens"].as_u64().unwrap() as usize,
        top_k: 5,
        stop_at_eos: true,
        head_mask: Default::default(),
        numerics: Default::default(),
    };
    (ids("prompt_ids"), ids("output_ids"), opts)
}

#[wasm_bindgen_test]
async fn the_llama_family_on_webgpu_and_the_cpu_equals_hf_and_generates_as_hf_does() {
    let m = Model::from_bytes(
        "tiny-llama",
        include_bytes!("fixtures/models/tiny-llama/config.json"),
        include_bytes!("fixtures/models/tiny-llama/model.safetensors"),
        include_bytes!("fixtures/models/tiny-llama/tokenizer.json"),
    )
    .unwrap();
    let dev = GpuDevice::acquire().await.unwrap();
    let name = dev.describe();
    assert!(name.contains("WebGPU"), "{name}");
    let gpu = GpuEngine::new(dev, &m).unwrap();
    let golden: &[u8] = include_bytes!("fixtures/golden/llama_batch.safetensors");
    let texts = [
        "time flies like an arrow",
        "the cat sat",
        "fruit flies like a banana",
    ];
    let opts = TraceOptions {
        hidden_states: true,
        lm_logits: true,
        ..TraceOptions::default()
    };
    let (g, c) = causal_on_both(&m, &gpu, &texts, &opts).await;
    let att_hf = max_abs_diff(
        &g.attention.clone().into_dyn(),
        &tensor(golden, "attention"),
    );
    let hs_hf = max_abs_diff(
        &g.hidden_states.clone().unwrap().into_dyn(),
        &tensor(golden, "hidden_states"),
    );
    let att_cpu = max_abs_diff(
        &g.attention.clone().into_dyn(),
        &c.attention.clone().into_dyn(),
    );
    let hs_cpu = max_abs_diff(
        &g.hidden_states.clone().unwrap().into_dyn(),
        &c.hidden_states.clone().unwrap().into_dyn(),
    );
    web_sys::console::log_1(
        &format!("{name}: llama_batch attention vs HF {att_hf:.2e}, hidden states vs HF {hs_hf:.2e}; vs CPU attention {att_cpu:.2e}, hidden {hs_cpu:.2e}").into(),
    );
    assert!(att_hf <= 1e-4 && hs_hf <= 1e-3 && att_cpu <= 1e-5 && hs_cpu <= 1e-4);
    let (prompt, output, opts) = generate_case(include_str!("fixtures/golden/llama_generate.json"));
    let gg = gpu.generate(&m, &prompt, &opts).await.unwrap();
    let cg = generate(&m, &prompt, &opts).unwrap();
    assert_eq!(gg.output_ids, output);
    assert_eq!(gg.output_ids, cg.output_ids);
    let gen_att_hf = max_abs_diff(
        &gg.attention
            .clone()
            .insert_axis(ndarray::Axis(0))
            .into_dyn(),
        &tensor(
            include_bytes!("fixtures/golden/llama_generate.safetensors"),
            "attention",
        ),
    );
    let gen_att_cpu = max_abs_diff(
        &gg.attention.clone().into_dyn(),
        &cg.attention.clone().into_dyn(),
    );
    web_sys::console::log_1(
        &format!("llama_generate on WebGPU: ids equal HF's, attention vs HF {gen_att_hf:.2e}, vs CPU {gen_att_cpu:.2e}; step ms {:.1?}", gg.step_ms).into(),
    );
    assert!(gen_att_hf <= 1e-4 && gen_att_cpu <= 1e-5);
}

/// A folder as transformers 5 saves it, its chat template in chat_template.jinja writing its own
/// BOS before a tokenizer that adds one: the chat prompt's ids are HF's `apply_chat_template(…,
/// tokenize=True)`'s (one BOS), and greedy generation on WebGPU and the CPU engine writes HF's.
#[wasm_bindgen_test]
async fn a_chat_template_saved_by_transformers_5_gives_hfs_ids_and_generation_on_webgpu() {
    let chat = attnscope::checkpoint::ChatFiles {
        tokenizer_config: Some(include_bytes!(
            "fixtures/models/v5-llama/tokenizer_config.json"
        )),
        chat_template: Some(include_bytes!(
            "fixtures/models/v5-llama/chat_template.jinja"
        )),
    };
    let m = Model::from_bytes(
        "v5-llama",
        include_bytes!("fixtures/models/v5-llama/config.json"),
        include_bytes!("fixtures/models/v5-llama/model.safetensors"),
        include_bytes!("fixtures/models/v5-llama/tokenizer.json"),
    )
    .and_then(|m| m.with_chat_files(chat, "v5-llama"))
    .unwrap();
    let (prompt, output, opts) =
        generate_case(include_str!("fixtures/golden/v5_llama_generate.json"));
    let (_, enc) = m.encode_chat(&["time flies like an arrow"]).unwrap();
    assert_eq!(enc.ids.row(0).to_vec(), prompt, "the chat prompt's ids");
    let gpu = GpuEngine::new(GpuDevice::acquire().await.unwrap(), &m).unwrap();
    let gg = gpu.generate(&m, &prompt, &opts).await.unwrap();
    let cg = generate(&m, &prompt, &opts).unwrap();
    assert_eq!(gg.output_ids, output);
    assert_eq!(cg.output_ids, output);
    let att = max_abs_diff(
        &gg.attention
            .clone()
            .insert_axis(ndarray::Axis(0))
            .into_dyn(),
        &tensor(
            include_bytes!("fixtures/golden/v5_llama_generate.safetensors"),
            "attention",
        ),
    );
    web_sys::console::log_1(
        &format!("v5_llama_generate on WebGPU: ids equal HF's, attention vs HF {att:.2e}").into(),
    );
    assert!(att <= 1e-4);
}

/// A GGUF file's quantized matrices in wasm (SIMD128 or relaxed SIMD, one thread): the tiny
/// Llama's Q4_K file, and its Q4_0, Q4_1 and Q8_0 files (whose blocks `quant/simd128.rs`
/// multiplies: seven tokens are a matrix–vector product), on the CPU engine against HF's
/// dequantized model.
#[wasm_bindgen_test]
fn quantized_gguf_models_run_in_wasm_as_hf_runs_them() {
    let files: [(&str, &[u8], &[u8]); 4] = [
        (
            "tiny-llama-Q4_K.gguf",
            include_bytes!("fixtures/models/tiny-llama-gguf/tiny-llama-Q4_K.gguf"),
            include_bytes!("fixtures/golden/llama_gguf_Q4_K.safetensors"),
        ),
        (
            "tiny-llama-Q4_0.gguf",
            include_bytes!("fixtures/models/tiny-llama-gguf/tiny-llama-Q4_0.gguf"),
            include_bytes!("fixtures/golden/llama_gguf_Q4_0.safetensors"),
        ),
        (
            "tiny-llama-Q4_1.gguf",
            include_bytes!("fixtures/models/tiny-llama-gguf/tiny-llama-Q4_1.gguf"),
            include_bytes!("fixtures/golden/llama_gguf_Q4_1.safetensors"),
        ),
        (
            "tiny-llama-Q8_0.gguf",
            include_bytes!("fixtures/models/tiny-llama-gguf/tiny-llama-Q8_0.gguf"),
            include_bytes!("fixtures/golden/llama_gguf_Q8_0.safetensors"),
        ),
    ];
    for (name, bytes, golden) in files {
        let file = attnscope::model::WeightsFile::from_bytes(bytes, name).unwrap();
        let m = Model::from_gguf(name, &file).unwrap();
        let input = m
            .tokenizer
            .encode(&["time flies like an arrow"], None)
            .unwrap();
        let mask = Mask::from_kind(MaskKind::Causal, input.valid.view());
        let c = cpu::forward(&m, &input, &mask, &TraceOptions::default()).unwrap();
        let d = max_abs_diff(&c.attention.into_dyn(), &tensor(golden, "attention"));
        web_sys::console::log_1(&format!("{name} in wasm: attention vs HF {d:.2e}").into());
        assert!(d <= 1e-4, "{name}: {d}");
    }
}

/// `quant/simd128.rs`'s matrix–vector product on its own, value by value: random `Q8_0`, `Q4_0`
/// and `Q4_1` blocks whose `f16` scales and offsets run through signs, subnormals and large
/// values (the kernel converts four rows' together), 4·k + 1 rows (four at a time, then one),
/// each product against the dot product in f64 of the row the portable code dequantizes. Rows
/// of one block show each row's own scale; rows of three, their sum.
#[wasm_bindgen_test]
fn quantized_matrix_vector_products_in_wasm_equal_the_dequantized_rows() {
    for cols in [32, 96] {
        products_equal_the_dequantized_rows(13, cols);
    }
}

fn products_equal_the_dequantized_rows(rows: usize, cols: usize) {
    use attnscope::model::quant::{GgmlType, QuantMatrix, SharedBytes};
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let scales = [
        1.0e-2f32, -3.5e-3, 2.0e-6, -6.0e-8, 700.0, 0.25, -1.5e-5, 4.2e-2,
    ];
    for (ty, block_bytes, halves) in [
        (GgmlType::Q8_0, 34, 1),
        (GgmlType::Q4_0, 18, 1),
        (GgmlType::Q4_1, 20, 2),
    ] {
        let mut bytes = Vec::new();
        for block in 0..rows * cols / 32 {
            let mut b: Vec<u8> = (0..block_bytes).map(|_| next() as u8).collect();
            for h in 0..halves {
                let v = scales[(block * 3 + h * 5) % scales.len()];
                b[2 * h..2 * h + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
            }
            bytes.extend(b);
        }
        let shared: SharedBytes = std::sync::Arc::new(bytes);
        let m = QuantMatrix::new(ty, rows, cols, shared, 0).unwrap();
        let x =
            ndarray::Array2::from_shape_fn((1, cols), |(_, j)| ((j * 37 % 23) as f32 - 11.0) / 7.0);
        let y = m.matmul_t(x.view());
        let mut row = vec![0.0f32; cols];
        for r in 0..rows {
            m.dequantize_row(r, &mut row);
            let want: f64 = row
                .iter()
                .zip(x.iter())
                .map(|(&w, &x)| f64::from(w) * f64::from(x))
                .sum();
            let size: f64 = row
                .iter()
                .zip(x.iter())
                .map(|(&w, &x)| f64::from((w * x).abs()))
                .sum();
            let got = f64::from(y[[0, r]]);
            assert!(
                (got - want).abs() <= 1e-5 * size,
                "{ty}, {cols} columns: row {r}: {got} against {want} (Σ|w·x| {size})"
            );
        }
    }
}

/// A long run on WebGPU (its pass tells each layer begun and folds no heads) and then its
/// summary as the worker makes it (`summaryHeads`, a few heads a call, each computed again from
/// the kept queries and keys): the page's progress cells (`progressCells`) show each layer once
/// its last head is folded, and then its heads' own thumbnails, the summary's, where the cells
/// say. The tiny Llama of 4 layers × 16 heads over 800 positions (its heads' 41M probabilities
/// past the long-run threshold).
#[wasm_bindgen_test]
async fn a_long_webgpu_runs_summary_shows_each_layer_in_the_progress_cells_as_it_folds_it() {
    use attnscope::wasm::WeightsBuffer;
    use js_sys::{Array, Float32Array, Function, Object, Promise, Reflect};
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;
    let bytes: &[u8] = include_bytes!("fixtures/models/tiny-llama-wide/model.safetensors");
    let mut file = WeightsBuffer::new("wide/model.safetensors".into(), bytes.len()).unwrap();
    file.write(0, &js_sys::Uint8Array::from(bytes)).unwrap();
    let session = attnscope::wasm::load_session(
        "wide".into(),
        include_bytes!("fixtures/models/tiny-llama-wide/config.json"),
        &file,
        include_bytes!("fixtures/models/tiny-llama-wide/tokenizer.json"),
        "gpu".into(),
        None,
        None,
    )
    .unwrap();
    let session = JsFuture::from(session).await.unwrap();
    let get = |o: &JsValue, k: &str| Reflect::get(o, &k.into()).unwrap();
    let call = |name: &str, args: &[JsValue]| -> JsValue {
        let f: Function = get(&session, name).dyn_into().unwrap();
        f.apply(&session, &args.iter().collect::<Array>()).unwrap()
    };
    // SAFETY (of each read): the cells are the session's `PassProgress`, six u32 and then the
    // thumbnails' address, in this module's own memory
    let cells_at = call("progressCells", &[]).as_f64().unwrap() as usize;
    let cells = || -> [u32; 6] {
        unsafe { std::slice::from_raw_parts(cells_at as *const u32, 6) }
            .try_into()
            .unwrap()
    };
    let ids: Array = (0..800u32)
        .map(|i| JsValue::from(3 + (i * 37 + i / 7) % 390))
        .collect();
    let options = Object::new();
    Reflect::set(&options, &"ids".into(), &ids).unwrap();
    let texts = Array::of1(&"".into());
    let promise: Promise = call(
        "run",
        &[
            texts.into(),
            JsValue::UNDEFINED,
            "causal".into(),
            "gpu".into(),
            options.into(),
        ],
    )
    .dyn_into()
    .unwrap();
    let r = JsFuture::from(promise).await.unwrap();
    let info = get(&r, "info");
    assert!(
        get(&info, "backend")
            .as_string()
            .unwrap()
            .starts_with("gpu"),
        "{:?}",
        get(&info, "backend")
    );
    let run = get(&info, "long_run").as_f64().expect("a long run") as u32;
    assert_eq!(
        cells()[..4],
        [4, 4, 0, 0],
        "the pass told every layer begun, and none folded"
    );
    let (mut own, mut side) = (Vec::new(), 0);
    for layer in 0..4u32 {
        let mut first = 0;
        while first < 16 {
            let some = call(
                "summaryHeads",
                &[run.into(), 0.into(), layer.into(), first.into()],
            );
            let heads = get(&some, "heads").as_f64().unwrap() as u32;
            side = get(&some, "side").as_f64().unwrap() as u32;
            let thumbs: Float32Array = get(&get(&some, "own"), "thumbs").dyn_into().unwrap();
            assert_eq!(
                thumbs.length(),
                heads * side * side,
                "layer {layer}, heads {first}…"
            );
            own.extend(thumbs.to_vec());
            first += heads;
            let shown = if first == 16 { layer + 1 } else { layer };
            assert_eq!(
                cells()[3],
                shown,
                "layer {layer}, {first} of its 16 heads folded: the layers shown"
            );
        }
    }
    assert_eq!(
        cells(),
        [4, 4, 0, 4, side, 16],
        "4 layers of 16 heads shown, no stop asked"
    );
    let at = unsafe { *(cells_at as *const u32).add(6).cast::<usize>() };
    let shown = unsafe { std::slice::from_raw_parts(at as *const f32, own.len()) };
    assert!(
        side > 0 && shown == own.as_slice(),
        "the cells' thumbnails are the summary's own, bit for bit"
    );
}

/// The engine's matrix product as wasm runs it (`linalg/gemm.rs`, the `f32x4` micro-kernel and
/// its own writes of a whole panel's width), value by value against the sum in f64: rows of
/// `A` that fill the kernel's tiles and rows that do not, panels whole and a last one narrower,
/// a depth within one pass and across three (each pass after the first adds to what the last
/// wrote), with and without `α` and a bias.
#[wasm_bindgen_test]
fn matrix_products_in_wasm_equal_the_sums_in_f64() {
    use attnscope::linalg::gemm::{matmul_in_one_thread, PackedB};
    use ndarray::{Array1, Array2};
    for (m, k, n) in [
        (4, 8, 8),
        (7, 64, 19),
        (9, 385, 16),
        (13, 1000, 24),
        (1, 3, 5),
    ] {
        let a = Array2::from_shape_fn((m, k), |(i, p)| {
            ((i * 31 + p * 17) % 29) as f32 / 14.0 - 1.0
        });
        let b = Array2::from_shape_fn((k, n), |(p, j)| ((p * 13 + j * 7) % 23) as f32 / 11.0 - 1.0);
        let bias = Array1::from_shape_fn(n, |j| j as f32 * 0.25 - 1.0);
        let packed = PackedB::from_matrix(b.view());
        for (alpha, bias) in [(1.0f32, None), (0.125, Some(bias.view()))] {
            let mut c = Array2::uninit((m, n));
            let c = matmul_in_one_thread(a.view(), &packed, alpha, bias, c.view_mut());
            for ((i, j), &got) in c.indexed_iter() {
                let dot: f64 = (0..k)
                    .map(|p| f64::from(a[[i, p]]) * f64::from(b[[p, j]]))
                    .sum();
                let size: f64 = (0..k)
                    .map(|p| f64::from((a[[i, p]] * b[[p, j]]).abs()))
                    .sum();
                let want = dot * f64::from(alpha) + bias.map_or(0.0, |b| f64::from(b[j]));
                assert!(
                    (f64::from(got) - want).abs() <= 1e-5 * (size + 1.0),
                    "({m}, {k}) × ({k}, {n}), α {alpha}, bias {}: C[{i}, {j}] = {got}, the sum in f64 {want}",
                    bias.is_some()
                );
            }
        }
    }
}

/// The tiny Llama's text, and the tiny Gemma 3's and Qwen3's (tools/make_fixtures.py).
const LLAMA_TEXT: &str = "time flies like an arrow";
const FAMILY_TEXT: &str = "time flies like an arrow and fruit flies like a banana";

/// The same files on WebGPU, their matrices kept in their ggml types and multiplied and gathered
/// from by `quant.wgsl` as the browser compiles it (Q4_K and Q5_0 in one file, Q6_K and Q8_0 in
/// another, Q5_K, Q3_K and Q2_K each beside the type its small matrices fall back to), and a
/// Gemma 3 (its SentencePiece vocabulary, its window crossed) and a Qwen3 from GGUF: HF's
/// attention on WebGPU and on the CPU engine in the same page, and the Q4_K file's greedy
/// generation.
#[wasm_bindgen_test]
async fn quantized_gguf_models_run_on_webgpu_as_on_the_cpu() {
    let files: [(&str, &[u8], &[u8], &str); 7] = [
        (
            "tiny-llama-Q4_K.gguf",
            include_bytes!("fixtures/models/tiny-llama-gguf/tiny-llama-Q4_K.gguf"),
            include_bytes!("fixtures/golden/llama_gguf_Q4_K.safetensors"),
            LLAMA_TEXT,
        ),
        (
            "tiny-llama-Q6_K.gguf",
            include_bytes!("fixtures/models/tiny-llama-gguf/tiny-llama-Q6_K.gguf"),
            include_bytes!("fixtures/golden/llama_gguf_Q6_K.safetensors"),
            LLAMA_TEXT,
        ),
        (
            "tiny-llama-Q5_K.gguf",
            include_bytes!("fixtures/models/tiny-llama-gguf/tiny-llama-Q5_K.gguf"),
            include_bytes!("fixtures/golden/llama_gguf_Q5_K.safetensors"),
            LLAMA_TEXT,
        ),
        (
            "tiny-llama-Q3_K.gguf",
            include_bytes!("fixtures/models/tiny-llama-gguf/tiny-llama-Q3_K.gguf"),
            include_bytes!("fixtures/golden/llama_gguf_Q3_K.safetensors"),
            LLAMA_TEXT,
        ),
        (
            "tiny-llama-Q2_K.gguf",
            include_bytes!("fixtures/models/tiny-llama-gguf/tiny-llama-Q2_K.gguf"),
            include_bytes!("fixtures/golden/llama_gguf_Q2_K.safetensors"),
            LLAMA_TEXT,
        ),
        (
            "tiny-gemma3-Q4_K.gguf",
            include_bytes!("fixtures/models/tiny-gemma3-gguf/tiny-gemma3-Q4_K.gguf"),
            include_bytes!("fixtures/golden/gemma3_gguf_Q4_K.safetensors"),
            FAMILY_TEXT,
        ),
        (
            "tiny-qwen3-Q2_K.gguf",
            include_bytes!("fixtures/models/tiny-qwen3-gguf/tiny-qwen3-Q2_K.gguf"),
            include_bytes!("fixtures/golden/qwen3_gguf_Q2_K.safetensors"),
            FAMILY_TEXT,
        ),
    ];
    for (name, bytes, golden, text) in files {
        let file = attnscope::model::WeightsFile::from_bytes(bytes, name).unwrap();
        let m = Model::from_gguf(name, &file).unwrap();
        let gpu = GpuEngine::new(GpuDevice::acquire().await.unwrap(), &m).unwrap();
        let opts = TraceOptions {
            lm_logits: true,
            ..TraceOptions::default()
        };
        let (g, c) = causal_on_both(&m, &gpu, &[text], &opts).await;
        let att_hf = max_abs_diff(
            &g.attention.clone().into_dyn(),
            &tensor(golden, "attention"),
        );
        let cpu_hf = max_abs_diff(
            &c.attention.clone().into_dyn(),
            &tensor(golden, "attention"),
        );
        let att_cpu = max_abs_diff(&g.attention.into_dyn(), &c.attention.into_dyn());
        let logits_cpu = max_abs_diff(
            &g.lm_logits.unwrap().into_dyn(),
            &c.lm_logits.unwrap().into_dyn(),
        );
        web_sys::console::log_1(
            &format!(
                "{name} on WebGPU: attention vs HF {att_hf:.2e}, vs CPU {att_cpu:.2e} (the CPU \
                 vs HF {cpu_hf:.2e}), LM logits vs CPU {logits_cpu:.2e}; {} bytes of parameters \
                 on the GPU",
                gpu.parameter_bytes().unwrap()
            )
            .into(),
        );
        assert!(att_hf <= 1e-4 && cpu_hf <= 1e-4 && att_cpu <= 1e-5 && logits_cpu <= 1e-4);
        let generation = match name {
            "tiny-llama-Q4_K.gguf" => {
                Some(include_str!("fixtures/golden/llama_gguf_generate.json"))
            }
            "tiny-gemma3-Q4_K.gguf" => {
                Some(include_str!("fixtures/golden/gemma3_gguf_generate.json"))
            }
            _ => None,
        };
        if let Some(json) = generation {
            let (prompt, output, opts) = generate_case(json);
            let gg = gpu.generate(&m, &prompt, &opts).await.unwrap();
            assert_eq!(gg.output_ids, output, "{name} on WebGPU: greedy ids");
        }
    }
}
