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
//! besteffort parent's quota governs all BE pods together. On a node whose
//! `node.koordinator.sh/cpu-normalization-ratio` is above 1, batch-cpu is counted in normalized
//! (baseline) cores, so each quota is `ceil(quota / ratio)` of the node's faster cores.
//!
//! Pure: pods and settings in, writes out (v1 file names and values; the executor converts for
//! v2). Applied when a pod appears and reconciled every collection interval.
//!
//! [`decide`] computes everything from scratch. The live loop uses [`BeLimitsCache`] instead:
//! a pod's decision depends only on its identity, containers and resources (and on the
//! settings and cgroup layout), so it is computed once per pod and reused until one of those
//! changes, with the writes already in the executor's typed form. The result is the same as
//! [`decide`]'s; the executor still sees every write every round, so its forced refresh keeps
//! finding and repairing files someone else changed.

use std::collections::HashMap;
use std::sync::Arc;

use koord_api::QoSClass;
use koord_api::cpu_normalization::NormalizationRatio;
use koord_api::resources::{ContainerAmounts, container_amounts};
use serde::Serialize;

use super::{CFS_PERIOD_US, CgroupWrite};
use crate::pod::PodMeta;
use crate::resource::{milli_cpu_to_quota, milli_cpu_to_shares};
use crate::{CgroupDir, CgroupResource, KubeCgroupPaths, PodUid};

/// The strategy name in plans, audit lines and metrics.
pub const STRATEGY: &str = "be_limits";

/// Inputs besides the pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BeLimitsSettings {
    /// CPU suppress is enabled with policy `cfsQuota`: BE quotas are left to the parent (-1).
    pub suppress_by_cfs_quota: bool,
    /// The node's CPU normalization ratio: quotas are divided by it (rounded up).
    pub cpu_normalization: NormalizationRatio,
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
            settings.cpu_normalization.shrink_quota(milli_cpu_to_quota(
                amounts.batch_cpu_limit().unwrap_or(0),
                CFS_PERIOD_US,
            ))
        },
        memory: match amounts.batch_memory_limit() {
            Some(bytes) if bytes > 0 => bytes,
            _ => -1,
        },
    }
}

/// One BE container's values, as both the reconcile loop and the runtime hooks (NRI) apply
/// them: the hooks set them before the container starts, the loop keeps them, and since both
/// come from here neither undoes the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BeContainerLimits {
    /// `cpu.shares` (from the batch-cpu request; 2 without one).
    pub cpu_shares: i64,
    /// CFS quota in µs per [`CFS_PERIOD_US`] (-1 = unlimited).
    pub cfs_quota_us: i64,
    /// Memory limit in bytes (-1 = unlimited).
    pub memory_limit_bytes: i64,
}

/// The container-level limits of a BE container with these batch amounts.
pub fn container_values(amounts: &ContainerAmounts, settings: BeLimitsSettings) -> BeContainerLimits {
    let limits = container_limits(amounts, settings);
    BeContainerLimits {
        cpu_shares: limits.shares,
        cfs_quota_us: limits.quota,
        memory_limit_bytes: limits.memory,
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
            (false, Some(milli)) if !containers.is_empty() => settings
                .cpu_normalization
                .shrink_quota(milli_cpu_to_quota(milli, CFS_PERIOD_US)),
            _ => -1,
        },
        memory: match sum_all(ContainerAmounts::batch_memory_limit) {
            Some(bytes) if !containers.is_empty() && bytes > 0 => bytes,
            _ => -1,
        },
    }
}

fn push_writes(writes: &mut Vec<CgroupWrite>, dir: &CgroupDir, limits: Limits) {
    writes.push(CgroupWrite::int(
        dir,
        CgroupResource::CpuShares,
        limits.shares,
        STRATEGY,
    ));
    writes.push(CgroupWrite::int(
        dir,
        CgroupResource::CpuCfsQuota,
        limits.quota,
        STRATEGY,
    ));
    writes.push(CgroupWrite::int(
        dir,
        CgroupResource::MemoryLimit,
        limits.memory,
        STRATEGY,
    ));
}

/// Whether the strategy acts on the pod: labelled BE and still running.
fn applies(meta: &PodMeta) -> bool {
    meta.qos_label == QoSClass::Be && meta.is_running()
}

