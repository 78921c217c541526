//! The rendered objects in the embedded cluster, with koord-webhook and koord-manager running
//! in-process on the chart's args.

use super::*;

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

/// A namespace with `labels`; the embedded server adds `kubernetes.io/metadata.name` as a real
/// API server does, which the chart's namespace selectors rely on.
async fn namespace(cluster: &TestCluster, name: &str, labels: Value) {
    cluster
        .apply_object(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
        )
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

/// The default rendering, and an embedded cluster with its CRDs and the release namespace.
async fn cluster_with_chart_crds(helm: &std::path::Path) -> (Rendered, TestCluster, kube::Client) {
    common::init_logs();
    let rendered = render(helm, &[]);
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let client = cluster.client().unwrap();
    apply_kinds(&cluster, &rendered, &["CustomResourceDefinition"]).await;
    namespace(&cluster, NAMESPACE, json!({})).await;
    (rendered, cluster, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_objects_work_in_the_embedded_cluster_with_the_webhook_on_the_charts_args() {
    let Some(helm) = chart_support::helm() else { return };
    let (rendered, cluster, client) = cluster_with_chart_crds(&helm).await;
    apply_kinds(
        &cluster,
        &rendered,
        &[
            "PriorityClass",
            "ConfigMap",
            "ServiceAccount",
            "Service",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ],
    )
    .await;

    // koord-webhook on the chart's args, addresses moved to loopback, calls recorded.
    let argv = with_loopback_addresses(
        container_argv(
            "koord-webhook",
            container(rendered.get("Deployment", "koord-webhook")),
        ),
        &[
            ("--port", "0"),
            ("--bind-address", "127.0.0.1"),
            ("--health-addr", "127.0.0.1:0"),
            ("--metrics-addr", "127.0.0.1:0"),
        ],
    );
    let cli = webhook_cli(&argv).unwrap().server;
    let (webhook_client, calls) = chart_support::recording_client(cluster.kube_config());
    let mut registry = prometheus_client::registry::Registry::default();
    let running = koord_webhook::serve::start(&cli, webhook_client, &mut registry)
        .await
        .unwrap();
    cluster.register_service(&cli.namespace, &cli.service_name, running.addr);
    tokio::time::timeout(Duration::from_secs(30), running.caches_synced())
        .await
        .unwrap();

    // The CA in the webhook's Secret is injected into every webhook of the chart's two
    // configurations.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let ca = secrets.get(&cli.secret_name).await.unwrap().data.unwrap()["ca-cert.pem"]
        .0
        .clone();
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mutating_name = rendered.of_kind("MutatingWebhookConfiguration")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let validating_name = rendered.of_kind("ValidatingWebhookConfiguration")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let bundles = common::wait_for(
        "caBundle in both configurations",
        Duration::from_secs(20),
        async || {
            let m = mutating.get(&mutating_name).await.ok()?;
            let v = validating.get(&validating_name).await.ok()?;
            let mut bundles: Vec<Vec<u8>> = m
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default())
                .collect();
            bundles.extend(
                v.webhooks
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()),
            );
            bundles.iter().all(|b| !b.is_empty()).then_some(bundles)
        },
    )
    .await;
    assert_eq!(bundles.len(), 5);
    for bundle in &bundles {
        assert_eq!(bundle, &ca, "caBundle is the Secret's CA");
    }
    // The rest of each configuration is the chart's, untouched by the injection.
    let live = serde_json::to_value(mutating.get(&mutating_name).await.unwrap()).unwrap();
    let chart_cfg = rendered.of_kind("MutatingWebhookConfiguration")[0];
    assert_eq!(
        live["webhooks"][0]["namespaceSelector"],
        chart_cfg["webhooks"][0]["namespaceSelector"]
    );
    assert_eq!(live["webhooks"][0]["failurePolicy"], "Ignore");
    println!(
        "caBundle injected: {} bytes of PEM, {}",
        ca.len(),
        base64::engine::general_purpose::STANDARD.encode(&ca[..12])
    );

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
    profiles
        .create(&PostParams::default(), &profile_object)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "driver", "labels": {"app": "chart-e2e"}},
        "spec": {"containers": [{"name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}}]}
    }))
    .unwrap();
    let created = common::create_until_mutated_to_be(&pods, &pod).await;
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
    let system = system_pods
        .create(&PostParams::default(), &system_pod)
        .await
        .unwrap();
    assert!(
        !system
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("koordinator.sh/qosClass")
    );

    // The chart's ConfigMap passes the webhook's validation; a broken change is rejected.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let config_name = rendered.slo_config_maps()[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let mut config = config_maps.get(&config_name).await.unwrap();
    config.metadata.managed_fields = None;
    let chart_config = config.clone();
    config_maps
        .replace(&config_name, &PostParams::default(), &config)
        .await
        .expect("the chart's ConfigMap is valid");
    let mut broken = config_maps.get(&config_name).await.unwrap();
    broken.data.as_mut().unwrap().insert(
        "colocation-config".into(),
        r#"{"enable": true, "cpuReclaimThresholdPercent": -1}"#.into(),
    );
    let error = config_maps
        .replace(&config_name, &PostParams::default(), &broken)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("colocation-config"), "{error}");

    // Every call the webhook made is allowed by the chart's RBAC.
    let made = chart_support::accesses(&calls);
    println!("koord-webhook calls: {made:#?}");
    for access in &made {
        assert!(
            chart_support::allowed(&rendered, NAMESPACE, "koord-webhook", access),
            "koord-webhook RBAC lacks {access:?}"
        );
    }
    assert!(
        made.iter()
            .any(|a| a.resource == "mutatingwebhookconfigurations" && a.verb == "update")
    );

    // Outage: pods are still created (Ignore) and ConfigMaps outside the config namespace are
    // never sent to the failing-closed webhook; only the config namespace's writes wait.
    running.handle.shutdown();
    running.task.abort();
    cluster.unregister_service(&cli.namespace, &cli.service_name);
    let mut late = pod.clone();
    late.metadata.name = Some("during-outage".into());
    pods.create(&PostParams::default(), &late)
        .await
        .expect("pods are created while the webhook is down");
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut other = chart_config.clone();
    other.metadata = kube::api::ObjectMeta {
        name: Some(config_name.clone()),
        ..Default::default()
    };
    elsewhere
        .create(&PostParams::default(), &other)
        .await
        .expect("ConfigMaps elsewhere are not gated");
    let blocked = config_maps
        .replace(&config_name, &PostParams::default(), &chart_config)
        .await;
    assert!(
        blocked.is_err(),
        "the config namespace's ConfigMap webhook fails closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_on_the_charts_args_stays_within_the_charts_rbac() {
    let Some(helm) = chart_support::helm() else { return };
    let (rendered, cluster, client) = cluster_with_chart_crds(&helm).await;
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
        container_argv(
            "koord-manager",
            container(rendered.get("Deployment", "koord-manager")),
        ),
        &[
            ("--health-addr", "127.0.0.1:0"),
            ("--metrics-addr", "127.0.0.1:0"),
        ],
    );
    let mut argv = argv;
    argv.push(format!("--identity={}", common::unique("koord-manager")));
    let cli = manager_cli(&argv).unwrap();
    let (manager_client, calls) = chart_support::recording_client(cluster.kube_config());
    let stop = tokio_util::sync::CancellationToken::new();
    let shutdown = stop.clone();
    let task = tokio::spawn(async move {
        koord_manager::run::run(cli.run, manager_client, async move { shutdown.cancelled().await }).await
    });

    // The manager creates the NodeMetric; a fresh report makes it publish batch resources.
    let metrics: Api<koord_api::nodemetric::NodeMetric> = Api::all(client.clone());
    common::wait_for("the NodeMetric", Duration::from_secs(30), async || {
        metrics.get_opt(&node).await.ok().flatten()
    })
    .await;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let report = json!({"status": {
        "updateTime": now,
        "nodeMetric": {
            "nodeUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}},
            "systemUsage": {"resources": {"cpu": "100m", "memory": "256Mi"}},
        },
        "podsMetric": [],
    }});
    metrics
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(&report))
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    common::wait_for(
        "batch resources on the node",
        // Seconds on a quiet machine; minutes seen while other builds load a 2-core one.
        Duration::from_secs(90),
        async || {
            let n = nodes.get(&node).await.ok()?;
            n.status?.allocatable?.get("kubernetes.io/batch-cpu").cloned()
        },
    )
    .await;
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;

    let made = chart_support::accesses(&calls);
    println!("koord-manager calls: {made:#?}");
    for access in &made {
        assert!(
            chart_support::allowed(&rendered, NAMESPACE, "koord-manager", access),
            "koord-manager RBAC lacks {access:?}"
        );
    }
    // NodeSLOs and NodeMetrics are created by server-side apply: a PATCH (the chart also
    // grants `create`, which kube-apiserver checks when an apply creates the object).
    for (resource, verb) in [
        ("nodes/status", "patch"),
        ("leases", "create"),
        ("nodemetrics", "patch"),
        ("nodeslos", "patch"),
    ] {
        assert!(
            made.iter().any(|a| a.resource == resource && a.verb == verb),
            "the run made no {verb} on {resource}"
        );
    }
}
