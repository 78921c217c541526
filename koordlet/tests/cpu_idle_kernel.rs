//! Tier 3: the cpu_qos strategy on a real cgroup v1 kernel. An LS pod and a BE pod of a fake
//! kubepods tree (below a unique `koord-test-*` directory) are pinned to one CPU; the engine
//! decides with the kernel's probed files, the executor applies, cpuacct measures. Without root,
//! cgroup v1 or `cpu.idle` the tests print `skipped: <reason>` and pass; the tree and its
//! processes are removed on drop, also on failure.
//!
//! `cpu_idle_wakeup_latency_bench` (ignored; `cargo test -p koordlet --test cpu_idle_kernel --
//! --ignored --nocapture`) prints an LS sleeper's wake-up lateness alone, next to BE busy loops
//! under a cfsQuota suppress budget, and next to BE busy loops under `cpu.idle`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is the failure report

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use koord_api::NodeSLOSpec;
use koord_test_support::CgroupV1Tree;
use koordlet::executor::{Executor, ExecutorConfig};
use koordlet::system::cpu_qos::probe_cpu_qos;
use koordlet::system::{CgroupDriver, CgroupLayout, Cgroups, KubeCgroupPaths, SystemError, SystemRoots};
use koordlet_core::features::FeatureGates;
use koordlet_core::pod::PodMeta;
use koordlet_core::strategies::CgroupWrite;
use koordlet_core::strategies::engine::{
    self, CgroupFacts, EngineInput, EngineOptions, EngineState, NodeFacts, UsageFacts,
};
use serde_json::json;

/// CPU-measuring tests never overlap.
static CPU_LOCK: Mutex<()> = Mutex::new(());

fn pod(name: &str, qos: &str, kube: &str) -> PodMeta {
    let v = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("cpu-idle-{name}"),
                     "labels": {"koordinator.sh/qosClass": qos}},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running", "qosClass": kube}
    });
    PodMeta::new(Arc::new(serde_json::from_value(v).unwrap())).unwrap()
}

/// A kubepods tree with one LS and one BE pod, every task pinned to one CPU.
struct World {
    tree: CgroupV1Tree,
    cgroups: Arc<Cgroups>,
    paths: KubeCgroupPaths,
    pods: Vec<PodMeta>,
    executor: Executor,
}

impl World {
    fn new() -> Option<World> {
        let tree = CgroupV1Tree::or_skip(&["cpu", "cpuacct", "cpuset"])?;
        if !tree.path("cpu", "").join("cpu.idle").exists() {
            println!("skipped: no cpu.idle in the cgroup v1 cpu controller (kernel older than 5.15)");
            return None;
        }
        let cgroups = match Cgroups::detect(&SystemRoots::default()) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                println!("skipped: cgroup layout not detected: {e}");
                return None;
            }
        };
        // Pin the whole run directory to the last CPU before its children copy its cpuset.
        let cpus = tree.read("cpuset", "", "cpuset.cpus").expect("cpuset.cpus");
        let last = cpus.rsplit([',', '-']).next().unwrap_or("0").to_owned();
        tree.write("cpuset", "", "cpuset.cpus", &last)
            .expect("pin to one CPU");
        // Win against the rest of this shared machine, so the split is between LS and BE.
        let _ = tree.write("cpu", "", "cpu.shares", "262144");
        let paths = KubeCgroupPaths::with_parent(CgroupDriver::Cgroupfs, Path::new(tree.name())).unwrap();
        let pods = vec![pod("ls", "LS", "Burstable"), pod("be", "BE", "BestEffort")];
        for p in &pods {
            tree.mkdir(&local(&tree, &p.cgroup_dir(&paths).to_string()))
                .expect("mkdir pod");
        }
        let executor = Executor::new(cgroups.clone(), ExecutorConfig::default());
        Some(World {
            tree,
            cgroups,
            paths,
            pods,
            executor,
        })
    }

    /// The pod's directory inside the run directory.
    fn pod_rel(&self, name: &str) -> String {
        let p = self.pods.iter().find(|p| p.name == name).unwrap();
        local(&self.tree, &p.cgroup_dir(&self.paths).to_string())
    }

    /// One engine round with `resourceQOSStrategy` = `qos`, applied through the executor;
    /// returns the cpu_qos writes.
    fn apply_cpu_qos(&mut self, qos: serde_json::Value) -> Vec<CgroupWrite> {
        let slo: NodeSLOSpec = serde_json::from_value(json!({"resourceQOSStrategy": qos})).unwrap();
        let cgroups = CgroupFacts {
            cpu_qos_kernel: probe_cpu_qos(&self.cgroups, &self.paths).expect("probe"),
            ..CgroupFacts::default()
        };
        assert!(cgroups.cpu_qos_kernel.idle, "probe missed cpu.idle");
        let plan = engine::run(&EngineInput {
            node: &NodeFacts::default(),
            pods: &self.pods,
            paths: &self.paths,
            node_slo: Some(&slo),
            gates: &FeatureGates::default(),
            usage: &UsageFacts::default(),
            cgroups: &cgroups,
            topology: &[],
            in_flight: &BTreeSet::new(),
            state: &EngineState::default(),
            now_seconds: 0.0,
            options: EngineOptions::default(),
        });
        let writes: Vec<CgroupWrite> = plan
            .writes
            .into_iter()
            .filter(|w| w.strategy == "cpu_qos")
            .collect();
        let report = self.executor.apply_refs(&writes, Instant::now());
        assert!(report.errors.is_empty(), "executor errors: {:?}", report.errors);
        writes
    }

    fn idle(&self, rel: &str) -> String {
        self.tree.read("cpu", rel, "cpu.idle").unwrap()
    }

    fn usage_ns(&self, rel: &str) -> u64 {
        self.tree
            .read("cpuacct", rel, "cpuacct.usage")
            .unwrap()
            .parse()
            .unwrap()
    }

    /// LS and BE milli-cores over `window`.
    fn measure(&self, window: Duration) -> (f64, f64) {
        let (ls, be) = (self.pod_rel("ls"), self.pod_rel("be"));
        let (ls0, be0) = (self.usage_ns(&ls), self.usage_ns(&be));
        let t0 = Instant::now();
        sleep(window);
        let dt = t0.elapsed().as_nanos() as f64;
        let milli = |now: u64, then: u64| (now - then) as f64 / dt * 1000.0;
        (milli(self.usage_ns(&ls), ls0), milli(self.usage_ns(&be), be0))
    }
}

