//! The v2-only kernel rules koordlet meets, as this kernel enforces them, and what koordlet's
//! readers and writers make of them.

use std::thread::sleep;
use std::time::Duration;

use koord_test_support::Poll;
use koordlet::system::{CgroupResource as R, CgroupValue, Cgroups, CpuSet, SystemError, SystemRoots};

use super::in_vm_only;
use super::tree::{V2Tree, cgroup_of, cpus_allowed, stat_field};

const EBUSY: i32 = 16;
const EINVAL: i32 = 22;

fn cgroups() -> Cgroups {
    Cgroups::detect(&SystemRoots::default()).unwrap()
}

/// v2 accepts a child's `cpuset.cpus` outside its parent's (v1 refuses it); the child then runs
/// on the parent's effective set. Sizing must read `cpuset.cpus.effective`.
#[test]
#[ignore = "runs inside the cgroup v2 VM"]
fn cgroup_v2_vm_child_cpuset_outside_the_parent_falls_back_to_the_parent() {
    in_vm_only!();
    let cg = cgroups();
    let mut tree = V2Tree::new("cpuset-rule");
    tree.mkdir("parent/child");
    let (parent, child) = (tree.dir("parent"), tree.dir("parent/child"));
    cg.write(
        R::CpusetCpus,
        &parent,
        &CgroupValue::Cpus(CpuSet::parse("0").unwrap()),
    )
    .unwrap();
    cg.write(
        R::CpusetCpus,
        &child,
        &CgroupValue::Cpus(CpuSet::parse("1").unwrap()),
    )
    .expect("v2 accepts a child cpuset outside the parent's");
    let pid = tree.spawn("parent/child", "exec sleep 1000");
    assert_eq!(tree.read("parent/child", "cpuset.cpus"), "1");
    assert_eq!(tree.read("parent/child", "cpuset.cpus.effective"), "0");
    assert_eq!(cg.cpuset_cpus(&child).unwrap(), CpuSet::parse("1").unwrap());
    assert_eq!(cg.effective_cpus(&child).unwrap(), CpuSet::parse("0").unwrap());
    assert_eq!(cpus_allowed(pid), "0");
    // Widening the parent makes the requested set effective.
    cg.write(
        R::CpusetCpus,
        &parent,
        &CgroupValue::Cpus(CpuSet::parse("0-1").unwrap()),
    )
    .unwrap();
    assert_eq!(cg.effective_cpus(&child).unwrap(), CpuSet::parse("1").unwrap());
    assert_eq!(cpus_allowed(pid), "1");
    println!("child cpuset.cpus 1 under parent 0: accepted, effective 0; parent widened: effective 1");
}

/// `cpu.max` holds quota and period in one file: `max` is no limit, the period survives a quota
/// write; `cpu.max.burst` above the quota is refused by the kernel.
#[test]
#[ignore = "runs inside the cgroup v2 VM"]
fn cgroup_v2_vm_cpu_max_and_burst_rules() {
    in_vm_only!();
    let cg = cgroups();
    let mut tree = V2Tree::new("cpu-max");
    tree.mkdir("pod");
    let pod = tree.dir("pod");
    assert_eq!(tree.read("pod", "cpu.max"), "max 100000");
    assert_eq!(cg.read(R::CpuCfsQuota, &pod).unwrap(), CgroupValue::Int(-1));
    tree.write("pod", "cpu.max", "max 50000").unwrap();
    assert_eq!(cg.read(R::CpuCfsQuota, &pod).unwrap(), CgroupValue::Int(-1));
    assert_eq!(cg.read(R::CpuCfsPeriod, &pod).unwrap(), CgroupValue::Int(50_000));
    cg.write(R::CpuCfsQuota, &pod, &CgroupValue::Int(25_000)).unwrap();
    assert_eq!(tree.read("pod", "cpu.max"), "25000 50000");
    // A quota write equal to what is there is skipped.
    assert!(
        cg.write(R::CpuCfsQuota, &pod, &CgroupValue::Int(25_000))
            .unwrap()
            .unchanged
    );

    // Burst: up to the quota is accepted, above it refused (EINVAL), reported as an I/O error.
    cg.write(R::CpuCfsBurst, &pod, &CgroupValue::Int(25_000)).unwrap();
    assert_eq!(tree.read("pod", "cpu.max.burst"), "25000");
    let raw = tree.write("pod", "cpu.max.burst", "25001").unwrap_err();
    assert_eq!(raw.raw_os_error(), Some(EINVAL));
    match cg.write(R::CpuCfsBurst, &pod, &CgroupValue::Int(30_000)) {
        Err(SystemError::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(EINVAL)),
        other => panic!("burst over quota: {other:?}"),
    }
    // With no quota (`max`) any burst is accepted.
    cg.write(R::CpuCfsQuota, &pod, &CgroupValue::Int(-1)).unwrap();
    assert_eq!(tree.read("pod", "cpu.max"), "max 50000");
    cg.write(R::CpuCfsBurst, &pod, &CgroupValue::Int(30_000)).unwrap();
    // ... and the quota can then not go below the burst.
    let refused = tree.write("pod", "cpu.max", "20000 50000").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(EINVAL));
    println!("cpu.max.burst 25001 over quota 25000: EINVAL; quota 20000 under burst 30000: EINVAL");
}

