//! Turns `kernels/*.cu` into device code at build time when a CUDA compiler is at hand,
//! so the binary needs only the driver on the GPU machine: per kernel family (one
//! entry `.cu` each, `src/engine/cuda/family.rs`) a cubin for sm_80 (A100 and every
//! later 8.x part), a cubin for sm_90 (H100, H200) and compute_80 PTX that the driver
//! JIT-compiles for anything else. Compilers looked for, in order:
//! 1. `SPTMC_NVRTC_LIB` = path of a `libnvrtc.so`;
//! 2. the PyPI wheel `nvidia-cuda-nvrtc-cu12` under `.venv-cuda/`, `.venv/` or a
//!    site-packages folder of `python3`;
//! 3. `nvcc` on `PATH`.
//!
//! Each image is written to `OUT_DIR/<family>.<target>.{cubin,ptx}` and listed in
//! `OUT_DIR/kernel_images.rs`, which `src/engine/cuda/kernels.rs` embeds. A family
//! that no compiler could build (or every family, without a compiler) is left out and
//! compiled by NVRTC at run time; the build still succeeds, and `SPTMC_KERNEL_BUILD`
//! says what was embedded. Never touches the network.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "src/engine/cuda/nvrtc_dl.rs"]
#[allow(dead_code)]
mod nvrtc_dl;

#[path = "src/engine/cuda/family.rs"]
#[allow(dead_code)]
mod family;

use family::Family;
use nvrtc_dl::Output;

/// The images embedded per family: (target, what NVRTC/nvcc produces), in the order
/// they are tried at run time.
const IMAGES: &[(&str, Output)] = &[
    ("sm_90", Output::Cubin),
    ("sm_80", Output::Cubin),
    ("compute_80", Output::Ptx),
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=kernels");
    println!("cargo::rerun-if-changed=src/engine/cuda/nvrtc_dl.rs");
    println!("cargo::rerun-if-changed=src/engine/cuda/family.rs");
    println!("cargo::rerun-if-env-changed=SPTMC_NVRTC_LIB");
    println!("cargo::rerun-if-env-changed=SPTMC_NO_PREBUILT_KERNELS");
    println!("cargo::rerun-if-env-changed=CUDA_HOME");
    git_commit();
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    builtin_profiles(&manifest, &out_dir);
    let kernels = manifest.join("kernels");

    if std::env::var_os("SPTMC_NO_PREBUILT_KERNELS").is_some() {
        write_index(&out_dir, &[]);
        runtime_fallback("SPTMC_NO_PREBUILT_KERNELS is set", false);
        return;
    }
    let (libs, fixed) = nvrtc_candidates(&manifest);
    let mut built: Vec<(Family, String)> = Vec::new();
    let mut failed: Vec<(Family, String)> = Vec::new();
    // Whether the outcome depended on `PATH` (`python3`'s site-packages, `nvcc`).
    let mut path_dependent = false;
    for (family, outcome) in Family::ALL
        .into_iter()
        .zip(compile_families(&libs, &kernels, &out_dir))
    {
        match outcome {
            Ok((how, used)) => {
                path_dependent |= used.is_none_or(|i| i >= fixed);
                built.push((family, how));
            }
            Err(why) => {
                path_dependent = true;
                failed.push((family, why));
            }
        }
    }
    // Watched only when the search reached `PATH`: a build whose compiler came from
    // `SPTMC_NVRTC_LIB` or a local venv stays fresh when `PATH` changes (pip's isolated
    // build of the wheel prepends its own folders; CI's wheel reuses the tests' build).
    if path_dependent {
        println!("cargo::rerun-if-env-changed=PATH");
    }
    let families: Vec<Family> = built.iter().map(|b| b.0).collect();
    write_index(&out_dir, &families);
    if built.is_empty() {
        let why: Vec<&str> = failed.iter().map(|f| f.1.as_str()).collect();
        // A compiler that was found but failed is worth a warning; none at all is normal.
        let found_but_failed = why.iter().any(|t| t.contains("error"));
        runtime_fallback(&why.join("; "), found_but_failed);
        return;
    }
    announce(&built, &failed);
}

