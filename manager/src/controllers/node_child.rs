//! The shared reconcile of nodeslo and nodemetric: one object per Node, named after it, owned
//! by it, whose spec is a pure function of the config and the Node.
//!
//! Both write only the difference, as a JSON merge patch: fields the desired spec no longer
//! has are removed (explicit `null`s), everything else of the object — the status koordlet
//! writes, fields of newer API versions — is left alone, and no resourceVersion conflict
//! arises with concurrent status updates.

use std::sync::Arc;

use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use koord_api::config::EffectiveNodeConfig;
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::controller::Action,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value, json};

use super::{Context, Error, name_of, node_owner};
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

    /// A new object without status.
    fn new(metadata: ObjectMeta, spec: Self::Spec) -> Self;

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
    let kind = K::kind(&());
    let Some(current) = current else {
        let metadata = ObjectMeta {
            name: Some(name.clone()),
            owner_references: owner.map(|owner| vec![owner]),
            ..ObjectMeta::default()
        };
        api.create(&PostParams::default(), &K::new(metadata, spec))
            .await?;
        tracing::info!(node = %name, "{kind} created");
        return Ok(Action::await_change());
    };
    let mut patch = Map::new();
    if current.spec() != &spec {
        let from = serde_json::to_value(current.spec()).unwrap_or(Value::Null);
        let to = serde_json::to_value(&spec).unwrap_or(Value::Null);
        patch.insert("spec".to_owned(), merge_diff(&from, &to));
    }
    if current.owner_references().is_empty()
        && let Some(owner) = owner
    {
        patch.insert("metadata".to_owned(), json!({ "ownerReferences": [owner] }));
    }
    if !patch.is_empty() {
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(Value::Object(patch)),
        )
        .await?;
        tracing::info!(node = %name, "{kind} updated");
    }
    Ok(Action::await_change())
}

/// The JSON merge patch (RFC 7386) that turns `from` into `to`: changed and new members,
/// `null` for members `to` lacks. Arrays and scalars are replaced whole.
pub fn merge_diff(from: &Value, to: &Value) -> Value {
    let (Value::Object(from), Value::Object(to)) = (from, to) else {
        return to.clone();
    };
    let mut patch = Map::new();
    for (key, old) in from {
        match to.get(key) {
            None => {
                patch.insert(key.clone(), Value::Null);
            }
            Some(new) if new != old => {
                patch.insert(key.clone(), merge_diff(old, new));
            }
            Some(_) => {}
        }
    }
    for (key, new) in to {
        if !from.contains_key(key) {
            patch.insert(key.clone(), new.clone());
        }
    }
    Value::Object(patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(target: &mut Value, patch: &Value) {
        json_merge(target, patch);
    }

    /// RFC 7386 application, to check the diff round-trips.
    fn json_merge(target: &mut Value, patch: &Value) {
        let Value::Object(patch) = patch else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = Value::Object(Map::new());
        }
        if let Value::Object(target) = target {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    json_merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
    }

    #[test]
    fn merge_diff_removes_sets_and_keeps() {
        let from = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2], "f": "same"});
        let to = json!({"b": {"c": 2, "d": 4, "g": true}, "e": [1], "f": "same", "h": null});
        let patch = merge_diff(&from, &to);
        assert_eq!(
            patch,
            json!({"a": null, "b": {"d": 4, "g": true}, "e": [1], "h": null})
        );
        let mut applied = from.clone();
        apply(&mut applied, &patch);
        assert_eq!(
            applied,
            json!({"b": {"c": 2, "d": 4, "g": true}, "e": [1], "f": "same"})
        );
    }

    #[test]
    fn merge_diff_of_equal_values_is_empty() {
        let value = json!({"a": {"b": [1, 2]}});
        assert_eq!(merge_diff(&value, &value), json!({}));
    }
}
