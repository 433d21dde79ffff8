//! A GGUF file's tokenizer: the `tokenizer.json` HF transformers builds from the file's
//! `tokenizer.ggml.*` metadata (`AutoTokenizer.from_pretrained(dir, gguf_file=...)`), so that the
//! ids are transformers' own, with the special ids, the BOS/EOS flags and the chat template.
//!
//! transformers (`integrations/gguf/gguf_tokenizer_mapping.py`, 5.x) builds a BPE model over
//! `tokenizer.ggml.tokens` and `tokenizer.ggml.merges` (`"a b"` each; where the file has none,
//! derived from the tokens and `tokenizer.ggml.scores` as its `generate_merges` does), a
//! repeated token keeping its last id, and:
//!
//! * for `tokenizer.ggml.model` = `"gpt2"` (byte-level BPE: GPT-2, Llama 3, Qwen 2, …), as
//!   `GPT2Tokenizer`: each token outside the byte-level alphabet respelled in it, byte by byte;
//!   GPT-2's byte-level pre-tokenizer and decoder; no unknown token;
//! * for `"llama"` (SentencePiece's BPE: Llama 2, Mistral, …), as `LlamaTokenizer`: the tokens
//!   as they are, byte fallback, unknown pieces fused; `Metaspace` (`▁`, prepended to the first
//!   piece) and its decoder;
//! * either way, when `tokenizer.ggml.pre` names a split transformers knows (Llama 3's
//!   `"llama-bpe"`, Qwen 2's `"qwen2"`, …), that split's regex then the byte-level mapping as the
//!   pre-tokenizer;
//! * added tokens, in transformers' order, each with its vocabulary id or else a new one: the
//!   class's own defaults (`<|endoftext|>`; `<s>`, `</s>`, `<unk>`) and the tokens typed CONTROL
//!   (3) in `tokenizer.ggml.token_type` as special tokens (a byte-level one outside the alphabet
//!   left out), those typed USER_DEFINED (4) as plain ones, then the BOS, EOS, unknown and padding
//!   tokens the file names (`tokenizer.ggml.bos_token_id`, …) as special;
//! * a template adding the BOS token (`tokenizer.ggml.add_bos_token`; by default for
//!   `"llama"` only) and the EOS token (`tokenizer.ggml.add_eos_token`, default false).
//!
//! A family whose SentencePiece vocabulary transformers builds its own way says so
//! ([`SentencePiece`], from the family's entry, never from the file's architecture): Gemma's
//! (`GemmaTokenizer`, `gemma_tokenizer`) has spaces made `▁` by a normalizer and no prefix,
//! its tokens of spaces alone respelled in `▁`, merges in the order of the tokens in the file
//! rather than by score, and `<pad>`, `<eos>`, `<bos>`, `<unk>` and `<mask>` as the class's
//! own special tokens. `"t5"` and the other models are refused, naming the model.

use std::collections::HashMap;

use serde_json::{json, Map, Value as Json};

use super::gguf::GgufFile;
use super::limits::MAX_VOCAB_SIZE;
use crate::error::{Error, Result};

/// `tokenizer.ggml.token_type`: a control token (`<|endoftext|>`), added as special.
const TOKEN_CONTROL: i32 = 3;
/// `tokenizer.ggml.token_type`: a user-defined token (`<think>`), added whole but not special.
const TOKEN_USER_DEFINED: i32 = 4;

/// The split regexes transformers puts before the byte-level mapping, by `tokenizer.ggml.pre`
/// (`GGUF_PRE_TOKENIZER_SPLITS`).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The split transformers uses for a `tokenizer.ggml.pre`, if it has one.
fn split_regex(pre: &str) -> Option<&'static str> {
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3_SPLIT,
        "tekken" => TEKKEN_SPLIT,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2_SPLIT,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O_SPLIT,
        _ => return None,
    })
}

