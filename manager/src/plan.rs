//! One node's batch decision, shared by the noderesource controller and `koord-manager calc`.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use koord_api::config::{ConfigKey, EffectiveNodeConfig};

use crate::{
    batch::{self, BatchOutcome, BatchStatus, BatchStrategy, PodFacts, UsageReport},
    config_state::ConfigState,
    snapshot::{self, FieldError},
};

/// The batch decision for one node.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeBatchPlan {
    /// `colocation-config` has had no good value since start: the node is left as it is.
    Untouched,
    /// A decision.
    Decided {
        /// The node's strategy numbers.
        strategy: BatchStrategy,
        /// Disabled, degraded, or the computed amounts with their explanation.
        outcome: Box<BatchOutcome>,
        /// What the Node should carry.
        status: BatchStatus,
    },
}

/// Decides batch resources for `node` from its pods (already converted) and its NodeMetric.
pub fn plan_node_batch(
    state: &ConfigState,
    effective: &EffectiveNodeConfig,
    node: &Node,
    pods: &[PodFacts],
    report: Option<&UsageReport>,
    now: Timestamp,
) -> Result<NodeBatchPlan, FieldError> {
    if !state.is_known(ConfigKey::Colocation) {
        return Ok(NodeBatchPlan::Untouched);
    }
    let strategy = snapshot::batch_strategy(&effective.colocation);
    let facts = snapshot::node_facts(node)?;
    let outcome = batch::calculate(&facts, pods, report, &strategy, now);
    let status = batch::publish(&outcome, facts.third_party_batch);
    Ok(NodeBatchPlan::Decided {
        strategy,
        outcome: Box::new(outcome),
        status,
    })
}
