//! Tokenisation with HF's `tokenizers` crate, from the checkpoint's `tokenizer.json`.

use ndarray::Array2;
use serde_json::Value;
use tokenizers::{
    EncodeInput, PaddingDirection, Tokenizer, TruncationDirection, TruncationParams,
    TruncationStrategy,
};

use super::limits::{file_too_big, MAX_BATCH, MAX_TEXT_BYTES, MAX_TOKENIZER_BYTES};
use crate::analysis::SpecialIds;
use crate::error::{Error, Result};

/// A tokenizer set up for visualisation: no fixed padding, truncation at the model's
/// `max_position_embeddings` (reported), batches right-padded to the longest text.
pub struct TextTokenizer {
    inner: Tokenizer,
    file: String,
    pad_id: u32,
    pad_token: String,
    max_len: usize,
    special: SpecialIds,
}

/// A tokenised, right-padded batch.
///
/// # Shapes
/// * `ids`, `type_ids`: `(B, T)`
/// * `valid`: `(B, T)`, `true` on real tokens, `false` on `[PAD]`
#[derive(Debug, Clone)]
pub struct Encoded {
    pub tokens: Vec<Vec<String>>,
    pub ids: Array2<u32>,
    pub type_ids: Array2<u32>,
    pub valid: Array2<bool>,
    /// Whether each text (or pair) was cut at the model's maximum length.
    pub truncated: Vec<bool>,
    /// Each real token's span in its text (or the pair's second), in bytes, as the tokenizer
    /// gives it; `(0, 0)` for a special token it added. `[B][n_b]`, padding excluded.
    pub offsets: Vec<Vec<(usize, usize)>>,
    /// Each real token's word, by the tokenizer's own word boundaries (its pre-tokenizer): the
    /// pieces of one word share an index; `None` for a special token. `[B][n_b]`.
    pub word_ids: Vec<Vec<Option<u32>>>,
    /// Each real token as a person reads it: its span of the text, a space before it where the
    /// token carries one (`Ġ`, `▁`); a special token as it is (`[CLS]`, `<s>`). `[B][n_b]`.
    pub texts: Vec<Vec<String>>,
    /// Where each item's second sentence (the pair's) starts: the position of its first token,
    /// as bertviz's `sentence_b_start`; `None` for a text alone. `[B]`.
    pub sentence_b_start: Vec<Option<usize>>,
}

impl Encoded {
    pub fn batch(&self) -> usize {
        self.ids.nrows()
    }
    pub fn len(&self) -> usize {
        self.ids.ncols()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    /// Item `b`'s real tokens, padding excluded.
    pub fn length(&self, b: usize) -> usize {
        self.valid.row(b).iter().filter(|&&v| v).count()
    }
}

/// Whether a text is given the tokenizer's own special tokens (`[CLS] … [SEP]`, a BOS token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Specials {
    /// As the tokenizer's template adds them (HF's `add_special_tokens=True`, the default).
    Added,
    /// None added: the text writes its own, as a chat template's rendering does (HF's
    /// `apply_chat_template(…, tokenize=True)` tokenizes it with `add_special_tokens=False`, so
    /// that a template that begins with `{{ bos_token }}` gives one BOS, not two).
    InText,
}

/// An error about tokenizer file `file`, its message given.
fn tokenizer_error(file: &str) -> impl Fn(String) -> Error + Copy + '_ {
    move |msg| Error::Tokenizer {
        file: file.into(),
        msg,
    }
}

impl TextTokenizer {
    /// Loads `tokenizer.json`; a file over [`MAX_TOKENIZER_BYTES`] is refused unparsed.
    /// `pad_token_id` comes from the model config when the tokenizer has no padding.
    pub fn from_bytes(
        bytes: &[u8],
        file: &str,
        max_len: usize,
        pad_token_id: Option<u32>,
    ) -> Result<Self> {
        let err = tokenizer_error(file);
        if bytes.len() > MAX_TOKENIZER_BYTES {
            return Err(err(file_too_big(bytes.len() as u64, MAX_TOKENIZER_BYTES)));
        }
        // Parsed as JSON first: the tokenizers crate panics on some malformed or inconsistent
        // files instead of returning an error (see `check_components`).
        let json: Value = serde_json::from_slice(bytes).map_err(|e| err(e.to_string()))?;
        Self::from_json(json, file, max_len, pad_token_id)
    }

