//! The Kubernetes versions the chart installs on (1.18+) and the API versions it picks from what
//! the cluster serves: `helm install` passes the server's resources as `.Capabilities`, which the
//! `--kube-version`/`--api-versions` flags of `helm template` stand in for here.

use super::*;

/// `helm template` with extra flags; `Err(stderr)` when helm refuses.
fn template(helm: &std::path::Path, flags: &[&str]) -> Result<Rendered, String> {
    let chart = chart_support::chart_dir();
    let mut args = vec![
        "template",
        "koord",
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
    ];
    args.extend_from_slice(flags);
    let (ok, stdout, stderr) = chart_support::run_helm(helm, &args);
    if !ok {
        return Err(stderr);
    }
    let objects = koord_testcluster::parse_documents(&stdout)
        .unwrap_or_else(|e| panic!("rendered YAML {flags:?} does not parse: {e}"))
        .into_iter()
        .filter(|o| !o.is_null())
        .collect();
    Ok(Rendered { objects })
}

#[test]
fn the_webhook_pdb_uses_policy_v1beta1_where_policy_v1_is_not_served() {
    let Some(helm) = chart_support::helm() else { return };
    let cases: &[(&[&str], &str)] = &[
        // A 1.20 server lists no policy/v1 resources (policy/v1 arrived in 1.21).
        (&["--kube-version", "1.20.2"], "policy/v1beta1"),
        (&["--kube-version", "1.18.0"], "policy/v1beta1"),
        (&["--kube-version", "1.21.0"], "policy/v1"),
        (&["--kube-version", "1.33.0"], "policy/v1"),
        // The served resources decide when they list policy/v1 PodDisruptionBudgets.
        (
            &[
                "--kube-version",
                "1.20.2",
                "--api-versions",
                "policy/v1/PodDisruptionBudget",
            ],
            "policy/v1",
        ),
        // helm's own default (no server): current Kubernetes, policy/v1.
        (&[], "policy/v1"),
    ];
    for (flags, expected) in cases {
        let rendered = template(&helm, flags).unwrap_or_else(|e| panic!("{flags:?}: {e}"));
        let pdb = rendered.get("PodDisruptionBudget", "koord-webhook");
        assert_eq!(pdb["apiVersion"], *expected, "{flags:?}");
        if *expected == "policy/v1" {
            serde_json::from_value::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(pdb.clone())
                .unwrap_or_else(|e| panic!("{flags:?}: {e}"));
        }
        // policy/v1beta1 has the same spec fields the chart sets.
        assert!(pdb["spec"]["selector"]["matchLabels"].is_object(), "{flags:?}");
        assert_eq!(pdb["spec"]["minAvailable"], 1, "{flags:?}");
    }
}

#[test]
fn the_chart_installs_on_kubernetes_1_18_and_newer_only() {
    let Some(helm) = chart_support::helm() else { return };
    for version in ["1.18.0", "1.20.2", "1.25.0", "1.33.0"] {
        template(&helm, &["--kube-version", version])
            .unwrap_or_else(|e| panic!("Kubernetes {version} refused: {e}"));
    }
    let err = template(&helm, &["--kube-version", "1.17.9"])
        .err()
        .expect("Kubernetes 1.17 must be refused");
    assert!(err.contains("kubeVersion: >=1.18.0-0"), "{err}");
}

#[test]
fn the_configmap_webhook_selects_the_config_namespace_by_name_label_from_1_21_only() {
    let Some(helm) = chart_support::helm() else { return };
    let webhook = |rendered: &Rendered| -> Value {
        rendered.get(
            "ValidatingWebhookConfiguration",
            "koordinator-validating-webhook-configuration",
        )["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == "vconfigmap.koordinator.sh")
            .unwrap()
            .clone()
    };
    let new = webhook(&template(&helm, &["--kube-version", "1.21.0"]).unwrap());
    assert_eq!(
        new["namespaceSelector"]["matchExpressions"][0]["key"],
        "kubernetes.io/metadata.name"
    );
    assert!(new.get("objectSelector").is_none(), "{new}");

    // 1.20 sets no kubernetes.io/metadata.name label: a selector on it would match nothing and
    // the config webhook would never be called. The chart's ConfigMap is selected by its labels.
    let rendered = template(&helm, &["--kube-version", "1.20.2"]).unwrap();
    let old = webhook(&rendered);
    assert!(old.get("namespaceSelector").is_none(), "{old}");
    let selector = old["objectSelector"]["matchLabels"].as_object().unwrap();
    let config_labels = &rendered.get("ConfigMap", "slo-controller-config")["metadata"]["labels"];
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(&config_labels[key], value, "label {key} of the chart's ConfigMap");
    }
}
