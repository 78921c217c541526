use std::collections::BTreeMap;

use super::validate_slo_config_with_nodes;

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn lines(data: &BTreeMap<String, String>, nodes: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<String> {
    validate_slo_config_with_nodes(data, nodes)
        .into_iter()
        .map(|v| v.to_string())
        .collect()
}

fn no_nodes() -> BTreeMap<String, BTreeMap<String, String>> {
    BTreeMap::new()
}

#[test]
fn seed_configmaps_are_valid() {
    let config = data(&[
        ("colocation-config", r#"{"enable": true}"#),
        (
            "resource-threshold-config",
            r#"{"clusterStrategy": {"enable": true, "memoryEvictThresholdPercent": 70}}"#,
        ),
    ]);
    assert_eq!(lines(&config, &no_nodes()), Vec::<String>::new());
}

#[test]
fn broken_json_names_the_key() {
    let found = lines(&data(&[("colocation-config", "{not json")]), &no_nodes());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("colocation-config"), "{found:?}");
}

#[test]
fn out_of_range_values_name_key_field_and_rule() {
    let found = lines(
        &data(&[(
            "resource-threshold-config",
            r#"{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 150}}"#,
        )]),
        &no_nodes(),
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("resource-threshold-config: clusterStrategy.cpuSuppressThresholdPercent: "),
        "{found:?}"
    );
}

#[test]
fn node_entries_need_non_empty_selectors() {
    let found = lines(
        &data(&[(
            "resource-threshold-config",
            r#"{"clusterStrategy": {"enable": true}, "nodeStrategies": [{"nodeSelector": {}, "enable": false}]}"#,
        )]),
        &no_nodes(),
    );
    assert!(
        found
            .iter()
            .any(|line| line.starts_with("resource-threshold-config: nodeStrategies[0].nodeSelector")),
        "{found:?}"
    );
}

#[test]
fn overlapping_entries_are_rejected_naming_both() {
    let found = lines(
        &data(&[(
            "resource-threshold-config",
            r#"{"nodeStrategies": [
                {"name": "pool-a", "nodeSelector": {"matchLabels": {"pool": "a"}}, "enable": true},
                {"name": "pool-a-gpu", "nodeSelector": {"matchLabels": {"pool": "a", "gpu": "true"}}, "enable": false}
            ]}"#,
        )]),
        &no_nodes(),
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains(r#"entries nodeStrategies[0] ("pool-a") and nodeStrategies[1] ("pool-a-gpu") can select the same node"#),
        "{found:?}"
    );
}

#[test]
fn disjoint_entries_pass_until_an_existing_node_matches_both() {
    let config = data(&[(
        "resource-threshold-config",
        r#"{"nodeStrategies": [
            {"nodeSelector": {"matchLabels": {"pool": "a"}}, "enable": true},
            {"nodeSelector": {"matchLabels": {"gpu": "true"}}, "enable": false}
        ]}"#,
    )]);
    let mut nodes = BTreeMap::new();
    nodes.insert(
        "n1".to_string(),
        BTreeMap::from([("pool".to_string(), "a".to_string())]),
    );
    assert_eq!(lines(&config, &nodes), Vec::<String>::new());
    nodes.insert(
        "n2".to_string(),
        BTreeMap::from([
            ("pool".to_string(), "a".to_string()),
            ("gpu".to_string(), "true".to_string()),
        ]),
    );
    let found = lines(&config, &nodes);
    assert_eq!(
        found,
        vec![
            "resource-threshold-config: nodeStrategies: existing Node \"n2\" is selected by entries nodeStrategies[0] and nodeStrategies[1]; a node may match only one entry"
        ]
    );
}

#[test]
fn the_same_selector_on_different_keys_is_allowed() {
    let config = data(&[
        (
            "resource-threshold-config",
            r#"{"nodeStrategies": [{"nodeSelector": {"matchLabels": {"pool": "a"}}, "enable": true}]}"#,
        ),
        (
            "colocation-config",
            r#"{"enable": true, "nodeConfigs": [{"nodeSelector": {"matchLabels": {"pool": "a"}}, "enable": false}]}"#,
        ),
    ]);
    let nodes = BTreeMap::from([(
        "n1".to_string(),
        BTreeMap::from([("pool".to_string(), "a".to_string())]),
    )]);
    assert_eq!(lines(&config, &nodes), Vec::<String>::new());
}

#[test]
fn cpu_burst_pod_strategy_rule_message() {
    let found = lines(
        &data(&[(
            "cpu-burst-config",
            r#"{"clusterStrategy": {"policy": "auto"}, "podStrategies": [
                {"podSelector": {"matchLabels": {"a": "b"}}, "cpuBurstConfig": {"cpuBurstPercent": 200}},
                {"podSelector": {"matchLabels": {"a": "c"}}, "cpuBurstConfig": {"cpuBurstPercent": 0}}
            ]}"#,
        )]),
        &no_nodes(),
    );
    assert!(
        found.contains(
            &"cpu-burst-config: podStrategies[1].cpuBurstConfig.cpuBurstPercent: 0 is below 1".to_string()
        ),
        "{found:?}"
    );
}
