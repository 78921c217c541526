//! The checked-in CRDs match the Rust types, and every schema is a structural schema the API
//! server (embedded or real) will accept.

// Test helpers panic on purpose: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use koord_api::crds::{CRD_DIR, crd_files, crds};
use serde_json::Value;

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(CRD_DIR)
}

#[test]
fn checked_in_crds_match_the_types() {
    let files = crd_files().expect("CRDs serialize");
    let names: Vec<&str> = files.iter().map(|f| f.file_name.as_str()).collect();
    assert_eq!(
        names,
        [
            "nodeslos.slo.koordinator.sh.yaml",
            "nodemetrics.slo.koordinator.sh.yaml",
            "clustercolocationprofiles.config.koordinator.sh.yaml"
        ]
    );
    for file in files {
        let path = crd_dir().join(&file.file_name);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == file.yaml,
            "{} is out of date with the Rust types; run `cargo run -p koord-api --bin crdgen` and commit the result",
            path.display()
        );
    }
}

#[test]
fn generation_is_deterministic() {
    assert_eq!(crd_files().unwrap(), crd_files().unwrap());
}

#[test]
fn crds_are_cluster_scoped_with_status_subresource() {
    for crd in crds().unwrap() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        assert_eq!(crd.spec.scope, "Cluster", "{name}");
        assert_eq!(crd.spec.versions.len(), 1, "{name}");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage, "{name}");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{name} status subresource"
        );
        assert!(
            crd.spec.names.short_names.is_none(),
            "{name}: upstream has no short names"
        );
    }
}

#[test]
fn printer_columns_point_at_real_fields() {
    let expected: [(&str, &[&str]); 3] = [
        (
            "nodeslos.slo.koordinator.sh",
            &[
                ".spec.resourceUsedThresholdWithBE.cpuSuppressPolicy",
                ".spec.cpuBurstStrategy.policy",
            ],
        ),
        (
            "nodemetrics.slo.koordinator.sh",
            &[
                ".status.updateTime",
                ".status.nodeMetric.nodeUsage.resources.cpu",
                ".status.nodeMetric.nodeUsage.resources.memory",
            ],
        ),
        (
            "clustercolocationprofiles.config.koordinator.sh",
            &[".spec.qosClass", ".spec.priorityClassName", ".spec.probability"],
        ),
    ];
    for crd in crds().unwrap() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let version = &crd.spec.versions[0];
        let paths: Vec<String> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.json_path.clone())
            .collect();
        let (_, wanted) = expected.iter().find(|(n, _)| *n == name).expect("known CRD");
        for path in *wanted {
            assert!(
                paths.iter().any(|p| p == path),
                "{name} lacks printer column {path}"
            );
        }
        let schema = serde_json::to_value(
            version
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        for path in paths.iter().filter(|p| !p.starts_with(".metadata")) {
            assert!(
                resolve(&schema, path),
                "{name}: printer column {path} names no field in the schema"
            );
        }
    }
}

/// Follows `.a.b.c` through `properties` (and `additionalProperties` for map keys).
fn resolve(schema: &Value, path: &str) -> bool {
    let mut node = schema;
    for segment in path.trim_start_matches('.').split('.') {
        node = match node.get("properties").and_then(|p| p.get(segment)) {
            Some(child) => child,
            None => match node.get("additionalProperties") {
                Some(child) if child.is_object() => child,
                _ => return false,
            },
        };
    }
    true
}

