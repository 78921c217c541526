//! The chart's Grafana dashboard (`charts/koordinator/dashboards/koordinator.json`) queries only
//! series the installed components really serve: every metric name in every panel's PromQL is
//! in the `/metrics` of a running koord-manager, koord-webhook, koordlet or
//! koord-scheduler-extender pod. Real cluster only (the embedded components do not serve their
//! registries on known ports).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use koord_api::names::{DEFAULT_SLO_CONFIG_NAME, KEY_CPU_BURST_CONFIG, KEY_RESOURCE_THRESHOLD_CONFIG};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::env::{Cleanup, Env, Load, Wanted};
use crate::{colocation, common, eviction};

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

/// A component pod's metrics endpoint.
pub(crate) struct Target {
    /// The pod's `koord-app` label: the component.
    pub app: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's UID (its cgroup directory is `pod<uid>`).
    pub uid: String,
    /// The memory limits of the pod's containers, summed (bytes; None when one has none).
    pub memory_limit: Option<i64>,
    /// The pod's IP and its `metrics` port (koordlet's one `http` port).
    pub addr: SocketAddr,
}

impl Target {
    /// The pod's `/metrics` text; None when it does not answer 200.
    pub async fn scrape(&self) -> Option<String> {
        let addr = self.addr;
        match tokio::task::spawn_blocking(move || common::http_get(addr, "/metrics")).await {
            Ok(Some((200, body))) => Some(body),
            _ => None,
        }
    }
}

/// The metrics endpoints of every running component pod of the release.
pub(crate) async fn targets(client: &kube::Client) -> Vec<Target> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut out = Vec::new();
    let Ok(list) = pods.list(&ListParams::default().labels("koord-app")).await else {
        return out;
    };
    for pod in list.items {
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
        let port = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .find_map(|p| {
                matches!(p.name.as_deref(), Some("metrics") | Some("http")).then_some(p.container_port)
            });
        let Some(port) = port else { continue };
        let Ok(addr) = format!("{ip}:{port}").parse() else {
            continue;
        };
        let memory_limit = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| {
                let limits = c.resources.as_ref()?.limits.as_ref()?;
                common::quantity_value(limits.get("memory")?)
            })
            .sum();
        let uid = pod.metadata.uid.unwrap_or_default();
        let pod = pod.metadata.name.unwrap_or_default();
        out.push(Target {
            app,
            pod,
            uid,
            memory_limit,
            addr,
        });
    }
    out
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

    let mut served = BTreeSet::new();
    let mut scraped = Vec::new();
    for target in targets(&env.client).await {
        let body = target
            .scrape()
            .await
            .unwrap_or_else(|| panic!("{} at {}: no /metrics", target.pod, target.addr));
        served.extend(served_names(&body));
        scraped.push(target.app);
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

/// Where [`record_dashboard_story`] writes its recording (`scripts/dashboard.sh record` sets it).
const ENV_RECORDING: &str = "KOORD_DASHBOARD_RECORDING";

/// How often the recorder scrapes each component, as a Prometheus scrape interval.
const SCRAPE_INTERVAL: Duration = Duration::from_secs(5);

/// One sample line of a text exposition as an OpenMetrics sample line: `own` (the labels a
/// Prometheus scrape adds, rendered `a="x",b="y"`) first, and `timestamp` (seconds). None for
/// comments, blank lines and lines that are not a sample.
fn relabel(line: &str, own: &str, timestamp: f64) -> Option<String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let (name, rest) = line.split_at(name_end);
    let (labels, rest) = match rest.strip_prefix('{') {
        Some(body) => {
            // The closing brace outside quoted label values.
            let (mut quoted, mut escaped, mut end) = (false, false, None);
            for (i, c) in body.char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' if quoted => escaped = true,
                    '"' => quoted = !quoted,
                    '}' if !quoted => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end?;
            (body[..end].trim().trim_end_matches(','), &body[end + 1..])
        }
        None => ("", rest),
    };
    let value = rest.split_whitespace().next()?;
    let labels = if labels.is_empty() {
        own.to_string()
    } else {
        format!("{own},{labels}")
    };
    Some(format!("{name}{{{labels}}} {value} {timestamp:.3}\n"))
}

