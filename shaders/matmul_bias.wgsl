// C = A · Wᵀ + bias: the dense layers (Q/K/V, output projection, feed-forward).
//
// # Shapes
// * a:    (M, K)  row-major activations
// * w:    (N, K)  row-major, as PyTorch's nn.Linear stores it
// * bias: (N,)
// * c:    (M, N)
//
// Tiled: each workgroup computes a TILE × TILE block of C, staging tiles of A and W in
// workgroup memory. Dispatch (ceil(N / TILE), ceil(M / TILE), 1).

override TILE: u32 = 16u;

struct Params {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> c: array<f32>;

var<workgroup> tile_a: array<f32, TILE * TILE>; // [row in block][k in tile]
var<workgroup> tile_w: array<f32, TILE * TILE>; // [col in block][k in tile]

@compute @workgroup_size(TILE, TILE, 1)
fn main(@builtin(local_invocation_id) lid: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let row = wid.y * TILE + lid.y; // index into M
    let col = wid.x * TILE + lid.x; // index into N
    let w_row = wid.x * TILE + lid.y; // the row of W this invocation stages
    var acc = 0.0;
    let tiles = (p.k + TILE - 1u) / TILE;
    for (var t = 0u; t < tiles; t++) {
        let kk = t * TILE + lid.x;
        var va = 0.0;
        if (row < p.m && kk < p.k) {
            va = a[row * p.k + kk];
        }
        tile_a[lid.y * TILE + lid.x] = va;
        var vw = 0.0;
        if (w_row < p.n && kk < p.k) {
            vw = w[w_row * p.k + kk];
        }
        tile_w[lid.y * TILE + lid.x] = vw;
        workgroupBarrier();
        for (var i = 0u; i < TILE; i++) {
            acc += tile_a[lid.y * TILE + i] * tile_w[lid.x * TILE + i];
        }
        workgroupBarrier();
    }
    if (row < p.m && col < p.n) {
        c[row * p.n + col] = acc + bias[col];
    }
}
