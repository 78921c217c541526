//! `fieldValidation` Strict/Warn/Ignore (unknown and repeated fields) and the `details.group`
//! of 404/409/422 Status errors, as a real API server (1.33) answers them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::crd::{GROUP, call, send, setup, widget, widgets};
use common::unique;
use serde_json::{Value, json};

#[tokio::test]
async fn field_validation_strict_warn_and_ignore() {
    let (cluster, ns) = setup().await;
    let body = br#"{"apiVersion": "test.koordinator.sh/v1", "kind": "Widget", "metadata": {"name": "NAME"},
                    "spec": {"name": "ab", "count": 1, "count": 2, "foo": 1, "bar": {"x": 1}}}"#;
    let named = |n: &str| {
        String::from_utf8(body.to_vec())
            .unwrap()
            .replace("NAME", n)
            .into_bytes()
    };
    let post = |q: &str| format!("{}{q}", widgets(&ns));

    let (code, warnings, status) = call(
        &cluster,
        "POST",
        &post("?fieldValidation=Strict"),
        "application/json",
        named("s"),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["reason"], "BadRequest");
    assert_eq!(
        status["message"],
        r#"strict decoding error: duplicate field "spec.count", unknown field "spec.bar", unknown field "spec.foo""#
    );
    assert!(warnings.is_empty());

    // Warn is the default without the parameter (1.27+); the fields are dropped, the last
    // duplicate wins.
    for (q, n) in [("", "w1"), ("?fieldValidation=Warn", "w2")] {
        let (code, warnings, obj) = call(&cluster, "POST", &post(q), "application/json", named(n)).await;
        assert_eq!(code, 201, "{obj}");
        assert_eq!(
            warnings,
            [
                r#"299 - "duplicate field \"spec.count\"""#,
                r#"299 - "unknown field \"spec.bar\"""#,
                r#"299 - "unknown field \"spec.foo\"""#
            ]
        );
        assert_eq!(obj["spec"], json!({"name": "ab", "count": 2}));
    }
    let (code, warnings, _) = call(
        &cluster,
        "POST",
        &post("?fieldValidation=Ignore"),
        "application/json",
        named("i"),
    )
    .await;
    assert_eq!((code, warnings.len()), (201, 0));

    // Patches: the patched object is decoded strictly.
    let uri = format!("{}/i?fieldValidation=Strict", widgets(&ns));
    let (code, _, status) = send(&cluster, "PATCH", &uri, &json!({"spec": {"typo": 1}})).await;
    assert_eq!(
        (code, status["message"].as_str()),
        (400, Some(r#"strict decoding error: unknown field "spec.typo""#))
    );
    let uri = format!("{}/i/status?fieldValidation=Strict", widgets(&ns));
    let (code, _, status) = send(
        &cluster,
        "PATCH",
        &uri,
        &json!({"status": {"phase": "Ready", "extra": 1}}),
    )
    .await;
    assert_eq!(
        (code, status["message"].as_str()),
        (
            400,
            Some(r#"strict decoding error: unknown field "status.extra""#)
        )
    );

    // Built-in kinds: duplicates are found (the embedded server has no schema for unknown fields).
    let cm = br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "a": "2"}}"#;
    let uri = format!("/api/v1/namespaces/{ns}/configmaps?fieldValidation=Strict");
    let (code, _, status) = call(&cluster, "POST", &uri, "application/json", cm.to_vec()).await;
    assert_eq!(
        (code, status["message"].as_str()),
        (400, Some(r#"strict decoding error: duplicate field "data.a""#))
    );

    // An unknown directive is refused as the real server validates CreateOptions.
    let (code, _, status) = call(
        &cluster,
        "POST",
        &post("?fieldValidation=strict"),
        "application/json",
        named("x"),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        r#"CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "strict": supported values: "", "Ignore", "Strict", "Warn""#
    );
    assert_eq!(status["details"]["group"], "meta.k8s.io");
}

#[tokio::test]
async fn error_details_carry_the_group() {
    let (cluster, ns) = setup().await;
    let (code, _, body) = send(
        &cluster,
        "GET",
        &format!("{}/missing", widgets(&ns)),
        &Value::Null,
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        body["message"],
        "widgets.test.koordinator.sh \"missing\" not found"
    );
    assert_eq!(
        body["details"],
        json!({"name": "missing", "group": GROUP, "kind": "widgets"})
    );

    let w = widget("w", json!({"name": "ab"}));
    assert_eq!(send(&cluster, "POST", &widgets(&ns), &w).await.0, 201);
    let (code, _, body) = send(&cluster, "POST", &widgets(&ns), &w).await;
    assert_eq!((code, body["reason"].as_str()), (409, Some("AlreadyExists")));
    assert_eq!(
        body["message"],
        "widgets.test.koordinator.sh \"w\" already exists"
    );
    assert_eq!(
        body["details"],
        json!({"name": "w", "group": GROUP, "kind": "widgets"})
    );

    let mut stale = w.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    let (code, _, body) = send(&cluster, "PUT", &format!("{}/w", widgets(&ns)), &stale).await;
    assert_eq!((code, body["reason"].as_str()), (409, Some("Conflict")));
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("Operation cannot be fulfilled on widgets.test.koordinator.sh \"w\": ")
    );
    assert_eq!(
        body["details"],
        json!({"name": "w", "group": GROUP, "kind": "widgets"})
    );

    // Core group: no group in details.
    let (code, _, body) = send(
        &cluster,
        "GET",
        &format!("/api/v1/namespaces/{ns}/pods/nope"),
        &Value::Null,
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(body["details"], json!({"name": "nope", "kind": "pods"}));
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}});
    let (code, _, body) = send(&cluster, "POST", &format!("/api/v1/namespaces/{ns}/pods"), &pod).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Pod \"p\" is invalid: spec.containers: Required value"
    );
    assert_eq!(
        body["details"],
        json!({"name": "p", "kind": "Pod", "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}]})
    );
    // Another group's built-in kind.
    let pc = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": unique("pc")}});
    let (code, _, body) = send(
        &cluster,
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        &pc,
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(body["details"]["group"], "scheduling.k8s.io");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("PriorityClass.scheduling.k8s.io \""),
        "{body}"
    );
}
