//! The manager's writes as server-side apply against the embedded API server: it takes back
//! batch-cpu another writer changed and leaves the kubelet's fields alone, it removes batch
//! and mid resources an earlier version wrote with merge patches, and a steady state makes no
//! writes at all.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use koord_api::{NodeMetric, NodeSLO};
use koord_test_support::eventually;
use kube::api::{Api, Patch};
use serde_json::json;

const BATCH_CPU: &str = "kubernetes.io/batch-cpu";

/// The Node's `list` (`capacity` or `allocatable`) as name → quantity.
async fn resources(client: &kube::Client, name: &str, list: &str) -> Vec<(String, String)> {
    let node = Api::<Node>::all(client.clone()).get(name).await.unwrap();
    let status = node.status.unwrap_or_default();
    let list = if list == "capacity" {
        status.capacity
    } else {
        status.allocatable
    };
    list.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

/// The managedFields entries of a Node.
async fn entries(client: &kube::Client, name: &str) -> Vec<ManagedFieldsEntry> {
    let node = Api::<Node>::all(client.clone()).get(name).await.unwrap();
    node.metadata.managed_fields.unwrap_or_default()
}

/// The managers (name, operation) whose entry owns `status.<list>.<resource>`.
fn owners(entries: &[ManagedFieldsEntry], list: &str, resource: &str) -> Vec<(String, String)> {
    let pointer = format!("/f:status/f:{list}/f:{}", resource.replace('/', "~1"));
    entries
        .iter()
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer(&pointer).is_some())
        })
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn apply_entry(manager: &str) -> (String, String) {
    (manager.to_owned(), "Apply".to_owned())
}

