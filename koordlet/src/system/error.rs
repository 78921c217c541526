//! Errors of the system layer. The executor tells "this kernel has no such file" and "the cgroup
//! is gone" apart from real failures, so they are distinct variants.

use std::path::PathBuf;

/// Why a kernel file could not be parsed. Carries what was being parsed and a short reason;
/// never the whole (possibly huge or binary) input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse {what}: {detail}")]
pub struct ParseError {
    /// What the input was supposed to be ("cpuset list", "/proc/stat", ...).
    pub what: &'static str,
    /// What was wrong with it.
    pub detail: String,
}

impl ParseError {
    /// Builds a parse error; `detail` is truncated so a garbage input cannot flood the logs.
    pub fn new(what: &'static str, detail: impl Into<String>) -> Self {
        let mut detail: String = detail.into();
        if detail.len() > 120 {
            let mut cut = 120;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
            detail.push('…');
        }
        Self { what, detail }
    }
}

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
    /// A relative cgroup path, pod UID or container ID that could escape the cgroup tree or is
    /// malformed.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidName {
        /// "cgroup path", "pod uid", "container id".
        what: &'static str,
        /// The offending value (truncated).
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
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
