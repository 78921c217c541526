//! Batch allocatable: the node capacity that BE pods may be scheduled on.
//!
//! ```text
//! margin      = capacity × (100 − reclaimPercent) / 100
//! reserved    = max(capacity − allocatable, annotated reservation)
//! system      = NodeMetric systemUsage + host applications above batch priority
//! usage           : capacity − margin − max(system, reserved) − hpUsed
//! request (memory): capacity − margin − reserved − hpRequested
//! maxUsageRequest : capacity − margin − max(system, reserved) − hpMaxUsedRequested
//! result      = min(max(formula, 0), capacity × batchThresholdPercent / 100)
//! ```
//!
//! Everything here is a pure function of [`input`] data and an explicit `now`: the controller
//! and `koord-manager calc` call the same [`calculate`].

mod amounts;
mod explain;
pub mod input;
mod publish;
mod terms;
mod update;
mod zone_entries;
mod zones;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod zone_tests;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

pub use amounts::{Amounts, Resource, percent_of};
pub use explain::{Explain, ResourceExplain};
pub use input::{
    BatchStrategy, CalculatePolicy, HostApplicationUsage, NodeFacts, NumaPlacement, PodFacts, PodUsage,
    UsageReport, ZoneFacts,
};
pub use publish::{BatchStatus, publish};
pub use terms::{FixedTerms, HpAccounts, PodShare, Terms, collect_terms, hp_accounts};
pub use update::{PublishedValues, UpdateDecision, UpdateReason, decide_update};
pub use zone_entries::{TopologyZones, set_zone_entries, zone_entries_of};
pub use zones::{
    ZoneEntries, ZoneOutcome, ZoneResult, calculate_zones, decide_zone_update, numa_id_of_zone, zone_targets,
};

/// Why batch resources are removed from a node although colocation is on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum DegradeReason {
    /// The node has no NodeMetric.
    NodeMetricMissing,
    /// The NodeMetric has no `status.updateTime`: koordlet never reported.
    NeverReported,
    /// The last report is older than `degradeTimeMinutes`.
    #[serde(rename_all = "camelCase")]
    Stale {
        /// `status.updateTime`.
        update_time: Timestamp,
        /// `degradeTimeMinutes` in force.
        degrade_time_minutes: i64,
    },
    /// The NodeMetric has an update time but no `status.nodeMetric` (upstream panics here).
    NodeUsageMissing,
}

impl std::fmt::Display for DegradeReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DegradeReason::NodeMetricMissing => write!(f, "node has no NodeMetric"),
            DegradeReason::NeverReported => {
                write!(f, "NodeMetric has no status.updateTime (koordlet never reported)")
            }
            DegradeReason::Stale {
                update_time,
                degrade_time_minutes,
            } => write!(
                f,
                "NodeMetric last updated at {update_time}, more than degradeTimeMinutes={degrade_time_minutes} ago"
            ),
            DegradeReason::NodeUsageMissing => write!(f, "NodeMetric has no status.nodeMetric"),
        }
    }
}

/// What the batch calculation decided for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOutcome {
    /// Colocation is off for the node: batch resources are removed.
    Disabled,
    /// Usage data cannot be trusted: batch resources are removed.
    Degraded(DegradeReason),
    /// Batch allocatable with the terms that produced it.
    Allocatable {
        /// batch-cpu (milli-cores) and batch-memory (bytes), before third-party allocations.
        amounts: Amounts,
        /// The formula's terms.
        explain: Box<Explain>,
    },
}

impl BatchOutcome {
    /// The computed amounts, when there are any.
    pub fn amounts(&self) -> Option<Amounts> {
        match self {
            BatchOutcome::Allocatable { amounts, .. } => Some(*amounts),
            BatchOutcome::Disabled | BatchOutcome::Degraded(_) => None,
        }
    }
}

