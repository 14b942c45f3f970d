//! The one place where the engine's switches are read from the environment, for the
//! front ends (the command line and Python) to call once when they make an engine;
//! nothing under `engine` or `decomp` reads a variable.
//!
//! - `SPTMC_CPU_MTTKRP=walk`: the CPU backend's MTTKRP and TTMc walk the HLS shares
//!   instead of running row by row ([`MttkrpKernel::Walk`]);
//! - `SPTMC_CPU_VECTORS=avx2`: the CPU backend's blocked kernels stay on AVX2 where the
//!   CPU has AVX-512 ([`CpuVectors::Avx2`]);
//! - `SPTMC_CPU_PHI_SESSION=0`: CP-APR on the CPU runs Φ per call in f32, as on CUDA
//!   ([`PhiKernel::PerCall`]);
//! - `SPTMC_CUDA_CP_SESSION=0`: CP-ALS on CUDA updates its factors on the host
//!   ([`CudaOptions::cp_session`] off);
//! - `SPTMC_CUDA_STAGING=0`: CUDA copies large outputs straight back, without the
//!   page-locked staging buffer ([`CudaOptions::staging`] off);
//! - where kernel families that were not embedded at build time are compiled from
//!   ([`CudaOptions::kernels`], [`kernel_search_from`]): `SPTMC_NVRTC_LIB`,
//!   `SPTMC_CUDA_INCLUDE`, `CUDA_HOME` / `CUDA_PATH`, `SPTMC_REQUIRE_EMBEDDED_KERNELS`.
//!
//! - `mpirun`'s own variables: whether this process is one rank of several, and its
//!   place on its node ([`mpi_launch`]).
//!
//! Any other value leaves the default. The thread count of the CPU backend is the
//! caller's (rayon's `RAYON_NUM_THREADS` applies when the caller leaves it open).

use crate::engine::cuda::KernelSearch;
use crate::engine::{CpuOptions, CpuVectors, CudaOptions, EngineOptions, MttkrpKernel, PhiKernel};
use std::path::PathBuf;

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
            vectors: if is("SPTMC_CPU_VECTORS", "avx2") {
                CpuVectors::Avx2
            } else {
                CpuVectors::Widest
            },
            phi: if is("SPTMC_CPU_PHI_SESSION", "0") {
                PhiKernel::PerCall
            } else {
                PhiKernel::Session
            },
            ..CpuOptions::default()
        },
        cuda: CudaOptions {
            cp_session: !is("SPTMC_CUDA_CP_SESSION", "0"),
            staging: !is("SPTMC_CUDA_STAGING", "0"),
            kernels: kernel_search_from(&var),
            ..CudaOptions::default()
        },
    }
}

/// How `mpirun` started this process, from the variables its launcher sets (Open
/// MPI's `OMPI_COMM_WORLD_SIZE` / `_LOCAL_RANK` / `_LOCAL_SIZE`, or the PMI ones of
/// MPICH-style launchers: `PMI_SIZE`, `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpiLaunch {
    /// Ranks in the run.
    pub size: usize,
    /// This rank's number among those on its node.
    pub local_rank: usize,
    /// Ranks on its node.
    pub local_size: usize,
}

/// The launch this process is part of; `None` when no MPI launcher started it.
pub fn mpi_launch() -> Option<MpiLaunch> {
    mpi_launch_from(|name| std::env::var(name).ok())
}

/// [`mpi_launch`] with the variables looked up by `var` (for tests).
pub fn mpi_launch_from(var: impl Fn(&str) -> Option<String>) -> Option<MpiLaunch> {
    let num = |name: &str| var(name).and_then(|v| v.trim().parse::<usize>().ok());
    let (size, local_rank, local_size) = match num("OMPI_COMM_WORLD_SIZE") {
        Some(size) => (
            size,
            num("OMPI_COMM_WORLD_LOCAL_RANK"),
            num("OMPI_COMM_WORLD_LOCAL_SIZE"),
        ),
        None => (
            num("PMI_SIZE")?,
            num("MPI_LOCALRANKID"),
            num("MPI_LOCALNRANKS"),
        ),
    };
    Some(MpiLaunch {
        size: size.max(1),
        local_rank: local_rank.unwrap_or(0),
        local_size: local_size.unwrap_or(size).max(1),
    })
}

