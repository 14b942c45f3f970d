//! The device code, one image per kernel family ([`Family`]): embedded at build time
//! when build.rs found a CUDA compiler (sm_80 and sm_90 cubins plus compute_80 PTX per
//! family), otherwise compiled by NVRTC at run time from the embedded sources. Where to
//! look for NVRTC and the CUDA headers is the caller's [`KernelSearch`]; nothing here
//! reads the environment.

use super::nvrtc_dl::{self, Output};
use crate::error::{Error, Result};
use crate::hls::ValueType;
use std::path::PathBuf;

pub use super::family::Family;

/// The kernel sources, embedded so run-time compilation needs no files.
pub const SOURCES: &[(&str, &str)] = &[
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
    ("gcp.cu", include_str!("../../../kernels/gcp.cu")),
];

/// The dense-tiles-only MTTKRP entry point (grid = one block per tile), fp16 values
/// ([`dense_entry_name`] names the f32 one).
pub const DENSE_MTTKRP: &str = "hls_dense_mttkrp";
/// The dense-tiles-only TTMc entry point (grid = one block per tile).
pub const DENSE_TTMC: &str = "hls_dense_ttmc";
/// The CP-ALS update of one mode's factor (kernels/cp_update.cu).
pub const CP_UPDATE_ROWS: &str = "hls_cp_update_rows";
/// Division of a factor's columns by their norms.
pub const CP_NORMALIZE: &str = "hls_cp_normalize";
/// GCP's model values at a sample's entries (kernels/gcp.cu).
pub const GCP_VALUES: &str = "hls_gcp_values";
/// GCP's sampled gradient from the entries' loss derivatives (kernels/gcp.cu).
pub const GCP_GRADIENT: &str = "hls_gcp_gradient";
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

/// What the names of the entry points for values of type `values` end with: nothing
/// for fp16, `_f32` for f32 (every kernel that reads values has one entry per type,
/// kernels/hls_common.cuh).
pub fn value_suffix(values: ValueType) -> &'static str {
    match values {
        ValueType::F16 => "",
        ValueType::F32 => "_f32",
    }
}

/// Name of the fused (`fused`) or sparse-only entry point of `op_name` ("mttkrp" or
/// "ttmc") for the lane layout `(vec, slots)` and values of type `values`.
pub fn entry_name(fused: bool, op_name: &str, vec: u32, slots: u32, values: ValueType) -> String {
    let kind = if fused { "fused" } else { "sparse" };
    format!(
        "hls_{kind}_{op_name}_v{vec}s{slots}{}",
        value_suffix(values)
    )
}

/// The entry of Φ's dense tiles alone for a lane layout and values of type `values`
/// (kernels/phi.cu).
pub fn dense_phi_entry_name(vec: u32, slots: u32, values: ValueType) -> String {
    format!("hls_dense_phi_v{vec}s{slots}{}", value_suffix(values))
}

/// The dense-tiles-only entry of MTTKRP ([`DENSE_MTTKRP`]) or TTMc ([`DENSE_TTMC`])
/// for values of type `values`.
pub fn dense_entry_name(base: &str, values: ValueType) -> String {
    format!("{base}{}", value_suffix(values))
}

/// Both stored value types.
const VALUE_TYPES: [ValueType; 2] = [ValueType::F16, ValueType::F32];

