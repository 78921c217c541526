//! Scale: nodes and pods loaded in-process, then a kube-rs reflector over all pods syncs.
//! The light test runs in CI; the full 1,000 nodes / 30,000 pods figure comes from
//! `cargo test --release -p koord-testcluster --test scale -- --ignored --nocapture`.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use koord_testcluster::{ClusterOptions, TestCluster};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

async fn load(cluster: &TestCluster, nodes: usize, pods: usize) -> Duration {
    let start = Instant::now();
    for n in 0..nodes {
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{n:04}"), "labels": {"kubernetes.io/hostname": format!("node-{n:04}")}},
            "status": {"capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
                       "allocatable": {"cpu": "31", "memory": "120Gi", "pods": "110", "kubernetes.io/batch-cpu": "10000"}}
        });
        cluster.apply_object(node).await.unwrap();
    }
    for p in 0..pods {
        let qos = if p % 3 == 0 { "BE" } else { "LS" };
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{p:05}"), "namespace": "default",
                         "labels": {"app": format!("app-{}", p % 50), "koordinator.sh/qosClass": qos}},
            "spec": {"nodeName": format!("node-{:04}", p % nodes.max(1)),
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                   "limits": {"cpu": "200m", "memory": "256Mi"}}}]}
        });
        cluster.apply_object(pod).await.unwrap();
    }
    start.elapsed()
}

async fn reflector_sync(cluster: &TestCluster, expected: usize) -> Duration {
    let client = cluster.client().unwrap();
    let pods: Api<Pod> = Api::all(client);
    let (reader, writer) = reflector::store::<Pod>();
    let start = Instant::now();
    let task = tokio::spawn(
        reflector(
            writer,
            watcher(pods, watcher::Config::default()).default_backoff(),
        )
        .applied_objects()
        .for_each(|_| async {}),
    );
    reader.wait_until_ready().await.unwrap();
    let took = start.elapsed();
    assert_eq!(reader.state().len(), expected);
    task.abort();
    took
}

async fn run(nodes: usize, pods: usize) {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let loaded = load(&cluster, nodes, pods).await;
    let synced = reflector_sync(&cluster, pods).await;
    println!(
        "scale: {nodes} nodes + {pods} pods loaded in {:.2}s; reflector over all pods in sync in {:.3}s",
        loaded.as_secs_f64(),
        synced.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_syncs_a_loaded_cluster() {
    run(50, 1_500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale figure: 1,000 nodes and 30,000 pods; run with --release --ignored --nocapture"]
async fn reflector_syncs_1000_nodes_30000_pods() {
    run(1_000, 30_000).await;
}
