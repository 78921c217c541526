//! Pod subresources: `binding` (what a scheduler posts) and `eviction` (PodDisruptionBudget
//! aware, 429 when a budget blocks it).

use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, Cause};
use super::object::{is_deleting, meta, meta_str, now_rfc3339};
use super::ops::{DeleteParams, Target, UpdateMode, WriteParams};
use super::patch::PatchKind;
use super::resource::GroupResource;
use super::selector::{SelectorError, label_selector_object_matches};
use super::server::ApiServer;

/// Is a pod counted as healthy by a disruption budget (Running and Ready)?
pub fn pod_healthy(pod: &Value) -> bool {
    !is_deleting(pod)
        && pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// Why a PodDisruptionBudget cannot be evaluated; an eviction it covers fails with 500.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// `minAvailable` / `maxUnavailable` is neither a count nor a percentage (as JSON).
    #[error("invalid value {0}")]
    InvalidValue(String),
    /// The budget's selector is unusable.
    #[error(transparent)]
    Selector(#[from] SelectorError),
}

fn scaled(v: &Value, expected: usize, round_up: bool) -> Result<usize, BudgetError> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| BudgetError::InvalidValue(n.to_string())),
        Value::String(s) => {
            let pct: f64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| BudgetError::InvalidValue(format!("{s:?}")))?;
            let x = pct * expected as f64 / 100.0;
            Ok(if round_up { x.ceil() } else { x.floor() } as usize)
        }
        other => Err(BudgetError::InvalidValue(other.to_string())),
    }
}

/// The budget's view of the pods it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetState {
    /// Pods the budget selects (not being deleted).
    pub expected: usize,
    /// Of those, Running and Ready.
    pub healthy: usize,
    /// Healthy pods the budget requires.
    pub desired: usize,
}

impl BudgetState {
    /// Disruptions still allowed.
    pub fn allowed(&self) -> usize {
        self.healthy.saturating_sub(self.desired)
    }
}

/// Compute a PDB's state over the pods of its namespace (pure).
pub fn budget_state(pdb: &Value, pods: &[&Value]) -> Result<BudgetState, BudgetError> {
    let selector = pdb.pointer("/spec/selector");
    let mut expected = 0;
    let mut healthy = 0;
    for pod in pods {
        if is_deleting(pod) || !label_selector_object_matches(selector, meta(pod).get("labels"))? {
            continue;
        }
        expected += 1;
        if pod_healthy(pod) {
            healthy += 1;
        }
    }
    let desired = match (
        pdb.pointer("/spec/minAvailable"),
        pdb.pointer("/spec/maxUnavailable"),
    ) {
        (Some(min), _) if !min.is_null() => scaled(min, expected, true)?,
        (_, Some(max)) if !max.is_null() => expected.saturating_sub(scaled(max, expected, true)?),
        _ => 0,
    };
    Ok(BudgetState {
        expected,
        healthy,
        desired,
    })
}

impl ApiServer {
    /// POST pods/{name}/binding.
    pub async fn bind(&self, t: &Target, body: &Value) -> ApiResult<Value> {
        let node = body
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    "Binding",
                    "",
                    t.name().unwrap_or_default(),
                    vec![Cause::required("target.name", "")],
                )
            })?
            .to_string();
        let pod = t.name()?.to_string();
        let p = WriteParams::default();
        self.write(t, &p, UpdateMode::Internal, true, PatchKind::Merge, &|cur| {
            if let Some(n) = cur
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            {
                return Err(ApiError::conflict(
                    &GroupResource::new("", "pods/binding"),
                    &pod,
                    &format!("pod {pod} is already assigned to node \"{n}\""),
                ));
            }
            let mut v = cur.clone();
            if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("nodeName".into(), json!(node));
            }
            let cond = json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()});
            if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
                let conds = status.entry("conditions").or_insert(json!([]));
                if let Some(list) = conds.as_array_mut() {
                    list.retain(|c| c["type"] != "PodScheduled");
                    list.push(cond);
                }
            }
            Ok(v)
        })
        .await?;
        Ok(success(201))
    }

    /// POST pods/{name}/eviction.
    pub async fn evict(&self, t: &Target, body: &Value) -> ApiResult<Value> {
        let name = t.name()?.to_string();
        self.eviction_api.check_body(body, &name, t.ns())?;
        let pod_t = Target {
            subresource: None,
            ..t.clone()
        };
        let pod = self.get_object(&pod_t)?;
        if is_deleting(&pod) {
            return Ok(success(201));
        }
        let ns = t.ns().to_string();
        let pdbs = self
            .store
            .list(
                &GroupResource::new("policy", "poddisruptionbudgets"),
                Some(&ns),
                None,
                None,
                &|_| true,
            )
            .items;
        let matching: Vec<_> = pdbs
            .iter()
            .filter(|p| {
                label_selector_object_matches(p.value.pointer("/spec/selector"), meta(&pod).get("labels"))
                    .unwrap_or(false)
            })
            .collect();
        if matching.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(pdb) = matching.first() {
            let pods = self
                .store
                .list(&GroupResource::new("", "pods"), Some(&ns), None, None, &|_| true)
                .items;
            let values: Vec<&Value> = pods.iter().map(|p| &p.value).collect();
            let state = budget_state(&pdb.value, &values).map_err(|e| ApiError::internal(e.to_string()))?;
            let always = pdb
                .value
                .pointer("/spec/unhealthyPodEvictionPolicy")
                .and_then(Value::as_str)
                == Some("AlwaysAllow");
            let ok = if pod_healthy(&pod) {
                state.allowed() >= 1
            } else {
                always || state.healthy >= state.desired
            };
            if !ok {
                let pdb_name = meta_str(&pdb.value, "name").unwrap_or_default();
                let msg = format!(
                    "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                    state.desired, state.healthy
                );
                return Err(ApiError::too_many_requests(
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                )
                .with_details(json!({"causes": [{"reason": "DisruptionBudget", "message": msg}]})));
            }
        }
        let opts = body.get("deleteOptions").cloned().unwrap_or(json!({}));
        self.delete(
            &Target {
                name: Some(name),
                ..pod_t
            },
            &DeleteParams::from_body(&opts, false),
        )
        .await?;
        Ok(success(201))
    }
}

