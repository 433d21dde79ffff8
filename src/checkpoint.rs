//! A checkpoint loaded: its config, its family's weights (`crate::families`), its tokenizer and
//! its chat template, whatever bytes it came from (`crate::model` reads the files).

use ndarray::{Array2, Array3};

use crate::engine::ops::{Ops, Stack};
use crate::engine::ModelInputs;
use crate::error::{Error, Result};
use crate::families::Weights;
use crate::masks::MaskKind;
use crate::model::weights::ParamId;
use crate::model::{
    chat, config, gguf, gguf_tokenizer, limits, quant, weights, Config, Encoded, TextTokenizer,
    WeightsFile, CONFIG_FILE, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE,
};

/// A loaded checkpoint: what the engines need, independent of where the bytes came from.
pub struct Model {
    /// Unique to this load: what an engine made for the model knows it by.
    pub id: ParamId,
    pub name: String,
    pub config: Config,
    pub weights: Weights,
    pub tokenizer: TextTokenizer,
    /// The chat template an instruct model was trained with, where the checkpoint has one.
    pub chat: Option<chat::ChatTemplate>,
}

impl Model {
    /// Loads a checkpoint from the bytes of its three files. `name` prefixes the file names in
    /// errors. Every size is checked against its limit ([`limits`]) before anything is
    /// allocated from it. The weights are copied once, into a [`WeightsFile`]; [`Model::load`]
    /// takes one already filled.
    pub fn from_bytes(
        name: &str,
        config_json: &[u8],
        safetensors: &[u8],
        tokenizer_json: &[u8],
    ) -> Result<Self> {
        let weights = WeightsFile::from_bytes(safetensors, &file_name(name, WEIGHTS_FILE))?;
        Self::load(name, config_json, &weights, tokenizer_json)
    }

    /// Loads a checkpoint from its config and tokenizer bytes and its weights file, whose f32
    /// matrices the model then shares rather than copies (the browser's worker writes the file
    /// into a [`WeightsFile`] as it reads it). `name` prefixes the file names in errors.
    pub fn load(
        name: &str,
        config_json: &[u8],
        safetensors: &WeightsFile,
        tokenizer_json: &[u8],
    ) -> Result<Self> {
        let file = |f: &str| file_name(name, f);
        let config = Config::from_json(config_json, &file(CONFIG_FILE))?;
        let tensors = weights::Tensors::new(safetensors, &file(WEIGHTS_FILE))?;
        // the weights and the tokenizer are read side by side where there are threads; a
        // weights error comes first, as when they were read one after the other
        let (weights, tokenizer) = rayon::join(
            || Weights::load(&tensors, &config),
            || {
                TextTokenizer::from_bytes(
                    tokenizer_json,
                    &file(TOKENIZER_FILE),
                    config.max_tokens(),
                    config.pad_token_id,
                )
            },
        );
        let (weights, tokenizer) = (weights?, tokenizer?);
        Ok(Self {
            id: ParamId::new(),
            name: name.to_owned(),
            config,
            weights,
            tokenizer,
            chat: None,
        })
    }

    /// The model with the chat template of its `tokenizer_config.json` (`chat_template`, given
    /// `bos_token` and `eos_token`), when the file has one; `name` prefixes the file's name in
    /// errors.
    pub fn with_tokenizer_config(mut self, bytes: &[u8], name: &str) -> Result<Self> {
        let file = file_name(name, TOKENIZER_CONFIG_FILE);
        let bad = |msg: String| Error::Tokenizer {
            file: file.clone(),
            msg,
        };
        if bytes.len() > limits::MAX_CONFIG_BYTES {
            return Err(bad(limits::file_too_big(
                bytes.len() as u64,
                limits::MAX_CONFIG_BYTES,
            )));
        }
        let json: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        // a special token is a string, or an added token's `{"content": …}`
        let token = |key: &str| -> String {
            match &json[key] {
                serde_json::Value::String(s) => s.clone(),
                v => v["content"].as_str().unwrap_or_default().to_owned(),
            }
        };
        self.chat = match &json["chat_template"] {
            serde_json::Value::String(source) => Some(chat::ChatTemplate::new(
                source.as_str(),
                &token("bos_token"),
                &token("eos_token"),
                &file,
            )?),
            _ => None,
        };
        Ok(self)
    }

