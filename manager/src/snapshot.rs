//! From Kubernetes objects to the plain facts the batch formula reads.
//!
//! Every quantity is parsed exactly ([`koord_api::quantity`]); a value that does not parse is
//! an error naming the object and field, never a silent zero, so `calc` can point at the bad
//! line and the controller can report it instead of publishing a wrong number.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use koord_api::{
    NodeMetric, PriorityClass, QoSClass,
    config::{CalculatePolicy as ConfigPolicy, ColocationStrategy},
    names,
    nodemetric::ResourceMap,
    priority::priority_class_with_default,
    qos::qos_class_with_default,
    quantity::{ExactQuantity, RESOURCE_CPU, RESOURCE_MEMORY, ResourceList, amount_of},
    resource_status::parse_resource_status,
    resources::pod_cpu_memory_requests,
};
use serde::Deserialize;

use crate::batch::{
    Amounts, BatchStrategy, CalculatePolicy, HostApplicationUsage, NodeFacts, NumaPlacement, PodFacts,
    PodUsage, UsageReport,
};

/// A field of an object that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    /// JSON path of the field, e.g. `status.capacity.cpu`.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FieldError {
    fn new(field: impl Into<String>, reason: impl ToString) -> Self {
        FieldError {
            field: field.into(),
            reason: reason.to_string(),
        }
    }
}

/// CPU (milli-cores) and memory (bytes) of a ResourceList; absent entries are 0.
pub fn cpu_memory(list: Option<&ResourceList>, field: &str) -> Result<Amounts, FieldError> {
    let mut amounts = Amounts::ZERO;
    let Some(list) = list else { return Ok(amounts) };
    for (resource, slot) in [
        (RESOURCE_CPU, &mut amounts.cpu),
        (RESOURCE_MEMORY, &mut amounts.memory),
    ] {
        if let Some(quantity) = list.get(resource) {
            let path = format!("{field}.{resource}");
            let exact = ExactQuantity::from_k8s(quantity).map_err(|e| FieldError::new(&path, e))?;
            *slot = amount_of(resource, exact).map_err(|e| FieldError::new(&path, e))?;
        }
    }
    Ok(amounts)
}

/// The `node.koordinator.sh/reservation` annotation.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Reservation {
    #[serde(default)]
    resources: Option<ResourceList>,
    #[serde(default, rename = "reservedCPUs")]
    reserved_cpus: Option<String>,
}

/// The number of CPUs in a cpuset list such as `0-5,8,10-11`.
fn cpuset_size(list: &str) -> Result<i64, String> {
    let mut count = 0i64;
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parse = |s: &str| {
            s.trim()
                .parse::<i64>()
                .map_err(|_| format!("{part:?} is not a CPU number or range"))
        };
        let (low, high) = match part.split_once('-') {
            Some((low, high)) => (parse(low)?, parse(high)?),
            None => (parse(part)?, parse(part)?),
        };
        if low < 0 || high < low {
            return Err(format!("{part:?} is not a valid CPU range"));
        }
        count = count.saturating_add(high - low + 1);
    }
    Ok(count)
}

fn annotated_reservation(annotations: &BTreeMap<String, String>) -> Result<Amounts, FieldError> {
    let key = names::ANNOTATION_NODE_RESERVATION;
    let field = format!("metadata.annotations[{key}]");
    let Some(raw) = annotations.get(key) else {
        return Ok(Amounts::ZERO);
    };
    let reservation: Reservation = serde_json::from_str(raw).map_err(|e| FieldError::new(&field, e))?;
    let mut amounts = cpu_memory(reservation.resources.as_ref(), &format!("{field}.resources"))?;
    if let Some(cpus) = reservation
        .reserved_cpus
        .as_deref()
        .filter(|c| !c.trim().is_empty())
    {
        let count = cpuset_size(cpus).map_err(|e| FieldError::new(format!("{field}.reservedCPUs"), e))?;
        amounts.cpu = count.saturating_mul(1000);
    }
    Ok(amounts)
}

/// The `node.koordinator.sh/thirdPartyAllocations` annotation.
#[derive(Deserialize, Default)]
struct ThirdPartyAllocations {
    #[serde(default)]
    allocations: Vec<ThirdPartyAllocation>,
}

