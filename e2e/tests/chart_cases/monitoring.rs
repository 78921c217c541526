//! The optional Prometheus Operator objects: metrics Services, the ServiceMonitor and the
//! PodMonitors, rendered only when enabled, each reaching exactly its component's metrics port.

use super::*;

/// (workload kind, workload name, metrics Service / PodMonitor name)
const COMPONENTS: &[(&str, &str)] = &[
    ("Deployment", "koord-manager"),
    ("Deployment", "koord-webhook"),
    ("Deployment", "koord-scheduler-extender"),
    ("DaemonSet", "koordlet"),
];

fn matches(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().unwrap();
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The port `--metrics-addr` of the component's container listens on.
fn metrics_port(workload: &Value) -> u64 {
    let args = container(workload)["args"].as_array().unwrap();
    let addr = args
        .iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix("--metrics-addr="))
        .unwrap();
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// The containerPort of the container port named `name`.
fn named_container_port(workload: &Value, name: &str) -> u64 {
    container(workload)["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no port {name}"))["containerPort"]
        .as_u64()
        .unwrap()
}

#[test]
fn nothing_is_rendered_for_prometheus_by_default() {
    let Some(helm) = chart_support::helm() else { return };
    let rendered = render(&helm, &[]);
    assert!(rendered.of_kind("ServiceMonitor").is_empty());
    assert!(rendered.of_kind("PodMonitor").is_empty());
    for (_, name) in COMPONENTS {
        assert!(!rendered.has("Service", &format!("{name}-metrics")));
    }
}

#[test]
fn the_service_monitor_scrapes_each_component_s_metrics_port_through_its_service() {
    let Some(helm) = chart_support::helm() else { return };
    for style in ["chart", "upstream"] {
        let style = format!("selectorStyle={style}");
        let rendered = render(
            &helm,
            &[
                style.as_str(),
                "serviceMonitor.enabled=true",
                "serviceMonitor.labels.release=prometheus",
                "serviceMonitor.interval=15s",
                // one port for health and metrics: the container names it `health`
                "manager.metricsPort=8000",
            ],
        );
        let monitors = rendered.of_kind("ServiceMonitor");
        assert_eq!(monitors.len(), 1);
        let monitor = monitors[0];
        assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
        assert_eq!(
            monitor["spec"]["namespaceSelector"]["matchNames"],
            json!([NAMESPACE])
        );
        // job = koord-app, as upstream's koordlet ServiceMonitor
        assert_eq!(monitor["spec"]["jobLabel"], "koord-app");
        let endpoints = monitor["spec"]["endpoints"].as_array().unwrap();
        let endpoint_ports: Vec<&str> = endpoints.iter().map(|e| e["port"].as_str().unwrap()).collect();
        assert_eq!(endpoint_ports, ["metrics", "koordlet-service"]);
        for endpoint in endpoints {
            assert_eq!(endpoint["path"], "/metrics");
            assert_eq!(endpoint["interval"], "15s");
        }
        let selector = &monitor["spec"]["selector"]["matchLabels"];

        // It selects exactly the three metrics Services, not the webhook's HTTPS Service.
        let selected: BTreeSet<&str> = rendered
            .of_kind("Service")
            .into_iter()
            .filter(|s| matches(selector, &s["metadata"]["labels"]))
            .map(|s| s["metadata"]["name"].as_str().unwrap())
            .collect();
        let expected: BTreeSet<String> = COMPONENTS.iter().map(|(_, n)| format!("{n}-metrics")).collect();
        assert_eq!(
            selected,
            expected.iter().map(String::as_str).collect::<BTreeSet<_>>(),
            "{style}"
        );

        for (kind, name) in COMPONENTS {
            let workload = rendered.get(kind, name);
            let service = rendered.get("Service", &format!("{name}-metrics"));
            serde_json::from_value::<k8s_openapi::api::core::v1::Service>(service.clone()).unwrap();
            assert_eq!(service["spec"]["clusterIP"], "None");
            let pod = &workload["spec"]["template"]["metadata"]["labels"];
            assert!(matches(&service["spec"]["selector"], pod), "{style} {name}");
            for (other_kind, other) in COMPONENTS.iter().filter(|c| c.1 != *name) {
                let other_pod = &rendered.get(other_kind, other)["spec"]["template"]["metadata"]["labels"];
                assert!(
                    !matches(&service["spec"]["selector"], other_pod),
                    "{name} {other}"
                );
            }
            let port = &service["spec"]["ports"][0];
            // upstream's koordlet Service names its port koordlet-service: ServiceMonitors
            // written for upstream (selector koord-app: koordlet) find this one
            let expected_name = if *name == "koordlet" {
                "koordlet-service"
            } else {
                "metrics"
            };
            assert_eq!(port["name"], expected_name);
            assert!(endpoint_ports.contains(&expected_name));
            assert_eq!(
                service["metadata"]["labels"]["koord-app"],
                workload["spec"]["template"]["metadata"]["labels"]["koord-app"]
            );
            let target = port["targetPort"].as_str().unwrap();
            assert_eq!(
                named_container_port(workload, target),
                metrics_port(workload),
                "{name}"
            );
            assert_eq!(port["port"].as_u64().unwrap(), metrics_port(workload), "{name}");
        }
    }

    // The Services alone, for scrapers without the operator.
    let services = render(&helm, &["metricsService.enabled=true"]);
    assert!(services.has("Service", "koordlet-metrics"));
    assert!(services.of_kind("ServiceMonitor").is_empty());
}

