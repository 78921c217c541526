//! QoS strategies: the pure decision cores that protect LS pods from BE pods.
//!
//! Each strategy is `fn(input) -> plan`: the input is a plain snapshot (capacities, usages,
//! current cgroup values, the NodeSLO strategy, the time as an argument) and the plan is data
//! (cgroup writes in the order they must be applied, pods to evict with their reasons, and the
//! key numbers printed by `koordlet plan`). Nothing here reads a file or a clock, so every rule
//! is table-tested and the live loop, the fast path and the offline `plan` command share it.
//!
//! * [`cpu_suppress`]: shrink the BE CPU budget (CFS quota or cpuset) as LS usage grows.
//! * [`cpu_burst`]: kernel CFS burst and CFS quota scaling for LS pods.
//! * [`cpu_evict`]: evict BE pods whose CPU satisfaction stays too low.
//! * [`memory_evict`]: evict BE pods when node memory usage crosses the threshold.
//! * [`fast_suppress`]: the 50 ms fast path of suppress on a few node-level counters.
//! * [`cpuset`]: CPU lists and the topology-aware CPU selection used by suppress.

pub mod be_limits;
pub mod cpu_burst;
pub mod cpu_evict;
pub mod cpu_suppress;
pub mod cpuset;
pub mod engine;
pub mod eviction;
pub mod memory_evict;
#[cfg(test)]
mod proptests;
pub mod share_pool;
// After the others: the fast path of cpu_suppress.
pub mod fast_suppress;

use serde::Serialize;
use thiserror::Error;

use crate::{CgroupDir, CgroupResource, CgroupValue, CpuSet, NameError, ParseError};

/// The CFS period the kubelet uses (100 ms): every quota here is relative to it.
pub const CFS_PERIOD_US: i64 = 100_000;
/// The v1 file that holds the CFS quota (`cpu.max` first field on v2).
pub const FILE_CFS_QUOTA: &str = "cpu.cfs_quota_us";
/// The v1 file that holds the CFS burst (`cpu.max.burst` on v2).
pub const FILE_CFS_BURST: &str = "cpu.cfs_burst_us";
/// The cpuset file that confines a cgroup's CPUs.
pub const FILE_CPUSET_CPUS: &str = "cpuset.cpus";

/// One cgroup file write a strategy wants, in the order the plan lists it.
///
/// The order of a plan's writes matters (the kernel rejects a burst above the quota, a child
/// cpuset wider than its parent, a v1 child quota above its parent's): the executor must apply
/// them in sequence. `file` is the v1 name; the executor maps it to the v2 file and converts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupWrite {
    /// Directory relative to the controller root, e.g. `kubepods/besteffort`.
    pub cgroup: String,
    /// v1 file name, e.g. `cpu.cfs_quota_us`.
    pub file: &'static str,
    /// The value in v1 units (`-1` means unlimited).
    pub value: String,
    /// The strategy that decided it, for the audit log.
    pub strategy: &'static str,
}

impl CgroupWrite {
    /// Builds a write; a shorthand used by every strategy.
    pub fn new(cgroup: &str, file: &'static str, value: impl ToString, strategy: &'static str) -> Self {
        CgroupWrite {
            cgroup: cgroup.to_owned(),
            file,
            value: value.to_string(),
            strategy,
        }
    }
}

