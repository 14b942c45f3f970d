//! The kernel families are compiled and embedded one by one: a family whose source
//! does not compile is reported by name with NVRTC's log, and leaves the others
//! compiling; the build embeds every family's images.
//!
//! NVRTC runs without a GPU. These tests look for it at `SPTMC_NVRTC_LIB`, in the
//! wheel `scripts/kernel-gate.sh` installs under `.venv-cuda/`, and under the standard
//! library names; without one they print a visible SKIPPED line, unless
//! `SPTMC_REQUIRE_EMBEDDED_KERNELS=1` (set by CI, which runs the kernel gate first),
//! when they fail.

use sptmc::engine::cuda::kernels::{self, Family, KernelSearch, SOURCES};
use sptmc::engine::cuda::nvrtc_dl::{self, Output};
use std::path::Path;

fn required() -> bool {
    std::env::var("SPTMC_REQUIRE_EMBEDDED_KERNELS").as_deref() == Ok("1")
}

fn skip(why: &str) {
    assert!(!required(), "SPTMC_REQUIRE_EMBEDDED_KERNELS=1 but {why}");
    eprintln!("SKIPPED: {why}");
}

/// Where NVRTC and its headers are, if anywhere.
fn nvrtc() -> Option<KernelSearch> {
    let mut search = sptmc::environment::kernel_search_from(|n| std::env::var(n).ok());
    search.require_embedded = false;
    if search.nvrtc_lib.is_none() {
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-cuda/lib");
        search.nvrtc_lib = std::fs::read_dir(venv)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| {
                e.path()
                    .join("site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
            })
            .find(|p| p.is_file());
    }
    // A wheel's headers: <site>/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 ->
    // <site>/nvidia/{cuda_runtime,cuda_nvcc}/include.
    if let Some(nvidia) = search
        .nvrtc_lib
        .as_deref()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .and_then(Path::parent)
    {
        for inc in ["cuda_runtime/include", "cuda_nvcc/include"] {
            search.include_dirs.push(nvidia.join(inc));
        }
    }
    let found = search
        .nvrtc_libraries()
        .iter()
        .any(|lib| nvrtc_dl::version(lib).is_ok());
    (found && !search.cuda_includes().is_empty()).then_some(search)
}

/// A broken `phi.cu` fails its own family, named, and leaves the others compiling from
/// the same sources. The others compiled here are the two small families: the gate and
/// the build compile every one, and Core and Completion, the largest, would add most of
/// this test's NVRTC time on CI's two cores and show nothing more.
#[test]
fn a_family_that_fails_to_compile_is_named_and_others_compile() {
    let Some(search) = nvrtc() else {
        return skip("no NVRTC with the CUDA headers found (run scripts/kernel-gate.sh)");
    };
    let broken_file = Family::Phi.entry_file();
    let broken: String = SOURCES
        .iter()
        .find(|(n, _)| *n == broken_file)
        .map(|(_, s)| format!("{s}\nthis_does_not_compile_on_purpose;\n"))
        .expect("phi.cu is embedded");
    let sources: Vec<(&str, &str)> = SOURCES
        .iter()
        .map(|&(n, s)| (n, if n == broken_file { broken.as_str() } else { s }))
        .collect();
    for family in [Family::Phi, Family::CpUpdate, Family::Gcp] {
        let got = kernels::compile_family(&sources, family, (8, 0), &search);
        if family == Family::Phi {
            let e = got.expect_err("the broken family fails").to_string();
            assert!(e.contains("the phi kernel family (phi.cu)"), "{e}");
            // NVRTC's own log names the bad line.
            assert!(e.contains("this_does_not_compile_on_purpose"), "{e}");
            for other in Family::ALL.into_iter().filter(|&f| f != Family::Phi) {
                assert!(
                    !e.contains(&format!("the {} kernel family", other.name())),
                    "{e}"
                );
            }
        } else {
            let (bytes, output, how) =
                got.unwrap_or_else(|e| panic!("{} must compile: {e}", family.name()));
            assert_eq!(output, Output::Cubin, "{how}");
            assert_eq!(&bytes[..4], b"\x7fELF", "{}", family.name());
        }
    }
}

/// CI builds after `scripts/kernel-gate.sh`, so the binary must carry all three images
/// of every family; `SPTMC_REQUIRE_EMBEDDED_KERNELS=1` (set by `.ci/run`) turns their
/// absence into a failure instead of a visible skip.
#[test]
fn the_build_embeds_sm80_and_sm90_cubins_and_ptx_of_every_family() {
    let images = kernels::embedded();
    for i in &images {
        eprintln!(
            "embedded: {} {} {:?} {} bytes",
            i.family.name(),
            i.target,
            i.output,
            i.bytes.len()
        );
    }
    if images.is_empty() {
        return skip(&format!(
            "no kernels embedded in this build ({})",
            kernels::BUILD
        ));
    }
    for family in Family::ALL {
        let targets: Vec<&str> = images
            .iter()
            .filter(|i| i.family == family)
            .map(|i| i.target)
            .collect();
        assert_eq!(
            targets,
            ["sm_90", "sm_80", "compute_80"],
            "{} ({})",
            family.name(),
            kernels::BUILD
        );
    }
    for i in &images {
        match i.output {
            // ELF magic: a cubin is an ELF object for the GPU.
            Output::Cubin => assert_eq!(&i.bytes[..4], b"\x7fELF", "{}", i.target),
            Output::Ptx => {
                let text = std::str::from_utf8(i.bytes).expect("PTX is text");
                assert!(text.contains(".target sm_80"), "PTX for compute_80");
                // Every entry of the family, and no other family's.
                for entry in kernels::entries(i.family) {
                    assert!(
                        text.contains(&format!(".entry {entry}(")),
                        "{entry} in {}",
                        i.family.name()
                    );
                }
                if i.family != Family::Core {
                    assert!(!text.contains(".entry hls_fused_mttkrp_v4s1("));
                }
            }
        }
    }
    assert!(kernels::BUILD.starts_with("prebuilt"), "{}", kernels::BUILD);
}
