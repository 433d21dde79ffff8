// The attention probabilities of one layer in one dispatch: the scaled scores S = Q·Kᵀ/√d_k,
// then P = softmax(masked_fill(S, mask == 0, -inf)) row by row. Masked keys get exactly 0, and
// a row with every key masked is all zeros. S is also written to `scores` (before the mask)
// when the trace keeps it (keep_scores = 1).
//
// Q and K are read in place from row-major activation buffers: head h of query row i of item b
// is `q[(b·n_q + i)·q_stride + q_offset + h·d_k ..][..d_k]`, which is the
// `view(B, n, H, d_k).transpose(1, 2)` split without moving data. In the encoder both live in
// the fused (B·T, 3·D) QKV buffer: Q at offset 0, K at offset D, stride 3·D. n_q may differ
// from n_k (cross-attention).
//
// # Shapes
// * q: (B·n_q, q_stride), k: (B·n_k, k_stride)
// * mask: (B, n_q, ceil(n_k / 32)) u32 words, bit j % 32 of word j / 32 set where query i may
//   attend to key j (`Mask::to_bits`)
// * scores, probs: (B, H, n_q, n_k)
//
// Each invocation owns four query rows of one (item, head), with no workgroup memory and no
// barrier: a first pass computes their scores four keys at a time (register-tiled, reading
// vec4s along d_k), writes them into `probs` and keeps each row's running max and sum of exp
// (the online softmax); a second pass turns the row into probabilities in place.
// Dispatch (ceil(n_q / (4·QUERIES_WG)), B·H, 1).
//
// Two pipelines of this file: VEC4 reads vec4s through q4/k4 (d_k, strides and offsets
// multiples of 4); without it, scalars through q/k.

override QUERIES_WG: u32 = 16u;
override VEC4: bool = true;

