// P = softmax(masked_fill(S, mask == 0, -inf)) row by row, S the scaled scores Q·Kᵀ/√d_k that
// matmul.wgsl wrote: masked keys get exactly 0, and a row with every key masked is all zeros.
// These are the probabilities the heatmaps draw.
//
// # Shapes
// * scores, probs: (B, H, n_q, n_k)
// * mask: (B, n_q, n_k), 1 where query i may attend to key j
//
// One workgroup of WG per row (b, h, i); dispatch (min(B·H·n_q, 65535), ceil(B·H·n_q / 65535), 1).

struct Params {
    n_q: u32,
    n_k: u32,
    heads: u32,
    rows: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> scores: array<f32>;
@group(0) @binding(2) var<storage, read> mask: array<u32>;
@group(0) @binding(3) var<storage, read_write> probs: array<f32>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_id) lid3: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let row = grid_row(wid);
    let lid = lid3.x;
    let live = row < p.rows;
    let r = min(row, p.rows - 1u); // keep barriers in uniform control flow
    let i = r % p.n_q;
    let b = r / (p.n_q * p.heads);
    let base = r * p.n_k;
    let mbase = (b * p.n_q + i) * p.n_k;

    // max over the allowed keys (masked cells never reach exp())
    var m = NEG_INF;
    for (var j = lid; j < p.n_k; j += WG) {
        if (mask[mbase + j] != 0u) {
            m = max(m, scores[base + j]);
        }
    }
    let row_max = workgroup_max(m, lid);

    // sum of exp over the allowed keys
    var s = 0.0;
    for (var j = lid; j < p.n_k; j += WG) {
        if (mask[mbase + j] != 0u) {
            s += exp(scores[base + j] - row_max);
        }
    }
    let total = workgroup_sum(s, lid);

    if (live) {
        for (var j = lid; j < p.n_k; j += WG) {
            var v = 0.0;
            if (mask[mbase + j] != 0u && total > 0.0) {
                v = exp(scores[base + j] - row_max) / total;
            }
            probs[base + j] = v;
        }
    }
}
