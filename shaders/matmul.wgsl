// C = act(alpha · A·Bᵀ + bias), batched over z = item · heads + head and strided, so that one
// kernel computes the dense layers (x·Wᵀ + b, the feed-forward activation fused) and the
// attention context (P·V per head, written straight into the merged-heads layout).
//
// Element (m, k) of A is a[a.base + item·a.item + head·a.head + m·a.row + k],
// element (n, k) of B is b[b.base + item·b.item + g·b.head + n·b.row + k·b_col] with
// g = (b_first_head + head) / b_group (B's head of product head `head`: the key/value head a
// run of query heads starting at b_first_head reads under grouped-query attention; g = head for
// the dense layers and multi-head attention, where b_first_head = 0 and b_group = 1),
// element (m, n) of C is c[c.base + item·c.item + head·c.head + m·c.row + n].
//
// # Shapes
// * dense:   a (M, K), b = W (N, K) as nn.Linear stores it, bias (N,), c (M, N)
// * context: a = P (B, H, n_q, n_k), b = V (B·n_k, stride) with key/value head g at columns
//            offset + g·d_v, read as (d_v, n_k) (b.row = 1, b_col = the stride); c (B·n_q, H·d_v)
//
// Register-tiled (tiles.wgsl): each invocation computes an 8 × 8 block of C in registers,
// reading A and B four k at a time; a workgroup of SIDE × SIDE invocations covers an (8·SIDE)²
// tile. There is no workgroup memory: neighbouring invocations read the same rows, which the
// caches serve (on a CPU Vulkan driver such as lavapipe this is also what runs fastest).
// Dispatch (ceil(N / (8·SIDE)), ceil(M / (8·SIDE)), items · heads).
//
// Three pipelines of this file: VEC4 reads vec4s through a4/b4 (every offset, stride and K a
// multiple of 4; B along k, or along n when B_ALONG_N); without VEC4 it reads scalars through
// a/b, any strides and sizes.

override SIDE: u32 = 8u;
override VEC4: bool = true;
override B_ALONG_N: bool = false;

struct Operand {
    base: u32,
    item: u32,
    head: u32,
    row: u32,
}

