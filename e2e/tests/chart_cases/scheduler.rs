//! koord-scheduler and koord-scheduler-extender: the KubeSchedulerConfiguration's apiVersion per
//! Kubernetes version, its profile and `extenders` entry wired to the extender's Service, routes,
//! certificate and flags, the RBAC of both, and the configuration accepted by a real
//! kube-scheduler 1.20 (the real cluster's build, when cached).

use super::*;

/// `helm template` with extra flags (`--kube-version`).
fn template(helm: &std::path::Path, flags: &[&str]) -> Rendered {
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
    assert!(ok, "helm template {flags:?}: {stderr}");
    Rendered {
        objects: koord_testcluster::parse_documents(&stdout)
            .unwrap()
            .into_iter()
            .filter(|o| !o.is_null())
            .collect(),
    }
}

/// The rendered KubeSchedulerConfiguration.
fn scheduler_config(rendered: &Rendered) -> Value {
    let text = rendered.get("ConfigMap", "koord-scheduler-config")["data"]["scheduler-config.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    serde_yaml::from_str(&text).unwrap()
}

#[test]
fn koord_scheduler_config_api_version_and_image_follow_the_cluster_version() {
    let Some(helm) = chart_support::helm() else { return };
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &["--kube-version", "1.20.2"],
            "kubescheduler.config.k8s.io/v1beta1",
            "v1.20.2",
        ),
        (
            &["--kube-version", "1.22.17"],
            "kubescheduler.config.k8s.io/v1beta1",
            "v1.22.17",
        ),
        (
            &["--kube-version", "1.23.0"],
            "kubescheduler.config.k8s.io/v1beta3",
            "v1.23.0",
        ),
        (
            &["--kube-version", "1.24.3"],
            "kubescheduler.config.k8s.io/v1beta3",
            "v1.24.3",
        ),
        (
            &["--kube-version", "1.25.0"],
            "kubescheduler.config.k8s.io/v1",
            "v1.25.0",
        ),
        (
            &["--kube-version", "1.33.1"],
            "kubescheduler.config.k8s.io/v1",
            "v1.33.1",
        ),
        // the override wins over the cluster's version
        (
            &[
                "--kube-version",
                "1.20.2",
                "--set",
                "scheduler.kubeVersion=1.25.4",
            ],
            "kubescheduler.config.k8s.io/v1",
            "v1.25.4",
        ),
        (
            &[
                "--kube-version",
                "1.20.2",
                "--set",
                "scheduler.image.tag=v1.20.15",
            ],
            "kubescheduler.config.k8s.io/v1beta1",
            "v1.20.15",
        ),
    ];
    for (flags, api_version, tag) in cases {
        let rendered = template(&helm, flags);
        assert_eq!(
            scheduler_config(&rendered)["apiVersion"],
            *api_version,
            "{flags:?}"
        );
        let image = container(rendered.get("Deployment", "koord-scheduler"))["image"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            image,
            format!("registry.k8s.io/kube-scheduler:{tag}"),
            "{flags:?}"
        );
    }
}

