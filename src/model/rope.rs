//! Rotary position embeddings (RoPE) as a config describes them: the base θ, the dimensions
//! turned, and how a long-context model rescales its frequencies (`rope_type`).
//!
//! A config gives them in one of two forms, and [`RopeJson::rotary`] reads both:
//! * transformers 5 writes `"rope_parameters": {"rope_type": …, "rope_theta": …, "factor": …}`
//!   and no top-level `rope_theta`;
//! * checkpoints saved before it have a top-level `rope_theta` and `rope_scaling` (whose type
//!   may be called `type`).
//!
//! Where a config holds both and they disagree, it is refused, naming both values (transformers
//! itself silently prefers one). The frequencies are computed in f32 in the order HF's
//! `modeling_rope_utils.py` computes them, so that both engines turn by HF's angles.

use serde::Deserialize;
use serde_json::{Map, Value};

/// The `rope_type`s read (HF's names).
pub const SUPPORTED: &str = "default, linear, llama3, yarn";

/// Rotary position embeddings: the angle of the pair of dimensions `(i, i + d/2)` of a head at
/// position `p` is `p·θᵢ`, `θᵢ = theta^(−2i/d)` before any [`RopeScaling`] (HF's rotate-half
/// layout); the turned pair is multiplied by [`Rotary::attention_scaling`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rotary {
    /// `rope_theta`, the base of the frequencies.
    pub theta: f32,
    /// The dimensions turned: every dimension of a head.
    pub head_dim: usize,
    /// How the frequencies are rescaled for a longer context (`rope_type`).
    pub scaling: RopeScaling,
}

/// A `rope_type` and its parameters, as the config gives them.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "rope_type")]
pub enum RopeScaling {
    /// `default`: `θᵢ = theta^(−2i/d)`.
    Default,
    /// `linear` (position interpolation): every `θᵢ` divided by `factor`.
    Linear { factor: f64 },
    /// `llama3` (Llama 3.1 and 3.2): wavelengths `2π/θᵢ` longer than
    /// `original_max_position_embeddings / low_freq_factor` are divided by `factor`, those
    /// shorter than `original_max_position_embeddings / high_freq_factor` kept, and those between
    /// blended smoothly.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
    /// `yarn`: each `θᵢ` blended between itself and `θᵢ / factor` by a linear ramp over the
    /// pairs `ramp.0 … ramp.1` (found from `beta_fast` and `beta_slow`: the pairs that turn
    /// between that many times over `original_max_position_embeddings`), and the turned queries
    /// and keys multiplied by `attention_factor`.
    Yarn {
        factor: f64,
        #[serde(skip)]
        ramp: (f64, f64),
        attention_factor: f64,
    },
}

