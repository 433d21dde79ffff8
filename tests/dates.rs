//! The dates → ISO model the repository ships (`models/dates`, trained by
//! `tools/train_dates.py`), run by attnscope's CPU engine on the held-out dates the training
//! never saw (`models/dates/heldout.json`, every form): the exact-match accuracy and how readable
//! its cross-attention is at the head it opens on, as the training script printed them.

use std::collections::BTreeMap;

use crate::common::*;
use attnscope::engine::{translate, Decoding};
use serde::Deserialize;

#[derive(Deserialize)]
struct HeldOut {
    source: String,
    target: String,
    form: String,
    /// Each field's character span in the source: `year`, `month`, `day`.
    spans: BTreeMap<String, [usize; 2]>,
}

#[test]
fn held_out_dates_convert_and_each_digit_reads_its_field() {
    let m = model("dates");
    let focus = m
        .config
        .decoder
        .as_ref()
        .and_then(|d| d.focus)
        .expect("the model names its head");
    let path = model_dir("dates").join("heldout.json");
    let held: Vec<HeldOut> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert!(held.len() >= 1000, "{} held-out dates", held.len());
    let (mut right, mut per_form) = (0, BTreeMap::<&str, (usize, usize)>::new());
    let (mut digits, mut in_field) = (0, 0);
    for chunk in held.chunks(4) {
        let sources: Vec<&str> = chunk.iter().map(|x| x.source.as_str()).collect();
        let tr = translate(m, &sources, &Decoding::Greedy { max_new_tokens: 16 }).unwrap();
        for (b, x) in chunk.iter().enumerate() {
            let ids = &tr.output_ids[b];
            let text = m.tokenizer.decode(ids);
            let ok = text == x.target;
            right += ok as usize;
            let f = per_form.entry(&x.form).or_default();
            f.0 += ok as usize;
            f.1 += 1;
            if !ok {
                continue;
            }
            // each source token's field, by its character span (the tokenizer's byte offsets:
            // the held-out sources are ASCII)
            let fields: Vec<Option<&str>> = tr.source.offsets[b]
                .iter()
                .map(|&(a, z)| {
                    x.spans
                        .iter()
                        .find(|(_, s)| z > a && a < s[1] && z > s[0])
                        .map(|(name, _)| name.as_str())
                })
                .collect();
            // step t wrote output_ids[t + 1]: YYYY-MM-DD, the digits at 0..4, 5..7, 8..10
            let wanted = [
                "year", "year", "year", "year", "", "month", "month", "", "day", "day",
            ];
            for (t, field) in wanted.iter().enumerate().filter(|(_, f)| !f.is_empty()) {
                // the focused head's row over the source, or its layer's mean over heads
                let heads = tr
                    .cross_attention
                    .slice(ndarray::s![b, focus.layer, .., t, ..]);
                let row = match focus.head {
                    Some(h) => heads.row(h).to_owned(),
                    None => heads.mean_axis(ndarray::Axis(0)).unwrap(),
                };
                let argmax = row
                    .iter()
                    .enumerate()
                    .fold(0, |best, (k, &v)| if v > row[best] { k } else { best });
                digits += 1;
                in_field += (fields.get(argmax).copied().flatten() == Some(field)) as usize;
            }
        }
    }
    let accuracy = right as f64 / held.len() as f64;
    let readable = in_field as f64 / digits as f64;
    for (form, (r, n)) in &per_form {
        eprintln!("{form:24} {:6.2} %", 100.0 * *r as f64 / *n as f64);
    }
    eprintln!("exact match {:.2} %, digits whose cross-attention argmax is in their field at {focus:?}: {:.1} %", 100.0 * accuracy, 100.0 * readable);
    assert!(accuracy >= 0.995, "exact match {accuracy}");
    assert!(
        readable >= 0.95,
        "the cross-attention at {focus:?} reads the digit's field for {readable} of the digits"
    );
}
