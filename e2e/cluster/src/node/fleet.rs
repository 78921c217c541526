//! The simulated nodes as a whole: registration, the minimal scheduler, the per-node kubelet
//! loop (start, report, stop, finish deletion), heartbeats, and teardown.
//!
//! Everything goes through a `kube::Client`, so the fleet runs against the embedded API server
//! or any other. One loop serves all nodes: each tick lists pods once, binds pending ones, then
//! reconciles every node against the list.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use super::cgroup::{CgroupError, CgroupMode, CgroupTree, NodeCgroups};
use super::fakefs::FakeAccounting;
use super::objects::{
    NodeSpec, failed_start_status, heartbeat, node_object, node_status, running_status, timestamp,
};
use super::plan::{node_room, pending, plan_node, schedule};
use super::pods_endpoint::{PodsView, serve};
use super::runtime::{RunningPod, start_pod, write_node_level, write_qos_levels};

/// How the fleet behaves; [`FleetConfig::default`] suits tests and the playground.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// How often pods are listed, bound, started and stopped.
    pub tick: Duration,
    /// How often each node's Ready condition is refreshed.
    pub heartbeat: Duration,
    /// Upper bound for the memory one container allocates, whatever it asks for.
    pub max_container_memory: u64,
    /// Pods with these `schedulerName`s (none means `default-scheduler`) are bound by the fleet.
    /// Default: `default-scheduler` only, so a pod for a scheduler that is not there (e.g.
    /// `koord-scheduler`) stays Pending, as on a real cluster; add a name to act as that
    /// scheduler too.
    pub scheduler_names: Vec<String>,
    /// Schedulers backed by an extender: their pods are placed by filter and prioritize calls
    /// to it, as kube-scheduler does with the chart's koord-scheduler profile.
    pub extenders: Vec<super::extender::SchedulerExtender>,
    /// Use the fake cgroupfs even where real cgroups are writable.
    pub force_fake_cgroups: bool,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            tick: Duration::from_millis(250),
            heartbeat: Duration::from_secs(10),
            max_container_memory: 1 << 30,
            scheduler_names: vec!["default-scheduler".into()],
            extenders: Vec::new(),
            force_fake_cgroups: false,
        }
    }
}

/// Fleet failures.
#[derive(Debug, Error)]
pub enum NodeError {
    /// The API server refused or failed a request.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Cgroups could not be created.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The `/pods` endpoint could not listen.
    #[error("kubelet endpoint: {0}")]
    Endpoint(std::io::Error),
    /// A built object did not convert (a bug in the node object builders).
    #[error("node object: {0}")]
    Object(#[from] serde_json::Error),
    /// Two nodes with one name.
    #[error("duplicate node name {0}")]
    DuplicateNode(String),
}

/// Where koordlet finds one node.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Node name (`NODE_NAME` for koordlet).
    pub name: String,
    /// `--cgroup-root-dir` for koordlet.
    pub cgroup_root: PathBuf,
    /// `--proc-root-dir` for koordlet (the host's `/proc`: container processes are real).
    pub proc_root: PathBuf,
    /// The kubelet `/pods` endpoint: `http://127.0.0.1:<port>/pods/`.
    pub pods_url: String,
    /// The port of that endpoint, also in the Node's `daemonEndpoints.kubeletEndpoint.Port`.
    pub kubelet_port: u16,
}

/// Running simulated nodes. Dropping it (also during a panic) kills every container process and
/// removes every cgroup; the Node objects stay in the API server.
pub struct SimulatedNodes {
    state: Arc<Mutex<FleetState>>,
    infos: Vec<NodeInfo>,
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
    tree: CgroupTree,
}

struct FleetState {
    nodes: Vec<SimNode>,
}

struct SimNode {
    spec: NodeSpec,
    index: usize,
    cgroups: NodeCgroups,
    view: PodsView,
    port: u16,
    running: BTreeMap<String, (RunningPod, Value)>,
    failed: BTreeSet<String>,
    fake: Option<FakeAccounting>,
    next_ip: u32,
}

