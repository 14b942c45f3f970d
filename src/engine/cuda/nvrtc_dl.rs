//! Compiling CUDA C with an NVRTC library loaded by path (`libloading`), as PTX or as a
//! cubin for one architecture. Shared by build.rs (which embeds the kernels) and the
//! run-time fallback, so neither depends on which NVRTC file names cudarc knows.
//! Depends on nothing in the crate, and reads no environment (the caller says where to
//! look): build.rs includes this file with `#[path]`.

use std::ffi::{CString, c_char, c_void};
use std::path::{Path, PathBuf};

/// What to get back from NVRTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// PTX text for a virtual architecture (`compute_80`), JIT-compiled by the driver.
    Ptx,
    /// Machine code for one real architecture (`sm_90`), loaded with no JIT.
    Cubin,
}

type CreateFn = unsafe extern "C" fn(
    *mut *mut c_void,
    *const c_char,
    *const c_char,
    i32,
    *const *const c_char,
    *const *const c_char,
) -> i32;
type CompileFn = unsafe extern "C" fn(*mut c_void, i32, *const *const c_char) -> i32;
type SizeFn = unsafe extern "C" fn(*mut c_void, *mut usize) -> i32;
type GetFn = unsafe extern "C" fn(*mut c_void, *mut c_char) -> i32;
type DestroyFn = unsafe extern "C" fn(*mut *mut c_void) -> i32;
type VersionFn = unsafe extern "C" fn(*mut i32, *mut i32) -> i32;

/// File names an NVRTC library goes by, newest first (tried through the loader's search
/// path): CUDA 13, CUDA 12, and the unversioned development link.
pub const LIBRARY_NAMES: &[&str] = &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

/// Folders a CUDA toolkit keeps its libraries in, beside the loader's search path:
/// `cuda_home/lib64` (the caller's toolkit root, e.g. from `CUDA_HOME`), then the
/// standard install folders.
pub fn toolkit_lib_dirs(cuda_home: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(home) = cuda_home {
        dirs.push(home.join("lib64"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for major in ["13", "12"] {
        dirs.push(PathBuf::from(format!("/usr/local/cuda-{major}/lib64")));
    }
    dirs
}

/// An NVRTC library's version `(major, minor)`.
pub fn version(lib_path: &Path) -> Result<(i32, i32), String> {
    // SAFETY: loading NVRTC runs its initializers, which have no preconditions;
    // nvrtcVersion is called with its C signature and valid out-pointers.
    unsafe {
        let lib = libloading::Library::new(lib_path).map_err(|e| format!("cannot load: {e}"))?;
        let v: libloading::Symbol<VersionFn> =
            lib.get(b"nvrtcVersion").map_err(|e| e.to_string())?;
        let (mut major, mut minor) = (0, 0);
        let rc = v(&mut major, &mut minor);
        if rc != 0 {
            return Err(format!("nvrtcVersion returned {rc}"));
        }
        Ok((major, minor))
    }
}

/// Compiles `src` (named `name` in messages) for `arch` (`compute_80` for PTX, `sm_90`
/// for a cubin) with the NVRTC library at `lib_path`; `Err` holds the compile log or
/// what failed, starting with "error:" when the library loaded but compiling failed.
pub fn compile(
    lib_path: &Path,
    src: &str,
    name: &str,
    arch: &str,
    include_dirs: &[PathBuf],
    output: Output,
) -> Result<Vec<u8>, String> {
    let mut opts = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
    ];
    for inc in include_dirs {
        opts.push(format!("--include-path={}", inc.display()));
    }
    let c_src = CString::new(src).map_err(|e| e.to_string())?;
    let c_name = CString::new(name).map_err(|e| e.to_string())?;
    let c_opts: Vec<CString> = opts
        .iter()
        .map(|o| CString::new(o.as_str()).expect("options hold no NUL"))
        .collect();
    let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    let (size_sym, get_sym): (&[u8], &[u8]) = match output {
        Output::Ptx => (b"nvrtcGetPTXSize", b"nvrtcGetPTX"),
        Output::Cubin => (b"nvrtcGetCUBINSize", b"nvrtcGetCUBIN"),
    };
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
        let out_size: libloading::Symbol<SizeFn> = lib.get(size_sym).map_err(|e| e.to_string())?;
        let get_out: libloading::Symbol<GetFn> = lib.get(get_sym).map_err(|e| e.to_string())?;
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
            out_size(prog, &mut n);
            let mut buf = vec![0u8; n.max(1)];
            let rc = get_out(prog, buf.as_mut_ptr().cast());
            if rc != 0 {
                Err(format!("error: reading the {output:?} returned {rc}"))
            } else {
                if output == Output::Ptx {
                    // The PTX is NUL-terminated text; keep the terminator out.
                    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                    buf.truncate(end);
                }
                Ok(buf)
            }
        };
        destroy(&mut prog);
        result
    }
}
