//! Starting and stopping one pod on a simulated node: cgroups, then processes, then release;
//! in reverse on stop. Blocking (process spawn, rmdir retries): the node loop runs it on a
//! blocking thread.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::cgroup::NodeCgroups;
use super::objects::{StartedContainer, new_container_id};
use super::process::ContainerProcesses;
use super::qos::{KubeQos, container_cgroup_dir, pod_cgroup_dir, pod_qos};
use super::quantity::parse_units;
use super::workload::{Workload, container_workload};

/// A pod whose containers run. Dropping it kills the processes and removes the pod's cgroups.
#[derive(Debug)]
pub struct RunningPod {
    /// `namespace/name`, for logs.
    pub key: String,
    /// The pod cgroup directory (relative).
    pub pod_dir: String,
    /// QoS class the cgroups were placed by.
    pub qos: KubeQos,
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
/// already started is torn down and the error returned as text for the pod status.
pub fn start_pod(pod: &Pod, cgroups: &NodeCgroups, max_container_memory: u64) -> Result<RunningPod, String> {
    let uid = pod.metadata.uid.clone().ok_or("pod has no uid")?;
    let key = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    );
    let qos = pod_qos(pod).map_err(|e| format!("cannot compute QoS class: {e}"))?;
    let pod_dir = pod_cgroup_dir(qos, &uid);
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default();
    // Read every workload before creating anything.
    let mut workloads = Vec::new();
    for container in &containers {
        let workload = container_workload(&annotations, container)
            .map_err(|e| format!("container {}: {e}", container.name))?;
        workloads.push(clamp_memory(workload, container, max_container_memory, &key));
    }
    cgroups.create(&pod_dir).map_err(|e| e.to_string())?;
    let mut running = RunningPod {
        key,
        pod_dir,
        qos,
        containers: Vec::new(),
        cgroups: cgroups.clone(),
    };
    for (container, workload) in containers.iter().zip(workloads) {
        let container_id = new_container_id();
        let dir = container_cgroup_dir(qos, &uid, &container_id);
        cgroups.create(&dir).map_err(|e| e.to_string())?;
        let mut processes = ContainerProcesses::spawn(workload).map_err(|e| e.to_string())?;
        for pid in processes.pids() {
            cgroups.add_process(&dir, pid).map_err(|e| e.to_string())?;
        }
        processes.release().map_err(|e| e.to_string())?;
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

/// Memory is capped by the container's memory limit (what a real cgroup would allow before
/// OOM) and by the harness-wide cap that keeps a demo from exhausting the machine.
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
        .min();
    let allowed = limit.map_or(cap, |l| l.min(cap));
    if workload.memory_bytes > allowed {
        tracing::info!(pod, container = %container.name, wanted = workload.memory_bytes, allowed, "container memory clamped");
        workload.memory_bytes = allowed;
    }
    workload
}
