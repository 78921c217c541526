//! Table tests of the allocator and the decision (test names contain `cpuset_policy`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::CgroupDir;

/// `sockets` × `cores` × (2 threads with `smt`, else 1), Linux numbering: thread t of core k
/// of socket s is CPU `t × sockets × cores + s × cores + k`; NUMA node = socket.
pub(super) fn topo(sockets: u32, cores: u32, smt: bool) -> Vec<CpuInfo> {
    let threads = if smt { 2 } else { 1 };
    let per_thread = sockets * cores;
    (0..per_thread * threads)
        .map(|cpu| {
            let phys = cpu % per_thread;
            CpuInfo {
                cpu,
                core: phys,
                socket: phys / cores,
                node: phys / cores,
            }
        })
        .collect()
}

pub(super) fn cpus(text: &str) -> CpuList {
    CpuList::parse(text).unwrap()
}

pub(super) fn all(t: &[CpuInfo]) -> CpuList {
    CpuList::from_cpus(t.iter().map(|c| c.cpu))
}

fn dir(path: &str, cur: Option<&str>) -> CgroupState {
    CgroupState {
        dir: CgroupDir::new(path).unwrap(),
        cfs_quota_us: None,
        cpuset: cur.map(cpus),
    }
}

/// A running burstable pod `name` with containers `(name, cpu limit milli)`, all on `cur`.
fn pod(name: &str, policy: Option<&str>, containers: &[(&str, Option<i64>)], cur: &str) -> PolicyPod {
    PolicyPod {
        uid: format!("uid-{name}"),
        namespace: "default".into(),
        name: name.into(),
        qos: QoSClass::Ls,
        be: false,
        policy: match policy {
            None => Ok(None),
            Some(p) => CpusetPolicy::parse(p).map(Some).map_err(|e| e.to_string()),
        },
        bound: None,
        qos_dir: dir("kubepods/burstable", Some(cur)),
        pod_dir: dir(&format!("kubepods/burstable/pod{name}"), Some(cur)),
        containers: containers
            .iter()
            .map(|(c, limit)| PolicyContainer {
                name: (*c).into(),
                cpu_limit_milli: *limit,
                dir: Some(dir(&format!("kubepods/burstable/pod{name}/{c}"), Some(cur))),
            })
            .collect(),
    }
}

struct World {
    topology: Vec<CpuInfo>,
    pods: Vec<PolicyPod>,
    state: CpusetAllocations,
    manage_be: bool,
}

impl World {
    fn new(topology: Vec<CpuInfo>, pods: Vec<PolicyPod>) -> Self {
        World {
            topology,
            pods,
            state: CpusetAllocations::default(),
            manage_be: true,
        }
    }

    fn run(&self) -> CpusetPolicyPlan {
        decide(&CpusetPolicyInput {
            topology: &self.topology,
            reserved: &CpuList::new(),
            pods: &self.pods,
            state: &self.state,
            manage_be: self.manage_be,
        })
    }

    /// Runs a round, carries the state and applies the writes to the world's cgroups.
    fn step(&mut self) -> CpusetPolicyPlan {
        let plan = self.run();
        self.state = plan.next_state.clone();
        for w in &plan.writes {
            let crate::CgroupValue::Cpus(set) = &w.value else {
                panic!()
            };
            for p in &mut self.pods {
                for d in std::iter::once(&mut p.qos_dir)
                    .chain(std::iter::once(&mut p.pod_dir))
                    .chain(p.containers.iter_mut().filter_map(|c| c.dir.as_mut()))
                {
                    if d.dir == w.cgroup {
                        d.cpuset = Some(set.clone());
                    }
                }
            }
        }
        plan
    }

    fn cpus_of(&self, pod: &str, container: &str) -> String {
        let p = self.pods.iter().find(|p| p.name == pod).unwrap();
        let c = p.containers.iter().find(|c| c.name == container).unwrap();
        c.dir.as_ref().unwrap().cpuset.as_ref().unwrap().to_string()
    }
}

