//! NodeMetric (`slo.koordinator.sh/v1alpha1`): the resource usage koordlet reports for its
//! node, its pods and its host applications, and the collection policy koord-manager sets.
//!
//! koord-manager reads the status to compute batch and mid resources; a stale `updateTime`
//! makes it withdraw them (degrade). Field names are upstream's; every status field is optional
//! on the wire, so a NodeMetric written by upstream koordlet parses here and the other way round.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
#[cfg(feature = "crd")]
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::priority::PriorityClass;
use crate::qos::QoSClass;
use crate::quantity::ResourceList;

/// Which memory figure counts as "used" on the node.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MemoryCollectPolicy {
    /// Used memory without any page cache (default).
    #[serde(rename = "usageWithoutPageCache")]
    UsageWithoutPageCache,
    /// Used memory plus the hot (recently active) page cache.
    #[serde(rename = "usageWithHotPageCache")]
    UsageWithHotPageCache,
    /// Used memory including all page cache.
    #[serde(rename = "usageWithPageCache")]
    UsageWithPageCache,
}

/// How koordlet collects and reports this node's metrics; written by koord-manager from the
/// `colocation-config` ConfigMap key.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[cfg_attr(feature = "crd", derive(CustomResource))]
#[cfg_attr(
    feature = "crd",
    kube(
        group = "slo.koordinator.sh",
        version = "v1alpha1",
        derive = "PartialEq",
        kind = "NodeMetric",
        doc = "NodeMetric: resource usage of one node (named like the Node), its pods and host applications, reported by koordlet.",
        plural = "nodemetrics",
        status = "NodeMetricStatus",
        printcolumn = r#"{"name":"Updated","type":"date","jsonPath":".status.updateTime","description":"Last time koordlet reported usage"}"#,
        printcolumn = r#"{"name":"CPU","type":"string","jsonPath":".status.nodeMetric.nodeUsage.resources.cpu","description":"Node CPU usage"}"#,
        printcolumn = r#"{"name":"Memory","type":"string","jsonPath":".status.nodeMetric.nodeUsage.resources.memory","description":"Node memory usage"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetricSpec {
    /// How koordlet collects and reports metrics for this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_collect_policy: Option<NodeMetricCollectPolicy>,
}

/// Collection and report settings for one node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetricCollectPolicy {
    /// Window, in seconds, over which usage is averaged for the report (koordlet uses at least 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_duration_seconds: Option<i64>,
    /// Seconds between two status reports (koordlet uses at least 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_interval_seconds: Option<i64>,
    /// Windows of the aggregated node usages (avg/p50/p90/p95/p99) in the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_aggregate_policy: Option<AggregatePolicy>,
    /// Which memory figure counts as used: `usageWithoutPageCache` (default),
    /// `usageWithHotPageCache` or `usageWithPageCache`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_memory_collect_policy: Option<MemoryCollectPolicy>,
}

/// Windows for aggregated usage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregatePolicy {
    /// Window lengths as Go durations (`5m`, `10m0s`, `30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durations: Option<Vec<String>>,
}

/// Observed usage, written by koordlet every report interval.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetricStatus {
    /// When koordlet last reported; koord-manager withdraws batch resources when this is older
    /// than `degradeTimeMinutes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_time: Option<Time>,
    /// Usage of the node as a whole, of the system (non-pod) part, and per NUMA node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_metric: Option<NodeMetricInfo>,
    /// Usage of each pod on the node, sorted by namespace and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_metric: Option<Vec<PodMetricInfo>>,
    /// Usage of host applications (processes outside Kubernetes declared in the NodeSLO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_application_metric: Option<Vec<HostApplicationMetricInfo>>,
    /// Predicted resources Prod pods requested but will not use; the base of mid resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prod_reclaimable_metric: Option<ReclaimableMetric>,
    /// Predicted peak usage of Prod pods, safety margin included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prod_peak_metric: Option<ReclaimableMetric>,
}

/// Node-level usage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetricInfo {
    /// Total usage of the node, averaged over the aggregate window.
    #[serde(default)]
    pub node_usage: ResourceMap,
    /// Node usage per configured window; a window with too few samples has empty usages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregated_node_usages: Option<Vec<AggregatedUsage>>,
    /// Usage of the OS and daemons: node usage minus pods minus host applications.
    #[serde(default)]
    pub system_usage: ResourceMap,
    /// System usage per configured window; deleted pods are excluded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregated_system_usages: Option<Vec<AggregatedUsage>>,
    /// Node and system usage per NUMA node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_usages: Option<Vec<NumaMetricInfo>>,
}

