//! One scenario's world: an embedded cluster, a simulated node, a [`CutProxy`] between
//! koordlet and the API server, and koordlet itself (started, stopped and restarted in-process
//! with its admin endpoint on a known port, so its Prometheus counters can be read).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::{Event, Pod};
use koord_test_support::poll::wait_for;
use koord_testcluster::TestCluster;
use koord_testcluster::node::{CgroupMode, FleetConfig, NodeInfo, NodeSpec, SimulatedNodes};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

pub use crate::common::cluster::host_used_bytes;
use crate::common::cluster::{cluster_with_namespace, unique};
use crate::cut::CutProxy;

pub const MI: u64 = 1 << 20;

pub struct FaultEnv {
    pub cluster: TestCluster,
    pub client: kube::Client,
    pub ns: String,
    pub node: NodeInfo,
    pub proxy: CutProxy,
    pub admin_port: u16,
    kubeconfig: PathBuf,
    agent: Option<Agent>,
    _nodes: SimulatedNodes,
    _dir: tempfile::TempDir,
}

struct Agent {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), koordlet::agent::AgentError>>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl FaultEnv {
    /// `None` (after `skipped: ...`) when real cgroups are not usable.
    pub async fn start(prefix: &str, node_memory: u64) -> Option<Self> {
        let (cluster, client, ns) = cluster_with_namespace(prefix).await;
        let name = unique("sim");
        let spec = NodeSpec::new(&name)
            .with_resource("memory", &node_memory.to_string())
            .with_resource("kubernetes.io/batch-cpu", "4000")
            .with_resource("kubernetes.io/batch-memory", "8Gi");
        let nodes = SimulatedNodes::start(client.clone(), vec![spec], FleetConfig::default())
            .await
            .unwrap();
        if let CgroupMode::Fake { reason } = nodes.cgroup_tree().mode() {
            println!("skipped: real cgroups not usable ({reason})");
            return None;
        }
        let node = nodes.node(&name).unwrap().clone();
        let proxy = CutProxy::start(cluster.addr()).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            cluster
                .kubeconfig_yaml()
                .replace(&cluster.addr().to_string(), &proxy.addr().to_string()),
        )
        .unwrap();
        Some(FaultEnv {
            cluster,
            client,
            ns,
            node,
            proxy,
            admin_port: 0,
            kubeconfig,
            agent: None,
            _nodes: nodes,
            _dir: dir,
        })
    }

    /// Starts koordlet (through the proxy) with `gates`, its admin endpoint on a new port.
    pub fn start_koordlet(&mut self, gates: &str) {
        self.admin_port = free_port();
        let args = koordlet::cli::Args::try_parse_from(
            self.node.koordlet_args(&self.kubeconfig).into_iter().chain([
                "--collect-interval=1s".into(),
                format!("--feature-gates={gates}"),
                format!("--metrics-addr=127.0.0.1:{}", self.admin_port),
                format!("--health-addr=127.0.0.1:{}", self.admin_port),
                format!("--state-dir={}", self._dir.path().join("state").display()),
                format!(
                    "--cpuset-state-file={}",
                    self._dir.path().join("state/cpuset.json").display()
                ),
            ]),
        )
        .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(koordlet::agent::run_agent(args.agent, async move {
            let _ = stopped.await;
        }));
        self.agent = Some(Agent {
            stop: Some(stop),
            task,
        });
    }

    /// Stops koordlet gracefully and waits for it.
    pub async fn stop_koordlet(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            if let Some(stop) = agent.stop.take() {
                let _ = stop.send(());
            }
            let task = &mut agent.task;
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }

    /// The sum of koordlet's Prometheus samples whose line starts with `prefix` and contains
    /// every one of `containing` (0 when the endpoint is not up yet).
    pub async fn metric_where(&self, prefix: &str, containing: &[&str]) -> f64 {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.admin_port));
        let Some(body) = koord_test_support::scrape(addr).await else {
            return 0.0;
        };
        body.lines()
            .filter(|l| l.starts_with(prefix) && containing.iter().all(|c| l.contains(c)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// [`FaultEnv::metric_where`] on the prefix alone.
    pub async fn metric(&self, prefix: &str) -> f64 {
        self.metric_where(prefix, &[]).await
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn node_slos(&self) -> Api<koord_api::NodeSLO> {
        Api::all(self.client.clone())
    }

    /// Creates or replaces this node's NodeSLO.
    pub async fn node_slo(&self, spec: Value) {
        let mut slo: koord_api::NodeSLO = serde_json::from_value(json!({
            "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
            "metadata": {"name": self.node.name}, "spec": spec,
        }))
        .unwrap();
        match self.node_slos().get_opt(&self.node.name).await.unwrap() {
            Some(old) => {
                slo.metadata.resource_version = old.metadata.resource_version;
                self.node_slos()
                    .replace(&self.node.name, &PostParams::default(), &slo)
                    .await
                    .unwrap();
            }
            None => {
                self.node_slos()
                    .create(&PostParams::default(), &slo)
                    .await
                    .unwrap();
            }
        }
    }

    pub async fn create_running(&self, pod: Value) {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        let name = pod.metadata.name.clone().unwrap();
        self.pods().create(&PostParams::default(), &pod).await.unwrap();
        wait_for(&format!("{name} Running"), Duration::from_secs(60), async || {
            let pod = self.pods().get(&name).await.ok()?;
            (pod.status?.phase.as_deref() == Some("Running")).then_some(())
        })
        .await;
    }

    /// (reason, message) of the Events on pod `name`.
    pub async fn events(&self, name: &str) -> Vec<(String, String)> {
        Api::<Event>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect()
    }

    /// The besteffort QoS cgroup's CFS quota (what suppress writes).
    pub fn be_quota(&self) -> i64 {
        std::fs::read_to_string(self.be_quota_file())
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    pub fn be_quota_file(&self) -> PathBuf {
        self.node
            .cgroup_root
            .join("cpu/kubepods/besteffort/cpu.cfs_quota_us")
    }
}

pub fn be_pod(name: &str, memory: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"koordinator.sh/qosClass": "BE"},
                     "annotations": {"sim.koordinator.sh/memory": memory, "sim.koordinator.sh/cpu-load": "0.05"}},
        "spec": {"containers": [{"name": "main", "image": "batch",
            "resources": {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
                          "limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"}}}]}
    })
}

pub fn ls_pod(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"koordinator.sh/qosClass": "LS", "app": name},
                     "annotations": {"sim.koordinator.sh/memory": "20Mi", "sim.koordinator.sh/cpu-load": "0.05"}},
        "spec": {"containers": [{"name": "main", "image": "app",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}}]}
    })
}
