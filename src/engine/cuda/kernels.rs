//! The kernel module: device code embedded at build time when build.rs found a CUDA
//! compiler (sm_80 and sm_90 cubins plus compute_80 PTX), otherwise compiled by NVRTC
//! at run time from the embedded sources, once per process.

use super::nvrtc_dl::{self, Output};
use crate::error::{Error, Result};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The kernel sources, embedded so run-time compilation needs no files.
const SOURCES: &[(&str, &str)] = &[
    ("hls_abi.h", include_str!("../../../kernels/hls_abi.h")),
    (
        "hls_tile.cuh",
        include_str!("../../../kernels/hls_tile.cuh"),
    ),
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
    (
        "cp_update.cu",
        include_str!("../../../kernels/cp_update.cu"),
    ),
    ("phi.cu", include_str!("../../../kernels/phi.cu")),
    (
        "completion.cu",
        include_str!("../../../kernels/completion.cu"),
    ),
    ("fused.cu", include_str!("../../../kernels/fused.cu")),
];

/// The file whose module holds every entry point.
pub const ENTRY: &str = "fused.cu";
/// The dense-tiles-only MTTKRP entry point (grid = one block per tile).
pub const DENSE_MTTKRP: &str = "hls_dense_mttkrp";
/// The dense-tiles-only TTMc entry point (grid = one block per tile).
pub const DENSE_TTMC: &str = "hls_dense_ttmc";
/// The CP-ALS update of one mode's factor (kernels/cp_update.cu).
pub const CP_UPDATE_ROWS: &str = "hls_cp_update_rows";
/// Division of a factor's columns by their norms.
pub const CP_NORMALIZE: &str = "hls_cp_normalize";
/// The tensor-completion entry points (kernels/completion.cu), run by
/// [`crate::engine::CompletionSession`]s of the CUDA backend.
pub mod completion {
    /// Every row's nonzero count, per mode.
    pub const COUNT: &str = "hls_completion_count";
    /// The nonzeros grouped by their row of the target mode.
    pub const GROUP: &str = "hls_completion_group";
    /// ALS: the normal equations of every row of the target mode.
    pub const NORMAL_EQ: &str = "hls_completion_normal_eq";
    /// CCD++: the residual with the current factors (scalar loads).
    pub const RESIDUAL_V1: &str = "hls_completion_residual_v1";
    /// CCD++: the residual with 16-byte factor loads (rank a multiple of 4).
    pub const RESIDUAL_V4: &str = "hls_completion_residual_v4";
    /// The loss (scalar loads).
    pub const LOSS_V1: &str = "hls_completion_loss_v1";
    /// The loss with 16-byte factor loads (rank a multiple of 4).
    pub const LOSS_V4: &str = "hls_completion_loss_v4";
    /// CCD++: a rank-one update of the residual.
    pub const ADD_COLUMN: &str = "hls_completion_add_column";
    /// CCD++: per row `Σ e k` and `Σ k²` of one column.
    pub const COLUMN_TERMS: &str = "hls_completion_column_terms";
    /// Writes one column of a factor.
    pub const SET_COLUMN: &str = "hls_completion_set_column";
    /// One SGD epoch.
    pub const SGD: &str = "hls_completion_sgd";
    /// Every completion entry point.
    pub const ALL: [&str; 11] = [
        COUNT,
        GROUP,
        NORMAL_EQ,
        RESIDUAL_V1,
        RESIDUAL_V4,
        LOSS_V1,
        LOSS_V4,
        ADD_COLUMN,
        COLUMN_TERMS,
        SET_COLUMN,
        SGD,
    ];
}
/// The sparse lane layouts that have entry points: (vector width, slots per lane).
pub const MTTKRP_LAYOUTS: &[(u32, u32)] = &[(4, 1), (4, 2), (4, 4), (1, 1), (1, 2), (1, 4)];
/// The TTMc layouts (at most 2 slots: each slot keeps its factor columns in registers).
pub const TTMC_LAYOUTS: &[(u32, u32)] = &[(4, 1), (4, 2), (1, 1), (1, 2)];

/// Name of the fused (`fused`) or sparse-only entry point of `op_name` ("mttkrp" or
/// "ttmc") for the lane layout `(vec, slots)`.
pub fn entry_name(fused: bool, op_name: &str, vec: u32, slots: u32) -> String {
    let kind = if fused { "fused" } else { "sparse" };
    format!("hls_{kind}_{op_name}_v{vec}s{slots}")
}

/// The entry of Φ's dense tiles alone for a lane layout (kernels/phi.cu).
pub fn dense_phi_entry_name(vec: u32, slots: u32) -> String {
    format!("hls_dense_phi_v{vec}s{slots}")
}

/// How the kernels were built, as build.rs recorded it.
pub const BUILD: &str = env!("SPTMC_KERNEL_BUILD");

