//! Structural-schema handling of custom resources, as `apiextensions.k8s.io/v1` does it: fields
//! the CRD's `openAPIV3Schema` does not declare are pruned (unless
//! `x-kubernetes-preserve-unknown-fields`), and `default`s fill absent fields. Applied to every
//! request body and again to what mutating webhooks return, so a component that writes a field
//! its CRD lacks loses it here exactly as it would on a real server.

use serde_json::{Map, Value};

/// Prunes unknown fields and applies defaults to a whole custom resource (`apiVersion`, `kind`
/// and `metadata` are always kept at the root). Returns the dotted paths pruned.
pub fn prune_and_default(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut pruned = Vec::new();
    if let Some(map) = obj.as_object_mut() {
        object(map, schema, true, "", &mut pruned);
    }
    pruned
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

fn object(map: &mut Map<String, Value>, schema: &Value, root: bool, path: &str, pruned: &mut Vec<String>) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        // The type and the object metadata of a resource are the server's, not the schema's,
        // even when the schema lists them (`metadata: {type: object}`, as the
        // NodeResourceTopology CRD does): a real server never prunes them.
        if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let child = properties.and_then(|p| p.get(&key)).or(additional);
        let here = format!("{path}.{key}");
        match child {
            Some(sub) => {
                let nullable = flag(sub, "nullable");
                if map.get(&key).is_some_and(Value::is_null) && !nullable {
                    // A null for a non-nullable field is dropped (and then defaulted).
                    map.remove(&key);
                    continue;
                }
                if let Some(v) = map.get_mut(&key) {
                    value(v, sub, &here, pruned);
                }
            }
            None if preserve || (properties.is_none() && additional.is_none() && !root && !typed(schema)) => {
            }
            None => {
                map.remove(&key);
                pruned.push(here);
            }
        }
    }
    if let Some(props) = properties {
        for (key, sub) in props {
            if !map.contains_key(key)
                && let Some(default) = sub.get("default")
            {
                let mut v = default.clone();
                value(&mut v, sub, &format!("{path}.{key}"), &mut Vec::new());
                map.insert(key.clone(), v);
            }
        }
    }
}

/// A schema that says `type: object` without properties declares an empty object: everything in
/// it is unknown. Without a type (e.g. `x-kubernetes-int-or-string`), nothing is pruned.
fn typed(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

fn value(v: &mut Value, schema: &Value, path: &str, pruned: &mut Vec<String>) {
    match v {
        Value::Object(map) => object(map, schema, false, path, pruned),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    value(item, item_schema, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "enable": {"type": "boolean", "default": false},
                "threshold": {"type": "integer"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "quantity": {"x-kubernetes-int-or-string": true},
                "empty": {"type": "object"},
            }},
            "status": {"type": "object", "default": {}, "properties": {"ok": {"type": "boolean", "default": true}}}
        }})
    }

    #[test]
    fn unknown_fields_are_pruned_and_defaults_filled() {
        let mut obj = json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "extra": 1,
            "spec": {"threshold": 3, "typo": 4, "labels": {"a": "b"}, "free": {"anything": {"x": 1}},
                     "items": [{"name": "n", "bogus": true}], "quantity": "50%", "empty": {"gone": 1}}
        });
        let pruned = prune_and_default(&mut obj, &schema());
        assert_eq!(
            pruned,
            [".extra", ".spec.empty.gone", ".spec.items[0].bogus", ".spec.typo"]
        );
        assert_eq!(obj["spec"]["enable"], false);
        assert_eq!(obj["spec"]["labels"]["a"], "b");
        assert_eq!(obj["spec"]["free"]["anything"]["x"], 1);
        assert_eq!(obj["spec"]["quantity"], "50%");
        assert_eq!(obj["status"], json!({"ok": true}));
        assert_eq!(obj["metadata"]["name"], "a");
    }

    #[test]
    fn metadata_listed_in_the_schema_is_kept_whole() {
        let schema = json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
            "zones": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        }});
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X",
            "metadata": {"name": "a", "annotations": {"k": "v"}}, "zones": [{"name": "z", "bogus": 1}]});
        let pruned = prune_and_default(&mut obj, &schema);
        assert_eq!(pruned, [".zones[0].bogus"]);
        assert_eq!(obj["metadata"], json!({"name": "a", "annotations": {"k": "v"}}));
        assert_eq!(obj["kind"], "X");
    }

    #[test]
    fn null_of_a_non_nullable_field_is_dropped_then_defaulted() {
        let mut obj = json!({"spec": {"enable": null, "threshold": null}});
        prune_and_default(&mut obj, &schema());
        assert_eq!(obj["spec"], json!({"enable": false}));
    }
}
