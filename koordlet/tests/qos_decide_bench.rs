//! How long each QoS decision takes for a node with many pods: the budget a fast path (LS spike
//! to BE write within 200 ms) has to fit in. Ignored by default; run with
//! `cargo test -p koordlet --release --test qos_decide_bench -- --ignored --nocapture`.
//! Prints figures, asserts nothing about time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use koord_api::QoSClass;
use std::hint::black_box;
use std::time::Instant;

use koord_api::nodeslo::{CpuBurstPolicy, CpuSuppressPolicy, ResourceThresholdStrategy};
use koordlet_core::CgroupDir;
use koordlet_core::strategies::cpu_burst::{
    self, BurstContainer, BurstInput, BurstParams, BurstPod, BurstState, SharePool,
};
use koordlet_core::strategies::cpu_evict::{self, BeCpu, BeCpuWindow, CpuEvictInput};
use koordlet_core::strategies::cpu_suppress::{
    self, BeCgroups, BePodCgroups, CgroupState, CpuPools, CpuUsage, SuppressInput,
};
use koordlet_core::strategies::cpuset::{CpuInfo, CpuList};
use koordlet_core::strategies::eviction::EvictCandidate;
use koordlet_core::strategies::memory_evict::{self, MemoryEvictInput};

const ROUNDS: u32 = 200;

fn time<T>(label: &str, pods: usize, mut f: impl FnMut() -> T) {
    let mut samples: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    let p = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "{label:<22} {pods:>4} pods  p50 {:>8.1} µs  p99 {:>8.1} µs",
        p(0.5),
        p(0.99)
    );
}