fn lock(state: &Mutex<FleetState>) -> MutexGuard<'_, FleetState> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SimulatedNodes {
    /// Creates the cgroup tree, registers the nodes, starts their `/pods` endpoints and the
    /// loop. Nodes that already exist in the API server are taken over.
    pub async fn start(
        client: kube::Client,
        specs: Vec<NodeSpec>,
        config: FleetConfig,
    ) -> Result<Self, NodeError> {
        let tree = if config.force_fake_cgroups {
            CgroupTree::fake("forced by FleetConfig")?
        } else {
            CgroupTree::new()?
        };
        let cancel = CancellationToken::new();
        let mut nodes = Vec::new();
        let mut infos = Vec::new();
        let mut seen = BTreeSet::new();
        let mut run_shares = 0u64;
        for (index, spec) in specs.into_iter().enumerate() {
            if !seen.insert(spec.name.clone()) {
                return Err(NodeError::DuplicateNode(spec.name));
            }
            let cgroups = tree.node(&spec.name)?;
            let allocatable = spec.allocatable.as_ref().unwrap_or(&spec.capacity);
            run_shares += write_node_level(&cgroups, allocatable)?;
            write_qos_levels(&cgroups, [])?;
            let view: PodsView = Arc::new(RwLock::new(Vec::new()));
            let (address, _server) = serve(view.clone(), cancel.child_token())
                .await
                .map_err(NodeError::Endpoint)?;
            register(&client, &spec, address.port()).await?;
            infos.push(NodeInfo {
                name: spec.name.clone(),
                cgroup_root: cgroups.cgroup_root().to_path_buf(),
                proc_root: cgroups.proc_root().to_path_buf(),
                pods_url: format!("http://{address}/pods/"),
                kubelet_port: address.port(),
            });
            let fake = matches!(tree.mode(), CgroupMode::Fake { .. }).then(FakeAccounting::default);
            nodes.push(SimNode {
                spec,
                index,
                cgroups,
                view,
                port: address.port(),
                running: BTreeMap::new(),
                failed: BTreeSet::new(),
                fake,
                next_ip: 2,
            });
        }
        // The run directory weighs what the nodes' `kubepods` weigh together.
        tree.set_run_cpu_shares(run_shares)?;
        let state = Arc::new(Mutex::new(FleetState { nodes }));
        let task = tokio::spawn(run_loop(client, state.clone(), config, cancel.clone()));
        tracing::info!(nodes = infos.len(), mode = ?tree.mode(), "simulated nodes running");
        Ok(SimulatedNodes {
            state,
            infos,
            cancel,
            task: Some(task),
            tree,
        })
    }

    /// Every node's koordlet settings.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.infos
    }

    /// One node's koordlet settings.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.infos.iter().find(|n| n.name == name)
    }

    /// The cgroup tree (mode, run directories for leftover checks).
    pub fn cgroup_tree(&self) -> &CgroupTree {
        &self.tree
    }

    /// The container cgroup directories of a running pod in one controller (`cpuacct`, ...;
    /// ignored for v2), by pod UID; empty when the pod does not run here.
    pub fn container_dirs(&self, pod_uid: &str, controller: &str) -> Vec<PathBuf> {
        let state = lock(&self.state);
        state
            .nodes
            .iter()
            .filter_map(|node| node.running.get(pod_uid).map(|(pod, _)| (node, pod)))
            .flat_map(|(node, pod)| {
                pod.containers
                    .iter()
                    .filter_map(|c| node.cgroups.dir(controller, &c.dir).ok())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The pids of a running pod's container processes, by pod UID.
    pub fn pod_pids(&self, pod_uid: &str) -> Vec<u32> {
        let state = lock(&self.state);
        state
            .nodes
            .iter()
            .filter_map(|n| n.running.get(pod_uid))
            .flat_map(|(pod, _)| pod.containers.iter().flat_map(|c| c.processes.pids()))
            .collect()
    }

    /// Stops the loop, then kills all processes and removes all cgroups.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        // Drop does the rest.
    }
}

impl Drop for SimulatedNodes {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let nodes = std::mem::take(&mut lock(&self.state).nodes);
        drop(nodes); // kills processes, removes pod cgroups
        for dir in self.tree.run_dirs() {
            if let Err(err) = super::cgroup::remove_cgroup_tree(dir) {
                tracing::error!(%err, "cgroup teardown incomplete");
            }
        }
    }
}

