//! The reporting edge: one JSON merge patch of the NodeMetric's `/status`.

use koord_api::{NodeMetric, NodeMetricStatus};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

/// Why a report did not land.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The NodeMetric does not exist yet (koord-manager creates it): nothing to patch.
    #[error("NodeMetric {0} does not exist yet")]
    Missing(String),
    /// Any other API error.
    #[error("patching NodeMetric {name} status: {source}")]
    Api {
        /// The NodeMetric.
        name: String,
        /// The error.
        source: kube::Error,
    },
}

/// Writes `status` to the NodeMetric named `node` (merge patch on `/status`).
pub async fn publish(client: &Client, node: &str, status: &NodeMetricStatus) -> Result<(), PublishError> {
    let api: Api<NodeMetric> = Api::all(client.clone());
    let mut patch = serde_json::json!({ "status": status });
    // A merge patch keeps fields it does not mention: clear a prediction that is gone.
    if let Some(fields) = patch.get_mut("status").and_then(|s| s.as_object_mut()) {
        for (name, gone) in [
            ("prodReclaimableMetric", status.prod_reclaimable_metric.is_none()),
            ("prodPeakMetric", status.prod_peak_metric.is_none()),
        ] {
            if gone {
                fields.insert(name.to_string(), serde_json::Value::Null);
            }
        }
    }
    match api
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Err(PublishError::Missing(node.to_string())),
        Err(source) => Err(PublishError::Api {
            name: node.to_string(),
            source,
        }),
    }
}
