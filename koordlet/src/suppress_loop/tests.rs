//! The live driver on fake cgroup trees (v1 and v2) in a temp dir: counters in, quota out.

use std::path::Path;

use super::*;
use crate::system::CgroupLayout;
use crate::telemetry::Telemetry;
use koord_api::nodeslo::CpuSuppressPolicy;
use prometheus_client::registry::Registry;

struct Fake {
    _dir: tempfile::TempDir,
    root: PathBuf,
    version: CgroupVersion,
}

impl Fake {
    fn new(version: CgroupVersion) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let f = Fake {
            _dir: dir,
            root,
            version,
        };
        f.set_usage(0, 0, 0);
        match version {
            CgroupVersion::V1 => f.put("cpu", "kubepods/besteffort", "cpu.cfs_quota_us", "-1\n"),
            CgroupVersion::V2 => f.put("", "kubepods/besteffort", "cpu.max", "max 100000\n"),
        }
        f
    }

    fn put(&self, controller: &str, dir: &str, file: &str, text: &str) {
        let d = self.root.join(controller).join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(file), text).unwrap();
    }

    /// Cumulative CPU ms of the node (top), kubepods and besteffort.
    fn set_usage(&self, node_ms: u64, kubepods_ms: u64, be_ms: u64) {
        for (dir, ms) in [
            ("", node_ms),
            ("kubepods", kubepods_ms),
            ("kubepods/besteffort", be_ms),
        ] {
            match self.version {
                CgroupVersion::V1 => {
                    self.put("cpuacct", dir, "cpuacct.usage", &format!("{}\n", ms * 1_000_000))
                }
                CgroupVersion::V2 => self.put(
                    "",
                    dir,
                    "cpu.stat",
                    &format!("usage_usec {}\nuser_usec 0\nsystem_usec 0\n", ms * 1000),
                ),
            }
        }
    }

    fn quota_text(&self) -> String {
        match self.version {
            CgroupVersion::V1 => {
                std::fs::read_to_string(self.root.join("cpu/kubepods/besteffort/cpu.cfs_quota_us"))
            }
            CgroupVersion::V2 => std::fs::read_to_string(self.root.join("kubepods/besteffort/cpu.max")),
        }
        .unwrap()
    }

    fn fast_loop(&self, dry_run: bool) -> SuppressLoop {
        self.fast_loop_with(dry_run, None)
    }

    fn fast_loop_with(&self, dry_run: bool, metrics: Option<SuppressMetrics>) -> SuppressLoop {
        let layout = match self.version {
            CgroupVersion::V1 => CgroupLayout::v1(),
            CgroupVersion::V2 => CgroupLayout::v2(),
        };
        let cgroups = Arc::new(Cgroups::new(&self.root, layout));
        let dir = |p: &str| CgroupDir::new(Path::new(p)).unwrap();
        SuppressLoop::new(
            cgroups,
            SuppressLoopConfig {
                interval: Duration::from_millis(50),
                dry_run,
                fast: FastSuppressConfig::default(),
                node_counter: NodeCounter::Cgroup(dir("")),
                kubepods: dir("kubepods"),
                besteffort: dir("kubepods/besteffort"),
            },
            metrics,
        )
        .unwrap()
    }
}

fn strategy() -> ResourceThresholdStrategy {
    ResourceThresholdStrategy {
        enable: Some(true),
        cpu_suppress_threshold_percent: Some(65),
        cpu_suppress_policy: Some(CpuSuppressPolicy::CfsQuota),
        ..Default::default()
    }
}

const NODE: NodeCpu = NodeCpu {
    capacity_milli: 4000,
    reserved_milli: 0,
};

#[test]
fn v2_counters_and_cpu_max_write() {
    let f = Fake::new(CgroupVersion::V2);
    let mut registry = Registry::default();
    let telemetry = Telemetry::register(&mut registry, "node-1");
    let metrics = SuppressMetrics::register(&mut registry, telemetry);
    let mut l = f.fast_loop_with(false, Some(metrics.clone()));
    let s = strategy();
    let t0 = Instant::now();
    assert_eq!(l.tick(t0, Some(&s), NODE), TickOutcome::Idle);
    // 100 ms: non-BE 200 ms of CPU (2000m), BE 100 ms (1000m): budget 2600 - 2000 = 600m.
    f.set_usage(300, 300, 100);
    let out = l.tick(t0 + Duration::from_millis(100), Some(&s), NODE);
    assert_eq!(out, TickOutcome::Wrote(60_000));
    assert_eq!(f.quota_text().trim(), "60000 100000");
    assert_eq!(metrics.telemetry.upstream.suppress_cores("cfsQuota"), Some(0.6));
    let decreases = metrics
        .writes
        .get_or_create(&vec![("direction".to_string(), "decrease".to_string())])
        .get();
    assert_eq!(decreases, 1);
    // Non-BE now uses more than the threshold: the budget is negative, the quota written is
    // the floor, and the series reports the quota in force (as upstream), never below zero.
    f.set_usage(800, 800, 100);
    l.tick(t0 + Duration::from_millis(200), Some(&s), NODE);
    let in_force: f64 = f.quota_text().split_whitespace().next().unwrap().parse().unwrap();
    assert!(in_force > 0.0, "{}", f.quota_text());
    assert_eq!(
        metrics.telemetry.upstream.suppress_cores("cfsQuota"),
        Some(in_force / 100_000.0)
    );
    // Off: unlimited again, once.
    assert_eq!(
        l.tick(t0 + Duration::from_millis(250), None, NODE),
        TickOutcome::Wrote(-1)
    );
    assert_eq!(f.quota_text().trim(), "max 100000");
    assert_eq!(metrics.telemetry.upstream.suppress_cores("cfsQuota"), None);
    assert_eq!(
        l.tick(t0 + Duration::from_millis(300), None, NODE),
        TickOutcome::Idle
    );
}

