//! Turns `kernels/*.cu` into PTX at build time when a CUDA compiler is at hand, so the
//! binary needs only the driver on the GPU machine. Looked for, in order:
//! 1. `SPTMC_NVRTC_LIB` = path of a `libnvrtc.so`;
//! 2. the PyPI wheel `nvidia-cuda-nvrtc-cu12` under `.venv-cuda/`, `.venv/` or a
//!    site-packages folder of `python3`;
//! 3. `nvcc` on `PATH`.
//!
//! The PTX (`compute_80`, JIT-compiled by the driver for newer GPUs) is written to
//! `OUT_DIR/fused.ptx` and the cfg `sptmc_prebuilt_ptx` is set. Without a compiler (or
//! if it fails) the build still succeeds and the kernels are compiled by NVRTC at run
//! time. Never touches the network.

use std::path::{Path, PathBuf};
use std::process::Command;

const ARCH: &str = "compute_80";
const ENTRY: &str = "fused.cu";

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=kernels");
    println!("cargo::rerun-if-env-changed=SPTMC_NVRTC_LIB");
    println!("cargo::rerun-if-env-changed=SPTMC_NO_PREBUILT_PTX");
    println!("cargo::rerun-if-env-changed=PATH");
    println!("cargo::rustc-check-cfg=cfg(sptmc_prebuilt_ptx)");
    git_commit();
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    let kernels = manifest.join("kernels");
    let ptx_path = out_dir.join("fused.ptx");

    if std::env::var_os("SPTMC_NO_PREBUILT_PTX").is_some() {
        runtime_fallback("SPTMC_NO_PREBUILT_PTX is set", false);
        return;
    }
    let mut tried = Vec::new();
    for lib in nvrtc_candidates(&manifest) {
        match compile_with_nvrtc(&lib, &kernels) {
            Ok(ptx) => return done(&ptx_path, &ptx, &format!("NVRTC {}", lib.display())),
            Err(e) => tried.push(format!("NVRTC {}: {e}", lib.display())),
        }
    }
    match compile_with_nvcc(&kernels, &ptx_path) {
        Ok(()) => {
            println!("cargo::rustc-cfg=sptmc_prebuilt_ptx");
            println!("cargo::rustc-env=SPTMC_KERNEL_BUILD=nvcc");
            return;
        }
        Err(e) => tried.push(e),
    }
    // A compiler that was found but failed is worth a warning; none at all is normal.
    let found_but_failed = tried.iter().any(|t| t.contains("error"));
    runtime_fallback(&tried.join("; "), found_but_failed);
}

/// Sets `SPTMC_GIT_COMMIT` (reports say which commit they measured) from the variable
/// of the same name or `git rev-parse --short HEAD`; left unset outside a git checkout.
fn git_commit() {
    println!("cargo::rerun-if-env-changed=SPTMC_GIT_COMMIT");
    if std::env::var_os("SPTMC_GIT_COMMIT").is_some() {
        return;
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"]) else {
        return;
    };
    println!("cargo::rustc-env=SPTMC_GIT_COMMIT={commit}");
    // Rebuild when HEAD moves: HEAD itself and the branch it points at.
    for p in [
        Some("HEAD".to_string()),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ]
    .into_iter()
    .flatten()
    {
        // A missing file (a packed ref) would make cargo rerun this script every time.
        if let Some(path) = git(&["rev-parse", "--git-path", &p]).filter(|p| Path::new(p).exists())
        {
            println!("cargo::rerun-if-changed={path}");
        }
    }
}

fn done(ptx_path: &Path, ptx: &str, how: &str) {
    if let Err(e) = std::fs::write(ptx_path, ptx) {
        runtime_fallback(&format!("cannot write {}: {e}", ptx_path.display()), true);
        return;
    }
    println!("cargo::rustc-cfg=sptmc_prebuilt_ptx");
    println!("cargo::rustc-env=SPTMC_KERNEL_BUILD=prebuilt PTX ({ARCH}) by {how}");
}

fn runtime_fallback(why: &str, warn: bool) {
    println!("cargo::rustc-env=SPTMC_KERNEL_BUILD=NVRTC at run time");
    if warn {
        println!(
            "cargo::warning=sptmc: kernels not prebuilt ({why}); NVRTC compiles them at run time"
        );
    } else {
        eprintln!("sptmc: kernels not prebuilt ({why}); NVRTC compiles them at run time");
    }
}

/// Site-packages folders of the local virtual environments and of `python3`.
fn site_packages(manifest: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for venv in [".venv-cuda", ".venv"] {
        if let Ok(rd) = std::fs::read_dir(manifest.join(venv).join("lib")) {
            for e in rd.flatten() {
                dirs.push(e.path().join("site-packages"));
            }
        }
    }
    let script =
        "import site,sys\nprint('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))";
    if let Ok(out) = Command::new("python3").args(["-c", script]).output()
        && out.status.success()
    {
        dirs.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(PathBuf::from),
        );
    }
    dirs
}

fn nvrtc_candidates(manifest: &Path) -> Vec<PathBuf> {
    let mut libs = Vec::new();
    if let Some(p) = std::env::var_os("SPTMC_NVRTC_LIB") {
        libs.push(PathBuf::from(p));
    }
    for site in site_packages(manifest) {
        let lib = site.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
        if lib.is_file() && !libs.contains(&lib) {
            libs.push(lib);
        }
    }
    libs
}

