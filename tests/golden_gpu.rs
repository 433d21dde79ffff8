//! The GPU engine (WGSL through wgpu; on lavapipe where there is no GPU) against HF
//! transformers and against the CPU engine.

use crate::common::*;
use attnscope::engine::{cpu, TraceOptions};
use attnscope::Mask;

golden_tests!(gpu_forward);

#[test]
fn gpu_scores_equal_cpu_scores() {
    let m = model("minilm");
    let input = m
        .tokenizer
        .encode(&["time flies like an arrow", "hi"], None)
        .unwrap();
    let mask = Mask::from_kind(attnscope::MaskKind::Causal, input.valid.view());
    let gpu = gpu_forward(m, &input, &mask).unwrap();
    let cpu = cpu::forward(m, &input, &mask, &TraceOptions::with_scores()).unwrap();
    let d = max_abs_diff(
        gpu.scores.unwrap().view().into_dyn(),
        cpu.scores.unwrap().view().into_dyn(),
    );
    assert!(d < 1e-4, "scores differ by {d}");
}