#[test]
#[ignore = "benchmark: prints figures"]
fn decision_time_by_pod_count() {
    let topology: Vec<CpuInfo> = (0..96)
        .map(|cpu| CpuInfo {
            cpu,
            core: cpu % 48,
            socket: (cpu % 48) / 24,
            node: (cpu % 48) / 24,
        })
        .collect();
    for pods in [50usize, 110, 250, 500] {
        let usage: Vec<CpuUsage> = (0..pods)
            .map(|i| CpuUsage {
                be: i % 2 == 0,
                usage_milli: (i as i64 * 37) % 4000,
            })
            .collect();
        let be_tree = BeCgroups {
            besteffort: CgroupState {
                dir: CgroupDir::new("kubepods/besteffort").unwrap(),
                cfs_quota_us: Some(-1),
                cpuset: Some(CpuList::from_cpus(0..96)),
            },
            pods: (0..pods / 2)
                .map(|i| BePodCgroups {
                    pod: CgroupState {
                        dir: CgroupDir::new(format!("kubepods/besteffort/pod{i}")).unwrap(),
                        cfs_quota_us: None,
                        cpuset: Some(CpuList::from_cpus(0..96)),
                    },
                    containers: (0..3)
                        .map(|c| CgroupState {
                            dir: CgroupDir::new(format!("kubepods/besteffort/pod{i}/c{c}")).unwrap(),
                            cfs_quota_us: None,
                            cpuset: Some(CpuList::from_cpus(0..96)),
                        })
                        .collect(),
                })
                .collect(),
        };
        let pools = CpuPools {
            topology: topology.clone(),
            ..Default::default()
        };
        for policy in [CpuSuppressPolicy::CfsQuota, CpuSuppressPolicy::Cpuset] {
            let s = ResourceThresholdStrategy {
                enable: Some(true),
                cpu_suppress_policy: Some(policy),
                ..Default::default()
            };
            let label = format!("cpu_suppress {policy:?}");
            time(&label, pods, || {
                cpu_suppress::decide(&SuppressInput {
                    strategy: &s,
                    capacity_milli: 96_000,
                    reserved_milli: 2000,
                    node_usage_milli: 60_000,
                    pods: &usage,
                    host_apps: &[],
                    cgroups: &be_tree,
                    cpus: &pools,
                })
            });
        }

        let burst_pods: Vec<BurstPod> = (0..pods)
            .map(|i| BurstPod {
                namespace: "ns".into(),
                name: format!("p{i}"),
                qos: QoSClass::Ls,
                active: true,
                cgroup: CgroupDir::new(format!("kubepods/burstable/pod{i}")).unwrap(),
                cfs_quota_us: Some(600_000),
                cfs_burst_us: Some(0),
                config: BurstParams {
                    policy: CpuBurstPolicy::Auto,
                    cpu_burst_percent: 100,
                    cfs_quota_burst_percent: 300,
                    cfs_quota_burst_period_seconds: 60,
                },
                config_source: "node".into(),
                containers: (0..3)
                    .map(|c| BurstContainer {
                        id: format!("p{i}c{c}"),
                        name: format!("c{c}"),
                        cgroup: CgroupDir::new(format!("kubepods/burstable/pod{i}/c{c}")).unwrap(),
                        cpu_limit_milli: Some(2000),
                        cfs_quota_us: Some(200_000),
                        cfs_burst_us: Some(0),
                        throttled_ratio: Some(if c == 0 { 0.2 } else { 0.0 }),
                        usage_milli: Some(1500.0),
                    })
                    .collect(),
            })
            .collect();
        let state = BurstState::default();
        time("cpu_burst auto", pods, || {
            cpu_burst::decide(&BurstInput {
                share_pool_threshold_percent: 50,
                share_pool: SharePool {
                    processors: 96,
                    lse_lsr_request_milli: 0,
                    node_usage_milli: Some(20_000.0),
                    lse_lsr_be_usage_milli: Some(0.0),
                },
                pods: &burst_pods,
                now_seconds: 10.0,
                state: &state,
            })
        });

        let candidates: Vec<EvictCandidate> = (0..pods)
            .map(|i| EvictCandidate {
                uid: format!("uid{i}"),
                namespace: "ns".into(),
                name: format!("p{i}"),
                qos: if i % 2 == 0 { QoSClass::Be } else { QoSClass::Ls },
                priority: Some((i % 7) as i32 * 1000),
                cpu_usage_milli: Some((i * 13 % 2000) as f64),
                batch_cpu_request_milli: 1000,
                memory_usage_bytes: Some((i as u64 % 17) << 28),
                being_evicted: false,
                eviction_allowed: true,
                eviction_enabled: i % 3 == 0,
                eviction_priority: (i % 5) as i64,
                koordinator_priority: None,
            })
            .collect();
        let s = ResourceThresholdStrategy {
            enable: Some(true),
            cpu_evict_be_satisfaction_lower_percent: Some(60),
            cpu_evict_be_satisfaction_upper_percent: Some(80),
            ..Default::default()
        };
        time("cpu_evict", pods, || {
            cpu_evict::decide(&CpuEvictInput {
                strategy: &s,
                window: Some(BeCpuWindow {
                    average: BeCpu {
                        usage_milli: 9500.0,
                        real_limit_milli: 10_000.0,
                        request_milli: 100_000.0,
                    },
                    samples: 10,
                }),
                latest: None,
                collect_interval_seconds: 1.0,
                batch_allocatable_milli: None,
                pods: &candidates,
                now_seconds: 100.0,
                last_eviction_seconds: None,
                cool_down_seconds: 20.0,
            })
        });
        time("memory_evict", pods, || {
            memory_evict::decide(&MemoryEvictInput {
                strategy: &s,
                capacity_bytes: 512 << 30,
                used_bytes: Some(450 << 30),
                pods: &candidates,
                now_seconds: 100.0,
                last_eviction_seconds: None,
                cool_down_seconds: 4.0,
            })
        });
    }
}

