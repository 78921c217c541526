//! Switching from upstream Koordinator (docs/migration.md), on the real cluster only: a release
//! laid out as upstream's chart lays out its own (e2e/fixtures/upstream-release, running our
//! images with upstream's command lines) is taken over by `scripts/migrate-from-upstream.sh`.
//! Every custom resource, the CRDs, the namespace, the ConfigMap and the PriorityClasses
//! survive with their UIDs; the new release's components take over; fields that upstream's CRDs
//! pruned (seed 000's `podStrategies`) reach the NodeSLO once our CRDs are in place.
//!
//! `KOORD_E2E_MIGRATION` names `scripts/real-cluster.sh` (its `migration-test` command sets it);
//! the scenario calls its `upstream-release` and `take-over` commands, so it replaces the
//! installed release: it runs last.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret, Service};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use koord_api::{ClusterColocationProfile, NodeMetric, NodeSLO};
use kube::api::{ListParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::common::{self, wait_for};
use crate::env::{Env, Load, Wanted};

const NAMESPACE: &str = "koordinator-system";
const CRDS: [&str; 4] = [
    "nodeslos.slo.koordinator.sh",
    "nodemetrics.slo.koordinator.sh",
    "clustercolocationprofiles.config.koordinator.sh",
    "noderesourcetopologies.topology.node.k8s.io",
];
const PRIORITY_CLASSES: [&str; 4] = ["koord-prod", "koord-mid", "koord-batch", "koord-free"];

/// Runs `<script> <command>` (blocking, on a blocking thread); panics when it fails.
async fn run(script: &str, command: &str) {
    let (script, arg) = (script.to_string(), command.to_string());
    let status = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&script)
            .arg(&arg)
            .status()
            .map_err(|e| format!("{script} {arg}: {e}"))
    })
    .await
    .unwrap()
    .unwrap();
    assert!(status.success(), "{command}: {status}");
}

fn uid<K: Resource>(object: &K) -> String {
    object.meta().uid.clone().expect("a stored object has a uid")
}

/// The UIDs of everything that has to survive, by a readable key.
async fn surviving_uids(client: &kube::Client, node: &str, profile: &str) -> BTreeMap<String, String> {
    let mut uids = BTreeMap::new();
    let ns = Api::<Namespace>::all(client.clone())
        .get(NAMESPACE)
        .await
        .unwrap();
    uids.insert(format!("namespace/{NAMESPACE}"), uid(&ns));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in CRDS {
        uids.insert(format!("crd/{name}"), uid(&crds.get(name).await.unwrap()));
    }
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for name in PRIORITY_CLASSES {
        uids.insert(
            format!("priorityclass/{name}"),
            uid(&classes.get(name).await.unwrap()),
        );
    }
    let cm = Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .get("slo-controller-config")
        .await
        .unwrap();
    uids.insert("configmap/slo-controller-config".into(), uid(&cm));
    let slo = Api::<NodeSLO>::all(client.clone()).get(node).await.unwrap();
    uids.insert(format!("nodeslo/{node}"), uid(&slo));
    let metric = Api::<NodeMetric>::all(client.clone()).get(node).await.unwrap();
    uids.insert(format!("nodemetric/{node}"), uid(&metric));
    let p = Api::<ClusterColocationProfile>::all(client.clone())
        .get(profile)
        .await
        .unwrap();
    uids.insert(format!("clustercolocationprofile/{profile}"), uid(&p));
    uids
}

/// The NodeSLO's pod-level burst strategies (none when the CRD pruned them).
async fn pod_strategies(client: &kube::Client, node: &str) -> Option<Vec<Value>> {
    let slo = Api::<NodeSLO>::all(client.clone()).get_opt(node).await.ok()??;
    let spec = serde_json::to_value(&slo).ok()?;
    spec.pointer("/spec/cpuBurstStrategy/podStrategies")?
        .as_array()
        .cloned()
}

/// When koordlet last reported `node`'s NodeMetric.
async fn reported_at(client: &kube::Client, node: &str) -> Option<String> {
    let metric = Api::<NodeMetric>::all(client.clone())
        .get_opt(node)
        .await
        .ok()??;
    let value = serde_json::to_value(&metric).ok()?;
    value.pointer("/status/updateTime")?.as_str().map(str::to_string)
}

