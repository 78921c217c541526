//! Repeated reads of one cgroup file, for collectors that read the same files every round.
//!
//! A [`CgroupFile`] is resolved and probed once ([`super::Cgroups::file`]). Its first read opens
//! the file and, while the process-wide [`FdBudget`] has room, keeps it open; later reads are a
//! `pread` at offset 0 into the caller's reusable buffer (no path walk, no open/close). Kernel
//! cgroup files are seq files that regenerate their content when read from offset 0, so a kept
//! descriptor always sees the current value; a plain file (the fake trees of tests) sees what
//! is written in place.
//!
//! A kept descriptor can outlive its cgroup: the cgroup is removed (the pod went away) or removed
//! and created again at the same path (the runtime recreated the container). Both cases are
//! detected and the file is reopened by path:
//! - on cgroupfs / cgroup2 (kernfs) a read of a removed cgroup's file fails with `ENODEV`;
//! - on other filesystems (fake trees) the kept file is checked with `fstat` before each read:
//!   a link count of 0 means it was unlinked;
//! - `ENODEV`, `ESTALE` and `ENOENT` from a kept descriptor all drop it and reopen by path; a
//!   path that no longer opens is [`SystemError::CgroupDirMissing`], as before.
//!
//! The budget: kept descriptors are counted process-wide against [`FdBudget::limit`], half of
//! the `RLIMIT_NOFILE` soft limit (raised to the hard limit once, at first use) and at most
//! [`MAX_KEPT_FILES`]. A file that finds the budget full is read the old way (open, read,
//! close) and retries keeping on its next read. Slots are first come, first served, not LRU:
//! the collectors read every file once per round in the same order, and an LRU over a cyclic
//! scan larger than the budget would evict every file right before it is needed again. A slot
//! is released when its [`CgroupFile`] is dropped (the collector drops a vanished pod's files)
//! or its descriptor is found stale.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use rustix::io::Errno;

use super::cgroup_stats::MemoryStat;
use super::numa::NumaStat;
use super::resource::decode;
use super::{CgroupResource, CgroupValue, CgroupVersion, SystemError};

/// Capacity reserved in a read buffer: a v1 `memory.stat` is ~1 KiB, the other files are tiny.
const READ_BUFFER_BYTES: usize = 4096;

/// Upper bound on kept cgroup files, whatever the fd limit. Each kept kernfs file pins about
/// 4.5 KiB of kernel memory (its open-file state and the one-page seq buffer of its last read),
/// charged to koordlet's memory cgroup, so 8,192 kept files cost at most ~36 MiB of kernel
/// memory; the collectors keep 12 files per pod (250 pods: 3,000 files, ~13 MiB).
pub const MAX_KEPT_FILES: usize = 8_192;

/// `statfs.f_type` of cgroup v1 (`CGROUP_SUPER_MAGIC`).
const CGROUP_SUPER_MAGIC: u64 = 0x0027_e0eb;
/// `statfs.f_type` of cgroup v2 (`CGROUP2_SUPER_MAGIC`).
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// How many cgroup files may be kept open at once, shared by every [`CgroupFile`] that holds it.
#[derive(Debug)]
pub struct FdBudget {
    limit: usize,
    used: AtomicUsize,
}

impl FdBudget {
    /// A budget of `limit` kept files (0 keeps nothing: every read opens and closes).
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// The process-wide budget: on first use raises the `RLIMIT_NOFILE` soft limit to the hard
    /// limit (the fd limit is per process, so is the budget) and takes half of the soft limit,
    /// at most [`MAX_KEPT_FILES`]; the other half stays for sockets, logs and everything else.
    pub fn process() -> Arc<Self> {
        static PROCESS: OnceLock<Arc<FdBudget>> = OnceLock::new();
        PROCESS
            .get_or_init(|| {
                let soft = raise_nofile_soft_limit();
                let limit = (soft / 2).min(MAX_KEPT_FILES as u64) as usize;
                tracing::info!(
                    nofile_soft = soft,
                    kept_cgroup_files = limit,
                    "cgroup file-descriptor budget"
                );
                Self::new(limit)
            })
            .clone()
    }

    /// Most files kept open at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Files kept open now.
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn try_acquire(self: &Arc<Self>) -> Option<FdSlot> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < self.limit).then_some(used + 1)
            })
            .ok()
            .map(|_| FdSlot(Arc::clone(self)))
    }
}

