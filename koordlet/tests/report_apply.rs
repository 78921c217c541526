//! The NodeMetric report as server-side apply against the embedded API server (tier 4): the
//! status is koordlet's (field manager `koordlet`), the spec stays koord-manager's, what an
//! earlier merge-patching writer left is taken back or removed, and a prediction that is gone
//! leaves no trace.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use common::cluster::{cluster_with_namespace, unique};
use koord_api::{NodeMetric, NodeMetricStatus};
use koordlet::report::{FIELD_MANAGER, PublishError, publish};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

fn status(time: &str, prediction: Option<&str>) -> NodeMetricStatus {
    let mut status = json!({"updateTime": time,
        "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1500m", "memory": "1073741824"}},
                       "systemUsage": {"resources": {"cpu": "200m"}}},
        "podsMetric": []});
    if let Some(cpu) = prediction {
        status["prodReclaimableMetric"] = json!({"resource": {"resources": {"cpu": cpu}}});
    }
    serde_json::from_value(status).unwrap()
}

/// The field sets of `manager`'s entries, as JSON.
fn owned_by(nm: &NodeMetric, manager: &str) -> Vec<(String, Option<String>, Value)> {
    nm.metadata
        .managed_fields
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.manager.as_deref() == Some(manager))
        .map(|e| {
            (
                e.operation.unwrap_or_default(),
                e.subresource,
                e.fields_v1.map(|f| f.0).unwrap_or(Value::Null),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_is_applied_as_koordlet_and_takes_over_what_an_earlier_writer_left() {
    let (_cluster, client, _ns) = cluster_with_namespace("report").await;
    let api: Api<NodeMetric> = Api::all(client.clone());
    let node = unique("nm");

    // No NodeMetric yet: the report waits for koord-manager to create it.
    let err = publish(&client, &node, &status("2024-01-01T00:00:00Z", None))
        .await
        .unwrap_err();
    assert!(matches!(err, PublishError::Missing(ref n) if *n == node), "{err}");

    // koord-manager's spec; an earlier koordlet's merge patch of the status.
    let spec = json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": node}, "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}}});
    api.patch(&node, &PatchParams::apply("koord-manager"), &Patch::Apply(&spec))
        .await
        .unwrap();
    let old = json!({"status": {"updateTime": "2023-12-31T00:00:00Z",
        "prodReclaimableMetric": {"resource": {"resources": {"cpu": "9"}}}}});
    let params = PatchParams {
        field_manager: Some("old-koordlet".into()),
        ..PatchParams::default()
    };
    api.patch_status(&node, &params, &Patch::Merge(&old))
        .await
        .unwrap();

    // The first report changes updateTime, which the old writer owns: a conflict, taken back;
    // the prediction it left (koordlet has none) is removed although the old writer owned it.
    let conflict = publish(&client, &node, &status("2024-01-01T00:00:00Z", None))
        .await
        .unwrap()
        .expect("a conflict with the earlier writer");
    assert_eq!(conflict.fields, vec![".status.updateTime".to_string()]);
    assert_eq!(
        conflict.managers,
        vec!["\"old-koordlet\" using slo.koordinator.sh/v1alpha1"]
    );
    let nm = api.get(&node).await.unwrap();
    let got = nm.status.clone().unwrap();
    assert_eq!(got.prod_reclaimable_metric, None);
    assert_eq!(got.node_metric.unwrap().node_usage.resources["cpu"].0, "1500m");
    assert_eq!(
        nm.spec
            .metric_collect_policy
            .as_ref()
            .and_then(|p| p.report_interval_seconds),
        Some(60),
        "the spec is koord-manager's"
    );
    assert!(
        owned_by(&nm, "old-koordlet").is_empty(),
        "{:?}",
        nm.metadata.managed_fields
    );
    let mine = owned_by(&nm, FIELD_MANAGER);
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(
        (mine[0].0.as_str(), mine[0].1.as_deref()),
        ("Apply", Some("status"))
    );
    assert!(mine[0].2.pointer("/f:status/f:updateTime").is_some());
    assert!(mine[0].2.get("f:spec").is_none());
    assert!(owned_by(&nm, "koord-manager")[0].2.pointer("/f:spec").is_some());

    // Later reports meet no conflict; a prediction comes and goes without a trace.
    let with = publish(&client, &node, &status("2024-01-01T00:01:00Z", Some("3")))
        .await
        .unwrap();
    assert_eq!(with, None);
    let predicted = api.get(&node).await.unwrap().status.unwrap();
    assert_eq!(
        predicted.prod_reclaimable_metric.unwrap().resource.resources["cpu"].0,
        "3"
    );
    let without = publish(&client, &node, &status("2024-01-01T00:02:00Z", None))
        .await
        .unwrap();
    assert_eq!(without, None);
    let got = api.get(&node).await.unwrap().status.unwrap();
    assert_eq!(got.prod_reclaimable_metric, None);
    assert_eq!(
        got.update_time.map(|t| t.0.to_string()).as_deref(),
        Some("2024-01-01T00:02:00Z")
    );
}
