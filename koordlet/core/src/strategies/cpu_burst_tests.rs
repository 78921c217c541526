use koord_api::QoSClass;
use std::collections::BTreeMap;

use super::*;
use crate::strategies::{FILE_CFS_BURST, FILE_CFS_QUOTA};

fn params(policy: CpuBurstPolicy, burst_pct: i64, quota_pct: i64, period: i64) -> BurstParams {
    BurstParams {
        policy,
        cpu_burst_percent: burst_pct,
        cfs_quota_burst_percent: quota_pct,
        cfs_quota_burst_period_seconds: period,
    }
}

fn container(limit: i64, quota: i64, burst: i64, throttled: f64) -> BurstContainer {
    BurstContainer {
        id: "containerd://c1".into(),
        name: "main".into(),
        cgroup: CgroupDir::new("kubepods/burstable/poda/c1").unwrap(),
        cpu_limit_milli: Some(limit),
        cfs_quota_us: Some(quota),
        cfs_burst_us: Some(burst),
        throttled_ratio: Some(throttled),
        usage_milli: Some(0.0),
    }
}

fn pod(config: BurstParams, quota: i64, burst: i64, c: BurstContainer) -> BurstPod {
    BurstPod {
        namespace: "frontend".into(),
        name: "payment".into(),
        qos: QoSClass::Ls,
        active: true,
        cgroup: CgroupDir::new("kubepods/burstable/poda").unwrap(),
        cfs_quota_us: Some(quota),
        cfs_burst_us: Some(burst),
        config,
        config_source: "podStrategies[0]".into(),
        containers: vec![c],
    }
}

fn idle_pool() -> SharePool {
    SharePool {
        processors: 8,
        lse_lsr_request_milli: 0,
        node_usage_milli: Some(1000.0),
        lse_lsr_be_usage_milli: Some(0.0),
    }
}

fn run_with(pods: &[BurstPod], pool: SharePool, now: f64, state: &BurstState) -> BurstPlan {
    decide(&BurstInput {
        share_pool_threshold_percent: 50,
        share_pool: pool,
        pods,
        now_seconds: now,
        state,
    })
}

fn run(pods: &[BurstPod], pool: SharePool) -> BurstPlan {
    run_with(pods, pool, 0.0, &BurstState::default())
}

fn short(plan: &BurstPlan) -> Vec<(&str, &str, i64)> {
    plan.writes
        .iter()
        .map(|w| {
            let who = if w.cgroup.as_path().ends_with("c1") {
                "c"
            } else {
                "pod"
            };
            let what = if w.file() == FILE_CFS_QUOTA {
                "quota"
            } else {
                "burst"
            };
            (who, what, w.value.as_int().unwrap())
        })
        .collect()
}

/// Replays writes on a model of the kernel and checks what it enforces after every write:
/// burst ≤ quota (unless the quota is unlimited) and, on v1, container quota ≤ pod quota.
pub(crate) fn check_kernel_order(pods: &[BurstPod], writes: &[CgroupWrite]) {
    let mut quota = BTreeMap::new();
    let mut burst = BTreeMap::new();
    for p in pods {
        quota.insert(p.cgroup.clone(), p.cfs_quota_us.unwrap_or(-1));
        burst.insert(p.cgroup.clone(), p.cfs_burst_us.unwrap_or(0));
        for c in &p.containers {
            quota.insert(c.cgroup.clone(), c.cfs_quota_us.unwrap_or(-1));
            burst.insert(c.cgroup.clone(), c.cfs_burst_us.unwrap_or(0));
        }
    }
    for w in writes {
        let v: i64 = w.value.as_int().unwrap();
        let q = if w.file() == FILE_CFS_QUOTA {
            v
        } else {
            quota[&w.cgroup]
        };
        let b = if w.file() == FILE_CFS_BURST {
            v
        } else {
            burst[&w.cgroup]
        };
        assert!(q == -1 || b <= q, "EINVAL at {w:?}: burst {b} > quota {q}");
        if w.file() == FILE_CFS_QUOTA {
            for p in pods {
                if w.cgroup == p.cgroup {
                    for c in &p.containers {
                        let cq = quota[&c.cgroup];
                        assert!(
                            v == -1 || (cq != -1 && cq <= v),
                            "EINVAL at {w:?}: child quota {cq}"
                        );
                    }
                } else if p.containers.iter().any(|c| c.cgroup == w.cgroup) {
                    let pq = quota[&p.cgroup];
                    assert!(pq == -1 || v <= pq, "EINVAL at {w:?}: parent quota {pq}");
                }
            }
        }
        quota.insert(w.cgroup.clone(), q);
        burst.insert(w.cgroup.clone(), b);
    }
}

