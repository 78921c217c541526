//! `/proc/meminfo` and the three node memory collect policies of the NodeMetric spec
//! (`spec.metricCollectPolicy.nodeMemoryCollectPolicy`).

use super::ParseError;

/// The `/proc/meminfo` fields koordlet uses, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meminfo {
    /// `MemTotal`.
    pub mem_total: u64,
    /// `MemFree`: unused, not even as cache.
    pub mem_free: u64,
    /// `MemAvailable`: the kernel's estimate of what can be allocated without swapping.
    pub mem_available: u64,
    /// `Buffers`.
    pub buffers: u64,
    /// `Cached` (page cache).
    pub cached: u64,
    /// `Active(file)`.
    pub active_file: u64,
    /// `Inactive(file)`.
    pub inactive_file: u64,
    /// `SReclaimable` (reclaimable slab).
    pub sreclaimable: u64,
}

/// One `Key: value [kB]` line of a meminfo file: the text before the colon and the value in
/// bytes; `None` for a line without a colon or a number.
pub(crate) fn entry(line: &str) -> Option<(&str, u64)> {
    let (key, rest) = line.split_once(':')?;
    let mut parts = rest.split_whitespace();
    let value = parts.next()?.parse::<u64>().ok()?;
    let bytes = match parts.next() {
        Some("kB") => value.saturating_mul(1024),
        _ => value,
    };
    Some((key, bytes))
}

impl Meminfo {
    /// Parses `/proc/meminfo`. `MemTotal`, `MemFree` and `MemAvailable` are required (every
    /// kernel since 3.14 has them); other fields default to 0; unknown lines are ignored.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut info = Meminfo::default();
        let mut seen = [false; 3];
        for line in text.lines() {
            let Some((key, bytes)) = entry(line) else {
                continue;
            };
            let slot = match key.trim() {
                "MemTotal" => {
                    seen[0] = true;
                    &mut info.mem_total
                }
                "MemFree" => {
                    seen[1] = true;
                    &mut info.mem_free
                }
                "MemAvailable" => {
                    seen[2] = true;
                    &mut info.mem_available
                }
                "Buffers" => &mut info.buffers,
                "Cached" => &mut info.cached,
                "Active(file)" => &mut info.active_file,
                "Inactive(file)" => &mut info.inactive_file,
                "SReclaimable" => &mut info.sreclaimable,
                _ => continue,
            };
            *slot = bytes;
        }
        for (present, name) in seen.iter().zip(["MemTotal", "MemFree", "MemAvailable"]) {
            if !present {
                return Err(ParseError::new("/proc/meminfo", format!("missing {name}")));
            }
        }
        Ok(info)
    }
}

impl Meminfo {
    /// Reads and parses `<proc>/meminfo`.
    pub fn read(roots: &super::SystemRoots) -> Result<Self, super::SystemError> {
        let path = roots.proc_file("meminfo");
        let text = super::read_text(&path)?;
        Self::parse(&text).map_err(|e| super::SystemError::parse(path, e))
    }
}

/// How node memory usage is counted (`nodeMemoryCollectPolicy`; default `usageWithoutPageCache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryCollectPolicy {
    /// `MemTotal - MemAvailable`: page cache the kernel can drop is not usage.
    #[default]
    UsageWithoutPageCache,
    /// `MemTotal - MemFree - cold page cache`: page cache counts unless kidled saw it idle
    /// (cold). Needs the cold-page figure (`memory.idle_stat`); without it there is no value.
    UsageWithHotPageCache,
    /// `MemTotal - MemFree`: all page cache counts as usage.
    UsageWithPageCache,
}

impl MemoryCollectPolicy {
    /// Parses the upstream spelling (`usageWithoutPageCache`, ...).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "usageWithoutPageCache" => Some(Self::UsageWithoutPageCache),
            "usageWithHotPageCache" => Some(Self::UsageWithHotPageCache),
            "usageWithPageCache" => Some(Self::UsageWithPageCache),
            _ => None,
        }
    }

    /// The upstream spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UsageWithoutPageCache => "usageWithoutPageCache",
            Self::UsageWithHotPageCache => "usageWithHotPageCache",
            Self::UsageWithPageCache => "usageWithPageCache",
        }
    }

    /// Node memory usage in bytes under this policy. `cold_page_bytes` is kidled's idle page
    /// total; `None` for the hot-page policy when it is unknown. Never negative.
    pub fn node_usage(self, info: &Meminfo, cold_page_bytes: Option<u64>) -> Option<u64> {
        match self {
            Self::UsageWithoutPageCache => Some(info.mem_total.saturating_sub(info.mem_available)),
            Self::UsageWithPageCache => Some(info.mem_total.saturating_sub(info.mem_free)),
            Self::UsageWithHotPageCache => Some(
                info.mem_total
                    .saturating_sub(info.mem_free)
                    .saturating_sub(cold_page_bytes?),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = "MemTotal:       16000000 kB\nMemFree:         2000000 kB\nMemAvailable:    9000000 kB\n\
Buffers:          100000 kB\nCached:          6000000 kB\nActive(file):    3000000 kB\nInactive(file):  2500000 kB\n\
SReclaimable:     400000 kB\nHugePages_Total:       0\n";

    #[test]
    fn parses_fixture_in_bytes() {
        let info = Meminfo::parse(FIXTURE).unwrap();
        assert_eq!(info.mem_total, 16_000_000 * 1024);
        assert_eq!(info.inactive_file, 2_500_000 * 1024);
        assert!(Meminfo::parse("MemTotal: 1 kB\nMemFree: 1 kB\n").is_err());
    }

    #[test]
    fn three_policies() {
        let info = Meminfo::parse(FIXTURE).unwrap();
        let kib = 1024;
        assert_eq!(
            MemoryCollectPolicy::UsageWithoutPageCache.node_usage(&info, None),
            Some(7_000_000 * kib)
        );
        assert_eq!(
            MemoryCollectPolicy::UsageWithPageCache.node_usage(&info, None),
            Some(14_000_000 * kib)
        );
        assert_eq!(
            MemoryCollectPolicy::UsageWithHotPageCache.node_usage(&info, None),
            None
        );
        assert_eq!(
            MemoryCollectPolicy::UsageWithHotPageCache.node_usage(&info, Some(1_000_000 * kib)),
            Some(13_000_000 * kib)
        );
        for p in [
            MemoryCollectPolicy::UsageWithoutPageCache,
            MemoryCollectPolicy::UsageWithHotPageCache,
            MemoryCollectPolicy::UsageWithPageCache,
        ] {
            assert_eq!(MemoryCollectPolicy::parse(p.as_str()), Some(p));
        }
        assert_eq!(
            MemoryCollectPolicy::default(),
            MemoryCollectPolicy::UsageWithoutPageCache
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            if let Ok(info) = Meminfo::parse(&String::from_utf8_lossy(&bytes)) {
                let _ = MemoryCollectPolicy::UsageWithHotPageCache.node_usage(&info, Some(u64::MAX));
            }
        }
    }
}
