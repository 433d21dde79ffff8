//! Hostile checkpoints and inputs: every size limit of `src/model/limits.rs` refuses its case
//! with an error naming the file, key or shape, before any big allocation (measured: this test
//! binary's allocator records the largest single allocation of each thread).
#![cfg(not(target_arch = "wasm32"))] // native tests; the browser's are in tests/web.rs

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use attnscope::engine::{check_input, cpu, TraceOptions};
use attnscope::model::limits::*;
use attnscope::model::TextTokenizer;
use attnscope::{Error, Mask, MaskKind, Model};
use common::*;

/// The system allocator, recording the largest allocation each thread asks for.
struct PeakTracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

unsafe impl GlobalAlloc for PeakTracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: PeakTracking = PeakTracking;

/// The largest single allocation `f` makes on this thread, and what it returns.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let out = f();
    (out, LARGEST.with(Cell::get))
}

/// No refusal below may allocate more than this at once: the inputs themselves are smaller.
const SMALL: usize = 1 << 20;

fn tiny_file(f: &str) -> Vec<u8> {
    std::fs::read(model_dir("tiny-bert").join(f)).unwrap()
}

/// Loads the tiny checkpoint from bytes (the browser's path) with one file replaced, and
/// returns the error and the largest allocation made while failing.
fn load_err(
    config: Option<&[u8]>,
    weights: Option<&[u8]>,
    tokenizer: Option<&[u8]>,
) -> (Error, String, usize) {
    let (c, w, t) = (
        tiny_file("config.json"),
        tiny_file("model.safetensors"),
        tiny_file("tokenizer.json"),
    );
    let (result, peak) = largest_allocation(|| {
        Model::from_bytes(
            "upload",
            config.unwrap_or(&c),
            weights.unwrap_or(&w),
            tokenizer.unwrap_or(&t),
        )
    });
    let e = result.err().expect("loading must fail");
    let msg = e.to_string();
    (e, msg, peak)
}

/// The tiny checkpoint's config.json with `key` set to `value` (a JSON literal).
fn config_with(edits: &[(&str, &str)]) -> Vec<u8> {
    let mut c: serde_json::Value = serde_json::from_slice(&tiny_file("config.json")).unwrap();
    for (key, value) in edits {
        c[*key] = serde_json::from_str(value).unwrap();
    }
    serde_json::to_vec(&c).unwrap()
}

/// A safetensors file from its header JSON and data bytes.
fn safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

#[test]
fn absurd_config_sizes_are_refused_by_name() {
    for (key, value, limit) in [
        ("hidden_size", "1000000000", MAX_HIDDEN_SIZE),
        ("num_hidden_layers", "1000000", MAX_LAYERS),
        ("max_position_embeddings", "1000000000", MAX_POSITIONS),
        ("vocab_size", "1000000000000", MAX_VOCAB_SIZE),
        ("intermediate_size", "1000000000", MAX_INTERMEDIATE_SIZE),
        ("num_attention_heads", "1000000", MAX_HEADS),
        ("type_vocab_size", "4000000000", MAX_TYPE_VOCAB_SIZE),
    ] {
        let config = config_with(&[(key, value)]);
        let (e, msg, peak) = load_err(Some(&config), None, None);
        assert!(matches!(e, Error::Config { .. }), "{key}: {msg}");
        assert!(
            msg.contains("upload/config.json")
                && msg.contains(&format!("`{key}` {value} is over the limit of {limit}")),
            "{key}: {msg}"
        );
        assert!(peak < SMALL, "{key}: allocated {peak} bytes at once");
    }
}

#[test]
fn zero_sizes_and_a_useless_eps_are_refused_by_name() {
    for key in [
        "num_attention_heads",
        "hidden_size",
        "num_hidden_layers",
        "vocab_size",
    ] {
        let (_, msg, _) = load_err(Some(&config_with(&[(key, "0")])), None, None);
        assert!(msg.contains(&format!("`{key}` must be positive")), "{msg}");
    }
    for eps in ["1e300", "0", "-1e-12", "1e-50"] {
        let (_, msg, _) = load_err(Some(&config_with(&[("layer_norm_eps", eps)])), None, None);
        assert!(msg.contains("`layer_norm_eps`"), "{eps}: {msg}");
    }
}

