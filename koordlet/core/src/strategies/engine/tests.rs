use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::CgroupDriver;
use crate::strategies::{FILE_CFS_BURST, FILE_CFS_QUOTA};

const GI: u64 = 1 << 30;

fn pod(name: &str, ns: &str, uid: &str, qos: &str, extra: serde_json::Value) -> PodMeta {
    let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
    let mut v = json!({
        "metadata": {"name": name, "namespace": ns, "uid": uid,
                     "labels": {"koordinator.sh/qosClass": qos}},
        "spec": {"containers": [{"name": "c", "resources": {}}]},
        "status": {"phase": "Running",
                   "containerStatuses": [{"name": "c", "containerID": format!("containerd://{hex:0>64}"),
                                          "image": "", "imageID": "", "ready": true, "restartCount": 0}]}
    });
    merge(&mut v, extra);
    PodMeta::new(Arc::new(serde_json::from_value(v).unwrap())).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn slo(v: serde_json::Value) -> NodeSLOSpec {
    serde_json::from_value(v).unwrap()
}

struct World {
    node: NodeFacts,
    pods: Vec<PodMeta>,
    paths: KubeCgroupPaths,
    slo: Option<NodeSLOSpec>,
    gates: FeatureGates,
    usage: UsageFacts,
    cgroups: CgroupFacts,
    in_flight: BTreeSet<String>,
    state: EngineState,
    options: EngineOptions,
}

impl World {
    fn new(pods: Vec<PodMeta>, slo: Option<NodeSLOSpec>, gates: &str) -> Self {
        World {
            node: NodeFacts {
                cpu_capacity_milli: 8000,
                cpu_allocatable_milli: 8000,
                memory_capacity_bytes: 100 * GI,
                ..NodeFacts::default()
            },
            pods,
            paths: KubeCgroupPaths::new(CgroupDriver::Cgroupfs),
            slo,
            gates: FeatureGates::parse(gates).unwrap(),
            usage: UsageFacts::default(),
            cgroups: CgroupFacts::default(),
            in_flight: BTreeSet::new(),
            state: EngineState::default(),
            options: EngineOptions::default(),
        }
    }

    fn run(&self) -> EnginePlan {
        run(&self.input())
    }

    fn input(&self) -> EngineInput<'_> {
        EngineInput {
            node: &self.node,
            pods: &self.pods,
            paths: &self.paths,
            node_slo: self.slo.as_ref(),
            gates: &self.gates,
            usage: &self.usage,
            cgroups: &self.cgroups,
            topology: &[],
            in_flight: &self.in_flight,
            state: &self.state,
            now_seconds: 1000.0,
            options: self.options,
        }
    }
}

fn memory_world() -> World {
    let pods = vec![
        pod("ls", "default", "u-ls", "LS", json!({})),
        pod("be-small", "default", "u-be1", "BE", json!({})),
        pod("be-big", "default", "u-be2", "BE", json!({})),
    ];
    let mut w = World::new(
        pods,
        Some(slo(
            json!({"resourceUsedThresholdWithBE": {"enable": true, "memoryEvictThresholdPercent": 70}}),
        )),
        "BEMemoryEvict=true",
    );
    w.usage.node_memory_bytes = Some(80 * GI);
    for (uid, mem) in [("u-ls", 50 * GI), ("u-be1", GI), ("u-be2", 8 * GI)] {
        w.usage.pods.insert(
            uid.into(),
            PodUsage {
                cpu_milli: Some(100.0),
                memory_bytes: Some(mem),
            },
        );
    }
    w
}

#[test]
fn memory_over_threshold_evicts_the_biggest_be_pod_only() {
    let w = memory_world();
    let plan = w.run();
    // 80 % → release down to 68 %: 12 Gi; be-big (8) + be-small (1) do not cover it, both go.
    let names: Vec<_> = plan.evictions.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["be-big", "be-small"]);
    assert!(
        plan.evictions
            .iter()
            .all(|e| e.reason == "EvictPodByNodeMemoryUsage")
    );
    assert!(
        plan.evictions[0].message.contains("80%"),
        "{}",
        plan.evictions[0].message
    );
    assert_eq!(plan.next_state.memory_evict_last, Some(1000.0));
    // Cool-down in the next round.
    let mut w2 = memory_world();
    w2.state = plan.next_state.clone();
    assert!(w2.run().evictions.is_empty());
}

