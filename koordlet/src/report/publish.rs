//! The reporting edge: the NodeMetric's `/status`, applied as field manager [`FIELD_MANAGER`].
//!
//! koordlet owns the whole status and nothing else (koord-manager owns the spec). Each report
//! applies the complete status; what it no longer carries (a prediction that is gone) is
//! removed by the server, or by the removal that follows the apply when an earlier writer's
//! merge patch also owns it (see [`koord_runtime::apply`]).

use koord_api::{NodeMetric, NodeMetricStatus};
use koord_runtime::{ApplyConflict, Endpoint};
use kube::{Api, Client, Resource};

/// koordlet's field manager, on every object it writes.
pub const FIELD_MANAGER: &str = "koordlet";

/// Why a report did not land.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The NodeMetric does not exist yet (koord-manager creates it): nothing to apply to.
    #[error("NodeMetric {0} does not exist yet")]
    Missing(String),
    /// Any other API error.
    #[error("applying NodeMetric {name} status: {source}")]
    Api {
        /// The NodeMetric.
        name: String,
        /// The error.
        source: kube::Error,
    },
}

/// Applies `status` to the NodeMetric named `node`. Returns the conflict the apply met (the
/// fields another manager had changed, taken back), for the caller to count.
pub async fn publish(
    client: &Client,
    node: &str,
    status: &NodeMetricStatus,
) -> Result<Option<ApplyConflict>, PublishError> {
    let api: Api<NodeMetric> = Api::all(client.clone());
    let body = serde_json::json!({
        "apiVersion": NodeMetric::api_version(&()),
        "kind": NodeMetric::kind(&()),
        "metadata": { "name": node },
        "status": status,
    });
    match koord_runtime::apply(&api, FIELD_MANAGER, Endpoint::Status, node, &body, &[&["status"]]).await {
        Ok(applied) => Ok(applied.conflict),
        Err(kube::Error::Api(e)) if e.code == 404 => Err(PublishError::Missing(node.to_string())),
        Err(source) => Err(PublishError::Api {
            name: node.to_string(),
            source,
        }),
    }
}