impl Rotary {
    /// `θᵢ` for `i < d/2`, in f32 as HF computes `inv_freq` for the config's `rope_type`.
    pub fn inverse_frequencies(&self) -> Vec<f32> {
        let d = self.head_dim;
        // HF: 1.0 / (base ** (arange(0, d, 2) / d)), in f32
        let plain = (0..d / 2).map(|i| 1.0 / self.theta.powf((2 * i) as f32 / d as f32));
        match self.scaling {
            RopeScaling::Default => plain.collect(),
            RopeScaling::Linear { factor } => plain.map(|f| f / factor as f32).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                // modeling_rope_utils.py `_compute_llama3_parameters`, its scalars in f32 as
                // PyTorch takes a Python number into an f32 tensor's operation
                let factor32 = factor as f32;
                let low_wavelen = (old / low_freq_factor) as f32;
                let high_wavelen = (old / high_freq_factor) as f32;
                let span = (high_freq_factor - low_freq_factor) as f32;
                plain
                    .map(|f| {
                        let wavelen = (2.0 * std::f64::consts::PI) as f32 / f;
                        let f = if wavelen > low_wavelen {
                            f / factor32
                        } else {
                            f
                        };
                        let smooth = (old as f32 / wavelen - low_freq_factor as f32) / span;
                        // HF: ~(wavelen < high) * ~(wavelen > low); no wavelength is NaN
                        let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
                        if medium {
                            (1.0 - smooth) * f / factor32 + smooth * f
                        } else {
                            f
                        }
                    })
                    .collect()
            }
            RopeScaling::Yarn {
                factor,
                ramp: (low, high),
                ..
            } => {
                // `_compute_yarn_parameters`: pos_freqs = base ** (arange(0, d, 2) / d)
                let span = (high - low) as f32;
                (0..d / 2)
                    .map(|i| {
                        let pos = self.theta.powf((2 * i) as f32 / d as f32);
                        let extrapolation = 1.0 / pos;
                        let interpolation = 1.0 / (factor as f32 * pos);
                        let ramp = ((i as f32 - low as f32) / span).clamp(0.0, 1.0);
                        let keep = 1.0 - ramp; // inv_freq_extrapolation_factor
                        interpolation * (1.0 - keep) + extrapolation * keep
                    })
                    .collect()
            }
        }
    }

    /// What the cosines and sines are multiplied by (HF's `attention_scaling`): YaRN's
    /// `attention_factor`, else 1.
    pub fn attention_scaling(&self) -> f32 {
        match self.scaling {
            RopeScaling::Yarn {
                attention_factor, ..
            } => attention_factor as f32,
            _ => 1.0,
        }
    }
}

/// What the page and the CLI are told of a rotation: its parameters, and the frequencies and
/// scaling the engines turn by.
impl serde::Serialize for Rotary {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Shown<'a> {
            theta: f32,
            head_dim: usize,
            #[serde(flatten)]
            scaling: &'a RopeScaling,
            inv_freq: Vec<f32>,
            attention_scaling: f32,
        }
        Shown {
            theta: self.theta,
            head_dim: self.head_dim,
            scaling: &self.scaling,
            inv_freq: self.inverse_frequencies(),
            attention_scaling: self.attention_scaling(),
        }
        .serialize(s)
    }
}

/// The config keys that describe a rotation, in both forms; a Llama-family config's JSON is
/// read into this beside its own fields.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RopeJson {
    /// transformers 5's form: the type, θ and the type's parameters in one object (or one object
    /// per layer type).
    #[serde(default)]
    pub rope_parameters: Option<Map<String, Value>>,
    /// The older form's θ.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// The older form's type and parameters.
    #[serde(default)]
    pub rope_scaling: Option<Map<String, Value>>,
    /// Outside both, as the older form allowed it; moved into `rope_parameters` by transformers 5.
    #[serde(default)]
    pub partial_rotary_factor: Option<f64>,
    /// Phi-3's place for it, which transformers prefers where it is set.
    #[serde(default)]
    pub original_max_position_embeddings: Option<f64>,
}

/// One rotary parameter as a config gives it: its value, and its key as the config spells it
/// (`rope_parameters.factor`, `rope_scaling.type`, `rope_theta`), for errors.
struct Given {
    name: String,
    value: Value,
    key: String,
}

/// Why a `factor` under 1 is refused: it would shorten the context, and turn the first pairs
/// faster than once a position (past the angles the GPU engine's cosine is exact for).
fn stretch(key: &str, v: f64) -> String {
    format!("`{key}` {v} must be at least 1 (the factor a context is stretched by)")
}

/// Whether two JSON values say the same (numbers by value: `1e6` is `1000000.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Every rotary parameter of a config, by its transformers 5 name.
struct Params(Vec<Given>);

impl Params {
    fn get(&self, name: &str) -> Option<&Given> {
        self.0.iter().find(|g| g.name == name)
    }

