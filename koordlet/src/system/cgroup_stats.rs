//! Parsers for the statistics files of a cgroup: `cpu.stat`, `memory.stat` (and, through
//! [`super::resource::decode`], `cpuacct.usage`). They take the file's bytes and never panic:
//! unknown or malformed lines are ignored (kernels add keys), a missing key the caller needs is
//! a [`ParseError`].

use std::collections::BTreeMap;

use super::{CgroupVersion, ParseError};

/// Parses "flat keyed" files (`<key> <u64>` per line, as `cpu.stat` and `memory.stat`). Lines
/// that are not exactly a key and an unsigned integer are skipped.
pub fn parse_flat_keyed(text: &str, what: &'static str) -> Result<BTreeMap<String, u64>, ParseError> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(key), Some(value), None) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if let Ok(value) = value.parse::<u64>() {
            out.insert(key.to_owned(), value);
        }
    }
    if out.is_empty() && !text.trim().is_empty() {
        return Err(ParseError::new(what, "no `<key> <integer>` line"));
    }
    Ok(out)
}

pub use koordlet_core::resource::scan_flat_keyed;

fn key(map: &BTreeMap<String, u64>, name: &str, what: &'static str) -> Result<u64, ParseError> {
    map.get(name)
        .copied()
        .ok_or_else(|| ParseError::new(what, format!("missing {name}")))
}

/// Cores used between two cumulative CPU-time readings (ns) taken `elapsed` apart. `None` when
/// no time passed or the counter went backwards (the cgroup was recreated).
pub fn cpu_cores_between(earlier_ns: u64, later_ns: u64, elapsed: std::time::Duration) -> Option<f64> {
    let used = later_ns.checked_sub(earlier_ns)?;
    let wall = elapsed.as_nanos();
    (wall > 0).then(|| used as f64 / wall as f64)
}

/// CFS throttling counters of a cgroup (`cpu.stat`), cumulative since creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuThrottling {
    /// Enforcement periods that elapsed with runnable tasks.
    pub nr_periods: u64,
    /// Periods in which the group was throttled.
    pub nr_throttled: u64,
    /// Total throttled time in ns (v1 `throttled_time`, v2 `throttled_usec` × 1000).
    pub throttled_ns: u64,
}

impl CpuThrottling {
    /// Parses `cpu.stat` of the given version.
    pub fn parse(text: &str, version: CgroupVersion) -> Result<Self, ParseError> {
        const WHAT: &str = "cpu.stat";
        let map = parse_flat_keyed(text, WHAT)?;
        let throttled_ns = match version {
            CgroupVersion::V1 => key(&map, "throttled_time", WHAT)?,
            CgroupVersion::V2 => key(&map, "throttled_usec", WHAT)?.saturating_mul(1000),
        };
        Ok(Self {
            nr_periods: key(&map, "nr_periods", WHAT)?,
            nr_throttled: key(&map, "nr_throttled", WHAT)?,
            throttled_ns,
        })
    }

    /// The share of periods throttled between two readings (`Δnr_throttled / Δnr_periods`),
    /// 0 when no period elapsed or the counters went backwards (cgroup recreated).
    pub fn throttled_ratio_since(&self, earlier: &CpuThrottling) -> f64 {
        let periods = self.nr_periods.saturating_sub(earlier.nr_periods);
        if periods == 0 || self.nr_throttled < earlier.nr_throttled {
            return 0.0;
        }
        (self.nr_throttled - earlier.nr_throttled) as f64 / periods as f64
    }
}

/// The `memory.stat` fields koordlet uses, in bytes, hierarchical where v1 offers it
/// (`total_*` keys win over the local ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStat {
    /// Anonymous memory on the inactive LRU.
    pub inactive_anon: u64,
    /// Anonymous memory on the active LRU.
    pub active_anon: u64,
    /// Page cache on the inactive LRU (reclaimable first).
    pub inactive_file: u64,
    /// Page cache on the active LRU.
    pub active_file: u64,
    /// Unevictable memory (mlocked, ramfs, ...).
    pub unevictable: u64,
}

impl MemoryStat {
    /// Parses `memory.stat` of the given version. Missing LRU keys are an error.
    ///
    /// The file is scanned once for the ten keys used (a v1 file has ~40), without building a
    /// map: this runs for every pod and container every collection round.
    pub fn parse(text: &str, version: CgroupVersion) -> Result<Self, ParseError> {
        const WHAT: &str = "memory.stat";
        const KEYS: [&str; 10] = [
            "inactive_anon",
            "active_anon",
            "inactive_file",
            "active_file",
            "unevictable",
            "total_inactive_anon",
            "total_active_anon",
            "total_inactive_file",
            "total_active_file",
            "total_unevictable",
        ];
        let found = scan_flat_keyed(text, &KEYS);
        let get = |index: usize| -> Result<u64, ParseError> {
            if version == CgroupVersion::V1
                && let Some(v) = found[index + 5]
            {
                return Ok(v);
            }
            found[index].ok_or_else(|| ParseError::new(WHAT, format!("missing {}", KEYS[index])))
        };
        Ok(Self {
            inactive_anon: get(0)?,
            active_anon: get(1)?,
            inactive_file: get(2)?,
            active_file: get(3)?,
            unevictable: get(4)?,
        })
    }

