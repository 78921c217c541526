//! The cgroup tree a test run owns, and each simulated node's part of it.
//!
//! Real cgroup v1 (`/sys/fs/cgroup/{cpu,cpuacct,cpuset,memory}/koord-test-<run>/<node>/...`), real
//! cgroup v2 (`<cgroup2 mount>/koord-test-<run>/<node>/...`) or, where neither is writable, a
//! temp-dir fake cgroupfs whose usage files [`super::fakefs`] fills in. Every node also gets a
//! *koordlet root*: a directory where `<root>/<controller>/kubepods/...` (v1) or
//! `<root>/kubepods/...` (v2) resolve to its cgroups, so koordlet's `--cgroup-root-dir` can point
//! at one node without knowing about the run directory.
//!
//! Teardown: dropping the last handle removes every directory bottom-up (after the processes
//! inside have exited), also while a panic unwinds. Run names carry the pid, a counter and random
//! bits, so parallel runs never collide; directories left by runs whose pid is gone are swept.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use thiserror::Error;

/// The v1 controllers a kubelet (and koordlet) use and the simulated node creates cgroups in.
pub const V1_CONTROLLERS: [&str; 4] = ["cpu", "cpuacct", "cpuset", "memory"];

/// Prefix of every run directory, so leftovers are easy to find and sweep.
pub const RUN_PREFIX: &str = koord_test_support::cgroup::RUN_PREFIX;

/// Which kind of cgroup filesystem the tree lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupMode {
    /// Real cgroup v1: one mount per controller (`mounts[i]` for `V1_CONTROLLERS[i]`).
    V1 {
        /// Mount point of each controller, in [`V1_CONTROLLERS`] order.
        mounts: Vec<PathBuf>,
    },
    /// Real cgroup v2 (unified) at this mount.
    V2 {
        /// The cgroup2 mount point.
        mount: PathBuf,
    },
    /// A temp-dir fake with simulated usage files; the reason real cgroups were not used.
    Fake {
        /// Why not real cgroups.
        reason: String,
    },
}

