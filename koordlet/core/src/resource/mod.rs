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

mod codec;

pub use codec::{
    DomainError, decode, encode, milli_cpu_to_quota, milli_cpu_to_shares, scan_flat_keyed, shares_to_weight,
    validate, weight_to_shares,
};

use crate::cpuset::CpuSet;

/// A v1 controller koordlet touches (plus the hybrid unified mount).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subsystem {
    /// `cpu`: shares, CFS quota/period/burst, idle, throttling stats.
    Cpu,
    /// `cpuacct`: usage counters (and PSI on Anolis kernels).
    CpuAcct,
    /// `cpuset`: cpus.
    CpuSet,
    /// `memory`: limits, usage, stat.
    Memory,
    /// `blkio`.
    Blkio,
    /// `pids`.
    Pids,
    /// The cgroup2 mount of a hybrid host (PSI files only).
    Unified,
}

impl Subsystem {
    /// The controller's name in the mount options and the conventional directory name.
    pub fn name(self) -> &'static str {
        match self {
            Subsystem::Cpu => "cpu",
            Subsystem::CpuAcct => "cpuacct",
            Subsystem::CpuSet => "cpuset",
            Subsystem::Memory => "memory",
            Subsystem::Blkio => "blkio",
            Subsystem::Pids => "pids",
            Subsystem::Unified => "unified",
        }
    }

    /// Every v1 controller koordlet mounts or probes.
    pub const CONTROLLERS: [Subsystem; 6] = [
        Subsystem::Cpu,
        Subsystem::CpuAcct,
        Subsystem::CpuSet,
        Subsystem::Memory,
        Subsystem::Blkio,
        Subsystem::Pids,
    ];
}

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

impl CgroupValue {
    /// The integer, for integer files.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            CgroupValue::Int(v) => Some(*v),
            CgroupValue::Cpus(_) => None,
        }
    }

    /// The CPU list, for `cpuset.cpus`.
    pub fn as_cpus(&self) -> Option<&CpuSet> {
        match self {
            CgroupValue::Int(_) => None,
            CgroupValue::Cpus(c) => Some(c),
        }
    }
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
    /// the agent's statistics readers, never written.
    Stat,
}

/// How a value converts between v1 and v2 text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Codec {
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
pub(crate) const V1_MEMORY_UNLIMITED_FLOOR: i64 = 0x7FFF_FFFF_FFF0_0000;

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
    /// `cpu.idle` (SCHED_IDLE group; mainline 5.15+, v1 and v2).
    CpuIdle,
    /// `cpu.bvt_warp_ns` (Anolis group identity, -1..=2; same name on v1 and v2).
    CpuBvtWarpNs,
    /// `cpuset.cpus`.
    CpusetCpus,
    /// `cpuset.effective_cpus` / `cpuset.cpus.effective`: the CPUs the cgroup can really use
    /// (on v2 an empty `cpuset.cpus` means "whatever the parent has"). Read-only.
    CpusetCpusEffective,
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
    /// `memory.numa_stat`: the cgroup's memory per NUMA node (read-only).
    MemoryNumaStat,
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

pub(crate) use CgroupResource as R;
use Subsystem as S;

/// The table, in the order of [`CgroupResource`]'s variants.
static TABLE: [ResourceSpec; 20] = [
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
        R::CpuBvtWarpNs,
        "cpu.bvt_warp_ns",
        Some((S::Cpu, "cpu.bvt_warp_ns")),
        Some("cpu.bvt_warp_ns"),
        int(-1, 2, false),
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
        R::CpusetCpusEffective,
        "cpuset.effective_cpus",
        Some((S::CpuSet, "cpuset.effective_cpus")),
        Some("cpuset.cpus.effective"),
        Domain::Cpus,
        false,
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
    row(
        R::MemoryNumaStat,
        "memory.numa_stat",
        Some((S::Memory, "memory.numa_stat")),
        Some("memory.numa_stat"),
        Domain::Stat,
        false,
        Codec::Structured,
    ),
];

impl CgroupResource {
    /// Every resource, in table order.
    pub const ALL: [CgroupResource; 20] = [
        R::CpuShares,
        R::CpuCfsQuota,
        R::CpuCfsPeriod,
        R::CpuCfsBurst,
        R::CpuIdle,
        R::CpuBvtWarpNs,
        R::CpusetCpus,
        R::CpusetCpusEffective,
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
        R::MemoryNumaStat,
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
