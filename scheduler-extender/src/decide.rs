//! The extender's decisions, pure: plain facts about a pod and its candidate nodes in, verdicts
//! and scores out. No cache, no clock (time comes in as `now`), so every rule is table-tested.
//!
//! - BE pods (batch resources, QoS BE or a batch/free priority class) are filtered off nodes
//!   whose batch resources are degraded (NodeMetric missing, never reported, without node
//!   usage, or older than the node's `degradeTimeMinutes`: the manager's rule), and preferred
//!   where the most batch capacity remains (allocatable minus what BE pods request) and the
//!   real load is lowest.
//! - Other pods get load-aware spreading as upstream's LoadAware plugin: nodes whose reported
//!   usage is above the usage thresholds are filtered (unless the NodeMetric has expired), and
//!   the least-used nodes score highest.

use jiff::{SignedDuration, Timestamp};
use koord_api::resources::CpuMemory;

use crate::wire::MAX_EXTENDER_PRIORITY;

/// The highest internal score (kube-scheduler's `MaxNodeScore`).
pub const MAX_SCORE: i64 = 100;

/// Which rules apply to a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodKind {
    /// A best-effort colocation pod: batch headroom rules.
    Batch,
    /// Anything else: load-aware rules.
    LoadAware,
    /// A DaemonSet pod: never filtered by load (it must run on its node), scored by load.
    DaemonSet,
}

/// What the extender needs to know about the pod being scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodFacts {
    /// Which rules apply.
    pub kind: PodKind,
    /// Its batch-cpu (milli) and batch-memory (bytes) requests.
    pub batch_request: CpuMemory,
    /// The usage it is expected to add once running (requests scaled as upstream's estimator).
    pub estimated_usage: CpuMemory,
}

/// The node's NodeMetric, as far as placement cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricFacts {
    /// No NodeMetric object.
    Missing,
    /// No `status.updateTime`: koordlet never reported.
    NeverReported,
    /// Reported, but without `status.nodeMetric`.
    NoNodeUsage {
        /// `status.updateTime`.
        update_time: Timestamp,
    },
    /// Reported node usage.
    Reported {
        /// `status.updateTime`.
        update_time: Timestamp,
        /// `status.nodeMetric.nodeUsage` cpu (milli) and memory (bytes).
        usage: CpuMemory,
    },
}

/// What the extender knows about one candidate node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// The node name.
    pub name: String,
    /// `status.allocatable` cpu and memory.
    pub allocatable: CpuMemory,
    /// `status.allocatable` batch-cpu and batch-memory.
    pub batch_allocatable: CpuMemory,
    /// Sum of the batch requests of the BE pods assigned to the node.
    pub batch_requested: CpuMemory,
    /// The node's NodeMetric.
    pub metric: MetricFacts,
    /// Estimated usage of pods assigned after the NodeMetric was reported (not in its figures).
    pub unreported_usage: CpuMemory,
    /// The node's `degradeTimeMinutes` (colocation-config).
    pub degrade_time_minutes: i64,
}

/// Tunables; the defaults are upstream LoadAware's and this project's headroom weighting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Usage percent above which non-BE pods avoid a node (upstream: cpu 65, memory 95).
    pub usage_thresholds: Percentages,
    /// Weights of cpu and memory in every score (upstream: 1 and 1).
    pub resource_weights: Percentages,
    /// A NodeMetric older than this is not trusted for load (upstream: 180 s).
    pub metric_expiration: SignedDuration,
    /// Weight of batch headroom in a BE pod's score.
    pub headroom_weight: i64,
    /// Weight of real load in a BE pod's score.
    pub load_weight: i64,
}

/// A cpu and a memory figure (percentages or weights).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentages {
    /// CPU.
    pub cpu: i64,
    /// Memory.
    pub memory: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            usage_thresholds: Percentages { cpu: 65, memory: 95 },
            resource_weights: Percentages { cpu: 1, memory: 1 },
            metric_expiration: SignedDuration::from_secs(180),
            headroom_weight: 2,
            load_weight: 1,
        }
    }
}

/// Why a node was filtered out; the label of the filtered-out metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FilterReason {
    /// Batch resources degraded: no NodeMetric.
    NodeMetricMissing,
    /// Batch resources degraded: koordlet never reported.
    NodeMetricNeverReported,
    /// Batch resources degraded: no node usage in the NodeMetric.
    NodeUsageMissing,
    /// Batch resources degraded: NodeMetric older than `degradeTimeMinutes`.
    NodeMetricStale,
    /// Real usage above a usage threshold.
    UsageOverThreshold,
}

