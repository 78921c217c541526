use super::*;
use koord_api::QoSClass;

fn strategy(lower: i64, upper: i64, window: i64) -> ResourceThresholdStrategy {
    ResourceThresholdStrategy {
        enable: Some(true),
        cpu_evict_be_satisfaction_lower_percent: Some(lower),
        cpu_evict_be_satisfaction_upper_percent: Some(upper),
        cpu_evict_be_usage_threshold_percent: Some(90),
        cpu_evict_time_window_seconds: Some(window),
        ..Default::default()
    }
}

fn be(name: &str, prio: Option<i32>, request: i64, usage: f64) -> EvictCandidate {
    EvictCandidate {
        uid: format!("uid-{name}"),
        namespace: "batch".into(),
        name: name.into(),
        qos: QoSClass::Be,
        priority: prio,
        cpu_usage_milli: Some(usage),
        batch_cpu_request_milli: request,
        memory_usage_bytes: None,
        being_evicted: false,
        eviction_allowed: true,
        eviction_enabled: false,
        eviction_priority: 0,
        koordinator_priority: None,
    }
}

fn totals(usage: f64, limit: f64, request: f64) -> BeCpu {
    BeCpu {
        usage_milli: usage,
        real_limit_milli: limit,
        request_milli: request,
    }
}

fn input<'a>(
    s: &'a ResourceThresholdStrategy,
    avg: BeCpu,
    samples: u32,
    pods: &'a [EvictCandidate],
) -> CpuEvictInput<'a> {
    CpuEvictInput {
        strategy: s,
        window: Some(BeCpuWindow {
            average: avg,
            samples,
        }),
        latest: Some(avg),
        collect_interval_seconds: 1.0,
        batch_allocatable_milli: None,
        pods,
        now_seconds: 1000.0,
        last_eviction_seconds: None,
        cool_down_seconds: DEFAULT_COOL_DOWN_SECONDS,
    }
}

fn names(plan: &CpuEvictPlan) -> Vec<&str> {
    plan.evictions.iter().map(|e| e.name.as_str()).collect()
}

/// Seed 002: lower 60, upper 80, usage 90, window 60; a 4-core BE pod suppressed to 2 cores and
/// using 95 % of them: satisfaction 0.5, release 4000 × (0.8 − 0.5) = 1200 ("need release CPU: 1200").
#[test]
fn seed_002_documented_case() {
    let s = strategy(60, 80, 60);
    let pods = [be("be-pod-demo", None, 4000, 1900.0)];
    let plan = decide(&input(&s, totals(1900.0, 2000.0, 4000.0), 60, &pods));
    assert_eq!(plan.action, CpuEvictAction::Evict);
    assert_eq!(plan.release_milli, 1200);
    assert_eq!(plan.satisfaction, Some(0.5));
    assert_eq!(names(&plan), ["be-pod-demo"]);
    assert_eq!(plan.evictions[0].reason, "EvictPodByBECPUSatisfaction");
    assert!(
        plan.evictions[0].message.contains("release 1200m"),
        "{}",
        plan.evictions[0].message
    );
}

#[test]
fn satisfaction_boundary_is_inclusive() {
    let s = strategy(60, 80, 1);
    let pods = [be("a", None, 10_000, 6000.0)];
    // limit 6000 / request 10000 = 0.60 ≤ 0.60 → release 10000 × 0.2 = 2000.
    let p = decide(&input(&s, totals(6000.0, 6000.0, 10_000.0), 1, &pods));
    assert_eq!((p.action, p.release_milli), (CpuEvictAction::Evict, 2000));
    // 0.61 → satisfied.
    let p = decide(&input(&s, totals(6100.0, 6100.0, 10_000.0), 1, &pods));
    assert_eq!(p.action, CpuEvictAction::Satisfied);
}

#[test]
fn usage_gate() {
    let s = strategy(60, 80, 1);
    let pods = [be("a", None, 10_000, 0.0)];
    // 89 % of a 2-core limit: not busy enough.
    let p = decide(&input(&s, totals(1780.0, 2000.0, 10_000.0), 1, &pods));
    assert_eq!(p.action, CpuEvictAction::Satisfied);
    assert!(p.reason.contains("below 90%"), "{}", p.reason);
    // 90 %: evict.
    let p = decide(&input(&s, totals(1800.0, 2000.0, 10_000.0), 1, &pods));
    assert_eq!(p.action, CpuEvictAction::Evict);
    // A limit under one core passes the gate whatever the usage (upstream).
    let p = decide(&input(&s, totals(0.0, 500.0, 10_000.0), 1, &pods));
    assert_eq!(p.action, CpuEvictAction::Evict);
    // No limit at all: nothing to judge.
    let p = decide(&input(&s, totals(0.0, 0.0, 10_000.0), 1, &pods));
    assert_eq!(p.action, CpuEvictAction::Satisfied);
}

