//! NodeMetric status: what koord-manager reads to compute batch resources ([`topology`]: the
//! node's NodeResourceTopology, the CPU facts of CPU normalization).
//!
//! [`build_status`] is pure: it reads windows from the metric stores and returns the status
//! (time is an argument). [`publish`] is the edge: a server-side apply of `/status` as field
//! manager `koordlet`.
//!
//! - `nodeUsage` / `systemUsage` / `podsMetric[].podUsage`: averages over the aggregate window
//!   (`aggregateDurationSeconds`, at least 60 s). CPU as milli-cores (`int(cores × 1000)`,
//!   written `<n>m`), memory as bytes.
//! - `aggregatedNodeUsages` / `aggregatedSystemUsages`: for every configured duration d,
//!   avg/p50/p90/p95/p99 over `[now − d, now]`. When the data in the window spans less than
//!   half of d (cold start), the entry is emitted with empty usages, as upstream.
//! - Percentiles are nearest rank (see `metrics::store`): the value at 1-based rank
//!   `ceil(p × n)` of the sorted window; windows older than the fine ring are answered from
//!   one-minute summaries, so their percentiles are approximate within a minute's spread.
//! - `podsMetric`: pods of the snapshot with samples in the window, sorted by namespace/name,
//!   with their priority class and QoS class names.
//! - `hostApplicationMetric`: the NodeSLO's host applications with samples in the window, in
//!   the NodeSLO's order, averaged like pods, with the priority and QoS the NodeSLO gives them.
//!   `systemUsage` excludes them (node − pods − host applications, floored at 0).
//! - `nodeMetric.numaUsages`: per NUMA node (ascending ID), its `nodeUsage` (CPU and memory)
//!   and its `systemUsage` (memory only: see [`crate::metrics::collector`]) averaged over the
//!   aggregate window. Absent entries: a kernel without NUMA nodes in sysfs.
//! - `prodReclaimableMetric` and `prodPeakMetric`: the peak predictor's latest result
//!   ([`crate::prediction`]); while there is none the apply leaves them out, which removes
//!   them, so a stale prediction never outlives its models.

mod publish;
pub mod topology;
pub mod topology_zones;

pub use publish::{FIELD_MANAGER, PublishError, publish};

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use koord_api::NodeMetricStatus;
use koord_api::nodemetric::{
    AggregatedUsage, HostApplicationMetricInfo, MemoryCollectPolicy, NodeMetricInfo, NumaMetricInfo,
    PodMetricInfo, ReclaimableMetric, ResourceMap,
};
use koord_api::nodeslo::HostApplicationSpec;

use crate::metrics::{MetricKind, MetricStore, MetricTime, SeriesKey, WindowStats};
use crate::states::{NodeMetricSettings, PodMeta};

/// The statistics of an aggregated usage, in upstream's key spelling.
pub const STATISTICS: [&str; 5] = ["avg", "p50", "p90", "p95", "p99"];

/// The node memory series a memory collect policy reports.
pub fn node_memory_kind(policy: MemoryCollectPolicy) -> MetricKind {
    match policy {
        MemoryCollectPolicy::UsageWithoutPageCache => MetricKind::NodeMemoryUsage,
        MemoryCollectPolicy::UsageWithPageCache => MetricKind::NodeMemoryUsageWithPageCache,
        MemoryCollectPolicy::UsageWithHotPageCache => MetricKind::NodeMemoryUsageWithHotPageCache,
    }
}

/// The NUMA node memory series a memory collect policy reports (`None`: the hot page cache
/// policy, which has no NUMA figure, as it has no node one).
pub fn numa_memory_kind(policy: MemoryCollectPolicy) -> Option<MetricKind> {
    match policy {
        MemoryCollectPolicy::UsageWithoutPageCache => Some(MetricKind::NumaMemoryUsage),
        MemoryCollectPolicy::UsageWithPageCache => Some(MetricKind::NumaMemoryUsageWithPageCache),
        MemoryCollectPolicy::UsageWithHotPageCache => None,
    }
}

