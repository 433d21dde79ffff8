//! The native integration tests as one binary: one link, and the checkpoints and golden
//! fixtures `common` caches loaded once for every suite. Each module is a suite (its file in
//! tests/); `tests/limits.rs` (its own allocator counts each thread's peak) and `tests/web.rs`
//! (wasm32, in a browser) are binaries of their own.
#![cfg(not(target_arch = "wasm32"))]

#[macro_use]
mod common;

mod cli;
mod dates;
mod errors;
mod families;
mod fuzz_regressions;
mod gemma3;
mod gguf;
mod gguf_families;
mod golden_cpu;
mod golden_gpu;
mod golden_heads;
mod golden_inside;
mod gpu_kernels;
mod gpu_vs_cpu;
mod llama;
mod llama_gpu;
mod marian;
mod properties;
mod shaders;
mod token_texts;
mod transformers5;
mod weights_file;
