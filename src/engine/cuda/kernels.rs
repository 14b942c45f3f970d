//! The kernel module: PTX embedded at build time when build.rs found a CUDA compiler,
//! otherwise compiled by NVRTC at run time from the embedded sources, once per process.

use crate::error::{Error, Result};
use std::sync::OnceLock;

/// The kernel sources, embedded so run-time compilation needs no files.
const SOURCES: &[(&str, &str)] = &[
    ("hls_abi.h", include_str!("../../../kernels/hls_abi.h")),
    (
        "hls_common.cuh",
        include_str!("../../../kernels/hls_common.cuh"),
    ),
    (
        "dense_mttkrp.cu",
        include_str!("../../../kernels/dense_mttkrp.cu"),
    ),
    (
        "dense_ttmc.cu",
        include_str!("../../../kernels/dense_ttmc.cu"),
    ),
    ("sparse.cu", include_str!("../../../kernels/sparse.cu")),
    ("fused.cu", include_str!("../../../kernels/fused.cu")),
];

/// The file whose PTX holds every entry point.
pub const ENTRY: &str = "fused.cu";
/// The fused MTTKRP entry point.
pub const FUSED_MTTKRP: &str = "hls_fused_mttkrp";
/// The fused TTMc entry point.
pub const FUSED_TTMC: &str = "hls_fused_ttmc";
/// The dense-tiles-only MTTKRP entry point (grid = one block per tile), for
/// [`crate::engine::Launch::Sequential`].
pub const DENSE_MTTKRP: &str = "hls_dense_mttkrp";
/// The dense-tiles-only TTMc entry point (grid = one block per tile).
pub const DENSE_TTMC: &str = "hls_dense_ttmc";
/// The sparse-only entry point for both ops (grid = the sparse batches' blocks).
pub const SPARSE: &str = "hls_sparse";
/// The architecture the PTX targets (the driver JIT-compiles it for newer GPUs).
pub const ARCH: &str = "compute_80";

/// How the kernels were built, as build.rs recorded it.
pub const BUILD: &str = env!("SPTMC_KERNEL_BUILD");

#[cfg(sptmc_prebuilt_ptx)]
const PREBUILT: Option<&str> = Some(include_str!(concat!(env!("OUT_DIR"), "/fused.ptx")));
#[cfg(not(sptmc_prebuilt_ptx))]
const PREBUILT: Option<&str> = None;

/// `name`'s source with our own `#include "..."` lines replaced by the files (each
/// once), leaving system headers (`<...>`) to the compiler.
pub fn inlined_source(name: &str) -> Option<String> {
    fn walk(name: &str, seen: &mut Vec<String>, out: &mut String) -> Option<()> {
        if seen.iter().any(|s| s == name) {
            return Some(());
        }
        seen.push(name.to_string());
        let src = SOURCES.iter().find(|(n, _)| *n == name)?.1;
        for line in src.lines() {
            let t = line.trim_start();
            if t.starts_with("#pragma once") {
                continue;
            }
            if let Some(rest) = t.strip_prefix("#include \"") {
                let inc = rest.split('"').next()?;
                walk(inc, seen, out)?;
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        Some(())
    }
    let mut out = String::new();
    walk(name, &mut Vec::new(), &mut out)?;
    Some(out)
}

/// Folders that may hold `cuda_fp16.h` and `mma.h` for run-time NVRTC:
/// `SPTMC_CUDA_INCLUDE` (`:`-separated), `$CUDA_HOME/include`, `/usr/local/cuda/include`.
fn include_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::env::var("SPTMC_CUDA_INCLUDE")
        .map(|v| v.split(':').map(str::to_string).collect())
        .unwrap_or_default();
    if let Ok(home) = std::env::var("CUDA_HOME") {
        dirs.push(format!("{home}/include"));
    }
    dirs.push("/usr/local/cuda/include".into());
    dirs.retain(|d| std::path::Path::new(d).join("cuda_fp16.h").is_file());
    dirs
}

/// The PTX text, from the build or from NVRTC (compiled at most once per process).
pub fn ptx() -> Result<&'static str> {
    static PTX: OnceLock<std::result::Result<String, (Vec<String>, String)>> = OnceLock::new();
    if let Some(p) = PREBUILT {
        return Ok(p);
    }
    let compiled = PTX.get_or_init(compile_at_run_time);
    match compiled {
        Ok(p) => Ok(p.as_str()),
        Err((options, log)) => Err(Error::Nvrtc {
            kernel: ENTRY.into(),
            options: options.clone(),
            log: log.clone(),
        }),
    }
}

fn compile_at_run_time() -> std::result::Result<String, (Vec<String>, String)> {
    use cudarc::nvrtc::{CompileError, CompileOptions, compile_ptx_with_opts};
    let includes = include_dirs();
    let show = |o: &CompileOptions| {
        let mut v = vec![format!("--gpu-architecture={ARCH}")];
        v.extend(o.options.iter().cloned());
        v.extend(
            o.include_paths
                .iter()
                .map(|p| format!("--include-path={p}")),
        );
        v
    };
    let opts = CompileOptions {
        arch: Some(ARCH),
        include_paths: includes,
        options: vec!["--std=c++17".into(), "-default-device".into()],
        name: Some(ENTRY.into()),
        ..Default::default()
    };
    // SAFETY: only tries to dlopen the NVRTC library; no NVRTC call is made.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err((
            show(&opts),
            "the kernels were not prebuilt and NVRTC (libnvrtc) is not installed".into(),
        ));
    }
    let src = inlined_source(ENTRY).ok_or_else(|| (show(&opts), "missing kernel source".into()))?;
    let shown = show(&opts);
    match compile_ptx_with_opts(src, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(CompileError::CompileError { log, .. }) => {
            Err((shown, log.to_string_lossy().into_owned()))
        }
        Err(e) => Err((shown, format!("{e:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlining_resolves_local_headers_once() {
        let s = inlined_source(ENTRY).unwrap();
        assert_eq!(s.matches("typedef struct HlsLaunchParams").count(), 1);
        assert_eq!(s.matches("namespace hls {").count(), 4);
        assert!(!s.contains("#include \""));
        assert!(s.contains("#include <mma.h>"));
        for entry in [FUSED_MTTKRP, FUSED_TTMC, DENSE_MTTKRP, DENSE_TTMC, SPARSE] {
            assert!(
                s.contains(&format!("\n{entry}(const HlsLaunchParams p)")),
                "{entry}"
            );
        }
    }
}
