//! Simulated pods in cgroups without an API server: real kernel (tier 3) and fake cgroupfs
//! (tier 2). Each test checks that nothing is left behind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed read is a failed test

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_testcluster::node::fakefs::FakeAccounting;
use koord_testcluster::node::runtime::start_pod;
use koord_testcluster::node::{CgroupMode, CgroupTree};
use serde_json::json;

/// Tests that measure CPU never run at the same time (2 shared cores).
static CPU_LOCK: Mutex<()> = Mutex::new(());

fn be_pod(uid: &str, cpu_load: &str, memory: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "burner", "namespace": "default", "uid": uid,
                      "annotations": { "sim.koordinator.sh/cpu-load": cpu_load, "sim.koordinator.sh/memory": memory } },
        "spec": { "containers": [{ "name": "main", "image": "busybox",
                  "resources": { "requests": { "kubernetes.io/batch-cpu": "1000" }, "limits": { "kubernetes.io/batch-cpu": "1000" } } }] },
    }))
    .unwrap()
}

fn read_u64(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}: {text:?}", path.display()))
}

/// v1 `cpuacct.usage` (ns), v2 `cpu.stat` usage_usec.
fn cpu_usage_ns(dir: &Path, v2: bool) -> u64 {
    if !v2 {
        return read_u64(&dir.join("cpuacct.usage"));
    }
    let stat = std::fs::read_to_string(dir.join("cpu.stat")).unwrap();
    stat.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .unwrap()
        .trim()
        .parse::<u64>()
        .unwrap()
        * 1000
}

/// Waits (up to 10 s on a busy machine) until the worker has used some CPU, i.e. python started.
fn wait_until_working(mut usage: impl FnMut() -> u64) {
    let start = usage();
    koord_test_support::wait_for_blocking("the worker to use some CPU", Duration::from_secs(10), || {
        (usage() != start).then_some(())
    });
}

#[test]
fn simulated_pod_burns_cpu_in_a_real_cgroup_and_leaves_nothing_behind() {
    let _cpu = CPU_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let tree = CgroupTree::new().unwrap();
    let v2 = match tree.mode() {
        CgroupMode::Fake { reason } => {
            println!("skipped: {reason}");
            return;
        }
        CgroupMode::V1 { .. } => false,
        CgroupMode::V2 { .. } => true,
    };
    let run_dirs = tree.run_dirs().to_vec();
    let node = tree.node("node-a").unwrap();
    let uid = "0b5e4a9e-1c1d-4c57-9b43-6d1f1b7c0001";
    let running = start_pod(&be_pod(uid, "0.5", "32Mi"), &node, 1 << 30).unwrap();
    let container = &running.containers[0];
    assert_eq!(
        container.dir,
        format!(
            "kubepods/besteffort/pod{uid}/{}",
            container.started.container_id.trim_start_matches("containerd://")
        )
    );
    let cpuacct = node.dir("cpuacct", &container.dir).unwrap();
    let pids = container.processes.pids();
    let procs = std::fs::read_to_string(cpuacct.join("cgroup.procs")).unwrap();
    assert!(
        pids.iter()
            .all(|pid| procs.split_whitespace().any(|p| p == pid.to_string())),
        "pids {pids:?} not in {procs:?}"
    );
    // The koordlet root resolves to the same cgroup.
    let through_root = if v2 {
        node.cgroup_root().join(&container.dir)
    } else {
        node.cgroup_root().join("cpuacct").join(&container.dir)
    };
    assert!(
        through_root.join("cgroup.procs").exists(),
        "{} missing",
        through_root.display()
    );

    let kubepods = node.dir("cpuacct", "kubepods").unwrap();
    wait_until_working(|| cpu_usage_ns(&cpuacct, v2));
    let before = cpu_usage_ns(&cpuacct, v2);
    let kubepods_before = cpu_usage_ns(&kubepods, v2);
    std::thread::sleep(Duration::from_millis(1500));
    let grown = cpu_usage_ns(&cpuacct, v2) - before;
    let kubepods_grown = cpu_usage_ns(&kubepods, v2) - kubepods_before;
    println!(
        "container cpu usage grew {} ms in 1.5 s at load 0.5",
        grown / 1_000_000
    );
    // 0.5 core for 1.5 s is 750 ms; a busy 2-core machine may give less, never nothing.
    assert!(grown > 30_000_000, "cpu usage grew only {grown} ns");
    assert!(
        kubepods_grown >= grown,
        "kubepods {kubepods_grown} < container {grown}"
    );
    if !v2 {
        let memory = read_u64(
            &node
                .dir("memory", &container.dir)
                .unwrap()
                .join("memory.usage_in_bytes"),
        );
        assert!(memory >= 32 << 20, "memory usage {memory} below the 32Mi held");
    }

    drop(running);
    assert!(!cpuacct.exists(), "container cgroup left after stop");
    drop(node);
    drop(tree);
    for dir in &run_dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} left behind"
        );
    }
}

