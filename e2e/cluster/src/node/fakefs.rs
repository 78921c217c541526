//! The fake cgroupfs: plain files laid out like cgroup v1, with usage simulated from the real
//! processes' CPU time and resident memory.
//!
//! Used where real cgroups are not writable. Container processes still run (they just are not
//! confined), and after every sample `cpuacct.usage`, `cpuacct.stat`, `memory.usage_in_bytes`
//! and `memory.stat` of each container, pod, QoS level and `kubepods` hold what a kernel would
//! report: CPU is cumulative (never decreases, also when a pod leaves), memory is current.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// A fake cgroup file or directory could not be written.
#[derive(Debug, Error)]
#[error("{op} {path}: {source}")]
pub struct FakeFsError {
    /// What was attempted.
    pub op: &'static str,
    /// On which path.
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FakeFsError + 'a {
    move |source| FakeFsError {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Initial content of the files each fake controller directory gets.
fn initial_files(controller: &str) -> Vec<(&'static str, String)> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut files = vec![("cgroup.procs", String::new()), ("tasks", String::new())];
    match controller {
        "cpu" => files.extend([
            ("cpu.shares", "1024\n".to_string()),
            ("cpu.cfs_quota_us", "-1\n".to_string()),
            ("cpu.cfs_period_us", "100000\n".to_string()),
            ("cpu.cfs_burst_us", "0\n".to_string()),
            (
                "cpu.stat",
                "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n".to_string(),
            ),
        ]),
        "cpuacct" => files.extend([
            ("cpuacct.usage", "0\n".to_string()),
            ("cpuacct.stat", "user 0\nsystem 0\n".to_string()),
        ]),
        "cpuset" => files.extend([
            (
                "cpuset.cpus",
                if cpus > 1 {
                    format!("0-{}\n", cpus - 1)
                } else {
                    "0\n".to_string()
                },
            ),
            ("cpuset.mems", "0\n".to_string()),
        ]),
        "memory" => files.extend([
            ("memory.limit_in_bytes", "9223372036854771712\n".to_string()),
            ("memory.usage_in_bytes", "0\n".to_string()),
            ("memory.stat", memory_stat(0)),
        ]),
        _ => {}
    }
    files
}

fn memory_stat(rss: u64) -> String {
    format!(
        "cache 0\nrss {rss}\nrss_huge 0\nmapped_file 0\nswap 0\ninactive_anon 0\nactive_anon {rss}\ninactive_file 0\nactive_file 0\n\
         total_cache 0\ntotal_rss {rss}\ntotal_rss_huge 0\ntotal_mapped_file 0\ntotal_swap 0\ntotal_inactive_anon 0\n\
         total_active_anon {rss}\ntotal_inactive_file 0\ntotal_active_file 0\n"
    )
}

/// Creates one fake cgroup directory with its controller's files (kept if already there).
pub(crate) fn create_dir(dir: &Path, controller: &str) -> Result<(), FakeFsError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(io_err("mkdir", dir))?;
    for (name, content) in initial_files(controller) {
        let path = dir.join(name);
        fs::write(&path, content).map_err(io_err("write", &path))?;
    }
    Ok(())
}

/// Records `pid` in the fake directory's `cgroup.procs` and `tasks`.
pub(crate) fn add_task(dir: &Path, pid: u32) -> Result<(), FakeFsError> {
    for name in ["cgroup.procs", "tasks"] {
        let path = dir.join(name);
        let mut file = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io_err("open", &path))?;
        writeln!(file, "{pid}").map_err(io_err("write", &path))?;
    }
    Ok(())
}

/// One container's measured usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContainerUsage {
    /// Cumulative CPU time of its processes (user + system), ns.
    pub cpu_ns: u64,
    /// Current resident memory of its processes, bytes.
    pub rss_bytes: u64,
}

/// Per-node accounting state of the fake: cumulative CPU of every directory, last sample of
/// every container.
#[derive(Debug, Default)]
pub struct FakeAccounting {
    cpu_ns: BTreeMap<String, u64>,
    last: BTreeMap<String, u64>,
}