/// GPT-2's byte-level alphabet (`bytes_to_unicode`): the printable bytes stand for themselves,
/// the others for the characters from U+0100 on, in order.
fn byte_alphabet() -> [char; 256] {
    let mut chars = ['\0'; 256];
    let mut next = 256u32;
    for (b, c) in chars.iter_mut().enumerate() {
        let printable = matches!(b, 33..=126 | 161..=172 | 174..=255);
        let code = if printable {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        *c = char::from_u32(code).expect("below U+0200");
    }
    chars
}

/// How transformers builds a family's SentencePiece vocabulary (`tokenizer.ggml.model` =
/// `"llama"`): a family's GGUF entry says which ([`crate::families::GgufFamily`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SentencePiece {
    /// `LlamaTokenizer` (Llama 2, Mistral, …): `Metaspace` prepending `▁`, merges by score.
    Llama,
    /// `GemmaTokenizer` (`gemma_tokenizer`): spaces made `▁` by a normalizer, no prefix, tokens
    /// of spaces alone respelled in `▁`, merges in the file's order of tokens.
    Gemma,
}

/// The vocabularies transformers builds from a GGUF file, by `tokenizer.ggml.model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vocabulary {
    /// `"gpt2"`: byte-level BPE (`GPT2Tokenizer`).
    ByteLevel,
    /// `"llama"`: SentencePiece's BPE with byte fallback, the family's way.
    SentencePiece(SentencePiece),
}

impl Vocabulary {
    /// The special tokens the tokenizer class adds of itself before the file's (its defaults
    /// for `bos_token`, `eos_token`, `unk_token`, …), new tokens where the vocabulary lacks them.
    fn default_specials(self) -> &'static [&'static str] {
        match self {
            Vocabulary::ByteLevel => &["<|endoftext|>"],
            Vocabulary::SentencePiece(SentencePiece::Llama) => &["<s>", "</s>", "<unk>"],
            Vocabulary::SentencePiece(SentencePiece::Gemma) => {
                &["<bos>", "<eos>", "<unk>", "<pad>", "<mask>"]
            }
        }
    }
}

/// What a GGUF file says of its tokenizer.
#[derive(Debug, Clone)]
pub struct GgufTokenizer {
    /// The `tokenizer.json` transformers builds (see the module's docs).
    pub json: Json,
    /// `tokenizer.ggml.bos_token_id`, `.eos_token_id`, `.padding_token_id`, `.unknown_token_id`.
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    pub pad_token_id: Option<u32>,
    pub unk_token_id: Option<u32>,
    /// Whether encoding adds the BOS token first and the EOS token last (the template in
    /// [`GgufTokenizer::json`] does).
    pub add_bos_token: bool,
    pub add_eos_token: bool,
    /// `tokenizer.chat_template`, a Jinja template.
    pub chat_template: Option<String>,
}