/// One whole engine round (every strategy, gates on) over N pods with 3 containers each: the
/// CPU the live QoS round spends deciding, on top of its cgroup reads.
#[test]
#[ignore = "benchmark: prints figures"]
fn engine_round_by_pod_count() {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use koordlet::states::PodMeta;
    use koordlet::system::{CgroupDriver, KubeCgroupPaths};
    use koordlet_core::features::FeatureGates;
    use koordlet_core::strategies::engine::{
        self, CgroupFacts, EngineInput, EngineOptions, EngineState, NodeFacts, PodUsage, UsageFacts,
    };

    let slo: koord_api::NodeSLOSpec = serde_json::from_value(serde_json::json!({
        "resourceUsedThresholdWithBE": {"enable": true, "cpuSuppressPolicy": "cpuset",
            "memoryEvictThresholdPercent": 70, "cpuEvictBeSatisfactionLowerPercent": 60,
            "cpuEvictBeSatisfactionUpperPercent": 80},
        "cpuBurstStrategy": {"policy": "auto", "podStrategies": [
            {"podSelector": {"matchLabels": {"app": "a0"}}, "cpuBurstConfig": {"policy": "cpuBurstOnly"}}]}
    }))
    .unwrap();
    let gates = FeatureGates::parse("BECPUEvict=true,BEMemoryEvict=true").unwrap();
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    let node = NodeFacts {
        cpu_capacity_milli: 96_000,
        cpu_allocatable_milli: 94_000,
        memory_capacity_bytes: 384 << 30,
        ..NodeFacts::default()
    };
    for n in [50usize, 110, 250, 500] {
        let pods: Vec<PodMeta> = (0..n)
            .map(|i| {
                let qos = if i % 2 == 0 { "BE" } else { "LS" };
                let containers: Vec<_> = (0..3)
                    .map(|c| serde_json::json!({"name": format!("c{c}"), "resources": {
                        "limits": {"cpu": "1", "kubernetes.io/batch-cpu": "1000"},
                        "requests": {"cpu": "500m", "kubernetes.io/batch-cpu": "1000"}}}))
                    .collect();
                let statuses: Vec<_> = (0..3)
                    .map(|c| serde_json::json!({"name": format!("c{c}"), "image": "", "imageID": "",
                        "ready": true, "restartCount": 0,
                        "containerID": format!("containerd://{:064x}", i * 3 + c)}))
                    .collect();
                let pod = serde_json::json!({
                    "metadata": {"name": format!("p{i}"), "namespace": "ns", "uid": format!("{i:08}-0000-0000-0000-000000000000"),
                                 "labels": {"koordinator.sh/qosClass": qos, "app": format!("a{}", i % 5)}},
                    "spec": {"priority": (i % 3) as i32 * 1000, "containers": containers},
                    "status": {"phase": "Running", "containerStatuses": statuses}});
                PodMeta::new(Arc::new(serde_json::from_value(pod).unwrap())).unwrap()
            })
            .collect();
        let mut usage = UsageFacts {
            node_cpu_milli: Some(60_000.0),
            node_memory_bytes: Some(300 << 30),
            ..UsageFacts::default()
        };
        for p in &pods {
            usage.pods.insert(
                p.uid.as_str().to_owned(),
                PodUsage {
                    cpu_milli: Some(300.0),
                    memory_bytes: Some(1 << 30),
                },
            );
        }
        let reads = engine::cgroup_reads(
            &pods,
            &paths,
            engine::ReadScope::all(slo.cpu_burst_strategy.as_ref()),
        );
        let mut cgroups = CgroupFacts::default();
        for (dir, file) in &reads {
            if *file == "cpuset.cpus" {
                cgroups.cpusets.insert(dir.clone(), CpuList::from_cpus(0..96));
            } else {
                cgroups.ints.insert((dir.clone(), *file), 100_000);
            }
        }
        let (in_flight, state) = (BTreeSet::new(), EngineState::default());
        time("engine round", n, || {
            engine::run(&EngineInput {
                node: &node,
                pods: &pods,
                paths: &paths,
                node_slo: Some(&slo),
                gates: &gates,
                usage: &usage,
                cgroups: &cgroups,
                topology: &[],
                in_flight: &in_flight,
                state: &state,
                now_seconds: 100.0,
                options: EngineOptions::default(),
            })
        });
    }
}
