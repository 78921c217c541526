//! What the soak measures: a component's resident memory, open descriptors and threads from
//! `/proc/<pid>`, and the cgroup directories and tasks below a node's `kubepods` tree.

use std::path::Path;

/// One sampling instant of a soak run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// Seconds since churn started.
    pub seconds: f64,
    /// koordlet's process.
    pub koordlet: ProcessFootprint,
    /// koord-manager's process.
    pub manager: ProcessFootprint,
    /// Cgroup directories below the node's `kubepods` (one controller's view).
    pub cgroup_dirs: u64,
    /// Tasks (thread ids) in those cgroups: the pods' processes, none left behind.
    pub cgroup_tasks: u64,
    /// Pods the API server lists at that instant.
    pub pods: u64,
    /// The host's 1-minute load average (the machine is shared; read it with the figures).
    pub load1: f64,
}

/// One process's footprint.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessFootprint {
    /// Resident set size, bytes (`VmRSS`).
    pub rss_bytes: u64,
    /// Open file descriptors (entries of `/proc/<pid>/fd`): sockets, kept cgroup files, ...
    pub open_fds: u64,
    /// Threads (`Threads`): the tokio workers and blocking pool.
    pub threads: u64,
    /// What the process's own memory cgroup (v1) charged: user and kernel memory, its kept
    /// cgroup files' dentries and inodes among them. 0 where it runs in no cgroup of its own.
    pub cgroup_bytes: u64,
    /// The kernel-memory part of `cgroup_bytes` (`memory.kmem.usage_in_bytes`).
    pub kernel_bytes: u64,
}

impl ProcessFootprint {
    /// Reads `/proc/<pid>`; `None` when the process is gone.
    pub fn of(pid: u32) -> Option<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| -> Option<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        };
        let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
        Some(ProcessFootprint {
            rss_bytes: field("VmRSS:")? * 1024,
            open_fds,
            threads: field("Threads:")?,
            cgroup_bytes: 0,
            kernel_bytes: 0,
        })
    }

    /// Adds the charge of the process's own memory cgroup `dir` (left at 0 when unreadable).
    pub fn with_cgroup(mut self, dir: Option<&Path>) -> Self {
        if let Some(memory) = dir.and_then(|dir| koord_test_support::footprint::CgroupMemory::of(dir).ok()) {
            self.cgroup_bytes = memory.usage;
            self.kernel_bytes = memory.kernel;
        }
        self
    }
}

/// Counts the directories below `root` (itself included) and the task ids in their `tasks`
/// (cgroup v1) or `cgroup.threads` (v2) files. A directory that vanishes meanwhile (a pod
/// being torn down) is skipped.
pub fn count_cgroups(root: &Path) -> (u64, u64) {
    let mut dirs = 0;
    let mut tasks = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        dirs += 1;
        for name in ["tasks", "cgroup.threads"] {
            if let Ok(text) = std::fs::read_to_string(dir.join(name)) {
                tasks += text.lines().filter(|l| !l.trim().is_empty()).count() as u64;
                break;
            }
        }
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    (dirs, tasks)
}

/// The host's 1-minute load average, 0 when unreadable.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = ProcessFootprint::of(std::process::id()).unwrap();
        assert!(me.rss_bytes > 1 << 20, "{me:?}");
        assert!(me.open_fds >= 3, "{me:?}");
        assert!(me.threads >= 1, "{me:?}");
        assert_eq!(ProcessFootprint::of(u32::MAX), None);
    }

    #[test]
    fn counts_directories_and_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let pod = dir.path().join("kubepods/pod1/c1");
        std::fs::create_dir_all(&pod).unwrap();
        std::fs::write(dir.path().join("kubepods/tasks"), "").unwrap();
        std::fs::write(pod.join("tasks"), "10\n11\n").unwrap();
        std::fs::write(dir.path().join("kubepods/pod1/cgroup.threads"), "12\n").unwrap();
        assert_eq!(count_cgroups(&dir.path().join("kubepods")), (3, 3));
        assert_eq!(count_cgroups(&dir.path().join("absent")), (0, 0));
    }
}