impl FakeAccounting {
    /// Folds a sample (container cgroup path → usage) into per-directory totals; returns
    /// directory → (cumulative cpu ns, current rss) for the container, its ancestors and every
    /// directory seen before (whose memory drops to what is still below it).
    pub fn fold(&mut self, sample: &BTreeMap<String, ContainerUsage>) -> BTreeMap<String, (u64, u64)> {
        let mut rss: BTreeMap<String, u64> = self.cpu_ns.keys().map(|k| (k.clone(), 0)).collect();
        for (container, usage) in sample {
            let previous = self.last.insert(container.clone(), usage.cpu_ns).unwrap_or(0);
            let delta = usage.cpu_ns.saturating_sub(previous);
            for dir in ancestors(container) {
                *self.cpu_ns.entry(dir.clone()).or_default() += delta;
                *rss.entry(dir).or_default() += usage.rss_bytes;
            }
        }
        self.last.retain(|container, _| sample.contains_key(container));
        self.cpu_ns.retain(|dir, _| rss.contains_key(dir));
        rss.into_iter()
            .map(|(dir, mem)| (dir.clone(), (self.cpu_ns.get(&dir).copied().unwrap_or(0), mem)))
            .collect()
    }

    /// Forgets a removed directory and everything below it (its CPU stays in the ancestors).
    pub fn forget(&mut self, relative: &str) {
        let prefix = format!("{relative}/");
        self.cpu_ns
            .retain(|dir, _| dir != relative && !dir.starts_with(&prefix));
        self.last
            .retain(|dir, _| dir != relative && !dir.starts_with(&prefix));
    }

    /// Folds a sample and writes the usage files of every directory below `cgroup_root` (a
    /// fake node's koordlet root: `<root>/<controller>/<dir>`).
    pub fn write(
        &mut self,
        cgroup_root: &Path,
        sample: &BTreeMap<String, ContainerUsage>,
    ) -> Result<(), FakeFsError> {
        for (dir, (cpu_ns, rss)) in self.fold(sample) {
            let cpuacct = cgroup_root.join("cpuacct").join(&dir);
            let memory = cgroup_root.join("memory").join(&dir);
            if !cpuacct.is_dir() {
                continue; // removed meanwhile
            }
            // USER_HZ is 100 on Linux: one tick is 10 ms.
            let ticks = cpu_ns / 10_000_000;
            write(&cpuacct.join("cpuacct.usage"), &format!("{cpu_ns}\n"))?;
            write(
                &cpuacct.join("cpuacct.stat"),
                &format!("user {ticks}\nsystem 0\n"),
            )?;
            write(&memory.join("memory.usage_in_bytes"), &format!("{rss}\n"))?;
            write(&memory.join("memory.stat"), &memory_stat(rss))?;
        }
        Ok(())
    }
}

fn write(path: &Path, content: &str) -> Result<(), FakeFsError> {
    fs::write(path, content).map_err(io_err("write", path))
}

/// `a/b/c` → `a`, `a/b`, `a/b/c`.
fn ancestors(relative: &str) -> Vec<String> {
    let parts: Vec<&str> = relative.split('/').filter(|p| !p.is_empty()).collect();
    (1..=parts.len()).map(|n| parts[..n].join("/")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pairs: &[(&str, u64, u64)]) -> BTreeMap<String, ContainerUsage> {
        pairs
            .iter()
            .map(|(k, cpu, rss)| {
                (
                    k.to_string(),
                    ContainerUsage {
                        cpu_ns: *cpu,
                        rss_bytes: *rss,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn cpu_is_cumulative_up_the_tree_and_memory_is_current() {
        let mut acc = FakeAccounting::default();
        let a = "kubepods/besteffort/poda/c1";
        let b = "kubepods/burstable/podb/c2";
        let out = acc.fold(&sample(&[(a, 100, 10), (b, 50, 5)]));
        assert_eq!(out["kubepods"], (150, 15));
        assert_eq!(out["kubepods/besteffort/poda"], (100, 10));
        let out = acc.fold(&sample(&[(a, 300, 20), (b, 60, 5)]));
        assert_eq!(out["kubepods"], (360, 25));
        assert_eq!(out[a], (300, 20));
        // Pod a leaves: its CPU stays in kubepods, its memory does not.
        acc.forget("kubepods/besteffort/poda");
        let out = acc.fold(&sample(&[(b, 70, 5)]));
        assert_eq!(out["kubepods"], (370, 5));
        assert_eq!(out["kubepods/besteffort"], (300, 0));
        assert!(!out.contains_key(a));
    }

    #[test]
    fn fake_dirs_have_the_files_koordlet_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("memory/kubepods");
        create_dir(&dir, "memory").unwrap();
        add_task(&dir, 42).unwrap();
        assert_eq!(fs::read_to_string(dir.join("cgroup.procs")).unwrap(), "42\n");
        assert!(
            fs::read_to_string(dir.join("memory.stat"))
                .unwrap()
                .contains("total_inactive_file 0")
        );
    }
}