#[derive(Deserialize)]
struct ThirdPartyAllocation {
    #[serde(default)]
    priority: String,
    #[serde(default)]
    resources: Option<ResourceList>,
}

fn third_party_batch(annotations: &BTreeMap<String, String>) -> Result<Amounts, FieldError> {
    let key = names::ANNOTATION_THIRD_PARTY_ALLOCATIONS;
    let field = format!("metadata.annotations[{key}]");
    let Some(raw) = annotations.get(key) else {
        return Ok(Amounts::ZERO);
    };
    let parsed: ThirdPartyAllocations = serde_json::from_str(raw).map_err(|e| FieldError::new(&field, e))?;
    let mut total = Amounts::ZERO;
    for (index, allocation) in parsed.allocations.iter().enumerate() {
        if PriorityClass::from_name(&allocation.priority) != PriorityClass::Batch {
            continue;
        }
        let list = allocation
            .resources
            .as_ref()
            .map(koord_api::resources::with_current_batch_names);
        let path = format!("{field}.allocations[{index}].resources");
        // Third-party batch allocations are expressed in batch resources (or plain cpu/memory).
        let batch = Amounts::new(
            batch_amount(list.as_ref(), names::RESOURCE_BATCH_CPU, &path)?,
            batch_amount(list.as_ref(), names::RESOURCE_BATCH_MEMORY, &path)?,
        );
        let plain = cpu_memory(list.as_ref(), &path)?;
        total = total.plus(batch.max(plain));
    }
    Ok(total)
}

fn batch_amount(list: Option<&ResourceList>, resource: &str, field: &str) -> Result<i64, FieldError> {
    match list.and_then(|l| l.get(resource)) {
        None => Ok(0),
        Some(q) => {
            let path = format!("{field}.{resource}");
            let exact = ExactQuantity::from_k8s(q).map_err(|e| FieldError::new(&path, e))?;
            Ok(exact.value())
        }
    }
}

/// Node → the facts the formula reads.
pub fn node_facts(node: &Node) -> Result<NodeFacts, FieldError> {
    let status = node.status.as_ref();
    let empty = BTreeMap::new();
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
    Ok(NodeFacts {
        capacity: cpu_memory(status.and_then(|s| s.capacity.as_ref()), "status.capacity")?,
        allocatable: cpu_memory(status.and_then(|s| s.allocatable.as_ref()), "status.allocatable")?,
        annotated_reservation: annotated_reservation(annotations)?,
        third_party_batch: third_party_batch(annotations)?,
    })
}

/// Pod → the facts the formula reads.
pub fn pod_facts(pod: &Pod) -> Result<PodFacts, FieldError> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
    let request = pod_cpu_memory_requests(pod).map_err(|e| FieldError::new("spec", e))?;
    let priority = priority_class_with_default(pod);
    Ok(PodFacts {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        // An empty phase is what the API server stores for a just-created pod: Pending.
        active: matches!(phase, "Running" | "Pending" | ""),
        high_priority: !matches!(priority, PriorityClass::Batch | PriorityClass::Free),
        lse: qos_class_with_default(pod) == QoSClass::Lse,
        request: Amounts::new(request.cpu_milli, request.memory_bytes),
        mid: priority == PriorityClass::Mid,
        numa: numa_placement(pod),
    })
}

/// The NUMA nodes of the pod's `resource-status` annotation. An unreadable annotation does not
/// make the pod unreadable: the pod counts on every NUMA zone, and the reason is kept.
fn numa_placement(pod: &Pod) -> NumaPlacement {
    let Some(text) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_RESOURCE_STATUS))
    else {
        return NumaPlacement::Shared;
    };
    match parse_resource_status(text) {
        Ok(status) => NumaPlacement::from_numa_nodes(&status.numa_nodes),
        Err(error) => NumaPlacement::Unreadable(error.to_string()),
    }
}

fn usage_of(map: &ResourceMap, field: &str) -> Result<Amounts, FieldError> {
    cpu_memory(Some(&map.resources), field)
}

