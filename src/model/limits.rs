//! Every size limit on what a checkpoint or a user may hand us, in one place.
//!
//! The page loads model files a visitor picks or a URL anyone can put in a link, so a file's
//! header must never decide how much memory we allocate. Each limit is checked before the
//! allocation it guards; going over one is an error naming the file, key or shape at fault and
//! the limit. The limits are generous for the families attnscope runs (BERT-large, 24 layers ×
//! 16 heads, hidden 1024, 335M parameters, fits; so does GPT-2 small) and far below what would
//! exhaust a browser tab's 4 GiB wasm32 address space.

/// Largest `config.json` accepted, in bytes. Real ones are under 2 KiB; `id2label` of a
/// classifier with thousands of labels stays far below this.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// Largest `tokenizer.json` accepted, in bytes. BERT's is 0.7 MB, multilingual vocabularies
/// (250k tokens) about 17 MB; parsing one takes several times its size in memory.
pub const MAX_TOKENIZER_BYTES: usize = 32 << 20;

/// Largest `model.safetensors` accepted, in bytes: [`MAX_PARAMETERS`] at 4 bytes (F32) plus a
/// header of at most [`MAX_SAFETENSORS_HEADER_BYTES`].
pub const MAX_WEIGHTS_BYTES: usize = 4 * MAX_PARAMETERS + MAX_SAFETENSORS_HEADER_BYTES;

/// Largest JSON header of a safetensors file, in bytes (the safetensors crate allows 100 MB).
/// BERT-large's header, 390 tensors, is about 40 KiB.
pub const MAX_SAFETENSORS_HEADER_BYTES: usize = 1 << 20;

/// Most parameters a config may imply (embeddings, every layer, pooler), counted before any
/// tensor is read. Every parameter becomes an `f32`, so this bounds the weights' memory at 1.6 GB.
pub const MAX_PARAMETERS: usize = 400_000_000;

/// Largest `vocab_size` (multilingual BERT-family models reach 250k).
pub const MAX_VOCAB_SIZE: usize = 1 << 20;

/// Largest `hidden_size` (BERT-large: 1024).
pub const MAX_HIDDEN_SIZE: usize = 8192;

/// Largest `intermediate_size`, the feed-forward width (BERT-large: 4096).
pub const MAX_INTERMEDIATE_SIZE: usize = 32768;

/// Most encoder layers, `num_hidden_layers` (BERT-large: 24).
pub const MAX_LAYERS: usize = 128;

/// Most attention heads per layer, `num_attention_heads` (BERT-large: 16).
pub const MAX_HEADS: usize = 256;

/// Largest `max_position_embeddings`, hence the longest text in tokens (BERT: 512).
pub const MAX_POSITIONS: usize = 8192;

/// Largest `type_vocab_size`, the number of segment types (BERT: 2).
pub const MAX_TYPE_VOCAB_SIZE: usize = 1024;

/// Most attention probabilities one forward pass may keep, `B × L × H × T²` (every one is kept,
/// and its score too when asked for): checked before a pass runs. BERT-large's batch of four at
/// 512 tokens keeps 100M (400 MB of `f32`); GPT-2 small keeps one text of up to 965 tokens.
pub const MAX_ATTENTION_VALUES: usize = 1 << 27;

/// Most queries and keys a long text's pass keeps (`B·L·T·(H + H_kv)·d`, each layer's as its
/// attention read them, in place of the probabilities: 768 MiB of `f32`): SmolLM2-135M up to
/// 8,738 tokens, past its 8,192 positions.
pub const MAX_QUERIES_KEYS: usize = 3 << 26;

/// Most attention probabilities one text at the model's full length could make,
/// `num_hidden_layers × num_attention_heads × max_position_embeddings²`, checked when the config is
/// read: GPT-2 small at its 1024 positions makes 151M. A pass over fewer tokens, within
/// [`MAX_ATTENTION_VALUES`], runs.
pub const MAX_MODEL_ATTENTION_VALUES: usize = 1 << 28;

/// Most texts in one batch: what the page's batch mode takes. With [`MAX_ATTENTION_VALUES`]
/// it bounds the attention kept by one forward pass.
pub const MAX_BATCH: usize = 4;

/// Longest text given to the tokenizer, in bytes. Longer text is cut (at a character boundary)
/// before tokenising and reported as truncated. Ordinary text reaches 512 tokens within about
/// 3 KB, so the cut changes the tokens only of text that is mostly whitespace or very long words.
pub const MAX_TEXT_BYTES: usize = 256 << 10;

/// Most tensors a GGUF file may list (a 70B Llama has 723; mixtures of experts a few thousand).
pub const MAX_GGUF_TENSORS: usize = 1 << 16;

/// Most metadata keys a GGUF file may hold (real ones: 20–50).
pub const MAX_GGUF_KEYS: usize = 1 << 16;

/// Longest metadata key or tensor name in a GGUF file, in bytes (ggml's names: 64).
pub const MAX_GGUF_NAME_BYTES: usize = 1 << 16;

/// Most elements in one GGUF metadata array: a vocabulary's tokens, scores, types or merges
/// (Gemma 3's 262k tokens; the largest vocabularies are near 10⁶).
pub const MAX_GGUF_ARRAY_LEN: usize = 1 << 24;

/// Deepest nesting of GGUF metadata arrays (real files nest none): each level of a hostile
/// file's arrays would otherwise be a level of recursion.
pub const MAX_GGUF_ARRAY_DEPTH: usize = 4;

/// Longest GGUF header, its metadata and tensor list, in bytes: read and checked before the
/// rest of the file is (Gemma 3's, with a 262k-token vocabulary, is 6.2 MB; Llama 3's, with its
/// 280k merges, about 8 MB).
pub const MAX_GGUF_HEADER_BYTES: usize = 16 << 20;

/// Most memory a GGUF header's parsed metadata may take, in bytes, whatever its arrays claim
/// (Gemma 3's vocabulary takes about 15 MB). With [`MAX_GGUF_HEADER_BYTES`] it bounds what a
/// refused or hostile file costs before it is refused.
pub const MAX_GGUF_METADATA_BYTES: usize = 32 << 20;

/// Most dimensions of a GGUF tensor (`GGML_MAX_DIMS`).
pub const MAX_GGUF_DIMS: usize = 4;

/// The message for a file over its size limit, the same for every file and every path to it.
pub(crate) fn file_too_big(len: u64, limit: usize) -> String {
    format!("the file is {len} bytes, over the limit of {limit}")
}
