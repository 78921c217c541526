//! Well-known labels, annotations and resource names, spelled exactly as upstream Koordinator
//! spells them on the wire.

/// Pod label holding the Koordinator QoS class (`LSE`, `LSR`, `LS`, `BE`, `SYSTEM`).
pub const LABEL_QOS_CLASS: &str = "koordinator.sh/qosClass";
/// Pod label naming a priority class; wins over `spec.priority`.
pub const LABEL_PRIORITY_CLASS: &str = "koordinator.sh/priority-class";
/// Pod label holding the Koordinator sub-priority (an int32 as a string).
pub const LABEL_KOORDINATOR_PRIORITY: &str = "koordinator.sh/priority";
/// Pod label opting a pod of any QoS class into the node-level evictions (`MemoryEvict`):
/// `"true"`.
pub const LABEL_EVICTION_ENABLED: &str = "koordinator.sh/eviction-enabled";
/// Pod annotation ordering opted-in pods for the node-level evictions (an integer; lower is
/// evicted first; absent: 0).
pub const ANNOTATION_EVICTION_PRIORITY: &str = "koordinator.sh/eviction-priority";

/// Batch CPU, in integer milli-cores.
pub const RESOURCE_BATCH_CPU: &str = "kubernetes.io/batch-cpu";
/// Batch memory, in bytes.
pub const RESOURCE_BATCH_MEMORY: &str = "kubernetes.io/batch-memory";
/// Mid CPU, in integer milli-cores.
pub const RESOURCE_MID_CPU: &str = "kubernetes.io/mid-cpu";
/// Mid memory, in bytes.
pub const RESOURCE_MID_MEMORY: &str = "kubernetes.io/mid-memory";
/// Deprecated spelling of [`RESOURCE_BATCH_CPU`], still read.
pub const DEPRECATED_RESOURCE_BATCH_CPU: &str = "koordinator.sh/batch-cpu";
/// Deprecated spelling of [`RESOURCE_BATCH_MEMORY`], still read.
pub const DEPRECATED_RESOURCE_BATCH_MEMORY: &str = "koordinator.sh/batch-memory";

/// Pod annotation: JSON of each container's batch requests/limits, written by the webhook.
pub const ANNOTATION_EXTENDED_RESOURCE_SPEC: &str = "node.koordinator.sh/extended-resource-spec";
/// Pod annotation: NUMA allocation status (`cpuset`, `numaNodeResources`).
pub const ANNOTATION_RESOURCE_STATUS: &str = "scheduling.koordinator.sh/resource-status";
/// Pod annotation: per-pod CPU burst config (a JSON CpuBurstConfig).
pub const ANNOTATION_CPU_BURST: &str = "koordinator.sh/cpuBurst";
/// Pod annotation: per-pod CPU QoS.
pub const ANNOTATION_CPU_QOS: &str = "koordinator.sh/cpuQOS";
/// Pod annotation: per-pod memory QoS.
pub const ANNOTATION_MEMORY_QOS: &str = "koordinator.sh/memoryQOS";
/// Pod annotation: per-pod block I/O QoS.
pub const ANNOTATION_BLKIO_QOS: &str = "koordinator.sh/blkioQOS";
/// Pod label opting a pod into mutation on UPDATE.
pub const LABEL_POD_MUTATING_UPDATE: &str = "pod.koordinator.sh/mutating-update";

/// Node annotation: reserved resources and CPUs (`{"resources":{..},"reservedCPUs":"0-5"}`).
pub const ANNOTATION_NODE_RESERVATION: &str = "node.koordinator.sh/reservation";
/// Node annotation: a JSON ColocationStrategy overriding the ConfigMap for this node.
pub const ANNOTATION_NODE_COLOCATION_STRATEGY: &str = "node.koordinator.sh/colocation-strategy";
/// Node label: CPU reclaim ratio (float, e.g. `0.65`) overriding `cpuReclaimThresholdPercent`.
pub const LABEL_CPU_RECLAIM_RATIO: &str = "node.koordinator.sh/cpu-reclaim-ratio";
/// Node label: memory reclaim ratio overriding `memoryReclaimThresholdPercent`.
pub const LABEL_MEMORY_RECLAIM_RATIO: &str = "node.koordinator.sh/memory-reclaim-ratio";
/// Node label: mid static CPU reserved ratio.
pub const LABEL_MID_STATIC_CPU_RESERVED_RATIO: &str = "node.koordinator.sh/mid-static-cpu-reserved-ratio";
/// Node label: mid static memory reserved ratio.
pub const LABEL_MID_STATIC_MEMORY_RESERVED_RATIO: &str =
    "node.koordinator.sh/mid-static-memory-reserved-ratio";