/// Which `policy` versions of Eviction the `pods/eviction` subresource takes, as a real API
/// server of a given release does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EvictionApi {
    /// Kubernetes 1.22 and later: `policy/v1` (named in discovery) and `policy/v1beta1`.
    #[default]
    V1AndV1beta1,
    /// Kubernetes 1.18 to 1.21: `policy/v1beta1` only; a `policy/v1` body is a 400.
    V1beta1Only,
}

impl EvictionApi {
    /// The version the `pods/eviction` discovery entry names.
    pub fn discovery_version(self) -> &'static str {
        match self {
            EvictionApi::V1AndV1beta1 => "v1",
            EvictionApi::V1beta1Only => "v1beta1",
        }
    }

    fn serves(self, version: &str) -> bool {
        match self {
            EvictionApi::V1AndV1beta1 => matches!(version, "v1" | "v1beta1"),
            EvictionApi::V1beta1Only => version == "v1beta1",
        }
    }

    /// Rejects what a real server's decoder and eviction handler reject: a kind or version it
    /// does not serve, and a name or namespace other than the URL's. An absent `apiVersion` /
    /// `kind` takes the endpoint's, as the real decoder's defaulting does.
    fn check_body(self, body: &Value, name: &str, namespace: &str) -> ApiResult<()> {
        let kind = body.get("kind").and_then(Value::as_str).unwrap_or("Eviction");
        let api_version = body.get("apiVersion").and_then(Value::as_str);
        if let Some(av) = api_version {
            let version = av.strip_prefix("policy/").unwrap_or("");
            if !self.serves(version) || kind != "Eviction" {
                return Err(ApiError::bad_request(format!(
                    "no kind \"{kind}\" is registered for version \"{av}\" in scheme \"pkg/api/legacyscheme/scheme.go:30\""
                )));
            }
        } else if kind != "Eviction" {
            return Err(ApiError::bad_request(format!(
                "no kind \"{kind}\" is registered for the eviction subresource"
            )));
        }
        if let Some(n) = body.pointer("/metadata/name").and_then(Value::as_str)
            && n != name
        {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
        if let Some(ns) = body.pointer("/metadata/namespace").and_then(Value::as_str)
            && !ns.is_empty()
            && ns != namespace
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        Ok(())
    }
}

/// A `Status` success object.
pub fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(app: &str, ready: bool) -> Value {
        json!({"metadata": {"labels": {"app": app}}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
    }

    #[test]
    fn budget_min_available_and_max_unavailable() {
        let pods = [pod("a", true), pod("a", true), pod("a", false), pod("b", true)];
        let refs: Vec<&Value> = pods.iter().collect();
        let min = json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "minAvailable": 2}});
        assert_eq!(
            budget_state(&min, &refs).unwrap(),
            BudgetState {
                expected: 3,
                healthy: 2,
                desired: 2
            }
        );
        let max = json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "maxUnavailable": "50%"}});
        assert_eq!(budget_state(&max, &refs).unwrap().desired, 1);
        assert_eq!(budget_state(&max, &refs).unwrap().allowed(), 1);
        let bad = json!({"spec": {"minAvailable": "x%"}});
        assert_eq!(
            budget_state(&bad, &refs),
            Err(BudgetError::InvalidValue(r#""x%""#.into()))
        );
        let negative = json!({"spec": {"maxUnavailable": -1}});
        assert_eq!(
            budget_state(&negative, &refs).unwrap_err().to_string(),
            "invalid value -1"
        );
    }
}
