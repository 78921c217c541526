//! Strategic merge patch for the built-in kinds we serve.
//!
//! Patch strategies come from a fixed table of the list fields that pods, nodes, services and
//! object metadata use (containers by `name`, conditions by `type`, ports by `containerPort`,
//! finalizers as a set, ...). Any list not in the table is replaced, which is also what the real
//! API server does for lists without a `patchStrategy`. Supported directives: `$patch: replace`
//! and `$patch: delete` (maps and list elements), `$retainKeys`, `$deleteFromPrimitiveList/<f>`;
//! `$setElementOrder/<f>` is accepted and ignored (element order follows the target, then new
//! elements in patch order).

use serde_json::{Map, Value};

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    /// Elements are maps identified by this key.
    MergeByKey(&'static str),
    /// A set of scalars (union).
    Set,
    /// The patch replaces the list.
    Replace,
}

fn list_strategy(path: &[String], field: &str) -> ListStrategy {
    let parent = path.last().map(String::as_str).unwrap_or("");
    let in_container = matches!(parent, "containers" | "initContainers" | "ephemeralContainers");
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "imagePullSecrets"
        | "env"
        | "resourceClaims"
        | "schedulingGates" => ListStrategy::MergeByKey("name"),
        "ports" if in_container => ListStrategy::MergeByKey("containerPort"),
        "ports" => ListStrategy::MergeByKey("port"),
        "volumeMounts" => ListStrategy::MergeByKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeByKey("devicePath"),
        "resizePolicy" => ListStrategy::MergeByKey("resourceName"),
        "hostAliases" | "podIPs" | "hostIPs" => ListStrategy::MergeByKey("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeByKey("topologyKey"),
        "conditions" | "addresses" => ListStrategy::MergeByKey("type"),
        "ownerReferences" => ListStrategy::MergeByKey("uid"),
        "taints" if parent == "spec" => ListStrategy::MergeByKey("key"),
        "finalizers" => ListStrategy::Set,
        _ => ListStrategy::Replace,
    }
}

fn directive(v: &Value) -> Option<&str> {
    v.get("$patch").and_then(Value::as_str)
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|e| directive(e).is_none())
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Why a strategic merge patch cannot be applied; the API server answers 400 with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategicPatchError {
    /// The patch document is not an object.
    #[error("a strategic merge patch must be a JSON object")]
    NotAnObject,
    /// A map was expected where the patch has something else.
    #[error("expected a map")]
    ExpectedMap,
    /// `$patch` names a directive other than replace, delete or merge.
    #[error("unknown patch directive {0:?}")]
    UnknownDirective(String),
    /// The object being patched has no map where the patch merges one.
    #[error("target is not a map")]
    TargetNotMap,
    /// The object being patched has no list where the patch merges one.
    #[error("target is not a list")]
    TargetNotList,
    /// `$deleteFromPrimitiveList/<field>` with a value that is not a list.
    #[error("$deleteFromPrimitiveList needs a list")]
    DeleteFromPrimitiveListNeedsList,
}

/// Apply a strategic merge patch to `target` (a whole object).
pub fn apply(target: &mut Value, patch: &Value) -> Result<(), StrategicPatchError> {
    if !patch.is_object() {
        return Err(StrategicPatchError::NotAnObject);
    }
    merge_map(target, patch, &mut Vec::new())
}