/// Computes batch allocatable for one node at `now`.
///
/// `report` is `None` when the node has no NodeMetric (degrade, not an error).
pub fn calculate(
    node: &NodeFacts,
    pods: &[PodFacts],
    report: Option<&UsageReport>,
    strategy: &BatchStrategy,
    now: Timestamp,
) -> BatchOutcome {
    if !strategy.enable {
        return BatchOutcome::Disabled;
    }
    let (report, system_usage) = match fresh_report(report, strategy.degrade_time_minutes, now) {
        Ok(fresh) => fresh,
        Err(reason) => return BatchOutcome::Degraded(reason),
    };
    let reclaim = Amounts::new(strategy.cpu_reclaim_percent, strategy.memory_reclaim_percent);
    let terms = collect_terms(node, pods, report, system_usage, reclaim);
    let (amounts, explain) = apply_policies(&terms, strategy);
    BatchOutcome::Allocatable {
        amounts,
        explain: Box::new(explain),
    }
}

/// The report and its system usage when it can be trusted at `now`, else why not: no
/// NodeMetric, never reported, older than `degrade_time_minutes`, or without `nodeMetric`.
/// Batch and mid resources degrade by the same rule.
pub fn fresh_report(
    report: Option<&UsageReport>,
    degrade_time_minutes: i64,
    now: Timestamp,
) -> Result<(&UsageReport, Amounts), DegradeReason> {
    let report = report.ok_or(DegradeReason::NodeMetricMissing)?;
    let update_time = report.update_time.ok_or(DegradeReason::NeverReported)?;
    let degrade_after = SignedDuration::from_secs(degrade_time_minutes.saturating_mul(60));
    if now.duration_since(update_time) > degrade_after {
        return Err(DegradeReason::Stale {
            update_time,
            degrade_time_minutes,
        });
    }
    let system_usage = report.system_usage.ok_or(DegradeReason::NodeUsageMissing)?;
    Ok((report, system_usage))
}

/// Applies each resource's policy, the floor at 0 and the threshold cap to the terms.
pub fn apply_policies(terms: &Terms, strategy: &BatchStrategy) -> (Amounts, Explain) {
    let explain_of = |resource: Resource| {
        let (policy, reclaim_percent, threshold_percent) = match resource {
            // `request` is not defined for CPU: it acts as `usage`, as upstream.
            Resource::Cpu => (
                match strategy.cpu_policy {
                    CalculatePolicy::MaxUsageRequest => CalculatePolicy::MaxUsageRequest,
                    CalculatePolicy::Usage | CalculatePolicy::Request => CalculatePolicy::Usage,
                },
                strategy.cpu_reclaim_percent,
                strategy.batch_cpu_threshold_percent,
            ),
            Resource::Memory => (
                strategy.memory_policy,
                strategy.memory_reclaim_percent,
                strategy.batch_memory_threshold_percent,
            ),
        };
        let pick = |amounts: Amounts| amounts.get(resource);
        let base = pick(terms.capacity).saturating_sub(pick(terms.margin));
        let unclamped = match policy {
            CalculatePolicy::Usage => base
                .saturating_sub(pick(terms.system_or_reserved))
                .saturating_sub(pick(terms.hp_used)),
            CalculatePolicy::Request => base
                .saturating_sub(pick(terms.reserved))
                .saturating_sub(pick(terms.hp_requested)),
            CalculatePolicy::MaxUsageRequest => base
                .saturating_sub(pick(terms.system_or_reserved))
                .saturating_sub(pick(terms.hp_max_used_requested)),
        };
        let threshold = threshold_percent.map(|percent| (percent, percent_of(pick(terms.capacity), percent)));
        let mut result = unclamped.max(0);
        if let Some((_, cap)) = threshold {
            result = result.min(cap).max(0);
        }
        ResourceExplain::new(
            resource,
            policy,
            reclaim_percent,
            terms,
            unclamped,
            threshold,
            result,
        )
    };
    let explain = Explain {
        cpu: explain_of(Resource::Cpu),
        memory: explain_of(Resource::Memory),
    };
    (Amounts::new(explain.cpu.result, explain.memory.result), explain)
}
