//! The test cgroup subtree, busy processes, measurement, and the node's real topology.

use std::fs;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;
use std::time::Duration;

use koord_test_support::CgroupV1Tree;
use koordlet_core::strategies::CgroupWrite;
use koordlet_core::strategies::cpu_suppress::CgroupState;
use koordlet_core::strategies::cpuset::{CpuInfo, CpuList};

/// CPU-measuring tests never overlap.
pub static CPU_LOCK: Mutex<()> = Mutex::new(());
/// Where the host mounts its cgroup v1 controllers.
pub const ROOT: &str = "/sys/fs/cgroup";

/// koord-test-support's guard (busy processes killed, directories removed on drop, also on
/// panic) with what the QoS kernel tests add: plan writes applied as they are, usage in
/// milli-cores.
pub struct TestTree(CgroupV1Tree);

impl Deref for TestTree {
    type Target = CgroupV1Tree;
    fn deref(&self) -> &CgroupV1Tree {
        &self.0
    }
}

impl DerefMut for TestTree {
    fn deref_mut(&mut self) -> &mut CgroupV1Tree {
        &mut self.0
    }
}

impl TestTree {
    /// Applies a plan's writes in order; each names its cgroup relative to the controller root.
    pub fn apply(&self, writes: &[CgroupWrite]) {
        for w in writes {
            let controller = if w.file().starts_with("cpuset.") {
                "cpuset"
            } else {
                "cpu"
            };
            let root = self
                .mount(controller)
                .unwrap_or_else(|| panic!("the test tree has no {controller} controller"));
            let path = root.join(w.cgroup.as_path()).join(w.file());
            fs::write(&path, w.value.to_string()).unwrap_or_else(|e| panic!("kernel rejected {w:?}: {e}"));
        }
    }

    /// Starts a busy loop in `rel`; it is killed on drop.
    pub fn spawn_burner(&mut self, rel: &str) -> u32 {
        self.0
            .spawn_burner(rel)
            .expect("start a busy loop in the test cgroup")
    }

    /// `cpuacct.usage` of `rel`, in nanoseconds.
    pub fn cpuacct_ns(&self, rel: &str) -> u64 {
        self.cpu_usage_ns(rel).expect("cpuacct.usage")
    }

    /// Milli-cores used by each of `rels` over `window`.
    pub fn measure(&self, rels: &[&str], window: Duration) -> Vec<f64> {
        self.cpu_cores(rels, window)
            .expect("cpuacct.usage")
            .into_iter()
            .map(|cores| cores * 1000.0)
            .collect()
    }
}

/// The test tree in `controllers`, or `None` after printing `skipped: <reason>`.
pub fn setup(controllers: &[&str]) -> Option<TestTree> {
    CgroupV1Tree::or_skip(controllers).map(TestTree)
}

/// The real CPU topology from sysfs.
pub fn topology() -> Vec<CpuInfo> {
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

/// The values a strategy reads of `rel`: its quota and its cpuset (`None` where the tree lacks
/// the controller).
pub fn state(tree: &TestTree, rel: &str) -> CgroupState {
    let read = |controller: &str, file: &str| {
        tree.mount(controller)?;
        tree.read(controller, rel, file).ok()
    };
    CgroupState {
        dir: koordlet::system::CgroupDir::new(tree.rel(rel)).unwrap(),
        cfs_quota_us: read("cpu", "cpu.cfs_quota_us").and_then(|s| s.parse().ok()),
        cpuset: read("cpuset", "cpuset.cpus").and_then(|s| CpuList::parse(&s).ok()),
    }
}