/// Per family: the compiler that built all of its images (and its index in `libs`,
/// `None` for nvcc), or why none did.
type Outcome = Result<(String, Option<usize>), String>;

/// Compiles every family of [`Family::ALL`] for every target of [`IMAGES`], each with
/// the first compiler that builds all of its images.
fn compile_families(libs: &[PathBuf], kernels: &Path, out_dir: &Path) -> Vec<Outcome> {
    let mut outcome: Vec<Option<Outcome>> = Family::ALL.iter().map(|_| None).collect();
    let mut tried: Vec<Vec<String>> = Family::ALL.iter().map(|_| Vec::new()).collect();
    for (i, lib) in libs.iter().enumerate() {
        let pending: Vec<usize> = (0..Family::ALL.len())
            .filter(|&f| outcome[f].is_none())
            .collect();
        let jobs: Vec<(usize, usize)> = pending
            .iter()
            .flat_map(|&f| (0..IMAGES.len()).map(move |k| (f, k)))
            .collect();
        let results = run_parallel(&jobs, |&(f, k)| {
            compile_image(Family::ALL[f], IMAGES[k], lib, kernels, out_dir)
        });
        for &f in &pending {
            let errors: Vec<String> = jobs
                .iter()
                .zip(&results)
                .filter(|((g, _), r)| *g == f && r.is_err())
                .map(|(_, r)| r.clone().unwrap_err())
                .collect();
            match errors.first() {
                None => outcome[f] = Some(Ok((format!("NVRTC {}", lib.display()), Some(i)))),
                Some(e) => tried[f].push(format!("NVRTC {}: {e}", lib.display())),
            }
        }
    }
    for (f, family) in Family::ALL.into_iter().enumerate() {
        if outcome[f].is_none() {
            outcome[f] = Some(match compile_with_nvcc(family, kernels, out_dir) {
                Ok(()) => Ok(("nvcc".into(), None)),
                Err(e) => {
                    tried[f].push(e);
                    Err(tried[f].join("; "))
                }
            });
        }
    }
    outcome
        .into_iter()
        .map(|o| o.expect("every family has an outcome"))
        .collect()
}

/// `work` over `items` on cargo's job count of threads (`NUM_JOBS`), results in the
/// items' order. The images are independent NVRTC programs (NVRTC allows concurrent
/// calls on distinct programs); one at a time, the largest family alone took over two
/// minutes of a two-core build.
fn run_parallel<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = work(item);
                    *slots[i].lock().expect("no worker panics holding it") = Some(r);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .expect("no worker panicked")
                .expect("every item ran")
        })
        .collect()
}

/// Writes `OUT_DIR/kernel_images.rs`: the images of `families`, as a slice of
/// `(family name, target, output, bytes)`.
fn write_index(out_dir: &Path, families: &[Family]) {
    let mut code = String::from("&[\n");
    for family in families {
        for &(target, output) in IMAGES {
            let path = image_path(out_dir, *family, target, output);
            code += &format!(
                "    ({:?}, {target:?}, Output::{output:?}, include_bytes!({:?}) as &[u8]),\n",
                family.name(),
                path.display().to_string()
            );
        }
    }
    code += "]\n";
    std::fs::write(out_dir.join("kernel_images.rs"), code).expect("OUT_DIR is writable");
}

/// Writes `OUT_DIR/builtin_profiles.rs`: every `tuning/*.toml` as `(file name,
/// include_str!)`, so the library carries the tuning profiles wherever it is copied.
fn builtin_profiles(manifest: &Path, out_dir: &Path) {
    let dir = manifest.join("tuning");
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "toml"));
    files.sort();
    let mut code = String::from("&[\n");
    for f in &files {
        let name = f.file_name().expect("a file").to_string_lossy();
        code += &format!(
            "    ({name:?}, include_str!({:?})),\n",
            f.display().to_string()
        );
    }
    code += "]\n";
    std::fs::write(out_dir.join("builtin_profiles.rs"), code).expect("OUT_DIR is writable");
}