/// NodeMetric → what koordlet reported.
pub fn usage_report(metric: &NodeMetric) -> Result<UsageReport, FieldError> {
    let Some(status) = metric.status.as_ref() else {
        return Ok(UsageReport::default());
    };
    let update_time = status.update_time.as_ref().map(|time| time.0);
    let system_usage = match &status.node_metric {
        None => None,
        Some(info) => Some(usage_of(
            &info.system_usage,
            "status.nodeMetric.systemUsage.resources",
        )?),
    };
    let mut host_applications = Vec::new();
    for (index, app) in status.host_application_metric.iter().flatten().enumerate() {
        host_applications.push(HostApplicationUsage {
            name: app.name.clone(),
            above_batch: app.priority_class().is_higher_than(PriorityClass::Batch),
            above_mid: app.priority_class().is_higher_than(PriorityClass::Mid),
            usage: usage_of(
                &app.usage,
                &format!("status.hostApplicationMetric[{index}].usage.resources"),
            )?,
        });
    }
    let mut pods = Vec::new();
    for (index, pod) in status.pods_metric.iter().flatten().enumerate() {
        pods.push(PodUsage {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            high_priority: !matches!(pod.priority_class(), PriorityClass::Batch | PriorityClass::Free),
            usage: usage_of(
                &pod.pod_usage,
                &format!("status.podsMetric[{index}].podUsage.resources"),
            )?,
        });
    }
    let node_usage = match &status.node_metric {
        Some(info)
            if info.node_usage.resources.contains_key(RESOURCE_CPU)
                && info.node_usage.resources.contains_key(RESOURCE_MEMORY) =>
        {
            Some(usage_of(
                &info.node_usage,
                "status.nodeMetric.nodeUsage.resources",
            )?)
        }
        _ => None,
    };
    let prod_reclaimable = match &status.prod_reclaimable_metric {
        Some(metric) if !metric.resource.resources.is_empty() => Some(usage_of(
            &metric.resource,
            "status.prodReclaimableMetric.resource.resources",
        )?),
        _ => None,
    };
    Ok(UsageReport {
        update_time,
        system_usage,
        host_applications,
        pods,
        node_usage,
        prod_reclaimable,
    })
}

/// The node's effective colocation strategy → the numbers the formula reads.
///
/// `enable` is the node's own merged value: a node entry may enable colocation under a cluster
/// strategy that disables it (upstream ignores the node entry; see README, "Decisions").
pub fn batch_strategy(strategy: &ColocationStrategy) -> BatchStrategy {
    let defaults = BatchStrategy::default();
    let policy = |p: Option<ConfigPolicy>| match p {
        None | Some(ConfigPolicy::Usage) => CalculatePolicy::Usage,
        Some(ConfigPolicy::Request) => CalculatePolicy::Request,
        Some(ConfigPolicy::MaxUsageRequest) => CalculatePolicy::MaxUsageRequest,
    };
    BatchStrategy {
        enable: strategy.enable.unwrap_or(false),
        cpu_reclaim_percent: strategy
            .cpu_reclaim_threshold_percent
            .unwrap_or(defaults.cpu_reclaim_percent),
        memory_reclaim_percent: strategy
            .memory_reclaim_threshold_percent
            .unwrap_or(defaults.memory_reclaim_percent),
        cpu_policy: policy(strategy.cpu_calculate_policy),
        memory_policy: policy(strategy.memory_calculate_policy),
        degrade_time_minutes: strategy
            .degrade_time_minutes
            .unwrap_or(defaults.degrade_time_minutes),
        batch_cpu_threshold_percent: strategy.batch_cpu_threshold_percent,
        batch_memory_threshold_percent: strategy.batch_memory_threshold_percent,
        resource_diff_threshold: strategy
            .resource_diff_threshold
            .unwrap_or(defaults.resource_diff_threshold),
        update_time_threshold_seconds: strategy
            .update_time_threshold_seconds
            .unwrap_or(defaults.update_time_threshold_seconds),
    }
}

/// The batch entries a Node carries now, in `capacity` and `allocatable`.
pub fn published_batch(
    node: &Node,
) -> Result<(crate::batch::PublishedValues, crate::batch::PublishedValues), FieldError> {
    published(node, names::RESOURCE_BATCH_CPU, names::RESOURCE_BATCH_MEMORY)
}

/// The `kubernetes.io/mid-cpu` / `mid-memory` entries the Node carries now in `capacity` and
/// `allocatable`.
pub fn published_mid(
    node: &Node,
) -> Result<(crate::batch::PublishedValues, crate::batch::PublishedValues), FieldError> {
    published(node, names::RESOURCE_MID_CPU, names::RESOURCE_MID_MEMORY)
}

