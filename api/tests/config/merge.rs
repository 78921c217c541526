//! Merge: defaults ⊕ cluster ⊕ first matching node entry ⊕ node annotations/labels.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use koord_api::config::{ConfigKey, Layered, NodeEntry, SloConfig, resolve_node};
use koord_api::nodeslo::CpuBurstPolicy;
use pretty_assertions::assert_eq;

use super::{data, map, node};

const THRESHOLD: &str = "resource-threshold-config";

#[test]
fn cluster_only_overlays_defaults() {
    let d = data(&[(
        THRESHOLD,
        r#"{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 50}}"#,
    )]);
    let eff = resolve_node(&d, &node(&[("pool", "a")], &[])).unwrap();
    assert_eq!(eff.resource_threshold.enable, Some(true));
    assert_eq!(eff.resource_threshold.cpu_suppress_threshold_percent, Some(50));
    assert_eq!(eff.resource_threshold.memory_evict_threshold_percent, Some(70));
    assert!(eff.matched_entries.is_empty());
}

#[test]
fn matching_node_entry_overlays_merged_cluster() {
    let d = data(&[(
        THRESHOLD,
        r#"{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 50},
            "nodeStrategies": [{"name": "pool-a", "nodeSelector": {"matchLabels": {"pool": "a"}},
                                "memoryEvictThresholdPercent": 60}]}"#,
    )]);
    let a = resolve_node(&d, &node(&[("pool", "a")], &[])).unwrap();
    assert_eq!(a.resource_threshold.enable, Some(true));
    assert_eq!(a.resource_threshold.cpu_suppress_threshold_percent, Some(50));
    assert_eq!(a.resource_threshold.memory_evict_threshold_percent, Some(60));
    assert_eq!(a.matched_entries.get(&ConfigKey::ResourceThreshold), Some(&0));
    let b = resolve_node(&d, &node(&[("pool", "b")], &[])).unwrap();
    assert_eq!(b.resource_threshold.memory_evict_threshold_percent, Some(70));
}

#[test]
fn first_matching_entry_wins() {
    let d = data(&[(
        THRESHOLD,
        r#"{"nodeStrategies": [
            {"nodeSelector": {"matchLabels": {"other": "x"}}, "cpuSuppressThresholdPercent": 10},
            {"nodeSelector": {"matchLabels": {"pool": "a"}}, "cpuSuppressThresholdPercent": 20},
            {"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}, "cpuSuppressThresholdPercent": 30}
        ]}"#,
    )]);
    let eff = resolve_node(&d, &node(&[("pool", "a")], &[])).unwrap();
    assert_eq!(eff.resource_threshold.cpu_suppress_threshold_percent, Some(20));
    assert_eq!(eff.matched_entries.get(&ConfigKey::ResourceThreshold), Some(&1));
    let eff = resolve_node(&d, &node(&[("pool", "z")], &[])).unwrap();
    assert_eq!(eff.resource_threshold.cpu_suppress_threshold_percent, Some(30));
}

#[test]
fn nil_selector_matches_nothing_and_empty_selector_matches_all() {
    let d = data(&[(
        THRESHOLD,
        r#"{"nodeStrategies": [
            {"name": "no-selector", "cpuSuppressThresholdPercent": 10},
            {"name": "all", "nodeSelector": {}, "cpuSuppressThresholdPercent": 20}
        ]}"#,
    )]);
    let eff = resolve_node(&d, &node(&[], &[])).unwrap();
    assert_eq!(eff.resource_threshold.cpu_suppress_threshold_percent, Some(20));
}

#[test]
fn unparsable_selector_is_skipped_at_merge_time() {
    let bad = LabelSelector {
        match_labels: Some(map(&[("bad key!", "x")])),
        match_expressions: None,
    };
    let l = Layered {
        cluster: 0,
        nodes: vec![
            NodeEntry {
                index: 0,
                name: None,
                node_selector: Some(bad),
                strategy: 1,
            },
            NodeEntry {
                index: 1,
                name: None,
                node_selector: Some(LabelSelector::default()),
                strategy: 2,
            },
        ],
    };
    assert_eq!(l.for_labels(&BTreeMap::new()), (&2, Some(1)));
}

#[test]
fn maps_merge_key_by_key_and_lists_are_replaced() {
    let d = data(&[
        (
            "system-config",
            r#"{"clusterStrategy": {"schedFeatures": {"A": true, "B": true}},
                "nodeStrategies": [{"nodeSelector": {}, "schedFeatures": {"B": false, "C": true}}]}"#,
        ),
        (
            "colocation-config",
            r#"{"metricAggregatePolicy": {"durations": ["1m", "2m"]},
                "nodeConfigs": [{"nodeSelector": {}, "metricAggregatePolicy": {"durations": ["7m"]}}]}"#,
        ),
    ]);
    let eff = resolve_node(&d, &node(&[], &[])).unwrap();
    let features = eff.system.sched_features.unwrap();
    let want: BTreeMap<String, bool> = [("A", true), ("B", false), ("C", true)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    assert_eq!(features, want);
    let durations = eff.colocation.metric_aggregate_policy.unwrap().durations.unwrap();
    assert_eq!(durations, vec!["7m".to_owned()]);
}

