//! The CPU engine against HF transformers (fixtures by `tools/make_fixtures.py`).

use crate::common::*;
use attnscope::engine::cpu;

fn cpu_forward(
    m: &attnscope::Model,
    input: &attnscope::model::Encoded,
    mask: &attnscope::Mask,
) -> attnscope::Result<attnscope::Trace> {
    cpu::forward(m, input, mask, &golden_options())
}

golden_tests!(cpu_forward);

#[test]
fn every_fixture_has_a_test() {
    // heads_*, roles_*, vw_*, la_*, flow_*, inside_* and marian_* are tests/golden_heads.rs' (the first five),
    // tests/golden_inside.rs' and tests/marian.rs'; the Llama family's (llama_*, qwen2_*, smollm2_*) tests/llama.rs';
    // those of checkpoints saved by transformers 5 (v5_*) tests/transformers5.rs'; Gemma 3
    // 270M's (gemma3_270m_*) tests/gemma3.rs'; the tiny Gemma 3's and Qwen3's GGUF files'
    // (gemma3_gguf_*, qwen3_gguf_*) tests/gguf_families.rs'; every token's text (token_texts)
    // tests/token_texts.rs'
    let elsewhere = [
        "heads_",
        "roles_",
        "vw_",
        "la_",
        "flow_",
        "inside_",
        "marian_",
        "llama_",
        "qwen2_",
        "smollm2_",
        "v5_",
        "gemma3_",
        "qwen3_",
        "token_texts",
    ];
    assert_cases_cover_fixtures(GOLDEN_CASES, |n| {
        !elsewhere.iter().any(|p| n.starts_with(p))
    });
}
