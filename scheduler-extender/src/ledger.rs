//! Pods per node, kept as the few numbers placement needs.
//!
//! A prioritize call looks at every candidate node; summing the node's pods from a pod cache on
//! each call would cost thousands of objects per request. The ledger converts each watched pod
//! once and keeps per-node entries, so a call reads a handful of integers per node.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use koord_api::resources::CpuMemory;
use kube::runtime::watcher;

use crate::facts::{ScalingFactors, bound_at, pod_facts};

type PodKey = (String, String);

/// One bound pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerEntry {
    /// Batch requests (zero for non-BE pods).
    pub batch_request: CpuMemory,
    /// Estimated usage (upstream's estimator).
    pub estimated_usage: CpuMemory,
    /// When its usage starts to show in the NodeMetric.
    pub bound_at: Option<Timestamp>,
}

/// The pods of one node and their sums, recomputed when one of them changes.
#[derive(Default)]
struct NodePods {
    pods: HashMap<PodKey, LedgerEntry>,
    batch_requested: CpuMemory,
    /// The latest `bound_at`; `None` also when a pod has no time (then every call looks).
    latest_bound: Option<Timestamp>,
}

impl NodePods {
    fn resum(&mut self) {
        let mut batch = CpuMemory::default();
        let mut latest = Some(Timestamp::MIN);
        for entry in self.pods.values() {
            batch.cpu_milli += entry.batch_request.cpu_milli;
            batch.memory_bytes += entry.batch_request.memory_bytes;
            latest = match (latest, entry.bound_at) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
        }
        self.batch_requested = batch;
        self.latest_bound = latest;
    }
}

#[derive(Default)]
struct Books {
    by_node: HashMap<String, NodePods>,
    node_of: HashMap<PodKey, String>,
}

impl Books {
    fn remove(&mut self, key: &PodKey) {
        if let Some(node) = self.node_of.remove(key)
            && let Some(pods) = self.by_node.get_mut(&node)
        {
            pods.pods.remove(key);
            if pods.pods.is_empty() {
                self.by_node.remove(&node);
            } else {
                pods.resum();
            }
        }
    }

    fn insert(&mut self, pod: &Pod, factors: ScalingFactors) {
        let key = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        self.remove(&key);
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default();
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or_default();
        // Finished pods hold no resources (the scheduler does not count them either).
        if node.is_empty() || phase == "Succeeded" || phase == "Failed" {
            return;
        }
        let facts = pod_facts(pod, factors);
        let entry = LedgerEntry {
            batch_request: facts.batch_request,
            estimated_usage: facts.estimated_usage,
            bound_at: bound_at(pod),
        };
        self.node_of.insert(key.clone(), node.to_owned());
        let pods = self.by_node.entry(node.to_owned()).or_default();
        pods.pods.insert(key, entry);
        pods.resum();
    }
}

#[derive(Default)]
struct Inner {
    books: Books,
    relist: Option<Books>,
    ready: bool,
}

/// The shared pod ledger; cheap to clone.
#[derive(Clone, Default)]
pub struct PodLedger {
    inner: Arc<RwLock<Inner>>,
    factors: ScalingFactors,
}

impl PodLedger {
    /// An empty ledger estimating with `factors`.
    pub fn new(factors: ScalingFactors) -> Self {
        PodLedger {
            inner: Arc::default(),
            factors,
        }
    }

    /// Applies one watcher event.
    pub fn apply(&self, event: watcher::Event<Pod>) {
        let mut inner = self.inner.write().unwrap_or_else(|poison| poison.into_inner());
        match event {
            watcher::Event::Apply(pod) => inner.books.insert(&pod, self.factors),
            watcher::Event::Delete(pod) => {
                let key = (
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                );
                inner.books.remove(&key);
            }
            watcher::Event::Init => inner.relist = Some(Books::default()),
            watcher::Event::InitApply(pod) => {
                if let Some(books) = inner.relist.as_mut() {
                    books.insert(&pod, self.factors);
                }
            }
            watcher::Event::InitDone => {
                if let Some(books) = inner.relist.take() {
                    inner.books = books;
                }
                inner.ready = true;
            }
        }
    }

    /// True once the first full pod list was seen.
    pub fn is_ready(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .ready
    }

    /// Runs `f` with a reader over the ledger (one lock for a whole request).
    pub fn read<R>(&self, f: impl FnOnce(&LedgerView<'_>) -> R) -> R {
        let inner = self.inner.read().unwrap_or_else(|poison| poison.into_inner());
        f(&LedgerView { books: &inner.books })
    }
}

/// A locked view of the ledger.
pub struct LedgerView<'a> {
    books: &'a Books,
}

impl LedgerView<'_> {
    /// Batch requests of the pods on `node`, and the estimated usage of those bound after
    /// `reported_at` (all of them when there is no report).
    pub fn node_totals(&self, node: &str, reported_at: Option<Timestamp>) -> (CpuMemory, CpuMemory) {
        let Some(pods) = self.books.by_node.get(node) else {
            return Default::default();
        };
        let mut unreported = CpuMemory::default();
        // Usually every pod is older than the report: nothing to add, no need to look.
        let all_reported =
            matches!((pods.latest_bound, reported_at), (Some(latest), Some(reported)) if latest <= reported);
        if !all_reported {
            for entry in pods.pods.values() {
                let after_report = match (entry.bound_at, reported_at) {
                    (Some(bound), Some(reported)) => bound > reported,
                    _ => reported_at.is_none(),
                };
                if after_report {
                    unreported.cpu_milli += entry.estimated_usage.cpu_milli;
                    unreported.memory_bytes += entry.estimated_usage.memory_bytes;
                }
            }
        }
        (pods.batch_requested, unreported)
    }

    /// Number of pods on `node`.
    pub fn pods_on(&self, node: &str) -> usize {
        self.books.by_node.get(node).map_or(0, |pods| pods.pods.len())
    }
}
