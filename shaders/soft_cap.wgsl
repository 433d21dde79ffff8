// Values soft-capped element by element: out = cap·tanh(x/cap), in HF's order (Gemma's
// `final_logit_softcapping` on the LM head's logits). tanh's argument is clamped where tanh is
// ±1 in f32 anyway, so that no implementation overflows.
//
// # Shapes
// * x: (rows, dim) → out: (rows, dim)
//
// One workgroup of WG per row; dispatch (min(rows, 65535), ceil(rows / 65535), 1).

struct Params {
    rows: u32,
    dim: u32,
    cap: f32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_id) lid3: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let r = grid_row(wid);
    if (r >= p.rows) {
        return;
    }
    let o = r * p.dim;
    for (var c = lid3.x; c < p.dim; c += WG) {
        out[o + c] = p.cap * tanh(clamp(x[o + c] / p.cap, -16.0, 16.0));
    }
}
