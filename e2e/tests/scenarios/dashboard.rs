//! The chart's Grafana dashboard (`charts/koordinator/dashboards/koordinator.json`) queries only
//! series the installed components really serve: every metric name in every panel's PromQL is
//! in the `/metrics` of a running koord-manager, koord-webhook, koordlet or
//! koord-scheduler-extender pod. Real cluster only (the embedded components do not serve their
//! registries on known ports).

use std::collections::BTreeSet;
use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

use crate::common;
use crate::env::{Env, Wanted};

const NAMESPACE: &str = "koordinator-system";

/// Every `expr` of the dashboard.
fn expressions(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dashboard];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("expr", Value::String(expr)) => out.push(expr.clone()),
                        _ => stack.push(v),
                    }
                }
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    out
}

/// The metric names a PromQL expression reads: identifiers outside label matchers, ranges and
/// grouping lists that are not function calls or keywords, plus the names a
/// `__name__=~"a|b"` matcher lists.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Keywords and the aggregation operators (`sum by (x) (...)` puts no `(` right after `sum`).
    const KEYWORDS: [&str; 21] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "sum",
        "avg",
        "count",
        "min",
        "max",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
    ];
    let mut names = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let (mut i, mut braces, mut brackets) = (0, 0usize, 0usize);
    let mut skip_list = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' => braces += 1,
            '}' => braces = braces.saturating_sub(1),
            '[' => brackets += 1,
            ']' => brackets = brackets.saturating_sub(1),
            '"' => {
                // A string: only `__name__` matchers name metrics.
                let start = i + 1;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += 1;
                }
                let literal: String = chars[start..i.min(chars.len())].iter().collect();
                let before: String = chars[..start].iter().collect();
                if before
                    .trim_end_matches(['"', '~', '=', ' '])
                    .ends_with("__name__")
                {
                    names.extend(literal.split('|').map(str::to_string));
                }
            }
            _ if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i + 1 < chars.len()
                    && (chars[i + 1].is_ascii_alphanumeric() || matches!(chars[i + 1], '_' | ':'))
                {
                    i += 1;
                }
                let word: String = chars[start..=i].iter().collect();
                let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
                if KEYWORDS.contains(&word.as_str()) {
                    // `by (a, b)`: a grouping list, not metric names.
                    skip_list = matches!(word.as_str(), "by" | "without" | "on" | "ignoring");
                } else if braces == 0
                    && brackets == 0
                    && !skip_list
                    && next != Some(&'(')
                    && !word.starts_with('$')
                {
                    names.insert(word);
                }
            }
            ')' => skip_list = false,
            _ => {}
        }
        i += 1;
    }
    // `$__rate_interval` and other Grafana variables are inside ranges or start with `$`.
    names.retain(|n| !n.is_empty() && n != "__rate_interval");
    names
}

/// Sample and family names of a Prometheus text exposition, with the suffixes a counter or a
/// histogram family is queried by.
fn served_names(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            names.insert(name.to_string());
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            names.insert(name.to_string());
        }
    }
    names
}

#[test]
fn promql_names_are_found_in_the_expressions() {
    let names = metric_names(
        r#"sum by (le, path) (rate(koord_webhook_admission_duration_seconds_bucket{path=~"a"}[$__rate_interval])) / 1000"#,
    );
    assert_eq!(
        names,
        BTreeSet::from(["koord_webhook_admission_duration_seconds_bucket".to_string()])
    );
    let names = metric_names(r#"count by (job, version) ({__name__=~"a_build_info|b_build_info"})"#);
    assert_eq!(
        names,
        BTreeSet::from(["a_build_info".to_string(), "b_build_info".to_string()])
    );
    assert_eq!(metric_names("koord_manager_config_key_invalid == 1").len(), 1);
    let served = served_names("# TYPE x counter\nx_total{a=\"1\"} 2\n# TYPE h histogram\n");
    assert!(served.contains("x_total") && served.contains("h_bucket"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_queries_only_series_the_components_serve() {
    let env = Env::start(Wanted::default()).await;
    if !env.is_real() {
        println!("skipped: the embedded components do not serve their registries on known ports");
        return;
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/koordinator/dashboards/koordinator.json"
    );
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let queried: BTreeSet<String> = expressions(&dashboard)
        .iter()
        .flat_map(|e| metric_names(e))
        .collect();
    assert!(queried.len() > 10, "{queried:?}");

    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    let mut served = BTreeSet::new();
    let mut scraped = Vec::new();
    for pod in pods
        .list(&ListParams::default().labels("koord-app"))
        .await
        .unwrap()
        .items
    {
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let app = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("koord-app"))
            .cloned()
            .unwrap_or_default();
        // The metrics port: `metrics`, or koordlet's one `http` port.
        let port = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .find_map(|p| {
                matches!(p.name.as_deref(), Some("metrics") | Some("http")).then_some(p.container_port)
            });
        let Some(port) = port else { continue };
        let addr: SocketAddr = format!("{ip}:{port}").parse().unwrap();
        let body = tokio::task::spawn_blocking(move || common::http_get(addr, "/metrics"))
            .await
            .unwrap();
        let Some((200, body)) = body else {
            panic!("{app} at {addr}: no /metrics")
        };
        served.extend(served_names(&body));
        scraped.push(app);
    }
    scraped.sort();
    scraped.dedup();
    for app in [
        "koord-manager",
        "koord-webhook",
        "koordlet",
        "koord-scheduler-extender",
    ] {
        assert!(
            scraped.iter().any(|s| s == app),
            "no {app} pod scraped: {scraped:?}"
        );
    }
    let missing: Vec<&String> = queried.iter().filter(|n| !served.contains(*n)).collect();
    println!(
        "dashboard: {} series queried, {} served by {scraped:?}",
        queried.len(),
        served.len()
    );
    assert!(
        missing.is_empty(),
        "the dashboard queries series no component serves: {missing:?}"
    );
}
