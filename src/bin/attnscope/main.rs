//! The `attnscope` command line.
//!
//! ```text
//! attnscope attention --model DIR [--backend cpu] [--mask padding|causal|none] [--pair TEXT_B] [--hidden] [--scores] [--] TEXT...
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