#[test]
fn host_applications_come_from_first_matching_entry_else_cluster() {
    let d = data(&[(
        "host-application-config",
        r#"{"applications": [{"name": "nginx", "qos": "LS"}, {"name": "agent", "qos": "SYSTEM"}],
            "nodeConfigs": [{"nodeSelector": {"matchLabels": {"pool": "a"}}, "applications": [{"name": "yarn", "priority": "koord-batch"}]},
                            {"nodeSelector": {"matchLabels": {"pool": "b"}}}]}"#,
    )]);
    let names = |labels: &[(&str, &str)]| -> Vec<String> {
        resolve_node(&d, &node(labels, &[]))
            .unwrap()
            .host_applications
            .into_iter()
            .map(|a| a.name)
            .collect()
    };
    assert_eq!(names(&[("pool", "a")]), vec!["yarn"]);
    assert!(names(&[("pool", "b")]).is_empty());
    assert_eq!(names(&[]), vec!["nginx", "agent"]);
}

#[test]
fn colocation_layers_node_config_annotation_and_labels() {
    let d = data(&[(
        "colocation-config",
        r#"{"enable": true, "cpuReclaimThresholdPercent": 70,
            "nodeConfigs": [{"nodeSelector": {"matchLabels": {"pool": "a"}}, "memoryReclaimThresholdPercent": 80, "degradeTimeMinutes": 5}]}"#,
    )]);
    let n = node(
        &[
            ("pool", "a"),
            ("node.koordinator.sh/cpu-reclaim-ratio", "0.29"),
            ("node.koordinator.sh/mid-static-cpu-reserved-ratio", "0.5"),
        ],
        &[(
            "node.koordinator.sh/colocation-strategy",
            r#"{"DegradeTimeMinutes": 9, "memoryReclaimThresholdPercent": 81}"#,
        )],
    );
    let eff = resolve_node(&d, &n).unwrap();
    let c = &eff.colocation;
    assert_eq!(c.enable, Some(true));
    assert_eq!(
        c.cpu_reclaim_threshold_percent,
        Some(28),
        "0.29 x 100 truncates to 28 like upstream"
    );
    assert_eq!(c.memory_reclaim_threshold_percent, Some(81));
    assert_eq!(c.degrade_time_minutes, Some(9));
    assert_eq!(c.mid_static_cpu_reserved_percent, Some(50));
    assert!(eff.notes.is_empty(), "{:?}", eff.notes);
}

#[test]
fn bad_node_overrides_are_ignored_with_a_note() {
    let d = data(&[(
        "colocation-config",
        r#"{"cpuReclaimThresholdPercent": 70, "memoryReclaimThresholdPercent": 66}"#,
    )]);
    type Pairs = &'static [(&'static str, &'static str)];
    let cases: [(Pairs, Pairs); 5] = [
        (&[("node.koordinator.sh/cpu-reclaim-ratio", "-0.5")], &[]),
        (&[("node.koordinator.sh/cpu-reclaim-ratio", "abc")], &[]),
        (&[("node.koordinator.sh/cpu-reclaim-ratio", "NaN")], &[]),
        (&[], &[("node.koordinator.sh/colocation-strategy", "{not json")]),
        (
            &[],
            &[(
                "node.koordinator.sh/colocation-strategy",
                r#"{"cpuReclaimThresholdPercent": -5}"#,
            )],
        ),
    ];
    for (labels, annotations) in cases {
        let eff = resolve_node(&d, &node(labels, annotations)).unwrap();
        assert_eq!(
            eff.colocation.cpu_reclaim_threshold_percent,
            Some(70),
            "{labels:?} {annotations:?}"
        );
        assert_eq!(eff.notes.len(), 1, "{labels:?} {annotations:?}");
    }
    // Out of range for a 0-100 field.
    let eff = resolve_node(
        &d,
        &node(
            &[("node.koordinator.sh/mid-static-memory-reserved-ratio", "1.5")],
            &[],
        ),
    )
    .unwrap();
    assert_eq!(eff.colocation.mid_static_memory_reserved_percent, Some(0));
    assert_eq!(eff.notes.len(), 1);
}

#[test]
fn network_bandwidth_annotation_overrides_or_is_ignored() {
    let d = data(&[(
        "system-config",
        r#"{"clusterStrategy": {"totalNetworkBandwidth": "10G", "minFreeKbytesFactor": 100}}"#,
    )]);
    let eff = resolve_node(
        &d,
        &node(&[], &[("node.koordinator.sh/network-bandwidth", "25G")]),
    )
    .unwrap();
    assert_eq!(eff.system.total_network_bandwidth.0, "25G");
    assert!(eff.notes.is_empty());
    let eff = resolve_node(
        &d,
        &node(&[], &[("node.koordinator.sh/network-bandwidth", "fast")]),
    )
    .unwrap();
    assert_eq!(eff.system.total_network_bandwidth.0, "10G");
    assert_eq!(
        eff.system.min_free_kbytes_factor,
        Some(100),
        "the rest of the system strategy stays"
    );
    assert_eq!(eff.notes.len(), 1);
    assert!(eff.notes[0].to_string().contains("network-bandwidth"));
}

