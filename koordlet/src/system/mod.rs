//! The node's kernel interfaces: cgroup v1/v2 (auto-detected), cgroupfs and systemd drivers, and
//! the `/proc` files koordlet reads.
//!
//! Every root is a parameter ([`SystemRoots`]), so the same code runs against the real host, a
//! DaemonSet's host mounts (`/host-cgroup`, ...) or a fake tree in a temp dir. Nothing here keeps
//! global state: a [`Cgroups`] value owns the detected layout and its caches. The one exception
//! is the budget of kept-open cgroup files ([`FdBudget::process`]): the fd limit it is carved
//! from is per process.
//!
//! Map of the module:
//! - [`layout`]: which cgroup version is mounted where (mount table first, directory heuristic second).
//! - [`kube_paths`]: Kubernetes QoS / pod / container cgroup directories for both drivers.
//! - [`resource`]: the one table of cgroup files (v1 name, v2 name, value domain, conversion).
//! - [`cgroupfs`]: reading and validated writing of those files, with the cached "supported?" probe.
//! - [`resctrl`]: resctrl support detection, mount, facts, group schemata and tasks.
//! - [`cpu_qos`]: which CPU QoS files (`cpu.idle`, `cpu.bvt_warp_ns`) the kernel has.
//! - [`core_sched`]: core-scheduling cookies (`prctl(PR_SCHED_CORE)`) for a pod's threads.
//! - [`cpu_info`]: the CPU facts of CPU normalization (model, vendor, hyper-threading, turbo).
//! - [`numa`]: NUMA nodes (CPUs, memory) from sysfs and a cgroup's memory per NUMA node.
//! - [`cpuset`], [`cgroup_stats`], [`proc_stat`], [`meminfo`], [`psi`]: parsers that never panic.

pub mod cgroup_file;
pub mod cgroup_stats;
pub mod cgroupfs;
pub mod confine;
pub mod core_sched;
pub mod cpu_info;
pub mod cpu_qos;
mod error;
pub mod layout;
pub mod meminfo;
pub mod numa;
pub mod proc_stat;
pub mod psi;
pub mod resctrl;

use std::path::{Path, PathBuf};

pub use cgroup_file::{CgroupFile, FdBudget};
pub use cgroupfs::Cgroups;
pub use error::{NameError, ParseError, SystemError};
pub use layout::{CgroupLayout, CgroupMode, detect_driver};
// The pure vocabulary (paths, the resource table, CPU lists) lives in koordlet-core; the system
// layer speaks it and hands it on, so callers name one type wherever they meet it.
pub use koordlet_core::paths::{
    CgroupDir, CgroupDriver, ContainerId, ContainerRuntime, KUBE_QOS_CLASSES, KubeCgroupPaths, PodUid,
};
pub use koordlet_core::resource::{CgroupResource, CgroupValue, CgroupVersion, Domain, Subsystem};
pub use koordlet_core::{cpuset, cpuset::CpuSet, paths as kube_paths, resource};

/// Where the host's kernel interfaces are mounted. Upstream's DaemonSet mounts them under
/// `/host-cgroup`, `/host-sys`, ...; tests point them at a temp dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemRoots {
    /// cgroup mount root, `/sys/fs/cgroup` on a host.
    pub cgroup: PathBuf,
    /// procfs root, `/proc`.
    pub proc: PathBuf,
    /// sysfs root, `/sys`.
    pub sys: PathBuf,
    /// resctrl mount, `/sys/fs/resctrl`.
    pub resctrl: PathBuf,
}

impl Default for SystemRoots {
    fn default() -> Self {
        Self {
            cgroup: PathBuf::from("/sys/fs/cgroup"),
            proc: PathBuf::from("/proc"),
            sys: PathBuf::from("/sys"),
            resctrl: PathBuf::from("/sys/fs/resctrl"),
        }
    }
}

impl SystemRoots {
    /// All four roots below one directory (`<base>/sys/fs/cgroup`, `<base>/proc`, ...), the shape
    /// a fake host in a temp dir takes.
    pub fn under(base: &Path) -> Self {
        Self {
            cgroup: base.join("sys/fs/cgroup"),
            proc: base.join("proc"),
            sys: base.join("sys"),
            resctrl: base.join("sys/fs/resctrl"),
        }
    }

    /// A file below the proc root, e.g. `proc_file("meminfo")`.
    pub fn proc_file(&self, rel: &str) -> PathBuf {
        self.proc.join(rel)
    }
}

/// Reads a whole file as text (lossy: kernel files are ASCII, garbage becomes U+FFFD and then
/// fails to parse with a clear error instead of an I/O error).
pub(crate) fn read_text(path: &Path) -> Result<String, SystemError> {
    std::fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(|source| SystemError::Io {
            path: path.to_path_buf(),
            source,
        })
}