#[test]
fn defaults_fill_in() {
    let p = BurstParams::from_config(&CpuBurstConfig::default());
    assert_eq!(p, params(CpuBurstPolicy::None, 1000, 300, -1));
    let seed = CpuBurstConfig {
        policy: Some(CpuBurstPolicy::CpuBurstOnly),
        cpu_burst_percent: Some(50),
        ..Default::default()
    };
    assert_eq!(
        BurstParams::from_config(&seed),
        params(CpuBurstPolicy::CpuBurstOnly, 50, 300, -1)
    );
}

#[test]
fn static_burst_and_kernel_clamp() {
    let auto = params(CpuBurstPolicy::Auto, 1000, 300, -1);
    // 2 cores × 1000 % of a 100 ms period = 2 s of CPU: upstream writes it and the kernel says
    // EINVAL; clamped to the quota (200 ms).
    assert_eq!(static_burst_us(&auto, Some(2000)), 2_000_000);
    assert_eq!(clamp_burst(2_000_000, Some(200_000)), 200_000);
    let half = params(CpuBurstPolicy::CpuBurstOnly, 50, 300, -1);
    assert_eq!(static_burst_us(&half, Some(2000)), 100_000);
    assert_eq!(clamp_burst(100_000, Some(200_000)), 100_000);
    // No limit, unlimited or unknown quota, or a policy without kernel burst: 0.
    assert_eq!(static_burst_us(&auto, None), 0);
    assert_eq!(clamp_burst(100_000, Some(-1)), 0);
    assert_eq!(clamp_burst(100_000, None), 0);
    assert_eq!(
        static_burst_us(
            &params(CpuBurstPolicy::CfsQuotaBurstOnly, 50, 300, -1),
            Some(2000)
        ),
        0
    );
}

#[test]
fn node_state_table() {
    let pool = |node: f64, bound: f64, lsr_req: i64| SharePool {
        processors: 10,
        lse_lsr_request_milli: lsr_req,
        node_usage_milli: Some(node),
        lse_lsr_be_usage_milli: Some(bound),
    };
    // share pool 10000 milli; threshold 50 %.
    assert_eq!(node_state(&pool(5000.0, 0.0, 0), 50).0, NodeState::Overload);
    assert_eq!(node_state(&pool(4500.0, 0.0, 0), 50).0, NodeState::Cooling);
    assert_eq!(node_state(&pool(4499.0, 0.0, 0), 50).0, NodeState::Idle);
    // LSR pods' usage and requests are outside the share pool: 6000 − 3000 over 10000 − 4000.
    let (s, r) = node_state(&pool(6000.0, 3000.0, 4000), 50);
    assert_eq!((s, r), (NodeState::Overload, Some(0.5)));
    // No share pool left: overloaded.
    assert_eq!(node_state(&pool(0.0, 0.0, 10_000), 50).0, NodeState::Overload);
    let unknown = SharePool {
        node_usage_milli: None,
        ..pool(0.0, 0.0, 0)
    };
    assert_eq!(node_state(&unknown, 50).0, NodeState::Unknown);
}

#[test]
fn scale_up_while_throttled_orders_quota_before_burst() {
    let cfg = params(CpuBurstPolicy::Auto, 150, 300, -1);
    let pods = [pod(cfg, 200_000, 0, container(2000, 200_000, 0, 0.3))];
    let plan = run(&pods, idle_pool());
    // ×1.2 → 240000; burst 2000 × 150 = 300000 clamped to the new quota 240000, which is above
    // the quota held now (200000): the burst must wait for the quota. Pod quota before container.
    assert_eq!(
        short(&plan),
        [
            ("pod", "quota", 240_000),
            ("c", "quota", 240_000),
            ("c", "burst", 240_000),
            ("pod", "burst", 240_000)
        ]
    );
    assert_eq!(plan.pods[0].source, "podStrategies[0]");
    assert_eq!(plan.pods[0].containers[0].quota_op, Some(QuotaOp::ScaleUp));
    check_kernel_order(&pods, &plan.writes);
}

#[test]
fn scale_up_stops_at_the_ceiling() {
    let cfg = params(CpuBurstPolicy::CfsQuotaBurstOnly, 0, 300, -1);
    let pods = [pod(cfg, 580_000, 0, container(2000, 580_000, 0, 0.3))];
    let plan = run(&pods, idle_pool());
    assert_eq!(short(&plan), [("pod", "quota", 600_000), ("c", "quota", 600_000)]);
    check_kernel_order(&pods, &plan.writes);
}

