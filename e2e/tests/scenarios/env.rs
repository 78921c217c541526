//! Where the scenarios run: the embedded cluster with every component (default), or the cluster
//! of `KOORD_E2E_KUBECONFIG` with the chart installed (then nothing is started here), and the
//! workload containers each can run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use koord_api::names::{DEFAULT_CONFIG_NAMESPACE, DEFAULT_SLO_CONFIG_NAME};
use koord_e2e::components::{Components, Selection};
use koord_testcluster::TestCluster;
use koord_testcluster::node::{FleetConfig, NodeSpec, SimulatedNodes};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common;

/// The kubeconfig of a real cluster to run against.
pub const ENV_KUBECONFIG: &str = "KOORD_E2E_KUBECONFIG";
/// The image of workload containers on a real cluster.
pub const ENV_IMAGE: &str = "KOORD_E2E_IMAGE";
/// Command (whitespace-separated) of an idle workload container on a real cluster.
pub const ENV_IDLE_COMMAND: &str = "KOORD_E2E_IDLE_COMMAND";
/// Command (whitespace-separated) of a container burning one CPU core on a real cluster.
pub const ENV_BURN_COMMAND: &str = "KOORD_E2E_BURN_COMMAND";
/// The host's cgroup v1 mount root on a real cluster's node (default `/sys/fs/cgroup`).
pub const ENV_CGROUP_ROOT: &str = "KOORD_E2E_CGROUP_ROOT";

const DEFAULT_IMAGE: &str = "koord-e2e-busy:local";
const DEFAULT_IDLE_COMMAND: &str = "/busy";
const DEFAULT_BURN_COMMAND: &str = "/busy --cpu 1";

/// What runs the cluster.
pub enum Backend {
    /// The embedded API server, simulated nodes and in-process components.
    Embedded(Box<Embedded>),
    /// A real cluster with the chart installed.
    Real,
}

/// The embedded cluster's parts (dropped in field order: components, nodes, then the server).
pub struct Embedded {
    /// In-process components, held so they run as long as the cluster.
    _components: Components,
    /// Simulated nodes.
    pub nodes: SimulatedNodes,
    /// The API server.
    pub cluster: TestCluster,
}

/// Which components the embedded backend starts (a real cluster runs what the chart runs).
#[derive(Debug, Clone, Copy)]
pub struct Wanted {
    /// koord-manager (leader election starts its own two).
    pub manager: bool,
}

impl Default for Wanted {
    fn default() -> Self {
        Wanted { manager: true }
    }
}

/// One scenario's cluster.
pub struct Env {
    /// A client of the cluster.
    pub client: kube::Client,
    /// What runs it.
    pub backend: Backend,
}

/// CPUs of the simulated node. koordlet measures node usage from the host's `/proc`, where
/// every process of a shared build machine counts as system usage; a node the size of the host
/// would then have no batch resources left, so it gets room above what the host can burn.
fn node_cpus() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZero::get) * 4
}

impl Env {
    /// The cluster from the environment; components per `wanted` on the embedded one.
    pub async fn start(wanted: Wanted) -> Env {
        common::init_logs();
        match std::env::var_os(ENV_KUBECONFIG) {
            Some(path) => Env::real(Path::new(&path)).await,
            None => Env::embedded(wanted).await,
        }
    }

    async fn real(path: &Path) -> Env {
        let kubeconfig = kube::config::Kubeconfig::read_from(path)
            .unwrap_or_else(|e| panic!("{ENV_KUBECONFIG}={}: {e}", path.display()));
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap_or_else(|e| panic!("{ENV_KUBECONFIG}={}: {e}", path.display()));
        let client = kube::Client::try_from(config).unwrap();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        assert!(
            namespaces
                .get_opt(DEFAULT_CONFIG_NAMESPACE)
                .await
                .unwrap()
                .is_some(),
            "namespace {DEFAULT_CONFIG_NAMESPACE} missing: install the chart first"
        );
        Env {
            client,
            backend: Backend::Real,
        }
    }

