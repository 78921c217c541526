//! The one table of cgroup files koordlet reads or writes.
//!
//! Each [`CgroupResource`] names a knob in v1 terms (the name strategies and audit logs use,
//! like upstream) and says where it lives on v1 (controller + file) and v2 (file), which values
//! are legal, and how a value converts between the two versions. Values are always expressed
//! in v1 units ([`CgroupValue`]): `cpu.shares` 2..=262144, quota in µs with -1 for "no limit",
//! memory in bytes with -1 for "no limit". [`encode`] turns such a value into the exact text
//! for the file of a given version, refusing anything outside the domain before the kernel
//! sees it; [`decode`] is its inverse for reading.
//!
//! Conversions (the kernel's and runc's formulas):
//! - `cpu.shares` s <-> `cpu.weight` w: `w = 1 + (s - 2) * 9999 / 262142`,
//!   `s = 2 + (w - 1) * 262142 / 9999` (integer division; 2 <-> 1, 262144 <-> 10000).
//! - `cpu.cfs_quota_us` / `cpu.cfs_period_us` <-> `cpu.max` `"<quota|max> <period>"`: a quota
//!   write keeps the current period and a period write keeps the current quota.
//! - `cpu.cfs_burst_us` <-> `cpu.max.burst`; `memory.limit_in_bytes` <-> `memory.max` with
//!   -1 <-> `max` (v1 reads of "unlimited", 9223372036854771712 and up, decode to -1).

use std::fmt;

use super::{CpuSet, ParseError, Subsystem};

/// The cgroup version a file is encoded for (hybrid hosts use [`CgroupVersion::V1`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CgroupVersion {
    /// Per-controller hierarchies.
    V1,
    /// The unified hierarchy.
    V2,
}

/// A value in v1 units.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CgroupValue {
    /// An integer knob; -1 means "no limit" where the domain allows it.
    Int(i64),
    /// A CPU list.
    Cpus(CpuSet),
}

impl fmt::Display for CgroupValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CgroupValue::Int(v) => write!(f, "{v}"),
            CgroupValue::Cpus(c) => write!(f, "{c}"),
        }
    }
}

/// The legal values of a resource, checked before any write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// Integers in `min..=max`, plus -1 ("no limit") when `unlimited`.
    Int {
        /// Smallest legal value.
        min: i64,
        /// Largest legal value.
        max: i64,
        /// Whether -1 (v2 `max`) is legal.
        unlimited: bool,
    },
    /// A CPU list.
    Cpus,
    /// A statistics file (key/value lines or pressure lines): read with the typed readers in
    /// [`super::cgroup_stats`] and [`super::psi`], never written.
    Stat,
}

/// How a value converts between v1 and v2 text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    /// Same text on both versions (-1 stays -1).
    Same,
    /// -1 is written as `max` on v2.
    MaxWhenUnlimited,
    /// `cpu.shares` <-> `cpu.weight`.
    SharesWeight,
    /// First field of `cpu.max`.
    CpuMaxQuota,
    /// Second field of `cpu.max`.
    CpuMaxPeriod,
    /// v1 `cpuacct.usage` in ns, v2 `cpu.stat` `usage_usec`.
    CpuUsage,
    /// Structured file, no scalar codec.
    Structured,
}

/// Largest CFS quota / burst the kernel accepts (`MAX_BW`, 2^44 - 1 µs).
pub const MAX_CFS_QUOTA_US: i64 = (1 << 44) - 1;
/// The CFS period the kubelet and upstream use (100 ms).
pub const DEFAULT_CFS_PERIOD_US: i64 = 100_000;
/// v1 memory limits at or above this read as "unlimited" (PAGE_COUNTER_MAX rounded to pages).
const V1_MEMORY_UNLIMITED_FLOOR: i64 = 0x7FFF_FFFF_FFF0_0000;

