// `main` of matmul.wgsl in its VEC4 forms, B along k (x·Wᵀ) or along n (P·V, with B_ALONG_N),
// each row of A and of B read once per group of eight lanes instead of once per invocation:
// composed after matmul.wgsl, whose parameters, overrides, reads and epilogue it uses. It needs
// subgroups (the engine compiles it only on a device whose subgroup sizes are multiples of 8)
// laid out along the workgroup's invocations in order, as every implementation does (the engine
// checks a product through it against the CPU's when it compiles it).
//
// A workgroup of 64 invocations covers a 64 × 64 tile of C, as `main`'s 8 × 8 do: eight groups of
// eight lanes, each group a 16 × 32 tile (groups 4 down, 2 across), each lane an 8 × 8 block of
// its group's tile (lanes 2 down, 4 across). Four k at a time a lane reads two rows of A and four
// vec4s of B (four of its rows along k, or one group of four of its columns at four k along n),
// so the group's 16 rows of A and 32 columns of B are read once among its eight lanes, and takes
// what its block multiplies from the lanes that read it (`subgroupShuffle`): 6 vec4 reads a lane
// where `main` makes 16. Reads are what a CPU Vulkan driver (lavapipe) spends its time on,
// one lane at a time; on a GPU they are the loads a register-tiled kernel shares through
// workgroup memory, here without a barrier.
// Dispatch (ceil(N / 64), ceil(M / 64), items · heads), as `main`.

@compute @workgroup_size(64, 1, 1)
fn main_shared(
    @builtin(workgroup_id) wid: vec3u,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let r = li % 8u; // the lane's place in its group
    let first = lane - lane % 8u; // the group's first lane in the subgroup
    let group = li / 8u;
    let gm = wid.y * 64u + (group / 2u) * 16u; // the group's tile: rows gm .. gm + 16,
    let gn = wid.x * 64u + (group % 2u) * 32u; // columns gn .. gn + 32
    let m0 = gm + (r / 4u) * 8u; // the lane's block: rows m0 .. m0 + 8,
    let n0 = gn + (r % 4u) * 8u; // columns n0 .. n0 + 8
    // the lanes holding the block's rows: A's row m0 + i at src_a + i / 2 (even i in `a_even`);
    // B's column n0 + j at src_b + j / 4: along k its row (`b_{j % 4}`), along n its four k
    // (element j % 4 of `b_0` .. `b_3`, one for each k)
    let src_a = first + (r / 4u) * 4u;
    let src_b = first + (r % 4u) * 2u;
    let item = wid.z / p.heads;
    let head = wid.z % p.heads;
    let a0 = p.a.base + item * p.a.item + head * p.a.head;
    let b0 = p.b.base + item * p.b.item + head * p.b.head;
    // a group whose tile lies past C leaves (its lanes together: no other group reads them)
    if (gm >= p.m || gn >= p.n) {
        return;
    }
    var acc = Block8();
    // no lane leaves alone: each reads its share for its group and takes part in every shuffle
    for (var k = 0u; k < p.k; k += 4u) {
        let a_even = load_a(a0, gm + 2u * r, k);
        let a_odd = load_a(a0, gm + 2u * r + 1u, k);
        var bk: Block;
        if (B_ALONG_N) {
            // columns gn + 4r .. gn + 4r + 4 (clamped to the last four, as `load_b`) at k .. k + 4
            let at = b0 + min(gn + 4u * r, p.n - 4u) + k * p.b_col;
            let b_0 = b4[at / 4u];
            let b_1 = b4[(at + p.b_col) / 4u];
            let b_2 = b4[(at + 2u * p.b_col) / 4u];
            let b_3 = b4[(at + 3u * p.b_col) / 4u];
            bk = Block(
                Row8(subgroupShuffle(b_0, src_b), subgroupShuffle(b_0, src_b + 1u)),
                Row8(subgroupShuffle(b_1, src_b), subgroupShuffle(b_1, src_b + 1u)),
                Row8(subgroupShuffle(b_2, src_b), subgroupShuffle(b_2, src_b + 1u)),
                Row8(subgroupShuffle(b_3, src_b), subgroupShuffle(b_3, src_b + 1u)),
            );
        } else {
            // rows gn + 4r .. gn + 4r + 4 (clamped to N) at k .. k + 4
            let b_0 = b4[(b0 + min(gn + 4u * r, p.n - 1u) * p.b.row + k) / 4u];
            let b_1 = b4[(b0 + min(gn + 4u * r + 1u, p.n - 1u) * p.b.row + k) / 4u];
            let b_2 = b4[(b0 + min(gn + 4u * r + 2u, p.n - 1u) * p.b.row + k) / 4u];
            let b_3 = b4[(b0 + min(gn + 4u * r + 3u, p.n - 1u) * p.b.row + k) / 4u];
            bk = transposed(array<vec4f, 8>(
                subgroupShuffle(b_0, src_b),
                subgroupShuffle(b_1, src_b),
                subgroupShuffle(b_2, src_b),
                subgroupShuffle(b_3, src_b),
                subgroupShuffle(b_0, src_b + 1u),
                subgroupShuffle(b_1, src_b + 1u),
                subgroupShuffle(b_2, src_b + 1u),
                subgroupShuffle(b_3, src_b + 1u),
            ));
        }
        acc.r0 = mac(acc.r0, subgroupShuffle(a_even, src_a), bk);
        acc.r1 = mac(acc.r1, subgroupShuffle(a_odd, src_a), bk);
        acc.r2 = mac(acc.r2, subgroupShuffle(a_even, src_a + 1u), bk);
        acc.r3 = mac(acc.r3, subgroupShuffle(a_odd, src_a + 1u), bk);
        acc.r4 = mac(acc.r4, subgroupShuffle(a_even, src_a + 2u), bk);
        acc.r5 = mac(acc.r5, subgroupShuffle(a_odd, src_a + 2u), bk);
        acc.r6 = mac(acc.r6, subgroupShuffle(a_even, src_a + 3u), bk);
        acc.r7 = mac(acc.r7, subgroupShuffle(a_odd, src_a + 3u), bk);
    }
    let c0 = p.c.base + item * p.c.item + head * p.c.head;
    store_block(c0, m0, n0, acc);
}
