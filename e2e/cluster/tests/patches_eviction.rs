//! Patch flavours, server-side apply, leases (kube-lease-manager), binding and eviction.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{cluster_with_namespace, pod, unique};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event as NewEvent;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;

#[tokio::test]
async fn every_patch_type() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut p = pod("pp", &[("a", "1")]);
    p.spec
        .as_mut()
        .unwrap()
        .containers
        .push(serde_json::from_value(json!({"name": "side", "image": "x"})).unwrap());
    pods.create(&PostParams::default(), &p).await.unwrap();
    let pp = PatchParams::default();
    // JSON merge patch: labels merge, null deletes.
    let out = pods
        .patch(
            "pp",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": null, "b": "2"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        out.metadata.labels.unwrap().into_iter().collect::<Vec<_>>(),
        vec![("b".to_string(), "2".to_string())]
    );
    // JSON patch.
    let jp: json_patch::Patch =
        serde_json::from_value(json!([{"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}}]))
            .unwrap();
    let out = pods.patch("pp", &pp, &Patch::<()>::Json(jp)).await.unwrap();
    assert_eq!(out.metadata.annotations.unwrap()["x"], "y");
    // A failing JSON patch test op is 422, not a crash.
    let jp: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/metadata/name", "value": "other"}])).unwrap();
    let err = pods.patch("pp", &pp, &Patch::<()>::Json(jp)).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 422), "{err:?}");
    // Strategic merge: containers merge by name (the other container survives).
    let smp = json!({"spec": {"containers": [{"name": "side", "image": "y"}]}});
    let out = pods.patch("pp", &pp, &Patch::Strategic(smp)).await.unwrap();
    let cs = out.spec.unwrap().containers;
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[1].image.as_deref(), Some("y"));
    assert_eq!(cs[0].name, "main");
    // Strategic merge on status conditions merges by type.
    let st = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}});
    pods.patch_status("pp", &pp, &Patch::Strategic(st)).await.unwrap();
    let st = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let out = pods.patch_status("pp", &pp, &Patch::Strategic(st)).await.unwrap();
    let conds = out.status.unwrap().conditions.unwrap();
    assert_eq!(conds.len(), 2);
    assert!(conds.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    // Server-side apply records the field manager and reports conflicts.
    let ssa = PatchParams::apply("mgr-a");
    let cfg =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pp", "labels": {"owner": "a"}}});
    let out = pods.patch("pp", &ssa, &Patch::Apply(&cfg)).await.unwrap();
    assert!(
        out.metadata
            .managed_fields
            .unwrap()
            .iter()
            .any(|m| m.manager.as_deref() == Some("mgr-a") && m.operation.as_deref() == Some("Apply"))
    );
    let cfg_b =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pp", "labels": {"owner": "b"}}});
    let err = pods
        .patch("pp", &PatchParams::apply("mgr-b"), &Patch::Apply(&cfg_b))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409), "{err:?}");
    let out = pods
        .patch("pp", &PatchParams::apply("mgr-b").force(), &Patch::Apply(&cfg_b))
        .await
        .unwrap();
    assert_eq!(out.metadata.labels.unwrap()["owner"], "b");
    // Apply creates when absent.
    let new = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "applied"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    pods.patch("applied", &ssa, &Patch::Apply(&new)).await.unwrap();
    assert!(pods.get_opt("applied").await.unwrap().is_some());
}

#[tokio::test]
async fn lease_manager_acquires_and_releases() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let name = unique("lease");
    let a = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &name)
        .with_namespace(&ns)
        .with_identity("holder-a")
        .with_duration(5)
        .with_grace(1)
        .build()
        .await
        .unwrap();
    let b = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &name)
        .with_namespace(&ns)
        .with_identity("holder-b")
        .with_duration(5)
        .with_grace(1)
        .build()
        .await
        .unwrap();
    assert!(a.changed().await.unwrap(), "a acquires the free lease");
    // b blocks while a holds an unexpired lease.
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), b.changed())
            .await
            .is_err(),
        "b cannot take a held lease"
    );
    let leases: Api<Lease> = Api::namespaced(client, &ns);
    let l = leases.get(&name).await.unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("holder-a"));
    a.release().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if b.changed().await.unwrap() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    assert!(acquired);
    assert_eq!(
        leases
            .get(&name)
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("holder-b")
    );
}

