//! Bad input gets a clear error naming what is at fault, never a panic.

use std::collections::HashMap;
use std::path::Path;

use crate::common::*;
use attnscope::engine::{cpu, TraceOptions};
use attnscope::{Error, Mask, MaskKind, Model};
use safetensors::tensor::TensorView;

/// A copy of the tiny checkpoint in a temporary folder, with `edit` applied to its files.
fn broken_copy(edit: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(model_dir("tiny-bert").join(f), dir.path().join(f)).unwrap();
    }
    edit(dir.path());
    dir
}

fn load_err(dir: &Path) -> (Error, String) {
    let e = Model::from_dir(dir).err().expect("loading must fail");
    let msg = e.to_string();
    (e, msg)
}

/// Rewrites model.safetensors, letting `f` change the tensors (name → (dtype, shape, bytes)).
fn rewrite_tensors(
    dir: &Path,
    f: impl FnOnce(&mut HashMap<String, (safetensors::Dtype, Vec<usize>, Vec<u8>)>),
) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut map: HashMap<_, _> = st
        .tensors()
        .into_iter()
        .map(|(k, v)| (k, (v.dtype(), v.shape().to_vec(), v.data().to_vec())))
        .collect();
    f(&mut map);
    let views: Vec<(String, TensorView)> = map
        .iter()
        .map(|(k, (d, s, b))| (k.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn empty_and_whitespace_text_are_errors() {
    let m = model("tiny-bert");
    for text in ["", "   ", "\n\t "] {
        let e = m.tokenizer.encode(&[text], None).unwrap_err();
        assert!(matches!(e, Error::EmptyText { index: 0 }), "{e}");
    }
    let e = m.tokenizer.encode(&["fine", " "], None).unwrap_err();
    assert!(e.to_string().contains("text 1 is empty"), "{e}");
    let e = m.tokenizer.encode(&["fine"], Some("  ")).unwrap_err();
    assert!(matches!(e, Error::EmptyText { .. }), "{e}");
    assert!(m.tokenizer.encode(&[], None).is_err());
}

#[test]
fn text_beyond_512_tokens_is_truncated_and_reported() {
    let m = model("minilm");
    let long = "attention ".repeat(700);
    let input = m.tokenizer.encode(&[long.as_str(), "short"], None).unwrap();
    assert_eq!(input.len(), 512);
    assert_eq!(input.truncated, vec![true, false]);
    assert_eq!(input.tokens[0].last().unwrap(), "[SEP]");
    let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
    let trace = cpu::forward(m, &input, &mask, &TraceOptions::default()).unwrap();
    assert_eq!(trace.attention.dim(), (2, 6, 12, 512, 512));
    // just under the limit: nothing is cut
    let fits = "attention ".repeat(510);
    assert_eq!(
        m.tokenizer
            .encode(&[fits.as_str()], None)
            .unwrap()
            .truncated,
        vec![false]
    );
}

#[test]
fn unknown_characters_become_unk_and_still_run() {
    let m = model("minilm");
    let input = m.tokenizer.encode(&["😀 \u{1F9EC} ok"], None).unwrap();
    assert!(
        input.tokens[0].iter().any(|t| t == "[UNK]"),
        "{:?}",
        input.tokens
    );
    let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
    assert!(cpu::forward(m, &input, &mask, &TraceOptions::default()).is_ok());
}

#[test]
fn a_missing_file_is_named() {
    let dir = broken_copy(|d| std::fs::remove_file(d.join("model.safetensors")).unwrap());
    let (e, msg) = load_err(dir.path());
    assert!(matches!(e, Error::Io { .. }), "{msg}");
    assert!(msg.contains("model.safetensors"), "{msg}");
    let (_, msg) = load_err(Path::new("/nonexistent/model/dir"));
    assert!(msg.contains("/nonexistent/model/dir/config.json"), "{msg}");
}

#[test]
fn a_truncated_safetensors_file_is_an_error() {
    let dir = broken_copy(|d| {
        let p = d.join("model.safetensors");
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    });
    let (e, msg) = load_err(dir.path());
    assert!(matches!(e, Error::Safetensors { .. }), "{msg}");
    assert!(msg.contains("model.safetensors"), "{msg}");
}

#[test]
fn a_corrupt_safetensors_file_is_an_error() {
    for junk in [
        b"not a safetensors file at all".to_vec(),
        vec![],
        vec![0xff; 64],
    ] {
        let dir = broken_copy(|d| std::fs::write(d.join("model.safetensors"), &junk).unwrap());
        let (e, msg) = load_err(dir.path());
        assert!(matches!(e, Error::Safetensors { .. }), "{msg}");
    }
}

#[test]
fn heads_that_do_not_divide_the_hidden_size_are_an_error() {
    let dir = broken_copy(|d| {
        let p = d.join("config.json");
        let s = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            &p,
            s.replace("\"num_attention_heads\": 3", "\"num_attention_heads\": 5"),
        )
        .unwrap();
    });
    let (e, msg) = load_err(dir.path());
    assert!(matches!(e, Error::Config { .. }), "{msg}");
    assert!(
        msg.contains("hidden_size")
            && msg.contains("24")
            && msg.contains('5')
            && msg.contains("config.json"),
        "{msg}"
    );
}

#[test]
fn a_malformed_config_names_the_field() {
    let dir = broken_copy(|d| {
        let p = d.join("config.json");
        let s = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            &p,
            // an activation the engines do not compute (swish is SiLU now: Marian's)
            s.replace("\"hidden_act\": \"gelu\"", "\"hidden_act\": \"tanh\""),
        )
        .unwrap();
    });
    let (_, msg) = load_err(dir.path());
    assert!(msg.contains("tanh") && msg.contains("config.json"), "{msg}");
    let dir = broken_copy(|d| std::fs::write(d.join("config.json"), "{").unwrap());
    assert!(matches!(load_err(dir.path()).0, Error::Config { .. }));
}