    /// [`TextTokenizer::from_bytes`] of a `tokenizer.json` already parsed, or built (a GGUF
    /// file's, from its metadata: no bytes and no second tree in between, which would raise the
    /// peak of a page's wasm memory, a peak it keeps).
    pub fn from_json(
        mut json: Value,
        file: &str,
        max_len: usize,
        pad_token_id: Option<u32>,
    ) -> Result<Self> {
        let err = tokenizer_error(file);
        drop_null_precompiled(&mut json);
        check_components(&json).map_err(err)?;
        let mut inner: Tokenizer = serde_json::from_value(json).map_err(|e| err(e.to_string()))?;
        // The pad token: the tokenizer's own padding settings, else `[PAD]` or `<pad>` in its
        // vocabulary, else the config's `pad_token_id` (GPT-2's end of text). A tokenizer without
        // any (GPT-2's) pads with id 0, shown as `[PAD]`: padding is masked, whatever its id.
        let (pad_id, pad_token) = match inner.get_padding() {
            Some(p) => (p.pad_id, p.pad_token.clone()),
            None => {
                let named = ["[PAD]", "<pad>"]
                    .into_iter()
                    .find_map(|t| Some((inner.token_to_id(t)?, t.to_owned())));
                match (named, pad_token_id) {
                    (Some(named), _) => named,
                    (None, Some(id)) => (
                        id,
                        inner.id_to_token(id).unwrap_or_else(|| "[PAD]".to_owned()),
                    ),
                    (None, None) => (0, "[PAD]".to_owned()),
                }
            }
        };
        // The tokenizers crate subtracts the special tokens it adds from the length it truncates
        // at, unchecked (a panic when they do not fit): a model whose positions cannot hold them
        // and one more token is refused here.
        use tokenizers::PostProcessor;
        let added = inner
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false).max(p.added_tokens(true)));
        if max_len <= added {
            return Err(err(format!(
                "the model's {max_len} positions cannot hold the {added} special tokens the \
                 tokenizer adds and a token of text"
            )));
        }
        // Checkpoints often ship fixed padding (to 128 here) and truncation at 128: switch
        // both off; we truncate at the model's maximum length instead.
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_len,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| err(e.to_string()))?;
        // [CLS] and [SEP] as the post-processor adds them: the first and last special token of
        // an empty text (none when it adds none).
        let special = inner
            .encode("", true)
            .map(|e| {
                let marks: Vec<u32> = e
                    .get_ids()
                    .iter()
                    .zip(e.get_special_tokens_mask())
                    .filter(|&(_, &m)| m == 1)
                    .map(|(&id, _)| id)
                    .collect();
                SpecialIds {
                    cls: marks.first().copied(),
                    sep: marks.last().copied().filter(|_| marks.len() > 1),
                }
            })
            .unwrap_or_default();
        Ok(Self {
            inner,
            file: file.into(),
            pad_id,
            pad_token,
            max_len,
            special,
        })
    }

    /// The sentence markers the tokenizer adds ([`SpecialIds`]).
    pub fn special_ids(&self) -> SpecialIds {
        self.special
    }

    /// Token `id` as the vocabulary holds it (`Ġarrow`, `##ing`, `▁the`); `[id]` for an id
    /// outside it.
    pub fn token(&self, id: u32) -> String {
        self.inner
            .id_to_token(id)
            .unwrap_or_else(|| format!("[{id}]"))
    }

    /// Token `id` as text: HF's `decode([id])` through the tokenizer's decoder (`Ġarrow` →
    /// ` arrow`, `×©` → `ש`), with the space a `▁` stands for kept where the decoder strips it
    /// (a token read alone is not a text's start). A token that holds only part of a character
    /// (byte-level BPE's pieces of an emoji, SentencePiece's byte pieces `<0xF0>`), where HF's
    /// `decode` writes `�`, shows those bytes marked ([`marked_bytes`]: ` ‹F0 9F›`). The token
    /// itself where there is no decoder or it fails (WordPiece's `##ing` reads as itself).
    pub fn text_of(&self, id: u32) -> String {
        let token = self.token(id);
        if let Some(part) = self.partial_text(id, &token) {
            return part;
        }
        if self.inner.get_decoder().is_none() {
            return token;
        }
        let Ok(text) = self.inner.decode(&[id], false) else {
            return token;
        };
        if token.starts_with('▁') && !text.starts_with(char::is_whitespace) {
            return format!(" {text}");
        }
        text
    }

    /// [`TextTokenizer::text_of`] where token `id` (`token` in the vocabulary) holds only part
    /// of a character (its bytes marked), else `None`. The decoder runs only for a piece whose
    /// bytes are not whole characters (a tokenised text's every token passes here).
    fn partial_text(&self, id: u32, token: &str) -> Option<String> {
        partial(token, || {
            self.inner.get_decoder()?;
            self.inner.decode(&[id], false).ok()
        })
    }

    /// `ids` as text, special tokens skipped (HF's `decode(ids, skip_special_tokens=True)`);
    /// the tokens joined by spaces where the tokenizer cannot decode them.
    pub fn decode(&self, ids: &[u32]) -> String {
        self.inner.decode(ids, true).unwrap_or_else(|_| {
            let tokens: Vec<String> = ids.iter().map(|&id| self.token(id)).collect();
            tokens.join(" ")
        })
    }

    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }
    pub fn pad_token(&self) -> &str {
        &self.pad_token
    }
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// One text given by its ids (a prompt and what a model wrote after it): its tokens as the
    /// vocabulary holds them, each read as [`TextTokenizer::text_of`] reads it, no offsets.
    pub fn from_ids(&self, ids: &[u32]) -> Encoded {
        let n = ids.len();
        Encoded {
            tokens: vec![ids.iter().map(|&id| self.token(id)).collect()],
            ids: Array2::from_shape_vec((1, n), ids.to_vec()).expect("(1, n)"),
            type_ids: Array2::zeros((1, n)),
            valid: Array2::from_elem((1, n), true),
            truncated: vec![false],
            offsets: vec![vec![(0, 0); n]],
            word_ids: vec![vec![None; n]],
            texts: vec![ids.iter().map(|&id| self.text_of(id)).collect()],
            sentence_b_start: vec![None],
        }
    }

    /// Tokenises `texts` (each paired with `pair` when given) into one batch right-padded to the
    /// longest, with the tokenizer's special tokens ([`Specials::Added`]).
    ///
    /// At most [`MAX_BATCH`] texts; each must hold something besides whitespace and characters
    /// the tokenizer drops. Text over [`MAX_TEXT_BYTES`] is cut there before tokenising, and
    /// text over the model's length is truncated; both are reported in [`Encoded::truncated`].
    pub fn encode(&self, texts: &[&str], pair: Option<&str>) -> Result<Encoded> {
        self.encode_as(texts, pair, Specials::Added)
    }

    /// [`TextTokenizer::encode`], the special tokens added or not as `specials` says.
    pub fn encode_as(
        &self,
        texts: &[&str],
        pair: Option<&str>,
        specials: Specials,
    ) -> Result<Encoded> {
        if texts.is_empty() {
            return Err(Error::Input("no text given".into()));
        }
        if texts.len() > MAX_BATCH {
            return Err(Error::Input(format!(
                "a batch of {} texts is over the limit of {MAX_BATCH}",
                texts.len()
            )));
        }
        for (i, t) in texts.iter().enumerate() {
            if t.trim().is_empty() {
                return Err(Error::EmptyText { index: i });
            }
        }
        if let Some(p) = pair {
            if p.trim().is_empty() {
                return Err(Error::EmptyText { index: texts.len() });
            }
        }
        let cut_texts: Vec<(&str, bool)> = texts.iter().map(|t| cut(t)).collect();
        let cut_pair = pair.map(cut);
        let inputs: Vec<EncodeInput> = cut_texts
            .iter()
            .map(|&(t, _)| match cut_pair {
                Some((p, _)) => (t, p).into(),
                None => t.into(),
            })
            .collect();
        let mut encodings = self
            .inner
            .encode_batch(inputs, specials == Specials::Added)
            .map_err(|e| Error::Tokenizer {
                file: self.file.clone(),
                msg: e.to_string(),
            })?;
        for (i, e) in encodings.iter().enumerate() {
            let ids = e.get_sequence_ids();
            if !ids.contains(&Some(0)) {
                return Err(Error::NoTokens { index: i });
            }
            if pair.is_some() && !ids.contains(&Some(1)) {
                return Err(Error::NoTokens { index: texts.len() });
            }
        }
        // the pair's first token (a template's special tokens belong to neither sentence)
        let sentence_b_start = encodings
            .iter()
            .map(|e| e.get_sequence_ids().iter().position(|s| *s == Some(1)))
            .collect();
        let was_cut = |i: usize| cut_texts[i].1 || cut_pair.is_some_and(|(_, c)| c);
        let truncated: Vec<bool> = encodings
            .iter()
            .enumerate()
            .map(|(i, e)| was_cut(i) || !e.get_overflowing().is_empty())
            .collect();
        let t = encodings.iter().map(|e| e.len()).max().unwrap_or(0);
        for e in &mut encodings {
            e.pad(t, self.pad_id, 0, &self.pad_token, PaddingDirection::Right);
        }
        let b = encodings.len();
        let flat = |f: &dyn Fn(&tokenizers::Encoding) -> Vec<u32>| -> Vec<u32> {
            encodings.iter().flat_map(f).collect()
        };
        let shape = (b, t);
        let ids = Array2::from_shape_vec(shape, flat(&|e| e.get_ids().to_vec()))
            .map_err(|e| Error::Input(e.to_string()))?;
        let type_ids = Array2::from_shape_vec(shape, flat(&|e| e.get_type_ids().to_vec()))
            .map_err(|e| Error::Input(e.to_string()))?;
        let valid = Array2::from_shape_vec(shape, flat(&|e| e.get_attention_mask().to_vec()))
            .map_err(|e| Error::Input(e.to_string()))?
            .mapv(|m| m != 0);
        let tokens = encodings.iter().map(|e| e.get_tokens().to_vec()).collect();
        // what each real token reads as (before the padding added above)
        let mut offsets = Vec::with_capacity(b);
        let mut word_ids = Vec::with_capacity(b);
        let mut texts = Vec::with_capacity(b);
        for (i, e) in encodings.iter().enumerate() {
            let n = e.get_attention_mask().iter().filter(|&&m| m != 0).count();
            let sources = [cut_texts[i].0, cut_pair.map_or("", |(p, _)| p)];
            let mut spans = Vec::with_capacity(n);
            let mut shown = Vec::with_capacity(n);
            for j in 0..n {
                let special = e.get_special_tokens_mask()[j] == 1;
                let span = if special { (0, 0) } else { e.get_offsets()[j] };
                let token = &e.get_tokens()[j];
                shown.push(if special {
                    token.clone()
                } else if let Some(part) = self.partial_text(e.get_ids()[j], token) {
                    // part of a character, which its span (the whole character) would repeat
                    part
                } else {
                    let source = sources[e.get_sequence_ids()[j].unwrap_or(0).min(1)];
                    token_text(token, source.get(span.0..span.1).unwrap_or(token))
                });
                spans.push(span);
            }
            offsets.push(spans);
            word_ids.push(e.get_word_ids()[..n].to_vec());
            texts.push(shown);
        }
        Ok(Encoded {
            tokens,
            ids,
            type_ids,
            valid,
            truncated,
            offsets,
            word_ids,
            texts,
            sentence_b_start,
        })
    }
}

