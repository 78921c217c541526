//! Every validation rule on both sides of its boundary, with the exact message.

use koord_api::config::{ConfigKey, SloConfig, node_entry_name_errors, node_entry_problems};
use pretty_assertions::assert_eq;

use super::data;

/// Error messages of `key` when it holds `json`.
fn errors(key: &str, json: &str) -> Vec<String> {
    let parsed = SloConfig::parse(&data(&[(key, json)]));
    parsed
        .errors()
        .iter()
        .flat_map(|k| k.errors.iter().map(ToString::to_string))
        .collect()
}

/// `(field, good value, bad value, message of the bad value)` for a cluster strategy field.
type Case = (&'static str, &'static str, &'static str, &'static str);

fn check_cluster(key: &str, cases: &[Case]) {
    for (field, good, bad, message) in cases {
        let ok = format!(r#"{{"clusterStrategy": {{"{field}": {good}}}}}"#);
        assert_eq!(errors(key, &ok), Vec::<String>::new(), "{key} {field}={good}");
        let broken = format!(r#"{{"clusterStrategy": {{"{field}": {bad}}}}}"#);
        let want = format!("{key}: clusterStrategy.{field}: {message}");
        assert_eq!(errors(key, &broken), vec![want], "{key} {field}={bad}");
    }
}

#[test]
fn threshold_ranges() {
    check_cluster(
        "resource-threshold-config",
        &[
            ("cpuSuppressThresholdPercent", "100", "101", "101 is above 100"),
            ("cpuSuppressThresholdPercent", "0", "-1", "-1 is below 0"),
            ("cpuSuppressMinPercent", "100", "101", "101 is above 100"),
            ("memoryEvictThresholdPercent", "100", "101", "101 is above 100"),
            ("cpuEvictBEUsageThresholdPercent", "0", "-1", "-1 is below 0"),
            ("cpuEvictTimeWindowSeconds", "1", "0", "0 is below 1"),
            (
                "memoryAllocatableEvictThresholdPercent",
                "0",
                "-1",
                "-1 is below 0",
            ),
            (
                "allocatableEvictPriorityThreshold",
                "7999",
                "8000",
                "8000 is above 7999",
            ),
            ("allocatableEvictPriorityThreshold", "0", "-1", "-1 is below 0"),
        ],
    );
    let e = errors(
        "resource-threshold-config",
        r#"{"clusterStrategy": {"cpuSuppressPolicy": "cpu"}}"#,
    );
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with(
            "resource-threshold-config: clusterStrategy.cpuSuppressPolicy: unknown variant `cpu`"
        ),
        "{e:?}"
    );
    assert_eq!(
        errors(
            "resource-threshold-config",
            r#"{"clusterStrategy": {"cpuSuppressThresholdPercent": 120}}"#
        ),
        vec!["resource-threshold-config: clusterStrategy.cpuSuppressThresholdPercent: 120 is above 100"]
    );
}

#[test]
fn threshold_pairs() {
    let k = "resource-threshold-config";
    let pair = |json: &str| errors(k, &format!(r#"{{"clusterStrategy": {json}}}"#));
    assert!(
        pair(r#"{"cpuEvictBESatisfactionLowerPercent": 59, "cpuEvictBESatisfactionUpperPercent": 60}"#)
            .is_empty()
    );
    assert_eq!(
        pair(r#"{"cpuEvictBESatisfactionLowerPercent": 60, "cpuEvictBESatisfactionUpperPercent": 60}"#),
        vec![format!(
            "{k}: clusterStrategy.cpuEvictBESatisfactionLowerPercent: 60 must be below cpuEvictBESatisfactionUpperPercent (60)"
        )]
    );
    assert_eq!(
        pair(r#"{"cpuEvictBESatisfactionLowerPercent": 60}"#),
        vec![format!(
            "{k}: clusterStrategy.cpuEvictBESatisfactionLowerPercent: is set but cpuEvictBESatisfactionUpperPercent is not (set both or neither)"
        )]
    );
    assert_eq!(pair(r#"{"cpuEvictBESatisfactionUpperPercent": 60}"#).len(), 1);
    assert_eq!(pair(r#"{"cpuEvictThresholdPercent": 60}"#).len(), 1);
    assert!(pair(r#"{"cpuEvictThresholdPercent": 60, "cpuEvictLowerPercent": 59}"#).is_empty());
    assert_eq!(pair(r#"{"cpuAllocatableEvictLowerPercent": 60}"#).len(), 1);
    assert!(
        pair(r#"{"cpuAllocatableEvictThresholdPercent": 120, "cpuAllocatableEvictLowerPercent": 110}"#)
            .is_empty()
    );
    // Memory: lower is optional (the threshold has a default) but must stay below it.
    assert!(pair(r#"{"memoryEvictLowerPercent": 69}"#).is_empty());
    assert_eq!(
        pair(r#"{"memoryEvictLowerPercent": 70}"#),
        vec![format!(
            "{k}: clusterStrategy.memoryEvictLowerPercent: 70 must be below memoryEvictThresholdPercent (70)"
        )]
    );
    assert!(
        pair(r#"{"memoryAllocatableEvictThresholdPercent": 110, "memoryAllocatableEvictLowerPercent": 100}"#)
            .is_empty()
    );
    assert_eq!(
        pair(r#"{"memoryAllocatableEvictThresholdPercent": 100, "memoryAllocatableEvictLowerPercent": 100}"#)
            .len(),
        1
    );
}

#[test]
fn node_entries_are_validated_after_merge_without_repeating_cluster_errors() {
    let k = "resource-threshold-config";
    // The node entry sets lower >= the inherited threshold.
    let e = errors(
        k,
        r#"{"clusterStrategy": {"memoryEvictThresholdPercent": 60},
            "nodeStrategies": [{"nodeSelector": {}, "memoryEvictLowerPercent": 65}]}"#,
    );
    assert_eq!(
        e,
        vec![format!(
            "{k}: nodeStrategies[0].memoryEvictLowerPercent: 65 must be below memoryEvictThresholdPercent (60)"
        )]
    );
    // A cluster error inherited by the node entry is reported once.
    let e = errors(
        k,
        r#"{"clusterStrategy": {"cpuSuppressThresholdPercent": 120}, "nodeStrategies": [{"nodeSelector": {}}]}"#,
    );
    assert_eq!(e.len(), 1, "{e:?}");
    // A bad selector is an error of the key.
    let e = errors(
        k,
        r#"{"nodeStrategies": [{"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}]}"#,
    );
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with(&format!("{k}: nodeStrategies[0].nodeSelector: invalid selector:")),
        "{e:?}"
    );
    // Wrong JSON types name the path.
    let e = errors(
        k,
        r#"{"nodeStrategies": [{"nodeSelector": {}, "cpuSuppressThresholdPercent": "high"}]}"#,
    );
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with(&format!("{k}: nodeStrategies")), "{e:?}");
    assert!(errors(k, "[1, 2]")[0].ends_with("expected a JSON object, found an array"));
}

#[test]
fn burst_ranges_and_pod_strategies() {
    check_cluster(
        "cpu-burst-config",
        &[
            ("cpuBurstPercent", "1", "0", "0 is below 1"),
            ("cpuBurstPercent", "10000", "10001", "10001 is above 10000"),
            ("cfsQuotaBurstPercent", "100", "99", "99 is below 100"),
            ("cfsQuotaBurstPeriodSeconds", "-1", "-2", "-2 is below -1"),
            ("sharePoolThresholdPercent", "100", "101", "101 is above 100"),
        ],
    );
    let e = errors(
        "cpu-burst-config",
        r#"{"podStrategies": [{"cpuBurstConfig": {"cpuBurstPercent": 1}}, {"cpuBurstConfig": {"cpuBurstPercent": 0}},
                              {"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}],
            "nodeStrategies": [{"nodeSelector": {}}]}"#,
    );
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!(
        e[0],
        "cpu-burst-config: podStrategies[1].cpuBurstConfig.cpuBurstPercent: 0 is below 1"
    );
    assert!(
        e[1].starts_with("cpu-burst-config: podStrategies[2].podSelector: invalid selector:"),
        "{e:?}"
    );
}

#[test]
fn system_ranges() {
    check_cluster(
        "system-config",
        &[
            ("minFreeKbytesFactor", "1", "0", "0 is below 1"),
            ("watermarkScaleFactor", "400", "401", "401 is above 400"),
            ("watermarkScaleFactor", "1", "0", "0 is below 1"),
            ("memcgReapBackGround", "1", "2", "2 is above 1"),
            ("schedGroupIdentityEnabled", "0", "-1", "-1 is below 0"),
            ("pageCacheLimitEnabled", "1", "2", "2 is above 1"),
            (
                "totalNetworkBandwidth",
                r#""10G""#,
                r#""10GB""#,
                r#""10GB" is not a valid non-negative quantity"#,
            ),
            (
                "totalNetworkBandwidth",
                r#""0""#,
                r#""-1M""#,
                r#""-1M" is not a valid non-negative quantity"#,
            ),
        ],
    );
}

#[test]
fn qos_ranges() {
    let k = "resource-qos-config";
    let cases: [(&str, &str, &str, &str); 17] = [
        ("cpuQOS", "groupIdentity", "-1", "-2"),
        ("cpuQOS", "groupIdentity", "2", "3"),
        ("cpuQOS", "schedIdle", "1", "2"),
        ("memoryQOS", "minLimitPercent", "100", "101"),
        ("memoryQOS", "throttlingPercent", "0", "-1"),
        ("memoryQOS", "wmarkRatio", "100", "101"),
        ("memoryQOS", "wmarkScalePermill", "1", "0"),
        ("memoryQOS", "wmarkScalePermill", "1000", "1001"),
        ("memoryQOS", "wmarkMinAdj", "-25", "-26"),
        ("memoryQOS", "wmarkMinAdj", "50", "51"),
        ("memoryQOS", "priority", "12", "13"),
        ("memoryQOS", "oomKillGroup", "1", "2"),
        ("memoryQOS", "pageCacheLimitPercent", "100", "101"),
        ("memoryQOS", "pageCacheLimitPercent", "0", "-1"),
        ("memoryQOS", "pageCacheLimitSize", "0", "-1"),
        ("resctrlQOS", "mbaPercent", "100", "101"),
        ("networkQOS", "egressLimit", "100", "101"),
    ];
    for (group, field, good, bad) in cases {
        let j =
            |v: &str| format!(r#"{{"clusterStrategy": {{"beClass": {{"{group}": {{"{field}": {v}}}}}}}}}"#);
        assert_eq!(
            errors(k, &j(good)),
            Vec::<String>::new(),
            "{group}.{field}={good}"
        );
        let e = errors(k, &j(bad));
        assert_eq!(e.len(), 1, "{group}.{field}={bad}: {e:?}");
        assert!(
            e[0].starts_with(&format!(
                "{k}: clusterStrategy.beClass.{group}.{field}: {bad} is "
            )),
            "{e:?}"
        );
    }
    let resctrl = |s: i64, e: i64| {
        errors(
            k,
            &format!(
                r#"{{"clusterStrategy": {{"lsClass": {{"resctrlQOS": {{"catRangeStartPercent": {s}, "catRangeEndPercent": {e}}}}}}}}}"#
            ),
        )
    };
    assert!(resctrl(29, 30).is_empty());
    assert_eq!(
        resctrl(30, 30),
        vec![format!(
            "{k}: clusterStrategy.lsClass.resctrlQOS.catRangeStartPercent: 30 must be below catRangeEndPercent (30)"
        )]
    );
    let blk = |t: &str, w: i64| {
        errors(
            k,
            &format!(
                r#"{{"clusterStrategy": {{"lsClass": {{"blkioQOS": {{"blocks": [{{"type": "{t}", "ioCfg": {{"ioWeightPercent": {w}}}}}]}}}}}}}}"#
            ),
        )
    };
    assert!(blk("device", 100).is_empty());
    assert_eq!(blk("device", 0).len(), 1);
    assert_eq!(blk("disk", 50).len(), 1);
    assert!(blk("podvolume", 1).is_empty());
}

#[test]
fn qos_network_formats_and_sums() {
    let k = "resource-qos-config";
    let net = |ls: &str, be: &str| {
        errors(
            k,
            &format!(
                r#"{{"clusterStrategy": {{"lsClass": {{"networkQOS": {ls}}}, "beClass": {{"networkQOS": {be}}}}}}}"#
            ),
        )
    };
    assert!(net(r#"{"ingressRequest": 60}"#, r#"{"ingressRequest": 40}"#).is_empty());
    assert_eq!(
        net(r#"{"ingressRequest": 60}"#, r#"{"ingressRequest": 41}"#),
        vec![format!(
            "{k}: clusterStrategy: sum of LSR+LS+BE networkQOS.ingressRequest is 101, above 100"
        )]
    );
    assert!(net(r#"{"egressRequest": "50M"}"#, r#"{"egressLimit": "1G"}"#).is_empty());
    assert_eq!(
        net(r#"{"egressRequest": "50M"}"#, r#"{"egressLimit": 10}"#).len(),
        1
    );
    assert_eq!(net(r#"{"egressRequest": "fast"}"#, r#"{}"#).len(), 1);
}

#[test]
fn colocation_rules() {
    let k = "colocation-config";
    let cases: [(&str, &str, &str, &str); 14] = [
        ("metricAggregateDurationSeconds", "1", "0", "0 is below 1"),
        ("metricReportIntervalSeconds", "1", "0", "0 is below 1"),
        ("cpuReclaimThresholdPercent", "150", "-1", "-1 is below 0"),
        ("memoryReclaimThresholdPercent", "0", "-1", "-1 is below 0"),
        ("degradeTimeMinutes", "1", "0", "0 is below 1"),
        ("updateTimeThresholdSeconds", "1", "0", "0 is below 1"),
        ("resourceDiffThreshold", "1", "0", "0 is not in (0, 1]"),
        ("resourceDiffThreshold", "0.01", "1.5", "1.5 is not in (0, 1]"),
        ("midCPUThresholdPercent", "100", "101", "101 is above 100"),
        ("midUnallocatedPercent", "0", "-1", "-1 is below 0"),
        ("midStaticMemoryReservedPercent", "100", "101", "101 is above 100"),
        ("batchCPUThresholdPercent", "0", "-1", "-1 is below 0"),
        (
            "cpuCalculatePolicy",
            r#""maxUsageRequest""#,
            r#""request""#,
            r#""request" is not one of usage, maxUsageRequest"#,
        ),
        (
            "metricMemoryCollectPolicy",
            r#""usageWithPageCache""#,
            r#""all""#,
            r#""all" is not one of usageWithoutPageCache, usageWithHotPageCache, usageWithPageCache"#,
        ),
    ];
    for (field, good, bad, message) in cases {
        assert_eq!(
            errors(k, &format!(r#"{{"{field}": {good}}}"#)),
            Vec::<String>::new(),
            "{field}={good}"
        );
        assert_eq!(
            errors(k, &format!(r#"{{"{field}": {bad}}}"#)),
            vec![format!("{k}: {field}: {message}")],
            "{field}={bad}"
        );
    }
    assert!(
        errors(
            k,
            r#"{"memoryCalculatePolicy": "request", "midReclaimMode": "static"}"#
        )
        .is_empty()
    );
    assert_eq!(errors(k, r#"{"midReclaimMode": "dynamic"}"#).len(), 1);
    assert_eq!(
        errors(
            k,
            r#"{"metricAggregatePolicy": {"durations": ["5m", "5 minutes"]}}"#
        ),
        vec![format!(
            r#"{k}: metricAggregatePolicy.durations[1]: "5 minutes" is not a positive duration such as 5m or 1h30m"#
        )]
    );
    assert_eq!(
        errors(
            k,
            r#"{"nodeConfigs": [{"nodeSelector": {}, "degradeTimeMinutes": 0}]}"#
        ),
        vec![format!("{k}: nodeConfigs[0].degradeTimeMinutes: 0 is below 1")]
    );
}

#[test]
fn normalization_amplification_and_host_application_rules() {
    let e = errors(
        "cpu-normalization-config",
        r#"{"defaultRatio": 1.0, "ratioModel": {"Xeon": {"baseRatio": 5.0}}}"#,
    );
    assert!(e.is_empty(), "{e:?}");
    let e = errors(
        "cpu-normalization-config",
        r#"{"ratioModel": {"Xeon": {"baseRatio": 5.5}}, "defaultRatio": 0.9}"#,
    );
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e.contains(&"cpu-normalization-config: ratioModel.Xeon.baseRatio: 5.5 is not in [1, 5]".to_owned())
    );
    assert!(
        errors(
            "resource-amplification-config",
            r#"{"resourceAmplificationRatio": {"cpu": 1.0}}"#
        )
        .is_empty()
    );
    assert_eq!(
        errors(
            "resource-amplification-config",
            r#"{"resourceAmplificationRatio": {"cpu": 0.5}}"#
        ),
        vec!["resource-amplification-config: resourceAmplificationRatio.cpu: 0.5 is not in [1, +inf)"]
    );
    let e = errors(
        "host-application-config",
        r#"{"applications": [{"name": "a", "qos": "LS"}, {"name": "b", "qos": "XX"}],
            "nodeConfigs": [{"nodeSelector": {}, "applications": [{"name": "c", "priority": "koord-low"}]}]}"#,
    );
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("host-application-config: applications[1].qos:"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("host-application-config: nodeConfigs[0].applications[0].priority:"),
        "{e:?}"
    );
}

#[test]
fn webhook_node_entry_facts() {
    let parsed = SloConfig::parse(&data(&[(
        "resource-threshold-config",
        r#"{"nodeStrategies": [
            {"name": "a", "nodeSelector": {"matchLabels": {"pool": "a"}}},
            {"name": "no-selector"},
            {"name": "empty", "nodeSelector": {}},
            {"name": "a-gpu", "nodeSelector": {"matchLabels": {"pool": "a", "gpu": "true"}}},
            {"name": "b", "nodeSelector": {"matchLabels": {"pool": "b"}}}
        ]}"#,
    )]));
    let cfg = parsed.into_config().unwrap();
    let (errors, overlaps) = node_entry_problems(ConfigKey::ResourceThreshold, &cfg.resource_threshold);
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        vec![
            "resource-threshold-config: nodeStrategies[1].nodeSelector: must not be empty: set matchLabels or matchExpressions",
            "resource-threshold-config: nodeStrategies[2].nodeSelector: must not be empty: set matchLabels or matchExpressions",
        ]
    );
    let pairs: Vec<(usize, usize)> = overlaps.iter().map(|o| (o.first, o.second)).collect();
    // `{}` overlaps everything; pool=a implies pool=a,gpu=true.
    assert_eq!(pairs, vec![(0, 2), (0, 3), (2, 3), (2, 4)]);
}

#[test]
fn webhook_name_check() {
    let cfg = SloConfig::parse(&data(&[(
        "cpu-burst-config",
        r#"{"nodeStrategies": [
            {"name": "a", "nodeSelector": {"matchLabels": {"pool": "a"}}},
            {"nodeSelector": {"matchLabels": {"pool": "b"}}},
            {"name": "a", "nodeSelector": {"matchLabels": {"pool": "c"}}},
            {"name": "d", "nodeSelector": {"matchLabels": {"pool": "d"}}}
        ]}"#,
    )]))
    .into_config()
    .unwrap();
    let messages: Vec<String> = node_entry_name_errors(ConfigKey::CpuBurst, &cfg.cpu_burst)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        messages,
        vec![
            "cpu-burst-config: nodeStrategies[1].name: must be set: node entries need a unique name",
            "cpu-burst-config: nodeStrategies[2].name: \"a\" is already the name of entry 0",
        ]
    );
}

#[test]
fn type_errors_name_the_field() {
    let cases = [
        (
            "resource-threshold-config",
            r#"{"nodeStrategies": [{"nodeSelector": {}, "cpuSuppressThresholdPercent": "high"}]}"#,
            r#"resource-threshold-config: nodeStrategies[0].cpuSuppressThresholdPercent: invalid type: string "high", expected i64"#,
        ),
        (
            "resource-threshold-config",
            r#"{"clusterStrategy": {"cpuSuppressThresholdPercent": 1.5}}"#,
            "resource-threshold-config: clusterStrategy.cpuSuppressThresholdPercent: invalid type: floating point `1.5`, expected i64",
        ),
        (
            "colocation-config",
            r#"{"enable": "yes"}"#,
            r#"colocation-config: enable: invalid type: string "yes", expected a boolean"#,
        ),
        (
            "colocation-config",
            r#"{"nodeConfigs": [{"nodeSelector": {"matchLabels": {"a": 1}}}]}"#,
            "colocation-config: nodeConfigs[0].nodeSelector.matchLabels.a: invalid type: integer `1`, expected a string",
        ),
        (
            "cpu-burst-config",
            r#"{"podStrategies": [{"overridePod": "true"}]}"#,
            r#"cpu-burst-config: podStrategies[0].overridePod: invalid type: string "true", expected a boolean"#,
        ),
        (
            "resource-qos-config",
            r#"{"clusterStrategy": {"lsClass": {"networkQOS": {"ingressRequest": [1]}}}}"#,
            "resource-qos-config: clusterStrategy.lsClass.networkQOS.ingressRequest: invalid type: sequence, expected IntOrString",
        ),
        (
            "colocation-config",
            r#"{"enable": true,}"#,
            "colocation-config: invalid JSON: trailing comma at line 1 column 17",
        ),
        (
            "system-config",
            r#"{"nodeStrategies": {}}"#,
            "system-config: nodeStrategies: expected an array, found an object",
        ),
    ];
    for (key, json, want) in cases {
        assert_eq!(errors(key, json), vec![want.to_owned()], "{key} {json}");
    }
}

#[test]
fn memory_qos_page_cache_fields_are_known() {
    // Upstream's MemoryQOS carries pageCache*; they must parse without "unknown field" warnings.
    let text = r#"{"clusterStrategy": {"beClass": {"memoryQOS": {"pageCacheEnable": true,
        "pageCacheLimitPercent": 80, "pageCacheLimitSize": 1073741824, "pageCacheReclaimSync": false}}}}"#;
    assert_eq!(errors("resource-qos-config", text), Vec::<String>::new());
    let parsed = SloConfig::parse(&data(&[("resource-qos-config", text)]));
    assert!(parsed.warnings().is_empty(), "{:?}", parsed.warnings());
}
