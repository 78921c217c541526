//! Tier 3: the QoS decisions applied to real cgroups (v1 controllers) with real busy processes.
//! Each test builds its own `koord-test-<pid>-<n>` subtree, applies the plan's writes in plan
//! order (a failing write fails the test: the order is part of the contract), measures with
//! cpuacct, and removes everything on drop, also on panic. Without root or cgroup v1 it prints
//! `skipped: <reason>` and passes.

// Test harness helpers live outside `#[test]` fns, where clippy's test allowances do not reach.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use koord_api::nodeslo::{CpuBurstPolicy, CpuSuppressPolicy, ResourceThresholdStrategy};
use koordlet::qos::cpu_burst::{
    self, BurstContainer, BurstInput, BurstParams, BurstPod, BurstState, SharePool,
};
use koordlet::qos::cpu_suppress::{
    self, BeCgroups, BePodCgroups, CgroupState, CpuPools, CpuUsage, SuppressInput,
};
use koordlet::qos::cpuset::{CpuInfo, CpuList};
use koordlet::qos::{CgroupWrite, QosClass};

/// CPU-measuring tests never overlap.
static CPU_LOCK: Mutex<()> = Mutex::new(());
static SEQ: AtomicU32 = AtomicU32::new(0);
const ROOT: &str = "/sys/fs/cgroup";

/// A test subtree in several v1 controllers plus the busy processes in it; drop kills the
/// processes, then removes the directories deepest first.
struct TestTree {
    name: String,
    controllers: Vec<&'static str>,
    dirs: Vec<String>,
    procs: Vec<Child>,
}

impl TestTree {
    fn new(controllers: &[&'static str]) -> Result<Self, String> {
        if !Path::new(ROOT).join("cpu/cpu.cfs_quota_us").exists() {
            return Err("no cgroup v1 cpu controller at /sys/fs/cgroup/cpu".into());
        }
        let name = format!(
            "koord-test-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let mut tree = TestTree {
            name,
            controllers: controllers.to_vec(),
            dirs: vec![],
            procs: vec![],
        };
        tree.mkdir("")
            .map_err(|e| format!("cannot create a test cgroup (not root?): {e}"))?;
        Ok(tree)
    }

    fn path(&self, controller: &str, rel: &str) -> PathBuf {
        let p = Path::new(ROOT).join(controller).join(&self.name);
        if rel.is_empty() { p } else { p.join(rel) }
    }

    /// The dir as a strategy names it (relative to the controller root).
    fn rel(&self, rel: &str) -> String {
        format!("{}/{rel}", self.name)
    }

    fn mkdir(&mut self, rel: &str) -> std::io::Result<()> {
        for c in self.controllers.clone() {
            let p = self.path(c, rel);
            fs::create_dir(&p)?;
            if c == "cpuset" {
                // A v1 cpuset needs CPUs and memory nodes before it can hold tasks.
                let parent = p.parent().map(Path::to_path_buf).unwrap_or_default();
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = fs::read_to_string(parent.join(f))?;
                    fs::write(p.join(f), v.trim())?;
                }
            }
        }
        self.dirs.push(rel.to_owned());
        Ok(())
    }

    fn write(&self, controller: &str, rel: &str, file: &str, value: &str) -> std::io::Result<()> {
        fs::write(self.path(controller, rel).join(file), value)
    }

    /// Applies a plan's writes in order; `cgroup` is relative to the controller root.
    fn apply(&self, writes: &[CgroupWrite]) {
        for w in writes {
            let controller = if w.file.starts_with("cpuset.") {
                "cpuset"
            } else {
                "cpu"
            };
            let path = Path::new(ROOT).join(controller).join(&w.cgroup).join(w.file);
            fs::write(&path, &w.value).unwrap_or_else(|e| panic!("kernel rejected {w:?}: {e}"));
        }
    }

    fn spawn_burner(&mut self, rel: &str) -> u32 {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sh");
        let pid = child.id();
        self.procs.push(child);
        for c in self.controllers.clone() {
            self.write(c, rel, "cgroup.procs", &pid.to_string())
                .expect("move burner");
        }
        pid
    }

