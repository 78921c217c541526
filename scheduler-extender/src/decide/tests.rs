use super::*;

const GI: i64 = 1 << 30;

fn now() -> Timestamp {
    "2026-11-25T10:00:00Z".parse().unwrap()
}

fn ago(seconds: i64) -> Timestamp {
    now() - SignedDuration::from_secs(seconds)
}

fn cm(cpu_milli: i64, memory_gib: i64) -> CpuMemory {
    CpuMemory {
        cpu_milli,
        memory_bytes: memory_gib * GI,
    }
}

fn node(name: &str, usage: Option<(i64, i64)>, reported_ago: i64) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        allocatable: cm(10_000, 40),
        batch_allocatable: cm(4_000, 16),
        batch_requested: cm(0, 0),
        metric: match usage {
            Some((cpu, mem)) => MetricFacts::Reported {
                update_time: ago(reported_ago),
                usage: cm(cpu, mem),
            },
            None => MetricFacts::NoNodeUsage {
                update_time: ago(reported_ago),
            },
        },
        unreported_usage: CpuMemory::default(),
        degrade_time_minutes: 15,
    }
}

fn batch_pod(cpu_milli: i64, memory_gib: i64) -> PodFacts {
    PodFacts {
        kind: PodKind::Batch,
        batch_request: cm(cpu_milli, memory_gib),
        estimated_usage: CpuMemory::default(),
    }
}

fn ls_pod() -> PodFacts {
    PodFacts {
        kind: PodKind::LoadAware,
        batch_request: CpuMemory::default(),
        estimated_usage: cm(850, 0),
    }
}

