//! A checkpoint's files read: `config.json`, `model.safetensors` and `tokenizer.json` (and an
//! instruct model's `chat_template.jinja` or `tokenizer_config.json` for its chat template), or
//! one GGUF file. What they
//! make once loaded, with its family's weights, is a [`crate::Model`] (`crate::checkpoint`).

pub mod chat;
pub mod config;
pub mod gguf;
pub mod gguf_tokenizer;
pub mod limits;
pub mod quant;
pub mod rope;
pub mod tokenizer;
pub mod weights;

pub use config::{Activation, Config, Family, LayerNormOrder};
pub use tokenizer::{Encoded, TextTokenizer};
pub use weights::WeightsFile;

/// The three files of a checkpoint folder.
pub const CONFIG_FILE: &str = "config.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// Beside them, where an instruct model has one: its chat template (before transformers 5), and
/// the special tokens the template is given.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
/// The chat template as transformers 5 saves it.
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";

/// A sharded checkpoint's index, beside no `model.safetensors`.
pub const SHARDED_INDEX_FILE: &str = "model.safetensors.index.json";
/// PyTorch's pickled weights, which attnscope does not read.
pub const PYTORCH_FILE: &str = "pytorch_model.bin";

/// Why a checkpoint has no `model.safetensors`, when the files it has instead say so (`has`: is
/// this file there): a sharded checkpoint, or PyTorch's weights alone.
pub fn missing_weights(has: impl Fn(&str) -> bool) -> Option<String> {
    if has(SHARDED_INDEX_FILE) {
        Some(format!(
            "the checkpoint is sharded ({SHARDED_INDEX_FILE} and its shards), which attnscope \
             does not read: save it as one {WEIGHTS_FILE} (save_pretrained(..., \
             max_shard_size=\"100GB\"))"
        ))
    } else if has(PYTORCH_FILE) {
        Some(format!(
            "the checkpoint has only {PYTORCH_FILE} (PyTorch's pickle), which attnscope does not \
             read: convert it to {WEIGHTS_FILE} (save_pretrained(..., safe_serialization=True))"
        ))
    } else {
        None
    }
}