    fn cpuacct_ns(&self, rel: &str) -> u64 {
        fs::read_to_string(self.path("cpuacct", rel).join("cpuacct.usage"))
            .expect("cpuacct.usage")
            .trim()
            .parse()
            .expect("cpuacct.usage number")
    }

    /// Milli-cores used by `rel` over `window`.
    fn measure(&self, rels: &[&str], window: Duration) -> Vec<f64> {
        let start: Vec<u64> = rels.iter().map(|r| self.cpuacct_ns(r)).collect();
        let t0 = Instant::now();
        sleep(window);
        let dt = t0.elapsed().as_nanos() as f64;
        rels.iter()
            .zip(start)
            .map(|(r, s)| (self.cpuacct_ns(r) - s) as f64 / dt * 1000.0)
            .collect()
    }
}

impl Drop for TestTree {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
        for c in &self.controllers {
            for rel in self.dirs.iter().rev() {
                let _ = fs::remove_dir(self.path(c, rel));
            }
        }
    }
}

fn setup(controllers: &[&'static str]) -> Option<TestTree> {
    match TestTree::new(controllers) {
        Ok(t) => Some(t),
        Err(reason) => {
            println!("skipped: {reason}");
            None
        }
    }
}

/// The real CPU topology from sysfs.
fn topology() -> Vec<CpuInfo> {
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let read = |p: String| {
        fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
    };
    let mut node_of = std::collections::BTreeMap::new();
    for n in 0..64u32 {
        if let Ok(list) = fs::read_to_string(format!("/sys/devices/system/node/node{n}/cpulist"))
            && let Ok(l) = CpuList::parse(&list)
        {
            for cpu in l.iter() {
                node_of.insert(cpu, n);
            }
        }
    }
    CpuList::parse(&online)
        .unwrap_or_default()
        .iter()
        .map(|cpu| CpuInfo {
            cpu,
            core: read(format!("/sys/devices/system/cpu/cpu{cpu}/topology/core_id")).unwrap_or(cpu),
            socket: read(format!(
                "/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id"
            ))
            .unwrap_or(0),
            node: node_of.get(&cpu).copied().unwrap_or(0),
        })
        .collect()
}

fn state(tree: &TestTree, rel: &str) -> CgroupState {
    let quota = fs::read_to_string(tree.path("cpu", rel).join("cpu.cfs_quota_us"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let cpuset = fs::read_to_string(tree.path("cpuset", rel).join("cpuset.cpus"))
        .ok()
        .and_then(|s| CpuList::parse(&s).ok());
    CgroupState {
        dir: tree.rel(rel),
        cfs_quota_us: quota,
        cpuset,
    }
}

#[test]
fn cfs_quota_suppress_holds_be_to_the_computed_share() {
    let _lock = CPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut tree) = setup(&["cpu", "cpuacct"]) else {
        return;
    };
    // Win against the other work on this shared machine so the figures are the quota's.
    let _ = tree.write("cpu", "", "cpu.shares", "262144");
    for d in ["kubepods", "kubepods/ls", "kubepods/besteffort"] {
        tree.mkdir(d).expect("mkdir");
    }
    tree.spawn_burner("kubepods/ls");
    tree.spawn_burner("kubepods/besteffort");
    tree.spawn_burner("kubepods/besteffort");
    let before = tree.measure(
        &["kubepods/ls", "kubepods/besteffort"],
        Duration::from_millis(1500),
    );

    let cpus = topology();
    let capacity = cpus.len() as i64 * 1000;
    // LS uses one core; threshold chosen so the BE budget is 40 % of a core.
    let threshold = (1000 + 400) * 100 / capacity;
    let s = ResourceThresholdStrategy {
        enable: Some(true),
        cpu_suppress_threshold_percent: Some(threshold),
        cpu_suppress_policy: Some(CpuSuppressPolicy::CfsQuota),
        ..Default::default()
    };
    let cgroups = BeCgroups {
        besteffort: state(&tree, "kubepods/besteffort"),
        pods: vec![],
    };
    let pools = CpuPools::default(); // topology unknown: cpuset left alone
    let plan = cpu_suppress::decide(&SuppressInput {
        strategy: &s,
        capacity_milli: capacity,
        reserved_milli: 0,
        node_usage_milli: 1000,
        pods: &[CpuUsage {
            be: false,
            usage_milli: 1000,
        }],
        host_apps: &[],
        cgroups: &cgroups,
        cpus: &pools,
    });
    let budget = plan.budget.expect("budget").budget_milli.clamp(0, capacity) as f64;
    let quota = plan
        .quota
        .as_ref()
        .and_then(|q| q.written_us)
        .expect("quota written");
    tree.apply(&plan.writes);
    sleep(Duration::from_millis(300));
    let mut best = (f64::MAX, 0.0, 0.0);
    for _ in 0..3 {
        let m = tree.measure(
            &["kubepods/ls", "kubepods/besteffort"],
            Duration::from_millis(2000),
        );
        let err = (m[1] - budget).abs() / budget;
        if err < best.0 {
            best = (err, m[0], m[1]);
        }
        if err <= 0.15 {
            break;
        }
    }
    let (err, ls, be) = best;
    println!(
        "cfsQuota suppress: budget {budget:.0}m quota {quota}us; before BE {:.0}m LS {:.0}m; \
         suppressed BE {be:.0}m ({:.1}% off) LS {ls:.0}m",
        before[1],
        before[0],
        err * 100.0
    );
    assert!(err <= 0.15, "BE used {be:.0}m, budget {budget:.0}m");
    assert!(
        before[1] > be * 1.5,
        "BE was not limited before: {:.0}m vs {be:.0}m",
        before[1]
    );
    assert!(
        ls >= 0.8 * before[0].min(1000.0),
        "LS lost CPU: {ls:.0}m vs {:.0}m before",
        before[0]
    );
}

#[test]
fn cpuset_suppress_confines_be_processes_to_the_chosen_cpus() {
    let _lock = CPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut tree) = setup(&["cpu", "cpuacct", "cpuset"]) else {
        return;
    };
    if !Path::new(ROOT).join("cpuset/cpuset.cpus").exists() {
        println!("skipped: no cgroup v1 cpuset controller");
        return;
    }
    for d in [
        "kubepods",
        "kubepods/besteffort",
        "kubepods/besteffort/poda",
        "kubepods/besteffort/poda/c1",
    ] {
        tree.mkdir(d).expect("mkdir");
    }
    let pid = tree.spawn_burner("kubepods/besteffort/poda/c1");
    let cpus = topology();
    let all = CpuList::from_cpus(cpus.iter().map(|c| c.cpu));
    let Some(first) = all.iter().next() else {
        println!("skipped: CPU topology unreadable");
        return;
    };
    // Reserve every CPU but the first: the plan may only hand out that one.
    let pools = CpuPools {
        topology: cpus.clone(),
        reserved: all.difference(&CpuList::from_cpus([first])),
        ..Default::default()
    };
    let read_tree = |tree: &TestTree| BeCgroups {
        besteffort: state(tree, "kubepods/besteffort"),
        pods: vec![BePodCgroups {
            pod: state(tree, "kubepods/besteffort/poda"),
            containers: vec![state(tree, "kubepods/besteffort/poda/c1")],
        }],
    };
    let mut s = ResourceThresholdStrategy {
        enable: Some(true),
        cpu_suppress_policy: Some(CpuSuppressPolicy::Cpuset),
        ..Default::default()
    };
    let decide = |s: &ResourceThresholdStrategy, cg: &BeCgroups| {
        cpu_suppress::decide(&SuppressInput {
            strategy: s,
            capacity_milli: all.len() as i64 * 1000,
            reserved_milli: 0,
            node_usage_milli: 0,
            pods: &[],
            host_apps: &[],
            cgroups: cg,
            cpus: &pools,
        })
    };
    let plan = decide(&s, &read_tree(&tree));
    assert_eq!(
        plan.cpuset.as_ref().map(|d| d.cpus.clone()),
        Some(first.to_string())
    );
    tree.apply(&plan.writes);
    let allowed = |pid: u32| {
        fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(|v| v.trim().to_owned()))
            .unwrap()
    };
    assert_eq!(allowed(pid), first.to_string());
    // Disabled: BE gets back every CPU that is not reserved/LSE, parents widened first.
    s.enable = Some(false);
    let pools_full = CpuPools {
        reserved: CpuList::default(),
        ..pools.clone()
    };
    let plan = cpu_suppress::decide(&SuppressInput {
        strategy: &s,
        capacity_milli: all.len() as i64 * 1000,
        reserved_milli: 0,
        node_usage_milli: 0,
        pods: &[],
        host_apps: &[],
        cgroups: &read_tree(&tree),
        cpus: &pools_full,
    });
    tree.apply(&plan.writes);
    assert_eq!(allowed(pid), all.to_string());
    println!("cpuset suppress: BE pinned to {first}, then restored to {all}");
}

