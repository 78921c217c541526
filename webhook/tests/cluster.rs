//! The webhook against the embedded API server: the API server calls it over HTTPS with the
//! caBundle the webhook injected itself (Secret mode), exactly as in a real cluster.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use koord_testcluster::{ClusterOptions, TestCluster};
use koord_webhook::cli::Cli;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

const NS: &str = "koordinator-system";
const SERVICE: &str = "koordinator-webhook-service";

fn webhook_configurations() -> [Value; 2] {
    let client_config =
        |path: &str| json!({"service": {"namespace": NS, "name": SERVICE, "path": path}, "caBundle": "Cg=="});
    [
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "koordinator-mutating-webhook-configuration"},
            "webhooks": [{
                "name": "mpod.koordinator.sh", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": "Ignore", "timeoutSeconds": 5,
                "namespaceSelector": {"matchExpressions": [{"key": "control-plane", "operator": "DoesNotExist"}]},
                "clientConfig": client_config("/mutate-pod"),
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
            }]
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "koordinator-validating-webhook-configuration"},
            "webhooks": [
                {
                    "name": "vpod.koordinator.sh", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                    "failurePolicy": "Ignore", "timeoutSeconds": 5,
                    "clientConfig": client_config("/validate-pod"),
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]
                },
                {
                    "name": "vconfigmap.koordinator.sh", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                    "failurePolicy": "Fail", "timeoutSeconds": 5,
                    "clientConfig": client_config("/validate-configmap"),
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]
                }
            ]
        }),
    ]
}

