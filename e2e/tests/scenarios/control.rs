//! The control plane: NodeSLO and NodeMetric per node, batch resources on the Node, the
//! ConfigMap webhook, leader election.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_api::names::{DEFAULT_CONFIG_NAMESPACE, KEY_RESOURCE_THRESHOLD_CONFIG};
use koord_api::{NodeMetric, NodeSLO};
use koord_e2e::components::{Components, Selection};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::common::{self, wait_for};
use crate::env::{Cleanup, Env, Wanted};

/// How long the manager may take to create or update per-node objects after a change.
const CONTROL_LOOP: Duration = Duration::from_secs(60);
/// The first NodeMetric report: one default report interval (60 s) after koordlet's start, plus
/// the start itself on a busy machine.
const FIRST_REPORT: Duration = Duration::from_secs(180);
const LEASE: &str = "koordinator-manager";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_has_a_nodeslo_owned_by_the_node() {
    let env = Env::start(Wanted::default()).await;
    let nodes_api: Api<Node> = Api::all(env.client.clone());
    let slos: Api<NodeSLO> = Api::all(env.client.clone());
    let names = env.node_names().await;
    assert!(!names.is_empty(), "no Ready node");
    for name in names {
        let node = nodes_api.get(&name).await.unwrap();
        let slo = wait_for(&format!("NodeSLO {name}"), CONTROL_LOOP, async || {
            slos.get_opt(&name).await.ok().flatten()
        })
        .await;
        let owners = slo.metadata.owner_references.clone().unwrap_or_default();
        assert!(
            owners.iter().any(|o| o.kind == "Node"
                && o.api_version == "v1"
                && o.name == name
                && Some(&o.uid) == node.metadata.uid.as_ref()),
            "NodeSLO {name} owners: {owners:?}"
        );
    }
}

