//! The subset of Kubernetes strategic-merge-patch that a profile's `patch` needs on a Pod.
//!
//! Objects merge key by key (a `null` deletes the key); lists whose elements carry a merge key
//! merge element-wise by it (containers, initContainers, volumes, env, volumeMounts by `name`
//! or `mountPath`, ports by `containerPort`, ...), as the Pod schema's `patchMergeKey`s say;
//! every other list is replaced. The directives `$patch: replace` (replace the enclosing object
//! or list) and `$patch: delete` (on a list element: remove the element with that key) are
//! honoured; `$setElementOrder` and `$retainKeys` are not (they are only produced by
//! `kubectl apply`, never written by hand into a profile).

use serde_json::{Map, Value};

/// Merge keys of the Pod's keyed lists, by field name, from the Kubernetes Pod schema.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" => "containerPort",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        "ownerReferences" => "uid",
        _ => return None,
    })
}

/// Applies `patch` to `target` in place.
pub fn apply(target: &mut Value, patch: &Value) {
    merge_value(target, patch, None);
}

fn merge_value(target: &mut Value, patch: &Value, field: Option<&str>) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => merge_object(target, patch),
        (Value::Array(target), Value::Array(patch)) => match field.and_then(merge_key) {
            Some(key) => merge_keyed_list(target, patch, key),
            None => {
                *target = patch
                    .iter()
                    .filter(|item| !is_directive_only(item))
                    .cloned()
                    .collect()
            }
        },
        (target, patch) => *target = strip_directives(patch),
    }
}

fn merge_object(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        if let Value::Object(replaced) = strip_directives(&Value::Object(patch.clone())) {
            *target = replaced;
        }
        return;
    }
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            target.remove(key);
            continue;
        }
        match target.get_mut(key) {
            Some(existing) => merge_value(existing, value, Some(key)),
            None => {
                target.insert(key.clone(), strip_directives(value));
            }
        }
    }
}

fn merge_keyed_list(target: &mut Vec<Value>, patch: &[Value], key: &str) {
    if patch
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *target = patch
            .iter()
            .filter(|item| !is_directive_only(item))
            .map(strip_directives)
            .collect();
        return;
    }
    for item in patch {
        let Some(id) = item.get(key) else {
            target.push(strip_directives(item));
            continue;
        };
        let position = target.iter().position(|existing| existing.get(key) == Some(id));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(index), true) => {
                target.remove(index);
            }
            (Some(index), false) => merge_value(&mut target[index], item, None),
            (None, true) => {}
            (None, false) => target.push(strip_directives(item)),
        }
    }
}

fn is_directive_only(item: &Value) -> bool {
    item.as_object()
        .is_some_and(|object| !object.is_empty() && object.keys().all(|key| key.starts_with('$')))
}

fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(object) => Value::Object(
            object
                .iter()
                .filter(|(key, _)| !key.starts_with('$'))
                .map(|(key, value)| (key.clone(), strip_directives(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::apply;

    #[test]
    fn scalars_and_objects_merge_and_null_deletes() {
        let mut pod = json!({"spec": {"terminationGracePeriodSeconds": 10, "nodeName": "a"}, "metadata": {"labels": {"x": "1"}}});
        apply(
            &mut pod,
            &json!({"spec": {"terminationGracePeriodSeconds": 30, "nodeName": null}, "metadata": {"labels": {"y": "2"}}}),
        );
        assert_eq!(
            pod,
            json!({"spec": {"terminationGracePeriodSeconds": 30}, "metadata": {"labels": {"x": "1", "y": "2"}}})
        );
    }

    #[test]
    fn containers_merge_by_name_and_env_by_name() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "K", "value": "1"}]},
            {"name": "b", "image": "b:1"}
        ]}});
        apply(
            &mut pod,
            &json!({"spec": {"containers": [
                {"name": "b", "image": "b:2"},
                {"name": "a", "env": [{"name": "L", "value": "2"}]},
                {"name": "c", "image": "c:1"}
            ]}}),
        );
        assert_eq!(
            pod,
            json!({"spec": {"containers": [
                {"name": "a", "image": "a:1", "env": [{"name": "K", "value": "1"}, {"name": "L", "value": "2"}]},
                {"name": "b", "image": "b:2"},
                {"name": "c", "image": "c:1"}
            ]}})
        );
    }

    #[test]
    fn unkeyed_lists_are_replaced() {
        let mut pod = json!({"spec": {"tolerations": [{"key": "a"}], "containers": [{"name": "a", "args": ["1", "2"]}]}});
        apply(
            &mut pod,
            &json!({"spec": {"tolerations": [{"key": "b"}], "containers": [{"name": "a", "args": ["3"]}]}}),
        );
        assert_eq!(
            pod,
            json!({"spec": {"tolerations": [{"key": "b"}], "containers": [{"name": "a", "args": ["3"]}]}})
        );
    }

    #[test]
    fn patch_directives_delete_and_replace() {
        let mut pod =
            json!({"spec": {"volumes": [{"name": "a"}, {"name": "b"}], "nodeSelector": {"x": "1"}}});
        apply(
            &mut pod,
            &json!({"spec": {"volumes": [{"name": "a", "$patch": "delete"}], "nodeSelector": {"$patch": "replace", "y": "2"}}}),
        );
        assert_eq!(
            pod,
            json!({"spec": {"volumes": [{"name": "b"}], "nodeSelector": {"y": "2"}}})
        );
    }
}