fn objects() -> Vec<Value> {
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {"control-plane": "koordinator"}}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "spark", "labels": {"koordinator.sh/enable-colocation": "true"}}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}),
    ];
    for (name, value) in [
        ("koord-prod", 9000),
        ("koord-mid", 7000),
        ("koord-batch", 5000),
        ("koord-free", 3000),
    ] {
        objects.push(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}));
    }
    objects.push(serde_yaml::from_str(include_str!("fixtures/seed001_profile.yaml")).unwrap());
    objects
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_in_the_embedded_cluster() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let crds = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/koordinator/crds");
    cluster.install_crds_from_dir(crds).await.unwrap();
    for object in objects().into_iter().chain(webhook_configurations()) {
        cluster.apply_object(object).await.unwrap();
    }
    let client = cluster.client().unwrap();
    let cli = Cli::parse_from([
        "koord-webhook",
        "--port=0",
        "--bind-address=127.0.0.1",
        "--namespace",
        NS,
        "--service-name",
        SERVICE,
    ]);
    let mut registry = Registry::default();
    let webhook = koord_webhook::serve::start(&cli.server, client.clone(), &mut registry)
        .await
        .unwrap();
    cluster.register_service(NS, SERVICE, webhook.addr);
    tokio::time::timeout(Duration::from_secs(20), webhook.caches_synced())
        .await
        .unwrap();

    // Secret mode: the certificates are in the Secret and the CA went into the configurations.
    let secret = Api::<Secret>::namespaced(client.clone(), NS)
        .get("koordinator-webhook-certs")
        .await
        .unwrap();
    let ca = secret.data.as_ref().unwrap()["ca-cert.pem"].0.clone();
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get("koordinator-mutating-webhook-configuration")
        .await
        .unwrap();
    assert_eq!(
        mutating.webhooks.unwrap()[0]
            .client_config
            .ca_bundle
            .as_ref()
            .unwrap()
            .0,
        ca
    );

    // Profile + namespace label: the created pod comes back mutated.
    let spark: Pod = serde_yaml::from_str(include_str!("fixtures/spark_pod.yaml")).unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), "spark");
    let created = pods.create(&PostParams::default(), &spark).await.unwrap();
    let labels = created.metadata.labels.clone().unwrap();
    assert_eq!(labels["koordinator.sh/qosClass"], "BE");
    assert_eq!(labels["koordinator.sh/priority"], "1000");
    let spec = created.spec.unwrap();
    assert_eq!(spec.priority, Some(5000));
    assert_eq!(spec.scheduler_name.as_deref(), Some("koord-scheduler"));
    assert_eq!(
        spec.containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["kubernetes.io/batch-cpu"]
            .0,
        // The webhook writes 1000; the API server stores it canonical, as a real one does.
        "1k"
    );

    // An invalid ConfigMap update is rejected with the precise message.
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), NS);
    let good: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "slo-controller-config", "namespace": NS},
        "data": {"colocation-config": "{\"enable\": true}"}
    }))
    .unwrap();
    config_maps.create(&PostParams::default(), &good).await.unwrap();
    let bad = json!({"data": {"cpu-burst-config":
        "{\"podStrategies\": [{\"podSelector\": {\"matchLabels\": {\"a\": \"b\"}}, \"cpuBurstConfig\": {\"cpuBurstPercent\": 0}}]}"}});
    let error = config_maps
        .patch(
            "slo-controller-config",
            &PatchParams::default(),
            &Patch::Merge(&bad),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("cpu-burst-config: podStrategies[0].cpuBurstConfig.cpuBurstPercent: 0 is below 1"),
        "{error}"
    );

    // Its registry, served as the binary serves it: the admissions, the build, the process.
    let (stop_admin, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let admin = koord_runtime::serve_admin(
        "127.0.0.1:0".parse().unwrap(),
        std::sync::Arc::new(registry),
        webhook.readiness.clone(),
        async {
            let _ = admin_stopped.await;
        },
    )
    .await
    .unwrap();
    let body = koord_test_support::scrape(admin.local_addr).await.unwrap();
    let build = format!(
        "koord_webhook_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(koord_test_support::sample(&body, &build), Some(1.0), "{body}");
    assert!(koord_test_support::sample(&body, "process_resident_memory_bytes").unwrap() > 1e6);
    assert!(koord_test_support::sample(&body, "process_start_time_seconds").unwrap() > 1.6e9);
    let patched = r#"koord_webhook_admissions_total{path="/mutate-pod",operation="CREATE",result="patched"}"#;
    assert!(
        koord_test_support::sample(&body, patched).is_some_and(|n| n >= 1.0),
        "{body}"
    );
    let _ = stop_admin.send(());

    // Webhook down + failurePolicy Ignore: pods are still created (unmutated).
    webhook.handle.shutdown();
    let _ = webhook.task.await;
    let mut second = serde_yaml::from_str::<Pod>(include_str!("fixtures/spark_pod.yaml")).unwrap();
    second.metadata.name = Some("spark-pi-driver-2".into());
    let created = pods.create(&PostParams::default(), &second).await.unwrap();
    assert!(
        !created
            .metadata
            .labels
            .unwrap()
            .contains_key("koordinator.sh/qosClass")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_converge_on_one_secret_and_renew_through_it() {
    use jiff::{SignedDuration, Timestamp};
    use koord_webhook::certs::bundle::{CertPolicy, service_dns_names};
    use koord_webhook::certs::secret::ensure_secret;

    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    cluster
        .apply_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        .await
        .unwrap();
    let client = cluster.client().unwrap();
    let names = service_dns_names(SERVICE, NS);
    let policy = CertPolicy::default();
    let now = Timestamp::now();
    // Four replicas start at once: exactly one creates the Secret, the others adopt it.
    let replicas: Vec<_> = (0..4)
        .map(|_| {
            let (client, names) = (client.clone(), names.clone());
            tokio::spawn(
                async move { ensure_secret(client, NS, "race-certs", &names, now, &policy, None).await },
            )
        })
        .collect();
    let mut bundles = Vec::new();
    for replica in replicas {
        bundles.push(replica.await.unwrap().unwrap());
    }
    assert!(
        bundles.windows(2).all(|pair| pair[0] == pair[1]),
        "replicas disagree"
    );

    // 300 days later the serving certificate is renewed in the Secret; the CA stays.
    let later = now + SignedDuration::from_hours(24 * 300);
    let renewed = ensure_secret(client.clone(), NS, "race-certs", &names, later, &policy, None)
        .await
        .unwrap();
    assert_eq!(renewed.ca_cert_pem, bundles[0].ca_cert_pem);
    assert_ne!(renewed.cert_pem, bundles[0].cert_pem);
    let again = ensure_secret(client, NS, "race-certs", &names, later, &policy, None)
        .await
        .unwrap();
    assert_eq!(again, renewed, "a second sync keeps what is stored");
}

/// A cluster with the CRDs, [`objects`] and the webhook configurations.
async fn cluster_with_objects() -> TestCluster {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let crds = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/koordinator/crds");
    cluster.install_crds_from_dir(crds).await.unwrap();
    for object in objects().into_iter().chain(webhook_configurations()) {
        cluster.apply_object(object).await.unwrap();
    }
    cluster
}

/// Starts a webhook replica (Secret mode, certificate sync every 300 ms) and waits for its
/// caches.
async fn replica(client: &kube::Client) -> koord_webhook::serve::RunningWebhook {
    replica_syncing_every(client, "300ms").await
}

/// [`replica`] with the certificate sync interval `interval`.
async fn replica_syncing_every(
    client: &kube::Client,
    interval: &str,
) -> koord_webhook::serve::RunningWebhook {
    let cli = Cli::parse_from([
        "koord-webhook",
        "--port=0",
        "--bind-address=127.0.0.1",
        &format!("--cert-sync-interval={interval}"),
        "--namespace",
        NS,
        "--service-name",
        SERVICE,
    ]);
    let mut registry = Registry::default();
    let webhook = koord_webhook::serve::start(&cli.server, client.clone(), &mut registry)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), webhook.caches_synced())
        .await
        .unwrap();
    webhook
}

/// Creates a copy of the Spark driver pod named `name`; whether the webhook mutated it.
async fn mutated(client: &kube::Client, name: &str) -> bool {
    let mut pod = serde_yaml::from_str::<Pod>(include_str!("fixtures/spark_pod.yaml")).unwrap();
    pod.metadata.name = Some(name.into());
    let created = Api::<Pod>::namespaced(client.clone(), "spark")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    created
        .metadata
        .labels
        .unwrap_or_default()
        .get("koordinator.sh/qosClass")
        .is_some_and(|q| q == "BE")
}

fn ca_of(secret: &Secret) -> Vec<u8> {
    secret.data.as_ref().unwrap()["ca-cert.pem"].0.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_secret_deleted_while_two_replicas_serve() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = cluster_with_objects().await;
    let client = cluster.client().unwrap();
    let (first, second) = (replica(&client).await, replica(&client).await);
    cluster.register_service(NS, SERVICE, first.addr);
    let secrets = Api::<Secret>::namespaced(client.clone(), NS);
    let old_ca = ca_of(&secrets.get("koordinator-webhook-certs").await.unwrap());
    assert!(mutated(&client, "before").await);

    let configurations = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let injected = async || {
        configurations
            .get("koordinator-mutating-webhook-configuration")
            .await
            .unwrap()
            .webhooks
            .unwrap()[0]
            .client_config
            .ca_bundle
            .as_ref()
            .unwrap()
            .0
            .clone()
    };
    assert_eq!(injected().await, old_ca);

    secrets
        .delete("koordinator-webhook-certs", &Default::default())
        .await
        .unwrap();
    // Both replicas race to restore it from the certificates they serve; admission through
    // either replica works at every moment (a new CA would leave the API server trusting a CA
    // no replica serves until the caBundle is injected again).
    let mut n = 0;
    let mut restored = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while restored.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the Secret did not come back"
        );
        for (addr, who) in [(first.addr, "first"), (second.addr, "second")] {
            cluster.register_service(NS, SERVICE, addr);
            n += 1;
            assert!(
                mutated(&client, &format!("during-{who}-{n}")).await,
                "a pod admitted through the {who} replica while the Secret was gone was not mutated"
            );
        }
        restored = secrets.get_opt("koordinator-webhook-certs").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        ca_of(&restored.unwrap()),
        old_ca,
        "the Secret comes back with the CA the replicas serve"
    );
    // Several syncs later: still that CA, in the Secret and in the configuration.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        ca_of(&secrets.get("koordinator-webhook-certs").await.unwrap()),
        old_ca
    );
    assert_eq!(injected().await, old_ca);
    for (addr, who) in [(first.addr, "first"), (second.addr, "second")] {
        cluster.register_service(NS, SERVICE, addr);
        assert!(mutated(&client, &format!("after-{who}")).await);
    }
    for webhook in [first, second] {
        webhook.handle.shutdown();
        let _ = webhook.task.await;
    }
}

