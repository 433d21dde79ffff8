//! The CPU's numeric kernels, below both the model's files and the engines: matrix products
//! (`gemm`: packed panels, one thread or rayon's), the instruction sets they are compiled for
//! (`isa`), a decoding step's team of threads (`team`), and the dot product the quantized blocks
//! and the attention share.

pub mod gemm;
pub(crate) mod isa;
pub mod team;

/// `a · b`, in 16 lanes that LLVM vectorises (SSE/AVX natively, `simd128` in wasm).
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 16;
    let (a16, a_tail) = a.as_chunks::<LANES>();
    let (b16, b_tail) = b.as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for (a, b) in a16.iter().zip(b16) {
        for k in 0..LANES {
            acc[k] += a[k] * b[k];
        }
    }
    let tail: f32 = a_tail.iter().zip(b_tail).map(|(a, b)| a * b).sum();
    acc.iter().sum::<f32>() + tail
}
