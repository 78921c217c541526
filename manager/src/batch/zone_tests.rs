//! Table tests of the NUMA-level formula. Every expected number is worked out by hand below
//! from the rules (per zone: capacity = zone allocatable, margin on it, reserved / system /
//! dangling usage ⌈÷ zone count⌉, a placed pod ⌈÷ its NUMA node count⌉ on each of them).

use std::collections::BTreeMap;

use jiff::Timestamp;
use koord_api::cpu_normalization::NormalizationRatio;
use pretty_assertions::assert_eq;

use super::*;

const GB: i64 = 1_000_000_000;

fn now() -> Timestamp {
    "2026-11-22T10:00:00Z".parse().unwrap()
}

/// Node 100 cores / 120 G, nothing reserved.
fn node() -> NodeFacts {
    NodeFacts {
        capacity: Amounts::new(100_000, 120 * GB),
        allocatable: Amounts::new(100_000, 120 * GB),
        ..NodeFacts::default()
    }
}

fn zone(name: &str, cpu: i64, memory: i64) -> ZoneFacts {
    ZoneFacts {
        name: name.into(),
        allocatable: Amounts::new(cpu, memory),
        lists_cpu_or_memory: true,
    }
}

/// Two NUMA zones of 50 cores / 60 G each.
fn two_zones() -> Vec<ZoneFacts> {
    vec![zone("node-0", 50_000, 60 * GB), zone("node-1", 50_000, 60 * GB)]
}

/// A high-priority LS pod.
fn pod(name: &str, request: Amounts, numa: NumaPlacement) -> PodFacts {
    PodFacts {
        namespace: "default".into(),
        name: name.into(),
        active: true,
        high_priority: true,
        request,
        numa,
        ..PodFacts::default()
    }
}

fn on(ids: &[u32]) -> NumaPlacement {
    NumaPlacement::Nodes(ids.to_vec())
}

fn usage(name: &str, high_priority: bool, usage: Amounts) -> PodUsage {
    PodUsage {
        namespace: "default".into(),
        name: name.into(),
        high_priority,
        usage,
    }
}

/// System usage 7 cores / 12 G: 3500 / 6 G per zone of two.
fn report(pods: Vec<PodUsage>) -> UsageReport {
    UsageReport {
        update_time: Some(now()),
        system_usage: Some(Amounts::new(7_000, 12 * GB)),
        pods,
        ..UsageReport::default()
    }
}

/// Reclaim 65 %: margin 17.5 cores / 21 G per zone of 50 cores / 60 G.
fn strategy() -> BatchStrategy {
    BatchStrategy {
        enable: true,
        cpu_reclaim_percent: 65,
        memory_reclaim_percent: 65,
        ..BatchStrategy::default()
    }
}

fn zones_of(outcome: &ZoneOutcome) -> Vec<(String, Amounts)> {
    match outcome {
        ZoneOutcome::Allocatable { zones, .. } => zones.iter().map(|z| (z.name.clone(), z.amounts)).collect(),
        other => panic!("expected zone amounts, got {other:?}"),
    }
}

fn notes_of(outcome: &ZoneOutcome) -> Vec<String> {
    match outcome {
        ZoneOutcome::Allocatable { notes, .. } => notes.clone(),
        other => panic!("expected zone amounts, got {other:?}"),
    }
}

fn expect(pairs: &[(&str, i64, i64)]) -> Vec<(String, Amounts)> {
    pairs
        .iter()
        .map(|(name, cpu, memory)| ((*name).to_owned(), Amounts::new(*cpu, *memory)))
        .collect()
}

/// An empty zone of two: 50000 − 17500 − 3500 = 29000; 60 − 21 − 6 = 33 G.
const IDLE: (i64, i64) = (29_000, 33 * GB);