/// With a sync interval of an hour, a deleted Secret comes back at once: the replica watches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_secret_is_restored_at_once_not_at_the_next_sync() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = cluster_with_objects().await;
    let client = cluster.client().unwrap();
    let webhook = replica_syncing_every(&client, "1h").await;
    let secrets = Api::<Secret>::namespaced(client.clone(), NS);
    let ca = ca_of(&secrets.get("koordinator-webhook-certs").await.unwrap());
    // Let the watch start (its first list wakes one sync) before the deletion.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deleted = std::time::Instant::now();
    secrets
        .delete("koordinator-webhook-certs", &Default::default())
        .await
        .unwrap();
    let restored = loop {
        if let Some(secret) = secrets.get_opt("koordinator-webhook-certs").await.unwrap() {
            break secret;
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(10),
            "the Secret did not come back within 10 s (sync interval 1 h)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!("Secret restored {:?} after its deletion", deleted.elapsed());
    assert_eq!(ca_of(&restored), ca, "restored with the CA the replica serves");
    webhook.handle.shutdown();
    let _ = webhook.task.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_racing_on_rotation_agree_on_one_renewal() {
    use jiff::{SignedDuration, Timestamp};
    use koord_webhook::certs::bundle::{CertPolicy, service_dns_names};
    use koord_webhook::certs::{SecretSource, sync_from_secret};

    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = cluster_with_objects().await;
    let client = cluster.client().unwrap();
    let source = SecretSource {
        namespace: NS.into(),
        secret_name: "rotation-certs".into(),
        dns_names: service_dns_names(SERVICE, NS),
        policy: CertPolicy::default(),
        mutating_configuration: "koordinator-mutating-webhook-configuration".into(),
        validating_configuration: "koordinator-validating-webhook-configuration".into(),
    };
    let now = Timestamp::now();
    let issued = sync_from_secret(client.clone(), &source, now, None)
        .await
        .unwrap();
    // 300 days later both replicas sync at the same moment, several rounds in a row.
    let later = now + SignedDuration::from_hours(24 * 300);
    let mut results = Vec::new();
    for _ in 0..3 {
        let round: Vec<_> = (0..2)
            .map(|_| {
                let (client, source) = (client.clone(), source.clone());
                tokio::spawn(async move { sync_from_secret(client, &source, later, None).await })
            })
            .collect();
        for replica in round {
            results.push(replica.await.unwrap().unwrap());
        }
    }
    assert!(
        results.windows(2).all(|pair| pair[0] == pair[1]),
        "replicas disagree"
    );
    assert_ne!(results[0].cert_pem, issued.cert_pem, "not renewed");
    assert_eq!(
        results[0].ca_cert_pem, issued.ca_cert_pem,
        "the CA changed on a serving-certificate renewal"
    );
    let stored = Api::<Secret>::namespaced(client.clone(), NS)
        .get("rotation-certs")
        .await
        .unwrap();
    assert_eq!(stored.data.unwrap()["tls.crt"].0, results[0].cert_pem.as_bytes());
    let mutating = Api::<MutatingWebhookConfiguration>::all(client)
        .get("koordinator-mutating-webhook-configuration")
        .await
        .unwrap();
    assert_eq!(
        mutating.webhooks.unwrap()[0]
            .client_config
            .ca_bundle
            .as_ref()
            .unwrap()
            .0,
        issued.ca_cert_pem.as_bytes()
    );
}
