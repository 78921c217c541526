//! The plain data batch allocatable is computed from.
//!
//! These are not Kubernetes objects: the adapters in [`crate::snapshot`] boil a Node, its Pods,
//! its NodeMetric and the node's colocation strategy down to exactly the numbers and flags the
//! formula reads, so the formula is table-testable and the same for the controller and `calc`.

use jiff::Timestamp;

use super::Amounts;

/// The Node facts the formula reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFacts {
    /// `status.capacity` cpu/memory. The margin is taken from capacity, not allocatable.
    pub capacity: Amounts,
    /// `status.allocatable` cpu/memory; `capacity − allocatable` is what the kubelet reserves.
    pub allocatable: Amounts,
    /// `node.koordinator.sh/reservation`: its `resources`, with the CPU count of `reservedCPUs`
    /// replacing `resources.cpu` when set. Zero when the annotation is absent.
    pub annotated_reservation: Amounts,
    /// Σ of `node.koordinator.sh/thirdPartyAllocations` entries with priority `koord-batch`:
    /// batch capacity already handed to a scheduler outside Kubernetes (e.g. YARN).
    pub third_party_batch: Amounts,
}

impl NodeFacts {
    /// `max(capacity − allocatable, 0)`: what the kubelet reserves.
    pub fn kubelet_reserved(&self) -> Amounts {
        self.capacity.minus(self.allocatable).floor_zero()
    }

    /// The larger of the kubelet's and the annotated reservation, per resource.
    pub fn reserved(&self) -> Amounts {
        self.kubelet_reserved().max(self.annotated_reservation)
    }
}

/// One pod bound to the node, as far as the formula cares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodFacts {
    /// Namespace; with `name` it matches the pod's usage in the NodeMetric.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Phase Running or Pending: only those hold resources.
    pub active: bool,
    /// PriorityClassWithDefault is neither `koord-batch` nor `koord-free` (Prod, Mid and pods
    /// without a priority class all protect their resources from batch pods).
    pub high_priority: bool,
    /// QoS (with default) is LSE: its CPU is exclusive, so its CPU request counts, not its usage.
    pub lse: bool,
    /// Kubernetes effective request: Σ containers, max with each init container, plus overhead.
    pub request: Amounts,
    /// PriorityClassWithDefault is `koord-mid`: high priority for batch, but not prod for mid
    /// resources.
    pub mid: bool,
    /// The NUMA nodes the scheduler took the pod's request from (NUMA-level batch resources).
    pub numa: NumaPlacement,
}

/// Where the scheduler placed a pod among the node's NUMA nodes, from the pod annotation
/// `scheduling.koordinator.sh/resource-status` (`numaNodeResources`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NumaPlacement {
    /// No NUMA node named: the pod may run on any of them, so it counts on each equally.
    #[default]
    Shared,
    /// The NUMA node ids named (sorted, without duplicates or negative ids; never empty).
    Nodes(Vec<u32>),
    /// The annotation cannot be read: counted as [`NumaPlacement::Shared`]; the reason is kept
    /// for the zone explanation.
    Unreadable(String),
}

impl NumaPlacement {
    /// The placement the `numaNodeResources` node ids describe.
    pub fn from_numa_nodes(ids: &[i32]) -> Self {
        let mut nodes: Vec<u32> = ids.iter().filter_map(|&id| u32::try_from(id).ok()).collect();
        nodes.sort_unstable();
        nodes.dedup();
        if nodes.is_empty() {
            NumaPlacement::Shared
        } else {
            NumaPlacement::Nodes(nodes)
        }
    }
}

/// One zone of the node's NodeResourceTopology (a NUMA node, named `node-<id>`), as the
/// NUMA-level formula reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneFacts {
    /// Zone name; `node-<id>` names NUMA node `<id>`, which pods' placements refer to.
    pub name: String,
    /// The zone's `cpu` / `memory` allocatable (0 when the zone does not list one): the
    /// zone's "capacity" in the formula.
    pub allocatable: Amounts,
    /// The zone lists `cpu` or `memory` at all. NUMA-level batch resources are computed only
    /// when some zone does (koordlet has reported the zones).
    pub lists_cpu_or_memory: bool,
}