#[test]
fn pods_bound_to_one_zone_take_from_that_zone_only() {
    let pods = [
        pod("a", Amounts::new(20_000, 20 * GB), on(&[0])),
        pod("c", Amounts::new(40_000, 40 * GB), on(&[0])),
    ];
    let report = report(vec![
        usage("a", true, Amounts::new(5_000, 5 * GB)),
        usage("c", true, Amounts::new(10_000, 10 * GB)),
    ]);
    let outcome = calculate_zones(&node(), &two_zones(), &pods, Some(&report), &strategy(), now());
    // node-0: 50000 − 17500 − 3500 − (5000 + 10000) = 14000; 60 − 21 − 6 − 15 = 18 G.
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", 14_000, 18 * GB), ("node-1", IDLE.0, IDLE.1)])
    );
    // Without rounding, the zones add up to the node: 100000 − 35000 − 7000 − 15000 = 43000.
    let node_level = calculate(&node(), &pods, Some(&report), &strategy(), now());
    assert_eq!(node_level.amounts(), Some(Amounts::new(43_000, 51 * GB)));
    let ZoneOutcome::Allocatable { zones, .. } = outcome else {
        unreachable!()
    };
    assert_eq!(
        zones[0].explain.cpu.to_string(),
        "14000 = capacity 50000 - margin 17500 - max(system 3500, reserved 0) - hpUsed 15000"
    );
    assert_eq!(zones[0].explain.cpu.hp_requested, 60_000);
}

#[test]
fn a_pod_on_two_numa_nodes_and_a_pod_without_placement_are_split_evenly() {
    let report = report(vec![usage("p", true, Amounts::new(6_000, 6 * GB))]);
    // Both: 3000 / 3 G on each zone → 50000 − 17500 − 3500 − 3000 = 26000; 60 − 21 − 6 − 3 = 30 G.
    let both = expect(&[("node-0", 26_000, 30 * GB), ("node-1", 26_000, 30 * GB)]);
    for placement in [on(&[0, 1]), NumaPlacement::Shared] {
        let pods = [pod("p", Amounts::new(20_000, 20 * GB), placement.clone())];
        let outcome = calculate_zones(&node(), &two_zones(), &pods, Some(&report), &strategy(), now());
        assert_eq!(zones_of(&outcome), both, "{placement:?}");
        assert!(notes_of(&outcome).is_empty());
    }
}

#[test]
fn shares_round_up_per_zone() {
    // Three zones of 30 cores / 40 G; system 1 core / 10 bytes; one shared pod using 1 core.
    let zones = [
        zone("node-0", 30_000, 40 * GB),
        zone("node-1", 30_000, 40 * GB),
        zone("node-2", 30_000, 40 * GB),
    ];
    let mut report = report(vec![usage("p", true, Amounts::new(1_000, 0))]);
    report.system_usage = Some(Amounts::new(1_000, 10));
    let pods = [pod("p", Amounts::new(2_000, 0), NumaPlacement::Shared)];
    let outcome = calculate_zones(&node(), &zones, &pods, Some(&report), &strategy(), now());
    // cpu: 30000 − 10500 − ⌈1000/3⌉ 334 − ⌈1000/3⌉ 334 = 18832.
    // memory: 40 G − 14 G − ⌈10/3⌉ 4 − 0 = 25999999996.
    let each = (18_832, 26 * GB - 4);
    assert_eq!(
        zones_of(&outcome),
        expect(&[
            ("node-0", each.0, each.1),
            ("node-1", each.0, each.1),
            ("node-2", each.0, each.1)
        ])
    );
}

