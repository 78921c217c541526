//! The allocation table the agent keeps in a node-local file, and its rebuild from the cgroups
//! when that file is lost or corrupt.
//!
//! The file is JSON, `{"version": 1, "allocations": [{"podUid", "namespace", "name",
//! "container", "policy", "cpus"}]}`, sorted by pod UID and container: a koordlet restart
//! reads it back and every pinned container keeps its CPUs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::CpusetPolicy;
use crate::strategies::cpuset::CpuList;

/// Format version of the state file; another number is refused (rebuilt from the cgroups).
pub const STATE_VERSION: u32 = 1;

/// CPUs one container holds under `exclusive` or `share`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Allocation {
    /// The pod's UID (the key: a recreated pod with the same name is a new pod).
    pub pod_uid: String,
    /// The pod's namespace (for people reading the file and the plan).
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The container's name.
    pub container: String,
    /// `exclusive` or `share`.
    pub policy: CpusetPolicy,
    /// The CPUs, in the kernel list format.
    #[serde(with = "cpu_list_text")]
    pub cpus: CpuList,
}

impl Allocation {
    /// `(pod UID, container)`, the table's key.
    pub fn key(&self) -> (String, String) {
        (self.pod_uid.clone(), self.container.clone())
    }
}

/// Every allocation on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpusetAllocations {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// Sorted by pod UID, then container.
    pub allocations: Vec<Allocation>,
    /// The last round left the shared pool smaller than the node (CPUs held or bound then): once
    /// nothing holds CPUs any more, one more round gives every container the whole node back.
    /// Not kept in the file: the agent sets it at start, so its first round checks every
    /// container whatever an earlier koordlet left.
    #[serde(skip)]
    pub narrowed: bool,
}

/// Why a state file was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// Not JSON of the expected shape.
    #[error("cpuset policy state is not valid JSON of the expected shape: {0}")]
    Syntax(#[source] serde_json::Error),
    /// Written by an unknown format version.
    #[error("cpuset policy state has version {0}, this koordlet reads version 1")]
    Version(u32),
    /// Two entries for one container, or an empty CPU set.
    #[error("cpuset policy state is inconsistent: {0}")]
    Inconsistent(String),
}

impl CpusetAllocations {
    /// Builds a table from entries in any order (later duplicates of a key are dropped).
    pub fn from_entries(entries: impl IntoIterator<Item = Allocation>) -> Self {
        let mut map = BTreeMap::new();
        for a in entries {
            map.entry(a.key()).or_insert(a);
        }
        CpusetAllocations {
            version: STATE_VERSION,
            allocations: map.into_values().collect(),
            narrowed: false,
        }
    }

    /// The CPUs held exclusively.
    pub fn exclusive(&self) -> CpuList {
        self.allocations
            .iter()
            .filter(|a| a.policy == CpusetPolicy::Exclusive)
            .fold(CpuList::new(), |acc, a| acc.union(&a.cpus))
    }

    /// Parses the state file, checking it is consistent (one entry per container, no empty set,
    /// no CPU held exclusively twice).
    pub fn from_json(text: &str) -> Result<Self, StateFileError> {
        let table: CpusetAllocations = serde_json::from_str(text).map_err(StateFileError::Syntax)?;
        if table.version != STATE_VERSION {
            return Err(StateFileError::Version(table.version));
        }
        let mut seen = BTreeMap::new();
        let mut exclusive = CpuList::new();
        for a in &table.allocations {
            if a.cpus.is_empty() {
                return Err(StateFileError::Inconsistent(format!(
                    "{}/{} container {}: no CPUs",
                    a.namespace, a.name, a.container
                )));
            }
            if seen.insert(a.key(), ()).is_some() {
                return Err(StateFileError::Inconsistent(format!(
                    "{}/{} container {} listed twice",
                    a.namespace, a.name, a.container
                )));
            }
            if a.policy == CpusetPolicy::Exclusive {
                if !a.cpus.intersection(&exclusive).is_empty() {
                    return Err(StateFileError::Inconsistent(format!(
                        "CPUs {} held exclusively twice",
                        a.cpus.intersection(&exclusive)
                    )));
                }
                exclusive = exclusive.union(&a.cpus);
            }
        }
        Ok(Self::from_entries(table.allocations))
    }

    /// The file's text (pretty JSON, stable order).
    pub fn to_json(&self) -> String {
        let table = Self::from_entries(self.allocations.iter().cloned());
        serde_json::to_string_pretty(&table).unwrap_or_else(|_| String::from("{}"))
    }
}

mod cpu_list_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::strategies::cpuset::CpuList;

    pub fn serialize<S: Serializer>(cpus: &CpuList, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(cpus)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<CpuList, D::Error> {
        let text = String::deserialize(d)?;
        CpuList::parse(&text).map_err(serde::de::Error::custom)
    }
}
