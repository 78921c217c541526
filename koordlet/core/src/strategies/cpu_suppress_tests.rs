use std::collections::BTreeMap;

use super::*;
use crate::strategies::FILE_CPUSET_CPUS;

fn strategy(policy: CpuSuppressPolicy) -> ResourceThresholdStrategy {
    ResourceThresholdStrategy {
        enable: Some(true),
        cpu_suppress_threshold_percent: Some(65),
        cpu_suppress_policy: Some(policy),
        ..Default::default()
    }
}

/// 2 sockets × 4 cores × 2 threads: core k = cpus {k, k+8}, socket 0 = cores 0-3.
fn topology16() -> Vec<CpuInfo> {
    (0..16)
        .map(|cpu| {
            let core = cpu % 8;
            CpuInfo {
                cpu,
                core,
                socket: core / 4,
                node: core / 4,
            }
        })
        .collect()
}

fn state(dir: &str, quota: Option<i64>, cpus: Option<&str>) -> CgroupState {
    CgroupState {
        dir: CgroupDir::new(dir).unwrap(),
        cfs_quota_us: quota,
        cpuset: cpus.map(|c| CpuList::parse(c).unwrap()),
    }
}

fn tree(cpus: Option<&str>, quota: Option<i64>) -> BeCgroups {
    BeCgroups {
        besteffort: state("kubepods/besteffort", quota, cpus),
        pods: vec![BePodCgroups {
            pod: state("kubepods/besteffort/poda", None, cpus),
            containers: vec![state("kubepods/besteffort/poda/c1", None, cpus)],
        }],
    }
}

struct Case {
    strategy: ResourceThresholdStrategy,
    node_usage: i64,
    pods: Vec<CpuUsage>,
    cgroups: BeCgroups,
    pools: CpuPools,
}

impl Case {
    fn new(policy: CpuSuppressPolicy) -> Self {
        Case {
            strategy: strategy(policy),
            node_usage: 0,
            pods: vec![],
            cgroups: tree(Some("0-15"), Some(-1)),
            pools: CpuPools {
                topology: topology16(),
                ..Default::default()
            },
        }
    }
    fn run(&self) -> SuppressPlan {
        decide(&SuppressInput {
            strategy: &self.strategy,
            capacity_milli: 16_000,
            reserved_milli: 0,
            node_usage_milli: self.node_usage,
            pods: &self.pods,
            host_apps: &[],
            cgroups: &self.cgroups,
            cpus: &self.pools,
        })
    }
}

fn ls(usage: i64) -> CpuUsage {
    CpuUsage {
        be: false,
        usage_milli: usage,
    }
}

fn be(usage: i64) -> CpuUsage {
    CpuUsage {
        be: true,
        usage_milli: usage,
    }
}

fn files(plan: &SuppressPlan) -> Vec<(String, &'static str, String)> {
    plan.writes
        .iter()
        .map(|w| (w.cgroup.to_string(), w.file(), w.value.to_string()))
        .collect()
}

/// Applies writes to a model of the cpuset hierarchy and checks the kernel rule after each:
/// a child is never wider than its parent.
pub(crate) fn check_cpuset_order(initial: &BTreeMap<String, CpuList>, writes: &[CgroupWrite]) {
    let mut now = initial.clone();
    for w in writes.iter().filter(|w| w.file() == FILE_CPUSET_CPUS) {
        let value = w.value.as_cpus().unwrap().clone();
        now.insert(w.cgroup.to_string(), value);
        for (dir, cpus) in &now {
            if let Some((parent, _)) = dir.rsplit_once('/')
                && let Some(p) = now.get(parent)
            {
                assert!(
                    cpus.is_subset(p),
                    "after writing {w:?}: {dir}={cpus} wider than {parent}={p}"
                );
            }
        }
    }
}

