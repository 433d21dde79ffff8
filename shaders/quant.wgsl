// A GGUF file's matrices in their ggml type, packed as src/engine/gpu/quant.rs lays them out,
// multiplied and gathered from without an f32 copy: each value is dequantized in registers where
// it is used.
//
// W has N rows of K values in groups of GROUP; each value is an integer q of BITS bits and is
//   d·(q − ZERO) + m   (DECODE 0: the block types; d and m the scales of its run of values),
//   q as an f16        (DECODE 1),
//   q as a bf16        (DECODE 2).
// Word j of group g of row r is w[(g·BITS + j)·N + r] (group-major: consecutive rows, consecutive
// words), value i of a group its bits i·BITS .. i·BITS + BITS (straddling two words for 3, 5
// or 6 bits); the scales follow from word `scales_at` (see `scale_of`). The engine compiles a pipeline
// of each entry point for each ggml type it meets, the format set through the overrides BITS,
// ZERO, DECODE and SCALES, so that no branch depends on it: a CPU driver (lavapipe) runs both
// sides of every branch for a batch of invocations, taken or not.
//
// # Shapes
// * product: x (M, K) at x_base, rows x_row apart; W (N, K); bias (N,) → c (M, N) at c_base,
//   rows c_row apart: c = act(alpha · x·Wᵀ + bias)
// * gather:  ids (M,) → c (M, K): row ids[r] of W, times alpha
//
// Three entry points:
// * `main`: a product of any M, register-tiled as matmul.wgsl's `main` (tiles.wgsl): each
//   invocation an 8 × 8 block of c, a workgroup of SIDE × SIDE invocations an (8·SIDE)² tile.
//   Four k at a time an invocation reads four values of each of its eight rows of W (one or two
//   words a row) and dequantizes them in registers, and reads its eight rows of x as vec4s, for
//   256 multiply-adds; the scales once per 16 k. The invocations of a workgroup that share
//   columns read the same words, which the caches serve, as matmul.wgsl relies on; no workgroup
//   memory, no barrier (staging W's tile through workgroup memory, each weight dequantized once
//   per workgroup, ran about 2× slower on lavapipe, a CPU driver that pays for every barrier and
//   every lane's read; docs/gpu.md).
//   Dispatch (ceil(N / (8·SIDE)), ceil(M / (8·SIDE)), 1).
// * `main_rows`: a product of at most ROWS rows of x (a decoding step; ONE_ROW: of one): a
//   workgroup of VEC_COLS × VEC_SPLIT invocations covers VEC_COLS rows of W, each split VEC_SPLIT
//   ways along K and summed through workgroup memory: each weight is read once in all. With
//   several rows of x it multiplies ROWS of them, the rows past M repeating the last unstored
//   (cheaper there than a branch per row).
//   Dispatch ceil(N / VEC_COLS) workgroups as a 2-D grid (grid_row in common.wgsl).
// * `main_gather`: one workgroup of WG per row of c. Dispatch as gather.wgsl.
//
// X_VEC4 reads x as vec4s through x4 (x_base, x_row and K multiples of 4).

override SIDE: u32 = 8u;
override X_VEC4: bool = true;
override VEC_COLS: u32 = 16u;
override VEC_SPLIT: u32 = 4u;
override ONE_ROW: bool = false;
// the format (`QuantSpec` in kernels.rs): bits per integer, its zero, how an integer becomes a
// value (0 affine, 1 f16, 2 bf16) and the scales (see `scale_of`)
override BITS: u32 = 4u;
override ZERO: u32 = 0u;
override DECODE: u32 = 0u;
override SCALES: u32 = 0u;
override MASK: u32 = (1u << BITS) - 1u;

// Values in a group.
const GROUP: u32 = 32u;
// The most rows of x `main_rows` takes (its accumulators; `QUANT_ROWS` in kernels.rs).
const ROWS: u32 = 8u;

// `main_rows`' partial sums: ROWS per invocation.
override ROW_SUMS: u32 = ROWS * VEC_COLS * VEC_SPLIT;