impl GgufTokenizer {
    /// Reads the tokenizer of `file`'s metadata, a SentencePiece vocabulary built the way
    /// `sentencepiece` says (the family's).
    pub fn from_gguf(file: &GgufFile, sentencepiece: SentencePiece) -> Result<Self> {
        let error = |msg: String| Error::Gguf {
            file: file.file.clone(),
            msg,
        };
        let model = file.get_str("tokenizer.ggml.model")?;
        let vocabulary = match model {
            "gpt2" => Vocabulary::ByteLevel,
            "llama" => Vocabulary::SentencePiece(sentencepiece),
            _ => {
                return Err(error(format!(
                    "`tokenizer.ggml.model` is {model:?}, a tokenizer attnscope does not build \
                     (it builds \"gpt2\", byte-level BPE, and \"llama\", SentencePiece's BPE)"
                )))
            }
        };
        let tokens = file.get_str_array("tokenizer.ggml.tokens")?;
        if tokens.len() > MAX_VOCAB_SIZE {
            return Err(error(format!(
                "`tokenizer.ggml.tokens` has {} tokens, over the limit of {MAX_VOCAB_SIZE}",
                tokens.len()
            )));
        }
        let types = match file.get("tokenizer.ggml.token_type") {
            None => &[][..],
            Some(_) => file.get_i32_array("tokenizer.ggml.token_type")?,
        };
        let optional = |key: &str| -> Result<Option<u32>> {
            let Some(_) = file.get(key) else {
                return Ok(None);
            };
            let id = file.get_u32(key)?;
            if id as usize >= tokens.len() {
                return Err(error(format!(
                    "`{key}` is {id}, but the vocabulary has {} tokens",
                    tokens.len()
                )));
            }
            Ok(Some(id))
        };
        let flag = |key: &str, default: bool| -> Result<bool> {
            match file.get(key) {
                None => Ok(default),
                Some(_) => file.get_bool(key),
            }
        };
        let bos_token_id = optional("tokenizer.ggml.bos_token_id")?;
        let eos_token_id = optional("tokenizer.ggml.eos_token_id")?;
        let pad_token_id = optional("tokenizer.ggml.padding_token_id")?;
        let unk_token_id = optional("tokenizer.ggml.unknown_token_id")?;
        // llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise; without
        // its token, a flag is dropped (as transformers' `update_post_processor` does)
        let add_bos_token = flag(
            "tokenizer.ggml.add_bos_token",
            vocabulary != Vocabulary::ByteLevel,
        )? && bos_token_id.is_some();
        let add_eos_token = flag("tokenizer.ggml.add_eos_token", false)? && eos_token_id.is_some();
        let chat_template = match file.get("tokenizer.chat_template") {
            None => None,
            Some(_) => Some(file.get_str("tokenizer.chat_template")?.to_owned()),
        };
        let pre = match file.get("tokenizer.ggml.pre") {
            None => None,
            Some(_) => Some(file.get_str("tokenizer.ggml.pre")?),
        };

        let alphabet = byte_alphabet();
        let spelled = |t: &str| t.chars().all(|c| alphabet.contains(&c));
        // the vocabulary: a byte-level token outside the alphabet respelled in it; Gemma's
        // tokens of spaces alone ("  ", stored as spaces) as `GemmaTokenizer` looks them up
        let respelled: Vec<String> = match vocabulary {
            Vocabulary::ByteLevel => tokens
                .iter()
                .map(|t| match spelled(t) {
                    true => t.clone(),
                    false => t.bytes().map(|b| alphabet[b as usize]).collect(),
                })
                .collect(),
            Vocabulary::SentencePiece(SentencePiece::Llama) => tokens.to_vec(),
            Vocabulary::SentencePiece(SentencePiece::Gemma) => {
                tokens.iter().map(|t| gemma_spelling(t)).collect()
            }
        };
        let mut vocab = Map::new();
        for (id, t) in respelled.iter().enumerate() {
            vocab.insert(t.clone(), id.into());
        }
        let merges = match file.get("tokenizer.ggml.merges") {
            Some(_) => file
                .get_str_array("tokenizer.ggml.merges")?
                .iter()
                .enumerate()
                .map(|(i, m)| match m.split(' ').collect::<Vec<_>>()[..] {
                    [a, b] => Ok((a.to_owned(), b.to_owned())),
                    _ => Err(error(format!(
                        "`tokenizer.ggml.merges` {i} is {m:?}, not two tokens and one space \
                         between"
                    ))),
                })
                .collect::<Result<Vec<_>>>()?,
            // Gemma's scores do not follow its merge order: the tokens' order in the file does
            None if vocabulary == Vocabulary::SentencePiece(SentencePiece::Gemma) => {
                let order: Vec<f32> = (0..respelled.len()).map(|i| -(i as f32)).collect();
                derive_merges(&respelled, &order).map_err(error)?
            }
            None => derive_merges(tokens, file.get_f32_array("tokenizer.ggml.scores")?)
                .map_err(error)?,
        };
        drop(respelled);

        // the added tokens, in the order transformers adds them: the class's defaults, the
        // file's control tokens (a byte-level one outside the alphabet is llama.cpp's mislabel,
        // left out), its user-defined tokens found in the vocabulary, then the special tokens
        // the file names
        let mut added = AddedTokens::new(vocab.len());
        for t in vocabulary.default_specials() {
            added.add(t, true, &vocab);
        }
        // a control token whatever it is, a user-defined one as the file spells it where the
        // vocabulary has it so (not Gemma's tokens of spaces, respelled)
        let byte_level = vocabulary == Vocabulary::ByteLevel;
        for (ty, special) in [(TOKEN_CONTROL, true), (TOKEN_USER_DEFINED, false)] {
            for (t, _) in tokens.iter().zip(types).filter(|&(_, &tt)| tt == ty) {
                let kept = match (byte_level, special) {
                    (true, _) => spelled(t),
                    (false, true) => true,
                    (false, false) => vocab.contains_key(t),
                };
                if kept {
                    added.add(t, special, &vocab);
                }
            }
        }
        for id in [bos_token_id, eos_token_id, unk_token_id, pad_token_id]
            .into_iter()
            .flatten()
        {
            added.add(&tokens[id as usize], true, &vocab);
        }

        let byte_level = |use_regex: bool| {
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                   "use_regex": use_regex})
        };
        let pre_tokenizer = match (pre.and_then(split_regex), vocabulary) {
            (Some(regex), _) => json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
                 "invert": false},
                byte_level(false),
            ]}),
            (None, Vocabulary::ByteLevel) => byte_level(true),
            (None, Vocabulary::SentencePiece(SentencePiece::Llama)) => {
                json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                       "split": false})
            }
            (None, Vocabulary::SentencePiece(SentencePiece::Gemma)) => {
                json!({"type": "Split", "pattern": {"String": " "},
                       "behavior": "MergedWithPrevious", "invert": false})
            }
        };
        let normalizer = match vocabulary {
            Vocabulary::SentencePiece(SentencePiece::Gemma) => {
                json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})
            }
            _ => Json::Null,
        };
        let (decoder, model) = match vocabulary {
            Vocabulary::ByteLevel => (
                json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                       "use_regex": true}),
                json!({"type": "BPE", "dropout": null, "unk_token": null,
                       "continuing_subword_prefix": "", "end_of_word_suffix": "",
                       "fuse_unk": false, "byte_fallback": false, "ignore_merges": false}),
            ),
            Vocabulary::SentencePiece(SentencePiece::Llama) => (
                json!({"type": "Sequence", "decoders": [
                    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                    {"type": "ByteFallback"},
                    {"type": "Fuse"},
                    {"type": "Strip", "content": " ", "start": 1, "stop": 0},
                ]}),
                json!({"type": "BPE", "dropout": null, "unk_token": null,
                       "continuing_subword_prefix": null, "end_of_word_suffix": null,
                       "fuse_unk": true, "byte_fallback": true, "ignore_merges": false}),
            ),
            Vocabulary::SentencePiece(SentencePiece::Gemma) => (
                json!({"type": "Sequence", "decoders": [
                    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                    {"type": "ByteFallback"},
                    {"type": "Fuse"},
                ]}),
                json!({"type": "BPE", "dropout": null, "unk_token": "<unk>",
                       "continuing_subword_prefix": null, "end_of_word_suffix": null,
                       "fuse_unk": true, "byte_fallback": true, "ignore_merges": false}),
            ),
        };
        let mut model = model;
        model["vocab"] = Json::Object(vocab);
        model["merges"] = merges.into_iter().map(|(a, b)| json!([a, b])).collect();
        let post_processor = template(
            bos_token_id
                .filter(|_| add_bos_token)
                .map(|id| (tokens[id as usize].as_str(), id)),
            eos_token_id
                .filter(|_| add_eos_token)
                .map(|id| (tokens[id as usize].as_str(), id)),
        );
        let json = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added.json(),
            "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": post_processor,
            "decoder": decoder,
            "model": model,
        });
        Ok(Self {
            json,
            bos_token_id,
            eos_token_id,
            pad_token_id,
            unk_token_id,
            add_bos_token,
            add_eos_token,
            chat_template,
        })
    }
}

