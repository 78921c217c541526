//! Table tests of the batch formula, one per branch, starting from upstream's worked example.

use jiff::Timestamp;
use pretty_assertions::assert_eq;

use super::*;
use koord_api::cpu_normalization::NormalizationRatio;

const GB: i64 = 1_000_000_000;
const GI: i64 = 1 << 30;

fn now() -> Timestamp {
    "2026-11-22T10:00:00Z".parse().unwrap()
}

fn cores(n: i64) -> i64 {
    n * 1000
}

/// Node 100 cores / 120 G with nothing reserved.
fn node() -> NodeFacts {
    NodeFacts {
        capacity: Amounts::new(cores(100), 120 * GB),
        allocatable: Amounts::new(cores(100), 120 * GB),
        ..NodeFacts::default()
    }
}

fn pod(name: &str, high_priority: bool, request: Amounts) -> PodFacts {
    PodFacts {
        namespace: "default".into(),
        name: name.into(),
        active: true,
        high_priority,
        lse: false,
        request,
        mid: false,
        numa: NumaPlacement::Shared,
    }
}

fn usage(name: &str, high_priority: bool, usage: Amounts) -> PodUsage {
    PodUsage {
        namespace: "default".into(),
        name: name.into(),
        high_priority,
        usage,
    }
}

/// Upstream's TestPluginCalculate fixture: podA and podC are HP, podB is BE, podD succeeded.
fn upstream_pods() -> Vec<PodFacts> {
    let mut pod_d = pod("podD", true, Amounts::new(cores(10), 10 * GB));
    pod_d.active = false;
    vec![
        pod("podA", true, Amounts::new(cores(20), 20 * GB)),
        pod("podB", false, Amounts::new(cores(10), 10 * GB)),
        pod("podC", true, Amounts::new(cores(40), 40 * GB)),
        pod_d,
    ]
}

fn upstream_report() -> UsageReport {
    UsageReport {
        update_time: Some(now()),
        system_usage: Some(Amounts::new(cores(7), 12 * GB)),
        host_applications: vec![],
        pods: vec![
            usage("podA", true, Amounts::new(cores(11), 11 * GB)),
            usage("podB", false, Amounts::new(cores(10), 10 * GB)),
            usage("podC", true, Amounts::new(cores(22), 22 * GB)),
            usage("podD", true, Amounts::new(cores(10), 10 * GB)),
        ],
        ..UsageReport::default()
    }
}

fn strategy() -> BatchStrategy {
    BatchStrategy {
        enable: true,
        cpu_reclaim_percent: 65,
        memory_reclaim_percent: 65,
        ..BatchStrategy::default()
    }
}

fn amounts_of(outcome: &BatchOutcome) -> Amounts {
    outcome.amounts().expect("an allocatable outcome")
}

#[test]
fn upstream_worked_example_gives_25_cores_and_33_gb() {
    let outcome = calculate(
        &node(),
        &upstream_pods(),
        Some(&upstream_report()),
        &strategy(),
        now(),
    );
    assert_eq!(amounts_of(&outcome), Amounts::new(25_000, 33 * GB));
    let BatchOutcome::Allocatable { explain, .. } = outcome else {
        unreachable!()
    };
    assert_eq!(explain.cpu.margin, 35_000);
    assert_eq!(explain.memory.margin, 42 * GB);
    assert_eq!(explain.cpu.system_or_reserved, 7_000);
    assert_eq!(explain.cpu.hp_used, 33_000);
    assert_eq!(explain.cpu.hp_requested, 60_000);
    assert_eq!(
        explain.cpu.to_string(),
        "25000 = capacity 100000 - margin 35000 - max(system 7000, reserved 0) - hpUsed 33000"
    );
}

#[test]
fn memory_request_policy_subtracts_reservation_and_hp_requests() {
    let strategy = BatchStrategy {
        memory_policy: CalculatePolicy::Request,
        ..strategy()
    };
    let outcome = calculate(
        &node(),
        &upstream_pods(),
        Some(&upstream_report()),
        &strategy,
        now(),
    );
    // 120 − 42 − reserved 0 − requests (20 + 40) = 18 G; CPU stays on usage.
    assert_eq!(amounts_of(&outcome), Amounts::new(25_000, 18 * GB));
}

