//! What each fuzz target does with its input, shared by the targets in `fuzz_targets/` (nightly,
//! libFuzzer) and by `tests/fuzz_regressions.rs` (stable), which replays every input a run
//! ever crashed on. Each function must return, never panic, whatever the bytes.

use std::sync::OnceLock;

use attnscope::engine::{check_input, cpu, translate, Decoding, TraceOptions};
use attnscope::model::TextTokenizer;
use attnscope::{Mask, MaskKind, Model};

const CONFIG: &[u8] = include_bytes!("../tests/fixtures/models/tiny-bert/config.json");
const WEIGHTS: &[u8] = include_bytes!("../tests/fixtures/models/tiny-bert/model.safetensors");
const TOKENIZER: &[u8] = include_bytes!("../tests/fixtures/models/tiny-bert/tokenizer.json");

/// Each family's committed tiny checkpoint: `(config.json, model.safetensors, tokenizer.json)`.
macro_rules! checkpoint {
    ($name:literal) => {
        (
            include_bytes!(concat!("../tests/fixtures/models/", $name, "/config.json")).as_slice(),
            include_bytes!(concat!(
                "../tests/fixtures/models/",
                $name,
                "/model.safetensors"
            ))
            .as_slice(),
            include_bytes!(concat!(
                "../tests/fixtures/models/",
                $name,
                "/tokenizer.json"
            ))
            .as_slice(),
        )
    };
}
const FAMILIES: [(&[u8], &[u8], &[u8]); 5] = [
    (CONFIG, WEIGHTS, TOKENIZER),
    checkpoint!("tiny-roberta"),
    checkpoint!("tiny-distilbert"),
    checkpoint!("tiny-gpt2"),
    checkpoint!("tiny-marian-f16"),
];

/// The committed tiny checkpoint (2 layers × 3 heads, hidden 24, 64 positions), loaded once.
fn tiny() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| {
        Model::from_bytes("tiny-bert", CONFIG, WEIGHTS, TOKENIZER).expect("tiny-bert loads")
    })
}

/// `model.safetensors` bytes → a model, with each family's tiny checkpoint's valid config and
/// tokenizer (every family's keys are looked for in the bytes).
pub fn weights(safetensors: &[u8]) {
    for (config, _, tokenizer) in FAMILIES {
        let _ = Model::from_bytes("fuzz", config, safetensors, tokenizer);
    }
}

/// `config.json` bytes → a model, with each family's tiny checkpoint's weights and tokenizer:
/// the config decides every shape read from the weights, so an absurd one must be refused first.
pub fn config(config_json: &[u8]) {
    for (_, weights, tokenizer) in FAMILIES {
        let _ = Model::from_bytes("fuzz", config_json, weights, tokenizer);
    }
}

/// `tokenizer.json` bytes → a tokenizer, then a few texts through it and, when they pass the
/// model's input check, the tiny checkpoint's forward pass (which must then succeed).
pub fn tokenizer(tokenizer_json: &[u8]) {
    let m = tiny();
    let Ok(tokenizer) = TextTokenizer::from_bytes(
        tokenizer_json,
        "tokenizer.json",
        m.config.max_position_embeddings,
        m.config.pad_token_id,
    ) else {
        return;
    };
    for (texts, pair) in [
        (&["time flies like an arrow"][..], None),
        (
            &["a cat", "the dog sat on the mat"][..],
            Some("it was happy"),
        ),
        (&["\u{200B}x\u{202E}😀 ok"][..], None),
    ] {
        let Ok(input) = tokenizer.encode(texts, pair) else {
            continue;
        };
        let mask = Mask::from_kind(MaskKind::Padding, input.valid.view());
        if check_input(&m.config, &input, &mask, &TraceOptions::default()).is_ok() {
            cpu::forward(m, &input, &mask, &TraceOptions::default()).expect("checked input runs");
        }
    }
}

