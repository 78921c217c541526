//! Reading and writing cgroup files through the resource table.
//!
//! [`Cgroups`] owns the cgroup root and the detected layout and answers three questions for a
//! (resource, cgroup directory) pair: where is the file, does this kernel have it (probed once
//! and cached), and what is in it. Writes are validated against the resource's domain before
//! the kernel is touched and skipped when the file already holds the value.
//!
//! Unsupported resources are logged once per resource for the life of the value, at `warn`,
//! and then reported quietly as [`SystemError::Unsupported`].

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::cgroup_file::{CgroupFile, FdBudget};
use super::cgroup_stats::{CpuThrottling, MemoryStat};
use super::confine::{WriteMode, open_for_write};
use super::psi::PsiStats;
use super::resource::{self, decode, encode};
use super::{
    CgroupDir, CgroupLayout, CgroupMode, CgroupResource, CgroupValue, CgroupVersion, CpuSet, Subsystem,
    SystemError, SystemRoots,
};

/// A write worked out but not yet done: what is in the file and what would go in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedWrite {
    /// The resource.
    pub resource: CgroupResource,
    /// The cgroup directory.
    pub dir: CgroupDir,
    /// Absolute file path.
    pub path: PathBuf,
    /// The file's current content, trimmed.
    pub old: String,
    /// The exact text to write.
    pub new: String,
    /// True when the file already holds the value (compared semantically: `0-3` = `0,1,2,3`,
    /// v1 "unlimited" = -1).
    pub unchanged: bool,
}

/// Bound on cached probes; past it the cache is cleared (a probe is one `stat`).
const MAX_PROBES: usize = 16_384;

/// The cgroup tree of this node.
#[derive(Debug)]
pub struct Cgroups {
    root: PathBuf,
    layout: CgroupLayout,
    probes: Mutex<HashMap<(CgroupResource, CgroupDir), bool>>,
    reported: Mutex<HashSet<CgroupResource>>,
    fd_budget: Arc<FdBudget>,
}

impl Cgroups {
    /// A tree at `root` with a known layout (tests, the offline `plan` command, a forced flag).
    pub fn new(root: impl Into<PathBuf>, layout: CgroupLayout) -> Self {
        Self {
            root: root.into(),
            layout,
            probes: Mutex::default(),
            reported: Mutex::default(),
            fd_budget: FdBudget::process(),
        }
    }

    /// The same tree with its own budget of kept files instead of the process-wide one
    /// ([`FdBudget::process`]); tests use a small one, 0 keeps no file open.
    pub fn with_fd_budget(mut self, budget: Arc<FdBudget>) -> Self {
        self.fd_budget = budget;
        self
    }

    /// The budget of kept-open files that [`Cgroups::file`] handles draw on.
    pub fn fd_budget(&self) -> &Arc<FdBudget> {
        &self.fd_budget
    }

    /// Detects the layout below `roots.cgroup` (see [`CgroupLayout::detect`]).
    pub fn detect(roots: &SystemRoots) -> Result<Self, SystemError> {
        let layout = CgroupLayout::detect(roots)?;
        tracing::info!(root = %roots.cgroup.display(), mode = ?layout.mode, source = layout.source, "cgroup layout detected");
        Ok(Self::new(roots.cgroup.clone(), layout))
    }

    /// The detected layout.
    pub fn layout(&self) -> &CgroupLayout {
        &self.layout
    }

    /// The version controller files follow (hybrid is v1).
    pub fn version(&self) -> CgroupVersion {
        self.layout.version()
    }

    /// The cgroup root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The version a resource's file is encoded in (pressure files on a hybrid host live in the
    /// unified mount).
    fn file_version(&self, resource: CgroupResource) -> CgroupVersion {
        if resource.spec().pressure && self.layout.mode == CgroupMode::Hybrid {
            CgroupVersion::V2
        } else {
            self.version()
        }
    }

    /// Absolute directory of `dir` in the hierarchy holding `resource`.
    pub fn dir_path(&self, resource: CgroupResource, dir: &CgroupDir) -> Result<PathBuf, SystemError> {
        let spec = resource.spec();
        let subsystem = match self.layout.mode {
            CgroupMode::V2 => None,
            CgroupMode::Hybrid if spec.pressure => Some(Subsystem::Unified),
            CgroupMode::V1 | CgroupMode::Hybrid => Some(
                spec.v1
                    .map(|(s, _)| s)
                    .ok_or_else(|| unsupported(resource, "no v1 file"))?,
            ),
        };
        let base = match subsystem {
            None => self.root.clone(),
            Some(sub) => {
                let rel = self.layout.subsystem_dir(sub).ok_or_else(|| {
                    unsupported(resource, &format!("{} controller not mounted", sub.name()))
                })?;
                self.root.join(rel)
            }
        };
        Ok(base.join(dir.as_path()))
    }

