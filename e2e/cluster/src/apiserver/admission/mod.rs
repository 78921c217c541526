//! Dynamic admission: registered MutatingWebhookConfigurations, then
//! ValidatingWebhookConfigurations, called over HTTPS for every write whose rules match.

pub mod client;
pub mod matching;

use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

pub use matching::Operation;
use matching::{RequestAttributes, webhook_matches};

use super::error::{ApiError, ApiResult};
use super::object::meta;
use super::ops::Target;
use super::resource::GroupResource;
use super::server::ApiServer;

fn configs(server: &ApiServer, plural: &str) -> Vec<Value> {
    let res = GroupResource::new("admissionregistration.k8s.io", plural);
    server
        .store
        .list(&res, None, None, None, &|_| true)
        .items
        .iter()
        .map(|o| o.value.clone())
        .collect()
}

/// Outcome of one webhook call.
enum Verdict {
    Allowed(Option<Value>),
    Denied(ApiError),
}

/// The write a webhook is asked about.
#[derive(Debug, Clone, Copy)]
pub struct ReviewedWrite<'a> {
    /// Create, update or delete.
    pub op: Operation,
    /// The resource (and subresource) written.
    pub target: &'a Target,
    /// The object's name.
    pub name: &'a str,
    /// The object as it would be stored (`None` for deletes).
    pub object: Option<&'a Value>,
    /// The object as it is stored now (`None` for creates).
    pub old: Option<&'a Value>,
    /// `?dryRun=All`.
    pub dry_run: bool,
}

/// Build the AdmissionReview request (pure).
pub fn review_request(uid: &str, write: &ReviewedWrite<'_>) -> Value {
    let ReviewedWrite {
        op,
        target: t,
        name,
        object,
        old,
        dry_run,
    } = *write;
    let info = &t.info;
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": info.group, "version": t.version, "kind": info.kind},
            "resource": {"group": info.group, "version": t.version, "resource": info.plural},
            "subResource": t.subresource.clone().unwrap_or_default(),
            "requestKind": {"group": info.group, "version": t.version, "kind": info.kind},
            "requestResource": {"group": info.group, "version": t.version, "resource": info.plural},
            "name": name,
            "namespace": if info.namespaced { t.namespace.clone().unwrap_or_default() } else { String::new() },
            "operation": op.as_str(),
            "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object.cloned().unwrap_or(Value::Null),
            "oldObject": old.cloned().unwrap_or(Value::Null),
            "dryRun": dry_run,
            "options": Value::Null,
        }
    })
}

