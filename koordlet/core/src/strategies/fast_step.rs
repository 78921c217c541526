//! What the fast suppress loop writes for a tick: the pure step between its decision
//! ([`FastAction`], and the [`SettleStep`] that may follow it) and the writes it applies.
//!
//! The loop observes (counters, the besteffort quota and cpuset size), lets
//! [`FastSuppress::tick`](super::fast_suppress::FastSuppress::tick) decide, turns the action into
//! a [`FastWrite`] here and acts on it: the besteffort quota alone, or a full suppress plan
//! ([`FastSuppress::full_plan`](super::fast_suppress::FastSuppress::full_plan)) that settles a
//! mode when it goes through. After a tick that wrote nothing, [`Settle`](super::settle::Settle)
//! may ask for one more plan, whose write is [`SettleStep::write`].

use super::fast_suppress::{CpusetSize, FastAction};
use super::settle::{SettleStep, SuppressMode};
use crate::CgroupResource;
use crate::write::CgroupWrite;

/// Which way a write moves BE's CPU: the `direction` label of the loop's writes metric and of
/// its log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// More CPU for BE.
    Increase,
    /// Less CPU for BE.
    Decrease,
    /// Back to what BE has without suppress (unlimited quota, the full BE cpuset).
    Restore,
}

impl Direction {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Increase => "increase",
            Direction::Decrease => "decrease",
            Direction::Restore => "restore",
        }
    }
}

/// How a tick reports a full plan that went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanReport {
    /// As the BE cpuset size written.
    Cpuset,
    /// As the quota set back to unlimited (suppress turned off).
    QuotaRestored,
    /// Not at all: the settling of the resource the policy does not drive is no tick's write.
    Silent,
}

/// A full suppress plan to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanWrite {
    /// Decide with the NodeSLO's strategy (`false`: as if suppress were off, i.e. restore).
    pub with_strategy: bool,
    /// Apply only the plan's cpuset writes (the quota stays the fast path's).
    pub cpusets_only: bool,
    /// Which way it moves BE's CPU.
    pub direction: Direction,
    /// The mode settled once the plan went through.
    pub settles: SuppressMode,
    /// How the tick reports it.
    pub report: PlanReport,
}

impl PlanWrite {
    /// Whether the plan's `write` is applied.
    pub fn keeps(&self, write: &CgroupWrite) -> bool {
        !self.cpusets_only || write.resource != CgroupResource::CpuCfsQuota
    }
}

/// What the loop writes for one decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastWrite {
    /// The besteffort CFS quota alone (µs per 100 ms; −1 unlimited).
    Quota {
        /// The value.
        quota_us: i64,
        /// Which way it moves BE's CPU.
        direction: Direction,
    },
    /// A full suppress plan.
    Plan(PlanWrite),
}

/// The write for the tick's `action`, given the besteffort quota now (`None`: unknown), the
/// besteffort cpuset size (policy `cpuset` only) and whether the QoS round has published the
/// BE tree (`has_scope`). `None`: nothing to write.
pub fn fast_write(
    action: &FastAction,
    current_quota_us: Option<i64>,
    cpus: Option<CpusetSize>,
    has_scope: bool,
) -> Option<FastWrite> {
    match *action {
        FastAction::Idle => None,
        FastAction::SetQuota { quota_us, .. } => {
            let increase = current_quota_us.is_some_and(|c| c >= 0 && quota_us > c);
            Some(FastWrite::Quota {
                quota_us,
                direction: if increase {
                    Direction::Increase
                } else {
                    Direction::Decrease
                },
            })
        }
        // With the BE tree known, both resources go back (quota and cpusets) in one plan.
        FastAction::Restore if has_scope => Some(FastWrite::Plan(PlanWrite {
            with_strategy: false,
            cpusets_only: false,
            direction: Direction::Restore,
            settles: SuppressMode::Off,
            report: PlanReport::QuotaRestored,
        })),
        FastAction::Restore => Some(FastWrite::Quota {
            quota_us: -1,
            direction: Direction::Restore,
        }),
        FastAction::ResizeCpuset { wanted_cpus, .. } => {
            let size = cpus?;
            let direction = if wanted_cpus.min(size.available) > size.current {
                Direction::Increase
            } else {
                Direction::Decrease
            };
            Some(FastWrite::Plan(PlanWrite {
                with_strategy: true,
                cpusets_only: false,
                direction,
                settles: SuppressMode::Cpuset,
                report: PlanReport::Cpuset,
            }))
        }
    }
}

impl SettleStep {
    /// The plan that settles this step's mode.
    pub fn write(self) -> PlanWrite {
        PlanWrite {
            with_strategy: self.with_strategy(),
            cpusets_only: self == SettleStep::RestoreCpusets,
            direction: match self {
                SettleStep::ApplyCpuset => Direction::Decrease,
                SettleStep::RestoreAll | SettleStep::RestoreCpusets => Direction::Restore,
            },
            settles: self.mode(),
            // The quota is the fast path's: restoring the cpusets under cfsQuota is no tick's
            // write.
            report: match self {
                SettleStep::RestoreCpusets => PlanReport::Silent,
                SettleStep::RestoreAll | SettleStep::ApplyCpuset => PlanReport::Cpuset,
            },
        }
    }
}

#[cfg(test)]
#[path = "fast_step_tests.rs"]
mod tests;
