//! Properties every strategy keeps whatever its inputs: no panic, BE never below its floor nor
//! above the node, eviction never touches a non-BE pod, burst never above the quota the kernel
//! holds, cpuset writes never make a child wider than its parent.

use koord_api::QoSClass;
use std::collections::BTreeMap;

use koord_api::nodeslo::{CpuBurstPolicy, CpuSuppressPolicy, ResourceThresholdStrategy};
use proptest::prelude::*;

use super::FILE_CFS_QUOTA;
use super::cpu_burst::{self, BurstContainer, BurstInput, BurstParams, BurstPod, BurstState, SharePool};
use super::cpu_evict::{self, BeCpu, BeCpuWindow, CpuEvictInput};
use super::cpu_suppress::{self, BeCgroups, BePodCgroups, CgroupState, CpuPools, CpuUsage, SuppressInput};
use super::cpuset::{CpuInfo, CpuList};
use super::eviction::EvictCandidate;
use super::memory_evict::{self, MemoryEvictInput};
use crate::CgroupDir;

fn qos() -> impl Strategy<Value = QoSClass> {
    prop_oneof![
        Just(QoSClass::Lse),
        Just(QoSClass::Lsr),
        Just(QoSClass::Ls),
        Just(QoSClass::Be),
        Just(QoSClass::System),
        Just(QoSClass::None),
    ]
}

fn candidate() -> impl Strategy<Value = EvictCandidate> {
    (
        qos(),
        proptest::option::of(any::<i32>()),
        proptest::option::of(-1e7f64..1e7),
        -10_000i64..100_000,
        proptest::option::of(any::<u64>()),
        any::<bool>(),
        any::<bool>(),
        "[a-c]{1,2}",
        any::<bool>(),
        -3i64..3,
    )
        .prop_map(
            |(qos, priority, cpu, req, mem, being, allowed, name, enabled, eviction_priority)| {
                EvictCandidate {
                    uid: format!("uid-{name}"),
                    namespace: "ns".into(),
                    name,
                    qos,
                    priority,
                    cpu_usage_milli: cpu,
                    batch_cpu_request_milli: req,
                    memory_usage_bytes: mem,
                    being_evicted: being,
                    eviction_allowed: allowed,
                    eviction_enabled: enabled,
                    eviction_priority,
                    koordinator_priority: None,
                }
            },
        )
}

fn mask_to_list(mask: u16) -> CpuList {
    CpuList::from_cpus((0..16).filter(|i| mask & (1 << i) != 0))
}

