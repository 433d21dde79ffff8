// Context = P · V per head, written straight into the merged (B·T, D) layout: the head
// merge `transpose(1, 2).reshape(B, T, H·d_v)` happens in the indexing.
//
// # Shapes
// * probs: (B, H, T, T)
// * qkv:   (B·T, 3·D), V in columns [2D, 3D)
// * ctx:   (B·T, D)
//
// Dispatch (ceil(T·d_v / 64), B·H, 1).

struct Params {
    seq: u32,
    heads: u32,
    head_dim: u32,
    dim: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> probs: array<f32>;
@group(0) @binding(2) var<storage, read> qkv: array<f32>;
@group(0) @binding(3) var<storage, read_write> ctx: array<f32>;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let bh = gid.y;
    let idx = gid.x;
    if (idx >= p.seq * p.head_dim) {
        return;
    }
    let i = idx / p.head_dim;
    let c = idx % p.head_dim;
    let b = bh / p.heads;
    let h = bh % p.heads;
    let stride = 3u * p.dim;
    let pbase = (bh * p.seq + i) * p.seq;
    let v0 = b * p.seq * stride + 2u * p.dim + h * p.head_dim + c;
    var acc = 0.0;
    for (var j = 0u; j < p.seq; j++) {
        acc += probs[pbase + j] * qkv[v0 + j * stride];
    }
    ctx[(b * p.seq + i) * p.dim + h * p.head_dim + c] = acc;
}
