//! The Helm chart (`charts/koordinator`): helm lint and template for several value sets, the
//! rendered objects parse as their Kubernetes kinds, every container's args are accepted by the
//! component's own clap parser, the webhook wiring (configuration names, Service, paths, policies)
//! agrees with the webhook's flags and with the configurations the e2e runner registers, the
//! RBAC grants exactly the audited calls, and the rendered objects work in the embedded cluster:
//! koord-webhook started with the chart's args injects its CA into the chart's configurations and
//! mutates a pod created through the API; the calls koord-webhook and koord-manager really make
//! there are all allowed by the rendered roles.
//!
//! Needs helm (`scripts/install-helm.sh`, or `$HELM`); without it every test prints
//! `skipped: helm not found` and passes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chart_support;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine;
use clap::{CommandFactory, Parser};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use koord_testcluster::{ClusterOptions, TestCluster};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use chart_support::{Access, NAMESPACE, Rendered, container, container_argv, container_env, named_port, render};

/// Value sets every structural test runs against (besides the defaults).
const VARIANTS: &[&[&str]] = &[
    &[],
    &["webhook.certs.mode=certManager"],
    &[
        "configNamespace=koord-config",
        "logFormat=text",
        "manager.leaderElection.enabled=false",
        "manager.controllers={nodeslo,nodemetric}",
        "koordlet.podsSource=apiserver",
        "koordlet.privileged=false",
        "koordlet.cgroupDriver=systemd",
        "koordlet.dryRun=true",
        "koordlet.featureGates.BECPUEvict=true",
        "koordlet.featureGates.BEMemoryEvict=true",
        "koordlet.featureGates.CPUBurst=false",
        "koordlet.kubeletUrl=https://$(HOST_IP):10250",
        "webhook.skipMutatingResources=true",
        "webhook.disableExtendedResourceSpec=true",
        "webhook.allowPriorityLabelUpdate=true",
        "webhook.excludedNamespaces={monitoring,istio-system}",
        "webhook.replicas=1",
        "webhook.configMapWebhook.enabled=false",
    ],
    &["manager.enabled=false", "koordlet.enabled=false", "priorityClasses.create=false", "sloConfig.create=false"],
];

fn variant_name(set: &[&str]) -> String {
    if set.is_empty() { "defaults".into() } else { set.join(",") }
}

