//! Custom resources are validated against their CRD's `openAPIV3Schema` as a real API server
//! (1.33) does: every keyword with an accepted and a refused value and the exact 422 message
//! and cause; several causes; update, patch, apply and status writes; ratcheting of unchanged
//! invalid values; schema validation before validating webhooks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::crd::{GROUP, call, crd, send, setup, widget, widgets};
use common::unique;
use serde_json::{Value, json};

/// (spec fields merged onto `{"name": "ab"}`, expected cause line or None, expected reason).
fn table() -> Vec<(Value, Option<&'static str>, &'static str)> {
    let ok = |v: Value| (v, None, "");
    vec![
        // type
        ok(json!({"count": 3})),
        ok(json!({"count": 3.0})),
        (
            json!({"count": "3"}),
            Some(
                r#"spec.count: Invalid value: "string": spec.count in body must be of type integer: "string""#,
            ),
            "FieldValueTypeInvalid",
        ),
        (
            json!({"count": 2.5}),
            Some(
                r#"spec.count: Invalid value: "number": spec.count in body must be of type integer: "number""#,
            ),
            "FieldValueTypeInvalid",
        ),
        ok(json!({"enabled": true})),
        (
            json!({"enabled": "yes"}),
            Some(
                r#"spec.enabled: Invalid value: "string": spec.enabled in body must be of type boolean: "string""#,
            ),
            "FieldValueTypeInvalid",
        ),
        ok(json!({"ratio": 0.5})),
        (
            json!({"ratio": "half"}),
            Some(
                r#"spec.ratio: Invalid value: "string": spec.ratio in body must be of type number: "string""#,
            ),
            "FieldValueTypeInvalid",
        ),
        (
            json!({"tags": "a"}),
            Some(r#"spec.tags: Invalid value: "string": spec.tags in body must be of type array: "string""#),
            "FieldValueTypeInvalid",
        ),
        (
            json!({"free": []}),
            Some(r#"spec.free: Invalid value: "array": spec.free in body must be of type object: "array""#),
            "FieldValueTypeInvalid",
        ),
        (
            json!({"labels": {"a": 1}}),
            Some(
                r#"spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer""#,
            ),
            "FieldValueTypeInvalid",
        ),
        // nullable (a null of a non-nullable field is pruned first)
        ok(json!({"note": null})),
        ok(json!({"enabled": null})),
        (
            json!({"tags": [null]}),
            Some(
                r#"spec.tags[0]: Invalid value: "null": spec.tags[0] in body must be of type string: "null""#,
            ),
            "FieldValueTypeInvalid",
        ),
        // enum
        ok(json!({"mode": "fast"})),
        (
            json!({"mode": "medium"}),
            Some(r#"spec.mode: Unsupported value: "medium": supported values: "fast", "slow""#),
            "FieldValueNotSupported",
        ),
        ok(json!({"level": 2})),
        (
            json!({"level": 3}),
            Some(r#"spec.level: Unsupported value: 3: supported values: "1", "2""#),
            "FieldValueNotSupported",
        ),
        // minimum / maximum / exclusive
        (
            json!({"count": 0}),
            Some("spec.count: Invalid value: 0: spec.count in body should be greater than or equal to 1"),
            "FieldValueInvalid",
        ),
        (
            json!({"count": 11}),
            Some("spec.count: Invalid value: 11: spec.count in body should be less than or equal to 10"),
            "FieldValueInvalid",
        ),
        (
            json!({"ratio": 0}),
            Some("spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0"),
            "FieldValueInvalid",
        ),
        (
            json!({"ratio": 1.0}),
            Some("spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1"),
            "FieldValueInvalid",
        ),
        // multipleOf
        ok(json!({"step": 10})),
        (
            json!({"step": 7}),
            Some("spec.step: Invalid value: 7: spec.step in body should be a multiple of 5"),
            "FieldValueInvalid",
        ),
        // minLength / maxLength / pattern
        (
            json!({"name": "a"}),
            Some(r#"spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long"#),
            "FieldValueInvalid",
        ),
        (
            json!({"name": "abcdef"}),
            Some("spec.name: Too long: may not be more than 5 bytes"),
            "FieldValueTooLong",
        ),
        (
            json!({"name": "AB"}),
            Some(r#"spec.name: Invalid value: "AB": spec.name in body should match '^[a-z]+$'"#),
            "FieldValueInvalid",
        ),
        // format
        ok(json!({"when": "2024-01-02T03:04:05Z", "id": "123e4567-e89b-12d3-a456-426614174000"})),
        (
            json!({"when": "soon"}),
            Some(r#"spec.when: Invalid value: "soon": spec.when in body must be of type date-time: "soon""#),
            "FieldValueTypeInvalid",
        ),
        (
            json!({"id": "x-1"}),
            Some(r#"spec.id: Invalid value: "x-1": spec.id in body must be of type uuid: "x-1""#),
            "FieldValueTypeInvalid",
        ),
        // minItems / maxItems / uniqueItems / items
        ok(json!({"tags": ["a", "b"]})),
        (
            json!({"tags": []}),
            Some("spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items"),
            "FieldValueInvalid",
        ),
        (
            json!({"tags": ["a", "b", "c", "d"]}),
            Some("spec.tags: Too many: 4: must have at most 3 items"),
            "FieldValueTooMany",
        ),
        (
            json!({"tags": ["a", "a"]}),
            Some(r#"spec.tags: Invalid value: "": spec.tags in body shouldn't contain duplicates"#),
            "FieldValueInvalid",
        ),
        // minProperties / maxProperties / additionalProperties
        ok(json!({"labels": {"a": "b"}})),
        (
            json!({"labels": {}}),
            Some("spec.labels: Invalid value: 0: spec.labels in body should have at least 1 properties"),
            "FieldValueInvalid",
        ),
        (
            json!({"labels": {"a": "1", "b": "2", "c": "3"}}),
            Some("spec.labels: Too many: 3: must have at most 2 items"),
            "FieldValueTooMany",
        ),
        // x-kubernetes-int-or-string
        ok(json!({"quantity": 5})),
        ok(json!({"quantity": "50%"})),
        (
            json!({"quantity": true}),
            Some(
                r#"spec.quantity: Invalid value: "boolean": spec.quantity in body must be of type integer,string: "boolean""#,
            ),
            "FieldValueTypeInvalid",
        ),
        // x-kubernetes-preserve-unknown-fields
        ok(json!({"free": {"anything": {"nested": [1, "x"]}}})),
        // x-kubernetes-embedded-resource
        ok(json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}})),
        (
            json!({"template": {"kind": "Pod"}}),
            Some("spec.template.apiVersion: Required value"),
            "FieldValueRequired",
        ),
        // anyOf / allOf / oneOf / not
        ok(json!({"choice": 150, "both": 5, "pick": "ax", "avoid": "good"})),
        ok(json!({"choice": -1})),
        (
            json!({"pick": "ab"}),
            Some(
                r#"<nil>: Invalid value: "": "spec.pick" must validate one and only one schema (oneOf). Found 2 valid alternatives"#,
            ),
            "FieldValueInvalid",
        ),
        (
            json!({"avoid": "bad"}),
            Some(r#"<nil>: Invalid value: "": "spec.avoid" must not validate the schema (not)"#),
            "FieldValueInvalid",
        ),
    ]
}

#[tokio::test]
async fn every_schema_keyword_accepts_and_refuses_like_a_real_server() {
    let (cluster, ns) = setup().await;
    for (i, (fields, expected, reason)) in table().into_iter().enumerate() {
        let name = format!("w{i}");
        let mut spec = json!({"name": "ab"});
        for (k, v) in fields.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let (code, _, body) = send(&cluster, "POST", &widgets(&ns), &widget(&name, spec)).await;
        match expected {
            None => assert_eq!(code, 201, "{fields}: {body}"),
            Some(line) => {
                assert_eq!(code, 422, "{fields}: {body}");
                assert_eq!(body["reason"], "Invalid");
                assert_eq!(
                    body["message"],
                    format!("Widget.test.koordinator.sh \"{name}\" is invalid: {line}"),
                    "{fields}"
                );
                let details = &body["details"];
                assert_eq!(details["name"], name.as_str());
                assert_eq!(details["group"], GROUP);
                assert_eq!(details["kind"], "Widget");
                let cause = &details["causes"][0];
                assert_eq!(cause["reason"], reason, "{fields}: {body}");
                assert_eq!(
                    format!(
                        "{}: {}",
                        cause["field"].as_str().unwrap(),
                        cause["message"].as_str().unwrap()
                    ),
                    line
                );
            }
        }
    }
    // Nulls that are allowed stay (nullable) or go (pruned), as on a real server.
    let (_, _, note) = send(&cluster, "GET", &format!("{}/w11", widgets(&ns)), &Value::Null).await;
    assert_eq!(note["spec"], json!({"name": "ab", "note": null}));
}

#[tokio::test]
async fn several_causes_are_listed_in_brackets_and_required_is_reported() {
    let (cluster, ns) = setup().await;
    let (code, _, body) = send(
        &cluster,
        "POST",
        &widgets(&ns),
        &widget("many", json!({"count": 0, "choice": 50})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Widget.test.koordinator.sh \"many\" is invalid: [\
         <nil>: Invalid value: \"\": \"spec.choice\" must validate at least one schema (anyOf), \
         spec.choice: Invalid value: 50: spec.choice in body should be greater than or equal to 100, \
         spec.count: Invalid value: 0: spec.count in body should be greater than or equal to 1, \
         spec.name: Required value]"
    );
    let fields: Vec<&str> = body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    // Properties in name order (a real server walks a Go map: any order), `required` last.
    assert_eq!(fields, ["<nil>", "spec.choice", "spec.count", "spec.name"]);
    let (code, _, body) = send(
        &cluster,
        "POST",
        &widgets(&ns),
        &widget("all", json!({"name": "ab", "both": 10})),
    )
    .await;
    assert_eq!(code, 422);
    assert!(
        body["message"].as_str().unwrap().ends_with(
            "[spec.both: Invalid value: 10: spec.both in body should be less than or equal to 9, \
             <nil>: Invalid value: \"\": \"spec.both\" must validate all the schemas (allOf)]"
        ),
        "{body}"
    );
}

#[tokio::test]
async fn updates_patches_apply_and_status_are_validated_and_unchanged_values_ratcheted() {
    let (cluster, ns) = setup().await;
    let uri = format!("{}/w", widgets(&ns));
    let (code, _, _) = send(
        &cluster,
        "POST",
        &widgets(&ns),
        &widget("w", json!({"name": "ab", "count": 8})),
    )
    .await;
    assert_eq!(code, 201);
    let invalid = "Widget.test.koordinator.sh \"w\" is invalid: spec.count: Invalid value: 12: spec.count in body should be less than or equal to 10";
    // merge patch
    let (code, _, body) = send(&cluster, "PATCH", &uri, &json!({"spec": {"count": 12}})).await;
    assert_eq!((code, body["message"].as_str()), (422, Some(invalid)));
    // update
    let (code, _, body) = send(
        &cluster,
        "PUT",
        &uri,
        &widget("w", json!({"name": "ab", "count": 12})),
    )
    .await;
    assert_eq!((code, body["message"].as_str()), (422, Some(invalid)));
    // server-side apply
    let applied = serde_json::to_vec(&widget("w", json!({"name": "ab", "count": 12}))).unwrap();
    let (code, _, body) = call(
        &cluster,
        "PATCH",
        &format!("{uri}?fieldManager=t&force=true"),
        "application/apply-patch+yaml",
        applied,
    )
    .await;
    assert_eq!((code, body["message"].as_str()), (422, Some(invalid)));
    // status subresource
    let (code, _, body) = send(
        &cluster,
        "PATCH",
        &format!("{uri}/status"),
        &json!({"status": {"phase": "Weird"}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Widget.test.koordinator.sh \"w\" is invalid: status.phase: Unsupported value: \"Weird\": supported values: \"Ready\", \"Failed\""
    );
    let (code, _, _) = send(
        &cluster,
        "PATCH",
        &format!("{uri}/status"),
        &json!({"status": {"phase": "Ready"}}),
    )
    .await;
    assert_eq!(code, 200);

    // The CRD tightens: the stored count 8 is now invalid. Updates that leave it alone pass
    // (ratcheting, 1.28+ and on by default since 1.30); changing it to another invalid value fails.
    cluster.apply_object(crd(5)).await.unwrap();
    let (code, _, body) = send(&cluster, "PATCH", &uri, &json!({"spec": {"mode": "slow"}})).await;
    assert_eq!(code, 200, "{body}");
    let (code, _, body) = send(
        &cluster,
        "PATCH",
        &format!("{uri}/status"),
        &json!({"status": {"phase": "Failed"}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (code, _, body) = send(&cluster, "PATCH", &uri, &json!({"spec": {"count": 7}})).await;
    assert_eq!(code, 422);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with("should be less than or equal to 5"),
        "{body}"
    );
}

#[tokio::test]
async fn the_schema_is_checked_before_validating_webhooks() {
    let (cluster, ns) = setup().await;
    // A validating webhook nobody serves, failurePolicy Fail: every write that reaches it fails.
    let webhook = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": unique("deny")},
        "webhooks": [{"name": "deny.test.koordinator.sh", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 1,
            "clientConfig": {"url": "https://127.0.0.1:1/validate", "caBundle": "Zm9v"},
            "rules": [{"apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["widgets"]}]}]
    });
    cluster.apply_object(webhook).await.unwrap();
    let (code, _, body) = send(
        &cluster,
        "POST",
        &widgets(&ns),
        &widget("bad", json!({"name": "ab", "count": 99})),
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")), "{body}");
    let (code, _, body) = send(
        &cluster,
        "POST",
        &widgets(&ns),
        &widget("good", json!({"name": "ab"})),
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("failed calling webhook"),
        "{body}"
    );
}
