//! Where the pods run: the embedded cluster with one simulated node whose pods are real
//! processes in real cgroups (koordlet in-process), or any real cluster through a kubeconfig.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use koord_testcluster::TestCluster;
use koord_testcluster::node::{CgroupMode, FleetConfig, NodeSpec, SimulatedNodes};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::BenchError;
use super::policy::{Policy, config_map_data};
use crate::components::{Components, Selection};

/// How long pods get to start or go away.
const POD_PATIENCE: Duration = Duration::from_secs(60);

/// The embedded cluster and the node of the current policy.
pub struct Embedded {
    cluster: TestCluster,
    nodes: Option<SimulatedNodes>,
    components: Option<Components>,
    node: String,
    generation: usize,
}

/// A real cluster: the pods go to `node`, policies through the slo-controller-config.
pub struct RealCluster {
    client: kube::Client,
    node: String,
}

/// One of the two modes.
pub enum Target {
    /// In-process cluster and node.
    Embedded(Box<Embedded>),
    /// A real cluster.
    Real(RealCluster),
}

impl Target {
    /// Starts the embedded cluster (CRDs, namespaces, priority classes).
    pub async fn embedded(namespace: &str) -> Result<Self, BenchError> {
        let cluster = TestCluster::start(koord_testcluster::ClusterOptions::default())
            .await
            .map_err(|e| BenchError::Cluster(e.to_string()))?;
        crate::setup::install_base(&cluster, &crate::setup::crds_dir())
            .await
            .map_err(|e| BenchError::Cluster(e.to_string()))?;
        let target = Target::Embedded(Box::new(Embedded {
            cluster,
            nodes: None,
            components: None,
            node: String::new(),
            generation: 0,
        }));
        target.ensure_namespace(namespace).await?;
        Ok(target)
    }