struct Params {
    n_q: u32,
    n_k: u32,
    heads: u32,
    d_k: u32,
    q_stride: u32,
    q_offset: u32,
    k_stride: u32,
    k_offset: u32,
    scale: f32,
    keep_scores: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> q4: array<vec4<f32>>; // the same buffer as q
@group(0) @binding(3) var<storage, read> k: array<f32>;
@group(0) @binding(4) var<storage, read> k4: array<vec4<f32>>; // the same buffer as k
@group(0) @binding(5) var<storage, read> mask: array<u32>;
@group(0) @binding(6) var<storage, read_write> scores: array<f32>;
@group(0) @binding(7) var<storage, read_write> probs: array<f32>;

// Q[i][d .. d + 4] of this item and head (`q0`), zeros past d_k; i clamped to n_q.
fn load_q(q0: u32, i: u32, d: u32) -> vec4f {
    let at = q0 + min(i, p.n_q - 1u) * p.q_stride + d;
    if (VEC4) {
        return q4[at / 4u];
    }
    var v = vec4f(0.0);
    for (var t = 0u; t < 4u; t++) {
        v[t] = select(0.0, q[at + t], d + t < p.d_k);
    }
    return v;
}

// K[j][d .. d + 4] of this item and head (`k0`), zeros past d_k; j clamped to n_k.
fn load_k(k0: u32, j: u32, d: u32) -> vec4f {
    let at = k0 + min(j, p.n_k - 1u) * p.k_stride + d;
    if (VEC4) {
        return k4[at / 4u];
    }
    var v = vec4f(0.0);
    for (var t = 0u; t < 4u; t++) {
        v[t] = select(0.0, k[at + t], d + t < p.d_k);
    }
    return v;
}

// The mask's words a row of keys takes.
fn mask_words() -> u32 {
    return (p.n_k + 31u) / 32u;
}

// One query row's scaled scores `s` against keys j0 .. j0 + 4 (j0 a multiple of 4, so one mask
// word holds them): written (unmasked) to probs and scores, folded into the row's running
// (max, sum of exp) over the keys the mask allows.
fn visit(row: u32, mask_row: u32, live: bool, j0: u32, s: vec4f, run: vec2f) -> vec2f {
    if (!live || j0 >= p.n_k) {
        return run;
    }
    var allowed = vec4f(0.0);
    var m = run.x;
    let bits = mask[mask_row + j0 / 32u] >> (j0 % 32u);
    for (var t = 0u; t < 4u; t++) {
        let j = j0 + t;
        if (j < p.n_k) {
            probs[row + j] = s[t];
            if (p.keep_scores != 0u) {
                scores[row + j] = s[t];
            }
            if ((bits & (1u << t)) != 0u) {
                allowed[t] = 1.0;
                m = max(m, s[t]);
            }
        }
    }
    var l = run.y * exp(run.x - m);
    for (var t = 0u; t < 4u; t++) {
        if (allowed[t] != 0.0) {
            l += exp(s[t] - m);
        }
    }
    return vec2f(m, l);
}

// The second pass over one row: probs = exp(S - max) / sum where allowed, else exactly 0.
fn normalize(row: u32, mask_row: u32, live: bool, run: vec2f) {
    if (!live) {
        return;
    }
    for (var w = 0u; w < mask_words(); w++) {
        let bits = mask[mask_row + w];
        for (var j = w * 32u; j < min(w * 32u + 32u, p.n_k); j++) {
            var v = 0.0;
            if ((bits & (1u << (j % 32u))) != 0u && run.y > 0.0) {
                v = exp(probs[row + j] - run.x) / run.y;
            }
            probs[row + j] = v;
        }
    }
}

// An invocation's four query rows i0 .. i0 + 4 of one (item, head) `bh`: where its head's Q and
// K start, where each row starts in probs (and scores) and in the mask, and which rows exist.
struct Rows {
    q0: u32,
    k0: u32,
    probs: vec4u,
    mask: vec4u,
    live: vec4<bool>,
}

fn rows_of(i0: u32, bh: u32) -> Rows {
    let item = bh / p.heads;
    let head = bh % p.heads;
    let next = vec4u(0u, 1u, 2u, 3u);
    return Rows(
        item * p.n_q * p.q_stride + p.q_offset + head * p.d_k,
        item * p.n_k * p.k_stride + p.k_offset + head * p.d_k,
        (bh * p.n_q + i0) * p.n_k + next * p.n_k,
        ((item * p.n_q + i0) + next) * mask_words(),
        vec4u(i0) + next < vec4u(p.n_q),
    );
}

@compute @workgroup_size(QUERIES_WG, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let i0 = gid.x * 4u;
    if (i0 >= p.n_q) {
        return;
    }
    let w = rows_of(i0, gid.y);
    let q0 = w.q0;
    let k0 = w.k0;
    // (running max, running sum of exp) of each row
    var run0 = vec2f(NEG_INF, 0.0);
    var run1 = vec2f(NEG_INF, 0.0);
    var run2 = vec2f(NEG_INF, 0.0);
    var run3 = vec2f(NEG_INF, 0.0);
    for (var j0 = 0u; j0 < p.n_k; j0 += 4u) {
        // s_r[t] = Q[i0 + r] · K[j0 + t]
        var s0 = vec4f(0.0);
        var s1 = vec4f(0.0);
        var s2 = vec4f(0.0);
        var s3 = vec4f(0.0);
        for (var d = 0u; d < p.d_k; d += 4u) {
            let ka = load_k(k0, j0, d);
            let kb = load_k(k0, j0 + 1u, d);
            let kc = load_k(k0, j0 + 2u, d);
            let kd = load_k(k0, j0 + 3u, d);
            let qa = load_q(q0, i0, d);
            s0 += vec4f(dot(qa, ka), dot(qa, kb), dot(qa, kc), dot(qa, kd));
            let qb = load_q(q0, i0 + 1u, d);
            s1 += vec4f(dot(qb, ka), dot(qb, kb), dot(qb, kc), dot(qb, kd));
            let qc = load_q(q0, i0 + 2u, d);
            s2 += vec4f(dot(qc, ka), dot(qc, kb), dot(qc, kc), dot(qc, kd));
            let qd = load_q(q0, i0 + 3u, d);
            s3 += vec4f(dot(qd, ka), dot(qd, kb), dot(qd, kc), dot(qd, kd));
        }
        run0 = visit(w.probs.x, w.mask.x, w.live.x, j0, s0 * p.scale, run0);
        run1 = visit(w.probs.y, w.mask.y, w.live.y, j0, s1 * p.scale, run1);
        run2 = visit(w.probs.z, w.mask.z, w.live.z, j0, s2 * p.scale, run2);
        run3 = visit(w.probs.w, w.mask.w, w.live.w, j0, s3 * p.scale, run3);
    }
    normalize(w.probs.x, w.mask.x, w.live.x, run0);
    normalize(w.probs.y, w.mask.y, w.live.y, run1);
    normalize(w.probs.z, w.mask.z, w.live.z, run2);
    normalize(w.probs.w, w.mask.w, w.live.w, run3);
}