fn topology16() -> Vec<CpuInfo> {
    (0..16)
        .map(|cpu| CpuInfo {
            cpu,
            core: cpu % 8,
            socket: (cpu % 8) / 4,
            node: (cpu % 8) / 4,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cpu_list_parse_never_panics(text in ".{0,40}") {
        let _ = CpuList::parse(&text);
    }

    #[test]
    fn cpu_list_set_operations_match_a_model(
        a in proptest::collection::btree_set(0u32..300, 0..40),
        b in proptest::collection::btree_set(0u32..300, 0..40),
    ) {
        let (x, y) = (CpuList::from_cpus(a.iter().copied()), CpuList::from_cpus(b.iter().copied()));
        let model = |s: std::collections::BTreeSet<u32>| CpuList::from_cpus(s);
        prop_assert_eq!(x.union(&y), model(a.union(&b).copied().collect()));
        prop_assert_eq!(x.difference(&y), model(a.difference(&b).copied().collect()));
        prop_assert_eq!(x.intersection(&y), model(a.intersection(&b).copied().collect()));
        prop_assert_eq!(x.is_subset(&y), a.is_subset(&b));
        prop_assert_eq!(x.len(), a.len());
        prop_assert_eq!(x.iter().collect::<Vec<_>>(), a.iter().copied().collect::<Vec<_>>());
        let text = a.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        prop_assert_eq!(CpuList::parse(&text).unwrap(), x);
    }

    #[test]
    fn cpu_list_round_trips(mask in any::<u16>()) {
        let list = mask_to_list(mask);
        prop_assert_eq!(CpuList::parse(&list.to_string()).unwrap(), list);
    }

    #[test]
    fn suppress_stays_between_floor_and_capacity(
        capacity in -1000i64..200_000,
        reserved in -1000i64..50_000,
        node in -1000i64..300_000,
        pods in proptest::collection::vec((any::<bool>(), -1000i64..100_000), 0..8),
        threshold in proptest::option::of(-50i64..200),
        min in proptest::option::of(-50i64..200),
        cfs in any::<bool>(),
        quota in proptest::option::of(-1i64..3_000_000),
        masks in (any::<u16>(), any::<u16>(), any::<u16>()),
        owners in (any::<u16>(), any::<u16>(), any::<u16>()),
        static_policy in any::<bool>(),
        enable in proptest::option::of(any::<bool>()),
    ) {
        let s = ResourceThresholdStrategy {
            enable,
            cpu_suppress_threshold_percent: threshold,
            cpu_suppress_min_percent: min,
            cpu_suppress_policy: Some(if cfs { CpuSuppressPolicy::CfsQuota } else { CpuSuppressPolicy::Cpuset }),
            ..Default::default()
        };
        let pods: Vec<CpuUsage> = pods.into_iter().map(|(be, usage_milli)| CpuUsage { be, usage_milli }).collect();
        // A valid hierarchy: container ⊆ pod ⊆ besteffort.
        let (be_mask, pod_mask, c_mask) = (masks.0, masks.0 & masks.1, masks.0 & masks.1 & masks.2);
        let st = |dir: &str, m: u16| CgroupState { dir: CgroupDir::new(dir).unwrap(), cfs_quota_us: quota, cpuset: Some(mask_to_list(m)) };
        let cgroups = BeCgroups {
            besteffort: st("be", be_mask),
            pods: vec![BePodCgroups { pod: st("be/p", pod_mask), containers: vec![st("be/p/c", c_mask)] }],
        };
        let pools = CpuPools {
            topology: topology16(),
            reserved: mask_to_list(owners.0 & 0x00ff),
            lse: mask_to_list(owners.1 & 0x0f0f),
            lsr: mask_to_list(owners.2),
            system_exclusive: CpuList::default(),
            exclusive: CpuList::default(),
            kubelet_static_policy: static_policy,
            kubelet_shared: CpuList::default(),
            min_be_cpus: None,
        };
        let plan = cpu_suppress::decide(&SuppressInput {
            strategy: &s,
            capacity_milli: capacity,
            reserved_milli: reserved,
            node_usage_milli: node,
            pods: &pods,
            host_apps: &[],
            cgroups: &cgroups,
            cpus: &pools,
        });
        let full = pools.be_full();
        for w in plan.writes.iter().filter(|w| w.file() == FILE_CFS_QUOTA) {
            let v: i64 = w.value.as_int().unwrap();
            if v != -1 {
                prop_assert!(v >= cpu_suppress::MIN_BE_QUOTA_US, "{v}");
                prop_assert!(v <= (capacity.max(0) * 100).max(cpu_suppress::MIN_BE_QUOTA_US), "{v}");
            }
        }
        if let Some(d) = &plan.cpuset {
            let chosen = CpuList::parse(&d.cpus).unwrap();
            prop_assert!(chosen.is_subset(&full));
            prop_assert!(chosen.len() >= cpu_suppress::MIN_BE_CPUS.min(full.len()), "{}", d.cpus);
            prop_assert!(chosen.len() <= full.len());
        }
        let initial = BTreeMap::from([
            ("be".to_owned(), mask_to_list(be_mask)),
            ("be/p".to_owned(), mask_to_list(pod_mask)),
            ("be/p/c".to_owned(), mask_to_list(c_mask)),
        ]);
        cpu_suppress::tests::check_cpuset_order(&initial, &plan.writes);
    }

    #[test]
    fn memory_eviction_only_picks_be(
        pods in proptest::collection::vec(candidate(), 0..10),
        capacity in any::<u64>(),
        used in proptest::option::of(any::<u64>()),
        threshold in proptest::option::of(-10i64..120),
        lower in proptest::option::of(-10i64..120),
    ) {
        let s = ResourceThresholdStrategy {
            enable: Some(true),
            memory_evict_threshold_percent: threshold,
            memory_evict_lower_percent: lower,
            ..Default::default()
        };
        let plan = memory_evict::decide(&MemoryEvictInput {
            strategy: &s,
            capacity_bytes: capacity,
            used_bytes: used,
            pods: &pods,
            now_seconds: 0.0,
            last_eviction_seconds: None,
            cool_down_seconds: 4.0,
        });
        for e in &plan.evictions {
            let p = pods.iter().find(|p| p.uid == e.uid && p.pickable());
            prop_assert!(p.is_some(), "picked {:?}", e);
        }
    }

    #[test]
    fn memory_eviction_by_priority_only_picks_opted_in_pods_in_eviction_priority_order(
        pods in proptest::collection::vec(candidate(), 0..10),
        capacity in any::<u64>(),
        used in proptest::option::of(any::<u64>()),
        threshold in proptest::option::of(-10i64..120),
        priority_threshold in proptest::option::of(-2000i32..12_000),
    ) {
        let s = ResourceThresholdStrategy {
            enable: Some(true),
            memory_evict_threshold_percent: threshold,
            evict_enabled_priority_threshold: priority_threshold,
            ..Default::default()
        };
        let plan = memory_evict::decide_by_priority(&MemoryEvictInput {
            strategy: &s,
            capacity_bytes: capacity,
            used_bytes: used,
            pods: &pods,
            now_seconds: 0.0,
            last_eviction_seconds: None,
            cool_down_seconds: 4.0,
        });
        if priority_threshold.is_none() {
            prop_assert!(plan.evictions.is_empty());
        }
        let mut last_eviction_priority = i64::MIN;
        for e in &plan.evictions {
            let p = pods
                .iter()
                .find(|p| p.uid == e.uid && priority_threshold.is_some_and(|t| p.opted_in(t)));
            prop_assert!(p.is_some(), "picked {:?}", e);
            let eviction_priority = p.map_or(0, |p| p.eviction_priority);
            let unique_uids =
                pods.iter().map(|p| &p.uid).collect::<std::collections::BTreeSet<_>>().len() == pods.len();
            prop_assert!(
                !unique_uids || eviction_priority >= last_eviction_priority,
                "order: {:?}",
                plan.evictions
            );
            last_eviction_priority = eviction_priority;
        }
    }

    #[test]
    fn cpu_eviction_only_picks_be(
        pods in proptest::collection::vec(candidate(), 0..10),
        avg in (-1e6f64..1e6, -1e6f64..1e6, -1e6f64..1e6),
        samples in 0u32..100,
        lower in -10i64..120,
        upper in -10i64..120,
        window in proptest::option::of(-10i64..100),
    ) {
        let s = ResourceThresholdStrategy {
            enable: Some(true),
            cpu_evict_be_satisfaction_lower_percent: Some(lower),
            cpu_evict_be_satisfaction_upper_percent: Some(upper),
            cpu_evict_time_window_seconds: window,
            ..Default::default()
        };
        let be = BeCpu { usage_milli: avg.0, real_limit_milli: avg.1, request_milli: avg.2 };
        let plan = cpu_evict::decide(&CpuEvictInput {
            strategy: &s,
            window: Some(BeCpuWindow { average: be, samples }),
            latest: Some(be),
            collect_interval_seconds: 1.0,
            batch_allocatable_milli: None,
            pods: &pods,
            now_seconds: 0.0,
            last_eviction_seconds: None,
            cool_down_seconds: 20.0,
        });
        for e in &plan.evictions {
            let p = pods.iter().find(|p| p.uid == e.uid && p.pickable());
            prop_assert!(p.is_some(), "picked {:?}", e);
        }
    }

    #[test]
    fn burst_never_exceeds_the_quota_the_kernel_holds(
        policy in prop_oneof![
            Just(CpuBurstPolicy::None), Just(CpuBurstPolicy::CpuBurstOnly),
            Just(CpuBurstPolicy::CfsQuotaBurstOnly), Just(CpuBurstPolicy::Auto)
        ],
        burst_pct in -100i64..20_000,
        quota_pct in -100i64..1000,
        period in -2i64..30,
        containers in proptest::collection::vec(
            (proptest::option::of(-100i64..64_000), proptest::option::of(1000i64..10_000_000),
             0i64..10_000_000, proptest::option::of(0.0f64..1.0), proptest::option::of(0.0f64..100_000.0)),
            1..4),
        node in proptest::option::of(0.0f64..20_000.0),
        steps in 1usize..6,
    ) {
        let config = BurstParams {
            policy,
            cpu_burst_percent: burst_pct,
            cfs_quota_burst_percent: quota_pct,
            cfs_quota_burst_period_seconds: period,
        };
        // A consistent starting point: each burst within its quota, pod quota = Σ containers.
        let cs: Vec<BurstContainer> = containers
            .iter()
            .enumerate()
            .map(|(i, (limit, quota, burst, thr, usage))| BurstContainer {
                id: format!("c{i}"),
                name: format!("c{i}"),
                cgroup: CgroupDir::new(format!("pod/c{i}")).unwrap(),
                cpu_limit_milli: *limit,
                cfs_quota_us: Some(quota.unwrap_or(-1)),
                cfs_burst_us: Some(quota.map_or(0, |q| (*burst).min(q))),
                throttled_ratio: *thr,
                usage_milli: *usage,
            })
            .collect();
        let pod_quota = if cs.iter().all(|c| c.cfs_quota_us.unwrap_or(-1) > 0) {
            cs.iter().map(|c| c.cfs_quota_us.unwrap_or(0)).sum()
        } else {
            -1
        };
        let mut pod = BurstPod {
            namespace: "ns".into(),
            name: "p".into(),
            qos: QoSClass::Ls,
            active: true,
            cgroup: CgroupDir::new("pod").unwrap(),
            cfs_quota_us: Some(pod_quota),
            cfs_burst_us: Some(0),
            config,
            config_source: "node".into(),
            containers: cs,
        };
        let mut state = BurstState::default();
        for step in 0..steps {
            let pods = [pod.clone()];
            let plan = cpu_burst::decide(&BurstInput {
                share_pool_threshold_percent: 50,
                share_pool: SharePool {
                    processors: 8,
                    lse_lsr_request_milli: 0,
                    node_usage_milli: node,
                    lse_lsr_be_usage_milli: Some(0.0),
                },
                pods: &pods,
                now_seconds: step as f64,
                state: &state,
            });
            cpu_burst::tests::check_kernel_order(&pods, &plan.writes);
            // Apply the plan and go on from there.
            for w in &plan.writes {
                let v: i64 = w.value.as_int().unwrap();
                let target = if w.cgroup == pod.cgroup {
                    (&mut pod.cfs_quota_us, &mut pod.cfs_burst_us)
                } else {
                    let c = pod.containers.iter_mut().find(|c| c.cgroup == w.cgroup).unwrap();
                    (&mut c.cfs_quota_us, &mut c.cfs_burst_us)
                };
                if w.file() == FILE_CFS_QUOTA { *target.0 = Some(v) } else { *target.1 = Some(v) }
            }
            state = plan.next_state;
        }
    }
}