fn metric_json(m: &NodeMetric) -> Value {
    serde_json::to_value(m).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodemetric_status_is_refreshed_with_node_usage() {
    let env = Env::start(Wanted::default()).await;
    let metrics: Api<NodeMetric> = Api::all(env.client.clone());
    for name in env.node_names().await {
        // koordlet reports once per `reportIntervalSeconds` (60 s by default) after its first
        // collection: the first report can come a whole interval after start.
        let first = wait_for(&format!("NodeMetric {name} reported"), FIRST_REPORT, async || {
            let m = metric_json(&metrics.get_opt(&name).await.ok()??);
            m.pointer("/status/updateTime")?.as_str()?;
            Some(m)
        })
        .await;
        let interval = first
            .pointer("/spec/metricCollectPolicy/reportIntervalSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(60);
        let updated = first
            .pointer("/status/updateTime")
            .and_then(Value::as_str)
            .unwrap()
            .to_string();
        let usage = first.pointer("/status/nodeMetric/nodeUsage/resources").cloned();
        let usage = usage.unwrap_or(Value::Null);
        assert!(
            usage.get("cpu").is_some() && usage.get("memory").is_some(),
            "NodeMetric {name} node usage without cpu and memory: {usage}"
        );
        let next = wait_for(
            &format!("NodeMetric {name} updateTime after {updated}"),
            Duration::from_secs(interval * 3 + 30),
            async || {
                let m = metric_json(&metrics.get_opt(&name).await.ok()??);
                let t = m.pointer("/status/updateTime")?.as_str()?.to_string();
                (t.parse::<jiff::Timestamp>().ok()? > updated.parse::<jiff::Timestamp>().ok()?).then_some(m)
            },
        )
        .await;
        let memory = next
            .pointer("/status/nodeMetric/nodeUsage/resources/memory")
            .and_then(Value::as_str)
            .unwrap_or("0");
        assert!(memory != "0", "node memory usage reported as zero");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_get_batch_cpu_and_memory_allocatable() {
    let env = Env::start(Wanted::default()).await;
    let nodes: Api<Node> = Api::all(env.client.clone());
    for name in env.node_names().await {
        let allocatable = wait_for(
            &format!("batch resources on {name}"),
            CONTROL_LOOP * 2,
            async || {
                let node = nodes.get(&name).await.ok()?;
                let a = node.status?.allocatable?;
                (a.contains_key("kubernetes.io/batch-cpu") && a.contains_key("kubernetes.io/batch-memory"))
                    .then_some(a)
            },
        )
        .await;
        let cpu: i64 = allocatable["kubernetes.io/batch-cpu"].0.parse().unwrap_or(-1);
        assert!(cpu >= 0, "batch-cpu {:?}", allocatable["kubernetes.io/batch-cpu"]);
        println!(
            "{name}: batch-cpu {} batch-memory {}",
            allocatable["kubernetes.io/batch-cpu"].0, allocatable["kubernetes.io/batch-memory"].0
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_configmap_key_is_rejected_by_the_webhook() {
    let env = Env::start(Wanted::default()).await;
    let mut cleanup = Cleanup::new(env.client.clone());
    let broken = "{\"clusterStrategy\": {\"enable\": true, \"memoryEvictThresholdPercent\": 200}}";
    let error = cleanup
        .set_config(KEY_RESOURCE_THRESHOLD_CONFIG, broken)
        .await
        .expect_err("the webhook accepted a broken resource-threshold-config");
    let text = error.to_string();
    assert!(
        text.contains(KEY_RESOURCE_THRESHOLD_CONFIG) && text.contains("memoryEvictThresholdPercent"),
        "rejection does not name the key and field: {text}"
    );
    match &error {
        kube::Error::Api(s) => assert!((400..500).contains(&s.code), "{s:?}"),
        other => panic!("not an API rejection: {other:?}"),
    }
    let cm: k8s_openapi::api::core::v1::ConfigMap =
        Api::namespaced(env.client.clone(), DEFAULT_CONFIG_NAMESPACE)
            .get(koord_api::names::DEFAULT_SLO_CONFIG_NAME)
            .await
            .unwrap();
    let stored = cm.data.unwrap_or_default();
    assert_ne!(
        stored.get(KEY_RESOURCE_THRESHOLD_CONFIG).map(String::as_str),
        Some(broken)
    );
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases.get_opt(LEASE).await.ok()??.spec?.holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_manager_takes_over_when_the_leader_goes() {
    let env = Env::start(Wanted { manager: false }).await;
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), DEFAULT_CONFIG_NAMESPACE);
    match env.embedded_parts() {
        Some(parts) => {
            let start = |identity: &str| {
                Components::start(
                    &parts.cluster,
                    parts.nodes.nodes(),
                    Selection {
                        manager: true,
                        manager_args: vec![
                            format!("--identity={identity}"),
                            "--lease-duration-seconds=5".into(),
                        ],
                        ..Selection::none()
                    },
                )
            };
            let a = start("e2e-manager-a").await.unwrap();
            let b = start("e2e-manager-b").await.unwrap();
            let leader = wait_for("a Lease holder", CONTROL_LOOP, async || holder(&leases).await).await;
            let (gone, stays, other) = match leader.as_str() {
                "e2e-manager-a" => (a, b, "e2e-manager-b"),
                "e2e-manager-b" => (b, a, "e2e-manager-a"),
                x => panic!("unexpected holder {x}"),
            };
            let started = Instant::now();
            gone.shutdown(&parts.cluster).await;
            wait_for(
                "the other manager to lead",
                Duration::from_secs(5 + 15),
                async || (holder(&leases).await.as_deref() == Some(other)).then_some(()),
            )
            .await;
            println!("takeover after {:?}", started.elapsed());
            stays.shutdown(&parts.cluster).await;
        }
        None => real_takeover(&env, &leases).await,
    }
}

async fn real_takeover(env: &Env, leases: &Api<Lease>) {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client.clone(), DEFAULT_CONFIG_NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), DEFAULT_CONFIG_NAMESPACE);
    let mut cleanup = Cleanup::new(env.client.clone());
    let deployment = deployments.get("koord-manager").await.unwrap();
    let replicas = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    if replicas < 2 {
        deployments
            .patch(
                "koord-manager",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"replicas": 2}})),
            )
            .await
            .unwrap();
        cleanup.scaled = Some(("koord-manager".into(), replicas));
    }
    let selector = deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    wait_for("two Ready manager pods", Duration::from_secs(180), async || {
        ready_pods(&pods, &selector).await
    })
    .await;
    let leader = wait_for("a Lease holder among the pods", CONTROL_LOOP, async || {
        let h = holder(leases).await?;
        let names = ready_pods(&pods, &selector).await?;
        names.contains(&h).then_some(h)
    })
    .await;
    let lease_seconds = leases
        .get(LEASE)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.lease_duration_seconds)
        .unwrap_or(30) as u64;
    let started = Instant::now();
    pods.delete(&leader, &DeleteParams::default()).await.unwrap();
    let next = wait_for(
        "another manager pod to hold the Lease",
        Duration::from_secs(lease_seconds + 30),
        async || holder(leases).await.filter(|h| *h != leader),
    )
    .await;
    let took = started.elapsed();
    println!("leader {leader} deleted; {next} took over after {took:?} (lease {lease_seconds} s)");
    assert!(
        took <= Duration::from_secs(lease_seconds + 10),
        "takeover took {took:?}, lease {lease_seconds} s"
    );
    common::wait_for(
        "two Ready manager pods again",
        Duration::from_secs(180),
        async || ready_pods(&pods, &selector).await,
    )
    .await;
}

/// Names of the Ready, not terminating pods of `selector`, when there are at least two.
async fn ready_pods(pods: &Api<Pod>, selector: &str) -> Option<Vec<String>> {
    let list = pods.list(&ListParams::default().labels(selector)).await.ok()?;
    let names: Vec<String> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.metadata.name)
        .collect();
    (names.len() >= 2).then_some(names)
}