impl FilterReason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            FilterReason::NodeMetricMissing => "nodemetric_missing",
            FilterReason::NodeMetricNeverReported => "nodemetric_never_reported",
            FilterReason::NodeUsageMissing => "node_usage_missing",
            FilterReason::NodeMetricStale => "nodemetric_stale",
            FilterReason::UsageOverThreshold => "usage_over_threshold",
        }
    }

    /// True when preempting pods cannot make the node fit (kube-scheduler then skips it in
    /// preemption: `FailedAndUnresolvableNodes`).
    pub fn unresolvable(self) -> bool {
        self != FilterReason::UsageOverThreshold
    }
}

/// A failed node: why, in a metric label and a sentence for the pod's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    /// The reason class.
    pub reason: FilterReason,
    /// The message kube-scheduler puts into the pod's FailedScheduling event.
    pub message: String,
}

/// Decides whether `pod` may go to `node` at `now`.
pub fn filter(pod: &PodFacts, node: &NodeFacts, policy: &Policy, now: Timestamp) -> Result<(), Unfit> {
    match pod.kind {
        PodKind::Batch => batch_degraded(node, now),
        PodKind::DaemonSet => Ok(()),
        PodKind::LoadAware => usage_within_thresholds(node, policy, now),
    }
}

fn batch_degraded(node: &NodeFacts, now: Timestamp) -> Result<(), Unfit> {
    let unfit = |reason, message: String| {
        Err(Unfit {
            reason,
            message: format!("batch resources degraded: {message}"),
        })
    };
    let update_time = match node.metric {
        MetricFacts::Missing => return unfit(FilterReason::NodeMetricMissing, "no NodeMetric".into()),
        MetricFacts::NeverReported => {
            return unfit(
                FilterReason::NodeMetricNeverReported,
                "NodeMetric has no status.updateTime (koordlet never reported)".into(),
            );
        }
        MetricFacts::NoNodeUsage { update_time } | MetricFacts::Reported { update_time, .. } => update_time,
    };
    let degrade_after = SignedDuration::from_secs(node.degrade_time_minutes.saturating_mul(60));
    if now.duration_since(update_time) > degrade_after {
        return unfit(
            FilterReason::NodeMetricStale,
            format!(
                "NodeMetric last updated at {update_time}, more than degradeTimeMinutes={} ago",
                node.degrade_time_minutes
            ),
        );
    }
    if matches!(node.metric, MetricFacts::NoNodeUsage { .. }) {
        return unfit(
            FilterReason::NodeUsageMissing,
            "NodeMetric has no status.nodeMetric".into(),
        );
    }
    Ok(())
}

/// The node usage when the NodeMetric is fresh enough to judge load by.
fn fresh_usage(node: &NodeFacts, policy: &Policy, now: Timestamp) -> Option<CpuMemory> {
    match node.metric {
        MetricFacts::Reported { update_time, usage }
            if now.duration_since(update_time) <= policy.metric_expiration =>
        {
            Some(usage)
        }
        _ => None,
    }
}

fn usage_within_thresholds(node: &NodeFacts, policy: &Policy, now: Timestamp) -> Result<(), Unfit> {
    // As upstream (filterExpiredNodeMetrics): without fresh figures the node is not judged.
    let Some(usage) = fresh_usage(node, policy, now) else {
        return Ok(());
    };
    let checks = [
        (
            "cpu",
            usage.cpu_milli,
            node.allocatable.cpu_milli,
            policy.usage_thresholds.cpu,
        ),
        (
            "memory",
            usage.memory_bytes,
            node.allocatable.memory_bytes,
            policy.usage_thresholds.memory,
        ),
    ];
    for (resource, used, allocatable, threshold) in checks {
        if threshold <= 0 || allocatable <= 0 {
            continue;
        }
        let percent = percent_of(used, allocatable);
        if percent > threshold {
            return Err(Unfit {
                reason: FilterReason::UsageOverThreshold,
                message: format!("node(s) {resource} usage exceed threshold: {percent}% > {threshold}%"),
            });
        }
    }
    Ok(())
}

