//! The webhook wiring: configuration names, Service, Secret, paths, policies and selectors
//! against the webhook's flags and the configurations the e2e runner registers.

use super::*;

/// Webhook name -> (path, failurePolicy, rules, objectSelector) of a configuration.
fn webhooks_by_name(configuration: &Value) -> BTreeMap<String, &Value> {
    configuration["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["name"].as_str().unwrap().to_string(), w))
        .collect()
}

#[test]
fn webhook_wiring_matches_the_webhook_flags_and_the_e2e_configurations() {
    let Some(helm) = chart_support::helm() else { return };
    let rendered = render(&helm, &[]);
    let c = container(rendered.get("Deployment", "koord-webhook"));
    let cli = webhook_cli(container_argv("koord-webhook", c)).unwrap().server;
    assert_eq!(cli.cert_mode, koord_webhook::cli::CertMode::Secret);

    // caBundle injection finds the chart's configurations by these names.
    let mutating = rendered.of_kind("MutatingWebhookConfiguration");
    let validating = rendered.of_kind("ValidatingWebhookConfiguration");
    assert_eq!(mutating.len(), 1);
    assert_eq!(validating.len(), 1);
    assert_eq!(
        mutating[0]["metadata"]["name"],
        cli.mutating_webhook_name.as_str()
    );
    assert_eq!(
        validating[0]["metadata"]["name"],
        cli.validating_webhook_name.as_str()
    );
    // The Secret the webhook keeps its CA in is the one its Role names.
    let role = rendered.get("Role", "koord-webhook");
    assert!(
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resourceNames"] == json!([cli.secret_name]))
    );

    // Every webhook calls the Service the webhook's certificate is issued for, on its port.
    let service = rendered.get("Service", &cli.service_name);
    assert_eq!(service["metadata"]["namespace"], cli.namespace.as_str());
    assert_eq!(service["spec"]["ports"][0]["port"], 443);
    assert_eq!(
        named_port(c, service["spec"]["ports"][0]["targetPort"].as_str().unwrap()),
        cli.port
    );
    let selector = service["spec"]["selector"].as_object().unwrap();
    let pod_labels = &rendered.get("Deployment", "koord-webhook")["spec"]["template"]["metadata"]["labels"];
    for (key, value) in selector {
        assert_eq!(&pod_labels[key], value, "Service selector {key}");
    }
    let all: Vec<&Value> = mutating
        .iter()
        .chain(&validating)
        .flat_map(|cfg| cfg["webhooks"].as_array().unwrap())
        .collect();
    for webhook in &all {
        let target = &webhook["clientConfig"]["service"];
        assert_eq!(target["name"], cli.service_name.as_str());
        assert_eq!(target["namespace"], cli.namespace.as_str());
        assert_eq!(target["port"], 443);
        assert!(
            webhook["clientConfig"].get("caBundle").is_none(),
            "caBundle is injected at run time"
        );
        assert_eq!(webhook["sideEffects"], "None");
    }

    // The same webhooks, paths, policies, rules and selectors as the e2e runner registers.
    let e2e = koord_e2e::webhook_config::configurations(&koord_e2e::webhook_config::Target {
        namespace: NAMESPACE.into(),
        service: cli.service_name.clone(),
        ca_bundle: Vec::new(),
    });
    for (chart_cfg, e2e_cfg) in [(mutating[0], &e2e[0]), (validating[0], &e2e[1])] {
        assert_eq!(chart_cfg["metadata"]["name"], e2e_cfg["metadata"]["name"]);
        let chart_hooks = webhooks_by_name(chart_cfg);
        let e2e_hooks = webhooks_by_name(e2e_cfg);
        assert_eq!(
            chart_hooks.keys().collect::<Vec<_>>(),
            e2e_hooks.keys().collect::<Vec<_>>()
        );
        for (name, theirs) in e2e_hooks {
            let ours = chart_hooks[&name];
            assert_eq!(
                ours["clientConfig"]["service"]["path"], theirs["clientConfig"]["service"]["path"],
                "{name}"
            );
            assert_eq!(ours["failurePolicy"], theirs["failurePolicy"], "{name}");
            assert_eq!(ours["timeoutSeconds"], theirs["timeoutSeconds"], "{name}");
            assert_eq!(ours["objectSelector"], theirs["objectSelector"], "{name}");
            assert_eq!(
                ours["admissionReviewVersions"], theirs["admissionReviewVersions"],
                "{name}"
            );
            for (our_rule, their_rule) in ours["rules"]
                .as_array()
                .unwrap()
                .iter()
                .zip(theirs["rules"].as_array().unwrap())
            {
                for field in ["apiGroups", "apiVersions", "operations", "resources"] {
                    assert_eq!(our_rule[field], their_rule[field], "{name} rules.{field}");
                }
            }
            // The chart excludes at least what the runner excludes.
            for expression in theirs["namespaceSelector"]["matchExpressions"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                assert!(
                    ours["namespaceSelector"]["matchExpressions"]
                        .as_array()
                        .unwrap()
                        .contains(expression),
                    "{name}: {expression}"
                );
            }
        }
    }

    // Pod webhooks: Ignore, 5 s, never kube-system or the release namespace.
    let by_path = |path: &str| -> Vec<&Value> {
        all.iter()
            .copied()
            .filter(|w| w["clientConfig"]["service"]["path"] == path)
            .collect()
    };
    for webhook in by_path("/mutate-pod").into_iter().chain(by_path("/validate-pod")) {
        assert_eq!(webhook["failurePolicy"], "Ignore");
        assert_eq!(webhook["timeoutSeconds"], 5);
        assert_eq!(
            webhook["namespaceSelector"]["matchExpressions"][0],
            json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE]})
        );
    }
    // The ConfigMap webhook fails closed, only for the config namespace.
    let config_map = by_path("/validate-configmap");
    assert_eq!(config_map.len(), 1);
    assert_eq!(config_map[0]["failurePolicy"], "Fail");
    assert_eq!(
        config_map[0]["namespaceSelector"],
        json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [cli.config_namespace]}]})
    );
    assert_eq!(by_path("/validate-clustercolocationprofile").len(), 1);

    // Extra excluded namespaces and a separate config namespace.
    let rendered = render(
        &helm,
        &[
            "webhook.excludedNamespaces={monitoring}",
            "configNamespace=koord-config",
        ],
    );
    let validating = rendered.of_kind("ValidatingWebhookConfiguration")[0];
    let hooks = webhooks_by_name(validating);
    assert_eq!(
        hooks["vpod.koordinator.sh"]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["kube-system", NAMESPACE, "monitoring"])
    );
    assert_eq!(
        hooks["vconfigmap.koordinator.sh"]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["koord-config"])
    );
    assert_eq!(
        rendered.slo_config_maps()[0]["metadata"]["namespace"],
        "koord-config"
    );
    assert_eq!(
        rendered.get("Role", "koord-manager")["metadata"]["namespace"],
        "koord-config"
    );
}