#[test]
fn sizes_each_within_limits_but_too_many_parameters_are_refused() {
    let config = config_with(&[
        ("vocab_size", "1000000"),
        ("hidden_size", "8192"),
        ("num_attention_heads", "64"),
    ]);
    let (e, msg, peak) = load_err(Some(&config), None, None);
    assert!(matches!(e, Error::Config { .. }), "{msg}");
    assert!(
        msg.contains("parameters")
            && msg.contains("vocab_size 1000000")
            && msg.contains("hidden_size 8192")
            && msg.contains(&MAX_PARAMETERS.to_string()),
        "{msg}"
    );
    assert!(peak < SMALL, "allocated {peak} bytes at once");
}

#[test]
fn too_many_attention_values_per_text_are_refused() {
    let config = config_with(&[
        ("num_hidden_layers", "64"),
        ("num_attention_heads", "24"),
        ("max_position_embeddings", "4096"),
    ]);
    let (e, msg, _) = load_err(Some(&config), None, None);
    assert!(matches!(e, Error::Config { .. }), "{msg}");
    assert!(
        msg.contains("num_hidden_layers 64 × num_attention_heads 24 × 4096²")
            && msg.contains(&MAX_MODEL_ATTENTION_VALUES.to_string()),
        "{msg}"
    );
}

#[test]
fn a_config_implying_more_than_the_file_holds_is_refused_before_reading_tensors() {
    // 60 layers fit every limit, but the file holds 2: refused by counting, not by a missing key.
    let config = config_with(&[("num_hidden_layers", "60")]);
    let (e, msg, peak) = load_err(Some(&config), None, None);
    assert!(matches!(e, Error::Safetensors { .. }), "{msg}");
    assert!(
        msg.contains("upload/model.safetensors")
            && msg.contains("parameters")
            && msg.contains("num_hidden_layers 60")
            && msg.contains("values"),
        "{msg}"
    );
    assert!(peak < SMALL, "allocated {peak} bytes at once");
}