/// A plan write the executor cannot take (never expected from these strategies; reported, not
/// panicked on, because cgroup dirs come from outside).
#[derive(Debug, Error)]
pub enum PlanWriteError {
    /// The file is not in the system layer's resource table.
    #[error("unknown cgroup file {0:?}")]
    UnknownFile(String),
    /// The value does not parse for the file.
    #[error("bad value for {file}: {source}")]
    BadValue {
        /// The file.
        file: &'static str,
        /// Why.
        source: ParseError,
    },
    /// The directory is not a valid relative cgroup path.
    #[error(transparent)]
    BadDir(#[from] NameError),
}

impl CgroupWrite {
    /// The executor's form of this write: the plan's JSON form (`cgroup`/`file`/`value` strings,
    /// as `koordlet plan` prints it) converted to typed resource and value.
    pub fn to_executor(&self) -> Result<crate::write::CgroupWrite, PlanWriteError> {
        let resource = CgroupResource::from_name(self.file)
            .ok_or_else(|| PlanWriteError::UnknownFile(self.file.into()))?;
        let value = if resource == CgroupResource::CpusetCpus {
            CgroupValue::Cpus(
                CpuSet::parse(&self.value).map_err(|source| PlanWriteError::BadValue {
                    file: self.file,
                    source,
                })?,
            )
        } else {
            CgroupValue::Int(self.value.trim().parse().map_err(|e: std::num::ParseIntError| {
                PlanWriteError::BadValue {
                    file: self.file,
                    source: ParseError::new("integer", e.to_string()),
                }
            })?)
        };
        Ok(crate::write::CgroupWrite {
            cgroup: CgroupDir::new(&self.cgroup)?,
            resource,
            value,
            strategy: self.strategy.to_owned(),
        })
    }
}

/// Koordinator QoS class of a pod or host application, already resolved (label
/// `koordinator.sh/qosClass`, else from the kube QoS class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum QosClass {
    /// Latency-sensitive exclusive: owns its CPUs.
    #[serde(rename = "LSE")]
    Lse,
    /// Latency-sensitive reserved: bound CPUs, shareable with BE when idle.
    #[serde(rename = "LSR")]
    Lsr,
    /// Latency-sensitive on the share pool.
    #[serde(rename = "LS")]
    Ls,
    /// Best effort: uses what LS leaves, suppressed and evicted first.
    #[serde(rename = "BE")]
    Be,
    /// System daemons.
    #[serde(rename = "SYSTEM")]
    System,
    /// No class could be resolved; treated like LS by every strategy here.
    #[serde(rename = "")]
    None,
}

impl QosClass {
    /// Whether the class is BE: the only class suppress throttles and eviction may pick.
    pub fn is_be(self) -> bool {
        self == QosClass::Be
    }
}

/// `MilliCPUToQuota`: the CFS quota (µs per 100 ms period) that grants `milli` milli-cores;
/// `-1` (unlimited) when `milli <= 0`, at least the kernel minimum of 1000 µs otherwise.
pub fn milli_cpu_to_quota(milli: i64) -> i64 {
    if milli <= 0 {
        return -1;
    }
    milli.saturating_mul(CFS_PERIOD_US / 1000).max(1000)
}

/// Clamps a percent from the NodeSLO to 0..=100 so hostile values cannot overflow the math.
pub(crate) fn clamp_percent(p: i64) -> i64 {
    p.clamp(0, 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_writes_convert_to_executor_writes() {
        let w = CgroupWrite::new("kubepods/besteffort", FILE_CFS_QUOTA, -1, "cpu_suppress");
        let e = w.to_executor().unwrap();
        assert_eq!(
            (e.resource, e.value),
            (CgroupResource::CpuCfsQuota, CgroupValue::Int(-1))
        );
        assert_eq!(e.cgroup, CgroupDir::new("kubepods/besteffort").unwrap());
        let w = CgroupWrite::new("kubepods/besteffort", FILE_CPUSET_CPUS, "0-2,8", "cpu_suppress");
        assert_eq!(
            w.to_executor().unwrap().value,
            CgroupValue::Cpus(CpuSet::parse("0-2,8").unwrap())
        );
        let w = CgroupWrite::new("pod", FILE_CFS_BURST, 5000, "cpu_burst");
        assert_eq!(w.to_executor().unwrap().resource, CgroupResource::CpuCfsBurst);
        assert!(
            CgroupWrite::new("../x", FILE_CFS_QUOTA, 1, "t")
                .to_executor()
                .is_err()
        );
        assert!(
            CgroupWrite::new("x", FILE_CFS_QUOTA, "abc", "t")
                .to_executor()
                .is_err()
        );
        assert!(CgroupWrite::new("x", "no.such", 1, "t").to_executor().is_err());
    }

    #[test]
    fn quota_from_milli() {
        assert_eq!(milli_cpu_to_quota(0), -1);
        assert_eq!(milli_cpu_to_quota(-5), -1);
        assert_eq!(milli_cpu_to_quota(5), 1000);
        assert_eq!(milli_cpu_to_quota(2000), 200_000);
    }
}