    async fn embedded(wanted: Wanted) -> Env {
        let cluster = common::cluster().await;
        let client = cluster.client().unwrap();
        // Faster reports than the default minute, so NodeMetric and batch resources move
        // within a scenario.
        let patch = json!({"data": {"colocation-config":
            "{\"enable\": true, \"metricReportIntervalSeconds\": 5}"}});
        Api::<ConfigMap>::namespaced(client.clone(), DEFAULT_CONFIG_NAMESPACE)
            .patch(
                DEFAULT_SLO_CONFIG_NAME,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
        // No static batch resources: the manager has to publish them.
        let spec = NodeSpec::new(&common::unique("sim"))
            .with_resource("cpu", &node_cpus().to_string())
            .with_resource("memory", "8Gi");
        let nodes = SimulatedNodes::start(client.clone(), vec![spec], FleetConfig::default())
            .await
            .unwrap();
        let selection = Selection {
            manager: wanted.manager,
            webhook: true,
            koordlet: true,
            // Peak prediction without its 24 h cold start, trained every 5 s (embedded cluster
            // only; the real cluster runs the chart's defaults): mid resources from the
            // prediction within a scenario.
            koordlet_args: vec![
                "--feature-gates=BEMemoryEvict=true,MemoryEvict=true".into(),
                "--prediction-cold-start-duration=0s".into(),
                "--prediction-training-interval=5s".into(),
            ],
            ..Selection::none()
        };
        let components = Components::start(&cluster, nodes.nodes(), selection)
            .await
            .unwrap();
        Env {
            client,
            backend: Backend::Embedded(Box::new(Embedded {
                _components: components,
                nodes,
                cluster,
            })),
        }
    }

    /// Whether this is the cluster of `KOORD_E2E_KUBECONFIG`.
    pub fn is_real(&self) -> bool {
        matches!(self.backend, Backend::Real)
    }

    /// The embedded parts, when embedded.
    pub fn embedded_parts(&self) -> Option<&Embedded> {
        match &self.backend {
            Backend::Embedded(e) => Some(e),
            Backend::Real => None,
        }
    }

    /// Names of the Ready nodes.
    pub async fn node_names(&self) -> Vec<String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let list = nodes.list(&Default::default()).await.unwrap();
        let names: Vec<String> = list
            .items
            .into_iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .filter_map(|n| n.metadata.name)
            .collect();
        match &self.backend {
            // Other tests' nodes may linger in no embedded cluster, but stay exact anyway.
            Backend::Embedded(e) => names.into_iter().filter(|n| e.nodes.node(n).is_some()).collect(),
            Backend::Real => names,
        }
    }

    /// The first Ready node and its cgroup root, or why there is none to look at.
    pub async fn first_node_cgroups(&self) -> Result<(String, PathBuf), String> {
        let node = self
            .node_names()
            .await
            .into_iter()
            .next()
            .ok_or("no Ready node")?;
        let root = self.cgroup_root(&node)?;
        Ok((node, root))
    }

    /// The cgroup v1 mount root (holding `cpu/`, `memory/`, ...) of `node`, when this process
    /// can read it: the simulated node's root, or the host's on a real cluster whose kubelet
    /// put a `kubepods` tree there (this test runs on the node).
    pub fn cgroup_root(&self, node: &str) -> Result<PathBuf, String> {
        match &self.backend {
            Backend::Embedded(e) => e
                .nodes
                .node(node)
                .map(|n| n.cgroup_root.clone())
                .ok_or_else(|| format!("no simulated node {node}")),
            Backend::Real => {
                let root = std::env::var_os(ENV_CGROUP_ROOT)
                    .map_or_else(|| PathBuf::from("/sys/fs/cgroup"), PathBuf::from);
                match find_dir(&root.join("cpu"), "kubepods", 3) {
                    Some(_) => Ok(root),
                    None => Err(format!(
                        "no kubepods cgroup under {}/cpu: not running on the node (set {ENV_CGROUP_ROOT})",
                        root.display()
                    )),
                }
            }
        }
    }

