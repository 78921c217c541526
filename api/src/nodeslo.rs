//! NodeSLO (`slo.koordinator.sh/v1alpha1`): the per-node service-level objectives that
//! koord-manager derives from the `slo-controller-config` ConfigMap and koordlet enforces.
//!
//! Every strategy field is optional on the wire, exactly as upstream, so that a partial
//! strategy in the ConfigMap can be overlaid on the defaults (see [`crate::config`]).
//! Field names and enum spellings are upstream's; Rust type names follow Rust casing.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::{
    api::resource::Quantity, apis::meta::v1::LabelSelector, util::intstr::IntOrString,
};
#[cfg(feature = "crd")]
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired QoS behaviour of one node; named exactly like the Node it belongs to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[cfg_attr(feature = "crd", derive(CustomResource))]
#[cfg_attr(
    feature = "crd",
    kube(
        group = "slo.koordinator.sh",
        version = "v1alpha1",
        derive = "PartialEq",
        kind = "NodeSLO",
        doc = "NodeSLO: the QoS strategies koordlet enforces on one node (named like the Node), derived by koord-manager from the slo-controller-config ConfigMap.",
        plural = "nodeslos",
        status = "NodeSLOStatus",
        printcolumn = r#"{"name":"Suppress","type":"string","jsonPath":".spec.resourceUsedThresholdWithBE.cpuSuppressPolicy","description":"BE CPU suppress policy"}"#,
        printcolumn = r#"{"name":"Burst","type":"string","jsonPath":".spec.cpuBurstStrategy.policy","description":"CPU burst policy"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeSLOSpec {
    /// Thresholds that protect LS pods from BE pods: CPU suppress, CPU and memory eviction.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "resourceUsedThresholdWithBE"
    )]
    pub resource_used_threshold_with_be: Option<ResourceThresholdStrategy>,
    /// cgroup-level QoS per QoS class (CPU identity, memory, block I/O, resctrl, network).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "resourceQOSStrategy"
    )]
    pub resource_qos_strategy: Option<ResourceQosStrategy>,
    /// CPU burst for LS pods, with optional pod-level strategies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_burst_strategy: Option<CpuBurstStrategy>,
    /// Node-level kernel settings (sysctls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_strategy: Option<SystemStrategy>,
    /// Third-party strategies, kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub extensions: Option<BTreeMap<String, serde_json::Value>>,
    /// Processes on the host outside Kubernetes whose usage counts like pods of their priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_applications: Option<Vec<HostApplicationSpec>>,
}

/// NodeSLO status: upstream defines none; kept for the status subresource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NodeSLOStatus {}

/// How BE CPU is suppressed when LS usage grows.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CpuSuppressPolicy {
    /// Shrink the CPU set BE pods may run on (whole cores first).
    #[serde(rename = "cpuset")]
    Cpuset,
    /// Lower the CFS quota of the besteffort cgroup.
    #[serde(rename = "cfsQuota")]
    CfsQuota,
}

/// Which BE CPU limit the satisfaction eviction compares against.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CpuEvictPolicy {
    /// The CPU BE pods can really use after suppression.
    #[serde(rename = "evictByRealLimit")]
    EvictByRealLimit,
    /// The node's batch allocatable.
    #[serde(rename = "evictByAllocatable")]
    EvictByAllocatable,
}