async fn register(client: &kube::Client, spec: &NodeSpec, port: u16) -> Result<(), NodeError> {
    let api: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(node_object(spec))?;
    match api.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::info!(node = %spec.name, "node exists; taking it over")
        }
        Err(err) => return Err(err.into()),
    }
    let now = timestamp(jiff::Timestamp::now());
    api.patch_status(
        &spec.name,
        &PatchParams::default(),
        &Patch::Merge(node_status(spec, port, &now)),
    )
    .await?;
    Ok(())
}

async fn run_loop(
    client: kube::Client,
    state: Arc<Mutex<FleetState>>,
    config: FleetConfig,
    cancel: CancellationToken,
) {
    let mut last_heartbeat = Instant::now();
    let mut ticker = tokio::time::interval(config.tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if let Err(err) = tick(&client, &state, &config).await {
            tracing::warn!(%err, "simulated node tick failed; retrying");
        }
        if last_heartbeat.elapsed() >= config.heartbeat {
            last_heartbeat = Instant::now();
            let names: Vec<(String, NodeSpec, u16)> = lock(&state)
                .nodes
                .iter()
                .map(|n| (n.spec.name.clone(), n.spec.clone(), n.port))
                .collect();
            let api: Api<Node> = Api::all(client.clone());
            let now = timestamp(jiff::Timestamp::now());
            for (name, spec, port) in names {
                match api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(heartbeat(&now)))
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        tracing::warn!(node = %name, "node object disappeared; registering again");
                        if let Err(err) = register(&client, &spec, port).await {
                            tracing::warn!(node = %name, %err, "re-registration failed");
                        }
                    }
                    Err(err) => tracing::warn!(node = %name, %err, "heartbeat failed"),
                }
            }
        }
    }
}

/// Places each pod of an extender-backed scheduler: the nodes it fits on, then the extender's
/// filter and prioritize. A failed call leaves the pod Pending until the next tick (the chart's
/// `ignorable: false`).
async fn place_through_extenders(
    pending: &[&Pod],
    rooms: &mut [super::fit::NodeRoom],
    extenders: &[super::extender::SchedulerExtender],
) -> Vec<(String, String, String)> {
    let mut bindings = Vec::new();
    for pod in pending {
        let Some(spec) = &pod.spec else { continue };
        let scheduler = spec.scheduler_name.as_deref().unwrap_or("default-scheduler");
        let Some(extender) = extenders.iter().find(|e| e.scheduler_name == scheduler) else {
            continue;
        };
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        let Ok(requests) = super::fit::pod_requests(spec) else {
            tracing::debug!(pod = %key, "unreadable requests");
            continue;
        };
        let selector: BTreeMap<String, String> = spec
            .node_selector
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let candidates = super::fit::feasible_nodes(&requests, &selector, rooms);
        match extender.place(pod, &candidates).await {
            Ok(Some(node)) => {
                if let Some(room) = rooms.iter_mut().find(|r| r.name == node) {
                    super::fit::add_requests(&mut room.requested, &requests);
                }
                bindings.push((
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                    node,
                ));
            }
            Ok(None) => {
                tracing::debug!(pod = %key, candidates = candidates.len(), "no node passed the extender")
            }
            Err(err) => {
                tracing::warn!(pod = %key, %err, "scheduler extender call failed; the pod stays Pending")
            }
        }
    }
    bindings
}

/// A status to write: (`namespace/name`, uid, status patch).
type StatusWrite = (String, String, Value);

