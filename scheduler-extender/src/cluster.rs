//! The extender's view of the cluster: tables of Nodes and NodeMetrics (converted once per watch
//! event), the pod ledger and the slo-controller-config ConfigMap (for each node's
//! `degradeTimeMinutes`).

use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use koord_api::SloConfig;
use koord_api::nodemetric::NodeMetric;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};

use crate::decide::MetricFacts;
use crate::facts::{NodeEntry, ScalingFactors, metric_facts, node_entry};
use crate::ledger::PodLedger;
use crate::table::Table;

/// Built-in `degradeTimeMinutes` (colocation-config).
pub const DEFAULT_DEGRADE_TIME_MINUTES: i64 = 15;

/// Everything a filter or prioritize call reads; cheap to clone.
#[derive(Clone)]
pub struct ClusterCache {
    /// Nodes by name.
    pub nodes: Table<NodeEntry>,
    /// NodeMetrics by name (named like their Node).
    pub node_metrics: Table<MetricFacts>,
    /// Pods per node.
    pub pods: PodLedger,
    /// The effective slo-controller-config (built-in defaults until the ConfigMap is seen).
    pub slo_config: Arc<RwLock<SloConfig>>,
}

impl ClusterCache {
    /// A cache over existing tables (tests and benchmarks fill them with watcher events).
    pub fn from_parts(nodes: Table<NodeEntry>, node_metrics: Table<MetricFacts>, pods: PodLedger) -> Self {
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
        let nodes = Table::default();
        spawn_table::<Node, _>(Api::all(client.clone()), "nodes", nodes.clone(), node_entry);
        let node_metrics = Table::default();
        spawn_table::<NodeMetric, _>(
            Api::all(client.clone()),
            "nodemetrics",
            node_metrics.clone(),
            |metric| metric_facts(Some(metric)),
        );
        let pods = PodLedger::new(factors);
        {
            let pods = pods.clone();
            let api: Api<Pod> = Api::all(client.clone());
            tokio::spawn(async move {
                let events = watcher(api, watcher::Config::default()).default_backoff();
                let mut events = std::pin::pin!(koord_runtime::log_watch_errors(events, "pods"));
                while let Some(event) = events.next().await {
                    // Errors are logged once per outage by log_watch_errors; the watcher retries.
                    if let Ok(event) = event {
                        pods.apply(event);
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
                let events = watcher(api, config).default_backoff();
                let mut events =
                    std::pin::pin!(koord_runtime::log_watch_errors(events, "configmap").applied_objects());
                while let Some(event) = events.next().await {
                    // Errors are logged once per outage by log_watch_errors; the watcher retries.
                    if let Ok(map) = event {
                        apply_config_map(&slo_config, &map);
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

    /// Resolves once Nodes, NodeMetrics and Pods have their initial lists.
    pub async fn wait_until_ready(&self) {
        while !(self.nodes.is_ready() && self.node_metrics.is_ready() && self.pods.is_ready()) {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Whether the Node named `name` is cached.
    pub fn has_node(&self, name: &str) -> bool {
        self.nodes.contains(name)
    }

    /// Whether the NodeMetric of node `name` is cached.
    pub fn has_node_metric(&self, name: &str) -> bool {
        self.node_metrics.contains(name)
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
pub fn degrade_time_minutes(config: &SloConfig, labels: &std::collections::BTreeMap<String, String>) -> i64 {
    config
        .colocation
        .for_labels(labels)
        .0
        .degrade_time_minutes
        .unwrap_or(DEFAULT_DEGRADE_TIME_MINUTES)
}

fn spawn_table<K, T>(api: Api<K>, what: &'static str, table: Table<T>, convert: fn(&K) -> T)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    T: Send + Sync + 'static,
{
    tokio::spawn(async move {
        let events = watcher(api, watcher::Config::default()).default_backoff();
        let mut events = std::pin::pin!(koord_runtime::log_watch_errors(events, what));
        while let Some(event) = events.next().await {
            // Errors are logged once per outage by log_watch_errors; the watcher retries.
            if let Ok(event) = event {
                table.apply(event, convert);
            }
        }
    });
}
