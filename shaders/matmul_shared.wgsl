// `main` of matmul.wgsl in its VEC4 forms, B along k (x·Wᵀ) or along n (P·V, with B_ALONG_N),
// each row of A and of B read once per group of eight lanes instead of once per invocation:
// composed after tiles.wgsl (the register tiles) and matmul.wgsl, whose parameters, overrides,
// reads and epilogue it uses. It needs
// subgroups (the engine compiles it only on a device whose subgroup sizes are multiples of 8)
// laid out along the workgroup's invocations in order, as every implementation does (the engine
// checks a product through it against the CPU's when it compiles it).
//
// A workgroup of 32 invocations covers a 64 × 64 tile of C, as `main`'s 8 × 8 do: four groups of
// eight lanes, each group a 32 × 32 tile (groups 2 down, 2 across), each lane an 8 × 16 block of
// its group's tile (lanes 4 down, 2 across), as two 8 × 8 halves. Four k at a time a lane reads
// four rows of A and four vec4s of B (four of its rows along k, or one group of four of its
// columns at four k along n), so the group's 32 rows of A and 32 columns of B are read once
// among its eight lanes, and takes what its block multiplies from the lanes that read it
// (`subgroupShuffle`): 8 vec4 reads a lane for 512 multiply-adds, where `main` makes 16 for 256.
// Reads are what a CPU Vulkan driver (lavapipe) spends its time on, one lane at a time; on a GPU
// they are the loads a register-tiled kernel shares through workgroup memory, here without a
// barrier.
// Dispatch (ceil(N / 64), ceil(M / 64), items · heads), as `main`.

// B's columns n0 .. n0 + 8 at k .. k + 4 from the four vec4s `b_t` each lane read (its rows
// gn + 4r + t along k, or its four columns at k + t along n), held by lanes `src` and `src + 1`.
fn shared_block(b_0: vec4f, b_1: vec4f, b_2: vec4f, b_3: vec4f, src: u32) -> Block {
    if (B_ALONG_N) {
        return Block(
            Row8(subgroupShuffle(b_0, src), subgroupShuffle(b_0, src + 1u)),
            Row8(subgroupShuffle(b_1, src), subgroupShuffle(b_1, src + 1u)),
            Row8(subgroupShuffle(b_2, src), subgroupShuffle(b_2, src + 1u)),
            Row8(subgroupShuffle(b_3, src), subgroupShuffle(b_3, src + 1u)),
        );
    }
    return transposed(array<vec4f, 8>(
        subgroupShuffle(b_0, src),
        subgroupShuffle(b_1, src),
        subgroupShuffle(b_2, src),
        subgroupShuffle(b_3, src),
        subgroupShuffle(b_0, src + 1u),
        subgroupShuffle(b_1, src + 1u),
        subgroupShuffle(b_2, src + 1u),
        subgroupShuffle(b_3, src + 1u),
    ));
}

@compute @workgroup_size(32, 1, 1)
fn main_shared(
    @builtin(workgroup_id) wid: vec3u,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let r = li % 8u; // the lane's place in its group
    let first = lane - lane % 8u; // the group's first lane in the subgroup
    let group = li / 8u;
    let gm = wid.y * 64u + (group / 2u) * 32u; // the group's tile: rows gm .. gm + 32,
    let gn = wid.x * 64u + (group % 2u) * 32u; // columns gn .. gn + 32
    let m0 = gm + (r / 2u) * 8u; // the lane's block: rows m0 .. m0 + 8,
    let n0 = gn + (r % 2u) * 16u; // columns n0 .. n0 + 16
    // the lanes holding the block's rows: A's row m0 + i at src_a + i / 4 (in `a_{i % 4}`);
    // B's column n0 + j at src_b + j / 4: along k its row (`b_{j % 4}`), along n its four k
    // (element j % 4 of `b_0` .. `b_3`, one for each k)
    let src_a = first + (r / 2u) * 2u;
    let src_b = first + (r % 2u) * 4u;
    let at = offsets(wid.z);
    let a0 = at.x;
    let b0 = at.y;
    // a group whose tile lies past C leaves (its lanes together: no other group reads them)
    if (gm >= p.m || gn >= p.n) {
        return;
    }
    var left = Block8(); // columns n0 .. n0 + 8
    var right = Block8(); // columns n0 + 8 .. n0 + 16
    // no lane leaves alone: each reads its share for its group and takes part in every shuffle
    for (var k = 0u; k < p.k; k += 4u) {
        // rows gm + 4r .. gm + 4r + 4 (clamped to M by `load_a`)
        let a_0 = load_a(a0, gm + 4u * r, k);
        let a_1 = load_a(a0, gm + 4u * r + 1u, k);
        let a_2 = load_a(a0, gm + 4u * r + 2u, k);
        let a_3 = load_a(a0, gm + 4u * r + 3u, k);
        let n = gn + 4u * r;
        var b_0: vec4f;
        var b_1: vec4f;
        var b_2: vec4f;
        var b_3: vec4f;
        if (B_ALONG_N) {
            // columns n .. n + 4 (clamped to the last four) at k .. k + 4
            b_0 = b_cols4(b0, n, k);
            b_1 = b_cols4(b0, n, k + 1u);
            b_2 = b_cols4(b0, n, k + 2u);
            b_3 = b_cols4(b0, n, k + 3u);
        } else {
            // rows n .. n + 4 (clamped to N) at k .. k + 4
            b_0 = b_row4(b0, n, k);
            b_1 = b_row4(b0, n + 1u, k);
            b_2 = b_row4(b0, n + 2u, k);
            b_3 = b_row4(b0, n + 3u, k);
        }
        let bl = shared_block(b_0, b_1, b_2, b_3, src_b);
        let br = shared_block(b_0, b_1, b_2, b_3, src_b + 2u);
        // A's rows m0 .. m0 + 8, from the lanes that read them
        let rows = array<vec4f, 8>(
            subgroupShuffle(a_0, src_a),
            subgroupShuffle(a_1, src_a),
            subgroupShuffle(a_2, src_a),
            subgroupShuffle(a_3, src_a),
            subgroupShuffle(a_0, src_a + 1u),
            subgroupShuffle(a_1, src_a + 1u),
            subgroupShuffle(a_2, src_a + 1u),
            subgroupShuffle(a_3, src_a + 1u),
        );
        left = mac_block(left, rows, bl);
        right = mac_block(right, rows, br);
    }
    store_block(at.z, m0, n0, left);
    store_block(at.z, m0, n0 + 8u, right);
}