/// The entry points of `family`'s module (what a loaded module is checked to hold).
pub fn entries(family: Family) -> Vec<String> {
    let layouts = |fused: bool, op: &str, layouts: &[(u32, u32)]| -> Vec<String> {
        VALUE_TYPES
            .iter()
            .flat_map(|&t| layouts.iter().map(move |&(v, s)| (v, s, t)))
            .map(|(v, s, t)| entry_name(fused, op, v, s, t))
            .collect()
    };
    match family {
        Family::Core => VALUE_TYPES
            .iter()
            .flat_map(|&t| [DENSE_MTTKRP, DENSE_TTMC].map(|d| dense_entry_name(d, t)))
            .chain([false, true].into_iter().flat_map(|fused| {
                let mut v = layouts(fused, "mttkrp", MTTKRP_LAYOUTS);
                v.extend(layouts(fused, "ttmc", TTMC_LAYOUTS));
                v
            }))
            .collect(),
        Family::CpUpdate => vec![CP_UPDATE_ROWS.into(), CP_NORMALIZE.into()],
        // Φ's entries: every MTTKRP layout (the launch picks Φ's as MTTKRP's).
        Family::Phi => [false, true]
            .into_iter()
            .flat_map(|fused| layouts(fused, "phi", MTTKRP_LAYOUTS))
            .chain(VALUE_TYPES.iter().flat_map(|&t| {
                MTTKRP_LAYOUTS
                    .iter()
                    .map(move |&(v, s)| dense_phi_entry_name(v, s, t))
            }))
            .collect(),
        Family::Completion => completion::ALL.map(String::from).to_vec(),
        Family::Gcp => vec![GCP_VALUES.into(), GCP_GRADIENT.into()],
    }
}

/// How the kernels were built, as build.rs recorded it: which families were embedded
/// for which targets, by which compiler, and which are left to NVRTC at run time.
pub const BUILD: &str = env!("SPTMC_KERNEL_BUILD");

/// Where run-time NVRTC compilation looks for its library and the CUDA headers, and
/// whether it may run at all. The caller fills it (the command line and Python read it
/// from the environment in one place, `crate::environment`); the default looks in the
/// standard install folders only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelSearch {
    /// An NVRTC library to try before the standard names (`SPTMC_NVRTC_LIB`).
    pub nvrtc_lib: Option<PathBuf>,
    /// Folders that may hold `cuda_fp16.h`, tried first (`SPTMC_CUDA_INCLUDE`).
    pub include_dirs: Vec<PathBuf>,
    /// The CUDA toolkit's root: its `include` and `lib64` are searched
    /// (`CUDA_HOME`, else `CUDA_PATH`).
    pub cuda_home: Option<PathBuf>,
    /// Refuse to compile at run time: a family without an embedded image for the
    /// device is an error (`SPTMC_REQUIRE_EMBEDDED_KERNELS=1`).
    pub require_embedded: bool,
}

impl KernelSearch {
    /// Folders that may hold `cuda_fp16.h`: [`KernelSearch::include_dirs`],
    /// `cuda_home/include`, `/usr/local/cuda/include`; only those that hold it.
    pub fn cuda_includes(&self) -> Vec<PathBuf> {
        let mut dirs = self.include_dirs.clone();
        if let Some(home) = &self.cuda_home {
            dirs.push(home.join("include"));
        }
        dirs.push(PathBuf::from("/usr/local/cuda/include"));
        dirs.retain(|d| d.join("cuda_fp16.h").is_file());
        dirs
    }

    /// The NVRTC libraries to try: [`KernelSearch::nvrtc_lib`], then every name of
    /// [`nvrtc_dl::LIBRARY_NAMES`] through the loader's search path and in the toolkit
    /// folders (CUDA 13 first).
    pub fn nvrtc_libraries(&self) -> Vec<PathBuf> {
        let mut libs: Vec<PathBuf> = self.nvrtc_lib.iter().cloned().collect();
        let dirs = nvrtc_dl::toolkit_lib_dirs(self.cuda_home.as_deref());
        for name in nvrtc_dl::LIBRARY_NAMES {
            libs.push(PathBuf::from(name));
            for dir in &dirs {
                let p = dir.join(name);
                if p.is_file() {
                    libs.push(p);
                }
            }
        }
        libs
    }
}

/// One embedded device-code image.
#[derive(Debug, Clone, Copy)]
pub struct Image {
    /// The family it holds.
    pub family: Family,
    /// The architecture: a real one (`sm_90`: a cubin) or a virtual one (`compute_80`:
    /// PTX the driver JIT-compiles).
    pub target: &'static str,
    /// Whether it is machine code (cubin) or PTX.
    pub output: Output,
    /// The image's bytes (PTX text without a terminator).
    pub bytes: &'static [u8],
}