/// One unit of an [`FdBudget`], given back on drop.
#[derive(Debug)]
struct FdSlot(Arc<FdBudget>);

impl Drop for FdSlot {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Raises the `RLIMIT_NOFILE` soft limit to the hard limit and returns the soft limit now in
/// force (unchanged when raising is refused).
pub fn raise_nofile_soft_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    match limit.maximum {
        Some(hard) if hard > soft => {
            let raised = rustix::process::Rlimit {
                current: Some(hard),
                maximum: Some(hard),
            };
            match setrlimit(Resource::Nofile, raised) {
                Ok(()) => hard,
                Err(error) => {
                    tracing::warn!(%error, soft, hard, "could not raise the RLIMIT_NOFILE soft limit");
                    soft
                }
            }
        }
        _ => soft,
    }
}

/// An open file counted against the budget.
#[derive(Debug)]
struct KeptFile {
    file: File,
    _slot: FdSlot,
    /// Not on kernfs: a removed file still reads, so its link count is checked before reads.
    check_links: bool,
}

/// One resource's file in one cgroup, known to exist on this kernel when it was resolved.
#[derive(Debug)]
pub struct CgroupFile {
    resource: CgroupResource,
    version: CgroupVersion,
    path: PathBuf,
    budget: Arc<FdBudget>,
    kept: Option<KeptFile>,
}

impl CgroupFile {
    pub(crate) fn new(
        resource: CgroupResource,
        version: CgroupVersion,
        path: PathBuf,
        budget: Arc<FdBudget>,
    ) -> Self {
        Self {
            resource,
            version,
            path,
            budget,
            kept: None,
        }
    }

    /// The resource this file holds.
    pub fn resource(&self) -> CgroupResource {
        self.resource
    }

    /// Absolute path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True while a descriptor is kept open for the next read.
    pub fn is_kept(&self) -> bool {
        self.kept.is_some()
    }

    /// Reads the whole file into `buf` (cleared first) and returns it as text. A vanished file
    /// (its cgroup was removed) is [`SystemError::CgroupDirMissing`]. Bytes that are not UTF-8
    /// (never written by the kernel) are replaced, as `String::from_utf8_lossy` does.
    pub fn read_text<'b>(&mut self, buf: &'b mut Vec<u8>) -> Result<&'b str, SystemError> {
        self.read_bytes(buf)?;
        if std::str::from_utf8(buf).is_err() {
            let replaced = String::from_utf8_lossy(buf).into_owned();
            *buf = replaced.into_bytes();
        }
        std::str::from_utf8(buf).map_err(|_| {
            SystemError::parse(
                self.path.clone(),
                super::ParseError::new(self.resource.name(), "not UTF-8"),
            )
        })
    }

    fn read_bytes(&mut self, buf: &mut Vec<u8>) -> Result<(), SystemError> {
        if let Some(kept) = &self.kept {
            match kept.read(buf) {
                Ok(true) => return Ok(()),
                // Stale: the cgroup (or the file) was removed; reopen by path below.
                Ok(false) => {}
                Err(Errno::NODEV | Errno::STALE | Errno::NOENT) => {}
                Err(errno) => return Err(self.io_error(errno.into())),
            }
            self.kept = None;
        }
        let file = File::open(&self.path).map_err(|e| self.io_error(e))?;
        read_all_at(&file, buf).map_err(|errno| self.io_error(errno.into()))?;
        if let Some(slot) = self.budget.try_acquire() {
            let check_links = !on_kernfs(&file);
            self.kept = Some(KeptFile {
                file,
                _slot: slot,
                check_links,
            });
        }
        Ok(())
    }

    fn io_error(&self, source: std::io::Error) -> SystemError {
        if source.kind() == std::io::ErrorKind::NotFound {
            SystemError::CgroupDirMissing(self.path.clone())
        } else {
            SystemError::Io {
                path: self.path.clone(),
                source,
            }
        }
    }

    /// The file's integer value in v1 units (see [`super::resource::decode`]).
    pub fn read_int(&mut self, buf: &mut Vec<u8>) -> Result<i64, SystemError> {
        let (resource, version) = (self.resource, self.version);
        let text = self.read_text(buf)?;
        match decode(resource, version, text) {
            Ok(CgroupValue::Int(v)) => Ok(v),
            Ok(CgroupValue::Cpus(_)) => Err(SystemError::ReadOnly(resource.name())),
            Err(e) => Err(SystemError::parse(self.path.clone(), e)),
        }
    }

    /// [`CgroupFile::read_int`] for counters, negative values (never written by the kernel)
    /// read as 0.
    pub fn read_u64(&mut self, buf: &mut Vec<u8>) -> Result<u64, SystemError> {
        Ok(u64::try_from(self.read_int(buf)?).unwrap_or(0))
    }

    /// Reads this `memory.stat` file.
    pub fn read_memory_stat(&mut self, buf: &mut Vec<u8>) -> Result<MemoryStat, SystemError> {
        if self.resource != CgroupResource::MemoryStat {
            return Err(SystemError::parse(
                self.path.clone(),
                super::ParseError::new(self.resource.name(), "not a memory.stat file"),
            ));
        }
        let version = self.version;
        let text = self.read_text(buf)?;
        MemoryStat::parse(text, version).map_err(|e| SystemError::parse(self.path.clone(), e))
    }

    /// Reads this `memory.numa_stat` file (v1 page counts converted with `page_size`).
    pub fn read_numa_stat(&mut self, buf: &mut Vec<u8>, page_size: u64) -> Result<NumaStat, SystemError> {
        if self.resource != CgroupResource::MemoryNumaStat {
            return Err(SystemError::parse(
                self.path.clone(),
                super::ParseError::new(self.resource.name(), "not a memory.numa_stat file"),
            ));
        }
        let version = self.version;
        let text = self.read_text(buf)?;
        NumaStat::parse(text, version, page_size).map_err(|e| SystemError::parse(self.path.clone(), e))
    }
}