fn image_path(out_dir: &Path, family: Family, target: &str, output: Output) -> PathBuf {
    let ext = match output {
        Output::Ptx => "ptx",
        Output::Cubin => "cubin",
    };
    out_dir.join(format!("{}.{target}.{ext}", family.name()))
}

/// Records what was embedded in `SPTMC_KERNEL_BUILD` (shown by `sptmc --version`) and
/// warns about the families left to run-time NVRTC.
fn announce(built: &[(Family, String)], failed: &[(Family, String)]) {
    let targets: Vec<&str> = IMAGES.iter().map(|i| i.0).collect();
    let mut hows: Vec<&str> = built.iter().map(|b| b.1.as_str()).collect();
    hows.dedup();
    let mut text = if failed.is_empty() {
        format!("prebuilt {} by {}", targets.join(" + "), hows.join(", "))
    } else {
        let names: Vec<&str> = built.iter().map(|b| b.0.name()).collect();
        format!(
            "prebuilt {} of {} by {}",
            targets.join(" + "),
            names.join(", "),
            hows.join(", ")
        )
    };
    for (family, why) in failed {
        text += &format!("; {}: NVRTC at run time", family.name());
        println!(
            "cargo::warning=sptmc: the {} kernel family was not prebuilt ({}); NVRTC compiles it at run time",
            family.name(),
            why.lines().next().unwrap_or("")
        );
    }
    println!("cargo::rustc-env=SPTMC_KERNEL_BUILD={text}");
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

/// Site-packages folders of the local virtual environments.
fn venv_site_packages(manifest: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for venv in [".venv-cuda", ".venv"] {
        if let Ok(rd) = std::fs::read_dir(manifest.join(venv).join("lib")) {
            for e in rd.flatten() {
                dirs.push(e.path().join("site-packages"));
            }
        }
    }
    dirs
}

/// Site-packages folders of the `python3` on `PATH`.
fn python_site_packages() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
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

/// The NVRTC libraries to try, in order, and how many of the first ones were found
/// without `PATH` (`SPTMC_NVRTC_LIB` and the local venvs; the rest via `python3`).
fn nvrtc_candidates(manifest: &Path) -> (Vec<PathBuf>, usize) {
    let mut libs = Vec::new();
    if let Some(p) = std::env::var_os("SPTMC_NVRTC_LIB") {
        libs.push(PathBuf::from(p));
    }
    let add = |libs: &mut Vec<PathBuf>, sites: Vec<PathBuf>| {
        for site in sites {
            let lib = site.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
            if lib.is_file() && !libs.contains(&lib) {
                libs.push(lib);
            }
        }
    };
    add(&mut libs, venv_site_packages(manifest));
    let fixed = libs.len();
    add(&mut libs, python_site_packages());
    (libs, fixed)
}

/// Include folders holding `cuda_fp16.h` for an NVRTC library.
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

/// Compiles one image of `family` with the NVRTC at `lib_path` (or takes it from the
/// cache) into `OUT_DIR`.
fn compile_image(
    family: Family,
    (target, output): (&str, Output),
    lib_path: &Path,
    kernels: &Path,
    out_dir: &Path,
) -> Result<(), String> {
    let entry = family.entry_file();
    let mut includes = vec![kernels.to_path_buf()];
    includes.extend(cuda_includes(lib_path));
    let cache = ImageCache::new(out_dir, lib_path, kernels, &includes);
    let path = image_path(out_dir, family, target, output);
    if let Some(cache) = &cache
        && cache.fetch(family, target, output, &path)
    {
        return Ok(());
    }
    let src = std::fs::read_to_string(kernels.join(entry)).map_err(|e| e.to_string())?;
    let bytes = nvrtc_dl::compile(lib_path, &src, entry, target, &includes, output)?;
    std::fs::write(&path, &bytes)
        .map_err(|e| format!("error: cannot write the {target} image: {e}"))?;
    if let Some(cache) = &cache {
        cache.keep(family, target, output, &bytes);
    }
    Ok(())
}

/// Images NVRTC built before, in `<target dir>/sptmc-kernel-images/`, keyed by a hash
/// of everything the image depends on: every file under `kernels/`, the compile
/// options (`nvrtc_dl.rs`, `family.rs`), the family, target and output, the NVRTC
/// library (path, size, modification time) and the include folders. Each build
/// configuration (check, test, release, another feature set) runs this script in its
/// own `OUT_DIR`; without the cache each compiled every kernel again (a minute or two
/// per configuration on two cores). `cargo clean` clears it.
struct ImageCache {
    dir: PathBuf,
    /// The hash of the inputs common to every image of this run.
    base: u64,
}

impl ImageCache {
    /// The cache in cargo's target folder: `OUT_DIR` is
    /// `<target>[/<triple>]/<profile>/build/<package>-<hash>/out`, so the folder above the
    /// profile's. (Not the ancestor holding `CACHEDIR.TAG`: cargo writes that tag only
    /// when it creates the target folder, and the kernel gate creates `target/` first,
    /// which left CI without a cache and every configuration compiling every kernel.)
    /// `None` where `OUT_DIR` has another shape or the kernels cannot be read.
    fn new(out_dir: &Path, lib: &Path, kernels: &Path, includes: &[PathBuf]) -> Option<Self> {
        use std::hash::{Hash, Hasher};
        let mut up = out_dir.ancestors();
        let build = up.nth(2)?;
        if build.file_name()? != "build" {
            return None;
        }
        let root = up.nth(1)?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        "sptmc kernel image cache v1".hash(&mut h);
        include_str!("src/engine/cuda/nvrtc_dl.rs").hash(&mut h);
        include_str!("src/engine/cuda/family.rs").hash(&mut h);
        let mut files: Vec<PathBuf> = std::fs::read_dir(kernels)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for f in &files {
            f.file_name().hash(&mut h);
            std::fs::read(f).ok()?.hash(&mut h);
        }
        lib.hash(&mut h);
        let meta = std::fs::metadata(lib).ok()?;
        meta.len().hash(&mut h);
        meta.modified().ok().hash(&mut h);
        includes.hash(&mut h);
        Some(ImageCache {
            dir: root.join("sptmc-kernel-images"),
            base: h.finish(),
        })
    }

    fn path(&self, family: Family, target: &str, output: Output) -> PathBuf {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.base.hash(&mut h);
        (family.name(), target, format!("{output:?}")).hash(&mut h);
        self.dir.join(format!("{:016x}", h.finish()))
    }

    /// Copies a cached image to `to`; whether there was one.
    fn fetch(&self, family: Family, target: &str, output: Output, to: &Path) -> bool {
        let from = self.path(family, target, output);
        from.is_file() && std::fs::copy(&from, to).is_ok()
    }

    /// Keeps a built image (written under a temporary name, then renamed, so a
    /// concurrent build never reads half an image). Failures only cost a rebuild.
    fn keep(&self, family: Family, target: &str, output: Output, bytes: &[u8]) {
        let to = self.path(family, target, output);
        let tmp = to.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::create_dir_all(&self.dir).is_ok() && std::fs::write(&tmp, bytes).is_ok() {
            let _ = std::fs::rename(&tmp, &to);
        }
    }
}

fn compile_with_nvcc(family: Family, kernels: &Path, out_dir: &Path) -> Result<(), String> {
    for &(target, output) in IMAGES {
        let (flag, arch) = match output {
            Output::Ptx => ("--ptx", format!("-arch={target}")),
            Output::Cubin => ("--cubin", format!("-arch={target}")),
        };
        let out = Command::new("nvcc")
            .arg(flag)
            .arg(arch)
            .arg("-std=c++17")
            .arg("-I")
            .arg(kernels)
            .arg(kernels.join(family.entry_file()))
            .arg("-o")
            .arg(image_path(out_dir, family, target, output))
            .output();
        match out {
            Err(_) => return Err("no nvcc on PATH".into()),
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return Err(format!(
                    "nvcc error: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
            }
        }
    }
    Ok(())
}
