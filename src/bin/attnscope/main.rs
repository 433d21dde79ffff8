//! The `attnscope` command line.
//!
//! ```text
//! attnscope attention --model DIR [--backend cpu] [--mask padding|causal|none] [--pair TEXT_B] [--hidden] [--scores]
//!                     [--head-metrics] [--rollout] [--sentence-embedding] [--head-mask L:H[,L:H…]] [--no-scale]
//!                     [--hidden-states] [--layer-trace LAYER] [--cross-attention LAYER] [--] TEXT...
//! attnscope bench --model DIR [--backend cpu] [--lengths 16,128,512] [--iters N]
//! ```
//! Results are one JSON object on stdout; errors go to stderr with a non-zero exit.

#[cfg(not(target_arch = "wasm32"))]
mod bench;
#[cfg(not(target_arch = "wasm32"))]
mod run;

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    run::main()
}