/// Everything the status is built from.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    /// Node-level series (node, NUMA nodes, system).
    pub node_store: &'a MetricStore,
    /// Pod, container and host application series.
    pub pod_store: &'a MetricStore,
    /// The snapshot's pods.
    pub pods: &'a [PodMeta],
    /// The NodeSLO's host applications.
    pub host_applications: &'a [HostApplicationSpec],
    /// NodeMetric settings.
    pub settings: &'a NodeMetricSettings,
    /// Now (the report's `updateTime`).
    pub now: MetricTime,
    /// The peak predictor's latest reclaimable result (`None`: no prediction; the field is
    /// cleared).
    pub prod_reclaimable: Option<&'a ReclaimableMetric>,
    /// The peak predictor's latest prod peak (`None`: no prediction; the field is cleared).
    pub prod_peak: Option<&'a ReclaimableMetric>,
}

fn cpu_quantity(cores: f64) -> Quantity {
    let milli = (cores.max(0.0) * 1000.0) as i64;
    Quantity(format!("{milli}m"))
}

fn memory_quantity(bytes: f64) -> Quantity {
    Quantity(format!("{}", bytes.max(0.0) as i64))
}

/// CPU (cores, written as milli-cores) and memory (bytes) as a NodeMetric resource map.
pub fn resource_map(cpu: Option<f64>, memory: Option<f64>) -> ResourceMap {
    let mut resources = BTreeMap::new();
    if let Some(c) = cpu {
        resources.insert("cpu".to_string(), cpu_quantity(c));
    }
    if let Some(m) = memory {
        resources.insert("memory".to_string(), memory_quantity(m));
    }
    ResourceMap {
        resources,
        devices: Vec::new(),
    }
}

fn window(store: &MetricStore, key: &SeriesKey, now: MetricTime, d: Duration) -> Option<WindowStats> {
    store.window(key, now.minus(d), now)
}

fn statistic(stats: &WindowStats, name: &str) -> f64 {
    match name {
        "p50" => stats.p50,
        "p90" => stats.p90,
        "p95" => stats.p95,
        "p99" => stats.p99,
        _ => stats.avg,
    }
}

/// Aggregated usages of a cpu/memory series pair for every configured duration.
fn aggregated(input: &ReportInput<'_>, cpu: &SeriesKey, memory: &SeriesKey) -> Vec<AggregatedUsage> {
    input
        .settings
        .durations
        .iter()
        .map(|(text, d)| {
            let warm = |s: Option<WindowStats>| s.filter(|s| s.time_span() * 2 >= *d);
            let c = warm(window(input.node_store, cpu, input.now, *d));
            let m = warm(window(input.node_store, memory, input.now, *d));
            let usage = if c.is_none() && m.is_none() {
                BTreeMap::new()
            } else {
                STATISTICS
                    .iter()
                    .map(|name| {
                        let pick = |s: &Option<WindowStats>| s.as_ref().map(|s| statistic(s, name));
                        (name.to_string(), resource_map(pick(&c), pick(&m)))
                    })
                    .collect()
            };
            AggregatedUsage {
                usage,
                duration: Some(text.clone()),
            }
        })
        .collect()
}

