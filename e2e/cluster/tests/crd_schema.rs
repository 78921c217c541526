//! Custom resources follow their CRD's structural schema as on a real API server: unknown fields
//! are pruned (on create, update and status writes), `default`s fill absent fields, and
//! `x-kubernetes-preserve-unknown-fields` keeps a subtree.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::cluster_with_namespace;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

fn crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gizmos.test.koordinator.sh"},
        "spec": {"group": "test.koordinator.sh", "scope": "Namespaced",
            "names": {"kind": "Gizmo", "plural": "gizmos", "singular": "gizmo"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "default": 3},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}}}]}
    })
}

#[tokio::test]
async fn unknown_fields_are_pruned_and_defaults_applied() {
    let (cluster, client, ns) = cluster_with_namespace().await;
    cluster.apply_object(crd()).await.unwrap();
    let ar = ApiResource {
        group: "test.koordinator.sh".into(),
        version: "v1".into(),
        api_version: "test.koordinator.sh/v1".into(),
        kind: "Gizmo".into(),
        plural: "gizmos".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.koordinator.sh/v1", "kind": "Gizmo", "metadata": {"name": "g"},
        "spec": {"colour": "red", "extra": {"anything": {"goes": 1}}},
        "top": true
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(
        created.data["spec"],
        json!({"size": 3, "extra": {"anything": {"goes": 1}}})
    );
    assert!(created.data.get("top").is_none(), "{:?}", created.data);

    let patched = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5, "typo": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["size"], 5);
    assert!(patched.data["spec"].get("typo").is_none());

    let status = api
        .patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true, "unknown": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(status.data["status"], json!({"ready": true}));
}
