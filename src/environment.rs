//! The one place where the engine's switches are read from the environment, for the
//! front ends (the command line and Python) to call once when they make an engine;
//! nothing under `engine` or `decomp` reads a variable.
//!
//! - `SPTMC_CPU_MTTKRP=walk`: the CPU backend's MTTKRP walks the HLS shares instead of
//!   running row by row ([`MttkrpKernel::Walk`]);
//! - `SPTMC_CUDA_CP_SESSION=0`: CP-ALS on CUDA updates its factors on the host
//!   ([`CudaOptions::cp_session`] off);
//! - `SPTMC_CUDA_STAGING=0`: CUDA copies large outputs straight back, without the
//!   page-locked staging buffer ([`CudaOptions::staging`] off).
//!
//! Any other value leaves the default. The thread count of the CPU backend is the
//! caller's (rayon's `RAYON_NUM_THREADS` applies when the caller leaves it open).

use crate::engine::{CpuOptions, CudaOptions, EngineOptions, MttkrpKernel};

/// The engine's options as the environment sets them, defaults elsewhere.
pub fn engine_options() -> EngineOptions {
    engine_options_from(|name| std::env::var(name).ok())
}

/// [`engine_options`] with the variables looked up by `var` (for tests).
pub fn engine_options_from(var: impl Fn(&str) -> Option<String>) -> EngineOptions {
    let is = |name: &str, value: &str| var(name).as_deref() == Some(value);
    EngineOptions {
        cpu: CpuOptions {
            mttkrp: if is("SPTMC_CPU_MTTKRP", "walk") {
                MttkrpKernel::Walk
            } else {
                MttkrpKernel::Rows
            },
            ..CpuOptions::default()
        },
        cuda: CudaOptions {
            cp_session: !is("SPTMC_CUDA_CP_SESSION", "0"),
            staging: !is("SPTMC_CUDA_STAGING", "0"),
            ..CudaOptions::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_variable_sets_its_option_and_nothing_else() {
        let none = engine_options_from(|_| None);
        assert_eq!(none, EngineOptions::default());
        let set = |name: &'static str, value: &'static str| {
            engine_options_from(move |n| (n == name).then(|| value.to_string()))
        };
        let walk = set("SPTMC_CPU_MTTKRP", "walk");
        assert_eq!(walk.cpu.mttkrp, MttkrpKernel::Walk);
        assert_eq!(walk.cuda, CudaOptions::default());
        assert_eq!(
            set("SPTMC_CPU_MTTKRP", "rows").cpu.mttkrp,
            MttkrpKernel::Rows
        );
        let host = set("SPTMC_CUDA_CP_SESSION", "0");
        assert!(!host.cuda.cp_session && host.cuda.staging);
        assert_eq!(host.cpu, CpuOptions::default());
        let direct = set("SPTMC_CUDA_STAGING", "0");
        assert!(direct.cuda.cp_session && !direct.cuda.staging);
        assert!(set("SPTMC_CUDA_STAGING", "1").cuda.staging);
    }
}
