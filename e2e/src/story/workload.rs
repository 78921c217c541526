//! The story's pods: the LS `payment` app (seed 000's pod-level CPU burst strategy selects it)
//! and Spark executors in the colocation namespace (seed 001's profile turns them BE). Each pod
//! is pinned to its node with the `kubernetes.io/hostname` selector and says what its processes
//! do with the simulated kubelet's annotations.

use k8s_openapi::api::core::v1::Pod;
use koord_testcluster::node::{ANNOTATION_CPU_LOAD, ANNOTATION_MEMORY};
use serde_json::json;

use super::StoryError;
use super::seeds::LS_NAMESPACE;

/// The namespace of the Spark executors (the seed's colocation namespace).
pub const BE_NAMESPACE: &str = "spark";
/// The label seed 001's profile selects pods by.
pub const SPARK_LABEL: &str = "sparkoperator.k8s.io/launched-by-spark-operator";
/// CPU each busy LS replica burns during the LS peak, in cores.
pub const LS_PEAK_LOAD: &str = "0.8";
/// CPU the steady LS replica burns, in cores.
pub const LS_BASE_LOAD: &str = "0.2";
/// CPU each Spark executor burns, in cores.
pub const BE_LOAD: &str = "0.5";
/// Memory a Spark executor holds besides the cache executor.
pub const BE_MEMORY: &str = "32Mi";

/// Which pod of the story.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The steady LS replica on a node.
    LsBase,
    /// The busy LS replica of the LS peak.
    LsPeak,
    /// The LS pod that fills a cache during memory pressure.
    LsCache,
    /// A CPU-bound Spark executor.
    BeExecutor,
    /// The Spark executor that caches a shuffle in memory.
    BeCache,
}

/// A pod the story creates.
#[derive(Debug, Clone)]
pub struct StoryPod {
    /// Its namespace.
    pub namespace: &'static str,
    /// Its name.
    pub name: String,
    /// The node it is pinned to.
    pub node: String,
    /// What it is in the story.
    pub role: Role,
    /// Memory it holds, in bytes (0: the small default).
    pub memory_bytes: u64,
}

impl StoryPod {
    /// A pod of `role` on `node`; `index` tells executors apart.
    pub fn new(role: Role, node: &str, index: usize, memory_bytes: u64) -> Self {
        let (namespace, name) = match role {
            Role::LsBase => (LS_NAMESPACE, format!("payment-{node}")),
            Role::LsPeak => (LS_NAMESPACE, format!("payment-busy-{node}")),
            Role::LsCache => (LS_NAMESPACE, format!("payment-cache-{node}")),
            Role::BeExecutor => (BE_NAMESPACE, format!("spark-exec-{node}-{index}")),
            Role::BeCache => (BE_NAMESPACE, format!("spark-shuffle-{node}")),
        };
        StoryPod {
            namespace,
            name,
            node: node.to_string(),
            role,
            memory_bytes,
        }
    }

    /// Whether the pod is BE (created as a plain Spark pod, made BE by the webhook).
    pub fn is_be(&self) -> bool {
        matches!(self.role, Role::BeExecutor | Role::BeCache)
    }

    /// The Pod object. BE pods ask for `cpu`/`memory` like any Spark pod: the webhook rewrites
    /// them to batch resources.
    pub fn object(&self) -> Result<Pod, StoryError> {
        let memory = |bytes: u64, default: &str| {
            if bytes == 0 {
                default.to_string()
            } else {
                bytes.to_string()
            }
        };
        let (labels, annotations, resources) = match self.role {
            Role::LsBase | Role::LsPeak | Role::LsCache => {
                let load = match self.role {
                    Role::LsPeak => LS_PEAK_LOAD,
                    Role::LsBase => LS_BASE_LOAD,
                    _ => "0",
                };
                let request = match self.role {
                    Role::LsPeak => "1",
                    Role::LsBase => "500m",
                    _ => "100m",
                };
                (
                    json!({"app": "payment", "koordinator.sh/qosClass": "LS"}),
                    json!({ANNOTATION_CPU_LOAD: load, ANNOTATION_MEMORY: memory(self.memory_bytes, "48Mi")}),
                    json!({"requests": {"cpu": request, "memory": "64Mi"}, "limits": {"cpu": "1"}}),
                )
            }
            Role::BeExecutor | Role::BeCache => {
                let limit = if self.role == Role::BeCache {
                    // The container limit leaves room for the worker besides its cache.
                    (self.memory_bytes + (64 << 20)).to_string()
                } else {
                    "256Mi".to_string()
                };
                (
                    json!({SPARK_LABEL: "true", "spark-role": "executor"}),
                    json!({ANNOTATION_CPU_LOAD: BE_LOAD, ANNOTATION_MEMORY: memory(self.memory_bytes, BE_MEMORY)}),
                    json!({"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": limit}}),
                )
            }
        };
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": labels, "annotations": annotations},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": self.node},
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox", "resources": resources}],
            }
        });
        serde_json::from_value::<Pod>(pod).map_err(|source| StoryError::Object { what: "pod", source })
    }
}

/// The pods deployed before the story plays: per node one steady LS replica and two Spark
/// executors; on the first node also the Spark executor that holds `be_cache_bytes`.
pub fn initial_pods(nodes: &[String], be_cache_bytes: u64) -> Vec<StoryPod> {
    let mut pods = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        pods.push(StoryPod::new(Role::LsBase, node, 0, 0));
        pods.push(StoryPod::new(Role::BeExecutor, node, 1, 0));
        pods.push(StoryPod::new(Role::BeExecutor, node, 2, 0));
        if i == 0 {
            pods.push(StoryPod::new(Role::BeCache, node, 0, be_cache_bytes));
        }
    }
    pods
}

/// The label value a mutated pod carries (from seed 001's profile).
pub fn mutated(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("koordinator.sh/mutated"))
        .is_some_and(|v| v == "true")
}

/// Batch resources the pod requests after mutation: (batch-cpu milli, batch-memory bytes).
pub fn batch_requests(pod: &Pod) -> Option<(i64, i64)> {
    let requests = pod
        .spec
        .as_ref()?
        .containers
        .first()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?;
    let value = |name: &str| {
        requests
            .get(name)
            .and_then(|q| koord_api::ExactQuantity::from_k8s(q).ok())
            .map(koord_api::ExactQuantity::value)
    };
    Some((
        value(koord_api::names::RESOURCE_BATCH_CPU)?,
        value(koord_api::names::RESOURCE_BATCH_MEMORY)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_pinned_and_labelled_for_the_seeds() {
        let pods = initial_pods(&["n1".into(), "n2".into()], 100 << 20);
        assert_eq!(pods.len(), 7);
        let cache = pods
            .iter()
            .find(|p| p.role == Role::BeCache)
            .map(StoryPod::object);
        let Some(Ok(cache)) = cache else {
            panic!("cache pod object");
        };
        let spec = cache.spec.unwrap_or_default();
        assert_eq!(
            spec.node_selector
                .unwrap_or_default()
                .get("kubernetes.io/hostname")
                .map(String::as_str),
            Some("n1")
        );
        assert!(
            cache
                .metadata
                .labels
                .unwrap_or_default()
                .contains_key(SPARK_LABEL)
        );
    }
}