/// A token as a person reads it: `span`, its part of the text, with a space before it where the
/// token carries one (byte-level BPE's `Ġ`, SentencePiece's `▁`) and the span has none.
fn token_text(token: &str, span: &str) -> String {
    let marker = |c: char| c == 'Ġ' || c == '▁';
    if token.chars().all(marker) {
        // the marker alone (SentencePiece's `▁` before a word it does not join): the space
        // itself, whatever span the tokenizer gave it
        return " ".repeat(token.chars().count());
    }
    let spaced = token.starts_with(marker);
    if spaced && !span.starts_with(char::is_whitespace) {
        format!(" {span}")
    } else {
        span.to_owned()
    }
}

/// `piece`'s bytes marked ([`marked_bytes`]) where they are not whole characters and its
/// decoding (`decode`, asked only then) wrote `�` that the piece does not hold: the piece's
/// alphabet encodes bytes (byte-level BPE, SentencePiece's byte pieces), not text (WordPiece's
/// `é`, whose bytes under GPT-2's alphabet would be one loose byte, decodes to itself).
fn partial(piece: &str, decode: impl FnOnce() -> Option<String>) -> Option<String> {
    let bytes = piece_bytes(piece)?;
    if std::str::from_utf8(&bytes).is_ok() || piece.contains('\u{FFFD}') {
        return None;
    }
    decode()?.contains('\u{FFFD}').then(|| marked_bytes(&bytes))
}