#[test]
fn koord_scheduler_profile_calls_the_extender_service_over_https() {
    let Some(helm) = chart_support::helm() else { return };
    let rendered = template(&helm, &["--kube-version", "1.20.2"]);
    let config = scheduler_config(&rendered);
    assert_eq!(config["kind"], "KubeSchedulerConfiguration");
    // Seed 001's ClusterColocationProfile sets exactly this name.
    assert_eq!(config["profiles"], json!([{"schedulerName": "koord-scheduler"}]));
    assert_eq!(config["leaderElection"]["leaderElect"], true);
    assert_eq!(config["leaderElection"]["resourceName"], "koord-scheduler");
    assert_eq!(config["leaderElection"]["resourceNamespace"], NAMESPACE);
    let extenders = config["extenders"].as_array().unwrap();
    assert_eq!(extenders.len(), 1);
    let extender = &extenders[0];
    let service = rendered.get("Service", "koord-scheduler-extender");
    assert_eq!(service["spec"]["ports"][0]["port"], 443);
    assert_eq!(
        extender["urlPrefix"],
        format!("https://koord-scheduler-extender.{NAMESPACE}.svc:443")
    );
    assert_eq!(
        extender["tlsConfig"]["serverName"],
        format!("koord-scheduler-extender.{NAMESPACE}.svc")
    );
    // the verbs are the extender's routes
    assert_eq!(extender["filterVerb"], "filter");
    assert_eq!(extender["prioritizeVerb"], "prioritize");
    assert_eq!(extender["enableHTTPS"], true);
    assert_eq!(extender["nodeCacheCapable"], true);
    assert_eq!(extender["ignorable"], false);
    assert!(extender["weight"].as_i64().unwrap() >= 1);
    assert!(
        extender.get("managedResources").is_none(),
        "every pod of the profile goes to the extender"
    );

    // kube-scheduler trusts the ca.crt of the Secret the extender serves from.
    let scheduler = rendered.get("Deployment", "koord-scheduler");
    let pod = &scheduler["spec"]["template"]["spec"];
    let ca_file = extender["tlsConfig"]["caFile"].as_str().unwrap();
    let mount = container(scheduler)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| ca_file.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("caFile is in a mounted volume");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], "koord-scheduler-extender-certs");
    assert_eq!(volume["secret"]["items"][0]["key"], "ca.crt");
    let secret = rendered.get("Secret", "koord-scheduler-extender-certs");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    for key in ["ca.crt", "tls.crt", "tls.key"] {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(secret["data"][key].as_str().unwrap())
            .unwrap();
        assert!(String::from_utf8(pem).unwrap().starts_with("-----BEGIN"), "{key}");
    }
    // the config file is the mounted ConfigMap
    let command = container(scheduler)["command"].as_array().unwrap();
    assert_eq!(command[0], "/usr/local/bin/kube-scheduler");
    assert!(command.contains(&json!(
        "--config=/etc/koord-scheduler/config/scheduler-config.yaml"
    )));

    // The extender serves that certificate on the Service's target port, with flags its own
    // parser accepts.
    let deployment = rendered.get("Deployment", "koord-scheduler-extender");
    let c = container(deployment);
    let cli = extender_cli(container_argv("koord-scheduler-extender", c)).unwrap();
    assert_eq!(named_port(c, "https"), cli.port);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "https");
    let cert_mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "certs")
        .unwrap();
    assert_eq!(cert_mount["mountPath"], cli.cert_dir.to_str().unwrap());
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "koord-scheduler-extender-certs"
    );
    assert_eq!(cli.cpu_usage_threshold_percent, 65);
    assert_eq!(cli.memory_usage_threshold_percent, 95);
    assert_env_known_extender(c);
}

fn assert_env_known_extender(c: &Value) {
    for name in chart_support::container_env(c).keys() {
        assert!(name == "RUST_LOG", "unknown env {name}");
    }
}

#[test]
fn koord_scheduler_without_cluster_dns_reaches_the_extender_by_a_fixed_ip() {
    let Some(helm) = chart_support::helm() else { return };
    let rendered = render(&helm, &["schedulerExtender.clusterIP=10.213.1.200"]);
    assert_eq!(
        rendered.get("Service", "koord-scheduler-extender")["spec"]["clusterIP"],
        "10.213.1.200"
    );
    let aliases = &rendered.get("Deployment", "koord-scheduler")["spec"]["template"]["spec"]["hostAliases"];
    assert_eq!(
        aliases,
        &json!([{"ip": "10.213.1.200", "hostnames": [format!("koord-scheduler-extender.{NAMESPACE}.svc")]}])
    );
    let defaults = render(&helm, &[]);
    assert!(
        defaults.get("Deployment", "koord-scheduler")["spec"]["template"]["spec"]
            .get("hostAliases")
            .is_none()
    );
    // cert-manager mode: a Certificate instead of the generated Secret
    let cm = render(&helm, &["schedulerExtender.certs.mode=certManager"]);
    assert!(!cm.has("Secret", "koord-scheduler-extender-certs"));
    let certificate = cm.get("Certificate", "koord-scheduler-extender");
    assert_eq!(
        certificate["spec"]["secretName"],
        "koord-scheduler-extender-certs"
    );
    assert!(
        certificate["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("koord-scheduler-extender.{NAMESPACE}.svc")))
    );
    // managedResources, when asked for
    let managed = render_values_file(
        &helm,
        "scheduler:\n  extender:\n    managedResources:\n      - name: kubernetes.io/batch-cpu\n        ignoredByScheduler: false\n",
    );
    assert_eq!(
        scheduler_config(&managed)["extenders"][0]["managedResources"],
        json!([{"name": "kubernetes.io/batch-cpu", "ignoredByScheduler": false}])
    );
    // off: neither is rendered
    let off = render(
        &helm,
        &["scheduler.enabled=false", "schedulerExtender.enabled=false"],
    );
    assert!(!off.has("Deployment", "koord-scheduler"));
    assert!(!off.has("Deployment", "koord-scheduler-extender"));
}

fn render_values_file(helm: &std::path::Path, values: &str) -> Rendered {
    chart_support::render_values(helm, values)
}

/// The kube-scheduler binary the real cluster builds (`scripts/real-cluster/prepare.sh`), or
/// `$KOORD_KUBE_SCHEDULER`.
fn cached_kube_scheduler() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("KOORD_KUBE_SCHEDULER") {
        return Some(path.into());
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))?
        .join("koordinator-rs/kubernetes");
    for version in std::fs::read_dir(cache).ok()?.flatten() {
        for dir in std::fs::read_dir(version.path()).ok()?.flatten() {
            let candidate = dir.path().join("kube-scheduler");
            if dir.file_name().to_string_lossy().starts_with("bin-") && candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

#[test]
fn the_real_kube_scheduler_accepts_the_rendered_configuration() {
    let Some(helm) = chart_support::helm() else { return };
    let Some(binary) = cached_kube_scheduler() else {
        println!("skipped: no kube-scheduler build cached (scripts/real-cluster.sh up builds it)");
        return;
    };
    let version = std::process::Command::new(&binary)
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&version.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned();
    let rendered = template(&helm, &["--kube-version", version.trim_start_matches('v')]);
    let dir = tempfile::tempdir().unwrap();
    let secret = rendered.get("Secret", "koord-scheduler-extender-certs");
    let ca = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["ca.crt"].as_str().unwrap())
        .unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca).unwrap();
    // A kubeconfig it never needs to reach: `--write-config-to` stops after loading.
    std::fs::write(
        dir.path().join("kubeconfig"),
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: x}}]\ncurrent-context: c\n",
    )
    .unwrap();
    let mut config = scheduler_config(&rendered);
    config["extenders"][0]["tlsConfig"]["caFile"] = json!(dir.path().join("ca.crt"));
    config["clientConnection"] = json!({"kubeconfig": dir.path().join("kubeconfig")});
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, serde_yaml::to_string(&config).unwrap()).unwrap();
    let written = dir.path().join("written.yaml");
    let output = std::process::Command::new(&binary)
        .arg(format!("--config={}", config_file.display()))
        .arg(format!("--write-config-to={}", written.display()))
        .arg("--secure-port=0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "kube-scheduler {version} refused the configuration: {stderr}"
    );
    let written: Value = serde_yaml::from_str(&std::fs::read_to_string(&written).unwrap()).unwrap();
    assert_eq!(written["profiles"][0]["schedulerName"], "koord-scheduler");
    assert_eq!(written["extenders"][0]["nodeCacheCapable"], true);
    assert_eq!(written["extenders"][0]["prioritizeVerb"], "prioritize");
}

