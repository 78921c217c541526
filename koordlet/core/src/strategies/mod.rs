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
//! * [`fast_suppress`]: the 50 ms fast path of suppress on a few node-level counters;
//!   [`fast_step`] turns its decision into the writes the loop applies.
//! * [`resctrl`]: cache ways and memory bandwidth per QoS class (resctrl groups).
//! * [`cpu_qos`]: the CPU identity of each class (`cpu.idle`, or Anolis group identity) and
//!   the pods that get a core-scheduling cookie.
//! * [`cpuset`]: CPU lists and the topology-aware CPU selection used by suppress.
//! * [`cpuset_policy`]: `exclusive` / `share` / `none` CPU sets asked for by pod annotation.

pub mod be_limits;
pub mod cpu_burst;
pub mod cpu_evict;
pub mod cpu_qos;
pub mod cpu_suppress;
pub mod cpuset;
pub mod cpuset_policy;
pub mod engine;
pub mod eviction;
pub mod memory_evict;
#[cfg(test)]
mod proptests;
pub mod resctrl;
pub mod settle;
pub mod share_pool;
// After the others: the fast path of cpu_suppress.
pub mod fast_step;
pub mod fast_suppress;

pub use crate::write::CgroupWrite;

/// The CFS period the kubelet uses (100 ms): every quota here is relative to it.
pub const CFS_PERIOD_US: i64 = 100_000;
/// The v1 file that holds the CFS quota (`cpu.max` first field on v2).
pub const FILE_CFS_QUOTA: &str = "cpu.cfs_quota_us";
/// The v1 file that holds the CFS burst (`cpu.max.burst` on v2).
pub const FILE_CFS_BURST: &str = "cpu.cfs_burst_us";
/// The cpuset file that confines a cgroup's CPUs.
pub const FILE_CPUSET_CPUS: &str = "cpuset.cpus";

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
    fn quota_from_milli() {
        assert_eq!(milli_cpu_to_quota(0), -1);
        assert_eq!(milli_cpu_to_quota(-5), -1);
        assert_eq!(milli_cpu_to_quota(5), 1000);
        assert_eq!(milli_cpu_to_quota(2000), 200_000);
    }
}