#[test]
fn a_panicking_test_still_cleans_up() {
    let tree = CgroupTree::new().unwrap();
    let run_dirs = tree.run_dirs().to_vec();
    let scratch_root = tree.node("node-p").unwrap().cgroup_root().to_path_buf();
    let pids = std::sync::Arc::new(Mutex::new(Vec::new()));
    let seen = pids.clone();
    let result = std::panic::catch_unwind(move || {
        let node = tree.node("node-q").unwrap();
        let running = start_pod(
            &be_pod("0b5e4a9e-1c1d-4c57-9b43-6d1f1b7c0002", "0", "0"),
            &node,
            1 << 20,
        )
        .unwrap();
        seen.lock()
            .unwrap()
            .extend(running.containers[0].processes.pids());
        panic!("test failure while a pod runs");
    });
    assert!(result.is_err());
    for dir in &run_dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    assert!(!scratch_root.exists(), "koordlet root left behind");
    for pid in pids.lock().unwrap().iter() {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} left behind"
        );
    }
}

#[test]
fn fake_cgroupfs_simulates_usage_from_the_real_processes() {
    let _cpu = CPU_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let tree = CgroupTree::fake("test").unwrap();
    let node = tree.node("node-f").unwrap();
    let root = node.cgroup_root().to_path_buf();
    let running = start_pod(
        &be_pod("0b5e4a9e-1c1d-4c57-9b43-6d1f1b7c0003", "0.5", "16Mi"),
        &node,
        1 << 30,
    )
    .unwrap();
    let container = &running.containers[0];
    let mut accounting = FakeAccounting::default();
    let sample = || -> BTreeMap<String, _> { [(container.dir.clone(), container.processes.usage())].into() };
    let usage_file = root.join("cpuacct").join(&container.dir).join("cpuacct.usage");
    wait_until_working(|| {
        accounting.write(node.cgroup_root(), &sample()).unwrap();
        read_u64(&usage_file)
    });
    let before = read_u64(&usage_file);
    std::thread::sleep(Duration::from_millis(1500));
    accounting.write(node.cgroup_root(), &sample()).unwrap();
    let grown = read_u64(&usage_file) - before;
    println!(
        "fake container cpu usage grew {} ms in 1.5 s at load 0.5",
        grown / 1_000_000
    );
    assert!(grown >= 30_000_000, "fake cpuacct.usage grew only {grown} ns");
    assert!(read_u64(&root.join("cpuacct/kubepods/cpuacct.usage")) >= read_u64(&usage_file));
    let rss = read_u64(
        &root
            .join("memory")
            .join(&container.dir)
            .join("memory.usage_in_bytes"),
    );
    assert!(rss >= 16 << 20, "fake memory usage {rss} below the 16Mi held");
    let procs = std::fs::read_to_string(root.join("cpu").join(&container.dir).join("cgroup.procs")).unwrap();
    assert_eq!(procs.trim(), container.processes.pids()[0].to_string());
    drop(running);
    drop(node);
    drop(tree);
    assert!(!root.exists(), "fake cgroupfs left behind");
}