struct Params {
    m: u32,
    // W's rows (N), also the stride of its group-major words; K
    n: u32,
    k: u32,
    // where the scales start (see `scale_of`)
    scales_at: u32,
    sub_at: u32,
    x_base: u32,
    x_row: u32,
    c_base: u32,
    c_row: u32,
    // 0 = none, 1 = GELU, 2 = tanh GELU, 3 = ReLU, 4 = SiLU (`activate` in common.wgsl)
    act: u32,
    has_bias: u32,
    alpha: f32,
    // a gather's piece of the table (see gather.wgsl): its first row, 1 if it is the last
    first_row: u32,
    last_piece: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> x4: array<vec4<f32>>; // the same buffer as x
@group(0) @binding(4) var<storage, read> w: array<u32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> c: array<f32>;

var<workgroup> row_sums: array<f32, ROW_SUMS>;

// An f16's bits as f32, exactly: subnormals too, which a GPU's own conversion may flush.
fn half(h: u32) -> f32 {
    let e = (h >> 10u) & 0x1fu;
    let mant = h & 0x3ffu;
    let normal = bitcast<f32>(((e + 112u) << 23u) | (mant << 13u));
    let subnormal = f32(mant) * 5.9604644775390625e-8; // mant · 2⁻²⁴, exact
    let inf_nan = bitcast<f32>(0x7f800000u | (mant << 13u));
    let v = select(select(normal, inf_nan, e == 31u), subnormal, e == 0u);
    return select(v, -v, (h & 0x8000u) != 0u);
}

// (d, m) of row `row` at column k, in f32 as ggml computes them:
// 1: d (f16) per group, two groups to a word (group g of row r is entry g·N + r);
// 2: d | m << 16 (f16) per group, a word;
// 3 (Q4_K, Q5_K): d | dmin << 16 (f16) per 256 values, a word; sc | m << 8 (6 bits each) per
//    group, two to a word from `sub_at`: (d·sc, −dmin·m);
// 4 (Q6_K, Q3_K): d (f16) per 256 values, a word; sc (i8) per 16 values, four to a word from
//    `sub_at`: (d·sc, 0);
// 5 (Q2_K): d | dmin << 16 (f16) per 256 values, a word; sc | m << 4 (4 bits each) per 16
//    values, four to a word from `sub_at`: (d·sc, −dmin·m);
// 0: none (1, 0).
// The products are of an f16 and an integer of at most 8 bits: exact in f32, as on the CPU.
fn scale_of(row: u32, k: u32) -> vec2f {
    let g = (k / GROUP) * p.n + row;
    switch SCALES {
        case 1u: {
            return vec2f(half((w[p.scales_at + g / 2u] >> (16u * (g % 2u))) & 0xffffu), 0.0);
        }
        case 2u: {
            let s = w[p.scales_at + g];
            return vec2f(half(s & 0xffffu), half(s >> 16u));
        }
        case 3u: {
            let s = w[p.scales_at + (k / 256u) * p.n + row];
            let sm = w[p.sub_at + g / 2u] >> (16u * (g % 2u));
            return vec2f(
                half(s & 0xffffu) * f32(sm & 0xffu),
                -(half(s >> 16u) * f32((sm >> 8u) & 0xffu)),
            );
        }
        case 4u: {
            let s = w[p.scales_at + (k / 256u) * p.n + row];
            let e = (k / 16u) * p.n + row;
            let sc = i32(w[p.sub_at + e / 4u] << (24u - 8u * (e % 4u))) >> 24u;
            return vec2f(half(s & 0xffffu) * f32(sc), 0.0);
        }
        case 5u: {
            let s = w[p.scales_at + (k / 256u) * p.n + row];
            let e = (k / 16u) * p.n + row;
            let sm = w[p.sub_at + e / 4u] >> (8u * (e % 4u));
            return vec2f(
                half(s & 0xffffu) * f32(sm & 0xfu),
                -(half(s >> 16u) * f32((sm >> 4u) & 0xfu)),
            );
        }
        default: {
            return vec2f(1.0, 0.0);
        }
    }
}

// The value of integer q under the scales dm.
fn value(q: u32, dm: vec2f) -> f32 {
    switch DECODE {
        case 1u: {
            return half(q);
        }
        case 2u: {
            return bitcast<f32>(q << 16u);
        }
        default: {
            return dm.x * f32(i32(q) - i32(ZERO)) + dm.y;
        }
    }
}

// Bits o .. o + BITS of the 64 bits hi:lo (o < 64), chosen rather than branched on.
fn bits_at(lo: u32, hi: u32, o: u32) -> u32 {
    let s = o % 32u;
    let low = (lo >> s) | select(hi << ((32u - s) % 32u), 0u, s == 0u);
    return select(low, hi >> s, o >= 32u) & MASK;
}

// The value of row `row` at column k.
fn value_at(row: u32, k: u32) -> f32 {
    let g = (k / GROUP) * BITS;
    let bit = (k % GROUP) * BITS;
    let j = g + bit / 32u;
    // a value that does not straddle takes nothing from the next word of its group (the group's
    // last value reads its own word twice)
    let lo = w[j * p.n + row];
    let hi = w[min(j + 1u, g + BITS - 1u) * p.n + row];
    return value(bits_at(lo, hi, bit % 32u), scale_of(row, k));
}

// The integers of row `row` at columns k .. k + 4 (k a multiple of 4, so that their 4·bits ≤ 64
// bits lie in one word, or two), for each width its own shifts.
fn ints4(row: u32, k: u32) -> vec4u {
    let i = k % GROUP;
    let g = (k / GROUP) * BITS;
    switch BITS {
        case 2u: {
            let v = w[(g + i / 16u) * p.n + row] >> (2u * (i % 16u));
            return (vec4u(v) >> vec4u(0u, 2u, 4u, 6u)) & vec4u(0x3u);
        }
        case 4u: {
            let v = w[(g + i / 8u) * p.n + row] >> (4u * (i % 8u));
            return (vec4u(v) >> vec4u(0u, 4u, 8u, 12u)) & vec4u(0xfu);
        }
        case 8u: {
            let v = w[(g + i / 4u) * p.n + row];
            return (vec4u(v) >> vec4u(0u, 8u, 16u, 24u)) & vec4u(0xffu);
        }
        case 16u: {
            let lo = w[(g + i / 2u) * p.n + row];
            let hi = w[(g + i / 2u + 1u) * p.n + row];
            return vec4u(lo & 0xffffu, lo >> 16u, hi & 0xffffu, hi >> 16u);
        }
        default: {
            // 3, 5 or 6 bits: the four may straddle two words of the group (when they do not,
            // the next word's bits are masked off; the group's last four never straddle, and
            // read their own word twice)
            let bit = i * BITS;
            let j = g + bit / 32u;
            let s = bit % 32u;
            let lo = w[j * p.n + row];
            let hi = w[min(j + 1u, g + BITS - 1u) * p.n + row];
            return vec4u(
                bits_at(lo, hi, s),
                bits_at(lo, hi, s + BITS),
                bits_at(lo, hi, s + 2u * BITS),
                bits_at(lo, hi, s + 3u * BITS),
            );
        }
    }
}

// The values of row `row` at columns k .. k + 4 (k a multiple of 4, the four in one run of 16)
// under the scales dm.
fn values4(row: u32, k: u32, dm: vec2f) -> vec4f {
    let q = ints4(row, k);
    switch DECODE {
        case 1u: {
            return vec4f(half(q.x), half(q.y), half(q.z), half(q.w));
        }
        case 2u: {
            return bitcast<vec4f>(q << vec4u(16u));
        }
        default: {
            return dm.x * vec4f(vec4i(q) - vec4i(i32(ZERO))) + dm.y;
        }
    }
}

// x[m][k .. k + 4] (zeros past K; chosen, not branched on, since a CPU driver pays for every
// branch: a read past K reads some other value of x, or past the buffer, which WebGPU bounds).
fn load_x(m: u32, k: u32) -> vec4f {
    let i = p.x_base + m * p.x_row + k;
    if (X_VEC4) {
        return select(vec4f(0.0), x4[i / 4u], k < p.k);
    }
    return select(
        vec4f(0.0),
        vec4f(x[i], x[i + 1u], x[i + 2u], x[i + 3u]),
        vec4u(k) + vec4u(0u, 1u, 2u, 3u) < vec4u(p.k),
    );
}

// c[m][n] = act(alpha · s + bias[n])
fn store(m: u32, n: u32, s: f32) {
    var v = p.alpha * s;
    if (p.has_bias != 0u) {
        v += bias[n];
    }
    c[p.c_base + m * p.c_row + n] = activate(v, p.act);
}

// The scales of eight rows of W: d and m of rows 0–3 and 4–7.
struct Scales8 {
    d_lo: vec4f,
    d_hi: vec4f,
    m_lo: vec4f,
    m_hi: vec4f,
}

// The scales of W's rows n0 .. n0 + 8 (clamped to N) at column k.
fn scales8(n0: u32, k: u32) -> Scales8 {
    let last = p.n - 1u;
    let s0 = scale_of(min(n0, last), k);
    let s1 = scale_of(min(n0 + 1u, last), k);
    let s2 = scale_of(min(n0 + 2u, last), k);
    let s3 = scale_of(min(n0 + 3u, last), k);
    let s4 = scale_of(min(n0 + 4u, last), k);
    let s5 = scale_of(min(n0 + 5u, last), k);
    let s6 = scale_of(min(n0 + 6u, last), k);
    let s7 = scale_of(min(n0 + 7u, last), k);
    return Scales8(
        vec4f(s0.x, s1.x, s2.x, s3.x),
        vec4f(s4.x, s5.x, s6.x, s7.x),
        vec4f(s0.y, s1.y, s2.y, s3.y),
        vec4f(s4.y, s5.y, s6.y, s7.y),
    );
}

// W's rows n0 .. n0 + 8 (clamped to N) at k .. k + 4, dequantized, as a Block.
fn load_w(n0: u32, k: u32, sc: Scales8) -> Block {
    let last = p.n - 1u;
    let r0 = values4(min(n0, last), k, vec2f(sc.d_lo.x, sc.m_lo.x));
    let r1 = values4(min(n0 + 1u, last), k, vec2f(sc.d_lo.y, sc.m_lo.y));
    let r2 = values4(min(n0 + 2u, last), k, vec2f(sc.d_lo.z, sc.m_lo.z));
    let r3 = values4(min(n0 + 3u, last), k, vec2f(sc.d_lo.w, sc.m_lo.w));
    let r4 = values4(min(n0 + 4u, last), k, vec2f(sc.d_hi.x, sc.m_hi.x));
    let r5 = values4(min(n0 + 5u, last), k, vec2f(sc.d_hi.y, sc.m_hi.y));
    let r6 = values4(min(n0 + 6u, last), k, vec2f(sc.d_hi.z, sc.m_hi.z));
    let r7 = values4(min(n0 + 7u, last), k, vec2f(sc.d_hi.w, sc.m_hi.w));
    return transposed(array<vec4f, 8>(r0, r1, r2, r3, r4, r5, r6, r7));
}

// c[m][n0 .. n0 + 8] = act(alpha · acc + bias), within (M, N)
fn store_row(m: u32, n0: u32, acc: Row8) {
    if (m >= p.m) {
        return;
    }
    for (var j = 0u; j < 8u; j++) {
        if (n0 + j < p.n) {
            store(m, n0 + j, select(acc.hi, acc.lo, j < 4u)[j % 4u]);
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
    let last = p.m - 1u;
    var acc = Block8();
    // K rounded up to whole groups (an F16 or BF16 row's padding is zeros), 16 at a time: a
    // Q6_K, Q3_K or Q2_K scale covers 16 values, every other one 32
    let k_end = (p.k + GROUP - 1u) / GROUP * GROUP;
    for (var k16 = 0u; k16 < k_end; k16 += 16u) {
        let sc = scales8(n0, k16);
        for (var k = k16; k < k16 + 16u; k += 4u) {
            let rows = array<vec4f, 8>(
                load_x(m0, k),
                load_x(min(m0 + 1u, last), k),
                load_x(min(m0 + 2u, last), k),
                load_x(min(m0 + 3u, last), k),
                load_x(min(m0 + 4u, last), k),
                load_x(min(m0 + 5u, last), k),
                load_x(min(m0 + 6u, last), k),
                load_x(min(m0 + 7u, last), k),
            );
            acc = mac_block(acc, rows, load_w(n0, k, sc));
        }
    }
    store_row(m0, n0, acc.r0);
    store_row(m0 + 1u, n0, acc.r1);
    store_row(m0 + 2u, n0, acc.r2);
    store_row(m0 + 3u, n0, acc.r3);
    store_row(m0 + 4u, n0, acc.r4);
    store_row(m0 + 5u, n0, acc.r5);
    store_row(m0 + 6u, n0, acc.r6);
    store_row(m0 + 7u, n0, acc.r7);
}

@compute @workgroup_size(VEC_COLS, VEC_SPLIT, 1)
fn main_rows(@builtin(local_invocation_id) lid: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let n = grid_row(wid) * VEC_COLS + lid.x;
    let row = min(n, p.n - 1u);
    // the sums of rows 0–3 and 4–7 of x
    var lo = vec4f(0.0);
    var hi = vec4f(0.0);
    let groups = (p.k + GROUP - 1u) / GROUP;
    let last = p.m - 1u;
    for (var g = lid.y; g < groups; g += VEC_SPLIT) {
        for (var h = 0u; h < GROUP; h += 16u) {
            // a Q6_K, Q3_K or Q2_K scale covers 16 values, every other one 32
            let dm = scale_of(row, g * GROUP + h);
            for (var i = 0u; i < 16u; i += 4u) {
                let k = g * GROUP + h + i;
                let wv = values4(row, k, dm);
                lo.x += dot(load_x(0u, k), wv);
                if (!ONE_ROW) {
                    // rows past M repeat the last, and are not stored
                    lo.y += dot(load_x(min(1u, last), k), wv);
                    lo.z += dot(load_x(min(2u, last), k), wv);
                    lo.w += dot(load_x(min(3u, last), k), wv);
                    hi.x += dot(load_x(min(4u, last), k), wv);
                    hi.y += dot(load_x(min(5u, last), k), wv);
                    hi.z += dot(load_x(min(6u, last), k), wv);
                    hi.w += dot(load_x(min(7u, last), k), wv);
                }
            }
        }
    }
    // each slice's sums, then the first slice adds them in order
    for (var m = 0u; m < ROWS; m++) {
        row_sums[(m * VEC_SPLIT + lid.y) * VEC_COLS + lid.x] = select(hi[m % 4u], lo[m % 4u], m < 4u);
    }
    workgroupBarrier();
    if (lid.y == 0u && n < p.n) {
        for (var m = 0u; m < p.m; m++) {
            var s = 0.0;
            for (var t = 0u; t < VEC_SPLIT; t++) {
                s += row_sums[(m * VEC_SPLIT + t) * VEC_COLS + lid.x];
            }
            store(m, n, s);
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn main_gather(@builtin(local_invocation_id) lid: vec3u, @builtin(workgroup_id) wid: vec3u) {
    let r = grid_row(wid);
    if (r >= p.m) {
        return;
    }
    // a row of another piece is that piece's to write; the host checks every id against the
    // table, and a bad one reads the last piece's last row, not past it
    let id = ids[r];
    if (id < p.first_row || (id - p.first_row >= p.n && p.last_piece == 0u)) {
        return;
    }
    let row = min(id - p.first_row, p.n - 1u);
    for (var k = lid.x; k < p.k; k += WG) {
        c[p.c_base + r * p.c_row + k] = value_at(row, k) * p.alpha;
    }
}
