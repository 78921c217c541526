//! One node's batch decision, shared by the noderesource controller and `koord-manager calc`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use koord_api::config::{ConfigKey, EffectiveNodeConfig};
use koord_api::cpu_normalization::{self, NormalizationRatio, RatioDecision};

use crate::{
    batch::{
        self, Amounts, BatchOutcome, BatchStatus, BatchStrategy, PodFacts, TopologyZones, UsageReport,
        ZoneOutcome,
    },
    config_state::ConfigState,
    mid::{self, MidOutcome},
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
        /// CPU normalization; `None` when colocation is off for the node (the ratio annotation
        /// is then left as it is, as upstream).
        normalization: Option<Box<NormalizationPlan>>,
        /// Mid resources (`kubernetes.io/mid-cpu` / `mid-memory`).
        mid: Box<MidOutcome>,
        /// Batch resources of the NUMA zones of the node's NodeResourceTopology.
        zones: Box<ZonePlan>,
    },
}

/// The NUMA-level batch decision for one node.
#[derive(Clone, Debug, PartialEq)]
pub struct ZonePlan {
    /// Nothing to compute, disabled, degraded, or the amounts per zone.
    pub outcome: ZoneOutcome,
    /// What each zone's batch entries should say (batch-cpu after CPU normalization); empty
    /// unless amounts were computed, in which case the object is left as it is.
    pub targets: BTreeMap<String, Amounts>,
    /// Zones of the object left out of the formula, with the reason.
    pub skipped: Vec<String>,
}

/// A node's CPU normalization ratio: what its annotation should say and what batch-cpu is
/// multiplied by.
#[derive(Clone, Debug, PartialEq)]
pub struct NormalizationPlan {
    /// Off (`1.00`), a ratio, or why none could be decided.
    pub decision: RatioDecision,
    /// The `node.koordinator.sh/cpu-normalization-ratio` the Node carries now, if readable.
    pub current: Option<NormalizationRatio>,
    /// What batch-cpu is multiplied by: the decided ratio; when none could be decided, the one
    /// the Node carries (koordlet divides BE quotas by that same annotation, so the two stay
    /// consistent); else 1.
    pub applied: NormalizationRatio,
}

impl NormalizationPlan {
    /// Decides from the node-merged strategy, the node's labels and annotations, and the
    /// `cpu-basic-info` koordlet reported (its NodeResourceTopology annotation).
    pub fn decide(effective: &EffectiveNodeConfig, node: &Node, basic_info: Option<&str>) -> Self {
        let decision = cpu_normalization::decide(
            &effective.cpu_normalization,
            node.metadata.labels.as_ref(),
            basic_info,
        );
        let current = NormalizationRatio::of_node_annotations(node.metadata.annotations.as_ref())
            .ok()
            .flatten();
        let applied = decision
            .annotation()
            .or(current)
            .unwrap_or(NormalizationRatio::ONE);
        NormalizationPlan {
            decision,
            current,
            applied,
        }
    }

    /// The annotation value to write, when it differs from what the Node carries.
    pub fn annotation_update(&self) -> Option<NormalizationRatio> {
        let target = self.decision.annotation()?;
        (self.current != Some(target)).then_some(target)
    }
}

/// Decides batch resources for `node` from its pods (already converted), its NodeMetric and its
/// NodeResourceTopology's `cpu-basic-info` and zones (`None` when it has none).
#[allow(clippy::too_many_arguments)] // the node's inputs, one each; a struct would only rename them
pub fn plan_node_batch(
    state: &ConfigState,
    effective: &EffectiveNodeConfig,
    node: &Node,
    pods: &[PodFacts],
    report: Option<&UsageReport>,
    basic_info: Option<&str>,
    topology: Option<&TopologyZones>,
    now: Timestamp,
) -> Result<NodeBatchPlan, FieldError> {
    if !state.is_known(ConfigKey::Colocation) {
        return Ok(NodeBatchPlan::Untouched);
    }
    let strategy = snapshot::batch_strategy(&effective.colocation);
    let facts = snapshot::node_facts(node)?;
    let outcome = batch::calculate(&facts, pods, report, &strategy, now);
    let normalization = (outcome != BatchOutcome::Disabled)
        .then(|| Box::new(NormalizationPlan::decide(effective, node, basic_info)));
    let ratio = normalization
        .as_ref()
        .map_or(NormalizationRatio::ONE, |n| n.applied);
    let status = batch::publish(&outcome, facts.third_party_batch, ratio);
    let mid = mid::calculate(
        &facts,
        pods,
        report,
        &mid::mid_strategy(&effective.colocation, strategy.degrade_time_minutes),
        now,
    );
    let zone_outcome = batch::calculate_zones(
        &facts,
        topology.map(|t| t.zones.as_slice()).unwrap_or(&[]),
        pods,
        report,
        &strategy,
        now,
    );
    let targets = match &zone_outcome {
        ZoneOutcome::Allocatable { zones, .. } => batch::zone_targets(zones, ratio),
        ZoneOutcome::NoZones | ZoneOutcome::Disabled | ZoneOutcome::Degraded(_) => BTreeMap::new(),
    };
    let zones = ZonePlan {
        outcome: zone_outcome,
        targets,
        skipped: topology.map(|t| t.skipped.clone()).unwrap_or_default(),
    };
    Ok(NodeBatchPlan::Decided {
        strategy,
        outcome: Box::new(outcome),
        status,
        normalization,
        mid: Box::new(mid),
        zones: Box::new(zones),
    })
}
