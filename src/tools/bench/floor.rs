//! The memory floor of a kernel: the least time it can take on this machine.
//!
//! A kernel must read its prepared form, read the factors it multiplies and write its
//! output; if each byte moved once at the machine's copy bandwidth the kernel could
//! not be faster. [`FloorBytes`] counts those bytes for one op and mode:
//! - the form the kernel reads for that mode
//!   ([`crate::engine::BackendTensor::form_bytes`]: the HLS form, or on the CPU the
//!   mode's row groups where MTTKRP runs row by row);
//! - every factor but the target's, whole (`I_m × cols × 4` bytes; the target's
//!   factor is not an input);
//! - the output, `rows × cols × 4` bytes, written once.
//!
//! The bandwidth is the copy rate, bytes read plus bytes written per second: on a GPU
//! the device-to-device copy ([`crate::engine::Backend::copy_rate`]), on the CPU
//! [`host_copy_rate`], a STREAM-like copy between two buffers far larger than the
//! last-level cache, on the backend's threads ([`HostCopy`], which the bench also
//! times beside each kernel's runs). A kernel's *fraction of the floor* is
//! the floor time over its median time (1 = at the floor).

use crate::engine::{CopyRate, median};
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::time::Instant;

/// Largest buffer the host copy uses (each of two): 256 MiB, 8× a large last-level
/// cache, and a small share of a shared machine's memory.
pub const HOST_COPY_MAX_BYTES: usize = 256 << 20;

/// The bytes a kernel of one op and mode must move at least (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FloorBytes {
    /// The prepared form the kernel reads for this mode.
    pub form: u64,
    /// Every factor but the target's.
    pub factors: u64,
    /// The output.
    pub output: u64,
}

impl FloorBytes {
    /// The floor of a kernel that reads `form` bytes, multiplies factors of
    /// `factor_rows[m] × factor_cols[m]` floats for every mode `m` but `mode`, and
    /// writes `out_rows × out_cols` floats.
    pub fn new(
        form: usize,
        factor_rows: &[usize],
        factor_cols: &[usize],
        mode: usize,
        (out_rows, out_cols): (usize, usize),
    ) -> Self {
        let factors = (factor_rows.iter().zip(factor_cols).enumerate())
            .filter(|&(m, _)| m != mode)
            .map(|(_, (&r, &c))| r as u64 * c as u64 * 4)
            .sum();
        FloorBytes {
            form: form as u64,
            factors,
            output: out_rows as u64 * out_cols as u64 * 4,
        }
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.form + self.factors + self.output
    }

    /// Seconds to move them once at `rate` (bytes read + written per second).
    pub fn seconds(&self, rate: &CopyRate) -> Option<f64> {
        (rate.bytes_per_s > 0.0).then(|| self.total() as f64 / rate.bytes_per_s)
    }
}

/// The buffers of the host copy ([`host_copy_rate`]), kept so that a copy can be timed
/// beside each run of a kernel: `sptmc bench` on the CPU times one copy after every
/// timed kernel run and takes that kernel's floor at the median of its own copies, so
/// that the two are measured under the same load (on a shared machine the rate of one
/// copy measured before the runs swung from 11 to 19 GB/s between runs of the bench).
pub struct HostCopy {
    src: Vec<u64>,
    dst: Vec<u64>,
    /// Words per thread's range (rayon's pool when made: time copies in that pool).
    chunk: usize,
}

impl HostCopy {
    /// Two buffers of `bytes` each (rounded down to whole 8-byte words; at most
    /// [`HOST_COPY_MAX_BYTES`] and a quarter of the available memory), cut into one
    /// contiguous range per thread of rayon's current pool. Both buffers are touched
    /// first by the threads that copy them, so their pages sit where those threads run.
    pub fn new(bytes: usize) -> Result<Self> {
        let room = crate::matrix::available_memory().map_or(usize::MAX, |a| (a / 4) as usize);
        let words = bytes.min(HOST_COPY_MAX_BYTES).min(room) / 8;
        if words == 0 {
            return Err(Error::InvalidOption(format!(
                "the host copy rate needs at least one 8-byte word ({bytes} bytes asked for)"
            )));
        }
        crate::matrix::check_alloc("the host copy-rate buffers", 2 * words, 8, 1)?;
        let chunk = words.div_ceil(rayon::current_num_threads().max(1));
        // Zeroed allocations are not touched until written: the fills below place them.
        // On the pages the kernels' large arrays use ([`crate::matrix::advise_huge_pages`]).
        let mut src = crate::matrix::zeroed_on_huge_pages::<u64>(words);
        let mut dst = crate::matrix::zeroed_on_huge_pages::<u64>(words);
        src.par_chunks_mut(chunk).enumerate().for_each(|(k, c)| {
            c.iter_mut()
                .enumerate()
                .for_each(|(i, w)| *w = (k + i) as u64)
        });
        dst.par_chunks_mut(chunk).for_each(|c| c.fill(1));
        Ok(HostCopy { src, dst, chunk })
    }

