//! Embedded cluster (tier 4): the evictor posts the Eviction version the API server serves —
//! `policy/v1` on a Kubernetes 1.22+ server, `policy/v1beta1` on a 1.18–1.21 server (the
//! embedded server in [`EvictionApi::V1beta1Only`] refuses a `policy/v1` body as 1.20 does),
//! keeps a PodDisruptionBudget's 429, and discovers again when the server refuses the version
//! it used.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use koord_testcluster::{ClusterOptions, EvictionApi, TestCluster};
use koordlet::evictor::{EvictOutcome, EvictionVersion, Evictor, discover_eviction_version};
use koordlet::states::PodMeta;
use koordlet::telemetry::Telemetry;
use koordlet_core::strategies::eviction::EvictionPick;
use kube::api::{Api, PostParams};
use serde_json::json;

async fn cluster(api: EvictionApi) -> (TestCluster, kube::Client) {
    let cluster = TestCluster::start(ClusterOptions {
        eviction_api: api,
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    // As the agent builds it: no client-side retry of 429s.
    let client = koordlet::evictor::no_retry_client(cluster.kube_config()).unwrap();
    (cluster, client)
}

async fn be_pod(client: &kube::Client, name: &str) -> PodMeta {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"koordinator.sh/qosClass": "BE", "app": name}},
        "spec": {"containers": [{"name": "c", "image": "busy"}]}
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    PodMeta::new(Arc::new(created)).unwrap()
}

fn pick(pod: &PodMeta) -> EvictionPick {
    EvictionPick {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.as_str().to_owned(),
        strategy: "memory_evict",
        reason: "EvictPodByNodeMemoryUsage",
        message: "test".into(),
    }
}

fn evictor(client: &kube::Client) -> Evictor {
    let mut registry = prometheus_client::registry::Registry::default();
    let telemetry = Telemetry::register(&mut registry, "node-1");
    Evictor::new(client.clone(), "node-a", false, telemetry)
}

async fn gone_or_deleting(client: &kube::Client, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    match pods.get_opt(name).await.unwrap() {
        None => true,
        Some(p) => p.metadata.deletion_timestamp.is_some(),
    }
}

#[tokio::test]
async fn discovery_names_the_version_each_release_serves() {
    let (_c, client) = cluster(EvictionApi::V1AndV1beta1).await;
    assert_eq!(
        discover_eviction_version(&client).await.unwrap(),
        EvictionVersion::V1
    );
    let (_c, client) = cluster(EvictionApi::V1beta1Only).await;
    assert_eq!(
        discover_eviction_version(&client).await.unwrap(),
        EvictionVersion::V1beta1
    );
}

#[tokio::test]
async fn evicts_with_v1_on_a_current_server() {
    let (_c, client) = cluster(EvictionApi::V1AndV1beta1).await;
    let pod = be_pod(&client, "be-v1").await;
    let mut ev = evictor(&client);
    let out = ev
        .evict(&[pick(&pod)], std::slice::from_ref(&pod), Instant::now())
        .await;
    assert_eq!(out, [EvictOutcome::Evicted]);
    assert_eq!(ev.eviction_version(), Some(EvictionVersion::V1));
    assert!(gone_or_deleting(&client, "be-v1").await);
}

#[tokio::test]
async fn evicts_with_v1beta1_on_a_1_20_server() {
    let (_c, client) = cluster(EvictionApi::V1beta1Only).await;
    let pod = be_pod(&client, "be-v1beta1").await;
    let mut ev = evictor(&client);
    let out = ev
        .evict(&[pick(&pod)], std::slice::from_ref(&pod), Instant::now())
        .await;
    assert_eq!(out, [EvictOutcome::Evicted]);
    assert_eq!(ev.eviction_version(), Some(EvictionVersion::V1beta1));
    assert!(gone_or_deleting(&client, "be-v1beta1").await);
}

#[tokio::test]
async fn a_refused_version_is_discovered_again() {
    let (_c, client) = cluster(EvictionApi::V1beta1Only).await;
    let pod = be_pod(&client, "be-stale").await;
    // As if cached before the API server was replaced by an older release.
    let mut ev = evictor(&client).with_eviction_version(EvictionVersion::V1);
    let out = ev
        .evict(&[pick(&pod)], std::slice::from_ref(&pod), Instant::now())
        .await;
    assert_eq!(out, [EvictOutcome::Evicted]);
    assert_eq!(ev.eviction_version(), Some(EvictionVersion::V1beta1));
    assert!(gone_or_deleting(&client, "be-stale").await);
}

#[tokio::test]
async fn a_pdb_still_answers_429_in_v1beta1() {
    let (_c, client) = cluster(EvictionApi::V1beta1Only).await;
    let pod = be_pod(&client, "be-guarded").await;
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), "default");
    let pdb = serde_json::from_value(json!({
        "metadata": {"name": "guard"},
        "spec": {"selector": {"matchLabels": {"app": "be-guarded"}}, "minAvailable": 1}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let mut ev = evictor(&client);
    let started = Instant::now();
    let out = ev
        .evict(&[pick(&pod)], std::slice::from_ref(&pod), Instant::now())
        .await;
    assert_eq!(out, [EvictOutcome::Failed]);
    // No client-side retry of the 429.
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!gone_or_deleting(&client, "be-guarded").await);
    assert_eq!(ev.eviction_version(), Some(EvictionVersion::V1beta1));
}

#[tokio::test]
async fn a_1_20_server_refuses_a_v1_body() {
    let (_c, client) = cluster(EvictionApi::V1beta1Only).await;
    let pod = be_pod(&client, "be-raw").await;
    let body = serde_json::to_vec(&EvictionVersion::V1.body("default", "be-raw", pod.uid.as_str())).unwrap();
    let req = http::Request::post("/api/v1/namespaces/default/pods/be-raw/eviction")
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    match client.request::<serde_json::Value>(req).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 400, "{s:?}"),
        other => panic!("expected 400, got {other:?}"),
    }
    assert!(!gone_or_deleting(&client, "be-raw").await);
}
