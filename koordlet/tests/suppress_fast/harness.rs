//! What the fast suppress tests and the reaction-latency benchmarks share: the real cgroup
//! tree with LS and BE busy loops, the loop's settings and a thread to run it in.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::tree::{ROOT, TestTree, setup};
use koord_api::nodeslo::{CpuSuppressPolicy, ResourceThresholdStrategy};
use koordlet::suppress_loop::{NodeCounter, SuppressLoop, SuppressLoopConfig};
use koordlet::system::{CgroupDir, CgroupLayout, Cgroups};
use koordlet_core::strategies::cpu_suppress::{BeCgroups, BePodCgroups, CgroupState, CpuPools};
use koordlet_core::strategies::cpuset::CpuList;
use koordlet_core::strategies::fast_suppress::{CpusetScope, FastSuppressConfig};

pub(crate) const TICK: Duration = Duration::from_millis(50);

/// Steps the LS burner: moves it into `kubepods/ls` and continues it (the step: full speed at
/// once), or stops it (SIGSTOP) and moves it back to `park`, a sibling of kubepods capped at 1 %
/// of a CPU (idle LS). Stopping it while idle matters: a busy task parked under a tiny quota is
/// throttled, and a throttled task moved to another cgroup was seen to stay off the CPU for up
/// to 2.5 s, so the "step" did not happen for the kernel.
pub(crate) fn step_ls(tree: &TestTree, pid: u32, on: bool) {
    let signal = |sig: rustix::process::Signal| {
        let pid = rustix::process::Pid::from_raw(pid as i32).expect("LS burner pid");
        rustix::process::kill_process(pid, sig).expect("signal LS burner");
    };
    if !on {
        signal(rustix::process::Signal::STOP);
    }
    let rel = if on { "kubepods/ls" } else { "park" };
    for c in ["cpu", "cpuacct", "cpuset"] {
        if c == "cpuset" && (tree.mount(c).is_none() || !tree.path(c, rel).exists()) {
            continue;
        }
        tree.write(c, rel, "cgroup.procs", &pid.to_string())
            .expect("move LS burner");
    }
    if on {
        signal(rustix::process::Signal::CONT);
    }
}

pub(crate) fn quota(tree: &TestTree) -> i64 {
    std::fs::read_to_string(tree.path("cpu", "kubepods/besteffort").join("cpu.cfs_quota_us"))
        .expect("quota")
        .trim()
        .parse()
        .expect("quota number")
}

pub(crate) fn capacity_milli() -> i64 {
    crate::tree::topology().len().max(1) as i64 * 1000
}

/// Upstream's default threshold (65 %) with policy cfsQuota: idle LS leaves BE 65 % of the
/// node, LS at one core 1000m less.
pub(crate) fn strategy() -> ResourceThresholdStrategy {
    ResourceThresholdStrategy {
        enable: Some(true),
        cpu_suppress_threshold_percent: Some(65),
        cpu_suppress_policy: Some(CpuSuppressPolicy::CfsQuota),
        ..Default::default()
    }
}

/// The test pod tree: kubepods/{ls,besteffort}, the LS burner parked, BE burners.
pub(crate) fn pod_tree(be_burners: usize) -> Option<(TestTree, u32)> {
    let mut tree = setup(&["cpu", "cpuacct"])?;
    // Win against the other work on this shared machine so the figures are the quota's.
    let _ = tree.write("cpu", "", "cpu.shares", "262144");
    for d in ["park", "kubepods", "kubepods/ls", "kubepods/besteffort"] {
        tree.mkdir(d).expect("mkdir");
    }
    tree.write("cpu", "park", "cpu.cfs_quota_us", "1000")
        .expect("park quota");
    let ls = tree.spawn_burner("park");
    step_ls(&tree, ls, false);
    for _ in 0..be_burners {
        tree.spawn_burner("kubepods/besteffort");
    }
    Some((tree, ls))
}

/// This test process moved into `<tree>/agent`, a sibling of kubepods (as koordlet's own pod
/// would be), so the loop and the observer are not starved by the burners; moved back to the
/// root cgroup on drop (before the tree is removed), also on panic.
pub(crate) struct AgentCgroup;

impl AgentCgroup {
    pub(crate) fn join(tree: &mut TestTree) -> AgentCgroup {
        tree.mkdir("agent").expect("mkdir agent");
        for c in ["cpu", "cpuacct"] {
            tree.write(c, "agent", "cgroup.procs", &std::process::id().to_string())
                .expect("join agent cgroup");
        }
        AgentCgroup
    }
}

impl Drop for AgentCgroup {
    fn drop(&mut self) {
        for c in ["cpu", "cpuacct"] {
            let _ = std::fs::write(
                std::path::Path::new(ROOT).join(c).join("cgroup.procs"),
                std::process::id().to_string(),
            );
        }
    }
}

pub(crate) fn loop_config(tree: &TestTree, fast: FastSuppressConfig) -> SuppressLoopConfig {
    let dir = |rel: &str| CgroupDir::new(rel).expect("dir");
    SuppressLoopConfig {
        interval: TICK,
        dry_run: false,
        fast,
        node_counter: NodeCounter::Cgroup(dir(tree.rel("").trim_end_matches('/'))),
        kubepods: dir(&tree.rel("kubepods")),
        besteffort: dir(&tree.rel("kubepods/besteffort")),
    }
}

pub(crate) fn cgroups() -> Arc<Cgroups> {
    Arc::new(Cgroups::new(ROOT, CgroupLayout::v1()))
}