/// Scrapes every component pod every [`SCRAPE_INTERVAL`] until `stop`, as Prometheus would
/// (`job` = the component, `instance` = the pod's endpoint, `up` per target); returns the
/// samples as OpenMetrics text.
async fn record(client: kube::Client, stop: tokio_util::sync::CancellationToken) -> String {
    let mut out = String::new();
    let mut ticks = tokio::time::interval(SCRAPE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ticks.tick() => {}
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        for target in targets(&client).await {
            let addr = target.addr;
            let body = target.scrape().await;
            // What the chart's ServiceMonitor/PodMonitor targets carry.
            let own = format!(
                "job=\"{}\",instance=\"{addr}\",namespace=\"{NAMESPACE}\",pod=\"{}\"",
                target.app, target.pod
            );
            let up = match body {
                Some(body) => {
                    out.extend(body.lines().filter_map(|l| relabel(l, &own, now)));
                    1
                }
                None => 0,
            };
            out.push_str(&format!("up{{{own}}} {up} {now:.3}\n"));
        }
    }
    out.push_str("# EOF\n");
    out
}

/// Records the scrape `scripts/dashboard.sh render` shows the chart's dashboard against: the
/// installed components scraped every 5 s while a short story plays on the real cluster (LS
/// and BE pods burning CPU, a ConfigMap key broken for a minute, BE pods evicted and one kept by
/// a PodDisruptionBudget). `scripts/dashboard.sh record` runs it and compresses the result into
/// `charts/koordinator/dashboards/preview/recording.om.gz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "records the dashboard preview's scrape: scripts/dashboard.sh record"]
async fn record_dashboard_story() {
    let Ok(out) = std::env::var(ENV_RECORDING) else {
        println!("skipped: {ENV_RECORDING} (the recording's path) is not set");
        return;
    };
    let env = Env::start(Wanted::default()).await;
    if !env.is_real() {
        println!("skipped: the embedded components do not serve their registries on known ports");
        return;
    }
    let node = env.node_names().await.into_iter().next().expect("a Ready node");
    let start = std::time::Instant::now();
    let act = |what: &str| println!("story: {:>4} s  {what}", start.elapsed().as_secs());
    let stop = tokio_util::sync::CancellationToken::new();
    let recorder = tokio::spawn(record(env.client.clone(), stop.clone()));
    let pause = |seconds| tokio::time::sleep(Duration::from_secs(seconds));

    act("idle node");
    pause(45).await;

    act("an LS pod and a BE pod burn a core each; an idle BE pod under a PodDisruptionBudget");
    let ls = env.namespace("story-ls", json!({})).await;
    let ls_pod = env.pod(
        "ls-burn",
        json!({"app": "ls-burn"}),
        vec![env.container(
            "main",
            Load::BurnOneCore,
            json!({"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}),
        )],
    );
    Api::<Pod>::namespaced(env.client.clone(), ls.ns())
        .create(&PostParams::default(), &ls_pod)
        .await
        .unwrap();
    let be = colocation::colocation(&env).await;
    let be_ns = be.ns().to_string();
    // Mutated by the profile: 100 batch-cpu requested, a whole core as its limit.
    let be_burn = env.pod(
        "be-burn",
        json!({"app": "be-burn"}),
        vec![env.container(
            "main",
            Load::BurnOneCore,
            json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}),
        )],
    );
    common::wait_for_batch_cpu(&env.client, 100).await;
    common::create_until_mutated_to_be(&Api::namespaced(env.client.clone(), &be_ns), &be_burn).await;
    eviction::be_pod(&env, &be, "be-guarded", &node, Load::Idle).await;
    eviction::pod_disruption_budget(&env, &be_ns, "be-guarded").await;
    env.wait_running(ls.ns(), "ls-burn").await;
    pause(120).await;

    act("cpu-burst-config broken for a minute (written around the validating webhook)");
    break_config_key(&env.client, KEY_CPU_BURST_CONFIG, Duration::from_secs(60)).await;

    act("memory eviction threshold at 1 %: BE pods evicted, the guarded one refused");
    let mut threshold = Cleanup::new(env.client.clone());
    threshold
        .set_config(KEY_RESOURCE_THRESHOLD_CONFIG, eviction::EVICT_EVERYTHING)
        .await
        .unwrap();
    pause(45).await;
    drop(threshold);

    act("threshold restored; the story's namespaces deleted");
    drop(be);
    drop(ls);
    pause(60).await;

    act("done");
    stop.cancel();
    let text = recorder.await.unwrap();
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    std::fs::write(&out, text).unwrap();
    println!(
        "story: recorded {samples} samples over {} s into {out}",
        start.elapsed().as_secs()
    );
}

