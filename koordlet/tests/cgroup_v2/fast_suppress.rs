//! The fast suppress loop on the real v2 tree: its kept-open counters (`cpu.stat` of the node,
//! kubepods and besteffort) and its writes (`cpu.max`, `cpuset.cpus`) with busy processes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use koord_api::nodeslo::{CpuSuppressPolicy, ResourceThresholdStrategy};
use koord_test_support::Poll;
use koordlet::suppress_loop::{NodeCounter, SuppressLoop, SuppressLoopConfig, TickOutcome};
use koordlet::system::{Cgroups, SystemRoots};
use koordlet_core::strategies::cpu_suppress::{BeCgroups, CgroupState, CpuPools};
use koordlet_core::strategies::cpuset::CpuList;
use koordlet_core::strategies::fast_suppress::{CpusetScope, FastSuppressConfig, NodeCpu};

use super::in_vm_only;
use super::tree::{V2Tree, cpus_allowed, topology};

const NODE: NodeCpu = NodeCpu {
    capacity_milli: 2000,
    reserved_milli: 0,
};

fn fast_loop(tree: &V2Tree) -> SuppressLoop {
    let cgroups = Arc::new(Cgroups::detect(&SystemRoots::default()).unwrap());
    SuppressLoop::new(
        cgroups,
        SuppressLoopConfig {
            interval: Duration::from_millis(200),
            dry_run: false,
            fast: FastSuppressConfig::default(),
            node_counter: NodeCounter::Cgroup(tree.dir("")),
            kubepods: tree.dir("kubepods"),
            besteffort: tree.dir("kubepods/besteffort"),
        },
        None,
    )
    .unwrap()
}

/// Ticks every 200 ms until `done` accepts an outcome (at most 10 s); returns it.
fn tick_until(
    l: &mut SuppressLoop,
    s: &ResourceThresholdStrategy,
    done: impl Fn(TickOutcome) -> bool,
) -> TickOutcome {
    let mut last = TickOutcome::Idle;
    Poll::new("the fast loop's outcome", Duration::from_secs(10))
        .every(Duration::from_millis(200))
        .until_blocking(|| {
            let out = l.tick(Instant::now(), Some(s), NODE);
            assert_ne!(
                out,
                TickOutcome::ReadFailed,
                "the loop could not read the v2 counters"
            );
            last = out;
            done(out).then_some(out)
        })
        .unwrap_or(last)
}

/// LS burns one of the two vCPUs, BE the other; threshold 70 %: BE may use about 400m. The loop
/// writes that quota into besteffort's `cpu.max` from the kernel's own counters.
#[test]
#[ignore = "runs inside the cgroup v2 VM"]
fn cgroup_v2_vm_fast_suppress_writes_cpu_max_from_real_counters() {
    in_vm_only!();
    let mut tree = V2Tree::new("fast-quota");
    tree.mkdir("kubepods/ls");
    tree.mkdir("kubepods/besteffort/pod/c");
    tree.spawn_burner("kubepods/ls");
    tree.spawn_burner("kubepods/besteffort/pod/c");
    let mut l = fast_loop(&tree);
    let s = ResourceThresholdStrategy {
        enable: Some(true),
        cpu_suppress_threshold_percent: Some(70),
        cpu_suppress_policy: Some(CpuSuppressPolicy::CfsQuota),
        ..Default::default()
    };
    let out = tick_until(&mut l, &s, |o| matches!(o, TickOutcome::Wrote(q) if q > 0));
    let TickOutcome::Wrote(quota) = out else {
        panic!("no quota written: {out:?}");
    };
    let cpu_max = tree.read("kubepods/besteffort", "cpu.max");
    println!("fast suppress: besteffort cpu.max {cpu_max}");
    assert_eq!(cpu_max, format!("{quota} 100000"));
    // The budget is at most 70 % of two cores minus what LS used.
    assert!(quota <= 140_000, "quota {quota}");
}

/// Policy cpuset on a fresh v2 besteffort (empty `cpuset.cpus`, both vCPUs effective): LS busy
/// on one vCPU leaves BE one CPU, and the BE process is confined to it.
#[test]
#[ignore = "runs inside the cgroup v2 VM"]
fn cgroup_v2_vm_fast_suppress_narrows_a_fresh_besteffort_cpuset() {
    in_vm_only!();
    let mut tree = V2Tree::new("fast-cpuset");
    tree.mkdir("kubepods/ls");
    tree.mkdir("kubepods/besteffort/pod/c");
    assert_eq!(tree.read("kubepods/besteffort", "cpuset.cpus"), "");
    tree.spawn_burner("kubepods/ls");
    let be = tree.spawn_burner("kubepods/besteffort/pod/c");
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let all = CpuList::parse(&online).unwrap();
    let state = |rel: &str| CgroupState {
        dir: koordlet::system::CgroupDir::new(tree.rel(rel)).unwrap(),
        ..Default::default()
    };
    let scope = CpusetScope {
        be: BeCgroups {
            besteffort: state("kubepods/besteffort"),
            pods: vec![koordlet_core::strategies::cpu_suppress::BePodCgroups {
                pod: state("kubepods/besteffort/pod"),
                containers: vec![state("kubepods/besteffort/pod/c")],
            }],
        },
        pools: CpuPools {
            topology: topology(),
            min_be_cpus: Some(1),
            ..Default::default()
        },
        host_apps: vec![],
    };
    let mut l = fast_loop(&tree);
    l.set_cpuset_scope(Some(Arc::new(scope)));
    let s = ResourceThresholdStrategy {
        enable: Some(true),
        cpu_suppress_threshold_percent: Some(70),
        cpu_suppress_policy: Some(CpuSuppressPolicy::Cpuset),
        ..Default::default()
    };
    let out = tick_until(
        &mut l,
        &s,
        |o| matches!(o, TickOutcome::WroteCpuset(n) if n < all.len()),
    );
    let cpus = tree.read("kubepods/besteffort", "cpuset.cpus");
    println!(
        "fast suppress cpuset: {out:?}, besteffort cpuset.cpus {cpus:?}, BE process on {}",
        cpus_allowed(be)
    );
    assert!(matches!(out, TickOutcome::WroteCpuset(1)), "{out:?}");
    assert_eq!(cpus_allowed(be), cpus);
    assert_eq!(CpuList::parse(&cpus).unwrap().len(), 1);
}