/// Every cgroup file koordlet knows, by its v1 name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CgroupResource {
    /// `cpu.shares` / `cpu.weight`.
    CpuShares,
    /// `cpu.cfs_quota_us` / `cpu.max` (quota field).
    CpuCfsQuota,
    /// `cpu.cfs_period_us` / `cpu.max` (period field).
    CpuCfsPeriod,
    /// `cpu.cfs_burst_us` / `cpu.max.burst`.
    CpuCfsBurst,
    /// `cpu.idle` (SCHED_IDLE group).
    CpuIdle,
    /// `cpuset.cpus`.
    CpusetCpus,
    /// `cpuacct.usage` (ns) / `cpu.stat` `usage_usec` (read-only, always in ns).
    CpuUsage,
    /// `cpu.stat` (throttling counters; read-only).
    CpuStat,
    /// `memory.limit_in_bytes` / `memory.max`.
    MemoryLimit,
    /// `memory.usage_in_bytes` / `memory.current` (read-only).
    MemoryUsage,
    /// `memory.stat` (read-only).
    MemoryStat,
    /// `memory.min` (v2, Anolis v1).
    MemoryMin,
    /// `memory.low` (v2, Anolis v1).
    MemoryLow,
    /// `memory.high` (v2, Anolis v1).
    MemoryHigh,
    /// `cpu.pressure` (v2; v1 under cpuacct on Anolis; the unified mount on hybrid hosts).
    CpuPressure,
    /// `memory.pressure`.
    MemoryPressure,
    /// `io.pressure`.
    IoPressure,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct ResourceSpec {
    /// The resource this row describes.
    pub resource: CgroupResource,
    /// Canonical (v1) name, used in logs and plans.
    pub name: &'static str,
    /// v1 controller and file, if v1 has it.
    pub v1: Option<(Subsystem, &'static str)>,
    /// v2 file, if v2 has it.
    pub v2: Option<&'static str>,
    /// Legal values.
    pub domain: Domain,
    /// Whether the file may be written.
    pub writable: bool,
    /// A pressure file (found in the unified mount on hybrid hosts).
    pub pressure: bool,
    codec: Codec,
}

const fn int(min: i64, max: i64, unlimited: bool) -> Domain {
    Domain::Int { min, max, unlimited }
}

const fn row(
    resource: CgroupResource,
    name: &'static str,
    v1: Option<(Subsystem, &'static str)>,
    v2: Option<&'static str>,
    domain: Domain,
    writable: bool,
    codec: Codec,
) -> ResourceSpec {
    ResourceSpec {
        resource,
        name,
        v1,
        v2,
        domain,
        writable,
        pressure: false,
        codec,
    }
}

const fn pressure_row(resource: CgroupResource, name: &'static str) -> ResourceSpec {
    ResourceSpec {
        resource,
        name,
        v1: Some((Subsystem::CpuAcct, name)),
        v2: Some(name),
        domain: Domain::Stat,
        writable: false,
        pressure: true,
        codec: Codec::Structured,
    }
}

use CgroupResource as R;
use Subsystem as S;

/// The table, in the order of [`CgroupResource`]'s variants.
static TABLE: [ResourceSpec; 17] = [
    row(
        R::CpuShares,
        "cpu.shares",
        Some((S::Cpu, "cpu.shares")),
        Some("cpu.weight"),
        int(2, 262_144, false),
        true,
        Codec::SharesWeight,
    ),
    row(
        R::CpuCfsQuota,
        "cpu.cfs_quota_us",
        Some((S::Cpu, "cpu.cfs_quota_us")),
        Some("cpu.max"),
        int(1000, MAX_CFS_QUOTA_US, true),
        true,
        Codec::CpuMaxQuota,
    ),
    row(
        R::CpuCfsPeriod,
        "cpu.cfs_period_us",
        Some((S::Cpu, "cpu.cfs_period_us")),
        Some("cpu.max"),
        int(1000, 1_000_000, false),
        true,
        Codec::CpuMaxPeriod,
    ),
    row(
        R::CpuCfsBurst,
        "cpu.cfs_burst_us",
        Some((S::Cpu, "cpu.cfs_burst_us")),
        Some("cpu.max.burst"),
        int(0, MAX_CFS_QUOTA_US, false),
        true,
        Codec::Same,
    ),
    row(
        R::CpuIdle,
        "cpu.idle",
        Some((S::Cpu, "cpu.idle")),
        Some("cpu.idle"),
        int(0, 1, false),
        true,
        Codec::Same,
    ),
    row(
        R::CpusetCpus,
        "cpuset.cpus",
        Some((S::CpuSet, "cpuset.cpus")),
        Some("cpuset.cpus"),
        Domain::Cpus,
        true,
        Codec::Same,
    ),
    row(
        R::CpuUsage,
        "cpuacct.usage",
        Some((S::CpuAcct, "cpuacct.usage")),
        Some("cpu.stat"),
        int(0, i64::MAX, false),
        false,
        Codec::CpuUsage,
    ),
    row(
        R::CpuStat,
        "cpu.stat",
        Some((S::Cpu, "cpu.stat")),
        Some("cpu.stat"),
        Domain::Stat,
        false,
        Codec::Structured,
    ),
    row(
        R::MemoryLimit,
        "memory.limit_in_bytes",
        Some((S::Memory, "memory.limit_in_bytes")),
        Some("memory.max"),
        int(0, i64::MAX, true),
        true,
        Codec::MaxWhenUnlimited,
    ),
    row(
        R::MemoryUsage,
        "memory.usage_in_bytes",
        Some((S::Memory, "memory.usage_in_bytes")),
        Some("memory.current"),
        int(0, i64::MAX, false),
        false,
        Codec::Same,
    ),
    row(
        R::MemoryStat,
        "memory.stat",
        Some((S::Memory, "memory.stat")),
        Some("memory.stat"),
        Domain::Stat,
        false,
        Codec::Structured,
    ),
    row(
        R::MemoryMin,
        "memory.min",
        Some((S::Memory, "memory.min")),
        Some("memory.min"),
        int(0, i64::MAX, true),
        true,
        Codec::MaxWhenUnlimited,
    ),
    row(
        R::MemoryLow,
        "memory.low",
        Some((S::Memory, "memory.low")),
        Some("memory.low"),
        int(0, i64::MAX, true),
        true,
        Codec::MaxWhenUnlimited,
    ),
    row(
        R::MemoryHigh,
        "memory.high",
        Some((S::Memory, "memory.high")),
        Some("memory.high"),
        int(0, i64::MAX, true),
        true,
        Codec::MaxWhenUnlimited,
    ),
    pressure_row(R::CpuPressure, "cpu.pressure"),
    pressure_row(R::MemoryPressure, "memory.pressure"),
    pressure_row(R::IoPressure, "io.pressure"),
];

impl CgroupResource {
    /// Every resource, in table order.
    pub const ALL: [CgroupResource; 17] = [
        R::CpuShares,
        R::CpuCfsQuota,
        R::CpuCfsPeriod,
        R::CpuCfsBurst,
        R::CpuIdle,
        R::CpusetCpus,
        R::CpuUsage,
        R::CpuStat,
        R::MemoryLimit,
        R::MemoryUsage,
        R::MemoryStat,
        R::MemoryMin,
        R::MemoryLow,
        R::MemoryHigh,
        R::CpuPressure,
        R::MemoryPressure,
        R::IoPressure,
    ];

    /// This resource's row of the table.
    pub fn spec(self) -> &'static ResourceSpec {
        &TABLE[self as usize]
    }

    /// Canonical (v1) name.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// Looks a resource up by its v1 name (as plans and the `plan` command print it) or its v2
    /// file name when that is unique (`cpu.weight`, `memory.max`, ...).
    pub fn from_name(name: &str) -> Option<Self> {
        TABLE
            .iter()
            .find(|r| r.name == name)
            .or_else(|| {
                let mut v2 = TABLE.iter().filter(|r| r.v2 == Some(name));
                match (v2.next(), v2.next()) {
                    (Some(one), None) => Some(one),
                    _ => None,
                }
            })
            .map(|r| r.resource)
    }

    /// The file name on `version`, `None` if that version has no such file.
    pub fn file_name(self, version: CgroupVersion) -> Option<&'static str> {
        match version {
            CgroupVersion::V1 => self.spec().v1.map(|(_, f)| f),
            CgroupVersion::V2 => self.spec().v2,
        }
    }
}