/// A Gemma token as `GemmaTokenizer` looks it up: one of spaces alone (with other whitespace:
/// `" " in t and not t.strip()`) as that many `▁`, others as they are.
fn gemma_spelling(t: &str) -> String {
    // Python's str.isspace: Unicode's whitespace and the ASCII separators U+001C–U+001F
    let space = |c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
    match t.contains(' ') && t.chars().all(space) {
        true => "▁".repeat(t.chars().count()),
        false => t.to_owned(),
    }
}

/// The added tokens of a tokenizer being built, given ids as the tokenizers crate gives them:
/// a token's id in the vocabulary, else the next one past the vocabulary and every added id.
struct AddedTokens {
    /// `(content, id, special)`, in the order added.
    tokens: Vec<(String, u64, bool)>,
    /// Each content's place in `tokens`.
    index: HashMap<String, usize>,
    vocab_len: u64,
    max_id: Option<u64>,
}

impl AddedTokens {
    fn new(vocab_len: usize) -> Self {
        Self {
            tokens: Vec::new(),
            index: HashMap::new(),
            vocab_len: vocab_len as u64,
            max_id: None,
        }
    }

    /// Adds `content` (again: as `special` now).
    fn add(&mut self, content: &str, special: bool, vocab: &Map<String, Json>) {
        if content.is_empty() {
            return;
        }
        if let Some(&i) = self.index.get(content) {
            self.tokens[i].2 = special;
            return;
        }
        let id = vocab
            .get(content)
            .and_then(Json::as_u64)
            .unwrap_or(match self.max_id {
                Some(max) if max >= self.vocab_len || self.vocab_len == 0 => max + 1,
                _ => self.vocab_len,
            });
        self.max_id = self.max_id.max(Some(id));
        self.index.insert(content.to_owned(), self.tokens.len());
        self.tokens.push((content.to_owned(), id, special));
    }

