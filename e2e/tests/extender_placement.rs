//! koord-scheduler in the embedded cluster: the simulated nodes' scheduler consults the real
//! koord-scheduler-extender (in-process, over HTTPS) for pods of `schedulerName:
//! koord-scheduler`, as the chart's kube-scheduler does: filter, then prioritize. BE pods spread
//! by batch headroom over the fresh nodes, and the node whose NodeMetric is stale (batch
//! degraded) receives none, although it has the most batch capacity and sorts first.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use koord_api::nodemetric::NodeMetric;
use koord_test_support::wait_for;
use koord_testcluster::node::{FleetConfig, NodeSpec, SchedulerExtender, SimulatedNodes};
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus_client::registry::Registry;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::json;

const SERVER_NAME: &str = "koord-scheduler-extender.koordinator-system.svc";

/// A CA and a serving certificate for [`SERVER_NAME`] in `dir` (`tls.crt`, `tls.key`); the CA PEM.
fn write_certificate(dir: &std::path::Path) -> Vec<u8> {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![SERVER_NAME.to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    ca_cert.pem().into_bytes()
}

async fn report_usage(client: &kube::Client, node: &str, update_time: jiff::Timestamp) {
    let api: Api<NodeMetric> = Api::all(client.clone());
    api.create(&PostParams::default(), &NodeMetric::new(node, Default::default()))
        .await
        .unwrap();
    let status = json!({"status": {
        "updateTime": update_time.to_string(),
        "nodeMetric": {"nodeUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}}},
    }});
    api.patch_status(node, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

fn be_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"schedulerName": "koord-scheduler", "containers": [{
            "name": "main", "image": "busy",
            "resources": {
                "requests": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"},
                "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}}}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extender_spreads_be_pods_by_batch_headroom_and_skips_the_stale_node() {
    let cluster = common::cluster().await;
    let client = cluster.client().unwrap();
    let ns = common::unique("extender");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();

    // The extender, as the chart runs it, on loopback.
    let certs = tempfile::tempdir().unwrap();
    let ca_pem = write_certificate(certs.path());
    let cli = koord_scheduler_extender::cli::Cli::try_parse_from([
        "koord-scheduler-extender",
        "--port=0",
        "--bind-address=127.0.0.1",
        &format!("--cert-dir={}", certs.path().display()),
    ])
    .unwrap();
    let mut registry = Registry::default();
    let extender = koord_scheduler_extender::serve::start(&cli, client.clone(), &mut registry)
        .await
        .unwrap();
    extender.cache.wait_until_ready().await;

    // "a" sorts first and has the most batch capacity, but its NodeMetric is an hour old.
    let prefix = common::unique("sim");
    let stale = format!("{prefix}-a");
    let (big, small) = (format!("{prefix}-b"), format!("{prefix}-c"));
    let spec = |name: &str, batch_cpu: &str, batch_memory: &str| {
        NodeSpec::new(name)
            .with_resource("kubernetes.io/batch-cpu", batch_cpu)
            .with_resource("kubernetes.io/batch-memory", batch_memory)
    };
    let config = FleetConfig {
        extenders: vec![SchedulerExtender {
            scheduler_name: "koord-scheduler".into(),
            url_prefix: format!("https://{}", extender.addr),
            server_name: SERVER_NAME.into(),
            ca_pem,
            timeout: Duration::from_secs(5),
        }],
        ..FleetConfig::default()
    };
    let specs = vec![
        spec(&stale, "16000", "32Gi"),
        spec(&big, "6000", "12Gi"),
        spec(&small, "3000", "6Gi"),
    ];
    let _nodes = SimulatedNodes::start(client.clone(), specs, config)
        .await
        .unwrap();
    let now = jiff::Timestamp::now();
    report_usage(&client, &stale, now - jiff::SignedDuration::from_hours(1)).await;
    report_usage(&client, &big, now).await;
    report_usage(&client, &small, now).await;
    wait_for(
        "the extender sees the nodes and NodeMetrics",
        Duration::from_secs(20),
        async || {
            [&stale, &big, &small]
                .iter()
                .all(|n| extender.cache.has_node(n) && extender.cache.has_node_metric(n))
                .then_some(())
        },
    )
    .await;

    // One at a time, each after the extender has seen the previous binding (as kube-scheduler
    // assumes a pod on its node before the next cycle).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut placed: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..6 {
        let name = format!("be-{i}");
        pods.create(&PostParams::default(), &be_pod(&name)).await.unwrap();
        let node = wait_for(&format!("{name} bound"), Duration::from_secs(30), async || {
            pods.get(&name).await.ok()?.spec?.node_name
        })
        .await;
        let on_node = placed.values().sum::<usize>() + 1;
        wait_for(
            "the extender sees the binding",
            Duration::from_secs(20),
            async || {
                let seen: usize = [&stale, &big, &small]
                    .iter()
                    .map(|n| extender.cache.pods.read(|ledger| ledger.pods_on(n)))
                    .sum();
                (seen >= on_node).then_some(())
            },
        )
        .await;
        *placed.entry(node).or_default() += 1;
    }
    println!("BE pods per node: {placed:?}");
    assert_eq!(
        placed.get(&stale),
        None,
        "the node with a stale NodeMetric got BE pods"
    );
    // Both fresh nodes take BE pods, the one with more batch headroom (6 vs 3 cores) more: the
    // exact split also depends on the load the new pods are estimated to add.
    let (on_big, on_small) = (
        placed.get(&big).copied().unwrap_or(0),
        placed.get(&small).copied().unwrap_or(0),
    );
    assert!(on_small >= 1 && on_big > on_small, "{placed:?}");

    let mut metrics = String::new();
    prometheus_client::encoding::text::encode(&mut metrics, &registry).unwrap();
    let stale_filtered: u64 = metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix("koord_scheduler_extender_filtered_nodes_total{reason=\"nodemetric_stale\"} ")
        })
        .unwrap_or_else(|| panic!("no stale-filter count in {metrics}"))
        .trim()
        .parse()
        .unwrap();
    assert!(stale_filtered >= 6, "{metrics}");
    extender.handle.shutdown();
}
