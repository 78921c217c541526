//! Why batch allocatable is what it is: the formula's terms per resource, for the log line and
//! Node Event written on every change and for `koord-manager calc`.

use std::fmt;

use serde::Serialize;

use super::{CalculatePolicy, Resource, Terms};

/// The formula with its terms, for both resources.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explain {
    /// `kubernetes.io/batch-cpu`, milli-cores.
    pub cpu: ResourceExplain,
    /// `kubernetes.io/batch-memory`, bytes.
    pub memory: ResourceExplain,
}

/// The formula's terms for one resource (milli-cores or bytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceExplain {
    /// The policy that chose which pod term is subtracted.
    pub policy: CalculatePolicy,
    /// Node capacity.
    pub capacity: i64,
    /// The reclaim threshold the margin derives from.
    pub reclaim_percent: i64,
    /// `capacity × (100 − reclaimPercent) / 100`.
    pub margin: i64,
    /// `max(kubeletReserved, annotatedReserved)`.
    pub reserved: i64,
    /// `capacity − allocatable`, at least 0.
    pub kubelet_reserved: i64,
    /// From the `node.koordinator.sh/reservation` annotation.
    pub annotated_reserved: i64,
    /// NodeMetric system usage plus host applications above batch priority.
    pub system: i64,
    /// The host-application part of `system`.
    pub host_applications: i64,
    /// `max(system, reserved)`.
    pub system_or_reserved: i64,
    /// Σ request of high-priority pods.
    pub hp_requested: i64,
    /// Σ usage of high-priority pods (request when unmeasured).
    pub hp_used: i64,
    /// Σ max(usage, request) of high-priority pods.
    pub hp_max_used_requested: i64,
    /// Usage of high-priority pods reported by koordlet but no longer listed (in `hpUsed`).
    pub hp_dangling: i64,
    /// The formula before the floor at 0 and the threshold cap.
    pub unclamped: i64,
    /// `batch*ThresholdPercent`, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold_percent: Option<i64>,
    /// `capacity × thresholdPercent / 100`, when a threshold is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold_cap: Option<i64>,
    /// The batch allocatable computed (before third-party allocations).
    pub result: i64,
}

impl ResourceExplain {
    /// Builds the explanation of `resource` from the terms and the chosen numbers.
    pub(crate) fn new(
        resource: Resource,
        policy: CalculatePolicy,
        reclaim_percent: i64,
        terms: &Terms,
        unclamped: i64,
        threshold: Option<(i64, i64)>,
        result: i64,
    ) -> Self {
        let pick = |amounts: super::Amounts| amounts.get(resource);
        ResourceExplain {
            policy,
            capacity: pick(terms.capacity),
            reclaim_percent,
            margin: pick(terms.margin),
            reserved: pick(terms.reserved),
            kubelet_reserved: pick(terms.kubelet_reserved),
            annotated_reserved: pick(terms.annotated_reserved),
            system: pick(terms.system),
            host_applications: pick(terms.host_applications),
            system_or_reserved: pick(terms.system_or_reserved),
            hp_requested: pick(terms.hp_requested),
            hp_used: pick(terms.hp_used),
            hp_max_used_requested: pick(terms.hp_max_used_requested),
            hp_dangling: pick(terms.hp_dangling),
            unclamped,
            threshold_percent: threshold.map(|(percent, _)| percent),
            threshold_cap: threshold.map(|(_, cap)| cap),
            result,
        }
    }
}

impl fmt::Display for ResourceExplain {
    /// `25000 = capacity 100000 - margin 35000 - max(system 7000, reserved 0) - hpUsed 33000`,
    /// with `request` policy subtracting `reserved` and `hpRequested` instead, and a threshold
    /// shown as `min(…, cap 80000)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut formula = format!("capacity {} - margin {}", self.capacity, self.margin);
        match self.policy {
            CalculatePolicy::Request => {
                formula.push_str(&format!(
                    " - reserved {} - hpRequested {}",
                    self.reserved, self.hp_requested
                ));
            }
            CalculatePolicy::Usage | CalculatePolicy::MaxUsageRequest => {
                formula.push_str(&format!(
                    " - max(system {}, reserved {}) - ",
                    self.system, self.reserved
                ));
                if self.policy == CalculatePolicy::Usage {
                    formula.push_str(&format!("hpUsed {}", self.hp_used));
                } else {
                    formula.push_str(&format!("hpMaxUsedRequested {}", self.hp_max_used_requested));
                }
            }
        }
        if self.unclamped < 0 {
            formula = format!("max({formula}, 0)");
        }
        if let Some(cap) = self.threshold_cap {
            formula = format!("min({formula}, cap {cap})");
        }
        write!(f, "{} = {}", self.result, formula)
    }
}

impl fmt::Display for Explain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch-cpu {}; batch-memory {}", self.cpu, self.memory)
    }
}
