//! Each token read alone as HF reads it (tests/fixtures/golden/token_texts.json, from
//! tools/make_token_texts.py: HF tokenizers' `decode([id])` over every token of byte-level BPE,
//! SentencePiece and WordPiece vocabularies), but where HF writes `�` for a token that holds part
//! of a character: attnscope writes those bytes, marked (`‹F0 9F›`).

use crate::common::*;
use attnscope::model::TextTokenizer;
use serde_json::Value;

/// The bytes a marked text stands for: its characters' UTF-8, each `‹F0 9F›` the bytes it names.
fn bytes_of(shown: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = shown;
    while let Some(at) = rest.find('‹') {
        out.extend_from_slice(&rest.as_bytes()[..at]);
        let end = rest[at..].find('›').expect("a mark closes") + at;
        for hex in rest[at + '‹'.len_utf8()..end].split(' ') {
            out.push(u8::from_str_radix(hex, 16).expect("two hex digits"));
        }
        rest = &rest[end + '›'.len_utf8()..];
    }
    out.extend_from_slice(rest.as_bytes());
    out
}

#[test]
fn every_token_reads_as_hfs_decode_and_a_part_of_a_character_as_its_bytes() {
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/golden/token_texts.json")).unwrap(),
    )
    .unwrap();
    let mut partial = 0;
    for (name, rows) in golden["models"].as_object().unwrap() {
        let bytes = std::fs::read(model_dir(name).join("tokenizer.json")).unwrap();
        let tok = TextTokenizer::from_bytes(&bytes, "tokenizer.json", 64, None).unwrap();
        for row in rows.as_array().unwrap() {
            let (id, token, hf) = (
                row[0].as_u64().unwrap() as u32,
                row[1].as_str().unwrap(),
                row[2].as_str().unwrap(),
            );
            assert_eq!(tok.token(id), token, "{name}: id {id}");
            let ours = tok.text_of(id);
            if hf.contains('\u{FFFD}') && !token.contains('\u{FFFD}') {
                // a part of a character: its bytes, marked, and nothing HF would not write
                partial += 1;
                assert!(
                    ours.contains('‹') && !ours.contains('\u{FFFD}'),
                    "{name}: {token:?} → {ours:?}"
                );
                let whole: String = hf.chars().filter(|&c| c != '\u{FFFD}').collect();
                let got = bytes_of(&ours);
                assert!(
                    std::str::from_utf8(&got).is_err()
                        && String::from_utf8_lossy(&got).replace('\u{FFFD}', "") == whole,
                    "{name}: {token:?} → {ours:?}, HF {hf:?}"
                );
            } else if token.starts_with('▁') && !hf.starts_with(char::is_whitespace) {
                // SentencePiece's decoder strips the space of a text's first token: a token
                // alone keeps it
                assert_eq!(ours, format!(" {hf}"), "{name}: id {id} {token:?}");
            } else {
                assert_eq!(ours, hf, "{name}: id {id} {token:?}");
            }
        }
    }
    assert!(
        partial > 50,
        "the vocabularies hold parts of characters: {partial}"
    );
}

#[test]
fn an_emoji_split_across_tokens_shows_each_tokens_bytes_and_reads_back_whole() {
    // 👩 is F0 9F 91 A9: the byte-level vocabulary has no token for it whole
    let m = model("tiny-gpt2");
    let e = m.tokenizer.encode(&["hi 👩‍🔬 ×©"], None).unwrap();
    let texts = &e.texts[0];
    assert!(texts.iter().any(|t| t.contains('‹')), "{texts:?}");
    assert!(texts.iter().all(|t| !t.contains('\u{FFFD}')), "{texts:?}");
    let all: Vec<u8> = texts.iter().flat_map(|t| bytes_of(t)).collect();
    assert_eq!(String::from_utf8(all).unwrap(), "hi 👩‍🔬 ×©");
}
