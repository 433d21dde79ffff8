// The embeddings' parts for the layer trace, before the LayerNorm that `embed_layernorm.wgsl`
// fuses: each token's word, position and token-type rows and their sum. One workgroup per token.
//
// # Shapes
// * ids, type_ids: (B·T,)
// * word: (vocab, D), position: (max_pos, D), token_type: (type_vocab, D)
// * out: (4, B·T, D) = [word | position | token_type | sum]
//
// One workgroup of WG per token; dispatch (min(B·T, 65535), ceil(B·T / 65535), 1).

struct Params {
    rows: u32,
    dim: u32,
    seq: u32,
    eps: f32, // unused: the parameters are embed_layernorm.wgsl's
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> type_ids: array<u32>;
@group(0) @binding(3) var<storage, read> word: array<f32>;
@group(0) @binding(4) var<storage, read> position: array<f32>;
@group(0) @binding(5) var<storage, read> token_type: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_id) lid3: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let r = grid_row(wid);
    if (r >= p.rows) {
        return;
    }
    let part = p.rows * p.dim; // one (B·T, D) block
    let base = r * p.dim;
    let w0 = ids[r] * p.dim;
    let p0 = (r % p.seq) * p.dim;
    let t0 = type_ids[r] * p.dim;
    for (var c = lid3.x; c < p.dim; c += WG) {
        let w = word[w0 + c];
        let q = position[p0 + c];
        let t = token_type[t0 + c];
        out[base + c] = w;
        out[part + base + c] = q;
        out[2u * part + base + c] = t;
        out[3u * part + base + c] = w + q + t;
    }
}
