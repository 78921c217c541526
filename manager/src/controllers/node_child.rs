//! The shared reconcile of nodeslo and nodemetric: one object per Node, named after it, owned
//! by it, whose spec is a pure function of the config and the Node.
//!
//! Both write with server-side apply as [`FIELD_MANAGER`]: the whole desired spec and the
//! ownerReference to the Node, nothing else. The status koordlet writes, and fields of newer
//! API versions, belong to other managers and are left alone; a spec field the desired spec no
//! longer has is removed by the server, or, when an older writer also owns it (a merge patch or
//! the create of an earlier version), by the removal that follows the apply. Nothing is sent
//! while the object already holds the desired spec and its ownerReference.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use koord_api::config::EffectiveNodeConfig;
use koord_runtime::Endpoint;
use kube::{Api, Resource, ResourceExt, runtime::controller::Action};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;

use super::{Context, Error, FIELD_MANAGER, apply, name_of, node_owner};
use crate::{config_state::ConfigState, desired};

/// A cluster-scoped object kept one per Node.
pub trait NodeChild:
    Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + std::fmt::Debug
    + DeserializeOwned
    + Serialize
{
    /// The part the manager owns.
    type Spec: PartialEq + Serialize;

    /// Controller name, in metrics and logs.
    const CONTROLLER: &'static str;

    /// The current spec.
    fn spec(&self) -> &Self::Spec;

    /// The desired spec, given the current one (kept where the config has no good value).
    fn desired(
        state: &ConfigState,
        effective: &EffectiveNodeConfig,
        current: Option<&Self::Spec>,
    ) -> Self::Spec;
}

/// Creates the node's child or patches what differs (spec, missing ownerReference).
pub async fn reconcile<K: NodeChild>(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_started(K::CONTROLLER);
    let result = reconcile_node::<K>(node, &ctx).await;
    // Upstream runs its controllers on the leader only: followers' skipped rounds do not count.
    if ctx.leadership.is_leader() {
        ctx.metrics
            .reconcile_finished(K::CONTROLLER, result.as_ref().err().map(Error::metric_label));
    }
    result
}

async fn reconcile_node<K: NodeChild>(node: Arc<Node>, ctx: &Arc<Context>) -> Result<Action, Error> {
    let state = ctx.config();
    if !state.is_loaded() || !ctx.leadership.is_leader() {
        // Reconciled again when the config loads or this replica becomes the leader.
        return Ok(Action::await_change());
    }
    let name = name_of(&node)?;
    let api: Api<K> = Api::all(ctx.client.clone());
    let current = api.get_opt(&name).await?;
    let effective = desired::effective(&state, &node);
    let spec = K::desired(&state, &effective, current.as_ref().map(K::spec));
    let owner = node_owner(&node);
    if let Some(current) = &current
        && current.spec() == &spec
        && (owner.is_none() || !current.owner_references().is_empty())
    {
        return Ok(Action::await_change());
    }
    let mut body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name},
        "spec": spec,
    });
    if let Some(owner) = owner {
        body["metadata"]["ownerReferences"] = json!([owner]);
    }
    let plural = K::plural(&()).into_owned();
    apply(
        ctx,
        &api,
        (FIELD_MANAGER, Endpoint::Main),
        &plural,
        &body,
        &[&["spec"]],
    )
    .await?;
    let kind = K::kind(&());
    match current {
        None => tracing::info!(node = %name, "{kind} created"),
        Some(_) => tracing::info!(node = %name, "{kind} updated"),
    }
    Ok(Action::await_change())
}
