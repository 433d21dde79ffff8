//! The `attnscope` command line.
//!
//! ```text
//! attnscope attention --model DIR [--backend cpu] [--mask padding|causal|none] [--pair TEXT_B] [--hidden] [--scores]
//!                     [--head-metrics] [--head-roles --period N] [--rollout] [--sentence-embedding] [--head-mask L:H[,L:H…]] [--no-scale]
//!                     [--hidden-states] [--layer-trace LAYER] [--cross-attention LAYER] [--] TEXT...
//! attnscope bench --model DIR [--backend cpu] [--lengths 16,128,512] [--iters N] [--threads N]
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
    keep_freed_memory();
    run::main()
}

/// A forward pass allocates tens of MB of attention arrays and frees them: glibc would hand
/// each back to the kernel (`mmap`/`munmap` above its threshold, or trimming the heap) and the
/// next pass would pay for fresh zeroed pages, a sixth of a pass at 512 tokens. Serve every
/// allocation from the heap and keep freed memory for reuse instead, as the browser's wasm
/// memory does.
///
/// One arena: with threads the pass runs on one of rayon's (`cpu/encoder.rs`, `on_the_pool`),
/// and a thread other than the first allocates from an arena of its own, whose heaps are at
/// most 64 MB; a larger block there (the 75 MB of probabilities at 512 tokens) is mapped afresh
/// whatever `M_MMAP_MAX` says. At 512 tokens on two threads that took 121–148 ms a pass, and
/// 96–106 with one arena (`attnscope bench --lengths 512 --threads 2`, alternating).
#[cfg(not(target_arch = "wasm32"))]
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0); // no mmap for large blocks
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX); // never trim the heap's top
        libc::mallopt(libc::M_ARENA_MAX, 1); // every thread allocates from the main heap
    }
}
