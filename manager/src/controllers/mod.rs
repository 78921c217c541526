//! The three controllers and what they share: [`Context`], errors, `error_policy`.
//!
//! Each controller is keyed by Node name and follows observe → decide → act: it reads the
//! Node and the current child object, asks a pure function in [`crate::desired`] or
//! [`crate::plan`] what should be, and writes only when that differs — and only while this
//! replica holds the Lease. Every write is a server-side apply of the fields the manager owns
//! ([`apply`]), under [`FIELD_MANAGER`] or, for Node status, [`STATUS_FIELD_MANAGER`].

pub mod cleanup;
pub mod config_watch;
pub mod node_child;
pub mod node_owned;
pub mod nodemetric;
pub mod noderesource;
pub mod nodeslo;
pub mod nrt_zones;
pub mod topology_index;
pub mod usage_index;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use jiff::Timestamp;
use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::OwnerReference};
use koord_runtime::Endpoint;
use kube::{Api, Client, Resource, runtime::controller::Action};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::{
    config_state::ConfigState, leader::Leadership, metrics::Metrics, pod_index::PodIndex,
    snapshot::FieldError,
};

pub use topology_index::TopologyIndex;
pub use usage_index::UsageIndex;

#[cfg(test)]
mod tests;

/// Field manager of what the manager applies to objects themselves: NodeSLO and NodeMetric
/// specs, and the Node annotations (`cpu-normalization-ratio`, `originExtendedAllocatable`).
pub const FIELD_MANAGER: &str = "koord-manager";

/// Field manager of the Node status fields (batch and mid resources). A name of its own:
/// before Kubernetes 1.22, managedFields do not tell the status subresource from the object,
/// so one name applying both would have each apply prune what the other applied.
pub const STATUS_FIELD_MANAGER: &str = "koord-manager-status";

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object field could not be read.
    #[error("node {node}: {source}")]
    Field {
        /// The node.
        node: String,
        /// The bad field.
        source: FieldError,
    },
    /// The object has no name.
    #[error("object without a name")]
    Unnamed,
}

impl Error {
    /// A short category for metric labels.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Field { .. } => "field",
            Error::Unnamed => "unnamed",
        }
    }
}

/// Everything a reconcile needs.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The ConfigMap as last seen, per key.
    pub config: Arc<RwLock<ConfigState>>,
    /// Whether this replica may write.
    pub leadership: Leadership,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Publishes Events.
    pub recorder: koord_runtime::EventPublisher,
    /// Pods per node (noderesource).
    pub pods: PodIndex,
    /// NodeMetric reports per node (noderesource).
    pub usage: UsageIndex,
    /// Each node's NodeResourceTopology: `cpu-basic-info` (CPU normalization) and NUMA zones
    /// (NUMA-level batch resources).
    pub topology: TopologyIndex,
    /// Why each node's CPU normalization ratio could not be decided, as last logged (one
    /// warning per change of reason).
    pub normalization_problems: Mutex<HashMap<String, String>>,
    /// When this process last wrote each node's batch resources.
    pub last_batch_write: Mutex<HashMap<String, Timestamp>>,
    /// When this process last wrote each node's mid resources.
    pub last_mid_write: Mutex<HashMap<String, Timestamp>>,
    /// What this process last applied of each node's batch and mid pairs, with the node's UID
    /// (a held-back pair is sent as applied, not as a possibly older cached Node has it).
    pub applied_pairs: Mutex<HashMap<String, (String, node_owned::AppliedPairs)>>,
    /// When this process last wrote the batch entries of each node's NUMA zones.
    pub last_zone_write: Mutex<HashMap<String, Timestamp>>,
    /// How often noderesource re-checks a node without events (staleness, refresh).
    pub resync: Duration,
}

impl Context {
    /// Drops what this process keeps about `node` (the Node was deleted): write times, applied
    /// pairs, the logged normalization problem and the node's metric series.
    pub fn forget_node(&self, node: &str) {
        for map in [
            &self.last_batch_write,
            &self.last_mid_write,
            &self.last_zone_write,
        ] {
            map.lock().unwrap_or_else(|p| p.into_inner()).remove(node);
        }
        self.applied_pairs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(node);
        self.normalization_problems
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(node);
        self.metrics.forget_node(node);
    }

    /// [`Context::forget_node`] for every node this process holds state of that is not in
    /// `nodes` (after a Node list: deletions missed while the watch was down). Returns them.
    /// The metrics know every such node: the node resource controller records a node there
    /// before it keeps anything else of it.
    pub fn forget_nodes_except(&self, nodes: &std::collections::HashSet<String>) -> Vec<String> {
        let mut gone = self.metrics.nodes_except(nodes);
        gone.sort();
        for node in &gone {
            self.forget_node(node);
        }
        gone
    }

    /// A snapshot of the config state (cloned so no lock is held across awaits).
    pub fn config(&self) -> ConfigState {
        self.config
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }
}

/// Applies `body` as `manager` (see [`koord_runtime::apply`]: forced after one warning on a
/// conflict, leftovers under `owned` removed) and counts a conflict under `resource`.
pub async fn apply<K>(
    ctx: &Context,
    api: &Api<K>,
    (manager, endpoint): (&str, Endpoint),
    resource: &str,
    body: &Value,
    owned: &[&[&str]],
) -> Result<K, Error>
where
    K: Clone + std::fmt::Debug + DeserializeOwned + Serialize,
{
    let name = body
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or(Error::Unnamed)?;
    let applied = koord_runtime::apply(api, manager, endpoint, name, body, owned).await?;
    if applied.conflict.is_some() {
        ctx.metrics.apply_conflict(resource);
    }
    Ok(applied.object)
}

/// Logs, counts, and retries a failed reconcile.
pub fn error_policy(controller: &'static str, node: &Node, error: &Error, ctx: &Context) -> Action {
    let name = node.meta().name.as_deref().unwrap_or("");
    tracing::warn!(controller, node = name, %error, "reconcile failed");
    ctx.metrics.reconcile_failed(controller, error.metric_label());
    Action::requeue(Duration::from_secs(15))
}

/// An ownerReference to the Node, so that the API server garbage-collects the child with it.
pub fn node_owner(node: &Node) -> Option<OwnerReference> {
    node.controller_owner_ref(&())
}

/// The node's name, or an error.
pub fn name_of(node: &Node) -> Result<String, Error> {
    node.metadata.name.clone().ok_or(Error::Unnamed)
}
