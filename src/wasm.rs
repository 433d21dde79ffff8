//! The browser API (`#[wasm_bindgen]`): the only place errors become `JsError`.
//!
//! The page's worker loads a checkpoint from three byte buffers, then runs texts; results come
//! back as flat `Float32Array`s with their shapes, which the page views as
//! `[layer][head][query][key]` without copying.

use js_sys::{Array, Float32Array, Object, Reflect};
use wasm_bindgen::prelude::*;
use web_time::Instant;

use crate::engine::{cpu, BackendChoice, Runner, TraceOptions};
use crate::masks::{Mask, MaskKind};
use crate::model::{Encoded, Model};

fn js_err(e: crate::Error) -> JsError {
    JsError::new(&e.to_string())
}

fn set(obj: &Object, key: &str, value: impl Into<JsValue>) -> Result<(), JsError> {
    Reflect::set(obj, &key.into(), &value.into())
        .map(|_| ())
        .map_err(|_| JsError::new(&format!("cannot set {key}")))
}

fn strings(items: impl IntoIterator<Item = impl AsRef<str>>) -> Array {
    items
        .into_iter()
        .map(|s| JsValue::from_str(s.as_ref()))
        .collect()
}

/// A loaded model and the engine that runs it.
#[wasm_bindgen]
pub struct Session {
    model: Model,
    runner: Runner,
}

/// Loads a checkpoint from its three files; `backend` is `cpu`, `gpu` or `auto`.
#[wasm_bindgen(js_name = loadSession)]
pub async fn load_session(
    name: String,
    config_json: Vec<u8>,
    safetensors: Vec<u8>,
    tokenizer_json: Vec<u8>,
    backend: String,
) -> Result<Session, JsError> {
    let choice: BackendChoice = backend.parse().map_err(js_err)?;
    let model =
        Model::from_bytes(&name, &config_json, &safetensors, &tokenizer_json).map_err(js_err)?;
    let runner = Runner::new(&model, choice).await.map_err(js_err)?;
    Ok(Session { model, runner })
}

impl Session {
    /// Tokenises a batch (each text paired with `pair` when it is not blank) and builds its mask.
    fn prepare(
        &self,
        texts: &[String],
        pair: Option<String>,
        mask: &str,
    ) -> Result<(Encoded, Mask), JsError> {
        let kind: MaskKind = mask.parse().map_err(js_err)?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let pair = pair.filter(|p| !p.trim().is_empty());
        let input = self
            .model
            .tokenizer
            .encode(&refs, pair.as_deref())
            .map_err(js_err)?;
        let mask = Mask::from_kind(kind, input.valid.view());
        Ok((input, mask))
    }
}

#[wasm_bindgen]
impl Session {
    /// What runs: `cpu` or `gpu: <adapter> (WebGPU)`.
    pub fn backend(&self) -> String {
        self.runner.describe()
    }

    /// Why the GPU is not used although it was wanted, if so.
    pub fn unavailable(&self) -> Option<String> {
        self.runner.unavailable().map(str::to_owned)
    }

    /// `{name, layers, heads, hidden, maxLength, headDim}`
    pub fn info(&self) -> Result<JsValue, JsError> {
        let c = &self.model.config;
        let o = Object::new();
        set(&o, "name", self.model.short_name())?;
        set(&o, "layers", c.num_hidden_layers as u32)?;
        set(&o, "heads", c.num_attention_heads as u32)?;
        set(&o, "hidden", c.hidden_size as u32)?;
        set(&o, "headDim", c.head_dim() as u32)?;
        set(&o, "maxLength", c.max_position_embeddings as u32)?;
        Ok(o.into())
    }

    /// Runs `texts` (one right-padded batch; each paired with `pair` when given) under `mask`
    /// (`padding`, `causal` or `none`). Returns `{tokens: string[][], tokenIds, truncated,
    /// backend, fallback, elapsedMs, shape: [B, L, H, T, T], attention: Float32Array,
    /// scores: Float32Array, mask: Uint8Array (B, T, T)}`.
    pub async fn run(
        &self,
        texts: Vec<String>,
        pair: Option<String>,
        mask: String,
    ) -> Result<JsValue, JsError> {
        let (input, mask) = self.prepare(&texts, pair, &mask)?;
        let run = self
            .runner
            .forward(&self.model, &input, &mask, TraceOptions { scores: true })
            .await
            .map_err(js_err)?;
        let t = &run.trace;
        let o = Object::new();
        set(
            &o,
            "tokens",
            input
                .tokens
                .iter()
                .map(|ts| JsValue::from(strings(ts)))
                .collect::<Array>(),
        )?;
        let ids: Array = input
            .ids
            .outer_iter()
            .map(|r| JsValue::from(r.iter().map(|&i| JsValue::from(i)).collect::<Array>()))
            .collect();
        set(&o, "tokenIds", ids)?;
        set(
            &o,
            "truncated",
            input
                .truncated
                .iter()
                .map(|&b| JsValue::from(b))
                .collect::<Array>(),
        )?;
        set(&o, "backend", run.backend.as_str())?;
        set(
            &o,
            "fallback",
            run.fallback
                .as_deref()
                .map_or(JsValue::NULL, JsValue::from_str),
        )?;
        set(&o, "elapsedMs", run.elapsed_ms)?;
        set(
            &o,
            "shape",
            t.attention
                .shape()
                .iter()
                .map(|&d| JsValue::from(d as u32))
                .collect::<Array>(),
        )?;
        let flat = |a: &ndarray::Array5<f32>| {
            Float32Array::from(a.as_standard_layout().as_slice().unwrap_or(&[]))
        };
        set(&o, "attention", flat(&t.attention))?;
        if let Some(s) = &t.scores {
            set(&o, "scores", flat(s))?;
        }
        let m: Vec<u8> = t.mask.0.iter().map(|&b| b as u8).collect();
        set(&o, "mask", js_sys::Uint8Array::from(m.as_slice()))?;
        if let Some(l) = &t.logits {
            set(
                &o,
                "logits",
                Float32Array::from(l.as_standard_layout().as_slice().unwrap_or(&[])),
            )?;
        }
        Ok(o.into())
    }

    /// Runs the same input on both engines: `{maxAbsDiff, cpuMs, otherMs, other}`.
    pub async fn check(
        &self,
        texts: Vec<String>,
        pair: Option<String>,
        mask: String,
    ) -> Result<JsValue, JsError> {
        let (input, mask) = self.prepare(&texts, pair, &mask)?;
        let start = Instant::now();
        let c =
            cpu::forward(&self.model, &input, &mask, TraceOptions::default()).map_err(js_err)?;
        let cpu_ms = start.elapsed().as_secs_f64() * 1e3;
        let other = self
            .runner
            .forward(&self.model, &input, &mask, TraceOptions::default())
            .await
            .map_err(js_err)?;
        let diff = c
            .attention
            .iter()
            .zip(other.trace.attention.iter())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let o = Object::new();
        set(&o, "maxAbsDiff", diff)?;
        set(&o, "cpuMs", cpu_ms)?;
        set(&o, "otherMs", other.elapsed_ms)?;
        set(&o, "other", other.backend.as_str())?;
        Ok(o.into())
    }
}