#[test]
fn a_safetensors_header_claiming_a_huge_tensor_names_key_and_shape() {
    let key = "bert.embeddings.word_embeddings.weight";
    for (shape, bytes) in [
        ("[100000,100000]", "40000000000 bytes"),
        ("[1000000000,1000000000]", "4000000000000000000 bytes"),
        (
            "[1000000000000000000,1000000000000000000,1000000000000000000]",
            "more than 2^128 bits",
        ),
    ] {
        let dtype = "F32";
        let header =
            format!(r#"{{"{key}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[0,16]}}}}"#);
        let file = safetensors(&header, &[0; 16]);
        let (e, msg, peak) = load_err(None, Some(&file), None);
        assert!(matches!(e, Error::Safetensors { .. }), "{msg}");
        let shape_shown = shape.replace(',', ", ");
        assert!(
            msg.contains("upload/model.safetensors")
                && msg.contains(&format!("tensor `{key}` has shape {shape_shown}"))
                && msg.contains(bytes)
                && msg.contains("span 16 bytes"),
            "{msg}"
        );
        assert!(peak < SMALL, "allocated {peak} bytes at once");
    }
}

#[test]
fn a_safetensors_header_length_past_the_limit_or_the_file_is_refused() {
    let mut huge = (1u64 << 40).to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    let (_, msg, peak) = load_err(None, Some(&huge), None);
    assert!(
        msg.contains("model.safetensors")
            && msg.contains(&format!(
                "the header claims {} bytes, over the limit",
                1u64 << 40
            )),
        "{msg}"
    );
    assert!(peak < SMALL, "allocated {peak} bytes at once");

    let mut short = 1000u64.to_le_bytes().to_vec();
    short.extend_from_slice(b"{}");
    let (_, msg, _) = load_err(None, Some(&short), None);
    assert!(
        msg.contains("the header claims 1000 bytes but only 2 follow"),
        "{msg}"
    );

    let (_, msg, _) = load_err(None, Some(&[1, 2, 3]), None);
    assert!(msg.contains("the file is 3 bytes, too short"), "{msg}");
}

#[test]
fn a_file_larger_than_its_header_says_is_refused() {
    let mut file = tiny_file("model.safetensors");
    let data = file.len() - 8 - u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    file.extend_from_slice(&[0; 1 << 20]);
    let (e, msg, _) = load_err(None, Some(&file), None);
    assert!(matches!(e, Error::Safetensors { .. }), "{msg}");
    assert!(
        msg.contains("upload/model.safetensors")
            && msg.contains(&format!(
                "the header describes {data} bytes of tensor data but {} follow it ({} trailing bytes)",
                data + (1 << 20),
                1 << 20
            )),
        "{msg}"
    );
    // and smaller: the data is cut short
    let file = tiny_file("model.safetensors");
    let (_, msg, _) = load_err(None, Some(&file[..file.len() - 100]), None);
    assert!(
        msg.contains(&format!(
            "the header describes {data} bytes of tensor data but only {} follow it (the file is truncated)",
            data - 100
        )),
        "{msg}"
    );
}

#[test]
fn oversized_config_and_tokenizer_bytes_are_refused_unparsed() {
    let config = vec![b' '; MAX_CONFIG_BYTES + 1];
    let (e, msg, _) = load_err(Some(&config), None, None);
    assert!(matches!(e, Error::Config { .. }), "{msg}");
    assert!(
        msg.contains("upload/config.json")
            && msg.contains(&format!(
                "the file is {} bytes, over the limit of {MAX_CONFIG_BYTES}",
                MAX_CONFIG_BYTES + 1
            )),
        "{msg}"
    );
    let tokenizer = vec![b' '; MAX_TOKENIZER_BYTES + 1];
    let (e, msg, peak) = load_err(None, None, Some(&tokenizer));
    assert!(matches!(e, Error::Tokenizer { .. }), "{msg}");
    assert!(
        msg.contains("upload/tokenizer.json")
            && msg.contains(&format!("over the limit of {MAX_TOKENIZER_BYTES}")),
        "{msg}"
    );
    assert!(peak < SMALL, "allocated {peak} bytes at once");
}

/// A folder holding the tiny checkpoint with `file` replaced by a sparse file of `len` bytes.
fn folder_with_huge(file: &str, len: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(model_dir("tiny-bert").join(f), dir.path().join(f)).unwrap();
    }
    std::fs::File::create(dir.path().join(file))
        .unwrap()
        .set_len(len)
        .unwrap();
    dir
}

#[test]
fn huge_files_in_a_folder_are_refused_by_their_size_unread() {
    for (file, len, limit) in [
        ("model.safetensors", 100 << 30, MAX_WEIGHTS_BYTES),
        ("tokenizer.json", 1 << 30, MAX_TOKENIZER_BYTES),
        ("config.json", 1 << 30, MAX_CONFIG_BYTES),
    ] {
        let dir = folder_with_huge(file, len);
        let (result, peak) = largest_allocation(|| Model::from_dir(dir.path()));
        let msg = result.err().expect("loading must fail").to_string();
        let path = dir.path().join(file);
        assert!(
            msg.contains(&format!(
                "{}: invalid config: the file is {len} bytes, over the limit of {limit}",
                path.display()
            )) || msg.contains(&format!(
                "{}: not a valid safetensors file: the file is {len} bytes, over the limit of {limit}",
                path.display()
            )) || msg.contains(&format!(
                "{}: tokenizer error: the file is {len} bytes, over the limit of {limit}",
                path.display()
            )),
            "{msg}"
        );
        assert!(peak < SMALL, "{file}: allocated {peak} bytes at once");
    }
}

#[test]
fn hostile_tokenizers_are_errors_or_caught_before_running() {
    let tiny = model("tiny-bert");
    let load = |json: &[u8]| TextTokenizer::from_bytes(json, "tokenizer.json", 64, Some(0));
    // nested a million deep: the JSON parser's depth limit, not a stack overflow
    let deep = "[".repeat(1_000_000);
    let e = load(deep.as_bytes()).err().unwrap().to_string();
    assert!(e.starts_with("tokenizer.json: tokenizer error:"), "{e}");
    // a vocabulary with ids far past the model's: tokenises, and is refused before the forward pass
    let mut t: serde_json::Value = serde_json::from_slice(&tiny_file("tokenizer.json")).unwrap();
    t["model"]["vocab"]["time"] = serde_json::json!(4_000_000_000u32);
    let hostile = load(&serde_json::to_vec(&t).unwrap()).unwrap();
    let input = hostile.encode(&["time flies"], None).unwrap();
    let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
    let e = check_input(&tiny.config, &input, &mask, &TraceOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("token id 4000000000") && e.contains("vocab_size 77"),
        "{e}"
    );
}

