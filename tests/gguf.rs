//! The GGUF reader and ggml's block formats against the `gguf` package: every tensor of
//! `tests/fixtures/gguf/blocks.gguf` (written by `tools/make_gguf_blocks.py` with its
//! GGUFWriter) dequantizes to the package's own values to the bit, and `x · Wᵀ` from the
//! quantized bytes equals the product with those values; damaged and hostile files are refused,
//! never a panic, with an error naming the key or tensor at fault.

use std::sync::Arc;

use attnscope::model::gguf::{Array, GgufFile, Value};
use attnscope::model::quant::GgmlType;
use ndarray::Array2;

const GGUF: &[u8] = include_bytes!("fixtures/gguf/blocks.gguf");
const DEQUANTIZED: &[u8] = include_bytes!("fixtures/gguf/blocks.safetensors");

fn parse(bytes: &[u8]) -> attnscope::Result<GgufFile> {
    GgufFile::parse(bytes, "blocks.gguf")
}

fn err(bytes: &[u8]) -> String {
    parse(bytes).unwrap_err().to_string()
}

/// The package's dequantized values of tensor `name`, `(rows, cols)`.
fn reference(name: &str) -> Array2<f32> {
    let st = safetensors::SafeTensors::deserialize(DEQUANTIZED).unwrap();
    let t = st.tensor(name).unwrap();
    let v = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    Array2::from_shape_vec((t.shape()[0], t.shape()[1]), v).unwrap()
}

#[test]
fn the_metadata_is_the_writer_s() {
    let f = parse(GGUF).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.alignment, 64);
    assert_eq!(f.data_start % 64, 0);
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.get("test.u8"), Some(&Value::U8(200)));
    assert_eq!(f.get("test.i8"), Some(&Value::I8(-100)));
    assert_eq!(f.get_u32("test.u16").unwrap(), 60000);
    assert_eq!(f.get_i64("test.i16").unwrap(), -30000);
    assert_eq!(f.get_u32("test.u32").unwrap(), 4_000_000_000);
    assert_eq!(f.get_i64("test.i32").unwrap(), -2_000_000_000);
    assert_eq!(f.get_u64("test.u64").unwrap(), 1 << 40);
    assert_eq!(f.get_i64("test.i64").unwrap(), -(1 << 40));
    assert_eq!(f.get_f32("test.f32").unwrap(), 0.1);
    assert_eq!(f.get("test.f64"), Some(&Value::F64(0.1)));
    assert!(f.get_bool("test.bool").unwrap());
    assert_eq!(f.get_str("test.string").unwrap(), "blocks – ünïcode");
    assert_eq!(f.get_str_array("test.strings").unwrap(), ["a", "bc", "Ġd"]);
    assert_eq!(f.get_f32_array("test.floats").unwrap(), [0.5, -1.25]);
    assert_eq!(f.get_i32_array("test.ints").unwrap(), [1, -2, 3]);
    assert_eq!(
        f.get_array("test.nested").unwrap(),
        &Array::Array(vec![Array::I32(vec![1, 2]), Array::I32(vec![3])])
    );
    let e = f.get_u32("test.i32").unwrap_err().to_string();
    assert!(
        e.contains("metadata key `test.i32` is i32 -2000000000, expected an integer"),
        "{e}"
    );
    let e = f.get_str_array("test.floats").unwrap_err().to_string();
    assert!(
        e.contains("`test.floats` is array of 2 f32, expected an array of string"),
        "{e}"
    );
}

#[test]
fn every_type_dequantizes_to_the_package_s_values() {
    let f = parse(GGUF).unwrap();
    let bytes: Arc<Vec<u8>> = Arc::new(GGUF.to_vec());
    let mut types = Vec::new();
    for t in &f.tensors {
        let m = f.matrix(t, bytes.clone()).unwrap();
        let want = reference(&t.name);
        assert_eq!(m.dim(), want.dim(), "{}", t.name);
        let got = m.dequantize();
        for ((r, c), w) in want.indexed_iter() {
            let g = got[[r, c]];
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{} [{r}, {c}]: {g} vs {w}",
                t.name
            );
        }
        types.push(t.ty);
    }
    for ty in GgmlType::ALL {
        assert!(types.contains(&ty), "the fixture has no {ty} tensor");
    }
    let norm = f.tensor("norm").unwrap();
    assert_eq!(
        (norm.shape.as_slice(), norm.rows(), norm.cols()),
        (&[256][..], 1, 256)
    );
    let wide = f.tensor("Q4_K.wide").unwrap();
    assert_eq!(
        (wide.torch_shape(), wide.range.len()),
        (vec![2, 512], 2 * 2 * 144)
    );
}

