//! The Node fields the manager owns, as the configurations noderesource applies (pure).
//!
//! Status ([`STATUS_FIELD_MANAGER`](super::STATUS_FIELD_MANAGER)): `kubernetes.io/batch-cpu`,
//! `batch-memory`, `mid-cpu` and `mid-memory` in `capacity` and `allocatable`. Metadata
//! ([`FIELD_MANAGER`](super::FIELD_MANAGER)): the annotations
//! `node.koordinator.sh/cpu-normalization-ratio` and
//! `node.koordinator.sh/originExtendedAllocatable`.
//!
//! An apply names every field its manager keeps, not only those that change: a field it
//! applied before and leaves out is removed by the server. So each configuration carries the
//! new values of what this round writes and the Node's current values of the rest of the
//! manager's fields. Quantities go in canonical form, as the server stores them, so an
//! unchanged value is no change (an applied configuration is compared as sent).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use koord_api::names;
use serde_json::{Map, Value, json};

use crate::batch::Amounts;

/// The resource lists of Node status the manager writes into.
const LISTS: [&str; 2] = ["capacity", "allocatable"];

/// The batch resources, as (cpu, memory) names.
pub const BATCH: (&str, &str) = (names::RESOURCE_BATCH_CPU, names::RESOURCE_BATCH_MEMORY);

/// The mid resources, as (cpu, memory) names.
pub const MID: (&str, &str) = (names::RESOURCE_MID_CPU, names::RESOURCE_MID_MEMORY);

/// Every status field the manager owns, as paths: what a removal looks for after an apply.
pub const STATUS_OWNED: [&[&str]; 8] = [
    &["status", "capacity", names::RESOURCE_BATCH_CPU],
    &["status", "capacity", names::RESOURCE_BATCH_MEMORY],
    &["status", "capacity", names::RESOURCE_MID_CPU],
    &["status", "capacity", names::RESOURCE_MID_MEMORY],
    &["status", "allocatable", names::RESOURCE_BATCH_CPU],
    &["status", "allocatable", names::RESOURCE_BATCH_MEMORY],
    &["status", "allocatable", names::RESOURCE_MID_CPU],
    &["status", "allocatable", names::RESOURCE_MID_MEMORY],
];

/// The annotations the manager owns.
pub const ANNOTATIONS: [&str; 2] = [
    names::ANNOTATION_CPU_NORMALIZATION_RATIO,
    names::ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE,
];

/// Every annotation the manager owns, as paths.
pub const METADATA_OWNED: [&[&str]; 2] = [
    &[
        "metadata",
        "annotations",
        names::ANNOTATION_CPU_NORMALIZATION_RATIO,
    ],
    &[
        "metadata",
        "annotations",
        names::ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE,
    ],
];

/// What a status apply does with a pair of resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairUpdate {
    /// Keep what the Node has.
    Keep,
    /// Write these amounts (`None`: remove the pair).
    Write(Option<Amounts>),
}

impl PairUpdate {
    /// The update of one pair in a status apply. A pair being written gets its desired
    /// amounts. A pair held back (unchanged, or a move within the diff threshold) keeps what
    /// this process last applied when it applied the pair before: the cached Node this
    /// reconcile read can predate that apply, and sending the cache's older value would take
    /// the pair back until the next write. A pair this process never applied keeps the Node's.
    pub fn for_pair(write: bool, desired: Option<Amounts>, last_applied: Option<Option<Amounts>>) -> Self {
        match (write, last_applied) {
            (true, _) => PairUpdate::Write(desired),
            (false, Some(applied)) => PairUpdate::Write(applied),
            (false, None) => PairUpdate::Keep,
        }
    }
}

/// What this process last applied of a node's batch and mid pairs (`None`: never applied by
/// this process; `Some(None)`: applied as absent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppliedPairs {
    /// batch-cpu / batch-memory.
    pub batch: Option<Option<Amounts>>,
    /// mid-cpu / mid-memory.
    pub mid: Option<Option<Amounts>>,
}

impl AppliedPairs {
    /// After a status apply of `batch` and `mid`: the pairs it wrote are now known.
    pub fn after(self, batch: PairUpdate, mid: PairUpdate) -> Self {
        let known = |update: PairUpdate, before: Option<Option<Amounts>>| match update {
            PairUpdate::Write(amounts) => Some(amounts),
            PairUpdate::Keep => before,
        };
        AppliedPairs {
            batch: known(batch, self.batch),
            mid: known(mid, self.mid),
        }
    }
}

fn canonical(value: i64) -> String {
    let text = value.to_string();
    koord_api::canonical_quantity(&text).unwrap_or(text)
}

fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

/// The status configuration: `batch` and `mid` written or kept; every list the manager has
/// nothing in is left out (an empty map would claim the list itself).
pub fn status_apply(node: &Node, batch: PairUpdate, mid: PairUpdate) -> Value {
    let status = node.status.as_ref();
    let mut lists = Map::new();
    for list in LISTS {
        let current = status.and_then(|s| match list {
            "capacity" => s.capacity.as_ref(),
            _ => s.allocatable.as_ref(),
        });
        let mut entries = Map::new();
        for ((cpu, memory), update) in [(BATCH, batch), (MID, mid)] {
            match update {
                PairUpdate::Keep => {
                    for resource in [cpu, memory] {
                        if let Some(q) = current.and_then(|c| c.get(resource)) {
                            entries.insert(resource.to_owned(), Value::String(q.0.clone()));
                        }
                    }
                }
                PairUpdate::Write(Some(amounts)) => {
                    entries.insert(cpu.to_owned(), Value::String(canonical(amounts.cpu)));
                    entries.insert(memory.to_owned(), Value::String(canonical(amounts.memory)));
                }
                PairUpdate::Write(None) => {}
            }
        }
        if !entries.is_empty() {
            lists.insert(list.to_owned(), Value::Object(entries));
        }
    }
    let mut body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(node)}});
    if !lists.is_empty() {
        body["status"] = Value::Object(lists);
    }
    body
}