#[test]
fn burst_values_are_accepted_by_the_kernel() {
    let Some(mut tree) = setup(&["cpu"]) else { return };
    for d in ["pod", "pod/c1"] {
        tree.mkdir(d).expect("mkdir");
    }
    if !tree.path("cpu", "pod").join("cpu.cfs_burst_us").exists() {
        println!("skipped: kernel without cpu.cfs_burst_us");
        return;
    }
    for d in ["pod", "pod/c1"] {
        tree.write("cpu", d, "cpu.cfs_quota_us", "200000").expect("quota");
    }
    let read = |rel: &str, f: &str| -> Option<i64> {
        fs::read_to_string(tree.path("cpu", rel).join(f))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    };
    let mut state = BurstState::default();
    // Throttled on an idle pool → scale up three rounds, then an overloaded pool → down.
    for (round, node_usage) in [0.0, 0.0, 0.0, 1e9, 1e9].into_iter().enumerate() {
        let pod = BurstPod {
            namespace: "ns".into(),
            name: "p".into(),
            qos: QosClass::Ls,
            active: true,
            cgroup: tree.rel("pod"),
            cfs_quota_us: read("pod", "cpu.cfs_quota_us"),
            cfs_burst_us: read("pod", "cpu.cfs_burst_us"),
            config: BurstParams {
                policy: CpuBurstPolicy::Auto,
                cpu_burst_percent: 1000,
                cfs_quota_burst_percent: 300,
                cfs_quota_burst_period_seconds: -1,
            },
            config_source: "node".into(),
            containers: vec![BurstContainer {
                id: "c1".into(),
                cgroup: tree.rel("pod/c1"),
                cpu_limit_milli: Some(2000),
                cfs_quota_us: read("pod/c1", "cpu.cfs_quota_us"),
                cfs_burst_us: read("pod/c1", "cpu.cfs_burst_us"),
                throttled_ratio: Some(0.5),
                usage_milli: Some(2000.0),
            }],
        };
        let plan = cpu_burst::decide(&BurstInput {
            share_pool_threshold_percent: 50,
            share_pool: SharePool {
                processors: 2,
                lse_lsr_request_milli: 0,
                node_usage_milli: Some(node_usage),
                lse_lsr_be_usage_milli: Some(0.0),
            },
            pods: &[pod],
            now_seconds: round as f64,
            state: &state,
        });
        tree.apply(&plan.writes);
        state = plan.next_state;
        let (q, b) = (
            read("pod/c1", "cpu.cfs_quota_us").unwrap(),
            read("pod/c1", "cpu.cfs_burst_us").unwrap(),
        );
        println!(
            "burst round {round}: container quota {q} burst {b} ({} writes)",
            plan.writes.len()
        );
        assert!(b <= q && b > 0, "burst {b} quota {q}");
    }
    // What the ordering protects against: the kernel refuses a burst above the quota.
    let q = read("pod/c1", "cpu.cfs_quota_us").unwrap();
    let refused = tree.write("cpu", "pod/c1", "cpu.cfs_burst_us", &(q + 1).to_string());
    assert!(refused.is_err(), "kernel accepted burst {} over quota {q}", q + 1);
}