#[test]
fn cpuset_policy_two_cpus_exclusive_then_share() {
    let t = topo(1, 2, false);
    let mut w = World::new(
        t,
        vec![
            pod("ls", Some("exclusive"), &[("app", Some(1000))], "0-1"),
            pod("other", None, &[("c", Some(1500))], "0-1"),
        ],
    );
    let plan = w.step();
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    assert_eq!((plan.exclusive.as_str(), plan.shared.as_str()), ("1", "0"));
    assert_eq!(w.cpus_of("ls", "app"), "1");
    assert_eq!(w.cpus_of("other", "c"), "0");
    // Steady: nothing more to write.
    assert!(w.step().writes.is_empty());
    // exclusive -> share: same CPU, given back to the pool.
    w.pods[0].policy = Ok(Some(CpusetPolicy::Share));
    let plan = w.step();
    assert_eq!(plan.allocations[0].policy, CpusetPolicy::Share);
    assert_eq!(w.cpus_of("ls", "app"), "1");
    assert_eq!(w.cpus_of("other", "c"), "0-1");
    // share -> none: released.
    w.pods[0].policy = Ok(Some(CpusetPolicy::None));
    let plan = w.step();
    assert!(plan.allocations.is_empty());
    assert_eq!(w.cpus_of("ls", "app"), "0-1");
}

#[test]
fn cpuset_policy_unsatisfiable_is_reported_not_half_done() {
    let t = topo(1, 2, false);
    let mut w = World::new(
        t,
        vec![pod(
            "big",
            Some("exclusive"),
            &[("a", Some(1000)), ("b", Some(2000))],
            "0-1",
        )],
    );
    let plan = w.step();
    // `a` gets CPU 1; `b` would leave no shared CPU: refused, stays shared, reported.
    assert_eq!(plan.allocations.len(), 1);
    assert_eq!(plan.allocations[0].container, "a");
    assert_eq!(plan.problems.len(), 1);
    assert_eq!(plan.problems[0].container.as_deref(), Some("b"));
    assert!(
        plan.problems[0].reason.contains("cannot give 2 exclusive CPUs"),
        "{:?}",
        plan.problems
    );
    assert_eq!(w.cpus_of("big", "b"), "0");
}

#[test]
fn cpuset_policy_eligibility_and_bad_annotation() {
    let t = topo(1, 4, true);
    let mut w = World::new(
        t,
        vec![
            pod(
                "frac",
                Some("exclusive"),
                &[("half", Some(1500)), ("none", None), ("ok", Some(2000))],
                "0-7",
            ),
            pod("typo", Some("exclusiv"), &[("c", Some(1000))], "0-7"),
        ],
    );
    let plan = w.step();
    let reasons: Vec<_> = plan
        .problems
        .iter()
        .map(|p| (p.pod.as_str(), p.container.as_deref()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("default/frac", Some("half")),
            ("default/frac", Some("none")),
            ("default/typo", None)
        ]
    );
    assert_eq!(plan.allocations.len(), 1);
    assert_eq!(w.cpus_of("frac", "ok"), "3,7");
    assert_eq!(w.cpus_of("frac", "half"), "0-2,4-6");
    assert_eq!(w.cpus_of("typo", "c"), "0-2,4-6");
    // A typo on a pinned pod keeps its CPUs.
    w.pods[0].policy = Err("bad".into());
    let plan = w.step();
    assert_eq!(plan.allocations.len(), 1);
    assert_eq!(w.cpus_of("frac", "ok"), "3,7");
}