/// Thresholds for BE suppression and eviction (`resource-threshold-config`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceThresholdStrategy {
    /// Turns the threshold strategies on for this node. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Share of node CPU that LS + BE together may use before BE is suppressed (0-100). Default 65.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_suppress_threshold_percent: Option<i64>,
    /// Floor of the BE CPU budget, in percent of node CPU (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_suppress_min_percent: Option<i64>,
    /// `cpuset` (default) or `cfsQuota`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_suppress_policy: Option<CpuSuppressPolicy>,
    /// Node memory usage percent at which BE pods are evicted (0-100). Default 70.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub memory_evict_threshold_percent: Option<i64>,
    /// Memory eviction releases down to this percent; default threshold - 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub memory_evict_lower_percent: Option<i64>,
    /// BE memory usage, in percent of batch allocatable, that triggers eviction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub memory_allocatable_evict_threshold_percent: Option<i64>,
    /// Allocatable-based memory eviction releases down to this percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub memory_allocatable_evict_lower_percent: Option<i64>,
    /// Eviction stops once BE CPU satisfaction is back above this percent (0-100).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "cpuEvictBESatisfactionUpperPercent"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_evict_be_satisfaction_upper_percent: Option<i64>,
    /// BE pods are evicted when CPU satisfaction falls to this percent (0-100).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "cpuEvictBESatisfactionLowerPercent"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_evict_be_satisfaction_lower_percent: Option<i64>,
    /// BE usage of its real limit, in percent, required before evicting by satisfaction (0-100).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "cpuEvictBEUsageThresholdPercent"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_evict_be_usage_threshold_percent: Option<i64>,
    /// Window over which satisfaction and BE usage are averaged, in seconds (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cpu_evict_time_window_seconds: Option<i64>,
    /// Node CPU usage percent that triggers CPU eviction (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_evict_threshold_percent: Option<i64>,
    /// CPU eviction releases down to this node usage percent (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_evict_lower_percent: Option<i64>,
    /// BE CPU usage, in percent of batch allocatable, that triggers eviction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cpu_allocatable_evict_threshold_percent: Option<i64>,
    /// Allocatable-based CPU eviction releases down to this percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cpu_allocatable_evict_lower_percent: Option<i64>,
    /// `evictByRealLimit` (default) or `evictByAllocatable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_evict_policy: Option<CpuEvictPolicy>,
    /// The highest pod priority the node-level evictions (MemoryEvict) may evict; they need it set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_enabled_priority_threshold: Option<i32>,
    /// Only pods below this priority are evicted by the allocatable-based strategies (0-7999).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 7999))]
    pub allocatable_evict_priority_threshold: Option<i32>,
}

/// Which mechanism enforces the CPU QoS of a class.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CpuQosPolicy {
    /// Anolis group identity (`cpu.bvt.warp.ns`).
    #[serde(rename = "groupIdentity")]
    GroupIdentity,
    /// Linux core scheduling.
    #[serde(rename = "coreSched")]
    CoreSched,
}

/// Which mechanism enforces network QoS.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum NetQosPolicy {
    /// Linux traffic control.
    #[serde(rename = "tc")]
    Tc,
    /// Terway's QoS agent.
    #[serde(rename = "terway-qos")]
    TerwayQos,
}

/// Node-wide choices of QoS mechanism.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQosPolicies {
    /// `groupIdentity` (default) or `coreSched`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_policy: Option<CpuQosPolicy>,
    /// `tc` (default) or `terway-qos`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "netQOSPolicy")]
    pub net_qos_policy: Option<NetQosPolicy>,
}

/// cgroup QoS per QoS class (`resource-qos-config`). There is no LSE class: LSE follows LSR.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQosStrategy {
    /// Node-wide mechanism choices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<ResourceQosPolicies>,
    /// QoS of LSR (and LSE) pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lsr_class: Option<ResourceQos>,
    /// QoS of LS pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ls_class: Option<ResourceQos>,
    /// QoS of BE pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub be_class: Option<ResourceQos>,
    /// QoS of SYSTEM pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_class: Option<ResourceQos>,
    /// QoS of the cgroup root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_root: Option<ResourceQos>,
}

/// The QoS settings of one class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ResourceQos {
    /// CPU identity / idle scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "cpuQOS")]
    pub cpu_qos: Option<CpuQosCfg>,
    /// Memory protection and throttling.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "memoryQOS")]
    pub memory_qos: Option<MemoryQosCfg>,
    /// Block I/O limits.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "blkioQOS")]
    pub blkio_qos: Option<BlkioQosCfg>,
    /// Last-level cache and memory bandwidth partitioning.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "resctrlQOS")]
    pub resctrl_qos: Option<ResctrlQosCfg>,
    /// Network bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "networkQOS")]
    pub network_qos: Option<NetworkQosCfg>,
}

/// CPU QoS of a class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuQosCfg {
    /// Turns CPU QoS on for the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Group identity: -1 (BE), 0, 1, 2 (LS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1, max = 2))]
    pub group_identity: Option<i64>,
    /// `cpu.idle` (0 or 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub sched_idle: Option<i64>,
    /// Whether core scheduling expels other classes from the sibling thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_expeller: Option<bool>,
}

