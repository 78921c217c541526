//! What a node's NodeSLO and NodeMetric specs should be: pure functions of the config state,
//! the Node and the current spec.

use k8s_openapi::api::core::v1::Node;
use koord_api::{
    NodeSLOSpec,
    config::{ConfigKey, EffectiveNodeConfig},
    nodemetric::{AggregatePolicy, MemoryCollectPolicy, NodeMetricCollectPolicy, NodeMetricSpec},
};

use crate::config_state::ConfigState;

/// The NodeSLO spec for `node`.
///
/// Parts derived from a key that has had no good value since start are copied from `current`
/// (left absent for a new NodeSLO) instead of being reset to defaults. `extensions` belong to
/// third-party plugins and are carried over.
pub fn node_slo_spec(
    state: &ConfigState,
    effective: &EffectiveNodeConfig,
    current: Option<&NodeSLOSpec>,
) -> NodeSLOSpec {
    let mut spec = effective.node_slo_spec();
    spec.extensions = current.and_then(|c| c.extensions.clone());
    let keep = |key: ConfigKey| !state.is_known(key);
    if keep(ConfigKey::ResourceThreshold) {
        spec.resource_used_threshold_with_be =
            current.and_then(|c| c.resource_used_threshold_with_be.clone());
    }
    if keep(ConfigKey::ResourceQos) {
        spec.resource_qos_strategy = current.and_then(|c| c.resource_qos_strategy.clone());
    }
    if keep(ConfigKey::CpuBurst) {
        spec.cpu_burst_strategy = current.and_then(|c| c.cpu_burst_strategy.clone());
    }
    if keep(ConfigKey::System) {
        spec.system_strategy = current.and_then(|c| c.system_strategy.clone());
    }
    if keep(ConfigKey::HostApplication) {
        spec.host_applications = current.and_then(|c| c.host_applications.clone());
    }
    spec
}

/// Upstream's default collect policy (used when colocation is off for the node).
pub fn default_collect_policy() -> NodeMetricCollectPolicy {
    NodeMetricCollectPolicy {
        aggregate_duration_seconds: Some(300),
        report_interval_seconds: Some(60),
        node_aggregate_policy: Some(AggregatePolicy {
            durations: Some(vec!["5m".to_owned(), "10m".to_owned(), "30m".to_owned()]),
        }),
        node_memory_collect_policy: Some(MemoryCollectPolicy::UsageWithoutPageCache),
    }
}

/// The NodeMetric spec for a node: the defaults, or the node's colocation settings when
/// colocation is on for it. While `colocation-config` has had no good value since start, an
/// existing spec is kept.
pub fn node_metric_spec(
    state: &ConfigState,
    effective: &EffectiveNodeConfig,
    current: Option<&NodeMetricSpec>,
) -> NodeMetricSpec {
    if !state.is_known(ConfigKey::Colocation)
        && let Some(current) = current
    {
        return current.clone();
    }
    let mut policy = default_collect_policy();
    let colocation = &effective.colocation;
    if colocation.enable == Some(true) {
        if let Some(seconds) = colocation.metric_aggregate_duration_seconds {
            policy.aggregate_duration_seconds = Some(seconds);
        }
        if let Some(seconds) = colocation.metric_report_interval_seconds {
            policy.report_interval_seconds = Some(seconds);
        }
        if let Some(aggregate) = &colocation.metric_aggregate_policy {
            policy.node_aggregate_policy = Some(AggregatePolicy {
                durations: aggregate.durations.clone(),
            });
        }
        if let Some(memory) = colocation.metric_memory_collect_policy.as_deref() {
            // Validation only admits the three spellings; anything else keeps the default.
            if let Ok(parsed) = serde_json::from_value(serde_json::Value::String(memory.to_owned())) {
                policy.node_memory_collect_policy = Some(parsed);
            }
        }
    }
    NodeMetricSpec {
        metric_collect_policy: Some(policy),
    }
}

/// The effective config of `node` (first matching entries, annotation and label overrides).
pub fn effective(state: &ConfigState, node: &Node) -> EffectiveNodeConfig {
    state.config().for_node(node)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use koord_api::nodeslo::{CpuBurstPolicy, CpuBurstStrategy};

    use super::*;

    fn node(labels: &[(&str, &str)]) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.metadata.labels = Some(labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect());
        node
    }

    fn load(pairs: &[(&str, &str)]) -> ConfigState {
        let data: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        let mut state = ConfigState::new();
        state.apply(Some(&data));
        state
    }

    #[test]
    fn seed_001_gives_enabled_thresholds_and_default_burst() {
        let state = load(&[
            ("colocation-config", r#"{"enable": true}"#),
            (
                "resource-threshold-config",
                r#"{"clusterStrategy": {"enable": true, "memoryEvictThresholdPercent": 70}}"#,
            ),
        ]);
        let spec = node_slo_spec(&state, &effective(&state, &node(&[])), None);
        let threshold = spec.resource_used_threshold_with_be.unwrap();
        assert_eq!(threshold.enable, Some(true));
        assert_eq!(threshold.memory_evict_threshold_percent, Some(70));
        assert_eq!(threshold.cpu_suppress_threshold_percent, Some(65));
        assert_eq!(
            spec.cpu_burst_strategy.unwrap().policy,
            Some(CpuBurstPolicy::None)
        );
        assert_eq!(spec.host_applications, Some(vec![]));
    }

    #[test]
    fn key_broken_since_start_keeps_the_current_part() {
        let state = load(&[("cpu-burst-config", "{broken")]);
        let current = NodeSLOSpec {
            cpu_burst_strategy: Some(CpuBurstStrategy {
                policy: Some(CpuBurstPolicy::Auto),
                ..Default::default()
            }),
            ..Default::default()
        };
        let spec = node_slo_spec(&state, &effective(&state, &node(&[])), Some(&current));
        assert_eq!(spec.cpu_burst_strategy, current.cpu_burst_strategy);
        assert!(
            spec.resource_used_threshold_with_be.is_some(),
            "other keys still apply"
        );
        let fresh = node_slo_spec(&state, &effective(&state, &node(&[])), None);
        assert_eq!(fresh.cpu_burst_strategy, None);
    }

    #[test]
    fn node_metric_follows_colocation_only_when_enabled() {
        let off = load(&[(
            "colocation-config",
            r#"{"enable": false, "metricReportIntervalSeconds": 20}"#,
        )]);
        let spec = node_metric_spec(&off, &effective(&off, &node(&[])), None);
        assert_eq!(spec.metric_collect_policy, Some(default_collect_policy()));
        let on = load(&[(
            "colocation-config",
            r#"{"enable": true, "metricReportIntervalSeconds": 20, "metricMemoryCollectPolicy": "usageWithPageCache"}"#,
        )]);
        let policy = node_metric_spec(&on, &effective(&on, &node(&[])), None)
            .metric_collect_policy
            .unwrap();
        assert_eq!(policy.report_interval_seconds, Some(20));
        assert_eq!(
            policy.node_memory_collect_policy,
            Some(MemoryCollectPolicy::UsageWithPageCache)
        );
    }

    #[test]
    fn node_entry_enables_colocation_for_matching_nodes() {
        let state = load(&[(
            "colocation-config",
            r#"{"enable": false, "nodeConfigs": [{"nodeSelector": {"matchLabels": {"pool": "batch"}}, "enable": true, "metricReportIntervalSeconds": 30}]}"#,
        )]);
        let policy = node_metric_spec(&state, &effective(&state, &node(&[("pool", "batch")])), None)
            .metric_collect_policy
            .unwrap();
        assert_eq!(policy.report_interval_seconds, Some(30));
    }
}
