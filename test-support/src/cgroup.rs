//! Real cgroup v1 subtrees for tests, removed on drop.
//!
//! Tier-3 tests create their own `/sys/fs/cgroup/<controller>/koord-test-<pid>-<seq>/...`, run
//! real processes in it and must leave nothing behind, also when they fail. [`CgroupV1Tree`] owns
//! such a subtree in a set of controllers; dropping it kills the processes it spawned or adopted,
//! moves any other task that is still inside to the parent, and removes the directories deepest
//! first. [`remove_tree`] and [`sweep_stale_runs`] are the same removal for trees owned by
//! something else (the embedded cluster's simulated nodes).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use thiserror::Error;

/// Prefix of every test run directory, so leftovers of crashed runs are recognisable and swept.
pub const RUN_PREFIX: &str = "koord-test-";

/// How long a removal waits for killed tasks to leave a cgroup before moving them out.
pub const RMDIR_PATIENCE: Duration = Duration::from_secs(3);

/// Why a real cgroup tree cannot be made here (not root, controller not mounted, read-only); a
/// test prints it as `skipped: <reason>` and passes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// A cgroup directory could not be removed.
#[derive(Debug, Error)]
#[error("{op} {path}: {source}")]
pub struct RemoveError {
    /// What was attempted (`read dir`, `rmdir`).
    pub op: &'static str,
    /// The directory.
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A test's own subtree `koord-test-<pid>-<seq>` in several cgroup v1 controllers, plus the
/// processes it started; everything is gone after drop.
#[derive(Debug)]
pub struct CgroupV1Tree {
    name: String,
    /// (controller, its mount point), in the order given to [`CgroupV1Tree::new`].
    mounts: Vec<(String, PathBuf)>,
    procs: Vec<Child>,
}

impl CgroupV1Tree {
    /// Creates the run directory in each controller (`cpu`, `cpuacct`, `cpuset`, `memory`, ...),
    /// first sweeping directories left by runs whose process is gone. Fails with the reason when
    /// not root, a controller is not mounted as cgroup v1, or the hierarchy is not writable.
    pub fn new(controllers: &[&str]) -> Result<Self, Unavailable> {
        if !is_root() {
            return Err(Unavailable("not root".into()));
        }
        let mounts = v1_mounts(controllers)?;
        let name = format!(
            "{RUN_PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let tree = CgroupV1Tree {
            name,
            mounts,
            procs: Vec::new(),
        };
        for (_, mount) in &tree.mounts {
            sweep_stale_runs(mount);
        }
        tree.mkdir("")
            .map_err(|e| Unavailable(format!("cannot create a test cgroup: {e}")))?;
        Ok(tree)
    }

    /// [`CgroupV1Tree::new`], or `None` after printing `skipped: <reason>`.
    pub fn or_skip(controllers: &[&str]) -> Option<Self> {
        match Self::new(controllers) {
            Ok(tree) => Some(tree),
            Err(reason) => {
                println!("skipped: {reason}");
                None
            }
        }
    }

    /// The run directory's name, i.e. its path relative to each controller's root.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `rel` inside the run directory, relative to the controller root: how a cgroup writer that
    /// is rooted at the controller mount names it.
    pub fn rel(&self, rel: &str) -> String {
        let rel = rel.trim_matches('/');
        if rel.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{rel}", self.name)
        }
    }

    /// The absolute directory of `rel` in `controller`. Panics on a controller the tree was not
    /// made with: a mistake in the test itself.
    #[allow(clippy::panic)]
    pub fn path(&self, controller: &str, rel: &str) -> PathBuf {
        let Some((_, mount)) = self.mounts.iter().find(|(c, _)| c == controller) else {
            panic!("the test tree has no {controller} controller");
        };
        mount.join(self.rel(rel))
    }

    /// The mount point of `controller` (the root a cgroup writer takes).
    pub fn mount(&self, controller: &str) -> Option<&Path> {
        self.mounts
            .iter()
            .find(|(c, _)| c == controller)
            .map(|(_, m)| m.as_path())
    }

    /// Creates `rel` and its missing parents in every controller; a new cpuset gets its parent's
    /// `cpuset.cpus` and `cpuset.mems`, without which no task could join it.
    pub fn mkdir(&self, rel: &str) -> io::Result<()> {
        for (controller, mount) in &self.mounts {
            let mut dir = mount.join(&self.name);
            make_dir(&dir, controller == "cpuset")?;
            for part in rel.split('/').filter(|p| !p.is_empty()) {
                dir.push(part);
                make_dir(&dir, controller == "cpuset")?;
            }
        }
        Ok(())
    }

    /// Writes `value` to `file` of `rel` in `controller`.
    pub fn write(&self, controller: &str, rel: &str, file: &str, value: &str) -> io::Result<()> {
        fs::write(self.path(controller, rel).join(file), value)
    }

    /// Reads `file` of `rel` in `controller`, trimmed.
    pub fn read(&self, controller: &str, rel: &str, file: &str) -> io::Result<String> {
        fs::read_to_string(self.path(controller, rel).join(file)).map(|s| s.trim().to_owned())
    }