/// What build.rs embedded: `(family name, target, output, bytes)`, in the order the
/// images are tried.
const EMBEDDED: &[(&str, &str, Output, &[u8])] =
    include!(concat!(env!("OUT_DIR"), "/kernel_images.rs"));

/// The images embedded in this binary, every family's in the order they are tried.
pub fn embedded() -> Vec<Image> {
    EMBEDDED
        .iter()
        .filter_map(|&(name, target, output, bytes)| {
            let family = Family::ALL.into_iter().find(|f| f.name() == name)?;
            Some(Image {
                family,
                target,
                output,
                bytes,
            })
        })
        .collect()
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

/// `name`'s source from `sources` (`(file name, text)`) with our own `#include "..."`
/// lines replaced by the files (each once), leaving system headers (`<...>`) to the
/// compiler.
pub fn inlined_source(sources: &[(&str, &str)], name: &str) -> Option<String> {
    fn walk(
        sources: &[(&str, &str)],
        name: &str,
        seen: &mut Vec<String>,
        out: &mut String,
    ) -> Option<()> {
        if seen.iter().any(|s| s == name) {
            return Some(());
        }
        seen.push(name.to_string());
        let src = sources.iter().find(|(n, _)| *n == name)?.1;
        for line in src.lines() {
            let t = line.trim_start();
            if t.starts_with("#pragma once") {
                continue;
            }
            if let Some(rest) = t.strip_prefix("#include \"") {
                let inc = rest.split('"').next()?;
                walk(sources, inc, seen, out)?;
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        Some(())
    }
    let mut out = String::new();
    walk(sources, name, &mut Vec::new(), &mut out)?;
    Some(out)
}

/// Device code ready to load: its bytes, whether they are a cubin or PTX, and where
/// they came from.
pub type Compiled = (Vec<u8>, Output, String);

/// `family`'s device code for a device of compute capability `cc`: the embedded image
/// that fits (see [`pick`]), else, unless `search` requires embedded images, one
/// compiled by NVRTC at run time ([`compile_family`]). Returns the image and how it
/// was obtained.
pub fn family_image(family: Family, cc: (i32, i32), search: &KernelSearch) -> Result<Compiled> {
    let images: Vec<Image> = embedded()
        .into_iter()
        .filter(|i| i.family == family)
        .collect();
    if let Some(img) = pick(&images, cc) {
        return Ok((
            img.bytes.to_vec(),
            img.output,
            format!("embedded {} ({BUILD})", img.target),
        ));
    }
    if search.require_embedded {
        return Err(Error::Unsupported(format!(
            "the {} kernel family has no embedded image for sm_{}{} ({BUILD}) and run-time \
             compilation is turned off (embedded kernels required)",
            family.name(),
            cc.0,
            cc.1
        )));
    }
    compile_family(SOURCES, family, cc, search)
}

/// Compiles `family` from `sources` (`(file name, text)`, e.g. [`SOURCES`]) with the
/// first NVRTC of `search` that can: a cubin for the device's architecture, or
/// compute_80 PTX when that NVRTC does not know it. The error names the family and
/// carries every NVRTC's log.
pub fn compile_family(
    sources: &[(&str, &str)],
    family: Family,
    cc: (i32, i32),
    search: &KernelSearch,
) -> Result<Compiled> {
    let entry = family.entry_file();
    let what = format!("the {} kernel family ({entry})", family.name());
    let real = format!("sm_{}{}", cc.0, cc.1);
    let src = inlined_source(sources, entry).ok_or_else(|| Error::Nvrtc {
        kernel: what.clone(),
        options: vec![real.clone()],
        log: "a source file it includes is missing".into(),
    })?;
    let includes = search.cuda_includes();
    let mut tried = Vec::new();
    for lib in search.nvrtc_libraries() {
        for (arch, output) in [(real.as_str(), Output::Cubin), ("compute_80", Output::Ptx)] {
            match nvrtc_dl::compile(&lib, &src, entry, arch, &includes, output) {
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
    Err(Error::Nvrtc {
        kernel: what,
        options: vec![real],
        log: format!(
            "not embedded in this binary ({BUILD}) and no NVRTC could compile it; tried: {}",
            tried.join("; ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(target: &'static str, output: Output) -> Image {
        Image {
            family: Family::Core,
            target,
            output,
            bytes: b"x",
        }
    }

    #[test]
    fn every_family_inlines_its_headers_once_and_holds_its_entries() {
        for family in Family::ALL {
            let s = inlined_source(SOURCES, family.entry_file()).unwrap();
            let f = family.name();
            assert_eq!(
                s.matches("typedef struct HlsLaunchParams").count(),
                1,
                "{f}"
            );
            assert_eq!(
                s.matches("__device__ __forceinline__ uint32_t cell_offset")
                    .count(),
                1,
                "{f}"
            );
            assert!(!s.contains("#include \""), "{f}");
            assert!(s.contains("#include <cuda_fp16.h>"), "{f}");
            for entry in entries(family) {
                assert_eq!(Family::of(&entry), family, "{entry}");
                // An f32 entry not written out is made by its fp16 twin's macro, which
                // pastes the suffix on (`name##_f32`, or `SUFFIX` given as `_f32`).
                let entry = match entry.strip_suffix(value_suffix(ValueType::F32)) {
                    Some(twin) if !s.contains(&format!("\n{entry}(")) => {
                        assert!(s.contains("##_f32") || s.contains(", _f32)"), "{entry}");
                        twin.to_string()
                    }
                    _ => entry,
                };
                // Entries are written out, or made by a macro from their layout.
                let written = [
                    "(const HlsLaunchParams p)",
                    "(const HlsCpParams p)",
                    "(const HlsCompletionParams p)",
                    "(const HlsGcpParams p)",
                ]
                .iter()
                .any(|args| s.contains(&format!("\n{entry}{args}")));
                let by_macro = s.contains(&format!("({entry}, "));
                let phi_layout = entry
                    .rsplit_once("_v")
                    .and_then(|(_, l)| l.split_once('s'))
                    .is_some_and(|(v, sl)| s.contains(&format!("HLS_PHI_ENTRIES({v}, {sl})")));
                assert!(
                    written || by_macro || (family == Family::Phi && phi_layout),
                    "{entry}"
                );
            }
        }
        // The families are disjoint: no family's file holds another's entries.
        let core = inlined_source(SOURCES, Family::Core.entry_file()).unwrap();
        assert!(!core.contains(CP_UPDATE_ROWS) && !core.contains(completion::SGD));
        assert!(!core.contains("HLS_PHI_ENTRIES"));
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

    #[test]
    fn run_time_compilation_can_be_refused() {
        let search = KernelSearch {
            require_embedded: true,
            ..KernelSearch::default()
        };
        // Compute capability 7.5: no embedded image fits, whatever the build.
        let e = family_image(Family::Phi, (7, 5), &search)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("phi kernel family") && e.contains("required"),
            "{e}"
        );
    }

    #[test]
    fn search_paths_come_from_the_options_only() {
        use std::path::Path;
        let search = KernelSearch {
            nvrtc_lib: Some("/opt/x/libnvrtc.so.12".into()),
            cuda_home: Some("/nonexistent-cuda".into()),
            ..KernelSearch::default()
        };
        let libs = search.nvrtc_libraries();
        assert_eq!(libs[0], PathBuf::from("/opt/x/libnvrtc.so.12"));
        assert_eq!(libs[1], PathBuf::from(nvrtc_dl::LIBRARY_NAMES[0]));
        assert_eq!(
            KernelSearch::default().nvrtc_libraries()[0],
            Path::new(nvrtc_dl::LIBRARY_NAMES[0])
        );
    }
}
