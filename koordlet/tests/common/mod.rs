//! Shared fixtures: a fake host (cgroupfs v1 or v2, either driver, a mount table) in a temp
//! dir, and a tracing capture to assert on log lines; [`kernel`] has what the real-kernel QoS
//! tests share, [`cluster`] what the embedded-cluster tests share.
#![allow(dead_code)]

pub mod cluster;
pub mod kernel;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use koordlet::system::{CgroupDriver, CgroupVersion, ContainerId, KubeCgroupPaths, PodUid, SystemRoots};

pub const POD_UID: &str = "11111111-2222-3333-4444-555555555555";
pub const CONTAINER: &str = "containerd://0123456789abcdef";

/// A fake node below a temp dir.
pub struct FakeHost {
    pub dir: tempfile::TempDir,
    pub roots: SystemRoots,
    pub version: CgroupVersion,
    pub paths: KubeCgroupPaths,
}

const V1_CONTROLLERS: [&str; 4] = ["cpu", "cpuacct", "cpuset", "memory"];

impl FakeHost {
    /// A host with the kubepods tree (every QoS level, one pod per class, one container each).
    pub fn new(version: CgroupVersion, driver: CgroupDriver) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let roots = SystemRoots::under(dir.path());
        std::fs::create_dir_all(&roots.cgroup).unwrap();
        std::fs::create_dir_all(roots.proc.join("self")).unwrap();
        let cg = roots.cgroup.display().to_string();
        let mountinfo = match version {
            CgroupVersion::V2 => {
                std::fs::write(
                    roots.cgroup.join("cgroup.controllers"),
                    "cpuset cpu io memory pids\n",
                )
                .unwrap();
                format!("29 23 0:26 / {cg} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
            }
            CgroupVersion::V1 => {
                let mut m = format!("31 23 0:28 / {cg} rw - tmpfs tmpfs rw,mode=755\n");
                for (i, c) in V1_CONTROLLERS.iter().enumerate() {
                    std::fs::create_dir_all(roots.cgroup.join(c)).unwrap();
                    m.push_str(&format!(
                        "{} 31 0:{} / {cg}/{c} rw,relatime - cgroup cgroup rw,{c}\n",
                        32 + i,
                        29 + i
                    ));
                }
                m
            }
        };
        std::fs::write(roots.proc.join("self/mountinfo"), mountinfo).unwrap();
        let host = Self {
            dir,
            roots,
            version,
            paths: KubeCgroupPaths::new(driver),
        };
        host.add_cgroup(Path::new(""));
        host.add_cgroup(host.paths.kubepods_dir().as_path());
        for qos in koordlet::system::KUBE_QOS_CLASSES {
            host.add_cgroup(host.paths.qos_dir(qos).as_path());
            host.add_cgroup(host.paths.pod_dir(qos, &uid()).as_path());
            host.add_cgroup(host.paths.container_dir(qos, &uid(), &cid()).as_path());
        }
        host
    }

