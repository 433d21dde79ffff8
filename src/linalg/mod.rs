//! The CPU's numeric kernels, below both the model's files and the engines: matrix products
//! (`gemm`: packed panels, one thread or rayon's), the instruction sets they are compiled for
//! (`isa`), a decoding step's team of threads (`team`), and the dot product the quantized blocks
//! and the attention share.

pub mod gemm;
pub(crate) mod isa;
pub mod team;

/// `a · b`, in 16 lanes that LLVM vectorises (SSE/AVX natively, `simd128` in wasm): four
/// vectors of four, each its own chain of adds, summed in halves at the end.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 16;
    let (a16, a_tail) = a.as_chunks::<LANES>();
    let (b16, b_tail) = b.as_chunks::<LANES>();
    let mut acc = [[0.0f32; 4]; 4];
    for (a, b) in a16.iter().zip(b16) {
        for (v, acc) in acc.iter_mut().enumerate() {
            for l in 0..4 {
                acc[l] += a[4 * v + l] * b[4 * v + l];
            }
        }
    }
    let tail: f32 = a_tail.iter().zip(b_tail).map(|(a, b)| a * b).sum();
    // (0 + 2) + (1 + 3), lane by lane, then the four lanes in halves: vector adds, where 16
    // scalar ones in a row (each waiting for the last) took longer than a head's 64 products
    // (attention's scores: a dot product a key)
    let mut sum = [0.0f32; 4];
    for l in 0..4 {
        sum[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    ((sum[0] + sum[2]) + (sum[1] + sum[3])) + tail
}
