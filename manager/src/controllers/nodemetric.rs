//! nodemetric: one NodeMetric per Node carrying the metric collect policy; the status belongs
//! to koordlet and is never written here.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use koord_api::{NodeMetric, config::EffectiveNodeConfig, nodemetric::NodeMetricSpec};
use kube::runtime::controller::Action;

use super::{Context, Error, node_child::NodeChild};
use crate::{config_state::ConfigState, desired};

/// Controller name, in metrics and logs.
pub const NAME: &str = "nodemetric";

impl NodeChild for NodeMetric {
    type Spec = NodeMetricSpec;
    const CONTROLLER: &'static str = NAME;

    fn spec(&self) -> &NodeMetricSpec {
        &self.spec
    }

    fn desired(
        state: &ConfigState,
        effective: &EffectiveNodeConfig,
        current: Option<&NodeMetricSpec>,
    ) -> NodeMetricSpec {
        desired::node_metric_spec(state, effective, current)
    }
}

/// Creates the node's NodeMetric or patches its spec when the collect policy differs.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    super::node_child::reconcile::<NodeMetric>(node, ctx).await
}
