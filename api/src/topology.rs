//! NodeResourceTopology (`topology.node.k8s.io/v1alpha1`, the Kubernetes topology-aware
//! scheduling API): one object per node, named like the Node. Upstream koordlet publishes its
//! node's CPU facts there as annotations (`node.koordinator.sh/cpu-basic-info`, ...), and
//! koord-manager reads them for CPU normalization. Only the fields this project reads or writes
//! are typed; the object has no `spec`/`status`, its fields sit at the top level.

#[cfg(feature = "crd")]
use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// API group.
pub const GROUP: &str = "topology.node.k8s.io";
/// Version this project reads and writes (served by upstream's CRD and by the one in our chart).
pub const VERSION: &str = "v1alpha1";
/// Resource plural.
pub const PLURAL: &str = "noderesourcetopologies";
/// Kind.
pub const KIND: &str = "NodeResourceTopology";

/// A node's resource topology.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeResourceTopology {
    /// `topology.node.k8s.io/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// `NodeResourceTopology`.
    #[serde(default = "kind")]
    pub kind: String,
    /// Standard object metadata; the name is the node's.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Topology manager policies (required by the v1alpha1 schema; may be empty).
    #[serde(default)]
    pub topology_policies: Vec<String>,
    /// Zones (NUMA nodes, sockets, ...), kept as the API server returns them.
    #[serde(default)]
    pub zones: Vec<serde_json::Value>,
}

fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

fn kind() -> String {
    KIND.to_owned()
}

impl Default for NodeResourceTopology {
    fn default() -> Self {
        NodeResourceTopology {
            api_version: api_version(),
            kind: kind(),
            metadata: ObjectMeta::default(),
            topology_policies: Vec::new(),
            zones: Vec::new(),
        }
    }
}

#[cfg(feature = "crd")]
impl kube::Resource for NodeResourceTopology {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl NodeResourceTopology {
    /// An object for `node` carrying `annotations`, ready to create.
    pub fn for_node(node: &str, annotations: std::collections::BTreeMap<String, String>) -> Self {
        NodeResourceTopology {
            metadata: ObjectMeta {
                name: Some(node.to_owned()),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            topology_policies: vec!["None".to_owned()],
            ..NodeResourceTopology::default()
        }
    }

    /// One annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }
}