#[test]
fn cpuset_policy_fragmentation_and_release() {
    // 8 CPUs with SMT, cores {0,4} {1,5} {2,6} {3,7}.
    let t = topo(1, 4, true);
    let mut w = World::new(
        t,
        vec![
            pod("a", Some("exclusive"), &[("c", Some(2000))], "0-7"),
            pod("b", Some("exclusive"), &[("c", Some(1000))], "0-7"),
            pod("c", Some("exclusive"), &[("c", Some(2000))], "0-7"),
        ],
    );
    w.step();
    assert_eq!(w.cpus_of("a", "c"), "3,7");
    assert_eq!(
        w.cpus_of("b", "c"),
        "2",
        "one thread: splits the highest whole core"
    );
    assert_eq!(w.cpus_of("c", "c"), "1,5", "whole cores stay whole");
    // d wants one CPU: the free sibling of b's core, not a thread of the whole core {0,4}.
    w.pods
        .push(pod("d", Some("exclusive"), &[("c", Some(1000))], "0,4,6"));
    w.step();
    assert_eq!(w.cpus_of("d", "c"), "6");
    // b is deleted: CPU 2 is released and back in the pool.
    w.pods.remove(1);
    let plan = w.step();
    assert!(plan.allocations.iter().all(|a| a.name != "b"));
    assert_eq!(plan.shared, "0,2,4");
    assert_eq!(w.cpus_of("a", "c"), "3,7", "kept allocations never move");
    // e asks for all 3 free CPUs: one must stay shared, so it is refused; f gets core {0,4}.
    w.pods
        .push(pod("e", Some("exclusive"), &[("c", Some(3000))], "0,2,4"));
    w.pods
        .push(pod("f", Some("exclusive"), &[("c", Some(2000))], "0,2,4"));
    let plan = w.step();
    assert_eq!(plan.problems.len(), 1, "{:?}", plan.problems);
    assert_eq!(plan.problems[0].pod, "default/e");
    assert_eq!(w.cpus_of("f", "c"), "0,4");
    assert_eq!(w.cpus_of("e", "c"), "2");
    assert_eq!(plan.shared, "2");
}

#[test]
fn cpuset_policy_be_lse_lsr_and_share_overlap() {
    let t = topo(1, 4, false); // 0-3
    let mut be = pod("be", None, &[("c", None)], "0-3");
    be.be = true;
    be.qos = QoSClass::Be;
    let mut lsr = pod("lsr", None, &[("c", Some(1000))], "0-3");
    lsr.qos = QoSClass::Lsr;
    lsr.bound = Some(cpus("0"));
    let mut w = World::new(
        t,
        vec![
            be,
            lsr,
            pod("ex", Some("exclusive"), &[("c", Some(1000))], "0-3"),
            pod("sh1", Some("share"), &[("c", Some(1000))], "0-3"),
            pod("sh2", Some("share"), &[("c", Some(2000))], "0-3"),
            pod("none", Some("none"), &[("c", None)], "0-3"),
        ],
    );
    let plan = w.step();
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    assert_eq!(w.cpus_of("lsr", "c"), "0");
    assert_eq!(w.cpus_of("ex", "c"), "3");
    assert_eq!(w.cpus_of("sh1", "c"), "2");
    // Only CPU 1 is neither shared-bound nor LSR: sh2 overlaps sh1 (share allows it).
    assert_eq!(w.cpus_of("sh2", "c"), "1-2");
    assert_eq!(w.cpus_of("none", "c"), "1-2");
    assert_eq!(w.cpus_of("be", "c"), "0-2", "BE leaves exclusive CPUs only");
    // With suppress owning BE cpusets, BE is not written here.
    w.manage_be = false;
    w.pods[0].containers[0].dir.as_mut().unwrap().cpuset = Some(cpus("0-3"));
    assert!(
        w.run()
            .writes
            .iter()
            .all(|x| !x.cgroup.to_string().contains("podbe"))
    );
}

#[test]
fn cpuset_policy_widens_parents_first() {
    let t = topo(1, 4, false);
    let mut p = pod("ls", Some("exclusive"), &[("c", Some(1000))], "0-1");
    p.qos_dir.cpuset = Some(cpus("0-1"));
    let w = World::new(t, vec![p]);
    let plan = w.run();
    let order: Vec<_> = plan
        .writes
        .iter()
        .map(|w| (w.cgroup.to_string(), w.value.to_string()))
        .collect();
    assert_eq!(
        order,
        [
            ("kubepods/burstable".into(), "0-1,3".into()),
            ("kubepods/burstable/podls".into(), "0-1,3".into()),
            ("kubepods/burstable/podls/c".into(), "3".into()),
        ]
    );
}

