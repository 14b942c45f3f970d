//! The sizes of this machine's caches, which choose the CPU kernels' traversal orders
//! ([`super::mttkrp_stream::streamed_by`]) and where their stores bypass the cache.

/// The cache sizes the choice of traversal reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSizes {
    /// Bytes of one core's level-2 cache.
    pub l2: usize,
    /// Bytes of the last-level cache.
    pub llc: usize,
}

impl CacheSizes {
    /// Read from `/sys/devices/system/cpu/cpu0/cache` (Linux); where that cannot be
    /// read, 1 MiB of L2 and 16 MiB of last-level cache.
    pub fn of_this_machine() -> Self {
        let mut sizes = CacheSizes {
            l2: 1 << 20,
            llc: 16 << 20,
        };
        let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
        let mut found = Vec::new();
        for k in 0..8 {
            let idx = dir.join(format!("index{k}"));
            let read = |f: &str| std::fs::read_to_string(idx.join(f)).ok();
            let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
            else {
                continue;
            };
            if kind.trim() == "Instruction" {
                continue;
            }
            if let (Ok(level), Some(bytes)) = (level.trim().parse::<u32>(), parse_size(&size)) {
                found.push((level, bytes));
            }
        }
        if let Some(&(_, b)) = found.iter().find(|&&(l, _)| l == 2) {
            sizes.l2 = b;
        }
        if let Some(&(_, b)) = found.iter().max_by_key(|&&(l, _)| l) {
            sizes.llc = b;
        }
        sizes
    }

    /// [`Self::of_this_machine`], read once per process (for callers in a loop).
    pub fn cached() -> &'static Self {
        static SIZES: std::sync::OnceLock<CacheSizes> = std::sync::OnceLock::new();
        SIZES.get_or_init(Self::of_this_machine)
    }
}

/// A sysfs cache size such as `32768K` or `1M`, in bytes.
fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|n| n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_and_order() {
        assert_eq!(parse_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
        let c = CacheSizes::of_this_machine();
        assert!(c.l2 > 0 && c.llc >= c.l2, "{c:?}");
    }
}
