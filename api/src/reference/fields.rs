//! Flattens a JSON schema (schemars output or a CRD's `openAPIV3Schema`) into one row per field:
//! dotted path, a short type, and the doc comment the schema carries as `description`.

use serde_json::{Map, Value};

/// How deep nested objects are followed (the deepest config field is five levels down).
const MAX_DEPTH: usize = 12;

/// One documented field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRow {
    /// Dotted path; `[]` marks list items, `<name>` map values.
    pub path: String,
    /// Short type: `integer`, `string`, `quantity`, `one of: a, b`, `list of object`, ...
    pub ty: String,
    /// The field's doc comment, on one line.
    pub description: String,
}

/// A schema with its `$defs` so `$ref`s can be followed.
pub struct SchemaDoc<'a> {
    root: &'a Value,
}

impl<'a> SchemaDoc<'a> {
    /// Wraps a root schema (with `$defs` for schemars, self-contained for CRDs).
    pub fn new(root: &'a Value) -> Self {
        SchemaDoc { root }
    }

    /// Follows `$ref` and drops the `null` branch of optional fields.
    pub fn resolve(&self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..MAX_DEPTH {
            if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
                let target = r
                    .strip_prefix("#/$defs/")
                    .and_then(|name| self.root.get("$defs").and_then(|d| d.get(name)));
                match target {
                    Some(t) => schema = t,
                    None => return schema,
                }
                continue;
            }
            let branches = schema
                .get("anyOf")
                .or_else(|| schema.get("oneOf"))
                .and_then(Value::as_array);
            if let Some(branches) = branches
                && enum_values(schema).is_none()
            {
                let non_null: Vec<&Value> = branches.iter().filter(|b| !is_null(b)).collect();
                if let [only] = non_null.as_slice() {
                    schema = only;
                    continue;
                }
            }
            return schema;
        }
        schema
    }

    /// The properties of an object schema, in schema order.
    pub fn properties(&self, schema: &'a Value) -> Option<&'a Map<String, Value>> {
        self.resolve(schema).get("properties").and_then(Value::as_object)
    }

    /// Every field under `schema`, depth first; `skip` names fields not to descend into.
    pub fn rows(&self, schema: &'a Value, prefix: &str, skip: &[&str]) -> Vec<FieldRow> {
        let mut rows = Vec::new();
        self.walk(schema, prefix, skip, 0, &mut rows);
        rows
    }

    fn walk(&self, schema: &'a Value, prefix: &str, skip: &[&str], depth: usize, rows: &mut Vec<FieldRow>) {
        if depth > MAX_DEPTH {
            return;
        }
        let Some(props) = self.properties(schema) else {
            return;
        };
        for (name, prop) in props {
            if skip.contains(&name.as_str()) {
                continue;
            }
            let path = join(prefix, name);
            let description = self.description(prop);
            rows.push(FieldRow {
                path: path.clone(),
                ty: self.type_name(prop),
                description,
            });
            if is_opaque(name) {
                continue;
            }
            self.descend(prop, &path, skip, depth + 1, rows);
        }
    }

    fn descend(&self, prop: &'a Value, path: &str, skip: &[&str], depth: usize, rows: &mut Vec<FieldRow>) {
        let resolved = self.resolve(prop);
        if resolved.get("properties").is_some() {
            self.walk(resolved, path, skip, depth, rows);
        } else if let Some(items) = resolved.get("items") {
            let items = self.resolve(items);
            if items.get("properties").is_some() {
                self.walk(items, &format!("{path}[]"), skip, depth, rows);
            }
        } else if let Some(values) = resolved.get("additionalProperties").filter(|v| v.is_object()) {
            let values = self.resolve(values);
            if values.get("properties").is_some() {
                self.walk(values, &format!("{path}.<name>"), skip, depth, rows);
            }
        }
    }

    /// The description of a property: its own, else its target's; first paragraph only.
    fn description(&self, prop: &Value) -> String {
        let text = prop
            .get("description")
            .or_else(|| self.resolve(prop).get("description"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let first = text.split("\n\n").next().unwrap_or("");
        first
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace('|', "\\|")
    }

    /// A short type for the tables.
    pub fn type_name(&self, prop: &Value) -> String {
        let s = self.resolve(prop);
        if s.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
            return if is_quantity(s) {
                "quantity".into()
            } else {
                "integer or string".into()
            };
        }
        if is_quantity(s) {
            return "quantity".into();
        }
        if let Some(values) = enum_values(s) {
            return format!("one of: {}", values.join(", "));
        }
        let ty = primary_type(s);
        match ty.as_deref() {
            Some("integer") => match s.get("format").and_then(Value::as_str) {
                Some(f) => format!("integer ({f})"),
                None => "integer".into(),
            },
            Some("array") => match s.get("items") {
                Some(items) => format!("list of {}", self.type_name(items)),
                None => "list".into(),
            },
            Some("object") => match s.get("additionalProperties").filter(|v| v.is_object()) {
                Some(values) => format!("map of {}", self.type_name(values)),
                None if s.get("properties").is_some() => {
                    if s.get("x-kubernetes-preserve-unknown-fields")
                        .and_then(Value::as_bool)
                        == Some(true)
                    {
                        "object (other fields kept as given)".into()
                    } else {
                        "object".into()
                    }
                }
                None => "object (free-form)".into(),
            },
            Some(other) => other.to_owned(),
            None if s.get("properties").is_some() => "object".into(),
            None => "any".into(),
        }
    }
}

/// Fields documented as a whole (Kubernetes types whose own reference is upstream's).
fn is_opaque(name: &str) -> bool {
    matches!(
        name,
        "nodeSelector" | "podSelector" | "namespaceSelector" | "selector" | "metadata"
    )
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

fn is_null(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

/// The non-null `type` of a schema (`["integer","null"]` is `integer`).
pub fn primary_type(schema: &Value) -> Option<String> {
    match schema.get("type") {
        Some(Value::String(t)) => Some(t.clone()),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .map(str::to_owned),
        _ => None,
    }
}

/// A schema marked as a Kubernetes quantity (see [`crate::schema::QUANTITY_PATTERN`]).
pub fn is_quantity(schema: &Value) -> bool {
    schema.get("pattern").and_then(Value::as_str) == Some(crate::schema::QUANTITY_PATTERN)
}

/// The allowed values of a string enum (`enum` or `oneOf` of `const`s).
pub fn enum_values(schema: &Value) -> Option<Vec<String>> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let v: Vec<String> = values
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        return (!v.is_empty()).then_some(v);
    }
    let branches = schema.get("oneOf").and_then(Value::as_array)?;
    let mut out = Vec::new();
    for b in branches {
        match b.get("const").and_then(Value::as_str) {
            Some(c) => out.push(c.to_owned()),
            None => match b.get("enum").and_then(Value::as_array) {
                Some(vs) => out.extend(vs.iter().filter_map(Value::as_str).map(str::to_owned)),
                None if is_null(b) => {}
                None => return None,
            },
        }
    }
    (!out.is_empty()).then_some(out)
}
