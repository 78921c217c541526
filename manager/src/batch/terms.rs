//! The terms of the batch formula: capacity, safety margin, reservations, system usage and what
//! high-priority (HP) pods use and request.

use std::collections::HashMap;

use super::{Amounts, NodeFacts, PodFacts, UsageReport, amounts::percent_of};

/// Every term of the batch formula, for both resources.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Terms {
    /// Node capacity.
    pub capacity: Amounts,
    /// `capacity × (100 − reclaimPercent) / 100`: what is never reclaimed. Negative when the
    /// reclaim threshold is above 100 %.
    pub margin: Amounts,
    /// `max(capacity − allocatable, 0)`: the kubelet's reservation.
    pub kubelet_reserved: Amounts,
    /// From the `node.koordinator.sh/reservation` annotation.
    pub annotated_reserved: Amounts,
    /// `max(kubelet_reserved, annotated_reserved)` per resource.
    pub reserved: Amounts,
    /// The part of `system` measured on host applications above batch priority.
    pub host_applications: Amounts,
    /// NodeMetric system usage plus `host_applications`.
    pub system: Amounts,
    /// `max(system, reserved)` per resource.
    pub system_or_reserved: Amounts,
    /// Σ request of active HP pods.
    pub hp_requested: Amounts,
    /// Σ usage of active HP pods (their request when unmeasured; CPU request for LSE pods),
    /// plus the usage of HP pods that are reported but no longer listed.
    pub hp_used: Amounts,
    /// Σ max(request, usage) of active HP pods (request when unmeasured), plus the usage of
    /// HP pods that are reported but no longer listed.
    pub hp_max_used_requested: Amounts,
    /// The part of `hp_used` that comes from reported-but-unlisted pods.
    pub hp_dangling: Amounts,
}

/// Collects the terms. `system_usage` is the NodeMetric's `systemUsage`.
pub fn collect_terms(
    node: &NodeFacts,
    pods: &[PodFacts],
    report: &UsageReport,
    system_usage: Amounts,
    reclaim_percent: Amounts,
) -> Terms {
    let capacity = node.capacity;
    let margin =
        Amounts::from_fn(|r| percent_of(capacity.get(r), 100i64.saturating_sub(reclaim_percent.get(r))));
    let kubelet_reserved = node.kubelet_reserved();
    let reserved = node.reserved();
    let host_applications: Amounts = report
        .host_applications
        .iter()
        .filter(|app| app.above_batch)
        .map(|app| app.usage)
        .sum();
    let system = system_usage.plus(host_applications);
    let system_or_reserved = system.max(reserved);

    // Usage by pod key; the first report of a key wins, later duplicates are ignored.
    let mut usage_index: HashMap<(&str, &str), usize> = HashMap::with_capacity(report.pods.len());
    for (index, usage) in report.pods.iter().enumerate() {
        usage_index
            .entry((usage.namespace.as_str(), usage.name.as_str()))
            .or_insert(index);
    }
    let mut listed = vec![false; report.pods.len()];

    let mut terms = Terms {
        capacity,
        margin,
        kubelet_reserved,
        annotated_reserved: node.annotated_reservation,
        reserved,
        host_applications,
        system,
        system_or_reserved,
        ..Terms::default()
    };
    for pod in pods {
        let measured = usage_index
            .get(&(pod.namespace.as_str(), pod.name.as_str()))
            .copied();
        if let Some(index) = measured
            && let Some(seen) = listed.get_mut(index)
        {
            *seen = true;
        }
        if !pod.active || !pod.high_priority {
            continue;
        }
        terms.hp_requested = terms.hp_requested.plus(pod.request);
        match measured.and_then(|index| report.pods.get(index)) {
            None => {
                terms.hp_used = terms.hp_used.plus(pod.request);
                // Upstream adds nothing here (node level); an unmeasured pod may use its whole
                // request any moment, so we count it (see README, "Decisions").
                terms.hp_max_used_requested = terms.hp_max_used_requested.plus(pod.request);
            }
            Some(measured) => {
                let used = if pod.lse {
                    Amounts::new(pod.request.cpu, measured.usage.memory)
                } else {
                    measured.usage
                };
                terms.hp_used = terms.hp_used.plus(used);
                terms.hp_max_used_requested =
                    terms.hp_max_used_requested.plus(pod.request.max(measured.usage));
            }
        }
    }
    for (index, (usage, seen)) in report.pods.iter().zip(&listed).enumerate() {
        let first_of_key = usage_index.get(&(usage.namespace.as_str(), usage.name.as_str())) == Some(&index);
        if *seen || !usage.high_priority || !first_of_key {
            continue;
        }
        terms.hp_dangling = terms.hp_dangling.plus(usage.usage);
    }
    terms.hp_used = terms.hp_used.plus(terms.hp_dangling);
    terms.hp_max_used_requested = terms.hp_max_used_requested.plus(terms.hp_dangling);
    terms
}
