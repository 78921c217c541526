//! helm lint and template, the rendered objects' types, and the containers' args against each
//! component's own CLI parser.

use super::*;

#[test]
fn helm_lint_and_template_succeed_and_render_the_expected_kinds() {
    let Some(helm) = chart_support::helm() else { return };
    let chart = chart_support::chart_dir();
    for set in VARIANTS {
        let mut args = vec![
            "lint",
            "--strict",
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
        ];
        for value in *set {
            args.extend(["--set", value]);
        }
        let (ok, stdout, stderr) = chart_support::run_helm(&helm, &args);
        assert!(ok, "helm lint {}: {stdout}{stderr}", variant_name(set));
    }

    let kinds = render(&helm, &[]).kinds();
    let expected: BTreeMap<String, usize> = [
        // koord-scheduler and koord-scheduler-extender included
        ("ClusterRole", 4),
        ("ClusterRoleBinding", 6),
        ("ConfigMap", 2),
        ("CustomResourceDefinition", 4),
        ("DaemonSet", 1),
        ("Deployment", 4),
        ("MutatingWebhookConfiguration", 1),
        ("PodDisruptionBudget", 3),
        ("PriorityClass", 4),
        ("Role", 4),
        ("RoleBinding", 5),
        ("Secret", 1),
        ("Service", 2),
        ("ServiceAccount", 5),
        ("ValidatingWebhookConfiguration", 1),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    assert_eq!(kinds, expected, "default rendering");

    // cert-manager mode: an Issuer and a Certificate, no Secret permissions.
    let cm = render(&helm, &["webhook.certs.mode=certManager"]);
    assert_eq!(cm.kinds()["Certificate"], 1);
    assert_eq!(cm.kinds()["Issuer"], 1);
    assert_eq!(
        cm.kinds()["Role"],
        3,
        "the manager's, koord-scheduler's Lease and the extender's config Roles"
    );
    let certificate = cm.get("Certificate", "koord-webhook");
    assert_eq!(certificate["spec"]["secretName"], "koordinator-webhook-certs");
    assert!(
        certificate["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .contains(&json!("koordinator-webhook-service.koordinator-system.svc"))
    );
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        assert_eq!(
            cm.of_kind(kind)[0]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "koordinator-system/koord-webhook"
        );
    }
    let webhook = cm.get("Deployment", "koord-webhook");
    assert_eq!(
        container(webhook)["volumeMounts"][0]["mountPath"],
        "/etc/koordinator/webhook-certs"
    );

    // Only the webhook: no manager, koordlet, classes or ConfigMap.
    let only_webhook = render(
        &helm,
        &[
            "manager.enabled=false",
            "koordlet.enabled=false",
            "scheduler.enabled=false",
            "schedulerExtender.enabled=false",
            "priorityClasses.create=false",
            "sloConfig.create=false",
        ],
    );
    assert!(!only_webhook.kinds().contains_key("DaemonSet"));
    assert!(!only_webhook.kinds().contains_key("PriorityClass"));
    assert_eq!(only_webhook.kinds()["Deployment"], 1);

    // Values the components would reject fail at render time with a clear message: the schema
    // (values.schema.json) refuses them first; the templates' own checks remain for renderings
    // with `--skip-schema-validation`.
    for (set, message) in [
        ("logFormat=xml", "logFormat must be one of the following"),
        (
            "webhook.certs.mode=vault",
            "webhook.certs.mode must be one of the following",
        ),
        ("koordlet.cgroupDriver=lxc", "koordlet.cgroupDriver must be"),
        (
            "webhook.podWebhooks.failurePolicy=Maybe",
            "failurePolicy must be one of the following",
        ),
        (
            "webhook.podWebhooks.timeoutSeconds=31",
            "timeoutSeconds: Must be less than or equal to 30",
        ),
    ] {
        let (ok, _, stderr) = chart_support::run_helm(
            &helm,
            &["template", "koord", chart.to_str().unwrap(), "--set", set],
        );
        assert!(!ok, "{set} rendered");
        assert!(stderr.contains(message), "{set}: {stderr}");
    }
}

/// Deserializes `object` as `T` and back; a field `T` does not know (a typo in a template)
/// would be lost on the way and fail the comparison.
fn round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(object: &Value) {
    let typed: T = serde_json::from_value(object.clone())
        .unwrap_or_else(|e| panic!("{} {}: {e}", object["kind"], object["metadata"]["name"]));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &back, object,
        "{} {} changes through its type",
        object["kind"], object["metadata"]["name"]
    );
}

