//! The one error type of the crate. It is converted to a `JsError` only at the
//! `#[wasm_bindgen]` boundary, and printed to stderr by the CLI.

/// Everything that can go wrong, each naming the file, tensor key or shape at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{file}: invalid config: {msg}")]
    Config { file: String, msg: String },

    #[error("{file}: not a valid safetensors file: {msg}")]
    Safetensors { file: String, msg: String },

    #[error("{file}: not a GGUF file attnscope reads: {msg}")]
    Gguf { file: String, msg: String },

    #[error("{file}: missing tensor `{key}`")]
    MissingTensor { file: String, key: String },

    #[error("{file}: tensor `{key}` has shape {found:?}, expected {expected:?}")]
    TensorShape {
        file: String,
        key: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },

    #[error("{file}: tensor `{key}` has dtype {dtype}, expected F32, F16 or BF16")]
    TensorDtype {
        file: String,
        key: String,
        dtype: String,
    },

    #[error("{file}: tokenizer error: {msg}")]
    Tokenizer { file: String, msg: String },

    #[error("text {index} is empty (or only whitespace): there is nothing to attend to")]
    EmptyText { index: usize },

    #[error(
        "text {index} has no tokens: the tokenizer drops every character of it (control or zero-width characters)"
    )]
    NoTokens { index: usize },

    #[error("invalid input: {0}")]
    Input(String),

    #[error("shape mismatch in {what}: expected {expected:?}, found {found:?}")]
    Shape {
        what: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },

    #[error("GPU: {0}")]
    Gpu(String),

    /// A pass asked to stop ([`crate::engine::progress::PassProgress::ask_to_stop`]) before
    /// its layer `layer` (0-based: the layers it had run).
    #[error("stopped as asked, after {layer} of {layers} layers")]
    Stopped { layer: usize, layers: usize },

    /// A family asked an engine for what it does not hold (a bug, reported rather than a panic).
    #[error("engine: {0}")]
    Engine(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
