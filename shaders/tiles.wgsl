// The register tiles of the products, composed before the kernel's own file (matmul.wgsl and
// quant.wgsl; src/engine/gpu/kernels.rs): each invocation keeps an 8 × 8 block of the output in
// registers and updates it four k at a time, from eight rows of the left operand (A, or x) and
// eight columns of the output's worth of the right one (B, or W's rows).

// Eight consecutive columns of one row of the output.
struct Row8 {
    lo: vec4f,
    hi: vec4f,
}

// The right operand at four consecutive k (k0..k3): for each k, the eight consecutive columns of
// the output it makes (B's columns n0 .. n0 + 8, or W's rows n0 .. n0 + 8).
struct Block {
    k0: Row8,
    k1: Row8,
    k2: Row8,
    k3: Row8,
}

// An invocation's 8 × 8 block of the output: rows m0 .. m0 + 8, eight columns each.
struct Block8 {
    r0: Row8,
    r1: Row8,
    r2: Row8,
    r3: Row8,
    r4: Row8,
    r5: Row8,
    r6: Row8,
    r7: Row8,
}

// acc + Σ_t a[t] · B[k_t]
fn mac(acc: Row8, av: vec4f, bk: Block) -> Row8 {
    let lo = acc.lo + av.x * bk.k0.lo + av.y * bk.k1.lo + av.z * bk.k2.lo + av.w * bk.k3.lo;
    let hi = acc.hi + av.x * bk.k0.hi + av.y * bk.k1.hi + av.z * bk.k2.hi + av.w * bk.k3.hi;
    return Row8(lo, hi);
}

// acc + the eight rows of the left operand (`rows`, four k each) times the Block: an 8 × 8 block,
// updated.
fn mac_block(acc: Block8, rows: array<vec4f, 8>, bk: Block) -> Block8 {
    return Block8(
        mac(acc.r0, rows[0], bk),
        mac(acc.r1, rows[1], bk),
        mac(acc.r2, rows[2], bk),
        mac(acc.r3, rows[3], bk),
        mac(acc.r4, rows[4], bk),
        mac(acc.r5, rows[5], bk),
        mac(acc.r6, rows[6], bk),
        mac(acc.r7, rows[7], bk),
    );
}

// Eight rows of the right operand (n0 + j), four k each, as the Block of four k, eight columns
// each.
fn transposed(r: array<vec4f, 8>) -> Block {
    return Block(
        Row8(vec4f(r[0].x, r[1].x, r[2].x, r[3].x), vec4f(r[4].x, r[5].x, r[6].x, r[7].x)),
        Row8(vec4f(r[0].y, r[1].y, r[2].y, r[3].y), vec4f(r[4].y, r[5].y, r[6].y, r[7].y)),
        Row8(vec4f(r[0].z, r[1].z, r[2].z, r[3].z), vec4f(r[4].z, r[5].z, r[6].z, r[7].z)),
        Row8(vec4f(r[0].w, r[1].w, r[2].w, r[3].w), vec4f(r[4].w, r[5].w, r[6].w, r[7].w)),
    );
}
