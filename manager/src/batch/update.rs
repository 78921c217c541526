//! Whether a new batch value is worth a Node write.
//!
//! Thousands of nodes recomputed every minute must not become thousands of writes: a value is
//! written when a resource appears or disappears, when it moved by more than
//! `resourceDiffThreshold` (relative), or, for a smaller move, once `updateTimeThresholdSeconds`
//! have passed since this process last wrote the node. Identical values are never written.

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::{Amounts, BatchStrategy, Resource};

/// The batch entries a Node currently carries in one resource list (`None` = absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublishedValues {
    /// `kubernetes.io/batch-cpu`, milli-cores.
    pub cpu: Option<i64>,
    /// `kubernetes.io/batch-memory`, bytes.
    pub memory: Option<i64>,
}

impl PublishedValues {
    /// The entries a desired value produces.
    pub fn from_desired(desired: Option<Amounts>) -> Self {
        PublishedValues {
            cpu: desired.map(|a| a.cpu),
            memory: desired.map(|a| a.memory),
        }
    }

    fn get(self, resource: Resource) -> Option<i64> {
        match resource {
            Resource::Cpu => self.cpu,
            Resource::Memory => self.memory,
        }
    }
}

/// Why a write happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum UpdateReason {
    /// A batch resource appears or disappears.
    Presence {
        /// The resource.
        resource: &'static str,
    },
    /// A value moved by more than `resourceDiffThreshold`.
    Changed {
        /// The resource.
        resource: &'static str,
        /// The value on the Node.
        old: i64,
        /// The value computed.
        new: i64,
    },
    /// A smaller move, and this process has not written the node yet.
    FirstSync,
    /// A smaller move, and the last write is older than `updateTimeThresholdSeconds`.
    Refresh,
    /// The node's CPU normalization ratio changed: batch-cpu follows it at once.
    NormalizationRatio,
}

/// The update decision for one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateDecision {
    /// The Node already carries exactly the desired values.
    Unchanged,
    /// Write the desired values.
    Write(UpdateReason),
    /// A small move; written later when `updateTimeThresholdSeconds` have passed.
    Postpone,
}

/// Compares the Node's `capacity` and `allocatable` batch entries with the desired value.
pub fn decide_update(
    capacity: PublishedValues,
    allocatable: PublishedValues,
    desired: Option<Amounts>,
    last_write: Option<Timestamp>,
    now: Timestamp,
    strategy: &BatchStrategy,
) -> UpdateDecision {
    let desired = PublishedValues::from_desired(desired);
    if capacity == desired && allocatable == desired {
        return UpdateDecision::Unchanged;
    }
    match significant_change(
        &[allocatable, capacity],
        desired,
        strategy.resource_diff_threshold,
    ) {
        Some(reason) => UpdateDecision::Write(reason),
        None => after_small_moves(last_write, now, strategy),
    }
}

/// The first entry of `lists` that appears, disappears, or moved by more than `threshold`
/// (relative to its current value) toward `desired`.
pub(crate) fn significant_change(
    lists: &[PublishedValues],
    desired: PublishedValues,
    threshold: f64,
) -> Option<UpdateReason> {
    for current in lists {
        for resource in Resource::BOTH {
            match (current.get(resource), desired.get(resource)) {
                (Some(old), Some(new)) if old != new => {
                    let delta = (i128::from(new) - i128::from(old)).abs() as f64;
                    if delta > (old as f64).abs() * threshold {
                        let resource = resource.batch_name();
                        return Some(UpdateReason::Changed { resource, old, new });
                    }
                }
                (Some(_), None) | (None, Some(_)) => {
                    return Some(UpdateReason::Presence {
                        resource: resource.batch_name(),
                    });
                }
                _ => {}
            }
        }
    }
    None
}

/// When only moves within the threshold are left: written on this process's first sync of the
/// object and once `updateTimeThresholdSeconds` have passed since its last write.
pub(crate) fn after_small_moves(
    last_write: Option<Timestamp>,
    now: Timestamp,
    strategy: &BatchStrategy,
) -> UpdateDecision {
    match last_write {
        None => UpdateDecision::Write(UpdateReason::FirstSync),
        Some(last) => {
            let refresh_after = SignedDuration::from_secs(strategy.update_time_threshold_seconds.max(0));
            if now.duration_since(last) >= refresh_after {
                UpdateDecision::Write(UpdateReason::Refresh)
            } else {
                UpdateDecision::Postpone
            }
        }
    }
}
