//! The webhook configurations the Helm chart installs for koord-webhook, pointed at the running
//! in-process webhook through a Service reference (the embedded API server resolves it through
//! its loopback address map) and carrying the caBundle the webhook generated in its Secret.
//!
//! As the chart: pod webhooks `failurePolicy: Ignore`, namespaces labelled `control-plane`
//! excluded, pod UPDATE mutation only for pods labelled `pod.koordinator.sh/mutating-update:
//! "true"`; the slo-controller-config ConfigMap webhook fails closed (`Fail`). Timeouts are 5 s,
//! as in the chart. The chart's namespaceSelectors also exclude `kube-system` and the release
//! namespace by `kubernetes.io/metadata.name` (a label the embedded API server does not set) and
//! scope the ConfigMap webhook to the config namespace; `tests/chart.rs` checks that everything
//! else here equals the chart.

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use koord_testcluster::TestCluster;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::{Value, json};

/// Name of the MutatingWebhookConfiguration (the chart's; also the webhook's default).
pub const MUTATING_NAME: &str = "koordinator-mutating-webhook-configuration";
/// Name of the ValidatingWebhookConfiguration (the chart's; also the webhook's default).
pub const VALIDATING_NAME: &str = "koordinator-validating-webhook-configuration";
/// Seconds the API server waits for the webhook.
const TIMEOUT_SECONDS: i32 = 5;
/// Key of the CA certificate in the webhook's Secret.
const CA_KEY: &str = "ca-cert.pem";

/// Where the configurations point.
#[derive(Debug, Clone)]
pub struct Target {
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub service: String,
    /// PEM CA certificate(s) that verify the webhook's serving certificate.
    pub ca_bundle: Vec<u8>,
}

fn webhook(target: &Target, name: &str, path: &str, failure_policy: &str, rules: Value) -> Value {
    json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "timeoutSeconds": TIMEOUT_SECONDS,
        "clientConfig": {
            "service": { "namespace": target.namespace, "name": target.service, "path": path },
            "caBundle": base64::engine::general_purpose::STANDARD.encode(&target.ca_bundle),
        },
        "rules": rules,
    })
}

fn pod_rules(operations: &[&str]) -> Value {
    json!([{ "apiGroups": [""], "apiVersions": ["v1"], "operations": operations, "resources": ["pods"] }])
}

/// The chart's namespace selector for pod webhooks: the control plane's namespace is left alone.
fn not_control_plane() -> Value {
    json!({ "matchExpressions": [{ "key": "control-plane", "operator": "DoesNotExist" }] })
}

/// The MutatingWebhookConfiguration and ValidatingWebhookConfiguration, as JSON objects.
pub fn configurations(target: &Target) -> [Value; 2] {
    let mut mutate_create = webhook(
        target,
        "mpod-create.koordinator.sh",
        "/mutate-pod",
        "Ignore",
        pod_rules(&["CREATE"]),
    );
    mutate_create["namespaceSelector"] = not_control_plane();
    let mut mutate_update = webhook(
        target,
        "mpod-update.koordinator.sh",
        "/mutate-pod",
        "Ignore",
        pod_rules(&["UPDATE"]),
    );
    mutate_update["namespaceSelector"] = not_control_plane();
    mutate_update["objectSelector"] =
        json!({ "matchLabels": { "pod.koordinator.sh/mutating-update": "true" } });
    let mut validate_pod = webhook(
        target,
        "vpod.koordinator.sh",
        "/validate-pod",
        "Ignore",
        pod_rules(&["CREATE", "UPDATE"]),
    );
    validate_pod["namespaceSelector"] = not_control_plane();
    let validate_config_map = webhook(
        target,
        "vconfigmap.koordinator.sh",
        "/validate-configmap",
        "Fail",
        json!([{ "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"] }]),
    );
    let validate_profile = webhook(
        target,
        "vclustercolocationprofile.koordinator.sh",
        "/validate-clustercolocationprofile",
        "Fail",
        json!([{ "apiGroups": ["config.koordinator.sh"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"], "resources": ["clustercolocationprofiles"], "scope": "Cluster" }]),
    );
    [
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": { "name": MUTATING_NAME },
            "webhooks": [mutate_create, mutate_update],
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": { "name": VALIDATING_NAME },
            "webhooks": [validate_pod, validate_config_map, validate_profile],
        }),
    ]
}

/// Why the webhook's namespace or CA could not be prepared or read.
#[derive(Debug, thiserror::Error)]
pub enum WebhookConfigError {
    /// The embedded cluster refused a request.
    #[error(transparent)]
    Cluster(#[from] koord_testcluster::ClusterError),
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// What was attempted.
        what: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The webhook's Secret holds no CA.
    #[error("Secret {namespace}/{name} has no {CA_KEY}")]
    NoCa {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
}

/// Creates `namespace` when missing (the webhook keeps its Secret there).
pub async fn ensure_namespace(cluster: &TestCluster, namespace: &str) -> Result<(), WebhookConfigError> {
    let client = cluster.client()?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let existing = namespaces
        .get_opt(namespace)
        .await
        .map_err(|source| WebhookConfigError::Api {
            what: format!("reading Namespace {namespace}"),
            source,
        })?;
    if existing.is_some() {
        return Ok(());
    }
    cluster
        .apply_object(json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": namespace } }))
        .await?;
    Ok(())
}

/// The CA the webhook stored in its Secret (Secret mode).
pub async fn ca_bundle(
    client: kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<u8>, WebhookConfigError> {
    let secret = Api::<Secret>::namespaced(client, namespace)
        .get(name)
        .await
        .map_err(|source| WebhookConfigError::Api {
            what: format!("reading Secret {namespace}/{name}"),
            source,
        })?;
    secret
        .data
        .and_then(|mut data| data.remove(CA_KEY))
        .map(|bytes| bytes.0)
        .ok_or_else(|| WebhookConfigError::NoCa {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
}

/// Deletes both configurations (best effort, logged).
pub async fn remove(cluster: &TestCluster) {
    let Ok(client) = cluster.client() else { return };
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    if let Err(error) = mutating.delete(MUTATING_NAME, &DeleteParams::default()).await {
        tracing::debug!(%error, "removing the mutating webhook configuration");
    }
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client);
    if let Err(error) = validating.delete(VALIDATING_NAME, &DeleteParams::default()).await {
        tracing::debug!(%error, "removing the validating webhook configuration");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn chart_failure_policies_and_ca_bundle() {
        let target = Target {
            namespace: "ns".into(),
            service: "svc".into(),
            ca_bundle: b"PEM".to_vec(),
        };
        let [mutating, validating] = configurations(&target);
        let policies: Vec<(&str, &str)> = validating["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["clientConfig"]["service"]["path"].as_str().unwrap(),
                    w["failurePolicy"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            policies,
            vec![
                ("/validate-pod", "Ignore"),
                ("/validate-configmap", "Fail"),
                ("/validate-clustercolocationprofile", "Fail"),
            ]
        );
        let create = &mutating["webhooks"][0];
        assert_eq!(create["failurePolicy"], "Ignore");
        assert_eq!(create["timeoutSeconds"], 5);
        assert_eq!(create["clientConfig"]["caBundle"], "UEVN");
        assert_eq!(create["clientConfig"]["service"]["name"], "svc");
        assert_eq!(
            mutating["webhooks"][1]["objectSelector"]["matchLabels"]["pod.koordinator.sh/mutating-update"],
            "true"
        );
    }
}