fn published(
    node: &Node,
    cpu: &str,
    memory: &str,
) -> Result<(crate::batch::PublishedValues, crate::batch::PublishedValues), FieldError> {
    let status = node.status.as_ref();
    let read =
        |list: Option<&ResourceList>, field: &str| -> Result<crate::batch::PublishedValues, FieldError> {
            let list = list.map(koord_api::resources::with_current_batch_names);
            let get = |resource: &str| -> Result<Option<i64>, FieldError> {
                match list.as_ref().and_then(|l| l.get(resource)) {
                    None => Ok(None),
                    Some(q) => {
                        let path = format!("{field}.{resource}");
                        let exact = ExactQuantity::from_k8s(q).map_err(|e| FieldError::new(&path, e))?;
                        Ok(Some(exact.value()))
                    }
                }
            };
            Ok(crate::batch::PublishedValues {
                cpu: get(cpu)?,
                memory: get(memory)?,
            })
        };
    Ok((
        read(status.and_then(|s| s.capacity.as_ref()), "status.capacity")?,
        read(status.and_then(|s| s.allocatable.as_ref()), "status.allocatable")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuset_sizes() {
        assert_eq!(cpuset_size("0-9"), Ok(10));
        assert_eq!(cpuset_size("0-5,8,10-11"), Ok(9));
        assert_eq!(cpuset_size(""), Ok(0));
        assert!(cpuset_size("5-2").is_err());
        assert!(cpuset_size("a").is_err());
    }

    #[test]
    fn reserved_cpus_replace_the_annotated_cpu() {
        let annotations = BTreeMap::from([(
            names::ANNOTATION_NODE_RESERVATION.to_owned(),
            r#"{"resources":{"cpu":"20","memory":"10Gi"},"reservedCPUs":"0-9"}"#.to_owned(),
        )]);
        assert_eq!(
            annotated_reservation(&annotations),
            Ok(Amounts::new(10_000, 10 << 30))
        );
    }

    #[test]
    fn bad_reservation_names_the_field() {
        let annotations = BTreeMap::from([(
            names::ANNOTATION_NODE_RESERVATION.to_owned(),
            r#"{"resources":{"cpu":"lots"}}"#.to_owned(),
        )]);
        let error = annotated_reservation(&annotations).unwrap_err();
        assert_eq!(
            error.field,
            "metadata.annotations[node.koordinator.sh/reservation].resources.cpu"
        );
    }

    #[test]
    fn numa_placement_from_resource_status() {
        let pod = |status: Option<&str>| {
            let mut pod = Pod::default();
            pod.metadata.annotations = status
                .map(|s| BTreeMap::from([(names::ANNOTATION_RESOURCE_STATUS.to_owned(), s.to_owned())]));
            pod_facts(&pod).unwrap().numa
        };
        assert_eq!(pod(None), NumaPlacement::Shared);
        assert_eq!(pod(Some(r#"{"cpuset": "0-3"}"#)), NumaPlacement::Shared);
        assert_eq!(
            pod(Some(
                r#"{"numaNodeResources": [{"node": 1}, {"node": 0}, {"node": 1}, {"node": -1}]}"#
            )),
            NumaPlacement::Nodes(vec![0, 1])
        );
        assert_eq!(
            pod(Some(r#"{"numaNodeResources": [{"node": -1}]}"#)),
            NumaPlacement::Shared
        );
        // An unreadable annotation does not make the pod unreadable.
        let NumaPlacement::Unreadable(reason) = pod(Some("{")) else {
            panic!("expected an unreadable placement")
        };
        assert!(
            reason.contains("scheduling.koordinator.sh/resource-status"),
            "{reason}"
        );
    }

    #[test]
    fn only_batch_third_party_allocations_count() {
        let annotations = BTreeMap::from([(
            names::ANNOTATION_THIRD_PARTY_ALLOCATIONS.to_owned(),
            r#"{"allocations":[
                {"name":"hadoop-yarn","priority":"koord-batch","resources":{"kubernetes.io/batch-cpu":"10000","kubernetes.io/batch-memory":"10Gi"}},
                {"name":"other","priority":"koord-prod","resources":{"cpu":"4"}}]}"#
                .to_owned(),
        )]);
        assert_eq!(
            third_party_batch(&annotations),
            Ok(Amounts::new(10_000, 10 << 30))
        );
    }
}
