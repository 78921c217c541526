//! Kubernetes objects → the plain facts [`crate::decide`] works on.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_api::names::{RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY};
use koord_api::nodemetric::NodeMetric;
use koord_api::priority::{PriorityClass, priority_class_raw};
use koord_api::qos::{QoSClass, qos_class_raw};
use koord_api::quantity::{RESOURCE_CPU, RESOURCE_MEMORY, ResourceList, amounts_from_list};
use koord_api::resources::{CpuMemory, pod_requests, requests_batch_resources, with_current_batch_names};

use crate::decide::{MetricFacts, NodeFacts, PodFacts, PodKind};

/// Upstream's estimate for a pod that requests no CPU (milli-cores).
pub const DEFAULT_CPU_ESTIMATE_MILLI: i64 = 250;
/// Upstream's estimate for a pod that requests no memory (bytes).
pub const DEFAULT_MEMORY_ESTIMATE_BYTES: i64 = 200 * 1024 * 1024;

/// Share of a request a pod is expected to use (upstream's `estimatedScalingFactors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalingFactors {
    /// CPU percent (upstream: 85).
    pub cpu: i64,
    /// Memory percent (upstream: 70).
    pub memory: i64,
}

impl Default for ScalingFactors {
    fn default() -> Self {
        ScalingFactors { cpu: 85, memory: 70 }
    }
}

/// True for the pods the batch rules apply to: they request batch resources, carry the BE QoS
/// label or a batch/free priority class.
pub fn is_batch_pod(pod: &Pod) -> bool {
    requests_batch_resources(pod)
        || qos_class_raw(pod) == QoSClass::Be
        || matches!(
            priority_class_raw(pod),
            PriorityClass::Batch | PriorityClass::Free
        )
}

fn is_daemonset_pod(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.kind == "DaemonSet" && owner.controller == Some(true))
}

/// The facts of a pod; a pod whose quantities do not parse counts as requesting nothing (the
/// API server validated it; the default estimates still apply).
pub fn pod_facts(pod: &Pod, factors: ScalingFactors) -> PodFacts {
    let batch = is_batch_pod(pod);
    let requests = pod_requests(pod).unwrap_or_default();
    let (cpu_name, memory_name) = if batch {
        (RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY)
    } else {
        (RESOURCE_CPU, RESOURCE_MEMORY)
    };
    let cpu = requests.get(cpu_name).copied().unwrap_or(0);
    let memory = requests.get(memory_name).copied().unwrap_or(0);
    let estimate = |amount: i64, factor: i64, default: i64| {
        if amount <= 0 {
            default
        } else {
            i64::try_from(i128::from(amount) * i128::from(factor) / 100).unwrap_or(i64::MAX)
        }
    };
    PodFacts {
        kind: if is_daemonset_pod(pod) {
            PodKind::DaemonSet
        } else if batch {
            PodKind::Batch
        } else {
            PodKind::LoadAware
        },
        batch_request: if batch {
            CpuMemory {
                cpu_milli: cpu,
                memory_bytes: memory,
            }
        } else {
            CpuMemory::default()
        },
        estimated_usage: CpuMemory {
            cpu_milli: estimate(cpu, factors.cpu, DEFAULT_CPU_ESTIMATE_MILLI),
            memory_bytes: estimate(memory, factors.memory, DEFAULT_MEMORY_ESTIMATE_BYTES),
        },
    }
}

fn cpu_memory(list: Option<&ResourceList>) -> (CpuMemory, CpuMemory) {
    let Some(list) = list else {
        return Default::default();
    };
    let amounts = amounts_from_list(&with_current_batch_names(list)).unwrap_or_default();
    (
        CpuMemory::from_amounts(&amounts),
        CpuMemory::batch_from_amounts(&amounts),
    )
}

/// The NodeMetric's state for placement.
pub fn metric_facts(metric: Option<&NodeMetric>) -> MetricFacts {
    let Some(metric) = metric else {
        return MetricFacts::Missing;
    };
    let Some(status) = metric.status.as_ref() else {
        return MetricFacts::NeverReported;
    };
    let Some(update_time) = status.update_time.as_ref().map(|time| time.0) else {
        return MetricFacts::NeverReported;
    };
    match status.node_metric.as_ref() {
        None => MetricFacts::NoNodeUsage { update_time },
        Some(info) => MetricFacts::Reported {
            update_time,
            usage: cpu_memory(Some(&info.node_usage.resources)).0,
        },
    }
}

/// What placement keeps of a Node: allocatable cpu/memory and batch, and its labels (for the
/// node strategies of colocation-config).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeEntry {
    /// `status.allocatable` cpu and memory.
    pub allocatable: CpuMemory,
    /// `status.allocatable` batch-cpu and batch-memory.
    pub batch_allocatable: CpuMemory,
    /// `metadata.labels`.
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Converts a Node once, when it arrives.
pub fn node_entry(node: &Node) -> NodeEntry {
    let (allocatable, batch_allocatable) =
        cpu_memory(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
    NodeEntry {
        allocatable,
        batch_allocatable,
        labels: node.metadata.labels.clone().unwrap_or_default(),
    }
}

/// A node's facts from its entry and what else is known about it.
pub fn node_facts(
    name: &str,
    node: &NodeEntry,
    metric: MetricFacts,
    batch_requested: CpuMemory,
    unreported_usage: CpuMemory,
    degrade_time_minutes: i64,
) -> NodeFacts {
    NodeFacts {
        name: name.to_owned(),
        allocatable: node.allocatable,
        batch_allocatable: node.batch_allocatable,
        batch_requested,
        metric,
        unreported_usage,
        degrade_time_minutes,
    }
}

/// When a pod's usage starts to show in its node's NodeMetric: it was bound (the PodScheduled
/// condition turned true) or, without that condition, created.
pub fn bound_at(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "True")
                .and_then(|c| c.last_transition_time.as_ref())
        })
        .or(pod.metadata.creation_timestamp.as_ref())
        .map(|time| time.0)
}
