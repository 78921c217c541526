//! Repeated reads of one cgroup file, for collectors that read the same files every round.
//!
//! A [`CgroupFile`] is resolved and probed once ([`super::Cgroups::file`]); each read then only
//! opens the known path, reads into the caller's reusable buffer and parses in place, without
//! rebuilding the path, taking the probe lock or copying the bytes into a new `String`.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::cgroup_stats::MemoryStat;
use super::resource::decode;
use super::{CgroupResource, CgroupValue, CgroupVersion, SystemError};

/// Capacity reserved in a read buffer: a v1 `memory.stat` is ~1 KiB, the other files are tiny.
const READ_BUFFER_BYTES: usize = 4096;

/// One resource's file in one cgroup, known to exist on this kernel when it was resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupFile {
    resource: CgroupResource,
    version: CgroupVersion,
    path: PathBuf,
}

impl CgroupFile {
    pub(crate) fn new(resource: CgroupResource, version: CgroupVersion, path: PathBuf) -> Self {
        Self {
            resource,
            version,
            path,
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

    /// Reads the whole file into `buf` (cleared first) and returns it as text. A vanished file
    /// (its cgroup was removed) is [`SystemError::CgroupDirMissing`]. Bytes that are not UTF-8
    /// (never written by the kernel) are replaced, as `String::from_utf8_lossy` does.
    pub fn read_text<'b>(&self, buf: &'b mut Vec<u8>) -> Result<&'b str, SystemError> {
        buf.clear();
        buf.reserve(READ_BUFFER_BYTES);
        let io_error = |source: std::io::Error| {
            if source.kind() == std::io::ErrorKind::NotFound {
                SystemError::CgroupDirMissing(self.path.clone())
            } else {
                SystemError::Io {
                    path: self.path.clone(),
                    source,
                }
            }
        };
        let mut file = std::fs::File::open(&self.path).map_err(io_error)?;
        file.read_to_end(buf).map_err(io_error)?;
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

    /// The file's integer value in v1 units (see [`super::resource::decode`]).
    pub fn read_int(&self, buf: &mut Vec<u8>) -> Result<i64, SystemError> {
        let text = self.read_text(buf)?;
        match decode(self.resource, self.version, text) {
            Ok(CgroupValue::Int(v)) => Ok(v),
            Ok(CgroupValue::Cpus(_)) => Err(SystemError::ReadOnly(self.resource.name())),
            Err(e) => Err(SystemError::parse(self.path.clone(), e)),
        }
    }

    /// [`CgroupFile::read_int`] for counters, negative values (never written by the kernel)
    /// read as 0.
    pub fn read_u64(&self, buf: &mut Vec<u8>) -> Result<u64, SystemError> {
        Ok(u64::try_from(self.read_int(buf)?).unwrap_or(0))
    }

    /// Reads this `memory.stat` file.
    pub fn read_memory_stat(&self, buf: &mut Vec<u8>) -> Result<MemoryStat, SystemError> {
        if self.resource != CgroupResource::MemoryStat {
            return Err(SystemError::parse(
                self.path.clone(),
                super::ParseError::new(self.resource.name(), "not a memory.stat file"),
            ));
        }
        let text = self.read_text(buf)?;
        MemoryStat::parse(text, self.version).map_err(|e| SystemError::parse(self.path.clone(), e))
    }
}