/// Cgroup tree failures, naming the path.
#[derive(Debug, Error)]
pub enum CgroupError {
    /// A filesystem operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A file of the fake cgroupfs could not be written.
    #[error(transparent)]
    Fake(#[from] super::fakefs::FakeFsError),
    /// A cgroup directory could not be removed (tasks that never left, permissions).
    #[error(transparent)]
    Remove(#[from] koord_test_support::cgroup::RemoveError),
    /// A relative cgroup path tried to leave its root.
    #[error("invalid relative cgroup path {0:?}")]
    BadPath(String),
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Owner of one run's cgroups. Cheap to clone; the tree is removed when the last clone and the
/// last [`NodeCgroups`] are gone.
#[derive(Debug, Clone)]
pub struct CgroupTree {
    inner: Arc<TreeInner>,
}

#[derive(Debug)]
struct TreeInner {
    mode: CgroupMode,
    run_name: String,
    /// Real run directories (one per distinct controller mount); empty for the fake.
    run_dirs: Vec<PathBuf>,
    /// Holds the koordlet roots and, for the fake, the whole cgroupfs.
    scratch: tempfile::TempDir,
}

static RUN_SEQ: AtomicU32 = AtomicU32::new(0);

impl CgroupTree {
    /// Uses real cgroups when writable (v1 with all four controllers, else v2), otherwise the
    /// fake; a fallback is logged with its reason.
    pub fn new() -> Result<Self, CgroupError> {
        let run_name = format!(
            "{RUN_PREFIX}{}-{}-{:08x}",
            std::process::id(),
            RUN_SEQ.fetch_add(1, Ordering::Relaxed),
            uuid::Uuid::new_v4().as_u128() as u32
        );
        let mode = match detect_real(&run_name) {
            Ok((mode, run_dirs)) => return Self::build(mode, run_name, run_dirs),
            Err(reason) => reason.to_string(),
        };
        tracing::warn!(reason = %mode, "real cgroups not usable; simulated nodes use a fake cgroupfs with simulated usage");
        Self::build(CgroupMode::Fake { reason: mode }, run_name, Vec::new())
    }

    /// Always the fake cgroupfs (tier-2 tests, machines without root).
    pub fn fake(reason: &str) -> Result<Self, CgroupError> {
        let run_name = format!(
            "{RUN_PREFIX}{}-{}-fake",
            std::process::id(),
            RUN_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        tracing::info!(reason, "simulated nodes use a fake cgroupfs");
        Self::build(
            CgroupMode::Fake {
                reason: reason.to_string(),
            },
            run_name,
            Vec::new(),
        )
    }

    fn build(mode: CgroupMode, run_name: String, run_dirs: Vec<PathBuf>) -> Result<Self, CgroupError> {
        let scratch = tempfile::Builder::new()
            .prefix(&format!("{run_name}-"))
            .tempdir()
            .map_err(io_err("create temp dir", &std::env::temp_dir()))?;
        tracing::info!(run = %run_name, ?mode, scratch = %scratch.path().display(), "cgroup tree ready");
        Ok(CgroupTree {
            inner: Arc::new(TreeInner {
                mode,
                run_name,
                run_dirs,
                scratch,
            }),
        })
    }

    /// Real v1, real v2 or fake.
    pub fn mode(&self) -> &CgroupMode {
        &self.inner.mode
    }

    /// The unique name of this run (`koord-test-<pid>-<seq>-<rand>`).
    pub fn run_name(&self) -> &str {
        &self.inner.run_name
    }

    /// The real run directories (empty for the fake); a leftover check looks for these.
    pub fn run_dirs(&self) -> &[PathBuf] {
        &self.inner.run_dirs
    }

    /// Gives the run directory `shares` of CPU weight (v1 `cpu.shares`, v2 `cpu.weight`), so the
    /// simulated nodes compete with the machine's other processes as real `kubepods` cgroups
    /// would, instead of as one default-weight group. No-op for the fake.
    pub fn set_run_cpu_shares(&self, shares: u64) -> Result<(), CgroupError> {
        let shares = shares.clamp(super::limits::MIN_SHARES, super::limits::MAX_SHARES);
        let (dir, file, value) = match &self.inner.mode {
            CgroupMode::V1 { mounts } => {
                let Some(dir) = mounts
                    .first()
                    .and_then(|cpu| self.inner.run_dirs.iter().find(|d| d.starts_with(cpu)))
                else {
                    return Ok(());
                };
                (dir, "cpu.shares", shares.to_string())
            }
            CgroupMode::V2 { .. } => match self.inner.run_dirs.first() {
                Some(dir) => (
                    dir,
                    "cpu.weight",
                    super::limits::shares_to_weight(shares).to_string(),
                ),
                None => return Ok(()),
            },
            CgroupMode::Fake { .. } => return Ok(()),
        };
        let path = dir.join(file);
        fs::write(&path, value).map_err(io_err("write", &path))
    }

    /// Creates the node's directories (`kubepods` and the two QoS levels) and its koordlet root.
    pub fn node(&self, node_name: &str) -> Result<NodeCgroups, CgroupError> {
        check_relative(node_name)?;
        if node_name.contains('/') {
            return Err(CgroupError::BadPath(node_name.to_string()));
        }
        let koordlet_root = self.inner.scratch.path().join(node_name);
        let controller_roots: Vec<PathBuf> = match &self.inner.mode {
            CgroupMode::V1 { mounts } => {
                fs::create_dir_all(&koordlet_root).map_err(io_err("mkdir", &koordlet_root))?;
                let mut roots = Vec::new();
                for (controller, mount) in V1_CONTROLLERS.iter().zip(mounts) {
                    let real = mount.join(&self.inner.run_name).join(node_name);
                    make_cgroup_dir(&real, *controller == "cpuset")?;
                    let link = koordlet_root.join(controller);
                    std::os::unix::fs::symlink(&real, &link).map_err(io_err("symlink", &link))?;
                    roots.push(real);
                }
                roots
            }
            CgroupMode::V2 { mount } => {
                let real = mount.join(&self.inner.run_name).join(node_name);
                make_cgroup_dir(&real, false)?;
                std::os::unix::fs::symlink(&real, &koordlet_root)
                    .map_err(io_err("symlink", &koordlet_root))?;
                vec![real]
            }
            CgroupMode::Fake { .. } => {
                let mut roots = Vec::new();
                for controller in V1_CONTROLLERS {
                    let dir = koordlet_root.join(controller);
                    fs::create_dir_all(&dir).map_err(io_err("mkdir", &dir))?;
                    roots.push(dir);
                }
                roots
            }
        };
        let node = NodeCgroups {
            tree: self.clone(),
            koordlet_root,
            controller_roots,
        };
        for dir in super::qos::QOS_LEVEL_DIRS {
            node.create(dir)?;
        }
        Ok(node)
    }
}

impl Drop for TreeInner {
    fn drop(&mut self) {
        for dir in &self.run_dirs {
            if let Err(err) = remove_cgroup_tree(dir) {
                tracing::error!(%err, "could not remove cgroup run directory");
            }
        }
    }
}

/// One simulated node's cgroups.
#[derive(Debug, Clone)]
pub struct NodeCgroups {
    tree: CgroupTree,
    koordlet_root: PathBuf,
    /// Per controller (v1, fake) or the single unified directory (v2): the node's directory.
    controller_roots: Vec<PathBuf>,
}

impl NodeCgroups {
    /// Point koordlet's cgroup root here: `<root>/cpu/kubepods/...` (v1, fake) or
    /// `<root>/kubepods/...` (v2).
    pub fn cgroup_root(&self) -> &Path {
        &self.koordlet_root
    }

    /// Point koordlet's proc root here. Container processes are real, so this is the host's.
    pub fn proc_root(&self) -> &Path {
        Path::new("/proc")
    }

    /// Real v1, real v2 or fake.
    pub fn mode(&self) -> &CgroupMode {
        self.tree.mode()
    }

    /// The directory of `relative` in every controller (one entry for v2).
    pub fn dirs(&self, relative: &str) -> Result<Vec<PathBuf>, CgroupError> {
        check_relative(relative)?;
        Ok(self
            .controller_roots
            .iter()
            .map(|root| root.join(relative))
            .collect())
    }

    /// The directory of `relative` in one v1 controller (`cpuacct`, ...); for v2 the unified one.
    pub fn dir(&self, controller: &str, relative: &str) -> Result<PathBuf, CgroupError> {
        check_relative(relative)?;
        let index = match self.tree.mode() {
            CgroupMode::V2 { .. } => 0,
            _ => V1_CONTROLLERS
                .iter()
                .position(|c| *c == controller)
                .ok_or_else(|| CgroupError::BadPath(controller.to_string()))?,
        };
        Ok(self.controller_roots[index].join(relative))
    }

    /// Creates `relative` (and its parents) in every controller, copying cpuset from the parent.
    pub fn create(&self, relative: &str) -> Result<(), CgroupError> {
        let fake = matches!(self.tree.mode(), CgroupMode::Fake { .. });
        let v1 = matches!(self.tree.mode(), CgroupMode::V1 { .. });
        for (index, root) in self.controller_roots.iter().enumerate() {
            let mut dir = root.clone();
            for part in relative.split('/').filter(|p| !p.is_empty()) {
                dir.push(part);
                if fake {
                    super::fakefs::create_dir(&dir, V1_CONTROLLERS[index])?;
                } else {
                    make_cgroup_dir(&dir, v1 && V1_CONTROLLERS[index] == "cpuset")?;
                }
            }
        }
        Ok(())
    }

    /// True when the tree is the unified (v2) hierarchy, whose files differ from v1's.
    pub fn is_v2(&self) -> bool {
        matches!(self.tree.mode(), CgroupMode::V2 { .. })
    }

    /// Writes the kubelet's limits for `relative` (see [`super::limits`]), in order; stops at the
    /// first file the kernel refuses.
    pub fn write_limits(
        &self,
        relative: &str,
        limits: &super::limits::CgroupLimits,
    ) -> Result<(), CgroupError> {
        for write in super::limits::writes(limits, self.is_v2()) {
            let path = self.dir(write.controller, relative)?.join(write.file);
            fs::write(&path, &write.value).map_err(io_err("write", &path))?;
        }
        Ok(())
    }

    /// Moves `pid` into `relative` in every controller.
    pub fn add_process(&self, relative: &str, pid: u32) -> Result<(), CgroupError> {
        let fake = matches!(self.tree.mode(), CgroupMode::Fake { .. });
        for dir in self.dirs(relative)? {
            if fake {
                super::fakefs::add_task(&dir, pid)?;
            } else {
                let procs = dir.join("cgroup.procs");
                fs::write(&procs, pid.to_string()).map_err(io_err("write", &procs))?;
            }
        }
        Ok(())
    }

    /// Removes `relative` and everything below it, bottom-up, in every controller. Waits up to a
    /// few seconds for exiting tasks; a missing directory is not an error.
    pub fn remove(&self, relative: &str) -> Result<(), CgroupError> {
        if relative.split('/').all(|p| p.is_empty()) {
            return Err(CgroupError::BadPath(relative.to_string()));
        }
        for dir in self.dirs(relative)? {
            if matches!(self.tree.mode(), CgroupMode::Fake { .. }) {
                match fs::remove_dir_all(&dir) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err("remove", &dir)(e)),
                    _ => {}
                }
            } else {
                remove_cgroup_tree(&dir)?;
            }
        }
        Ok(())
    }
}

fn check_relative(relative: &str) -> Result<(), CgroupError> {
    if relative.starts_with('/') || relative.split('/').any(|p| p == ".." || p == ".") {
        return Err(CgroupError::BadPath(relative.to_string()));
    }
    Ok(())
}

/// Creates a real cgroup directory (and parents); for cpuset copies `cpuset.cpus`/`mems` from the
/// parent, without which no task could join. For v2 enables the controllers for children of the
/// parent.
fn make_cgroup_dir(dir: &Path, copy_cpuset: bool) -> Result<(), CgroupError> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        if !parent.is_dir() {
            make_cgroup_dir(parent, copy_cpuset)?;
        }
        // v2: let the child use cpu/memory/cpuset; v1 has no such file and this is a no-op.
        let control = parent.join("cgroup.subtree_control");
        if control.exists() {
            for controller in ["+cpu", "+memory", "+cpuset"] {
                let _ = fs::write(&control, controller);
            }
        }
    }
    match fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(io_err("mkdir", dir)(e)),
        _ => {}
    }
    if copy_cpuset && let Some(parent) = dir.parent() {
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let from = parent.join(file);
            let value = fs::read_to_string(&from).map_err(io_err("read", &from))?;
            let to = dir.join(file);
            fs::write(&to, value.trim()).map_err(io_err("write", &to))?;
        }
    }
    Ok(())
}