#[test]
fn v1_dry_run_writes_nothing_and_decides_each_change_once() {
    let f = Fake::new(CgroupVersion::V1);
    let mut l = f.fast_loop(true);
    let s = strategy();
    let t0 = Instant::now();
    l.tick(t0, Some(&s), NODE);
    f.set_usage(300, 300, 100);
    assert_eq!(
        l.tick(t0 + Duration::from_millis(100), Some(&s), NODE),
        TickOutcome::Wrote(60_000)
    );
    assert_eq!(f.quota_text().trim(), "-1");
    // Same rates next tick: the dry-run decision stands, nothing new.
    f.set_usage(600, 600, 200);
    assert_eq!(
        l.tick(t0 + Duration::from_millis(200), Some(&s), NODE),
        TickOutcome::Idle
    );
}

#[test]
fn missing_tree_is_a_read_failure_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let cgroups = Arc::new(Cgroups::new(dir.path(), CgroupLayout::v1()));
    let d = |p: &str| CgroupDir::new(Path::new(p)).unwrap();
    let mut l = SuppressLoop::new(
        cgroups,
        SuppressLoopConfig {
            interval: Duration::from_millis(50),
            dry_run: false,
            fast: FastSuppressConfig::default(),
            node_counter: NodeCounter::ProcStat(dir.path().join("stat")),
            kubepods: d("kubepods"),
            besteffort: d("kubepods/besteffort"),
        },
        None,
    )
    .unwrap();
    assert_eq!(
        l.tick(Instant::now(), Some(&strategy()), NODE),
        TickOutcome::ReadFailed
    );
}

