//! Starting and stopping one pod on a simulated node: cgroups, then processes, then release;
//! in reverse on stop. Blocking (process spawn, rmdir retries): the node loop runs it on a
//! blocking thread.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::cgroup::{CgroupError, NodeCgroups};
use super::host_binary::host_command;
use super::limits;
use super::objects::{StartedContainer, new_container_id};
use super::process::{ContainerProcesses, ProcessError};
use super::qos::{KubeQos, container_cgroup_dir, pod_cgroup_dir, pod_qos};
use super::quantity::{QuantityError, parse_units};
use super::workload::{Workload, WorkloadError, container_workload};

/// Why a pod could not start; its text is the message of the pod's failed status.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The pod has no `metadata.uid`.
    #[error("pod has no uid")]
    NoUid,
    /// The pod's requests or limits do not parse.
    #[error("pod resources: {0}")]
    PodResources(#[source] QuantityError),
    /// A container's workload annotations or command do not parse.
    #[error("container {container}: {source}")]
    Workload {
        /// Container name.
        container: String,
        /// What is wrong.
        #[source]
        source: WorkloadError,
    },
    /// A container's requests or limits do not parse.
    #[error("container {container}: {source}")]
    ContainerResources {
        /// Container name.
        container: String,
        /// What is wrong.
        #[source]
        source: QuantityError,
    },
    /// A cgroup could not be created or a process moved into it.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The kernel refused the pod cgroup's limits.
    #[error("pod cgroup limits: {0}")]
    PodLimits(#[source] CgroupError),
    /// The kernel refused a container cgroup's limits.
    #[error("container {container} cgroup limits: {source}")]
    ContainerLimits {
        /// Container name.
        container: String,
        /// What the kernel said.
        #[source]
        source: CgroupError,
    },
    /// A worker process could not be started or released.
    #[error(transparent)]
    Process(#[from] ProcessError),
}

/// A pod whose containers run. Dropping it kills the processes and removes the pod's cgroups.
#[derive(Debug)]
pub struct RunningPod {
    /// `namespace/name`, for logs.
    pub key: String,
    /// The pod cgroup directory (relative).
    pub pod_dir: String,
    /// QoS class the cgroups were placed by.
    pub qos: KubeQos,
    /// The pod's summed cpu request (milli-CPU), which its QoS level's `cpu.shares` follow.
    pub cpu_request_milli: i128,
    /// Per container: its cgroup directory (relative), id and processes.
    pub containers: Vec<RunningContainer>,
    cgroups: NodeCgroups,
}

/// One running container.
#[derive(Debug)]
pub struct RunningContainer {
    /// What the status reports.
    pub started: StartedContainer,
    /// The container cgroup directory (relative).
    pub dir: String,
    /// Its workers.
    pub processes: ContainerProcesses,
}

impl RunningPod {
    /// Kills the processes and removes the cgroups now (also done on drop).
    pub fn stop(mut self) {
        self.teardown();
    }

    fn teardown(&mut self) {
        for container in &mut self.containers {
            container.processes.stop();
        }
        self.containers.clear();
        if let Err(err) = self.cgroups.remove(&self.pod_dir) {
            tracing::error!(pod = %self.key, %err, "could not remove pod cgroups");
        }
    }
}

impl Drop for RunningPod {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Creates the pod's cgroups and starts each container in its own. On any failure everything
/// already started is torn down and the error returned for the pod status.
pub fn start_pod(
    pod: &Pod,
    cgroups: &NodeCgroups,
    max_container_memory: u64,
) -> Result<RunningPod, StartError> {
    let uid = pod.metadata.uid.clone().ok_or(StartError::NoUid)?;
    let key = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    );
    let qos = pod_qos(pod);
    let pod_dir = pod_cgroup_dir(qos, &uid);
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let containers = &spec.containers;
    // Read every workload and limit before creating anything.
    let pod_limits = limits::pod_limits(&spec, qos).map_err(StartError::PodResources)?;
    let cpu_request_milli = limits::pod_cpu_request_milli(&spec).map_err(StartError::PodResources)?;
    let mut workloads = Vec::new();
    let mut container_limits = Vec::new();
    for container in containers {
        let workload =
            container_workload(&annotations, container).map_err(|source| StartError::Workload {
                container: container.name.clone(),
                source,
            })?;
        workloads.push(clamp_memory(workload, container, max_container_memory, &key));
        container_limits.push(limits::container_limits(container).map_err(|source| {
            StartError::ContainerResources {
                container: container.name.clone(),
                source,
            }
        })?);
    }
    cgroups.create(&pod_dir)?;
    let mut running = RunningPod {
        key,
        pod_dir,
        qos,
        cpu_request_milli,
        containers: Vec::new(),
        cgroups: cgroups.clone(),
    };
    // As the kubelet: the pod cgroup's limits before any container starts in it.
    cgroups
        .write_limits(&running.pod_dir, &pod_limits)
        .map_err(StartError::PodLimits)?;
    for ((container, workload), container_limits) in containers.iter().zip(workloads).zip(container_limits) {
        let container_id = new_container_id();
        let dir = container_cgroup_dir(qos, &uid, &container_id);
        cgroups.create(&dir)?;
        cgroups
            .write_limits(&dir, &container_limits)
            .map_err(|source| StartError::ContainerLimits {
                container: container.name.clone(),
                source,
            })?;
        let mut processes = match host_command(&annotations, container) {
            Some(command) => {
                tracing::info!(pod = %running.key, container = %container.name, program = %command.program.display(), "container runs a host program");
                ContainerProcesses::spawn_host(&command)?
            }
            None => ContainerProcesses::spawn(workload)?,
        };
        for pid in processes.pids() {
            cgroups.add_process(&dir, pid)?;
        }
        processes.release()?;
        tracing::debug!(pod = %running.key, container = %container.name, %container_id, ?workload, "container started");
        let started = StartedContainer {
            name: container.name.clone(),
            image: container.image.clone().unwrap_or_default(),
            container_id,
        };
        running.containers.push(RunningContainer {
            started,
            dir,
            processes,
        });
    }
    Ok(running)
}

/// What each worker process needs besides the memory it holds (the python interpreter), kept
/// free below a container memory limit so that the limit does not OOM-kill the worker.
pub const WORKER_OVERHEAD_BYTES: u64 = 24 << 20;

/// Memory is capped by the container's memory limit minus the workers' own footprint (so the
/// cgroup limit, written by the kubelet for `memory` and by koordlet for `batch-memory`, holds
/// without an OOM kill) and by the harness-wide cap that keeps a demo from exhausting the machine.
fn clamp_memory(mut workload: Workload, container: &Container, cap: u64, pod: &str) -> Workload {
    let limits: BTreeMap<String, _> = container
        .resources
        .as_ref()
        .and_then(|r| r.limits.clone())
        .unwrap_or_default();
    let limit = ["memory", "kubernetes.io/batch-memory", "kubernetes.io/mid-memory"]
        .iter()
        .filter_map(|name| limits.get(*name))
        .filter_map(|q| parse_units(&q.0).ok())
        .filter_map(|v| u64::try_from(v).ok())
        .min()
        .map(|limit| limit.saturating_sub(worker_count(&workload) * WORKER_OVERHEAD_BYTES));
    let allowed = limit.map_or(cap, |l| l.min(cap));
    if workload.memory_bytes > allowed {
        tracing::info!(pod, container = %container.name, wanted = workload.memory_bytes, allowed, "container memory clamped");
        workload.memory_bytes = allowed;
    }
    workload
}

fn worker_count(workload: &Workload) -> u64 {
    workload
        .cpu_milli
        .div_ceil(1000)
        .clamp(1, super::process::MAX_WORKERS)
}

/// Writes the QoS-level limits as the kubelet's QoS container manager keeps them:
/// `kubepods/besteffort` 2 shares, `kubepods/burstable` the shares of its pods' summed cpu
/// requests. Called whenever the node's pods change.
pub fn write_qos_levels<'a>(
    cgroups: &NodeCgroups,
    pods: impl IntoIterator<Item = &'a RunningPod>,
) -> Result<(), super::cgroup::CgroupError> {
    let burstable: i128 = pods
        .into_iter()
        .filter(|p| p.qos == KubeQos::Burstable)
        .map(|p| p.cpu_request_milli)
        .sum();
    cgroups.write_limits(
        KubeQos::Burstable.qos_dir(),
        &limits::burstable_level_limits(burstable),
    )?;
    cgroups.write_limits(KubeQos::BestEffort.qos_dir(), &limits::besteffort_level_limits())
}

/// Writes `kubepods`'s limits from the node's allocatable (capacity when none is given): cpu
/// shares and, where the amount reads, the memory limit. The node's own directory gets the same
/// shares, so that it weighs what `kubepods` weighs at the root of a real node. Returns the
/// shares.
pub fn write_node_level(
    cgroups: &NodeCgroups,
    allocatable: &BTreeMap<String, String>,
) -> Result<u64, super::cgroup::CgroupError> {
    let cpu = allocatable
        .get("cpu")
        .and_then(|q| super::quantity::parse_milli(q).ok())
        .unwrap_or(0);
    let memory = allocatable
        .get("memory")
        .and_then(|q| parse_units(q).ok())
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| *v > 0);
    let kubepods = limits::node_level_limits(cpu, memory);
    cgroups.write_limits("", &limits::CgroupLimits::shares_only(kubepods.cpu_shares))?;
    cgroups.write_limits(super::qos::KUBEPODS_DIR, &kubepods)?;
    Ok(kubepods.cpu_shares)
}
