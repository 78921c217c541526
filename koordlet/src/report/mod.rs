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
//! - `prodReclaimableMetric`: the peak predictor's latest result ([`crate::prediction`]); while
//!   there is none the apply leaves it out, which removes it, so a stale prediction never
//!   outlives its models.

mod publish;
pub mod topology;

pub use publish::{FIELD_MANAGER, PublishError, publish};

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use koord_api::NodeMetricStatus;
use koord_api::nodemetric::{
    AggregatedUsage, MemoryCollectPolicy, NodeMetricInfo, PodMetricInfo, ReclaimableMetric, ResourceMap,
};

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

/// Everything the status is built from.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    /// Node-level series (node, system).
    pub node_store: &'a MetricStore,
    /// Pod and container series.
    pub pod_store: &'a MetricStore,
    /// The snapshot's pods.
    pub pods: &'a [PodMeta],
    /// NodeMetric settings.
    pub settings: &'a NodeMetricSettings,
    /// Now (the report's `updateTime`).
    pub now: MetricTime,
    /// The peak predictor's latest result (`None`: no prediction; the field is cleared).
    pub prod_reclaimable: Option<&'a ReclaimableMetric>,
}

fn cpu_quantity(cores: f64) -> Quantity {
    let milli = (cores.max(0.0) * 1000.0) as i64;
    Quantity(format!("{milli}m"))
}

fn memory_quantity(bytes: f64) -> Quantity {
    Quantity(format!("{}", bytes.max(0.0) as i64))
}

/// CPU (cores, written as milli-cores) and memory (bytes) as a NodeMetric resource map.
pub(crate) fn resource_map(cpu: Option<f64>, memory: Option<f64>) -> ResourceMap {
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
        numa_usages: None,
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
        host_application_metric: None,
        prod_reclaimable_metric: input.prod_reclaimable.cloned(),
        prod_peak_metric: None,
    }
}

/// A status time (`updateTime`) from a metric or wall time.
pub fn time_of(t: MetricTime) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_millisecond(t.as_millis())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}