    /// A real cluster from `kubeconfig`, pods on `node` (which must be the machine the bench
    /// runs on: the load generator uses loopback, the reports a host path).
    pub async fn real(kubeconfig: &std::path::Path, node: &str, namespace: &str) -> Result<Self, BenchError> {
        let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)
            .map_err(|e| BenchError::Cluster(e.to_string()))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| BenchError::Cluster(e.to_string()))?;
        let client = kube::Client::try_from(config).map_err(|e| BenchError::Cluster(e.to_string()))?;
        let target = Target::Real(RealCluster {
            client,
            node: node.to_string(),
        });
        target.ensure_namespace(namespace).await?;
        Ok(target)
    }

    /// The client pods are created with.
    pub fn client(&self) -> Result<kube::Client, BenchError> {
        match self {
            Target::Embedded(e) => e.cluster.client().map_err(|e| BenchError::Cluster(e.to_string())),
            Target::Real(r) => Ok(r.client.clone()),
        }
    }

    /// The node the pods go to.
    pub fn node(&self) -> &str {
        match self {
            Target::Embedded(e) => &e.node,
            Target::Real(r) => &r.node,
        }
    }

    async fn ensure_namespace(&self, namespace: &str) -> Result<(), BenchError> {
        let api: Api<Namespace> = Api::all(self.client()?);
        if api.get_opt(namespace).await.map_err(kube_err)?.is_none() {
            let ns = serde_json::from_value(json!({"metadata": {"name": namespace}}))
                .map_err(|e| BenchError::Cluster(e.to_string()))?;
            api.create(&PostParams::default(), &ns).await.map_err(kube_err)?;
        }
        Ok(())
    }

    /// Puts `policy` in place: embedded, a fresh node (new cgroups) with koordlet when the policy
    /// has it and the policy's NodeSLO; real, the slo-controller-config, then waits until the
    /// manager rendered it into the node's NodeSLO.
    pub async fn enter(&mut self, policy: &Policy, cpus: usize) -> Result<(), BenchError> {
        match self {
            Target::Embedded(e) => {
                e.leave().await;
                e.generation += 1;
                let name = format!(
                    "bench-{}-{}-{}",
                    policy.name.replace('+', "-"),
                    std::process::id(),
                    e.generation
                );
                let memory = host_memory_bytes().unwrap_or(8 << 30);
                let spec = NodeSpec::new(&name)
                    .with_resource("cpu", &cpus.to_string())
                    .with_resource("memory", &memory.to_string())
                    .with_resource("kubernetes.io/batch-cpu", &(cpus * 1000).to_string())
                    .with_resource("kubernetes.io/batch-memory", "8Gi");
                let config = FleetConfig {
                    max_container_memory: 2 << 30,
                    ..FleetConfig::default()
                };
                let nodes = SimulatedNodes::start(
                    e.cluster
                        .client()
                        .map_err(|x| BenchError::Cluster(x.to_string()))?,
                    vec![spec],
                    config,
                )
                .await
                .map_err(|x| BenchError::Cluster(x.to_string()))?;
                if !matches!(nodes.cgroup_tree().mode(), CgroupMode::V1 { .. }) {
                    return Err(BenchError::Skip(format!(
                        "the simulated node has no writable cgroup v1 ({:?}); run as root",
                        nodes.cgroup_tree().mode()
                    )));
                }
                e.node = name.clone();
                let slo = serde_json::from_value(json!({
                    "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                    "metadata": {"name": name}, "spec": policy.node_slo,
                }))
                .map_err(|x| BenchError::Cluster(x.to_string()))?;
                let api: Api<koord_api::NodeSLO> = Api::all(
                    e.cluster
                        .client()
                        .map_err(|x| BenchError::Cluster(x.to_string()))?,
                );
                api.create(&PostParams::default(), &slo).await.map_err(kube_err)?;
                if policy.koordlet {
                    let selection = Selection {
                        koordlet: true,
                        ..Selection::none()
                    };
                    let components = Components::start(&e.cluster, nodes.nodes(), selection)
                        .await
                        .map_err(|x| BenchError::Cluster(x.to_string()))?;
                    e.components = Some(components);
                }
                e.nodes = Some(nodes);
                Ok(())
            }
            Target::Real(r) => {
                let api: Api<ConfigMap> = Api::namespaced(r.client.clone(), "koordinator-system");
                let cm = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
                    "data": config_map_data(policy),
                });
                api.patch(
                    "slo-controller-config",
                    &PatchParams::apply("koord-bench").force(),
                    &Patch::Apply(cm),
                )
                .await
                .map_err(kube_err)?;
                let slos: Api<koord_api::NodeSLO> = Api::all(r.client.clone());
                let want = policy.node_slo["resourceUsedThresholdWithBE"]["cpuSuppressPolicy"].clone();
                let want_enable = policy.node_slo["resourceUsedThresholdWithBE"]["enable"].clone();
                let deadline = std::time::Instant::now() + POD_PATIENCE;
                loop {
                    if let Some(slo) = slos.get_opt(&r.node).await.map_err(kube_err)? {
                        let spec = serde_json::to_value(&slo.spec)
                            .map_err(|e| BenchError::Cluster(e.to_string()))?;
                        let t = &spec["resourceUsedThresholdWithBE"];
                        if t["enable"] == want_enable && (want.is_null() || t["cpuSuppressPolicy"] == want) {
                            return Ok(());
                        }
                    }
                    if std::time::Instant::now() > deadline {
                        return Err(BenchError::Cluster(format!(
                            "NodeSLO {} did not take policy {} within {POD_PATIENCE:?}",
                            r.node, policy.name
                        )));
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Stops what [`Self::enter`] started (embedded; nothing on a real cluster).
    pub async fn leave(&mut self) {
        if let Target::Embedded(e) = self {
            e.leave().await;
        }
    }
}

impl Embedded {
    async fn leave(&mut self) {
        if let Some(components) = self.components.take() {
            components.shutdown(&self.cluster).await;
        }
        if let Some(nodes) = self.nodes.take() {
            nodes.shutdown().await;
        }
    }
}

fn kube_err(e: kube::Error) -> BenchError {
    BenchError::Cluster(e.to_string())
}

fn host_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Creates `pod` in `namespace` and waits until it runs on its node.
pub async fn run_pod(
    client: &kube::Client,
    namespace: &str,
    pod: serde_json::Value,
) -> Result<String, BenchError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod: Pod = serde_json::from_value(pod).map_err(|e| BenchError::Cluster(e.to_string()))?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let deadline = std::time::Instant::now() + POD_PATIENCE;
    loop {
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => break,
            // Before 1.24 the ServiceAccount admission refuses pods in a new namespace until
            // the token controller has given its `default` account a token; the server asks
            // to retry.
            Err(kube::Error::Api(status))
                if status.reason == "ServerTimeout" && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(kube_err(e)),
        }
    }
    loop {
        let status = api.get_opt(&name).await.map_err(kube_err)?.and_then(|p| p.status);
        let phase = status.as_ref().and_then(|s| s.phase.clone());
        match phase.as_deref() {
            Some("Running") => return Ok(name),
            Some("Failed") => {
                // The kubelet's reason (e.g. `OutOfcpu: Node didn't have enough resource`).
                let why = status
                    .map(|s| {
                        format!(
                            "{}: {}",
                            s.reason.unwrap_or_default(),
                            s.message.unwrap_or_default()
                        )
                    })
                    .unwrap_or_default();
                delete_pod(client, namespace, &name).await?;
                return Err(BenchError::Cluster(format!("pod {name} failed to start: {why}")));
            }
            _ if std::time::Instant::now() > deadline => {
                return Err(BenchError::Cluster(format!(
                    "pod {name} not running within {POD_PATIENCE:?}"
                )));
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Deletes pod `name` at once and waits until it is gone.
pub async fn delete_pod(client: &kube::Client, namespace: &str, name: &str) -> Result<(), BenchError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    if api.delete(name, &params).await.is_err() && api.get_opt(name).await.map_err(kube_err)?.is_none() {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + POD_PATIENCE;
    while api.get_opt(name).await.map_err(kube_err)?.is_some() {
        if std::time::Instant::now() > deadline {
            return Err(BenchError::Cluster(format!(
                "pod {name} not gone within {POD_PATIENCE:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