/// `part * 100 / whole`, rounded down, in i128 so no quantity overflows.
fn percent_of(part: i64, whole: i64) -> i64 {
    if whole <= 0 {
        return 0;
    }
    i64::try_from(i128::from(part) * 100 / i128::from(whole)).unwrap_or(i64::MAX)
}

/// A node's score and its parts, for the prioritize answer and the debug log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeScore {
    /// 0..=[`MAX_SCORE`].
    pub total: i64,
    /// Batch headroom part (BE pods only).
    pub headroom: Option<i64>,
    /// Real-load part (0 when the NodeMetric is missing or expired, as upstream).
    pub load: i64,
}

impl NodeScore {
    /// The score on the extender API's 0..=10 scale (kube-scheduler scales it back by 10).
    pub fn extender_priority(self) -> i64 {
        ((self.total.clamp(0, MAX_SCORE) * MAX_EXTENDER_PRIORITY + MAX_SCORE / 2) / MAX_SCORE)
            .clamp(0, MAX_EXTENDER_PRIORITY)
    }
}

/// Scores every candidate; the result is in the order of `nodes`.
///
/// Batch headroom is the capacity left after this pod (allocatable − BE requests − the pod's
/// request, floored at 0), relative to the largest left on any candidate: the node where the
/// most batch capacity remains scores 100, which spreads BE pods by headroom rather than packing
/// them. Load is upstream LoadAware's least-used score over reported usage plus the estimated
/// usage of pods not yet in the NodeMetric and of this pod.
pub fn prioritize(pod: &PodFacts, nodes: &[NodeFacts], policy: &Policy, now: Timestamp) -> Vec<NodeScore> {
    let remaining = |node: &NodeFacts| CpuMemory {
        cpu_milli: (node.batch_allocatable.cpu_milli
            - node.batch_requested.cpu_milli
            - pod.batch_request.cpu_milli)
            .max(0),
        memory_bytes: (node.batch_allocatable.memory_bytes
            - node.batch_requested.memory_bytes
            - pod.batch_request.memory_bytes)
            .max(0),
    };
    let most = nodes
        .iter()
        .map(remaining)
        .fold(CpuMemory::default(), |most, r| CpuMemory {
            cpu_milli: most.cpu_milli.max(r.cpu_milli),
            memory_bytes: most.memory_bytes.max(r.memory_bytes),
        });
    nodes
        .iter()
        .map(|node| {
            let load = load_score(pod, node, policy, now);
            match pod.kind {
                PodKind::Batch => {
                    let left = remaining(node);
                    let headroom = weighted(
                        policy,
                        percent_of(left.cpu_milli, most.cpu_milli),
                        percent_of(left.memory_bytes, most.memory_bytes),
                    );
                    let weights = (policy.headroom_weight + policy.load_weight).max(1);
                    let total = (headroom * policy.headroom_weight + load * policy.load_weight) / weights;
                    NodeScore {
                        total: total.clamp(0, MAX_SCORE),
                        headroom: Some(headroom),
                        load,
                    }
                }
                PodKind::LoadAware | PodKind::DaemonSet => NodeScore {
                    total: load,
                    headroom: None,
                    load,
                },
            }
        })
        .collect()
}

fn load_score(pod: &PodFacts, node: &NodeFacts, policy: &Policy, now: Timestamp) -> i64 {
    let Some(usage) = fresh_usage(node, policy, now) else {
        return 0;
    };
    let least_used = |used: i64, allocatable: i64| {
        if allocatable <= 0 {
            return 0;
        }
        (MAX_SCORE - percent_of(used, allocatable)).clamp(0, MAX_SCORE)
    };
    let cpu = least_used(
        usage.cpu_milli + node.unreported_usage.cpu_milli + pod.estimated_usage.cpu_milli,
        node.allocatable.cpu_milli,
    );
    let memory = least_used(
        usage.memory_bytes + node.unreported_usage.memory_bytes + pod.estimated_usage.memory_bytes,
        node.allocatable.memory_bytes,
    );
    weighted(policy, cpu, memory)
}

fn weighted(policy: &Policy, cpu: i64, memory: i64) -> i64 {
    let weights = policy.resource_weights;
    let sum = (weights.cpu + weights.memory).max(1);
    ((cpu * weights.cpu + memory * weights.memory) / sum).clamp(0, MAX_SCORE)
}

#[cfg(test)]
mod tests;