#[test]
fn reservations_are_shared_out_rounded_up_and_beat_smaller_system_usage() {
    // capacity 90 cores, allocatable 89: the kubelet reserves 1000 → ⌈1000/3⌉ = 334 per zone;
    // the annotation reserves 2 cores → 667 per zone; reserved = max = 667 > system 334.
    let node = NodeFacts {
        capacity: Amounts::new(90_000, 120 * GB),
        allocatable: Amounts::new(89_000, 120 * GB),
        annotated_reservation: Amounts::new(2_000, 0),
        ..NodeFacts::default()
    };
    let zones = [
        zone("node-0", 30_000, 40 * GB),
        zone("node-1", 30_000, 40 * GB),
        zone("node-2", 30_000, 40 * GB),
    ];
    let mut report = report(vec![]);
    report.system_usage = Some(Amounts::new(1_000, 10));
    let outcome = calculate_zones(&node, &zones, &[], Some(&report), &strategy(), now());
    // cpu: 30000 − 10500 − max(334, 667) = 18833; memory: 40 G − 14 G − 4 = 25999999996.
    let ZoneOutcome::Allocatable { zones, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(zones[2].amounts, Amounts::new(18_833, 26 * GB - 4));
    assert_eq!(zones[2].explain.cpu.kubelet_reserved, 334);
    assert_eq!(zones[2].explain.cpu.annotated_reserved, 667);
    assert_eq!(zones[2].explain.cpu.system, 334);
    // The memory request policy subtracts the reservation, not system usage: 0 here.
    let request = BatchStrategy {
        memory_policy: CalculatePolicy::Request,
        ..strategy()
    };
    let outcome = calculate_zones(&node, &zones_three(), &[], Some(&report), &request, now());
    assert_eq!(zones_of(&outcome)[0].1.memory, 26 * GB);
}

fn zones_three() -> Vec<ZoneFacts> {
    vec![
        zone("node-0", 30_000, 40 * GB),
        zone("node-1", 30_000, 40 * GB),
        zone("node-2", 30_000, 40 * GB),
    ]
}

#[test]
fn lse_pod_counts_its_cpu_request_with_or_without_a_report() {
    let mut lse = pod("lse", Amounts::new(8_000, 8 * GB), on(&[0]));
    lse.lse = true;
    // Measured (2 cores / 3 G): used = cpu request 8000 + memory usage 3 G on node-0:
    // 50000 − 17500 − 3500 − 8000 = 21000; 60 − 21 − 6 − 3 = 30 G.
    let measured = report(vec![usage("lse", true, Amounts::new(2_000, 3 * GB))]);
    let outcome = calculate_zones(
        &node(),
        &two_zones(),
        &[lse.clone()],
        Some(&measured),
        &strategy(),
        now(),
    );
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", 21_000, 30 * GB), ("node-1", IDLE.0, IDLE.1)])
    );
    // maxUsageRequest: max(request, usage) = 8000 / 8 G → 21000; 60 − 21 − 6 − 8 = 25 G.
    let max = BatchStrategy {
        cpu_policy: CalculatePolicy::MaxUsageRequest,
        memory_policy: CalculatePolicy::MaxUsageRequest,
        ..strategy()
    };
    let outcome = calculate_zones(
        &node(),
        &two_zones(),
        &[lse.clone()],
        Some(&measured),
        &max,
        now(),
    );
    assert_eq!(zones_of(&outcome)[0].1, Amounts::new(21_000, 25 * GB));
    // Unmeasured: the whole request, 8000 / 8 G → 21000; 25 G.
    let unmeasured = report(vec![]);
    let outcome = calculate_zones(
        &node(),
        &two_zones(),
        &[lse],
        Some(&unmeasured),
        &strategy(),
        now(),
    );
    assert_eq!(zones_of(&outcome)[0].1, Amounts::new(21_000, 25 * GB));
}

#[test]
fn an_unmeasured_pod_counts_its_request_in_every_policy() {
    // Request 10 cores / 10 G on node-1, no report: usage and maxUsageRequest both subtract it
    // (the node level does the same; see README, "Decisions").
    let pods = [pod("new", Amounts::new(10_000, 10 * GB), on(&[1]))];
    for policy in [CalculatePolicy::Usage, CalculatePolicy::MaxUsageRequest] {
        let s = BatchStrategy {
            cpu_policy: policy,
            memory_policy: policy,
            ..strategy()
        };
        let outcome = calculate_zones(&node(), &two_zones(), &pods, Some(&report(vec![])), &s, now());
        // node-1: 50000 − 17500 − 3500 − 10000 = 19000; 60 − 21 − 6 − 10 = 23 G.
        assert_eq!(
            zones_of(&outcome),
            expect(&[("node-0", IDLE.0, IDLE.1), ("node-1", 19_000, 23 * GB)]),
            "{policy:?}"
        );
    }
}

#[test]
fn dangling_usage_is_split_over_every_zone_unless_reported_as_batch() {
    let report = report(vec![
        usage("gone", true, Amounts::new(4_000, 4 * GB)),
        usage("gone-batch", false, Amounts::new(10_000, 10 * GB)),
    ]);
    let outcome = calculate_zones(&node(), &two_zones(), &[], Some(&report), &strategy(), now());
    // 2000 / 2 G per zone: 50000 − 17500 − 3500 − 2000 = 27000; 60 − 21 − 6 − 2 = 31 G.
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", 27_000, 31 * GB), ("node-1", 27_000, 31 * GB)])
    );
    let ZoneOutcome::Allocatable { zones, .. } = outcome else {
        unreachable!()
    };
    assert_eq!(zones[1].explain.memory.hp_dangling, 2 * GB);
}