#[test]
fn eviction_policy_annotation_limits_which_strategy_may_evict() {
    // (annotation on be-big, memory_evict picks, exempt from memory_evict, exempt from cpu_evict)
    let cases: [(Option<&str>, &[&str], bool, bool); 6] = [
        (None, &["be-big", "be-small"], false, false),
        (Some(r#"["BEMemoryEvict"]"#), &["be-big", "be-small"], false, true),
        (Some(r#"["BECPUEvict","CPUEvict"]"#), &["be-small"], true, false),
        (
            Some(r#"["BECPUEvict","BEMemoryEvict"]"#),
            &["be-big", "be-small"],
            false,
            false,
        ),
        (Some("[]"), &["be-small"], true, true),
        (Some("BEMemoryEvict"), &["be-small"], true, true),
    ];
    for (annotation, picks, memory_exempt, cpu_exempt) in cases {
        let mut w = memory_world();
        w.gates = FeatureGates::parse("BEMemoryEvict=true,BECPUEvict=true").unwrap();
        if let Some(a) = annotation {
            w.pods[2] = pod(
                "be-big",
                "default",
                "u-be2",
                "BE",
                json!({"metadata": {"annotations": {"koordinator.sh/eviction-policy": a}}}),
            );
        }
        let plan = w.run();
        let names: Vec<_> = plan.evictions.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, picks, "{annotation:?}");
        let memory = plan.strategies.memory_evict.ran().unwrap();
        let cpu = plan.strategies.cpu_evict.ran().unwrap();
        assert_eq!(!memory.exempt.is_empty(), memory_exempt, "{annotation:?}");
        assert_eq!(!cpu.exempt.is_empty(), cpu_exempt, "{annotation:?}");
        for e in memory.exempt.iter().chain(&cpu.exempt) {
            assert_eq!(e.pod, "default/be-big");
            assert!(
                e.reason.contains("koordinator.sh/eviction-policy"),
                "{}",
                e.reason
            );
        }
    }
}

#[test]
fn memory_evict_by_priority_follows_be_memory_eviction_and_picks_opted_in_pods() {
    let opted_in = |name: &str, uid: &str, priority: i32, annotations: serde_json::Value| {
        pod(
            name,
            "default",
            uid,
            "LS",
            json!({"metadata": {"labels": {"koordinator.sh/eviction-enabled": "true"},
                                "annotations": annotations},
                   "spec": {"priority": priority}}),
        )
    };
    let mut w = memory_world();
    w.slo = Some(slo(json!({"resourceUsedThresholdWithBE": {
        "enable": true, "memoryEvictThresholdPercent": 70, "evictEnabledPriorityThreshold": 5000}})));
    w.gates = FeatureGates::parse("BEMemoryEvict=true,MemoryEvict=true").unwrap();
    w.pods.push(opted_in("ls-batchy", "u-ls2", 5000, json!({})));
    w.pods.push(opted_in(
        "ls-first",
        "u-ls3",
        5000,
        json!({"koordinator.sh/eviction-priority": "-5"}),
    ));
    w.pods.push(opted_in("ls-important", "u-ls4", 9000, json!({})));
    w.pods.push(opted_in(
        "ls-memory-only-by-be",
        "u-ls5",
        0,
        json!({"koordinator.sh/eviction-policy": r#"["BEMemoryEvict"]"#}),
    ));
    for (uid, mem) in [
        ("u-ls2", 2 * GI),
        ("u-ls3", GI),
        ("u-ls4", 30 * GI),
        ("u-ls5", 30 * GI),
    ] {
        w.usage.pods.insert(
            uid.into(),
            PodUsage {
                cpu_milli: Some(100.0),
                memory_bytes: Some(mem),
            },
        );
    }
    // 80 % → release 12 Gi. The BE pods (9 Gi) go first; the node-level task counts them and
    // takes the opted-in pods at or below priority 5000 by eviction priority: ls-first (1 Gi),
    // then ls-batchy (2 Gi), which covers the 12 Gi.
    let plan = w.run();
    let names: Vec<_> = plan.evictions.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["be-big", "be-small", "ls-first", "ls-batchy"]);
    let by_priority = plan.strategies.memory_evict_by_priority.ran().unwrap();
    assert_eq!(by_priority.in_flight_bytes, 9 * GI);
    assert_eq!(by_priority.released_bytes, 12 * GI);
    assert_eq!(
        by_priority.evictions[0].reason,
        "EvictPodByMemoryUsedThresholdPercent"
    );
    assert_eq!(by_priority.exempt.len(), 1);
    assert_eq!(by_priority.exempt[0].pod, "default/ls-memory-only-by-be");
    assert_eq!(plan.next_state.memory_evict_last, Some(1000.0));
    // The BE strategy never picks an LS pod, opted in or not.
    let be = plan.strategies.memory_evict.ran().unwrap();
    assert!(be.evictions.iter().all(|e| e.name.starts_with("be-")));
    // Gate off: the report says so and only BE pods go.
    w.gates = FeatureGates::parse("BEMemoryEvict=true").unwrap();
    let plan = w.run();
    assert_eq!(plan.evictions.len(), 2);
    let v = serde_json::to_value(&plan.strategies).unwrap();
    assert_eq!(
        v["memory_evict_by_priority"]["skipped"],
        "feature gate MemoryEvict is off"
    );
}

#[test]
fn in_flight_pods_are_not_picked_again() {
    let mut w = memory_world();
    w.usage.node_memory_bytes = Some(70 * GI);
    w.in_flight.insert("u-be2".into());
    // Release 2 Gi; be-big (8 Gi) is already going: nothing new.
    let plan = w.run();
    assert!(plan.evictions.is_empty(), "{:?}", plan.evictions);
}

#[test]
fn gates_and_missing_inputs_skip_with_a_reason() {
    let mut w = memory_world();
    w.gates = FeatureGates::parse("").unwrap();
    let plan = w.run();
    assert!(plan.evictions.is_empty());
    let v = serde_json::to_value(&plan.strategies).unwrap();
    assert_eq!(v["memory_evict"]["skipped"], "feature gate BEMemoryEvict is off");
    assert_eq!(v["cpu_evict"]["skipped"], "feature gate BECPUEvict is off");
    assert_eq!(v["cpu_burst"]["skipped"], "no cpuBurstStrategy in the NodeSLO");
    // Suppress is enabled by the NodeSLO but node CPU was never measured.
    assert_eq!(v["cpu_suppress"]["skipped"], "node CPU usage not measured yet");
    let none = World::new(vec![], None, "BEMemoryEvict=true,BECPUEvict=true");
    let v = serde_json::to_value(none.run().strategies).unwrap();
    for s in ["cpu_suppress", "cpu_evict", "memory_evict"] {
        assert!(v[s]["skipped"].as_str().unwrap().contains("NodeSLO"), "{s}: {v}");
    }
}

#[test]
fn suppress_writes_follow_the_switch() {
    let mut w = World::new(
        vec![pod("be", "default", "u-be", "BE", json!({}))],
        Some(slo(json!({"resourceUsedThresholdWithBE": {
            "enable": true, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 65}}))),
        "",
    );
    w.usage.node_cpu_milli = Some(4000.0);
    let plan = w.run();
    let suppress = plan.strategies.cpu_suppress.ran().unwrap();
    assert!(suppress.applied);
    let quota = plan
        .writes
        .iter()
        .find(|x| x.strategy == "cpu_suppress" && x.file() == FILE_CFS_QUOTA)
        .unwrap();
    assert_eq!(quota.cgroup.to_string(), "kubepods/besteffort");
    // 8000 × 65 % − system (4000 − 0 pods) = 1200m → 120000 µs.
    assert_eq!(quota.value.to_string(), "120000");
    w.options.apply_cpu_suppress = false;
    let plan = w.run();
    assert!(plan.writes.iter().all(|x| x.strategy != "cpu_suppress"));
    let suppress = plan.strategies.cpu_suppress.ran().unwrap();
    assert!(!suppress.applied && !suppress.plan.writes.is_empty());
}

#[test]
fn pod_level_burst_strategy_reaches_only_the_matching_pod() {
    let limited = |labels: serde_json::Value| {
        json!({"metadata": {"labels": labels},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}}]}})
    };
    let pods = vec![
        pod(
            "pay",
            "frontend",
            "u-pay",
            "LS",
            limited(json!({"app": "payment", "koordinator.sh/qosClass": "LS"})),
        ),
        pod(
            "other",
            "frontend",
            "u-oth",
            "LS",
            limited(json!({"app": "web", "koordinator.sh/qosClass": "LS"})),
        ),
    ];
    let mut w = World::new(
        pods,
        Some(slo(json!({"cpuBurstStrategy": {
            "policy": "none",
            "podStrategies": [{"namespace": "frontend", "podSelector": {"matchLabels": {"app": "payment"}},
                               "overridePod": true,
                               "cpuBurstConfig": {"policy": "cpuBurstOnly", "cpuBurstPercent": 100}}]}}))),
        "",
    );
    for p in &w.pods {
        let pod_dir = p.cgroup_dir(&w.paths).to_string();
        w.cgroups.ints.insert((pod_dir.clone(), FILE_CFS_QUOTA), 100_000);
        w.cgroups.ints.insert((pod_dir, FILE_CFS_BURST), 0);
        let c = p.container_dir(&w.paths, &p.containers[0]).unwrap().to_string();
        w.cgroups.ints.insert((c.clone(), FILE_CFS_QUOTA), 100_000);
        w.cgroups.ints.insert((c, FILE_CFS_BURST), 0);
    }
    let plan = w.run();
    let bursts: Vec<_> = plan
        .writes
        .iter()
        .filter(|x| x.file() == FILE_CFS_BURST && x.value != crate::CgroupValue::Int(0))
        .collect();
    assert_eq!(bursts.len(), 2, "pod and container of `pay`: {bursts:?}");
    assert!(
        bursts
            .iter()
            .all(|x| x.cgroup.to_string().contains("u-pay") && x.value == crate::CgroupValue::Int(100_000))
    );
    let burst = plan.strategies.cpu_burst.ran().unwrap();
    let sources: Vec<_> = burst
        .pods
        .iter()
        .map(|p| (p.name.as_str(), p.source.as_str()))
        .collect();
    assert!(
        sources.contains(&("pay", "podStrategies[0] (overridePod=true)")),
        "{sources:?}"
    );
    assert!(sources.contains(&("other", "node")));
}

/// Seed 000 the other way round: the pod strategy that scaled `pay`'s quota and gave it a
/// kernel burst is removed (node policy `none`). The live round still reads `pay` (it had a
/// burst policy last round) and the plan puts burst back to 0 and the quota back to the limit,
/// container and pod.
#[test]
fn removed_pod_strategy_resets_burst_and_scaled_quota() {
    let pay = pod(
        "pay",
        "frontend",
        "u-pay",
        "LS",
        json!({"metadata": {"labels": {"app": "payment", "koordinator.sh/qosClass": "LS"}},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}}]}}),
    );
    let with_strategy = slo(json!({"cpuBurstStrategy": {
        "policy": "none",
        "podStrategies": [{"namespace": "frontend", "podSelector": {"matchLabels": {"app": "payment"}},
                           "cpuBurstConfig": {"policy": "auto", "cpuBurstPercent": 100, "cfsQuotaBurstPercent": 300}}]}}));
    let without = slo(json!({"cpuBurstStrategy": {"policy": "none"}}));
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    let strategy = |s: &NodeSLOSpec| s.cpu_burst_strategy.clone().unwrap();
    // Reads: skipped for a `none` pod unless it had a burst policy last round.
    let live = |s: &NodeSLOSpec, recent: &std::collections::HashSet<String>| {
        cgroup_reads(
            std::slice::from_ref(&pay),
            &paths,
            ReadScope {
                be_pods: false,
                burst: Some(&strategy(s)),
                skip_burst_none: true,
                burst_recent: Some(recent),
                cpuset_policy: false,
            },
        )
        .len()
    };
    let none = std::collections::HashSet::new();
    let recent: std::collections::HashSet<String> = ["frontend/pay".to_string()].into();
    assert_eq!(
        live(&with_strategy, &none),
        2 + 4,
        "besteffort + pod and container quota/burst"
    );
    assert_eq!(live(&without, &none), 2, "a `none` pod is not read");
    assert_eq!(live(&without, &recent), 2 + 4, "a formerly bursting pod is read");

    let mut w = World::new(vec![pay.clone()], Some(without), "");
    let pod_dir = pay.cgroup_dir(&w.paths).to_string();
    let c = pay
        .container_dir(&w.paths, &pay.containers[0])
        .unwrap()
        .to_string();
    // What the burst left: container quota ×1.44, pod quota moved by the same delta, bursts.
    for (dir, quota, burst) in [(&pod_dir, 144_000, 100_000), (&c, 144_000, 100_000)] {
        w.cgroups.ints.insert((dir.clone(), FILE_CFS_QUOTA), quota);
        w.cgroups.ints.insert((dir.clone(), FILE_CFS_BURST), burst);
    }
    let plan = w.run();
    let writes: Vec<_> = plan
        .writes
        .iter()
        .filter(|x| x.strategy == "cpu_burst")
        .map(|x| (x.cgroup.to_string(), x.file(), x.value.to_string()))
        .collect();
    assert_eq!(
        writes,
        vec![
            (c.clone(), FILE_CFS_BURST, "0".to_string()),
            (pod_dir.clone(), FILE_CFS_BURST, "0".to_string()),
            (c.clone(), FILE_CFS_QUOTA, "100000".to_string()),
            (pod_dir.clone(), FILE_CFS_QUOTA, "100000".to_string()),
        ],
        "burst first (it must not exceed the lowered quota), then container before pod"
    );
    let burst = plan.strategies.cpu_burst.ran().unwrap();
    assert_eq!(burst.pods[0].source, "node");
    assert_eq!(
        burst.pods[0].containers[0].quota_op,
        Some(cpu_burst::QuotaOp::Reset)
    );
}

