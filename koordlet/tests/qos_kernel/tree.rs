//! The test cgroup subtree, busy processes, measurement, and the node's real topology.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use koordlet_core::strategies::CgroupWrite;
use koordlet_core::strategies::cpu_suppress::CgroupState;
use koordlet_core::strategies::cpuset::{CpuInfo, CpuList};

/// CPU-measuring tests never overlap.
pub static CPU_LOCK: Mutex<()> = Mutex::new(());
static SEQ: AtomicU32 = AtomicU32::new(0);
pub const ROOT: &str = "/sys/fs/cgroup";

/// A test subtree in several v1 controllers plus the busy processes in it; drop kills the
/// processes, then removes the directories deepest first.
pub struct TestTree {
    name: String,
    controllers: Vec<&'static str>,
    dirs: Vec<String>,
    procs: Vec<Child>,
}

impl TestTree {
    pub fn new(controllers: &[&'static str]) -> Result<Self, String> {
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

    pub fn path(&self, controller: &str, rel: &str) -> PathBuf {
        let p = Path::new(ROOT).join(controller).join(&self.name);
        if rel.is_empty() { p } else { p.join(rel) }
    }

    /// The dir as a strategy names it (relative to the controller root).
    pub fn rel(&self, rel: &str) -> String {
        format!("{}/{rel}", self.name)
    }

    pub fn mkdir(&mut self, rel: &str) -> std::io::Result<()> {
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

    pub fn write(&self, controller: &str, rel: &str, file: &str, value: &str) -> std::io::Result<()> {
        fs::write(self.path(controller, rel).join(file), value)
    }

    /// Applies a plan's writes in order; `cgroup` is relative to the controller root.
    pub fn apply(&self, writes: &[CgroupWrite]) {
        for w in writes {
            let controller = if w.file().starts_with("cpuset.") {
                "cpuset"
            } else {
                "cpu"
            };
            let path = Path::new(ROOT)
                .join(controller)
                .join(w.cgroup.as_path())
                .join(w.file());
            fs::write(&path, w.value.to_string()).unwrap_or_else(|e| panic!("kernel rejected {w:?}: {e}"));
        }
    }

    pub fn spawn_burner(&mut self, rel: &str) -> u32 {
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

    pub fn cpuacct_ns(&self, rel: &str) -> u64 {
        fs::read_to_string(self.path("cpuacct", rel).join("cpuacct.usage"))
            .expect("cpuacct.usage")
            .trim()
            .parse()
            .expect("cpuacct.usage number")
    }

    /// Milli-cores used by `rel` over `window`.
    pub fn measure(&self, rels: &[&str], window: Duration) -> Vec<f64> {
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

pub fn setup(controllers: &[&'static str]) -> Option<TestTree> {
    match TestTree::new(controllers) {
        Ok(t) => Some(t),
        Err(reason) => {
            println!("skipped: {reason}");
            None
        }
    }
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

pub fn state(tree: &TestTree, rel: &str) -> CgroupState {
    let quota = fs::read_to_string(tree.path("cpu", rel).join("cpu.cfs_quota_us"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let cpuset = fs::read_to_string(tree.path("cpuset", rel).join("cpuset.cpus"))
        .ok()
        .and_then(|s| CpuList::parse(&s).ok());
    CgroupState {
        dir: koordlet::system::CgroupDir::new(tree.rel(rel)).unwrap(),
        cfs_quota_us: quota,
        cpuset,
    }
}