#[test]
fn cpu_request_policy_acts_as_usage() {
    let strategy = BatchStrategy {
        cpu_policy: CalculatePolicy::Request,
        ..strategy()
    };
    let outcome = calculate(
        &node(),
        &upstream_pods(),
        Some(&upstream_report()),
        &strategy,
        now(),
    );
    assert_eq!(amounts_of(&outcome).cpu, 25_000);
    let BatchOutcome::Allocatable { explain, .. } = outcome else {
        unreachable!()
    };
    assert_eq!(explain.cpu.policy, CalculatePolicy::Usage);
}

#[test]
fn max_usage_request_takes_the_larger_of_usage_and_request_per_pod() {
    let strategy = BatchStrategy {
        cpu_policy: CalculatePolicy::MaxUsageRequest,
        memory_policy: CalculatePolicy::MaxUsageRequest,
        ..strategy()
    };
    let mut report = upstream_report();
    // podC uses more CPU than it requests.
    report.pods[2].usage = Amounts::new(cores(45), 22 * GB);
    let outcome = calculate(&node(), &upstream_pods(), Some(&report), &strategy, now());
    // cpu: 100 − 35 − 7 − (max(20,11) + max(40,45)) = −7 → 0; memory: 120 − 42 − 12 − (20 + 40) = 6.
    assert_eq!(amounts_of(&outcome), Amounts::new(0, 6 * GB));
    let BatchOutcome::Allocatable { explain, .. } = outcome else {
        unreachable!()
    };
    assert_eq!(explain.cpu.hp_max_used_requested, 65_000);
    assert_eq!(explain.cpu.unclamped, -7_000);
    assert!(explain.cpu.to_string().starts_with("0 = max(capacity 100000"));
}

#[test]
fn unmeasured_hp_pod_counts_its_request_as_usage_and_in_max_usage_request() {
    let strategy = BatchStrategy {
        cpu_policy: CalculatePolicy::MaxUsageRequest,
        ..strategy()
    };
    let pods = vec![pod("fresh", true, Amounts::new(cores(8), 8 * GB))];
    let report = UsageReport {
        pods: vec![],
        ..upstream_report()
    };
    let outcome = calculate(&node(), &pods, Some(&report), &strategy, now());
    // cpu (maxUsageRequest): 100 − 35 − 7 − 8 = 50; memory (usage): 120 − 42 − 12 − 8 = 58.
    assert_eq!(amounts_of(&outcome), Amounts::new(50_000, 58 * GB));
}

#[test]
fn reclaim_threshold_above_100_gives_a_negative_margin() {
    let strategy = BatchStrategy {
        cpu_reclaim_percent: 150,
        ..strategy()
    };
    let outcome = calculate(
        &node(),
        &upstream_pods(),
        Some(&upstream_report()),
        &strategy,
        now(),
    );
    // 100 − (−50) − 7 − 33 = 110 cores.
    assert_eq!(amounts_of(&outcome).cpu, 110_000);
}

#[test]
fn margin_truncates_toward_zero() {
    let mut node = node();
    node.capacity.cpu = 999;
    node.allocatable.cpu = 999;
    let report = UsageReport {
        pods: vec![],
        system_usage: Some(Amounts::ZERO),
        ..upstream_report()
    };
    let outcome = calculate(&node, &[], Some(&report), &strategy(), now());
    // margin = 999 × 35 / 100 = 349.65 → 349.
    assert_eq!(amounts_of(&outcome).cpu, 650);
}

#[test]
fn reservation_is_the_larger_of_kubelet_and_annotation_and_beats_smaller_system_usage() {
    let mut node = node();
    node.allocatable = Amounts::new(cores(90), 110 * GB); // kubelet reserves 10 cores / 10 G
    node.annotated_reservation = Amounts::new(cores(5), 20 * GB);
    let outcome = calculate(
        &node,
        &upstream_pods(),
        Some(&upstream_report()),
        &strategy(),
        now(),
    );
    let BatchOutcome::Allocatable { amounts, explain } = outcome else {
        panic!("allocatable")
    };
    assert_eq!(explain.cpu.reserved, 10_000);
    assert_eq!(explain.memory.reserved, 20 * GB);
    // cpu: 100 − 35 − max(7, 10) − 33 = 22; memory: 120 − 42 − max(12, 20) − 33 = 25.
    assert_eq!(amounts, Amounts::new(22_000, 25 * GB));
}

