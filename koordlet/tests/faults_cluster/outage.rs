//! The API server unreachable from koordlet (connection refused, open connections dropped;
//! the node's kubelet stays reachable, as on a real node whose control plane is gone): koordlet
//! keeps enforcing the last NodeSLO it saw and decides evictions locally; after recovery it
//! publishes the Events it kept (one per pod and reason), evicts once, and reports again.

use std::time::{Duration, Instant};

use koord_test_support::poll::wait_for;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::env::{FaultEnv, MI, be_pod, host_used_bytes};

const FAILED_EVICTIONS: &str = "koordlet_evictions_total{strategy=\"memory_evict\",result=\"failed\"";
const FAILED_REPORTS: &str = "koordlet_nodemetric_reports_total{result=\"error\"";

fn outage() -> Duration {
    let seconds = std::env::var("KOORD_OUTAGE_SECONDS")
        .ok()
        .map(|v| v.parse::<u64>().expect("KOORD_OUTAGE_SECONDS: whole seconds"))
        .unwrap_or(30);
    Duration::from_secs(seconds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outage_koordlet_enforces_the_last_nodeslo_and_catches_up_after_recovery() {
    let _serial = crate::SERIAL.lock().await;
    // Node memory: what the host uses now plus 1.5 GiB, so a 700 MiB BE pod moves node usage
    // by about a third of it.
    let capacity = host_used_bytes() + 1536 * MI;
    let Some(mut env) = FaultEnv::start("outage", capacity).await else {
        return;
    };
    let node_metrics: Api<koord_api::NodeMetric> = Api::all(env.client.clone());
    node_metrics
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                "metadata": {"name": env.node.name},
                "spec": {"metricCollectPolicy": {"aggregateDurationSeconds": 60, "reportIntervalSeconds": 30}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    env.create_running(be_pod("be-small", "20Mi")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Memory threshold halfway between usage now and usage with the hungry pod.
    let threshold = (host_used_bytes() + 350 * MI) * 100 / capacity;
    assert!(threshold < 95, "host memory moved too much to set a threshold");
    env.node_slo(
        json!({"resourceUsedThresholdWithBE": {"enable": true, "cpuSuppressPolicy": "cfsQuota",
        "cpuSuppressThresholdPercent": 65, "memoryEvictThresholdPercent": threshold}}),
    )
    .await;
    env.start_koordlet("BEMemoryEvict=true");
    wait_for("the BE quota suppressed", Duration::from_secs(30), async || {
        (env.be_quota() > 0).then_some(())
    })
    .await;

    println!("outage of {:?} starts", outage());
    env.proxy.cut();
    let started = Instant::now();
    // Suppress keeps enforcing the last NodeSLO: a quota reset by someone else is put back.
    std::fs::write(env.be_quota_file(), "-1").unwrap();
    wait_for(
        "the BE quota suppressed again",
        Duration::from_secs(10),
        async || (env.be_quota() > 0).then_some(()),
    )
    .await;
    // Pods still start (the kubelet is local); memory pressure is decided locally, the
    // eviction cannot be sent.
    env.create_running(be_pod("be-hungry", "700Mi")).await;
    wait_for(
        "an eviction decided and failed",
        outage() + Duration::from_secs(30),
        async || (env.metric(FAILED_EVICTIONS).await > 0.0).then_some(()),
    )
    .await;
    tokio::time::sleep(outage().saturating_sub(started.elapsed())).await;
    assert!(env.pods().get_opt("be-hungry").await.unwrap().is_some());
    println!(
        "outage over after {:?}: {} failed eviction attempts, {} failed reports",
        started.elapsed(),
        env.metric(FAILED_EVICTIONS).await,
        env.metric(FAILED_REPORTS).await
    );

    env.proxy.restore().await;
    let restored = k8s_openapi::jiff::Timestamp::now();
    wait_for(
        "be-hungry evicted after recovery",
        Duration::from_secs(60),
        async || {
            env.pods()
                .get_opt("be-hungry")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    let seen = wait_for(
        "the kept evictPodFail and the evictPodSuccess Events",
        Duration::from_secs(20),
        async || {
            let seen = env.events("be-hungry").await;
            (seen.iter().any(|(r, _)| r == "evictPodFail")
                && seen.iter().any(|(r, _)| r == "evictPodSuccess"))
            .then_some(seen)
        },
    )
    .await;
    let failed: Vec<_> = seen.iter().filter(|(r, _)| r == "evictPodFail").collect();
    assert_eq!(failed.len(), 1, "one Event for the whole outage: {seen:?}");
    assert!(
        failed[0].1.contains("published late") && failed[0].1.contains("EvictPodByNodeMemoryUsage"),
        "{seen:?}"
    );
    wait_for(
        "a NodeMetric report after recovery",
        Duration::from_secs(45),
        async || {
            let time = node_metrics
                .get(&env.node.name)
                .await
                .ok()?
                .status?
                .update_time?
                .0;
            (time > restored).then_some(())
        },
    )
    .await;
    // Nothing duplicated: one eviction, one success Event, one fail Event.
    let after = env.events("be-hungry").await;
    assert_eq!(
        after.iter().filter(|(r, _)| r == "evictPodSuccess").count(),
        1,
        "{after:?}"
    );
    assert_eq!(
        after.iter().filter(|(r, _)| r == "evictPodFail").count(),
        1,
        "{after:?}"
    );
    env.stop_koordlet().await;
}
