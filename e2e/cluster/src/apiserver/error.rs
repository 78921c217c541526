//! Kubernetes `Status` errors: every failure the API server reports is one of these, so clients
//! (kube-rs, kubectl) see the same codes and reasons a real API server sends.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

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

    /// 404 for a named object.
    pub fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
            .with_details(json!({"name": name, "kind": resource}))
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
    pub fn already_exists(resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
        .with_details(json!({"name": name, "kind": resource}))
    }

    /// 409 Conflict for a stale resourceVersion or failed precondition.
    pub fn conflict(resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        )
        .with_details(json!({"name": name, "kind": resource}))
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn stale(resource: &str, name: &str) -> Self {
        Self::conflict(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 410 Gone: the requested resourceVersion left the bounded event history.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 422: the object fails validation.
    pub fn invalid(resource: &str, name: &str, message: impl Into<String>) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{resource} \"{name}\" is invalid: {}", message.into()),
        )
        .with_details(json!({"name": name, "kind": resource}))
    }

    /// 403: refused by policy (admission, namespace lifecycle).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 405: the verb is not supported on this resource.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
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
