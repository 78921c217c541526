//! Mid resources: `kubernetes.io/mid-cpu` / `mid-memory` on the Node, the capacity that
//! `koord-mid` pods (the webhook rewrites their `cpu`/`memory` to these) may be scheduled on.
//!
//! ```text
//! static mode   : mid = min(capacity × midStatic*ReservedPercent, capacity × mid*ThresholdPercent) / 100
//! default mode  :
//!   reclaimable = NodeMetric prodReclaimableMetric (koordlet's prediction; 0 when absent)
//!   unused      = capacity − NodeMetric nodeUsage (0 when the usage is not reported)
//!   reserved    = max(system usage + prod host applications, capacity − allocatable, annotated reservation)
//!   unallocated = max(capacity − reserved − Σ requests of active prod pods, 0)
//!   mid         = min(max(min(reclaimable, unused), 0) + unallocated × midUnallocatedPercent / 100,
//!                     capacity × mid*ThresholdPercent / 100)
//! ```
//!
//! Prod pods here are those whose priority (with default) is neither koord-mid, koord-batch nor
//! koord-free. Mid resources degrade (are removed) by the same NodeMetric staleness rule as
//! batch resources. Pure, like [`crate::batch`].

use jiff::Timestamp;
use koord_api::config::ColocationStrategy;
use serde::Serialize;

use crate::batch::{
    Amounts, DegradeReason, NodeFacts, PodFacts, Resource, UsageReport, fresh_report, percent_of,
};

/// The numbers of the node's colocation strategy mid resources read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MidStrategy {
    /// Colocation is on for the node.
    pub enable: bool,
    /// `degradeTimeMinutes`.
    pub degrade_time_minutes: i64,
    /// `midReclaimMode: static`.
    pub static_mode: bool,
    /// `midCPUThresholdPercent` / `midMemoryThresholdPercent` (default 100).
    pub threshold_percent: Amounts,
    /// `midUnallocatedPercent` (default 0), for both resources.
    pub unallocated_percent: i64,
    /// `midStaticCPUReservedPercent` / `midStaticMemoryReservedPercent` (default 0).
    pub static_reserved_percent: Amounts,
}

/// The mid strategy of a (node-merged) colocation strategy.
pub fn mid_strategy(strategy: &ColocationStrategy, degrade_time_minutes: i64) -> MidStrategy {
    MidStrategy {
        enable: strategy.enable.unwrap_or(false),
        degrade_time_minutes,
        static_mode: strategy.mid_reclaim_mode.as_deref() == Some("static"),
        threshold_percent: Amounts::new(
            strategy.mid_cpu_threshold_percent.unwrap_or(100),
            strategy.mid_memory_threshold_percent.unwrap_or(100),
        ),
        unallocated_percent: strategy.mid_unallocated_percent.unwrap_or(0),
        static_reserved_percent: Amounts::new(
            strategy.mid_static_cpu_reserved_percent.unwrap_or(0),
            strategy.mid_static_memory_reserved_percent.unwrap_or(0),
        ),
    }
}

/// The terms of one calculation, for logs, Events and `calc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MidTerms {
    /// Node capacity.
    pub capacity: Amounts,
    /// `capacity × mid*ThresholdPercent / 100`.
    pub cap: Amounts,
    /// koordlet's `prodReclaimableMetric` (0 when absent).
    pub prod_reclaimable: Amounts,
    /// `capacity − nodeUsage` (0 when the node usage is not reported).
    pub unused: Amounts,
    /// `max(system + prod host applications, kubelet and annotated reservation)`.
    pub reserved: Amounts,
    /// Σ requests of active prod pods.
    pub prod_requested: Amounts,
    /// `max(capacity − reserved − prod_requested, 0)`.
    pub unallocated: Amounts,
    /// `midUnallocatedPercent`.
    pub unallocated_percent: i64,
    /// The result.
    pub mid: Amounts,
}

/// What the mid calculation decided for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MidOutcome {
    /// Colocation is off for the node: mid resources are removed.
    Disabled,
    /// Usage data cannot be trusted: mid resources are removed.
    Degraded(DegradeReason),
    /// `midReclaimMode: static`.
    Static(MidTerms),
    /// From koordlet's prediction and the unallocated share.
    Allocatable(MidTerms),
}

impl MidOutcome {
    /// The amounts to publish, when there are any.
    pub fn amounts(&self) -> Option<Amounts> {
        match self {
            MidOutcome::Static(t) | MidOutcome::Allocatable(t) => Some(t.mid),
            MidOutcome::Disabled | MidOutcome::Degraded(_) => None,
        }
    }
}

