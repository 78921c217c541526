//! Pod-level CPU burst resolution (seed 000 semantics).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use koord_api::config::{BurstSource, resolve_pod_burst, resolve_pod_burst_for};
use koord_api::nodeslo::{CpuBurstConfig, CpuBurstPodStrategy, CpuBurstPolicy, CpuBurstStrategy};
use pretty_assertions::assert_eq;

use super::map;

fn node_strategy(pods: Vec<CpuBurstPodStrategy>) -> CpuBurstStrategy {
    CpuBurstStrategy {
        policy: Some(CpuBurstPolicy::CpuBurstOnly),
        cpu_burst_percent: Some(1000),
        cfs_quota_burst_percent: Some(300),
        cfs_quota_burst_period_seconds: Some(-1),
        share_pool_threshold_percent: Some(50),
        pod_strategies: Some(pods),
    }
}

fn payment(override_pod: bool) -> CpuBurstPodStrategy {
    CpuBurstPodStrategy {
        namespace: Some("frontend".to_owned()),
        pod_selector: Some(LabelSelector {
            match_labels: Some(map(&[("app", "payment")])),
            match_expressions: None,
        }),
        override_pod: Some(override_pod),
        cpu_burst_config: Some(CpuBurstConfig {
            policy: Some(CpuBurstPolicy::Auto),
            cpu_burst_percent: Some(100),
            cfs_quota_burst_percent: None,
            cfs_quota_burst_period_seconds: Some(10),
        }),
    }
}

const ANNOTATION: &str = "koordinator.sh/cpuBurst";

#[test]
fn no_strategy_matches_node_config_applies() {
    let s = node_strategy(vec![payment(true)]);
    let d = resolve_pod_burst(&s, "other", &map(&[("app", "payment")]), &map(&[]));
    assert_eq!(d.source, BurstSource::Node);
    assert_eq!(d.config, s.config());
    let d = resolve_pod_burst(&s, "frontend", &map(&[("app", "web")]), &map(&[]));
    assert_eq!(d.source, BurstSource::Node);
}

