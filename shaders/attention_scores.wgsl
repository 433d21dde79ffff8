// Scaled scores S = Q·Kᵀ / √d_k for every batch item and head.
//
// The fused QKV buffer is the (B·T, 3·D) output of one dense layer: Q in columns [0, D),
// K in [D, 2D), V in [2D, 3D). Head h owns columns h·d_k .. (h+1)·d_k of each, so indexing
// them is the `view(B, T, H, d_k).transpose(1, 2)` split, without moving any data.
//
// # Shapes
// * qkv:    (B·T, 3·D)
// * scores: (B, H, T, T)
//
// Dispatch (ceil(T / 16), ceil(T / 16), B·H).

struct Params {
    seq: u32,
    heads: u32,
    head_dim: u32,
    dim: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> scores: array<f32>;

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let j = gid.x; // key
    let i = gid.y; // query
    let bh = gid.z; // b · H + h
    if (i >= p.seq || j >= p.seq) {
        return;
    }
    let b = bh / p.heads;
    let h = bh % p.heads;
    let stride = 3u * p.dim;
    let q0 = (b * p.seq + i) * stride + h * p.head_dim;
    let k0 = (b * p.seq + j) * stride + p.dim + h * p.head_dim;
    var acc = 0.0;
    for (var c = 0u; c < p.head_dim; c++) {
        acc += qkv[q0 + c] * qkv[k0 + c];
    }
    scores[(bh * p.seq + i) * p.seq + j] = acc * p.scale;
}
