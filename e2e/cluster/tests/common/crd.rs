//! A test CRD (`widgets.test.koordinator.sh`, one property per schema keyword) and raw
//! requests that return the status code, `Warning` headers and body, for the schema and
//! field-validation tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use http_body_util::BodyExt;
use koord_testcluster::TestCluster;
use serde_json::{Value, json};

use super::cluster_with_namespace;

pub const GROUP: &str = "test.koordinator.sh";

pub fn crd(count_max: i64) -> Value {
    let spec = json!({
        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
        "count": {"type": "integer", "minimum": 1, "maximum": count_max},
        "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": true,
                  "maximum": 1, "exclusiveMaximum": true},
        "step": {"type": "integer", "multipleOf": 5},
        "enabled": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "level": {"type": "integer", "enum": [1, 2]},
        "when": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"},
        "tags": {"type": "array", "minItems": 1, "maxItems": 3, "uniqueItems": true,
                 "items": {"type": "string"}},
        "labels": {"type": "object", "minProperties": 1, "maxProperties": 2,
                   "additionalProperties": {"type": "string"}},
        "quantity": {"x-kubernetes-int-or-string": true},
        "note": {"type": "string", "nullable": true},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                     "x-kubernetes-preserve-unknown-fields": true},
        "choice": {"type": "integer", "anyOf": [{"minimum": 100}, {"maximum": 0}]},
        "both": {"type": "integer", "allOf": [{"minimum": 0}, {"maximum": 9}]},
        "pick": {"type": "string", "oneOf": [{"pattern": "^a"}, {"pattern": "b$"}]},
        "avoid": {"type": "string", "not": {"enum": ["bad"]}},
    });
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "required": ["name"], "properties": spec},
        "status": {"type": "object", "properties": {
            "phase": {"type": "string", "enum": ["Ready", "Failed"]}}}}});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.koordinator.sh"},
        "spec": {"group": GROUP, "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": schema}}]}
    })
}

/// A raw request: status code, `Warning` headers and the JSON body.
pub async fn call(
    cluster: &TestCluster,
    method: &str,
    uri: &str,
    ct: &str,
    body: Vec<u8>,
) -> (u16, Vec<String>, Value) {
    let client = cluster.client().unwrap();
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", ct)
        .body(kube::client::Body::from(body))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    let code = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        code,
        warnings,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub async fn send(cluster: &TestCluster, method: &str, uri: &str, body: &Value) -> (u16, Vec<String>, Value) {
    let ct = match method {
        "PATCH" => "application/merge-patch+json",
        _ => "application/json",
    };
    call(cluster, method, uri, ct, serde_json::to_vec(body).unwrap()).await
}

pub fn widgets(ns: &str) -> String {
    format!("/apis/{GROUP}/v1/namespaces/{ns}/widgets")
}

pub fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.koordinator.sh/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

pub async fn setup() -> (TestCluster, String) {
    let (cluster, _client, ns) = cluster_with_namespace().await;
    cluster.apply_object(crd(10)).await.unwrap();
    (cluster, ns)
}
