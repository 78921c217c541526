//! Fixtures shared by the benchmarks: 50 profiles and a realistic pod.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use koord_webhook::mutate::profile::CompiledProfile;
use koord_webhook::view::StaticView;
use serde_json::{Value, json};

/// 50 profiles; five select the benchmark pod (one BE/batch with a patch).
pub fn view() -> StaticView {
    let mut view = StaticView::with_koordinator_priority_classes();
    for index in 0..50 {
        let app = if index % 10 == 0 {
            "web".to_string()
        } else {
            format!("app-{index}")
        };
        let mut spec = json!({
            "namespaceSelector": {"matchLabels": {"team": "payments"}},
            "selector": {"matchLabels": {"app": app}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["frontend", "backend"]}]},
            "labels": {format!("profile-{index}"): "applied"},
            "annotations": {"koordinator.sh/intercepted": "true"},
        });
        if index == 40 {
            spec["qosClass"] = json!("BE");
            spec["priorityClassName"] = json!("koord-batch");
            spec["koordinatorPriority"] = json!(1000);
            spec["schedulerName"] = json!("koord-scheduler");
            spec["patch"] = json!({"spec": {"terminationGracePeriodSeconds": 30}});
        }
        let profile = json!({"metadata": {"name": format!("profile-{index:02}")}, "spec": spec});
        view.profiles
            .push(Arc::new(CompiledProfile::from_json(&profile).unwrap()));
    }
    view.namespaces.insert(
        "payments".into(),
        BTreeMap::from([("team".to_string(), "payments".to_string())]),
    );
    view
}

/// A pod with 3 containers and 10 labels.
pub fn pod() -> Value {
    let container = |name: &str, cpu: &str, memory: &str| {
        json!({"name": name, "image": format!("registry.example.com/{name}:1.2.3"),
            "env": [{"name": "MODE", "value": "prod"}, {"name": "PORT", "value": "8080"}],
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}})
    };
    let labels: serde_json::Map<String, Value> = (0..8)
        .map(|i| (format!("example.com/label-{i}"), json!(format!("value-{i}"))))
        .chain([
            ("app".to_string(), json!("web")),
            ("tier".to_string(), json!("frontend")),
        ])
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-5d8f7c9b4-abcde", "namespace": "payments", "labels": labels},
        "spec": {"containers": [container("app", "500m", "1Gi"), container("sidecar", "100m", "128Mi"), container("log", "50m", "64Mi")]}
    })
}

/// An AdmissionReview carrying `pod()`.
pub fn review_body() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "b1d2c3e4-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "web-5d8f7c9b4-abcde", "namespace": "payments", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod(), "oldObject": null, "dryRun": false
        }
    }))
    .unwrap()
}

/// p-th percentile of sorted nanosecond samples, in microseconds.
pub fn percentile_us(sorted: &[u64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index] as f64 / 1000.0
}