/// Checks the rules of a Kubernetes structural schema (apiextensions `ValidateStructural`) that a
/// generator can get wrong. Collects every violation with its path.
fn check_structural(node: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(object) = node.as_object() else {
        errors.push(format!("{path}: schema is not an object"));
        return;
    };
    for forbidden in [
        "$ref",
        "$defs",
        "definitions",
        "$schema",
        "oneOf",
        "allOf",
        "not",
        "uniqueItems",
    ] {
        if object.contains_key(forbidden) {
            errors.push(format!(
                "{path}: `{forbidden}` is not allowed in a structural schema"
            ));
        }
    }
    let int_or_string = object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = object.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if let Some(any_of) = object.get("anyOf") {
        let allowed = int_or_string
            && any_of.as_array().is_some_and(|branches| {
                branches.iter().all(|b| {
                    b.as_object()
                        .is_some_and(|o| o.keys().all(|k| k == "type" || k == "pattern"))
                })
            });
        if !allowed {
            errors.push(format!(
                "{path}: anyOf is only allowed as the int-or-string pattern"
            ));
        }
    }
    match object.get("type") {
        Some(Value::String(ty)) => {
            if int_or_string {
                errors.push(format!("{path}: int-or-string must not have a type"));
            }
            match ty.as_str() {
                "object" => {
                    if object.contains_key("properties") && object.contains_key("additionalProperties") {
                        errors.push(format!("{path}: both properties and additionalProperties"));
                    }
                }
                "array" if !object.contains_key("items") => {
                    errors.push(format!("{path}: array without items"))
                }
                "array" | "string" | "integer" | "number" | "boolean" => {}
                other => errors.push(format!("{path}: unknown type {other}")),
            }
            if ty != "object"
                && (object.contains_key("properties") || object.contains_key("additionalProperties"))
            {
                errors.push(format!("{path}: properties on a non-object"));
            }
            if ty != "array" && object.contains_key("items") {
                errors.push(format!("{path}: items on a non-array"));
            }
        }
        Some(other) => errors.push(format!("{path}: type must be a single string, got {other}")),
        None if int_or_string || preserve => {}
        None => errors.push(format!("{path}: every field needs a type")),
    }
    if let Some(nullable) = object.get("nullable")
        && !nullable.is_boolean()
    {
        errors.push(format!("{path}: nullable must be a boolean"));
    }
    if object.get("additionalProperties") == Some(&Value::Bool(false)) {
        errors.push(format!("{path}: additionalProperties: false is not allowed"));
    }
    if let Some(enum_values) = object.get("enum")
        && enum_values
            .as_array()
            .is_some_and(|values| values.iter().any(Value::is_null))
    {
        errors.push(format!("{path}: null in enum (use nullable)"));
    }
    if let Some(description) = object.get("description")
        && !description.is_string()
    {
        errors.push(format!("{path}: description must be a string"));
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            check_structural(child, &format!("{path}.{name}"), errors);
        }
    }
    if let Some(required) = object.get("required").and_then(Value::as_array) {
        for name in required {
            let known = name
                .as_str()
                .is_some_and(|n| object.get("properties").and_then(|p| p.get(n)).is_some());
            if !known {
                errors.push(format!("{path}: required {name} is not a property"));
            }
        }
    }
    if let Some(child) = object.get("additionalProperties").filter(|c| c.is_object()) {
        check_structural(child, &format!("{path}[*]"), errors);
    }
    if let Some(child) = object.get("items") {
        check_structural(child, &format!("{path}[]"), errors);
    }
}

#[test]
fn schemas_are_structural() {
    for crd in crds().unwrap() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        let mut errors = Vec::new();
        check_structural(&schema, &name, &mut errors);
        assert!(
            errors.is_empty(),
            "{name} is not structural:\n{}",
            errors.join("\n")
        );
        assert_eq!(
            schema.get("type"),
            Some(&Value::String("object".into())),
            "{name} root type"
        );
        let description = schema
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(
            !description.contains("Auto-generated"),
            "{name}: root needs a real description"
        );
    }
}

/// `kubectl explain` is only useful when fields are described: every property of our own types
/// carries a description.
#[test]
fn every_field_is_described() {
    fn walk(node: &Value, path: &str, missing: &mut Vec<String>) {
        if let Some(properties) = node.get("properties").and_then(Value::as_object) {
            for (name, child) in properties {
                let child_path = format!("{path}.{name}");
                if child.get("description").is_none()
                    && !["apiVersion", "kind", "metadata"].contains(&name.as_str())
                {
                    missing.push(child_path.clone());
                }
                walk(child, &child_path, missing);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(child) = node.get(key).filter(|c| c.is_object()) {
                walk(child, path, missing);
            }
        }
    }
    for crd in crds().unwrap() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        let mut missing = Vec::new();
        walk(&schema, &name, &mut missing);
        assert!(
            missing.is_empty(),
            "{name}: fields without description:\n{}",
            missing.join("\n")
        );
    }
}

#[test]
fn the_checker_catches_non_structural_schemas() {
    let bad = serde_json::json!({
        "type": "object",
        "properties": {
            "a": {"$ref": "#/definitions/A"},
            "b": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "c": {"type": ["string", "null"]},
            "d": {"properties": {"x": {"type": "string"}}},
            "e": {"type": "array"},
            "f": {"type": "object", "additionalProperties": false},
            "g": {"type": "string", "enum": ["x", null]},
            "ok": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}
        }
    });
    let mut errors = Vec::new();
    check_structural(&bad, "bad", &mut errors);
    for field in ["bad.a", "bad.b", "bad.c", "bad.d", "bad.e", "bad.f", "bad.g"] {
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("{field}:"))),
            "{field} not caught: {errors:?}"
        );
    }
    assert!(!errors.iter().any(|e| e.starts_with("bad.ok")), "{errors:?}");
}

/// Kubernetes 1.20 reads `default: ""` as null and rejects the whole CRD.
#[test]
fn no_string_property_defaults_to_the_empty_string() {
    fn walk(node: &serde_json::Value, path: &str, found: &mut Vec<String>) {
        match node {
            serde_json::Value::Object(map) => {
                if map.get("default").and_then(serde_json::Value::as_str) == Some("") {
                    found.push(path.to_string());
                }
                for (key, child) in map {
                    walk(child, &format!("{path}.{key}"), found);
                }
            }
            serde_json::Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, &format!("{path}[{i}]"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    for crd in koord_api::crds::crds().unwrap() {
        let value = serde_json::to_value(&crd).unwrap();
        walk(&value, crd.metadata.name.as_deref().unwrap_or(""), &mut found);
    }
    assert!(found.is_empty(), "empty-string defaults: {found:?}");
}
