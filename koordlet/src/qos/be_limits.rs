//! BE pods' cgroup limits from their batch resources (upstream's BatchResource hook).
//!
//! A BE pod asks for `kubernetes.io/batch-cpu` (milli-cores) and `kubernetes.io/batch-memory`
//! (bytes) instead of `cpu`/`memory`, so the kubelet leaves its cgroups unlimited (it is
//! BestEffort to Kubernetes). This strategy writes what the kubelet would have written for
//! ordinary requests and limits:
//!
//! | level | file (v1 / v2) | value |
//! |---|---|---|
//! | pod | `cpu.shares` / `cpu.weight` | `MilliCPUToShares(Σ batch-cpu requests)` |
//! | pod | `cpu.cfs_quota_us` / `cpu.max` | `MilliCPUToQuota(Σ batch-cpu limits)`; -1 if a container has none |
//! | pod | `memory.limit_in_bytes` / `memory.max` | `Σ batch-memory limits`; -1 if a container has none |
//! | container | same three | from the container's own request / limits (none: 2 shares, -1, -1) |
//!
//! Only pods labelled `koordinator.sh/qosClass: BE` are touched (as upstream). When the NodeSLO
//! enables CPU suppress with policy `cfsQuota`, the pod and container quotas are -1: the
//! besteffort parent's quota governs all BE pods together.
//!
//! Pure: pods and settings in, writes out (v1 file names and values; the executor converts for
//! v2). Applied when a pod appears and reconciled every collection interval.

use koord_api::QoSClass;
use koord_api::resources::{ContainerAmounts, container_amounts};
use serde::Serialize;

use super::{CFS_PERIOD_US, CgroupWrite};
use crate::states::PodMeta;
use crate::system::KubeCgroupPaths;
use crate::system::resource::{milli_cpu_to_quota, milli_cpu_to_shares};

/// The strategy name in plans, audit lines and metrics.
pub const STRATEGY: &str = "be_limits";
const FILE_SHARES: &str = "cpu.shares";
const FILE_QUOTA: &str = "cpu.cfs_quota_us";
const FILE_MEMORY: &str = "memory.limit_in_bytes";

/// Inputs besides the pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BeLimitsSettings {
    /// CPU suppress is enabled with policy `cfsQuota`: BE quotas are left to the parent (-1).
    pub suppress_by_cfs_quota: bool,
}

/// The limits decided for one BE pod (the `strategies.be_limits.pods[]` entry of `plan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BePodLimits {
    /// `namespace/name`.
    pub pod: String,
    /// `cpu.shares`.
    pub cpu_shares: i64,
    /// CFS quota in µs per 100 ms (-1 = unlimited).
    pub cfs_quota_us: i64,
    /// Memory limit in bytes (-1 = unlimited).
    pub memory_limit_bytes: i64,
}

/// A pod left out and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedPod {
    /// `namespace/name`.
    pub pod: String,
    /// Why it was skipped.
    pub reason: String,
}

/// The decision: writes in pod-then-container order (the executor orders by tightening).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct BeLimitsPlan {
    /// Cgroup writes.
    pub writes: Vec<CgroupWrite>,
    /// Per-pod numbers.
    pub pods: Vec<BePodLimits>,
    /// Pods with bad resources.
    pub skipped: Vec<SkippedPod>,
}

/// One level's three values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limits {
    shares: i64,
    quota: i64,
    memory: i64,
}

fn container_limits(amounts: &ContainerAmounts, settings: BeLimitsSettings) -> Limits {
    Limits {
        shares: milli_cpu_to_shares(amounts.batch_cpu_request().unwrap_or(0)),
        quota: if settings.suppress_by_cfs_quota {
            -1
        } else {
            milli_cpu_to_quota(amounts.batch_cpu_limit().unwrap_or(0), CFS_PERIOD_US)
        },
        memory: match amounts.batch_memory_limit() {
            Some(bytes) if bytes > 0 => bytes,
            _ => -1,
        },
    }
}

fn pod_limits(containers: &[ContainerAmounts], settings: BeLimitsSettings) -> Limits {
    let request: i64 = containers
        .iter()
        .filter_map(ContainerAmounts::batch_cpu_request)
        .fold(0, i64::saturating_add);
    // A sum of limits is a limit only if every container has one.
    let sum_all = |get: fn(&ContainerAmounts) -> Option<i64>| -> Option<i64> {
        containers.iter().try_fold(0i64, |acc, c| match get(c) {
            Some(v) if v > 0 => Some(acc.saturating_add(v)),
            _ => None,
        })
    };
    Limits {
        shares: milli_cpu_to_shares(request),
        quota: match (
            settings.suppress_by_cfs_quota,
            sum_all(ContainerAmounts::batch_cpu_limit),
        ) {
            (false, Some(milli)) if !containers.is_empty() => milli_cpu_to_quota(milli, CFS_PERIOD_US),
            _ => -1,
        },
        memory: match sum_all(ContainerAmounts::batch_memory_limit) {
            Some(bytes) if !containers.is_empty() && bytes > 0 => bytes,
            _ => -1,
        },
    }
}

fn push_writes(writes: &mut Vec<CgroupWrite>, dir: &str, limits: Limits) {
    writes.push(CgroupWrite::new(dir, FILE_SHARES, limits.shares, STRATEGY));
    writes.push(CgroupWrite::new(dir, FILE_QUOTA, limits.quota, STRATEGY));
    writes.push(CgroupWrite::new(dir, FILE_MEMORY, limits.memory, STRATEGY));
}

/// Decides the cgroup values of every labelled BE pod that still runs.
pub fn decide(pods: &[PodMeta], paths: &KubeCgroupPaths, settings: BeLimitsSettings) -> BeLimitsPlan {
    let mut plan = BeLimitsPlan::default();
    for meta in pods {
        if meta.qos_label != QoSClass::Be || !meta.is_running() {
            continue;
        }
        let key = format!("{}/{}", meta.namespace, meta.name);
        let spec_containers = meta
            .pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or(&[]);
        let amounts: Result<Vec<ContainerAmounts>, _> =
            spec_containers.iter().map(container_amounts).collect();
        let amounts = match amounts {
            Ok(a) => a,
            Err(e) => {
                plan.skipped.push(SkippedPod {
                    pod: key,
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let pod = pod_limits(&amounts, settings);
        let pod_dir = meta.cgroup_dir(paths);
        push_writes(&mut plan.writes, &pod_dir.as_path().to_string_lossy(), pod);
        for (container, amount) in meta.containers.iter().zip(&amounts) {
            if let Some(dir) = meta.container_dir(paths, container) {
                push_writes(
                    &mut plan.writes,
                    &dir.as_path().to_string_lossy(),
                    container_limits(amount, settings),
                );
            }
        }
        plan.pods.push(BePodLimits {
            pod: key,
            cpu_shares: pod.shares,
            cfs_quota_us: pod.quota,
            memory_limit_bytes: pod.memory,
        });
    }
    plan
}