#[test]
fn helm_lint_and_template_succeed_and_render_the_expected_kinds() {
    let Some(helm) = chart_support::helm() else { return };
    let chart = chart_support::chart_dir();
    for set in VARIANTS {
        let mut args = vec!["lint", "--strict", chart.to_str().unwrap(), "--namespace", NAMESPACE];
        for value in *set {
            args.extend(["--set", value]);
        }
        let (ok, stdout, stderr) = chart_support::run_helm(&helm, &args);
        assert!(ok, "helm lint {}: {stdout}{stderr}", variant_name(set));
    }

    let kinds = render(&helm, &[]).kinds();
    let expected: BTreeMap<String, usize> = [
        ("ClusterRole", 3),
        ("ClusterRoleBinding", 3),
        ("ConfigMap", 1),
        ("CustomResourceDefinition", 3),
        ("DaemonSet", 1),
        ("Deployment", 2),
        ("MutatingWebhookConfiguration", 1),
        ("PodDisruptionBudget", 1),
        ("PriorityClass", 4),
        ("Role", 2),
        ("RoleBinding", 2),
        ("Service", 1),
        ("ServiceAccount", 3),
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
    assert_eq!(cm.kinds()["Role"], 1, "only the manager's Role");
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
        &["manager.enabled=false", "koordlet.enabled=false", "priorityClasses.create=false", "sloConfig.create=false"],
    );
    assert!(!only_webhook.kinds().contains_key("DaemonSet"));
    assert!(!only_webhook.kinds().contains_key("PriorityClass"));
    assert_eq!(only_webhook.kinds()["Deployment"], 1);

    // Values the components would reject fail at render time with a clear message.
    for (set, message) in [
        ("logFormat=xml", "logFormat must be text or json"),
        ("webhook.certs.mode=vault", "webhook.certs.mode must be secret or certManager"),
        ("koordlet.cgroupDriver=lxc", "koordlet.cgroupDriver must be"),
        ("webhook.podWebhooks.failurePolicy=Maybe", "failurePolicy must be Ignore or Fail"),
        ("webhook.podWebhooks.timeoutSeconds=31", "timeoutSeconds must be 1-30"),
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
    assert_eq!(&back, object, "{} {} changes through its type", object["kind"], object["metadata"]["name"]);
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

fn assert_env_known(component: &str, container: &Value, command: &clap::Command) {
    let known = clap_env_names(command);
    for name in container_env(container).keys() {
        assert!(
            known.contains(name) || NON_FLAG_ENV.contains(&name.as_str()),
            "{component}: env {name} is read by no flag"
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
            .of_kind("ConfigMap")
            .first()
            .map(|c| c["metadata"]["namespace"].as_str().unwrap().to_string());

        if rendered.has("Deployment", "koord-manager") {
            let c = container(rendered.get("Deployment", "koord-manager"));
            let argv = container_argv("koord-manager", c);
            let cli = koord_manager::cli::Cli::try_parse_from(&argv)
                .unwrap_or_else(|e| panic!("{variant}: koord-manager rejects {argv:?}: {e}"));
            assert!(cli.command.is_none());
            assert_env_known("koord-manager", c, &koord_manager::cli::Cli::command());
            assert_probes_on(c, cli.run.health_addr.port());
            assert_eq!(named_port(c, "metrics"), cli.run.metrics_addr.port());
            if let Some(ns) = &config_namespace {
                assert_eq!(&cli.run.config_namespace, ns, "{variant}: manager reads the chart's ConfigMap");
            }
            assert_eq!(container_env(c)["POD_NAME"], "fieldref-metadata-name", "Lease identity");
        }

        if rendered.has("Deployment", "koord-webhook") {
            let c = container(rendered.get("Deployment", "koord-webhook"));
            let argv = container_argv("koord-webhook", c);
            let cli = koord_webhook::cli::Cli::try_parse_from(&argv)
                .unwrap_or_else(|e| panic!("{variant}: koord-webhook rejects {argv:?}: {e}"));
            assert!(cli.command.is_none());
            assert_env_known("koord-webhook", c, &koord_webhook::cli::Cli::command());
            assert_probes_on(c, cli.server.health_addr.port());
            assert_eq!(named_port(c, "https"), cli.server.port);
            assert_eq!(cli.server.namespace, NAMESPACE);
            if let Some(ns) = &config_namespace {
                assert_eq!(&cli.server.config_namespace, ns, "{variant}: webhook validates the chart's ConfigMap");
            }
        }

        if rendered.has("DaemonSet", "koordlet") {
            let ds = rendered.get("DaemonSet", "koordlet");
            let c = container(ds);
            let argv = container_argv("koordlet", c);
            let args = koordlet::cli::Args::try_parse_from(&argv)
                .unwrap_or_else(|e| panic!("{variant}: koordlet rejects {argv:?}: {e}"));
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
                if rest.as_os_str().is_empty() { host.display().to_string() } else { host.join(rest).display().to_string() }
            };
            assert_eq!(host_path_of(&agent.cgroup_root), "/sys/fs/cgroup");
            assert_eq!(host_path_of(&agent.proc_root), "/proc");
            assert_eq!(host_path_of(&agent.sys_root), "/sys");
            assert_eq!(host_path_of(&agent.resctrl_root), "/sys/fs/resctrl");
            assert_eq!(pod["hostPID"], true);
            assert_eq!(pod["hostNetwork"], true, "the kubelet URL is on the node's loopback");
            assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]));
        }
    }

    // The koordlet variant: each value reached its flag.
    let rendered = render(&helm, VARIANTS[2]);
    let c = container(rendered.get("DaemonSet", "koordlet"));
    let agent = koordlet::cli::Args::try_parse_from(container_argv("koordlet", c)).unwrap().agent;
    assert_eq!(agent.feature_gates, "BECPUEvict=true,BEMemoryEvict=true,CPUBurst=false");
    assert_eq!(agent.kubelet_url, "https://10.0.0.1:10250");
    assert_eq!(agent.pods_source, koordlet::cli::PodsSource::Apiserver);
    assert_eq!(agent.cgroup_driver, koordlet::cli::DriverArg::Systemd);
    assert!(agent.dry_run);
    assert_eq!(c["securityContext"]["privileged"], false);
    assert!(c["securityContext"]["capabilities"]["add"].as_array().unwrap().contains(&json!("SYS_ADMIN")));
    let manager = koord_manager::cli::Cli::try_parse_from(container_argv(
        "koord-manager",
        container(rendered.get("Deployment", "koord-manager")),
    ))
    .unwrap()
    .run;
    assert!(!manager.leader_elect);
    assert_eq!(manager.controllers.len(), 2);
    let webhook = koord_webhook::cli::Cli::try_parse_from(container_argv(
        "koord-webhook",
        container(rendered.get("Deployment", "koord-webhook")),
    ))
    .unwrap()
    .server;
    assert!(webhook.skip_mutating_resources && webhook.disable_extended_resource_spec && webhook.allow_priority_label_update);
    assert_eq!(format!("{:?}", webhook.log_format), "Text");
}

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
    let cli = koord_webhook::cli::Cli::try_parse_from(container_argv("koord-webhook", c)).unwrap().server;
    assert_eq!(cli.cert_mode, koord_webhook::cli::CertMode::Secret);

    // caBundle injection finds the chart's configurations by these names.
    let mutating = rendered.of_kind("MutatingWebhookConfiguration");
    let validating = rendered.of_kind("ValidatingWebhookConfiguration");
    assert_eq!(mutating.len(), 1);
    assert_eq!(validating.len(), 1);
    assert_eq!(mutating[0]["metadata"]["name"], cli.mutating_webhook_name.as_str());
    assert_eq!(validating[0]["metadata"]["name"], cli.validating_webhook_name.as_str());
    // The Secret the webhook keeps its CA in is the one its Role names.
    let role = rendered.get("Role", "koord-webhook");
    assert!(role["rules"].as_array().unwrap().iter().any(|r| r["resourceNames"] == json!([cli.secret_name])));

    // Every webhook calls the Service the webhook's certificate is issued for, on its port.
    let service = rendered.get("Service", &cli.service_name);
    assert_eq!(service["metadata"]["namespace"], cli.namespace.as_str());
    assert_eq!(service["spec"]["ports"][0]["port"], 443);
    assert_eq!(named_port(c, service["spec"]["ports"][0]["targetPort"].as_str().unwrap()), cli.port);
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
        assert!(webhook["clientConfig"].get("caBundle").is_none(), "caBundle is injected at run time");
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
        assert_eq!(chart_hooks.keys().collect::<Vec<_>>(), e2e_hooks.keys().collect::<Vec<_>>());
        for (name, theirs) in e2e_hooks {
            let ours = chart_hooks[&name];
            assert_eq!(ours["clientConfig"]["service"]["path"], theirs["clientConfig"]["service"]["path"], "{name}");
            assert_eq!(ours["failurePolicy"], theirs["failurePolicy"], "{name}");
            assert_eq!(ours["timeoutSeconds"], theirs["timeoutSeconds"], "{name}");
            assert_eq!(ours["objectSelector"], theirs["objectSelector"], "{name}");
            assert_eq!(ours["admissionReviewVersions"], theirs["admissionReviewVersions"], "{name}");
            for (our_rule, their_rule) in ours["rules"].as_array().unwrap().iter().zip(theirs["rules"].as_array().unwrap()) {
                for field in ["apiGroups", "apiVersions", "operations", "resources"] {
                    assert_eq!(our_rule[field], their_rule[field], "{name} rules.{field}");
                }
            }
            // The chart excludes at least what the runner excludes.
            for expression in theirs["namespaceSelector"]["matchExpressions"].as_array().map(Vec::as_slice).unwrap_or_default() {
                assert!(
                    ours["namespaceSelector"]["matchExpressions"].as_array().unwrap().contains(expression),
                    "{name}: {expression}"
                );
            }
        }
    }

    // Pod webhooks: Ignore, 5 s, never kube-system or the release namespace.
    let by_path = |path: &str| -> Vec<&Value> {
        all.iter().copied().filter(|w| w["clientConfig"]["service"]["path"] == path).collect()
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
    let rendered = render(&helm, &["webhook.excludedNamespaces={monitoring}", "configNamespace=koord-config"]);
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
    assert_eq!(rendered.of_kind("ConfigMap")[0]["metadata"]["namespace"], "koord-config");
    assert_eq!(rendered.get("Role", "koord-manager")["metadata"]["namespace"], "koord-config");
}