/// Host applications enter the budget: non-BE ones are subtracted on their own and leave the
/// system share; a BE one (QoS BE under besteffort) only leaves the system share.
#[test]
fn suppress_budget_subtracts_non_be_host_applications() {
    let mut w = World::new(
        vec![],
        Some(slo(json!({"resourceUsedThresholdWithBE": {
            "enable": true, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 65}}))),
        "",
    );
    w.usage.node_cpu_milli = Some(4000.0);
    w.usage.host_apps = vec![
        HostAppUsage {
            name: "nginx".into(),
            be: false,
            cpu_milli: 1500.0,
        },
        HostAppUsage {
            name: "batch-agent".into(),
            be: true,
            cpu_milli: 500.0,
        },
    ];
    let plan = w.run();
    let b = plan.strategies.cpu_suppress.ran().unwrap().plan.budget.unwrap();
    assert_eq!(b.host_app_non_be_milli, 1500);
    // system = 4000 − 0 pods − 2000 host apps = 2000.
    assert_eq!(b.system_milli, 2000);
    // 8000 × 65 % − 1500 − 2000 = 1700 (without host apps it would be 5200 − 4000 = 1200: the
    // BE host app's 500m is no longer charged to the system).
    assert_eq!(b.budget_milli, 1700);
    // With a reservation above the system share, the host app is still subtracted in full.
    w.node.cpu_allocatable_milli = 5000;
    let plan = w.run();
    let b = plan.strategies.cpu_suppress.ran().unwrap().plan.budget.unwrap();
    assert_eq!((b.system_milli, b.budget_milli), (3000, 5200 - 1500 - 3000));
}

