//! What each head does, scored on a text that repeats a sequence of `N` tokens (its period): a
//! head that reads the previous token, one that parks its weight on the first position (the
//! attention sink, Xiao et al. 2023), an induction head that finds the token's earlier copy and
//! reads the token after it (Olsson et al. 2022), and a duplicate-token head that reads the copy
//! itself. With `p = start + i` the position of the text's `i`-th token (counted after any BOS or
//! `[CLS]` the tokenizer adds), `n` the text's tokens (up to any `[SEP]` after them) and `α` a
//! head's attention:
//!
//! * `previous_token` = mean over `1 ≤ i < n` of `α(p, p − 1)`
//! * `sink` = mean over `0 ≤ i < n` of `α(p, 0)` (position 0: the BOS where there is one)
//! * `induction` = mean over the second repeat, `N ≤ i < 2N`, of `α(p, p − N + 1)`
//! * `duplicate_token` = mean over the second repeat of `α(p, p − N)`

use ndarray::Array2;

use super::ItemAttention;
use crate::error::{Error, Result};
use crate::model::Encoded;

/// Where a text's repeated sequence stands: its first token's position, its length and its
/// period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Repeated {
    /// The position of the text's first token: after the special tokens the tokenizer put
    /// before it (BOS, `[CLS]`), 0 where it put none.
    pub start: usize,
    /// `n`: the text's tokens, at least two repeats.
    pub len: usize,
    /// `N`, in tokens.
    pub period: usize,
}

impl Repeated {
    /// Item `b` of `input`, read as a sequence of `period` tokens repeated: an error unless its
    /// text has two repeats, token for token, saying which token breaks the pattern. The text's
    /// first token may be its copy's word without the space before it: a byte-level or
    /// SentencePiece tokenizer makes `the` and ` the` two tokens, and only the first word of a
    /// text has no space before it.
    pub fn find(input: &Encoded, b: usize, period: usize) -> Result<Self> {
        let (start, n) = Self::text(input, b);
        if period == 0 || n < 2 * period {
            return Err(Error::Input(format!(
                "the head roles read a text that repeats a sequence of {period} tokens at least \
                 twice: this text has {n} tokens{}",
                if start > 0 {
                    format!(" after the {start} the tokenizer puts first")
                } else {
                    String::new()
                }
            )));
        }
        let tokens = &input.tokens[b];
        if let Some(i) = (period..2 * period).find(|&i| !Self::copies(input, b, start, i, period)) {
            return Err(Error::Input(format!(
                "the text does not repeat with a period of {period} tokens: its token {i} \
                 ({:?}) is not its token {} ({:?}); counted after the {start} special token(s) \
                 the tokenizer puts first",
                tokens[start + i],
                i - period,
                tokens[start + i - period]
            )));
        }
        Ok(Self {
            start,
            len: n,
            period,
        })
    }

    /// Item `b`'s repeat with the longest period, the one that covers most of its text (`a b a
    /// b a b a b` is `a b a b` twice); `None` when its text does not begin with two repeats of
    /// any sequence (the page asks each run, and shows the roles only where there is one).
    pub fn detect(input: &Encoded, b: usize) -> Option<Self> {
        let (start, n) = Self::text(input, b);
        (1..=n / 2)
            .rev()
            .find(|&period| (period..2 * period).all(|i| Self::copies(input, b, start, i, period)))
            .map(|period| Self {
                start,
                len: n,
                period,
            })
    }

    /// Item `b`'s text: the position of its first token (after the special tokens before it)
    /// and its tokens, up to the next special one (`[SEP]`, padding after it).
    fn text(input: &Encoded, b: usize) -> (usize, usize) {
        let words = &input.word_ids[b];
        let start = words.iter().take_while(|w| w.is_none()).count();
        let n = words[start..].iter().take_while(|w| w.is_some()).count();
        (start, n)
    }

