//! Server-side apply, the one way the components write what they own.
//!
//! Each component names itself as the field manager and applies only its own fields; the API
//! server records which manager owns which field (`metadata.managedFields`), so concurrent
//! writers (the kubelet on Node status, other controllers) never overwrite each other, and a
//! field the manager stops applying is removed by the server. Two rules sit on top:
//!
//! - **Conflicts.** An apply that would change a field another manager owns fails with 409.
//!   The fields a component applies are its own by definition, so [`apply`] logs one warning
//!   naming the other managers and the fields, then applies again with `force`, which moves
//!   them to this manager. The caller counts the conflict ([`Applied::conflict`]).
//! - **Removal.** The server removes an omitted field only if this manager alone owned it
//!   through an Apply. A field an `Update` entry also owns (a merge patch of an earlier
//!   version of ours, of upstream Koordinator, of anyone) stays. After the apply, [`apply`]
//!   looks for fields under the caller's `owned` roots that the object still has but the
//!   applied configuration lacks ([`leftovers`]) and removes them with one JSON merge patch
//!   of nulls, which leaves no ownership behind. A real server may also leave the emptied
//!   parents of a pruned nested field: they are leftovers too.
//!
//! Quantities are compared as sent (the server turns an applied configuration into a typed
//! value without its Go type): a built-in object's quantities must be applied in canonical
//! form, as the server stores them, or an unchanged value counts as a change.

use std::fmt;

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

/// The endpoint an apply goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// The object itself (metadata, spec).
    Main,
    /// The `status` subresource.
    Status,
}

/// Fields another manager owned with a different value, as the API server's 409 names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyConflict {
    /// The other managers as the server prints them (`"kubelet" using v1` for an Update
    /// entry, `"name"` for an Apply entry), each once.
    pub managers: Vec<String>,
    /// The fields, as the server prints them (`.status.capacity.kubernetes.io/batch-cpu`).
    pub fields: Vec<String>,
}

impl ApplyConflict {
    /// The conflict a 409 reports through its `FieldManagerConflict` causes; `None` for any
    /// other error (a 409 without such causes is a resourceVersion conflict, not this).
    pub fn from_error(error: &kube::Error) -> Option<Self> {
        let kube::Error::Api(status) = error else {
            return None;
        };
        if status.code != 409 {
            return None;
        }
        let mut conflict = ApplyConflict::default();
        let causes = status
            .details
            .as_ref()
            .map(|d| d.causes.as_slice())
            .unwrap_or_default();
        for cause in causes.iter().filter(|c| c.reason == "FieldManagerConflict") {
            let manager = cause
                .message
                .strip_prefix("conflict with ")
                .unwrap_or(&cause.message)
                .to_owned();
            if !conflict.managers.contains(&manager) {
                conflict.managers.push(manager);
            }
            conflict.fields.push(cause.field.clone());
        }
        (!conflict.fields.is_empty()).then_some(conflict)
    }
}

impl fmt::Display for ApplyConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} owned by {}",
            self.fields.join(", "),
            self.managers.join(", ")
        )
    }
}

/// What [`apply`] did.
#[derive(Debug, Clone)]
pub struct Applied<K> {
    /// The object as the server returned it after the last write.
    pub object: K,
    /// The conflict the first, unforced apply met; the forced one took the fields.
    pub conflict: Option<ApplyConflict>,
    /// Fields the apply left behind that a merge patch then removed (dotted paths).
    pub removed: Vec<String>,
}

/// Applies `body` (apiVersion, kind, metadata.name and the fields `manager` owns) to the
/// object `name` at `endpoint`: unforced first; on a field manager conflict one warning, then
/// forced. Then removes the [`leftovers`] under the `owned` roots (paths of field names, e.g.
/// `["spec"]` or `["status", "capacity", "kubernetes.io/batch-cpu"]`).
pub async fn apply<K>(
    api: &Api<K>,
    manager: &str,
    endpoint: Endpoint,
    name: &str,
    body: &Value,
    owned: &[&[&str]],
) -> Result<Applied<K>, kube::Error>
where
    K: Clone + fmt::Debug + DeserializeOwned + Serialize,
{
    let patch = Patch::Apply(body);
    let params = PatchParams::apply(manager);
    let send = async |params: &PatchParams, patch: &Patch<&Value>| match endpoint {
        Endpoint::Main => api.patch(name, params, patch).await,
        Endpoint::Status => api.patch_status(name, params, patch).await,
    };
    let (object, conflict) = match send(&params, &patch).await {
        Ok(object) => (object, None),
        Err(error) => {
            let Some(conflict) = ApplyConflict::from_error(&error) else {
                return Err(error);
            };
            tracing::warn!(
                field_manager = manager,
                object = name,
                managers = %conflict.managers.join(", "),
                fields = %conflict.fields.join(", "),
                "another field manager changed fields this one owns; taking them back (forced apply)"
            );
            (send(&params.clone().force(), &patch).await?, Some(conflict))
        }
    };
    let observed = serde_json::to_value(&object).unwrap_or(Value::Null);
    let paths = leftovers(&observed, body, owned);
    if paths.is_empty() {
        return Ok(Applied {
            object,
            conflict,
            removed: Vec::new(),
        });
    }
    let removed: Vec<String> = paths.iter().map(|p| p.join(".")).collect();
    let removal = removal_patch(&paths);
    let params = PatchParams {
        field_manager: Some(manager.to_owned()),
        ..PatchParams::default()
    };
    let patch = Patch::Merge(&removal);
    let object = match endpoint {
        Endpoint::Main => api.patch(name, &params, &patch).await?,
        Endpoint::Status => api.patch_status(name, &params, &patch).await?,
    };
    tracing::info!(
        field_manager = manager,
        object = name,
        fields = %removed.join(", "),
        "removed fields the apply left behind (another field manager also owned them)"
    );
    Ok(Applied {
        object,
        conflict,
        removed,
    })
}