/// `dir` (relative to the controller root) relative to the run directory.
fn local(tree: &CgroupV1Tree, dir: &str) -> String {
    dir.strip_prefix(tree.name())
        .unwrap_or(dir)
        .trim_start_matches('/')
        .to_owned()
}

fn be_idle() -> serde_json::Value {
    json!({"lsClass": {"cpuQOS": {"enable": true}}, "beClass": {"cpuQOS": {"enable": true}}})
}

#[test]
fn cpu_idle_gives_ls_the_cpu_over_be_through_the_executor() {
    let _lock = CPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut w) = World::new() else { return };
    let (ls, be) = (w.pod_rel("ls"), w.pod_rel("be"));
    w.tree.spawn_burner(&ls).expect("LS burner");
    w.tree.spawn_burner(&be).expect("BE burner");
    w.tree.spawn_burner(&be).expect("BE burner");
    let share = |(l, b): (f64, f64)| l / (l + b).max(1.0);

    let without = w.measure(Duration::from_millis(2000));
    let writes = w.apply_cpu_qos(be_idle());
    assert_eq!(writes.len(), 4, "{writes:?}");
    assert_eq!(w.idle("kubepods/besteffort"), "1");
    assert_eq!(w.idle(&be), "1");
    assert_eq!(w.idle("kubepods/burstable"), "0");
    assert_eq!(w.idle(&ls), "0");
    sleep(Duration::from_millis(200));
    let mut with = w.measure(Duration::from_millis(2000));
    for _ in 0..2 {
        if share(with) >= 0.95 {
            break;
        }
        with = w.measure(Duration::from_millis(2000));
    }
    // cpuQOS off again: everything reset to 0, the CFS split is back.
    w.apply_cpu_qos(json!({}));
    assert_eq!(w.idle("kubepods/besteffort"), "0");
    assert_eq!(w.idle(&be), "0");
    sleep(Duration::from_millis(200));
    let reset = w.measure(Duration::from_millis(2000));
    println!(
        "cpu.idle: LS {:.0}m BE {:.0}m (LS share {:.2}) without; LS {:.0}m BE {:.0}m ({:.2}) with BE idle; \
         LS {:.0}m BE {:.0}m ({:.2}) after reset",
        without.0,
        without.1,
        share(without),
        with.0,
        with.1,
        share(with),
        reset.0,
        reset.1,
        share(reset)
    );
    assert!(
        share(with) >= 0.95,
        "LS got {:.2} of the CPU with BE idle",
        share(with)
    );
    assert!(
        share(without) < 0.8 && share(reset) < 0.8,
        "LS had the CPU without cpu.idle too: {:.2} / {:.2}",
        share(without),
        share(reset)
    );
}

