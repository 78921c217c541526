//! The models on disk: one JSON file, replaced atomically (written to `<file>.tmp` in the same
//! directory, synced, renamed over the old file), so a crash leaves the old or the new file,
//! never half of one. Loading a missing file is a fresh start; a file that does not parse or
//! holds impossible histograms is reported and ignored (the models start empty), never fatal.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use koordlet_core::prediction::HistogramCheckpoint;
use serde::{Deserialize, Serialize};

/// The file's name inside `--prediction-checkpoint-filepath` (a directory, as upstream mounts it).
pub const FILE_NAME: &str = "prediction-models.json";

/// Format version written; a file of another version is refused.
pub const VERSION: u32 = 1;

/// All models of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// [`VERSION`].
    pub version: u32,
    /// By item key (pod UID or a `node/` key).
    pub models: BTreeMap<String, SavedModel>,
}

/// One item's models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedModel {
    /// CPU histogram.
    pub cpu: HistogramCheckpoint,
    /// Memory histogram.
    pub memory: HistogramCheckpoint,
    /// Metric time of the newest sample (ms).
    pub last_sample_ms: i64,
}

/// Why a checkpoint was not written or not read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading, writing, syncing or renaming failed.
    #[error("prediction checkpoint {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a checkpoint.
    #[error("prediction checkpoint {path} is corrupt: {source}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// Written by another format version.
    #[error("prediction checkpoint {path} has version {found}, this koordlet reads {VERSION}")]
    Version {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u32,
    },
    /// A histogram in the file is impossible.
    #[error("prediction checkpoint {path} holds a bad histogram: {source}")]
    Histogram {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: koordlet_core::prediction::histogram::RestoreError,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `checkpoint` to `path` atomically (see the module docs).
pub fn save(path: &Path, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
    let body = serde_json::to_vec(checkpoint).map_err(|source| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        source,
    })?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&body)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(source) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        });
    }
    Ok(())
}

/// Reads the checkpoint at `path`; `Ok(None)` when there is none.
pub fn load(path: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    let body = match std::fs::read(path) {
        Ok(body) => body,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CheckpointError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let checkpoint: Checkpoint =
        serde_json::from_slice(&body).map_err(|source| CheckpointError::Corrupt {
            path: path.to_path_buf(),
            source,
        })?;
    if checkpoint.version != VERSION {
        return Err(CheckpointError::Version {
            path: path.to_path_buf(),
            found: checkpoint.version,
        });
    }
    Ok(Some(checkpoint))
}

/// Loads the checkpoint into `server`: the number of models restored, or why none were (the
/// server then starts empty). Never fails the agent.
pub fn restore_into(server: &mut super::PredictServer, path: &Path) -> Result<usize, CheckpointError> {
    let Some(checkpoint) = load(path)? else {
        return Ok(0);
    };
    server
        .restore(&checkpoint)
        .map_err(|source| CheckpointError::Histogram {
            path: path.to_path_buf(),
            source,
        })
}
