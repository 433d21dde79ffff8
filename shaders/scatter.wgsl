// A decoding's cache write: row r of src to row rows_at[r] of dst, for every r (each item's new
// keys or values to its next free row of the cache, which the host names before each step).
//
// # Shapes
// * rows_at: (rows,); src: (rows, dim), row r at src_offset + r · src_stride (a view of some
//   columns of a wider result) → dst: (dst_rows, dim)
//
// One workgroup of WG per row; dispatch (min(rows, 65535), ceil(rows / 65535), 1).

struct Params {
    rows: u32,
    dim: u32,
    src_stride: u32,
    src_offset: u32,
    dst_rows: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> rows_at: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_id) lid3: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let r = grid_row(wid);
    if (r >= p.rows) {
        return;
    }
    // the host checks every row against the cache; a bad one writes its last row, not past it
    let dst_row = min(rows_at[r], p.dst_rows - 1u) * p.dim;
    let src_row = p.src_offset + r * p.src_stride;
    for (var c = lid3.x; c < p.dim; c += WG) {
        dst[dst_row + c] = src[src_row + c];
    }
}
