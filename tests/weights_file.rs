//! A checkpoint's f32 matrices are read in place from its `WeightsFile` (shared, not copied),
//! and a file whose tensors are not word-aligned still loads, with the same values.

use std::ops::Range;

use crate::common::{bert, model_dir};
use attnscope::model::WeightsFile;
use attnscope::Model;

fn tiny_file(f: &str) -> Vec<u8> {
    std::fs::read(model_dir("tiny-bert").join(f)).unwrap()
}

fn load(weights: &WeightsFile) -> Model {
    Model::load(
        "tiny-bert",
        &tiny_file("config.json"),
        weights,
        &tiny_file("tokenizer.json"),
    )
    .unwrap()
}

fn inside(p: *const f32, r: &Range<usize>) -> bool {
    r.contains(&(p as usize))
}

/// The tiny checkpoint (stored as f16) rewritten as f32, every tensor at a word boundary, or
/// with `pad` a 2-byte tensor first, so that every f32 tensor after it starts 2 bytes off one.
fn tiny_f32(pad: bool) -> Vec<u8> {
    let bytes = tiny_file("model.safetensors");
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    if pad {
        data.extend_from_slice(&[7, 9]);
        header.insert(
            "aaa.pad".into(),
            serde_json::json!({"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}),
        );
    }
    let mut names = st.names();
    names.sort();
    for name in names {
        let t = st.tensor(name).unwrap();
        assert_eq!(t.dtype(), safetensors::Dtype::F16, "{name}");
        let start = data.len();
        for h in t.data().chunks_exact(2) {
            data.extend_from_slice(
                &half::f16::from_le_bytes([h[0], h[1]])
                    .to_f32()
                    .to_le_bytes(),
            );
        }
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": t.shape(), "data_offsets": [start, data.len()]}),
        );
    }
    let mut json = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    while !(8 + json.len()).is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&data);
    out
}

/// The weights file's byte span, and the model loaded from it.
fn loaded(bytes: &[u8]) -> (WeightsFile, Range<usize>, Model) {
    let file = WeightsFile::from_bytes(bytes, "model.safetensors").unwrap();
    let r = file.bytes().as_ptr_range();
    let span = r.start as usize..r.end as usize;
    let m = load(&file);
    (file, span, m)
}

#[test]
fn a_model_shares_its_f32_matrices_with_the_weights_file() {
    let (_file, span, m) = loaded(&tiny_f32(false));
    let w = bert(&m).unwrap();
    assert!(inside(
        w.embeddings.word.weight.as_f32().unwrap().as_ptr(),
        &span
    ));
    assert!(inside(
        w.embeddings.position.weight.as_f32().unwrap().as_ptr(),
        &span
    ));
    for layer in &w.layers {
        for l in [
            &layer.attention.query,
            &layer.attention.key,
            &layer.attention.value,
        ]
        .into_iter()
        .chain([&layer.attention.output, &layer.intermediate, &layer.output])
        {
            assert!(inside(l.weight.as_f32().unwrap().as_ptr(), &span));
        }
    }
    // the same values as the f16 file gives (f16 → f32 is exact)
    let f16 = Model::from_dir(model_dir("tiny-bert")).unwrap();
    assert_eq!(
        w.embeddings.word.weight,
        bert(&f16).unwrap().embeddings.word.weight
    );
    assert_eq!(
        w.layers[1].intermediate.weight,
        bert(&f16).unwrap().layers[1].intermediate.weight
    );
    assert_eq!(
        w.layers[1].intermediate.bias,
        bert(&f16).unwrap().layers[1].intermediate.bias
    );
    // and the same attention
    let run = |m: &Model| {
        let input = m
            .tokenizer
            .encode(&["the cat sat on the mat"], None)
            .unwrap();
        let mask = attnscope::masks::Mask::from_kind(
            attnscope::masks::MaskKind::Padding,
            input.valid.view(),
        );
        let opts = attnscope::engine::TraceOptions::default();
        attnscope::engine::cpu::forward(m, &input, &mask, &opts)
            .unwrap()
            .attention
    };
    assert_eq!(run(&m), run(&f16));
}

#[test]
fn an_unaligned_file_loads_the_same_values_by_copying_them() {
    let (_file, span, m) = loaded(&tiny_f32(true));
    let f16 = Model::from_dir(model_dir("tiny-bert")).unwrap();
    assert!(!inside(
        bert(&m)
            .unwrap()
            .embeddings
            .word
            .weight
            .as_f32()
            .unwrap()
            .as_ptr(),
        &span
    ));
    assert_eq!(
        bert(&m).unwrap().embeddings.word.weight,
        bert(&f16).unwrap().embeddings.word.weight
    );
    for (a, b) in bert(&m)
        .unwrap()
        .layers
        .iter()
        .zip(&bert(&f16).unwrap().layers)
    {
        assert!(!inside(
            a.attention.query.weight.as_f32().unwrap().as_ptr(),
            &span
        ));
        assert_eq!(a.attention.query.weight, b.attention.query.weight);
        assert_eq!(a.output.weight, b.output.weight);
        assert_eq!(a.output_norm.weight, b.output_norm.weight);
    }
}

#[test]
fn a_weights_file_over_the_limit_is_refused_unallocated() {
    let n = attnscope::model::limits::MAX_WEIGHTS_BYTES + 1;
    let e = WeightsFile::zeroed(n, "up/model.safetensors")
        .err()
        .unwrap()
        .to_string();
    assert!(e.starts_with("up/model.safetensors: "), "{e}");
    assert!(
        e.contains(&format!("the file is {n} bytes, over the limit of")),
        "{e}"
    );
}