    /// Creates one cgroup directory with every file a fresh kernel cgroup has (minus `cpu.idle`,
    /// which the tests use as "unsupported").
    pub fn add_cgroup(&self, rel: &Path) {
        let cg = &self.roots.cgroup;
        match self.version {
            CgroupVersion::V1 => {
                let files: [(&str, &str, &str); 11] = [
                    ("cpu", "cpu.shares", "1024\n"),
                    ("cpu", "cpu.cfs_quota_us", "-1\n"),
                    ("cpu", "cpu.cfs_period_us", "100000\n"),
                    ("cpu", "cpu.cfs_burst_us", "0\n"),
                    (
                        "cpu",
                        "cpu.stat",
                        "nr_periods 10\nnr_throttled 2\nthrottled_time 3000\n",
                    ),
                    ("cpuacct", "cpuacct.usage", "5000000000\n"),
                    ("cpuset", "cpuset.cpus", "0-3\n"),
                    ("cpuset", "cpuset.effective_cpus", "0-3\n"),
                    ("memory", "memory.limit_in_bytes", "9223372036854771712\n"),
                    ("memory", "memory.usage_in_bytes", "1048576\n"),
                    (
                        "memory",
                        "memory.stat",
                        "total_inactive_anon 1\ntotal_active_anon 2\ntotal_inactive_file 3\ntotal_active_file 4\ntotal_unevictable 5\ninactive_anon 0\nactive_anon 0\ninactive_file 0\nactive_file 0\nunevictable 0\n",
                    ),
                ];
                for (sub, file, content) in files {
                    let d = cg.join(sub).join(rel);
                    std::fs::create_dir_all(&d).unwrap();
                    std::fs::write(d.join(file), content).unwrap();
                }
            }
            CgroupVersion::V2 => {
                let d = cg.join(rel);
                std::fs::create_dir_all(&d).unwrap();
                for (file, content) in [
                    ("cpu.weight", "100\n"),
                    ("cpu.max", "max 100000\n"),
                    ("cpu.max.burst", "0\n"),
                    (
                        "cpu.stat",
                        "usage_usec 5000000\nuser_usec 4000000\nsystem_usec 1000000\nnr_periods 10\nnr_throttled 2\nthrottled_usec 3\n",
                    ),
                    ("cpuset.cpus", "\n"),
                    ("cpuset.cpus.effective", "0-3\n"),
                    ("memory.max", "max\n"),
                    ("memory.current", "1048576\n"),
                    (
                        "memory.stat",
                        "anon 3\nfile 7\ninactive_anon 1\nactive_anon 2\ninactive_file 3\nactive_file 4\nunevictable 5\n",
                    ),
                    (
                        "cpu.pressure",
                        "some avg10=1.00 avg60=0.50 avg300=0.10 total=100\nfull avg10=0.50 avg60=0.20 avg300=0.05 total=50\n",
                    ),
                ] {
                    std::fs::write(d.join(file), content).unwrap();
                }
            }
        }
    }

    /// The absolute path of a file of `rel` (v1: below `controller`).
    pub fn file(&self, controller: &str, rel: &Path, file: &str) -> PathBuf {
        match self.version {
            CgroupVersion::V1 => self.roots.cgroup.join(controller).join(rel).join(file),
            CgroupVersion::V2 => self.roots.cgroup.join(rel).join(file),
        }
    }

    /// The trimmed content of a file.
    pub fn read(&self, controller: &str, rel: &Path, file: &str) -> String {
        std::fs::read_to_string(self.file(controller, rel, file))
            .unwrap()
            .trim()
            .to_owned()
    }
}

pub fn uid() -> PodUid {
    PodUid::new(POD_UID).unwrap()
}

pub fn cid() -> ContainerId {
    ContainerId::parse(CONTAINER).unwrap()
}

/// Captured log output.
///
/// One process-wide subscriber writes every event into the capture of the thread that emitted
/// it (or nowhere). A scoped subscriber per test (`with_default`) would race with tests on other
/// threads that hit the same callsite first: tracing caches a callsite's interest, and a
/// registration that overlaps the scoped subscriber's creation can leave it disabled, so the
/// capture stays empty.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static CURRENT: std::cell::RefCell<Option<LogCapture>> = const { std::cell::RefCell::new(None) };
}

/// Writes into the current thread's capture, if any.
struct ThreadCapture;

impl Write for ThreadCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CURRENT.with(|c| {
            if let Some(capture) = c.borrow().as_ref() {
                capture.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn install_global_subscriber() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| ThreadCapture)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber in tests");
    });
}

impl LogCapture {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Runs `f` with this thread's log lines written into this capture.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        install_global_subscriber();
        struct Restore(Option<LogCapture>);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| *c.borrow_mut() = self.0.take());
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.borrow_mut().replace(self.clone())));
        f()
    }
}

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
