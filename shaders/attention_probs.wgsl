// The attention probabilities of one layer in one dispatch: the scaled scores S = Q·Kᵀ/√d_k,
// then P = softmax(masked_fill(S, mask == 0, -inf)) row by row. Masked keys get exactly 0, and
// a row with every key masked is all zeros. S is also written to `scores` (before the mask)
// when the trace keeps it (keep_scores = 1).
//
// Q and K are read in place from row-major activation buffers: head h of query row i of item b
// is `q[(b·n_q + i)·q_stride + q_offset + h·d_k ..][..d_k]`, which is the
// `view(B, n, H, d_k).transpose(1, 2)` split without moving data. In the encoder both live in
// the fused (B·T, 3·D) QKV buffer: Q at offset 0, K at offset D, stride 3·D. n_q may differ
// from n_k (cross-attention). Query head h reads key head h / group (grouped-query attention:
// `heads` query heads share `heads / group` key/value heads; group = 1 is multi-head attention).
//
// # Shapes
// * q: (B·n_q, q_stride) holding heads·d_k columns, k: (B·n_k, k_stride) holding
//   (heads / group)·d_k
// * mask: (B, n_q, ceil(n_k / 32)) u32 words, bit j % 32 of word j / 32 set where query i may
//   attend to key j (`Mask::to_bits`)
// * scores, probs: (B, H, n_q, n_k)
//
// Each invocation owns four query rows of one (item, head), with no workgroup memory and no
// barrier. A first pass computes their scores four keys at a time (register-tiled, reading
// vec4s along d_k) and keeps only each row's running max and sum of exp (the online softmax); a
// second pass computes the same scores again and writes each probability once (and each score,
// when kept). Scoring twice costs 2·d_k multiply-adds a cell; it saves writing each row and
// reading it back, the memory traffic that dominates attention at long lengths.
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
    // query heads per key/value head
    group: u32,
    _pad0: u32,
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

// The first pass: one query row's scaled scores `s` against keys j0 .. j0 + 4 (j0 a multiple
// of 4, so one mask word holds them), folded into the row's running (max, sum of exp) over the
// keys the mask allows.
fn visit(mask_row: u32, live: bool, j0: u32, s: vec4f, run: vec2f) -> vec2f {
    if (!live || j0 >= p.n_k) {
        return run;
    }
    let bits = mask[mask_row + j0 / 32u] >> (j0 % 32u);
    var allowed = vec4<bool>();
    var m = run.x;
    for (var t = 0u; t < 4u; t++) {
        allowed[t] = j0 + t < p.n_k && (bits & (1u << t)) != 0u;
        if (allowed[t]) {
            m = max(m, s[t]);
        }
    }
    var l = run.y * exp(run.x - m);
    for (var t = 0u; t < 4u; t++) {
        if (allowed[t]) {
            l += exp(s[t] - m);
        }
    }
    return vec2f(m, l);
}

// The second pass: the same scores `s`, and the row's (max, sum of exp) `run` over all its
// keys: probs = exp(s - max) / sum where the mask allows, else exactly 0 (a row with every key
// masked is all zeros); scores = s (before the mask) when kept.
fn emit(row: u32, mask_row: u32, live: bool, j0: u32, s: vec4f, run: vec2f) {
    if (!live || j0 >= p.n_k) {
        return;
    }
    let bits = mask[mask_row + j0 / 32u] >> (j0 % 32u);
    for (var t = 0u; t < 4u; t++) {
        let j = j0 + t;
        if (j < p.n_k) {
            var v = 0.0;
            if ((bits & (1u << t)) != 0u && run.y > 0.0) {
                v = exp(s[t] - run.x) / run.y;
            }
            probs[row + j] = v;
            if (p.keep_scores != 0u) {
                scores[row + j] = s[t];
            }
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
        item * p.n_k * p.k_stride + p.k_offset + (head / p.group) * p.d_k,
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
        let s = scores4(q0, k0, i0, j0);
        run0 = visit(w.mask.x, w.live.x, j0, s.r0, run0);
        run1 = visit(w.mask.y, w.live.y, j0, s.r1, run1);
        run2 = visit(w.mask.z, w.live.z, j0, s.r2, run2);
        run3 = visit(w.mask.w, w.live.w, j0, s.r3, run3);
    }
    for (var j0 = 0u; j0 < p.n_k; j0 += 4u) {
        let s = scores4(q0, k0, i0, j0);
        emit(w.probs.x, w.mask.x, w.live.x, j0, s.r0, run0);
        emit(w.probs.y, w.mask.y, w.live.y, j0, s.r1, run1);
        emit(w.probs.z, w.mask.z, w.live.z, j0, s.r2, run2);
        emit(w.probs.w, w.mask.w, w.live.w, j0, s.r3, run3);
    }
}

// Four query rows' scaled scores against four keys: r_i[t] = Q[i0 + i] · K[j0 + t] · scale.
struct Scores4 {
    r0: vec4f,
    r1: vec4f,
    r2: vec4f,
    r3: vec4f,
}

fn scores4(q0: u32, k0: u32, i0: u32, j0: u32) -> Scores4 {
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
    return Scores4(s0 * p.scale, s1 * p.scale, s2 * p.scale, s3 * p.scale);
}