#[test]
fn batch_pods_and_finished_pods_count_nothing() {
    let mut be = pod("be", Amounts::new(10_000, 10 * GB), on(&[0]));
    be.high_priority = false;
    let mut done = pod("done", Amounts::new(10_000, 10 * GB), on(&[0]));
    done.active = false;
    // Both are reported; neither the pods nor their reports (not dangling: listed) count.
    let report = report(vec![
        usage("be", false, Amounts::new(9_000, 9 * GB)),
        usage("done", true, Amounts::new(9_000, 9 * GB)),
    ]);
    let outcome = calculate_zones(
        &node(),
        &two_zones(),
        &[be, done],
        Some(&report),
        &strategy(),
        now(),
    );
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", IDLE.0, IDLE.1), ("node-1", IDLE.0, IDLE.1)])
    );
}

#[test]
fn a_zone_with_memory_only_gets_no_batch_cpu() {
    let zones = [
        zone("node-0", 50_000, 60 * GB),
        ZoneFacts {
            name: "node-1".into(),
            allocatable: Amounts::new(0, 60 * GB),
            lists_cpu_or_memory: true,
        },
    ];
    let outcome = calculate_zones(&node(), &zones, &[], Some(&report(vec![])), &strategy(), now());
    // node-1 cpu: 0 − 0 − 3500 < 0 → 0; memory as any idle zone.
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", IDLE.0, IDLE.1), ("node-1", 0, IDLE.1)])
    );
}

#[test]
fn thresholds_cap_each_zone_by_a_share_of_its_allocatable() {
    let s = BatchStrategy {
        batch_cpu_threshold_percent: Some(20),
        batch_memory_threshold_percent: Some(50),
        ..strategy()
    };
    let outcome = calculate_zones(&node(), &two_zones(), &[], Some(&report(vec![])), &s, now());
    // cpu: min(29000, 50000 × 20 %) = 10000; memory: min(33 G, 60 G × 50 %) = 30 G.
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", 10_000, 30 * GB), ("node-1", 10_000, 30 * GB)])
    );
}

#[test]
fn request_and_max_usage_request_policies_per_zone() {
    let pods = [pod("a", Amounts::new(20_000, 20 * GB), on(&[0]))];
    let report = report(vec![usage("a", true, Amounts::new(5_000, 5 * GB))]);
    let s = BatchStrategy {
        cpu_policy: CalculatePolicy::MaxUsageRequest,
        memory_policy: CalculatePolicy::Request,
        ..strategy()
    };
    let outcome = calculate_zones(&node(), &two_zones(), &pods, Some(&report), &s, now());
    // cpu node-0: 50000 − 17500 − 3500 − max(20000, 5000) = 9000.
    // memory node-0 (request): 60 − 21 − reserved 0 − 20 = 19 G; node-1: 39 G.
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", 9_000, 19 * GB), ("node-1", IDLE.0, 39 * GB)])
    );
}

#[test]
fn numa_nodes_without_a_zone_are_ignored_and_said() {
    let report = report(vec![]);
    // [0, 5]: only node-0 exists → the whole request (4000 / 4 G) on node-0.
    let partly = [pod("p", Amounts::new(4_000, 4 * GB), on(&[0, 5]))];
    let outcome = calculate_zones(&node(), &two_zones(), &partly, Some(&report), &strategy(), now());
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", 25_000, 29 * GB), ("node-1", IDLE.0, IDLE.1)])
    );
    assert_eq!(
        notes_of(&outcome),
        ["pod default/p: NUMA node(s) [5] have no zone in the NodeResourceTopology"]
    );
    // [5] only: split over every zone (2000 / 2 G each).
    let nowhere = [pod("p", Amounts::new(4_000, 4 * GB), on(&[5]))];
    let outcome = calculate_zones(&node(), &two_zones(), &nowhere, Some(&report), &strategy(), now());
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", 27_000, 31 * GB), ("node-1", 27_000, 31 * GB)])
    );
    assert_eq!(
        notes_of(&outcome),
        ["pod default/p: NUMA node(s) [5] have no zone in the NodeResourceTopology; counted on every zone"]
    );
}

