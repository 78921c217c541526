//! Go `encoding/json` field matching on top of serde.
//!
//! Upstream decodes the ConfigMap with Go's encoding/json, which matches object keys to struct
//! fields case-insensitively (an exact spelling wins over a case-folded one) and ignores unknown
//! fields. Users depend on both (seed 002 writes `"CPUEvictTimeWindowSeconds"`). Before serde
//! sees a value we rewrite every object key to the field's canonical spelling and drop unknown
//! fields, reporting each as a warning with its path. The field names come from the type's
//! schemars schema, so they are exactly the names serde uses. Map keys (`schedFeatures`,
//! `extensions`, `matchLabels`) are data and are never touched.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde_json::{Map, Value};

use super::error::{ConfigWarning, WarningKind};

/// Rewrites `value` to canonical field names for type `T`; returns a warning for every unknown
/// or duplicate field. `key` names the ConfigMap key for the warnings, `base` prefixes paths.
pub(crate) fn canonicalize<T: JsonSchema>(value: &mut Value, key: &str, base: &str) -> Vec<ConfigWarning> {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    let root = schema.as_value();
    let mut walker = Walker {
        root,
        key,
        warnings: Vec::new(),
    };
    let mut path = base.to_owned();
    walker.walk(root, value, &mut path, 0);
    walker.warnings
}

struct Walker<'a> {
    root: &'a Value,
    key: &'a str,
    warnings: Vec<ConfigWarning>,
}

/// Depth bound for `$ref` chains and nesting, so hostile input cannot recurse without end.
const MAX_DEPTH: usize = 64;

/// What a schema says about the fields of an object.
#[derive(Default)]
struct ObjectShape<'a> {
    properties: BTreeMap<&'a str, &'a Value>,
    additional: Option<&'a Value>,
    free_form: bool,
}

