//! The CPU engine on `ndarray`: the fallback and the reference for the GPU engine.

pub mod attention;
pub mod exec;
pub mod forward;
pub mod ops;
pub mod prefix;

pub use attention::{
    dot_product_attention, head_attention, head_attention_into, head_keys, multi_head_attention,
    scaled_dot_product_attention, Attention, AttentionLinears, MultiHeadOutput, Scores,
};
pub use exec::{CpuOps, CpuX};
pub use forward::forward;
pub(crate) use forward::pass_on_the_pool;
pub use ops::{exp_nonpositive, sum_exp};
pub use prefix::{forward_reusing, Prefixes, Reused, MAX_KEPT_BYTES, MAX_PREFIX_TOKENS};
