//! nodeslo: one NodeSLO per Node, named after it, owned by it, built from the ConfigMap.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use koord_api::NodeSLO;
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
    runtime::controller::Action,
};

use super::{Context, Error, name_of, node_owner};
use crate::desired;

/// Controller name, in metrics and logs.
pub const NAME: &str = "nodeslo";

/// Creates the node's NodeSLO or updates it when the desired spec differs.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_started(NAME);
    let state = ctx.config();
    if !state.is_loaded() || !ctx.leadership.is_leader() {
        // Reconciled again when the config loads or this replica becomes the leader.
        return Ok(Action::await_change());
    }
    let name = name_of(&node)?;
    let api: Api<NodeSLO> = Api::all(ctx.client.clone());
    let current = api.get_opt(&name).await?;
    let effective = desired::effective(&state, &node);
    let spec = desired::node_slo_spec(&state, &effective, current.as_ref().map(|c| &c.spec));
    match current {
        None => {
            let object = NodeSLO {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    owner_references: node_owner(&node).map(|owner| vec![owner]),
                    ..ObjectMeta::default()
                },
                spec,
                status: None,
            };
            api.create(&PostParams::default(), &object).await?;
            tracing::info!(node = %name, "NodeSLO created");
        }
        Some(mut current) => {
            let owners = current.metadata.owner_references.get_or_insert_with(Vec::new);
            let adopt = owners.is_empty() && node_owner(&node).is_some();
            if adopt && let Some(owner) = node_owner(&node) {
                owners.push(owner);
            }
            if current.spec != spec || adopt {
                current.spec = spec;
                api.replace(&name, &PostParams::default(), &current).await?;
                tracing::info!(node = %name, "NodeSLO updated");
            }
        }
    }
    Ok(Action::await_change())
}