/// The metadata configuration: the manager's annotations as the Node has them, with
/// `updates` (annotation → new value) over them.
pub fn metadata_apply(node: &Node, updates: &BTreeMap<&str, String>) -> Value {
    let current = node.metadata.annotations.as_ref();
    let annotations: Map<String, Value> = ANNOTATIONS
        .iter()
        .filter_map(|key| {
            let value = updates.get(key).or_else(|| current.and_then(|a| a.get(*key)))?;
            Some(((*key).to_owned(), Value::String(value.clone())))
        })
        .collect();
    let mut body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(node)}});
    if !annotations.is_empty() {
        body["metadata"]["annotations"] = Value::Object(annotations);
    }
    body
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn node(capacity: &[(&str, &str)], annotations: &[(&str, &str)]) -> Node {
        let list: BTreeMap<String, Quantity> = capacity
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect();
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        node.status = Some(NodeStatus {
            capacity: Some(list.clone()),
            allocatable: Some(list),
            ..NodeStatus::default()
        });
        node
    }

    #[test]
    fn a_held_back_pair_keeps_what_this_process_applied_not_a_stale_cache() {
        // This process applied batch 7000/7Gi; the cached Node still shows the earlier
        // 5000/5Gi. Mid is written this round, batch is held back by the diff threshold.
        let stale = node(
            &[
                ("kubernetes.io/batch-cpu", "5000"),
                ("kubernetes.io/batch-memory", "5Gi"),
            ],
            &[],
        );
        let applied = AppliedPairs {
            batch: Some(Some(Amounts::new(7000, 7 << 30))),
            mid: None,
        };
        let batch = PairUpdate::for_pair(false, Some(Amounts::new(7100, 7 << 30)), applied.batch);
        let mid = PairUpdate::for_pair(true, Some(Amounts::new(2000, 2 << 30)), applied.mid);
        assert_eq!(batch, PairUpdate::Write(Some(Amounts::new(7000, 7 << 30))));
        let body = status_apply(&stale, batch, mid);
        assert_eq!(body["status"]["capacity"]["kubernetes.io/batch-cpu"], "7k");
        assert_eq!(
            body["status"]["allocatable"]["kubernetes.io/batch-memory"],
            (7i64 << 30).to_string()
        );
        assert_eq!(body["status"]["capacity"]["kubernetes.io/mid-cpu"], "2k");
        // Both pairs are now known; a pair never applied keeps the Node's value.
        let after = applied.after(batch, mid);
        assert_eq!(after.mid, Some(Some(Amounts::new(2000, 2 << 30))));
        assert_eq!(PairUpdate::for_pair(false, None, None), PairUpdate::Keep);
        assert_eq!(
            PairUpdate::for_pair(false, None, Some(None)),
            PairUpdate::Write(None),
            "a pair this process removed stays removed"
        );
    }

    #[test]
    fn a_batch_write_keeps_the_mid_pair_and_never_claims_kubelet_fields() {
        let n = node(
            &[
                ("cpu", "8"),
                ("kubernetes.io/mid-cpu", "1500"),
                ("kubernetes.io/mid-memory", "1Gi"),
            ],
            &[],
        );
        let body = status_apply(
            &n,
            PairUpdate::Write(Some(Amounts::new(58_000, 66_000_000_000))),
            PairUpdate::Keep,
        );
        let want = json!({"kubernetes.io/batch-cpu": "58k", "kubernetes.io/batch-memory": "66G",
            "kubernetes.io/mid-cpu": "1500", "kubernetes.io/mid-memory": "1Gi"});
        assert_eq!(
            body,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                "status": {"capacity": want, "allocatable": want}})
        );
    }

    #[test]
    fn removing_everything_leaves_no_status_at_all() {
        let n = node(&[("cpu", "8"), ("kubernetes.io/batch-cpu", "4k")], &[]);
        let body = status_apply(&n, PairUpdate::Write(None), PairUpdate::Write(None));
        assert_eq!(body.get("status"), None, "{body}");
        // Keeping what is not there adds nothing either.
        let body = status_apply(&n, PairUpdate::Write(None), PairUpdate::Keep);
        assert_eq!(body.get("status"), None, "{body}");
    }

    #[test]
    fn metadata_carries_both_annotations_new_over_current() {
        let n = node(
            &[],
            &[
                (names::ANNOTATION_CPU_NORMALIZATION_RATIO, "1.00"),
                ("other", "x"),
            ],
        );
        let updates = BTreeMap::from([(names::ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE, "{}".to_owned())]);
        let body = metadata_apply(&n, &updates);
        assert_eq!(
            body["metadata"]["annotations"],
            json!({names::ANNOTATION_CPU_NORMALIZATION_RATIO: "1.00",
                names::ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE: "{}"})
        );
        let none = metadata_apply(&node(&[], &[]), &BTreeMap::new());
        assert_eq!(none["metadata"].get("annotations"), None);
    }
}