    /// Whether the text's token `i` is a copy of its token `i − period`: the same id, or, for
    /// the text's first token, the same word but for the space before it.
    fn copies(input: &Encoded, b: usize, start: usize, i: usize, period: usize) -> bool {
        let (p, q) = (start + i, start + i - period);
        let ids = input.ids.row(b);
        if ids[p] == ids[q] {
            return true;
        }
        let tokens = &input.tokens[b];
        i == period
            && !tokens[q].is_empty()
            && tokens[p].trim_start_matches(['Ġ', '▁', ' ']) == tokens[q]
    }
}

/// Every head's four role scores for one text (see the module's documentation).
///
/// # Shapes
/// * every field: `(L, H)`
#[derive(Debug, Clone, PartialEq)]
pub struct HeadRoles {
    pub previous_token: Array2<f32>,
    pub sink: Array2<f32>,
    pub induction: Array2<f32>,
    pub duplicate_token: Array2<f32>,
}

/// The names of [`HeadRoles`]' fields, in the order [`HeadRoles::all`] gives them.
pub const ROLES: [&str; 4] = ["previous_token", "sink", "induction", "duplicate_token"];

impl HeadRoles {
    /// Scores every head of one text whose tokens `repeated` describes (computing each head
    /// from the pass's queries and keys in turn, where the pass kept those).
    pub fn of(item: &ItemAttention, repeated: Repeated) -> Result<Self> {
        let (l, h) = item.layers_heads();
        let Repeated { start, len, period } = repeated;
        let text = start..start + len;
        let second = start + period..start + 2 * period;
        if period == 0 || len < 2 * period || text.end > item.valid.len() {
            return Err(Error::Input(format!(
                "the head roles need two repeats of {period} tokens in the {len} from position \
                 {start}: the pass has {} positions",
                item.valid.len()
            )));
        }
        let mean = |sum: f64, n: usize| (sum / n as f64) as f32;
        let mut out = [(); 4].map(|_| Array2::<f32>::zeros((l, h)));
        for li in 0..l {
            for hi in 0..h {
                let (a, _) = item.head(li, hi)?; // (T, T)
                let previous: f64 = text.clone().skip(1).map(|p| a[[p, p - 1]] as f64).sum();
                let sink: f64 = text.clone().map(|p| a[[p, 0]] as f64).sum();
                let induction: f64 = second.clone().map(|p| a[[p, p - period + 1]] as f64).sum();
                let duplicate: f64 = second.clone().map(|p| a[[p, p - period]] as f64).sum();
                out[0][[li, hi]] = mean(previous, len - 1);
                out[1][[li, hi]] = mean(sink, len);
                out[2][[li, hi]] = mean(induction, period);
                out[3][[li, hi]] = mean(duplicate, period);
            }
        }
        let [previous_token, sink, induction, duplicate_token] = out;
        Ok(Self {
            previous_token,
            sink,
            induction,
            duplicate_token,
        })
    }