#[test]
fn an_unreadable_placement_counts_on_every_zone_and_is_said() {
    let pods = [pod(
        "p",
        Amounts::new(4_000, 4 * GB),
        NumaPlacement::Unreadable("bad annotation".into()),
    )];
    let outcome = calculate_zones(
        &node(),
        &two_zones(),
        &pods,
        Some(&report(vec![])),
        &strategy(),
        now(),
    );
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", 27_000, 31 * GB), ("node-1", 27_000, 31 * GB)])
    );
    assert_eq!(
        notes_of(&outcome),
        ["pod default/p: bad annotation; counted on every zone"]
    );
}

#[test]
fn zones_named_otherwise_take_shared_pods_only() {
    // A zone not named node-<id> (a socket) still counts in the division and takes shared pods,
    // but a pod bound to NUMA node 0 lands on node-0 only.
    let zones = [zone("node-0", 50_000, 60 * GB), zone("socket-0", 50_000, 60 * GB)];
    let pods = [pod("p", Amounts::new(4_000, 4 * GB), on(&[0]))];
    let outcome = calculate_zones(&node(), &zones, &pods, Some(&report(vec![])), &strategy(), now());
    assert_eq!(
        zones_of(&outcome),
        expect(&[("node-0", 25_000, 29 * GB), ("socket-0", IDLE.0, IDLE.1)])
    );
    assert_eq!(numa_id_of_zone("node-12"), Some(12));
    for name in ["node-", "node-x", "node--1", "socket-0", "node-+1"] {
        assert_eq!(numa_id_of_zone(name), None, "{name}");
    }
}

#[test]
fn nothing_is_computed_without_zones_when_disabled_or_degraded() {
    let report = report(vec![]);
    let no_resources = [ZoneFacts {
        name: "node-0".into(),
        allocatable: Amounts::ZERO,
        lists_cpu_or_memory: false,
    }];
    for zones in [&[][..], &no_resources[..]] {
        assert_eq!(
            calculate_zones(&node(), zones, &[], Some(&report), &strategy(), now()),
            ZoneOutcome::NoZones
        );
    }
    let disabled = BatchStrategy {
        enable: false,
        ..strategy()
    };
    assert_eq!(
        calculate_zones(&node(), &two_zones(), &[], Some(&report), &disabled, now()),
        ZoneOutcome::Disabled
    );
    assert_eq!(
        calculate_zones(&node(), &two_zones(), &[], None, &strategy(), now()),
        ZoneOutcome::Degraded(DegradeReason::NodeMetricMissing)
    );
    let stale = UsageReport {
        update_time: Some("2026-11-22T09:00:00Z".parse().unwrap()),
        ..report
    };
    assert!(matches!(
        calculate_zones(&node(), &two_zones(), &[], Some(&stale), &strategy(), now()),
        ZoneOutcome::Degraded(DegradeReason::Stale { .. })
    ));
}

#[test]
fn zone_targets_scale_batch_cpu_by_the_normalization_ratio_and_floor_at_zero() {
    let outcome = calculate_zones(
        &node(),
        &two_zones(),
        &[],
        Some(&report(vec![])),
        &strategy(),
        now(),
    );
    let ZoneOutcome::Allocatable { zones, .. } = outcome else {
        unreachable!()
    };
    let ratio = NormalizationRatio::parse("1.20").unwrap();
    // 29000 × 1.2 = 34800; memory unchanged.
    assert_eq!(
        zone_targets(&zones, ratio),
        BTreeMap::from([
            ("node-0".to_owned(), Amounts::new(34_800, 33 * GB)),
            ("node-1".to_owned(), Amounts::new(34_800, 33 * GB)),
        ])
    );
}

/// A case of the update decision: name, the zones' entries, the last write, the decision.
type ZoneCase = (
    &'static str,
    BTreeMap<String, ZoneEntries>,
    Option<Timestamp>,
    UpdateDecision,
);

fn entries(cpu: Option<i64>, memory: Option<i64>) -> ZoneEntries {
    let values = PublishedValues { cpu, memory };
    ZoneEntries {
        capacity: values,
        allocatable: values,
        available: values,
    }
}

