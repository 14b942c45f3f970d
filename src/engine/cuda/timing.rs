//! Device time and rates: events that record time, the seconds between them, and the
//! device-to-device copy rate that effective bandwidth is compared with.

use super::device::cuda_err;
use crate::engine::CopyRate;
use crate::error::{Error, Result};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream};
use std::sync::Arc;

/// An event that records time (cudarc's default disables timing).
pub fn timing_event(stream: &Arc<CudaStream>) -> Result<CudaEvent> {
    stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| cuda_err("recording a timing event", e))
}

/// Seconds between two recorded events (waits for the second).
pub fn seconds_between(start: &CudaEvent, end: &CudaEvent) -> Result<f64> {
    let ms = start
        .elapsed_ms(end)
        .map_err(|e| cuda_err("reading a timing event", e))?;
    Ok(f64::from(ms) / 1e3)
}

/// Measures the device-to-device copy rate: copies `bytes` (whole 4-byte words, at most
/// half the free device memory, at least one word) between two device buffers once
/// untimed and `reps` times timed with events on `stream`, and reports the median
/// copy's bytes read plus written per second.
pub fn copy_rate(stream: &Arc<CudaStream>, bytes: usize, reps: usize) -> Result<CopyRate> {
    if reps == 0 {
        return Err(Error::InvalidOption(
            "the copy rate needs at least 1 repetition".into(),
        ));
    }
    let (free, _total) = stream
        .context()
        .mem_get_info()
        .map_err(|e| cuda_err("querying free device memory", e))?;
    let words = (bytes.min(free / 2) / 4).max(1);
    let src = stream
        .alloc_zeros::<u32>(words)
        .map_err(|e| cuda_err("allocating the copy-rate source", e))?;
    let mut dst = stream
        .alloc_zeros::<u32>(words)
        .map_err(|e| cuda_err("allocating the copy-rate destination", e))?;
    let copy = |dst: &mut CudaSlice<u32>| {
        stream
            .memcpy_dtod(&src, dst)
            .map_err(|e| cuda_err("copying within the device", e))
    };
    copy(&mut dst)?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = timing_event(stream)?;
        copy(&mut dst)?;
        let end = timing_event(stream)?;
        times.push(seconds_between(&start, &end)?);
    }
    let median_s = crate::engine::median(&times);
    let bytes = (words * 4) as u64;
    Ok(CopyRate {
        bytes,
        reps,
        median_s,
        bytes_per_s: if median_s > 0.0 {
            2.0 * bytes as f64 / median_s
        } else {
            0.0
        },
    })
}