// Lane `src`'s Block: B's eight columns that lane read, at four k.
fn from_lane(b: Block, src: u32) -> Block {
    return Block(
        Row8(subgroupShuffle(b.k0.lo, src), subgroupShuffle(b.k0.hi, src)),
        Row8(subgroupShuffle(b.k1.lo, src), subgroupShuffle(b.k1.hi, src)),
        Row8(subgroupShuffle(b.k2.lo, src), subgroupShuffle(b.k2.hi, src)),
        Row8(subgroupShuffle(b.k3.lo, src), subgroupShuffle(b.k3.hi, src)),
    );
}

// `main_shared` for C of at most 16 rows (`SHORT_ROWS` in src/engine/gpu/kernels.rs: a sentence
// of up to 16 tokens, where `main_shared`'s 32-row groups would multiply rows that do not
// exist): the same 8 × 16 block a lane, its group a 16 × 64 tile (lanes 2 down, 4 across), the
// workgroup's four groups 4 down. Four k at a time a lane reads two rows of A and eight vec4s of
// B (`load_b`: eight of its rows along k, or two groups of four of its columns at four k along
// n), and takes each half of its block's columns from one lane.
// Dispatch (ceil(N / 64), ceil(M / 64), items · heads), as `main`.
@compute @workgroup_size(32, 1, 1)
fn main_shared_short(
    @builtin(workgroup_id) wid: vec3u,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let r = li % 8u; // the lane's place in its group
    let first = lane - lane % 8u; // the group's first lane in the subgroup
    let gm = wid.y * 64u + (li / 8u) * 16u; // the group's tile: rows gm .. gm + 16,
    let gn = wid.x * 64u; // columns gn .. gn + 64
    let m0 = gm + (r / 4u) * 8u; // the lane's block: rows m0 .. m0 + 8,
    let n0 = gn + (r % 4u) * 16u; // columns n0 .. n0 + 16
    // A's row m0 + i at src_a + i / 2 (in `a_{i % 2}`); B's columns n0 .. n0 + 8 at src_b, the
    // next eight at src_b + 1
    let src_a = first + (r / 4u) * 4u;
    let src_b = first + (r % 4u) * 2u;
    let at = offsets(wid.z);
    let a0 = at.x;
    let b0 = at.y;
    // a group whose tile lies past C leaves (its lanes together: no other group reads them)
    if (gm >= p.m || gn >= p.n) {
        return;
    }
    var left = Block8(); // columns n0 .. n0 + 8
    var right = Block8(); // columns n0 + 8 .. n0 + 16
    for (var k = 0u; k < p.k; k += 4u) {
        // rows gm + 2r, gm + 2r + 1 (clamped to M by `load_a`)
        let a_0 = load_a(a0, gm + 2u * r, k);
        let a_1 = load_a(a0, gm + 2u * r + 1u, k);
        // B's columns gn + 8r .. gn + 8r + 8 at k .. k + 4 (clamped as `load_b` clamps)
        let mine = load_b(b0, gn + 8u * r, k);
        let bl = from_lane(mine, src_b);
        let br = from_lane(mine, src_b + 1u);
        // A's rows m0 .. m0 + 8, from the lanes that read them
        let rows = array<vec4f, 8>(
            subgroupShuffle(a_0, src_a),
            subgroupShuffle(a_1, src_a),
            subgroupShuffle(a_0, src_a + 1u),
            subgroupShuffle(a_1, src_a + 1u),
            subgroupShuffle(a_0, src_a + 2u),
            subgroupShuffle(a_1, src_a + 2u),
            subgroupShuffle(a_0, src_a + 3u),
            subgroupShuffle(a_1, src_a + 3u),
        );
        left = mac_block(left, rows, bl);
        right = mac_block(right, rows, br);
    }
    store_block(at.z, m0, n0, left);
    store_block(at.z, m0, n0 + 8u, right);
}
