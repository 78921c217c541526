//! The HTTP routes over an in-memory cache: both `nodeCacheCapable` forms of filter, prioritize
//! on the 0-10 scale, a bad body, and the Pods ledger feeding batch headroom.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use axum::body::Body;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use koord_api::nodemetric::NodeMetric;
use koord_scheduler_extender::cluster::ClusterCache;
use koord_scheduler_extender::decide::MetricFacts;
use koord_scheduler_extender::decide::Policy;
use koord_scheduler_extender::extender::Extender;
use koord_scheduler_extender::facts::ScalingFactors;
use koord_scheduler_extender::facts::{NodeEntry, metric_facts, node_entry};
use koord_scheduler_extender::ledger::PodLedger;
use koord_scheduler_extender::metrics::ExtenderMetrics;
use koord_scheduler_extender::table::Table;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tower::ServiceExt;

fn node(name: &str, batch_cpu: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi",
            "kubernetes.io/batch-cpu": batch_cpu, "kubernetes.io/batch-memory": "8Gi"}},
    }))
    .unwrap()
}

fn metric(name: &str, seconds_ago: i64) -> NodeMetric {
    let mut metric = NodeMetric::new(name, Default::default());
    metric.status = Some(
        serde_json::from_value(json!({
            "updateTime": Time(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds_ago)),
            "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "2Gi"}}},
        }))
        .unwrap(),
    );
    metric
}

fn be_pod(name: &str, node: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
            "requests": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}}}]},
    }))
    .unwrap()
}

/// fresh-a and fresh-b report now (b has 3 BE pods using 3 of its 4 batch cores), stale reports
/// an hour ago.
fn extender() -> axum::Router {
    let nodes: Table<NodeEntry> = Table::default();
    let metrics: Table<MetricFacts> = Table::default();
    for (name, age) in [("fresh-a", 10), ("fresh-b", 10), ("stale", 3600)] {
        nodes.apply(Event::Apply(node(name, "4000")), node_entry);
        metrics.apply(Event::Apply(metric(name, age)), |m| metric_facts(Some(m)));
    }
    let pods = PodLedger::new(ScalingFactors::default());
    pods.apply(Event::Init);
    for i in 0..3 {
        pods.apply(Event::InitApply(be_pod(&format!("p{i}"), Some("fresh-b"))));
    }
    pods.apply(Event::InitDone);
    let extender = Extender {
        cache: ClusterCache::from_parts(nodes, metrics, pods),
        policy: Policy::default(),
        factors: ScalingFactors::default(),
        metrics: ExtenderMetrics::default(),
    };
    koord_scheduler_extender::server::router(Arc::new(extender))
}

async fn post(router: &axum::Router, path: &str, body: Value) -> (u16, Value) {
    let request = http::Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn extender_filter_answers_names_for_names_and_objects_for_objects() {
    let router = extender();
    let pod = be_pod("new", None);
    let (status, result) = post(
        &router,
        "/filter",
        json!({"Pod": pod, "NodeNames": ["fresh-a", "fresh-b", "stale"]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(result["NodeNames"], json!(["fresh-a", "fresh-b"]));
    assert!(
        result["FailedAndUnresolvableNodes"]["stale"]
            .as_str()
            .unwrap()
            .contains("degradeTimeMinutes")
    );
    assert_eq!(result["FailedNodes"], json!({}));
    assert_eq!(result["Error"], "");
    assert!(result.get("Nodes").is_none());

    let objects = json!({"metadata": {}, "items": [
        {"metadata": {"name": "stale", "uid": "1"}, "status": {}},
        {"metadata": {"name": "fresh-a", "uid": "2"}, "status": {}},
    ]});
    let (status, result) = post(&router, "/filter", json!({"Pod": pod, "Nodes": objects})).await;
    assert_eq!(status, 200);
    assert_eq!(
        result["Nodes"]["items"],
        json!([{"metadata": {"name": "fresh-a", "uid": "2"}, "status": {}}])
    );
    assert!(result.get("NodeNames").is_none());
}

#[tokio::test]
async fn extender_prioritize_prefers_batch_headroom_on_the_0_to_10_scale() {
    let router = extender();
    let (status, result) = post(
        &router,
        "/prioritize",
        json!({"Pod": be_pod("new", None), "NodeNames": ["fresh-a", "fresh-b"]}),
    )
    .await;
    assert_eq!(status, 200);
    let scores: Vec<(String, i64)> = result
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["Host"].as_str().unwrap().to_owned(),
                p["Score"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(scores.len(), 2);
    // fresh-b's 4 batch cores are taken by its 3 pods and the new one: no headroom left.
    assert!(scores[0].1 > scores[1].1, "{scores:?}");
    assert!(scores.iter().all(|(_, s)| (0..=10).contains(s)), "{scores:?}");
}

#[tokio::test]
async fn extender_rejects_an_unreadable_body_with_400() {
    let router = extender();
    let request = http::Request::post("/filter")
        .body(Body::from("{not json"))
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
}

#[tokio::test]
async fn metrics_endpoint_serves_the_build_and_the_process() {
    let mut registry = prometheus_client::registry::Registry::default();
    let _metrics = koord_scheduler_extender::serve::register_metrics(&mut registry);
    let app = koord_runtime::admin_router(Arc::new(registry), koord_runtime::Readiness::default());
    let response = app
        .oneshot(http::Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), http::StatusCode::OK);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8(bytes.to_vec()).unwrap();
    let build = format!(
        "koord_scheduler_extender_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(koord_test_support::sample(&body, &build), Some(1.0), "{body}");
    assert!(koord_test_support::sample(&body, "process_resident_memory_bytes").unwrap() > 1e6);
    assert!(koord_test_support::sample(&body, "process_open_fds").unwrap() >= 3.0);
}
