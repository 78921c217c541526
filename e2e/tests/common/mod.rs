//! Shared helpers of the scenario tests: a cluster with Koordinator's base objects, simulated
//! nodes, polling, a loopback HTTP GET and the process-wide CPU-measurement lock.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use koord_testcluster::node::{FleetConfig, NodeSpec, SimulatedNodes};
use koord_testcluster::{ClusterOptions, TestCluster};

/// Tests that measure CPU hold this so they never overlap within a test binary (DESIGN.md §4).
/// A tokio mutex: it is held across awaits, and a failed test does not poison it.
pub static CPU_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Takes [`CPU_LOCK`].
pub async fn cpu_lock() -> tokio::sync::MutexGuard<'static, ()> {
    CPU_LOCK.lock().await
}

/// A unique name with `prefix`.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_logs() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// A cluster with the CRDs, `koordinator-system`, the PriorityClasses and the seed-001 ConfigMap.
pub async fn cluster() -> TestCluster {
    init_logs();
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    koord_e2e::setup::install_base(&cluster, &koord_e2e::setup::crds_dir())
        .await
        .unwrap();
    koord_e2e::setup::apply_seed_config(&cluster).await.unwrap();
    cluster
}

/// `count` simulated nodes with unique names, 4 CPUs, 8Gi and room for batch resources.
pub async fn nodes(cluster: &TestCluster, count: usize) -> SimulatedNodes {
    let prefix = unique("sim");
    let specs = (1..=count)
        .map(|i| {
            NodeSpec::new(&format!("{prefix}-{i}"))
                .with_resource("kubernetes.io/batch-cpu", "4000")
                .with_resource("kubernetes.io/batch-memory", "4Gi")
        })
        .collect();
    let nodes = SimulatedNodes::start(cluster.client().unwrap(), specs, FleetConfig::default())
        .await
        .unwrap();
    println!("cgroup mode: {:?}", nodes.cgroup_tree().mode());
    nodes
}

/// Creates `pod` (JSON) in a fresh namespace named after `namespace_prefix` and waits until it
/// is Running: the namespace and the pod's uid.
pub async fn running_pod(
    cluster: &TestCluster,
    namespace_prefix: &str,
    pod: serde_json::Value,
) -> (String, String) {
    let namespace = unique(namespace_prefix);
    cluster
        .apply_object(
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
        .await
        .unwrap();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(cluster.client().unwrap(), &namespace);
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod).unwrap();
    let name = pod.metadata.name.clone().unwrap();
    let created = pods
        .create(&kube::api::PostParams::default(), &pod)
        .await
        .unwrap();
    let uid = created.metadata.uid.unwrap();
    wait_for(
        &format!("pod {name} Running"),
        Duration::from_secs(30),
        async || {
            let pod = pods.get(&name).await.ok()?;
            (pod.status?.phase.as_deref() == Some("Running")).then_some(())
        },
    )
    .await;
    (namespace, uid)
}

/// Creates `pod` until the webhook has mutated it into QoS BE, deleting each attempt it did not
/// mutate (and waiting while that attempt is still being deleted): the webhook learns about a
/// new ClusterColocationProfile through its watch.
pub async fn create_until_mutated_to_be(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> k8s_openapi::api::core::v1::Pod {
    let name = pod.metadata.name.clone().unwrap_or_default();
    wait_for("a mutated pod", Duration::from_secs(60), async || {
        let created = match pods.create(&kube::api::PostParams::default(), pod).await {
            Ok(created) => created,
            // The previous attempt is still being deleted.
            Err(kube::Error::Api(status)) if status.code == 409 => return None,
            Err(e) => panic!("creating pod {name}: {e}"),
        };
        let labels = created.metadata.labels.clone().unwrap_or_default();
        if labels.get("koordinator.sh/qosClass").map(String::as_str) == Some("BE") {
            return Some(created);
        }
        pods.delete(&name, &kube::api::DeleteParams::default())
            .await
            .unwrap();
        None
    })
    .await
}

/// How long a scenario waits for a node to offer the batch CPU its BE pod requests. On a real
/// node the offer follows the node's measured usage, which stays high for minutes after a build
/// or another scenario's load (the manager averages usage over its aggregation window).
pub const BATCH_OFFER: Duration = Duration::from_secs(300);

/// A quantity's value in its base unit (milli-cores for batch-cpu). A real API server stores
/// quantities in canonical form (`2000` as `2k`).
pub fn quantity_value(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Option<i64> {
    koord_api::ExactQuantity::from_k8s(q).ok().map(|v| v.value())
}

/// What is left of `node`'s batch-cpu for one more pod: its allocatable minus the batch-cpu
/// requests of the pods still bound to it (the kubelet's admission rule; pods of other
/// scenarios may still be terminating).
async fn free_batch_cpu(client: &kube::Client, node: &k8s_openapi::api::core::v1::Node) -> Option<i64> {
    let allocatable = quantity_value(
        node.status
            .as_ref()?
            .allocatable
            .as_ref()?
            .get("kubernetes.io/batch-cpu")?,
    )?;
    let name = node.metadata.name.as_deref()?;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(client.clone());
    let params = kube::api::ListParams::default().fields(&format!("spec.nodeName={name}"));
    let requested: i64 = pods
        .list(&params)
        .await
        .ok()?
        .items
        .iter()
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
        .filter_map(|c| {
            c.resources
                .as_ref()?
                .requests
                .as_ref()?
                .get("kubernetes.io/batch-cpu")
        })
        .filter_map(quantity_value)
        .sum();
    Some(allocatable - requested)
}

/// Waits until some node has at least `milli` batch-cpu free (allocatable minus what its pods
/// request); panics after [`BATCH_OFFER`] naming the most seen free.
pub async fn wait_for_batch_cpu(client: &kube::Client, milli: i64) {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let largest = std::sync::Mutex::new(None::<i64>);
    let found = koord_test_support::Poll::new("batch-cpu offer", BATCH_OFFER)
        .until(async || {
            let list = nodes.list(&Default::default()).await.ok()?;
            let mut free = None;
            for node in &list.items {
                free = free.max(free_batch_cpu(client, node).await);
            }
            *largest.lock().unwrap() = free;
            free.filter(|v| *v >= milli).map(|_| ())
        })
        .await;
    assert!(
        found.is_ok(),
        "timed out after {BATCH_OFFER:?} waiting for a node with {milli} batch-cpu free \
         (most seen: {:?})",
        largest.lock().unwrap()
    );
}

/// The one poll-until helper, re-exported so every scenario file calls `common::wait_for`.
pub use koord_test_support::wait_for;

/// GET `path` over plain HTTP/1.0 on loopback: (status code, body); None when unreachable.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}
