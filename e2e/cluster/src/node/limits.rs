//! The cgroup limits a kubelet with the cgroupfs driver (and its container runtime) writes, as
//! pure functions from the pod spec to a list of file writes.
//!
//! - Container (runtime, from the kubelet's CRI resources): `cpu.shares` from the cpu request
//!   (the limit when only a limit is given; minimum 2), `cpu.cfs_period_us` 100000,
//!   `cpu.cfs_quota_us` from the cpu limit (-1 without one), `memory.limit_in_bytes` from the
//!   memory limit (left unlimited without one).
//! - Pod (`ResourceConfigForPod`): requests and limits summed over containers (the largest init
//!   container when larger, plus overhead for requests). Guaranteed: shares, quota and memory
//!   limit. Burstable: shares; quota only when every container has a cpu limit, memory limit only
//!   when every container has a memory limit. BestEffort: `cpu.shares` 2 and nothing else.
//! - QoS levels: `kubepods` gets the node allocatable (`cpu.shares`, `memory.limit_in_bytes`),
//!   `kubepods/besteffort` `cpu.shares` 2, `kubepods/burstable` the shares of the summed cpu
//!   requests of its pods (minimum 2), updated as pods come and go.
//!
//! Extended resources (`kubernetes.io/batch-cpu`, `batch-memory`) are ignored, as a kubelet
//! ignores them: koordlet's `be_limits` turns them into cgroup limits.
//!
//! cgroup v2 gets the kubelet's conversions: `cpu.weight` = 1 + (shares - 2) * 9999 / 262142,
//! `cpu.max` = `<quota|max> <period>`, `memory.max`.

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::qos::KubeQos;
use super::quantity::{QuantityError, parse_milli, parse_units};

/// The kubelet's minimum `cpu.shares` (BestEffort, zero requests).
pub const MIN_SHARES: u64 = 2;
/// The kernel's maximum `cpu.shares`.
pub const MAX_SHARES: u64 = 262_144;
/// Shares of one CPU.
pub const SHARES_PER_CPU: u64 = 1024;
/// The CFS period the kubelet uses (µs).
pub const QUOTA_PERIOD_US: u64 = 100_000;
/// The smallest quota the kubelet writes (µs).
pub const MIN_QUOTA_US: i64 = 1_000;

/// The limits of one cgroup directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimits {
    /// `cpu.shares` (always written).
    pub cpu_shares: u64,
    /// `cpu.cfs_quota_us` and `cpu.cfs_period_us`: `Some(-1)` for unlimited, `None` to leave
    /// both files alone.
    pub cfs_quota_us: Option<i64>,
    /// `memory.limit_in_bytes`; `None` leaves it as it is (unlimited on a new cgroup).
    pub memory_limit_bytes: Option<u64>,
}

impl CgroupLimits {
    /// Only `cpu.shares`.
    pub fn shares_only(cpu_shares: u64) -> Self {
        CgroupLimits {
            cpu_shares,
            cfs_quota_us: None,
            memory_limit_bytes: None,
        }
    }
}

/// One file write: v1 controller (ignored for v2), file name, value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitWrite {
    /// `cpu` or `memory` (the v1 controller directory).
    pub controller: &'static str,
    /// File name in the cgroup directory.
    pub file: &'static str,
    /// What to write.
    pub value: String,
}

/// The kubelet's `MilliCPUToShares`.
pub fn milli_cpu_to_shares(milli: i128) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    let shares = milli.saturating_mul(i128::from(SHARES_PER_CPU)) / 1000;
    u64::try_from(shares)
        .unwrap_or(MAX_SHARES)
        .clamp(MIN_SHARES, MAX_SHARES)
}

/// The kubelet's `MilliCPUToQuota` with the 100 ms period; -1 (unlimited) for no limit.
pub fn milli_cpu_to_quota(milli: i128) -> i64 {
    if milli <= 0 {
        return -1;
    }
    let quota = milli.saturating_mul(i128::from(QUOTA_PERIOD_US)) / 1000;
    i64::try_from(quota).unwrap_or(i64::MAX).max(MIN_QUOTA_US)
}

