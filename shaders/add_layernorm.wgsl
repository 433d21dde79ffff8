// Residual add and a norm LN over rows (LayerNorm or RMSNorm), in the three forms the layers
// need (the `AddNorm` modes in src/engine/gpu/plan.rs):
// * 0, norm:        norm = LN(a)                 (pre-LN: before a sub-layer)
// * 1, add + norm:  sum = a + b; norm = LN(sum)  (post-LN: LN(x + Sublayer(x)); pre-LN: LN₂)
// * 2, add:         sum = a + b                  (pre-LN: the last residual of a layer)
//
// In mode 0, `a` may be `heads` heads side by side in rows of `a_stride` floats from
// `a_offset` (Q or K in the fused QKV buffer): row r of the norm is head r % heads of row
// r / heads, normed on its own (QK-norm); `norm` is written dense, (rows, D) = (rows/heads,
// heads·D). Every other use has heads = 1, a_stride = D, a_offset = 0: `a` dense.
//
// LN, by `kind` (`NormKind` in src/model/weights.rs):
// * 0, LayerNorm:   (x − mean)/√(var + eps)·gamma + beta
// * 1, RMSNorm:     gamma·(x/√(mean(x²) + eps)): no mean subtracted, no beta read (Llama)
//
// # Shapes
// * a, b, sum, norm: (rows, D); gamma, beta: (D,)
//
// One workgroup of WG per row; dispatch (min(rows, 65535), ceil(rows / 65535), 1).

struct Params {
    rows: u32,
    dim: u32,
    mode: u32,
    eps: f32,
    kind: u32,
    heads: u32,
    a_stride: u32,
    a_offset: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> gamma: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read_write> sum: array<f32>;
@group(0) @binding(6) var<storage, read_write> norm: array<f32>;

// element c of the row whose input starts at `src` in `a` and at `base` in `b`
fn input(src: u32, base: u32, c: u32) -> f32 {
    if (p.mode == 0u) {
        return a[src + c];
    }
    return a[src + c] + b[base + c];
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_id) lid3: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let row = grid_row(wid);
    let lid = lid3.x;
    let live = row < p.rows;
    let r = min(row, p.rows - 1u); // keep barriers in uniform control flow
    let base = r * p.dim;
    let src = p.a_offset + (r / p.heads) * p.a_stride + (r % p.heads) * p.dim;
    var s = 0.0;
    for (var c = lid; c < p.dim; c += WG) {
        let x = input(src, base, c);
        if (live && p.mode != 0u) {
            sum[base + c] = x;
        }
        s += x;
    }
    if (p.mode == 2u) {
        return;
    }
    let rms = p.kind == 1u;
    // RMSNorm centres nothing: its "variance" is the mean of x²
    var mean = 0.0;
    if (!rms) {
        mean = workgroup_sum(s, lid) / f32(p.dim);
    }
    var v = 0.0;
    for (var c = lid; c < p.dim; c += WG) {
        let d = input(src, base, c) - mean;
        v += d * d;
    }
    let inv = inverseSqrt(workgroup_sum(v, lid) / f32(p.dim) + p.eps);
    if (live) {
        for (var c = lid; c < p.dim; c += WG) {
            if (rms) {
                norm[base + c] = gamma[c] * (input(src, base, c) * inv);
            } else {
                norm[base + c] = (input(src, base, c) - mean) * inv * gamma[c] + beta[c];
            }
        }
    }
}
