//! Pods per node, kept as [`PodFacts`] only.
//!
//! The batch formula needs five numbers and three flags per pod; a full Pod object is several
//! KiB. The index converts every watched Pod on arrival and drops it, which is what keeps the
//! manager's memory per pod small on clusters with tens of thousands of pods.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;

use crate::{batch::PodFacts, snapshot};

/// A pod key: namespace and name.
type PodKey = (String, String);

/// Node name → pods bound to it.
type ByNode = HashMap<String, HashMap<PodKey, PodFacts>>;
/// Pod → the node it is bound to.
type NodeOf = HashMap<PodKey, String>;

#[derive(Default)]
struct Inner {
    /// Node name → pods bound to it.
    by_node: ByNode,
    /// Pod → the node it is bound to (for deletes and moves).
    node_of: NodeOf,
    /// Rebuilt during a (re-)list, swapped in at its end.
    relist: Option<(ByNode, NodeOf)>,
    ready: bool,
}

/// The shared pod index; cheap to clone.
#[derive(Clone, Default)]
pub struct PodIndex {
    inner: Arc<RwLock<Inner>>,
}

fn key_of(pod: &Pod) -> PodKey {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// Puts `pod` where it is bound now; returns the node and facts it had before, if any.
fn insert(by_node: &mut ByNode, node_of: &mut NodeOf, pod: &Pod) -> Option<(String, PodFacts)> {
    let key = key_of(pod);
    let before = node_of.remove(&key).and_then(|old_node| {
        let pods = by_node.get_mut(&old_node)?;
        let facts = pods.remove(&key);
        if pods.is_empty() {
            by_node.remove(&old_node);
        }
        Some((old_node, facts?))
    });
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty());
    if let Some(node) = node {
        match snapshot::pod_facts(pod) {
            Ok(facts) => {
                node_of.insert(key.clone(), node.to_owned());
                by_node.entry(node.to_owned()).or_default().insert(key, facts);
            }
            // The API server validated the pod; an unreadable one would only come from a
            // foreign server. It is left out (and logged) rather than counted as zero.
            Err(error) => tracing::warn!(pod = %format!("{}/{}", key.0, key.1), %error, "pod ignored"),
        }
    }
    before
}

impl PodIndex {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Applies one watcher event; returns the nodes whose pods changed as the formula sees
    /// them: a pod bound, moved or gone, or its facts changed. A status or label update that
    /// leaves the facts as they were (most pod updates) returns none.
    pub fn apply(&self, event: watcher::Event<Pod>) -> Vec<String> {
        let mut inner = self.write();
        let inner = &mut *inner;
        match event {
            watcher::Event::Apply(pod) => {
                let before = insert(&mut inner.by_node, &mut inner.node_of, &pod);
                let key = key_of(&pod);
                let after = inner
                    .node_of
                    .get(&key)
                    .and_then(|node| Some((node, inner.by_node.get(node)?.get(&key)?)));
                if before.as_ref().map(|(node, facts)| (node, facts)) == after {
                    return Vec::new();
                }
                let mut nodes: Vec<String> = before.map(|(node, _)| node).into_iter().collect();
                if let Some((node, _)) = after
                    && !nodes.contains(node)
                {
                    nodes.push(node.clone());
                }
                nodes
            }
            watcher::Event::Delete(pod) => {
                let key = key_of(&pod);
                let Some(node) = inner.node_of.remove(&key) else {
                    return Vec::new();
                };
                if let Some(pods) = inner.by_node.get_mut(&node) {
                    pods.remove(&key);
                    if pods.is_empty() {
                        inner.by_node.remove(&node);
                    }
                }
                vec![node]
            }
            watcher::Event::Init => {
                inner.relist = Some(Default::default());
                Vec::new()
            }
            watcher::Event::InitApply(pod) => {
                if let Some((by_node, node_of)) = inner.relist.as_mut() {
                    insert(by_node, node_of, &pod);
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                // Every node with pods before or after the list: a node whose last pods went
                // while the watch was down changed too.
                let mut nodes: std::collections::BTreeSet<String> = inner.by_node.keys().cloned().collect();
                if let Some((by_node, node_of)) = inner.relist.take() {
                    inner.by_node = by_node;
                    inner.node_of = node_of;
                }
                inner.ready = true;
                nodes.extend(inner.by_node.keys().cloned());
                nodes.into_iter().collect()
            }
        }
    }

    /// The pods bound to `node`.
    pub fn pods_on(&self, node: &str) -> Vec<PodFacts> {
        let inner = self.inner.read().unwrap_or_else(|poison| poison.into_inner());
        inner
            .by_node
            .get(node)
            .map(|pods| pods.values().cloned().collect())
            .unwrap_or_default()
    }

    /// True once the first full list has been seen.
    pub fn is_ready(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .ready
    }

    /// Number of pods indexed.
    pub fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .node_of
            .len()
    }

