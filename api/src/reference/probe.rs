//! Reads the validation rules back out of the validator instead of restating them: every
//! field of a key is set to the lowest (then the highest) value its type can hold, the key is
//! parsed like a real ConfigMap, and the errors name each field's bounds and allowed values.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::fields::{SchemaDoc, enum_values, is_quantity, primary_type};
use crate::config::{ConfigKey, Rule, SloConfig};

/// Fields the probe leaves out: node entries (their rules are the strategy's) and selectors.
const NOT_PROBED: &[&str] = &["nodeStrategies", "nodeConfigs", "nodeSelector", "podSelector"];

/// Which end of every type the probe fills in.
#[derive(Clone, Copy, PartialEq)]
enum End {
    Low,
    High,
}

/// The constraints of every field of `key`, by normalized path (`a.b[].c`, no cluster prefix).
pub fn constraints(key: ConfigKey, root: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let doc = SchemaDoc::new(root);
    let mut bounds: BTreeMap<String, (Option<i64>, Option<i64>)> = BTreeMap::new();
    let mut other: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for end in [End::Low, End::High] {
        let probe = fill(&doc, root, end, 0);
        let data = BTreeMap::from([(key.name().to_owned(), probe.to_string())]);
        for error in SloConfig::parse(&data)
            .errors()
            .into_iter()
            .flat_map(|e| e.errors)
        {
            let path = normalize(key, &error.path);
            match error.rule {
                Rule::Below { min, .. } => bounds.entry(path).or_default().0 = Some(min),
                Rule::Above { max, .. } => bounds.entry(path).or_default().1 = Some(max),
                rule => {
                    if let Some(text) = describe(&rule) {
                        other.entry(path).or_default().insert(text);
                    }
                }
            }
        }
    }
    for (path, (min, max)) in bounds {
        let text = match (min, max) {
            (Some(lo), Some(hi)) => format!("[{lo}, {hi}]"),
            (Some(lo), None) => format!(">= {lo}"),
            (None, Some(hi)) => format!("<= {hi}"),
            (None, None) => continue,
        };
        other.entry(path).or_default().insert(text);
    }
    other
}

/// The constraint a rule states, for the rules that describe a field rather than a value.
fn describe(rule: &Rule) -> Option<String> {
    match rule {
        Rule::OutOfRange { range, .. } => Some((*range).to_owned()),
        Rule::NotOneOf { allowed, .. } => Some(format!("one of: {allowed}")),
        Rule::NotBelow { other, .. } => Some(format!("< `{other}`")),
        Rule::InvalidQuantity { .. } => Some("non-negative quantity".to_owned()),
        Rule::InvalidDuration { .. } => Some("positive Go duration (`5m`, `1h30m`)".to_owned()),
        _ => None,
    }
}

/// `clusterStrategy.lsClass.cpuQOS.groupIdentity` -> `lsClass.cpuQOS.groupIdentity`,
/// `podStrategies[0].x` -> `podStrategies[].x`, `applications[0].qos` -> `qos`.
fn normalize(key: ConfigKey, path: &str) -> String {
    let cluster = key.cluster_path();
    let rest = match path.strip_prefix(cluster) {
        Some(rest) if !cluster.is_empty() => rest,
        _ => path,
    };
    let mut out = String::new();
    let mut in_index = false;
    for ch in rest.chars() {
        match ch {
            '[' => {
                in_index = true;
                out.push_str("[]");
            }
            ']' => in_index = false,
            _ if in_index => {}
            _ => out.push(ch),
        }
    }
    out.trim_start_matches("[]").trim_start_matches('.').to_owned()
}

/// A value of `schema` with every field set, at the given end of each type.
fn fill(doc: &SchemaDoc<'_>, schema: &Value, end: End, depth: usize) -> Value {
    let s = doc.resolve(schema);
    if depth > 12 {
        return Value::Null;
    }
    if let Some(values) = enum_values(s) {
        return values.first().map_or(Value::Null, |v| json!(v));
    }
    if s.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) && !is_quantity(s) {
        return int_end("int32", end);
    }
    if is_quantity(s) {
        return json!("-1");
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        let mut object = Map::new();
        for (name, prop) in props {
            if !NOT_PROBED.contains(&name.as_str()) {
                object.insert(name.clone(), fill(doc, prop, end, depth + 1));
            }
        }
        return Value::Object(object);
    }
    match primary_type(s).as_deref() {
        Some("integer") => int_end(s.get("format").and_then(Value::as_str).unwrap_or("int64"), end),
        Some("number") => match end {
            End::Low => json!(-1e300),
            End::High => json!(1e300),
        },
        Some("boolean") => json!(true),
        Some("string") => json!("\u{1}probe"),
        Some("array") => match s.get("items") {
            Some(items) => json!([fill(doc, items, end, depth + 1)]),
            None => json!([]),
        },
        Some("object") => match s.get("additionalProperties").filter(|v| v.is_object()) {
            Some(values) => json!({ "<name>": fill(doc, values, end, depth + 1) }),
            None => json!({}),
        },
        _ => Value::Null,
    }
}

/// The smallest or largest value of an integer format.
fn int_end(format: &str, end: End) -> Value {
    let (lo, hi): (i64, i64) = match format {
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        "uint8" => (0, u8::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        "uint64" | "uint" => (0, i64::MAX),
        _ => (i64::MIN, i64::MAX),
    };
    match end {
        End::Low => json!(lo),
        End::High => json!(hi),
    }
}
