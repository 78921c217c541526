//! What a pod requests, computed as Kubernetes computes it, and its batch resources read
//! through the well-known names.
//!
//! The manager's batch formula subtracts high-priority pod requests from the node, the webhook
//! checks that batch resources only go with BE pods, and koordlet turns batch requests and
//! limits into cgroup values. All three must count a pod the same way, so they share this.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};

use crate::names::{
    DEPRECATED_RESOURCE_BATCH_CPU, DEPRECATED_RESOURCE_BATCH_MEMORY, RESOURCE_BATCH_CPU,
    RESOURCE_BATCH_MEMORY,
};
use crate::quantity::{
    RESOURCE_CPU, RESOURCE_MEMORY, ResourceAmounts, ResourceError, ResourceList, amounts_from_list,
    max_amounts, sum_amounts,
};

/// Where in a pod a bad quantity or an overflowing sum was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodResourceError {
    /// In a container or init container.
    #[error("container {container}: {source}")]
    Container {
        /// The container's name.
        container: String,
        /// The bad entry.
        source: ResourceError,
    },
    /// In `spec.overhead`.
    #[error("spec.overhead: {0}")]
    Overhead(ResourceError),
    /// In pod-level `spec.resources`.
    #[error("spec.resources: {0}")]
    PodLevel(ResourceError),
    /// While adding up the containers.
    #[error("pod total: {0}")]
    Total(ResourceError),
}

/// CPU and memory of a pod or container, in the units every formula uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuMemory {
    /// Milli-cores.
    pub cpu_milli: i64,
    /// Bytes.
    pub memory_bytes: i64,
}

impl CpuMemory {
    /// Reads `cpu` and `memory` out of integer amounts (absent is 0).
    pub fn from_amounts(amounts: &ResourceAmounts) -> Self {
        CpuMemory {
            cpu_milli: amounts.get(RESOURCE_CPU).copied().unwrap_or(0),
            memory_bytes: amounts.get(RESOURCE_MEMORY).copied().unwrap_or(0),
        }
    }

    /// Reads `kubernetes.io/batch-cpu` (already milli-cores) and `kubernetes.io/batch-memory`
    /// (bytes) out of amounts whose deprecated names were already mapped (absent is 0).
    pub fn batch_from_amounts(amounts: &ResourceAmounts) -> Self {
        CpuMemory {
            cpu_milli: amounts.get(RESOURCE_BATCH_CPU).copied().unwrap_or(0),
            memory_bytes: amounts.get(RESOURCE_BATCH_MEMORY).copied().unwrap_or(0),
        }
    }
}

/// A ResourceList with the deprecated `koordinator.sh/batch-*` names mapped to
/// `kubernetes.io/batch-*`; when both spellings are present the current one wins.
pub fn with_current_batch_names(list: &ResourceList) -> ResourceList {
    let mut out = list.clone();
    for (deprecated, current) in [
        (DEPRECATED_RESOURCE_BATCH_CPU, RESOURCE_BATCH_CPU),
        (DEPRECATED_RESOURCE_BATCH_MEMORY, RESOURCE_BATCH_MEMORY),
    ] {
        if let Some(quantity) = out.remove(deprecated) {
            out.entry(current.to_owned()).or_insert(quantity);
        }
    }
    out
}

/// Integer amounts of one ResourceList, batch names normalised.
fn amounts(list: Option<&ResourceList>) -> Result<ResourceAmounts, ResourceError> {
    match list {
        Some(list) => amounts_from_list(&with_current_batch_names(list)),
        None => Ok(ResourceAmounts::new()),
    }
}

/// A container's requests and limits as integer amounts (batch names normalised).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerAmounts {
    /// `resources.requests`.
    pub requests: ResourceAmounts,
    /// `resources.limits`.
    pub limits: ResourceAmounts,
}

impl ContainerAmounts {
    /// The batch CPU request in milli-cores, if the container has one.
    pub fn batch_cpu_request(&self) -> Option<i64> {
        self.requests.get(RESOURCE_BATCH_CPU).copied()
    }

    /// The batch CPU limit in milli-cores, if the container has one.
    pub fn batch_cpu_limit(&self) -> Option<i64> {
        self.limits.get(RESOURCE_BATCH_CPU).copied()
    }

    /// The batch memory request in bytes, if the container has one.
    pub fn batch_memory_request(&self) -> Option<i64> {
        self.requests.get(RESOURCE_BATCH_MEMORY).copied()
    }

    /// The batch memory limit in bytes, if the container has one.
    pub fn batch_memory_limit(&self) -> Option<i64> {
        self.limits.get(RESOURCE_BATCH_MEMORY).copied()
    }
}

