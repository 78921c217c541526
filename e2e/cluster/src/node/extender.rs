//! Scheduler extenders, consulted the way kube-scheduler does for the pods of a profile: the
//! nodes a pod fits on are sent to the extender's `filter` verb (`nodeCacheCapable`: names
//! only), the survivors to `prioritize`, and the pod goes to the node with the highest
//! extender score (ties: the fleet's own order, most CPU left first). kube-scheduler adds the
//! extender's score × 10 × weight to its plugins' scores; with the chart's weight the extender
//! decides, which is what the fleet models.

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::apiserver::admission::client::{CallError, Endpoint, call};

/// One extender and the scheduler name whose pods it is consulted for.
#[derive(Debug, Clone)]
pub struct SchedulerExtender {
    /// Pods with this `schedulerName` are placed through the extender.
    pub scheduler_name: String,
    /// `urlPrefix`, e.g. `https://127.0.0.1:9443`; the verbs are appended with a `/`.
    pub url_prefix: String,
    /// The TLS server name the extender's certificate must carry.
    pub server_name: String,
    /// PEM CA the certificate is verified against (`tlsConfig.caData`).
    pub ca_pem: Vec<u8>,
    /// `httpTimeout` of one call.
    pub timeout: Duration,
}

impl SchedulerExtender {
    async fn post(&self, verb: &str, body: &Value) -> Result<Value, CallError> {
        let endpoint = Endpoint {
            url: format!("{}/{verb}", self.url_prefix.trim_end_matches('/')),
            server_name: self.server_name.clone(),
        };
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        call(&endpoint, Some(&ca), body, self.timeout).await
    }

    /// Filter, then prioritize, `candidates` (best first by the fleet's own ranking) for `pod`.
    /// `Ok(None)`: the extender filtered every node out (the pod stays Pending).
    pub async fn place(&self, pod: &Pod, candidates: &[String]) -> Result<Option<String>, CallError> {
        if candidates.is_empty() {
            return Ok(None);
        }
        let filtered = self
            .post("filter", &json!({"Pod": pod, "NodeNames": candidates}))
            .await?;
        if let Some(error) = filtered["Error"].as_str().filter(|e| !e.is_empty()) {
            return Err(CallError::BadResponse(format!("filter error: {error}")));
        }
        let passed: Vec<String> = filtered["NodeNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|name| name.as_str().map(str::to_owned))
            .collect();
        for (node, why) in filtered["FailedNodes"]
            .as_object()
            .into_iter()
            .chain(filtered["FailedAndUnresolvableNodes"].as_object())
            .flatten()
        {
            tracing::debug!(%node, reason = %why, "extender filtered the node out");
        }
        if passed.is_empty() {
            return Ok(None);
        }
        let priorities = self
            .post("prioritize", &json!({"Pod": pod, "NodeNames": passed}))
            .await?;
        let score_of = |node: &str| {
            priorities
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["Host"] == node)
                .and_then(|p| p["Score"].as_i64())
                .unwrap_or(0)
        };
        // `passed` keeps the candidates' order; max_by_key keeps the last of equals, so walk it
        // reversed to let the earlier (better by the fleet's ranking) node win ties.
        Ok(passed.iter().rev().max_by_key(|node| score_of(node)).cloned())
    }
}
