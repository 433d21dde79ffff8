// `main` of attention_probs.wgsl in its VEC4 form, with each row of K read once per group of
// eight lanes instead of once per invocation: composed after attention_probs.wgsl, whose
// parameters, reads, online softmax (`visit`) and second pass (`normalize`) it uses. Like
// matmul_shared.wgsl it needs subgroups of 8 lanes or more laid out along the workgroup's
// invocations in order (the engine compiles both, or neither).
//
// A workgroup's invocations all work on one (item, head) and walk its keys together. Eight keys
// at a time, lane r of a group of eight reads key j0 + r, a vec4 of d_k at a time, and every lane
// takes all eight from the group (`subgroupShuffle`) to score its four query rows against them:
// one vec4 of K read a lane where `main` reads eight. Q is read as in `main`.
// Dispatch (ceil(n_q / (4·QUERIES_WG)), B·H, 1), as `main`.

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
    for (var j0 = 0u; j0 < p.n_k; j0 += 8u) {
        // s_r (keys j0 .. j0 + 4) and t_r (j0 + 4 .. j0 + 8) of row i0 + r
        var s0 = vec4f(0.0);
        var s1 = vec4f(0.0);
        var s2 = vec4f(0.0);
        var s3 = vec4f(0.0);
        var t0 = vec4f(0.0);
        var t1 = vec4f(0.0);
        var t2 = vec4f(0.0);
        var t3 = vec4f(0.0);
        for (var d = 0u; d < p.d_k; d += 4u) {
            let mine = load_k(k0, j0 + r, d); // clamped to the last key past n_k
            let ka = subgroupShuffle(mine, first);
            let kb = subgroupShuffle(mine, first + 1u);
            let kc = subgroupShuffle(mine, first + 2u);
            let kd = subgroupShuffle(mine, first + 3u);
            let ke = subgroupShuffle(mine, first + 4u);
            let kf = subgroupShuffle(mine, first + 5u);
            let kg = subgroupShuffle(mine, first + 6u);
            let kh = subgroupShuffle(mine, first + 7u);
            let qa = load_q(q0, i0, d);
            s0 += vec4f(dot(qa, ka), dot(qa, kb), dot(qa, kc), dot(qa, kd));
            t0 += vec4f(dot(qa, ke), dot(qa, kf), dot(qa, kg), dot(qa, kh));
            let qb = load_q(q0, i0 + 1u, d);
            s1 += vec4f(dot(qb, ka), dot(qb, kb), dot(qb, kc), dot(qb, kd));
            t1 += vec4f(dot(qb, ke), dot(qb, kf), dot(qb, kg), dot(qb, kh));
            let qc = load_q(q0, i0 + 2u, d);
            s2 += vec4f(dot(qc, ka), dot(qc, kb), dot(qc, kc), dot(qc, kd));
            t2 += vec4f(dot(qc, ke), dot(qc, kf), dot(qc, kg), dot(qc, kh));
            let qd = load_q(q0, i0 + 3u, d);
            s3 += vec4f(dot(qd, ka), dot(qd, kb), dot(qd, kc), dot(qd, kd));
            t3 += vec4f(dot(qd, ke), dot(qd, kf), dot(qd, kg), dot(qd, kh));
        }
        // `visit` skips keys past n_k
        run0 = visit(w.probs.x, w.mask.x, w.live.x, j0, s0 * p.scale, run0);
        run0 = visit(w.probs.x, w.mask.x, w.live.x, j0 + 4u, t0 * p.scale, run0);
        run1 = visit(w.probs.y, w.mask.y, w.live.y, j0, s1 * p.scale, run1);
        run1 = visit(w.probs.y, w.mask.y, w.live.y, j0 + 4u, t1 * p.scale, run1);
        run2 = visit(w.probs.z, w.mask.z, w.live.z, j0, s2 * p.scale, run2);
        run2 = visit(w.probs.z, w.mask.z, w.live.z, j0 + 4u, t2 * p.scale, run2);
        run3 = visit(w.probs.w, w.mask.w, w.live.w, j0, s3 * p.scale, run3);
        run3 = visit(w.probs.w, w.mask.w, w.live.w, j0 + 4u, t3 * p.scale, run3);
    }
    normalize(w.probs.x, w.mask.x, w.live.x, run0);
    normalize(w.probs.y, w.mask.y, w.live.y, run1);
    normalize(w.probs.z, w.mask.z, w.live.z, run2);
    normalize(w.probs.w, w.mask.w, w.live.w, run3);
}