#[test]
fn cpuset_policy_state_round_trip_and_corruption() {
    let t = topo(2, 24, true);
    let mut w = World::new(
        t.clone(),
        vec![
            pod("a", Some("exclusive"), &[("c", Some(4000))], "0-95"),
            pod("b", Some("share"), &[("c", Some(2000))], "0-95"),
        ],
    );
    let plan = w.step();
    let text = plan.next_state.to_json();
    let back = CpusetAllocations::from_json(&text).unwrap();
    assert_eq!(back.allocations, plan.next_state.allocations);
    for bad in [
        "",
        "{",
        "[]",
        r#"{"version": 2, "allocations": []}"#,
        r#"{"version": 1, "allocations": [{"podUid": "u", "namespace": "n", "name": "p", "container": "c", "policy": "exclusive", "cpus": "x"}]}"#,
        r#"{"version": 1, "allocations": [{"podUid": "u", "namespace": "n", "name": "p", "container": "c", "policy": "exclusive", "cpus": ""}]}"#,
        r#"{"version": 1, "allocations": [
            {"podUid": "u", "namespace": "n", "name": "p", "container": "c", "policy": "exclusive", "cpus": "1"},
            {"podUid": "v", "namespace": "n", "name": "q", "container": "c", "policy": "exclusive", "cpus": "1-2"}]}"#,
    ] {
        assert!(
            CpusetAllocations::from_json(bad).is_err(),
            "{bad:?} must be refused"
        );
    }
    // Lost file: rebuilt from the cgroups, the next round keeps every CPU where it is.
    let rebuilt = rebuild_from_cgroups(&w.pods, &t);
    assert_eq!(rebuilt, plan.next_state);
    w.state = rebuilt;
    let again = w.step();
    assert!(again.writes.is_empty(), "{:?}", again.writes);
}

