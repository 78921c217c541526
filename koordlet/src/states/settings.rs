//! NodeMetric spec merged over upstream's defaults, with upstream's floors.

use std::time::Duration;

use koord_api::NodeMetricSpec;
use koord_api::nodemetric::MemoryCollectPolicy;

/// Default report interval (s).
pub const DEFAULT_REPORT_INTERVAL_SECONDS: i64 = 60;
/// Floor of the report interval (s): upstream never reports more often.
pub const MIN_REPORT_INTERVAL_SECONDS: i64 = 30;
/// Default aggregate window (s) of `nodeUsage` / `podsMetric`.
pub const DEFAULT_AGGREGATE_SECONDS: i64 = 300;
/// Floor of the aggregate window (s).
pub const MIN_AGGREGATE_SECONDS: i64 = 60;
/// Default `aggregatedNodeUsages` windows.
pub const DEFAULT_DURATIONS: [&str; 3] = ["5m", "10m", "30m"];

/// The NodeMetric collect policy as koordlet applies it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeMetricSettings {
    /// Time between two status reports.
    pub report_interval: Duration,
    /// Window of `nodeUsage`, `systemUsage` and `podsMetric`.
    pub aggregate_window: Duration,
    /// `aggregatedNodeUsages` windows: (as written in the spec, parsed).
    pub durations: Vec<(String, Duration)>,
    /// Which memory figure counts as used on the node.
    pub memory_policy: MemoryCollectPolicy,
    /// Durations of the spec that did not parse (reported once, left out).
    pub bad_durations: Vec<String>,
}

impl Default for NodeMetricSettings {
    fn default() -> Self {
        Self::from_spec(&NodeMetricSpec::default())
    }
}

impl NodeMetricSettings {
    /// Merges `spec` over the defaults; values below the floors are raised to them.
    pub fn from_spec(spec: &NodeMetricSpec) -> Self {
        let policy = spec.metric_collect_policy.clone().unwrap_or_default();
        let secs = |v: Option<i64>, default: i64, min: i64| {
            Duration::from_secs(u64::try_from(v.unwrap_or(default).max(min)).unwrap_or(default as u64))
        };
        let wanted: Vec<String> = policy
            .node_aggregate_policy
            .and_then(|p| p.durations)
            .unwrap_or_else(|| DEFAULT_DURATIONS.iter().map(|s| s.to_string()).collect());
        let mut durations = Vec::new();
        let mut bad_durations = Vec::new();
        for text in wanted {
            match koord_api::duration::parse_go_duration(&text).ok() {
                Some(d) if !d.is_zero() => durations.push((text, d)),
                _ => bad_durations.push(text),
            }
        }
        NodeMetricSettings {
            report_interval: secs(
                policy.report_interval_seconds,
                DEFAULT_REPORT_INTERVAL_SECONDS,
                MIN_REPORT_INTERVAL_SECONDS,
            ),
            aggregate_window: secs(
                policy.aggregate_duration_seconds,
                DEFAULT_AGGREGATE_SECONDS,
                MIN_AGGREGATE_SECONDS,
            ),
            durations,
            memory_policy: policy
                .node_memory_collect_policy
                .unwrap_or(MemoryCollectPolicy::UsageWithoutPageCache),
            bad_durations,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_api::nodemetric::{AggregatePolicy, NodeMetricCollectPolicy};

    #[test]
    fn defaults_and_floors() {
        let d = NodeMetricSettings::default();
        assert_eq!(d.report_interval, Duration::from_secs(60));
        assert_eq!(d.aggregate_window, Duration::from_secs(300));
        assert_eq!(d.durations.len(), 3);
        let spec = NodeMetricSpec {
            metric_collect_policy: Some(NodeMetricCollectPolicy {
                report_interval_seconds: Some(5),
                aggregate_duration_seconds: Some(10),
                node_aggregate_policy: Some(AggregatePolicy {
                    durations: Some(vec!["2m".into(), "bogus".into()]),
                }),
                node_memory_collect_policy: Some(MemoryCollectPolicy::UsageWithPageCache),
            }),
        };
        let s = NodeMetricSettings::from_spec(&spec);
        assert_eq!(s.report_interval, Duration::from_secs(30));
        assert_eq!(s.aggregate_window, Duration::from_secs(60));
        assert_eq!(s.durations, vec![("2m".to_string(), Duration::from_secs(120))]);
        assert_eq!(s.bad_durations, vec!["bogus".to_string()]);
        assert_eq!(s.memory_policy, MemoryCollectPolicy::UsageWithPageCache);
    }
}