/// One pod's limits and writes (pod level first, then each container with a known ID), or why
/// it was skipped.
fn decide_pod(
    meta: &PodMeta,
    paths: &KubeCgroupPaths,
    settings: BeLimitsSettings,
) -> Result<(BePodLimits, Vec<CgroupWrite>), SkippedPod> {
    let key = format!("{}/{}", meta.namespace, meta.name);
    let amounts: Vec<ContainerAmounts> = match meta.spec_containers().iter().map(container_amounts).collect()
    {
        Ok(a) => a,
        Err(e) => {
            return Err(SkippedPod {
                pod: key,
                reason: e.to_string(),
            });
        }
    };
    let pod = pod_limits(&amounts, settings);
    let mut writes = Vec::with_capacity(3 * (1 + amounts.len()));
    let pod_dir = meta.cgroup_dir(paths);
    push_writes(&mut writes, &pod_dir, pod);
    for (container, amount) in meta.containers.iter().zip(&amounts) {
        if let Some(dir) = meta.container_dir(paths, container) {
            push_writes(&mut writes, &dir, container_limits(amount, settings));
        }
    }
    let limits = BePodLimits {
        pod: key,
        cpu_shares: pod.shares,
        cfs_quota_us: pod.quota,
        memory_limit_bytes: pod.memory,
    };
    Ok((limits, writes))
}

/// Decides the cgroup values of every labelled BE pod that still runs.
pub fn decide(pods: &[PodMeta], paths: &KubeCgroupPaths, settings: BeLimitsSettings) -> BeLimitsPlan {
    let mut plan = BeLimitsPlan::default();
    for meta in pods.iter().filter(|m| applies(m)) {
        match decide_pod(meta, paths, settings) {
            Ok((limits, writes)) => {
                plan.writes.extend(writes);
                plan.pods.push(limits);
            }
            Err(skipped) => plan.skipped.push(skipped),
        }
    }
    plan
}

/// One pod's decision as [`BeLimitsCache`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDecision {
    /// The pod's limits with its writes, or why it was skipped.
    pub outcome: Result<PodLimitsDecision, SkippedPod>,
}

/// The limits of one pod and the writes that set them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLimitsDecision {
    /// The pod-level numbers (the plan's `pods[]` entry).
    pub limits: BePodLimits,
    /// The writes as [`decide`] lists them; the executor applies them borrowed.
    pub writes: Vec<CgroupWrite>,
}

impl PodDecision {
    fn compute(meta: &PodMeta, paths: &KubeCgroupPaths, settings: BeLimitsSettings) -> Self {
        let outcome =
            decide_pod(meta, paths, settings).map(|(limits, writes)| PodLimitsDecision { limits, writes });
        PodDecision { outcome }
    }
}

/// One round's decisions from [`BeLimitsCache::decide`], in pod order. Cheap: the decisions
/// are shared with the cache.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BeLimitsRound {
    pods: Vec<Arc<PodDecision>>,
}

impl BeLimitsRound {
    /// Each pod's decision, in the order of the pod list.
    pub fn decisions(&self) -> impl Iterator<Item = &PodDecision> {
        self.pods.iter().map(|d| d.as_ref())
    }

    /// The writes, borrowed from the cache, in plan order (pod, then its containers; pod by
    /// pod).
    pub fn writes(&self) -> impl Iterator<Item = &CgroupWrite> {
        self.decisions()
            .filter_map(|d| d.outcome.as_ref().ok())
            .flat_map(|d| d.writes.iter())
    }

    /// Whether there is no write at all.
    pub fn has_no_writes(&self) -> bool {
        self.writes().next().is_none()
    }

    /// The per-pod numbers (the plan's `pods`).
    pub fn pods(&self) -> impl Iterator<Item = &BePodLimits> {
        self.decisions()
            .filter_map(|d| d.outcome.as_ref().ok())
            .map(|d| &d.limits)
    }

    /// The skipped pods (the plan's `skipped`).
    pub fn skipped(&self) -> impl Iterator<Item = &SkippedPod> {
        self.decisions().filter_map(|d| d.outcome.as_ref().err())
    }