#[test]
fn a_batch_over_the_limit_is_an_error_and_the_limit_runs() {
    let m = model("tiny-bert");
    let texts = ["time flies", "a cat", "the dog", "it was happy", "an arrow"];
    let e = m.tokenizer.encode(&texts, None).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("invalid input: a batch of 5 texts is over the limit of {MAX_BATCH}")
    );
    let input = m
        .tokenizer
        .encode(&texts[..MAX_BATCH], Some("the mat"))
        .unwrap();
    assert_eq!(input.batch(), MAX_BATCH);
    let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
    cpu::forward(m, &input, &mask, &TraceOptions::default()).unwrap();
}

#[test]
fn text_the_tokenizer_drops_entirely_is_an_error() {
    let m = model("tiny-bert");
    // zero-width space, joiner, BOM, an RTL override and a control character: not whitespace
    // to Rust, but BERT's normaliser drops them all
    let invisible = "\u{200B}\u{200D}\u{FEFF}\u{202E}\u{7}";
    let e = m.tokenizer.encode(&[invisible], None).unwrap_err();
    assert!(matches!(e, Error::NoTokens { index: 0 }), "{e}");
    assert!(e.to_string().contains("text 0 has no tokens"), "{e}");
    let e = m
        .tokenizer
        .encode(&["time flies"], Some(invisible))
        .unwrap_err();
    assert!(matches!(e, Error::NoTokens { index: 1 }), "{e}");
    // with something visible it runs
    let input = m
        .tokenizer
        .encode(&[&format!("{invisible}cat")], None)
        .unwrap();
    assert_eq!(input.tokens[0], ["[CLS]", "cat", "[SEP]"]);
}

#[test]
fn text_of_only_unknown_characters_runs_as_unk() {
    let m = model("tiny-bert");
    let input = m.tokenizer.encode(&["😀 \u{1F9EC} 中"], None).unwrap();
    assert_eq!(
        input.tokens[0],
        ["[CLS]", "[UNK]", "[UNK]", "[UNK]", "[SEP]"]
    );
    let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
    let trace = cpu::forward(m, &input, &mask, &TraceOptions::default()).unwrap();
    assert_eq!(trace.attention.dim(), (1, 2, 3, 5, 5));
}

#[test]
fn text_over_the_model_length_is_truncated_and_reported() {
    let m = model("tiny-bert");
    let long = "time flies ".repeat(100);
    let input = m.tokenizer.encode(&[long.as_str(), "a cat"], None).unwrap();
    assert_eq!(input.len(), m.config.max_position_embeddings);
    assert_eq!(input.truncated, [true, false]);
    assert_eq!(input.tokens[0].last().unwrap(), "[SEP]");
}

#[test]
fn text_over_the_byte_limit_is_cut_before_tokenising_and_reported() {
    let m = model("tiny-bert");
    // megabytes of text tokenise only up to the limit, and are reported as truncated
    let huge = "time flies like an arrow ".repeat(200_000);
    let (input, peak) = largest_allocation(|| m.tokenizer.encode(&[huge.as_str()], None).unwrap());
    assert_eq!(input.truncated, [true]);
    assert_eq!(input.len(), m.config.max_position_embeddings);
    assert!(peak < 64 * MAX_TEXT_BYTES, "allocated {peak} bytes at once");
    // leading whitespace past the limit is not the text: what follows it is kept
    let spaced = format!("{}cat", " ".repeat(MAX_TEXT_BYTES + 10));
    let input = m.tokenizer.encode(&[spaced.as_str()], None).unwrap();
    assert_eq!(input.tokens[0], ["[CLS]", "cat", "[SEP]"]);
    assert_eq!(input.truncated, [false]);
    // a cut inside a multi-byte character keeps the text valid UTF-8
    let wide = "é".repeat(MAX_TEXT_BYTES);
    let input = m.tokenizer.encode(&[wide.as_str()], None).unwrap();
    assert_eq!(input.truncated, [true]);
}