/// The kubelet's `CpuSharesToCpuWeight` (cgroup v2).
pub fn shares_to_weight(shares: u64) -> u64 {
    let shares = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + ((shares - MIN_SHARES) * 9999) / (MAX_SHARES - MIN_SHARES)
}

/// One container's (request, limit) of `resource` in milli-units; a limit without a request
/// counts as the request (API server defaulting). Zero or negative counts as absent.
fn container_quantity(container: &Container, resource: &str) -> Result<(i128, Option<i128>), QuantityError> {
    let resources = container.resources.as_ref();
    let limit = match resources
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get(resource))
    {
        Some(q) => Some(parse_milli(&q.0)?).filter(|v| *v > 0),
        None => None,
    };
    let request = match resources
        .and_then(|r| r.requests.as_ref())
        .and_then(|l| l.get(resource))
    {
        Some(q) => parse_milli(&q.0)?,
        None => limit.unwrap_or(0),
    };
    Ok((request.max(0), limit))
}

fn memory_limit(container: &Container) -> Result<Option<u64>, QuantityError> {
    let resources = container.resources.as_ref();
    match resources
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
    {
        Some(q) => Ok(u64::try_from(parse_units(&q.0)?).ok().filter(|v| *v > 0)),
        None => Ok(None),
    }
}

/// The container's cgroup limits, as the container runtime writes them.
pub fn container_limits(container: &Container) -> Result<CgroupLimits, QuantityError> {
    let (cpu_request, cpu_limit) = container_quantity(container, "cpu")?;
    Ok(CgroupLimits {
        cpu_shares: milli_cpu_to_shares(cpu_request),
        cfs_quota_us: Some(cpu_limit.map_or(-1, milli_cpu_to_quota)),
        memory_limit_bytes: memory_limit(container)?,
    })
}

/// Sum over containers, then the larger of that and each init container (`PodRequests` /
/// `PodLimits`); `None` when some container lacks the limit.
fn pod_total(
    spec: &PodSpec,
    mut per_container: impl FnMut(&Container) -> Result<Option<i128>, QuantityError>,
) -> Result<Option<i128>, QuantityError> {
    let mut sum = 0i128;
    for container in &spec.containers {
        match per_container(container)? {
            Some(value) => sum = sum.saturating_add(value),
            None => return Ok(None),
        }
    }
    for container in spec.init_containers.iter().flatten() {
        match per_container(container)? {
            Some(value) => sum = sum.max(value),
            None => return Ok(None),
        }
    }
    Ok(Some(sum))
}

/// The pod cgroup's limits (`ResourceConfigForPod`).
pub fn pod_limits(spec: &PodSpec, qos: KubeQos) -> Result<CgroupLimits, QuantityError> {
    if qos == KubeQos::BestEffort {
        return Ok(CgroupLimits::shares_only(MIN_SHARES));
    }
    let mut cpu_request = pod_total(spec, |c| Ok(Some(container_quantity(c, "cpu")?.0)))?.unwrap_or(0);
    if let Some(overhead) = spec.overhead.as_ref().and_then(|o| o.get("cpu")) {
        cpu_request = cpu_request.saturating_add(parse_milli(&overhead.0)?.max(0));
    }
    let cpu_limit = pod_total(spec, |c| Ok(container_quantity(c, "cpu")?.1))?;
    let memory = pod_total(spec, |c| Ok(memory_limit(c)?.map(i128::from)))?;
    Ok(CgroupLimits {
        cpu_shares: milli_cpu_to_shares(cpu_request),
        cfs_quota_us: Some(cpu_limit.map_or(-1, milli_cpu_to_quota)),
        memory_limit_bytes: memory.and_then(|m| u64::try_from(m).ok()),
    })
}