fn get<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

/// The paths under the `owned` roots that `observed` has and `applied` lacks: what the server
/// kept although this manager no longer applies it. Maps are descended, anything else is one
/// field (a present value that differs is not a leftover).
pub fn leftovers(observed: &Value, applied: &Value, owned: &[&[&str]]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for root in owned {
        let Some(seen) = get(observed, root) else {
            continue;
        };
        let mut path: Vec<String> = root.iter().map(|s| (*s).to_owned()).collect();
        match get(applied, root) {
            None => out.push(path),
            Some(wanted) => descend(seen, wanted, &mut path, &mut out),
        }
    }
    out
}

fn descend(seen: &Value, wanted: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let (Value::Object(seen), Value::Object(wanted)) = (seen, wanted) else {
        return;
    };
    for (key, value) in seen {
        path.push(key.clone());
        match wanted.get(key) {
            None => out.push(path.clone()),
            Some(w) => descend(value, w, path, out),
        }
        path.pop();
    }
}

/// The JSON merge patch that removes `paths` (a `null` at each).
pub fn removal_patch(paths: &[Vec<String>]) -> Value {
    let mut root = Value::Object(Map::new());
    for path in paths {
        set_null(&mut root, path);
    }
    root
}

fn set_null(value: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    let Value::Object(map) = value else {
        return;
    };
    if rest.is_empty() {
        map.insert(first.clone(), Value::Null);
    } else {
        set_null(map.entry(first.clone()).or_insert(Value::Null), rest);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kube::core::{Status, response::StatusDetails};
    use serde_json::json;

    #[test]
    fn leftovers_are_owned_fields_present_but_not_applied() {
        let observed = json!({"status": {"capacity": {"cpu": "8", "kubernetes.io/batch-cpu": "4k",
            "kubernetes.io/mid-cpu": "1"}}, "spec": {"a": {"b": 1, "c": 2}, "d": [1], "e": null}});
        let applied = json!({"status": {"capacity": {"kubernetes.io/mid-cpu": "2"}},
            "spec": {"a": {"b": 3}, "d": [2]}});
        let owned: [&[&str]; 4] = [
            &["status", "capacity", "kubernetes.io/batch-cpu"],
            &["status", "capacity", "kubernetes.io/mid-cpu"],
            &["status", "capacity", "kubernetes.io/batch-memory"],
            &["spec"],
        ];
        let paths: Vec<String> = leftovers(&observed, &applied, &owned)
            .iter()
            .map(|p| p.join("."))
            .collect();
        // The kubelet's cpu is not ours; a value that differs is not a leftover.
        assert_eq!(
            paths,
            vec!["status.capacity.kubernetes.io/batch-cpu", "spec.a.c", "spec.e"]
        );
        assert!(leftovers(&applied, &applied, &owned).is_empty());
    }

    #[test]
    fn removal_patch_nulls_each_path() {
        let paths = vec![
            vec![
                "status".into(),
                "capacity".into(),
                "kubernetes.io/batch-cpu".into(),
            ],
            vec![
                "status".into(),
                "allocatable".into(),
                "kubernetes.io/batch-cpu".into(),
            ],
            vec!["spec".into()],
        ];
        assert_eq!(
            removal_patch(&paths),
            json!({"status": {"capacity": {"kubernetes.io/batch-cpu": null},
                "allocatable": {"kubernetes.io/batch-cpu": null}}, "spec": null})
        );
    }

    fn status(code: u16, causes: Vec<Value>) -> kube::Error {
        kube::Error::Api(
            Status::failure("Apply failed with 2 conflicts", "Conflict")
                .with_code(code)
                .with_details(serde_json::from_value::<StatusDetails>(json!({ "causes": causes })).unwrap())
                .boxed(),
        )
    }

    fn cause(manager: &str, field: &str) -> Value {
        json!({"reason": "FieldManagerConflict", "message": format!("conflict with {manager}"), "field": field})
    }

    #[test]
    fn a_conflict_is_read_from_the_causes_of_a_409() {
        let error = status(
            409,
            vec![
                cause("\"other\" using v1", ".status.capacity.a"),
                cause("\"other\" using v1", ".status.capacity.b"),
                cause("\"tool\"", ".metadata.annotations.c"),
            ],
        );
        let conflict = ApplyConflict::from_error(&error).unwrap();
        assert_eq!(conflict.managers, vec!["\"other\" using v1", "\"tool\""]);
        assert_eq!(
            conflict.fields,
            vec![
                ".status.capacity.a",
                ".status.capacity.b",
                ".metadata.annotations.c"
            ]
        );
        assert_eq!(
            conflict.to_string(),
            ".status.capacity.a, .status.capacity.b, .metadata.annotations.c owned by \"other\" using v1, \"tool\""
        );
        // A resourceVersion conflict, or another code, is not a field manager conflict.
        assert_eq!(ApplyConflict::from_error(&status(409, vec![])), None);
        assert_eq!(
            ApplyConflict::from_error(&status(422, vec![cause("\"x\"", ".a")])),
            None
        );
    }
}
