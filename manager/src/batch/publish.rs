//! From a calculation outcome to what the Node carries: batch-cpu scaled by the node's CPU
//! normalization ratio, capacity = allocatable, minus third-party allocations, plus the
//! `originExtendedAllocatable` annotation.

use std::collections::BTreeMap;

use koord_api::cpu_normalization::NormalizationRatio;
use koord_api::names::{RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY};

use super::{Amounts, BatchOutcome};

/// The batch resources a Node should carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchStatus {
    /// Value for both `status.capacity` and `status.allocatable`; `None` removes the resources.
    pub published: Option<Amounts>,
    /// Batch allocatable before third-party allocations (0 when removed), for the
    /// `node.koordinator.sh/originExtendedAllocatable` annotation.
    pub origin: Amounts,
    /// The CPU normalization ratio batch-cpu was multiplied by (1 when it does not scale).
    pub cpu_normalization: NormalizationRatio,
}

/// Multiplies batch-cpu by the node's CPU normalization ratio (truncating, as upstream), then
/// subtracts the batch share of third-party allocations (e.g. YARN).
pub fn publish(outcome: &BatchOutcome, third_party_batch: Amounts, ratio: NormalizationRatio) -> BatchStatus {
    match outcome.amounts() {
        None => BatchStatus {
            published: None,
            origin: Amounts::ZERO,
            cpu_normalization: ratio,
        },
        Some(amounts) => {
            let amounts = amounts.floor_zero();
            let origin = Amounts::new(ratio.amplify_milli(amounts.cpu), amounts.memory);
            BatchStatus {
                published: Some(origin.minus(third_party_batch).floor_zero()),
                origin,
                cpu_normalization: ratio,
            }
        }
    }
}

impl BatchStatus {
    /// The `originExtendedAllocatable` annotation value, upstream's JSON shape.
    pub fn origin_annotation(&self) -> String {
        let resources: BTreeMap<&str, String> = [
            (RESOURCE_BATCH_CPU, self.origin.cpu.to_string()),
            (RESOURCE_BATCH_MEMORY, self.origin.memory.to_string()),
        ]
        .into_iter()
        .collect();
        serde_json::json!({ "resources": resources }).to_string()
    }
}