#[test]
fn overload_scales_down_lowering_burst_first() {
    let cfg = params(CpuBurstPolicy::Auto, 1000, 300, -1);
    let pods = [pod(cfg, 300_000, 300_000, container(2000, 300_000, 300_000, 0.0))];
    let busy = SharePool {
        node_usage_milli: Some(6000.0),
        ..idle_pool()
    };
    let plan = run(&pods, busy);
    assert_eq!(plan.node_state, NodeState::Overload);
    // ×0.8 → 240000: bursts drop to 240000 first, then container quota, then pod quota.
    assert_eq!(
        short(&plan),
        [
            ("c", "burst", 240_000),
            ("pod", "burst", 240_000),
            ("c", "quota", 240_000),
            ("pod", "quota", 240_000)
        ]
    );
    check_kernel_order(&pods, &plan.writes);
    // Never below the limit's quota.
    let pods = [pod(cfg, 210_000, 0, container(2000, 210_000, 0, 0.0))];
    let plan = run(&pods, busy);
    assert_eq!(plan.pods[0].containers[0].quota_us, Some(200_000));
}

#[test]
fn cooling_or_unknown_hold_the_quota() {
    let cfg = params(CpuBurstPolicy::CfsQuotaBurstOnly, 0, 300, -1);
    let pods = [pod(cfg, 200_000, 0, container(2000, 200_000, 0, 0.5))];
    let cooling = SharePool {
        node_usage_milli: Some(3700.0),
        ..idle_pool()
    };
    assert_eq!(run(&pods, cooling).node_state, NodeState::Cooling);
    assert!(run(&pods, cooling).writes.is_empty());
    let unknown = SharePool {
        node_usage_milli: None,
        ..idle_pool()
    };
    assert!(run(&pods, unknown).writes.is_empty());
}

#[test]
fn policy_none_resets_scaled_quota_and_burst() {
    let cfg = params(CpuBurstPolicy::None, 1000, 300, -1);
    let pods = [pod(cfg, 288_000, 100_000, container(2000, 288_000, 100_000, 0.9))];
    let plan = run(&pods, idle_pool());
    assert_eq!(
        short(&plan),
        [
            ("c", "burst", 0),
            ("pod", "burst", 0),
            ("c", "quota", 200_000),
            ("pod", "quota", 200_000)
        ]
    );
    check_kernel_order(&pods, &plan.writes);
    // Already at rest: nothing.
    let pods = [pod(cfg, 200_000, 0, container(2000, 200_000, 0, 0.9))];
    assert!(run(&pods, idle_pool()).writes.is_empty());
}

#[test]
fn unlimited_quota_gets_no_burst_and_no_scaling() {
    let cfg = params(CpuBurstPolicy::Auto, 1000, 300, -1);
    let mut c = container(2000, -1, 0, 0.9);
    c.cfs_burst_us = Some(5000);
    let pods = [pod(cfg, -1, 0, c)];
    let plan = run(&pods, idle_pool());
    assert_eq!(short(&plan), [("c", "burst", 0)]);
    assert_eq!(plan.pods[0].containers[0].quota_op, None);
}

#[test]
fn only_active_ls_pods_burst() {
    let cfg = params(CpuBurstPolicy::Auto, 100, 300, -1);
    for qos in [QoSClass::Lse, QoSClass::Lsr, QoSClass::Be] {
        let mut p = pod(cfg, 200_000, 0, container(2000, 200_000, 0, 0.5));
        p.qos = qos;
        let plan = run(&[p], idle_pool());
        assert!(plan.pods.is_empty() && plan.writes.is_empty(), "{qos:?}");
    }
    let mut p = pod(cfg, 200_000, 0, container(2000, 200_000, 0, 0.5));
    p.active = false;
    assert!(run(&[p], idle_pool()).writes.is_empty());
    for qos in [QoSClass::Ls, QoSClass::None, QoSClass::System] {
        let mut p = pod(cfg, 200_000, 0, container(2000, 200_000, 0, 0.5));
        p.qos = qos;
        assert!(!run(&[p], idle_pool()).writes.is_empty(), "{qos:?}");
    }
}

