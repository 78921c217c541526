//! `metadata.managedFields`: which field manager set which fields, so server-side apply can
//! report conflicts and remove fields a manager stopped applying.
//!
//! Approximation: a field set is the set of leaf paths (maps are descended, lists and scalars
//! are leaves), encoded in the FieldsV1 shape (`{"f:spec":{"f:replicas":{}}}`). Real API
//! servers also key list elements (`k:{"name":"c"}`); here a list is owned as a whole.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::apiserver::object::now_rfc3339;

/// A set of owned leaf paths.
pub type FieldSet = BTreeSet<Vec<String>>;

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    /// Field manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// `status` for the status subresource, else empty.
    pub subresource: String,
    /// apiVersion the fields were set at.
    pub api_version: String,
    /// Owned fields.
    pub fields: FieldSet,
}

fn collect(v: &Value, prefix: &mut Vec<String>, out: &mut FieldSet) {
    match v {
        // An empty map in an applied configuration claims nothing.
        Value::Object(m) => {
            for (k, child) in m {
                prefix.push(k.clone());
                collect(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// Leaf paths of an object that a manager can own (no apiVersion/kind, metadata limited to
/// labels, annotations, finalizers and ownerReferences).
pub fn leaves(obj: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(o) = obj.as_object() else { return out };
    for (k, v) in o {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                for mk in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    if let Some(mv) = v.get(mk) {
                        collect(mv, &mut vec!["metadata".into(), mk.into()], &mut out);
                    }
                }
            }
            _ => collect(v, &mut vec![k.clone()], &mut out),
        }
    }
    out
}

/// An entry as a real server prints it in a conflict: `"kubelet" using v1` for an Update,
/// `"name"` for an Apply.
pub fn describe(e: &ManagedEntry) -> String {
    if e.operation == "Apply" {
        format!("{:?}", e.manager)
    } else {
        format!("{:?} using {}", e.manager, e.api_version)
    }
}

/// Value at a path.
pub fn get_path<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k.as_str()))
}

/// Remove the value at a path (no-op if absent).
pub fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for p in parents {
        match cur.get_mut(p.as_str()) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

/// Do two paths overlap (one is a prefix of the other)?
pub fn overlaps(a: &[String], b: &[String]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

fn encode(fields: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut cur = &mut root;
        for seg in path {
            let entry = cur.entry(format!("f:{seg}")).or_insert_with(|| json!({}));
            if !entry.is_object() {
                *entry = json!({});
            }
            match entry.as_object_mut() {
                Some(m) => cur = m,
                None => break,
            }
        }
    }
    Value::Object(root)
}

fn decode(v: &Value, prefix: &mut Vec<String>, out: &mut FieldSet) {
    let Some(m) = v.as_object() else { return };
    let mut any_child = false;
    for (k, child) in m {
        if let Some(name) = k.strip_prefix("f:") {
            any_child = true;
            prefix.push(name.to_string());
            decode(child, prefix, out);
            prefix.pop();
        }
    }
    if !any_child && !prefix.is_empty() {
        out.insert(prefix.clone());
    }
}

/// Read the entries of an object's `metadata.managedFields`.
pub fn read(obj: &Value) -> Vec<ManagedEntry> {
    let Some(list) = obj.pointer("/metadata/managedFields").and_then(Value::as_array) else {
        return vec![];
    };
    list.iter()
        .filter_map(|e| {
            let mut fields = FieldSet::new();
            decode(
                e.get("fieldsV1").unwrap_or(&Value::Null),
                &mut Vec::new(),
                &mut fields,
            );
            Some(ManagedEntry {
                manager: e.get("manager")?.as_str()?.to_string(),
                operation: e
                    .get("operation")
                    .and_then(Value::as_str)
                    .unwrap_or("Update")
                    .to_string(),
                subresource: e
                    .get("subresource")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                api_version: e
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                fields,
            })
        })
        .collect()
}

/// Write entries back to `metadata.managedFields` (entries owning nothing are dropped).
pub fn write(obj: &mut Value, entries: &[ManagedEntry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": now_rfc3339(),
                "fieldsType": "FieldsV1",
                "fieldsV1": encode(&e.fields),
            });
            if !e.subresource.is_empty()
                && let Some(m) = v.as_object_mut()
            {
                m.insert("subresource".into(), Value::String(e.subresource.clone()));
            }
            v
        })
        .collect();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Record a non-apply write: `manager` takes the fields whose value changed; others lose them.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: &str,
    api_version: &str,
) {
    let mut entries = old.map(read).unwrap_or_default();
    let new_leaves = leaves(new);
    let changed: FieldSet = match old {
        None => new_leaves.clone(),
        Some(o) => new_leaves
            .iter()
            .filter(|p| get_path(o, p) != get_path(new, p))
            .cloned()
            .collect(),
    };
    for e in entries.iter_mut() {
        e.fields
            .retain(|p| new_leaves.contains(p) && !changed.iter().any(|c| overlaps(c, p)));
    }
    if !changed.is_empty() {
        match entries
            .iter_mut()
            .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == subresource)
        {
            Some(e) => e.fields.extend(changed),
            None => entries.push(ManagedEntry {
                manager: manager.to_string(),
                operation: "Update".into(),
                subresource: subresource.to_string(),
                api_version: api_version.to_string(),
                fields: changed,
            }),
        }
    }
    write(new, &entries);
}