#[test]
fn kubelet_reservation_never_goes_negative() {
    let mut node = node();
    node.allocatable = Amounts::new(cores(200), 240 * GB);
    let outcome = calculate(
        &node,
        &upstream_pods(),
        Some(&upstream_report()),
        &strategy(),
        now(),
    );
    assert_eq!(amounts_of(&outcome), Amounts::new(25_000, 33 * GB));
}

#[test]
fn host_applications_above_batch_count_as_system_usage() {
    let mut report = upstream_report();
    report.host_applications = vec![
        HostApplicationUsage {
            name: "nginx".into(),
            above_batch: true,
            above_mid: true,
            usage: Amounts::new(cores(3), 2 * GB),
        },
        HostApplicationUsage {
            name: "spark".into(),
            above_batch: false,
            above_mid: false,
            usage: Amounts::new(cores(9), 9 * GB),
        },
    ];
    let outcome = calculate(&node(), &upstream_pods(), Some(&report), &strategy(), now());
    assert_eq!(amounts_of(&outcome), Amounts::new(22_000, 31 * GB));
}

#[test]
fn lse_pod_counts_cpu_request_and_memory_usage() {
    let mut pods = upstream_pods();
    pods[0].lse = true; // podA: request 20 cores / 20 G, usage 11 / 11 G
    let outcome = calculate(&node(), &pods, Some(&upstream_report()), &strategy(), now());
    // cpu: 100 − 35 − 7 − (20 + 22) = 16; memory unchanged 33.
    assert_eq!(amounts_of(&outcome), Amounts::new(16_000, 33 * GB));
}

#[test]
fn dangling_hp_usage_counts_but_batch_dangling_and_finished_pods_do_not() {
    let mut report = upstream_report();
    report
        .pods
        .push(usage("gone-hp", true, Amounts::new(cores(5), 5 * GB)));
    report
        .pods
        .push(usage("gone-be", false, Amounts::new(cores(9), 9 * GB)));
    // A duplicate report of an unlisted pod counts once.
    report
        .pods
        .push(usage("gone-hp", true, Amounts::new(cores(5), 5 * GB)));
    let outcome = calculate(&node(), &upstream_pods(), Some(&report), &strategy(), now());
    let BatchOutcome::Allocatable { amounts, explain } = outcome else {
        panic!("allocatable")
    };
    assert_eq!(explain.cpu.hp_dangling, 5_000);
    assert_eq!(amounts, Amounts::new(20_000, 28 * GB));
}

#[test]
fn results_are_floored_at_zero_per_resource() {
    let mut report = upstream_report();
    report.system_usage = Some(Amounts::new(cores(90), 0));
    let outcome = calculate(&node(), &upstream_pods(), Some(&report), &strategy(), now());
    assert_eq!(amounts_of(&outcome), Amounts::new(0, 45 * GB));
}

#[test]
fn batch_threshold_caps_each_resource_by_a_share_of_capacity() {
    let strategy = BatchStrategy {
        batch_cpu_threshold_percent: Some(20),
        batch_memory_threshold_percent: Some(50),
        ..strategy()
    };
    let outcome = calculate(
        &node(),
        &upstream_pods(),
        Some(&upstream_report()),
        &strategy,
        now(),
    );
    let BatchOutcome::Allocatable { amounts, explain } = outcome else {
        panic!("allocatable")
    };
    assert_eq!(amounts, Amounts::new(20_000, 33 * GB));
    assert_eq!(explain.cpu.threshold_cap, Some(20_000));
    assert!(
        explain.cpu.to_string().ends_with(", cap 20000)"),
        "{}",
        explain.cpu
    );
}

#[test]
fn disabled_colocation_removes_batch_resources() {
    let strategy = BatchStrategy {
        enable: false,
        ..strategy()
    };
    let outcome = calculate(
        &node(),
        &upstream_pods(),
        Some(&upstream_report()),
        &strategy,
        now(),
    );
    assert_eq!(outcome, BatchOutcome::Disabled);
}

