//! A ConfigMap using every key at once, and serialize/deserialize round trips of the wire types.

use koord_api::config::types::{CpuBurstCfg, CpuNormalizationCfg, FlatCfg, StrategyCfg};
use koord_api::config::{ColocationCfg, ConfigKey, SloConfig};
use koord_api::nodeslo::{ResourceQosStrategy, SystemStrategy};
use pretty_assertions::assert_eq;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::node;

const POOL: &str = r#""nodeSelector": {"matchLabels": {"node-pool": "colocation"}}"#;

fn full_configmap() -> std::collections::BTreeMap<String, String> {
    let pool = POOL;
    let values = [
        (
            "colocation-config",
            format!(
                r#"{{"enable": true, "cpuReclaimThresholdPercent": 55, "extensions": {{"vendor": {{"x": 1}}}},
            "nodeConfigs": [{{"name": "pool", {pool}, "resourceDiffThreshold": 0.2}}]}}"#
            ),
        ),
        (
            "resource-threshold-config",
            format!(
                r#"{{"clusterStrategy": {{"enable": true}},
            "nodeStrategies": [{{"name": "pool", {pool}, "cpuEvictBEUsageThresholdPercent": 80}}]}}"#
            ),
        ),
        (
            "resource-qos-config",
            format!(
                r#"{{"clusterStrategy": {{"policies": {{"cpuPolicy": "coreSched", "netQOSPolicy": "terway-qos"}},
            "lsClass": {{"cpuQOS": {{"enable": true, "groupIdentity": 2}}, "resctrlQOS": {{"catRangeStartPercent": 0, "catRangeEndPercent": 100}}}},
            "beClass": {{"cpuQOS": {{"enable": true, "groupIdentity": -1}}, "memoryQOS": {{"wmarkRatio": 95, "wmarkMinAdj": 50}},
                         "blkioQOS": {{"enable": true, "blocks": [{{"name": "/dev/sdb", "type": "device", "ioCfg": {{"readIOPS": 20480}}}}]}}}}}},
            "nodeStrategies": [{{"name": "pool", {pool}, "beClass": {{"memoryQOS": {{"wmarkRatio": 90}}}}}}]}}"#
            ),
        ),
        (
            "cpu-burst-config",
            format!(
                r#"{{"clusterStrategy": {{"policy": "auto"}},
            "nodeStrategies": [{{"name": "pool", {pool}, "policy": "cfsQuotaBurstOnly", "cfsQuotaBurstPercent": 400}}]}}"#
            ),
        ),
        (
            "system-config",
            format!(
                r#"{{"clusterStrategy": {{"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}},
            "nodeStrategies": [{{"name": "pool", {pool}, "watermarkScaleFactor": 200}}]}}"#
            ),
        ),
        (
            "host-application-config",
            format!(
                r#"{{"applications": [{{"name": "nginx", "priority": "koord-prod", "qos": "LS",
            "cgroupPath": {{"base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": "nginx/"}}}}],
            "nodeConfigs": [{{"name": "pool", {pool}, "applications": []}}]}}"#
            ),
        ),
        (
            "cpu-normalization-config",
            format!(
                r#"{{"enable": false, "ratioModel": {{"Some CPU @ 2.50GHz": {{"baseRatio": 1.5, "turboEnabledRatio": 1.8}}}},
            "nodeConfigs": [{{"name": "pool", {pool}, "enable": true}}]}}"#
            ),
        ),
        (
            "resource-amplification-config",
            format!(
                r#"{{"enable": true, "resourceAmplificationRatio": {{"cpu": 1.5}},
            "nodeConfigs": [{{"name": "pool", {pool}, "resourceAmplificationRatio": {{"memory": 1.2}}}}]}}"#
            ),
        ),
    ];
    values.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

#[test]
fn every_key_at_once_cluster_and_pool_nodes() {
    let parsed = SloConfig::parse(&full_configmap());
    assert!(parsed.warnings().is_empty(), "{:?}", parsed.warnings());
    for key in ConfigKey::ALL {
        assert!(full_configmap().contains_key(key.name()), "{key} is covered");
    }
    let cfg = parsed.into_config().unwrap();

    let plain = cfg.for_node(&node(&[], &[]));
    assert!(plain.matched_entries.is_empty());
    assert_eq!(plain.host_applications.len(), 1);
    assert_eq!(plain.system.watermark_scale_factor, Some(150));
    assert_eq!(plain.cpu_normalization.enable, Some(false));

    let pooled = cfg.for_node(&node(&[("node-pool", "colocation")], &[]));
    assert_eq!(pooled.matched_entries.len(), ConfigKey::ALL.len());
    assert_eq!(pooled.colocation.cpu_reclaim_threshold_percent, Some(55));
    assert_eq!(pooled.colocation.resource_diff_threshold, Some(0.2));
    assert!(
        pooled
            .colocation
            .extensions
            .as_ref()
            .is_some_and(|e| e.contains_key("vendor"))
    );
    assert_eq!(
        pooled.resource_threshold.cpu_evict_be_usage_threshold_percent,
        Some(80)
    );
    let be = pooled.resource_qos.be_class.as_ref().unwrap();
    assert_eq!(be.memory_qos.as_ref().unwrap().wmark_ratio, Some(90));
    assert_eq!(
        be.memory_qos.as_ref().unwrap().wmark_min_adj,
        Some(50),
        "maps/objects merge field by field"
    );
    assert_eq!(be.blkio_qos.as_ref().unwrap().blocks.as_ref().unwrap().len(), 1);
    assert_eq!(pooled.cpu_burst.cfs_quota_burst_percent, Some(400));
    assert_eq!(pooled.system.watermark_scale_factor, Some(200));
    assert_eq!(pooled.system.min_free_kbytes_factor, Some(100));
    assert!(pooled.host_applications.is_empty());
    assert_eq!(pooled.cpu_normalization.enable, Some(true));
    let ratios = pooled
        .resource_amplification
        .resource_amplification_ratio
        .unwrap();
    assert_eq!(
        (ratios.get("cpu"), ratios.get("memory")),
        (Some(&1.5), Some(&1.2))
    );
}

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    json: &str,
) -> serde_json::Result<()> {
    let value: T = serde_json::from_str(json)?;
    let again: T = serde_json::from_str(&serde_json::to_string(&value)?)?;
    assert_eq!(value, again);
    Ok(())
}

#[test]
fn wire_types_round_trip() {
    let cm = full_configmap();
    round_trip::<ColocationCfg>(&cm["colocation-config"]).unwrap();
    round_trip::<StrategyCfg<ResourceQosStrategy>>(&cm["resource-qos-config"]).unwrap();
    round_trip::<StrategyCfg<SystemStrategy>>(&cm["system-config"]).unwrap();
    round_trip::<CpuBurstCfg>(include_str!("../fixtures/seed000_cpu-burst-config.json")).unwrap();
    round_trip::<CpuNormalizationCfg>(&cm["cpu-normalization-config"]).unwrap();
    round_trip::<FlatCfg<koord_api::config::ResourceAmplificationStrategy>>(
        &cm["resource-amplification-config"],
    )
    .unwrap();
    // The NodeSLO spec a node gets survives a round trip too, extensions included.
    let cfg = SloConfig::parse(&cm).into_config().unwrap();
    let mut spec = cfg
        .for_node(&node(&[("node-pool", "colocation")], &[]))
        .node_slo_spec();
    spec.extensions = Some(
        [("vendor".to_owned(), serde_json::json!({"keep": [1, 2]}))]
            .into_iter()
            .collect(),
    );
    let again: koord_api::NodeSLOSpec = serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
    assert_eq!(spec, again);
}