    /// Memory use without any page cache: anon (active + inactive) + unevictable. This is
    /// upstream's pod/container memory usage.
    pub fn usage_without_page_cache(&self) -> u64 {
        self.inactive_anon
            .saturating_add(self.active_anon)
            .saturating_add(self.unevictable)
    }

    /// The kubelet's working set: `usage - inactive_file` (floored at 0).
    pub fn working_set(&self, usage: u64) -> u64 {
        usage.saturating_sub(self.inactive_file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_from_cumulative_ns() {
        use std::time::Duration;
        assert_eq!(
            cpu_cores_between(1_000_000_000, 3_000_000_000, Duration::from_secs(2)),
            Some(1.0)
        );
        assert_eq!(cpu_cores_between(5, 4, Duration::from_secs(1)), None);
        assert_eq!(cpu_cores_between(1, 2, Duration::ZERO), None);
    }

    #[test]
    fn throttling_v1_and_v2() {
        let v1 = "nr_periods 100\nnr_throttled 25\nthrottled_time 5000000\nnr_bursts 0\nburst_time 0\n";
        let t = CpuThrottling::parse(v1, CgroupVersion::V1).unwrap();
        assert_eq!(
            t,
            CpuThrottling {
                nr_periods: 100,
                nr_throttled: 25,
                throttled_ns: 5_000_000
            }
        );
        let v2 =
            "usage_usec 10\nuser_usec 5\nsystem_usec 5\nnr_periods 10\nnr_throttled 5\nthrottled_usec 7\n";
        let later = CpuThrottling::parse(v2, CgroupVersion::V2).unwrap();
        assert_eq!(later.throttled_ns, 7000);
        let earlier = CpuThrottling {
            nr_periods: 6,
            nr_throttled: 3,
            throttled_ns: 0,
        };
        assert_eq!(later.throttled_ratio_since(&earlier), 0.5);
        assert_eq!(later.throttled_ratio_since(&later), 0.0);
        assert!(CpuThrottling::parse("usage_usec 1\n", CgroupVersion::V2).is_err());
    }

    #[test]
    fn memory_stat_prefers_hierarchical_totals_on_v1() {
        let v1 = "cache 10\ninactive_anon 1\nactive_anon 2\ninactive_file 3\nactive_file 4\nunevictable 5\n\
                  total_inactive_anon 10\ntotal_active_anon 20\ntotal_inactive_file 30\ntotal_active_file 40\ntotal_unevictable 50\n";
        let s = MemoryStat::parse(v1, CgroupVersion::V1).unwrap();
        assert_eq!(s.usage_without_page_cache(), 80);
        assert_eq!(s.inactive_file, 30);
        assert_eq!(s.working_set(100), 70);
        assert_eq!(s.working_set(10), 0);
        let v2 =
            "anon 3\nfile 7\ninactive_anon 1\nactive_anon 2\ninactive_file 3\nactive_file 4\nunevictable 0\n";
        assert_eq!(
            MemoryStat::parse(v2, CgroupVersion::V2)
                .unwrap()
                .usage_without_page_cache(),
            3
        );
        assert!(MemoryStat::parse("anon 3\n", CgroupVersion::V2).is_err());
        assert!(parse_flat_keyed("garbage", "x").is_err());
        assert!(parse_flat_keyed("", "x").unwrap().is_empty());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let text = String::from_utf8_lossy(&bytes);
            for v in [CgroupVersion::V1, CgroupVersion::V2] {
                let _ = CpuThrottling::parse(&text, v);
                let _ = MemoryStat::parse(&text, v);
            }
        }

        #[test]
        fn scanning_agrees_with_the_map(lines in proptest::collection::vec(
            ("(total_)?(inactive_anon|active_file|x)", "[0-9]{1,4}|-1|z", "( extra)?"), 0..12)
        ) {
            let text: String = lines.iter().map(|(k, v, e)| format!("{k} {v}{e}\n")).collect();
            let keys = ["inactive_anon", "total_inactive_anon", "active_file", "x"];
            let map = parse_flat_keyed(&text, "t").unwrap_or_default();
            let scanned = scan_flat_keyed(&text, &keys);
            for (key, found) in keys.iter().zip(scanned) {
                proptest::prop_assert_eq!(map.get(*key).copied(), found);
            }
        }
    }
}