#[test]
fn burst_period_limits_time_scaled_up() {
    // Seed 000: cfsQuotaBurstPercent 600, period 10 s → 10 × 500 = 5000 percent-seconds.
    let cfg = params(CpuBurstPolicy::Auto, 100, 600, 10);
    let mut c = container(1000, 100_000, 0, 0.5);
    let mut state = BurstState::default();
    let mut quotas = Vec::new();
    // The container runs at 600 % of its limit: drains 500 per second.
    for second in 0..14 {
        c.usage_milli = Some(6000.0);
        let pods = [pod(cfg, c.cfs_quota_us.unwrap(), 0, c.clone())];
        let plan = run_with(&pods, idle_pool(), f64::from(second), &state);
        check_kernel_order(&pods, &plan.writes);
        c.cfs_quota_us = plan.pods[0].containers[0].quota_us;
        quotas.push(c.cfs_quota_us.unwrap());
        state = plan.next_state;
    }
    let l = state.limiters["containerd://c1"];
    assert_eq!(l.capacity, 5000.0);
    // Scaled up for 10 s of full burst, then scaled down.
    assert!(quotas[9] > quotas[10], "{quotas:?}");
    assert!(quotas[..10].windows(2).all(|w| w[1] >= w[0]), "{quotas:?}");
    assert!(quotas[10..].windows(2).all(|w| w[1] <= w[0]), "{quotas:?}");
    // Idle time refills it: below 60 % adds (100 − usage%) per second.
    c.usage_milli = Some(0.0);
    let pods = [pod(cfg, c.cfs_quota_us.unwrap(), 0, c.clone())];
    let plan = run_with(&pods, idle_pool(), 24.0, &state);
    assert!(plan.next_state.limiters["containerd://c1"].tokens > l.tokens);
    // A container that is gone loses its state.
    let plan = run_with(&[], idle_pool(), 25.0, &plan.next_state);
    assert!(plan.next_state.limiters.is_empty());
}

/// Seed 000 end to end through the api resolver: the matching pod gets podStrategies[0] and its
/// numbers, a non-matching pod keeps the node strategy; the plan names the source.
#[test]
fn seed_000_pod_strategies_through_the_resolver() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use koord_api::config::resolve_pod_burst;
    use koord_api::nodeslo::{CpuBurstPodStrategy, CpuBurstStrategy};

    let node = CpuBurstStrategy {
        policy: Some(CpuBurstPolicy::Auto),
        cpu_burst_percent: Some(200),
        cfs_quota_burst_percent: Some(300),
        cfs_quota_burst_period_seconds: Some(6),
        pod_strategies: Some(vec![CpuBurstPodStrategy {
            namespace: Some("frontend".into()),
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".into(), "payment".into())])),
                ..Default::default()
            }),
            override_pod: Some(true),
            cpu_burst_config: Some(CpuBurstConfig {
                policy: Some(CpuBurstPolicy::Auto),
                cpu_burst_percent: Some(100),
                cfs_quota_burst_percent: Some(600),
                cfs_quota_burst_period_seconds: Some(10),
            }),
        }]),
        ..Default::default()
    };
    let labels = BTreeMap::from([("app".to_owned(), "payment".to_owned())]);
    let annotations = BTreeMap::from([(
        "koordinator.sh/cpuBurst".to_owned(),
        r#"{"policy":"none"}"#.to_owned(),
    )]);
    let (matched, matched_src) =
        BurstParams::from_decision(&resolve_pod_burst(&node, "frontend", &labels, &annotations));
    let (other, other_src) =
        BurstParams::from_decision(&resolve_pod_burst(&node, "default", &labels, &BTreeMap::new()));
    assert_eq!(
        matched,
        params(CpuBurstPolicy::Auto, 100, 600, 10),
        "overridePod beats the annotation"
    );
    assert_eq!(
        matched_src,
        "podStrategies[0] (overridePod=true, with annotation)"
    );
    assert_eq!(
        (other, other_src.as_str()),
        (params(CpuBurstPolicy::Auto, 200, 300, 6), "node")
    );

    let mut a = pod(matched, 300_000, 0, container(1000, 300_000, 0, 0.0));
    a.config_source = matched_src;
    let mut b = pod(other, 300_000, 0, container(1000, 300_000, 0, 0.0));
    b.name = "other".into();
    b.cgroup = CgroupDir::new("kubepods/burstable/podb").unwrap();
    b.containers[0].cgroup = CgroupDir::new("kubepods/burstable/podb/c1").unwrap();
    b.config_source = other_src;
    let plan = run(&[a, b], idle_pool());
    // 1 core × 100 % = 100000 µs for the matching pod, 200 % = 200000 µs for the other.
    let burst_of = |dir: &str| {
        plan.writes
            .iter()
            .find(|w| w.cgroup.to_string() == dir && w.file() == FILE_CFS_BURST)
            .map(|w| w.value.to_string())
    };
    assert_eq!(burst_of("kubepods/burstable/poda/c1").as_deref(), Some("100000"));
    assert_eq!(burst_of("kubepods/burstable/podb/c1").as_deref(), Some("200000"));
    assert_eq!(
        plan.pods[0].source,
        "podStrategies[0] (overridePod=true, with annotation)"
    );
    assert_eq!(plan.pods[1].source, "node");
}
