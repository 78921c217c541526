//! The four PATCH flavours: JSON merge patch, JSON patch, strategic merge patch and
//! server-side apply (see `apply` for the approximation).

pub mod managed;
pub mod strategic;

use std::collections::BTreeSet;

use serde_json::Value;

use super::error::{ApiError, ApiResult, Cause};
use super::resource::ResourceInfo;
use managed::{ManagedEntry, get_path, leaves, overlaps, remove_path};

/// PATCH content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// From the request's Content-Type (415 for anything else).
    pub fn from_content_type(ct: &str) -> ApiResult<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/json-patch+json" => Ok(Self::Json),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" if base.ends_with("yaml") => {
                Ok(Self::Apply)
            }
            other => Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, \
                 application/strategic-merge-patch+json (got {other:?})"
            ))),
        }
    }

    /// Operation name recorded in managedFields.
    pub fn operation(self) -> &'static str {
        if self == Self::Apply { "Apply" } else { "Update" }
    }
}

/// Parse a JSON body (or YAML for apply) into a value.
pub fn parse_body(kind: PatchKind, body: &[u8]) -> ApiResult<Value> {
    if kind == PatchKind::Apply {
        let text = std::str::from_utf8(body)
            .map_err(|e| ApiError::bad_request(format!("body is not UTF-8: {e}")))?;
        serde_yaml::from_str(text).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
    } else {
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
    }
}

/// Apply a merge, JSON or strategic patch to the current object (served form).
pub fn apply_patch(info: &ResourceInfo, current: &Value, kind: PatchKind, patch: &Value) -> ApiResult<Value> {
    let mut out = current.clone();
    match kind {
        PatchKind::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            json_patch::merge(&mut out, patch);
        }
        PatchKind::Json => {
            let p: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut out, &p).map_err(|e| {
                ApiError::invalid(
                    &info.kind,
                    &info.group,
                    "",
                    vec![Cause::new(
                        "FieldValueInvalid",
                        "",
                        format!("the JSON patch failed: {e}"),
                    )],
                )
            })?;
        }
        PatchKind::Strategic => {
            if info.custom {
                return Err(ApiError::unsupported_media_type(
                    "strategic merge patch is not supported for custom resources; use a merge patch",
                ));
            }
            strategic::apply(&mut out, patch).map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        PatchKind::Apply => return Err(ApiError::internal("apply patches go through server_side_apply")),
    }
    Ok(out)
}