async fn tick(
    client: &kube::Client,
    state: &Arc<Mutex<FleetState>>,
    config: &FleetConfig,
) -> Result<(), NodeError> {
    let pods_api: Api<Pod> = Api::all(client.clone());
    let nodes_api: Api<Node> = Api::all(client.clone());
    let pods = pods_api.list(&ListParams::default()).await?.items;

    let names: Vec<String> = lock(state).nodes.iter().map(|n| n.spec.name.clone()).collect();
    let pending_pods = pending(&pods, &config.scheduler_names);
    let extender_names: Vec<String> = config
        .extenders
        .iter()
        .map(|e| e.scheduler_name.clone())
        .collect();
    let extender_pods = pending(&pods, &extender_names);
    if !pending_pods.is_empty() || !extender_pods.is_empty() {
        let mut rooms = Vec::new();
        for name in &names {
            if let Some(node) = nodes_api.get_opt(name).await? {
                rooms.push(node_room(&node, &pods));
            }
        }
        let (mut bindings, unschedulable) = schedule(&pending_pods, &mut rooms);
        bindings.extend(place_through_extenders(&extender_pods, &mut rooms, &config.extenders).await);
        for (uid, reason) in unschedulable {
            tracing::debug!(%uid, %reason, "pod does not fit any simulated node");
        }
        for (namespace, name, node) in bindings {
            if let Err(err) = bind(client, &namespace, &name, &node).await {
                tracing::warn!(pod = %format!("{namespace}/{name}"), %node, %err, "binding failed");
            }
        }
    }

    // Decide under the lock, act (spawn, kill, rmdir) on a blocking thread.
    let by_uid: BTreeMap<String, Pod> = pods
        .iter()
        .filter_map(|p| Some((p.metadata.uid.clone()?, p.clone())))
        .collect();
    let mut work = Vec::new();
    let mut finish = Vec::new();
    {
        let st = lock(state);
        for (index, node) in st.nodes.iter().enumerate() {
            let running: BTreeSet<String> = node.running.keys().cloned().collect();
            let plan = plan_node(&node.spec.name, &pods, &running, &node.failed);
            let start: Vec<Pod> = plan
                .start
                .iter()
                .filter_map(|uid| by_uid.get(uid).cloned())
                .collect();
            work.push((index, start, plan.stop));
            finish.extend(plan.finish_delete);
        }
    }
    let blocking_state = state.clone();
    let max_memory = config.max_container_memory;
    let writes = tokio::task::spawn_blocking(move || apply(&blocking_state, work, max_memory))
        .await
        .unwrap_or_else(|err| {
            tracing::error!(%err, "simulated node work panicked");
            Vec::new()
        });

    // Report: new statuses, plus running pods whose API status is not ours (lost write).
    let mut patched: BTreeMap<String, Pod> = BTreeMap::new();
    let mut all_writes = writes;
    {
        let st = lock(state);
        for node in &st.nodes {
            for (uid, (running, status)) in &node.running {
                let reported = by_uid
                    .get(uid)
                    .and_then(|p| p.status.as_ref())
                    .and_then(|s| s.phase.as_deref())
                    == Some("Running");
                if !reported
                    && by_uid.contains_key(uid)
                    && !all_writes.iter().any(|(k, _, _)| k == &running.key)
                {
                    all_writes.push((running.key.clone(), uid.clone(), status.clone()));
                }
            }
        }
    }
    for (key, uid, status) in all_writes {
        let (namespace, name) = key.split_once('/').unwrap_or(("", &key));
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            Ok(pod) => {
                patched.insert(uid, pod);
            }
            Err(err) => tracing::warn!(pod = %key, %err, "pod status update failed"),
        }
    }
    for (namespace, name, uid) in finish {
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let params = DeleteParams::default()
            .grace_period(0)
            .preconditions(Preconditions {
                uid: Some(uid),
                resource_version: None,
            });
        match api.delete(&name, &params).await {
            Ok(_) => tracing::info!(pod = %format!("{namespace}/{name}"), "pod stopped and deleted"),
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(err) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), %err, "finishing deletion failed")
            }
        }
    }

    // What each node's /pods endpoint shows: its bound, unfinished pods, freshest version.
    let st = lock(state);
    for node in &st.nodes {
        let view: Vec<Pod> = pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.spec.name.as_str()))
            .map(|p| {
                p.metadata
                    .uid
                    .as_ref()
                    .and_then(|uid| patched.get(uid))
                    .unwrap_or(p)
                    .clone()
            })
            .collect();
        *node.view.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = view;
    }
    Ok(())
}

