//! Kubernetes `Status` errors: every failure the API server reports is one of these, so clients
//! (kube-rs, kubectl) see the same codes and reasons a real API server sends.

use std::collections::BTreeSet;

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

use super::resource::GroupResource;

/// `<resource>.<group>`, or `<resource>` for the core group.
fn qualified(gr: &GroupResource) -> String {
    if gr.group.is_empty() {
        gr.resource.clone()
    } else {
        format!("{}.{}", gr.resource, gr.group)
    }
}

/// `Status.details` for an error about a named object: the plural as `kind`, `group` only
/// when not core (the real server's `omitempty`).
fn resource_details(gr: &GroupResource, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": gr.resource});
    if !gr.group.is_empty()
        && let Some(m) = d.as_object_mut()
    {
        m.insert("group".into(), json!(gr.group));
    }
    d
}

/// One `Status.details.causes` entry of a 422: a `field.Error` of the real server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, ...
    pub reason: &'static str,
    /// The error body without the field, e.g. `Required value`.
    pub message: String,
    /// The field path, e.g. `spec.containers`; empty for an error about no field.
    pub field: String,
}

impl Cause {
    /// A cause with an explicit reason.
    pub fn new(reason: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            field: field.into(),
        }
    }

    /// `<field>: Required value[: <detail>]`.
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Self::new("FieldValueRequired", field, message)
    }

    /// `<field>: Invalid value: <value>: <detail>`; `value` is already formatted as Go prints
    /// it (a string quoted).
    pub fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        let message = if detail.is_empty() {
            format!("Invalid value: {value}")
        } else {
            format!("Invalid value: {value}: {detail}")
        };
        Self::new("FieldValueInvalid", field, message)
    }

    /// The cause as it appears in the Status message: `<field>: <message>`.
    pub fn line(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// A failed API request, carrying the HTTP code and the `Status.reason` a real API server uses.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    /// HTTP status code (also `Status.code`).
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`, `Conflict`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Optional `Status.details` (name, group, kind).
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 400: the request itself is malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 for a named object: `<resource>.<group> "<name>" not found`, with the group and
    /// the plural in `details` as a real server reports them (no group for the core group).
    pub fn not_found(gr: &GroupResource, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", qualified(gr)))
            .with_details(resource_details(gr, name))
    }

    /// 404 for a path we do not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409 AlreadyExists on create.
    pub fn already_exists(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(gr)),
        )
        .with_details(resource_details(gr, name))
    }

    /// 409 Conflict for a stale resourceVersion or failed precondition.
    pub fn conflict(gr: &GroupResource, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(gr)
            ),
        )
        .with_details(resource_details(gr, name))
    }

    /// 409 of a server-side apply that would change fields other managers own, as a real
    /// server reports it: the message lists them, and `details.causes` holds one
    /// `FieldManagerConflict` per field, its message naming the manager (`"kubelet" using v1`
    /// for an Update entry, `"name"` for an Apply entry) and its field the path
    /// (`.status.capacity.cpu`). Conflicts come as (manager as printed, path).
    pub fn apply_conflict(conflicts: &BTreeSet<(String, Vec<String>)>) -> Self {
        let field = |path: &[String]| format!(".{}", path.join("."));
        let message = match conflicts.iter().next() {
            Some((manager, path)) if conflicts.len() == 1 => {
                format!(
                    "Apply failed with 1 conflict: conflict with {manager}: {}",
                    field(path)
                )
            }
            _ => {
                let mut lines = Vec::new();
                let mut last: Option<&str> = None;
                for (manager, path) in conflicts {
                    if last != Some(manager.as_str()) {
                        lines.push(format!("conflicts with {manager}:"));
                        last = Some(manager);
                    }
                    lines.push(format!("- {}", field(path)));
                }
                format!(
                    "Apply failed with {} conflicts: {}",
                    conflicts.len(),
                    lines.join("\n")
                )
            }
        };
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|(manager, path)| {
                json!({"reason": "FieldManagerConflict", "message": format!("conflict with {manager}"),
                       "field": field(path)})
            })
            .collect();
        Self::new(409, "Conflict", message).with_details(json!({ "causes": causes }))
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn stale(gr: &GroupResource, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 410 Gone: the requested resourceVersion left the bounded event history.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 422 Invalid, built as the real server's `NewInvalid`: the message is
    /// `<Kind>.<group> "<name>" is invalid: <cause>` (several causes in brackets, duplicates
    /// once), and `details` carries name, group, kind and every cause.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut lines: Vec<String> = Vec::new();
        for line in causes.iter().map(Cause::line) {
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
        let message = match lines.len() {
            0 => format!("{qualified_kind} \"{name}\" is invalid"),
            1 => format!("{qualified_kind} \"{name}\" is invalid: {}", lines[0]),
            _ => format!("{qualified_kind} \"{name}\" is invalid: [{}]", lines.join(", ")),
        };
        let mut details = json!({"name": name, "kind": kind});
        if let Some(d) = details.as_object_mut() {
            if !group.is_empty() {
                d.insert("group".into(), json!(group));
            }
            let causes: Vec<Value> = causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            if !causes.is_empty() {
                d.insert("causes".into(), Value::Array(causes));
            }
        }
        Self::new(422, "Invalid", message).with_details(details)
    }

    /// 403: refused by policy (admission, namespace lifecycle).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 405: the verb is not supported on this resource.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 406: the Accept header asks for a form the resource cannot be served in.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 415: e.g. strategic merge patch on a custom resource.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 429: eviction blocked by a PodDisruptionBudget.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", message)
    }

    /// 500: an internal failure (never a panic).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 504: a webhook or other dependency timed out.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// Attach `Status.details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The `meta.k8s.io/v1 Status` object for this error.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let (Some(details), Some(obj)) = (&self.details, s.as_object_mut()) {
            obj.insert("details".into(), details.clone());
        }
        s
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.status()).unwrap_or_default();
        (code, [(http::header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

/// Result type of every API operation.
pub type ApiResult<T> = Result<T, ApiError>;
