//! A BERT-family checkpoint: `config.json`, `model.safetensors` and `tokenizer.json`.

pub mod config;
pub mod tokenizer;
pub mod weights;

pub use config::{Activation, Config, LayerNormOrder};
pub use tokenizer::{Encoded, TextTokenizer};
pub use weights::BertWeights;

use crate::error::{Error, Result};

/// The three files of a checkpoint folder.
pub const CONFIG_FILE: &str = "config.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// A loaded checkpoint: what the engines need, independent of where the bytes came from.
pub struct Model {
    pub name: String,
    pub config: Config,
    pub weights: BertWeights,
    pub tokenizer: TextTokenizer,
}

impl Model {
    /// Loads a checkpoint from the bytes of its three files (the browser hands us bytes).
    /// `name` prefixes the file names in errors.
    pub fn from_bytes(
        name: &str,
        config_json: &[u8],
        safetensors: &[u8],
        tokenizer_json: &[u8],
    ) -> Result<Self> {
        let file = |f: &str| {
            if name.is_empty() {
                f.to_owned()
            } else {
                format!("{name}/{f}")
            }
        };
        let config = Config::from_json(config_json, &file(CONFIG_FILE))?;
        if let Some(t) = &config.model_type {
            if t.contains("roberta") || t.contains("distilbert") {
                return Err(Error::Config {
                    file: file(CONFIG_FILE),
                    msg: format!("model_type {t:?} is not a BERT layout (supported: bert and BERT-shaped models such as MiniLM)"),
                });
            }
        }
        let tensors = weights::Tensors::new(safetensors, &file(WEIGHTS_FILE))?;
        let weights = BertWeights::load(&tensors, &config)?;
        let tokenizer = TextTokenizer::from_bytes(
            tokenizer_json,
            &file(TOKENIZER_FILE),
            config.max_position_embeddings,
            config.pad_token_id,
        )?;
        Ok(Self {
            name: name.to_owned(),
            config,
            weights,
            tokenizer,
        })
    }

    /// Loads a checkpoint folder holding `config.json`, `model.safetensors` and `tokenizer.json`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_dir(dir: impl AsRef<std::path::Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let read = |f: &str| {
            let path = dir.join(f);
            std::fs::read(&path).map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })
        };
        let (c, w, t) = (
            read(CONFIG_FILE)?,
            read(WEIGHTS_FILE)?,
            read(TOKENIZER_FILE)?,
        );
        let name = dir.display().to_string();
        Self::from_bytes(&name, &c, &w, &t)
    }

    /// Name shown to users: the folder's last component.
    pub fn short_name(&self) -> &str {
        self.name
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(&self.name)
    }
}