#[test]
fn rendered_objects_parse_as_their_kubernetes_types() {
    use k8s_openapi::api::{apps, core, policy, rbac, scheduling};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let Some(helm) = chart_support::helm() else { return };
    for set in VARIANTS {
        for object in &render(&helm, set).objects {
            match object["kind"].as_str().unwrap() {
                "ServiceAccount" => round_trips::<core::v1::ServiceAccount>(object),
                "Service" => round_trips::<core::v1::Service>(object),
                "ConfigMap" => round_trips::<ConfigMap>(object),
                "Secret" => round_trips::<Secret>(object),
                "ClusterRole" => round_trips::<rbac::v1::ClusterRole>(object),
                "ClusterRoleBinding" => round_trips::<rbac::v1::ClusterRoleBinding>(object),
                "Role" => round_trips::<rbac::v1::Role>(object),
                "RoleBinding" => round_trips::<rbac::v1::RoleBinding>(object),
                "Deployment" => round_trips::<apps::v1::Deployment>(object),
                "DaemonSet" => round_trips::<apps::v1::DaemonSet>(object),
                "PodDisruptionBudget" => round_trips::<policy::v1::PodDisruptionBudget>(object),
                "PriorityClass" => round_trips::<scheduling::v1::PriorityClass>(object),
                "MutatingWebhookConfiguration" => round_trips::<MutatingWebhookConfiguration>(object),
                "ValidatingWebhookConfiguration" => round_trips::<ValidatingWebhookConfiguration>(object),
                "CustomResourceDefinition" => round_trips::<CustomResourceDefinition>(object),
                "Certificate" | "Issuer" => assert_eq!(object["apiVersion"], "cert-manager.io/v1"),
                other => panic!("unexpected kind {other} in {}", variant_name(set)),
            }
        }
    }
}

/// The environment variables a component's clap definition reads.
fn clap_env_names(command: &clap::Command) -> BTreeSet<String> {
    command
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect()
}

/// Variables the chart sets that no flag reads, and why: the tracing filter, and the node's IP
/// for `$(HOST_IP)` in `--kubelet-url`.
const NON_FLAG_ENV: &[&str] = &["RUST_LOG", "HOST_IP"];

/// Flag variables whose names keep no component prefix: the standard kubeconfig and what the
/// chart fills from the downward API.
const UNPREFIXED_FLAG_ENV: &[&str] = &["KUBECONFIG", "NODE_NAME", "POD_NAME", "POD_NAMESPACE"];

/// Every variable the chart sets is read by a flag under the component's own prefix (or is one
/// of the standard names), never by a deprecated name.
fn assert_env_known(component: &str, container: &Value, command: &clap::Command) {
    let known = clap_env_names(command);
    let prefix = match component {
        "koord-manager" => "KOORD_MANAGER_",
        "koord-webhook" => "KOORD_WEBHOOK_",
        "koordlet" => "KOORDLET_",
        other => panic!("no env prefix for {other}"),
    };
    for name in container_env(container).keys() {
        assert!(
            known.contains(name) || NON_FLAG_ENV.contains(&name.as_str()),
            "{component}: env {name} is read by no flag"
        );
        assert!(
            name.starts_with(prefix)
                || UNPREFIXED_FLAG_ENV.contains(&name.as_str())
                || NON_FLAG_ENV.contains(&name.as_str()),
            "{component}: env {name} lacks the prefix {prefix}"
        );
    }
}

fn assert_probes_on(container: &Value, port: u16) {
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(container[probe]["httpGet"]["path"], path);
        let named = container[probe]["httpGet"]["port"].as_str().unwrap();
        assert_eq!(named_port(container, named), port, "{probe} port");
    }
}

