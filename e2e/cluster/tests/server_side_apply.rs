//! Server-side apply as kube-apiserver does it, for what the components rely on: applies to the
//! status subresource recorded and pruned, Update entries for merge patches, JSON patches and
//! PUTs under their field manager, conflicts against them reported as a real server reports
//! them (409, `FieldManagerConflict` causes), the same value shared, force taking ownership,
//! and omission removing only what the applier alone owned.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{cluster_with_namespace, unique};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use koord_api::NodeMetric;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const BATCH_CPU: &str = "kubernetes.io/batch-cpu";
const BATCH_MEMORY: &str = "kubernetes.io/batch-memory";

fn merge_as(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    }
}

/// A Node whose status the "kubelet" wrote with a merge patch (cpu, memory, pods).
async fn node_with_kubelet_status(api: &Api<Node>) -> String {
    let name = unique("ssa");
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &node).await.unwrap();
    let list = json!({"cpu": "8", "memory": "16Gi", "pods": "110"});
    let status = json!({"status": {"capacity": list, "allocatable": list}});
    api.patch_status(&name, &merge_as("kubelet"), &Patch::Merge(status))
        .await
        .unwrap();
    name
}

fn status_apply(name: &str, capacity: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "status": {"capacity": capacity}})
}

fn capacity(node: &Node) -> std::collections::BTreeMap<String, String> {
    node.status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .map(|c| c.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
        .unwrap_or_default()
}

/// The entry of `manager` with `operation`, if any.
fn entry<'a>(node: &'a Node, manager: &str, operation: &str) -> Option<&'a ManagedFieldsEntry> {
    node.metadata
        .managed_fields
        .as_ref()?
        .iter()
        .find(|e| e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some(operation))
}

/// Whether `entry` owns `status.capacity.<key>`.
fn owns_capacity(entry: Option<&ManagedFieldsEntry>, key: &str) -> bool {
    entry
        .and_then(|e| e.fields_v1.as_ref())
        .and_then(|f| {
            f.0.pointer(&format!("/f:status/f:capacity/f:{}", key.replace('/', "~1")))
        })
        .is_some()
}

#[tokio::test]
async fn a_conflict_with_an_update_owner_is_a_409_with_causes_and_force_takes_the_field() {
    let (_c, client, _ns) = cluster_with_namespace().await;
    let api: Api<Node> = Api::all(client.clone());
    let name = node_with_kubelet_status(&api).await;
    let other = json!({"status": {"capacity": {BATCH_CPU: "10"}}});
    api.patch_status(&name, &merge_as("other-writer"), &Patch::Merge(other))
        .await
        .unwrap();

    let apply = status_apply(&name, json!({BATCH_CPU: "20000"}));
    let err = api
        .patch_status(&name, &PatchParams::apply("mgr"), &Patch::Apply(&apply))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        format!(
            "Apply failed with 1 conflict: conflict with \"other-writer\" using v1: .status.capacity.{BATCH_CPU}"
        )
    );
    let causes = status.details.unwrap().causes;
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].message, "conflict with \"other-writer\" using v1");
    assert_eq!(causes[0].field, format!(".status.capacity.{BATCH_CPU}"));
    assert_eq!(
        capacity(&api.get(&name).await.unwrap())[BATCH_CPU],
        "10",
        "a refused apply changes nothing"
    );

    let node = api
        .patch_status(&name, &PatchParams::apply("mgr").force(), &Patch::Apply(&apply))
        .await
        .unwrap();
    let caps = capacity(&node);
    assert_eq!(caps[BATCH_CPU], "20k", "stored in canonical form");
    assert_eq!(
        (
            caps["cpu"].as_str(),
            caps["memory"].as_str(),
            caps["pods"].as_str()
        ),
        ("8", "16Gi", "110"),
        "the kubelet's fields are untouched"
    );
    let mine = entry(&node, "mgr", "Apply").expect("the applier's entry");
    assert_eq!(mine.subresource.as_deref(), Some("status"));
    assert!(owns_capacity(Some(mine), BATCH_CPU));
    assert!(
        entry(&node, "other-writer", "Update").is_none(),
        "the other writer owned nothing else: its entry goes"
    );
    let kubelet = entry(&node, "kubelet", "Update");
    for key in ["cpu", "memory", "pods"] {
        assert!(owns_capacity(kubelet, key), "the kubelet still owns {key}");
    }
}

#[tokio::test]
async fn the_same_value_is_shared_and_omission_removes_only_what_the_applier_alone_owned() {
    let (_c, client, _ns) = cluster_with_namespace().await;
    let api: Api<Node> = Api::all(client.clone());
    let name = node_with_kubelet_status(&api).await;
    // An older writer set batch-memory with a merge patch (an Update entry).
    let old = json!({"status": {"capacity": {BATCH_MEMORY: "1Gi"}}});
    api.patch_status(&name, &merge_as("old-writer"), &Patch::Merge(old))
        .await
        .unwrap();

    // The same value in another spelling is a change (the applied configuration is compared as
    // sent, the stored one is canonical): a conflict.
    let apply = status_apply(&name, json!({BATCH_CPU: "4", BATCH_MEMORY: "1024Mi"}));
    let err = api
        .patch_status(&name, &PatchParams::apply("mgr"), &Patch::Apply(&apply))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409), "{err:?}");
    // The same value as stored: no conflict, both own it.
    let apply = status_apply(&name, json!({BATCH_CPU: "4", BATCH_MEMORY: "1Gi"}));
    let node = api
        .patch_status(&name, &PatchParams::apply("mgr"), &Patch::Apply(&apply))
        .await
        .unwrap();
    assert!(owns_capacity(entry(&node, "mgr", "Apply"), BATCH_MEMORY));
    assert!(owns_capacity(entry(&node, "old-writer", "Update"), BATCH_MEMORY));

    // Applying without them: batch-cpu (the applier's alone) goes, batch-memory (still owned
    // by the Update entry) stays.
    let apply = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    let node = api
        .patch_status(&name, &PatchParams::apply("mgr"), &Patch::Apply(&apply))
        .await
        .unwrap();
    let caps = capacity(&node);
    assert!(!caps.contains_key(BATCH_CPU), "{caps:?}");
    assert_eq!(caps[BATCH_MEMORY], "1Gi");
    assert_eq!(caps["cpu"], "8");

    // A merge patch null removes it for good, and from every entry.
    let remove = json!({"status": {"capacity": {BATCH_MEMORY: null}}});
    let node = api
        .patch_status(&name, &merge_as("mgr"), &Patch::Merge(remove))
        .await
        .unwrap();
    assert!(!capacity(&node).contains_key(BATCH_MEMORY));
    assert!(entry(&node, "old-writer", "Update").is_none());
    assert!(entry(&node, "mgr", "Update").is_none(), "a removal owns nothing");
}

