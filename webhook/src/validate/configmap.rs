//! The `slo-controller-config` ConfigMap: every key must parse before it reaches the
//! controllers, so a typo is rejected at `kubectl apply` instead of silently keeping the last
//! good value.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use koord_api::config::{ConfigError, ConfigKey, KeyParse, Layered, SloConfig, node_entry_problems};
use koord_api::selector::Selector;

use super::Violation;
use crate::view::ClusterView;

/// Which ConfigMap is the slo-controller-config: the only one this webhook judges.
#[derive(Debug, Clone, Copy)]
pub struct SloConfigName<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
}

/// Validates a ConfigMap on CREATE/UPDATE against the cluster's nodes; ConfigMaps other than
/// the slo-controller-config are not judged.
pub fn validate_config_map_request(
    config_map: &ConfigMap,
    request_namespace: Option<&str>,
    slo_config: SloConfigName<'_>,
    view: &dyn ClusterView,
) -> Vec<Violation> {
    let name = config_map.metadata.name.as_deref().unwrap_or_default();
    let namespace = config_map
        .metadata
        .namespace
        .as_deref()
        .or(request_namespace)
        .unwrap_or_default();
    if name != slo_config.name || namespace != slo_config.namespace {
        return Vec::new();
    }
    let empty = BTreeMap::new();
    let nodes: BTreeMap<String, BTreeMap<String, String>> = view.node_labels().into_iter().collect();
    validate_slo_config_with_nodes(config_map.data.as_ref().unwrap_or(&empty), &nodes)
}

/// Checks every key of the slo-controller-config data: it parses and passes the api crate's
/// semantic validation, node entries have non-empty selectors, no two entries of one key can
/// select the same node, and no existing Node (name -> labels) is selected by two entries of
/// one key. Entries of different keys may overlap: each key is merged on its own.
pub fn validate_slo_config_with_nodes(
    data: &BTreeMap<String, String>,
    nodes: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<Violation> {
    let parsed = SloConfig::parse(data);
    let mut violations = Vec::new();
    check_key(ConfigKey::Colocation, &parsed.colocation, nodes, &mut violations);
    check_key(
        ConfigKey::ResourceThreshold,
        &parsed.resource_threshold,
        nodes,
        &mut violations,
    );
    check_key(
        ConfigKey::ResourceQos,
        &parsed.resource_qos,
        nodes,
        &mut violations,
    );
    check_key(ConfigKey::CpuBurst, &parsed.cpu_burst, nodes, &mut violations);
    check_key(ConfigKey::System, &parsed.system, nodes, &mut violations);
    check_key(
        ConfigKey::HostApplication,
        &parsed.host_application,
        nodes,
        &mut violations,
    );
    check_key(
        ConfigKey::CpuNormalization,
        &parsed.cpu_normalization,
        nodes,
        &mut violations,
    );
    check_key(
        ConfigKey::ResourceAmplification,
        &parsed.resource_amplification,
        nodes,
        &mut violations,
    );
    violations
}

fn config_violation(error: &ConfigError) -> Violation {
    if error.path.is_empty() {
        Violation::new(error.key.name(), error.rule.to_string())
    } else {
        Violation::new(format!("{}: {}", error.key, error.path), error.rule.to_string())
    }
}

fn entry_name<S>(key: ConfigKey, layered: &Layered<S>, index: usize) -> String {
    let name = layered
        .nodes
        .iter()
        .find(|entry| entry.index == index)
        .and_then(|entry| entry.name.as_deref())
        .map(|name| format!(" ({name:?})"))
        .unwrap_or_default();
    format!("{}[{index}]{name}", key.nodes_field())
}

fn check_key<S>(
    key: ConfigKey,
    parse: &KeyParse<S>,
    nodes: &BTreeMap<String, BTreeMap<String, String>>,
    violations: &mut Vec<Violation>,
) {
    if !parse.present {
        return;
    }
    let layered = match &parse.result {
        Err(error) => {
            violations.extend(error.errors.iter().map(config_violation));
            if error.errors.is_empty() {
                violations.push(Violation::new(key.name(), "invalid"));
            }
            return;
        }
        Ok(layered) => layered,
    };
    let (errors, overlaps) = node_entry_problems(key, layered);
    violations.extend(errors.iter().map(config_violation));
    for overlap in overlaps {
        violations.push(Violation::new(
            format!("{key}: {}", key.nodes_field()),
            format!(
                "entries {} and {} can select the same node (e.g. labels {:?}); the later one would never apply",
                entry_name(key, layered, overlap.first),
                entry_name(key, layered, overlap.second),
                overlap.example_labels
            ),
        ));
    }
    if layered.nodes.len() < 2 {
        return;
    }
    let parsed: Vec<(usize, Selector)> = layered
        .nodes
        .iter()
        .filter_map(|entry| {
            let selector = Selector::parse(entry.node_selector.as_ref()?).ok()?;
            (!selector.is_empty()).then_some((entry.index, selector))
        })
        .collect();
    for (node, labels) in nodes {
        let matched: Vec<usize> = parsed
            .iter()
            .filter(|(_, selector)| selector.matches(labels))
            .map(|(index, _)| *index)
            .collect();
        if let [first, second, ..] = matched[..] {
            violations.push(Violation::new(
                format!("{key}: {}", key.nodes_field()),
                format!(
                    "existing Node {node:?} is selected by entries {} and {}; a node may match only one entry",
                    entry_name(key, layered, first),
                    entry_name(key, layered, second)
                ),
            ));
        }
    }
}

#[cfg(test)]
#[path = "configmap_tests.rs"]
mod tests;