/// The calls each component makes (audited from its source: every `Api<...>` and verb), as
/// (group, resource, verb, namespace, name). `CONFIG` and `RELEASE` stand for the config and
/// release namespaces; `ANY` for any namespace (e.g. Events next to the object they are about).
const CONFIG: &str = "$config";
const RELEASE: &str = "$release";
const ANY: &str = "$any";

type Call = (&'static str, &'static str, &'static str, Option<&'static str>, Option<&'static str>);

const MANAGER_CALLS: &[Call] = &[
    ("", "nodes", "list", None, None),
    ("", "nodes", "watch", None, None),
    ("", "nodes", "patch", None, None),
    ("", "nodes/status", "patch", None, None),
    ("", "pods", "list", None, None),
    ("", "pods", "watch", None, None),
    ("slo.koordinator.sh", "nodeslos", "get", None, None),
    ("slo.koordinator.sh", "nodeslos", "list", None, None),
    ("slo.koordinator.sh", "nodeslos", "watch", None, None),
    ("slo.koordinator.sh", "nodeslos", "create", None, None),
    ("slo.koordinator.sh", "nodeslos", "patch", None, None),
    ("slo.koordinator.sh", "nodeslos", "delete", None, None),
    ("slo.koordinator.sh", "nodemetrics", "get", None, None),
    ("slo.koordinator.sh", "nodemetrics", "list", None, None),
    ("slo.koordinator.sh", "nodemetrics", "watch", None, None),
    ("slo.koordinator.sh", "nodemetrics", "create", None, None),
    ("slo.koordinator.sh", "nodemetrics", "patch", None, None),
    ("slo.koordinator.sh", "nodemetrics", "delete", None, None),
    ("events.k8s.io", "events", "create", Some(ANY), None),
    ("events.k8s.io", "events", "patch", Some(ANY), None),
    ("", "configmaps", "list", Some(CONFIG), None),
    ("", "configmaps", "watch", Some(CONFIG), None),
    ("coordination.k8s.io", "leases", "create", Some(CONFIG), None),
    ("coordination.k8s.io", "leases", "get", Some(CONFIG), Some("koordinator-manager")),
    ("coordination.k8s.io", "leases", "patch", Some(CONFIG), Some("koordinator-manager")),
];

const WEBHOOK_CALLS: &[Call] = &[
    ("config.koordinator.sh", "clustercolocationprofiles", "list", None, None),
    ("config.koordinator.sh", "clustercolocationprofiles", "watch", None, None),
    ("", "namespaces", "list", None, None),
    ("", "namespaces", "watch", None, None),
    ("", "nodes", "list", None, None),
    ("", "nodes", "watch", None, None),
    ("scheduling.k8s.io", "priorityclasses", "list", None, None),
    ("scheduling.k8s.io", "priorityclasses", "watch", None, None),
    ("", "secrets", "create", Some(RELEASE), None),
    ("", "secrets", "get", Some(RELEASE), Some("koordinator-webhook-certs")),
    ("", "secrets", "update", Some(RELEASE), Some("koordinator-webhook-certs")),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "get",
        None,
        Some("koordinator-mutating-webhook-configuration"),
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "update",
        None,
        Some("koordinator-mutating-webhook-configuration"),
    ),
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "get",
        None,
        Some("koordinator-validating-webhook-configuration"),
    ),
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "update",
        None,
        Some("koordinator-validating-webhook-configuration"),
    ),
];