/// The manager a real server names when it first applies to an object without managedFields:
/// every field already there is attributed to it (an `Update`), so an apply that changes one
/// conflicts as it would with the writer who set it.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Outcome of server-side apply: the merged object (managedFields written).
///
/// As kube-apiserver (structured-merge-diff): a field another entry owns conflicts only when
/// the apply changes its value (the same value is shared ownership); `force` moves it to the
/// applier; a field the applier applied last time and omits now is removed unless another
/// entry (an `Update` included) still owns it. The applied configuration is compared as sent:
/// a real server turns it into a typed value straight from its unstructured form, never
/// through the Go type, so `58000` applied over a stored (canonical) `58k` is a change, and
/// conflicts with another owner, although the stored object ends up the same.
pub fn server_side_apply(
    info: &ResourceInfo,
    current: &Value,
    applied: &Value,
    manager: &str,
    subresource: &str,
    force: bool,
) -> ApiResult<Value> {
    let mut entries = managed::read(current);
    if entries.is_empty() {
        let fields = leaves(current);
        if !fields.is_empty() {
            entries.push(ManagedEntry {
                manager: BEFORE_FIRST_APPLY.into(),
                operation: "Update".into(),
                subresource: String::new(),
                api_version: current
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                fields,
            });
        }
    }
    let mine =
        |e: &ManagedEntry| e.manager == manager && e.operation == "Apply" && e.subresource == subresource;
    let new_fields = leaves(applied);
    let mut conflicts = BTreeSet::new();
    for path in &new_fields {
        if get_path(current, path) == get_path(applied, path) {
            continue;
        }
        for e in entries.iter_mut().filter(|e| !mine(e)) {
            let owned: Vec<Vec<String>> = e.fields.iter().filter(|p| overlaps(p, path)).cloned().collect();
            if owned.is_empty() {
                continue;
            }
            if force {
                e.fields.retain(|p| !owned.contains(p));
            } else {
                conflicts.extend(owned.into_iter().map(|p| (managed::describe(e), p)));
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(ApiError::apply_conflict(&conflicts));
    }
    let old_fields = entries
        .iter()
        .find(|e| mine(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut merged = current.clone();
    if info.custom {
        json_patch::merge(&mut merged, applied);
    } else {
        strategic::apply(&mut merged, applied).map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    for path in old_fields.difference(&new_fields) {
        let owned_by_other = entries
            .iter()
            .filter(|e| !mine(e))
            .any(|e| e.fields.iter().any(|p| overlaps(p, path)));
        if !owned_by_other {
            remove_path(&mut merged, path);
        }
    }
    let api_version = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    entries.retain(|e| !mine(e));
    entries.push(ManagedEntry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        subresource: subresource.to_string(),
        api_version,
        fields: new_fields,
    });
    managed::write(&mut merged, &entries);
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resource::Registry;
    use serde_json::json;

    fn lease_info() -> std::sync::Arc<ResourceInfo> {
        Registry::with_builtins()
            .lookup("coordination.k8s.io", "v1", "leases")
            .unwrap()
    }

    #[test]
    fn apply_conflicts_unless_forced_and_removes_dropped_fields() {
        let info = lease_info();
        let base = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {}});
        let a = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 5}});
        let v1 = server_side_apply(&info, &base, &a, "a", "", false).unwrap();
        assert_eq!(v1["spec"]["holderIdentity"], "a");
        let b = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "b"}});
        let err = server_side_apply(&info, &v1, &b, "b", "", false).unwrap_err();
        assert_eq!(err.code, 409);
        let v2 = server_side_apply(&info, &v1, &b, "b", "", true).unwrap();
        assert_eq!(v2["spec"]["holderIdentity"], "b");
        // a re-applies without leaseDurationSeconds: a owned it alone, so it goes away.
        let a2 = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {}});
        let v3 = server_side_apply(&info, &v2, &a2, "a", "", false).unwrap();
        assert!(v3["spec"].get("leaseDurationSeconds").is_none());
        assert_eq!(v3["spec"]["holderIdentity"], "b");
        let managers: Vec<String> = managed::read(&v3).into_iter().map(|e| e.manager).collect();
        assert_eq!(managers, vec!["b".to_string()]);
    }

    #[test]
    fn a_first_apply_conflicts_with_what_was_there_before_managed_fields() {
        let info = lease_info();
        let untracked = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "old", "leaseDurationSeconds": 5}});
        let a = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 5}});
        let err = server_side_apply(&info, &untracked, &a, "a", "", false).unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message.contains(
                "conflict with \"before-first-apply\" using coordination.k8s.io/v1: .spec.holderIdentity"
            ),
            "{}",
            err.message
        );
        let v = server_side_apply(&info, &untracked, &a, "a", "", true).unwrap();
        let entries = managed::read(&v);
        let before = entries.iter().find(|e| e.manager == BEFORE_FIRST_APPLY).unwrap();
        // The same value is shared: before-first-apply keeps leaseDurationSeconds.
        assert_eq!(
            before.fields.iter().map(|p| p.join(".")).collect::<Vec<_>>(),
            vec!["spec.leaseDurationSeconds".to_string()]
        );
    }

    #[test]
    fn patch_kinds() {
        let info = lease_info();
        let cur = json!({"spec": {"a": 1, "b": 2}});
        assert_eq!(
            apply_patch(&info, &cur, PatchKind::Merge, &json!({"spec": {"a": null}})).unwrap(),
            json!({"spec": {"b": 2}})
        );
        let jp = json!([{"op": "replace", "path": "/spec/a", "value": 3}]);
        assert_eq!(
            apply_patch(&info, &cur, PatchKind::Json, &jp).unwrap()["spec"]["a"],
            3
        );
        let bad = json!([{"op": "remove", "path": "/nope"}]);
        assert_eq!(
            apply_patch(&info, &cur, PatchKind::Json, &bad).unwrap_err().code,
            422
        );
        assert_eq!(PatchKind::from_content_type("text/plain").unwrap_err().code, 415);
    }
}
