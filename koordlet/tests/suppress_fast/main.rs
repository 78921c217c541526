//! Tier 3: the live fast suppress loop against real cgroups (v1 `cpu` + `cpuacct`) with real
//! busy processes, in a `koord-test-<pid>-<n>` subtree removed on drop (also on panic). Needs
//! root and cgroup v1; elsewhere each test prints `skipped: <reason>`.
//!
//! * `fast_loop_lowers_be_quota_after_ls_spike_and_restores_when_disabled`
//! * `fast_loop_confines_be_to_the_cpuset_after_ls_spike_and_restores` (policy cpuset, v1
//!   `cpuset` controller too)
//!
//! The reaction-latency benchmarks on the same harness are in `tests/suppress_latency_bench/`.
//!
//! This machine has two CPUs and upstream never gives BE fewer than two, so the cpuset tests
//! set the pools' `min_be_cpus` to 1: LS idle → BE on both CPUs, LS at one core → BE on one.
//!
//! The node counter is the test tree's own top cgroup, so the other work on this shared machine
//! does not count as "system usage" (on a node the loop reads `/proc/stat`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod harness;
#[allow(dead_code)]
#[path = "../qos_kernel/tree.rs"]
mod tree;

use std::thread::sleep;
use std::time::{Duration, Instant};

use harness::*;
use koord_api::nodeslo::{CpuSuppressPolicy, ResourceThresholdStrategy};
use koordlet::suppress_loop::{SuppressLoop, TickOutcome};
use koordlet_core::strategies::cpuset::CpuList;
use koordlet_core::strategies::fast_suppress::{FastSuppressConfig, NodeCpu};
use tree::CPU_LOCK;

#[test]
fn fast_loop_lowers_be_quota_after_ls_spike_and_restores_when_disabled() {
    let _lock = CPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some((tree, ls)) = pod_tree(1) else {
        return;
    };
    let mut fast =
        SuppressLoop::new(cgroups(), loop_config(&tree, FastSuppressConfig::default()), None).expect("loop");
    let s = strategy();
    let node = NodeCpu {
        capacity_milli: capacity_milli(),
        reserved_milli: 0,
    };
    let run = |fast: &mut SuppressLoop, s: Option<&ResourceThresholdStrategy>, ticks: usize| {
        let mut wrote = vec![];
        for _ in 0..ticks {
            sleep(TICK);
            if let TickOutcome::Wrote(q) = fast.tick(Instant::now(), s, node) {
                wrote.push(q);
            }
        }
        wrote
    };
    // LS idle: BE gets its budget (about 65 % of the node).
    let idle = run(&mut fast, Some(&s), 6);
    assert!(!idle.is_empty(), "no quota written while LS was idle");
    let before = quota(&tree);
    assert!(before > 0, "quota {before}");
    // LS spike: one core more of non-BE usage lowers the quota by about 100000 us.
    step_ls(&tree, ls, true);
    let spike = run(&mut fast, Some(&s), 10);
    step_ls(&tree, ls, false);
    let after = quota(&tree);
    println!("fast loop: quota idle LS {before} us -> LS spike {after} us (writes {spike:?})");
    assert!(
        after <= before - 40_000,
        "BE quota not lowered enough: {before} -> {after} (writes {spike:?})"
    );
    // Strategy disabled: unlimited again, written once.
    let off = run(&mut fast, None, 3);
    assert_eq!(off, vec![-1]);
    assert_eq!(quota(&tree), -1);
}