#[test]
fn cpu_idle_probe_reads_the_kubepods_cgroup() {
    let dir = tempfile::tempdir().unwrap();
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    for (layout, cpu_dir) in [
        (CgroupLayout::v1(), "cpu/kubepods"),
        (CgroupLayout::v2(), "kubepods"),
    ] {
        let root = dir.path().join(format!("{:?}", layout.version()));
        let cgroups = Cgroups::new(&root, layout);
        assert!(matches!(
            probe_cpu_qos(&cgroups, &paths),
            Err(SystemError::CgroupDirMissing(_))
        ));
        let kubepods = root.join(cpu_dir);
        std::fs::create_dir_all(&kubepods).unwrap();
        let k = probe_cpu_qos(&cgroups, &paths).unwrap();
        assert!(!k.idle && !k.bvt);
        std::fs::write(kubepods.join("cpu.idle"), "0\n").unwrap();
        let k = probe_cpu_qos(&cgroups, &paths).unwrap();
        assert!(k.idle && !k.bvt);
        std::fs::write(kubepods.join("cpu.bvt_warp_ns"), "0\n").unwrap();
        let k = probe_cpu_qos(&cgroups, &paths).unwrap();
        assert!(k.idle && k.bvt);
    }
}

/// Wake-up lateness of a 1 ms periodic sleeper thread moved into `rel`, in µs, sorted.
fn sleeper_lateness(tree: &CgroupV1Tree, rel: &str, period: Duration, wakeups: usize) -> Vec<u64> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let tid = rustix::thread::gettid().as_raw_nonzero().get().to_string();
            for c in ["cpu", "cpuacct", "cpuset"] {
                tree.write(c, rel, "tasks", &tid).expect("move the sleeper");
            }
            let mut late: Vec<u64> = (0..wakeups)
                .map(|_| {
                    let t0 = Instant::now();
                    sleep(period);
                    t0.elapsed().saturating_sub(period).as_micros() as u64
                })
                .collect();
            late.sort_unstable();
            late
        })
        .join()
        .unwrap()
    })
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

#[test]
#[ignore = "benchmark: prints figures, run with --ignored --nocapture"]
fn cpu_idle_wakeup_latency_bench() {
    use koordlet_core::strategies::cpu_suppress::{self, BeCgroups, CgroupState, CpuPools, SuppressInput};
    let _lock = CPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut w) = World::new() else { return };
    let (ls, be) = (w.pod_rel("ls"), w.pod_rel("be"));
    let uptime = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load (/proc/loadavg): {}", uptime.trim());
    let period = Duration::from_millis(1);
    let wakeups = 5000;
    let row = |name: &str, late: &[u64]| {
        println!(
            "{name:<42} p50 {:>6} us  p99 {:>6} us  max {:>6} us",
            percentile(late, 0.5),
            percentile(late, 0.99),
            late.last().copied().unwrap_or(0)
        );
    };
    row(
        "LS sleeper alone",
        &sleeper_lateness(&w.tree, &ls, period, wakeups),
    );
    w.tree.spawn_burner(&be).expect("BE burner");
    w.tree.spawn_burner(&be).expect("BE burner");
    row(
        "LS + 2 BE busy loops, no control",
        &sleeper_lateness(&w.tree, &ls, period, wakeups),
    );
    // cfsQuota suppress as the engine decides it for this one-CPU view (LS uses ~nothing, so the
    // budget is the 65 % threshold of one CPU), applied by the executor.
    let besteffort = w.paths.qos_dir(koord_api::KubeQoSClass::BestEffort);
    let plan = cpu_suppress::decide(&SuppressInput {
        strategy: &koord_api::nodeslo::ResourceThresholdStrategy {
            enable: Some(true),
            cpu_suppress_policy: Some(koord_api::nodeslo::CpuSuppressPolicy::CfsQuota),
            ..Default::default()
        },
        capacity_milli: 1000,
        reserved_milli: 0,
        node_usage_milli: 0,
        pods: &[],
        host_apps: &[],
        cgroups: &BeCgroups {
            besteffort: CgroupState {
                dir: besteffort.clone(),
                cfs_quota_us: None,
                cpuset: None,
            },
            pods: vec![],
        },
        cpus: &CpuPools::default(),
    });
    let report = w.executor.apply_refs(&plan.writes, Instant::now());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let quota = w
        .tree
        .read("cpu", "kubepods/besteffort", "cpu.cfs_quota_us")
        .unwrap();
    row(
        &format!("LS + BE, cfsQuota suppress (quota {quota} us)"),
        &sleeper_lateness(&w.tree, &ls, period, wakeups),
    );
    w.tree
        .write("cpu", "kubepods/besteffort", "cpu.cfs_quota_us", "-1")
        .unwrap();
    w.apply_cpu_qos(be_idle());
    row(
        "LS + BE, cpu.idle=1 on BE (no quota)",
        &sleeper_lateness(&w.tree, &ls, period, wakeups),
    );
}
