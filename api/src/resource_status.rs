//! The pod annotation `scheduling.koordinator.sh/resource-status`: where the scheduler placed a
//! pod on its node. koordlet reads the `cpuset` (the CPUs an LSE/LSR pod is bound to);
//! koord-manager reads `numaNodeResources` (the NUMA nodes the pod's request is taken from) to
//! share batch resources out per NUMA zone.
//!
//! ```json
//! {"cpuset": "0-3", "numaNodeResources": [{"node": 0, "resources": {"cpu": "4", "memory": "8Gi"}}]}
//! ```
//!
//! A value that is not this shape is unreadable as a whole, as upstream (which unmarshals it
//! into one struct): neither its `cpuset` nor its NUMA nodes are used.

use serde::Deserialize;

/// What the annotation says about a pod's placement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceStatus {
    /// `cpuset`, as written (a CPU list such as `0-3,8`); `None` when absent.
    pub cpuset: Option<String>,
    /// The `node` of each `numaNodeResources` entry, in order (duplicates and negative ids kept:
    /// readers decide what an id that names no NUMA node means).
    pub numa_nodes: Vec<i32>,
}

/// Why an annotation value is unreadable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {key} is not a resource status: {reason}", key = crate::names::ANNOTATION_RESOURCE_STATUS)]
pub struct ResourceStatusError {
    /// What the JSON parser said, with line and column.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    cpuset: Option<String>,
    #[serde(default)]
    numa_node_resources: Option<Vec<RawNumaNode>>,
}

#[derive(Deserialize)]
struct RawNumaNode {
    /// Upstream's `int32`; an entry without `node` means node 0 there too.
    #[serde(default)]
    node: i32,
}

/// Parses the annotation value.
pub fn parse_resource_status(text: &str) -> Result<ResourceStatus, ResourceStatusError> {
    let raw: Raw = serde_json::from_str(text).map_err(|e| ResourceStatusError {
        reason: e.to_string(),
    })?;
    Ok(ResourceStatus {
        cpuset: raw.cpuset,
        numa_nodes: raw
            .numa_node_resources
            .unwrap_or_default()
            .into_iter()
            .map(|n| n.node)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuset_and_numa_nodes() {
        let status = parse_resource_status(
            r#"{"cpuset": "0-3", "numaNodeResources": [{"node": 1, "resources": {"cpu": "4"}}, {"node": 0}]}"#,
        );
        assert_eq!(
            status,
            Ok(ResourceStatus {
                cpuset: Some("0-3".into()),
                numa_nodes: vec![1, 0],
            })
        );
    }

    #[test]
    fn absent_fields_are_empty_and_unknown_fields_ignored() {
        assert_eq!(parse_resource_status("{}"), Ok(ResourceStatus::default()));
        assert_eq!(
            parse_resource_status(r#"{"numaNodeResources": null, "other": 1}"#),
            Ok(ResourceStatus::default())
        );
        // An entry without `node` is node 0, as upstream's int32 zero value.
        assert_eq!(
            parse_resource_status(r#"{"numaNodeResources": [{}]}"#).map(|s| s.numa_nodes),
            Ok(vec![0])
        );
    }

    #[test]
    fn a_wrong_type_anywhere_makes_the_whole_value_unreadable() {
        for text in [
            "not json",
            r#"{"cpuset": 3}"#,
            r#"{"numaNodeResources": {"node": 0}}"#,
            r#"{"numaNodeResources": [{"node": "0"}]}"#,
            r#"{"numaNodeResources": [{"node": 4294967296}]}"#,
        ] {
            let error = parse_resource_status(text).unwrap_err();
            assert!(
                error.to_string().starts_with(
                    "annotation scheduling.koordinator.sh/resource-status is not a resource status: "
                ),
                "{text}: {error}"
            );
        }
    }
}