#[tokio::test]
async fn json_patches_and_puts_are_update_entries_of_their_field_manager() {
    let (_c, client, _ns) = cluster_with_namespace().await;
    let api: Api<Node> = Api::all(client.clone());
    let name = node_with_kubelet_status(&api).await;
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}
    ]))
    .unwrap();
    api.patch(&name, &merge_as("json-writer"), &Patch::<()>::Json(patch))
        .await
        .unwrap();
    let mut node = api.get(&name).await.unwrap();
    node.metadata
        .labels
        .get_or_insert_default()
        .insert("b".into(), "2".into());
    let params = PostParams {
        field_manager: Some("put-writer".into()),
        ..PostParams::default()
    };
    let node = api.replace(&name, &params, &node).await.unwrap();
    let annotations = entry(&node, "json-writer", "Update").expect("the JSON patch's entry");
    assert!(
        annotations
            .fields_v1
            .as_ref()
            .and_then(|f| f.0.pointer("/f:metadata/f:annotations/f:a"))
            .is_some()
    );
    assert!(entry(&node, "put-writer", "Update").is_some());

    let apply = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"a": "x"}, "labels": {"b": "y"}}});
    let err = api
        .patch(&name, &PatchParams::apply("mgr"), &Patch::Apply(&apply))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err:?}")
    };
    assert_eq!(status.code, 409);
    let mut causes: Vec<(String, String)> = status
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| (c.message, c.field))
        .collect();
    causes.sort();
    assert_eq!(
        causes,
        vec![
            (
                "conflict with \"json-writer\" using v1".into(),
                ".metadata.annotations.a".into()
            ),
            (
                "conflict with \"put-writer\" using v1".into(),
                ".metadata.labels.b".into()
            ),
        ]
    );
    assert!(
        status.message.starts_with("Apply failed with 2 conflicts: "),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn status_applies_to_a_custom_resource_own_the_status_and_leave_the_spec() {
    let (cluster, client, _ns) = cluster_with_namespace().await;
    cluster
        .install_crds_from_dir(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../charts/koordinator/crds"
        ))
        .await
        .unwrap();
    let api: Api<NodeMetric> = Api::all(client.clone());
    let name = unique("nm");
    let status = |with_prediction: bool| {
        let mut status = json!({"updateTime": "2024-01-01T00:00:00Z",
            "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "1Gi"}}}});
        if with_prediction {
            status["prodReclaimableMetric"] = json!({"resource": {"resources": {"cpu": "2"}}});
        }
        json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
               "metadata": {"name": name}, "status": status})
    };

    // No object: a status apply is 404 (status never creates).
    let err = api
        .patch_status(&name, &PatchParams::apply("agent"), &Patch::Apply(status(true)))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 404), "{err:?}");

    let spec = json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": name}, "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}}});
    api.patch(&name, &PatchParams::apply("mgr"), &Patch::Apply(&spec))
        .await
        .unwrap();
    let nm = api
        .patch_status(&name, &PatchParams::apply("agent"), &Patch::Apply(status(true)))
        .await
        .unwrap();
    assert!(nm.status.as_ref().unwrap().prod_reclaimable_metric.is_some());
    let entries = nm.metadata.managed_fields.clone().unwrap();
    let agent = entries
        .iter()
        .find(|e| e.manager.as_deref() == Some("agent"))
        .expect("the status apply is recorded");
    assert_eq!(
        (agent.operation.as_deref(), agent.subresource.as_deref()),
        (Some("Apply"), Some("status"))
    );
    assert!(
        entries
            .iter()
            .any(|e| e.manager.as_deref() == Some("mgr") && e.operation.as_deref() == Some("Apply"))
    );

    // The prediction omitted: the agent owned it alone, so it goes; the spec stays.
    let nm = api
        .patch_status(&name, &PatchParams::apply("agent"), &Patch::Apply(status(false)))
        .await
        .unwrap();
    // (Pruning removes the leaf; a real server may leave its emptied parents behind.)
    let status = nm.status.as_ref().unwrap();
    assert!(
        status
            .prod_reclaimable_metric
            .as_ref()
            .is_none_or(|p| p.resource.resources.is_empty()),
        "{status:?}"
    );
    assert!(status.node_metric.is_some());
    assert_eq!(
        nm.spec
            .metric_collect_policy
            .and_then(|p| p.report_interval_seconds),
        Some(60)
    );
}
