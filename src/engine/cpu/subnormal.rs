//! Flushing subnormal f32 values to zero while a kernel runs.
//!
//! CP-ALS drives some factor entries toward zero, and products of three or four such
//! entries fall below 2⁻¹²⁶ (1.2e-38), into the subnormal range, where x86 cores take a
//! microcode assist of a hundred cycles or more per operation. On movielens-10m-tags
//! that made the MTTKRP of a CP-ALS iteration about 1.5× slower than the same MTTKRP
//! on random factors. The walk therefore runs with the MXCSR flush-to-zero and
//! denormals-are-zero bits set, as GPUs run fp32 by default: a contribution below
//! 2⁻¹²⁶ is dropped, which changes no result that the f32 output can represent to
//! better than a few bits anyway. The previous MXCSR is restored when the guard drops,
//! so the rest of the program (and other work on rayon's threads) is untouched.

/// Sets FTZ and DAZ on the current thread until dropped (a no-op off x86-64).
pub(super) struct FlushSubnormals {
    #[cfg(target_arch = "x86_64")]
    old: u32,
}

#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);

impl FlushSubnormals {
    /// Sets the flags on this thread.
    #[inline]
    pub(super) fn new() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            let old = read_mxcsr();
            write_mxcsr(old | FTZ_DAZ);
            FlushSubnormals { old }
        }
        #[cfg(not(target_arch = "x86_64"))]
        FlushSubnormals {}
    }
}

impl Drop for FlushSubnormals {
    #[inline]
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        write_mxcsr(self.old);
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn read_mxcsr() -> u32 {
    let mut v: u32 = 0;
    // SAFETY: stmxcsr stores the 32-bit control register into the local `v`.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack, preserves_flags)) };
    v
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn write_mxcsr(v: u32) {
    // SAFETY: ldmxcsr loads a value read from MXCSR with only the FTZ/DAZ bits
    // changed; both are defined on every x86-64 core with SSE2.
    unsafe {
        std::arch::asm!("ldmxcsr [{}]", in(reg) &v, options(nostack, readonly, preserves_flags))
    };
}

#[cfg(test)]
mod tests {
    use super::FlushSubnormals;

    #[test]
    fn subnormals_flush_inside_the_guard_and_not_after() {
        let tiny = std::hint::black_box(f32::MIN_POSITIVE);
        let half = std::hint::black_box(0.5f32);
        {
            let _g = FlushSubnormals::new();
            assert_eq!(std::hint::black_box(tiny * half), 0.0);
        }
        let after = std::hint::black_box(tiny * half);
        assert!(after > 0.0 && after < f32::MIN_POSITIVE);
    }
}
