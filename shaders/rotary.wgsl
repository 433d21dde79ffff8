// Rotary position embeddings (RoPE) in HF's rotate-half layout: in each head of d columns, the
// pair (x_i, x_{i+d/2}) of row r becomes
//   (x_i·cos − x_{i+d/2}·sin, x_{i+d/2}·cos + x_i·sin)   of the angle positions[r]·inv_freq[i],
// cos and sin multiplied by p.scale (HF's attention_scaling: YaRN's attention_factor, else 1),
// as the CPU's `rotate` (src/engine/cpu/ops.rs) computes it in f32: the host uploads the same
// inv_freq (`Rotary::inverse_frequencies`), the angle is the same f32 product, and its cosine
// and sine come from `cos_sin` below rather than WGSL's cos and sin, whose error WebGPU bounds
// only on [−π, π] (and loosely there), where the angles of late positions are far outside it.
//
// # Shapes
// * positions: (rows,) u32, the pass's position ids (as gather.wgsl reads token ids)
// * inv_freq: (d/2,); x: (rows, heads·d), row r at x_offset + r·x_stride (a view of Q or K in
//   the fused QKV buffer) → out: (rows, heads·d)
//
// One workgroup of WG per row; dispatch (min(rows, 65535), ceil(rows / 65535), 1).

struct Params {
    rows: u32,
    heads: u32,
    head_dim: u32,
    x_stride: u32,
    x_offset: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// π/2 in three parts (Cody–Waite, Cephes' sinf constants × 2): the first two have so few
// significant bits (8 and 11) that k·PIO2_1 and k·PIO2_2 are exact for |k| < 2¹³, so the
// reduction loses nothing for angles below about 12 800 radians. RoPE's largest is the last
// position's, p·inv_freq[0] = p < MAX_POSITIONS = 8192 (src/model/limits.rs); over 0 … 12 800
// the cosine and sine are within 1e-7 of the exact ones.
const PIO2_1: f32 = 1.5703125;
const PIO2_2: f32 = 4.837512969970703125e-4;
const PIO2_3: f32 = 7.54978995489188216e-8;
const TWO_OVER_PI: f32 = 0.636619772367581343;

// (cos a, sin a): a reduced to r in [−π/4, π/4] with a = k·π/2 + r, then
// Cephes' minimax polynomials of sinf and cosf on r, and the quadrant k mod 4.
fn cos_sin(a: f32) -> vec2f {
    let k = round(a * TWO_OVER_PI);
    let r = ((a - k * PIO2_1) - k * PIO2_2) - k * PIO2_3;
    let z = r * r;
    let s = r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
    let c = 1.0 - 0.5 * z
        + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
    switch (i32(k) & 3) {
        case 0: {
            return vec2f(c, s);
        }
        case 1: {
            return vec2f(-s, c);
        }
        case 2: {
            return vec2f(-c, -s);
        }
        default: {
            return vec2f(s, -c);
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_id) lid3: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let r = grid_row(wid);
    if (r >= p.rows) {
        return;
    }
    let half = p.head_dim / 2u;
    let position = f32(positions[r]);
    let src = p.x_offset + r * p.x_stride;
    let dst = r * p.heads * p.head_dim;
    // one pair (i, i + d/2) of one head per invocation
    for (var j = lid3.x; j < p.heads * half; j += WG) {
        let i = j % half;
        let at = (j / half) * p.head_dim + i;
        let cs = cos_sin(position * inv_freq[i]) * p.scale;
        let x1 = x[src + at];
        let x2 = x[src + at + half];
        out[dst + at] = x1 * cs.x + -x2 * cs.y;
        out[dst + at + half] = x2 * cs.x + x1 * cs.y;
    }
}