#[test]
fn container_args_are_accepted_by_each_component_cli() {
    let Some(helm) = chart_support::helm() else { return };
    for set in VARIANTS {
        let rendered = render(&helm, set);
        let variant = variant_name(set);
        let config_namespace = rendered
            .slo_config_maps()
            .first()
            .map(|c| c["metadata"]["namespace"].as_str().unwrap().to_string());

        if rendered.has("Deployment", "koord-manager") {
            let c = container(rendered.get("Deployment", "koord-manager"));
            let argv = container_argv("koord-manager", c);
            let cli = manager_cli(&argv)
                .unwrap_or_else(|e| panic!("{variant}: koord-manager rejects {argv:?}: {e}"));
            assert!(cli.command.is_none());
            assert_env_known("koord-manager", c, &koord_manager::cli::Cli::command());
            assert_probes_on(c, cli.run.health_addr.port());
            assert_eq!(named_port(c, "metrics"), cli.run.metrics_addr.port());
            if let Some(ns) = &config_namespace {
                assert_eq!(
                    &cli.run.config_namespace, ns,
                    "{variant}: manager reads the chart's ConfigMap"
                );
            }
            assert_eq!(
                container_env(c)["POD_NAME"],
                "fieldref-metadata-name",
                "Lease identity"
            );
        }

        if rendered.has("Deployment", "koord-webhook") {
            let c = container(rendered.get("Deployment", "koord-webhook"));
            let argv = container_argv("koord-webhook", c);
            let cli = webhook_cli(&argv)
                .unwrap_or_else(|e| panic!("{variant}: koord-webhook rejects {argv:?}: {e}"));
            assert!(cli.command.is_none());
            assert_env_known("koord-webhook", c, &koord_webhook::cli::Cli::command());
            assert_probes_on(c, cli.server.health_addr.port());
            assert_eq!(named_port(c, "https"), cli.server.port);
            assert_eq!(cli.server.namespace, NAMESPACE);
            if let Some(ns) = &config_namespace {
                assert_eq!(
                    &cli.server.config_namespace, ns,
                    "{variant}: webhook validates the chart's ConfigMap"
                );
            }
        }

        if rendered.has("DaemonSet", "koordlet") {
            let ds = rendered.get("DaemonSet", "koordlet");
            let c = container(ds);
            let argv = container_argv("koordlet", c);
            let args =
                koordlet_args(&argv).unwrap_or_else(|e| panic!("{variant}: koordlet rejects {argv:?}: {e}"));
            assert!(args.command.is_none());
            let agent = args.agent;
            assert_env_known("koordlet", c, &koordlet::cli::Args::command());
            // The feature gates would stop koordlet at start if a name were unknown.
            koordlet::features::FeatureGates::parse(&agent.feature_gates)
                .unwrap_or_else(|e| panic!("{variant}: --feature-gates={}: {e}", agent.feature_gates));
            assert_probes_on(c, agent.health_addr.port());
            assert_eq!(container_env(c)["NODE_NAME"], "fieldref-spec-nodename");
            // Each host root flag points into a hostPath mount of the right host directory.
            let pod = &ds["spec"]["template"]["spec"];
            let host_path_of = |dir: &std::path::Path| -> String {
                let mount = c["volumeMounts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|m| dir.starts_with(m["mountPath"].as_str().unwrap()))
                    .max_by_key(|m| m["mountPath"].as_str().unwrap().len())
                    .unwrap_or_else(|| panic!("{} is in no volume mount", dir.display()));
                let volume = pod["volumes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|v| v["name"] == mount["name"])
                    .unwrap();
                let rest = dir.strip_prefix(mount["mountPath"].as_str().unwrap()).unwrap();
                let host = std::path::Path::new(volume["hostPath"]["path"].as_str().unwrap());
                if rest.as_os_str().is_empty() {
                    host.display().to_string()
                } else {
                    host.join(rest).display().to_string()
                }
            };
            assert_eq!(host_path_of(&agent.cgroup_root), "/sys/fs/cgroup");
            assert_eq!(host_path_of(&agent.proc_root), "/proc");
            assert_eq!(host_path_of(&agent.sys_root), "/sys");
            assert_eq!(host_path_of(&agent.resctrl_root), "/sys/fs/resctrl");
            assert_eq!(host_path_of(&agent.kubelet_root_dir), "/var/lib/kubelet");
            assert_eq!(
                host_path_of(&agent.cpuset_state_file),
                "/var/lib/koordlet/cpuset-policy-state.json"
            );
            let kubelet_mount = c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| {
                    agent
                        .kubelet_root_dir
                        .starts_with(m["mountPath"].as_str().unwrap())
                })
                .unwrap();
            assert_eq!(
                kubelet_mount["readOnly"], true,
                "{variant}: the kubelet root dir is mounted read-only"
            );
            assert_eq!(pod["hostPID"], true);
            assert_eq!(
                pod["hostNetwork"], true,
                "the kubelet URL is on the node's loopback"
            );
            assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]));
        }
    }

    // The koordlet variant: each value reached its flag.
    let rendered = render(&helm, VARIANTS[2]);
    let c = container(rendered.get("DaemonSet", "koordlet"));
    let agent = koordlet_args(container_argv("koordlet", c)).unwrap().agent;
    assert_eq!(
        agent.feature_gates,
        "BECPUEvict=true,BEMemoryEvict=true,CPUBurst=false"
    );
    assert_eq!(agent.kubelet_url, "https://10.0.0.1:10250");
    assert_eq!(agent.pods_source, koordlet::cli::PodsSource::Apiserver);
    assert_eq!(agent.cgroup_driver, koordlet::cli::DriverArg::Systemd);
    assert!(agent.dry_run);
    assert_eq!(c["securityContext"]["privileged"], false);
    assert!(
        c["securityContext"]["capabilities"]["add"]
            .as_array()
            .unwrap()
            .contains(&json!("SYS_ADMIN"))
    );
    let manager = manager_cli(container_argv(
        "koord-manager",
        container(rendered.get("Deployment", "koord-manager")),
    ))
    .unwrap()
    .run;
    assert!(!manager.leader_elect);
    assert_eq!(manager.controllers.len(), 2);
    let webhook = webhook_cli(container_argv(
        "koord-webhook",
        container(rendered.get("Deployment", "koord-webhook")),
    ))
    .unwrap()
    .server;
    assert!(
        webhook.skip_mutating_resources
            && webhook.disable_extended_resource_spec
            && webhook.allow_priority_label_update
    );
    // The pod webhooks' namespace exclusion is enforced by the webhook too (Kubernetes < 1.21).
    let excluded = webhook.excluded_namespaces();
    for namespace in ["monitoring", "istio-system", "kube-system"] {
        assert!(excluded.contains(namespace), "{excluded:?}");
    }
    assert_eq!(format!("{:?}", webhook.log_format), "Text");
}

