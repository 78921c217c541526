//! nodeslo: one NodeSLO per Node, named after it, owned by it, built from the ConfigMap.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use koord_api::{NodeSLO, NodeSLOSpec, config::EffectiveNodeConfig};
use kube::runtime::controller::Action;

use super::{Context, Error, node_child::NodeChild};
use crate::{config_state::ConfigState, desired};

/// Controller name, in metrics and logs.
pub const NAME: &str = "nodeslo";

impl NodeChild for NodeSLO {
    type Spec = NodeSLOSpec;
    const CONTROLLER: &'static str = NAME;

    fn spec(&self) -> &NodeSLOSpec {
        &self.spec
    }

    fn desired(
        state: &ConfigState,
        effective: &EffectiveNodeConfig,
        current: Option<&NodeSLOSpec>,
    ) -> NodeSLOSpec {
        desired::node_slo_spec(state, effective, current)
    }
}

/// Creates the node's NodeSLO or patches it when the desired spec differs.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    super::node_child::reconcile::<NodeSLO>(node, ctx).await
}
