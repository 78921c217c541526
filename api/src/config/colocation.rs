//! `colocation-config`: the batch/mid resource strategy (ColocationStrategy), flat at the top
//! level of the key plus `nodeConfigs[]`. Field names are upstream's JSON names.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How node resources are estimated for reclaiming.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CalculatePolicy {
    /// From measured usage (default).
    #[serde(rename = "usage")]
    Usage,
    /// From requests (memory only; for CPU upstream treats it as `usage`, and validation rejects it).
    #[serde(rename = "request")]
    Request,
    /// From max(usage, request).
    #[serde(rename = "maxUsageRequest")]
    MaxUsageRequest,
}

/// Which windows koordlet aggregates node metrics over.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MetricAggregatePolicy {
    /// Go durations such as `5m`; default `["5m","10m","30m"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durations: Option<Vec<String>>,
}

/// The colocation strategy (ColocationStrategy): every field optional so that layers overlay.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ColocationStrategy {
    /// Turns batch/mid resource reclaiming on. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// NodeMetric aggregation window, seconds (>= 1). Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_aggregate_duration_seconds: Option<i64>,
    /// NodeMetric report interval, seconds (>= 1). Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_report_interval_seconds: Option<i64>,
    /// Aggregation windows reported in NodeMetric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_aggregate_policy: Option<MetricAggregatePolicy>,
    /// `usageWithoutPageCache` (default), `usageWithHotPageCache` or `usageWithPageCache`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_memory_collect_policy: Option<String>,
    /// Share of node CPU that may be used before nothing is reclaimed (>= 0; may exceed 100). Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_reclaim_threshold_percent: Option<i64>,
    /// `usage` (default) or `maxUsageRequest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_calculate_policy: Option<CalculatePolicy>,
    /// Share of node memory that may be used before nothing is reclaimed (>= 0). Default 65.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_reclaim_threshold_percent: Option<i64>,
    /// `usage` (default), `request` or `maxUsageRequest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_calculate_policy: Option<CalculatePolicy>,
    /// Minutes without fresh NodeMetric after which batch resources are reset (>= 1). Default 15.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degrade_time_minutes: Option<i64>,
    /// Seconds after which the node status is refreshed even without change (>= 1). Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_time_threshold_seconds: Option<i64>,
    /// Relative change that triggers a node status update, in (0, 1]. Default 0.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_diff_threshold: Option<f64>,
    /// `static` or unset (dynamic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_reclaim_mode: Option<String>,
    /// Cap of mid CPU, percent of node allocatable (0-100). Default 100.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "midCPUThresholdPercent"
    )]
    pub mid_cpu_threshold_percent: Option<i64>,
    /// Cap of mid memory, percent (0-100). Default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_memory_threshold_percent: Option<i64>,
    /// Share of unallocated resources added to mid (0-100). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_unallocated_percent: Option<i64>,
    /// Static mid CPU reservation, percent (0-100). Default 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "midStaticCPUReservedPercent"
    )]
    pub mid_static_cpu_reserved_percent: Option<i64>,
    /// Static mid memory reservation, percent (0-100). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_static_memory_reserved_percent: Option<i64>,
    /// Cap of batch CPU, percent (>= 0). Unset = no cap.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "batchCPUThresholdPercent"
    )]
    pub batch_cpu_threshold_percent: Option<i64>,
    /// Cap of batch memory, percent (>= 0). Unset = no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_memory_threshold_percent: Option<i64>,
    /// Third-party strategies, kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub extensions: Option<BTreeMap<String, serde_json::Value>>,
}

impl ColocationStrategy {
    /// Built-in defaults (`sloconfig.DefaultColocationStrategy`).
    pub fn builtin_default() -> Self {
        ColocationStrategy {
            enable: Some(false),
            metric_aggregate_duration_seconds: Some(300),
            metric_report_interval_seconds: Some(60),
            metric_aggregate_policy: Some(MetricAggregatePolicy {
                durations: Some(vec!["5m".to_owned(), "10m".to_owned(), "30m".to_owned()]),
            }),
            metric_memory_collect_policy: Some("usageWithoutPageCache".to_owned()),
            cpu_reclaim_threshold_percent: Some(60),
            cpu_calculate_policy: Some(CalculatePolicy::Usage),
            memory_reclaim_threshold_percent: Some(65),
            memory_calculate_policy: Some(CalculatePolicy::Usage),
            degrade_time_minutes: Some(15),
            update_time_threshold_seconds: Some(300),
            resource_diff_threshold: Some(0.1),
            mid_reclaim_mode: None,
            mid_cpu_threshold_percent: Some(100),
            mid_memory_threshold_percent: Some(100),
            mid_unallocated_percent: Some(0),
            mid_static_cpu_reserved_percent: Some(0),
            mid_static_memory_reserved_percent: Some(0),
            batch_cpu_threshold_percent: None,
            batch_memory_threshold_percent: None,
            extensions: None,
        }
    }
}

/// The whole `colocation-config` value: the strategy flat at the top level plus `nodeConfigs[]`.
pub type ColocationCfg = super::types::FlatCfg<ColocationStrategy>;