/// The bytes a vocabulary's piece stands for, where its alphabet encodes bytes: byte-level
/// BPE's (GPT-2's `bytes_to_unicode`: `Ġ` a space, `ð` `0xF0`) or SentencePiece's (`▁` a space,
/// `<0xF0>` a byte piece, the rest as UTF-8). `None` for a piece of neither (WordPiece's).
fn piece_bytes(piece: &str) -> Option<Vec<u8>> {
    if let Some(hex) = piece
        .strip_prefix("<0x")
        .and_then(|rest| rest.strip_suffix('>'))
    {
        return u8::from_str_radix(hex, 16).ok().map(|b| vec![b]);
    }
    if let Some(bytes) = piece.chars().map(byte_level).collect::<Option<Vec<u8>>>() {
        return Some(bytes);
    }
    piece
        .contains('▁')
        .then(|| piece.replace('▁', " ").into_bytes())
}

/// The byte GPT-2's byte-level alphabet writes as `c` (`bytes_to_unicode`: the printable bytes
/// as themselves, the other 68 as U+0100 onwards, in order).
fn byte_level(c: char) -> Option<u8> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let c = c as u32;
    if c < 256 {
        return printable(c).then_some(c as u8);
    }
    (0..=255u32)
        .filter(|&b| !printable(b))
        .nth((c - 256) as usize)
        .map(|b| b as u8)
}

