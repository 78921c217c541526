//! What is on this node: the Node, its Pods, its NodeSLO and NodeMetric spec, merged into one
//! immutable [`Snapshot`] that the loops share through a `tokio::sync::watch` channel.
//!
//! The merge rules are pure ([`merge_pods`], [`NodeMetricSettings::from_spec`]); the sources
//! (kubelet `/pods`, API server watches) live in [`sources`]. Rules users rely on:
//! - an empty or failed kubelet answer keeps the previous pod list (a restarting kubelet
//!   answers `[]`; acting on that would drop every pod's limits);
//! - when the API server is unreachable the last NodeSLO seen stays in the snapshot, so the
//!   strategies keep enforcing it.

pub mod bounds;
pub mod settings;
pub mod sources;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use koord_api::NodeSLOSpec;

pub use koordlet_core::pod::{self, ContainerMeta, PodMeta, PodMetaError};
pub use settings::NodeMetricSettings;

/// Everything the loops read about the node, at one moment. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// This Node, once seen.
    pub node: Option<Arc<Node>>,
    /// Its pods (resolved), once a source answered with a non-empty list.
    pub pods: Arc<Vec<PodMeta>>,
    /// Whether the pod list came from a source at least once.
    pub pods_synced: bool,
    /// The NodeSLO spec named like the node (the last one seen).
    pub node_slo: Option<Arc<NodeSLOSpec>>,
    /// Collection and report settings from the NodeMetric spec (defaults until seen).
    pub node_metric: NodeMetricSettings,
}

/// Why a kubelet `/pods` answer was refused.
#[derive(Debug, thiserror::Error)]
pub enum StatesError {
    /// The body is not a PodList.
    #[error("kubelet /pods answer is not a PodList: {0}")]
    BadPodList(#[from] serde_json::Error),
    /// The kubelet URL does not parse.
    #[error("kubelet /pods request failed: bad kubelet url {url:?}: {source}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// Why it does not parse.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The request could not be built.
    #[error("kubelet /pods request failed: {0}")]
    BuildRequest(#[source] http::Error),
    /// The client could not be built or the request failed.
    #[error("kubelet /pods request failed: {0}")]
    Request(#[source] kube::Error),
}

/// Parses a kubelet `/pods` body. Never panics on any bytes.
pub fn parse_kubelet_pods(body: &[u8]) -> Result<Vec<Pod>, StatesError> {
    let list: PodList = serde_json::from_slice(body)?;
    Ok(list.items.unwrap_or_default())
}

/// The part of a `PodList` koordlet reads.
#[derive(serde::Deserialize)]
struct PodList {
    items: Option<Vec<Pod>>,
}

/// What [`merge_pods`] did, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodsOutcome {
    /// The list was replaced; some pods were left out (bad UID).
    Replaced {
        /// Pods now known.
        pods: usize,
        /// Pods left out with the reason.
        rejected: Vec<String>,
        /// Labels and annotations dropped past the bounds of [`bounds`], per pod.
        trimmed: Vec<String>,
    },
    /// The answer was empty: previous list kept.
    KeptEmptyAnswer,
    /// The source failed: previous list kept.
    KeptOnError(String),
}

/// Merges a source's answer into the previous pod list (see the module rules).
pub fn merge_pods(
    previous: &Arc<Vec<PodMeta>>,
    answer: Result<Vec<Pod>, StatesError>,
) -> (Arc<Vec<PodMeta>>, PodsOutcome) {
    match answer {
        Err(e) => (previous.clone(), PodsOutcome::KeptOnError(e.to_string())),
        Ok(pods) if pods.is_empty() => (previous.clone(), PodsOutcome::KeptEmptyAnswer),
        Ok(pods) => {
            let mut rejected = Vec::new();
            let mut trimmed = Vec::new();
            let mut metas: Vec<PodMeta> = pods
                .into_iter()
                .map(|mut p| {
                    let notes = bounds::bound_pod_metadata(&mut p);
                    if !notes.is_empty() {
                        let pod = format!(
                            "{}/{}",
                            p.metadata.namespace.as_deref().unwrap_or_default(),
                            p.metadata.name.as_deref().unwrap_or_default()
                        );
                        trimmed.push(format!("{pod}: {}", notes.join(", ")));
                    }
                    p
                })
                .filter_map(|p| match PodMeta::new(Arc::new(p)) {
                    Ok(m) => Some(m),
                    Err(e) => {
                        rejected.push(e.to_string());
                        None
                    }
                })
                .collect();
            metas.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            let count = metas.len();
            (
                Arc::new(metas),
                PodsOutcome::Replaced {
                    pods: count,
                    rejected,
                    trimmed,
                },
            )
        }
    }
}