#[test]
fn extender_filter_cases() {
    let mut missing = node("n", None, 0);
    missing.metric = MetricFacts::Missing;
    let mut never = node("n", None, 0);
    never.metric = MetricFacts::NeverReported;
    let mut short_degrade = node("n", Some((1_000, 4)), 120);
    short_degrade.degrade_time_minutes = 1;
    let cases: Vec<(&str, PodFacts, NodeFacts, Option<FilterReason>)> = vec![
        (
            "BE on a fresh node",
            batch_pod(1_000, 1),
            node("n", Some((1_000, 4)), 30),
            None,
        ),
        (
            "BE without NodeMetric",
            batch_pod(1_000, 1),
            missing.clone(),
            Some(FilterReason::NodeMetricMissing),
        ),
        (
            "BE, koordlet never reported",
            batch_pod(1_000, 1),
            never,
            Some(FilterReason::NodeMetricNeverReported),
        ),
        (
            "BE, NodeMetric older than degradeTimeMinutes",
            batch_pod(1_000, 1),
            node("n", Some((1_000, 4)), 15 * 60 + 1),
            Some(FilterReason::NodeMetricStale),
        ),
        (
            "BE, exactly degradeTimeMinutes old",
            batch_pod(1_000, 1),
            node("n", Some((1_000, 4)), 15 * 60),
            None,
        ),
        (
            "BE, per-node degradeTimeMinutes",
            batch_pod(1_000, 1),
            short_degrade,
            Some(FilterReason::NodeMetricStale),
        ),
        (
            "BE, no node usage",
            batch_pod(1_000, 1),
            node("n", None, 30),
            Some(FilterReason::NodeUsageMissing),
        ),
        (
            "BE is not held to LS usage thresholds",
            batch_pod(1_000, 1),
            node("n", Some((9_000, 4)), 30),
            None,
        ),
        (
            "LS under thresholds",
            ls_pod(),
            node("n", Some((6_500, 38)), 30),
            None,
        ),
        (
            "LS, cpu over 65%",
            ls_pod(),
            node("n", Some((6_600, 4)), 30),
            Some(FilterReason::UsageOverThreshold),
        ),
        (
            "LS, memory over 95%",
            ls_pod(),
            node("n", Some((1_000, 39)), 30),
            Some(FilterReason::UsageOverThreshold),
        ),
        (
            "LS, expired NodeMetric is not judged",
            ls_pod(),
            node("n", Some((9_900, 39)), 181),
            None,
        ),
        ("LS without NodeMetric", ls_pod(), missing, None),
        (
            "DaemonSet pods ignore thresholds",
            PodFacts {
                kind: PodKind::DaemonSet,
                ..ls_pod()
            },
            node("n", Some((9_900, 39)), 30),
            None,
        ),
    ];
    for (case, pod, node, want) in cases {
        let got = filter(&pod, &node, &Policy::default(), now())
            .err()
            .map(|unfit| unfit.reason);
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn extender_filter_messages_name_the_cause() {
    let stale = node("n", Some((1_000, 4)), 3600);
    let unfit = filter(&batch_pod(1, 1), &stale, &Policy::default(), now()).unwrap_err();
    assert!(
        unfit.message.contains("degradeTimeMinutes=15"),
        "{}",
        unfit.message
    );
    assert!(unfit.reason.unresolvable());
    let busy = node("n", Some((7_000, 4)), 30);
    let unfit = filter(&ls_pod(), &busy, &Policy::default(), now()).unwrap_err();
    assert_eq!(unfit.message, "node(s) cpu usage exceed threshold: 70% > 65%");
    assert!(!unfit.reason.unresolvable());
}

#[test]
fn extender_batch_score_follows_headroom() {
    // Same load; a has 4 cores / 16 GiB of batch free, b has half of that left, c nothing.
    let a = node("a", Some((2_000, 8)), 30);
    let mut b = node("a", Some((2_000, 8)), 30);
    b.batch_requested = cm(2_000, 8);
    let mut c = node("c", Some((2_000, 8)), 30);
    c.batch_requested = cm(4_000, 16);
    let scores = prioritize(&batch_pod(0, 0), &[a, b, c], &Policy::default(), now());
    let headroom: Vec<_> = scores.iter().map(|s| s.headroom.unwrap()).collect();
    assert_eq!(headroom, vec![100, 50, 0]);
    // load: cpu 80, memory 80 → 80; total = (2*headroom + 80) / 3
    let totals: Vec<_> = scores.iter().map(|s| s.total).collect();
    assert_eq!(totals, vec![93, 60, 26]);
    let priorities: Vec<_> = scores.iter().map(|s| s.extender_priority()).collect();
    assert_eq!(priorities, vec![9, 6, 3]);
}

#[test]
fn extender_batch_score_counts_the_pod_itself_and_load() {
    // a has more batch free but is loaded; b less free but idle.
    let a = node("a", Some((9_000, 36)), 30);
    let mut b = node("b", Some((0, 0)), 30);
    b.batch_requested = cm(1_000, 4);
    let cases = [
        (
            "pod fits on both",
            batch_pod(1_000, 4),
            [100, 66],
            [10, 0],
            [70, 77],
        ),
        (
            "a big pod leaves b nothing",
            batch_pod(3_000, 12),
            [100, 0],
            [10, 0],
            [70, 33],
        ),
    ];
    for (case, pod, headroom, load, total) in cases {
        let mut b = b.clone();
        b.metric = MetricFacts::Reported {
            update_time: ago(30),
            usage: cm(0, 0),
        };
        let scores = prioritize(&pod, &[a.clone(), b], &Policy::default(), now());
        assert_eq!(
            [scores[0].headroom.unwrap(), scores[1].headroom.unwrap()],
            headroom,
            "{case}"
        );
        assert_eq!(
            [scores[0].load, scores[1].load],
            [load[0], 100 - load[1]],
            "{case}"
        );
        assert_eq!([scores[0].total, scores[1].total], total, "{case}");
    }
}

#[test]
fn extender_load_aware_score_cases() {
    let mut unreported = node("n", Some((2_000, 8)), 30);
    unreported.unreported_usage = cm(3_000, 8);
    let cases: Vec<(&str, NodeFacts, i64)> = vec![
        // cpu (2000 + 850) of 10000 → 72 (rounded down 71.5 → 100-28); memory 8 of 40 → 80
        (
            "reported usage plus the pod's estimate",
            node("n", Some((2_000, 8)), 30),
            (72 + 80) / 2,
        ),
        ("pods not yet in the NodeMetric count", unreported, (42 + 60) / 2),
        ("expired NodeMetric scores 0", node("n", Some((0, 0)), 181), 0),
        (
            "overloaded node floors at 0",
            node("n", Some((12_000, 50)), 30),
            0,
        ),
    ];
    for (case, node, want) in cases {
        let scores = prioritize(&ls_pod(), &[node], &Policy::default(), now());
        assert_eq!(scores[0].total, want, "{case}");
        assert_eq!(scores[0].headroom, None, "{case}");
    }
}

#[test]
fn extender_priority_is_on_the_0_to_10_scale() {
    let cases = [
        (0, 0),
        (4, 0),
        (5, 1),
        (54, 5),
        (55, 6),
        (100, 10),
        (150, 10),
        (-3, 0),
    ];
    for (total, want) in cases {
        let score = NodeScore {
            total,
            headroom: None,
            load: 0,
        };
        assert_eq!(score.extender_priority(), want, "total {total}");
    }
}