/// Where the CUDA backend looks for NVRTC and the CUDA headers when a kernel family
/// was not embedded at build time, with the variables looked up by `var`:
/// - `SPTMC_NVRTC_LIB`: an NVRTC library to try first;
/// - `SPTMC_CUDA_INCLUDE`: `:`-separated folders that may hold `cuda_fp16.h`;
/// - `CUDA_HOME`, else `CUDA_PATH`: the toolkit root (its `include` and `lib64`);
/// - `SPTMC_REQUIRE_EMBEDDED_KERNELS=1`: never compile at run time.
pub fn kernel_search_from(var: impl Fn(&str) -> Option<String>) -> KernelSearch {
    KernelSearch {
        nvrtc_lib: var("SPTMC_NVRTC_LIB").map(PathBuf::from),
        include_dirs: var("SPTMC_CUDA_INCLUDE")
            .map(|v| {
                v.split(':')
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from)
                    .collect()
            })
            .unwrap_or_default(),
        cuda_home: var("CUDA_HOME")
            .or_else(|| var("CUDA_PATH"))
            .map(PathBuf::from),
        require_embedded: var("SPTMC_REQUIRE_EMBEDDED_KERNELS").as_deref() == Some("1"),
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
        assert_eq!(walk.cpu.vectors, CpuVectors::Widest);
        let avx2 = set("SPTMC_CPU_VECTORS", "avx2");
        assert_eq!(avx2.cpu.vectors, CpuVectors::Avx2);
        assert_eq!(avx2.cpu.mttkrp, MttkrpKernel::Rows);
        assert_eq!(walk.cuda, CudaOptions::default());
        assert_eq!(
            set("SPTMC_CPU_MTTKRP", "rows").cpu.mttkrp,
            MttkrpKernel::Rows
        );
        let per_call = set("SPTMC_CPU_PHI_SESSION", "0");
        assert_eq!(per_call.cpu.phi, PhiKernel::PerCall);
        assert_eq!(per_call.cpu.mttkrp, MttkrpKernel::Rows);
        assert_eq!(walk.cpu.phi, PhiKernel::Session);
        assert_eq!(
            set("SPTMC_CPU_PHI_SESSION", "1").cpu.phi,
            PhiKernel::Session
        );
        let host = set("SPTMC_CUDA_CP_SESSION", "0");
        assert!(!host.cuda.cp_session && host.cuda.staging);
        assert_eq!(host.cpu, CpuOptions::default());
        let direct = set("SPTMC_CUDA_STAGING", "0");
        assert!(direct.cuda.cp_session && !direct.cuda.staging);
        assert!(set("SPTMC_CUDA_STAGING", "1").cuda.staging);
        let lib = set("SPTMC_NVRTC_LIB", "/x/libnvrtc.so.12").cuda.kernels;
        assert_eq!(lib.nvrtc_lib, Some(PathBuf::from("/x/libnvrtc.so.12")));
        assert_eq!(lib.include_dirs, Vec::<PathBuf>::new());
        let inc = set("SPTMC_CUDA_INCLUDE", "/a:/b").cuda.kernels.include_dirs;
        assert_eq!(inc, [PathBuf::from("/a"), PathBuf::from("/b")]);
        let path = set("CUDA_PATH", "/cuda").cuda.kernels.cuda_home;
        assert_eq!(path, Some(PathBuf::from("/cuda")));
        assert!(
            set("SPTMC_REQUIRE_EMBEDDED_KERNELS", "1")
                .cuda
                .kernels
                .require_embedded
        );
        assert!(
            !set("SPTMC_REQUIRE_EMBEDDED_KERNELS", "0")
                .cuda
                .kernels
                .require_embedded
        );
    }

    #[test]
    fn the_mpi_launch_is_read_from_open_mpi_or_pmi_variables() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |n: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(mpi_launch_from(|_| None), None);
        let ompi = mpi_launch_from(vars(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ]));
        assert_eq!(
            ompi,
            Some(MpiLaunch {
                size: 4,
                local_rank: 1,
                local_size: 2
            })
        );
        let pmi = mpi_launch_from(vars(&[("PMI_SIZE", "3")]));
        assert_eq!(
            pmi,
            Some(MpiLaunch {
                size: 3,
                local_rank: 0,
                local_size: 3
            })
        );
        assert_eq!(mpi_launch_from(vars(&[("PMI_SIZE", "x")])), None);
    }
}