/// `bytes` as text: each whole character as itself, each run of bytes that is not a whole
/// character as their values, marked: `[0x20, 0xF0, 0x9F]` → ` ‹F0 9F›`.
fn marked_bytes(bytes: &[u8]) -> String {
    let (mut text, mut loose) = (String::new(), Vec::new());
    let mark = |text: &mut String, loose: &mut Vec<u8>| {
        if !loose.is_empty() {
            let hex: Vec<String> = loose.iter().map(|b| format!("{b:02X}")).collect();
            text.push_str(&format!("‹{}›", hex.join(" ")));
            loose.clear();
        }
    };
    for chunk in bytes.utf8_chunks() {
        if !chunk.valid().is_empty() {
            mark(&mut text, &mut loose);
            text.push_str(chunk.valid());
        }
        loose.extend_from_slice(chunk.invalid());
    }
    mark(&mut text, &mut loose);
    text
}

/// `text` without its leading whitespace and cut to at most [`MAX_TEXT_BYTES`] at a character
/// boundary when it is longer, and whether it was cut. Text under the limit is left as it is.
fn cut(text: &str) -> (&str, bool) {
    if text.len() <= MAX_TEXT_BYTES {
        return (text, false);
    }
    let text = text.trim_start();
    let mut end = MAX_TEXT_BYTES.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], end < text.len())
}

/// Removes every `Precompiled` normaliser whose `precompiled_charsmap` is null (as tokenizers
/// converted from a SentencePiece model without normalisation rules have, opus-mt's among them):
/// a map of no rules changes nothing, but the tokenizers crate cannot read one that is null. In a
/// `Sequence` it is dropped from the list; as the whole normaliser, it becomes none.
fn drop_null_precompiled(json: &mut Value) {
    let is_null_precompiled = |v: &Value| {
        v.get("type").and_then(Value::as_str) == Some("Precompiled")
            && v.get("precompiled_charsmap").is_some_and(Value::is_null)
    };
    match json {
        Value::Array(items) => {
            items.retain(|v| !is_null_precompiled(v));
            items.iter_mut().for_each(drop_null_precompiled);
        }
        Value::Object(map) => {
            for v in map.values_mut() {
                if is_null_precompiled(v) {
                    *v = Value::Null;
                } else {
                    drop_null_precompiled(v);
                }
            }
        }
        _ => {}
    }
}

