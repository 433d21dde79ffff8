// An embedding lookup: row ids[r] of the table, times scale, for every row r (token, position
// or token-type embeddings; the family adds them and norms the sum with add_layernorm.wgsl).
//
// # Shapes
// * ids: (rows,); table: (table_rows, dim) → out: (rows, dim)
//
// One workgroup of WG per row; dispatch (min(rows, 65535), ceil(rows / 65535), 1).

struct Params {
    rows: u32,
    dim: u32,
    table_rows: u32,
    scale: f32,
    // the table's piece this dispatch reads (a table larger than one binding is several):
    // its first row, and 1 if it is the last
    first_row: u32,
    last_piece: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_id) lid3: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let r = grid_row(wid);
    if (r >= p.rows) {
        return;
    }
    // a row of another piece is that piece's to write; the host checks every id against the
    // table, and a bad one reads the last piece's last row, not past it
    let id = ids[r];
    if (id < p.first_row || (id - p.first_row >= p.table_rows && p.last_piece == 0u)) {
        return;
    }
    let src = min(id - p.first_row, p.table_rows - 1u) * p.dim;
    let dst = r * p.dim;
    for (var c = lid3.x; c < p.dim; c += WG) {
        out[dst + c] = table[src + c] * p.scale;
    }
}
