// Context = P · V per head, written straight into the merged (B·n_q, H·d_v) layout: the head
// merge `transpose(1, 2).reshape(B, n_q, H·d_v)` happens in the indexing. d_v may differ from d_k.
//
// # Shapes
// * probs: (B, H, n_q, n_k)
// * v:     (B·n_k, v_stride), head h at columns v_offset + h·d_v (in the encoder: the fused
//          QKV buffer, offset 2·D, stride 3·D)
// * ctx:   (B·n_q, H·d_v)
//
// Dispatch (ceil(n_q·d_v / 64), B·H, 1).

struct Params {
    n_q: u32,
    n_k: u32,
    heads: u32,
    d_v: u32,
    v_stride: u32,
    v_offset: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> probs: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> ctx: array<f32>;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let bh = gid.y;
    let idx = gid.x;
    if (idx >= p.n_q * p.d_v) {
        return;
    }
    let i = idx / p.d_v;
    let c = idx % p.d_v;
    let b = bh / p.heads;
    let h = bh % p.heads;
    let pbase = (bh * p.n_q + i) * p.n_k;
    let v0 = b * p.n_k * p.v_stride + p.v_offset + h * p.d_v + c;
    var acc = 0.0;
    for (var j = 0u; j < p.n_k; j++) {
        acc += probs[pbase + j] * v[v0 + j * p.v_stride];
    }
    ctx[(b * p.n_q + i) * p.heads * p.d_v + h * p.d_v + c] = acc;
}
