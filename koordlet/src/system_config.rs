//! The edge of the system_config strategy: reads the node's sysctls, keeps the values the node
//! had before koordlet first changed them in a node-local state file, and applies the plan
//! with one audit line per write.
//!
//! The state file (`<state dir>/system-config-originals.json`, a JSON object knob -> value) is
//! written before the first write of a knob and after each restore, so an agent restarted in
//! between still puts the node's own values back when the strategy goes away.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use koord_api::nodeslo::SystemStrategy;
use koordlet_core::strategies::system_config::{
    self, KnobRoot, STRATEGY, SystemConfigInput, SystemConfigPlan, SystemKnob,
};
use tracing::{error, info, warn};

/// The state file's name inside the state directory.
pub const ORIGINALS_FILE: &str = "system-config-originals.json";

/// Why the remembered values cannot be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum SystemConfigError {
    /// The state file cannot be read or written.
    #[error("state file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The state file is not a JSON object of knob names to integers.
    #[error("state file {path} is not a JSON object of sysctl names to integers")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// Where the knobs' files are: `/proc/sys` and `/sys`, or fake trees in tests.
#[derive(Debug, Clone)]
pub struct SystemFiles {
    /// The `/proc/sys` root.
    pub proc_sys: PathBuf,
    /// The `/sys` root.
    pub sys: PathBuf,
}

impl SystemFiles {
    /// The file of `knob`.
    pub fn path(&self, knob: SystemKnob) -> PathBuf {
        match knob.file() {
            (KnobRoot::ProcSys, rel) => self.proc_sys.join(rel),
            (KnobRoot::Sys, rel) => self.sys.join(rel),
        }
    }

    /// The current value of every knob whose file exists and holds an integer.
    pub fn read_all(&self) -> BTreeMap<SystemKnob, i64> {
        SystemKnob::ALL
            .into_iter()
            .filter_map(|k| {
                let text = std::fs::read_to_string(self.path(k)).ok()?;
                Some((k, text.trim().parse().ok()?))
            })
            .collect()
    }
}

fn load(path: &Path) -> Result<BTreeMap<SystemKnob, i64>, SystemConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => {
            return Err(SystemConfigError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let raw: BTreeMap<String, i64> =
        serde_json::from_str(&text).map_err(|source| SystemConfigError::Corrupt {
            path: path.to_owned(),
            source,
        })?;
    Ok(raw
        .into_iter()
        .filter_map(|(name, v)| match SystemKnob::from_name(&name) {
            Some(k) => Some((k, v)),
            None => {
                warn!(
                    knob = name,
                    "unknown sysctl in the system-config state file, ignored"
                );
                None
            }
        })
        .collect())
}

fn save(path: &Path, originals: &BTreeMap<SystemKnob, i64>) -> Result<(), SystemConfigError> {
    let io = |source| SystemConfigError::Io {
        path: path.to_owned(),
        source,
    };
    let named: BTreeMap<&str, i64> = originals.iter().map(|(k, v)| (k.name(), *v)).collect();
    let text = serde_json::to_string_pretty(&named).map_err(|source| SystemConfigError::Corrupt {
        path: path.to_owned(),
        source,
    })?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Decides and applies system_config each round.
#[derive(Debug)]
pub struct SystemConfig {
    files: SystemFiles,
    state_file: PathBuf,
    originals: BTreeMap<SystemKnob, i64>,
    dry_run: bool,
}

impl SystemConfig {
    /// Loads the remembered values from `state_dir`. A corrupt state file is an error: writing
    /// over it would lose the node's own values.
    pub fn open(files: SystemFiles, state_dir: &Path, dry_run: bool) -> Result<Self, SystemConfigError> {
        let state_file = state_dir.join(ORIGINALS_FILE);
        let originals = load(&state_file)?;
        Ok(SystemConfig {
            files,
            state_file,
            originals,
            dry_run,
        })
    }

    /// The node's own values of the knobs koordlet changed.
    pub fn originals(&self) -> &BTreeMap<SystemKnob, i64> {
        &self.originals
    }

    /// One round: `strategy` is the NodeSLO's `systemStrategy` when the gate is on (`None`
    /// restores everything remembered).
    pub fn round(
        &mut self,
        strategy: Option<&SystemStrategy>,
        memory_capacity_bytes: u64,
    ) -> SystemConfigPlan {
        let current = self.files.read_all();
        let plan = system_config::decide(&SystemConfigInput {
            strategy,
            memory_capacity_bytes,
            current: &current,
            originals: &self.originals,
        });
        self.apply(&plan);
        plan
    }

    /// Remembers first (nothing is written unless the node's values are safe on disk), then
    /// writes in plan order.
    pub fn apply(&mut self, plan: &SystemConfigPlan) {
        if self.dry_run {
            for w in &plan.writes {
                info!(target: "koordlet::audit", sysctl = w.knob.name(), change = %format!("{} -> {}", w.current, w.value),
                      strategy = STRATEGY, restore = w.restore, dry_run = true, "sysctl write (dry-run, not written)");
            }
            return;
        }
        if !plan.remember.is_empty() {
            let mut next = self.originals.clone();
            next.extend(plan.remember.iter().map(|(k, v)| (*k, *v)));
            if let Err(e) = save(&self.state_file, &next) {
                error!(error = %e, "cannot remember the node's sysctl values; system_config writes nothing");
                return;
            }
            self.originals = next;
        }
        let mut restored = false;
        for w in &plan.writes {
            let path = self.files.path(w.knob);
            match std::fs::write(&path, format!("{}\n", w.value)) {
                Ok(()) => {
                    info!(target: "koordlet::audit", sysctl = w.knob.name(), change = %format!("{} -> {}", w.current, w.value),
                          strategy = STRATEGY, restore = w.restore, "sysctl write");
                    if w.restore {
                        self.originals.remove(&w.knob);
                        restored = true;
                    }
                }
                Err(e) => {
                    warn!(sysctl = w.knob.name(), path = %path.display(), error = %e, "sysctl write failed")
                }
            }
        }
        if restored && let Err(e) = save(&self.state_file, &self.originals) {
            error!(error = %e, "cannot update the system-config state file after a restore");
        }
    }
}

/// What an unread node is assumed to hold (`koordlet plan` without `--proc-sys-root`): a
/// mainline kernel's defaults, `min_free_kbytes = sqrt(16 × memory KiB)` within 128..=262144
/// and `watermark_scale_factor` 10; the Anolis knobs absent.
pub fn assumed_current(memory_capacity_bytes: u64) -> BTreeMap<SystemKnob, i64> {
    let kib = (memory_capacity_bytes / 1024) as f64;
    let min_free = ((kib * 16.0).sqrt() as i64).clamp(128, 262_144);
    BTreeMap::from([
        (SystemKnob::MinFreeKbytes, min_free),
        (SystemKnob::WatermarkScaleFactor, 10),
    ])
}