#[test]
fn budget_formula_with_system_and_reservation() {
    let s = strategy(CpuSuppressPolicy::CfsQuota);
    let cg = tree(None, None);
    let pools = CpuPools::default();
    let pods = [ls(3000), be(1000)];
    let hosts = [CpuUsage {
        be: false,
        usage_milli: 500,
    }];
    let mut input = SuppressInput {
        strategy: &s,
        capacity_milli: 10_000,
        reserved_milli: 1000,
        node_usage_milli: 5000,
        pods: &pods,
        host_apps: &hosts,
        cgroups: &cg,
        cpus: &pools,
    };
    // system = max(5000 − 4000 − 500, 1000 reserved) = 1000; 6500 − 3000 − 500 − 1000 = 2000.
    let b = budget(&input);
    assert_eq!((b.system_milli, b.budget_milli), (1000, 2000));
    // Unreserved: system usage 500 counts instead.
    input.reserved_milli = 0;
    assert_eq!(budget(&input).budget_milli, 2500);
}

#[test]
fn min_percent_floor() {
    let mut s = strategy(CpuSuppressPolicy::CfsQuota);
    s.cpu_suppress_min_percent = Some(20);
    let cg = tree(None, None);
    let pools = CpuPools::default();
    let pods = [ls(9000)];
    let input = SuppressInput {
        strategy: &s,
        capacity_milli: 10_000,
        reserved_milli: 0,
        node_usage_milli: 9000,
        pods: &pods,
        host_apps: &[],
        cgroups: &cg,
        cpus: &pools,
    };
    // 6500 − 9000 = −2500 → floor 2000.
    assert_eq!(budget(&input).budget_milli, 2000);
}

#[test]
fn quota_policy_table() {
    // capacity 16 cores: ramp 160000 µs, minimum change 16000 µs.
    let b = |budget_milli| Budget {
        capacity_milli: 16_000,
        threshold_percent: 65,
        min_percent: None,
        pod_non_be_milli: 0,
        host_app_non_be_milli: 0,
        system_milli: 0,
        budget_milli,
    };
    for (budget_milli, current, written, action) in [
        (4000, None, Some(400_000), "write"),
        (4000, Some(-1), Some(400_000), "write"), // from unlimited: a decrease, immediate
        (4000, Some(900_000), Some(400_000), "write"), // decrease: immediate
        (4000, Some(100_000), Some(260_000), "ramped"), // increase: +10 % of node per round
        (4000, Some(390_000), None, "small_change"), // < 1 % of node
        (4000, Some(400_000), None, "unchanged"),
        (-500, Some(400_000), Some(2000), "write"), // negative budget: floor
        (10, Some(2500), Some(2000), "write"),      // floor always written, even if tiny change
        (99_000, Some(1_500_000), Some(1_600_000), "write"), // capped at capacity
    ] {
        let q = quota_decision(&b(budget_milli), current);
        assert_eq!(
            (q.written_us, q.action),
            (written, action),
            "budget {budget_milli} current {current:?}"
        );
    }
}

#[test]
fn cfs_quota_policy_writes_quota_and_restores_cpuset() {
    let mut c = Case::new(CpuSuppressPolicy::CfsQuota);
    c.node_usage = 8000;
    c.pods = vec![ls(6000), be(2000)];
    c.cgroups = tree(Some("0-3"), Some(-1));
    let plan = c.run();
    // 16000 × 65 % − 6000 = 4400 → 440000 µs.
    assert_eq!(plan.budget.unwrap().budget_milli, 4400);
    let w = files(&plan);
    assert_eq!(
        w[0],
        ("kubepods/besteffort".into(), "cpu.cfs_quota_us", "440000".into())
    );
    // Then the cpuset goes back to all 16 CPUs, parents first.
    let rest: Vec<_> = w[1..]
        .iter()
        .map(|(d, f, v)| (d.as_str(), *f, v.as_str()))
        .collect();
    assert_eq!(
        rest,
        [
            ("kubepods/besteffort", "cpuset.cpus", "0-15"),
            ("kubepods/besteffort/poda", "cpuset.cpus", "0-15"),
            ("kubepods/besteffort/poda/c1", "cpuset.cpus", "0-15"),
        ]
    );
}

