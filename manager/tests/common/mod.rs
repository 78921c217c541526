//! What the manager's embedded-cluster tests share: a cluster with the chart's CRDs, the
//! manager started in-process, the ConfigMap, nodes as the kubelet writes them, NodeMetric
//! reports, and a client that records what a replica sends.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use koord_api::{NodeMetric, NodeSLO};
use koord_manager::{
    cli::{ControllerName, RunArgs},
    run,
};
use koord_testcluster::{ClusterOptions, TestCluster};
use kube::{
    Api, Client,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::sync::oneshot;

pub const NS: &str = "koordinator-system";

pub async fn cluster() -> (TestCluster, Client) {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let crds = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/koordinator/crds");
    cluster.install_crds_from_dir(crds).await.unwrap();
    let client = cluster.client().unwrap();
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(NS.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    (cluster, client)
}

pub fn args(leader_elect: bool, lease_seconds: u64, identity: &str) -> RunArgs {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    RunArgs {
        kubeconfig: None,
        config_namespace: NS.into(),
        slo_config_name: "slo-controller-config".into(),
        controllers: vec![
            ControllerName::Nodeslo,
            ControllerName::Nodemetric,
            ControllerName::Noderesource,
        ],
        leader_elect,
        leader_election_namespace: None,
        lease_duration: Duration::from_secs(lease_seconds),
        identity: Some(identity.into()),
        metrics_addr: any,
        health_addr: any,
        log_format: koord_runtime::LogFormat::Text,
        verbosity: None,
        resync: Duration::from_secs(1),
    }
}

/// Starts a manager; dropping the sender stops it.
pub fn start(client: &Client, args: RunArgs) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let client = client.clone();
    let task = tokio::spawn(async move {
        run::run(args, client, async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    (stop, task)
}

/// How long the manager gets to reconcile what a test changed.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub async fn config_map(client: &Client, data: &[(&str, &str)]) {
    let data: BTreeMap<String, String> = data.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "slo-controller-config", "namespace": NS}, "data": data});
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let params = PatchParams::apply("test").force();
    api.patch("slo-controller-config", &params, &Patch::Apply(cm))
        .await
        .unwrap();
}

pub async fn add_node(client: &Client, name: &str) {
    let api: Api<Node> = Api::all(client.clone());
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &node).await.unwrap();
    // As the kubelet writes it: a patch under its own field manager.
    let list = json!({"cpu": "100", "memory": "120G", "pods": "110"});
    let status = json!({"status": {"capacity": list, "allocatable": list}});
    api.patch_status(name, &field_manager("kubelet"), &Patch::Merge(status))
        .await
        .unwrap();
}

/// Patch parameters naming `manager` (a merge patch records an Update entry under it).
pub fn field_manager(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    }
}

pub async fn node_slo(client: &Client, name: &str) -> Option<NodeSLO> {
    Api::<NodeSLO>::all(client.clone()).get_opt(name).await.unwrap()
}

/// The node's batch-cpu in canonical form (a real API server, and the embedded one, store
/// `53000` as `53k`), so tests compare values, not spellings.
/// Waits until the manager created `name`'s NodeMetric.
pub async fn wait_node_metric(client: &Client, name: &str) {
    koord_test_support::eventually("NodeMetric", PATIENCE, || async {
        Api::<NodeMetric>::all(client.clone())
            .get_opt(name)
            .await
            .unwrap()
            .is_some()
    })
    .await;
}

pub async fn batch_cpu(client: &Client, name: &str) -> Option<String> {
    let node = Api::<Node>::all(client.clone()).get(name).await.unwrap();
    node.status?
        .allocatable?
        .get("kubernetes.io/batch-cpu")
        .map(|q| koord_api::canonical_quantity(&q.0).unwrap())
}

/// Waits until `node`'s batch-cpu is `quantity` (any form of it); `what` names the wait.
pub async fn wait_batch_cpu(client: &Client, node: &str, quantity: &str, what: &str) {
    let expected = canonical(quantity);
    koord_test_support::eventually(what, PATIENCE, || async {
        batch_cpu(client, node).await.as_ref() == Some(&expected)
    })
    .await;
}

pub fn canonical(quantity: &str) -> String {
    koord_api::canonical_quantity(quantity).unwrap()
}

/// What one replica sent to the API server, as seen through its own client.
#[derive(Default)]
pub struct Traffic {
    /// `METHOD path` of every request that changes something, except the Lease.
    pub writes: Mutex<Vec<String>>,
    /// Requests of any kind (proves the replica is running and watching).
    pub requests: std::sync::atomic::AtomicUsize,
    /// When set, every request fails as if the network were cut.
    pub cut: AtomicBool,
}

impl Traffic {
    pub fn writes(&self) -> Vec<String> {
        self.writes.lock().unwrap().clone()
    }
}

/// A client that records `traffic` and goes through `base` (the test cluster's client).
pub fn recording_client(base: &Client) -> (Client, Arc<Traffic>) {
    let traffic = Arc::new(Traffic::default());
    let recorded = traffic.clone();
    let base = base.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let base = base.clone();
        let traffic = recorded.clone();
        async move {
            if traffic.cut.load(Ordering::SeqCst) {
                return Err(kube::Error::Service("network cut by the test".into()));
            }
            traffic.requests.fetch_add(1, Ordering::SeqCst);
            let path = request.uri().path().to_owned();
            let read = matches!(*request.method(), http::Method::GET | http::Method::HEAD);
            if !read && !path.contains("/leases") {
                traffic
                    .writes
                    .lock()
                    .unwrap()
                    .push(format!("{} {path}", request.method()));
            }
            base.send(request).await
        }
    });
    (Client::new(service, NS), traffic)
}

pub async fn report_usage(client: &Client, node: &str, system_cpu: &str) {
    let report = json!({"status": {"updateTime": jiff::Timestamp::now().to_string(),
        "nodeMetric": {"systemUsage": {"resources": {"cpu": system_cpu, "memory": "12G"}}}}});
    Api::<NodeMetric>::all(client.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Merge(report))
        .await
        .unwrap();
}