/// Runs `fast` on a current-thread tokio runtime in its own thread (as the agent does) until
/// the returned sender is used or dropped.
pub(crate) fn run_loop_in_thread(
    fast: SuppressLoop,
    snapshots: tokio::sync::watch::Receiver<koordlet::states::Snapshot>,
) -> (tokio::sync::oneshot::Sender<()>, std::thread::JoinHandle<()>) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let gates = koordlet_core::features::FeatureGates::parse("").expect("gates");
    let runner = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let task = tokio::spawn(fast.run(snapshots, gates));
            let _ = stop_rx.await;
            task.abort();
        });
    });
    (stop_tx, runner)
}

/// CPU time samples of one cgroup over the last 100 ms (one CFS period): `push` returns the
/// usage rate over that window in milli-cores once it spans 100 ms.
#[derive(Default)]
pub(crate) struct RateWindow(std::collections::VecDeque<(Instant, u64)>);

impl RateWindow {
    pub(crate) fn push(&mut self, now: Instant, cpuacct_ns: u64) -> Option<f64> {
        let window = Duration::from_millis(100);
        self.0.push_back((now, cpuacct_ns));
        while self.0.len() > 2 && now - self.0[1].0 >= window {
            self.0.pop_front();
        }
        let (a, b) = (self.0.front()?, self.0.back()?);
        (b.0 - a.0 >= window).then(|| (b.1 - a.1) as f64 / (b.0 - a.0).as_nanos() as f64 * 1000.0)
    }
}

// ---- policy cpuset --------------------------------------------------------------------

pub(crate) const BE_CONTAINER: &str = "kubepods/besteffort/poda/c1";

/// The cpuset test tree: kubepods/{ls,besteffort/poda/c1} in cpu, cpuacct and cpuset; the LS
/// burner parked; two BE burners in the BE container.
pub(crate) fn cpuset_tree() -> Option<(TestTree, u32, Vec<u32>)> {
    if !std::path::Path::new(ROOT).join("cpuset/cpuset.cpus").exists() {
        println!("skipped: no cgroup v1 cpuset controller at /sys/fs/cgroup/cpuset");
        return None;
    }
    if crate::tree::topology().len() < 2 {
        println!("skipped: needs at least 2 CPUs");
        return None;
    }
    let mut tree = setup(&["cpu", "cpuacct", "cpuset"])?;
    let _ = tree.write("cpu", "", "cpu.shares", "262144");
    for d in [
        "park",
        "kubepods",
        "kubepods/ls",
        "kubepods/besteffort",
        "kubepods/besteffort/poda",
        BE_CONTAINER,
    ] {
        tree.mkdir(d).expect("mkdir");
    }
    tree.write("cpu", "park", "cpu.cfs_quota_us", "1000")
        .expect("park quota");
    let ls = tree.spawn_burner("park");
    step_ls(&tree, ls, false);
    let be = (0..2).map(|_| tree.spawn_burner(BE_CONTAINER)).collect();
    Some((tree, ls, be))
}

/// What the QoS round would publish for this tree; BE never below one CPU here.
pub(crate) fn cpuset_scope(tree: &TestTree) -> Arc<CpusetScope> {
    let dir = |rel: &str| CgroupState {
        dir: koordlet::system::CgroupDir::new(tree.rel(rel)).unwrap(),
        ..Default::default()
    };
    Arc::new(CpusetScope {
        be: BeCgroups {
            besteffort: dir("kubepods/besteffort"),
            pods: vec![BePodCgroups {
                pod: dir("kubepods/besteffort/poda"),
                containers: vec![dir(BE_CONTAINER)],
            }],
        },
        pools: CpuPools {
            topology: crate::tree::topology(),
            min_be_cpus: Some(1),
            ..Default::default()
        },
        host_apps: vec![],
    })
}

pub(crate) fn cpuset_of(tree: &TestTree, rel: &str) -> CpuList {
    let text = std::fs::read_to_string(tree.path("cpuset", rel).join("cpuset.cpus")).expect("cpuset.cpus");
    CpuList::parse(&text).expect("cpu list")
}

/// `Cpus_allowed_list` of a process (what `sched_getaffinity` returns).
pub(crate) fn allowed(pid: u32) -> CpuList {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list");
    CpuList::parse(line.trim()).expect("cpu list")
}

pub(crate) fn cpuset_strategy(policy: CpuSuppressPolicy) -> ResourceThresholdStrategy {
    ResourceThresholdStrategy {
        cpu_suppress_policy: Some(policy),
        ..strategy()
    }
}

pub(crate) fn snapshot(capacity: i64) -> koordlet::states::Snapshot {
    snapshot_with(capacity, "cfsQuota")
}

pub(crate) fn snapshot_with(capacity: i64, policy: &str) -> koordlet::states::Snapshot {
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bench"},
        "status": {"capacity": {"cpu": format!("{capacity}m")}, "allocatable": {"cpu": format!("{capacity}m")}}
    }))
    .expect("node");
    let slo: koord_api::NodeSLOSpec = serde_json::from_value(serde_json::json!({
        "resourceUsedThresholdWithBE": {
            "enable": true,
            "cpuSuppressThresholdPercent": 65,
            "cpuSuppressPolicy": policy
        }
    }))
    .expect("nodeslo");
    koordlet::states::Snapshot {
        node: Some(Arc::new(node)),
        node_slo: Some(Arc::new(slo)),
        ..Default::default()
    }
}