    /// A number where the config gives one: `(value, key)`.
    fn number(&self, name: &str) -> std::result::Result<Option<(f64, &str)>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(g) => match g.value.as_f64() {
                Some(v) if v.is_finite() => Ok(Some((v, g.key.as_str()))),
                _ => Err(format!("`{}` {} is not a finite number", g.key, g.value)),
            },
        }
    }

    /// A positive number `rope_type` needs.
    fn positive(&self, name: &str, rope_type: &str) -> std::result::Result<f64, String> {
        match self.number(name)? {
            Some((v, key)) if name == "factor" && v < 1.0 => Err(stretch(key, v)),
            Some((v, _)) if v > 0.0 => Ok(v),
            Some((v, key)) => Err(format!("`{key}` {v} must be positive")),
            None => Err(format!(
                "rope_type {rope_type:?} needs `{name}` (in `rope_parameters`, or the older \
                 `rope_scaling`)"
            )),
        }
    }

    /// A positive number where the config gives one.
    fn optional_positive(&self, name: &str) -> std::result::Result<Option<f64>, String> {
        match self.number(name)? {
            Some((v, key)) if v <= 0.0 => Err(format!("`{key}` {v} must be positive")),
            given => Ok(given.map(|(v, _)| v)),
        }
    }
}

impl RopeJson {
    /// The rotation these keys describe for heads of `head_dim` dimensions in a model of
    /// `max_position_embeddings` positions (HF's defaults: θ = 10,000 and the `default` type
    /// where neither form is given), or why it cannot be honoured: an unknown `rope_type`, forms
    /// that disagree, one set of parameters per layer type, a missing or impossible parameter.
    /// Errors name each key as the config spells it, with its value.
    pub fn rotary(
        &self,
        head_dim: usize,
        max_position_embeddings: usize,
    ) -> std::result::Result<Rotary, String> {
        if let Some(p) = &self.rope_parameters {
            if p.values().any(Value::is_object) {
                let per_type: Vec<String> = p
                    .iter()
                    .map(|(layer_type, v)| match v.get("rope_theta") {
                        Some(theta) => format!("{layer_type}: rope_theta {theta}"),
                        None => format!("{layer_type}: {v}"),
                    })
                    .collect();
                return Err(format!(
                    "`rope_parameters` gives each layer type its own rotary positions ({}), and \
                     every layer of this family turns by one: per-layer rotary positions are not \
                     supported for it",
                    per_type.join("; ")
                ));
            }
        }
        let p = self.merged()?;
        let rope_type = match p.get("rope_type") {
            None => "default",
            Some(g) => g
                .value
                .as_str()
                .ok_or_else(|| format!("`{}` {} is not a string", g.key, g.value))?,
        };
        let theta = match p.number("rope_theta")? {
            None => 10000.0,
            Some((v, key)) => {
                if !((v as f32).is_finite() && v > 1.0) {
                    return Err(format!("`{key}` {v} must be finite and over 1"));
                }
                v
            }
        };
        if let Some((v, key)) = p
            .number("partial_rotary_factor")?
            .filter(|&(v, _)| v != 1.0)
        {
            return Err(format!(
                "`{key}` {v} is not supported (only 1: every dimension of a head turned)"
            ));
        }
        // llama3's and yarn's context before scaling: the model's own where the config is silent
        let original = match p.number("original_max_position_embeddings")? {
            None => max_position_embeddings as f64,
            Some((v, _)) if v >= 1.0 => v,
            Some((v, key)) => return Err(format!("`{key}` {v} must be at least 1")),
        };
        let scaling = match rope_type {
            "default" => RopeScaling::Default,
            "linear" => RopeScaling::Linear {
                factor: p.positive("factor", rope_type)?,
            },
            "llama3" => {
                let low_freq_factor = p.positive("low_freq_factor", rope_type)?;
                let high_freq_factor = p.positive("high_freq_factor", rope_type)?;
                RopeScaling::Llama3 {
                    factor: p.positive("factor", rope_type)?,
                    low_freq_factor,
                    high_freq_factor,
                    original_max_position_embeddings: original,
                }
            }
            "yarn" => yarn(&p, head_dim, theta, original)?,
            other => {
                let key = p.get("rope_type").map_or("rope_type", |g| g.key.as_str());
                return Err(format!(
                    "`{key}` {other:?} is not supported (supported: {SUPPORTED})"
                ));
            }
        };
        Ok(Rotary {
            theta: theta as f32,
            head_dim,
            scaling,
        })
    }

