//! The ConfigMap values of seeds 000, 001, 002 and 004 parse and validate.

use koord_api::config::{BurstSource, SloConfig, WarningKind, resolve_node, resolve_pod_burst};
use koord_api::nodeslo::CpuBurstPolicy;
use pretty_assertions::assert_eq;

use super::{data, map, node};

const SEED000: &str = include_str!("../fixtures/seed000_cpu-burst-config.json");
const SEED000_CM: &str = include_str!("../fixtures/seed000_configmap.yaml");
const SEED001_COLOCATION: &str = include_str!("../fixtures/seed001_colocation-config.json");
const SEED001_THRESHOLD: &str = include_str!("../fixtures/seed001_resource-threshold-config.json");
const SEED001_DISABLE: &str = include_str!("../fixtures/seed001_resource-threshold-config-disable.json");
const SEED002: &str = include_str!("../fixtures/seed002_resource-threshold-config.json");
const SEED004_VERBATIM: &str = include_str!("../fixtures/seed004_resource-gos-config.verbatim.txt");
const SEED004_REPAIRED: &str = include_str!("../fixtures/seed004_resource-qos-config.repaired.json");

#[test]
fn seed000_pod_level_burst() {
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_yaml::from_str(SEED000_CM).unwrap();
    let from_yaml = cm.data.unwrap();
    let json = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
    assert_eq!(
        from_yaml.get("cpu-burst-config").map(|s| json(s)),
        Some(json(SEED000))
    );
    let parsed = SloConfig::parse(&from_yaml);
    assert!(parsed.warnings().is_empty(), "{:?}", parsed.warnings());
    let cfg = parsed.into_config().unwrap();

    let worker = cfg.for_node(&node(&[("kubernetes.io/hostname", "ci-testing-worker")], &[]));
    let b = &worker.cpu_burst;
    assert_eq!(b.policy, Some(CpuBurstPolicy::Auto));
    assert_eq!(b.cpu_burst_percent, Some(200));
    assert_eq!(b.cfs_quota_burst_percent, Some(300));
    assert_eq!(b.cfs_quota_burst_period_seconds, Some(6));
    assert_eq!(b.pod_strategies.as_ref().map(Vec::len), Some(2));
    let other = cfg.for_node(&node(&[("kubernetes.io/hostname", "other")], &[]));
    assert_eq!(other.cpu_burst.policy, Some(CpuBurstPolicy::None));
    assert_eq!(other.cpu_burst.cpu_burst_percent, Some(1000));

    let spec = worker.node_slo_spec();
    let pods = spec
        .cpu_burst_strategy
        .as_ref()
        .and_then(|s| s.pod_strategies.clone())
        .unwrap();
    assert_eq!(pods[0].namespace.as_deref(), Some("frontend"));
    assert_eq!(pods[1].override_pod, Some(false));

    let burst = spec.cpu_burst_strategy.unwrap();
    let pay = resolve_pod_burst(&burst, "frontend", &map(&[("app", "payment")]), &map(&[]));
    assert_eq!(
        pay.source,
        BurstSource::PodStrategy {
            index: 0,
            override_pod: true,
            with_annotation: false
        }
    );
    assert_eq!(pay.config.cfs_quota_burst_percent, Some(600));
    let low = resolve_pod_burst(
        &burst,
        "batch-jobs",
        &map(&[("workload-type", "low-priority")]),
        &map(&[("koordinator.sh/cpuBurst", r#"{"cpuBurstPercent": 80}"#)]),
    );
    assert_eq!(low.config.policy, Some(CpuBurstPolicy::CpuBurstOnly));
    assert_eq!(
        low.config.cpu_burst_percent,
        Some(80),
        "overridePod false: the annotation wins"
    );
    let plain = resolve_pod_burst(&burst, "default", &map(&[]), &map(&[]));
    assert_eq!(plain.source, BurstSource::Node);
    assert_eq!(plain.config.cpu_burst_percent, Some(200));
}

#[test]
fn seed001_colocation_and_thresholds() {
    let eff = resolve_node(
        &data(&[
            ("colocation-config", SEED001_COLOCATION),
            ("resource-threshold-config", SEED001_THRESHOLD),
        ]),
        &node(&[], &[]),
    )
    .unwrap();
    assert_eq!(eff.colocation.enable, Some(true));
    assert_eq!(eff.resource_threshold.enable, Some(true));
    assert_eq!(eff.resource_threshold.memory_evict_threshold_percent, Some(70));
    let eff = resolve_node(
        &data(&[("resource-threshold-config", SEED001_DISABLE)]),
        &node(&[], &[]),
    )
    .unwrap();
    assert_eq!(eff.resource_threshold.enable, Some(false));
    assert_eq!(eff.resource_threshold.cpu_suppress_threshold_percent, Some(65));
}

#[test]
fn seed002_satisfaction_eviction_with_go_style_capitals() {
    let parsed = SloConfig::parse(&data(&[("resource-threshold-config", SEED002)]));
    assert!(parsed.warnings().is_empty(), "{:?}", parsed.warnings());
    let t = parsed.into_config().unwrap().resource_threshold.cluster;
    assert_eq!(t.enable, Some(true));
    assert_eq!(t.cpu_evict_be_satisfaction_lower_percent, Some(60));
    assert_eq!(t.cpu_evict_be_satisfaction_upper_percent, Some(80));
    assert_eq!(t.cpu_evict_be_usage_threshold_percent, Some(90));
    assert_eq!(
        t.cpu_evict_time_window_seconds,
        Some(60),
        "\"CPUEvictTimeWindowSeconds\" matches case-insensitively"
    );
}

#[test]
fn seed004_repaired_snippet_validates_and_typo_key_only_warns() {
    let cfg = SloConfig::parse(&data(&[("resource-qos-config", SEED004_REPAIRED)]))
        .into_config()
        .unwrap();
    let be = cfg.resource_qos.cluster.be_class.unwrap().resctrl_qos.unwrap();
    assert_eq!(be.enable, Some(true));
    assert_eq!(be.cat_range_end_percent, Some(30));
    assert_eq!(be.mba_percent, Some(30));

    // The slide text verbatim, under its OCR'd key: an unknown key is a warning, never an error.
    let parsed = SloConfig::parse(&data(&[("resource-gos-config", SEED004_VERBATIM)]));
    assert!(parsed.errors().is_empty());
    let w = parsed.warnings();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].kind, WarningKind::UnknownKey);
    assert_eq!(
        w[0].to_string(),
        "resource-gos-config: unknown ConfigMap key, ignored"
    );
    assert_eq!(parsed.into_config().unwrap(), SloConfig::default());

    // The same broken text under the right key is a typed JSON error for that key only.
    let parsed = SloConfig::parse(&data(&[
        ("resource-qos-config", SEED004_VERBATIM),
        ("colocation-config", "{\"enable\":true}"),
    ]));
    let errors = parsed.errors();
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0]
            .to_string()
            .starts_with("resource-qos-config: invalid JSON"),
        "{}",
        errors[0]
    );
    assert!(parsed.colocation.result.is_ok());
}
