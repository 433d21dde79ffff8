// Scaled scores S = Q·Kᵀ / √d_k for every batch item and head; n_q may differ from n_k
// (encoder–decoder cross-attention).
//
// Q and K are read in place from row-major activation buffers: head h of query row i of item b
// is `q[(b·n_q + i)·q_stride + q_offset + h·d_k ..][..d_k]`, which is the
// `view(B, n, H, d_k).transpose(1, 2)` split without moving data. In the encoder both live in
// the fused (B·T, 3·D) QKV buffer: Q at offset 0, K at offset D, stride 3·D.
//
// # Shapes
// * q: (B·n_q, q_stride), k: (B·n_k, k_stride)
// * scores: (B, H, n_q, n_k)
//
// Dispatch (ceil(n_k / 16), ceil(n_q / 16), B·H).

struct Params {
    n_q: u32,
    n_k: u32,
    heads: u32,
    d_k: u32,
    q_stride: u32,
    q_offset: u32,
    k_stride: u32,
    k_offset: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let j = gid.x; // key
    let i = gid.y; // query
    let bh = gid.z; // b · H + h
    if (i >= p.n_q || j >= p.n_k) {
        return;
    }
    let b = bh / p.heads;
    let h = bh % p.heads;
    let q0 = (b * p.n_q + i) * p.q_stride + p.q_offset + h * p.d_k;
    let k0 = (b * p.n_k + j) * p.k_stride + p.k_offset + h * p.d_k;
    var acc = 0.0;
    for (var c = 0u; c < p.d_k; c++) {
        acc += q[q0 + c] * k[k0 + c];
    }
    scores[(bh * p.n_q + i) * p.n_k + j] = acc * p.scale;
}
