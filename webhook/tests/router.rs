//! The admission router driven with `oneshot`: every endpoint, malformed input, and property
//! tests that arbitrary bodies never panic and always get HTTP 200 with a review.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine;
use http_body_util::BodyExt;
use koord_webhook::server::router;
use koord_webhook::view::StaticView;
use proptest::prelude::*;
use serde_json::{Value, json};
use tower::ServiceExt;

use common::{app_state, review, seed_view, spark_pod};

async fn post(view: StaticView, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let (state, _registry) = app_state(view);
    let response = router(state)
        .oneshot(
            Request::post(path)
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn response(value: &Value) -> &Value {
    &value["response"]
}

#[tokio::test]
async fn mutate_pod_returns_a_json_patch_for_the_seed_profile() {
    let body = review("Pod", "", "pods", "CREATE", Some("spark"), spark_pod(), None);
    let (status, answer) = post(seed_view(), "/mutate-pod", serde_json::to_vec(&body).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let response = response(&answer);
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    let mut pod = spark_pod();
    json_patch::patch(&mut pod, &patch).unwrap();
    assert_eq!(pod["metadata"]["labels"]["koordinator.sh/qosClass"], "BE");
    assert_eq!(pod["spec"]["priority"], 5000);
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["requests"]["kubernetes.io/batch-cpu"],
        "1000"
    );
}

#[tokio::test]
async fn mutate_pod_ignores_update_and_sub_resources() {
    let update = review(
        "Pod",
        "",
        "pods",
        "UPDATE",
        Some("spark"),
        spark_pod(),
        Some(spark_pod()),
    );
    let (_, answer) = post(seed_view(), "/mutate-pod", serde_json::to_vec(&update).unwrap()).await;
    assert_eq!(response(&answer)["allowed"], true);
    assert!(response(&answer).get("patch").is_none_or(Value::is_null));

    let mut binding = review(
        "Binding",
        "",
        "pods",
        "CREATE",
        Some("spark"),
        json!({"metadata": {"name": "x"}, "target": {"name": "n"}}),
        None,
    );
    binding["request"]["subResource"] = json!("binding");
    let (status, answer) = post(seed_view(), "/mutate-pod", serde_json::to_vec(&binding).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(response(&answer)["allowed"], true);
    // A sub-resource object that does not look like a Pod at all is still allowed, uid echoed.
    binding["request"]["object"] = json!({"target": {"name": "n"}});
    let (_, answer) = post(
        seed_view(),
        "/validate-pod",
        serde_json::to_vec(&binding).unwrap(),
    )
    .await;
    assert_eq!(response(&answer)["allowed"], true);
    assert_eq!(response(&answer)["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
}

#[tokio::test]
async fn pods_of_excluded_namespaces_are_neither_mutated_nor_validated() {
    // A profile selecting every namespace: kube-system and koordinator-system pods would be
    // mutated by it, were they not excluded (on Kubernetes before 1.21 the webhook
    // configurations' namespace-name selector cannot keep them away).
    let mut view = seed_view();
    for namespace in ["kube-system", "koordinator-system"] {
        view.namespaces.insert(
            namespace.into(),
            std::collections::BTreeMap::from([("koordinator.sh/enable-colocation".into(), "true".into())]),
        );
        let body = review("Pod", "", "pods", "CREATE", Some(namespace), spark_pod(), None);
        let (status, answer) = post(view.clone(), "/mutate-pod", serde_json::to_vec(&body).unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&answer)["allowed"], true, "{namespace}");
        assert_eq!(response(&answer)["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert!(
            response(&answer).get("patch").is_none_or(Value::is_null),
            "{namespace}: {answer}"
        );

        // A pod the validator would deny elsewhere passes here untouched.
        let pod = json!({
            "metadata": {"name": "p", "labels": {"koordinator.sh/qosClass": "LS"}},
            "spec": {"priority": 5000, "containers": [{"name": "c", "resources": {"requests": {"kubernetes.io/batch-cpu": "1000"}}}]}
        });
        let body = review("Pod", "", "pods", "CREATE", Some(namespace), pod, None);
        let (_, answer) = post(view.clone(), "/validate-pod", serde_json::to_vec(&body).unwrap()).await;
        assert_eq!(response(&answer)["allowed"], true, "{namespace}: {answer}");
    }
    // The same pod in a colocation namespace is still mutated.
    let body = review("Pod", "", "pods", "CREATE", Some("spark"), spark_pod(), None);
    let (_, answer) = post(view, "/mutate-pod", serde_json::to_vec(&body).unwrap()).await;
    assert_eq!(response(&answer)["patchType"], "JSONPatch");
}

#[tokio::test]
async fn missing_priority_class_is_denied_with_the_reason() {
    let mut view = seed_view();
    view.priority_classes.clear();
    let body = review("Pod", "", "pods", "CREATE", Some("spark"), spark_pod(), None);
    let (status, answer) = post(view, "/mutate-pod", serde_json::to_vec(&body).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(response(&answer)["allowed"], false);
    assert!(
        response(&answer)["status"]["message"]
            .as_str()
            .unwrap()
            .contains("PriorityClass \"koord-batch\" does not exist")
    );
}

#[tokio::test]
async fn validate_pod_denies_batch_resources_without_be() {
    let pod = json!({
        "metadata": {"name": "p", "labels": {"koordinator.sh/qosClass": "LS"}},
        "spec": {"priority": 5000, "containers": [{"name": "c", "resources": {"requests": {"kubernetes.io/batch-cpu": "1000"}}}]}
    });
    let body = review("Pod", "", "pods", "CREATE", Some("default"), pod, None);
    let (_, answer) = post(
        StaticView::default(),
        "/validate-pod",
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(response(&answer)["allowed"], false);
    assert_eq!(
        response(&answer)["status"]["message"],
        "metadata.labels[koordinator.sh/qosClass]: is \"LS\" but a pod requesting kubernetes.io/batch-cpu (koordinator colocation resources) must have QoS BE"
    );
}

#[tokio::test]
async fn validate_configmap_checks_only_the_slo_config() {
    let bad = json!({"metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
        "data": {"cpu-burst-config": "{\"podStrategies\": [{\"podSelector\": {\"matchLabels\": {\"a\": \"b\"}}, \"cpuBurstConfig\": {\"cpuBurstPercent\": 0}}]}"}});
    let body = review(
        "ConfigMap",
        "",
        "configmaps",
        "UPDATE",
        Some("koordinator-system"),
        bad.clone(),
        Some(bad.clone()),
    );
    let (_, answer) = post(
        StaticView::default(),
        "/validate-configmap",
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(response(&answer)["allowed"], false);
    assert_eq!(
        response(&answer)["status"]["message"],
        "cpu-burst-config: podStrategies[0].cpuBurstConfig.cpuBurstPercent: 0 is below 1"
    );
    let mut other = bad.clone();
    other["metadata"]["name"] = json!("something-else");
    let body = review(
        "ConfigMap",
        "",
        "configmaps",
        "UPDATE",
        Some("koordinator-system"),
        other,
        None,
    );
    let (_, answer) = post(
        StaticView::default(),
        "/validate-configmap",
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(response(&answer)["allowed"], true);
    let delete = review(
        "ConfigMap",
        "",
        "configmaps",
        "DELETE",
        Some("koordinator-system"),
        Value::Null,
        Some(bad),
    );
    let (_, answer) = post(
        StaticView::default(),
        "/validate-configmap",
        serde_json::to_vec(&delete).unwrap(),
    )
    .await;
    assert_eq!(response(&answer)["allowed"], true);
}

#[tokio::test]
async fn validate_profile_rejects_bad_probability_and_qos() {
    let profile = json!({"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
        "metadata": {"name": "p"}, "spec": {"probability": 150, "qosClass": "GOLD"}});
    let body = review(
        "ClusterColocationProfile",
        "config.koordinator.sh",
        "clustercolocationprofiles",
        "CREATE",
        None,
        profile,
        None,
    );
    let (_, answer) = post(
        StaticView::default(),
        "/validate-clustercolocationprofile",
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(response(&answer)["allowed"], false);
    let message = response(&answer)["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("spec.probability: probability 150 is outside 0..=100"),
        "{message}"
    );
    assert!(
        message.contains("spec.qosClass: \"GOLD\" is not one of LSE, LSR, LS, BE, SYSTEM"),
        "{message}"
    );
}

#[tokio::test]
async fn malformed_bodies_get_an_invalid_review_with_status_200() {
    for body in [
        &b"not json"[..],
        b"{}",
        b"{\"request\": 5}",
        b"{\"request\": {\"uid\": \"u1\", \"kind\": {\"kind\": \"Pod\"}}}",
    ] {
        let (status, answer) = post(seed_view(), "/mutate-pod", body.to_vec()).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(body));
        assert_eq!(response(&answer)["allowed"], false);
        assert_eq!(response(&answer)["status"]["reason"], "InvalidRequest");
    }
    // The uid is echoed when it can be read, so the API server can match the answer.
    let (_, answer) = post(
        seed_view(),
        "/validate-pod",
        br#"{"request": {"uid": "u1", "kind": {"kind": "Pod"}}}"#.to_vec(),
    )
    .await;
    assert_eq!(response(&answer)["uid"], "u1");
}

#[tokio::test]
async fn metrics_count_admissions_by_path_operation_and_result() {
    let (state, registry) = app_state(seed_view());
    let app = router(state);
    let body = serde_json::to_vec(&review(
        "Pod",
        "",
        "pods",
        "CREATE",
        Some("spark"),
        spark_pod(),
        None,
    ))
    .unwrap();
    for _ in 0..2 {
        app.clone()
            .oneshot(
                Request::post("/mutate-pod")
                    .body(Body::from(body.clone()))
                    .unwrap(),
            )
            .await
            .unwrap();
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(
            r#"koord_webhook_admissions_total{path="/mutate-pod",operation="CREATE",result="patched"} 2"#
        ),
        "{text}"
    );
    assert!(
        text.contains("koord_webhook_admission_duration_seconds_count{path=\"/mutate-pod\"} 2"),
        "{text}"
    );
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-zA-Z0-9./%-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("metadata".to_string()),
                    Just("spec".to_string()),
                    Just("labels".to_string()),
                    Just("containers".to_string()),
                    Just("resources".to_string()),
                    Just("requests".to_string()),
                    Just("cpu".to_string()),
                    Just("name".to_string()),
                    Just("priority".to_string()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..5
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_bodies_never_fail_the_handler(body in prop::collection::vec(any::<u8>(), 0..256), path_index in 0usize..4) {
        let path = ["/mutate-pod", "/validate-pod", "/validate-configmap", "/validate-clustercolocationprofile"][path_index];
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (status, answer) = runtime.block_on(post(seed_view(), path, body));
        prop_assert_eq!(status, StatusCode::OK);
        prop_assert_eq!(&answer["response"]["allowed"], &json!(false));
    }

    #[test]
    fn arbitrary_pods_never_panic(object in arbitrary_json(), operation in prop_oneof![Just("CREATE"), Just("UPDATE")], path_index in 0usize..2) {
        let path = ["/mutate-pod", "/validate-pod"][path_index];
        let body = review("Pod", "", "pods", operation, Some("spark"), object.clone(), Some(object));
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (status, answer) = runtime.block_on(post(seed_view(), path, serde_json::to_vec(&body).unwrap()));
        prop_assert_eq!(status, StatusCode::OK);
        prop_assert!(answer["response"]["allowed"].is_boolean());
    }
}