#[test]
fn cpuset_policy_annotations_and_kubelet_state() {
    let mut a = BTreeMap::new();
    assert_eq!(CpusetPolicy::of_annotations(Some(&a)).unwrap(), None);
    a.insert(ANNOTATION_CRANE_CPU_MANAGER.to_owned(), "share".to_owned());
    assert_eq!(
        CpusetPolicy::of_annotations(Some(&a)).unwrap(),
        Some(CpusetPolicy::Share)
    );
    a.insert(ANNOTATION_CPUSET_POLICY.to_owned(), " exclusive ".to_owned());
    assert_eq!(
        CpusetPolicy::of_annotations(Some(&a)).unwrap(),
        Some(CpusetPolicy::Exclusive)
    );
    a.insert(ANNOTATION_CPUSET_POLICY.to_owned(), "Exclusive".to_owned());
    assert!(CpusetPolicy::of_annotations(Some(&a)).is_err());

    let static_state =
        r#"{"policyName":"static","defaultCpuSet":"0,3-7","entries":{"u":{"c":"1-2"}},"checksum":1}"#;
    assert_eq!(
        KubeletCpuManager::parse_state(static_state).unwrap(),
        KubeletCpuManager::Static {
            shared: cpus("0,3-7")
        }
    );
    assert_eq!(
        KubeletCpuManager::parse_state(r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#).unwrap(),
        KubeletCpuManager::None
    );
    for bad in [
        "",
        "{}",
        r#"{"policyName":"magic"}"#,
        r#"{"policyName":"static","defaultCpuSet":"z"}"#,
    ] {
        assert!(KubeletCpuManager::parse_state(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn cpuset_policy_unknown_topology_keeps_everything() {
    let mut w = World::new(
        vec![],
        vec![pod("a", Some("exclusive"), &[("c", Some(1000))], "0-1")],
    );
    w.state = CpusetAllocations::from_entries([Allocation {
        pod_uid: "uid-a".into(),
        namespace: "default".into(),
        name: "a".into(),
        container: "c".into(),
        policy: CpusetPolicy::Exclusive,
        cpus: cpus("1"),
    }]);
    let plan = w.run();
    assert!(plan.writes.is_empty());
    assert_eq!(plan.next_state, w.state);
    assert_eq!(plan.problems.len(), 1);
}

/// A container created between two rounds gets from the round's runtime view exactly the
/// cpuset that round settled for the same container: hooks and round agree.
#[test]
fn cpuset_policy_runtime_view_agrees_with_the_round() {
    let t = topo(1, 4, false);
    let mut bound = pod("lsr", None, &[("app", Some(1000))], "0-3");
    bound.qos = QoSClass::Lsr;
    bound.bound = Some(cpus("3"));
    let mut be = pod("be", None, &[("job", None)], "0-3");
    be.be = true;
    let mut w = World::new(
        t,
        vec![
            pod("ex", Some("exclusive"), &[("app", Some(1000))], "0-3"),
            pod("shared", None, &[("c", None)], "0-3"),
            bound,
            be,
        ],
    );
    for manage_be in [true, false] {
        w.manage_be = manage_be;
        let plan = w.step();
        assert!(plan.problems.is_empty(), "{:?}", plan.problems);
        for p in &w.pods {
            let policy = p.policy.clone().unwrap();
            let runtime_pod = RuntimePod {
                uid: &p.uid,
                be: p.be,
                bound: p.bound.as_ref(),
                policy,
            };
            for c in &p.containers {
                let decided = plan.runtime.container(&runtime_pod, &c.name);
                let settled = c.dir.as_ref().unwrap().cpuset.clone();
                if p.be && !manage_be {
                    assert_eq!(decided, None, "BE cpusets are cpu_suppress's");
                } else {
                    assert_eq!(decided, settled, "{}/{}", p.name, c.name);
                }
            }
        }
    }
    assert_eq!(w.cpus_of("ex", "app"), "2");
    assert_eq!(w.cpus_of("lsr", "app"), "3");
    // A new `exclusive` container has no allocation yet: left to the next round, which
    // allocates it; a new `none` container starts in the shared pool.
    let plan = w.run();
    let fresh = |policy| RuntimePod {
        uid: "uid-new",
        be: false,
        bound: None,
        policy,
    };
    assert_eq!(
        plan.runtime
            .container(&fresh(Some(CpusetPolicy::Exclusive)), "app"),
        None
    );
    assert_eq!(
        plan.runtime.container(&fresh(Some(CpusetPolicy::None)), "app"),
        Some(cpus("0-1"))
    );
    assert_eq!(plan.runtime.container(&fresh(None), "app"), Some(cpus("0-1")));
}

#[test]
fn cpuset_policy_resource_status_annotation() {
    assert_eq!(
        resource_status_cpus(r#"{"cpuset": "1-2,4"}"#),
        Some(cpus("1-2,4"))
    );
    assert_eq!(resource_status_cpus(r#"{"cpuset": 3}"#), None);
    assert_eq!(resource_status_cpus("not json"), None);
    assert_eq!(resource_status_cpus("{}"), None);
}

/// When the last pod holding CPUs goes, the containers narrowed to the shared pool get the
/// whole node back (one more round), and the strategy is idle again after that.
#[test]
fn cpuset_policy_pools_widen_back_when_the_last_holder_leaves() {
    let t = topo(1, 2, false);
    let mut bound = pod("lsr", None, &[("app", Some(1000))], "0-1");
    bound.qos = QoSClass::Lsr;
    bound.bound = Some(cpus("1"));
    let mut w = World::new(t, vec![bound, pod("web", None, &[("c", None)], "0-1")]);
    w.step();
    assert_eq!(w.cpus_of("web", "c"), "0");
    assert!(w.state.narrowed);
    // The LSR pod is gone: nothing asks for CPUs, but the pool is still narrowed.
    w.pods.retain(|p| p.name != "lsr");
    assert!(wanted(&w.pods, &w.state));
    let plan = w.step();
    assert_eq!(plan.shared, "0-1");
    assert_eq!(w.cpus_of("web", "c"), "0-1");
    assert!(!w.state.narrowed);
    assert!(!wanted(&w.pods, &w.state), "idle once the pool is whole again");
}

#[test]
fn cpuset_policy_narrowed_is_not_part_of_the_state_file() {
    let narrowed = CpusetAllocations {
        narrowed: true,
        ..CpusetAllocations::from_entries([])
    };
    let text = narrowed.to_json();
    assert!(!text.contains("narrowed"), "{text}");
    assert!(!CpusetAllocations::from_json(&text).unwrap().narrowed);
}