/// The three files together → a model, then a padded batch through it under the causal mask
/// (an encoder–decoder model: translated, greedily and teacher-forced).
/// The input is `[config length: u32 LE][tokenizer length: u32 LE][config.json][tokenizer.json]
/// [model.safetensors]`, lengths past the end cut to what is there (`fuzz/seeds.py` writes seeds
/// in this form).
pub fn model(data: &[u8]) {
    let Some((lens, rest)) = data.split_first_chunk::<8>() else {
        return;
    };
    let len = |i: usize| u32::from_le_bytes([lens[i], lens[i + 1], lens[i + 2], lens[i + 3]]);
    let (config, rest) = rest.split_at((len(0) as usize).min(rest.len()));
    let (tokenizer, safetensors) = rest.split_at((len(4) as usize).min(rest.len()));
    let Ok(m) = Model::from_bytes("fuzz", config, safetensors, tokenizer) else {
        return;
    };
    if m.config.decoder.is_some() {
        let sources = ["time flies like an arrow", "hi"];
        let _ = translate(&m, &sources, &Decoding::Greedy { max_new_tokens: 4 });
        let start = m.config.decoder.as_ref().map_or(0, |d| d.start_token_id);
        let outputs = vec![vec![start, 3, 2, 1], vec![start, 0]];
        let _ = translate(&m, &sources, &Decoding::Forced(outputs));
        return;
    }
    let Ok(input) = m
        .tokenizer
        .encode(&["time flies like an arrow", "hi"], None)
    else {
        return;
    };
    let mask = Mask::from_kind(MaskKind::Causal, input.valid.view());
    let _ = cpu::forward(&m, &input, &mask, &TraceOptions::with_scores());
}

/// Text → tokens → mask → forward pass on the CPU engine with the tiny checkpoint. The first
/// byte picks the mask (padding, causal, none) and whether the last line is the pair; the
/// rest, as (lossy) UTF-8, is the texts, one per line. Whatever tokenises must run, and every
/// probability must be a number in [0, 1].
pub fn forward(data: &[u8]) {
    let Some((&flags, text)) = data.split_first() else {
        return;
    };
    let kind = [MaskKind::Padding, MaskKind::Causal, MaskKind::None][flags as usize % 3];
    let text = String::from_utf8_lossy(text);
    let mut lines: Vec<&str> = text.split('\n').collect();
    let pair = if flags & 4 != 0 && lines.len() > 1 {
        lines.pop()
    } else {
        None
    };
    let m = tiny();
    let Ok(input) = m.tokenizer.encode(&lines, pair) else {
        return;
    };
    let mask = Mask::from_kind(kind, input.valid.view());
    let trace = cpu::forward(m, &input, &mask, &TraceOptions::with_scores())
        .expect("what the tokenizer made runs");
    assert!(
        trace.attention.iter().all(|p| (0.0..=1.0).contains(p)),
        "a probability outside [0, 1]"
    );
}

/// GGUF bytes → the file's metadata and tensors; for each tensor its first and last rows
/// dequantized and, when it is small, its product with a row of ones (every tensor of a parsed
/// file lies inside it, so each of these must work); and its tokenizer, when it has one.
pub fn gguf(data: &[u8]) {
    use attnscope::model::gguf::GgufFile;
    use attnscope::model::gguf_tokenizer::{GgufTokenizer, SentencePiece};
    use attnscope::model::quant::SharedBytes;
    // a header read from the first bytes of a longer file (the page's and `from_path`'s way):
    // each family's reading of its config from the metadata
    if let Ok(head) = GgufFile::parse_header(data, data.len().saturating_mul(64), "fuzz.gguf") {
        let _ = attnscope::families::read_gguf_config(&head);
    }
    let Ok(file) = GgufFile::parse(data, "fuzz.gguf") else {
        return;
    };
    let _ = attnscope::families::read_gguf_config(&file);
    // each way a family builds a SentencePiece vocabulary
    for sentencepiece in [SentencePiece::Llama, SentencePiece::Gemma] {
        if let Ok(t) = GgufTokenizer::from_gguf(&file, sentencepiece) {
            let _ = TextTokenizer::from_json(t.json, "fuzz.gguf", 64, t.pad_token_id)
                .map(|t| t.encode(&["fuzz <s>  text"], None));
        }
    }
    let bytes: SharedBytes = std::sync::Arc::new(data.to_vec());
    for t in &file.tensors {
        let m = file
            .matrix(t, bytes.clone())
            .expect("a parsed tensor lies inside its file");
        let mut row = vec![0.0; m.cols()];
        m.dequantize_row(0, &mut row);
        m.dequantize_row(m.rows() - 1, &mut row);
        if m.rows() * m.cols() <= 1 << 16 {
            let ones = vec![1.0; m.cols()];
            let x = ndarray::ArrayView2::from_shape((1, m.cols()), &ones).expect("1 × cols");
            assert_eq!(m.matmul_t(x).dim(), (1, m.rows()));
        }
    }
}