#[test]
fn averages_need_a_third_of_the_window() {
    let s = strategy(60, 80, 60);
    let pods = [be("a", None, 4000, 1900.0)];
    let avg = totals(1900.0, 2000.0, 4000.0);
    assert_eq!(decide(&input(&s, avg, 19, &pods)).action, CpuEvictAction::Skipped);
    assert_eq!(decide(&input(&s, avg, 20, &pods)).action, CpuEvictAction::Evict);
    assert_eq!(decide(&input(&s, avg, 0, &pods)).action, CpuEvictAction::Skipped);
    assert!(enough_samples(1, 1.0, 1.0));
    assert!(!enough_samples(0, 1.0, 0.0));
    // Window never shorter than the collect interval.
    assert_eq!(window_seconds(&strategy(60, 80, 0), 2.0), 2.0);
}

#[test]
fn latest_sample_caps_the_release() {
    let s = strategy(60, 80, 10);
    let pods = [be("a", None, 4000, 0.0), be("b", None, 4000, 0.0)];
    let mut inp = input(&s, totals(1900.0, 2000.0, 4000.0), 10, &pods);
    // Limit already recovered to 2800: satisfaction 0.7 > 0.6 → no eviction now.
    inp.latest = Some(totals(2700.0, 2800.0, 4000.0));
    assert_eq!(decide(&inp).action, CpuEvictAction::Satisfied);
    // Limit moved to 2200: current release 4000 × (0.8 − 0.55) = 1000 < average's 1200.
    inp.latest = Some(totals(2100.0, 2200.0, 4000.0));
    assert_eq!(decide(&inp).release_milli, 1000);
}

#[test]
fn victims_by_priority_then_usage_ratio_only_be() {
    let s = strategy(60, 80, 1);
    let mut ls = be("ls", Some(0), 100_000, 100_000.0);
    ls.qos = QoSClass::Ls;
    let pods = [
        ls,
        be("mid-busy", Some(5000), 1000, 900.0),    // 0.9
        be("mid-idle", Some(5000), 1000, 100.0),    // 0.1
        be("low", Some(3000), 500, 10.0),           // lowest priority first
        be("mid-busiest", Some(5000), 1000, 990.0), // 0.99
    ];
    // request 10000, limit 2000 (0.2) → release 10000 × 0.6 = 6000: every BE pod (3500) and no LS.
    let p = decide(&input(&s, totals(1900.0, 2000.0, 10_000.0), 1, &pods));
    assert_eq!(names(&p), ["low", "mid-busiest", "mid-busy", "mid-idle"]);
    // request 4000, limit 2000 → release 1200: low (500) + busiest (1000) cover it.
    let p = decide(&input(&s, totals(1900.0, 2000.0, 4000.0), 1, &pods));
    assert_eq!(names(&p), ["low", "mid-busiest"]);
    assert_eq!(p.released_milli, 1500);
}

#[test]
fn in_flight_counts_and_is_not_repicked() {
    let s = strategy(60, 80, 1);
    let mut going = be("going", Some(1), 1000, 1000.0);
    going.being_evicted = true;
    let pods = [going, be("next", Some(2), 1000, 1000.0)];
    // release 1200: 1000 in flight + "next".
    let p = decide(&input(&s, totals(1900.0, 2000.0, 4000.0), 1, &pods));
    assert_eq!(names(&p), ["next"]);
    assert_eq!(p.in_flight_milli, 1000);
}

#[test]
fn cool_down_and_config_errors() {
    let s = strategy(60, 80, 1);
    let pods = [be("a", None, 4000, 0.0)];
    let avg = totals(1900.0, 2000.0, 4000.0);
    let mut inp = input(&s, avg, 1, &pods);
    inp.last_eviction_seconds = Some(985.0);
    assert_eq!(decide(&inp).action, CpuEvictAction::CoolingDown);
    inp.last_eviction_seconds = Some(980.0);
    assert_eq!(decide(&inp).action, CpuEvictAction::Evict);
    for (lower, upper) in [(0, 80), (61, 80), (60, 100), (60, 50)] {
        let s = strategy(lower, upper, 1);
        let p = decide(&input(&s, avg, 1, &pods));
        assert_eq!(p.action, CpuEvictAction::Skipped, "{lower}/{upper}");
    }
    let off = ResourceThresholdStrategy {
        enable: Some(false),
        ..strategy(60, 80, 1)
    };
    assert_eq!(
        decide(&input(&off, avg, 1, &pods)).action,
        CpuEvictAction::Disabled
    );
}

#[test]
fn evict_by_allocatable_uses_batch_allocatable() {
    let mut s = strategy(60, 80, 1);
    s.cpu_evict_policy = Some(CpuEvictPolicy::EvictByAllocatable);
    let pods = [be("a", None, 4000, 0.0)];
    let mut inp = input(&s, totals(1900.0, 10_000.0, 4000.0), 1, &pods);
    inp.batch_allocatable_milli = Some(2000);
    let p = decide(&inp);
    assert_eq!((p.action, p.release_milli), (CpuEvictAction::Evict, 1200));
    inp.batch_allocatable_milli = None;
    assert_eq!(decide(&inp).action, CpuEvictAction::Satisfied);
}