const KOORDLET_CALLS: &[Call] = &[
    ("", "nodes", "list", None, None),
    ("", "nodes", "watch", None, None),
    ("", "nodes/proxy", "get", None, Some("any-node")),
    ("", "pods/eviction", "create", Some(ANY), Some("any-pod")),
    ("slo.koordinator.sh", "nodeslos", "list", None, None),
    ("slo.koordinator.sh", "nodeslos", "watch", None, None),
    ("slo.koordinator.sh", "nodemetrics", "list", None, None),
    ("slo.koordinator.sh", "nodemetrics", "watch", None, None),
    ("slo.koordinator.sh", "nodemetrics/status", "patch", None, Some("any-node")),
    ("events.k8s.io", "events", "create", Some(ANY), None),
    ("events.k8s.io", "events", "patch", Some(ANY), None),
];

/// With `--pods-source=apiserver` koordlet watches pods instead of asking the kubelet.
const KOORDLET_APISERVER_CALLS: &[Call] = &[("", "pods", "list", None, None), ("", "pods", "watch", None, None)];

fn concrete(call: &Call, config: &str) -> Access {
    let namespace = call.3.map(|ns| match ns {
        CONFIG => config,
        RELEASE => NAMESPACE,
        ANY => "some-namespace",
        other => other,
    });
    Access::new(call.0, call.1, call.2, namespace, call.4)
}