#[test]
fn degrade_cases() {
    let stale_time: Timestamp = "2026-11-22T09:44:59Z".parse().unwrap();
    let edge_time: Timestamp = "2026-11-22T09:45:00Z".parse().unwrap();
    let cases: Vec<(&str, Option<UsageReport>, Option<DegradeReason>)> = vec![
        ("no NodeMetric", None, Some(DegradeReason::NodeMetricMissing)),
        (
            "never reported",
            Some(UsageReport {
                update_time: None,
                ..upstream_report()
            }),
            Some(DegradeReason::NeverReported),
        ),
        (
            "older than degradeTimeMinutes",
            Some(UsageReport {
                update_time: Some(stale_time),
                ..upstream_report()
            }),
            Some(DegradeReason::Stale {
                update_time: stale_time,
                degrade_time_minutes: 15,
            }),
        ),
        (
            "exactly degradeTimeMinutes old",
            Some(UsageReport {
                update_time: Some(edge_time),
                ..upstream_report()
            }),
            None,
        ),
        (
            "no status.nodeMetric",
            Some(UsageReport {
                system_usage: None,
                ..upstream_report()
            }),
            Some(DegradeReason::NodeUsageMissing),
        ),
    ];
    for (case, report, expected) in cases {
        let outcome = calculate(&node(), &upstream_pods(), report.as_ref(), &strategy(), now());
        match expected {
            Some(reason) => assert_eq!(outcome, BatchOutcome::Degraded(reason), "{case}"),
            None => assert!(outcome.amounts().is_some(), "{case}: {outcome:?}"),
        }
    }
}

#[test]
fn third_party_batch_allocations_are_subtracted_and_floored() {
    let outcome = BatchOutcome::Allocatable {
        amounts: Amounts::new(50_000, 120 * GI),
        explain: Box::new(apply_policies(&Terms::default(), &strategy()).1),
    };
    let status = publish(&outcome, Amounts::new(10_000, 10 * GI), NormalizationRatio::ONE);
    assert_eq!(status.published, Some(Amounts::new(40_000, 110 * GI)));
    assert_eq!(status.origin, Amounts::new(50_000, 120 * GI));
    let status = publish(&outcome, Amounts::new(60_000, 120 * GI), NormalizationRatio::ONE);
    assert_eq!(status.published, Some(Amounts::new(0, 0)));
    assert_eq!(
        status.origin_annotation(),
        format!(
            r#"{{"resources":{{"kubernetes.io/batch-cpu":"50000","kubernetes.io/batch-memory":"{}"}}}}"#,
            120 * GI
        )
    );
}

#[test]
fn batch_cpu_is_scaled_by_the_normalization_ratio_before_third_party_allocations() {
    // Upstream's worked example: 25 cores of batch-cpu on a node whose CPUs are 1.25 times the
    // baseline publish 31250; memory is never scaled.
    let outcome = BatchOutcome::Allocatable {
        amounts: Amounts::new(25_000, 33 * GI),
        explain: Box::new(apply_policies(&Terms::default(), &strategy()).1),
    };
    let ratio = NormalizationRatio::parse("1.25").unwrap();
    let status = publish(&outcome, Amounts::ZERO, ratio);
    assert_eq!(status.origin, Amounts::new(31_250, 33 * GI));
    assert_eq!(status.published, Some(Amounts::new(31_250, 33 * GI)));
    // Third-party allocations are in normalized units already: subtracted after scaling.
    let status = publish(&outcome, Amounts::new(10_000, GI), ratio);
    assert_eq!(status.published, Some(Amounts::new(21_250, 32 * GI)));
    assert_eq!(status.cpu_normalization, ratio);
    // A negative result is floored before scaling, and 1.00 scales nothing.
    let negative = BatchOutcome::Allocatable {
        amounts: Amounts::new(-5, 1),
        explain: Box::new(apply_policies(&Terms::default(), &strategy()).1),
    };
    assert_eq!(
        publish(&negative, Amounts::ZERO, ratio).published,
        Some(Amounts::new(0, 1))
    );
    assert_eq!(
        publish(&outcome, Amounts::ZERO, NormalizationRatio::ONE).published,
        Some(Amounts::new(25_000, 33 * GI))
    );
}

#[test]
fn removed_batch_resources_leave_a_zero_origin() {
    let status = publish(
        &BatchOutcome::Disabled,
        Amounts::new(1, 1),
        NormalizationRatio::ONE,
    );
    assert_eq!(
        status,
        BatchStatus {
            published: None,
            origin: Amounts::ZERO,
            cpu_normalization: NormalizationRatio::ONE,
        }
    );
}