#[test]
fn no_match_with_annotation_overlays_node_config() {
    let s = node_strategy(vec![payment(true)]);
    let d = resolve_pod_burst(
        &s,
        "other",
        &map(&[]),
        &map(&[(ANNOTATION, r#"{"cpuBurstPercent": 200}"#)]),
    );
    assert_eq!(d.source, BurstSource::PodAnnotation);
    assert_eq!(d.config.cpu_burst_percent, Some(200));
    assert_eq!(d.config.policy, Some(CpuBurstPolicy::CpuBurstOnly));
}

#[test]
fn matching_strategy_without_annotation() {
    let s = node_strategy(vec![payment(false)]);
    let d = resolve_pod_burst(&s, "frontend", &map(&[("app", "payment")]), &map(&[]));
    assert_eq!(
        d.source,
        BurstSource::PodStrategy {
            index: 0,
            override_pod: false,
            with_annotation: false
        }
    );
    assert_eq!(
        d.config,
        CpuBurstConfig {
            policy: Some(CpuBurstPolicy::Auto),
            cpu_burst_percent: Some(100),
            cfs_quota_burst_percent: Some(300),
            cfs_quota_burst_period_seconds: Some(10),
        }
    );
}

#[test]
fn override_true_strategy_beats_annotation() {
    let s = node_strategy(vec![payment(true)]);
    let ann = map(&[(
        ANNOTATION,
        r#"{"policy": "none", "cpuBurstPercent": 5, "cfsQuotaBurstPercent": 150}"#,
    )]);
    let d = resolve_pod_burst(&s, "frontend", &map(&[("app", "payment")]), &ann);
    assert_eq!(
        d.source,
        BurstSource::PodStrategy {
            index: 0,
            override_pod: true,
            with_annotation: true
        }
    );
    assert_eq!(d.config.policy, Some(CpuBurstPolicy::Auto));
    assert_eq!(d.config.cpu_burst_percent, Some(100));
    // Fields the strategy leaves unset come from the annotation.
    assert_eq!(d.config.cfs_quota_burst_percent, Some(150));
}

#[test]
fn override_false_annotation_beats_strategy() {
    let s = node_strategy(vec![payment(false)]);
    let ann = map(&[(ANNOTATION, r#"{"Policy": "none", "cpuBurstPercent": 5}"#)]);
    let d = resolve_pod_burst(&s, "frontend", &map(&[("app", "payment")]), &ann);
    assert_eq!(d.config.policy, Some(CpuBurstPolicy::None));
    assert_eq!(d.config.cpu_burst_percent, Some(5));
    assert_eq!(d.config.cfs_quota_burst_period_seconds, Some(10));
}

#[test]
fn invalid_annotation_is_ignored_with_a_reason() {
    let s = node_strategy(vec![payment(false)]);
    for bad in ["{not json", r#"{"policy": "turbo"}"#, "[1]"] {
        let d = resolve_pod_burst(
            &s,
            "frontend",
            &map(&[("app", "payment")]),
            &map(&[(ANNOTATION, bad)]),
        );
        assert_eq!(
            d.source,
            BurstSource::PodStrategy {
                index: 0,
                override_pod: false,
                with_annotation: false
            },
            "{bad}"
        );
        assert_eq!(d.config.cpu_burst_percent, Some(100));
        assert!(d.annotation_error.is_some(), "{bad}");
        let d = resolve_pod_burst(&s, "other", &map(&[]), &map(&[(ANNOTATION, bad)]));
        assert_eq!(d.source, BurstSource::Node);
        assert_eq!(d.config, s.config());
    }
}

#[test]
fn first_match_wins_unset_namespace_and_empty_selector_match_all() {
    let catch_all = CpuBurstPodStrategy {
        namespace: None,
        pod_selector: Some(LabelSelector::default()),
        override_pod: None,
        cpu_burst_config: Some(CpuBurstConfig {
            cpu_burst_percent: Some(42),
            ..Default::default()
        }),
    };
    let bad_selector = CpuBurstPodStrategy {
        pod_selector: Some(LabelSelector {
            match_labels: Some(map(&[("bad key!", "x")])),
            match_expressions: None,
        }),
        ..catch_all.clone()
    };
    let s = node_strategy(vec![bad_selector, payment(true), catch_all]);
    let d = resolve_pod_burst(&s, "frontend", &map(&[("app", "payment")]), &map(&[]));
    assert_eq!(
        d.source,
        BurstSource::PodStrategy {
            index: 1,
            override_pod: true,
            with_annotation: false
        }
    );
    assert_eq!(d.skipped_strategies.len(), 1);
    let d = resolve_pod_burst(&s, "anywhere", &map(&[]), &map(&[]));
    assert_eq!(
        d.source,
        BurstSource::PodStrategy {
            index: 2,
            override_pod: false,
            with_annotation: false
        }
    );
    assert_eq!(d.config.cpu_burst_percent, Some(42));
}

#[test]
fn pod_object_and_empty_namespace_strategy() {
    let any_ns = CpuBurstPodStrategy {
        namespace: Some(String::new()),
        ..payment(true)
    };
    let s = node_strategy(vec![any_ns]);
    let pod = Pod {
        metadata: ObjectMeta {
            namespace: Some("shop".to_owned()),
            labels: Some(map(&[("app", "payment")])),
            annotations: Some(map(&[(ANNOTATION, r#"{"cfsQuotaBurstPercent": 250}"#)])),
            ..Default::default()
        },
        ..Default::default()
    };
    let d = resolve_pod_burst_for(&s, &pod);
    assert_eq!(
        d.source,
        BurstSource::PodStrategy {
            index: 0,
            override_pod: true,
            with_annotation: true
        }
    );
    assert_eq!(d.config.cpu_burst_percent, Some(100));
    assert_eq!(d.config.cfs_quota_burst_percent, Some(250));
    let d = resolve_pod_burst_for(&s, &Pod::default());
    assert_eq!(d.source, BurstSource::Node);
}