#[test]
fn a_tensor_of_the_wrong_shape_names_key_and_both_shapes() {
    let key = "bert.encoder.layer.1.attention.self.key.weight";
    let dir = broken_copy(|d| {
        rewrite_tensors(d, |m| {
            let (dt, _, bytes) = m.remove(key).unwrap();
            m.insert(key.into(), (dt, vec![12, 48], bytes));
        })
    });
    let (e, msg) = load_err(dir.path());
    assert!(matches!(e, Error::TensorShape { .. }), "{msg}");
    assert!(
        msg.contains(key) && msg.contains("[12, 48]") && msg.contains("[24, 24]"),
        "{msg}"
    );
}

#[test]
fn a_missing_tensor_is_named() {
    let key = "bert.encoder.layer.0.output.LayerNorm.bias";
    let dir = broken_copy(|d| rewrite_tensors(d, |m| drop(m.remove(key))));
    let (e, msg) = load_err(dir.path());
    assert!(
        matches!(e, Error::MissingTensor { .. }) && msg.contains(key),
        "{msg}"
    );
}

#[test]
fn an_unsupported_dtype_is_named() {
    let key = "bert.embeddings.LayerNorm.weight";
    let dir = broken_copy(|d| {
        rewrite_tensors(d, |m| {
            m.insert(key.into(), (safetensors::Dtype::I16, vec![24], vec![0; 48]));
        })
    });
    let (e, msg) = load_err(dir.path());
    assert!(
        matches!(e, Error::TensorDtype { .. }) && msg.contains(key) && msg.contains("I16"),
        "{msg}"
    );
}

#[test]
fn a_corrupt_tokenizer_is_an_error() {
    let dir = broken_copy(|d| std::fs::write(d.join("tokenizer.json"), "{\"model\": 3}").unwrap());
    let (e, msg) = load_err(dir.path());
    assert!(
        matches!(e, Error::Tokenizer { .. }) && msg.contains("tokenizer.json"),
        "{msg}"
    );
}

#[test]
fn a_tokenizer_from_another_model_is_caught_before_running() {
    // MiniLM's tokenizer with the tiny model: ids beyond the tiny vocabulary
    let tiny = model("tiny-bert");
    let input = model("minilm")
        .tokenizer
        .encode(&["time flies like an arrow"], None)
        .unwrap();
    let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
    let e = cpu::forward(tiny, &input, &mask, &TraceOptions::default()).unwrap_err();
    assert!(e.to_string().contains("vocab_size 77"), "{e}");
}

#[test]
fn loading_from_bytes_equals_loading_from_a_folder() {
    let d = model_dir("tiny-bert");
    let read = |f: &str| std::fs::read(d.join(f)).unwrap();
    let m = Model::from_bytes(
        "tiny",
        &read("config.json"),
        &read("model.safetensors"),
        &read("tokenizer.json"),
    )
    .unwrap();
    assert!(bert(&m).unwrap().classifier.is_some());
    let folder = model("tiny-bert");
    assert_eq!(
        bert(&m).unwrap().layers[1].output.weight,
        bert(folder).unwrap().layers[1].output.weight
    );
    let e = Model::from_bytes("upload", b"{}", &[], &[]).err().unwrap();
    assert!(e.to_string().contains("upload/config.json"), "{e}");
}

#[test]
fn a_sharded_or_pytorch_only_checkpoint_is_named_as_such() {
    let dir = broken_copy(|d| {
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        std::fs::write(d.join("model.safetensors.index.json"), "{}").unwrap();
    });
    let (e, msg) = load_err(dir.path());
    assert!(matches!(e, Error::Safetensors { .. }), "{msg}");
    assert!(
        msg.contains("sharded") && msg.contains("model.safetensors.index.json"),
        "{msg}"
    );
    let dir = broken_copy(|d| {
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        std::fs::write(d.join("pytorch_model.bin"), "not read").unwrap();
    });
    let (_, msg) = load_err(dir.path());
    assert!(
        msg.contains("pytorch_model.bin") && msg.contains("convert"),
        "{msg}"
    );
    // with neither, the missing file itself is named
    let dir = broken_copy(|d| std::fs::remove_file(d.join("model.safetensors")).unwrap());
    let (e, msg) = load_err(dir.path());
    assert!(matches!(e, Error::Io { .. }), "{msg}");
    assert!(msg.contains("model.safetensors"), "{msg}");
}

#[test]
fn an_unsupported_model_type_is_named_with_the_supported_ones() {
    let dir = broken_copy(|d| {
        let p = d.join("config.json");
        let s = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            &p,
            s.replace("\"model_type\": \"bert\"", "\"model_type\": \"t5\""),
        )
        .unwrap();
    });
    let (e, msg) = load_err(dir.path());
    assert!(matches!(e, Error::Config { .. }), "{msg}");
    for part in [
        "\"t5\"",
        "not supported",
        "bert",
        "roberta",
        "distilbert",
        "gpt2",
        "llama",
        "qwen2",
    ] {
        assert!(msg.contains(part), "{part}: {msg}");
    }
}