/// Writes a value no parser accepts into `key` of the `slo-controller-config` ConfigMap for
/// `duration`, then restores it: what an edit made while the validating webhook cannot see the
/// ConfigMap does (before Kubernetes 1.21 the chart selects the ConfigMap by its
/// `app.kubernetes.io/component: config` label, so the label is taken off first; for an
/// UPDATE the API server asks the webhook when the old or the new object matches).
async fn break_config_key(client: &kube::Client, key: &str, duration: Duration) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let current = api.get(DEFAULT_SLO_CONFIG_NAME).await.unwrap();
    let old = current.data.as_ref().and_then(|d| d.get(key)).cloned();
    let label = current
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CONFIG_LABEL))
        .cloned();
    // Restores the key and the label also when a patch below fails.
    let _restore = ConfigMapRestore {
        api: api.clone(),
        body: json!({"metadata": {"labels": {CONFIG_LABEL: label}}, "data": {key: old}}),
    };
    for body in [
        json!({"metadata": {"labels": {CONFIG_LABEL: null}}}),
        json!({"data": {key: "{not json"}}),
    ] {
        api.patch(
            DEFAULT_SLO_CONFIG_NAME,
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(duration).await;
}

/// Merge-patches `body` into the `slo-controller-config` on drop.
struct ConfigMapRestore {
    api: Api<ConfigMap>,
    body: Value,
}

impl Drop for ConfigMapRestore {
    fn drop(&mut self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let patch = Patch::Merge(&self.body);
        let result = tokio::task::block_in_place(|| {
            handle.block_on(
                self.api
                    .patch(DEFAULT_SLO_CONFIG_NAME, &PatchParams::default(), &patch),
            )
        });
        if let Err(e) = result {
            eprintln!("cleanup: restoring {DEFAULT_SLO_CONFIG_NAME}: {e}");
        }
    }
}

/// The label the chart's ConfigMap webhook selects the `slo-controller-config` by before 1.21.
const CONFIG_LABEL: &str = "app.kubernetes.io/component";

#[test]
fn samples_are_relabelled_as_a_scrape_would() {
    let own = r#"job="koordlet",instance="10.0.0.1:9316""#;
    let line = relabel(r#"x_total{a="}",b="c\"}"} 3"#, own, 12.5);
    assert_eq!(
        line.as_deref(),
        Some(
            r#"x_total{job="koordlet",instance="10.0.0.1:9316",a="}",b="c\"}"} 3 12.500"#.to_string() + "\n"
        )
        .as_deref()
    );
    assert_eq!(
        relabel("up 1", "j=\"j\"", 1.0).as_deref(),
        Some("up{j=\"j\"} 1 1.000\n")
    );
    assert_eq!(relabel("# TYPE x counter", own, 1.0), None);
    assert_eq!(
        relabel("x{a=\"1\",} 2", "j=\"j\"", 1.0).as_deref(),
        Some("x{j=\"j\",a=\"1\"} 2 1.000\n")
    );
}
