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

/// What one active high-priority pod takes, by the rules the node and its NUMA zones share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PodShare<'a> {
    /// The pod.
    pub pod: &'a PodFacts,
    /// Its request.
    pub requested: Amounts,
    /// Its usage; its request when unmeasured; CPU request and memory usage for an LSE pod.
    pub used: Amounts,
    /// max(request, usage) per resource; its request when unmeasured.
    pub max_used_requested: Amounts,
}

/// High-priority requests and usage pod by pod, before they are summed for the node or shared
/// out over its NUMA zones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HpAccounts<'a> {
    /// Every active high-priority pod of the list.
    pub pods: Vec<PodShare<'a>>,
    /// Usage of each high-priority pod reported by koordlet but not in the pod list.
    pub dangling: Vec<Amounts>,
}

/// Sorts out which pods count and what each takes.
///
/// Only Running and Pending pods count; batch and free pods do not. A pod without a usage
/// report counts its request (also in `maxUsageRequest`: upstream adds nothing there at node
/// level, see README, "Decisions"). An LSE pod's CPU is exclusive: its CPU request counts, not
/// its CPU usage. A reported pod that is no longer listed counts its usage unless the report
/// says batch or free; a listed pod that finished counts nothing, its report included. For a
/// key reported twice, the first report counts.
pub fn hp_accounts<'a>(pods: &'a [PodFacts], report: &UsageReport) -> HpAccounts<'a> {
    let mut usage_index: HashMap<(&str, &str), usize> = HashMap::with_capacity(report.pods.len());
    for (index, usage) in report.pods.iter().enumerate() {
        usage_index
            .entry((usage.namespace.as_str(), usage.name.as_str()))
            .or_insert(index);
    }
    let mut listed = vec![false; report.pods.len()];
    let mut accounts = HpAccounts::default();
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
        let share = match measured.and_then(|index| report.pods.get(index)) {
            None => PodShare {
                pod,
                requested: pod.request,
                used: pod.request,
                // An unmeasured pod may use its whole request any moment.
                max_used_requested: pod.request,
            },
            Some(measured) => PodShare {
                pod,
                requested: pod.request,
                used: if pod.lse {
                    Amounts::new(pod.request.cpu, measured.usage.memory)
                } else {
                    measured.usage
                },
                max_used_requested: pod.request.max(measured.usage),
            },
        };
        accounts.pods.push(share);
    }
    for (index, (usage, seen)) in report.pods.iter().zip(&listed).enumerate() {
        let first_of_key = usage_index.get(&(usage.namespace.as_str(), usage.name.as_str())) == Some(&index);
        if *seen || !usage.high_priority || !first_of_key {
            continue;
        }
        accounts.dangling.push(usage.usage);
    }
    accounts
}

/// The parts of a resource pool that do not depend on pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixedTerms {
    /// The pool's capacity (the node's capacity, a zone's allocatable).
    pub capacity: Amounts,
    /// The kubelet's reservation in the pool.
    pub kubelet_reserved: Amounts,
    /// The annotated reservation in the pool.
    pub annotated_reserved: Amounts,
    /// System usage in the pool: NodeMetric system usage plus host applications above batch
    /// priority.
    pub system: Amounts,
    /// The host-application part of `system` (for the explanation).
    pub host_applications: Amounts,
}

impl Terms {
    /// The terms of a pool before any pod is added: margin from the reclaim thresholds,
    /// `reserved = max(kubelet, annotated)`, `systemOrReserved = max(system, reserved)`.
    pub fn fixed(fixed: FixedTerms, reclaim_percent: Amounts) -> Terms {
        let capacity = fixed.capacity;
        let margin =
            Amounts::from_fn(|r| percent_of(capacity.get(r), 100i64.saturating_sub(reclaim_percent.get(r))));
        let reserved = fixed.kubelet_reserved.max(fixed.annotated_reserved);
        let system = fixed.system;
        Terms {
            capacity,
            margin,
            kubelet_reserved: fixed.kubelet_reserved,
            annotated_reserved: fixed.annotated_reserved,
            reserved,
            host_applications: fixed.host_applications,
            system,
            system_or_reserved: system.max(reserved),
            ..Terms::default()
        }
    }

    /// Adds (a part of) one high-priority pod.
    pub fn add_pod(&mut self, requested: Amounts, used: Amounts, max_used_requested: Amounts) {
        self.hp_requested = self.hp_requested.plus(requested);
        self.hp_used = self.hp_used.plus(used);
        self.hp_max_used_requested = self.hp_max_used_requested.plus(max_used_requested);
    }

    /// Adds (a part of) the usage of a reported pod that is no longer listed.
    pub fn add_dangling(&mut self, usage: Amounts) {
        self.hp_dangling = self.hp_dangling.plus(usage);
        self.hp_used = self.hp_used.plus(usage);
        self.hp_max_used_requested = self.hp_max_used_requested.plus(usage);
    }
}

/// Host applications above batch priority: system usage for batch resources.
pub fn host_applications_above_batch(report: &UsageReport) -> Amounts {
    report
        .host_applications
        .iter()
        .filter(|app| app.above_batch)
        .map(|app| app.usage)
        .sum()
}

/// Collects the node's terms. `system_usage` is the NodeMetric's `systemUsage`.
pub fn collect_terms(
    node: &NodeFacts,
    pods: &[PodFacts],
    report: &UsageReport,
    system_usage: Amounts,
    reclaim_percent: Amounts,
) -> Terms {
    let host_applications = host_applications_above_batch(report);
    let fixed = FixedTerms {
        capacity: node.capacity,
        kubelet_reserved: node.kubelet_reserved(),
        annotated_reserved: node.annotated_reservation,
        system: system_usage.plus(host_applications),
        host_applications,
    };
    let mut terms = Terms::fixed(fixed, reclaim_percent);
    let accounts = hp_accounts(pods, report);
    for share in &accounts.pods {
        terms.add_pod(share.requested, share.used, share.max_used_requested);
    }
    for usage in &accounts.dangling {
        terms.add_dangling(*usage);
    }
    terms
}