/// Every audited call is allowed, and every granted (resource, verb) is an audited call.
fn assert_rbac_exact(rendered: &Rendered, sa: &str, calls: &[Call], config: &str) {
    for call in calls {
        let access = concrete(call, config);
        assert!(chart_support::allowed(rendered, NAMESPACE, sa, &access), "{sa} may not {access:?}");
    }
    for (role, group, resource, verb) in chart_support::granted(rendered, sa) {
        assert!(
            calls.iter().any(|c| c.0 == group && c.1 == resource && c.2 == verb),
            "{role} grants {verb} on {group}/{resource}, which {sa} never calls"
        );
    }
}

#[test]
fn rbac_grants_exactly_the_calls_each_component_makes() {
    let Some(helm) = chart_support::helm() else { return };
    let rendered = render(&helm, &[]);
    assert_rbac_exact(&rendered, "koord-manager", MANAGER_CALLS, NAMESPACE);
    assert_rbac_exact(&rendered, "koord-webhook", WEBHOOK_CALLS, NAMESPACE);
    assert_rbac_exact(&rendered, "koordlet", KOORDLET_CALLS, NAMESPACE);

    // Least privilege: names are enforced where the API allows it, nothing is a wildcard.
    let deny = [
        ("koord-webhook", Access::new("", "secrets", "get", Some(NAMESPACE), Some("other-secret"))),
        ("koord-webhook", Access::new("", "secrets", "get", Some("default"), Some("koordinator-webhook-certs"))),
        ("koord-webhook", Access::new("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update", None, Some("someone-elses"))),
        ("koord-manager", Access::new("coordination.k8s.io", "leases", "patch", Some(NAMESPACE), Some("other-lease"))),
        ("koord-manager", Access::new("coordination.k8s.io", "leases", "create", Some("default"), None)),
        ("koord-manager", Access::new("", "configmaps", "list", Some("default"), None)),
        ("koord-manager", Access::new("", "secrets", "list", None, None)),
        ("koordlet", Access::new("", "nodes", "patch", None, Some("n1"))),
        ("koordlet", Access::new("", "pods", "delete", Some("default"), Some("p"))),
    ];
    for (sa, access) in deny {
        assert!(!chart_support::allowed(&rendered, NAMESPACE, sa, &access), "{sa} may {access:?}");
    }
    for role in rendered.of_kind("ClusterRole").into_iter().chain(rendered.of_kind("Role")) {
        for rule in role["rules"].as_array().unwrap() {
            for field in ["apiGroups", "resources", "verbs"] {
                assert!(!rule[field].as_array().unwrap().contains(&json!("*")), "{} has a wildcard", role["metadata"]["name"]);
            }
        }
    }

    // Variants: a separate config namespace, no leader election, API-server pods, cert-manager.
    let rendered = render(&helm, VARIANTS[2]);
    let without_leases: Vec<Call> = MANAGER_CALLS.iter().copied().filter(|c| c.1 != "leases").collect();
    assert_rbac_exact(&rendered, "koord-manager", &without_leases, "koord-config");
    let koordlet: Vec<Call> = KOORDLET_CALLS
        .iter()
        .chain(KOORDLET_APISERVER_CALLS)
        .copied()
        .filter(|c| c.1 != "nodes/proxy")
        .collect();
    assert_rbac_exact(&rendered, "koordlet", &koordlet, "koord-config");
    let rendered = render(&helm, &["webhook.certs.mode=certManager"]);
    let readers: Vec<Call> = WEBHOOK_CALLS
        .iter()
        .copied()
        .filter(|c| c.1 != "secrets" && !c.1.ends_with("webhookconfigurations"))
        .collect();
    assert_rbac_exact(&rendered, "koord-webhook", &readers, NAMESPACE);
}