/// What koordlet last reported in the NodeMetric status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageReport {
    /// `status.updateTime`; absent means koordlet never reported.
    pub update_time: Option<Timestamp>,
    /// `status.nodeMetric.systemUsage`; `None` when `status.nodeMetric` itself is absent.
    pub system_usage: Option<Amounts>,
    /// `status.hostApplicationMetric`.
    pub host_applications: Vec<HostApplicationUsage>,
    /// `status.podsMetric`.
    pub pods: Vec<PodUsage>,
    /// `status.nodeMetric.nodeUsage` when it has both cpu and memory.
    pub node_usage: Option<Amounts>,
    /// `status.prodReclaimableMetric.resource` (koordlet's peak prediction of what prod pods
    /// request but will not use), when reported.
    pub prod_reclaimable: Option<Amounts>,
}

/// Usage of one process outside Kubernetes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostApplicationUsage {
    /// Name, for explanations.
    pub name: String,
    /// Its priority class is higher than `koord-batch` (Prod or Mid): its usage is system usage.
    pub above_batch: bool,
    /// Its priority class is higher than `koord-mid` (Prod): system usage for mid resources.
    pub above_mid: bool,
    /// Measured usage.
    pub usage: Amounts,
}

/// Usage of one pod as reported by koordlet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodUsage {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The reported `priority` is neither `koord-batch` nor `koord-free` (an empty one counts as
    /// high). Only used for pods that no longer appear in the pod list ("dangling" usage).
    pub high_priority: bool,
    /// Measured usage.
    pub usage: Amounts,
}

/// How one resource's batch allocatable is estimated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum CalculatePolicy {
    /// From what high-priority pods use: reclaims the most.
    #[default]
    Usage,
    /// From what high-priority pods request (memory only; CPU treats it as `usage`).
    Request,
    /// From max(usage, request) per pod: never hands out what an LS pod may still claim.
    MaxUsageRequest,
}

/// The numbers of the node's effective colocation strategy that the formula reads.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchStrategy {
    /// Colocation is on for this node.
    pub enable: bool,
    /// `cpuReclaimThresholdPercent`: margin = capacity × (100 − this) / 100.
    pub cpu_reclaim_percent: i64,
    /// `memoryReclaimThresholdPercent`.
    pub memory_reclaim_percent: i64,
    /// `cpuCalculatePolicy` (`request` acts as `usage` for CPU, as upstream).
    pub cpu_policy: CalculatePolicy,
    /// `memoryCalculatePolicy`.
    pub memory_policy: CalculatePolicy,
    /// `degradeTimeMinutes`: a NodeMetric older than this removes batch resources.
    pub degrade_time_minutes: i64,
    /// `batchCPUThresholdPercent`: cap of batch CPU as a share of capacity.
    pub batch_cpu_threshold_percent: Option<i64>,
    /// `batchMemoryThresholdPercent`.
    pub batch_memory_threshold_percent: Option<i64>,
    /// `resourceDiffThreshold`: the relative change that is worth a Node write.
    pub resource_diff_threshold: f64,
    /// `updateTimeThresholdSeconds`: after this, even a small change is written.
    pub update_time_threshold_seconds: i64,
}

impl Default for BatchStrategy {
    /// Upstream's `DefaultColocationStrategy` (colocation off).
    fn default() -> Self {
        BatchStrategy {
            enable: false,
            cpu_reclaim_percent: 60,
            memory_reclaim_percent: 65,
            cpu_policy: CalculatePolicy::Usage,
            memory_policy: CalculatePolicy::Usage,
            degrade_time_minutes: 15,
            batch_cpu_threshold_percent: None,
            batch_memory_threshold_percent: None,
            resource_diff_threshold: 0.1,
            update_time_threshold_seconds: 300,
        }
    }
}
