//! Every component in-process against the embedded cluster with two simulated nodes: the
//! manager creates NodeSLO and NodeMetric per node, the webhook mutates a pod that matches a
//! ClusterColocationProfile, each koordlet answers `/healthz`; shutdown leaves nothing behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_api::{NodeMetric, NodeSLO};
use koord_e2e::components::{Components, Selection};
use kube::Api;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_components_run_against_the_embedded_cluster() {
    let cluster = common::cluster().await;
    let client = cluster.client().unwrap();
    let nodes = common::nodes(&cluster, 2).await;
    let run_dirs = nodes.cgroup_tree().run_dirs().to_vec();
    let components = Components::start(&cluster, nodes.nodes(), Selection::all())
        .await
        .unwrap();
    assert!(components.webhook_addr().is_some());
    assert_eq!(components.koordlets().len(), 2);

    // Manager: one NodeSLO and one NodeMetric per node.
    let slos: Api<NodeSLO> = Api::all(client.clone());
    let metrics: Api<NodeMetric> = Api::all(client.clone());
    for node in nodes.nodes() {
        common::wait_for(
            &format!("NodeSLO {}", node.name),
            Duration::from_secs(30),
            async || slos.get_opt(&node.name).await.ok().flatten(),
        )
        .await;
        common::wait_for(
            &format!("NodeMetric {}", node.name),
            Duration::from_secs(30),
            async || metrics.get_opt(&node.name).await.ok().flatten(),
        )
        .await;
    }

    // Webhook: a pod matching the profile comes back as a BE pod with batch resources.
    let ns = common::unique("spark");
    cluster
        .apply_object(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"koordinator.sh/enable-colocation": "true"}}}))
        .await
        .unwrap();
    let profile = common::unique("profile");
    cluster
        .apply_object(json!({
            "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
            "metadata": {"name": profile},
            "spec": {
                "namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                "selector": {"matchLabels": {"app": "spark-e2e"}},
                "qosClass": "BE", "priorityClassName": "koord-batch", "koordinatorPriority": 1000,
                "labels": {"koordinator.sh/mutated": "true"},
            }
        }))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "driver", "labels": {"app": "spark-e2e"}},
        "spec": {"containers": [{"name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}}]}
    }))
    .unwrap();
    // The webhook's cache learns about the profile through its watch: retry until it has.
    let created = common::create_until_mutated_to_be(&pods, &pod).await;
    let labels = created.metadata.labels.clone().unwrap();
    assert_eq!(labels["koordinator.sh/mutated"], "true");
    assert_eq!(labels["koordinator.sh/priority"], "1000");
    let spec = created.spec.clone().unwrap();
    assert_eq!(spec.priority, Some(5000));
    let requests = spec.containers[0].resources.clone().unwrap().requests.unwrap();
    assert_eq!(requests["kubernetes.io/batch-cpu"].0, "500");
    assert!(!requests.contains_key("cpu"), "{requests:?}");
    // Computed after the webhook rewrote cpu/memory to batch resources, as a real server does.
    assert_eq!(
        created.status.as_ref().and_then(|s| s.qos_class.as_deref()),
        Some("BestEffort")
    );

    // Koordlet: every node's agent answers /healthz.
    for koordlet in components.koordlets() {
        let addr = koordlet.health_addr;
        let (code, _) = common::wait_for(
            &format!("koordlet {} /healthz", koordlet.node),
            Duration::from_secs(20),
            async || {
                tokio::task::spawn_blocking(move || common::http_get(addr, "/healthz"))
                    .await
                    .unwrap()
            },
        )
        .await;
        assert_eq!(code, 200, "koordlet {} /healthz", koordlet.node);
    }

    // Teardown: components stop (their admin ports close), pods and cgroups go.
    let health: Vec<_> = components.koordlets().iter().map(|k| k.health_addr).collect();
    components.shutdown(&cluster).await;
    for addr in health {
        let answer = tokio::task::spawn_blocking(move || common::http_get(addr, "/healthz"))
            .await
            .unwrap();
        assert!(
            answer.is_none(),
            "koordlet at {addr} still answers after shutdown"
        );
    }
    nodes.shutdown().await;
    for dir in run_dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