/// Requests and limits of a container.
pub fn container_amounts(container: &Container) -> Result<ContainerAmounts, PodResourceError> {
    let resources = container.resources.as_ref();
    let wrap = |source| PodResourceError::Container {
        container: container.name.clone(),
        source,
    };
    Ok(ContainerAmounts {
        requests: amounts(resources.and_then(|r| r.requests.as_ref())).map_err(wrap)?,
        limits: amounts(resources.and_then(|r| r.limits.as_ref())).map_err(wrap)?,
    })
}

fn requests_of(container: &Container) -> Result<ResourceAmounts, PodResourceError> {
    container_amounts(container).map(|amounts| amounts.requests)
}

/// Resources that pod-level `spec.resources` may set (and then override the containers' sum).
const POD_LEVEL_RESOURCES: [&str; 2] = [RESOURCE_CPU, RESOURCE_MEMORY];

/// The pod's effective requests for every resource, as Kubernetes' `PodRequests` computes them
/// (what the scheduler and the kubelet count):
/// - the sum over the regular containers;
/// - restartable init containers (sidecars, `restartPolicy: Always`) add to that sum;
/// - each ordinary init container runs alone with the sidecars started before it, so the
///   result is at least (its requests + those sidecars');
/// - pod-level `spec.resources.requests` for cpu/memory replace the container figure;
/// - `spec.overhead` is added last.
///
/// Units as [`ResourceAmounts`]: `cpu` in milli-cores, everything else in whole units;
/// deprecated batch names are read as the current ones.
pub fn pod_requests(pod: &Pod) -> Result<ResourceAmounts, PodResourceError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(ResourceAmounts::new());
    };
    let mut total = ResourceAmounts::new();
    for container in &spec.containers {
        total = sum_amounts(&total, &requests_of(container)?).map_err(PodResourceError::Total)?;
    }
    let mut sidecars = ResourceAmounts::new();
    let mut init_peak = ResourceAmounts::new();
    for container in spec.init_containers.iter().flatten() {
        let requests = requests_of(container)?;
        let running = if container.restart_policy.as_deref() == Some("Always") {
            total = sum_amounts(&total, &requests).map_err(PodResourceError::Total)?;
            sidecars = sum_amounts(&sidecars, &requests).map_err(PodResourceError::Total)?;
            sidecars.clone()
        } else {
            sum_amounts(&requests, &sidecars).map_err(PodResourceError::Total)?
        };
        init_peak = max_amounts(&init_peak, &running);
    }
    total = max_amounts(&total, &init_peak);
    if let Some(pod_level) = spec
        .resources
        .as_ref()
        .and_then(|r: &ResourceRequirements| r.requests.as_ref())
    {
        let pod_level = amounts(Some(pod_level)).map_err(PodResourceError::PodLevel)?;
        for resource in POD_LEVEL_RESOURCES {
            if let Some(&amount) = pod_level.get(resource) {
                total.insert(resource.to_owned(), amount);
            }
        }
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        let overhead = amounts(Some(overhead)).map_err(PodResourceError::Overhead)?;
        total = sum_amounts(&total, &overhead).map_err(PodResourceError::Total)?;
    }
    Ok(total)
}

/// The pod's CPU (milli-cores) and memory (bytes) requests as Kubernetes counts them.
pub fn pod_cpu_memory_requests(pod: &Pod) -> Result<CpuMemory, PodResourceError> {
    pod_requests(pod).map(|amounts| CpuMemory::from_amounts(&amounts))
}

/// The pod's batch CPU (milli-cores) and batch memory (bytes) requests, counted like
/// [`pod_requests`], reading `kubernetes.io/batch-*` or the deprecated `koordinator.sh/batch-*`.
pub fn pod_batch_requests(pod: &Pod) -> Result<CpuMemory, PodResourceError> {
    pod_requests(pod).map(|amounts| CpuMemory::batch_from_amounts(&amounts))
}

/// True when any container, init container or the overhead requests batch resources (under
/// either spelling): such a pod must be BE.
pub fn requests_batch_resources(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let has_batch = |list: Option<&ResourceList>| {
        list.is_some_and(|list| {
            [
                RESOURCE_BATCH_CPU,
                RESOURCE_BATCH_MEMORY,
                DEPRECATED_RESOURCE_BATCH_CPU,
                DEPRECATED_RESOURCE_BATCH_MEMORY,
            ]
            .iter()
            .any(|name| list.contains_key(*name))
        })
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| has_batch(c.resources.as_ref().and_then(|r| r.requests.as_ref())))
        || has_batch(spec.overhead.as_ref())
}

#[cfg(test)]
mod tests;
