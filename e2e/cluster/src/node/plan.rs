//! The simulated kubelet's and scheduler's decisions for one tick, from a pod list and the
//! node's local state to a plan: which pods to bind where, start, stop, and finish deleting.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod};

use super::fit::{NodeRoom, Resources, add_requests, choose_node, pod_requests};
use super::quantity::parse_milli;

/// What one node must do this tick.
#[derive(Debug, Default, PartialEq)]
pub struct NodePlan {
    /// Pods bound here that should run but do not (UIDs, in list order).
    pub start: Vec<String>,
    /// Locally running pods to stop (UIDs): deleted, being deleted, moved or finished.
    pub stop: Vec<String>,
    /// Pods bound here with a deletionTimestamp whose processes are gone: delete for good
    /// (`namespace`, `name`, `uid`).
    pub finish_delete: Vec<(String, String, String)>,
}

fn uid(pod: &Pod) -> Option<&str> {
    pod.metadata.uid.as_deref()
}

fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn bound_to(pod: &Pod, node: &str) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
}

/// Plans one node: `running` are the UIDs with processes, `failed` those that could not start.
pub fn plan_node(
    node: &str,
    pods: &[Pod],
    running: &BTreeSet<String>,
    failed: &BTreeSet<String>,
) -> NodePlan {
    let mut plan = NodePlan::default();
    let mut wanted = BTreeSet::new();
    for pod in pods.iter().filter(|p| bound_to(p, node)) {
        let Some(uid) = uid(pod) else { continue };
        let deleting = pod.metadata.deletion_timestamp.is_some();
        if deleting {
            if !running.contains(uid) {
                plan.finish_delete.push((
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                    uid.to_string(),
                ));
            }
            continue;
        }
        if terminal(pod) {
            continue;
        }
        wanted.insert(uid.to_string());
        if !running.contains(uid) && !failed.contains(uid) {
            plan.start.push(uid.to_string());
        }
    }
    plan.stop = running
        .iter()
        .filter(|uid| !wanted.contains(*uid))
        .cloned()
        .collect();
    plan
}

/// Pending pods the fleet schedules: no node, not being deleted, not finished, and a scheduler
/// name it serves (none means `default-scheduler`).
pub fn pending<'a>(pods: &'a [Pod], scheduler_names: &[String]) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .is_some_and(|s| s.node_name.as_deref().unwrap_or("").is_empty())
        })
        .filter(|p| p.metadata.deletion_timestamp.is_none() && !terminal(p))
        .filter(|p| {
            let name = p
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.as_deref())
                .unwrap_or("default-scheduler");
            scheduler_names.iter().any(|n| n == name)
        })
        .collect()
}

/// The scheduler's view of a node: its API allocatable and the requests of the pods bound to it.
pub fn node_room(node: &Node, pods: &[Pod]) -> NodeRoom {
    let name = node.metadata.name.clone().unwrap_or_default();
    let status = node.status.as_ref();
    let mut allocatable = Resources::new();
    for (resource, quantity) in status.and_then(|s| s.allocatable.as_ref()).into_iter().flatten() {
        match parse_milli(&quantity.0) {
            Ok(value) => {
                allocatable.insert(resource.clone(), value);
            }
            Err(err) => tracing::warn!(node = %name, %resource, %err, "ignoring unreadable allocatable"),
        }
    }
    let mut requested = Resources::new();
    for pod in pods.iter().filter(|p| bound_to(p, &name) && !terminal(p)) {
        if let Some(requests) = pod.spec.as_ref().and_then(|s| pod_requests(s).ok()) {
            add_requests(&mut requested, &requests);
        }
    }
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    NodeRoom {
        labels: node
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        name,
        allocatable,
        requested,
        schedulable: ready && !cordoned,
    }
}

/// A decided binding: (`namespace`, `name`, node).
pub type Binding = (String, String, String);