/// Node annotation: batch allocatable before third-party allocations were subtracted.
pub const ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE: &str = "node.koordinator.sh/originExtendedAllocatable";
/// Node annotation: resources held by schedulers outside Kubernetes (e.g. YARN).
pub const ANNOTATION_THIRD_PARTY_ALLOCATIONS: &str = "node.koordinator.sh/thirdPartyAllocations";
/// Node annotation: network bandwidth (a quantity) overriding `totalNetworkBandwidth`.
pub const ANNOTATION_NETWORK_BANDWIDTH: &str = "node.koordinator.sh/network-bandwidth";
/// Node annotation: CPU normalization ratio (string, 2 decimals).
pub const ANNOTATION_CPU_NORMALIZATION_RATIO: &str = "node.koordinator.sh/cpu-normalization-ratio";
/// NodeResourceTopology annotation: the node's CPU model, hyper-threading and turbo (JSON).
pub const ANNOTATION_CPU_BASIC_INFO: &str = "node.koordinator.sh/cpu-basic-info";
/// Node label: CPU normalization switch.
pub const LABEL_CPU_NORMALIZATION_ENABLED: &str = "node.koordinator.sh/cpu-normalization-enabled";
/// Node annotation: resource amplification ratios.
pub const ANNOTATION_RESOURCE_AMPLIFICATION_RATIO: &str = "node.koordinator.sh/resource-amplification-ratio";
/// Node annotation: allocatable before amplification.
pub const ANNOTATION_RAW_ALLOCATABLE: &str = "node.koordinator.sh/raw-allocatable";

/// ClusterColocationProfile annotation: do not rewrite pod resources to batch/mid resources.
pub const ANNOTATION_SKIP_UPDATE_RESOURCES: &str = "config.koordinator.sh/skip-update-resources";
/// ClusterColocationProfile label: the profile is re-applied by a controller.
pub const LABEL_CONTROLLER_MANAGED: &str = "config.koordinator.sh/controller-managed";

/// Namespace that holds the Koordinator configuration by default.
pub const DEFAULT_CONFIG_NAMESPACE: &str = "koordinator-system";
/// Name of the SLO ConfigMap by default.
pub const DEFAULT_SLO_CONFIG_NAME: &str = "slo-controller-config";
/// Label that lets the ConfigMap validating webhook select the SLO ConfigMap.
pub const LABEL_CONFIGMAP_TYPE: &str = "koordinator.sh/configmap-type";

/// ConfigMap key: colocation (batch resource) strategy, flat with `nodeConfigs`.
pub const KEY_COLOCATION_CONFIG: &str = "colocation-config";
/// ConfigMap key: BE suppress / eviction thresholds.
pub const KEY_RESOURCE_THRESHOLD_CONFIG: &str = "resource-threshold-config";
/// ConfigMap key: per-class cgroup QoS.
pub const KEY_RESOURCE_QOS_CONFIG: &str = "resource-qos-config";
/// ConfigMap key: CPU burst, with `podStrategies`.
pub const KEY_CPU_BURST_CONFIG: &str = "cpu-burst-config";
/// ConfigMap key: node sysctls.
pub const KEY_SYSTEM_CONFIG: &str = "system-config";
/// ConfigMap key: host applications.
pub const KEY_HOST_APPLICATION_CONFIG: &str = "host-application-config";
/// ConfigMap key: CPU normalization.
pub const KEY_CPU_NORMALIZATION_CONFIG: &str = "cpu-normalization-config";
/// ConfigMap key: resource amplification.
pub const KEY_RESOURCE_AMPLIFICATION_CONFIG: &str = "resource-amplification-config";
