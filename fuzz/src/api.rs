//! koord-api inputs: the slo-controller-config keys, quantities and label selectors.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use koord_api::SloConfig;
use koord_api::config::ConfigKey;
use koord_api::config::{node_entry_problems, validate_node_slo_spec};
use koord_api::quantity::ExactQuantity;
use koord_api::selector::{Selector, find_overlaps};

use crate::{choose, text};

/// Input: a key index byte, then the key's value; further values separated by NUL go to the
/// following keys. Everything the manager and the webhook do with a ConfigMap runs: parse,
/// merge with the last good config (the defaults, then the first parse's result), per-node
/// resolution for two nodes, NodeSLO spec validation and the webhook-only entry checks.
pub fn config(data: &[u8]) {
    let (first_key, rest) = choose(data, ConfigKey::ALL.len() as u8);
    let mut map = BTreeMap::new();
    for (offset, value) in rest.split(|b| *b == 0).enumerate() {
        let key = ConfigKey::ALL[(usize::from(first_key) + offset) % ConfigKey::ALL.len()];
        map.insert(key.name().to_string(), text(value).into_owned());
    }
    let parsed = SloConfig::parse(&map);
    let _ = parsed.warnings();
    let (merged, _errors) = parsed.merge_with_last_good(&SloConfig::default());
    let (merged, _) = parsed.merge_with_last_good(&merged);
    for node in [
        node(&[]),
        node(&[("node-pool", "batch"), ("kubernetes.io/hostname", "n1")]),
    ] {
        let effective = merged.for_node(&node);
        let spec = effective.node_slo_spec();
        let _ = validate_node_slo_spec(&spec);
    }
    let _ = node_entry_problems(ConfigKey::Colocation, &merged.colocation);
    let _ = node_entry_problems(ConfigKey::ResourceThreshold, &merged.resource_threshold);
    let _ = node_entry_problems(ConfigKey::CpuBurst, &merged.cpu_burst);
    let _ = node_entry_problems(ConfigKey::System, &merged.system);
    let _ = parsed.into_config();
}

fn node(labels: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

/// Input: a quantity string. An accepted quantity must survive the trip through its
/// Kubernetes form unchanged, and its arithmetic must report overflow instead of wrapping.
#[allow(clippy::panic)]
pub fn quantity(data: &[u8]) {
    let text = text(data);
    let Ok(q) = ExactQuantity::parse(&text) else {
        return;
    };
    let k8s = q.to_k8s();
    match ExactQuantity::from_k8s(&k8s) {
        Ok(back) if back == q => {}
        other => panic!("{text:?} parsed as {q:?}, formatted as {k8s:?}, read back as {other:?}"),
    }
    let _ = q.milli_value();
    let _ = q.value();
    let _ = q.checked_add(q);
    let _ = q.checked_sub(q.checked_add(q).unwrap_or(q));
    let _ = koord_api::quantity::amount_of("cpu", q);
    let _ = koord_api::quantity::amount_of("memory", q);
}

/// Input: JSON, either one LabelSelector or a list of them (node entries). Each is validated
/// and matched against a few label sets; a list is checked for overlaps like the webhook does.
pub fn selector(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let selectors: Vec<LabelSelector> = match value {
        serde_json::Value::Array(items) => items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect(),
        v => serde_json::from_value(v).into_iter().collect(),
    };
    let label_sets = [
        BTreeMap::new(),
        BTreeMap::from([("a".to_string(), "b".to_string())]),
        BTreeMap::from([
            ("node-pool".to_string(), "batch".to_string()),
            ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ]),
    ];
    for s in &selectors {
        if let Ok(parsed) = Selector::parse(s) {
            for labels in &label_sets {
                let _ = parsed.matches(labels);
            }
        }
        let _ = koord_api::selector::is_empty_selector(s);
    }
    let entries: Vec<(usize, &LabelSelector)> = selectors.iter().enumerate().collect();
    let _ = find_overlaps(&entries);
}
