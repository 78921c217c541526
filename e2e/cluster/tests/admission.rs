//! Admission webhooks over TLS: mutation applied, denial, selectors, failurePolicy on a dead
//! webhook, caBundle verification, `url` client configs, ConfigMap validation on update.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;

use axum::Json;
use axum::routing::post;
use base64::Engine;
use common::{cluster_with_namespace, pod};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use koord_testcluster::SelfSignedCert;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn respond(review: &Value, allowed: bool, patch: Option<Value>, msg: &str) -> Json<Value> {
    let uid = review["request"]["uid"].clone();
    let mut resp = json!({"uid": uid, "allowed": allowed});
    if let Some(p) = patch {
        resp["patchType"] = json!("JSONPatch");
        resp["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&p).unwrap()));
    }
    if !allowed {
        resp["status"] = json!({"code": 403, "message": msg});
    }
    Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}))
}

/// A test webhook: /mutate adds label mutated=yes; /validate denies objects labelled deny.
async fn start_webhook(names: &[&str]) -> (SocketAddr, SelfSignedCert, CancellationToken) {
    let cert = SelfSignedCert::generate(names).unwrap();
    let app = axum::Router::new()
        .route(
            "/mutate",
            post(|Json(r): Json<Value>| async move {
                let has_labels = r["request"]["object"]["metadata"]["labels"].is_object();
                let patch = if has_labels {
                    json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
                } else {
                    json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
                };
                respond(&r, true, Some(patch), "")
            }),
        )
        .route(
            "/validate",
            post(|Json(r): Json<Value>| async move {
                let deny = r["request"]["object"]["metadata"]["labels"]["deny"].is_string()
                    || r["request"]["object"]["data"]["bad"].is_string();
                respond(&r, !deny, None, "labelled deny")
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(koord_testcluster::apiserver::tls::serve_tls(listener, cert.server_config().unwrap(), app, cancel.clone()));
    (addr, cert, cancel)
}

fn rule(resources: &[&str], ops: &[&str]) -> Value {
    json!({"operations": ops, "apiGroups": [""], "apiVersions": ["v1"], "resources": resources})
}

fn service_ref(ns: &str, name: &str, path: &str, ca: &str) -> Value {
    json!({"service": {"namespace": ns, "name": name, "path": path, "port": 443}, "caBundle": ca})
}

async fn label_namespace(client: &kube::Client, ns: &str) {
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.patch(ns, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"webhooks": "on"}}}))).await.unwrap();
}

#[tokio::test]
async fn mutating_and_validating_webhooks_over_tls() {
    let (cluster, client, ns) = cluster_with_namespace().await;
    label_namespace(&client, &ns).await;
    let svc_ns = "koordinator-system";
    let (addr, cert, _stop) = start_webhook(&[&format!("koord-webhook.{svc_ns}.svc")]).await;
    cluster.register_service(svc_ns, "koord-webhook", addr);
    let ca = cert.ca_bundle_base64();
    let mwc: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "koord-mutating"},
        "webhooks": [{
            "name": "mpod.koordinator.sh", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": service_ref(svc_ns, "koord-webhook", "/mutate", &ca),
            "rules": [rule(&["pods"], &["CREATE"])],
            "namespaceSelector": {"matchLabels": {"webhooks": "on"}},
            "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
            "failurePolicy": "Fail"
        }]
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone()).create(&PostParams::default(), &mwc).await.unwrap();
    let vwc: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "koord-validating"},
        "webhooks": [{
            "name": "vpod.koordinator.sh", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": service_ref(svc_ns, "koord-webhook", "/validate", &ca),
            "rules": [rule(&["pods"], &["CREATE", "UPDATE"]), rule(&["configmaps"], &["UPDATE"])],
            "failurePolicy": "Fail", "timeoutSeconds": 5
        }]
    }))
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone()).create(&PostParams::default(), &vwc).await.unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let p = pods.create(&PostParams::default(), &pod("m", &[])).await.unwrap();
    assert_eq!(p.metadata.labels.unwrap()["mutated"], "yes");
    let p = pods.create(&PostParams::default(), &pod("s", &[("skip", "1")])).await.unwrap();
    assert!(!p.metadata.labels.unwrap().contains_key("mutated"), "objectSelector excludes it");
    let err = pods.create(&PostParams::default(), &pod("d", &[("deny", "1")])).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 403 && s.message.contains("labelled deny")), "{err:?}");
    // Update rules apply too.
    let err = pods.patch("m", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"deny": "x"}}}))).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 403));
    // Namespace without the label: not mutated.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "slo-controller-config"}, "data": {"ok": "1"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let err = cms.patch("slo-controller-config", &PatchParams::default(), &Patch::Merge(json!({"data": {"bad": "1"}}))).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 403), "ConfigMap update is validated: {err:?}");
    let plain: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p = plain.create(&PostParams::default(), &pod(&common::unique("plain"), &[])).await.unwrap();
    assert!(p.metadata.labels.unwrap_or_default().get("mutated").is_none(), "namespaceSelector excludes default");
}

async fn dead_webhook_with_policy(policy: &str) -> Result<Pod, kube::Error> {
    let (cluster, client, ns) = cluster_with_namespace().await;
    // A port nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    cluster.register_service("kube-system", "dead", dead);
    let cert = SelfSignedCert::generate(&["dead.kube-system.svc"]).unwrap();
    let mwc: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "dead"},
        "webhooks": [{
            "name": "dead.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": service_ref("kube-system", "dead", "/m", &cert.ca_bundle_base64()),
            "rules": [rule(&["pods"], &["CREATE"])], "failurePolicy": policy, "timeoutSeconds": 2
        }]
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone()).create(&PostParams::default(), &mwc).await.unwrap();
    Api::<Pod>::namespaced(client, &ns).create(&PostParams::default(), &pod("x", &[])).await
}

#[tokio::test]
async fn dead_webhook_failure_policy() {
    assert!(dead_webhook_with_policy("Ignore").await.is_ok());
    let err = dead_webhook_with_policy("Fail").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 500 && s.message.contains("failed calling webhook")), "{err:?}");
}

#[tokio::test]
async fn ca_bundle_is_verified_and_url_configs_work() {
    let (_cluster, client, ns) = cluster_with_namespace().await;
    let (addr, cert, _stop) = start_webhook(&["127.0.0.1"]).await;
    let other = SelfSignedCert::generate(&["127.0.0.1"]).unwrap();
    let mk = |name: &str, ca: String| -> MutatingWebhookConfiguration {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [{
                "name": format!("{name}.example.com"), "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "clientConfig": {"url": format!("https://{addr}/mutate"), "caBundle": ca},
                "rules": [rule(&["pods"], &["CREATE"])], "failurePolicy": "Fail"
            }]
        }))
        .unwrap()
    };
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    mwcs.create(&PostParams::default(), &mk("wrong-ca", other.ca_bundle_base64())).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let err = pods.create(&PostParams::default(), &pod("a", &[])).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 500), "an untrusted certificate fails the call: {err:?}");
    mwcs.delete("wrong-ca", &Default::default()).await.unwrap();
    mwcs.create(&PostParams::default(), &mk("right-ca", cert.ca_bundle_base64())).await.unwrap();
    let p = pods.create(&PostParams::default(), &pod("b", &[])).await.unwrap();
    assert_eq!(p.metadata.labels.unwrap()["mutated"], "yes");
}