#[test]
fn koord_scheduler_runs_with_the_built_in_scheduler_roles_and_its_own_lease() {
    let Some(helm) = chart_support::helm() else { return };
    let rendered = render(&helm, &[]);
    let bound_to = |kind: &str| -> Vec<(String, Option<String>)> {
        rendered
            .of_kind(kind)
            .into_iter()
            .filter(|b| {
                b["subjects"].as_array().is_some_and(|s| {
                    s.iter()
                        .any(|s| s["name"] == "koord-scheduler" && s["namespace"] == NAMESPACE)
                })
            })
            .map(|b| {
                (
                    b["roleRef"]["name"].as_str().unwrap().to_owned(),
                    b["metadata"]["namespace"].as_str().map(str::to_owned),
                )
            })
            .collect()
    };
    let mut cluster_roles = bound_to("ClusterRoleBinding");
    cluster_roles.sort();
    assert_eq!(
        cluster_roles,
        vec![
            ("system:kube-scheduler".to_owned(), None),
            ("system:volume-scheduler".to_owned(), None)
        ]
    );
    let mut roles = bound_to("RoleBinding");
    roles.sort();
    assert_eq!(
        roles,
        vec![
            (
                "extension-apiserver-authentication-reader".to_owned(),
                Some("kube-system".to_owned())
            ),
            ("koord-scheduler".to_owned(), Some(NAMESPACE.to_owned())),
        ]
    );
    // system:kube-scheduler only covers the Lease named kube-scheduler: ours is granted here
    // (the built-in ClusterRoles are not rendered, so the Role is evaluated on its own).
    let role = rendered.get("Role", "koord-scheduler");
    let allows = |access: &Access| {
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|rule| chart_support::rule_allows(rule, access))
    };
    for (verb, name) in [
        ("create", None),
        ("get", Some("koord-scheduler")),
        ("update", Some("koord-scheduler")),
    ] {
        assert!(
            allows(&Access::new(
                "coordination.k8s.io",
                "leases",
                verb,
                Some(NAMESPACE),
                name
            )),
            "{verb}"
        );
    }
    assert!(!allows(&Access::new(
        "coordination.k8s.io",
        "leases",
        "update",
        Some(NAMESPACE),
        Some("koordinator-manager")
    )));
    let config = scheduler_config(&rendered);
    assert_eq!(config["leaderElection"]["resourceLock"], "leases");
}