/// Usage of one NUMA node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NumaMetricInfo {
    /// The NUMA node's ID.
    #[serde(default, rename = "numaNodeID")]
    pub numa_node_id: i32,
    /// Total usage on this NUMA node.
    #[serde(default)]
    pub node_usage: ResourceMap,
    /// System (non-pod) usage on this NUMA node.
    #[serde(default)]
    pub system_usage: ResourceMap,
}

/// Resource usage: a ResourceList (`cpu` in cores, e.g. `138m`; `memory` in bytes) plus devices.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceMap {
    /// Usage per resource name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: ResourceList,
    /// Usage per device (GPU, RDMA, FPGA).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceInfo>,
}

/// Usage aggregated over one window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregatedUsage {
    /// Usage per statistic: `avg`, `p50`, `p90`, `p95`, `p99`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage: BTreeMap<String, ResourceMap>,
    /// The window, as a Go duration (`5m0s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
}

impl AggregatedUsage {
    /// The usage for one statistic (`"avg"`, `"p50"`, `"p90"`, `"p95"`, `"p99"`).
    pub fn get(&self, statistic: &str) -> Option<&ResourceMap> {
        self.usage.get(statistic)
    }
}

/// Usage of one pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMetricInfo {
    /// Pod name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Pod namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Usage of the pod, averaged over the aggregate window.
    #[serde(default)]
    pub pod_usage: ResourceMap,
    /// The pod's priority class (`koord-prod`, `koord-mid`, `koord-batch`, `koord-free` or empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// The pod's QoS class (`LSE`, `LSR`, `LS`, `BE`, `SYSTEM` or empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// Third-party extensions, kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub extensions: Option<BTreeMap<String, serde_json::Value>>,
}

impl PodMetricInfo {
    /// The reported priority class (None when absent or unknown).
    pub fn priority_class(&self) -> PriorityClass {
        PriorityClass::from_name(self.priority.as_deref().unwrap_or(""))
    }

    /// The reported QoS class (None when absent or unknown).
    pub fn qos_class(&self) -> QoSClass {
        QoSClass::from_name(self.qos.as_deref().unwrap_or(""))
    }
}

/// Usage of one host application.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostApplicationMetricInfo {
    /// Application name, as in the NodeSLO `hostApplications`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Usage of the application.
    #[serde(default)]
    pub usage: ResourceMap,
    /// Its priority class; usage of classes above koord-batch counts as system usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// Its QoS class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
}

impl HostApplicationMetricInfo {
    /// The reported priority class (None when absent or unknown).
    pub fn priority_class(&self) -> PriorityClass {
        PriorityClass::from_name(self.priority.as_deref().unwrap_or(""))
    }
}

/// A predicted amount of resources.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimableMetric {
    /// The predicted resources.
    #[serde(default)]
    pub resource: ResourceMap,
}

/// One device and what it holds or uses.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    /// Device UUID.
    #[serde(default, rename = "id", skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Minor number, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i32>,
    /// Physical module ID.
    #[serde(default, rename = "moduleID", skip_serializing_if = "Option::is_none")]
    pub module_id: Option<i32>,
    /// Device type (`gpu`, `rdma`, `fpga`, ...).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub device_type: Option<String>,
    /// Device properties for selection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Whether the device is healthy.
    #[serde(default)]
    pub health: bool,
    /// Resources of the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceList>,
    /// Where the device sits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<DeviceTopology>,
    /// Virtual function groups (SR-IOV).
    #[serde(default, rename = "vfGroups", skip_serializing_if = "Option::is_none")]
    pub vf_groups: Option<Vec<VirtualFunctionGroup>>,
}

/// Position of a device in the machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DeviceTopology {
    /// CPU socket ID.
    #[serde(default, rename = "socketID")]
    pub socket_id: i32,
    /// NUMA node ID, unique across sockets.
    #[serde(default, rename = "nodeID")]
    pub node_id: i32,
    /// PCIe switch ID, unique across NUMA nodes.
    #[serde(default, rename = "pcieID")]
    pub pcie_id: String,
    /// PCI bus ID (`domain:bus:device.function`).
    #[serde(default, rename = "busID", skip_serializing_if = "Option::is_none")]
    pub bus_id: Option<String>,
}

/// A group of SR-IOV virtual functions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct VirtualFunctionGroup {
    /// Properties of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// The virtual functions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vfs: Option<Vec<VirtualFunction>>,
}

/// One SR-IOV virtual function.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct VirtualFunction {
    /// Minor number of the virtual function.
    #[serde(default)]
    pub minor: i32,
    /// PCI bus ID of the virtual function.
    #[serde(default, rename = "busID", skip_serializing_if = "Option::is_none")]
    pub bus_id: Option<String>,
}
