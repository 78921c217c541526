//! Shared helpers for the harness's own tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod crd;

use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec};
use koord_testcluster::node::{FleetConfig, NodeSpec, SimulatedNodes};
use koord_testcluster::{ClusterOptions, TestCluster};
use kube::api::{Api, ObjectMeta, PostParams};

/// A name no other test run uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

/// One simulated node with a unique name and room for batch resources: its name and the fleet.
pub async fn one_node(client: &kube::Client) -> (String, SimulatedNodes) {
    let node_name = unique("sim");
    let spec = NodeSpec::new(&node_name)
        .with_resource("kubernetes.io/batch-cpu", "4000")
        .with_resource("kubernetes.io/batch-memory", "4Gi");
    let nodes = SimulatedNodes::start(client.clone(), vec![spec], FleetConfig::default())
        .await
        .unwrap();
    (node_name, nodes)
}

/// Start a cluster and create a fresh namespace in it.
pub async fn cluster_with_namespace() -> (TestCluster, kube::Client, String) {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let client = cluster.client().unwrap();
    let ns = unique("ns");
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await
    .unwrap();
    (cluster, client, ns)
}

/// A minimal pod.
pub fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("busybox".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}