/// Applies the rendered objects of `kinds` the embedded API server serves.
async fn apply_kinds(cluster: &TestCluster, rendered: &Rendered, kinds: &[&str]) {
    for kind in kinds {
        for object in rendered.of_kind(kind) {
            cluster
                .apply_object(object.clone())
                .await
                .unwrap_or_else(|e| panic!("applying {kind} {}: {e}", object["metadata"]["name"]));
        }
    }
}

/// A namespace as a real API server creates it: with the `kubernetes.io/metadata.name` label
/// (which the embedded server does not add by itself).
async fn namespace(cluster: &TestCluster, name: &str, labels: Value) {
    let mut labels = labels.as_object().cloned().unwrap_or_default();
    labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    cluster
        .apply_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}))
        .await
        .unwrap();
}

/// Replaces the flags that name listen addresses (pods get their own network namespace;
/// here everything shares loopback).
fn with_loopback_addresses(argv: Vec<String>, replacements: &[(&str, &str)]) -> Vec<String> {
    argv.into_iter()
        .map(|arg| {
            for (flag, value) in replacements {
                if arg.starts_with(&format!("{flag}=")) {
                    return format!("{flag}={value}");
                }
            }
            arg
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_objects_work_in_the_embedded_cluster_with_the_webhook_on_the_charts_args() {
    let Some(helm) = chart_support::helm() else { return };
    common::init_logs();
    let rendered = render(&helm, &[]);
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let client = cluster.client().unwrap();
    apply_kinds(&cluster, &rendered, &["CustomResourceDefinition"]).await;
    namespace(&cluster, NAMESPACE, json!({})).await;
    apply_kinds(
        &cluster,
        &rendered,
        &["PriorityClass", "ConfigMap", "ServiceAccount", "Service", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"],
    )
    .await;

    // koord-webhook on the chart's args, addresses moved to loopback, calls recorded.
    let argv = with_loopback_addresses(
        container_argv("koord-webhook", container(rendered.get("Deployment", "koord-webhook"))),
        &[
            ("--port", "0"),
            ("--bind-address", "127.0.0.1"),
            ("--health-addr", "127.0.0.1:0"),
            ("--metrics-addr", "127.0.0.1:0"),
        ],
    );
    let cli = koord_webhook::cli::Cli::try_parse_from(&argv).unwrap().server;
    let (webhook_client, calls) = chart_support::recording_client(cluster.kube_config());
    let mut registry = prometheus_client::registry::Registry::default();
    let running = koord_webhook::serve::start(&cli, webhook_client, &mut registry).await.unwrap();
    cluster.register_service(&cli.namespace, &cli.service_name, running.addr);
    tokio::time::timeout(Duration::from_secs(30), running.caches_synced()).await.unwrap();

    // The CA in the webhook's Secret is injected into every webhook of the chart's two
    // configurations.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let ca = secrets.get(&cli.secret_name).await.unwrap().data.unwrap()["ca-cert.pem"].0.clone();
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mutating_name = rendered.of_kind("MutatingWebhookConfiguration")[0]["metadata"]["name"].as_str().unwrap().to_string();
    let validating_name = rendered.of_kind("ValidatingWebhookConfiguration")[0]["metadata"]["name"].as_str().unwrap().to_string();
    let bundles = common::wait_for("caBundle in both configurations", Duration::from_secs(20), async || {
        let m = mutating.get(&mutating_name).await.ok()?;
        let v = validating.get(&validating_name).await.ok()?;
        let mut bundles: Vec<Vec<u8>> = m.webhooks.unwrap_or_default().into_iter().map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()).collect();
        bundles.extend(v.webhooks.unwrap_or_default().into_iter().map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()));
        bundles.iter().all(|b| !b.is_empty()).then_some(bundles)
    })
    .await;
    assert_eq!(bundles.len(), 5);
    for bundle in &bundles {
        assert_eq!(bundle, &ca, "caBundle is the Secret's CA");
    }
    // The rest of each configuration is the chart's, untouched by the injection.
    let live = serde_json::to_value(mutating.get(&mutating_name).await.unwrap()).unwrap();
    let chart_cfg = rendered.of_kind("MutatingWebhookConfiguration")[0];
    assert_eq!(live["webhooks"][0]["namespaceSelector"], chart_cfg["webhooks"][0]["namespaceSelector"]);
    assert_eq!(live["webhooks"][0]["failurePolicy"], "Ignore");
    println!("caBundle injected: {} bytes of PEM, {}", ca.len(), base64::engine::general_purpose::STANDARD.encode(&ca[..12]));

    // A pod created through the API is mutated by a ClusterColocationProfile.
    let ns = common::unique("chart-spark");
    namespace(&cluster, &ns, json!({"koordinator.sh/enable-colocation": "true"})).await;
    let profile = common::unique("profile");
    let profiles: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource::erase::<koord_api::profile::ClusterColocationProfile>(&()),
    );
    let profile_object: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
        "metadata": {"name": profile},
        "spec": {
            "namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
            "selector": {"matchLabels": {"app": "chart-e2e"}},
            "qosClass": "BE", "priorityClassName": "koord-batch", "koordinatorPriority": 1111,
            "labels": {"koordinator.sh/mutated": "true"},
        }
    }))
    .unwrap();
    // Through the API, so the profile webhook (Fail) admitted it.
    profiles.create(&PostParams::default(), &profile_object).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "driver", "labels": {"app": "chart-e2e"}},
        "spec": {"containers": [{"name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}}]}
    }))
    .unwrap();
    let created = common::wait_for("a mutated pod", Duration::from_secs(20), async || {
        let created = pods.create(&PostParams::default(), &pod).await.unwrap();
        let labels = created.metadata.labels.clone().unwrap_or_default();
        if labels.get("koordinator.sh/qosClass").map(String::as_str) == Some("BE") {
            return Some(created);
        }
        pods.delete("driver", &DeleteParams::default()).await.unwrap();
        None
    })
    .await;
    let labels = created.metadata.labels.clone().unwrap();
    assert_eq!(labels["koordinator.sh/mutated"], "true");
    assert_eq!(labels["koordinator.sh/priority"], "1111");
    let spec = created.spec.clone().unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("koord-batch"));
    assert_eq!(spec.priority, Some(5000), "the chart's koord-batch PriorityClass");
    let requests = spec.containers[0].resources.clone().unwrap().requests.unwrap();
    assert_eq!(requests["kubernetes.io/batch-cpu"].0, "500");
    assert!(!requests.contains_key("cpu"));

    // Pods in the release namespace never reach the pod webhooks.
    let system_pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut system_pod = pod.clone();
    system_pod.metadata.name = Some("not-mutated".into());
    let system = system_pods.create(&PostParams::default(), &system_pod).await.unwrap();
    assert!(!system.metadata.labels.unwrap_or_default().contains_key("koordinator.sh/qosClass"));

    // The chart's ConfigMap passes the webhook's validation; a broken change is rejected.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let config_name = rendered.of_kind("ConfigMap")[0]["metadata"]["name"].as_str().unwrap().to_string();
    let mut config = config_maps.get(&config_name).await.unwrap();
    config.metadata.managed_fields = None;
    let chart_config = config.clone();
    config_maps.replace(&config_name, &PostParams::default(), &config).await.expect("the chart's ConfigMap is valid");
    let mut broken = config_maps.get(&config_name).await.unwrap();
    broken.data.as_mut().unwrap().insert("colocation-config".into(), r#"{"enable": true, "cpuReclaimThresholdPercent": -1}"#.into());
    let error = config_maps.replace(&config_name, &PostParams::default(), &broken).await.unwrap_err();
    assert!(error.to_string().contains("colocation-config"), "{error}");

    // Every call the webhook made is allowed by the chart's RBAC.
    let made = chart_support::accesses(&calls);
    println!("koord-webhook calls: {made:#?}");
    for access in &made {
        assert!(chart_support::allowed(&rendered, NAMESPACE, "koord-webhook", access), "koord-webhook RBAC lacks {access:?}");
    }
    assert!(made.iter().any(|a| a.resource == "mutatingwebhookconfigurations" && a.verb == "update"));

    // Outage: pods are still created (Ignore) and ConfigMaps outside the config namespace are
    // never sent to the failing-closed webhook; only the config namespace's writes wait.
    running.handle.shutdown();
    running.task.abort();
    cluster.unregister_service(&cli.namespace, &cli.service_name);
    let mut late = pod.clone();
    late.metadata.name = Some("during-outage".into());
    pods.create(&PostParams::default(), &late).await.expect("pods are created while the webhook is down");
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut other = chart_config.clone();
    other.metadata = kube::api::ObjectMeta { name: Some(config_name.clone()), ..Default::default() };
    elsewhere.create(&PostParams::default(), &other).await.expect("ConfigMaps elsewhere are not gated");
    let blocked = config_maps.replace(&config_name, &PostParams::default(), &chart_config).await;
    assert!(blocked.is_err(), "the config namespace's ConfigMap webhook fails closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_on_the_charts_args_stays_within_the_charts_rbac() {
    let Some(helm) = chart_support::helm() else { return };
    common::init_logs();
    let rendered = render(&helm, &[]);
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let client = cluster.client().unwrap();
    apply_kinds(&cluster, &rendered, &["CustomResourceDefinition"]).await;
    namespace(&cluster, NAMESPACE, json!({})).await;
    apply_kinds(&cluster, &rendered, &["PriorityClass", "ConfigMap"]).await;
    let node = common::unique("chart-node");
    cluster
        .apply_object(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        }))
        .await
        .unwrap();

    let argv = with_loopback_addresses(
        container_argv("koord-manager", container(rendered.get("Deployment", "koord-manager"))),
        &[("--health-addr", "127.0.0.1:0"), ("--metrics-addr", "127.0.0.1:0")],
    );
    let mut argv = argv;
    argv.push(format!("--identity={}", common::unique("koord-manager")));
    let cli = koord_manager::cli::Cli::try_parse_from(&argv).unwrap();
    let (manager_client, calls) = chart_support::recording_client(cluster.kube_config());
    let stop = tokio_util::sync::CancellationToken::new();
    let shutdown = stop.clone();
    let task = tokio::spawn(async move { koord_manager::run::run(cli.run, manager_client, async move { shutdown.cancelled().await }).await });

    // The manager creates the NodeMetric; a fresh report makes it publish batch resources.
    let metrics: Api<koord_api::nodemetric::NodeMetric> = Api::all(client.clone());
    common::wait_for("the NodeMetric", Duration::from_secs(30), async || metrics.get_opt(&node).await.ok().flatten()).await;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let report = json!({"status": {
        "updateTime": now,
        "nodeMetric": {
            "nodeUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}},
            "systemUsage": {"resources": {"cpu": "100m", "memory": "256Mi"}},
        },
        "podsMetric": [],
    }});
    metrics.patch_status(&node, &PatchParams::default(), &Patch::Merge(&report)).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    common::wait_for("batch resources on the node", Duration::from_secs(30), async || {
        let n = nodes.get(&node).await.ok()?;
        n.status?.allocatable?.get("kubernetes.io/batch-cpu").cloned()
    })
    .await;
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;

    let made = chart_support::accesses(&calls);
    println!("koord-manager calls: {made:#?}");
    for access in &made {
        assert!(chart_support::allowed(&rendered, NAMESPACE, "koord-manager", access), "koord-manager RBAC lacks {access:?}");
    }
    for (resource, verb) in [("nodes/status", "patch"), ("leases", "create"), ("nodemetrics", "create"), ("nodeslos", "create")] {
        assert!(made.iter().any(|a| a.resource == resource && a.verb == verb), "the run made no {verb} on {resource}");
    }
}