    /// As `tokenizer.json` lists them: by id (the order the tokenizers crate adds them back in).
    fn json(mut self) -> Vec<Json> {
        self.tokens.sort_by_key(|t| t.1);
        self.tokens
            .into_iter()
            .map(|(content, id, special)| {
                json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": special})
            })
            .collect()
    }
}

/// Most work, `Σ len²` over the tokens (in characters), that deriving the merges from the
/// vocabulary may take: Gemma's 256k tokens take about 2·10⁷.
const MAX_MERGE_DERIVATION_WORK: usize = 1 << 30;

/// The merges a vocabulary implies when the file lists none (transformers' `generate_merges`
/// with the tokens' scores): every split of a token into two tokens of the vocabulary, the
/// splits of one token by the ids of their halves, then all of them by score, then by their
/// halves' lengths, highest first (ties kept in order).
fn derive_merges(tokens: &[String], scores: &[f32]) -> Result<Vec<(String, String)>, String> {
    let work: usize = tokens
        .iter()
        .map(|t| t.len().saturating_mul(t.len()))
        .fold(0, usize::saturating_add);
    if work > MAX_MERGE_DERIVATION_WORK {
        return Err(format!(
            "the file lists no `tokenizer.ggml.merges`, and its tokens are too long to derive \
             them from (Σ len² = {work}, over {MAX_MERGE_DERIVATION_WORK})"
        ));
    }
    // the merges are ordered by score: a NaN has no place in that order
    if let Some((i, t)) = tokens
        .iter()
        .zip(scores)
        .enumerate()
        .find_map(|(i, (t, s))| s.is_nan().then_some((i, t)))
    {
        return Err(format!(
            "the file lists no `tokenizer.ggml.merges`, and `tokenizer.ggml.scores` gives \
             token {i} ({t:?}) the score NaN: the merges derived from the scores have no order"
        ));
    }
    // {token: id}, a repeated token keeping its last id
    let ids: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    // {token: score} in the order tokens first appear, a repeated one keeping its last score
    let mut order: Vec<&str> = Vec::new();
    let mut score: HashMap<&str, f32> = HashMap::new();
    for (t, &s) in tokens.iter().zip(scores) {
        if score.insert(t, s).is_none() {
            order.push(t);
        }
    }
    let mut merges: Vec<(&str, &str, f32)> = Vec::new();
    for token in order {
        let s = score[token];
        let mut local: Vec<(&str, &str, f32)> = token
            .char_indices()
            .skip(1)
            .map(|(at, _)| token.split_at(at))
            .filter(|(l, r)| ids.contains_key(l) && ids.contains_key(r))
            .map(|(l, r)| (l, r, s))
            .collect();
        local.sort_by_key(|&(l, r, _)| (ids[l], ids[r]));
        merges.extend(local);
    }
    let chars = |s: &str| s.chars().count();
    merges.sort_by(|a, b| {
        b.2.total_cmp(&a.2)
            .then_with(|| chars(b.0).cmp(&chars(a.0)))
            .then_with(|| chars(b.1).cmp(&chars(a.1)))
    });
    Ok(merges
        .into_iter()
        .map(|(l, r, _)| (l.to_owned(), r.to_owned()))
        .collect())
}