#[test]
fn products_from_the_blocks_equal_the_dequantized_products() {
    let f = parse(GGUF).unwrap();
    let bytes: Arc<Vec<u8>> = Arc::new(GGUF.to_vec());
    for t in &f.tensors {
        let m = f.matrix(t, bytes.clone()).unwrap();
        let w = reference(&t.name);
        // 1: a decoding step; 7: a short prompt, row by row; 33: the tiled product
        for n in [1, 7, 33] {
            let x = Array2::from_shape_fn((n, m.cols()), |(i, j)| {
                ((i * 37 + j * 11) % 29) as f32 / 14.0 - 1.0
            });
            let got = m.matmul_t(x.view());
            assert_eq!(got.dim(), (n, m.rows()));
            for ((i, r), &g) in got.indexed_iter() {
                let (xi, wr) = (x.row(i), w.row(r));
                let terms = xi.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64);
                // the error of a sum of f32 products is relative to the sum of their sizes
                let want: f64 = terms.clone().sum();
                let scale: f64 = terms.map(f64::abs).sum();
                assert!(
                    (g as f64 - want).abs() <= 1e-4 * scale.max(1e-30),
                    "{} n={n} [{i}, {r}]: {g} vs {want}",
                    t.name
                );
            }
        }
    }
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let f = parse(GGUF).unwrap();
    let data_end = f.tensors.iter().map(|t| t.range.end).max().unwrap();
    for len in 0..GGUF.len() {
        let r = parse(&GGUF[..len]);
        // the writer pads the last tensor: only that padding may go
        assert_eq!(r.is_ok(), len >= data_end, "cut at {len} of {}", GGUF.len());
    }
}

/// Where `needle` first is in the fixture, and just after it.
fn find(needle: &[u8]) -> (usize, usize) {
    let at = GGUF
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| {
            panic!(
                "{:?} is not in the fixture",
                String::from_utf8_lossy(needle)
            )
        });
    (at, at + needle.len())
}

/// The fixture with `value` written at `at`.
fn with(at: usize, value: &[u8]) -> Vec<u8> {
    let mut b = GGUF.to_vec();
    b[at..at + value.len()].copy_from_slice(value);
    b
}

