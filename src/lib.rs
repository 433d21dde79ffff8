//! attnscope: see how transformer attention works.
//!
//! * [`model`]: a checkpoint's files read (config, weights, tokenizer; or one GGUF file), from a
//!   folder or from bytes.
//! * [`checkpoint`]: a checkpoint loaded, its family's weights in it ([`Model`]).
//! * [`families`]: each model family once: its config, its weights by HF's key names and its
//!   forward pass over the engines' operations.
//! * [`linalg`]: the CPU's numeric kernels (matrix products, dot products), below the model's
//!   files and the engines.
//! * [`masks`]: padding, causal (no-peek) and explicit masks, composed as values.
//! * [`engine`]: the operations a forward pass is written in, traced layer by layer and head by
//!   head: on the CPU (`ndarray`, the reference) or the GPU (WGSL compute shaders through
//!   `wgpu`), chosen by a `Runner`.
//! * [`analysis`]: reading the heads: per-head summaries and attention rollout.
//! * [`report`]: the one result contract: the JSON the CLI prints, the page's run.
//! * `wasm`: the browser API (`#[wasm_bindgen]`), compiled for wasm32 only.

pub mod analysis;
pub mod checkpoint;
pub mod engine;
pub mod error;
pub mod families;
pub mod linalg;
pub mod masks;
pub mod model;
pub mod report;
#[cfg(all(target_arch = "wasm32", feature = "gpu"))]
pub mod wasm;

pub use checkpoint::Model;
pub use engine::{Trace, TraceOptions};
pub use error::{Error, Result};
pub use masks::{Mask, MaskKind};