/// Builds the NodeMetric status from the stores. Pure.
pub fn build_status(input: &ReportInput<'_>) -> NodeMetricStatus {
    let window_len = input.settings.aggregate_window;
    let avg = |store: &MetricStore, key: &SeriesKey| window(store, key, input.now, window_len).map(|s| s.avg);
    let node_cpu = SeriesKey::node(MetricKind::NodeCpuUsage);
    let node_mem = SeriesKey::node(node_memory_kind(input.settings.memory_policy));
    let sys_cpu = SeriesKey::node(MetricKind::SysCpuUsage);
    let sys_mem = SeriesKey::node(MetricKind::SysMemoryUsage);
    let node_metric = NodeMetricInfo {
        node_usage: resource_map(avg(input.node_store, &node_cpu), avg(input.node_store, &node_mem)),
        aggregated_node_usages: Some(aggregated(input, &node_cpu, &node_mem)),
        system_usage: resource_map(avg(input.node_store, &sys_cpu), avg(input.node_store, &sys_mem)),
        aggregated_system_usages: Some(aggregated(input, &sys_cpu, &sys_mem)),
        numa_usages: Some(numa_usages(input)),
    };
    let mut pods_metric: Vec<PodMetricInfo> = input
        .pods
        .iter()
        .filter_map(|pod| {
            let uid = pod.uid.as_str();
            let cpu = avg(input.pod_store, &SeriesKey::of(MetricKind::PodCpuUsage, uid));
            let mem = avg(input.pod_store, &SeriesKey::of(MetricKind::PodMemoryUsage, uid));
            if cpu.is_none() && mem.is_none() {
                return None;
            }
            Some(PodMetricInfo {
                name: pod.name.clone(),
                namespace: pod.namespace.clone(),
                pod_usage: resource_map(cpu, mem),
                priority: Some(pod.priority.name().to_string()),
                qos: Some(pod.qos.name().to_string()),
                extensions: None,
            })
        })
        .collect();
    pods_metric.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    NodeMetricStatus {
        update_time: Some(time_of(input.now)),
        node_metric: Some(node_metric),
        pods_metric: Some(pods_metric),
        host_application_metric: Some(host_application_metric(input)),
        prod_reclaimable_metric: input.prod_reclaimable.cloned(),
        prod_peak_metric: input.prod_peak.cloned(),
    }
}

fn average(input: &ReportInput<'_>, store: &MetricStore, kind: MetricKind, object: &str) -> Option<f64> {
    window(
        store,
        &SeriesKey::of(kind, object),
        input.now,
        input.settings.aggregate_window,
    )
    .map(|s| s.avg)
}

/// The declared host applications with samples in the aggregate window (first of duplicate
/// names only, as the collector measures it).
fn host_application_metric(input: &ReportInput<'_>) -> Vec<HostApplicationMetricInfo> {
    let mut seen = std::collections::HashSet::new();
    input
        .host_applications
        .iter()
        .filter(|app| seen.insert(app.name.as_str()))
        .filter_map(|app| {
            let cpu = average(input, input.pod_store, MetricKind::HostAppCpuUsage, &app.name);
            let memory = average(input, input.pod_store, MetricKind::HostAppMemoryUsage, &app.name);
            if cpu.is_none() && memory.is_none() {
                return None;
            }
            Some(HostApplicationMetricInfo {
                name: app.name.clone(),
                usage: resource_map(cpu, memory),
                priority: app.priority.clone(),
                qos: app.qos.clone(),
            })
        })
        .collect()
}

/// Every NUMA node with samples in the aggregate window, by ascending ID.
fn numa_usages(input: &ReportInput<'_>) -> Vec<NumaMetricInfo> {
    let mut ids: Vec<u32> = input
        .node_store
        .objects_of(MetricKind::NumaMemoryUsage)
        .chain(input.node_store.objects_of(MetricKind::NumaCpuUsage))
        .filter_map(|object| object.parse().ok())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let memory_kind = numa_memory_kind(input.settings.memory_policy);
    ids.into_iter()
        .filter_map(|id| {
            let object = id.to_string();
            let at = |kind| average(input, input.node_store, kind, &object);
            let cpu = at(MetricKind::NumaCpuUsage);
            let memory = memory_kind.and_then(at);
            if cpu.is_none() && memory.is_none() {
                return None;
            }
            Some(NumaMetricInfo {
                numa_node_id: i32::try_from(id).ok()?,
                node_usage: resource_map(cpu, memory),
                system_usage: resource_map(None, at(MetricKind::NumaSysMemoryUsage)),
            })
        })
        .collect()
}

/// A status time (`updateTime`) from a metric or wall time.
pub fn time_of(t: MetricTime) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_millisecond(t.as_millis())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}
