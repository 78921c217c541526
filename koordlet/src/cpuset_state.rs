//! The node-local edges of the CPU set policies: the allocation state file (so a koordlet
//! restart keeps every pinned container on its CPUs) and the detection of the kubelet's
//! static CPU manager (under which koordlet leaves cpusets to the kubelet).

use std::io::Write;
use std::path::{Path, PathBuf};

use koordlet_core::strategies::cpuset_policy::{CpusetAllocations, KubeletCpuManager};
use tracing::{error, info, warn};

/// The kubelet's CPU manager state file, relative to its root dir.
pub const KUBELET_CPU_MANAGER_STATE: &str = "cpu_manager_state";

/// Why the state file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum StateWriteError {
    /// Creating the directory, writing or renaming the file failed.
    #[error("cannot write the cpuset policy state file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// What was found in the state file at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadedState {
    /// A consistent table.
    Table(CpusetAllocations),
    /// No file yet (a first start): nothing is pinned.
    Missing,
    /// A file that cannot be used (reported): the table is rebuilt from the cgroups.
    Corrupt(String),
}

/// The allocation table on disk.
#[derive(Debug)]
pub struct CpusetStateFile {
    path: PathBuf,
    saved: Option<CpusetAllocations>,
}

impl CpusetStateFile {
    /// The file at `path` (created on the first save).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        CpusetStateFile {
            path: path.into(),
            saved: None,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the table; a missing file is a first start, anything unusable is reported.
    pub fn load(&mut self) -> LoadedState {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return LoadedState::Missing,
            Err(e) => return LoadedState::Corrupt(format!("cannot read {}: {e}", self.path.display())),
        };
        match CpusetAllocations::from_json(&text) {
            Ok(table) => {
                self.saved = Some(table.clone());
                LoadedState::Table(table)
            }
            Err(e) => LoadedState::Corrupt(format!("{}: {e}", self.path.display())),
        }
    }

    /// Writes the table when it differs from what was last read or written (a temporary file
    /// renamed over the old one: a crash never leaves half a file).
    pub fn save_if_changed(&mut self, table: &CpusetAllocations) -> Result<bool, StateWriteError> {
        // What the file holds (not the in-memory `narrowed` flag).
        if self.saved.as_ref().map(|s| &s.allocations) == Some(&table.allocations) {
            return Ok(false);
        }
        let io = |source| StateWriteError::Io {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(table.to_json().as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        self.saved = Some(table.clone());
        Ok(true)
    }
}

/// Reads the kubelet's CPU manager policy from `<root>/cpu_manager_state`. No file: policy
/// `none` (the kubelet writes it under every policy, so a missing file means no kubelet state
/// here, e.g. a kubelet root that is not mounted: logged). A file that does not parse counts as
/// `static`: koordlet then refuses to manage cpusets rather than risk fighting the kubelet.
pub fn detect_kubelet_cpu_manager(root: &Path) -> KubeletCpuManager {
    let path = root.join(KUBELET_CPU_MANAGER_STATE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            info!(path = %path.display(), "no kubelet CPU manager state: assuming cpuManagerPolicy none");
            return KubeletCpuManager::None;
        }
        Err(e) => {
            error!(path = %path.display(), error = %e,
                   "cannot read the kubelet CPU manager state: CPU set policies refused, cpu suppress narrows BE containers only");
            return KubeletCpuManager::Static {
                shared: Default::default(),
            };
        }
    };
    match KubeletCpuManager::parse_state(&text) {
        Ok(KubeletCpuManager::None) => KubeletCpuManager::None,
        Ok(found) => {
            error!(path = %path.display(),
                   "the kubelet runs the static CPU manager policy: CPU set policies are refused \
                    (set cpuManagerPolicy: none to use them); cpu suppress narrows BE containers only, \
                    within the kubelet's shared pool");
            found
        }
        Err(e) => {
            warn!(path = %path.display(), error = %e,
                  "kubelet CPU manager state does not parse: treated as the static policy (CPU set policies refused)");
            KubeletCpuManager::Static {
                shared: Default::default(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use koordlet_core::strategies::cpuset::CpuList;
    use koordlet_core::strategies::cpuset_policy::{Allocation, CpusetPolicy};

    fn table() -> CpusetAllocations {
        CpusetAllocations::from_entries([Allocation {
            pod_uid: "u1".into(),
            namespace: "default".into(),
            name: "web".into(),
            container: "app".into(),
            policy: CpusetPolicy::Exclusive,
            cpus: CpuList::parse("2-3").unwrap(),
        }])
    }

    #[test]
    fn cpuset_policy_state_file_persists_and_reports_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/state.json");
        let mut file = CpusetStateFile::new(&path);
        assert_eq!(file.load(), LoadedState::Missing);
        assert!(file.save_if_changed(&table()).unwrap(), "first save writes");
        assert!(!file.save_if_changed(&table()).unwrap(), "unchanged: no write");
        assert!(!path.with_extension("tmp").exists());
        // A restart reads it back.
        let mut again = CpusetStateFile::new(&path);
        assert_eq!(again.load(), LoadedState::Table(table()));
        assert!(!again.save_if_changed(&table()).unwrap());
        // Corrupt content is reported, never a panic.
        for bad in ["{", "", "{\"version\": 9, \"allocations\": []}", "\u{0}\u{1}"] {
            std::fs::write(&path, bad).unwrap();
            match CpusetStateFile::new(&path).load() {
                LoadedState::Corrupt(reason) => assert!(reason.contains("state.json"), "{reason}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        // A directory in the way: an error to log, not a panic.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir_all(blocked.join("x")).unwrap();
        let mut f = CpusetStateFile::new(blocked.join("x"));
        assert!(f.save_if_changed(&table()).is_err());
    }

    #[test]
    fn cpuset_policy_detects_the_kubelet_static_cpu_manager() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(detect_kubelet_cpu_manager(dir.path()), KubeletCpuManager::None);
        let state = dir.path().join(KUBELET_CPU_MANAGER_STATE);
        std::fs::write(
            &state,
            r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#,
        )
        .unwrap();
        assert_eq!(detect_kubelet_cpu_manager(dir.path()), KubeletCpuManager::None);
        std::fs::write(
            &state,
            r#"{"policyName":"static","defaultCpuSet":"0,3","entries":{"uid":{"c":"1-2"}},"checksum":1}"#,
        )
        .unwrap();
        assert_eq!(
            detect_kubelet_cpu_manager(dir.path()),
            KubeletCpuManager::Static {
                shared: CpuList::parse("0,3").unwrap()
            }
        );
        std::fs::write(&state, "garbage").unwrap();
        assert!(
            detect_kubelet_cpu_manager(dir.path()).is_static(),
            "unparsable counts as static"
        );
    }
}