#[tokio::test]
async fn run_waits_for_a_nodeslo_then_restores_when_disabled() {
    let f = Fake::new(CgroupVersion::V1);
    f.put("cpu", "kubepods/besteffort", "cpu.cfs_quota_us", "50000\n");
    let l = f.fast_loop(false);
    let (tx, rx) = watch::channel(Snapshot::default());
    let gates = FeatureGates::parse("").unwrap();
    let task = tokio::spawn(l.run(rx, gates));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(f.quota_text().trim(), "50000", "written before any NodeSLO");
    let slo: koord_api::NodeSLOSpec =
        serde_json::from_value(serde_json::json!({"resourceUsedThresholdWithBE": {"enable": false}}))
            .unwrap();
    tx.send_modify(|s| s.node_slo = Some(Arc::new(slo)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(f.quota_text().trim(), "-1");
    task.abort();

    // Gate off: the loop never runs, nothing is touched.
    f.put("cpu", "kubepods/besteffort", "cpu.cfs_quota_us", "50000\n");
    let (_tx, rx) = watch::channel(tx.borrow().clone());
    let gates = FeatureGates::parse("BECPUSuppress=false").unwrap();
    tokio::time::timeout(Duration::from_secs(1), f.fast_loop(false).run(rx, gates))
        .await
        .expect("returns at once with the gate off");
    assert_eq!(f.quota_text().trim(), "50000");
}

/// Policy cpuset on a fake v1 tree with 8 CPUs (4 cores × 2 threads): a non-BE spike narrows
/// every BE dir to whole cores, the leftover quota goes back to −1, and disabling suppress
/// gives every dir the full set.
#[test]
fn v1_cpuset_policy_narrows_every_be_dir_and_restores() {
    use koordlet_core::strategies::cpu_suppress::{BeCgroups, BePodCgroups, CgroupState, CpuPools};
    use koordlet_core::strategies::cpuset::CpuInfo;
    let f = Fake::new(CgroupVersion::V1);
    let dirs = [
        "kubepods/besteffort",
        "kubepods/besteffort/poda",
        "kubepods/besteffort/poda/c1",
    ];
    for d in dirs {
        f.put("cpuset", d, "cpuset.cpus", "0-7\n");
    }
    f.put("cpu", "kubepods/besteffort", "cpu.cfs_quota_us", "50000\n");
    let cpuset = |d: &str| {
        std::fs::read_to_string(f.root.join("cpuset").join(d).join("cpuset.cpus"))
            .unwrap()
            .trim()
            .to_owned()
    };
    let state = |d: &str| CgroupState {
        dir: CgroupDir::new(d).unwrap(),
        ..Default::default()
    };
    let scope = CpusetScope {
        be: BeCgroups {
            besteffort: state(dirs[0]),
            pods: vec![BePodCgroups {
                pod: state(dirs[1]),
                containers: vec![state(dirs[2])],
            }],
        },
        pools: CpuPools {
            topology: (0..8)
                .map(|cpu| CpuInfo {
                    cpu,
                    core: cpu / 2,
                    socket: 0,
                    node: 0,
                })
                .collect(),
            ..Default::default()
        },
        host_apps: vec![],
    };
    let mut l = f.fast_loop(false);
    let s = ResourceThresholdStrategy {
        cpu_suppress_policy: Some(CpuSuppressPolicy::Cpuset),
        ..strategy()
    };
    let node = NodeCpu {
        capacity_milli: 8000,
        reserved_milli: 0,
    };
    let t0 = Instant::now();
    // No scope yet: nothing is written under cpuset.
    assert_eq!(l.tick(t0, Some(&s), node), TickOutcome::Idle);
    l.set_cpuset_scope(Some(Arc::new(scope)));
    // 100 ms: non-BE 400 ms (4000m): budget 5200 - 4000 = 1200m -> 2 CPUs, one whole core.
    f.set_usage(500, 500, 100);
    let out = l.tick(t0 + Duration::from_millis(100), Some(&s), node);
    assert_eq!(out, TickOutcome::WroteCpuset(2));
    for d in dirs {
        assert_eq!(cpuset(d), "0-1", "{d}");
    }
    assert_eq!(f.quota_text().trim(), "-1");
    // Same usage: nothing more.
    f.set_usage(1000, 1000, 200);
    assert_eq!(
        l.tick(t0 + Duration::from_millis(200), Some(&s), node),
        TickOutcome::Idle
    );
    // Suppress off: quota -1 (already) and the full set everywhere.
    assert_eq!(
        l.tick(t0 + Duration::from_millis(300), None, node),
        TickOutcome::Wrote(-1)
    );
    for d in dirs {
        assert_eq!(cpuset(d), "0-7", "{d}");
    }
}

/// On v2 the kubelet leaves besteffort's `cpuset.cpus` empty ("the parent's set"): the loop
/// counts BE's CPUs from `cpuset.cpus.effective`. Counted from `cpuset.cpus`, BE on every CPU
/// looked like BE on none, and a needed shrink was taken for a (rate-limited) increase.
#[test]
fn v2_cpuset_policy_counts_the_effective_set() {
    use koordlet_core::strategies::cpu_suppress::{BeCgroups, CgroupState, CpuPools};
    use koordlet_core::strategies::cpuset::CpuInfo;
    let f = Fake::new(CgroupVersion::V2);
    let cpus_file = f.root.join("kubepods/besteffort/cpuset.cpus");
    let kubelet_recreates_besteffort = || {
        f.put("", "kubepods/besteffort", "cpuset.cpus", "\n");
        f.put("", "kubepods/besteffort", "cpuset.cpus.effective", "0-7\n");
    };
    kubelet_recreates_besteffort();
    let scope = CpusetScope {
        be: BeCgroups {
            besteffort: CgroupState {
                dir: CgroupDir::new("kubepods/besteffort").unwrap(),
                ..Default::default()
            },
            pods: vec![],
        },
        pools: CpuPools {
            topology: (0..8)
                .map(|cpu| CpuInfo {
                    cpu,
                    core: cpu / 2,
                    socket: 0,
                    node: 0,
                })
                .collect(),
            ..Default::default()
        },
        host_apps: vec![],
    };
    let mut l = f.fast_loop(false);
    l.set_cpuset_scope(Some(Arc::new(scope)));
    let s = ResourceThresholdStrategy {
        cpu_suppress_threshold_percent: Some(100),
        cpu_suppress_policy: Some(CpuSuppressPolicy::Cpuset),
        ..strategy()
    };
    let node = NodeCpu {
        capacity_milli: 8000,
        reserved_milli: 0,
    };
    let t0 = Instant::now();
    assert_eq!(l.tick(t0, Some(&s), node), TickOutcome::Idle);
    // An idle node: the policy's first round gives BE every CPU.
    f.set_usage(10, 10, 0);
    assert_eq!(
        l.tick(t0 + Duration::from_millis(100), Some(&s), node),
        TickOutcome::WroteCpuset(8)
    );
    // besteffort recreated (empty cpuset.cpus, every CPU effective), then LS takes 7 cores:
    // BE must shrink now.
    kubelet_recreates_besteffort();
    f.set_usage(710, 710, 0);
    let out = l.tick(t0 + Duration::from_millis(200), Some(&s), node);
    assert!(matches!(out, TickOutcome::WroteCpuset(n) if n < 8), "{out:?}");
    let cpus = std::fs::read_to_string(&cpus_file).unwrap();
    assert_ne!(cpus.trim(), "", "BE narrowed");
}