#[test]
fn burst_nested_form_overlays_inline_and_pod_strategies_reach_the_nodeslo() {
    let d = data(&[(
        "cpu-burst-config",
        r#"{"clusterStrategy": {"policy": "cpuBurstOnly"},
            "nodeStrategies": [{"nodeSelector": {"matchLabels": {"pool": "a"}}, "cpuBurstPercent": 500, "cfsQuotaBurstPercent": 400,
                                "cpuBurstStrategy": {"cfsQuotaBurstPercent": 600, "policy": "auto"}},
                               {"nodeSelector": {"matchLabels": {"pool": "b"}}, "podStrategies": []}],
            "podStrategies": [{"namespace": "ns", "cpuBurstConfig": {"cpuBurstPercent": 200}}]}"#,
    )]);
    let eff = resolve_node(&d, &node(&[("pool", "a")], &[])).unwrap();
    let b = &eff.cpu_burst;
    assert_eq!(b.policy, Some(CpuBurstPolicy::Auto));
    assert_eq!(b.cpu_burst_percent, Some(500));
    assert_eq!(b.cfs_quota_burst_percent, Some(600));
    assert_eq!(b.share_pool_threshold_percent, Some(50));
    assert_eq!(b.pod_strategies.as_ref().map(Vec::len), Some(1));
    let spec = eff.node_slo_spec();
    assert_eq!(
        spec.cpu_burst_strategy.unwrap().pod_strategies.unwrap()[0]
            .namespace
            .as_deref(),
        Some("ns")
    );
    // A node entry may replace the list (lists are replaced whole).
    let eff = resolve_node(&d, &node(&[("pool", "b")], &[])).unwrap();
    assert_eq!(eff.cpu_burst.pod_strategies, Some(vec![]));
    assert_eq!(eff.cpu_burst.policy, Some(CpuBurstPolicy::CpuBurstOnly));
}

#[test]
fn broken_key_keeps_last_good_value_others_apply() {
    let first = SloConfig::parse(&data(&[
        (
            THRESHOLD,
            r#"{"clusterStrategy": {"cpuSuppressThresholdPercent": 40}}"#,
        ),
        (
            "cpu-burst-config",
            r#"{"clusterStrategy": {"cpuBurstPercent": 200}}"#,
        ),
    ]));
    let (good, errors) = first.merge_with_last_good(&SloConfig::default());
    assert!(errors.is_empty());
    let second = SloConfig::parse(&data(&[
        (
            THRESHOLD,
            r#"{"clusterStrategy": {"cpuSuppressThresholdPercent": 120}}"#,
        ),
        (
            "cpu-burst-config",
            r#"{"clusterStrategy": {"cpuBurstPercent": 300}}"#,
        ),
        ("system-config", "{not json"),
    ]));
    let (cfg, errors) = second.merge_with_last_good(&good);
    assert_eq!(
        cfg.resource_threshold.cluster.cpu_suppress_threshold_percent,
        Some(40)
    );
    assert_eq!(cfg.cpu_burst.cluster.cpu_burst_percent, Some(300));
    assert_eq!(cfg.system, SloConfig::default().system);
    let keys: Vec<ConfigKey> = errors.iter().map(|e| e.key).collect();
    assert_eq!(keys, vec![ConfigKey::ResourceThreshold, ConfigKey::System]);
    assert_eq!(
        errors[0].to_string(),
        "resource-threshold-config: clusterStrategy.cpuSuppressThresholdPercent: 120 is above 100"
    );
    assert!(
        errors[1].to_string().starts_with("system-config: invalid JSON"),
        "{}",
        errors[1]
    );
    assert!(second.into_config().is_err());
}

#[test]
fn keys_are_case_insensitive_everywhere_and_unknown_fields_warn() {
    let d = data(&[(
        THRESHOLD,
        r#"{"ClusterStrategy": {"Enable": true, "someFutureField": 1},
            "NODESTRATEGIES": [{"NodeSelector": {"MatchLabels": {"Pool": "A"}}, "CPUSuppressThresholdPercent": 33}]}"#,
    )]);
    let parsed = SloConfig::parse(&d);
    let warnings: Vec<String> = parsed.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        vec!["resource-threshold-config: clusterStrategy.someFutureField: unknown field, ignored"]
    );
    let cfg = parsed.into_config().unwrap();
    let eff = cfg.for_node(&node(&[("Pool", "A")], &[]));
    assert_eq!(eff.resource_threshold.enable, Some(true));
    assert_eq!(eff.resource_threshold.cpu_suppress_threshold_percent, Some(33));
}