async fn running_ready(pods: &Api<Pod>, name: &str) {
    let st = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(st))
        .await
        .unwrap();
}

#[tokio::test]
async fn binding_and_eviction_honour_pdbs() {
    let (cluster, _, ns) = cluster_with_namespace().await;
    // kube 5 retries 429 up to 15 times with backoff by default (also against a real cluster);
    // turn that off to see the blocked eviction at once.
    let mut cfg = cluster.kube_config();
    cfg.default_retry = false;
    let client = kube::Client::try_from(cfg).unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for n in ["e1", "e2", "free"] {
        let app = if n == "free" { "other" } else { "guarded" };
        pods.create(&PostParams::default(), &pod(n, &[("app", app)]))
            .await
            .unwrap();
        running_ready(&pods, n).await;
    }
    // Binding sets spec.nodeName once.
    let binding = Binding {
        metadata: kube::api::ObjectMeta {
            name: Some("e1".into()),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some("node-1".into()),
            ..Default::default()
        },
    };
    let url = format!("{}/e1/binding", Pod::url_path(&(), Some(&ns)));
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    client.request_text(req.clone()).await.unwrap();
    assert_eq!(
        pods.get("e1").await.unwrap().spec.unwrap().node_name.as_deref(),
        Some("node-1")
    );
    assert!(matches!(client.request_text(req).await.unwrap_err(), kube::Error::Api(ref s) if s.code == 409));
    let on_node = pods
        .list(&ListParams::default().fields("spec.nodeName=node-1"))
        .await
        .unwrap();
    assert_eq!(on_node.items.len(), 1);

    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guard"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    // Blocked: both guarded pods are needed.
    let err = pods.evict("e1", &EvictParams::default()).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 429), "{err:?}");
    assert!(pods.get_opt("e1").await.unwrap().is_some());
    // Not covered by any budget: evicted.
    pods.evict("free", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("free").await.unwrap().is_none());
    // Relax the budget: eviction goes through.
    pdbs.patch(
        "guard",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 1}})),
    )
    .await
    .unwrap();
    pods.evict("e1", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("e1").await.unwrap().is_none());
    // Now e2 is the last one: blocked again.
    assert!(
        matches!(pods.evict("e2", &EvictParams::default()).await.unwrap_err(), kube::Error::Api(ref s) if s.code == 429)
    );
}

#[tokio::test]
async fn recorder_events_are_visible_in_both_event_apis() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node_name = unique("node");
    let node: Node = serde_json::from_value(json!({"metadata": {"name": node_name}})).unwrap();
    let node = nodes.create(&PostParams::default(), &node).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let p = pods
        .create(&PostParams::default(), &pod("ev", &[]))
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "koord-test".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "Evicted".into(),
        note: Some("cpu".into()),
        action: "Evict".into(),
        secondary: None,
    };
    recorder.publish(&ev, &p.object_ref(&())).await.unwrap();
    recorder.publish(&ev, &p.object_ref(&())).await.unwrap();
    let new: Api<NewEvent> = Api::namespaced(client.clone(), &ns);
    let list = new.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), &ns);
    let by_obj = core
        .list(&ListParams::default().fields("involvedObject.name=ev,involvedObject.kind=Pod"))
        .await
        .unwrap();
    assert_eq!(by_obj.items.len(), 1);
    assert_eq!(by_obj.items[0].message.as_deref(), Some("cpu"));
    assert_eq!(by_obj.items[0].reason.as_deref(), Some("Evicted"));
    let _ = node;
}