    /// Loads a GGUF file (a Llama-family model): its config from the metadata
    /// ([`Config::from_gguf`]), its tokenizer and chat template from `tokenizer.ggml.*` and
    /// `tokenizer.chat_template` (as HF's `from_pretrained(…, gguf_file=…)` builds them), its
    /// matrices kept in their ggml types inside `file`, which the model then shares. `name`
    /// names the file in errors.
    pub fn from_gguf(name: &str, file: &WeightsFile) -> Result<Self> {
        let g = gguf::GgufFile::parse(file.bytes(), name)?;
        let config = Config::from_gguf(&g)?;
        let shared: quant::SharedBytes = std::sync::Arc::new(file.clone());
        let (weights, tokenizer) = rayon::join(
            || {
                crate::families::llama::LlamaWeights::from_gguf(&g, &shared, &config)
                    .map(|w| Weights::Llama(w.into()))
            },
            || -> Result<_> {
                let mut t = gguf_tokenizer::GgufTokenizer::from_gguf(&g)?;
                // its tree as it is: the vocabulary and merges held once more at most
                let json = std::mem::take(&mut t.json);
                let text =
                    TextTokenizer::from_json(json, name, config.max_tokens(), config.pad_token_id)?;
                Ok((t, text))
            },
        );
        let (weights, (gt, tokenizer)) = (weights?, tokenizer?);
        let chat = match &gt.chat_template {
            Some(source) => {
                let token = |id: Option<u32>| id.map(|id| tokenizer.token(id)).unwrap_or_default();
                Some(chat::ChatTemplate::new(
                    source,
                    &token(gt.bos_token_id),
                    &token(gt.eos_token_id),
                    name,
                )?)
            }
            None => None,
        };
        Ok(Self {
            id: ParamId::new(),
            name: name.to_owned(),
            config,
            weights,
            tokenizer,
            chat,
        })
    }