impl<'a> Walker<'a> {
    fn resolve(&self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..MAX_DEPTH {
            let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
                return schema;
            };
            let Some(pointer) = reference.strip_prefix('#') else {
                return schema;
            };
            match self.root.pointer(pointer) {
                Some(target) => schema = target,
                None => return schema,
            }
        }
        schema
    }

    /// Collects properties across `allOf`/`anyOf`/`oneOf` (flatten and Option produce these).
    fn object_shape(&self, schema: &'a Value, shape: &mut ObjectShape<'a>, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        let schema = self.resolve(schema);
        if schema
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true)
        {
            shape.free_form = true;
        }
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, sub) in props {
                shape.properties.entry(name.as_str()).or_insert(sub);
            }
        }
        match schema.get("additionalProperties") {
            Some(Value::Bool(true)) => shape.free_form = true,
            Some(sub @ Value::Object(_)) => shape.additional = Some(sub),
            _ => {}
        }
        for combinator in ["allOf", "anyOf", "oneOf"] {
            for sub in schema
                .get(combinator)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.object_shape(sub, shape, depth + 1);
            }
        }
    }

    fn items_schema(&self, schema: &'a Value, depth: usize) -> Option<&'a Value> {
        if depth > MAX_DEPTH {
            return None;
        }
        let schema = self.resolve(schema);
        if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
            return Some(items);
        }
        ["allOf", "anyOf", "oneOf"].iter().find_map(|c| {
            schema
                .get(*c)
                .and_then(Value::as_array)
                .and_then(|subs| subs.iter().find_map(|s| self.items_schema(s, depth + 1)))
        })
    }

    /// Whether `schema` is (an Option of) a Kubernetes Quantity.
    fn is_quantity(&self, schema: &'a Value, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        if schema
            .get("$ref")
            .and_then(Value::as_str)
            .is_some_and(|r| r.ends_with("api.resource.Quantity"))
        {
            return true;
        }
        let schema = self.resolve(schema);
        if schema.get("pattern").and_then(Value::as_str) == Some(crate::schema::QUANTITY_PATTERN) {
            return true;
        }
        ["allOf", "anyOf", "oneOf"].iter().any(|c| {
            schema
                .get(*c)
                .and_then(Value::as_array)
                .is_some_and(|subs| subs.iter().any(|s| self.is_quantity(s, depth + 1)))
        })
    }

    fn walk(&mut self, schema: &'a Value, value: &mut Value, path: &mut String, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        // Go's Quantity also accepts a bare JSON number (`"totalNetworkBandwidth": 0`).
        if let Value::Number(n) = value
            && self.is_quantity(schema, 0)
        {
            *value = Value::String(n.to_string());
            return;
        }
        match value {
            Value::Object(map) => self.walk_object(schema, map, path, depth),
            Value::Array(items) => {
                let Some(item_schema) = self.items_schema(schema, 0) else {
                    return;
                };
                for (i, item) in items.iter_mut().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    self.walk(item_schema, item, path, depth + 1);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }

    fn walk_object(
        &mut self,
        schema: &'a Value,
        map: &mut Map<String, Value>,
        path: &mut String,
        depth: usize,
    ) {
        let mut shape = ObjectShape::default();
        self.object_shape(schema, &mut shape, 0);
        if shape.properties.is_empty() {
            // A map (or free-form object): keys are data; recurse into values only.
            if let Some(additional) = shape.additional {
                for (k, v) in map.iter_mut() {
                    let len = path.len();
                    push_field(path, k);
                    self.walk(additional, v, path, depth + 1);
                    path.truncate(len);
                }
            }
            return;
        }
        let input = std::mem::take(map);
        let mut folded: Vec<(String, Value)> = Vec::new();
        for (k, v) in input {
            if shape.properties.contains_key(k.as_str()) {
                map.insert(k, v);
            } else {
                folded.push((k, v));
            }
        }
        for (k, v) in folded {
            let lower = k.to_lowercase();
            let canonical = shape
                .properties
                .keys()
                .find(|p| p.to_lowercase() == lower)
                .map(|p| (*p).to_owned());
            let field_path = |path: &str| {
                let mut p = path.to_owned();
                push_field(&mut p, &k);
                p
            };
            match canonical {
                Some(c) if map.contains_key(&c) => self.warnings.push(ConfigWarning {
                    key: self.key.to_owned(),
                    path: field_path(path),
                    kind: WarningKind::DuplicateField { kept: c },
                }),
                Some(c) => {
                    map.insert(c, v);
                }
                None if shape.free_form => {
                    map.insert(k, v);
                }
                None => self.warnings.push(ConfigWarning {
                    key: self.key.to_owned(),
                    path: field_path(path),
                    kind: WarningKind::UnknownField,
                }),
            }
        }
        for (k, v) in map.iter_mut() {
            if let Some(sub) = shape.properties.get(k.as_str()) {
                let len = path.len();
                push_field(path, k);
                self.walk(sub, v, path, depth + 1);
                path.truncate(len);
            }
        }
    }
}

fn push_field(path: &mut String, field: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(field);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::types::ResourceThresholdCfg;
    use serde_json::json;

    #[test]
    fn keys_fold_case_and_unknowns_are_reported() {
        let mut v = json!({
            "ClusterStrategy": {"enable": true, "CPUEvictTimeWindowSeconds": 60, "bogus": 1},
            "nodeStrategies": [{"NodeSelector": {"matchLabels": {"Zone": "A"}}, "cpuSuppressThresholdPercent": 50, "x": 2}]
        });
        let w = canonicalize::<ResourceThresholdCfg>(&mut v, "resource-threshold-config", "");
        assert_eq!(
            v,
            json!({
                "clusterStrategy": {"enable": true, "cpuEvictTimeWindowSeconds": 60},
                "nodeStrategies": [{"nodeSelector": {"matchLabels": {"Zone": "A"}}, "cpuSuppressThresholdPercent": 50}]
            })
        );
        let paths: Vec<&str> = w.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(paths, vec!["clusterStrategy.bogus", "nodeStrategies[0].x"]);
        assert!(w.iter().all(|w| w.kind == WarningKind::UnknownField));
    }

    #[test]
    fn bare_numbers_become_quantities() {
        let mut v = json!({"clusterStrategy": {"totalNetworkBandwidth": 1000, "watermarkScaleFactor": 150}});
        let w = canonicalize::<crate::config::types::SystemCfg>(&mut v, "system-config", "");
        assert!(w.is_empty());
        assert_eq!(
            v,
            json!({"clusterStrategy": {"totalNetworkBandwidth": "1000", "watermarkScaleFactor": 150}})
        );
    }

    #[test]
    fn exact_spelling_wins_over_folded_duplicate() {
        let mut v = json!({"clusterStrategy": {"cpuSuppressThresholdPercent": 50, "CPUSUPPRESSTHRESHOLDPERCENT": 90}});
        let w = canonicalize::<ResourceThresholdCfg>(&mut v, "k", "");
        assert_eq!(v, json!({"clusterStrategy": {"cpuSuppressThresholdPercent": 50}}));
        assert!(matches!(w[0].kind, WarningKind::DuplicateField { .. }));
    }
}