#[test]
fn each_pod_monitor_scrapes_its_component_s_pods_on_the_metrics_port() {
    let Some(helm) = chart_support::helm() else { return };
    let rendered = render(
        &helm,
        &["podMonitor.enabled=true", "podMonitor.labels.release=prometheus"],
    );
    let monitors = rendered.of_kind("PodMonitor");
    assert_eq!(monitors.len(), COMPONENTS.len());
    for (kind, name) in COMPONENTS {
        let workload = rendered.get(kind, name);
        let monitor = rendered.get("PodMonitor", name);
        assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
        let selector = &monitor["spec"]["selector"]["matchLabels"];
        assert!(matches(
            selector,
            &workload["spec"]["template"]["metadata"]["labels"]
        ));
        for (other_kind, other) in COMPONENTS.iter().filter(|c| c.1 != *name) {
            let other_pod = &rendered.get(other_kind, other)["spec"]["template"]["metadata"]["labels"];
            assert!(!matches(selector, other_pod), "{name} selects {other}");
        }
        let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
        let port = endpoint["port"].as_str().unwrap();
        assert_eq!(
            named_container_port(workload, port),
            metrics_port(workload),
            "{name}"
        );
        assert_eq!(endpoint["path"], "/metrics");
        assert_eq!(monitor["spec"]["podTargetLabels"], json!(["koord-app"]));
    }
    assert!(rendered.of_kind("ServiceMonitor").is_empty());

    // Disabled components get no monitor.
    let partial = render(
        &helm,
        &[
            "podMonitor.enabled=true",
            "manager.enabled=false",
            "koordlet.enabled=false",
            "schedulerExtender.enabled=false",
        ],
    );
    assert_eq!(partial.of_kind("PodMonitor").len(), 1);
    assert!(partial.has("PodMonitor", "koord-webhook"));

    // Prometheus durations only.
    let chart = chart_support::chart_dir();
    let (ok, _, stderr) = chart_support::run_helm(
        &helm,
        &[
            "template",
            "koord",
            chart.to_str().unwrap(),
            "--set",
            "podMonitor.interval=30 seconds",
        ],
    );
    assert!(!ok);
    assert!(
        stderr.contains("podMonitor.interval: Does not match pattern"),
        "{stderr}"
    );
}