    /// A container for `load` that this cluster can run.
    pub fn container(&self, name: &str, load: Load, resources: Value) -> Value {
        let mut c = match &self.backend {
            Backend::Embedded(_) => {
                // The simulated kubelet runs stress command lines as real burning processes.
                let command: Vec<&str> = match load {
                    Load::Idle => vec![],
                    Load::BurnOneCore => vec!["stress", "--cpu", "1"],
                };
                json!({"name": name, "image": "busybox", "command": command})
            }
            Backend::Real => {
                let image = std::env::var(ENV_IMAGE).unwrap_or_else(|_| DEFAULT_IMAGE.into());
                let (var, default) = match load {
                    Load::Idle => (ENV_IDLE_COMMAND, DEFAULT_IDLE_COMMAND),
                    Load::BurnOneCore => (ENV_BURN_COMMAND, DEFAULT_BURN_COMMAND),
                };
                let command = std::env::var(var).unwrap_or_else(|_| default.into());
                let command: Vec<&str> = command.split_whitespace().collect();
                json!({"name": name, "image": image, "imagePullPolicy": "IfNotPresent", "command": command})
            }
        };
        if let Some(m) = c.as_object_mut() {
            if m.get("command")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                m.remove("command");
            }
            m.insert("resources".into(), resources);
        }
        c
    }

    /// A pod of `containers`; host network (pods here need none, and a real test cluster may
    /// have no pod network).
    pub fn pod(&self, name: &str, labels: Value, containers: Vec<Value>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"hostNetwork": true, "terminationGracePeriodSeconds": 1, "containers": containers}
        }))
        .unwrap()
    }

    /// A fresh namespace `<prefix>-<uuid>` with `labels`, deleted by the returned guard.
    pub async fn namespace(&self, prefix: &str, labels: Value) -> Cleanup {
        let name = common::unique(prefix);
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let mut guard = Cleanup::new(self.client.clone());
        guard.namespace = Some(name.clone());
        self.wait_admits_pods(&name).await;
        guard
    }

    /// Waits until `ns` admits pods. A real API server before 1.24 refuses pods (500
    /// ServerTimeout, "No API token found for service account") until the token controller has
    /// given the namespace's `default` ServiceAccount its secret; a dry-run create asks exactly
    /// that without creating anything.
    async fn wait_admits_pods(&self, ns: &str) {
        if !self.is_real() {
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let probe = self.pod(
            "admission-probe",
            json!({}),
            vec![self.container("main", Load::Idle, json!({}))],
        );
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        common::wait_for(
            &format!("namespace {ns} admitting pods"),
            Duration::from_secs(60),
            async || pods.create(&dry_run, &probe).await.ok().map(|_| ()),
        )
        .await;
    }

    /// Waits until the pod runs; returns it.
    pub async fn wait_running(&self, ns: &str, name: &str) -> Pod {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        common::wait_for(&format!("pod {ns}/{name} Running"), POD_START, async || {
            let pod = pods.get(name).await.ok()?;
            (pod.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(pod)
        })
        .await
    }
}

/// How long a pod may take to start (a real kubelet pulls nothing: images are local).
pub const POD_START: Duration = Duration::from_secs(120);

/// What a workload container does.
#[derive(Debug, Clone, Copy)]
pub enum Load {
    /// Sleeps.
    Idle,
    /// Burns one CPU core.
    BurnOneCore,
}

/// A directory named `name` at most `depth` levels below `base`.
pub fn find_dir(base: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    let candidate = base.join(name);
    if candidate.is_dir() {
        return Some(candidate);
    }
    if depth == 0 {
        return None;
    }
    std::fs::read_dir(base)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .find_map(|e| find_dir(&e.path(), name, depth - 1))
}

/// Undoes what a scenario changed in the cluster, also when it fails: deletes its namespace
/// (and with it every namespaced object) and cluster-scoped objects, and restores the
/// `slo-controller-config` keys it overrode.
pub struct Cleanup {
    client: kube::Client,
    /// The scenario's namespace.
    pub namespace: Option<String>,
    /// ClusterColocationProfiles created.
    pub profiles: Vec<String>,
    /// `slo-controller-config` keys overridden, with their previous values.
    config_keys: Vec<(String, Option<String>)>,
    /// A Deployment scaled, with its previous replica count.
    pub scaled: Option<(String, i32)>,
    /// The koordlet DaemonSet's container args before a scenario changed them.
    pub koordlet_args: Option<Vec<String>>,
}

impl Cleanup {
    /// Nothing to undo yet.
    pub fn new(client: kube::Client) -> Self {
        Cleanup {
            client,
            namespace: None,
            profiles: Vec::new(),
            config_keys: Vec::new(),
            scaled: None,
            koordlet_args: None,
        }
    }

    /// The scenario's namespace.
    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }

    /// Sets `slo-controller-config` key `key` to `value` (through the validating webhook),
    /// remembering the value to restore.
    pub async fn set_config(&mut self, key: &str, value: &str) -> Result<(), kube::Error> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), DEFAULT_CONFIG_NAMESPACE);
        let current = api.get(DEFAULT_SLO_CONFIG_NAME).await?;
        let old = current.data.as_ref().and_then(|d| d.get(key)).cloned();
        api.patch(
            DEFAULT_SLO_CONFIG_NAME,
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {key: value}})),
        )
        .await?;
        if !self.config_keys.iter().any(|(k, _)| k == key) {
            self.config_keys.push((key.to_string(), old));
        }
        Ok(())
    }

    async fn undo(&mut self) {
        let client = self.client.clone();
        if !self.config_keys.is_empty() {
            let data: serde_json::Map<String, Value> = self
                .config_keys
                .drain(..)
                .map(|(k, v)| (k, v.map_or(Value::Null, Value::String)))
                .collect();
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), DEFAULT_CONFIG_NAMESPACE);
            if let Err(e) = api
                .patch(
                    DEFAULT_SLO_CONFIG_NAME,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"data": data})),
                )
                .await
            {
                eprintln!("cleanup: restoring {DEFAULT_SLO_CONFIG_NAME}: {e}");
            }
        }
        if let Some((name, replicas)) = self.scaled.take() {
            let api: Api<k8s_openapi::api::apps::v1::Deployment> =
                Api::namespaced(client.clone(), DEFAULT_CONFIG_NAMESPACE);
            let patch = json!({"spec": {"replicas": replicas}});
            if let Err(e) = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                eprintln!("cleanup: scaling {name} back to {replicas}: {e}");
            }
        }
        if let Some(args) = self.koordlet_args.take() {
            let api: Api<k8s_openapi::api::apps::v1::DaemonSet> =
                Api::namespaced(client.clone(), DEFAULT_CONFIG_NAMESPACE);
            let patch =
                json!({"spec": {"template": {"spec": {"containers": [{"name": "koordlet", "args": args}]}}}});
            if let Err(e) = api
                .patch("koordlet", &PatchParams::default(), &Patch::Strategic(&patch))
                .await
            {
                eprintln!("cleanup: restoring koordlet's args: {e}");
            }
        }
        let profiles: Api<koord_api::ClusterColocationProfile> = Api::all(client.clone());
        for name in self.profiles.drain(..) {
            let _ = profiles.delete(&name, &DeleteParams::default()).await;
        }
        if let Some(ns) = self.namespace.take() {
            let _ = Api::<Namespace>::all(client)
                .delete(&ns, &DeleteParams::default())
                .await;
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        tokio::task::block_in_place(|| handle.block_on(self.undo()));
    }
}

/// The command that restarts one of the real cluster's processes (`scripts/real-cluster.sh
/// restart`; `scripts/real-cluster.sh test` sets it), or why there is none.
pub fn restart_command() -> Result<String, String> {
    match std::env::var("KOORD_E2E_RESTART") {
        Ok(command) if !command.trim().is_empty() => Ok(command),
        _ => Err("KOORD_E2E_RESTART names no command (scripts/real-cluster.sh test sets it)".into()),
    }
}

/// Stops `component` (etcd, kube-apiserver, kubelet, containerd) of the real cluster, keeps it
/// down `down`, starts it again and waits until it serves; returns how long that took. Blocks:
/// run it on a blocking thread.
pub fn restart_component(component: &str, down: Duration) -> Result<Duration, String> {
    let command = restart_command()?;
    let started = std::time::Instant::now();
    let status = std::process::Command::new("sh")
        .args(["-c", &format!("{command} {component} {}", down.as_secs())])
        .status()
        .map_err(|e| format!("{command}: {e}"))?;
    if !status.success() {
        return Err(format!("{command} {component}: {status}"));
    }
    Ok(started.elapsed())
}
