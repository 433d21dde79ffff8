// The feed-forward activation, in place: act 0 = exact GELU x·Φ(x) (erf), 1 = tanh GELU, 2 = ReLU.
//
// # Shapes
// * x: (n,)
//
// Dispatch (min(groups, 65535), ceil(groups / 65535), 1) with groups = ceil(n / WG).

override WG: u32 = 64u;

struct Params {
    n: u32,
    act: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;

// erf(x) with |error| < 1.2e-7 (Numerical Recipes' erfc by Chebyshev fitting); WGSL has no erf.
fn erf(v: f32) -> f32 {
    let z = abs(v);
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
        t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
        t * (-0.82215223 + t * 0.17087277)))))))));
    return sign(v) * (1.0 - r);
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let i = gid.x + gid.y * 65535u * WG;
    if (i >= p.n) {
        return;
    }
    let v = x[i];
    if (p.act == 0u) {
        x[i] = 0.5 * v * (1.0 + erf(v * 0.70710678118654752));
    } else if (p.act == 1u) {
        x[i] = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    } else {
        x[i] = max(v, 0.0);
    }
}
