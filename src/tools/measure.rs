//! The one way the tools time anything, and what they stamp a measurement with.
//!
//! [`measure`] runs a closure once untimed (first-touch allocations, caches, a lazily
//! compiled kernel) and then `reps` times on the wall clock; the closure synchronizes
//! the backend before it returns, so the wall clock covers the work, and returns the
//! device seconds of its kernels where the backend timed them
//! ([`crate::engine::RunStats::kernel_seconds`]). [`measure_interleaved`] does the same
//! for several subjects a round at a time, so that drift of a shared machine hits them
//! alike.

use crate::engine::median;
use crate::error::Result;
use std::time::Instant;

/// The timed runs of one subject.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Samples {
    /// Seconds of every timed run, in the order taken.
    pub runs: Vec<f64>,
    /// Median of `runs` (the mean of the middle two for an even count).
    pub median: f64,
    /// Fastest run (less sensitive to other load on a shared machine).
    pub min: f64,
    /// The same for the kernels' device seconds, when every run reported them.
    pub kernel: Option<Box<Samples>>,
}

impl Samples {
    /// The statistics of `runs` (no kernel times).
    pub fn of(runs: Vec<f64>) -> Self {
        Samples {
            median: median(&runs),
            min: runs.iter().copied().fold(f64::INFINITY, f64::min),
            runs,
            kernel: None,
        }
    }

    /// The kernels' device times where the backend measured them, else the wall clock:
    /// what a comparison of kernels should read (on a GPU the copy of a result back
    /// costs the same for every candidate and would only blur the difference).
    pub fn device_or_wall(&self) -> &Samples {
        self.kernel.as_deref().unwrap_or(self)
    }
}

/// One untimed call of `f`, then `reps` timed ones (see the module docs).
pub fn measure(reps: usize, mut f: impl FnMut() -> Result<Option<f64>>) -> Result<Samples> {
    Ok(measure_interleaved(reps, 1, |_| f())?.remove(0))
}

/// [`measure`] for `n` subjects: `f(i)` runs subject `i` once. One untimed round, then
/// `reps` timed rounds, each running every subject in turn.
pub fn measure_interleaved(
    reps: usize,
    n: usize,
    mut f: impl FnMut(usize) -> Result<Option<f64>>,
) -> Result<Vec<Samples>> {
    for i in 0..n {
        f(i)?;
    }
    let mut wall = vec![Vec::with_capacity(reps); n];
    let mut kernel = vec![Vec::with_capacity(reps); n];
    for _ in 0..reps {
        for i in 0..n {
            let start = Instant::now();
            let device = f(i)?;
            wall[i].push(start.elapsed().as_secs_f64());
            kernel[i].extend(device);
        }
    }
    Ok(wall
        .into_iter()
        .zip(kernel)
        .map(|(w, k)| Samples {
            kernel: (k.len() == reps && reps > 0).then(|| Box::new(Samples::of(k))),
            ..Samples::of(w)
        })
        .collect())
}

/// The commit the crate was built from (`git rev-parse --short HEAD`, set by build.rs
/// or by `SPTMC_GIT_COMMIT` at build time), or "unknown".
pub fn build_commit() -> &'static str {
    option_env!("SPTMC_GIT_COMMIT")
        .filter(|c| !c.is_empty())
        .unwrap_or("unknown")
}

/// The current time in UTC as `YYYY-MM-DDTHH:MM:SSZ` (its first ten characters are the
/// date).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic
/// Gregorian calendar, days-from-civil inverted).
fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Shift the epoch to 0000-03-01 so leap days fall at the end of a 400-year era.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_format_as_utc() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_795_320_000 + 3_723), "2026-11-22T05:02:03Z");
        assert_eq!(&format_utc(1_795_314_000)[..10], "2026-11-22");
        assert_eq!(utc_now().len(), 20);
    }

    #[test]
    fn measure_warms_up_times_every_run_and_keeps_kernel_times_only_when_all_have_one() {
        let mut calls = 0;
        let s = measure(4, || {
            calls += 1;
            Ok(Some(calls as f64))
        })
        .unwrap();
        assert_eq!(s.runs.len(), 4, "one untimed call, then four");
        assert!(s.min <= s.median && s.min >= 0.0);
        let k = s.kernel.as_deref().unwrap();
        assert_eq!(
            (k.runs.as_slice(), k.median, k.min),
            (&[2.0, 3.0, 4.0, 5.0][..], 3.5, 2.0)
        );
        assert_eq!(s.device_or_wall(), k);
        let mut n = 0;
        let partial = measure(2, || {
            n += 1;
            Ok((n == 2).then_some(1.0))
        })
        .unwrap();
        assert!(partial.kernel.is_none() && partial.device_or_wall() == &partial);
        let mut order = Vec::new();
        let both = measure_interleaved(2, 2, |i| {
            order.push(i);
            Ok(None)
        })
        .unwrap();
        assert_eq!(order, [0, 1, 0, 1, 0, 1]);
        assert!(both.iter().all(|s| s.runs.len() == 2 && s.kernel.is_none()));
    }
}