/// `run_cached` decides what `run` decides; be_limits' writes come back in executor form
/// instead of in `writes`, and follow NodeSLO changes.
#[test]
fn cached_run_matches_the_pure_run() {
    let be = |name: &str, uid: &str| {
        pod(
            name,
            "default",
            uid,
            "BE",
            json!({"spec": {"containers": [{"name": "c", "resources": {
                "requests": {"kubernetes.io/batch-cpu": "500"},
                "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}}}]}}),
        )
    };
    let pods = vec![
        pod("ls", "default", "u-ls", "LS", json!({})),
        be("be1", "u-be1"),
        be("be2", "u-be2"),
    ];
    let mut w = World::new(pods, None, "BatchResource=true,CPUBurst=true,BECPUSuppress=true");
    let mut cache = EngineCache::new();
    let slos = [
        None,
        Some(slo(
            json!({"resourceUsedThresholdWithBE": {"enable": true, "cpuSuppressPolicy": "cfsQuota"}}),
        )),
        None,
    ];
    for (i, next_slo) in slos.into_iter().enumerate() {
        w.slo = next_slo;
        w.usage.node_cpu_milli = Some(1000.0);
        for _ in 0..2 {
            let pure = w.run();
            let cached = run_cached(&w.input(), &mut cache);
            assert_eq!(cached.strategies, pure.strategies, "round {i}");
            assert_eq!(cached.evictions, pure.evictions);
            let be_writes: Vec<_> = pure
                .writes
                .iter()
                .filter(|x| x.strategy == be_limits::STRATEGY)
                .cloned()
                .collect();
            assert_eq!(be_writes.len(), 12, "(pod + container) × 3 files × 2 pods");
            let round = cached.be_limits_round.as_ref().unwrap();
            assert_eq!(round.writes().cloned().collect::<Vec<_>>(), be_writes);
            let others: Vec<_> = pure
                .writes
                .iter()
                .filter(|x| x.strategy != be_limits::STRATEGY)
                .cloned()
                .collect();
            assert_eq!(cached.writes, others);
            assert!(pure.be_limits_round.is_none());
        }
        let quota = cache.be_limits().len();
        assert_eq!(quota, 2);
    }
    // Two pods computed at first, and again after each of the two NodeSLO changes.
    assert_eq!(cache.be_limits().computed(), 6);

    // Gate off: nothing from be_limits.
    w.gates = FeatureGates::parse("BatchResource=false").unwrap();
    let cached = run_cached(&w.input(), &mut cache);
    assert!(cached.be_limits_round.is_none());
}