/// Removes a real cgroup directory and its children bottom-up (the shared test-support removal:
/// waits for exiting tasks, moves tasks that never leave to the parent).
pub(crate) fn remove_cgroup_tree(dir: &Path) -> Result<(), CgroupError> {
    Ok(koord_test_support::cgroup::remove_tree(dir)?)
}

/// Why the simulated nodes fall back to the fake cgroupfs (the reason they log and report).
#[derive(Debug, Error)]
enum RealCgroupsUnusable {
    /// The mount table is unreadable.
    #[error("cannot read /proc/self/mounts: {0}")]
    Mounts(#[source] io::Error),
    /// Neither a complete cgroup v1 set nor a usable cgroup2 mount.
    #[error(
        "no cgroup v1 mounts for cpu, cpuacct, cpuset and memory and no cgroup2 mount with cpu and memory"
    )]
    NoMounts,
    /// The run directory could not be created (not root, read-only).
    #[error("cgroups not writable: {0}")]
    NotWritable(#[source] CgroupError),
}

/// Finds the writable real cgroups and creates the run directories; why not otherwise.
fn detect_real(run_name: &str) -> Result<(CgroupMode, Vec<PathBuf>), RealCgroupsUnusable> {
    let mounts = fs::read_to_string("/proc/self/mounts").map_err(RealCgroupsUnusable::Mounts)?;
    let mut v1: Vec<Option<PathBuf>> = vec![None; V1_CONTROLLERS.len()];
    let mut v2: Option<PathBuf> = None;
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, point, fstype, options, ..] = fields[..] else {
            continue;
        };
        match fstype {
            "cgroup" => {
                for (slot, controller) in v1.iter_mut().zip(V1_CONTROLLERS) {
                    if slot.is_none() && options.split(',').any(|o| o == controller) {
                        *slot = Some(PathBuf::from(point));
                    }
                }
            }
            "cgroup2" => {
                let controllers =
                    fs::read_to_string(Path::new(point).join("cgroup.controllers")).unwrap_or_default();
                if v2.is_none()
                    && controllers.split_whitespace().any(|c| c == "cpu")
                    && controllers.split_whitespace().any(|c| c == "memory")
                {
                    v2 = Some(PathBuf::from(point));
                }
            }
            _ => {}
        }
    }
    let mode = if let Some(mounts) = v1.iter().cloned().collect::<Option<Vec<_>>>() {
        CgroupMode::V1 { mounts }
    } else if let Some(mount) = v2 {
        CgroupMode::V2 { mount }
    } else {
        return Err(RealCgroupsUnusable::NoMounts);
    };
    // (mount, copy cpuset files on mkdir)
    let bases: Vec<(PathBuf, bool)> = match &mode {
        CgroupMode::V1 { mounts } => mounts
            .iter()
            .zip(V1_CONTROLLERS)
            .map(|(m, c)| (m.clone(), c == "cpuset"))
            .collect(),
        CgroupMode::V2 { mount } => vec![(mount.clone(), false)],
        CgroupMode::Fake { .. } => Vec::new(),
    };
    let mut run_dirs: Vec<PathBuf> = Vec::new();
    for (base, cpuset) in &bases {
        sweep_stale_runs(base);
        let dir = base.join(run_name);
        if run_dirs.contains(&dir) {
            continue; // co-mounted controllers (cpu,cpuacct) share one directory
        }
        if let Err(err) = make_cgroup_dir(&dir, *cpuset) {
            for created in &run_dirs {
                let _ = remove_cgroup_tree(created);
            }
            return Err(RealCgroupsUnusable::NotWritable(err));
        }
        run_dirs.push(dir);
    }
    Ok((mode, run_dirs))
}

/// Removes run directories left by earlier runs whose process no longer exists.
fn sweep_stale_runs(base: &Path) {
    for swept in koord_test_support::cgroup::sweep_stale_runs(base) {
        match swept {
            Ok(dir) => tracing::info!(dir = %dir.display(), "removed cgroups left by a dead run"),
            Err(err) => tracing::warn!(%err, "could not remove stale run"),
        }
    }
}