/// Over `memory.high` a cgroup is throttled, not killed: `memory.events` counts `high`, the
/// memory PSI of the cgroup grows; koordlet reads both pressure lines.
#[test]
#[ignore = "runs inside the cgroup v2 VM"]
fn cgroup_v2_vm_memory_high_throttles_and_psi_reads() {
    in_vm_only!();
    let cg = cgroups();
    let mut tree = V2Tree::new("memory-high");
    tree.mkdir("pod");
    let pod = tree.dir("pod");
    cg.write(R::MemoryHigh, &pod, &CgroupValue::Int(8 << 20)).unwrap();
    cg.write(R::MemoryLimit, &pod, &CgroupValue::Int(256 << 20))
        .unwrap();
    assert_eq!(cg.read(R::MemoryHigh, &pod).unwrap(), CgroupValue::Int(8 << 20));
    // Grows a string to 64 MiB, then spins holding it.
    tree.spawn(
        "pod",
        "exec awk 'BEGIN { s = \"x\"; while (length(s) < 67108864) s = s s; while (1) {} }'",
    );
    let read = || {
        let high = stat_field(&tree.read("pod", "memory.events"), "high");
        (high, cg.pressure(R::MemoryPressure, &pod).unwrap())
    };
    // The asserts below name what never happened.
    let (high, pressure) = Poll::new("memory.high throttling", Duration::from_secs(20))
        .every(Duration::from_millis(200))
        .until_blocking(|| {
            let (high, pressure) = read();
            (high > 0 && pressure.some.total_us > 0).then_some((high, pressure))
        })
        .unwrap_or_else(|_| read());
    let current = cg.memory_usage_bytes(&pod).unwrap();
    println!(
        "memory.high 8 MiB: memory.events high {high}, memory.current {} KiB, memory PSI some {} us full {:?} us",
        current >> 10,
        pressure.some.total_us,
        pressure.full.map(|f| f.total_us)
    );
    assert!(high > 0, "memory.high never exceeded");
    assert!(pressure.some.total_us > 0, "no memory stall recorded");
    assert!(pressure.full.is_some(), "memory.pressure has a full line");
    let stat = cg.memory_stat(&pod).unwrap();
    println!("memory.stat through koordlet: {stat:?}");

    // CPU pressure of a throttled burner: both lines, `some` growing.
    tree.mkdir("cpu");
    let cpu = tree.dir("cpu");
    cg.write(R::CpuCfsQuota, &cpu, &CgroupValue::Int(10_000)).unwrap();
    tree.spawn_burner("cpu");
    tree.spawn_burner("cpu");
    sleep(Duration::from_secs(1));
    let cpu_pressure = cg.pressure(R::CpuPressure, &cpu).unwrap();
    let throttling = cg.cpu_throttling(&cpu).unwrap();
    println!("cpu PSI under cpu.max 10000: {cpu_pressure:?}; {throttling:?}");
    assert!(cpu_pressure.some.total_us > 0);
    assert!(
        cpu_pressure.full.is_some(),
        "cpu.pressure has a full line on this kernel"
    );
    assert!(throttling.nr_throttled > 0 && throttling.throttled_ns > 0);
}

