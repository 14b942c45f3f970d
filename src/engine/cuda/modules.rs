//! The kernel families of one device, each compiled (when not embedded) and loaded on
//! its first use, once: a family that fails is reported by name with the NVRTC or
//! driver log, every later use of it gets the same error, and the other families stay
//! usable.

use super::device::cuda_err;
use super::kernels::{self, Family, KernelSearch};
use super::nvrtc_dl::Output;
use crate::error::{Error, Result};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// A loaded family: its module, its entry points looked up by name once, and where its
/// device code came from.
struct Loaded {
    module: Arc<CudaModule>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    source: String,
}

/// Why a family could not be loaded, kept so that every use reports it again.
#[derive(Debug, Clone)]
enum Failure {
    Nvrtc {
        kernel: String,
        options: Vec<String>,
        log: String,
    },
    Other(String),
}

impl Failure {
    fn of(e: Error) -> Self {
        match e {
            Error::Nvrtc {
                kernel,
                options,
                log,
            } => Failure::Nvrtc {
                kernel,
                options,
                log,
            },
            e => Failure::Other(e.to_string()),
        }
    }

    fn to_error(&self, family: Family) -> Error {
        match self {
            Failure::Nvrtc {
                kernel,
                options,
                log,
            } => Error::Nvrtc {
                kernel: kernel.clone(),
                options: options.clone(),
                log: log.clone(),
            },
            Failure::Other(m) => Error::Cuda {
                context: format!("loading the {} kernel family", family.name()),
                message: m.clone(),
            },
        }
    }
}

/// The kernel families of one device, loaded lazily.
pub struct Kernels {
    ctx: Arc<CudaContext>,
    capability: (i32, i32),
    search: KernelSearch,
    families: [OnceLock<std::result::Result<Loaded, Failure>>; Family::ALL.len()],
}

impl Kernels {
    /// The families of the device of `ctx` (compute capability `capability`), none
    /// loaded yet; `search` says where run-time compilation looks.
    pub fn new(ctx: Arc<CudaContext>, capability: (i32, i32), search: KernelSearch) -> Self {
        Kernels {
            ctx,
            capability,
            search,
            families: Default::default(),
        }
    }

    /// The entry point `name`, loading its family ([`Family::of`]) on first use.
    pub fn get(&self, name: &str) -> Result<CudaFunction> {
        let family = Family::of(name);
        let loaded = self.family(family)?;
        let mut map = loaded.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = map.get(name) {
            return Ok(f.clone());
        }
        let f = loaded.module.load_function(name).map_err(|e| {
            cuda_err(
                &format!("loading kernel {name} of the {} family", family.name()),
                e,
            )
        })?;
        map.insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// Loads `family` now if it is not loaded yet (checking that its module holds
    /// every entry point of [`kernels::entries`]).
    pub fn load(&self, family: Family) -> Result<()> {
        self.family(family).map(|_| ())
    }

    /// Where each family's device code came from, or `not loaded yet`, or its failure.
    pub fn sources(&self) -> String {
        Family::ALL
            .iter()
            .map(|&f| {
                let state = match self.families[f.index()].get() {
                    None => "not loaded yet".to_string(),
                    Some(Ok(l)) => l.source.clone(),
                    Some(Err(e)) => format!("failed: {}", e.to_error(f)),
                };
                format!("{}: {state}", f.name())
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn family(&self, family: Family) -> Result<&Loaded> {
        self.families[family.index()]
            .get_or_init(|| self.load_now(family).map_err(Failure::of))
            .as_ref()
            .map_err(|f| f.to_error(family))
    }

    fn load_now(&self, family: Family) -> Result<Loaded> {
        let (image, output, source) = kernels::family_image(family, self.capability, &self.search)?;
        let what = format!("loading the {} kernel family ({source})", family.name());
        let ptx = match output {
            Output::Cubin => cudarc::nvrtc::Ptx::from_binary(image.clone()),
            Output::Ptx => {
                cudarc::nvrtc::Ptx::from_src(String::from_utf8_lossy(&image).into_owned())
            }
        };
        let module = self.ctx.load_module(ptx).map_err(|e| Error::Cuda {
            context: what.clone(),
            message: format!("{e:?}; the driver's log: {}", jit_log(&self.ctx, &image)),
        })?;
        let loaded = Loaded {
            module,
            functions: Mutex::new(HashMap::new()),
            source,
        };
        let mut missing = Vec::new();
        for name in kernels::entries(family) {
            match loaded.module.load_function(&name) {
                Ok(f) => {
                    let mut map = loaded.functions.lock().unwrap_or_else(|e| e.into_inner());
                    map.insert(name, f);
                }
                Err(e) => missing.push(format!("{name} ({e:?})")),
            }
        }
        if !missing.is_empty() {
            return Err(Error::Cuda {
                context: what,
                message: format!("entry points missing: {}", missing.join(", ")),
            });
        }
        Ok(loaded)
    }
}

/// The driver's error log for loading `image` (a cubin, or PTX text): cudarc's
/// `load_module` drops it, so a failed load is repeated with a log buffer, only to
/// read the log (a module that loads this time is unloaded again).
fn jit_log(ctx: &Arc<CudaContext>, image: &[u8]) -> String {
    use cudarc::driver::sys;
    use std::ffi::c_void;
    if ctx.bind_to_thread().is_err() {
        return "(none: the context could not be made current)".into();
    }
    // PTX must be NUL-terminated; a cubin is read by its own header.
    let mut data = image.to_vec();
    data.push(0);
    let mut log = vec![0u8; 1 << 14];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: the context is current on this thread; `data` is a complete image (PTX
    // NUL-terminated); the two options are paired with a writable buffer and its size
    // (an unsigned int passed as a pointer-sized value, as the driver API specifies),
    // all alive for the call; a module that loads is unloaded once.
    unsafe {
        let rc = sys::cuModuleLoadDataEx(
            &mut module,
            data.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        );
        if rc == sys::CUresult::CUDA_SUCCESS {
            let _ = sys::cuModuleUnload(module);
        }
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]).trim().to_string();
    if text.is_empty() {
        "(empty)".into()
    } else {
        text
    }
}
