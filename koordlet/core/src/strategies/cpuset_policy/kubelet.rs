//! The kubelet's CPU manager policy, read from its state file: under `static` the kubelet
//! owns container cpusets and koordlet must not fight it.

use crate::error::ParseError;
use crate::strategies::cpuset::CpuList;

/// The kubelet's CPU manager policy, from its `cpu_manager_state` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum KubeletCpuManager {
    /// Policy `none` (or no state file): the kubelet leaves cpusets alone.
    #[default]
    None,
    /// Policy `static`: the kubelet pins Guaranteed integer-CPU containers and keeps the others
    /// on `shared` (its `defaultCpuSet`); koordlet must not manage cpusets.
    Static {
        /// The kubelet's shared pool (`defaultCpuSet`; empty when the file lists none).
        shared: CpuList,
    },
}

impl KubeletCpuManager {
    /// Parses `cpu_manager_state` (`{"policyName": "static", "defaultCpuSet": "0-3", ...}`).
    pub fn parse_state(text: &str) -> Result<Self, ParseError> {
        const WHAT: &str = "kubelet cpu_manager_state";
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ParseError::new(WHAT, e.to_string()))?;
        let policy = v
            .get("policyName")
            .and_then(|p| p.as_str())
            .ok_or_else(|| ParseError::new(WHAT, "no policyName"))?;
        match policy {
            "none" => Ok(KubeletCpuManager::None),
            "static" => {
                let shared = match v.get("defaultCpuSet").and_then(|d| d.as_str()) {
                    Some(text) => CpuList::parse(text)?,
                    None => CpuList::new(),
                };
                Ok(KubeletCpuManager::Static { shared })
            }
            other => Err(ParseError::new(WHAT, format!("unknown policyName {other:?}"))),
        }
    }

    /// True for the static policy.
    pub fn is_static(&self) -> bool {
        matches!(self, KubeletCpuManager::Static { .. })
    }
}