    /// Loads a `.gguf` file, or a checkpoint folder ([`Model::from_dir`]: anything that is not
    /// a file, so that a missing folder's error names the file it lacks).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_path(path: impl AsRef<std::path::Path>) -> Result<Self> {
        use std::io::Read;
        let path = path.as_ref();
        if !path.is_file() {
            return Self::from_dir(path);
        }
        let shown = path.display().to_string();
        let io = |source| Error::Io {
            path: shown.clone(),
            source,
        };
        let mut f = std::fs::File::open(path).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        if len > limits::MAX_WEIGHTS_BYTES as u64 {
            return Err(Error::Gguf {
                file: shown.clone(),
                msg: limits::file_too_big(len, limits::MAX_WEIGHTS_BYTES),
            });
        }
        let mut w = WeightsFile::zeroed(len as usize, &shown)?;
        f.read_exact(w.bytes_mut()).map_err(io)?;
        Self::from_gguf(&shown, &w)
    }

    /// Loads a checkpoint folder holding `config.json`, `model.safetensors` and `tokenizer.json`.
    /// A file over its limit ([`limits`]) is refused by its size, before it is read.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_dir(dir: impl AsRef<std::path::Path>) -> Result<Self> {
        use std::io::Read;
        let dir = dir.as_ref();
        let read = |f: &str, limit: usize| {
            let path = dir.join(f);
            let io = |source| Error::Io {
                path: path.display().to_string(),
                source,
            };
            let file = std::fs::File::open(&path).map_err(io)?;
            let len = file.metadata().map_err(io)?.len();
            if len > limit as u64 {
                let (file, msg) = (path.display().to_string(), limits::file_too_big(len, limit));
                return Err(match f {
                    CONFIG_FILE => Error::Config { file, msg },
                    WEIGHTS_FILE => Error::Safetensors { file, msg },
                    _ => Error::Tokenizer { file, msg },
                });
            }
            // Never more than the limit and one byte, even from a file that grows or is not
            // a regular file; `load` refuses what is over.
            let mut bytes = Vec::with_capacity(len as usize);
            file.take(limit as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(io)?;
            Ok(bytes)
        };
        let (c, t) = (
            read(CONFIG_FILE, limits::MAX_CONFIG_BYTES)?,
            read(TOKENIZER_FILE, limits::MAX_TOKENIZER_BYTES)?,
        );
        if !dir.join(WEIGHTS_FILE).exists() {
            let has = |f: &str| dir.join(f).exists();
            if let Some(msg) = crate::model::missing_weights(has) {
                return Err(Error::Safetensors {
                    file: dir.join(WEIGHTS_FILE).display().to_string(),
                    msg,
                });
            }
        }
        let name = dir.display().to_string();
        let tokenizer_config = match std::fs::metadata(dir.join(TOKENIZER_CONFIG_FILE)) {
            Ok(m) if m.is_file() => Some(read(TOKENIZER_CONFIG_FILE, limits::MAX_CONFIG_BYTES)?),
            _ => None,
        };
        // a regular file is read straight into the weights' storage; one that is not, or that
        // changes size while it is read, is read as any other stream
        let path = dir.join(WEIGHTS_FILE);
        let shown = path.display().to_string();
        let in_place = || -> Result<Option<WeightsFile>> {
            let io = |source| Error::Io {
                path: shown.clone(),
                source,
            };
            let len = match std::fs::metadata(&path) {
                Ok(m) if m.is_file() && m.len() <= limits::MAX_WEIGHTS_BYTES as u64 => m.len(),
                _ => return Ok(None),
            };
            let mut file = std::fs::File::open(&path).map_err(io)?;
            let mut w = WeightsFile::zeroed(len as usize, &shown)?;
            match file.read_exact(w.bytes_mut()) {
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                r => r.map_err(io)?,
            }
            Ok((file.read(&mut [0u8]).map_err(io)? == 0).then_some(w))
        };
        let w = match in_place()? {
            Some(w) => w,
            None => {
                WeightsFile::from_bytes(&read(WEIGHTS_FILE, limits::MAX_WEIGHTS_BYTES)?, &shown)?
            }
        };
        let model = Self::load(&name, &c, &w, &t)?;
        match tokenizer_config {
            Some(bytes) => model.with_tokenizer_config(&bytes, &name),
            None => Ok(model),
        }
    }

    /// The stack the model's layers form: an encoder, or a decoder-only model's decoder.
    pub fn stack(&self) -> Stack {
        self.weights.stack()
    }

    /// The ids a pass over `input` reads (the family decides the positions).
    pub fn inputs(&self, input: &Encoded) -> ModelInputs {
        self.weights.inputs(input, &self.config)
    }

    /// The family's forward pass over `ops`; returns the model's output, `(B·T, D)`.
    pub fn forward<O: Ops>(&self, ops: &mut O) -> Result<O::X> {
        self.weights.forward(ops, &self.config)
    }

    /// The mask the model was trained with: the no-peek mask (with padding) for a decoder-only
    /// model, padding for an encoder.
    pub fn own_mask(&self) -> MaskKind {
        if self.config.architecture.kind == config::ModelKind::Decoder {
            MaskKind::Causal
        } else {
            MaskKind::Padding
        }
    }

    /// The classification head's logits from the last hidden states `(B, T, D)`, when the
    /// checkpoint has one: `(B, num_labels)`.
    pub fn logits(&self, hidden: &Array3<f32>) -> Option<Array2<f32>> {
        self.weights.logits(hidden)
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

/// `name/file`, or `file` alone for a nameless checkpoint: how errors name a checkpoint's files.
fn file_name(name: &str, file: &str) -> String {
    if name.is_empty() {
        file.to_owned()
    } else {
        format!("{name}/{file}")
    }
}