/// One embedded device-code image.
#[derive(Debug, Clone, Copy)]
pub struct Image {
    /// The architecture: a real one (`sm_90`: a cubin) or a virtual one (`compute_80`:
    /// PTX the driver JIT-compiles).
    pub target: &'static str,
    /// Whether it is machine code (cubin) or PTX.
    pub output: Output,
    /// The image's bytes (PTX text without a terminator).
    pub bytes: &'static [u8],
}

/// The images embedded in this binary, in the order they are tried.
#[allow(clippy::vec_init_then_push, unused_mut)] // each push exists only under its own cfg
pub fn embedded() -> Vec<Image> {
    let mut v = Vec::new();
    #[cfg(sptmc_kernel_sm_90)]
    v.push(Image {
        target: "sm_90",
        output: Output::Cubin,
        bytes: include_bytes!(concat!(env!("OUT_DIR"), "/fused.sm_90.cubin")),
    });
    #[cfg(sptmc_kernel_sm_80)]
    v.push(Image {
        target: "sm_80",
        output: Output::Cubin,
        bytes: include_bytes!(concat!(env!("OUT_DIR"), "/fused.sm_80.cubin")),
    });
    #[cfg(sptmc_kernel_compute_80)]
    v.push(Image {
        target: "compute_80",
        output: Output::Ptx,
        bytes: include_bytes!(concat!(env!("OUT_DIR"), "/fused.compute_80.ptx")),
    });
    v
}

/// The embedded image that runs on a device of compute capability `cc` without
/// run-time compilation by us: the cubin of the same major version and the highest
/// minor not above the device's, else the PTX when its virtual architecture is not
/// above the device's (the driver JIT-compiles it).
pub fn pick(images: &[Image], cc: (i32, i32)) -> Option<Image> {
    let arch_of = |t: &str| -> Option<(i32, i32)> {
        let digits = t.rsplit('_').next()?;
        let n: i32 = digits.parse().ok()?;
        Some((n / 10, n % 10))
    };
    let cubin = images
        .iter()
        .filter(|i| i.output == Output::Cubin)
        .filter_map(|i| arch_of(i.target).map(|a| (a, *i)))
        .filter(|(a, _)| a.0 == cc.0 && a.1 <= cc.1)
        .max_by_key(|(a, _)| a.1)
        .map(|(_, i)| i);
    cubin.or_else(|| {
        images
            .iter()
            .filter(|i| i.output == Output::Ptx)
            .find(|i| arch_of(i.target).is_some_and(|a| a <= cc))
            .copied()
    })
}

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

