// A gated feed-forward's inner activation: out = act(gate) ⊙ up, element by element (SwiGLU
// with SiLU), `act` by the codes of `activate` in common.wgsl. gate and up are views of some
// columns of wider results (the fused gate and up projections): row r of gate at
// gate_offset + r·gate_stride, of up at up_offset + r·up_stride.
//
// # Shapes
// * gate, up: (rows, dim) → out: (rows, dim)
//
// One workgroup of WG per row; dispatch (min(rows, 65535), ceil(rows / 65535), 1).

struct Params {
    rows: u32,
    dim: u32,
    gate_stride: u32,
    gate_offset: u32,
    up_stride: u32,
    up_offset: u32,
    act: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_id) lid3: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let r = grid_row(wid);
    if (r >= p.rows) {
        return;
    }
    let g = p.gate_offset + r * p.gate_stride;
    let u = p.up_offset + r * p.up_stride;
    let o = r * p.dim;
    for (var c = lid3.x; c < p.dim; c += WG) {
        out[o + c] = activate(gate[g + c], p.act) * up[u + c];
    }
}
