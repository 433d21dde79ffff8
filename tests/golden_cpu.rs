//! The CPU engine against HF transformers (fixtures by `tools/make_fixtures.py`).
#![cfg(not(target_arch = "wasm32"))] // native tests; the browser's are in tests/web.rs

mod common;

use attnscope::engine::{cpu, TraceOptions};
use common::*;

fn cpu_forward(
    m: &attnscope::Model,
    input: &attnscope::model::Encoded,
    mask: &attnscope::Mask,
) -> attnscope::Result<attnscope::Trace> {
    cpu::forward(m, input, mask, &TraceOptions::default())
}

golden_tests!(cpu_forward);

#[test]
fn every_fixture_has_a_test() {
    let dir = root().join("tests/fixtures/golden");
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(str::to_owned)
        })
        // tests/golden_heads.rs and tests/golden_inside.rs
        .filter(|name| !name.starts_with("heads_") && !name.starts_with("inside_"))
        .collect();
    found.sort();
    let mut listed: Vec<String> = GOLDEN_CASES.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed);
}
