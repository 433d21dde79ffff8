//! The `gguf` fuzz target: see `harness::gguf`.
#![no_main]

#[allow(dead_code)] // every target uses one of the harness's functions
#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::gguf(data));
