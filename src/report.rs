//! The JSON contract shared by the CLI (`attnscope attention`) and the browser
//! (`window.attnscope.result`):
//!
//! `{"model", "backend", "mask", "results": [{"text", "pair"?, "tokens", "token_ids", "truncated",
//!   "attention": [L][H][T][T], "hidden"?: [T][D], "scores"?: [L][H][T][T], "mask": [T][T], "logits"?}]}`

use ndarray::{s, ArrayViewD, Axis};
use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::engine::Trace;
use crate::masks::MaskKind;
use crate::model::Encoded;

/// Serialises an n-dimensional array as nested JSON arrays, without copying it.
pub struct Nested<'a, T>(pub ArrayViewD<'a, T>);

impl<T: Serialize + Copy> Serialize for Nested<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.ndim() == 0 {
            return self.0.iter().next().copied().serialize(s);
        }
        let mut seq = s.serialize_seq(Some(self.0.len_of(Axis(0))))?;
        for sub in self.0.outer_iter() {
            if sub.ndim() == 0 {
                seq.serialize_element(&sub.iter().next().copied())?;
            } else {
                seq.serialize_element(&Nested(sub))?;
            }
        }
        seq.end()
    }
}

/// What to include beyond tokens and attention.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportOptions {
    pub hidden: bool,
    pub scores: bool,
}

/// The report for one text of a batch.
#[derive(serde::Serialize)]
pub struct ItemReport<'a> {
    pub text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair: Option<&'a str>,
    pub tokens: &'a [String],
    pub token_ids: Vec<u32>,
    pub truncated: bool,
    /// `[L][H][T][T]`
    pub attention: Nested<'a, f32>,
    /// `[T][T]`, 1 where attending is allowed.
    pub mask: Vec<Vec<u8>>,
    /// `[T][D]`
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden: Option<Nested<'a, f32>>,
    /// `[L][H][T][T]`, `QKᵀ/√d_k` before the mask.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scores: Option<Nested<'a, f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logits: Option<Vec<f32>>,
}

/// The whole report.
#[derive(serde::Serialize)]
pub struct Report<'a> {
    pub model: &'a str,
    pub backend: &'a str,
    /// Why the CPU ran although the GPU was wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<&'a str>,
    pub mask: MaskKind,
    pub results: Vec<ItemReport<'a>>,
}

impl<'a> Report<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        model: &'a str,
        backend: &'a str,
        mask: MaskKind,
        texts: &'a [String],
        pair: Option<&'a str>,
        input: &'a Encoded,
        trace: &'a Trace,
        opts: ReportOptions,
    ) -> Self {
        let results = texts
            .iter()
            .enumerate()
            .map(|(b, text)| ItemReport {
                text,
                pair,
                tokens: &input.tokens[b],
                token_ids: input.ids.row(b).to_vec(),
                truncated: input.truncated[b],
                attention: Nested(trace.attention.slice(s![b, .., .., .., ..]).into_dyn()),
                mask: trace
                    .mask
                    .item(b)
                    .outer_iter()
                    .map(|r| r.iter().map(|&m| m as u8).collect())
                    .collect(),
                hidden: opts
                    .hidden
                    .then(|| Nested(trace.hidden.slice(s![b, .., ..]).into_dyn())),
                scores: trace
                    .scores
                    .as_ref()
                    .filter(|_| opts.scores)
                    .map(|sc| Nested(sc.slice(s![b, .., .., .., ..]).into_dyn())),
                logits: trace.logits.as_ref().map(|l| l.row(b).to_vec()),
            })
            .collect();
        Self {
            model,
            backend,
            fallback: None,
            mask,
            results,
        }
    }
}
