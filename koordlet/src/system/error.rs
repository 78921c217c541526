//! Errors of the system layer. The executor tells "this kernel has no such file" and "the cgroup
//! is gone" apart from real failures, so they are distinct variants.

use std::path::PathBuf;

pub use koordlet_core::{NameError, ParseError};

/// Everything that can go wrong reading or writing the node's kernel files.
#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    /// An I/O error other than "not found" on a file we expected to be there.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The cgroup directory does not exist (a pod or container that is gone or not yet created).
    /// Never fatal: the executor skips such writes.
    #[error("cgroup directory {0} does not exist")]
    CgroupDirMissing(PathBuf),
    /// This kernel (or this cgroup version) has no such file. Reported once per resource, then
    /// skipped quietly.
    #[error("{resource} is not supported here ({path})")]
    Unsupported {
        /// The resource's name.
        resource: &'static str,
        /// The path that was probed (or the reason it has none).
        path: String,
    },
    /// The value is outside the resource's domain; nothing was written.
    #[error("refused to write {value} to {resource}: {reason}")]
    InvalidValue {
        /// The resource's name.
        resource: &'static str,
        /// The refused value.
        value: String,
        /// Which bound it broke.
        reason: String,
    },
    /// The resource is a statistic and cannot be written.
    #[error("{0} is read-only")]
    ReadOnly(&'static str),
    /// A file's content could not be parsed.
    #[error("{path}: {source}")]
    Parse {
        /// The file (or a description of the input).
        path: PathBuf,
        /// What was wrong.
        source: ParseError,
    },
    /// A write whose file is (or resolves to) outside the configured cgroup or resctrl root;
    /// nothing was written.
    #[error("refused to write {path}: outside the configured root {root} ({reason})")]
    OutsideRoot {
        /// The configured root.
        root: PathBuf,
        /// The file that was to be written.
        path: PathBuf,
        /// Why it is outside.
        reason: &'static str,
    },
    /// A relative cgroup path, pod UID or container ID that could escape the cgroup tree or is
    /// malformed.
    #[error(transparent)]
    InvalidName(#[from] NameError),
}

impl SystemError {
    /// True for the two conditions the executor skips without failing the round: the cgroup is
    /// gone, or the kernel lacks the file.
    pub fn is_skippable(&self) -> bool {
        matches!(
            self,
            SystemError::CgroupDirMissing(_) | SystemError::Unsupported { .. }
        )
    }

    pub(crate) fn parse(path: impl Into<PathBuf>, source: ParseError) -> Self {
        SystemError::Parse {
            path: path.into(),
            source,
        }
    }
}
