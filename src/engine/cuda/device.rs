//! Finding a usable device without ever panicking: the driver library is probed before
//! the first driver call (cudarc panics when libcuda is missing), once per process.

use crate::error::{Error, Result};
use cudarc::driver::CudaContext;
use std::sync::{Arc, OnceLock};

/// The lowest compute capability the kernels support (WMMA fp16 with fp32 accumulation
/// as used here, `compute_80` PTX).
pub const MIN_CAPABILITY: (i32, i32) = (8, 0);

/// The driver library's presence and the device count, probed once.
fn driver_probe() -> std::result::Result<usize, String> {
    static PROBE: OnceLock<std::result::Result<usize, String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            // SAFETY: only tries to dlopen the driver library; no driver call is made.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err("the CUDA driver library (libcuda) is not installed".into());
            }
            match CudaContext::device_count() {
                Ok(0) => Err("the CUDA driver reports no device".into()),
                Ok(n) => Ok(n as usize),
                Err(e) => Err(format!("the CUDA driver failed to initialize: {e:?}")),
            }
        })
        .clone()
}

/// The number of CUDA devices the driver reports; 0 where there is no driver, no
/// device, or the driver fails to start.
pub fn count() -> usize {
    driver_probe().unwrap_or(0)
}

/// The device a process takes when it is rank `local_rank` of `local_size` on a node
/// with `devices` devices: round robin by local rank (the first `devices` ranks get one
/// each, and further ranks share), with whether it is shared with another rank of the
/// node; `None` without a device.
pub fn for_local_rank(
    local_rank: usize,
    local_size: usize,
    devices: usize,
) -> Option<(usize, bool)> {
    (devices > 0).then(|| (local_rank % devices, local_size > devices))
}

/// An opened device: its context and what it is.
pub struct Device {
    /// The primary context of the device.
    pub ctx: Arc<CudaContext>,
    /// Device name as the driver reports it.
    pub name: String,
    /// Compute capability (major, minor).
    pub capability: (i32, i32),
}

/// Opens device `ordinal` if it exists and is recent enough.
pub fn open(ordinal: usize) -> Result<Device> {
    let count = driver_probe().map_err(Error::NoDevice)?;
    if ordinal >= count {
        return Err(Error::NoDevice(format!(
            "device {ordinal} asked for, the driver reports {count}"
        )));
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| cuda_err("opening the device", e))?;
    let name = ctx
        .name()
        .map_err(|e| cuda_err("reading the device name", e))?;
    let capability = ctx
        .compute_capability()
        .map_err(|e| cuda_err("reading the compute capability", e))?;
    if capability < MIN_CAPABILITY {
        return Err(Error::NoDevice(format!(
            "{name} has compute capability {}.{}, the kernels need {}.{} or newer",
            capability.0, capability.1, MIN_CAPABILITY.0, MIN_CAPABILITY.1
        )));
    }
    Ok(Device {
        ctx,
        name,
        capability,
    })
}

/// Wraps a driver error with what was being done.
pub fn cuda_err(context: &str, e: cudarc::driver::DriverError) -> Error {
    Error::Cuda {
        context: context.to_string(),
        message: format!("{e:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::for_local_rank;

    #[test]
    fn ranks_take_devices_round_robin_and_say_when_they_share() {
        // One device per rank: each its own.
        assert_eq!(for_local_rank(0, 4, 4), Some((0, false)));
        assert_eq!(for_local_rank(3, 4, 4), Some((3, false)));
        // Fewer ranks than devices: the first ones.
        assert_eq!(for_local_rank(1, 2, 8), Some((1, false)));
        // More ranks than devices: round robin, shared.
        assert_eq!(for_local_rank(0, 2, 1), Some((0, true)));
        assert_eq!(for_local_rank(1, 2, 1), Some((0, true)));
        assert_eq!(for_local_rank(5, 6, 4), Some((1, true)));
        // No device.
        assert_eq!(for_local_rank(0, 1, 0), None);
    }
}
