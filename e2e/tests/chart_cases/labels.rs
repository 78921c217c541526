//! Labels and selectors: upstream's `koord-app` beside `app.kubernetes.io/*` on every workload
//! and pod template, and the selectors of each `selectorStyle`, which must equal what an earlier
//! release of the same style created (Deployment and DaemonSet selectors cannot change).

use super::*;

/// (kind, name, component, upstream's `koord-app`)
const WORKLOADS: &[(&str, &str, &str, &str)] = &[
    ("Deployment", "koord-manager", "manager", "koord-manager"),
    ("Deployment", "koord-webhook", "webhook", "koord-webhook"),
    ("Deployment", "koord-scheduler", "scheduler", "koord-scheduler"),
    (
        "Deployment",
        "koord-scheduler-extender",
        "scheduler-extender",
        "koord-scheduler-extender",
    ),
    ("DaemonSet", "koordlet", "koordlet", "koordlet"),
];

fn labels(object: &Value) -> BTreeMap<String, String> {
    object
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `selector` (matchLabels) selects a pod labelled `pod`.
fn selects(selector: &BTreeMap<String, String>, pod: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| pod.get(k) == Some(v))
}

#[test]
fn every_workload_and_pod_carries_koord_app_beside_the_kubernetes_labels() {
    let Some(helm) = chart_support::helm() else { return };
    for style in ["chart", "upstream"] {
        let set = format!("selectorStyle={style}");
        let rendered = render(&helm, &[set.as_str()]);
        for (kind, name, component, app) in WORKLOADS {
            let workload = rendered.get(kind, name);
            for (what, labels) in [
                ("metadata", labels(&workload["metadata"]["labels"])),
                (
                    "pod template",
                    labels(&workload["spec"]["template"]["metadata"]["labels"]),
                ),
            ] {
                assert_eq!(labels["koord-app"], *app, "{style} {name} {what}");
                assert_eq!(labels["app.kubernetes.io/name"], "koordinator", "{style} {name}");
                assert_eq!(labels["app.kubernetes.io/instance"], "koord", "{style} {name}");
                assert_eq!(
                    labels["app.kubernetes.io/component"], *component,
                    "{style} {name}"
                );
            }
        }
        // Objects that are no component's workload carry no koord-app.
        let config = rendered.get("ConfigMap", "slo-controller-config");
        assert!(config["metadata"]["labels"].get("koord-app").is_none(), "{style}");
    }
}

#[test]
fn selectors_equal_those_of_an_earlier_release_of_the_same_style() {
    let Some(helm) = chart_support::helm() else { return };
    let chart_style = |component: &str| -> BTreeMap<String, String> {
        [
            ("app.kubernetes.io/name", "koordinator"),
            ("app.kubernetes.io/instance", "koord"),
            ("app.kubernetes.io/component", component),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    // `chart` (the default): the selectors every earlier release of this chart created.
    // `upstream`: upstream Koordinator's chart's selectors (`koord-app` only), so `helm upgrade`
    // over an upstream release keeps its Deployment and DaemonSet.
    for (set, upstream) in [(None, false), (Some("selectorStyle=upstream"), true)] {
        let rendered = render(&helm, set.as_slice());
        for (kind, name, component, app) in WORKLOADS {
            let workload = rendered.get(kind, name);
            let selector = labels(&workload["spec"]["selector"]["matchLabels"]);
            let expected = if upstream {
                BTreeMap::from([("koord-app".to_string(), app.to_string())])
            } else {
                chart_style(component)
            };
            assert_eq!(selector, expected, "{set:?} {name}");
            assert!(workload["spec"]["selector"].get("matchExpressions").is_none());
            let pod = labels(&workload["spec"]["template"]["metadata"]["labels"]);
            assert!(
                selects(&selector, &pod),
                "{set:?} {name}: {selector:?} vs {pod:?}"
            );
            // Only its own pods: no other component's pod template matches.
            for (other_kind, other, ..) in WORKLOADS.iter().filter(|w| w.1 != *name) {
                let other_pod =
                    labels(&rendered.get(other_kind, other)["spec"]["template"]["metadata"]["labels"]);
                assert!(!selects(&selector, &other_pod), "{set:?} {name} selects {other}");
            }
        }
        // The webhook Service, PodDisruptionBudget and anti-affinity find the webhook's pods.
        let webhook_pod =
            labels(&rendered.get("Deployment", "koord-webhook")["spec"]["template"]["metadata"]["labels"]);
        let service = rendered.get("Service", "koordinator-webhook-service");
        assert!(selects(&labels(&service["spec"]["selector"]), &webhook_pod));
        let pdb = rendered.get("PodDisruptionBudget", "koord-webhook");
        assert!(selects(
            &labels(&pdb["spec"]["selector"]["matchLabels"]),
            &webhook_pod
        ));
    }
}

#[test]
fn an_unknown_selector_style_is_refused() {
    let Some(helm) = chart_support::helm() else { return };
    let chart = chart_support::chart_dir();
    let (ok, _, stderr) = chart_support::run_helm(
        &helm,
        &[
            "template",
            "koord",
            chart.to_str().unwrap(),
            "--set",
            "selectorStyle=koord",
        ],
    );
    assert!(!ok);
    assert!(
        stderr.contains("selectorStyle must be one of the following"),
        "{stderr}"
    );
}