/// Memory QoS of a class (memcg protection, throttling, async reclaim).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryQosCfg {
    /// Turns memory QoS on for the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// `memory.min` in percent of the memory request (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub min_limit_percent: Option<i64>,
    /// `memory.low` in percent of the memory request (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub low_limit_percent: Option<i64>,
    /// `memory.high` in percent of the memory limit (0-100; 0 disables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub throttling_percent: Option<i64>,
    /// Async reclaim watermark, percent of `memory.high` (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub wmark_ratio: Option<i64>,
    /// Async reclaim scale, per mille (1-1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub wmark_scale_permill: Option<i64>,
    /// Global min watermark adjustment (-25..50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -25, max = 50))]
    pub wmark_min_adj: Option<i64>,
    /// Enables memcg priority-based OOM (0 or 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub priority_enable: Option<i64>,
    /// memcg OOM priority (0-12).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 12))]
    pub priority: Option<i64>,
    /// Kill the whole group on OOM (0 or 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub oom_kill_group: Option<i64>,
    /// Limits the class's page cache (kernels with the pagecache_limit feature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_cache_enable: Option<bool>,
    /// Page cache limit in percent of the memory limit (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub page_cache_limit_percent: Option<i64>,
    /// Page cache limit in bytes (0 = derive from the percent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub page_cache_limit_size: Option<i64>,
    /// Reclaim page cache synchronously when the limit is hit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_cache_reclaim_sync: Option<bool>,
}

/// Block I/O QoS of a class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlkioQosCfg {
    /// Turns block I/O QoS on for the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Per-device settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<BlockCfg>>,
}

/// I/O settings for one block device or volume group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockCfg {
    /// Device, volume group or pod volume name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `device`, `volumegroup` or `podvolume`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub block_type: Option<String>,
    /// The limits; kept as given (upstream's cgroup-v1/v2 fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::block_io_cfg")]
    pub io_cfg: Option<BTreeMap<String, serde_json::Value>>,
}

/// Cache and memory-bandwidth partition of a class (Intel RDT / AMD QoS).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResctrlQosCfg {
    /// Turns resctrl QoS on for the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Start of the LLC ways range, percent (0-100, below the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cat_range_start_percent: Option<i64>,
    /// End of the LLC ways range, percent (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cat_range_end_percent: Option<i64>,
    /// Memory bandwidth, percent (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub mba_percent: Option<i64>,
}

/// Network bandwidth of a class: an integer is a percent (0-100), a string a quantity (`50M`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkQosCfg {
    /// Turns network QoS on for the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Guaranteed ingress bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_request: Option<IntOrString>,
    /// Maximum ingress bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_limit: Option<IntOrString>,
    /// Guaranteed egress bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_request: Option<IntOrString>,
    /// Maximum egress bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_limit: Option<IntOrString>,
}

/// How CPU burst is applied.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CpuBurstPolicy {
    /// No burst (default).
    #[serde(rename = "none")]
    None,
    /// Kernel CFS burst only (`cpu.cfs_burst_us` / `cpu.max.burst`).
    #[serde(rename = "cpuBurstOnly")]
    CpuBurstOnly,
    /// Scale the CFS quota up while throttled, down when the node is busy.
    #[serde(rename = "cfsQuotaBurstOnly")]
    CfsQuotaBurstOnly,
    /// Both.
    #[serde(rename = "auto")]
    Auto,
}

/// Burst settings for a pod: what a pod annotation `koordinator.sh/cpuBurst` or a pod strategy holds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuBurstConfig {
    /// `none` (default), `cpuBurstOnly`, `cfsQuotaBurstOnly` or `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<CpuBurstPolicy>,
    /// Kernel burst in percent of the CPU limit (1-10000). Default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub cpu_burst_percent: Option<i64>,
    /// Upper bound of the scaled CFS quota, percent of the limit (>= 100). Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100))]
    pub cfs_quota_burst_percent: Option<i64>,
    /// How long the quota may stay scaled up, seconds; -1 = unlimited (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub cfs_quota_burst_period_seconds: Option<i64>,
}