#[test]
fn fast_loop_confines_be_to_the_cpuset_after_ls_spike_and_restores() {
    let _lock = CPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some((mut tree, ls, be)) = cpuset_tree() else {
        return;
    };
    let _agent = AgentCgroup::join(&mut tree);
    let all = CpuList::from_cpus(tree::topology().iter().map(|c| c.cpu));
    let mut fast =
        SuppressLoop::new(cgroups(), loop_config(&tree, FastSuppressConfig::default()), None).expect("loop");
    fast.set_cpuset_scope(Some(cpuset_scope(&tree)));
    let node = NodeCpu {
        capacity_milli: capacity_milli(),
        reserved_milli: 0,
    };
    let run = |fast: &mut SuppressLoop, s: Option<&ResourceThresholdStrategy>, ticks: usize| {
        let mut out = vec![];
        for _ in 0..ticks {
            sleep(TICK);
            match fast.tick(Instant::now(), s, node) {
                TickOutcome::Idle => {}
                o => out.push(o),
            }
        }
        out
    };
    let cpuset = cpuset_strategy(CpuSuppressPolicy::Cpuset);
    // A quota left over from cfsQuota: the cpuset policy gives it back.
    tree.write("cpu", "kubepods/besteffort", "cpu.cfs_quota_us", "150000")
        .expect("quota");
    // LS idle: 65 % of 2 CPUs = 1300m -> BE keeps both CPUs.
    let idle = run(&mut fast, Some(&cpuset), 6);
    assert_eq!(quota(&tree), -1, "quota not restored under cpuset ({idle:?})");
    assert_eq!(
        cpuset_of(&tree, "kubepods/besteffort").len(),
        all.len(),
        "{idle:?}"
    );
    // LS at one core: 1300 - ~1000 -> 1 CPU, every BE dir narrowed, the BE processes confined.
    step_ls(&tree, ls, true);
    let spike = run(&mut fast, Some(&cpuset), 10);
    let chosen = cpuset_of(&tree, "kubepods/besteffort");
    println!("cpuset: BE {all} -> {chosen} after LS spike (outcomes {spike:?})");
    assert_eq!(chosen.len(), 1, "BE not confined: {chosen} ({spike:?})");
    for rel in ["kubepods/besteffort/poda", BE_CONTAINER] {
        assert_eq!(cpuset_of(&tree, rel), chosen, "{rel}");
    }
    for pid in &be {
        assert_eq!(allowed(*pid), chosen, "BE burner {pid} affinity");
    }
    assert_eq!(allowed(ls), all, "LS burner must keep every CPU");
    let used = tree.measure(&["kubepods/besteffort"], Duration::from_millis(500))[0];
    println!("cpuset: BE uses {used:.0}m on {chosen}");
    assert!(used < 1150.0, "BE on one CPU used {used:.0}m");
    // LS idle again: the set grows back (increases paced at 1 s).
    step_ls(&tree, ls, false);
    let calm = run(&mut fast, Some(&cpuset), 40);
    assert_eq!(
        cpuset_of(&tree, "kubepods/besteffort").len(),
        all.len(),
        "{calm:?}"
    );
    // Narrow again, then switch to cfsQuota: the cpusets go back to the full set.
    step_ls(&tree, ls, true);
    run(&mut fast, Some(&cpuset), 10);
    assert_eq!(cpuset_of(&tree, BE_CONTAINER).len(), 1);
    let quota_policy = cpuset_strategy(CpuSuppressPolicy::CfsQuota);
    let switched = run(&mut fast, Some(&quota_policy), 6);
    step_ls(&tree, ls, false);
    for rel in ["kubepods/besteffort", "kubepods/besteffort/poda", BE_CONTAINER] {
        assert_eq!(
            cpuset_of(&tree, rel),
            all,
            "{rel} after the switch ({switched:?})"
        );
    }
    for pid in &be {
        assert_eq!(allowed(*pid), all);
    }
    assert!(quota(&tree) > 0, "cfsQuota wrote no quota ({switched:?})");
    // Back to cpuset and narrowed, then suppress off: quota -1 and the full set everywhere.
    step_ls(&tree, ls, true);
    run(&mut fast, Some(&cpuset), 10);
    step_ls(&tree, ls, false);
    assert_eq!(cpuset_of(&tree, BE_CONTAINER).len(), 1);
    let off = run(&mut fast, None, 3);
    assert_eq!(off, vec![TickOutcome::Wrote(-1)]);
    assert_eq!(quota(&tree), -1);
    for rel in ["kubepods/besteffort", "kubepods/besteffort/poda", BE_CONTAINER] {
        assert_eq!(cpuset_of(&tree, rel), all, "{rel} after disable");
    }
}
