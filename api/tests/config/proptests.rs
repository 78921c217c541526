//! Arbitrary JSON for every key and arbitrary node labels never panic parse, validate and
//! merge; whatever validation accepts merges into values that validate again.

use std::collections::BTreeMap;

use koord_api::config::{ConfigKey, SloConfig, validate_colocation_strategy, validate_node_slo_spec};
use proptest::prelude::*;
use serde_json::{Map, Value};

use super::node;

/// Field names the generator favours, so values reach deep into the types.
const FIELDS: &[&str] = &[
    "clusterStrategy",
    "nodeStrategies",
    "nodeConfigs",
    "podStrategies",
    "nodeSelector",
    "matchLabels",
    "matchExpressions",
    "key",
    "operator",
    "values",
    "name",
    "enable",
    "cpuSuppressThresholdPercent",
    "memoryEvictThresholdPercent",
    "memoryEvictLowerPercent",
    "cpuEvictBESatisfactionUpperPercent",
    "cpuEvictBESatisfactionLowerPercent",
    "cpuEvictTimeWindowSeconds",
    "CPUEvictTimeWindowSeconds",
    "cpuSuppressPolicy",
    "policy",
    "cpuBurstPercent",
    "cfsQuotaBurstPercent",
    "cpuBurstStrategy",
    "cpuBurstConfig",
    "overridePod",
    "namespace",
    "podSelector",
    "sharePoolThresholdPercent",
    "totalNetworkBandwidth",
    "watermarkScaleFactor",
    "schedFeatures",
    "lsClass",
    "beClass",
    "resctrlQOS",
    "catRangeStartPercent",
    "catRangeEndPercent",
    "networkQOS",
    "ingressRequest",
    "memoryQOS",
    "wmarkRatio",
    "cpuReclaimThresholdPercent",
    "resourceDiffThreshold",
    "metricAggregatePolicy",
    "durations",
    "applications",
    "qos",
    "defaultRatio",
    "ratioModel",
    "resourceAmplificationRatio",
    "cpu",
];

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-20_000i64..20_000).prop_map(Value::from),
        (0i64..120).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-2.0f64..200.0).prop_map(Value::from),
        prop::sample::select(vec![
            "In", "Exists", "cpuset", "auto", "none", "10G", "5m", "x", "", "LS", "-1"
        ])
        .prop_map(Value::from),
        "[a-zA-Z0-9./-]{0,12}".prop_map(Value::from),
    ]
}

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![4 => prop::sample::select(FIELDS).prop_map(str::to_owned), 1 => "[a-zA-Z]{1,8}"]
}

fn arb_json() -> impl Strategy<Value = Value> {
    arb_scalar().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(arb_key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn arb_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    let label_key = prop_oneof![
        prop::sample::select(vec![
            "pool",
            "node.koordinator.sh/cpu-reclaim-ratio",
            "node.koordinator.sh/memory-reclaim-ratio",
            "node.koordinator.sh/mid-static-cpu-reserved-ratio",
            "node.koordinator.sh/mid-static-memory-reserved-ratio",
        ])
        .prop_map(str::to_owned),
        "[a-z./]{1,10}",
    ];
    let label_value = prop_oneof!["[a-z0-9.-]{0,6}", (-2.0f64..3.0).prop_map(|f| f.to_string())];
    prop::collection::btree_map(label_key, label_value, 0..5)
}

fn arb_annotations() -> impl Strategy<Value = BTreeMap<String, String>> {
    let value = prop_oneof![arb_json().prop_map(|v| v.to_string()), "[a-zA-Z0-9]{0,6}"];
    prop::collection::btree_map(
        prop::sample::select(vec![
            "node.koordinator.sh/colocation-strategy",
            "node.koordinator.sh/network-bandwidth",
        ])
        .prop_map(str::to_owned),
        value,
        0..2,
    )
}

fn check(
    key: ConfigKey,
    value: &Value,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) {
    let mut data = BTreeMap::new();
    data.insert(key.name().to_owned(), value.to_string());
    let parsed = SloConfig::parse(&data);
    let _ = parsed.warnings().iter().map(ToString::to_string).count();
    let (cfg, errors) = parsed.merge_with_last_good(&SloConfig::default());
    let _ = errors.iter().map(ToString::to_string).count();
    let l: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let a: Vec<(&str, &str)> = annotations
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let eff = cfg.for_node(&node(&l, &a));
    let spec_errors = validate_node_slo_spec(&eff.node_slo_spec());
    assert!(spec_errors.is_empty(), "{key}: {value} -> {spec_errors:?}");
    let coloc_errors = validate_colocation_strategy(&eff.colocation);
    assert!(coloc_errors.is_empty(), "{key}: {value} -> {coloc_errors:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_json_never_panics_and_accepted_values_stay_in_range(
        key in prop::sample::select(ConfigKey::ALL.to_vec()),
        value in arb_json(),
        labels in arb_labels(),
        annotations in arb_annotations(),
    ) {
        check(key, &value, &labels, &annotations);
    }

    #[test]
    fn arbitrary_strategy_envelopes_never_panic(
        key in prop::sample::select(ConfigKey::ALL.to_vec()),
        cluster in arb_json(),
        entries in prop::collection::vec(arb_json(), 0..3),
        pods in arb_json(),
        labels in arb_labels(),
    ) {
        let mut root = Map::new();
        root.insert("clusterStrategy".to_owned(), cluster);
        root.insert(key.nodes_field().to_owned(), Value::Array(entries));
        root.insert("podStrategies".to_owned(), pods);
        check(key, &Value::Object(root), &labels, &BTreeMap::new());
    }

    #[test]
    fn arbitrary_text_never_panics(key in prop::sample::select(ConfigKey::ALL.to_vec()), text in ".{0,64}") {
        let mut data = BTreeMap::new();
        data.insert(key.name().to_owned(), text);
        let _ = SloConfig::parse(&data).errors();
    }
}