/// CPU burst of a node (`cpu-burst-config`): the burst config plus the share-pool threshold,
/// and, beyond upstream, pod-level strategies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuBurstStrategy {
    /// `none` (default), `cpuBurstOnly`, `cfsQuotaBurstOnly` or `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<CpuBurstPolicy>,
    /// Kernel burst in percent of the CPU limit (1-10000). Default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub cpu_burst_percent: Option<i64>,
    /// Upper bound of the scaled CFS quota, percent of the limit (>= 100). Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100))]
    pub cfs_quota_burst_percent: Option<i64>,
    /// How long the quota may stay scaled up, seconds; -1 = unlimited (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub cfs_quota_burst_period_seconds: Option<i64>,
    /// Share-pool usage percent above which the node counts as overloaded (0-100). Default 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub share_pool_threshold_percent: Option<i64>,
    /// Pod-level strategies; the first that matches a pod decides its burst config.
    /// Not in upstream Koordinator (its PR #2557 was never merged); ignored by upstream koordlet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_strategies: Option<Vec<CpuBurstPodStrategy>>,
}

impl CpuBurstStrategy {
    /// The node-level burst config, without the share-pool threshold and pod strategies.
    pub fn config(&self) -> CpuBurstConfig {
        CpuBurstConfig {
            policy: self.policy,
            cpu_burst_percent: self.cpu_burst_percent,
            cfs_quota_burst_percent: self.cfs_quota_burst_percent,
            cfs_quota_burst_period_seconds: self.cfs_quota_burst_period_seconds,
        }
    }
}

/// A pod-level CPU burst strategy (seed 000): which pods it targets and the config they get.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuBurstPodStrategy {
    /// Only pods in this namespace; unset = any namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Only pods whose labels match; unset or `{}` = every pod (in the namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// true: this strategy beats the pod's `koordinator.sh/cpuBurst` annotation; false: the annotation wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_pod: Option<bool>,
    /// The burst config matching pods get, overlaid on the node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_burst_config: Option<CpuBurstConfig>,
}

/// Node kernel settings (`system-config`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SystemStrategy {
    /// `min_free_kbytes` = factor × total memory / 10000 (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_free_kbytes_factor: Option<i64>,
    /// `vm.watermark_scale_factor` (1-400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 400))]
    pub watermark_scale_factor: Option<i64>,
    /// Background memcg reaping (0 or 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub memcg_reap_back_ground: Option<i64>,
    /// Anolis `sched_group_identity_enabled` (0 or 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub sched_group_identity_enabled: Option<i64>,
    /// Anolis `sched_idle_saver_wmark`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched_idle_saver_wmark: Option<i64>,
    /// Scheduler features to switch (`/sys/kernel/debug/sched_features`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched_features: Option<BTreeMap<String, bool>>,
    /// Page cache limit switch (0 or 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub page_cache_limit_enabled: Option<i64>,
    /// Total network bandwidth of the node; `"0"` when unknown (always serialized, as upstream).
    #[serde(default = "zero_quantity")]
    #[schemars(schema_with = "crate::schema::required_quantity")]
    pub total_network_bandwidth: Quantity,
}

fn zero_quantity() -> Quantity {
    Quantity("0".to_owned())
}

/// Which cgroup a host application's path is relative to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CgroupBaseType {
    /// The cgroup root.
    CgroupRoot,
    /// `kubepods`.
    Kubepods,
    /// `kubepods/burstable`.
    KubepodsBurstable,
    /// `kubepods/besteffort`.
    KubepodsBesteffort,
}

/// Where a host application's cgroup lives.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CgroupPath {
    /// Base cgroup; default `CgroupRoot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<CgroupBaseType>,
    /// Parent directory under the base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_dir: Option<String>,
    /// Directory of the application under the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_path: Option<String>,
}

/// A process group on the host that is not a pod but whose usage counts like one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostApplicationSpec {
    /// Application name (unique on the node).
    pub name: String,
    /// Priority class name (`koord-prod`, `koord-mid`, `koord-batch`, `koord-free`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// QoS class (`LSE`, `LSR`, `LS`, `BE`, `SYSTEM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// Its cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_path: Option<CgroupPath>,
    /// Reserved by upstream; kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub strategy: Option<BTreeMap<String, serde_json::Value>>,
}
