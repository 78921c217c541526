//! The kube-scheduler extender wire format (`k8s.io/kube-scheduler/extender/v1`).
//!
//! The Go types carry no JSON tags, so kube-scheduler writes the Go field names (`Pod`,
//! `Nodes`, `NodeNames`, `FailedNodes`, `Host`, `Score`) and Go's decoder matches keys without
//! regard to case. We write the exact Go names and accept the lower-case spellings too.
//! `Nodes` holds whole Node objects when the extender is not `nodeCacheCapable`; they are kept
//! as raw JSON and handed back untouched, so nothing kube-scheduler sent is lost in a round trip.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

/// Highest score an extender may return (`MaxExtenderPriority`). kube-scheduler multiplies it
/// by the extender's `weight` and by `MaxNodeScore / MaxExtenderPriority` (100 / 10).
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// A NodeList as kube-scheduler sends it; the items stay raw JSON.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RawNodeList {
    /// The Node objects.
    #[serde(default)]
    pub items: Vec<serde_json::Value>,
}

impl RawNodeList {
    /// The `metadata.name` of a raw Node (empty when absent).
    pub fn name_of(node: &serde_json::Value) -> &str {
        node.pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
    }
}

/// `ExtenderArgs`: the pod and its candidate nodes, as objects or (node cache capable) names.
#[derive(Debug, Clone, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod", alias = "pod")]
    pub pod: Pod,
    /// Candidate nodes (extender not node cache capable).
    #[serde(rename = "Nodes", alias = "nodes", default)]
    pub nodes: Option<RawNodeList>,
    /// Candidate node names (extender node cache capable).
    #[serde(rename = "NodeNames", alias = "nodenames", alias = "nodeNames", default)]
    pub node_names: Option<Vec<String>>,
}

impl ExtenderArgs {
    /// The candidate node names, whichever form was sent.
    pub fn candidate_names(&self) -> Vec<&str> {
        match (&self.node_names, &self.nodes) {
            (Some(names), _) => names.iter().map(String::as_str).collect(),
            (None, Some(list)) => list.items.iter().map(RawNodeList::name_of).collect(),
            (None, None) => Vec::new(),
        }
    }
}

/// `ExtenderFilterResult`: the nodes that passed, in the form they were sent, and why the
/// others failed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ExtenderFilterResult {
    /// Passing nodes as objects (when the request carried objects).
    #[serde(
        rename = "Nodes",
        alias = "nodes",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub nodes: Option<RawNodeList>,
    /// Passing node names (when the request carried names).
    #[serde(
        rename = "NodeNames",
        alias = "nodenames",
        alias = "nodeNames",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub node_names: Option<Vec<String>>,
    /// Failed nodes that preemption could help (name → message).
    #[serde(rename = "FailedNodes", alias = "failedNodes", default)]
    pub failed_nodes: BTreeMap<String, String>,
    /// Failed nodes that preemption cannot help (name → message).
    #[serde(
        rename = "FailedAndUnresolvableNodes",
        alias = "failedAndUnresolvableNodes",
        default
    )]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// A request-level error; kube-scheduler then ignores the result.
    #[serde(rename = "Error", alias = "error", default)]
    pub error: String,
}

/// One `HostPriority` of a `HostPriorityList`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostPriority {
    /// The node name.
    #[serde(rename = "Host", alias = "host")]
    pub host: String,
    /// 0..=[`MAX_EXTENDER_PRIORITY`].
    #[serde(rename = "Score", alias = "score")]
    pub score: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extender_args_accept_go_names_and_lower_case() {
        let go = r#"{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a","b"]}"#;
        let args: ExtenderArgs = serde_json::from_str(go).unwrap();
        assert_eq!(args.candidate_names(), vec!["a", "b"]);
        let lower = r#"{"pod":{"metadata":{"name":"p"}},"nodes":{"metadata":{},"items":[{"metadata":{"name":"n1"},"status":{}}]}}"#;
        let args: ExtenderArgs = serde_json::from_str(lower).unwrap();
        assert_eq!(args.candidate_names(), vec!["n1"]);
        assert_eq!(args.pod.metadata.name.as_deref(), Some("p"));
    }

    #[test]
    fn extender_results_use_go_field_names() {
        let result = ExtenderFilterResult {
            node_names: Some(vec!["a".into()]),
            failed_and_unresolvable_nodes: [("b".to_owned(), "stale".to_owned())].into(),
            ..Default::default()
        };
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"NodeNames":["a"],"FailedNodes":{},"FailedAndUnresolvableNodes":{"b":"stale"},"Error":""})
        );
        let priorities = vec![HostPriority {
            host: "a".into(),
            score: 7,
        }];
        assert_eq!(
            serde_json::to_string(&priorities).unwrap(),
            r#"[{"Host":"a","Score":7}]"#
        );
    }
}
