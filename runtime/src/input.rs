//! Reading the input of an offline command (`calc`, `plan`, `check`): a file, or stdin for `-`.

use std::io::Read;
use std::path::PathBuf;

use thiserror::Error;

/// The input could not be read.
#[derive(Debug, Error)]
#[error("cannot read {}: {source}", display_name(.path))]
pub struct ReadInputError {
    /// The path given (`-` for stdin).
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

fn display_name(path: &std::path::Path) -> String {
    if path.as_os_str() == "-" {
        "stdin".to_owned()
    } else {
        path.display().to_string()
    }
}

/// The whole of `path` as text, or of stdin when `path` is `-` (the Unix convention, so the
/// offline commands sit in pipes: `kubectl get ... -o yaml | koord-manager calc -f -`).
pub fn read_file_or_stdin(path: impl Into<PathBuf>) -> Result<String, ReadInputError> {
    let path = path.into();
    let result = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(&path)
    };
    result.map_err(|source| ReadInputError { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.yaml");
        std::fs::write(&path, "kind: Node\n").unwrap();
        assert_eq!(read_file_or_stdin(&path).unwrap(), "kind: Node\n");
    }

    #[test]
    fn a_missing_file_names_the_path() {
        let err = read_file_or_stdin("/nonexistent/in.yaml").unwrap_err();
        assert!(
            err.to_string().starts_with("cannot read /nonexistent/in.yaml: "),
            "{err}"
        );
        assert_eq!(err.source.kind(), std::io::ErrorKind::NotFound);
    }
}