/// transformers' `TemplateProcessing` for these BOS and EOS tokens (`(token, id)`, each when
/// added): `[bos] $A [eos]` and `[bos] $A [eos] [bos]:1 $B:1 [eos]:1`.
fn template(bos: Option<(&str, u32)>, eos: Option<(&str, u32)>) -> Json {
    let special = |t: &str, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let sequence = |s: &str, type_id: u32| json!({"Sequence": {"id": s, "type_id": type_id}});
    let part = |s: &str, type_id: u32| {
        let mut p = Vec::new();
        p.extend(bos.map(|(t, _)| special(t, type_id)));
        p.push(sequence(s, type_id));
        p.extend(eos.map(|(t, _)| special(t, type_id)));
        p
    };
    let single = part("A", 0);
    let mut pair = single.clone();
    pair.extend(part("B", 1));
    let mut special_tokens = Map::new();
    for (t, id) in bos.into_iter().chain(eos) {
        special_tokens.insert(t.into(), json!({"id": t, "ids": [id], "tokens": [t]}));
    }
    json!({"type": "TemplateProcessing", "single": single, "pair": pair,
           "special_tokens": special_tokens})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_alphabet_is_gpt2_s() {
        let a = byte_alphabet();
        assert_eq!(a[b'!' as usize], '!');
        assert_eq!(a[b' ' as usize], 'Ġ');
        assert_eq!(a[b'\n' as usize], 'Ċ');
        assert_eq!(a[0], 'Ā');
        assert_eq!((a[127], a[173]), ('ġ', 'Ń'));
        let mut sorted = a.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 256);
    }

    #[test]
    fn the_template_adds_what_is_asked() {
        let t = template(Some(("<s>", 1)), Some(("</s>", 2)));
        assert_eq!(t["single"].as_array().unwrap().len(), 3);
        assert_eq!(t["pair"].as_array().unwrap().len(), 6);
        assert_eq!(t["pair"][3]["SpecialToken"]["type_id"], 1);
        let t = template(None, None);
        assert_eq!(
            t["single"],
            json!([{"Sequence": {"id": "A", "type_id": 0}}])
        );
        assert_eq!(t["special_tokens"], json!({}));
    }

    #[test]
    fn merges_come_by_score_and_a_nan_score_is_refused_by_token() {
        let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc"].map(String::from).into();
        let merges = derive_merges(&tokens, &[0.0, 0.0, 0.0, -1.0, -2.0, -3.0]).unwrap();
        let pair = |l: &str, r: &str| (l.to_owned(), r.to_owned());
        assert_eq!(
            merges,
            [
                pair("a", "b"),
                pair("b", "c"),
                pair("ab", "c"),
                pair("a", "bc")
            ]
        );
        let err = derive_merges(&tokens, &[0.0, 0.0, 0.0, -1.0, f32::NAN, -3.0]).unwrap_err();
        assert!(err.contains("token 4 (\"bc\") the score NaN"), "{err}");
    }
}