impl KeptFile {
    /// Reads the whole file from offset 0; `Ok(false)` when the file was unlinked (checked on
    /// filesystems other than kernfs only).
    fn read(&self, buf: &mut Vec<u8>) -> Result<bool, Errno> {
        if self.check_links && rustix::fs::fstat(&self.file)?.st_nlink == 0 {
            return Ok(false);
        }
        read_all_at(&self.file, buf)?;
        Ok(true)
    }
}

/// Reads `file` from offset 0 to its end into `buf` (cleared first) with `pread`, which leaves
/// the file position alone and makes a kernfs seq file regenerate its content.
///
/// A read that returns less than it asked for ends the file: true for regular files and for
/// the single-record seq files the collectors read (cgroup value files and `memory.stat`,
/// whose one record is rendered whole and handed out up to the requested size). That saves
/// the second, empty `pread` per file. Multi-record seq files (`cgroup.procs`) are not read
/// through [`CgroupFile`].
fn read_all_at(file: &File, buf: &mut Vec<u8>) -> Result<(), Errno> {
    buf.clear();
    buf.reserve(READ_BUFFER_BYTES);
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(buf.len().max(READ_BUFFER_BYTES));
        }
        let asked = buf.capacity() - buf.len();
        let offset = buf.len() as u64;
        match rustix::io::pread(file.as_fd(), rustix::buffer::spare_capacity(buf), offset) {
            Ok(n) if n < asked => return Ok(()),
            Ok(_) => {}
            Err(Errno::INTR) => {}
            Err(errno) => return Err(errno),
        }
    }
}