#[test]
fn the_limits_admit_bert_large() {
    // BERT-large's config (24 layers × 16 heads, hidden 1024, 512 positions) passes every limit.
    let config = config_with(&[
        ("vocab_size", "30522"),
        ("hidden_size", "1024"),
        ("num_hidden_layers", "24"),
        ("num_attention_heads", "16"),
        ("intermediate_size", "4096"),
        ("max_position_embeddings", "512"),
    ]);
    let c = attnscope::families::read_config(&config, "config.json").unwrap();
    assert!(c.parameter_count() > 300_000_000);
}

/// A family's tiny checkpoint with its config.json edited as `edits` say, loaded from bytes:
/// the error and the largest allocation made while failing.
fn family_err(name: &str, edits: &[(&str, &str)]) -> (Error, String, usize) {
    let read = |f: &str| std::fs::read(model_dir(name).join(f)).unwrap();
    let mut c: serde_json::Value = serde_json::from_slice(&read("config.json")).unwrap();
    for (key, value) in edits {
        c[*key] = serde_json::from_str(value).unwrap();
    }
    let config = serde_json::to_vec(&c).unwrap();
    let (w, t) = (read("model.safetensors"), read("tokenizer.json"));
    let (result, peak) = largest_allocation(|| Model::from_bytes(name, &config, &w, &t));
    let e = result.err().expect("loading must fail");
    let msg = e.to_string();
    (e, msg, peak)
}

#[test]
fn every_familys_absurd_sizes_are_refused_by_its_own_field_names() {
    for (name, key, value, limit) in [
        ("tiny-gpt2", "n_embd", "1000000000", MAX_HIDDEN_SIZE),
        ("tiny-gpt2", "n_layer", "1000000", MAX_LAYERS),
        ("tiny-gpt2", "n_head", "1000000", MAX_HEADS),
        ("tiny-gpt2", "n_positions", "1000000000", MAX_POSITIONS),
        ("tiny-gpt2", "n_inner", "1000000000", MAX_INTERMEDIATE_SIZE),
        ("tiny-gpt2", "vocab_size", "1000000000000", MAX_VOCAB_SIZE),
        ("tiny-distilbert", "dim", "1000000000", MAX_HIDDEN_SIZE),
        ("tiny-distilbert", "n_layers", "1000000", MAX_LAYERS),
        (
            "tiny-distilbert",
            "hidden_dim",
            "1000000000",
            MAX_INTERMEDIATE_SIZE,
        ),
        (
            "tiny-roberta",
            "max_position_embeddings",
            "1000000000",
            MAX_POSITIONS,
        ),
        ("tiny-marian", "d_model", "1000000000", MAX_HIDDEN_SIZE),
        ("tiny-marian", "encoder_layers", "1000000", MAX_LAYERS),
        ("tiny-marian", "decoder_layers", "1000000", MAX_LAYERS),
        (
            "tiny-marian",
            "decoder_attention_heads",
            "1000000",
            MAX_HEADS,
        ),
        (
            "tiny-marian",
            "decoder_ffn_dim",
            "1000000000",
            MAX_INTERMEDIATE_SIZE,
        ),
    ] {
        let (e, msg, peak) = family_err(name, &[(key, value)]);
        assert!(matches!(e, Error::Config { .. }), "{name} {key}: {msg}");
        assert!(
            msg.contains(&format!("{name}/config.json"))
                && msg.contains(&format!("`{key}` {value} is over the limit of {limit}")),
            "{name} {key}: {msg}"
        );
        assert!(peak < SMALL, "{name} {key}: allocated {peak} bytes at once");
    }
    // what the engines do not compute is refused by name, not run wrong
    for (name, key, value, says) in [
        (
            "tiny-gpt2",
            "n_head",
            "5",
            "`n_embd` 24 is not divisible by `n_head` 5",
        ),
        (
            "tiny-gpt2",
            "scale_attn_by_inverse_layer_idx",
            "true",
            "`scale_attn_by_inverse_layer_idx` is not supported",
        ),
        (
            "tiny-gpt2",
            "scale_attn_weights",
            "false",
            "`scale_attn_weights` false is not supported",
        ),
        ("tiny-gpt2", "activation_function", "\"tanh\"", "tanh"),
        (
            "tiny-marian",
            "decoder_attention_heads",
            "5",
            "`d_model` 32 is not divisible by `decoder_attention_heads` 5",
        ),
        (
            "tiny-marian",
            "decoder_vocab_size",
            "7",
            "a separate target vocabulary is not supported",
        ),
        (
            "tiny-marian",
            "decoder_start_token_id",
            "100000",
            "`decoder_start_token_id` 100000 is not a token of the vocabulary",
        ),
        (
            "tiny-marian",
            "decoder_layers",
            "0",
            "`decoder_layers` must be positive",
        ),
        (
            "tiny-distilbert",
            "n_layers",
            "0",
            "`n_layers` must be positive",
        ),
        (
            "tiny-roberta",
            "position_embedding_type",
            "\"relative_key\"",
            "relative_key",
        ),
    ] {
        let (e, msg, _) = family_err(name, &[(key, value)]);
        assert!(matches!(e, Error::Config { .. }), "{name} {key}: {msg}");
        assert!(msg.contains(says), "{name} {key}: {msg}");
    }
}

