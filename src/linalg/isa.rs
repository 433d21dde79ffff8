//! The instruction sets the CPU engine's loops are compiled for, chosen once at run time: the
//! native build targets the baseline (SSE2 on x86-64) so that it runs anywhere, and the loops
//! that carry a pass (the matrix product's micro-kernel, softmax, GELU) are compiled a second
//! time for AVX2 + FMA and AVX-512, as ONNX Runtime's MLAS and PyTorch dispatch theirs.

/// An instruction set a loop is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
    Avx512,
    #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
    Avx2Fma,
    /// WebAssembly SIMD, or the target's baseline (SSE2 on x86-64).
    Baseline,
}

impl Isa {
    /// Every instruction set this CPU runs, the widest first.
    pub fn available() -> Vec<Isa> {
        #[allow(unused_mut)] // only x86 adds to it
        let mut isas = vec![Isa::Baseline];
        #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                isas.insert(0, Isa::Avx2Fma);
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                isas.insert(0, Isa::Avx512);
            }
        }
        isas
    }

    /// The widest instruction set this CPU runs (detected once).
    pub fn best() -> Isa {
        static BEST: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| Isa::available()[0])
    }
}

/// Runs `f` compiled for the widest instruction set the CPU has: `f`'s body, and whatever it
/// calls that is inlined into it (mark such helpers `#[inline(always)]`), is vectorised for
/// AVX-512 or AVX2 where the CPU runs them. Only the instructions differ: the arithmetic is
/// the same IEEE operations in the same order (LLVM fuses nothing without being asked), so the
/// result is the same bits on every instruction set.
#[inline(always)]
pub fn vectorised<R>(f: impl FnOnce() -> R) -> R {
    on(Isa::best(), f)
}

/// [`vectorised`] on a given instruction set, which the CPU must run (the tests walk every one
/// the CPU has).
#[inline(always)]
pub fn on<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        match isa {
            // SAFETY: `available` found the instruction set on this CPU
            Isa::Avx512 => unsafe { avx512(f) },
            Isa::Avx2Fma => unsafe { avx2(f) },
            Isa::Baseline => f(),
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
    match isa {
        Isa::Baseline => f(),
    }
}
