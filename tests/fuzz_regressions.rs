//! Every input the fuzz targets (`fuzz/`, nightly) crashed on, and hostile inputs written by
//! hand for each target, replayed on stable through the very same harness:
//! `tests/fixtures/fuzz-regressions/<target>/<what it is>`.

#[path = "../fuzz/harness.rs"]
mod harness;

use std::path::PathBuf;

use crate::common;

use attnscope::model::TextTokenizer;
use attnscope::Error;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = common::root()
        .join("tests/fixtures/fuzz-regressions")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|f| f.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no inputs", dir.display());
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// Runs each input of `target` through `run`, naming every one that panics.
fn replay(target: &str, run: fn(&[u8])) {
    let panicked: Vec<String> = inputs(target)
        .into_iter()
        .filter(|(_, bytes)| std::panic::catch_unwind(|| run(bytes)).is_err())
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(panicked.is_empty(), "these inputs panic: {panicked:?}");
}

#[test]
fn weights_inputs_no_longer_panic() {
    replay("weights", harness::weights);
}

#[test]
fn config_inputs_no_longer_panic() {
    replay("config", harness::config);
}

#[test]
fn forward_inputs_no_longer_panic() {
    replay("forward", harness::forward);
}

#[test]
fn tokenizer_inputs_no_longer_panic() {
    replay("tokenizer", harness::tokenizer);
}

#[test]
fn model_inputs_no_longer_panic() {
    replay("model", harness::model);
}

#[test]
fn gguf_inputs_no_longer_panic() {
    replay("gguf", harness::gguf);
}

#[test]
fn tokenizers_the_tokenizers_crate_panics_on_are_errors_naming_the_file_and_component() {
    for (path, bytes) in inputs("tokenizer") {
        let e = TextTokenizer::from_bytes(&bytes, "tokenizer.json", 64, Some(0))
            .err()
            .unwrap_or_else(|| panic!("{}: loads", path.display()));
        let msg = e.to_string();
        assert!(matches!(e, Error::Tokenizer { .. }), "{msg}");
        let name = path.file_name().unwrap().to_str().unwrap();
        let named = match name {
            n if n.starts_with("template-") => "post_processor TemplateProcessing",
            n if n.starts_with("precompiled-") => "normalizer Precompiled",
            _ => "tokenizer.json: tokenizer error:",
        };
        assert!(
            msg.starts_with("tokenizer.json: tokenizer error:") && msg.contains(named),
            "{name}: {msg}"
        );
    }
}