/// Seed 000's `cpu-burst-config` (with `podStrategies`) and seed 001's thresholds, as values.
const SEED_VALUES: &str = r#"
sloConfig:
  colocationConfig:
    enable: true
    cpuReclaimThresholdPercent: 60
    memoryReclaimThresholdPercent: 65
    degradeTimeMinutes: 15
  resourceThresholdConfig:
    clusterStrategy:
      enable: true
      memoryEvictThresholdPercent: 70
  cpuBurstConfig:
    clusterStrategy:
      policy: none
    nodeStrategies:
      - nodeSelector:
          matchLabels:
            kubernetes.io/hostname: ci-testing-worker
        cpuBurstStrategy:
          policy: auto
          cpuBurstPercent: 200
          cfsQuotaBurstPercent: 300
          cfsQuotaBurstPeriodSeconds: 6
    podStrategies:
      - namespace: frontend
        podSelector:
          matchLabels:
            app: payment
        overridePod: true
        cpuBurstConfig:
          policy: auto
          cpuBurstPercent: 100
          cfsQuotaBurstPercent: 600
          cfsQuotaBurstPeriodSeconds: 10
"#;

fn config_data(rendered: &Rendered) -> BTreeMap<String, String> {
    serde_json::from_value(rendered.slo_config_maps()[0]["data"].clone()).unwrap()
}

#[test]
fn the_rendered_slo_controller_config_passes_the_webhooks_validation() {
    let Some(helm) = chart_support::helm() else { return };
    let no_nodes = BTreeMap::new();
    let defaults = config_data(&render(&helm, &[]));
    assert_eq!(
        defaults.keys().collect::<Vec<_>>(),
        ["colocation-config", "resource-threshold-config"],
        "upstream's shipped keys"
    );
    let violations = koord_webhook::validate::configmap::validate_slo_config_with_nodes(&defaults, &no_nodes);
    assert!(violations.is_empty(), "{violations:?}");

    // Values become each key's JSON unchanged (numbers stay integers, lists keep their order).
    let seeded = config_data(&chart_support::render_values(&helm, SEED_VALUES));
    let violations = koord_webhook::validate::configmap::validate_slo_config_with_nodes(&seeded, &no_nodes);
    assert!(violations.is_empty(), "{violations:?}");
    let values: Value = serde_yaml::from_str(SEED_VALUES).unwrap();
    for (key, value_key) in [
        ("colocation-config", "colocationConfig"),
        ("resource-threshold-config", "resourceThresholdConfig"),
        ("cpu-burst-config", "cpuBurstConfig"),
    ] {
        let rendered: Value = serde_json::from_str(&seeded[key]).unwrap();
        assert_eq!(rendered, values["sloConfig"][value_key], "{key}");
    }
    assert!(seeded["cpu-burst-config"].contains("\"cfsQuotaBurstPeriodSeconds\": 10"));

    // A value the webhook would reject is caught by the same validation.
    let broken = config_data(&chart_support::render_values(
        &helm,
        "sloConfig:\n  colocationConfig:\n    cpuReclaimThresholdPercent: -1\n",
    ));
    let violations = koord_webhook::validate::configmap::validate_slo_config_with_nodes(&broken, &no_nodes);
    assert!(!violations.is_empty());
}