#[tokio::test]
async fn the_manager_takes_back_batch_cpu_another_writer_changed_and_leaves_the_kubelets_fields() {
    let (_cluster, client) = cluster().await;
    config_map(&client, &[("colocation-config", r#"{"enable": true}"#)]).await;
    add_node(&client, "n1").await;
    let mut run_args = args(false, 30, "m1");
    let metrics = koord_test_support::free_loopback_addr().unwrap();
    run_args.metrics_addr = metrics;
    let (_stop, _task) = start(&client, run_args);
    wait_node_metric(&client, "n1").await;
    report_usage(&client, "n1", "7").await;
    // Defaults: reclaim 60 % CPU → 100 − 40 − 7 = 53 cores.
    wait_batch_cpu(&client, "n1", "53000", "batch-cpu on n1").await;
    let managed = entries(&client, "n1").await;
    assert_eq!(
        owners(&managed, "allocatable", BATCH_CPU),
        vec![apply_entry("koord-manager-status")],
        "{managed:?}"
    );

    // Another writer sets batch-cpu (a merge patch under its own field manager).
    let other = json!({"status": {"capacity": {BATCH_CPU: "1"}, "allocatable": {BATCH_CPU: "1"}}});
    Api::<Node>::all(client.clone())
        .patch_status("n1", &field_manager("other-writer"), &Patch::Merge(other))
        .await
        .unwrap();
    wait_batch_cpu(&client, "n1", "53000", "batch-cpu taken back").await;
    let series = r#"koord_manager_apply_conflicts_total{resource="nodes/status"}"#;
    koord_test_support::wait_for("the conflict counted", PATIENCE, async || {
        koord_test_support::scrape(metrics)
            .await
            .filter(|body| koord_test_support::sample(body, series).is_some_and(|n| n >= 1.0))
    })
    .await;

    // The manager owns batch-cpu again, alone; the kubelet still owns its fields, unchanged.
    let managed = entries(&client, "n1").await;
    for list in ["capacity", "allocatable"] {
        assert_eq!(
            owners(&managed, list, BATCH_CPU),
            vec![apply_entry("koord-manager-status")],
            "{managed:?}"
        );
        let values = resources(&client, "n1", list).await;
        for (resource, want) in [("cpu", "100"), ("memory", "120G"), ("pods", "110")] {
            assert!(
                values.contains(&(resource.to_owned(), want.to_owned())),
                "{list}: {values:?}"
            );
            assert_eq!(
                owners(&managed, list, resource),
                vec![("kubelet".to_owned(), "Update".to_owned())],
                "{managed:?}"
            );
        }
    }
    // The annotations are the metadata manager's, the status fields the status manager's.
    let annotations = managed
        .iter()
        .find(|e| e.manager.as_deref() == Some("koord-manager"))
        .expect("the metadata entry");
    assert_eq!(annotations.operation.as_deref(), Some("Apply"));
    let fields = &annotations.fields_v1.as_ref().unwrap().0;
    assert!(
        fields
            .pointer("/f:metadata/f:annotations/f:node.koordinator.sh~1originExtendedAllocatable")
            .is_some(),
        "{fields}"
    );
    assert!(fields.get("f:status").is_none(), "{fields}");
}

#[tokio::test]
async fn batch_and_mid_resources_an_earlier_version_merge_patched_are_removed() {
    let (_cluster, client) = cluster().await;
    config_map(&client, &[("colocation-config", r#"{"enable": false}"#)]).await;
    add_node(&client, "n1").await;
    // What an earlier version of the manager (or upstream's) left: merge patches, so the
    // fields belong to an Update entry, which an apply that omits them does not remove.
    let list = json!({BATCH_CPU: "50k", "kubernetes.io/batch-memory": "60G",
        "kubernetes.io/mid-cpu": "2k", "kubernetes.io/mid-memory": "4G"});
    let old = json!({"status": {"capacity": list, "allocatable": list}});
    Api::<Node>::all(client.clone())
        .patch_status("n1", &field_manager("koord-manager"), &Patch::Merge(old))
        .await
        .unwrap();
    let (_stop, _task) = start(&client, args(false, 30, "m1"));
    wait_node_metric(&client, "n1").await;
    report_usage(&client, "n1", "7").await;
    eventually("batch and mid resources removed", PATIENCE, || async {
        let mut names: Vec<String> = resources(&client, "n1", "capacity")
            .await
            .into_iter()
            .chain(resources(&client, "n1", "allocatable").await)
            .map(|(k, _)| k)
            .collect();
        names.sort();
        names.dedup();
        names == ["cpu", "memory", "pods"]
    })
    .await;
    let managed = entries(&client, "n1").await;
    for list in ["capacity", "allocatable"] {
        for resource in [BATCH_CPU, "kubernetes.io/mid-memory"] {
            assert!(owners(&managed, list, resource).is_empty(), "{managed:?}");
        }
        assert_eq!(
            owners(&managed, list, "cpu"),
            vec![("kubelet".to_owned(), "Update".to_owned())]
        );
    }
}

#[tokio::test]
async fn a_steady_state_makes_no_writes() {
    let (_cluster, client) = cluster().await;
    config_map(&client, &[("colocation-config", r#"{"enable": true}"#)]).await;
    add_node(&client, "n1").await;
    let (recording, traffic) = recording_client(&client);
    let (_stop, _task) = start(&recording, args(false, 30, "m1"));
    eventually("NodeSLO and NodeMetric", PATIENCE, || async {
        node_slo(&client, "n1").await.is_some()
            && Api::<NodeMetric>::all(client.clone())
                .get_opt("n1")
                .await
                .unwrap()
                .is_some()
    })
    .await;
    report_usage(&client, "n1", "7").await;
    wait_batch_cpu(&client, "n1", "53000", "batch-cpu on n1").await;
    // Let the writes of that round (annotation, Events) land, then watch several resyncs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = traffic.writes();
    assert!(
        settled.iter().any(|w| w.ends_with("/nodes/n1/status")),
        "{settled:?}"
    );
    let rv = |slo: Option<NodeSLO>| slo.and_then(|s| s.metadata.resource_version);
    let slo_version = rv(node_slo(&client, "n1").await);
    let node_version = Api::<Node>::all(client.clone())
        .get("n1")
        .await
        .unwrap()
        .metadata
        .resource_version;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(traffic.writes(), settled, "a steady state wrote");
    assert_eq!(rv(node_slo(&client, "n1").await), slo_version);
    let node = Api::<Node>::all(client.clone()).get("n1").await.unwrap();
    assert_eq!(node.metadata.resource_version, node_version);
}