    /// True when no pod is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Feeds the index from a watcher stream; yields the nodes whose pods changed.
    pub fn follow(
        self,
        events: impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send + 'static,
    ) -> impl Stream<Item = Vec<String>> + Send + 'static {
        koord_runtime::log_watch_errors(events, "Pod").filter_map(move |event| {
            let index = self.clone();
            // Errors are logged once per outage by log_watch_errors; the watcher retries.
            async move { Some(index.apply(event.ok()?)) }
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, node: Option<&str>, cpu: &str, phase: &str, label: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": name, "labels": {"rev": label}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]
            },
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn ready() -> PodIndex {
        let index = PodIndex::default();
        assert!(index.apply(watcher::Event::InitDone).is_empty());
        index
    }

    #[test]
    fn binding_a_pod_changes_its_node_and_an_unbound_pod_none() {
        let index = ready();
        assert!(
            index
                .apply(watcher::Event::Apply(pod("p", None, "1", "Pending", "a")))
                .is_empty()
        );
        assert_eq!(
            index.apply(watcher::Event::Apply(pod("p", Some("n1"), "1", "Pending", "a"))),
            ["n1"]
        );
        assert_eq!(index.pods_on("n1").len(), 1);
    }

    #[test]
    fn an_update_the_formula_does_not_see_changes_no_node() {
        let index = ready();
        index.apply(watcher::Event::Apply(pod("p", Some("n1"), "1", "Pending", "a")));
        // Labels and a Pending → Running move leave the facts as they were.
        assert!(
            index
                .apply(watcher::Event::Apply(pod("p", Some("n1"), "1", "Pending", "b")))
                .is_empty()
        );
        assert!(
            index
                .apply(watcher::Event::Apply(pod("p", Some("n1"), "1", "Running", "b")))
                .is_empty()
        );
    }

    #[test]
    fn requests_phase_moves_and_deletes_change_their_nodes() {
        let index = ready();
        index.apply(watcher::Event::Apply(pod("p", Some("n1"), "1", "Running", "a")));
        assert_eq!(
            index.apply(watcher::Event::Apply(pod("p", Some("n1"), "2", "Running", "a"))),
            ["n1"]
        );
        assert_eq!(index.pods_on("n1")[0].request.cpu, 2000);
        // A finished pod holds nothing: its node changes.
        assert_eq!(
            index.apply(watcher::Event::Apply(pod("p", Some("n1"), "2", "Succeeded", "a"))),
            ["n1"]
        );
        // Rebound elsewhere (a foreign server could): both nodes change.
        assert_eq!(
            index.apply(watcher::Event::Apply(pod("p", Some("n2"), "2", "Succeeded", "a"))),
            ["n1", "n2"]
        );
        assert!(index.pods_on("n1").is_empty());
        assert_eq!(
            index.apply(watcher::Event::Delete(pod(
                "p",
                Some("n2"),
                "2",
                "Succeeded",
                "a"
            ))),
            ["n2"]
        );
        assert_eq!(index.len(), 0);
        // Deleting what is not indexed changes nothing.
        assert!(
            index
                .apply(watcher::Event::Delete(pod("p", Some("n2"), "2", "Running", "a")))
                .is_empty()
        );
    }

    #[test]
    fn a_relist_changes_every_node_once_it_is_done() {
        let index = PodIndex::default();
        assert!(!index.is_ready());
        assert!(index.apply(watcher::Event::Init).is_empty());
        assert!(
            index
                .apply(watcher::Event::InitApply(pod(
                    "p",
                    Some("n1"),
                    "1",
                    "Running",
                    "a"
                )))
                .is_empty()
        );
        assert!(
            index.pods_on("n1").is_empty(),
            "swapped in at the end of the list"
        );
        assert_eq!(index.apply(watcher::Event::InitDone), ["n1"]);
        assert!(index.is_ready());
        assert_eq!(index.pods_on("n1").len(), 1);
        // A relist after the watch was down: n1's pod went meanwhile, n2 got one. Both changed.
        index.apply(watcher::Event::Init);
        index.apply(watcher::Event::InitApply(pod(
            "q",
            Some("n2"),
            "1",
            "Running",
            "a",
        )));
        assert_eq!(index.apply(watcher::Event::InitDone), ["n1", "n2"]);
        assert!(index.pods_on("n1").is_empty());
    }
}
