//! `resource-qos-config` network bandwidth requests against `system-config`'s
//! `totalNetworkBandwidth`, cluster strategy and node entries, quantity and percent forms.

use koord_api::config::SloConfig;
use pretty_assertions::assert_eq;

use super::data;

/// Error messages of resource-qos-config with `qos` and `system` as the two keys' JSON.
fn errors(qos: &str, system: Option<&str>) -> Vec<String> {
    let mut pairs = vec![("resource-qos-config", qos)];
    if let Some(s) = system {
        pairs.push(("system-config", s));
    }
    let parsed = SloConfig::parse(&data(&pairs));
    parsed
        .errors()
        .iter()
        .flat_map(|k| k.errors.iter().map(ToString::to_string))
        .collect()
}

fn classes(ls: &str, be: &str) -> String {
    format!(r#"{{"lsClass": {{"networkQOS": {ls}}}, "beClass": {{"networkQOS": {be}}}}}"#)
}

const K: &str = "resource-qos-config";
const SELECTOR: &str = r#"{"matchLabels": {"pool": "fast"}}"#;

#[test]
fn cluster_quantities_against_the_cluster_total() {
    let system = Some(r#"{"clusterStrategy": {"totalNetworkBandwidth": "1G"}}"#);
    // (ls, be, expected errors)
    let cases: [(&str, &str, Vec<String>); 6] = [
        (
            r#"{"ingressRequest": "600M"}"#,
            r#"{"ingressRequest": "400M"}"#,
            vec![],
        ),
        (
            r#"{"ingressRequest": "600M"}"#,
            r#"{"ingressRequest": "401M"}"#,
            vec![format!(
                "{K}: clusterStrategy: sum of LSR+LS+BE networkQOS.ingressRequest is 1001000000, \
                 above totalNetworkBandwidth 1000000000 of the system-config strategy for these nodes"
            )],
        ),
        (
            r#"{"egressRequest": "1Gi"}"#,
            r#"{}"#,
            vec![format!(
                "{K}: clusterStrategy: sum of LSR+LS+BE networkQOS.egressRequest is 1073741824, \
                 above totalNetworkBandwidth 1000000000 of the system-config strategy for these nodes"
            )],
        ),
        // Limits are not requests: not summed.
        (r#"{"ingressLimit": "2G"}"#, r#"{"egressLimit": "2G"}"#, vec![]),
        // Percent form: checked against 100 only.
        (r#"{"ingressRequest": 60}"#, r#"{"ingressRequest": 40}"#, vec![]),
        (
            r#"{"egressRequest": 70}"#,
            r#"{"egressRequest": 40}"#,
            vec![format!(
                "{K}: clusterStrategy: sum of LSR+LS+BE networkQOS.egressRequest is 110, above 100"
            )],
        ),
    ];
    for (ls, be, want) in cases {
        let qos = format!(r#"{{"clusterStrategy": {}}}"#, classes(ls, be));
        assert_eq!(errors(&qos, system), want, "{ls} {be}");
    }
}

#[test]
fn unknown_total_is_not_checked() {
    let qos = format!(
        r#"{{"clusterStrategy": {}}}"#,
        classes(r#"{"ingressRequest": "600M"}"#, r#"{"ingressRequest": "600M"}"#)
    );
    // No system-config (built-in "0") or an explicit "0": unknown, nodes may carry an annotation.
    assert_eq!(errors(&qos, None), Vec::<String>::new());
    assert_eq!(
        errors(
            &qos,
            Some(r#"{"clusterStrategy": {"totalNetworkBandwidth": "0"}}"#)
        ),
        Vec::<String>::new()
    );
}

#[test]
fn node_entries_use_the_system_entry_with_the_same_selector() {
    let qos = format!(
        r#"{{"clusterStrategy": {{}}, "nodeStrategies": [{{"nodeSelector": {SELECTOR}, "lsClass": {{"networkQOS": {{"ingressRequest": "5G"}}}}}}]}}"#
    );
    let over = format!(
        "{K}: nodeStrategies[0]: sum of LSR+LS+BE networkQOS.ingressRequest is 5000000000, \
         above totalNetworkBandwidth 1000000000 of the system-config strategy for these nodes"
    );
    // (system-config, expected)
    let cases: [(String, Vec<String>); 4] = [
        // The matching system node entry has 10G: fine.
        (
            format!(
                r#"{{"clusterStrategy": {{"totalNetworkBandwidth": "1G"}}, "nodeStrategies": [{{"nodeSelector": {SELECTOR}, "totalNetworkBandwidth": "10G"}}]}}"#
            ),
            vec![],
        ),
        // Only the cluster's 1G applies.
        (
            r#"{"clusterStrategy": {"totalNetworkBandwidth": "1G"}}"#.to_owned(),
            vec![over.clone()],
        ),
        // A system entry for other nodes does not count; the cluster's 1G applies.
        (
            r#"{"clusterStrategy": {"totalNetworkBandwidth": "1G"}, "nodeStrategies": [{"nodeSelector": {"matchLabels": {"pool": "slow"}}, "totalNetworkBandwidth": "10G"}]}"#
                .to_owned(),
            vec![over.clone()],
        ),
        // A matching system entry without its own total inherits the cluster's.
        (
            format!(
                r#"{{"clusterStrategy": {{"totalNetworkBandwidth": "1G"}}, "nodeStrategies": [{{"nodeSelector": {SELECTOR}, "watermarkScaleFactor": 150}}]}}"#
            ),
            vec![over],
        ),
    ];
    for (system, want) in cases {
        assert_eq!(errors(&qos, Some(&system)), want, "{system}");
    }
}

#[test]
fn an_inherited_excess_is_reported_once() {
    let qos = format!(
        r#"{{"clusterStrategy": {}, "nodeStrategies": [{{"nodeSelector": {SELECTOR}}}]}}"#,
        classes(r#"{"egressRequest": "2G"}"#, "{}")
    );
    let got = errors(
        &qos,
        Some(r#"{"clusterStrategy": {"totalNetworkBandwidth": "1G"}}"#),
    );
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with(&format!("{K}: clusterStrategy:")), "{got:?}");
}
