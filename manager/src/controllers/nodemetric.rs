//! nodemetric: one NodeMetric per Node carrying the metric collect policy; the status belongs
//! to koordlet and is never written here.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use koord_api::NodeMetric;
use kube::{
    Api,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
    runtime::controller::Action,
};

use super::{Context, Error, name_of, node_owner};
use crate::desired;

/// Controller name, in metrics and logs.
pub const NAME: &str = "nodemetric";

/// Creates the node's NodeMetric or patches its spec when the collect policy differs.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_started(NAME);
    let state = ctx.config();
    if !state.is_loaded() || !ctx.leadership.is_leader() {
        return Ok(Action::await_change());
    }
    let name = name_of(&node)?;
    let api: Api<NodeMetric> = Api::all(ctx.client.clone());
    let current = api.get_opt(&name).await?;
    let effective = desired::effective(&state, &node);
    let spec = desired::node_metric_spec(&state, &effective, current.as_ref().map(|c| &c.spec));
    match current {
        None => {
            let object = NodeMetric {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    owner_references: node_owner(&node).map(|owner| vec![owner]),
                    ..ObjectMeta::default()
                },
                spec,
                status: None,
            };
            api.create(&PostParams::default(), &object).await?;
            tracing::info!(node = %name, "NodeMetric created");
        }
        Some(current) => {
            let mut patch = serde_json::Map::new();
            if current.spec != spec {
                patch.insert("spec".to_owned(), serde_json::to_value(&spec).unwrap_or_default());
            }
            let unowned = current
                .metadata
                .owner_references
                .as_ref()
                .is_none_or(Vec::is_empty);
            if unowned && let Some(owner) = node_owner(&node) {
                patch.insert(
                    "metadata".to_owned(),
                    serde_json::json!({ "ownerReferences": [owner] }),
                );
            }
            if !patch.is_empty() {
                // A merge patch leaves the status (koordlet's) alone.
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::Value::Object(patch)),
                )
                .await?;
                tracing::info!(node = %name, "NodeMetric spec updated");
            }
        }
    }
    Ok(Action::await_change())
}