/// The summed cpu request of a pod in milli-CPU, which `kubepods/burstable` shares follow.
pub fn pod_cpu_request_milli(spec: &PodSpec) -> Result<i128, QuantityError> {
    Ok(pod_total(spec, |c| Ok(Some(container_quantity(c, "cpu")?.0)))?.unwrap_or(0))
}

/// `kubepods`: the node allocatable (cpu in milli-CPU, memory in bytes).
pub fn node_level_limits(allocatable_cpu_milli: i128, allocatable_memory: Option<u64>) -> CgroupLimits {
    CgroupLimits {
        cpu_shares: milli_cpu_to_shares(allocatable_cpu_milli),
        cfs_quota_us: None,
        memory_limit_bytes: allocatable_memory,
    }
}

/// `kubepods/burstable`: the summed cpu requests of the Burstable pods.
pub fn burstable_level_limits(burstable_requests_milli: i128) -> CgroupLimits {
    CgroupLimits::shares_only(milli_cpu_to_shares(burstable_requests_milli))
}

/// `kubepods/besteffort`.
pub fn besteffort_level_limits() -> CgroupLimits {
    CgroupLimits::shares_only(MIN_SHARES)
}

/// The file writes for `limits`, in an order the kernel accepts (period before quota).
pub fn writes(limits: &CgroupLimits, v2: bool) -> Vec<LimitWrite> {
    let write = |controller, file, value: String| LimitWrite {
        controller,
        file,
        value,
    };
    let mut out = Vec::new();
    if v2 {
        out.push(write(
            "cpu",
            "cpu.weight",
            shares_to_weight(limits.cpu_shares).to_string(),
        ));
        if let Some(quota) = limits.cfs_quota_us {
            let quota = if quota < 0 {
                "max".to_string()
            } else {
                quota.to_string()
            };
            out.push(write("cpu", "cpu.max", format!("{quota} {QUOTA_PERIOD_US}")));
        }
        if let Some(memory) = limits.memory_limit_bytes {
            out.push(write("memory", "memory.max", memory.to_string()));
        }
    } else {
        out.push(write("cpu", "cpu.shares", limits.cpu_shares.to_string()));
        if let Some(quota) = limits.cfs_quota_us {
            out.push(write("cpu", "cpu.cfs_period_us", QUOTA_PERIOD_US.to_string()));
            out.push(write("cpu", "cpu.cfs_quota_us", quota.to_string()));
        }
        if let Some(memory) = limits.memory_limit_bytes {
            out.push(write("memory", "memory.limit_in_bytes", memory.to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> PodSpec {
        serde_json::from_value(value).unwrap()
    }

    fn c(requests: serde_json::Value, limits: serde_json::Value) -> serde_json::Value {
        json!({ "name": "c", "resources": { "requests": requests, "limits": limits } })
    }

    #[test]
    fn conversions_at_their_boundaries() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(500), 512);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
        assert_eq!(milli_cpu_to_quota(0), -1);
        assert_eq!(milli_cpu_to_quota(1), 1000);
        assert_eq!(milli_cpu_to_quota(500), 50_000);
        assert_eq!(milli_cpu_to_quota(2500), 250_000);
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(MAX_SHARES), 10_000);
    }

    #[test]
    fn guaranteed_pod_and_container() {
        let s = spec(json!({ "containers": [
            c(json!({"cpu": "500m", "memory": "128Mi"}), json!({"cpu": "500m", "memory": "128Mi"})),
            c(json!({"cpu": "1", "memory": "64Mi"}), json!({"cpu": "1", "memory": "64Mi"})),
        ]}));
        let pod = pod_limits(&s, KubeQos::Guaranteed).unwrap();
        assert_eq!(
            pod,
            CgroupLimits {
                cpu_shares: 1536,
                cfs_quota_us: Some(150_000),
                memory_limit_bytes: Some(192 << 20)
            }
        );
        let first = container_limits(&s.containers[0]).unwrap();
        assert_eq!(first.cpu_shares, 512);
        assert_eq!(first.cfs_quota_us, Some(50_000));
        assert_eq!(first.memory_limit_bytes, Some(128 << 20));
    }

    #[test]
    fn burstable_pod_limits_only_when_every_container_declares_them() {
        let s = spec(json!({ "containers": [
            c(json!({"cpu": "250m"}), json!({"cpu": "1", "memory": "1Gi"})),
            c(json!({"cpu": "250m"}), json!({})),
        ]}));
        let pod = pod_limits(&s, KubeQos::Burstable).unwrap();
        assert_eq!(pod, CgroupLimits::shares_only(512).with_unlimited_quota());
        let second = container_limits(&s.containers[1]).unwrap();
        assert_eq!(second.cfs_quota_us, Some(-1));
        assert_eq!(second.memory_limit_bytes, None);
        // A limit alone defaults the request.
        let only_limit = spec(json!({ "containers": [c(json!({}), json!({"cpu": "2"}))] }));
        assert_eq!(
            container_limits(&only_limit.containers[0]).unwrap().cpu_shares,
            2048
        );
        assert_eq!(pod_cpu_request_milli(&only_limit).unwrap(), 2000);
    }

    #[test]
    fn init_containers_and_overhead() {
        let s = spec(json!({
            "initContainers": [c(json!({"cpu": "2"}), json!({"cpu": "2", "memory": "1Gi"}))],
            "containers": [c(json!({"cpu": "500m"}), json!({"cpu": "1", "memory": "256Mi"}))],
            "overhead": {"cpu": "100m"},
        }));
        let pod = pod_limits(&s, KubeQos::Burstable).unwrap();
        assert_eq!(pod.cpu_shares, milli_cpu_to_shares(2100));
        assert_eq!(pod.cfs_quota_us, Some(200_000));
        assert_eq!(pod.memory_limit_bytes, Some(1 << 30));
    }

    #[test]
    fn best_effort_and_batch_resources_are_ignored() {
        let s = spec(json!({ "containers": [c(
            json!({"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}),
            json!({"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}),
        )]}));
        assert_eq!(
            pod_limits(&s, KubeQos::BestEffort).unwrap(),
            CgroupLimits::shares_only(2)
        );
        let container = container_limits(&s.containers[0]).unwrap();
        assert_eq!(container.cpu_shares, 2);
        assert_eq!(container.cfs_quota_us, Some(-1));
        assert_eq!(container.memory_limit_bytes, None);
    }

    #[test]
    fn bad_quantities_are_errors() {
        let s = spec(json!({ "containers": [c(json!({"cpu": "lots"}), json!({}))] }));
        assert!(container_limits(&s.containers[0]).is_err());
        assert!(pod_limits(&s, KubeQos::Burstable).is_err());
    }

    #[test]
    fn files_for_v1_and_v2() {
        let limits = CgroupLimits {
            cpu_shares: 1024,
            cfs_quota_us: Some(-1),
            memory_limit_bytes: Some(1 << 20),
        };
        let v1: Vec<(&str, String)> = writes(&limits, false)
            .into_iter()
            .map(|w| (w.file, w.value))
            .collect();
        assert_eq!(
            v1,
            vec![
                ("cpu.shares", "1024".to_string()),
                ("cpu.cfs_period_us", "100000".to_string()),
                ("cpu.cfs_quota_us", "-1".to_string()),
                ("memory.limit_in_bytes", "1048576".to_string()),
            ]
        );
        let v2: Vec<(&str, String)> = writes(&limits, true)
            .into_iter()
            .map(|w| (w.file, w.value))
            .collect();
        assert_eq!(
            v2,
            vec![
                ("cpu.weight", "39".to_string()),
                ("cpu.max", "max 100000".to_string()),
                ("memory.max", "1048576".to_string()),
            ]
        );
        assert_eq!(writes(&besteffort_level_limits(), false).len(), 1);
    }

    impl CgroupLimits {
        fn with_unlimited_quota(mut self) -> Self {
            self.cfs_quota_us = Some(-1);
            self
        }
    }
}