/// Include folders holding `cuda_fp16.h` and `mma.h` for an NVRTC library.
fn cuda_includes(lib: &Path) -> Vec<PathBuf> {
    let mut inc = Vec::new();
    // <site>/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 -> <site>/nvidia/{cuda_runtime,cuda_nvcc}/include
    if let Some(nvidia) = lib.parent().and_then(Path::parent).and_then(Path::parent) {
        inc.push(nvidia.join("cuda_runtime/include"));
        inc.push(nvidia.join("cuda_nvcc/include"));
    }
    // A toolkit: <cuda>/lib64/libnvrtc.so -> <cuda>/include
    if let Some(root) = lib.parent().and_then(Path::parent) {
        inc.push(root.join("include"));
    }
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        inc.push(PathBuf::from(home).join("include"));
    }
    inc.retain(|p| p.join("cuda_fp16.h").is_file() || p.join("crt").is_dir());
    inc
}

type CreateFn = unsafe extern "C" fn(
    *mut *mut std::ffi::c_void,
    *const std::ffi::c_char,
    *const std::ffi::c_char,
    i32,
    *const *const std::ffi::c_char,
    *const *const std::ffi::c_char,
) -> i32;
type CompileFn =
    unsafe extern "C" fn(*mut std::ffi::c_void, i32, *const *const std::ffi::c_char) -> i32;
type SizeFn = unsafe extern "C" fn(*mut std::ffi::c_void, *mut usize) -> i32;
type GetFn = unsafe extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_char) -> i32;
type DestroyFn = unsafe extern "C" fn(*mut *mut std::ffi::c_void) -> i32;

fn compile_with_nvrtc(lib_path: &Path, kernels: &Path) -> Result<String, String> {
    use std::ffi::CString;
    let src = std::fs::read_to_string(kernels.join(ENTRY)).map_err(|e| e.to_string())?;
    let mut opts = vec![
        format!("--gpu-architecture={ARCH}"),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
        format!("--include-path={}", kernels.display()),
    ];
    for inc in cuda_includes(lib_path) {
        opts.push(format!("--include-path={}", inc.display()));
    }
    let c_src = CString::new(src).map_err(|e| e.to_string())?;
    let c_name = CString::new(ENTRY).expect("no NUL");
    let c_opts: Vec<CString> = opts
        .iter()
        .map(|o| CString::new(o.as_str()).expect("no NUL"))
        .collect();
    let opt_ptrs: Vec<*const std::ffi::c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: loading NVRTC runs its initializers, which have no preconditions; every
    // symbol is called with the signature of the NVRTC C API, with valid pointers that
    // outlive the calls, and the program is destroyed once.
    unsafe {
        let lib = libloading::Library::new(lib_path).map_err(|e| format!("cannot load: {e}"))?;
        let create: libloading::Symbol<CreateFn> =
            lib.get(b"nvrtcCreateProgram").map_err(|e| e.to_string())?;
        let compile: libloading::Symbol<CompileFn> =
            lib.get(b"nvrtcCompileProgram").map_err(|e| e.to_string())?;
        let log_size: libloading::Symbol<SizeFn> = lib
            .get(b"nvrtcGetProgramLogSize")
            .map_err(|e| e.to_string())?;
        let get_log: libloading::Symbol<GetFn> =
            lib.get(b"nvrtcGetProgramLog").map_err(|e| e.to_string())?;
        let ptx_size: libloading::Symbol<SizeFn> =
            lib.get(b"nvrtcGetPTXSize").map_err(|e| e.to_string())?;
        let get_ptx: libloading::Symbol<GetFn> =
            lib.get(b"nvrtcGetPTX").map_err(|e| e.to_string())?;
        let destroy: libloading::Symbol<DestroyFn> =
            lib.get(b"nvrtcDestroyProgram").map_err(|e| e.to_string())?;
        let mut prog = std::ptr::null_mut();
        let rc = create(
            &mut prog,
            c_src.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        if rc != 0 {
            return Err(format!("error: nvrtcCreateProgram returned {rc}"));
        }
        let rc = compile(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr());
        let result = if rc != 0 {
            let mut n = 0usize;
            log_size(prog, &mut n);
            let mut buf = vec![0u8; n.max(1)];
            get_log(prog, buf.as_mut_ptr().cast());
            Err(format!(
                "error: compile failed with {opts:?}: {}",
                String::from_utf8_lossy(&buf).trim_end_matches('\0')
            ))
        } else {
            let mut n = 0usize;
            ptx_size(prog, &mut n);
            let mut buf = vec![0u8; n.max(1)];
            get_ptx(prog, buf.as_mut_ptr().cast());
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
        };
        destroy(&mut prog);
        result
    }
}

fn compile_with_nvcc(kernels: &Path, ptx_path: &Path) -> Result<(), String> {
    let out = Command::new("nvcc")
        .arg("--ptx")
        .arg(format!("-arch={ARCH}"))
        .arg("-std=c++17")
        .arg("-I")
        .arg(kernels)
        .arg(kernels.join(ENTRY))
        .arg("-o")
        .arg(ptx_path)
        .output();
    match out {
        Err(_) => Err("no nvcc on PATH".into()),
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "nvcc error: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
    }
}