    /// Removes the leaf cgroup `rel` in every controller (a missing one is already removed), e.g.
    /// to see how a reader copes with a cgroup that disappears and is created again with
    /// [`CgroupV1Tree::mkdir`]. Its tasks must have left it first.
    pub fn rmdir(&self, rel: &str) -> io::Result<()> {
        for (controller, _) in &self.mounts {
            match fs::remove_dir(self.path(controller, rel)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// CPU time used by `rel` and its descendants so far, in nanoseconds (`cpuacct.usage`).
    pub fn cpu_usage_ns(&self, rel: &str) -> io::Result<u64> {
        let text = self.read("cpuacct", rel, "cpuacct.usage")?;
        text.parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("cpuacct.usage {text:?}: {e}")))
    }

    /// Cores each of `rels` used over the next `window` (sleeps for it), from `cpuacct.usage`: the
    /// reference a test compares a limit or a collector's figure with.
    pub fn cpu_cores(&self, rels: &[&str], window: Duration) -> io::Result<Vec<f64>> {
        let start = rels
            .iter()
            .map(|rel| self.cpu_usage_ns(rel))
            .collect::<io::Result<Vec<u64>>>()?;
        let started = Instant::now();
        std::thread::sleep(window);
        let elapsed = started.elapsed().as_nanos() as f64;
        rels.iter()
            .zip(start)
            .map(|(rel, before)| Ok(self.cpu_usage_ns(rel)?.saturating_sub(before) as f64 / elapsed))
            .collect()
    }

    /// Moves `pid` into `rel` in every controller of the tree.
    pub fn add_process(&self, rel: &str, pid: u32) -> io::Result<()> {
        for (controller, _) in &self.mounts {
            self.write(controller, rel, "cgroup.procs", &pid.to_string())?;
        }
        Ok(())
    }

    /// Starts a process that burns one CPU (`sh` busy loop) inside `rel`; it is killed on drop.
    pub fn spawn_burner(&mut self, rel: &str) -> io::Result<u32> {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()?;
        let pid = child.id();
        self.adopt(child);
        self.add_process(rel, pid)?;
        Ok(pid)
    }

    /// The controllers the tree was made in, in the order given to [`CgroupV1Tree::new`].
    pub fn controllers(&self) -> impl Iterator<Item = &str> {
        self.mounts.iter().map(|(controller, _)| controller.as_str())
    }

    /// Takes ownership of `child`: it is killed and reaped on drop, before the directories go.
    pub fn adopt(&mut self, child: Child) {
        self.procs.push(child);
    }
}

impl Drop for CgroupV1Tree {
    fn drop(&mut self) {
        for child in &mut self.procs {
            let _ = child.kill();
            let _ = child.wait();
        }
        let mut removed: Vec<PathBuf> = Vec::new();
        for (_, mount) in &self.mounts {
            let dir = mount.join(&self.name);
            if removed.contains(&dir) {
                continue; // co-mounted controllers share one directory
            }
            // Our own processes are reaped; anything else still inside goes to the root at once
            // instead of after the removal's patience.
            move_tasks_out(&dir, mount);
            if let Err(err) = remove_tree(&dir) {
                eprintln!("cleanup of test cgroup failed: {err}");
            }
            removed.push(dir);
        }
    }
}

/// Removes a real cgroup directory and everything below it, deepest first. Each rmdir waits up to
/// [`RMDIR_PATIENCE`] for exiting tasks; tasks that never leave (not ours) are moved to the parent
/// so the directory can go. A missing directory is not an error.
pub fn remove_tree(dir: &Path) -> Result<(), RemoveError> {
    let err = |op, source| RemoveError {
        op,
        path: dir.to_path_buf(),
        source,
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err("read dir", e)),
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    let started = Instant::now();
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(_) if started.elapsed() < RMDIR_PATIENCE => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                if evacuate(dir) {
                    continue;
                }
                return Err(err("rmdir", e));
            }
        }
    }
}

/// Moves the tasks of `dir` and of every cgroup below it to `to`.
fn move_tasks_out(dir: &Path, to: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                move_tasks_out(&entry.path(), to);
            }
        }
    }
    let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.split_whitespace() {
        eprintln!("task {pid} still in {} at teardown; moving it out", dir.display());
        let _ = fs::write(to.join("cgroup.procs"), pid);
    }
}

/// Moves every task still in `dir` to its parent; true when there was something to move.
fn evacuate(dir: &Path) -> bool {
    let (Ok(procs), Some(parent)) = (fs::read_to_string(dir.join("cgroup.procs")), dir.parent()) else {
        return false;
    };
    let pids: Vec<&str> = procs.split_whitespace().collect();
    for pid in &pids {
        eprintln!(
            "task {pid} still in {} at teardown; moving it to the parent",
            dir.display()
        );
        let _ = fs::write(parent.join("cgroup.procs"), pid);
    }
    !pids.is_empty()
}

