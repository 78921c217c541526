//! Validation of custom resources against their CRD's `openAPIV3Schema`, as
//! apiextensions-apiserver does it after mutating admission and before validating admission:
//! kube-openapi's checks (`walk`), turned into `field.Error`s the way
//! `kubeOpenAPIResultToFieldErrors` does, ratcheted on update as Kubernetes 1.33 does (an
//! error in a part of the object the update left unchanged is dropped), then the
//! `x-kubernetes-embedded-resource` checks. A schema we cannot read is treated permissively.

mod format;
mod gofmt;
mod scalars;
mod walk;

use serde_json::Value;

pub use gofmt::{go_quote, go_value};
use walk::{Failure, Kind, Node, Walker};

use super::error::Cause;

/// Every schema violation of `obj`. `old` is the stored object of an update: errors in parts
/// of the object equal to the old ones are ratcheted away.
pub fn validate(obj: &Value, schema: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut walker = Walker::default();
    walker.validate(obj, schema, "", &Node::default());
    let mut causes: Vec<Cause> = walker
        .failures
        .into_iter()
        .filter(|f| !old.is_some_and(|old| unchanged(old, obj, &f.node)))
        .map(cause)
        .collect();
    embedded(obj, schema, "", true, &mut causes);
    causes
}

fn at<'a>(v: &'a Value, segments: &[String]) -> Option<&'a Value> {
    segments.iter().try_fold(v, |cur, s| cur.get(s))
}

fn unchanged(old: &Value, new: &Value, node: &[String]) -> bool {
    matches!((at(old, node), at(new, node)), (Some(a), Some(b)) if a == b)
}

/// The field of a kube-openapi error: its path without the leading dot, `<nil>` at the root.
fn field(path: &str) -> String {
    if path.is_empty() || path == "." {
        "<nil>".into()
    } else {
        path.strip_prefix('.').unwrap_or(path).to_string()
    }
}

fn cause(f: Failure) -> Cause {
    let bad = || go_value(f.value.as_ref().unwrap_or(&Value::String(String::new())));
    let field = field(&f.path);
    match f.kind {
        Kind::Required => Cause::required(field, ""),
        Kind::NotSupported(allowed) => {
            let quoted: Vec<String> = allowed
                .iter()
                .map(|a| match a {
                    Value::String(s) => go_quote(s),
                    other => go_quote(&other.to_string()),
                })
                .collect();
            let value = go_value(f.value.as_ref().unwrap_or(&Value::Null));
            let message = if quoted.is_empty() {
                format!("Unsupported value: {value}")
            } else {
                format!(
                    "Unsupported value: {value}: supported values: {}",
                    quoted.join(", ")
                )
            };
            Cause::new("FieldValueNotSupported", field, message)
        }
        Kind::TooLong(max) => {
            let message = match max {
                1 => "Too long: may not be more than 1 byte".to_string(),
                m if m >= 0 => format!("Too long: may not be more than {m} bytes"),
                _ => "Too long: value is too long".to_string(),
            };
            Cause::new("FieldValueTooLong", field, message)
        }
        Kind::TooMany { actual, max } => {
            let limit = if max >= 0 {
                format!("must have at most {max} items")
            } else {
                "has too many items".to_string()
            };
            Cause::new("FieldValueTooMany", field, format!("Too many: {actual}: {limit}"))
        }
        Kind::TypeInvalid => Cause::new(
            "FieldValueTypeInvalid",
            field,
            format!("Invalid value: {}: {}", bad(), f.message),
        ),
        Kind::Invalid => Cause::invalid(field, &bad(), &f.message),
        Kind::Composite => Cause::invalid("<nil>", "\"\"", &f.message),
    }
}

/// A kind as the embedded-resource check wants it: a DNS-1035 label once lower-cased.
fn dns1035(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    lower.len() <= 63
        && lower.starts_with(|c: char| c.is_ascii_lowercase())
        && lower.ends_with(|c: char| c.is_ascii_alphanumeric())
        && lower
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `apiVersion`/`kind` of objects under `x-kubernetes-embedded-resource` (apiextensions'
/// objectmeta validation; the root is the server's own business). Paths as `field.Path`:
/// `spec.template`, `spec.map[key]`, `spec.list[0]`.
fn embedded(v: &Value, schema: &Value, path: &str, root: bool, causes: &mut Vec<Cause>) {
    let Some(s) = schema.as_object() else { return };
    let child = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    match v {
        Value::Object(map) => {
            if !root && s.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true) {
                embedded_type_meta(map, &child, causes);
            }
            let properties = s.get("properties").and_then(Value::as_object);
            for (k, item) in map {
                match properties.and_then(|p| p.get(k)) {
                    Some(ps) => embedded(item, ps, &child(k), false, causes),
                    None => {
                        if let Some(extra) = s.get("additionalProperties").filter(|a| a.is_object()) {
                            embedded(item, extra, &format!("{path}[{k}]"), false, causes);
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = s.get("items") {
                for (i, item) in items.iter().enumerate() {
                    embedded(item, item_schema, &format!("{path}[{i}]"), false, causes);
                }
            }
        }
        _ => {}
    }
}

fn embedded_type_meta(
    map: &serde_json::Map<String, Value>,
    child: &dyn Fn(&str) -> String,
    causes: &mut Vec<Cause>,
) {
    for key in ["apiVersion", "kind"] {
        if !map.contains_key(key) {
            causes.push(Cause::required(child(key), ""));
        }
    }
    for (key, v) in map {
        let field = child(key);
        match (key.as_str(), v) {
            ("apiVersion" | "kind", Value::String(s)) if s.is_empty() => {
                causes.push(Cause::invalid(field, "\"\"", "must not be empty"));
            }
            ("apiVersion" | "kind", v) if !v.is_string() => {
                causes.push(Cause::invalid(field, &go_value(v), "must be a string"));
            }
            ("apiVersion", Value::String(s)) if s.matches('/').count() > 1 => {
                let why = format!("unexpected GroupVersion string: {s}");
                causes.push(Cause::invalid(field, &go_quote(s), &why));
            }
            ("kind", Value::String(s)) if !dns1035(s) => causes.push(Cause::invalid(
                field,
                &go_quote(s),
                "may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case \
                 alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric \
                 character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            )),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