    /// Every rotary parameter of either form by its transformers 5 name (`type` read as
    /// `rope_type`), refused where two keys give one parameter different values. A null is no
    /// value.
    fn merged(&self) -> std::result::Result<Params, String> {
        let mut all: Vec<Given> = Vec::new();
        let forms = [
            ("rope_parameters", &self.rope_parameters),
            ("rope_scaling", &self.rope_scaling),
        ];
        let nested = forms.iter().flat_map(|&(form, params)| {
            params.iter().flatten().map(move |(k, v)| {
                let name = if k == "type" { "rope_type" } else { k.as_str() };
                (name, v.clone(), format!("{form}.{k}"))
            })
        });
        let top = [
            ("rope_theta", self.rope_theta),
            ("partial_rotary_factor", self.partial_rotary_factor),
            (
                "original_max_position_embeddings",
                self.original_max_position_embeddings,
            ),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, Value::from(v?), k.to_owned())));
        for (name, value, key) in nested.chain(top) {
            if value.is_null() {
                continue;
            }
            match all.iter().find(|g| g.name == name) {
                Some(g) if !same(&g.value, &value) => {
                    return Err(format!(
                        "`{}` {} and `{key}` {value} disagree: a config that gives both must \
                         give one value",
                        g.key, g.value
                    ))
                }
                Some(_) => {}
                None => all.push(Given {
                    name: name.to_owned(),
                    value,
                    key,
                }),
            }
        }
        Ok(Params(all))
    }
}