#[test]
fn cpuset_policy_sizes_and_orders() {
    let mut c = Case::new(CpuSuppressPolicy::Cpuset);
    c.node_usage = 8000;
    c.pods = vec![ls(8400)];
    let plan = c.run();
    // 10400 − 8400 = 2000 → 2 CPUs: one whole core.
    let d = plan.cpuset.clone().unwrap();
    assert_eq!((d.wanted_cpus, d.given_cpus, d.cpus.as_str()), (2, 2, "0,8"));
    // Narrowing only: children first, then the parent; then the quota is restored... it is
    // already −1, so no quota write.
    let w = files(&plan);
    let dirs: Vec<&str> = w.iter().map(|(d, _, _)| d.as_str()).collect();
    assert_eq!(
        dirs,
        [
            "kubepods/besteffort/poda/c1",
            "kubepods/besteffort/poda",
            "kubepods/besteffort"
        ]
    );
    let initial = BTreeMap::from([
        ("kubepods/besteffort".to_owned(), CpuList::parse("0-15").unwrap()),
        (
            "kubepods/besteffort/poda".to_owned(),
            CpuList::parse("0-15").unwrap(),
        ),
        (
            "kubepods/besteffort/poda/c1".to_owned(),
            CpuList::parse("0-15").unwrap(),
        ),
    ]);
    check_cpuset_order(&initial, &plan.writes);
}

#[test]
fn cpuset_growth_is_capped_and_widening_goes_parent_first() {
    let mut c = Case::new(CpuSuppressPolicy::Cpuset);
    c.cgroups = tree(Some("0,8"), Some(-1));
    // Idle node: budget 10400 → 11 CPUs wanted, but at most 2 + ceil(16 × 10 %) = 4 this round.
    let plan = c.run();
    let d = plan.cpuset.clone().unwrap();
    assert_eq!((d.wanted_cpus, d.given_cpus), (11, 4));
    let dirs: Vec<String> = plan.writes.iter().map(|w| w.cgroup.to_string()).collect();
    assert_eq!(dirs[0], "kubepods/besteffort", "widen the parent first");
    let initial = BTreeMap::from([
        ("kubepods/besteffort".to_owned(), CpuList::parse("0,8").unwrap()),
        (
            "kubepods/besteffort/poda".to_owned(),
            CpuList::parse("0,8").unwrap(),
        ),
        (
            "kubepods/besteffort/poda/c1".to_owned(),
            CpuList::parse("0,8").unwrap(),
        ),
    ]);
    check_cpuset_order(&initial, &plan.writes);
}

#[test]
fn cpuset_never_uses_lse_or_reserved_and_lends_lsr_in_proportion() {
    let mut c = Case::new(CpuSuppressPolicy::Cpuset);
    c.pools.lse = CpuList::parse("0-1,8-9").unwrap();
    c.pools.reserved = CpuList::parse("7,15").unwrap();
    c.pools.lsr = CpuList::parse("2-3,10-11").unwrap();
    c.cgroups = tree(None, Some(-1));
    c.pods = vec![ls(4400)];
    c.node_usage = 4400;
    // budget 6000 → 6 CPUs of 10 candidates (4 LSR): 6 × 4 / 10 = 2 from LSR, 4 from LS.
    let plan = c.run();
    let d = plan.cpuset.unwrap();
    let chosen = CpuList::parse(&d.cpus).unwrap();
    assert_eq!((d.given_cpus, d.from_lsr), (6, 2));
    for forbidden in [0, 1, 8, 9, 7, 15] {
        assert!(!chosen.contains(forbidden), "{forbidden} in {chosen}");
    }
    assert_eq!(chosen.intersection(&c.pools.lsr).len(), 2);
}

#[test]
fn cpuset_floor_of_two_cpus() {
    let mut c = Case::new(CpuSuppressPolicy::Cpuset);
    c.pods = vec![ls(16_000)];
    c.node_usage = 16_000;
    let plan = c.run();
    assert!(plan.budget.unwrap().budget_milli < 0);
    assert_eq!(plan.cpuset.unwrap().given_cpus, 2);
}

#[test]
fn cpuset_policy_restores_quota() {
    let mut c = Case::new(CpuSuppressPolicy::Cpuset);
    c.cgroups = tree(Some("0-15"), Some(300_000));
    let plan = c.run();
    let last = plan.writes.last().unwrap();
    assert_eq!(
        (last.file(), last.value.to_string().as_str()),
        ("cpu.cfs_quota_us", "-1")
    );
}

#[test]
fn static_kubelet_policy_narrows_only_containers() {
    let mut c = Case::new(CpuSuppressPolicy::Cpuset);
    c.pools.kubelet_static_policy = true;
    c.pods = vec![ls(8400)];
    c.node_usage = 8400;
    let plan = c.run();
    let w = files(&plan);
    assert_eq!(
        w,
        [(
            "kubepods/besteffort/poda/c1".to_owned(),
            "cpuset.cpus",
            "0,8".to_owned()
        )]
    );
}

