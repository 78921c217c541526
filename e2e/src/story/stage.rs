//! The stage the story plays on: the embedded API server, simulated nodes sized for the story,
//! koord-webhook and koord-manager first (so the seeds go through the validating webhook),
//! then one koordlet per node once the NodeMetrics carry the story's report interval.
//!
//! Dropping the stage (also on an error or a panic) stops the components, kills every pod
//! process and removes every cgroup; [`Stage::shutdown`] does the same gracefully.

use std::time::Duration;

use koord_testcluster::node::{CgroupMode, FleetConfig, NodeInfo, NodeSpec, SimulatedNodes};
use koord_testcluster::{ClusterOptions, TestCluster};

use super::StoryError;
use super::memory::MemoryPlan;
use crate::components::{Components, Selection};
use crate::setup;

/// How the story's stage is built.
#[derive(Debug, Clone)]
pub struct StageOptions {
    /// Simulated nodes (`sim-node-1` ..).
    pub nodes: usize,
    /// Use the fake cgroup tree even where real cgroups are writable.
    pub fake_cgroups: bool,
    /// Where the CRD manifests are.
    pub crds: std::path::PathBuf,
}

/// The running stage. Fields drop in order: koordlets, control plane, nodes, API server.
pub struct Stage {
    koordlets: Option<Components>,
    control: Option<Components>,
    nodes: Option<SimulatedNodes>,
    cluster: TestCluster,
    /// A client of the API server.
    pub client: kube::Client,
    /// Node names, first node first.
    pub node_names: Vec<String>,
    /// How node memory was sized and what the memory act does.
    pub memory: MemoryPlan,
    /// CPU capacity of each node, in cores.
    pub node_cpus: u64,
}

/// CPUs of a simulated node. koordlet measures node usage from the host's `/proc`, where every
/// other process counts as system usage; a node the size of the host would have no batch
/// resources left on a busy machine, so each node gets room above what the host can burn.
pub fn node_cpus() -> u64 {
    std::thread::available_parallelism().map_or(2, |n| n.get() as u64) * 4
}

impl Stage {
    /// Starts the API server, the nodes, the webhook and the manager.
    pub async fn start(options: &StageOptions) -> Result<Stage, StoryError> {
        if options.nodes == 0 {
            return Err(StoryError::Options("--nodes must be at least 1".into()));
        }
        let cluster = TestCluster::start(ClusterOptions::default())
            .await
            .map_err(StoryError::Cluster)?;
        let client = cluster.client().map_err(StoryError::Cluster)?;
        setup::install_base(&cluster, &options.crds).await?;
        let memory = MemoryPlan::from_host(options.nodes);
        let node_cpus = node_cpus();
        let node_names: Vec<String> = (1..=options.nodes).map(|i| format!("sim-node-{i}")).collect();
        let specs = node_names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                NodeSpec::new(name)
                    .with_resource("cpu", &node_cpus.to_string())
                    .with_resource("memory", &memory.node_capacity(i).to_string())
            })
            .collect();
        let mut config = FleetConfig {
            force_fake_cgroups: options.fake_cgroups,
            max_container_memory: memory.largest_pod_bytes().max(1 << 30),
            ..FleetConfig::default()
        };
        // Seed 001's profile sets `schedulerName: koord-scheduler`: the simulated scheduler
        // plays it (it fits batch resources as koord-scheduler does).
        config.scheduler_names.push("koord-scheduler".into());
        let nodes = SimulatedNodes::start(client.clone(), specs, config)
            .await
            .map_err(StoryError::Nodes)?;
        let control = Selection {
            manager: true,
            webhook: true,
            ..Selection::none()
        };
        let control = Components::start(&cluster, nodes.nodes(), control).await?;
        Ok(Stage {
            koordlets: None,
            control: Some(control),
            nodes: Some(nodes),
            cluster,
            client,
            node_names,
            memory,
            node_cpus,
        })
    }

    /// Starts one koordlet per node (memory eviction on: it is off by default, as upstream).
    pub async fn start_koordlets(&mut self) -> Result<(), StoryError> {
        let selection = Selection {
            koordlet: true,
            koordlet_args: vec!["--feature-gates=BEMemoryEvict=true".into()],
            ..Selection::none()
        };
        let infos = self.node_infos();
        self.koordlets = Some(Components::start(&self.cluster, &infos, selection).await?);
        Ok(())
    }

    /// Where koordlet finds each node (cgroup root, proc root, kubelet endpoint).
    pub fn node_infos(&self) -> Vec<NodeInfo> {
        self.nodes
            .as_ref()
            .map(|n| n.nodes().to_vec())
            .unwrap_or_default()
    }

    /// The pids of a pod's processes, by UID (empty once it stopped).
    pub fn pod_pids(&self, uid: &str) -> Vec<u32> {
        self.nodes.as_ref().map(|n| n.pod_pids(uid)).unwrap_or_default()
    }

    /// What the pods run in: real cgroups (which) or the fake tree (and why).
    pub fn cgroups(&self) -> CgroupsUsed {
        match self.nodes.as_ref().map(|n| n.cgroup_tree().mode()) {
            Some(CgroupMode::V1 { .. }) => CgroupsUsed::RealV1,
            Some(CgroupMode::V2 { .. }) => CgroupsUsed::RealV2,
            Some(CgroupMode::Fake { reason }) => CgroupsUsed::Fake(reason.clone()),
            None => CgroupsUsed::Fake("nodes stopped".into()),
        }
    }

    /// The API server's URL.
    pub fn url(&self) -> String {
        self.cluster.url()
    }

    /// Writes a kubeconfig for kubectl.
    pub fn write_kubeconfig(&self, path: &std::path::Path) -> Result<(), StoryError> {
        self.cluster.write_kubeconfig(path).map_err(StoryError::Cluster)
    }

    /// Stops the koordlets, the manager and the webhook, then every pod process and cgroup.
    pub async fn shutdown(mut self) {
        if let Some(koordlets) = self.koordlets.take() {
            koordlets.shutdown(&self.cluster).await;
        }
        if let Some(control) = self.control.take() {
            control.shutdown(&self.cluster).await;
        }
        if let Some(nodes) = self.nodes.take() {
            nodes.shutdown().await;
        }
    }
}

/// Where the pods' processes run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupsUsed {
    /// Real cgroup v1: koordlet's writes confine real processes.
    RealV1,
    /// Real cgroup v2.
    RealV2,
    /// A fake tree in a temp dir: processes run unconfined, usage files are simulated.
    Fake(String),
}

impl CgroupsUsed {
    /// Whether the processes run in real cgroups.
    pub fn is_real(&self) -> bool {
        !matches!(self, CgroupsUsed::Fake(_))
    }
}

impl std::fmt::Display for CgroupsUsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CgroupsUsed::RealV1 => write!(f, "real processes in real cgroups (v1)"),
            CgroupsUsed::RealV2 => write!(f, "real processes in real cgroups (v2)"),
            CgroupsUsed::Fake(reason) => write!(
                f,
                "real processes, fake cgroup tree (usage simulated, limits not enforced): {reason}"
            ),
        }
    }
}

/// How long the control plane may take before the first batch resources appear.
pub const FIRST_BATCH_TIMEOUT: Duration = Duration::from_secs(90);
