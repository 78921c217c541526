//! What the embedded-cluster tests share: unique names and a cluster with the chart's CRDs and
//! a namespace of its own.

use k8s_openapi::api::core::v1::Namespace;
use koord_testcluster::{ClusterOptions, TestCluster};
use kube::api::{Api, PostParams};
use serde_json::json;

/// `<prefix>-<pid>-<nanos>`: a name no other test run on this machine uses at the same time.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}-{}-{nanos:x}", std::process::id())
}

/// An embedded cluster with the chart's CRDs installed, its client, and a new namespace named
/// after `prefix`.
pub async fn cluster_with_namespace(prefix: &str) -> (TestCluster, kube::Client, String) {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let client = cluster.client().unwrap();
    cluster
        .install_crds_from_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/koordinator/crds"))
        .await
        .unwrap();
    let ns = unique(prefix);
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    (cluster, client, ns)
}

/// Host memory in use (MemTotal − MemAvailable), bytes: what koordlet reads on this node.
pub fn host_used_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let field = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap()
            * 1024
    };
    field("MemTotal:") - field("MemAvailable:")
}
