//! What this process may still allocate, read from the system: `MemAvailable`, the
//! `ulimit -v`/`-d` soft limits less what is in use, the memory cgroup's room; the peak
//! resident memory so far; the last-level cache size; and, for programs under
//! `ulimit -v`, one malloc arena for all threads.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// The peak resident memory of this process so far (`VmHWM` of `/proc/self/status`);
/// `None` where it cannot be read.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmHWM:")
}

/// Whether this process asked glibc for a single malloc arena ([`share_one_malloc_arena`]).
pub(super) static ONE_ARENA: AtomicBool = AtomicBool::new(false);

/// glibc's address-space reservation per malloc arena on 64-bit systems.
pub(super) const ARENA_RESERVE: u128 = 64 << 20;
/// The stack a worker thread reserves (Rust's default for spawned threads).
pub(super) const THREAD_STACK: u128 = 2 << 20;

/// Under `ulimit -v` (a finite soft `RLIMIT_AS`), asks glibc to serve every thread from
/// one malloc arena: each further arena reserves 64 MiB of address space that counts
/// against the limit though little of it is ever used. Returns whether it did so. For
/// programs (the command line), before any thread starts; a library leaves the choice
/// to its host, and plans then count one arena per worker.
pub fn share_one_malloc_arena() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given; mallopt takes plain ints.
        let limited = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } == 0
            && lim.rlim_cur != libc::RLIM_INFINITY;
        if limited && unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) } == 1 {
            ONE_ARENA.store(true, Ordering::Relaxed);
            return true;
        }
    }
    false
}

/// The largest CPU cache in bytes (the last level), from sysfs; `None` where unknown.
pub fn last_level_cache_bytes() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| {
        let text = std::fs::read_to_string(e.ok()?.path().join("size")).ok()?;
        let t = text.trim();
        let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
        let n: u64 = num.parse().ok()?;
        Some(match unit {
            "K" => n << 10,
            "M" => n << 20,
            "G" => n << 30,
            _ => n,
        })
    })
    .max()
}

/// How much memory this process may still allocate, and which limit says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Available {
    /// Bytes.
    pub bytes: u64,
    /// The limit that is smallest, in words (e.g. `ulimit -v`).
    pub limited_by: String,
}

/// The memory this process may still allocate: the smallest of the limits in the
/// module docs; `None` when none can be read.
pub fn available() -> Option<Available> {
    available_reserving(0)
}

/// [`available`] with `reserved` bytes of address space still to be reserved by this
/// run: they count against `ulimit -v` only.
pub(super) fn available_reserving(reserved: u64) -> Option<Available> {
    let mut best: Option<Available> = None;
    let mut consider = |bytes: Option<u64>, what: &str| {
        if let Some(b) = bytes
            && best.as_ref().is_none_or(|a| b < a.bytes)
        {
            best = Some(Available {
                bytes: b,
                limited_by: what.to_string(),
            });
        }
    };
    consider(meminfo_available(), "MemAvailable of /proc/meminfo");
    let as_words = if reserved == 0 {
        "ulimit -v (RLIMIT_AS) less the address space in use".to_string()
    } else {
        format!(
            "ulimit -v (RLIMIT_AS) less the address space in use and the {} its workers reserve",
            human_bytes(reserved)
        )
    };
    consider(
        rlimit_room("Max address space", "VmSize:").map(|r| r.saturating_sub(reserved)),
        &as_words,
    );
    consider(
        rlimit_room("Max data size", "VmData:"),
        "ulimit -d (RLIMIT_DATA) less the data in use",
    );
    consider(cgroup_room(), "the memory cgroup's limit less its usage");
    best
}

/// `MemAvailable` in bytes.
fn meminfo_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    kib_field(&text, "MemAvailable:")
}

/// A `NAME:   123 kB` field of a `/proc` file, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The soft limit `limit` of `/proc/self/limits` less the `/proc/self/status` field
/// `used`; `None` when unlimited or unreadable.
fn rlimit_room(limit: &str, used: &str) -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with(limit))?;
    let soft: u64 = line[limit.len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let in_use = kib_field(&status, used).unwrap_or(0);
    Some(soft.saturating_sub(in_use))
}

/// The tightest `limit − usage` of the memory cgroups this process is in.
fn cgroup_room() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |p: &Path| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let mut best: Option<u64> = None;
    // cgroup v2: "0::/path"; the limit may sit on any ancestor.
    if let Some(rel) = own.lines().find_map(|l| l.strip_prefix("0::")) {
        let mut dir = Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
        loop {
            if let (Some(max), Some(cur)) = (
                read(&dir.join("memory.max")),
                read(&dir.join("memory.current")),
            ) {
                let room = max.saturating_sub(cur);
                best = Some(best.map_or(room, |b| b.min(room)));
            }
            if dir == Path::new("/sys/fs/cgroup") || !dir.pop() {
                break;
            }
        }
    }
    // cgroup v1: values near 2^63 mean no limit.
    let v1 = Path::new("/sys/fs/cgroup/memory");
    if let (Some(max), Some(cur)) = (
        read(&v1.join("memory.limit_in_bytes")),
        read(&v1.join("memory.usage_in_bytes")),
    ) && max < 1 << 62
    {
        let room = max.saturating_sub(cur);
        best = Some(best.map_or(room, |b| b.min(room)));
    }
    best
}

/// Bytes as a person reads them: `512 B`, `3.2 MiB`, `12.0 GiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_read_where_the_system_has_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        if Path::new("/proc/meminfo").exists() {
            let a = available().expect("Linux reports MemAvailable");
            assert!(a.bytes > 0, "{a:?}");
        }
    }
}