impl fmt::Display for CgroupResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a value was refused by [`validate`] or [`encode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// Outside the legal range.
    #[error("{value} is outside {min}..={max}{}", if *unlimited { " (or -1 for no limit)" } else { "" })]
    OutOfRange {
        /// The value.
        value: i64,
        /// Smallest legal value.
        min: i64,
        /// Largest legal value.
        max: i64,
        /// Whether -1 was legal.
        unlimited: bool,
    },
    /// An integer given for a CPU list or the other way round.
    #[error("wrong kind of value for this resource")]
    WrongKind,
    /// The resource cannot be written.
    #[error("read-only resource")]
    ReadOnly,
}

/// Checks `value` against the resource's domain.
pub fn validate(resource: CgroupResource, value: &CgroupValue) -> Result<(), DomainError> {
    let spec = resource.spec();
    if !spec.writable {
        return Err(DomainError::ReadOnly);
    }
    match (spec.domain, value) {
        (Domain::Int { min, max, unlimited }, CgroupValue::Int(v)) => {
            if (min..=max).contains(v) || (unlimited && *v == -1) {
                Ok(())
            } else {
                Err(DomainError::OutOfRange {
                    value: *v,
                    min,
                    max,
                    unlimited,
                })
            }
        }
        (Domain::Cpus, CgroupValue::Cpus(_)) => Ok(()),
        (Domain::Stat, _) => Err(DomainError::ReadOnly),
        _ => Err(DomainError::WrongKind),
    }
}

/// `cpu.shares` -> `cpu.weight`, clamped into 2..=262144 first.
pub fn shares_to_weight(shares: i64) -> i64 {
    let shares = shares.clamp(2, 262_144);
    1 + (shares - 2) * 9999 / 262_142
}

/// `cpu.weight` -> `cpu.shares`, clamped into 1..=10000 first.
pub fn weight_to_shares(weight: i64) -> i64 {
    let weight = weight.clamp(1, 10_000);
    2 + (weight - 1) * 262_142 / 9999
}

/// The text to write for `value`. `current` is the file's present content, needed on v2 where
/// quota and period share `cpu.max` (the other field is kept; absent: `max` / 100000).
pub fn encode(
    resource: CgroupResource,
    version: CgroupVersion,
    value: &CgroupValue,
    current: Option<&str>,
) -> Result<String, DomainError> {
    validate(resource, value)?;
    let codec = resource.spec().codec;
    let int = match value {
        CgroupValue::Cpus(cpus) => return Ok(cpus.to_string()),
        CgroupValue::Int(v) => *v,
    };
    if version == CgroupVersion::V1 {
        return Ok(int.to_string());
    }
    let max_or = |v: i64| if v == -1 { "max".to_owned() } else { v.to_string() };
    Ok(match codec {
        Codec::SharesWeight => shares_to_weight(int).to_string(),
        Codec::MaxWhenUnlimited => max_or(int),
        Codec::CpuMaxQuota => {
            let period = current
                .and_then(|c| c.split_whitespace().nth(1))
                .unwrap_or("100000");
            format!("{} {period}", max_or(int))
        }
        Codec::CpuMaxPeriod => {
            let quota = current.and_then(|c| c.split_whitespace().next()).unwrap_or("max");
            format!("{quota} {int}")
        }
        Codec::Same | Codec::CpuUsage | Codec::Structured => int.to_string(),
    })
}

/// Reads a file's text as a v1-unit value.
pub fn decode(
    resource: CgroupResource,
    version: CgroupVersion,
    text: &str,
) -> Result<CgroupValue, ParseError> {
    let spec = resource.spec();
    if spec.domain == Domain::Cpus {
        return CpuSet::parse(text).map(CgroupValue::Cpus);
    }
    let trimmed = text.trim();
    let v = match (spec.codec, version) {
        (Codec::Structured, _) => {
            return Err(ParseError::new(
                spec.name,
                "structured file: use the stat readers",
            ));
        }
        (Codec::CpuUsage, CgroupVersion::V2) => {
            let usec = super::cgroup_stats::parse_flat_keyed(text, "cpu.stat")?
                .get("usage_usec")
                .copied()
                .ok_or_else(|| ParseError::new("cpu.stat", "no usage_usec"))?;
            i64::try_from(usec.saturating_mul(1000)).unwrap_or(i64::MAX)
        }
        (Codec::CpuMaxQuota, CgroupVersion::V2) => {
            parse_int_or_max(trimmed.split_whitespace().next().unwrap_or(""), spec.name)?
        }
        (Codec::CpuMaxPeriod, CgroupVersion::V2) => {
            parse_int_or_max(trimmed.split_whitespace().nth(1).unwrap_or(""), spec.name)?
        }
        (Codec::SharesWeight, CgroupVersion::V2) => weight_to_shares(parse_int_or_max(trimmed, spec.name)?),
        (Codec::MaxWhenUnlimited, CgroupVersion::V1) => {
            let v = parse_int_or_max(trimmed, spec.name)?;
            if v >= V1_MEMORY_UNLIMITED_FLOOR { -1 } else { v }
        }
        _ => parse_int_or_max(trimmed, spec.name)?,
    };
    Ok(CgroupValue::Int(v))
}

/// Parses a decimal integer or `max` (-1).
fn parse_int_or_max(text: &str, what: &'static str) -> Result<i64, ParseError> {
    if text == "max" {
        return Ok(-1);
    }
    text.parse::<i64>().map_err(|e| {
        ParseError::new(
            what,
            format!("{:?}: {e}", text.chars().take(40).collect::<String>()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use CgroupVersion::{V1, V2};

    #[test]
    fn table_is_in_variant_order() {
        for r in CgroupResource::ALL {
            assert_eq!(r.spec().resource, r);
            assert_eq!(CgroupResource::from_name(r.name()), Some(r));
        }
        assert_eq!(CgroupResource::from_name("cpu.weight"), Some(R::CpuShares));
        assert_eq!(
            CgroupResource::from_name("cpu.max"),
            None,
            "ambiguous: quota and period"
        );
    }

    #[test]
    fn shares_weight_boundaries() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(weight_to_shares(1), 2);
        assert_eq!(weight_to_shares(10_000), 262_144);
        assert_eq!(encode(R::CpuShares, V2, &CgroupValue::Int(2), None).unwrap(), "1");
        assert_eq!(
            encode(R::CpuShares, V2, &CgroupValue::Int(262_144), None).unwrap(),
            "10000"
        );
        assert_eq!(
            decode(R::CpuShares, V2, "10000\n").unwrap(),
            CgroupValue::Int(262_144)
        );
        for bad in [1, 262_145, -1] {
            assert!(
                encode(R::CpuShares, V1, &CgroupValue::Int(bad), None).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn quota_period_and_cpu_max() {
        let q = |v| CgroupValue::Int(v);
        assert_eq!(encode(R::CpuCfsQuota, V1, &q(-1), None).unwrap(), "-1");
        assert_eq!(
            encode(R::CpuCfsQuota, V2, &q(-1), Some("50000 100000\n")).unwrap(),
            "max 100000"
        );
        assert_eq!(
            encode(R::CpuCfsQuota, V2, &q(50_000), Some("max 200000\n")).unwrap(),
            "50000 200000"
        );
        assert_eq!(
            encode(R::CpuCfsPeriod, V2, &q(200_000), Some("max 100000")).unwrap(),
            "max 200000"
        );
        assert_eq!(encode(R::CpuCfsQuota, V2, &q(1000), None).unwrap(), "1000 100000");
        assert!(encode(R::CpuCfsQuota, V1, &q(999), None).is_err());
        assert!(encode(R::CpuCfsQuota, V1, &q(MAX_CFS_QUOTA_US + 1), None).is_err());
        assert!(encode(R::CpuCfsPeriod, V1, &q(-1), None).is_err());
        assert_eq!(decode(R::CpuCfsQuota, V2, "max 100000\n").unwrap(), q(-1));
        assert_eq!(decode(R::CpuCfsPeriod, V2, "max 100000\n").unwrap(), q(100_000));
        assert_eq!(decode(R::CpuCfsQuota, V1, "-1\n").unwrap(), q(-1));
        assert_eq!(encode(R::CpuCfsBurst, V2, &q(0), None).unwrap(), "0");
        assert!(encode(R::CpuCfsBurst, V2, &q(-1), None).is_err());
    }

    #[test]
    fn memory_limit_unlimited_both_ways() {
        let m = |v| CgroupValue::Int(v);
        assert_eq!(encode(R::MemoryLimit, V2, &m(-1), None).unwrap(), "max");
        assert_eq!(encode(R::MemoryLimit, V1, &m(-1), None).unwrap(), "-1");
        assert_eq!(
            decode(R::MemoryLimit, V1, "9223372036854771712\n").unwrap(),
            m(-1)
        );
        assert_eq!(decode(R::MemoryLimit, V2, "max\n").unwrap(), m(-1));
        assert_eq!(decode(R::MemoryLimit, V2, "1048576\n").unwrap(), m(1_048_576));
        assert!(encode(R::MemoryLimit, V1, &m(-2), None).is_err());
        assert_eq!(
            encode(R::MemoryUsage, V1, &m(1), None),
            Err(DomainError::ReadOnly)
        );
        assert_eq!(
            encode(R::CpusetCpus, V1, &m(1), None),
            Err(DomainError::WrongKind)
        );
    }

    #[test]
    fn cpu_usage_from_either_version() {
        assert_eq!(
            decode(R::CpuUsage, V1, "123456789\n").unwrap(),
            CgroupValue::Int(123_456_789)
        );
        let stat = "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n";
        assert_eq!(
            decode(R::CpuUsage, V2, stat).unwrap(),
            CgroupValue::Int(1_500_000)
        );
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..128)) {
            let text = String::from_utf8_lossy(&bytes);
            for r in CgroupResource::ALL {
                let _ = decode(r, V1, &text);
                let _ = decode(r, V2, &text);
            }
        }

        #[test]
        fn weight_conversion_is_monotonic(shares in 2i64..262_144, w in 1i64..10_000) {
            proptest::prop_assert!((1..=10_000).contains(&shares_to_weight(shares)));
            proptest::prop_assert!(shares_to_weight(shares) <= shares_to_weight(shares + 1));
            // Strictly increasing, so two weights compare equal exactly when their shares do.
            proptest::prop_assert!(weight_to_shares(w) < weight_to_shares(w + 1));
        }
    }
}