/// True when `file` is on cgroup v1 or v2 (kernfs: reads of removed files fail with `ENODEV`).
fn on_kernfs(file: &File) -> bool {
    rustix::fs::fstatfs(file).is_ok_and(|s| {
        let magic = s.f_type as u64;
        magic == CGROUP_SUPER_MAGIC || magic == CGROUP2_SUPER_MAGIC
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code

    use super::*;

    fn file_in(dir: &Path, budget: &Arc<FdBudget>) -> CgroupFile {
        CgroupFile::new(
            CgroupResource::CpuUsage,
            CgroupVersion::V1,
            dir.join("cpuacct.usage"),
            Arc::clone(budget),
        )
    }

    #[test]
    fn kept_file_sees_in_place_writes_and_reopens_after_the_cgroup_is_recreated() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kubepods/pod1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpuacct.usage"), "100\n").unwrap();
        let budget = FdBudget::new(4);
        let mut file = file_in(&dir, &budget);
        let mut buf = Vec::new();
        assert_eq!(file.read_u64(&mut buf).unwrap(), 100);
        assert!(file.is_kept());
        assert_eq!(budget.in_use(), 1);

        // Rewritten in place (same inode): the kept descriptor reads the new value.
        std::fs::write(dir.join("cpuacct.usage"), "250\n").unwrap();
        assert_eq!(file.read_u64(&mut buf).unwrap(), 250);

        // Removed and created again at the same path: the old inode still reads "250", so the
        // handle must notice and reopen.
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpuacct.usage"), "7\n").unwrap();
        assert_eq!(file.read_u64(&mut buf).unwrap(), 7);
        assert!(file.is_kept());
        assert_eq!(budget.in_use(), 1);

        // Removed for good: the cgroup is missing and the slot is given back.
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(
            file.read_u64(&mut buf),
            Err(SystemError::CgroupDirMissing(_))
        ));
        assert!(!file.is_kept());
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn a_file_replaced_by_rename_is_reopened() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("cpuacct.usage"), "1\n").unwrap();
        let budget = FdBudget::new(1);
        let mut file = file_in(tmp.path(), &budget);
        let mut buf = Vec::new();
        assert_eq!(file.read_u64(&mut buf).unwrap(), 1);
        std::fs::write(tmp.path().join("new"), "2\n").unwrap();
        std::fs::rename(tmp.path().join("new"), tmp.path().join("cpuacct.usage")).unwrap();
        assert_eq!(file.read_u64(&mut buf).unwrap(), 2);
    }

    #[test]
    fn budget_exhaustion_falls_back_to_open_read_close() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs: Vec<_> = (0..3).map(|i| tmp.path().join(format!("pod{i}"))).collect();
        for (i, dir) in dirs.iter().enumerate() {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("cpuacct.usage"), format!("{i}\n")).unwrap();
        }
        let budget = FdBudget::new(2);
        let mut files: Vec<_> = dirs.iter().map(|d| file_in(d, &budget)).collect();
        let mut buf = Vec::new();
        for round in 0..3u64 {
            for (i, dir) in dirs.iter().enumerate() {
                std::fs::write(dir.join("cpuacct.usage"), format!("{}\n", i as u64 + 10 * round)).unwrap();
            }
            for (i, file) in files.iter_mut().enumerate() {
                assert_eq!(file.read_u64(&mut buf).unwrap(), i as u64 + 10 * round);
            }
            assert_eq!(budget.in_use(), 2);
            let kept: Vec<_> = files.iter().map(CgroupFile::is_kept).collect();
            assert_eq!(kept, [true, true, false], "first come, first served");
        }
        // The fallback file is still correct after its cgroup is recreated.
        std::fs::remove_dir_all(&dirs[2]).unwrap();
        std::fs::create_dir_all(&dirs[2]).unwrap();
        std::fs::write(dirs[2].join("cpuacct.usage"), "99\n").unwrap();
        assert_eq!(files[2].read_u64(&mut buf).unwrap(), 99);

        // A dropped handle (pod gone) gives its slot back; the next read keeps the third file.
        files.remove(0);
        assert_eq!(budget.in_use(), 1);
        assert_eq!(files[1].read_u64(&mut buf).unwrap(), 99);
        assert!(files[1].is_kept());
        assert_eq!(budget.in_use(), 2);
    }

    #[test]
    fn zero_budget_keeps_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("cpuacct.usage"), "5\n").unwrap();
        let budget = FdBudget::new(0);
        let mut file = file_in(tmp.path(), &budget);
        assert_eq!(file.read_u64(&mut Vec::new()).unwrap(), 5);
        assert!(!file.is_kept());
    }

    #[test]
    fn large_files_are_read_to_the_end() {
        let tmp = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for i in 0..2000 {
            text.push_str(&format!("key_{i} {i}\n"));
        }
        text.push_str("total_inactive_file 4096\n");
        std::fs::write(tmp.path().join("memory.stat"), &text).unwrap();
        let mut file = CgroupFile::new(
            CgroupResource::MemoryStat,
            CgroupVersion::V1,
            tmp.path().join("memory.stat"),
            FdBudget::new(1),
        );
        let mut buf = Vec::new();
        for _ in 0..2 {
            assert_eq!(file.read_text(&mut buf).unwrap(), text);
        }
    }

    #[test]
    fn process_budget_is_bounded_by_the_fd_limit() {
        let budget = FdBudget::process();
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        assert!(budget.limit() <= MAX_KEPT_FILES);
        assert!(budget.limit() as u64 <= soft / 2);
    }
}