/// Helm's records of `release` in `namespace` (one Secret per revision).
async fn helm_records(client: &kube::Client, namespace: &str, release: &str) -> usize {
    Api::<Secret>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("owner=helm,name={release}")))
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_from_an_upstream_release_keeps_every_object_and_hands_over() {
    let script = match std::env::var("KOORD_E2E_MIGRATION") {
        Ok(s) if !s.trim().is_empty() => s,
        _ => {
            println!(
                "skipped: KOORD_E2E_MIGRATION names no real-cluster script (scripts/real-cluster.sh migration-test sets it)"
            );
            return;
        }
    };
    let env = Env::start(Wanted::default()).await;
    if !env.is_real() {
        println!("skipped: the migration scenario installs Helm releases: real cluster only");
        return;
    }
    let client = env.client.clone();
    let node = env.node_names().await.into_iter().next().expect("a Ready node");

    // 1. The upstream-shaped release: our binaries under upstream's command lines.
    run(&script, "upstream-release").await;
    let slos: Api<NodeSLO> = Api::all(client.clone());
    wait_for(
        "the NodeSLO written under upstream's manager args",
        Duration::from_secs(120),
        async || slos.get_opt(&node).await.ok()?,
    )
    .await;
    let first_report = wait_for(
        "a NodeMetric report from koordlet under upstream's DaemonSet args",
        Duration::from_secs(180),
        async || reported_at(&client, &node).await,
    )
    .await;
    println!("upstream-shaped release: NodeSLO written, koordlet reported at {first_report}");
    // Upstream's NodeSLO CRD has no podStrategies: the API server prunes what the manager sends.
    assert_eq!(
        pod_strategies(&client, &node).await,
        None,
        "the upstream-shaped CRD must prune podStrategies"
    );
    let mut cleanup = env
        .namespace("migrate", json!({"koord-e2e.koordinator.sh/migration": "true"}))
        .await;
    let profile = common::unique("e2e-migration");
    let p: ClusterColocationProfile = serde_json::from_value(json!({
        "metadata": {"name": profile},
        "spec": {
            "namespaceSelector": {"matchLabels": {"koord-e2e.koordinator.sh/migration": "true"}},
            "qosClass": "BE", "priorityClassName": "koord-batch", "koordinatorPriority": 1000,
        }
    }))
    .unwrap();
    Api::<ClusterColocationProfile>::all(client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
    cleanup.profiles.push(profile.clone());
    let before = surviving_uids(&client, &node, &profile).await;
    let config_before = Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .get("slo-controller-config")
        .await
        .unwrap()
        .data;
    assert_eq!(helm_records(&client, "default", "koordinator").await, 1);

    // 2. The documented take-over.
    run(&script, "take-over").await;

    // Everything that had to survive is the same object, and the ConfigMap says the same.
    let after = surviving_uids(&client, &node, &profile).await;
    assert_eq!(before, after, "objects replaced or lost during the take-over");
    let config_after = Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .get("slo-controller-config")
        .await
        .unwrap()
        .data;
    assert_eq!(config_before, config_after, "slo-controller-config changed");
    // Helm forgot the old release and keeps the new one.
    assert_eq!(helm_records(&client, "default", "koordinator").await, 0);
    assert!(helm_records(&client, NAMESPACE, "koordinator").await >= 1);
    let service = Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .get("koordinator-webhook-service")
        .await
        .unwrap();
    let selector = service.spec.and_then(|s| s.selector).unwrap_or_default();
    assert_eq!(
        selector.get("app.kubernetes.io/component").map(String::as_str),
        Some("webhook"),
        "the webhook Service is the new release's: {selector:?}"
    );
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let batch = classes.get("koord-batch").await.unwrap();
    assert_eq!(batch.value, 5000);
    assert_eq!(
        batch
            .annotations()
            .get("meta.helm.sh/release-namespace")
            .map(String::as_str),
        Some(NAMESPACE),
        "the PriorityClasses belong to the new release"
    );

    // 3. The new components take over: our CRDs let the pruned field through, the new koordlet
    // reports, the new webhook applies the profile created before the switch.
    let strategies = wait_for(
        "seed 000's podStrategies in the NodeSLO",
        Duration::from_secs(120),
        async || pod_strategies(&client, &node).await,
    )
    .await;
    assert_eq!(strategies.len(), 2, "{strategies:?}");
    wait_for(
        "a NodeMetric report from the new koordlet",
        Duration::from_secs(180),
        async || reported_at(&client, &node).await.filter(|at| *at > first_report),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), cleanup.ns());
    let resources =
        json!({"requests": {"cpu": "10m", "memory": "8Mi"}, "limits": {"cpu": "10m", "memory": "8Mi"}});
    let pod = env.pod(
        "after-migration",
        json!({}),
        vec![env.container("c", Load::Idle, resources)],
    );
    let mutated = common::create_until_mutated_to_be(&pods, &pod).await;
    let spec = mutated.spec.unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("koord-batch"));
    let batch_cpu = spec.containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("kubernetes.io/batch-cpu").cloned());
    assert!(batch_cpu.is_some(), "BE pod on batch resources after the switch");
    let node_obj = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    println!(
        "taken over: {} objects kept with their UIDs; batch-cpu on {node}: {:?}",
        after.len(),
        node_obj
            .status
            .and_then(|s| s.allocatable)
            .and_then(|a| a.get("kubernetes.io/batch-cpu").cloned())
    );
}
