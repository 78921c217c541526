//! Errors of the pure core: text that does not parse, names that could leave the cgroup tree.

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

/// A relative cgroup path, pod UID or container ID that could escape the cgroup tree or is
/// malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {reason}")]
pub struct NameError {
    /// "cgroup path", "pod uid", "container id".
    pub what: &'static str,
    /// The offending value (truncated).
    pub value: String,
    /// Why it was refused.
    pub reason: &'static str,
}
