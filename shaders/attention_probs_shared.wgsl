// `main` of attention_probs.wgsl in its VEC4 form, with each row of K read once per group of
// eight lanes instead of once per invocation: composed after attention_probs.wgsl, whose
// parameters, reads, online softmax (`visit`) and second pass (`emit`) it uses. Like
// matmul_shared.wgsl it needs subgroups of 8 lanes or more laid out along the workgroup's
// invocations in order (the engine compiles both, or neither).
//
// A workgroup's invocations all work on one (item, head) and walk its keys together. Sixteen
// keys at a time, lane r of a group of eight reads keys j0 + r and j0 + 8 + r, a vec4 of d_k at
// a time, and every lane takes all sixteen from the group (`subgroupShuffle`) to score its four
// query rows against them: two vec4s of K read a lane where `main` reads sixteen, and each vec4
// of Q read once per sixteen keys where `main` reads it once per four. Both passes score the
// keys so, as `main`'s do.
// Dispatch (ceil(n_q / (4·QUERIES_WG)), B·H, 1), as `main`.

// Sixteen keys of one query row: a = keys j0 .. j0 + 4, b, c, d the next fours.
struct Scores16 {
    a: vec4f,
    b: vec4f,
    c: vec4f,
    d: vec4f,
}

// Sixteen keys' vec4s of d_k: lo = keys j0 .. j0 + 8, hi = j0 + 8 .. j0 + 16.
struct Keys16 {
    lo: array<vec4f, 8>,
    hi: array<vec4f, 8>,
}

// The eight lanes' `v` of the group that starts at lane `first`.
fn from_group(v: vec4f, first: u32) -> array<vec4f, 8> {
    return array<vec4f, 8>(
        subgroupShuffle(v, first),
        subgroupShuffle(v, first + 1u),
        subgroupShuffle(v, first + 2u),
        subgroupShuffle(v, first + 3u),
        subgroupShuffle(v, first + 4u),
        subgroupShuffle(v, first + 5u),
        subgroupShuffle(v, first + 6u),
        subgroupShuffle(v, first + 7u),
    );
}

// `s` + the dot products of `q` with sixteen keys' vec4s `k`
fn dots16(s: Scores16, q: vec4f, k: Keys16) -> Scores16 {
    return Scores16(
        s.a + vec4f(dot(q, k.lo[0]), dot(q, k.lo[1]), dot(q, k.lo[2]), dot(q, k.lo[3])),
        s.b + vec4f(dot(q, k.lo[4]), dot(q, k.lo[5]), dot(q, k.lo[6]), dot(q, k.lo[7])),
        s.c + vec4f(dot(q, k.hi[0]), dot(q, k.hi[1]), dot(q, k.hi[2]), dot(q, k.hi[3])),
        s.d + vec4f(dot(q, k.hi[4]), dot(q, k.hi[5]), dot(q, k.hi[6]), dot(q, k.hi[7])),
    );
}

// `visit` (attention_probs.wgsl) of one row's sixteen scaled scores; it skips keys past n_k
fn visit16(mask_row: u32, live: bool, j0: u32, s: Scores16, run: vec2f) -> vec2f {
    var out = visit(mask_row, live, j0, s.a, run);
    out = visit(mask_row, live, j0 + 4u, s.b, out);
    out = visit(mask_row, live, j0 + 8u, s.c, out);
    return visit(mask_row, live, j0 + 12u, s.d, out);
}

// `emit` (attention_probs.wgsl) of one row's sixteen scaled scores; it skips keys past n_k
fn emit16(row: u32, mask_row: u32, live: bool, j0: u32, s: Scores16, run: vec2f) {
    emit(row, mask_row, live, j0, s.a, run);
    emit(row, mask_row, live, j0 + 4u, s.b, run);
    emit(row, mask_row, live, j0 + 8u, s.c, run);
    emit(row, mask_row, live, j0 + 12u, s.d, run);
}

// A lane's four query rows' scaled scores against sixteen keys.
struct Rows16 {
    r0: Scores16,
    r1: Scores16,
    r2: Scores16,
    r3: Scores16,
}

// Rows i0 .. i0 + 4 against keys j0 .. j0 + 16: lane r of the group that starts at lane `first`
// reads keys j0 + r and j0 + 8 + r (clamped to the last key past n_k), and takes the others'.
fn scores16(q0: u32, k0: u32, i0: u32, j0: u32, r: u32, first: u32) -> Rows16 {
    var s0 = Scores16();
    var s1 = Scores16();
    var s2 = Scores16();
    var s3 = Scores16();
    for (var d = 0u; d < p.d_k; d += 4u) {
        let lo = load_k(k0, j0 + r, d);
        let hi = load_k(k0, j0 + 8u + r, d);
        let k = Keys16(from_group(lo, first), from_group(hi, first));
        s0 = dots16(s0, load_q(q0, i0, d), k);
        s1 = dots16(s1, load_q(q0, i0 + 1u, d), k);
        s2 = dots16(s2, load_q(q0, i0 + 2u, d), k);
        s3 = dots16(s3, load_q(q0, i0 + 3u, d), k);
    }
    return Rows16(scaled16(s0), scaled16(s1), scaled16(s2), scaled16(s3));
}

fn scaled16(s: Scores16) -> Scores16 {
    return Scores16(s.a * p.scale, s.b * p.scale, s.c * p.scale, s.d * p.scale);
}

@compute @workgroup_size(QUERIES_WG, 1, 1)
fn main_shared(
    @builtin(global_invocation_id) gid: vec3u,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let r = lane % 8u; // the lane's place in its group
    let first = lane - r; // the group's first lane in the subgroup
    let i0 = gid.x * 4u;
    // a lane past the last query row still reads its share of K for its group; it writes nothing
    let w = rows_of(i0, gid.y);
    let q0 = w.q0;
    let k0 = w.k0;
    // (running max, running sum of exp) of each row
    var run0 = vec2f(NEG_INF, 0.0);
    var run1 = vec2f(NEG_INF, 0.0);
    var run2 = vec2f(NEG_INF, 0.0);
    var run3 = vec2f(NEG_INF, 0.0);
    for (var j0 = 0u; j0 < p.n_k; j0 += 16u) {
        let s = scores16(q0, k0, i0, j0, r, first);
        run0 = visit16(w.mask.x, w.live.x, j0, s.r0, run0);
        run1 = visit16(w.mask.y, w.live.y, j0, s.r1, run1);
        run2 = visit16(w.mask.z, w.live.z, j0, s.r2, run2);
        run3 = visit16(w.mask.w, w.live.w, j0, s.r3, run3);
    }
    for (var j0 = 0u; j0 < p.n_k; j0 += 16u) {
        let s = scores16(q0, k0, i0, j0, r, first);
        emit16(w.probs.x, w.mask.x, w.live.x, j0, s.r0, run0);
        emit16(w.probs.y, w.mask.y, w.live.y, j0, s.r1, run1);
        emit16(w.probs.z, w.mask.z, w.live.z, j0, s.r2, run2);
        emit16(w.probs.w, w.mask.w, w.live.w, j0, s.r3, run3);
    }
}
