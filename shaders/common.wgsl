// The prelude of every kernel: src/engine/gpu/kernels.rs composes each module at build time as
// this file followed by shaders/<kernel>.wgsl, after the files it builds on (tiles.wgsl for the
// products; `Kernel::files`); tests/shaders.rs validates the composed modules.

// Threads per workgroup of the row kernels (one workgroup per row); set from `ROW_WG` in
// src/engine/gpu/kernels.rs, which the dispatches read too.
override WG: u32 = 64u;

// The lowest finite f32, written exactly (Tint rejects a rounded literal that overflows f32).
const NEG_INF: f32 = -340282346638528859811704183484516925440.0;

// The row of a one-workgroup-per-row dispatch: rows past 65535 continue in y.
fn grid_row(wid: vec3u) -> u32 {
    return wid.x + wid.y * 65535u;
}

var<workgroup> partial: array<f32, WG>;

// The sum of `v` over the workgroup's WG invocations; every invocation must call it.
fn workgroup_sum(v: f32, lid: u32) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            partial[lid] += partial[lid + stride];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

// The maximum of `v` over the workgroup's WG invocations; every invocation must call it.
fn workgroup_max(v: f32, lid: u32) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            partial[lid] = max(partial[lid], partial[lid + stride]);
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

// erf(x) with |error| < 1.2e-7 (Numerical Recipes' erfc by Chebyshev fitting); WGSL has no erf.
fn erf(v: f32) -> f32 {
    let z = abs(v);
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
        t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
        t * (-0.82215223 + t * 0.17087277)))))))));
    return sign(v) * (1.0 - r);
}

// The feed-forward activations, by the codes of `Epilogue` in src/engine/gpu/plan.rs:
// 0 = none, 1 = exact GELU x·Φ(x) (erf), 2 = tanh GELU, 3 = ReLU, 4 = SiLU x·σ(x).
fn activate(v: f32, act: u32) -> f32 {
    switch act {
        case 1u: {
            return 0.5 * v * (1.0 + erf(v * 0.70710678118654752));
        }
        case 2u: {
            return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        }
        case 3u: {
            return max(v, 0.0);
        }
        case 4u: {
            return v / (1.0 + exp(-v));
        }
        default: {
            return v;
        }
    }
}