fn merge_map(target: &mut Value, patch: &Value, path: &mut Vec<String>) -> Result<(), StrategicPatchError> {
    let Some(pm) = patch.as_object() else {
        return Err(StrategicPatchError::ExpectedMap);
    };
    match directive(patch) {
        Some("replace") => {
            *target = strip_directives(patch);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some(other) if other != "merge" => {
            return Err(StrategicPatchError::UnknownDirective(other.to_owned()));
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(tm) = target.as_object_mut() else {
        return Err(StrategicPatchError::TargetNotMap);
    };
    for (key, pv) in pm {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = pv
                .as_array()
                .ok_or(StrategicPatchError::DeleteFromPrimitiveListNeedsList)?;
            if let Some(Value::Array(list)) = tm.get_mut(field) {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if key.starts_with('$') {
            continue; // $setElementOrder, $retainKeys (below), $patch (above)
        }
        match pv {
            Value::Null => {
                tm.remove(key);
            }
            Value::Object(_) if directive(pv) == Some("delete") => {
                tm.remove(key);
            }
            Value::Object(_) => {
                let slot = tm.entry(key.clone()).or_insert(Value::Null);
                path.push(key.clone());
                let r = merge_map(slot, pv, path);
                path.pop();
                r?;
            }
            Value::Array(items) => {
                let strategy = list_strategy(path, key);
                let slot = tm.entry(key.clone()).or_insert(Value::Array(vec![]));
                path.push(key.clone());
                let r = merge_list(slot, items, strategy, path);
                path.pop();
                r?;
            }
            scalar => {
                tm.insert(key.clone(), scalar.clone());
            }
        }
    }
    if let Some(retain) = pm.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        tm.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

fn merge_list(
    target: &mut Value,
    items: &[Value],
    strategy: ListStrategy,
    path: &mut Vec<String>,
) -> Result<(), StrategicPatchError> {
    if items.iter().any(|e| directive(e) == Some("replace")) {
        *target = Value::Array(
            items
                .iter()
                .filter(|e| directive(e).is_none())
                .map(strip_directives)
                .collect(),
        );
        return Ok(());
    }
    let key = match strategy {
        ListStrategy::Replace => {
            *target = strip_directives(&Value::Array(items.to_vec()));
            return Ok(());
        }
        ListStrategy::Set => {
            if !target.is_array() {
                *target = Value::Array(vec![]);
            }
            if let Some(list) = target.as_array_mut() {
                for item in items {
                    if !list.contains(item) {
                        list.push(item.clone());
                    }
                }
            }
            return Ok(());
        }
        ListStrategy::MergeByKey(k) => k,
    };
    if !target.is_array() {
        *target = Value::Array(vec![]);
    }
    let Some(list) = target.as_array_mut() else {
        return Err(StrategicPatchError::TargetNotList);
    };
    for item in items {
        let Some(id) = item.get(key).filter(|v| !v.is_null()) else {
            if directive(item).is_none() {
                list.push(strip_directives(item));
            }
            continue;
        };
        let pos = list.iter().position(|e| e.get(key) == Some(id));
        match (directive(item), pos) {
            (Some("delete"), Some(i)) => {
                list.remove(i);
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => merge_map(&mut list[i], item, path)?,
            (_, None) => list.push(strip_directives(item)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containers_merge_by_name_and_conditions_by_type() {
        let mut pod = json!({
            "metadata": {"finalizers": ["a"]},
            "spec": {"containers": [{"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}]}, {"name": "b", "image": "y"}], "tolerations": [{"key": "t"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}
        });
        let patch = json!({
            "metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c", "image": "w"}, {"name": "a", "env": [{"name": "F", "value": "2"}]}],
                     "$setElementOrder/containers": [{"name": "a"}], "tolerations": [{"key": "u"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        });
        apply(&mut pod, &patch).unwrap();
        assert_eq!(pod["metadata"]["finalizers"], json!(["b"]));
        let c = &pod["spec"]["containers"];
        assert_eq!(c.as_array().unwrap().len(), 3);
        assert_eq!(c[0]["image"], "x");
        assert_eq!(c[0]["env"].as_array().unwrap().len(), 2);
        assert_eq!(c[1]["image"], "z");
        assert_eq!(pod["spec"]["tolerations"], json!([{"key": "u"}]));
        assert_eq!(pod["status"]["conditions"][0]["status"], "True");
        assert_eq!(pod["status"]["conditions"][1]["type"], "PodScheduled");
    }

    #[test]
    fn delete_and_replace_directives() {
        let mut pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "x": {"y": 1, "z": 2}}});
        let patch = json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}], "x": {"$patch": "replace", "q": 3}}});
        apply(&mut pod, &patch).unwrap();
        assert_eq!(pod["spec"]["containers"], json!([{"name": "b"}]));
        assert_eq!(pod["spec"]["x"], json!({"q": 3}));
        let mut v = json!({"a": {"k": 1, "j": 2}});
        apply(&mut v, &json!({"a": {"$retainKeys": ["k"], "k": 5}})).unwrap();
        assert_eq!(v, json!({"a": {"k": 5}}));
        assert_eq!(apply(&mut v, &json!([1])), Err(StrategicPatchError::NotAnObject));
        let err = apply(&mut v, &json!({"$patch": "bogus"})).unwrap_err();
        assert_eq!(err.to_string(), r#"unknown patch directive "bogus""#);
    }
}
