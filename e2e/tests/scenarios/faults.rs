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

/// The webhook's certificate Secret deleted while the webhook serves (the chart's `secret`
/// mode): the webhook restores it from the certificates it serves, so the CA the API server
/// trusts never changes and every pod created meanwhile is mutated (the pod webhooks'
/// `failurePolicy: Ignore` would let a pod through unmutated on a TLS failure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_certificate_secret_deleted_is_restored_and_admission_never_lapses() {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{DeleteParams, PostParams};

    const SECRET: &str = "koordinator-webhook-certs";
    let env = Env::start(Wanted::default()).await;
    if !env.is_real() {
        println!(
            "skipped: the embedded cluster runs its webhook without the chart's Secret (koord-webhook's own cluster test `certificate_secret_deleted_while_two_replicas_serve` covers it there)"
        );
        return;
    }
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), DEFAULT_CONFIG_NAMESPACE);
    let Some(secret) = secrets.get_opt(SECRET).await.unwrap() else {
        println!("skipped: no Secret {SECRET} (the release does not run the webhook in secret mode)");
        return;
    };
    let ca_of = |s: &Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get("ca-cert.pem"))
            .map(|b| b.0.clone())
    };
    let old_ca = ca_of(&secret).expect("the Secret holds ca-cert.pem");
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    let injected = async || {
        configurations
            .get("koordinator-mutating-webhook-configuration")
            .await
            .unwrap()
            .webhooks
            .unwrap_or_default()
            .first()
            .and_then(|w| w.client_config.ca_bundle.clone())
            .map(|b| b.0)
    };
    assert_eq!(injected().await.as_ref(), Some(&old_ca));

    let cleanup = colocation(&env).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), cleanup.ns());
    let resources =
        json!({"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}});
    let pod = |name: &str| {
        env.pod(
            name,
            json!({"app": "cert"}),
            vec![env.container("main", Load::Idle, resources.clone())],
        )
    };
    // The webhook has seen the profile.
    common::create_until_mutated_to_be(&pods, &pod("cert-0")).await;

    secrets.delete(SECRET, &DeleteParams::default()).await.unwrap();
    let deleted = Instant::now();
    // The chart syncs every 60 s: pods are created every 2 s until the Secret is back, and a
    // few after.
    let mut created = 0;
    let mut unmutated = Vec::new();
    let mut restored: Option<(Secret, Duration)> = None;
    let mut after = 0;
    while after < 5 {
        assert!(
            deleted.elapsed() < Duration::from_secs(180),
            "the Secret was not restored within 180 s"
        );
        created += 1;
        let name = format!("cert-{created}");
        match pods.create(&PostParams::default(), &pod(&name)).await {
            Ok(p) => {
                let labels = p.metadata.labels.unwrap_or_default();
                if labels.get("koordinator.sh/qosClass").map(String::as_str) != Some("BE") {
                    unmutated.push(name.clone());
                }
                let _ = pods.delete(&name, &DeleteParams::default().grace_period(0)).await;
            }
            Err(e) => panic!("creating {name} (webhook failurePolicy Ignore): {e}"),
        }
        if restored.is_none() {
            restored = secrets
                .get_opt(SECRET)
                .await
                .unwrap()
                .map(|s| (s, deleted.elapsed()));
        } else {
            after += 1;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let (secret, took) = restored.unwrap();
    println!("{SECRET} restored {took:?} after its deletion; {created} pods created meanwhile and after");
    assert!(
        unmutated.is_empty(),
        "pods admitted without mutation: {unmutated:?}"
    );
    assert_eq!(
        ca_of(&secret).as_ref(),
        Some(&old_ca),
        "the restored Secret has a new CA"
    );
    assert_eq!(injected().await.as_ref(), Some(&old_ca), "the caBundle changed");
    drop(cleanup);
}