/// Binds through `pods/binding`; a server without that subresource gets `spec.nodeName` patched.
async fn bind(client: &kube::Client, namespace: &str, name: &str, node: &str) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": { "name": name, "namespace": namespace },
        "target": { "apiVersion": "v1", "kind": "Node", "name": node },
    });
    match api
        .create_subresource::<_, Value>("binding", name, &PostParams::default(), &binding)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 405 => {
            tracing::debug!(pod = name, "no binding subresource; patching spec.nodeName");
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "nodeName": node } })),
            )
            .await?;
        }
        Err(err) => return Err(err),
    }
    tracing::info!(pod = %format!("{namespace}/{name}"), node, "pod bound");
    Ok(())
}

/// Starts and stops pods, samples fake usage. Returns the statuses to write.
fn apply(
    state: &Mutex<FleetState>,
    work: Vec<(usize, Vec<Pod>, Vec<String>)>,
    max_memory: u64,
) -> Vec<StatusWrite> {
    let mut st = lock(state);
    let mut writes = Vec::new();
    let now = timestamp(jiff::Timestamp::now());
    for (index, start, stop) in work {
        let Some(node) = st.nodes.get_mut(index) else {
            continue;
        };
        let changed = !start.is_empty() || !stop.is_empty();
        for uid in stop {
            if let Some((pod, _)) = node.running.remove(&uid) {
                tracing::info!(pod = %pod.key, node = %node.spec.name, "stopping pod");
                let dir = pod.pod_dir.clone();
                pod.stop();
                if let Some(fake) = &mut node.fake {
                    fake.forget(&dir);
                }
            }
            node.failed.remove(&uid);
        }
        for pod in start {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            let key = format!(
                "{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or("")
            );
            match start_pod(&pod, &node.cgroups, max_memory) {
                Ok(running) => {
                    let ip = format!("10.88.{}.{}", node.index % 256, node.next_ip);
                    node.next_ip = if node.next_ip >= 254 { 2 } else { node.next_ip + 1 };
                    let started: Vec<_> = running.containers.iter().map(|c| c.started.clone()).collect();
                    let status = running_status(&started, &ip, running.qos.as_str(), &now);
                    tracing::info!(pod = %key, node = %node.spec.name, qos = running.qos.as_str(), "pod running");
                    writes.push((key, uid.clone(), status.clone()));
                    node.running.insert(uid, (running, status));
                }
                Err(err) => {
                    let message = err.to_string();
                    tracing::warn!(pod = %key, node = %node.spec.name, %message, "pod could not start");
                    let names: Vec<String> = pod
                        .spec
                        .iter()
                        .flat_map(|s| s.containers.iter().map(|c| c.name.clone()))
                        .collect();
                    writes.push((key, uid.clone(), failed_start_status(&names, &message, &now)));
                    node.failed.insert(uid);
                }
            }
        }
        if changed && let Err(err) = write_qos_levels(&node.cgroups, node.running.values().map(|(p, _)| p)) {
            tracing::warn!(node = %node.spec.name, %err, "QoS-level cgroup limits not written");
        }
        if let Some(fake) = &mut node.fake {
            let sample = node
                .running
                .values()
                .flat_map(|(pod, _)| {
                    pod.containers
                        .iter()
                        .map(|c| (c.dir.clone(), c.processes.usage()))
                })
                .collect();
            if let Err(err) = fake.write(node.cgroups.cgroup_root(), &sample) {
                tracing::warn!(node = %node.spec.name, %err, "fake cgroup usage not written");
            }
        }
    }
    writes
}