    /// [`HostCopy::new`], then `reps` timed copies after one untimed: the buffers and
    /// their rate.
    pub fn measured(bytes: usize, reps: usize) -> Result<(Self, CopyRate)> {
        let mut copy = HostCopy::new(bytes)?;
        copy.time_once();
        let runs: Vec<f64> = (0..reps).map(|_| copy.time_once()).collect();
        let rate = copy.rate(&runs)?;
        Ok((copy, rate))
    }

    /// Bytes one copy reads (and writes).
    pub fn bytes(&self) -> u64 {
        self.src.len() as u64 * 8
    }

    /// Seconds of one copy, on rayon's current pool.
    pub fn time_once(&mut self) -> f64 {
        let chunk = self.chunk;
        let start = Instant::now();
        (self.dst.par_chunks_mut(chunk))
            .zip(self.src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
        start.elapsed().as_secs_f64()
    }

    /// The rate of copies that took `runs` seconds (their median). Reads back one word,
    /// so that the copies cannot have been dropped as unused.
    pub fn rate(&self, runs: &[f64]) -> Result<CopyRate> {
        if runs.is_empty() {
            return Err(Error::InvalidOption(
                "the host copy rate needs at least one repetition".into(),
            ));
        }
        let last = self.src.len() - 1;
        if self.dst[last] != self.src[last] {
            return Err(Error::Numerical("the host copy did not copy".into()));
        }
        let median_s = median(runs);
        Ok(CopyRate {
            bytes: self.bytes(),
            reps: runs.len(),
            median_s,
            bytes_per_s: 2.0 * self.bytes() as f64 / median_s,
        })
    }
}

/// The host's copy rate: `reps` timed copies (after one untimed) of a buffer of
/// `bytes` into another ([`HostCopy`]), on rayon's current pool.
pub fn host_copy_rate(bytes: usize, reps: usize) -> Result<CopyRate> {
    if reps == 0 {
        return Err(Error::InvalidOption(format!(
            "the host copy rate needs at least one repetition ({reps} asked for)"
        )));
    }
    Ok(HostCopy::measured(bytes, reps)?.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Form, the other modes' factors whole and the output, each once.
    #[test]
    fn floor_bytes_count_the_form_the_other_factors_and_the_output_once() {
        let b = FloorBytes::new(1000, &[10, 20, 30], &[8, 8, 8], 1, (20, 8));
        assert_eq!(b.form, 1000);
        assert_eq!(b.factors, (10 + 30) * 8 * 4);
        assert_eq!(b.output, 20 * 8 * 4);
        assert_eq!(b.total(), 1000 + 40 * 32 + 640);
        let rate = CopyRate {
            bytes: 1,
            reps: 1,
            median_s: 1.0,
            bytes_per_s: 2.0 * b.total() as f64,
        };
        assert_eq!(b.seconds(&rate), Some(0.5));
        assert_eq!(
            b.seconds(&CopyRate {
                bytes_per_s: 0.0,
                ..rate
            }),
            None
        );
    }

    #[test]
    fn the_host_copy_rate_copies_and_refuses_nothing_to_copy() {
        let c = host_copy_rate(1 << 20, 2).unwrap();
        assert_eq!((c.bytes, c.reps), (1 << 20, 2));
        assert!(c.median_s > 0.0);
        assert_eq!(c.bytes_per_s, 2.0 * c.bytes as f64 / c.median_s);
        assert!(matches!(host_copy_rate(7, 2), Err(Error::InvalidOption(_))));
        assert!(matches!(
            host_copy_rate(64, 0),
            Err(Error::InvalidOption(_))
        ));
    }
}
