// Token + position + token-type embeddings, then LayerNorm: one workgroup per token.
//
// # Shapes
// * ids, type_ids: (B·T,)
// * word: (vocab, D), position: (max_pos, D), token_type: (type_vocab, D)
// * gamma, beta: (D,)
// * out: (B·T, D)
//
// One workgroup of WG per token; dispatch (min(B·T, 65535), ceil(B·T / 65535), 1).

struct Params {
    rows: u32,
    dim: u32,
    seq: u32,
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> type_ids: array<u32>;
@group(0) @binding(3) var<storage, read> word: array<f32>;
@group(0) @binding(4) var<storage, read> position: array<f32>;
@group(0) @binding(5) var<storage, read> token_type: array<f32>;
@group(0) @binding(6) var<storage, read> gamma: array<f32>;
@group(0) @binding(7) var<storage, read> beta: array<f32>;
@group(0) @binding(8) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_id) lid3: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let row = grid_row(wid);
    let lid = lid3.x;
    let live = row < p.rows;
    let r = min(row, p.rows - 1u); // keep barriers in uniform control flow
    let base = r * p.dim;
    let w0 = ids[r] * p.dim;
    let p0 = (r % p.seq) * p.dim;
    let t0 = type_ids[r] * p.dim;
    var s = 0.0;
    for (var c = lid; c < p.dim; c += WG) {
        let x = word[w0 + c] + position[p0 + c] + token_type[t0 + c];
        if (live) {
            out[base + c] = x;
        }
        s += x;
    }
    let mean = workgroup_sum(s, lid) / f32(p.dim);
    var v = 0.0;
    for (var c = lid; c < p.dim; c += WG) {
        let d = word[w0 + c] + position[p0 + c] + token_type[t0 + c] - mean;
        v += d * d;
    }
    let inv = inverseSqrt(workgroup_sum(v, lid) / f32(p.dim) + p.eps);
    if (live) {
        for (var c = lid; c < p.dim; c += WG) {
            out[base + c] = (out[base + c] - mean) * inv * gamma[c] + beta[c];
        }
    }
}
