//! Why scores are divided by √d_k: the experiment behind the rule. For q and k with independent
//! entries of mean 0 and variance 1, `q·k` is a sum of d_k products of variance 1, so its
//! variance is d_k; divided by √d_k it is 1 whatever d_k is, and softmax keeps its gradients.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The sample variance of `q·k` and of `q·k/√d_k` at one `d_k`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ScalingPoint {
    pub d_k: usize,
    /// Var(q·k): about `d_k`.
    pub raw: f64,
    /// Var(q·k / √d_k): about 1.
    pub scaled: f64,
}

/// Draws `samples` pairs (q, k) of standard normal vectors at each `d_k` (seeded: the same
/// numbers every time) and measures both variances.
pub fn variance_experiment(d_ks: &[usize], samples: usize, seed: u64) -> Vec<ScalingPoint> {
    let mut rng = SmallRng::seed_from_u64(seed);
    // Box–Muller: a standard normal from two uniforms
    let mut normal = move || {
        let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        let u2: f64 = rng.random();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    };
    d_ks.iter()
        .map(|&d_k| {
            let dots: Vec<f64> = (0..samples)
                .map(|_| (0..d_k).map(|_| normal() * normal()).sum())
                .collect();
            let raw = variance(&dots);
            ScalingPoint {
                d_k,
                raw,
                scaled: raw / d_k as f64,
            }
        })
        .collect()
}

fn variance(x: &[f64]) -> f64 {
    let n = x.len().max(2) as f64;
    let mean = x.iter().sum::<f64>() / n;
    x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_variance_grows_with_d_k_and_the_scaled_one_stays_near_1() {
        let points = variance_experiment(&[1, 16, 256], 4000, 7);
        for p in &points {
            let d = p.d_k as f64;
            assert!(
                (p.raw / d - 1.0).abs() < 0.1,
                "Var(q·k) at d_k {} is {}",
                p.d_k,
                p.raw
            );
            assert!(
                (p.scaled - 1.0).abs() < 0.1,
                "scaled at d_k {}: {}",
                p.d_k,
                p.scaled
            );
        }
        assert_eq!(
            points,
            variance_experiment(&[1, 16, 256], 4000, 7),
            "seeded"
        );
    }
}
