use serde_json::{Value, json};

use super::validate;

fn lines(obj: &Value, schema: &Value, old: Option<&Value>) -> Vec<String> {
    validate(obj, schema, old).iter().map(|c| c.line()).collect()
}

#[test]
fn combinators_report_without_a_field() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "a": {"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": 2}]},
        "b": {"type": "string", "oneOf": [{"pattern": "^x"}, {"pattern": "y$"}]},
        "c": {"type": "integer", "allOf": [{"minimum": 1}, {"multipleOf": 2}]},
        "d": {"type": "string", "not": {"enum": ["forbidden"]}},
    }}}});
    let ok = json!({"spec": {"a": 11, "b": "xa", "c": 4, "d": "fine"}});
    assert!(lines(&ok, &schema, None).is_empty());
    let bad = json!({"spec": {"a": 5, "b": "xy", "c": 3, "d": "forbidden"}});
    assert_eq!(
        lines(&bad, &schema, None),
        [
            "<nil>: Invalid value: \"\": \"spec.a\" must validate at least one schema (anyOf)",
            "spec.a: Invalid value: 5: spec.a in body should be greater than or equal to 10",
            "<nil>: Invalid value: \"\": \"spec.b\" must validate one and only one schema (oneOf). Found 2 valid alternatives",
            "spec.c: Invalid value: 3: spec.c in body should be a multiple of 2",
            "<nil>: Invalid value: \"\": \"spec.c\" must validate all the schemas (allOf)",
            "<nil>: Invalid value: \"\": \"spec.d\" must not validate the schema (not)",
        ]
    );
}

#[test]
fn ratcheting_keeps_unchanged_invalid_parts() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
    "required": ["must"],
    "properties": {
        "n": {"type": "integer", "maximum": 5},
        "m": {"type": "integer", "maximum": 5},
        "must": {"type": "string"},
        "list": {"type": "array", "items": {"type": "integer", "maximum": 5}},
    }}}});
    let old = json!({"spec": {"n": 9, "m": 1, "list": [9]}});
    // n and the list unchanged: only the changed m is checked; the spec changed, so its
    // required field is reported.
    let new = json!({"spec": {"n": 9, "m": 7, "list": [9]}});
    assert_eq!(
        lines(&new, &schema, Some(&old)),
        [
            "spec.m: Invalid value: 7: spec.m in body should be less than or equal to 5",
            "spec.must: Required value",
        ]
    );
    // A changed list is validated item by item.
    let new = json!({"spec": {"n": 9, "m": 1, "list": [9, 1], "must": "x"}});
    assert_eq!(
        lines(&new, &schema, Some(&old)),
        ["spec.list[0]: Invalid value: 9: spec.list[0] in body should be less than or equal to 5"]
    );
    // Without the old object everything is checked.
    assert_eq!(lines(&old, &schema, None).len(), 3);
}

#[test]
fn schemas_we_cannot_read_are_permissive() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "a": {"type": 7, "maximum": "ten", "minLength": [], "enum": "x", "required": "y"},
        "b": "not a schema",
        "c": {"type": "string", "pattern": "(unclosed"},
        "d": {"type": "array", "items": 3, "uniqueItems": "yes", "maxItems": -1},
        "e": {"type": "object", "properties": [], "additionalProperties": 5, "anyOf": {}},
        "f": {"type": "integer", "multipleOf": 0, "minimum": 1e300},
    }}}});
    let obj = json!({"spec": {"a": "v", "b": 1, "c": "x", "d": [1, 1], "e": {"k": 1}, "f": i64::MAX}});
    assert_eq!(
        lines(&obj, &schema, None),
        ["spec.d: Too many: 2: has too many items"]
    );
    // Nothing panics on odd values either.
    for v in [
        json!(null),
        json!([]),
        json!("s"),
        json!(1.5),
        json!({"spec": null}),
        json!({"spec": []}),
    ] {
        let _ = validate(&v, &schema, Some(&json!(42)));
    }
}

#[test]
fn embedded_resources_need_api_version_and_kind() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                     "x-kubernetes-preserve-unknown-fields": true},
        "many": {"type": "array", "items": {"type": "object", "x-kubernetes-embedded-resource": true,
                 "x-kubernetes-preserve-unknown-fields": true}},
    }}}});
    let ok = json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod"}, "many": []}});
    assert!(lines(&ok, &schema, None).is_empty());
    let bad =
        json!({"spec": {"template": {"kind": "Not_A_Kind"}, "many": [{"apiVersion": "a/b/c", "kind": ""}]}});
    let got = lines(&bad, &schema, None);
    assert_eq!(
        got[0],
        "spec.many[0].apiVersion: Invalid value: \"a/b/c\": unexpected GroupVersion string: a/b/c"
    );
    assert_eq!(
        got[1],
        "spec.many[0].kind: Invalid value: \"\": must not be empty"
    );
    assert_eq!(got[2], "spec.template.apiVersion: Required value");
    assert!(
        got[3].starts_with("spec.template.kind: Invalid value: \"Not_A_Kind\": may have mixed case"),
        "{got:?}"
    );
}
