//! The manager against the embedded API server: seed 001's ConfigMap → NodeSLO/NodeMetric for
//! every node; nodes added and removed; NodeMetric reports → batch resources, stale → removed;
//! a broken key → Warning Event, other keys applied, nothing reset; leader election hand-over.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::{
    collections::BTreeMap,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use common::*;
use k8s_openapi::api::core::v1::Node;
use koord_api::NodeMetric;
use koord_test_support::eventually;
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const SEED_001: [(&str, &str); 2] = [
    ("colocation-config", "{\n\"enable\": true\n}"),
    (
        "resource-threshold-config",
        "{\n\"clusterStrategy\": {\n\"enable\": true,\n\"memoryEvictThresholdPercent\": 70\n}\n}",
    ),
];

#[tokio::test]
async fn manager_follows_config_nodes_and_node_metrics() {
    let (_cluster, client) = cluster().await;
    config_map(&client, &SEED_001).await;
    for name in ["n1", "n2"] {
        add_node(&client, name).await;
    }
    let (_stop, _task) = start(&client, args(false, 30, "m1"));

    // Seed 001 → NodeSLO and NodeMetric for every node.
    for name in ["n1", "n2"] {
        eventually("NodeSLO from seed 001", PATIENCE, || async {
            node_slo(&client, name).await.is_some_and(|slo| {
                let threshold = slo.spec.resource_used_threshold_with_be.unwrap_or_default();
                threshold.enable == Some(true) && threshold.memory_evict_threshold_percent == Some(70)
            })
        })
        .await;
        wait_node_metric(&client, name).await;
    }

    // Node added and removed.
    add_node(&client, "n3").await;
    eventually("NodeSLO of the new node", PATIENCE, || async {
        node_slo(&client, "n3").await.is_some()
    })
    .await;
    Api::<Node>::all(client.clone())
        .delete("n3", &Default::default())
        .await
        .unwrap();
    eventually("NodeSLO deleted with its node", PATIENCE, || async {
        node_slo(&client, "n3").await.is_none()
    })
    .await;

    // A fresh report → batch resources; a stale one → removed.
    let metrics: Api<NodeMetric> = Api::all(client.clone());
    let report = |time: String| {
        json!({"status": {"updateTime": time,
            "nodeMetric": {"systemUsage": {"resources": {"cpu": "7", "memory": "12G"}}}}})
    };
    let fresh = jiff::Timestamp::now().to_string();
    metrics
        .patch_status("n1", &PatchParams::default(), &Patch::Merge(report(fresh)))
        .await
        .unwrap();
    // Defaults: reclaim 60 % CPU → 100 − 40 − 7 = 53 cores.
    wait_batch_cpu(&client, "n1", "53000", "batch-cpu on n1").await;
    let stale = (jiff::Timestamp::now() - jiff::SignedDuration::from_mins(16)).to_string();
    metrics
        .patch_status("n1", &PatchParams::default(), &Patch::Merge(report(stale)))
        .await
        .unwrap();
    eventually("batch-cpu removed from n1", PATIENCE, || async {
        batch_cpu(&client, "n1").await.is_none()
    })
    .await;

    // A broken key: Warning Event on the ConfigMap, other keys applied, nothing reset.
    config_map(
        &client,
        &[
            ("colocation-config", r#"{"enable": true}"#),
            ("resource-threshold-config", r#"{"clusterStrategy": {"enable": "#),
            ("cpu-burst-config", r#"{"clusterStrategy": {"policy": "auto"}}"#),
        ],
    )
    .await;
    eventually("burst applied despite the broken key", PATIENCE, || async {
        node_slo(&client, "n1").await.is_some_and(|slo| {
            slo.spec.cpu_burst_strategy.and_then(|b| b.policy)
                == Some(koord_api::nodeslo::CpuBurstPolicy::Auto)
        })
    })
    .await;
    let threshold = node_slo(&client, "n1")
        .await
        .unwrap()
        .spec
        .resource_used_threshold_with_be
        .unwrap();
    assert_eq!(
        threshold.memory_evict_threshold_percent,
        Some(70),
        "the broken key keeps its last good value"
    );
    eventually("Warning Event on the ConfigMap", PATIENCE, || async {
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), NS);
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("SLOCfgUnmarshalFailed")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("resource-threshold-config"))
            })
    })
    .await;
}