    /// The same plan [`decide`] returns for the same inputs.
    pub fn plan(&self) -> BeLimitsPlan {
        let mut plan = BeLimitsPlan::default();
        for decision in self.decisions() {
            match &decision.outcome {
                Ok(d) => {
                    plan.writes.extend(d.writes.iter().cloned());
                    plan.pods.push(d.limits.clone());
                }
                Err(skipped) => plan.skipped.push(skipped.clone()),
            }
        }
        plan
    }
}

/// A cached decision with the pod it was computed from.
#[derive(Debug)]
struct CachedPod {
    /// The pod as last seen (its `Arc<Pod>` is replaced by an equal newer one when the pod
    /// list is re-fetched, so this holds no stale object beyond one round).
    meta: PodMeta,
    decision: Arc<PodDecision>,
    /// The round it was last used in: entries not used by the latest round are dropped.
    seen: u64,
}

/// Whether `old` and `new` give the same decision: same identity, containers (names and IDs,
/// which name the cgroups) and container resources. The QoS label and phase are checked before
/// the cache is consulted.
fn same_inputs(old: &PodMeta, new: &PodMeta) -> bool {
    if old.uid != new.uid
        || old.kube_qos != new.kube_qos
        || old.namespace != new.namespace
        || old.name != new.name
        || old.containers != new.containers
    {
        return false;
    }
    if Arc::ptr_eq(&old.pod, &new.pod) {
        return true;
    }
    let (a, b) = (old.spec_containers(), new.spec_containers());
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| a.name == b.name && a.resources == b.resources)
}

/// Per-pod decisions kept between rounds (the live loop's form of [`decide`]).
///
/// A pod's decision is recomputed when the pod is new or its identity, containers or resources
/// changed (compared field by field; the common case, the very same pod object, is one pointer
/// comparison), and every decision is recomputed when the settings (from the NodeSLO) or the
/// cgroup layout change. Pods that left the list, stopped running or lost the BE label are
/// dropped at the end of the round.
#[derive(Debug, Default)]
pub struct BeLimitsCache {
    inputs: Option<(BeLimitsSettings, KubeCgroupPaths)>,
    pods: HashMap<PodUid, CachedPod>,
    round: u64,
    computed: u64,
}

impl BeLimitsCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The decisions for `pods`: the same as [`decide`] (see [`BeLimitsRound::plan`]).
    pub fn decide(
        &mut self,
        pods: &[PodMeta],
        paths: &KubeCgroupPaths,
        settings: BeLimitsSettings,
    ) -> BeLimitsRound {
        if self
            .inputs
            .as_ref()
            .is_none_or(|(s, p)| *s != settings || p != paths)
        {
            self.pods.clear();
            self.inputs = Some((settings, paths.clone()));
        }
        self.round = self.round.wrapping_add(1);
        let round = self.round;
        let mut out = Vec::new();
        for meta in pods.iter().filter(|m| applies(m)) {
            let decision = match self.pods.get_mut(&meta.uid) {
                Some(cached) if cached.seen != round && same_inputs(&cached.meta, meta) => {
                    if !Arc::ptr_eq(&cached.meta.pod, &meta.pod) {
                        cached.meta.pod = Arc::clone(&meta.pod);
                    }
                    cached.seen = round;
                    Arc::clone(&cached.decision)
                }
                // A UID listed twice is decided twice, as `decide` does.
                Some(cached) if cached.seen == round => {
                    self.computed += 1;
                    Arc::new(PodDecision::compute(meta, paths, settings))
                }
                _ => {
                    self.computed += 1;
                    let decision = Arc::new(PodDecision::compute(meta, paths, settings));
                    self.pods.insert(
                        meta.uid.clone(),
                        CachedPod {
                            meta: meta.clone(),
                            decision: Arc::clone(&decision),
                            seen: round,
                        },
                    );
                    decision
                }
            };
            out.push(decision);
        }
        self.pods.retain(|_, c| c.seen == round);
        BeLimitsRound { pods: out }
    }

    /// Number of pods with a cached decision.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether no decision is cached.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// How many pod decisions were computed (not reused) since the cache was made.
    pub fn computed(&self) -> u64 {
        self.computed
    }
}

#[cfg(test)]
#[path = "be_limits_tests.rs"]
mod tests;