/// Where a key's or tensor's name ends in the fixture (its length, then its bytes).
fn after_name(name: &str) -> usize {
    let mut needle = (name.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(name.as_bytes());
    find(&needle).1
}

#[test]
fn hostile_counts_and_lengths_are_refused() {
    let e = err(&with(8, &u64::MAX.to_le_bytes()));
    assert!(
        e.contains("claims 18446744073709551615 tensors, over the limit"),
        "{e}"
    );
    let e = err(&with(8, &60000u64.to_le_bytes()));
    assert!(e.contains("claims 60000 tensors, more than its"), "{e}");
    let e = err(&with(16, &(1u64 << 40).to_le_bytes()));
    assert!(e.contains("metadata keys, over the limit"), "{e}");
    let e = err(&with(16, &5000u64.to_le_bytes()));
    assert!(e.contains("claims 5000 metadata keys, more than"), "{e}");
    // the first key's name
    let e = err(&with(24, &(1u64 << 40).to_le_bytes()));
    assert!(
        e.contains("metadata key 0's name (at byte 24) is 1099511627776 bytes"),
        "{e}"
    );
    // a string value: after its key, its type (u32) then its length
    let at = after_name("test.string") + 4;
    let e = err(&with(at, &(1u64 << 40).to_le_bytes()));
    assert!(
        e.contains("metadata key `test.string` is a string of 1099511627776 bytes, more than"),
        "{e}"
    );
    // an array: its type, its elements' type, then their count
    let at = after_name("test.strings") + 8;
    let e = err(&with(at, &(1u64 << 30).to_le_bytes()));
    assert!(
        e.contains("1073741824 string elements in metadata key `test.strings`, over the limit"),
        "{e}"
    );
    let e = err(&with(at, &(1u64 << 20).to_le_bytes()));
    assert!(
        e.contains("1048576 string elements in metadata key `test.strings`, more than"),
        "{e}"
    );
    let e = err(&with(after_name("test.u8"), &77u32.to_le_bytes()));
    assert!(
        e.contains("metadata key `test.u8` has unknown value type 77"),
        "{e}"
    );
}

#[test]
fn hostile_tensors_and_alignment_are_refused() {
    // a tensor's info: name, n_dims (u32), ne (u64 each), type (u32), offset (u64)
    let info = after_name("Q6_K");
    let e = err(&with(info + 4 + 16, &20u32.to_le_bytes()));
    assert!(
        e.contains("tensor `Q6_K` is IQ4_NL, a type attnscope does not read"),
        "{e}"
    );
    let e = err(&with(info + 4 + 16, &1000u32.to_le_bytes()));
    assert!(
        e.contains("tensor `Q6_K` has unknown ggml type 1000"),
        "{e}"
    );
    let e = err(&with(info, &9u32.to_le_bytes()));
    assert!(
        e.contains("tensor `Q6_K` has 9 dimensions, over ggml's 4"),
        "{e}"
    );
    let e = err(&with(info + 4, &100u64.to_le_bytes()));
    assert!(
        e.contains("tensor `Q6_K`: a Q6_K row is made of blocks of 256 values"),
        "{e}"
    );
    let e = err(&with(info + 4, &0u64.to_le_bytes()));
    assert!(e.contains("tensor `Q6_K` has a dimension that is 0"), "{e}");
    let mut dims = (1u64 << 40).to_le_bytes().to_vec();
    dims.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let e = err(&with(info + 4, &dims));
    assert!(
        e.contains("tensor `Q6_K` has shape [1099511627776, 1099511627776]"),
        "{e}"
    );
    let e = err(&with(info + 4 + 8, &(1u64 << 40).to_le_bytes()));
    assert!(
        e.contains("tensor `Q6_K` (") && e.contains("runs past the end"),
        "{e}"
    );
    let e = err(&with(info + 4 + 16 + 4, &(1u64 << 20).to_le_bytes()));
    assert!(
        e.contains("tensor `Q6_K` (840 bytes of Q6_K) at offset 1048576")
            && e.contains("runs past the end"),
        "{e}"
    );
    let e = err(&with(info + 4 + 16 + 4, &(u64::MAX - 63).to_le_bytes()));
    assert!(
        e.contains("tensor `Q6_K`") && e.contains("runs past the end"),
        "{e}"
    );
    let e = err(&with(info + 4 + 16 + 4, &33u64.to_le_bytes()));
    assert!(
        e.contains("tensor `Q6_K`'s offset 33 is not a multiple of the alignment 64"),
        "{e}"
    );
    // general.alignment: its type (u32) then its value
    let at = after_name("general.alignment") + 4;
    for bad in [0u32, 48, 3] {
        let e = err(&with(at, &bad.to_le_bytes()));
        assert!(
            e.contains(&format!(
                "`general.alignment` is u32 {bad}, not a power of two"
            )),
            "{e}"
        );
    }
}

/// The tokenizers of `tests/fixtures/gguf/tokenizer-*.gguf` (written by
/// `tools/make_gguf_tokenizer.py` as llama.cpp writes a "gpt2" vocabulary, with two splits, and a
/// SentencePiece one, without merges) give the ids `AutoTokenizer.from_pretrained(dir,
/// gguf_file=...)` gives, with its special ids.
#[test]
fn gguf_tokenizers_give_transformers_ids() {
    use attnscope::model::gguf_tokenizer::{GgufTokenizer, SentencePiece};
    use attnscope::model::TextTokenizer;

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf");
    let want: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tokenizer-ids.json")).unwrap()).unwrap();
    let texts: Vec<&str> = want["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for (name, add_bos, sentencepiece) in [
        ("tokenizer-llama-bpe.gguf", true, SentencePiece::Llama),
        ("tokenizer-gpt2.gguf", false, SentencePiece::Llama),
        ("tokenizer-sentencepiece.gguf", true, SentencePiece::Llama),
        // Gemma's way: spaces made ▁ without a prefix, runs of spaces respelled, merges in the
        // file's order (its scores reversed would give others), <start_of_turn> whole
        ("tokenizer-gemma.gguf", true, SentencePiece::Gemma),
    ] {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let file = GgufFile::parse(&bytes, name).unwrap();
        let t = GgufTokenizer::from_gguf(&file, sentencepiece).unwrap();
        let hf = &want[name];
        let texts: Vec<&str> = match hf.get("texts") {
            Some(own) => own
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect(),
            None => texts.clone(),
        };
        let id = |v: &serde_json::Value| v.as_u64().map(|i| i as u32);
        assert_eq!(t.bos_token_id, id(&hf["bos"]), "{name}");
        assert_eq!(t.eos_token_id, id(&hf["eos"]), "{name}");
        assert_eq!(t.pad_token_id, id(&hf["pad"]), "{name}");
        assert_eq!(
            (t.add_bos_token, t.add_eos_token),
            (add_bos, false),
            "{name}"
        );
        if !name.contains("sentencepiece") && !name.contains("gemma") {
            assert!(t.chat_template.as_deref().unwrap().contains("<|im_start|>"));
        }
        let json = serde_json::to_vec(&t.json).unwrap();
        let tokenizer = tokenizers::Tokenizer::from_bytes(&json).unwrap();
        for (text, ids) in texts.iter().zip(hf["ids"].as_array().unwrap()) {
            let got = tokenizer.encode(*text, true).unwrap().get_ids().to_vec();
            let ids: Vec<u32> = ids
                .as_array()
                .unwrap()
                .iter()
                .map(|i| id(i).unwrap())
                .collect();
            assert_eq!(got, ids, "{name}: {text:?}");
        }
        // the page's tokenizer takes the same JSON
        let text = TextTokenizer::from_bytes(&json, name, 64, t.pad_token_id).unwrap();
        // a chat template that writes the BOS itself (Llama 3's, Gemma's): one BOS, as HF's
        // apply_chat_template(…, tokenize=True) gives, though the file adds one to plain text
        if let (true, Some(bos)) = (add_bos, t.bos_token_id) {
            let written = format!("{}hi", text.token(bos));
            let count = |e: &attnscope::model::Encoded| e.ids.iter().filter(|&&i| i == bos).count();
            let plain = text.encode(&[&written], None).unwrap();
            let chat = text
                .encode_as(
                    &[&written],
                    None,
                    attnscope::model::tokenizer::Specials::InText,
                )
                .unwrap();
            assert_eq!((count(&plain), count(&chat)), (2, 1), "{name}");
            assert_eq!(chat.ids[[0, 0]], bos, "{name}");
        }
    }
}

#[test]
fn other_gguf_tokenizers_are_refused_by_name() {
    use attnscope::model::gguf_tokenizer::{GgufTokenizer, SentencePiece};
    // the blocks fixture has no tokenizer: the missing key is named
    let e = GgufTokenizer::from_gguf(&parse(GGUF).unwrap(), SentencePiece::Llama).unwrap_err();
    assert!(
        e.to_string()
            .contains("missing metadata key `tokenizer.ggml.model`"),
        "{e}"
    );
    // llama.cpp's RWKV vocabulary, in place of "gpt2"
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf");
    let mut bytes = std::fs::read(dir.join("tokenizer-gpt2.gguf")).unwrap();
    let key = b"tokenizer.ggml.model\x08\0\0\0\x04\0\0\0\0\0\0\0gpt2";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len() - 4;
    bytes[at..at + 4].copy_from_slice(b"rwkv");
    let e = GgufTokenizer::from_gguf(
        &GgufFile::parse(&bytes, "t.gguf").unwrap(),
        SentencePiece::Llama,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("`tokenizer.ggml.model` is \"rwkv\", a tokenizer attnscope does not build"),
        "{e}"
    );
}