#[test]
fn zone_update_decision_table() {
    let s = strategy(); // resourceDiffThreshold 0.1, updateTimeThresholdSeconds 300
    let recent: Timestamp = "2026-11-22T09:58:00Z".parse().unwrap();
    let old: Timestamp = "2026-11-22T09:54:00Z".parse().unwrap();
    let targets = BTreeMap::from([("node-0".to_owned(), Amounts::new(10_000, 10 * GB))]);
    let current = |node0: ZoneEntries| BTreeMap::from([("node-0".to_owned(), node0)]);
    let cases: Vec<ZoneCase> = vec![
        (
            "same values",
            current(entries(Some(10_000), Some(10 * GB))),
            Some(recent),
            UpdateDecision::Unchanged,
        ),
        (
            "same values, long after the last write",
            current(entries(Some(10_000), Some(10 * GB))),
            Some(old),
            UpdateDecision::Unchanged,
        ),
        (
            "no batch entries yet",
            current(entries(None, None)),
            Some(recent),
            UpdateDecision::Write(UpdateReason::Presence {
                resource: "kubernetes.io/batch-cpu",
            }),
        ),
        (
            "moved by more than 10 %",
            current(entries(Some(8_000), Some(10 * GB))),
            Some(recent),
            UpdateDecision::Write(UpdateReason::Changed {
                resource: "kubernetes.io/batch-cpu",
                old: 8_000,
                new: 10_000,
            }),
        ),
        (
            "small move, written recently",
            current(entries(Some(9_500), Some(10 * GB))),
            Some(recent),
            UpdateDecision::Postpone,
        ),
        (
            "small move, last write older than updateTimeThresholdSeconds",
            current(entries(Some(9_500), Some(10 * GB))),
            Some(old),
            UpdateDecision::Write(UpdateReason::Refresh),
        ),
        (
            "small move, never written by this process",
            current(entries(Some(9_500), Some(10 * GB))),
            None,
            UpdateDecision::Write(UpdateReason::FirstSync),
        ),
        (
            "only available differs by much",
            current(ZoneEntries {
                available: PublishedValues {
                    cpu: Some(1_000),
                    memory: Some(10 * GB),
                },
                ..entries(Some(10_000), Some(10 * GB))
            }),
            Some(recent),
            UpdateDecision::Write(UpdateReason::Changed {
                resource: "kubernetes.io/batch-cpu",
                old: 1_000,
                new: 10_000,
            }),
        ),
    ];
    for (case, current, last, expected) in cases {
        assert_eq!(
            decide_zone_update(&current, &targets, last, now(), &s),
            expected,
            "{case}"
        );
    }

    // A zone without a result: its batch entries go to 0; a zone without any stays as it is.
    let unknown = BTreeMap::from([
        ("node-0".to_owned(), entries(Some(10_000), Some(10 * GB))),
        ("node-9".to_owned(), entries(Some(5_000), None)),
        ("socket-0".to_owned(), entries(None, None)),
    ]);
    assert_eq!(
        decide_zone_update(&unknown, &targets, Some(recent), now(), &s),
        UpdateDecision::Write(UpdateReason::Changed {
            resource: "kubernetes.io/batch-cpu",
            old: 5_000,
            new: 0,
        })
    );
    let zeroed = BTreeMap::from([
        ("node-0".to_owned(), entries(Some(10_000), Some(10 * GB))),
        ("node-9".to_owned(), entries(Some(0), None)),
        ("socket-0".to_owned(), entries(None, None)),
    ]);
    assert_eq!(
        decide_zone_update(&zeroed, &targets, Some(recent), now(), &s),
        UpdateDecision::Unchanged
    );
}

#[test]
fn system_usage_and_host_applications_are_shared_out_as_one_sum() {
    let mut report = report(vec![]);
    report.system_usage = Some(Amounts::new(7_001, 12 * GB));
    report.host_applications = vec![
        HostApplicationUsage {
            name: "prod-agent".into(),
            above_batch: true,
            above_mid: true,
            usage: Amounts::new(1_001, 0),
        },
        HostApplicationUsage {
            name: "yarn".into(),
            above_batch: false,
            above_mid: false,
            usage: Amounts::new(20_000, 20 * GB),
        },
    ];
    let outcome = calculate_zones(&node(), &two_zones(), &[], Some(&report), &strategy(), now());
    // ⌈(7001 + 1001) / 2⌉ = 4001 (not ⌈7001/2⌉ + ⌈1001/2⌉ = 4002); yarn runs on batch resources.
    // 50000 − 17500 − 4001 = 28499.
    let ZoneOutcome::Allocatable { zones, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(zones[0].amounts, Amounts::new(28_499, IDLE.1));
    assert_eq!(zones[0].explain.cpu.system, 4_001);
    assert_eq!(zones[0].explain.cpu.host_applications, 501);
}