/// Refuses what the tokenizers crate (0.22) would panic on rather than report, found by
/// fuzzing (`fuzz/`, kept in `tests/fixtures/fuzz-regressions/`): a `TemplateProcessing`
/// post-processor (by its `type`, or any object with `special_tokens`) naming a special token it
/// does not define, whose ids and tokens differ in number, or whose single-sequence template uses
/// sequence B; and a `Precompiled` normaliser whose character map does not parse. Looks at every
/// component, nested ones included.
fn check_components(json: &Value) -> std::result::Result<(), String> {
    match json {
        Value::Array(items) => items.iter().try_for_each(check_components),
        Value::Object(map) => {
            // Recognised by type or by shape: the crate also reads an object with a misspelt
            // `type` as a `TemplateProcessing` when its fields fit.
            let is = |ty: &str, key: &str| {
                map.get("type").and_then(Value::as_str) == Some(ty) || map.contains_key(key)
            };
            if is("TemplateProcessing", "special_tokens") {
                check_template(map)?;
            }
            if is("Precompiled", "precompiled_charsmap") {
                serde_json::from_value::<tokenizers::normalizers::precompiled::Precompiled>(
                    json.clone(),
                )
                .map_err(|e| format!("normalizer Precompiled: {e}"))?;
            }
            map.values().try_for_each(check_components)
        }
        _ => Ok(()),
    }
}

/// See [`check_components`].
fn check_template(map: &serde_json::Map<String, Value>) -> std::result::Result<(), String> {
    let empty = serde_json::Map::new();
    let special = map
        .get("special_tokens")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (id, token) in special {
        let count = |key: &str| token.get(key).and_then(Value::as_array).map(Vec::len);
        if count("ids") != count("tokens") {
            return Err(format!(
                "post_processor TemplateProcessing: special token {id:?} has {} ids but {} tokens",
                count("ids").unwrap_or(0),
                count("tokens").unwrap_or(0)
            ));
        }
    }
    for template in ["single", "pair"] {
        let pieces = map
            .get(template)
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for piece in pieces {
            if let Some(id) = piece.pointer("/SpecialToken/id").and_then(Value::as_str) {
                if !special.contains_key(id) {
                    return Err(format!(
                        "post_processor TemplateProcessing: the {template} template uses special token {id:?}, which special_tokens does not define"
                    ));
                }
            }
            if template == "single" && piece.pointer("/Sequence/id") == Some(&Value::from("B")) {
                return Err(
                    "post_processor TemplateProcessing: the single template uses sequence B".into(),
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_level_alphabet_is_gpt2s() {
        // bytes_to_unicode: printable bytes as themselves, the rest from U+0100 in order
        assert_eq!(byte_level('a'), Some(b'a'));
        assert_eq!(byte_level('ð'), Some(0xF0));
        assert_eq!(byte_level('Ā'), Some(0x00));
        assert_eq!(byte_level('Ġ'), Some(b' '));
        assert_eq!(byte_level('Ċ'), Some(b'\n'));
        assert_eq!(byte_level('Ł'), Some(0x9F)); // U+0141
        assert_eq!(byte_level('Ń'), Some(0xAD)); // U+0143, the last of 68
        assert_eq!(byte_level('ń'), None);
        assert_eq!(byte_level('世'), None);
        let all: std::collections::BTreeSet<u8> = (0..=0x143u32)
            .filter_map(char::from_u32)
            .filter_map(byte_level)
            .collect();
        assert_eq!(all.len(), 256, "each byte written once");
    }

    #[test]
    fn bytes_that_are_not_a_whole_character_are_marked() {
        assert_eq!(marked_bytes(b" flies"), " flies");
        assert_eq!(marked_bytes(&[0x20, 0xF0, 0x9F]), " ‹F0 9F›");
        assert_eq!(marked_bytes(&[0x91, 0xA9]), "‹91 A9›");
        assert_eq!(marked_bytes(&[0xD7, 0xA9]), "ש");
        assert_eq!(marked_bytes(&[b'a', 0xE2, b'b']), "a‹E2›b");
        // a byte-level piece and a SentencePiece byte piece, each part of 👩 (F0 9F 91 A9)
        let decoded = |text: &str| {
            let text = text.to_owned();
            move || Some(text)
        };
        assert_eq!(
            partial("ĠðŁ", decoded(" \u{FFFD}")).as_deref(),
            Some(" ‹F0 9F›")
        );
        assert_eq!(
            partial("<0xF0>", decoded("\u{FFFD}")).as_deref(),
            Some("‹F0›")
        );
        // whole characters, and a decoder that wrote no �: not partial
        assert_eq!(partial("×©", decoded("ש")), None);
        assert_eq!(partial("é", decoded("é")), None);
        assert_eq!(partial("##ing", decoded("##ing")), None);
        // whole characters need no decoding
        assert_eq!(partial("Ġflies", || unreachable!("decoded")), None);
    }
}