#[tokio::test]
async fn broken_key_after_restart_resets_nothing() {
    let (_cluster, client) = cluster().await;
    config_map(&client, &SEED_001).await;
    add_node(&client, "n1").await;
    let (stop, task) = start(&client, args(false, 30, "m1"));
    eventually("NodeSLO", PATIENCE, || async {
        node_slo(&client, "n1").await.is_some()
    })
    .await;
    drop(stop);
    task.await.unwrap();

    config_map(
        &client,
        &[
            ("colocation-config", r#"{"enable": true}"#),
            ("resource-threshold-config", "{broken"),
        ],
    )
    .await;
    let (_stop, _task) = start(&client, args(false, 30, "m2"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let threshold = node_slo(&client, "n1")
        .await
        .unwrap()
        .spec
        .resource_used_threshold_with_be
        .unwrap();
    assert_eq!(
        threshold.enable,
        Some(true),
        "defaults (enable: false) must not be applied over it"
    );
    assert_eq!(threshold.memory_evict_threshold_percent, Some(70));
}

async fn lease_holder(client: &Client) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), NS);
    leases
        .get_opt("koordinator-manager")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
}

async fn suppress_percent(client: &Client, node: &str) -> Option<i64> {
    node_slo(client, node)
        .await?
        .spec
        .resource_used_threshold_with_be?
        .cpu_suppress_threshold_percent
}