    /// Absolute path of `resource`'s file in `dir`.
    pub fn file_path(&self, resource: CgroupResource, dir: &CgroupDir) -> Result<PathBuf, SystemError> {
        let name = resource
            .file_name(self.file_version(resource))
            .ok_or_else(|| unsupported(resource, "no file in this cgroup version"))?;
        Ok(self.dir_path(resource, dir)?.join(name))
    }

    /// Whether this kernel has `resource` in `dir`. The answer is cached per (resource, dir);
    /// the first "no" for a resource is logged once. A missing directory is
    /// [`SystemError::CgroupDirMissing`] and is not cached (the pod may not exist yet).
    pub fn is_supported(&self, resource: CgroupResource, dir: &CgroupDir) -> Result<bool, SystemError> {
        let key = (resource, dir.clone());
        if let Some(&known) = lock(&self.probes).get(&key) {
            return Ok(known);
        }
        let path = match self.file_path(resource, dir) {
            Ok(path) => path,
            Err(SystemError::Unsupported { path, .. }) => {
                self.report_unsupported(resource, &path);
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let dir_path = path.parent().map(Path::to_path_buf).unwrap_or_default();
        if !dir_path.is_dir() {
            return Err(SystemError::CgroupDirMissing(dir_path));
        }
        let supported = path.is_file();
        if !supported {
            self.report_unsupported(resource, &path.display().to_string());
        }
        let mut probes = lock(&self.probes);
        if probes.len() >= MAX_PROBES {
            probes.clear();
        }
        probes.insert(key, supported);
        Ok(supported)
    }

    /// Drops cached probes for `dir` and everything below it (a pod that went away).
    pub fn forget_dir(&self, dir: &CgroupDir) {
        lock(&self.probes).retain(|(_, d), _| !d.starts_with(dir));
    }

    /// How many resources have been reported unsupported (each was logged exactly once).
    pub fn unsupported_reported(&self) -> usize {
        lock(&self.reported).len()
    }

    fn report_unsupported(&self, resource: CgroupResource, path: &str) {
        if lock(&self.reported).insert(resource) {
            tracing::warn!(
                resource = resource.name(),
                path,
                "cgroup resource unsupported on this node; skipping it from now on"
            );
        }
    }

    fn supported_path(&self, resource: CgroupResource, dir: &CgroupDir) -> Result<PathBuf, SystemError> {
        let path = self.file_path(resource, dir);
        if !self.is_supported(resource, dir)? {
            let path = path.map(|p| p.display().to_string()).unwrap_or_default();
            return Err(unsupported(resource, &path));
        }
        path
    }

    /// The file's raw content.
    pub fn read_text(&self, resource: CgroupResource, dir: &CgroupDir) -> Result<String, SystemError> {
        let path = self.supported_path(resource, dir)?;
        match std::fs::read(&path) {
            Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SystemError::CgroupDirMissing(path)),
            Err(source) => Err(SystemError::Io { path, source }),
        }
    }

    /// The file's value in v1 units.
    pub fn read(&self, resource: CgroupResource, dir: &CgroupDir) -> Result<CgroupValue, SystemError> {
        let text = self.read_text(resource, dir)?;
        decode(resource, self.file_version(resource), &text).map_err(|e| self.parse_error(resource, dir, e))
    }

    fn parse_error(&self, resource: CgroupResource, dir: &CgroupDir, e: super::ParseError) -> SystemError {
        let path = self
            .file_path(resource, dir)
            .unwrap_or_else(|_| PathBuf::from(resource.name()));
        SystemError::parse(path, e)
    }

    /// `resource`'s file in `dir`, resolved and probed now, for repeated reads with a reused
    /// buffer (the collectors read the same files every round). The handle keeps the file open
    /// between reads while the fd budget allows (see [`super::cgroup_file`]).
    pub fn file(&self, resource: CgroupResource, dir: &CgroupDir) -> Result<CgroupFile, SystemError> {
        let path = self.supported_path(resource, dir)?;
        Ok(CgroupFile::new(
            resource,
            self.file_version(resource),
            path,
            Arc::clone(&self.fd_budget),
        ))
    }

    /// Cumulative CPU time of the cgroup in ns (`cpuacct.usage` / `cpu.stat usage_usec`).
    pub fn cpu_usage_ns(&self, dir: &CgroupDir) -> Result<u64, SystemError> {
        self.file(CgroupResource::CpuUsage, dir)?
            .read_u64(&mut Vec::new())
    }

    /// Memory charged to the cgroup in bytes, page cache included.
    pub fn memory_usage_bytes(&self, dir: &CgroupDir) -> Result<u64, SystemError> {
        self.file(CgroupResource::MemoryUsage, dir)?
            .read_u64(&mut Vec::new())
    }

    /// The LRU breakdown of `memory.stat`.
    pub fn memory_stat(&self, dir: &CgroupDir) -> Result<MemoryStat, SystemError> {
        self.file(CgroupResource::MemoryStat, dir)?
            .read_memory_stat(&mut Vec::new())
    }

    /// CFS throttling counters.
    pub fn cpu_throttling(&self, dir: &CgroupDir) -> Result<CpuThrottling, SystemError> {
        let text = self.read_text(CgroupResource::CpuStat, dir)?;
        CpuThrottling::parse(&text, self.version())
            .map_err(|e| self.parse_error(CgroupResource::CpuStat, dir, e))
    }

    /// The cgroup's `cpuset.cpus`.
    pub fn cpuset_cpus(&self, dir: &CgroupDir) -> Result<CpuSet, SystemError> {
        self.read_cpus(CgroupResource::CpusetCpus, dir)
    }

    /// The CPUs the cgroup can really run on (`cpuset.effective_cpus` / `cpuset.cpus.effective`);
    /// use this to size a cgroup, since an empty v2 `cpuset.cpus` means "the parent's".
    pub fn effective_cpus(&self, dir: &CgroupDir) -> Result<CpuSet, SystemError> {
        self.read_cpus(CgroupResource::CpusetCpusEffective, dir)
    }

    fn read_cpus(&self, resource: CgroupResource, dir: &CgroupDir) -> Result<CpuSet, SystemError> {
        match self.read(resource, dir)? {
            CgroupValue::Cpus(c) => Ok(c),
            CgroupValue::Int(_) => Err(SystemError::ReadOnly(resource.name())),
        }
    }

    /// A pressure file of the cgroup (`resource` is one of the three pressure resources).
    pub fn pressure(&self, resource: CgroupResource, dir: &CgroupDir) -> Result<PsiStats, SystemError> {
        if !resource.spec().pressure {
            return Err(unsupported(resource, "not a pressure resource"));
        }
        let text = self.read_text(resource, dir)?;
        PsiStats::parse(&text).map_err(|e| self.parse_error(resource, dir, e))
    }

    /// Works out a write without doing it: validates `value` (refused values never reach the
    /// kernel), checks support and the directory, reads the current content and encodes.
    pub fn prepare_write(
        &self,
        resource: CgroupResource,
        dir: &CgroupDir,
        value: &CgroupValue,
    ) -> Result<PreparedWrite, SystemError> {
        resource::validate(resource, value).map_err(|e| SystemError::InvalidValue {
            resource: resource.name(),
            value: value.to_string(),
            reason: e.to_string(),
        })?;
        let version = self.file_version(resource);
        let path = self.supported_path(resource, dir)?;
        let old = self.read_text(resource, dir)?;
        let new = encode(resource, version, value, Some(&old)).map_err(|e| SystemError::InvalidValue {
            resource: resource.name(),
            value: value.to_string(),
            reason: e.to_string(),
        })?;
        let unchanged = match (decode(resource, version, &old), decode(resource, version, &new)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        Ok(PreparedWrite {
            resource,
            dir: dir.clone(),
            path,
            old: old.trim().to_owned(),
            new,
            unchanged,
        })
    }

    /// Writes a prepared value (no create: a vanished cgroup is [`SystemError::CgroupDirMissing`]).
    /// The file is opened confined to the cgroup root ([`super::confine`]).
    pub fn apply(&self, write: &PreparedWrite) -> Result<(), SystemError> {
        let mut file = open_for_write(&self.root, &write.path, WriteMode::Truncate)?;
        file.write_all(write.new.as_bytes())
            .map_err(|source| SystemError::Io {
                path: write.path.clone(),
                source,
            })
    }

    /// Validated write-if-different. Returns the prepared write (its `unchanged` says whether
    /// anything was written).
    pub fn write(
        &self,
        resource: CgroupResource,
        dir: &CgroupDir,
        value: &CgroupValue,
    ) -> Result<PreparedWrite, SystemError> {
        let prepared = self.prepare_write(resource, dir, value)?;
        if !prepared.unchanged {
            self.apply(&prepared)?;
        }
        Ok(prepared)
    }
}

fn unsupported(resource: CgroupResource, why: &str) -> SystemError {
    SystemError::Unsupported {
        resource: resource.name(),
        path: why.to_owned(),
    }
}

/// Poisoning only means another thread panicked mid-update of a cache; the cache is still a
/// valid map, so keep using it.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