#[test]
fn disabled_restores_unlimited_quota_and_full_cpuset() {
    let mut c = Case::new(CpuSuppressPolicy::Cpuset);
    c.strategy.enable = None;
    c.pools.lse = CpuList::parse("15").unwrap();
    c.cgroups = tree(Some("0,8"), Some(2000));
    let plan = c.run();
    assert!(!plan.enabled && plan.budget.is_none());
    let w = files(&plan);
    assert_eq!(
        w[0],
        ("kubepods/besteffort".into(), "cpu.cfs_quota_us", "-1".into())
    );
    assert!(w[1..].iter().all(|(_, f, v)| *f == "cpuset.cpus" && v == "0-14"));
    assert_eq!(w.len(), 4);
    // Already restored: nothing to write.
    c.cgroups = tree(Some("0-14"), Some(-1));
    assert!(c.run().writes.is_empty());
}

#[test]
fn missing_capacity_or_topology_skips_with_reason() {
    let c = Case::new(CpuSuppressPolicy::Cpuset);
    let plan = decide(&SuppressInput {
        strategy: &c.strategy,
        capacity_milli: 0,
        reserved_milli: 0,
        node_usage_milli: 0,
        pods: &[],
        host_apps: &[],
        cgroups: &c.cgroups,
        cpus: &c.pools,
    });
    assert!(plan.writes.is_empty() && !plan.reason.is_empty());
    let mut c = Case::new(CpuSuppressPolicy::Cpuset);
    c.pools.topology.clear();
    let plan = c.run();
    assert!(
        plan.cpuset.is_none() && plan.reason.contains("no CPU"),
        "{}",
        plan.reason
    );
}

#[test]
fn plan_json_for_koordlet_plan() {
    let mut c = Case::new(CpuSuppressPolicy::CfsQuota);
    c.pods = vec![ls(6000)];
    c.node_usage = 6000;
    let v = serde_json::to_value(c.run()).unwrap();
    assert_eq!(v["policy"], "cfsQuota");
    assert_eq!(v["budget"]["budget_milli"], 4400);
    assert_eq!(v["quota"]["written_us"], 440_000);
    assert_eq!(v["quota"]["action"], "write");
    assert_eq!(
        v["writes"][0],
        serde_json::json!({"cgroup": "kubepods/besteffort", "file": "cpu.cfs_quota_us", "value": "440000", "strategy": "cpu_suppress"})
    );
}

#[test]
fn cpuset_policy_exclusive_cpus_and_kubelet_shared_pool_bound_be() {
    // cpuset_policy holds 8-15 exclusively: BE's set comes from 0-7 only.
    let mut c = Case::new(CpuSuppressPolicy::Cpuset);
    c.pools.exclusive = CpuList::parse("8-15").unwrap();
    let plan = c.run();
    let cpus = CpuList::parse(&plan.cpuset.as_ref().unwrap().cpus).unwrap();
    assert!(cpus.is_subset(&CpuList::parse("0-7").unwrap()), "{cpus}");
    // Under the kubelet's static policy: within its shared pool, containers only; a pod dir
    // left narrow is widened (never narrowed) first.
    let mut c = Case::new(CpuSuppressPolicy::Cpuset);
    c.pools.kubelet_static_policy = true;
    c.pools.kubelet_shared = CpuList::parse("4-7").unwrap();
    c.cgroups.pods[0].pod.cpuset = Some(CpuList::parse("0").unwrap());
    c.cgroups.pods[0].containers[0].cpuset = Some(CpuList::parse("0").unwrap());
    let plan = c.run();
    let w = files(&plan);
    assert_eq!(w[0].0, "kubepods/besteffort/poda");
    assert!(w.iter().all(|(d, _, _)| d != "kubepods/besteffort"), "{w:?}");
    let (_, _, last) = w
        .iter()
        .rfind(|(d, f, _)| d.ends_with("/c1") && *f == "cpuset.cpus")
        .unwrap();
    assert!(
        CpuList::parse(last)
            .unwrap()
            .is_subset(&CpuList::parse("4-7").unwrap()),
        "{w:?}"
    );
}