/// YaRN's parameters as `_compute_yarn_parameters` derives them: `factor`, the ramp over the pairs between `beta_fast` and `beta_slow` rotations (32 and
/// 1 by default; `truncate`d to whole pairs by default), and `attention_factor` (or
/// `0.1·ln(factor) + 1`, through `mscale` and `mscale_all_dim` where both are given).
fn yarn(
    p: &Params,
    head_dim: usize,
    theta: f64,
    original: f64,
) -> std::result::Result<RopeScaling, String> {
    let factor = p.positive("factor", "yarn")?;
    let mscale = |scale: f64, m: f64| {
        if scale <= 1.0 {
            1.0
        } else {
            0.1 * m * scale.ln() + 1.0
        }
    };
    let attention_factor = match p.optional_positive("attention_factor")? {
        Some(a) => a,
        None => {
            let given = |k| -> std::result::Result<f64, String> {
                Ok(p.number(k)?.map_or(0.0, |(v, _)| v))
            };
            match (given("mscale")?, given("mscale_all_dim")?) {
                (m, all) if m != 0.0 && all != 0.0 => mscale(factor, m) / mscale(factor, all),
                _ => mscale(factor, 1.0),
            }
        }
    };
    // HF reads `beta_fast or 32`: a 0 is the default too
    let beta = |k, default: f64| -> std::result::Result<f64, String> {
        Ok(p.number(k)?
            .map(|(v, _)| v)
            .filter(|&v| v != 0.0)
            .unwrap_or(default))
    };
    let (beta_fast, beta_slow) = (beta("beta_fast", 32.0)?, beta("beta_slow", 1.0)?);
    let truncate = match p.get("truncate") {
        None => true,
        Some(g) => g
            .value
            .as_bool()
            .ok_or_else(|| format!("`{}` {} is not true or false", g.key, g.value))?,
    };
    // the pair that turns `rotations` times over the original context
    let d = head_dim as f64;
    let pair = |rotations: f64| {
        d * (original / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln())
    };
    let (mut low, mut high) = (pair(beta_fast), pair(beta_slow));
    if truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
    if low == high {
        high += 0.001; // as HF: no ramp of zero width
    }
    Ok(RopeScaling::Yarn {
        factor,
        ramp: (low, high),
        attention_factor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: serde_json::Value) -> std::result::Result<Rotary, String> {
        serde_json::from_value::<RopeJson>(json)
            .unwrap()
            .rotary(64, 2048)
    }

    #[test]
    fn neither_form_is_hfs_default_and_type_is_rope_type() {
        let r = read(serde_json::json!({})).unwrap();
        assert_eq!((r.theta, r.scaling), (10000.0, RopeScaling::Default));
        let r = read(serde_json::json!({"rope_theta": 5e5, "rope_scaling": null})).unwrap();
        assert_eq!((r.theta, r.scaling), (500000.0, RopeScaling::Default));
        let r = read(serde_json::json!({"rope_scaling": {"type": "linear", "factor": 2}})).unwrap();
        assert_eq!(r.scaling, RopeScaling::Linear { factor: 2.0 });
        assert_eq!(r.inverse_frequencies()[0], 0.5);
        assert_eq!(r.inverse_frequencies().len(), 32);
    }

    #[test]
    fn what_cannot_be_honoured_is_named() {
        for (json, says) in [
            (
                serde_json::json!({"rope_parameters": {"rope_type": "linear"}}),
                "rope_type \"linear\" needs `factor`",
            ),
            (
                serde_json::json!({"rope_parameters": {"rope_type": "linear", "factor": 0.5}}),
                "`rope_parameters.factor` 0.5 must be at least 1",
            ),
            (
                serde_json::json!({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}}),
                "`rope_parameters.partial_rotary_factor` 0.5 is not supported",
            ),
            (
                serde_json::json!({"rope_parameters": {"rope_type": "default"}, "partial_rotary_factor": 0.25}),
                "`partial_rotary_factor` 0.25 is not supported",
            ),
            (
                serde_json::json!({"rope_parameters": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1}}),
                "rope_type \"llama3\" needs `high_freq_factor`",
            ),
            (
                serde_json::json!({"rope_parameters": {"rope_theta": "big"}}),
                "`rope_parameters.rope_theta` \"big\" is not a finite number",
            ),
            (
                serde_json::json!({"rope_parameters": {"rope_type": "yarn", "factor": 4, "truncate": "no"}}),
                "`rope_parameters.truncate` \"no\" is not true or false",
            ),
            (
                serde_json::json!({"rope_parameters": {"type": "yarn", "rope_type": "linear"}}),
                "`rope_parameters.rope_type` \"linear\" and `rope_parameters.type` \"yarn\" disagree",
            ),
        ] {
            let e = read(json.clone()).unwrap_err();
            assert!(e.contains(says), "{json}: {e:?} does not say {says:?}");
        }
    }

    /// YaRN's defaults as `_compute_yarn_parameters` derives them: attention_factor 0.1·ln(factor) + 1 (or through mscale / mscale_all_dim), the ramp between
    /// the pairs turning 32 and 1 times over the original context.
    #[test]
    fn yarns_defaults_are_hfs() {
        let r = read(serde_json::json!({"rope_parameters": {
            "rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 512}}))
        .unwrap();
        let RopeScaling::Yarn {
            factor,
            ramp,
            attention_factor,
        } = r.scaling
        else {
            panic!("{r:?}")
        };
        assert_eq!(factor, 4.0);
        assert!((attention_factor - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-12);
        // 64 · ln(512 / (32·2π)) / (2 ln 10⁴) = 3.25, floored; 64 · ln(512 / 2π) / (2 ln 10⁴) = 15.29, raised
        assert_eq!(ramp, (3.0, 16.0));
        let r = read(serde_json::json!({"rope_parameters": {
            "rope_type": "yarn", "factor": 4, "mscale": 2, "mscale_all_dim": 1}}))
        .unwrap();
        let RopeScaling::Yarn {
            attention_factor, ..
        } = r.scaling
        else {
            unreachable!()
        };
        let m = |k: f64| 0.1 * k * 4f64.ln() + 1.0;
        assert!((attention_factor - m(2.0) / m(1.0)).abs() < 1e-12);
        assert_eq!(r.attention_scaling(), attention_factor as f32);
    }
}
