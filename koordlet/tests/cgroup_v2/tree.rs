//! A test subtree of the VM's unified hierarchy and the processes in it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use koordlet::system::CgroupDir;
use koordlet_core::strategies::cpuset::{CpuInfo, CpuList};

/// The VM's cgroup2 mount.
pub const ROOT: &str = "/sys/fs/cgroup";
/// What the VM's `/init` enables at the root and every test directory enables for its children.
pub const CONTROLLERS: &str = "+cpu +cpuset +memory +io +pids";
static SEQ: AtomicU32 = AtomicU32::new(0);

/// `<name>/...` below the cgroup2 root plus the processes started in it; drop kills the
/// processes, then removes the whole subtree deepest first.
pub struct V2Tree {
    /// The test's top directory, relative to the root.
    pub name: String,
    procs: Vec<Child>,
}

impl V2Tree {
    pub fn new(prefix: &str) -> Self {
        let name = format!("{prefix}-{}", SEQ.fetch_add(1, Ordering::SeqCst));
        let mut tree = V2Tree { name, procs: vec![] };
        tree.mkdir("");
        tree
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        let p = Path::new(ROOT).join(&self.name);
        if rel.is_empty() { p } else { p.join(rel) }
    }

    /// `rel` as koordlet names it (relative to the cgroup root).
    pub fn rel(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{rel}", self.name)
        }
    }

    pub fn dir(&self, rel: &str) -> CgroupDir {
        CgroupDir::new(self.rel(rel)).unwrap()
    }

    /// Creates every missing component of `rel`, enabling the controllers in each parent first
    /// (a v2 child only has a controller's files when its parent delegates it).
    pub fn mkdir(&mut self, rel: &str) {
        let mut path = Path::new(ROOT).join(&self.name);
        let parts: Vec<_> = Path::new(rel).components().collect();
        self.create(&path);
        for part in parts {
            enable_controllers(&path);
            path.push(part);
            self.create(&path);
        }
    }

    fn create(&mut self, path: &Path) {
        if !path.exists() {
            fs::create_dir(path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        }
    }

    pub fn write(&self, rel: &str, file: &str, value: &str) -> std::io::Result<()> {
        fs::write(self.path(rel).join(file), value)
    }

    pub fn read(&self, rel: &str, file: &str) -> String {
        let p = self.path(rel).join(file);
        fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
            .trim()
            .to_owned()
    }

    /// Starts `sh -c script` and moves it into `rel`.
    pub fn spawn(&mut self, rel: &str, script: &str) -> u32 {
        let child = Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn sh");
        let pid = child.id();
        self.procs.push(child);
        self.write(rel, "cgroup.procs", &pid.to_string())
            .expect("move the process");
        pid
    }

    pub fn spawn_burner(&mut self, rel: &str) -> u32 {
        self.spawn(rel, "while :; do :; done")
    }

    /// `usage_usec` of `cpu.stat`, straight from the kernel.
    pub fn usage_usec(&self, rel: &str) -> u64 {
        stat_field(&self.read(rel, "cpu.stat"), "usage_usec")
    }

    /// Cores used by `rel` over `window`.
    pub fn measure(&self, rel: &str, window: Duration) -> f64 {
        let start = self.usage_usec(rel);
        let t0 = Instant::now();
        sleep(window);
        let dt = t0.elapsed().as_micros() as f64;
        (self.usage_usec(rel) - start) as f64 / dt
    }

    /// Kills and reaps every process started so far.
    pub fn kill_all(&mut self) {
        for mut child in self.procs.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for V2Tree {
    fn drop(&mut self) {
        self.kill_all();
        // koord-test-support's removal: deepest first, waiting for killed tasks to leave.
        if let Err(e) = koord_test_support::cgroup::remove_tree(&self.path("")) {
            eprintln!("cleanup of the test cgroup failed: {e}");
        }
    }
}

pub fn enable_controllers(path: &Path) {
    if path != Path::new(ROOT) {
        fs::write(path.join("cgroup.subtree_control"), CONTROLLERS)
            .unwrap_or_else(|e| panic!("enable controllers in {}: {e}", path.display()));
    }
}

/// A `key value` line's value of a flat-keyed file (`cpu.stat`, `memory.events`).
pub fn stat_field(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("no {key} in {text:?}"))
}

/// The cgroup a process is in, from `/proc/<pid>/cgroup` (`0::/path`).
pub fn cgroup_of(pid: u32) -> String {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_else(|| panic!("no v2 line in {text:?}"))
        .to_owned()
}

/// `Cpus_allowed_list` of a process.
pub fn cpus_allowed(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(|v| v.trim().to_owned()))
        .unwrap()
}

/// The VM's online CPUs, each its own core on one socket and NUMA node (the VM's vCPUs have no
/// meaningful topology).
pub fn topology() -> Vec<CpuInfo> {
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    CpuList::parse(&online)
        .unwrap()
        .iter()
        .map(|cpu| CpuInfo {
            cpu,
            core: cpu,
            socket: 0,
            node: 0,
        })
        .collect()
}