/// Chooses nodes for the pending pods in list order, counting each placement before the next.
/// Returns (`namespace`, `name`, node) to bind and, for pods that fit nowhere, the reason by UID.
pub fn schedule(pending: &[&Pod], rooms: &mut [NodeRoom]) -> (Vec<Binding>, BTreeMap<String, String>) {
    let mut bindings = Vec::new();
    let mut unschedulable = BTreeMap::new();
    for pod in pending {
        let Some(spec) = &pod.spec else { continue };
        let key = uid(pod).unwrap_or_default().to_string();
        let requests = match pod_requests(spec) {
            Ok(r) => r,
            Err(err) => {
                unschedulable.insert(key, format!("unreadable requests: {err}"));
                continue;
            }
        };
        let selector: BTreeMap<String, String> = spec
            .node_selector
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        match choose_node(&requests, &selector, rooms) {
            Ok(node) => {
                if let Some(room) = rooms.iter_mut().find(|r| r.name == node) {
                    add_requests(&mut room.requested, &requests);
                }
                bindings.push((
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                    node,
                ));
            }
            Err(reason) => {
                unschedulable.insert(key, reason.to_string());
            }
        }
    }
    (bindings, unschedulable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, node: Option<&str>, extra: serde_json::Value) -> Pod {
        let mut value = json!({
            "metadata": { "name": uid, "namespace": "default", "uid": uid },
            "spec": { "containers": [{ "name": "c", "resources": { "requests": { "cpu": "1" } } }] },
        });
        if let Some(node) = node {
            value["spec"]["nodeName"] = json!(node);
        }
        for (k, v) in extra.as_object().into_iter().flatten() {
            let section = value
                .as_object_mut()
                .unwrap()
                .entry(k.clone())
                .or_insert_with(|| json!({}));
            section
                .as_object_mut()
                .unwrap()
                .extend(v.as_object().cloned().unwrap_or_default());
        }
        serde_json::from_value(value).unwrap()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn starts_stops_and_finishes_deletion() {
        let pods = vec![
            pod("new", Some("n1"), json!({})),
            pod("running", Some("n1"), json!({})),
            pod(
                "deleting",
                Some("n1"),
                json!({ "metadata": { "deletionTimestamp": "2026-01-01T00:00:00Z" } }),
            ),
            pod(
                "deleted-stopped",
                Some("n1"),
                json!({ "metadata": { "deletionTimestamp": "2026-01-01T00:00:00Z" } }),
            ),
            pod("done", Some("n1"), json!({ "status": { "phase": "Succeeded" } })),
            pod("broken", Some("n1"), json!({})),
            pod("elsewhere", Some("n2"), json!({})),
        ];
        let plan = plan_node(
            "n1",
            &pods,
            &set(&["running", "deleting", "gone"]),
            &set(&["broken"]),
        );
        assert_eq!(plan.start, vec!["new".to_string()]);
        assert_eq!(plan.stop, vec!["deleting".to_string(), "gone".to_string()]);
        assert_eq!(
            plan.finish_delete,
            vec![(
                "default".into(),
                "deleted-stopped".into(),
                "deleted-stopped".into()
            )]
        );
    }

    #[test]
    fn schedules_pending_pods_within_room() {
        let pods = vec![
            pod("a", None, json!({})),
            pod("b", None, json!({})),
            pod("c", None, json!({ "spec": { "schedulerName": "other" } })),
            pod("d", Some("n1"), json!({})),
        ];
        let node: Node = serde_json::from_value(json!({
            "metadata": { "name": "n1" },
            "status": { "allocatable": { "cpu": "2", "pods": "10" }, "conditions": [{ "type": "Ready", "status": "True" }] },
        }))
        .unwrap();
        let mut rooms = vec![node_room(&node, &pods)];
        assert_eq!(rooms[0].requested.get("cpu"), Some(&1000));
        let pending = pending(&pods, &["default-scheduler".to_string()]);
        assert_eq!(pending.len(), 2);
        let (bindings, unschedulable) = schedule(&pending, &mut rooms);
        assert_eq!(bindings, vec![("default".into(), "a".into(), "n1".into())]);
        assert!(
            unschedulable["b"].contains("insufficient cpu"),
            "{unschedulable:?}"
        );
    }
}
