//! Built-in defaults of every key, and what absent or blank keys give.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_api::config::{CalculatePolicy, ConfigKey, SloConfig, resolve_node};
use koord_api::nodeslo::{CpuBurstPolicy, CpuEvictPolicy, CpuSuppressPolicy, ResourceQosStrategy};
use pretty_assertions::assert_eq;

use super::{data, node};

#[test]
fn absent_configmap_gives_builtin_defaults_for_every_key() {
    let parsed = SloConfig::parse(&data(&[]));
    assert!(parsed.errors().is_empty());
    assert!(parsed.warnings().is_empty());
    assert!(!parsed.resource_threshold.present);
    let cfg = parsed.into_config().unwrap();
    assert_eq!(cfg, SloConfig::default());
    let eff = cfg.for_node(&node(&[], &[]));

    let t = &eff.resource_threshold;
    assert_eq!(t.enable, Some(false));
    assert_eq!(t.cpu_suppress_threshold_percent, Some(65));
    assert_eq!(t.cpu_suppress_policy, Some(CpuSuppressPolicy::Cpuset));
    assert_eq!(t.memory_evict_threshold_percent, Some(70));
    assert_eq!(t.cpu_evict_policy, Some(CpuEvictPolicy::EvictByRealLimit));
    assert_eq!(t.memory_evict_lower_percent, None);

    let b = &eff.cpu_burst;
    assert_eq!(b.policy, Some(CpuBurstPolicy::None));
    assert_eq!(b.cpu_burst_percent, Some(1000));
    assert_eq!(b.cfs_quota_burst_percent, Some(300));
    assert_eq!(b.cfs_quota_burst_period_seconds, Some(-1));
    assert_eq!(b.share_pool_threshold_percent, Some(50));
    assert_eq!(b.pod_strategies, None);

    assert_eq!(eff.system.total_network_bandwidth, Quantity("0".to_owned()));
    assert_eq!(eff.system.min_free_kbytes_factor, None);
    assert_eq!(eff.resource_qos, ResourceQosStrategy::default());
    assert!(eff.host_applications.is_empty());
    assert_eq!(eff.cpu_normalization.enable, Some(false));
    assert_eq!(eff.resource_amplification.enable, Some(false));

    let c = &eff.colocation;
    let table: [(&str, Option<i64>, Option<i64>); 12] = [
        (
            "metricAggregateDurationSeconds",
            c.metric_aggregate_duration_seconds,
            Some(300),
        ),
        (
            "metricReportIntervalSeconds",
            c.metric_report_interval_seconds,
            Some(60),
        ),
        (
            "cpuReclaimThresholdPercent",
            c.cpu_reclaim_threshold_percent,
            Some(60),
        ),
        (
            "memoryReclaimThresholdPercent",
            c.memory_reclaim_threshold_percent,
            Some(65),
        ),
        ("degradeTimeMinutes", c.degrade_time_minutes, Some(15)),
        (
            "updateTimeThresholdSeconds",
            c.update_time_threshold_seconds,
            Some(300),
        ),
        ("midCPUThresholdPercent", c.mid_cpu_threshold_percent, Some(100)),
        (
            "midMemoryThresholdPercent",
            c.mid_memory_threshold_percent,
            Some(100),
        ),
        ("midUnallocatedPercent", c.mid_unallocated_percent, Some(0)),
        (
            "midStaticCPUReservedPercent",
            c.mid_static_cpu_reserved_percent,
            Some(0),
        ),
        ("batchCPUThresholdPercent", c.batch_cpu_threshold_percent, None),
        (
            "batchMemoryThresholdPercent",
            c.batch_memory_threshold_percent,
            None,
        ),
    ];
    for (field, got, want) in table {
        assert_eq!(got, want, "{field}");
    }
    assert_eq!(c.enable, Some(false));
    assert_eq!(c.resource_diff_threshold, Some(0.1));
    assert_eq!(c.cpu_calculate_policy, Some(CalculatePolicy::Usage));
    assert_eq!(c.memory_calculate_policy, Some(CalculatePolicy::Usage));
    assert_eq!(
        c.metric_memory_collect_policy.as_deref(),
        Some("usageWithoutPageCache")
    );
    assert_eq!(c.mid_reclaim_mode, None);
    let durations = c
        .metric_aggregate_policy
        .as_ref()
        .and_then(|p| p.durations.clone());
    assert_eq!(
        durations,
        Some(vec!["5m".to_owned(), "10m".to_owned(), "30m".to_owned()])
    );
}

#[test]
fn blank_and_empty_object_keys_are_defaults() {
    for key in ConfigKey::ALL {
        for value in ["", "  \n", "{}"] {
            let parsed = SloConfig::parse(&data(&[(key.name(), value)]));
            assert!(
                parsed.errors().is_empty(),
                "{key} {value:?}: {:?}",
                parsed.errors()
            );
            assert_eq!(
                parsed.into_config().unwrap(),
                SloConfig::default(),
                "{key} {value:?}"
            );
        }
    }
}

#[test]
fn default_install_nodeslo_spec_matches_upstream() {
    // The shipped ConfigMap: colocation on, threshold on.
    let d = data(&[
        ("colocation-config", r#"{"enable": true}"#),
        (
            "resource-threshold-config",
            r#"{"clusterStrategy": {"enable": true}}"#,
        ),
    ]);
    let spec = resolve_node(&d, &node(&[], &[])).unwrap().node_slo_spec();
    let json = serde_json::to_value(&spec).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "resourceUsedThresholdWithBE": {
                "enable": true, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset",
                "memoryEvictThresholdPercent": 70, "cpuEvictPolicy": "evictByRealLimit"
            },
            "resourceQOSStrategy": {},
            "cpuBurstStrategy": {
                "policy": "none", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50
            },
            "systemStrategy": {"totalNetworkBandwidth": "0"},
            "hostApplications": []
        })
    );
}