    /// `(name, values)` for every role, in [`ROLES`] order.
    pub fn all(&self) -> [(&'static str, &Array2<f32>); 4] {
        let [p, s, i, d] = ROLES;
        [
            (p, &self.previous_token),
            (s, &self.sink),
            (i, &self.induction),
            (d, &self.duplicate_token),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{ItemHeads, SpecialIds};
    use ndarray::{Array1, Array4};

    /// Four heads over `[BOS] a b c a b c`, each exactly one role: every query reads one key.
    #[test]
    fn a_head_that_is_exactly_one_role_scores_one_on_it() {
        let (start, period) = (1, 3);
        let len = 2 * period;
        let t = start + len;
        let mut probs = Array4::<f32>::zeros((1, 4, t, t));
        for q in 0..t {
            // the previous token (the first row reads itself), the first position, the token
            // after the earlier copy and the copy itself (the first repeat reads itself)
            let later = q >= start + period;
            let keys = [
                q.saturating_sub(1),
                0,
                if later { q - period + 1 } else { q },
                if later { q - period } else { q },
            ];
            for (h, k) in keys.into_iter().enumerate() {
                probs[[0, h, q, k]] = 1.0;
            }
        }
        let (ids, valid) = (Array1::<u32>::zeros(t), Array1::from_elem(t, true));
        let item = ItemAttention {
            heads: ItemHeads::Kept {
                probs: probs.view(),
                scores: None,
            },
            ids: ids.view(),
            valid: valid.view(),
            special: SpecialIds::default(),
        };
        let roles = HeadRoles::of(&item, Repeated { start, len, period }).unwrap();
        for (r, (name, values)) in roles.all().into_iter().enumerate() {
            assert_eq!(values[[0, r]], 1.0, "{name} of head {r}");
        }
        // the others score what they read by the way: the previous-token head reads position 0
        // from the text's first token alone (1 of 6); the sink head never the previous token
        assert_eq!(roles.sink[[0, 0]], 1.0 / 6.0);
        assert_eq!(roles.previous_token[[0, 1]], 0.0);
        assert_eq!(roles.duplicate_token[[0, 2]], 0.0);
        assert_eq!(roles.induction[[0, 3]], 0.0);
        // two repeats of 4 are not in 6 tokens
        let period = 4;
        assert!(HeadRoles::of(&item, Repeated { start, len, period }).is_err());
    }

    /// `[CLS]` and the tokens given, their ids by their text (`Ġ` a space before), `[SEP]`.
    fn encoded(tokens: &[&str]) -> Encoded {
        let all: Vec<String> = ["[CLS]"]
            .iter()
            .chain(tokens)
            .chain(&["[SEP]"])
            .map(|t| t.to_string())
            .collect();
        let n = all.len();
        let mut seen: Vec<&str> = vec![];
        let ids = all
            .iter()
            .map(|t| match seen.iter().position(|s| s == t) {
                Some(i) => i as u32,
                None => {
                    seen.push(t);
                    seen.len() as u32 - 1
                }
            })
            .collect();
        let word = |i: usize| (i > 0 && i + 1 < n).then_some(i as u32);
        Encoded {
            ids: ndarray::Array2::from_shape_vec((1, n), ids).unwrap(),
            type_ids: ndarray::Array2::zeros((1, n)),
            valid: ndarray::Array2::from_elem((1, n), true),
            truncated: vec![false],
            offsets: vec![vec![(0, 0); n]],
            word_ids: vec![(0..n).map(word).collect()],
            texts: vec![all.clone()],
            tokens: vec![all],
            sentence_b_start: vec![None],
        }
    }

    /// The longest period is found; a first word without its space counts as its copy; a text
    /// that does not begin with two repeats has none, and `find` names the token at fault.
    #[test]
    fn a_repeat_is_found_by_its_longest_period() {
        let input = encoded(&["a", "Ġb", "Ġa", "Ġb", "Ġa", "Ġb", "Ġa", "Ġb", "Ġc"]);
        let found = Repeated::detect(&input, 0).unwrap();
        assert_eq!(
            found,
            Repeated {
                start: 1,
                len: 9,
                period: 4
            }
        );
        assert_eq!(Repeated::find(&input, 0, 2).unwrap().period, 2);
        // "the cat the cat": the first word has no space before it, its copy has
        let input = encoded(&["the", "Ġcat", "Ġthe", "Ġcat"]);
        assert_eq!(Repeated::detect(&input, 0).map(|r| r.period), Some(2));
        // a text that does not repeat from its start; one whose second repeat is cut short
        for tokens in [
            &["Ġx", "Ġa", "Ġb", "Ġa", "Ġb"][..],
            &["Ġa", "Ġb", "Ġc", "Ġa", "Ġb"],
        ] {
            assert_eq!(Repeated::detect(&encoded(tokens), 0), None, "{tokens:?}");
        }
        let e = Repeated::find(&encoded(&["Ġa", "Ġb", "Ġa", "Ġc"]), 0, 2).unwrap_err();
        assert!(
            e.to_string()
                .contains("its token 3 (\"Ġc\") is not its token 1 (\"Ġb\")"),
            "{e}"
        );
    }
}