fn values(cpu: Option<i64>, memory: Option<i64>) -> PublishedValues {
    PublishedValues { cpu, memory }
}

#[test]
fn update_decision_table() {
    let strategy = strategy(); // diff 0.1, refresh after 300 s
    let recent: Timestamp = "2026-11-22T09:58:00Z".parse().unwrap();
    let old: Timestamp = "2026-11-22T09:55:00Z".parse().unwrap();
    let some = |cpu, memory| values(Some(cpu), Some(memory));
    let cases = vec![
        (
            "identical values are never written",
            some(20, 100),
            Some(Amounts::new(20, 100)),
            None,
            UpdateDecision::Unchanged,
        ),
        (
            "20 → 15 moves 25 % > 10 %",
            some(20, 100),
            Some(Amounts::new(15, 100)),
            Some(recent),
            UpdateDecision::Write(UpdateReason::Changed {
                resource: "kubernetes.io/batch-cpu",
                old: 20,
                new: 15,
            }),
        ),
        (
            "exactly 10 % is not more than 10 %",
            some(20, 100),
            Some(Amounts::new(20, 110)),
            Some(recent),
            UpdateDecision::Postpone,
        ),
        (
            "small move written on first sync of this process",
            some(20, 100),
            Some(Amounts::new(20, 105)),
            None,
            UpdateDecision::Write(UpdateReason::FirstSync),
        ),
        (
            "small move written after updateTimeThresholdSeconds",
            some(20, 100),
            Some(Amounts::new(20, 105)),
            Some(old),
            UpdateDecision::Write(UpdateReason::Refresh),
        ),
        (
            "appearing resources",
            values(None, None),
            Some(Amounts::new(0, 0)),
            Some(recent),
            UpdateDecision::Write(UpdateReason::Presence {
                resource: "kubernetes.io/batch-cpu",
            }),
        ),
        (
            "removed resources",
            some(20, 100),
            None,
            Some(recent),
            UpdateDecision::Write(UpdateReason::Presence {
                resource: "kubernetes.io/batch-cpu",
            }),
        ),
        (
            "already absent",
            values(None, None),
            None,
            None,
            UpdateDecision::Unchanged,
        ),
        (
            "from zero any move is large",
            some(0, 100),
            Some(Amounts::new(1, 100)),
            Some(recent),
            UpdateDecision::Write(UpdateReason::Changed {
                resource: "kubernetes.io/batch-cpu",
                old: 0,
                new: 1,
            }),
        ),
    ];
    for (case, current, desired, last_write, expected) in cases {
        let decision = decide_update(current, current, desired, last_write, now(), &strategy);
        assert_eq!(decision, expected, "{case}");
    }
}

#[test]
fn capacity_out_of_line_with_allocatable_is_rewritten() {
    let decision = decide_update(
        values(None, Some(100)),
        values(Some(20), Some(100)),
        Some(Amounts::new(20, 100)),
        None,
        now(),
        &strategy(),
    );
    assert_eq!(
        decision,
        UpdateDecision::Write(UpdateReason::Presence {
            resource: "kubernetes.io/batch-cpu"
        })
    );
}

#[test]
fn absurd_inputs_do_not_panic() {
    let node = NodeFacts {
        capacity: Amounts::new(i64::MAX, i64::MIN),
        allocatable: Amounts::new(i64::MIN, i64::MAX),
        annotated_reservation: Amounts::new(i64::MAX, i64::MAX),
        third_party_batch: Amounts::new(i64::MIN, i64::MAX),
    };
    let pods = vec![pod("huge", true, Amounts::new(i64::MAX, i64::MAX)); 3];
    let strategy = BatchStrategy {
        cpu_reclaim_percent: i64::MIN,
        memory_reclaim_percent: i64::MAX,
        degrade_time_minutes: i64::MAX,
        batch_cpu_threshold_percent: Some(i64::MAX),
        batch_memory_threshold_percent: Some(i64::MIN),
        ..strategy()
    };
    let outcome = calculate(&node, &pods, Some(&upstream_report()), &strategy, now());
    let amounts = amounts_of(&outcome);
    assert!(amounts.cpu >= 0 && amounts.memory >= 0);
    let _ = publish(&outcome, node.third_party_batch, NormalizationRatio::ONE);
}