#[test]
fn a_family_checkpoint_missing_a_tensor_names_its_own_key() {
    for (name, key) in [
        ("tiny-gpt2", "h.1.attn.c_attn.weight"),
        ("tiny-gpt2", "ln_f.weight"),
        ("tiny-distilbert", "transformer.layer.1.ffn.lin2.weight"),
        ("tiny-distilbert", "transformer.layer.0.sa_layer_norm.bias"),
        ("tiny-roberta", "encoder.layer.1.attention.self.value.bias"),
        (
            "tiny-marian",
            "model.decoder.layers.1.encoder_attn.k_proj.weight",
        ),
        (
            "tiny-marian",
            "model.encoder.layers.0.final_layer_norm.bias",
        ),
    ] {
        let dir = model_dir(name);
        let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        // the tensor renamed, so the file still holds as many values as the config needs
        let views: Vec<(String, safetensors::tensor::TensorView)> = st
            .tensors()
            .into_iter()
            .map(|(k, v)| (if k == key { format!("{k}.renamed") } else { k }, v))
            .collect();
        let w = safetensors::serialize(views, None).unwrap();
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
        let e = Model::from_bytes(name, &read("config.json"), &w, &read("tokenizer.json"))
            .err()
            .expect("loading must fail");
        assert!(
            matches!(&e, Error::MissingTensor { key: k, .. } if k == key),
            "{name}: {e}"
        );
        assert!(e.to_string().contains(key), "{e}");
    }
}

#[test]
fn gpt2_small_loads_and_a_pass_over_the_attention_limit_is_refused_by_its_tokens() {
    // GPT-2 small's config: 12 layers × 12 heads at 1024 positions (151M values at full length)
    let config = br#"{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
        "n_embd": 768, "n_layer": 12, "n_head": 12, "activation_function": "gelu_new"}"#;
    let c = attnscope::families::read_config(config, "config.json").unwrap();
    assert_eq!(c.parameter_count() / 1_000_000, 124);
    // one text of 965 tokens fits the limit on what a pass keeps; 966 do not, nor two of 700
    let run = |b: usize, t: usize| {
        let input = attnscope::model::Encoded {
            tokens: vec![vec![]; b],
            ids: ndarray::Array2::zeros((b, t)),
            type_ids: ndarray::Array2::zeros((b, t)),
            valid: ndarray::Array2::from_elem((b, t), true),
            truncated: vec![false; b],
            offsets: vec![vec![]; b],
            word_ids: vec![vec![]; b],
            sentence_b_start: vec![None; b],
            texts: vec![vec![]; b],
        };
        let mask = Mask::from_kind(MaskKind::Causal, input.valid.view());
        attnscope::engine::check_input(&c, &input, &mask, &Default::default())
    };
    assert!(run(1, 965).is_ok());
    for (b, t) in [(1, 966), (2, 700)] {
        let msg = run(b, t).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("{b} text(s) of {t} tokens"))
                && msg.contains(&MAX_ATTENTION_VALUES.to_string())
                && msg.contains("this model takes at most"),
            "{msg}"
        );
    }
}
