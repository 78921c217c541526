//! Faults of the real cluster's own processes while koordlet protects a node: the API server
//! down for longer than a round and a cache refresh, etcd down, the kubelet restarted. koordlet
//! keeps enforcing from what it last knew, does not restart, and reports again afterwards.
//!
//! Real cluster only: it stops and starts the cluster's processes through `KOORD_E2E_RESTART`
//! (`scripts/real-cluster.sh restart`). The embedded cluster's faults (API server cut off,
//! watch 410s, restarts) are koordlet's `faults_cluster` tests.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use koord_api::NodeMetric;
use koord_api::names::DEFAULT_CONFIG_NAMESPACE;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::colocation::{colocation, container_hash, pod_cgroup, read};
use crate::common;
use crate::env::{Env, Load, POD_START, Wanted, restart_command, restart_component};

/// The API server outage: longer than koordlet's 60 s cache refresh plus a round, so koordlet
/// must find and repair a changed file with no API server at all.
const API_SERVER_DOWN: Duration = Duration::from_secs(100);

/// koordlet's pod on `node`: (UID, restart count).
async fn koordlet_pod(env: &Env, node: &str) -> (String, i32) {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), DEFAULT_CONFIG_NAMESPACE);
    let params = ListParams::default()
        .labels("koord-app=koordlet")
        .fields(&format!("spec.nodeName={node}"));
    let list = pods.list(&params).await.unwrap().items;
    assert_eq!(list.len(), 1, "one koordlet pod on {node}");
    let restarts = list[0]
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |c| c.iter().map(|c| c.restart_count).sum());
    (list[0].metadata.uid.clone().unwrap(), restarts)
}

/// Waits until the node's NodeMetric reports a status newer than `after`.
async fn reported_after(env: &Env, node: &str, after: jiff::Timestamp, what: &str) -> Duration {
    let metrics: Api<NodeMetric> = Api::all(env.client.clone());
    let started = Instant::now();
    // One report interval (60 s by default) plus the reconnect on a loaded machine.
    common::wait_for(what, Duration::from_secs(240), async || {
        let m = serde_json::to_value(metrics.get_opt(node).await.ok()??).ok()?;
        let t: jiff::Timestamp = m.pointer("/status/updateTime")?.as_str()?.parse().ok()?;
        (t > after).then_some(())
    })
    .await;
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordlet_enforces_through_control_plane_outages_and_reports_after() {
    let env = Env::start(Wanted::default()).await;
    if !env.is_real() {
        println!("skipped: the embedded cluster has no etcd, kube-apiserver or kubelet process to stop");
        return;
    }
    if let Err(reason) = restart_command() {
        println!("skipped: {reason}");
        return;
    }
    let (node, root) = match env.first_node_cgroups().await {
        Ok(found) => found,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };

    // A BE pod with koordlet's limits in its container cgroup.
    let cleanup = colocation(&env).await;
    let ns = cleanup.ns().to_string();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let resources =
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}});
    let mut pod = env.pod(
        "be-faults",
        json!({"app": "be-faults"}),
        vec![env.container("main", Load::Idle, resources)],
    );
    pod.spec.as_mut().unwrap().node_selector =
        Some([("kubernetes.io/hostname".to_string(), node.clone())].into());
    common::wait_for_batch_cpu(&env.client, 100).await;
    common::create_until_mutated_to_be(&pods, &pod).await;
    let running = env.wait_running(&ns, "be-faults").await;
    let uid = running.metadata.uid.clone().unwrap();
    let hash = container_hash(&running);
    let quota_file = pod_cgroup(&root, "cpu", &uid)
        .expect("the BE pod's cpu cgroup")
        .join(&hash)
        .join("cpu.cfs_quota_us");
    let limited = || read(&quota_file).as_deref() == Some("100000");
    common::wait_for(
        "koordlet's BE quota in the container cgroup",
        POD_START,
        async || limited().then_some(()),
    )
    .await;
    let (koordlet_uid, koordlet_restarts) = koordlet_pod(&env, &node).await;

    // 1. The API server goes away; meanwhile something resets the container's quota.
    let outage = tokio::task::spawn_blocking(|| restart_component("kube-apiserver", API_SERVER_DOWN));
    let cut = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    std::fs::write(&quota_file, "-1").expect("reset the container's quota");
    let repaired = common::wait_for(
        "koordlet repairing the BE quota while the API server is down",
        API_SERVER_DOWN,
        async || limited().then(|| cut.elapsed()),
    )
    .await;
    assert!(
        !outage.is_finished(),
        "the quota was repaired only after the API server came back ({repaired:?} after the cut)"
    );
    println!("API server down: koordlet repaired the BE quota {repaired:?} after the cut");
    let took = outage.await.unwrap().unwrap();
    let back = jiff::Timestamp::now();
    let report = reported_after(
        &env,
        &node,
        back,
        "a NodeMetric report after the API server's return",
    )
    .await;
    println!("API server back after {took:?}; koordlet reported again {report:?} later");

    // 2. etcd goes away for a while (the API server stays, failing).
    let took = tokio::task::spawn_blocking(|| restart_component("etcd", Duration::from_secs(20)))
        .await
        .unwrap()
        .unwrap();
    let back = jiff::Timestamp::now();
    let report = reported_after(&env, &node, back, "a NodeMetric report after etcd's return").await;
    println!("etcd back after {took:?}; koordlet reported again {report:?} later");

    // 3. The kubelet restarts (pods keep running).
    let took = tokio::task::spawn_blocking(|| restart_component("kubelet", Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    println!("kubelet restarted in {took:?}");

    // The pod kept its container and limits; koordlet never restarted; it still reports.
    let now = pods.get("be-faults").await.unwrap();
    assert_eq!(container_hash(&now), hash, "the BE container was replaced");
    assert!(
        limited(),
        "the BE container lost its quota: {:?}",
        read(&quota_file)
    );
    assert_eq!(
        koordlet_pod(&env, &node).await,
        (koordlet_uid, koordlet_restarts),
        "koordlet restarted (or was replaced) during the outages"
    );
    let back = jiff::Timestamp::now();
    reported_after(
        &env,
        &node,
        back,
        "a NodeMetric report after the kubelet's restart",
    )
    .await;
}