/// Removes `<base>/koord-test-<pid>-...` directories whose process no longer exists (left by a run
/// that was killed before its guards ran). Returns what was removed or could not be.
pub fn sweep_stale_runs(base: &Path) -> Vec<Result<PathBuf, RemoveError>> {
    let Ok(entries) = fs::read_dir(base) else {
        return Vec::new();
    };
    let mut swept = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(RUN_PREFIX)
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let path = entry.path();
            swept.push(remove_tree(&path).map(|()| path));
        }
    }
    swept
}

/// Creates one cgroup directory (parent must exist); copies cpuset files from the parent.
fn make_dir(dir: &Path, copy_cpuset: bool) -> io::Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(io::Error::new(e.kind(), format!("mkdir {}: {e}", dir.display()))),
    }
    if copy_cpuset && let Some(parent) = dir.parent() {
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let value = fs::read_to_string(parent.join(file))?;
            fs::write(dir.join(file), value.trim())?;
        }
    }
    Ok(())
}

/// The effective uid is 0 (from `/proc/self/status`, to avoid a libc dependency).
fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Each controller's cgroup v1 mount point, from `/proc/self/mounts`.
fn v1_mounts(controllers: &[&str]) -> Result<Vec<(String, PathBuf)>, Unavailable> {
    let mounts = fs::read_to_string("/proc/self/mounts")
        .map_err(|e| Unavailable(format!("cannot read /proc/self/mounts: {e}")))?;
    controllers
        .iter()
        .map(|controller| {
            mounts
                .lines()
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    match fields[..] {
                        [_, point, "cgroup", options, ..] => Some((point, options)),
                        _ => None,
                    }
                })
                .find(|(_, options)| options.split(',').any(|o| o == *controller))
                .map(|(point, _)| ((*controller).to_owned(), PathBuf::from(point)))
                .ok_or_else(|| Unavailable(format!("no cgroup v1 {controller} controller mounted")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_cgroup_tree_holds_processes_and_is_gone_after_drop() {
        let Some(mut tree) = CgroupV1Tree::or_skip(&["cpu", "cpuacct", "cpuset", "memory"]) else {
            return;
        };
        tree.mkdir("kubepods/besteffort/pod1").unwrap();
        let burner = tree.spawn_burner("kubepods/besteffort/pod1").unwrap();
        // A task the tree does not own: drop must move it out rather than fail.
        let mut stray = Command::new("sleep").arg("30").spawn().unwrap();
        tree.add_process("kubepods", stray.id()).unwrap();

        let procs = tree
            .read("cpu", "kubepods/besteffort/pod1", "cgroup.procs")
            .unwrap();
        assert!(
            procs.split_whitespace().any(|p| p == burner.to_string()),
            "{procs}"
        );
        let cores = tree
            .cpu_cores(
                &["kubepods/besteffort/pod1", "kubepods"],
                Duration::from_millis(200),
            )
            .unwrap();
        assert!(cores[0] > 0.0 && cores[0] <= 1.2, "one busy loop: {cores:?}");
        assert!(
            cores[1] >= cores[0] * 0.9,
            "a parent counts its children: {cores:?}"
        );
        tree.mkdir("kubepods/empty").unwrap();
        tree.rmdir("kubepods/empty").unwrap();
        assert!(!tree.path("memory", "kubepods/empty").exists());
        tree.rmdir("kubepods/empty").unwrap();
        assert!(tree.rmdir("kubepods").is_err(), "a cgroup with children stays");
        let cpus = tree
            .read("cpuset", "kubepods/besteffort/pod1", "cpuset.cpus")
            .unwrap();
        assert!(!cpus.is_empty(), "a child cpuset inherits the parent's CPUs");
        assert_eq!(tree.rel("kubepods/"), format!("{}/kubepods", tree.name()));

        let dirs: Vec<PathBuf> = ["cpu", "cpuacct", "cpuset", "memory"]
            .iter()
            .map(|c| tree.path(c, ""))
            .collect();
        drop(tree);
        for dir in &dirs {
            assert!(!dir.exists(), "{} left behind", dir.display());
        }
        assert!(
            !Path::new("/proc").join(burner.to_string()).join("exe").exists(),
            "the burner was killed and reaped"
        );
        stray.kill().unwrap();
        stray.wait().unwrap();
    }

    #[test]
    fn a_missing_controller_is_a_reason_not_a_panic() {
        let err = v1_mounts(&["no-such-controller"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no cgroup v1 no-such-controller controller mounted"
        );
    }

    #[test]
    fn sweep_removes_only_runs_whose_process_is_gone() {
        let base = std::env::temp_dir().join(format!("koord-sweep-{}", std::process::id()));
        let dead = base.join(format!("{RUN_PREFIX}4294967295-0/kubepods"));
        let alive = base.join(format!("{RUN_PREFIX}{}-0", std::process::id()));
        let other = base.join("kubepods");
        for dir in [&dead, &alive, &other] {
            fs::create_dir_all(dir).unwrap();
        }
        let swept: Vec<PathBuf> = sweep_stale_runs(&base).into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(swept, vec![base.join(format!("{RUN_PREFIX}4294967295-0"))]);
        assert!(alive.exists() && other.exists());
        assert!(remove_tree(&base).is_ok());
        assert!(!base.exists());
        assert!(remove_tree(&base).is_ok(), "a missing tree is already removed");
    }
}
