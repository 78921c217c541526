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
    by_node: HashMap<String, HashMap<PodKey, PodFacts>>,
    /// Pod → the node it is bound to (for deletes and moves).
    node_of: HashMap<PodKey, String>,
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

fn insert(
    by_node: &mut HashMap<String, HashMap<PodKey, PodFacts>>,
    node_of: &mut HashMap<PodKey, String>,
    pod: &Pod,
) -> Option<String> {
    let key = key_of(pod);
    if let Some(old_node) = node_of.remove(&key)
        && let Some(pods) = by_node.get_mut(&old_node)
    {
        pods.remove(&key);
        if pods.is_empty() {
            by_node.remove(&old_node);
        }
    }
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())?;
    match snapshot::pod_facts(pod) {
        Ok(facts) => {
            node_of.insert(key.clone(), node.clone());
            by_node.entry(node.clone()).or_default().insert(key, facts);
        }
        // The API server validated the pod; an unreadable one would only come from a foreign
        // server. It is left out (and logged) rather than counted as zero.
        Err(error) => tracing::warn!(pod = %format!("{}/{}", key.0, key.1), %error, "pod ignored"),
    }
    Some(node)
}

impl PodIndex {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Applies one watcher event; returns the nodes whose pods changed.
    pub fn apply(&self, event: watcher::Event<Pod>) -> Vec<String> {
        let mut inner = self.write();
        let inner = &mut *inner;
        match event {
            watcher::Event::Apply(pod) => {
                let old = inner.node_of.get(&key_of(&pod)).cloned();
                let new = insert(&mut inner.by_node, &mut inner.node_of, &pod);
                old.into_iter().chain(new).collect()
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
                if let Some((by_node, node_of)) = inner.relist.take() {
                    inner.by_node = by_node;
                    inner.node_of = node_of;
                }
                inner.ready = true;
                inner.by_node.keys().cloned().collect()
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
        events.filter_map(move |event| {
            let index = self.clone();
            async move {
                match event {
                    Ok(event) => Some(index.apply(event)),
                    Err(error) => {
                        tracing::warn!(%error, "pod watch error; retrying");
                        None
                    }
                }
            }
        })
    }
}
