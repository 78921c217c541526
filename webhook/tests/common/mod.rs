//! Shared helpers for the webhook's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use koord_webhook::metrics::AdmissionMetrics;
use koord_webhook::mutate::profile::CompiledProfile;
use koord_webhook::review::Decider;
use koord_webhook::server::AppState;
use koord_webhook::view::StaticView;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

/// A view with the seed 001 profile, the `spark` namespace labelled for colocation and the
/// chart's PriorityClasses.
pub fn seed_view() -> StaticView {
    let mut view = StaticView::with_koordinator_priority_classes();
    let profile: Value = serde_yaml::from_str(include_str!("../fixtures/seed001_profile.yaml")).unwrap();
    view.profiles
        .push(Arc::new(CompiledProfile::from_json(&profile).unwrap()));
    view.namespaces.insert(
        "spark".into(),
        BTreeMap::from([("koordinator.sh/enable-colocation".into(), "true".into())]),
    );
    view
}

pub fn decider(view: StaticView) -> Decider {
    Decider::new(Arc::new(view))
}

pub fn app_state(view: StaticView) -> (Arc<AppState>, Registry) {
    let mut registry = Registry::default();
    let metrics = AdmissionMetrics::register(&mut registry);
    (
        Arc::new(AppState {
            decider: decider(view),
            metrics,
        }),
        registry,
    )
}

pub fn spark_pod() -> Value {
    serde_yaml::from_str(include_str!("../fixtures/spark_pod.yaml")).unwrap()
}

/// An `admission.k8s.io/v1` AdmissionReview for `object` of `kind` (group "" unless given).
pub fn review(
    kind: &str,
    group: &str,
    resource: &str,
    operation: &str,
    namespace: Option<&str>,
    object: Value,
    old: Option<Value>,
) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "name": object.pointer("/metadata/name").cloned().unwrap_or(json!("")),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": object,
            "oldObject": old,
            "dryRun": false
        }
    })
}