/// Why a webhook gave no verdict: subject to its failurePolicy, and named in the API server's
/// 500 when the policy is Fail.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The call itself failed (clientConfig, connection, timeout).
    #[error(transparent)]
    Call(#[from] client::CallError),
    /// The AdmissionReview has no `response`.
    #[error("response is missing")]
    NoResponse,
    /// `response.uid` is not the request's.
    #[error("expected response.uid {0:?}")]
    WrongUid(String),
    /// A `patchType` other than JSONPatch.
    #[error("unsupported patchType {0:?}")]
    PatchType(String),
    /// `patch` is not base64.
    #[error("patch is not base64: {0}")]
    PatchBase64(#[source] base64::DecodeError),
    /// `patch` decodes to something that is not JSON.
    #[error("patch is not JSON: {0}")]
    PatchJson(#[source] serde_json::Error),
}

/// Interpret a webhook's AdmissionReview response (pure). `Ok(None)` means allowed without a patch.
fn verdict(webhook: &str, uid: &str, resp: &Value) -> Result<Verdict, WebhookError> {
    let r = resp.get("response").ok_or(WebhookError::NoResponse)?;
    if r.get("uid").and_then(Value::as_str) != Some(uid) {
        return Err(WebhookError::WrongUid(uid.to_owned()));
    }
    if !r.get("allowed").and_then(Value::as_bool).unwrap_or(false) {
        let status = r.get("status");
        let code = status
            .and_then(|s| s.get("code"))
            .and_then(Value::as_u64)
            .filter(|c| (400..600).contains(c))
            .unwrap_or(403);
        let msg = status
            .and_then(|s| s.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut e = ApiError::forbidden(format!(
            "admission webhook \"{webhook}\" denied the request: {msg}"
        ));
        e.code = code as u16;
        return Ok(Verdict::Denied(e));
    }
    let Some(patch) = r.get("patch").and_then(Value::as_str) else {
        return Ok(Verdict::Allowed(None));
    };
    if let Some(pt) = r.get("patchType").and_then(Value::as_str)
        && pt != "JSONPatch"
    {
        return Err(WebhookError::PatchType(pt.to_owned()));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .map_err(WebhookError::PatchBase64)?;
    let p: Value = serde_json::from_slice(&bytes).map_err(WebhookError::PatchJson)?;
    Ok(Verdict::Allowed(Some(p)))
}

/// The two phases of dynamic admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// MutatingWebhookConfigurations: may patch the object.
    Mutating,
    /// ValidatingWebhookConfigurations: may only allow or deny.
    Validating,
}

impl ApiServer {
    /// Run both admission phases (deletes, where nothing is validated in between); returns the
    /// object, or `Null` for deletes.
    pub async fn admit(
        &self,
        op: Operation,
        t: &Target,
        name: &str,
        object: Option<Value>,
        old: Option<Value>,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let object = self
            .admit_phase(Phase::Mutating, op, t, name, object, old.clone(), dry_run)
            .await?;
        let object = (!object.is_null()).then_some(object);
        self.admit_phase(Phase::Validating, op, t, name, object, old, dry_run)
            .await
    }

    /// Run one admission phase for a write; returns the (possibly mutated) object, or `Null`
    /// for deletes. A real server validates the object (schema, registry strategy) between the
    /// two phases, so validating webhooks only see objects that passed validation.
    #[allow(clippy::too_many_arguments)]
    pub async fn admit_phase(
        &self,
        phase: Phase,
        op: Operation,
        t: &Target,
        name: &str,
        object: Option<Value>,
        old: Option<Value>,
        dry_run: bool,
    ) -> ApiResult<Value> {
        if t.info.group == "admissionregistration.k8s.io" {
            return Ok(object.unwrap_or(Value::Null));
        }
        let sub = t.subresource.clone().unwrap_or_default();
        let attrs = RequestAttributes {
            operation: op,
            group: &t.info.group,
            version: &t.version,
            resource: &t.info.plural,
            subresource: &sub,
            namespaced: t.info.namespaced,
        };
        let ns_labels = if t.info.namespaced {
            self.store
                .get(&GroupResource::new("", "namespaces"), "", t.ns())
                .and_then(|n| meta(&n.value).get("labels").cloned())
        } else {
            None
        };
        let mut object = object;
        let plural = match phase {
            Phase::Mutating => "mutatingwebhookconfigurations",
            Phase::Validating => "validatingwebhookconfigurations",
        };
        let mutating = phase == Phase::Mutating;
        {
            let mut cfgs = configs(self, plural);
            cfgs.sort_by(|a, b| {
                meta(a)
                    .get("name")
                    .map(Value::to_string)
                    .cmp(&meta(b).get("name").map(Value::to_string))
            });
            for cfg in &cfgs {
                for wh in cfg
                    .get("webhooks")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let labels =
                        [object.as_ref(), old.as_ref()].map(|o| o.and_then(|o| meta(o).get("labels")));
                    let present: Vec<Option<&Value>> = [object.as_ref(), old.as_ref()]
                        .iter()
                        .zip(labels)
                        .filter(|(o, _)| o.is_some())
                        .map(|(_, l)| l)
                        .collect();
                    let matches = webhook_matches(wh, &attrs, ns_labels.as_ref(), &present)
                        .map_err(|e| ApiError::internal(format!("webhook selector: {e}")))?;
                    if !matches {
                        continue;
                    }
                    let wh_name = wh.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                    let fail_open = wh.get("failurePolicy").and_then(Value::as_str) == Some("Ignore");
                    let write = ReviewedWrite {
                        op,
                        target: t,
                        name,
                        object: object.as_ref(),
                        old: old.as_ref(),
                        dry_run,
                    };
                    match self.call_webhook(wh, &wh_name, &write).await {
                        Ok(Verdict::Allowed(Some(patch))) if mutating => {
                            let Some(obj) = object.as_mut() else { continue };
                            let p: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
                                ApiError::internal(format!(
                                    "webhook \"{wh_name}\" returned an invalid JSONPatch: {e}"
                                ))
                            })?;
                            let mut patched = obj.clone();
                            json_patch::patch(&mut patched, &p).map_err(|e| {
                                ApiError::internal(format!(
                                    "webhook \"{wh_name}\" returned a patch that does not apply: {e}"
                                ))
                            })?;
                            *obj = patched;
                        }
                        Ok(Verdict::Allowed(_)) => {}
                        Ok(Verdict::Denied(e)) => return Err(e),
                        Err(e) if fail_open => {
                            tracing::warn!(webhook = %wh_name, error = %e, "webhook failed, failurePolicy Ignore");
                        }
                        Err(e) => {
                            return Err(ApiError::internal(format!(
                                "Internal error occurred: failed calling webhook \"{wh_name}\": {e}"
                            )));
                        }
                    }
                }
            }
        }
        Ok(object.unwrap_or(Value::Null))
    }

    async fn call_webhook(
        &self,
        wh: &Value,
        wh_name: &str,
        write: &ReviewedWrite<'_>,
    ) -> Result<Verdict, WebhookError> {
        let cc = wh.get("clientConfig").cloned().unwrap_or(Value::Null);
        let endpoint = client::resolve(&cc, &self.services())?;
        let timeout = wh
            .get("timeoutSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(10)
            .clamp(1, 30);
        let uid = uuid::Uuid::new_v4().to_string();
        let review = review_request(&uid, write);
        let ca = cc.get("caBundle").and_then(Value::as_str);
        let resp = client::call(&endpoint, ca, &review, Duration::from_secs(timeout)).await?;
        verdict(wh_name, &uid, &resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let patch =
            base64::engine::general_purpose::STANDARD.encode(br#"[{"op":"add","path":"/x","value":1}]"#);
        let ok = json!({"response": {"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": patch}});
        assert!(matches!(verdict("w", "u", &ok), Ok(Verdict::Allowed(Some(_)))));
        let denied =
            json!({"response": {"uid": "u", "allowed": false, "status": {"code": 422, "message": "no"}}});
        match verdict("w", "u", &denied) {
            Ok(Verdict::Denied(e)) => assert_eq!((e.code, e.message.contains("no")), (422, true)),
            _ => panic!("expected denial"),
        }
        assert_eq!(
            verdict("w", "other", &ok).err().map(|e| e.to_string()),
            Some(r#"expected response.uid "other""#.to_owned())
        );
        assert!(matches!(
            verdict("w", "u", &json!({})),
            Err(WebhookError::NoResponse)
        ));
        let not_base64 = json!({"response": {"uid": "u", "allowed": true, "patch": "%%"}});
        assert!(matches!(
            verdict("w", "u", &not_base64),
            Err(WebhookError::PatchBase64(_))
        ));
    }
}