impl std::fmt::Display for MidOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MidOutcome::Disabled => write!(f, "colocation is disabled for this node"),
            MidOutcome::Degraded(reason) => write!(f, "mid resources removed: {reason}"),
            MidOutcome::Static(t) => {
                for (i, r) in Resource::BOTH.into_iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(
                        f,
                        "{sep}{} {} = min(static reserved, cap {}) of capacity {}",
                        r.mid_name(),
                        t.mid.get(r),
                        t.cap.get(r),
                        t.capacity.get(r)
                    )?;
                }
                Ok(())
            }
            MidOutcome::Allocatable(t) => {
                for (i, r) in Resource::BOTH.into_iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(
                        f,
                        "{sep}{} {} = min(max(min(prodReclaimable {}, unused {}), 0) + unallocated {} × {}%, cap {})",
                        r.mid_name(),
                        t.mid.get(r),
                        t.prod_reclaimable.get(r),
                        t.unused.get(r),
                        t.unallocated.get(r),
                        t.unallocated_percent,
                        t.cap.get(r)
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// Computes mid resources for one node at `now`.
pub fn calculate(
    node: &NodeFacts,
    pods: &[PodFacts],
    report: Option<&UsageReport>,
    strategy: &MidStrategy,
    now: Timestamp,
) -> MidOutcome {
    if !strategy.enable {
        return MidOutcome::Disabled;
    }
    let (report, system_usage) = match fresh_report(report, strategy.degrade_time_minutes, now) {
        Ok(fresh) => fresh,
        Err(reason) => return MidOutcome::Degraded(reason),
    };
    let capacity = node.capacity;
    let cap = Amounts::from_fn(|r| percent_of(capacity.get(r), strategy.threshold_percent.get(r)));
    if strategy.static_mode {
        let reserved =
            Amounts::from_fn(|r| percent_of(capacity.get(r), strategy.static_reserved_percent.get(r)));
        return MidOutcome::Static(MidTerms {
            capacity,
            cap,
            mid: reserved.min(cap).floor_zero(),
            ..MidTerms::default()
        });
    }
    let prod_reclaimable = report.prod_reclaimable.unwrap_or(Amounts::ZERO);
    let unused = report
        .node_usage
        .map_or(Amounts::ZERO, |usage| capacity.minus(usage));
    let prod_host_applications: Amounts = report
        .host_applications
        .iter()
        .filter(|app| app.above_mid)
        .map(|app| app.usage)
        .sum();
    let reserved = system_usage.plus(prod_host_applications).max(node.reserved());
    let prod_requested: Amounts = pods
        .iter()
        .filter(|p| p.active && p.high_priority && !p.mid)
        .map(|p| p.request)
        .sum();
    let unallocated = capacity.minus(reserved).minus(prod_requested).floor_zero();
    let allocatable = prod_reclaimable.min(unused).floor_zero();
    let mid = Amounts::from_fn(|r| {
        allocatable
            .get(r)
            .saturating_add(percent_of(unallocated.get(r), strategy.unallocated_percent))
    })
    .min(cap)
    .floor_zero();
    MidOutcome::Allocatable(MidTerms {
        capacity,
        cap,
        prod_reclaimable,
        unused,
        reserved,
        prod_requested,
        unallocated,
        unallocated_percent: strategy.unallocated_percent,
        mid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: i64 = 1_000_000_000;

    fn strategy() -> MidStrategy {
        mid_strategy(
            &ColocationStrategy {
                enable: Some(true),
                ..ColocationStrategy::default()
            },
            15,
        )
    }

    fn node() -> NodeFacts {
        NodeFacts {
            capacity: Amounts::new(100_000, 120 * G),
            allocatable: Amounts::new(100_000, 120 * G),
            ..NodeFacts::default()
        }
    }

    fn report(reclaimable: Option<Amounts>, usage: Option<Amounts>) -> UsageReport {
        UsageReport {
            update_time: Some(now()),
            system_usage: Some(Amounts::new(7_000, 12 * G)),
            node_usage: usage,
            prod_reclaimable: reclaimable,
            ..UsageReport::default()
        }
    }

    fn now() -> Timestamp {
        "2026-11-22T10:00:00Z".parse().unwrap()
    }

    fn pod(request: Amounts, high_priority: bool, mid: bool) -> PodFacts {
        PodFacts {
            active: true,
            high_priority,
            mid,
            request,
            ..PodFacts::default()
        }
    }

    #[test]
    fn upstream_example_prod_reclaimable_bounded_by_unused() {
        // Upstream's test: ProdReclaimable 10 cores / 20G, unused 50 cores / 65G → 10000 / 20G.
        let r = report(
            Some(Amounts::new(10_000, 20 * G)),
            Some(Amounts::new(50_000, 55 * G)),
        );
        let out = calculate(&node(), &[], Some(&r), &strategy(), now());
        assert_eq!(out.amounts(), Some(Amounts::new(10_000, 20 * G)));
        // The prediction is bounded by what the node does not use.
        let busy = report(
            Some(Amounts::new(10_000, 20 * G)),
            Some(Amounts::new(95_000, 110 * G)),
        );
        let out = calculate(&node(), &[], Some(&busy), &strategy(), now());
        assert_eq!(out.amounts(), Some(Amounts::new(5_000, 10 * G)));
    }

    #[test]
    fn without_a_prediction_or_node_usage_only_the_unallocated_share_counts() {
        let mut s = strategy();
        let pods = [
            pod(Amounts::new(20_000, 20 * G), true, false),
            // Mid and batch pods do not take prod capacity; inactive pods hold nothing.
            pod(Amounts::new(30_000, 30 * G), true, true),
            pod(Amounts::new(30_000, 30 * G), false, false),
            PodFacts {
                active: false,
                ..pod(Amounts::new(40_000, 40 * G), true, false)
            },
        ];
        let r = report(None, None);
        assert_eq!(
            calculate(&node(), &pods, Some(&r), &s, now()).amounts(),
            Some(Amounts::ZERO),
            "default midUnallocatedPercent 0"
        );
        s.unallocated_percent = 50;
        // unallocated = 100 − max(7, 0) − 20 = 73 cores; 120 − 12 − 20 = 88G; half of each.
        let out = calculate(&node(), &pods, Some(&r), &s, now());
        assert_eq!(out.amounts(), Some(Amounts::new(36_500, 44 * G)));
        // Capped by midThresholdPercent.
        s.threshold_percent = Amounts::new(30, 100);
        let out = calculate(&node(), &pods, Some(&r), &s, now());
        assert_eq!(out.amounts(), Some(Amounts::new(30_000, 44 * G)));
        assert!(out.to_string().contains("kubernetes.io/mid-cpu 30000"), "{out}");
    }

    #[test]
    fn static_mode_and_degrade_and_disabled() {
        let mut s = strategy();
        s.static_mode = true;
        s.static_reserved_percent = Amounts::new(20, 10);
        s.threshold_percent = Amounts::new(15, 100);
        let r = report(None, None);
        let out = calculate(&node(), &[], Some(&r), &s, now());
        assert_eq!(out.amounts(), Some(Amounts::new(15_000, 12 * G)));
        assert!(matches!(out, MidOutcome::Static(_)));

        let stale = UsageReport {
            update_time: Some("2026-11-22T09:40:00Z".parse().unwrap()),
            ..report(None, None)
        };
        assert!(matches!(
            calculate(&node(), &[], Some(&stale), &strategy(), now()),
            MidOutcome::Degraded(DegradeReason::Stale { .. })
        ));
        assert!(matches!(
            calculate(&node(), &[], None, &strategy(), now()),
            MidOutcome::Degraded(DegradeReason::NodeMetricMissing)
        ));
        let off = MidStrategy {
            enable: false,
            ..strategy()
        };
        assert_eq!(
            calculate(&node(), &[], Some(&r), &off, now()),
            MidOutcome::Disabled
        );
    }

    #[test]
    fn prod_host_applications_and_reservations_count_as_reserved() {
        let mut s = strategy();
        s.unallocated_percent = 100;
        let mut r = report(None, None);
        r.host_applications = vec![
            crate::batch::HostApplicationUsage {
                name: "prod-agent".into(),
                above_batch: true,
                above_mid: true,
                usage: Amounts::new(3_000, 3 * G),
            },
            crate::batch::HostApplicationUsage {
                name: "mid-agent".into(),
                above_batch: true,
                above_mid: false,
                usage: Amounts::new(50_000, 50 * G),
            },
        ];
        let mut n = node();
        n.allocatable = Amounts::new(85_000, 120 * G);
        // reserved = max(7 + 3, 15) cores = 15; max(12 + 3, 0) = 15G.
        let out = calculate(&n, &[], Some(&r), &s, now());
        assert_eq!(out.amounts(), Some(Amounts::new(85_000, 105 * G)));
    }
}