/// Folders that may hold `cuda_fp16.h` for run-time NVRTC: `SPTMC_CUDA_INCLUDE`
/// (`:`-separated), `$CUDA_HOME/include`, `/usr/local/cuda/include`.
fn include_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var("SPTMC_CUDA_INCLUDE")
        .map(|v| v.split(':').map(PathBuf::from).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        dirs.push(PathBuf::from(home).join("include"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/include"));
    dirs.retain(|d| d.join("cuda_fp16.h").is_file());
    dirs
}

/// The NVRTC libraries to try at run time: `SPTMC_NVRTC_LIB`, then every name of
/// [`nvrtc_dl::LIBRARY_NAMES`] through the loader's search path and in the toolkit
/// folders (CUDA 13 first).
fn nvrtc_libraries() -> Vec<PathBuf> {
    let mut libs: Vec<PathBuf> = std::env::var_os("SPTMC_NVRTC_LIB")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    for name in nvrtc_dl::LIBRARY_NAMES {
        libs.push(PathBuf::from(name));
        for dir in nvrtc_dl::toolkit_lib_dirs() {
            let p = dir.join(name);
            if p.is_file() {
                libs.push(p);
            }
        }
    }
    libs
}

/// Device code ready to load: its bytes, whether they are a cubin or PTX, and where
/// they came from.
pub type Compiled = (Vec<u8>, Output, String);

/// Device code for a device of compute capability `cc`: the embedded image that fits
/// (see [`pick`]), else one compiled by NVRTC at run time (a cubin for the device's
/// architecture, or compute_80 PTX when that NVRTC does not know it), at most once per
/// process. Returns the image and how it was obtained.
pub fn module_image(cc: (i32, i32)) -> Result<Compiled> {
    if let Some(img) = pick(&embedded(), cc) {
        return Ok((
            img.bytes.to_vec(),
            img.output,
            format!("embedded {} ({BUILD})", img.target),
        ));
    }
    static COMPILED: OnceLock<std::result::Result<Compiled, String>> = OnceLock::new();
    COMPILED
        .get_or_init(|| compile_at_run_time(cc))
        .clone()
        .map_err(|log| Error::Nvrtc {
            kernel: ENTRY.into(),
            options: vec![format!("sm_{}{}", cc.0, cc.1)],
            log,
        })
}

fn compile_at_run_time(cc: (i32, i32)) -> std::result::Result<Compiled, String> {
    let src = inlined_source(ENTRY).ok_or("missing kernel source")?;
    let includes = include_dirs();
    let real = format!("sm_{}{}", cc.0, cc.1);
    let mut tried = Vec::new();
    for lib in nvrtc_libraries() {
        for (arch, output) in [(real.as_str(), Output::Cubin), ("compute_80", Output::Ptx)] {
            match nvrtc_dl::compile(&lib, &src, ENTRY, arch, &includes, output) {
                Ok(bytes) => {
                    return Ok((
                        bytes,
                        output,
                        format!("{arch} compiled at run time by {}", lib.display()),
                    ));
                }
                Err(e) => tried.push(format!("{} ({arch}): {e}", lib.display())),
            }
        }
    }
    Err(format!(
        "the kernels were not embedded in this binary and no NVRTC could compile them; tried: {}",
        tried.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(target: &'static str, output: Output) -> Image {
        Image {
            target,
            output,
            bytes: b"x",
        }
    }

    #[test]
    fn inlining_resolves_local_headers_once() {
        let s = inlined_source(ENTRY).unwrap();
        assert_eq!(s.matches("typedef struct HlsLaunchParams").count(), 1);
        assert_eq!(s.matches("namespace hls {").count(), 8);
        assert!(!s.contains("#include \""));
        assert!(s.contains("#include <cuda_fp16.h>"));
        for entry in [DENSE_MTTKRP, DENSE_TTMC] {
            assert!(
                s.contains(&format!("\n{entry}(const HlsLaunchParams p)")),
                "{entry}"
            );
        }
        for entry in [CP_UPDATE_ROWS, CP_NORMALIZE] {
            assert!(
                s.contains(&format!("\n{entry}(const HlsCpParams p)")),
                "{entry}"
            );
        }
        for entry in completion::ALL {
            assert!(
                s.contains(&format!("\n{entry}(const HlsCompletionParams p)")),
                "{entry}"
            );
        }
        for fused in [false, true] {
            for &(v, sl) in MTTKRP_LAYOUTS {
                let name = entry_name(fused, "mttkrp", v, sl);
                assert!(s.contains(&format!("({name}, ")), "{name}");
            }
            for &(v, sl) in TTMC_LAYOUTS {
                let name = entry_name(fused, "ttmc", v, sl);
                assert!(s.contains(&format!("({name}, ")), "{name}");
            }
            // Φ's entries: every MTTKRP layout (launch.rs picks Φ's as MTTKRP's).
            for &(v, sl) in MTTKRP_LAYOUTS {
                assert!(
                    s.contains(&format!("HLS_PHI_ENTRIES({v}, {sl})")),
                    "Φ v{v}s{sl}"
                );
            }
        }
    }

    #[test]
    fn a_device_gets_its_own_cubin_else_the_ptx() {
        let all = [
            img("sm_90", Output::Cubin),
            img("sm_80", Output::Cubin),
            img("compute_80", Output::Ptx),
        ];
        let target = |cc| pick(&all, cc).map(|i| i.target);
        assert_eq!(target((9, 0)), Some("sm_90"));
        assert_eq!(target((8, 0)), Some("sm_80"));
        assert_eq!(target((8, 6)), Some("sm_80"), "8.x runs the sm_80 cubin");
        assert_eq!(target((8, 9)), Some("sm_80"));
        assert_eq!(
            target((10, 0)),
            Some("compute_80"),
            "newer majors JIT the PTX"
        );
        assert_eq!(target((12, 0)), Some("compute_80"));
        assert_eq!(target((7, 5)), None, "older than the PTX");
        assert_eq!(pick(&[], (9, 0)).map(|i| i.target), None);
    }

    /// CI builds after `scripts/kernel-gate.sh`, so the binary must carry all three
    /// images; `SPTMC_REQUIRE_EMBEDDED_KERNELS=1` (set by `.ci/run`) turns their absence
    /// into a failure instead of a visible skip.
    #[test]
    fn the_build_embeds_sm80_and_sm90_cubins_and_ptx() {
        let images = embedded();
        for i in &images {
            eprintln!(
                "embedded: {} {:?} {} bytes",
                i.target,
                i.output,
                i.bytes.len()
            );
        }
        if images.is_empty() {
            assert_ne!(
                std::env::var("SPTMC_REQUIRE_EMBEDDED_KERNELS").as_deref(),
                Ok("1"),
                "no kernels embedded ({BUILD})"
            );
            eprintln!("SKIPPED: no kernels embedded in this build ({BUILD})");
            return;
        }
        let targets: Vec<&str> = images.iter().map(|i| i.target).collect();
        assert_eq!(targets, ["sm_90", "sm_80", "compute_80"]);
        for i in &images {
            match i.output {
                // ELF magic: a cubin is an ELF object for the GPU.
                Output::Cubin => assert_eq!(&i.bytes[..4], b"\x7fELF", "{}", i.target),
                Output::Ptx => {
                    let text = std::str::from_utf8(i.bytes).expect("PTX is text");
                    assert!(text.contains(".target sm_80"), "PTX for compute_80");
                    assert!(text.contains(".entry hls_fused_mttkrp_v4s1"));
                }
            }
        }
    }
}