/// Drives every controller of the leader: a new node (nodeslo, nodemetric), a config change
/// (nodeslo update) and a NodeMetric report (noderesource). Returns once the leader did all.
/// `batch` must differ from the last value by more than `resourceDiffThreshold` (10 %).
async fn drive_every_controller(client: &Client, node: &str, suppress: i64, system_cpu: &str, batch: &str) {
    add_node(client, node).await;
    let threshold =
        format!(r#"{{"clusterStrategy": {{"enable": true, "cpuSuppressThresholdPercent": {suppress}}}}}"#);
    config_map(
        client,
        &[
            ("colocation-config", r#"{"enable": true}"#),
            ("resource-threshold-config", &threshold),
        ],
    )
    .await;
    wait_node_metric(client, node).await;
    for name in ["n1", node] {
        eventually("NodeSLO follows the config", PATIENCE, || async {
            suppress_percent(client, name).await == Some(suppress)
        })
        .await;
    }
    report_usage(client, "n1", system_cpu).await;
    wait_batch_cpu(client, "n1", batch, "batch-cpu on n1").await;
}

#[tokio::test]
async fn only_the_leader_writes_and_the_other_takes_over() {
    const LEASE_SECONDS: u64 = 3;
    let (_cluster, client) = cluster().await;
    config_map(&client, &SEED_001).await;
    add_node(&client, "n1").await;
    let (first_client, first) = recording_client(&client);
    let (second_client, second) = recording_client(&client);
    let (stop_first, first_task) = start(&first_client, args(true, LEASE_SECONDS, "first"));
    eventually("NodeSLO written by the first leader", PATIENCE, || async {
        node_slo(&client, "n1").await.is_some()
    })
    .await;
    assert_eq!(lease_holder(&client).await.as_deref(), Some("first"));
    let (_stop_second, _second_task) = start(&second_client, args(true, LEASE_SECONDS, "second"));

    // While the first leads, the second watches everything and writes nothing.
    let first_writes = first.writes().len();
    // Defaults: reclaim 60 % → 100 − 40 − 7 = 53 cores.
    drive_every_controller(&client, "n2", 55, "7", "53000").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        second.requests.load(Ordering::SeqCst) > 0,
        "the second replica runs and watches"
    );
    assert_eq!(second.writes(), Vec::<String>::new(), "the non-leader wrote");
    let led = first.writes();
    assert!(led.len() > first_writes, "the leader wrote the changes");
    for kind in ["/nodeslos", "/nodemetrics", "/nodes/n1/status", "/events"] {
        assert!(
            led.iter().any(|w| w.contains(kind)),
            "the leader wrote no {kind}: {led:?}"
        );
    }
    assert_eq!(lease_holder(&client).await.as_deref(), Some("first"));

    // The first stops (and hands the Lease over): the second takes over within the lease time.
    let stopped = Instant::now();
    drop(stop_first);
    first_task.await.unwrap();
    eventually("the second replica holds the Lease", PATIENCE, || async {
        lease_holder(&client).await.as_deref() == Some("second")
    })
    .await;
    let took = stopped.elapsed();
    assert!(
        took <= Duration::from_secs(LEASE_SECONDS + 2),
        "hand-over took {took:?}"
    );
    let first_final = first.writes().len();
    drive_every_controller(&client, "n3", 60, "20", "40000").await;
    assert!(!second.writes().is_empty(), "the new leader writes");
    assert_eq!(
        first.writes().len(),
        first_final,
        "a stopped replica writes nothing"
    );
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_is_replaced_within_the_lease_time() {
    const LEASE_SECONDS: u64 = 3;
    let (_cluster, client) = cluster().await;
    config_map(&client, &SEED_001).await;
    add_node(&client, "n1").await;
    let (first_client, first) = recording_client(&client);
    let (second_client, second) = recording_client(&client);
    let (_stop_first, _first_task) = start(&first_client, args(true, LEASE_SECONDS, "first"));
    eventually("the first replica leads", PATIENCE, || async {
        lease_holder(&client).await.as_deref() == Some("first")
    })
    .await;
    let (_stop_second, _second_task) = start(&second_client, args(true, LEASE_SECONDS, "second"));
    tokio::time::sleep(Duration::from_secs(1)).await;

    // No release, no renewal: the second waits out the lease, then takes over.
    let cut = Instant::now();
    first.cut.store(true, Ordering::SeqCst);
    eventually("the second replica holds the Lease", PATIENCE, || async {
        lease_holder(&client).await.as_deref() == Some("second")
    })
    .await;
    let took = cut.elapsed();
    // Up to one lease duration since the last renewal, plus the release back-off (≤ 1 s).
    assert!(
        took <= Duration::from_secs(2 * LEASE_SECONDS + 1),
        "take-over took {took:?}"
    );
    drive_every_controller(&client, "n2", 55, "7", "53000").await;
    assert!(!second.writes().is_empty(), "the new leader writes");

    // The old leader, reconnected, has stepped down: it writes nothing more.
    let before = first.writes().len();
    first.cut.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    drive_every_controller(&client, "n3", 60, "20", "40000").await;
    assert_eq!(
        first.writes().len(),
        before,
        "the old leader wrote after reconnecting"
    );
}

#[tokio::test]
async fn metrics_serve_build_process_leader_and_upstream_series() {
    const LEASE_SECONDS: u64 = 3;
    let (_cluster, client) = cluster().await;
    config_map(&client, &SEED_001).await;
    add_node(&client, "n1").await;
    let first_addr = koord_test_support::free_loopback_addr().unwrap();
    let mut first_args = args(true, LEASE_SECONDS, "first");
    first_args.metrics_addr = first_addr;
    let (_stop_first, _first) = start(&client, first_args);
    eventually("NodeSLO written by the leader", PATIENCE, || async {
        node_slo(&client, "n1").await.is_some()
    })
    .await;
    let second_addr = koord_test_support::free_loopback_addr().unwrap();
    let mut second_args = args(true, LEASE_SECONDS, "second");
    second_args.metrics_addr = second_addr;
    let (_stop_second, _second) = start(&client, second_args);

    let leader = r#"leader_election_master_status{name="koordinator-manager"}"#;
    let reconciled = r#"slo_controller_nodeslo_reconcile_count{status="succeeded",reason="reconciled"}"#;
    let body = koord_test_support::wait_for("the leader's metrics", PATIENCE, async || {
        koord_test_support::scrape(first_addr)
            .await
            .filter(|b| koord_test_support::sample(b, leader) == Some(1.0))
            .filter(|b| koord_test_support::sample(b, reconciled).is_some_and(|n| n >= 1.0))
    })
    .await;
    let build = format!(
        "koord_manager_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(koord_test_support::sample(&body, &build), Some(1.0), "{body}");
    let rss = koord_test_support::sample(&body, "process_resident_memory_bytes").unwrap();
    assert!(rss > 1e6, "{rss}");
    assert!(koord_test_support::sample(&body, "process_open_fds").unwrap() > 0.0);
    assert!(koord_test_support::sample(&body, "process_cpu_seconds_total").unwrap() > 0.0);
    assert!(
        body.contains("# TYPE slo_controller_nodeslo_reconcile_count unknown"),
        "{body}"
    );

    let body = koord_test_support::wait_for("the follower's metrics", PATIENCE, async || {
        koord_test_support::scrape(second_addr)
            .await
            .filter(|b| koord_test_support::sample(b, leader) == Some(0.0))
    })
    .await;
    assert_eq!(koord_test_support::sample(&body, &build), Some(1.0), "{body}");
    // As upstream, whose controllers run on the leader only: a follower counts no reconcile.
    assert_eq!(koord_test_support::sample(&body, reconciled), None, "{body}");
}

async fn node_annotation(client: &Client, name: &str, key: &str) -> Option<String> {
    let node = Api::<Node>::all(client.clone()).get(name).await.unwrap();
    node.metadata.annotations?.get(key).cloned()
}

/// koordlet's report of the node's CPU facts, as upstream koordlet writes it.
async fn report_cpu(client: &Client, node: &str, model: &str, hyper_thread: bool, turbo: bool) {
    use koord_api::topology::NodeResourceTopology;
    let info = koord_api::cpu_normalization::CpuBasicInfo {
        cpu_model: model.into(),
        hyper_thread_enabled: hyper_thread,
        turbo_enabled: turbo,
        cat_l3_cbm_mask: None,
        vendor_id: "GenuineIntel".into(),
    };
    let api: Api<NodeResourceTopology> = Api::all(client.clone());
    let annotations: BTreeMap<String, String> = [(
        koord_api::names::ANNOTATION_CPU_BASIC_INFO.to_owned(),
        info.to_annotation(),
    )]
    .into();
    if api.get_opt(node).await.unwrap().is_none() {
        api.create(
            &PostParams::default(),
            &NodeResourceTopology::for_node(node, annotations),
        )
        .await
        .unwrap();
    } else {
        let patch = json!({"metadata": {"annotations": annotations}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn cpu_normalization_ratio_from_the_reported_cpu_scales_batch_cpu() {
    const RATIO: &str = "node.koordinator.sh/cpu-normalization-ratio";
    let (_cluster, client) = cluster().await;
    let normalization =
        r#"{"enable": true, "ratioModel": {"Fast CPU": {"baseRatio": 1.25, "turboEnabledRatio": 1.5}}}"#;
    config_map(
        &client,
        &[
            ("colocation-config", r#"{"enable": true}"#),
            ("cpu-normalization-config", normalization),
        ],
    )
    .await;
    add_node(&client, "n1").await;
    let (_stop, _task) = start(&client, args(false, 30, "m1"));
    wait_node_metric(&client, "n1").await;
    report_usage(&client, "n1", "7").await;

    // No CPU facts yet: on, but undecided; no annotation, batch-cpu unscaled (100 − 40 − 7).
    wait_batch_cpu(&client, "n1", "53000", "unscaled batch-cpu").await;
    assert_eq!(node_annotation(&client, "n1", RATIO).await, None);

    // koordlet reports the model without turbo: 1.25, batch-cpu 53000 × 1.25.
    report_cpu(&client, "n1", "Fast CPU", false, false).await;
    eventually("ratio 1.25 and scaled batch-cpu", PATIENCE, || async {
        node_annotation(&client, "n1", RATIO).await.as_deref() == Some("1.25")
            && batch_cpu(&client, "n1").await == Some(canonical("66250"))
    })
    .await;

    // Turbo turned on: 1.50 at once (a 20 % move of batch-cpu is above the diff threshold anyway).
    report_cpu(&client, "n1", "Fast CPU", false, true).await;
    eventually("ratio 1.50", PATIENCE, || async {
        node_annotation(&client, "n1", RATIO).await.as_deref() == Some("1.50")
            && batch_cpu(&client, "n1").await == Some(canonical("79500"))
    })
    .await;

    // Hyper-threading has no ratio for this model: undecided, the node keeps 1.50.
    report_cpu(&client, "n1", "Fast CPU", true, true).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        node_annotation(&client, "n1", RATIO).await.as_deref(),
        Some("1.50")
    );
    assert_eq!(batch_cpu(&client, "n1").await, Some(canonical("79500")));

    // The node label switches it off: 1.00, batch-cpu back to 53000.
    let label = json!({"metadata": {"labels": {"node.koordinator.sh/cpu-normalization-enabled": "false"}}});
    Api::<Node>::all(client.clone())
        .patch("n1", &PatchParams::default(), &Patch::Merge(label))
        .await
        .unwrap();
    eventually("ratio 1.00 from the label", PATIENCE, || async {
        node_annotation(&client, "n1", RATIO).await.as_deref() == Some("1.00")
            && batch_cpu(&client, "n1").await == Some(canonical("53000"))
    })
    .await;
}

/// With a resync of an hour and no new report, a pod bound to the node and then deleted moves
/// batch-cpu at once: the pod watch reconciles its node.
#[tokio::test]
async fn a_pod_bound_or_deleted_moves_batch_cpu_without_a_report_or_resync() {
    let (_cluster, client) = cluster().await;
    config_map(&client, &SEED_001).await;
    add_node(&client, "n1").await;
    let mut run_args = args(false, 30, "m1");
    run_args.resync = Duration::from_secs(3600);
    let (_stop, _task) = start(&client, run_args);
    wait_node_metric(&client, "n1").await;
    report_usage(&client, "n1", "7").await;
    // 100 − 40 (reclaim 60 %) − 7 = 53 cores.
    wait_batch_cpu(&client, "n1", "53000", "batch-cpu on n1").await;

    // An LS pod the report has not measured counts by its request: 53 − 20 = 33 cores.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    let pod = serde_json::from_value(json!({
        "metadata": {"name": "payment"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "app",
            "resources": {"requests": {"cpu": "20"}}}]}
    }))
    .unwrap();
    let started = Instant::now();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_batch_cpu(&client, "n1", "33000", "batch-cpu falls with the pod bound").await;
    println!("batch-cpu followed the bound pod in {:?}", started.elapsed());
    let started = Instant::now();
    pods.delete("payment", &Default::default()).await.unwrap();
    wait_batch_cpu(&client, "n1", "53000", "batch-cpu rises with the pod gone").await;
    println!("batch-cpu followed the deleted pod in {:?}", started.elapsed());
}