/// A process moved between cgroups: `/proc/<pid>/cgroup` and both `cgroup.procs` follow, and so
/// does its CPU affinity when the cpusets differ.
#[test]
#[ignore = "runs inside the cgroup v2 VM"]
fn cgroup_v2_vm_process_moved_between_cgroups() {
    in_vm_only!();
    let cg = cgroups();
    let mut tree = V2Tree::new("move");
    tree.mkdir("a");
    tree.mkdir("b");
    cg.write(
        R::CpusetCpus,
        &tree.dir("a"),
        &CgroupValue::Cpus(CpuSet::parse("0").unwrap()),
    )
    .unwrap();
    cg.write(
        R::CpusetCpus,
        &tree.dir("b"),
        &CgroupValue::Cpus(CpuSet::parse("1").unwrap()),
    )
    .unwrap();
    let pid = tree.spawn("a", "exec sleep 1000");
    assert_eq!(cgroup_of(pid), format!("/{}", tree.rel("a")));
    assert_eq!(cpus_allowed(pid), "0");
    tree.write("b", "cgroup.procs", &pid.to_string()).unwrap();
    assert_eq!(cgroup_of(pid), format!("/{}", tree.rel("b")));
    assert_eq!(tree.read("a", "cgroup.procs"), "");
    assert_eq!(tree.read("b", "cgroup.procs"), pid.to_string());
    assert_eq!(cpus_allowed(pid), "1");
    assert_eq!(
        tree.read("a", "cgroup.events").lines().next(),
        Some("populated 0")
    );
}

/// No internal processes: a cgroup that delegates controllers to children cannot hold
/// processes, and one holding processes cannot delegate. koordlet writes limits on such
/// parents (QoS and pod levels) and never moves processes, so both work side by side.
#[test]
#[ignore = "runs inside the cgroup v2 VM"]
fn cgroup_v2_vm_no_internal_processes_rule() {
    in_vm_only!();
    let cg = cgroups();
    let mut tree = V2Tree::new("internal");
    tree.mkdir("pod/c");
    let pid = tree.spawn("pod/c", "exec sleep 1000");
    let refused = tree.write("pod", "cgroup.procs", &pid.to_string()).unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(EBUSY));
    let busy = tree
        .write("pod/c", "cgroup.subtree_control", "+memory")
        .unwrap_err();
    assert_eq!(busy.raw_os_error(), Some(EBUSY));
    // Limits on the parent still apply.
    cg.write(R::CpuCfsQuota, &tree.dir("pod"), &CgroupValue::Int(20_000))
        .unwrap();
    cg.write(R::MemoryLimit, &tree.dir("pod"), &CgroupValue::Int(64 << 20))
        .unwrap();
    assert_eq!(tree.read("pod", "cpu.max"), "20000 100000");
}

/// Threaded subtrees: a domain controller enabled in the parent blocks `threaded`; with only
/// threaded controllers the child turns threaded, keeps `cpu.max` and loses `memory.max`, which
/// koordlet's probe reports as unsupported instead of failing.
#[test]
#[ignore = "runs inside the cgroup v2 VM"]
fn cgroup_v2_vm_threaded_cgroup_has_only_threaded_controllers() {
    in_vm_only!();
    let cg = cgroups();
    let mut tree = V2Tree::new("threaded");
    tree.mkdir("t/a");
    assert_eq!(tree.read("t/a", "cgroup.type"), "domain");
    let refused = tree.write("t/a", "cgroup.type", "threaded").unwrap_err();
    println!("threaded under a parent delegating memory: {refused}");
    tree.write("t", "cgroup.subtree_control", "-memory -io").unwrap();
    tree.write("t/a", "cgroup.type", "threaded").unwrap();
    assert_eq!(tree.read("t", "cgroup.type"), "domain threaded");
    assert_eq!(tree.read("t/a", "cgroup.type"), "threaded");
    let a = tree.dir("t/a");
    assert!(cg.is_supported(R::CpuCfsQuota, &a).unwrap());
    assert!(!cg.is_supported(R::MemoryLimit, &a).unwrap());
    cg.write(R::CpuCfsQuota, &a, &CgroupValue::Int(30_000)).unwrap();
    assert_eq!(tree.read("t/a", "cpu.max"), "30000 100000");
    assert!(matches!(
        cg.write(R::MemoryLimit, &a, &CgroupValue::Int(1 << 30)),
        Err(SystemError::Unsupported { .. })
    ));
}