struct Params {
    m: u32,
    n: u32,
    k: u32,
    heads: u32,
    a: Operand,
    b: Operand,
    c: Operand,
    // the stride of B along k (1 for W and K; the row stride for V)
    b_col: u32,
    // 0 = none, 1 = GELU, 2 = tanh GELU, 3 = ReLU, 4 = SiLU (`activate` in common.wgsl)
    act: u32,
    alpha: f32,
    has_bias: u32,
    b_first_head: u32,
    b_group: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> a4: array<vec4<f32>>; // the same buffer as a
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read> b4: array<vec4<f32>>; // the same buffer as b
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> c: array<f32>;

// Where product z = item · heads + head starts in A, B and C (x, y, z).
fn offsets(z: u32) -> vec3u {
    let item = z / p.heads;
    let head = z % p.heads;
    return vec3u(
        p.a.base + item * p.a.item + head * p.a.head,
        p.b.base + item * p.b.item + ((p.b_first_head + head) / p.b_group) * p.b.head,
        p.c.base + item * p.c.item + head * p.c.head,
    );
}

// A[m][k .. k + 4] (zeros past K); `a0` is this item and head's offset, m is clamped to M.
fn load_a(a0: u32, m: u32, k: u32) -> vec4f {
    let i = a0 + min(m, p.m - 1u) * p.a.row + k;
    if (VEC4) {
        return a4[i / 4u];
    }
    var v = vec4f(0.0);
    for (var t = 0u; t < 4u; t++) {
        v[t] = select(0.0, a[i + t], k + t < p.k);
    }
    return v;
}

// B[n][k] (zero past K), n clamped to N
fn b_at(b0: u32, n: u32, k: u32) -> f32 {
    return select(0.0, b[b0 + min(n, p.n - 1u) * p.b.row + k * p.b_col], k < p.k);
}

// B[n][k .. k + 4] through b4 (VEC4, B along k), n clamped to N
fn b_row4(b0: u32, n: u32, k: u32) -> vec4f {
    return b4[(b0 + min(n, p.n - 1u) * p.b.row + k) / 4u];
}

// B[n .. n + 4][k] through b4 (VEC4 with B_ALONG_N), n clamped to the last four columns
fn b_cols4(b0: u32, n: u32, k: u32) -> vec4f {
    return b4[(b0 + min(n, p.n - 4u) + k * p.b_col) / 4u];
}

// B[n0 .. n0 + 8][k .. k + 4] as a Block
fn load_b(b0: u32, n0: u32, k: u32) -> Block {
    if (VEC4 && B_ALONG_N) {
        // four columns of B per vec4: n0 + 8 ≤ N rounded up to 4, clamped to the last four
        return Block(
            Row8(b_cols4(b0, n0, k), b_cols4(b0, n0 + 4u, k)),
            Row8(b_cols4(b0, n0, k + 1u), b_cols4(b0, n0 + 4u, k + 1u)),
            Row8(b_cols4(b0, n0, k + 2u), b_cols4(b0, n0 + 4u, k + 2u)),
            Row8(b_cols4(b0, n0, k + 3u), b_cols4(b0, n0 + 4u, k + 3u)),
        );
    }
    // eight rows of B, four k each, transposed into the Block
    var r: array<vec4f, 8>;
    if (VEC4) {
        r[0] = b_row4(b0, n0, k);
        r[1] = b_row4(b0, n0 + 1u, k);
        r[2] = b_row4(b0, n0 + 2u, k);
        r[3] = b_row4(b0, n0 + 3u, k);
        r[4] = b_row4(b0, n0 + 4u, k);
        r[5] = b_row4(b0, n0 + 5u, k);
        r[6] = b_row4(b0, n0 + 6u, k);
        r[7] = b_row4(b0, n0 + 7u, k);
    } else {
        for (var j = 0u; j < 8u; j++) {
            r[j] = vec4f(
                b_at(b0, n0 + j, k),
                b_at(b0, n0 + j, k + 1u),
                b_at(b0, n0 + j, k + 2u),
                b_at(b0, n0 + j, k + 3u),
            );
        }
    }
    return transposed(r);
}

// C[m0 .. m0 + 8][n0 .. n0 + 8] = act(alpha · acc + bias), within (M, N)
fn store_block(c0: u32, m0: u32, n0: u32, acc: Block8) {
    store(c0, m0, n0, acc.r0);
    store(c0, m0 + 1u, n0, acc.r1);
    store(c0, m0 + 2u, n0, acc.r2);
    store(c0, m0 + 3u, n0, acc.r3);
    store(c0, m0 + 4u, n0, acc.r4);
    store(c0, m0 + 5u, n0, acc.r5);
    store(c0, m0 + 6u, n0, acc.r6);
    store(c0, m0 + 7u, n0, acc.r7);
}

// C[m][n0 .. n0 + 8] = act(alpha · acc + bias), within (M, N)
fn store(c0: u32, m: u32, n0: u32, acc: Row8) {
    if (m >= p.m) {
        return;
    }
    for (var j = 0u; j < 8u; j++) {
        let n = n0 + j;
        if (n < p.n) {
            var v = p.alpha * select(acc.hi, acc.lo, j < 4u)[j % 4u];
            if (p.has_bias != 0u) {
                v += bias[n];
            }
            c[c0 + m * p.c.row + n] = activate(v, p.act);
        }
    }
}

@compute @workgroup_size(SIDE, SIDE, 1)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let m0 = gid.y * 8u;
    let n0 = gid.x * 8u;
    if (m0 >= p.m || n0 >= p.n) {
        return;
    }
    let at = offsets(gid.z);
    let a0 = at.x;
    let b0 = at.y;
    var acc = Block8();
    for (var k = 0u; k < p.k; k += 4u) {
        let rows = array<vec4f, 8>(
            load_a(a0, m0, k),
            load_a(a0, m0 + 1u, k),
            load_a(a0, m0 + 2u, k),
            load_a(a0, m0 + 3u, k),
            load_a(a0, m0 + 4u, k),
            load_a(a0, m0 + 5u, k),
            load_a(a0, m0 + 6u, k),
            load_a(a0, m0 + 7u, k),
        );
        acc = mac_block(acc, rows, load_b(b0, n0, k));
    }
    store_block(at.z, m0, n0, acc);
}
