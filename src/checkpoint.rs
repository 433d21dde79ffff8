//! A checkpoint loaded: its config, its family's weights (`crate::families`), its tokenizer and
//! its chat template, whatever bytes it came from (`crate::model` reads the files).

use crate::engine::network::{Loaded, Network};
use crate::error::{Error, Result};
use crate::families::Weights;
use crate::masks::MaskKind;
use crate::model::tokenizer::Specials;
use crate::model::weights::ParamId;
use crate::model::{
    chat, config, gguf, gguf_tokenizer, limits, quant, weights, Config, Encoded, TextTokenizer,
    WeightsFile, CHAT_TEMPLATE_FILE, CONFIG_FILE, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE,
    WEIGHTS_FILE,
};

/// The files beside a checkpoint folder's three where an instruct model keeps its chat template,
/// each as its bytes where the folder has it.
#[derive(Debug, Default, Clone, Copy)]
pub struct ChatFiles<'a> {
    /// `tokenizer_config.json`: the template before transformers 5 (`chat_template`), and the
    /// `bos_token` and `eos_token` a template is given.
    pub tokenizer_config: Option<&'a [u8]>,
    /// `chat_template.jinja`: the template as transformers 5 saves it.
    pub chat_template: Option<&'a [u8]>,
}

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
        let config = crate::families::read_config(config_json, &file(CONFIG_FILE))?;
        let tensors = weights::Tensors::new(safetensors, &file(WEIGHTS_FILE))?;
        // the weights and the tokenizer are read side by side where there are threads; a
        // weights error comes first, as when they were read one after the other
        let (weights, tokenizer) = rayon::join(
            || crate::families::load_weights(&tensors, &config),
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

    /// The model with the chat template its folder keeps (`chat_template.jinja`, as transformers
    /// 5 saves it, or `tokenizer_config.json`'s `chat_template`, as before), given the
    /// `bos_token` and `eos_token` of `tokenizer_config.json`. `name` prefixes the files' names
    /// in errors. A folder whose two templates differ is refused, naming both files.
    pub fn with_chat_files(mut self, files: ChatFiles, name: &str) -> Result<Self> {
        let config_file = file_name(name, TOKENIZER_CONFIG_FILE);
        let jinja_file = file_name(name, CHAT_TEMPLATE_FILE);
        let bad = |file: &str, msg: String| Error::Tokenizer {
            file: file.to_owned(),
            msg,
        };
        for (file, bytes) in [
            (&config_file, files.tokenizer_config),
            (&jinja_file, files.chat_template),
        ] {
            if let Some(b) = bytes.filter(|b| b.len() > limits::MAX_CONFIG_BYTES) {
                let msg = limits::file_too_big(b.len() as u64, limits::MAX_CONFIG_BYTES);
                return Err(bad(file, msg));
            }
        }
        let json: serde_json::Value = match files.tokenizer_config {
            Some(bytes) => {
                serde_json::from_slice(bytes).map_err(|e| bad(&config_file, e.to_string()))?
            }
            None => serde_json::Value::Null,
        };
        // a special token is a string, or an added token's `{"content": …}`
        let token = |key: &str| -> String {
            match &json[key] {
                serde_json::Value::String(s) => s.clone(),
                v => v["content"].as_str().unwrap_or_default().to_owned(),
            }
        };
        // one template, or HF's list of named ones, of which a chat uses "default"
        let in_config = match &json["chat_template"] {
            serde_json::Value::String(source) => Some(source.as_str()),
            serde_json::Value::Array(named) => named
                .iter()
                .find(|t| t["name"] == "default")
                .and_then(|t| t["template"].as_str()),
            _ => None,
        };
        let jinja = match files.chat_template {
            Some(bytes) => Some(std::str::from_utf8(bytes).map_err(|e| {
                bad(
                    &jinja_file,
                    format!("the chat template is not UTF-8 text: {e}"),
                )
            })?),
            None => None,
        };
        let source = match (jinja, in_config) {
            (Some(a), Some(b)) if a != b => {
                let at = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
                return Err(bad(
                    &jinja_file,
                    format!(
                        "the chat template differs from {config_file}'s `chat_template` (from \
                         byte {at} on): a folder that gives both must give one template \
                         (transformers 5 reads {CHAT_TEMPLATE_FILE} and ignores the other)"
                    ),
                ));
            }
            (Some(t), _) => Some((t, &jinja_file)),
            (None, Some(t)) => Some((t, &config_file)),
            (None, None) => None,
        };
        self.chat = match source {
            Some((t, file)) => Some(chat::ChatTemplate::new(
                t,
                &token("bos_token"),
                &token("eos_token"),
                file,
            )?),
            None => None,
        };
        Ok(self)
    }

    /// `texts`, each as a user message in the model's chat template with the assistant's turn
    /// opened, tokenised as HF's `apply_chat_template(…, tokenize=True)` tokenises them: the
    /// special tokens the template writes and none added ([`Specials::InText`]). Returns the
    /// texts as the template wrote them, and their tokens.
    pub fn encode_chat(&self, texts: &[&str]) -> Result<(Vec<String>, Encoded)> {
        let template = self.chat.as_ref().ok_or_else(|| {
            Error::Input(format!(
                "{} has no chat template ({CHAT_TEMPLATE_FILE}, {TOKENIZER_CONFIG_FILE}'s \
                 chat_template, or a GGUF file's tokenizer.chat_template)",
                self.short_name()
            ))
        })?;
        let written: Vec<String> = texts
            .iter()
            .map(|t| template.user(t))
            .collect::<Result<_>>()?;
        let refs: Vec<&str> = written.iter().map(String::as_str).collect();
        let encoded = self.tokenizer.encode_as(&refs, None, Specials::InText)?;
        Ok((written, encoded))
    }

    /// One text given by its token ids (a prompt and what the model wrote after it, a chat
    /// template's included): each id in the vocabulary, at least one and no more than the
    /// model's positions ([`TextTokenizer::from_ids`]).
    pub fn encode_ids(&self, ids: &[u32]) -> Result<Encoded> {
        let (vocab, positions) = (self.config.vocab_size, self.config.max_position_embeddings);
        if ids.is_empty() || ids.len() > positions {
            return Err(Error::Input(format!(
                "a text by its token ids takes 1 to {positions} ids, not {}",
                ids.len()
            )));
        }
        if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
            return Err(Error::Input(format!(
                "token id {id} at position {i} is outside the vocabulary of {vocab}"
            )));
        }
        Ok(self.tokenizer.from_ids(ids))
    }

    /// Loads a GGUF file (a Llama-family model): its config from the metadata
    /// ([`crate::families::read_gguf_config`]), its tokenizer and chat template from `tokenizer.ggml.*` and
    /// `tokenizer.chat_template` (as HF's `from_pretrained(…, gguf_file=…)` builds them), its
    /// matrices kept in their ggml types inside `file`, which the model then shares. `name`
    /// names the file in errors.
    pub fn from_gguf(name: &str, file: &WeightsFile) -> Result<Self> {
        let g = gguf::GgufFile::parse(file.bytes(), name)?;
        Self::from_gguf_parsed(name, g, file)
    }

    /// Checks a GGUF file of `len` bytes from its first bytes, `head` (the header, at most
    /// [`limits::MAX_GGUF_HEADER_BYTES`]; `len` and that, whichever is less, is enough), before
    /// the rest is read: its header, tensor list and config, as [`Model::from_gguf`] reads
    /// them. A refused file costs the memory of its header alone.
    pub fn check_gguf(head: &[u8], len: usize, name: &str) -> Result<gguf::GgufFile> {
        let g = gguf::GgufFile::parse_header(head, len, name)?;
        crate::families::read_gguf_config(&g)?;
        Ok(g)
    }

    /// [`Model::check_gguf`] of the first bytes come so far, while a download runs: `false`
    /// while the header runs past them (check again with more), `true` once it was checked
    /// whole. A file is refused as soon as its first bytes refuse it: a wrong architecture by
    /// its first kilobytes, not after a header's limit was read.
    pub fn check_gguf_so_far(head: &[u8], len: usize, name: &str) -> Result<bool> {
        let Some(g) = gguf::GgufFile::parse_header_so_far(head, len, name)? else {
            return Ok(false);
        };
        crate::families::read_gguf_config(&g)?;
        Ok(true)
    }

    /// [`Model::from_gguf`] of a file whose header `g` was parsed already.
    fn from_gguf_parsed(name: &str, g: gguf::GgufFile, file: &WeightsFile) -> Result<Self> {
        if g.tensors.iter().any(|t| t.range.end > file.len()) {
            return Err(Error::Gguf {
                file: name.into(),
                msg: format!(
                    "the file holds {} bytes, fewer than its header says",
                    file.len()
                ),
            });
        }
        let (family, config) = crate::families::read_gguf_config(&g)?;
        let shared: quant::SharedBytes = std::sync::Arc::new(file.clone());
        let (weights, tokenizer) = rayon::join(
            || (family.weights)(&g, &shared, &config),
            || -> Result<_> {
                let mut t = gguf_tokenizer::GgufTokenizer::from_gguf(&g, family.sentencepiece)?;
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
        let len = len as usize;
        // the header first: a file refused by it is not read further
        let mut head = vec![0; len.min(limits::MAX_GGUF_HEADER_BYTES)];
        f.read_exact(&mut head).map_err(io)?;
        let g = Self::check_gguf(&head, len, &shown)?;
        let mut w = WeightsFile::zeroed(len, &shown)?;
        let bytes = w.bytes_mut();
        bytes[..head.len()].copy_from_slice(&head);
        drop(head);
        f.read_exact(&mut bytes[len.min(limits::MAX_GGUF_HEADER_BYTES)..])
            .map_err(io)?;
        Self::from_gguf_parsed(&shown, g, &w)
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
        let optional = |f: &'static str| -> Result<Option<Vec<u8>>> {
            match std::fs::metadata(dir.join(f)) {
                Ok(m) if m.is_file() => Ok(Some(read(f, limits::MAX_CONFIG_BYTES)?)),
                _ => Ok(None),
            }
        };
        let (tokenizer_config, chat_template) = (
            optional(TOKENIZER_CONFIG_FILE)?,
            optional(CHAT_TEMPLATE_FILE)?,
        );
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
        let chat = ChatFiles {
            tokenizer_config: tokenizer_config.as_deref(),
            chat_template: chat_template.as_deref(),
        };
        Self::load(&name, &c, &w, &t)?.with_chat_files(chat, &name)
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

impl Loaded for Model {
    fn id(&self) -> ParamId {
        self.id
    }
    fn name(&self) -> &str {
        self.short_name()
    }
    fn config(&self) -> &Config {
        &self.config
    }
    fn network(&self) -> &dyn Network {
        &*self.weights
    }
    fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }
}
