//! Tier 3: CPU set policies on this machine's kernel (cgroup v1 cpuset). A kubelet-like tree
//! `/sys/fs/cgroup/cpuset/koord-test-<unique>/kubepods/...` holds three "containers" with a
//! real process each: an `exclusive` pod, a plain LS pod and a BE pod. The engine decides, the
//! executor writes; the test checks `cpuset.cpus` and each process's `sched_getaffinity`, then
//! switches the pod to `share` and checks the CPU went back to the others without a restart.
//! Without root, cgroup v1 cpuset or a second CPU it prints `skipped: <reason>` and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use koord_test_support::cgroup::CgroupV1Tree;
use koordlet::executor::{Executor, ExecutorConfig};
use koordlet::states::PodMeta;
use koordlet::system::{CgroupDriver, Cgroups, KubeCgroupPaths, SystemRoots};
use koordlet_core::FeatureGates;
use koordlet_core::strategies::cpuset::CpuList;
use koordlet_core::strategies::engine::{
    self, CgroupFacts, EngineInput, EngineOptions, EngineState, NodeFacts, ReadScope, UsageFacts,
};
use serde_json::json;

const PINNED: (&str, &str) = ("0badc0de-0000-0000-0000-0000000000a1", "feedbeefa1");
const PLAIN: (&str, &str) = ("0badc0de-0000-0000-0000-0000000000a2", "feedbeefa2");
const BATCH: (&str, &str) = ("0badc0de-0000-0000-0000-0000000000a3", "feedbeefa3");

fn pod(name: &str, (uid, id): (&str, &str), policy: Option<&str>, be: bool) -> PodMeta {
    let mut annotations = serde_json::Map::new();
    if let Some(p) = policy {
        annotations.insert("koordinator.sh/cpuset-policy".into(), json!(p));
    }
    let (qos, resources) = if be {
        ("BestEffort", json!({}))
    } else {
        (
            "Burstable",
            json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}),
        )
    };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid, "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
        "status": {"phase": "Running", "qosClass": qos,
                   "containerStatuses": [{"name": "c", "containerID": format!("containerd://{id}")}]}
    }))
    .unwrap();
    PodMeta::new(Arc::new(pod)).unwrap()
}

fn rel(be: bool, (uid, id): (&str, &str)) -> String {
    let qos = if be { "besteffort" } else { "burstable" };
    format!("kubepods/{qos}/pod{uid}/{id}")
}

/// The CPUs `pid` may run on (`sched_getaffinity`).
fn affinity(pid: u32) -> CpuList {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    let set = rustix::thread::sched_getaffinity(Some(pid)).unwrap();
    CpuList::from_cpus(
        (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|c| set.is_set(*c))
            .map(|c| c as u32),
    )
}

struct Node {
    cgroups: Arc<Cgroups>,
    paths: KubeCgroupPaths,
    executor: Executor,
    state: EngineState,
    topology: Vec<koordlet_core::strategies::cpuset::CpuInfo>,
}

impl Node {
    /// One round: read, decide, write. Fails the test on a failed write.
    fn round(&mut self, pods: &[PodMeta]) -> engine::EnginePlan {
        let reads = engine::cgroup_reads(pods, &self.paths, ReadScope::all(None));
        let cgroups: CgroupFacts = koordlet::gather::read_cgroup_facts(&self.cgroups, &reads, None);
        let node = NodeFacts {
            cpu_capacity_milli: self.topology.len() as i64 * 1000,
            cpu_allocatable_milli: self.topology.len() as i64 * 1000,
            ..NodeFacts::default()
        };
        let gates = FeatureGates::default();
        let usage = UsageFacts::default();
        let in_flight = BTreeSet::new();
        let plan = engine::run(&EngineInput {
            node: &node,
            pods,
            paths: &self.paths,
            node_slo: None,
            gates: &gates,
            usage: &usage,
            cgroups: &cgroups,
            topology: &self.topology,
            in_flight: &in_flight,
            state: &self.state,
            now_seconds: 0.0,
            options: EngineOptions::default(),
        });
        let report = self.executor.apply(plan.writes.clone(), Instant::now());
        assert!(report.errors.is_empty(), "writes failed: {:?}", report.errors);
        self.state = plan.next_state.clone();
        plan
    }
}

#[test]
fn cpuset_policy_exclusive_then_share_on_the_real_kernel() {
    let Some(mut tree) = CgroupV1Tree::or_skip(&["cpuset"]) else {
        return;
    };
    let topology = koordlet::gather::read_topology(Path::new("/sys"));
    let online = CpuList::from_cpus(topology.iter().map(|c| c.cpu));
    if online.len() < 2 {
        println!(
            "skipped: this machine has {} CPU(s); the test needs 2",
            online.len()
        );
        return;
    }
    let top = CpuList::parse(&tree.read("cpuset", "", "cpuset.cpus").unwrap()).unwrap();
    if top != online {
        println!("skipped: the test cgroup has CPUs {top}, not every online CPU {online}");
        return;
    }
    let cgroups = match Cgroups::detect(&SystemRoots::default()) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            println!("skipped: {e}");
            return;
        }
    };
    let mut pids = Vec::new();
    for (be, ids) in [(false, PINNED), (false, PLAIN), (true, BATCH)] {
        let dir = rel(be, ids);
        tree.mkdir(&dir).unwrap();
        let child = Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        tree.adopt(child);
        tree.add_process(&dir, pid).unwrap();
        pids.push(pid);
    }
    let mut node = Node {
        paths: KubeCgroupPaths::with_parent(CgroupDriver::Cgroupfs, Path::new(tree.name())).unwrap(),
        executor: Executor::new(cgroups.clone(), ExecutorConfig::default()),
        cgroups,
        state: EngineState::default(),
        topology,
    };
    let last = online.iter().last().unwrap();
    let pinned_cpu = CpuList::from_cpus([last]);
    let rest = online.difference(&pinned_cpu);
    let cpus_of =
        |be: bool, ids| CpuList::parse(&tree.read("cpuset", &rel(be, ids), "cpuset.cpus").unwrap()).unwrap();

    // exclusive: the pod gets the highest CPU, the LS and BE containers the others.
    let plan = node.round(&[
        pod("pinned", PINNED, Some("exclusive"), false),
        pod("plain", PLAIN, None, false),
        pod("batch", BATCH, None, true),
    ]);
    let report = plan.strategies.cpuset_policy.ran().expect("cpuset_policy ran");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(cpus_of(false, PINNED), pinned_cpu);
    assert_eq!(cpus_of(false, PLAIN), rest);
    assert_eq!(cpus_of(true, BATCH), rest);
    assert_eq!(affinity(pids[0]), pinned_cpu);
    assert_eq!(affinity(pids[1]), rest);
    assert_eq!(affinity(pids[2]), rest);

    // share: the same process keeps its CPU, which goes back to everybody else.
    let pods = [
        pod("pinned", PINNED, Some("share"), false),
        pod("plain", PLAIN, None, false),
        pod("batch", BATCH, None, true),
    ];
    node.round(&pods);
    assert_eq!(cpus_of(false, PINNED), pinned_cpu);
    assert_eq!(cpus_of(false, PLAIN), online);
    assert_eq!(cpus_of(true, BATCH), online);
    assert_eq!(
        affinity(pids[0]),
        pinned_cpu,
        "the pinned process was not restarted"
    );
    assert_eq!(affinity(pids[1]), online);
    assert_eq!(affinity(pids[2]), online);
    // Steady: the next round writes nothing.
    assert!(node.round(&pods).writes.is_empty());
}
