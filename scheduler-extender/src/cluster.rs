//! The extender's view of the cluster: reflector caches of Nodes and NodeMetrics, the pod
//! ledger and the slo-controller-config ConfigMap (for each node's `degradeTimeMinutes`).

use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use koord_api::SloConfig;
use koord_api::nodemetric::NodeMetric;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};

use crate::facts::ScalingFactors;
use crate::ledger::PodLedger;

/// Built-in `degradeTimeMinutes` (colocation-config).
pub const DEFAULT_DEGRADE_TIME_MINUTES: i64 = 15;

/// Everything a filter or prioritize call reads; cheap to clone.
#[derive(Clone)]
pub struct ClusterCache {
    /// Nodes by name.
    pub nodes: Store<Node>,
    /// NodeMetrics by name (named like their Node).
    pub node_metrics: Store<NodeMetric>,
    /// Pods per node.
    pub pods: PodLedger,
    /// The effective slo-controller-config (built-in defaults until the ConfigMap is seen).
    pub slo_config: Arc<RwLock<SloConfig>>,
}

impl ClusterCache {
    /// A cache over existing stores (tests and benchmarks fill them through their writers).
    pub fn from_parts(nodes: Store<Node>, node_metrics: Store<NodeMetric>, pods: PodLedger) -> Self {
        ClusterCache {
            nodes,
            node_metrics,
            pods,
            slo_config: Arc::default(),
        }
    }

    /// Starts the watches on `client`; they run until the process stops.
    pub fn start(
        client: Client,
        config_namespace: &str,
        slo_config_name: &str,
        factors: ScalingFactors,
    ) -> Self {
        let nodes = spawn_reflector::<Node>(Api::all(client.clone()), "nodes");
        let node_metrics = spawn_reflector::<NodeMetric>(Api::all(client.clone()), "nodemetrics");
        let pods = PodLedger::new(factors);
        {
            let pods = pods.clone();
            let api: Api<Pod> = Api::all(client.clone());
            tokio::spawn(async move {
                let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
                while let Some(event) = events.next().await {
                    match event {
                        Ok(event) => pods.apply(event),
                        Err(error) => {
                            tracing::warn!(what = "pods", %error, "watch failed; retrying with backoff")
                        }
                    }
                }
            });
        }
        let slo_config: Arc<RwLock<SloConfig>> = Arc::default();
        {
            let slo_config = slo_config.clone();
            let api: Api<ConfigMap> = Api::namespaced(client, config_namespace);
            let selector = format!("metadata.name={slo_config_name}");
            tokio::spawn(async move {
                let config = watcher::Config::default().fields(&selector);
                let mut events = std::pin::pin!(watcher(api, config).default_backoff().applied_objects());
                while let Some(event) = events.next().await {
                    match event {
                        Ok(map) => apply_config_map(&slo_config, &map),
                        Err(error) => {
                            tracing::warn!(what = "configmap", %error, "watch failed; retrying with backoff")
                        }
                    }
                }
            });
        }
        ClusterCache {
            nodes,
            node_metrics,
            pods,
            slo_config,
        }
    }

    /// Resolves once Nodes and NodeMetrics have their initial lists and the pod ledger its
    /// first full list.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.nodes.wait_until_ready().await?;
        self.node_metrics.wait_until_ready().await?;
        while !self.pods.is_ready() {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The Node named `name`.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    /// The NodeMetric of node `name`.
    pub fn node_metric(&self, name: &str) -> Option<Arc<NodeMetric>> {
        self.node_metrics.get(&ObjectRef::new(name))
    }
}

/// Keeps each key's last good value when a key breaks, like the manager.
fn apply_config_map(slo_config: &RwLock<SloConfig>, map: &ConfigMap) {
    let data = map.data.clone().unwrap_or_default();
    let mut current = slo_config.write().unwrap_or_else(|poison| poison.into_inner());
    let (merged, errors) = SloConfig::parse(&data).merge_with_last_good(&current);
    for error in &errors {
        tracing::warn!(%error, "slo-controller-config key ignored; its last good value stays");
    }
    *current = merged;
}

/// The node's `degradeTimeMinutes`: the first matching node strategy of colocation-config, else
/// the cluster strategy, else 15.
pub fn degrade_time_minutes(config: &SloConfig, node: &Node) -> i64 {
    let empty = Default::default();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    config
        .colocation
        .for_labels(labels)
        .0
        .degrade_time_minutes
        .unwrap_or(DEFAULT_DEGRADE_TIME_MINUTES)
}

fn spawn_reflector<K>(api: Api<K>, what: &'static str) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    tokio::spawn(async move {
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()));
        let mut stream = std::pin::pin!(stream.default_backoff().applied_objects());
        while let Some(item) = stream.next().await {
            if let Err(error) = item {
                tracing::warn!(what, %error, "watch failed; retrying with backoff");
            }
        }
    });
    store
}
